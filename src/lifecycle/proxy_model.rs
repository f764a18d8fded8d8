//! A model of Envoy as the core's [`Proxy`] sees it, for the stream tests and the fuzz target:
//! the header maps, buffers, properties, calls sent, local reply, stats and tick as plain data,
//! so a test drives a stream's callbacks in Envoy's order and reads what Envoy would hold after
//! them. Calls are recorded and answered by the caller.

use super::proxy::{Buffer, Headers, Proxy, Status};
use crate::embeddings::MemoryBytes;
use crate::pairs::HeaderMap;
use crate::stats::{Kind, Stat};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub type Pairs = Vec<(String, String)>;

/// A call the core sent.
#[derive(Debug, Clone)]
pub struct Call {
    pub cluster: String,
    pub headers: Pairs,
    pub body: String,
}

/// Envoy as data. Tokens are 1 + the call's index in `calls`.
#[derive(Default)]
pub struct Envoy {
    pub request_headers: RefCell<Pairs>,
    pub response_headers: RefCell<Pairs>,
    pub call_headers: RefCell<Pairs>,
    pub request_body: RefCell<Vec<u8>>,
    pub response_body: RefCell<Vec<u8>>,
    pub call_body: RefCell<Vec<u8>>,
    /// `xds.cluster_name`: the cluster the router picked.
    pub cluster: Option<String>,
    /// Filter state, by name, and how many times it was written (each write costs Envoy).
    pub recorded: RefCell<HashMap<String, String>>,
    pub writes: Cell<usize>,
    pub calls: RefCell<Vec<Call>>,
    pub reply: RefCell<Option<(u16, String)>>,
    /// Counters' increments and histograms' values, by name.
    pub stats: RefCell<HashMap<String, Vec<u64>>>,
    pub store: MemoryBytes,
    pub now_ms: Cell<u64>,
    pub tick: Cell<Option<Duration>>,
    /// A buffer replacement reached past what the buffer held.
    pub overreach: Cell<bool>,
}

impl Envoy {
    /// Envoy with the router's cluster `cluster`, its clock at a fixed time.
    pub fn new(cluster: &str) -> Envoy {
        Envoy {
            cluster: Some(cluster.to_owned()),
            now_ms: Cell::new(1_000_000),
            ..Envoy::default()
        }
    }

    fn map(&self, map: Headers) -> &RefCell<Pairs> {
        match map {
            Headers::Request => &self.request_headers,
            Headers::Response => &self.response_headers,
            Headers::CallResponse => &self.call_headers,
        }
    }

    fn held(&self, buffer: Buffer) -> &RefCell<Vec<u8>> {
        match buffer {
            Buffer::RequestBody => &self.request_body,
            Buffer::ResponseBody => &self.response_body,
            Buffer::CallResponseBody => &self.call_body,
        }
    }

    /// Replaces the map `map` with `pairs`.
    pub fn set_map(&self, map: Headers, pairs: &[(&str, &str)]) {
        *self.map(map).borrow_mut() = pairs
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect();
    }

    /// The first value of header `name` in `map`.
    pub fn get(&self, map: Headers, name: &str) -> Option<String> {
        let pairs = self.map(map).borrow();
        let found = pairs.iter().find(|(n, _)| n == name);
        found.map(|(_, v)| v.clone())
    }

    /// Replaces what `buffer` holds.
    pub fn set_body(&self, buffer: Buffer, bytes: &[u8]) {
        *self.held(buffer).borrow_mut() = bytes.to_vec();
    }

    /// What `buffer` holds, as text (lossy).
    pub fn body(&self, buffer: Buffer) -> String {
        String::from_utf8_lossy(&self.held(buffer).borrow()).into_owned()
    }

    /// A counter's sum, how many values a histogram has, or a gauge's last value.
    pub fn stat(&self, stat: impl Into<Stat>) -> u64 {
        let stat = stat.into();
        let stats = self.stats.borrow();
        let values = stats.get(stat.name().as_ref());
        match stat.kind() {
            Kind::Counter => values.map_or(0, |v| v.iter().sum()),
            Kind::Histogram => values.map_or(0, |v| v.len() as u64),
            Kind::Gauge => values.and_then(|v| v.last().copied()).unwrap_or(0),
        }
    }

