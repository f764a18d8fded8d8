//! `toolsift eval`: retrieval quality, kept tokens and ranking time on a dataset, with the
//! filter's ranking (`toolsift::offline::eval`): keyword, or hybrid with `--embeddings-url`.

use crate::Failure;
use crate::hybrid::EmbeddingArgs;
use crate::output::{print, read_config, thousands};
use crate::plot;
use crate::tokens::{Tokenizer, TokenizerName};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::path::PathBuf;
use toolsift::config::Config;
use toolsift::offline::eval::{
    ANSWERED, Dataset, Embedder, FOLLOW_UP_ASK, Ranker, Report, evaluate_followups, evaluate_with,
};
use toolsift::pipeline::Engine;

/// The k values the plot draws.
pub const PLOT_KS: std::ops::RangeInclusive<usize> = 1..=20;

#[derive(clap::Args)]
pub struct Args {
    /// The catalog: one OpenAI function tool per line.
    #[arg(long, value_name = "TOOLS.jsonl")]
    tools: PathBuf,
    /// The queries: {"id","query","relevant":[tool names]} per line.
    #[arg(long, value_name = "QUERIES.jsonl")]
    queries: PathBuf,
    /// The filter's configuration (its ranking settings, and `top_k` etc. for the "as
    /// configured" line); defaults when absent.
    #[arg(long, value_name = "CONFIG.json")]
    config: Option<PathBuf>,
    /// The cut-offs to report, comma-separated.
    #[arg(
        long,
        value_name = "K,…",
        value_delimiter = ',',
        default_value = "1,3,5,10"
    )]
    k: Vec<usize>,
    /// Print one JSON object (keys such as `recall@5`, `ndcg@10`, `mrr`, `tokens@5`).
    #[arg(long)]
    json: bool,
    /// With --json: add each query's relevant tools and their ranks.
    #[arg(long)]
    per_query: bool,
    /// Draw Recall@k, Complete@k and kept tokens for k = 1..20 into this file: SVG, or PNG when
    /// it ends in `.png`.
    #[arg(long, value_name = "OUT.svg|OUT.png")]
    plot: Option<PathBuf>,
    /// The tokenizer for real token counts.
    #[arg(long, value_enum, default_value_t = TokenizerName::O200k)]
    tokenizer: TokenizerName,
    /// The dataset's name in the output; by default the folder holding the tools file.
    #[arg(long)]
    name: Option<String>,
    /// Rather than the usual report: Recall@top_k of follow-up conversations built from each
    /// query ([user: query, assistant: "Shall I go ahead?", user: a confirmation, "Do the same
    /// for staging." or "Try again."]), ranked as the filter ranks them and by their latest
    /// text alone, beside the question's own. Keyword ranking only.
    #[arg(long, conflicts_with_all = ["plot", "per_query"])]
    followups: bool,
    /// With --followups: conversations generated from a grammar instead (confirmations in any
    /// words and languages, retries, "the same for X", short and long topic shifts), each
    /// question in a catalog of --catalog-size tools, with each family's margin and worst
    /// phrasing.
    #[arg(long, requires = "followups")]
    generated: bool,
    /// With --generated: tools in each question's catalog.
    #[arg(long, requires = "generated", default_value_t = toolsift::offline::eval::generated::CATALOG)]
    catalog_size: usize,
    /// With --generated: only the questions at even (0) or odd (1) places.
    #[arg(long, requires = "generated", value_parser = clap::value_parser!(u8).range(0..=1))]
    half: Option<u8>,
    /// With --generated: where the assistant's turns come from: `fifth` (a grammar written
    /// blind once the reading of the assistant's turn was final: held out), `first` to
    /// `fourth` (grammars written blind, which the reading was revised on), `lists` (the
    /// fourteen turns it was first written beside) or `other_languages`.
    #[arg(long, requires = "generated", default_value = toolsift::offline::eval::generated::Assistant::held_out().name(), value_parser = assistant_source)]
    assistant: toolsift::offline::eval::generated::Assistant,
    #[command(flatten)]
    embeddings: EmbeddingArgs,
}

fn progress_bar(len: usize) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(len as u64), ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template(
        "ranking {bar:30.cyan/blue} {pos}/{len} queries, eta {eta} {msg}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style.progress_chars("=> "));
    bar
}

