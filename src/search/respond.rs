//! Search mode's response side, as a state machine: Envoy's response callbacks in, the host
//! actions to take out, through a small [`Host`] trait (`lifecycle/hosts.rs` implements it over
//! the core's `Proxy`; the tests, over a recording mock). Pure Rust: every decision of the
//! response side is here and unit-tested natively.
//!
//! A response is read until the model's turn shows what it did:
//! - **Held**: a whole response, or a stream whose first output is a tool call, is kept in Envoy's
//!   buffer (the callbacks pause) to its end. A `find_tools`-only turn is answered with a
//!   follow-up request; the client then gets the follow-up's answer in place of the first.
//! - **Watched**: a stream whose first output is text goes to the client event by event; a
//!   meta-tool call after the text (a common habit: "Let me look that up.", then the call) is
//!   held from the event that starts it, and what follows (the turn without its searches, or
//!   the next round's stream) is sent as the continuation of the events already sent.
//!
//! What is in Envoy's buffer is tracked exactly (`in_envoy`): after a paused callback Envoy
//! keeps the bytes and hands over more; after a callback that continued, only the new chunk.
//! Each callback reads only the bytes it has not seen, and a stream is framed once, so the work
//! per response is linear in its size.
//!
//! Response headers may be held until the body decides (Envoy's
//! `allow_on_headers_stop_iteration`, `search.hold_headers`), or not: then they reach the client
//! at once, without `content-length`, and what only headers could say is said in the body (a
//! follow-up's error) or not at all (`x-toolsift-search`).

use super::round::{Next, Session};
use super::sse::{self, Framing};
use super::{Edits, Frame, Opening, Reply};
use crate::config::Config;
use crate::config::embeddings::Embeddings;
use crate::embeddings::{Fallback, Gathered, SharedBytes, Slot, Source, answer_vectors};
use crate::pipeline::rank_fused_among;
use std::rc::Rc;

/// What the response side needs of the host (Envoy).
pub trait Host {
    type Store: SharedBytes;
    /// Up to `len` bytes of the response body Envoy holds, from `start`.
    fn body(&self, start: usize, len: usize) -> Vec<u8>;
    /// Replaces the first `len` bytes of the response body Envoy holds with `bytes`.
    fn replace_body(&self, len: usize, bytes: &[u8]);
    /// Sets a response header; only called while the response headers are held.
    fn set_header(&self, name: &str, value: &str);
    /// Sends the next request to the model: the request as the router sent it, with `body`.
    fn send_follow_up(&self, body: &str) -> Option<u32>;
    /// Sends an embeddings request for `inputs`.
    fn send_embeddings(&self, inputs: &[&str]) -> Option<u32>;
    /// Counts what happened.
    fn count(&self, event: Event);
    /// A monotonic clock in microseconds, for the round-time histogram.
    fn now_micros(&self) -> Option<u64>;
    /// Hybrid ranking's vector source and settings; `None` with keyword ranking.
    fn hybrid(&self) -> Option<Hybrid<'_, Self::Store>>;
    /// The client was shown the response id `shown` for the response stored as `real`: a later
    /// request naming `shown` (OpenAI Responses' `previous_response_id`) must name `real`.
    fn remember_alias(&self, shown: &str, real: &str);
    /// The store shared by every worker, where `search.memory` keeps sessions.
    fn store(&self) -> &Self::Store;
    /// Seconds since the epoch.
    fn now_seconds(&self) -> u64;
    /// Records the ended loop for the access log: `%FILTER_STATE(wasm.toolsift_search:PLAIN)%`.
    fn record_search(&self, value: &str);
}

/// What hybrid ranking of the model's search queries needs.
pub struct Hybrid<'a, S> {
    pub source: Source<'a, S>,
    pub embeddings: &'a Embeddings,
    pub config: &'a Config,
}

