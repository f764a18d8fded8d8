//! Search mode in the filter: the response side. The model's turn is read when the upstream
//! response is complete (or, for a stream, held only until its first output shows whether it
//! is a tool call); a `find_tools`-only turn is answered with a follow-up request to the same
//! cluster with the request's headers as the router sent them, by `dispatch_http_call`, until
//! the model answers or
//! calls a real tool; the client then gets that response in place of the first. A stream
//! released at its first text is watched ([`Watch`]): a meta-tool call after the text is held
//! and answered the same way, the next round's stream sent as the continuation.
//!
//! Holding the response headers until the body decides (and the request headers until the
//! request body is read, see `on_http_request_headers`) needs Envoy's
//! `allow_on_headers_stop_iteration: true` in the plugin config (Envoy 1.35 and later):
//! without it, a paused headers callback also stops the body callbacks.

use super::host::{self, Buffer, Headers};
use super::{Shared, vectors};
use crate::embeddings::{Fallback, Gathered, Slot};
use crate::pipeline::rank_fused;
use crate::search::round::{Next, Session};
use crate::search::{Edits, Frame, Reply, sse};
use proxy_wasm::types::Action;
use std::rc::Rc;
use std::time::{Duration, SystemTime};

/// A request in search mode, from its body phase to its last response byte.
pub struct Search {
    pub session: Session,
    /// The client asked for a stream.
    pub stream: bool,
    /// The client's request headers, for the follow-ups (credentials, API version, …).
    pub headers: Vec<(String, String)>,
    state: State,
    /// Size of the first response's body, held in Envoy's buffer.
    held: usize,
    /// A model turn waiting for its search queries' embeddings.
    pending: Option<Pending>,
    /// A stream released at its first text, watched for a meta-tool call after it.
    watch: Option<Watch>,
}

/// A stream released at its first text that may still call the meta-tool after it (a common
/// habit: "Let me look that up." and then the call). Complete events pass through as they
/// come; from the event that starts a meta-tool call on, the rest is held and decided like a
/// held turn, and what follows (the turn without its searches, or the next round's stream)
/// is sent as the continuation of the events already sent.
#[derive(Default)]
struct Watch {
    /// The start of an event not yet complete (or of a character split between chunks):
    /// sent with the chunk that completes it.
    carry: Vec<u8>,
    /// The events the client has been sent.
    sent: Vec<Frame>,
    /// Everything from the first meta-tool call on.
    held: Option<Vec<u8>>,
}

/// A model turn whose meta-tool queries are being embedded (hybrid ranking), to be decided when
/// the embeddings answer.
struct Pending {
    reply: Reply,
    text: String,
    follow_up: bool,
    queries: Vec<QueryVectors>,
}

/// A search query, what is known of its vectors, and the slots its missing ones fill (in the
/// order of the embeddings call's inputs).
type QueryVectors = (String, Gathered, Vec<Slot>);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// The request went upstream; its response has not started.
    Sent,
    /// The response headers are held while the body is read.
    Holding,
    /// Let everything through untouched from here on.
    Released,
    /// A follow-up is out, with this token; the response is paused.
    FollowUp(u32),
    /// The model's search queries are being embedded, with this token; the response is paused.
    Embedding(u32),
    /// A stream released at its first text, passing through while watched ([`Watch`]).
    Watching,
}

/// Request headers that belong to one connection or one body, not to the follow-ups.
const NOT_FORWARDED: [&str; 7] = [
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "te",
    "upgrade",
    "expect",
];

impl Search {
    pub fn new(session: Session, stream: bool, headers: Vec<(String, String)>) -> Search {
        let headers = forwarded(headers);
        Search {
            session,
            stream,
            headers,
            state: State::Sent,
            held: 0,
            pending: None,
            watch: None,
        }
    }

    pub fn token(&self) -> Option<u32> {
        match self.state {
            State::FollowUp(token) | State::Embedding(token) => Some(token),
            _ => None,
        }
    }

