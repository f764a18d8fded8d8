//! What the fleet calls after what: tool transitions learned from its shadowed requests.
//!
//! A conversation's later turns often say nothing a tool's text has ("and what does it hold
//! now?"), while the tools its history called say what usually comes next (`cat` after `ls`, an
//! order after a quote). A shadowed request's record names the tools its history had called
//! (`history=`, [`MAX_HISTORY`] at most, in the order of their first call) beside the calls its
//! model then made (`calls=`). `toolsift calibrate` counts, over every replica's logs, each
//! call after each tool the history had called: a pair `[earlier, next, count]`, per catalog and
//! pooled ([`Counter`]). Counts are sums, so logs read together in any order or split give the
//! same pairs. They are bounded: the [`MAX_SUCCESSORS`] most frequent next tools of each earlier
//! tool, [`MAX_PAIRS`] pairs a catalog and in the pool, [`MAX_CATALOGS`] catalogs (the ones with
//! the most pairs counted).
//!
//! They travel in the calibration object `toolsift calibrate` prints (`transitions`), so one run
//! over the fleet's logs yields `auto_k`'s histograms and these, and the same control-plane loop
//! (ECDS, `WasmPlugin`, `EnvoyExtensionPolicy`) delivers both. A request with a history looks up
//! its next tools in them ([`NextTools`], indexed when the configuration is read) and ranks them
//! beside its question ([`fuse`]). Everything here is pure: no clock, no host.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;

mod channel;
pub use channel::{NextTools, RRF_K, fuse};

/// At most this many tools of a request's history are recorded (the latest first called).
pub const MAX_HISTORY: usize = 16;
/// At most this many next tools are kept for one earlier tool: the most frequent.
pub const MAX_SUCCESSORS: usize = 8;
/// At most this many pairs a catalog, and in the pool.
pub const MAX_PAIRS: usize = 2048;
/// At most this many catalogs keep pairs of their own.
pub const MAX_CATALOGS: usize = 128;
/// The longest tool name a pair may hold (characters): longer ones are no tool of any provider.
pub const MAX_NAME: usize = 256;

/// `[earlier, next, count]`: `count` calls of `next` in requests whose history had called
/// `earlier`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(schemars::JsonSchema))]
pub struct Pair(
    #[cfg_attr(not(target_arch = "wasm32"), schemars(length(min = 1, max = 256)))] pub String,
    #[cfg_attr(not(target_arch = "wasm32"), schemars(length(min = 1, max = 256)))] pub String,
    #[serde(deserialize_with = "crate::json::whole_number")]
    #[cfg_attr(
        not(target_arch = "wasm32"),
        schemars(range(min = 1, max = 4_294_967_295u64))
    )]
    pub u64,
);

/// One catalog's pairs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct CatalogPairs {
    /// 8 lowercase hex digits (`catalog=` in the record).
    #[cfg_attr(
        not(target_arch = "wasm32"),
        schemars(regex(pattern = r"^[0-9a-f]{8}$"), extend("examples" = ["3fa2b1c0"]))
    )]
    pub catalog: String,
    /// At most 2048.
    #[cfg_attr(not(target_arch = "wasm32"), schemars(length(max = 2048)))]
    pub pairs: Vec<Pair>,
}

/// `transitions` of a calibration, as `toolsift calibrate` prints it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Transitions {
    /// Every catalog's pairs together (at most 2048).
    #[serde(default)]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(length(max = 2048)))]
    pub pooled: Vec<Pair>,
    /// The pairs of each catalog (at most 128 catalogs).
    #[serde(default, deserialize_with = "crate::json::objects")]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(length(max = 128)))]
    pub catalogs: Vec<CatalogPairs>,
}

/// The field that cannot be used, and why.
pub type Refused = (String, String);

impl Transitions {
    /// Whether a plugin can take them: the first field that cannot, and why. Too many pairs or
    /// catalogs, a catalog that is not 8 hex digits or is listed twice, an empty or overlong
    /// name, a count of 0 or past what a configuration's count holds are refused; a pair of a
    /// tool the request's catalog lacks is not (it is ignored where it does not apply).
    pub fn check(&self) -> Result<(), Refused> {
        check_pairs("pooled", &self.pooled)?;
        if self.catalogs.len() > MAX_CATALOGS {
            return Err((
                "catalogs".to_owned(),
                format!(
                    "{} catalogs: at most {MAX_CATALOGS} (`toolsift calibrate` keeps those with the \
                     most pairs)",
                    self.catalogs.len()
                ),
            ));
        }
        let mut ids = Vec::with_capacity(self.catalogs.len());
        for (i, c) in self.catalogs.iter().enumerate() {
            let field = format!("catalogs[{i}]");
            let Some(id) = catalog_id(&c.catalog) else {
                return Err((
                    format!("{field}.catalog"),
                    format!("{:?} is not 8 lowercase hex digits", c.catalog),
                ));
            };
            if ids.contains(&id) {
                return Err((
                    format!("{field}.catalog"),
                    format!("{} is listed twice", c.catalog),
                ));
            }
            ids.push(id);
            check_pairs(&format!("{field}.pairs"), &c.pairs)?;
        }
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.pooled.is_empty() && self.catalogs.iter().all(|c| c.pairs.is_empty())
    }
}

/// A catalog's 8 hex digits (`catalog=` in the record) as its id; `None` for anything else.
pub fn catalog_id(name: &str) -> Option<u32> {
    let lower = name
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    (name.len() == 8 && lower)
        .then(|| u32::from_str_radix(name, 16).ok())
        .flatten()
}

