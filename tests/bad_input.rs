//! Input nobody planned for, through the real Envoy with the real `.wasm`: each case checks the
//! status the client gets, what reaches the upstream (the demo upstream's `x-demo-echo: raw`
//! answers with the body exactly as it arrived), that the VM never panicked, and that the next
//! request is still served and filtered.
//!
//! What a user expects: a body toolsift cannot read goes upstream byte for byte (the default
//! `on_error: pass`) and the reason is in `x-toolsift`; a body it can read is filtered however
//! it was framed (1-byte chunks, a slow client, HTTP/2 with trailers).

use crate::common;

use bytes::Bytes;
use common::{Gateway, Response, read_response, tools_for};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, SizeHint};
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::value::RawValue;
use std::collections::VecDeque;
use std::io::Write;
use std::net::TcpStream;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

const CONFIG: &str = r#"{"debug": true}"#;
const PATH: &str = "/v1/chat/completions";
const ECHO: (&str, &str) = ("x-demo-echo", "raw");
const QUESTION: &str = "What will the weather be like in Lisbon over the next five days?";

/// A Chat Completions request with `tools` (a JSON array text) and `extra` members after it.
fn chat_with(tools: &str, extra: &str) -> String {
    let question = serde_json::to_string(QUESTION).unwrap();
    format!(
        "{{\n  \"model\": \"gpt-4.1\",\n  \"messages\": [{{\"role\": \"user\", \"content\": {question}}}],\n  \"tools\": {tools}{extra},\n  \"temperature\": 0.20\n}}"
    )
}

/// The 80 fixture tools, pretty-printed as a client would send them.
fn fixture_tools() -> String {
    serde_json::to_string_pretty(&tools_for("openai_chat")).unwrap()
}

fn chat() -> String {
    chat_with(&fixture_tools(), "")
}

/// `received` is `sent` with only its tools array cut: the bytes around it are the client's,
/// and every tool that arrived is one the client sent, byte for byte and in its order.
/// Returns the tools that arrived.
fn assert_cut(sent: &str, tools: &str, received: &[u8]) -> Vec<String> {
    let received = std::str::from_utf8(received).expect("upstream body is UTF-8");
    let start = sent.find(tools).expect("tools in the request");
    let tail = &sent[start + tools.len()..];
    assert!(
        received.starts_with(&sent[..start]),
        "bytes before the tools changed"
    );
    assert!(received.ends_with(tail), "bytes after the tools changed");
    let arrived: Vec<&RawValue> =
        serde_json::from_str(&received[start..received.len() - tail.len()]).unwrap();
    let mut from = 0;
    for tool in &arrived {
        let at = tools[from..]
            .find(tool.get())
            .unwrap_or_else(|| panic!("tool altered or reordered: {}", tool.get()));
        from += at + tool.get().len();
    }
    arrived.iter().map(|t| t.get().to_owned()).collect()
}

/// Envoy logged no panic, and a plain request is still filtered.
fn assert_still_serving(gw: &Gateway) {
    let log = gw.log_text();
    assert!(!log.contains("panicked"), "the VM panicked:\n{log}");
    let body = chat();
    let r = gw.post(PATH, &[ECHO], body.as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-toolsift"), Some("kept=5 total=80"));
    assert_eq!(assert_cut(&body, &fixture_tools(), &r.body).len(), 5);
}

/// A body toolsift cannot read reached the upstream untouched and the client was told why.
fn assert_passed_through(r: &Response, sent: &[u8], reason: &str) {
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.body == sent, "the upstream did not get the body as sent");
    assert_eq!(
        r.header("x-toolsift"),
        Some(format!("skipped={reason}").as_str())
    );
}

// --- Bodies toolsift cannot read -------------------------------------------------------------

#[test]
fn malformed_json_passes_through_unchanged() {
    let gw = Gateway::start(CONFIG);
    let body = chat().replacen("\"messages\"", "\"messages\" \"oops\"", 1);
    let r = gw.post(PATH, &[ECHO], body.as_bytes());
    assert_passed_through(&r, body.as_bytes(), "malformed_json");
    assert_still_serving(&gw);
}

#[test]
fn truncated_json_passes_through_unchanged() {
    let gw = Gateway::start(CONFIG);
    let body = chat();
    let body = &body.as_bytes()[..body.len() / 2];
    let r = gw.post(PATH, &[ECHO], body);
    assert_passed_through(&r, body, "malformed_json");
    assert_still_serving(&gw);
}

