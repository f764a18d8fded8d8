//! The response-side machine against the providers' recorded answers (`../shared/conformance`),
//! cut into chunks at every byte, through a mock of Envoy's buffering: what a paused callback
//! keeps stays in the buffer, what a callback lets continue goes to the client.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use super::*;
use crate::config::Config;
use crate::dialects::Dialect;
use crate::pipeline::Engine;
use crate::search::plan::{HeaderRoom, Planned, plan};
use crate::search::respond_model::Envoy;
use std::cell::RefCell;
use std::path::PathBuf;

fn conformance(dir: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/conformance")
        .join(dir)
}

/// The recorded files of `dir` whose names end with `suffix`, sorted: (name, text).
fn recordings(dir: &str, suffix: &str) -> Vec<(String, String)> {
    let path = conformance(dir);
    let mut out: Vec<(String, String)> = std::fs::read_dir(&path)
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (../shared must sit beside the repository)",
                path.display()
            )
        })
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&p).unwrap())
        })
        .collect();
    out.sort();
    out
}

/// The calls of a recorded answer, read as the machine reads them.
fn calls_of(dialect: Dialect, text: &str, stream: bool) -> Vec<String> {
    let codec = dialect.codec();
    let reply = if stream {
        codec.read_stream(&sse::frames(text).0)
    } else {
        codec.read_reply(text)
    };
    reply
        .map(|r| r.calls.into_iter().map(|c| c.name).collect())
        .unwrap_or_default()
}

/// A search-mode request of `dialect` whose catalog holds `names` and 24 other tools, and the
/// machine for its response. Sessions are built once per catalog (the tests run thousands).
fn machine(dialect: Dialect, names: &[String], stream: bool, hold: bool) -> Responder {
    type Built = Vec<((Dialect, Vec<String>, bool), Session)>;
    thread_local! {
        static BUILT: RefCell<Built> = const { RefCell::new(Vec::new()) };
    }
    let key = (dialect, names.to_vec(), stream);
    let session = BUILT.with(|built| {
        let mut built = built.borrow_mut();
        if let Some((_, s)) = built.iter().find(|(k, _)| *k == key) {
            return s.clone();
        }
        let s = session(dialect, names, stream);
        built.push((key, s.clone()));
        s
    });
    Responder::new(session, stream, hold)
}

