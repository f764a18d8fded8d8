//! `_tool_gating` for LLM requests (`gating.mcp`): the latest user text goes to an MCP server's
//! gating tool, and its verdict shapes the request. Excluded tools leave the tools array; a
//! claimed tool is named by `tool_choice` in the dialect's own form (`gating.claim:
//! "tool_choice"`), or the gateway answers the client itself with a call of that tool, in the
//! dialect's response format, and the model is never called (`gating.claim: "answer"`).

use super::gating::{Claim, Verdict};
use crate::config::Config;
use crate::config::gating::GatingMcp;
use crate::dialects::Dialect;
use crate::json::find_path;
use crate::pipeline::Analysis;
use crate::select::select;
use serde_json::{Value, json};

use super::exchange::GATING_ID;

/// The gating call for `text`: its headers (besides the pseudo-headers the host sets) and body,
/// on the 2026-07-28 revision (no session to open first).
pub fn gating_call(settings: &GatingMcp, text: &str) -> (Vec<(String, String)>, String) {
    let mut arguments = serde_json::Map::new();
    arguments.insert(settings.argument.clone(), Value::String(text.to_owned()));
    let params = json!({"name": super::catalog::GATING_TOOL, "arguments": arguments});
    modern_call(
        "tools/call",
        Some(super::catalog::GATING_TOOL),
        params,
        &settings.headers,
    )
}

/// A request the gateway sends an MCP server on its own, on the 2026-07-28 revision (no session
/// to open first): its headers (besides the pseudo-headers the host sets; `extra` last, replacing
/// any of the same name) and body. `name`: the tool or resource a name-bearing method names,
/// sent as `Mcp-Name`.
pub fn modern_call(
    method: &str,
    name: Option<&str>,
    mut params: Value,
    extra: &std::collections::BTreeMap<String, String>,
) -> (Vec<(String, String)>, String) {
    if let Some(params) = params.as_object_mut() {
        params.insert(
            "_meta".to_owned(),
            json!({
                "io.modelcontextprotocol/protocolVersion": super::exchange::MODERN_REVISION,
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "toolsift", "version": env!("CARGO_PKG_VERSION")}
            }),
        );
    }
    let body = json!({
        "jsonrpc": "2.0",
        "id": 7_400_000_999u64,
        "method": method,
        "params": params,
    });
    let mut headers = vec![
        ("content-type".to_owned(), "application/json".to_owned()),
        (
            "accept".to_owned(),
            "application/json, text/event-stream".to_owned(),
        ),
        (
            "mcp-protocol-version".to_owned(),
            super::exchange::MODERN_REVISION.to_owned(),
        ),
        ("mcp-method".to_owned(), method.to_owned()),
    ];
    if let Some(name) = name {
        headers.push(("mcp-name".to_owned(), name.to_owned()));
    }
    for (name, value) in extra {
        headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        headers.push((name.to_ascii_lowercase(), value.clone()));
    }
    (headers, body.to_string())
}

/// The verdict in the gating server's answer; `None` (go on without) for anything else.
pub fn read_answer(status: Option<u16>, content_type: &str, body: &[u8]) -> Option<Verdict> {
    if status != Some(200) {
        return None;
    }
    match super::message::server_reply(content_type, body, GATING_ID).outcome? {
        super::message::Outcome::Result(result) => super::gating::verdict(&result),
        super::message::Outcome::Error(_) => None,
    }
}

/// What a verdict did to a request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Gated {
    /// The request's tools the verdict excluded.
    pub excluded: usize,
    /// The claimed tool, when the request has it.
    pub claimed: Option<Claim>,
}

impl Gated {
    /// What `x-toolsift` adds: ` gating=excluded:2,claimed:name`.
    pub fn header_suffix(&self) -> String {
        let mut out = format!(" gating=excluded:{}", self.excluded);
        if let Some(claim) = &self.claimed {
            out.push_str(",claimed:");
            out.push_str(&crate::pipeline::header_safe(&claim.name));
        }
        out
    }
}