/// What the response side counts ([`Event::counts`] says in which stats).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Event {
    /// A response held (or a watched stream held again at a meta-tool call).
    Held,
    /// A stream released at its first text.
    Released,
    /// A follow-up sent, and the filter's own time to read the turn and send it (µs).
    Round(Option<u64>),
    /// The client got a follow-up's answer.
    Answered,
    /// A follow-up failed.
    Failed,
    /// A model turn toolsift could not read (compressed, not UTF-8, not the dialect's shape).
    Unreadable,
    /// A search query ranked with embeddings.
    Hybrid,
    /// A search query ranked by keyword because the catalog's tools are not all embedded yet.
    EmbeddingsIncomplete,
    /// An embeddings call with this many inputs.
    EmbeddingsCall(usize),
    /// A search query ranked by keyword because its embeddings could not be had.
    Fallback(Fallback),
    /// Model calls refused by access rules (a denied tool, or refused arguments): kept from
    /// the client.
    Refused(usize),
    /// Under access rules: calls of remote MCP connectors' tools in a model turn, which the
    /// provider ran before toolsift saw them (reported, never stopped).
    ConnectorCalls(usize),
    /// Under access rules, a model turn that could not be read (so not checked) was replaced
    /// by toolsift's error: a call in it could have been of a denied tool.
    Unchecked,
    /// Model calls of tools that do not exist (search mode): kept from the client.
    UnknownTools(usize),
    /// A loop stopped for more searches than `search.max_searches`.
    SearchStorm,
    /// Tools suggested (`suggestions`) in a search's result.
    Suggested(usize),
}

impl Event {
    /// The stats this counts in: search mode's (`searches`), or else those of filter mode's
    /// follow-ups answering made-up calls and of the access rules' guard (where search mode's
    /// own events count nowhere).
    pub fn counts(self, searches: bool) -> crate::stats::Counts {
        use crate::access::Surface;
        use crate::stats::{Fixed, Stat, one, two};
        let none = [None, None];
        match self {
            Event::Refused(calls) => one(Stat::Denied(Surface::Call), calls),
            Event::ConnectorCalls(calls) => one(Fixed::AccessConnectorCalls, calls),
            Event::Unchecked => one(Fixed::AccessUnchecked, 1),
            Event::Round(_) if !searches => one(Fixed::UnknownToolsRounds, 1),
            Event::Failed if !searches => one(Fixed::UnknownToolsFailed, 1),
            Event::Unreadable if !searches => one(Fixed::UnknownToolsUnreadable, 1),
            Event::UnknownTools(calls) if !searches => one(Fixed::UnknownToolsCaught, calls),
            _ if !searches => none,
            Event::Held => one(Fixed::SearchHeld, 1),
            Event::Released => one(Fixed::SearchReleased, 1),
            Event::Round(elapsed) => two(
                (Fixed::SearchRounds, 1),
                elapsed.map(|micros| (Fixed::SearchRoundTimeUs, micros)),
            ),
            Event::Answered => one(Fixed::SearchAnswered, 1),
            Event::Failed => one(Fixed::SearchFailed, 1),
            Event::Unreadable => one(Fixed::SearchUnreadable, 1),
            Event::Hybrid => one(Fixed::SearchHybrid, 1),
            Event::EmbeddingsIncomplete => one(Fixed::EmbeddingsIncomplete, 1),
            Event::EmbeddingsCall(inputs) => crate::stats::embeddings_call(inputs),
            Event::Fallback(reason) => one(Stat::Fallback(reason), 1),
            Event::UnknownTools(calls) => one(Fixed::SearchUnknownTools, calls),
            Event::SearchStorm => one(Fixed::SearchStorms, 1),
            Event::Suggested(tools) => one(Fixed::SearchSuggested, tools),
        }
    }
}

/// What a callback returns to Envoy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// Envoy keeps what it has (headers, or the body so far) until told to go on.
    Pause,
}

/// The response head, as Envoy's response headers callback sees it.
#[derive(Debug, Clone, Default)]
pub struct Head {
    pub status: Option<String>,
    pub content_type: Option<String>,
    pub content_encoding: Option<String>,
    /// The response has no body.
    pub end_of_stream: bool,
}

/// What the headers callback does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadStep {
    /// Remove `content-length`: the body may be replaced by one of another length.
    pub drop_content_length: bool,
    /// Remove `content-encoding`: the (compressed) body will be replaced by toolsift's error.
    pub drop_content_encoding: bool,
    pub flow: Flow,
}

/// A call's answer, as `on_http_call_response` sees it.
#[derive(Debug, Clone, Default)]
pub struct Answer {
    /// `None`: no response at all (reset, or cut off by its timeout mid-body).
    pub status: Option<u16>,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The request went upstream; no response yet.
    Sent,
    /// The body is kept in Envoy's buffer until the turn can be read.
    Reading,
    /// Everything from here on passes untouched.
    Passing,
    /// A stream released at its first text, passing while watched.
    Watching,
    /// Under access rules, a response that cannot be checked: held to its end, then replaced
    /// by toolsift's error.
    Unchecked,
    /// A follow-up is out (its token); the response is paused.
    FollowUp(u32),
    /// The search queries' embeddings are being fetched (the call's token).
    Embedding(u32),
}

