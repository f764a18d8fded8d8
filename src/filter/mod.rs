//! The proxy-wasm adapter: Envoy's callbacks in, [`crate::pipeline`] out. Kept thin: it reads
//! headers and the buffered body through `hostcalls` (the `Result` forms: the SDK's
//! convenience getters unwrap, and a panic traps the VM for every request on the worker),
//! hands the bytes to the engine, and writes back the body, the header and the stats.

mod http;
mod metrics;
mod vectors;

use crate::config::Config;
use crate::embeddings::VectorCache;
use crate::pipeline::Engine;
use metrics::Metrics;
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{BufferType, ContextType, LogLevel};
use std::cell::RefCell;
use std::rc::Rc;

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Info);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> { Box::new(Root::default()) });
}}

/// What every request on this worker shares: built once in `on_configure`, never cloned.
pub(crate) struct Shared {
    engine: RefCell<Engine>,
    metrics: Metrics,
    /// Hybrid ranking's vector cache (shared by every worker) and the service's identity in
    /// its keys; `None` with keyword ranking.
    vectors: Option<(VectorCache<vectors::SharedData>, String)>,
}

#[derive(Default)]
struct Root {
    shared: Option<Rc<Shared>>,
}

impl Context for Root {}

impl RootContext for Root {
    fn on_configure(&mut self, _plugin_configuration_size: usize) -> bool {
        let bytes = match hostcalls::get_buffer(BufferType::PluginConfiguration, 0, usize::MAX) {
            Ok(bytes) => bytes.unwrap_or_default(),
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
        let metrics = match Metrics::define() {
            Ok(metrics) => metrics,
            Err(status) => {
                log::error!("cannot define stats: {status:?}");
                return false;
            }
        };
        if config.debug {
            proxy_wasm::set_log_level(LogLevel::Debug);
        }
        log::info!(
            "configured: top_k={} min_tools={} ranking={:?}",
            config.top_k,
            config.min_tools,
            config.ranking
        );
        let vectors = match (&config.ranking, &config.embeddings) {
            (crate::config::Ranking::Hybrid, Some(e)) => Some((
                VectorCache::new(vectors::SharedData, e.cache_size, "toolsift.vectors."),
                format!("{}|{}|{}", e.cluster, e.authority(), e.path),
            )),
            _ => None,
        };
        self.shared = Some(Rc::new(Shared {
            engine: RefCell::new(Engine::new(config)),
            metrics,
            vectors,
        }));
        true
    }

    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        // Returning None here would make the SDK panic; without a configuration the context
        // simply passes everything through.
        Some(Box::new(http::Filter::new(self.shared.clone())))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}
