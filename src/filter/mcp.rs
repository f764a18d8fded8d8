//! MCP routes in Envoy: [`crate::mcp::exchange`] decides, this module reads what Envoy hands
//! over and carries out what the machine asks ([`EnvoyHost`]).
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

use super::callout;
use super::host::{self, Buffer, Headers};
use super::shared::Shared;
use crate::access::{Caller, Grant};
use crate::mcp::catalog::CatalogCache;
use crate::mcp::exchange::{Event, Exchange, Head, Host, Hybrid, Settings, Step, auth_context};
use crate::mcp::govern;
use crate::mcp::message::{RoutingHeaders, StreamWatch, header_value};
use crate::search::memory::SessionKey;
use proxy_wasm::types::Action;
use std::time::Duration;

/// Request headers that belong to one connection or one body, or that the gateway sets itself.
const NOT_FORWARDED: [&str; 10] = [
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "te",
    "upgrade",
    "expect",
    "accept-encoding",
    "mcp-method",
    "mcp-name",
];

/// An `Mcp-Param-*` header: it mirrors one argument of the client's own `tools/call`, so the
/// gateway's requests carry the ones of their own call instead.
fn is_param_header(name: &str) -> bool {
    name.starts_with(crate::mcp::param_headers::PREFIX)
}

/// A request on an MCP route, from its headers to its last response byte.
pub struct McpRequest {
    exchange: Exchange,
    /// The client's headers (those that are text), for the gateway's own requests.
    headers: Vec<(String, String)>,
    /// The client speaks a revision that names methods in headers (`Mcp-Method`).
    method_headers: bool,
    /// A POST whose body is being read.
    buffering: bool,
    /// The response is an event stream being watched for `tools/list_changed`.
    watch: Option<StreamWatch>,
    server: String,
    recorded: bool,
    /// The request's `:method`.
    method: String,
}

impl McpRequest {
    /// A request to an MCP path, from its headers; under access rules, with what its caller
    /// may do and who it is.
    pub fn new(
        map: &crate::pairs::HeaderMap,
        end_of_stream: bool,
        identity: Option<(Grant, Caller)>,
        memory: Option<&crate::config::Memory>,
    ) -> McpRequest {
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
        McpRequest {
            exchange: Exchange::new(head),
            method_headers: get("mcp-method").is_some(),
            headers: all
                .into_iter()
                .filter(|(n, _)| !NOT_FORWARDED.contains(&n.as_str()) && !is_param_header(n))
                .collect(),
            // Under access rules every body is read: a server might take a tools/call by
            // another method.
            buffering: (post || governed) && !end_of_stream,
            watch: None,
            server: authority,
            recorded: false,
            method,
        }
    }

    /// The request headers: under access rules, a request without the caller identity they
    /// need is answered here.
    pub fn on_headers(&mut self, shared: &Shared) -> Action {
        let step = match EnvoyHost::new(shared, &self.headers, self.method_headers) {
            Some(envoy) => self.exchange.on_headers(&envoy, &self.method),
            None => unavailable(&mut self.exchange, shared),
        };
        if step == Step::Answered {
            self.buffering = false;
            return Action::Pause;
        }
        Action::Continue
    }

    pub fn token(&self) -> Option<u32> {
        self.exchange.token()
    }

    /// A request body callback (`body_size`: everything buffered so far).
    pub fn on_body(&mut self, shared: &Shared, body_size: usize, end_of_stream: bool) -> Action {
        if !self.buffering {
            return Action::Continue;
        }
        let max = shared
            .engine
            .try_borrow()
            .map_or(0, |e| e.config.max_body_bytes);
        // usize::MAX: called from the trailers callback, whatever was buffered.
        if body_size != usize::MAX && body_size > max {
            self.buffering = false;
            let step = match EnvoyHost::new(shared, &self.headers, self.method_headers) {
                Some(envoy) => self.exchange.too_large(&envoy),
                None => unavailable(&mut self.exchange, shared),
            };
            return match step {
                Step::Pass => Action::Continue,
                Step::Wait | Step::Answered => Action::Pause,
            };
        }
        if !end_of_stream {
            return Action::Pause;
        }
        self.buffering = false;
        let body = host::buffer(Buffer::RequestBody, 0, body_size).unwrap_or_default();
        // The route's cluster: Envoy names it from the route entry even before the router ran.
        let cluster = callout::upstream_cluster().unwrap_or_default();
        self.server = format!("{cluster}|{}", self.server);
        self.exchange.set_server(&self.server);
        let step = match (
            EnvoyHost::new(shared, &self.headers, self.method_headers),
            shared.mcp_cache.try_borrow_mut(),
        ) {
            (Some(envoy), Ok(mut cache)) => match envoy.settings() {
                Some(settings) => self.exchange.on_body(&envoy, &mut cache, &settings, &body),
                None => unavailable(&mut self.exchange, shared),
            },
            _ => unavailable(&mut self.exchange, shared),
        };
        match step {
            Step::Pass => Action::Continue,
            Step::Wait | Step::Answered => Action::Pause,
        }
    }

