//! What access rules decided, reported: the counters of `would_deny` (audit mode), of
//! `access_shadow`'s differences and of each named rule, the debug log, and the access log's
//! `toolsift_access` (`%FILTER_STATE(wasm.toolsift_access:PLAIN)%`). The decisions themselves
//! are made and recorded in [`crate::access`] (a grant's ledger); this only reports them.

use super::host::{self, HostError, MetricKind};
use crate::access::{Grant, Policy, Record, Surface, Verdict};
use crate::pipeline::header_safe;

/// The access counters besides `toolsift.access.denied.<surface>`, defined at configure time
/// (`None` without access rules: nothing to count).
pub struct AccessMetrics {
    /// Per surface, in [`Surface::ALL`] order: `would_deny`, `shadow.would_deny`,
    /// `shadow.would_allow`.
    surfaces: Vec<[u32; 3]>,
    /// Per named rule: its name, `denied`, `would_deny`.
    rules: Vec<(String, u32, u32)>,
}

impl AccessMetrics {
    pub fn define(policy: &Policy) -> Result<AccessMetrics, HostError> {
        let counter = |name: String| host::define_metric(MetricKind::Counter, &name);
        let mut surfaces = Vec::new();
        for s in Surface::ALL {
            let s = s.name();
            surfaces.push([
                counter(format!("toolsift.access.would_deny.{s}"))?,
                counter(format!("toolsift.access.shadow.would_deny.{s}"))?,
                counter(format!("toolsift.access.shadow.would_allow.{s}"))?,
            ]);
        }
        let mut rules = Vec::new();
        for name in policy.rule_names() {
            rules.push((
                name.to_owned(),
                counter(format!("toolsift.access.rule.{name}.denied"))?,
                counter(format!("toolsift.access.rule.{name}.would_deny"))?,
            ));
        }
        Ok(AccessMetrics { surfaces, rules })
    }

    fn count(&self, record: &Record) {
        let at = Surface::ALL.iter().position(|s| *s == record.surface);
        let surface = at.and_then(|at| self.surfaces.get(at));
        let rule = self.rules.iter().find(|(name, ..)| *name == record.rule);
        let metric = match record.verdict {
            // `toolsift.access.denied.<surface>` is counted where the denial is carried out.
            Verdict::Deny => rule.map(|(_, denied, _)| *denied),
            Verdict::WouldDeny => {
                if let Some((_, _, would)) = rule {
                    increment(*would);
                }
                surface.map(|s| s[0])
            }
            Verdict::ShadowDeny => surface.map(|s| s[1]),
            Verdict::ShadowAllow => surface.map(|s| s[2]),
            // Counted per call where the answer is read (`toolsift.access.connector_calls`).
            Verdict::ConnectorCall => None,
        };
        if let Some(metric) = metric {
            increment(metric);
        }
    }
}

fn increment(metric: u32) {
    if let Err(status) = host::increment_metric(metric, 1) {
        log::debug!("increment_metric({metric}) failed: {status:?}");
    }
}

/// One record as the access log writes it: `verdict:surface:rule:tool`.
fn item(record: &Record) -> String {
    format!(
        "{}:{}:{}:{}",
        record.verdict.name(),
        record.surface.name(),
        header_safe(&record.rule),
        record.tool.as_deref().map_or("-".into(), header_safe)
    )
}

/// Reports the decisions `grant` recorded since the last report: counted, logged at debug
/// level, and the request's whole list written for the access log. Nothing to do (and no host
/// call) when nothing new was recorded.
pub fn report(metrics: Option<&AccessMetrics>, grant: &Grant) {
    let new = grant.ledger().take_new();
    if new.is_empty() {
        return;
    }
    for record in &new {
        if let Some(m) = metrics {
            m.count(record);
        }
        log::debug!("toolsift: access {}", item(record));
    }
    let all: Vec<String> = grant.ledger().records().iter().map(item).collect();
    if let Err(status) = host::set_property("toolsift_access", all.join(" ").as_bytes()) {
        log::debug!("cannot record the access decisions for the access log: {status:?}");
    }
}
