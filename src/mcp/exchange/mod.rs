//! One client request on an MCP route, as a state machine: the body in, then the answers to
//! the requests the gateway sends the server; out, what Envoy should do with the client's
//! request, through a small [`Host`] trait (the filter implements it over proxy-wasm; the
//! tests over a recording mock).
//!
//! - `tools/list` is answered by the gateway: `find_tools`, `call_tool` and the
//!   `always_include` tools.
//! - `tools/call find_tools` is answered by the gateway: the server's catalog ranked against the
//!   query (after `_tool_gating`, when the server has it).
//! - `tools/call call_tool` becomes the named tool's `tools/call`, sent by the gateway with the
//!   client's id, headers and `_meta`; the server's answer is the client's.
//! - `tools/call` of a tool the server listed passes through; of any other tool, it is a
//!   JSON-RPC error naming `find_tools`, and the server never sees the call.
//! - Everything else (other methods, notifications, batches, responses) passes through.
//!
//! The catalog (every page, following `nextCursor`) is fetched from the server the request goes
//! to, with the client's session and credentials, and cached ([`super::catalog`]). When it
//! cannot be had, requests pass through (the client then sees the server as it is), except
//! `find_tools` and `call_tool`, which only the gateway knows: they get an error.
//!
//! Under access rules ([`Head::grant`]) the caller sees, finds and calls only the tools its
//! grant allows, and nothing reaches the server ungoverned: a request without the identity
//! the rules need is refused at its headers; a message the gateway cannot read (or a batch
//! holding a tools request) is refused; without the catalog, `tools/list` is refused and a
//! direct call is decided by its name (refused when a rule needs annotations). What is
//! answered is in [`super::govern`].
//!
//! The files: `fetch.rs` gets the server's catalog, page by page; `list.rs` answers
//! `tools/list` and names the meta-tools; `find.rs` answers `find_tools`; `resources.rs` adds
//! the gateway's own resource; this one holds the machine, its host and the calls;
//! `testing.rs` the recording host the tests of each share.

mod fetch;
mod find;
mod list;
mod resources;
#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;

use super::catalog::{self, CatalogCache, Page, ServerCatalog};
use super::gating::{self, Verdict};
use super::govern::{self, Refusal, Unfit};
use super::message::{
    self, Incoming, Outcome, Request, RoutingHeaders, Screened, TOOLS_LIST_CHANGED,
};
use super::param_headers::{may_declare, param_headers};
use crate::access::{Caller, Grant, Surface, Why};
use crate::config::Config;
use crate::embeddings::{Fallback, Gathered, SharedBytes, Slot};
use crate::pipeline::header_safe;
use crate::search::memory::{Memory, SessionKey};
pub use crate::search::respond::Hybrid;
use crate::search::round::{DEFAULT_LIMIT, MAX_LIMIT};
use list::Names;
use serde_json::{Map, Value, json};
use std::rc::Rc;

/// The second meta-tool: calls a tool `find_tools` returned, for clients that only call
/// tools they listed.
pub const CALL_TOOL: &str = "call_tool";

/// The resource in which the gateway says what its search can do.
pub const CAPABILITIES_URI: &str = "toolsift://capabilities";

/// The JSON-RPC ids of the gateway's own requests: numbers (Envoy's mcp_router answers a
/// string id as if it were 0), far from the small ones clients count up from.
pub const LIST_ID: u64 = 7_400_000_000;
pub const GATING_ID: &str = "7400000999";

/// The first protocol revision without sessions, whose results carry `resultType`.
pub const MODERN_REVISION: &str = "2026-07-28";

/// The JSON-RPC error of a request whose `Mcp-Method`/`Mcp-Name` disagree with its body
/// (2026-07-28), answered with HTTP 400.
pub const HEADER_MISMATCH: i64 = -32020;

