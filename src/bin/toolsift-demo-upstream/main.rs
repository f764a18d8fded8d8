//! A stand-in for an LLM provider API, for toolsift's tests, benchmarks and the `make run` demo.
//!
//! It accepts the five request dialects toolsift filters (OpenAI Chat Completions, OpenAI
//! Responses, Anthropic Messages, Gemini, Bedrock Converse), checks the tools the way the real
//! provider would, so that a filter bug shows up as a 400 rather than as a silent success, and
//! answers in the provider's own response shape with a report of the tools it received.
//!
//! On the LLM paths, request headers change the answer:
//! - `x-demo-echo: body`: the request body as the answer (after the checks above);
//!   `x-demo-echo: raw`: the body exactly as it arrived, unread and unchecked (valid JSON or
//!   not); `x-demo-echo: none`: `{}` without reading the body (for the latency benchmark).
//! - `x-demo-trailers` (any value): the answer ends with the trailer `x-demo-trailer: done`.
//!   A request that had trailers gets `x-demo-request-trailers: name=value, …`.
//!
//! Bedrock `converse-stream` answers in AWS's binary event-stream framing, as the real API does,
//! and a Bedrock request signed with SigV4 (`authorization: AWS4-HMAC-SHA256 …`) must carry a
//! valid signature by the demo's credentials (`sigv4.rs`), else it gets Bedrock's 403.
//!
//! It deliberately does not use the toolsift library: it judges the filter's output, so it must
//! not share the filter's parsing bugs.
//!
//! It also plays a misbehaving OpenAI-compatible embeddings API, for the tests of the filter's
//! hybrid ranking: point the filter's `embeddings.path` at one of these to provoke each fault.
//! Every route reads the whole request body (`{"input": "text" | ["text", ...], "model": ...,
//! "dimensions": d}`) before it misbehaves; a body that is not such a request gets a 400 from
//! the routes that answer with vectors.
//!
//! - `POST /embeddings/ok`: 200 with `{"object":"list","data":[{"object":"embedding","index":i,
//!   "embedding":[...]}],"model":...,"usage":{"prompt_tokens":n,"total_tokens":n}}`, one unit
//!   vector per input, a hashed bag of the text's lowercased words (texts sharing words are
//!   similar; never all zeros), 16 numbers unless the request asks for `"dimensions": d`.
//! - `POST /embeddings/slow?ms=N`: waits N milliseconds (default 3000, at most 120000) without
//!   blocking other requests, then answers like `ok`.
//! - `POST /embeddings/per-input?ms=N`: waits N milliseconds per input, then answers like
//!   `ok`: a model whose time grows with the batch, as real ones do.
//! - `POST /embeddings/auth`: like `ok` when the request carries
//!   `authorization: Bearer demo-key`, else 401 as OpenAI answers a missing or wrong key.
//! - `POST /embeddings/status/{code}`: that status (200..=599) with an OpenAI-style error body.
//! - `POST /embeddings/garbage`: 200, `content-type: text/html`, a body that is not JSON.
//! - `POST /embeddings/wrong-dims`: like `ok`, but every vector has 3 numbers whatever was asked.
//! - `POST /embeddings/wrong-count`: like `ok`, but one vector fewer than there were inputs.
//! - `POST /embeddings/reset`: closes the connection without answering (HTTP/2: resets the
//!   stream).
//!
//! It also plays a scripted model, for the tests of the filter's search mode (the gateway
//! answering a `find_tools` meta-tool and sending the follow-up request). A request to any of
//! the five LLM paths with `x-demo-model: scripted` is answered by a model that calls the tool
//! the headers name, in the dialect's own tool-call shapes, whole or streamed as the request
//! asks (`"stream": true`; Gemini's `:streamGenerateContent` as SSE with `alt=sse`, else as the
//! real API's JSON array sent element by element). Bedrock's `converse-stream` is refused (400).
//! Requests are checked as above, and their conversation as the provider would: a tool call
//! without its result, a result without its call (Chat `tool_calls[].id` and `tool_call_id`;
//! Responses `call_id`, in the stored conversation too; Anthropic `tool_use.id` and
//! `tool_result.tool_use_id` in the next message; Gemini `functionCall` and `functionResponse`
//! names in the next turn; Bedrock `toolUseId`) or a duplicate tool name is a 400 in the
//! dialect's error shape. The headers:
//!
//! - `x-demo-want: NAME` (required, else 400): the tool the model wants to call.
//! - `x-demo-search-tool: NAME` (default `find_tools`): the meta-tool's name.
//! - `x-demo-query: TEXT` (default: the latest user text of the conversation): the query it
//!   searches with.
//! - `x-demo-args: {JSON object}` (default `{}`): the arguments of the wanted tool's call.
//! - `x-demo-script: MODE` (default `search`), where only the request's function tools count:
//!   - `search`: calls the wanted tool if present; else the search tool, if present, with
//!     `{"query": QUERY, "limit": 5}`; else answers the text `no NAME available`.
//!   - `always-search`: calls the search tool whenever present, even beside the wanted tool;
//!     without it, as `search`.
//!   - `mixed`: calls the wanted tool if present; else the search tool and the request's first
//!     other function tool (with `{}`), in one turn, search first; without the search tool, as
//!     `search`.
//!   - `text-first`: as `search`, with the text `Let me look that up.` before a call.
//!   - `use-tool`: calls the wanted tool if present; else `use_tool`, if present, with
//!     `{"query": QUERY, "params": ARGS}`; else as `search`.
//!   - `answer`: a text answer (the usual `demo upstream received N tools: ...`), no calls.
//! - `x-demo-fail-followup: STATUS` (400..=599): a request whose conversation already holds a
//!   tool result (the gateway's follow-up) gets that status and the dialect's error body.
//! - `x-demo-chunk-delay-ms: N` (at most 60000): streams wait N ms between frames.
//!
//! Call ids are `call_SEQ_I` (Chat; Responses `call_id`, with item id `fc_SEQ_I`), `toolu_SEQ_I`
//! (Anthropic) and `tooluse_SEQ_I` (Bedrock), SEQ the request's number in `/stats` and I the
//! call's 0-based place in the turn; Gemini calls have no id, as in the real API. Usage is
//! deterministic: input tokens are the body's bytes / 4 (rounded down), output tokens 10 per
//! call plus the words of the text. Streams are the provider's event sequences, one body chunk
//! per event, with arguments in at least two deltas (Gemini: each `functionCall` part whole in
//! its own chunk, finish reason and usage on the last). Answers carry no `toolsift_demo` report.
//!
//! OpenAI Responses are stored as OpenAI stores them (`stored.rs`), whichever model answers:
//! every answer's id (`resp_demo{SEQ}`) names the conversation it answered plus its output,
//! unless the request said `"store": false`. A request with `previous_response_id` is read as
//! that conversation followed by its own `input`; an unknown id is a 400 with code
//! `previous_response_not_found`, and a `function_call_output` whose `call_id` no call of the
//! conversation has is a 400 `No tool call found for function call output with call_id …`.
//!
//! - `GET /scripted/log`: the scripted requests, oldest first (the latest 200): `[{"path": ...,
//!   "headers": {lowercased name: value}, "body": parsed JSON}]`; `path` keeps the query string
//!   (`?alt=sse`), repeated headers are joined with `, `, a body that is not JSON is logged as a
//!   string and one that could not be read as `null`.
//! - `POST /scripted/log/reset`: empties the log; answers `{"cleared": N}`.
//!
//! `GET /stats` counts every POST in `requests` and `by_path` (these included, except
//! `/scripted/log/reset`), the embeddings routes alone in `"embeddings": {"requests": N,
//! "inputs": M, "invalid_bodies": K}` (`inputs` sums the texts of the bodies that parsed,
//! `invalid_bodies` counts those that did not), and the scripted requests in
//! `"scripted": {"requests": N}`.
//!
//! Usage: `toolsift-demo-upstream [--listen 127.0.0.1:18000] [--verbose]`

use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet, VecDeque};
use std::convert::Infallible;
use std::fmt::{self, Write as _};
use std::io::Write as _;
use std::pin::{Pin, pin};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::header::{
    ALLOW, CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue,
    TRANSFER_ENCODING,
};
use hyper::http::request::Parts;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::error::Category;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

mod eventstream;
mod scripted;
mod sigv4;
mod stored;

const USAGE: &str = "\
usage: toolsift-demo-upstream [--listen ADDR] [--verbose]

A fake LLM provider API (OpenAI Chat/Responses, Anthropic, Gemini, Bedrock Converse)
that validates and reports the tools it receives.

  --listen ADDR   address to listen on (default 127.0.0.1:18000; port 0 picks a free port)
  --verbose, -v   log one line per request to stderr
  --help, -h      show this help
";

const DEFAULT_LISTEN: &str = "127.0.0.1:18000";

/// Larger than the 32 MiB buffer limit in envoy.yaml, so Envoy's limit is the one a test hits.
const MAX_BODY_BYTES: usize = 64 << 20;

/// Cap on `x-demo-tools`: an unfiltered request can carry thousands of tools, and Envoy
/// refuses upstream response headers past 60 KiB by default. The full list is in the body.
const TOOLS_HEADER_LIMIT: usize = 8 * 1024;

/// How many tool names the assistant text spells out before summarising the rest.
const TEXT_TOOL_LIMIT: usize = 20;

/// Distinct paths tracked by /stats; later ones are pooled so a path scan cannot grow memory.
const MAX_STATS_PATHS: usize = 1024;
const OTHER_PATHS_KEY: &str = "(other)";

/// How long shutdown waits for open connections to finish their requests.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Pause after a failed accept (e.g. out of file descriptors) so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

const ECHO_HEADER: &str = "x-demo-echo";
/// `x-demo-echo: none` answers `{}` as soon as the body has arrived, without reading it: the
/// latency benchmark uses it so the upstream costs the same whether the body carries 5 tools
/// or 4,000, and only the gateway's own time differs.
const ECHO_NONE: &[u8] = b"none";
/// `x-demo-echo: raw` answers 200 with the request body exactly as it arrived, unread: the tests
/// of bodies toolsift must pass through untouched, valid JSON or not.
const ECHO_RAW: &[u8] = b"raw";
/// On every answer to a request that had trailers: `name=value, …`.
const REQUEST_TRAILERS_HEADER: &str = "x-demo-request-trailers";
/// A request with this header gets its answer with the trailer [`TRAILER_NAME`]`: done`
/// (HTTP/2, or HTTP/1.1 chunked to a client that accepts trailers).
const SEND_TRAILERS_HEADER: &str = "x-demo-trailers";
const TRAILER_NAME: &str = "x-demo-trailer";
const DIALECT_HEADER: &str = "x-demo-dialect";
const TOOL_COUNT_HEADER: &str = "x-demo-tool-count";
const TOOLS_HEADER: &str = "x-demo-tools";
const TOOLS_TRUNCATED_HEADER: &str = "x-demo-tools-truncated";

const DEFAULT_MODEL: &str = "toolsift-demo";

/// Paths under this prefix are the embeddings stand-in's routes.
const EMBEDDINGS_PREFIX: &str = "/embeddings/";
const EMBEDDING_DIMENSIONS: usize = 16;
/// The largest `dimensions` accepted, as in the filter's own configuration check.
const MAX_EMBEDDING_DIMENSIONS: usize = 16_384;
/// What `/embeddings/wrong-dims` answers with, whatever was asked.
const WRONG_DIMENSIONS: usize = 3;
const DEFAULT_SLOW_MS: u64 = 3_000;
const MAX_SLOW_MS: u64 = 120_000;
const GARBAGE_BODY: &[u8] =
    b"<html><head><title>502 Bad Gateway</title></head><body>upstream says no</body></html>\n";

// ---------------------------------------------------------------------------------------------
// Command line
// ---------------------------------------------------------------------------------------------

#[derive(Debug, PartialEq, Eq)]
struct Options {
    listen: String,
    verbose: bool,
}

#[derive(Debug, PartialEq, Eq)]
enum Command {
    Run(Options),
    Help,
}

fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Command, String> {
    let mut options = Options {
        listen: DEFAULT_LISTEN.to_owned(),
        verbose: false,
    };
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--listen" => options.listen = args.next().ok_or("--listen needs an address")?,
            "--verbose" | "-v" => options.verbose = true,
            "--help" | "-h" => return Ok(Command::Help),
            other => match other.strip_prefix("--listen=") {
                Some(address) => options.listen = address.to_owned(),
                None => return Err(format!("unknown argument: {other}")),
            },
        }
    }
    Ok(Command::Run(options))
}

