//! The proxy-wasm adapter: Envoy's callbacks in, [`crate::lifecycle`] decides, the actions it
//! returns performed here. Kept thin: it reads headers and the buffered body through [`host`]
//! (the ABI called directly: the SDK's own host calls panic on non-UTF-8 headers and
//! unexpected statuses, and a panic traps the VM for every request on the worker), hands them
//! to the core, and writes back the body, the headers and the stats. Its modules import
//! downwards only: this root context and `http` on top, the hosts of the core's response
//! machines (`search`, `mcp`) below, and `callout`, `shared`, `metrics`, `vectors`, `host`
//! as leaves.

mod audit;
mod callout;
mod host;
mod http;
mod identity;
mod mcp;
mod metrics;
mod search;
mod shared;
mod suggestions;
mod vectors;

use crate::config::Config;
use crate::pipeline::Engine;
use crate::stats::Fixed;
use metrics::Metrics;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::ContextType;
use shared::Shared;
use std::cell::RefCell;
use std::rc::Rc;

proxy_wasm::main! {{
    host::init_logging(log::LevelFilter::Info);
    proxy_wasm::set_root_context(|context_id| -> Box<dyn RootContext> {
        Box::new(Root { context_id, shared: None })
    });
}}

struct Root {
    context_id: u32,
    shared: Option<Rc<Shared>>,
}

impl Root {
    /// Resumes the held requests whose body has not come (`crate::search::hold`): Envoy lacks
    /// `allow_on_headers_stop_iteration`, and they would hang.
    fn resume_stalled(&self, shared: &Shared) {
        let stalled = match shared.watchdog.try_borrow_mut() {
            Ok(mut watchdog) => watchdog.stalled(host::now_millis()),
            Err(_) => return,
        };
        if stalled.is_empty() {
            return;
        }
        for context in &stalled {
            // A request that ended meanwhile is no longer a context: nothing to resume.
            if host::set_effective_context(*context).is_ok() {
                if let Err(status) = host::resume(host::Stream::Request) {
                    log::debug!("cannot resume held request {context}: {status:?}");
                }
            }
        }
        if let Err(status) = host::set_effective_context(self.context_id) {
            log::debug!("cannot return to the root context: {status:?}");
        }
        log::warn!(
            "search.hold_headers: a request whose headers were held got no body within {} ms; \
             Envoy's Wasm filter config lacks `allow_on_headers_stop_iteration: true` (Istio's \
             WasmPlugin and Envoy Gateway cannot set it). This worker stops holding headers: \
             search mode goes on without them (no anthropic-beta for native_search, follow-ups \
             with the request's headers as the filter saw them, no x-toolsift-search).",
            crate::search::hold::GRACE_MS
        );
        shared
            .metrics
            .add(Fixed::SearchHeadersNotHeld, stalled.len());
    }
}

impl Context for Root {
    /// A background call for a new catalog's tool vectors answered.
    fn on_http_call_response(
        &mut self,
        token_id: u32,
        num_headers: usize,
        body_size: usize,
        _num_trailers: usize,
    ) {
        let Some(shared) = &self.shared else {
            return;
        };
        if suggestions::answered(shared, token_id, num_headers, body_size) {
            return;
        }
        let Some((catalog, entries)) = shared
            .backfill
            .try_borrow()
            .ok()
            .and_then(|b| b.pending(token_id))
        else {
            return;
        };
        let answer = callout::embeddings_answer(num_headers, body_size);
        let ok = shared.engine.try_borrow().is_ok_and(|engine| {
            let Some((source, e)) = shared.hybrid(&engine.config) else {
                return false;
            };
            match crate::lifecycle::hybrid::backfilled(&source, e, &catalog, &entries, &answer) {
                Ok(stored) => {
                    shared.metrics.add(Fixed::EmbeddingsBackfilled, stored);
                    true
                }
                Err(reason) => {
                    log::debug!("background embeddings call: {}", reason.name());
                    shared.metrics.add(crate::stats::Stat::Fallback(reason), 1);
                    false
                }
            }
        });
        if let Ok(mut backfill) = shared.backfill.try_borrow_mut() {
            backfill.answered(token_id, ok);
        }
    }
}

