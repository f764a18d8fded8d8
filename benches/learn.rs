//! Learning from calls measured offline (issue 46 item 2): does a ranking channel learned from
//! the (question, called tool) pairs the gateway sees raise Recall@5 on questions it has not
//! seen? Run with `make bench-learn` (`cargo run --release --example learn -- [--seeds N]`).
//!
//! Each shared dataset is ranked natively by the filter's own keyword ranking ([`Catalog::build`]
//! on the OpenAI tools array, each question bounded by [`head_and_tail`] as a request's is,
//! [`Catalog::rank`]), in two layouts (`benches/shared/catalogs.rs`): the 200-tool catalogs of
//! `benches/shadow_replay.py` (the measure) and the whole catalog.
//!
//! The replay: each catalog's questions are halved, in the dataset's order and in a few
//! shuffled orders (seeds). The first half is traffic, the second is held out. Two kinds of
//! traffic:
//! - **all shadowed**: every traffic request is shadowed, and the scripted model calls every
//!   relevant tool (the label is unbiased: the model saw the whole catalog);
//! - **sample 0.1**: one request in ten is shadowed (all its relevant tools called); the others
//!   are filtered, and the model calls only the relevant tools among the `top_k` 5 it was sent.
//!
//! A learned state is built from the traffic (once: the state changes at most once per
//! period) and each held-out question is ranked with and without it. The forms:
//! - **kNN vote**: the last [`KNN_MEMORY`] questions of the catalog that led to calls, each as
//!   at most [`MAX_TERMS`] hashed terms and its called tools. A new question scores each past
//!   one by BM25 over those term sets (IDF over the stored questions); the best `m` whose
//!   shared terms hold at least `θ` of the question's IDF mass vote for their tools, weighted by
//!   similarity. The votes are a channel fused with the keyword ranking by weighted RRF (the
//!   constant of [`FusionParams`], the keyword ranking's weight 1, the channel's `w`).
//! - **term model**: per tool, at most [`TOOL_TERMS`] hashed question terms with the number of
//!   calls each led to; per term, its questions and calls (at most [`VOCABULARY`] terms). A tool
//!   scores Σ idf(t) · calls(t, tool) / (calls(t) + α) over the question's terms, a term seen
//!   with more than `L` tools ignored; fused by RRF with weight `w`.
//! - **prior**: calls per tool; the keyword ranking's ties (equal scores, the zero-score tail
//!   included) are broken by it, most called first. Nothing else moves.
//! - **expansion**: each tool's description gets the question terms (text: terms, not
//!   questions) that led to at least `c` calls of it, seen with at most `L` tools, its best `E`
//!   by calls × IDF; the catalog is indexed again with them.
//!
//! Settings are chosen on the traffic half alone: its first half learns, its second is the
//! validation; the setting with the best mean Recall@5 gain over the three datasets (none
//! losing more than .01 of Recall@5 or Recall@20, if any setting can) is then learned from the
//! whole traffic half and measured on the held-out half. The program also prints each form's
//! best setting chosen on the held-out half itself (in hindsight: what the form could give at
//! best, not a result).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)] // a benchmark harness, not filter code

use proptest::prelude::Rng;
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use toolsift::config::Config;
use toolsift::dialects::{Dialect, MAX_QUERY_BYTES};
use toolsift::fusion::FusionParams;
use toolsift::index::FieldWeights;
use toolsift::offline::eval::{Dataset, Tool, score};
use toolsift::pipeline::Engine;
use toolsift::rank::Catalog;
use toolsift::text::{for_each_term, head_and_tail};
use xxhash_rust::xxh3::xxh3_64;

#[path = "shared/catalogs.rs"]
mod catalogs;
use catalogs::{catalogs_in, seeded, shuffle};

const DATASETS: [&str; 3] = ["seal_tools", "toolbench", "livemcpbench"];
const LAYOUTS: [&str; 2] = ["200-tool", "whole"];
const DEFAULT_SEEDS: u64 = 5;
/// The filter's default `top_k`: a filtered request's model sees these tools.
const TOP_K: usize = 5;
/// The share of requests shadowed in the sampled traffic.
const SAMPLE: f64 = 0.1;
/// At most this many distinct terms are kept of a question (its first).
const MAX_TERMS: usize = 32;
/// At most this many called tools are kept of a question.
const MAX_CALLS: usize = 8;
/// The kNN vote's memory: the last this many questions (with calls) per catalog.
const KNN_MEMORY: usize = 512;
/// The term model's bound per tool.
const TOOL_TERMS: usize = 64;
/// The term model's bound on its vocabulary (per catalog).
const VOCABULARY: usize = 4096;
/// The ship criterion (issue 46): at least this Recall@5 gain on two of the three datasets …
const GAIN: f64 = 0.03;
/// … and no loss larger than this anywhere.
const LOSS: f64 = 0.01;

