//! `toolsift check`: each rule fires on a config that breaks it, naming the line, and stays
//! quiet on the shipped configs; exit codes 0 (clean), 1 (findings), 2 (unreadable).

use std::path::{Path, PathBuf};

use crate::common;

use common::{repo, with_plugin_config};

/// Runs `toolsift check ARGS`; returns the exit code and stdout + stderr.
fn check(args: &[&str]) -> (i32, String) {
    let mut all = vec!["check"];
    all.extend(args);
    common::toolsift(&all)
}

/// envoy.yaml with `edit` applied, written to a scratch file.
fn variant(name: &str, edit: impl FnOnce(String) -> String) -> PathBuf {
    variant_of("envoy.yaml", name, edit)
}

/// A shipped config with `edit` applied, written to a scratch file.
fn variant_of(file: &str, name: &str, edit: impl FnOnce(String) -> String) -> PathBuf {
    let original = std::fs::read_to_string(repo().join(file)).unwrap();
    let edited = edit(original.clone());
    assert_ne!(edited, original, "{name}: the edit changed nothing");
    common::scratch_file("check", &format!("{name}.yaml"), &edited)
}

/// The 1-based line of the first line containing `needle` in `path`.
fn line_of(path: &Path, needle: &str) -> usize {
    common::line_of(&std::fs::read_to_string(path).unwrap(), needle)
}

#[test]
fn shipped_configs_are_clean() {
    for file in [
        "envoy.yaml",
        "envoy-hybrid.yaml",
        "envoy-search.yaml",
        "envoy-mcp.yaml",
        "docs/examples/envoy-openai.yaml",
        "docs/examples/envoy-anthropic.yaml",
        "docs/examples/envoy-access.yaml",
        "e2e/envoy.yaml",
        "deploy/istio/search-mode/envoyfilter-wasm.yaml",
    ] {
        let (code, out) = check(&[file]);
        assert_eq!(code, 0, "{out}");
        assert!(out.contains(&format!("{file}: clean")), "{out}");
    }
}

