//! One HTTP request through the filter: Envoy's callbacks handed to the core's
//! [`lifecycle::Request`] (an LLM route) or [`super::mcp::McpRequest`] (an MCP route), and what
//! they ask performed.
//!
//! Headers phase: the core decides whether the request is read (POST to an LLM path, JSON, not
//! compressed, not too large); the body callbacks buffer it. Body phase: at the end of the
//! stream the core runs its steps ([`lifecycle::Request::on_body_end`]); one that waits for a
//! call (the gating server, the embeddings) leaves the request paused, and the call's answer
//! in `on_http_call_response` takes it on. Response side: the headers report what was done,
//! and a search loop, the guard or the answers to made-up calls watch the answer.

use super::host::{self, Buffer, Headers};
use super::metrics::now;
use super::search::Search;
use super::shared::Shared;
use super::{callout, vectors};
use crate::config::Embeddings;
use crate::dialects::Reader;
use crate::lifecycle::{self, Flow, gating::GatingCall};
use crate::pipeline::{Skip, Skipped};
use crate::rank::Catalog;
use crate::search::respond::Responder;
use crate::stats::{Counts, Fixed};
use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::Action;
use std::rc::Rc;
use std::time::{Duration, SystemTime};

pub struct Filter {
    shared: Option<Rc<Shared>>,
    /// The core's side of the request: what its headers phase decided, and what became of it.
    core: lifecycle::Request,
    /// What the core's actions leave on the adapter's side.
    effects: Effects,
    /// A request on an MCP route (`mcp.paths`).
    mcp: Option<super::mcp::McpRequest>,
    /// Bytes at the start of Envoy's response buffer already given to `shadow` (the buffer
    /// keeps them while the response is paused).
    shadow_fed: usize,
}

/// The request's state on the adapter's side that the core's actions change.
struct Effects {
    /// This stream's context id (the root context resumes a stalled held request by it).
    context_id: u32,
    /// Search mode held the request headers (`search.hold_headers`), and they still are.
    headers_held: bool,
    /// The request's response side: search mode's search, filter mode's follow-ups for
    /// made-up calls, or the access rules' guard.
    search: Option<Search>,
}

impl Filter {
    pub fn new(shared: Option<Rc<Shared>>, context_id: u32) -> Filter {
        Filter {
            shared,
            core: lifecycle::Request::new(),
            effects: Effects {
                context_id,
                headers_held: false,
                search: None,
            },
            mcp: None,
            shadow_fed: 0,
        }
    }

    /// The whole body is in: the core's body phase. Returns the action for the body or
    /// trailers callback.
    fn finish(&mut self, shared: &Shared, reader: Reader, body_size: usize) -> Action {
        self.body_phase(shared, |core, host, worker| {
            core.on_body_end(host, worker, reader, body_size)
        })
    }

    /// The answer of the call the body phase waits for: the body phase goes on.
    fn on_body_call(&mut self, shared: &Shared, num_headers: usize, body_size: usize) -> Action {
        let answer = callout::call_answer(num_headers, body_size);
        self.body_phase(shared, |core, host, worker| {
            core.call_answered(host, worker, &answer)
        })
    }

