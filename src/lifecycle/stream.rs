//! One HTTP stream through toolsift, from its request headers to its log: the core's one entry
//! for Envoy's stream callbacks. Each callback's event goes to the machine the route chose
//! ([`Request`] for an LLM route, [`crate::mcp::request::McpRequest`] for an MCP route), and
//! what the machine asks is carried out through the [`Proxy`]; the adapter only hands the
//! callbacks over and returns the [`Flow`].
//!
//! Headers phase: the core decides whether the request is read (POST to an LLM path, JSON, not
//! compressed, not too large); the body callbacks buffer it. Body phase: at the end of the
//! stream the steps run ([`Request::on_body_end`]); one that waits for a call (the gating
//! server, the embeddings) leaves the request paused, and the call's answer takes it on.
//! Response side: the headers report what was done, and a search loop, the guard or the
//! answers to made-up calls watch the answer ([`Watch`]); `shadow` reads it.

use super::hosts::{McpHost, ResponseHost};
use super::proxy::{Buffer, Headers, Proxy};
use super::record::Record;
use super::response::{FollowUps, Response};
use super::worker::Shared;
use super::{Action, BodyHost, Chunk, Flow, Head, Request, Route, SearchLoop, Step, Worker};
use crate::access::{Caller, Grant};
use crate::config::embeddings::Embeddings;
use crate::dialects::Reader;
use crate::lifecycle::gating::GatingCall;
use crate::mcp::request::{Context, McpRequest, Outgoing};
use crate::pairs::HeaderMap;
use crate::pipeline::{Skip, Skipped};
use crate::rank::Catalog;
use crate::search::respond::{self, Responder};
use crate::stats::{Counts, Fixed, Stat};
use std::rc::Rc;
use std::time::{Duration, SystemTime};

/// Which side of the stream a call's answer lets go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resume {
    /// Nothing to resume: the stream waits on, or went on already.
    Nothing,
    Request,
    Response,
}

/// One HTTP stream.
pub struct Stream {
    /// This stream's context id (the worker resumes a stalled held request by it).
    context_id: u32,
    /// An LLM route's request.
    request: Request,
    /// Search mode held the request headers (`search.hold_headers`), and they still are.
    headers_held: bool,
    /// The answer's watcher: search mode's search, filter mode's follow-ups for made-up
    /// calls, or the access rules' guard.
    watch: Option<Watch>,
    /// A request on an MCP route (`mcp.paths`).
    mcp: Option<(McpRequest, Outgoing)>,
    /// Bytes at the start of Envoy's response buffer already given to `shadow` (the buffer
    /// keeps them while the response is paused).
    shadow_fed: usize,
    /// An LLM request's access-log record, written once its answer's headers come and again
    /// only when the answer adds to it.
    record: Record,
}

/// A request's response side, with what its follow-ups carry of the client's request.
pub struct Watch {
    response: Response,
    follow_ups: FollowUps,
}

impl Stream {
    pub fn new(context_id: u32) -> Stream {
        Stream {
            context_id,
            request: Request::new(),
            headers_held: false,
            watch: None,
            mcp: None,
            shadow_fed: 0,
            record: Record::default(),
        }
    }

    pub fn on_request_headers<P: Proxy>(
        &mut self,
        proxy: &P,
        shared: &Shared<P::Store>,
        end_of_stream: bool,
    ) -> Flow {
        proxy.count(Fixed::Requests.into(), 1);
        let map = proxy.headers(Headers::Request);
        let Ok(engine) = shared.engine.try_borrow() else {
            return self.skip(proxy, shared, Skip::Internal.into());
        };
        let identity = identity(proxy, &engine, &map);
        if super::route(&engine.config, &map) == Route::Mcp {
            let memory = engine.config.search.memory.as_ref();
            let (mcp, outgoing) = McpRequest::new(&map, end_of_stream, identity, memory);
            drop(engine);
            // MCP routes: the body callbacks read the message; nothing is held here (a
            // request the access rules refuse at once is answered).
            let (mcp, outgoing) = self.mcp.insert((mcp, outgoing));
            let host = McpHost::new(proxy, shared, outgoing);
            return refuse_or(proxy, mcp.on_headers(host.as_ref()));
        }
        let head = Head {
            headers: &map,
            end_of_stream,
            identity,
        };
        let actions = {
            let mut sampler = shared.sampler.try_borrow_mut().ok();
            self.request
                .on_headers(&engine, head, sampler.as_deref_mut())
        };
        drop(engine);
        self.act(proxy, shared, actions)
    }