#[test]
fn access_rules_that_pass_unknown_paths_are_a_warning() {
    let file = "docs/examples/envoy-access.yaml";
    let path = variant_of(file, "access-unknown-paths", |y| {
        y.replace(
            "\"denied\": \"hidden\",\n                        \"unknown_paths\": \"deny\"",
            "\"denied\": \"hidden\"",
        )
    });
    let (code, out) = check(&[path.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    let line = line_of(&path, "value: |");
    assert!(
        out.contains(&format!(
            ":{line}: warning: access rules without `\"unknown_paths\": \"deny\"`"
        )),
        "{out}"
    );
    // In audit mode nothing is denied anyway: no warning.
    let audit = variant_of(file, "access-audit-unknown-paths", |y| {
        y.replace(
            "\"denied\": \"hidden\",\n                        \"unknown_paths\": \"deny\"",
            "\"denied\": \"hidden\", \"mode\": \"audit\"",
        )
    });
    let (code, out) = check(&[audit.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn holding_headers_without_the_header_flag_is_a_warning() {
    // Search mode itself needs no flag.
    let plain = variant("search-no-flag", |y| {
        with_plugin_config(
            &y.replace("allow_on_headers_stop_iteration: true", ""),
            r#"{"mode": "search", "search": {"timeout_ms": 60000}}"#,
        )
    });
    let (code, out) = check(&[plain.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    let path = variant("hold-no-flag", |y| {
        with_plugin_config(
            &y.replace("allow_on_headers_stop_iteration: true", ""),
            r#"{"mode": "search", "search": {"timeout_ms": 60000, "hold_headers": true}}"#,
        )
    });
    let (code, out) = check(&[path.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    let line = line_of(&path, "              config:"); // the Wasm filter's config
    assert!(
        out.contains(&format!(
            ":{line}: warning: search.hold_headers without `allow_on_headers_stop_iteration: true`"
        )),
        "{out}"
    );
    let (code, out) = check(&["--allow-warnings", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn buffer_limits_below_max_body_bytes_are_errors() {
    // No limit on the listener: Envoy's 1 MiB default, below the 16 MiB default max_body_bytes.
    let path = variant("no-buffer-limit", |y| {
        y.replacen("    per_connection_buffer_limit_bytes: 33554432\n", "", 1)
    });
    let (code, out) = check(&[path.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    let line = line_of(&path, "- name: llm_ingress");
    assert!(
        out.contains(&format!(":{line}: error: the listener's (Envoy's default")),
        "{out}"
    );
    assert!(
        out.contains("1 MiB is below max_body_bytes 16 MiB"),
        "{out}"
    );

    // An explicit limit, and a max_body_bytes above it.
    let path = variant("small-buffer-limit", |y| {
        with_plugin_config(&y, r#"{"max_body_bytes": 67108864}"#)
    });
    let (code, out) = check(&[path.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    let line = line_of(&path, "per_connection_buffer_limit_bytes");
    assert!(
        out.contains(&format!(
            ":{line}: error: the listener's buffer limit 32 MiB is below max_body_bytes 64 MiB"
        )),
        "{out}"
    );

    // A virtual host's own limit counts instead of the listener's.
    let path = variant("vhost-limit", |y| {
        y.replacen("    per_connection_buffer_limit_bytes: 33554432\n", "", 1)
            .replace(
                "              domains: [\"*\"]\n",
                "              domains: [\"*\"]\n              request_body_buffer_limit: 33554432\n",
            )
    });
    let (code, out) = check(&[path.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn the_gating_and_suggestion_servers_need_their_clusters() {
    let path = variant("servers-no-cluster", |y| {
        with_plugin_config(
            &y,
            r#"{"gating": {"mcp": {"cluster": "gater"}}, "suggestions": {"mcp": {"cluster": "market"}}}"#,
        )
    });
    let (code, out) = check(&[path.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    let line = line_of(&path, "configuration:");
    for expected in [
        format!(":{line}: error: gating.mcp: the cluster `gater` is not defined"),
        format!(":{line}: error: suggestions.mcp: the cluster `market` is not defined"),
    ] {
        assert!(out.contains(&expected), "{expected} in {out}");
    }
    // A cluster the bootstrap defines is fine.
    let path = variant("servers-cluster", |y| {
        with_plugin_config(&y, r#"{"suggestions": {"mcp": {"cluster": "llm"}}}"#)
    });
    assert_eq!(check(&[path.to_str().unwrap()]).0, 0);
}

#[test]
fn hybrid_ranking_needs_its_cluster() {
    let path = variant("hybrid-no-cluster", |y| {
        with_plugin_config(
            &y,
            r#"{"ranking": "hybrid", "embeddings": {"cluster": "embedder", "model": "m"}}"#,
        )
    });
    let (code, out) = check(&[path.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    let line = line_of(&path, "configuration:");
    assert!(
        out.contains(&format!(
            ":{line}: error: hybrid ranking: the embeddings cluster `embedder` is not defined"
        )),
        "{out}"
    );
    // The shipped cluster name is fine.
    let path = variant("hybrid-cluster", |y| {
        with_plugin_config(
            &y,
            r#"{"ranking": "hybrid", "embeddings": {"cluster": "embeddings", "model": "m"}}"#,
        )
    });
    assert_eq!(check(&[path.to_str().unwrap()]).0, 0);
}

#[test]
fn a_stream_idle_timeout_shorter_than_the_follow_ups_is_a_warning() {
    // Envoy's default (300 s) against 6 follow-ups of 60 s.
    let path = variant("search-idle-default", |y| {
        with_plugin_config(
            &y,
            r#"{"mode": "search", "search": {"timeout_ms": 60000, "max_search_rounds": 6}}"#,
        )
    });
    let (code, out) = check(&[path.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    let line = line_of(&path, "        typed_config:"); // the connection manager
    assert!(
        out.contains(&format!(":{line}: warning: search mode: the stream idle timeout 300s (Envoy's default) is shorter than the search follow-ups may need (search.timeout_ms 60000 × max_search_rounds 6 = 360s)")),
        "{out}"
    );
    // Filter mode's follow-ups for made-up calls count as well.
    let path = variant("answer-idle-default", |y| {
        with_plugin_config(
            &y,
            r#"{"unknown_tools": {"answer": true, "max_rounds": 3}, "search": {"timeout_ms": 120000}}"#,
        )
    });
    let (code, out) = check(&[path.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!(":{line}: warning: unknown_tools.answer: the stream idle timeout 300s (Envoy's default) is shorter than the follow-ups for made-up calls may need (search.timeout_ms 120000 × unknown_tools.max_rounds 3 = 360s)")),
        "{out}"
    );
    // The connection manager's own, and a route's, which replaces it.
    let hcm_idle = |y: String, idle: &str| {
        y.replace(
            "          stat_prefix: llm_ingress\n",
            &format!("          stat_prefix: llm_ingress\n          stream_idle_timeout: {idle}\n"),
        )
    };
    let path = variant("search-idle-hcm", |y| {
        with_plugin_config(&hcm_idle(y, "60s"), r#"{"mode": "search"}"#)
    });
    let (_, out) = check(&[path.to_str().unwrap()]);
    let line = line_of(&path, "stream_idle_timeout: 60s");
    assert!(
        out.contains(&format!(
            ":{line}: warning: search mode: the stream idle timeout 60s is shorter"
        )),
        "{out}"
    );
    let path = variant("search-idle-route", |y| {
        with_plugin_config(
            &hcm_idle(y, "60s").replace(
                "                  timeout: 300s\n",
                "                  timeout: 300s\n                  idle_timeout: 400s\n",
            ),
            r#"{"mode": "search"}"#,
        )
    });
    assert_eq!(check(&[path.to_str().unwrap()]).0, 0);
    // 0s disables it; the route `timeout` bounds only the first answer and is not compared.
    let path = variant("search-idle-off", |y| {
        with_plugin_config(
            &hcm_idle(y.replace("timeout: 300s", "timeout: 10s"), "0s"),
            r#"{"mode": "search"}"#,
        )
    });
    assert_eq!(check(&[path.to_str().unwrap()]).0, 0);
}

#[test]
fn a_decompressor_after_toolsift_is_an_error() {
    let decompressor = "          - name: envoy.filters.http.decompressor\n            typed_config:\n              \"@type\": type.googleapis.com/envoy.extensions.filters.http.decompressor.v3.Decompressor\n              decompressor_library:\n                name: gzip\n                typed_config:\n                  \"@type\": type.googleapis.com/envoy.extensions.compression.gzip.decompressor.v3.Gzip\n";
    let router = "          - name: envoy.filters.http.router\n";
    let path = variant("decompressor-after", |y| {
        y.replace(router, &format!("{decompressor}{router}"))
    });
    let (code, out) = check(&[path.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    let line = line_of(&path, "- name: envoy.filters.http.decompressor");
    assert!(
        out.contains(&format!(":{line}: error: the decompressor `envoy.filters.http.decompressor` comes after toolsift")),
        "{out}"
    );
    // Before toolsift it is where it belongs.
    let path = variant("decompressor-before", |y| {
        y.replace(
            "          - name: toolsift\n",
            &format!("{decompressor}          - name: toolsift\n"),
        )
    });
    assert_eq!(check(&[path.to_str().unwrap()]).0, 0);
}

#[test]
fn mcp_without_the_buffer_filter_on_its_routes_is_a_warning() {
    let buffer = "          - name: envoy.filters.http.buffer\n            disabled: true\n            typed_config:\n              \"@type\": type.googleapis.com/envoy.extensions.filters.http.buffer.v3.Buffer\n              max_request_bytes: 33554432\n";
    let toolsift = "          - name: toolsift\n";
    let warns = |path: &Path, line: usize, message: &str| {
        let (code, out) = check(&[path.to_str().unwrap()]);
        assert_eq!(code, 1, "{out}");
        assert!(
            out.contains(&format!(":{line}: warning: {message}")),
            "{out}"
        );
        // A warning, not an error.
        let (code, out) = check(&["--allow-warnings", path.to_str().unwrap()]);
        assert_eq!(code, 0, "{out}");
    };
    // No buffer filter at all: the warning names toolsift's filter.
    let none = variant_of("envoy-mcp.yaml", "mcp-no-buffer", |y| y.replace(buffer, ""));
    let missing = "`mcp` is set but no buffer filter (envoy.filters.http.buffer) follows toolsift";
    // The line of toolsift's `typed_config`, the one after its name.
    warns(&none, line_of(&none, "- name: toolsift") + 1, missing);
    // Before toolsift, it holds nothing toolsift answers from: the same.
    let before = variant_of("envoy-mcp.yaml", "mcp-buffer-before", |y| {
        y.replace(buffer, "")
            .replace(toolsift, &format!("{buffer}{toolsift}"))
    });
    let (code, out) = check(&[before.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains(missing), "{out}");
    // Off, and no route turns it on.
    let per_route =
        "                typed_per_filter_config:\n                  envoy.filters.http.buffer:\n";
    let off = variant_of("envoy-mcp.yaml", "mcp-buffer-off", |y| {
        y.replace(per_route, "                typed_per_filter_config:\n                  envoy.filters.http.other:\n")
    });
    warns(
        &off,
        line_of(&off, "- name: envoy.filters.http.buffer"),
        "the buffer filter `envoy.filters.http.buffer` after toolsift is disabled and no route turns it on",
    );
}

#[test]
fn a_configuration_the_filter_refuses_is_an_error_naming_the_field() {
    let path = variant("bad-config", |y| {
        with_plugin_config(&y, r#"{"top_k": "five"}"#)
    });
    let (code, out) = check(&[path.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    let line = line_of(&path, "value: |");
    assert!(
        out.contains(&format!(":{line}: error: Envoy would not load this filter: invalid toolsift configuration: field `top_k`")),
        "{out}"
    );
    let path = variant("bad-unknown-tools", |y| {
        with_plugin_config(
            &y,
            r#"{"unknown_tools": {"answer": true, "max_rounds": 11}}"#,
        )
    });
    let (code, out) = check(&[path.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("field `unknown_tools.max_rounds`: must be 1..=10"),
        "{out}"
    );
}

#[test]
fn unreadable_files_exit_2() {
    let (code, out) = check(&["no/such/envoy.yaml"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("cannot check"), "{out}");
    let dir = repo().join(format!("target/test-scratch/check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.yaml");
    std::fs::write(&bad, "static_resources: [unclosed\n").unwrap();
    let (code, out) = check(&[bad.to_str().unwrap()]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("not YAML"), "{out}");
}
