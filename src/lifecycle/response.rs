//! A request's response side, from its body phase to its last response byte, free of
//! proxy-wasm: search mode's loop, filter mode's answers to made-up calls, or the access rules'
//! guard. [`Responder`] decides each chunk and each call's answer; here is what is left of the
//! lifecycle around it: which of the client's headers the follow-ups carry, and, once the loop
//! has ended, the tools it found remembered for the session and the loop recorded for the
//! access log. [`super::Stream`] hands it Envoy's callbacks; `hosts.rs` carries out its asks.

use super::search::{Remembering, SearchLoop};
use crate::pairs::PER_CONNECTION;
use crate::search::respond::{Answer, Flow, Head, HeadStep, Host, Responder};

/// A request's response side.
pub struct Response {
    responder: Responder,
    /// The loop was recorded for the access log.
    recorded: bool,
    /// `search.memory`: where the tools this loop finds are remembered once it ends.
    memory: Option<Remembering>,
}

/// What the follow-ups carry of the client's request: fixed when the response side starts.
pub struct FollowUps {
    /// The client's request headers as the filter saw them, less those of one connection or
    /// one body: for the follow-ups when the routed ones cannot be read.
    headers: Vec<(String, String)>,
    /// Whose Responses id aliases this request makes ([`crate::search::alias::owner`]).
    pub owner: u64,
}

impl FollowUps {
    /// The headers of a follow-up: the request as the router sent it upstream (`routed`: the
    /// router edits the request's header map in place, and a map that was held stays
    /// readable: host and path rewrites, headers the route adds), else as the filter saw it.
    pub fn headers(&self, routed: Option<Vec<(String, String)>>) -> Vec<(String, String)> {
        match routed {
            Some(routed) => forwarded(routed),
            None => self.headers.clone(),
        }
    }
}

/// The headers of `headers` a follow-up carries.
fn forwarded(headers: Vec<(String, String)>) -> Vec<(String, String)> {
    headers
        .into_iter()
        .filter(|(name, _)| !PER_CONNECTION.contains(&name.to_ascii_lowercase().as_str()))
        .collect()
}

impl Response {
    /// The response side of `responder`, whose follow-ups carry `headers` (the client's, as
    /// the filter saw them), its aliases owned by `owner`.
    pub fn new(
        responder: Responder,
        headers: Vec<(String, String)>,
        owner: u64,
    ) -> (Response, FollowUps) {
        let response = Response {
            responder,
            recorded: false,
            memory: None,
        };
        let follow_ups = FollowUps {
            headers: forwarded(headers),
            owner,
        };
        (response, follow_ups)
    }

    /// Search mode's loop (or filter mode's for made-up calls), as the core planned it.
    pub fn from_loop(planned: SearchLoop) -> (Response, FollowUps) {
        let SearchLoop {
            responder,
            headers,
            owner,
            memory,
        } = planned;
        let (response, follow_ups) = Response::new(responder, headers, owner);
        let response = Response { memory, ..response };
        (response, follow_ups)
    }

    /// The call this response waits for.
    pub fn token(&self) -> Option<u32> {
        self.responder.token()
    }

    /// Search mode's (its stats), not filter mode's follow-ups for made-up calls or a guard's
    /// (`toolsift.unknown_tools.*`).
    pub fn searches(&self) -> bool {
        self.responder.session().searches()
    }

    /// The answer's headers.
    pub fn on_headers<H: Host>(&mut self, host: &H, head: &Head) -> HeadStep {
        self.responder.on_headers(host, head)
    }

    /// A response body callback (`host`: `None` when it could not be had: the answer goes on).
    pub fn on_body<H: Host>(&mut self, host: Option<&H>, body_size: usize, end: bool) -> Flow {
        let Some(host) = host else {
            return Flow::Continue;
        };
        let flow = self.responder.on_body(host, body_size, end);
        self.record(host);
        flow
    }

    /// The response trailers.
    pub fn on_trailers<H: Host>(&mut self, host: Option<&H>) -> Flow {
        let Some(host) = host else {
            return Flow::Continue;
        };
        let flow = self.responder.on_trailers(host);
        self.record(host);
        flow
    }

    /// A call of this response's answered. Returns whether the response may resume.
    pub fn on_call<H: Host>(&mut self, host: Option<&H>, token: u32, answer: Answer) -> bool {
        let Some(host) = host else {
            return true;
        };
        let resume = self.responder.on_call(host, token, answer);
        self.record(host);
        resume
    }

    /// Once the loop is decided (before the client has the last byte: its next turn finds
    /// them), the tools it found remembered for the session, and the search's rounds, found
    /// tools and usage recorded for the access log as `x-toolsift-search` says them. Once.
    fn record<H: Host>(&mut self, host: &H) {
        let session = self.responder.session();
        if self.recorded || !self.responder.finished() || !session.reports() {
            return;
        }
        self.recorded = true;
        if let Some(r) = self.memory.take() {
            let now = host.now_seconds();
            r.memory
                .remember(host.store(), &r.key, session.found(), &r.evicted, now);
        }
        host.record_search(&session.header_value());
    }
}
