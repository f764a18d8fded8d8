//! Property tests of access rules across the surfaces a tool can pass, against an oracle
//! written here from the README's rules (not from `src/access/`): for random catalogs,
//! identities and rules, no denied tool is ever forwarded upstream, and a request left with no
//! tool it may see is refused, never forwarded empty.
//!
//! `PROPTEST_CASES` overrides the number of cases (default 10,000 per property).

use proptest::prelude::*;
use proptest::test_runner::{Config as Runner, TestRunner};
use serde_json::{Value, json};
use toolsift::access::Caller;
use toolsift::config::Config;
use toolsift::dialects::Dialect;
use toolsift::pipeline::{Engine, Skip};

/// Words tool names, patterns and groups are made of: few, so patterns and names collide.
const WORDS: [&str; 8] = [
    "get", "list", "delete", "drop", "pod", "invoice", "send", "user",
];
const GROUPS: [&str; 4] = ["a", "b", "c", "ops"];

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

/// The glob semantics the README gives (`*` any run, `?` one character), written plainly.
fn glob(pattern: &[char], text: &[char]) -> bool {
    match (pattern.first(), text.first()) {
        (None, None) => true,
        (Some('*'), _) => {
            glob(&pattern[1..], text) || (!text.is_empty() && glob(pattern, &text[1..]))
        }
        (Some('?'), Some(_)) => glob(&pattern[1..], &text[1..]),
        (Some(p), Some(t)) if p == t => glob(&pattern[1..], &text[1..]),
        _ => false,
    }
}

fn matches(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    glob(&p, &t)
}

#[derive(Debug, Clone)]
struct Rule {
    when: Vec<String>,
    allow: Vec<String>,
    deny: Vec<String>,
}

#[derive(Debug, Clone)]
struct Case {
    tools: Vec<String>,
    rules: Vec<Rule>,
    default_allow: bool,
    refused: bool,
    /// `None`: no identity source configured (rules then apply to `*` only).
    caller: Option<Vec<String>>,
    dialect: usize,
    top_k: usize,
    min_tools: usize,
    always_include: Vec<String>,
    /// Index of a tool `tool_choice` names.
    choice: Option<usize>,
    /// Index of a tool the conversation already called.
    called: Option<usize>,
}

impl Case {
    /// The oracle: may the caller see `name`?
    fn allowed(&self, name: &str) -> bool {
        let values: &[String] = match &self.caller {
            Some(values) if values.is_empty() => return false,
            Some(values) => values,
            None => &[],
        };
        let applies = |r: &Rule| {
            r.when
                .iter()
                .any(|w| w == "*" || values.iter().any(|v| matches(w, v)))
        };
        let applicable: Vec<&Rule> = self.rules.iter().filter(|r| applies(r)).collect();
        if applicable
            .iter()
            .any(|r| r.deny.iter().any(|p| matches(p, name)))
        {
            return false;
        }
        self.default_allow
            || applicable
                .iter()
                .any(|r| r.allow.iter().any(|p| matches(p, name)))
    }

    fn config(&self) -> String {
        let rules: Vec<Value> = self
            .rules
            .iter()
            .map(|r| {
                let mut o = json!({"when": r.when});
                if !r.allow.is_empty() {
                    o["allow"] = json!(r.allow);
                }
                if !r.deny.is_empty() {
                    o["deny"] = json!(r.deny);
                }
                o
            })
            .collect();
        let mut access = json!({
            "default": if self.default_allow { "allow" } else { "deny" },
            "denied": if self.refused { "refused" } else { "hidden" },
            "rules": rules,
        });
        if self.caller.is_some() {
            access["identity"] = json!([{"header": "x-group"}]);
        }
        json!({"top_k": self.top_k, "min_tools": self.min_tools,
               "always_include": self.always_include, "access": access})
        .to_string()
    }
}

fn word() -> impl Strategy<Value = &'static str> {
    prop::sample::select(WORDS.to_vec())
}

/// A pattern: one or two words, `*` or `?` around or between.
fn pattern() -> impl Strategy<Value = String> {
    (word(), word(), 0..7u8).prop_map(|(a, b, shape)| match shape {
        0 => format!("{a}_*"),
        1 => format!("*{a}*"),
        2 => format!("*_{a}"),
        3 => format!("{a}_{b}"),
        4 => "*".to_owned(),
        5 => format!("{a}?{b}*"),
        _ => format!("*{a}*{b}*"),
    })
}

fn rule() -> impl Strategy<Value = Rule> {
    let when = prop::collection::vec(
        prop::sample::select(vec!["a", "b", "c", "ops", "*", "o*", "?"]).prop_map(str::to_owned),
        1..3,
    );
    (
        when,
        prop::collection::vec(pattern(), 0..3),
        prop::collection::vec(pattern(), 0..3),
    )
        .prop_filter("a rule allows or denies", |(_, a, d)| {
            !a.is_empty() || !d.is_empty()
        })
        .prop_map(|(when, allow, deny)| Rule { when, allow, deny })
}