pub fn run(args: &Args) -> Result<(), Failure> {
    let mut ks: Vec<usize> = args.k.clone();
    if ks.is_empty() || ks.contains(&0) {
        return Err(Failure("--k: every k must be at least 1".to_owned()));
    }
    ks.sort_unstable();
    ks.dedup();
    let config = read_config(args.config.as_deref())?;
    let mut dataset = Dataset::load(&args.tools, &args.queries)?;
    if let Some(name) = &args.name {
        dataset.name.clone_from(name);
    }
    if args.generated {
        return generated(args, &config, &dataset);
    }
    if args.followups {
        return followups(args, &config, &dataset);
    }
    let tokenizer = Tokenizer::load(args.tokenizer)?;
    let mut eval_ks = ks.clone();
    if args.plot.is_some() {
        eval_ks.extend(PLOT_KS);
        eval_ks.sort_unstable();
        eval_ks.dedup();
    }
    // The weights the filter indexes with for this configuration.
    let weights = Engine::new(config.clone()).weights;
    let bar = progress_bar(dataset.queries.len());
    let count = |text: &str| tokenizer.count(text);
    let calls_bar = bar.clone();
    let mut calls = 0usize;
    let embedder = args
        .embeddings
        .embedder(&config, Embedder::capacity_for(&dataset), move || {
            calls += 1;
            calls_bar.set_message(format!("({calls} embedding calls)"));
        });
    let mut embedder = embedder?;
    let ranking = match embedder.as_mut() {
        Some(e) => Ranker::Hybrid(e),
        None => Ranker::Keyword,
    };
    let report = evaluate_with(
        &dataset,
        &config,
        weights,
        &eval_ks,
        ranking,
        &count,
        &mut |done| {
            bar.set_position(done as u64);
        },
    );
    bar.finish_and_clear();
    let mut report = report?;
    if report.unknown_relevant > 0 {
        eprintln!(
            "toolsift: warning: {} relevant tool names are not in the catalog (counted as misses)",
            report.unknown_relevant
        );
    }
    if let Some(out) = &args.plot {
        let svg = plot::svg(&report, tokenizer.name.name(), config.top_k);
        plot::write(out, &svg)?;
        eprintln!("toolsift: wrote {}", out.display());
    }
    report.at_k.retain(|a| ks.contains(&a.k));
    if !args.per_query {
        report.per_query.clear();
    }
    let text = if args.json {
        let mut s = serde_json::to_string(&report)?;
        s.push('\n');
        s
    } else {
        table(&report, tokenizer.name.name())
    };
    print(&text)
}

fn assistant_source(name: &str) -> Result<toolsift::offline::eval::generated::Assistant, String> {
    use toolsift::offline::eval::generated::Assistant;
    Assistant::from_name(name).ok_or_else(|| {
        let names: Vec<&str> = Assistant::ALL.iter().map(|a| a.name()).collect();
        format!("one of {}", names.join(", "))
    })
}

/// `--followups --generated`: each generated family's Recall@top_k, margin and worst phrasing,
/// and the margin of every form measured beside the filter's.
fn generated(args: &Args, config: &Config, dataset: &Dataset) -> Result<(), Failure> {
    if args.embeddings.embedder(config, 0, || {})?.is_some() {
        return Err(Failure(
            "--followups ranks with keywords only: leave out the embeddings service".to_owned(),
        ));
    }
    let bar = progress_bar(dataset.queries.len());
    let setting = toolsift::offline::eval::generated::Setting {
        k: config.top_k,
        size: args.catalog_size,
        half: args.half.map(usize::from),
        assistant: args.assistant,
    };
    let report = toolsift::offline::eval::generated::evaluate_generated(
        dataset,
        config,
        setting,
        &mut |done| bar.set_position(done as u64),
    );
    bar.finish_and_clear();
    let r = report?;
    if args.json {
        let mut s = serde_json::to_string(&r)?;
        s.push('\n');
        return print(&s);
    }
    use std::fmt::Write;
    let mut s = String::new();
    let half = match r.half {
        Some(h) => format!(", half {h}"),
        None => String::new(),
    };
    let _ = writeln!(
        s,
        "{}: {} questions{half}, catalogs of {} tools, assistant's turns: {}, Recall@{} (a \
         reply's reference: its question; a topic's: its text alone)",
        r.dataset,
        thousands(r.questions),
        r.catalog,
        r.assistant.name(),
        r.k
    );
    let share = |[read, all]: [usize; 2]| {
        format!(
            "{read} of {all} ({:.1} %)",
            100.0 * read as f64 / all.max(1) as f64
        )
    };
    let _ = writeln!(
        s,
        "the assistant's turns read right: before replies, asking to go on: {}; before topic \
         shifts, not: {}",
        share(r.asks_read),
        share(r.handbacks_read)
    );
    let _ = writeln!(
        s,
        "{:<15} {:>6} {:>8} {:>6} {:>6} {:>7}  worst phrasing (margin)",
        "family", "convs", "question", "alone", "filter", "margin"
    );
    for row in &r.rows {
        let worst = row
            .worst
            .as_ref()
            .map(|w| format!("{:?} ({:+.3}, {})", w.text, w.margin, w.conversations))
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "{:<15} {:>6} {:>8.3} {:>6.3} {:>6.3} {:>+7.3}  {worst}",
            row.family.name(),
            row.conversations,
            row.question,
            row.latest_only,
            row.filter,
            row.margin,
        );
    }
    // Every other form's margins, a column each.
    let forms: Vec<&str> = r
        .rows
        .first()
        .map(|row| row.forms.iter().map(|f| f.form.as_str()).collect())
        .unwrap_or_default();
    let _ = write!(s, "\nmargin by form\n{:<15} {:>7}", "family", "filter");
    for form in &forms {
        let _ = write!(s, " {:>13}", form);
    }
    let _ = writeln!(s);
    for row in &r.rows {
        let _ = write!(s, "{:<15} {:>+7.3}", row.family.name(), row.margin);
        for f in &row.forms {
            let _ = write!(s, " {:>+13.3}", f.margin);
        }
        let _ = writeln!(s);
    }
    print(&s)
}