/// What the gateway needs of the host (Envoy).
pub trait Host {
    type Store: SharedBytes;
    /// Sends a JSON-RPC request to the MCP server the client's request goes to, with the
    /// client's headers (session, credentials) and, for clients that send them, `Mcp-Method:
    /// method`, `Mcp-Name: name` and the `Mcp-Param-*` headers `params` (in place of any the
    /// client sent). Returns the call's token.
    fn send(
        &self,
        body: &str,
        method: &str,
        name: Option<&str>,
        params: &[(String, String)],
        timeout_ms: u64,
    ) -> Option<u32>;
    /// Answers the client's request.
    fn respond(&self, status: u16, content_type: &str, body: &[u8]);
    /// Milliseconds since the epoch.
    fn now_millis(&self) -> u64;
    /// The server's tool-list generation, shared by every worker.
    fn generation(&self, server: &str) -> u64;
    /// The server's tool list changed: raise its generation.
    fn tools_changed(&self, server: &str);
    fn count(&self, event: Event);
    /// Hybrid ranking's vector source and settings; `None` with keyword ranking.
    fn hybrid(&self) -> Option<Hybrid<'_, Self::Store>>;
    /// Sends an embeddings request for `inputs`.
    fn send_embeddings(&self, inputs: &[&str]) -> Option<u32>;
    /// The `suggestions` catalog, `None` without the section.
    fn suggestions(&self) -> Option<std::rc::Rc<crate::suggestions::Suggestions>>;
    /// The store shared by every worker, where `search.memory` keeps sessions.
    fn store(&self) -> &Self::Store;
    /// The first `len` bytes of the request body buffered so far (all of them for
    /// `usize::MAX`).
    fn request_body(&self, len: usize) -> Vec<u8>;
    /// The first `len` bytes of the response body chunk passing.
    fn response_body(&self, len: usize) -> Vec<u8>;
    /// The cluster the route sends the request to, when it is known.
    fn upstream_cluster(&self) -> Option<String>;
}

/// What the gateway counts ([`Event::counts`] says in which stats).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// `tools/list` answered by the gateway; the estimated tokens it saved the client.
    Listed {
        tokens_saved: usize,
    },
    FindTools,
    CallTool,
    /// A direct call of a listed tool, passed through (or sent by the gateway with the
    /// `Mcp-Param-*` headers its client could not know).
    Direct,
    /// A call of a tool the server did not list (or the gating tool), refused.
    Unknown,
    CatalogHit,
    /// A catalog fetched: its pages.
    CatalogFetched(usize),
    CatalogFailed,
    GatingCalled,
    GatingFailed,
    Excluded(usize),
    Claimed,
    ListChanged,
    /// `ranking: hybrid`: a `find_tools` query ranked with embeddings, or by keyword instead
    /// (the service failed, or the catalog's tools are not all embedded yet).
    RankedHybrid,
    RankedKeyword,
    /// An embeddings call with this many inputs.
    EmbeddingsCall(usize),
    /// Why a `find_tools` query went by keyword.
    Fallback(Fallback),
    /// Under access rules: requests refused whole, server tools left out of what a client can
    /// list or find, calls refused (`toolsift.access.denied.<surface>`).
    Denied(Surface, usize),
    /// Tools suggested (`suggestions`) in a `find_tools` result.
    Suggested(usize),
    /// A session's `find_tools` refused for going past `search.max_searches`.
    SearchStorm,
}

impl Event {
    /// The stats this counts in.
    pub fn counts(self) -> crate::stats::Counts {
        use crate::stats::{Fixed, Stat, one, two};
        match self {
            Event::Listed { tokens_saved } => two(
                (Fixed::McpToolsList, 1),
                Some((Fixed::McpTokensSaved, tokens_saved as u64)),
            ),
            Event::FindTools => one(Fixed::McpFindTools, 1),
            Event::Suggested(tools) => one(Fixed::McpSuggested, tools),
            Event::CallTool => one(Fixed::McpCallTool, 1),
            Event::Direct => one(Fixed::McpDirectCalls, 1),
            Event::Unknown => one(Fixed::McpUnknownTool, 1),
            Event::CatalogHit => one(Fixed::McpCatalogHits, 1),
            Event::CatalogFetched(pages) => two(
                (Fixed::McpCatalogFetches, 1),
                Some((Fixed::McpCatalogPages, pages as u64)),
            ),
            Event::CatalogFailed => one(Fixed::McpCatalogFailed, 1),
            Event::GatingCalled => one(Fixed::McpGatingCalls, 1),
            Event::GatingFailed => one(Fixed::McpGatingFailed, 1),
            Event::Excluded(n) => one(Fixed::McpGatingExcluded, n),
            Event::Claimed => one(Fixed::McpGatingClaimed, 1),
            Event::ListChanged => one(Fixed::McpListChanged, 1),
            Event::RankedHybrid => one(Fixed::RankedHybrid, 1),
            Event::RankedKeyword => one(Fixed::RankedKeyword, 1),
            Event::EmbeddingsCall(inputs) => crate::stats::embeddings_call(inputs),
            Event::Fallback(reason) => one(Stat::Fallback(reason), 1),
            Event::Denied(surface, n) => one(Stat::Denied(surface), n),
            Event::SearchStorm => one(Fixed::McpSearchStorms, 1),
        }
    }
}

