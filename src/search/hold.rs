//! Whether Envoy lets the filter hold request headers, learnt from traffic.
//!
//! With `search.hold_headers`, search mode pauses the request headers until the body is read
//! (so a `native_search` rule can add `anthropic-beta`, and the follow-ups can copy the request
//! as the router rewrote it) and the response headers until the turn is decided. That needs
//! Envoy's `allow_on_headers_stop_iteration: true`; without it a paused headers callback also
//! stops the body callbacks and the request hangs. The filter cannot read that setting, so it
//! watches: a held request whose body arrives proves holding works (for good, on this worker); a
//! held request whose body has not arrived after [`GRACE_MS`] is resumed by the root context's
//! tick, and holding is off on this worker from then on (said once at warn, counted). Response
//! headers are held only once holding is proven, so a response never hangs.

/// How long a held request may wait for its first body callback before it is resumed.
pub const GRACE_MS: u64 = 1_000;

/// How often the root context looks for stalled requests while any is held.
pub const TICK_MS: u64 = 200;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holding {
    /// No held request has shown yet whether Envoy delivers its body.
    Unknown,
    /// A held request got its body: `allow_on_headers_stop_iteration` is set.
    Works,
    /// A held request got no body within [`GRACE_MS`]: the setting is missing.
    Stalls,
}

/// One worker's held requests and what they showed.
#[derive(Debug)]
pub struct Watchdog {
    holding: Holding,
    /// Held requests that have not shown yet: (stream context id, held since, ms).
    waiting: Vec<(u32, u64)>,
}

impl Default for Watchdog {
    fn default() -> Self {
        Watchdog {
            holding: Holding::Unknown,
            waiting: Vec::new(),
        }
    }
}

impl Watchdog {
    pub fn holding(&self) -> Holding {
        self.holding
    }

    /// Whether a request should hold its headers now.
    pub fn may_hold(&self) -> bool {
        self.holding != Holding::Stalls
    }

    /// Request `context` holds its headers since `now_ms`. Returns whether it must be watched
    /// (the root context's tick must run).
    pub fn held(&mut self, context: u32, now_ms: u64) -> bool {
        if self.holding != Holding::Unknown {
            return false;
        }
        self.waiting.push((context, now_ms));
        true
    }

    /// Request `context` got its first body callback. Returns whether its headers are still
    /// held (not resumed by [`Watchdog::stalled`]).
    pub fn body_arrived(&mut self, context: u32) -> bool {
        let before = self.waiting.len();
        self.waiting.retain(|(c, _)| *c != context);
        if self.waiting.len() < before {
            self.holding = Holding::Works;
            // The others will get their bodies too: no need to watch them.
            self.waiting.clear();
            return true;
        }
        self.holding == Holding::Works
    }

    /// Request `context` ended: stop watching it.
    pub fn ended(&mut self, context: u32) {
        self.waiting.retain(|(c, _)| *c != context);
    }

    /// The held requests that waited longer than [`GRACE_MS`] for their body, to be resumed.
    /// Any such request means holding stalls on this worker.
    pub fn stalled(&mut self, now_ms: u64) -> Vec<u32> {
        let (late, waiting): (Vec<_>, Vec<_>) = self
            .waiting
            .iter()
            .partition(|(_, since)| now_ms.saturating_sub(*since) >= GRACE_MS);
        self.waiting = waiting;
        if !late.is_empty() {
            self.holding = Holding::Stalls;
            // Resume every held request: none of them will get its body otherwise.
            let mut all: Vec<u32> = late.iter().map(|(c, _)| *c).collect();
            all.extend(self.waiting.drain(..).map(|(c, _)| c));
            return all;
        }
        Vec::new()
    }

    /// Whether the root context's tick is still needed.
    pub fn watching(&self) -> bool {
        !self.waiting.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_proves_holding_works() {
        let mut dog = Watchdog::default();
        assert!(dog.may_hold());
        assert!(dog.held(7, 0));
        assert!(dog.held(8, 10));
        assert!(dog.body_arrived(7));
        assert_eq!(dog.holding(), Holding::Works);
        assert!(!dog.watching());
        // From now on nothing is watched, and every held request keeps its headers held.
        assert!(!dog.held(9, 20));
        assert!(dog.body_arrived(8));
        assert!(dog.stalled(10_000).is_empty());
    }

    #[test]
    fn a_stall_resumes_every_held_request_and_stops_holding() {
        let mut dog = Watchdog::default();
        dog.held(1, 0);
        dog.held(2, 900);
        assert!(dog.stalled(999).is_empty(), "within the grace period");
        assert_eq!(dog.stalled(GRACE_MS), [1, 2]);
        assert_eq!(dog.holding(), Holding::Stalls);
        assert!(!dog.may_hold());
        assert!(!dog.watching());
        // A resumed request's body arrives later: its headers are no longer held.
        assert!(!dog.body_arrived(1));
    }

    #[test]
    fn ended_requests_are_not_resumed() {
        let mut dog = Watchdog::default();
        dog.held(1, 0);
        dog.ended(1);
        assert!(dog.stalled(GRACE_MS * 5).is_empty());
        assert_eq!(dog.holding(), Holding::Unknown);
    }
}
