//! `toolsift schema`: the plugin configuration's JSON Schema, derived from the configuration
//! types (`toolsift::config::json_schema`); with `--markdown`, the book's configuration
//! reference drawn from that schema. `docs/config.schema.json` and
//! `docs/book/src/reference/configuration.md` are these two outputs, and `tests/schema.rs`
//! fails when either differs from what the code prints.

use crate::Failure;
use serde_json::Value;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Print the configuration reference (Markdown, the book's page) drawn from the schema.
    #[arg(long)]
    markdown: bool,
}

pub fn run(args: &Args) -> Result<(), Failure> {
    let schema = toolsift::config::json_schema();
    if args.markdown {
        print!("{}", reference(&schema));
    } else {
        println!("{}", serde_json::to_string_pretty(&schema)?);
    }
    Ok(())
}

/// The page's opening, before the tables.
const INTRO: &str = "\
# Configuration reference

<!-- Generated: `toolsift schema --markdown > docs/book/src/reference/configuration.md`. Do not
edit; the descriptions are the doc comments of the configuration types (src/config/mod.rs and the
types of its sections), and `cargo test --test integration schema::` fails when this page differs from them. -->

The plugin configuration is JSON, in the `configuration` StringValue of the Envoy Wasm filter
(Istio's `pluginConfig`, Envoy Gateway's `wasm[].config`). Unknown keys and wrong types stop
Envoy from loading the filter, with a log line naming the field:

```
wasm log toolsift toolsift: invalid toolsift configuration: field `top_k`: invalid type: string \"five\", expected f64
```

Whole numbers may be written as doubles (`5.0`): Istio hands `pluginConfig` over as a protobuf
Struct, whose numbers are doubles. A request toolsift cannot read is answered, with
`on_error: \"reject\"` (and always under `access`), with a JSON error such as
`{\"error\":{\"type\":\"toolsift_error\",\"code\":\"malformed_json\",\"message\":\"toolsift: the request body is not valid JSON\"}}`.

This page is drawn from the configuration's JSON Schema, which `toolsift schema` prints and
the repository ships as `docs/config.schema.json` (for editors, and for validating a
`pluginConfig` before it is applied). `toolsift check` validates every plugin configuration it
finds (Envoy YAML, an Istio `WasmPlugin`, an Envoy Gateway `EnvoyExtensionPolicy`) against it,
naming each field that breaks it. The schema holds what the filter checks: types, ranges (the
type column shows them), lengths, patterns and the rules between fields (such as `embeddings`
being required with `ranking: \"hybrid\"`); a configuration passes the schema exactly when the
filter accepts it, but for three rules JSON Schema cannot state, which only the filter's own
parser checks (`toolsift check` runs it too): a `gating.rules[].when.regex` that does not
compile, two rules of `access` (or `access_shadow`) with one `name`, and a
`loop_guard.window` below `loop_guard.repeats`.
";

/// One table row: a key of a section.
struct Row {
    key: String,
    kind: String,
    default: String,
    description: String,
}

/// One section: an object of the configuration, its keys, and the rules between them.
struct Section {
    path: String,
    description: String,
    rows: Vec<Row>,
    rules: Vec<String>,
}

/// The reference page: the top-level keys, then every object section, depth first.
pub fn reference(schema: &Value) -> String {
    let defs = schema.get("$defs").cloned().unwrap_or(Value::Null);
    let mut sections = Vec::new();
    walk(schema, "", "", &defs, &mut sections);
    let mut out = String::from(INTRO);
    for section in sections {
        out.push('\n');
        if section.path.is_empty() {
            out.push_str("## Top-level keys\n\n");
        } else {
            out.push_str(&format!("## `{}`\n\n", section.path));
        }
        if !section.description.is_empty() {
            out.push_str(&section.description);
            out.push_str("\n\n");
        }
        out.push_str("| key | type | default | description |\n|---|---|---|---|\n");
        for row in section.rows {
            out.push_str(&format!(
                "| `{}` | {} | {} | {} |\n",
                row.key, row.kind, row.default, row.description
            ));
        }
        if !section.rules.is_empty() {
            out.push_str("\nBetween its keys:\n\n");
            for rule in section.rules {
                out.push_str(&format!("- {rule}\n"));
            }
        }
    }
    out
}

