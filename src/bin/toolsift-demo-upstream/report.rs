//! The model that is not scripted: it answers every LLM request, in the provider's own shape,
//! with a report of the tools it received (the text `demo upstream received N tools: a, b, …`,
//! the `toolsift_demo` member and the `x-demo-*` response headers), which is what the tests of
//! the filter read. The report of tools received is written here for both models.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use hyper::header::{
    CONTENT_LENGTH, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, TRANSFER_ENCODING,
};
use hyper::http::request::Parts;
use hyper::{Response, StatusCode};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::providers::shared::error_response;
use crate::providers::{Endpoint, Inspection, Provider, Turn, inspect_request};
use crate::stored::Responses;
use crate::{ReplyBody, json_response, plain_response, stream_response};

/// The member of an answer (and of a stream's first event) that holds the report.
pub(crate) const REPORT_KEY: &str = "toolsift_demo";

const DIALECT_HEADER: &str = "x-demo-dialect";
pub(crate) const TOOL_COUNT_HEADER: &str = "x-demo-tool-count";
const TOOLS_HEADER: &str = "x-demo-tools";
const TOOLS_TRUNCATED_HEADER: &str = "x-demo-tools-truncated";

/// `x-demo-echo: body`: the request body as the answer, after the checks.
const ECHO_BODY: &[u8] = b"body";

/// Cap on `x-demo-tools`: an unfiltered request can carry thousands of tools, and Envoy
/// refuses upstream response headers past 60 KiB by default. The full list is in the body.
const TOOLS_HEADER_LIMIT: usize = 8 * 1024;

/// How many tool names the assistant text spells out before summarising the rest.
const TEXT_TOOL_LIMIT: usize = 20;

/// Answers one request whose body has been read; OpenAI Responses answers are kept in `store`.
pub(crate) fn serve(
    parts: &Parts,
    body: Bytes,
    endpoint: &Endpoint,
    sequence: u64,
    store: &Responses,
) -> Response<ReplyBody> {
    let provider = endpoint.provider;
    let inspection = match inspect_request(endpoint, &body) {
        Ok(inspection) => inspection,
        Err(rejection) => return error_response(provider, StatusCode::BAD_REQUEST, &rejection),
    };
    let resolved = match provider.resolve(&body, store).transpose() {
        Ok(resolved) => resolved,
        Err(rejection) => return error_response(provider, StatusCode::BAD_REQUEST, &rejection),
    };
    let wants_echo = parts
        .headers
        .get(crate::ECHO_HEADER)
        .is_some_and(|value| value.as_bytes().eq_ignore_ascii_case(ECHO_BODY));
    let mut response = if wants_echo {
        plain_response(StatusCode::OK, "application/json", body)
    } else {
        let turn = report_turn(endpoint, &inspection, parts, &body, sequence);
        if let Some(resolved) = &resolved {
            provider.keep(resolved, &turn, store);
        }
        if inspection.stream {
            stream_response(provider.stream(&turn, parts.uri.query()), Duration::ZERO)
        } else {
            json_response(StatusCode::OK, &provider.whole(&turn))
        }
    };
    add_demo_headers(response.headers_mut(), provider, &inspection.tools);
    response
}

/// The answer: the sentence listing the tools, and the report of what the demo saw.
fn report_turn(
    endpoint: &Endpoint,
    inspection: &Inspection,
    parts: &Parts,
    body: &[u8],
    sequence: u64,
) -> Turn {
    let header_text = |name: HeaderName| {
        let value = parts.headers.get(name)?;
        Some(String::from_utf8_lossy(value.as_bytes()).into_owned())
    };
    let report = json!({
        "dialect": endpoint.provider.name(),
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
    // Token counts are rough stand-ins (about four bytes per token), enough for clients that
    // read `usage`.
    let input_tokens = u64::try_from(body.len().div_ceil(4)).unwrap_or(u64::MAX);
    let output_tokens = u64::try_from(text.split_whitespace().count()).unwrap_or(u64::MAX);
    Turn {
        sequence,
        created: now(),
        model: inspection.answering_model(endpoint),
        text: Some(text),
        calls: Vec::new(),
        input_tokens,
        output_tokens,
        include_usage: inspection.include_usage,
        report: Some(report),
    }
}

/// Seconds since the Unix epoch.
pub(crate) fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}

/// The `x-demo-*` headers: the provider, and the tools the request had.
pub(crate) fn add_demo_headers(headers: &mut HeaderMap, provider: &dyn Provider, tools: &[String]) {
    headers.insert(DIALECT_HEADER, HeaderValue::from_static(provider.name()));
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

/// The assistant's answer: `demo upstream received 3 tools: a, b, c`.
pub(crate) fn summary_sentence(tools: &[String]) -> String {
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

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .fold(String::with_capacity(64), |mut hex, byte| {
            let _ = write!(hex, "{byte:02x}");
            hex
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|name| (*name).to_owned()).collect()
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
    fn hashes_body_as_lowercase_hex() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