fn session(dialect: Dialect, names: &[String], stream: bool) -> Session {
    let config = Config::from_json(br#"{"mode":"search","min_tools":3}"#).unwrap();
    let codec = dialect.codec();
    let params = serde_json::json!({"type":"object","properties":{"q":{"type":"string"}}});
    let mut entries: Vec<String> = names
        .iter()
        .map(|n| codec.tool_entry(n, "A recorded tool", &params))
        .collect();
    entries.extend(
        (0..24).map(|i| codec.tool_entry(&format!("filler_{i}"), "Does filler things", &params)),
    );
    let tools = entries.join(",");
    let body = match dialect {
        Dialect::OpenaiChat | Dialect::Ollama => format!(
            r#"{{"model":"m","stream":{stream},"messages":[{{"role":"user","content":"weather?"}}],"tools":[{tools}]}}"#
        ),
        Dialect::OpenaiResponses => {
            format!(r#"{{"model":"m","stream":{stream},"input":"weather?","tools":[{tools}]}}"#)
        }
        Dialect::Anthropic => format!(
            r#"{{"model":"m","max_tokens":64,"stream":{stream},"messages":[{{"role":"user","content":"weather?"}}],"tools":[{tools}]}}"#
        ),
        Dialect::Gemini => format!(
            r#"{{"contents":[{{"role":"user","parts":[{{"text":"weather?"}}]}}],"tools":[{{"functionDeclarations":[{tools}]}}]}}"#
        ),
        Dialect::Bedrock => format!(
            r#"{{"messages":[{{"role":"user","content":[{{"text":"weather?"}}]}}],"toolConfig":{{"tools":[{tools}]}}}}"#
        ),
    };
    let mut engine = Engine::new(config.clone());
    let analysis = engine.analyse(dialect, &body).unwrap();
    let room = HeaderRoom {
        held: true,
        anthropic_beta: "",
    };
    let Some(Planned::Search(plan)) = plan(&config, &analysis, &body, room) else {
        panic!("not planned");
    };
    Session::new(&config, &analysis, &body, plan)
}

/// The content type of an answer, streamed or whole.
fn content_type(stream: bool) -> &'static str {
    if stream {
        "text/event-stream"
    } else {
        "application/json"
    }
}

fn head(content_type: &str) -> Head {
    Head {
        status: Some("200".into()),
        content_type: Some(content_type.into()),
        content_encoding: None,
        end_of_stream: false,
    }
}

/// What one run of a response through the machine gave.
#[derive(Debug, PartialEq)]
struct Outcome {
    client: String,
    follow_ups: usize,
    headers: Vec<(String, String)>,
}

/// Feeds `first` in the chunks `cuts` makes (byte offsets), `ends_with_trailers` or not, and
/// answers every follow-up with `next` (a whole answer of the same dialect).
#[allow(clippy::too_many_arguments)] // a test's whole setting, spelled out at each call
fn run(
    dialect: Dialect,
    names: &[String],
    stream: bool,
    hold: bool,
    first: &str,
    next: &str,
    cuts: &[usize],
    ends_with_trailers: bool,
) -> (Outcome, Envoy) {
    let mut m = machine(dialect, names, stream, hold);
    let envoy = Envoy::default();
    let content_type = content_type(stream);
    let step = m.on_headers(&envoy, &head(content_type));
    assert!(step.drop_content_length);
    assert_eq!(step.flow == Flow::Pause, hold);
    let bytes = first.as_bytes();
    let mut at = 0;
    let mut pieces: Vec<&[u8]> = Vec::new();
    for &cut in cuts.iter().chain(std::iter::once(&bytes.len())) {
        pieces.push(&bytes[at..cut]);
        at = cut;
    }
    let last = pieces.len() - 1;
    for (i, piece) in pieces.iter().enumerate() {
        let end = i == last && !ends_with_trailers;
        envoy.feed(&mut m, piece, end);
    }
    if ends_with_trailers && m.on_trailers(&envoy) == Flow::Continue {
        envoy.flush();
    }
    // Answer follow-ups until the machine lets the response go.
    let mut answered = 0;
    while let Some(token) = m.token() {
        answered += 1;
        assert!(answered < 10, "follow-ups never end");
        let answer = Answer {
            status: Some(200),
            content_type: Some(content_type.into()),
            body: next.as_bytes().to_vec(),
        };
        envoy.answer(&mut m, token, answer);
    }
    assert!(
        envoy.buffer.borrow().is_empty(),
        "nothing left in Envoy's buffer"
    );
    // Each byte of the response is read once at most: linear work.
    assert!(
        envoy.read.get() <= bytes.len(),
        "read {} of {} bytes",
        envoy.read.get(),
        bytes.len()
    );
    let outcome = Outcome {
        client: envoy.client_text(),
        follow_ups: envoy.follow_ups.borrow().len(),
        headers: envoy.headers.borrow().clone(),
    };
    (outcome, envoy)
}

/// Every split of `text` into two chunks, plus one-byte chunks.
fn splits(text: &str) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = (0..=text.len()).map(|cut| vec![cut]).collect();
    out.push((1..text.len()).collect());
    out
}

/// The recorded answer with every call of `name` made a call of the meta-tool.
fn as_search(text: &str, name: &str) -> String {
    text.replace(&format!("\"{name}\""), "\"find_tools\"")
}

const SSE_DIALECTS: [Dialect; 4] = [
    Dialect::OpenaiChat,
    Dialect::OpenaiResponses,
    Dialect::Anthropic,
    Dialect::Gemini,
];

/// Recorded streams with real calls, and text answers: the client gets them byte for byte,
/// whatever the chunking, held headers or not, trailers or not.
#[test]
fn recorded_streams_reach_the_client_unchanged() {
    for dialect in SSE_DIALECTS {
        for (name, text) in recordings(dialect.codec().recordings(), ".response.sse") {
            let names = calls_of(dialect, &text, true);
            // Every chunking; then held headers and trailers, whole and in one-byte chunks.
            let variants = splits(&text)
                .into_iter()
                .map(|cuts| (cuts, false, false))
                .chain([false, true].into_iter().flat_map(|trailers| {
                    [Vec::new(), (1..text.len()).collect()]
                        .into_iter()
                        .map(move |cuts| (cuts, true, trailers))
                }));
            for (cuts, hold, trailers) in variants {
                let (outcome, _) = run(dialect, &names, true, hold, &text, "", &cuts, trailers);
                assert_eq!(outcome.follow_ups, 0, "{name}");
                assert_eq!(outcome.client, text, "{name} cut at {cuts:?}");
            }
        }
    }
}

