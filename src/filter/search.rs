//! Search mode's response side in Envoy (and filter mode's, for the access rules' guard and
//! `unknown_tools.answer`): [`crate::lifecycle::Response`] and [`crate::search::respond`]
//! decide, this module reads what Envoy hands over and carries out what they ask
//! ([`EnvoyHost`]). The follow-ups go to the cluster the router chose for the request.

use super::host::{self, Buffer, Headers};
use super::shared::Shared;
use super::{callout, vectors};
use crate::lifecycle::{FollowUps, Response, SearchLoop};
use crate::pipeline::Engine;
use crate::search::respond::{Answer, Event, Flow, Head, HeadStep, Host, Hybrid, Responder};
use proxy_wasm::types::Action;
use std::cell::Ref;
use std::time::Duration;

/// A request's response side, from its body phase to its last response byte
/// ([`Response`]: search mode's search, filter mode's answers to made-up calls
/// (`unknown_tools.answer`), or the access rules' guard).
pub struct Search {
    response: Response,
    follow_ups: FollowUps,
}

impl Search {
    pub fn new(responder: Responder, headers: Vec<(String, String)>, owner: u64) -> Search {
        let (response, follow_ups) = Response::new(responder, headers, owner);
        Search {
            response,
            follow_ups,
        }
    }

    /// Search mode's loop, as the core planned it ([`crate::lifecycle::Request::plan_search`]).
    pub fn from_loop(planned: Box<SearchLoop>) -> Search {
        let (response, follow_ups) = Response::from_loop(*planned);
        Search {
            response,
            follow_ups,
        }
    }

    pub fn token(&self) -> Option<u32> {
        self.response.token()
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
        let Some(envoy) = EnvoyHost::new(shared, &self.follow_ups, self.response.searches()) else {
            return Action::Continue;
        };
        let HeadStep {
            drop_content_length,
            drop_content_encoding,
            flow,
        } = self.response.on_headers(&envoy, &head);
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
        let envoy = EnvoyHost::new(shared, &self.follow_ups, self.response.searches());
        action(self.response.on_body(envoy.as_ref(), body_size, end))
    }

    pub fn on_response_trailers(&mut self, shared: &Shared) -> Action {
        let envoy = EnvoyHost::new(shared, &self.follow_ups, self.response.searches());
        action(self.response.on_trailers(envoy.as_ref()))
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
        let envoy = EnvoyHost::new(shared, &self.follow_ups, self.response.searches());
        self.response.on_call(envoy.as_ref(), token, answer)
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
    follow_ups: &'a FollowUps,
    /// Search mode: its stats; else filter mode's (`toolsift.unknown_tools.*`).
    searches: bool,
}

impl<'a> EnvoyHost<'a> {
    fn new(shared: &'a Shared, follow_ups: &'a FollowUps, searches: bool) -> Option<EnvoyHost<'a>> {
        let engine = shared.engine.try_borrow().ok()?;
        Some(EnvoyHost {
            shared,
            engine,
            follow_ups,
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
        let routed = Some(host::headers(Headers::Request))
            .filter(|map| map.get(":path").is_some())
            .and_then(|map| map.texts());
        let headers = self.follow_ups.headers(routed);
        let headers: Vec<(&str, &str)> = headers
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
        let e = self.engine.config.embeddings.as_ref()?;
        vectors::send(e, inputs)
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
        let owner = self.follow_ups.owner;
        crate::search::alias::remember(&store, shown, real, owner, host::now_seconds());
    }

    fn store(&self) -> &Self::Store {
        &vectors::SharedData
    }

    fn now_seconds(&self) -> u64 {
        host::now_seconds()
    }

    fn record_search(&self, value: &str) {
        if let Err(status) = host::set_property("toolsift_search", value.as_bytes()) {
            log::debug!("cannot record the search for the access log: {status:?}");
        }
    }
}
