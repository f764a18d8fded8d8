//! The core's [`Proxy`], over Envoy's ABI ([`host`]): each call passed on as it is, the stats
//! by their Envoy ids ([`Metrics`]), and the shared data of every worker of the VM; and the
//! worker the root context builds, which every request of the worker is handed.

use super::host::{self, HostError};
use super::metrics::Metrics;
use crate::embeddings::SharedBytes;
use crate::lifecycle::proxy::{self, Proxy, Status};
use crate::pairs::HeaderMap;
use crate::shared_data::Namespaced;
use crate::stats::Stat;
use std::time::{Duration, SystemTime};

/// The shared data as one plugin sees it: under its `stat_prefix`, if it has one.
pub type Store = Namespaced<SharedData>;

/// What every request on this worker shares: the core's part, the stats' Envoy ids, the
/// plugin's view of the shared data, and what its log lines are headed with.
pub struct Worker {
    pub core: crate::lifecycle::Shared<Store>,
    pub metrics: Metrics,
    pub store: Store,
    pub plugin: host::Plugin,
}

impl Worker {
    /// Envoy for a callback of this worker's plugin, whose log lines then name the plugin
    /// (several plugins may share the VM, and its logger).
    pub fn envoy(&self) -> Envoy<'_> {
        host::enter(&self.plugin);
        Envoy {
            metrics: &self.metrics,
            store: &self.store,
        }
    }
}

/// Envoy, for the callback at hand (the stream's or the root's: Envoy knows which).
pub struct Envoy<'a> {
    pub metrics: &'a Metrics,
    pub store: &'a Store,
}

/// proxy-wasm shared data. Any host error reads as a miss or a refused write: a vector is then
/// fetched again, and no request fails for it.
#[derive(Clone, Copy)]
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

fn map(map: proxy::Headers) -> host::Headers {
    match map {
        proxy::Headers::Request => host::Headers::Request,
        proxy::Headers::Response => host::Headers::Response,
        proxy::Headers::CallResponse => host::Headers::CallResponse,
    }
}

fn buffer(buffer: proxy::Buffer) -> host::Buffer {
    match buffer {
        proxy::Buffer::RequestBody => host::Buffer::RequestBody,
        proxy::Buffer::ResponseBody => host::Buffer::ResponseBody,
        proxy::Buffer::CallResponseBody => host::Buffer::CallResponseBody,
    }
}

impl Proxy for Envoy<'_> {
    type Store = Store;

    fn store(&self) -> &Store {
        self.store
    }

    fn header(&self, m: proxy::Headers, name: &str) -> Option<Vec<u8>> {
        host::header(map(m), name)
    }

    fn headers(&self, m: proxy::Headers) -> HeaderMap {
        host::headers(map(m))
    }

    fn set_header(&self, m: proxy::Headers, name: &str, value: &[u8]) -> Result<(), Status> {
        host::set_header(map(m), name, value)
    }

    fn add_header(&self, m: proxy::Headers, name: &str, value: &[u8]) -> Result<(), Status> {
        host::add_header(map(m), name, value)
    }

    fn remove_header(&self, m: proxy::Headers, name: &str) -> Result<(), Status> {
        host::remove_header(map(m), name)
    }

    fn buffer(&self, b: proxy::Buffer, start: usize, len: usize) -> Result<Vec<u8>, Status> {
        host::buffer(buffer(b), start, len)
    }

    fn set_buffer(
        &self,
        b: proxy::Buffer,
        start: usize,
        len: usize,
        bytes: &[u8],
    ) -> Result<(), Status> {
        host::set_buffer(buffer(b), start, len, bytes)
    }

    fn property(&self, path: &[&str]) -> Option<Vec<u8>> {
        host::property(path)
    }

    fn set_property(&self, name: &str, value: &[u8]) -> Result<(), Status> {
        host::set_property(name, value)
    }

    fn dispatch(
        &self,
        cluster: &str,
        headers: Vec<(&str, &str)>,
        body: &[u8],
        timeout: Duration,
    ) -> Result<u32, Status> {
        host::dispatch(cluster, headers, body, timeout)
    }

    fn send_response(
        &self,
        status: u16,
        headers: &[(&str, &[u8])],
        body: &[u8],
    ) -> Result<(), Status> {
        host::send_response(u32::from(status), headers, body)
    }

    fn now(&self) -> Option<SystemTime> {
        host::now()
    }

    fn set_tick_period(&self, period: Duration) -> Result<(), Status> {
        host::set_tick_period(period)
    }

    fn count(&self, stat: Stat, n: u64) {
        self.metrics.count(stat, n);
    }

    fn define_counter(&self, name: &str) -> Result<u32, Status> {
        self.metrics.define(host::MetricKind::Counter, name)
    }

    fn increment(&self, id: u32, n: u64) {
        if let Err(status) = host::increment_metric(id, n) {
            log::debug!("increment_metric({id}) failed: {status:?}");
        }
    }
}
