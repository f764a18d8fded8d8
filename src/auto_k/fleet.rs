//! The fleet's calibration: `auto_k`'s histograms counted over every replica's records
//! (`toolsift calibrate`, which reads them with `crate::offline::calibrate`) and given to every replica
//! in its configuration (`auto_k.calibration`).
//!
//! One Envoy's `auto_k` learns in its VM's shared data: replicas learn apart, disagree on k,
//! and forget at a restart. A fleet calibration is the same histograms (a catalog's calls by
//! the slot that would have kept them, and every catalog's pooled) counted from the access
//! logs of all of them. Every replica given one computes the same table from it, once, when
//! the configuration is read ([`FleetCalibration::table`]): the same k for the same catalog on
//! every replica from its first request, with no shared data read on the request path. A
//! catalog the calibration does not hold (or holds with fewer than `min_calls` calls) takes
//! the pooled k; with fewer pooled calls than `min_calls`, `top_k`.
//!
//! It travels through what operators already run: the logs they collect, and the control plane
//! that updates the plugin configuration (ECDS, Istio's `WasmPlugin`, Envoy Gateway's
//! `EnvoyExtensionPolicy`). Everything here is pure: the CLI and the configuration feed it.

use super::{
    AutoKConfig, Chosen, Decision, Fingerprint, Histogram, MAX_CATALOGS, Source, Table,
    normal_quantile,
};
use crate::transitions::{Counter, Transitions};
use serde::{Deserialize, Serialize};

/// The format of a calibration; another is refused.
pub const FORMAT: u32 = 1;

/// The most calls a count may hold: any count of the configuration's ([`crate::json::MAX_COUNT`]).
/// `toolsift calibrate` halves every count of a calibration that would hold more, which keeps
/// their shares.
pub const MAX_COUNT: u64 = crate::json::MAX_COUNT;

/// `auto_k.calibration`, as `toolsift calibrate` prints it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct FleetCalibration {
    /// The format: 1.
    #[serde(deserialize_with = "crate::json::whole_number")]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(min = 1, max = 1)))]
    pub version: u32,
    /// The `max_k` it was counted for: a call whose slot is past it counts at `max_k + 1`.
    /// It must be the plugin's `auto_k.max_k`.
    #[serde(deserialize_with = "crate::json::whole_number")]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(min = 1, max = 1024)))]
    pub max_k: usize,
    /// Every shadowed call, whatever its catalog.
    #[serde(deserialize_with = "crate::json::object")]
    pub pooled: SlotCounts,
    /// The calls of each catalog (at most 128, the most called), by its 8 hex digits
    /// (`catalog=` in the record).
    #[serde(default, deserialize_with = "crate::json::objects")]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(length(max = 128)))]
    pub catalogs: Vec<CatalogCounts>,
    /// What the fleet called after what ([`crate::transitions`]), counted from the same
    /// records: read by the ranking, not by `auto_k`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::json::optional_object"
    )]
    pub transitions: Option<Transitions>,
    /// Where the calls came from; not read by the plugin.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::json::optional_object"
    )]
    pub from: Option<Provenance>,
}

/// Calls by slot.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct SlotCounts {
    /// Calls in all: the sum of `slots`' counts.
    #[serde(deserialize_with = "crate::json::whole_number")]
    pub calls: u64,
    /// `[slot, calls]` pairs, slots ascending from 1 to `max_k + 1`, only those with calls.
    #[serde(deserialize_with = "slot_pairs")]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(with = "Vec<[u32; 2]>"))]
    pub slots: Vec<(usize, u64)>,
}

/// One catalog's calls.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct CatalogCounts {
    /// 8 lowercase hex digits (`catalog=` in the record).
    #[cfg_attr(
        not(target_arch = "wasm32"),
        schemars(regex(pattern = r"^[0-9a-f]{8}$"), extend("examples" = ["3fa2b1c0"]))
    )]
    pub catalog: String,
    /// Its calls in all: the sum of `slots`' counts.
    #[serde(deserialize_with = "crate::json::whole_number")]
    pub calls: u64,
    /// As `pooled.slots`.
    #[serde(deserialize_with = "slot_pairs")]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(with = "Vec<[u32; 2]>"))]
    pub slots: Vec<(usize, u64)>,
}

