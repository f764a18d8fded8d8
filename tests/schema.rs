//! The configuration's one schema: derived from the configuration types, shipped as
//! `docs/config.schema.json`, drawn into the book's configuration reference, and every shipped
//! plugin configuration held to it. Each test fails when the shipped copy, the reference page or
//! a shipped configuration disagrees with the code; `toolsift check` names the field of each
//! violation.

use serde_json::Value;
use std::path::{Path, PathBuf};

use crate::common;

use common::{line_of, repo, toolsift, with_plugin_config};

/// `file` (in the repository) must read exactly what `toolsift ARGS` prints.
fn shipped_as_printed(file: &str, args: &[&str]) {
    let (code, printed) = toolsift(args);
    assert_eq!(code, 0, "{printed}");
    let shipped = std::fs::read_to_string(repo().join(file)).unwrap_or_default();
    if shipped != printed {
        let line = shipped
            .lines()
            .zip(printed.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| shipped.lines().count().min(printed.lines().count()));
        panic!(
            "{file} differs from `toolsift {}` from line {} on (shipped {:?}, printed {:?}): \
             run `cargo run --bin toolsift -- {} > {file}`",
            args.join(" "),
            line + 1,
            shipped.lines().nth(line),
            printed.lines().nth(line),
            args.join(" "),
        );
    }
}

#[test]
fn the_shipped_schema_is_the_codes() {
    shipped_as_printed("docs/config.schema.json", &["schema"]);
}

#[test]
fn the_reference_page_is_drawn_from_the_schema() {
    shipped_as_printed(
        "docs/book/src/reference/configuration.md",
        &["schema", "--markdown"],
    );
}

