//! The properties the fuzz targets check, one function per target.
//!
//! cargo-fuzz runs each through its target in `src/bin/` (`make fuzz`); the regression test
//! (`tests/fuzz_regressions.rs`, in `make test`) includes this file and replays every input of
//! `corpus/<target>/` and `regressions/<target>/` through the same function, natively. A
//! property that does not hold panics, which is what libFuzzer reports as a crash.
//!
//! Adding a target: a function here with a line in [`TARGETS`], `src/bin/<name>.rs` calling it
//! (two lines, like the others), and a seed or more in `corpus/<name>/` (the regression test
//! refuses a target with nothing to replay). `make fuzz` then runs it, `make fuzz-corpus` keeps
//! what it finds.

use serde_json::value::RawValue;
use toolsift::config::Config;
use toolsift::dialects::Dialect;
use toolsift::pairs::HeaderMap;
use toolsift::pipeline::{Analysis, Engine, RequestHeaders, body_text};
use toolsift::search::plan::{HeaderRoom, Planned, entry_texts, plan};
use toolsift::search::respond::{Answer, Flow, Head, Responder};
use toolsift::search::respond_model::Envoy;
use toolsift::search::round::{Next, Session};
use toolsift::search::sse::{self, Frame, Framing};
use toolsift::search::{Edits, Reply};

/// Plans as with held request headers: every `native_search` rule can apply.
const HELD: HeaderRoom<'static> = HeaderRoom {
    held: true,
    anthropic_beta: "",
};

/// A target's property: panics when it does not hold for the input.
pub type Property = fn(&[u8]);

/// Every target: its name (the file in `src/bin/`, the folders in `corpus/` and
/// `regressions/`) and its property.
pub const TARGETS: &[(&str, Property)] = &[
    ("request_openai_chat", request_openai_chat),
    ("request_openai_responses", request_openai_responses),
    ("request_anthropic", request_anthropic),
    ("request_ollama", request_ollama),
    ("request_gemini", request_gemini),
    ("request_bedrock", request_bedrock),
    ("response", response),
    ("respond", respond),
    ("config", config),
    ("request_custom", request_custom),
    ("header_map", header_map),
    ("mcp_message", mcp_message),
    ("eventstream", eventstream),
    ("memory_set", memory_set),
    ("shadow_answer", shadow_answer),
    ("lifecycle", lifecycle),
    ("mcp_route", mcp_route),
    ("auto_k_values", auto_k_values),
    ("vector_set", vector_set),
    ("alias_slot", alias_slot),
    ("mcp_generation", mcp_generation),
    ("fleet_calibration", fleet_calibration),
    ("assistant_turn", assistant_turn),
    ("question_reading", question_reading),
];

pub fn request_openai_chat(data: &[u8]) {
    request(Dialect::OpenaiChat, data);
}

pub fn request_ollama(data: &[u8]) {
    request(Dialect::Ollama, data);
}

pub fn request_openai_responses(data: &[u8]) {
    request(Dialect::OpenaiResponses, data);
}

pub fn request_anthropic(data: &[u8]) {
    request(Dialect::Anthropic, data);
}

pub fn request_gemini(data: &[u8]) {
    request(Dialect::Gemini, data);
}

pub fn request_bedrock(data: &[u8]) {
    request(Dialect::Bedrock, data);
}

/// Filter mode keeping one tool, search mode with every meta-tool and a native-search rule
/// (models named `*native*`), so that most requests with tools are rewritten, and filter mode
/// with the fleet's transitions after tools the corpus's histories call (issue 66).
const REQUEST_CONFIGS: [&str; 3] = [
    // The loop guard with its smallest settings: every fuzzed history's calls are read, and
    // the looping tool's latest result gets the note.
    r#"{"top_k": 1, "min_tools": 0, "loop_guard": {"repeats": 2, "window": 2,
        "note": {"text": "stop {tool}"}}}"#,
    r#"{"mode": "search", "min_tools": 0, "search": {"eager_k": 1, "use_tool": true,
        "native_search": [{"model": "*native*", "tool": {"type": "x_search"}}]},
        "loop_guard": {"note": {"text": "stop {tool}"}}}"#,
    r#"{"top_k": 1, "min_tools": 0, "shadow": {"sample": 0.5}, "auto_k": {"keep": 0.95,
        "calibration": {"version": 1, "max_k": 64, "pooled": {"calls": 2, "slots": [[1, 2]]},
        "transitions": {"pooled": [["get_weather", "send_email", 3],
            ["get_weather", "list_files", 2], ["search", "get_weather", 1]]}}}}"#,
];

fn is_json(text: &str) -> bool {
    serde_json::from_str::<&RawValue>(text).is_ok()
}

/// One request body through the request path: analysed, then rewritten (filter mode) or
/// planned (search mode). Nothing panics; what goes upstream is JSON when the body was; the
/// bytes outside the tools container are the client's; the kept tools are byte-identical to
/// the client's, in the client's order; the same body analysed again (a catalog-cache hit)
/// is decided the same way. The engine reads bytes and checks as UTF-8 only what it reads: a
/// body that is not UTF-8 is never analysed, neither afresh nor with its tools array cached.
fn request(dialect: Dialect, data: &[u8]) {
    let Ok(body) = body_text(data) else {
        for text in REQUEST_CONFIGS {
            let config = Config::from_json(text.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
            let analysed = Engine::new(config).analyse(dialect, data);
            assert!(analysed.is_err(), "a body that is not UTF-8 was analysed");
        }
        return;
    };
    let valid = is_json(body);
    connectors(dialect, body, valid);
    for text in REQUEST_CONFIGS {
        let config = Config::from_json(text.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        let mut engine = Engine::new(config.clone());
        let Ok(analysis) = engine.analyse(dialect, body) else {
            continue;
        };
        refuses_bytes_that_are_not_utf8(&mut engine, dialect, body, &analysis);
        let container = body
            .get(analysis.container.clone())
            .unwrap_or_else(|| panic!("container {:?} outside the body", analysis.container));
        let again = engine
            .analyse(dialect, body)
            .unwrap_or_else(|e| panic!("analysed once, refused the second time: {e:?}"));
        assert_eq!(again.container, analysis.container);
        assert_eq!(
            again.selection.keep, analysis.selection.keep,
            "cache hit decided otherwise"
        );
        match config.mode {
            toolsift::config::Mode::Filter => {
                // What `next=` names was kept, and was listed by the transitions.
                let kept = analysis.kept_names();
                for name in analysis.brought_in(&config) {
                    assert!(kept.contains(&name.as_str()), "{name} brought in, not kept");
                }
                if let Some(out) = analysis.rewrite(body) {
                    check_rewrite(dialect, &analysis, body, container, &out, valid);
                }
            }
            toolsift::config::Mode::Search => check_plan(&config, &analysis, body, valid),
        }
    }
}

/// Access rules that speak of connectors, their tools and namespace functions, by name, URL
/// and pattern, under both defaults.
const CONNECTOR_RULES: [&str; 2] = [
    r#"{"default": "deny", "rules": [{"when": ["*"], "allow": ["mcp:a*", "mcp_url:*.example",
        "mcp:a/get", "mcp:ab/*", "n.*", "get*"], "deny": ["*del*", "mcp_url:bad.example"]}]}"#,
    r#"{"default": "allow", "rules": [{"when": ["*"], "deny": ["mcp:b*", "mcp:a/x*", "n.del*"]}]}"#,
];

/// A body's connectors and namespaces under access rules ([`toolsift::connectors`]): nothing
/// panics; what is written is JSON when the body was; and deciding what was written again
/// changes nothing (no denied connector, connector tool or namespace function is left, and
/// every narrowed list is as the rules allow).
fn connectors(dialect: Dialect, body: &str, valid: bool) {
    use std::rc::Rc;
    use toolsift::access::{AccessConfig, Caller, Policy};
    for rules in CONNECTOR_RULES {
        let config: AccessConfig = serde_json::from_str(rules).unwrap_or_else(|e| panic!("{e}"));
        let policy = Rc::new(Policy::new(&config).unwrap_or_else(|e| panic!("{e:?}")));
        let grant = policy.grant(&Caller::anonymous());
        let outcome = toolsift::connectors::govern(dialect.codec(), body, &grant);
        let Some(written) = outcome.body else {
            continue;
        };
        assert!(!valid || is_json(&written), "not JSON: {written}");
        let again = toolsift::connectors::govern(dialect.codec(), &written, &grant);
        assert_eq!(
            (again.denied, again.narrowed, again.body),
            (0, 0, None),
            "decided again: {written}"
        );
    }
}

/// With the body's catalog cached, the same body with one byte that is not UTF-8 (before,
/// inside or after the tools array) is refused as malformed: recognising the tools array as a
/// cached one must not stand for checking the rest.
fn refuses_bytes_that_are_not_utf8(
    engine: &mut Engine,
    dialect: Dialect,
    body: &str,
    analysis: &Analysis,
) {
    let range = &analysis.container;
    let places = [
        0,
        range.start.saturating_sub(1),
        range.start + 1,
        range.end,
        body.len() - 1,
    ];
    for at in places.into_iter().filter(|&at| at < body.len()) {
        let mut bytes = body.as_bytes().to_vec();
        if let Some(b) = bytes.get_mut(at) {
            *b = 0xff;
        }
        let refused = engine.analyse(dialect, &bytes).err().map(|e| e.reason);
        assert_eq!(
            refused,
            Some(toolsift::pipeline::Skip::MalformedJson),
            "byte {at} made 0xff"
        );
    }
}

