//! JSON-RPC 2.0 as MCP's Streamable HTTP transport carries it: the client's message (one POST
//! body), and the server's answer to a request the gateway sent (`application/json`, or an SSE
//! stream whose events carry notifications before the response).
//!
//! Everything here reads bytes a client or a server sent: any input gives an answer, never a
//! panic. A message that is not one well-formed request (a batch, a notification, a response,
//! anything malformed, a repeated member) reads as [`Incoming::Other`], and the filter lets it
//! through untouched: the server judges it.

use crate::search::sse;
use serde::Deserialize;
use serde_json::value::RawValue;

/// What a client POSTed.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// One request: the gateway may answer it.
    Request(Request),
    /// Anything else: passes through.
    Other,
}

/// One JSON-RPC request.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The `id` as JSON text (a string or a number), echoed in the answer exactly.
    pub id: String,
    pub method: String,
    /// `params` as JSON object text, when present.
    pub params: Option<String>,
}

#[derive(Deserialize)]
struct Envelope<'a> {
    jsonrpc: &'a str,
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    method: Option<crate::json::Str<'a>>,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
}

/// Reads a client's POST body.
pub fn incoming(body: &[u8]) -> Incoming {
    let Ok(text) = std::str::from_utf8(body) else {
        return Incoming::Other;
    };
    // A repeated member is an error to serde's derive: such a message passes through.
    let Ok(envelope) = serde_json::from_str::<Envelope>(text) else {
        return Incoming::Other;
    };
    let (Some(id), Some(method)) = (envelope.id, envelope.method) else {
        return Incoming::Other;
    };
    let id_text = id.get().trim();
    let id_ok = id_text.starts_with('"')
        || id_text.starts_with(['-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9']);
    let params_ok = envelope
        .params
        .is_none_or(|p| p.get().trim_start().starts_with('{'));
    if envelope.jsonrpc != "2.0" || !id_ok || !params_ok {
        return Incoming::Other;
    }
    Incoming::Request(Request {
        id: id_text.to_owned(),
        method: method.into_owned(),
        params: envelope.params.map(|p| p.get().to_owned()),
    })
}

/// What a message the gateway does not read as one request could do, for access rules:
/// whether the server might read a request for its tools in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Screened {
    /// A notification, a response, or a request for another method (or a batch of these):
    /// it can neither list nor call a tool.
    Harmless,
    /// A batch holding a `tools/…` request, or a member the gateway cannot read.
    Batch,
    /// Anything else the gateway cannot read as one JSON-RPC message (not UTF-8, not JSON, a
    /// repeated member, a member of an odd type), or a `tools/…` request it cannot read.
    Unreadable,
}

/// Screens a client's POST body that [`incoming`] did not read as one request (a batch, a
/// notification, a response, anything malformed). A member that is not an object, a `method`
/// that is not a string, and a method starting `tools/` are never harmless: whatever the
/// server would make of them, the gateway cannot check them against access rules.
pub fn screen(body: &[u8]) -> Screened {
    let Ok(text) = std::str::from_utf8(body) else {
        return Screened::Unreadable;
    };
    if text.trim_start().starts_with('[') {
        let Ok(members) = serde_json::from_str::<Vec<&RawValue>>(text) else {
            return Screened::Unreadable;
        };
        return if members.iter().all(|m| harmless(m.get())) {
            Screened::Harmless
        } else {
            Screened::Batch
        };
    }
    if harmless(text) {
        Screened::Harmless
    } else {
        Screened::Unreadable
    }
}

/// One message that can neither list nor call a tool.
fn harmless(text: &str) -> bool {
    serde_json::from_str::<AnyMessage>(text)
        .is_ok_and(|m| m.method.is_none_or(|method| !method.starts_with("tools/")))
}

/// The members of `params` the gateway reads.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Params {
    /// `name` of `tools/call`.
    pub name: Option<String>,
    /// `arguments` of `tools/call` as JSON object text.
    pub arguments: Option<String>,
    /// `_meta` as JSON object text (the 2026-07-28 per-request envelope lives here).
    pub meta: Option<String>,
    /// `cursor` of a list request.
    pub cursor: Option<String>,
    /// `uri` of `resources/read`.
    pub uri: Option<String>,
}

#[derive(Deserialize)]
struct RawParams<'a> {
    #[serde(borrow, default)]
    name: Option<&'a RawValue>,
    #[serde(borrow, default)]
    arguments: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "_meta")]
    meta: Option<&'a RawValue>,
    #[serde(borrow, default)]
    cursor: Option<&'a RawValue>,
    #[serde(borrow, default)]
    uri: Option<&'a RawValue>,
}

