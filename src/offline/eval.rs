//! Retrieval evaluation: how well the filter's ranking finds the tools a query needs, what the
//! kept tools cost in tokens, and how long ranking takes. Native only (the `toolsift eval` CLI
//! and the quality-floor test); never linked into the `.wasm`.
//!
//! The catalog is ranked with exactly the filter's code path: the tool lines are joined into one
//! OpenAI chat `tools` array and read by [`Catalog::build`] (the same call the filter's catalog
//! cache makes), and each query is bounded with [`head_and_tail`] to
//! [`MAX_QUERY_BYTES`] (as [`Dialect::parse`] bounds a request's query) before
//! [`Index::rank`](crate::rank::Index::rank).
//!
//! With an [`Embedder`] ([`evaluate_with`] and [`Ranker::Hybrid`]) each query is ranked as the
//! filter ranks it with `ranking: hybrid`: the query's texts and every tool's text get vectors
//! from an OpenAI-compatible embeddings service through the filter's own
//! [`crate::embeddings`] code (request body, response parsing, vector cache, batching), and the
//! channels are fused by [`rank_fused`], the call behind
//! [`Analysis::rank_hybrid`](crate::pipeline::Analysis::rank_hybrid). The tools are embedded
//! once per run, in batches, on the first query.
//!
//! Dataset format (see `../shared/datasets/README.md`): `tools.jsonl` holds one OpenAI function
//! tool per line, `{"type":"function","function":{"name","description","parameters"}}`;
//! `queries.jsonl` holds `{"id","query","relevant":[tool names]}` per line. Blank lines are
//! ignored.

use crate::config::Config;
use crate::dialects::{Choice, Dialect, Entry, MAX_QUERY_BYTES};
use crate::embeddings::{
    Fallback, Gathered, MAX_SENTENCES, MemoryBytes, Slot, Source, VectorCache, parse_response,
    request_body,
};
use crate::fusion::FusionParams;
use crate::pipeline::{fusion_params, rank_fused};
use crate::rank::{Catalog, FieldWeights};
use crate::select::select;
use crate::text::head_and_tail;
use serde::Deserialize;
use serde::ser::{Serialize, SerializeMap, Serializer};
use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::time::Instant;

pub mod followups;
pub mod forms;
pub mod generated;
mod grammars;
pub use followups::{
    ANSWERED, FOLLOW_UP_ASK, FOLLOW_UPS, FollowupReport, FollowupRow, MISSED, SHIFTS,
    evaluate_followups, restated,
};

/// The cut-off of NDCG.
pub const NDCG_AT: usize = 10;

/// A dataset or evaluation error, with the file and line where that applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvalError(pub String);

impl fmt::Display for EvalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for EvalError {}

/// One tool of the catalog: its name and its JSON line exactly as in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tool {
    pub name: String,
    pub line: String,
}

/// One query and the names of the tools it needs.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Query {
    #[serde(deserialize_with = "string_or_number")]
    pub id: String,
    pub query: String,
    pub relevant: Vec<String>,
}

/// A query's relevant tools, each once, in the dataset's order.
fn distinct_relevant(q: &Query) -> Vec<&str> {
    let mut relevant: Vec<&str> = Vec::new();
    for r in &q.relevant {
        if !relevant.contains(&r.as_str()) {
            relevant.push(r);
        }
    }
    relevant
}

fn string_or_number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    match serde_json::Value::deserialize(d)? {
        serde_json::Value::String(s) => Ok(s),
        serde_json::Value::Number(n) => Ok(n.to_string()),
        other => Err(serde::de::Error::custom(format!(
            "expected a string or a number, found {other}"
        ))),
    }
}

/// A tool catalog and its queries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dataset {
    /// Shown in reports and plot titles: by default the folder holding `tools.jsonl`.
    pub name: String,
    pub tools: Vec<Tool>,
    pub queries: Vec<Query>,
}

/// Non-blank lines of a JSONL text, with their 1-based line numbers.
fn lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty())
}

impl Dataset {
    /// Reads `tools.jsonl` and `queries.jsonl`; the name is the folder of the tools file.
    /// Errors name the file and the line.
    pub fn load(tools: &Path, queries: &Path) -> Result<Dataset, EvalError> {
        let read = |p: &Path| {
            std::fs::read_to_string(p)
                .map_err(|e| EvalError(format!("cannot read {}: {e}", p.display())))
        };
        let tools_text = read(tools)?;
        let queries_text = read(queries)?;
        let name = tools
            .canonicalize()
            .ok()
            .and_then(|p| {
                p.parent()
                    .and_then(|d| d.file_name())
                    .map(|n| n.to_string_lossy().into_owned())
            })
            .unwrap_or_else(|| tools.display().to_string());
        Ok(Dataset {
            name,
            tools: parse_tools(&tools.display().to_string(), &tools_text)?,
            queries: parse_queries(&queries.display().to_string(), &queries_text)?,
        })
    }

    /// Parses the two JSONL texts. Errors name the file (`tools.jsonl` / `queries.jsonl`) and
    /// the line.
    pub fn parse(name: &str, tools: &str, queries: &str) -> Result<Dataset, EvalError> {
        Ok(Dataset {
            name: name.to_owned(),
            tools: parse_tools("tools.jsonl", tools)?,
            queries: parse_queries("queries.jsonl", queries)?,
        })
    }

    /// Each tool's place in the catalog, by name.
    pub fn positions(&self) -> HashMap<&str, usize> {
        self.tools
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.as_str(), i))
            .collect()
    }

    /// The catalog as the filter receives it: one JSON array of the tool lines.
    pub fn tools_array(&self) -> String {
        let mut out = String::from("[");
        for (i, t) in self.tools.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&t.line);
        }
        out.push(']');
        out
    }
}

/// Reads a tools JSONL text; `file` names it in errors.
pub fn parse_tools(file: &str, text: &str) -> Result<Vec<Tool>, EvalError> {
    #[derive(Deserialize)]
    struct Line {
        function: Function,
    }
    #[derive(Deserialize)]
    struct Function {
        name: String,
    }
    let mut tools = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (n, line) in lines(text) {
        let tool: Line = serde_json::from_str(line).map_err(|e| {
            EvalError(format!(
                "{file} line {n}: expected an OpenAI function tool \
                 {{\"type\":\"function\",\"function\":{{\"name\":…}}}}: {e}"
            ))
        })?;
        if let Some(first) = seen.insert(tool.function.name.clone(), n) {
            return Err(EvalError(format!(
                "{file} line {n}: tool name `{}` already used on line {first}; names must be unique",
                tool.function.name
            )));
        }
        tools.push(Tool {
            name: tool.function.name,
            line: line.to_owned(),
        });
    }
    if tools.is_empty() {
        return Err(EvalError(format!("{file}: no tools")));
    }
    Ok(tools)
}