/// Recorded streams whose first call is made a `find_tools` call: whatever the chunking (the
/// call starting in the last chunk included), the client never sees it, one follow-up is sent,
/// and the client's stream is the same for every chunking.
#[test]
fn recorded_streams_calling_find_tools_are_answered() {
    for dialect in SSE_DIALECTS {
        let recorded = recordings(dialect.codec().recordings(), ".response.sse");
        let next = recorded
            .iter()
            .find(|(n, t)| n.starts_with("text-stream") && calls_of(dialect, t, true).is_empty())
            .map(|(_, t)| t.clone())
            .unwrap_or_else(|| panic!("{dialect}: a recorded text stream"));
        for (name, text) in &recorded {
            let names = calls_of(dialect, text, true);
            let Some(first_call) = names.first() else {
                continue;
            };
            let searching = as_search(text, first_call);
            let mut seen: Option<Outcome> = None;
            for cuts in splits(&searching) {
                let (outcome, envoy) = run(
                    dialect, &names, true, false, &searching, &next, &cuts, false,
                );
                let client_calls = calls_of(dialect, &outcome.client, true);
                assert!(
                    !client_calls.iter().any(|c| c == "find_tools"),
                    "{name} cut at {cuts:?}: {}",
                    outcome.client
                );
                let only_search = names.iter().all(|n| n == first_call);
                assert_eq!(outcome.follow_ups, usize::from(only_search), "{name}");
                assert!(
                    !outcome.client.is_empty() && sse::frames(&outcome.client).1 > 0,
                    "{name}: an event stream"
                );
                assert_eq!(envoy.counted(Event::Round(Some(0))), outcome.follow_ups);
                match &seen {
                    None => seen = Some(outcome),
                    Some(first) => assert_eq!(
                        &outcome, first,
                        "{name}: the same stream for every chunking (cut at {cuts:?})"
                    ),
                }
            }
        }
    }
}

/// A stream that starts with text and calls `find_tools` after it: the text goes to the client
/// as it comes, the call never does, and the next round's stream follows as the continuation.
/// OpenAI Responses keeps one response id, and the id the provider stored is remembered.
#[test]
fn text_first_streams_continue_with_the_next_round() {
    for (dialect, file, next_file) in [
        (
            Dialect::Anthropic,
            "text-then-parallel-tool-use-stream.response.sse",
            "text-stream-after-tool-results.response.sse",
        ),
        (
            Dialect::OpenaiResponses,
            "text-then-function-call-stream.response.sse",
            "text-stream.response.sse",
        ),
        (
            Dialect::Gemini,
            "text-then-function-call-stream.response.sse",
            "text-stream.response.sse",
        ),
    ] {
        let dir = dialect.codec().recordings();
        let text = std::fs::read_to_string(conformance(dir).join(file)).unwrap();
        let next = std::fs::read_to_string(conformance(dir).join(next_file)).unwrap();
        let names = calls_of(dialect, &text, true);
        // Every call made a search, so the turn is answered with a follow-up.
        let mut searching = text.clone();
        for n in &names {
            searching = as_search(&searching, n);
        }
        let (outcome, envoy) = run(dialect, &names, true, false, &searching, &next, &[], false);
        assert_eq!(outcome.follow_ups, 1, "{dialect}");
        assert_eq!(
            envoy.counted(Event::Released),
            1,
            "{dialect}: released at its text"
        );
        // The client got the first round's events up to the call, then the next round's.
        let frames = sse::frames(&outcome.client).0;
        let first = sse::frames(&searching).0;
        let codec = dialect.codec();
        let before_call = first
            .iter()
            .take_while(|f| !codec.calls_started(f).iter().any(|c| c == "find_tools"))
            .count();
        assert!(before_call > 0);
        assert_eq!(frames[..before_call], first[..before_call], "{dialect}");
        assert!(
            calls_of(dialect, &outcome.client, true).is_empty(),
            "{dialect}"
        );
        if dialect == Dialect::OpenaiResponses {
            let ids: Vec<String> = frames
                .iter()
                .filter_map(|f| dialect.codec().stream_response_id(std::slice::from_ref(f)))
                .collect();
            assert!(ids.len() >= 2);
            assert!(
                ids.iter().all(|id| *id == ids[0]),
                "one response id: {ids:?}"
            );
            let real = codec.stream_response_id(&sse::frames(&next).0).unwrap();
            assert_eq!(*envoy.aliases.borrow(), [(ids[0].clone(), real)]);
        }
    }
}

