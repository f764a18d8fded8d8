//! `auto_k` measured offline (issue 45): does a k learned from shadowed calls keep the share of
//! calls it promises on calls it has not seen, what does it send, and would per-request sets
//! (split conformal on a score normalised per request) send fewer tools for the same share?
//! Run with `make bench-auto-k` (`cargo run --release --example auto_k -- [--seeds N]`).
//!
//! Each shared dataset is ranked natively by the filter's own keyword ranking (the OpenAI tools
//! array read by [`Catalog::build`], each query bounded by [`head_and_tail`] as a request's is,
//! [`Catalog::rank`]; the relevant tools' ranks are checked against [`evaluate`]'s), in three
//! layouts:
//! - **200-tool catalogs**, built as `benches/shadow_replay.py` builds one: the relevant tools
//!   of its queries first, then the dataset's first others. The queries are dealt to catalogs
//!   at a stride (the datasets list them grouped by kind), as few catalogs as keep every one's
//!   relevant tools within 200; each catalog has its own queries.
//! - **the same, shuffled**: each catalog's tools in a fixed random order. A tool no term of
//!   the question matches ranks where its catalog lists it, and the first layout lists the
//!   relevant tools first, which favours any fixed k; this one does not.
//! - **the whole catalog**, every query.
//!
//! For each seed, each catalog's queries are shuffled and halved. A calibration query is a
//! shadowed request whose model calls its relevant tools: each gives one slot, its rank (no
//! pins, no access rules), learned with [`Calibration::learn`] in a shuffled arrival order;
//! [`Calibration::decide`] then gives each catalog its k (its own, pooled, or `top_k`, by
//! `min_calls`). A held-out query is a filtered request: a call is kept when its slot is within
//! the k, and the request sends min(k, catalog) tools. Beside it, the `top_k` that
//! `toolsift report` names for the same share (the point estimate over the calibration half's
//! calls, as `src/offline/report.rs` computes `smallest_k`), held out the same way.
//!
//! The per-request sets calibrate a threshold on the same calibration calls, per catalog where
//! `auto_k` calibrates per catalog and pooled where it pools, on a nonconformity score:
//! - `1 − s/s_top`, the called tool's score relative to its request's top score;
//! - the softmax mass of the tools scored above the called tool (APS-style), over scores
//!   relative to the top, at a temperature chosen on the calibration half alone (the one whose
//!   threshold gives the calibration requests the fewest tools);
//! - the rank itself, which makes split conformal a fixed k: the control that tells the
//!   normalisation's effect apart from the threshold rule's.
//!
//! Each score gets two thresholds: split conformal's (the ⌈(n+1)·keep⌉-th smallest calibration
//! score, a guarantee in expectation, as the issue asks), and the smallest score whose share
//! within has a Wilson lower bound of `keep` ([`wilson_lower`], `auto_k`'s own certification, so
//! that a per-request set and `auto_k`'s k can be compared at the same held-out share). A held-out
//! request keeps every tool whose score is within the threshold, bounded by [1, `max_k`].
//!
//! The verdict applies the rule (a held-out share within .01 of `auto_k`'s, or above,
//! with fewer tools on average; medians over the seeds), says in how many seeds it held, and
//! also compares each set with the fixed k of its own threshold rule. Last, each score's fewest
//! tools for each share with the threshold set in hindsight: what it could give at best.
//!
//! `--shrink` (issue 55, item 5) prints only its own comparison, over 40 seeds unless
//! `--seeds` says otherwise: `auto_k` as it is (a catalog's own histogram from `min_calls`
//! calls, else the pooled one) against every catalog's share within k shrunk toward the pooled
//! share with m pseudo-calls (an empirical-Bayes prior), the bound counting either the
//! catalog's own calls or those plus the pseudo-calls (at most the pooled calls). m and the
//! count are chosen on the first half of the seeds and reported on the second. Each is learned
//! from all of the calibration half's calls (a fleet's) and from a quarter (one replica of four,
//! cutting a quarter of the held-out requests), at `min_calls` 200 and the 50.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)] // a benchmark harness, not filter code

use std::collections::HashMap;
use std::path::PathBuf;
use toolsift::auto_k::{
    AutoKConfig, Calibration, Histogram, MAX_K_LIMIT, Source, normal_quantile, wilson_lower,
};
use toolsift::config::Config;
use toolsift::dialects::{Dialect, MAX_QUERY_BYTES};
use toolsift::offline::eval::{Dataset, evaluate};
use toolsift::pipeline::Engine;
use toolsift::rank::Catalog;
use toolsift::text::head_and_tail;

#[path = "shared/catalogs.rs"]
mod catalogs;
use catalogs::{catalogs_in, seeded, shuffle};

const DATASETS: [&str; 3] = ["seal_tools", "toolbench", "livemcpbench"];
const KEEPS: [f64; 2] = [0.95, 0.99];
const CONFIDENCE: f64 = 0.95;
/// `auto_k`'s default: a catalog's own k needs this many calls; the pooled k as many.
const MIN_CALLS: usize = 200;
/// Where a dataset's calibration half holds fewer than [`MIN_CALLS`] calls (livemcpbench's 94
/// queries give about 140), `auto_k` answers `top_k`; this lower floor shows what the bound
/// makes of those calls.
const LOW_MIN_CALLS: usize = 100;
/// The largest `max_k` `auto_k` takes: it never binds below the catalog's size, and binds only
/// in the two whole catalogs larger than it (said where it does).
const MAX_K: usize = MAX_K_LIMIT;
const MIN_K: usize = 1;
const DEFAULT_SEEDS: u64 = 20;
/// Softmax temperatures, as fractions of the request's top score.
const TEMPERATURES: [f64; 7] = [0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0];
/// Held-out shares within this of another count as the same (the rule).
const SAME_SHARE: f64 = 0.01;
/// A per-request set's win counts as robust when it holds in this share of the seeds too.
const ROBUST: f64 = 0.75;
/// The layouts, in the order of the tables.
const LAYOUTS: [&str; 3] = ["200-tool", "200-tool, shuffled", "whole"];

/// A nonconformity score: how far down its request's ranking a tool stands.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Score {
    /// The 1-based rank: a threshold on it is a fixed k.
    Rank,
    /// `1 − s/s_top`.
    Relative,
    /// The softmax mass (logits `s/(t·s_top)`) of the tools scored strictly above.
    Softmax(f64),
}

impl Score {
    fn all() -> Vec<Score> {
        let mut all = vec![Score::Rank, Score::Relative];
        all.extend(TEMPERATURES.iter().map(|&t| Score::Softmax(t)));
        all
    }

    /// The softmax's temperature; 0 for the scores without one.
    fn temperature(self) -> f64 {
        match self {
            Score::Softmax(t) => t,
            Score::Rank | Score::Relative => 0.0,
        }
    }

    /// The score at every place of a ranking whose scores (best first) are `scores`:
    /// nondecreasing, so that the tools within any threshold are a head of the ranking, and
    /// equal for tied tools, so that a threshold keeps ties together. A request whose top
    /// score is 0 matched no tool: every tool ties with the top (a per-request set keeps them
    /// all, up to `max_k`).
    fn along(self, scores: &[f32]) -> Vec<f32> {
        let top = f64::from(scores.first().copied().unwrap_or(0.0));
        match self {
            Score::Rank => (1..=scores.len()).map(|r| r as f32).collect(),
            Score::Relative if top <= 0.0 => vec![0.0; scores.len()],
            Score::Relative => scores
                .iter()
                .map(|&s| (1.0 - f64::from(s) / top) as f32)
                .collect(),
            Score::Softmax(_) if top <= 0.0 => vec![0.0; scores.len()],
            Score::Softmax(t) => {
                // Shifted by the top logit, so the largest weight is 1.
                let weights: Vec<f64> = scores
                    .iter()
                    .map(|&s| ((f64::from(s) / top - 1.0) / t).exp())
                    .collect();
                let total: f64 = weights.iter().sum();
                let mut out = Vec::with_capacity(scores.len());
                let (mut above, mut tie_start) = (0.0, 0);
                for (i, &s) in scores.iter().enumerate() {
                    if i > 0 && s != scores[i - 1] {
                        above += weights[tie_start..i].iter().sum::<f64>();
                        tie_start = i;
                    }
                    out.push((above / total) as f32);
                }
                out
            }
        }
    }
}

