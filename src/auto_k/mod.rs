//! `auto_k`: selection to a recall target instead of a guessed `top_k`.
//!
//! Shadowed requests ([`crate::shadow`]) go upstream with every tool, so the tool their model
//! calls is an unbiased draw from the traffic: where it ranked says how many tools a cut must
//! keep. Each such call adds its *slot* (the `top_k` that would have kept it: its place among
//! the tools the caller may see, [`crate::shadow::CallRank::slot`]) to a histogram of its
//! catalog and to one pooled over every catalog. A catalog's k is the smallest whose share of
//! calls within it has a one-sided lower confidence bound (Wilson's score bound, at
//! `confidence`) of at least `keep`: a small sample gets a larger k, never a smaller one
//! (`../shared/docs/calibration.md` states the statistics).
//!
//! What every worker of a VM shares lives in its shared data, under two keys:
//! - the **calibration** ([`Calibration`]): the pooled histogram and one per catalog (at most
//!   [`MAX_CATALOGS`], the least recently calibrated evicted), each halved once it holds more
//!   than [`window`] calls, so that it follows drift;
//! - the **table** ([`Table`]): the k of each calibrated catalog, and of every other
//!   (`fallback`: pooled, or `top_k` with too little data), decided once per period
//!   (`period_s`) by the first worker to see the period start. Every worker reads the same
//!   table, so they use the same k; a k changes at most once per `period_s`, so an agent
//!   loop's tools array stays the same for the provider's prompt cache.
//!
//! Shared data outlives a configuration (it belongs to the `vm_id`, across plugin updates and
//! new `.wasm`s), so each value starts with its layout version and the [`Fingerprint`] of what
//! decides its meaning (`keep`, `min_k`, `max_k`, ...). A value of another version or
//! fingerprint, or one that does not decode whole, is *foreign*: never decoded into a k,
//! counted (`toolsift.auto_k.foreign`) and replaced on the next write. Whatever a table says,
//! the k read from it is bounded by the settings it is read with ([`Table::chosen`], which
//! [`AutoK::chosen`] goes through).
//!
//! Everything here is sans-I/O: it reads and writes a [`SharedBytes`] and takes the clock as
//! an argument; the lifecycle feeds it.

use crate::shared_data::SharedBytes;
use serde::Deserialize;

/// Catalogs whose calls the calibration keeps apart; past it the least recently calibrated
/// is dropped (its calls stay in the pooled histogram).
pub const MAX_CATALOGS: usize = 128;

/// The largest `max_k` accepted: the histograms have a bucket per slot up to it.
pub const MAX_K_LIMIT: usize = 1024;

/// `auto_k` in the configuration.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct AutoKConfig {
    /// The share of calls the kept tools must hold (above 0, below 1): each catalog keeps the
    /// fewest tools whose share of its shadowed calls has a lower confidence bound of at
    /// least this.
    #[cfg_attr(
        not(target_arch = "wasm32"),
        schemars(extend("exclusiveMinimum" = 0, "exclusiveMaximum" = 1))
    )]
    pub keep: f64,
    /// The fewest tools a calibrated k keeps.
    #[serde(
        default = "default_min_k",
        deserialize_with = "crate::json::whole_number"
    )]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(min = 1, max = 1024)))]
    pub min_k: usize,
    /// The most tools a calibrated k keeps (at most 1024): a catalog whose target needs more
    /// is capped here, and says so (`capped=` in `x-toolsift`).
    #[serde(
        default = "default_max_k",
        deserialize_with = "crate::json::whole_number"
    )]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(min = 1, max = 1024)))]
    pub max_k: usize,
    /// Shadowed calls a catalog needs before its own k is used; until then it uses the k of
    /// every catalog's calls pooled, and with fewer pooled calls than this, `top_k`.
    #[serde(
        default = "default_min_calls",
        deserialize_with = "crate::json::whole_number"
    )]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(min = 1)))]
    pub min_calls: usize,
    /// The confidence of the lower bound (0.5 to below 1).
    #[serde(default = "default_confidence")]
    #[cfg_attr(
        not(target_arch = "wasm32"),
        schemars(range(min = 0.5), extend("exclusiveMaximum" = 1))
    )]
    pub confidence: f64,
    /// A catalog's k changes at most once per this many seconds, and every worker uses the
    /// same k (the provider's prompt cache wants a stable tools array).
    #[serde(
        default = "default_period_s",
        deserialize_with = "crate::json::whole_number"
    )]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(min = 1)))]
    pub period_s: usize,
    /// What a request whose k is capped at `max_k` gets for the tools past it: nothing
    /// (absent), or `"find_tools"`: the kept tools plus search mode's meta-tool for the rest.
    #[serde(default, deserialize_with = "crate::json::optional_variant")]
    pub beyond: Option<Beyond>,
    /// The fleet's calibration, as `toolsift calibrate` prints it from every replica's access
    /// logs: each catalog's k is decided from it once, the same on every replica, and nothing
    /// is learned locally. Absent: each Envoy learns from its own shadowed answers.
    #[serde(default)]
    pub calibration: Option<fleet::FleetCalibration>,
}