    /// A request body callback (`body_size`: everything buffered so far).
    pub fn on_request_body<P: Proxy>(
        &mut self,
        proxy: &P,
        shared: &Shared<P::Store>,
        body_size: usize,
        end_of_stream: bool,
    ) -> Flow {
        if self.mcp.is_some() {
            return self.mcp_body(proxy, shared, body_size, end_of_stream);
        }
        if self.headers_held && self.request.buffering.is_some() {
            // Still held, unless the worker had to resume them (see `hold_headers`).
            self.headers_held = shared
                .watchdog
                .try_borrow_mut()
                .is_ok_and(|mut w| w.body_arrived(self.context_id));
        }
        let chunk = match shared.engine.try_borrow() {
            Ok(engine) => {
                self.request
                    .on_body_chunk(Some(&engine.config), body_size, end_of_stream)
            }
            Err(_) => self.request.on_body_chunk(None, body_size, end_of_stream),
        };
        match chunk {
            Chunk::Pass => Flow::Continue,
            Chunk::Buffer => Flow::Pause,
            Chunk::Skip(actions) => self.act(proxy, shared, actions),
            Chunk::Read(reader) => self.body_end(proxy, shared, reader, body_size),
        }
    }

    /// The request trailers (HTTP/2, gRPC-web): the body callback never saw `end_of_stream`.
    pub fn on_request_trailers<P: Proxy>(&mut self, proxy: &P, shared: &Shared<P::Store>) -> Flow {
        if self.mcp.is_some() {
            return self.mcp_body(proxy, shared, usize::MAX, true);
        }
        match self.request.buffering {
            Some(reader) => self.body_end(proxy, shared, reader, usize::MAX),
            None => Flow::Continue,
        }
    }

    pub fn on_response_headers<P: Proxy>(
        &mut self,
        proxy: &P,
        shared: &Shared<P::Store>,
        end_of_stream: bool,
    ) -> Flow {
        self.report_access(proxy, shared);
        if let Some((mcp, _)) = self.mcp.as_mut() {
            let content_type = proxy.header(Headers::Response, "content-type");
            let engine = shared.engine.try_borrow().ok();
            let report = mcp
                .on_response_headers(engine.as_ref().map(|e| &e.config), content_type.as_deref());
            if let Some(value) = report.filter_state {
                proxy.record("toolsift", &value);
            }
            if let Some(value) = report.header {
                add_response_header(proxy, "x-toolsift", &value);
            }
            return Flow::Continue;
        }
        let actions = match shared.engine.try_borrow() {
            Ok(engine) => self.request.on_response_headers(Some(&engine.config)),
            Err(_) => self.request.on_response_headers(None),
        };
        self.act(proxy, shared, actions);
        let flow = self.watch_answer(proxy, shared, end_of_stream);
        // One write for all the headers phase put in the record.
        self.record.flush(proxy);
        flow
    }

    /// The answer's headers, given to shadow and to the answer's watcher.
    fn watch_answer<P: Proxy>(
        &mut self,
        proxy: &P,
        shared: &Shared<P::Store>,
        end_of_stream: bool,
    ) -> Flow {
        if let Some(watch) = self.request.shadow.as_mut() {
            watch.on_head(&crate::shadow::Head {
                status: proxy.header_text(Headers::Response, ":status").as_deref(),
                content_type: proxy
                    .header_text(Headers::Response, "content-type")
                    .as_deref(),
                content_encoding: proxy
                    .header_text(Headers::Response, "content-encoding")
                    .as_deref(),
            });
            if end_of_stream {
                self.feed_shadow(proxy, shared, 0, true);
            }
        }
        // Search mode's response side never depends on `response_header`: with it off, the
        // client would get the model's `find_tools` call.
        match self.watch.as_mut() {
            Some(watch) => watch.on_headers(proxy, shared, end_of_stream),
            None => Flow::Continue,
        }
    }

