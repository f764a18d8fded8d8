//! One HTTP request through the filter.
//!
//! Headers phase: decide whether the request is ours (POST to an LLM path, JSON, not
//! compressed, not too large) and, if so, drop `content-length` (the body may shrink and Envoy
//! does not fix the header; the upstream would wait for bytes that never come) and buffer.
//! Body phase: at the end of the stream, run the pipeline and replace the body. With hybrid
//! ranking, a request whose vectors are not all cached waits (paused) for one embeddings call,
//! at most `timeout_ms`, and is finished in `on_http_call_response` (by keyword if the call
//! failed). Response headers: report what was done.

use super::host::{self, Buffer, Headers};
use super::metrics::now;
use super::search::Search;
use super::{Shared, vectors};
use crate::access::Surface;
use crate::config::{Mode, OnError};
use crate::dialects::{Dialect, PathStream, Reader};
use crate::embeddings::{Fallback, Gathered, Slot, Source, parse_response};
use crate::pipeline::{
    Analysis, RequestHeaders, Skip, Skipped, body_text, error_body, header_safe, header_value,
};
use crate::search::memory::{Memory, SessionKey};
use crate::search::respond::Responder;
use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::Action;
use std::rc::Rc;
use std::time::{Duration, SystemTime};

pub struct Filter {
    shared: Option<Rc<Shared>>,
    /// This stream's context id (the root context resumes a stalled held request by it).
    context_id: u32,
    /// Search mode held the request headers (`search.hold_headers`), and they still are.
    headers_held: bool,
    /// Set while the request body is being buffered for us: what reads it (the custom shape
    /// on a custom route, `custom.paths`).
    buffering: Option<Reader>,
    /// What happened, for the response headers.
    outcome: Option<Outcome>,
    /// A request waiting for its embeddings call.
    waiting: Option<Waiting>,
    /// Search mode: the client's request headers (kept for the follow-ups) and whether the
    /// client asked for a stream by path, from the headers phase until the body is planned.
    search_headers: Option<FollowUpHeaders>,
    /// Filter mode with `unknown_tools.answer`: the same, for the follow-ups answering
    /// made-up calls, from the headers phase until the body is filtered.
    answer_headers: Option<FollowUpHeaders>,
    /// The request's response side: search mode's search, filter mode's follow-ups for
    /// made-up calls, or the access rules' guard.
    search: Option<Search>,
    /// A request on an MCP route (`mcp.paths`).
    mcp: Option<super::mcp::McpRequest>,
    /// Under access rules: what this request's caller may do.
    grant: Option<crate::access::Grant>,
    /// Under access rules: the request's connectors and namespace functions its caller may
    /// not see ([`crate::connectors`]), taken out before its tools were read.
    outside_denied: usize,
    /// Under access rules: the request's connectors and namespace functions its caller may
    /// see.
    outside_kept: usize,
    /// Search mode: whose Responses id aliases the request makes and may follow, and whose
    /// memory of found tools it reads and writes.
    alias_owner: u64,
    /// Search mode with `search.memory.session.header`: that header's value.
    session_header: Option<Vec<u8>>,
    /// Under access rules, a request signed by the client (AWS SigV4) that toolsift may read
    /// but not rewrite: it passes unchanged unless it carries a tool its caller may not see.
    read_only: bool,
    /// `gating.mcp`: the gating server was asked (once per request), the request waiting for
    /// its verdict, the verdict, and what it did.
    gating_asked: bool,
    gating: Option<GatingWait>,
    verdict: Option<crate::mcp::gating::Verdict>,
    gated: Option<crate::mcp::llm::Gated>,
    /// `shadow`: whether this request was drawn to be shadowed (decided with its headers).
    shadow_drawn: Option<bool>,
    /// `shadow`: the answer's calls measured against the request's ranking.
    shadow: Option<crate::shadow::Watch>,
    /// Bytes at the start of Envoy's response buffer already given to `shadow` (the buffer
    /// keeps them while the response is paused).
    shadow_fed: usize,
}

/// The client's request headers, kept for the follow-ups, and whether the path asks for a
/// stream.
type FollowUpHeaders = (Vec<(String, String)>, bool);

/// A request waiting for its `_tool_gating` verdict.
struct GatingWait {
    token: u32,
    dialect: Dialect,
    analysis: Analysis,
    /// The request body as Envoy gave it.
    body: Vec<u8>,
}

enum Outcome {
    Filtered {
        kept: usize,
        total: usize,
        ranked: Ranked,
        /// `search` (the meta-tool was added) or `native` (the provider's own search).
        search: Option<&'static str>,
        /// Kept tools in rank order (with their channels when hybrid), for the debug header.
        kept_names: String,
        /// Under access rules: the function tools the caller may not see.
        denied: Option<usize>,
        /// Tools the loop guard took out (`loop=evicted:a,b`).
        evicted: Vec<String>,
        /// With `report_only`, tools it found looping and left in (`loop=detected:a,b`).
        detected: Vec<String>,
        /// Search mode: tools shown because the session's memory offered them
        /// (`remembered=a,b`).
        remembered: Vec<String>,
        /// Those whose latest result the upstream received with the guidance note
        /// (`noted=a`).
        noted: Vec<String>,
        /// Filter mode: tools the model called in its latest turn that the request does not
        /// carry (`unknown=x`).
        unknown: Vec<String>,
        /// Shadowed: how many tools the selection would have kept (`shadow=would_keep:5`).
        shadow: Option<usize>,
    },
    Skipped(Skipped),
    /// Refused whole by access rules (HTTP 403).
    Denied {
        total: usize,
        denied: usize,
    },
}

/// How a request was ranked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ranked {
    /// `ranking: keyword`.
    Keyword,
    Hybrid,
    /// `ranking: hybrid`, ranked by keyword because the embeddings call failed.
    Fallback(Fallback),
    /// `ranking: hybrid`, ranked by keyword while a new catalog's vectors come in.
    Incomplete,
}

impl Ranked {
    /// What the `x-toolsift` header adds: nothing for keyword ranking.
    fn header_suffix(self) -> String {
        match self {
            Ranked::Keyword => String::new(),
            Ranked::Hybrid => " ranking=hybrid".to_owned(),
            Ranked::Fallback(f) => format!(" ranking=keyword fallback={}", f.name()),
            Ranked::Incomplete => " ranking=keyword fallback=incomplete".to_owned(),
        }
    }
}

/// Everything a paused request needs when its embeddings arrive.
struct Waiting {
    token: u32,
    analysis: Analysis,
    gathered: Gathered,
    slots: Vec<Slot>,
    /// The request body as Envoy gave it.
    body: Vec<u8>,
}

/// What the body phase did.
enum Step {
    Done,
    /// An embeddings call is out; the request stays paused until it answers.
    Waiting,
    /// Answered locally (a refusal, a claimed call): nothing goes upstream.
    Answered,
}

impl Filter {
    pub fn new(shared: Option<Rc<Shared>>, context_id: u32) -> Filter {
        Filter {
            shared,
            context_id,
            headers_held: false,
            buffering: None,
            outcome: None,
            waiting: None,
            search_headers: None,
            answer_headers: None,
            search: None,
            mcp: None,
            grant: None,
            outside_denied: 0,
            outside_kept: 0,
            read_only: false,
            alias_owner: 0,
            session_header: None,
            gating_asked: false,
            gating: None,
            verdict: None,
            gated: None,
            shadow_drawn: None,
            shadow: None,
            shadow_fed: 0,
        }
    }

    /// Screens the request's headers (read as bytes: a value that is not UTF-8 is data, never
    /// a reason to trap).
    fn screen_headers(
        &mut self,
        shared: &Shared,
        map: &crate::pairs::HeaderMap,
        end_of_stream: bool,
    ) -> Result<Reader, Skip> {
        let headers = RequestHeaders::from_map(map, end_of_stream);
        let engine = shared.engine.try_borrow().map_err(|_| Skip::Internal)?;
        self.read_only = headers.signed && engine.read_signed_only();
        if let Some(screened) = headers.screen_custom(&engine.config) {
            return screened.map(|()| Reader::Custom);
        }
        headers.screen(&engine.config).map(Reader::Dialect)
    }