/// `eprintln!` that ignores write errors. A test harness may close its end of the stderr pipe
/// once it has read the "listening" line; `eprintln!` would then panic the server.
macro_rules! log_line {
    ($($arg:tt)*) => {{
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

// ---------------------------------------------------------------------------------------------
// Server plumbing
// ---------------------------------------------------------------------------------------------

#[tokio::main]
async fn main() -> ExitCode {
    let options = match parse_args(std::env::args().skip(1)) {
        Ok(Command::Run(options)) => options,
        Ok(Command::Help) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("toolsift-demo-upstream: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    run(options).await
}

async fn run(options: Options) -> ExitCode {
    let listener = match TcpListener::bind(&options.listen).await {
        Ok(listener) => listener,
        Err(err) => {
            log_line!(
                "toolsift-demo-upstream: cannot listen on {}: {err}",
                options.listen
            );
            return ExitCode::FAILURE;
        }
    };
    match listener.local_addr() {
        Ok(address) => log_line!("demo upstream listening on {address}"),
        Err(_) => log_line!("demo upstream listening on {}", options.listen),
    }

    let server = Arc::new(Server {
        verbose: options.verbose,
        stats: Stats::default(),
        scripted_log: scripted::Log::default(),
        responses: stored::Responses::default(),
    });
    let (shutdown_tx, shutdown_rx) = watch::channel(());
    // Each connection task holds a clone of `drain_tx`; `recv` returns None once all have ended.
    let (drain_tx, mut drain_rx) = mpsc::channel::<()>(1);
    let mut stop = pin!(shutdown_signal());

    loop {
        tokio::select! {
            () = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    let connection = serve_connection(
                        stream,
                        Arc::clone(&server),
                        shutdown_rx.clone(),
                        drain_tx.clone(),
                    );
                    tokio::spawn(connection);
                }
                Err(err) => {
                    log_line!("toolsift-demo-upstream: accept failed: {err}");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            },
        }
    }

    drop(listener);
    // An error only means no connection is open to hear it.
    let _ = shutdown_tx.send(());
    drop(drain_tx);
    if tokio::time::timeout(DRAIN_TIMEOUT, drain_rx.recv())
        .await
        .is_err()
    {
        log_line!(
            "toolsift-demo-upstream: connections still open after {DRAIN_TIMEOUT:?}; exiting"
        );
    }
    ExitCode::SUCCESS
}

/// Resolves on Ctrl-C or, on Unix, SIGTERM (what `kill` and process supervisors send).
async fn shutdown_signal() {
    let ctrl_c = async {
        // If the handler cannot be installed, wait for SIGTERM alone rather than exit at once.
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                tokio::select! {
                    () = ctrl_c => {}
                    _ = terminate.recv() => {}
                }
            }
            Err(_) => ctrl_c.await,
        }
    }
    #[cfg(not(unix))]
    ctrl_c.await;
}

async fn serve_connection(
    stream: TcpStream,
    server: Arc<Server>,
    mut shutdown: watch::Receiver<()>,
    _drain: mpsc::Sender<()>,
) {
    let verbose = server.verbose;
    // Responses are small single writes; Nagle would hold them back waiting for an ACK.
    if let Err(err) = stream.set_nodelay(true) {
        if verbose {
            log_line!("toolsift-demo-upstream: cannot set TCP_NODELAY: {err}");
        }
    }
    // `auto` serves HTTP/1.1 and, on seeing the HTTP/2 preface, h2c (prior knowledge).
    let builder = auto::Builder::new(TokioExecutor::new());
    let service = service_fn(move |request| handle(request, Arc::clone(&server)));
    let mut connection = pin!(builder.serve_connection(TokioIo::new(stream), service));
    let result = tokio::select! {
        result = connection.as_mut() => result,
        _ = shutdown.changed() => {
            // Let in-flight requests finish; idle keep-alive connections close at once.
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    // Clients that hang up mid-exchange are routine in benchmarks; report them only when asked.
    if let Err(err) = result {
        if verbose {
            log_line!("toolsift-demo-upstream: connection error: {err}");
        }
    }
}

struct Server {
    verbose: bool,
    stats: Stats,
    /// The scripted model's request log, behind `GET /scripted/log`.
    scripted_log: scripted::Log,
    /// OpenAI Responses answers, for requests that continue them (`previous_response_id`).
    responses: stored::Responses,
}

/// Counters behind `GET /stats`.
#[derive(Default)]
struct Stats {
    requests: AtomicU64,
    by_path: Mutex<BTreeMap<String, u64>>,
    embeddings_requests: AtomicU64,
    embeddings_inputs: AtomicU64,
    embeddings_invalid_bodies: AtomicU64,
    scripted_requests: AtomicU64,
}

impl Stats {
    /// Counts one POST and returns its 1-based sequence number, used to make response ids unique.
    fn record(&self, path: &str) -> u64 {
        let sequence = self
            .requests
            .fetch_add(1, Ordering::Relaxed)
            .saturating_add(1);
        // A poisoned lock only means another request panicked mid-increment; counts stay usable.
        let mut by_path = self.by_path.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = by_path.get_mut(path) {
            *count = count.saturating_add(1);
        } else {
            let key = if by_path.len() < MAX_STATS_PATHS {
                path
            } else {
                OTHER_PATHS_KEY
            };
            let count = by_path.entry(key.to_owned()).or_insert(0);
            *count = count.saturating_add(1);
        }
        sequence
    }

    /// Counts one embeddings request's body: its inputs, or that it did not parse.
    fn record_embeddings_body(&self, inputs: Option<usize>) {
        match inputs {
            Some(inputs) => {
                let inputs = u64::try_from(inputs).unwrap_or(u64::MAX);
                self.embeddings_inputs.fetch_add(inputs, Ordering::Relaxed);
            }
            None => {
                self.embeddings_invalid_bodies
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn snapshot(&self) -> Value {
        let by_path = self.by_path.lock().unwrap_or_else(PoisonError::into_inner);
        json!({
            "requests": self.requests.load(Ordering::Relaxed),
            "by_path": *by_path,
            "embeddings": {
                "requests": self.embeddings_requests.load(Ordering::Relaxed),
                "inputs": self.embeddings_inputs.load(Ordering::Relaxed),
                "invalid_bodies": self.embeddings_invalid_bodies.load(Ordering::Relaxed),
            },
            "scripted": { "requests": self.scripted_requests.load(Ordering::Relaxed) },
        })
    }
}

/// Returned by the service to make hyper drop the connection (HTTP/1) or reset the stream
/// (HTTP/2) without answering: `/embeddings/reset`.
#[derive(Debug)]
struct ResetConnection;

impl fmt::Display for ResetConnection {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("closed without answering, as /embeddings/reset asks")
    }
}

impl std::error::Error for ResetConnection {}

async fn handle(
    request: Request<Incoming>,
    server: Arc<Server>,
) -> Result<Response<ReplyBody>, ResetConnection> {
    let started = server.verbose.then(Instant::now);
    let (parts, body) = request.into_parts();
    if parts.method == Method::POST {
        if let Some(route) = EmbeddingsRoute::detect(parts.uri.path(), parts.uri.query()) {
            let response = serve_embeddings(&parts, body, route, &server.stats).await;
            if let Some(started) = started {
                let status = response
                    .as_ref()
                    .map_or_else(|_| "reset".to_owned(), |r| r.status().as_u16().to_string());
                log_line!(
                    "{} {} -> {status} {:.2?}",
                    parts.method,
                    parts.uri,
                    started.elapsed(),
                );
            }
            return response;
        }
    }
    let response = route(&parts, body, &server).await;
    if let Some(started) = started {
        let tools = response
            .headers()
            .get(TOOL_COUNT_HEADER)
            .and_then(|value| value.to_str().ok());
        log_line!(
            "{} {} -> {} tools={} {:.2?}",
            parts.method,
            parts.uri.path(),
            response.status().as_u16(),
            tools.unwrap_or("-"),
            started.elapsed(),
        );
    }
    Ok(response)
}

async fn route(parts: &Parts, body: Incoming, server: &Server) -> Response<ReplyBody> {
    // `Uri::path` excludes the query string (Gemini clients send `?alt=sse`, Azure `?api-version=`).
    let path = parts.uri.path();
    let endpoint = Endpoint::detect(path);
    match (&parts.method, path, endpoint) {
        (&Method::GET, "/healthz", _) => {
            plain_response(StatusCode::OK, "text/plain", Bytes::from_static(b"ok"))
        }
        (&Method::GET, "/stats", _) => json_response(StatusCode::OK, &server.stats.snapshot()),
        (&Method::GET, scripted::LOG_PATH, _) => {
            json_response(StatusCode::OK, &server.scripted_log.snapshot())
        }
        (&Method::POST, scripted::LOG_RESET_PATH, _) => {
            let cleared = server.scripted_log.clear();
            json_response(StatusCode::OK, &json!({ "cleared": cleared }))
        }
        (_, scripted::LOG_PATH | scripted::LOG_RESET_PATH, _) => {
            let allowed = if path == scripted::LOG_PATH {
                "GET"
            } else {
                "POST"
            };
            let mut response = invalid_url(parts, StatusCode::METHOD_NOT_ALLOWED);
            response
                .headers_mut()
                .insert(ALLOW, HeaderValue::from_static(allowed));
            response
        }
        (&Method::POST, _, endpoint) => {
            let sequence = server.stats.record(path);
            match endpoint {
                Some(endpoint) => serve_llm_request(parts, body, &endpoint, sequence, server).await,
                None => invalid_url(parts, StatusCode::NOT_FOUND),
            }
        }
        (_, _, Some(_)) => invalid_url(parts, StatusCode::METHOD_NOT_ALLOWED),
        _ => invalid_url(parts, StatusCode::NOT_FOUND),
    }
}

async fn serve_llm_request(
    parts: &Parts,
    body: Incoming,
    endpoint: &Endpoint,
    sequence: u64,
    server: &Server,
) -> Response<ReplyBody> {
    let dialect = endpoint.dialect;
    let scripted = scripted::requested(&parts.headers);
    if scripted {
        server
            .stats
            .scripted_requests
            .fetch_add(1, Ordering::Relaxed);
    }
    let (body, trailers) = match read_body(body).await {
        Ok(read) => read,
        Err((status, rejection)) => {
            if scripted {
                server.scripted_log.record(parts, None);
            }
            return rejection_response(Some(dialect), status, &rejection);
        }
    };
    let echo = parts.headers.get(ECHO_HEADER).map(HeaderValue::as_bytes);
    if !scripted && echo.is_some_and(|echo| echo.eq_ignore_ascii_case(ECHO_NONE)) {
        return plain_response(
            StatusCode::OK,
            "application/json",
            Bytes::from_static(b"{}"),
        );
    }
    let signed = if dialect == Dialect::Bedrock {
        sigv4::check(parts, &body)
    } else {
        Ok(())
    };
    let mut response = if let Err(refusal) = signed {
        refusal.response()
    } else if echo.is_some_and(|echo| echo.eq_ignore_ascii_case(ECHO_RAW)) {
        plain_response(StatusCode::OK, "application/octet-stream", body.clone())
    } else if scripted {
        server.scripted_log.record(parts, Some(&body));
        scripted::serve(parts, endpoint, &body, sequence, &server.responses)
    } else {
        answer_llm_request(parts, body.clone(), endpoint, sequence, server)
    };
    if let Some(trailers) = &trailers {
        let list = trailers
            .iter()
            .map(|(name, value)| format!("{name}={}", String::from_utf8_lossy(value.as_bytes())))
            .collect::<Vec<_>>()
            .join(", ");
        if let Ok(list) = HeaderValue::try_from(list) {
            response.headers_mut().insert(REQUEST_TRAILERS_HEADER, list);
        }
    }
    if parts.headers.contains_key(SEND_TRAILERS_HEADER) {
        response.body_mut().trailers = Some(HeaderMap::from_iter([(
            HeaderName::from_static(TRAILER_NAME),
            HeaderValue::from_static("done"),
        )]));
    }
    response
}

/// The answer of the model that is not scripted: the demo's report of what it received.
fn answer_llm_request(
    parts: &Parts,
    body: Bytes,
    endpoint: &Endpoint,
    sequence: u64,
    server: &Server,
) -> Response<ReplyBody> {
    let dialect = endpoint.dialect;
    let inspection = match inspect_request(endpoint, &body) {
        Ok(inspection) => inspection,
        Err(rejection) => {
            return rejection_response(Some(dialect), StatusCode::BAD_REQUEST, &rejection);
        }
    };
    // Responses: the conversation a stored answer holds comes first, and every tool output
    // must answer a call in it, as OpenAI checks.
    let resolved = if dialect == Dialect::OpenAiResponses {
        let request: Value = serde_json::from_slice(&body).unwrap_or_default();
        let resolved = server.responses.resolve(&request).and_then(|resolved| {
            scripted::check_responses_conversation(&resolved).map(|()| resolved)
        });
        match resolved {
            Ok(resolved) => Some(resolved),
            Err(rejection) => {
                return rejection_response(Some(dialect), StatusCode::BAD_REQUEST, &rejection);
            }
        }
    } else {
        None
    };

    let wants_echo = parts
        .headers
        .get(ECHO_HEADER)
        .is_some_and(|value| value.as_bytes().eq_ignore_ascii_case(b"body"));
    let mut response = if wants_echo {
        plain_response(StatusCode::OK, "application/json", body)
    } else {
        let reply = Reply::new(endpoint, &inspection, parts, &body, sequence);
        if let Some(resolved) = &resolved {
            let output = [reply.responses_message()];
            server
                .responses
                .keep(resolved, reply.responses_id(), &output);
        }
        if inspection.stream {
            let content_type = if dialect == Dialect::Bedrock {
                eventstream::CONTENT_TYPE
            } else {
                "text/event-stream"
            };
            let mut response = plain_response(StatusCode::OK, content_type, reply.stream());
            response
                .headers_mut()
                .insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            response
        } else {
            json_response(StatusCode::OK, &reply.complete())
        }
    };
    add_demo_headers(response.headers_mut(), dialect, &inspection.tools);
    response
}

/// The body and its trailers, if any.
async fn read_body(body: Incoming) -> Result<(Bytes, Option<HeaderMap>), (StatusCode, Rejection)> {
    match Limited::new(body, MAX_BODY_BYTES).collect().await {
        Ok(collected) => {
            let trailers = collected.trailers().cloned();
            Ok((collected.to_bytes(), trailers))
        }
        Err(err) if err.is::<LengthLimitError>() => Err((
            StatusCode::PAYLOAD_TOO_LARGE,
            Rejection::new(format!(
                "Request body exceeds the demo upstream's limit of {MAX_BODY_BYTES} bytes."
            )),
        )),
        Err(err) => Err((
            StatusCode::BAD_REQUEST,
            Rejection::new(format!("Could not read the request body: {err}")),
        )),
    }
}

fn add_demo_headers(headers: &mut HeaderMap, dialect: Dialect, tools: &[String]) {
    headers.insert(DIALECT_HEADER, HeaderValue::from_static(dialect.name()));
    headers.insert(TOOL_COUNT_HEADER, HeaderValue::from(tools.len()));
    let (list, truncated) = tools_header_value(tools);
    // Cannot fail: `tools_header_value` escapes everything but visible ASCII.
    if let Ok(value) = HeaderValue::try_from(list) {
        headers.insert(TOOLS_HEADER, value);
    }
    if truncated {
        headers.insert(TOOLS_TRUNCATED_HEADER, HeaderValue::from_static("true"));
    }
}

/// The tool names for `x-demo-tools`, comma-separated, and whether some were left out to stay
/// under [`TOOLS_HEADER_LIMIT`]. Bytes a header value cannot carry, and `%` and `,` (so the list
/// splits back unambiguously), are percent-escaped.
fn tools_header_value(tools: &[String]) -> (String, bool) {
    let mut list = String::new();
    for name in tools {
        let separator = if list.is_empty() { "" } else { "," };
        let mut escaped = String::with_capacity(name.len());
        for byte in name.bytes() {
            if byte.is_ascii_graphic() && byte != b'%' && byte != b',' {
                escaped.push(char::from(byte));
            } else {
                let _ = write!(escaped, "%{byte:02X}");
            }
        }
        if list.len() + separator.len() + escaped.len() > TOOLS_HEADER_LIMIT {
            return (list, true);
        }
        list.push_str(separator);
        list.push_str(&escaped);
    }
    (list, false)
}

// ---------------------------------------------------------------------------------------------
// Responses
// ---------------------------------------------------------------------------------------------

/// A response body of ready-made chunks. A single chunk goes out with a Content-Length; a stream
/// goes out as one HTTP/1.1 chunk (or HTTP/2 DATA frame) per event, like a real SSE response.
struct ReplyBody {
    chunks: VecDeque<Bytes>,
    streamed: bool,
    /// Pause before each chunk but the first (the scripted model's `x-demo-chunk-delay-ms`).
    gap: Duration,
    /// The pause under way, if any.
    pause: Option<Pin<Box<tokio::time::Sleep>>>,
    started: bool,
    /// Sent after the last chunk.
    trailers: Option<HeaderMap>,
}

impl ReplyBody {
    fn new(chunks: VecDeque<Bytes>, streamed: bool) -> Self {
        Self {
            chunks,
            streamed,
            gap: Duration::ZERO,
            pause: None,
            started: false,
            trailers: None,
        }
    }

    fn gap(mut self, gap: Duration) -> Self {
        self.gap = gap;
        self
    }
}

impl From<Bytes> for ReplyBody {
    fn from(bytes: Bytes) -> Self {
        Self::new(VecDeque::from([bytes]), false)
    }
}

impl From<Vec<Bytes>> for ReplyBody {
    fn from(events: Vec<Bytes>) -> Self {
        Self::new(events.into(), true)
    }
}

impl Body for ReplyBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = &mut *self;
        if this.started && !this.gap.is_zero() && !this.chunks.is_empty() {
            let gap = this.gap;
            let pause = this
                .pause
                .get_or_insert_with(|| Box::pin(tokio::time::sleep(gap)));
            if pause.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            this.pause = None;
        }
        this.started = true;
        if let Some(chunk) = this.chunks.pop_front() {
            return Poll::Ready(Some(Ok(Frame::data(chunk))));
        }
        Poll::Ready(
            this.trailers
                .take()
                .map(|trailers| Ok(Frame::trailers(trailers))),
        )
    }

    fn is_end_stream(&self) -> bool {
        self.chunks.is_empty() && self.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        if self.streamed {
            return SizeHint::default();
        }
        let length = self.chunks.iter().map(Bytes::len).sum::<usize>();
        SizeHint::with_exact(u64::try_from(length).unwrap_or(u64::MAX))
    }
}

fn plain_response(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<ReplyBody>,
) -> Response<ReplyBody> {
    let mut response = Response::new(body.into());
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

fn json_response(status: StatusCode, value: &Value) -> Response<ReplyBody> {
    plain_response(status, "application/json", Bytes::from(value.to_string()))
}

/// OpenAI's answer to an unknown path or method, used for every dialect since the path matched none.
fn invalid_url(parts: &Parts, status: StatusCode) -> Response<ReplyBody> {
    let message = format!("Invalid URL ({} {})", parts.method, parts.uri.path());
    let mut response = rejection_response(None, status, &Rejection::new(message));
    if status == StatusCode::METHOD_NOT_ALLOWED {
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("POST"));
    }
    response
}

/// A rejection in the error shape of the provider the request was meant for.
fn rejection_response(
    dialect: Option<Dialect>,
    status: StatusCode,
    rejection: &Rejection,
) -> Response<ReplyBody> {
    let Rejection {
        message,
        param,
        code,
    } = rejection;
    let body = match dialect {
        None | Some(Dialect::OpenAiChat | Dialect::OpenAiResponses) => json!({
            "error": { "message": message, "type": "invalid_request_error", "param": param, "code": code },
        }),
        Some(Dialect::Anthropic) => {
            let kind = if status == StatusCode::PAYLOAD_TOO_LARGE {
                "request_too_large"
            } else {
                "invalid_request_error"
            };
            json!({ "type": "error", "error": { "type": kind, "message": message } })
        }
        Some(Dialect::Gemini) => json!({
            "error": { "code": status.as_u16(), "message": message, "status": "INVALID_ARGUMENT" },
        }),
        Some(Dialect::Bedrock) => json!({ "message": message }),
    };
    let mut response = json_response(status, &body);
    if dialect == Some(Dialect::Bedrock) {
        response.headers_mut().insert(
            "x-amzn-errortype",
            HeaderValue::from_static("ValidationException"),
        );
    }
    response
}

/// Everything a success answer is built from.
struct Reply {
    dialect: Dialect,
    /// Request sequence number, to make response ids unique within a run.
    sequence: u64,
    created: u64,
    model: String,
    text: String,
    input_tokens: u64,
    output_tokens: u64,
    include_usage: bool,
    /// The `toolsift_demo` report: what the demo saw of the request.
    demo: Value,
}

impl Reply {
    fn new(
        endpoint: &Endpoint,
        inspection: &Inspection,
        parts: &Parts,
        body: &[u8],
        sequence: u64,
    ) -> Self {
        let header_text = |name: HeaderName| {
            let value = parts.headers.get(name)?;
            Some(String::from_utf8_lossy(value.as_bytes()).into_owned())
        };
        let demo = json!({
            "dialect": endpoint.dialect.name(),
            "tools": inspection.tools,
            "tool_count": inspection.tools.len(),
            "body_bytes": body.len(),
            "body_sha256": sha256_hex(body),
            "content_length": header_text(CONTENT_LENGTH),
            "transfer_encoding": header_text(TRANSFER_ENCODING),
            "content_type": header_text(CONTENT_TYPE),
            "stream": inspection.stream,
            "http_version": format!("{:?}", parts.version),
            "path": parts.uri.path(),
        });
        let text = summary_sentence(&inspection.tools);
        let model = inspection
            .model
            .clone()
            .or_else(|| endpoint.path_model.clone())
            .unwrap_or_else(|| DEFAULT_MODEL.to_owned());
        // Token counts are rough stand-ins (about four bytes per token), enough for clients
        // that read `usage`.
        let input_tokens = u64::try_from(body.len().div_ceil(4)).unwrap_or(u64::MAX);
        let output_tokens = u64::try_from(text.split_whitespace().count()).unwrap_or(u64::MAX);
        let created = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_secs());
        Self {
            dialect: endpoint.dialect,
            sequence,
            created,
            model,
            text,
            input_tokens,
            output_tokens,
            include_usage: inspection.include_usage,
            demo,
        }
    }

    fn total_tokens(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }

    /// The non-streaming answer.
    fn complete(&self) -> Value {
        let mut answer = match self.dialect {
            Dialect::OpenAiChat => json!({
                "id": format!("chatcmpl-demo{}", self.sequence),
                "object": "chat.completion",
                "created": self.created,
                "model": self.model,
                "choices": [{
                    "index": 0,
                    "message": { "role": "assistant", "content": self.text, "refusal": null },
                    "logprobs": null,
                    "finish_reason": "stop",
                }],
                "usage": self.chat_usage(),
                "system_fingerprint": null,
            }),
            Dialect::OpenAiResponses => self.responses_object("completed"),
            Dialect::Anthropic => json!({
                "id": format!("msg_demo{}", self.sequence),
                "type": "message",
                "role": "assistant",
                "model": self.model,
                "content": [{ "type": "text", "text": self.text }],
                "stop_reason": "end_turn",
                "stop_sequence": null,
                "usage": { "input_tokens": self.input_tokens, "output_tokens": self.output_tokens },
            }),
            Dialect::Gemini => json!({
                "candidates": [{
                    "content": { "role": "model", "parts": [{ "text": self.text }] },
                    "finishReason": "STOP",
                    "index": 0,
                }],
                "usageMetadata": self.gemini_usage(),
                "modelVersion": self.model,
            }),
            Dialect::Bedrock => json!({
                "output": { "message": { "role": "assistant", "content": [{ "text": self.text }] } },
                "stopReason": "end_turn",
                "usage": self.bedrock_usage(),
                "metrics": { "latencyMs": 0 },
            }),
        };
        with_demo_report(&mut answer, &self.demo);
        answer
    }

    /// The streaming answer: the provider's own event sequence, with the whole sentence in one
    /// text delta and the `toolsift_demo` report on the first event.
    fn stream(&self) -> Vec<Bytes> {
        match self.dialect {
            Dialect::OpenAiChat => self.chat_stream(),
            Dialect::OpenAiResponses => self.responses_stream(),
            Dialect::Anthropic => self.anthropic_stream(),
            Dialect::Gemini => self.gemini_stream(),
            Dialect::Bedrock => self.bedrock_stream(),
        }
    }

    fn chat_usage(&self) -> Value {
        json!({
            "prompt_tokens": self.input_tokens,
            "completion_tokens": self.output_tokens,
            "total_tokens": self.total_tokens(),
        })
    }

    fn gemini_usage(&self) -> Value {
        json!({
            "promptTokenCount": self.input_tokens,
            "candidatesTokenCount": self.output_tokens,
            "totalTokenCount": self.total_tokens(),
        })
    }

    fn bedrock_usage(&self) -> Value {
        json!({
            "inputTokens": self.input_tokens,
            "outputTokens": self.output_tokens,
            "totalTokens": self.total_tokens(),
        })
    }

    fn chat_stream(&self) -> Vec<Bytes> {
        let chunk = |choices: Value| {
            json!({
                "id": format!("chatcmpl-demo{}", self.sequence),
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "system_fingerprint": null,
                "choices": choices,
            })
        };
        let choice = |delta: Value, finish_reason: Option<&str>| json!([{ "index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason }]);
        let mut first = chunk(choice(json!({ "role": "assistant", "content": "" }), None));
        with_demo_report(&mut first, &self.demo);
        let mut events = vec![
            sse_event(None, &first),
            sse_event(None, &chunk(choice(json!({ "content": self.text }), None))),
            sse_event(None, &chunk(choice(json!({}), Some("stop")))),
        ];
        // With `stream_options.include_usage`, OpenAI adds a last chunk with usage and no choices.
        if self.include_usage {
            let mut usage = chunk(json!([]));
            with_member(&mut usage, "usage", self.chat_usage());
            events.push(sse_event(None, &usage));
        }
        events.push(Bytes::from_static(b"data: [DONE]\n\n"));
        events
    }

    /// A Responses API `response` object in the given status.
    fn responses_object(&self, status: &str) -> Value {
        let completed = status == "completed";
        let output = if completed {
            json!([self.responses_message()])
        } else {
            json!([])
        };
        let usage = if completed {
            json!({
                "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens,
                "total_tokens": self.total_tokens(),
            })
        } else {
            Value::Null
        };
        json!({
            "id": self.responses_id(),
            "object": "response",
            "created_at": self.created,
            "status": status,
            "model": self.model,
            "output": output,
            "usage": usage,
        })
    }

    fn responses_id(&self) -> String {
        format!("resp_demo{}", self.sequence)
    }

    fn responses_message(&self) -> Value {
        json!({
            "id": format!("msg_demo{}", self.sequence),
            "type": "message",
            "status": "completed",
            "role": "assistant",
            "content": [{ "type": "output_text", "text": self.text, "annotations": [] }],
        })
    }

    fn responses_stream(&self) -> Vec<Bytes> {
        let item_id = format!("msg_demo{}", self.sequence);
        let in_progress_item = json!({
            "id": item_id,
            "type": "message",
            "status": "in_progress",
            "role": "assistant",
            "content": [],
        });
        let empty_part = json!({ "type": "output_text", "text": "", "annotations": [] });
        let done_part = json!({ "type": "output_text", "text": self.text, "annotations": [] });
        let part_location = json!({ "item_id": item_id, "output_index": 0, "content_index": 0 });
        let with_location = |mut event: Value| {
            if let (Some(event), Some(location)) =
                (event.as_object_mut(), part_location.as_object())
            {
                event.extend(location.clone());
            }
            event
        };
        // The SDKs' stream accumulators need the item and part announced before the delta.
        let events = [
            json!({ "type": "response.created", "response": self.responses_object("in_progress") }),
            json!({ "type": "response.in_progress", "response": self.responses_object("in_progress") }),
            json!({ "type": "response.output_item.added", "output_index": 0, "item": in_progress_item }),
            with_location(json!({ "type": "response.content_part.added", "part": empty_part })),
            with_location(json!({ "type": "response.output_text.delta", "delta": self.text })),
            with_location(json!({ "type": "response.output_text.done", "text": self.text })),
            with_location(json!({ "type": "response.content_part.done", "part": done_part })),
            json!({ "type": "response.output_item.done", "output_index": 0, "item": self.responses_message() }),
            json!({ "type": "response.completed", "response": self.responses_object("completed") }),
        ];
        events
            .into_iter()
            .zip(0_u64..)
            .map(|(mut event, sequence_number)| {
                with_member(&mut event, "sequence_number", json!(sequence_number));
                if sequence_number == 0 {
                    with_demo_report(&mut event, &self.demo);
                }
                let name = event
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                sse_event(Some(&name), &event)
            })
            .collect()
    }

    fn anthropic_stream(&self) -> Vec<Bytes> {
        let mut message_start = json!({
            "type": "message_start",
            "message": {
                "id": format!("msg_demo{}", self.sequence),
                "type": "message",
                "role": "assistant",
                "model": self.model,
                "content": [],
                "stop_reason": null,
                "stop_sequence": null,
                "usage": { "input_tokens": self.input_tokens, "output_tokens": 1 },
            },
        });
        with_demo_report(&mut message_start, &self.demo);
        vec![
            sse_event(Some("message_start"), &message_start),
            sse_event(
                Some("content_block_start"),
                &json!({ "type": "content_block_start", "index": 0, "content_block": { "type": "text", "text": "" } }),
            ),
            sse_event(
                Some("content_block_delta"),
                &json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "text_delta", "text": self.text } }),
            ),
            sse_event(
                Some("content_block_stop"),
                &json!({ "type": "content_block_stop", "index": 0 }),
            ),
            sse_event(
                Some("message_delta"),
                &json!({
                    "type": "message_delta",
                    "delta": { "stop_reason": "end_turn", "stop_sequence": null },
                    "usage": { "output_tokens": self.output_tokens },
                }),
            ),
            sse_event(Some("message_stop"), &json!({ "type": "message_stop" })),
        ]
    }

    /// Gemini's SSE form (`?alt=sse`, which every SDK asks for); without it the real API streams
    /// one JSON array instead, which the demo does not imitate.
    fn gemini_stream(&self) -> Vec<Bytes> {
        let mut first = json!({
            "candidates": [{ "content": { "role": "model", "parts": [{ "text": self.text }] }, "index": 0 }],
            "modelVersion": self.model,
        });
        with_demo_report(&mut first, &self.demo);
        let last = json!({
            "candidates": [{
                "content": { "role": "model", "parts": [{ "text": "" }] },
                "finishReason": "STOP",
                "index": 0,
            }],
            "usageMetadata": self.gemini_usage(),
            "modelVersion": self.model,
        });
        vec![sse_event(None, &first), sse_event(None, &last)]
    }

    /// `ConverseStream`'s events in AWS's binary event-stream framing, each payload the
    /// event's member as the AWS SDKs present it (`{"contentBlockIndex":0,"delta":{...}}` for a
    /// `contentBlockDelta`).
    fn bedrock_stream(&self) -> Vec<Bytes> {
        let mut message_start = json!({ "role": "assistant" });
        with_demo_report(&mut message_start, &self.demo);
        [
            ("messageStart", message_start),
            (
                "contentBlockDelta",
                json!({ "contentBlockIndex": 0, "delta": { "text": self.text } }),
            ),
            ("contentBlockStop", json!({ "contentBlockIndex": 0 })),
            ("messageStop", json!({ "stopReason": "end_turn" })),
            (
                "metadata",
                json!({ "usage": self.bedrock_usage(), "metrics": { "latencyMs": 0 } }),
            ),
        ]
        .iter()
        .map(|(kind, payload)| eventstream::event(kind, payload.to_string().as_bytes()))
        .collect()
    }
}

fn sse_event(name: Option<&str>, data: &Value) -> Bytes {
    let event = match name {
        Some(name) => format!("event: {name}\ndata: {data}\n\n"),
        None => format!("data: {data}\n\n"),
    };
    Bytes::from(event)
}

fn with_member(object: &mut Value, key: &str, value: Value) {
    if let Some(object) = object.as_object_mut() {
        object.insert(key.to_owned(), value);
    }
}

fn with_demo_report(object: &mut Value, demo: &Value) {
    with_member(object, "toolsift_demo", demo.clone());
}

/// The assistant's answer: `demo upstream received 3 tools: a, b, c`.
fn summary_sentence(tools: &[String]) -> String {
    let count = tools.len();
    let noun = if count == 1 { "tool" } else { "tools" };
    let mut sentence = format!("demo upstream received {count} {noun}");
    for (index, name) in tools.iter().take(TEXT_TOOL_LIMIT).enumerate() {
        sentence.push_str(if index == 0 { ": " } else { ", " });
        sentence.push_str(name);
    }
    if count > TEXT_TOOL_LIMIT {
        let _ = write!(sentence, ", ... ({} more)", count - TEXT_TOOL_LIMIT);
    }
    sentence
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .fold(String::with_capacity(64), |mut hex, byte| {
            let _ = write!(hex, "{byte:02x}");
            hex
        })
}

// ---------------------------------------------------------------------------------------------
// Embeddings stand-in: an OpenAI-compatible embeddings API that misbehaves on request.
// ---------------------------------------------------------------------------------------------

/// Which `/embeddings/...` route a request took, and so how it misbehaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EmbeddingsRoute {
    Ok,
    Slow(Duration),
    /// A delay per input.
    PerInput(Duration),
    /// Requires `authorization: Bearer demo-key`.
    Auth,
    Status(StatusCode),
    Garbage,
    WrongDims,
    WrongCount,
    Reset,
}

impl EmbeddingsRoute {
    /// The route for `path` (without the query string), `None` if it is not one. A route with a
    /// bad parameter (`/embeddings/status/abc`, `/embeddings/slow?ms=x`) is a rejection.
    fn detect(path: &str, query: Option<&str>) -> Option<Result<Self, Rejection>> {
        let route = path.strip_prefix(EMBEDDINGS_PREFIX)?;
        let detected = match route {
            "ok" => Ok(Self::Ok),
            "slow" => slow_delay(query).map(Self::Slow),
            "per-input" => slow_delay(query).map(Self::PerInput),
            "auth" => Ok(Self::Auth),
            "garbage" => Ok(Self::Garbage),
            "wrong-dims" => Ok(Self::WrongDims),
            "wrong-count" => Ok(Self::WrongCount),
            "reset" => Ok(Self::Reset),
            other => {
                let code = other.strip_prefix("status/")?;
                code.parse::<u16>()
                    .ok()
                    .filter(|code| (200..=599).contains(code))
                    .and_then(|code| StatusCode::from_u16(code).ok())
                    .map(Self::Status)
                    .ok_or_else(|| {
                        Rejection::new(format!(
                            "The status in {path} must be a number from 200 to 599."
                        ))
                    })
            }
        };
        Some(detected)
    }
}

/// The `ms` of `/embeddings/slow?ms=N`, or the default.
fn slow_delay(query: Option<&str>) -> Result<Duration, Rejection> {
    let ms = query
        .into_iter()
        .flat_map(|query| query.split('&'))
        .find_map(|pair| pair.strip_prefix("ms="));
    match ms {
        None => Ok(Duration::from_millis(DEFAULT_SLOW_MS)),
        Some(ms) => ms
            .parse::<u64>()
            .ok()
            .filter(|ms| *ms <= MAX_SLOW_MS)
            .map(Duration::from_millis)
            .ok_or_else(|| {
                Rejection::new(format!(
                    "The query parameter 'ms' must be a whole number of milliseconds up to {MAX_SLOW_MS}."
                ))
                .with_code("invalid_value")
            }),
    }
}

/// What the stand-in reads of an embeddings request.
#[derive(Debug, PartialEq, Eq)]
struct EmbeddingsRequest {
    inputs: Vec<String>,
    model: Option<String>,
    dimensions: Option<usize>,
}

fn parse_embeddings_request(body: &[u8]) -> Result<EmbeddingsRequest, Rejection> {
    let request: Value = serde_json::from_slice(body).map_err(|err| {
        Rejection::new(format!(
            "We could not parse the JSON body of your request. ({err})"
        ))
    })?;
    let Some(request) = request.as_object() else {
        return Err(Rejection::new("The request body must be a JSON object."));
    };
    let invalid_input = || {
        let mut rejection = Rejection::new(
            "'input' must be a string or a non-empty array of strings (this stand-in takes no token arrays).",
        )
        .with_code("invalid_value");
        rejection.param = Some("input".to_owned());
        rejection
    };
    let inputs = match request.get("input") {
        Some(Value::String(text)) => vec![text.clone()],
        Some(Value::Array(items)) if !items.is_empty() => items
            .iter()
            .map(|item| item.as_str().map(str::to_owned).ok_or_else(invalid_input))
            .collect::<Result<_, _>>()?,
        None => {
            let mut rejection = Rejection::new("Missing required parameter: 'input'.");
            rejection.param = Some("input".to_owned());
            return Err(rejection);
        }
        Some(_) => return Err(invalid_input()),
    };
    let model = match request.get("model") {
        None | Some(Value::Null) => None,
        Some(Value::String(model)) => Some(model.clone()),
        Some(_) => {
            let mut rejection = Rejection::new("'model' must be a string.");
            rejection.param = Some("model".to_owned());
            return Err(rejection);
        }
    };
    let dimensions = match request.get("dimensions") {
        None | Some(Value::Null) => None,
        Some(value) => {
            let dimensions = value
                .as_u64()
                .and_then(|d| usize::try_from(d).ok())
                .filter(|d| (1..=MAX_EMBEDDING_DIMENSIONS).contains(d));
            if dimensions.is_none() {
                let mut rejection = Rejection::new(format!(
                    "'dimensions' must be a whole number from 1 to {MAX_EMBEDDING_DIMENSIONS}."
                ))
                .with_code("invalid_value");
                rejection.param = Some("dimensions".to_owned());
                return Err(rejection);
            }
            dimensions
        }
    };
    Ok(EmbeddingsRequest {
        inputs,
        model,
        dimensions,
    })
}

/// FNV-1a: a stable hash, so vectors are the same on every run and platform.
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A hashed bag of the text's lowercased words, scaled to unit length: texts that share words
/// point the same way. A text with no words gets one fixed non-zero component.
fn embed(text: &str, dimensions: usize) -> Vec<f64> {
    let mut vector = vec![0.0_f64; dimensions.max(1)];
    let slots = u64::try_from(vector.len()).unwrap_or(u64::MAX);
    let mut bump = |word: &str| {
        let slot = usize::try_from(fnv1a(word) % slots).unwrap_or(0);
        if let Some(value) = vector.get_mut(slot) {
            *value += 1.0;
        }
    };
    let lower = text.to_lowercase();
    let mut words = lower
        .split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
        .peekable();
    if words.peek().is_none() {
        bump("");
    }
    words.for_each(bump);
    let norm = vector.iter().map(|value| value * value).sum::<f64>().sqrt();
    if norm > 0.0 {
        for value in &mut vector {
            *value /= norm;
        }
    }
    vector
}

/// The 200 answer of the routes that return vectors: `dimensions` numbers per vector (`None`:
/// what the request asked), and one vector fewer than inputs when `drop_one`.
fn embeddings_answer(
    request: &EmbeddingsRequest,
    dimensions: Option<usize>,
    drop_one: bool,
) -> Value {
    let dimensions = dimensions
        .or(request.dimensions)
        .unwrap_or(EMBEDDING_DIMENSIONS);
    let count = if drop_one {
        request.inputs.len().saturating_sub(1)
    } else {
        request.inputs.len()
    };
    let data: Vec<Value> = request
        .inputs
        .iter()
        .take(count)
        .enumerate()
        .map(|(index, text)| {
            json!({ "object": "embedding", "index": index, "embedding": embed(text, dimensions) })
        })
        .collect();
    // About four bytes per token, as for the chat answers.
    let tokens = request
        .inputs
        .iter()
        .map(|text| text.len().div_ceil(4).max(1))
        .sum::<usize>();
    json!({
        "object": "list",
        "data": data,
        "model": request.model.as_deref().unwrap_or(DEFAULT_MODEL),
        "usage": { "prompt_tokens": tokens, "total_tokens": tokens },
    })
}

/// The error body of `/embeddings/status/{code}`, in OpenAI's shape and with its usual type.
fn embeddings_status_error(status: StatusCode) -> Value {
    let (kind, code) = match status.as_u16() {
        401 => ("invalid_request_error", Some("invalid_api_key")),
        403 => (
            "invalid_request_error",
            Some("unsupported_country_region_territory"),
        ),
        404 => ("invalid_request_error", Some("model_not_found")),
        429 => ("requests", Some("rate_limit_exceeded")),
        500..=599 => ("server_error", None),
        _ => ("invalid_request_error", None),
    };
    let reason = status.canonical_reason().unwrap_or("Unknown Status");
    json!({
        "error": {
            "message": format!("demo embeddings upstream answering {} {reason} as asked", status.as_u16()),
            "type": kind,
            "param": null,
            "code": code,
        },
    })
}

async fn serve_embeddings(
    parts: &Parts,
    body: Incoming,
    route: Result<EmbeddingsRoute, Rejection>,
    stats: &Stats,
) -> Result<Response<ReplyBody>, ResetConnection> {
    stats.record(parts.uri.path());
    stats.embeddings_requests.fetch_add(1, Ordering::Relaxed);
    let body = match read_body(body).await {
        Ok((body, _trailers)) => body,
        Err((status, rejection)) => {
            stats.record_embeddings_body(None);
            return Ok(rejection_response(None, status, &rejection));
        }
    };
    let request = parse_embeddings_request(&body);
    stats.record_embeddings_body(request.as_ref().ok().map(|request| request.inputs.len()));
    let route = match route {
        Ok(route) => route,
        Err(rejection) => {
            return Ok(rejection_response(
                None,
                StatusCode::BAD_REQUEST,
                &rejection,
            ));
        }
    };
    // The faults that ignore the body come first, so they fire whatever the filter sent.
    let authorized = parts
        .headers
        .get("authorization")
        .is_some_and(|v| v.as_bytes() == b"Bearer demo-key");
    match route {
        EmbeddingsRoute::Auth if !authorized => {
            return Ok(json_response(
                StatusCode::UNAUTHORIZED,
                &embeddings_status_error(StatusCode::UNAUTHORIZED),
            ));
        }
        EmbeddingsRoute::Reset => return Err(ResetConnection),
        EmbeddingsRoute::Status(status) => {
            return Ok(json_response(status, &embeddings_status_error(status)));
        }
        EmbeddingsRoute::Garbage => {
            return Ok(plain_response(
                StatusCode::OK,
                "text/html",
                Bytes::from_static(GARBAGE_BODY),
            ));
        }
        EmbeddingsRoute::Ok
        | EmbeddingsRoute::Auth
        | EmbeddingsRoute::Slow(_)
        | EmbeddingsRoute::PerInput(_)
        | EmbeddingsRoute::WrongDims
        | EmbeddingsRoute::WrongCount => {}
    }
    let request = match request {
        Ok(request) => request,
        Err(rejection) => {
            return Ok(rejection_response(
                None,
                StatusCode::BAD_REQUEST,
                &rejection,
            ));
        }
    };
    let answer = match route {
        EmbeddingsRoute::Slow(delay) => {
            tokio::time::sleep(delay).await;
            embeddings_answer(&request, None, false)
        }
        EmbeddingsRoute::PerInput(delay) => {
            let inputs = u32::try_from(request.inputs.len()).unwrap_or(u32::MAX);
            tokio::time::sleep(delay.saturating_mul(inputs)).await;
            embeddings_answer(&request, None, false)
        }
        EmbeddingsRoute::WrongDims => embeddings_answer(&request, Some(WRONG_DIMENSIONS), false),
        EmbeddingsRoute::WrongCount => embeddings_answer(&request, None, true),
        _ => embeddings_answer(&request, None, false),
    };
    Ok(json_response(StatusCode::OK, &answer))
}

// ---------------------------------------------------------------------------------------------
// Dialects: which API a path is, and what a request declares as tools. Pure, so unit-tested.
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dialect {
    OpenAiChat,
    OpenAiResponses,
    Anthropic,
    Gemini,
    Bedrock,
}

impl Dialect {
    const fn name(self) -> &'static str {
        match self {
            Self::OpenAiChat => "openai_chat",
            Self::OpenAiResponses => "openai_responses",
            Self::Anthropic => "anthropic",
            Self::Gemini => "gemini",
            Self::Bedrock => "bedrock",
        }
    }
}

/// What the request path says: the dialect, whether the path itself asks for a stream (Gemini
/// and Bedrock put that in the path, the others in the body) and the model, if the path names it.
#[derive(Debug, PartialEq, Eq)]
struct Endpoint {
    dialect: Dialect,
    streaming_path: bool,
    path_model: Option<String>,
}

impl Endpoint {
    /// `path` must not include the query string.
    fn detect(path: &str) -> Option<Self> {
        if let Some((model, streaming_path)) = gemini_method(path) {
            return Some(Self {
                dialect: Dialect::Gemini,
                streaming_path,
                path_model: Some(model.to_owned()),
            });
        }
        if let Some((model, streaming_path)) = bedrock_action(path) {
            return Some(Self {
                dialect: Dialect::Bedrock,
                streaming_path,
                path_model: Some(model.to_owned()),
            });
        }
        // Suffixes, so Azure's `/openai/deployments/{d}/chat/completions` and gateway prefixes match.
        let dialect = if path.ends_with("/chat/completions") {
            Dialect::OpenAiChat
        } else if path.ends_with("/responses") {
            Dialect::OpenAiResponses
        } else if path.ends_with("/messages") {
            Dialect::Anthropic
        } else {
            return None;
        };
        Some(Self {
            dialect,
            streaming_path: false,
            path_model: None,
        })
    }
}

/// `.../models/{model}:generateContent` or `:streamGenerateContent` (Gemini API and Vertex AI):
/// the model and whether it streams.
fn gemini_method(path: &str) -> Option<(&str, bool)> {
    let last_segment = path.rsplit('/').next()?;
    let (model, method) = last_segment.rsplit_once(':')?;
    match method {
        "generateContent" => Some((model, false)),
        "streamGenerateContent" => Some((model, true)),
        _ => None,
    }
}

/// `/model/{modelId}/converse` or `/converse-stream`: the model id (still URL-encoded) and
/// whether it streams. An unencoded ARN id contains `/`, so the id is everything in between.
fn bedrock_action(path: &str) -> Option<(&str, bool)> {
    let (prefix, action) = path.rsplit_once('/')?;
    let streaming = match action {
        "converse" => false,
        "converse-stream" => true,
        _ => return None,
    };
    let (_, model) = prefix.split_once("/model/")?;
    (!model.is_empty()).then_some((model, streaming))
}

/// Why a request is refused: a message, and for OpenAI-style errors the offending parameter
/// and an error code.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Rejection {
    message: String,
    param: Option<String>,
    code: Option<&'static str>,
}