/// A stream released at its first text, watched for a meta-tool call after it.
#[derive(Default)]
struct Watch {
    /// The start of an event not complete yet (or of a character split between chunks).
    carry: Vec<u8>,
    /// The events the client has been sent.
    sent: Vec<Frame>,
    /// From the event that starts a meta-tool call on: everything, which the client has not
    /// been sent.
    held: Option<Vec<u8>>,
    /// Bytes in Envoy's (paused) buffer that the client is still to get first: the events
    /// before the meta-tool call in the chunk where it started.
    before_call: Vec<u8>,
}

/// A model turn whose search queries wait for their embeddings.
struct Pending {
    reply: Reply,
    text: String,
    follow_up: bool,
    started: Option<u64>,
    queries: Vec<(String, Gathered, Vec<Slot>)>,
}

/// One request's response side, from its response headers to its last byte.
pub struct Responder {
    session: Session,
    /// The client asked for a stream.
    stream: bool,
    /// The response headers may be held (the host allows it for this request).
    may_hold_headers: bool,
    /// They are held now, so headers can still be set.
    headers_held: bool,
    phase: Phase,
    /// Bytes of the response body in Envoy's buffer that this machine has read (the callbacks
    /// paused on them).
    in_envoy: usize,
    /// Reading: the body so far.
    body: Vec<u8>,
    /// Reading a stream: its complete events so far, and how many bytes of `body` they span.
    frames: Vec<Frame>,
    framed: usize,
    /// Reading a stream: its first output has shown whether it is a call.
    opened: bool,
    watch: Option<Watch>,
    pending: Option<Pending>,
}

impl Responder {
    /// The response side of a request whose search is `session`. `may_hold_headers`: Envoy will
    /// deliver the body after a paused response-headers callback.
    pub fn new(session: Session, stream: bool, may_hold_headers: bool) -> Responder {
        Responder {
            session,
            stream,
            may_hold_headers,
            headers_held: false,
            phase: Phase::Sent,
            in_envoy: 0,
            body: Vec::new(),
            frames: Vec::new(),
            framed: 0,
            opened: false,
            watch: None,
            pending: None,
        }
    }

    pub fn session(&self) -> &Session {
        &self.session
    }

    /// The response side has decided: everything from here passes untouched.
    pub fn finished(&self) -> bool {
        self.phase == Phase::Passing
    }

    /// The token of the call this response waits for.
    pub fn token(&self) -> Option<u32> {
        match self.phase {
            Phase::FollowUp(t) | Phase::Embedding(t) => Some(t),
            _ => None,
        }
    }

    /// The response headers arrived.
    pub fn on_headers<H: Host>(&mut self, host: &H, head: &Head) -> HeadStep {
        let pass = HeadStep {
            drop_content_length: false,
            drop_content_encoding: false,
            flow: Flow::Continue,
        };
        let content_type = head.content_type.as_deref().unwrap_or_default();
        let content_type = content_type.to_ascii_lowercase();
        // SSE (`text/event-stream`), JSON, and AWS's binary event stream.
        let binary = content_type.contains(sse::eventstream::CONTENT_TYPE);
        let readable =
            content_type.contains("json") || content_type.contains("event-stream") || binary;
        if !self.session.searches() {
            // A guard is set before the body says whether it asks for a stream: the answer
            // says (SSE, Ollama's JSON lines, or Bedrock's event stream).
            self.stream =
                content_type.contains("event-stream") || content_type.contains("ndjson") || binary;
        }
        if head.status.as_deref() != Some("200") || !readable || head.end_of_stream {
            // Errors, odd answers and empty ones reach the client as the upstream sent them.
            self.phase = Phase::Passing;
            return pass;
        }
        let encoding = head.content_encoding.as_deref().unwrap_or_default();
        if !matches!(
            encoding.trim().to_ascii_lowercase().as_str(),
            "" | "identity"
        ) {
            // Compressed although the request no longer offered it: the turn cannot be read.
            if !self.session.checks_calls() {
                host.count(Event::Unreadable);
                self.phase = Phase::Passing;
                return pass;
            }
            // Under access rules what cannot be checked does not reach the client: the body
            // is read to its end and replaced by toolsift's error.
            self.phase = Phase::Unchecked;
            return HeadStep {
                drop_content_length: true,
                drop_content_encoding: true,
                flow: Flow::Continue,
            };
        }
        self.count_search(host, Event::Held);
        self.phase = Phase::Reading;
        self.headers_held = self.may_hold_headers;
        HeadStep {
            drop_content_length: true,
            drop_content_encoding: false,
            flow: if self.headers_held {
                Flow::Pause
            } else {
                Flow::Continue
            },
        }
    }

