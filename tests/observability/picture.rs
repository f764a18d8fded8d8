//! The dashboard's panels drawn from one scrape, for the book (docs/book/src/images/
//! dashboard.png): each panel as Grafana lays it out (two columns), each query a bar. A scrape
//! is one instant, so a rate is shown as the count over the whole run; a ratio of rates as the
//! ratio of the counts; a quantile as `histogram_quantile` computes it from the buckets; a
//! family split by `label_replace` as a bar per member that counted something.

use super::promql::{self, Sample, Token};
use serde_json::Value;
use std::fmt::Write;

const FONT: &str = "DejaVu Sans, Helvetica, Arial, sans-serif";
const PANEL_W: f64 = 470.0;
const GAP: f64 = 16.0;
const ROW: f64 = 21.0;
const BAR: &str = "#3274d9";

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// `legend` with the labels this run leaves empty (`toolsift_plugin`, `instance`) dropped and
/// `{{label}}` filled from `labels`.
fn legend(text: &str, labels: &[(&str, &str)]) -> String {
    let mut out = text
        .replace("{{toolsift_plugin}}", "")
        .replace("{{instance}}", "");
    for (k, v) in labels {
        out = out.replace(&format!("{{{{{k}}}}}"), v);
    }
    out.trim().to_owned()
}

/// Prometheus' `histogram_quantile`: linear within the bucket the rank falls in.
fn quantile(q: f64, buckets: &mut [(f64, f64)]) -> f64 {
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let Some(&(_, total)) = buckets.last() else {
        return f64::NAN;
    };
    let rank = q * total;
    let mut below = (0.0, 0.0);
    for &(le, count) in buckets.iter() {
        if count >= rank {
            if le.is_infinite() {
                return below.0;
            }
            let share = if count > below.1 {
                (rank - below.1) / (count - below.1)
            } else {
                0.0
            };
            return below.0 + (le - below.0) * share;
        }
        below = (le, count);
    }
    below.0
}

/// The bars of one query: (label, value).
fn bars(expr: &str, legend_text: &str, scrape: &[Sample]) -> Vec<(String, f64)> {
    let analysis = promql::analyse(expr);
    let tokens = promql::tokenize(expr);
    if expr.starts_with("histogram_quantile(") {
        let Some(Token::Number(q)) = tokens.get(2) else {
            panic!("no quantile in {expr}");
        };
        let selector = &analysis.selectors[0];
        let mut buckets: Vec<(f64, f64)> = scrape
            .iter()
            .filter(|s| selector.accepts(s))
            .map(|s| (s.labels["le"].parse::<f64>().unwrap(), s.value))
            .collect();
        return vec![(legend(legend_text, &[]), quantile(*q, &mut buckets))];
    }
    if let Some(label) = analysis.made.iter().next() {
        // One bar per member of the family `label_replace` splits by name.
        let selector = &analysis.selectors[0];
        let family = &selector
            .matchers
            .iter()
            .find(|m| m.label == "__name__")
            .unwrap()
            .value;
        let prefix = family.trim_end_matches(".+");
        let mut out: Vec<(String, f64)> = Vec::new();
        for sample in scrape
            .iter()
            .filter(|s| selector.accepts(s) && s.value > 0.0)
        {
            let member = sample.name.trim_start_matches(prefix);
            out.push((
                legend(legend_text, &[(label.as_str(), member)]),
                sample.value,
            ));
        }
        out.sort_by(|a, b| b.1.total_cmp(&a.1));
        return out;
    }
    let totals: Vec<f64> = analysis
        .selectors
        .iter()
        .map(|s| promql::total(s, scrape))
        .collect();
    let ratio = tokens.iter().any(|t| matches!(t, Token::Op(o) if o == "/"));
    let value = if ratio && totals.len() == 2 {
        totals[0] / totals[1]
    } else {
        totals.iter().sum()
    };
    vec![(legend(legend_text, &[]), value)]
}

fn shown(value: f64, unit: &str) -> String {
    if !value.is_finite() {
        return "no data".to_owned();
    }
    match unit {
        "percentunit" => format!("{:.0} %", value * 100.0),
        "µs" => format!("{value:.0} µs"),
        _ if value.fract() == 0.0 => format!("{value:.0}"),
        _ => format!("{value:.1}"),
    }
}

