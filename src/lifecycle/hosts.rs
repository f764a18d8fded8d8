//! The core machines' hosts, built on a [`Proxy`]: what the response side
//! ([`crate::search::respond::Host`]) and an MCP message ([`crate::mcp::exchange::Host`]) ask
//! of Envoy, in Envoy's terms: which buffer, which header map, which cluster, which stat. The
//! machines' own tests drive them through recording hosts; here is only how each of their
//! asks is carried out, the same for every proxy.

use super::proxy::{Buffer, Headers, Proxy};
use super::response::FollowUps;
use crate::mcp::exchange;
use crate::pipeline::Engine;
use crate::search::respond::{self, Event, Hybrid};
use std::cell::Ref;
use std::time::Duration;

/// A worker's vector cache and the embeddings service's identity in its keys (hybrid ranking).
pub(super) type Vectors<'a, S> = Option<&'a (crate::embeddings::VectorCache<S>, String)>;

/// The response side's host: the proxy, for the callback at hand.
pub(super) struct ResponseHost<'a, P: Proxy> {
    pub proxy: &'a P,
    pub engine: Ref<'a, Engine>,
    pub vectors: Vectors<'a, P::Store>,
    pub follow_ups: &'a FollowUps,
    /// Search mode: its stats; else filter mode's (`toolsift.unknown_tools.*`).
    pub searches: bool,
}

impl<P: Proxy> respond::Host for ResponseHost<'_, P> {
    type Store = P::Store;

    fn body(&self, start: usize, len: usize) -> Vec<u8> {
        self.proxy
            .buffer(Buffer::ResponseBody, start, len)
            .unwrap_or_default()
    }

    fn replace_body(&self, len: usize, bytes: &[u8]) {
        if let Err(status) = self.proxy.set_buffer(Buffer::ResponseBody, 0, len, bytes) {
            log::warn!("cannot set the response body: {status:?}");
        }
    }

    fn set_header(&self, name: &str, value: &str) {
        if let Err(status) = self
            .proxy
            .set_header(Headers::Response, name, value.as_bytes())
        {
            log::debug!("cannot set {name}: {status:?}");
        }
    }

    fn send_follow_up(&self, body: &str) -> Option<u32> {
        // The upstream cluster the router picked for this request.
        let Some(cluster) = self.proxy.upstream_cluster() else {
            log::warn!("search follow-up: the request's upstream cluster is unknown");
            return None;
        };
        let routed = Some(self.proxy.headers(Headers::Request))
            .filter(|map| map.get(":path").is_some())
            .and_then(|map| map.texts());
        let headers = self.follow_ups.headers(routed);
        let timeout = Duration::from_millis(self.engine.config.search.timeout_ms as u64);
        dispatch(self.proxy, &cluster, &headers, body, timeout)
            .inspect_err(|status| log::warn!("search follow-up to {cluster} failed: {status:?}"))
            .ok()
    }

    fn send_embeddings(&self, inputs: &[&str]) -> Option<u32> {
        let e = self.engine.config.embeddings.as_ref()?;
        super::hybrid::send(self.proxy, e, inputs)
    }

    fn count(&self, event: Event) {
        self.proxy.counts(event.counts(self.searches));
    }

    fn now_micros(&self) -> Option<u64> {
        self.proxy.now_micros()
    }

    fn hybrid(&self) -> Option<Hybrid<'_, Self::Store>> {
        hybrid(self.vectors, &self.engine)
    }

    fn remember_alias(&self, shown: &str, real: &str) {
        let (owner, now) = (self.follow_ups.owner, self.proxy.now_seconds());
        crate::search::alias::remember(self.proxy.store(), shown, real, owner, now);
    }

    fn store(&self) -> &Self::Store {
        self.proxy.store()
    }

    fn now_seconds(&self) -> u64 {
        self.proxy.now_seconds()
    }

    fn record_search(&self, value: &str) {
        self.proxy.record("toolsift_search", value);
    }
}

