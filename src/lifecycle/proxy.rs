//! What the core asks of the proxy it runs in: Envoy's ABI reduced to bytes in and out, each
//! call `Ok` or the host's status, never a panic. The adapter (`filter/`, wasm only) implements
//! [`Proxy`] once over proxy-wasm; the hosts of the core's machines are built on it here
//! (`hosts.rs`), so every product decision, and the order of the host calls it makes, is
//! in the core and driven natively by tests with a recording proxy.

use crate::embeddings::SharedBytes;
use crate::mcp::exchange::CallAnswer;
use crate::pairs::HeaderMap;
use crate::stats::{Counts, Fixed, Stat};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A host status other than `Ok`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Status(pub u32);

impl Status {
    /// `set_shared_data` lost a compare-and-swap race.
    pub const CAS_MISMATCH: Status = Status(8);
}

/// The header maps the core reads and writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Headers {
    Request,
    Response,
    /// The answer of the call whose `on_http_call_response` runs.
    CallResponse,
}

/// The buffers the core reads and writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Buffer {
    RequestBody,
    ResponseBody,
    CallResponseBody,
}

/// Envoy, as the core uses it. `&self` throughout: the host's state is Envoy's.
pub trait Proxy {
    /// The shared data of every worker of the VM.
    type Store: SharedBytes;
    fn store(&self) -> &Self::Store;
    /// The value of header `name`; `None` when absent or when the map cannot be read.
    fn header(&self, map: Headers, name: &str) -> Option<Vec<u8>>;
    /// The whole map, in order (empty when it cannot be read).
    fn headers(&self, map: Headers) -> HeaderMap;
    fn set_header(&self, map: Headers, name: &str, value: &[u8]) -> Result<(), Status>;
    fn add_header(&self, map: Headers, name: &str, value: &[u8]) -> Result<(), Status>;
    fn remove_header(&self, map: Headers, name: &str) -> Result<(), Status>;
    /// Up to `len` bytes of `buffer` from `start`.
    fn buffer(&self, buffer: Buffer, start: usize, len: usize) -> Result<Vec<u8>, Status>;
    /// Replaces `len` bytes of `buffer` from `start` with `bytes`.
    fn set_buffer(
        &self,
        buffer: Buffer,
        start: usize,
        len: usize,
        bytes: &[u8],
    ) -> Result<(), Status>;
    /// A property of the stream (`["xds", "cluster_name"]`, `["metadata"]`).
    fn property(&self, path: &[&str]) -> Option<Vec<u8>>;
    /// Records filter state for the access log: `%FILTER_STATE(wasm.<name>:PLAIN)%`.
    fn set_property(&self, name: &str, value: &[u8]) -> Result<(), Status>;
    /// Sends an HTTP call to `cluster`; its token (the answer comes to this stream's context,
    /// or the root's when sent from there).
    fn dispatch(
        &self,
        cluster: &str,
        headers: Vec<(&str, &str)>,
        body: &[u8],
        timeout: Duration,
    ) -> Result<u32, Status>;
    /// Answers the request locally.
    fn send_response(
        &self,
        status: u16,
        headers: &[(&str, &[u8])],
        body: &[u8],
    ) -> Result<(), Status>;
    /// Envoy's clock; `None` when it cannot be read.
    fn now(&self) -> Option<SystemTime>;
    /// Calls the root context's tick every `period` (zero stops it).
    fn set_tick_period(&self, period: Duration) -> Result<(), Status>;
    /// Adds `n` to a counter, records `n` in a histogram, or sets a gauge to `n`, by the
    /// stat's kind.
    fn count(&self, stat: Stat, n: u64);
    /// Defines a counter whose name only the configuration knows (an access rule's); its id.
    fn define_counter(&self, name: &str) -> Result<u32, Status>;
    /// Adds `n` to the counter `id` (from [`Proxy::define_counter`]).
    fn increment(&self, id: u32, n: u64);

    /// What an event counts.
    fn counts(&self, counts: Counts) {
        for (stat, n) in counts.into_iter().flatten() {
            self.count(stat, n);
        }
    }

    /// Records in the histogram `stat` the µs since `started`; returns the time now (the next
    /// phase's start, without another clock read).
    fn phase(&self, stat: Fixed, started: Option<SystemTime>) -> Option<SystemTime> {
        let end = self.now();
        if let (Some(start), Some(end)) = (started, end) {
            let micros = end
                .duration_since(start)
                .unwrap_or(Duration::ZERO)
                .as_micros();
            self.count(stat.into(), u64::try_from(micros).unwrap_or(u64::MAX));
        }
        end
    }

    /// Since the epoch (zero if the clock cannot be read: the core's clocks only age entries,
    /// and a stopped clock ages nothing).
    fn since_epoch(&self) -> Duration {
        self.now()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .unwrap_or(Duration::ZERO)
    }

    fn now_seconds(&self) -> u64 {
        self.since_epoch().as_secs()
    }

    fn now_millis(&self) -> u64 {
        u64::try_from(self.since_epoch().as_millis()).unwrap_or(u64::MAX)
    }

    fn now_micros(&self) -> Option<u64> {
        let since = self.now()?.duration_since(UNIX_EPOCH).ok()?;
        u64::try_from(since.as_micros()).ok()
    }

    /// The value of header `name` as text (lossy).
    fn header_text(&self, map: Headers, name: &str) -> Option<String> {
        self.header(map, name)
            .map(|v| String::from_utf8_lossy(&v).into_owned())
    }

    /// The answer of the call whose `on_http_call_response` runs: `num_headers` and `size` as
    /// Envoy gives them. With no response (reset, or cut off by its timeout) there is no header
    /// map, and it is not asked (the SDK's getter panics on the host's answer).
    fn call_answer(&self, num_headers: usize, size: usize) -> CallAnswer {
        let header = |name| {
            (num_headers > 0)
                .then(|| self.header(Headers::CallResponse, name))
                .flatten()
                .and_then(|v| String::from_utf8(v).ok())
        };
        CallAnswer {
            status: header(":status").and_then(|s| s.parse().ok()),
            content_type: header("content-type").unwrap_or_default(),
            body: self
                .buffer(Buffer::CallResponseBody, 0, size)
                .unwrap_or_default(),
        }
    }

    /// The upstream cluster of this request: the one the router picked, or, before the router
    /// ran (held by the buffer filter), the route's.
    fn upstream_cluster(&self) -> Option<String> {
        let property = |path: &[&str]| {
            self.property(path)
                .and_then(|c| String::from_utf8(c).ok())
                .filter(|c| !c.is_empty())
        };
        property(&["xds", "cluster_name"]).or_else(|| property(&["cluster_name"]))
    }

    /// Records `value` as filter state `name`, logged at debug level if Envoy refuses.
    fn record(&self, name: &str, value: &str) {
        if let Err(status) = self.set_property(name, value.as_bytes()) {
            log::debug!("cannot record {name} for the access log: {status:?}");
        }
    }
}