fn case() -> impl Strategy<Value = Case> {
    let names = prop::collection::vec((word(), word(), 0..3u8), 1..40).prop_map(|parts| {
        parts
            .into_iter()
            .enumerate()
            .map(|(i, (a, b, shape))| match shape {
                0 => format!("{a}_{b}_{i}"),
                1 => format!("{a}_{i}"),
                _ => format!("{a}{b}{i}"),
            })
            .collect::<Vec<String>>()
    });
    let caller = prop::option::of(prop::collection::vec(
        prop::sample::select(GROUPS.to_vec()).prop_map(str::to_owned),
        0..3,
    ));
    (
        names,
        prop::collection::vec(rule(), 0..6),
        any::<bool>(),
        any::<bool>(),
        caller,
        0..6usize,
        1..6usize,
        prop::sample::select(vec![0usize, 3, 20]),
        prop::collection::vec(pattern(), 0..2),
        prop::option::of(any::<prop::sample::Index>()),
        prop::option::of(any::<prop::sample::Index>()),
    )
        .prop_map(
            |(
                tools,
                rules,
                default_allow,
                refused,
                caller,
                dialect,
                top_k,
                min_tools,
                always,
                choice,
                called,
            )| {
                let n = tools.len();
                Case {
                    tools,
                    rules,
                    default_allow,
                    refused,
                    caller,
                    dialect,
                    top_k,
                    min_tools,
                    always_include: always,
                    choice: choice.map(|i| i.index(n)),
                    called: called.map(|i| i.index(n)),
                }
            },
        )
}

const DIALECTS: [Dialect; 6] = [
    Dialect::OpenaiChat,
    Dialect::OpenaiResponses,
    Dialect::Anthropic,
    Dialect::Gemini,
    Dialect::Bedrock,
    Dialect::Ollama,
];

/// A request body of `dialect` with these tools, a question, and the pins asked for.
fn body(case: &Case) -> String {
    let dialect = DIALECTS[case.dialect];
    let schema = json!({"type": "object", "properties": {"x": {"type": "string", "description": "the pod"}}});
    let tool = |name: &str| -> Value {
        let description = format!("Does {} things", name.replace('_', " "));
        match dialect {
            Dialect::OpenaiChat | Dialect::Ollama => {
                json!({"type": "function", "function": {"name": name, "description": description, "parameters": schema}})
            }
            Dialect::OpenaiResponses => {
                json!({"type": "function", "name": name, "description": description, "parameters": schema})
            }
            Dialect::Anthropic => {
                json!({"name": name, "description": description, "input_schema": schema})
            }
            Dialect::Gemini => {
                json!({"name": name, "description": description, "parameters": schema})
            }
            Dialect::Bedrock => {
                json!({"toolSpec": {"name": name, "description": description, "inputSchema": {"json": schema}}})
            }
        }
    };
    let tools: Vec<Value> = case.tools.iter().map(|n| tool(n)).collect();
    let question = "get the pod logs and send the invoice to the user";
    let called = case.called.map(|i| case.tools[i].clone());
    let choice = case.choice.map(|i| case.tools[i].clone());
    let v = match dialect {
        Dialect::OpenaiChat | Dialect::Ollama => {
            let mut messages = vec![json!({"role": "user", "content": question})];
            if let Some(c) = &called {
                messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": c, "arguments": "{}"}}]}));
                messages.push(json!({"role": "tool", "tool_call_id": "c1", "content": "ok"}));
            }
            let mut v = json!({"model": "m", "messages": messages, "tools": tools});
            if let Some(c) = &choice {
                v["tool_choice"] = json!({"type": "function", "function": {"name": c}});
            }
            v
        }
        Dialect::OpenaiResponses => {
            let mut input = vec![json!({"role": "user", "content": question})];
            if let Some(c) = &called {
                input.push(
                    json!({"type": "function_call", "call_id": "c1", "name": c, "arguments": "{}"}),
                );
                input
                    .push(json!({"type": "function_call_output", "call_id": "c1", "output": "ok"}));
            }
            let mut v = json!({"model": "m", "input": input, "tools": tools});
            if let Some(c) = &choice {
                v["tool_choice"] = json!({"type": "function", "name": c});
            }
            v
        }
        Dialect::Anthropic => {
            let mut messages = vec![json!({"role": "user", "content": question})];
            if let Some(c) = &called {
                messages.push(json!({"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": c, "input": {}}]}));
                messages.push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "ok"}]}));
            }
            let mut v =
                json!({"model": "m", "max_tokens": 10, "messages": messages, "tools": tools});
            if let Some(c) = &choice {
                v["tool_choice"] = json!({"type": "tool", "name": c});
            }
            v
        }
        Dialect::Gemini => {
            let mut contents = vec![json!({"role": "user", "parts": [{"text": question}]})];
            if let Some(c) = &called {
                contents.push(
                    json!({"role": "model", "parts": [{"functionCall": {"name": c, "args": {}}}]}),
                );
                contents.push(json!({"role": "user", "parts": [{"functionResponse": {"name": c, "response": {}}}]}));
            }
            let mut v = json!({"contents": contents, "tools": [{"functionDeclarations": tools}]});
            if let Some(c) = &choice {
                v["toolConfig"] =
                    json!({"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": [c]}});
            }
            v
        }
        Dialect::Bedrock => {
            let mut messages = vec![json!({"role": "user", "content": [{"text": question}]})];
            if let Some(c) = &called {
                messages.push(json!({"role": "assistant", "content": [{"toolUse": {"toolUseId": "c1", "name": c, "input": {}}}]}));
                messages.push(json!({"role": "user", "content": [{"toolResult": {"toolUseId": "c1", "content": [{"text": "ok"}]}}]}));
            }
            let mut tool_config = json!({"tools": tools});
            if let Some(c) = &choice {
                tool_config["toolChoice"] = json!({"tool": {"name": c}});
            }
            json!({"messages": messages, "toolConfig": tool_config})
        }
    };
    v.to_string()
}