/// Reads a queries JSONL text; `file` names it in errors.
pub fn parse_queries(file: &str, text: &str) -> Result<Vec<Query>, EvalError> {
    let mut queries = Vec::new();
    for (n, line) in lines(text) {
        let q: Query = serde_json::from_str(line).map_err(|e| {
            EvalError(format!(
                "{file} line {n}: expected {{\"id\",\"query\",\"relevant\":[tool names]}}: {e}"
            ))
        })?;
        queries.push(q);
    }
    if queries.is_empty() {
        return Err(EvalError(format!("{file}: no queries")));
    }
    Ok(queries)
}

/// The per-query metrics, from the 1-based rank of each relevant tool (`None`: not in the
/// ranking at all, e.g. a name the catalog does not have).
#[derive(Debug, Clone, PartialEq)]
pub struct QueryScores {
    /// Recall@k for each requested k: |relevant ∩ top k| / |relevant|.
    pub recall: Vec<f64>,
    /// Complete@k for each requested k: every relevant tool is in the top k.
    pub complete: Vec<bool>,
    /// NDCG@10 with binary relevance; the ideal ranking puts all relevant tools first.
    pub ndcg10: f64,
    /// 1 / rank of the first relevant tool, 0 when none is ranked.
    pub reciprocal_rank: f64,
}

/// Scores one query. `relevant_ranks` has one element per distinct relevant tool.
pub fn score(relevant_ranks: &[Option<usize>], ks: &[usize]) -> QueryScores {
    let n = relevant_ranks.len();
    let within = |k: usize| {
        relevant_ranks
            .iter()
            .filter(|r| r.is_some_and(|r| r <= k))
            .count()
    };
    let recall = ks
        .iter()
        .map(|&k| {
            if n == 0 {
                0.0
            } else {
                within(k) as f64 / n as f64
            }
        })
        .collect();
    let complete = ks.iter().map(|&k| n > 0 && within(k) == n).collect();
    let gain = |rank: usize| 1.0 / ((rank + 1) as f64).log2();
    let dcg: f64 = relevant_ranks
        .iter()
        .filter_map(|r| *r)
        .filter(|&r| r <= NDCG_AT)
        .map(gain)
        .sum();
    let ideal: f64 = (1..=n.min(NDCG_AT)).map(gain).sum();
    let ndcg10 = if ideal > 0.0 { dcg / ideal } else { 0.0 };
    let reciprocal_rank = relevant_ranks
        .iter()
        .filter_map(|r| *r)
        .min()
        .map_or(0.0, |r| 1.0 / r as f64);
    QueryScores {
        recall,
        complete,
        ndcg10,
        reciprocal_rank,
    }
}

/// The `p`-th percentile (0–100) of sorted values, nearest-rank method.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted
        .get(rank.clamp(1, sorted.len()) - 1)
        .copied()
        .unwrap_or(0.0)
}

/// Averages at one cut-off k.
#[derive(Debug, Clone, PartialEq)]
pub struct AtK {
    pub k: usize,
    /// Mean Recall@k.
    pub recall: f64,
    /// Share of queries with every relevant tool in the top k.
    pub complete: f64,
    /// Mean tokens of the top-k tools (caller's tokenizer).
    pub tokens: f64,
    /// Mean of the filter's chars/4 estimate for the top-k tools.
    pub tokens_estimate: f64,
}

/// What the filter itself would keep with the configuration (`top_k`, `min_score`,
/// `max_tool_tokens`, `always_include`), through [`select`], with no pins from the request.
#[derive(Debug, Clone, PartialEq)]
pub struct Selected {
    pub top_k: usize,
    /// Mean share of the relevant tools that are kept.
    pub recall: f64,
    /// Share of queries with every relevant tool kept.
    pub complete: f64,
    /// Mean number of kept tools.
    pub tools: f64,
    /// Mean tokens of the kept tools (caller's tokenizer).
    pub tokens: f64,
    /// Queries too weak to rank by ([`crate::weak_query`]), whose selection kept what
    /// `weak_query.action` keeps.
    pub weak: usize,
}

/// One query's outcome, for digging into a ranking.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryResult {
    pub id: String,
    /// Each relevant tool and its 1-based rank (`None`: not in the catalog).
    pub relevant_ranks: Vec<(String, Option<usize>)>,
    pub ndcg10: f64,
    pub reciprocal_rank: f64,
    pub rank_us: f64,
    /// What the ranking could read of the question ([`crate::weak_query`]).
    pub reading: crate::weak_query::Reading,
    /// Too weak to rank by under the configuration's `weak_query` (hybrid: and no confident
    /// dense match): its selection kept what `weak_query.action` keeps.
    pub weak: bool,
    /// Hybrid: how far the best tool's cosine stands above the catalog's mean, in standard
    /// deviations ([`crate::weak_query::dense_margin`]).
    pub dense_margin: Option<f32>,
}

/// The evaluation of one dataset. Serialises to one flat JSON object with keys such as
/// `recall@5`, `complete@5`, `tokens@5`, `ndcg@10`, `mrr`, `tokens_catalog`, `rank_us_median`.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub dataset: String,
    /// Queries scored (queries with an empty `relevant` list are left out).
    pub queries: usize,
    /// Queries left out because they name no relevant tool.
    pub queries_without_relevant: usize,
    pub tools: usize,
    /// Relevant names, over all queries, that the catalog does not have (each counts as a miss).
    pub unknown_relevant: usize,
    pub weights: FieldWeights,
    pub at_k: Vec<AtK>,
    pub ndcg10: f64,
    pub mrr: f64,
    /// Tokens of the whole catalog (caller's tokenizer), and the filter's estimate of them.
    pub tokens_catalog: usize,
    pub tokens_estimate_catalog: usize,
    pub selected: Selected,
    /// Time of [`Index::rank`](crate::rank::Index::rank) per query, in microseconds.
    pub rank_us_median: f64,
    pub rank_us_p99: f64,
    pub rank_us_mean: f64,
    /// Time to read and index the catalog once, in milliseconds.
    pub build_ms: f64,
    /// How the queries were ranked with embeddings; `None`: keyword ranking (BM25).
    pub hybrid: Option<HybridReport>,
    /// Per query, in file order.
    pub per_query: Vec<QueryResult>,
}