impl Rejection {
    fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            param: None,
            code: None,
        }
    }

    fn at(mut self, path: &JsonPath<'_>) -> Self {
        self.param = Some(path.to_string());
        self
    }

    fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    fn missing(path: &JsonPath<'_>) -> Self {
        Self::new(format!("Missing required parameter: '{path}'.")).at(path)
    }

    fn wrong_type(path: &JsonPath<'_>, expected: &str, found: &RawValue) -> Self {
        let found = json_kind(found);
        Self::new(format!(
            "Invalid type for '{path}': expected {expected}, but got {found} instead."
        ))
        .at(path)
    }
}

/// Where a value sits in the request, such as `tools[3].function.name`. Built from links on the
/// stack and rendered only into an error message, so a valid request pays nothing for it.
#[derive(Clone, Copy, Debug)]
enum JsonPath<'p> {
    Root(&'static str),
    Member(&'p JsonPath<'p>, &'p str),
    Index(&'p JsonPath<'p>, usize),
}

impl<'p> JsonPath<'p> {
    fn member(&'p self, key: &'p str) -> Self {
        Self::Member(self, key)
    }

    fn index(&'p self, index: usize) -> Self {
        Self::Index(self, index)
    }
}

impl fmt::Display for JsonPath<'_> {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Root(name) => formatter.write_str(name),
            Self::Member(parent, key) => write!(formatter, "{parent}.{key}"),
            Self::Index(parent, index) => write!(formatter, "{parent}[{index}]"),
        }
    }
}