    /// The filter state recorded as `name`.
    pub fn recorded(&self, name: &str) -> Option<String> {
        self.recorded.borrow().get(name).cloned()
    }

    /// The token of the last call sent.
    pub fn last_token(&self) -> Option<u32> {
        u32::try_from(self.calls.borrow().len())
            .ok()
            .filter(|n| *n > 0)
    }
}

impl Proxy for Envoy {
    type Store = MemoryBytes;

    fn store(&self) -> &MemoryBytes {
        &self.store
    }

    fn header(&self, map: Headers, name: &str) -> Option<Vec<u8>> {
        self.get(map, name).map(String::into_bytes)
    }

    fn headers(&self, map: Headers) -> HeaderMap {
        HeaderMap::new(crate::pairs::encode(&self.map(map).borrow()))
    }

    fn set_header(&self, map: Headers, name: &str, value: &[u8]) -> Result<(), Status> {
        self.remove_header(map, name)?;
        self.add_header(map, name, value)
    }

    fn add_header(&self, map: Headers, name: &str, value: &[u8]) -> Result<(), Status> {
        let value = String::from_utf8_lossy(value).into_owned();
        self.map(map).borrow_mut().push((name.to_owned(), value));
        Ok(())
    }

    fn remove_header(&self, map: Headers, name: &str) -> Result<(), Status> {
        self.map(map).borrow_mut().retain(|(n, _)| n != name);
        Ok(())
    }

    fn buffer(&self, buffer: Buffer, start: usize, len: usize) -> Result<Vec<u8>, Status> {
        let held = self.held(buffer).borrow();
        let end = start.saturating_add(len).min(held.len());
        Ok(held.get(start.min(end)..end).unwrap_or_default().to_vec())
    }

    fn set_buffer(
        &self,
        buffer: Buffer,
        start: usize,
        len: usize,
        bytes: &[u8],
    ) -> Result<(), Status> {
        let mut held = self.held(buffer).borrow_mut();
        let end = start.saturating_add(len);
        if end > held.len() {
            self.overreach.set(true);
        }
        let end = end.min(held.len());
        held.splice(start.min(end)..end, bytes.iter().copied());
        Ok(())
    }

    fn property(&self, path: &[&str]) -> Option<Vec<u8>> {
        match path {
            ["xds", "cluster_name"] => self.cluster.clone().map(String::into_bytes),
            _ => None,
        }
    }

    fn set_property(&self, name: &str, value: &[u8]) -> Result<(), Status> {
        let value = String::from_utf8_lossy(value).into_owned();
        self.recorded.borrow_mut().insert(name.to_owned(), value);
        self.writes.set(self.writes.get() + 1);
        Ok(())
    }

    fn dispatch(
        &self,
        cluster: &str,
        headers: Vec<(&str, &str)>,
        body: &[u8],
        _timeout: Duration,
    ) -> Result<u32, Status> {
        let mut calls = self.calls.borrow_mut();
        calls.push(Call {
            cluster: cluster.to_owned(),
            headers: headers
                .iter()
                .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
                .collect(),
            body: String::from_utf8_lossy(body).into_owned(),
        });
        u32::try_from(calls.len()).map_err(|_| Status(1))
    }

    fn send_response(
        &self,
        status: u16,
        _headers: &[(&str, &[u8])],
        body: &[u8],
    ) -> Result<(), Status> {
        let body = String::from_utf8_lossy(body).into_owned();
        *self.reply.borrow_mut() = Some((status, body));
        Ok(())
    }

    fn now(&self) -> Option<SystemTime> {
        Some(UNIX_EPOCH + Duration::from_millis(self.now_ms.get()))
    }

    fn set_tick_period(&self, period: Duration) -> Result<(), Status> {
        self.tick.set(Some(period));
        Ok(())
    }

    fn count(&self, stat: Stat, n: u64) {
        let mut stats = self.stats.borrow_mut();
        stats.entry(stat.name().into_owned()).or_default().push(n);
    }

    fn define_counter(&self, name: &str) -> Result<u32, Status> {
        let mut stats = self.stats.borrow_mut();
        stats.insert(name.to_owned(), Vec::new());
        u32::try_from(stats.len()).map_err(|_| Status(1))
    }

    fn increment(&self, _id: u32, _n: u64) {}
}