/// The client's bytes before and after the tools array with the loop guard's notes written,
/// the only other change toolsift makes: each outside the tools array, for a tool the guard
/// evicted, its text the configured note (JSON-escaped, after a blank line in a string, or a
/// JSON value of its own).
fn outside(body: &str, analysis: &Analysis) -> (String, String) {
    let range = &analysis.container;
    let (mut before, mut after) = (Vec::new(), Vec::new());
    for note in &analysis.notes {
        assert!(
            analysis.evicted.contains(&note.tool),
            "a note for a tool kept"
        );
        let words = serde_json::Value::from(format!("stop {}", note.tool)).to_string();
        let words = &words[1..words.len() - 1];
        assert!(note.text.contains(words), "{} for {}", note.text, note.tool);
        let replaced = &body[note.at.clone()];
        assert!(
            replaced.is_empty() || replaced == "null",
            "a note replaced {replaced}"
        );
        if note.at.end <= range.start {
            before.push((note.at.clone(), note.text.as_str()));
        } else {
            assert!(note.at.start >= range.end, "a note inside the tools array");
            let at = note.at.start - range.end..note.at.end - range.end;
            after.push((at, note.text.as_str()));
        }
    }
    (
        patched(&body[..range.start], before),
        patched(&body[range.end..], after),
    )
}

/// `text` with each range replaced (none overlap).
fn patched(text: &str, mut patches: Vec<(std::ops::Range<usize>, &str)>) -> String {
    patches.sort_by_key(|(at, _)| at.start);
    let (mut out, mut from) = (String::new(), 0);
    for (at, replacement) in patches {
        assert!(at.start >= from, "notes overlap");
        out.push_str(&text[from..at.start]);
        out.push_str(replacement);
        from = at.end;
    }
    out.push_str(&text[from..]);
    out
}

fn check_rewrite(
    dialect: Dialect,
    analysis: &Analysis,
    body: &str,
    container: &str,
    out: &str,
    valid: bool,
) {
    assert!(
        !valid || is_json(out),
        "rewrite of valid JSON is not JSON: {out}"
    );
    let (before, after) = outside(body, analysis);
    let (before, after) = (before.as_str(), after.as_str());
    assert!(out.starts_with(before), "bytes before the tools changed");
    assert!(out.ends_with(after), "bytes after the tools changed");
    assert!(out.len() >= before.len() + after.len());
    let new_container = &out[before.len()..out.len() - after.len()];
    let texts = entry_texts(container, &analysis.catalog.draft);
    let kept: Vec<&str> = texts
        .iter()
        .zip(&analysis.selection.keep)
        .filter(|(_, keep)| **keep)
        .map(|(text, _)| *text)
        .collect();
    let draft = dialect
        .catalog(new_container)
        .unwrap_or_else(|e| panic!("rewritten tools unreadable ({e:?}): {new_container}"));
    assert_eq!(
        entry_texts(new_container, &draft),
        kept,
        "the tools sent are not the kept tools, byte for byte and in order"
    );
}

fn check_plan(config: &Config, analysis: &Analysis, body: &str, valid: bool) {
    let out = match plan(config, analysis, body, HELD) {
        None | Some(Planned::Native(_)) => return,
        Some(Planned::Provider(provider)) => provider.body,
        Some(Planned::Search(search)) => search.body,
    };
    assert!(
        !valid || is_json(&out),
        "search plan of valid JSON is not JSON: {out}"
    );
    let (before, after) = outside(body, analysis);
    assert!(out.starts_with(&before), "bytes before the tools changed");
    assert!(out.ends_with(&after), "bytes after the tools changed");
}

/// The custom shapes [`request_custom`] reads a body with: a tools array (each tool in a
/// `function` wrapper) and tools written as text tags, markup stripped or not; each keeps one
/// tool, so that most bodies with tools are rewritten.
const CUSTOM_CONFIGS: [&str; 3] = [
    r#"{"top_k": 1, "min_tools": 0, "custom": {"paths": ["/*"],
        "query_path": "$.messages[-1].content", "tools_path": "$.tools[*].function"}}"#,
    r#"{"top_k": 1, "min_tools": 0, "custom": {"paths": ["/*"],
        "text_path": "$.messages[*].content"}}"#,
    r#"{"top_k": 1, "min_tools": 0, "custom": {"paths": ["/*"],
        "text_path": "$.messages[*].content", "strip_tags": true}}"#,
];

/// One body through each custom shape: analysed twice (the second time a catalog-cache hit,
/// decided the same way), then rewritten. Nothing panics; what goes upstream is JSON when the
/// body was; the bytes outside the span the analysis names are the client's; a tools array
/// keeps the kept tools byte for byte, in order; tags (not stripped) still hold the kept
/// tools, in order.
pub fn request_custom(data: &[u8]) {
    let Ok(body) = body_text(data) else {
        return;
    };
    for (i, text) in CUSTOM_CONFIGS.iter().enumerate() {
        let config = Config::from_json(text.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        let mut engine = Engine::new(config.clone());
        let Ok(analysis) = engine.analyse_custom(body) else {
            continue;
        };
        let again = engine
            .analyse_custom(body)
            .unwrap_or_else(|e| panic!("analysed once, refused the second time: {e:?}"));
        assert!(
            again.cache_hit,
            "the same body again is a catalog-cache hit"
        );
        assert_eq!(
            again.selection.keep, analysis.selection.keep,
            "cache hit decided otherwise"
        );
        let Some(out) = analysis.rewrite(body) else {
            continue;
        };
        assert!(is_json(&out), "rewrite of a custom body is not JSON: {out}");
        let range = &analysis.container;
        let (before, after) = (&body[..range.start], &body[range.end..]);
        assert!(out.starts_with(before), "bytes before the tools changed");
        assert!(out.ends_with(after), "bytes after the tools changed");
        let kept: Vec<&str> = analysis.kept_names();
        let reread = engine.analyse_custom(&out);
        match i {
            0 => {
                let container = &body[range.clone()];
                let texts = entry_texts(container, &analysis.catalog.draft);
                let kept_texts: Vec<&str> = texts
                    .iter()
                    .zip(&analysis.selection.keep)
                    .filter(|(_, keep)| **keep)
                    .map(|(text, _)| *text)
                    .collect();
                let new_container = &out[before.len()..out.len() - after.len()];
                let items: Vec<&RawValue> = serde_json::from_str(new_container)
                    .unwrap_or_else(|e| panic!("rewritten tools unreadable ({e}): {out}"));
                let items: Vec<&str> = items.iter().map(|i| i.get()).collect();
                assert_eq!(items, kept_texts, "the tools sent are not the kept tools");
            }
            1 => {
                let names = reread.map(|a| {
                    a.catalog
                        .draft
                        .entries
                        .iter()
                        .enumerate()
                        .filter_map(|(e, _)| a.catalog.name(e).map(str::to_owned))
                        .collect::<Vec<_>>()
                });
                let names = names.unwrap_or_default();
                let mut left = names.iter();
                assert!(
                    kept.iter().all(|k| left.any(|n| n == k)),
                    "kept tools {kept:?} missing from the rewritten tags {names:?}"
                );
            }
            _ => {}
        }
    }
}

/// A small request per dialect whose search session the `response` target answers: three tools,
/// the meta-tools `find_tools` and `use_tool` in front of them.
fn search_request(dialect: Dialect) -> &'static str {
    match dialect {
        // Ollama's tools and messages are OpenAI Chat's.
        Dialect::OpenaiChat | Dialect::Ollama => {
            r#"{"model":"m","messages":[{"role":"user","content":"weather in Paris"}],"tools":[{"type":"function","function":{"name":"get_weather","description":"Current weather for a city","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}},{"type":"function","function":{"name":"send_email","description":"Send an email","parameters":{"type":"object","properties":{"to":{"type":"string"}}}}},{"type":"function","function":{"name":"list_files","description":"List files in a folder"}}]}"#
        }
        Dialect::OpenaiResponses => {
            r#"{"model":"m","input":"weather in Paris","tools":[{"type":"function","name":"get_weather","description":"Current weather for a city","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}},{"type":"function","name":"send_email","description":"Send an email","parameters":{"type":"object","properties":{"to":{"type":"string"}}}},{"type":"function","name":"list_files","description":"List files in a folder","parameters":{}}]}"#
        }
        Dialect::Anthropic => {
            r#"{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"weather in Paris"}],"tools":[{"name":"get_weather","description":"Current weather for a city","input_schema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}},{"name":"send_email","description":"Send an email","input_schema":{"type":"object","properties":{"to":{"type":"string"}}}},{"name":"list_files","description":"List files in a folder","input_schema":{"type":"object"}}]}"#
        }
        Dialect::Gemini => {
            r#"{"contents":[{"role":"user","parts":[{"text":"weather in Paris"}]}],"tools":[{"functionDeclarations":[{"name":"get_weather","description":"Current weather for a city","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}},{"name":"send_email","description":"Send an email","parameters":{"type":"object","properties":{"to":{"type":"string"}}}},{"name":"list_files","description":"List files in a folder"}]}]}"#
        }
        Dialect::Bedrock => {
            r#"{"messages":[{"role":"user","content":[{"text":"weather in Paris"}]}],"toolConfig":{"tools":[{"toolSpec":{"name":"get_weather","description":"Current weather for a city","inputSchema":{"json":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}},{"toolSpec":{"name":"send_email","description":"Send an email","inputSchema":{"json":{"type":"object","properties":{"to":{"type":"string"}}}}}},{"toolSpec":{"name":"list_files","description":"List files in a folder","inputSchema":{"json":{"type":"object"}}}}]}}"#
        }
    }
}