fn default_min_k() -> usize {
    1
}
fn default_max_k() -> usize {
    64
}
fn default_min_calls() -> usize {
    200
}
fn default_confidence() -> f64 {
    0.95
}
fn default_period_s() -> usize {
    600
}

/// `auto_k.beyond`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Beyond {
    /// The kept tools go with `find_tools`, answered by the gateway, for the rest.
    FindTools,
}

impl AutoKConfig {
    /// `keep` in thousandths, rounded down (`toolsift.auto_k.keep_target_permille`); the
    /// small allowance keeps a decimal such as 0.95, stored as 0.9499…, at 950.
    pub fn keep_permille(&self) -> u64 {
        (self.keep * 1000.0 + 1e-6).floor().max(0.0) as u64
    }

    /// The first field that is out of its range, and why.
    pub fn check(&self) -> Result<(), (String, String)> {
        let out = |field: &str, why: String| Err((field.to_owned(), why));
        if !(self.keep > 0.0 && self.keep < 1.0) {
            return out("keep", "must be above 0 and below 1".into());
        }
        if !(self.confidence >= 0.5 && self.confidence < 1.0) {
            return out("confidence", "must be from 0.5 to below 1".into());
        }
        if !(1..=MAX_K_LIMIT).contains(&self.min_k) {
            return out("min_k", format!("must be 1 to {MAX_K_LIMIT}"));
        }
        if !(1..=MAX_K_LIMIT).contains(&self.max_k) {
            return out("max_k", format!("must be 1 to {MAX_K_LIMIT}"));
        }
        if self.max_k < self.min_k {
            return out("max_k", "must be at least `min_k`".into());
        }
        if self.min_calls == 0 {
            return out("min_calls", "must be at least 1".into());
        }
        if self.period_s == 0 {
            return out("period_s", "must be at least 1".into());
        }
        if let Some(calibration) = &self.calibration {
            calibration
                .check(self)
                .map_err(|(field, why)| (format!("calibration.{field}"), why))?;
        }
        Ok(())
    }

    /// The settings that decide what the VM's calibration and table mean, for their
    /// [`Fingerprint`]: a value written under other settings is another's. A setting that comes
    /// to decide a k (a fleet calibration's identity) is one more line here.
    pub fn meaning(&self) -> Vec<(&'static str, String)> {
        vec![
            ("keep", format!("{:?}", self.keep)),
            ("min_k", self.min_k.to_string()),
            ("max_k", self.max_k.to_string()),
            ("min_calls", self.min_calls.to_string()),
            ("confidence", format!("{:?}", self.confidence)),
            // A table's epoch counts periods: another `period_s` counts them otherwise.
            ("period_s", self.period_s.to_string()),
            (
                "calibration",
                self.calibration
                    .as_ref()
                    .map_or_else(String::new, |c| c.identity()),
            ),
        ]
    }
}

/// Calls a histogram holds before it is halved: old calls weigh less and less, and the
/// estimate follows drift after as many new calls, whatever the traffic's rate.
pub fn window(config: &AutoKConfig) -> f64 {
    (config.min_calls as f64 * 8.0).max(400.0)
}