/// The request's headers that matter here.
#[derive(Debug, Clone, Default)]
pub struct Head {
    /// The server's identity: the cluster and authority the request goes to.
    pub server: String,
    /// `MCP-Protocol-Version` ("" when absent).
    pub revision: String,
    /// A hash of the authorization context ([`auth_context`]), 0 for none.
    pub auth: u64,
    /// Under access rules: what the request's caller may do.
    pub grant: Option<Grant>,
    /// `Mcp-Method` and `Mcp-Name`, which must agree with the body.
    pub routing: RoutingHeaders,
    /// The client's session for `search.memory` (`search.memory.session.header`, else
    /// `Mcp-Session-Id`), keyed with its owner.
    pub session: Option<SessionKey>,
}

impl Head {
    pub fn modern(&self) -> bool {
        self.revision.as_str() >= MODERN_REVISION
    }
}

/// The authorization context a request's private catalogs are kept for: the values of its
/// `authorization` and `cookie` headers (`credentials`) and, under access rules, its caller's
/// identity, which may come from another header or from metadata: a catalog fetched for one
/// caller is never shown to another. 0 for none.
pub fn auth_context<'a>(
    credentials: impl IntoIterator<Item = &'a [u8]>,
    caller: Option<&Caller>,
) -> u64 {
    let mut bytes: Vec<u8> = Vec::new();
    for value in credentials {
        bytes.extend_from_slice(value);
        bytes.push(0);
    }
    if let Some(caller) = caller {
        bytes.extend_from_slice(b"\0identity\0");
        bytes.extend_from_slice(caller.key().as_bytes());
    }
    if bytes.is_empty() {
        0
    } else {
        xxhash_rust::xxh3::xxh3_64(&bytes)
    }
}

/// A call's answer, as `on_http_call_response` sees it.
#[derive(Debug, Clone, Default)]
pub struct CallAnswer {
    /// `None`: no response (reset, timeout).
    pub status: Option<u16>,
    pub content_type: String,
    pub body: Vec<u8>,
}

/// What Envoy does with the client's request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// It goes upstream as it is (resumed, if it was waiting).
    Pass,
    /// It waits for a call the gateway sent.
    Wait,
    /// The gateway answered it.
    Answered,
}

/// What the client asked the gateway for.
#[derive(Debug, Clone)]
enum Want {
    List,
    Find {
        query: Option<String>,
        limit: usize,
    },
    CallTool {
        name: Option<String>,
        arguments: Option<String>,
    },
    Direct {
        name: String,
    },
}

enum State {
    Idle,
    Fetching {
        token: u32,
        page_id: String,
        pages: Vec<Page>,
    },
    Gating {
        token: u32,
        catalog: Rc<ServerCatalog>,
    },
    Calling {
        token: u32,
    },
    /// The server's `resources/list` is out.
    Resources {
        token: u32,
    },
    /// `find_tools`'s query (and some of the catalog's tools) being embedded.
    Embedding {
        token: u32,
        catalog: Rc<ServerCatalog>,
        verdict: Option<Verdict>,
        gathered: Gathered,
        slots: Vec<Slot>,
    },
    Done,
}

/// The settings an exchange reads.
pub struct Settings<'a> {
    pub config: &'a Config,
    pub mcp: &'a crate::config::mcp::Mcp,
    /// `gating.rules`, which `find_tools` heeds as it heeds a server's `_tool_gating`.
    pub gating: Option<&'a crate::gating::Rules>,
}

/// One client request on an MCP route.
pub struct Exchange {
    head: Head,
    request: Option<Request>,
    /// The request's `params._meta` (the 2026-07-28 envelope), for the gateway's own requests.
    meta: Option<String>,
    want: Option<Want>,
    state: State,
    /// What was done, for `x-toolsift`.
    outcome: Option<String>,
    /// `find_tools`: the verdict of `gating.rules` for its query, until the search runs.
    rules_verdict: Option<Verdict>,
    /// `search.memory` and the request's session, when both are there.
    memory: Option<(Memory, SessionKey)>,
    /// `find_tools`: the tools the session found before (listed to the client).
    session_tools: Vec<String>,
}

impl Exchange {
    pub fn new(head: Head) -> Exchange {
        Exchange {
            head,
            request: None,
            meta: None,
            want: None,
            state: State::Idle,
            outcome: None,
            rules_verdict: None,
            memory: None,
            session_tools: Vec::new(),
        }
    }

    /// The server's identity, once the route's cluster is known.
    pub fn set_server(&mut self, server: &str) {
        server.clone_into(&mut self.head.server);
    }

