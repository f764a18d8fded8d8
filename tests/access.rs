//! Access rules in filter mode through the real Envoy: real tokens (ES256, signed in the test)
//! verified by Envoy's own `jwt_authn` placed before toolsift, the real `.wasm`, and the demo
//! upstream, which reports the tools it received (`x-demo-tools`) and counts the bodies it got
//! (`llm_bodies`: a refused request's never comes). The shipped configurations run too:
//! docs/examples/envoy-access.yaml as it is, and the Istio and Envoy Gateway manifests'
//! plugin configurations behind the `jwt_authn` those platforms generate from their manifests.

use crate::common;

use common::jwt::{self, SigningKey};
use common::{DIALECTS, Gateway, Response, tools_for};
use serde_json::{Value, json};
use std::collections::BTreeSet;

/// The fixture catalog's tools each group may see, and the rules that say so.
const SRE: [&str; 10] = [
    "get_pods",
    "get_pod_logs",
    "scale_deployment",
    "apply_kubernetes_manifest",
    "query_datadog_metrics",
    "create_datadog_monitor",
    "trigger_pagerduty_incident",
    "list_oncall_schedules",
    "send_slack_message",
    "get_current_time",
];
const FINANCE: [&str; 9] = [
    "create_stripe_customer",
    "create_payment_intent",
    "refund_charge",
    "query_salesforce",
    "update_salesforce_opportunity",
    "getStockQuote",
    "getHistoricalStockPrices",
    "convertCurrency",
    "get_current_time",
];

/// The access section of most tests: `sre` and `finance` see their own tools, `admins` every
/// tool, and nobody `run_shell_command` or a `delete_*` (deny wins over `admins`' `*`).
fn rules(denied: &str) -> Value {
    json!({
        "identity": [{"metadata": jwt::NAMESPACE, "claim": "groups"}],
        "default": "deny",
        "rules": [
            {"when": ["sre"], "allow": ["get_pod*", "scale_deployment", "apply_kubernetes_manifest",
                                        "*datadog*", "trigger_pagerduty_incident", "list_oncall_schedules",
                                        "send_slack_message", "get_current_time", "run_shell_command"]},
            {"when": ["finance"], "allow": ["*stripe*", "create_payment_intent", "refund_charge",
                                            "*salesforce*", "get*Stock*", "convertCurrency", "get_current_time"]},
            {"when": ["admins"], "allow": ["*"]},
            {"when": ["*"], "deny": ["run_shell_command", "delete_*"]}
        ],
        "denied": denied
    })
}

/// A plugin configuration: `top_k` 5 over the allowed tools (`min_tools` 5, so a group's
/// ten are ranked), `extra` merged in.
fn config(access: Value, extra: Value) -> String {
    let mut c = json!({"top_k": 5, "min_tools": 5, "debug": true, "access": access});
    for (k, v) in extra.as_object().unwrap() {
        c[k] = v.clone();
    }
    c.to_string()
}

/// Envoy with `jwt_authn` (one provider trusting `key`, the payload in metadata under
/// `jwt_payload`) before toolsift configured with `config`.
fn start(config: &str, key: &SigningKey) -> Gateway {
    let provider = jwt::provider(jwt::ISSUER, &[key], "jwt_payload");
    let filters = [(
        "envoy.filters.http.jwt_authn",
        jwt::jwt_authn(&[("test", provider)]),
    )];
    Gateway::start_with(config, &[], |yaml| jwt::before_toolsift(&yaml, &filters))
}

/// The path of `dialect`, streamed or not.
fn path(dialect: &str, stream: bool) -> &'static str {
    match (dialect, stream) {
        ("openai_chat", _) => "/v1/chat/completions",
        ("openai_responses", _) => "/v1/responses",
        ("anthropic", _) => "/v1/messages",
        ("gemini", false) => "/v1beta/models/gemini-2.5-flash:generateContent",
        ("gemini", true) => "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
        ("bedrock", false) => "/model/anthropic.claude-sonnet-4-v1:0/converse",
        ("bedrock", true) => "/model/anthropic.claude-sonnet-4-v1:0/converse-stream",
        ("ollama", _) => "/api/chat",
        (other, _) => panic!("{other}"),
    }
}

/// What a request may carry besides the question and the 80 fixture tools.
#[derive(Default, Clone, Copy)]
struct Extras<'a> {
    stream: bool,
    /// A tool the request names in its `tool_choice` (Ollama has none).
    choice: Option<&'a str>,
    /// A tool the conversation already called (its call and result in the history).
    called: Option<&'a str>,
    /// Only the first this many fixture tools.
    tools: Option<usize>,
}

impl Extras<'_> {
    fn streamed(stream: bool) -> Self {
        Extras {
            stream,
            ..Extras::default()
        }
    }
}

/// A client request of `dialect` asking `question`.
fn request(dialect: &str, question: &str, x: Extras) -> Value {
    let mut tools = tools_for(dialect);
    if let Some(n) = x.tools {
        match dialect {
            "gemini" => {
                let decls = tools[0]["functionDeclarations"].as_array_mut().unwrap();
                decls.truncate(n);
            }
            _ => tools.as_array_mut().unwrap().truncate(n),
        }
    }
    let stream = x.stream;
    let mut body = match dialect {
        "openai_chat" => {
            let mut messages = vec![json!({"role": "user", "content": question})];
            if let Some(called) = x.called {
                messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": called, "arguments": "{}"}}]}));
                messages.push(json!({"role": "tool", "tool_call_id": "call_1", "content": "done"}));
            }
            json!({"model": "gpt-4.1", "stream": stream, "messages": messages, "tools": tools})
        }
        "openai_responses" => {
            let mut input = vec![json!({"role": "user", "content": question})];
            if let Some(called) = x.called {
                input.push(json!({"type": "function_call", "call_id": "call_1", "name": called, "arguments": "{}"}));
                input.push(
                    json!({"type": "function_call_output", "call_id": "call_1", "output": "done"}),
                );
            }
            json!({"model": "gpt-5", "stream": stream, "input": input, "tools": tools})
        }
        "anthropic" => {
            let mut messages = vec![json!({"role": "user", "content": question})];
            if let Some(called) = x.called {
                messages.push(json!({"role": "assistant", "content": [
                    {"type": "tool_use", "id": "toolu_1", "name": called, "input": {}}]}));
                messages.push(json!({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "done"}]}));
            }
            json!({"model": "claude-sonnet-4-5", "max_tokens": 512, "stream": stream,
                   "messages": messages, "tools": tools})
        }
        "gemini" => {
            let mut contents = vec![json!({"role": "user", "parts": [{"text": question}]})];
            if let Some(called) = x.called {
                contents.push(json!({"role": "model", "parts": [{"functionCall": {"name": called, "args": {}}}]}));
                contents.push(json!({"role": "user", "parts": [
                    {"functionResponse": {"name": called, "response": {"result": "done"}}}]}));
            }
            json!({"contents": contents, "tools": tools})
        }
        "bedrock" => {
            let mut messages = vec![json!({"role": "user", "content": [{"text": question}]})];
            if let Some(called) = x.called {
                messages.push(json!({"role": "assistant", "content": [
                    {"toolUse": {"toolUseId": "tu_1", "name": called, "input": {}}}]}));
                messages.push(json!({"role": "user", "content": [
                    {"toolResult": {"toolUseId": "tu_1", "content": [{"text": "done"}]}}]}));
            }
            json!({"messages": messages, "toolConfig": {"tools": tools}})
        }
        "ollama" => {
            let mut messages = vec![json!({"role": "user", "content": question})];
            if let Some(called) = x.called {
                messages.push(json!({"role": "assistant", "content": "", "tool_calls": [
                    {"function": {"name": called, "arguments": {}}}]}));
                messages.push(json!({"role": "tool", "tool_name": called, "content": "done"}));
            }
            // Ollama streams unless told not to.
            json!({"model": "llama3.2", "stream": stream, "messages": messages, "tools": tools})
        }
        other => panic!("{other}"),
    };
    if let Some(name) = x.choice {
        match dialect {
            "openai_chat" => {
                body["tool_choice"] = json!({"type": "function", "function": {"name": name}})
            }
            "openai_responses" => body["tool_choice"] = json!({"type": "function", "name": name}),
            "anthropic" => body["tool_choice"] = json!({"type": "tool", "name": name}),
            "gemini" => {
                body["toolConfig"] = json!({"functionCallingConfig":
                    {"mode": "ANY", "allowedFunctionNames": [name]}})
            }
            "bedrock" => body["toolConfig"]["toolChoice"] = json!({"tool": {"name": name}}),
            other => panic!("{other} has no tool_choice"),
        }
    }
    body
}