    /// Runs the pipeline over the buffered body and replaces it. Returns the action for the
    /// body or trailers callback.
    fn finish(&mut self, shared: &Shared, reader: Reader, body_size: usize) -> Action {
        self.buffering = None;
        let started = now();
        let result = self.filter_body(shared, reader, body_size, started);
        shared.metrics.since(shared.metrics.filter_time_us, started);
        match result {
            Ok(Step::Done) => Action::Continue,
            Ok(Step::Waiting | Step::Answered) => Action::Pause,
            Err(skipped) => self.skip(shared, skipped),
        }
    }

    fn filter_body(
        &mut self,
        shared: &Shared,
        reader: Reader,
        body_size: usize,
        started: Option<SystemTime>,
    ) -> Result<Step, Skipped> {
        let metrics = &shared.metrics;
        let mut body =
            host::buffer(Buffer::RequestBody, 0, body_size).map_err(|_| Skip::Internal)?;
        // Each phase starts when the last one ended: one clock read less per phase.
        let mut started = metrics.since(metrics.phase_read_us, started);
        if let Some(resolved) = self.resolve_alias(reader, &body)? {
            host::set_buffer(Buffer::RequestBody, 0, body.len(), resolved.as_bytes())
                .map_err(|_| Skip::Internal)?;
            body = resolved.into_bytes();
            started = now();
        }
        if let Some(step) = self.govern_outside(shared, reader, &mut body)? {
            return Ok(step);
        }
        let mut engine = shared.engine.try_borrow_mut().map_err(|_| Skip::Internal)?;
        // Only the custom shape reads the body as text: a dialect checks what it reads.
        let grant = self.grant.as_ref();
        let mut analysis = match reader {
            Reader::Custom => engine.analyse_custom_as(body_text(&body)?, grant)?,
            Reader::Dialect(dialect) => engine.analyse_as(dialect, &body, grant)?,
        };
        metrics.since(
            if analysis.cache_hit {
                metrics.phase_analyse_us
            } else {
                metrics.phase_assemble_us
            },
            started,
        );
        metrics.add(
            if analysis.cache_hit {
                metrics.catalog_cache_hits
            } else {
                metrics.catalog_cache_misses
            },
            1,
        );
        if let Some(governed) = analysis.access.as_mut() {
            governed.denied += self.outside_denied;
            // Connectors or namespace functions it may see go: the request is not empty.
            let empty = |d: &crate::pipeline::Denial| {
                d.tool.is_none() && d.why == crate::access::Why::Default
            };
            if self.outside_kept > 0 && governed.denial.as_ref().is_some_and(empty) {
                governed.denial = None;
            }
        }
        if let Some(step) = self.refuse(shared, &analysis) {
            return step;
        }
        // `gating.mcp` (filter mode): the MCP server's `_tool_gating` has its say first.
        // Custom requests have no `tool_choice` a claim could name. A request for the
        // provider's own search loses only what access rules deny.
        if let (false, None, Reader::Dialect(dialect), false) = (
            self.gating_asked,
            &self.search_headers,
            reader,
            analysis.native_search,
        ) {
            self.gating_asked = true;
            // `gating.rules` decide at once; a gating server, if any, is asked as well, and
            // the two verdicts merged when it answers.
            let local = engine.gating_verdict(&analysis);
            if let Some(v) = &local {
                super::mcp::count_verdict(shared, v);
            }
            if let Some(token) = super::mcp::send_gating(&engine.config, &analysis.query) {
                drop(engine);
                self.verdict = local;
                self.gating = Some(GatingWait {
                    token,
                    dialect,
                    analysis,
                    body,
                });
                return Ok(Step::Waiting);
            }
            if local.is_some() {
                drop(engine);
                return self.with_verdict(shared, dialect, analysis, body, local);
            }
        }
        drop(engine);
        self.rank_and_apply(shared, reader, analysis, body)
    }

    /// Ranks (hybrid when configured, which may wait for an embeddings call) and writes the
    /// selection into the body.
    fn rank_and_apply(
        &mut self,
        shared: &Shared,
        reader: Reader,
        mut analysis: Analysis,
        body: Vec<u8>,
    ) -> Result<Step, Skipped> {
        let metrics = &shared.metrics;
        let engine = shared.engine.try_borrow().map_err(|_| Skip::Internal)?;
        let config = &engine.config;
        let started = now();
        // A request for the provider's own search keeps every allowed tool: nothing to rank.
        let hybrid = shared.hybrid(config).filter(|_| !analysis.native_search);
        let ranked = match hybrid {
            Some((source, e)) => match start_hybrid(shared, &source, config, e, &mut analysis) {
                Start::Ranked(ranked) => ranked,
                Start::Call(token, gathered, slots) => {
                    metrics.since(metrics.phase_hybrid_us, started);
                    drop(engine);
                    self.waiting = Some(Waiting {
                        token,
                        analysis,
                        gathered,
                        slots,
                        body,
                    });
                    return Ok(Step::Waiting);
                }
            },
            None => Ranked::Keyword,
        };
        if ranked != Ranked::Keyword {
            metrics.since(metrics.phase_hybrid_us, started);
        }
        let debug = config.debug;
        self.gate(config, &mut analysis);
        drop(engine);
        self.apply(shared, debug, &mut analysis, &body, ranked)?;
        self.claim_tool_choice(reader);
        self.answer_unknown(shared, &analysis);
        Ok(Step::Done)
    }

    /// In search mode, an OpenAI Responses body whose `previous_response_id` names a response
    /// id the client was shown in place of the one the provider stored (see
    /// [`crate::search::alias`]), with the stored one.
    fn resolve_alias(&self, reader: Reader, body: &[u8]) -> Result<Option<String>, Skipped> {
        let follows_up = self.search_headers.is_some() || self.answer_headers.is_some();
        if !follows_up || reader != Reader::Dialect(Dialect::OpenaiResponses) {
            return Ok(None);
        }
        Ok(crate::search::alias::resolve(
            &super::search::alias_store(),
            body_text(body)?,
            self.alias_owner,
            super::search::now_seconds(),
        ))
    }