/// The standard normal quantile at `p` (0 < p < 1): Acklam's rational approximation, relative
/// error under 1.2e-9, which is far finer than any count here resolves.
pub fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    let p = p.clamp(1e-300, 1.0 - 1e-16);
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < 0.02425 {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - 0.02425 {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

/// Wilson's score lower bound on a proportion: `x` successes of `n`, `z` the normal quantile
/// of the bound's confidence. Closed form, and defined for the fractional counts a decayed
/// histogram holds.
pub fn wilson_lower(x: f64, n: f64, z: f64) -> f64 {
    if n <= 0.0 {
        return 0.0;
    }
    let p = (x / n).clamp(0.0, 1.0);
    let z2 = z * z;
    let centre = p + z2 / (2.0 * n);
    let spread = z * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    ((centre - spread) / (1.0 + z2 / n)).max(0.0)
}

/// Calls by slot: bucket `s - 1` holds the calls whose tool only a `top_k` of `s` keeps; the
/// last bucket, those past `max_k`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    counts: Vec<f32>,
}

impl Histogram {
    /// An empty histogram for slots up to `max_k`.
    pub fn new(max_k: usize) -> Histogram {
        Histogram {
            counts: vec![0.0; max_k + 1],
        }
    }

    /// One call whose tool needed `slot` (1-based).
    pub fn add(&mut self, slot: usize) {
        self.add_calls(slot, 1.0);
    }

    /// `calls` calls whose tool needed `slot` (1-based; past `max_k`, the last bucket).
    pub fn add_calls(&mut self, slot: usize, calls: f32) {
        let last = self.counts.len().saturating_sub(1);
        if let Some(c) = self.counts.get_mut(slot.max(1).saturating_sub(1).min(last)) {
            *c += calls;
        }
    }

    pub fn total(&self) -> f64 {
        self.counts.iter().map(|&c| f64::from(c)).sum()
    }

    /// Calls a `top_k` of `k` keeps.
    pub fn within(&self, k: usize) -> f64 {
        self.counts.iter().take(k).map(|&c| f64::from(c)).sum()
    }

    /// Halves every count once the histogram holds more than `window` calls.
    fn decay(&mut self, window: f64) {
        if self.total() > window {
            for c in &mut self.counts {
                *c *= 0.5;
            }
        }
    }

    /// The smallest k in `[min_k, max_k]` whose share kept has a lower bound (normal
    /// quantile `z`) of at least `keep`; `None` without calls. At `max_k` without reaching
    /// it: capped, with the share `max_k` keeps (the point estimate).
    pub fn choose(&self, config: &AutoKConfig, z: f64) -> Option<(usize, Option<f32>)> {
        let n = self.total();
        if n <= 0.0 {
            return None;
        }
        let mut within = 0.0;
        for k in 1..=config.max_k {
            within += f64::from(self.counts.get(k - 1).copied().unwrap_or(0.0));
            if k >= config.min_k && wilson_lower(within, n, z) >= config.keep {
                return Some((k, None));
            }
        }
        Some((config.max_k, Some((within / n) as f32)))
    }
}

impl Histogram {
    /// The k of a catalog without enough calls of its own: these pooled calls' (as `source`)
    /// when they are at least `min_calls`, `top_k` otherwise.
    pub fn fallback(&self, config: &AutoKConfig, top_k: usize, z: f64, source: Source) -> Chosen {
        let enough = self.total() >= config.min_calls as f64;
        match enough.then(|| self.choose(config, z)).flatten() {
            Some((k, capped)) => Chosen { k, source, capped },
            None => Chosen::default_k(top_k),
        }
    }
}

/// Where a request's k came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Its catalog's own calls.
    Calibrated,
    /// Every catalog's calls, pooled: its catalog has fewer than `min_calls`.
    Pooled,
    /// `top_k`: fewer than `min_calls` calls in all.
    Default,
    /// The fleet's calibration (`auto_k.calibration`): its catalog's calls there.
    Fleet,
    /// The fleet's calibration's pooled calls: its catalog has fewer than `min_calls` there.
    FleetPooled,
}

impl Source {
    /// As `x-toolsift`'s `k=` says it.
    pub fn name(self) -> &'static str {
        match self {
            Source::Calibrated => "auto",
            Source::Pooled => "pooled",
            Source::Default => "default",
            Source::Fleet => "fleet",
            Source::FleetPooled => "fleet_pooled",
        }
    }

    /// In the VM's table. The fleet's sources are never written there (its table lives in the
    /// configuration), and a table holding one is foreign ([`Table::is_within`]).
    fn code(self) -> u8 {
        match self {
            Source::Calibrated => 0,
            Source::Pooled => 1,
            Source::Default => 2,
            Source::Fleet => 3,
            Source::FleetPooled => 4,
        }
    }

    fn from_code(code: u8) -> Option<Source> {
        match code {
            0 => Some(Source::Calibrated),
            1 => Some(Source::Pooled),
            2 => Some(Source::Default),
            3 => Some(Source::Fleet),
            4 => Some(Source::FleetPooled),
            _ => None,
        }
    }
}

