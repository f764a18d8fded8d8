//! The CLI's embeddings client over TLS: `toolsift explain --embeddings-url https://…` against
//! a local HTTPS embeddings service whose self-signed certificate is made here (rcgen), with
//! the API key from `TOOLSIFT_EMBEDDINGS_API_KEY` and extra `--embeddings-header`s. The service
//! records what it received; the key is never printed, not even when the service quotes it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::{Value, json};

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/chat-60-tools.json");
const KEY: &str = "sk-test-0123456789abcdef";

/// One request as the service received it.
#[derive(Debug, Clone)]
struct Received {
    headers: Vec<(String, String)>,
    inputs: usize,
}

/// An HTTPS embeddings service on 127.0.0.1: answers `POST /v1/embeddings` with one vector per
/// input when the request carries `authorization: Bearer KEY`, else 401 with an OpenAI-style
/// error that quotes the key it got (as OpenAI does, partly).
struct Service {
    port: u16,
    ca_pem: PathBuf,
    received: Arc<Mutex<Vec<Received>>>,
}

impl Service {
    fn start(name: &str) -> Service {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let certified = rcgen::generate_simple_self_signed(vec![
            "localhost".to_owned(),
            "127.0.0.1".to_owned(),
        ])
        .unwrap();
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!(
            "target/test-scratch/cli-tls-{name}-{}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let ca_pem = dir.join("ca.pem");
        std::fs::write(&ca_pem, certified.cert.pem()).unwrap();
        let cert = CertificateDer::from(certified.cert.der().to_vec());
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
            certified.signing_key.serialize_der(),
        ));
        let config = Arc::new(
            rustls::ServerConfig::builder()
                .with_no_client_auth()
                .with_single_cert(vec![cert], key)
                .unwrap(),
        );
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let received = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&received);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let config = Arc::clone(&config);
                let log = Arc::clone(&log);
                std::thread::spawn(move || {
                    let connection = rustls::ServerConnection::new(config).unwrap();
                    let mut tls = rustls::StreamOwned::new(connection, stream);
                    // A client that rejects the certificate ends the handshake here.
                    let _ = serve_one(&mut tls, &log);
                });
            }
        });
        Service {
            port,
            ca_pem,
            received,
        }
    }

    fn url(&self, host: &str) -> String {
        format!("https://{host}:{}/v1/embeddings", self.port)
    }

    fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

/// Reads one request, answers it, closes.
fn serve_one(stream: &mut (impl Read + Write), log: &Mutex<Vec<Received>>) -> std::io::Result<()> {
    let mut reader = BufReader::new(&mut *stream);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut headers = Vec::new();
    loop {
        let mut header = String::new();
        reader.read_line(&mut header)?;
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
    }
    let length: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .map_or(0, |(_, v)| v.parse().unwrap());
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let inputs: Vec<String> = match &request["input"] {
        Value::String(s) => vec![s.clone()],
        Value::Array(items) => items
            .iter()
            .map(|i| i.as_str().unwrap_or_default().to_owned())
            .collect(),
        _ => Vec::new(),
    };
    let authorization = headers
        .iter()
        .find(|(k, _)| k == "authorization")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    log.lock().unwrap().push(Received {
        headers,
        inputs: inputs.len(),
    });
    let (status, answer) = if authorization == format!("Bearer {KEY}") {
        let data: Vec<Value> = inputs
            .iter()
            .enumerate()
            .map(|(index, text)| {
                // A small deterministic vector: texts sharing letters are similar.
                let mut v = [0.1f64; 8];
                for b in text.bytes() {
                    v[usize::from(b) % 8] += 1.0;
                }
                json!({"object": "embedding", "index": index, "embedding": v})
            })
            .collect();
        (
            "200 OK",
            json!({"object": "list", "data": data, "model": "m"}),
        )
    } else {
        let quoted = authorization.trim_start_matches("Bearer ");
        (
            "401 Unauthorized",
            json!({"error": {"message": format!("Incorrect API key provided: {quoted}."), "type": "invalid_request_error"}}),
        )
    };
    let answer = answer.to_string();
    write!(
        stream,
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
        answer.len()
    )?;
    stream.flush()
}