    /// Writes the selected tools into the body and records what was done.
    fn apply(
        &mut self,
        shared: &Shared,
        debug: bool,
        analysis: &mut Analysis,
        body: &[u8],
        ranked: Ranked,
    ) -> Result<(), Skipped> {
        let metrics = &shared.metrics;
        if let Some((headers, path_stream)) = self.search_headers.take() {
            // Search mode reads the whole request as text (it builds the follow-ups from it).
            let text = body_text(body)?;
            if let Some(planned) =
                self.plan_search(shared, analysis, text, body.len(), headers, path_stream)?
            {
                self.outcome = Some(Outcome::Filtered {
                    kept: planned.shown,
                    total: analysis.total(),
                    ranked,
                    search: Some(planned.kind),
                    kept_names: String::new(),
                    denied: analysis.access.as_ref().map(|g| g.denied),
                    evicted: analysis.evicted.clone(),
                    detected: loops_detected(analysis),
                    remembered: planned.remembered,
                    noted: noted_tools(analysis),
                    // Search mode answers made-up names itself (`x-toolsift-search`).
                    unknown: Vec::new(),
                    shadow: None,
                });
                count_loop(metrics, analysis);
                metrics.denied(Surface::Tools, analysis.denied());
                return Ok(());
            }
        }
        // Shadow ranking: what the selection keeps is measured, not applied (debug names the
        // tools it would have kept).
        let would_keep_names =
            (debug && self.shadow_drawn == Some(true)).then(|| analysis.explain_kept());
        let shadow = self.start_shadow(shared, analysis);
        let (kept, total) = (analysis.kept(), analysis.total());
        let started = now();
        if write_rewritten(analysis, body)? {
            metrics.since(metrics.phase_write_us, started);
            metrics.add(metrics.rewritten, 1);
        } else {
            metrics.add(metrics.unchanged, 1);
        }
        let (tokens_before, tokens_after) = analysis.tokens_before_after();
        // For the access log (`toolsift report`): the tools' tokens as sent and as forwarded.
        let tokens = format!("{tokens_before}/{tokens_after}");
        if let Err(status) = host::set_property("toolsift_tokens", tokens.as_bytes()) {
            log::debug!("cannot record the tokens for the access log: {status:?}");
        }
        metrics.add(metrics.tools_in, total);
        metrics.add(metrics.tools_out, kept);
        metrics.add(
            metrics.tokens_saved,
            tokens_before.saturating_sub(tokens_after),
        );
        match ranked {
            Ranked::Keyword => {}
            Ranked::Hybrid => metrics.add(metrics.ranked_hybrid, 1),
            Ranked::Fallback(reason) => {
                metrics.add(metrics.ranked_keyword, 1);
                metrics.fallback(reason);
            }
            Ranked::Incomplete => {
                metrics.add(metrics.ranked_keyword, 1);
                metrics.add(metrics.embeddings_incomplete, 1);
            }
        }
        // Prompts stay out of logs above debug level.
        log::debug!(
            "toolsift: {} query={:?} kept {kept}/{total} catalog_cache_hit={} ranked={ranked:?}",
            analysis.reader.name(),
            analysis.query,
            analysis.cache_hit
        );
        let kept_names = match would_keep_names {
            Some(names) => names,
            None if debug => analysis.explain_kept(),
            None => String::new(),
        };
        metrics.denied(Surface::Tools, analysis.denied());
        // The provider's own search (here only under access rules that took tools out).
        if analysis.native_search {
            metrics.add(metrics.search_native, 1);
        }
        self.outcome = Some(Outcome::Filtered {
            kept,
            total,
            ranked,
            search: analysis.native_search.then_some("native"),
            kept_names,
            denied: analysis.access.as_ref().map(|g| g.denied),
            evicted: analysis.evicted.clone(),
            detected: loops_detected(analysis),
            remembered: Vec::new(),
            noted: noted_tools(analysis),
            unknown: analysis.unknown.clone(),
            shadow,
        });
        count_loop(metrics, analysis);
        metrics.add(metrics.unknown_tools, analysis.unknown.len());
        Ok(())
    }

    /// Under access rules, answers the request with a 403 when it is refused whole (no
    /// identity, no tool its caller may see, a `tool_choice` of a denied tool under
    /// `denied: "refused"`, or a signed request, which cannot be rewritten, carrying denied
    /// tools); a signed request with nothing denied passes unchanged. `None`: go on.
    fn refuse(&mut self, shared: &Shared, analysis: &Analysis) -> Option<Result<Step, Skipped>> {
        let governed = analysis.access.as_ref()?;
        let denial = governed
            .denial
            .clone()
            .or_else(|| self.read_only.then(|| analysis.first_denial()).flatten());
        let Some(denial) = denial else {
            if self.read_only {
                return Some(Err(Skipped {
                    reason: Skip::Signed,
                    tools: Some(analysis.total()),
                }));
            }
            return None;
        };
        Some(self.deny(shared, &denial, analysis.total(), governed.denied))
    }

    /// Under access rules, a request on a path toolsift does not recognise: counted, and with
    /// `"unknown_paths": "deny"` answered (404, or 403 as configured; `Some`: answered).
    fn unknown_path(
        &mut self,
        shared: &Shared,
        pairs: &crate::pairs::HeaderMap,
        end_of_stream: bool,
    ) -> Option<Action> {
        let engine = shared.engine.try_borrow().ok()?;
        let policy = engine.policy()?;
        if !RequestHeaders::from_map(pairs, end_of_stream).unknown_path(&engine.config) {
            return None;
        }
        let metrics = &shared.metrics;
        metrics.add(metrics.access_unknown_paths, 1);
        let status = policy.unknown_path_status()?;
        drop(engine);
        let body = serde_json::json!({
            "error": {
                "type": "toolsift_error",
                "code": "unknown_path",
                "message": "toolsift: access rules are on, and this path is not one toolsift \
                    governs (an LLM API's, a custom or an MCP route's)",
            }
        });
        self.outcome = Some(Outcome::Denied {
            total: 0,
            denied: 0,
        });
        let headers: [(&str, &[u8]); 1] = [("content-type", b"application/json")];
        Some(
            match host::send_response(u32::from(status), &headers, body.to_string().as_bytes()) {
                Ok(()) => Action::Pause,
                Err(status) => {
                    log::warn!("cannot answer the unknown path: {status:?}");
                    Action::Continue
                }
            },
        )
    }

    /// Answers the request with access rules' 403 (`denial`), `total` tools read and `denied`
    /// of them (or of its connectors and namespace functions) denied.
    fn deny(
        &mut self,
        shared: &Shared,
        denial: &crate::pipeline::Denial,
        total: usize,
        denied: usize,
    ) -> Result<Step, Skipped> {
        let metrics = &shared.metrics;
        metrics.denied(Surface::Request, 1);
        metrics.denied(Surface::Tools, denied);
        log::debug!("toolsift: refused: {}", denial.message());
        self.outcome = Some(Outcome::Denied { total, denied });
        let headers: [(&str, &[u8]); 1] = [("content-type", b"application/json")];
        match host::send_response(403, &headers, denial.body().as_bytes()) {
            Ok(()) => Ok(Step::Answered),
            Err(status) => {
                log::warn!("cannot send the access denial: {status:?}");
                Err(Skip::Internal.into())
            }
        }
    }

    /// Under access rules, the request's remote MCP connectors and namespaces decided before
    /// its tools are read ([`crate::connectors`]): the body rewritten when they change, and a
    /// 403 when the request is refused for them (`Some`: answered).
    fn govern_outside(
        &mut self,
        shared: &Shared,
        reader: Reader,
        body: &mut Vec<u8>,
    ) -> Result<Option<Step>, Skipped> {
        let (Some(grant), Reader::Dialect(dialect)) = (self.grant.as_ref(), reader) else {
            return Ok(None);
        };
        let outcome = crate::connectors::govern(dialect.codec(), body_text(body)?, grant);
        self.outside_denied = outcome.denied;
        self.outside_kept = outcome.kept;
        if let Some(denial) = &outcome.denial {
            return self.deny(shared, denial, 0, outcome.denied).map(Some);
        }
        if let Some(written) = outcome.body {
            host::set_buffer(Buffer::RequestBody, 0, body.len(), written.as_bytes())
                .map_err(|_| Skip::Internal)?;
            *body = written.into_bytes();
        }
        Ok(None)
    }