thread_local! {
    /// One engine per dialect, kept between inputs: the catalog of [`search_request`] is then
    /// indexed once, not on every input (only the answer varies).
    static ENGINES: std::cell::RefCell<Vec<(Dialect, Engine)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A search session over [`search_request`], waiting for the model's first turn.
fn session(dialect: Dialect) -> Session {
    let config =
        Config::from_json(br#"{"mode":"search","min_tools":0,"search":{"use_tool":true}}"#)
            .unwrap_or_else(|e| panic!("{e}"));
    let body = search_request(dialect);
    ENGINES.with_borrow_mut(|engines| {
        let at = match engines.iter().position(|(d, _)| *d == dialect) {
            Some(at) => at,
            None => {
                engines.push((dialect, Engine::new(config.clone())));
                engines.len() - 1
            }
        };
        let analysis = engines[at]
            .1
            .analyse(dialect, body)
            .unwrap_or_else(|e| panic!("{dialect:?}: {e:?}"));
        let Some(Planned::Search(first)) = plan(&config, &analysis, body, HELD) else {
            panic!("{dialect:?}: no search plan");
        };
        Session::new(&config, &analysis, body, first)
    })
}

/// Filter mode answering made-up calls (`unknown_tools.answer`) over [`search_request`], its
/// tools cut to the best two (one of the request's own tools ranked out).
fn answering(dialect: Dialect) -> Session {
    let config = Config::from_json(br#"{"min_tools":0,"top_k":2,"unknown_tools":{"answer":true}}"#)
        .unwrap_or_else(|e| panic!("{e}"));
    let body = search_request(dialect);
    let analysis = Engine::new(config.clone())
        .analyse(dialect, body)
        .unwrap_or_else(|e| panic!("{dialect:?}: {e:?}"));
    let sent = analysis
        .rewrite(body)
        .unwrap_or_else(|| panic!("{dialect:?}: not rewritten"));
    Session::answering(&config, &analysis, dialect, sent)
}

/// A guard of access rules that deny the tools `get_*` to everyone.
fn guard(dialect: Dialect) -> Session {
    let config = Config::from_json(
        br#"{"access":{"default":"allow","rules":[{"when":["*"],"deny":["get_*"]}]}}"#,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let grant = Engine::new(config)
        .grant(&toolsift::access::Caller::anonymous())
        .unwrap_or_else(|| panic!("access rules"));
    Session::guard(dialect, grant)
}

/// `data[0]` picks the dialect (its low 7 bits) and whole or streamed (its high bit), `data[1]` seeds the chunking, the rest
/// is a provider's answer. Read as search mode reads it: the model's turn, the session's next
/// step, and the answer finished for the client (calls removed, usage rewritten); a stream is
/// also framed chunk by chunk, as it arrives. Nothing panics; a stream framed in chunks has
/// the frames of the whole; every conversation item read from a turn is JSON; a follow-up is
/// a JSON request of the dialect; what the client gets is JSON when the answer was.
pub fn response(data: &[u8]) {
    let [selector, seed, rest @ ..] = data else {
        return;
    };
    let dialect = Dialect::ALL[usize::from(selector & 0x7f) % Dialect::ALL.len()];
    let streamed = selector & 0x80 != 0;
    let codec = dialect.codec();
    let Some(text) = sse::utf8_prefix(rest) else {
        return;
    };
    let mut session = session(dialect);
    if !streamed {
        let Ok(reply) = codec.read_reply(text) else {
            return;
        };
        let edits = check_turn(dialect, &mut session, &reply);
        if let Ok(out) = codec.finish_reply(text, &edits) {
            assert!(
                !is_json(text) || is_json(&out),
                "finished answer is not JSON: {out}"
            );
        }
        return;
    }
    let framing = codec.framing();
    let stream_frames = framing.frames(text).0;
    if std::str::from_utf8(rest).is_ok() {
        // A binary event stream is read here as its transcription, SSE (target `eventstream`
        // reads the bytes).
        let chunking = match framing {
            Framing::EventStream => Framing::Sse,
            other => other,
        };
        assert_eq!(
            framed_in_chunks(chunking, rest, *seed),
            stream_frames,
            "frames read in chunks differ from the whole stream's"
        );
    }
    // Gemini without `alt=sse` streams one JSON array.
    let whole = match sse::array_frames(text) {
        Some(array) if dialect == Dialect::Gemini => array,
        _ => stream_frames,
    };
    for n in 0..=whole.len() {
        let _ = codec.opening(&whole[..n]);
        let rest_of = framing.after_events(text, n);
        assert!(text.ends_with(rest_of));
    }
    for frame in &whole {
        let _ = codec.calls_started(frame);
    }
    let half = whole.len() / 2;
    if codec.continues_streams() {
        if let Ok(out) = codec.continue_stream(&whole[..half], text) {
            let _ = framing.frames(&out);
        }
    }
    let Ok(reply) = codec.read_stream(&whole) else {
        return;
    };
    let edits = check_turn(dialect, &mut session, &reply);
    if let Ok(out) = codec.finish_stream(&whole, &edits) {
        let is_event = |data: &str| data == "[DONE]" || is_json(data);
        let (finished, used) = framing.frames(&out);
        assert_eq!(used, out.len(), "finished stream ends inside an event");
        if whole.iter().all(|frame| is_event(&frame.data)) {
            for frame in finished {
                assert!(
                    is_event(&frame.data),
                    "finished stream has an event that is not JSON: {}",
                    frame.data
                );
            }
        }
    }
}

/// The frames of `bytes` read as they arrive in chunks of 1 to 64 bytes, sizes drawn from
/// `seed`: each chunk is appended to what is pending, and the complete events are taken.
fn framed_in_chunks(framing: Framing, bytes: &[u8], seed: u8) -> Vec<Frame> {
    let mut state = u32::from(seed) | 1;
    let mut pending: Vec<u8> = Vec::new();
    let mut frames = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        let size = 1 + (state >> 16) as usize % 64;
        let end = (at + size).min(bytes.len());
        pending.extend_from_slice(&bytes[at..end]);
        at = end;
        let Some((new, used)) = framing.wire_frames(&pending) else {
            return frames;
        };
        frames.extend(new);
        pending.drain(..used);
    }
    frames
}

/// AWS's binary event stream (Bedrock's `converse-stream`). `data[0]` seeds the chunking; the
/// rest is the stream. Nothing panics; a message the decoder accepts is written back byte for
/// byte; the stream's frames are the same read whole or in chunks, and written as messages
/// they read back the same; through a guard that denies `get_*`, what the Bedrock codec
/// writes is whole messages again, calling no such tool.
pub fn eventstream(data: &[u8]) {
    let [seed, rest @ ..] = data else {
        return;
    };
    if let Ok(Some((message, len))) = sse::eventstream::decode(rest) {
        assert!(len <= rest.len(), "a message longer than its bytes");
        let again = sse::eventstream::encode(&message);
        assert_eq!(
            again.as_deref(),
            rest.get(..len),
            "re-encoded message differs"
        );
    }
    let framing = Framing::EventStream;
    let Some((frames, used)) = framing.wire_frames(rest) else {
        return;
    };
    assert!(used <= rest.len());
    assert_eq!(
        framed_in_chunks(framing, rest.get(..used).unwrap_or_default(), *seed),
        frames,
        "frames read in chunks differ from the whole stream's"
    );
    let wire = sse::eventstream::write_all(&frames).unwrap_or_else(|| panic!("too long"));
    assert_eq!(
        framing.wire_frames(&wire),
        Some((frames.clone(), wire.len())),
        "frames written as messages read back differently"
    );
    let codec = Dialect::Bedrock.codec();
    let _ = codec.opening(&frames);
    for frame in &frames {
        let _ = codec.calls_started(frame);
    }
    let Ok(reply) = codec.read_stream(&frames) else {
        return;
    };
    let mut session = guard(Dialect::Bedrock);
    let Next::Deliver(edits) = session.on_reply(&reply) else {
        panic!("a guard never follows up");
    };
    if edits == Edits::default() {
        return;
    }
    if let Ok(out) = codec.finish_stream(&frames, &edits) {
        // What the client would get: whole messages, whose calls the guard lets through.
        let Some(bytes) = framing.to_wire(&out) else {
            return;
        };
        let text = framing
            .wire_text(bytes)
            .unwrap_or_else(|| panic!("not messages"));
        if let Ok(checked) = codec.read_stream(&framing.frames(&text).0) {
            assert!(
                !session.refuses_any(&checked),
                "a denied call went through: {text}"
            );
        }
    }
}

/// The session's step after `reply`: follow-ups must be JSON requests of the dialect, and the
/// turn's conversation items JSON. Returns the edits the client's answer gets (on a follow-up,
/// those that would drop every call).
fn check_turn(dialect: Dialect, session: &mut Session, reply: &Reply) -> Edits {
    for item in &reply.turn {
        assert!(
            is_json(item),
            "conversation item read from the turn is not JSON: {item}"
        );
    }
    let _ = session.queries(reply);
    match session.on_reply(reply) {
        Next::Deliver(edits) => edits,
        Next::FollowUp(body) => {
            assert!(is_json(&body), "follow-up is not JSON: {body}");
            dialect.parse(&body).unwrap_or_else(|e| {
                panic!("follow-up is not a {dialect:?} request ({e:?}): {body}")
            });
            // With a refusal's words in their place, as access rules write them.
            Edits {
                drop: reply.calls.iter().map(|c| c.id.clone()).collect(),
                rename: Vec::new(),
                usage: reply.usage,
                text: Some("Tool `x` is not available.".to_owned()),
            }
        }
    }
}

/// Search mode's response side (`toolsift::search::respond`) driven through a model of Envoy's
/// buffering. `data[0]`: the dialect (low 4 bits), streamed (bit 4), held headers (bit 5), ends
/// with trailers (bit 6), a guard of access rules instead of a search (bit 7); `data[1]` seeds
/// the chunking; the rest is the model's first answer and, after a 0xFF byte (never in UTF-8),
/// the answer every follow-up gets. Nothing panics; Envoy's buffer is empty at the end (what
/// was held went out); every byte of the answer is read from Envoy once at most; follow-ups
/// stop; an answer that calls only the request's own tools reaches the client byte for byte,
/// whatever the chunking; through a guard that denies `get_*`, what the client gets calls no such tool.
/// With the guard bit and the hold bit, filter mode's session answering made-up calls reads it
/// instead (the same properties as search mode's, the made-up calls its follow-ups answer).
pub fn respond(data: &[u8]) {
    let [selector, seed, rest @ ..] = data else {
        return;
    };
    let dialect = Dialect::ALL[usize::from(selector & 0x0f) % Dialect::ALL.len()];
    let (streamed, hold, trailers) = (
        selector & 0x10 != 0,
        selector & 0x20 != 0,
        selector & 0x40 != 0,
    );
    let (first, next) = match rest.iter().position(|b| *b == 0xff) {
        Some(at) => (&rest[..at], &rest[at + 1..]),
        None => (rest, rest),
    };
    // A guard with the hold bit: filter mode answering made-up calls instead.
    let answers = selector & 0x80 != 0 && hold;
    let guarded = selector & 0x80 != 0 && !hold;
    let mut machine = if answers {
        Responder::new(answering(dialect), streamed, false)
    } else if guarded {
        Responder::new(guard(dialect), streamed, false)
    } else {
        Responder::new(session(dialect), streamed, hold)
    };
    let envoy = Envoy::default();
    let codec = dialect.codec();
    let framing = codec.framing();
    let content_type = match (streamed, framing) {
        // Bedrock's converse-stream: AWS's binary event stream.
        (true, Framing::EventStream) => sse::eventstream::CONTENT_TYPE,
        (true, _) => "text/event-stream",
        (false, _) => "application/json",
    };
    let head = Head {
        status: Some("200".into()),
        content_type: Some(content_type.into()),
        content_encoding: None,
        end_of_stream: false,
    };
    machine.on_headers(&envoy, &head);
    let mut state = u32::from(*seed) | 1;
    let mut at = 0;
    loop {
        state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        let size = 1 + (state >> 16) as usize % 97;
        let end = (at + size).min(first.len());
        let last = end == first.len();
        envoy.feed(&mut machine, &first[at..end], last && !trailers);
        at = end;
        if last {
            break;
        }
    }
    if trailers && machine.on_trailers(&envoy) == Flow::Continue {
        envoy.flush();
    }
    let mut follow_ups = 0;
    while let Some(token) = machine.token() {
        follow_ups += 1;
        assert!(follow_ups <= 10, "follow-ups never stop");
        let answer = Answer {
            status: Some(200),
            content_type: Some(content_type.into()),
            body: next.to_vec(),
        };
        envoy.answer(&mut machine, token, answer);
    }
    assert!(envoy.buffer.borrow().is_empty(), "Envoy still holds bytes");
    assert!(envoy.read.get() <= first.len(), "bytes read twice");
    // A stream as text (a binary one transcribed), or a whole answer.
    let as_text = |bytes: &[u8]| {
        if streamed {
            framing.wire_text(bytes.to_vec())
        } else {
            String::from_utf8(bytes.to_vec()).ok()
        }
    };
    let Some(text) = as_text(first) else {
        return;
    };
    let reply = if streamed {
        codec.read_stream(&framing.frames(&text).0)
    } else {
        codec.read_reply(&text)
    };
    if guarded {
        let bytes = envoy.client.borrow().clone();
        let client = as_text(&bytes).unwrap_or_else(|| {
            // What a guard lets through of a stream it read is whole messages.
            assert!(
                !(streamed && framing == Framing::EventStream),
                "the client got a damaged event stream"
            );
            String::from_utf8_lossy(&bytes).into_owned()
        });
        let reread = if streamed {
            codec.read_stream(&framing.frames(&client).0)
        } else {
            codec.read_reply(&client)
        };
        if let Ok(reread) = reread {
            assert!(
                !reread.calls.iter().any(|c| c.name.starts_with("get_")),
                "a denied call reached the client: {client}"
            );
        }
        return;
    }
    // Calls of tools the request does not have never reach the client as they are (the model
    // is told, or the client reads that they do not exist): only answers that call the
    // request's own tools must pass untouched.
    let own = |name: &str| matches!(name, "get_weather" | "send_email" | "list_files");
    if reply.is_ok_and(|r| r.calls.iter().all(|c| own(&c.name)))
        && !text.contains("find_tools")
        && !text.contains("use_tool")
    {
        assert_eq!(
            *envoy.client.borrow(),
            first,
            "an answer without searches changed"
        );
    }
}

/// A plugin configuration: parsed without panicking, and when accepted, an engine built from it
/// reads a small request of every dialect (and plans it in search mode) without panicking.
pub fn config(data: &[u8]) {
    let Ok(config) = Config::from_json(data) else {
        return;
    };
    let mut engine = Engine::new(config.clone());
    for dialect in Dialect::ALL {
        let body = search_request(dialect);
        if let Ok(analysis) = engine.analyse(dialect, body) {
            let _ = analysis.rewrite(body);
            let _ = plan(&config, &analysis, body, HELD);
        }
    }
}

/// A header map as the host serialises it, read in place and screened. Nothing panics; a map
/// that adds up reads as the headers it holds, which serialise back to the same bytes; one
/// that does not reads as no header at all.
pub fn header_map(data: &[u8]) {
    let map = HeaderMap::new(data.to_vec());
    let headers: Vec<(&[u8], &[u8])> = map.iter().collect();
    let again = toolsift::pairs::encode(&headers);
    if !headers.is_empty() {
        assert_eq!(
            again.get(..again.len()),
            data.get(..again.len()),
            "headers that serialise otherwise"
        );
    }
    let reread = HeaderMap::new(again);
    assert!(
        reread.iter().eq(headers.iter().copied()),
        "read back otherwise"
    );
    for end_of_stream in [false, true] {
        let screened = RequestHeaders::from_map(&map, end_of_stream);
        let _ = screened.screen(&Config::default());
    }
}

/// A set of search mode's memory of found tools as shared data may hold it (another version's
/// bytes, a damaged value, MCP sessions' search loops), as it is and behind this version's
/// layout byte. Nothing panics; what decodes encodes back to the bytes it came from; a
/// session is recalled within the memory's bounds (`max_tools` tools, `MAX_QUERIES` queries);
/// and a session read and written over it (its tools and its loop) leaves the set within its
/// bytes.
pub fn memory_set(data: &[u8]) {
    use toolsift::embeddings::{MemoryBytes, SharedBytes};
    use toolsift::search::memory::{LAYOUT, MAX_QUERIES, Memory, SessionKey};
    assert!(
        toolsift::search::memory::decode_round_trips(data),
        "decoded sessions that encode otherwise"
    );
    let config = toolsift::config::search::Memory {
        max_bytes: 1024,
        max_tools: 4,
        ..Default::default()
    };
    let memory = Memory::new(&config);
    for value in [data.to_vec(), [&[LAYOUT][..], data].concat()] {
        let store = MemoryBytes::default();
        for set in memory.set_keys() {
            store.set(&set, &value, None);
        }
        let name = data.get(..8).unwrap_or(data);
        let Some(key) = SessionKey::new(7, "header", name).or(SessionKey::new(7, "header", b"s"))
        else {
            return;
        };
        let now = data.first().map_or(0, |&b| u64::from(b));
        let recalled = memory.recall_session(&store, &key, now);
        assert!(recalled.names.len() <= 4, "more than max_tools recalled");
        assert!(
            recalled.searches.queries.len() <= MAX_QUERIES,
            "more than MAX_QUERIES recalled"
        );
        memory.remember(&store, &key, &["get_weather".to_owned()], &[], now);
        let names = memory.recall(&store, &key, now);
        assert!(
            names.len() <= 4 && names.last().is_some_and(|n| n == "get_weather"),
            "a remembered tool lost: {names:?}"
        );
        // An MCP session's search loop over the same bytes: counted, its answer kept, ended
        // by a real call.
        let before = memory.recall_session(&store, &key, now).searches.count;
        memory.searched(&store, &key, 42, &["send_email".to_owned()], now);
        let searches = memory.recall_session(&store, &key, now).searches;
        assert_eq!(
            searches.count,
            before.saturating_add(1),
            "a search not counted"
        );
        assert!(searches.answered(42).is_some(), "a search's answer lost");
        memory.end_searches(&store, &key, now);
        assert_eq!(
            memory.recall_session(&store, &key, now).searches,
            Default::default(),
            "a loop that outlived a real call"
        );
        for set in memory.set_keys() {
            let (bytes, _) = store.get(&set);
            assert!(
                bytes.is_some_and(|b| b.len() <= 1024),
                "a set past its bytes"
            );
        }
    }
}

/// A set of hybrid ranking's vector cache as shared data may hold it (another version's
/// bytes, a damaged value), as it is and behind this version's layout byte. Nothing panics;
/// a set reads as at most `WAYS` vectors of finite numbers, which encode and read back the
/// same; each is what the cache answers for its key; and a vector put over the set is the
/// one read back, the set still within `WAYS`.
pub fn vector_set(data: &[u8]) {
    use toolsift::embeddings::{
        Key, MemoryBytes, SET_LAYOUT, SharedBytes, VectorCache, WAYS, decode_set, encode_set,
    };
    for value in [data.to_vec(), [&[SET_LAYOUT][..], data].concat()] {
        let entries = decode_set(&value);
        assert!(entries.len() <= WAYS, "a set past WAYS");
        assert!(
            entries.iter().all(|(_, v)| v.iter().all(|x| x.is_finite())),
            "a vector that is not numbers"
        );
        assert_eq!(
            decode_set(&encode_set(&entries)),
            entries,
            "a set that does not round-trip"
        );
        let store = MemoryBytes::default();
        // One set: every key falls in `v.0`.
        let cache = VectorCache::new(&store, WAYS, "v.");
        store.set("v.0", &value, None);
        let mut seen: Vec<Key> = Vec::new();
        for (key, vector) in &entries {
            if seen.contains(key) {
                continue;
            }
            seen.push(*key);
            assert_eq!(cache.get(key).as_ref(), Some(vector), "another vector read");
        }
        let new: Key = [0xa5; 32];
        cache.put(&new, &[0.25, -0.5]);
        assert_eq!(
            cache.get(&new),
            Some(vec![0.25, -0.5]),
            "a vector put is lost"
        );
        let (after, _) = store.get("v.0");
        let after = decode_set(&after.unwrap_or_default());
        assert!(
            after.len() <= WAYS && after.first().is_some_and(|(k, _)| *k == new),
            "the set after a put"
        );
    }
}

/// A slot of the response-id aliases as shared data may hold it (another version's text, any
/// bytes), as it is and behind this version's layout word, named by the id and owner its
/// words give. Nothing panics; an alias followed is a whole id (1 to `MAX_ID` bytes, no
/// space), spliced into a request as a JSON string; and an alias remembered over the slot is
/// the one followed.
pub fn alias_slot(data: &[u8]) {
    use toolsift::embeddings::{MemoryBytes, SharedBytes};
    use toolsift::search::alias::{LAYOUT, MAX_ID, lookup, remember, resolve, slot_key};
    let text = String::from_utf8_lossy(data);
    let words: Vec<&str> = text.split(' ').collect();
    let shown = words
        .get(2)
        .copied()
        .filter(|w| !w.is_empty())
        .unwrap_or("resp_a");
    let owner = words
        .get(4)
        .and_then(|w| u64::from_str_radix(w, 16).ok())
        .unwrap_or(0);
    let now = 1;
    for value in [data.to_vec(), [LAYOUT.as_bytes(), b" ", data].concat()] {
        let store = MemoryBytes::default();
        store.set(&slot_key(shown), &value, None);
        if let Some(real) = lookup(&store, shown, owner, now) {
            assert!(
                (1..=MAX_ID).contains(&real.len()) && !real.contains(' '),
                "an alias of {} bytes followed",
                real.len()
            );
        }
        let body = serde_json::json!({"model": "m", "previous_response_id": shown, "input": "hi"});
        if let Some(resolved) = resolve(&store, &body.to_string(), owner, now) {
            let parsed: serde_json::Value =
                serde_json::from_str(&resolved).unwrap_or_else(|e| panic!("{e}: {resolved}"));
            assert!(parsed["previous_response_id"].is_string(), "{resolved}");
        }
        if (1..=MAX_ID).contains(&shown.len()) && !shown.contains(' ') {
            remember(&store, shown, "resp_real", owner, now);
            assert_eq!(
                lookup(&store, shown, owner, now).as_deref(),
                Some("resp_real"),
                "an alias remembered is not followed"
            );
        }
    }
}

/// An MCP server's tool-list generation as shared data may hold it (another version's 8
/// bytes, any bytes), as it is and behind this version's layout byte. Nothing panics; a value
/// of another layout reads as 0; and a change raises the generation read by one.
pub fn mcp_generation(data: &[u8]) {
    use toolsift::embeddings::{MemoryBytes, SharedBytes};
    use toolsift::mcp::catalog::{
        GENERATION_LAYOUT, bump_generation, generation, generation_key, read_generation,
    };
    for value in [data.to_vec(), [&[GENERATION_LAYOUT][..], data].concat()] {
        let ours = value.len() == 9 && value.first() == Some(&GENERATION_LAYOUT);
        if !ours {
            assert_eq!(
                read_generation(&value),
                0,
                "another layout read as a generation"
            );
        }
        let store = MemoryBytes::default();
        store.set(&generation_key("s"), &value, None);
        let (before, _) = generation(&store, "s");
        bump_generation(&store, "s");
        assert_eq!(
            generation(&store, "s").0,
            before.wrapping_add(1),
            "a change not counted"
        );
    }
}

/// `auto_k`'s values in the VM's shared data, as any bytes: whatever the calibration and the
/// table hold (another version's layout, another configuration's values, a cut write), as
/// they are and behind the worker's own header (version and fingerprint), a worker reads,
/// learns and decides without panicking; what it writes reads back as written; and the k it
/// selects with is `top_k` by default, else within [`min_k`, `max_k`] (`max_k` when capped).
pub fn auto_k_values(data: &[u8]) {
    use toolsift::auto_k::{AutoK, AutoKConfig, Calibration, Source, Table, header};
    use toolsift::auto_k::{CALIBRATION_KEY, TABLE_KEY};
    use toolsift::embeddings::{MemoryBytes, SharedBytes};
    let byte = |i: usize| usize::from(data.get(i).copied().unwrap_or(0));
    let max_k = 1 + byte(0) % 64;
    let min_k = 1 + byte(1) % max_k;
    let top_k = 5;
    let config = AutoKConfig {
        keep: 0.9,
        min_k,
        max_k,
        min_calls: 2,
        confidence: 0.95,
        period_s: 7,
        beyond: None,
        calibration: None,
    };
    let fingerprint = AutoK::new(config.clone(), top_k, &[]).fingerprint();
    let half = data.get(data.len() / 2..).unwrap_or_default();
    let own = header(fingerprint);
    let values = [
        (data.to_vec(), half.to_vec()),
        ([&own[..], data].concat(), [&own[..], half].concat()),
    ];
    for (calibration, table) in values {
        if let Some(c) = Calibration::decode(&calibration, fingerprint, max_k) {
            let again = Calibration::decode(&c.encode(fingerprint), fingerprint, max_k);
            assert_eq!(again, Some(c), "a calibration that does not round-trip");
        }
        if let Some(t) = Table::decode(&table, fingerprint) {
            let again = Table::decode(&t.encode(fingerprint), fingerprint);
            assert_eq!(
                again.map(|a| a.encode(fingerprint)),
                Some(t.encode(fingerprint)),
                "a table that does not round-trip"
            );
        }
        let mut worker = AutoK::new(config.clone(), top_k, &[]);
        let store = MemoryBytes::default();
        store.set(CALIBRATION_KEY, &calibration, None);
        store.set(TABLE_KEY, &table, None);
        let id = data
            .iter()
            .fold(0u32, |h, b| h.rotate_left(5) ^ u32::from(*b));
        for now in [0, 3, 1_000, 1_007, u64::MAX] {
            let _ = worker.refresh(&store, now);
            for catalog in [id, 0, 1] {
                let chosen = worker.chosen(catalog);
                let within = match chosen.source {
                    Source::Default => chosen.k == top_k,
                    Source::Calibrated | Source::Pooled => (min_k..=max_k).contains(&chosen.k),
                    // Only from `auto_k.calibration`, which this configuration has not.
                    Source::Fleet | Source::FleetPooled => false,
                };
                assert!(within, "k {} out of bounds", chosen.k);
                assert!(
                    chosen.capped.is_none() || chosen.k == max_k,
                    "capped below max_k"
                );
            }
            let slots: Vec<usize> = data.iter().take(8).map(|b| usize::from(*b)).collect();
            assert!(
                worker.learn(&store, id, &slots, now).written,
                "the memory store refused a write"
            );
            if slots.is_empty() {
                continue;
            }
            let (written, _) = store.get(CALIBRATION_KEY);
            let read = written
                .as_deref()
                .and_then(|b| Calibration::decode(b, fingerprint, max_k));
            assert!(
                read.is_some_and(|c| c.catalogs.iter().any(|x| x.id == id)),
                "what was learned does not read back"
            );
        }
    }
}

/// A client's POST on an MCP route, as access rules see it. Nothing panics; and what the gateway
/// lets pass as harmless ([`screen`]) holds no `tools/…` method for a reader as lenient as the
/// server's (Python's `json`: a repeated member's last value counts), in the message or in any
/// member of a batch: a tools request is read by the gateway or refused, never passed unread.
/// A request the gateway reads has the method and tool name that reader sees.
///
/// [`screen`]: toolsift::mcp::message::screen
pub fn mcp_message(data: &[u8]) {
    use toolsift::mcp::message::{
        Incoming, RoutingHeaders, Screened, header_value, incoming, routing_mismatch, screen,
    };
    let lenient: Option<serde_json::Value> = std::str::from_utf8(data).ok().and_then(as_python);
    let method_of = |v: &serde_json::Value| {
        v.get("method")
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
    };
    match incoming(data) {
        Incoming::Request(request) => {
            let seen = lenient.as_ref().and_then(method_of);
            assert_eq!(
                seen.as_deref(),
                Some(request.method.as_str()),
                "another method"
            );
            if let Some(params) = request.params() {
                let name = lenient
                    .as_ref()
                    .and_then(|v| v.get("params"))
                    .and_then(|p| p.get("name"))
                    .and_then(serde_json::Value::as_str);
                assert_eq!(params.name.as_deref(), name, "another tool name");
                // The headers a conforming client derives from the body always agree with it.
                let named = match request.method.as_str() {
                    "resources/read" => params.uri,
                    _ => params.name,
                };
                let routing = RoutingHeaders {
                    method: Some(request.method.clone()),
                    name: named.as_deref().map(header_value),
                    params: false,
                };
                assert_eq!(
                    routing_mismatch(&routing, &request),
                    None,
                    "agreeing headers"
                );
            }
            // Headers made of the input itself: any answer, never a panic.
            let text = String::from_utf8_lossy(data).into_owned();
            let odd = RoutingHeaders {
                method: Some(text.clone()),
                name: Some(text),
                params: false,
            };
            let _ = routing_mismatch(&odd, &request);
        }
        Incoming::Other => {
            if screen(data) == Screened::Harmless {
                let value = lenient.as_ref().expect("harmless, yet not JSON");
                let messages = match value {
                    serde_json::Value::Array(members) => members.iter().collect(),
                    one => vec![one],
                };
                for message in messages {
                    let method = method_of(message).unwrap_or_default();
                    assert!(!method.starts_with("tools/"), "passed unread: {method}");
                }
            }
        }
    }
    param_headers(data, lenient.as_ref());
    suggestion_server_answer(data);
}

/// The input as a tool a server listed, called with the input's own members as arguments: the
/// `Mcp-Param-*` headers the gateway would send are well-formed header lines, whatever the
/// schema and the values (a name or value with a line break would split the request).
fn param_headers(data: &[u8], value: Option<&serde_json::Value>) {
    let tool = String::from_utf8_lossy(data);
    let arguments = value.cloned().unwrap_or(serde_json::Value::Null);
    for (name, value) in toolsift::mcp::param_headers::param_headers(&tool, &arguments) {
        let token = name.strip_prefix("mcp-param-").unwrap_or_default();
        assert!(
            !token.is_empty()
                && token
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)),
            "not a header name: {name:?}"
        );
        assert!(
            value.bytes().all(|b| (0x20..0x7f).contains(&b)),
            "not a header value: {value:?}"
        );
    }
}

/// `text` read as Python's `json` (the server's reader) reads it, as far as the oracle needs:
/// serde_json refuses what Python takes (a number out of `f64`'s range, which Python reads as
/// `inf`; a lone surrogate escape), so what serde_json cannot read whole is read member by
/// member, and a member still unreadable becomes `null`. A repeated member's last value
/// counts, as in Python. `None` when the text is no JSON at all.
fn as_python(text: &str) -> Option<serde_json::Value> {
    use serde_json::Value;
    use serde_json::value::RawValue;
    if let Ok(value) = serde_json::from_str::<Value>(text) {
        return Some(value);
    }
    let text = without_lone_surrogates(text);
    if let Ok(value) = serde_json::from_str::<Value>(&text) {
        return Some(value);
    }
    let member = |raw: &RawValue| as_python(raw.get()).unwrap_or(Value::Null);
    if let Ok(members) =
        serde_json::from_str::<std::collections::BTreeMap<String, Box<RawValue>>>(&text)
    {
        return Some(Value::Object(
            members
                .iter()
                .map(|(k, v)| (k.clone(), member(v)))
                .collect(),
        ));
    }
    if let Ok(items) = serde_json::from_str::<Vec<Box<RawValue>>>(&text) {
        return Some(Value::Array(items.iter().map(|v| member(v)).collect()));
    }
    None
}

/// `text` with every `\uD800`..`\uDFFF` escape written `\uFFFD`: no such escape can spell
/// `method` or `tools/`, so the oracle reads the same methods either way.
fn without_lone_surrogates(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("\\u") {
        let (head, tail) = rest.split_at(at);
        out.push_str(head);
        let hex = tail.get(2..6).unwrap_or_default();
        let surrogate = u16::from_str_radix(hex, 16).is_ok_and(|u| (0xD800..=0xDFFF).contains(&u));
        if surrogate {
            out.push_str("\\uFFFD");
            rest = tail.get(6..).unwrap_or_default();
        } else {
            out.push_str(tail.get(..2).unwrap_or_default());
            rest = tail.get(2..).unwrap_or_default();
        }
    }
    out.push_str(rest);
    out
}

/// The same bytes as the suggestion server's `tools/list` answer (`suggestions.mcp`): read,
/// made a catalog and searched without a panic, and every suggestion is a named tool of it.
fn suggestion_server_answer(data: &[u8]) {
    use toolsift::suggestions::{Suggestions, SuggestionsConfig, names};
    for content_type in ["application/json", "text/event-stream"] {
        let Some(page) = toolsift::mcp::suggestions::read_list(Some(200), content_type, data)
        else {
            continue;
        };
        let tools = toolsift::mcp::suggestions::tools(vec![page]);
        let known: Vec<String> = tools.iter().map(|(name, _)| name.clone()).collect();
        let suggestions = Suggestions::new(&SuggestionsConfig::default(), tools);
        let query = String::from_utf8_lossy(data);
        for name in names(&suggestions.suggest(&query, |_| false, None)) {
            assert!(
                known.iter().any(|k| k == name),
                "suggested {name}, never listed"
            );
        }
    }
}

/// Shadow ranking's reader of a model's answer, fed as it passes. `data[0]`: the dialect (low
/// bits) and whether the head says it is a stream (high bit); `data[1]` seeds the chunking;
/// the rest is the answer. Nothing panics, and the calls read are the same whatever the cuts:
/// fed whole, or in chunks of 1 to 64 bytes.
pub fn shadow_answer(data: &[u8]) {
    use toolsift::shadow::{AnswerReader, Head};
    let [selector, seed, rest @ ..] = data else {
        return;
    };
    let dialect = Dialect::ALL[usize::from(selector & 0x7f) % Dialect::ALL.len()];
    let content_type = match (selector & 0x80 != 0, dialect) {
        (false, _) => "application/json",
        (true, Dialect::Bedrock) => "application/vnd.amazon.eventstream",
        (true, Dialect::Ollama) => "application/x-ndjson",
        (true, _) => "text/event-stream",
    };
    let head = Head {
        status: Some("200"),
        content_type: Some(content_type),
        content_encoding: None,
    };
    let read = |cuts: &mut dyn FnMut() -> usize| {
        let mut reader = AnswerReader::new(dialect);
        reader.on_head(&head);
        let mut at = 0;
        while at < rest.len() {
            let end = (at + cuts()).min(rest.len());
            reader.feed(&rest[at..end]);
            at = end;
        }
        reader.finish()
    };
    let whole = read(&mut || usize::MAX);
    let mut state = u32::from(*seed) | 1;
    let chunked = read(&mut || {
        state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        1 + (state >> 16) as usize % 64
    });
    assert_eq!(
        whole, chunked,
        "calls read in chunks differ from the whole answer's"
    );
}

/// The paths `lifecycle`'s first byte picks from: one per dialect and shape the headers phase
/// tells apart (a stream by path, Bedrock's binary stream), and one no dialect claims.
const LIFECYCLE_PATHS: [&str; 8] = [
    "/v1/chat/completions",
    "/v1/responses",
    "/v1/messages",
    "/v1beta/models/gemini-2.5-flash:generateContent",
    "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
    "/model/anthropic.claude-sonnet-4/converse",
    "/api/chat",
    "/not/an/llm/api",
];

/// The configurations `lifecycle`'s second byte picks from: filter mode with the loop guard
/// and the answer to made-up calls, search mode with memory and a native-search rule, access
/// rules (the caller from `x-group`), hybrid ranking after a gating server's verdict with a
/// rule's, and a gating server whose claims the gateway answers itself. With each, whether a
/// local 200 may answer the request (a claim answered without the model).
const LIFECYCLE_CONFIGS: [(&str, bool); 5] = [
    (
        r#"{"top_k": 1, "min_tools": 0, "debug": true, "shadow": {"sample": 0.5},
        "loop_guard": {"repeats": 2, "window": 2, "note": {"text": "stop {tool}"}},
        "unknown_tools": {"answer": true}}"#,
        false,
    ),
    (
        r#"{"mode": "search", "min_tools": 0, "search": {"eager_k": 1, "hold_headers": true,
        "memory": {"session": {"header": "x-session"}},
        "native_search": [{"model": "*native*", "tool": {"type": "x_search"}}]}}"#,
        false,
    ),
    (
        r#"{"top_k": 2, "min_tools": 0, "access": {"identity": [{"header": "x-group"}],
        "default": "deny", "unknown_paths": "deny",
        "rules": [{"when": ["ops"], "allow": ["get_*", "list_*"]},
                  {"when": ["all"], "allow": ["*"]}]}}"#,
        false,
    ),
    (
        r#"{"top_k": 2, "min_tools": 0, "ranking": "hybrid",
        "embeddings": {"cluster": "embeddings", "model": "m", "max_batch": 4},
        "gating": {"mcp": {"cluster": "gating", "path": "/mcp"}, "claim": "tool_choice",
        "rules": [{"when": {"words": ["weather"]}, "exclude": ["get_*"]}]}}"#,
        false,
    ),
    (
        r#"{"min_tools": 0, "unknown_tools": {"answer": true},
        "gating": {"mcp": {"cluster": "gating", "path": "/mcp"}, "claim": "answer"}}"#,
        true,
    ),
];