/// The k a request is selected with, and where it came from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Chosen {
    pub k: usize,
    pub source: Source,
    /// Capped at `max_k`: the share of calls `max_k` keeps.
    pub capped: Option<f32>,
}

impl Chosen {
    /// `top_k`, where no calibrated or pooled k applies.
    pub fn default_k(top_k: usize) -> Chosen {
        Chosen {
            k: top_k,
            source: Source::Default,
            capped: None,
        }
    }

    /// `x-toolsift`'s part: ` k=auto:12`, ` k=auto:64 capped=0.962`.
    pub fn header_suffix(&self) -> String {
        let capped = self
            .capped
            .map(|s| format!(" capped={s:.3}"))
            .unwrap_or_default();
        format!(" k={}:{}{capped}", self.source.name(), self.k)
    }
}

/// A k decided for one period, and since when (seconds since the epoch) it has been that.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decision {
    pub chosen: Chosen,
    pub since: u64,
}

/// What every worker selects with during one period: a k per calibrated catalog, and one for
/// every other.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// The period (`now / period_s`) it was decided for.
    pub epoch: u64,
    pub fallback: Decision,
    pub catalogs: Vec<(u32, Decision)>,
}

impl Table {
    /// The k of catalog `id` under `config` and `top_k`: a calibrated or pooled k clamped to
    /// [`min_k`, `max_k`] (capped only at `max_k`, with a share from 0 to 1), and `top_k`
    /// where the table says default, whatever the table holds (it comes from shared data or a
    /// fleet file, and may have been written under other settings).
    pub fn chosen(&self, id: u32, config: &AutoKConfig, top_k: usize) -> Chosen {
        let chosen = self
            .catalogs
            .iter()
            .find(|(c, _)| *c == id)
            .map_or(self.fallback.chosen, |(_, d)| d.chosen);
        match chosen.source {
            Source::Default => Chosen::default_k(top_k),
            Source::Calibrated | Source::Pooled | Source::Fleet | Source::FleetPooled => {
                let k = chosen.k.clamp(config.min_k, config.max_k);
                Chosen {
                    k,
                    source: chosen.source,
                    capped: chosen
                        .capped
                        .filter(|s| k == config.max_k && (0.0..=1.0).contains(s)),
                }
            }
        }
    }

    fn decision(&self, id: u32) -> Decision {
        self.catalogs
            .iter()
            .find(|(c, _)| *c == id)
            .map_or(self.fallback, |(_, d)| *d)
    }

    /// Whether every k it holds is one `config` and `top_k` could have decided: a calibrated or
    /// pooled k in [`min_k`, `max_k`], a capped one at `max_k` with a share from 0 to 1, and a
    /// default one `top_k`.
    pub fn is_within(&self, config: &AutoKConfig, top_k: usize) -> bool {
        std::iter::once(&self.fallback)
            .chain(self.catalogs.iter().map(|(_, d)| d))
            .all(|d| match d.chosen.source {
                Source::Default => d.chosen.k == top_k && d.chosen.capped.is_none(),
                Source::Fleet | Source::FleetPooled => false,
                Source::Calibrated | Source::Pooled => {
                    (config.min_k..=config.max_k).contains(&d.chosen.k)
                        && d.chosen.capped.is_none_or(|share| {
                            d.chosen.k == config.max_k && (0.0..=1.0).contains(&share)
                        })
                }
            })
    }

    /// The table as the VM's shared data holds it, under `fingerprint`.
    pub fn encode(&self, fingerprint: Fingerprint) -> Vec<u8> {
        let mut out = header(fingerprint);
        out.extend_from_slice(&self.epoch.to_le_bytes());
        put_decision(&mut out, &self.fallback);
        out.extend_from_slice(&(self.catalogs.len() as u16).to_le_bytes());
        for (id, d) in &self.catalogs {
            out.extend_from_slice(&id.to_le_bytes());
            put_decision(&mut out, d);
        }
        out
    }

