//! Search mode's response side in Envoy (and filter mode's, for the access rules' guard and
//! `unknown_tools.answer`): [`crate::search::respond`] decides, this module reads what Envoy
//! hands over and carries out what the machine asks ([`EnvoyHost`]).
//!
//! The follow-ups go to the cluster the router chose for the request, with the request's headers
//! as the router sent them when they can still be read (the request headers were held: host and
//! path rewrites, headers the route adds), else as the filter saw them.

use super::host::{self, Buffer, Headers};
use super::shared::Shared;
use super::{callout, vectors};
use crate::lifecycle::{Remembering, SearchLoop};
use crate::pairs::PER_CONNECTION;
use crate::pipeline::Engine;
use crate::search::respond::{Answer, Event, Flow, Head, HeadStep, Host, Hybrid, Responder};
use proxy_wasm::types::Action;
use std::cell::Ref;
use std::time::Duration;

/// A request's response side, from its body phase to its last response byte: search mode's
/// search, filter mode's answers to made-up calls (`unknown_tools.answer`), or the access
/// rules' guard.
pub struct Search {
    responder: Responder,
    /// The search's outcome was recorded for the access log.
    recorded: bool,
    /// The client's request headers as the filter saw them, for the follow-ups (credentials,
    /// API version, …), when the routed ones cannot be read.
    headers: Vec<(String, String)>,
    /// Whose Responses id aliases this request makes ([`crate::search::alias::owner`]).
    owner: u64,
    /// `search.memory`: where the tools this loop finds are remembered once it ends.
    memory: Option<Remembering>,
}

impl Search {
    pub fn new(responder: Responder, headers: Vec<(String, String)>, owner: u64) -> Search {
        Search {
            responder,
            recorded: false,
            headers: forwarded(headers),
            owner,
            memory: None,
        }
    }

    /// Search mode's loop, as the core planned it ([`crate::lifecycle::Request::plan_search`]).
    pub fn from_loop(planned: Box<SearchLoop>) -> Search {
        let SearchLoop {
            responder,
            headers,
            owner,
            memory,
        } = *planned;
        Search {
            memory,
            ..Search::new(responder, headers, owner)
        }
    }

    pub fn token(&self) -> Option<u32> {
        self.responder.token()
    }

    /// Search mode's (and not filter mode's follow-ups for made-up calls, or a guard's).
    fn searches(&self) -> bool {
        self.responder.session().searches()
    }

    pub fn on_response_headers(&mut self, shared: &Shared, end_of_stream: bool) -> Action {
        let header = |name: &str| {
            host::header(Headers::Response, name).map(|v| String::from_utf8_lossy(&v).into_owned())
        };
        let head = Head {
            status: header(":status"),
            content_type: header("content-type"),
            content_encoding: header("content-encoding"),
            end_of_stream,
        };
        let Some(envoy) = EnvoyHost::new(shared, &self.headers, self.owner, self.searches()) else {
            return Action::Continue;
        };
        let HeadStep {
            drop_content_length,
            drop_content_encoding,
            flow,
        } = self.responder.on_headers(&envoy, &head);
        if drop_content_encoding {
            if let Err(status) = host::remove_header(Headers::Response, "content-encoding") {
                log::warn!("cannot remove the response content-encoding: {status:?}");
            }
        }
        if drop_content_length {
            if let Err(status) = host::remove_header(Headers::Response, "content-length") {
                // The body cannot be replaced safely: let this response through as it is.
                log::warn!("cannot remove the response content-length: {status:?}");
                return Action::Continue;
            }
        }
        action(flow)
    }

    pub fn on_response_body(&mut self, shared: &Shared, body_size: usize, end: bool) -> Action {
        let flow = match EnvoyHost::new(shared, &self.headers, self.owner, self.searches()) {
            Some(envoy) => self.responder.on_body(&envoy, body_size, end),
            None => Flow::Continue,
        };
        self.record();
        action(flow)
    }

    pub fn on_response_trailers(&mut self, shared: &Shared) -> Action {
        let flow = match EnvoyHost::new(shared, &self.headers, self.owner, self.searches()) {
            Some(envoy) => self.responder.on_trailers(&envoy),
            None => Flow::Continue,
        };
        self.record();
        action(flow)
    }

    /// Once decided, the search's rounds, found tools and usage, for the access log:
    /// `%FILTER_STATE(wasm.toolsift_search:PLAIN)%`, as `x-toolsift-search` says them.
    fn record(&mut self) {
        if self.recorded || !self.responder.finished() || !self.responder.session().reports() {
            return;
        }
        self.recorded = true;
        // The loop ended (before the client has the last byte: its next turn finds it).
        if let Some(r) = self.memory.take() {
            let found = self.responder.session().found();
            let now = host::now_seconds();
            r.memory
                .remember(&vectors::SharedData, &r.key, found, &r.evicted, now);
        }
        let value = self.responder.session().header_value();
        if let Err(status) = host::set_property("toolsift_search", value.as_bytes()) {
            log::debug!("cannot record the search for the access log: {status:?}");
        }
    }