    pub fn on_response_body<P: Proxy>(
        &mut self,
        proxy: &P,
        shared: &Shared<P::Store>,
        body_size: usize,
        end_of_stream: bool,
    ) -> Flow {
        let flow = if let Some((mcp, outgoing)) = self.mcp.as_mut() {
            if let Some(host) = McpHost::new(proxy, shared, outgoing) {
                mcp.on_response_body(&host, body_size);
            }
            Flow::Continue
        } else {
            self.feed_shadow(proxy, shared, body_size, end_of_stream);
            let flow = match self.watch.as_mut() {
                Some(watch) => watch.on_body(proxy, shared, body_size, end_of_stream),
                None => Flow::Continue,
            };
            // A paused response's bytes stay in Envoy's buffer: the next callback's follow.
            self.shadow_fed = if flow == Flow::Pause { body_size } else { 0 };
            flow
        };
        self.report_access(proxy, shared);
        self.record.flush(proxy);
        flow
    }

    /// HTTP/2 responses that end with trailers: the body callback never saw `end_of_stream`.
    pub fn on_response_trailers<P: Proxy>(&mut self, proxy: &P, shared: &Shared<P::Store>) -> Flow {
        self.feed_shadow(proxy, shared, self.shadow_fed, true);
        let flow = match self.watch.as_mut() {
            Some(watch) => watch.on_trailers(proxy, shared),
            None => Flow::Continue,
        };
        self.report_access(proxy, shared);
        self.record.flush(proxy);
        flow
    }

    /// A call this stream sent answered (`num_headers` and `size` as Envoy gives them).
    pub fn on_call<P: Proxy>(
        &mut self,
        proxy: &P,
        shared: &Shared<P::Store>,
        token: u32,
        num_headers: usize,
        size: usize,
    ) -> Resume {
        if self.request.waits_for(token) {
            let answer = proxy.call_answer(num_headers, size);
            let flow = self.body_phase(proxy, shared, |request, host, worker| {
                request.call_answered(host, worker, &answer)
            });
            return resume(flow, Resume::Request);
        }
        if let Some((mcp, outgoing)) = self.mcp.as_mut().filter(|(m, _)| m.token() == Some(token)) {
            let answer = proxy.call_answer(num_headers, size);
            let flow = mcp_message(proxy, shared, outgoing, |c| mcp.on_call(token, answer, c));
            return resume(flow, Resume::Request);
        }
        if let Some(watch) = self.watch.as_mut().filter(|w| w.token() == Some(token)) {
            let answer = proxy.call_answer(num_headers, size);
            let answer = respond::Answer {
                status: answer.status,
                content_type: Some(answer.content_type).filter(|c| !c.is_empty()),
                body: answer.body,
            };
            if watch.on_call(proxy, shared, token, answer) {
                return Resume::Response;
            }
            return Resume::Nothing;
        }
        log::debug!("unexpected http call response {token}");
        Resume::Nothing
    }

    /// The stream ended (the access log has had its line by now).
    pub fn on_log<P: Proxy>(&mut self, proxy: &P, shared: &Shared<P::Store>) {
        // Counted even if decided after the last response callback.
        self.report_access(proxy, shared);
        self.record.flush(proxy);
        if self.headers_held {
            if let Ok(mut watchdog) = shared.watchdog.try_borrow_mut() {
                watchdog.ended(self.context_id);
            }
        }
    }

    /// An MCP request's body callback.
    fn mcp_body<P: Proxy>(
        &mut self,
        proxy: &P,
        shared: &Shared<P::Store>,
        body_size: usize,
        end_of_stream: bool,
    ) -> Flow {
        let Some((mcp, outgoing)) = self.mcp.as_mut() else {
            return Flow::Continue;
        };
        mcp_message(proxy, shared, outgoing, |c| {
            mcp.on_body(body_size, end_of_stream, c)
        })
    }

    /// The whole body is in: the body phase.
    fn body_end<P: Proxy>(
        &mut self,
        proxy: &P,
        shared: &Shared<P::Store>,
        reader: Reader,
        body_size: usize,
    ) -> Flow {
        self.body_phase(proxy, shared, |request, host, worker| {
            request.on_body_end(host, worker, reader, body_size)
        })
    }