/// What the demo reads from a valid request.
#[derive(Debug, PartialEq, Eq)]
struct Inspection {
    /// Tool names in the order received; tools without a name are reported by their type.
    tools: Vec<String>,
    stream: bool,
    model: Option<String>,
    /// OpenAI Chat's `stream_options.include_usage`.
    include_usage: bool,
}

fn inspect_request(endpoint: &Endpoint, body: &[u8]) -> Result<Inspection, Rejection> {
    let request = parse_body(body)?;
    let dialect = endpoint.dialect;
    let catalog = match dialect {
        Dialect::OpenAiChat => openai_tools(&request, OpenAiApi::Chat)?,
        Dialect::OpenAiResponses => openai_tools(&request, OpenAiApi::Responses)?,
        Dialect::Anthropic => anthropic_tools(&request)?,
        Dialect::Gemini => gemini_tools(&request)?,
        Dialect::Bedrock => bedrock_tools(&request)?,
    };
    // Gemini and Bedrock have no `stream` member; their path says it.
    let body_streams = matches!(
        dialect,
        Dialect::OpenAiChat | Dialect::OpenAiResponses | Dialect::Anthropic
    ) && is_true(request.get("stream"));
    let include_usage = dialect == Dialect::OpenAiChat
        && request
            .get("stream_options")
            .and_then(|raw| serde_json::from_str::<RawObject<'_>>(raw.get()).ok())
            .is_some_and(|options| is_true(options.get("include_usage")));
    Ok(Inspection {
        tools: catalog.names.into_iter().map(Cow::into_owned).collect(),
        stream: endpoint.streaming_path || body_streams,
        model: request
            .get("model")
            .and_then(string_value)
            .map(Cow::into_owned),
        include_usage,
    })
}

fn parse_body(body: &[u8]) -> Result<RawObject<'_>, Rejection> {
    serde_json::from_slice(body).map_err(|err| match err.classify() {
        // Well-formed JSON of the wrong type: the only type error a `RawObject` can raise.
        Category::Data => Rejection::new("The request body must be a JSON object."),
        Category::Io | Category::Syntax | Category::Eof => Rejection::new(format!(
            "We could not parse the JSON body of your request: {err}."
        )),
    })
}