/// Hybrid ranking's settings and its embedding calls over one run.
#[derive(Debug, Clone, PartialEq)]
pub struct HybridReport {
    /// The embeddings service, as given (the URL in the CLI).
    pub service: String,
    pub model: String,
    /// The fusion's `rrf_k` and channel weights, from the configuration.
    pub params: FusionParams,
    /// Calls made and texts embedded, tools and query texts together.
    pub calls: usize,
    pub inputs: usize,
    /// Time spent getting vectors (cache and calls), in milliseconds: in all, for the first
    /// query (which embeds the catalog) and per later query.
    pub embed_ms_total: f64,
    pub embed_ms_first: f64,
    pub embed_ms_median: f64,
    pub embed_ms_p99: f64,
}

impl Report {
    /// The averages at `k`, if `k` was evaluated.
    pub fn at(&self, k: usize) -> Option<&AtK> {
        self.at_k.iter().find(|a| a.k == k)
    }

    /// Mean Recall@k, if `k` was evaluated.
    pub fn recall_at(&self, k: usize) -> Option<f64> {
        self.at(k).map(|a| a.recall)
    }

    /// `hybrid` or `keyword`.
    pub fn ranking(&self) -> &'static str {
        if self.hybrid.is_some() {
            "hybrid"
        } else {
            "keyword"
        }
    }
}

impl Serialize for Report {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("dataset", &self.dataset)?;
        m.serialize_entry("queries", &self.queries)?;
        m.serialize_entry("queries_without_relevant", &self.queries_without_relevant)?;
        m.serialize_entry("tools", &self.tools)?;
        m.serialize_entry("unknown_relevant", &self.unknown_relevant)?;
        m.serialize_entry("ranking", self.ranking())?;
        #[derive(serde::Serialize)]
        struct Weights {
            name: usize,
            description: usize,
            params: usize,
        }
        let w = self.weights;
        let weights = Weights {
            name: w.name,
            description: w.description,
            params: w.params,
        };
        m.serialize_entry("weights", &weights)?;
        m.serialize_entry("k", &self.at_k.iter().map(|a| a.k).collect::<Vec<_>>())?;
        for a in &self.at_k {
            m.serialize_entry(&format!("recall@{}", a.k), &a.recall)?;
        }
        for a in &self.at_k {
            m.serialize_entry(&format!("complete@{}", a.k), &a.complete)?;
        }
        m.serialize_entry(&format!("ndcg@{NDCG_AT}"), &self.ndcg10)?;
        m.serialize_entry("mrr", &self.mrr)?;
        m.serialize_entry("tokens_catalog", &self.tokens_catalog)?;
        for a in &self.at_k {
            m.serialize_entry(&format!("tokens@{}", a.k), &a.tokens)?;
        }
        m.serialize_entry("tokens_estimate_catalog", &self.tokens_estimate_catalog)?;
        for a in &self.at_k {
            m.serialize_entry(&format!("tokens_estimate@{}", a.k), &a.tokens_estimate)?;
        }
        m.serialize_entry("selected_top_k", &self.selected.top_k)?;
        m.serialize_entry("selected_recall", &self.selected.recall)?;
        m.serialize_entry("selected_complete", &self.selected.complete)?;
        m.serialize_entry("selected_tools", &self.selected.tools)?;
        m.serialize_entry("selected_tokens", &self.selected.tokens)?;
        m.serialize_entry("selected_weak", &self.selected.weak)?;
        m.serialize_entry("rank_us_median", &self.rank_us_median)?;
        m.serialize_entry("rank_us_p99", &self.rank_us_p99)?;
        m.serialize_entry("rank_us_mean", &self.rank_us_mean)?;
        m.serialize_entry("build_ms", &self.build_ms)?;
        if let Some(h) = &self.hybrid {
            #[derive(serde::Serialize)]
            struct Channels {
                bm25: f32,
                exact: f32,
                param_keys: f32,
                vector: f32,
            }
            #[derive(serde::Serialize)]
            struct Embeddings<'a> {
                url: &'a str,
                model: &'a str,
                calls: usize,
                inputs: usize,
                ms_total: f64,
                ms_first_query: f64,
                ms_median: f64,
                ms_p99: f64,
            }
            let [bm25, exact, param_keys, vector] = h.params.weights;
            m.serialize_entry("rrf_k", &h.params.k)?;
            m.serialize_entry(
                "channel_weights",
                &Channels {
                    bm25,
                    exact,
                    param_keys,
                    vector,
                },
            )?;
            m.serialize_entry(
                "embeddings",
                &Embeddings {
                    url: &h.service,
                    model: &h.model,
                    calls: h.calls,
                    inputs: h.inputs,
                    ms_total: h.embed_ms_total,
                    ms_first_query: h.embed_ms_first,
                    ms_median: h.embed_ms_median,
                    ms_p99: h.embed_ms_p99,
                },
            )?;
        }
        if !self.per_query.is_empty() {
            #[derive(serde::Serialize)]
            struct Row<'a> {
                id: &'a str,
                /// Relevant tool → 1-based rank (`null`: not in the catalog), in query order.
                relevant_ranks: Ranks<'a>,
                #[serde(rename = "ndcg@10")]
                ndcg10: f64,
                rr: f64,
                rank_us: f64,
                /// `known/terms` of the question's content terms.
                reading: String,
                weak: bool,
                #[serde(skip_serializing_if = "Option::is_none")]
                dense_margin: Option<f32>,
            }
            struct Ranks<'a>(&'a [(String, Option<usize>)]);
            impl Serialize for Ranks<'_> {
                fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                    let mut m = s.serialize_map(Some(self.0.len()))?;
                    for (name, rank) in self.0 {
                        m.serialize_entry(name, rank)?;
                    }
                    m.end()
                }
            }
            let rows: Vec<Row> = self
                .per_query
                .iter()
                .map(|q| Row {
                    id: &q.id,
                    relevant_ranks: Ranks(&q.relevant_ranks),
                    ndcg10: q.ndcg10,
                    rr: q.reciprocal_rank,
                    rank_us: q.rank_us,
                    reading: q.reading.describe(),
                    weak: q.weak,
                    dense_margin: q.dense_margin,
                })
                .collect();
            m.serialize_entry("per_query", &rows)?;
        }
        m.end()
    }
}

