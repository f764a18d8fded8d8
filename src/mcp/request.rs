//! One request on an MCP route, from its headers to its last response byte, free of
//! proxy-wasm: which of the client's headers the gateway's own requests carry, whether and
//! how far its body is read, the server it goes to, what the access log and `x-toolsift` say,
//! and a `tools/list_changed` seen in the server's event stream. [`Exchange`] answers the
//! messages; `lifecycle/stream.rs` hands it Envoy's callbacks and carries out what comes back.
//!
//! Nothing is held in a headers callback (Istio's `WasmPlugin` and Envoy Gateway cannot allow
//! it): the request headers go on at once, the body is buffered in the body callbacks, and a
//! request the gateway answers is answered with a local reply. An Envoy `buffer` filter after
//! this one keeps the request from the router until then, so such a request never reaches the
//! server; without it the router has already sent the headers, and Envoy resets that upstream
//! request (the book's `concepts/mcp.md`, "What the MCP server sees"). The gateway's own
//! requests (catalog pages, `_tool_gating`, `call_tool`'s call) go to the route's cluster,
//! with the client's headers: its session (`Mcp-Session-Id`), credentials and protocol
//! version.

use super::catalog::CatalogCache;
use super::exchange::{CallAnswer, Event, Exchange, Head, Host, Settings, Step, auth_context};
use super::govern;
use super::message::{RoutingHeaders, StreamWatch, header_value};
use crate::access::{Caller, Grant, Surface};
use crate::config::Config;
use crate::config::search::Memory;
use crate::pairs::{HeaderMap, PER_CONNECTION};
use crate::search::memory::SessionKey;

/// Request headers the gateway sets itself on its own requests (or, `accept-encoding`, whose
/// answers it must read), besides those of one connection or one body.
const SET_BY_THE_GATEWAY: [&str; 3] = ["accept-encoding", "mcp-method", "mcp-name"];

/// Whether the gateway's own requests carry the client's header `name`.
fn forwarded(name: &str) -> bool {
    !PER_CONNECTION.contains(&name) && !SET_BY_THE_GATEWAY.contains(&name) && !is_param_header(name)
}

/// An `Mcp-Param-*` header: it mirrors one argument of the client's own `tools/call`, so the
/// gateway's requests carry the ones of their own call instead.
fn is_param_header(name: &str) -> bool {
    name.starts_with(super::param_headers::PREFIX)
}

/// What Envoy does with the callback's request or response.
#[derive(Debug, PartialEq, Eq)]
pub enum Flow {
    /// It goes on (resumed, if it was waiting).
    Continue,
    /// It waits: for more of the body, or for a call the gateway sent; or it was answered.
    Pause,
    /// Under access rules, the machine could not run (its host could not be had): what could
    /// not be checked is answered with this error, and never goes upstream.
    Refuse(Refusal),
}

/// An error answer the adapter sends as a local reply, counted in `toolsift.access.denied.<surface>`.
#[derive(Debug, PartialEq, Eq)]
pub struct Refusal {
    pub status: u16,
    /// A JSON-RPC error (`application/json`).
    pub body: String,
    pub surface: Surface,
}

/// What the worker lends a message: the adapter's host, the catalog cache, the settings.
pub struct Context<'a, 'b, H: Host> {
    pub host: &'a H,
    pub cache: &'a mut CatalogCache,
    pub settings: &'a Settings<'b>,
}

/// What the answer's headers are reported with.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// For the access log, once: `%FILTER_STATE(wasm.toolsift:PLAIN)%`.
    pub filter_state: Option<String>,
    /// `x-toolsift` on the answer (`response_header`).
    pub header: Option<String>,
}

/// The client's headers the gateway's own requests carry, fixed at the request's headers.
pub struct Outgoing {
    /// Those that are text and [`forwarded`].
    headers: Vec<(String, String)>,
    /// The client speaks a revision that names methods in headers (`Mcp-Method`).
    method_headers: bool,
}

impl Outgoing {
    /// The headers of a JSON-RPC request the gateway sends the server: the client's, as a
    /// POST of JSON; for a client that sends them, `Mcp-Method: method`, `Mcp-Name: name` and
    /// the `Mcp-Param-*` headers `params` of the gateway's own call.
    pub fn headers(
        &self,
        method: &str,
        name: Option<&str>,
        params: &[(String, String)],
    ) -> Vec<(String, String)> {
        let mut headers: Vec<(String, String)> = self
            .headers
            .iter()
            .filter(|(n, _)| n != ":method" && n != "content-type")
            .cloned()
            .collect();
        let mut add = |name: &str, value: &str| headers.push((name.to_owned(), value.to_owned()));
        add(":method", "POST");
        add("content-type", "application/json");
        if !self.headers.iter().any(|(n, _)| n == "accept") {
            add("accept", "application/json, text/event-stream");
        }
        if self.method_headers {
            add("mcp-method", method);
            if let Some(name) = name {
                add("mcp-name", &header_value(name));
            }
            for (n, v) in params {
                add(n, v);
            }
        }
        headers
    }
}