    /// The machine cannot run (its host could not be had). Under access rules, the refusal the
    /// host must send (noted for `x-toolsift`); `None` otherwise: the request passes.
    pub fn unchecked(&mut self) -> Option<govern::Answer> {
        self.head.grant.as_ref()?;
        let answer = Unfit::Internal.answer();
        self.outcome = Some(format!("mcp=refused reason={}", answer.reason));
        Some(answer)
    }

    /// The token of the call this request waits for.
    pub fn token(&self) -> Option<u32> {
        match self.state {
            State::Fetching { token, .. }
            | State::Gating { token, .. }
            | State::Calling { token }
            | State::Resources { token }
            | State::Embedding { token, .. } => Some(token),
            _ => None,
        }
    }

    /// What `x-toolsift` says about this request, once something was done.
    pub fn header_value(&self) -> Option<&str> {
        self.outcome.as_deref()
    }

    /// The request's headers (`method`: its `:method`). Under access rules, a request whose
    /// caller lacks the identity the rules need is refused here, before the server sees any of
    /// it (CORS preflights excepted: they carry no credentials).
    pub fn on_headers<H: Host>(&mut self, host: &H, method: &str) -> Step {
        let lacking = |g: &Grant| (!g.is_identified()).then_some(Why::NoIdentity);
        match &self.head.grant {
            Some(grant) if method != "OPTIONS" => {
                let refused =
                    grant.judge_request(Surface::McpRequest, None, lacking(grant), lacking);
                match refused {
                    Some(_) => self.refuse(host, Unfit::NoIdentity),
                    None => Step::Pass,
                }
            }
            _ => Step::Pass,
        }
    }

    /// The body is larger than the gateway reads: it passes unread, or under access rules,
    /// which could not check it, is refused.
    pub fn too_large<H: Host>(&mut self, host: &H) -> Step {
        if self.head.grant.is_some() {
            self.refuse(host, Unfit::TooLarge)
        } else {
            Step::Pass
        }
    }

    /// The client's whole body.
    pub fn on_body<H: Host>(
        &mut self,
        host: &H,
        cache: &mut CatalogCache,
        settings: &Settings,
        body: &[u8],
    ) -> Step {
        let governed = self.head.grant.is_some();
        let request = match message::incoming(body) {
            // Whatever the gateway would do with it, a request whose headers say otherwise is
            // refused as the server would refuse it: neither an answer meant for another
            // request nor a way around a refusal.
            Incoming::Request(request) => {
                match message::routing_mismatch(&self.head.routing, &request) {
                    Some(mismatch) => {
                        self.request = Some(request);
                        self.outcome = Some("mcp=refused reason=header_mismatch".to_owned());
                        return self.error(host, 400, HEADER_MISMATCH, mismatch);
                    }
                    None => request,
                }
            }
            // Under access rules, nothing the gateway cannot check may reach the server.
            Incoming::Other if governed => {
                return match message::screen(body) {
                    Screened::Harmless => Step::Pass,
                    Screened::Batch => self.refuse(host, Unfit::Batch),
                    Screened::Unreadable => self.refuse(host, Unfit::Unreadable),
                };
            }
            Incoming::Other => return Step::Pass,
        };
        let tools = request.method.starts_with("tools/");
        let Some(params) = request.params() else {
            if governed && tools {
                self.request = Some(request);
                return self.refuse(host, Unfit::Unreadable);
            }
            return Step::Pass;
        };
        let want = match request.method.as_str() {
            "tools/list" => Want::List,
            "tools/call" => {
                let Some(name) = params.name.clone() else {
                    if governed {
                        self.request = Some(request);
                        return self.refuse(host, Unfit::Unreadable);
                    }
                    return Step::Pass;
                };
                let find = &settings.config.search.tool_name;
                if name == *find
                    || name == CALL_TOOL
                    || is_numbered(&name, find)
                    || is_numbered(&name, CALL_TOOL)
                {
                    // A meta-tool, or a server tool that shares its name: which it is depends on
                    // the catalog.
                    meta_want(&name, params.arguments.as_deref())
                } else {
                    Want::Direct { name }
                }
            }
            // The first page of the server's resources, with the gateway's own added.
            "resources/list" if params.cursor.is_none() => {
                self.request = Some(request);
                return self.list_resources(host, settings, body);
            }
            "resources/read" if params.uri.as_deref() == Some(CAPABILITIES_URI) => {
                self.request = Some(request);
                return self.capabilities(host, settings);
            }
            _ => return Step::Pass,
        };
        self.meta = params.meta.as_deref().map(without_progress_token);
        self.request = Some(request);
        self.want = Some(want);
        self.memory = settings
            .config
            .search
            .memory
            .as_ref()
            .zip(self.head.session)
            .map(|(config, key)| (Memory::new(config), key));
        let key = self.key();
        let now = host.now_millis();
        let generation = host.generation(&self.head.server);
        match cache.get(&key, self.head.auth, now, generation) {
            Some(catalog) => {
                host.count(Event::CatalogHit);
                self.with_catalog(host, settings, &catalog)
            }
            None => self.fetch_page(host, settings, Vec::new(), None),
        }
    }

