//! One HTTP stream's way through toolsift, free of proxy-wasm. Envoy's callbacks come in to
//! [`Stream`] (one per HTTP stream) and [`Shared`] (one per worker: its tick, its own calls);
//! the core decides and acts through [`proxy::Proxy`], Envoy's ABI as bytes in and out, which
//! the adapter ([`crate`]'s `filter`, wasm only) implements once. The product's decisions
//! (configuration, modes, access rules), and which host calls carry them out, are made here,
//! where `cargo test` drives them without Envoy (quinn-proto's and h11's "sans-I/O" shape,
//! `docs/book/src/reference/layout.md`).
//!
//! An LLM route's request is [`Request`]: which machine a request goes to ([`route`]), the
//! headers phase ([`Request::on_headers`]: screening, the access rules' refusals and guard,
//! shadow's draw, search mode's and `unknown_tools.answer`'s follow-up headers), a request let
//! through or rejected ([`Request::skip`]) and what the answer's headers say
//! ([`Request::on_response_headers`]), each returning [`Action`]s that [`Stream`] carries out.
//! The body is read and analysed ([`Request::on_body`]), and then, in filter mode, the
//! selection written ([`Request::apply`]), or search mode's first request planned and its loop
//! handed over ([`Request::plan_search`]); between the two, `_tool_gating` has its say
//! ([`gating`]: the call to send, a claim answered, the verdict applied) and hybrid ranking
//! says which texts to embed and ranks with the answer ([`hybrid`]).
//! [`Request::on_body_end`] runs these steps in order, paused while a call is out and taken on
//! by its answer ([`Request::call_answered`]). The response side around the search loop, the
//! guard or the answers to made-up calls is [`Response`]; an MCP route's request is
//! [`crate::mcp::request`]'s.

mod audit;
mod body;
pub mod gating;
mod hosts;
pub mod hybrid;
pub mod outcome;
pub mod proxy;
pub mod proxy_model;
mod record;
mod response;
mod search;
mod steps;
mod stream;
pub mod worker;

use crate::access::{Caller, Grant};
use crate::config::{Config, Mode, OnError};
use crate::dialects::{Dialect, PathStream, Reader};
use crate::pairs::HeaderMap;
use crate::pipeline::{Engine, RequestHeaders, Skip, Skipped, error_body};
use crate::search::round::Session;
use crate::shadow::Sampler;
pub use body::{Chunk, Read, Written, loop_counts, loops_detected, noted_tools};
pub use outcome::{Outcome, Ranked};
pub use response::{FollowUps, Response};
pub use search::{Remembering, SearchLoop, Searched};
pub use steps::{BodyHost, Flow, Step, Worker};
pub use stream::{Resume, Stream};
pub use worker::Shared;

/// Which machine a request goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// An LLM API's request (or a request toolsift lets through): [`Request`].
    Llm,
    /// A request on one of `mcp.paths`: [`crate::mcp::exchange`].
    Mcp,
}

/// Which machine the request with these headers goes to.
pub fn route(config: &Config, headers: &HeaderMap) -> Route {
    let path = headers
        .get(":path")
        .and_then(|p| std::str::from_utf8(p).ok());
    match (&config.mcp, path) {
        (Some(mcp), Some(path)) if mcp.matches(path) => Route::Mcp,
        _ => Route::Llm,
    }
}