    /// The table `bytes` hold, when they are one written under `fingerprint` and nothing but
    /// one; `None` for any other bytes.
    pub fn decode(bytes: &[u8], fingerprint: Fingerprint) -> Option<Table> {
        let mut r = Reader::after_header(bytes, fingerprint)?;
        let epoch = r.u64()?;
        let fallback = r.decision()?;
        let n = usize::from(r.u16()?);
        let mut catalogs = Vec::with_capacity(n.min(MAX_CATALOGS));
        for _ in 0..n {
            catalogs.push((r.u32()?, r.decision()?));
        }
        r.end()?;
        Some(Table {
            epoch,
            fallback,
            catalogs,
        })
    }
}

/// One catalog's calls.
#[derive(Debug, Clone, PartialEq)]
pub struct CatalogCalls {
    pub id: u32,
    /// When its last call was learned (seconds since the epoch): the least recent is evicted.
    pub last: u64,
    pub histogram: Histogram,
}

/// Every shadowed call learned, by catalog and pooled.
#[derive(Debug, Clone, PartialEq)]
pub struct Calibration {
    pub pooled: Histogram,
    pub catalogs: Vec<CatalogCalls>,
}

impl Calibration {
    pub fn new(max_k: usize) -> Calibration {
        Calibration {
            pooled: Histogram::new(max_k),
            catalogs: Vec::new(),
        }
    }

    /// Adds the calls of one shadowed answer: `slots`, in catalog `id`, at `now`.
    pub fn learn(&mut self, config: &AutoKConfig, id: u32, slots: &[usize], now: u64) {
        let window = window(config);
        for &slot in slots {
            self.pooled.add(slot);
        }
        self.pooled.decay(window);
        let at = match self.catalogs.iter().position(|c| c.id == id) {
            Some(at) => at,
            None => {
                if self.catalogs.len() >= MAX_CATALOGS {
                    let oldest = (0..self.catalogs.len())
                        .min_by_key(|&i| self.catalogs.get(i).map_or(0, |c| c.last))
                        .unwrap_or(0);
                    self.catalogs.swap_remove(oldest);
                }
                self.catalogs.push(CatalogCalls {
                    id,
                    last: now,
                    histogram: Histogram::new(config.max_k),
                });
                self.catalogs.len() - 1
            }
        };
        if let Some(calls) = self.catalogs.get_mut(at) {
            calls.last = now;
            for &slot in slots {
                calls.histogram.add(slot);
            }
            calls.histogram.decay(window);
        }
    }

    /// The table for `epoch`, decided at `now` from these calls and the table before
    /// (`previous`): a k that would change within `period_s` of its last change stays. Also
    /// returns how many ks changed.
    pub fn decide(
        &self,
        config: &AutoKConfig,
        top_k: usize,
        previous: Option<&Table>,
        epoch: u64,
        now: u64,
    ) -> (Table, usize) {
        let z = normal_quantile(config.confidence);
        let min_calls = config.min_calls as f64;
        let fallback_choice = self.pooled.fallback(config, top_k, z, Source::Pooled);
        let mut changes = 0;
        let mut settle = |candidate: Chosen, before: Option<Decision>| match before {
            None => Decision {
                chosen: candidate,
                since: now,
            },
            Some(before) if before.chosen.k == candidate.k => Decision {
                chosen: candidate,
                since: before.since,
            },
            // Whole seconds: `now` and `since` are each up to a second short of the time they
            // stand for, so only more than `period_s` of them is surely `period_s` apart.
            Some(before) if now.saturating_sub(before.since) <= config.period_s as u64 => before,
            Some(_) => {
                changes += 1;
                Decision {
                    chosen: candidate,
                    since: now,
                }
            }
        };
        let fallback = settle(fallback_choice, previous.map(|t| t.fallback));
        let mut catalogs = Vec::new();
        for calls in &self.catalogs {
            if calls.histogram.total() < min_calls {
                continue;
            }
            let Some((k, capped)) = calls.histogram.choose(config, z) else {
                continue;
            };
            let candidate = Chosen {
                k,
                source: Source::Calibrated,
                capped,
            };
            let before = previous.map(|t| t.decision(calls.id));
            catalogs.push((calls.id, settle(candidate, before)));
        }
        let table = Table {
            epoch,
            fallback,
            catalogs,
        };
        (table, changes)
    }