    /// A call this request sent was answered. Returns whether the request goes on upstream.
    pub fn on_call(
        &mut self,
        shared: &Shared,
        token: u32,
        num_headers: usize,
        size: usize,
    ) -> bool {
        let answer = callout::call_answer(num_headers, size);
        let step = match (
            EnvoyHost::new(shared, &self.headers, self.method_headers),
            shared.mcp_cache.try_borrow_mut(),
        ) {
            (Some(envoy), Ok(mut cache)) => match envoy.settings() {
                Some(settings) => self
                    .exchange
                    .on_call(&envoy, &mut cache, &settings, token, answer),
                None => unavailable(&mut self.exchange, shared),
            },
            _ => unavailable(&mut self.exchange, shared),
        };
        step == Step::Pass
    }

    /// The response headers (of the server's answer, or of the gateway's local one).
    pub fn on_response_headers(&mut self, response_header: bool) {
        if let Some(value) = self.exchange.header_value() {
            if !self.recorded {
                self.recorded = true;
                if let Err(status) = host::set_property("toolsift", value.as_bytes()) {
                    log::debug!("cannot record the decision for the access log: {status:?}");
                }
            }
            if response_header {
                if let Err(status) =
                    host::add_header(Headers::Response, "x-toolsift", value.as_bytes())
                {
                    log::debug!("cannot add x-toolsift: {status:?}");
                }
            }
        }
        let content_type = host::header(Headers::Response, "content-type").unwrap_or_default();
        let stream = String::from_utf8_lossy(&content_type)
            .to_ascii_lowercase()
            .contains("text/event-stream");
        if stream {
            self.watch = Some(StreamWatch::default());
        }
    }

    /// A response body chunk passing to the client: watched for `tools/list_changed`.
    pub fn on_response_body(&mut self, shared: &Shared, body_size: usize) -> Action {
        let Some(watch) = self.watch.as_mut() else {
            return Action::Continue;
        };
        let chunk = host::buffer(Buffer::ResponseBody, 0, body_size).unwrap_or_default();
        if watch.feed(&chunk) {
            if self.server.contains('|') || set_server_late(&mut self.server) {
                bump_generation(&self.server);
            }
            shared
                .metrics
                .event(crate::mcp::exchange::Event::ListChanged.counts());
        }
        Action::Continue
    }
}

/// The request's session for `search.memory`: named by `search.memory.session.header`, else by
/// `Mcp-Session-Id` (2025-11-25), on the server `authority`; keyed with its owner (the caller
/// and the credentials), as on LLM routes, but never the same key as an LLM request's.
fn session(
    memory: &crate::config::Memory,
    map: &crate::pairs::HeaderMap,
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

/// The machine could not run (its host could not be had): the request passes, or under access
/// rules, which it could not be checked against, is answered with an error.
fn unavailable(exchange: &mut Exchange, shared: &Shared) -> Step {
    let Some(answer) = exchange.unchecked() else {
        return Step::Pass;
    };
    log::warn!("mcp: {}", answer.message);
    shared
        .metrics
        .add(crate::stats::Stat::Denied(answer.surface), 1);
    let body = govern::error_body("null", answer.code, &answer.message);
    let headers: [(&str, &[u8]); 1] = [("content-type", b"application/json")];
    // Held either way: what cannot be checked never goes upstream.
    if let Err(status) = host::send_response(u32::from(answer.status), &headers, body.as_bytes()) {
        log::warn!("mcp: cannot answer the request: {status:?}");
    }
    Step::Answered
}

/// A stream watched without a body phase (a GET) learns its cluster in the response.
fn set_server_late(server: &mut String) -> bool {
    match callout::upstream_cluster() {
        Some(cluster) => {
            *server = format!("{cluster}|{server}");
            true
        }
        None => false,
    }
}

/// The shared-data key of a server's tool-list generation.
fn generation_key(server: &str) -> String {
    format!(
        "toolsift.mcp.generation.{:016x}",
        xxhash_rust::xxh3::xxh3_64(server.as_bytes())
    )
}

fn read_generation(server: &str) -> (u64, Option<u32>) {
    let (value, cas) = host::shared_data(&generation_key(server));
    let generation = value
        .and_then(|v| <[u8; 8]>::try_from(v.as_slice()).ok())
        .map_or(0, u64::from_le_bytes);
    (generation, cas)
}

/// Raises a server's generation in shared data, so every worker drops its catalog.
fn bump_generation(server: &str) {
    let key = generation_key(server);
    for _ in 0..8 {
        let (generation, cas) = read_generation(server);
        let next = generation.wrapping_add(1).to_le_bytes();
        match host::set_shared_data(&key, &next, cas) {
            Err(host::HostError::CAS_MISMATCH) => continue,
            Err(status) => {
                log::debug!("cannot record the list change: {status:?}");
                return;
            }
            Ok(()) => return,
        }
    }
}

/// The machine's host: Envoy, for the callback at hand.
struct EnvoyHost<'a> {
    shared: &'a Shared,
    engine: std::cell::Ref<'a, crate::pipeline::Engine>,
    headers: &'a [(String, String)],
    method_headers: bool,
}