    /// A response body callback: Envoy holds `body_size` bytes (everything since the last
    /// callback that continued).
    pub fn on_body<H: Host>(&mut self, host: &H, body_size: usize, end_of_stream: bool) -> Flow {
        match self.phase {
            Phase::Reading => self.read(host, body_size, end_of_stream),
            Phase::Watching => self.watch(host, body_size, end_of_stream),
            Phase::Unchecked => self.swallow(host, body_size, end_of_stream),
            // A paused response gets no callbacks; anything else passes.
            _ => Flow::Continue,
        }
    }

    /// The response ended with trailers (HTTP/2): the body is complete.
    pub fn on_trailers<H: Host>(&mut self, host: &H) -> Flow {
        match self.phase {
            Phase::Reading => self.read(host, self.in_envoy, true),
            Phase::Watching => self.watch(host, self.in_envoy, true),
            Phase::Unchecked => self.swallow(host, self.in_envoy, true),
            _ => Flow::Continue,
        }
    }

    /// A response that cannot be checked: held to its end, then replaced by the error.
    fn swallow<H: Host>(&mut self, host: &H, body_size: usize, end_of_stream: bool) -> Flow {
        self.in_envoy = body_size;
        if !end_of_stream {
            return Flow::Pause;
        }
        self.cannot_check(host);
        Flow::Continue
    }

    /// Counts `event` when the session searches (search mode's stats).
    fn count_search<H: Host>(&self, host: &H, event: Event) {
        if self.session.searches() {
            host.count(event);
        }
    }

    /// Under access rules, a model turn that cannot be read is not let through unchecked: the
    /// client gets toolsift's error instead (in a stream already under way, an error event).
    fn cannot_check<H: Host>(&mut self, host: &H) {
        host.count(Event::Unchecked);
        self.send_error(
            host,
            502,
            &Some("application/json".to_owned()),
            &toolsift_error(
                "access_unchecked",
                "the model's answer could not be read, so it was not checked against the access rules",
            ),
        );
    }

    /// The bytes of Envoy's buffer not read yet.
    fn new_bytes<H: Host>(&mut self, host: &H, body_size: usize) -> Vec<u8> {
        let fresh = body_size.saturating_sub(self.in_envoy);
        let bytes = if fresh == 0 {
            Vec::new()
        } else {
            host.body(self.in_envoy, fresh)
        };
        self.in_envoy = body_size;
        bytes
    }

    /// The body is held until the turn can be read.
    fn read<H: Host>(&mut self, host: &H, body_size: usize, end_of_stream: bool) -> Flow {
        let fresh = self.new_bytes(host, body_size);
        self.body.extend_from_slice(&fresh);
        if self.stream && !self.opened {
            // Frame what came in: a chunk may end inside an event or a character.
            let framing = self.session.codec().framing();
            let framed = self.body.get(self.framed..);
            let Some((frames, consumed)) = framed.and_then(|b| framing.wire_frames(b)) else {
                if !self.session.checks_calls() {
                    return self.release(host);
                }
                self.cannot_check(host);
                return Flow::Continue;
            };
            self.framed += consumed;
            // Events before these were undecided: whether the model calls or answers shows in
            // the first event that outputs something, so only the new ones are looked at.
            let opening = self.session.codec().opening(&frames);
            self.frames.extend(frames);
            match opening {
                Opening::Answer if self.session.codec().continues_streams() => {
                    // The client gets the stream from here; what Envoy holds goes too, minus
                    // anything from a meta-tool call on.
                    self.count_search(host, Event::Released);
                    self.phase = Phase::Watching;
                    self.watch = Some(Watch::default());
                    let held = std::mem::take(&mut self.body);
                    self.frames.clear();
                    return self.watch_bytes(host, held, end_of_stream);
                }
                // A stream that cannot be watched is held whole when its calls are checked.
                Opening::Answer if !self.session.checks_calls() => return self.release(host),
                Opening::Answer | Opening::Calls => self.opened = true,
                Opening::Undecided => {}
            }
        }
        if !end_of_stream {
            return Flow::Pause;
        }
        let body = std::mem::take(&mut self.body);
        // A stream as text: a binary one transcribed (see `sse`).
        let text = if self.stream {
            self.session.codec().framing().wire_text(body)
        } else {
            String::from_utf8(body).ok()
        };
        match text {
            Some(text) => self.turn(host, text, false, None),
            None if self.session.checks_calls() => {
                self.cannot_check(host);
                Flow::Continue
            }
            None => {
                host.count(Event::Unreadable);
                self.phase = Phase::Passing;
                self.add_header(host);
                Flow::Continue
            }
        }
    }