/// A request on an MCP route.
pub struct McpRequest {
    exchange: Exchange,
    /// A POST (or, under access rules, any request) whose body is being read.
    buffering: bool,
    /// The response is an event stream being watched for `tools/list_changed`.
    watch: Option<StreamWatch>,
    /// `<cluster>|<authority>` once the cluster is known; the authority until then.
    server: String,
    recorded: bool,
    /// The request's `:method`.
    method: String,
}

impl McpRequest {
    /// A request to an MCP path, from its headers; under access rules, with what its caller
    /// may do and who it is. The second half is what the gateway's own requests carry.
    pub fn new(
        map: &HeaderMap,
        end_of_stream: bool,
        identity: Option<(Grant, Caller)>,
        memory: Option<&Memory>,
    ) -> (McpRequest, Outgoing) {
        let text = |(n, v): (&[u8], &[u8])| {
            Some((
                std::str::from_utf8(n).ok()?.to_owned(),
                std::str::from_utf8(v).ok()?.to_owned(),
            ))
        };
        let all: Vec<(String, String)> = map.iter().filter_map(text).collect();
        let get = |name: &str| all.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
        let credentials = ["authorization", "cookie"].into_iter().flat_map(|name| {
            map.iter()
                .filter(move |(n, _)| *n == name.as_bytes())
                .map(|(_, v)| v)
        });
        let (grant, caller) = identity.unzip();
        let auth = auth_context(credentials, caller.as_ref());
        let authority = get(":authority").unwrap_or_default();
        let session = memory.and_then(|m| session(m, map, caller.as_ref(), &authority));
        let method = get(":method").unwrap_or_default();
        let post = method == "POST";
        let governed = grant.is_some();
        let head = Head {
            server: authority.clone(),
            revision: get("mcp-protocol-version").unwrap_or_default(),
            auth,
            grant,
            routing: RoutingHeaders {
                method: get("mcp-method"),
                name: get("mcp-name"),
                params: all.iter().any(|(n, _)| is_param_header(n)),
            },
            session,
        };
        let outgoing = Outgoing {
            method_headers: get("mcp-method").is_some(),
            headers: all.into_iter().filter(|(n, _)| forwarded(n)).collect(),
        };
        let request = McpRequest {
            exchange: Exchange::new(head),
            // Under access rules every body is read: a server might take a tools/call by
            // another method.
            buffering: (post || governed) && !end_of_stream,
            watch: None,
            server: authority,
            recorded: false,
            method,
        };
        (request, outgoing)
    }

    /// The call this request waits for.
    pub fn token(&self) -> Option<u32> {
        self.exchange.token()
    }

    /// The request headers (`host`: `None` when it could not be had): under access rules, a
    /// request without the caller identity they need is answered here.
    pub fn on_headers<H: Host>(&mut self, host: Option<&H>) -> Flow {
        let Some(host) = host else {
            return self.unchecked();
        };
        if self.exchange.on_headers(host, &self.method) == Step::Answered {
            self.buffering = false;
            return Flow::Pause;
        }
        Flow::Continue
    }

    /// A request body callback (`body_size`: everything buffered so far; `usize::MAX` from
    /// the trailers callback: whatever was buffered).
    pub fn on_body<H: Host>(
        &mut self,
        body_size: usize,
        end_of_stream: bool,
        context: Option<Context<'_, '_, H>>,
    ) -> Flow {
        if !self.buffering {
            return Flow::Continue;
        }
        let max = context
            .as_ref()
            .map_or(0, |c| c.settings.config.max_body_bytes);
        if body_size != usize::MAX && body_size > max {
            self.buffering = false;
            return match context {
                Some(c) => flow(self.exchange.too_large(c.host)),
                None => self.unchecked(),
            };
        }
        if !end_of_stream {
            return Flow::Pause;
        }
        self.buffering = false;
        let Some(Context {
            host,
            cache,
            settings,
        }) = context
        else {
            return self.unchecked();
        };
        let body = host.request_body(body_size);
        // The route's cluster: Envoy names it from the route entry even before the router ran.
        let cluster = host.upstream_cluster().unwrap_or_default();
        self.server = format!("{cluster}|{}", self.server);
        self.exchange.set_server(&self.server);
        flow(self.exchange.on_body(host, cache, settings, &body))
    }