/// What a calibration was counted from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    /// The logs read, as named to `toolsift calibrate`.
    #[serde(default)]
    pub files: Vec<String>,
    /// The time of the first record counted (RFC 3339, as logged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first: Option<String>,
    /// The time of the last record counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<String>,
    /// toolsift records read.
    #[serde(default, deserialize_with = "crate::json::whole_number")]
    pub records: u64,
    /// Shadowed records whose calls were counted.
    #[serde(default, deserialize_with = "crate::json::whole_number")]
    pub shadowed: u64,
    /// Lines skipped: not JSON, or too long.
    #[serde(default, deserialize_with = "crate::json::whole_number")]
    pub malformed: u64,
    /// Lines without a toolsift record.
    #[serde(default, deserialize_with = "crate::json::whole_number")]
    pub foreign: u64,
    /// Records that do not read.
    #[serde(default, deserialize_with = "crate::json::whole_number")]
    pub unreadable: u64,
    /// Records read before (the same time and text), counted once.
    #[serde(default, deserialize_with = "crate::json::whole_number")]
    pub duplicate: u64,
    /// Calls of catalogs past the limit: they count in `pooled` alone.
    #[serde(default, deserialize_with = "crate::json::whole_number")]
    pub pooled_only: u64,
}

/// `[slot, calls]` pairs, each a whole number as [`crate::json::whole_number`] reads one (Istio
/// hands `pluginConfig` over with doubles).
fn slot_pairs<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<(usize, u64)>, D::Error> {
    #[derive(Deserialize)]
    struct Pair(
        #[serde(deserialize_with = "crate::json::whole_number")] usize,
        #[serde(deserialize_with = "crate::json::whole_number")] u64,
    );
    Ok(Vec::<Pair>::deserialize(d)?
        .into_iter()
        .map(|Pair(slot, calls)| (slot, calls))
        .collect())
}

/// A calibration that cannot be used: the field (under `calibration.`), and why.
pub type Refused = (String, String);

fn refused(field: impl Into<String>, why: impl Into<String>) -> Refused {
    (field.into(), why.into())
}

impl SlotCounts {
    fn check(&self, field: &str, max_k: usize) -> Result<(), Refused> {
        check_slots(field, self.calls, &self.slots, max_k)
    }

    fn histogram(&self, max_k: usize) -> Histogram {
        histogram(&self.slots, max_k)
    }
}

/// Slots ascending within 1..=`max_k + 1`, counts bounded, `calls` their sum.
fn check_slots(
    field: &str,
    calls: u64,
    slots: &[(usize, u64)],
    max_k: usize,
) -> Result<(), Refused> {
    let mut sum: u64 = 0;
    let mut before = 0;
    for (i, &(slot, count)) in slots.iter().enumerate() {
        if slot <= before || slot > max_k + 1 {
            return Err(refused(
                format!("{field}.slots[{i}]"),
                format!(
                    "slot {slot}: slots go from 1 to max_k + 1 ({}), ascending, each once",
                    max_k + 1
                ),
            ));
        }
        if count > MAX_COUNT {
            return Err(refused(
                format!("{field}.slots[{i}]"),
                format!("{count} calls: at most {MAX_COUNT}"),
            ));
        }
        before = slot;
        sum += count;
    }
    if sum != calls {
        return Err(refused(
            format!("{field}.calls"),
            format!("is {calls}, but its slots hold {sum} calls"),
        ));
    }
    Ok(())
}

fn histogram(slots: &[(usize, u64)], max_k: usize) -> Histogram {
    let mut h = Histogram::new(max_k);
    for &(slot, count) in slots {
        h.add_calls(slot, count as f32);
    }
    h
}

/// A catalog's 8 hex digits as its id (`catalog=` in the record): the transitions' own reading.
pub use crate::transitions::catalog_id;

