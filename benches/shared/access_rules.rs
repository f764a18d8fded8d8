//! The access rules the benchmarks measure: 50 rules in the shapes the README documents,
//! shared by the Envoy benchmark (`envoy_latency --access`) and the native one (`micro`).

/// How many rules [`rules`] writes.
pub const RULES: usize = 50;

/// 50 rules in the shapes the README documents: per-group allows by prefix and word,
/// denies for everyone, annotation denies and argument restrictions. Groups g0..g39 each
/// allow what some of the catalog's tool names start with; everything else is denied by
/// default.
pub fn rules(tools: &[String]) -> String {
    let mut prefixes: Vec<String> = tools
        .iter()
        .filter_map(|t| {
            let v: serde_json::Value = serde_json::from_str(t).ok()?;
            let name = v["function"]["name"].as_str()?.to_owned();
            let cut = name.find(['_', '-']).unwrap_or(name.len().min(4));
            Some(name[..cut].to_owned())
        })
        .collect();
    prefixes.sort();
    prefixes.dedup();
    let mut rules = Vec::new();
    for g in 0..40 {
        let a = &prefixes[(g * 7) % prefixes.len()];
        let b = &prefixes[(g * 13 + 3) % prefixes.len()];
        rules.push(serde_json::json!({"when": [format!("g{g}")], "allow": [format!("{a}*"), format!("*{b}*")]}));
    }
    for deny in ["*delete*", "*drop*", "*remove*", "*destroy*", "*purge*"] {
        rules.push(serde_json::json!({"when": ["*"], "deny": [deny, format!("admin_{deny}")]}));
    }
    for hint in [
        "destructiveHint",
        "openWorldHint: true",
        "readOnlyHint: false",
    ] {
        rules.push(serde_json::json!({"when": ["g4*"], "deny_annotations": [hint]}));
    }
    rules.push(serde_json::json!({"when": ["finance"], "allow": ["invoice_*"], "arguments": {"invoice_*": {"currency": ["EUR", "USD"]}}}));
    rules.push(
        serde_json::json!({"when": ["g1?"], "arguments": {"*transfer*": {"amount": ["1*", "2*"]}}}),
    );
    assert_eq!(rules.len(), RULES);
    serde_json::json!({"access": {
        "identity": [{"header": "x-group"}],
        "default": "deny",
        "rules": rules,
    }})
    .to_string()
}