    /// The calibration as the VM's shared data holds it, under `fingerprint`.
    pub fn encode(&self, fingerprint: Fingerprint) -> Vec<u8> {
        let mut out = header(fingerprint);
        put_histogram(&mut out, &self.pooled);
        out.extend_from_slice(&(self.catalogs.len() as u16).to_le_bytes());
        for c in &self.catalogs {
            out.extend_from_slice(&c.id.to_le_bytes());
            out.extend_from_slice(&c.last.to_le_bytes());
            put_histogram(&mut out, &c.histogram);
        }
        out
    }

    /// The calibration `bytes` hold, its histograms sized for `max_k`, when they are one
    /// written under `fingerprint` (which holds `max_k`) and nothing but one; `None` for any
    /// other bytes. A slot past `max_k` is folded into the last bucket only so that no value
    /// can index past it.
    pub fn decode(bytes: &[u8], fingerprint: Fingerprint, max_k: usize) -> Option<Calibration> {
        let mut r = Reader::after_header(bytes, fingerprint)?;
        let pooled = r.histogram(max_k)?;
        let n = usize::from(r.u16()?);
        let mut catalogs = Vec::with_capacity(n.min(MAX_CATALOGS));
        for _ in 0..n {
            catalogs.push(CatalogCalls {
                id: r.u32()?,
                last: r.u64()?,
                histogram: r.histogram(max_k)?,
            });
        }
        r.end()?;
        Some(Calibration { pooled, catalogs })
    }
}

/// The layout version of both values: another version is foreign. 1 had no fingerprint.
pub const VERSION: u8 = 2;

/// What decides what the VM's `auto_k` values mean ([`AutoKConfig::meaning`], `top_k`, the
/// ranking, ...), as 8 bytes of SHA-256 over them: every value carries the fingerprint of the
/// settings it was written under, and a worker reads only values of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint(pub u64);

impl Fingerprint {
    /// Over `fields`: each a setting's name and its value as text.
    pub fn of(fields: &[(&str, String)]) -> Fingerprint {
        use sha2::{Digest, Sha256};
        let mut hash = Sha256::new();
        for (name, value) in fields {
            hash.update(name.as_bytes());
            hash.update([0]);
            hash.update(value.as_bytes());
            hash.update([0xff]);
        }
        let digest = hash.finalize();
        let mut first = [0u8; 8];
        first.copy_from_slice(digest.get(..8).unwrap_or(&[0; 8]));
        Fingerprint(u64::from_le_bytes(first))
    }
}

/// What every value starts with: [`VERSION`], then the fingerprint (u64 LE).
pub fn header(fingerprint: Fingerprint) -> Vec<u8> {
    let mut out = vec![VERSION];
    out.extend_from_slice(&fingerprint.0.to_le_bytes());
    out
}

fn put_decision(out: &mut Vec<u8>, d: &Decision) {
    out.extend_from_slice(&(d.chosen.k.min(usize::from(u16::MAX)) as u16).to_le_bytes());
    out.push(d.chosen.source.code());
    out.extend_from_slice(&d.chosen.capped.unwrap_or(f32::NAN).to_le_bytes());
    out.extend_from_slice(&d.since.to_le_bytes());
}

/// Only the buckets that hold calls: most catalogs' calls fall within a few slots.
fn put_histogram(out: &mut Vec<u8>, h: &Histogram) {
    let held: Vec<(usize, f32)> = h
        .counts
        .iter()
        .enumerate()
        .filter(|(_, c)| **c > 0.0)
        .map(|(i, c)| (i, *c))
        .collect();
    out.extend_from_slice(&(held.len() as u16).to_le_bytes());
    for (i, c) in held {
        out.extend_from_slice(&(i as u16).to_le_bytes());
        out.extend_from_slice(&c.to_le_bytes());
    }
}