    /// A call this request sent was answered: [`Flow::Continue`] sends the request upstream.
    pub fn on_call<H: Host>(
        &mut self,
        token: u32,
        answer: CallAnswer,
        context: Option<Context<'_, '_, H>>,
    ) -> Flow {
        match context {
            Some(c) => flow(
                self.exchange
                    .on_call(c.host, c.cache, c.settings, token, answer),
            ),
            None => self.unchecked(),
        }
    }

    /// The response headers (of the server's answer, or of the gateway's local one), with
    /// their `content-type`: an event stream is watched for `tools/list_changed`.
    pub fn on_response_headers(
        &mut self,
        config: Option<&Config>,
        content_type: Option<&[u8]>,
    ) -> Report {
        let mut report = Report::default();
        if let Some(value) = self.exchange.header_value() {
            if !self.recorded {
                self.recorded = true;
                report.filter_state = Some(value.to_owned());
            }
            if config.is_some_and(|c| c.response_header) {
                report.header = Some(value.to_owned());
            }
        }
        let stream = content_type.is_some_and(|t| {
            String::from_utf8_lossy(t)
                .to_ascii_lowercase()
                .contains("text/event-stream")
        });
        if stream {
            self.watch = Some(StreamWatch::default());
        }
        report
    }

    /// A response body chunk passing to the client (`body_size`: its length). A
    /// `tools/list_changed` in a watched stream raises the server's generation, so every
    /// worker drops its catalog.
    pub fn on_response_body<H: Host>(&mut self, host: &H, body_size: usize) {
        let Some(watch) = self.watch.as_mut() else {
            return;
        };
        if !watch.feed(&host.response_body(body_size)) {
            return;
        }
        // A stream watched without a body phase (a GET) learns its cluster here.
        if !self.server.contains('|') {
            if let Some(cluster) = host.upstream_cluster() {
                self.server = format!("{cluster}|{}", self.server);
            }
        }
        if self.server.contains('|') {
            host.tools_changed(&self.server);
        }
        host.count(Event::ListChanged);
    }

    /// The machine could not run: the request passes, or under access rules, which it could
    /// not be checked against, is refused.
    fn unchecked(&mut self) -> Flow {
        let Some(answer) = self.exchange.unchecked() else {
            return Flow::Continue;
        };
        self.buffering = false;
        Flow::Refuse(Refusal {
            status: answer.status,
            body: govern::error_body("null", answer.code, &answer.message),
            surface: answer.surface,
        })
    }
}

fn flow(step: Step) -> Flow {
    match step {
        Step::Pass => Flow::Continue,
        Step::Wait | Step::Answered => Flow::Pause,
    }
}

/// The request's session for `search.memory`: named by `search.memory.session.header`, else by
/// `Mcp-Session-Id` (2025-11-25), on the server `authority`; keyed with its owner (the caller
/// and the credentials), as on LLM routes, but never the same key as an LLM request's.
fn session(
    memory: &Memory,
    map: &HeaderMap,
    caller: Option<&Caller>,
    authority: &str,
) -> Option<SessionKey> {
    let (source, value) = match memory.session.header.as_deref().and_then(|h| map.get(h)) {
        Some(value) => ("mcp.header", value),
        None => ("mcp.session", map.get("mcp-session-id")?),
    };
    let caller = caller.map(Caller::key);
    let owner = crate::search::alias::owner(caller.as_deref(), |n| map.get(n));
    // A name that is only whitespace names no session (`SessionKey::new`).
    if value.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    let mut name = authority.as_bytes().to_vec();
    name.push(0);
    name.extend_from_slice(value);
    SessionKey::new(owner, source, &name)
}