/// Hybrid ranking's vector source and settings; `None` with keyword ranking.
fn hybrid<'a, S>(vectors: Vectors<'a, S>, engine: &'a Engine) -> Option<Hybrid<'a, S>> {
    let (source, embeddings) = super::hybrid::source(vectors, &engine.config)?;
    Some(Hybrid {
        source,
        embeddings,
        config: &engine.config,
    })
}

/// Sends a call of `headers` and `body` to `cluster`.
pub(super) fn dispatch<P: Proxy>(
    proxy: &P,
    cluster: &str,
    headers: &[(String, String)],
    body: &str,
    timeout: Duration,
) -> Result<u32, super::proxy::Status> {
    let headers = headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    proxy.dispatch(cluster, headers, body.as_bytes(), timeout)
}

/// An MCP message's host: the proxy, for the callback at hand.
pub(super) struct McpHost<'a, P: Proxy> {
    pub proxy: &'a P,
    pub engine: Ref<'a, Engine>,
    pub vectors: Vectors<'a, P::Store>,
    pub outgoing: &'a crate::mcp::request::Outgoing,
}

impl<P: Proxy> McpHost<'_, P> {
    pub fn settings(&self) -> Option<exchange::Settings<'_>> {
        Some(exchange::Settings {
            config: &self.engine.config,
            mcp: self.engine.config.mcp.as_ref()?,
            gating: Some(self.engine.gating_rules()).filter(|r| !r.is_empty()),
        })
    }
}

impl<P: Proxy> exchange::Host for McpHost<'_, P> {
    type Store = P::Store;

    fn hybrid(&self) -> Option<Hybrid<'_, Self::Store>> {
        hybrid(self.vectors, &self.engine)
    }

    fn send_embeddings(&self, inputs: &[&str]) -> Option<u32> {
        let e = self.engine.config.embeddings.as_ref()?;
        super::hybrid::send(self.proxy, e, inputs)
    }

    fn suggestions(&self) -> Option<std::rc::Rc<crate::suggestions::Suggestions>> {
        self.engine.suggestions().cloned()
    }

    fn store(&self) -> &Self::Store {
        self.proxy.store()
    }

    fn send(
        &self,
        body: &str,
        method: &str,
        name: Option<&str>,
        params: &[(String, String)],
        timeout_ms: u64,
    ) -> Option<u32> {
        let Some(cluster) = self.proxy.upstream_cluster() else {
            log::warn!("mcp: the request's upstream cluster is unknown");
            return None;
        };
        let headers = self.outgoing.headers(method, name, params);
        let timeout = Duration::from_millis(timeout_ms);
        dispatch(self.proxy, &cluster, &headers, body, timeout)
            .inspect_err(|status| {
                log::warn!("mcp: {method} to {cluster} could not be sent: {status:?}");
            })
            .ok()
    }

    fn respond(&self, status: u16, content_type: &str, body: &[u8]) {
        let headers: [(&str, &[u8]); 2] = [
            ("content-type", content_type.as_bytes()),
            ("cache-control", b"no-cache"),
        ];
        if let Err(e) = self.proxy.send_response(status, &headers, body) {
            log::warn!("mcp: cannot answer the request: {e:?}");
        }
    }

    fn now_millis(&self) -> u64 {
        self.proxy.now_millis()
    }

    fn generation(&self, server: &str) -> u64 {
        crate::mcp::catalog::generation(self.proxy.store(), server).0
    }

    fn tools_changed(&self, server: &str) {
        crate::mcp::catalog::bump_generation(self.proxy.store(), server);
    }

    fn count(&self, event: exchange::Event) {
        self.proxy.counts(event.counts());
    }

    fn request_body(&self, len: usize) -> Vec<u8> {
        self.proxy
            .buffer(Buffer::RequestBody, 0, len)
            .unwrap_or_default()
    }

    fn response_body(&self, len: usize) -> Vec<u8> {
        self.proxy
            .buffer(Buffer::ResponseBody, 0, len)
            .unwrap_or_default()
    }

    fn upstream_cluster(&self) -> Option<String> {
        self.proxy.upstream_cluster()
    }
}