/// Ranks the whole catalog for every query of `dataset` with the filter's code path and scores
/// the rankings at each of `ks`. `weights` are the field weights to index with (the filter's:
/// [`crate::pipeline::Engine::new`]`(config).weights`); `config` decides the [`Selected`]
/// figures. `count_tokens` counts the tokens of one tool's JSON line; `progress` is called with
/// the number of queries done after each one.
pub fn evaluate(
    dataset: &Dataset,
    config: &Config,
    weights: FieldWeights,
    ks: &[usize],
    count_tokens: &dyn Fn(&str) -> usize,
    progress: &mut dyn FnMut(usize),
) -> Result<Report, EvalError> {
    evaluate_with(
        dataset,
        config,
        weights,
        ks,
        Ranker::Keyword,
        count_tokens,
        progress,
    )
}

/// How [`evaluate_with`] ranks.
pub enum Ranker<'r, 'a> {
    /// BM25, the filter's `ranking: keyword`.
    Keyword,
    /// The filter's `ranking: hybrid`, with vectors from this service; the fusion's settings
    /// (`rrf_k`, `channel_weights`) and `top_k` etc. come from the configuration. Any failure of
    /// the service fails the evaluation: it never falls back to keyword ranking.
    Hybrid(&'r mut Embedder<'a>),
}