    /// Runs `event` of the core's body phase with Envoy as its host.
    fn body_phase(
        &mut self,
        shared: &Shared,
        event: impl FnOnce(
            &mut lifecycle::Request,
            &mut BodyEnvoy<'_>,
            &lifecycle::Worker<'_, vectors::SharedData>,
        ) -> Result<lifecycle::Step, Skipped>,
    ) -> Action {
        let mut host = BodyEnvoy {
            shared,
            effects: &mut self.effects,
            alias_owner: self.core.alias_owner,
        };
        match event(&mut self.core, &mut host, &shared.worker()) {
            Ok(lifecycle::Step::Done) => Action::Continue,
            Ok(lifecycle::Step::Waiting | lifecycle::Step::Answered) => Action::Pause,
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
        match self.effects.perform(shared, actions, self.core.alias_owner) {
            Ok(flow) => action(flow),
            Err(skipped) => self.skip(shared, skipped),
        }
    }
}

fn action(flow: Flow) -> Action {
    match flow {
        Flow::Continue => Action::Continue,
        Flow::Pause => Action::Pause,
    }
}

impl Effects {
    /// Carries out what the core asked for. `Pause` when the request was answered here (the
    /// local reply ends the stream; nothing more goes upstream) or its headers are held; an
    /// error when Envoy refused a change the body needs (the actions after it are not done).
    /// `alias_owner`: whose Responses id aliases a guard may follow.
    fn perform(
        &mut self,
        shared: &Shared,
        actions: Vec<lifecycle::Action>,
        alias_owner: u64,
    ) -> Result<Flow, Skipped> {
        let mut flow = Flow::Continue;
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
                        Ok(()) => flow = Flow::Pause,
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
                        alias_owner,
                    ));
                }
                lifecycle::Action::Watch(search) => {
                    self.search = Some(Search::from_loop(search));
                }
                lifecycle::Action::HoldHeaders => {
                    if self.hold_headers(shared) {
                        flow = Flow::Pause;
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

/// The body phase's host: Envoy's buffer, clock, stats and calls.
struct BodyEnvoy<'a> {
    shared: &'a Shared,
    effects: &'a mut Effects,
    alias_owner: u64,
}

impl lifecycle::BodyHost for BodyEnvoy<'_> {
    type Store = vectors::SharedData;

    fn request_body(&self, size: usize) -> Option<Vec<u8>> {
        host::buffer(Buffer::RequestBody, 0, size).ok()
    }

    fn store(&self) -> &Self::Store {
        &vectors::SharedData
    }

    fn now_seconds(&self) -> u64 {
        host::now_seconds()
    }

    fn clock(&self) -> Option<SystemTime> {
        now()
    }

    fn phase(&self, stat: Fixed, started: Option<SystemTime>) -> Option<SystemTime> {
        self.shared.metrics.since(stat, started)
    }

    fn count(&self, counts: Counts) {
        self.shared.metrics.event(counts);
    }

    fn perform(&mut self, actions: Vec<lifecycle::Action>) -> Result<Flow, Skipped> {
        self.effects.perform(self.shared, actions, self.alias_owner)
    }

    fn headers_held(&self) -> bool {
        self.effects.headers_held
    }

    fn embed(&mut self, e: &Embeddings, inputs: &[&str]) -> Option<u32> {
        vectors::send(e, inputs)
    }

    fn ask(&mut self, call: &GatingCall) -> Option<u32> {
        let headers = call
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        host::dispatch(&call.cluster, headers, call.body.as_bytes(), call.timeout)
            .inspect_err(|status| log::debug!("gating call to {} failed: {status:?}", call.cluster))
            .ok()
    }

    fn backfill(&mut self, catalog: &Rc<Catalog>, entries: Vec<usize>) {
        if let Ok(mut backfill) = self.shared.backfill.try_borrow_mut() {
            backfill.queue(catalog, entries);
        }
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
        if self.core.waits_for(token_id) {
            if self.on_body_call(&shared, num_headers, body_size) == Action::Continue {
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
        if let Some(search) = self
            .effects
            .search
            .as_mut()
            .filter(|s| s.token() == Some(token_id))
        {
            if search.on_call(&shared, token_id, num_headers, body_size) {
                if let Err(status) = host::resume(host::Stream::Response) {
                    log::warn!("cannot resume the response: {status:?}");
                }
            }
            return;
        }
        log::debug!("unexpected http call response {token_id}");
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
        if self.effects.headers_held && self.core.buffering.is_some() {
            // Still held, unless the root context had to resume them (see `hold_headers`).
            self.effects.headers_held = shared
                .watchdog
                .try_borrow_mut()
                .is_ok_and(|mut w| w.body_arrived(self.effects.context_id));
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
        match self.effects.search.as_mut() {
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
        let action = match self.effects.search.as_mut() {
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
        if let (true, Some(shared)) = (self.effects.headers_held, &self.shared) {
            if let Ok(mut watchdog) = shared.watchdog.try_borrow_mut() {
                watchdog.ended(self.effects.context_id);
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
        let action = match self.effects.search.as_mut() {
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
