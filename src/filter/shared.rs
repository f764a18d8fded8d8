//! What every request on a worker shares, built by the root context in `on_configure`. A leaf
//! of the adapter: the request's modules read it, it reads none of them.

use super::audit::AccessMetrics;
use super::metrics::Metrics;
use super::vectors;
use crate::config::Config;
use crate::embeddings::VectorCache;
use crate::pipeline::Engine;
use crate::search::hold::Watchdog;
use std::cell::RefCell;

/// What every request on this worker shares: built once in `on_configure`, never cloned.
pub struct Shared {
    pub(super) engine: RefCell<Engine>,
    pub(super) metrics: Metrics,
    /// Hybrid ranking's vector cache (shared by every worker) and the service's identity in
    /// its keys; `None` with keyword ranking.
    pub(super) vectors: Option<(VectorCache<vectors::SharedData>, String)>,
    /// New catalogs' tool vectors being fetched by the root context.
    pub(super) backfill: RefCell<vectors::Backfill>,
    /// Search mode's held request headers, and whether Envoy lets them be held.
    pub(super) watchdog: RefCell<Watchdog>,
    /// MCP routes: this worker's server catalogs.
    pub(super) mcp_cache: RefCell<crate::mcp::catalog::CatalogCache>,
    /// Under access rules: the audit, shadow and per-rule counters.
    pub(super) access_metrics: Option<AccessMetrics>,
    /// `suggestions.mcp`: when this worker fetches the suggestion server's list next.
    pub(super) suggestions: RefCell<Option<crate::mcp::suggestions::Refresh>>,
    /// `shadow`: which requests this worker shadows.
    pub(super) sampler: RefCell<crate::shadow::Sampler>,
}

impl Shared {
    /// Where hybrid ranking's vectors come from, with the embeddings settings; `None` with
    /// keyword ranking.
    pub(super) fn hybrid<'a>(
        &'a self,
        config: &'a Config,
    ) -> Option<(
        crate::embeddings::Source<'a, vectors::SharedData>,
        &'a crate::config::Embeddings,
    )> {
        crate::lifecycle::hybrid::source(self.vectors.as_ref(), config)
    }

    /// What the body phase reads of this worker ([`crate::lifecycle::Worker`]).
    pub(super) fn worker(&self) -> crate::lifecycle::Worker<'_, vectors::SharedData> {
        crate::lifecycle::Worker {
            engine: &self.engine,
            vectors: self.vectors.as_ref(),
        }
    }
}