/// The function tools' names a provider reads from a forwarded body.
fn forwarded(dialect: Dialect, body: &str) -> Vec<String> {
    let v: Value = serde_json::from_str(body).unwrap();
    let names = |tools: &Value, at: &dyn Fn(&Value) -> Option<String>| -> Vec<String> {
        tools
            .as_array()
            .map_or_else(Vec::new, |a| a.iter().filter_map(at).collect())
    };
    let s = |v: &Value| v.as_str().map(str::to_owned);
    match dialect {
        Dialect::OpenaiChat | Dialect::Ollama => names(&v["tools"], &|t| s(&t["function"]["name"])),
        Dialect::OpenaiResponses | Dialect::Anthropic => names(&v["tools"], &|t| s(&t["name"])),
        Dialect::Gemini => v["tools"].as_array().map_or_else(Vec::new, |groups| {
            groups
                .iter()
                .flat_map(|g| names(&g["functionDeclarations"], &|t| s(&t["name"])))
                .collect()
        }),
        Dialect::Bedrock => names(&v["toolConfig"]["tools"], &|t| s(&t["toolSpec"]["name"])),
    }
}

#[test]
fn no_denied_tool_is_ever_forwarded() {
    let mut runner = TestRunner::new(Runner {
        cases: cases(),
        failure_persistence: None,
        ..Runner::default()
    });
    runner
        .run(&case(), |case| {
            let config = Config::from_json(case.config().as_bytes()).unwrap();
            let mut engine = Engine::new(config);
            let caller = Caller::new(case.caller.clone().unwrap_or_default());
            let grant = engine.grant(&caller);
            let dialect = DIALECTS[case.dialect];
            let body = body(&case);
            let allowed: Vec<bool> = case.tools.iter().map(|n| case.allowed(n)).collect();
            match engine.analyse_as(dialect, &body, grant.as_ref()) {
                Ok(analysis) => {
                    let governed = analysis.access.as_ref().unwrap();
                    prop_assert_eq!(governed.denied, allowed.iter().filter(|a| !**a).count());
                    if let Some(denial) = &governed.denial {
                        // Refused whole: never a request with no tool. A denial with tools left
                        // is a tool_choice of a denied tool under `refused`.
                        if allowed.iter().any(|a| *a) {
                            prop_assert!(case.refused, "{denial:?}");
                            let named = denial.tool.clone().unwrap();
                            prop_assert!(!case.allowed(&named));
                        }
                        return Ok(());
                    }
                    prop_assert!(allowed.iter().any(|a| *a), "forwarded with no tool allowed");
                    let out = analysis.rewrite(&body).unwrap_or(body.clone());
                    let sent = forwarded(dialect, &out);
                    prop_assert!(!sent.is_empty());
                    for name in &sent {
                        prop_assert!(case.allowed(name), "denied `{name}` forwarded");
                    }
                    // Every allowed tool under min_tools stays.
                    let allowed_count = allowed.iter().filter(|a| **a).count();
                    if allowed_count <= case.min_tools {
                        prop_assert_eq!(sent.len(), allowed_count);
                    }
                }
                Err(skipped) => {
                    // Passed unchanged: only when nothing was denied.
                    prop_assert_eq!(skipped.reason, Skip::FewTools);
                    prop_assert!(
                        allowed.iter().all(|a| *a),
                        "a denied tool passed with {skipped:?}"
                    );
                }
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn the_oracle_and_the_policy_agree_on_every_tool() {
    let mut runner = TestRunner::new(Runner {
        cases: cases(),
        failure_persistence: None,
        ..Runner::default()
    });
    runner
        .run(&case(), |case| {
            let config = Config::from_json(case.config().as_bytes()).unwrap();
            let engine = Engine::new(config);
            let grant = engine
                .grant(&Caller::new(case.caller.clone().unwrap_or_default()))
                .unwrap();
            for name in &case.tools {
                let decided = grant.tool(name, &toolsift::access::Annotations::default());
                prop_assert_eq!(
                    decided.allowed(),
                    case.allowed(name),
                    "{}: {:?}",
                    name,
                    decided
                );
            }
            Ok(())
        })
        .unwrap();
}

/// The allowed set is the same on every surface, and no denied tool is found, listed or
/// delivered as a call: for the same random case, search mode's first request shows only
/// allowed tools and `find_tools` finds only allowed ones (filtered before `limit`); the MCP
/// catalog's mask is the oracle's; a model turn calling tools has every denied call dropped
/// and no allowed one, in filter mode (the answer check) and search mode.
#[test]
fn no_denied_tool_is_found_listed_or_delivered() {
    use toolsift::dialects::{Call, Reply};
    use toolsift::search::plan::{HeaderRoom, Planned, plan};
    use toolsift::search::round::{Next, Session};

    let mut runner = TestRunner::new(Runner {
        cases: cases(),
        failure_persistence: None,
        ..Runner::default()
    });
    let surfaces = (case(), prop::collection::vec(word(), 1..4), 1..8usize);
    runner
        .run(&surfaces, |(case, query_words, limit)| {
            // The search-mode twin of the case: the same rules and tools, so every surface
            // can be compared; min_tools 0, so every request is governed and searched.
            let mut search: Value = serde_json::from_str(&case.config()).unwrap();
            search["mode"] = json!("search");
            search["min_tools"] = json!(0);
            let config = Config::from_json(search.to_string().as_bytes()).unwrap();
            let mut engine = Engine::new(config.clone());
            let caller = Caller::new(case.caller.clone().unwrap_or_default());
            let grant = engine.grant(&caller).unwrap();
            let dialect = DIALECTS[case.dialect];
            let body = body(&case);
            let analysis = engine.analyse_as(dialect, &body, Some(&grant)).unwrap();
            let name = |e: usize| analysis.catalog.name(e).map(str::to_owned);

            // Request side, search mode: shown and findable tools are allowed ones.
            if analysis.access.as_ref().unwrap().denial.is_none() {
                if let Some(Planned::Search(p)) =
                    plan(&config, &analysis, &body, HeaderRoom::default())
                {
                    for (e, shown) in p.visible.iter().enumerate() {
                        if let (true, Some(n)) = (*shown, name(e)) {
                            prop_assert!(case.allowed(&n), "`{n}` shown in search mode");
                        }
                    }
                    let session = Session::new(&config, &analysis, &body, p);
                    let query = query_words.join(" ");
                    let found = session.search(&query, limit);
                    prop_assert!(found.len() <= limit);
                    for e in found {
                        let n = name(e).unwrap();
                        prop_assert!(case.allowed(&n), "`{n}` found by {query:?}");
                    }
                }
            }

            // MCP: the server catalog's mask is the oracle's.
            let page = json!({"tools": case.tools.iter()
                .map(|n| json!({"name": n, "description": "d", "inputSchema": {"type": "object"}}))
                .collect::<Vec<_>>()});
            let catalog = toolsift::mcp::catalog::ServerCatalog::build(vec![
                toolsift::mcp::catalog::page(&page.to_string()).unwrap(),
            ]);
            let mask = catalog.allowed_for(&grant);
            for (i, n) in case.tools.iter().enumerate() {
                let at = catalog.position(n).unwrap();
                prop_assert_eq!(mask[at], case.allowed(n), "MCP `{}` (tool {})", n, i);
            }

            // Response side: a turn calling every tool (and one the request does not have).
            let mut calls: Vec<Call> = case
                .tools
                .iter()
                .enumerate()
                .map(|(i, n)| Call {
                    id: format!("c{i}"),
                    name: n.clone(),
                    arguments: "{}".to_owned(),
                })
                .collect();
            calls.push(Call {
                id: "cx".to_owned(),
                name: "drop_user_invented".to_owned(),
                arguments: "{}".to_owned(),
            });
            let reply = Reply {
                calls: calls.clone(),
                ..Reply::default()
            };
            let mut guard = Session::guard(dialect, grant.clone());
            match guard.on_reply(&reply) {
                Next::Deliver(edits) => {
                    for call in &calls {
                        let dropped = edits.drop.contains(&call.id);
                        prop_assert_eq!(
                            dropped,
                            !case.allowed(&call.name),
                            "`{}` dropped: {}",
                            call.name,
                            dropped
                        );
                    }
                }
                Next::FollowUp(_) => prop_assert!(false, "the answer check never follows up"),
            }
            Ok(())
        })
        .unwrap();
}

/// The records of `verdict` on `surface` a grant's ledger holds, as (rule, tool) pairs.
fn recorded(
    grant: &toolsift::access::Grant,
    verdict: toolsift::access::judge::Verdict,
    surface: toolsift::access::Surface,
) -> std::collections::BTreeSet<(String, String)> {
    grant
        .ledger()
        .records()
        .into_iter()
        .filter(|r| r.verdict == verdict && r.surface == surface)
        .map(|r| (r.rule, r.tool.unwrap_or_else(|| "-".to_owned())))
        .collect()
}

/// The case's config with `access.mode: audit`.
fn audited(case: &Case) -> Config {
    let mut v: Value = serde_json::from_str(&case.config()).unwrap();
    v["access"]["mode"] = json!("audit");
    Config::from_json(v.to_string().as_bytes()).unwrap()
}

/// A model turn calling every tool of the case, and one the request does not have.
fn every_call(case: &Case) -> toolsift::dialects::Reply {
    use toolsift::dialects::{Call, Reply};
    let mut calls: Vec<Call> = case
        .tools
        .iter()
        .enumerate()
        .map(|(i, n)| Call {
            id: format!("c{i}"),
            name: n.clone(),
            arguments: "{}".to_owned(),
        })
        .collect();
    calls.push(Call {
        id: "cx".to_owned(),
        name: "drop_user_invented".to_owned(),
        arguments: "{}".to_owned(),
    });
    Reply {
        calls,
        ..Reply::default()
    }
}

/// Audit mode makes the enforced decisions and carries out none: for random catalogs,
/// identities and rules, on every surface (a request's tools and its refusal, the model's
/// calls, an MCP server's tools and calls), what audit records as `would_deny` is exactly what
/// enforcing denies (the same tools, by the same rule), and audit's request goes upstream as
/// with no access rules at all; the answer check drops nothing, MCP hides and refuses nothing.
#[test]
fn audit_would_deny_exactly_what_enforce_denies() {
    use toolsift::access::judge::Verdict;
    use toolsift::access::{Annotations, Grant, Surface};
    use toolsift::mcp::govern::check_call;
    use toolsift::search::round::{Next, Session};

    let mut runner = TestRunner::new(Runner {
        cases: cases(),
        failure_persistence: None,
        ..Runner::default()
    });
    runner
        .run(&case(), |case| {
            let dialect = DIALECTS[case.dialect];
            let body = body(&case);
            let caller = Caller::new(case.caller.clone().unwrap_or_default());
            let enforce_config = Config::from_json(case.config().as_bytes()).unwrap();
            let mut enforce = Engine::new(enforce_config.clone());
            let mut audit = Engine::new(audited(&case));
            let enforced = enforce.grant(&caller).unwrap();
            let audits = audit.grant(&caller).unwrap();
            prop_assert!(enforced.enforces() && !audits.enforces());

            // Request side: the tools enforcing takes out, and whether it refuses.
            let mut denied_tools = std::collections::BTreeSet::new();
            let mut refused = false;
            if let Ok(a) = enforce.analyse_as(dialect, &body, Some(&enforced)) {
                let g = a.access.as_ref().unwrap();
                for e in 0..g.allowed.len() {
                    if let (Some(n), false) = (a.catalog.governed_name(e), g.allowed[e]) {
                        denied_tools.insert(n.to_owned());
                    }
                }
                refused = g.denial.is_some();
            }
            let audited_request = audit.analyse_as(dialect, &body, Some(&audits));
            for surface in [Surface::Tools, Surface::Request] {
                let denied = recorded(&enforced, Verdict::Deny, surface);
                let would = recorded(&audits, Verdict::WouldDeny, surface);
                prop_assert_eq!(&denied, &would, "{:?}", surface);
                prop_assert!(recorded(&audits, Verdict::Deny, surface).is_empty());
            }
            let would_tools: std::collections::BTreeSet<String> =
                recorded(&audits, Verdict::WouldDeny, Surface::Tools)
                    .into_iter()
                    .map(|(_, t)| t)
                    .collect();
            prop_assert_eq!(&would_tools, &denied_tools);
            prop_assert_eq!(
                !recorded(&audits, Verdict::WouldDeny, Surface::Request).is_empty(),
                refused
            );
            // Audit's request goes as it would without access rules.
            let mut open: Value = serde_json::from_str(&case.config()).unwrap();
            open.as_object_mut().unwrap().remove("access");
            let mut plain = Engine::new(Config::from_json(open.to_string().as_bytes()).unwrap());
            let unruled = plain.analyse_as(dialect, &body, None);
            match (&audited_request, &unruled) {
                (Ok(a), Ok(u)) => {
                    let g = a.access.as_ref().unwrap();
                    prop_assert!(g.denial.is_none() && g.denied == 0);
                    prop_assert_eq!(a.rewrite(&body), u.rewrite(&body));
                }
                (Err(a), Err(u)) => prop_assert_eq!(a.reason, u.reason),
                (a, u) => prop_assert!(false, "audit {:?} unruled {:?}", a.is_ok(), u.is_ok()),
            }

            // Response side: the calls the answer check drops.
            let reply = every_call(&case);
            let drops = |grant: &Grant| -> Vec<String> {
                match Session::guard(dialect, grant.clone()).on_reply(&reply) {
                    Next::Deliver(edits) => reply
                        .calls
                        .iter()
                        .filter(|c| edits.drop.contains(&c.id))
                        .map(|c| c.name.clone())
                        .collect(),
                    Next::FollowUp(_) => vec!["a follow-up".to_owned()],
                }
            };
            let dropped: std::collections::BTreeSet<String> =
                drops(&enforced).into_iter().collect();
            prop_assert!(drops(&audits).is_empty());
            let would_calls = recorded(&audits, Verdict::WouldDeny, Surface::Call);
            prop_assert_eq!(
                &recorded(&enforced, Verdict::Deny, Surface::Call),
                &would_calls
            );
            let would_call_names: std::collections::BTreeSet<String> =
                would_calls.into_iter().map(|(_, t)| t).collect();
            prop_assert_eq!(&would_call_names, &dropped);

            // MCP: a server's tools and calls.
            let page = json!({"tools": case.tools.iter()
                .map(|n| json!({"name": n, "description": "d", "inputSchema": {"type": "object"}}))
                .collect::<Vec<_>>()});
            let catalog = toolsift::mcp::catalog::ServerCatalog::build(vec![
                toolsift::mcp::catalog::page(&page.to_string()).unwrap(),
            ]);
            let shown = |grant: &Grant| {
                let tool = |at: usize| {
                    let t = catalog.tools.get(at)?;
                    Some((t.name.as_str(), catalog.annotations(at)))
                };
                grant.judge_mask(Surface::McpTools, catalog.allowed_for(grant), tool)
            };
            let hidden: std::collections::BTreeSet<String> = shown(&enforced)
                .iter()
                .zip(&catalog.tools)
                .filter(|(shown, _)| !**shown)
                .map(|(_, t)| t.name.clone())
                .collect();
            prop_assert!(shown(&audits).iter().all(|s| *s));
            let mut refused_calls = std::collections::BTreeSet::new();
            for name in &case.tools {
                if check_call(&enforced, Some(Annotations::default()), name, "{}").is_some() {
                    refused_calls.insert(name.clone());
                }
                let audited_call = check_call(&audits, Some(Annotations::default()), name, "{}");
                prop_assert!(audited_call.is_none(), "{name}");
            }
            for (surface, effect) in [
                (Surface::McpTools, &hidden),
                (Surface::McpCall, &refused_calls),
            ] {
                let would = recorded(&audits, Verdict::WouldDeny, surface);
                prop_assert_eq!(&recorded(&enforced, Verdict::Deny, surface), &would);
                let names: std::collections::BTreeSet<String> =
                    would.into_iter().map(|(_, t)| t).collect();
                prop_assert_eq!(&names, effect, "{:?}", surface);
            }
            Ok(())
        })
        .unwrap();
}

/// `access_shadow` reports exactly the difference between two policies: for random rules A
/// (enforced) and B (the shadow) over the same catalog and caller, what the shadow records as
/// `shadow_deny` is what the oracle says B denies and A allows, `shadow_allow` what A denies
/// and B allows, on the tools and the model's calls; and enforcement is A's alone.
#[test]
fn the_shadow_reports_exactly_the_difference() {
    use toolsift::access::Surface;
    use toolsift::access::judge::Verdict;
    use toolsift::search::round::{Next, Session};

    let mut runner = TestRunner::new(Runner {
        cases: cases(),
        failure_persistence: None,
        ..Runner::default()
    });
    let two = (case(), prop::collection::vec(rule(), 0..6), any::<bool>());
    runner
        .run(&two, |(case, shadow_rules, shadow_default_allow)| {
            let shadow = Case {
                rules: shadow_rules,
                default_allow: shadow_default_allow,
                ..case.clone()
            };
            let mut v: Value = serde_json::from_str(&case.config()).unwrap();
            let s: Value = serde_json::from_str(&shadow.config()).unwrap();
            v["access_shadow"] = s["access"].clone();
            let mut engine = Engine::new(Config::from_json(v.to_string().as_bytes()).unwrap());
            let grant = engine
                .grant(&Caller::new(case.caller.clone().unwrap_or_default()))
                .unwrap();
            let dialect = DIALECTS[case.dialect];
            let body = body(&case);
            let analysis = engine.analyse_as(dialect, &body, Some(&grant));
            if let Ok(a) = &analysis {
                // Enforcement is the enforced policy's alone.
                let g = a.access.as_ref().unwrap();
                for e in 0..g.allowed.len() {
                    if let Some(n) = a.catalog.governed_name(e) {
                        prop_assert_eq!(g.allowed[e], case.allowed(n));
                    }
                }
            }
            let reply = every_call(&case);
            let delivered = match Session::guard(dialect, grant.clone()).on_reply(&reply) {
                Next::Deliver(edits) => edits,
                Next::FollowUp(_) => return Err(TestCaseError::fail("a follow-up")),
            };
            for call in &reply.calls {
                if case.tools.contains(&call.name) {
                    prop_assert_eq!(delivered.drop.contains(&call.id), !case.allowed(&call.name));
                }
            }
            let names = |verdict, surface| -> std::collections::BTreeSet<String> {
                recorded(&grant, verdict, surface)
                    .into_iter()
                    .map(|(_, t)| t)
                    .collect()
            };
            let called = || reply.calls.iter().map(|c| c.name.clone());
            let newly_denied: std::collections::BTreeSet<String> = called()
                .filter(|n| case.allowed(n) && !shadow.allowed(n))
                .collect();
            let newly_allowed: std::collections::BTreeSet<String> = called()
                .filter(|n| !case.allowed(n) && shadow.allowed(n))
                .collect();
            prop_assert_eq!(&names(Verdict::ShadowDeny, Surface::Call), &newly_denied);
            prop_assert_eq!(&names(Verdict::ShadowAllow, Surface::Call), &newly_allowed);
            // Every request here has tools, so the pipeline governed it (and so the shadow).
            let in_catalog =
                |set: std::collections::BTreeSet<String>| -> std::collections::BTreeSet<String> {
                    set.into_iter().filter(|n| case.tools.contains(n)).collect()
                };
            prop_assert_eq!(
                &names(Verdict::ShadowDeny, Surface::Tools),
                &in_catalog(newly_denied)
            );
            prop_assert_eq!(
                &names(Verdict::ShadowAllow, Surface::Tools),
                &in_catalog(newly_allowed)
            );
            Ok(())
        })
        .unwrap();
}

/// A connector or namespace case: connectors (label, host, the client's tool list) and
/// namespaces (name, functions), under rules that speak of them by name, URL and pattern.
#[derive(Debug, Clone)]
struct Outside {
    connectors: Vec<(String, String, Option<Vec<String>>)>,
    namespaces: Vec<(String, Vec<String>)>,
    rules: Vec<Rule>,
    default_allow: bool,
    anthropic: bool,
}

impl Outside {
    fn case(&self) -> Case {
        Case {
            tools: Vec::new(),
            rules: self.rules.clone(),
            default_allow: self.default_allow,
            refused: false,
            caller: None,
            dialect: 0,
            top_k: 1,
            min_tools: 0,
            always_include: Vec::new(),
            choice: None,
            called: None,
        }
    }

    /// The oracle: a deny pattern of a rule matches `name`.
    fn denied_by_rule(&self, name: &str) -> bool {
        self.rules
            .iter()
            .any(|r| r.deny.iter().any(|p| matches(p, name)))
    }

    /// The oracle for a namespace's function: denied when a rule denies either name, else
    /// allowed when either is allowed.
    fn function_allowed(&self, namespace: &str, function: &str) -> bool {
        let qualified = format!("{namespace}.{function}");
        if self.denied_by_rule(&qualified) || self.denied_by_rule(function) {
            return false;
        }
        let case = self.case();
        case.allowed(&qualified) || case.allowed(function)
    }

    fn body(&self) -> String {
        let function = json!({"type": "function", "name": "get_pod", "parameters": {}});
        if self.anthropic {
            let servers: Vec<Value> = self
                .connectors
                .iter()
                .map(|(label, host, tools)| {
                    let mut s =
                        json!({"type": "url", "url": format!("https://{host}/mcp"), "name": label});
                    if let Some(tools) = tools {
                        s["tool_configuration"] = json!({"enabled": true, "allowed_tools": tools});
                    }
                    s
                })
                .collect();
            return json!({"model": "m", "max_tokens": 5, "mcp_servers": servers,
                "messages": [{"role": "user", "content": "hi"}],
                "tools": [{"name": "get_pod", "input_schema": {}}]})
            .to_string();
        }
        let mut tools = vec![function];
        for (label, host, list) in &self.connectors {
            let mut t = json!({"type": "mcp", "server_label": label, "server_url": format!("https://{host}/")});
            if let Some(list) = list {
                t["allowed_tools"] = json!(list);
            }
            tools.push(t);
        }
        for (name, functions) in &self.namespaces {
            let inner: Vec<Value> = functions
                .iter()
                .map(|f| json!({"type": "function", "name": f}))
                .collect();
            tools.push(
                json!({"type": "namespace", "name": name, "description": "d", "tools": inner}),
            );
        }
        json!({"model": "m", "input": "hi", "tools": tools}).to_string()
    }
}

fn outside_pattern() -> impl Strategy<Value = String> {
    let label = prop::sample::select(vec!["gh", "gl", "bad"]);
    let host = prop::sample::select(vec!["a.example", "b.example", "evil.test"]);
    let ns = prop::sample::select(vec!["crm", "ops"]);
    (label, host, ns, word(), 0..10u8).prop_map(|(label, host, ns, w, shape)| match shape {
        0 => format!("mcp:{label}"),
        1 => format!("mcp:{label}/{w}"),
        2 => format!("mcp:{label}/{w}*"),
        3 => "mcp:*".to_owned(),
        4 => format!("mcp_url:{host}"),
        5 => "mcp_url:*.example".to_owned(),
        6 => format!("{ns}.*"),
        7 => format!("{ns}.{w}*"),
        8 => format!("*{w}*"),
        _ => format!("{w}*"),
    })
}

fn outside() -> impl Strategy<Value = Outside> {
    let words = || prop::collection::vec(word().prop_map(str::to_owned), 1..4);
    let connector = (
        prop::sample::select(vec!["gh", "gl", "bad"]).prop_map(str::to_owned),
        prop::sample::select(vec!["a.example", "b.example", "evil.test"]).prop_map(str::to_owned),
        prop::option::of(words()),
    );
    let namespace = (
        prop::sample::select(vec!["crm", "ops"]).prop_map(str::to_owned),
        words(),
    );
    let rule = (
        prop::collection::vec(outside_pattern(), 0..4),
        prop::collection::vec(outside_pattern(), 0..3),
    )
        .prop_filter("a rule allows or denies", |(a, d)| {
            !a.is_empty() || !d.is_empty()
        })
        .prop_map(|(allow, deny)| Rule {
            when: vec!["*".to_owned()],
            allow,
            deny,
        });
    (
        prop::collection::vec(connector, 0..4),
        prop::collection::vec(namespace, 0..3),
        prop::collection::vec(rule, 1..4),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(connectors, namespaces, rules, default_allow, anthropic)| {
                let dedup = |mut v: Vec<String>| {
                    v.sort();
                    v.dedup();
                    v
                };
                Outside {
                    connectors: connectors
                        .into_iter()
                        .map(|(l, h, t)| (l, h, t.map(dedup)))
                        .collect(),
                    namespaces: namespaces.into_iter().map(|(n, f)| (n, dedup(f))).collect(),
                    rules,
                    default_allow,
                    anthropic,
                }
            },
        )
}

/// Remote MCP connectors and Responses namespaces (`toolsift::connectors`), against the
/// README's rules: no connector goes with a denied label or URL, no listed connector tool is
/// one a rule denies, a connector that goes without a list has no tool a rule could deny, and
/// a namespace keeps exactly the functions the rules allow (an emptied one leaves).
#[test]
fn connectors_and_namespaces_never_forward_what_is_denied() {
    use toolsift::access::{AccessConfig, Policy};
    let mut runner = TestRunner::new(Runner {
        cases: cases(),
        ..Runner::default()
    });
    runner
        .run(&outside(), |o| {
            let case = o.case();
            let config: Value = serde_json::from_str(&case.config()).unwrap();
            let access: AccessConfig = serde_json::from_value(config["access"].clone()).unwrap();
            let policy = std::rc::Rc::new(Policy::new(&access).unwrap());
            let grant = policy.grant(&Caller::anonymous());
            let dialect = if o.anthropic {
                Dialect::Anthropic
            } else {
                Dialect::OpenaiResponses
            };
            let body = o.body();
            let outcome = toolsift::connectors::govern(dialect.codec(), &body, &grant);
            if outcome.denial.is_some() {
                // Refused whole: nothing goes upstream.
                return Ok(());
            }
            let sent: Value =
                serde_json::from_str(outcome.body.as_deref().unwrap_or(&body)).unwrap();
            let empty = Vec::new();
            let entries = if o.anthropic {
                sent["mcp_servers"].as_array().unwrap_or(&empty)
            } else {
                sent["tools"].as_array().unwrap_or(&empty)
            };
            let mut namespaces_sent = Vec::new();
            for e in entries {
                if e["type"] == "namespace" {
                    let functions: Vec<String> = e["tools"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|f| f["name"].as_str().unwrap().to_owned())
                        .collect();
                    namespaces_sent.push((e["name"].as_str().unwrap().to_owned(), functions));
                    continue;
                }
                if e["type"] == "function" {
                    continue;
                }
                let label = e
                    .get("name")
                    .or(e.get("server_label"))
                    .unwrap()
                    .as_str()
                    .unwrap();
                let url = e
                    .get("url")
                    .or(e.get("server_url"))
                    .unwrap()
                    .as_str()
                    .unwrap();
                let host = url
                    .trim_start_matches("https://")
                    .split('/')
                    .next()
                    .unwrap();
                prop_assert!(case.allowed(&format!("mcp:{label}")), "{label} went");
                prop_assert!(case.allowed(&format!("mcp_url:{host}")), "{host} went");
                let list = if o.anthropic {
                    e["tool_configuration"].get("allowed_tools")
                } else {
                    e.get("allowed_tools")
                };
                match list.and_then(Value::as_array) {
                    Some(list) => {
                        prop_assert!(!list.is_empty());
                        for t in list {
                            let name = format!("mcp:{label}/{}", t.as_str().unwrap());
                            prop_assert!(!o.denied_by_rule(&name), "{name} went");
                        }
                    }
                    None => {
                        for w in WORDS {
                            let name = format!("mcp:{label}/{w}");
                            prop_assert!(!o.denied_by_rule(&name), "{label} went whole: {name}");
                        }
                    }
                }
            }
            let expected: Vec<(String, Vec<String>)> = o
                .namespaces
                .iter()
                .map(|(n, fs)| {
                    let kept = fs
                        .iter()
                        .filter(|f| o.function_allowed(n, f))
                        .cloned()
                        .collect();
                    (n.clone(), kept)
                })
                .filter(|(_, fs): &(String, Vec<String>)| !fs.is_empty())
                .collect();
            if !o.anthropic {
                prop_assert_eq!(namespaces_sent, expected);
            }
            Ok(())
        })
        .unwrap();
}