/// A recorded thinking prelude holds the stream until the first output decides.
#[test]
fn a_thinking_prelude_is_held_until_the_model_decides() {
    let dir = Dialect::Anthropic.codec().recordings();
    let text = std::fs::read_to_string(conformance(dir).join("thinking-text-stream.response.sse"))
        .unwrap();
    let thinking_end = text.find("\"type\":\"text\"").unwrap();
    let mut m = machine(Dialect::Anthropic, &[], true, false);
    let envoy = Envoy::default();
    m.on_headers(&envoy, &head("text/event-stream"));
    assert_eq!(
        envoy.feed(&mut m, &text.as_bytes()[..thinking_end], false),
        Flow::Pause,
        "thinking alone decides nothing"
    );
    assert!(envoy.client.borrow().is_empty());
    envoy.feed(&mut m, &text.as_bytes()[thinking_end..], true);
    assert_eq!(envoy.client_text(), text);
}

/// Whole (not streamed) recorded answers: real calls go through untouched; a search is
/// answered and the client gets the follow-up's answer, with held headers its
/// `x-toolsift-search`, and the usage of both rounds.
#[test]
fn recorded_whole_answers() {
    for dialect in [
        Dialect::OpenaiChat,
        Dialect::OpenaiResponses,
        Dialect::Anthropic,
        Dialect::Gemini,
        Dialect::Bedrock,
    ] {
        let recorded: Vec<(String, String)> =
            recordings(dialect.codec().recordings(), ".response.json")
                .into_iter()
                .filter(|(n, _)| !n.starts_with("error-") && !n.contains("stream"))
                .collect();
        for (name, text) in &recorded {
            let names = calls_of(dialect, text, false);
            let (outcome, _) = run(
                dialect,
                &names,
                false,
                true,
                text,
                "",
                &[text.len() / 2],
                false,
            );
            assert_eq!(outcome.client, *text, "{name}: untouched");
            let Some(first_call) = names.first() else {
                continue;
            };
            if names.iter().any(|n| n != first_call) {
                continue;
            }
            let searching = as_search(text, first_call);
            for cuts in splits(&searching) {
                let (outcome, _) =
                    run(dialect, &names, false, true, &searching, text, &cuts, false);
                // The follow-up's answer is the recorded one, calling the real tool.
                assert_eq!(outcome.follow_ups, 1, "{name}");
                let calls = calls_of(dialect, &outcome.client, false);
                assert_eq!(calls, names, "{name}: {}", outcome.client);
                let header = outcome
                    .headers
                    .iter()
                    .find(|(n, _)| n == "x-toolsift-search")
                    .map(|(_, v)| v.clone())
                    .unwrap();
                assert!(header.starts_with("rounds=1 "), "{header}");
            }
        }
    }
}

/// Answers the machine passes untouched: an error status, a compressed body, an empty body.
#[test]
fn errors_compressed_and_empty_answers_pass() {
    let cases = [
        Head {
            status: Some("429".into()),
            content_type: Some("application/json".into()),
            ..Head::default()
        },
        Head {
            content_encoding: Some("gzip".into()),
            ..head("application/json")
        },
        Head {
            end_of_stream: true,
            ..head("application/json")
        },
        head("text/html"),
    ];
    for (i, case) in cases.iter().enumerate() {
        let mut m = machine(Dialect::OpenaiChat, &[], false, true);
        let envoy = Envoy::default();
        let step = m.on_headers(&envoy, case);
        assert_eq!(
            step,
            HeadStep {
                drop_content_length: false,
                drop_content_encoding: false,
                flow: Flow::Continue
            },
            "case {i}"
        );
        assert_eq!(envoy.feed(&mut m, b"{\"error\":{}}", true), Flow::Continue);
        assert_eq!(envoy.client_text(), "{\"error\":{}}");
        assert_eq!(envoy.counted(Event::Unreadable), usize::from(i == 1));
    }
}

