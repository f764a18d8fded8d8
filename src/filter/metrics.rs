//! The filter's Envoy stats: those [`crate::stats`] names, defined here and added to. Envoy
//! shows them as `wasmcustom.<name>` in `/stats` and as `<name>` with `_` for `.` in
//! `/stats/prometheus`.

use super::host::{self, HostError, MetricKind};
use crate::lifecycle::Counter;
use crate::stats::{Counts, Fixed, Group, Kind, Stat};
use std::time::{Duration, SystemTime};

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

    fn id(&self, stat: Stat) -> Option<u32> {
        self.ids.get(stat.index()).copied().flatten()
    }

    /// Adds to a counter. A failed stats call must never fail a request, so errors are only
    /// logged.
    pub fn add(&self, stat: impl Into<Stat>, n: usize) {
        let Some(metric) = self.id(stat.into()).filter(|_| n > 0) else {
            return;
        };
        if let Err(status) = host::increment_metric(metric, n as u64) {
            log::debug!("increment_metric({metric}) failed: {status:?}");
        }
    }

    /// Records a value in a histogram.
    pub fn record(&self, stat: impl Into<Stat>, value: u64) {
        let Some(metric) = self.id(stat.into()) else {
            return;
        };
        if let Err(status) = host::record_metric(metric, value) {
            log::debug!("record_metric({metric}) failed: {status:?}");
        }
    }

    /// Adds (to counters) and records (in histograms) what the core counted.
    pub fn counts(&self, counts: impl IntoIterator<Item = (Stat, u64)>) {
        for (stat, n) in counts {
            match stat.kind() {
                Kind::Counter => self.add(stat, usize::try_from(n).unwrap_or(usize::MAX)),
                Kind::Histogram => self.record(stat, n),
            }
        }
    }

    /// What an event of the core counts ([`Counts`]).
    pub fn event(&self, counts: Counts) {
        self.counts(counts.into_iter().flatten());
    }

    /// Counts what the core asked for.
    pub fn count(&self, counter: Counter, n: usize) {
        self.event(counter.counts(n));
    }

    /// Records in the histogram `stat` the µs since `start` (from [`now`]), and returns the
    /// time it read: the start of the next phase, without another host call.
    pub fn since(&self, stat: Fixed, start: Option<SystemTime>) -> Option<SystemTime> {
        let end = now();
        if let (Some(start), Some(end)) = (start, end) {
            let micros = end
                .duration_since(start)
                .unwrap_or(Duration::ZERO)
                .as_micros();
            self.record(stat, u64::try_from(micros).unwrap_or(u64::MAX));
        }
        end
    }
}

/// Envoy's clock, for the filter's time histograms; `None` if the host cannot tell.
pub use super::host::now;
