//! The proxy-wasm adapter: Envoy's callbacks in, [`crate::pipeline`] out. Kept thin: it reads
//! headers and the buffered body through [`host`] (the ABI called directly: the SDK's own host
//! calls panic on non-UTF-8 headers and unexpected statuses, and a panic traps the VM for every
//! request on the worker), hands the bytes to the engine, and writes back the body, the header
//! and the stats.

mod host;
mod http;
mod metrics;
mod search;
mod vectors;

use crate::config::Config;
use crate::embeddings::VectorCache;
use crate::pipeline::Engine;
use metrics::Metrics;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::ContextType;
use std::cell::RefCell;
use std::rc::Rc;

proxy_wasm::main! {{
    host::init_logging(log::LevelFilter::Info);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> { Box::new(Root::default()) });
}}

/// What every request on this worker shares: built once in `on_configure`, never cloned.
pub(crate) struct Shared {
    engine: RefCell<Engine>,
    metrics: Metrics,
    /// Hybrid ranking's vector cache (shared by every worker) and the service's identity in
    /// its keys; `None` with keyword ranking.
    vectors: Option<(VectorCache<vectors::SharedData>, String)>,
    /// New catalogs' tool vectors being fetched by the root context.
    backfill: RefCell<vectors::Backfill>,
}

impl Shared {
    /// Where hybrid ranking's vectors come from, with the embeddings settings; `None` with
    /// keyword ranking.
    fn hybrid<'a>(
        &'a self,
        config: &'a Config,
    ) -> Option<(
        crate::embeddings::Source<'a, vectors::SharedData>,
        &'a crate::config::Embeddings,
    )> {
        let (cache, provider) = self.vectors.as_ref()?;
        let e = config.embeddings.as_ref()?;
        let source = crate::embeddings::Source {
            provider,
            model: &e.model,
            cache,
        };
        Some((source, e))
    }
}

#[derive(Default)]
struct Root {
    shared: Option<Rc<Shared>>,
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
        let Some((catalog, entries)) = shared
            .backfill
            .try_borrow_mut()
            .ok()
            .and_then(|mut b| b.answered(token_id))
        else {
            return;
        };
        let Ok(engine) = shared.engine.try_borrow() else {
            return;
        };
        let Some((source, e)) = shared.hybrid(&engine.config) else {
            return;
        };
        let known = catalog
            .vectors()
            .and_then(|v| v.iter().flatten().map(Vec::len).next());
        match http::read_answer(
            num_headers,
            body_size,
            entries.len(),
            e.dimensions.or(known),
        ) {
            Ok(vectors) => {
                source.fill_tools(&catalog, &entries, vectors);
                shared
                    .metrics
                    .add(shared.metrics.embeddings_backfilled, entries.len());
            }
            Err(reason) => {
                log::debug!("background embeddings call: {}", reason.name());
                shared.metrics.fallback(reason);
            }
        }
    }
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
        let metrics = match Metrics::define() {
            Ok(metrics) => metrics,
            Err(status) => {
                log::error!("cannot define stats: {status:?}");
                return false;
            }
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
            backfill: RefCell::default(),
        }));
        true
    }

    /// Sends the background calls requests queued.
    fn on_tick(&mut self) {
        let Some(shared) = &self.shared else {
            return;
        };
        let (Ok(engine), Ok(mut backfill)) =
            (shared.engine.try_borrow(), shared.backfill.try_borrow_mut())
        else {
            return;
        };
        if let Some(e) = &engine.config.embeddings {
            let (calls, inputs) = backfill.send(e);
            shared.metrics.add(shared.metrics.embeddings_calls, calls);
            shared.metrics.add(shared.metrics.embeddings_inputs, inputs);
        }
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