/// Reads what [`Table::encode`] and [`Calibration::encode`] write; `None` past the end.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    /// The bytes after the [`header`] of a value of this version written under `fingerprint`;
    /// `None` for another's.
    fn after_header(bytes: &'a [u8], fingerprint: Fingerprint) -> Option<Reader<'a>> {
        let mut r = Reader(bytes);
        (r.u8()? == VERSION && r.u64()? == fingerprint.0).then_some(r)
    }
    /// Nothing left: a value with bytes past its end is not one this layout wrote.
    fn end(&self) -> Option<()> {
        self.0.is_empty().then_some(())
    }
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take::<1>().map(|[b]| b)
    }
    fn u16(&mut self) -> Option<u16> {
        self.take().map(u16::from_le_bytes)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take().map(u64::from_le_bytes)
    }
    fn f32(&mut self) -> Option<f32> {
        self.take().map(f32::from_le_bytes)
    }
    fn decision(&mut self) -> Option<Decision> {
        let k = usize::from(self.u16()?);
        let source = Source::from_code(self.u8()?)?;
        let capped = Some(self.f32()?).filter(|s| s.is_finite());
        let since = self.u64()?;
        Some(Decision {
            chosen: Chosen { k, source, capped },
            since,
        })
    }
    fn histogram(&mut self, max_k: usize) -> Option<Histogram> {
        let mut h = Histogram::new(max_k);
        let last = max_k;
        for _ in 0..self.u16()? {
            let at = usize::from(self.u16()?).min(last);
            let count = self.f32()?;
            if !(count.is_finite() && count >= 0.0) {
                return None;
            }
            if let Some(c) = h.counts.get_mut(at) {
                *c += count;
                // Counts folded into one bucket may add up past f32: no such value was written.
                if !c.is_finite() {
                    return None;
                }
            }
        }
        Some(h)
    }
}

/// How often a write to the shared data is tried again when another worker wrote first.
const CAS_TRIES: usize = 4;

/// The shared data's key of the calibration. One key for every configuration: a configuration
/// update finds the values of the one before, reads them as foreign and replaces them, so that
/// updates leave nothing behind. Plugins sharing a VM keep theirs apart by `stat_prefix`
/// ([`crate::shared_data::Namespaced`]).
pub const CALIBRATION_KEY: &str = "toolsift.auto_k.calibration";
/// The shared data's key of the period's table.
pub const TABLE_KEY: &str = "toolsift.auto_k.table";

/// What [`AutoK::refresh`] did: ks it changed in publishing a table, and foreign values it
/// read (and ignored).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Refreshed {
    pub changes: usize,
    pub foreign: usize,
}

/// What [`AutoK::learn`] did: whether the calls were written, and whether the calibration it
/// found was foreign (replaced by one of these calls alone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Learned {
    pub written: bool,
    pub foreign: bool,
}

/// A worker's side of `auto_k`: the configuration, the fingerprint of its values, and the
/// table of the current period as this worker read it.
#[derive(Debug, Clone)]
pub struct AutoK {
    pub config: AutoKConfig,
    top_k: usize,
    fingerprint: Fingerprint,
    table: Option<Table>,
    /// With `calibration`: the fleet's table, decided once from it. Then the VM's shared data
    /// is neither read nor written.
    fleet: Option<Table>,
}

impl AutoK {
    /// For a plugin of `top_k` and this `auto_k`; `more` names the plugin's other settings a
    /// k depends on (the ranking), which the fingerprint of its values holds along with
    /// [`AutoKConfig::meaning`] and `top_k`.
    pub fn new(config: AutoKConfig, top_k: usize, more: &[(&str, String)]) -> AutoK {
        let mut fields: Vec<(&str, String)> = config.meaning();
        fields.push(("top_k", top_k.to_string()));
        fields.extend(more.iter().cloned());
        let fleet = config.calibration.as_ref().map(|c| c.table(&config, top_k));
        AutoK {
            fingerprint: Fingerprint::of(&fields),
            config,
            top_k,
            table: None,
            fleet,
        }
    }

    /// Whether this worker learns from shadowed answers into the VM's shared data: not with
    /// the fleet's calibration, which every replica must read alike.
    pub fn learns(&self) -> bool {
        self.fleet.is_none()
    }

    /// The fingerprint its values carry.
    pub fn fingerprint(&self) -> Fingerprint {
        self.fingerprint
    }

    /// The k of catalog `id` in the table this worker read last (`top_k` before any): always
    /// in [`min_k`, `max_k`], or `top_k` where no calibrated or pooled k applies, whatever the
    /// table holds.
    pub fn chosen(&self, id: u32) -> Chosen {
        let table = self.fleet.as_ref().or(self.table.as_ref());
        table.map_or(Chosen::default_k(self.top_k), |t| {
            t.chosen(id, &self.config, self.top_k)
        })
    }