/// [`evaluate`] with the ranking of choice. The rank time per query is the ranking itself
/// (BM25, or the fused channels once the vectors are known); the time spent getting vectors is
/// in [`Report::hybrid`].
pub fn evaluate_with(
    dataset: &Dataset,
    config: &Config,
    weights: FieldWeights,
    ks: &[usize],
    mut ranker: Ranker<'_, '_>,
    count_tokens: &dyn Fn(&str) -> usize,
    progress: &mut dyn FnMut(usize),
) -> Result<Report, EvalError> {
    if ks.is_empty() || ks.contains(&0) {
        return Err(EvalError("k values must be at least 1".to_owned()));
    }
    let array = dataset.tools_array();
    let started = Instant::now();
    let catalog = Catalog::build(Dialect::OpenaiChat, &array, weights).map_err(|p| {
        EvalError(format!(
            "the tools do not form an OpenAI chat tools array ({})",
            p.reason()
        ))
    })?;
    let build_ms = started.elapsed().as_secs_f64() * 1e3;
    // Entry i is line i: every line must be a function tool the filter would rank.
    if catalog.draft.entries.len() != dataset.tools.len() {
        return Err(EvalError(format!(
            "the filter reads {} tools where the file has {}",
            catalog.draft.entries.len(),
            dataset.tools.len()
        )));
    }
    for (i, (entry, tool)) in catalog.draft.entries.iter().zip(&dataset.tools).enumerate() {
        match entry {
            Entry::Function(text) if text.name == tool.name => {}
            Entry::Function(text) => {
                return Err(EvalError(format!(
                    "tool {}: the filter reads the name `{}` where the file says `{}`",
                    i + 1,
                    text.name,
                    tool.name
                )));
            }
            Entry::Builtin => {
                return Err(EvalError(format!(
                    "tool {} (`{}`): the filter does not read it as a function tool",
                    i + 1,
                    tool.name
                )));
            }
        }
    }
    let tokens: Vec<usize> = dataset
        .tools
        .iter()
        .map(|t| count_tokens(&t.line))
        .collect();
    let token_of = |entry: usize| tokens.get(entry).copied().unwrap_or(0);
    let estimate_of = |entry: usize| catalog.tokens.get(entry).copied().unwrap_or(0);
    let position = dataset.positions();

    let mut recall_sum = vec![0.0; ks.len()];
    let mut complete_sum = vec![0.0; ks.len()];
    let mut tokens_sum = vec![0.0; ks.len()];
    let mut estimate_sum = vec![0.0; ks.len()];
    let (mut ndcg_sum, mut rr_sum) = (0.0, 0.0);
    let (mut sel_recall, mut sel_complete, mut sel_tools, mut sel_tokens) = (0.0, 0.0, 0.0, 0.0);
    let mut sel_weak = 0;
    let mut times = Vec::with_capacity(dataset.queries.len());
    let mut per_query = Vec::with_capacity(dataset.queries.len());
    let mut unknown_relevant = 0;
    let mut without_relevant = 0;
    // rank_of[entry] = 1-based rank in the current query's ranking.
    let mut rank_of = vec![0usize; dataset.tools.len()];
    // Time to get each query's vectors (hybrid), in milliseconds.
    let mut embed_times: Vec<f64> = Vec::new();

    for (done, q) in dataset.queries.iter().enumerate() {
        let relevant = distinct_relevant(q);
        if relevant.is_empty() {
            // Not scored, so not ranked (nor embedded).
            without_relevant += 1;
            progress(done + 1);
            continue;
        }
        let text = head_and_tail(&q.query, MAX_QUERY_BYTES);
        let reading = crate::weak_query::Reading::of(&catalog.index, &text);
        let mut weak = config.weak_query.is_weak(reading);
        let mut dense_margin = None;
        let (ranking, us) = match &mut ranker {
            Ranker::Keyword => {
                let t0 = Instant::now();
                let ranking = catalog.index.rank(&text);
                (ranking, t0.elapsed().as_secs_f64() * 1e6)
            }
            Ranker::Hybrid(embedder) => {
                let t0 = Instant::now();
                let gathered = embedder.vectors(&catalog, &text)?;
                embed_times.push(t0.elapsed().as_secs_f64() * 1e3);
                let (query_vectors, tool_vectors) = embedder.complete(&gathered)?;
                let t0 = Instant::now();
                let fused = rank_fused(&catalog, config, &text, &query_vectors, &tool_vectors);
                let elapsed = t0.elapsed().as_secs_f64() * 1e6;
                let cosines = crate::pipeline::best_cosines(&query_vectors, &tool_vectors);
                dense_margin = crate::weak_query::dense_margin(&cosines);
                if weak {
                    weak = !crate::weak_query::dense_confident(&cosines);
                }
                (fused.order, elapsed)
            }
        };
        sel_weak += usize::from(weak);
        progress(done + 1);
        times.push(us);
        for (i, s) in ranking.iter().enumerate() {
            if let Some(slot) = rank_of.get_mut(s.entry) {
                *slot = i + 1;
            }
        }
        let ranks: Vec<(String, Option<usize>)> = relevant
            .iter()
            .map(|name| {
                let rank = position.get(name).and_then(|&e| rank_of.get(e).copied());
                (name.to_string(), rank)
            })
            .collect();
        unknown_relevant += ranks.iter().filter(|(_, r)| r.is_none()).count();
        let only_ranks: Vec<Option<usize>> = ranks.iter().map(|(_, r)| *r).collect();
        let scores = score(&only_ranks, ks);
        for (i, &k) in ks.iter().enumerate() {
            if let Some(v) = recall_sum.get_mut(i) {
                *v += scores.recall.get(i).copied().unwrap_or(0.0);
            }
            if let Some(v) = complete_sum.get_mut(i) {
                *v += f64::from(u8::from(scores.complete.get(i).copied().unwrap_or(false)));
            }
            let top = ranking.iter().take(k);
            if let Some(v) = tokens_sum.get_mut(i) {
                *v += top.clone().map(|s| token_of(s.entry)).sum::<usize>() as f64;
            }
            if let Some(v) = estimate_sum.get_mut(i) {
                *v += top.map(|s| estimate_of(s.entry)).sum::<usize>() as f64;
            }
        }
        ndcg_sum += scores.ndcg10;
        rr_sum += scores.reciprocal_rank;

        let selection = if weak && config.weak_query.action == crate::weak_query::Action::Pass {
            crate::select::all_allowed(&catalog, &ranking, None, &[])
        } else {
            let k = if weak {
                config.weak_query.keep(config.top_k)
            } else {
                config.top_k
            };
            select(
                config,
                k,
                &catalog,
                &ranking,
                &Choice::default(),
                &[],
                None,
                &[],
            )
        };
        let kept: Vec<usize> = selection
            .decisions
            .iter()
            .filter(|d| d.verdict.kept())
            .map(|d| d.entry)
            .collect();
        let kept_relevant = relevant
            .iter()
            .filter(|name| position.get(*name).is_some_and(|e| kept.contains(e)))
            .count();
        sel_recall += kept_relevant as f64 / relevant.len() as f64;
        sel_complete += f64::from(u8::from(kept_relevant == relevant.len()));
        sel_tools += kept.len() as f64;
        sel_tokens += kept.iter().map(|&e| token_of(e)).sum::<usize>() as f64;

        per_query.push(QueryResult {
            id: q.id.clone(),
            relevant_ranks: ranks,
            ndcg10: scores.ndcg10,
            reciprocal_rank: scores.reciprocal_rank,
            rank_us: us,
            reading,
            weak,
            dense_margin,
        });
    }

    let n = per_query.len();
    let mean = |sum: f64| if n == 0 { 0.0 } else { sum / n as f64 };
    let at_k = ks
        .iter()
        .enumerate()
        .map(|(i, &k)| AtK {
            k,
            recall: mean(recall_sum.get(i).copied().unwrap_or(0.0)),
            complete: mean(complete_sum.get(i).copied().unwrap_or(0.0)),
            tokens: mean(tokens_sum.get(i).copied().unwrap_or(0.0)),
            tokens_estimate: mean(estimate_sum.get(i).copied().unwrap_or(0.0)),
        })
        .collect();
    let mut sorted = times.clone();
    sorted.sort_by(f64::total_cmp);
    let hybrid = match &ranker {
        Ranker::Keyword => None,
        Ranker::Hybrid(embedder) => {
            let mut later: Vec<f64> = embed_times.iter().skip(1).copied().collect();
            later.sort_by(f64::total_cmp);
            Some(HybridReport {
                service: embedder.service.clone(),
                model: embedder.model.clone(),
                params: fusion_params(config),
                calls: embedder.calls,
                inputs: embedder.inputs,
                embed_ms_total: embed_times.iter().sum(),
                embed_ms_first: embed_times.first().copied().unwrap_or(0.0),
                embed_ms_median: percentile(&later, 50.0),
                embed_ms_p99: percentile(&later, 99.0),
            })
        }
    };
    Ok(Report {
        dataset: dataset.name.clone(),
        queries: n,
        queries_without_relevant: without_relevant,
        tools: dataset.tools.len(),
        unknown_relevant,
        weights,
        at_k,
        ndcg10: mean(ndcg_sum),
        mrr: mean(rr_sum),
        tokens_catalog: tokens.iter().sum(),
        tokens_estimate_catalog: catalog.tokens.iter().sum(),
        selected: Selected {
            top_k: config.top_k,
            recall: mean(sel_recall),
            complete: mean(sel_complete),
            tools: mean(sel_tools),
            tokens: mean(sel_tokens),
            weak: sel_weak,
        },
        rank_us_median: percentile(&sorted, 50.0),
        rank_us_p99: percentile(&sorted, 99.0),
        rank_us_mean: mean(times.iter().sum()),
        build_ms,
        hybrid,
        per_query,
    })
}

/// The bytes of one embeddings call: the JSON request body in; the body of a 2xx answer out,
/// or why there is none (naming the status, or the connection problem).
pub type Post<'a> = dyn FnMut(&str) -> Result<Vec<u8>, String> + 'a;

/// Vectors for hybrid ranking from an OpenAI-compatible embeddings service, got the way the
/// filter gets them ([`Source::gather`], [`Gathered::plan`], [`Source::fill`] over a
/// [`VectorCache`], [`request_body`] and [`parse_response`]), except that a query waits until
/// every vector is known: the first query of a catalog embeds all its tools, `max_batch` per
/// call, and the catalog remembers them for the next queries.
pub struct Embedder<'a> {
    /// The service as shown in messages and keyed in the cache (the URL in the CLI).
    pub service: String,
    pub model: String,
    /// Sent as `dimensions`, and required of every vector, when set.
    pub dimensions: Option<usize>,
    /// Tool texts per call.
    pub max_batch: usize,
    cache: VectorCache<MemoryBytes>,
    post: Box<Post<'a>>,
    /// Calls made, and texts sent in them.
    pub calls: usize,
    pub inputs: usize,
    /// `embeddings.roles` of the configuration.
    roles: Option<crate::config::embeddings::EmbeddingRoles>,
    /// `embeddings.query_sentences` of the configuration.
    query_sentences: usize,
}

