//! The deployment kit: every manifest under deploy/ validated against the platforms' CRD
//! schemas (../shared/k8s-crds, read its README), with unknown fields as errors since the API
//! server prunes or rejects them; and the Wasm OCI image of `make oci` in the layout Istio's
//! WasmPlugin and Envoy Gateway pull (the "compat" variant: one layer holding `plugin.wasm`).
//!
//! What the schemas cannot check is not checked here: CEL rules (`x-kubernetes-validations`)
//! and references between objects.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common;

use common::repo;
use common::yaml::load_yaml;
use serde_json::{Value, json};

fn gunzip(path: &Path) -> String {
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_string(&mut text)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text
}

/// A CRD's OpenAPI v3 schema made strict: objects with declared `properties` accept no other
/// field (unless the schema says `x-kubernetes-preserve-unknown-fields`), `nullable` allows
/// null, and `metadata` must name the object.
fn strict(schema: &mut Value) {
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    let preserve = object.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true));
    if object.contains_key("properties")
        && !object.contains_key("additionalProperties")
        && !preserve
    {
        object.insert("additionalProperties".into(), json!(false));
    }
    if object.remove("nullable") == Some(json!(true)) {
        if let Some(Value::String(kind)) = object.get("type").cloned() {
            object.insert("type".into(), json!([kind, "null"]));
        }
    }
    for (key, value) in object.iter_mut() {
        match key.as_str() {
            "properties" | "patternProperties" | "definitions" => {
                if let Some(children) = value.as_object_mut() {
                    children.values_mut().for_each(strict);
                }
            }
            "enum" | "default" | "example" | "required" => {}
            _ => match value {
                Value::Array(items) => items.iter_mut().for_each(strict),
                Value::Object(_) => strict(value),
                _ => {}
            },
        }
    }
}

/// (`group/version`, kind) → the strict schema of every CRD in ../shared/k8s-crds and in
/// tests/k8s-crds (the ones ../shared lacks; see its README).
fn schemas() -> BTreeMap<(String, String), Value> {
    let mut out = BTreeMap::new();
    for dir in [
        repo().join("../shared/k8s-crds"),
        repo().join("tests/k8s-crds"),
    ] {
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (the CRD schemas come with the project's shared/ folder)",
                dir.display()
            )
        });
        for entry in entries {
            let path = entry.unwrap().path();
            if !path.to_string_lossy().ends_with(".yaml.gz") {
                continue;
            }
            for crd in load_yaml(&gunzip(&path)) {
                if crd["kind"] != "CustomResourceDefinition" {
                    continue;
                }
                add_crd(&crd, &mut out);
            }
        }
    }
    out
}

/// The strict schema of each version of `crd`.
fn add_crd(crd: &Value, out: &mut BTreeMap<(String, String), Value>) {
    let group = crd["spec"]["group"].as_str().unwrap();
    let kind = crd["spec"]["names"]["kind"].as_str().unwrap();
    for version in crd["spec"]["versions"].as_array().unwrap() {
        let mut schema = version["schema"]["openAPIV3Schema"].clone();
        strict(&mut schema);
        // Some CRDs (Istio's) leave the type fields out of their schema.
        schema["properties"]["apiVersion"] = json!({"type": "string"});
        schema["properties"]["kind"] = json!({"type": "string"});
        schema["properties"]["metadata"] = json!({
            "type": "object",
            "required": ["name"],
            "properties": {"name": {"type": "string"}}
        });
        let api_version = format!("{group}/{}", version["name"].as_str().unwrap());
        out.insert((api_version, kind.to_owned()), schema);
    }
}

/// The Kubernetes manifests under `dir`. deploy/observability/ holds none: a Grafana dashboard
/// and a Prometheus rules file, which tests/observability.rs checks against a real Envoy.
fn manifests(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.ends_with("deploy/observability") {
            continue;
        }
        if path.is_dir() {
            manifests(&path, out);
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(path);
        }
    }
}

/// Validates one object; returns its errors.
fn validate(schemas: &BTreeMap<(String, String), Value>, object: &Value) -> Vec<String> {
    let api_version = object["apiVersion"].as_str().unwrap_or_default().to_owned();
    let kind = object["kind"].as_str().unwrap_or_default().to_owned();
    let Some(schema) = schemas.get(&(api_version.clone(), kind.clone())) else {
        return vec![format!(
            "{api_version} {kind}: no CRD schema for it in ../shared/k8s-crds"
        )];
    };
    let validator = jsonschema::options()
        .with_draft(jsonschema::Draft::Draft4)
        .build(schema)
        .unwrap_or_else(|e| panic!("schema of {api_version} {kind}: {e}"));
    validator
        .iter_errors(object)
        .map(|e| format!("{kind} at {}: {e}", e.instance_path()))
        .collect()
}