    /// Search mode's first request: the meta-tool and the pinned tools instead of the
    /// catalog. Returns what was shown, or `None` when the request is filtered instead.
    fn plan_search(
        &mut self,
        shared: &Shared,
        analysis: &Analysis,
        text: &str,
        body_len: usize,
        headers: Vec<(String, String)>,
        path_stream: bool,
    ) -> Result<Option<SearchPlanned>, Skipped> {
        let metrics = &shared.metrics;
        let engine = shared.engine.try_borrow().map_err(|_| Skip::Internal)?;
        let config = &engine.config;
        let beta = headers
            .iter()
            .find(|(n, _)| n == "anthropic-beta")
            .map_or("", |(_, v)| v.as_str());
        let room = crate::search::plan::HeaderRoom {
            held: self.headers_held,
            anthropic_beta: beta,
        };
        // The session's memory of found tools, read once here and written when the loop ends.
        let memory = config.search.memory.as_ref().and_then(|m| {
            let key = SessionKey::of_request(
                m,
                self.alias_owner,
                self.session_header.as_deref(),
                analysis.session.as_deref(),
            )?;
            Some((Memory::new(m), key))
        });
        let remembered = memory.as_ref().map_or_else(Vec::new, |(m, key)| {
            m.recall(&vectors::SharedData, key, super::search::now_seconds())
        });
        let planned =
            crate::search::plan::plan_remembering(config, analysis, text, room, &remembered);
        let only = |shown: usize, kind: &'static str| SearchPlanned {
            shown,
            kind,
            remembered: Vec::new(),
        };
        match planned {
            Some(crate::search::plan::Planned::Native(without_denied)) => {
                metrics.add(metrics.search_native, 1);
                let denied = analysis.access.as_ref().map_or(0, |g| g.denied_functions);
                let shown = analysis.total().saturating_sub(denied);
                match without_denied {
                    Some(body) => replace_request_body(shared, analysis, body_len, &body, shown)?,
                    None => metrics.add(metrics.unchanged, 1),
                }
                Ok(Some(only(shown, "native")))
            }
            Some(crate::search::plan::Planned::Provider(plan)) => {
                replace_request_body(shared, analysis, body_len, &plan.body, plan.shown)?;
                if let Some(beta) = &plan.beta {
                    add_anthropic_beta(beta);
                }
                metrics.add(metrics.search_provider, 1);
                Ok(Some(only(plan.shown, "provider")))
            }
            Some(crate::search::plan::Planned::Search(plan)) => {
                let shown = analysis.total() - plan.deferred(analysis);
                replace_request_body(shared, analysis, body_len, &plan.body, shown)?;
                let remembered = plan.remembered.clone();
                metrics.add(metrics.search_remembered, remembered.len());
                let session = crate::search::round::Session::new(config, analysis, text, plan)
                    .with_suggestions(engine.suggestions().cloned());
                metrics.add(metrics.search_requests, 1);
                let stream = analysis.stream || path_stream;
                // Response headers are held only where holding request headers proved to work.
                let responder = Responder::new(session, stream, self.headers_held);
                let mut search = Search::new(responder, headers, self.alias_owner);
                if let Some((memory, key)) = memory {
                    search.remember_in(memory, key, analysis.evicted.clone());
                }
                self.search = Some(search);
                Ok(Some(SearchPlanned {
                    shown,
                    kind: "search",
                    remembered,
                }))
            }
            None => Ok(None),
        }
    }

    /// The embeddings call answered (or Envoy gave up on it): rank with what it brought, or by
    /// keyword, finish the body, and let the request go on.
    fn resume(
        &mut self,
        shared: &Shared,
        waiting: Waiting,
        num_headers: usize,
        body_size: usize,
    ) -> Action {
        let started = now();
        let Waiting {
            mut analysis,
            mut gathered,
            slots,
            body,
            ..
        } = waiting;
        let (debug, ranked) = {
            let Ok(engine) = shared.engine.try_borrow() else {
                return self.skip(shared, Skip::Internal.into());
            };
            let config = &engine.config;
            let ranked = match shared.hybrid(config) {
                Some((source, e)) => {
                    let ranked = rank_with_answer(
                        &source,
                        config,
                        e,
                        &mut analysis,
                        &mut gathered,
                        &slots,
                        Answer {
                            headers: num_headers,
                            body_size,
                        },
                    );
                    if ranked == Ranked::Fallback(Fallback::Timeout) {
                        // Too many tool texts to embed within timeout_ms: the root context
                        // fetches them without a deadline while requests go on by keyword.
                        let had_tools = slots.iter().any(|s| matches!(s, Slot::Tool(_)));
                        if let (true, Ok(mut backfill)) =
                            (had_tools, shared.backfill.try_borrow_mut())
                        {
                            backfill.queue(&analysis.catalog, gathered.missing_tools.clone());
                        }
                    }
                    ranked
                }
                None => Ranked::Keyword,
            };
            self.gate(config, &mut analysis);
            (config.debug, ranked)
        };
        let result = self.apply(shared, debug, &mut analysis, &body, ranked);
        self.claim_tool_choice(analysis.reader);
        if result.is_ok() {
            self.answer_unknown(shared, &analysis);
        }
        shared
            .metrics
            .since(shared.metrics.phase_answer_us, started);
        match result {
            Ok(()) => Action::Continue,
            Err(skipped) => self.skip(shared, skipped),
        }
    }

    /// Lets a request through untouched, or answers it with a 400 under `on_error: reject`.
    fn skip(&mut self, shared: &Shared, skipped: Skipped) -> Action {
        self.buffering = None;
        let metrics = &shared.metrics;
        metrics.skipped(skipped.reason);
        if skipped.reason == Skip::NativeSearch {
            metrics.add(metrics.search_native, 1);
        }
        if let Some(n) = skipped.tools {
            metrics.add(metrics.tools_in, n);
            metrics.add(metrics.tools_out, n);
        }
        if skipped.reason != Skip::NotLlm {
            self.outcome = Some(Outcome::Skipped(skipped));
        }
        // Under access rules a request toolsift cannot read is never let through: its tools
        // could be any.
        let reject = skipped.reason.is_error()
            && shared
                .engine
                .try_borrow()
                .is_ok_and(|e| e.config.on_error == OnError::Reject || e.config.access.is_some());
        if !reject {
            return Action::Continue;
        }
        let body = error_body(skipped.reason);
        // No x-toolsift here: Envoy runs the local reply through on_http_response_headers,
        // which adds it (once) like on any other response.
        let headers: [(&str, &[u8]); 1] = [("content-type", b"application/json")];
        match host::send_response(400, &headers, body.as_bytes()) {
            // The local reply ends the stream; nothing more goes upstream.
            Ok(()) => Action::Pause,
            Err(status) => {
                log::warn!("cannot send the rejection: {status:?}");
                Action::Continue
            }
        }
    }
}

impl Filter {
    fn header_value(&self) -> String {
        match &self.outcome {
            Some(Outcome::Filtered {
                kept,
                total,
                ranked,
                search,
                denied,
                evicted,
                detected,
                remembered,
                noted,
                unknown,
                shadow,
                ..
            }) => {
                let mode = search.map(|s| format!(" search={s}")).unwrap_or_default();
                let gating = self
                    .gated
                    .as_ref()
                    .map(|g| g.header_suffix())
                    .unwrap_or_default();
                let denied = denied.map(|n| format!(" denied={n}")).unwrap_or_default();
                // Tool names are client data: percent-encoded, as everywhere in the header.
                let list = |names: &[String]| {
                    let safe: Vec<_> = names.iter().map(|n| header_safe(n)).collect();
                    safe.join(",")
                };
                let evicted = match (evicted.as_slice(), detected.as_slice()) {
                    ([], []) => String::new(),
                    ([], names) => format!(" loop=detected:{}", list(names)),
                    (names, _) => format!(" loop=evicted:{}", list(names)),
                };
                let evicted = match noted.as_slice() {
                    [] => evicted,
                    names => format!("{evicted} noted={}", list(names)),
                };
                let mut made_up: Vec<String> = Vec::new();
                for name in unknown {
                    if !made_up.contains(name) {
                        made_up.push(name.clone());
                    }
                }
                let unknown = match made_up.as_slice() {
                    [] => String::new(),
                    names => format!(" unknown={}", list(names)),
                };
                let remembered = match remembered.as_slice() {
                    [] => String::new(),
                    names => {
                        let names: Vec<_> = names.iter().map(|n| header_safe(n)).collect();
                        format!(" remembered={}", names.join(","))
                    }
                };
                let shadow = shadow
                    .map(|n| format!(" shadow=would_keep:{n}"))
                    .unwrap_or_default();
                header_value(*kept, *total, None)
                    + &denied
                    + &evicted
                    + &unknown
                    + &ranked.header_suffix()
                    + &mode
                    + &remembered
                    + &gating
                    + &shadow
            }
            Some(Outcome::Denied { total, denied }) => {
                header_value(0, *total, None) + &format!(" denied={denied} access=refused")
            }
            Some(Outcome::Skipped(skipped)) => {
                let n = skipped.tools;
                header_value(n.unwrap_or(0), n.unwrap_or(0), Some(skipped))
            }
            None => String::new(),
        }
    }
}