impl<'a> Embedder<'a> {
    /// `capacity`: vectors the cache holds; more than the tools and query texts of a run keeps
    /// each text embedded once.
    pub fn new(
        service: &str,
        model: &str,
        dimensions: Option<usize>,
        max_batch: usize,
        capacity: usize,
        post: Box<Post<'a>>,
    ) -> Embedder<'a> {
        Embedder {
            service: service.to_owned(),
            model: model.to_owned(),
            dimensions,
            max_batch: max_batch.max(1),
            cache: VectorCache::new(MemoryBytes::default(), capacity, "toolsift.vectors."),
            post,
            calls: 0,
            inputs: 0,
            roles: None,
            query_sentences: MAX_SENTENCES,
        }
    }

    /// With the configuration's `embeddings` (if any): how the service tells a question from a
    /// tool's text (`roles`), and how many of a question's sentences it embeds.
    pub fn with_settings(
        mut self,
        embeddings: Option<&crate::config::embeddings::Embeddings>,
    ) -> Embedder<'a> {
        self.roles = embeddings.and_then(|e| e.roles.clone());
        self.query_sentences = embeddings.map_or(MAX_SENTENCES, |e| e.query_sentences);
        self
    }

    /// A cache capacity that holds every tool and query text of `dataset` with room to spare
    /// (the cache is set-associative: a full set evicts).
    pub fn capacity_for(dataset: &Dataset) -> usize {
        let texts = dataset.tools.len() + dataset.queries.len() * (1 + MAX_SENTENCES);
        texts.saturating_mul(16).max(4096)
    }

    fn failure(&self, why: impl fmt::Display) -> EvalError {
        EvalError(format!("embeddings service {}: {why}", self.service))
    }

    /// Every vector `query` needs over `catalog`: from the catalog's memo or the cache, and the
    /// rest from the service.
    pub fn vectors(&mut self, catalog: &Catalog, query: &str) -> Result<Gathered, EvalError> {
        let source = Source {
            provider: &self.service,
            model: &self.model,
            dimensions: self.dimensions,
            cache: &self.cache,
            roles: self.roles.as_ref(),
            query_sentences: self.query_sentences,
        };
        let mut gathered = source.gather(catalog, query);
        loop {
            let (slots, inputs) = gathered.plan(catalog, self.max_batch);
            if slots.is_empty() {
                break;
            }
            let texts: Vec<&str> = inputs.iter().map(String::as_str).collect();
            // A call is of one role when roles are a field ([`Gathered::plan`]).
            let query = slots.iter().all(|s| matches!(s, Slot::Query(_)));
            let role = self.roles.as_ref().and_then(|r| r.input_type(query));
            let body = request_body(&self.model, &texts, self.dimensions, role);
            let answer = (self.post)(&body).map_err(|e| self.failure(e))?;
            self.calls += 1;
            self.inputs += inputs.len();
            let vectors = parse_response(&answer, inputs.len(), self.dimensions).map_err(|f| {
                let why = match f {
                    Fallback::Dimensions => match self.dimensions {
                        Some(d) => format!("the answer has vectors of another size than {d}"),
                        None => "the answer has vectors of different sizes".to_owned(),
                    },
                    _ => format!(
                        "the answer is not an embeddings response for the {} inputs sent: {}",
                        inputs.len(),
                        snippet(&answer)
                    ),
                };
                self.failure(why)
            })?;
            let missing = gathered.missing_tools.len();
            source.fill(catalog, &mut gathered, &slots, vectors);
            let query_done = gathered.query.iter().all(Option::is_some);
            if gathered.missing_tools.len() == missing && !query_done {
                return Err(self.failure("the vectors it sent fill nothing"));
            }
        }
        Ok(gathered)
    }

    /// The query's vectors and every tool's, all of one size.
    pub fn complete<'g>(&self, gathered: &'g Gathered) -> Result<Vectors<'g>, EvalError> {
        gathered
            .complete()
            .ok_or_else(|| self.failure("the vectors of the query and the tools differ in size"))
    }
}

/// A query's unit vectors (the whole query, then its sentences) and each catalog entry's
/// (`None` for built-ins), as [`rank_fused`] takes them.
pub type Vectors<'g> = (Vec<&'g [f32]>, Vec<Option<&'g [f32]>>);