/// Answers the call Envoy's model of the core sent last with `part` (a 200 of JSON), or with
/// no response at all (`None`: a reset); returns the header count and body size Envoy would
/// hand over.
fn answer_call(
    envoy: &toolsift::lifecycle::proxy_model::Envoy,
    part: Option<&[u8]>,
) -> (usize, usize) {
    use toolsift::lifecycle::proxy::{Buffer, Headers};
    match part {
        Some(bytes) => {
            envoy.set_map(
                Headers::CallResponse,
                &[(":status", "200"), ("content-type", "application/json")],
            );
            envoy.set_body(Buffer::CallResponseBody, bytes);
            (2, bytes.len())
        }
        None => {
            envoy.set_map(Headers::CallResponse, &[]);
            envoy.set_body(Buffer::CallResponseBody, b"");
            (0, 0)
        }
    }
}

/// A header value or a filter state's: printable ASCII and tabs.
fn is_header_value(value: &str) -> bool {
    value
        .bytes()
        .all(|b| b == b'\t' || (b' '..=b'~').contains(&b))
}

/// One request through the core's one entry for Envoy's callbacks
/// (`toolsift::lifecycle::Stream`, on the model of Envoy), callback by callback: the headers
/// (path and configuration from the first two bytes, the caller from the third), the body
/// (the rest up to a 0xFF byte) in two chunks; while the body phase waits for a call (the
/// gating server, the embeddings), the call's answer (the next part after a 0xFF; none left:
/// no response); then the model's answer (the next part) and the answers of the follow-ups it
/// leads to (the parts after), and the log. Nothing panics; a buffer replacement reaches no
/// further than the buffer holds; the body that goes upstream is JSON where the client sent
/// JSON; a local reply is a 400, 403 or 404 (or a claim's 200) with a JSON body; the calls
/// sent are JSON; the answer's headers and the access log's filter state are valid header
/// values.
pub fn lifecycle(data: &[u8]) {
    use toolsift::embeddings::MemoryBytes;
    use toolsift::lifecycle::proxy::{Buffer, Headers};
    use toolsift::lifecycle::proxy_model::Envoy as Model;
    use toolsift::lifecycle::{Flow, Resume, Shared, Stream};
    let [path, config, caller, rest @ ..] = data else {
        return;
    };
    let mut parts = rest.split(|b| *b == 0xFF);
    let body = parts.next().unwrap_or_default();
    let path = LIFECYCLE_PATHS[usize::from(*path) % LIFECYCLE_PATHS.len()];
    let (config, claims) = LIFECYCLE_CONFIGS[usize::from(*config) % LIFECYCLE_CONFIGS.len()];
    let group = ["ops", "all", "nobody"][usize::from(*caller) % 3];
    let config = Config::from_json(config.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
    let envoy = Model::new("llm");
    let shared =
        Shared::new(&envoy, config, MemoryBytes::default(), u32::from(*caller)).expect("a worker");
    let length = body.len().to_string();
    envoy.set_map(
        Headers::Request,
        &[
            (":method", "POST"),
            (":path", path),
            (":authority", "api.example.com"),
            ("content-type", "application/json"),
            ("content-length", &length),
            ("x-group", group),
            ("x-session", "s1"),
        ],
    );
    envoy.set_body(Buffer::RequestBody, body);
    let was_json = body_text(body).is_ok_and(is_json);
    let mut stream = Stream::new(1);
    let mut flow = stream.on_request_headers(&envoy, &shared, body.is_empty());
    if !body.is_empty() {
        stream.on_request_body(&envoy, &shared, body.len() / 2, false);
        flow = stream.on_request_body(&envoy, &shared, body.len(), true);
    }
    // The body phase waits for at most a gating call and an embeddings call, in turn.
    let mut answered = 0;
    while flow == Flow::Pause && envoy.reply.borrow().is_none() {
        let Some(token) = envoy.last_token().filter(|t| *t > answered) else {
            break;
        };
        assert!(token <= 2, "the body phase sent a third call");
        let (headers, size) = answer_call(&envoy, parts.next());
        answered = token;
        flow = match stream.on_call(&envoy, &shared, token, headers, size) {
            Resume::Request => Flow::Continue,
            _ => Flow::Pause,
        };
    }
    assert!(
        !envoy.overreach.get(),
        "a replacement past the request body"
    );
    let reply = envoy.reply.borrow().clone();
    match &reply {
        Some((status, body)) => {
            let allowed: &[u16] = if claims {
                &[200, 400, 403, 404]
            } else {
                &[400, 403, 404]
            };
            assert!(allowed.contains(status), "replied {status}");
            assert!(is_json(body), "a reply that is not JSON: {body}");
        }
        None if was_json => {
            let sent = envoy.body(Buffer::RequestBody);
            assert!(is_json(&sent), "the upstream gets what is not JSON: {sent}");
        }
        None => {}
    }
    // The model's answer (or the local reply, through the response callbacks), then the
    // follow-ups' answers while the response waits for one.
    let answer = parts.next().unwrap_or_default();
    envoy.set_map(
        Headers::Response,
        &[(":status", "200"), ("content-type", "application/json")],
    );
    envoy.set_body(Buffer::ResponseBody, answer);
    stream.on_response_headers(&envoy, &shared, false);
    let mut flow = stream.on_response_body(&envoy, &shared, answer.len(), true);
    for _ in 0..4 {
        let Some(token) = envoy.last_token().filter(|t| *t > answered) else {
            break;
        };
        if flow != Flow::Pause {
            break;
        }
        let (headers, size) = answer_call(&envoy, parts.next());
        answered = token;
        if stream.on_call(&envoy, &shared, token, headers, size) == Resume::Response {
            flow = Flow::Continue;
        }
    }
    stream.on_log(&envoy, &shared);
    assert!(!envoy.overreach.get(), "a replacement past a buffer");
    for call in envoy.calls.borrow().iter() {
        assert!(
            is_json(&call.body),
            "a call that is not JSON: {}",
            call.body
        );
    }
    for (name, value) in envoy.response_headers.borrow().iter() {
        assert!(is_header_value(value), "{name}: {value:?}");
    }
    for (name, value) in envoy.recorded.borrow().iter() {
        assert!(is_header_value(value), "filter state {name}: {value:?}");
    }
    // The access log's record (docs/report.md, "The record"): `key=value` fields, one space
    // apart, no key twice.
    if let Some(record) = envoy.recorded.borrow().get("toolsift") {
        let mut keys = Vec::new();
        for field in record.split(' ') {
            let key = field.split_once('=').map(|(k, _)| k);
            let key = key.filter(|k| {
                !k.is_empty()
                    && k.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            });
            let key = key.unwrap_or_else(|| panic!("a field that is no key=value: {record:?}"));
            assert!(!keys.contains(&key), "{key} twice: {record:?}");
            keys.push(key);
        }
    }
}

/// The configurations an MCP route's request is driven under: plain, with access rules
/// (callers from `x-group`) and `search.memory`, and with `gating.rules`.
const MCP_ROUTE_CONFIGS: [&str; 3] = [
    r#"{"mcp": {}, "response_header": true, "always_include": ["get_*"]}"#,
    r#"{"mcp": {}, "response_header": true, "max_body_bytes": 4096,
        "search": {"memory": {}},
        "access": {"identity": [{"header": "x-group"}], "default": "deny",
        "rules": [{"when": ["ops"], "allow": ["get_*", "list_*"]},
                  {"when": ["all"], "allow": ["*"]}]}}"#,
    r#"{"mcp": {}, "gating": {"rules": [{"when": {"words": ["weather"]}, "exclude": ["send_*"]}]}}"#,
];