    /// Lets the response go as it is.
    fn release<H: Host>(&mut self, host: &H) -> Flow {
        self.count_search(host, Event::Released);
        self.phase = Phase::Passing;
        self.body = Vec::new();
        self.frames = Vec::new();
        self.in_envoy = 0;
        self.add_header(host);
        Flow::Continue
    }

    /// A callback of a watched stream.
    fn watch<H: Host>(&mut self, host: &H, body_size: usize, end_of_stream: bool) -> Flow {
        let fresh = self.new_bytes(host, body_size);
        self.watch_bytes(host, fresh, end_of_stream)
    }

    /// `fresh` bytes of a watched stream. Complete events go on, up to one that starts a
    /// meta-tool call; from there on everything is held (Envoy's buffer paused) and decided at
    /// the end of the stream.
    fn watch_bytes<H: Host>(&mut self, host: &H, fresh: Vec<u8>, end_of_stream: bool) -> Flow {
        let searches = self.session.searches();
        let Some(watch) = self.watch.as_mut() else {
            return Flow::Continue;
        };
        if let Some(held) = &mut watch.held {
            held.extend_from_slice(&fresh);
        } else {
            // Envoy holds exactly the `in_envoy` bytes of this callback (the chunk, or at the
            // release everything so far); the client gets what goes back into that space.
            let in_envoy = self.in_envoy;
            let mut data = std::mem::take(&mut watch.carry);
            data.extend_from_slice(&fresh);
            let Some(text) = sse::utf8_prefix(&data) else {
                if self.session.checks_calls() {
                    self.cannot_check(host);
                    return Flow::Continue;
                }
                // Not text: stop watching, and let the rest through as it comes.
                host.replace_body(in_envoy, &data);
                self.watch = None;
                self.phase = Phase::Passing;
                self.in_envoy = 0;
                return Flow::Continue;
            };
            let codec = self.session.codec();
            let (frames, consumed) = codec.framing().frames_with_ends(text);
            let mut start = 0;
            let mut call_at = None;
            for (frame, end) in frames {
                let calls = codec.calls_started(&frame);
                if calls.iter().any(|name| self.session.holds_call(name)) {
                    call_at = Some(start);
                    break;
                }
                watch.sent.push(frame);
                start = end;
            }
            let cut = match call_at {
                Some(at) => at,
                None if end_of_stream => data.len(),
                None => consumed,
            };
            let rest = data.split_off(cut.min(data.len()));
            if call_at.is_some() {
                if searches {
                    host.count(Event::Held);
                }
                host.replace_body(in_envoy, &data);
                // Envoy now holds the events before the call, which the client still gets
                // first; the rest is ours until the turn is decided.
                self.in_envoy = data.len();
                watch.before_call = data;
                watch.held = Some(rest);
            } else {
                host.replace_body(in_envoy, &data);
                self.in_envoy = 0;
                watch.carry = rest;
            }
        }
        if watch.held.is_none() {
            return Flow::Continue;
        }
        if !end_of_stream {
            return Flow::Pause;
        }
        // The whole turn: the events sent written again (only to be read: the client keeps the
        // bytes it got), then what was held.
        let mut text = self.session.codec().framing().write_all(&watch.sent);
        text.push_str(&String::from_utf8_lossy(
            watch.held.as_deref().unwrap_or_default(),
        ));
        self.turn(host, text, false, None)
    }

    /// A complete model turn (the first response, or a follow-up's): answer the client or send
    /// the next follow-up. `follow_up`: `text` is a follow-up's answer, not what Envoy holds.
    fn turn<H: Host>(
        &mut self,
        host: &H,
        text: String,
        follow_up: bool,
        started: Option<u64>,
    ) -> Flow {
        let started = started.or_else(|| host.now_micros());
        let codec = self.session.codec();
        let reply = if self.stream {
            codec.read_stream(&codec.framing().frames(&text).0)
        } else {
            codec.read_reply(&text)
        };
        let Ok(reply) = reply else {
            if self.session.checks_calls() {
                self.cannot_check(host);
                return Flow::Continue;
            }
            host.count(Event::Unreadable);
            return self.deliver(host, &text, follow_up, None);
        };
        if let Some((token, queries)) = self.rank_queries(host, &reply) {
            self.pending = Some(Pending {
                reply,
                text,
                follow_up,
                started,
                queries,
            });
            self.phase = Phase::Embedding(token);
            return Flow::Pause;
        }
        self.decide(host, &reply, &text, follow_up, started)
    }