/// Applies `verdict` to the selection of `analysis` (ranked by keyword or hybrid, whichever
/// it was): excluded tools are dropped from the ranking before selection, unless the request
/// itself pins them (`tool_choice` names one, or the conversation called it); a claimed tool
/// the request has is pinned.
pub fn apply(analysis: &mut Analysis, config: &Config, verdict: &Verdict) -> Gated {
    let order: Vec<crate::rank::Scored> = match &analysis.fused {
        Some(fused) => fused.order.clone(),
        None => analysis.catalog.rank(&analysis.query).to_vec(),
    };
    let pinned = |name: &str| {
        analysis.choice.named.iter().any(|n| n == name) || analysis.called.iter().any(|n| n == name)
    };
    let excluded = |entry: usize| {
        analysis
            .catalog
            .name(entry)
            .is_some_and(|name| verdict.exclude.iter().any(|e| e == name) && !pinned(name))
    };
    let before = order.len();
    let kept: Vec<crate::rank::Scored> = order.into_iter().filter(|s| !excluded(s.entry)).collect();
    // A claim of a tool the caller may not see claims nothing.
    let claimed = verdict.claim.clone().filter(|claim| {
        analysis.may_see(&claim.name)
            && kept
                .iter()
                .any(|s| analysis.catalog.name(s.entry) == Some(claim.name.as_str()))
    });
    let mut choice = analysis.choice.clone();
    if let Some(claim) = &claimed {
        choice.name(claim.name.clone());
    }
    let allowed = analysis.access.as_ref().map(|g| &*g.allowed);
    analysis.selection = select(
        config,
        analysis.top_k,
        &analysis.catalog,
        &kept,
        &choice,
        &analysis.called,
        allowed,
        &analysis.evicted,
    );
    Gated {
        excluded: before - kept.len(),
        claimed,
    }
}

/// The response the gateway sends in place of the model's, for a request whose turn the claimed
/// tool takes (`gating.claim: "answer"`), in the dialect's response format: one call of that
/// tool with the claim's arguments. `model` is the request's `model` (echoed when the dialect's
/// response carries one).
pub fn claimed_answer(dialect: Dialect, claim: &Claim, model: &str) -> String {
    let arguments: Value = serde_json::from_str(&claim.arguments).unwrap_or_else(|_| json!({}));
    let answer = dialect
        .codec()
        .claimed_answer(&claim.name, &arguments, model);
    answer.to_string()
}