/// One question of a catalog, ranked by the filter's code.
struct Question {
    /// Its distinct hashed terms (at most [`MAX_TERMS`]).
    terms: Vec<u32>,
    /// The same terms as text (expansion only).
    words: Vec<String>,
    /// The entries of its distinct relevant tools.
    relevant: Vec<usize>,
    /// The keyword score of every entry.
    base: Vec<f32>,
    /// The keyword ranking, best first.
    order: Vec<usize>,
}

struct Cat {
    data: Dataset,
    questions: Vec<Question>,
}

impl Cat {
    fn tools(&self) -> usize {
        self.data.tools.len()
    }
}

fn bounded(query: &str) -> String {
    head_and_tail(query, MAX_QUERY_BYTES)
}

fn term_hash(term: &str) -> u32 {
    xxh3_64(term.as_bytes()) as u32
}

fn question_terms(query: &str) -> (Vec<u32>, Vec<String>) {
    let (mut terms, mut words) = (Vec::new(), Vec::new());
    for_each_term(&bounded(query), |t| {
        let h = term_hash(t);
        if terms.len() < MAX_TERMS && !terms.contains(&h) {
            terms.push(h);
            words.push(t.to_owned());
        }
    });
    (terms, words)
}

fn index(data: &Dataset, weights: FieldWeights) -> Catalog {
    Catalog::build(Dialect::OpenaiChat, &data.tools_array(), weights)
        .unwrap_or_else(|p| panic!("{}: not a tools array ({})", data.name, p.reason()))
}

/// Every entry's keyword score and the ranking (entry i is line i, as `toolsift eval` checks).
fn keyword(catalog: &Catalog, tools: usize, query: &str) -> (Vec<f32>, Vec<usize>) {
    let ranking = catalog.rank(&bounded(query));
    assert_eq!(ranking.len(), tools, "every tool is ranked");
    let mut base = vec![0.0; tools];
    for s in ranking.iter() {
        base[s.entry] = s.score;
    }
    (base, ranking.iter().map(|s| s.entry).collect())
}

fn prepare(data: Dataset, weights: FieldWeights) -> Cat {
    let catalog = index(&data, weights);
    let entry_of: HashMap<&str, usize> = data
        .tools
        .iter()
        .enumerate()
        .map(|(i, t)| (t.name.as_str(), i))
        .collect();
    let questions = data
        .queries
        .iter()
        .map(|q| {
            let (terms, words) = question_terms(&q.query);
            let mut relevant: Vec<usize> = Vec::new();
            for r in &q.relevant {
                let e = entry_of[r.as_str()];
                if !relevant.contains(&e) {
                    relevant.push(e);
                }
            }
            let (base, order) = keyword(&catalog, data.tools.len(), &q.query);
            Question {
                terms,
                words,
                relevant,
                base,
                order,
            }
        })
        .collect();
    Cat { data, questions }
}

/// Recall@5 and Recall@20 of one ranking, as `toolsift eval` scores them.
fn recalls(order: &[usize], relevant: &[usize]) -> [f64; 2] {
    let mut rank_of = HashMap::new();
    for (i, &e) in order.iter().enumerate() {
        rank_of.insert(e, i + 1);
    }
    let ranks: Vec<Option<usize>> = relevant.iter().map(|e| rank_of.get(e).copied()).collect();
    let r = score(&ranks, &[5, 20]).recall;
    [r[0], r[1]]
}

/// Competition ranks (1 = best, equal scores share one) of the entries scored above 0, as
/// `src/fusion.rs` ranks a channel.
fn channel_ranks(scores: &[f32]) -> Vec<Option<u32>> {
    let mut voted: Vec<usize> = (0..scores.len()).filter(|&e| scores[e] > 0.0).collect();
    voted.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    let mut ranks = vec![None; scores.len()];
    let (mut rank, mut previous) = (0u32, f32::NAN);
    for (i, &e) in voted.iter().enumerate() {
        if scores[e] != previous {
            rank = i as u32 + 1;
            previous = scores[e];
        }
        ranks[e] = Some(rank);
    }
    ranks
}

/// The keyword ranking and a learned channel fused by weighted RRF as `src/fusion.rs` fuses
/// channels: Σ weight / (k + rank) over the channels that voted; equal scores in catalog order,
/// the tools no channel voted for last in catalog order.
fn fuse(base: &[f32], learned: &[f32], w: f32) -> Vec<usize> {
    let k = FusionParams::default().k;
    let (b, l) = (channel_ranks(base), channel_ranks(learned));
    let fused: Vec<f32> = (0..base.len())
        .map(|e| {
            b[e].map_or(0.0, |r| 1.0 / (k + r as f32)) + l[e].map_or(0.0, |r| w / (k + r as f32))
        })
        .collect();
    let (mut order, rest): (Vec<usize>, Vec<usize>) =
        (0..base.len()).partition(|&e| fused[e] > 0.0);
    order.sort_by(|&a, &b| fused[b].total_cmp(&fused[a]).then(a.cmp(&b)));
    order.extend(rest);
    order
}