    /// What follows the model's turn `reply` (read from `text`), its searches ranked.
    fn decide<H: Host>(
        &mut self,
        host: &H,
        reply: &Reply,
        text: &str,
        follow_up: bool,
        started: Option<u64>,
    ) -> Flow {
        let codec = self.session.codec();
        let connector_before = self.session.connector_calls();
        let (refused_before, unknown_before, stormed_before, suggested_before) = (
            self.session.refused(),
            self.session.unknown().len(),
            self.session.stormed(),
            self.session.suggested().len(),
        );
        let next = self.session.on_reply(reply);
        let suggested = self.session.suggested().len() - suggested_before;
        if suggested > 0 {
            host.count(Event::Suggested(suggested));
        }
        if self.session.stormed() && !stormed_before {
            host.count(Event::SearchStorm);
        }
        let connector_calls = self.session.connector_calls() - connector_before;
        if connector_calls > 0 {
            host.count(Event::ConnectorCalls(connector_calls));
        }
        let refused = self.session.refused().saturating_sub(refused_before);
        if refused > 0 {
            host.count(Event::Refused(refused));
        }
        let unknown = self.session.unknown().len().saturating_sub(unknown_before);
        if unknown > 0 {
            host.count(Event::UnknownTools(unknown));
        }
        match next {
            Next::Deliver(edits) => {
                let finished = if edits == Edits::default() {
                    None
                } else if self.stream {
                    codec
                        .finish_stream(&codec.framing().frames(text).0, &edits)
                        .ok()
                } else {
                    codec.finish_reply(text, &edits).ok()
                };
                if refused > 0 && !self.refusals_removed(finished.as_deref()) {
                    // What the codec wrote still calls a refused tool (or could not be
                    // written): the client gets toolsift's error, never the call.
                    self.cannot_check(host);
                    return Flow::Continue;
                }
                self.deliver(host, text, follow_up, finished.as_deref())
            }
            Next::FollowUp(body) => match host.send_follow_up(&body) {
                Some(token) => {
                    let elapsed = started
                        .zip(host.now_micros())
                        .map(|(s, e)| e.saturating_sub(s));
                    host.count(Event::Round(elapsed));
                    self.phase = Phase::FollowUp(token);
                    Flow::Pause
                }
                None => {
                    self.fail(host, "the follow-up request could not be sent");
                    Flow::Continue
                }
            },
        }
    }

    /// Whether `finished`, read back as the client will read it, calls no tool the session
    /// refuses (`None`: the codec could not write it).
    fn refusals_removed(&self, finished: Option<&str>) -> bool {
        let Some(finished) = finished else {
            return false;
        };
        let codec = self.session.codec();
        let reply = if self.stream {
            codec.read_stream(&codec.framing().frames(finished).0)
        } else {
            codec.read_reply(finished)
        };
        reply.is_ok_and(|r| !self.session.refuses_any(&r))
    }

    /// With hybrid ranking, ranks the model's search queries as filter mode ranks a request: at
    /// once when every vector is known, else after one embeddings call for the missing ones
    /// (its token and what it fills are returned). A query of a catalog whose tools are not all
    /// embedded yet, or whose call cannot be made, is ranked by keyword.
    #[allow(clippy::type_complexity)]
    fn rank_queries<H: Host>(
        &mut self,
        host: &H,
        reply: &Reply,
    ) -> Option<(u32, Vec<(String, Gathered, Vec<Slot>)>)> {
        let hybrid = host.hybrid()?;
        let catalog = Rc::clone(self.session.catalog()?);
        let mut waiting = Vec::new();
        let mut inputs: Vec<String> = Vec::new();
        for query in self.session.queries(reply) {
            let gathered = hybrid.source.gather(&catalog, &query);
            if !gathered.missing_tools.is_empty() {
                // The catalog is still being embedded: this search goes by keyword.
                host.count(Event::EmbeddingsIncomplete);
                continue;
            }
            if let Some((q, t)) = gathered.complete() {
                // Under access rules, by the statistics of the caller's tools alone.
                let allowed = self.session.allowed();
                let fused = rank_fused_among(&catalog, hybrid.config, &query, &q, &t, allowed);
                host.count(Event::Hybrid);
                self.session.set_ranking(query, fused.order);
                continue;
            }
            let (slots, texts) = gathered.plan(&catalog, 0);
            if slots.is_empty() {
                // Every vector is known, but of different sizes.
                host.count(Event::Fallback(Fallback::Dimensions));
                continue;
            }
            inputs.extend(texts);
            waiting.push((query, gathered, slots));
        }
        if waiting.is_empty() {
            return None;
        }
        let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
        match host.send_embeddings(&refs) {
            Some(token) => {
                host.count(Event::EmbeddingsCall(refs.len()));
                Some((token, waiting))
            }
            None => {
                host.count(Event::Fallback(Fallback::Dispatch));
                None
            }
        }
    }