/// A failed follow-up: with held headers the client gets the provider's status and error;
/// without, the error travels in the body (an `error` event for a stream); with no provider
/// answer, toolsift's own 502 error. Never the `find_tools` call.
#[test]
fn failed_follow_ups() {
    let dir = Dialect::Anthropic.codec().recordings();
    let stream =
        std::fs::read_to_string(conformance(dir).join("parallel-tool-use-stream.response.sse"))
            .unwrap();
    let names = calls_of(Dialect::Anthropic, &stream, true);
    let mut searching = stream.clone();
    for n in &names {
        searching = as_search(&searching, n);
    }
    let provider_error =
        r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#;
    for (hold, stream_mode) in [(true, true), (false, true), (true, false), (false, false)] {
        let text = if stream_mode {
            searching.clone()
        } else {
            std::fs::read_to_string(
                conformance(dir).join("text-and-parallel-tool-use.response.json"),
            )
            .map(|t| {
                let names = calls_of(Dialect::Anthropic, &t, false);
                names.iter().fold(t, |t, n| as_search(&t, n))
            })
            .unwrap()
        };
        for (status, body) in [(Some(429), provider_error), (None, "")] {
            let mut m = machine(Dialect::Anthropic, &names, stream_mode, hold);
            let envoy = Envoy::default();
            m.on_headers(
                &envoy,
                &head(if stream_mode {
                    "text/event-stream"
                } else {
                    "application/json"
                }),
            );
            envoy.feed(&mut m, text.as_bytes(), true);
            let token = m.token().expect("a follow-up");
            let answer = Answer {
                status,
                content_type: Some("application/json".into()),
                body: body.as_bytes().to_vec(),
            };
            envoy.answer(&mut m, token, answer);
            let client = envoy.client_text();
            assert!(!client.contains("find_tools"), "{client}");
            let status_header = envoy
                .headers
                .borrow()
                .iter()
                .find(|(n, _)| n == ":status")
                .map(|(_, v)| v.clone());
            match (hold, stream_mode, status) {
                // Nothing reached the client yet and its headers are held: the real status.
                (true, _, Some(429)) => {
                    assert_eq!(status_header.as_deref(), Some("429"));
                    assert_eq!(client, provider_error);
                }
                (true, _, _) => {
                    assert_eq!(status_header.as_deref(), Some("502"));
                    assert!(client.contains("toolsift_error"));
                }
                (false, true, _) => {
                    assert!(client.starts_with("event: error\n"), "{client}");
                    assert_eq!(status_header, None);
                }
                (false, false, _) => {
                    assert_eq!(status_header, None);
                    assert!(client.contains("error"), "{client}");
                }
            }
            assert_eq!(envoy.counted(Event::Failed), 1);
        }
    }
}

/// A follow-up that cannot be sent (the cluster is gone): toolsift's error, not the call.
#[test]
fn a_follow_up_that_cannot_be_sent() {
    let dir = Dialect::OpenaiChat.codec().recordings();
    let text = std::fs::read_to_string(conformance(dir).join("tool-call.response.json")).unwrap();
    let names = calls_of(Dialect::OpenaiChat, &text, false);
    let searching = as_search(&text, &names[0]);
    let mut m = machine(Dialect::OpenaiChat, &names, false, true);
    let envoy = Envoy {
        refuse_calls: true,
        ..Envoy::default()
    };
    m.on_headers(&envoy, &head("application/json"));
    envoy.feed(&mut m, searching.as_bytes(), true);
    assert!(envoy.client_text().contains("toolsift_error"));
    assert!(!envoy.client_text().contains("find_tools"));
}

/// A guard (filter mode under access rules) for a caller that may call anything but `denied`.
fn guard(dialect: Dialect, denied: &str, stream: bool) -> Responder {
    let config = Config::from_json(
        format!(
            r#"{{"access":{{"identity":[{{"header":"x-group"}}],"default":"allow",
                "rules":[{{"when":["*"],"deny":["{denied}"]}}]}}}}"#
        )
        .as_bytes(),
    )
    .unwrap();
    let grant = Engine::new(config)
        .grant(&crate::access::Caller::new(["staff".to_owned()]))
        .unwrap();
    Responder::new(Session::guard(dialect, grant), stream, false)
}

/// `answer` through a guard that denies `denied`, cut at `cuts`: what the client got.
fn guarded(dialect: Dialect, denied: &str, stream: bool, answer: &str, cuts: &[usize]) -> Envoy {
    let content_type = content_type(stream);
    guarded_bytes(dialect, denied, content_type, answer.as_bytes(), cuts)
}