/// What search mode made of a request, for the `x-toolsift` header.
struct SearchPlanned {
    /// Function tools shown.
    shown: usize,
    /// The header's `search=` value: `search`, `provider` or `native`.
    kind: &'static str,
    /// Tools shown because the session's memory offered them.
    remembered: Vec<String>,
}

/// How a hybrid-ranked request starts.
enum Start {
    /// Ranked already: every vector was known, or it goes on by keyword (and why).
    Ranked(Ranked),
    /// An embeddings call is out (its token), for these slots of what was gathered.
    Call(u32, Gathered, Vec<Slot>),
}

/// Ranks `analysis` with the embeddings if every vector is known; otherwise sends the call for
/// the missing ones.
fn start_hybrid(
    shared: &Shared,
    source: &Source<'_, vectors::SharedData>,
    config: &crate::config::Config,
    e: &crate::config::Embeddings,
    analysis: &mut Analysis,
) -> Start {
    let gathered = source.gather(&analysis.catalog, &analysis.query);
    if let Some((query, tools)) = gathered.complete() {
        analysis.rank_hybrid(config, &query, &tools);
        return Start::Ranked(Ranked::Hybrid);
    }
    let (slots, inputs) = gathered.plan(&analysis.catalog, e.max_batch);
    if inputs.is_empty() {
        return Start::Ranked(if analysis.catalog.fetching() {
            // The question is known; the tools are still coming in the background.
            Ranked::Incomplete
        } else {
            // Everything is known but the sizes disagree: cached under another model.
            Ranked::Fallback(Fallback::Dimensions)
        });
    }
    let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
    let timeout = Duration::from_millis(e.timeout_ms as u64);
    match vectors::dispatch(e, &refs, timeout) {
        Ok(token) => {
            let metrics = &shared.metrics;
            metrics.add(metrics.embeddings_calls, 1);
            metrics.add(metrics.embeddings_inputs, inputs.len());
            Start::Call(token, gathered, slots)
        }
        Err(status) => {
            log::debug!("embeddings call to {} failed: {status:?}", e.cluster);
            Start::Ranked(Ranked::Fallback(Fallback::Dispatch))
        }
    }
}

/// What `on_http_call_response` says of the answer: its header count (0: no response) and
/// body size.
#[derive(Clone, Copy)]
struct Answer {
    headers: usize,
    body_size: usize,
}

/// The `:status` of the current `on_http_call_response`, `None` when the call got no response
/// (reset, or cut off mid-body by its timeout). With no response there is no header map, and
/// the SDK's getter panics on the host's answer to reading one: it must not be asked.
pub(super) fn call_status(num_headers: usize) -> Option<String> {
    if num_headers == 0 {
        return None;
    }
    host::header_text(Headers::CallResponse, ":status")
        .ok()
        .flatten()
}

/// The vectors of the embeddings answer of the current `on_http_call_response`, or why there
/// are none.
pub(super) fn read_answer(
    num_headers: usize,
    body_size: usize,
    inputs: usize,
    dimensions: Option<usize>,
) -> Result<Vec<Vec<f32>>, Fallback> {
    let Some(status) = call_status(num_headers) else {
        // Reset before or while answering: no response at all.
        return Err(Fallback::Status);
    };
    if let Some(reason) = Fallback::of_status(status.parse::<u16>().ok()) {
        return Err(reason);
    }
    let answer = host::buffer(Buffer::CallResponseBody, 0, body_size).unwrap_or_default();
    parse_response(&answer, inputs, dimensions)
}

/// Reads the embeddings answer of the current `on_http_call_response` and ranks with it.
fn rank_with_answer(
    source: &Source<'_, vectors::SharedData>,
    config: &crate::config::Config,
    e: &crate::config::Embeddings,
    analysis: &mut Analysis,
    gathered: &mut Gathered,
    slots: &[Slot],
    answer: Answer,
) -> Ranked {
    // Vectors must match the configured size, or the size of the ones already known: a
    // wrong-sized answer is never cached.
    let expected = e.dimensions.or_else(|| gathered.known_dimensions());
    let vectors = match read_answer(answer.headers, answer.body_size, slots.len(), expected) {
        Ok(vectors) => vectors,
        Err(reason) => return Ranked::Fallback(reason),
    };
    source.fill(&analysis.catalog, gathered, slots, vectors);
    if !gathered.missing_tools.is_empty() {
        return Ranked::Incomplete;
    }
    match gathered.complete() {
        Some((query, tools)) => {
            analysis.rank_hybrid(config, &query, &tools);
            Ranked::Hybrid
        }
        None => Ranked::Fallback(Fallback::Dimensions),
    }
}

impl Context for Filter {
    fn on_http_call_response(
        &mut self,
        token_id: u32,
        num_headers: usize,
        body_size: usize,
        _num_trailers: usize,
    ) {
        let Some(shared) = self.shared.clone() else {
            return;
        };
        if let Some(wait) = self.gating.take_if(|g| g.token == token_id) {
            if self.on_gating(&shared, wait, num_headers, body_size) == Action::Continue {
                if let Err(status) = host::resume(host::Stream::Request) {
                    log::warn!("cannot resume the request: {status:?}");
                }
            }
            return;
        }
        if let Some(mcp) = self.mcp.as_mut().filter(|m| m.token() == Some(token_id)) {
            if mcp.on_call(&shared, token_id, num_headers, body_size) {
                if let Err(status) = host::resume(host::Stream::Request) {
                    log::warn!("cannot resume the request: {status:?}");
                }
            }
            return;
        }
        if let Some(search) = self.search.as_mut().filter(|s| s.token() == Some(token_id)) {
            if search.on_call(&shared, token_id, num_headers, body_size) {
                if let Err(status) = host::resume(host::Stream::Response) {
                    log::warn!("cannot resume the response: {status:?}");
                }
            }
            return;
        }
        let Some(waiting) = self.waiting.take_if(|w| w.token == token_id) else {
            log::debug!("unexpected http call response {token_id}");
            return;
        };
        if self.resume(&shared, waiting, num_headers, body_size) == Action::Continue {
            if let Err(status) = host::resume(host::Stream::Request) {
                log::warn!("cannot resume the request: {status:?}");
            }
        }
    }
}