    /// A call this response waits for answered (or Envoy gave up on it). Returns whether the
    /// response may resume.
    pub fn on_call<H: Host>(&mut self, host: &H, token: u32, answer: Answer) -> bool {
        match self.phase {
            Phase::Embedding(t) if t == token => self.on_query_vectors(host, answer),
            Phase::FollowUp(t) if t == token => self.on_follow_up(host, answer),
            _ => false,
        }
    }

    /// The search queries' embeddings answered: rank the queries that got their vectors, the
    /// rest by keyword, and decide the turn.
    fn on_query_vectors<H: Host>(&mut self, host: &H, answer: Answer) -> bool {
        let Some(pending) = self.pending.take() else {
            return true;
        };
        if let (Some(hybrid), Some(catalog)) = (host.hybrid(), self.session.catalog()) {
            let catalog = Rc::clone(catalog);
            let inputs = pending.queries.iter().map(|(_, _, s)| s.len()).sum();
            let known = pending
                .queries
                .iter()
                .find_map(|(_, g, _)| g.known_dimensions());
            let dimensions = hybrid.embeddings.dimensions.or(known);
            let vectors = answer_vectors(answer.status, &answer.body, inputs, dimensions);
            match vectors {
                Ok(vectors) => {
                    let mut vectors = vectors.into_iter();
                    for (query, mut gathered, slots) in pending.queries {
                        let part: Vec<Vec<f32>> = vectors.by_ref().take(slots.len()).collect();
                        hybrid.source.fill(&catalog, &mut gathered, &slots, part);
                        if let Some((q, t)) = gathered.complete() {
                            let allowed = self.session.allowed();
                            let fused =
                                rank_fused_among(&catalog, hybrid.config, &query, &q, &t, allowed);
                            host.count(Event::Hybrid);
                            self.session.set_ranking(query, fused.order);
                        }
                    }
                }
                Err(reason) => host.count(Event::Fallback(reason)),
            }
        }
        self.decide(
            host,
            &pending.reply,
            &pending.text,
            pending.follow_up,
            pending.started,
        ) == Flow::Continue
    }

    /// A follow-up answered (or Envoy gave up on it).
    fn on_follow_up<H: Host>(&mut self, host: &H, answer: Answer) -> bool {
        let Some(status) = answer.status else {
            self.fail(host, "the follow-up request got no response");
            return true;
        };
        if !(200..300).contains(&status) {
            host.count(Event::Failed);
            // The provider's own error reaches the client; Envoy's (reset, timeout, no upstream)
            // is not JSON, and the client gets toolsift's instead.
            let json = serde_json::from_slice::<serde::de::IgnoredAny>(&answer.body).is_ok();
            match (json, std::str::from_utf8(&answer.body)) {
                (true, Ok(text)) => self.send_error(host, status, &answer.content_type, text),
                _ => self.fail(
                    host,
                    &format!("the follow-up request failed with status {status}"),
                ),
            }
            return true;
        }
        let text = if self.stream {
            self.session.codec().framing().wire_text(answer.body)
        } else {
            String::from_utf8(answer.body).ok()
        };
        let Some(text) = text else {
            self.fail(
                host,
                "the follow-up response cannot be read (not UTF-8, or a damaged stream)",
            );
            return true;
        };
        if let (true, Some(content_type)) = (self.headers_held, &answer.content_type) {
            host.set_header("content-type", content_type);
        }
        self.turn(host, text, true, None) == Flow::Continue
    }