/// What the gateway saw of one traffic request: its question and the tools the model called.
struct Event {
    question: usize,
    calls: Vec<usize>,
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Traffic {
    AllShadowed,
    Sampled,
}

impl Traffic {
    fn name(self) -> &'static str {
        match self {
            Traffic::AllShadowed => "all shadowed",
            Traffic::Sampled => "sample 0.1 + filtered-kept labels",
        }
    }
}

/// The calls seen of `questions` (in arrival order); requests without a call teach nothing.
fn events(cat: &Cat, questions: &[usize], traffic: Traffic, seed: u64) -> Vec<Event> {
    let mut rng = seeded(7_000 + seed);
    questions
        .iter()
        .filter_map(|&q| {
            let question = &cat.questions[q];
            let shadowed = traffic == Traffic::AllShadowed || rng.random_bool(SAMPLE);
            let calls: Vec<usize> = if shadowed {
                question.relevant.clone()
            } else {
                let sent = &question.order[..TOP_K.min(question.order.len())];
                question
                    .relevant
                    .iter()
                    .copied()
                    .filter(|e| sent.contains(e))
                    .collect()
            };
            let calls: Vec<usize> = calls.into_iter().take(MAX_CALLS).collect();
            (!calls.is_empty()).then_some(Event { question: q, calls })
        })
        .collect()
}

fn idf(n: usize, df: u32) -> f32 {
    let (n, df) = (n as f32, df as f32);
    (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
}

/// A form's setting.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Setting {
    Knn {
        m: usize,
        theta: f32,
        w: f32,
    },
    Terms {
        alpha: f32,
        max_tools: usize,
        w: f32,
    },
    Prior,
    Expand {
        per_tool: usize,
        max_tools: usize,
        min_calls: u32,
    },
}

impl Setting {
    fn form(self) -> &'static str {
        match self {
            Setting::Knn { .. } => "kNN vote",
            Setting::Terms { .. } => "term model",
            Setting::Prior => "prior (ties)",
            Setting::Expand { .. } => "expansion",
        }
    }

    fn describe(self) -> String {
        let l = |n: usize| {
            if n == usize::MAX {
                "∞".to_owned()
            } else {
                n.to_string()
            }
        };
        match self {
            Setting::Knn { m, theta, w } => format!("m {m}, θ {theta}, w {w}"),
            Setting::Terms {
                alpha,
                max_tools,
                w,
            } => format!("α {alpha}, L {}, w {w}", l(max_tools)),
            Setting::Prior => "-".into(),
            Setting::Expand {
                per_tool,
                max_tools,
                min_calls,
            } => format!("E {per_tool}, L {}, c {min_calls}", l(max_tools)),
        }
    }
}

/// Each form's settings, one form per inner list.
fn grid() -> Vec<Vec<Setting>> {
    let mut knn = Vec::new();
    for m in [1, 3, 10, 30] {
        for theta in [0.0, 0.3, 0.6] {
            for w in [0.05, 0.1, 0.25, 0.5, 1.0, 2.0] {
                knn.push(Setting::Knn { m, theta, w });
            }
        }
    }
    let mut terms = Vec::new();
    for alpha in [1.0, 5.0] {
        for max_tools in [2, 5, usize::MAX] {
            for w in [0.05, 0.1, 0.25, 0.5, 1.0, 2.0] {
                terms.push(Setting::Terms {
                    alpha,
                    max_tools,
                    w,
                });
            }
        }
    }
    let mut expand = Vec::new();
    for per_tool in [4, 8] {
        for max_tools in [2, 5] {
            for min_calls in [1, 2] {
                expand.push(Setting::Expand {
                    per_tool,
                    max_tools,
                    min_calls,
                });
            }
        }
    }
    vec![knn, terms, vec![Setting::Prior], expand]
}

/// The kNN vote's state: the last [`KNN_MEMORY`] questions as hashed terms and their calls,
/// and (derived from them) the stored questions holding each term.
struct Knn {
    past: VecDeque<(Vec<u32>, Vec<u16>)>,
    postings: HashMap<u32, Vec<u32>>,
    mean_len: f32,
}

impl Knn {
    fn learn(cat: &Cat, events: &[Event]) -> Knn {
        let mut past = VecDeque::new();
        for e in events {
            if past.len() == KNN_MEMORY {
                past.pop_front();
            }
            let calls = e.calls.iter().map(|&t| t as u16).collect();
            past.push_back((cat.questions[e.question].terms.clone(), calls));
        }
        let mut postings: HashMap<u32, Vec<u32>> = HashMap::new();
        for (i, (terms, _)) in past.iter().enumerate() {
            for &t in terms {
                postings.entry(t).or_default().push(i as u32);
            }
        }
        let total: usize = past.iter().map(|(t, _)| t.len()).sum();
        let mean_len = total as f32 / past.len().max(1) as f32;
        Knn {
            past,
            postings,
            mean_len,
        }
    }