    /// Runs `event` of the body phase with the proxy as its host.
    fn body_phase<P: Proxy>(
        &mut self,
        proxy: &P,
        shared: &Shared<P::Store>,
        event: impl FnOnce(
            &mut Request,
            &mut BodyProxy<'_, P>,
            &Worker<'_, P::Store>,
        ) -> Result<Step, Skipped>,
    ) -> Flow {
        let mut host = BodyProxy {
            proxy,
            shared,
            effects: Effects {
                context_id: self.context_id,
                headers_held: &mut self.headers_held,
                watch: &mut self.watch,
                alias_owner: self.request.alias_owner,
                record: &mut self.record,
            },
        };
        match event(&mut self.request, &mut host, &shared.worker()) {
            Ok(Step::Done) => Flow::Continue,
            Ok(Step::Waiting | Step::Answered) => Flow::Pause,
            Err(skipped) => self.skip(proxy, shared, skipped),
        }
    }

    /// Lets a request through untouched, or answers it (the core decides which).
    fn skip<P: Proxy>(&mut self, proxy: &P, shared: &Shared<P::Store>, skipped: Skipped) -> Flow {
        let actions = match shared.engine.try_borrow() {
            Ok(engine) => self.request.skip(Some(&engine.config), skipped),
            Err(_) => self.request.skip(None, skipped),
        };
        self.act(proxy, shared, actions)
    }

    /// Carries out `actions`; when Envoy refuses what the request's body needs, the request
    /// goes on unread.
    fn act<P: Proxy>(
        &mut self,
        proxy: &P,
        shared: &Shared<P::Store>,
        actions: Vec<Action>,
    ) -> Flow {
        let mut effects = Effects {
            context_id: self.context_id,
            headers_held: &mut self.headers_held,
            watch: &mut self.watch,
            alias_owner: self.request.alias_owner,
            record: &mut self.record,
        };
        match effects.perform(proxy, shared, actions) {
            Ok(flow) => flow,
            Err(skipped) => self.skip(proxy, shared, skipped),
        }
    }

    /// Under access rules: what was decided since the last report, counted and put in the
    /// access log's record ([`super::audit`]; the caller writes the record).
    fn report_access<P: Proxy>(&mut self, proxy: &P, shared: &Shared<P::Store>) {
        if let Some(grant) = &self.request.grant {
            super::audit::report(proxy, shared.access.as_ref(), grant, &mut self.record);
        }
    }

    /// Gives `shadow` the answer's bytes past those it has (`body_size`: what Envoy's buffer
    /// holds now), and records what the answer showed when it `ended`.
    fn feed_shadow<P: Proxy>(
        &mut self,
        proxy: &P,
        shared: &Shared<P::Store>,
        body_size: usize,
        ended: bool,
    ) {
        let Some(watch) = self.request.shadow.as_mut().filter(|w| !w.finished()) else {
            return;
        };
        let fresh = body_size.saturating_sub(self.shadow_fed);
        if fresh > 0 {
            match proxy.buffer(Buffer::ResponseBody, self.shadow_fed, fresh) {
                Ok(bytes) => watch.feed(&bytes),
                Err(status) => log::debug!("cannot read the answer for shadow: {status:?}"),
            }
        }
        if !ended {
            return;
        }
        let record = watch.finish();
        for (stat, n) in crate::stats::shadow(&record) {
            proxy.count(stat, n);
        }
        if record.sampled {
            learn_auto_k(proxy, shared, &record);
        }
        let fields = record.fields();
        // Added to the access log's record; the callback that ended the answer writes it.
        self.record.set_shadow(&fields);
        let kind = if record.sampled { "shadow" } else { "filtered" };
        log::debug!("toolsift: {kind} {fields}");
    }
}

/// `auto_k`: a shadowed answer's calls join the VM's calibration. Each call is a pair, as
/// `toolsift report` counts them: the calls of one answer are not independent, so the bound
/// overstates its confidence a little when answers call several tools.
fn learn_auto_k<P: Proxy>(proxy: &P, shared: &Shared<P::Store>, record: &crate::shadow::Record) {
    let Ok(engine) = shared.engine.try_borrow() else {
        return;
    };
    let Some(auto_k) = engine.auto_k.as_ref().filter(|a| a.learns()) else {
        return;
    };
    // A weak question, shadowed for its history's transitions: its ranking read nothing, so
    // where its calls stood in it says nothing of the catalog's k.
    if record.weak {
        return;
    }
    let slots: Vec<usize> = record.calls.iter().filter_map(|c| c.slot).collect();
    if slots.is_empty() {
        return;
    }
    let now = proxy.since_epoch().as_secs();
    let learned = auto_k.learn(proxy.store(), record.catalog, &slots, now);
    let stat = if learned.written {
        Fixed::AutoKLearned
    } else {
        Fixed::AutoKLost
    };
    proxy.count(stat.into(), slots.len() as u64);
    if learned.foreign {
        proxy.count(Fixed::AutoKForeign.into(), 1);
    }
}

