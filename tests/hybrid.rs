//! Hybrid ranking in the real Envoy: query embeddings through an Envoy cluster to the real
//! embeddings server (`toolsift-embed`, all-MiniLM-L6-v2), and every fault of that service
//! played by the demo upstream's misbehaving `/embeddings/*` stand-in.

use crate::common;

use common::{EmbedServer, Gateway, Response};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// `(requests, inputs)` the embeddings server has answered.
fn counts(embed: &EmbedServer) -> (u64, u64) {
    let stats = embed.stats();
    (
        stats["requests"].as_u64().unwrap(),
        stats["inputs"].as_u64().unwrap(),
    )
}

/// The plugin configuration of hybrid ranking with an `embeddings` block of `extra` fields.
fn hybrid_config(embeddings: Value) -> String {
    let mut e = json!({"cluster": "embeddings", "model": "all-MiniLM-L6-v2"});
    for (k, v) in embeddings.as_object().unwrap() {
        e[k] = v.clone();
    }
    json!({"top_k": 5, "min_tools": 20, "debug": true, "ranking": "hybrid", "embeddings": e})
        .to_string()
}

/// A gateway whose `embeddings` cluster points at `port`.
fn gateway(config: &str, embeddings_port: u16) -> Gateway {
    Gateway::start_with(config, &[], |yaml| {
        yaml.replace(
            "port_value: 18100",
            &format!("port_value: {embeddings_port}"),
        )
    })
}

fn chat(gateway: &Gateway, question: &str) -> Response {
    let body = json!({
        "model": "gpt-4o",
        "messages": [{"role": "user", "content": question}],
        "tools": common::catalog(),
    });
    gateway.post("/v1/chat/completions", &[], body.to_string().as_bytes())
}

/// A request that keyword ranking gets wrong: no word of it is in the tool's name or
/// description.
const PARAPHRASE: &str = "ping my teammates that the nightly build broke";
const PARAPHRASED_TOOL: &str = "send_slack_message";

#[test]
fn hybrid_finds_a_paraphrase_that_keyword_ranking_misses() {
    let embed = EmbedServer::start();
    // The paraphrase shares one word of five with the catalog ("build"): a question the
    // keywords cannot read, which `weak_query` would send with every tool; cut to `top_k`
    // here, to show what keyword ranking keeps of it.
    let keyword = gateway(
        r#"{"top_k": 5, "min_tools": 20, "weak_query": {"action": "top_k"}}"#,
        embed.port,
    );
    let r = chat(&keyword, PARAPHRASE);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        !r.upstream_tools().contains(&PARAPHRASED_TOOL.to_owned()),
        "keyword ranking already finds it: {:?}",
        r.upstream_tools()
    );
    drop(keyword);

    // With `weak_query` as configured by default the paraphrase goes with every tool: its
    // embeddings do not stand out enough to cut it (`weak_query::DENSE_CONFIDENCE`).
    let mut config: Value = serde_json::from_str(&hybrid_config(
        json!({"timeout_ms": 30000, "max_batch": 128}),
    ))
    .unwrap();
    config["weak_query"] = json!({"action": "top_k"});
    let hybrid = gateway(&config.to_string(), embed.port);
    let r = chat(&hybrid, PARAPHRASE);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        r.upstream_tools().contains(&PARAPHRASED_TOOL.to_owned()),
        "{:?}",
        r.upstream_tools()
    );
    assert_eq!(
        r.header("x-toolsift"),
        Some("kept=5 total=80 weak=1/5 ranking=hybrid")
    );
    // The debug header says which channels put each tool there.
    let explained = r.header("x-toolsift-tools").unwrap();
    assert!(
        explained.contains(&format!("{PARAPHRASED_TOOL}(")) && explained.contains("vector="),
        "{explained}"
    );
    assert_eq!(hybrid.stat("toolsift.ranking.hybrid"), 1);
}