/// The counters the core asks for (the adapter maps each to its stat; the book's
/// `reference/metrics.md` names them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counter {
    /// `toolsift.skipped.<reason>` (and `toolsift.errors` for a reason that is an error).
    Skipped(Skip),
    /// `toolsift.search.native`: a request carrying the provider's own tool search.
    SearchNative,
    /// `toolsift.search.provider`: a `search.native_search` rule handed the search over.
    SearchProvider,
    /// `toolsift.search.requests`: search loops started.
    SearchRequests,
    /// `toolsift.search.remembered`: tools shown because the session's memory offered them.
    SearchRemembered,
    ToolsIn,
    ToolsOut,
    /// `toolsift.search.unsupported`: search mode cannot follow this request's answer up.
    SearchUnsupported,
    /// `toolsift.access.unsupported_stream`: refused, its stream could not be checked.
    AccessUnsupportedStream,
    /// `toolsift.access.unknown_paths`.
    AccessUnknownPaths,
    /// `toolsift.access.unknown_paths.refused`: refused with `"unknown_paths": "deny"`.
    AccessUnknownPathsRefused,
    /// `toolsift.access.denied.<surface>`.
    Denied(crate::access::Surface),
    CatalogCacheHits,
    CatalogCacheMisses,
    /// Requests whose body was rewritten, and those that went on as they came.
    Rewritten,
    Unchanged,
    TokensSaved,
    RankedHybrid,
    RankedKeyword,
    /// `toolsift.embeddings.fallback.<reason>`.
    Fallback(crate::embeddings::Fallback),
    EmbeddingsIncomplete,
    ShadowRequests,
    LoopDetected,
    LoopEvicted,
    LoopNoted,
    UnknownTools,
    /// `toolsift.mcp.gating.*` (the MCP stats, defined with `mcp` or `gating`): gating calls
    /// answered, those without a verdict, tools excluded, tools claimed, claims answered
    /// without the model.
    GatingCalls,
    GatingFailed,
    GatingExcluded,
    GatingClaimed,
    GatingAnswered,
    /// `auto_k`: a request selected with a k of this source (`toolsift.auto_k.calibrated`,
    /// `.pooled`, `.default`), counted with `n`, the k, in `toolsift.auto_k.k`.
    AutoK(crate::auto_k::Source),
    /// `toolsift.auto_k.capped`: its k was capped at `max_k`.
    AutoKCapped,
    /// `toolsift.weak_query`: a question the ranking could not read, not cut to `top_k`.
    WeakQuery,
}

impl Counter {
    /// The stats this counts in, `n` times (a skip once, with `toolsift.errors` when it is
    /// an error).
    pub fn counts(self, n: usize) -> crate::stats::Counts {
        use crate::stats::{Fixed, Stat, one, two};
        let fixed = match self {
            Counter::Skipped(reason) => {
                let error = reason.is_error().then_some((Fixed::Errors, 1));
                return two((Stat::Skipped(reason), 1), error);
            }
            Counter::Denied(surface) => return one(Stat::Denied(surface), n),
            Counter::Fallback(reason) => return one(Stat::Fallback(reason), n),
            Counter::AutoK(source) => {
                let counter = match source {
                    crate::auto_k::Source::Calibrated => Fixed::AutoKCalibrated,
                    crate::auto_k::Source::Pooled => Fixed::AutoKPooled,
                    crate::auto_k::Source::Default => Fixed::AutoKDefault,
                    crate::auto_k::Source::Fleet => Fixed::AutoKFleet,
                    crate::auto_k::Source::FleetPooled => Fixed::AutoKFleetPooled,
                };
                return two((counter, 1), Some((Fixed::AutoKChosen, n as u64)));
            }
            Counter::AutoKCapped => Fixed::AutoKCapped,
            Counter::WeakQuery => Fixed::WeakQuery,
            Counter::SearchNative => Fixed::SearchNative,
            Counter::SearchProvider => Fixed::SearchProvider,
            Counter::SearchRequests => Fixed::SearchRequests,
            Counter::SearchRemembered => Fixed::SearchRemembered,
            Counter::ToolsIn => Fixed::ToolsIn,
            Counter::ToolsOut => Fixed::ToolsOut,
            Counter::SearchUnsupported => Fixed::SearchUnsupported,
            Counter::AccessUnsupportedStream => Fixed::AccessUnsupportedStream,
            Counter::AccessUnknownPaths => Fixed::AccessUnknownPaths,
            Counter::AccessUnknownPathsRefused => Fixed::AccessUnknownPathsRefused,
            Counter::CatalogCacheHits => Fixed::CatalogCacheHits,
            Counter::CatalogCacheMisses => Fixed::CatalogCacheMisses,
            Counter::Rewritten => Fixed::Rewritten,
            Counter::Unchanged => Fixed::Unchanged,
            Counter::TokensSaved => Fixed::TokensSaved,
            Counter::RankedHybrid => Fixed::RankedHybrid,
            Counter::RankedKeyword => Fixed::RankedKeyword,
            Counter::EmbeddingsIncomplete => Fixed::EmbeddingsIncomplete,
            Counter::ShadowRequests => Fixed::ShadowRequests,
            Counter::LoopDetected => Fixed::LoopDetected,
            Counter::LoopEvicted => Fixed::LoopEvicted,
            Counter::LoopNoted => Fixed::LoopNoted,
            Counter::UnknownTools => Fixed::UnknownTools,
            Counter::GatingCalls => Fixed::McpGatingCalls,
            Counter::GatingFailed => Fixed::McpGatingFailed,
            Counter::GatingExcluded => Fixed::McpGatingExcluded,
            Counter::GatingClaimed => Fixed::McpGatingClaimed,
            Counter::GatingAnswered => Fixed::McpGatingAnswered,
        };
        one(fixed, n)
    }
}

