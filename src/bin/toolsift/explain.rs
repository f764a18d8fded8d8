//! `toolsift explain`: what the filter does with one request body, tool by tool.
//!
//! The body goes through `Engine::analyse`, the call the filter makes, so the ranking, the
//! verdicts and the token estimate are the filter's own. The dialect comes from `--dialect`,
//! else from `--path` (through the configuration's `dialect`, as in the filter), else from the
//! configuration's `dialect` when it is not `auto`, else it is guessed from the body's shape:
//!
//! | the body has                                               | dialect            |
//! |------------------------------------------------------------|--------------------|
//! | `contents`                                                 | `gemini`           |
//! | `toolConfig`                                               | `bedrock`          |
//! | `input`                                                    | `openai_responses` |
//! | `messages`, and tools with `input_schema` or a top-level `system` | `anthropic` |
//! | anything else                                              | `openai_chat`      |
//!
//! With `--embeddings-url` and `--embeddings-model` the tools are ranked as the filter ranks
//! them with `ranking: hybrid` (`Analysis::rank_hybrid`), and each tool shows the channels that
//! voted for it (`fusion::describe`; the kept ones as `Analysis::explain_kept` puts them).

use crate::Failure;
use crate::hybrid::EmbeddingArgs;
use crate::output::{change, one_line, print, read_config, read_text, thousands};
use crate::tokens::{Tokenizer, TokenizerName};
use serde::Serialize;
use serde_json::{Map, Value};
use std::path::PathBuf;
use toolsift::config::{Config, DialectChoice};
use toolsift::dialects::{Dialect, Entry};
use toolsift::fusion::{Fused, FusionParams, describe};
use toolsift::offline::eval::Embedder;
use toolsift::pipeline::{
    Engine, Skip, Skipped, fusion_params, header_safe, header_value, rank_fused,
};
use toolsift::rank::Catalog;
use toolsift::select::Verdict;

#[derive(clap::Args)]
pub struct Args {
    /// The filter's configuration (the JSON of its `configuration`); defaults when absent.
    #[arg(long, value_name = "CONFIG.json")]
    config: Option<PathBuf>,
    /// The request body.
    #[arg(value_name = "REQUEST.json")]
    request: PathBuf,
    /// The request path (e.g. /v1/chat/completions), to pick the dialect as the filter does.
    #[arg(long, value_name = "PATH")]
    path: Option<String>,
    /// Read the body as this dialect: openai_chat, openai_responses, anthropic, gemini, bedrock,
    /// ollama.
    #[arg(long, value_name = "NAME", value_parser = parse_dialect)]
    dialect: Option<Dialect>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// The tokenizer for real token counts.
    #[arg(long, value_enum, default_value_t = TokenizerName::O200k)]
    tokenizer: TokenizerName,
    #[command(flatten)]
    embeddings: EmbeddingArgs,
}

/// Vectors in the cache of one `explain`: the request's texts and its tools.
const EXPLAIN_CACHE: usize = 1 << 16;

fn parse_dialect(name: &str) -> Result<Dialect, String> {
    Dialect::from_name(name).ok_or_else(|| {
        let names: Vec<&str> = Dialect::ALL.iter().map(|d| d.name()).collect();
        format!(
            "unknown dialect `{name}`; expected one of: {}",
            names.join(", ")
        )
    })
}

/// The body's shape → the dialect it most likely is, and why: the first dialect that
/// recognises it, else OpenAI Chat, whose bodies have nothing the others lack.
pub fn guess_dialect(body: &Map<String, Value>) -> (Dialect, &'static str) {
    Dialect::ALL
        .into_iter()
        .find_map(|d| Some((d, d.codec().recognises(body)?)))
        .unwrap_or((
            Dialect::OpenaiChat,
            "no dialect recognises it: no `contents`, `toolConfig`, `input`, `input_schema` or top-level `system`",
        ))
}

/// The function tools of a request, in rank order.
struct Row {
    rank: usize,
    name: String,
    score: f32,
    kept: bool,
    /// `None` when the request is skipped (every tool goes upstream).
    verdict: Option<Verdict>,
    tokens_estimate: usize,
    tokens: usize,
    /// With hybrid ranking: the channels that voted for the tool (`bm25=1:7.31 vector=2:0.61`),
    /// empty when none did.
    channels: Option<String>,
    /// The tool's place among the tools the fleet's transitions name after the history's
    /// calls, and its count (`1:41`), when they name it.
    next: Option<String>,
}