    /// A call the gateway sent was answered.
    pub fn on_call<H: Host>(
        &mut self,
        host: &H,
        cache: &mut CatalogCache,
        settings: &Settings,
        token: u32,
        answer: CallAnswer,
    ) -> Step {
        if self.token() != Some(token) {
            return Step::Wait;
        }
        let state = std::mem::replace(&mut self.state, State::Done);
        match state {
            State::Fetching { page_id, pages, .. } => {
                self.on_page(host, cache, settings, &page_id, pages, &answer)
            }
            State::Gating { catalog, .. } => {
                let reply = message::server_reply(&answer.content_type, &answer.body, GATING_ID);
                self.note_notifications(host, &reply.notifications);
                let verdict = match (answer.status, reply.outcome) {
                    (Some(200), Some(Outcome::Result(result))) => gating::verdict(&result),
                    _ => None,
                };
                if verdict.is_none() {
                    host.count(Event::GatingFailed);
                }
                self.find(host, settings, &catalog, verdict)
            }
            State::Embedding {
                catalog,
                verdict,
                mut gathered,
                slots,
                ..
            } => {
                let fused = self.with_vectors(host, &catalog, &mut gathered, &slots, &answer);
                self.answer_find(host, settings, &catalog, verdict.as_ref(), fused.as_ref())
            }
            State::Calling { .. } => self.deliver_call(host, answer),
            State::Resources { .. } => self.deliver_resources(host, settings, &answer),
            State::Idle | State::Done => Step::Pass,
        }
    }