/// One request's scores under one [`Score`].
struct Profile {
    /// At each of its ranking's first `MAX_K + 1` places (all of them in a smaller catalog): a
    /// threshold keeps as many tools as these within it, and the place past `MAX_K` says the
    /// bound binds.
    head: Vec<f32>,
    /// At each relevant tool, in `Query::slots` order: its calibration score.
    calls: Vec<f32>,
}

/// One query of a catalog, ranked by the filter's code.
struct Query {
    /// Each distinct relevant tool's slot: the `top_k` that keeps it (its 1-based rank: no
    /// pins, no access rules), what a shadowed request's call of it adds to the calibration.
    slots: Vec<usize>,
    /// One per [`Score::all`], in that order.
    profiles: Vec<Profile>,
    /// Its top score is 0: no term of the question is in any tool.
    unmatched: bool,
    /// The slots of the relevant tools no term of the question is in (score 0): they rank
    /// after every matched tool in catalog order, so their slot is where the catalog happens
    /// to list them.
    zero_score_slots: Vec<usize>,
}

struct RankedCatalog {
    tools: usize,
    queries: Vec<Query>,
}

/// A dataset in one layout: its catalogs, each with its own queries.
struct Layout {
    dataset: &'static str,
    name: &'static str,
    catalogs: Vec<RankedCatalog>,
}

impl Layout {
    fn calls(&self) -> usize {
        self.catalogs
            .iter()
            .flat_map(|c| &c.queries)
            .map(|q| q.slots.len())
            .sum()
    }
}

/// Ranks every query of `catalog` as the filter does. The slots are `toolsift eval`'s ranks of
/// each query's distinct relevant tools; the ranking here gives the scores along them, and is
/// checked to put those tools at the same places.
fn rank(catalog: &Dataset, config: &Config) -> RankedCatalog {
    let weights = Engine::new(config.clone()).weights;
    let index = Catalog::build(Dialect::OpenaiChat, &catalog.tools_array(), weights)
        .unwrap_or_else(|p| panic!("{}: not a tools array ({})", catalog.name, p.reason()));
    // Entry i is line i (`evaluate` checks it).
    let entry_of: HashMap<&str, usize> = catalog
        .tools
        .iter()
        .enumerate()
        .map(|(i, t)| (t.name.as_str(), i))
        .collect();
    let evaluated = evaluate(catalog, config, weights, &[1], &|_: &str| 0, &mut |_| {})
        .unwrap_or_else(|e| panic!("{}: {e}", catalog.name));
    let scores_all = Score::all();
    let mut rank_of = vec![0usize; catalog.tools.len()];
    let queries: Vec<Query> = catalog
        .queries
        .iter()
        .zip(&evaluated.per_query)
        .map(|(q, evaluated)| {
            let ranking = index.rank(&head_and_tail(&q.query, MAX_QUERY_BYTES));
            for (i, s) in ranking.iter().enumerate() {
                rank_of[s.entry] = i + 1;
            }
            let slots: Vec<usize> = evaluated
                .relevant_ranks
                .iter()
                .map(|(name, r)| {
                    let slot = r.expect("every relevant tool is in its catalog");
                    assert_eq!(
                        rank_of[entry_of[name.as_str()]],
                        slot,
                        "{} query {}: {name} ranks apart from eval's",
                        catalog.name,
                        q.id
                    );
                    slot
                })
                .collect();
            let scores: Vec<f32> = ranking.iter().map(|s| s.score).collect();
            let profiles = scores_all
                .iter()
                .map(|score| {
                    let along = score.along(&scores);
                    Profile {
                        calls: slots.iter().map(|&s| along[s - 1]).collect(),
                        head: along.into_iter().take(MAX_K + 1).collect(),
                    }
                })
                .collect();
            Query {
                zero_score_slots: slots
                    .iter()
                    .copied()
                    .filter(|&s| scores[s - 1] <= 0.0)
                    .collect(),
                slots,
                profiles,
                unmatched: scores.first().is_none_or(|&s| s <= 0.0),
            }
        })
        .collect();
    RankedCatalog {
        tools: catalog.tools.len(),
        queries,
    }
}

/// One seed's halves.
struct Split {
    /// Per catalog, the indices of its calibration queries.
    calibration: Vec<Vec<usize>>,
    /// The held-out requests, (catalog, query).
    held_out: Vec<(usize, usize)>,
    /// The calibration requests' arrival order, (catalog, query): the calibration decays with
    /// what came before, so the order is drawn too.
    arrivals: Vec<(usize, usize)>,
}

fn split(layout: &Layout, seed: u64) -> Split {
    let mut rng = seeded(seed);
    let (mut calibration, mut held_out) = (Vec::new(), Vec::new());
    for (c, catalog) in layout.catalogs.iter().enumerate() {
        let mut order: Vec<usize> = (0..catalog.queries.len()).collect();
        shuffle(&mut order, &mut rng);
        let held = order.split_off(order.len() / 2);
        calibration.push(order);
        held_out.extend(held.into_iter().map(|q| (c, q)));
    }
    let mut arrivals: Vec<(usize, usize)> = calibration
        .iter()
        .enumerate()
        .flat_map(|(c, qs)| qs.iter().map(move |&q| (c, q)))
        .collect();
    shuffle(&mut arrivals, &mut rng);
    Split {
        calibration,
        held_out,
        arrivals,
    }
}

/// How a held-out request of one catalog is cut.
#[derive(Debug, Clone, Copy)]
enum Cut {
    /// Its first k tools.
    Fixed(usize),
    /// Every tool whose score (index into [`Score::all`]) is within `q`, bounded by
    /// [`MIN_K`, `MAX_K`].
    Within { score: usize, q: f32 },
}

impl Cut {
    /// Tools sent to a request of `catalog`, and whether the bound made it so.
    fn tools(self, query: &Query, catalog: &RankedCatalog) -> (usize, bool) {
        match self {
            Cut::Fixed(k) => (k.min(catalog.tools), false),
            Cut::Within { score, q } => {
                let within = query.profiles[score].head.partition_point(|&x| x <= q);
                let bounded = within.clamp(MIN_K, MAX_K);
                (bounded.min(catalog.tools), bounded != within)
            }
        }
    }
}

/// Some requests (the held-out half) under one cut per catalog.
#[derive(Debug, Clone, Default)]
struct Outcome {
    share: f64,
    mean_tools: f64,
    median_tools: f64,
    /// Requests whose set the [`MIN_K`, `MAX_K`] bound changed, as a share.
    bound_binds: f64,
}

/// `requests` (catalog, query) each cut by its catalog's cut.
fn outcome(layout: &Layout, requests: &[(usize, usize)], cut_of: &dyn Fn(usize) -> Cut) -> Outcome {
    let (mut calls, mut kept, mut binds) = (0, 0, 0);
    let mut sent = Vec::new();
    for &(c, q) in requests {
        let catalog = &layout.catalogs[c];
        let query = &catalog.queries[q];
        let (tools, bound) = cut_of(c).tools(query, catalog);
        calls += query.slots.len();
        kept += query.slots.iter().filter(|&&s| s <= tools).count();
        binds += usize::from(bound);
        sent.push(tools as f64);
    }
    let requests = sent.len().max(1) as f64;
    sent.sort_by(f64::total_cmp);
    Outcome {
        share: kept as f64 / calls.max(1) as f64,
        mean_tools: sent.iter().sum::<f64>() / requests,
        median_tools: median(&sent),
        bound_binds: binds as f64 / requests,
    }
}

