//! `toolsift report LOG…`: the access log summed up (`toolsift::offline::report`), as text, as one JSON
//! object (`--json`), and the within-k curve drawn (`--plot OUT.svg|OUT.png`).

use crate::Failure;
use crate::output::print;
use crate::plot;
use std::fmt::Write;
use std::io::BufReader;
use std::path::PathBuf;
use toolsift::offline::report::{
    MAX_K, Report, TABLE_KS, TARGETS, Tally, percent, tally, thousands,
};

#[derive(clap::Args)]
pub struct Args {
    /// Access log files (JSON lines, as the shipped Envoy configurations write them); `-` reads
    /// standard input.
    #[arg(value_name = "LOG", required = true)]
    logs: Vec<PathBuf>,
    /// Print one JSON object (keys in docs/report.md).
    #[arg(long)]
    json: bool,
    /// Draw the share of called tools ranked within k (k = 1..50), the current top_k marked,
    /// into this file: SVG, or PNG when it ends in `.png`. Repeatable.
    #[arg(long, value_name = "OUT.svg|OUT.png")]
    plot: Vec<PathBuf>,
}

pub fn run(args: &Args) -> Result<(), Failure> {
    let mut counts = Tally::new();
    for path in &args.logs {
        let read = if path.as_os_str() == "-" {
            tally(std::io::stdin().lock(), &mut counts)
        } else {
            let file = std::fs::File::open(path)
                .map_err(|e| Failure(format!("cannot read the log {}: {e}", path.display())))?;
            tally(BufReader::with_capacity(1 << 16, file), &mut counts)
        };
        read.map_err(|e| Failure(format!("cannot read the log {}: {e}", path.display())))?;
    }
    let report = counts.report();
    for out in &args.plot {
        let svg = plot::within_k_svg(&report);
        plot::write(out, &svg)?;
        eprintln!("toolsift: wrote {}", out.display());
    }
    let text = if args.json {
        let mut s = serde_json::to_string(&report)?;
        s.push('\n');
        s
    } else {
        text(&report, args.logs.len())
    };
    print(&text)
}

/// The first `n` of `names` as `a 3, b 2, …`.
fn top(names: &[(&str, u64)], n: usize) -> String {
    let mut parts: Vec<String> = names
        .iter()
        .take(n)
        .map(|(name, count)| format!("{} {}", name.escape_debug(), thousands(*count)))
        .collect();
    if names.len() > n {
        parts.push("…".to_owned());
    }
    parts.join(", ")
}

/// `1 request`, `1,204 requests`.
fn requests(n: u64) -> String {
    let s = if n == 1 { "" } else { "s" };
    format!("{} request{s}", thousands(n))
}

fn smallest_k(k: Option<&Option<usize>>) -> String {
    match k.copied().flatten() {
        Some(k) => k.to_string(),
        None => format!(">{MAX_K}"),
    }
}