/// What the adapter does for an event, in order.
pub enum Action {
    Count(Counter, usize),
    /// Takes a request header out. `required`: the body may be rewritten only without it
    /// (`content-length`: Envoy does not fix it, and the upstream would wait for bytes that
    /// never come); when it cannot be taken out, the request goes on unread
    /// ([`Request::skip`] with [`Skip::Internal`]).
    RemoveRequestHeader {
        name: &'static str,
        required: bool,
    },
    /// Replaces the first `drain` bytes of the request body Envoy holds with `bytes` (what
    /// follows stays in Envoy's buffer).
    ReplaceBody {
        drain: usize,
        bytes: Vec<u8>,
    },
    /// Answers the request with this status and JSON body: nothing goes upstream. Envoy runs
    /// the local reply through the response callbacks, which report it like any answer. The
    /// actions after it in the same list follow from the reply (its counts): when it cannot be
    /// sent, the adapter performs none of them.
    Reply {
        status: u16,
        body: String,
    },
    /// Under access rules: every call in the answer is checked by this response-side machine
    /// ([`crate::search::respond`]) before the client gets it.
    Guard(Box<Session>),
    /// The answer's side is this loop's from now on (search mode's, or the one answering calls
    /// of made-up tools): it replaces the guard, whose checks it makes as well.
    Watch(Box<SearchLoop>),
    /// Holds the request headers until the body is read (`search.hold_headers`), where Envoy
    /// lets them be held ([`crate::search::hold`]).
    HoldHeaders,
    /// The head of the access log's record ([`record`]): what `x-toolsift` says, and the
    /// tools' tokens (`before/after`) when they were filtered.
    Record {
        header: String,
        tokens: Option<(usize, usize)>,
    },
    /// `gen_ai`: the request's GenAI attributes, a filter state of their own
    /// ([`crate::gen_ai`]), written at once.
    RecordGenAi(String),
    AddResponseHeader {
        name: &'static str,
        value: String,
    },
    /// Sets a request header (only while the request headers are held).
    SetRequestHeader {
        name: &'static str,
        value: String,
    },
}

/// The request headers as the adapter read them.
pub struct Head<'a> {
    pub headers: &'a HeaderMap,
    pub end_of_stream: bool,
    /// Under access rules: what the caller may do, and who it is (from the configured headers
    /// and the JWT payloads in Envoy's metadata).
    pub identity: Option<(Grant, Caller)>,
}

/// The client's request headers, kept for the follow-ups, and whether the path asks for a
/// stream.
pub type FollowUpHeaders = (Vec<(String, String)>, bool);