/// Hybrid ranking's settings and calls for one request.
struct HybridInfo {
    service: String,
    model: String,
    params: FusionParams,
    calls: usize,
    inputs: usize,
    /// The kept tools with their channels, as `Analysis::explain_kept` gives them (empty when
    /// the request is skipped).
    kept: String,
}

enum Outcome {
    Rewritten {
        body_bytes: usize,
    },
    /// Every function tool is kept: the body goes upstream as it is.
    Unchanged,
    Skipped(Skipped),
}

struct Explanation {
    request: PathBuf,
    dialect: Dialect,
    dialect_source: String,
    query: String,
    outcome: Outcome,
    rows: Vec<Row>,
    builtins: usize,
    body_bytes: usize,
    tokenizer: TokenizerName,
    hybrid: Option<HybridInfo>,
    /// A question the ranking could not read: `known/terms` of its content terms.
    weak: Option<String>,
    /// The kept tools the transitions brought in (`next=` of the header).
    next: Vec<String>,
}

impl Explanation {
    fn total(&self) -> usize {
        self.rows.len()
    }

    fn kept(&self) -> usize {
        self.rows.iter().filter(|r| r.kept).count()
    }

    fn tokens(&self, estimate: bool) -> (usize, usize) {
        let count = |r: &Row| {
            if estimate {
                r.tokens_estimate
            } else {
                r.tokens
            }
        };
        let before = self.rows.iter().map(count).sum();
        let after = self.rows.iter().filter(|r| r.kept).map(count).sum();
        (before, after)
    }

    fn header(&self) -> String {
        match &self.outcome {
            Outcome::Skipped(s) => header_value(0, 0, Some(s)),
            _ => {
                let weak = self.weak.as_ref().map(|w| format!(" weak={w}"));
                let safe: Vec<_> = self.next.iter().map(|n| header_safe(n)).collect();
                let next = (!safe.is_empty()).then(|| format!(" next={}", safe.join(",")));
                header_value(self.kept(), self.total(), None)
                    + &weak.unwrap_or_default()
                    + &next.unwrap_or_default()
            }
        }
    }
}

/// Stable names for `--json`.
fn verdict_key(v: Verdict) -> &'static str {
    match v {
        Verdict::Ranked => "ranked",
        Verdict::ToolChoice => "tool_choice",
        Verdict::Called => "called",
        Verdict::AlwaysInclude => "always_include",
        Verdict::BelowTopK => "below_top_k",
        Verdict::BelowMinScore => "below_min_score",
        Verdict::OverBudget => "over_budget",
        Verdict::Denied => "denied",
        Verdict::Evicted => "evicted",
        Verdict::FewTools => "few_tools",
        Verdict::Shadow => "shadow",
    }
}

fn rows(
    catalog: &Catalog,
    container: &str,
    tokenizer: &Tokenizer,
    fused: Option<&Fused>,
    next: &[(usize, u64)],
    decisions: impl Iterator<Item = (usize, f32, Option<Verdict>)>,
) -> Vec<Row> {
    let texts = catalog.draft.entry_texts(container);
    decisions
        .enumerate()
        .map(|(i, (entry, score, verdict))| Row {
            rank: i + 1,
            name: catalog.name(entry).unwrap_or_default().to_owned(),
            score,
            kept: verdict.is_none_or(Verdict::kept),
            verdict,
            tokens_estimate: catalog.tokens.get(entry).copied().unwrap_or(0),
            tokens: texts.get(entry).map_or(0, |t| tokenizer.count(t)),
            channels: fused.map(|f| f.votes_for(entry).map(describe).unwrap_or_default()),
            next: next
                .iter()
                .position(|(e, _)| *e == entry)
                .and_then(|q| Some(format!("{}:{}", q + 1, next.get(q)?.1))),
        })
        .collect()
}