    /// A call of this request's answered. Returns whether the response may resume.
    pub fn on_call(
        &mut self,
        shared: &Shared,
        token: u32,
        num_headers: usize,
        size: usize,
    ) -> bool {
        let answer = Answer {
            status: callout::call_status(num_headers).and_then(|s| s.parse().ok()),
            content_type: callout::content_type(num_headers),
            body: host::buffer(Buffer::CallResponseBody, 0, size).unwrap_or_default(),
        };
        let resume = match EnvoyHost::new(shared, &self.headers, self.owner, self.searches()) {
            Some(envoy) => self.responder.on_call(&envoy, token, answer),
            None => true,
        };
        self.record();
        resume
    }
}

fn action(flow: Flow) -> Action {
    match flow {
        Flow::Continue => Action::Continue,
        Flow::Pause => Action::Pause,
    }
}

/// The machine's host: Envoy, for the callback at hand.
struct EnvoyHost<'a> {
    shared: &'a Shared,
    engine: Ref<'a, Engine>,
    headers: &'a [(String, String)],
    owner: u64,
    /// Search mode: its stats; else filter mode's (`toolsift.unknown_tools.*`).
    searches: bool,
}

impl<'a> EnvoyHost<'a> {
    fn new(
        shared: &'a Shared,
        headers: &'a [(String, String)],
        owner: u64,
        searches: bool,
    ) -> Option<EnvoyHost<'a>> {
        let engine = shared.engine.try_borrow().ok()?;
        Some(EnvoyHost {
            shared,
            engine,
            headers,
            owner,
            searches,
        })
    }
}

impl Host for EnvoyHost<'_> {
    type Store = vectors::SharedData;

    fn body(&self, start: usize, len: usize) -> Vec<u8> {
        host::buffer(Buffer::ResponseBody, start, len).unwrap_or_default()
    }

    fn replace_body(&self, len: usize, bytes: &[u8]) {
        if let Err(status) = host::set_buffer(Buffer::ResponseBody, 0, len, bytes) {
            log::warn!("cannot set the response body: {status:?}");
        }
    }

    fn set_header(&self, name: &str, value: &str) {
        if let Err(status) = host::set_header(Headers::Response, name, value.as_bytes()) {
            log::debug!("cannot set {name}: {status:?}");
        }
    }

    fn send_follow_up(&self, body: &str) -> Option<u32> {
        // The upstream cluster the router picked for this request.
        let Some(cluster) = callout::upstream_cluster() else {
            log::warn!("search follow-up: the request's upstream cluster is unknown");
            return None;
        };
        // The request as the router sent it upstream: the router edits the request's header
        // map in place, and a map that was held stays readable. Otherwise (not held, or a value
        // that is not text) the headers the filter saw.
        let routed: Option<Vec<(String, String)>> = Some(host::headers(Headers::Request))
            .filter(|map| map.get(":path").is_some())
            .and_then(|map| map.texts())
            .map(forwarded);
        let headers: Vec<(&str, &str)> = routed
            .as_deref()
            .unwrap_or(self.headers)
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let timeout = Duration::from_millis(self.engine.config.search.timeout_ms as u64);
        match host::dispatch(&cluster, headers, body.as_bytes(), timeout) {
            Ok(token) => Some(token),
            Err(status) => {
                log::warn!("search follow-up to {cluster} failed: {status:?}");
                None
            }
        }
    }

    fn send_embeddings(&self, inputs: &[&str]) -> Option<u32> {
        vectors::send(&self.engine.config, inputs)
    }

    fn count(&self, event: Event) {
        self.shared.metrics.event(event.counts(self.searches));
    }

    fn now_micros(&self) -> Option<u64> {
        host::now_micros()
    }

    fn hybrid(&self) -> Option<Hybrid<'_, Self::Store>> {
        let (source, embeddings) = self.shared.hybrid(&self.engine.config)?;
        Some(Hybrid {
            source,
            embeddings,
            config: &self.engine.config,
        })
    }

    fn remember_alias(&self, shown: &str, real: &str) {
        let store = vectors::SharedData;
        crate::search::alias::remember(&store, shown, real, self.owner, host::now_seconds());
    }
}

/// The headers of `headers` a follow-up carries.
fn forwarded(headers: Vec<(String, String)>) -> Vec<(String, String)> {
    headers
        .into_iter()
        .filter(|(name, _)| !PER_CONNECTION.contains(&name.to_ascii_lowercase().as_str()))
        .collect()
}