#[test]
fn non_utf8_body_passes_through_unchanged() {
    let gw = Gateway::start(CONFIG);
    let mut body = chat().into_bytes();
    let at = body.windows(7).position(|w| w == b"Lisbon ").unwrap();
    body[at + 1] = 0xff;
    let r = gw.post(PATH, &[ECHO], &body);
    assert_passed_through(&r, &body, "malformed_json");
    assert_still_serving(&gw);
}

/// toolsift checks as text only the bytes it reads: a tools array it has cached is compared
/// with its copy, not read again. A byte that is not UTF-8 before that array, after it, or in
/// an array that is otherwise the cached one still makes the body malformed: it goes upstream
/// unchanged. One worker, so the second request finds the first one's catalog.
#[test]
fn non_utf8_bytes_beside_a_cached_tools_array_pass_through_unchanged() {
    let gw = Gateway::start_with(CONFIG, &["--concurrency", "1"], |yaml| yaml);
    let tools = fixture_tools();
    let body = chat_with(&tools, ",\n  \"user\": \"agent-7\"");
    let r = gw.post(PATH, &[ECHO], body.as_bytes());
    assert_eq!(r.header("x-toolsift"), Some("kept=5 total=80"));
    let tools_at = body.find(&tools).unwrap();
    let description = tools.find("\"description\": \"").unwrap() + "\"description\": \"".len();
    let places = [
        body.find("gpt-4.1").unwrap(),
        tools_at + description,
        body.find("agent-7").unwrap(),
    ];
    for at in places {
        let mut bytes = body.clone().into_bytes();
        bytes[at] = 0xff;
        let r = gw.post(PATH, &[ECHO], &bytes);
        assert_passed_through(&r, &bytes, "malformed_json");
    }
    let r = gw.post(PATH, &[ECHO], body.as_bytes());
    assert_eq!(r.header("x-toolsift"), Some("kept=5 total=80"));
    assert_eq!(gw.stat("toolsift.catalog_cache.hits"), 1);
    assert_still_serving(&gw);
}

/// Bodies past `max_body_bytes` (16 MiB by default) go through unread, whether the client
/// declared their length or streamed them chunked.
#[test]
fn a_20_mb_body_passes_through_unchanged() {
    let gw = Gateway::start(CONFIG);
    let filler = "weather ".repeat(20 * 1024 * 1024 / 8);
    let body = chat_with(
        &fixture_tools(),
        &format!(",\n  \"metadata\": {{\"note\": \"{filler}\"}}"),
    );
    assert!(body.len() > 20 * 1024 * 1024);
    let r = gw.post(PATH, &[ECHO], body.as_bytes());
    assert_passed_through(&r, body.as_bytes(), "too_large");
    let chunked = [ECHO, ("transfer-encoding", "chunked")];
    let r = gw.post(PATH, &chunked, body.as_bytes());
    assert_passed_through(&r, body.as_bytes(), "too_large");
    assert_still_serving(&gw);
}

#[test]
fn gzip_body_passes_through_unchanged() {
    let gw = Gateway::start(CONFIG);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(chat().as_bytes()).unwrap();
    let body = gz.finish().unwrap();
    let r = gw.post(PATH, &[ECHO, ("content-encoding", "gzip")], &body);
    assert_passed_through(&r, &body, "compressed");
    assert_still_serving(&gw);
}

#[test]
fn a_body_that_is_not_declared_json_passes_through_unchanged() {
    let gw = Gateway::start(CONFIG);
    let body = chat();
    // `post` sends `content-type: application/json` first; a raw request sends only this one.
    let r = raw_request(
        &gw,
        &[("content-type", b"text/plain"), ("x-demo-echo", b"raw")],
        &[body.as_bytes()],
        Duration::ZERO,
    );
    assert_passed_through(&r, body.as_bytes(), "content_type");
    assert_still_serving(&gw);
}

/// proxy-wasm 0.2.5 decodes header values with `unwrap()`: one byte that is not UTF-8 must be
/// read as data (this is not a JSON content type), never trap the VM.
#[test]
fn a_content_type_that_is_not_utf8_passes_through_and_is_counted() {
    let gw = Gateway::start(CONFIG);
    let body = chat();
    let r = raw_request(
        &gw,
        &[
            ("content-type", b"application/json; charset=caf\xe9"),
            ("x-demo-echo", b"raw"),
        ],
        &[body.as_bytes()],
        Duration::ZERO,
    );
    assert_passed_through(&r, body.as_bytes(), "content_type");
    assert_eq!(gw.stat("toolsift.skipped.content_type"), 1);
    assert_still_serving(&gw);
}