/// How a per-request threshold is set from calibration scores.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Rule {
    /// Split conformal: the ⌈(n+1)·keep⌉-th smallest (all, if that is past n).
    Conformal,
    /// The smallest whose share within has a Wilson lower bound of `keep`, at [`CONFIDENCE`].
    Wilson,
}

impl Rule {
    fn threshold(self, mut scores: Vec<f32>, keep: f64) -> f32 {
        scores.sort_by(f32::total_cmp);
        let n = scores.len();
        match self {
            Rule::Conformal => {
                // The small epsilon keeps (n+1)·keep from rounding past a whole number.
                let place = ((n + 1) as f64 * keep - 1e-9).ceil() as usize;
                if place == 0 || place > n {
                    f32::INFINITY
                } else {
                    scores[place - 1]
                }
            }
            Rule::Wilson => {
                let z = normal_quantile(CONFIDENCE);
                (0..n)
                    // The last of a run of ties: a threshold keeps them all.
                    .filter(|&i| scores.get(i + 1) != Some(&scores[i]))
                    .find(|&i| wilson_lower((i + 1) as f64, n as f64, z) >= keep)
                    .map_or(f32::INFINITY, |i| scores[i])
            }
        }
    }

    fn name(self) -> &'static str {
        match self {
            Rule::Conformal => "conformal",
            Rule::Wilson => "Wilson",
        }
    }
}

/// A per-request set's score, before a temperature is chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Family {
    Rank,
    Relative,
    Softmax,
}

impl Family {
    /// The scores of [`Score::all`] (their indices) the family chooses among.
    fn candidates(self) -> Vec<usize> {
        Score::all()
            .iter()
            .enumerate()
            .filter(|(_, score)| {
                matches!(
                    (self, score),
                    (Family::Rank, Score::Rank)
                        | (Family::Relative, Score::Relative)
                        | (Family::Softmax, Score::Softmax(_))
                )
            })
            .map(|(i, _)| i)
            .collect()
    }

    fn name(self) -> &'static str {
        match self {
            Family::Rank => "rank (a fixed k)",
            Family::Relative => "1 − s/s_top",
            Family::Softmax => "softmax mass above",
        }
    }
}

/// The methods compared, in the order of the tables.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Method {
    /// `auto_k` as the filter decides it.
    AutoK,
    /// The fixed `top_k` `toolsift report` names.
    Report,
    PerRequest(Family, Rule),
}

impl Method {
    fn all() -> Vec<Method> {
        let mut all = vec![Method::AutoK, Method::Report];
        for family in [Family::Rank, Family::Relative, Family::Softmax] {
            for rule in [Rule::Conformal, Rule::Wilson] {
                all.push(Method::PerRequest(family, rule));
            }
        }
        all
    }

    fn name(self) -> String {
        match self {
            Method::AutoK => "auto_k (Wilson bound, per catalog)".into(),
            Method::Report => "report's top_k (point estimate)".into(),
            // The same bound as auto_k's, over every calibration call (no decay).
            Method::PerRequest(Family::Rank, Rule::Wilson) => {
                "rank (a fixed k), Wilson: auto_k without decay".into()
            }
            Method::PerRequest(family, rule) => format!("{}, {}", family.name(), rule.name()),
        }
    }
}

/// What one seed gave one method.
#[derive(Debug, Clone, Default)]
struct Trial {
    outcome: Outcome,
    /// The k of `auto_k` (the median over catalogs) and of the report; 0 for the sets.
    k: f64,
    /// The softmax temperature chosen (median over pools), else 0.
    temperature: f64,
}

/// What `auto_k` decided in one seed, beyond its k.
#[derive(Debug, Clone, Default)]
struct Decided {
    /// Calls learned, and the weight the pooled histogram holds of them once halved past
    /// `auto_k::window` (the n its bound is computed with).
    calibration_calls: usize,
    held_after_decay: f64,
    sources: Vec<Source>,
    /// Per catalog capped at `max_k`: the share of calibration calls `max_k` keeps, as
    /// `Chosen::capped` says it (`capped=` in `x-toolsift`).
    capped: Vec<f32>,
}

/// One (layout, min_calls, keep) case over every seed.
struct Case {
    dataset: &'static str,
    layout: &'static str,
    catalogs: usize,
    min_calls: usize,
    keep: f64,
    /// Per method ([`Method::all`] order), per seed.
    trials: Vec<Vec<Trial>>,
    decided: Vec<Decided>,
}

impl Case {
    fn trials_of(&self, method: Method) -> &[Trial] {
        let at = Method::all()
            .iter()
            .position(|&m| m == method)
            .expect("a method of Method::all");
        &self.trials[at]
    }

    /// Whether auto_k calibrated any catalog (else every method is `top_k`).
    fn calibrated(&self) -> bool {
        self.decided
            .iter()
            .any(|d| d.sources.iter().any(|&s| s != Source::Default))
    }
}

/// The `auto_k` measured: `keep` and `min_calls`, the rest as the constants above say.
fn auto_k_config(keep: f64, min_calls: usize) -> AutoKConfig {
    let config = AutoKConfig {
        keep,
        min_k: MIN_K,
        max_k: MAX_K,
        min_calls,
        confidence: CONFIDENCE,
        period_s: 600,
        beyond: None,
        calibration: None,
    };
    config.check().expect("a valid auto_k");
    config
}

fn run_case(layout: &Layout, min_calls: usize, keep: f64, seeds: u64, top_k: usize) -> Case {
    let config = auto_k_config(keep, min_calls);
    let methods = Method::all();
    let mut trials = vec![Vec::new(); methods.len()];
    let mut decided = Vec::new();
    for seed in 0..seeds {
        let split = split(layout, seed);
        // auto_k: every calibration request learned as it arrives, then one decision.
        let calibration = learned(layout, &split.arrivals, &config);
        let (table, _) = calibration.decide(&config, top_k, None, 0, 0);
        let chosen: Vec<_> = (0..layout.catalogs.len())
            .map(|c| table.chosen(c as u32, &config, top_k))
            .collect();
        decided.push(Decided {
            calibration_calls: split
                .arrivals
                .iter()
                .map(|&(c, q)| layout.catalogs[c].queries[q].slots.len())
                .sum(),
            held_after_decay: calibration.pooled.total(),
            sources: chosen.iter().map(|c| c.source).collect(),
            capped: chosen.iter().filter_map(|c| c.capped).collect(),
        });
        // Which catalogs' calibration calls set a catalog's per-request threshold: the same
        // as its k's (its own, all pooled, or none: `top_k`).
        let pool_of = |c: usize| -> Option<Vec<usize>> {
            match chosen[c].source {
                Source::Calibrated | Source::Fleet => Some(vec![c]),
                Source::Pooled | Source::FleetPooled => Some((0..layout.catalogs.len()).collect()),
                Source::Default => None,
            }
        };
        let calibration_queries = |pool: &[usize]| -> Vec<&Query> {
            pool.iter()
                .flat_map(|&c| {
                    split.calibration[c]
                        .iter()
                        .map(move |&q| &layout.catalogs[c].queries[q])
                })
                .collect()
        };
        for (method, trials) in methods.iter().zip(&mut trials) {
            let trial = match *method {
                Method::AutoK => {
                    let ks: Vec<f64> = chosen.iter().map(|c| c.k as f64).collect();
                    Trial {
                        outcome: outcome(layout, &split.held_out, &|c| Cut::Fixed(chosen[c].k)),
                        k: median(&sorted(ks)),
                        temperature: 0.0,
                    }
                }
                Method::Report => {
                    let all: Vec<usize> = (0..layout.catalogs.len()).collect();
                    let slots: Vec<usize> = calibration_queries(&all)
                        .iter()
                        .flat_map(|q| q.slots.iter().copied())
                        .collect();
                    let k = report_smallest_k(&slots, keep);
                    Trial {
                        outcome: outcome(layout, &split.held_out, &|_| Cut::Fixed(k)),
                        k: k as f64,
                        temperature: 0.0,
                    }
                }
                Method::PerRequest(family, rule) => {
                    let cuts: Vec<(Cut, f64)> = (0..layout.catalogs.len())
                        .map(|c| match pool_of(c) {
                            None => (Cut::Fixed(top_k), 0.0),
                            Some(pool) => {
                                per_request_cut(&calibration_queries(&pool), family, rule, keep)
                            }
                        })
                        .collect();
                    let temperatures: Vec<f64> = cuts.iter().map(|(_, t)| *t).collect();
                    Trial {
                        outcome: outcome(layout, &split.held_out, &|c| cuts[c].0),
                        k: 0.0,
                        temperature: median(&sorted(temperatures)),
                    }
                }
            };
            trials.push(trial);
        }
    }
    Case {
        dataset: layout.dataset,
        layout: layout.name,
        catalogs: layout.catalogs.len(),
        min_calls,
        keep,
        trials,
        decided,
    }
}

