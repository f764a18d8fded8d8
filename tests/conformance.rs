//! Every dialect's codec over every recorded fixture of its API: the providers' real traffic in
//! `../shared/conformance/<dialect>/` and the fixtures written from published references in
//! `tests/conformance/<dialect>/` (see `tests/conformance/SOURCES.md`). The folder is the
//! codec's [`RequestCodec::recordings`], so a new dialect's fixtures are checked with no new
//! test code.
//!
//! - `*.request.json`: read (query, tools); filtered to one tool, the bytes outside the tools
//!   array and the kept tool unchanged, the result JSON; planned for search mode, JSON.
//! - `*.response.json`: a whole answer (or, holding an array, Gemini's JSON-array stream) read;
//!   its calls are tools its request offered; finished with its first call removed and every
//!   round's usage written, read again: one call fewer, that usage; and with the first call
//!   refused (access rules): one call fewer, the refusal's words in the turn. Error bodies are
//!   read without panicking and yield no calls.
//! - `*.response.sse`, `*.response.ndjson`: framed as the codec says, read, decided (the
//!   opening over every prefix), continued after its first half, finished as above.
//! - Anything else (Bedrock's binary event stream, which search mode does not follow) is
//!   listed, not read.

use serde_json::Value;
use std::path::{Path, PathBuf};
use toolsift::config::Config;
use toolsift::dialects::{Codec, Dialect};
use toolsift::pipeline::{Engine, Skip};
use toolsift::search::plan::{HeaderRoom, Planned, plan};
use toolsift::search::sse;
use toolsift::search::{Edits, Frame, Opening, Reply, Usage};

/// The folders holding `dialect`'s fixtures that exist.
fn folders(dialect: Dialect) -> Vec<PathBuf> {
    let name = dialect.codec().recordings();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    [
        root.join("../shared/conformance").join(name),
        root.join("tests/conformance").join(name),
    ]
    .into_iter()
    .filter(|p| p.is_dir())
    .collect()
}

fn fixtures(dialect: Dialect) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = folders(dialect)
        .iter()
        .flat_map(|dir| std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()))
        .collect();
    files.sort();
    files
}

fn is_json(text: &str) -> bool {
    serde_json::from_str::<Value>(text).is_ok()
}

/// The request recorded beside a response (`NAME.request.json`), if any.
fn request_beside(response: &Path) -> Option<String> {
    let name = response.file_name()?.to_str()?;
    let stem = name.split(".response").next()?;
    std::fs::read_to_string(response.with_file_name(format!("{stem}.request.json"))).ok()
}

/// The function tool names of a request body, as the codec reads them.
fn tool_names(dialect: Dialect, body: &str) -> Vec<String> {
    let Some(span) = toolsift::json::find_path(body, dialect.tools_path()) else {
        return Vec::new();
    };
    let Ok(draft) = dialect.catalog(&body[span]) else {
        return Vec::new();
    };
    draft
        .entries
        .iter()
        .filter_map(|e| match e {
            toolsift::dialects::Entry::Function(text) => Some(text.name.clone()),
            toolsift::dialects::Entry::Builtin => None,
        })
        .collect()
}

/// The recordings of `../shared/conformance` whose request uses the provider's own tool search
/// (ours are named `native-search-*`).
const NATIVE_RECORDINGS: [&str; 1] = ["text-server-tool-then-tool-use-stream.request.json"];

