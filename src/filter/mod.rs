//! The proxy-wasm adapter: Envoy's callbacks handed to the core's [`crate::lifecycle`] (a
//! worker's [`Shared`] for the root context, a [`crate::lifecycle::Stream`] per request), which
//! decides and acts through [`envoy::Envoy`], its [`crate::lifecycle::proxy::Proxy`]. Kept
//! thin: `host` calls the ABI directly (the SDK's own host calls panic on non-UTF-8 headers and
//! unexpected statuses, and a panic traps the VM for every request on the worker), `envoy`
//! passes the core's calls on to it, `metrics` keeps the stats' Envoy ids, and this root
//! context and `http` hand over the callbacks. Its modules import downwards only.

mod envoy;
mod host;
mod http;
mod metrics;

use crate::config::Config;
use crate::lifecycle::Shared;
use envoy::{Envoy, SharedData, Store, Worker};
use metrics::Metrics;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::ContextType;
use std::rc::Rc;

proxy_wasm::main! {{
    host::init_logging(log::LevelFilter::Info);
    proxy_wasm::set_root_context(|context_id| -> Box<dyn RootContext> {
        Box::new(Root { context_id, worker: None })
    });
}}

struct Root {
    context_id: u32,
    worker: Option<Rc<Worker>>,
}

impl Context for Root {
    /// A call the worker sent itself answered (background embeddings, suggestions).
    fn on_http_call_response(
        &mut self,
        token_id: u32,
        num_headers: usize,
        body_size: usize,
        _num_trailers: usize,
    ) {
        if let Some(worker) = &self.worker {
            let envoy = worker.envoy();
            let answer =
                || crate::lifecycle::proxy::Proxy::call_answer(&envoy, num_headers, body_size);
            worker.core.on_call(&envoy, token_id, answer);
        }
    }
}

impl RootContext for Root {
    fn on_configure(&mut self, _plugin_configuration_size: usize) -> bool {
        // Until the configuration names this plugin, its lines name none (another plugin of
        // the VM may have logged last).
        host::enter(&host::Plugin::default());
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
        let prefix = config.stat_prefix.clone();
        let plugin = host::Plugin::new(
            prefix.as_deref(),
            crate::lifecycle::worker::log_level(&config),
        );
        host::enter(&plugin);
        let metrics = match Metrics::define_all(config.counts_mcp(), prefix.as_deref()) {
            Ok(metrics) => metrics,
            Err(status) => {
                log::error!("cannot define stats: {status:?}");
                return false;
            }
        };
        let store = Store::new(SharedData, prefix.as_deref());
        let envoy = Envoy {
            metrics: &metrics,
            store: &store,
        };
        let core = match Shared::new(&envoy, config, store.clone(), self.context_id) {
            Ok(core) => core,
            Err(status) => {
                log::error!("cannot define the access stats: {status:?}");
                return false;
            }
        };
        self.worker = Some(Rc::new(Worker {
            core,
            metrics,
            store,
            plugin,
        }));
        true
    }

    /// The worker's tick; held requests whose body has not come are resumed.
    fn on_tick(&mut self) {
        let Some(worker) = &self.worker else {
            return;
        };
        let stalled = worker.core.on_tick(&worker.envoy());
        for context in &stalled {
            // A request that ended meanwhile is no longer a context: nothing to resume.
            if host::set_effective_context(*context).is_ok() {
                if let Err(status) = host::resume(host::Stream::Request) {
                    log::debug!("cannot resume held request {context}: {status:?}");
                }
            }
        }
        if !stalled.is_empty() {
            if let Err(status) = host::set_effective_context(self.context_id) {
                log::debug!("cannot return to the root context: {status:?}");
            }
        }
    }

    fn create_http_context(&self, context_id: u32) -> Option<Box<dyn HttpContext>> {
        // Returning None here would make the SDK panic; without a configuration the context
        // simply passes everything through.
        Some(Box::new(http::Filter::new(self.worker.clone(), context_id)))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}