    fn with_catalog<H: Host>(
        &mut self,
        host: &H,
        settings: &Settings,
        catalog: &Rc<ServerCatalog>,
    ) -> Step {
        let allowed = self.allowed(catalog);
        let names = Names::for_catalog(settings.config, catalog, allowed.as_deref());
        let Some(want) = self.want.clone() else {
            return Step::Pass;
        };
        // A server tool whose name the meta-tools would have taken is called directly.
        let want = match want {
            Want::Find { .. } | Want::CallTool { .. } => match self.called_name() {
                Some(name) if name != names.find && name != names.call => Want::Direct { name },
                _ => want,
            },
            other => other,
        };
        // A caller that may see none of the server's tools is told so, never shown an empty
        // search (a permission problem would look like a quality problem).
        let nothing = allowed
            .as_deref()
            .is_some_and(|a| catalog.findable() > 0 && catalog.denied(a) == catalog.findable());
        if nothing && matches!(want, Want::List | Want::Find { .. }) {
            return self.refuse(host, Unfit::NothingAllowed);
        }
        // The gating tool is called only for a caller the rules let call it.
        let gating = catalog
            .gating
            .filter(|&at| visible(allowed.as_deref(), at))
            .and_then(|at| catalog.tools.get(at));
        match want {
            Want::List => self.list(host, settings, catalog, &names),
            Want::Direct { name } => {
                if !catalog.callable(&name) {
                    return self.unknown(host, &names, &name);
                }
                let arguments = self.called_arguments();
                if let Some(why) = self.refused_call(catalog, &name, &arguments) {
                    return self.deny_call(host, &names, &name, &why);
                }
                host.count(Event::Direct);
                self.end_searches(host);
                // A 2026-07-28 client mirrors into `Mcp-Param-*` headers the arguments the
                // tool's schema declares, but it knows only the schemas it was shown: a tool it
                // found, and never saw listed, comes without them, and the server would refuse
                // the call (HTTP 400). The gateway, which has the schema, sends it itself then.
                if self.head.routing.method.is_some() && !self.head.routing.params {
                    let headers = declared_headers(catalog, &name, &arguments);
                    if !headers.is_empty() {
                        return self.call(host, settings, &name, &arguments, headers, true);
                    }
                }
                self.outcome = Some(format!("mcp=call tool={}", header_safe(&name)));
                Step::Pass
            }
            Want::Find { query: None, .. } => {
                host.count(Event::FindTools);
                let text = format!(
                    "{} needs a query: a few words saying what the tool should do",
                    names.find
                );
                self.tool_error(host, &text, "mcp=find_tools error=no_query")
            }
            Want::Find {
                query: Some(query), ..
            } => {
                if let Some(step) = self.loop_answer(host, settings, catalog, &query) {
                    return step;
                }
                // `gating.rules` decide at once; the server's `_tool_gating`, if any, is asked
                // as well and the verdicts merged.
                let names = catalog.tools.iter().map(|t| t.name.as_str());
                self.rules_verdict = settings.gating.and_then(|r| r.verdict(&query, names));
                match gating {
                    Some(tool) => {
                        let mut params = Map::new();
                        params.insert("name".into(), Value::String(catalog::GATING_TOOL.into()));
                        let arguments: Value =
                            serde_json::from_str(&gating::arguments(&tool.raw, &query))
                                .unwrap_or(Value::Null);
                        let headers = param_headers(&tool.raw, &arguments);
                        params.insert("arguments".into(), arguments);
                        let body =
                            request_body(GATING_ID, "tools/call", params, self.meta.as_deref());
                        host.count(Event::GatingCalled);
                        let timeout = settings.mcp.gating_timeout_ms as u64;
                        let gating_tool = Some(catalog::GATING_TOOL);
                        match host.send(&body, "tools/call", gating_tool, &headers, timeout) {
                            Some(token) => {
                                self.state = State::Gating {
                                    token,
                                    catalog: Rc::clone(catalog),
                                };
                                Step::Wait
                            }
                            None => {
                                host.count(Event::GatingFailed);
                                self.find(host, settings, catalog, None)
                            }
                        }
                    }
                    None => self.find(host, settings, catalog, None),
                }
            }
            Want::CallTool { name, arguments } => {
                host.count(Event::CallTool);
                let Some(name) = name.filter(|n| catalog.callable(n)) else {
                    let name = self
                        .want
                        .as_ref()
                        .and_then(|w| match w {
                            Want::CallTool { name, .. } => name.clone(),
                            _ => None,
                        })
                        .unwrap_or_default();
                    return self.unknown(host, &names, &name);
                };
                // What is checked is exactly what the server gets.
                let arguments = arguments
                    .and_then(|a| serde_json::from_str::<Value>(&a).ok())
                    .filter(Value::is_object)
                    .unwrap_or_else(|| json!({}))
                    .to_string();
                if let Some(why) = self.refused_call(catalog, &name, &arguments) {
                    return self.deny_call(host, &names, &name, &why);
                }
                self.end_searches(host);
                let headers = declared_headers(catalog, &name, &arguments);
                self.call(host, settings, &name, &arguments, headers, false)
            }
        }
    }

    /// Under access rules: which of the catalog's tools the caller may see.
    fn allowed(&self, catalog: &ServerCatalog) -> Option<Rc<[bool]>> {
        let grant = self.head.grant.as_ref()?;
        let tool = |at: usize| {
            let tool = catalog.tools.get(at)?;
            Some((tool.name.as_str(), catalog.annotations(at)))
        };
        Some(grant.judge_mask(Surface::McpTools, catalog.allowed_for(grant), tool))
    }

    /// Under access rules, whether a refusal of the whole request no rule decided (the
    /// message cannot be checked) is carried out: recorded, and not in audit mode.
    fn refusal_enforced(&self) -> bool {
        self.head.grant.as_ref().is_none_or(|g| {
            let why = || Some(Why::Default);
            g.judge_request(Surface::McpRequest, None, why(), |_| why())
                .is_some()
        })
    }

    /// Under access rules: why the caller may not call `name` (a tool of `catalog`) with
    /// `arguments`, if it may not.
    fn refused_call(&self, catalog: &ServerCatalog, name: &str, arguments: &str) -> Option<Why> {
        let grant = self.head.grant.as_ref()?;
        let annotations = catalog
            .position(name)
            .map(|at| catalog.annotations(at))
            .unwrap_or_default();
        // The tool is in the catalog, so its annotations are known.
        match govern::check_call(grant, Some(annotations), name, arguments)? {
            Refusal::Denied(why) => Some(why),
            Refusal::Unverified => None,
        }
    }

    /// The `arguments` of the client's `tools/call` as JSON object text (`{}` when it has none).
    fn called_arguments(&self) -> String {
        self.request
            .as_ref()
            .and_then(Request::params)
            .and_then(|p| p.arguments)
            .unwrap_or_else(|| "{}".to_owned())
    }

    /// The `name` of the client's `tools/call`.
    fn called_name(&self) -> Option<String> {
        self.request.as_ref()?.params()?.name
    }