/// Every vector `query` needs over `catalog`, from the service; then the fused ranking.
fn hybrid_ranking(
    embedder: &mut Embedder<'_>,
    config: &Config,
    catalog: &Catalog,
    query: &str,
) -> Result<Fused, Failure> {
    let gathered = embedder.vectors(catalog, query)?;
    let (query_vectors, tool_vectors) = embedder.complete(&gathered)?;
    Ok(rank_fused(
        catalog,
        config,
        query,
        &query_vectors,
        &tool_vectors,
    ))
}

fn hybrid_info(embedder: &Embedder<'_>, config: &Config, kept: String) -> HybridInfo {
    HybridInfo {
        service: embedder.service.clone(),
        model: embedder.model.clone(),
        params: fusion_params(config),
        calls: embedder.calls,
        inputs: embedder.inputs,
        kept,
    }
}

fn builtins(catalog: &Catalog) -> usize {
    catalog
        .draft
        .entries
        .iter()
        .filter(|e| matches!(e, Entry::Builtin))
        .count()
}

fn choose_dialect(
    args: &Args,
    config: &Config,
    body: &Map<String, Value>,
) -> Result<(Dialect, String), Failure> {
    if let Some(d) = args.dialect {
        return Ok((d, "set by --dialect".to_owned()));
    }
    if let Some(path) = &args.path {
        return match config.dialect.resolve(path) {
            Some(d) if config.dialect == DialectChoice::Auto => {
                Ok((d, format!("from the path {path}")))
            }
            Some(d) => Ok((d, "set by the configuration's `dialect`".to_owned())),
            None => Err(Failure(format!(
                "the path {path} is not an LLM API path toolsift reads (the filter would skip the \
                 request: not_llm); pass --dialect to read the body anyway"
            ))),
        };
    }
    if config.dialect != DialectChoice::Auto {
        if let Some(d) = config.dialect.resolve("") {
            return Ok((d, "set by the configuration's `dialect`".to_owned()));
        }
    }
    let (d, why) = guess_dialect(body);
    Ok((d, format!("guessed from the body: {why}")))
}