    /// Response headers: hold them when the body may have to be replaced.
    pub fn on_response_headers(&mut self, shared: &Shared) -> Action {
        let header = |name: &str| {
            host::header(Headers::Response, name)
                .map(|v| String::from_utf8_lossy(&v).into_owned())
                .unwrap_or_default()
        };
        let status = header(":status");
        let content_type = header("content-type").to_ascii_lowercase();
        let readable = content_type.contains("json") || content_type.contains("event-stream");
        if status != "200" || !readable {
            // Errors and odd answers reach the client as the upstream sent them.
            self.state = State::Released;
            return Action::Continue;
        }
        let encoding = header("content-encoding").to_ascii_lowercase();
        if !matches!(encoding.trim(), "" | "identity") {
            // Compressed although the request no longer offered it (see
            // `on_http_request_headers`): toolsift cannot read the turn.
            shared.metrics.add(shared.metrics.search_unreadable, 1);
            self.state = State::Released;
            return Action::Continue;
        }
        if let Err(status) = host::remove_header(Headers::Response, "content-length") {
            log::warn!("cannot remove the response content-length: {status:?}");
            self.state = State::Released;
            return Action::Continue;
        }
        shared.metrics.add(shared.metrics.search_held, 1);
        self.state = State::Holding;
        Action::Pause
    }

    /// Response body: decide once the turn can be read.
    pub fn on_response_body(
        &mut self,
        shared: &Shared,
        body_size: usize,
        end_of_stream: bool,
    ) -> Action {
        match self.state {
            State::Holding => {}
            State::Watching => return self.watch_chunk(shared, body_size, end_of_stream),
            _ => return Action::Continue,
        }
        let body = host::buffer(Buffer::ResponseBody, 0, body_size).unwrap_or_default();
        if self.stream && !end_of_stream {
            // A chunk may end inside a character: the events before it decide.
            let Some(text) = sse::utf8_prefix(&body) else {
                return self.release(shared);
            };
            let (frames, _) = sse::frames(text);
            return match self.session.wire().opening(&frames) {
                crate::search::Opening::Answer if self.session.wire().continues_streams() => {
                    self.release(shared);
                    self.state = State::Watching;
                    self.watch = Some(Watch::default());
                    self.watch_chunk(shared, body_size, false)
                }
                crate::search::Opening::Answer => self.release(shared),
                _ => Action::Pause,
            };
        }
        if !end_of_stream {
            return Action::Pause;
        }
        let Ok(text) = std::str::from_utf8(&body) else {
            return self.release(shared);
        };
        self.held = body_size;
        self.turn(shared, text, false)
    }

    /// A chunk of a watched stream (Envoy's buffer holds just this chunk, or at the release
    /// everything so far): its complete events go on, up to one that starts a meta-tool call;
    /// from there on everything is held, and decided at the end of the stream.
    fn watch_chunk(&mut self, shared: &Shared, body_size: usize, end_of_stream: bool) -> Action {
        let chunk = host::buffer(Buffer::ResponseBody, 0, body_size).unwrap_or_default();
        let Some(watch) = self.watch.as_mut() else {
            return Action::Continue;
        };
        if let Some(held) = &mut watch.held {
            held.extend_from_slice(&chunk);
            set_response_body(body_size, b"");
        } else {
            let mut data = std::mem::take(&mut watch.carry);
            data.extend_from_slice(&chunk);
            let Some(text) = sse::utf8_prefix(&data) else {
                // Not text: stop watching, and let the rest through as it comes.
                set_response_body(body_size, &data);
                self.watch = None;
                self.state = State::Released;
                return Action::Continue;
            };
            let wire = self.session.wire();
            let (frames, consumed) = sse::frames_with_ends(text);
            let mut start = 0;
            let mut meta_at = None;
            for (frame, end) in frames {
                let calls = wire.calls_started(&frame);
                if calls.iter().any(|name| self.session.is_meta(name)) {
                    meta_at = Some(start);
                    break;
                }
                watch.sent.push(frame);
                start = end;
            }
            let cut = match meta_at {
                Some(at) => at,
                None if end_of_stream => data.len(),
                None => consumed,
            };
            let rest = data.split_off(cut.min(data.len()));
            if meta_at.is_some() {
                shared.metrics.add(shared.metrics.search_held, 1);
                watch.held = Some(rest);
            } else {
                watch.carry = rest;
            }
            set_response_body(body_size, &data);
        }
        let Some(held) = watch.held.as_ref().filter(|_| end_of_stream) else {
            return Action::Continue;
        };
        // The whole turn, the events sent written again (only to be read: the client keeps
        // the bytes it got), then what was held.
        let mut text = sse::write_all(&watch.sent);
        text.push_str(&String::from_utf8_lossy(held));
        self.held = 0;
        self.turn(shared, &text, false)
    }

    /// Lets the held response go as it is.
    fn release(&mut self, shared: &Shared) -> Action {
        shared.metrics.add(shared.metrics.search_released, 1);
        self.state = State::Released;
        self.add_header();
        Action::Continue
    }