    /// The period `now` falls in.
    fn epoch(&self, now: u64) -> u64 {
        now / (self.config.period_s.max(1) as u64)
    }

    /// Whether the table this worker holds is `now`'s period's: then [`AutoK::refresh`] has
    /// nothing to do (the request path's only cost until the period ends).
    pub fn is_current(&self, now: u64) -> bool {
        self.fleet.is_some()
            || self
                .table
                .as_ref()
                .is_some_and(|t| t.epoch == self.epoch(now))
    }

    /// The table `bytes` hold, when it is this worker's settings' and within their bounds.
    fn own_table(&self, bytes: &[u8]) -> Option<Table> {
        Table::decode(bytes, self.fingerprint).filter(|t| t.is_within(&self.config, self.top_k))
    }

    /// The calibration `store` holds, when it is this worker's settings' (empty when there is
    /// none), and whether there was another's in its place.
    fn own_calibration<S: SharedBytes>(&self, store: &S) -> (Calibration, bool, Option<u32>) {
        let (bytes, version) = store.get(CALIBRATION_KEY);
        let Some(bytes) = bytes else {
            return (Calibration::new(self.config.max_k), false, version);
        };
        match Calibration::decode(&bytes, self.fingerprint, self.config.max_k) {
            Some(calibration) => (calibration, false, version),
            None => (Calibration::new(self.config.max_k), true, version),
        }
    }

    /// At a new period: reads the period's table from `store`, or decides it (from the
    /// calibration and the table before) and publishes it when no worker has yet. A foreign
    /// table or calibration is ignored, counted, and the table replaced.
    pub fn refresh<S: SharedBytes>(&mut self, store: &S, now: u64) -> Refreshed {
        if self.is_current(now) {
            return Refreshed::default();
        }
        let epoch = self.epoch(now);
        let (mut foreign_table, mut foreign_calibration) = (false, false);
        for _ in 0..CAS_TRIES {
            let (bytes, version) = store.get(TABLE_KEY);
            let previous = bytes.as_deref().and_then(|b| self.own_table(b));
            foreign_table |= bytes.is_some() && previous.is_none();
            if let Some(table) = previous.as_ref().filter(|t| t.epoch >= epoch) {
                self.table = Some(table.clone());
                return Refreshed {
                    changes: 0,
                    foreign: usize::from(foreign_table),
                };
            }
            let (calibration, foreign, _) = self.own_calibration(store);
            foreign_calibration |= foreign;
            let previous = previous.or_else(|| self.table.clone());
            let (table, changes) =
                calibration.decide(&self.config, self.top_k, previous.as_ref(), epoch, now);
            if store.set(TABLE_KEY, &table.encode(self.fingerprint), version) {
                self.table = Some(table);
                return Refreshed {
                    changes,
                    foreign: usize::from(foreign_table) + usize::from(foreign_calibration),
                };
            }
        }
        // The store refused every write: this worker goes on with the table it had (or
        // `top_k`), and tries again on its next request.
        Refreshed {
            changes: 0,
            foreign: usize::from(foreign_table) + usize::from(foreign_calibration),
        }
    }

    /// Adds one shadowed answer's calls (`slots`, of catalog `id`) to the VM's calibration,
    /// in place of a foreign one. Not written when another worker's writes kept it out.
    pub fn learn<S: SharedBytes>(&self, store: &S, id: u32, slots: &[usize], now: u64) -> Learned {
        let mut foreign = false;
        if !self.learns() {
            return Learned {
                written: false,
                foreign,
            };
        }
        if slots.is_empty() {
            return Learned {
                written: true,
                foreign,
            };
        }
        for _ in 0..CAS_TRIES {
            let (mut calibration, found_foreign, version) = self.own_calibration(store);
            foreign |= found_foreign;
            calibration.learn(&self.config, id, slots, now);
            if store.set(
                CALIBRATION_KEY,
                &calibration.encode(self.fingerprint),
                version,
            ) {
                return Learned {
                    written: true,
                    foreign,
                };
            }
        }
        Learned {
            written: false,
            foreign,
        }
    }

    /// What the VM has learned under this worker's settings, for a report.
    pub fn read_calibration<S: SharedBytes>(&self, store: &S) -> Calibration {
        self.own_calibration(store).0
    }
}

pub mod fleet;

#[cfg(test)]
pub(crate) mod tests;