impl Request {
    /// The members of `params` the gateway reads; `None` when `params` is not an object of
    /// the expected member types (a string `name`, object `arguments` and `_meta`).
    pub fn params(&self) -> Option<Params> {
        let Some(text) = self.params.as_deref() else {
            return Some(Params::default());
        };
        let raw: RawParams = serde_json::from_str(text).ok()?;
        let string = |v: Option<&RawValue>| -> Option<Option<String>> {
            match v {
                None => Some(None),
                Some(v) if v.get() == "null" => Some(None),
                Some(v) => serde_json::from_str::<String>(v.get()).ok().map(Some),
            }
        };
        let object = |v: Option<&RawValue>| -> Option<Option<String>> {
            match v {
                None => Some(None),
                Some(v) if v.get() == "null" => Some(None),
                Some(v) if v.get().starts_with('{') => Some(Some(v.get().to_owned())),
                Some(_) => None,
            }
        };
        Some(Params {
            name: string(raw.name)?,
            arguments: object(raw.arguments)?,
            meta: object(raw.meta)?,
            cursor: string(raw.cursor)?,
            uri: string(raw.uri)?,
        })
    }
}

/// What a server answered to one request the gateway sent.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServerReply {
    /// The response whose `id` is the request's: its `result` as JSON text, or its `error`.
    pub outcome: Option<Outcome>,
    /// The methods of the notifications that came before it (SSE), in order.
    pub notifications: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Result(String),
    Error(String),
}

/// Any JSON-RPC message: every member one can have, so that a repeated one is an error (as in
/// [`incoming`]); `jsonrpc` and `params` are only counted.
#[derive(Deserialize)]
struct AnyMessage<'a> {
    #[serde(borrow, default)]
    #[allow(dead_code)]
    jsonrpc: Option<&'a RawValue>,
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    method: Option<crate::json::Str<'a>>,
    #[serde(borrow, default)]
    #[allow(dead_code)]
    params: Option<&'a RawValue>,
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
    #[serde(borrow, default)]
    error: Option<&'a RawValue>,
}

/// Reads a server's answer (`content_type`, `body`) to the request whose id is `id` (JSON
/// text). An SSE stream is read event by event; a JSON body is one message.
pub fn server_reply(content_type: &str, body: &[u8], id: &str) -> ServerReply {
    let mut reply = ServerReply::default();
    let Some(text) = sse::utf8_prefix(body) else {
        return reply;
    };
    if content_type
        .to_ascii_lowercase()
        .contains("text/event-stream")
    {
        // A stream the server closed mid-event still had its complete events read.
        let mut whole = text.to_owned();
        if !whole.ends_with("\n\n") {
            whole.push_str("\n\n");
        }
        for frame in sse::frames(&whole).0 {
            read_message(&frame.data, id, &mut reply);
            if reply.outcome.is_some() {
                break;
            }
        }
    } else {
        read_message(text, id, &mut reply);
    }
    reply
}

fn read_message(text: &str, id: &str, reply: &mut ServerReply) {
    let Ok(message) = serde_json::from_str::<AnyMessage>(text) else {
        return;
    };
    match (message.id, message.method) {
        (None, Some(method)) => reply.notifications.push(method.into_owned()),
        (Some(got), None) if same_id(got.get(), id) => {
            reply.outcome = match (message.result, message.error) {
                (Some(result), None) => Some(Outcome::Result(result.get().to_owned())),
                (None, Some(error)) => Some(Outcome::Error(error.get().to_owned())),
                _ => None,
            };
        }
        _ => {}
    }
}