/// 100,000 levels of arrays: deeper than any parser's recursion limit. Outside the tools and
/// inside a tool's schema the body must reach the upstream unchanged outside its tools
/// array: unread, or filtered with every kept tool intact.
#[test]
fn deeply_nested_json_does_not_break_the_gateway() {
    let gw = Gateway::start(CONFIG);
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let outside = chat_with(&fixture_tools(), &format!(",\n  \"metadata\": {deep}"));
    let r = gw.post(PATH, &[ECHO], outside.as_bytes());
    assert_eq!(r.status, 200);
    let header = r.header("x-toolsift").unwrap_or_default().to_owned();
    if header.starts_with("skipped=") {
        assert!(
            r.body == outside.as_bytes(),
            "unread but changed ({header})"
        );
    } else {
        assert_eq!(header, "kept=5 total=80");
        assert_cut(&outside, &fixture_tools(), &r.body);
    }

    let mut catalog = tools_for("openai_chat");
    catalog[0]["function"]["parameters"]["properties"]["deep"] = serde_json::json!("DEEP");
    let tools = serde_json::to_string_pretty(&catalog)
        .unwrap()
        .replace("\"DEEP\"", &deep);
    let inside = chat_with(&tools, "");
    let r = gw.post(PATH, &[ECHO], inside.as_bytes());
    assert_eq!(r.status, 200);
    if r.body != inside.as_bytes() {
        assert_cut(&inside, &tools, &r.body);
    }
    assert_still_serving(&gw);
}

/// RFC 8259 lets a parser ignore a byte order mark; providers' parsers differ. Either way the
/// bytes outside the tools, the mark included, must reach the upstream as sent.
#[test]
fn a_byte_order_mark_before_the_json_is_kept() {
    let gw = Gateway::start(CONFIG);
    let body = format!("\u{feff}{}", chat());
    let r = gw.post(PATH, &[ECHO], body.as_bytes());
    assert_eq!(r.status, 200);
    if r.body != body.as_bytes() {
        assert_eq!(r.header("x-toolsift"), Some("kept=5 total=80"));
        assert_cut(&body, &fixture_tools(), &r.body);
    }
    assert_still_serving(&gw);
}

// --- Bodies toolsift reads --------------------------------------------------------------------

/// A number serde cannot hold (`1e400`) in a schema is still a function tool: it is counted,
/// ranked, and if kept sent byte for byte.
#[test]
fn a_schema_holding_1e400_still_counts_as_a_tool() {
    let gw = Gateway::start(CONFIG);
    let mut catalog = tools_for("openai_chat");
    catalog.as_array_mut().unwrap().push(serde_json::json!({
        "type": "function",
        "function": {
            "name": "get_weather_for_lisbon",
            "description": "Weather forecast for Lisbon over the next days",
            "parameters": {"type": "object", "properties": {"days": {"type": "number", "maximum": "HUGE"}}}
        }
    }));
    let tools = serde_json::to_string_pretty(&catalog)
        .unwrap()
        .replace("\"HUGE\"", "1e400");
    let body = chat_with(&tools, "");
    let r = gw.post(PATH, &[ECHO], body.as_bytes());
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-toolsift"), Some("kept=5 total=81"));
    let kept = assert_cut(&body, &tools, &r.body);
    assert!(
        kept.iter().any(|t| t.contains("1e400")),
        "the best tool was dropped: {kept:?}"
    );
    assert_still_serving(&gw);
}

/// Providers refuse duplicate names, but that is their answer to give: toolsift counts every
/// tool and sends the kept ones intact.
#[test]
fn ten_thousand_tools_of_one_name() {
    let gw = Gateway::start(CONFIG);
    let tool = r#"{"type": "function", "function": {"name": "get_weather_forecast", "description": "Weather forecast for a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}"#;
    let tools = format!("[{}]", vec![tool; 10_000].join(", "));
    let body = chat_with(&tools, "");
    let r = gw.post(PATH, &[ECHO], body.as_bytes());
    assert_eq!(r.status, 200);
    // The fixture's question shares one word of six with this catalog: too weak to rank by
    // (`weak_query`), it goes with the `max_k` best tools.
    let header = r.header("x-toolsift").unwrap_or_default();
    assert!(header.starts_with("kept=128 total=10000 weak="), "{header}");
    assert_eq!(assert_cut(&body, &tools, &r.body).len(), 128);
    assert_still_serving(&gw);
}