fn explain(args: &Args, config: &Config) -> Result<Explanation, Failure> {
    let body = read_text(&args.request, "request")?;
    let shown = args.request.display();
    let value: Value = serde_json::from_str(&body)
        .map_err(|e| Failure(format!("request {shown} is not valid JSON: {e}")))?;
    let Value::Object(object) = &value else {
        return Err(Failure(format!(
            "request {shown}: expected a JSON object (a request body)"
        )));
    };
    let (dialect, dialect_source) = choose_dialect(args, config, object)?;
    let tokenizer = Tokenizer::load(args.tokenizer)?;
    let mut embedder = args.embeddings.embedder(config, EXPLAIN_CACHE, || {})?;
    let mut engine = Engine::new(config.clone());
    let explanation = |query: String, outcome, rows, builtins, hybrid| Explanation {
        request: args.request.clone(),
        dialect,
        dialect_source: dialect_source.clone(),
        query,
        outcome,
        rows,
        builtins,
        body_bytes: body.len(),
        tokenizer: args.tokenizer,
        hybrid,
        weak: None,
        next: Vec::new(),
    };
    match engine.analyse(dialect, &body) {
        Ok(mut analysis) => {
            let hybrid = match embedder.as_mut() {
                Some(embedder) => {
                    let gathered = embedder.vectors(&analysis.catalog, &analysis.query)?;
                    let (query_vectors, tool_vectors) = embedder.complete(&gathered)?;
                    analysis.rank_hybrid(config, &query_vectors, &tool_vectors);
                    Some(hybrid_info(embedder, config, analysis.explain_kept()))
                }
                None => None,
            };
            let container = body.get(analysis.container.clone()).unwrap_or_default();
            let decisions = analysis
                .selection
                .decisions
                .iter()
                .map(|d| (d.entry, d.score, Some(d.verdict)));
            let rows = rows(
                &analysis.catalog,
                container,
                &tokenizer,
                analysis.fused.as_deref(),
                &analysis.next,
                decisions,
            );
            let outcome = match analysis.rewrite(&body) {
                Some(rewritten) => Outcome::Rewritten {
                    body_bytes: rewritten.len(),
                },
                None => Outcome::Unchanged,
            };
            let mut explained = explanation(
                analysis.query.clone(),
                outcome,
                rows,
                builtins(&analysis.catalog),
                hybrid,
            );
            explained.weak = analysis.weak_suffix();
            explained.next = analysis.brought_in(config);
            Ok(explained)
        }
        Err(skipped) if matches!(skipped.reason, Skip::MalformedJson | Skip::BadShape) => {
            Err(Failure(format!(
                "request {shown} is not a {dialect} request body ({}; dialect {dialect_source}): \
                 the filter would pass it upstream unchanged. Pass --dialect or --path if the \
                 dialect is wrong",
                skipped.reason.name()
            )))
        }
        Err(skipped) => {
            // Nothing to select, but show what the filter saw: the query and the ranking.
            let request = dialect
                .parse(&body)
                .map_err(|p| Failure(format!("request {shown}: {}", p.reason())))?;
            // The tools array, found the way the filter finds it.
            let container = toolsift::json::find_path(&body, dialect.tools_path())
                .and_then(|span| body.get(span))
                .filter(|raw| *raw != "null");
            let catalog = container.and_then(|raw| {
                let catalog = Catalog::build(dialect, raw, engine.weights).ok()?;
                Some((raw, catalog))
            });
            // A follow-up is ranked with the turns before it, as the filter ranks it.
            let query = catalog.as_ref().map_or_else(
                || request.query.clone(),
                |(_, catalog)| {
                    toolsift::followup::query(
                        &request.query,
                        &request.earlier,
                        request.assistant.as_deref(),
                        &catalog.index,
                    )
                },
            );
            let (rows, builtins, hybrid) = match catalog {
                // Ranked as the filter would rank it, were it not skipped.
                Some((raw, catalog)) => match embedder.as_mut() {
                    Some(embedder) if catalog.function_count() > 0 => {
                        let fused = hybrid_ranking(embedder, config, &catalog, &query)?;
                        let decisions = fused.order.iter().map(|s| (s.entry, s.score, None));
                        (
                            rows(&catalog, raw, &tokenizer, Some(&fused), &[], decisions),
                            builtins(&catalog),
                            Some(hybrid_info(embedder, config, String::new())),
                        )
                    }
                    _ => {
                        let ranking = catalog.index.rank(&query);
                        let decisions = ranking.iter().map(|s| (s.entry, s.score, None));
                        (
                            rows(&catalog, raw, &tokenizer, None, &[], decisions),
                            builtins(&catalog),
                            None,
                        )
                    }
                },
                None => (Vec::new(), 0, None),
            };
            Ok(explanation(
                query,
                Outcome::Skipped(skipped),
                rows,
                builtins,
                hybrid,
            ))
        }
    }
}

pub fn run(args: &Args) -> Result<(), Failure> {
    let config = read_config(args.config.as_deref())?;
    let e = explain(args, &config)?;
    let text = if args.json {
        let mut s = serde_json::to_string_pretty(&to_json(&e, &config))?;
        s.push('\n');
        s
    } else {
        to_text(&e, &config)
    };
    print(&text)
}

/// The `--json` output; fields serialise in this order.
#[derive(Serialize)]
struct JsonOut<'a> {
    request: String,
    dialect: &'static str,
    dialect_source: &'a str,
    query: &'a str,
    config: JsonConfig<'a>,
    /// `keyword` or `hybrid` (with `--embeddings-url`).
    ranking: &'static str,
    /// With hybrid ranking: the service and its calls for this request.
    #[serde(skip_serializing_if = "Option::is_none")]
    embeddings: Option<JsonEmbeddings<'a>>,
    /// `rewritten`, `unchanged` (every function tool kept) or `skipped`.
    outcome: &'static str,
    skip_reason: Option<&'static str>,
    /// The `x-toolsift` response header the filter adds.
    x_toolsift: String,
    /// A question the ranking could not read (`weak_query`): `known/terms` of its content
    /// terms; absent when it read.
    #[serde(skip_serializing_if = "Option::is_none")]
    weak: Option<&'a str>,
    /// The kept tools the fleet's transitions brought in after the history's calls (the
    /// ranking alone would not have kept them); absent when none.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    next: &'a [String],
    total: usize,
    kept: usize,
    builtins: usize,
    kept_tools: Vec<&'a str>,
    /// With hybrid ranking: the kept tools in rank order with the channels that voted for
    /// each, `name(bm25=1:7.31 vector=2:0.612),…` (as the filter logs them).
    #[serde(skip_serializing_if = "Option::is_none")]
    kept_channels: Option<&'a str>,
    tools: Vec<JsonTool<'a>>,
    tokens_estimate_before: usize,
    tokens_estimate_after: usize,
    tokenizer: &'static str,
    tokens_before: usize,
    tokens_after: usize,
    body_bytes_before: usize,
    body_bytes_after: usize,
}