fn check_request(dialect: Dialect, name: &str, body: &str) {
    dialect
        .parse(body)
        .unwrap_or_else(|e| panic!("{dialect} {name}: not read: {e:?}"));
    // A request carrying the provider's own tool search passes untouched, in every mode.
    let native = name.starts_with("native-search") || NATIVE_RECORDINGS.contains(&name);
    for mode in ["filter", "search"] {
        let config = format!(r#"{{"mode":"{mode}","top_k":1,"min_tools":0}}"#);
        let config = Config::from_json(config.as_bytes()).unwrap();
        let skipped = Engine::new(config).analyse(dialect, body).err();
        assert_eq!(
            skipped.map(|s| s.reason) == Some(Skip::NativeSearch),
            native,
            "{dialect} {name} ({mode} mode): skipped as native_search only if it is one: {skipped:?}"
        );
    }
    let tools = tool_names(dialect, body);
    if tools.len() < 2 || native {
        return;
    }
    let config = Config::from_json(br#"{"top_k":1,"min_tools":0}"#).unwrap();
    let analysis = Engine::new(config)
        .analyse(dialect, body)
        .unwrap_or_else(|e| panic!("{dialect} {name}: not analysed: {e:?}"));
    let container = analysis.container.clone();
    if let Some(out) = analysis.rewrite(body) {
        assert!(
            is_json(&out),
            "{dialect} {name}: rewritten body is not JSON"
        );
        assert!(
            out.starts_with(&body[..container.start]),
            "{dialect} {name}: bytes before the tools changed"
        );
        assert!(
            out.ends_with(&body[container.end..]),
            "{dialect} {name}: bytes after the tools changed"
        );
        let kept = analysis.kept_names();
        assert_eq!(
            tool_names(dialect, &out),
            kept,
            "{dialect} {name}: the kept tools"
        );
    }
    let search = Config::from_json(br#"{"mode":"search","min_tools":0}"#).unwrap();
    let analysis = Engine::new(search.clone()).analyse(dialect, body).unwrap();
    let room = HeaderRoom {
        held: true,
        anthropic_beta: "",
    };
    if let Some(Planned::Search(planned)) = plan(&search, &analysis, body, room) {
        assert!(
            is_json(&planned.body),
            "{dialect} {name}: search plan is not JSON"
        );
        assert!(
            tool_names(dialect, &planned.body)
                .iter()
                .any(|t| t == "find_tools"),
            "{dialect} {name}: the plan offers no find_tools"
        );
    }
}

/// How many of `reply`'s calls `edits` leave: a call is named by its id, or by its name when
/// it has none (then every call of that name goes).
fn calls_left(reply: &Reply, edits: &Edits) -> usize {
    let key = |c: &toolsift::search::Call| {
        if c.id.is_empty() {
            c.name.clone()
        } else {
            c.id.clone()
        }
    };
    reply
        .calls
        .iter()
        .filter(|c| !edits.drop.contains(&key(c)))
        .count()
}

/// The edits that remove `reply`'s first call and write a usage of every round.
fn edits_for(reply: &Reply) -> (Edits, Usage) {
    let usage = Usage {
        input: 1234,
        output: 567,
    };
    let drop = reply
        .calls
        .first()
        .map(|c| {
            if c.id.is_empty() {
                c.name.clone()
            } else {
                c.id.clone()
            }
        })
        .into_iter()
        .collect();
    let edits = Edits {
        drop,
        rename: Vec::new(),
        usage: Some(usage),
        text: None,
    };
    (edits, usage)
}

/// The words a refusal writes in place of a call (access rules).
const REFUSAL: &str = "Tool `x` is not available.";

/// [`edits_for`] with the first call refused (the words take its place), written by
/// `refuse` and read back as the client's reader sees it: one call fewer, the words once in
/// the turn.
fn check_refused(
    dialect: Dialect,
    name: &str,
    reply: &Reply,
    refuse: impl Fn(&Edits) -> Result<Reply, toolsift::dialects::Problem>,
) {
    if reply.calls.is_empty() {
        return;
    }
    let edits = &Edits {
        text: Some(REFUSAL.to_owned()),
        ..edits_for(reply).0
    };
    let again = refuse(edits).unwrap_or_else(|e| panic!("{dialect} {name}: not refused: {e:?}"));
    assert_eq!(
        again.calls.len(),
        calls_left(reply, edits),
        "{dialect} {name}: the refused call removed"
    );
    assert_eq!(
        again.turn.join("").matches(REFUSAL).count(),
        1,
        "{dialect} {name}: the refusal in the turn: {:?}",
        again.turn
    );
}

fn check_reply(dialect: Dialect, name: &str, reply: &Reply, request: Option<&str>) {
    for item in &reply.turn {
        assert!(
            is_json(item),
            "{dialect} {name}: turn item is not JSON: {item}"
        );
    }
    if let Some(request) = request {
        let offered = tool_names(dialect, request);
        for call in &reply.calls {
            assert!(
                offered.contains(&call.name),
                "{dialect} {name}: call {} of a tool the request did not offer ({offered:?})",
                call.name
            );
            assert!(
                is_json(&call.arguments),
                "{dialect} {name}: arguments not JSON"
            );
        }
    }
}

fn check_whole(codec: &dyn Codec, dialect: Dialect, name: &str, text: &str, request: Option<&str>) {
    let error = name.starts_with("error");
    let Ok(reply) = codec.read_reply(text) else {
        assert!(error, "{dialect} {name}: answer not read");
        return;
    };
    if error {
        assert!(
            reply.calls.is_empty(),
            "{dialect} {name}: calls read from an error"
        );
        return;
    }
    check_reply(dialect, name, &reply, request);
    let (edits, usage) = edits_for(&reply);
    let out = codec
        .finish_reply(text, &edits)
        .unwrap_or_else(|e| panic!("{dialect} {name}: not finished: {e:?}"));
    assert!(
        is_json(&out),
        "{dialect} {name}: finished answer is not JSON"
    );
    let again = codec.read_reply(&out).unwrap();
    assert_eq!(
        again.calls.len(),
        calls_left(&reply, &edits),
        "{dialect} {name}: a call removed"
    );
    assert_eq!(again.usage, Some(usage), "{dialect} {name}: usage written");
    check_refused(dialect, name, &reply, |refusal| {
        let out = codec.finish_reply(text, refusal)?;
        assert!(
            is_json(&out),
            "{dialect} {name}: refused answer is not JSON"
        );
        codec.read_reply(&out)
    });
}

fn check_stream(
    codec: &dyn Codec,
    dialect: Dialect,
    name: &str,
    frames: &[Frame],
    request: Option<&str>,
) {
    let reply = codec
        .read_stream(frames)
        .unwrap_or_else(|e| panic!("{dialect} {name}: stream not read: {e:?}"));
    check_reply(dialect, name, &reply, request);
    let mut decided = Opening::Undecided;
    for n in 0..=frames.len() {
        let opening = codec.opening(&frames[..n]);
        if decided != Opening::Undecided {
            // What a prefix decided, a longer one does not undo.
            assert_eq!(
                opening, decided,
                "{dialect} {name}: the opening changed after {n} events"
            );
        }
        decided = opening;
    }
    let started: usize = frames.iter().map(|f| codec.calls_started(f).len()).sum();
    assert_eq!(
        started,
        reply.calls.len(),
        "{dialect} {name}: calls seen starting"
    );
    if reply.calls.is_empty() {
        assert_ne!(
            decided,
            Opening::Calls,
            "{dialect} {name}: opened as calls without any"
        );
    }
    let framing = codec.framing();
    if codec.continues_streams() {
        let whole = framing.write_all(frames);
        let rest = codec
            .continue_stream(&frames[..frames.len() / 2], &whole)
            .unwrap_or_else(|e| panic!("{dialect} {name}: not continued: {e:?}"));
        let (continued, used) = framing.frames(&rest);
        assert_eq!(
            used,
            rest.len(),
            "{dialect} {name}: continuation ends inside an event"
        );
        assert!(
            !continued.is_empty(),
            "{dialect} {name}: empty continuation"
        );
    }
    let (edits, usage) = edits_for(&reply);
    let out = codec
        .finish_stream(frames, &edits)
        .unwrap_or_else(|e| panic!("{dialect} {name}: stream not finished: {e:?}"));
    let (finished, used) = framing.frames(&out);
    assert_eq!(
        used,
        out.len(),
        "{dialect} {name}: finished stream ends inside an event"
    );
    let again = codec.read_stream(&finished).unwrap();
    assert_eq!(
        again.calls.len(),
        calls_left(&reply, &edits),
        "{dialect} {name}: a call removed"
    );
    if reply.usage.is_some() {
        assert_eq!(again.usage, Some(usage), "{dialect} {name}: usage written");
    }
    check_refused(dialect, name, &reply, |refusal| {
        let out = codec.finish_stream(frames, refusal)?;
        let (refused, used) = framing.frames(&out);
        assert_eq!(
            used,
            out.len(),
            "{dialect} {name}: refusal ends inside an event"
        );
        codec.read_stream(&refused)
    });
}

#[test]
fn every_codec_reads_continues_finishes_and_rewrites_its_fixtures() {
    let mut read = 0;
    let mut not_read = Vec::new();
    for dialect in Dialect::ALL {
        let codec = dialect.codec();
        let files = fixtures(dialect);
        assert!(
            !files.is_empty(),
            "{dialect}: no fixtures in {:?}",
            folders(dialect)
        );
        for path in files {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let Ok(text) = std::fs::read_to_string(&path) else {
                not_read.push(format!("{dialect}/{name}"));
                continue;
            };
            let request = request_beside(&path);
            if name.ends_with(".request.json") {
                check_request(dialect, &name, &text);
            } else if name.ends_with(".response.json") && text.trim_start().starts_with('[') {
                let frames = sse::array_frames(&text).unwrap();
                check_stream(codec, dialect, &name, &frames, request.as_deref());
            } else if name.ends_with(".response.json") {
                check_whole(codec, dialect, &name, &text, request.as_deref());
            } else if name.ends_with(".response.sse") || name.ends_with(".response.ndjson") {
                let (frames, _) = codec.framing().frames(&text);
                check_stream(codec, dialect, &name, &frames, request.as_deref());
            } else {
                not_read.push(format!("{dialect}/{name}"));
                continue;
            }
            read += 1;
        }
    }
    eprintln!("conformance: {read} fixtures checked; not read: {not_read:?}");
    assert!(read > 50, "only {read} fixtures read");
}

#[test]
fn every_codec_reads_back_the_answer_it_writes_for_a_claim() {
    for dialect in Dialect::ALL {
        let codec = dialect.codec();
        let answer =
            codec.claimed_answer("get_weather", &serde_json::json!({"city": "Paris"}), "m");
        let reply = codec.read_reply(&answer.to_string()).unwrap();
        assert_eq!(reply.calls.len(), 1, "{dialect}");
        assert_eq!(reply.calls[0].name, "get_weather", "{dialect}");
        assert_eq!(
            serde_json::from_str::<Value>(&reply.calls[0].arguments).unwrap(),
            serde_json::json!({"city": "Paris"}),
            "{dialect}"
        );
    }
}
