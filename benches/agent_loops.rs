//! Scripted agent loops replayed with and without toolsift: how many client turns a stuck loop
//! lasts, how many requests reach the model, the input tokens they carry, and the searches
//! made. Run with `make bench-loops`; the table goes to docs/BENCHMARKS.md ("Agent loops").
//!
//! This program plays the agent (the client framework), in OpenAI Chat Completions only: it
//! sends the catalog of `examples/chat-60-tools.json` with its question, reads the model's
//! answer, runs every tool the answer calls itself (a fixed result text per tool; a tool it
//! does not have gets the error a framework gives, `Error: tool X not found`), appends the turn
//! and the results, and sends again, until the model answers with text or [`TURN_LIMIT`]
//! turns have gone by.
//!
//! The model is the demo upstream's scripted one (`x-demo-model: scripted`, headers in the
//! doc comment of its main.rs): it obeys fixed rules, so a loop that ends shows the gateway's
//! mechanism at work, not how a real model reacts to a tool leaving its list or to an error.
//!
//! One Envoy (the shipped envoy.yaml) with one listener per side: a copy of the listener
//! without the toolsift filter ("without", as `envoy_latency` compares), and one listener per
//! toolsift configuration, all to the same demo upstream. Every scenario runs on every side
//! named for it, one after the other, so the upstream's counters tell each run's requests.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "shared/listeners.rs"]
mod listeners;

use common::{Gateway, Response, http, repo};
use listeners::listener_copy;
use serde_json::{Value, json};
use std::collections::BTreeSet;

/// Client turns after which a loop counts as not broken.
const TURN_LIMIT: usize = 25;
const PATH: &str = "/v1/chat/completions";
const CATALOG: &str = "examples/chat-60-tools.json";
/// The search tool's name, the client's own and toolsift's alike.
const FIND_TOOLS: &str = "find_tools";
/// Characters of the last answer's text the table shows.
const TEXT_SHOWN: usize = 48;
/// Names the client's own `find_tools` answers with.
const CLIENT_SEARCH_LIMIT: usize = 5;

/// The tools of the scenarios: in the top five for the catalog's question (checked: the first
/// turn must call them through every side).
const LOGS: &str = "get_pod_logs";
const SLACK: &str = "send_slack_message";
/// A name no tool of the catalog has.
const MADE_UP: &str = "get_checkout_logs";
const ARGS: &str = r#"{"namespace":"shop","pod":"checkout-7d9f"}"#;

/// One way of sending a scenario's requests.
#[derive(Clone, Copy)]
struct Side {
    /// What the table calls it.
    label: &'static str,
    /// The toolsift configuration; `None`: the listener without the filter.
    config: Option<&'static str>,
}