/// An LLM route's request, from its headers to its answer's headers.
#[derive(Default)]
pub struct Request {
    /// Set while the request body is being buffered for us: what reads it (the custom shape
    /// on a custom route, `custom.paths`).
    pub buffering: Option<Reader>,
    /// What happened, for the response headers.
    pub outcome: Option<Outcome>,
    /// Filter mode: the tools' estimated tokens as sent and as forwarded, for the record.
    pub tokens: Option<(usize, usize)>,
    /// Search mode: the client's request headers (kept for the follow-ups) and whether the
    /// client asked for a stream by path, from the headers phase until the body is planned.
    pub search_headers: Option<FollowUpHeaders>,
    /// Filter mode with `unknown_tools.answer`: the same, for the follow-ups answering
    /// made-up calls, from the headers phase until the body is filtered.
    pub answer_headers: Option<FollowUpHeaders>,
    /// Under access rules: what this request's caller may do.
    pub grant: Option<Grant>,
    /// Under access rules, a request signed by the client (AWS SigV4) that toolsift may read
    /// but not rewrite: it passes unchanged unless it carries a tool its caller may not see.
    pub read_only: bool,
    /// Search mode: whose Responses id aliases the request makes and may follow, and whose
    /// memory of found tools it reads and writes.
    pub alias_owner: u64,
    /// Search mode with `search.memory.session.header`: that header's value.
    pub session_header: Option<Vec<u8>>,
    /// `shadow`: whether this request was drawn to be shadowed (decided with its headers).
    pub shadow_drawn: Option<bool>,
    /// What `_tool_gating` did, for the response headers.
    pub gated: Option<crate::mcp::llm::Gated>,
    /// `_tool_gating` had its say (once per request), and the verdict it left for the
    /// selection ([`gating`]).
    gating_asked: bool,
    verdict: Option<crate::gating::Verdict>,
    /// Under access rules: the request's connectors and namespace functions its caller may
    /// not see ([`crate::connectors`]), taken out before its tools were read, and those it
    /// may see.
    outside_denied: usize,
    outside_kept: usize,
    /// `shadow`: the answer's calls measured against the request's ranking.
    pub shadow: Option<crate::shadow::Watch>,
    /// `gen_ai`: the request's GenAI attributes known from its headers, recorded with its
    /// body's model ([`crate::gen_ai`]).
    gen_ai: Option<crate::gen_ai::GenAi>,
    /// Paused until a call (the gating server's, the embeddings) answers ([`steps`]).
    pending: Option<Box<steps::Pending>>,
}

impl Request {
    pub fn new() -> Request {
        Request::default()
    }

    /// The request headers (read as bytes: a value that is not UTF-8 is data, never a reason
    /// to trap). `sampler`: the worker's shadow draws, when it can be had.
    pub fn on_headers(
        &mut self,
        engine: &Engine,
        head: Head<'_>,
        sampler: Option<&mut Sampler>,
    ) -> Vec<Action> {
        let config = &engine.config;
        let map = head.headers;
        let (grant, caller) = head.identity.unzip();
        self.grant = grant;
        let headers = RequestHeaders::from_map(map, head.end_of_stream);
        self.read_only = headers.signed && engine.read_signed_only();
        let screened = match headers.screen_custom(config) {
            Some(screened) => screened.map(|()| Reader::Custom),
            None => headers.screen(config).map(Reader::Dialect),
        };
        let reader = match screened {
            Ok(reader) => reader,
            Err(reason) => return self.not_screened(engine, &headers, reason),
        };
        let mut actions = vec![Action::RemoveRequestHeader {
            name: "content-length",
            required: true,
        }];
        self.buffering = Some(reader);
        // Custom shapes are filtered in search mode too, and have no response reader.
        let Reader::Dialect(dialect) = reader else {
            return actions;
        };
        let path = || {
            map.get(":path")
                .and_then(|p| std::str::from_utf8(p).ok())
                .unwrap_or_default()
        };
        if config.gen_ai {
            self.gen_ai = Some(crate::gen_ai::GenAi::at(dialect, path()));
        }
        if let Some(grant) = self.grant.clone() {
            if self.guard(dialect, grant, path(), &mut actions) {
                return actions;
            }
        }
        if let (Some(rate), Some(sampler)) = (config.shadow_sample(), sampler) {
            // Its answer will be read (shadowed or filtered): asked for uncompressed.
            self.shadow_drawn = Some(sampler.sample(rate));
            actions.push(remove_accept_encoding());
        }
        match follow_up_headers(config, dialect, map) {
            Ok(Some((Mode::Search, headers))) => self.search_headers = Some(headers),
            Ok(Some((Mode::Filter, headers))) => self.answer_headers = Some(headers),
            Ok(None) => {}
            Err(counted) => actions.push(counted),
        }
        if self.search_headers.is_some() || self.answer_headers.is_some() {
            let caller = caller.as_ref().map(Caller::key);
            self.alias_owner = crate::search::alias::owner(caller.as_deref(), |n| map.get(n));
            self.session_header = config
                .search
                .memory
                .as_ref()
                .and_then(|m| m.session.header.as_deref())
                .and_then(|name| map.get(name))
                .map(<[u8]>::to_vec);
            // The model's turn must be read: ask for it uncompressed (SDKs offer gzip, and
            // providers use it), for the first request and so for every follow-up, which
            // copies these headers. An Envoy compressor filter placed before toolsift (it sees
            // the response after toolsift) still compresses what the client gets.
            actions.push(remove_accept_encoding());
            if config.search.hold_headers {
                actions.push(Action::HoldHeaders);
            }
        }
        // Otherwise the headers go on, so no Envoy setting is needed (without
        // `allow_on_headers_stop_iteration`, pausing here stalls the request until the idle
        // timeout). The body callbacks buffer.
        actions
    }