impl HttpContext for Filter {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        let Some(shared) = self.shared.clone() else {
            return Action::Continue;
        };
        shared.metrics.add(shared.metrics.requests, 1);
        let pairs = host::headers(Headers::Request);
        let identity = super::identity::grant(&shared, &pairs);
        self.grant = identity.as_ref().map(|(grant, _)| grant.clone());
        let caller = identity.as_ref().map(|(_, caller)| caller.key());
        if let Some(mut mcp) = super::mcp::route(&shared, &pairs, end_of_stream, identity) {
            // MCP routes: the body callbacks read the message; nothing is held here (a request
            // the access rules refuse at once is answered).
            let action = mcp.on_headers(&shared);
            self.mcp = Some(mcp);
            return action;
        }
        match self.screen_headers(&shared, &pairs, end_of_stream) {
            Ok(reader) => {
                if let Err(status) = host::remove_header(Headers::Request, "content-length") {
                    log::warn!("cannot remove content-length: {status:?}");
                    return self.skip(&shared, Skip::Internal.into());
                }
                self.buffering = Some(reader);
                if let (Some(grant), crate::dialects::Reader::Dialect(dialect)) =
                    (self.grant.clone(), reader)
                {
                    if let Some(refused) = self.guard(&shared, dialect, grant, &pairs) {
                        return refused;
                    }
                }
                // Custom shapes are filtered in search mode too, and have no response reader.
                if let Reader::Dialect(_) = reader {
                    self.draw_shadow(&shared);
                }
                if let Reader::Dialect(dialect) = reader {
                    match follow_up_headers(&shared, dialect, &pairs) {
                        Some((Mode::Search, headers)) => self.search_headers = Some(headers),
                        Some((Mode::Filter, headers)) => self.answer_headers = Some(headers),
                        None => {}
                    }
                }
                if self.search_headers.is_some() || self.answer_headers.is_some() {
                    self.alias_owner =
                        crate::search::alias::owner(caller.as_deref(), |n| pairs.get(n));
                    self.session_header = session_header(&shared, &pairs);
                    // The model's turn must be read: ask for it uncompressed (SDKs offer gzip,
                    // and providers use it), for the first request and so for every follow-up,
                    // which copies these headers. An Envoy compressor filter placed before
                    // toolsift (it sees the response after toolsift) still compresses what
                    // the client gets.
                    if let Err(status) = host::remove_header(Headers::Request, "accept-encoding") {
                        log::debug!("cannot remove accept-encoding: {status:?}");
                    }
                    if self.hold_headers(&shared) {
                        return Action::Pause;
                    }
                }
                // Otherwise Continue, so no Envoy setting is needed (without
                // `allow_on_headers_stop_iteration`, pausing here stalls the request until the
                // idle timeout). The body callbacks buffer.
                Action::Continue
            }
            Err(reason) => {
                if let Some(answered) = self.unknown_path(&shared, &pairs, end_of_stream) {
                    return answered;
                }
                self.skip(&shared, reason.into())
            }
        }
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        if let (Some(shared), Some(mcp)) = (self.shared.clone(), self.mcp.as_mut()) {
            return mcp.on_body(&shared, body_size, end_of_stream);
        }
        let (Some(shared), Some(reader)) = (self.shared.clone(), self.buffering) else {
            return Action::Continue;
        };
        if self.headers_held {
            // Still held, unless the root context had to resume them (see `hold_headers`).
            self.headers_held = shared
                .watchdog
                .try_borrow_mut()
                .is_ok_and(|mut w| w.body_arrived(self.context_id));
        }
        // `body_size` is the size of everything buffered so far, not of this chunk.
        let too_large = shared
            .engine
            .try_borrow()
            .map_or(true, |e| body_size > e.config.max_body_bytes);
        if too_large {
            // Continue releases what was buffered and streams the rest through.
            return self.skip(&shared, Skip::TooLarge.into());
        }
        if !end_of_stream {
            return Action::Pause;
        }
        self.finish(&shared, reader, body_size)
    }

    fn on_http_request_trailers(&mut self, _num_trailers: usize) -> Action {
        if let (Some(shared), Some(mcp)) = (self.shared.clone(), self.mcp.as_mut()) {
            return mcp.on_body(&shared, usize::MAX, true);
        }
        // With trailers (HTTP/2, gRPC-web), the body callback never sees end_of_stream.
        let (Some(shared), Some(reader)) = (self.shared.clone(), self.buffering) else {
            return Action::Continue;
        };
        self.finish(&shared, reader, usize::MAX)
    }

    fn on_http_response_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        let Some(shared) = self.shared.clone() else {
            return Action::Continue;
        };
        self.report_access(&shared);
        let (response_header, debug) = match shared.engine.try_borrow() {
            Ok(engine) => (engine.config.response_header, engine.config.debug),
            Err(_) => (false, false),
        };
        if let Some(mcp) = self.mcp.as_mut() {
            mcp.on_response_headers(response_header);
            return Action::Continue;
        }
        if self.outcome.is_some() {
            let value = self.header_value();
            // For the access log: `%FILTER_STATE(wasm.toolsift:PLAIN)%`.
            if let Err(status) = host::set_property("toolsift", value.as_bytes()) {
                log::debug!("cannot record the decision for the access log: {status:?}");
            }
            if response_header {
                add_response_header("x-toolsift", &value);
            }
        }
        if let (true, true, Some(Outcome::Filtered { kept_names, .. })) =
            (response_header, debug, &self.outcome)
        {
            // Search mode ranks nothing up front: no empty header.
            if !kept_names.is_empty() {
                add_response_header("x-toolsift-tools", kept_names);
            }
        }
        if let Some(watch) = self.shadow.as_mut() {
            let header = |name: &str| {
                host::header(Headers::Response, name)
                    .map(|v| String::from_utf8_lossy(&v).into_owned())
            };
            let (status, content_type, content_encoding) = (
                header(":status"),
                header("content-type"),
                header("content-encoding"),
            );
            watch.on_head(&crate::shadow::Head {
                status: status.as_deref(),
                content_type: content_type.as_deref(),
                content_encoding: content_encoding.as_deref(),
            });
            if end_of_stream {
                self.feed_shadow(&shared, 0, true);
            }
        }
        // Search mode's response side never depends on `response_header`: with it off, the
        // client would get the model's `find_tools` call.
        match self.search.as_mut() {
            Some(search) => search.on_response_headers(&shared, end_of_stream),
            None => Action::Continue,
        }
    }

    fn on_http_response_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        let action = self.response_body(body_size, end_of_stream);
        if let Some(shared) = self.shared.clone() {
            self.report_access(&shared);
        }
        action
    }

    fn on_http_response_trailers(&mut self, _num_trailers: usize) -> Action {
        // HTTP/2 responses that end with trailers: the body callback never saw end_of_stream.
        let Some(shared) = self.shared.clone() else {
            return Action::Continue;
        };
        self.feed_shadow(&shared, self.shadow_fed, true);
        let action = match self.search.as_mut() {
            Some(search) => search.on_response_trailers(&shared),
            None => Action::Continue,
        };
        self.report_access(&shared);
        action
    }

    fn on_log(&mut self) {
        // Counted even if decided after the last response callback (the access log has had
        // its line by now).
        if let Some(shared) = self.shared.clone() {
            self.report_access(&shared);
        }
        if let (true, Some(shared)) = (self.headers_held, &self.shared) {
            if let Ok(mut watchdog) = shared.watchdog.try_borrow_mut() {
                watchdog.ended(self.context_id);
            }
        }
    }
}

impl Filter {
    fn response_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        if let (Some(shared), Some(mcp)) = (self.shared.as_ref(), self.mcp.as_mut()) {
            return mcp.on_response_body(shared, body_size);
        }
        let Some(shared) = self.shared.clone() else {
            return Action::Continue;
        };
        self.feed_shadow(&shared, body_size, end_of_stream);
        let action = match self.search.as_mut() {
            Some(search) => search.on_response_body(&shared, body_size, end_of_stream),
            None => Action::Continue,
        };
        // A paused response's bytes stay in Envoy's buffer: the next callback's follow them.
        self.shadow_fed = if action == Action::Pause {
            body_size
        } else {
            0
        };
        action
    }

    /// Under access rules: what was decided since the last report, counted and recorded for
    /// the access log (see [`super::audit`]).
    fn report_access(&self, shared: &Shared) {
        if let Some(grant) = &self.grant {
            super::audit::report(shared.access_metrics.as_ref(), grant);
        }
    }

    /// Under access rules, every LLM request's answer is checked before the client gets it
    /// (whatever becomes of the request: filtered, passed with few tools, handed to the
    /// provider's search): a call of a tool its caller may not use is replaced by a refusal.
    /// The answer is asked for uncompressed so that it can be read. A request whose answer
    /// would come in a stream toolsift cannot read (Gemini's JSON array) is refused here with a
    /// 400, since a denied call in it could not be stopped.
    /// Search mode replaces the guard with its own machine, which checks calls the same way.
    fn guard(
        &mut self,
        shared: &Shared,
        dialect: Dialect,
        grant: crate::access::Grant,
        map: &crate::pairs::HeaderMap,
    ) -> Option<Action> {
        let path = map
            .get(":path")
            .and_then(|p| std::str::from_utf8(p).ok())
            .unwrap_or_default();
        if !dialect.codec().guard_reads(path) && !grant.enforces() {
            // Audit mode refuses nothing: the stream passes unchecked.
            return None;
        }
        if !dialect.codec().guard_reads(path) {
            let metrics = &shared.metrics;
            metrics.add(metrics.access_unsupported_stream, 1);
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
            let headers: [(&str, &[u8]); 1] = [("content-type", b"application/json")];
            return Some(
                match host::send_response(400, &headers, body.to_string().as_bytes()) {
                    Ok(()) => Action::Pause,
                    Err(status) => {
                        log::warn!("cannot refuse the unsupported stream: {status:?}");
                        Action::Continue
                    }
                },
            );
        }
        if let Err(status) = host::remove_header(Headers::Request, "accept-encoding") {
            log::debug!("cannot remove accept-encoding: {status:?}");
        }
        let session = crate::search::round::Session::guard(dialect, grant);
        self.search = Some(Search::new(
            Responder::new(session, false, false),
            Vec::new(),
            self.alias_owner,
        ));
        None
    }

    /// Search mode with `search.hold_headers`: holds the request headers until the body is read,
    /// so a `native_search` rule can add `anthropic-beta` (only the body names the model) and
    /// the follow-ups can copy the request as the router rewrote it (a header map that was held
    /// stays readable). That needs Envoy's `allow_on_headers_stop_iteration: true`; whether it
    /// is set shows in the traffic (`crate::search::hold`): until a held request has shown it,
    /// the root context's tick resumes any held request whose body does not come.
    fn hold_headers(&mut self, shared: &Shared) -> bool {
        let wanted = shared
            .engine
            .try_borrow()
            .is_ok_and(|e| e.config.search.hold_headers);
        let Ok(mut watchdog) = shared.watchdog.try_borrow_mut() else {
            return false;
        };
        if !wanted || !watchdog.may_hold() {
            return false;
        }
        if watchdog.held(self.context_id, now_millis()) {
            let tick = Duration::from_millis(crate::search::hold::TICK_MS);
            if let Err(status) = host::set_tick_period(tick) {
                // Without the tick nothing could resume a stalled request: do not hold.
                log::warn!("cannot start the tick that watches held requests: {status:?}");
                watchdog.ended(self.context_id);
                return false;
            }
        }
        self.headers_held = true;
        true
    }
}

