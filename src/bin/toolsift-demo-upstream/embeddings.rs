//! The misbehaving OpenAI-compatible embeddings API (`/embeddings/...`), for the tests of the
//! filter's hybrid ranking; the routes are described in the module doc of `main.rs`.

use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::http::request::Parts;
use hyper::{Response, StatusCode};
use serde_json::{Value, json};

use crate::providers::openai_chat::OpenAiChat;
use crate::providers::shared::{Rejection, error_response};
use crate::{
    DEFAULT_MODEL, ReplyBody, ResetConnection, Stats, json_response, plain_response, read_body,
};

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

/// Which `/embeddings/...` route a request took, and so how it misbehaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EmbeddingsRoute {
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
    pub(crate) fn detect(path: &str, query: Option<&str>) -> Option<Result<Self, Rejection>> {
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
pub(crate) fn embed(text: &str, dimensions: usize) -> Vec<f64> {
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

pub(crate) async fn serve_embeddings(
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
            return Ok(error_response(&OpenAiChat, status, &rejection));
        }
    };
    let request = parse_embeddings_request(&body);
    stats.record_embeddings_body(request.as_ref().ok().map(|request| request.inputs.len()));
    let route = match route {
        Ok(route) => route,
        Err(rejection) => {
            return Ok(error_response(
                &OpenAiChat,
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
            return Ok(error_response(
                &OpenAiChat,
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
