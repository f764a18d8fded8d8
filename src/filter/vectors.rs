//! Hybrid ranking's two host dependencies: the vector cache over proxy-wasm shared data (one
//! store for every worker of the VM) and the embeddings call through an Envoy cluster.

use super::host::{self, HostError, HostResult};
use crate::config::Embeddings;
use crate::embeddings::{BackfillQueue, SharedBytes, request_body};
use crate::rank::Catalog;
use std::rc::Rc;
use std::time::Duration;

/// proxy-wasm shared data. Any host error reads as a miss or a refused write: the vector is
/// then fetched again, and no request fails for it.
pub struct SharedData;

impl SharedBytes for SharedData {
    fn get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
        host::shared_data(key)
    }

    fn set(&self, key: &str, value: &[u8], cas: Option<u32>) -> bool {
        match host::set_shared_data(key, value, cas) {
            Ok(()) => true,
            Err(HostError::CAS_MISMATCH) => false,
            Err(status) => {
                log::debug!("set_shared_data failed: {status:?}");
                false
            }
        }
    }
}

/// How long a background call may take to embed a new catalog's tools: no request waits for
/// it, so it may take as long as a slow model needs.
pub const BACKGROUND_TIMEOUT: Duration = Duration::from_secs(60);

/// Sends an embeddings call for `inputs` under the embeddings settings `e` (bounded by their
/// `timeout_ms`); `None` when the call cannot be made.
pub fn send(e: &Embeddings, inputs: &[&str]) -> Option<u32> {
    match dispatch(e, inputs, Duration::from_millis(e.timeout_ms as u64)) {
        Ok(token) => Some(token),
        Err(status) => {
            log::debug!("embeddings call to {} failed: {status:?}", e.cluster);
            None
        }
    }
}

/// Sends one embeddings request; the answer comes to the calling context's
/// `on_http_call_response`, or Envoy answers 504 after `timeout`.
pub fn dispatch(e: &Embeddings, inputs: &[&str], timeout: Duration) -> HostResult<u32> {
    let body = request_body(&e.model, inputs, e.dimensions);
    let mut headers: Vec<(&str, &str)> = vec![
        (":method", "POST"),
        (":path", &e.path),
        (":authority", e.authority()),
        ("content-type", "application/json"),
    ];
    headers.extend(e.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    host::dispatch(&e.cluster, headers, body.as_bytes(), timeout)
}

/// A new catalog's tools whose vectors a request could not get within `timeout_ms`: the root
/// context fetches them, on its ticks, with [`BACKGROUND_TIMEOUT`], and the answers come to the
/// root, which outlives any request. What is sent when is [`BackfillQueue`]'s (one call in
/// flight per catalog, `embeddings.max_background_calls` in all); this adds the host: the
/// calls and the tick.
#[derive(Default)]
pub struct Backfill(BackfillQueue);

impl Backfill {
    /// Queues `entries` of `catalog` (see [`BackfillQueue::queue`]) and asks for a tick.
    pub fn queue(&mut self, catalog: &Rc<Catalog>, entries: Vec<usize>) {
        if self.0.queue(catalog, entries) {
            tick(Duration::from_millis(10));
        }
    }

    /// Sends what the caps allow (on the root context's tick), `max_batch` tools per call.
    /// Returns how many calls and inputs. The root's tick stops unless something else needs
    /// it: the next one comes when a call answers and frees a slot.
    pub fn send(&mut self, e: &Embeddings) -> (usize, usize) {
        self.0.send(e.max_background_calls, e.max_batch, |texts| {
            dispatch(e, texts, BACKGROUND_TIMEOUT)
                .inspect_err(|status| {
                    log::debug!("background embeddings call failed: {status:?}");
                })
                .ok()
        })
    }

    /// The catalog and tool entries of the call `token`, if it is one of ours.
    pub fn pending(&self, token: u32) -> Option<(Rc<Catalog>, Vec<usize>)> {
        self.0.pending(token)
    }

    /// The call `token` answered (`ok`: its vectors were stored); asks for a tick if more
    /// tools wait.
    pub fn answered(&mut self, token: u32, ok: bool) {
        if self.0.answered(token, ok) {
            tick(Duration::from_millis(10));
        }
    }
}

/// Sets the root context's tick period (Envoy applies a period set from a request's context
/// to its root context); zero stops it.
fn tick(period: Duration) {
    if let Err(status) = host::set_tick_period(period) {
        log::warn!("cannot set the tick period for background embeddings calls: {status:?}");
    }
}
