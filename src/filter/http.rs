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
use super::shared::Shared;
use super::{callout, vectors};
use crate::dialects::Reader;
use crate::embeddings::Fallback;
use crate::lifecycle::{self, Ranked, gating, hybrid};
use crate::mcp::exchange::CallAnswer;
use crate::pipeline::{Analysis, Skip, Skipped};
use crate::search::respond::Responder;
use crate::stats::Fixed;
use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::Action;
use std::rc::Rc;
use std::time::{Duration, SystemTime};

pub struct Filter {
    shared: Option<Rc<Shared>>,
    /// This stream's context id (the root context resumes a stalled held request by it).
    context_id: u32,
    /// The core's side of the request: what its headers phase decided, and what became of it.
    core: lifecycle::Request,
    /// Search mode held the request headers (`search.hold_headers`), and they still are.
    headers_held: bool,
    /// A request waiting for its embeddings call.
    waiting: Option<Waiting>,
    /// The request's response side: search mode's search, filter mode's follow-ups for
    /// made-up calls, or the access rules' guard.
    search: Option<Search>,
    /// A request on an MCP route (`mcp.paths`).
    mcp: Option<super::mcp::McpRequest>,
    /// `gating.mcp`: the request waiting for the gating server's verdict.
    gating: Option<GatingWait>,
    /// Bytes at the start of Envoy's response buffer already given to `shadow` (the buffer
    /// keeps them while the response is paused).
    shadow_fed: usize,
}

/// A request waiting for its `_tool_gating` verdict.
struct GatingWait {
    token: u32,
    reader: Reader,
    analysis: Analysis,
    /// The request body as Envoy gave it.
    body: Vec<u8>,
}