fn resume(flow: Flow, side: Resume) -> Resume {
    match flow {
        Flow::Continue => side,
        Flow::Pause => Resume::Nothing,
    }
}

/// What the caller may do, and who it is, under access rules: the configured request headers,
/// and the JWT payloads Envoy's `jwt_authn` left in the dynamic metadata (one read of the
/// whole `metadata` property, decoded by [`crate::metadata`]); `None` without access rules.
fn identity<P: Proxy>(
    proxy: &P,
    engine: &crate::pipeline::Engine,
    headers: &HeaderMap,
) -> Option<(Grant, Caller)> {
    let policy = engine.policy()?;
    let mut metadata: Option<Vec<u8>> = None;
    let mut payloads = |namespace: &str, key: Option<&str>| {
        // No token: Envoy has no metadata to give, and the read answers nothing.
        let bytes =
            metadata.get_or_insert_with(|| proxy.property(&["metadata"]).unwrap_or_default());
        crate::metadata::payloads(bytes, namespace, key)
    };
    let caller = policy.caller(|name| headers.get(name), &mut payloads);
    // `access_shadow` with an identity of its own reads it too.
    let shadow_caller = policy
        .shadow()
        .filter(|s| s.sources() != policy.sources())
        .map(|s| s.caller(|name| headers.get(name), &mut payloads));
    Some((policy.grant_with(&caller, shadow_caller.as_ref()), caller))
}

/// Runs an MCP message's `event` with its context (`None` when a part of it cannot be had),
/// and carries out the flow it comes to.
fn mcp_message<P: Proxy>(
    proxy: &P,
    shared: &Shared<P::Store>,
    outgoing: &Outgoing,
    event: impl FnOnce(Option<Context<'_, '_, McpHost<'_, P>>>) -> crate::mcp::request::Flow,
) -> Flow {
    let host = McpHost::new(proxy, shared, outgoing);
    let mut cache = shared.mcp_cache.try_borrow_mut().ok();
    let settings = host.as_ref().and_then(McpHost::settings);
    let context = match (host.as_ref(), cache.as_deref_mut(), settings.as_ref()) {
        (Some(host), Some(cache), Some(settings)) => Some(Context {
            host,
            cache,
            settings,
        }),
        _ => None,
    };
    refuse_or(proxy, event(context))
}

/// Carries out an MCP machine's flow: a refusal is sent as a local reply (held either way:
/// what cannot be checked never goes upstream).
fn refuse_or<P: Proxy>(proxy: &P, flow: crate::mcp::request::Flow) -> Flow {
    use crate::mcp::request::Flow as Mcp;
    match flow {
        Mcp::Continue => Flow::Continue,
        Mcp::Pause => Flow::Pause,
        Mcp::Refuse(refusal) => {
            log::warn!("mcp: the request could not be checked: {}", refusal.body);
            proxy.count(Stat::Denied(refusal.surface), 1);
            let headers: [(&str, &[u8]); 1] = [("content-type", b"application/json")];
            if let Err(status) =
                proxy.send_response(refusal.status, &headers, refusal.body.as_bytes())
            {
                log::warn!("mcp: cannot answer the request: {status:?}");
            }
            Flow::Pause
        }
    }
}

fn add_response_header<P: Proxy>(proxy: &P, name: &str, value: &str) {
    if let Err(status) = proxy.add_header(Headers::Response, name, value.as_bytes()) {
        log::debug!("cannot add {name}: {status:?}");
    }
}

/// The stream's state that the actions change.
struct Effects<'a> {
    context_id: u32,
    headers_held: &'a mut bool,
    watch: &'a mut Option<Watch>,
    /// Whose Responses id aliases a guard may follow.
    alias_owner: u64,
    /// The access log's record (written by the stream once the callback is done).
    record: &'a mut Record,
}