/// `toolsift explain` of the example request with hybrid ranking from `url`, trusting `ca` (or
/// the Mozilla roots), with `key` as TOOLSIFT_EMBEDDINGS_API_KEY (or none) and `extra` flags.
fn explain(url: &str, ca: Option<&Path>, key: Option<&str>, extra: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolsift"));
    command.args([
        "explain",
        "--embeddings-url",
        url,
        "--embeddings-model",
        "m",
    ]);
    if let Some(ca) = ca {
        command.arg("--embeddings-ca-cert").arg(ca);
    }
    command.args(extra).arg(EXAMPLE);
    command.env_remove("TOOLSIFT_EMBEDDINGS_API_KEY");
    if let Some(key) = key {
        command.env("TOOLSIFT_EMBEDDINGS_API_KEY", key);
    }
    command.output().unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn hybrid_ranking_over_https_with_the_key_from_the_environment() {
    let service = Service::start("ok");
    let out = explain(
        &service.url("localhost"),
        Some(&service.ca_pem),
        Some(KEY),
        &["--embeddings-header", "X-Team: search-eval"],
    );
    let all = text(&out);
    assert_eq!(out.status.code(), Some(0), "{all}");
    assert!(
        all.contains("vector="),
        "ranked with the service's vectors: {all}"
    );
    assert!(!all.contains(KEY), "the key was printed: {all}");
    let received = service.received();
    assert!(!received.is_empty());
    let inputs: usize = received.iter().map(|r| r.inputs).sum();
    assert!(inputs > 60, "60 tool texts and the query: {inputs}");
    for request in &received {
        let header = |name: &str| {
            request
                .headers
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(
            header("authorization"),
            Some(format!("Bearer {KEY}").as_str())
        );
        assert_eq!(header("x-team"), Some("search-eval"));
        assert_eq!(header("content-type"), Some("application/json"));
    }
}

#[test]
fn a_rejected_key_is_never_printed_even_when_the_service_quotes_it() {
    let service = Service::start("reject");
    let wrong = "sk-wrong-key-0000000000";
    let out = explain(
        &service.url("127.0.0.1"),
        Some(&service.ca_pem),
        Some(wrong),
        &[],
    );
    let all = text(&out);
    assert_eq!(out.status.code(), Some(2), "{all}");
    assert!(all.contains("HTTP 401"), "{all}");
    assert!(all.contains("[redacted]"), "{all}");
    assert!(!all.contains(wrong), "the key was printed: {all}");

    // A header given on the command line overrides the environment's key, and is not printed
    // either.
    let out = explain(
        &service.url("127.0.0.1"),
        Some(&service.ca_pem),
        Some(KEY),
        &[
            "--embeddings-header",
            "authorization: Bearer sk-other-111111111",
        ],
    );
    let all = text(&out);
    assert_eq!(out.status.code(), Some(2), "{all}");
    assert!(
        !all.contains("sk-other-111111111") && !all.contains(KEY),
        "{all}"
    );
}

#[test]
fn a_certificate_the_client_does_not_trust_is_an_error() {
    let service = Service::start("untrusted");
    // Without --embeddings-ca-cert the Mozilla roots are used, which do not hold this one.
    let out = explain(&service.url("localhost"), None, Some(KEY), &[]);
    let all = text(&out);
    assert_eq!(out.status.code(), Some(2), "{all}");
    assert!(all.contains("TLS") || all.contains("certificate"), "{all}");
    assert!(!all.contains(KEY), "{all}");
    assert!(
        service
            .received()
            .iter()
            .all(|r| r.headers.iter().all(|(_, v)| !v.contains(KEY))),
        "the key went to a server the client did not trust"
    );
}

#[test]
fn bad_headers_and_certificates_are_refused_clearly() {
    let service = Service::start("flags");
    for (extra, message) in [
        (
            &["--embeddings-header", "no colon here"][..],
            "--embeddings-header",
        ),
        (
            &["--embeddings-header", "bad name: v"][..],
            "not a header name",
        ),
    ] {
        let out = explain(
            &service.url("localhost"),
            Some(&service.ca_pem),
            Some(KEY),
            extra,
        );
        let all = text(&out);
        assert_eq!(out.status.code(), Some(2), "{all}");
        assert!(all.contains(message), "{all}");
    }
    // A file that holds no certificate.
    let out = explain(
        &service.url("localhost"),
        Some(Path::new(EXAMPLE)),
        None,
        &[],
    );
    let all = text(&out);
    assert_eq!(out.status.code(), Some(2), "{all}");
    assert!(all.contains("--embeddings-ca-cert"), "{all}");
}