#[test]
fn tool_vectors_are_fetched_once_and_a_repeated_query_costs_no_call() {
    let embed = EmbedServer::start();
    let hybrid = gateway(
        &hybrid_config(json!({"timeout_ms": 30000, "max_batch": 128})),
        embed.port,
    );
    let tools = common::catalog().len() as u64;

    // First request: one call, carrying the query and every tool.
    let r = chat(&hybrid, "what is the weather in Paris");
    assert_eq!(
        r.header("x-toolsift"),
        Some("kept=5 total=80 ranking=hybrid")
    );
    assert_eq!(counts(&embed), (1, 1 + tools));

    // Next turn, new question, same catalog: one call for the query alone.
    let r = chat(&hybrid, "book a hotel in Rome for two nights");
    assert_eq!(
        r.header("x-toolsift"),
        Some("kept=5 total=80 ranking=hybrid")
    );
    assert_eq!(counts(&embed), (2, 2 + tools));

    // The agent loop asks the same question again: no call at all.
    let r = chat(&hybrid, "book a hotel in Rome for two nights");
    assert_eq!(
        r.header("x-toolsift"),
        Some("kept=5 total=80 ranking=hybrid")
    );
    assert_eq!(counts(&embed), (2, 2 + tools));

    assert_eq!(hybrid.stat("toolsift.embeddings.calls"), 2);
    assert_eq!(hybrid.stat("toolsift.embeddings.inputs"), 2 + tools);
    assert_eq!(hybrid.stat("toolsift.ranking.hybrid"), 3);
}

#[test]
fn a_multi_sentence_request_embeds_each_sentence() {
    let embed = EmbedServer::start();
    let hybrid = gateway(
        &hybrid_config(json!({"timeout_ms": 30000, "max_batch": 128})),
        embed.port,
    );
    let tools = common::catalog().len() as u64;
    let r = chat(
        &hybrid,
        "Find a flight to Lisbon next Friday. Then book a hotel near the old town.",
    );
    assert_eq!(
        r.header("x-toolsift"),
        Some("kept=5 total=80 ranking=hybrid")
    );
    // The whole request and its two sentences.
    assert_eq!(counts(&embed), (1, 3 + tools));
    let kept = r.upstream_tools();
    for tool in ["search_flights", "book_hotel"] {
        assert!(kept.contains(&tool.to_owned()), "{tool} not in {kept:?}");
    }
}

#[test]
fn a_catalog_larger_than_max_batch_is_embedded_over_several_requests() {
    let embed = EmbedServer::start();
    let config = hybrid_config(json!({"timeout_ms": 30000, "max_batch": 50}));
    let hybrid = gateway(&config, embed.port);
    // 80 tools, 50 per call: keyword ranking until the second call brings the rest.
    let r = chat(&hybrid, "what is the weather in Paris");
    assert_eq!(
        r.header("x-toolsift"),
        Some("kept=5 total=80 ranking=keyword fallback=incomplete")
    );
    let r = chat(&hybrid, "what is the weather in Paris");
    assert_eq!(
        r.header("x-toolsift"),
        Some("kept=5 total=80 ranking=hybrid")
    );
    assert_eq!(counts(&embed), (2, 1 + 80));
    assert_eq!(hybrid.stat("toolsift.embeddings.incomplete"), 1);
}

/// A gateway whose embeddings service misbehaves as `path` makes the demo upstream do, or is
/// the cluster `cluster`.
fn faulty(embeddings: Value) -> Gateway {
    // `llm` leads to the demo upstream, which also plays the faulty embeddings service.
    let mut e = json!({"cluster": "llm", "timeout_ms": 300, "dimensions": 16, "max_batch": 128});
    for (k, v) in embeddings.as_object().unwrap() {
        e[k] = v.clone();
    }
    // Nothing listens on the `embeddings` cluster's port: the service is down.
    let closed = Gateway::free_port();
    gateway(&hybrid_config(e), closed)
}

/// Sends a request through a faulty service: it must be served, ranked by keyword, within the
/// timeout, and counted under `reason`.
fn assert_falls_back(gateway: &Gateway, reason: &str) {
    let started = Instant::now();
    let r = chat(gateway, "what is the weather in Paris");
    let elapsed = started.elapsed();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.header("x-toolsift"),
        Some(format!("kept=5 total=80 ranking=keyword fallback={reason}").as_str()),
        "{}",
        gateway.log_text()
    );
    let kept = r.upstream_tools();
    assert_eq!(kept.len(), 5);
    assert!(kept.contains(&"get_current_weather".to_owned()), "{kept:?}");
    // The timeout is 300 ms; the slow stand-in stalls 3 s. Generous for a loaded CI machine,
    // far below the stall.
    assert!(elapsed < Duration::from_millis(2000), "{elapsed:?}");
    assert_eq!(
        gateway.stat(&format!("toolsift.embeddings.fallback.{reason}")),
        1
    );
    assert_eq!(gateway.stat("toolsift.ranking.keyword"), 1);
    assert_eq!(gateway.stat("toolsift.ranking.hybrid"), 0);
}

#[test]
fn a_slow_service_times_out_into_keyword_ranking() {
    let g = faulty(json!({"path": "/embeddings/slow?ms=3000"}));
    assert_falls_back(&g, "timeout");
}

