//! Hybrid ranking's two host dependencies: the vector cache over proxy-wasm shared data (one
//! store for every worker of the VM) and the embeddings call through an Envoy cluster.

use super::host::{self, HostError, HostResult};
use crate::config::Embeddings;
use crate::embeddings::{SharedBytes, request_body, tool_texts};
use crate::rank::Catalog;
use std::collections::HashMap;
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

/// Sends one embeddings request; the answer comes to the calling context's
/// `on_http_call_response`, or Envoy answers 504 after `timeout`.
/// Sends an embeddings call for `inputs` under `config`'s embeddings settings (bounded by their
/// `timeout_ms`); `None` when hybrid ranking is off or the call cannot be made.
pub fn send(config: &crate::config::Config, inputs: &[&str]) -> Option<u32> {
    let e = config.embeddings.as_ref()?;
    match dispatch(e, inputs, Duration::from_millis(e.timeout_ms as u64)) {
        Ok(token) => Some(token),
        Err(status) => {
            log::debug!("embeddings call to {} failed: {status:?}", e.cluster);
            None
        }
    }
}

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
/// context fetches them, on its next tick, with [`BACKGROUND_TIMEOUT`], and the answer comes
/// to the root, which outlives any request.
#[derive(Default)]
pub struct Backfill {
    queued: Vec<(Rc<Catalog>, Vec<usize>)>,
    in_flight: HashMap<u32, (Rc<Catalog>, Vec<usize>)>,
}

impl Backfill {
    /// Queues `entries` of `catalog` unless its tools are already being fetched.
    pub fn queue(&mut self, catalog: &Rc<Catalog>, entries: Vec<usize>) {
        if catalog.fetching() || entries.is_empty() {
            return;
        }
        catalog.set_fetching(true);
        self.queued.push((Rc::clone(catalog), entries));
        // Envoy applies a tick period set from a request's context to its root context.
        if let Err(status) = host::set_tick_period(Duration::from_millis(10)) {
            log::warn!("cannot schedule the background embeddings call: {status:?}");
        }
    }

    /// Sends the queued calls (on the root context's tick), `max_batch` tools per call, all at
    /// once. Returns how many calls and inputs.
    pub fn send(&mut self, e: &Embeddings) -> (usize, usize) {
        let (mut calls, mut inputs) = (0, 0);
        for (catalog, entries) in std::mem::take(&mut self.queued) {
            for chunk in entries.chunks(e.max_batch.max(1)) {
                let texts = tool_texts(&catalog, chunk);
                let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                match dispatch(e, &refs, BACKGROUND_TIMEOUT) {
                    Ok(token) => {
                        calls += 1;
                        inputs += refs.len();
                        self.in_flight
                            .insert(token, (Rc::clone(&catalog), chunk.to_vec()));
                    }
                    Err(status) => log::debug!("background embeddings call failed: {status:?}"),
                }
            }
            self.settle(&catalog);
        }
        (calls, inputs)
    }

    /// Lets requests ask for `catalog`'s tools again once none of its calls is in flight.
    fn settle(&self, catalog: &Rc<Catalog>) {
        if !self.in_flight.values().any(|(c, _)| Rc::ptr_eq(c, catalog)) {
            catalog.set_fetching(false);
        }
    }

    /// The call `token` answered (or failed): its catalog and tool entries.
    pub fn answered(&mut self, token: u32) -> Option<(Rc<Catalog>, Vec<usize>)> {
        let (catalog, entries) = self.in_flight.remove(&token)?;
        self.settle(&catalog);
        Some((catalog, entries))
    }
}