/// The per-request cut calibrated on `queries`' calls, and the temperature it used (0 for
/// the scores without one). The softmax's temperature is the one whose threshold gives these
/// same calibration requests the fewest tools on average: chosen on the calibration half alone.
fn per_request_cut(queries: &[&Query], family: Family, rule: Rule, keep: f64) -> (Cut, f64) {
    let threshold = |score: usize| {
        let calls: Vec<f32> = queries
            .iter()
            .flat_map(|q| q.profiles[score].calls.iter().copied())
            .collect();
        rule.threshold(calls, keep)
    };
    let calibration_tools = |score: usize, q: f32| -> usize {
        queries
            .iter()
            .map(|query| {
                query.profiles[score]
                    .head
                    .partition_point(|&x| x <= q)
                    .clamp(MIN_K, MAX_K)
            })
            .sum()
    };
    let (score, q) = family
        .candidates()
        .into_iter()
        .map(|score| (score, threshold(score)))
        .min_by_key(|&(score, q)| calibration_tools(score, q))
        .expect("a family has a score");
    (Cut::Within { score, q }, Score::all()[score].temperature())
}

/// The smallest k whose calls within reach `keep` of `slots`, as `toolsift report`'s
/// `smallest_k` finds it (`within · den ≥ calls · num`, in whole numbers), but not stopped at
/// the report's 50: where it is past 50, the report says "more than 50".
fn report_smallest_k(slots: &[usize], keep: f64) -> usize {
    let (num, den) = ((keep * 1000.0).round() as usize, 1000);
    let calls = slots.len();
    let mut by_slot = slots.to_vec();
    by_slot.sort_unstable();
    (1..=by_slot.last().copied().unwrap_or(1))
        .find(|&k| by_slot.partition_point(|&s| s <= k) * den >= calls * num)
        .unwrap_or(1)
}

fn sorted(mut values: Vec<f64>) -> Vec<f64> {
    values.sort_by(f64::total_cmp);
    values
}

fn median(sorted: &[f64]) -> f64 {
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// `median (min–max)` of one figure over the seeds.
fn spread(values: Vec<f64>, decimals: usize) -> String {
    let v = sorted(values);
    let (lo, hi) = (
        v.first().copied().unwrap_or(0.0),
        v.last().copied().unwrap_or(0.0),
    );
    let m = median(&v);
    if (hi - lo).abs() < 1e-9 {
        format!("{m:.decimals$}")
    } else {
        format!("{m:.decimals$} ({lo:.decimals$}–{hi:.decimals$})")
    }
}

fn share(x: f64) -> String {
    format!("{x:.3}").trim_start_matches('0').to_owned()
}

fn short_of(trials: &[Trial], level: f64) -> usize {
    trials
        .iter()
        .filter(|t| t.outcome.share < level - 1e-12)
        .count()
}

fn median_of(trials: &[Trial], figure: impl Fn(&Trial) -> f64) -> f64 {
    median(&sorted(trials.iter().map(figure).collect()))
}

fn source_names(decided: &[Decided]) -> String {
    let mut names: Vec<&str> = decided
        .iter()
        .flat_map(|d| d.sources.iter().map(|s| s.name()))
        .collect();
    names.sort_unstable();
    names.dedup();
    names.join("/")
}

/// Each shared dataset in each layout, ranked by the filter's code, one at a time (a ranked
/// layout holds every query's scores).
fn each_layout(config: &Config, mut f: impl FnMut(Layout)) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/datasets");
    for name in DATASETS {
        let dir = root.join(name);
        let dataset =
            Dataset::load(&dir.join("tools.jsonl"), &dir.join("queries.jsonl")).expect("dataset");
        for layout_name in LAYOUTS {
            f(Layout {
                dataset: name,
                name: layout_name,
                catalogs: catalogs_in(&dataset, layout_name)
                    .iter()
                    .map(|c| rank(c, config))
                    .collect(),
            });
        }
    }
}

fn main() {
    if std::env::args().any(|a| a == "--shrink") {
        return shrink_main();
    }
    let seeds = catalogs::seeds_argument("auto_k", DEFAULT_SEEDS);
    let config = Config::default();
    let top_k = config.top_k;
    let mut cases = Vec::new();
    let mut hindsight = Vec::new();
    println!("## Layouts\n");
    println!(
        "| dataset | catalogs | tools per catalog | queries | calls | calls ranked past 50 | calls of a zero-score tool | their median slot | questions matching no tool |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|");
    each_layout(&config, |layout| {
        print_layout(&layout);
        hindsight.push(Hindsight::of(&layout));
        let calls = layout.calls();
        let mut floors = vec![MIN_CALLS];
        if calls / 2 < MIN_CALLS {
            floors.push(LOW_MIN_CALLS);
        }
        for &min_calls in &floors {
            for keep in KEEPS {
                cases.push(run_case(&layout, min_calls, keep, seeds, top_k));
            }
        }
    });
    println!(
        "\n{seeds} seeds; confidence {CONFIDENCE}, max_k {MAX_K}, min_k {MIN_K}, top_k {top_k} (no calibration). Figures: median over seeds (min–max).\n"
    );
    print_calibration(&cases);
    print_per_request(&cases);
    print_verdict(&cases);
    print_hindsight(&hindsight);
}

/// The fewest tools each score needs for each share, the threshold set in hindsight.
struct Hindsight {
    dataset: &'static str,
    layout: &'static str,
    /// Per keep of [`KEEPS`]: per family (rank, relative, softmax), what [`in_hindsight`]
    /// gives.
    tools: Vec<Vec<(f64, f64, f64)>>,
}

impl Hindsight {
    fn of(layout: &Layout) -> Hindsight {
        let families = [Family::Rank, Family::Relative, Family::Softmax];
        Hindsight {
            dataset: layout.dataset,
            layout: layout.name,
            tools: KEEPS
                .iter()
                .map(|&keep| families.map(|f| in_hindsight(layout, f, keep)).to_vec())
                .collect(),
        }
    }
}

/// The fewest tools on average with which one threshold on `family`'s score (pooled over the
/// catalogs) keeps `target` of every query's calls, the threshold chosen on those same calls:
/// no calibration error, so the most the score can give. Also the temperature it took, and
/// the share kept (below `target` when even `max_k` tools per request do not reach it).
fn in_hindsight(layout: &Layout, family: Family, target: f64) -> (f64, f64, f64) {
    let requests: Vec<(usize, usize)> = layout
        .catalogs
        .iter()
        .enumerate()
        .flat_map(|(c, catalog)| (0..catalog.queries.len()).map(move |q| (c, q)))
        .collect();
    family
        .candidates()
        .into_iter()
        .map(|score| {
            let mut thresholds: Vec<f32> = requests
                .iter()
                .flat_map(|&(c, q)| layout.catalogs[c].queries[q].profiles[score].calls.clone())
                .collect();
            thresholds.sort_by(f32::total_cmp);
            thresholds.dedup();
            let at = |q: f32| outcome(layout, &requests, &|_| Cut::Within { score, q });
            // The share kept grows with the threshold: the first that reaches the target.
            let first = thresholds.partition_point(|&q| at(q).share < target);
            let q = thresholds.get(first).copied().unwrap_or(f32::INFINITY);
            let reached = at(q);
            (
                reached.mean_tools,
                Score::all()[score].temperature(),
                reached.share,
            )
        })
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .expect("a family has a score")
}