#[test]
fn a_down_service_falls_back_to_keyword_ranking() {
    let g = faulty(json!({"cluster": "embeddings"}));
    assert_falls_back(&g, "status");
}

#[test]
fn an_unknown_cluster_falls_back_to_keyword_ranking() {
    let g = faulty(json!({"cluster": "no_such_cluster"}));
    assert_falls_back(&g, "dispatch");
}

#[test]
fn error_statuses_fall_back_to_keyword_ranking() {
    for code in [500, 429, 401] {
        let g = faulty(json!({"path": format!("/embeddings/status/{code}")}));
        assert_falls_back(&g, "status");
    }
}

#[test]
fn a_connection_reset_falls_back_to_keyword_ranking() {
    // Envoy answers the callout 503 when the service drops the connection.
    let g = faulty(json!({"path": "/embeddings/reset"}));
    assert_falls_back(&g, "status");
}

#[test]
fn garbage_answers_fall_back_to_keyword_ranking() {
    for path in ["/embeddings/garbage", "/embeddings/wrong-count"] {
        let g = faulty(json!({ "path": path }));
        assert_falls_back(&g, "garbage");
    }
}

#[test]
fn vectors_of_the_wrong_size_fall_back_to_keyword_ranking() {
    let g = faulty(json!({"path": "/embeddings/wrong-dims"}));
    assert_falls_back(&g, "dimensions");
}

/// A service that takes 20 ms per input, and a first request that gave up on it: its call
/// (its question and 80 tools) would need 1.6 s, far past the 300 ms timeout (a question alone
/// needs 20 ms), and the catalog's tools are left to the worker's background fetch.
fn slow_service_after_a_timeout() -> Gateway {
    let g = faulty(json!({"path": "/embeddings/per-input?ms=20"}));
    let r = chat(&g, "what is the weather in Paris");
    assert_eq!(
        r.header("x-toolsift"),
        Some("kept=5 total=80 ranking=keyword fallback=timeout")
    );
    g
}

#[test]
fn a_catalog_too_slow_to_embed_within_the_timeout_is_fetched_in_the_background() {
    let g = slow_service_after_a_timeout();
    // Meanwhile the root context fetches the tools without a deadline; requests ask only for
    // their question and go on by keyword until the tools are in.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = chat(&g, "book a hotel in Rome for two nights");
        let header = r.header("x-toolsift").unwrap().to_owned();
        if header == "kept=5 total=80 ranking=hybrid" {
            break;
        }
        assert_eq!(
            header,
            "kept=5 total=80 ranking=keyword fallback=incomplete"
        );
        assert!(Instant::now() < deadline, "never ranked by hybrid ranking");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(g.stat("toolsift.embeddings.backfilled"), 80);
    assert_eq!(g.stat("toolsift.embeddings.fallback.timeout"), 1);
}

/// What the stand-in embeddings service has received: `(calls, texts)`.
fn received(g: &Gateway) -> (u64, u64) {
    let stats = g.upstream.stats();
    let e = &stats["embeddings"];
    (
        e["requests"].as_u64().unwrap(),
        e["inputs"].as_u64().unwrap(),
    )
}