#[test]
fn every_manifest_under_deploy_matches_its_crd_schema() {
    let schemas = schemas();
    let mut files = Vec::new();
    manifests(&repo().join("deploy"), &mut files);
    files.sort();
    assert!(files.len() >= 8, "manifests found: {files:?}");
    for kit in [
        "deploy/istio/access/requestauthentication.yaml",
        "deploy/envoy-gateway/access/securitypolicy.yaml",
        "deploy/istio/mcp/envoyfilter-mcp-buffer.yaml",
        "deploy/envoy-gateway/mcp/backendtrafficpolicy-mcp-buffer.yaml",
        "deploy/envoy-gateway/mcp/envoyproxy.yaml",
        "deploy/envoy-gateway/mcp/gateway.yaml",
    ] {
        assert!(files.contains(&repo().join(kit)), "{kit} not found");
    }
    let mut errors = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for object in load_yaml(&text) {
            checked += 1;
            for error in validate(&schemas, &object) {
                errors.push(format!("{}: {error}", file.display()));
            }
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
    eprintln!("{checked} objects in {} files valid", files.len());
}

/// Validates `object(part)` for each part; every one must have errors.
fn assert_each_rejected(
    schemas: &BTreeMap<(String, String), Value>,
    object: impl Fn(Value) -> Value,
    parts: impl IntoIterator<Item = Value>,
) {
    for part in parts {
        assert!(
            !validate(schemas, &object(part.clone())).is_empty(),
            "accepted {part}"
        );
    }
}

/// The check itself must catch what it is for: an unknown field, a wrong type, a missing
/// required field, a value outside an enum.
#[test]
fn the_schema_check_rejects_mistakes() {
    let schemas = schemas();
    let policy = |wasm: Value| {
        json!({
            "apiVersion": "gateway.envoyproxy.io/v1alpha1",
            "kind": "EnvoyExtensionPolicy",
            "metadata": {"name": "toolsift"},
            "spec": {
                "targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "llm"}],
                "wasm": [wasm]
            }
        })
    };
    let good = json!({"name": "toolsift", "code": {"type": "Image", "image": {"url": "r/t:1"}}});
    assert_eq!(validate(&schemas, &policy(good)), Vec::<String>::new());
    assert_each_rejected(
        &schemas,
        policy,
        [
            // Not a field of EnvoyExtensionPolicy's Wasm: the flag search mode needs.
            json!({"name": "t", "allowOnHeadersStopIteration": true, "code": {"type": "Image", "image": {"url": "r/t:1"}}}),
            json!({"name": "t", "code": {"type": "Image", "image": {"url": 5}}}),
            json!({"name": "t"}),
            json!({"name": "t", "code": {"type": "Tarball", "image": {"url": "r/t:1"}}}),
        ],
    );
    let plugin = json!({
        "apiVersion": "extensions.istio.io/v1alpha1",
        "kind": "WasmPlugin",
        "metadata": {"name": "toolsift"},
        "spec": {"url": "oci://r/t:1", "pluginConfig": {"anything": ["goes", 1]}, "phase": "STATS"}
    });
    assert_eq!(validate(&schemas, &plugin), Vec::<String>::new());
    let mut typo = plugin.clone();
    typo["spec"]["phse"] = json!("STATS");
    assert!(!validate(&schemas, &typo).is_empty());

    // The access kit's kinds (Envoy Gateway's SecurityPolicy from tests/k8s-crds).
    let security = |provider: Value| {
        json!({
            "apiVersion": "gateway.envoyproxy.io/v1alpha1",
            "kind": "SecurityPolicy",
            "metadata": {"name": "llm-callers"},
            "spec": {
                "targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "llm"}],
                "jwt": {"providers": [provider]}
            }
        })
    };
    let good = json!({"name": "p", "remoteJWKS": {"uri": "https://idp/jwks"},
                      "claimToHeaders": [{"header": "x-tenant", "claim": "tenant"}]});
    assert_eq!(validate(&schemas, &security(good)), Vec::<String>::new());
    assert_each_rejected(
        &schemas,
        security,
        [
            // Envoy Gateway has no field for the payload's metadata key: it is the name.
            json!({"name": "p", "remoteJWKS": {"uri": "https://idp/jwks"}, "payloadInMetadata": "x"}),
            json!({"name": "p", "remoteJWKS": {"uri": "https://idp/jwks"}, "claimToHeaders": [{"header": "x"}]}),
            json!({"remoteJWKS": {"uri": "https://idp/jwks"}}),
        ],
    );
    // The MCP kit's kinds (BackendTrafficPolicy and EnvoyProxy from tests/k8s-crds).
    let buffer = |request_buffer: Value| {
        json!({
            "apiVersion": "gateway.envoyproxy.io/v1alpha1",
            "kind": "BackendTrafficPolicy",
            "metadata": {"name": "mcp-buffer"},
            "spec": {
                "targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "mcp"}],
                "requestBuffer": request_buffer
            }
        })
    };
    for good in [json!({"limit": "32Mi"}), json!({"limit": 33554432})] {
        assert_eq!(validate(&schemas, &buffer(good)), Vec::<String>::new());
    }
    assert_each_rejected(
        &schemas,
        buffer,
        [
            // A quantity, not a phrase; and the limit is the only field.
            json!({"limit": "32 MiB"}),
            json!({"limit": "32Mi", "maxRequestBytes": 33554432}),
        ],
    );
    let proxy = |position: Value| {
        json!({
            "apiVersion": "gateway.envoyproxy.io/v1alpha1",
            "kind": "EnvoyProxy",
            "metadata": {"name": "toolsift"},
            "spec": {"filterOrder": [position]}
        })
    };
    let good = json!({"name": "envoy.filters.http.buffer", "after": "envoy.filters.http.wasm"});
    assert_eq!(validate(&schemas, &proxy(good)), Vec::<String>::new());
    assert_each_rejected(
        &schemas,
        proxy,
        [
            // filterOrder names filter types, not the names Envoy Gateway generates for a policy.
            json!({"name": "envoy.filters.http.buffer", "after": "envoy.filters.http.wasm/envoyextensionpolicy/llm/toolsift/0"}),
            // The router always stays last.
            json!({"name": "envoy.filters.http.buffer", "before": "envoy.filters.http.router"}),
            json!({"after": "envoy.filters.http.wasm"}),
        ],
    );

    let authn = json!({
        "apiVersion": "security.istio.io/v1",
        "kind": "RequestAuthentication",
        "metadata": {"name": "llm-callers"},
        "spec": {"jwtRules": [{"issuer": "https://idp", "fromHeaders": [{"name": "x-caller-token"}]}]}
    });
    assert_eq!(validate(&schemas, &authn), Vec::<String>::new());
    let mut typo = authn.clone();
    typo["spec"]["jwtRules"][0]["outputClaimsToHeaders"] = json!([]);
    assert!(!validate(&schemas, &typo).is_empty());
}

/// The Envoy Gateway MCP kit holds together: its Gateway is gateway.yaml's with only the
/// EnvoyProxy attached, that EnvoyProxy is the kit's and puts the buffer filter after the Wasm
/// filters, and the BackendTrafficPolicy turns the buffer on for an HTTPRoute in that Gateway's
/// namespace. (References between objects are otherwise not checked here.)
#[test]
fn the_envoy_gateway_mcp_kit_attaches_its_envoyproxy_to_the_shipped_gateway() {
    let objects = |file: &str| load_yaml(&std::fs::read_to_string(repo().join(file)).unwrap());
    let of_kind = |objects: Vec<Value>, kind: &str| {
        let mut found: Vec<Value> = objects.into_iter().filter(|o| o["kind"] == kind).collect();
        assert_eq!(found.len(), 1, "one {kind}");
        found.remove(0)
    };
    let base = of_kind(objects("deploy/envoy-gateway/gateway.yaml"), "Gateway");
    let mut kit_gateway = of_kind(objects("deploy/envoy-gateway/mcp/gateway.yaml"), "Gateway");
    let reference = kit_gateway["spec"]
        .as_object_mut()
        .unwrap()
        .remove("infrastructure")
        .expect("the kit's Gateway has spec.infrastructure");
    assert_eq!(
        kit_gateway, base,
        "mcp/gateway.yaml must be ../gateway.yaml's Gateway plus spec.infrastructure"
    );
    let proxy = of_kind(
        objects("deploy/envoy-gateway/mcp/envoyproxy.yaml"),
        "EnvoyProxy",
    );
    assert_eq!(
        reference,
        json!({"parametersRef": {
            "group": "gateway.envoyproxy.io",
            "kind": "EnvoyProxy",
            "name": proxy["metadata"]["name"]
        }})
    );
    // A Gateway's parametersRef names an EnvoyProxy in the Gateway's own namespace.
    assert_eq!(
        proxy["metadata"]["namespace"],
        base["metadata"]["namespace"]
    );
    assert_eq!(
        proxy["spec"]["filterOrder"],
        json!([{"name": "envoy.filters.http.buffer", "after": "envoy.filters.http.wasm"}])
    );
    let policy = of_kind(
        objects("deploy/envoy-gateway/mcp/backendtrafficpolicy-mcp-buffer.yaml"),
        "BackendTrafficPolicy",
    );
    assert_eq!(
        policy["metadata"]["namespace"],
        base["metadata"]["namespace"]
    );
    assert_eq!(policy["spec"]["targetRefs"][0]["kind"], "HTTPRoute");
    assert!(policy["spec"]["requestBuffer"]["limit"].is_string());
}

/// `make oci`'s archive (`docker save`): one image, one layer, and in it only `plugin.wasm`,
/// byte for byte the filter `make build` built. make builds the archive again first when the
/// `.wasm` is newer (a `cargo build` since `make oci`), as `make oci` would.
#[test]
fn the_oci_archive_holds_plugin_wasm_in_one_layer() {
    let archive = repo().join("target/oci/toolsift-wasm.tar");
    common::wasm_path();
    let made = Command::new("make")
        .args(["--no-print-directory", "target/oci/toolsift-wasm.tar"])
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "make target/oci/toolsift-wasm.tar (docker builds the image): {}{}",
        String::from_utf8_lossy(&made.stdout),
        String::from_utf8_lossy(&made.stderr)
    );
    assert!(archive.exists(), "{}", archive.display());
    let dir = repo().join(format!("target/test-scratch/oci-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let untar = |archive: &Path, into: &Path| {
        let status = Command::new("tar")
            .arg("-xf")
            .arg(archive)
            .arg("-C")
            .arg(into)
            .status()
            .unwrap();
        assert!(status.success(), "tar -xf {}", archive.display());
    };
    untar(&archive, &dir);
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    let images = manifest.as_array().unwrap();
    assert_eq!(images.len(), 1, "{manifest}");
    let layers = images[0]["Layers"].as_array().unwrap();
    assert_eq!(
        layers.len(),
        1,
        "the compat variant has exactly one layer: {manifest}"
    );
    assert!(
        images[0]["RepoTags"][0]
            .as_str()
            .is_some_and(|t| t.contains("/toolsift-wasm:")),
        "{manifest}"
    );
    let layer = dir.join(layers[0].as_str().unwrap());
    let listing = Command::new("tar").arg("-tf").arg(&layer).output().unwrap();
    let files: Vec<String> = String::from_utf8_lossy(&listing.stdout)
        .lines()
        .map(|l| l.trim_start_matches("./").to_owned())
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(
        files,
        ["plugin.wasm"],
        "the layer must hold plugin.wasm alone"
    );
    let layer_dir = dir.join("layer");
    std::fs::create_dir_all(&layer_dir).unwrap();
    untar(&layer, &layer_dir);
    let plugin = std::fs::read(layer_dir.join("plugin.wasm")).unwrap();
    assert!(
        plugin.starts_with(b"\0asm"),
        "plugin.wasm is not a Wasm module"
    );
    let built = std::fs::read(repo().join("target/wasm32-wasip1/release/toolsift.wasm")).unwrap();
    assert!(
        plugin == built,
        "plugin.wasm differs from the filter make built: run `make oci` again"
    );
    // The image config: a plain image, no command (the runtime only reads the layer).
    let config: Value = serde_json::from_slice(
        &std::fs::read(dir.join(images[0]["Config"].as_str().unwrap())).unwrap(),
    )
    .unwrap();
    assert_eq!(config["rootfs"]["diff_ids"].as_array().unwrap().len(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The tag that makes a plugin's `stat_prefix` a Prometheus label (`toolsift_plugin`), as
/// envoy.yaml sets it.
fn plugin_tag() -> Value {
    let envoy = &common::yaml::load_file("envoy.yaml")[0];
    let tags = envoy["stats_config"]["stats_tags"].as_array().unwrap();
    let tag = tags
        .iter()
        .find(|t| t["tag_name"] == "toolsift_plugin")
        .expect("envoy.yaml tags toolsift_plugin")
        .clone();
    assert_eq!(tag["regex"], r"^wasmcustom\.((\w+)\.)toolsift\.");
    tag
}

/// Every shipped Envoy configuration, and every proxy the manifests set up, carries the same
/// `toolsift_plugin` tag; and every plugin the manifests load names its stats with a
/// `stat_prefix`, each its own within a kit.
#[test]
fn every_shipped_envoy_and_manifest_tags_toolsift_stats_by_plugin() {
    let tag = plugin_tag();
    let has_tag = |stats_config: &Value| {
        stats_config["stats_tags"]
            .as_array()
            .is_some_and(|tags| tags.contains(&tag))
    };
    let mut envoys = vec![
        "envoy.yaml".to_owned(),
        "envoy-hybrid.yaml".to_owned(),
        "envoy-search.yaml".to_owned(),
        "envoy-mcp.yaml".to_owned(),
        "e2e/envoy.yaml".to_owned(),
    ];
    for entry in std::fs::read_dir(repo().join("docs/examples")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.starts_with("envoy") && name.ends_with(".yaml") {
            envoys.push(format!("docs/examples/{name}"));
        }
    }
    assert!(envoys.len() >= 10, "{envoys:?}");
    for file in &envoys {
        let config = &common::yaml::load_file(file)[0];
        assert!(has_tag(&config["stats_config"]), "{file} lacks the tag");
    }
    // Envoy Gateway: the EnvoyProxies merge it into the bootstrap.
    for file in [
        "deploy/envoy-gateway/envoyproxy.yaml",
        "deploy/envoy-gateway/mcp/envoyproxy.yaml",
    ] {
        let proxy = &common::yaml::load_file(file)[0];
        assert_eq!(proxy["spec"]["bootstrap"]["type"], "Merge", "{file}");
        let bootstrap = load_yaml(proxy["spec"]["bootstrap"]["value"].as_str().unwrap());
        assert!(has_tag(&bootstrap[0]["stats_config"]), "{file}");
    }
    // Istio: a BOOTSTRAP patch on the gateway the WasmPlugins select.
    let filter = &common::yaml::load_file("deploy/istio/envoyfilter-stats-tags.yaml")[0];
    let patch = &filter["spec"]["configPatches"][0];
    assert_eq!(patch["applyTo"], "BOOTSTRAP");
    assert_eq!(patch["patch"]["operation"], "MERGE");
    assert!(has_tag(&patch["patch"]["value"]["stats_config"]));
    let plugin = &common::yaml::load_file("deploy/istio/wasmplugin.yaml")[0];
    assert_eq!(
        filter["spec"]["workloadSelector"]["labels"],
        plugin["spec"]["selector"]["matchLabels"]
    );
    // Each plugin of a kit has a prefix of its own.
    let prefixes = |files: &[&str]| -> Vec<String> {
        files
            .iter()
            .map(|file| {
                let objects = common::yaml::load_file(file);
                let kinds = ["WasmPlugin", "EnvoyExtensionPolicy"];
                let object = objects
                    .iter()
                    .find(|o| kinds.iter().any(|k| o["kind"] == *k))
                    .unwrap_or_else(|| panic!("{file}: no plugin"));
                let config = match object["kind"].as_str() {
                    Some("WasmPlugin") => object["spec"]["pluginConfig"].clone(),
                    _ => object["spec"]["wasm"][0]["config"].clone(),
                };
                let prefix = config["stat_prefix"].as_str();
                prefix
                    .unwrap_or_else(|| panic!("{file}: no stat_prefix"))
                    .to_owned()
            })
            .collect()
    };
    for kit in [
        &[
            "deploy/istio/wasmplugin.yaml",
            "deploy/istio/search-mode/wasmplugin-search.yaml",
            "deploy/istio/access/wasmplugin-access.yaml",
        ][..],
        &[
            "deploy/envoy-gateway/envoyextensionpolicy.yaml",
            "deploy/envoy-gateway/envoyextensionpolicy-search.yaml",
            "deploy/envoy-gateway/access/envoyextensionpolicy-access.yaml",
            "deploy/envoy-gateway/ai-gateway/aigatewayroute.yaml",
        ][..],
    ] {
        let mut names = prefixes(kit);
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), n, "{kit:?}: {names:?}");
    }
}

/// RFC 7386's merge patch (what `kubectl patch --type merge` applies).
fn merge_patch(target: &mut Value, patch: &Value) {
    match (target.as_object_mut(), patch.as_object()) {
        (Some(target), Some(patch)) => {
            for (key, value) in patch {
                if value.is_null() {
                    target.remove(key);
                } else {
                    merge_patch(target.entry(key.clone()).or_insert(Value::Null), value);
                }
            }
        }
        _ => *target = patch.clone(),
    }
}

/// deploy/fleet/calibrate.sh over replicas' access logs, `--dry-run`: its patches, applied as
/// `kubectl patch` would to the shipped fleet manifests, give objects the CRDs accept, whose
/// plugin configuration toolsift's parser reads, with the replicas' calls as its calibration.
#[test]
fn the_fleet_script_patches_in_a_calibration_the_crds_and_the_plugin_accept() {
    let record = |catalog: &str, ranks: &str| {
        json!({"start_time": "2026-11-29T10:00:00.000Z", "toolsift": format!(
            "kept=80 total=80 denied=0 shadow=would_keep:5 calls={ranks} missed=0 top_k=5 \
             tools=80 catalog={catalog}")})
        .to_string()
    };
    let log = common::scratch_file(
        "fleet-script",
        "replicas.log",
        &[
            record("0000000a", "a@1,b@3"),
            record("0000000b", "c@70"),
            "not a record".to_owned(),
        ]
        .join("\n"),
    );
    let script = repo().join("deploy/fleet/calibrate.sh");
    let run = |args: &[&str]| {
        Command::new(&script)
            .args(args)
            .env("TOOLSIFT", env!("CARGO_BIN_EXE_toolsift"))
            .output()
            .unwrap()
    };
    let schemas = schemas();
    let log = log.to_str().unwrap();
    for (kind, manifest, config_at) in [
        (
            "istio",
            "deploy/istio/fleet/wasmplugin-auto-k.yaml",
            "/spec/pluginConfig",
        ),
        (
            "envoy-gateway",
            "deploy/envoy-gateway/fleet/envoyextensionpolicy-auto-k.yaml",
            "/spec/wasm/0/config",
        ),
    ] {
        let out = run(&["--max-k", "64", "--dry-run", kind, "ns", "toolsift", log]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let patch: Value = serde_json::from_slice(&out.stdout).unwrap();
        let mut object = common::yaml::load_file(manifest).remove(0);
        if kind == "istio" {
            merge_patch(&mut object, &patch);
        } else {
            assert_eq!(patch[0]["op"], "add");
            let path = patch[0]["path"].as_str().unwrap();
            let (parent, key) = path.rsplit_once('/').unwrap();
            let parent = object
                .pointer_mut(parent)
                .expect("the patch's parent exists");
            parent[key] = patch[0]["value"].clone();
        }
        let errors = validate(&schemas, &object);
        assert!(errors.is_empty(), "{manifest} patched: {errors:?}");
        let config = object.pointer(config_at).unwrap();
        let parsed = toolsift::config::Config::from_json(config.to_string().as_bytes())
            .unwrap_or_else(|e| panic!("{manifest} patched: {}", e.0));
        let calibration = parsed.auto_k.unwrap().calibration.unwrap();
        assert_eq!(calibration.pooled.calls, 3, "{manifest}");
        assert_eq!(calibration.catalogs.len(), 2);
        // The rest of the plugin's configuration is untouched.
        assert_eq!(config["auto_k"]["keep"], 0.95);
    }
    // A calibration for another max_k than the manifests' is refused by the plugin.
    let out = run(&["--max-k", "32", "--dry-run", "istio", "ns", "toolsift", log]);
    let patch: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut object = common::yaml::load_file("deploy/istio/fleet/wasmplugin-auto-k.yaml").remove(0);
    merge_patch(&mut object, &patch);
    let error =
        toolsift::config::Config::from_json(object["spec"]["pluginConfig"].to_string().as_bytes())
            .unwrap_err()
            .0;
    assert!(error.contains("auto_k.calibration.max_k"), "{error}");
    // Logs with nothing to calibrate from, and bad arguments: an error, no patch.
    let empty = common::scratch_file(
        "fleet-script",
        "empty.log",
        "{\"toolsift\": \"kept=1 total=1\"}\n",
    );
    let out = run(&[
        "--dry-run",
        "istio",
        "ns",
        "toolsift",
        empty.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing to calibrate from"));
    let out = run(&["--dry-run", "kubernetes", "ns", "toolsift", log]);
    assert_eq!(out.status.code(), Some(2));
}