    /// The client gets `text` (or `finished` in its place) as the response body.
    fn deliver<H: Host>(
        &mut self,
        host: &H,
        text: &str,
        follow_up: bool,
        finished: Option<&str>,
    ) -> Flow {
        let replaced = match finished {
            Some(f) => Some(f),
            // A follow-up's body replaces the first response's even when unchanged.
            None if follow_up => Some(text),
            None => None,
        };
        // A stream's text in its framing's bytes (a binary event stream written again).
        let framing = self.session.codec().framing();
        let wire = match replaced {
            Some(text) if self.stream && self.watch.is_none() => match framing.to_wire(text) {
                Some(bytes) => Some(bytes),
                None => {
                    self.fail(host, "the stream could not be written");
                    return Flow::Continue;
                }
            },
            Some(text) => Some(text.as_bytes().to_vec()),
            None => None,
        };
        self.phase = Phase::Passing;
        if let Some(watch) = self.watch.take() {
            // Part of this stream is with the client: send what follows it.
            let whole = replaced.unwrap_or(text);
            let codec = self.session.codec();
            let rest = if follow_up {
                let rest = codec.continue_stream(&watch.sent, whole).ok();
                let shown = codec.stream_response_id(&watch.sent);
                let real = codec.stream_response_id(&codec.framing().frames(whole).0);
                if let (Some(shown), Some(real), Some(_)) = (&shown, &real, &rest) {
                    if shown != real {
                        host.remember_alias(shown, real);
                    }
                }
                rest
            } else {
                Some(
                    codec
                        .framing()
                        .after_events(whole, watch.sent.len())
                        .to_owned(),
                )
            };
            // A watched stream is text (the framings that continue streams are).
            let rest = rest.map(String::into_bytes).unwrap_or_else(|| {
                error_event(
                    codec.framing(),
                    &toolsift_error(
                        "search_follow_up_failed",
                        "the next round's stream cannot be continued",
                    ),
                )
            });
            let mut out = watch.before_call;
            out.extend_from_slice(&rest);
            host.replace_body(self.in_envoy, &out);
        } else if let Some(bytes) = wire {
            host.replace_body(self.in_envoy, &bytes);
        }
        self.in_envoy = 0;
        if self.session.rounds() > 0 {
            host.count(Event::Answered);
        }
        self.add_header(host);
        Flow::Continue
    }

    /// The provider's error `body` (JSON, with `status`) ends the response.
    fn send_error<H: Host>(
        &mut self,
        host: &H,
        status: u16,
        content_type: &Option<String>,
        body: &str,
    ) {
        self.phase = Phase::Passing;
        if self.headers_held && self.watch.is_none() {
            host.set_header(":status", &status.to_string());
            if let Some(content_type) = content_type {
                host.set_header("content-type", content_type);
            }
            self.end_with(host, body.as_bytes());
            self.add_header(host);
        } else if self.stream {
            // The status went with the stream's start: the stream ends with an error event.
            let framing = self.session.codec().framing();
            self.end_with(host, &error_event(framing, body));
        } else {
            // The status went already (headers not held): the error travels in the body.
            self.end_with(host, body.as_bytes());
        }
    }

    /// The client gets toolsift's own error (a JSON 502, or an `error` event ending a stream),
    /// never a dangling meta-tool call.
    fn fail<H: Host>(&mut self, host: &H, why: &str) {
        host.count(Event::Failed);
        self.send_error(
            host,
            502,
            &Some("application/json".to_owned()),
            &toolsift_error("search_follow_up_failed", why),
        );
    }

    /// Replaces what Envoy holds with `bytes`, after what a watched stream still owes the
    /// client.
    fn end_with<H: Host>(&mut self, host: &H, bytes: &[u8]) {
        let mut out = self.watch.take().map(|w| w.before_call).unwrap_or_default();
        out.extend_from_slice(bytes);
        host.replace_body(self.in_envoy, &out);
        self.in_envoy = 0;
    }

    fn add_header<H: Host>(&self, host: &H) {
        if self.headers_held && self.session.reports() {
            host.set_header("x-toolsift-search", &self.session.header_value());
        }
    }
}

/// toolsift's own error body: `{"type":"error","error":{"type":"toolsift_error",…}}`.
fn toolsift_error(code: &str, why: &str) -> String {
    let what = match code {
        "access_unchecked" => "access rules",
        _ => "tool search",
    };
    serde_json::json!({
        "type": "error",
        "error": {
            "type": "toolsift_error",
            "code": code,
            "message": format!("toolsift: {what}: {why}"),
        }
    })
    .to_string()
}

/// An SSE `error` event carrying the JSON `body` (in the stream's framing), to end a stream
/// already under way.
fn error_event(framing: Framing, body: &str) -> Vec<u8> {
    let frame = match framing {
        Framing::Sse => Frame::named("error", body.replace('\n', " ")),
        // A line of its own, as a JSON-lines API ends a failed stream (`{"error":…}`).
        Framing::Ndjson => Frame::data(body.replace('\n', " ")),
        // An exception message, as Bedrock ends a failed stream; the SDKs raise its `message`.
        Framing::EventStream => {
            let payload = serde_json::json!({ "message": body });
            let frame = Frame::named("exception:internalServerException", payload.to_string());
            return sse::eventstream::write_all(std::slice::from_ref(&frame)).unwrap_or_default();
        }
    };
    framing.write_all(std::slice::from_ref(&frame)).into_bytes()
}

#[cfg(test)]
#[path = "respond_tests.rs"]
mod tests;