    /// The stored questions (4 bytes a term, 2 a call, 4 of lengths) and the postings (4 bytes
    /// a question, 8 a term).
    fn bytes(&self) -> usize {
        let questions: usize = self
            .past
            .iter()
            .map(|(t, c)| 4 * t.len() + 2 * c.len() + 4)
            .sum();
        let postings: usize = self.postings.values().map(|p| 8 + 4 * p.len()).sum();
        questions + postings
    }

    fn votes(&self, q: &Question, tools: usize, m: usize, theta: f32) -> Vec<f32> {
        let n = self.past.len();
        let mut shared = vec![0.0f32; n];
        let mut mass = 0.0;
        for t in &q.terms {
            let list = self.postings.get(t).map_or(&[][..], Vec::as_slice);
            let w = idf(n, list.len() as u32);
            mass += w;
            for &i in list {
                shared[i as usize] += w;
            }
        }
        let mut scored: Vec<(f32, usize)> = shared
            .iter()
            .enumerate()
            .filter(|&(_, &s)| s > 0.0 && s >= theta * mass)
            .map(|(i, &s)| {
                let len = self.past[i].0.len() as f32;
                let norm = 0.25 + 0.75 * len / self.mean_len.max(1.0);
                (s * 2.2 / (1.0 + 1.2 * norm), i)
            })
            .collect();
        // Best first; equal similarity: the most recent first.
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1)));
        let mut votes = vec![0.0; tools];
        for &(s, i) in scored.iter().take(m) {
            for &t in &self.past[i].1 {
                votes[t as usize] += s;
            }
        }
        votes
    }
}

/// Per-term counts: the questions it was in and the calls it led to.
#[derive(Clone, Copy, Default)]
struct TermStats {
    questions: u32,
    calls: u32,
}

/// The term model's state (and the expansion's, which keeps the words beside).
struct TermModel {
    per_tool: Vec<HashMap<u32, u32>>,
    stats: HashMap<u32, TermStats>,
    /// Derived: per term, the tools whose maps hold it and its count there.
    postings: HashMap<u32, Vec<(u32, u32)>>,
    questions: usize,
    /// A word per hash (expansion only: the terms as text).
    words: HashMap<u32, String>,
}

/// Drops the entry with the fewest counts (the largest hash among equals) until `map` holds
/// `bound`.
fn evict<V: Copy>(map: &mut HashMap<u32, V>, bound: usize, count: impl Fn(V) -> u32) {
    while map.len() > bound {
        let (&t, _) = map
            .iter()
            .min_by(|a, b| count(*a.1).cmp(&count(*b.1)).then(b.0.cmp(a.0)))
            .unwrap();
        map.remove(&t);
    }
}

impl TermModel {
    fn learn(cat: &Cat, events: &[Event], keep_words: bool) -> TermModel {
        let mut per_tool = vec![HashMap::new(); cat.tools()];
        let mut stats: HashMap<u32, TermStats> = HashMap::new();
        let mut words = HashMap::new();
        for e in events {
            let q = &cat.questions[e.question];
            for (&t, w) in q.terms.iter().zip(&q.words) {
                let s = stats.entry(t).or_default();
                s.questions += 1;
                s.calls += e.calls.len() as u32;
                for &tool in &e.calls {
                    *per_tool[tool].entry(t).or_insert(0) += 1;
                }
                if keep_words {
                    words.entry(t).or_insert_with(|| w.clone());
                }
            }
            for &tool in &e.calls {
                evict(&mut per_tool[tool], TOOL_TERMS, |c| c);
            }
            evict(&mut stats, VOCABULARY, |s| s.calls);
        }
        let mut postings: HashMap<u32, Vec<(u32, u32)>> = HashMap::new();
        for (tool, map) in per_tool.iter().enumerate() {
            for (&t, &c) in map {
                postings.entry(t).or_default().push((tool as u32, c));
            }
        }
        words.retain(|t, _| postings.contains_key(t));
        TermModel {
            per_tool,
            stats,
            postings,
            questions: events.len(),
            words,
        }
    }

    fn idf(&self, t: u32) -> f32 {
        idf(
            self.questions,
            self.stats.get(&t).map_or(0, |s| s.questions),
        )
    }

    fn bytes(&self) -> usize {
        let tools: usize = self.per_tool.iter().map(|m| 8 * m.len()).sum();
        let words: usize = self.words.values().map(|w| w.len() + 1).sum();
        tools + 12 * self.stats.len() + words
    }

    fn scores(&self, q: &Question, alpha: f32, max_tools: usize) -> Vec<f32> {
        let mut scores = vec![0.0; self.per_tool.len()];
        for &t in &q.terms {
            let Some(list) = self.postings.get(&t) else {
                continue;
            };
            // A term of a tool's map evicted from the vocabulary has no counts: skipped.
            let Some(stats) = self.stats.get(&t) else {
                continue;
            };
            if list.len() > max_tools {
                continue;
            }
            let (idf, calls) = (self.idf(t), stats.calls as f32);
            for &(tool, c) in list {
                scores[tool as usize] += idf * c as f32 / (calls + alpha);
            }
        }
        scores
    }