fn check_pairs(field: &str, pairs: &[Pair]) -> Result<(), Refused> {
    if pairs.len() > MAX_PAIRS {
        return Err((
            field.to_owned(),
            format!(
                "{} pairs: at most {MAX_PAIRS} (`toolsift calibrate` keeps the most frequent)",
                pairs.len()
            ),
        ));
    }
    for (i, Pair(earlier, next, count)) in pairs.iter().enumerate() {
        for (at, name) in [(0, earlier), (1, next)] {
            let chars = name.chars().count();
            if chars == 0 || chars > MAX_NAME {
                return Err((
                    format!("{field}[{i}][{at}]"),
                    format!("a tool name of 1 to {MAX_NAME} characters, not {chars}"),
                ));
            }
        }
        if *count == 0 || *count > crate::json::MAX_COUNT {
            return Err((
                format!("{field}[{i}][2]"),
                format!("is {count}: a count from 1 to {}", crate::json::MAX_COUNT),
            ));
        }
    }
    Ok(())
}

/// Pairs counted from records, before they are bounded.
#[derive(Debug, Default, Clone)]
pub struct Counter {
    pooled: HashMap<(String, String), u64>,
    catalogs: HashMap<u32, HashMap<(String, String), u64>>,
}

impl Counter {
    /// One shadowed request of catalog `catalog`: its history's tools and its model's calls.
    /// Each distinct call after each distinct tool of the history counts once (a tool the
    /// history had called, called again, is no transition).
    pub fn add(&mut self, catalog: u32, history: &[String], calls: &[String]) {
        let mut earlier: Vec<&String> = history.iter().take(MAX_HISTORY).collect();
        earlier.sort();
        earlier.dedup();
        let mut next: Vec<&String> = calls.iter().filter(|c| !history.contains(c)).collect();
        next.sort();
        next.dedup();
        let bounded = |n: &&&String| !n.is_empty() && n.chars().count() <= MAX_NAME;
        for e in earlier.iter().filter(bounded) {
            for n in next.iter().filter(bounded) {
                let key = ((*e).clone(), (*n).clone());
                for counts in [&mut self.pooled, self.catalogs.entry(catalog).or_default()] {
                    let count = counts.entry(key.clone()).or_default();
                    *count = count.saturating_add(1);
                }
            }
        }
    }

    /// Another counter's pairs added to these (a replica's logs read apart).
    pub fn absorb(&mut self, other: Counter) {
        let add = |into: &mut HashMap<(String, String), u64>,
                   from: HashMap<(String, String), u64>| {
            for (k, n) in from {
                let count = into.entry(k).or_default();
                *count = count.saturating_add(n);
            }
        };
        add(&mut self.pooled, other.pooled);
        for (id, pairs) in other.catalogs {
            add(self.catalogs.entry(id).or_default(), pairs);
        }
    }

    /// The pairs a calibration printed, added to these (calibrations of disjoint records
    /// merged: one calibration of all of them while within the bounds).
    pub fn add_transitions(&mut self, t: &Transitions) {
        let add = |into: &mut HashMap<(String, String), u64>, pairs: &[Pair]| {
            for Pair(e, n, c) in pairs {
                let count = into.entry((e.clone(), n.clone())).or_default();
                *count = count.saturating_add(*c);
            }
        };
        add(&mut self.pooled, &t.pooled);
        for c in &t.catalogs {
            if let Some(id) = catalog_id(&c.catalog) {
                add(self.catalogs.entry(id).or_default(), &c.pairs);
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.pooled.is_empty()
    }

    /// The transitions these counts give, bounded ([`MAX_SUCCESSORS`], [`MAX_PAIRS`],
    /// [`MAX_CATALOGS`]: the catalogs with the most pairs counted, ties by name), in one order
    /// whatever the order the records came in.
    pub fn transitions(self) -> Transitions {
        let mut catalogs: Vec<(u64, String, Vec<Pair>)> = self
            .catalogs
            .into_iter()
            .map(|(id, pairs)| {
                let total = pairs.values().fold(0u64, |a, n| a.saturating_add(*n));
                (total, format!("{id:08x}"), bounded(pairs))
            })
            .collect();
        catalogs.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        catalogs.truncate(MAX_CATALOGS);
        catalogs.sort_by(|a, b| a.1.cmp(&b.1));
        Transitions {
            pooled: bounded(self.pooled),
            catalogs: catalogs
                .into_iter()
                .map(|(_, catalog, pairs)| CatalogPairs { catalog, pairs })
                .collect(),
        }
    }
}

/// One list's pairs bounded: each earlier tool's [`MAX_SUCCESSORS`] most frequent next tools,
/// then the [`MAX_PAIRS`] most frequent of those (equal counts by name), listed by earlier tool
/// then by count. Past what a configuration's count holds, every count halves: the shares stay.
fn bounded(counts: HashMap<(String, String), u64>) -> Vec<Pair> {
    let mut pairs: Vec<Pair> = counts
        .into_iter()
        .map(|((e, n), c)| Pair(e, n, c))
        .collect();
    let by_count = |a: &Pair, b: &Pair| {
        b.2.cmp(&a.2)
            .then_with(|| a.0.cmp(&b.0))
            .then_with(|| a.1.cmp(&b.1))
    };
    pairs.sort_by(by_count);
    let mut kept_of: HashMap<String, usize> = HashMap::new();
    pairs.retain(|p| {
        let kept = kept_of.entry(p.0.clone()).or_default();
        *kept += 1;
        *kept <= MAX_SUCCESSORS
    });
    pairs.truncate(MAX_PAIRS);
    while pairs.iter().any(|p| p.2 > crate::json::MAX_COUNT) {
        pairs.iter_mut().for_each(|p| p.2 /= 2);
        pairs.retain(|p| p.2 > 0);
    }
    pairs.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| by_count(a, b)));
    pairs
}

#[cfg(test)]
mod tests;