    /// Under access rules, every LLM request's answer is checked before the client gets it
    /// (whatever becomes of the request: filtered, passed with few tools, handed to the
    /// provider's search): a call of a tool its caller may not use is replaced by a refusal.
    /// The answer is asked for uncompressed so that it can be read. A request whose answer
    /// would come in a stream toolsift cannot read (Gemini's JSON array) is refused here with
    /// a 400, since a denied call in it could not be stopped (`true`: refused). Search mode
    /// replaces the guard with its own machine, which checks calls the same way.
    fn guard(
        &mut self,
        dialect: Dialect,
        grant: Grant,
        path: &str,
        actions: &mut Vec<Action>,
    ) -> bool {
        let readable = dialect.codec().guard_reads(path);
        if !readable && !grant.enforces() {
            // Audit mode refuses nothing: the stream passes unchecked.
            return false;
        }
        if !readable {
            actions.push(Action::Count(Counter::AccessUnsupportedStream, 1));
            self.buffering = None;
            let body = serde_json::json!({
                "error": {
                    "type": "toolsift_error",
                    "code": "access_unsupported_stream",
                    "message": "toolsift: access rules are on, and this API's stream on this path \
                        (Gemini streamGenerateContent without alt=sse) cannot be checked for \
                        calls of denied tools: use the whole answer, or Gemini's alt=sse",
                }
            });
            actions.push(Action::Reply {
                status: 400,
                body: body.to_string(),
            });
            return true;
        }
        actions.push(remove_accept_encoding());
        actions.push(Action::Guard(Box::new(Session::guard(dialect, grant))));
        false
    }

    /// A request that is not one the pipeline reads (`reason`): let through, unless, under
    /// access rules, its path is one toolsift does not recognise: counted, and with
    /// `"unknown_paths": "deny"` answered (404, or 403 as configured).
    fn not_screened(
        &mut self,
        engine: &Engine,
        headers: &RequestHeaders<'_>,
        reason: Skip,
    ) -> Vec<Action> {
        let config = &engine.config;
        let Some(policy) = engine.policy().filter(|_| headers.unknown_path(config)) else {
            return self.skip(Some(config), reason.into());
        };
        let count = Action::Count(Counter::AccessUnknownPaths, 1);
        let Some(status) = policy.unknown_path_status() else {
            let mut actions = vec![count];
            actions.extend(self.skip(Some(config), reason.into()));
            return actions;
        };
        let body = serde_json::json!({
            "error": {
                "type": "toolsift_error",
                "code": "unknown_path",
                "message": "toolsift: access rules are on, and this path is not one toolsift \
                    governs (an LLM API's, a custom or an MCP route's)",
            }
        });
        self.outcome = Some(Outcome::UnknownPath);
        vec![
            count,
            Action::Count(Counter::AccessUnknownPathsRefused, 1),
            Action::Reply {
                status,
                body: body.to_string(),
            },
        ]
    }