impl FleetCalibration {
    /// Whether it can be used by a plugin of `config`: the first field that cannot, and why.
    pub fn check(&self, config: &AutoKConfig) -> Result<(), Refused> {
        if self.version != FORMAT {
            return Err(refused(
                "version",
                format!(
                    "is {}; this toolsift reads calibrations of version {FORMAT}",
                    self.version
                ),
            ));
        }
        if self.max_k != config.max_k {
            return Err(refused(
                "max_k",
                format!(
                    "is {}, but `auto_k.max_k` is {}: calibrate again with `toolsift calibrate \
                     --max-k {}`",
                    self.max_k, config.max_k, config.max_k
                ),
            ));
        }
        if self.catalogs.len() > MAX_CATALOGS {
            return Err(refused(
                "catalogs",
                format!(
                    "{} catalogs: at most {MAX_CATALOGS} (`toolsift calibrate` keeps the most \
                     called, and pools the rest)",
                    self.catalogs.len()
                ),
            ));
        }
        self.pooled.check("pooled", self.max_k)?;
        let mut ids = Vec::with_capacity(self.catalogs.len());
        let mut in_catalogs: u64 = 0;
        for (i, c) in self.catalogs.iter().enumerate() {
            let field = format!("catalogs[{i}]");
            let Some(id) = catalog_id(&c.catalog) else {
                return Err(refused(
                    format!("{field}.catalog"),
                    format!("{:?} is not 8 lowercase hex digits", c.catalog),
                ));
            };
            if ids.contains(&id) {
                return Err(refused(
                    format!("{field}.catalog"),
                    format!("{} is listed twice", c.catalog),
                ));
            }
            ids.push(id);
            check_slots(&field, c.calls, &c.slots, self.max_k)?;
            in_catalogs = in_catalogs.saturating_add(c.calls);
        }
        if let Some(t) = &self.transitions {
            t.check()
                .map_err(|(field, why)| refused(format!("transitions.{field}"), why))?;
        }
        if in_catalogs > self.pooled.calls {
            return Err(refused(
                "pooled.calls",
                format!(
                    "is {}, fewer than its catalogs' {in_catalogs}: the pooled calls hold every \
                     catalog's",
                    self.pooled.calls
                ),
            ));
        }
        Ok(())
    }

    /// What identifies it (its counts, not where they came from), for the fingerprint of the
    /// VM's `auto_k` values: 16 hex digits.
    pub fn identity(&self) -> String {
        let mut fields = vec![
            ("version", self.version.to_string()),
            ("max_k", self.max_k.to_string()),
            ("pooled", format!("{:?}", self.pooled.slots)),
        ];
        let mut catalogs: Vec<&CatalogCounts> = self.catalogs.iter().collect();
        catalogs.sort_by(|a, b| a.catalog.cmp(&b.catalog));
        for c in catalogs {
            fields.push(("catalog", format!("{} {:?}", c.catalog, c.slots)));
        }
        format!("{:016x}", Fingerprint::of(&fields).0)
    }

    /// The k of every catalog, as `auto_k` decides it from these calls (its bound, `min_k`,
    /// `max_k`, `min_calls`): a catalog with at least `min_calls` calls its own (`fleet`), every
    /// other the pooled calls' (`fleet_pooled`), or `top_k` with fewer pooled calls. The same
    /// calibration and configuration give the same table on every replica and every run.
    pub fn table(&self, config: &AutoKConfig, top_k: usize) -> Table {
        let z = normal_quantile(config.confidence);
        let min_calls = config.min_calls as u64;
        let decided = |chosen| Decision { chosen, since: 0 };
        let pooled = self.pooled.histogram(config.max_k);
        let fallback = pooled.fallback(config, top_k, z, Source::FleetPooled);
        let catalogs = self
            .catalogs
            .iter()
            .filter(|c| c.calls >= min_calls)
            .filter_map(|c| {
                let id = catalog_id(&c.catalog)?;
                let (k, capped) = histogram(&c.slots, config.max_k).choose(config, z)?;
                let source = Source::Fleet;
                Some((id, decided(Chosen { k, source, capped })))
            })
            .collect();
        Table {
            epoch: 0,
            fallback: decided(fallback),
            catalogs,
        }
    }

    /// Calibrations of disjoint records (each replica's) as one: the same as one calibration of
    /// all their records, while their catalogs stay within [`MAX_CATALOGS`] (past it, the least
    /// called are pooled, as `toolsift calibrate` does). All must share a `max_k`; `None` when
    /// they do not, or there are none.
    pub fn merge(parts: &[FleetCalibration]) -> Option<FleetCalibration> {
        let first = parts.first()?;
        if parts
            .iter()
            .any(|p| p.max_k != first.max_k || p.version != first.version)
        {
            return None;
        }
        let mut counts = Counts::new(first.max_k);
        let mut from = Provenance::default();
        let mut transitions = Counter::default();
        for part in parts {
            if let Some(t) = &part.transitions {
                transitions.add_transitions(t);
            }
            counts.add_counts(None, &part.pooled.slots);
            for c in &part.catalogs {
                counts.add_counts(catalog_id(&c.catalog), &c.slots);
            }
            if let Some(p) = &part.from {
                from.absorb(p);
            }
        }
        let mut merged = counts.calibration(Some(from));
        merged.transitions = (!transitions.is_empty()).then(|| transitions.transitions());
        Some(merged)
    }
}

impl Provenance {
    /// Each count within what the configuration reads.
    fn cap(&mut self) {
        for n in [
            &mut self.records,
            &mut self.shadowed,
            &mut self.malformed,
            &mut self.foreign,
            &mut self.unreadable,
            &mut self.duplicate,
            &mut self.pooled_only,
        ] {
            *n = (*n).min(MAX_COUNT);
        }
    }