impl Filter {
    /// `gating.mcp`: the verdict came (or the call failed: the request goes on without it, or
    /// with the verdict of `gating.rules`).
    fn on_gating(
        &mut self,
        shared: &Shared,
        wait: GatingWait,
        num_headers: usize,
        body_size: usize,
    ) -> Action {
        let GatingWait {
            dialect,
            analysis,
            body,
            ..
        } = wait;
        let server = super::mcp::read_gating(shared, num_headers, body_size);
        let verdict = crate::mcp::gating::merge(self.verdict.take(), server);
        match self.with_verdict(shared, dialect, analysis, body, verdict) {
            Ok(Step::Done) => Action::Continue,
            Ok(Step::Waiting | Step::Answered) => Action::Pause,
            Err(skipped) => self.skip(shared, skipped),
        }
    }

    /// Goes on with the `_tool_gating` verdict (of the server, of `gating.rules`, or both). A
    /// claim under `gating.claim: "answer"` is answered here, without the model.
    fn with_verdict(
        &mut self,
        shared: &Shared,
        dialect: Dialect,
        analysis: Analysis,
        body: Vec<u8>,
        verdict: Option<crate::mcp::gating::Verdict>,
    ) -> Result<Step, Skipped> {
        let answer = shared.engine.try_borrow().is_ok_and(|e| {
            e.config
                .gating
                .as_ref()
                .is_some_and(|g| g.claim == crate::config::ClaimMode::Answer)
        });
        let claim = verdict.as_ref().and_then(|v| v.claim.as_ref()).filter(|c| {
            answer
                && !analysis.stream
                && analysis.may_see(&c.name)
                && (0..analysis.catalog.draft.entries.len())
                    .any(|e| analysis.catalog.name(e) == Some(c.name.as_str()))
        });
        if let Some(claim) = claim {
            let model = crate::mcp::llm::model_of(std::str::from_utf8(&body).unwrap_or_default());
            let reply = crate::mcp::llm::claimed_answer(dialect, claim, &model);
            let headers: [(&str, &[u8]); 1] = [("content-type", b"application/json")];
            if host::send_response(200, &headers, reply.as_bytes()).is_ok() {
                super::mcp::count_claim(shared);
                self.gated = Some(crate::mcp::llm::Gated {
                    excluded: 0,
                    claimed: Some(claim.clone()),
                });
                self.outcome = Some(Outcome::Filtered {
                    kept: 0,
                    total: analysis.total(),
                    ranked: Ranked::Keyword,
                    search: None,
                    kept_names: String::new(),
                    denied: analysis.access.as_ref().map(|g| g.denied),
                    evicted: Vec::new(),
                    detected: Vec::new(),
                    remembered: Vec::new(),
                    noted: Vec::new(),
                    unknown: Vec::new(),
                    shadow: None,
                });
                return Ok(Step::Answered);
            }
        }
        self.verdict = verdict;
        self.rank_and_apply(shared, Reader::Dialect(dialect), analysis, body)
    }

    /// Filter mode with `unknown_tools.answer`: once the body that goes upstream is written
    /// (kept tools, the loop guard's notes, a claimed `tool_choice`), the response side
    /// watches the model's answer for calls of tools the request does not carry and answers
    /// them in follow-ups that continue that body. It replaces the access rules' guard, whose
    /// checks it makes as well. A request for the provider's own search is left as it is.
    fn answer_unknown(&mut self, shared: &Shared, analysis: &Analysis) {
        let Some((headers, path_stream)) = self.answer_headers.take() else {
            return;
        };
        let (Reader::Dialect(dialect), false) = (analysis.reader, analysis.native_search) else {
            return;
        };
        let Ok(engine) = shared.engine.try_borrow() else {
            return;
        };
        let sent = host::buffer(Buffer::RequestBody, 0, usize::MAX).unwrap_or_default();
        let Ok(sent) = String::from_utf8(sent) else {
            return;
        };
        let session =
            crate::search::round::Session::answering(&engine.config, analysis, dialect, sent);
        let stream = analysis.stream || path_stream;
        // Response headers are held only where holding request headers proved to work.
        let responder = Responder::new(session, stream, self.headers_held);
        self.search = Some(Search::new(responder, headers, self.alias_owner));
    }

    /// Applies the `_tool_gating` verdict, if any, to the selection.
    fn gate(&mut self, config: &crate::config::Config, analysis: &mut Analysis) {
        if let Some(verdict) = &self.verdict {
            self.gated = Some(crate::mcp::llm::apply(analysis, config, verdict));
        }
    }

    /// A claim (`gating.claim: "tool_choice"`, or a stream under `"answer"`): `tool_choice`
    /// names the claimed tool in the body the upstream gets.
    fn claim_tool_choice(&self, reader: Reader) {
        let Some(claim) = self.gated.as_ref().and_then(|g| g.claimed.as_ref()) else {
            return;
        };
        // Only a dialect's requests are gated.
        let Reader::Dialect(dialect) = reader else {
            return;
        };
        let body = host::buffer(Buffer::RequestBody, 0, usize::MAX).unwrap_or_default();
        let Ok(text) = std::str::from_utf8(&body) else {
            return;
        };
        match dialect.codec().with_tool_choice(text, &claim.name) {
            Some(chosen) => {
                if let Err(status) =
                    host::set_buffer(Buffer::RequestBody, 0, body.len(), chosen.as_bytes())
                {
                    log::warn!("cannot write the claimed tool_choice: {status:?}");
                }
            }
            None => log::debug!("gating: no tool_choice could be written for the claim"),
        }
    }
}

impl Filter {
    /// `shadow`: draws whether this LLM request is shadowed. Its answer will be read (shadowed
    /// or filtered), so it is asked for uncompressed, as access rules ask for it.
    fn draw_shadow(&mut self, shared: &Shared) {
        let rate = shared
            .engine
            .try_borrow()
            .ok()
            .and_then(|e| e.config.shadow_sample());
        let (Some(rate), Ok(mut sampler)) = (rate, shared.sampler.try_borrow_mut()) else {
            return;
        };
        self.shadow_drawn = Some(sampler.sample(rate));
        if let Err(status) = host::remove_header(Headers::Request, "accept-encoding") {
            log::debug!("cannot remove accept-encoding: {status:?}");
        }
    }