/// Two JSON ids are the same: equal text, or equal strings once decoded.
fn same_id(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    match (
        serde_json::from_str::<serde_json::Value>(a),
        serde_json::from_str::<serde_json::Value>(b),
    ) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

/// The notification methods in the complete SSE events of `text` (a stream passing through),
/// and how many bytes those events span (a partial event waits for the next chunk).
pub fn stream_notifications(text: &str) -> (Vec<String>, usize) {
    let (frames, consumed) = sse::frames(text);
    let mut reply = ServerReply::default();
    for frame in frames {
        read_message(&frame.data, "", &mut reply);
    }
    (reply.notifications, consumed)
}

/// Watches a server's event stream as it passes to the client, for
/// `notifications/tools/list_changed`.
#[derive(Debug, Default)]
pub struct StreamWatch {
    /// The start of an event not complete yet.
    carry: Vec<u8>,
}

/// The most a watched stream's unfinished event may hold before the watch gives it up.
const MAX_CARRY: usize = 1 << 20;

impl StreamWatch {
    /// Reads the next chunk; whether it completed a tools list-changed notification.
    pub fn feed(&mut self, chunk: &[u8]) -> bool {
        self.carry.extend_from_slice(chunk);
        let Some(text) = sse::utf8_prefix(&self.carry) else {
            self.carry.clear();
            return false;
        };
        let (methods, consumed) = stream_notifications(text);
        self.carry.drain(..consumed.min(self.carry.len()));
        if self.carry.len() > MAX_CARRY {
            self.carry.clear();
        }
        methods.iter().any(|m| m == TOOLS_LIST_CHANGED)
    }
}

/// A header value as MCP's transport writes it: as it is when it is printable ASCII without
/// white space at its ends, else `=?base64?…?=` (the SDK decodes both).
pub fn header_value(value: &str) -> String {
    let plain = value.bytes().all(|b| (0x20..0x7f).contains(&b))
        && value.trim() == value
        && !(value.starts_with("=?base64?") && value.ends_with("?="));
    if plain {
        return value.to_owned();
    }
    base64_sentinel(value)
}

/// `value` as a `=?base64?…?=` header value, the form a client may use for any value.
fn base64_sentinel(value: &str) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::from("=?base64?");
    for chunk in value.as_bytes().chunks(3) {
        let b = [
            chunk.first().copied().unwrap_or(0),
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18u32, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                let index = ((n >> shift) & 63) as usize;
                out.push(char::from(ALPHABET.get(index).copied().unwrap_or(b'A')));
            } else {
                out.push('=');
            }
        }
    }
    out.push_str("?=");
    out
}

/// The 2026-07-28 routing headers a request came with: `Mcp-Method` and `Mcp-Name` (absent, or
/// not text: `None`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoutingHeaders {
    pub method: Option<String>,
    pub name: Option<String>,
    /// Whether the request carries `Mcp-Param-*` headers (a `tools/call` mirrors declared
    /// arguments in them).
    pub params: bool,
}

/// Where a request's routing headers disagree with its body, as the error message the server
/// would answer (`HeaderMismatch`); `None` when they agree, or when the request has none
/// (revisions before 2026-07-28). The `Mcp-Name` of a name-bearing method must equal its
/// `params` member, plainly or base64-encoded; a request whose `params` cannot be read is left
/// to the server.
pub fn routing_mismatch(routing: &RoutingHeaders, request: &Request) -> Option<&'static str> {
    let method = routing.method.as_deref()?;
    if method != request.method {
        return Some("Mcp-Method header does not match the request body's method");
    }
    let params = request.params()?;
    let named = match request.method.as_str() {
        "tools/call" | "prompts/get" => params.name,
        "resources/read" => params.uri,
        _ => return None,
    };
    let value = named?;
    let agrees = routing
        .name
        .as_deref()
        .is_some_and(|h| h == header_value(&value) || h == base64_sentinel(&value));
    (!agrees).then_some("Mcp-Name header does not match the request body's name")
}

/// The method of the server's list-changed notification for tools.
pub const TOOLS_LIST_CHANGED: &str = "notifications/tools/list_changed";

#[cfg(test)]
mod tests {
    use super::*;

    fn request(body: &str) -> Request {
        match incoming(body.as_bytes()) {
            Incoming::Request(r) => r,
            Incoming::Other => panic!("not a request: {body}"),
        }
    }