/// [`guarded`] for an answer of `content_type` in any bytes.
fn guarded_bytes(
    dialect: Dialect,
    denied: &str,
    content_type: &str,
    bytes: &[u8],
    cuts: &[usize],
) -> Envoy {
    let mut m = guard(dialect, denied, false);
    let envoy = Envoy::default();
    let step = m.on_headers(&envoy, &head(content_type));
    assert_eq!(step.flow, Flow::Continue, "a guard never holds headers");
    let mut at = 0;
    for (i, &cut) in cuts.iter().chain([bytes.len()].iter()).enumerate() {
        envoy.feed(&mut m, &bytes[at..cut], i == cuts.len());
        at = cut;
    }
    assert_eq!(m.token(), None, "a guard never follows up");
    assert!(envoy.buffer.borrow().is_empty());
    assert!(envoy.follow_ups.borrow().is_empty());
    envoy
}

/// Every recorded stream and whole answer with calls, through a guard that denies its last
/// call's tool, whatever the chunking: the client never gets that call, gets the refusal in
/// its place, and keeps the other calls; the same bytes for every chunking.
#[test]
fn recorded_answers_lose_their_denied_calls_to_a_refusal() {
    for dialect in SSE_DIALECTS {
        let codec = dialect.codec();
        let streams = recordings(codec.recordings(), ".response.sse")
            .into_iter()
            .map(|(n, t)| (n, t, true));
        let wholes = recordings(codec.recordings(), ".response.json")
            .into_iter()
            .filter(|(_, t)| t.trim_start().starts_with('{'))
            .map(|(n, t)| (n, t, false));
        for (name, text, stream) in streams.chain(wholes) {
            let names = calls_of(dialect, &text, stream);
            let Some(denied) = names.last() else {
                continue;
            };
            let cuts: Vec<Vec<usize>> = if stream {
                splits(&text)
            } else {
                vec![Vec::new(), vec![text.len() / 2]]
            };
            let mut seen: Option<String> = None;
            for cut in cuts {
                let envoy = guarded(dialect, denied, stream, &text, &cut);
                let client = envoy.client_text();
                let called = calls_of(dialect, &client, stream);
                assert!(!called.contains(denied), "{name} cut at {cut:?}: {client}");
                let kept = names.iter().filter(|n| *n != denied).count();
                assert_eq!(called.len(), kept, "{name}: the allowed calls stay");
                assert!(
                    client.contains(&format!("Tool `{denied}` is not available.")),
                    "{name}: {client}"
                );
                let refused = names.iter().filter(|n| *n == denied).count();
                assert_eq!(envoy.counted(Event::Refused(refused)), 1, "{name}");
                match &seen {
                    None => seen = Some(client),
                    Some(first) => assert_eq!(&client, first, "{name} cut at {cut:?}"),
                }
            }
        }
    }
}

/// Bedrock's `converse-stream` (AWS's binary event stream), recorded: whatever the chunking,
/// an answer without a denied call reaches the client byte for byte; with one, the client
/// gets a stream of valid messages (CRCs checked) without that call, the refusal in its place,
/// the other calls kept, the same bytes for every chunking.
#[test]
fn recorded_bedrock_streams_lose_their_denied_calls_to_a_refusal() {
    let framing = Framing::EventStream;
    let content_type = sse::eventstream::CONTENT_TYPE;
    let dir = conformance(Dialect::Bedrock.codec().recordings());
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".response.eventstream"))
        .collect();
    files.sort();
    assert!(files.len() >= 4);
    let calls = |bytes: &[u8]| -> Vec<String> {
        let text = framing.wire_text(bytes.to_vec()).expect("valid messages");
        let reply = Dialect::Bedrock
            .codec()
            .read_stream(&framing.frames(&text).0);
        reply.unwrap().calls.into_iter().map(|c| c.name).collect()
    };
    let mut refused_streams = 0;
    for file in files {
        let name = file.display().to_string();
        let bytes = std::fs::read(&file).unwrap();
        let names = calls(&bytes);
        let mut cuts: Vec<Vec<usize>> = (0..=bytes.len()).map(|c| vec![c]).collect();
        cuts.push((1..bytes.len()).collect());
        for cut in [vec![], vec![bytes.len() / 3], (1..bytes.len()).collect()] {
            let envoy = guarded_bytes(Dialect::Bedrock, "no_such_tool", content_type, &bytes, &cut);
            assert_eq!(*envoy.client.borrow(), bytes, "{name}");
            assert!(envoy.events.borrow().is_empty(), "{name}");
        }
        let Some(denied) = names.last() else {
            continue;
        };
        refused_streams += 1;
        let mut seen: Option<Vec<u8>> = None;
        for cut in cuts {
            let envoy = guarded_bytes(Dialect::Bedrock, denied, content_type, &bytes, &cut);
            let client = envoy.client.borrow().clone();
            let called = calls(&client);
            assert!(!called.contains(denied), "{name} cut at {cut:?}");
            let kept = names.iter().filter(|n| *n != denied).count();
            assert_eq!(called.len(), kept, "{name}: the allowed calls stay");
            let text = framing.wire_text(client.clone()).unwrap();
            assert!(
                text.contains(&format!("Tool `{denied}` is not available.")),
                "{name}: {text}"
            );
            let refused = names.iter().filter(|n| *n == denied).count();
            assert_eq!(envoy.counted(Event::Refused(refused)), 1, "{name}");
            match &seen {
                None => seen = Some(client),
                Some(first) => assert_eq!(&client, first, "{name} cut at {cut:?}"),
            }
        }
    }
    assert!(refused_streams >= 2);
}