#[derive(Serialize)]
struct JsonConfig<'a> {
    top_k: usize,
    min_tools: usize,
    min_score: Option<f32>,
    max_tool_tokens: Option<usize>,
    always_include: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    rrf_k: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    channel_weights: Option<JsonChannels>,
}

#[derive(Serialize)]
struct JsonChannels {
    bm25: f32,
    exact: f32,
    param_keys: f32,
    vector: f32,
}

#[derive(Serialize)]
struct JsonEmbeddings<'a> {
    url: &'a str,
    model: &'a str,
    calls: usize,
    inputs: usize,
}

#[derive(Serialize)]
struct JsonTool<'a> {
    rank: usize,
    name: &'a str,
    score: f32,
    kept: bool,
    verdict: &'static str,
    reason: &'static str,
    tokens: usize,
    tokens_estimate: usize,
    /// With hybrid ranking: the channels that voted for it, `bm25=1:7.31 exact=2:4.1` (channel
    /// = rank in that channel : its score there); empty when none did.
    #[serde(skip_serializing_if = "Option::is_none")]
    channels: Option<&'a str>,
    /// Its place among the tools the transitions name after the history's calls and its
    /// count, `1:41`; absent when they name it not.
    #[serde(skip_serializing_if = "Option::is_none")]
    next: Option<&'a str>,
}

fn to_json<'a>(e: &'a Explanation, config: &'a Config) -> JsonOut<'a> {
    let (tokens_estimate_before, tokens_estimate_after) = e.tokens(true);
    let (tokens_before, tokens_after) = e.tokens(false);
    let (outcome, skip_reason, body_bytes_after) = match &e.outcome {
        Outcome::Rewritten { body_bytes } => ("rewritten", None, *body_bytes),
        Outcome::Unchanged => ("unchanged", None, e.body_bytes),
        Outcome::Skipped(s) => ("skipped", Some(s.reason.name()), e.body_bytes),
    };
    let tools = e
        .rows
        .iter()
        .map(|r| JsonTool {
            rank: r.rank,
            name: &r.name,
            score: r.score,
            kept: r.kept,
            verdict: r.verdict.map_or("request_skipped", verdict_key),
            reason: r.verdict.map_or("request skipped", Verdict::as_str),
            tokens: r.tokens,
            tokens_estimate: r.tokens_estimate,
            channels: r.channels.as_deref(),
            next: r.next.as_deref(),
        })
        .collect();
    JsonOut {
        request: e.request.display().to_string(),
        dialect: e.dialect.name(),
        dialect_source: &e.dialect_source,
        query: &e.query,
        config: JsonConfig {
            top_k: config.top_k,
            min_tools: config.min_tools,
            min_score: config.min_score,
            max_tool_tokens: config.max_tool_tokens,
            always_include: &config.always_include,
            rrf_k: e.hybrid.as_ref().map(|h| h.params.k),
            channel_weights: e.hybrid.as_ref().map(|h| {
                let [bm25, exact, param_keys, vector] = h.params.weights;
                JsonChannels {
                    bm25,
                    exact,
                    param_keys,
                    vector,
                }
            }),
        },
        ranking: if e.hybrid.is_some() {
            "hybrid"
        } else {
            "keyword"
        },
        embeddings: e.hybrid.as_ref().map(|h| JsonEmbeddings {
            url: &h.service,
            model: &h.model,
            calls: h.calls,
            inputs: h.inputs,
        }),
        outcome,
        skip_reason,
        x_toolsift: e.header(),
        weak: e.weak.as_deref(),
        next: &e.next,
        total: e.total(),
        kept: e.kept(),
        builtins: e.builtins,
        kept_tools: e
            .rows
            .iter()
            .filter(|r| r.kept)
            .map(|r| r.name.as_str())
            .collect(),
        kept_channels: e.hybrid.as_ref().map(|h| h.kept.as_str()),
        tools,
        tokens_estimate_before,
        tokens_estimate_after,
        tokenizer: e.tokenizer.name(),
        tokens_before,
        tokens_after,
        body_bytes_before: e.body_bytes,
        body_bytes_after,
    }
}