#[test]
fn a_body_sent_one_byte_per_chunk_is_filtered() {
    let gw = Gateway::start(CONFIG);
    let body = chat();
    let chunks: Vec<&[u8]> = body.as_bytes().chunks(1).collect();
    let r = chunked_request(&gw, &chunks, Duration::ZERO);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-toolsift"), Some("kept=5 total=80"));
    assert_eq!(assert_cut(&body, &fixture_tools(), &r.body).len(), 5);
    assert_still_serving(&gw);
}

#[test]
fn a_slow_body_is_filtered() {
    let gw = Gateway::start(CONFIG);
    let body = chat();
    let chunks: Vec<&[u8]> = body.as_bytes().chunks(body.len() / 8 + 1).collect();
    let r = chunked_request(&gw, &chunks, Duration::from_millis(400));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-toolsift"), Some("kept=5 total=80"));
    assert_eq!(assert_cut(&body, &fixture_tools(), &r.body).len(), 5);
    assert_still_serving(&gw);
}

// --- HTTP/2 with trailers ---------------------------------------------------------------------

/// The gateway with the upstream cluster speaking HTTP/2 (the demo upstream serves h2c), so
/// trailers travel both ways.
fn h2_gateway(config: &str) -> Gateway {
    Gateway::start_with(config, &[], |yaml| {
        let cluster = "  - name: llm\n    type: STATIC\n";
        assert!(yaml.contains(cluster));
        yaml.replacen(
            cluster,
            &format!(
                "{cluster}    typed_extension_protocol_options:\n      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:\n        \"@type\": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions\n        explicit_http_config:\n          http2_protocol_options: {{}}\n"
            ),
            1,
        )
    })
}

#[test]
fn http2_request_trailers_reach_the_upstream_and_the_body_is_filtered() {
    let gw = h2_gateway(CONFIG);
    let body = chat();
    let pieces: Vec<Bytes> = body
        .as_bytes()
        .chunks(4096)
        .map(Bytes::copy_from_slice)
        .collect();
    let trailers = HeaderMap::from_iter([(
        HeaderName::from_static("x-client-trailer"),
        HeaderValue::from_static("t1"),
    )]);
    let r = h2_request(&gw, &[ECHO], pieces, Some(trailers));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(header(&r.headers, "x-toolsift"), Some("kept=5 total=80"));
    assert_eq!(assert_cut(&body, &fixture_tools(), &r.body).len(), 5);
    assert_eq!(
        header(&r.headers, "x-demo-request-trailers"),
        Some("x-client-trailer=t1")
    );
    assert_still_serving(&gw);
}

#[test]
fn http2_response_trailers_reach_the_client() {
    let gw = h2_gateway(CONFIG);
    let body = chat();
    let r = h2_request(
        &gw,
        &[ECHO, ("x-demo-trailers", "1")],
        vec![Bytes::from(body.clone())],
        None,
    );
    assert_eq!(r.status, 200);
    assert_eq!(header(&r.headers, "x-toolsift"), Some("kept=5 total=80"));
    assert_cut(&body, &fixture_tools(), &r.body);
    let trailers = r.trailers.expect("no trailers");
    assert_eq!(trailers.get("x-demo-trailer").unwrap(), "done");
    assert_still_serving(&gw);
}