/// `schema` with its `$ref` followed (`#/$defs/Name`).
fn resolve<'a>(schema: &'a Value, defs: &'a Value) -> &'a Value {
    let mut schema = schema;
    for _ in 0..8 {
        let Some(name) = schema
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|r| r.strip_prefix("#/$defs/"))
        else {
            break;
        };
        match defs.get(name) {
            Some(def) => schema = def,
            None => break,
        }
    }
    schema
}

/// The schemas `schema` may be besides `null` (an `Option`: `anyOf [X, null]`).
fn alternatives<'a>(schema: &'a Value, defs: &'a Value) -> Vec<&'a Value> {
    let schema = resolve(schema, defs);
    match schema.get("anyOf").and_then(Value::as_array) {
        Some(any) => any
            .iter()
            .map(|s| resolve(s, defs))
            .filter(|s| s.get("type").and_then(Value::as_str) != Some("null"))
            .collect(),
        None => vec![schema],
    }
}

/// The object (with `properties`) that `schema` is, if it is one.
fn object<'a>(schema: &'a Value, defs: &'a Value) -> Option<&'a Value> {
    alternatives(schema, defs)
        .into_iter()
        .find(|s| s.get("properties").is_some())
}

/// The object each item of the array `schema` is, if it is an array of objects.
fn item_object<'a>(schema: &'a Value, defs: &'a Value) -> Option<&'a Value> {
    alternatives(schema, defs)
        .into_iter()
        .find_map(|s| object(s.get("items")?, defs))
}

/// The values of an enum, each with its description when it has one.
fn enum_values(schema: &Value) -> Option<Vec<(String, Option<String>)>> {
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        return Some(values.iter().map(|v| (v.to_string(), None)).collect());
    }
    let one_of = schema.get("oneOf").and_then(Value::as_array)?;
    one_of
        .iter()
        .map(|v| {
            let value = v.get("const")?.to_string();
            let description = v
                .get("description")
                .and_then(Value::as_str)
                .map(str::to_owned);
            Some((value, description))
        })
        .collect()
}

/// A type in words: `integer`, `array of string`, `map of string to string`, `"a"` or `"b"`.
fn kind(schema: &Value, defs: &Value) -> String {
    let words: Vec<String> = alternatives(schema, defs)
        .into_iter()
        .map(|s| {
            if let Some(values) = enum_values(s) {
                let values: Vec<String> =
                    values.into_iter().map(|(v, _)| format!("`{v}`")).collect();
                return values.join(" or ");
            }
            let types: Vec<&str> = match s.get("type") {
                Some(Value::String(t)) => vec![t.as_str()],
                Some(Value::Array(ts)) => ts
                    .iter()
                    .filter_map(Value::as_str)
                    .filter(|t| *t != "null")
                    .collect(),
                _ => vec![],
            };
            match types.as_slice() {
                ["array"] => match s.get("items") {
                    Some(items) => format!("array of {}", kind(items, defs)),
                    None => "array".to_owned(),
                },
                ["object"] if s.get("properties").is_some() => "object".to_owned(),
                ["object"] => match s.get("additionalProperties") {
                    Some(Value::Bool(true)) | None => "object".to_owned(),
                    Some(Value::Bool(false)) => "object".to_owned(),
                    Some(values) => format!("map of string to {}", kind(values, defs)),
                },
                [] => "any".to_owned(),
                types => format!("{}{}", types.join(" or "), range(s)),
            }
        })
        .collect();
    words.join(" or ")
}