/// Every object schema in `schema` (the root's, each `$defs` entry's, and those inline),
/// with where it is.
fn objects<'a>(schema: &'a Value, at: String, out: &mut Vec<(String, &'a Value)>) {
    match schema {
        Value::Object(map) => {
            if map.contains_key("properties") {
                out.push((at.clone(), schema));
            }
            for (key, value) in map {
                // Rules between fields (`allOf`) name fields described where they stand.
                if key != "allOf" {
                    objects(value, format!("{at}/{key}"), out);
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                objects(item, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn every_field_has_a_description() {
    let (code, text) = toolsift(&["schema"]);
    assert_eq!(code, 0, "{text}");
    let schema: Value = serde_json::from_str(&text).unwrap();
    let mut found = Vec::new();
    objects(&schema, "#".into(), &mut found);
    // The root, its sections and theirs: far more than a handful.
    assert!(found.len() >= 20, "{} objects", found.len());
    let mut fields = 0;
    let mut missing = Vec::new();
    for (at, object) in found {
        for (key, field) in object["properties"].as_object().unwrap() {
            fields += 1;
            let described = field["description"]
                .as_str()
                .is_some_and(|d| d.trim().len() > 10);
            if !described {
                missing.push(format!("{at}/properties/{key}"));
            }
        }
    }
    assert!(fields >= 100, "{fields} fields");
    assert!(
        missing.is_empty(),
        "fields without a description (a `///` doc comment on the field): {missing:#?}"
    );
    assert!(schema["description"].as_str().is_some());
    // The rules between fields say what they hold, too (`toolsift check` quotes them).
    let text = serde_json::to_string(&schema).unwrap();
    let rules = text.matches("\"allOf\"").count();
    assert!(rules >= 10, "{rules} sections with rules");
    let mut undescribed = Vec::new();
    rules_without_description(&schema, "#", &mut undescribed);
    assert!(
        undescribed.is_empty(),
        "rules without a description: {undescribed:#?}"
    );
}

/// The rules (items of a section's `allOf`) in `schema` that have no description.
fn rules_without_description(schema: &Value, at: &str, out: &mut Vec<String>) {
    match schema {
        Value::Object(map) => {
            for (key, value) in map {
                let here = format!("{at}/{key}");
                if key == "allOf" && !at.contains("/allOf/") {
                    for (i, rule) in value.as_array().into_iter().flatten().enumerate() {
                        if rule["description"].as_str().is_none_or(|d| d.len() < 10) {
                            out.push(format!("{here}/{i}"));
                        }
                    }
                } else {
                    rules_without_description(value, &here, out);
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                rules_without_description(item, &format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

/// Every file of the repository matching `dir/*.yaml` (`deep`: below `dir` too).
fn yaml_files(dir: &Path, deep: bool, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() && deep {
            yaml_files(&path, deep, out);
        } else if path.extension().is_some_and(|e| e == "yaml") {
            out.push(path);
        }
    }
}

/// The shipped configurations that hold a toolsift plugin configuration: `envoy*.yaml`,
/// `docs/examples/*.yaml`, `e2e/envoy.yaml`, and every manifest under `deploy/` that loads
/// the plugin (an Istio `WasmPlugin`, an Envoy Gateway `EnvoyExtensionPolicy`, an Istio
/// `EnvoyFilter` with the Wasm filter).
fn shipped_configurations() -> Vec<PathBuf> {
    let mut all = Vec::new();
    yaml_files(&repo(), false, &mut all);
    all.retain(|p| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("envoy"))
    });
    yaml_files(&repo().join("docs/examples"), false, &mut all);
    all.push(repo().join("e2e/envoy.yaml"));
    let mut deploy = Vec::new();
    yaml_files(&repo().join("deploy"), true, &mut deploy);
    all.extend(deploy.into_iter().filter(|p| {
        let text = std::fs::read_to_string(p).unwrap();
        text.contains("toolsift")
            && (text.contains("kind: WasmPlugin")
                || text.contains("kind: EnvoyExtensionPolicy")
                || text.contains("envoy.extensions.filters.http.wasm.v3.Wasm"))
    }));
    all
}

#[test]
fn every_shipped_configuration_fits_the_schema() {
    let files = shipped_configurations();
    let names: Vec<String> = files
        .iter()
        .map(|p| {
            p.strip_prefix(repo())
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    // The Kubernetes manifests are among them, as are the Envoy files.
    for expected in [
        "envoy.yaml",
        "docs/examples/envoy-access.yaml",
        "e2e/envoy.yaml",
        "deploy/istio/wasmplugin.yaml",
        "deploy/istio/access/wasmplugin-access.yaml",
        "deploy/envoy-gateway/envoyextensionpolicy-search.yaml",
        "deploy/envoy-gateway/ai-gateway/aigatewayroute.yaml",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} in {names:?}"
        );
    }
    let mut args = vec!["check", "--allow-warnings"];
    args.extend(names.iter().map(String::as_str));
    let (code, out) = toolsift(&args);
    assert_eq!(code, 0, "{out}");
    for name in &names {
        assert!(
            out.lines()
                .any(|l| l.starts_with(&format!("{name}: clean (")) && !l.contains("(0 ")),
            "{name} not clean:\n{out}"
        );
    }
}

/// A scratch file of this test process.
fn scratch(name: &str, text: &str) -> PathBuf {
    common::scratch_file("schema", name, text)
}

#[test]
fn check_names_every_field_that_breaks_the_schema() {
    // Three mistakes in one Envoy configuration: the filter's parser would stop at the first.
    let envoy = std::fs::read_to_string(repo().join("envoy.yaml")).unwrap();
    let bad = r#"{"top_k": "five", "search": {"max_search_rounds": 2.5}, "topk": 3, "access": {"rules": [{"when": ["a"], "alow": ["x"]}]}}"#;
    let edited = with_plugin_config(&envoy, bad);
    let path = scratch("envoy-bad.yaml", &edited);
    let (code, out) = toolsift(&["check", path.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    let line = line_of(&edited, "value: |");
    // The parser's first, then what the schema finds besides.
    assert!(
        out.contains(&format!(
            ":{line}: error: Envoy would not load this filter: invalid toolsift configuration: field `top_k`: invalid type"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            ":{line}: error: the plugin configuration breaks its schema: field `search.max_search_rounds`: 2.5 is not of type \"integer\""
        )),
        "{out}"
    );
    assert!(!out.contains("schema: field `top_k`"), "{out}");
    for unknown in ["topk", "access.rules[0].alow"] {
        assert!(
            out.contains(&format!(
                "breaks its schema: field `{unknown}`: unknown field"
            )),
            "{unknown} in {out}"
        );
    }
    // The rule the misspelt key breaks, in the rule's words.
    assert!(
        out.contains(
            "breaks its schema: field `access.rules[0]`: A rule needs `allow`, `deny`, \
             `deny_annotations` or `arguments`."
        ),
        "{out}"
    );
    assert!(out.contains("5 errors"), "{out}");

    // A manifest: each violation on the line of its field.
    let manifest = "apiVersion: extensions.istio.io/v1alpha1\nkind: WasmPlugin\nmetadata:\n  name: toolsift\nspec:\n  url: oci://example/toolsift:1\n  pluginConfig:\n    top_k: 5\n    mode: find\n    search:\n      native_search:\n      - model: claude-*\n        tool: yes please\n";
    let path = scratch("wasmplugin-bad.yaml", manifest);
    let (code, out) = toolsift(&["check", path.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    let mode = line_of(manifest, "mode: find");
    let tool = line_of(manifest, "tool: yes please");
    assert!(
        out.contains(&format!(
            ":{mode}: error: Envoy would not load this filter: invalid toolsift configuration: field `mode`: unknown variant"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            ":{tool}: error: the plugin configuration breaks its schema: field `search.native_search[0].tool`: "
        )),
        "{out}"
    );

    // A range: the parser's error, and the schema's at the same field, said once.
    let manifest = manifest
        .replace("mode: find", "mode: search")
        .replace("        tool: yes please\n", "")
        .replace("top_k: 5", "top_k: 0");
    let path = scratch("wasmplugin-range.yaml", &manifest);
    let (code, out) = toolsift(&["check", path.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    let top_k = line_of(&manifest, "top_k: 0");
    assert!(
        out.contains(&format!(":{top_k}: error: Envoy would not load this filter: invalid toolsift configuration: field `top_k`: must be at least 1")),
        "{out}"
    );
    assert!(!out.contains("breaks its schema"), "{out}");

    // What the schema cannot say (one count at least another) is the parser's alone.
    let manifest = manifest.replace("top_k: 0", "loop_guard: {repeats: 5, window: 3}");
    let path = scratch("wasmplugin-window.yaml", &manifest);
    let (code, out) = toolsift(&["check", path.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("Envoy would not load this filter: invalid toolsift configuration: field `loop_guard.window`: must be from `repeats` (5) to 1000"),
        "{out}"
    );
    assert!(!out.contains("breaks its schema"), "{out}");
}