    #[test]
    fn reads_one_request() {
        let r = request(r#"{"jsonrpc":"2.0","id":7,"method":"tools/list"}"#);
        assert_eq!(
            (r.id.as_str(), r.method.as_str(), r.params),
            ("7", "tools/list", None)
        );
        let r = request(
            r#"{"jsonrpc":"2.0","id":"a\"b","method":"tools/call","params":{"name":"find_tools","arguments":{"query":"x"},"_meta":{"k":1}}}"#,
        );
        assert_eq!(r.id, r#""a\"b""#);
        let p = r.params().unwrap();
        assert_eq!(p.name.as_deref(), Some("find_tools"));
        assert_eq!(p.arguments.as_deref(), Some(r#"{"query":"x"}"#));
        assert_eq!(p.meta.as_deref(), Some(r#"{"k":1}"#));
        // Escaped member names and names are decoded.
        let r = request(
            r#"{"jsonrpc":"2.0","id":1,"method":"tools\/call","params":{"name":"a\u0062"}}"#,
        );
        assert_eq!(r.method, "tools/call");
        assert_eq!(r.params().unwrap().name.as_deref(), Some("ab"));
    }

    #[test]
    fn everything_else_passes() {
        for body in [
            "",
            "null",
            "[]",
            "\u{0}",
            "{",
            r#"[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
            r#"{"jsonrpc":"1.0","id":1,"method":"tools/list"}"#,
            r#"{"id":1,"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","id":{},"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":5}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":[1]}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"} trailing"#,
        ] {
            assert_eq!(incoming(body.as_bytes()), Incoming::Other, "{body}");
        }
        assert_eq!(
            incoming(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}"),
            Incoming::Other
        );
    }

    #[test]
    fn screens_what_is_not_one_request() {
        for body in [
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#,
            r#"{"jsonrpc":"2.0","id":"s-1","error":{"code":-1,"message":"no"}}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"initialize"}"#,
            r#"[{"jsonrpc":"2.0","method":"notifications/initialized"},{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
            "[]",
        ] {
            assert_eq!(screen(body.as_bytes()), Screened::Harmless, "{body}");
        }
        for body in [
            r#"[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]"#,
            r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x"}}]"#,
            r#"[{"jsonrpc":"2.0","id":1,"method":"ping","method":"tools/call"}]"#,
            r#"[1]"#,
            r#"[{"jsonrpc":"2.0","method":7}]"#,
        ] {
            assert_eq!(screen(body.as_bytes()), Screened::Batch, "{body}");
        }
        for body in [
            "",
            "{",
            "null",
            "[{]",
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","method":"tools/call"}"#,
            r#"{"jsonrpc":"2.0","id":1,"m\u0065thod":"tools/call"}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"x"}}"#,
            r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools\/list","params":[]}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{},"result":{}}"#,
        ] {
            assert_eq!(screen(body.as_bytes()), Screened::Unreadable, "{body}");
        }
        assert_eq!(screen(b"{\"method\":\"\xff\"}"), Screened::Unreadable);
        // An escaped member name is the member: a request with it is read as one.
        assert!(matches!(
            incoming(br#"{"jsonrpc":"2.0","id":1,"m\u0065thod":"tools/list"}"#),
            Incoming::Request(r) if r.method == "tools/list"
        ));
    }

    #[test]
    fn params_of_the_wrong_types_are_none() {
        for params in [
            r#"{"name":1}"#,
            r#"{"name":["a"]}"#,
            r#"{"arguments":"{}"}"#,
            r#"{"_meta":[]}"#,
            r#"{"cursor":{}}"#,
            r#"{"name":"a","name":"b"}"#,
        ] {
            let body =
                format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{params}}}"#);
            assert_eq!(request(&body).params(), None, "{params}");
        }
        let nulls = request(
            r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"name":null,"arguments":null}}"#,
        );
        assert_eq!(nulls.params(), Some(Params::default()));
    }

    #[test]
    fn reads_json_and_sse_answers() {
        let json = server_reply(
            "application/json",
            br#"{"jsonrpc":"2.0","id":"t1","result":{"tools":[]}}"#,
            r#""t1""#,
        );
        assert_eq!(
            json.outcome,
            Some(Outcome::Result(r#"{"tools":[]}"#.into()))
        );
        let sse = "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\n\
                   : ping\n\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":3,\"error\":{\"code\":-1,\"message\":\"x\"}}\n\n";
        let reply = server_reply("text/event-stream", sse.as_bytes(), "3");
        assert_eq!(reply.notifications, [TOOLS_LIST_CHANGED]);
        assert_eq!(
            reply.outcome,
            Some(Outcome::Error(r#"{"code":-1,"message":"x"}"#.into()))
        );
        // The last event without its blank line still counts.
        let cut = "data: {\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{}}";
        assert!(
            server_reply("text/event-stream", cut.as_bytes(), "3")
                .outcome
                .is_some()
        );
    }

    #[test]
    fn hostile_answers_read_as_nothing() {
        for (ct, body) in [
            ("application/json", &b""[..]),
            ("application/json", b"\xff\xfe"),
            ("application/json", b"[1,2]"),
            (
                "application/json",
                br#"{"jsonrpc":"2.0","id":4,"result":{}}"#,
            ),
            (
                "application/json",
                br#"{"jsonrpc":"2.0","id":3,"result":{},"error":{}}"#,
            ),
            ("application/json", br#"{"jsonrpc":"2.0","id":3}"#),
            ("text/event-stream", b"data: {\n\ndata: \xff\n\n"),
            ("text/event-stream", b"\n\n\n\r\n:::\n"),
            ("text/html", b"<html>"),
        ] {
            assert_eq!(server_reply(ct, body, "3").outcome, None, "{body:?}");
        }
        // Ids compare as JSON values: "3" the string is not 3 the number.
        assert_eq!(
            server_reply("application/json", br#"{"id":"3","result":{}}"#, "3").outcome,
            None
        );
        assert!(
            server_reply("application/json", br#"{"id":3.0,"result":{}}"#, "3")
                .outcome
                .is_none()
        );
    }

    #[test]
    fn header_values_are_plain_or_base64() {
        assert_eq!(header_value("get_weather"), "get_weather");
        assert_eq!(header_value("héllo"), "=?base64?aMOpbGxv?=");
        assert_eq!(header_value(" a"), "=?base64?IGE=?=");
        assert_eq!(header_value("a\r\nb"), "=?base64?YQ0KYg==?=");
        assert_eq!(header_value("=?base64?x?="), "=?base64?PT9iYXNlNjQ/eD89?=");
        assert_eq!(header_value(""), "");
    }

    #[test]
    fn routing_headers_must_agree_with_the_body() {
        let request = |body: &str| match incoming(body.as_bytes()) {
            Incoming::Request(r) => r,
            Incoming::Other => panic!("not a request: {body}"),
        };
        let routing = |method: Option<&str>, name: Option<&str>| RoutingHeaders {
            method: method.map(str::to_owned),
            name: name.map(str::to_owned),
            params: false,
        };
        let call =
            request(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"héllo"}}"#);
        let list = request(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#);
        let read = request(
            r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"toolsift://capabilities"}}"#,
        );
        // Before 2026-07-28 there is nothing to compare.
        assert_eq!(routing_mismatch(&routing(None, Some("x")), &call), None);
        assert_eq!(
            routing_mismatch(&routing(Some("tools/list"), None), &list),
            None
        );
        let encoded = Some("=?base64?aMOpbGxv?=");
        assert_eq!(
            routing_mismatch(&routing(Some("tools/call"), encoded), &call),
            None
        );
        let tools_read = routing(Some("resources/read"), Some("toolsift://capabilities"));
        assert_eq!(routing_mismatch(&tools_read, &read), None);
        // Any name may be sent encoded.
        let plain =
            request(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get"}}"#);
        let both = [Some("get"), Some("=?base64?Z2V0?=")];
        for name in both {
            assert_eq!(
                routing_mismatch(&routing(Some("tools/call"), name), &plain),
                None
            );
        }
        let method = Some("Mcp-Method header does not match the request body's method");
        let name = Some("Mcp-Name header does not match the request body's name");
        assert_eq!(
            routing_mismatch(&routing(Some("tools/list"), None), &call),
            method
        );
        assert_eq!(
            routing_mismatch(&routing(Some("tools/call"), Some("x")), &list),
            method
        );
        assert_eq!(
            routing_mismatch(&routing(Some("tools/call"), None), &call),
            name
        );
        assert_eq!(
            routing_mismatch(&routing(Some("tools/call"), Some("hello")), &call),
            name
        );
        assert_eq!(
            routing_mismatch(&routing(Some("tools/call"), Some("get ")), &plain),
            name
        );
        assert_eq!(
            routing_mismatch(&routing(Some("tools/call"), Some("=?base64?Z2V0?")), &plain),
            name
        );
        // Unreadable params: the server judges.
        let odd = request(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":7}}"#);
        assert_eq!(
            routing_mismatch(&routing(Some("tools/call"), Some("7")), &odd),
            None
        );
    }

    #[test]
    fn watches_a_stream_cut_anywhere() {
        let stream = "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n\
                      event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\n";
        for cut in 0..stream.len() {
            let mut watch = StreamWatch::default();
            let seen =
                watch.feed(&stream.as_bytes()[..cut]) | watch.feed(&stream.as_bytes()[cut..]);
            assert!(seen, "cut at {cut}");
        }
        let mut watch = StreamWatch::default();
        assert!(!watch.feed(b"\xff\xfe data: x\n\n"));
        assert!(!watch.feed(&vec![b'a'; MAX_CARRY + 1]));
        assert!(watch.carry.is_empty());
    }

    #[test]
    fn notifications_in_a_passing_stream() {
        let text = "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\ndata: {\"jsonrpc\"";
        let (methods, used) = stream_notifications(text);
        assert_eq!(methods, [TOOLS_LIST_CHANGED]);
        assert_eq!(&text[used..], "data: {\"jsonrpc\"");
    }
}
