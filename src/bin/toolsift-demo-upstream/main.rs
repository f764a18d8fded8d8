//! A stand-in for an LLM provider API, for toolsift's tests, benchmarks and the `make run` demo.
//!
//! It accepts six request dialects (OpenAI Chat Completions, OpenAI Responses, Anthropic
//! Messages, Gemini, Bedrock Converse, Ollama's native `/api/chat`), checks the tools the way
//! the real provider would, so that a filter bug shows up as a 400 rather than as a silent
//! success, and answers in the provider's own response shape with a report of the tools it
//! received.
//!
//! On the LLM paths, request headers change the answer:
//! - `x-demo-echo: body`: the request body as the answer (after the checks above);
//!   `x-demo-echo: raw`: the body exactly as it arrived, unread and unchecked (valid JSON or
//!   not), with `x-demo-content-length` saying the request's `content-length` (absent when
//!   it came chunked, as it does once a filter may have rewritten it);
//!   `x-demo-echo: none`: `{}` without reading the body (for the latency benchmark).
//! - `x-demo-delay-ms: N` (at most 60000): the answer waits N ms after the body has arrived,
//!   as a model thinks before its first token.
//! - `x-demo-trailers` (any value): the answer ends with the trailer `x-demo-trailer: done`.
//!   A request that had trailers gets `x-demo-request-trailers: name=value, …`.
//!
//! Bedrock `converse-stream` answers in AWS's binary event-stream framing, as the real API does,
//! and a Bedrock request signed with SigV4 (`authorization: AWS4-HMAC-SHA256 …`) must carry a
//! valid signature by the demo's credentials (`sigv4.rs`), else it gets Bedrock's 403.
//!
//! Ollama's `/api/chat` streams unless the body says `"stream": false`, as newline-delimited
//! JSON (`application/x-ndjson`, the last object with `"done": true` and the counts), and its
//! errors are `{"error": "..."}`. The real server refuses only what it cannot decode (a `tools`
//! that is not an array of objects, a call's `arguments` that are not an object); that each
//! tool is a `function` with a name, names are unique and a tool message answers a call (below)
//! is the demo's own strictness, so that a filter that breaks a tool or loses a call is caught.
//!
//! Each API is a provider in `providers/`, one file each behind the `Provider` trait, which
//! is all the rest knows of them: the server here, the model that answers with a report of the
//! tools it received (`report.rs`), the scripted model (`scripted.rs`). The embeddings
//! stand-in is `embeddings.rs`.
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
//! the LLM paths with `x-demo-model: scripted` is answered by a model that calls the tool the
//! headers name, in the dialect's own tool-call shapes, whole or streamed as the request asks
//! (`"stream": true`; Ollama unless `"stream": false`; Gemini's `:streamGenerateContent` as SSE
//! with `alt=sse`, else as the real API's JSON array sent element by element; Bedrock's
//! `converse-stream` in AWS's binary event stream).
//! Requests are checked as above, and their conversation as the provider would: a tool call
//! without its result, a result without its call (Chat `tool_calls[].id` and `tool_call_id`;
//! Responses `call_id`, in the stored conversation too; Anthropic `tool_use.id` and
//! `tool_result.tool_use_id` in the next message; Gemini `functionCall` and `functionResponse`
//! names in the next turn; Bedrock `toolUseId`; Ollama `tool_calls[].function.name` and the
//! `tool_name` of the tool messages right after) or a duplicate tool name is a 400 in the
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
//!   - `alternate`: while the request offers both the wanted tool and the one
//!     `x-demo-alternate: NAME` names (required with this mode), calls them in turn, each with
//!     `x-demo-args`: the wanted one when the conversation holds an even number of tool
//!     results, the other when odd (A B A B); without both, as `search`.
//! - `x-demo-fail-followup: STATUS` (400..=599): a request whose conversation already holds a
//!   tool result (the gateway's follow-up) gets that status and the dialect's error body.
//! - `x-demo-chunk-delay-ms: N` (at most 60000): streams wait N ms between frames.
//! - `x-demo-call: NAME[,NAME…]`: on a turn whose conversation holds no tool result yet, the
//!   model calls these tools, in this order, whether the request offers them or not (a
//!   hallucinated call, or one a history suggests: what access rules must stop), with the
//!   arguments `x-demo-call-args: {JSON object}` (default `{}`); `text-first` says its text
//!   before them. Later turns follow the script.
//! - `x-demo-seq: N`: the answer's ids (and Responses' stored id) as for request number N
//!   instead of this one's, so that the same request sent twice gets the same bytes.
//!
//! Call ids are `call_SEQ_I` (Chat, Ollama; Responses `call_id`, with item id `fc_SEQ_I`),
//! `toolu_SEQ_I` (Anthropic) and `tooluse_SEQ_I` (Bedrock), SEQ the request's number in
//! `/stats` and I the call's 0-based place in the turn; Gemini calls have no id, as in the real
//! API. Usage is deterministic: input tokens are the body's bytes / 4 (rounded down), output
//! tokens 10 per call plus the words of the text. Streams are the provider's event sequences,
//! one body chunk per event, with arguments in at least two deltas (Gemini: each `functionCall`
//! part whole in its own chunk, finish reason and usage on the last; Ollama: every call, its
//! arguments an object, in one chunk, as Ollama sends them). Answers carry no `toolsift_demo`
//! report.
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
//! `invalid_bodies` counts those that did not), the scripted requests in
//! `"scripted": {"requests": N}`, and in `llm_bodies` the requests to the LLM paths whose body
//! arrived whole (a request whose headers came but whose stream was reset before its body
//! ended counts in `requests` only: a gateway that answers a request itself, as toolsift
//! refuses one, has already let its headers through).
//!
//! Usage: `toolsift-demo-upstream [--listen 127.0.0.1:18000] [--verbose]`

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::fmt;
use std::io::Write as _;
use std::pin::{Pin, pin};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::header::{ALLOW, CACHE_CONTROL, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use hyper::http::request::Parts;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

use embeddings::EmbeddingsRoute;
use providers::openai_chat::OpenAiChat;
use providers::shared::{Rejection, error_response};
use providers::{Endpoint, Stream};

mod embeddings;
mod eventstream;
mod providers;
mod report;
mod scripted;
mod sigv4;
mod stored;

const USAGE: &str = "\
usage: toolsift-demo-upstream [--listen ADDR] [--verbose]

A fake LLM provider API (OpenAI Chat/Responses, Anthropic, Gemini, Bedrock Converse,
Ollama) that validates and reports the tools it receives.

  --listen ADDR   address to listen on (default 127.0.0.1:18000; port 0 picks a free port)
  --verbose, -v   log one line per request to stderr
  --help, -h      show this help
";

const DEFAULT_LISTEN: &str = "127.0.0.1:18000";

/// Larger than the 32 MiB buffer limit in envoy.yaml, so Envoy's limit is the one a test hits.
const MAX_BODY_BYTES: usize = 64 << 20;

/// Distinct paths tracked by /stats; later ones are pooled so a path scan cannot grow memory.
const MAX_STATS_PATHS: usize = 1024;
const OTHER_PATHS_KEY: &str = "(other)";

/// How long shutdown waits for open connections to finish their requests.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Pause after a failed accept (e.g. out of file descriptors) so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

pub(crate) const ECHO_HEADER: &str = "x-demo-echo";
/// See the module's documentation (`x-demo-seq`).
const SEQ_HEADER: &str = "x-demo-seq";
/// `x-demo-delay-ms`: how long the answer waits once the body has arrived.
const DELAY_HEADER: &str = "x-demo-delay-ms";
/// The longest `x-demo-delay-ms`.
const MAX_DELAY_MS: u64 = 60_000;
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

pub(crate) const DEFAULT_MODEL: &str = "toolsift-demo";

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

    let server = Arc::new(Server::new(options.verbose));
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

impl Server {
    fn new(verbose: bool) -> Self {
        Self {
            verbose,
            stats: Stats::default(),
            scripted_log: scripted::Log::default(),
            responses: stored::Responses::default(),
        }
    }
}

/// Counters behind `GET /stats`.
#[derive(Default)]
pub(crate) struct Stats {
    requests: AtomicU64,
    by_path: Mutex<BTreeMap<String, u64>>,
    pub(crate) embeddings_requests: AtomicU64,
    embeddings_inputs: AtomicU64,
    embeddings_invalid_bodies: AtomicU64,
    scripted_requests: AtomicU64,
    llm_bodies: AtomicU64,
}

impl Stats {
    /// Counts one POST and returns its 1-based sequence number, used to make response ids unique.
    pub(crate) fn record(&self, path: &str) -> u64 {
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
    pub(crate) fn record_embeddings_body(&self, inputs: Option<usize>) {
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
            "llm_bodies": self.llm_bodies.load(Ordering::Relaxed),
        })
    }
}