/// A number's range, when the schema narrows it below what its type holds: ` (1–10)`,
/// ` (at least 1)`, ` (at most 1000)`.
fn range(schema: &Value) -> String {
    let bound = |key: &str| schema.get(key).and_then(Value::as_f64);
    let capacity = [toolsift::json::MAX_COUNT as f64, f64::from(f32::MAX)];
    let low = bound("minimum").filter(|m| *m != 0.0);
    let high = bound("maximum").filter(|m| !capacity.contains(m));
    let number = |n: f64| {
        if n.fract() == 0.0 && n.abs() < 1e15 {
            format!("{}", n as i64)
        } else {
            format!("{n}")
        }
    };
    match (low, high) {
        (None, None) => String::new(),
        (Some(low), None) => format!(" (at least {})", number(low)),
        (None, Some(high)) => format!(" (0–{})", number(high)),
        (Some(low), Some(high)) => format!(" ({}–{})", number(low), number(high)),
    }
}

/// Text for a table cell: one line, `|` escaped.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// The section (`path`, its description) of the object `schema`, then its objects' sections.
fn walk(schema: &Value, path: &str, description: &str, defs: &Value, out: &mut Vec<Section>) {
    let Some(this) = object(schema, defs) else {
        return;
    };
    let required: Vec<&str> = this
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let description = match description {
        "" => this
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default(),
        d => d,
    };
    let mut rows = Vec::new();
    let mut children = Vec::new();
    let empty = serde_json::Map::new();
    let properties = this
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    for (key, property) in properties {
        let full = match path {
            "" => key.clone(),
            path => format!("{path}.{key}"),
        };
        let own = property
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let mut text = own.to_owned();
        for alternative in alternatives(property, defs) {
            if let Some(values) = enum_values(alternative) {
                for (value, about) in values {
                    if let Some(about) = about {
                        text.push_str(&format!(" `{value}`: {about}"));
                    }
                }
            }
        }
        let child = if object_is_section(property, defs) {
            Some(full.clone())
        } else {
            item_object(property, defs).map(|_| format!("{full}[]"))
        };
        let default = match (&child, property.get("default")) {
            (Some(child), None | Some(Value::Null)) => {
                let none = if property.get("default") == Some(&Value::Null) {
                    "none; "
                } else {
                    ""
                };
                format!("{none}see [`{child}`](#{})", anchor(child))
            }
            (_, Some(Value::Null)) => "none".to_owned(),
            (_, Some(value)) => format!("`{value}`"),
            (None, None) if required.contains(&key.as_str()) => "required".to_owned(),
            (None, None) => "none".to_owned(),
        };
        rows.push(Row {
            key: key.clone(),
            kind: cell(&kind(property, defs)),
            default: cell(&default),
            description: cell(&text),
        });
        if let Some(child) = child {
            let schema = if child.ends_with("[]") {
                item_object(property, defs)
            } else {
                object(property, defs)
            };
            if let Some(schema) = schema {
                children.push((child, own.to_owned(), schema));
            }
        }
    }
    // The rules between the keys (`allOf`), each in its own words.
    let rules = this
        .get("allOf")
        .and_then(Value::as_array)
        .map(|rules| {
            rules
                .iter()
                .filter_map(|r| r.get("description")?.as_str())
                .map(cell)
                .collect()
        })
        .unwrap_or_default();
    out.push(Section {
        path: path.to_owned(),
        description: description.to_owned(),
        rows,
        rules,
    });
    for (child, description, schema) in children {
        walk(schema, &child, &description, defs, out);
    }
}

/// Whether the property is an object with keys of its own (a section of the reference).
fn object_is_section(schema: &Value, defs: &Value) -> bool {
    object(schema, defs).is_some()
}

/// The id mdBook gives a heading: its text lower-cased, letters, digits, `-` and `_` kept,
/// spaces as `-` (`search.memory` → `searchmemory`).
pub fn anchor(heading: &str) -> String {
    heading
        .chars()
        .filter_map(|c| match c {
            c if c.is_alphanumeric() || c == '_' || c == '-' => Some(c.to_ascii_lowercase()),
            c if c.is_whitespace() => Some('-'),
            _ => None,
        })
        .collect()
}