    /// Lets a request through untouched, or answers it with a 400 under `on_error: reject`
    /// and under access rules (a request toolsift cannot read is never let through there:
    /// its tools could be any). `config`: `None` when it cannot be had (nothing is
    /// rejected then).
    pub fn skip(&mut self, config: Option<&Config>, skipped: Skipped) -> Vec<Action> {
        self.buffering = None;
        let mut actions = vec![Action::Count(Counter::Skipped(skipped.reason), 1)];
        if skipped.reason == Skip::NativeSearch {
            actions.push(Action::Count(Counter::SearchNative, 1));
        }
        if let Some(n) = skipped.tools {
            actions.push(Action::Count(Counter::ToolsIn, n));
            actions.push(Action::Count(Counter::ToolsOut, n));
        }
        if skipped.reason != Skip::NotLlm {
            self.outcome = Some(Outcome::Skipped(skipped));
        }
        let reject = skipped.reason.is_error()
            && config.is_some_and(|c| c.on_error == OnError::Reject || c.access.is_some());
        if reject {
            // No x-toolsift here: the local reply's response headers add it (once).
            actions.push(Action::Reply {
                status: 400,
                body: error_body(skipped.reason),
            });
        }
        actions
    }

    /// The answer's headers (the upstream's, or a local reply's): what was done, for the
    /// access log and, with `response_header`, the client. `config`: `None` when it cannot be
    /// had (recorded for the access log only).
    pub fn on_response_headers(&self, config: Option<&Config>) -> Vec<Action> {
        let Some(outcome) = &self.outcome else {
            return Vec::new();
        };
        let value = outcome.header_value(self.gated.as_ref());
        let (response_header, debug) =
            config.map_or((false, false), |c| (c.response_header, c.debug));
        let mut actions = vec![Action::Record {
            header: value.clone(),
            tokens: self.tokens,
        }];
        if response_header {
            actions.push(Action::AddResponseHeader {
                name: "x-toolsift",
                value,
            });
            if let (true, Some(names)) = (debug, outcome.kept_names()) {
                actions.push(Action::AddResponseHeader {
                    name: "x-toolsift-tools",
                    value: names.to_owned(),
                });
            }
        }
        actions
    }
}

fn remove_accept_encoding() -> Action {
    Action::RemoveRequestHeader {
        name: "accept-encoding",
        required: false,
    }
}

/// The request headers the follow-ups will carry, and whether the path asks for a stream, with
/// the mode that sends them: search mode's searches, or filter mode's answers to made-up calls
/// (`unknown_tools.answer`). `None` when no follow-up is sent, and for the requests whose
/// answers cannot be followed up: Bedrock's binary event stream, Gemini's JSON-array stream,
/// and a request with a header value that is not UTF-8 (the follow-ups could not carry it as
/// it was). Search mode filters those instead (`Err`: counted); in filter mode the model's
/// calls reach the client as it made them.
fn follow_up_headers(
    config: &Config,
    dialect: Dialect,
    map: &HeaderMap,
) -> Result<Option<(Mode, FollowUpHeaders)>, Action> {
    if config.follow_up_rounds().is_none() {
        return Ok(None);
    }
    let headers = map.texts();
    let path = headers
        .as_ref()
        .and_then(|h| h.iter().find(|(n, _)| n == ":path"))
        .map(|(_, v)| v.as_str())
        .unwrap_or_default();
    let path_stream = dialect.codec().path_stream(path);
    match headers {
        Some(headers) if path_stream != PathStream::Unsupported => Ok(Some((
            config.mode,
            (headers, path_stream == PathStream::Stream),
        ))),
        _ if config.mode == Mode::Search => Err(Action::Count(Counter::SearchUnsupported, 1)),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod stream_tests;
#[cfg(test)]
mod tests;