    /// A complete model turn (the first response, or a follow-up's): answer the client or
    /// send the next follow-up. `follow_up`: `text` is a follow-up's answer, not the body held.
    fn turn(&mut self, shared: &Shared, text: &str, follow_up: bool) -> Action {
        let started = host::now();
        let wire = self.session.wire();
        let reply = if self.stream {
            wire.read_stream(&sse::frames(text).0)
        } else {
            wire.read_reply(text)
        };
        let Ok(reply) = reply else {
            shared.metrics.add(shared.metrics.search_unreadable, 1);
            return self.deliver(shared, text, follow_up, None);
        };
        if let Some((token, queries)) = self.rank_queries(shared, &reply) {
            self.pending = Some(Pending {
                reply,
                text: text.to_owned(),
                follow_up,
                queries,
            });
            self.state = State::Embedding(token);
            return Action::Pause;
        }
        self.decide(shared, &reply, text, follow_up, started)
    }

    /// What follows the model's turn `reply` (read from `text`), its searches ranked.
    fn decide(
        &mut self,
        shared: &Shared,
        reply: &Reply,
        text: &str,
        follow_up: bool,
        started: Option<SystemTime>,
    ) -> Action {
        let wire = self.session.wire();
        match self.session.on_reply(reply) {
            Next::Deliver(edits) => {
                let finished = if edits == Edits::default() {
                    None
                } else if self.stream {
                    let frames: Vec<Frame> = sse::frames(text).0;
                    wire.finish_stream(&frames, &edits).ok()
                } else {
                    wire.finish_reply(text, &edits).ok()
                };
                self.deliver(shared, text, follow_up, finished.as_deref())
            }
            Next::FollowUp(body) => match self.dispatch(shared, &body) {
                Some(token) => {
                    shared.metrics.add(shared.metrics.search_rounds, 1);
                    let elapsed = started.and_then(|s| host::now()?.duration_since(s).ok());
                    if let Some(elapsed) = elapsed {
                        let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
                        shared
                            .metrics
                            .record(shared.metrics.search_round_time_us, micros);
                    }
                    self.state = State::FollowUp(token);
                    Action::Pause
                }
                None => {
                    self.fail(shared, "the follow-up request could not be sent");
                    Action::Continue
                }
            },
        }
    }

    /// With hybrid ranking, ranks the model's search queries as filter mode ranks a request:
    /// at once when every vector is known, else after one embeddings call for the queries'
    /// missing vectors (its token and what it fills are returned). A query of a catalog whose
    /// tools are not all embedded yet, or whose call cannot be made, is ranked by keyword.
    fn rank_queries(&mut self, shared: &Shared, reply: &Reply) -> Option<(u32, Vec<QueryVectors>)> {
        let engine = shared.engine.try_borrow().ok()?;
        let (source, e) = shared.hybrid(&engine.config)?;
        let catalog = Rc::clone(self.session.catalog());
        let metrics = &shared.metrics;
        let mut waiting = Vec::new();
        let mut inputs: Vec<String> = Vec::new();
        for query in self.session.queries(reply) {
            let gathered = source.gather(&catalog, &query);
            if !gathered.missing_tools.is_empty() {
                // Filter mode's request is still embedding the catalog (or handed it to the
                // background): this search goes by keyword.
                metrics.add(metrics.embeddings_incomplete, 1);
                continue;
            }
            if let Some((q, t)) = gathered.complete() {
                let fused = rank_fused(&catalog, &engine.config, &query, &q, &t);
                metrics.add(metrics.search_hybrid, 1);
                self.session.set_ranking(query, fused.order);
                continue;
            }
            let (slots, texts) = gathered.plan(&catalog, 0);
            if slots.is_empty() {
                // Every vector is known, but of different sizes.
                metrics.fallback(Fallback::Dimensions);
                continue;
            }
            inputs.extend(texts);
            waiting.push((query, gathered, slots));
        }
        if waiting.is_empty() {
            return None;
        }
        let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
        match vectors::dispatch(e, &refs, Duration::from_millis(e.timeout_ms as u64)) {
            Ok(token) => {
                metrics.add(metrics.embeddings_calls, 1);
                metrics.add(metrics.embeddings_inputs, refs.len());
                Some((token, waiting))
            }
            Err(status) => {
                log::debug!("embeddings call to {} failed: {status:?}", e.cluster);
                metrics.fallback(Fallback::Dispatch);
                None
            }
        }
    }