/// Everything a paused request needs when its embeddings arrive.
struct Waiting {
    token: u32,
    analysis: Analysis,
    call: hybrid::Call,
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
            core: lifecycle::Request::new(),
            headers_held: false,
            waiting: None,
            search: None,
            mcp: None,
            gating: None,
            shadow_fed: 0,
        }
    }

    /// Runs the pipeline over the buffered body and replaces it. Returns the action for the
    /// body or trailers callback.
    fn finish(&mut self, shared: &Shared, reader: Reader, body_size: usize) -> Action {
        self.core.buffering = None;
        let started = now();
        let result = self.filter_body(shared, reader, body_size, started);
        shared.metrics.since(Fixed::FilterTimeUs, started);
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
        let started = metrics.since(Fixed::PhaseReadUs, started);
        let mut engine = shared.engine.try_borrow_mut().map_err(|_| Skip::Internal)?;
        let now = host::now_seconds();
        let read = self
            .core
            .on_body(&mut engine, reader, &mut body, &vectors::SharedData, now);
        let (actions, analysis) = match read {
            lifecycle::Read::Analysed { actions, analysis } => (actions, analysis),
            lifecycle::Read::Skipped { actions, skipped } => {
                drop(engine);
                self.perform(shared, actions)?;
                return Err(skipped);
            }
            lifecycle::Read::Answered(actions) => {
                drop(engine);
                return match self.perform(shared, actions)? {
                    Action::Pause => Ok(Step::Answered),
                    // The refusal could not be sent: never let the request go as it is.
                    _ => Err(Skip::Internal.into()),
                };
            }
        };
        let phase = if analysis.cache_hit {
            Fixed::PhaseAnalyseUs
        } else {
            Fixed::PhaseAssembleUs
        };
        metrics.since(phase, started);
        self.perform(shared, actions)?;
        let gate = self.core.gate(&engine, &analysis, reader, &body);
        drop(engine);
        self.after_gate(shared, gate, reader, analysis, body)
    }

    /// Goes on as `_tool_gating` decided: the gating server asked, the request answered here,
    /// or ranked and written.
    fn after_gate(
        &mut self,
        shared: &Shared,
        gate: gating::Gate,
        reader: Reader,
        analysis: Analysis,
        body: Vec<u8>,
    ) -> Result<Step, Skipped> {
        match gate {
            gating::Gate::Rank(actions) => {
                self.perform(shared, actions)?;
                self.rank_and_apply(shared, reader, analysis, body)
            }
            gating::Gate::Answered(actions) => match self.perform(shared, actions)? {
                Action::Pause => Ok(Step::Answered),
                // The reply could not be sent: the request goes on with the verdict.
                _ => self.rank_and_apply(shared, reader, analysis, body),
            },
            gating::Gate::Ask(actions, call) => {
                self.perform(shared, actions)?;
                let headers = call
                    .headers
                    .iter()
                    .map(|(n, v)| (n.as_str(), v.as_str()))
                    .collect();
                match host::dispatch(&call.cluster, headers, call.body.as_bytes(), call.timeout) {
                    Ok(token) => {
                        self.gating = Some(GatingWait {
                            token,
                            reader,
                            analysis,
                            body,
                        });
                        Ok(Step::Waiting)
                    }
                    Err(status) => {
                        log::debug!("gating call to {} failed: {status:?}", call.cluster);
                        self.gated(shared, None, reader, analysis, body)
                    }
                }
            }
        }
    }

    /// The gating server's answer (`None`: the call could not be sent) handed to the core.
    fn gated(
        &mut self,
        shared: &Shared,
        answer: Option<&CallAnswer>,
        reader: Reader,
        analysis: Analysis,
        body: Vec<u8>,
    ) -> Result<Step, Skipped> {
        let gate = {
            let engine = shared.engine.try_borrow().map_err(|_| Skip::Internal)?;
            self.core
                .gating_answered(&engine.config, &analysis, reader, &body, answer)
        };
        self.after_gate(shared, gate, reader, analysis, body)
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
            Some((source, e)) => match hybrid::start(&source, config, e, &mut analysis) {
                hybrid::Start::Ranked(ranked) => ranked,
                hybrid::Start::Call(call) => {
                    let inputs: Vec<&str> = call.inputs.iter().map(String::as_str).collect();
                    let timeout = Duration::from_millis(e.timeout_ms as u64);
                    match vectors::dispatch(e, &inputs, timeout) {
                        Ok(token) => {
                            metrics.event(crate::stats::embeddings_call(inputs.len()));
                            metrics.since(Fixed::PhaseHybridUs, started);
                            drop(engine);
                            self.waiting = Some(Waiting {
                                token,
                                analysis,
                                call,
                                body,
                            });
                            return Ok(Step::Waiting);
                        }
                        Err(status) => {
                            log::debug!("embeddings call to {} failed: {status:?}", e.cluster);
                            Ranked::Fallback(Fallback::Dispatch)
                        }
                    }
                }
            },
            None => Ranked::Keyword,
        };
        if ranked != Ranked::Keyword {
            metrics.since(Fixed::PhaseHybridUs, started);
        }
        self.core.apply_verdict(config, &mut analysis);
        drop(engine);
        self.apply(shared, &mut analysis, &body, ranked)?;
        self.claim_tool_choice(shared, reader);
        self.answer_unknown(shared, &analysis);
        Ok(Step::Done)
    }

    /// Writes the selected tools into the body and records what was done.
    fn apply(
        &mut self,
        shared: &Shared,
        analysis: &mut Analysis,
        body: &[u8],
        ranked: Ranked,
    ) -> Result<(), Skipped> {
        let metrics = &shared.metrics;
        let engine = shared.engine.try_borrow().map_err(|_| Skip::Internal)?;
        let searched = self.core.plan_search(
            &engine,
            analysis,
            body,
            ranked,
            self.headers_held,
            &vectors::SharedData,
            host::now_seconds(),
        )?;
        drop(engine);
        if let lifecycle::Searched::Planned { actions, search } = searched {
            self.perform(shared, actions)?;
            self.search = search.map(Search::from_loop);
            return Ok(());
        }
        // `toolsift.phase.write_us`: the rewrite and its write into Envoy's buffer, not the
        // counts and the access log's filter state recorded after it.
        let started = now();
        let engine = shared.engine.try_borrow().map_err(|_| Skip::Internal)?;
        let (write, written) = self.core.write(&engine.config, analysis, body)?;
        drop(engine);
        let replaced = write
            .iter()
            .any(|a| matches!(a, lifecycle::Action::ReplaceBody { .. }));
        self.perform(shared, write)?;
        if replaced {
            metrics.since(Fixed::PhaseWriteUs, started);
        }
        let engine = shared.engine.try_borrow().map_err(|_| Skip::Internal)?;
        let record = self.core.record(&engine.config, analysis, ranked, written);
        drop(engine);
        self.perform(shared, record)?;
        Ok(())
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
            call,
            body,
            ..
        } = waiting;
        let ranked = {
            let Ok(engine) = shared.engine.try_borrow() else {
                return self.skip(shared, Skip::Internal.into());
            };
            let config = &engine.config;
            let ranked = match shared.hybrid(config) {
                Some((source, e)) => {
                    let answer = callout::embeddings_answer(num_headers, body_size);
                    let answered = call.answered(&source, config, e, &mut analysis, &answer);
                    if let (Some(entries), Ok(mut backfill)) =
                        (answered.backfill, shared.backfill.try_borrow_mut())
                    {
                        backfill.queue(&analysis.catalog, entries);
                    }
                    answered.ranked
                }
                None => Ranked::Keyword,
            };
            self.core.apply_verdict(config, &mut analysis);
            ranked
        };
        let result = self.apply(shared, &mut analysis, &body, ranked);
        self.claim_tool_choice(shared, analysis.reader);
        if result.is_ok() {
            self.answer_unknown(shared, &analysis);
        }
        shared.metrics.since(Fixed::PhaseAnswerUs, started);
        match result {
            Ok(()) => Action::Continue,
            Err(skipped) => self.skip(shared, skipped),
        }
    }

    /// Lets a request through untouched, or answers it (the core decides which).
    fn skip(&mut self, shared: &Shared, skipped: Skipped) -> Action {
        let actions = match shared.engine.try_borrow() {
            Ok(engine) => self.core.skip(Some(&engine.config), skipped),
            Err(_) => self.core.skip(None, skipped),
        };
        self.act(shared, actions)
    }

    /// Carries out what the core asked for; when Envoy refuses what the request's body needs,
    /// the request goes on unread.
    fn act(&mut self, shared: &Shared, actions: Vec<lifecycle::Action>) -> Action {
        match self.perform(shared, actions) {
            Ok(flow) => flow,
            Err(skipped) => self.skip(shared, skipped),
        }
    }

    /// Carries out what the core asked for. `Pause` when the request was answered here (the
    /// local reply ends the stream; nothing more goes upstream) or its headers are held; an
    /// error when Envoy refused a change the body needs (the actions after it are not done).
    fn perform(
        &mut self,
        shared: &Shared,
        actions: Vec<lifecycle::Action>,
    ) -> Result<Action, Skipped> {
        let mut flow = Action::Continue;
        for action in actions {
            match action {
                lifecycle::Action::Count(counter, n) => shared.metrics.count(counter, n),
                lifecycle::Action::RemoveRequestHeader { name, required } => {
                    if let Err(status) = host::remove_header(Headers::Request, name) {
                        if required {
                            log::warn!("cannot remove {name}: {status:?}");
                            return Err(Skip::Internal.into());
                        }
                        log::debug!("cannot remove {name}: {status:?}");
                    }
                }
                lifecycle::Action::ReplaceBody { drain, bytes } => {
                    host::set_buffer(Buffer::RequestBody, 0, drain, &bytes)
                        .map_err(|_| Skip::Internal)?;
                }
                lifecycle::Action::Reply { status, body } => {
                    let headers: [(&str, &[u8]); 1] = [("content-type", b"application/json")];
                    match host::send_response(u32::from(status), &headers, body.as_bytes()) {
                        Ok(()) => flow = Action::Pause,
                        Err(e) => {
                            // What follows a reply counts it: not sent, not counted.
                            log::warn!("cannot answer the request ({status}): {e:?}");
                            return Ok(flow);
                        }
                    }
                }
                lifecycle::Action::Guard(session) => {
                    self.search = Some(Search::new(
                        Responder::new(*session, false, false),
                        Vec::new(),
                        self.core.alias_owner,
                    ));
                }
                lifecycle::Action::HoldHeaders => {
                    if self.hold_headers(shared) {
                        flow = Action::Pause;
                    }
                }
                lifecycle::Action::RecordFilterState { name, value } => {
                    if let Err(status) = host::set_property(name, value.as_bytes()) {
                        log::debug!("cannot record {name} for the access log: {status:?}");
                    }
                }
                lifecycle::Action::AddResponseHeader { name, value } => {
                    add_response_header(name, &value);
                }
                lifecycle::Action::SetRequestHeader { name, value } => {
                    if let Err(status) = host::set_header(Headers::Request, name, value.as_bytes())
                    {
                        log::warn!("cannot set {name} (are the request headers held?): {status:?}");
                    }
                }
            }
        }
        Ok(flow)
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
        shared.metrics.add(Fixed::Requests, 1);
        let pairs = host::headers(Headers::Request);
        let identity = super::identity::grant(&shared, &pairs);
        let Ok(engine) = shared.engine.try_borrow() else {
            return self.skip(&shared, Skip::Internal.into());
        };
        if lifecycle::route(&engine.config, &pairs) == lifecycle::Route::Mcp {
            let memory = engine.config.search.memory.as_ref();
            let mut mcp = super::mcp::McpRequest::new(&pairs, end_of_stream, identity, memory);
            drop(engine);
            // MCP routes: the body callbacks read the message; nothing is held here (a request
            // the access rules refuse at once is answered).
            let action = mcp.on_headers(&shared);
            self.mcp = Some(mcp);
            return action;
        }
        let head = lifecycle::Head {
            headers: &pairs,
            end_of_stream,
            identity,
        };
        let actions = {
            let mut sampler = shared.sampler.try_borrow_mut().ok();
            self.core.on_headers(&engine, head, sampler.as_deref_mut())
        };
        drop(engine);
        self.act(&shared, actions)
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        if let (Some(shared), Some(mcp)) = (self.shared.clone(), self.mcp.as_mut()) {
            return mcp.on_body(&shared, body_size, end_of_stream);
        }
        let Some(shared) = self.shared.clone() else {
            return Action::Continue;
        };
        if self.headers_held && self.core.buffering.is_some() {
            // Still held, unless the root context had to resume them (see `hold_headers`).
            self.headers_held = shared
                .watchdog
                .try_borrow_mut()
                .is_ok_and(|mut w| w.body_arrived(self.context_id));
        }
        let chunk = match shared.engine.try_borrow() {
            Ok(engine) => self
                .core
                .on_body_chunk(Some(&engine.config), body_size, end_of_stream),
            Err(_) => self.core.on_body_chunk(None, body_size, end_of_stream),
        };
        match chunk {
            lifecycle::Chunk::Pass => Action::Continue,
            lifecycle::Chunk::Buffer => Action::Pause,
            lifecycle::Chunk::Skip(actions) => self.act(&shared, actions),
            lifecycle::Chunk::Read(reader) => self.finish(&shared, reader, body_size),
        }
    }

    fn on_http_request_trailers(&mut self, _num_trailers: usize) -> Action {
        if let (Some(shared), Some(mcp)) = (self.shared.clone(), self.mcp.as_mut()) {
            return mcp.on_body(&shared, usize::MAX, true);
        }
        // With trailers (HTTP/2, gRPC-web), the body callback never sees end_of_stream.
        let (Some(shared), Some(reader)) = (self.shared.clone(), self.core.buffering) else {
            return Action::Continue;
        };
        self.finish(&shared, reader, usize::MAX)
    }

    fn on_http_response_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        let Some(shared) = self.shared.clone() else {
            return Action::Continue;
        };
        self.report_access(&shared);
        if let Some(mcp) = self.mcp.as_mut() {
            mcp.on_response_headers(&shared);
            return Action::Continue;
        }
        let actions = match shared.engine.try_borrow() {
            Ok(engine) => self.core.on_response_headers(Some(&engine.config)),
            Err(_) => self.core.on_response_headers(None),
        };
        self.act(&shared, actions);
        if let Some(watch) = self.core.shadow.as_mut() {
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
        if let Some(grant) = &self.core.grant {
            super::audit::report(shared.access_metrics.as_ref(), grant);
        }
    }

    /// Search mode with `search.hold_headers`: holds the request headers until the body is read,
    /// so a `native_search` rule can add `anthropic-beta` (only the body names the model) and
    /// the follow-ups can copy the request as the router rewrote it (a header map that was held
    /// stays readable). That needs Envoy's `allow_on_headers_stop_iteration: true`; whether it
    /// is set shows in the traffic (`crate::search::hold`): until a held request has shown it,
    /// the root context's tick resumes any held request whose body does not come.
    fn hold_headers(&mut self, shared: &Shared) -> bool {
        let Ok(mut watchdog) = shared.watchdog.try_borrow_mut() else {
            return false;
        };
        if !watchdog.may_hold() {
            return false;
        }
        if watchdog.held(self.context_id, host::now_millis()) {
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
            reader,
            analysis,
            body,
            ..
        } = wait;
        let answer = callout::call_answer(num_headers, body_size);
        match self.gated(shared, Some(&answer), reader, analysis, body) {
            Ok(Step::Done) => Action::Continue,
            Ok(Step::Waiting | Step::Answered) => Action::Pause,
            Err(skipped) => self.skip(shared, skipped),
        }
    }

    /// Filter mode with `unknown_tools.answer`: once the body that goes upstream is written
    /// (kept tools, the loop guard's notes, a claimed `tool_choice`), the response side
    /// watches the model's answer for calls of tools the request does not carry and answers
    /// them in follow-ups that continue that body. It replaces the access rules' guard, whose
    /// checks it makes as well. A request for the provider's own search is left as it is.
    fn answer_unknown(&mut self, shared: &Shared, analysis: &Analysis) {
        if self.core.answer_headers.is_none() {
            return;
        }
        let Ok(engine) = shared.engine.try_borrow() else {
            return;
        };
        let sent = host::buffer(Buffer::RequestBody, 0, usize::MAX).unwrap_or_default();
        let answering = self
            .core
            .answer_unknown(&engine.config, analysis, sent, self.headers_held);
        if let Some(answering) = answering {
            self.search = Some(Search::from_loop(answering));
        }
    }

    /// A claim's `tool_choice` written into the body that goes upstream (the core says
    /// whether and what).
    fn claim_tool_choice(&mut self, shared: &Shared, reader: Reader) {
        let written = || host::buffer(Buffer::RequestBody, 0, usize::MAX).unwrap_or_default();
        if let Some(write) = self.core.claimed_tool_choice(reader, written) {
            if self.perform(shared, vec![write]).is_err() {
                log::warn!("cannot write the claimed tool_choice");
            }
        }
    }
}

impl Filter {
    /// Gives `shadow` the answer's bytes past those it has (`body_size`: what Envoy's buffer
    /// holds now), and records what the answer showed when it `ended`.
    fn feed_shadow(&mut self, shared: &Shared, body_size: usize, ended: bool) {
        let Some(watch) = self.core.shadow.as_mut().filter(|w| !w.finished()) else {
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
        shared.metrics.counts(crate::stats::shadow(&record));
        let value = record.log_value();
        // For the access log: `%FILTER_STATE(wasm.toolsift_shadow:PLAIN)%`.
        if let Err(status) = host::set_property("toolsift_shadow", value.as_bytes()) {
            log::debug!("cannot record the shadow ranks for the access log: {status:?}");
        }
        log::debug!("toolsift: {value}");
    }
}

fn add_response_header(name: &str, value: &str) {
    if let Err(status) = host::add_header(Headers::Response, name, value.as_bytes()) {
        log::debug!("cannot add {name}: {status:?}");
    }
}