/// `1 function tool`, `3 function tools`.
fn plural(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

fn to_text(e: &Explanation, config: &Config) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let field = |s: &mut String, label: &str, value: &str| {
        let _ = writeln!(s, "{label:<10} {value}");
    };
    field(
        &mut s,
        "request",
        &format!(
            "{} ({} bytes)",
            e.request.display(),
            thousands(e.body_bytes)
        ),
    );
    field(
        &mut s,
        "dialect",
        &format!("{} ({})", e.dialect.name(), e.dialect_source),
    );
    let query = if e.query.is_empty() {
        "(none: no user text found)".to_owned()
    } else {
        // A follow-up's earlier turns after a bar, latest first; the question that only
        // orders what a text on its own leaves after "ties:".
        let turns = e
            .query
            .replace(toolsift::index::TURN_MARK, "| ")
            .replace(toolsift::index::TIE_MARK, "| ties: ");
        one_line(&turns, 300)
    };
    field(&mut s, "query", &query);
    let limits = format!(
        "top_k {}, min_tools {}, min_score {}, max_tool_tokens {}{}",
        config.top_k,
        config.min_tools,
        config
            .min_score
            .map_or("none".to_owned(), |m| m.to_string()),
        config
            .max_tool_tokens
            .map_or("none".to_owned(), |m| m.to_string()),
        if config.always_include.is_empty() {
            String::new()
        } else {
            format!(", always_include {}", config.always_include.join(" "))
        }
    );
    field(&mut s, "config", &limits);
    if let Some(h) = &e.hybrid {
        let [bm25, exact, param_keys, vector] = h.params.weights;
        field(
            &mut s,
            "ranking",
            &format!(
                "hybrid: rrf_k {}, channel weights bm25 {bm25}, exact {exact}, param_keys \
                 {param_keys}, vector {vector}; embeddings {} from {} ({} in {})",
                h.params.k,
                h.model,
                h.service,
                plural(h.inputs, "text"),
                plural(h.calls, "call")
            ),
        );
    }
    let outcome = match &e.outcome {
        Outcome::Rewritten { body_bytes } => format!(
            "rewritten: {} of {} function tools kept; body {} → {} bytes",
            e.kept(),
            e.total(),
            thousands(e.body_bytes),
            thousands(*body_bytes)
        ),
        Outcome::Unchanged => format!(
            "unchanged: all {} kept, the body goes upstream as sent",
            plural(e.total(), "function tool")
        ),
        Outcome::Skipped(skipped) => {
            let why = match skipped.reason {
                Skip::FewTools => format!(
                    " ({}, not more than min_tools {})",
                    plural(e.total(), "function tool"),
                    config.min_tools
                ),
                Skip::NoTools => " (the request has no function tools)".to_owned(),
                _ => String::new(),
            };
            format!(
                "skipped: {}{why}; the request goes upstream unchanged",
                skipped.reason.name()
            )
        }
    };
    field(&mut s, "outcome", &outcome);
    field(&mut s, "header", &format!("x-toolsift: {}", e.header()));
    if let Some(weak) = &e.weak {
        field(
            &mut s,
            "not ranked",
            &format!(
                "the catalog has {weak} of the question's content terms, below \
                 weak_query.min_coverage: the ranking cannot read it, so it is not cut to top_k \
                 (weak_query.action decides what is sent)"
            ),
        );
    }
    if !e.next.is_empty() {
        field(
            &mut s,
            "next",
            &format!(
                "{} brought in by the fleet's transitions after the history's calls \
                 (auto_k.calibration.transitions): the question's ranking alone would not keep \
                 them",
                e.next.join(", ")
            ),
        );
    }
    if e.builtins > 0 {
        field(
            &mut s,
            "built-ins",
            &format!("{}, always kept", plural(e.builtins, "provider tool")),
        );
    }
    if !e.rows.is_empty() {
        let width = e
            .rows
            .iter()
            .map(|r| r.name.chars().count())
            .max()
            .unwrap_or(4)
            .clamp(4, 48);
        let _ = writeln!(s);
        let channels_header = if e.hybrid.is_some() {
            "  channels (kept tools)"
        } else {
            ""
        };
        let _ = writeln!(
            s,
            "{:>5}  {:>8}  {:<4}  {:<22}  {:<width$}  {:>6}  {:>8}{channels_header}",
            "rank", "score", "kept", "reason", "tool", "tokens", "estimate"
        );
        for r in &e.rows {
            let mut channels = match &r.channels {
                Some(c) if r.kept => format!("  {}", if c.is_empty() { "(none)" } else { c }),
                _ => String::new(),
            };
            if let Some(next) = &r.next {
                channels.push_str(&format!("  next={next}"));
            }
            let line = format!(
                "{:>5}  {:>8.3}  {:<4}  {:<22}  {:<width$}  {:>6}  {:>8}{channels}",
                r.rank,
                r.score,
                if r.kept { "yes" } else { "no" },
                r.verdict.map_or("request skipped", Verdict::as_str),
                r.name,
                r.tokens,
                r.tokens_estimate
            );
            let _ = writeln!(s, "{}", line.trim_end());
        }
        let _ = writeln!(s);
    }
    let (est_before, est_after) = e.tokens(true);
    let (before, after) = e.tokens(false);
    field(
        &mut s,
        "tokens",
        &format!(
            "{}: {} → {} ({})   estimate (chars/4): {} → {} ({})",
            e.tokenizer.name(),
            thousands(before),
            thousands(after),
            change(before, after),
            thousands(est_before),
            thousands(est_after),
            change(est_before, est_after)
        ),
    );
    s
}