const WITHOUT: Side = Side {
    label: "without toolsift",
    config: None,
};
const LOOP_GUARD: Side = Side {
    label: "toolsift, filter mode",
    config: Some(r#"{"loop_guard":{}}"#),
};
const LOOP_GUARD_3: Side = Side {
    label: "toolsift, filter mode",
    config: Some(r#"{"loop_guard":{"repeats":3}}"#),
};
// Filter mode answering made-up calls to the model, as search mode does; `hold_headers`:
// `x-toolsift-search` names them.
const UNKNOWN_ANSWERED: Side = Side {
    label: "toolsift, filter mode",
    config: Some(r#"{"unknown_tools":{"answer":true},"search":{"hold_headers":true}}"#),
};
// `hold_headers` (as envoy-search.yaml has it): `x-toolsift-search` says what the loop did.
const SEARCH: Side = Side {
    label: "toolsift, search mode",
    config: Some(r#"{"mode":"search","search":{"hold_headers":true}}"#),
};
const SEARCH_10_ROUNDS: Side = Side {
    label: "toolsift, search mode",
    config: Some(r#"{"mode":"search","search":{"hold_headers":true,"max_search_rounds":10}}"#),
};

const SIDES: [Side; 6] = [
    WITHOUT,
    LOOP_GUARD,
    LOOP_GUARD_3,
    UNKNOWN_ANSWERED,
    SEARCH,
    SEARCH_10_ROUNDS,
];

struct Scenario {
    name: &'static str,
    /// The scripted model's headers.
    script: Vec<(&'static str, &'static str)>,
    /// The first turn's call every side must see (the model was offered the tool), if any.
    first_call: Option<&'static str>,
    /// Without toolsift the client offers its own `find_tools`.
    client_search: bool,
    sides: Vec<Side>,
}

fn scenarios() -> Vec<Scenario> {
    let scripted = |more: &[(&'static str, &'static str)]| {
        let mut headers = vec![("x-demo-model", "scripted"), ("x-demo-args", ARGS)];
        headers.extend_from_slice(more);
        headers
    };
    vec![
        Scenario {
            name: "1. same call twice",
            script: scripted(&[("x-demo-want", LOGS), ("x-demo-script", "search")]),
            first_call: Some(LOGS),
            client_search: false,
            sides: vec![WITHOUT, LOOP_GUARD],
        },
        Scenario {
            name: "2. A B A B",
            script: scripted(&[
                ("x-demo-want", LOGS),
                ("x-demo-alternate", SLACK),
                ("x-demo-script", "alternate"),
            ]),
            first_call: Some(LOGS),
            client_search: false,
            sides: vec![WITHOUT, LOOP_GUARD, LOOP_GUARD_3],
        },
        Scenario {
            name: "3. a search every turn",
            script: scripted(&[("x-demo-want", LOGS), ("x-demo-script", "always-search")]),
            first_call: Some(FIND_TOOLS),
            client_search: true,
            sides: vec![WITHOUT, SEARCH, SEARCH_10_ROUNDS],
        },
        Scenario {
            name: "4. an unknown tool",
            // The made-up call first, then a text answer once the model has read its error.
            script: scripted(&[
                ("x-demo-want", LOGS),
                ("x-demo-script", "answer"),
                ("x-demo-call", MADE_UP),
            ]),
            first_call: None,
            client_search: false,
            sides: vec![WITHOUT, UNKNOWN_ANSWERED, SEARCH],
        },
    ]
}

/// What one replay of a scenario on one side came to.
struct Run {
    /// Client turns sent.
    turns: usize,
    /// The last turn was answered with text.
    broken: bool,
    /// Requests the upstream's scripted model answered.
    model_requests: u64,
    /// `usage.prompt_tokens` of every answer the client got, summed (toolsift's search mode
    /// sums its rounds into the answer the client gets).
    input_tokens: u64,
    /// `find_tools` calls the client answered itself.
    client_searches: usize,
    /// `find_tools` calls the gateway answered: found in the model's requests, never sent to
    /// the client.
    gateway_searches: usize,
    /// Searches the gateway refused (`stopped=max_searches`).
    stopped_searches: usize,
    /// Calls of tools the client does not have, as the client got them.
    unknown_at_client: usize,
    /// The calls of every turn as the client got them, in order.
    calls: Vec<String>,
    /// The last answer's text and toolsift's headers on it.
    last_text: String,
    last_headers: String,
}

fn main() {
    let catalog: Value =
        serde_json::from_str(&std::fs::read_to_string(repo().join(CATALOG)).unwrap()).unwrap();
    let ports: Vec<u16> = SIDES.iter().map(|_| Gateway::free_port()).collect();
    let first = SIDES[1].config.unwrap();
    let gw = Gateway::start_with(first, &[], |yaml| {
        let end = yaml.find("  clusters:").unwrap();
        let mut copies = String::new();
        for (i, (side, port)) in SIDES.iter().zip(&ports).enumerate() {
            let config = side.config.map(|config| (first, config));
            copies.push_str(&listener_copy(
                &yaml,
                &format!("llm_side{i}"),
                *port,
                config,
            ));
        }
        format!("{}{copies}{}", &yaml[..end], &yaml[end..])
    });
    let port_of = |side: &Side| {
        let at = SIDES.iter().position(|s| s.config == side.config).unwrap();
        ports[at]
    };
    println!(
        "| scenario | side | toolsift configuration | client turns | model requests | input tokens | searches: by the client / in the gateway (refused) | calls the client got | how it ended |"
    );
    println!("|---|---|---|---:|---:|---:|---:|---|---|");
    for scenario in scenarios() {
        for side in &scenario.sides {
            let run = replay(&gw, port_of(side), &scenario, side, &catalog);
            if let Some(want) = scenario.first_call {
                let seen = run.calls.first().map(String::as_str);
                let search_inside = side.config.is_some_and(|c| c.contains("search"));
                // In search mode the first call may be answered inside the gateway.
                assert!(
                    seen == Some(want) || (search_inside && want == FIND_TOOLS),
                    "{} / {}: first call {seen:?}, wanted {want}",
                    scenario.name,
                    side.label
                );
            }
            println!("{}", row(&scenario, side, &run));
        }
    }
}

fn row(scenario: &Scenario, side: &Side, run: &Run) -> String {
    let turns = if run.broken {
        format!("**{}**", run.turns)
    } else {
        format!("not broken within {TURN_LIMIT}")
    };
    let stopped = if run.stopped_searches > 0 {
        format!(" ({})", run.stopped_searches)
    } else {
        String::new()
    };
    let ended = if run.broken {
        format!("text: “{}”; {}", run.last_text, run.last_headers)
    } else {
        format!("turn limit; {}", run.last_headers)
    };
    format!(
        "| {} | {} | {} | {turns} | {} | {} | {} / {}{stopped} | {} | {} |",
        scenario.name,
        side.label,
        side.config.map_or("—".to_owned(), |c| format!("`{c}`")),
        run.model_requests,
        run.input_tokens,
        run.client_searches,
        run.gateway_searches,
        compact_calls(&run.calls, run.unknown_at_client),
        ended.trim_end_matches("; "),
    )
}

/// `get_pods, get_pod_logs ×2, …`: the calls in order, runs of one name folded.
fn compact_calls(calls: &[String], unknown: usize) -> String {
    let mut runs: Vec<(String, usize)> = Vec::new();
    for call in calls {
        match runs.last_mut() {
            Some((name, count)) if name == call => *count += 1,
            _ => runs.push((call.clone(), 1)),
        }
    }
    let shown: Vec<String> = runs
        .iter()
        .take(6)
        .map(|(name, count)| match count {
            1 => format!("`{name}`"),
            _ => format!("`{name}` ×{count}"),
        })
        .collect();
    let mut text = shown.join(", ");
    if runs.len() > 6 {
        text.push_str(&format!(", … ({} calls)", calls.len()));
    }
    if text.is_empty() {
        text.push('—');
    }
    if unknown > 0 {
        text.push_str(&format!(" ({unknown} unknown)"));
    }
    text
}

/// The agent loop of `scenario` through the listener on `port`.
fn replay(gw: &Gateway, port: u16, scenario: &Scenario, side: &Side, catalog: &Value) -> Run {
    let model_before = scripted_requests(gw);
    http(gw.upstream.port, "POST", "/scripted/log/reset", &[], b"");
    let mut tools = catalog["tools"].as_array().unwrap().clone();
    if scenario.client_search && side.config.is_none() {
        tools.push(client_find_tools());
    }
    let known: BTreeSet<String> = tools
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect();
    let mut messages = catalog["messages"].as_array().unwrap().clone();
    let mut headers: Vec<(&str, &str)> = vec![("content-type", "application/json")];
    headers.extend_from_slice(&scenario.script);
    let mut run = Run {
        turns: 0,
        broken: false,
        model_requests: 0,
        input_tokens: 0,
        client_searches: 0,
        gateway_searches: 0,
        stopped_searches: 0,
        unknown_at_client: 0,
        calls: Vec::new(),
        last_text: String::new(),
        last_headers: String::new(),
    };
    let mut answered_by_client: BTreeSet<String> = BTreeSet::new();
    let mut seen_by_model: BTreeSet<String> = BTreeSet::new();
    while run.turns < TURN_LIMIT {
        run.turns += 1;
        let body = json!({
            "model": catalog["model"],
            "messages": messages,
            "tools": tools,
            "tool_choice": catalog["tool_choice"],
        });
        let response = http(port, "POST", PATH, &headers, body.to_string().as_bytes());
        assert_eq!(
            response.status,
            200,
            "{}: {}",
            scenario.name,
            response.text()
        );
        // The model's requests of this turn, the gateway's follow-ups included.
        for entry in scripted_log(gw) {
            seen_by_model.extend(search_call_ids(&entry["body"]));
        }
        let answer = response.json();
        run.input_tokens += answer["usage"]["prompt_tokens"].as_u64().unwrap();
        run.last_headers = toolsift_headers(&response);
        if run.last_headers.contains("stopped=max_searches") {
            run.stopped_searches += 1;
        }
        let message = answer["choices"][0]["message"].clone();
        let calls = message["tool_calls"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if calls.is_empty() {
            run.broken = true;
            let text = message["content"].as_str().unwrap_or_default();
            run.last_text = match text.char_indices().nth(TEXT_SHOWN) {
                Some((at, _)) => format!("{}…", &text[..at]),
                None => text.to_owned(),
            };
            break;
        }
        messages.push(message);
        for call in calls {
            let name = call["function"]["name"].as_str().unwrap().to_owned();
            let id = call["id"].as_str().unwrap().to_owned();
            let arguments = call["function"]["arguments"].as_str().unwrap_or("{}");
            let result = if name == FIND_TOOLS && known.contains(FIND_TOOLS) {
                run.client_searches += 1;
                answered_by_client.insert(id.clone());
                client_search(arguments, &tools)
            } else if known.contains(&name) {
                format!("{name}: done. (The benchmark's fixed result for this tool.)")
            } else {
                run.unknown_at_client += 1;
                format!("Error: tool {name} not found")
            };
            messages.push(json!({"role": "tool", "tool_call_id": id, "content": result}));
            run.calls.push(name);
        }
    }
    run.gateway_searches = seen_by_model.difference(&answered_by_client).count();
    run.model_requests = scripted_requests(gw) - model_before;
    run
}

/// The client's own search tool (scenario 3 without toolsift).
fn client_find_tools() -> Value {
    json!({"type": "function", "function": {
        "name": FIND_TOOLS,
        "description": "Search the agent's tools by what they do; returns the names of the best matches.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string", "description": "What the tool should do."},
            "limit": {"type": "integer", "description": "How many names to return."}
        }, "required": ["query"]}
    }})
}

/// The client's answer to its own `find_tools`: the names of the tools whose name and
/// description share the most words with the query (what a simple client-side search does).
fn client_search(arguments: &str, tools: &[Value]) -> String {
    let words = |text: &str| -> BTreeSet<String> {
        text.split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|w| w.len() > 2)
            .map(str::to_ascii_lowercase)
            .collect()
    };
    let query: Value = serde_json::from_str(arguments).unwrap_or_default();
    let wanted = words(query["query"].as_str().unwrap_or_default());
    let mut scored: Vec<(usize, &str)> = tools
        .iter()
        .map(|t| &t["function"])
        .filter(|f| f["name"] != FIND_TOOLS)
        .map(|f| {
            let name = f["name"].as_str().unwrap();
            let text = format!("{name} {}", f["description"].as_str().unwrap_or_default());
            (words(&text).intersection(&wanted).count(), name)
        })
        .collect();
    scored.sort_by_key(|(score, _)| std::cmp::Reverse(*score));
    let names: Vec<&str> = scored
        .iter()
        .take(CLIENT_SEARCH_LIMIT)
        .map(|(_, n)| *n)
        .collect();
    format!("Tools: {}", names.join(", "))
}

/// The ids of the `find_tools` calls in a Chat request's conversation.
fn search_call_ids(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["tool_calls"].as_array())
        .flatten()
        .filter(|c| c["function"]["name"] == FIND_TOOLS)
        .filter_map(|c| c["id"].as_str().map(str::to_owned))
        .collect()
}

/// `x-toolsift` and `x-toolsift-search` of a response, as they read but for `usage=` (the
/// token counts are in the table's own column).
fn toolsift_headers(response: &Response) -> String {
    ["x-toolsift", "x-toolsift-search"]
        .iter()
        .filter_map(|name| {
            let value: Vec<&str> = response
                .header(name)?
                .split(' ')
                .filter(|part| !part.starts_with("usage="))
                .collect();
            Some(format!("`{name}: {}`", value.join(" ")))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn scripted_requests(gw: &Gateway) -> u64 {
    gw.upstream.stats()["scripted"]["requests"]
        .as_u64()
        .unwrap()
}

fn scripted_log(gw: &Gateway) -> Vec<Value> {
    let log = http(gw.upstream.port, "GET", "/scripted/log", &[], b"").json();
    log.as_array().unwrap().clone()
}