    /// `shadow`, as the selection is written: a shadowed request keeps every tool its caller
    /// may see, and the answer of any ranked request is watched. Returns, when shadowed, how
    /// many tools the selection would have kept.
    fn start_shadow(&mut self, shared: &Shared, analysis: &mut Analysis) -> Option<usize> {
        let drawn = self.shadow_drawn.take()?;
        let dialect = analysis.dialect()?;
        // The provider's own search gets every allowed tool anyway: no cut to measure.
        if analysis.native_search {
            return None;
        }
        let top_k = shared.engine.try_borrow().ok()?.config.top_k;
        let (card, would_keep) = if drawn {
            let would = analysis.shadow();
            shared.metrics.add(shared.metrics.shadow_requests, 1);
            let card = crate::shadow::Scorecard::new(analysis, &would, true, top_k);
            (card, Some(would.kept_count()))
        } else {
            let card = crate::shadow::Scorecard::new(analysis, &analysis.selection, false, top_k);
            (card, None)
        };
        self.shadow = Some(crate::shadow::Watch::new(card, dialect));
        would_keep
    }

    /// Gives `shadow` the answer's bytes past those it has (`body_size`: what Envoy's buffer
    /// holds now), and records what the answer showed when it `ended`.
    fn feed_shadow(&mut self, shared: &Shared, body_size: usize, ended: bool) {
        let Some(watch) = self.shadow.as_mut().filter(|w| !w.finished()) else {
            return;
        };
        let fresh = body_size.saturating_sub(self.shadow_fed);
        if fresh > 0 {
            match host::buffer(Buffer::ResponseBody, self.shadow_fed, fresh) {
                Ok(bytes) => watch.feed(&bytes),
                Err(status) => log::debug!("cannot read the answer for shadow: {status:?}"),
            }
        }
        if !ended {
            return;
        }
        let record = watch.finish();
        shared.metrics.shadow(&record);
        let value = record.log_value();
        // For the access log: `%FILTER_STATE(wasm.toolsift_shadow:PLAIN)%`.
        if let Err(status) = host::set_property("toolsift_shadow", value.as_bytes()) {
            log::debug!("cannot record the shadow ranks for the access log: {status:?}");
        }
        log::debug!("toolsift: {value}");
    }
}

/// The tools whose guidance note went upstream.
fn noted_tools(analysis: &Analysis) -> Vec<String> {
    analysis.notes.iter().map(|n| n.tool.clone()).collect()
}

/// With `loop_guard.report_only`: the tools found looping and left in.
fn loops_detected(analysis: &Analysis) -> Vec<String> {
    if analysis.evicted.is_empty() {
        analysis.looping.clone()
    } else {
        Vec::new()
    }
}

/// The loop guard's counts for one request that went upstream.
fn count_loop(metrics: &super::metrics::Metrics, analysis: &Analysis) {
    metrics.add(metrics.loop_detected, analysis.looping.len());
    if !analysis.looping.is_empty() {
        log::debug!("toolsift: loop detected: {:?}", analysis.looping);
    }
    metrics.add(metrics.loop_evicted, analysis.evicted.len());
    metrics.add(metrics.loop_noted, analysis.notes.len());
}

/// Milliseconds since the epoch by Envoy's clock (0 if it cannot be read).
pub(super) fn now_millis() -> u64 {
    host::now()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .and_then(|d| u64::try_from(d.as_millis()).ok())
        .unwrap_or(0)
}

/// With `search.memory.session.header`, the value of that request header (bytes: any value
/// names a session, and only its hash is kept).
fn session_header(shared: &Shared, pairs: &crate::pairs::HeaderMap) -> Option<Vec<u8>> {
    let engine = shared.engine.try_borrow().ok()?;
    let name = engine
        .config
        .search
        .memory
        .as_ref()?
        .session
        .header
        .as_deref()?;
    pairs.get(name).map(<[u8]>::to_vec)
}

/// The request headers the follow-ups will carry, and whether the path asks for a stream, with
/// the mode that sends them: search mode's searches, or filter mode's answers to made-up calls
/// (`unknown_tools.answer`). `None` when no follow-up is sent, and for the requests whose
/// answers cannot be followed up: Bedrock's binary event stream, Gemini's JSON-array stream,
/// and a request with a header value that is not UTF-8 (the follow-ups could not carry it as
/// it was). Search mode filters those instead (counted); in filter mode the model's calls reach
/// the client as it made them.
fn follow_up_headers(
    shared: &Shared,
    dialect: Dialect,
    map: &crate::pairs::HeaderMap,
) -> Option<(Mode, FollowUpHeaders)> {
    let engine = shared.engine.try_borrow().ok()?;
    engine.config.follow_up_rounds()?;
    let mode = engine.config.mode;
    let headers = map.texts();
    let path = headers
        .as_ref()
        .and_then(|h| h.iter().find(|(n, _)| n == ":path"))
        .map(|(_, v)| v.as_str())
        .unwrap_or_default();
    let path_stream = dialect.codec().path_stream(path);
    match headers {
        Some(headers) if path_stream != PathStream::Unsupported => {
            Some((mode, (headers, path_stream == PathStream::Stream)))
        }
        _ => {
            if mode == Mode::Search {
                shared.metrics.add(shared.metrics.search_unsupported, 1);
            }
            None
        }
    }
}

/// Search mode's request body in place of the client's, counted: `shown` of the request's
/// function tools are visible to the model.
fn replace_request_body(
    shared: &Shared,
    analysis: &Analysis,
    body_len: usize,
    body: &str,
    shown: usize,
) -> Result<(), Skipped> {
    host::set_buffer(Buffer::RequestBody, 0, body_len, body.as_bytes())
        .map_err(|_| Skip::Internal)?;
    let metrics = &shared.metrics;
    metrics.add(metrics.rewritten, 1);
    metrics.add(metrics.tools_in, analysis.total());
    metrics.add(metrics.tools_out, shown);
    Ok(())
}

/// Adds `beta` to the request's `anthropic-beta` list (comma-separated), unless it is there.
/// Only possible while the request headers are held (see `on_http_request_headers`).
fn add_anthropic_beta(beta: &str) {
    const HEADER: &str = "anthropic-beta";
    let current = match host::header_text(Headers::Request, HEADER) {
        Ok(current) => current.unwrap_or_default(),
        // Not text: leave the client's header as it is.
        Err(()) => return,
    };
    if current.split(',').any(|b| b.trim() == beta) {
        return;
    }
    let value = if current.trim().is_empty() {
        beta.to_owned()
    } else {
        format!("{current},{beta}")
    };
    if let Err(status) = host::set_header(Headers::Request, HEADER, value.as_bytes()) {
        log::warn!("cannot add {beta} to {HEADER} (are the request headers held?): {status:?}");
    }
}

fn add_response_header(name: &str, value: &str) {
    if let Err(status) = host::add_header(Headers::Response, name, value.as_bytes()) {
        log::debug!("cannot add {name}: {status:?}");
    }
}

/// Writes the body with the dropped tools spliced out; false when every tool is kept (the
/// body goes on as it is). Only the bytes up to the end of the tools array are written:
/// Envoy's `set_buffer` at offset 0 drains the given length and puts the new bytes before
/// what remains, so the rest of the body never leaves Envoy's buffer.
fn write_rewritten(analysis: &Analysis, body: &[u8]) -> Result<bool, Skipped> {
    let Some((head, replaced)) = analysis.rewrite_head(body) else {
        // Tools were dropped but could not be cut out (a custom shape's text tags whose cut
        // would make new tags): the request goes on as the client sent it, counted.
        if analysis.kept() < analysis.total() {
            return Err(Skip::BadShape.into());
        }
        return Ok(false);
    };
    host::set_buffer(Buffer::RequestBody, 0, replaced, &head).map_err(|_| Skip::Internal)?;
    Ok(true)
}