/// The request body's `model` (empty when it has none, as Gemini and Bedrock keep it in the path).
pub fn model_of(body: &str) -> String {
    find_path(body, &["model"])
        .and_then(|span| body.get(span))
        .and_then(|raw| serde_json::from_str::<String>(raw).ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;
    use crate::pipeline::Engine;

    fn with_tool_choice(dialect: Dialect, body: &str, name: &str) -> Option<String> {
        dialect.codec().with_tool_choice(body, name)
    }

    fn chat(tools: &[&str], choice: &str) -> String {
        let tools: Vec<String> = tools
            .iter()
            .map(|n| {
                format!(
                    r#"{{"type":"function","function":{{"name":"{n}","description":"{} tool","parameters":{{"type":"object"}}}}}}"#,
                    n.replace('_', " ")
                )
            })
            .collect();
        format!(
            r#"{{"model":"m","messages":[{{"role":"user","content":"send an email about the weather"}}],"tools":[{}]{choice}}}"#,
            tools.join(",")
        )
    }

    #[test]
    fn exclusions_and_claims_reshape_the_selection() {
        let config = Config::from_json(br#"{"top_k":2,"min_tools":0}"#).unwrap();
        let mut engine = Engine::new(config.clone());
        let body = chat(
            &["send_email", "get_weather", "weather_alerts", "list_files"],
            "",
        );
        let mut analysis = engine.analyse(Dialect::OpenaiChat, &body).unwrap();
        assert_eq!(analysis.kept_names().len(), 2);
        let verdict = Verdict {
            exclude: vec!["send_email".into(), "nope".into()],
            claim: Some(Claim {
                name: "list_files".into(),
                arguments: "{}".into(),
            }),
        };
        let gated = apply(&mut analysis, &config, &verdict);
        assert_eq!(gated.excluded, 1);
        assert_eq!(gated.claimed.as_ref().unwrap().name, "list_files");
        let kept = analysis.kept_names();
        assert!(
            !kept.contains(&"send_email") && kept.contains(&"list_files"),
            "{kept:?}"
        );
        assert_eq!(
            gated.header_suffix(),
            " gating=excluded:1,claimed:list_files"
        );
        // A claim of a tool the request lacks is no claim; a tool the client pins stays.
        let pinned = chat(
            &["send_email", "get_weather", "weather_alerts", "list_files"],
            r#","tool_choice":{"type":"function","function":{"name":"send_email"}}"#,
        );
        let mut analysis = engine.analyse(Dialect::OpenaiChat, &pinned).unwrap();
        let verdict = Verdict {
            exclude: vec!["send_email".into()],
            claim: Some(Claim {
                name: "absent".into(),
                arguments: "{}".into(),
            }),
        };
        let gated = apply(&mut analysis, &config, &verdict);
        assert_eq!((gated.excluded, gated.claimed), (0, None));
        assert!(analysis.kept_names().contains(&"send_email"));
    }

    #[test]
    fn tool_choice_in_every_dialect() {
        let chat = with_tool_choice(
            Dialect::OpenaiChat,
            r#" {"model":"m","tool_choice":"auto"} "#,
            "x",
        )
        .unwrap();
        assert_eq!(
            chat,
            r#" {"model":"m","tool_choice":{"function":{"name":"x"},"type":"function"}} "#
        );
        let added = with_tool_choice(Dialect::Anthropic, r#"{"model":"m"}"#, "x").unwrap();
        assert_eq!(
            added,
            r#"{"model":"m","tool_choice":{"name":"x","type":"tool"}}"#
        );
        assert_eq!(
            with_tool_choice(Dialect::OpenaiResponses, "{}", "x").unwrap(),
            r#"{"tool_choice":{"name":"x","type":"function"}}"#
        );
        let gemini = with_tool_choice(Dialect::Gemini, r#"{"contents":[]}"#, "x").unwrap();
        let v: Value = serde_json::from_str(&gemini).unwrap();
        assert_eq!(
            v["toolConfig"]["functionCallingConfig"]["allowedFunctionNames"],
            json!(["x"])
        );
        let gemini = with_tool_choice(
            Dialect::Gemini,
            r#"{"toolConfig":{"retrievalConfig":{}}}"#,
            "x",
        )
        .unwrap();
        let v: Value = serde_json::from_str(&gemini).unwrap();
        assert!(v["toolConfig"]["retrievalConfig"].is_object());
        assert_eq!(v["toolConfig"]["functionCallingConfig"]["mode"], "ANY");
        let bedrock =
            with_tool_choice(Dialect::Bedrock, r#"{"toolConfig":{"tools":[]}}"#, "x").unwrap();
        assert_eq!(
            bedrock,
            r#"{"toolConfig":{"tools":[],"toolChoice":{"tool":{"name":"x"}}}}"#
        );
        assert_eq!(
            with_tool_choice(Dialect::Bedrock, r#"{"messages":[]}"#, "x"),
            None
        );
        for odd in ["", "[]", "5", "\"x\"", "{"] {
            assert_eq!(
                with_tool_choice(Dialect::OpenaiChat, odd, "x"),
                None,
                "{odd}"
            );
        }
    }

    #[test]
    fn claimed_answers_are_each_dialects_tool_call() {
        let claim = Claim {
            name: "get_weather".into(),
            arguments: r#"{"city":"Paris"}"#.into(),
        };
        for dialect in Dialect::ALL {
            let answer: Value =
                serde_json::from_str(&claimed_answer(dialect, &claim, "m")).unwrap();
            let text = answer.to_string();
            assert!(
                text.contains("get_weather") && text.contains("Paris"),
                "{dialect}: {text}"
            );
        }
        let bad = Claim {
            name: "x".into(),
            arguments: "not json".into(),
        };
        let chat: Value =
            serde_json::from_str(&claimed_answer(Dialect::OpenaiChat, &bad, "")).unwrap();
        assert_eq!(
            chat["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
            "{}"
        );
        assert_eq!(model_of(r#"{"model":"gpt-x"}"#), "gpt-x");
        assert_eq!(model_of(r#"{"model":5}"#), "");
    }

    #[test]
    fn the_gating_call_and_its_answer() {
        let settings: GatingMcp =
            serde_json::from_str(r#"{"cluster":"mcp","headers":{"Authorization":"Bearer t"}}"#)
                .unwrap();
        let (headers, body) = gating_call(&settings, "hello");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["params"]["arguments"], json!({"query": "hello"}));
        assert!(headers.contains(&("authorization".into(), "Bearer t".into())));
        let ok = br#"{"jsonrpc":"2.0","id":7400000999,"result":{"structuredContent":{"exclude":["a"]}}}"#;
        assert_eq!(
            read_answer(Some(200), "application/json", ok)
                .unwrap()
                .exclude,
            ["a"]
        );
        assert_eq!(read_answer(Some(503), "application/json", ok), None);
        assert_eq!(read_answer(None, "", b""), None);
        assert_eq!(read_answer(Some(200), "application/json", b"\xff"), None);
    }
}