    /// The catalog with each tool's description followed by its learned terms.
    fn expanded(
        &self,
        cat: &Cat,
        per_tool: usize,
        max_tools: usize,
        min_calls: u32,
    ) -> (Dataset, usize) {
        let mut data = cat.data.clone();
        let mut bytes = 0;
        for (tool, map) in self.per_tool.iter().enumerate() {
            let mut chosen: Vec<(f32, u32)> = map
                .iter()
                .filter(|&(t, &c)| c >= min_calls && self.postings[t].len() <= max_tools)
                .map(|(&t, &c)| (c as f32 * self.idf(t), t))
                .collect();
            if chosen.is_empty() {
                continue;
            }
            chosen.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            let added: Vec<&str> = chosen
                .iter()
                .take(per_tool)
                .map(|(_, t)| self.words[t].as_str())
                .collect();
            bytes += added.iter().map(|w| w.len() + 1).sum::<usize>();
            let old = &data.tools[tool];
            let mut v: serde_json::Value = serde_json::from_str(&old.line).unwrap();
            let f = &mut v["function"];
            let description = f["description"].as_str().unwrap_or("").to_owned();
            f["description"] = format!("{description} {}", added.join(" ")).into();
            data.tools[tool] = Tool {
                name: old.name.clone(),
                line: v.to_string(),
            };
        }
        (data, bytes)
    }
}

/// What each of `settings` (one form's) gives `tests` once learned from `events`: each test
/// question's recalls, and the learned state's size. The state is learned once for them all.
fn measure(
    cat: &Cat,
    events: &[Event],
    tests: &[usize],
    settings: &[Setting],
    weights: FieldWeights,
) -> Vec<(Vec<[f64; 2]>, usize)> {
    let tools = cat.tools();
    let each = |order_of: &dyn Fn(usize, &Question) -> Vec<usize>| -> Vec<[f64; 2]> {
        tests
            .iter()
            .map(|&t| {
                let q = &cat.questions[t];
                recalls(&order_of(t, q), &q.relevant)
            })
            .collect()
    };
    let (mut knn, mut model, mut words) = (None, None, None);
    settings
        .iter()
        .map(|&setting| match setting {
            Setting::Knn { m, theta, w } => {
                let knn = knn.get_or_insert_with(|| Knn::learn(cat, events));
                let r = each(&|_, q| fuse(&q.base, &knn.votes(q, tools, m, theta), w));
                (r, knn.bytes())
            }
            Setting::Terms {
                alpha,
                max_tools,
                w,
            } => {
                let model = model.get_or_insert_with(|| TermModel::learn(cat, events, false));
                let r = each(&|_, q| fuse(&q.base, &model.scores(q, alpha, max_tools), w));
                (r, model.bytes())
            }
            Setting::Prior => {
                let mut calls = vec![0u32; tools];
                for e in events {
                    for &t in &e.calls {
                        calls[t] += 1;
                    }
                }
                let r = each(&|_, q| {
                    let mut order = q.order.clone();
                    // Stable: complete ties stay in the keyword ranking's order.
                    order.sort_by(|&a, &b| {
                        q.base[b]
                            .total_cmp(&q.base[a])
                            .then(calls[b].cmp(&calls[a]))
                    });
                    order
                });
                (r, 4 * tools)
            }
            Setting::Expand {
                per_tool,
                max_tools,
                min_calls,
            } => {
                let model = words.get_or_insert_with(|| TermModel::learn(cat, events, true));
                let (data, added) = model.expanded(cat, per_tool, max_tools, min_calls);
                let catalog = index(&data, weights);
                let r = each(&|t, _| keyword(&catalog, tools, &cat.data.queries[t].query).1);
                (r, model.bytes() + added)
            }
        })
        .collect()
}