/// The adapter's side of an MCP route's request, recorded: what the server and the client
/// would get.
#[derive(Default)]
struct McpEnvoy {
    store: toolsift::embeddings::MemoryBytes,
    request_body: Vec<u8>,
    response_body: Vec<u8>,
    /// The server's answer to every call the gateway sends.
    server_answer: Vec<u8>,
    sent: std::cell::RefCell<Vec<String>>,
    answered: std::cell::RefCell<Vec<(u16, String, Vec<u8>)>>,
    changed: std::cell::RefCell<Vec<String>>,
}

impl toolsift::mcp::exchange::Host for McpEnvoy {
    type Store = toolsift::embeddings::MemoryBytes;

    fn send(
        &self,
        body: &str,
        _method: &str,
        _name: Option<&str>,
        _params: &[(String, String)],
        _timeout_ms: u64,
    ) -> Option<u32> {
        let mut sent = self.sent.borrow_mut();
        sent.push(body.to_owned());
        Some(sent.len() as u32)
    }
    fn respond(&self, status: u16, content_type: &str, body: &[u8]) {
        self.answered
            .borrow_mut()
            .push((status, content_type.to_owned(), body.to_vec()));
    }
    fn now_millis(&self) -> u64 {
        1_000
    }
    fn generation(&self, _server: &str) -> u64 {
        0
    }
    fn tools_changed(&self, server: &str) {
        self.changed.borrow_mut().push(server.to_owned());
    }
    fn count(&self, _event: toolsift::mcp::exchange::Event) {}
    fn hybrid(&self) -> Option<toolsift::mcp::exchange::Hybrid<'_, Self::Store>> {
        None
    }
    fn send_embeddings(&self, _inputs: &[&str]) -> Option<u32> {
        None
    }
    fn suggestions(&self) -> Option<std::rc::Rc<toolsift::suggestions::Suggestions>> {
        None
    }
    fn store(&self) -> &Self::Store {
        &self.store
    }
    fn request_body(&self, len: usize) -> Vec<u8> {
        self.request_body[..len.min(self.request_body.len())].to_vec()
    }
    fn response_body(&self, len: usize) -> Vec<u8> {
        self.response_body[..len.min(self.response_body.len())].to_vec()
    }
    fn upstream_cluster(&self) -> Option<String> {
        Some("mcp".to_owned())
    }
}