    /// Sends the real `tools/call` of `name` for `call_tool`, or (`relayed`) for a direct call
    /// that lacks its `Mcp-Param-*` headers, with the client's id (`arguments`: JSON object
    /// text) and `headers`, the ones the tool's schema declares.
    fn call<H: Host>(
        &mut self,
        host: &H,
        settings: &Settings,
        name: &str,
        arguments: &str,
        headers: Vec<(String, String)>,
        relayed: bool,
    ) -> Step {
        let Some(id) = self.request.as_ref().map(|r| r.id.clone()) else {
            return Step::Pass;
        };
        let mut params = Map::new();
        params.insert("name".into(), Value::String(name.to_owned()));
        let arguments = serde_json::from_str::<Value>(arguments).unwrap_or_else(|_| json!({}));
        params.insert("arguments".into(), arguments);
        let body = request_body(&id, "tools/call", params, self.meta.as_deref());
        let name_safe = header_safe(name);
        self.outcome = Some(if relayed {
            format!("mcp=call tool={name_safe} sent=gateway")
        } else {
            format!("mcp=call_tool tool={name_safe}")
        });
        match host.send(
            &body,
            "tools/call",
            Some(name),
            &headers,
            settings.mcp.timeout_ms as u64,
        ) {
            Some(token) => {
                self.state = State::Calling { token };
                Step::Wait
            }
            None => self.error(
                host,
                200,
                govern::INTERNAL_ERROR,
                "toolsift: cannot send the call to the server",
            ),
        }
    }

    /// The server answered `call_tool`'s call: that is the client's answer.
    fn deliver_call<H: Host>(&mut self, host: &H, answer: CallAnswer) -> Step {
        let Some(status) = answer.status else {
            return self.error(
                host,
                200,
                govern::INTERNAL_ERROR,
                "toolsift: the server did not answer the call in time",
            );
        };
        self.server_reply(host, &answer);
        let content_type = if answer.content_type.is_empty() {
            "application/json"
        } else {
            &answer.content_type
        };
        host.respond(status, content_type, &answer.body);
        self.state = State::Done;
        Step::Answered
    }

    fn unknown<H: Host>(&mut self, host: &H, names: &Names, name: &str) -> Step {
        host.count(Event::Unknown);
        self.outcome = Some(format!("mcp=refused tool={}", header_safe(name)));
        // The status the 2026-07-28 transport gives invalid params; 200 before it.
        let status = if self.head.modern() { 400 } else { 200 };
        self.error(
            host,
            status,
            govern::INVALID_PARAMS,
            &unknown_message(names, name),
        )
    }

    /// Refuses a call of `name` the access rules deny (`why`): with `denied: "hidden"` as a
    /// tool the server never listed, with `"refused"` saying why.
    fn deny_call<H: Host>(&mut self, host: &H, names: &Names, name: &str, why: &Why) -> Step {
        let Some(mode) = self.head.grant.as_ref().map(Grant::denied_mode) else {
            return self.unknown(host, names, name);
        };
        let answer = govern::denied_call(
            mode,
            self.head.modern(),
            name,
            why,
            unknown_message(names, name),
        );
        log::debug!("mcp: call of {name} refused: {why}");
        host.count(Event::Denied(answer.surface, 1));
        self.outcome = Some(format!(
            "mcp=refused tool={} reason={}",
            header_safe(name),
            answer.reason
        ));
        self.error(host, answer.status, answer.code, &answer.message)
    }

    /// Refuses the whole request under access rules.
    fn refuse<H: Host>(&mut self, host: &H, unfit: Unfit) -> Step {
        if !self.refusal_enforced() {
            // Audit mode: recorded, and the request passes as it would without access rules.
            return Step::Pass;
        }
        let answer = unfit.answer();
        host.count(Event::Denied(answer.surface, 1));
        self.outcome = Some(format!("mcp=refused reason={}", answer.reason));
        self.error(host, answer.status, answer.code, &answer.message)
    }

    /// Answers with a JSON-RPC error.
    fn error<H: Host>(&mut self, host: &H, status: u16, code: i64, message: &str) -> Step {
        let id = self.request.as_ref().map_or("null", |r| r.id.as_str());
        let body = govern::error_body(id, code, message);
        host.respond(status, "application/json", body.as_bytes());
        self.state = State::Done;
        Step::Answered
    }

    /// Answers a meta-tool call with a tool error (`isError`) saying `text`; `outcome` for
    /// `x-toolsift`.
    fn tool_error<H: Host>(&mut self, host: &H, text: &str, outcome: &str) -> Step {
        let result = json!({"content": [{"type": "text", "text": text}], "isError": true});
        self.outcome = Some(outcome.to_owned());
        self.result(host, result)
    }

