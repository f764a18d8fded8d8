//! MCP routes in Envoy: [`crate::mcp::request`] decides (with [`crate::mcp::exchange`]), this
//! module reads what Envoy hands over and carries out what the machine asks ([`EnvoyHost`]).

use super::callout;
use super::host::{self, Buffer, Headers};
use super::shared::Shared;
use crate::access::{Caller, Grant};
use crate::mcp::catalog::CatalogCache;
use crate::mcp::exchange::{Event, Host, Hybrid, Settings};
use crate::mcp::request::{Context, Flow, Outgoing};
use proxy_wasm::types::Action;
use std::time::Duration;

/// A request on an MCP route, from its headers to its last response byte.
pub struct McpRequest {
    request: crate::mcp::request::McpRequest,
    outgoing: Outgoing,
}

impl McpRequest {
    /// A request to an MCP path, from its headers; under access rules, with what its caller
    /// may do and who it is.
    pub fn new(
        map: &crate::pairs::HeaderMap,
        end_of_stream: bool,
        identity: Option<(Grant, Caller)>,
        memory: Option<&crate::config::Memory>,
    ) -> McpRequest {
        let (request, outgoing) =
            crate::mcp::request::McpRequest::new(map, end_of_stream, identity, memory);
        McpRequest { request, outgoing }
    }

    pub fn token(&self) -> Option<u32> {
        self.request.token()
    }

    pub fn on_headers(&mut self, shared: &Shared) -> Action {
        let envoy = EnvoyHost::new(shared, &self.outgoing);
        let flow = self.request.on_headers(envoy.as_ref());
        perform(shared, flow)
    }

    /// A request body callback (`body_size`: everything buffered so far).
    pub fn on_body(&mut self, shared: &Shared, body_size: usize, end_of_stream: bool) -> Action {
        let envoy = EnvoyHost::new(shared, &self.outgoing);
        let mut cache = shared.mcp_cache.try_borrow_mut().ok();
        let settings = envoy.as_ref().and_then(EnvoyHost::settings);
        let context = context(envoy.as_ref(), cache.as_deref_mut(), settings.as_ref());
        let flow = self.request.on_body(body_size, end_of_stream, context);
        perform(shared, flow)
    }

    /// A call this request sent was answered. Returns whether the request goes on upstream.
    pub fn on_call(
        &mut self,
        shared: &Shared,
        token: u32,
        num_headers: usize,
        size: usize,
    ) -> bool {
        let answer = callout::call_answer(num_headers, size);
        let envoy = EnvoyHost::new(shared, &self.outgoing);
        let mut cache = shared.mcp_cache.try_borrow_mut().ok();
        let settings = envoy.as_ref().and_then(EnvoyHost::settings);
        let context = context(envoy.as_ref(), cache.as_deref_mut(), settings.as_ref());
        let flow = self.request.on_call(token, answer, context);
        perform(shared, flow) == Action::Continue
    }

    /// The response headers (of the server's answer, or of the gateway's local one).
    pub fn on_response_headers(&mut self, shared: &Shared) {
        let content_type = host::header(Headers::Response, "content-type");
        let config = shared.engine.try_borrow().ok();
        let report = self
            .request
            .on_response_headers(config.as_ref().map(|e| &e.config), content_type.as_deref());
        if let Some(value) = report.filter_state {
            if let Err(status) = host::set_property("toolsift", value.as_bytes()) {
                log::debug!("cannot record the decision for the access log: {status:?}");
            }
        }
        if let Some(value) = report.header {
            if let Err(status) = host::add_header(Headers::Response, "x-toolsift", value.as_bytes())
            {
                log::debug!("cannot add x-toolsift: {status:?}");
            }
        }
    }

    /// A response body chunk passing to the client.
    pub fn on_response_body(&mut self, shared: &Shared, body_size: usize) -> Action {
        if let Some(envoy) = EnvoyHost::new(shared, &self.outgoing) {
            self.request.on_response_body(&envoy, body_size);
        }
        Action::Continue
    }
}

/// The machine's context, when every part of it could be had.
fn context<'a, 'b, H: Host>(
    host: Option<&'a H>,
    cache: Option<&'a mut CatalogCache>,
    settings: Option<&'a Settings<'b>>,
) -> Option<Context<'a, 'b, H>> {
    Some(Context {
        host: host?,
        cache: cache?,
        settings: settings?,
    })
}

/// Carries out the machine's flow: a refusal is sent as a local reply (held either way: what
/// cannot be checked never goes upstream).
fn perform(shared: &Shared, flow: Flow) -> Action {
    match flow {
        Flow::Continue => Action::Continue,
        Flow::Pause => Action::Pause,
        Flow::Refuse(refusal) => {
            log::warn!("mcp: the request could not be checked: {}", refusal.body);
            shared
                .metrics
                .add(crate::stats::Stat::Denied(refusal.surface), 1);
            let headers: [(&str, &[u8]); 1] = [("content-type", b"application/json")];
            if let Err(status) =
                host::send_response(u32::from(refusal.status), &headers, refusal.body.as_bytes())
            {
                log::warn!("mcp: cannot answer the request: {status:?}");
            }
            Action::Pause
        }
    }
}