/// Search mode holds the answer to read it: an answer with trailers still reaches the client
/// whole, the model's `find_tools` round answered in the gateway.
#[test]
fn http2_response_trailers_in_search_mode() {
    let gw = h2_gateway(r#"{"mode": "search", "debug": true}"#);
    let body = chat();
    for stream in [false, true] {
        let body = if stream {
            body.replacen("\"temperature\"", "\"stream\": true,\n  \"temperature\"", 1)
        } else {
            body.clone()
        };
        let r = h2_request(
            &gw,
            &[
                ("x-demo-model", "scripted"),
                ("x-demo-want", "get_weather_forecast"),
                ("x-demo-trailers", "1"),
            ],
            vec![Bytes::from(body)],
            None,
        );
        let text = String::from_utf8_lossy(&r.body);
        assert_eq!(r.status, 200, "{text}");
        assert!(
            text.contains("get_weather_forecast") && !text.contains("find_tools"),
            "stream={stream}: {text}"
        );
        if stream {
            assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
        } else {
            let answer: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(answer["choices"][0]["finish_reason"], "tool_calls");
        }
    }
    let log = gw.log_text();
    assert!(!log.contains("panicked"), "the VM panicked:\n{log}");
}

// --- Clients ------------------------------------------------------------------------------------

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// An HTTP/1.1 request to the gateway's chat path with exactly these headers (values may be
/// any bytes), the body written in `pieces` with `gap` between them (`content-length` set).
fn raw_request(
    gw: &Gateway,
    headers: &[(&str, &[u8])],
    pieces: &[&[u8]],
    gap: Duration,
) -> Response {
    let length: usize = pieces.iter().map(|p| p.len()).sum();
    let mut head =
        format!("POST {PATH} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n").into_bytes();
    for (name, value) in headers {
        head.extend_from_slice(format!("{name}: ").as_bytes());
        head.extend_from_slice(value);
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(format!("content-length: {length}\r\n\r\n").as_bytes());
    send(gw, &head, pieces.iter().copied(), gap)
}

/// A chunked HTTP/1.1 JSON request with `x-demo-echo: raw`, one HTTP chunk per piece, written
/// one at a time with `gap` between them.
fn chunked_request(gw: &Gateway, pieces: &[&[u8]], gap: Duration) -> Response {
    let head = format!(
        "POST {PATH} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\ncontent-type: application/json\r\nx-demo-echo: raw\r\ntransfer-encoding: chunked\r\n\r\n"
    );
    let framed: Vec<Vec<u8>> = pieces
        .iter()
        .map(|piece| [format!("{:x}\r\n", piece.len()).as_bytes(), piece, b"\r\n"].concat())
        .chain(std::iter::once(b"0\r\n\r\n".to_vec()))
        .collect();
    send(gw, head.as_bytes(), framed.iter().map(Vec::as_slice), gap)
}

fn send<'a>(
    gw: &Gateway,
    head: &[u8],
    pieces: impl Iterator<Item = &'a [u8]>,
    gap: Duration,
) -> Response {
    let mut stream = TcpStream::connect(("127.0.0.1", gw.port)).unwrap();
    stream.set_nodelay(true).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream.write_all(head).unwrap();
    for (i, piece) in pieces.enumerate() {
        if i > 0 {
            std::thread::sleep(gap);
        }
        stream.write_all(piece).unwrap();
        stream.flush().unwrap();
    }
    read_response(stream).unwrap()
}

/// An HTTP/2 answer, with its trailers.
struct H2Response {
    status: u16,
    headers: HeaderMap,
    body: Vec<u8>,
    trailers: Option<HeaderMap>,
}

/// A request body of ready frames: the data pieces, then the trailers.
struct Frames(VecDeque<Frame<Bytes>>);

impl Body for Frames {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Poll::Ready(self.0.pop_front().map(Ok))
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

/// A JSON POST to the chat path over h2c (prior knowledge), the body in `pieces`, then
/// `trailers`.
fn h2_request(
    gw: &Gateway,
    headers: &[(&str, &str)],
    pieces: Vec<Bytes>,
    trailers: Option<HeaderMap>,
) -> H2Response {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let stream = tokio::net::TcpStream::connect(("127.0.0.1", gw.port))
            .await
            .unwrap();
        let (mut sender, connection) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await
                .unwrap();
        tokio::spawn(connection);
        let mut frames: VecDeque<Frame<Bytes>> = pieces.into_iter().map(Frame::data).collect();
        frames.extend(trailers.map(Frame::trailers));
        let mut request = hyper::Request::post(format!("http://localhost{PATH}"))
            .header("content-type", "application/json");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = sender
            .send_request(request.body(Frames(frames)).unwrap())
            .await
            .unwrap();
        let (parts, body) = response.into_parts();
        let collected = tokio::time::timeout(Duration::from_secs(60), body.collect())
            .await
            .expect("the answer did not end within 60 s")
            .unwrap();
        H2Response {
            status: parts.status.as_u16(),
            headers: parts.headers,
            trailers: collected.trailers().cloned(),
            body: collected.to_bytes().to_vec(),
        }
    })
}