/// A seed for this worker's [`crate::shadow::Sampler`]: Envoy's clock in nanoseconds, and the
/// root context's id, so that workers started in the same instant draw apart.
fn sampler_seed(context_id: u32) -> u64 {
    let nanos = host::now()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ (u64::from(context_id) << 32)
}

impl RootContext for Root {
    fn on_configure(&mut self, _plugin_configuration_size: usize) -> bool {
        let bytes = match host::buffer(host::Buffer::PluginConfiguration, 0, usize::MAX) {
            Ok(bytes) => bytes,
            Err(status) => {
                log::error!("cannot read the plugin configuration: {status:?}");
                return false;
            }
        };
        let config = match Config::from_json(&bytes) {
            Ok(config) => config,
            Err(e) => {
                // Returning false makes Envoy refuse the filter config (and not start).
                log::error!("{e}");
                return false;
            }
        };
        let metrics = match Metrics::define(config.counts_mcp()) {
            Ok(metrics) => metrics,
            Err(status) => {
                log::error!("cannot define stats: {status:?}");
                return false;
            }
        };
        let policy = config.policy().ok().flatten();
        let access_metrics = match policy.as_ref().map(audit::AccessMetrics::define) {
            Some(Err(status)) => {
                log::error!("cannot define the access stats: {status:?}");
                return false;
            }
            Some(Ok(m)) => Some(m),
            None => None,
        };
        if config.debug {
            log::set_max_level(log::LevelFilter::Debug);
        }
        log::info!(
            "configured: top_k={} min_tools={} ranking={:?}",
            config.top_k,
            config.min_tools,
            config.ranking
        );
        let vectors = crate::lifecycle::hybrid::worker_vectors(&config, vectors::SharedData);
        let mcp_cache = RefCell::new(mcp::cache(&config));
        let refresh = config
            .suggestions
            .as_ref()
            .and_then(|s| s.mcp.as_ref())
            .map(crate::mcp::suggestions::Refresh::new);
        if refresh.is_some() {
            // The first fetch goes on the first tick: clusters are not ready before.
            if let Err(status) = host::set_tick_period(suggestions::TICK) {
                log::warn!("suggestions: cannot set the tick period: {status:?}");
            }
        }
        self.shared = Some(Rc::new(Shared {
            suggestions: RefCell::new(refresh),
            mcp_cache,
            access_metrics,
            engine: RefCell::new(Engine::new(config)),
            metrics,
            vectors,
            backfill: RefCell::default(),
            watchdog: RefCell::default(),
            sampler: RefCell::new(crate::shadow::Sampler::new(sampler_seed(self.context_id))),
        }));
        true
    }

    /// Sends the background calls requests queued, and resumes held requests that stalled.
    fn on_tick(&mut self) {
        let Some(shared) = self.shared.clone() else {
            return;
        };
        if let (Ok(engine), Ok(mut backfill)) =
            (shared.engine.try_borrow(), shared.backfill.try_borrow_mut())
        {
            if let Some(e) = &engine.config.embeddings {
                let (calls, inputs) = backfill.send(e);
                shared.metrics.add(Fixed::EmbeddingsCalls, calls);
                shared.metrics.add(Fixed::EmbeddingsInputs, inputs);
            }
        }
        self.resume_stalled(&shared);
        suggestions::tick(&shared);
        // Tick again only while held requests are watched or a suggestion server is fetched
        // (a request that queues background calls sets its own period).
        let watching = shared.watchdog.try_borrow().is_ok_and(|w| w.watching());
        let fetching = shared.suggestions.try_borrow().is_ok_and(|r| r.is_some());
        let period = if watching {
            std::time::Duration::from_millis(crate::search::hold::TICK_MS)
        } else if fetching {
            suggestions::TICK
        } else {
            std::time::Duration::ZERO
        };
        if let Err(status) = host::set_tick_period(period) {
            log::debug!("cannot set the tick period: {status:?}");
        }
    }

    fn create_http_context(&self, context_id: u32) -> Option<Box<dyn HttpContext>> {
        // Returning None here would make the SDK panic; without a configuration the context
        // simply passes everything through.
        Some(Box::new(http::Filter::new(self.shared.clone(), context_id)))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}