/// The shared-data key of a server's tool-list generation.
fn generation_key(server: &str) -> String {
    format!(
        "toolsift.mcp.generation.{:016x}",
        xxhash_rust::xxh3::xxh3_64(server.as_bytes())
    )
}

fn read_generation(server: &str) -> (u64, Option<u32>) {
    let (value, cas) = host::shared_data(&generation_key(server));
    let generation = value
        .and_then(|v| <[u8; 8]>::try_from(v.as_slice()).ok())
        .map_or(0, u64::from_le_bytes);
    (generation, cas)
}

/// Raises a server's generation in shared data, so every worker drops its catalog.
fn bump_generation(server: &str) {
    let key = generation_key(server);
    for _ in 0..8 {
        let (generation, cas) = read_generation(server);
        let next = generation.wrapping_add(1).to_le_bytes();
        match host::set_shared_data(&key, &next, cas) {
            Err(host::HostError::CAS_MISMATCH) => continue,
            Err(status) => {
                log::debug!("cannot record the list change: {status:?}");
                return;
            }
            Ok(()) => return,
        }
    }
}

/// The machine's host: Envoy, for the callback at hand.
struct EnvoyHost<'a> {
    shared: &'a Shared,
    engine: std::cell::Ref<'a, crate::pipeline::Engine>,
    outgoing: &'a Outgoing,
}

impl<'a> EnvoyHost<'a> {
    fn new(shared: &'a Shared, outgoing: &'a Outgoing) -> Option<EnvoyHost<'a>> {
        Some(EnvoyHost {
            shared,
            engine: shared.engine.try_borrow().ok()?,
            outgoing,
        })
    }

    fn settings(&self) -> Option<Settings<'_>> {
        Some(Settings {
            config: &self.engine.config,
            mcp: self.engine.config.mcp.as_ref()?,
            gating: Some(self.engine.gating_rules()).filter(|r| !r.is_empty()),
        })
    }
}

impl Host for EnvoyHost<'_> {
    type Store = super::vectors::SharedData;

    fn hybrid(&self) -> Option<Hybrid<'_, Self::Store>> {
        let (source, embeddings) = self.shared.hybrid(&self.engine.config)?;
        Some(Hybrid {
            source,
            embeddings,
            config: &self.engine.config,
        })
    }

    fn send_embeddings(&self, inputs: &[&str]) -> Option<u32> {
        let e = self.engine.config.embeddings.as_ref()?;
        super::vectors::send(e, inputs)
    }

    fn suggestions(&self) -> Option<std::rc::Rc<crate::suggestions::Suggestions>> {
        self.engine.suggestions().cloned()
    }

    fn store(&self) -> &Self::Store {
        &super::vectors::SharedData
    }

    fn send(
        &self,
        body: &str,
        method: &str,
        name: Option<&str>,
        params: &[(String, String)],
        timeout_ms: u64,
    ) -> Option<u32> {
        let Some(cluster) = callout::upstream_cluster() else {
            log::warn!("mcp: the request's upstream cluster is unknown");
            return None;
        };
        let headers = self.outgoing.headers(method, name, params);
        let headers: Vec<(&str, &str)> = headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        match host::dispatch(
            &cluster,
            headers,
            body.as_bytes(),
            Duration::from_millis(timeout_ms),
        ) {
            Ok(token) => Some(token),
            Err(status) => {
                log::warn!("mcp: {method} to {cluster} could not be sent: {status:?}");
                None
            }
        }
    }

    fn respond(&self, status: u16, content_type: &str, body: &[u8]) {
        let headers: [(&str, &[u8]); 2] = [
            ("content-type", content_type.as_bytes()),
            ("cache-control", b"no-cache"),
        ];
        if let Err(e) = host::send_response(u32::from(status), &headers, body) {
            log::warn!("mcp: cannot answer the request: {e:?}");
        }
    }

    fn now_millis(&self) -> u64 {
        host::now_millis()
    }

    fn generation(&self, server: &str) -> u64 {
        read_generation(server).0
    }

    fn tools_changed(&self, server: &str) {
        bump_generation(server);
    }

    fn count(&self, event: Event) {
        self.shared.metrics.event(event.counts());
    }

    fn request_body(&self, len: usize) -> Vec<u8> {
        host::buffer(Buffer::RequestBody, 0, len).unwrap_or_default()
    }

    fn response_body(&self, len: usize) -> Vec<u8> {
        host::buffer(Buffer::ResponseBody, 0, len).unwrap_or_default()
    }

    fn upstream_cluster(&self) -> Option<String> {
        callout::upstream_cluster()
    }
}

/// The catalog cache of a worker, for `mcp.cache_bytes`.
pub fn cache(config: &crate::config::Config) -> CatalogCache {
    CatalogCache::new(config.mcp.as_ref().map_or(0, |m| m.cache_bytes))
}
