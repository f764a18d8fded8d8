//! The dashboard's panels drawn from the test's real Prometheus, for the book
//! (docs/book/src/images/dashboard.png): each panel as Grafana lays it out (two columns), each
//! series of a query's answer a bar. A picture is one instant where Grafana plots rates over
//! time, so each query is asked with `rate` read as `increase` over the same window (longer
//! than the run: the run's counts; the shares and quantiles of those counts, as the rates give
//! them), every plugin and Envoy together (`toolsift_plugin` and `instance` left out of its
//! groupings and matchings).

use super::prometheus::Prometheus;
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

/// `legend` with the labels the picture leaves out (`toolsift_plugin`, `instance`) dropped and
/// `{{label}}` filled from `labels`.
fn legend(text: &str, labels: &std::collections::BTreeMap<String, String>) -> String {
    let mut out = text
        .replace("{{toolsift_plugin}}", "")
        .replace("{{instance}}", "");
    for (k, v) in labels {
        out = out.replace(&format!("{{{{{k}}}}}"), v);
    }
    out.trim().to_owned()
}

/// `expr` as the picture asks it: counts over the window instead of rates, and no grouping or
/// matching by plugin or Envoy.
pub fn for_picture(expr: &str) -> String {
    let rate = regex_lite::Regex::new(r"\brate\(").unwrap();
    let lists = regex_lite::Regex::new(r"\b(by|on) \(([^)]*)\)").unwrap();
    let expr = rate.replace_all(expr, "increase(");
    lists
        .replace_all(&expr, |c: &regex_lite::Captures| {
            let kept: Vec<&str> = c[2]
                .split(',')
                .map(str::trim)
                .filter(|l| !["toolsift_plugin", "instance", ""].contains(l))
                .collect();
            format!("{} ({})", &c[1], kept.join(", "))
        })
        .into_owned()
}

/// The bars of one query: (label, value), a series each; of a family split by label (several
/// series), those that counted something.
fn bars(expr: &str, legend_text: &str, prometheus: &Prometheus) -> Vec<(String, f64)> {
    let expr = for_picture(expr);
    let answer = prometheus
        .query(&expr)
        .unwrap_or_else(|e| panic!("{expr}: {e}"));
    // A count (no quantile, no share) is a whole number: `increase` extrapolates a little
    // past the first and last samples (1.1 for one request).
    let count = !expr.starts_with("histogram_quantile(") && !expr.contains(" / ");
    let family = answer.len() > 1;
    let mut out: Vec<(String, f64)> = answer
        .iter()
        .filter(|s| !family || s.value > 0.0)
        .map(|s| {
            let value = if count { s.value.round() } else { s.value };
            (legend(legend_text, &s.labels), value)
        })
        .collect();
    if out.is_empty() {
        out.push((legend(legend_text, &Default::default()), f64::NAN));
    }
    out.sort_by(|a, b| b.1.total_cmp(&a.1));
    out
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

/// The dashboard's panels, two a row as Grafana lays them out, from `prometheus`'s answers;
/// `substituted` sets the dashboard's variables.
pub fn dashboard_svg(
    dashboard: &Value,
    prometheus: &Prometheus,
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
                        prometheus,
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
            "Prometheus's answers after tests/observability.rs's traffic through two Envoys (k = 5): counts over the run where Grafana plots rates."
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
