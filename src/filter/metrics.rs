//! The filter's Envoy stats: those [`crate::stats`] names, defined here and added to, and the
//! access counters the core defines at run time. Envoy shows them as `wasmcustom.<name>` in
//! `/stats` and as `<name>` with `_` for `.` in `/stats/prometheus`; with a `stat_prefix`
//! every name is put under it (`<stat_prefix>.toolsift.requests`), as Envoy's own filters do.

use super::host::{self, HostError, MetricKind};
use crate::stats::{Group, Kind, Stat};

/// The Envoy ids of the stats, by [`Stat::index`]; `None` for those not defined (the MCP ones
/// without `mcp` or `gating`), which count nothing.
pub struct Metrics {
    ids: Vec<Option<u32>>,
    prefix: Option<String>,
}

impl Metrics {
    /// Defines every stat ([`Stat::all`]), under `prefix` if there is one; the MCP ones only if
    /// `mcp`.
    pub fn define_all(mcp: bool, prefix: Option<&str>) -> Result<Metrics, HostError> {
        let mut metrics = Metrics {
            ids: Vec::new(),
            prefix: prefix.map(str::to_owned),
        };
        metrics.ids = Stat::all()
            .map(|stat| {
                if stat.group() == Group::Mcp && !mcp {
                    return Ok(None);
                }
                let kind = match stat.kind() {
                    Kind::Counter => MetricKind::Counter,
                    Kind::Histogram => MetricKind::Histogram,
                    Kind::Gauge => MetricKind::Gauge,
                };
                metrics.define(kind, &stat.name()).map(Some)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(metrics)
    }

    /// Defines the stat `name` (under the prefix, if there is one): every stat the plugin
    /// defines is named here.
    pub fn define(&self, kind: MetricKind, name: &str) -> Result<u32, HostError> {
        match &self.prefix {
            Some(prefix) => host::define_metric(kind, &format!("{prefix}.{name}")),
            None => host::define_metric(kind, name),
        }
    }

    /// Adds `n` to a counter, records `n` in a histogram, or sets a gauge to `n` (Envoy's
    /// `proxy_record_metric` sets a gauge). A failed stats call must never
    /// fail a request, so errors are only logged.
    pub fn count(&self, stat: Stat, n: u64) {
        let Some(metric) = self.ids.get(stat.index()).copied().flatten() else {
            return;
        };
        let done = match stat.kind() {
            Kind::Counter if n == 0 => return,
            Kind::Counter => host::increment_metric(metric, n),
            Kind::Histogram | Kind::Gauge => host::record_metric(metric, n),
        };
        if let Err(status) = done {
            log::debug!("stat {metric} failed: {status:?}");
        }
    }
}