/// One request on an MCP route, driven event by event as the adapter drives it: headers, body,
/// the gateway's calls answered, the answer's headers and chunks.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::exchange::testing::*;
    use serde_json::Value;

    fn headers(pairs: &[(&str, &str)]) -> crate::pairs::HeaderMap {
        crate::pairs::HeaderMap::new(crate::pairs::encode(pairs))
    }

    const CLIENT: [(&str, &str); 9] = [
        (":method", "POST"),
        (":authority", "tools.internal"),
        (":path", "/mcp"),
        ("content-type", "application/json"),
        ("content-length", "45"),
        ("authorization", "Bearer secret"),
        ("mcp-session-id", "s-1"),
        ("mcp-protocol-version", "2025-11-25"),
        ("accept-encoding", "gzip"),
    ];

    fn context<'a, 'b>(
        host: &'a Mock,
        cache: &'a mut CatalogCache,
        settings: &'a Settings<'b>,
    ) -> Option<Context<'a, 'b, Mock>> {
        Some(Context {
            host,
            cache,
            settings,
        })
    }

    /// `tools/list` from its headers to its answer: the body is buffered until it is whole,
    /// the catalog is fetched from the route's cluster with the client's session and
    /// credentials (less the headers of one connection or one body), the gateway answers, and
    /// what it did is recorded once and said in `x-toolsift`.
    #[test]
    fn a_tools_list_from_its_headers_to_its_answer() {
        let mut setup = Setup::new(r#"{"mcp":{},"response_header":true}"#);
        let host = Mock {
            request_body: LIST.as_bytes().to_vec(),
            cluster: Some("mcp".into()),
            ..Mock::default()
        };
        let (mut request, outgoing) = McpRequest::new(&headers(&CLIENT), false, None, None);
        assert_eq!(request.on_headers(Some(&host)), Flow::Continue);
        let settings = setup.settings();
        let mut cache = CatalogCache::new(1 << 20);
        let half = LIST.len() / 2;
        assert_eq!(
            request.on_body(half, false, context(&host, &mut cache, &settings)),
            Flow::Pause,
            "buffered until the body is whole"
        );
        assert_eq!(
            request.on_body(LIST.len(), true, context(&host, &mut cache, &settings)),
            Flow::Pause,
            "waits for the catalog"
        );
        assert_eq!(host.last_sent()["method"], "tools/list");
        let id = host.last_sent()["id"].to_string();
        let token = request.token().unwrap();
        let answer = list_answer(&id, &catalog_tools(), None, "");
        assert_eq!(
            request.on_call(token, answer, context(&host, &mut cache, &settings)),
            Flow::Pause,
            "answered by the gateway"
        );
        let (status, listed) = host.answer();
        assert_eq!(status, 200);
        assert!(listed["result"]["tools"].to_string().contains("find_tools"));
        let sent = outgoing.headers("tools/list", None, &[]);
        let names: Vec<&str> = sent.iter().map(|(n, _)| n.as_str()).collect();
        for kept in [
            "authorization",
            "mcp-session-id",
            "mcp-protocol-version",
            ":path",
        ] {
            assert!(names.contains(&kept), "{kept} in {names:?}");
        }
        for dropped in ["content-length", "accept-encoding", "mcp-method"] {
            assert!(!names.contains(&dropped), "{dropped} in {names:?}");
        }
        assert!(sent.contains(&(":method".into(), "POST".into())));
        assert!(sent.contains(&(
            "accept".into(),
            "application/json, text/event-stream".into()
        )));
        let report = request.on_response_headers(Some(&setup.config), Some(b"application/json"));
        let said = report.header.clone().unwrap();
        assert!(said.starts_with("mcp="), "{said}");
        assert_eq!(report.filter_state.as_deref(), Some(said.as_str()));
        let again = request.on_response_headers(Some(&setup.config), None);
        assert_eq!(again.filter_state, None, "recorded once");
        setup.config.response_header = false;
        assert_eq!(
            request
                .on_response_headers(Some(&setup.config), None)
                .header,
            None
        );
    }

    /// A client that names methods in headers gets them on the gateway's requests too, with
    /// the `Mcp-Param-*` headers of the gateway's own call in place of its own.
    #[test]
    fn method_headers_name_the_gateways_own_call() {
        let mut client = CLIENT.to_vec();
        client.extend([
            ("mcp-method", "tools/call"),
            ("mcp-name", "call_tool"),
            ("mcp-param-city", "Paris"),
        ]);
        let (_, outgoing) = McpRequest::new(&headers(&client), false, None, None);
        let params = [("mcp-param-q".to_owned(), "x".to_owned())];
        let sent = outgoing.headers("tools/call", Some("get_weather"), &params);
        assert!(sent.contains(&("mcp-method".into(), "tools/call".into())));
        assert!(sent.contains(&("mcp-name".into(), "get_weather".into())));
        assert!(sent.contains(&("mcp-param-q".into(), "x".into())));
        assert!(!sent.iter().any(|(n, _)| n == "mcp-param-city"), "{sent:?}");
        assert_eq!(sent.iter().filter(|(n, _)| n == "mcp-method").count(), 1);
    }

    /// A body over `max_body_bytes` goes on unread; under access rules it is refused. A GET
    /// (nothing to read) goes on at once.
    #[test]
    fn a_body_too_large_passes_unread_unless_access_rules_govern_it() {
        let setup = Setup::new(r#"{"mcp":{},"max_body_bytes":16}"#);
        let host = Mock::default();
        let settings = setup.settings();
        let mut cache = CatalogCache::new(1 << 20);
        let (mut request, _) = McpRequest::new(&headers(&CLIENT), false, None, None);
        assert_eq!(
            request.on_body(17, false, context(&host, &mut cache, &settings)),
            Flow::Continue
        );
        assert_eq!(
            request.on_body(40, true, context(&host, &mut cache, &settings)),
            Flow::Continue,
            "no longer read"
        );
        assert!(host.sent.borrow().is_empty() && host.answered.borrow().is_empty());

        let mut get = CLIENT.to_vec();
        get[0] = (":method", "GET");
        let (mut request, _) = McpRequest::new(&headers(&get), false, None, None);
        assert_eq!(
            request.on_body(5, true, context(&host, &mut cache, &settings)),
            Flow::Continue
        );

        let mut governed = crate::mcp::exchange::testing::setup("refused");
        let head_grant = governed.head("2025-11-25", &["platform"]).grant;
        let caller = Caller::new(["platform".to_owned()]);
        let identity = head_grant.map(|g| (g, caller));
        governed.config.max_body_bytes = 16;
        let settings = governed.settings();
        let (mut request, _) = McpRequest::new(&headers(&get), false, identity, None);
        assert_eq!(
            request.on_body(17, false, context(&host, &mut cache, &settings)),
            Flow::Pause
        );
        let (status, refused) = host.answer();
        assert_eq!(status, 413, "{refused}");
    }

    /// Without its host (the engine could not be had), a request passes; under access rules
    /// it is refused instead, with a JSON-RPC error counted as a denial.
    #[test]
    fn a_request_that_cannot_be_checked_is_refused_only_under_access_rules() {
        let (mut request, _) = McpRequest::new(&headers(&CLIENT), false, None, None);
        assert_eq!(request.on_headers::<Mock>(None), Flow::Continue);
        assert_eq!(request.on_body::<Mock>(10, true, None), Flow::Continue);

        let governed = crate::mcp::exchange::testing::setup("refused");
        let grant = governed.head("2025-11-25", &["platform"]).grant.unwrap();
        let identity = Some((grant, Caller::new(["platform".to_owned()])));
        let (mut request, _) = McpRequest::new(&headers(&CLIENT), false, identity, None);
        let Flow::Refuse(Refusal {
            status,
            body,
            surface,
        }) = request.on_headers::<Mock>(None)
        else {
            panic!("refused")
        };
        assert_eq!((status, surface), (500, Surface::McpRequest));
        let error: Value = serde_json::from_str(&body).unwrap();
        assert!(error["error"]["code"].is_i64(), "{body}");
        assert_eq!(
            request.on_body::<Mock>(10, true, None),
            Flow::Continue,
            "refused once: the body is no longer read"
        );
    }

    /// A `tools/list_changed` in the server's event stream, split over two chunks, raises the
    /// generation of the server the request went to (cluster and authority), once.
    #[test]
    fn a_list_changed_in_the_stream_raises_the_servers_generation() {
        let mut get = CLIENT.to_vec();
        get[0] = (":method", "GET");
        let host = Mock {
            cluster: Some("mcp".into()),
            ..Mock::default()
        };
        let (mut request, _) = McpRequest::new(&headers(&get), true, None, None);
        request.on_response_headers(None, Some(b"Text/Event-Stream; charset=utf-8"));
        let event = "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\n";
        let (first, second) = event.split_at(30);
        for chunk in [first, second] {
            *host.response_body.borrow_mut() = chunk.as_bytes().to_vec();
            request.on_response_body(&host, chunk.len());
        }
        assert_eq!(*host.changed.borrow(), ["mcp|tools.internal"]);
        assert_eq!(*host.events.borrow(), [Event::ListChanged]);

        let (mut json, _) = McpRequest::new(&headers(&get), true, None, None);
        json.on_response_headers(None, Some(b"application/json"));
        *host.response_body.borrow_mut() = event.as_bytes().to_vec();
        json.on_response_body(&host, event.len());
        assert_eq!(
            host.changed.borrow().len(),
            1,
            "only event streams are watched"
        );
    }
}