    /// Answers with a JSON-RPC result.
    fn result<H: Host>(&mut self, host: &H, mut result: Value) -> Step {
        if let (true, Some(object)) = (self.head.modern(), result.as_object_mut()) {
            // Required of every result from 2026-07-28 on.
            object.insert("resultType".into(), "complete".into());
        }
        let id = self.request.as_ref().map_or("null", |r| r.id.as_str());
        let body = format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{result}}}");
        host.respond(200, "application/json", body.as_bytes());
        self.state = State::Done;
        Step::Answered
    }

    /// The server's answer to the client's own request (sent on by the gateway), its
    /// notifications noted.
    fn server_reply<H: Host>(&self, host: &H, answer: &CallAnswer) -> message::ServerReply {
        let id = self.request.as_ref().map_or("null", |r| r.id.as_str());
        let reply = message::server_reply(&answer.content_type, &answer.body, id);
        self.note_notifications(host, &reply.notifications);
        reply
    }

    fn note_notifications<H: Host>(&self, host: &H, notifications: &[String]) {
        if notifications.iter().any(|m| m == TOOLS_LIST_CHANGED) {
            host.count(Event::ListChanged);
            host.tools_changed(&self.head.server);
        }
    }
}

/// Whether tool `at` of a catalog is one the caller may see (`allowed`: per tool, under access
/// rules; `None`: every tool).
fn visible(allowed: Option<&[bool]>, at: usize) -> bool {
    allowed.is_none_or(|a| a.get(at).copied().unwrap_or(false))
}

/// What a call of a tool the server never listed is told.
fn unknown_message(names: &Names, name: &str) -> String {
    format!(
        "Unknown tool: {name}. Search this server's tools with {}, then call one it returns (by its name, or with {}).",
        names.find, names.call
    )
}

/// `name` is `base_N` for some number N ≥ 2.
fn is_numbered(name: &str, base: &str) -> bool {
    name.strip_prefix(base)
        .and_then(|rest| rest.strip_prefix('_'))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// What a meta-tool call asks for, read from its arguments.
fn meta_want(name: &str, arguments: Option<&str>) -> Want {
    let args: Value = arguments
        .and_then(|a| serde_json::from_str(a).ok())
        .unwrap_or(Value::Null);
    if name.starts_with(CALL_TOOL) {
        return Want::CallTool {
            name: args.get("name").and_then(Value::as_str).map(str::to_owned),
            arguments: args
                .get("arguments")
                .filter(|a| a.is_object())
                .map(Value::to_string),
        };
    }
    let query = args
        .get("query")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|q| !q.is_empty())
        .map(|q| crate::text::head_and_tail(q, crate::dialects::MAX_QUERY_BYTES));
    let limit = args
        .get("limit")
        .and_then(Value::as_f64)
        .map_or(DEFAULT_LIMIT, |l| l.clamp(1.0, MAX_LIMIT as f64) as usize);
    Want::Find { query, limit }
}

/// A JSON-RPC request the gateway sends, with the client's `_meta`.
fn request_body(
    id: &str,
    method: &str,
    mut params: Map<String, Value>,
    meta: Option<&str>,
) -> String {
    if let Some(meta) = meta.and_then(|m| serde_json::from_str::<Value>(m).ok()) {
        params.insert("_meta".into(), meta);
    }
    format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":{},\"params\":{}}}",
        Value::String(method.to_owned()),
        Value::Object(params)
    )
}

/// `_meta` without `progressToken`, which belongs to the client's own request.
fn without_progress_token(meta: &str) -> String {
    match serde_json::from_str::<Map<String, Value>>(meta) {
        Ok(mut m) => {
            m.remove("progressToken");
            Value::Object(m).to_string()
        }
        Err(_) => "{}".to_owned(),
    }
}

/// The `Mcp-Param-*` headers a `tools/call` of the catalog's tool `name` with `arguments` (JSON
/// object text) carries: none for a tool the catalog lacks or whose schema declares none, the
/// arguments read only for a tool that may declare some.
fn declared_headers(catalog: &ServerCatalog, name: &str, arguments: &str) -> Vec<(String, String)> {
    match catalog.tool(name) {
        Some(tool) if may_declare(&tool.raw) => {
            let arguments = serde_json::from_str(arguments).unwrap_or(Value::Null);
            param_headers(&tool.raw, &arguments)
        }
        _ => Vec::new(),
    }
}