    fn absorb(&mut self, other: &Provenance) {
        self.files.extend(other.files.iter().cloned());
        self.first = [self.first.take(), other.first.clone()]
            .into_iter()
            .flatten()
            .min();
        self.last = [self.last.take(), other.last.clone()]
            .into_iter()
            .flatten()
            .max();
        self.records += other.records;
        self.shadowed += other.shadowed;
        self.malformed += other.malformed;
        self.foreign += other.foreign;
        self.unreadable += other.unreadable;
        self.duplicate += other.duplicate;
        self.pooled_only += other.pooled_only;
    }
}

/// Catalogs counted apart while counting, past which a new catalog's calls are pooled alone.
pub const MAX_COUNTED_CATALOGS: usize = 10_000;

/// Calls being counted: pooled and by catalog (sparse: most calls fall within a few slots).
#[derive(Debug, Clone)]
pub struct Counts {
    max_k: usize,
    pooled: std::collections::BTreeMap<usize, u64>,
    catalogs: std::collections::BTreeMap<u32, std::collections::BTreeMap<usize, u64>>,
    /// Calls whose catalog came past [`MAX_COUNTED_CATALOGS`].
    catalogs_pooled: u64,
}

impl Counts {
    pub fn new(max_k: usize) -> Counts {
        Counts {
            max_k,
            pooled: Default::default(),
            catalogs: Default::default(),
            catalogs_pooled: 0,
        }
    }

    /// One call of catalog `id` whose tool needed `slot`.
    pub fn add(&mut self, id: u32, slot: usize) {
        self.add_counts(Some(id), &[(slot, 1)]);
        self.add_counts(None, &[(slot, 1)]);
    }

    /// Calls by slot to catalog `id`, or to the pooled ones (`None`). A slot past `max_k`
    /// counts at `max_k + 1`.
    fn add_counts(&mut self, id: Option<u32>, slots: &[(usize, u64)]) {
        let past = self.max_k + 1;
        let known = self.catalogs.len() < MAX_COUNTED_CATALOGS;
        let into = match id {
            None => &mut self.pooled,
            Some(id) if known || self.catalogs.contains_key(&id) => {
                self.catalogs.entry(id).or_default()
            }
            Some(_) => {
                self.catalogs_pooled += 1;
                return;
            }
        };
        for &(slot, n) in slots {
            let at = into.entry(slot.clamp(1, past)).or_default();
            *at = at.saturating_add(n).min(MAX_COUNT);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.pooled.is_empty()
    }

    /// The calibration of these calls: the [`MAX_CATALOGS`] most called catalogs (ties by
    /// name), every call pooled.
    pub fn calibration(self, from: Option<Provenance>) -> FleetCalibration {
        let pairs = |m: &std::collections::BTreeMap<usize, u64>| -> Vec<(usize, u64)> {
            m.iter().map(|(s, n)| (*s, *n)).collect()
        };
        let total = |m: &std::collections::BTreeMap<usize, u64>| m.values().sum::<u64>();
        // Past what a configuration's count holds, every count halves: the shares stay.
        let mut this = self;
        while total(&this.pooled) > MAX_COUNT {
            for m in std::iter::once(&mut this.pooled).chain(this.catalogs.values_mut()) {
                m.values_mut().for_each(|n| *n /= 2);
                m.retain(|_, n| *n > 0);
            }
        }
        let this = this;
        let mut catalogs: Vec<CatalogCounts> = this
            .catalogs
            .iter()
            .map(|(id, m)| CatalogCounts {
                catalog: format!("{id:08x}"),
                calls: total(m),
                slots: pairs(m),
            })
            .collect();
        catalogs.sort_by(|a, b| {
            b.calls
                .cmp(&a.calls)
                .then_with(|| a.catalog.cmp(&b.catalog))
        });
        let dropped: u64 = catalogs.iter().skip(MAX_CATALOGS).map(|c| c.calls).sum();
        catalogs.truncate(MAX_CATALOGS);
        catalogs.sort_by(|a, b| a.catalog.cmp(&b.catalog));
        let from = from.map(|mut p| {
            p.pooled_only += dropped + this.catalogs_pooled;
            p.cap();
            p
        });
        FleetCalibration {
            version: FORMAT,
            max_k: this.max_k,
            pooled: SlotCounts {
                calls: total(&this.pooled),
                slots: pairs(&this.pooled),
            },
            catalogs,
            transitions: None,
            from,
        }
    }
}

#[cfg(test)]
#[path = "fleet_tests.rs"]
mod tests;