/// The tools of a request, in order, and the names a tool choice may refer to. Names borrow
/// from the body where they can: a large request has thousands.
#[derive(Debug, Default)]
struct Catalog<'a> {
    names: Vec<Cow<'a, str>>,
    /// Tools that have a name of their own (functions, custom tools); names must be unique.
    named: HashSet<Cow<'a, str>>,
}

impl<'a> Catalog<'a> {
    fn add_named(&mut self, name: Cow<'a, str>, path: &JsonPath<'_>) -> Result<(), Rejection> {
        if !self.named.insert(name.clone()) {
            let message = format!(
                "Invalid '{path}': duplicate tool name '{name}'. Tool names must be unique."
            );
            return Err(Rejection::new(message).at(path));
        }
        self.names.push(name);
        Ok(())
    }

    /// A built-in tool (web search, code execution, a cache point...), known by its type.
    fn add_builtin(&mut self, kind: Cow<'a, str>) {
        self.names.push(kind);
    }

    /// Checks that a tool choice names a tool of this request.
    fn require(&self, name: &str, path: &JsonPath<'_>) -> Result<(), Rejection> {
        if self.named.contains(name) {
            return Ok(());
        }
        let message = format!(
            "Invalid value for '{path}': no tool named '{name}' is in the request's tools."
        );
        Err(Rejection::new(message).at(path))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EmptyTools {
    Allowed,
    Rejected,
}

/// The entries of a tools array; `None` when the member is absent or null.
fn tool_entries<'a>(
    raw: Option<&'a RawValue>,
    path: &JsonPath<'_>,
    empty: EmptyTools,
) -> Result<Option<Vec<RawObject<'a>>>, Rejection> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    let entries = parse_object_array(raw, path)?;
    if entries.is_empty() && empty == EmptyTools::Rejected {
        let message = format!(
            "Invalid '{path}': empty array. Expected an array with minimum length 1, but got an empty array instead."
        );
        return Err(Rejection::new(message).at(path).with_code("empty_array"));
    }
    Ok(Some(entries))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OpenAiApi {
    Chat,
    Responses,
}

impl OpenAiApi {
    /// The name of a `function` or `custom` tool, or of a tool choice naming one. Chat nests it
    /// under the kind (`{"type":"function","function":{"name":..}}`); Responses puts it at the top.
    fn tool_name<'a>(
        self,
        object: &RawObject<'a>,
        kind: &str,
        path: &JsonPath<'_>,
    ) -> Result<Cow<'a, str>, Rejection> {
        match self {
            Self::Chat => {
                let inner_path = path.member(kind);
                let inner = parse_object(required(object, kind, path)?, &inner_path)?;
                required_string(&inner, "name", &inner_path)
            }
            Self::Responses => required_string(object, "name", path),
        }
    }
}

/// Function and custom tools have names of their own; the others (`web_search`, `file_search`,
/// `mcp`...) are reported by their type.
fn is_named_kind(kind: &str) -> bool {
    kind == "function" || kind == "custom"
}

fn openai_tools<'a>(request: &RawObject<'a>, api: OpenAiApi) -> Result<Catalog<'a>, Rejection> {
    // Chat Completions rejects `"tools": []`; Responses accepts it (its own default).
    let empty = match api {
        OpenAiApi::Chat => EmptyTools::Rejected,
        OpenAiApi::Responses => EmptyTools::Allowed,
    };
    let tools_path = JsonPath::Root("tools");
    let entries = tool_entries(request.get("tools"), &tools_path, empty)?;
    let mut catalog = Catalog::default();
    for (index, tool) in entries.iter().flatten().enumerate() {
        let path = tools_path.index(index);
        let kind = required_string(tool, "type", &path)?;
        if is_named_kind(&kind) {
            catalog.add_named(api.tool_name(tool, &kind, &path)?, &path)?;
        } else {
            catalog.add_builtin(kind);
        }
    }
    if let Some(choice) = request.get("tool_choice") {
        let choice_path = JsonPath::Root("tool_choice");
        if entries.is_none() && api == OpenAiApi::Chat {
            let message = "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.";
            return Err(Rejection::new(message).at(&choice_path));
        }
        check_openai_tool_choice(choice, &choice_path, &catalog, api)?;
    }
    Ok(catalog)
}

fn check_openai_tool_choice(
    raw: &RawValue,
    path: &JsonPath<'_>,
    catalog: &Catalog<'_>,
    api: OpenAiApi,
) -> Result<(), Rejection> {
    if let Some(mode) = string_value(raw) {
        return match &*mode {
            "none" | "auto" | "required" => Ok(()),
            _ => {
                let message = format!(
                    "Invalid value: '{mode}'. Supported values are: 'none', 'auto', and 'required'."
                );
                Err(Rejection::new(message).at(path))
            }
        };
    }
    let choice = parse_object(raw, path)?;
    let kind = required_string(&choice, "type", path)?;
    if is_named_kind(&kind) {
        return catalog.require(&api.tool_name(&choice, &kind, path)?, path);
    }
    if kind == "allowed_tools" {
        // Chat nests the list as `allowed_tools.tools`; Responses puts `tools` in the choice.
        let (holder, holder_path) = match api {
            OpenAiApi::Chat => {
                let holder_path = path.member("allowed_tools");
                let holder = parse_object(required(&choice, "allowed_tools", path)?, &holder_path)?;
                (holder, holder_path)
            }
            OpenAiApi::Responses => (choice, *path),
        };
        let list_path = holder_path.member("tools");
        let allowed = parse_object_array(required(&holder, "tools", &holder_path)?, &list_path)?;
        for (index, tool) in allowed.iter().enumerate() {
            let entry_path = list_path.index(index);
            let kind = required_string(tool, "type", &entry_path)?;
            if is_named_kind(&kind) {
                catalog.require(&api.tool_name(tool, &kind, &entry_path)?, &entry_path)?;
            }
        }
    }
    // Choices of a hosted tool are not checked: hosted types have dated aliases
    // (`web_search_preview_2025_03_11`), so a type mismatch would not prove the choice invalid.
    Ok(())
}

fn anthropic_tools<'a>(request: &RawObject<'a>) -> Result<Catalog<'a>, Rejection> {
    let tools_path = JsonPath::Root("tools");
    let entries = tool_entries(request.get("tools"), &tools_path, EmptyTools::Rejected)?;
    let mut catalog = Catalog::default();
    // Custom and server tools (web_search_20250305, bash...) all carry a `name`.
    for (index, tool) in entries.iter().flatten().enumerate() {
        let path = tools_path.index(index);
        catalog.add_named(required_string(tool, "name", &path)?, &path)?;
    }
    if let Some(raw) = request.get("tool_choice") {
        let choice_path = JsonPath::Root("tool_choice");
        let choice = parse_object(raw, &choice_path)?;
        if required_string(&choice, "type", &choice_path)? == "tool" {
            let name = required_string(&choice, "name", &choice_path)?;
            catalog.require(&name, &choice_path.member("name"))?;
        }
    }
    Ok(catalog)
}

fn gemini_tools<'a>(request: &RawObject<'a>) -> Result<Catalog<'a>, Rejection> {
    let tools_path = JsonPath::Root("tools");
    let entries = tool_entries(request.get("tools"), &tools_path, EmptyTools::Allowed)?;
    let mut catalog = Catalog::default();
    for (index, tool) in entries.iter().flatten().enumerate() {
        let path = tools_path.index(index);
        // A Tool holds function declarations and/or built-ins such as `{"googleSearch": {}}`;
        // a built-in is reported by its key.
        for (key, value) in tool.present_members() {
            if key != "functionDeclarations" && key != "function_declarations" {
                catalog.add_builtin(key.clone());
                continue;
            }
            let list_path = path.member(key);
            for (index, declaration) in parse_object_array(value, &list_path)?.iter().enumerate() {
                let declaration_path = list_path.index(index);
                let name = required_string(declaration, "name", &declaration_path)?;
                catalog.add_named(name, &declaration_path)?;
            }
        }
    }
    let allowed_path = JsonPath::Root("toolConfig.functionCallingConfig.allowedFunctionNames");
    for name in gemini_allowed_function_names(request, &allowed_path)? {
        catalog.require(&name, &allowed_path)?;
    }
    Ok(catalog)
}

/// `toolConfig.functionCallingConfig.allowedFunctionNames`, in either JSON spelling.
fn gemini_allowed_function_names(
    request: &RawObject<'_>,
    allowed_path: &JsonPath<'_>,
) -> Result<Vec<String>, Rejection> {
    let Some(raw) = request.get_either("toolConfig", "tool_config") else {
        return Ok(Vec::new());
    };
    let config_path = JsonPath::Root("toolConfig");
    let config = parse_object(raw, &config_path)?;
    let Some(raw) = config.get_either("functionCallingConfig", "function_calling_config") else {
        return Ok(Vec::new());
    };
    let calling = parse_object(raw, &config_path.member("functionCallingConfig"))?;
    let Some(raw) = calling.get_either("allowedFunctionNames", "allowed_function_names") else {
        return Ok(Vec::new());
    };
    serde_json::from_str(raw.get())
        .map_err(|_| Rejection::wrong_type(allowed_path, "an array of strings", raw))
}