impl<'a> EnvoyHost<'a> {
    fn new(
        shared: &'a Shared,
        headers: &'a [(String, String)],
        method_headers: bool,
    ) -> Option<EnvoyHost<'a>> {
        Some(EnvoyHost {
            shared,
            engine: shared.engine.try_borrow().ok()?,
            headers,
            method_headers,
        })
    }

    fn settings(&self) -> Option<Settings<'_>> {
        Some(Settings {
            config: &self.engine.config,
            mcp: self.engine.config.mcp.as_ref()?,
            gating: Some(self.engine.gating_rules()).filter(|r| !r.is_empty()),
        })
    }
}

impl Host for EnvoyHost<'_> {
    type Store = super::vectors::SharedData;

    fn hybrid(&self) -> Option<Hybrid<'_, Self::Store>> {
        let (source, embeddings) = self.shared.hybrid(&self.engine.config)?;
        Some(Hybrid {
            source,
            embeddings,
            config: &self.engine.config,
        })
    }

    fn send_embeddings(&self, inputs: &[&str]) -> Option<u32> {
        super::vectors::send(&self.engine.config, inputs)
    }

    fn suggestions(&self) -> Option<std::rc::Rc<crate::suggestions::Suggestions>> {
        self.engine.suggestions().cloned()
    }

    fn store(&self) -> &Self::Store {
        &super::vectors::SharedData
    }

    fn send(
        &self,
        body: &str,
        method: &str,
        name: Option<&str>,
        params: &[(String, String)],
        timeout_ms: u64,
    ) -> Option<u32> {
        let Some(cluster) = callout::upstream_cluster() else {
            log::warn!("mcp: the request's upstream cluster is unknown");
            return None;
        };
        let name = name.map(header_value);
        let mut headers: Vec<(&str, &str)> = self
            .headers
            .iter()
            .filter(|(n, _)| n != ":method" && n != "content-type")
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        headers.push((":method", "POST"));
        headers.push(("content-type", "application/json"));
        if !headers.iter().any(|(n, _)| *n == "accept") {
            headers.push(("accept", "application/json, text/event-stream"));
        }
        if self.method_headers {
            headers.push(("mcp-method", method));
            if let Some(name) = &name {
                headers.push(("mcp-name", name));
            }
            headers.extend(params.iter().map(|(n, v)| (n.as_str(), v.as_str())));
        }
        match host::dispatch(
            &cluster,
            headers,
            body.as_bytes(),
            Duration::from_millis(timeout_ms),
        ) {
            Ok(token) => Some(token),
            Err(status) => {
                log::warn!("mcp: {method} to {cluster} could not be sent: {status:?}");
                None
            }
        }
    }

    fn respond(&self, status: u16, content_type: &str, body: &[u8]) {
        let headers: [(&str, &[u8]); 2] = [
            ("content-type", content_type.as_bytes()),
            ("cache-control", b"no-cache"),
        ];
        if let Err(e) = host::send_response(u32::from(status), &headers, body) {
            log::warn!("mcp: cannot answer the request: {e:?}");
        }
    }

    fn now_millis(&self) -> u64 {
        host::now_millis()
    }

    fn generation(&self, server: &str) -> u64 {
        read_generation(server).0
    }

    fn tools_changed(&self, server: &str) {
        bump_generation(server);
    }

    fn count(&self, event: Event) {
        self.shared.metrics.event(event.counts());
    }
}

/// The catalog cache of a worker, for `mcp.cache_bytes`.
pub fn cache(config: &crate::config::Config) -> CatalogCache {
    CatalogCache::new(config.mcp.as_ref().map_or(0, |m| m.cache_bytes))
}
