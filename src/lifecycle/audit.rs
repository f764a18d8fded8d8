//! What access rules decided, reported: the counters of `would_deny` (audit mode), of
//! `access_shadow`'s differences and of each named rule, the debug log, and the access log's
//! record (its `verdicts=` field, [`super::record`]). The decisions themselves are made and
//! recorded in [`crate::access`] (a grant's ledger); this only reports them.

use super::proxy::{Proxy, Status};
use super::record::Record as LogRecord;
use crate::access::judge::{Record, Verdict};
use crate::access::{Grant, Policy, Surface};
use crate::pipeline::header_safe;

/// The access counters besides `toolsift.access.denied.<surface>`, defined when the worker
/// starts (none without access rules: nothing to count).
pub struct AccessStats {
    /// Per surface, in [`Surface::ALL`] order: `would_deny`, `shadow.would_deny`,
    /// `shadow.would_allow`.
    surfaces: Vec<[u32; 3]>,
    /// Per named rule: its name, `denied`, `would_deny`.
    rules: Vec<(String, u32, u32)>,
}

impl AccessStats {
    pub fn define<P: Proxy>(proxy: &P, policy: &Policy) -> Result<AccessStats, Status> {
        let counter = |name: String| proxy.define_counter(&name);
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
        Ok(AccessStats { surfaces, rules })
    }

    /// The counters `record` adds to.
    fn counters(&self, record: &Record) -> [Option<u32>; 2] {
        let at = Surface::ALL.iter().position(|s| *s == record.surface);
        let surface = at.and_then(|at| self.surfaces.get(at));
        let rule = self.rules.iter().find(|(name, ..)| *name == record.rule);
        match record.verdict {
            // `toolsift.access.denied.<surface>` is counted where the denial is carried out.
            Verdict::Deny => [rule.map(|(_, denied, _)| *denied), None],
            Verdict::WouldDeny => [rule.map(|(_, _, would)| *would), surface.map(|s| s[0])],
            Verdict::ShadowDeny => [surface.map(|s| s[1]), None],
            Verdict::ShadowAllow => [surface.map(|s| s[2]), None],
            // Counted per call where the answer is read (`toolsift.access.connector_calls`).
            Verdict::ConnectorCall => [None, None],
        }
    }
}

/// One record as the access log writes it: `verdict:surface:rule:tool` (names percent-encoded,
/// so a `,` never appears in one).
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
/// level, and the request's whole list put in its access-log record (written with the rest of
/// it). Nothing to do (and no host call) when nothing new was recorded.
pub fn report<P: Proxy>(
    proxy: &P,
    stats: Option<&AccessStats>,
    grant: &Grant,
    logged: &mut LogRecord,
) {
    let new = grant.ledger().take_new();
    if new.is_empty() {
        return;
    }
    for record in &new {
        for id in stats.iter().flat_map(|s| s.counters(record)).flatten() {
            proxy.increment(id, 1);
        }
        log::debug!("toolsift: access {}", item(record));
    }
    let all: Vec<String> = grant.ledger().records().iter().map(item).collect();
    logged.set_verdicts(&all);
}