/// One request on an MCP route, driven as the adapter drives it (`mcp::request`): the first
/// byte picks the configuration, the second the caller, the method and the protocol revision;
/// the rest is the client's body, the server's answer to each call the gateway sends, and the
/// answer's event stream, split at 0xFF bytes. Nothing panics; a refusal is a JSON-RPC error
/// with a 4xx or 5xx; what the gateway answers itself (not relaying the server's answer to a
/// call it made for the client) is JSON or an event stream; the
/// gateway's own requests are JSON and carry none of one connection's headers; what
/// `x-toolsift` would say is a valid header value.
pub fn mcp_route(data: &[u8]) {
    use toolsift::mcp::catalog::CatalogCache;
    use toolsift::mcp::exchange::Settings;
    use toolsift::mcp::request::{Context, Flow, McpRequest};
    let [config, who, rest @ ..] = data else {
        return;
    };
    let config = MCP_ROUTE_CONFIGS[usize::from(*config) % MCP_ROUTE_CONFIGS.len()];
    let config = Config::from_json(config.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
    let engine = Engine::new(config);
    let mut parts = rest.split(|b| *b == 0xFF);
    let body = parts.next().unwrap_or_default();
    let envoy = McpEnvoy {
        request_body: body.to_vec(),
        server_answer: parts.next().unwrap_or_default().to_vec(),
        response_body: parts.next().unwrap_or_default().to_vec(),
        ..McpEnvoy::default()
    };
    let group = ["ops", "all", "nobody"][usize::from(*who) % 3];
    let method = if who & 0x10 == 0 { "POST" } else { "GET" };
    let revision = if who & 0x20 == 0 {
        "2025-11-25"
    } else {
        "2026-07-28"
    };
    let mut pairs: Vec<(&str, &str)> = vec![
        (":method", method),
        (":authority", "tools.internal"),
        (":path", "/mcp"),
        ("content-type", "application/json"),
        ("content-length", "10"),
        ("connection", "keep-alive"),
        ("x-group", group),
        ("mcp-session-id", "s-1"),
        ("mcp-protocol-version", revision),
    ];
    if who & 0x40 != 0 {
        pairs.extend([("mcp-method", "tools/call"), ("mcp-name", "find_tools")]);
    }
    let headers = HeaderMap::new(toolsift::pairs::encode(&pairs));
    let identity = engine.policy().map(|policy| {
        let caller = policy.caller(|n| headers.get(n), |_, _| Vec::new());
        (policy.grant(&caller), caller)
    });
    let memory = engine.config.search.memory.as_ref();
    let (mut request, outgoing) = McpRequest::new(&headers, body.is_empty(), identity, memory);
    let config = &engine.config;
    let mcp = config.mcp.clone().unwrap_or_default();
    let rules = engine.gating_rules();
    let settings = Settings {
        config,
        mcp: &mcp,
        gating: Some(rules).filter(|r| !r.is_empty()),
    };
    let mut cache = CatalogCache::new(1 << 20);
    let refused = |flow: &Flow| {
        if let Flow::Refuse(refusal) = flow {
            assert!((400..600).contains(&refusal.status), "{}", refusal.status);
            assert!(is_json(&refusal.body), "a refusal that is not JSON");
        }
    };
    let flow = request.on_headers(Some(&envoy));
    refused(&flow);
    // The body in two callbacks: half of it buffered, then all of it.
    let half = body.len() / 2;
    for (size, end) in [(half, false), (body.len(), true)] {
        let context = Context {
            host: &envoy,
            cache: &mut cache,
            settings: &settings,
        };
        refused(&request.on_body(size, end, Some(context)));
    }
    // Every call the gateway sent answered by the same server bytes, a few rounds at most.
    for _ in 0..6 {
        let Some(token) = request.token() else {
            break;
        };
        let answer = toolsift::mcp::exchange::CallAnswer {
            status: Some(200),
            content_type: if envoy.server_answer.starts_with(b"event:") {
                "text/event-stream".to_owned()
            } else {
                "application/json".to_owned()
            },
            body: envoy.server_answer.clone(),
        };
        let context = Context {
            host: &envoy,
            cache: &mut cache,
            settings: &settings,
        };
        refused(&request.on_call(token, answer, Some(context)));
    }
    for (status, content_type, answer) in envoy.answered.borrow().iter() {
        assert!((200..600).contains(status), "answered {status}");
        // `call_tool`'s real call: the server's answer is the client's, byte for byte.
        if *answer == envoy.server_answer {
            continue;
        }
        let text = std::str::from_utf8(answer).expect("a UTF-8 answer");
        match content_type.as_str() {
            "application/json" => assert!(is_json(text), "answered what is not JSON: {text}"),
            "text/event-stream" => assert!(text.starts_with("event:"), "{text}"),
            other => panic!("answered as {other}"),
        }
    }
    for sent in envoy.sent.borrow().iter() {
        assert!(is_json(sent), "sent the server what is not JSON: {sent}");
    }
    let own = outgoing.headers("tools/list", Some("x\r\ny"), &[]);
    for per_connection in toolsift::pairs::PER_CONNECTION {
        assert!(
            !own.iter().any(|(n, _)| n == per_connection),
            "{per_connection}"
        );
    }
    for (name, value) in &own {
        assert!(
            !value.contains(['\r', '\n']),
            "a header the gateway sends: {name}: {value:?}"
        );
    }
    let report = request.on_response_headers(Some(config), Some(b"text/event-stream"));
    if let Some(said) = report.header {
        assert!(
            said.bytes().all(|b| (0x20..0x7f).contains(&b)),
            "x-toolsift: {said:?}"
        );
    }
    request.on_response_body(&envoy, envoy.response_body.len());
    for server in envoy.changed.borrow().iter() {
        assert_eq!(server, "mcp|tools.internal");
    }
}

/// `toolsift calibrate`: any bytes as log lines (access log JSON, OTLP JSON, anything) for a
/// `max_k` the first byte picks. Reading never panics; a calibration it prints is one the
/// configuration accepts (its own check, and the configuration parser), round-trips through
/// JSON, and gives every catalog a k within [`min_k`, `max_k`], or `top_k`.
pub fn fleet_calibration(data: &[u8]) {
    use toolsift::auto_k::fleet::FleetCalibration;
    use toolsift::auto_k::{AutoK, AutoKConfig, Source};
    use toolsift::offline::calibrate::Collector;
    let max_k = 1 + usize::from(data.first().copied().unwrap_or(0)) % 64;
    let mut collector = Collector::new(max_k);
    for line in data.get(1..).unwrap_or_default().split(|b| *b == b'\n') {
        collector.add_line(Some(line));
    }
    let Ok(calibration) = collector.finish(vec!["fuzz.log".into()]) else {
        return;
    };
    let config = AutoKConfig {
        keep: 0.9,
        min_k: 1,
        max_k,
        min_calls: 1,
        confidence: 0.95,
        period_s: 7,
        beyond: None,
        calibration: Some(calibration.clone()),
    };
    if let Err((field, why)) = calibration.check(&config) {
        panic!("calibrate printed a calibration its check refuses: {field}: {why}");
    }
    let text = serde_json::to_string(&calibration).unwrap_or_default();
    let back: Option<FleetCalibration> = serde_json::from_str(&text).ok();
    assert_eq!(
        back.as_ref(),
        Some(&calibration),
        "a calibration that does not round-trip"
    );
    let plugin = format!(
        r#"{{"shadow": {{"sample": 0.1}}, "auto_k": {{"keep": 0.9, "max_k": {max_k},
            "calibration": {text}}}}}"#
    );
    if let Err(e) = Config::from_json(plugin.as_bytes()) {
        panic!("the configuration refuses what calibrate printed: {}", e.0);
    }
    let worker = AutoK::new(config, 5, &[]);
    for c in calibration
        .catalogs
        .iter()
        .map(|c| c.catalog.as_str())
        .chain(["ffffffff"])
    {
        let id = toolsift::auto_k::fleet::catalog_id(c).unwrap_or(0);
        let chosen = worker.chosen(id);
        let within = match chosen.source {
            Source::Default => chosen.k == 5,
            Source::Fleet | Source::FleetPooled => (1..=max_k).contains(&chosen.k),
            Source::Calibrated | Source::Pooled => false,
        };
        assert!(within, "k {} ({:?}) out of bounds", chosen.k, chosen.source);
    }
}

