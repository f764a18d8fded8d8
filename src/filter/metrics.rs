//! The filter's Envoy stats: those [`crate::stats`] names, defined here and added to. Envoy
//! shows them as `wasmcustom.<name>` in `/stats` and as `<name>` with `_` for `.` in
//! `/stats/prometheus`.

use super::host::{self, HostError, MetricKind};
use crate::stats::{Group, Kind, Stat};

/// The Envoy ids of the stats, by [`Stat::index`]; `None` for those not defined (the MCP ones
/// without `mcp` or `gating`), which count nothing.
pub struct Metrics {
    ids: Vec<Option<u32>>,
}

impl Metrics {
    /// Defines every stat ([`Stat::all`]); the MCP ones only if `mcp`.
    pub fn define(mcp: bool) -> Result<Metrics, HostError> {
        let ids = Stat::all()
            .map(|stat| {
                if stat.group() == Group::Mcp && !mcp {
                    return Ok(None);
                }
                let kind = match stat.kind() {
                    Kind::Counter => MetricKind::Counter,
                    Kind::Histogram => MetricKind::Histogram,
                };
                host::define_metric(kind, &stat.name()).map(Some)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Metrics { ids })
    }

    /// Adds `n` to a counter, or records `n` in a histogram. A failed stats call must never
    /// fail a request, so errors are only logged.
    pub fn count(&self, stat: Stat, n: u64) {
        let Some(metric) = self.ids.get(stat.index()).copied().flatten() else {
            return;
        };
        let done = match stat.kind() {
            Kind::Counter if n == 0 => return,
            Kind::Counter => host::increment_metric(metric, n),
            Kind::Histogram => host::record_metric(metric, n),
        };
        if let Err(status) = done {
            log::debug!("stat {metric} failed: {status:?}");
        }
    }
}