/// One panel's SVG at (`x`, `y`); returns its height.
fn panel(s: &mut String, x: f64, y: f64, panel: &Value, rows: &[(String, f64)]) -> f64 {
    let unit = panel["fieldConfig"]["defaults"]["unit"]
        .as_str()
        .unwrap_or_default();
    let height = 44.0 + ROW * rows.len().max(1) as f64;
    let _ = writeln!(
        s,
        r##"<rect x="{x}" y="{y}" width="{PANEL_W}" height="{height}" rx="4" fill="#ffffff" stroke="#d8d9da"/>"##
    );
    let _ = writeln!(
        s,
        r##"<text x="{}" y="{}" font-size="14" font-weight="bold" fill="#1f2328">{}</text>"##,
        x + 12.0,
        y + 22.0,
        escape(panel["title"].as_str().unwrap())
    );
    let max = rows
        .iter()
        .map(|r| if unit == "percentunit" { 1.0 } else { r.1 })
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let (bar_x, bar_w) = (x + 200.0, PANEL_W - 290.0);
    for (i, (label, value)) in rows.iter().enumerate() {
        let row_y = y + 40.0 + ROW * i as f64;
        let mut name = label.clone();
        if name.chars().count() > 28 {
            name = name.chars().take(27).collect::<String>() + "…";
        }
        let _ = writeln!(
            s,
            r##"<text x="{}" y="{}" font-size="12" fill="#464c54">{}</text>"##,
            x + 12.0,
            row_y + 11.0,
            escape(&name)
        );
        let w = if max > 0.0 && value.is_finite() {
            bar_w * value / max
        } else {
            0.0
        };
        let _ = writeln!(
            s,
            r##"<rect x="{bar_x}" y="{row_y}" width="{w:.1}" height="14" fill="{BAR}"/>"##
        );
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{}" font-size="12" fill="#1f2328">{}</text>"##,
            bar_x + w + 6.0,
            row_y + 11.0,
            escape(&shown(*value, unit))
        );
    }
    height
}

/// The dashboard's panels, two a row as Grafana lays them out, from `scrape`; `substituted`
/// sets the dashboard's variables.
pub fn dashboard_svg(
    dashboard: &Value,
    scrape: &[Sample],
    substituted: impl Fn(&str) -> String,
) -> String {
    let panels = dashboard["panels"].as_array().unwrap();
    let mut body = String::new();
    let mut y = 70.0;
    for pair in panels.chunks(2) {
        let mut row_height: f64 = 0.0;
        for (column, p) in pair.iter().enumerate() {
            let rows: Vec<(String, f64)> = p["targets"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|t| {
                    bars(
                        &substituted(t["expr"].as_str().unwrap()),
                        &substituted(t["legendFormat"].as_str().unwrap_or_default()),
                        scrape,
                    )
                })
                .collect();
            let x = GAP + column as f64 * (PANEL_W + GAP);
            row_height = row_height.max(panel(&mut body, x, y, p, &rows));
        }
        y += row_height + GAP;
    }
    let width = 2.0 * PANEL_W + 3.0 * GAP;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{y}" viewBox="0 0 {width} {y}" font-family="{FONT}">"##
    );
    let _ = writeln!(
        s,
        r##"<rect width="{width}" height="{y}" fill="#f4f5f5"/>"##
    );
    let _ = writeln!(
        s,
        r##"<text x="{GAP}" y="30" font-size="18" font-weight="bold" fill="#1f2328">toolsift: the dashboard's panels over one test run</text>"##
    );
    let _ = writeln!(
        s,
        r##"<text x="{GAP}" y="52" font-size="12" fill="#464c54">{}</text>"##,
        escape(
            "Envoy's /stats/prometheus after tests/observability.rs's traffic (k = 5): counts over the run where Grafana plots rates."
        )
    );
    s.push_str(&body);
    s.push_str("</svg>\n");
    s
}

/// The SVG rendered to PNG at `path` with the system's fonts, as `toolsift report --plot` does.
pub fn write_png(path: &std::path::Path, svg: &str) {
    let mut options = resvg::usvg::Options::default();
    options.fontdb_mut().load_system_fonts();
    let tree = resvg::usvg::Tree::from_str(svg, &options).unwrap();
    let size = tree.size().to_int_size();
    let mut pixmap = resvg::tiny_skia::Pixmap::new(size.width(), size.height()).unwrap();
    resvg::render(
        &tree,
        resvg::tiny_skia::Transform::default(),
        &mut pixmap.as_mut(),
    );
    std::fs::write(path, pixmap.encode_png().unwrap()).unwrap();
}