fn print_hindsight(rows: &[Hindsight]) {
    println!("\n## C. The same share in hindsight: mean tools each score needs\n");
    println!(
        "One threshold over all of a layout's queries, set on their own calls (the softmax's temperature too): what a score could give with no calibration error.\n"
    );
    println!(
        "| dataset | catalogs | keep | fixed k | 1 − s/s_top | softmax mass above (temperature) |"
    );
    println!("|---|---|---:|---:|---:|---:|");
    for row in rows {
        for (&keep, tools) in KEEPS.iter().zip(&row.tools) {
            // Where max_k tools per request fall short of the share: the share they keep.
            let cell = |(mean_tools, _, kept): (f64, f64, f64)| {
                if kept < keep {
                    format!("{mean_tools:.1} (keeps only {})", share(kept))
                } else {
                    format!("{mean_tools:.1}")
                }
            };
            println!(
                "| {} | {} | {keep} | {} | {} | {} ({:.2}) |",
                row.dataset,
                row.layout,
                cell(tools[0]),
                cell(tools[1]),
                cell(tools[2]),
                tools[2].1,
            );
        }
    }
}

fn print_layout(layout: &Layout) {
    let queries: Vec<&Query> = layout.catalogs.iter().flat_map(|c| &c.queries).collect();
    let calls = layout.calls();
    let slots = || queries.iter().flat_map(|q| q.slots.iter().copied());
    let past_50 = slots().filter(|&s| s > 50).count();
    let zero_slots: Vec<f64> = sorted(
        queries
            .iter()
            .flat_map(|q| q.zero_score_slots.iter().map(|&s| s as f64))
            .collect(),
    );
    let zero = zero_slots.len();
    let tools: Vec<f64> = layout.catalogs.iter().map(|c| c.tools as f64).collect();
    println!(
        "| {} | {} {} | {} | {} | {} | {} ({:.1} %) | {} ({:.1} %) | {} | {} |",
        layout.dataset,
        layout.catalogs.len(),
        layout.name,
        spread(tools, 0),
        queries.len(),
        calls,
        past_50,
        100.0 * past_50 as f64 / calls as f64,
        zero,
        100.0 * zero as f64 / calls as f64,
        median(&zero_slots),
        queries.iter().filter(|q| q.unmatched).count(),
    );
}

fn print_calibration(cases: &[Case]) {
    println!("## A. Honest calibration: auto_k's k against the report's top_k, held out\n");
    println!(
        "| dataset | catalogs | keep | min_calls | calibration calls | held after decay | auto_k: k (source) | held-out share | seeds < keep / < keep−.01 | tools sent | report's top_k | held-out share | seeds < keep / < keep−.01 | tools sent |"
    );
    println!("|---|---|---:|---:|---:|---:|---|---|---|---:|---|---|---|---:|");
    for case in cases {
        let auto = case.trials_of(Method::AutoK);
        let report = case.trials_of(Method::Report);
        let capped: Vec<f64> = case
            .decided
            .iter()
            .flat_map(|d| d.capped.iter().map(|&s| f64::from(s)))
            .collect();
        let capped_note = if !capped.is_empty() {
            format!(
                ", capped in {} catalog-seeds at {}",
                capped.len(),
                share(median(&sorted(capped)))
            )
        } else {
            String::new()
        };
        let calibration_calls: Vec<f64> = case
            .decided
            .iter()
            .map(|d| d.calibration_calls as f64)
            .collect();
        let held: Vec<f64> = case.decided.iter().map(|d| d.held_after_decay).collect();
        let report_k: Vec<f64> = report.iter().map(|t| t.k).collect();
        let past_report = report.iter().filter(|t| t.k > 50.0).count();
        let past_note = if past_report > 0 {
            format!(" (> 50 in {past_report})")
        } else {
            String::new()
        };
        println!(
            "| {} | {} × {} | {} | {} | {} | {} | {} ({}{capped_note}) | {} | {} / {} | {:.1} | {}{past_note} | {} | {} / {} | {:.1} |",
            case.dataset,
            case.catalogs,
            case.layout,
            case.keep,
            case.min_calls,
            spread(calibration_calls, 0),
            spread(held, 0),
            spread(auto.iter().map(|t| t.k).collect(), 0),
            source_names(&case.decided),
            share_spread(auto),
            short_of(auto, case.keep),
            short_of(auto, case.keep - SAME_SHARE),
            median_of(auto, |t| t.outcome.mean_tools),
            spread(report_k, 0),
            share_spread(report),
            short_of(report, case.keep),
            short_of(report, case.keep - SAME_SHARE),
            median_of(report, |t| t.outcome.mean_tools),
        );
    }
    println!();
}

fn share_spread(trials: &[Trial]) -> String {
    let v = sorted(trials.iter().map(|t| t.outcome.share).collect());
    format!(
        "{} ({}–{})",
        share(median(&v)),
        share(v.first().copied().unwrap_or(0.0)),
        share(v.last().copied().unwrap_or(0.0))
    )
}

fn print_per_request(cases: &[Case]) {
    println!("## B. Per-request sets against auto_k's k, held out\n");
    println!(
        "Cases where auto_k has too few calls to calibrate (`top_k` everywhere) are left out: every method is `top_k` there.\n"
    );
    println!(
        "| dataset | catalogs | keep | min_calls | method | held-out share | seeds < keep−.01 | mean tools | median tools | bound binds | temperature |"
    );
    println!("|---|---|---:|---:|---|---|---:|---:|---:|---:|---:|");
    for case in cases.iter().filter(|c| c.calibrated()) {
        for (method, trials) in Method::all().iter().zip(&case.trials) {
            if *method == Method::Report {
                continue;
            }
            let temperature = match method {
                Method::PerRequest(Family::Softmax, _) => {
                    spread(trials.iter().map(|t| t.temperature).collect(), 2)
                }
                _ => String::new(),
            };
            println!(
                "| {} | {} × {} | {} | {} | {} | {} | {} | {:.1} | {:.1} | {:.3} | {} |",
                case.dataset,
                case.catalogs,
                case.layout,
                case.keep,
                case.min_calls,
                method.name(),
                share_spread(trials),
                short_of(trials, case.keep - SAME_SHARE),
                median_of(trials, |t| t.outcome.mean_tools),
                median_of(trials, |t| t.outcome.median_tools),
                median_of(trials, |t| t.outcome.bound_binds),
                temperature,
            );
        }
    }
    println!();
}

/// The rule: `candidate` wins over `base` when its held-out share is within
/// [`SAME_SHARE`] of `base`'s, or above, with fewer tools on average (medians over seeds).
/// Also: in how many seeds it did so.
fn wins(candidate: &[Trial], base: &[Trial]) -> (bool, usize) {
    let share = |t: &[Trial]| median_of(t, |t| t.outcome.share);
    let tools = |t: &[Trial]| median_of(t, |t| t.outcome.mean_tools);
    let overall = share(candidate) >= share(base) - SAME_SHARE && tools(candidate) < tools(base);
    let seeds = candidate
        .iter()
        .zip(base)
        .filter(|(c, b)| {
            c.outcome.share >= b.outcome.share - SAME_SHARE
                && c.outcome.mean_tools < b.outcome.mean_tools
        })
        .count();
    (overall, seeds)
}

fn says((overall, seeds): (bool, usize), of: usize) -> String {
    let verdict = if overall { "**yes**" } else { "no" };
    format!("{verdict} ({seeds}/{of})")
}