/// `--followups`: the follow-up conversations' Recall@top_k.
fn followups(args: &Args, config: &Config, dataset: &Dataset) -> Result<(), Failure> {
    if args.embeddings.embedder(config, 0, || {})?.is_some() {
        return Err(Failure(
            "--followups ranks with keywords only: leave out the embeddings service".to_owned(),
        ));
    }
    let bar = progress_bar(dataset.queries.len());
    let report = evaluate_followups(dataset, config, config.top_k, &mut |done| {
        bar.set_position(done as u64);
    });
    bar.finish_and_clear();
    let r = report?;
    let text = if args.json {
        let mut s = serde_json::to_string(&r)?;
        s.push('\n');
        s
    } else {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{}: {} queries, Recall@{} of follow-up turns (after \"{FOLLOW_UP_ASK}\") and of \
             topic shifts (after another question and \"{ANSWERED}\")",
            r.dataset,
            thousands(r.queries),
            r.k
        );
        let _ = writeln!(
            s,
            "{:<34}  {:>11}  {:>6}",
            "latest user turn", "latest only", "filter"
        );
        let _ = writeln!(
            s,
            "{:<34}  {:>11.3}  {:>6.3}",
            "(the question itself)", r.question, r.question
        );
        for row in &r.rows {
            let _ = writeln!(
                s,
                "{:<34}  {:>11.3}  {:>6.3}",
                row.text, row.latest_only, row.filter
            );
        }
        s
    };
    print(&text)
}

fn table(r: &Report, tokenizer: &str) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let bm25 = format!(
        "BM25 field weights: name {}, description {}, params {}",
        r.weights.name, r.weights.description, r.weights.params
    );
    match &r.hybrid {
        None => {
            let _ = writeln!(
                s,
                "{}: {} tools, {} queries ({bm25})",
                r.dataset,
                thousands(r.tools),
                thousands(r.queries),
            );
        }
        Some(h) => {
            let [bm25_w, exact, param_keys, vector] = h.params.weights;
            let _ = writeln!(
                s,
                "{}: {} tools, {} queries, hybrid ranking: rrf_k {}, channel weights bm25 {bm25_w}, \
                 exact {exact}, param_keys {param_keys}, vector {vector} ({bm25}; embeddings {} \
                 from {})",
                r.dataset,
                thousands(r.tools),
                thousands(r.queries),
                h.params.k,
                h.model,
                h.service
            );
        }
    }
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "{:>5}  {:>8}  {:>10}  {:>14}  {:>10}",
        "k",
        "Recall@k",
        "Complete@k",
        format!("tokens@k {tokenizer}"),
        "of catalog"
    );
    for a in &r.at_k {
        let share = if r.tokens_catalog == 0 {
            0.0
        } else {
            a.tokens / r.tokens_catalog as f64 * 100.0
        };
        let _ = writeln!(
            s,
            "{:>5}  {:>8.3}  {:>10.3}  {:>14}  {:>9.2}%",
            a.k,
            a.recall,
            a.complete,
            thousands(a.tokens.round() as usize),
            share
        );
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "NDCG@10 {:.3}   MRR {:.3}", r.ndcg10, r.mrr);
    let _ = writeln!(
        s,
        "catalog tokens: {} {}, estimate (chars/4) {}",
        tokenizer,
        thousands(r.tokens_catalog),
        thousands(r.tokens_estimate_catalog)
    );
    let sel = &r.selected;
    let _ = writeln!(
        s,
        "as configured (top_k {}): recall {:.3}, complete {:.3}, {:.1} tools and {} tokens kept per request",
        sel.top_k,
        sel.recall,
        sel.complete,
        sel.tools,
        thousands(sel.tokens.round() as usize)
    );
    let _ = writeln!(
        s,
        "rank time per query: median {:.0} µs, p99 {:.0} µs, mean {:.0} µs; index built once in {:.0} ms",
        r.rank_us_median, r.rank_us_p99, r.rank_us_mean, r.build_ms
    );
    if let Some(h) = &r.hybrid {
        let _ = writeln!(
            s,
            "embeddings: {} texts in {} calls, {:.1} s in all: {:.1} s for the first query (the \
             catalog's tools), then per query median {:.1} ms, p99 {:.1} ms",
            thousands(h.inputs),
            thousands(h.calls),
            h.embed_ms_total / 1e3,
            h.embed_ms_first / 1e3,
            h.embed_ms_median,
            h.embed_ms_p99
        );
    }
    if r.queries_without_relevant > 0 {
        let _ = writeln!(
            s,
            "({} queries without relevant tools left out)",
            r.queries_without_relevant
        );
    }
    s
}