fn mean(rows: &[[f64; 2]]) -> [f64; 2] {
    let n = rows.len().max(1) as f64;
    [
        rows.iter().map(|r| r[0]).sum::<f64>() / n,
        rows.iter().map(|r| r[1]).sum::<f64>() / n,
    ]
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n == 0 {
        0.0
    } else if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

/// One dataset in one layout.
struct Layout {
    dataset: &'static str,
    layout: &'static str,
    cats: Vec<Cat>,
}

/// One halving of every catalog's questions: the traffic (in arrival order) and the held out.
struct Split {
    traffic: Vec<Vec<usize>>,
    held_out: Vec<Vec<usize>>,
}

/// `None`: the dataset's order; else shuffled by the seed.
fn split(layout: &Layout, seed: Option<u64>) -> Split {
    let (mut traffic, mut held_out) = (Vec::new(), Vec::new());
    for (c, cat) in layout.cats.iter().enumerate() {
        let mut order: Vec<usize> = (0..cat.questions.len()).collect();
        if let Some(s) = seed {
            shuffle(&mut order, &mut seeded(s * 1_000 + c as u64));
        }
        let held = order.split_off(order.len() / 2);
        traffic.push(order);
        held_out.push(held);
    }
    Split { traffic, held_out }
}

/// The traffic's own halves: the first learns, the second validates.
fn inner(split: &Split) -> Split {
    let (mut traffic, mut held_out) = (Vec::new(), Vec::new());
    for t in &split.traffic {
        let mut first = t.clone();
        let second = first.split_off(first.len() / 2);
        traffic.push(first);
        held_out.push(second);
    }
    Split { traffic, held_out }
}

/// Baseline and learned (Recall@5, Recall@20) over a split's held-out questions of every
/// catalog, and the largest learned state of a catalog.
struct Outcome {
    base: [f64; 2],
    learned: [f64; 2],
    bytes: usize,
}

fn run(
    layout: &Layout,
    split: &Split,
    traffic: Traffic,
    seed: u64,
    settings: &[Setting],
    weights: FieldWeights,
) -> Vec<Outcome> {
    let mut base = Vec::new();
    let mut learned: Vec<(Vec<[f64; 2]>, usize)> = vec![(Vec::new(), 0); settings.len()];
    for (c, cat) in layout.cats.iter().enumerate() {
        let seen = events(cat, &split.traffic[c], traffic, seed * 100 + c as u64);
        let tests = &split.held_out[c];
        for ((all, bytes), (r, b)) in learned
            .iter_mut()
            .zip(measure(cat, &seen, tests, settings, weights))
        {
            all.extend(r);
            *bytes = (*bytes).max(b);
        }
        base.extend(tests.iter().map(|&t| {
            let q = &cat.questions[t];
            recalls(&q.order, &q.relevant)
        }));
    }
    let base = mean(&base);
    learned
        .into_iter()
        .map(|(r, bytes)| Outcome {
            base,
            learned: mean(&r),
            bytes,
        })
        .collect()
}

/// The setting of `form` chosen on the traffic halves alone: the best mean Recall@5 gain over
/// the datasets' validation, among those losing at most [`LOSS`] of either recall on every
/// dataset if any does.
fn choose(
    layouts: &[&Layout],
    splits: &[Split],
    traffic: Traffic,
    seed: u64,
    form: &[Setting],
    weights: FieldWeights,
) -> Setting {
    let inner: Vec<Split> = splits.iter().map(inner).collect();
    let outcomes: Vec<Vec<Outcome>> = layouts
        .iter()
        .zip(&inner)
        .map(|(l, s)| run(l, s, traffic, seed, form, weights))
        .collect();
    let mut best: Option<(bool, f64, Setting)> = None;
    for (i, &setting) in form.iter().enumerate() {
        let deltas: Vec<[f64; 2]> = outcomes
            .iter()
            .map(|o| {
                let o = &o[i];
                [o.learned[0] - o.base[0], o.learned[1] - o.base[1]]
            })
            .collect();
        let safe = deltas.iter().all(|d| d[0] >= -LOSS && d[1] >= -LOSS);
        let gain = deltas.iter().map(|d| d[0]).sum::<f64>() / deltas.len() as f64;
        if best.is_none_or(|(s, g, _)| (safe, gain) > (s, g)) {
            best = Some((safe, gain, setting));
        }
    }
    best.unwrap().2
}

fn f3(x: f64) -> String {
    let s = format!("{x:.3}");
    s.strip_prefix("0.")
        .map(|r| format!(".{r}"))
        .or_else(|| s.strip_prefix("-0.").map(|r| format!("−.{r}")))
        .unwrap_or(s)
}

fn signed(x: f64) -> String {
    if x >= 0.0005 {
        format!("+{}", f3(x))
    } else if x > -0.0005 {
        "±0".into()
    } else {
        f3(x)
    }
}

/// One cell of the report: a form's figures in one (dataset, layout, traffic, order). Over
/// seeds: the median base, and that plus the median gain.
struct Cell {
    dataset: &'static str,
    layout: &'static str,
    traffic: Traffic,
    /// "dataset order" or "median of N seeds".
    order: String,
    form: &'static str,
    base: [f64; 2],
    learned: [f64; 2],
    bytes: usize,
    settings: Vec<String>,
}

fn main() {
    let seeds = catalogs::seeds_argument("learn", DEFAULT_SEEDS);
    let config = Config::default();
    let weights = Engine::new(config).weights;
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/datasets");
    let mut layouts: Vec<Layout> = Vec::new();
    for name in DATASETS {
        let dir = root.join(name);
        let dataset =
            Dataset::load(&dir.join("tools.jsonl"), &dir.join("queries.jsonl")).expect("dataset");
        for layout in LAYOUTS {
            let cats = catalogs_in(&dataset, layout)
                .into_iter()
                .map(|d| prepare(d, weights))
                .collect();
            layouts.push(Layout {
                dataset: name,
                layout,
                cats,
            });
        }
    }
    println!("## Layouts\n");
    println!(
        "| dataset | layout | catalogs | questions | held-out calls of a tool the traffic called | R@5 a boost of those tools could add at most |"
    );
    println!("|---|---|---:|---:|---:|---:|");
    for l in &layouts {
        // The share of the held-out calls whose tool the traffic (all shadowed) called, and the
        // Recall@5 gain if every such call outside the keyword ranking's top 5 entered it: the
        // most a channel that only raises called tools can add.
        let covered = |s: &Split| {
            let (mut calls, mut seen, mut gain, mut questions) = (0, 0, 0.0, 0);
            for (c, cat) in l.cats.iter().enumerate() {
                let called: Vec<usize> = s.traffic[c]
                    .iter()
                    .flat_map(|&q| cat.questions[q].relevant.iter().copied())
                    .collect();
                for &q in &s.held_out[c] {
                    let question = &cat.questions[q];
                    let top = &question.order[..TOP_K.min(question.order.len())];
                    let mut missed = 0;
                    for e in &question.relevant {
                        calls += 1;
                        seen += usize::from(called.contains(e));
                        missed += usize::from(called.contains(e) && !top.contains(e));
                    }
                    questions += 1;
                    gain += missed as f64 / question.relevant.len().max(1) as f64;
                }
            }
            (
                seen as f64 / calls.max(1) as f64,
                gain / f64::from(questions.max(1)),
            )
        };
        let by_seed: Vec<(f64, f64)> = (1..=seeds).map(|s| covered(&split(l, Some(s)))).collect();
        let in_order = covered(&split(l, None));
        println!(
            "| {} | {} | {} | {} | {} / {} | {} / {} |",
            l.dataset,
            l.layout,
            l.cats.len(),
            l.cats.iter().map(|c| c.questions.len()).sum::<usize>(),
            f3(in_order.0),
            f3(median(by_seed.iter().map(|x| x.0).collect())),
            f3(in_order.1),
            f3(median(by_seed.iter().map(|x| x.1).collect())),
        );
    }
    println!("\n(dataset order / median of {seeds} seeds)\n");
    // The orders: the dataset's, then each seed's.
    let orders: Vec<Option<u64>> = std::iter::once(None).chain((1..=seeds).map(Some)).collect();
    let forms = grid();
    let mut cells: Vec<Cell> = Vec::new();
    let mut hindsight: Vec<String> = Vec::new();
    for layout_name in LAYOUTS {
        let these: Vec<&Layout> = layouts.iter().filter(|l| l.layout == layout_name).collect();
        for traffic in [Traffic::AllShadowed, Traffic::Sampled] {
            for form in &forms {
                // Per order: the chosen setting and each dataset's outcome.
                let mut per_order: Vec<(Setting, Vec<Outcome>)> = Vec::new();
                for &order in &orders {
                    let seed = order.unwrap_or(0);
                    let splits: Vec<Split> = these.iter().map(|l| split(l, order)).collect();
                    let chosen = choose(&these, &splits, traffic, seed, form, weights);
                    let outcomes = these
                        .iter()
                        .zip(&splits)
                        .map(|(l, s)| run(l, s, traffic, seed, &[chosen], weights).remove(0))
                        .collect();
                    per_order.push((chosen, outcomes));
                    eprintln!(
                        "{layout_name}, {}, {}, order {order:?}: {}",
                        traffic.name(),
                        form[0].form(),
                        chosen.describe()
                    );
                }
                for (d, l) in these.iter().enumerate() {
                    let (chosen, outcomes) = &per_order[0];
                    cells.push(Cell {
                        dataset: l.dataset,
                        layout: l.layout,
                        traffic,
                        order: "dataset order".into(),
                        form: form[0].form(),
                        base: outcomes[d].base,
                        learned: outcomes[d].learned,
                        bytes: outcomes[d].bytes,
                        settings: vec![chosen.describe()],
                    });
                    if seeds > 0 {
                        let of = |f: &dyn Fn(&Outcome) -> f64| {
                            median(per_order[1..].iter().map(|(_, o)| f(&o[d])).collect())
                        };
                        let mut settings: Vec<String> =
                            per_order[1..].iter().map(|(s, _)| s.describe()).collect();
                        settings.sort();
                        settings.dedup();
                        cells.push(Cell {
                            dataset: l.dataset,
                            layout: l.layout,
                            traffic,
                            order: format!("median of {seeds} seeds"),
                            form: form[0].form(),
                            base: [of(&|o| o.base[0]), of(&|o| o.base[1])],
                            // The median base and the median of the seeds' gains.
                            learned: [
                                of(&|o| o.base[0]) + of(&|o| o.learned[0] - o.base[0]),
                                of(&|o| o.base[1]) + of(&|o| o.learned[1] - o.base[1]),
                            ],
                            bytes: per_order[1..]
                                .iter()
                                .map(|(_, o)| o[d].bytes)
                                .max()
                                .unwrap_or(0),
                            settings,
                        });
                    }
                }
                // In hindsight: the setting best on the held-out half itself (dataset order).
                if form.len() > 1 {
                    let splits: Vec<Split> = these.iter().map(|l| split(l, None)).collect();
                    let outcomes: Vec<Vec<Outcome>> = these
                        .iter()
                        .zip(&splits)
                        .map(|(l, sp)| run(l, sp, traffic, 0, form, weights))
                        .collect();
                    let best = form
                        .iter()
                        .enumerate()
                        .map(|(i, &s)| {
                            let d: Vec<[f64; 2]> = outcomes
                                .iter()
                                .map(|o| {
                                    let o = &o[i];
                                    [o.learned[0] - o.base[0], o.learned[1] - o.base[1]]
                                })
                                .collect();
                            (d.iter().map(|x| x[0]).sum::<f64>(), s, d)
                        })
                        .max_by(|a, b| a.0.total_cmp(&b.0))
                        .unwrap();
                    hindsight.push(format!(
                        "| {layout_name} | {} | {} | {} | {} |",
                        traffic.name(),
                        form[0].form(),
                        best.1.describe(),
                        best.2
                            .iter()
                            .map(|d| format!("{} / {}", signed(d[0]), signed(d[1])))
                            .collect::<Vec<_>>()
                            .join(" | ")
                    ));
                }
            }
        }
    }
    print_cells(&cells);
    print_verdict(&cells);
    println!(
        "\n## In hindsight: each form's best setting chosen on the held-out half (dataset order; not a result)\n"
    );
    println!(
        "| layout | traffic | form | setting | seal_tools ΔR@5 / ΔR@20 | toolbench | livemcpbench |"
    );
    println!("|---|---|---|---|---|---|---|");
    for row in hindsight {
        println!("{row}");
    }
}

fn print_cells(cells: &[Cell]) {
    let mut keys: Vec<(&str, Traffic, String)> = Vec::new();
    for c in cells {
        let key = (c.layout, c.traffic, c.order.clone());
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    for (layout, traffic, order) in keys {
        println!("\n## {layout}, {}, {order}\n", traffic.name());
        println!(
            "| dataset | form | R@5 base → learned (Δ) | R@20 base → learned (Δ) | largest state per catalog | setting chosen |"
        );
        println!("|---|---|---|---|---:|---|");
        for c in cells
            .iter()
            .filter(|c| c.layout == layout && c.traffic == traffic && c.order == order)
        {
            println!(
                "| {} | {} | {} → {} ({}) | {} → {} ({}) | {} B | {} |",
                c.dataset,
                c.form,
                f3(c.base[0]),
                f3(c.learned[0]),
                signed(c.learned[0] - c.base[0]),
                f3(c.base[1]),
                f3(c.learned[1]),
                signed(c.learned[1] - c.base[1]),
                c.bytes,
                c.settings.join("; ")
            );
        }
    }
}

/// The rule on the 200-tool layout: ≥ [`GAIN`] Recall@5 on two of the three datasets,
/// no loss beyond [`LOSS`] (of Recall@5 or Recall@20) on any.
fn print_verdict(cells: &[Cell]) {
    println!("\n## Verdict (200-tool layout; the whole catalog beside)\n");
    println!(
        "| traffic | order | form | datasets gaining ≥ .03 R@5 | worst Δ (R@5, R@20) | meets the rule | whole catalog: worst Δ / gains ≥ .03 |"
    );
    println!("|---|---|---|---:|---|---|---|");
    let mut keys: Vec<(Traffic, String, &str)> = Vec::new();
    for c in cells {
        let key = (c.traffic, c.order.clone(), c.form);
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    for (traffic, order, form) in keys {
        let of = |layout: &str| -> (usize, f64, f64) {
            let these: Vec<&Cell> = cells
                .iter()
                .filter(|c| {
                    c.layout == layout && c.traffic == traffic && c.order == order && c.form == form
                })
                .collect();
            let gains = these
                .iter()
                .filter(|c| c.learned[0] - c.base[0] >= GAIN - 1e-9)
                .count();
            let worst5 = these
                .iter()
                .map(|c| c.learned[0] - c.base[0])
                .fold(f64::INFINITY, f64::min);
            let worst20 = these
                .iter()
                .map(|c| c.learned[1] - c.base[1])
                .fold(f64::INFINITY, f64::min);
            (gains, worst5, worst20)
        };
        let (gains, w5, w20) = of("200-tool");
        let meets = gains >= 2 && w5 >= -LOSS - 1e-9 && w20 >= -LOSS - 1e-9;
        let (wg, ww5, ww20) = of("whole");
        println!(
            "| {} | {order} | {form} | {gains} | {}, {} | {} | {}, {} / {wg} |",
            traffic.name(),
            signed(w5),
            signed(w20),
            if meets { "**yes**" } else { "no" },
            signed(ww5),
            signed(ww20),
        );
    }
}