fn bedrock_tools<'a>(request: &RawObject<'a>) -> Result<Catalog<'a>, Rejection> {
    let mut catalog = Catalog::default();
    let Some(raw) = request.get("toolConfig") else {
        return Ok(catalog);
    };
    let config_path = JsonPath::Root("toolConfig");
    let config = parse_object(raw, &config_path)?;
    let tools_path = config_path.member("tools");
    // Bedrock requires a non-empty `tools` whenever `toolConfig` is present.
    let Some(tools) = config.get("tools") else {
        let message = "1 validation error detected: Value null at 'toolConfig.tools' failed to satisfy constraint: Member must not be null";
        return Err(Rejection::new(message).at(&tools_path));
    };
    let entries = tool_entries(Some(tools), &tools_path, EmptyTools::Rejected)?;
    for (index, tool) in entries.iter().flatten().enumerate() {
        let path = tools_path.index(index);
        // A Tool is a union: `toolSpec`, or another member such as `cachePoint`, reported by its key.
        for (key, value) in tool.present_members() {
            if key == "toolSpec" {
                let spec_path = path.member("toolSpec");
                let spec = parse_object(value, &spec_path)?;
                catalog.add_named(required_string(&spec, "name", &spec_path)?, &spec_path)?;
            } else {
                catalog.add_builtin(key.clone());
            }
        }
    }
    if let Some(raw) = config.get("toolChoice") {
        let choice_path = config_path.member("toolChoice");
        let choice = parse_object(raw, &choice_path)?;
        if let Some(raw) = choice.get("tool") {
            let tool_path = choice_path.member("tool");
            let tool = parse_object(raw, &tool_path)?;
            let name = required_string(&tool, "name", &tool_path)?;
            catalog.require(&name, &tool_path.member("name"))?;
        }
    }
    Ok(catalog)
}

// ---------------------------------------------------------------------------------------------
// Lazy JSON access
// ---------------------------------------------------------------------------------------------

/// A JSON object whose member values stay unparsed text, in document order. Only the members the
/// demo needs get parsed, so large `messages` arrays and tool schemas are scanned, never built
/// into trees. Keys borrow from the body unless they contain escapes.
struct RawObject<'a> {
    members: Vec<(Cow<'a, str>, &'a RawValue)>,
}

impl<'a> RawObject<'a> {
    /// A member's value; `None` when absent or `null` (the providers treat both alike). With
    /// duplicate keys the last wins, as in serde_json.
    fn get(&self, key: &str) -> Option<&'a RawValue> {
        self.members
            .iter()
            .rev()
            .find(|(name, _)| name == key)
            .map(|(_, value)| *value)
            .filter(|value| value.get() != "null")
    }

    /// Gemini's JSON accepts both the camelCase and the proto snake_case member names.
    fn get_either(&self, camel_case: &str, snake_case: &str) -> Option<&'a RawValue> {
        self.get(camel_case).or_else(|| self.get(snake_case))
    }

    /// The members whose value is not `null`, in document order.
    fn present_members(&self) -> impl Iterator<Item = &(Cow<'a, str>, &'a RawValue)> {
        self.members
            .iter()
            .filter(|(_, value)| value.get() != "null")
    }
}

impl<'de> Deserialize<'de> for RawObject<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct RawObjectVisitor;

        impl<'de> Visitor<'de> for RawObjectVisitor {
            type Value = RawObject<'de>;

            fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                formatter.write_str("a JSON object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut members = Vec::with_capacity(map.size_hint().unwrap_or(0));
                while let Some((MemberKey(key), value)) =
                    map.next_entry::<MemberKey<'de>, &'de RawValue>()?
                {
                    members.push((key, value));
                }
                Ok(RawObject { members })
            }
        }

        deserializer.deserialize_map(RawObjectVisitor)
    }
}

/// An object key, borrowed from the input when it has no escapes. (serde's own `Cow<str>`
/// always copies.)
struct MemberKey<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for MemberKey<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MemberKeyVisitor;

        impl<'de> Visitor<'de> for MemberKeyVisitor {
            type Value = MemberKey<'de>;

            fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                formatter.write_str("an object key")
            }

            fn visit_borrowed_str<E>(self, key: &'de str) -> Result<Self::Value, E> {
                Ok(MemberKey(Cow::Borrowed(key)))
            }

            fn visit_str<E>(self, key: &str) -> Result<Self::Value, E> {
                Ok(MemberKey(Cow::Owned(key.to_owned())))
            }

            fn visit_string<E>(self, key: String) -> Result<Self::Value, E> {
                Ok(MemberKey(Cow::Owned(key)))
            }
        }

        deserializer.deserialize_str(MemberKeyVisitor)
    }
}

fn parse_object<'a>(raw: &'a RawValue, path: &JsonPath<'_>) -> Result<RawObject<'a>, Rejection> {
    serde_json::from_str(raw.get()).map_err(|_| Rejection::wrong_type(path, "an object", raw))
}

/// An array of objects, parsed in one pass: tool arrays are most of a large request.
fn parse_object_array<'a>(
    raw: &'a RawValue,
    path: &JsonPath<'_>,
) -> Result<Vec<RawObject<'a>>, Rejection> {
    serde_json::from_str(raw.get()).or_else(|_| {
        // Not the expected shape: go again entry by entry, only to name the culprit.
        let entries: Vec<&RawValue> = serde_json::from_str(raw.get())
            .map_err(|_| Rejection::wrong_type(path, "an array", raw))?;
        for (index, entry) in entries.into_iter().enumerate() {
            parse_object(entry, &path.index(index))?;
        }
        Err(Rejection::wrong_type(path, "an array of objects", raw))
    })
}

fn required<'a>(
    object: &RawObject<'a>,
    key: &str,
    path: &JsonPath<'_>,
) -> Result<&'a RawValue, Rejection> {
    object
        .get(key)
        .ok_or_else(|| Rejection::missing(&path.member(key)))
}

fn required_string<'a>(
    object: &RawObject<'a>,
    key: &str,
    path: &JsonPath<'_>,
) -> Result<Cow<'a, str>, Rejection> {
    let raw = required(object, key, path)?;
    string_value(raw).ok_or_else(|| Rejection::wrong_type(&path.member(key), "a string", raw))
}

/// A JSON string's value, borrowed from the input unless it contains escapes; `None` for
/// anything but a string.
fn string_value(raw: &RawValue) -> Option<Cow<'_, str>> {
    let text = raw.get();
    match serde_json::from_str::<&str>(text) {
        Ok(borrowed) => Some(Cow::Borrowed(borrowed)),
        Err(_) => serde_json::from_str::<String>(text).ok().map(Cow::Owned),
    }
}

/// Whether a member is the literal `true` (a `RawValue` holds the value's text, trimmed).
fn is_true(raw: Option<&RawValue>) -> bool {
    raw.is_some_and(|raw| raw.get() == "true")
}