#[test]
fn tool_texts_a_background_call_is_embedding_are_not_sent_again() {
    let g = slow_service_after_a_timeout();
    // The background call with the 80 tools (one call: max_batch is 128) goes out on the
    // worker's next tick, and takes 1.6 s.
    let deadline = Instant::now() + Duration::from_secs(10);
    while received(&g) != (2, 81 + 80) {
        assert!(
            Instant::now() < deadline,
            "no background call: {:?}",
            received(&g)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // Another catalog with the same 80 tools and one of its own, while they are in flight:
    // its request asks for its question and its new tool only.
    let mut tools = common::catalog();
    tools.push(json!({"type": "function", "function": {
        "name": "order_pizza", "description": "Order a pizza for delivery"}}));
    let request = |question: &str| {
        let body = json!({
            "model": "gpt-4o",
            "messages": [{"role": "user", "content": question}],
            "tools": tools,
        });
        g.post("/v1/chat/completions", &[], body.to_string().as_bytes())
    };
    let r = request("what is the weather in Paris");
    assert_eq!(
        r.header("x-toolsift"),
        Some("kept=5 total=81 ranking=keyword fallback=incomplete"),
        "{}",
        g.log_text()
    );
    assert_eq!(received(&g), (3, 81 + 80 + 2));
    let deadline = Instant::now() + Duration::from_secs(30);
    while g.stat("toolsift.embeddings.backfilled") < 80 {
        assert!(Instant::now() < deadline, "the tools were never fetched");
        std::thread::sleep(Duration::from_millis(50));
    }
    let r = request("what is the weather in Paris");
    assert_eq!(
        r.header("x-toolsift"),
        Some("kept=5 total=81 ranking=hybrid")
    );
    // Each tool text went out once after the first request gave up on its call.
    assert_eq!(received(&g), (3, 81 + 80 + 2));
}

/// Waits until the embeddings server's `/stats` say `reached` (at most 60 s).
fn until_stats(embed: &EmbedServer, what: &str, reached: impl Fn(&Value) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let stats = embed.stats();
        if reached(&stats) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: {stats}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The order of events is held by signals, not by timing: the busy request is on the inference
/// thread and the gateway's call queued behind it (the server's `/stats` say so), then the
/// server is held (SIGSTOP) until the filter has given up on the call (its answer is back).
#[test]
fn a_call_the_filter_gave_up_on_is_never_run_by_the_embeddings_server() {
    let embed = EmbedServer::start();
    let g = gateway(&hybrid_config(json!({"timeout_ms": 300})), embed.port);
    // Seconds of work for the server's one inference thread, sent to it directly: 192 texts of
    // about 120 word pieces each (a tool text of a few dozen takes some 9 ms).
    let text = "the nightly build of the payment service failed again in staging ".repeat(10);
    let busy_inputs = 192;
    let busy_body = json!({"model": "all-MiniLM-L6-v2", "input": vec![text; busy_inputs]});
    let port = embed.port;
    // Its answer may take minutes on a loaded machine: only its order matters here.
    let busy = std::thread::spawn(move || {
        let headers = [("content-type", "application/json")];
        common::try_http_within(
            Duration::from_secs(600),
            port,
            "POST",
            "/v1/embeddings",
            &headers,
            busy_body.to_string().as_bytes(),
        )
    });
    until_stats(&embed, "the busy request on the inference thread", |s| {
        s["taken"] == 1 && s["queued"] == 0
    });

    std::thread::scope(|scope| {
        // Queued behind it, the gateway's call (the question and the first 32 tools).
        let request = scope.spawn(|| chat(&g, "what is the weather in Paris"));
        until_stats(&embed, "the gateway's call queued behind it", |s| {
            s["requests"] == 2 && s["queued"] == 1
        });
        // Held, the server can neither run the call nor answer it: the call outlives
        // timeout_ms, the request goes on by keyword, and Envoy closes the call's connection.
        embed.hold();
        let r = request.join().unwrap();
        embed.resume();
        assert_eq!(
            r.header("x-toolsift"),
            Some("kept=5 total=80 ranking=keyword fallback=timeout"),
            "{}",
            g.log_text()
        );
    });
    assert_eq!(busy.join().unwrap().unwrap().status, 200);

    // The server skips the abandoned call when its turn comes (it saw the connection close on
    // resuming, with the busy request's seconds of work still ahead), then answers the
    // background fetch of the catalog's tools: what it embedded is the busy texts and the 80
    // tools, not the abandoned call's 33 inputs. (A bound for a failure, not a wait.)
    let deadline = Instant::now() + Duration::from_secs(600);
    while g.stat("toolsift.embeddings.backfilled") < 80 {
        assert!(
            Instant::now() < deadline,
            "the tools were never fetched: {}",
            embed.stats()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let stats = embed.stats();
    assert_eq!(stats["abandoned"], 1, "{stats}");
    assert_eq!(stats["inputs"], busy_inputs + 80, "{stats}");
    // The background calls (80 tools, 32 a call) said so; the request's call did not.
    assert_eq!(stats["background"], 3, "{stats}");
}

#[test]
fn the_configured_headers_carry_the_api_key() {
    let g = faulty(json!({
        "path": "/embeddings/auth",
        "headers": {"authorization": "Bearer demo-key"}
    }));
    let r = chat(&g, "what is the weather in Paris");
    assert_eq!(
        r.header("x-toolsift"),
        Some("kept=5 total=80 ranking=hybrid")
    );
    // Without the key the service refuses: keyword ranking, counted.
    let g = faulty(json!({"path": "/embeddings/auth"}));
    assert_falls_back(&g, "status");
}

#[test]
fn the_stand_in_answering_well_gives_hybrid_ranking() {
    // The control for the fault cases: the same stand-in, answering properly.
    let g = faulty(json!({"path": "/embeddings/ok"}));
    let r = chat(&g, "what is the weather in Paris");
    assert_eq!(
        r.header("x-toolsift"),
        Some("kept=5 total=80 ranking=hybrid")
    );
    let stats = g.upstream.stats();
    assert_eq!(stats["embeddings"]["requests"], 1, "{stats}");
}