/// A win in the medians that holds in at least [`ROBUST`] of the seeds too.
fn robust((overall, seeds): (bool, usize), of: usize) -> bool {
    overall && seeds as f64 >= ROBUST * of as f64
}

/// Per case and per-request score: against `auto_k` (the rule), and against the fixed
/// k of the same threshold rule (like for like: what the normalisation itself gives); then
/// per layout and keep, the datasets where a per-request set wins.
fn print_verdict(cases: &[Case]) {
    println!("## Verdict: per-request sets (share within .01 or above, fewer tools on average)\n");
    println!(
        "| dataset | catalogs | keep | min_calls | score | conformal set vs auto_k | Wilson set vs auto_k | conformal set vs conformal fixed k | Wilson set vs Wilson fixed k |"
    );
    println!("|---|---|---:|---:|---|---|---|---|---|");
    // Per case: a set beats auto_k (in the medians, robustly), and the fixed k of its rule.
    let mut by_rule: Vec<(&Case, [bool; 4])> = Vec::new();
    for case in cases.iter().filter(|c| c.calibrated()) {
        let auto = case.trials_of(Method::AutoK);
        let n = auto.len();
        let mut beats = [false; 4];
        for family in [Family::Relative, Family::Softmax] {
            let of = |rule| case.trials_of(Method::PerRequest(family, rule));
            let fixed = |rule| case.trials_of(Method::PerRequest(Family::Rank, rule));
            let against_auto = [Rule::Conformal, Rule::Wilson].map(|r| wins(of(r), auto));
            let like_for_like = [Rule::Conformal, Rule::Wilson].map(|r| wins(of(r), fixed(r)));
            beats[0] |= against_auto.iter().any(|w| w.0);
            beats[1] |= against_auto.iter().any(|&w| robust(w, n));
            beats[2] |= like_for_like.iter().any(|w| w.0);
            beats[3] |= like_for_like.iter().any(|&w| robust(w, n));
            println!(
                "| {} | {} × {} | {} | {} | {} | {} | {} | {} | {} |",
                case.dataset,
                case.catalogs,
                case.layout,
                case.keep,
                case.min_calls,
                family.name(),
                says(against_auto[0], n),
                says(against_auto[1], n),
                says(like_for_like[0], n),
                says(like_for_like[1], n),
            );
        }
        by_rule.push((case, beats));
    }
    println!(
        "\nDatasets where some per-request set wins (any of the four: two scores, two rules); robust: also in {:.0} % of the seeds or more.\n",
        ROBUST * 100.0
    );
    println!(
        "| catalogs | keep | beats auto_k | robustly | ship (two of three, robust)? | beats the fixed k of its own rule | robustly |"
    );
    println!("|---|---:|---|---|---|---|---|");
    for layout in LAYOUTS {
        for keep in KEEPS {
            let datasets = |which: usize| -> Vec<&str> {
                DATASETS
                    .iter()
                    .copied()
                    .filter(|d| {
                        by_rule.iter().any(|(c, beats)| {
                            c.layout == layout && c.keep == keep && c.dataset == *d && beats[which]
                        })
                    })
                    .collect()
            };
            let list = |which: usize| {
                let names = datasets(which);
                if names.is_empty() {
                    "none".to_owned()
                } else {
                    names.join(", ")
                }
            };
            println!(
                "| {layout} | {keep} | {} | {} | {} | {} | {} |",
                list(0),
                list(1),
                if datasets(1).len() >= 2 { "yes" } else { "no" },
                list(2),
                list(3),
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// `--shrink` (issue 55, item 5): a small catalog's histogram shrunk toward the pooled one
// instead of the switch at `min_calls`, and the fleet's calls against one replica's.
// ---------------------------------------------------------------------------------------------

/// `--shrink`'s floors: `auto_k`'s default, and the replay's.
const SHRINK_MIN_CALLS: [usize; 2] = [MIN_CALLS, 50];
/// The prior's strengths tried, in pseudo-calls. The last is past any pooled histogram's
/// calls (`auto_k::window` halves one past 1,600): counted with the prior, it is the whole pool.
const SHRINK_M: [f64; 9] = [5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0];
/// The fleet of the issue: round-robin, each replica learns from a quarter of the calls and
/// cuts a quarter of the requests.
const REPLICAS: usize = 4;
/// `--shrink`'s seeds unless `--seeds` says otherwise: the first half chooses m, the second
/// half is reported.
const SHRINK_SEEDS: u64 = 40;

/// What Wilson's bound counts as calls when a catalog's share within k is shrunk toward the
/// pooled share: `(x + m·q) / (n + m)`, x of the catalog's n calls within k, q the pooled
/// histogram's share within k.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Counted {
    /// n: the catalog's own calls. The pseudo-calls move the share, never the bound's width.
    Own,
    /// n + m', m' = min(m, N − n) for a pooled histogram of N calls: the Beta posterior's
    /// weight (`calibration.md`), but never more calls than the calibration holds (N).
    WithPrior,
}

/// How each catalog's k is chosen from one calibration.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Chooser {
    /// `Calibration::decide`: a catalog's own histogram from `min_calls` calls, else the
    /// pooled one, else `top_k`.
    AutoK,
    /// Every catalog with calls shrunk toward the pool with `m` pseudo-calls; a catalog
    /// without calls takes the pooled k, and fewer than `min_calls` pooled calls `top_k`, as
    /// `decide` does.
    Shrunk { counted: Counted, m: f64 },
}

impl Chooser {
    fn all() -> Vec<Chooser> {
        let mut all = vec![Chooser::AutoK];
        for counted in [Counted::Own, Counted::WithPrior] {
            all.extend(SHRINK_M.iter().map(|&m| Chooser::Shrunk { counted, m }));
        }
        all
    }

    fn name(self) -> String {
        match self {
            Chooser::AutoK => "auto_k as it is".into(),
            Chooser::Shrunk {
                counted: Counted::Own,
                m,
            } => format!("shrunk, m {m}, bound on n"),
            Chooser::Shrunk {
                counted: Counted::WithPrior,
                m,
            } => format!("shrunk, m {m}, bound on n + m (≤ N)"),
        }
    }
}

/// A histogram's calls within each k (k = 0 to `MAX_K`), and its total.
struct Within {
    within: Vec<f64>,
    total: f64,
}

impl Within {
    /// Of `h`, in a layout whose largest catalog has `largest` tools: no call's slot is past
    /// it, so `within` is computed up to it only.
    fn of(h: &Histogram, largest: usize) -> Within {
        let top = largest.min(MAX_K);
        let mut within: Vec<f64> = (0..=top).map(|k| h.within(k)).collect();
        within.resize(MAX_K + 1, within[top]);
        Within {
            within,
            total: h.total(),
        }
    }
}

/// The smallest k in [`min_k`, `max_k`] whose shrunk share has a Wilson lower bound of at
/// least `keep` (n counted as `counted` says), as `Histogram::choose` walks it; `max_k`
/// (capped) when none has.
fn shrunk_k(
    own: &Within,
    pooled: &Within,
    counted: Counted,
    m: f64,
    config: &AutoKConfig,
) -> usize {
    let z = normal_quantile(config.confidence);
    let n = own.total;
    let (m, bound_n) = match counted {
        Counted::Own => (m, n),
        Counted::WithPrior => {
            let m = m.min((pooled.total - n).max(0.0));
            (m, n + m)
        }
    };
    (config.min_k..=config.max_k)
        .find(|&k| {
            let share = (own.within[k] + m * pooled.within[k] / pooled.total) / (n + m);
            wilson_lower(share * bound_n, bound_n, z) >= config.keep
        })
        .unwrap_or(config.max_k)
}

/// Each catalog's k (by index) from `calibration`, for every chooser of [`Chooser::all`].
fn ks_by_chooser(
    calibration: &Calibration,
    layout: &Layout,
    config: &AutoKConfig,
    top_k: usize,
) -> Vec<Vec<usize>> {
    let largest = layout.catalogs.iter().map(|c| c.tools).max().unwrap_or(0);
    let pooled = Within::of(&calibration.pooled, largest);
    let own: Vec<Option<Within>> = (0..layout.catalogs.len())
        .map(|c| {
            calibration
                .catalogs
                .iter()
                .find(|calls| calls.id == c as u32 && calls.histogram.total() > 0.0)
                .map(|calls| Within::of(&calls.histogram, largest))
        })
        .collect();
    let (table, _) = calibration.decide(config, top_k, None, 0, 0);
    let fallback = table.fallback.chosen;
    Chooser::all()
        .into_iter()
        .map(|chooser| match chooser {
            Chooser::AutoK => (0..own.len())
                .map(|c| table.chosen(c as u32, config, top_k).k)
                .collect(),
            // Too few calls in all: `top_k`, as `decide` answers.
            Chooser::Shrunk { .. } if fallback.source == Source::Default => vec![top_k; own.len()],
            Chooser::Shrunk { counted, m } => own
                .iter()
                .map(|own| {
                    own.as_ref()
                        .map_or(fallback.k, |own| shrunk_k(own, &pooled, counted, m, config))
                })
                .collect(),
        })
        .collect()
}

/// What one chooser gave in one seed under one way of learning.
#[derive(Debug, Clone, Default)]
struct Run {
    share: f64,
    tools: f64,
    /// Per catalog: its k (with a quarter of the calls, the first replica's).
    ks: Vec<usize>,
}

/// How the calibration half's calls are learned.
const SCENARIOS: [&str; 2] = ["all calls", "a quarter (1 of 4 replicas)"];

/// One (layout, min_calls, keep) over every seed.
struct ShrinkCase {
    dataset: &'static str,
    layout: &'static str,
    catalogs: usize,
    min_calls: usize,
    keep: f64,
    /// Calibration calls per catalog, per scenario (mean over catalogs and seeds).
    calls_per_catalog: [f64; 2],
    /// Per chooser ([`Chooser::all`] order), per seed, per scenario ([`SCENARIOS`]).
    runs: Vec<Vec<[Run; 2]>>,
}

impl ShrinkCase {
    /// The runs of chooser `at` in `scenario` over `seeds`.
    fn runs(&self, at: usize, scenario: usize, seeds: &std::ops::Range<usize>) -> Vec<&Run> {
        self.runs[at][seeds.clone()]
            .iter()
            .map(|r| &r[scenario])
            .collect()
    }
}

/// Median share, median mean tools, and each catalog's median k, over `runs`.
fn summary(runs: &[&Run]) -> (f64, f64, Vec<f64>) {
    let median_of = |f: &dyn Fn(&Run) -> f64| median(&sorted(runs.iter().map(|r| f(r)).collect()));
    let catalogs = runs.first().map_or(0, |r| r.ks.len());
    (
        median_of(&|r| r.share),
        median_of(&|r| r.tools),
        (0..catalogs)
            .map(|c| median_of(&|r| r.ks[c] as f64))
            .collect(),
    )
}

/// A calibration that learned `arrivals`' calls, in that order.
fn learned(layout: &Layout, arrivals: &[(usize, usize)], config: &AutoKConfig) -> Calibration {
    let mut calibration = Calibration::new(MAX_K);
    for &(c, q) in arrivals {
        calibration.learn(config, c as u32, &layout.catalogs[c].queries[q].slots, 0);
    }
    calibration
}

/// `requests` dealt to [`REPLICAS`] replicas in turn.
fn round_robin(requests: &[(usize, usize)]) -> Vec<Vec<(usize, usize)>> {
    (0..REPLICAS)
        .map(|r| requests.iter().skip(r).step_by(REPLICAS).copied().collect())
        .collect()
}

/// Every chooser's runs on `layout` at `min_calls`, both keeps, over `seeds`.
fn run_shrink(layout: &Layout, min_calls: usize, seeds: u64, top_k: usize) -> Vec<ShrinkCase> {
    let config_at = |keep: f64| auto_k_config(keep, min_calls);
    let choosers = Chooser::all().len();
    let mut cases: Vec<ShrinkCase> = KEEPS
        .iter()
        .map(|&keep| ShrinkCase {
            dataset: layout.dataset,
            layout: layout.name,
            catalogs: layout.catalogs.len(),
            min_calls,
            keep,
            calls_per_catalog: [0.0; 2],
            runs: vec![Vec::new(); choosers],
        })
        .collect();
    let calls_of = |arrivals: &[(usize, usize)]| -> f64 {
        let calls: usize = arrivals
            .iter()
            .map(|&(c, q)| layout.catalogs[c].queries[q].slots.len())
            .sum();
        calls as f64 / layout.catalogs.len() as f64 / seeds as f64
    };
    for seed in 0..seeds {
        let split = split(layout, seed);
        // The histograms depend on `min_calls` (the window), not on `keep`.
        let learning = config_at(KEEPS[0]);
        // Calibration request i reaches replica i mod 4, and so does held-out request i.
        let quarters = round_robin(&split.arrivals);
        let fleet = learned(layout, &split.arrivals, &learning);
        let replicas: Vec<Calibration> = quarters
            .iter()
            .map(|arrivals| learned(layout, arrivals, &learning))
            .collect();
        let dealt = round_robin(&split.held_out);
        for case in &mut cases {
            case.calls_per_catalog[0] += calls_of(&split.arrivals);
            case.calls_per_catalog[1] += calls_of(&quarters[0]);
            let config = config_at(case.keep);
            let fleet_ks = ks_by_chooser(&fleet, layout, &config, top_k);
            let replica_ks: Vec<Vec<Vec<usize>>> = replicas
                .iter()
                .map(|r| ks_by_chooser(r, layout, &config, top_k))
                .collect();
            for (at, runs) in case.runs.iter_mut().enumerate() {
                let ks = &fleet_ks[at];
                let all = outcome(layout, &split.held_out, &|c| Cut::Fixed(ks[c]));
                let (mut calls, mut kept, mut sent) = (0.0, 0.0, 0.0);
                for (requests, ks) in dealt.iter().zip(&replica_ks) {
                    let ks = &ks[at];
                    let part = outcome(layout, requests, &|c| Cut::Fixed(ks[c]));
                    let n: usize = requests
                        .iter()
                        .map(|&(c, q)| layout.catalogs[c].queries[q].slots.len())
                        .sum();
                    calls += n as f64;
                    kept += part.share * n as f64;
                    sent += part.mean_tools * requests.len() as f64;
                }
                runs.push([
                    Run {
                        share: all.share,
                        tools: all.mean_tools,
                        ks: ks.clone(),
                    },
                    Run {
                        share: kept / calls.max(1.0),
                        tools: sent / split.held_out.len().max(1) as f64,
                        ks: replica_ks[0][at].clone(),
                    },
                ]);
            }
        }
    }
    cases
}

/// Chooser `at` against auto_k over `seeds`, per (case, scenario) of `cases` × `scenarios`
/// (medians over the seeds).
#[derive(Debug, Clone, Copy, Default)]
struct Against {
    /// Pairs compared.
    of: usize,
    /// Its share below auto_k's − .01.
    short: usize,
    more: usize,
    fewer: usize,
    /// The geometric mean of its tools over auto_k's.
    ratio: f64,
}

impl Against {
    fn of(
        cases: &[&ShrinkCase],
        at: usize,
        seeds: &std::ops::Range<usize>,
        scenarios: &[usize],
    ) -> Against {
        let mut against = Against::default();
        let mut log_ratio = 0.0;
        for case in cases {
            for &scenario in scenarios {
                let (base_share, base_tools, _) = summary(&case.runs(0, scenario, seeds));
                let (share, tools, _) = summary(&case.runs(at, scenario, seeds));
                against.of += 1;
                against.short += usize::from(share < base_share - SAME_SHARE - 1e-12);
                against.more += usize::from(tools > base_tools + 1e-9);
                against.fewer += usize::from(tools < base_tools - 1e-9);
                log_ratio += (tools / base_tools).ln();
            }
        }
        against.ratio = (log_ratio / against.of.max(1) as f64).exp();
        against
    }

    /// The rule this comparison ships by: no pair short, none with more tools, some with fewer.
    fn wins(self) -> bool {
        self.short == 0 && self.more == 0 && self.fewer > 0
    }
}

/// A catalog's median ks, in catalog order.
fn ks_cell(ks: &[f64]) -> String {
    ks.iter()
        .map(|k| format!("{k:.0}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn shrink_main() {
    let mut seeds = SHRINK_SEEDS;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--shrink" => {}
            "--seeds" => seeds = args.next().and_then(|n| n.parse().ok()).expect("--seeds N"),
            other => panic!("unknown argument {other} (usage: auto_k [--shrink] [--seeds N])"),
        }
    }
    assert!(
        seeds >= 2,
        "--shrink needs two seeds or more: half choose m"
    );
    let config = Config::default();
    let top_k = config.top_k;
    let mut cases = Vec::new();
    each_layout(&config, |layout| {
        for min_calls in SHRINK_MIN_CALLS {
            cases.extend(run_shrink(&layout, min_calls, seeds, top_k));
        }
    });
    let half = (seeds / 2) as usize;
    let (tuning, reported) = (0..half, half..seeds as usize);
    let choosers = Chooser::all();
    println!("## Shrinking small catalogs toward the pool (issue 55, item 5)\n");
    println!(
        "{seeds} seeds: m is chosen on seeds 0–{} and reported on seeds {}–{}. confidence {CONFIDENCE}, max_k {MAX_K}, min_k {MIN_K}, top_k {top_k}. Figures: medians over seeds.\n",
        half - 1,
        half,
        seeds - 1
    );
    println!(
        "Shrunk: a catalog with x of its n calls within k has the share (x + m·q) / (n + m) within k, q the pooled histogram's share within k (N calls), and its k is the smallest whose Wilson lower bound reaches keep, counting as calls either n (\"bound on n\": the pseudo-calls move the share, never the bound's width) or n + min(m, N − n) (\"bound on n + m (≤ N)\": never more calls than the calibration holds). Every catalog with calls is shrunk; a catalog without any takes the pooled k, and fewer than min_calls pooled calls give top_k, as auto_k does.\n"
    );
    println!("### Choosing the shrinkage on the first seeds\n");
    println!(
        "Against auto_k on every case with more than one catalog (both floors, both keeps, all calls and a quarter). The chosen one is the first by (cases short of auto_k's share − .01, then tools over auto_k's) on the tuning seeds; the reported seeds' columns are shown, not used.\n"
    );
    println!(
        "| chooser | tuning: cases short | more tools / fewer | tools / auto_k's | reported: cases short | more tools / fewer | tools / auto_k's |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    // With one catalog, shrinking toward the pool changes nothing.
    let shrinkable: Vec<&ShrinkCase> = cases.iter().filter(|c| c.catalogs > 1).collect();
    let both = [0, 1];
    let mut best: Option<(usize, Against)> = None;
    for (at, chooser) in choosers.iter().enumerate().skip(1) {
        let t = Against::of(&shrinkable, at, &tuning, &both);
        let r = Against::of(&shrinkable, at, &reported, &both);
        println!(
            "| {} | {} of {} | {} / {} | {:.3} | {} of {} | {} / {} | {:.3} |",
            chooser.name(),
            t.short,
            t.of,
            t.more,
            t.fewer,
            t.ratio,
            r.short,
            r.of,
            r.more,
            r.fewer,
            r.ratio,
        );
        if best.is_none_or(|(_, b)| (t.short, t.ratio) < (b.short, b.ratio)) {
            best = Some((at, t));
        }
    }
    let chosen = best.expect("a shrunk chooser").0;
    println!(
        "\nChosen on the tuning seeds: **{}**.\n",
        choosers[chosen].name()
    );
    println!("### Shrunk against auto_k, reported seeds\n");
    println!(
        "Cases with one catalog (livemcpbench's 200-tool layouts, every whole catalog) are left out: a catalog shrunk toward itself is itself. k per catalog: each catalog's median over the seeds (with a quarter, the first replica's).\n"
    );
    println!(
        "| dataset | catalogs | min_calls | keep | calls | calls per catalog | auto_k: share | tools | k per catalog | shrunk: share | tools | k per catalog | share ≥ −.01 and fewer tools (seeds) |"
    );
    println!("|---|---|---:|---:|---|---:|---:|---:|---|---:|---:|---|---|");
    for case in &shrinkable {
        for (scenario, name) in SCENARIOS.iter().enumerate() {
            let base = case.runs(0, scenario, &reported);
            let shrunk = case.runs(chosen, scenario, &reported);
            let (base_share, base_tools, base_ks) = summary(&base);
            let (share_, tools, ks) = summary(&shrunk);
            let seeds_won = base
                .iter()
                .zip(&shrunk)
                .filter(|(b, s)| s.share >= b.share - SAME_SHARE && s.tools < b.tools)
                .count();
            let wins = share_ >= base_share - SAME_SHARE && tools < base_tools;
            println!(
                "| {} | {} × {} | {} | {} | {name} | {:.0} | {} | {base_tools:.1} | {} | {} | {tools:.1} | {} | {} ({seeds_won}/{}) |",
                case.dataset,
                case.catalogs,
                case.layout,
                case.min_calls,
                case.keep,
                case.calls_per_catalog[scenario],
                share(base_share),
                ks_cell(&base_ks),
                share(share_),
                ks_cell(&ks),
                if wins { "**yes**" } else { "no" },
                base.len(),
            );
        }
    }
    println!("\n### The fleet's calls against one replica's, reported seeds\n");
    println!(
        "All calls: one calibration learns every call of the calibration half (what a fleet of four pools). A quarter: four replicas each learn every fourth call and cut every fourth held-out request with their own k; k per catalog is the first replica's.\n"
    );
    println!(
        "| dataset | catalogs | min_calls | keep | chooser | all calls: per catalog | share | tools | k per catalog | a quarter: per catalog | share | tools | k per catalog |"
    );
    println!("|---|---|---:|---:|---|---:|---:|---:|---|---:|---:|---:|---|");
    for case in &cases {
        let shown: &[usize] = if case.catalogs > 1 {
            &[0, chosen]
        } else {
            &[0]
        };
        for &at in shown {
            let (all_share, all_tools, all_ks) = summary(&case.runs(at, 0, &reported));
            let (q_share, q_tools, q_ks) = summary(&case.runs(at, 1, &reported));
            println!(
                "| {} | {} × {} | {} | {} | {} | {:.0} | {} | {all_tools:.1} | {} | {:.0} | {} | {q_tools:.1} | {} |",
                case.dataset,
                case.catalogs,
                case.layout,
                case.min_calls,
                case.keep,
                if at == 0 { "auto_k" } else { "shrunk" },
                case.calls_per_catalog[0],
                share(all_share),
                ks_cell(&all_ks),
                case.calls_per_catalog[1],
                share(q_share),
                ks_cell(&q_ks),
            );
        }
    }
    println!("\n### Verdict (reported seeds)\n");
    for min_calls in SHRINK_MIN_CALLS {
        for (scenario, name) in SCENARIOS.iter().enumerate() {
            let at_floor: Vec<&ShrinkCase> = shrinkable
                .iter()
                .copied()
                .filter(|c| c.min_calls == min_calls)
                .collect();
            let r = Against::of(&at_floor, chosen, &reported, &[scenario]);
            println!(
                "- min_calls {min_calls}, {name}: of {} cases, {} short of auto_k's share − .01, {} with fewer tools, {} with more (tools / auto_k's {:.3}): {}.",
                r.of,
                r.short,
                r.fewer,
                r.more,
                r.ratio,
                if r.wins() {
                    "**shrinkage wins**"
                } else {
                    "shrinkage does not win"
                }
            );
        }
    }
}