/// The start of a response body for an error message, on one line.
fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(200) {
        Some((cut, _)) => format!("{}…", flat.get(..cut).unwrap_or_default()),
        None if flat.is_empty() => "(empty body)".to_owned(),
        None => flat,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn recall_and_complete_count_the_top_k() {
        // Two relevant tools, ranked 1st and 4th.
        let s = score(&[Some(1), Some(4)], &[1, 3, 5]);
        assert_eq!(s.recall, [0.5, 0.5, 1.0]);
        assert_eq!(s.complete, [false, false, true]);
        assert!(close(s.reciprocal_rank, 1.0));
        // A relevant name the catalog lacks is a miss forever.
        let s = score(&[Some(2), None], &[1, 2, 100]);
        assert_eq!(s.recall, [0.0, 0.5, 0.5]);
        assert_eq!(s.complete, [false, false, false]);
        assert!(close(s.reciprocal_rank, 0.5));
        // Three relevant, one in the top 2.
        let s = score(&[Some(7), Some(2), Some(30)], &[2, 10]);
        assert!(close(s.recall[0], 1.0 / 3.0) && close(s.recall[1], 2.0 / 3.0));
        assert!(close(s.reciprocal_rank, 0.5));
    }

    #[test]
    fn ndcg_is_binary_and_cut_at_ten() {
        // Perfect: every relevant tool on top.
        assert!(close(score(&[Some(2), Some(1)], &[1]).ndcg10, 1.0));
        // One relevant at rank 2: (1/log2 3) / 1.
        assert!(close(score(&[Some(2)], &[1]).ndcg10, 1.0 / 3f64.log2()));
        // Ranks 1 and 3 of two: (1 + 1/2) / (1 + 1/log2 3).
        let want = 1.5 / (1.0 + 1.0 / 3f64.log2());
        assert!(close(score(&[Some(1), Some(3)], &[1]).ndcg10, want));
        // Rank 11 is past the cut-off; nothing ranked is 0.
        assert!(close(score(&[Some(11)], &[1]).ndcg10, 0.0));
        let none = score(&[None], &[1]);
        assert!(close(none.ndcg10, 0.0) && close(none.reciprocal_rank, 0.0));
        // Twelve relevant: the ideal is capped at ten.
        let twelve: Vec<Option<usize>> = (1..=12).map(Some).collect();
        assert!(close(score(&twelve, &[1]).ndcg10, 1.0));
    }

    #[test]
    fn percentiles_use_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert!(close(percentile(&v, 50.0), 50.0));
        assert!(close(percentile(&v, 99.0), 99.0));
        assert!(close(percentile(&[3.0], 99.0), 3.0));
        assert!(close(percentile(&[1.0, 2.0, 3.0], 50.0), 2.0));
        assert!(close(percentile(&[], 50.0), 0.0));
    }

    pub(crate) fn tool(name: &str, description: &str) -> String {
        format!(
            r#"{{"type":"function","function":{{"name":"{name}","description":"{description}","parameters":{{"type":"object","properties":{{}}}}}}}}"#
        )
    }

    /// Two questions, each needing a tool of [`tiny_tools`] the other does not, and one
    /// without relevant tools.
    pub(crate) fn followup_dataset() -> Dataset {
        let queries = [
            r#"{"id":"q1","query":"what is the weather forecast in Paris","relevant":["get_weather"]}"#,
            r#"{"id":"q2","query":"create a billing invoice for the customer","relevant":["create_invoice"]}"#,
            r#"{"id":"q3","query":"weather","relevant":[]}"#,
        ]
        .join("\n");
        Dataset::parse("tiny", &tiny_tools(), &queries).unwrap()
    }

    /// Four tools, one per line.
    pub(crate) fn tiny_tools() -> String {
        [
            tool("get_weather", "Current weather forecast for a city"),
            tool("send_email", "Send an email message to a recipient"),
            tool("create_invoice", "Create a billing invoice for a customer"),
            tool("list_files", "List the files in a folder"),
        ]
        .join("\n")
    }

    #[test]
    fn evaluates_a_tiny_dataset_end_to_end() {
        let tools = tiny_tools();
        let queries = [
            r#"{"id":"q1","query":"what is the weather forecast in Paris","relevant":["get_weather"]}"#,
            r#"{"id":2,"query":"email the invoice to the customer","relevant":["send_email","create_invoice"]}"#,
            r#"{"id":"q3","query":"nothing matches here","relevant":["list_files","no_such_tool"]}"#,
            r#"{"id":"q4","query":"weather","relevant":[]}"#,
        ]
        .join("\n");
        let d = Dataset::parse("tiny", &tools, &queries).unwrap();
        assert_eq!(d.queries[1].id, "2");
        let config = Config::from_json(br#"{"top_k":2}"#).unwrap();
        let mut calls = 0;
        let r = evaluate(
            &d,
            &config,
            FieldWeights::default(),
            &[1, 2, 4],
            &|_| 10,
            &mut |_| calls += 1,
        )
        .unwrap();
        assert_eq!(calls, 4);
        assert_eq!(
            (r.queries, r.queries_without_relevant, r.unknown_relevant),
            (3, 1, 1)
        );
        // q1: 1/1 at every k. q2: both relevant rank 1-2. q3: list_files ranks 4th (zero score,
        // ties keep catalog order), no_such_tool never.
        assert!(close(r.recall_at(1).unwrap(), (1.0 + 0.5 + 0.0) / 3.0));
        assert!(close(r.recall_at(2).unwrap(), (1.0 + 1.0 + 0.0) / 3.0));
        assert!(close(r.recall_at(4).unwrap(), (1.0 + 1.0 + 0.5) / 3.0));
        assert!(close(r.at(2).unwrap().complete, 2.0 / 3.0));
        assert!(close(r.at(4).unwrap().tokens, 40.0));
        assert_eq!(r.tokens_catalog, 40);
        assert!(close(r.mrr, (1.0 + 1.0 + 0.25) / 3.0));
        // q3 shares no term with the catalog: too weak to rank by, it keeps every tool
        // (`weak_query`'s default `max_k`, 128, is more than the catalog has).
        assert_eq!(r.selected.weak, 1);
        assert!(close(r.selected.recall, (1.0 + 1.0 + 0.5) / 3.0));
        assert!(close(r.selected.tools, (2.0 + 2.0 + 4.0) / 3.0));
        let json = serde_json::to_value(&r).unwrap();
        assert!(close(json["recall@2"].as_f64().unwrap(), 2.0 / 3.0));
        assert_eq!(json["tokens_catalog"], 40);
        assert_eq!(json["per_query"][2]["relevant_ranks"]["list_files"], 4);
        assert!(json["per_query"][2]["relevant_ranks"]["no_such_tool"].is_null());
    }

    /// A stand-in embeddings service: each input's letter counts as its vector.
    fn letters(body: &str) -> Result<Vec<u8>, String> {
        let request: serde_json::Value = serde_json::from_str(body).map_err(|e| e.to_string())?;
        let data: Vec<serde_json::Value> = request["input"]
            .as_array()
            .ok_or("no input")?
            .iter()
            .enumerate()
            .map(|(i, text)| {
                let mut v = vec![0.01f32; 26];
                for c in text
                    .as_str()
                    .unwrap_or_default()
                    .to_ascii_lowercase()
                    .bytes()
                {
                    if c.is_ascii_lowercase() {
                        v[usize::from(c - b'a')] += 1.0;
                    }
                }
                serde_json::json!({"index": i, "embedding": v})
            })
            .collect();
        Ok(serde_json::json!({"data": data}).to_string().into_bytes())
    }

    fn hybrid_dataset() -> Dataset {
        let tools = tiny_tools();
        let queries = [
            r#"{"id":"q1","query":"what is the weather forecast in Paris","relevant":["get_weather"]}"#,
            r#"{"id":"q2","query":"Bill the customer. Then email them the invoice.","relevant":["send_email","create_invoice"]}"#,
            r#"{"id":"q3","query":"weather","relevant":[]}"#,
            r#"{"id":"q4","query":"show my folder","relevant":["list_files"]}"#,
        ]
        .join("\n");
        Dataset::parse("tiny", &tools, &queries).unwrap()
    }

    #[test]
    fn hybrid_embeds_each_tool_once_in_batches() {
        let d = hybrid_dataset();
        let config = Config::default();
        let mut sent: Vec<usize> = Vec::new();
        let mut embedder = Embedder::new(
            "http://stand-in/v1/embeddings",
            "letters",
            None,
            3,
            Embedder::capacity_for(&d),
            Box::new(|body: &str| {
                let v: serde_json::Value = serde_json::from_str(body).unwrap();
                assert_eq!(v["model"], "letters");
                sent.push(v["input"].as_array().unwrap().len());
                letters(body)
            }),
        );
        let r = evaluate_with(
            &d,
            &config,
            FieldWeights::default(),
            &[1, 2],
            Ranker::Hybrid(&mut embedder),
            &|_| 10,
            &mut |_| {},
        )
        .unwrap();
        let (calls, inputs) = (embedder.calls, embedder.inputs);
        drop(embedder);
        // q1: its text and 3 tools, then the 4th tool; q2: its text and its two sentences;
        // q3 has nothing relevant and is not ranked; q4: its text.
        assert_eq!(sent, [4, 1, 3, 1]);
        assert_eq!((calls, inputs), (4, 9));
        assert_eq!(r.ranking(), "hybrid");
        let h = r.hybrid.as_ref().unwrap();
        assert_eq!((h.calls, h.inputs, h.model.as_str()), (4, 9, "letters"));
        assert_eq!(h.params, fusion_params(&config));
        assert!(close(r.recall_at(1).unwrap(), (1.0 + 0.5 + 1.0) / 3.0));
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["ranking"], "hybrid");
        assert_eq!(json["embeddings"]["inputs"], 9);
        assert_eq!(json["rrf_k"], 1.0);
        assert_eq!(json["channel_weights"]["exact"], 0.5);
        let keyword = evaluate(
            &d,
            &config,
            FieldWeights::default(),
            &[1],
            &|_| 1,
            &mut |_| {},
        );
        let keyword = serde_json::to_value(keyword.unwrap()).unwrap();
        assert_eq!(keyword["ranking"], "keyword");
        assert!(keyword.get("embeddings").is_none());
    }

    #[test]
    fn hybrid_ranks_as_the_filter_does() {
        let d = hybrid_dataset();
        let config = Config::from_json(br#"{"min_tools":1,"top_k":2}"#).unwrap();
        let mut embedder = Embedder::new("s", "m", None, 64, 4096, Box::new(letters));
        let catalog = Catalog::build(
            Dialect::OpenaiChat,
            &d.tools_array(),
            FieldWeights::default(),
        )
        .unwrap();
        let mut engine = crate::pipeline::Engine::new(config.clone());
        for q in &d.queries {
            let gathered = embedder.vectors(&catalog, &q.query).unwrap();
            let (qv, tv) = embedder.complete(&gathered).unwrap();
            let ours: Vec<usize> = rank_fused(&catalog, &config, &q.query, &qv, &tv)
                .order
                .iter()
                .map(|s| s.entry)
                .collect();
            let body = serde_json::json!({
                "model": "m",
                "messages": [{"role": "user", "content": q.query}],
                "tools": serde_json::from_str::<serde_json::Value>(&d.tools_array()).unwrap(),
            })
            .to_string();
            let mut analysis = engine.analyse(Dialect::OpenaiChat, &body).unwrap();
            analysis.rank_hybrid(&config, &qv, &tv);
            let filter: Vec<usize> = analysis
                .fused
                .unwrap()
                .order
                .iter()
                .map(|s| s.entry)
                .collect();
            assert_eq!(ours, filter, "{}", q.query);
        }
    }

    #[test]
    fn a_failing_service_fails_the_evaluation() {
        let d = hybrid_dataset();
        let run = |post: Box<Post<'static>>| {
            let mut embedder = Embedder::new("http://x/v1/embeddings", "m", None, 64, 4096, post);
            evaluate_with(
                &d,
                &Config::default(),
                FieldWeights::default(),
                &[1],
                Ranker::Hybrid(&mut embedder),
                &|_| 1,
                &mut |_| {},
            )
            .unwrap_err()
            .0
        };
        let err = run(Box::new(
            |_: &str| Err("cannot connect: refused".to_owned()),
        ));
        assert_eq!(
            err,
            "embeddings service http://x/v1/embeddings: cannot connect: refused"
        );
        let err = run(Box::new(|_: &str| Ok(br#"{"error":"nope"}"#.to_vec())));
        assert!(
            err.contains("not an embeddings response") && err.contains("nope"),
            "{err}"
        );
        let err = run(Box::new(|body: &str| {
            // A vector of another size for the last input.
            let mut v: serde_json::Value = serde_json::from_slice(&letters(body)?).unwrap();
            v["data"].as_array_mut().unwrap().last_mut().unwrap()["embedding"] =
                serde_json::json!([1.0]);
            Ok(v.to_string().into_bytes())
        }));
        assert!(err.contains("different sizes"), "{err}");
    }

    #[test]
    fn errors_name_the_file_and_line() {
        let ok = tool("a", "b");
        let err = Dataset::parse("x", &format!("{ok}\n\n{{\"name\":\"flat\"}}"), "").unwrap_err();
        assert!(err.0.starts_with("tools.jsonl line 3:"), "{err}");
        let err = Dataset::parse("x", &format!("{ok}\n{ok}"), "").unwrap_err();
        assert!(
            err.0.contains("line 2") && err.0.contains("already used on line 1"),
            "{err}"
        );
        let err = Dataset::parse("x", &ok, r#"{"id":"1","query":"q"}"#).unwrap_err();
        assert!(
            err.0.starts_with("queries.jsonl line 1:") && err.0.contains("relevant"),
            "{err}"
        );
        let d = Dataset::parse("x", &ok, r#"{"id":"1","query":"q","relevant":["a"]}"#).unwrap();
        let err = evaluate(
            &d,
            &Config::default(),
            FieldWeights::default(),
            &[0],
            &|_| 1,
            &mut |_| {},
        );
        assert!(err.is_err());
    }
}
