//! A hand-built SVG of Recall@k, Complete@k (left axis, 0–1) and the tokens of the kept tools
//! (right axis) against k. No plotting crate: a few lines, ticks and labels. Weighed against
//! `plotters` (SVG backend): the chart needs two y axes, a marked `top_k` and a legend under the
//! plot, which plotters does with about as much builder code as this file's drawing, plus a
//! dependency tree; this file stays readable top to bottom and its output is already clean.

use crate::output::thousands;
use std::fmt::Write;
use toolsift::offline::eval::Report;

const W: f64 = 900.0;
const H: f64 = 580.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 800.0;
const TOP: f64 = 90.0;
const BOTTOM: f64 = 440.0;
const RECALL: &str = "#1f5fa8";
const COMPLETE: &str = "#2e8b57";
const TOKENS: &str = "#e07b00";
const FONT: &str = "DejaVu Sans, Helvetica, Arial, sans-serif";

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A round upper bound and tick step for `max`: 1, 2 or 5 times a power of ten, 4–8 ticks.
pub fn nice_axis(max: f64) -> (f64, f64) {
    if max <= 0.0 || !max.is_finite() {
        return (1.0, 0.25);
    }
    let magnitude = 10f64.powf(max.log10().floor());
    let mut step = magnitude;
    for m in [0.1, 0.2, 0.5, 1.0, 2.0, 5.0] {
        step = magnitude * m;
        if (max / step).ceil() <= 8.0 {
            break;
        }
    }
    ((max / step).ceil() * step, step)
}

fn text(s: &mut String, x: f64, y: f64, anchor: &str, size: u32, extra: &str, body: &str) {
    let _ = writeln!(
        s,
        r#"<text x="{x:.1}" y="{y:.1}" text-anchor="{anchor}" font-size="{size}" {extra}>{}</text>"#,
        escape(body)
    );
}

fn polyline(s: &mut String, points: &[(f64, f64)], color: &str, dash: &str) {
    let pts: Vec<String> = points
        .iter()
        .map(|(x, y)| format!("{x:.1},{y:.1}"))
        .collect();
    let _ = writeln!(
        s,
        r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2.5" {dash}/>"#,
        pts.join(" ")
    );
}

fn marker(s: &mut String, shape: &str, x: f64, y: f64, color: &str) {
    let _ = match shape {
        "square" => writeln!(
            s,
            r#"<rect x="{:.1}" y="{:.1}" width="7" height="7" fill="{color}"/>"#,
            x - 3.5,
            y - 3.5
        ),
        "diamond" => writeln!(
            s,
            r#"<polygon points="{x:.1},{:.1} {:.1},{y:.1} {x:.1},{:.1} {:.1},{y:.1}" fill="{color}"/>"#,
            y - 5.0,
            x + 5.0,
            y + 5.0,
            x - 5.0
        ),
        _ => writeln!(
            s,
            r#"<circle cx="{x:.1}" cy="{y:.1}" r="3.8" fill="{color}"/>"#
        ),
    };
}

/// The plot of `report` (whose `at_k` holds the k values to draw), with the configured `top_k`
/// marked.
/// The grid lines and left-axis labels of a share from 0 to 1, in fifths; `y` places a share.
fn share_grid(s: &mut String, y: impl Fn(f64) -> f64, label: impl Fn(f64) -> String) {
    for i in 0..=5 {
        let v = f64::from(i) / 5.0;
        let yy = y(v);
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" y1="{yy:.1}" x2="{RIGHT}" y2="{yy:.1}" stroke="#e4e4e4"/>"##
        );
        let _ = writeln!(
            s,
            r##"<line x1="{:.1}" y1="{yy:.1}" x2="{LEFT}" y2="{yy:.1}" stroke="#333"/>"##,
            LEFT - 5.0
        );
        text(s, LEFT - 9.0, yy + 4.5, "end", 13, "", &label(v));
    }
}