/// The JSON type of a raw value, named as in error messages; its first byte decides.
fn json_kind(raw: &RawValue) -> &'static str {
    match raw.get().as_bytes().first() {
        Some(b'{') => "an object",
        Some(b'[') => "an array",
        Some(b'"') => "a string",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        _ => "a number",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inspect(path: &str, body: &str) -> Result<Inspection, Rejection> {
        let endpoint = Endpoint::detect(path)
            .ok_or_else(|| Rejection::new(format!("no dialect for {path}")))?;
        inspect_request(&endpoint, body.as_bytes())
    }

    fn tools(path: &str, body: &str) -> Result<Vec<String>, Rejection> {
        inspect(path, body).map(|inspection| inspection.tools)
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|name| (*name).to_owned()).collect()
    }

    /// The rejection's message, or a note that the request was accepted.
    fn rejection(path: &str, body: &str) -> String {
        match inspect(path, body) {
            Ok(inspection) => format!("accepted with tools {:?}", inspection.tools),
            Err(rejection) => rejection.message,
        }
    }

    const CHAT: &str = "/v1/chat/completions";
    const RESPONSES: &str = "/v1/responses";
    const MESSAGES: &str = "/v1/messages";
    const GEMINI: &str = "/v1beta/models/gemini-2.0-flash:generateContent";
    const BEDROCK: &str = "/model/anthropic.claude-3-5-sonnet-20240620-v1:0/converse";

    #[test]
    fn detects_dialect_from_path() {
        let cases = [
            ("/v1/chat/completions", Some(Dialect::OpenAiChat)),
            (
                "/openai/deployments/gpt-4o/chat/completions",
                Some(Dialect::OpenAiChat),
            ),
            ("/v1/responses", Some(Dialect::OpenAiResponses)),
            ("/openai/responses", Some(Dialect::OpenAiResponses)),
            ("/v1/messages", Some(Dialect::Anthropic)),
            (
                "/v1beta/models/gemini-2.0-flash:generateContent",
                Some(Dialect::Gemini),
            ),
            (
                "/v1/projects/p/locations/us-central1/publishers/google/models/gemini-1.5-pro:streamGenerateContent",
                Some(Dialect::Gemini),
            ),
            (
                "/model/amazon.nova-pro-v1:0/converse",
                Some(Dialect::Bedrock),
            ),
            (
                "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Ainference-profile%2Fus.x/converse-stream",
                Some(Dialect::Bedrock),
            ),
            (
                "/model/arn:aws:bedrock:us-east-1:1:inference-profile/us.x/converse",
                Some(Dialect::Bedrock),
            ),
            ("/v1/completions", None),
            ("/v1/messages/count_tokens", None),
            ("/v1beta/models/gemini-2.0-flash:countTokens", None),
            ("/model//converse", None),
            ("/model/x/invoke", None),
            ("/converse", None),
            ("/", None),
            ("", None),
        ];
        for (path, expected) in cases {
            assert_eq!(
                Endpoint::detect(path).map(|endpoint| endpoint.dialect),
                expected,
                "{path}"
            );
        }
    }

    #[test]
    fn streaming_paths_and_models() {
        let endpoint = |dialect, streaming_path, model: Option<&str>| {
            Some(Endpoint {
                dialect,
                streaming_path,
                path_model: model.map(str::to_owned),
            })
        };
        assert_eq!(
            Endpoint::detect("/v1beta/models/gemini-2.0-flash:streamGenerateContent"),
            endpoint(Dialect::Gemini, true, Some("gemini-2.0-flash"))
        );
        assert_eq!(
            Endpoint::detect(GEMINI),
            endpoint(Dialect::Gemini, false, Some("gemini-2.0-flash"))
        );
        assert_eq!(
            Endpoint::detect("/model/amazon.nova-pro-v1:0/converse-stream"),
            endpoint(Dialect::Bedrock, true, Some("amazon.nova-pro-v1:0"))
        );
        assert_eq!(
            Endpoint::detect(BEDROCK),
            endpoint(
                Dialect::Bedrock,
                false,
                Some("anthropic.claude-3-5-sonnet-20240620-v1:0")
            )
        );
        assert_eq!(
            Endpoint::detect(CHAT),
            endpoint(Dialect::OpenAiChat, false, None)
        );
    }

    #[test]
    fn stream_flag_comes_from_body_or_path() {
        let streams = |path, body| inspect(path, body).map(|inspection| inspection.stream);
        assert_eq!(streams(CHAT, r#"{"stream": true}"#), Ok(true));
        assert_eq!(streams(CHAT, r#"{"stream": false}"#), Ok(false));
        assert_eq!(streams(RESPONSES, r#"{"stream":true}"#), Ok(true));
        assert_eq!(streams(MESSAGES, r#"{"stream": true}"#), Ok(true));
        assert_eq!(streams(MESSAGES, "{}"), Ok(false));
        // Gemini and Bedrock have no `stream` member: only the path counts.
        assert_eq!(streams(GEMINI, r#"{"stream": true}"#), Ok(false));
        assert_eq!(
            streams("/v1beta/models/g:streamGenerateContent", "{}"),
            Ok(true)
        );
        assert_eq!(streams("/model/m/converse-stream", "{}"), Ok(true));
        assert_eq!(
            inspect(
                CHAT,
                r#"{"stream": true, "stream_options": {"include_usage": true}}"#
            )
            .map(|inspection| inspection.include_usage),
            Ok(true)
        );
    }

    #[test]
    fn rejects_bodies_that_are_not_json_objects() {
        for path in [CHAT, RESPONSES, MESSAGES, GEMINI, BEDROCK] {
            assert!(
                rejection(path, "{\"model\": ").starts_with("We could not parse"),
                "{path}"
            );
            assert!(
                rejection(path, "").starts_with("We could not parse"),
                "{path}"
            );
            assert!(
                rejection(path, "{} trailing").starts_with("We could not parse"),
                "{path}"
            );
            assert_eq!(
                rejection(path, "[1, 2]"),
                "The request body must be a JSON object.",
                "{path}"
            );
            assert_eq!(
                rejection(path, "\"text\""),
                "The request body must be a JSON object.",
                "{path}"
            );
        }
    }

    #[test]
    fn openai_chat_tool_names() {
        let body = r#"{
            "model": "gpt-4o",
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [
                {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
                {"type": "custom", "custom": {"name": "run_sql"}},
                {"type": "function", "function": {"name": "send_\u0065mail"}},
                {"type": "web_search"}
            ],
            "tool_choice": {"type": "function", "function": {"name": "send_email"}}
        }"#;
        assert_eq!(
            tools(CHAT, body),
            Ok(names(&[
                "get_weather",
                "run_sql",
                "send_email",
                "web_search"
            ]))
        );
        assert_eq!(
            inspect(CHAT, body).map(|inspection| inspection.model),
            Ok(Some("gpt-4o".to_owned()))
        );
        assert_eq!(
            tools(CHAT, r#"{"messages": [], "tools": null}"#),
            Ok(vec![])
        );
    }

    #[test]
    fn reads_keys_and_names_with_escapes() {
        // Escaped keys and names cannot be borrowed from the body; they must still match.
        let body = r#"{"tool\u0073": [{"type": "function", "function": {"n\u0061me": "caf\u00e9"}}],
            "tool_choice": {"type": "function", "function": {"name": "café"}}}"#;
        assert_eq!(tools(CHAT, body), Ok(names(&["café"])));
    }

    #[test]
    fn json_paths_render_like_provider_params() {
        let tools = JsonPath::Root("tools");
        let entry = tools.index(3);
        let function = entry.member("function");
        assert_eq!(
            function.member("name").to_string(),
            "tools[3].function.name"
        );
    }

    #[test]
    fn openai_chat_rejections() {
        let empty = inspect(CHAT, r#"{"tools": []}"#);
        assert_eq!(
            empty.as_ref().err().and_then(|rejection| rejection.code),
            Some("empty_array")
        );
        assert_eq!(
            empty.err().and_then(|rejection| rejection.param),
            Some("tools".to_owned())
        );

        assert!(
            rejection(CHAT, r#"{"tools": {"type": "function"}}"#).contains("expected an array")
        );
        assert!(rejection(CHAT, r#"{"tools": ["get_weather"]}"#).contains("'tools[0]'"));
        assert!(
            rejection(CHAT, r#"{"tools": [{"function": {"name": "a"}}]}"#)
                .contains("'tools[0].type'")
        );
        assert!(
            rejection(CHAT, r#"{"tools": [{"type": "function", "function": {}}]}"#)
                .contains("'tools[0].function.name'")
        );

        let duplicate = r#"{"tools": [
            {"type": "function", "function": {"name": "a"}},
            {"type": "function", "function": {"name": "a"}}
        ]}"#;
        assert!(rejection(CHAT, duplicate).contains("duplicate tool name 'a'"));

        let unknown_choice = r#"{"tools": [{"type": "function", "function": {"name": "a"}}],
            "tool_choice": {"type": "function", "function": {"name": "b"}}}"#;
        assert!(rejection(CHAT, unknown_choice).contains("no tool named 'b'"));

        let choice_without_tools = r#"{"tool_choice": "auto"}"#;
        assert!(
            rejection(CHAT, choice_without_tools)
                .contains("only allowed when 'tools' are specified")
        );

        let bad_mode = r#"{"tools": [{"type": "function", "function": {"name": "a"}}], "tool_choice": "always"}"#;
        assert!(rejection(CHAT, bad_mode).contains("Supported values"));
    }

    #[test]
    fn openai_chat_tool_choice_modes_and_allowed_tools() {
        let tools_a_b = r#"[{"type": "function", "function": {"name": "a"}}, {"type": "function", "function": {"name": "b"}}]"#;
        for choice in [r#""auto""#, r#""none""#, r#""required""#, "null"] {
            let body = format!(r#"{{"tools": {tools_a_b}, "tool_choice": {choice}}}"#);
            assert_eq!(tools(CHAT, &body), Ok(names(&["a", "b"])), "{choice}");
        }
        let allowed = |listed: &str| {
            format!(
                r#"{{"tools": {tools_a_b}, "tool_choice": {{"type": "allowed_tools", "allowed_tools": {{"mode": "auto", "tools": [{{"type": "function", "function": {{"name": "{listed}"}}}}]}}}}}}"#
            )
        };
        assert_eq!(tools(CHAT, &allowed("b")), Ok(names(&["a", "b"])));
        assert!(rejection(CHAT, &allowed("c")).contains("no tool named 'c'"));
    }

    #[test]
    fn openai_responses_tools() {
        let body = r#"{
            "model": "gpt-4.1",
            "input": "hi",
            "tools": [
                {"type": "function", "name": "get_weather", "parameters": {}},
                {"type": "web_search"},
                {"type": "mcp", "server_label": "docs", "server_url": "https://example.invalid"},
                {"type": "file_search", "vector_store_ids": ["vs_1"]}
            ],
            "tool_choice": {"type": "function", "name": "get_weather"}
        }"#;
        assert_eq!(
            tools(RESPONSES, body),
            Ok(names(&["get_weather", "web_search", "mcp", "file_search"]))
        );
        // Responses accepts an empty tools array.
        assert_eq!(
            tools(RESPONSES, r#"{"input": "hi", "tools": []}"#),
            Ok(vec![])
        );
        // A hosted-tool choice is not checked.
        assert_eq!(
            tools(
                RESPONSES,
                r#"{"tools": [], "tool_choice": {"type": "web_search_preview"}}"#
            ),
            Ok(vec![])
        );

        let unknown = r#"{"tools": [{"type": "function", "name": "a"}], "tool_choice": {"type": "function", "name": "b"}}"#;
        assert!(rejection(RESPONSES, unknown).contains("no tool named 'b'"));
        let unnamed = r#"{"tools": [{"type": "function", "parameters": {}}]}"#;
        assert!(rejection(RESPONSES, unnamed).contains("'tools[0].name'"));
        let duplicate =
            r#"{"tools": [{"type": "function", "name": "a"}, {"type": "function", "name": "a"}]}"#;
        assert!(rejection(RESPONSES, duplicate).contains("duplicate tool name 'a'"));
        let allowed = r#"{"tools": [{"type": "function", "name": "a"}],
            "tool_choice": {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "z"}]}}"#;
        assert!(rejection(RESPONSES, allowed).contains("no tool named 'z'"));
    }

    #[test]
    fn anthropic_tools_and_rejections() {
        let body = r#"{
            "model": "claude-sonnet-4-5",
            "max_tokens": 100,
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [
                {"name": "get_weather", "description": "d", "input_schema": {"type": "object"}},
                {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
            ],
            "tool_choice": {"type": "tool", "name": "web_search"}
        }"#;
        assert_eq!(
            tools(MESSAGES, body),
            Ok(names(&["get_weather", "web_search"]))
        );
        assert_eq!(
            tools(
                MESSAGES,
                r#"{"tools": [{"name": "a"}], "tool_choice": {"type": "any"}}"#
            ),
            Ok(names(&["a"]))
        );

        assert!(rejection(MESSAGES, r#"{"tools": []}"#).contains("empty array"));
        assert!(rejection(MESSAGES, r#"{"tools": "get_weather"}"#).contains("expected an array"));
        assert!(
            rejection(MESSAGES, r#"{"tools": [{"description": "x"}]}"#).contains("'tools[0].name'")
        );
        assert!(
            rejection(MESSAGES, r#"{"tools": [{"name": "a"}, {"name": "a"}]}"#)
                .contains("duplicate tool name 'a'")
        );
        let unknown = r#"{"tools": [{"name": "a"}], "tool_choice": {"type": "tool", "name": "b"}}"#;
        assert!(rejection(MESSAGES, unknown).contains("no tool named 'b'"));
    }

    #[test]
    fn gemini_tools_in_both_spellings() {
        let body = r#"{
            "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
            "tools": [
                {"functionDeclarations": [{"name": "get_weather"}, {"name": "send_email"}]},
                {"googleSearch": {}},
                {"function_declarations": [{"name": "run_sql"}]},
                {"codeExecution": {}, "functionDeclarations": [{"name": "plot"}]}
            ],
            "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["run_sql", "plot"]}}
        }"#;
        assert_eq!(
            tools(GEMINI, body),
            Ok(names(&[
                "get_weather",
                "send_email",
                "googleSearch",
                "run_sql",
                "codeExecution",
                "plot"
            ]))
        );
        assert_eq!(tools(GEMINI, r#"{"tools": []}"#), Ok(vec![]));

        let unknown = r#"{"tools": [{"functionDeclarations": [{"name": "a"}]}],
            "tool_config": {"function_calling_config": {"allowed_function_names": ["b"]}}}"#;
        assert!(rejection(GEMINI, unknown).contains("no tool named 'b'"));
        let duplicate = r#"{"tools": [{"functionDeclarations": [{"name": "a"}]}, {"functionDeclarations": [{"name": "a"}]}]}"#;
        assert!(rejection(GEMINI, duplicate).contains("duplicate tool name 'a'"));
        assert!(
            rejection(GEMINI, r#"{"tools": {"functionDeclarations": []}}"#)
                .contains("expected an array")
        );
        let unnamed = r#"{"tools": [{"functionDeclarations": [{"description": "x"}]}]}"#;
        assert!(rejection(GEMINI, unnamed).contains("'tools[0].functionDeclarations[0].name'"));
    }

    #[test]
    fn bedrock_tools_and_rejections() {
        let body = r#"{
            "messages": [{"role": "user", "content": [{"text": "hi"}]}],
            "toolConfig": {
                "tools": [
                    {"toolSpec": {"name": "get_weather", "inputSchema": {"json": {}}}},
                    {"cachePoint": {"type": "default"}},
                    {"toolSpec": {"name": "send_email", "inputSchema": {"json": {}}}}
                ],
                "toolChoice": {"tool": {"name": "send_email"}}
            }
        }"#;
        assert_eq!(
            tools(BEDROCK, body),
            Ok(names(&["get_weather", "cachePoint", "send_email"]))
        );
        assert_eq!(tools(BEDROCK, r#"{"messages": []}"#), Ok(vec![]));
        let auto = r#"{"toolConfig": {"tools": [{"toolSpec": {"name": "a"}}], "toolChoice": {"auto": {}}}}"#;
        assert_eq!(tools(BEDROCK, auto), Ok(names(&["a"])));

        assert!(rejection(BEDROCK, r#"{"toolConfig": {"tools": []}}"#).contains("empty array"));
        assert!(rejection(BEDROCK, r#"{"toolConfig": {}}"#).contains("Member must not be null"));
        let unknown = r#"{"toolConfig": {"tools": [{"toolSpec": {"name": "a"}}], "toolChoice": {"tool": {"name": "b"}}}}"#;
        assert!(rejection(BEDROCK, unknown).contains("no tool named 'b'"));
        let duplicate = r#"{"toolConfig": {"tools": [{"toolSpec": {"name": "a"}}, {"toolSpec": {"name": "a"}}]}}"#;
        assert!(rejection(BEDROCK, duplicate).contains("duplicate tool name 'a'"));
    }

    #[test]
    fn tools_header_escapes_and_truncates() {
        assert_eq!(
            tools_header_value(&names(&["a", "b_c", "d-e"])),
            ("a,b_c,d-e".to_owned(), false)
        );
        assert_eq!(
            tools_header_value(&names(&["a b", "x,y", "50%", "é"])),
            ("a%20b,x%2Cy,50%25,%C3%A9".to_owned(), false)
        );
        assert_eq!(tools_header_value(&[]), (String::new(), false));

        let many: Vec<String> = (0..5000)
            .map(|index| format!("tool_number_{index}"))
            .collect();
        let (list, truncated) = tools_header_value(&many);
        assert!(truncated);
        assert!(list.len() <= TOOLS_HEADER_LIMIT);
        assert!(list.split(',').all(|name| name.starts_with("tool_number_")));
    }

    #[test]
    fn summary_sentence_lists_tools() {
        assert_eq!(summary_sentence(&[]), "demo upstream received 0 tools");
        assert_eq!(
            summary_sentence(&names(&["a"])),
            "demo upstream received 1 tool: a"
        );
        assert_eq!(
            summary_sentence(&names(&["a", "b"])),
            "demo upstream received 2 tools: a, b"
        );
        let many: Vec<String> = (0..25).map(|index| format!("t{index}")).collect();
        let sentence = summary_sentence(&many);
        assert!(sentence.starts_with("demo upstream received 25 tools: t0, t1, "));
        assert!(sentence.ends_with("t19, ... (5 more)"));
    }

    #[test]
    fn parses_command_line() {
        let parse = |args: &[&str]| parse_args(args.iter().map(|arg| (*arg).to_owned()));
        let run = |listen: &str, verbose| {
            Ok(Command::Run(Options {
                listen: listen.to_owned(),
                verbose,
            }))
        };
        assert_eq!(parse(&[]), run(DEFAULT_LISTEN, false));
        assert_eq!(
            parse(&["--listen", "127.0.0.1:0", "--verbose"]),
            run("127.0.0.1:0", true)
        );
        assert_eq!(
            parse(&["--listen=[::1]:9000", "-v"]),
            run("[::1]:9000", true)
        );
        assert_eq!(parse(&["--help"]), Ok(Command::Help));
        assert!(parse(&["--listen"]).is_err());
        assert!(parse(&["--port", "1"]).is_err());
    }

    #[test]
    fn hashes_body_as_lowercase_hex() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    // -----------------------------------------------------------------------------------------
    // Embeddings stand-in
    // -----------------------------------------------------------------------------------------

    fn embeddings_request(body: &str) -> EmbeddingsRequest {
        match parse_embeddings_request(body.as_bytes()) {
            Ok(request) => request,
            Err(rejection) => panic!("{body}: {}", rejection.message),
        }
    }

    fn cosine(a: &[f64], b: &[f64]) -> f64 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    #[test]
    fn detects_embeddings_routes() {
        let detect = |path: &str, query: Option<&str>| EmbeddingsRoute::detect(path, query);
        assert_eq!(
            detect("/embeddings/ok", None),
            Some(Ok(EmbeddingsRoute::Ok))
        );
        assert_eq!(
            detect("/embeddings/slow", None),
            Some(Ok(EmbeddingsRoute::Slow(Duration::from_millis(3000))))
        );
        assert_eq!(
            detect("/embeddings/auth", None),
            Some(Ok(EmbeddingsRoute::Auth))
        );
        assert_eq!(
            detect("/embeddings/per-input", Some("ms=20")),
            Some(Ok(EmbeddingsRoute::PerInput(Duration::from_millis(20))))
        );
        assert_eq!(
            detect("/embeddings/slow", Some("x=1&ms=250")),
            Some(Ok(EmbeddingsRoute::Slow(Duration::from_millis(250))))
        );
        assert!(matches!(
            detect("/embeddings/slow", Some("ms=soon")),
            Some(Err(_))
        ));
        assert!(matches!(
            detect("/embeddings/slow", Some("ms=999999999")),
            Some(Err(_))
        ));
        assert_eq!(
            detect("/embeddings/status/503", None),
            Some(Ok(EmbeddingsRoute::Status(StatusCode::SERVICE_UNAVAILABLE)))
        );
        for bad in ["abc", "99", "600", ""] {
            let path = format!("/embeddings/status/{bad}");
            assert!(matches!(detect(&path, None), Some(Err(_))), "{path}");
        }
        assert_eq!(
            detect("/embeddings/garbage", None),
            Some(Ok(EmbeddingsRoute::Garbage))
        );
        assert_eq!(
            detect("/embeddings/wrong-dims", None),
            Some(Ok(EmbeddingsRoute::WrongDims))
        );
        assert_eq!(
            detect("/embeddings/wrong-count", None),
            Some(Ok(EmbeddingsRoute::WrongCount))
        );
        assert_eq!(
            detect("/embeddings/reset", None),
            Some(Ok(EmbeddingsRoute::Reset))
        );
        for other in [
            "/embeddings/nope",
            "/embeddings",
            "/v1/embeddings",
            "/x/embeddings/ok",
        ] {
            assert_eq!(detect(other, None), None, "{other}");
        }
        // The LLM endpoints are untouched.
        assert_eq!(Endpoint::detect("/embeddings/ok"), None);
    }

    #[test]
    fn parses_embeddings_requests() {
        assert_eq!(
            embeddings_request(r#"{"input": "hello", "model": "m"}"#),
            EmbeddingsRequest {
                inputs: vec!["hello".to_owned()],
                model: Some("m".to_owned()),
                dimensions: None,
            }
        );
        assert_eq!(
            embeddings_request(r#"{"input": ["a", "b c"], "dimensions": 8}"#),
            EmbeddingsRequest {
                inputs: vec!["a".to_owned(), "b c".to_owned()],
                model: None,
                dimensions: Some(8),
            }
        );
        for bad in [
            "",
            "[]",
            r#"{"model": "m"}"#,
            r#"{"input": []}"#,
            r#"{"input": [1, 2]}"#,
            r#"{"input": 5}"#,
            r#"{"input": "a", "dimensions": 0}"#,
            r#"{"input": "a", "dimensions": 1.5}"#,
            r#"{"input": "a", "dimensions": 100000}"#,
            r#"{"input": "a", "model": 3}"#,
        ] {
            assert!(parse_embeddings_request(bad.as_bytes()).is_err(), "{bad}");
        }
    }

    #[test]
    fn embeddings_are_deterministic_unit_vectors_that_share_words() {
        let weather = embed("get the weather forecast", 16);
        assert_eq!(weather, embed("get the weather forecast", 16));
        assert_eq!(weather.len(), 16);
        for vector in [&weather, &embed("", 16), &embed("!!! ???", 16)] {
            let norm = cosine(vector, vector).sqrt();
            assert!((norm - 1.0).abs() < 1e-9, "{vector:?}");
        }
        let related = embed("Weather forecast for Paris", 16);
        let unrelated = embed("delete a kubernetes pod", 16);
        assert!(cosine(&weather, &related) > cosine(&weather, &unrelated));
        assert_eq!(embed("a b", 1), vec![1.0]);
        assert_eq!(embed("x", 300).len(), 300);
    }

    #[test]
    fn embeddings_answers_have_the_openai_shape() {
        let request = embeddings_request(r#"{"input": ["one two", "three"], "model": "emb"}"#);
        let ok = embeddings_answer(&request, None, false);
        assert_eq!(ok["object"], "list");
        assert_eq!(ok["model"], "emb");
        assert_eq!(ok["usage"]["prompt_tokens"], 4);
        assert_eq!(ok["usage"]["total_tokens"], 4);
        let data = ok["data"].as_array().unwrap();
        assert_eq!(data.len(), 2);
        for (index, item) in data.iter().enumerate() {
            assert_eq!(item["object"], "embedding");
            assert_eq!(item["index"], index);
            assert_eq!(item["embedding"].as_array().unwrap().len(), 16);
        }
        assert_eq!(data[1]["embedding"], json!(embed("three", 16)));

        let asked = embeddings_request(r#"{"input": "x", "dimensions": 5}"#);
        let sized = embeddings_answer(&asked, None, false);
        assert_eq!(sized["model"], DEFAULT_MODEL);
        assert_eq!(sized["data"][0]["embedding"].as_array().unwrap().len(), 5);

        let wrong_dims = embeddings_answer(&asked, Some(WRONG_DIMENSIONS), false);
        assert_eq!(
            wrong_dims["data"][0]["embedding"].as_array().unwrap().len(),
            3
        );

        let wrong_count = embeddings_answer(&request, None, true);
        assert_eq!(wrong_count["data"].as_array().unwrap().len(), 1);
        let single = embeddings_request(r#"{"input": "solo"}"#);
        assert_eq!(embeddings_answer(&single, None, true)["data"], json!([]));
    }

    #[test]
    fn embeddings_status_errors_look_like_openai() {
        let limited = embeddings_status_error(StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(limited["error"]["type"], "requests");
        assert_eq!(limited["error"]["code"], "rate_limit_exceeded");
        assert!(
            limited["error"]["message"]
                .as_str()
                .unwrap()
                .contains("429")
        );
        let down = embeddings_status_error(StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(down["error"]["type"], "server_error");
        assert_eq!(down["error"]["code"], Value::Null);
        assert_eq!(down["error"]["param"], Value::Null);
        assert!(
            serde_json::from_slice::<Value>(GARBAGE_BODY).is_err(),
            "garbage must not parse"
        );
    }

    #[test]
    fn stats_count_embeddings_requests_and_inputs() {
        let stats = Stats::default();
        stats.record("/v1/chat/completions");
        stats.record("/embeddings/ok");
        stats.embeddings_requests.fetch_add(1, Ordering::Relaxed);
        stats.record_embeddings_body(Some(3));
        stats.record_embeddings_body(None);
        let snapshot = stats.snapshot();
        assert_eq!(snapshot["requests"], 2);
        assert_eq!(snapshot["by_path"]["/embeddings/ok"], 1);
        assert_eq!(
            snapshot["embeddings"],
            json!({"requests": 1, "inputs": 3, "invalid_bodies": 1})
        );
    }

    /// Serves the demo upstream on a free port for one test.
    async fn start_server() -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let server = Arc::new(Server {
            verbose: false,
            stats: Stats::default(),
            scripted_log: scripted::Log::default(),
            responses: stored::Responses::default(),
        });
        tokio::spawn(async move {
            let (shutdown_tx, shutdown_rx) = watch::channel(());
            let (drain_tx, _drain_rx) = mpsc::channel::<()>(1);
            while let Ok((stream, _)) = listener.accept().await {
                let connection = serve_connection(
                    stream,
                    Arc::clone(&server),
                    shutdown_rx.clone(),
                    drain_tx.clone(),
                );
                tokio::spawn(connection);
            }
            drop(shutdown_tx);
        });
        address
    }

    /// One HTTP/1.1 exchange on a fresh connection: the status (0 if the server hung up without
    /// answering), the headers and the body.
    async fn exchange(
        address: std::net::SocketAddr,
        method: &str,
        target: &str,
        body: &str,
    ) -> (u16, String, String) {
        exchange_with(address, method, target, &[], body).await
    }

    /// [`exchange`] with extra request headers.
    async fn exchange_with(
        address: std::net::SocketAddr,
        method: &str,
        target: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> (u16, String, String) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = TcpStream::connect(address).await.unwrap();
        let extra: String = headers
            .iter()
            .map(|(name, value)| format!("{name}: {value}\r\n"))
            .collect();
        let request = format!(
            "{method} {target} HTTP/1.1\r\nhost: demo\r\ncontent-type: application/json\r\n\
             {extra}content-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        // A reset may surface as an error rather than as end of stream.
        let _ = stream.read_to_end(&mut answer).await;
        let answer = String::from_utf8(answer).unwrap();
        let Some((head, body)) = answer.split_once("\r\n\r\n") else {
            assert!(answer.is_empty(), "partial answer: {answer}");
            return (0, String::new(), String::new());
        };
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        (status, head.to_ascii_lowercase(), body.to_owned())
    }

    #[tokio::test]
    async fn embeddings_routes_over_http() {
        let address = start_server().await;
        let two = r#"{"input": ["weather in paris", "send an email"], "model": "emb"}"#;

        let (status, head, body) = exchange(address, "POST", "/embeddings/ok", two).await;
        assert_eq!(status, 200);
        assert!(head.contains("content-type: application/json"));
        let answer: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(answer["data"].as_array().unwrap().len(), 2);

        let (status, head, body) = exchange(address, "POST", "/embeddings/garbage", two).await;
        assert_eq!(status, 200);
        assert!(head.contains("content-type: text/html"));
        assert!(serde_json::from_str::<Value>(&body).is_err());

        let (status, _, body) = exchange(address, "POST", "/embeddings/status/429", two).await;
        assert_eq!(status, 429);
        let error: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(error["error"]["code"], "rate_limit_exceeded");

        assert_eq!(
            exchange(address, "POST", "/embeddings/reset", two).await,
            (0, String::new(), String::new())
        );

        let (status, _, _) = exchange(address, "POST", "/embeddings/ok", "{}").await;
        assert_eq!(status, 400);
        let (status, _, _) = exchange(address, "GET", "/embeddings/ok", "").await;
        assert_eq!(status, 404);

        // A slow answer holds up nothing else.
        let started = Instant::now();
        let slow = tokio::spawn(exchange(
            address,
            "POST",
            "/embeddings/slow?ms=1500",
            r#"{"input": "late"}"#,
        ));
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (status, _, _) = exchange(address, "POST", "/embeddings/wrong-dims", two).await;
        assert_eq!(status, 200);
        assert!(started.elapsed() < Duration::from_millis(1000));
        let (status, _, body) = slow.await.unwrap();
        assert_eq!(status, 200);
        assert!(started.elapsed() >= Duration::from_millis(1500));
        let answer: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(answer["data"][0]["embedding"], json!(embed("late", 16)));

        let (_, _, stats) = exchange(address, "GET", "/stats", "").await;
        let stats: Value = serde_json::from_str(&stats).unwrap();
        // Every POST above, the GET excepted; inputs from the bodies that parsed.
        assert_eq!(stats["requests"], 7);
        assert_eq!(
            stats["embeddings"],
            json!({"requests": 7, "inputs": 11, "invalid_bodies": 1})
        );
        assert_eq!(stats["by_path"]["/embeddings/ok"], 2);
        assert_eq!(stats["by_path"]["/embeddings/slow"], 1);
    }

    #[tokio::test]
    async fn echoes_raw_bodies_unread() {
        let address = start_server().await;
        let raw = [("x-demo-echo", "raw")];
        let chat = "/v1/chat/completions";
        let (status, head, body) = exchange_with(address, "POST", chat, &raw, "{not json").await;
        assert_eq!((status, body.as_str()), (200, "{not json"));
        assert!(head.contains("content-type: application/octet-stream"));
        let (status, _, _) = exchange(address, "POST", chat, "{not json").await;
        assert_eq!(status, 400);
    }

    #[tokio::test]
    async fn scripted_model_over_http() {
        let address = start_server().await;
        let chat = "/v1/chat/completions";
        let first = r#"{"messages":[{"role":"user","content":"weather in paris"}],"tools":[{"type":"function","function":{"name":"find_tools"}}]}"#;
        let scripted = [
            ("x-demo-model", "scripted"),
            ("x-demo-want", "get_weather"),
            ("x-demo-fail-followup", "429"),
        ];
        let (status, head, body) = exchange_with(address, "POST", chat, &scripted, first).await;
        assert_eq!(status, 200);
        assert!(head.contains("x-demo-tools: find_tools"));
        let answer: Value = serde_json::from_str(&body).unwrap();
        let call = &answer["choices"][0]["message"]["tool_calls"][0];
        assert_eq!(call["id"], "call_1_0");
        assert_eq!(
            call["function"]["arguments"],
            r#"{"limit":5,"query":"weather in paris"}"#
        );

        let follow_up = r#"{"messages":[{"role":"user","content":"weather in paris"},
            {"role":"assistant","content":null,"tool_calls":[{"id":"call_1_0","type":"function","function":{"name":"find_tools","arguments":"{}"}}]},
            {"role":"tool","tool_call_id":"call_1_0","content":"{}"}],
            "tools":[{"type":"function","function":{"name":"find_tools"}},{"type":"function","function":{"name":"get_weather"}}]}"#;
        let (status, _, body) = exchange_with(address, "POST", chat, &scripted, follow_up).await;
        assert_eq!(status, 429);
        let error: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(error["error"]["code"], "rate_limit_exceeded");
        let (status, _, body) =
            exchange_with(address, "POST", chat, &scripted[..2], follow_up).await;
        assert_eq!(status, 200);
        assert!(body.contains(r#""name":"get_weather""#), "{body}");

        // Missing x-demo-want; an unanswered call.
        let (status, _, _) = exchange_with(address, "POST", chat, &scripted[..1], first).await;
        assert_eq!(status, 400);
        let unanswered =
            follow_up.replace(r#""tool_call_id":"call_1_0""#, r#""tool_call_id":"call_9""#);
        let (status, _, body) =
            exchange_with(address, "POST", chat, &scripted[..2], &unanswered).await;
        assert_eq!(status, 400, "{body}");

        // Streams pause between frames when asked.
        let streamed = first.replacen('{', r#"{"stream":true,"#, 1);
        let mut slow = scripted[..2].to_vec();
        slow.push(("x-demo-chunk-delay-ms", "40"));
        let started = Instant::now();
        let (status, head, body) = exchange_with(address, "POST", chat, &slow, &streamed).await;
        assert_eq!(status, 200);
        assert!(head.contains("content-type: text/event-stream"));
        let frames = body.matches("data: ").count();
        assert!(frames >= 5, "{body}");
        assert!(started.elapsed() >= Duration::from_millis(40 * (frames as u64 - 1)));

        // Without the header nothing changes.
        let (status, _, body) = exchange(address, "POST", chat, first).await;
        assert_eq!(status, 200);
        assert!(body.contains("demo upstream received 1 tool: find_tools"));

        let (_, _, log) = exchange(address, "GET", "/scripted/log", "").await;
        let log: Value = serde_json::from_str(&log).unwrap();
        let log = log.as_array().unwrap();
        assert_eq!(log.len(), 6);
        assert_eq!(log[0]["path"], chat);
        assert_eq!(log[0]["headers"]["x-demo-want"], "get_weather");
        assert_eq!(log[0]["body"]["messages"][0]["content"], "weather in paris");
        assert_eq!(log[5]["body"]["stream"], true);

        let (_, _, stats) = exchange(address, "GET", "/stats", "").await;
        let stats: Value = serde_json::from_str(&stats).unwrap();
        assert_eq!(stats["scripted"], json!({"requests": 6}));
        assert_eq!(stats["requests"], 7);

        let (status, _, body) = exchange(address, "POST", "/scripted/log/reset", "").await;
        assert_eq!((status, body.as_str()), (200, r#"{"cleared":6}"#));
        let (_, _, log) = exchange(address, "GET", "/scripted/log", "").await;
        assert_eq!(log, "[]");
        let (status, head, _) = exchange(address, "DELETE", "/scripted/log", "").await;
        assert_eq!(status, 405);
        assert!(head.contains("allow: get"));
        let (_, _, stats) = exchange(address, "GET", "/stats", "").await;
        let stats: Value = serde_json::from_str(&stats).unwrap();
        assert_eq!(stats["requests"], 7);
    }
}
