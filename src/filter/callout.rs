//! The answers of dispatched calls, as the current `on_http_call_response` gives them, and the
//! upstream cluster a request's own calls go to. Read here once for every kind of call (LLM
//! follow-ups, MCP calls, gating, embeddings, suggestions), so no caller module reaches into
//! another's.

use super::host::{self, Buffer, Headers};
use crate::mcp::exchange::CallAnswer;

/// The `:status` of the current `on_http_call_response`, `None` when the call got no response
/// (reset, or cut off mid-body by its timeout). With no response there is no header map, and
/// the SDK's getter panics on the host's answer to reading one: it must not be asked.
pub fn call_status(num_headers: usize) -> Option<String> {
    if num_headers == 0 {
        return None;
    }
    host::header_text(Headers::CallResponse, ":status")
        .ok()
        .flatten()
}

/// The embeddings answer of the current `on_http_call_response`: its status and body (its
/// content type is not asked: the body is parsed as JSON whatever it says).
pub fn embeddings_answer(num_headers: usize, size: usize) -> CallAnswer {
    CallAnswer {
        status: call_status(num_headers).and_then(|s| s.parse().ok()),
        content_type: String::new(),
        body: host::buffer(Buffer::CallResponseBody, 0, size).unwrap_or_default(),
    }
}

/// The answer of the current `on_http_call_response`.
pub fn call_answer(num_headers: usize, size: usize) -> CallAnswer {
    CallAnswer {
        status: call_status(num_headers).and_then(|s| s.parse().ok()),
        content_type: content_type(num_headers).unwrap_or_default(),
        body: host::buffer(Buffer::CallResponseBody, 0, size).unwrap_or_default(),
    }
}

/// The `content-type` of the current `on_http_call_response` (never asked without a response:
/// see [`call_status`]).
pub fn content_type(num_headers: usize) -> Option<String> {
    (num_headers > 0)
        .then(|| host::header_text(Headers::CallResponse, "content-type").ok())
        .flatten()
        .flatten()
}

/// The upstream cluster of this request: the one the router picked, or, before the router ran
/// (held by the buffer filter), the route's.
pub fn upstream_cluster() -> Option<String> {
    let property = |path: &[&str]| {
        host::property(path)
            .and_then(|c| String::from_utf8(c).ok())
            .filter(|c| !c.is_empty())
    };
    property(&["xds", "cluster_name"]).or_else(|| property(&["cluster_name"]))
}