/// The human report.
pub fn text(r: &Report, files: usize) -> String {
    let mut s = String::new();
    let l = &r.lines;
    let _ = writeln!(
        s,
        "{} lines read from {} {}: {} requests, {} malformed, {} foreign, {} blank",
        thousands(l.read),
        files,
        if files == 1 { "log" } else { "logs" },
        thousands(l.requests),
        thousands(l.malformed),
        thousands(l.foreign),
        thousands(l.blank),
    );
    if !l.unreadable.is_empty() {
        let keys: Vec<String> = l
            .unreadable
            .iter()
            .map(|(k, n)| format!("{k} {}", thousands(*n)))
            .collect();
        let _ = writeln!(s, "values that did not read (skipped): {}", keys.join(", "));
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "{}", r.summary);

    let sh = &r.shadow;
    let curve = &sh.sampled;
    if sh.top_k_values.len() > 1 {
        let values: Vec<String> = sh
            .top_k_values
            .iter()
            .rev()
            .map(|(k, n)| format!("{k} in {} records", thousands(*n)))
            .collect();
        let _ = writeln!(
            s,
            "(the records' top_k differs: {}; the most common is taken as current)",
            values.join(", ")
        );
    }
    if curve.calls > 0 {
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "calls in shadowed answers ranked within k ({} calls of ranked tools in {} sampled \
             requests; {} calls of tools the catalog does not rank left out)",
            thousands(curve.calls),
            thousands(curve.requests),
            thousands(curve.unranked_calls),
        );
        let mut ks: Vec<usize> = TABLE_KS.to_vec();
        if let Some(k) = sh.top_k {
            ks.push(k.min(MAX_K));
        }
        ks.sort_unstable();
        ks.dedup();
        let _ = writeln!(s, "{:>5}  {:>9}  {:>7}", "k", "within k", "share");
        for k in ks {
            let mark = if Some(k) == sh.top_k {
                "  ← top_k"
            } else {
                ""
            };
            let _ = writeln!(
                s,
                "{k:>5}  {:>9}  {:>7}{mark}",
                thousands(curve.within(k)),
                percent(curve.within(k), curve.calls),
            );
        }
        let _ = writeln!(
            s,
            "as configured (top_k, min_score, max_tool_tokens, pins and the loop guard applied): \
             {} of {} calls missed, {} kept",
            thousands(curve.missed),
            thousands(curve.calls),
            percent(curve.calls.saturating_sub(curve.missed), curve.calls),
        );
    }
    if sh.filtered_requests > 0 {
        let _ = writeln!(
            s,
            "filtered requests with a record: {} ({} calls of ranked tools, {} of them ranked past \
             top_k; the model saw only the kept tools, so these calls are not in the curve)",
            thousands(sh.filtered_requests),
            thousands(sh.filtered_calls),
            thousands(sh.filtered_past_top_k),
        );
    }
    if sh.catalogs.len() > 1 {
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "per catalog (first 8 hex digits of the sha256 of its sorted tool names):"
        );
        let _ = writeln!(
            s,
            "{:<10}  {:>6}  {:>8}  {:>8}  {:>7}  {:>12}  {:>5}  {:>5}  {:>6}",
            "catalog",
            "tools",
            "sampled",
            "filtered",
            "calls",
            "within top_k",
            "95 %",
            "99 %",
            "99.9 %"
        );
        for c in &sh.catalogs {
            let ks: Vec<String> = TARGETS
                .iter()
                .map(|(_, _, name)| {
                    let k = smallest_k(c.sampled.smallest_k.get(*name));
                    // As wide as its heading (`95 %`, `99.9 %`).
                    format!("{k:>width$}", width = name.len().max(3) + 2)
                })
                .collect();
            let within = match sh.top_k {
                Some(top_k) if c.sampled.calls > 0 => {
                    percent(c.sampled.within(top_k), c.sampled.calls)
                }
                _ => "-".to_owned(),
            };
            let _ = writeln!(
                s,
                "{:<10}  {:>6}  {:>8}  {:>8}  {:>7}  {:>12}  {}",
                c.catalog,
                c.tools.map(thousands).unwrap_or_else(|| "-".to_owned()),
                thousands(c.sampled.requests),
                thousands(c.filtered_requests),
                thousands(c.sampled.calls),
                within,
                ks.join("  "),
            );
        }
    }

    let auto_k: Vec<_> = sh
        .catalogs
        .iter()
        .filter_map(|c| c.auto_k.as_ref().map(|a| (&c.catalog, a)))
        .collect();
    if !auto_k.is_empty() {
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "auto_k per catalog (the k of its latest record; the requests since it took effect, \
             and the share of their shadowed calls it kept; where records were selected with \
             another k, each logged k and its records):"
        );
        let _ = writeln!(
            s,
            "{:<10}  {:>5}  {:<12}  {:>8}  {:>8}  {:>7}  {:>8}  capped",
            "catalog", "k", "source", "filtered", "shadowed", "calls", "kept"
        );
        for (catalog, a) in auto_k {
            let kept = a
                .kept
                .map_or_else(|| "-".to_owned(), |k| format!("{:.1} %", k * 100.0));
            let capped = a.capped.map_or_else(
                || "-".to_owned(),
                |c| format!("max_k keeps {:.1} %", c * 100.0),
            );
            let _ = writeln!(
                s,
                "{:<10}  {:>5}  {:<12}  {:>8}  {:>8}  {:>7}  {:>8}  {capped}",
                catalog,
                a.k,
                a.source,
                thousands(a.filtered_requests),
                thousands(a.shadowed_requests),
                thousands(a.calls),
                kept,
            );
            if a.logged.len() > 1 {
                let logged: Vec<String> = a
                    .logged
                    .iter()
                    .map(|(k, n)| format!("{k} {}", thousands(*n)))
                    .collect();
                let _ = writeln!(s, "{:<10}  logged: {}", "", logged.join(", "));
            }
        }
    }

    let _ = writeln!(s);
    let _ = writeln!(s, "requests by outcome:");
    let mut outcomes: Vec<(&String, &u64)> = r.outcomes.iter().collect();
    outcomes.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    for (outcome, n) in outcomes {
        let _ = writeln!(s, "  {outcome:<24} {:>9}", thousands(*n));
    }
    let _ = writeln!(
        s,
        "function tools: {} received, {} passed on",
        thousands(r.tools_in),
        thousands(r.tools_out)
    );
    let t = &r.tokens;
    if t.requests > 0 {
        let _ = writeln!(
            s,
            "tokens of the function tools (estimated): {} → {} in {} requests; saved {} ({} per \
             request)",
            thousands(t.before),
            thousands(t.after),
            thousands(t.requests),
            thousands(t.saved),
            thousands(t.saved_per_request.round() as u64),
        );
    } else {
        let _ = writeln!(
            s,
            "tokens: no record of tokens in the log (tokens= in toolsift, or toolsift_tokens)"
        );
    }

    let a = &r.access;
    if a.denied_tools > 0 || a.refused_requests > 0 || !a.verdicts.is_empty() {
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "access: {} tools hidden from callers, {} refused",
            thousands(a.denied_tools),
            requests(a.refused_requests)
        );
        for (verdict, rules) in &a.verdicts {
            let surfaces: Vec<String> = a
                .by_surface
                .get(verdict)
                .map(|m| {
                    m.iter()
                        .map(|(surface, n)| format!("{surface} {}", thousands(*n)))
                        .collect()
                })
                .unwrap_or_default();
            let _ = writeln!(s, "  {verdict}: {}", surfaces.join(", "));
            for rc in rules {
                let _ = writeln!(
                    s,
                    "    rule {:<20} {:<12} {:>9}",
                    rc.rule.escape_debug().to_string(),
                    rc.surface,
                    thousands(rc.count)
                );
            }
        }
    }
    let lp = &r.loops;
    let _ = writeln!(
        s,
        "loops: {} had tools taken out by the loop guard ({} tools{}), {} notes written",
        requests(lp.requests),
        thousands(lp.evicted),
        if lp.evicted > 0 {
            format!(": {}", top(&lp.tools.ranked(), 5))
        } else {
            String::new()
        },
        thousands(lp.noted),
    );
    let u = &r.unknown_tools;
    let _ = writeln!(
        s,
        "unknown tools: {} whose model called a made-up tool{}",
        requests(u.requests),
        if u.requests > 0 {
            format!(" ({})", top(&u.tools.ranked(), 5))
        } else {
            String::new()
        },
    );
    let t = &r.transitions;
    if t.requests > 0 {
        let _ = writeln!(
            s,
            "brought in by the fleet's transitions: {} ({} tools: {}); {} of them called in \
             shadowed answers",
            requests(t.requests),
            thousands(t.tools.total()),
            top(&t.tools.ranked(), 5),
            thousands(t.calls),
        );
    }
    let w = &r.weak_queries;
    if w.requests > 0 {
        let _ = writeln!(
            s,
            "questions the ranking could not read: {} (not cut to top_k: {} of their {} tools \
             sent, as weak_query says)",
            requests(w.requests),
            thousands(w.tools_out),
            thousands(w.tools_in),
        );
    }
    if u.shadow_calls.total() > 0 {
        let _ = writeln!(
            s,
            "calls in shadow records of tools the catalog does not rank: {}",
            top(&u.shadow_calls.ranked(), 5)
        );
    }
    s
}