/// A Bedrock event stream that is damaged (a CRC wrong) is not let through unchecked.
#[test]
fn a_damaged_bedrock_stream_becomes_an_error() {
    let dir = conformance(Dialect::Bedrock.codec().recordings());
    let mut bytes =
        std::fs::read(dir.join("text-then-tool-use-stream.response.eventstream")).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    let content_type = sse::eventstream::CONTENT_TYPE;
    let envoy = guarded_bytes(
        Dialect::Bedrock,
        "get_temperature",
        content_type,
        &bytes,
        &[],
    );
    // Held whole, then replaced by one exception message, which the SDKs raise.
    let client = envoy.client.borrow().clone();
    let text = Framing::EventStream.wire_text(client).unwrap();
    let (frames, _) = Framing::EventStream.frames(&text);
    assert_eq!(frames.len(), 1, "{text}");
    let exception = frames[0].event.as_deref();
    assert_eq!(exception, Some("exception:internalServerException"));
    assert!(frames[0].data.contains("access_unchecked"), "{text}");
    assert_eq!(envoy.counted(Event::Unchecked), 1);
}

/// Gemini's `candidateCount` > 1: the client gets every candidate, so a denied call in the
/// second one is refused as in the first, whole and streamed (chunks say which candidate they
/// continue by `index`).
#[test]
fn every_gemini_candidate_is_checked() {
    let whole = r#"{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"get_weather","args":{"city":"Paris"}}}]},"finishReason":"STOP","index":0},{"content":{"role":"model","parts":[{"functionCall":{"name":"delete_all","args":{}}}]},"finishReason":"STOP","index":1}],"usageMetadata":{"promptTokenCount":9,"candidatesTokenCount":4,"totalTokenCount":13}}"#;
    let stream = concat!(
        r#"data: {"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"get_weather","args":{"city":"Paris"}}}]},"index":0}]}"#,
        "\r\n\r\n",
        r#"data: {"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"delete_all","args":{}}}]},"index":1}]}"#,
        "\r\n\r\n",
        r#"data: {"candidates":[{"content":{"role":"model","parts":[{"text":""}]},"finishReason":"STOP","index":0},{"content":{"role":"model","parts":[{"text":""}]},"finishReason":"STOP","index":1}],"usageMetadata":{"promptTokenCount":9,"candidatesTokenCount":4,"totalTokenCount":13}}"#,
        "\r\n\r\n",
    );
    for (answer, streamed) in [(whole, false), (stream, true)] {
        assert_eq!(
            calls_of(Dialect::Gemini, answer, streamed),
            ["get_weather", "delete_all"],
            "both candidates' calls are read"
        );
        let envoy = guarded(Dialect::Gemini, "delete_all", streamed, answer, &[]);
        let client = envoy.client_text();
        assert!(!client.contains(r#""name":"delete_all""#), "{client}");
        assert!(client.contains(r#""name":"get_weather""#), "{client}");
        assert!(
            client.contains("Tool `delete_all` is not available."),
            "{client}"
        );
        assert_eq!(envoy.counted(Event::Refused(1)), 1, "{client}");
    }
}

/// Answers without a denied call pass byte for byte, and nothing is counted as search mode's.
#[test]
fn a_guard_lets_allowed_answers_through_unchanged() {
    for dialect in SSE_DIALECTS {
        for (name, text) in recordings(dialect.codec().recordings(), ".response.sse") {
            let envoy = guarded(dialect, "no_such_tool", true, &text, &[text.len() / 3]);
            assert_eq!(envoy.client_text(), text, "{name}");
            assert!(
                envoy.events.borrow().is_empty(),
                "{name}: {:?}",
                envoy.events
            );
        }
    }
}

/// What a guard cannot read does not reach the client unchecked: a compressed or unreadable
/// answer becomes toolsift's error; errors and other statuses pass.
#[test]
fn a_guard_fails_closed_on_what_it_cannot_read() {
    let mut m = guard(Dialect::OpenaiChat, "x", false);
    let envoy = Envoy::default();
    let gzip = Head {
        content_encoding: Some("gzip".into()),
        ..head("application/json")
    };
    let step = m.on_headers(&envoy, &gzip);
    assert!(step.drop_content_encoding && step.drop_content_length);
    envoy.feed(&mut m, b"\x1f\x8b\x08\x00", false);
    envoy.feed(&mut m, b"\x00\x00", true);
    assert!(
        envoy.client_text().contains("access_unchecked"),
        "{}",
        envoy.client_text()
    );
    assert_eq!(envoy.counted(Event::Unchecked), 1);
    let envoy = guarded(Dialect::OpenaiChat, "x", false, "{\"choices\":7}", &[]);
    assert!(envoy.client_text().contains("access_unchecked"));
    // A stream that ends without a turn the codec can read: the same.
    let envoy = guarded(Dialect::Anthropic, "x", true, "data: {\"type\":7}\n\n", &[]);
    assert_eq!(envoy.counted(Event::Unchecked), 1);
    // An error status passes as it is.
    let mut m = guard(Dialect::OpenaiChat, "x", false);
    let envoy = Envoy::default();
    let failed = Head {
        status: Some("429".into()),
        ..head("application/json")
    };
    assert!(!m.on_headers(&envoy, &failed).drop_content_length);
    assert_eq!(envoy.feed(&mut m, b"{\"error\":{}}", true), Flow::Continue);
    assert_eq!(envoy.client_text(), "{\"error\":{}}");
}

/// Search mode under access rules reads every answer too: what it cannot read (compressed
/// anyway) becomes toolsift's error, not an unchecked answer.
#[test]
fn a_search_under_access_rules_fails_closed_on_what_it_cannot_read() {
    let config = Config::from_json(
        br#"{"mode":"search","min_tools":3,"access":{"default":"allow",
            "rules":[{"when":["*"],"deny":["filler_1*"]}]}}"#,
    )
    .unwrap();
    let codec = Dialect::OpenaiChat.codec();
    let params = serde_json::json!({"type":"object"});
    let tools: Vec<String> = (0..24)
        .map(|i| codec.tool_entry(&format!("filler_{i}"), "Does filler things", &params))
        .collect();
    let body = format!(
        r#"{{"model":"m","messages":[{{"role":"user","content":"weather?"}}],"tools":[{}]}}"#,
        tools.join(",")
    );
    let mut engine = Engine::new(config.clone());
    let grant = engine.grant(&crate::access::Caller::anonymous());
    let analysis = engine
        .analyse_as(Dialect::OpenaiChat, &body, grant.as_ref())
        .unwrap();
    let Some(Planned::Search(plan)) = plan(&config, &analysis, &body, HeaderRoom::default()) else {
        panic!("planned");
    };
    let session = Session::new(&config, &analysis, &body, plan);
    assert!(session.searches() && session.checks_calls());
    let mut m = Responder::new(session, false, false);
    let envoy = Envoy::default();
    let gzip = Head {
        content_encoding: Some("gzip".into()),
        ..head("application/json")
    };
    assert!(m.on_headers(&envoy, &gzip).drop_content_encoding);
    envoy.feed(&mut m, b"\x1f\x8b\x08\x00\x00", true);
    assert!(envoy.client_text().contains("access_unchecked"));
    assert_eq!(envoy.counted(Event::Unchecked), 1);
    assert_eq!(envoy.counted(Event::Unreadable), 0);
}