pub fn svg(report: &Report, tokenizer: &str, top_k: usize) -> String {
    let ks: Vec<usize> = report.at_k.iter().map(|a| a.k).collect();
    let k_min = ks.first().copied().unwrap_or(1) as f64;
    let k_max = ks.last().copied().unwrap_or(1).max(2) as f64;
    let pad = 14.0;
    let x =
        |k: f64| LEFT + pad + (k - k_min) / (k_max - k_min).max(1.0) * (RIGHT - LEFT - 2.0 * pad);
    let y_share = |v: f64| BOTTOM - v.clamp(0.0, 1.0) * (BOTTOM - TOP);
    let max_tokens = report.at_k.iter().map(|a| a.tokens).fold(0.0, f64::max);
    let (token_top, token_step) = nice_axis(max_tokens);
    let y_tokens = |v: f64| BOTTOM - (v / token_top).clamp(0.0, 1.0) * (BOTTOM - TOP);

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="{FONT}">"#
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);

    // Title and subtitle.
    let title = format!(
        "toolsift on {}: recall and kept tokens against k",
        report.dataset
    );
    text(
        &mut s,
        W / 2.0,
        32.0,
        "middle",
        20,
        r#"font-weight="bold""#,
        &title,
    );
    let ranking = match &report.hybrid {
        Some(h) => format!("hybrid ranking with {}", h.model),
        None => format!(
            "BM25 weights name {}, description {}, params {}",
            report.weights.name, report.weights.description, report.weights.params
        ),
    };
    let subtitle = format!(
        "{} tools ({} {} tokens in all), {} queries; {ranking}",
        thousands(report.tools),
        thousands(report.tokens_catalog),
        tokenizer,
        thousands(report.queries),
    );
    text(
        &mut s,
        W / 2.0,
        56.0,
        "middle",
        13,
        r##"fill="#444""##,
        &subtitle,
    );

    // Grid and left axis (share of relevant tools).
    share_grid(&mut s, y_share, |v| format!("{v:.1}"));
    // Right axis (tokens).
    let mut t = 0.0;
    while t <= token_top + token_step / 2.0 {
        let yy = y_tokens(t);
        let _ = writeln!(
            s,
            r##"<line x1="{RIGHT}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="{TOKENS}"/>"##,
            RIGHT + 5.0
        );
        let label = thousands(t.round() as usize);
        text(
            &mut s,
            RIGHT + 9.0,
            yy + 4.5,
            "start",
            13,
            &format!(r#"fill="{TOKENS}""#),
            &label,
        );
        t += token_step;
    }
    // X axis ticks.
    for &k in &ks {
        let xx = x(k as f64);
        let _ = writeln!(
            s,
            r##"<line x1="{xx:.1}" y1="{BOTTOM}" x2="{xx:.1}" y2="{:.1}" stroke="#333"/>"##,
            BOTTOM + 5.0
        );
        text(&mut s, xx, BOTTOM + 21.0, "middle", 13, "", &k.to_string());
    }
    // Frame.
    let _ = writeln!(
        s,
        r##"<rect x="{LEFT}" y="{TOP}" width="{:.1}" height="{:.1}" fill="none" stroke="#333"/>"##,
        RIGHT - LEFT,
        BOTTOM - TOP
    );
    // The configured top_k.
    if let Some(a) = report.at(top_k) {
        let xx = x(top_k as f64);
        let _ = writeln!(
            s,
            r##"<line x1="{xx:.1}" y1="{TOP}" x2="{xx:.1}" y2="{BOTTOM}" stroke="#888" stroke-dasharray="5,4"/>"##
        );
        let note = format!(
            "top_k = {top_k}: recall {:.2}, {} tokens",
            a.recall,
            thousands(a.tokens.round() as usize)
        );
        text(
            &mut s,
            xx + 6.0,
            TOP + 16.0,
            "start",
            12,
            r##"fill="#555""##,
            &note,
        );
    }
    // Axis titles.
    text(
        &mut s,
        (LEFT + RIGHT) / 2.0,
        BOTTOM + 46.0,
        "middle",
        14,
        "",
        "k (tools kept, best ranked first)",
    );
    let mid = (TOP + BOTTOM) / 2.0;
    text(
        &mut s,
        24.0,
        mid,
        "middle",
        14,
        &format!(r#"transform="rotate(-90 24 {mid:.1})""#),
        "Recall@k and Complete@k",
    );
    let rx = W - 22.0;
    text(
        &mut s,
        rx,
        mid,
        "middle",
        14,
        &format!(r#"fill="{TOKENS}" transform="rotate(90 {rx:.1} {mid:.1})""#),
        &format!("mean {tokenizer} tokens of the top k tools"),
    );

    // Series.
    // (legend, colour, dash, marker, points)
    type Series<'a> = (&'a str, &'a str, &'a str, &'a str, Vec<(f64, f64)>);
    let series: [Series; 3] = [
        (
            "Recall@k (mean share of relevant tools in the top k)",
            RECALL,
            "",
            "circle",
            report
                .at_k
                .iter()
                .map(|a| (x(a.k as f64), y_share(a.recall)))
                .collect(),
        ),
        (
            "Complete@k (queries with every relevant tool in the top k)",
            COMPLETE,
            r#"stroke-dasharray="7,4""#,
            "square",
            report
                .at_k
                .iter()
                .map(|a| (x(a.k as f64), y_share(a.complete)))
                .collect(),
        ),
        (
            "kept tokens: tokens of the top k tools, mean per query (right axis)",
            TOKENS,
            "",
            "diamond",
            report
                .at_k
                .iter()
                .map(|a| (x(a.k as f64), y_tokens(a.tokens)))
                .collect(),
        ),
    ];
    for (_, color, dash, shape, points) in &series {
        polyline(&mut s, points, color, dash);
        for &(px, py) in points {
            marker(&mut s, shape, px, py, color);
        }
    }

    // Legend, under the x axis title.
    let mut ly = BOTTOM + 72.0;
    for (label, color, dash, shape, _) in &series {
        let lx = LEFT + 10.0;
        polyline(&mut s, &[(lx, ly), (lx + 36.0, ly)], color, dash);
        marker(&mut s, shape, lx + 18.0, ly, color);
        text(&mut s, lx + 46.0, ly + 4.5, "start", 13, "", label);
        ly += 20.0;
    }
    let _ = writeln!(s, "</svg>");
    s
}

/// Colours of the per-catalog curves of [`within_k_svg`], after the overall one.
/// Three: with the overall curve, four legend lines fit under the plot.
const CATALOG_COLORS: [&str; 3] = ["#2e8b57", "#e07b00", "#8e44ad"];

/// The share of called tools ranked within k, k = 1..50, from `toolsift report`: all sampled
/// requests' calls, and with several catalogs the three with the most calls, the current top_k
/// marked. Drawn with the same pieces as [`svg`].
pub fn within_k_svg(report: &toolsift::offline::report::Report) -> String {
    use toolsift::offline::report::{Curve, MAX_K, TABLE_KS, percent, thousands as sep};
    let shadow = &report.shadow;
    let x = |k: f64| LEFT + 14.0 + (k - 1.0) / (MAX_K as f64 - 1.0) * (RIGHT - LEFT - 28.0);
    let y = |v: f64| BOTTOM - v.clamp(0.0, 1.0) * (BOTTOM - TOP);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="{FONT}">"#
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let bold = r#"font-weight="bold""#;
    let title = "toolsift report: called tools ranked within k";
    text(&mut s, W / 2.0, 32.0, "middle", 20, bold, title);
    let curve = &shadow.sampled;
    let subtitle = format!(
        "{} calls of ranked tools in {} shadowed requests' answers; {} catalogs",
        sep(curve.calls),
        sep(curve.requests),
        sep(shadow.catalogs.len() as u64),
    );
    text(
        &mut s,
        W / 2.0,
        56.0,
        "middle",
        13,
        r##"fill="#444""##,
        &subtitle,
    );
    share_grid(&mut s, y, |v| format!("{:.0} %", v * 100.0));
    for k in TABLE_KS {
        let xx = x(k as f64);
        let _ = writeln!(
            s,
            r##"<line x1="{xx:.1}" y1="{BOTTOM}" x2="{xx:.1}" y2="{:.1}" stroke="#333"/>"##,
            BOTTOM + 5.0
        );
        text(&mut s, xx, BOTTOM + 21.0, "middle", 13, "", &k.to_string());
    }
    let _ = writeln!(
        s,
        r##"<rect x="{LEFT}" y="{TOP}" width="{:.1}" height="{:.1}" fill="none" stroke="#333"/>"##,
        RIGHT - LEFT,
        BOTTOM - TOP
    );
    let axis = "k (tools kept, best ranked first)";
    text(
        &mut s,
        (LEFT + RIGHT) / 2.0,
        BOTTOM + 46.0,
        "middle",
        14,
        "",
        axis,
    );
    let mid = (TOP + BOTTOM) / 2.0;
    let rotate = format!(r#"transform="rotate(-90 24 {mid:.1})""#);
    text(
        &mut s,
        24.0,
        mid,
        "middle",
        14,
        &rotate,
        "share of calls ranked within k",
    );

    if let Some(top_k) = shadow.top_k.filter(|k| *k <= MAX_K && curve.calls > 0) {
        let xx = x(top_k as f64);
        let _ = writeln!(
            s,
            r##"<line x1="{xx:.1}" y1="{TOP}" x2="{xx:.1}" y2="{BOTTOM}" stroke="#888" stroke-dasharray="5,4"/>"##
        );
        let note = format!(
            "top_k = {top_k}: {} of calls",
            percent(curve.within(top_k), curve.calls)
        );
        text(
            &mut s,
            xx + 6.0,
            BOTTOM - 10.0,
            "start",
            12,
            r##"fill="#555""##,
            &note,
        );
    }

    let mut series: Vec<(String, &str, &Curve)> =
        vec![("all sampled requests".to_owned(), RECALL, curve)];
    if shadow.catalogs.len() > 1 {
        for (c, color) in shadow
            .catalogs
            .iter()
            .filter(|c| c.sampled.calls > 0)
            .zip(CATALOG_COLORS)
        {
            let tools = c
                .tools
                .map(|t| format!(", {} tools", sep(t)))
                .unwrap_or_default();
            let label = format!(
                "catalog {}{tools} ({} calls)",
                c.catalog,
                sep(c.sampled.calls)
            );
            series.push((label, color, &c.sampled));
        }
    }
    for (_, color, c) in &series {
        if c.calls == 0 {
            continue;
        }
        let points: Vec<(f64, f64)> = (1..=MAX_K).map(|k| (x(k as f64), y(c.share(k)))).collect();
        polyline(&mut s, &points, color, "");
        for k in TABLE_KS {
            marker(&mut s, "circle", x(k as f64), y(c.share(k)), color);
        }
    }
    let mut ly = BOTTOM + 72.0;
    for (label, color, _) in &series {
        let lx = LEFT + 10.0;
        polyline(&mut s, &[(lx, ly), (lx + 36.0, ly)], color, "");
        marker(&mut s, "circle", lx + 18.0, ly, color);
        text(&mut s, lx + 46.0, ly + 4.5, "start", 13, "", label);
        ly += 20.0;
    }
    let _ = writeln!(s, "</svg>");
    s
}

/// Writes a plot: the SVG as it is, or rendered to PNG when `path` ends in `.png` (fonts: the
/// system's, DejaVu Sans or any sans-serif).
pub fn write(path: &std::path::Path, svg: &str) -> Result<(), crate::Failure> {
    let fail = |e: &dyn std::fmt::Display| {
        crate::Failure(format!("cannot write the plot {}: {e}", path.display()))
    };
    let png = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("png"));
    let bytes = if png {
        png_of(svg).map_err(|e| fail(&e))?
    } else {
        svg.as_bytes().to_vec()
    };
    std::fs::write(path, bytes).map_err(|e| fail(&e))
}

/// The SVG rendered at its own size by resvg, with the system's fonts.
fn png_of(svg: &str) -> Result<Vec<u8>, String> {
    let mut options = resvg::usvg::Options::default();
    options.fontdb_mut().load_system_fonts();
    let tree = resvg::usvg::Tree::from_str(svg, &options).map_err(|e| e.to_string())?;
    let size = tree.size().to_int_size();
    let mut pixmap = resvg::tiny_skia::Pixmap::new(size.width(), size.height())
        .ok_or_else(|| "the plot has no size".to_owned())?;
    resvg::render(
        &tree,
        resvg::tiny_skia::Transform::default(),
        &mut pixmap.as_mut(),
    );
    pixmap.encode_png().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_axes() {
        assert_eq!(nice_axis(0.0), (1.0, 0.25));
        let (top, step) = nice_axis(1234.0);
        assert!(top >= 1234.0 && (top / step) <= 8.0, "{top} {step}");
        assert_eq!(nice_axis(7800.0), (8000.0, 1000.0));
        assert_eq!(nice_axis(41.0), (50.0, 10.0));
    }

    #[test]
    fn escapes_text() {
        assert_eq!(escape(r#"a<b & "c">"#), "a&lt;b &amp; &quot;c&quot;&gt;");
    }
}