/// Sends `body` of `dialect` with `token` (none: no `authorization`).
fn send(gw: &Gateway, dialect: &str, stream: bool, token: Option<&str>, body: &Value) -> Response {
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut headers = Vec::new();
    if let Some(auth) = &auth {
        headers.push(("authorization", auth.as_str()));
    }
    gw.post(path(dialect, stream), &headers, body.to_string().as_bytes())
}

/// The tools the demo upstream says it received (whole answers and streams alike).
fn received(r: &Response) -> BTreeSet<String> {
    assert_eq!(r.header("x-demo-tools-truncated"), None);
    r.header("x-demo-tools")
        .unwrap_or_else(|| panic!("no x-demo-tools: {} {}", r.status, r.text()))
        .split(',')
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Requests whose body reached the demo upstream.
fn bodies(gw: &Gateway) -> u64 {
    gw.upstream.stats()["llm_bodies"].as_u64().unwrap()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}

/// A caller of one group never gets another's tools, whatever it asks, in every dialect,
/// streamed or not; the kept tools are ranked among the allowed ones only.
#[test]
fn a_group_sees_only_its_own_tools_in_every_dialect() {
    let key = SigningKey::generate("k1");
    let gw = start(&config(rules("hidden"), json!({})), &key);
    let sre = key.token(json!({"sub": "alice", "groups": ["sre"]}));
    let finance = key.token(json!({"sub": "bob", "groups": ["finance"]}));
    // Each asks for the other's work: the best-ranked tools of the question are denied.
    let asks = [
        (
            &sre,
            &SRE[..],
            "Refund the charge ch_123 for the customer and create a payment intent",
            "get_pod_logs",
        ),
        (
            &finance,
            &FINANCE[..],
            "Fetch the logs of the checkout pod and scale the deployment",
            "refund_charge",
        ),
    ];
    let mut requests = 0u64;
    for dialect in DIALECTS {
        for stream in [false, true] {
            for (token, allowed, question, _) in asks {
                let body = request(dialect, question, Extras::streamed(stream));
                let r = send(&gw, dialect, stream, Some(token), &body);
                requests += 1;
                assert_eq!(r.status, 200, "{dialect} stream={stream}: {}", r.text());
                let got = received(&r);
                assert_eq!(got.len(), 5, "{dialect} stream={stream}: {got:?}");
                assert!(
                    got.is_subset(&set(allowed)),
                    "{dialect} stream={stream}: {got:?} not within {allowed:?}"
                );
                let denied = 80 - allowed.len();
                assert_eq!(
                    r.header("x-toolsift"),
                    Some(format!("kept=5 total=80 denied={denied}").as_str()),
                    "{dialect} stream={stream}"
                );
            }
            // And asked for their own work, they get it.
            for (token, _, _, own) in asks {
                let question = match own {
                    "get_pod_logs" => "Fetch the logs of the checkout pod",
                    _ => "Refund the charge ch_123 for the customer",
                };
                let body = request(dialect, question, Extras::streamed(stream));
                let r = send(&gw, dialect, stream, Some(token), &body);
                requests += 1;
                assert!(received(&r).contains(own), "{dialect} stream={stream}");
            }
        }
    }
    assert_eq!(bodies(&gw), requests);
    assert_eq!(gw.stat("toolsift.access.denied.request"), 0);
}

/// Deny wins over every allow (`admins`' `*`, `sre`'s own `run_shell_command`); a caller no
/// rule allows anything gets what `default` says: with `deny` nothing (403), with `allow`
/// every tool not denied.
#[test]
fn deny_wins_and_default_decides_the_rest() {
    let key = SigningKey::generate("k1");
    let gw = start(&config(rules("hidden"), json!({})), &key);
    let admin = key.token(json!({"groups": ["admins"]}));
    let sre_and_admin = key.token(json!({"groups": ["sre", "admins"]}));
    let marketing = key.token(json!({"groups": ["marketing"]}));
    let question = "Run the shell command rm -rf /tmp/cache and delete the file notes.txt";
    for dialect in DIALECTS {
        let body = request(dialect, question, Extras::default());
        for token in [&admin, &sre_and_admin] {
            let r = send(&gw, dialect, false, Some(token), &body);
            assert_eq!(r.status, 200, "{dialect}: {}", r.text());
            let got = received(&r);
            assert_eq!(got.len(), 5, "{dialect}: {got:?}");
            for denied in ["run_shell_command", "delete_file"] {
                assert!(!got.contains(denied), "{dialect}: {got:?}");
            }
            assert_eq!(
                r.header("x-toolsift"),
                Some("kept=5 total=80 denied=2"),
                "{dialect}"
            );
        }
        // `default: deny` and no rule for `marketing`: not one tool, so no model call at all.
        let r = send(&gw, dialect, false, Some(&marketing), &body);
        assert_eq!(r.status, 403, "{dialect}: {}", r.text());
        assert_eq!(r.json()["error"]["code"], "access_denied");
        assert_eq!(
            r.json()["error"]["message"],
            "toolsift: access denied: no tool of this request is allowed for this caller"
        );
        assert_eq!(
            r.header("x-toolsift"),
            Some("kept=0 total=80 denied=80 access=refused")
        );
    }
    // The refused requests' headers went upstream (filter mode holds no headers), their
    // bodies never.
    assert_eq!(bodies(&gw), 2 * DIALECTS.len() as u64);
    drop(gw);

    // `default: allow`: a caller no rule names sees every tool but the denied ones.
    let mut open = rules("hidden");
    open["default"] = json!("allow");
    let gw = start(&config(open, json!({})), &key);
    for dialect in DIALECTS {
        let body = request(dialect, question, Extras::default());
        let r = send(&gw, dialect, false, Some(&marketing), &body);
        assert_eq!(r.status, 200, "{dialect}: {}", r.text());
        let got = received(&r);
        assert!(!got.contains("run_shell_command") && !got.contains("delete_file"));
        assert!(
            got.contains("list_directory") || got.contains("write_file"),
            "{dialect}: {got:?}"
        );
        assert_eq!(r.header("x-toolsift"), Some("kept=5 total=80 denied=2"));
    }
}

/// `min_tools` spares a small request the ranking, never the access rules: its denied tools
/// leave, the allowed ones all stay.
#[test]
fn a_request_under_min_tools_still_loses_denied_tools() {
    let key = SigningKey::generate("k1");
    let gw = start(&config(rules("hidden"), json!({"min_tools": 20})), &key);
    let sre = key.token(json!({"groups": ["sre"]}));
    let admin = key.token(json!({"groups": ["admins"]}));
    for dialect in DIALECTS {
        for stream in [false, true] {
            // The first 20 fixture tools hold one of sre's: send_slack_message.
            let x = Extras {
                stream,
                tools: Some(20),
                ..Extras::default()
            };
            let body = request(dialect, "Post the release notes", x);
            let r = send(&gw, dialect, stream, Some(&sre), &body);
            assert_eq!(r.status, 200, "{dialect}: {}", r.text());
            assert_eq!(received(&r), set(&["send_slack_message"]), "{dialect}");
            assert_eq!(r.header("x-toolsift"), Some("kept=1 total=20 denied=19"));
            // The first 50 hold delete_file and run_shell_command, denied to everybody: more
            // than min_tools are left to admins, so those are ranked.
            let x = Extras {
                tools: Some(50),
                ..x
            };
            let body = request(dialect, "Post the release notes", x);
            let r = send(&gw, dialect, stream, Some(&admin), &body);
            assert_eq!(r.header("x-toolsift"), Some("kept=5 total=50 denied=2"));
            let got = received(&r);
            assert!(!got.contains("delete_file") && !got.contains("run_shell_command"));
            // Nothing denied and under min_tools: untouched, as without access rules.
            let x = Extras {
                tools: Some(20),
                ..x
            };
            let body = request(dialect, "Post the release notes", x);
            let r = send(&gw, dialect, stream, Some(&admin), &body);
            assert_eq!(
                r.header("x-toolsift"),
                Some("kept=20 total=20 skipped=few_tools")
            );
            assert_eq!(received(&r).len(), 20);
        }
    }
}

/// Nothing pins a denied tool: `always_include`, a call in the history and `tool_choice` pin
/// allowed tools only. With `denied: "hidden"` a `tool_choice` of a denied tool is left to
/// the provider, which answers as for any tool the request does not have; with `"refused"`
/// toolsift answers 403 naming the tool, and the model is never called.
#[test]
fn a_pin_of_a_denied_tool_is_no_pin() {
    let key = SigningKey::generate("k1");
    let pins = json!({"always_include": ["get_weather_forecast", "get_current_time"]});
    let sre = key.token(json!({"groups": ["sre"]}));
    let question = "Scale the checkout deployment to 6 replicas";
    for denied in ["hidden", "refused"] {
        let gw = start(&config(rules(denied), pins.clone()), &key);
        for dialect in DIALECTS {
            let ask = |x: Extras| {
                send(
                    &gw,
                    dialect,
                    false,
                    Some(&sre),
                    &request(dialect, question, x),
                )
            };
            // always_include: the allowed one is kept, the denied one is not.
            let r = ask(Extras::default());
            assert_eq!(r.status, 200, "{denied} {dialect}: {}", r.text());
            let got = received(&r);
            assert!(
                got.contains("get_current_time"),
                "{denied} {dialect}: {got:?}"
            );
            assert!(
                !got.contains("get_weather_forecast"),
                "{denied} {dialect}: {got:?}"
            );
            // Called in the history: an allowed tool stays pinned, a denied one leaves (the
            // history is the client's; it is not refused).
            for (called, kept) in [("list_oncall_schedules", true), ("refund_charge", false)] {
                let x = Extras {
                    called: Some(called),
                    ..Extras::default()
                };
                let r = ask(x);
                assert_eq!(r.status, 200, "{denied} {dialect} {called}: {}", r.text());
                let got = received(&r);
                assert_eq!(got.contains(called), kept, "{denied} {dialect}: {got:?}");
                assert!(
                    got.contains("scale_deployment"),
                    "{denied} {dialect}: {got:?}"
                );
            }
            if dialect == "ollama" {
                continue; // no tool_choice
            }
            // tool_choice of an allowed tool: pinned.
            let x = Extras {
                choice: Some("trigger_pagerduty_incident"),
                ..Extras::default()
            };
            let r = ask(x);
            assert!(
                received(&r).contains("trigger_pagerduty_incident"),
                "{dialect}"
            );
            // tool_choice of a denied tool.
            let before = bodies(&gw);
            for (tool, why) in [
                ("refund_charge", "not allowed for this caller"),
                (
                    "run_shell_command",
                    "denied by access rule 3 (`run_shell_command`)",
                ),
            ] {
                let x = Extras {
                    choice: Some(tool),
                    ..Extras::default()
                };
                let r = ask(x);
                if denied == "hidden" {
                    // Gone from the tools; the provider refuses the tool_choice it cannot
                    // match, as it would any unknown name.
                    assert_eq!(r.status, 400, "{dialect}: {}", r.text());
                    assert!(r.text().contains(tool), "{dialect}: {}", r.text());
                    // Five ranked and the always_include one.
                    assert_eq!(r.header("x-toolsift"), Some("kept=6 total=80 denied=70"));
                } else {
                    assert_eq!(r.status, 403, "{dialect}: {}", r.text());
                    let error = &r.json()["error"];
                    assert_eq!(error["type"], "toolsift_error");
                    assert_eq!(error["code"], "access_denied");
                    assert_eq!(
                        error["message"],
                        format!("toolsift: access denied: tool `{tool}`: {why}")
                    );
                    assert_eq!(
                        r.header("x-toolsift"),
                        Some("kept=0 total=80 denied=70 access=refused")
                    );
                }
            }
            let reached = if denied == "hidden" { 2 } else { 0 };
            assert_eq!(bodies(&gw) - before, reached, "{denied} {dialect}");
        }
    }
}

/// A group is the whole string the token lists: a caller in the group "contractors admins" is
/// not in `admins`, and "sre team" is not `sre`. (Splitting each item of an array claim at
/// spaces and commas made the first an admin.) A claim that is one string is a list of values
/// separated by spaces or commas, as OAuth's `scope` is.
#[test]
fn an_array_claims_items_are_whole_values() {
    let key = SigningKey::generate("k1");
    let mut access = rules("hidden");
    access["identity"] = json!([
        {"metadata": jwt::NAMESPACE, "claim": "groups"},
        {"metadata": jwt::NAMESPACE, "claim": "scope", "prefix": "scope:"}
    ]);
    access["rules"]
        .as_array_mut()
        .unwrap()
        .push(json!({"when": ["scope:tools.finance"], "allow": ["refund_charge"]}));
    let gw = start(&config(access, json!({})), &key);
    let question = "Run the shell command to list the files";
    for dialect in DIALECTS {
        let body = request(dialect, question, Extras::default());
        for groups in [json!(["contractors admins"]), json!(["sre team", "a,b"])] {
            let t = key.token(json!({"groups": groups}));
            let r = send(&gw, dialect, false, Some(&t), &body);
            assert_eq!(r.status, 403, "{dialect} {groups}: {}", r.text());
        }
        let t = key.token(json!({"groups": ["sre team", "sre"]}));
        let r = send(&gw, dialect, false, Some(&t), &body);
        assert!(received(&r).is_subset(&set(&SRE)), "{dialect}");
        // A string claim is a list: `scope` as OAuth writes it.
        let t = key.token(json!({"scope": "openid tools.finance"}));
        let r = send(&gw, dialect, false, Some(&t), &body);
        assert_eq!(received(&r), set(&["refund_charge"]), "{dialect}");
    }
}

/// A request without a token passes `jwt_authn` (`allow_missing`) and toolsift refuses it:
/// the configuration reads an identity, and there is none. A token that does not verify never
/// reaches toolsift: `jwt_authn` answers 401.
#[test]
fn no_token_is_a_403_and_a_bad_token_a_401_from_jwt_authn() {
    let key = SigningKey::generate("k1");
    let gw = start(&config(rules("hidden"), json!({})), &key);
    let question = "Fetch the logs of the checkout pod";
    for dialect in DIALECTS {
        for stream in [false, true] {
            let body = request(dialect, question, Extras::streamed(stream));
            let r = send(&gw, dialect, stream, None, &body);
            assert_eq!(r.status, 403, "{dialect}: {}", r.text());
            assert_eq!(r.header("content-type"), Some("application/json"));
            assert_eq!(
                r.json(),
                json!({"error": {"type": "toolsift_error", "code": "access_denied",
                    "message": "toolsift: access denied: the request carries no caller identity"}})
            );
            assert_eq!(
                r.header("x-toolsift"),
                Some("kept=0 total=80 denied=80 access=refused")
            );
        }
    }
    let refused = 2 * DIALECTS.len() as u64;
    assert_eq!(gw.stat("toolsift.access.denied.request"), refused);
    assert_eq!(gw.stat("toolsift.access.denied.tools"), 80 * refused);

    let stranger = SigningKey::generate("k1");
    let good = key.token(json!({"groups": ["sre"]}));
    let (head, rest) = good.split_once('.').unwrap();
    let (_, signature) = rest.split_once('.').unwrap();
    let forged_payload = jwt::base64url(
        jwt::claims_with(jwt::ISSUER, json!({"groups": ["admins"]}))
            .to_string()
            .as_bytes(),
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    // (token, jwt_authn's status and body)
    let bad = [
        // Signed by a key the JWKS does not hold (same kid).
        (
            stranger.token(json!({"groups": ["admins"]})),
            401,
            "Jwt verification fails",
        ),
        // The payload changed after signing.
        (
            format!("{head}.{forged_payload}.{signature}"),
            401,
            "Jwt verification fails",
        ),
        // Expired.
        (
            key.token(json!({"groups": ["sre"], "iat": now - 7200, "exp": now - 3600})),
            401,
            "Jwt is expired",
        ),
        // Not a JWT at all.
        (
            "not-a-token".to_owned(),
            401,
            "Jwt is not in the form of Header.Payload.Signature with two dots and 3 sections",
        ),
        // Another audience: jwt_authn says 403.
        (
            key.token(json!({"groups": ["sre"], "aud": "someone-else"})),
            403,
            "Audiences in Jwt are not allowed",
        ),
    ];
    let before = (
        gw.upstream.stats()["requests"].clone(),
        gw.stat("toolsift.requests"),
    );
    for (token, status, why) in &bad {
        let body = request("openai_chat", question, Extras::default());
        let r = send(&gw, "openai_chat", false, Some(token), &body);
        assert_eq!(r.status, *status, "{why}: {}", r.text());
        assert_eq!(r.text(), *why);
        assert!(
            r.header("www-authenticate")
                .is_some_and(|w| w.starts_with("Bearer") && w.contains("invalid_token")),
            "{:?}",
            r.headers
        );
        assert_eq!(r.header("x-toolsift"), None, "toolsift never saw it");
    }
    assert_eq!(
        (
            gw.upstream.stats()["requests"].clone(),
            gw.stat("toolsift.requests")
        ),
        before,
        "neither the upstream nor toolsift saw a request with a bad token"
    );
    // The good token still works.
    let body = request("openai_chat", question, Extras::default());
    let r = send(&gw, "openai_chat", false, Some(&good), &body);
    assert!(received(&r).contains("get_pod_logs"));
}

/// Two tenants send the same catalog and question, turn about, so each request finds the
/// catalog (and its ranking) warm from the other's: what each gets depends on its own rules
/// only, the same as on a gateway that never saw the other.
#[test]
fn tenants_sharing_a_catalog_get_only_their_own_answers() {
    let key = SigningKey::generate("k1");
    let access = json!({
        "identity": [{"metadata": jwt::NAMESPACE, "claim": "tenant", "prefix": "tenant:"}],
        "rules": [
            {"when": ["tenant:acme"], "allow": ["*slack*", "*calendar*", "send_email", "search_emails", "create_zoom_meeting"]},
            {"when": ["tenant:globex"], "allow": ["*jira*", "*linear*", "*confluence*", "send_email", "create_zoom_meeting"]}
        ]
    });
    let config = config(access, json!({}));
    let acme = key.token(json!({"tenant": "acme"}));
    let globex = key.token(json!({"tenant": "globex"}));
    let question = "Tell the team about the outage and set up a meeting to review it";
    let body = |dialect: &str| request(dialect, question, Extras::default());
    // What each tenant gets on a gateway of its own.
    let alone = |token: &str| {
        let gw = start(&config, &key);
        DIALECTS
            .iter()
            .map(|d| received(&send(&gw, d, false, Some(token), &body(d))))
            .collect::<Vec<_>>()
    };
    let (acme_alone, globex_alone) = (alone(&acme), alone(&globex));
    assert_ne!(acme_alone, globex_alone);
    let gw = start(&config, &key);
    for round in 0..3 {
        for (i, dialect) in DIALECTS.iter().enumerate() {
            for (token, expected) in [(&acme, &acme_alone[i]), (&globex, &globex_alone[i])] {
                let r = send(&gw, dialect, false, Some(token), &body(dialect));
                assert_eq!(r.status, 200, "{dialect}: {}", r.text());
                assert_eq!(&received(&r), expected, "round {round} {dialect}");
            }
        }
    }
    // One catalog per dialect, assembled once; every other request found it warm.
    let n = DIALECTS.len() as u64;
    assert_eq!(gw.stat("toolsift.catalog_cache.misses"), n);
    assert_eq!(gw.stat("toolsift.catalog_cache.hits"), 6 * n - n);
}

/// `jwt_authn` keeps each verified payload under its provider's `payload_in_metadata` key: the
/// issuer's URL with Istio up to 1.20, `payload` from 1.21 on, the provider's name with Envoy
/// Gateway. Without `key` toolsift reads every payload in the namespace; with `key`, only that
/// one: a token of another provider, verified by `jwt_authn`, then carries no identity
/// toolsift reads.
#[test]
fn the_key_of_an_identity_source_picks_one_payload() {
    let key = SigningKey::generate("k1");
    let other_key = SigningKey::generate("k2");
    const OTHER: &str = "https://other-issuer.test";
    let filters = [(
        "envoy.filters.http.jwt_authn",
        jwt::jwt_authn(&[
            ("issuer", jwt::provider(jwt::ISSUER, &[&key], jwt::ISSUER)),
            ("other", jwt::provider(OTHER, &[&other_key], OTHER)),
        ]),
    )];
    let ours = key.token(json!({"groups": ["sre"]}));
    let theirs = other_key.sign(&jwt::claims_with(OTHER, json!({"groups": ["sre"]})));
    let question = "Fetch the logs of the checkout pod";
    for (source, theirs_status) in [
        (json!({"metadata": jwt::NAMESPACE, "claim": "groups"}), 200),
        (
            json!({"metadata": jwt::NAMESPACE, "key": jwt::ISSUER, "claim": "groups"}),
            403,
        ),
    ] {
        let mut access = rules("hidden");
        access["identity"] = json!([source]);
        let gw = Gateway::start_with(&config(access, json!({})), &[], |yaml| {
            jwt::before_toolsift(&yaml, &filters)
        });
        for dialect in DIALECTS {
            let body = request(dialect, question, Extras::default());
            let r = send(&gw, dialect, false, Some(&ours), &body);
            assert_eq!(r.status, 200, "{dialect}: {}", r.text());
            assert!(received(&r).is_subset(&set(&SRE)));
            let r = send(&gw, dialect, false, Some(&theirs), &body);
            assert_eq!(r.status, theirs_status, "{source} {dialect}: {}", r.text());
            if theirs_status == 403 {
                assert_eq!(r.json()["error"]["code"], "access_denied");
            } else {
                assert!(received(&r).is_subset(&set(&SRE)));
            }
        }
    }
}

/// The identity in a header (`{"header": "x-tenant"}`) is only as good as the header. The
/// shipped configuration (docs/examples/envoy-access.yaml) removes the client's `x-tenant`
/// with Envoy's `header_mutation` filter, then `jwt_authn` sets it from the verified token's
/// `tenant` claim (`claim_to_headers`). Measured here: Envoy 1.40's `jwt_authn` also removes
/// its `claim_to_headers` headers from every request that passes it, even on a route that
/// disables it; the removal before it is what protects a header nothing else clears.
#[test]
fn a_header_identity_cannot_be_forged_by_the_client() {
    let key = SigningKey::generate("k1");
    let access = json!({
        "identity": [{"header": "x-tenant", "prefix": "tenant:"}],
        "rules": [
            {"when": ["tenant:acme"], "allow": ["*slack*"]},
            {"when": ["tenant:globex"], "allow": ["*jira*"]}
        ]
    });
    let config = config(access, json!({}));
    let mut provider = jwt::provider(jwt::ISSUER, &[&key], "jwt_payload");
    provider["claim_to_headers"] = json!([{"header_name": "x-tenant", "claim_name": "tenant"}]);
    let authn = (
        "envoy.filters.http.jwt_authn",
        jwt::jwt_authn(&[("test", provider)]),
    );
    let strip = (
        "envoy.filters.http.header_mutation",
        jwt::strip_request_headers(&["x-tenant"]),
    );
    let acme = set(&[
        "send_slack_message",
        "list_slack_channels",
        "search_slack_messages",
    ]);
    let globex = set(&[
        "create_jira_issue",
        "search_jira_issues",
        "transition_jira_issue",
    ]);
    let globex_token = key.token(json!({"tenant": "globex"}));
    let no_tenant = key.token(json!({"sub": "carol"}));
    let question = "Open a ticket about the outage and tell the team";
    let ask = |gw: &Gateway, dialect: &str, token: Option<&str>, tenant: Option<&str>| {
        let auth = token.map(|t| format!("Bearer {t}"));
        let mut headers = Vec::new();
        if let Some(auth) = &auth {
            headers.push(("authorization", auth.as_str()));
        }
        if let Some(tenant) = tenant {
            headers.push(("x-tenant", tenant));
        }
        let body = request(dialect, question, Extras::default());
        gw.post(path(dialect, false), &headers, body.to_string().as_bytes())
    };
    let assert_no_identity = |r: &Response, what: &str| {
        assert_eq!(r.status, 403, "{what}: {}", r.text());
        assert_eq!(
            r.json()["error"]["message"],
            "toolsift: access denied: the request carries no caller identity",
            "{what}"
        );
    };

    // The shipped chain: header_mutation, jwt_authn, toolsift.
    let gw = Gateway::start_with(&config, &[], |yaml| {
        jwt::before_toolsift(&yaml, &[strip.clone(), authn.clone()])
    });
    for dialect in DIALECTS {
        // The token's claim is the identity, whatever the client sent.
        let r = ask(&gw, dialect, Some(&globex_token), None);
        assert_eq!(received(&r), globex, "{dialect}");
        let r = ask(&gw, dialect, Some(&globex_token), Some("acme"));
        assert_eq!(received(&r), globex, "{dialect}");
        // Without a token or a claim, nothing is left of the client's x-tenant.
        assert_no_identity(&ask(&gw, dialect, None, Some("acme")), dialect);
        assert_no_identity(&ask(&gw, dialect, Some(&no_tenant), Some("acme")), dialect);
    }
    drop(gw);

    // jwt_authn alone removes its claim_to_headers headers from the requests it sees, even
    // on a route where it is disabled (a bad token passes there).
    let gw = Gateway::start_with(&config, &[], |yaml| {
        disable_on_route(&jwt::before_toolsift(&yaml, std::slice::from_ref(&authn)))
    });
    assert_no_identity(
        &ask(&gw, "openai_chat", None, Some("acme")),
        "jwt_authn disabled",
    );
    let r = ask(&gw, "openai_chat", Some("not-a-token"), Some("acme"));
    assert_no_identity(&r, "jwt_authn disabled, a bad token");
    drop(gw);

    // Nothing before toolsift: the header is whatever the client says. header_mutation alone
    // takes that away.
    let gw = Gateway::start(&config);
    let r = ask(&gw, "openai_chat", None, Some("acme"));
    assert_eq!(
        received(&r),
        acme,
        "without a filter that clears it, a client names its tenant"
    );
    drop(gw);
    let gw = Gateway::start_with(&config, &[], |yaml| {
        jwt::before_toolsift(&yaml, std::slice::from_ref(&strip))
    });
    assert_no_identity(
        &ask(&gw, "openai_chat", None, Some("acme")),
        "header_mutation alone",
    );
}

/// The rendered Envoy YAML with `jwt_authn` disabled on its one route.
fn disable_on_route(yaml: &str) -> String {
    with_route_config(yaml, json!({"disabled": true}))
}

/// The rendered Envoy YAML with `jwt_authn`'s per-route config `config` on its one route.
fn with_route_config(yaml: &str, config: Value) -> String {
    let route = "              - match: { prefix: \"/\" }\n";
    assert!(yaml.contains(route), "the route of envoy.yaml");
    let mut config = config;
    config["@type"] =
        json!("type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.PerRouteConfig");
    let per_route = json!({ "envoy.filters.http.jwt_authn": config });
    yaml.replacen(
        route,
        &format!("{route}                typed_per_filter_config: {per_route}\n"),
        1,
    )
}

/// Under access rules a request toolsift cannot read is never let through (its tools could be
/// any): a compressed body, one that is not JSON, one past `max_body_bytes`, get a 400 naming
/// the reason, and the upstream never gets their body. Without access rules they pass.
#[test]
fn an_unreadable_request_is_rejected_not_passed() {
    let key = SigningKey::generate("k1");
    let gw = start(
        &config(rules("hidden"), json!({"max_body_bytes": 60000})),
        &key,
    );
    let sre = format!("Bearer {}", key.token(json!({"groups": ["sre"]})));
    let auth = ("authorization", sre.as_str());
    for dialect in DIALECTS {
        let body = request(
            dialect,
            "Fetch the logs of the checkout pod",
            Extras::default(),
        );
        let body = body.to_string();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, body.as_bytes()).unwrap();
        let gzipped = gz.finish().unwrap();
        let p = path(dialect, false);
        let r = gw.post(p, &[auth, ("content-encoding", "gzip")], &gzipped);
        assert_eq!(r.status, 400, "{dialect}: {}", r.text());
        assert_eq!(r.json()["error"]["code"], "compressed");
        assert_eq!(r.header("x-toolsift"), Some("skipped=compressed"));
        let r = gw.post(p, &[auth], &body.as_bytes()[..body.len() / 2]);
        assert_eq!(r.status, 400, "{dialect}: {}", r.text());
        assert_eq!(r.json()["error"]["code"], "malformed_json");
        let r = common::http(
            gw.port,
            "POST",
            p,
            &[auth, ("content-type", "text/plain")],
            body.as_bytes(),
        );
        assert_eq!(r.status, 400, "{dialect}: {}", r.text());
        assert_eq!(r.json()["error"]["code"], "content_type");
        let padded = body.replacen('{', &format!("{{\"pad\": \"{}\",", "x".repeat(60000)), 1);
        let r = gw.post(
            p,
            &[auth, ("transfer-encoding", "chunked")],
            padded.as_bytes(),
        );
        assert_eq!(r.status, 400, "{dialect}: {}", r.text());
        assert_eq!(r.json()["error"]["code"], "too_large");
    }
    assert_eq!(bodies(&gw), 0, "no body reached the upstream");
    assert_eq!(
        gw.stat("toolsift.skipped.compressed"),
        DIALECTS.len() as u64
    );
}

/// What was denied is said three ways, the same: `x-toolsift` (`denied=N`, and
/// `access=refused` for a 403), the access log's filter state, and the stats.
#[test]
fn headers_access_log_and_stats_say_what_was_denied() {
    let log =
        std::env::temp_dir().join(format!("toolsift-access-rules-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let key = SigningKey::generate("k1");
    let provider = jwt::provider(jwt::ISSUER, &[&key], "jwt_payload");
    let filters = [(
        "envoy.filters.http.jwt_authn",
        jwt::jwt_authn(&[("test", provider)]),
    )];
    // Its own Envoy: it reads /stats/prometheus.
    let gw = Gateway::start_alone_with(
        &config(rules("refused"), json!({"min_tools": 20})),
        &[],
        |yaml| common::access_log_to_file(&jwt::before_toolsift(&yaml, &filters), &log),
    );
    let sre = key.token(json!({"groups": ["sre"]}));
    let admin = key.token(json!({"groups": ["admins"]}));
    let question = "Fetch the logs of the checkout pod";
    let sent = [
        // sre's ten allowed tools are no more than min_tools: all of them, unranked.
        (
            Some(&sre),
            Extras::default(),
            200,
            "kept=10 total=80 denied=70",
        ),
        (
            None,
            Extras::default(),
            403,
            "kept=0 total=80 denied=80 access=refused",
        ),
        (
            Some(&sre),
            Extras {
                choice: Some("refund_charge"),
                ..Extras::default()
            },
            403,
            "kept=0 total=80 denied=70 access=refused",
        ),
        (
            Some(&admin),
            Extras::default(),
            200,
            "kept=5 total=80 denied=2",
        ),
        (
            Some(&admin),
            Extras {
                tools: Some(20),
                ..Extras::default()
            },
            200,
            "kept=20 total=20 skipped=few_tools",
        ),
        (
            Some(&sre),
            Extras {
                tools: Some(20),
                ..Extras::default()
            },
            200,
            "kept=1 total=20 denied=19",
        ),
    ];
    for (token, x, status, said) in &sent {
        let r = send(
            &gw,
            "openai_chat",
            false,
            token.map(String::as_str),
            &request("openai_chat", question, *x),
        );
        assert_eq!(r.status, *status, "{said}: {}", r.text());
        assert_eq!(r.header("x-toolsift"), Some(*said));
    }
    let logged = common::access_log_lines(&log, sent.len());
    assert_eq!(logged.len(), sent.len(), "{logged:?}");
    for (line, (_, _, status, said)) in logged.iter().zip(&sent) {
        // The record starts with what `x-toolsift` said (then tokens and verdicts).
        assert_eq!(common::record(line).0, *said, "{line}");
        assert_eq!(line["status"], *status, "{line}");
    }
    assert_eq!(gw.stat("toolsift.access.denied.request"), 2);
    assert_eq!(
        gw.stat("toolsift.access.denied.tools"),
        70 + 80 + 70 + 2 + 19
    );
    for surface in ["call", "mcp_request", "mcp_tools", "mcp_call"] {
        assert_eq!(gw.stat(&format!("toolsift.access.denied.{surface}")), 0);
    }
    // Tools in and out count what went upstream, the refused requests' tools in only.
    assert_eq!(gw.stat("toolsift.tools_out"), 10 + 5 + 20 + 1);
    let prometheus = gw.admin_get("/stats/prometheus");
    assert!(
        prometheus.contains("toolsift_access_denied_tools{} 241"),
        "{}",
        prometheus
            .lines()
            .filter(|l| l.contains("access"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// A request the client signed (AWS SigV4; here a presigned URL, so the token can ride in
/// `authorization`) cannot be rewritten without breaking its signature: under access rules
/// it is read, goes upstream byte for byte when it carries no tool its caller may not see,
/// and is refused (403 naming the first denied tool) when it does.
#[test]
fn a_signed_request_is_read_and_refused_if_it_carries_denied_tools() {
    let key = SigningKey::generate("k1");
    let gw = start(&config(rules("hidden"), json!({})), &key);
    let admin = format!("Bearer {}", key.token(json!({"groups": ["admins"]})));
    let presigned = "/model/anthropic.claude-sonnet-4-v1:0/converse?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=0123abcd";
    let question = "List the files in the repository";
    // The first 40 fixture tools: every one allowed to admins.
    let allowed = request(
        "bedrock",
        question,
        Extras {
            tools: Some(40),
            ..Extras::default()
        },
    )
    .to_string();
    // The scripted model answers (under access rules every answer is read, so an echo of the
    // request would be refused as no answer); its log shows what it received.
    let r = gw.post(
        presigned,
        &[
            ("authorization", &admin),
            ("x-demo-model", "scripted"),
            ("x-demo-want", "get_current_time"),
            ("x-demo-script", "answer"),
        ],
        allowed.as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let received = &common::llm::upstream_log(&gw).last().unwrap()["body"].clone();
    let sent: Value = serde_json::from_str(&allowed).unwrap();
    assert_eq!(received, &sent, "unchanged, every tool included");
    assert_eq!(
        r.header("x-toolsift"),
        Some("kept=40 total=40 skipped=signed")
    );
    // All 80: delete_file and run_shell_command are denied to everybody.
    let all = request("bedrock", question, Extras::default()).to_string();
    let before = bodies(&gw);
    let r = gw.post(presigned, &[("authorization", &admin)], all.as_bytes());
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(
        r.json()["error"]["message"],
        "toolsift: access denied: tool `delete_file`: denied by access rule 3 (`delete_*`)"
    );
    assert_eq!(
        r.header("x-toolsift"),
        Some("kept=0 total=80 denied=2 access=refused")
    );
    assert_eq!(bodies(&gw), before);
    // Unsigned, the same request is filtered instead.
    let r = gw.post(
        path("bedrock", false),
        &[("authorization", &admin)],
        all.as_bytes(),
    );
    assert_eq!(r.header("x-toolsift"), Some("kept=5 total=80 denied=2"));
}

/// The 80 fixture tools and seven named for the shipped configurations' rules (the issue's
/// example): `k8s_*`, `invoice_*`, `acme_*`, and two the `*delete*` / `*drop*` rule denies.
fn shipped_catalog() -> Value {
    let mut tools = tools_for("openai_chat");
    for (name, description) in [
        ("k8s_get_pods", "List the pods of a Kubernetes namespace"),
        (
            "k8s_scale_deployment",
            "Scale a Kubernetes deployment to a number of replicas",
        ),
        ("k8s_delete_pod", "Delete a Kubernetes pod"),
        (
            "invoice_create",
            "Create an invoice for a customer in a currency",
        ),
        ("invoice_delete", "Delete an invoice"),
        ("acme_crm_lookup", "Look a customer up in the ACME CRM"),
        ("drop_table", "Drop a database table"),
    ] {
        tools
            .as_array_mut()
            .unwrap()
            .push(json!({"type": "function", "function": {
            "name": name, "description": description,
            "parameters": {"type": "object", "properties": {}}}}));
    }
    tools
}

/// What the shipped configurations' rules let each caller see of [`shipped_catalog`]: every
/// one no more than `min_tools` (20), so all of them, unranked.
fn shipped_allowed(groups: &[&str], tenant: Option<&str>) -> BTreeSet<String> {
    let mut allowed = BTreeSet::new();
    let catalog = shipped_catalog();
    for tool in catalog.as_array().unwrap() {
        let name = tool["function"]["name"].as_str().unwrap();
        let sre = groups.iter().any(|g| *g == "sre" || *g == "admins")
            && (name.starts_with("k8s_") || name.starts_with("get_"));
        let finance = groups.contains(&"finance") && name.starts_with("invoice_");
        let acme = tenant == Some("acme") && name.starts_with("acme_");
        let denied = name.contains("delete") || name.contains("drop");
        if (sre || finance || acme) && !denied {
            allowed.insert(name.to_owned());
        }
    }
    allowed
}

/// docs/examples/envoy-access.yaml as shipped, run: its listener, admin and `llm` ports moved,
/// its `idp` cluster (the identity provider, TLS) pointed at a local JWKS endpoint serving
/// `key`, the `.wasm` path made absolute, its access log written to the file `log` instead of
/// stdout. Nothing else changes.
fn start_shipped(key: &SigningKey, log: &std::path::Path) -> (Gateway, jwt::JwksServer) {
    let jwks = jwt::JwksServer::start(&[key]);
    let mut config = common::yaml::load_file("docs/examples/envoy-access.yaml").remove(0);
    let wasm = common::wasm_path();
    let gw = Gateway::start_rendered(&[], |ports| {
        config["admin"]["address"]["socket_address"]["port_value"] = json!(ports.admin);
        let listener = &mut config["static_resources"]["listeners"][0];
        listener["address"]["socket_address"]["port_value"] = json!(ports.listener);
        let hcm = &mut listener["filter_chains"][0]["filters"][0]["typed_config"];
        let logger = &mut hcm["access_log"][0];
        logger["name"] = json!("envoy.access_loggers.file");
        logger["typed_config"]["@type"] =
            json!("type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog");
        logger["typed_config"]["path"] = json!(log.to_str().unwrap());
        let filters = hcm["http_filters"].as_array_mut().unwrap();
        let toolsift = filters
            .iter_mut()
            .find(|f| f["name"] == "toolsift")
            .unwrap();
        toolsift["typed_config"]["config"]["vm_config"]["code"]["local"]["filename"] =
            json!(wasm.to_str().unwrap());
        for cluster in config["static_resources"]["clusters"]
            .as_array_mut()
            .unwrap()
        {
            let name = cluster["name"].as_str().unwrap().to_owned();
            let endpoint = &mut cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
                ["address"]["socket_address"];
            match name.as_str() {
                "llm" => endpoint["port_value"] = json!(ports.upstream),
                "idp" => {
                    *endpoint = json!({"address": "127.0.0.1", "port_value": jwks.port});
                    cluster["type"] = json!("STATIC");
                    let object = cluster.as_object_mut().unwrap();
                    object.remove("transport_socket");
                    object.remove("dns_lookup_family");
                }
                other => panic!("a cluster the test does not know: {other}"),
            }
        }
        config.to_string()
    });
    (gw, jwks)
}

/// The shipped plain-Envoy configuration enforces its rules: groups from the verified token's
/// payload in metadata, the tenant from `x-tenant` (the client's copy removed, the token's
/// claim copied in), no token refused, the token never forwarded, paths normalised before
/// toolsift reads them, only LLM paths routed.
#[test]
fn the_shipped_envoy_config_enforces_its_rules() {
    let key = SigningKey::generate("idp-1");
    let log = std::env::temp_dir().join(format!("toolsift-shipped-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let (gw, jwks) = start_shipped(&key, &log);
    assert!(
        jwks.fetches.load(std::sync::atomic::Ordering::SeqCst) >= 1,
        "JWKS fetched"
    );
    let issuer = "https://idp.example.com";
    let token = |claims: Value| {
        let mut claims = jwt::claims_with(issuer, claims);
        claims["aud"] = json!("llm-gateway");
        key.sign(&claims)
    };
    let body = json!({"model": "gpt-4.1", "messages": [{"role": "user", "content": "Scale the checkout deployment and send the invoice"}],
                      "tools": shipped_catalog()})
    .to_string();
    let ask = |token: Option<&str>, tenant: Option<&str>, path: &str| {
        let mut headers = vec![("authorization", "Bearer sk-client-provider-key")];
        if let Some(t) = token {
            headers.push(("x-caller-token", t));
        }
        if let Some(t) = tenant {
            headers.push(("x-tenant", t));
        }
        gw.post(path, &headers, body.as_bytes())
    };
    let chat = "/v1/chat/completions";
    let cases: [(Value, Option<&str>, BTreeSet<String>); 5] = [
        (
            json!({"groups": ["sre"]}),
            None,
            shipped_allowed(&["sre"], None),
        ),
        (
            json!({"groups": ["finance"]}),
            None,
            shipped_allowed(&["finance"], None),
        ),
        (
            json!({"tenant": "acme"}),
            None,
            shipped_allowed(&[], Some("acme")),
        ),
        (
            json!({"groups": ["sre"], "tenant": "acme"}),
            None,
            shipped_allowed(&["sre"], Some("acme")),
        ),
        // A client naming another tenant than its token's gets its token's.
        (
            json!({"groups": ["finance"]}),
            Some("acme"),
            shipped_allowed(&["finance"], None),
        ),
    ];
    for (claims, forged, expected) in &cases {
        let r = ask(Some(&token(claims.clone())), *forged, chat);
        assert_eq!(r.status, 200, "{claims}: {}", r.text());
        assert_eq!(&received(&r), expected, "{claims}");
        let denied = 87 - expected.len();
        assert_eq!(
            r.header("x-toolsift"),
            Some(format!("kept={} total=87 denied={denied}", expected.len()).as_str())
        );
    }
    assert_eq!(shipped_allowed(&["sre"], None).len(), 12);
    // No token, or only a forged tenant: no identity. A tenant no rule names: no tool.
    for (token_claims, tenant) in [(None, None), (None, Some("acme"))] {
        let r = ask(token_claims, tenant, chat);
        assert_eq!(r.status, 403, "{}", r.text());
        assert_eq!(r.json()["error"]["code"], "access_denied");
    }
    let r = ask(
        Some(&token(json!({"tenant": "globex"}))),
        Some("acme"),
        chat,
    );
    assert_eq!(r.status, 403, "{}", r.text());
    // A bad token: jwt_authn's 401.
    let r = ask(
        Some(&token(json!({"groups": ["sre"], "exp": 1}))),
        None,
        chat,
    );
    assert_eq!(r.status, 401, "{}", r.text());
    // A path the provider may normalise is normalised before toolsift reads it.
    let r = ask(None, None, "/v1/chat/%63ompletions");
    assert_eq!(r.status, 403, "{}", r.text());
    let r = ask(None, None, "/v1//chat/./completions");
    assert_eq!(r.status, 403, "{}", r.text());
    // Only /v1/ is routed.
    assert_eq!(ask(None, None, "/api/chat").status, 404);
    // A path under /v1/ toolsift does not govern is answered by toolsift (`unknown_paths`),
    // and counted; an LLM path is not.
    let r = ask(
        Some(&token(json!({"groups": ["sre"]}))),
        None,
        "/v1/embeddings",
    );
    assert_eq!(r.status, 404, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "unknown_path", "{}", r.text());
    // An outcome of its own in `x-toolsift` (and the access log), and its own stat.
    assert_eq!(
        r.header("x-toolsift"),
        Some("kept=0 total=0 access=refused refused=unknown_path")
    );
    assert_eq!(gw.stat("toolsift.access.unknown_paths"), 1);
    assert_eq!(gw.stat("toolsift.access.unknown_paths.refused"), 1);
    // What the provider got: the client's own key, the tenant of the token, no caller token.
    let scripted = [
        ("authorization", "Bearer sk-client-provider-key"),
        ("x-demo-model", "scripted"),
        ("x-demo-want", "acme_crm_lookup"),
    ];
    let caller = token(json!({"groups": ["sre"], "tenant": "acme"}));
    let mut headers = scripted.to_vec();
    headers.push(("x-caller-token", &caller));
    headers.push(("x-tenant", "globex"));
    let r = gw.post(chat, &headers, body.as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    let upstream_log = common::http(gw.upstream.port, "GET", "/scripted/log", &[], b"").json();
    let sent = &upstream_log[0]["headers"];
    assert_eq!(sent["authorization"], "Bearer sk-client-provider-key");
    assert_eq!(sent["x-tenant"], "acme");
    assert!(sent.get("x-caller-token").is_none(), "{sent}");
    // The access log: who called (the token's `sub`), and what toolsift did.
    let r = ask(
        Some(&token(json!({"sub": "alice", "groups": ["sre"]}))),
        None,
        chat,
    );
    let said = r.header("x-toolsift").unwrap().to_owned();
    let lines = common::access_log_lines(&log, 15);
    assert_eq!(lines.len(), 15, "one line per request");
    let last = lines.last().unwrap();
    assert_eq!(
        (&last["caller"], common::record(last).0),
        (&json!("alice"), said),
        "{last}"
    );
    let unknown = "kept=0 total=0 access=refused refused=unknown_path";
    assert_eq!(
        lines
            .iter()
            .filter(|l| common::record(l).0 == unknown)
            .count(),
        1,
        "{lines:?}"
    );
}

/// The one object of `kind` in the manifest at `path`.
fn manifest(path: &str, kind: &str) -> Value {
    common::yaml::load_file(path)
        .into_iter()
        .find(|o| o["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in {path}"))
}

/// A token as the shipped manifests' identity provider issues it (issuer and audience read
/// from `rule`: Istio's jwtRule or Envoy Gateway's provider).
fn manifest_token(key: &SigningKey, rule: &Value, claims: Value) -> String {
    let mut claims = jwt::claims_with(rule["issuer"].as_str().unwrap(), claims);
    claims["aud"] = rule["audiences"][0].clone();
    key.sign(&claims)
}

/// Sends [`shipped_catalog`] with the caller's token in the header the manifests read it from,
/// and a forged `x-tenant` the manifests' configurations never read; asserts what the upstream
/// got.
fn assert_manifest_rules(gw: &Gateway, header: &str, token: impl Fn(Value) -> String, what: &str) {
    let body = json!({"model": "gpt-4.1", "messages": [{"role": "user", "content": "Scale the checkout deployment"}],
                      "tools": shipped_catalog()})
    .to_string();
    let cases: [(Value, BTreeSet<String>); 4] = [
        (json!({"groups": ["sre"]}), shipped_allowed(&["sre"], None)),
        (
            json!({"groups": ["finance"]}),
            shipped_allowed(&["finance"], None),
        ),
        (
            json!({"tenant": "acme"}),
            shipped_allowed(&[], Some("acme")),
        ),
        // Space-separated scopes and groups arrays alike (Istio and Envoy Gateway normalise
        // some claims into arrays in the metadata).
        (
            json!({"groups": ["admins", "finance"], "scope": "read write"}),
            shipped_allowed(&["admins", "finance"], None),
        ),
    ];
    for (claims, expected) in &cases {
        let t = token(claims.clone());
        let headers = [(header, t.as_str()), ("x-tenant", "acme")];
        let r = gw.post("/v1/chat/completions", &headers, body.as_bytes());
        assert_eq!(r.status, 200, "{what} {claims}: {}", r.text());
        assert_eq!(&received(&r), expected, "{what} {claims}");
    }
    let r = gw.post(
        "/v1/chat/completions",
        &[("x-tenant", "acme")],
        body.as_bytes(),
    );
    assert_eq!(r.status, 403, "{what}: {}", r.text());
    assert_eq!(
        r.json()["error"]["message"],
        "toolsift: access denied: the request carries no caller identity"
    );
    let r = gw.post(
        "/v1/chat/completions",
        &[(header, "not-a-token")],
        body.as_bytes(),
    );
    assert_eq!(r.status, 401, "{what}: {}", r.text());
}

/// deploy/istio/access/: the WasmPlugin's `pluginConfig` behind the `jwt_authn` istiod builds
/// from the RequestAuthentication (pilot/pkg/security/authn/policy_applier.go: one provider
/// `origins-0`, `{provider OR allow_missing}` on every path, the token taken from its
/// `fromHeaders` and not forwarded, the payload under `payload` with `scope` and `permission`
/// split into arrays; up to Istio 1.20, under the issuer, unsplit).
#[test]
fn the_istio_manifests_enforce_their_rules() {
    let key = SigningKey::generate("idp-1");
    let plugin = manifest("deploy/istio/access/wasmplugin-access.yaml", "WasmPlugin");
    assert_eq!(plugin["spec"]["phase"], "AUTHZ");
    assert_eq!(plugin["spec"]["failStrategy"], "FAIL_CLOSE");
    let config = plugin["spec"]["pluginConfig"].to_string();
    let authn = manifest(
        "deploy/istio/access/requestauthentication.yaml",
        "RequestAuthentication",
    );
    let rule = &authn["spec"]["jwtRules"][0];
    let issuer = rule["issuer"].as_str().unwrap();
    let header = rule["fromHeaders"][0]["name"].as_str().unwrap();
    for (istio, payload_key, normalised) in [("1.21+", "payload", true), ("1.20", issuer, false)] {
        let mut provider = json!({
            "issuer": issuer,
            "audiences": rule["audiences"],
            "from_headers": [{"name": header}],
            "forward": rule["forwardOriginalToken"].as_bool().unwrap_or(false),
            "payload_in_metadata": payload_key,
            "local_jwks": {"inline_string": jwt::jwks(&[&key])},
        });
        if normalised {
            provider["normalize_payload_in_metadata"] =
                json!({"space_delimited_claims": ["permission", "scope"]});
        }
        let filters = [(
            "envoy.filters.http.jwt_authn",
            jwt::jwt_authn(&[("origins-0", provider)]),
        )];
        let gw = Gateway::start_with(&config, &[], |yaml| jwt::before_toolsift(&yaml, &filters));
        assert_manifest_rules(&gw, header, |c| manifest_token(&key, rule, c), istio);
    }
}

/// deploy/envoy-gateway/access/: the EnvoyExtensionPolicy's `config` behind the `jwt_authn`
/// Envoy Gateway builds from the SecurityPolicy (internal/xds/translator/jwt.go at d32f282:
/// the provider keyed `<name>_<hash>`, its payload under the provider's `name`, `scope` and
/// `scp` split into arrays, the token forwarded; the route's requirement by name, with
/// `allow_missing` for `optional: true`).
#[test]
fn the_envoy_gateway_manifests_enforce_their_rules() {
    let key = SigningKey::generate("idp-1");
    let policy = manifest(
        "deploy/envoy-gateway/access/envoyextensionpolicy-access.yaml",
        "EnvoyExtensionPolicy",
    );
    let wasm = &policy["spec"]["wasm"][0];
    assert_eq!(wasm["failOpen"], false);
    let config = wasm["config"].to_string();
    let security = manifest(
        "deploy/envoy-gateway/access/securitypolicy.yaml",
        "SecurityPolicy",
    );
    let jwt_spec = &security["spec"]["jwt"];
    let p = &jwt_spec["providers"][0];
    let name = p["name"].as_str().unwrap();
    let header = p["extractFrom"]["headers"][0]["name"].as_str().unwrap();
    let provider = json!({
        "issuer": p["issuer"],
        "audiences": p["audiences"],
        "payload_in_metadata": name,
        "forward": true,
        "normalize_payload_in_metadata": {"space_delimited_claims": ["scope", "scp"]},
        "from_headers": [{"name": header}],
        "local_jwks": {"inline_string": jwt::jwks(&[&key])},
    });
    let provider_key = format!("{name}_02327216cb0dba21");
    let mut requirement = json!({"provider_name": provider_key});
    if jwt_spec["optional"] == true {
        requirement =
            json!({"requires_any": {"requirements": [requirement, {"allow_missing": {}}]}});
    }
    let requirement_name = format!("{name}_3b6358ed75b16e41");
    let authn = json!({
        "@type": "type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication",
        "providers": {provider_key.clone(): provider},
        "requirement_map": {requirement_name.clone(): requirement},
    });
    let filters = [("envoy.filters.http.jwt_authn", authn)];
    let gw = Gateway::start_with(&config, &[], |yaml| {
        with_route_config(
            &jwt::before_toolsift(&yaml, &filters),
            json!({"requirement_name": requirement_name}),
        )
    });
    assert_manifest_rules(&gw, header, |c| manifest_token(&key, p, c), "envoy gateway");
}

/// Entries of the tools array that are not function tools are governed by the name their
/// dialect gives them: a provider built-in by its `type` (OpenAI's `file_search`), a Responses
/// `custom` tool by its `name` (even one named like a denied function); `default: deny` keeps
/// out what no rule allows.
#[test]
fn built_in_and_custom_entries_are_governed_by_their_names() {
    let key = SigningKey::generate("k1");
    let mut access = rules("hidden");
    access["rules"]
        .as_array_mut()
        .unwrap()
        .push(json!({"when": ["sre"], "allow": ["file_search"]}));
    let gw = start(&config(access, json!({})), &key);
    let auth = |groups: Value| format!("Bearer {}", key.token(json!({"groups": groups})));
    let mut body = request(
        "openai_responses",
        "Delete the file notes.txt",
        Extras::default(),
    );
    let tools = body["tools"].as_array_mut().unwrap();
    tools.push(json!({"type": "file_search", "vector_store_ids": ["vs_1"]}));
    tools.push(json!({"type": "custom", "name": "delete_file", "description": "Delete a file"}));
    // The scripted model answers; its log shows the tools it received.
    let send = |auth: &str| {
        let r = gw.post(
            path("openai_responses", false),
            &[
                ("authorization", auth),
                ("x-demo-model", "scripted"),
                ("x-demo-want", "get_current_time"),
                ("x-demo-script", "answer"),
            ],
            body.to_string().as_bytes(),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        let received = common::llm::upstream_log(&gw).last().unwrap()["body"]["tools"].clone();
        (r, received.as_array().unwrap().clone())
    };
    let (r, sent) = send(&auth(json!(["sre"])));
    let functions: BTreeSet<String> = sent
        .iter()
        .filter(|t| t["type"] == "function")
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(functions.is_subset(&set(&SRE)), "{functions:?}");
    assert!(sent.iter().any(|t| t["type"] == "file_search"), "{sent:?}");
    assert!(!sent.iter().any(|t| t["type"] == "custom"), "{sent:?}");
    assert_eq!(r.header("x-toolsift"), Some("kept=5 total=80 denied=71"));
    // finance has no rule for file_search: the default keeps it out too.
    let (r, sent) = send(&auth(json!(["finance"])));
    assert!(!sent.iter().any(|t| t["type"] != "function"), "{sent:?}");
    assert!(
        r.header("x-toolsift").unwrap().ends_with(" denied=73"),
        "{:?}",
        r.header("x-toolsift")
    );
}