#[cfg(test)]
fn object(json: &str) -> Map<String, Value> {
    match serde_json::from_str(json) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guesses_the_dialect_from_the_shape() {
        let guess = |json: &str| guess_dialect(&object(json)).0;
        assert_eq!(guess(r#"{"contents":[],"tools":[]}"#), Dialect::Gemini);
        assert_eq!(
            guess(r#"{"messages":[],"toolConfig":{}}"#),
            Dialect::Bedrock
        );
        assert_eq!(
            guess(r#"{"input":"hi","tools":[]}"#),
            Dialect::OpenaiResponses
        );
        assert_eq!(
            guess(r#"{"messages":[],"tools":[{"name":"a","input_schema":{}}]}"#),
            Dialect::Anthropic
        );
        assert_eq!(
            guess(r#"{"messages":[],"system":"be brief"}"#),
            Dialect::Anthropic
        );
        assert_eq!(
            guess(r#"{"messages":[],"tools":[{"type":"function","function":{}}]}"#),
            Dialect::OpenaiChat
        );
        assert_eq!(guess("{}"), Dialect::OpenaiChat);
    }

    #[test]
    fn parses_dialect_names() {
        assert_eq!(parse_dialect("bedrock"), Ok(Dialect::Bedrock));
        let err = parse_dialect("cohere").unwrap_err();
        assert!(err.contains("unknown dialect `cohere`") && err.contains("openai_chat"));
    }

    #[test]
    fn entry_texts_follow_the_layout() {
        let container =
            r#"[{"googleSearch":{}}, {"functionDeclarations":[{"name":"a"}, {"name":"bb"}]}]"#;
        let draft = Dialect::Gemini.catalog(container).unwrap();
        let texts = draft.entry_texts(container);
        assert_eq!(
            texts,
            [
                r#"{"googleSearch":{}}"#,
                r#"{"name":"a"}"#,
                r#"{"name":"bb"}"#
            ]
        );
        let sizes: Vec<usize> = texts.iter().map(|t| t.len()).collect();
        assert_eq!(sizes, draft.sizes);
        let flat = r#"[ {"name":"x"} ,{"name":"y"}]"#;
        let draft = Dialect::Anthropic.catalog(flat).unwrap();
        assert_eq!(
            draft.entry_texts(flat),
            [r#"{"name":"x"}"#, r#"{"name":"y"}"#]
        );
    }
}