    /// The search queries' embeddings answered (or Envoy gave up on them): rank the queries
    /// that got their vectors, the rest by keyword, and decide the turn. Returns whether the
    /// response may resume.
    fn on_query_vectors(&mut self, shared: &Shared, num_headers: usize, body_size: usize) -> bool {
        let Some(pending) = self.pending.take() else {
            return true;
        };
        let started = host::now();
        if let Ok(engine) = shared.engine.try_borrow() {
            if let Some((source, e)) = shared.hybrid(&engine.config) {
                let catalog = Rc::clone(self.session.catalog());
                let inputs = pending.queries.iter().map(|(_, _, s)| s.len()).sum();
                let known = pending
                    .queries
                    .iter()
                    .find_map(|(_, g, _)| g.known_dimensions());
                match super::http::read_answer(
                    num_headers,
                    body_size,
                    inputs,
                    e.dimensions.or(known),
                ) {
                    Ok(vectors) => {
                        let mut vectors = vectors.into_iter();
                        for (query, mut gathered, slots) in pending.queries {
                            let part: Vec<Vec<f32>> = vectors.by_ref().take(slots.len()).collect();
                            source.fill(&catalog, &mut gathered, &slots, part);
                            if let Some((q, t)) = gathered.complete() {
                                let fused = rank_fused(&catalog, &engine.config, &query, &q, &t);
                                shared.metrics.add(shared.metrics.search_hybrid, 1);
                                self.session.set_ranking(query, fused.order);
                            }
                        }
                    }
                    Err(reason) => shared.metrics.fallback(reason),
                }
            }
        }
        self.decide(
            shared,
            &pending.reply,
            &pending.text,
            pending.follow_up,
            started,
        ) == Action::Continue
    }

    /// A call of this request's answered: the search queries' embeddings, or a follow-up.
    /// Returns whether the response may resume.
    pub fn on_call(&mut self, shared: &Shared, num_headers: usize, body_size: usize) -> bool {
        match self.state {
            State::Embedding(_) => self.on_query_vectors(shared, num_headers, body_size),
            _ => self.on_follow_up(shared, num_headers, body_size),
        }
    }

    /// Sends the follow-up to the cluster the request was routed to.
    fn dispatch(&self, shared: &Shared, body: &str) -> Option<u32> {
        // The upstream cluster the router picked for this request.
        let property = |path: Vec<&str>| {
            host::property(&path)
                .and_then(|c| String::from_utf8(c).ok())
                .filter(|c| !c.is_empty())
        };
        let Some(cluster) =
            property(vec!["xds", "cluster_name"]).or_else(|| property(vec!["cluster_name"]))
        else {
            log::warn!("search follow-up: the request's upstream cluster is unknown");
            return None;
        };
        // The request as the router sent it upstream (rewritten host and path, headers the
        // route adds): the router edits the request's header map in place, and the filter
        // can still read that map because search mode held the request headers (see
        // `on_http_request_headers`). The headers seen in the request phase are the fallback.
        let routed: Option<Vec<(String, String)>> = Some(host::headers(Headers::Request))
            .filter(|map| map.iter().any(|(k, _)| k == b":path"))
            .and_then(|map| {
                map.into_iter()
                    .map(|(k, v)| Some((String::from_utf8(k).ok()?, String::from_utf8(v).ok()?)))
                    .collect()
            })
            .map(forwarded);
        let headers: Vec<(&str, &str)> = routed
            .as_ref()
            .unwrap_or(&self.headers)
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let timeout = shared
            .engine
            .try_borrow()
            .map_or(120_000, |e| e.config.search.timeout_ms);
        match host::dispatch(
            &cluster,
            headers,
            body.as_bytes(),
            Duration::from_millis(timeout as u64),
        ) {
            Ok(token) => Some(token),
            Err(status) => {
                log::warn!("search follow-up to {cluster} failed: {status:?}");
                None
            }
        }
    }