impl Effects<'_> {
    /// Carries out what the core asked for. `Pause` when the request was answered here (the
    /// local reply ends the stream; nothing more goes upstream) or its headers are held; an
    /// error when Envoy refused a change the body needs (the actions after it are not done).
    fn perform<P: Proxy>(
        &mut self,
        proxy: &P,
        shared: &Shared<P::Store>,
        actions: Vec<Action>,
    ) -> Result<Flow, Skipped> {
        let mut flow = Flow::Continue;
        for action in actions {
            match action {
                Action::Count(counter, n) => proxy.counts(counter.counts(n)),
                Action::RemoveRequestHeader { name, required } => {
                    if let Err(status) = proxy.remove_header(Headers::Request, name) {
                        if required {
                            log::warn!("cannot remove {name}: {status:?}");
                            return Err(Skip::Internal.into());
                        }
                        log::debug!("cannot remove {name}: {status:?}");
                    }
                }
                Action::ReplaceBody { drain, bytes } => {
                    proxy
                        .set_buffer(Buffer::RequestBody, 0, drain, &bytes)
                        .map_err(|_| Skip::Internal)?;
                }
                Action::Reply { status, body } => {
                    let headers: [(&str, &[u8]); 1] = [("content-type", b"application/json")];
                    match proxy.send_response(status, &headers, body.as_bytes()) {
                        Ok(()) => flow = Flow::Pause,
                        Err(e) => {
                            // What follows a reply counts it: not sent, not counted.
                            log::warn!("cannot answer the request ({status}): {e:?}");
                            return Ok(flow);
                        }
                    }
                }
                Action::Guard(session) => {
                    let responder = Responder::new(*session, false, false);
                    *self.watch = Some(Watch::new(responder, Vec::new(), self.alias_owner));
                }
                Action::Watch(search) => *self.watch = Some(Watch::from_loop(search)),
                Action::HoldHeaders => {
                    if self.hold_headers(proxy, shared) {
                        flow = Flow::Pause;
                    }
                }
                Action::Record { header, tokens } => self.record.set_head(&header, tokens),
                Action::RecordGenAi(value) => proxy.record(crate::gen_ai::FILTER_STATE, &value),
                Action::AddResponseHeader { name, value } => {
                    add_response_header(proxy, name, &value);
                }
                Action::SetRequestHeader { name, value } => {
                    if let Err(status) = proxy.set_header(Headers::Request, name, value.as_bytes())
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
    /// the worker's tick resumes any held request whose body does not come.
    fn hold_headers<P: Proxy>(&mut self, proxy: &P, shared: &Shared<P::Store>) -> bool {
        let Ok(mut watchdog) = shared.watchdog.try_borrow_mut() else {
            return false;
        };
        if !watchdog.may_hold() {
            return false;
        }
        if watchdog.held(self.context_id, proxy.now_millis()) {
            let tick = Duration::from_millis(crate::search::hold::TICK_MS);
            if let Err(status) = proxy.set_tick_period(tick) {
                // Without the tick nothing could resume a stalled request: do not hold.
                log::warn!("cannot start the tick that watches held requests: {status:?}");
                watchdog.ended(self.context_id);
                return false;
            }
        }
        *self.headers_held = true;
        true
    }
}

/// The body phase's host: the proxy's buffer, clock, stats and calls.
pub(super) struct BodyProxy<'a, P: Proxy> {
    proxy: &'a P,
    shared: &'a Shared<P::Store>,
    effects: Effects<'a>,
}

impl<P: Proxy> BodyHost for BodyProxy<'_, P> {
    type Store = P::Store;

    fn request_body(&self, size: usize) -> Option<Vec<u8>> {
        self.proxy.buffer(Buffer::RequestBody, 0, size).ok()
    }

    fn store(&self) -> &Self::Store {
        self.proxy.store()
    }

    fn now_seconds(&self) -> u64 {
        self.proxy.now_seconds()
    }

    fn clock(&self) -> Option<SystemTime> {
        self.proxy.now()
    }

    fn phase(&self, stat: Fixed, started: Option<SystemTime>) -> Option<SystemTime> {
        self.proxy.phase(stat, started)
    }

    fn count(&self, counts: Counts) {
        self.proxy.counts(counts);
    }

    fn perform(&mut self, actions: Vec<Action>) -> Result<Flow, Skipped> {
        self.effects.perform(self.proxy, self.shared, actions)
    }

    fn headers_held(&self) -> bool {
        *self.effects.headers_held
    }

    fn embed(&mut self, e: &Embeddings, inputs: &[&str]) -> Option<u32> {
        super::hybrid::send(self.proxy, e, inputs)
    }

    fn ask(&mut self, call: &GatingCall) -> Option<u32> {
        super::hosts::dispatch(
            self.proxy,
            &call.cluster,
            &call.headers,
            &call.body,
            call.timeout,
        )
        .inspect_err(|status| log::debug!("gating call to {} failed: {status:?}", call.cluster))
        .ok()
    }

    fn backfill(&mut self, catalog: &Rc<Catalog>, entries: Vec<usize>) {
        self.shared.queue_backfill(self.proxy, catalog, entries);
    }
}

impl Watch {
    /// The guard's or a loop's response side, its follow-ups carrying `headers`.
    fn new(responder: Responder, headers: Vec<(String, String)>, owner: u64) -> Watch {
        let (response, follow_ups) = Response::new(responder, headers, owner);
        Watch {
            response,
            follow_ups,
        }
    }

    /// Search mode's loop, as the core planned it ([`Request::plan_search`]).
    fn from_loop(planned: Box<SearchLoop>) -> Watch {
        let (response, follow_ups) = Response::from_loop(*planned);
        Watch {
            response,
            follow_ups,
        }
    }

    fn token(&self) -> Option<u32> {
        self.response.token()
    }

    fn on_headers<P: Proxy>(
        &mut self,
        proxy: &P,
        shared: &Shared<P::Store>,
        end_of_stream: bool,
    ) -> Flow {
        let head = respond::Head {
            status: proxy.header_text(Headers::Response, ":status"),
            content_type: proxy.header_text(Headers::Response, "content-type"),
            content_encoding: proxy.header_text(Headers::Response, "content-encoding"),
            end_of_stream,
        };
        let Some(host) = response_host(proxy, shared, &self.follow_ups, self.response.searches())
        else {
            return Flow::Continue;
        };
        let step = self.response.on_headers(&host, &head);
        drop(host);
        if step.drop_content_encoding {
            if let Err(status) = proxy.remove_header(Headers::Response, "content-encoding") {
                log::warn!("cannot remove the response content-encoding: {status:?}");
            }
        }
        if step.drop_content_length {
            if let Err(status) = proxy.remove_header(Headers::Response, "content-length") {
                // The body cannot be replaced safely: let this response through as it is.
                log::warn!("cannot remove the response content-length: {status:?}");
                return Flow::Continue;
            }
        }
        step.flow
    }

    fn on_body<P: Proxy>(
        &mut self,
        proxy: &P,
        shared: &Shared<P::Store>,
        body_size: usize,
        end: bool,
    ) -> Flow {
        let host = response_host(proxy, shared, &self.follow_ups, self.response.searches());
        self.response.on_body(host.as_ref(), body_size, end)
    }

    fn on_trailers<P: Proxy>(&mut self, proxy: &P, shared: &Shared<P::Store>) -> Flow {
        let host = response_host(proxy, shared, &self.follow_ups, self.response.searches());
        self.response.on_trailers(host.as_ref())
    }

    /// A call of this response's answered. Returns whether the response may resume.
    fn on_call<P: Proxy>(
        &mut self,
        proxy: &P,
        shared: &Shared<P::Store>,
        token: u32,
        answer: respond::Answer,
    ) -> bool {
        let host = response_host(proxy, shared, &self.follow_ups, self.response.searches());
        self.response.on_call(host.as_ref(), token, answer)
    }
}

/// The response side's host for the callback at hand; `None` when the engine cannot be had.
fn response_host<'a, P: Proxy>(
    proxy: &'a P,
    shared: &'a Shared<P::Store>,
    follow_ups: &'a FollowUps,
    searches: bool,
) -> Option<ResponseHost<'a, P>> {
    Some(ResponseHost {
        proxy,
        engine: shared.engine.try_borrow().ok()?,
        vectors: shared.vectors.as_ref(),
        follow_ups,
        searches,
    })
}

impl<'a, P: Proxy> McpHost<'a, P> {
    /// An MCP message's host for the callback at hand; `None` when the engine cannot be had.
    fn new(proxy: &'a P, shared: &'a Shared<P::Store>, outgoing: &'a Outgoing) -> Option<Self> {
        Some(McpHost {
            proxy,
            engine: shared.engine.try_borrow().ok()?,
            vectors: shared.vectors.as_ref(),
            outgoing,
        })
    }
}