/// What the assistant said before the latest user text, as any bytes (read as UTF-8, lossy,
/// as the dialects hand over a JSON string's text): reading it never panics, and the answer
/// depends on the text alone: the same when read again, and with trailing spaces or line
/// breaks.
pub fn assistant_turn(data: &[u8]) {
    use toolsift::followup::assistant::{asks_to_go_on, ends_in_question};
    let said = String::from_utf8_lossy(data);
    let asks = asks_to_go_on(&said);
    let question = ends_in_question(&said);
    assert_eq!(asks, asks_to_go_on(&said), "read twice, decided otherwise");
    let padded = format!("{said} \n\t ");
    assert_eq!(
        asks,
        asks_to_go_on(&padded),
        "trailing spaces changed it: {said:?}"
    );
    assert_eq!(
        question,
        ends_in_question(&padded),
        "trailing spaces changed it: {said:?}"
    );
}

/// A question in any script, as any bytes (read as UTF-8, lossy, as the dialects hand over a
/// JSON string's text), with the catalog's text taken from its first line: tokenising never
/// panics and gives the same non-empty terms twice (bigrams of unspaced runs included), and
/// what the ranking reads of it ([`toolsift::weak_query::Reading`]) is bounded and the same
/// read twice: at most as many known terms as terms, a coverage from 0 to 1.
pub fn question_reading(data: &[u8]) {
    use toolsift::weak_query::Reading;
    let text = String::from_utf8_lossy(data);
    let (catalog_text, question) = text.split_once('\n').unwrap_or(("", &text));
    let terms = toolsift::text::terms(question);
    assert!(terms.iter().all(|t| !t.is_empty()), "an empty term");
    assert_eq!(
        terms,
        toolsift::text::terms(question),
        "tokenised twice, otherwise"
    );
    let tool = serde_json::json!([{"type": "function", "function": {"name": "tool",
        "description": catalog_text, "parameters": {"type": "object", "properties": {}}}}]);
    let Ok(catalog) = toolsift::rank::Catalog::build(
        Dialect::OpenaiChat,
        &tool.to_string(),
        toolsift::rank::FieldWeights::default(),
    ) else {
        return;
    };
    let reading = Reading::of(&catalog.index, question);
    assert_eq!(
        reading,
        Reading::of(&catalog.index, question),
        "read twice, otherwise"
    );
    assert!(reading.known <= reading.terms && reading.unknown_pairs <= reading.terms);
    let coverage = reading.coverage();
    assert!(
        (0.0..=1.0).contains(&coverage),
        "coverage {coverage} for {question:?}"
    );
}