    /// A follow-up answered (or Envoy gave up on it). Returns whether the response may resume.
    fn on_follow_up(&mut self, shared: &Shared, num_headers: usize, body_size: usize) -> bool {
        let Some(status) = super::http::call_status(num_headers) else {
            self.fail(shared, "the follow-up request got no response");
            return true;
        };
        let content_type = host::header_text(Headers::CallResponse, "content-type")
            .ok()
            .flatten();
        let body = host::buffer(Buffer::CallResponseBody, 0, body_size).unwrap_or_default();
        if !status.starts_with('2') {
            shared.metrics.add(shared.metrics.search_failed, 1);
            // The provider's own error reaches the client; Envoy's (reset, timeout, no
            // upstream) is not JSON, and the client gets toolsift's instead.
            let json = serde_json::from_slice::<serde::de::IgnoredAny>(&body).is_ok();
            if let (true, true, Ok(text)) = (json, self.watch.is_some(), std::str::from_utf8(&body))
            {
                // Part of the stream is with the client: its error ends the stream.
                self.replace_body(error_event(text).as_bytes());
                self.state = State::Released;
                return true;
            }
            if json {
                set_response_header(":status", &status);
                if let Some(content_type) = &content_type {
                    set_response_header("content-type", content_type);
                }
                self.replace_body(&body);
                self.add_header();
                return true;
            }
            self.fail(
                shared,
                &format!("the follow-up request failed with status {status}"),
            );
            return true;
        }
        let Ok(text) = std::str::from_utf8(&body) else {
            self.fail(shared, "the follow-up response is not UTF-8");
            return true;
        };
        if let Some(content_type) = &content_type {
            set_response_header("content-type", content_type);
        }
        self.turn(shared, text, true) == Action::Continue
    }

    /// The client gets `text` (or `finished` in its place) as the response body.
    fn deliver(
        &mut self,
        shared: &Shared,
        text: &str,
        follow_up: bool,
        finished: Option<&str>,
    ) -> Action {
        self.state = State::Released;
        let replaced = match finished {
            Some(f) => Some(f),
            // A follow-up's body replaces the first response's even when unchanged.
            None if follow_up => Some(text),
            None => None,
        };
        if let Some(watch) = &self.watch {
            // Part of this stream is with the client: send only what follows it.
            let whole = replaced.unwrap_or(text);
            let rest = if follow_up {
                self.session.wire().continue_stream(&watch.sent, whole).ok()
            } else {
                Some(sse::after_events(whole, watch.sent.len()).to_owned())
            };
            match rest {
                Some(rest) => self.replace_body(rest.as_bytes()),
                None => self.replace_body(
                    error_event(&toolsift_error(
                        "the next round's stream cannot be continued",
                    ))
                    .as_bytes(),
                ),
            }
        } else if let Some(bytes) = replaced {
            self.replace_body(bytes.as_bytes());
        }
        if self.session.rounds() > 0 {
            shared.metrics.add(shared.metrics.search_answered, 1);
        }
        self.add_header();
        Action::Continue
    }

    fn replace_body(&self, bytes: &[u8]) {
        set_response_body(self.held, bytes);
    }

    /// The client gets a JSON 502 naming toolsift, never a dangling meta-tool call.
    fn fail(&mut self, shared: &Shared, why: &str) {
        shared.metrics.add(shared.metrics.search_failed, 1);
        self.state = State::Released;
        let body = toolsift_error(why);
        if self.watch.is_some() {
            // The status went with the stream's start: the stream ends with an error event.
            self.replace_body(error_event(&body).as_bytes());
            return;
        }
        set_response_header(":status", "502");
        set_response_header("content-type", "application/json");
        self.replace_body(body.as_bytes());
        self.add_header();
    }

    fn add_header(&self) {
        if let Err(status) = host::set_header(
            Headers::Response,
            "x-toolsift-search",
            self.session.header_value().as_bytes(),
        ) {
            log::debug!("cannot set x-toolsift-search: {status:?}");
        }
    }
}

/// The headers of `headers` a follow-up carries.
fn forwarded(headers: Vec<(String, String)>) -> Vec<(String, String)> {
    headers
        .into_iter()
        .filter(|(name, _)| !NOT_FORWARDED.contains(&name.to_ascii_lowercase().as_str()))
        .collect()
}

/// toolsift's own error body: `{"error":{"type":"toolsift_error",…}}`.
fn toolsift_error(why: &str) -> String {
    serde_json::json!({
        "type": "error",
        "error": {
            "type": "toolsift_error",
            "code": "search_follow_up_failed",
            "message": format!("toolsift: tool search: {why}"),
        }
    })
    .to_string()
}

/// An SSE `error` event carrying the JSON `body`, to end a stream already under way.
fn error_event(body: &str) -> String {
    let mut out = String::new();
    Frame::named("error", body.replace('\n', " ")).write(&mut out);
    out
}

/// Replaces the `size` bytes of the response body chunk in Envoy's buffer.
fn set_response_body(size: usize, bytes: &[u8]) {
    if let Err(status) = host::set_buffer(Buffer::ResponseBody, 0, size, bytes) {
        log::warn!("cannot set the response body: {status:?}");
    }
}

fn set_response_header(name: &str, value: &str) {
    if let Err(status) = host::set_header(Headers::Response, name, value.as_bytes()) {
        log::debug!("cannot set {name}: {status:?}");
    }
}