/// Returned by the service to make hyper drop the connection (HTTP/1) or reset the stream
/// (HTTP/2) without answering: `/embeddings/reset`.
#[derive(Debug)]
pub(crate) struct ResetConnection;

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
            let response = embeddings::serve_embeddings(&parts, body, route, &server.stats).await;
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
            .get(report::TOOL_COUNT_HEADER)
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
    let provider = endpoint.provider;
    let scripted = scripted::requested(&parts.headers);
    // `x-demo-seq`: the answer's ids as for that request number, so that two requests (through
    // the gateway and not) can be answered byte for byte alike.
    let sequence = parts
        .headers
        .get(SEQ_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(sequence);
    if scripted {
        server
            .stats
            .scripted_requests
            .fetch_add(1, Ordering::Relaxed);
    }
    let (body, trailers) = match read_body(body).await {
        Ok(read) => {
            server.stats.llm_bodies.fetch_add(1, Ordering::Relaxed);
            read
        }
        Err((status, rejection)) => {
            if scripted {
                server.scripted_log.record(parts, None);
            }
            return error_response(provider, status, &rejection);
        }
    };
    let delay = parts.headers.get(DELAY_HEADER).map(|v| {
        v.to_str()
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|ms| *ms <= MAX_DELAY_MS)
    });
    match delay {
        Some(Some(ms)) => tokio::time::sleep(Duration::from_millis(ms)).await,
        Some(None) => {
            let rejection = format!(
                "The header '{DELAY_HEADER}' must be a whole number of milliseconds up to {MAX_DELAY_MS}."
            );
            return error_response(
                provider,
                StatusCode::BAD_REQUEST,
                &Rejection::new(rejection),
            );
        }
        None => {}
    }
    let echo = parts.headers.get(ECHO_HEADER).map(HeaderValue::as_bytes);
    if !scripted && echo.is_some_and(|echo| echo.eq_ignore_ascii_case(ECHO_NONE)) {
        return plain_response(
            StatusCode::OK,
            "application/json",
            Bytes::from_static(b"{}"),
        );
    }
    let mut response = if let Some(refusal) = provider.signature_refusal(parts, &body) {
        refusal
    } else if echo.is_some_and(|echo| echo.eq_ignore_ascii_case(ECHO_RAW)) {
        let mut raw = plain_response(StatusCode::OK, "application/octet-stream", body.clone());
        if let Some(length) = parts.headers.get(hyper::header::CONTENT_LENGTH) {
            raw.headers_mut()
                .insert("x-demo-content-length", length.clone());
        }
        raw
    } else if scripted {
        server.scripted_log.record(parts, Some(&body));
        scripted::serve(parts, endpoint, &body, sequence, &server.responses)
    } else {
        report::serve(parts, body.clone(), endpoint, sequence, &server.responses)
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

/// The body and its trailers, if any.
pub(crate) async fn read_body(
    body: Incoming,
) -> Result<(Bytes, Option<HeaderMap>), (StatusCode, Rejection)> {
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

// ---------------------------------------------------------------------------------------------
// Responses
// ---------------------------------------------------------------------------------------------

/// A response body of ready-made chunks. A single chunk goes out with a Content-Length; a stream
/// goes out as one HTTP/1.1 chunk (or HTTP/2 DATA frame) per event, like a real SSE response.
pub(crate) struct ReplyBody {
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

pub(crate) fn json_response(status: StatusCode, value: &Value) -> Response<ReplyBody> {
    plain_response(status, "application/json", Bytes::from(value.to_string()))
}

/// A streamed answer, one body chunk per frame, `gap` between them.
pub(crate) fn stream_response(stream: Stream, gap: Duration) -> Response<ReplyBody> {
    let body = ReplyBody::from(stream.frames).gap(gap);
    let mut response = plain_response(StatusCode::OK, stream.content_type, body);
    response
        .headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// OpenAI's answer to an unknown path or method, used whatever the provider since the path
/// matched none.
fn invalid_url(parts: &Parts, status: StatusCode) -> Response<ReplyBody> {
    let message = format!("Invalid URL ({} {})", parts.method, parts.uri.path());
    let mut response = error_response(&OpenAiChat, status, &Rejection::new(message));
    if status == StatusCode::METHOD_NOT_ALLOWED {
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("POST"));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let server = Arc::new(Server::new(false));
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
        assert_eq!(
            answer["data"][0]["embedding"],
            json!(embeddings::embed("late", 16))
        );

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
        assert!(head.contains("x-demo-content-length: 9"), "{head}");
        let (status, _, _) = exchange(address, "POST", chat, "{not json").await;
        assert_eq!(status, 400);
        let (_, _, stats) = exchange(address, "GET", "/stats", "").await;
        let stats: Value = serde_json::from_str(&stats).unwrap();
        assert_eq!(
            (&stats["requests"], &stats["llm_bodies"]),
            (&json!(2), &json!(2))
        );
    }

    #[tokio::test]
    async fn answers_after_the_delay_asked_for() {
        let address = start_server().await;
        let chat = "/v1/chat/completions";
        let waited = [("x-demo-echo", "raw"), ("x-demo-delay-ms", "150")];
        let started = Instant::now();
        let (status, _, body) = exchange_with(address, "POST", chat, &waited, "{}").await;
        assert_eq!((status, body.as_str()), (200, "{}"));
        assert!(started.elapsed() >= Duration::from_millis(150));
        for bad in ["-1", "60001", "soon"] {
            let asked = [("x-demo-delay-ms", bad)];
            let (status, _, body) = exchange_with(address, "POST", chat, &asked, "{}").await;
            assert_eq!(status, 400, "{bad}");
            assert!(body.contains("x-demo-delay-ms"), "{bad}: {body}");
        }
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

    /// The data of an HTTP/1.1 chunked body.
    fn dechunked(body: &str) -> String {
        let mut data = String::new();
        let mut rest = body;
        while let Some((size, after)) = rest.split_once("\r\n") {
            let size = usize::from_str_radix(size, 16).unwrap();
            if size == 0 {
                break;
            }
            data.push_str(&after[..size]);
            rest = after[size..].strip_prefix("\r\n").unwrap();
        }
        data
    }

    #[tokio::test]
    async fn ollama_over_http() {
        let address = start_server().await;
        let chat = "/api/chat";
        let tools = r#"[{"type":"function","function":{"name":"find_tools","parameters":{}}}]"#;
        let first = format!(
            r#"{{"model":"llama3.2","messages":[{{"role":"user","content":"weather in paris"}}],"tools":{tools}}}"#
        );
        // A streamed answer's lines, each checked to be one JSON object and its newline.
        let lines = |body: &str| -> Vec<Value> {
            let data = dechunked(body);
            assert!(data.ends_with('\n'), "{data}");
            data.lines()
                .map(|line| serde_json::from_str(line).unwrap())
                .collect()
        };

        // No `stream` member: the report streams as NDJSON, the report on the first line.
        let (status, head, body) = exchange(address, "POST", chat, &first).await;
        assert_eq!(status, 200);
        assert!(
            head.contains("content-type: application/x-ndjson"),
            "{head}"
        );
        assert!(head.contains("x-demo-dialect: ollama"));
        let chunks = lines(&body);
        assert_eq!(
            chunks[0]["message"]["content"],
            "demo upstream received 1 tool: find_tools"
        );
        assert_eq!(chunks[0]["toolsift_demo"]["dialect"], "ollama");
        assert_eq!(chunks.last().unwrap()["done"], true);

        // A tools array Ollama cannot use: 400 with Ollama's error body.
        let bad = first.replace(tools, r#"[{"type":"function","function":{}}]"#);
        let (status, head, body) = exchange(address, "POST", chat, &bad).await;
        assert_eq!(status, 400);
        assert!(head.contains("content-type: application/json"));
        let error: Value = serde_json::from_str(&body).unwrap();
        let message = error["error"].as_str().unwrap();
        assert!(message.contains("tools[0].function.name"), "{message}");
        assert_eq!(error.as_object().unwrap().len(), 1);

        // The scripted model, whole and streamed.
        let scripted = [("x-demo-model", "scripted"), ("x-demo-want", "get_weather")];
        let whole = first.replacen('{', r#"{"stream":false,"#, 1);
        let (status, head, body) = exchange_with(address, "POST", chat, &scripted, &whole).await;
        assert_eq!(status, 200);
        assert!(head.contains("content-type: application/json"));
        let answer: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            answer["message"]["tool_calls"],
            json!([{ "id": "call_3_0", "function": { "index": 0, "name": "find_tools",
                "arguments": { "query": "weather in paris", "limit": 5 } } }])
        );
        let (status, _, body) = exchange_with(address, "POST", chat, &scripted, &first).await;
        assert_eq!(status, 200);
        let chunks = lines(&body);
        assert_eq!(
            chunks.len(),
            2,
            "the call in one chunk, then the last: {body}"
        );
        assert_eq!(
            chunks[0]["message"]["tool_calls"][0]["function"]["name"],
            "find_tools"
        );
        assert_eq!(chunks[1]["done"], true);

        // The follow-up: the result must answer the call by its tool's name.
        let follow_up = |tool_name: &str| {
            format!(
                r#"{{"model":"llama3.2","stream":false,"messages":[{{"role":"user","content":"weather in paris"}},
                {{"role":"assistant","content":"","tool_calls":[{{"function":{{"name":"find_tools","arguments":{{"query":"weather"}}}}}}]}},
                {{"role":"tool","content":"get_weather","tool_name":"{tool_name}"}}],
                "tools":[{{"type":"function","function":{{"name":"find_tools"}}}},{{"type":"function","function":{{"name":"get_weather"}}}}]}}"#
            )
        };
        let (status, _, body) =
            exchange_with(address, "POST", chat, &scripted, &follow_up("find_tools")).await;
        assert_eq!(status, 200, "{body}");
        let answer: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            answer["message"]["tool_calls"][0]["function"]["name"],
            "get_weather"
        );
        let (status, _, body) =
            exchange_with(address, "POST", chat, &scripted, &follow_up("get_weather")).await;
        assert_eq!(status, 400);
        let error: Value = serde_json::from_str(&body).unwrap();
        assert!(error["error"].as_str().unwrap().contains("get_weather"));
        let mut failing = scripted.to_vec();
        failing.push(("x-demo-fail-followup", "429"));
        let (status, _, body) =
            exchange_with(address, "POST", chat, &failing, &follow_up("find_tools")).await;
        assert_eq!(status, 429);
        let error: Value = serde_json::from_str(&body).unwrap();
        assert!(error["error"].as_str().unwrap().contains("429"));

        // The echo modes, as on every LLM path.
        let (status, _, body) =
            exchange_with(address, "POST", chat, &[("x-demo-echo", "body")], &first).await;
        assert_eq!((status, body.as_str()), (200, first.as_str()));
        let (status, _, body) = exchange_with(
            address,
            "POST",
            chat,
            &[("x-demo-echo", "raw")],
            "{not json",
        )
        .await;
        assert_eq!((status, body.as_str()), (200, "{not json"));
    }
}
