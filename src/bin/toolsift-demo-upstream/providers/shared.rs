//! What the providers have in common: reading a request lazily (and the rejection a bad one
//! gets), the conversation helpers their checks use, the pieces streams are cut into, SSE
//! framing, and the one writer of error answers, which takes the provider's error shape.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;

use bytes::Bytes;
use hyper::header::HeaderValue;
use hyper::{Response, StatusCode};
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::Value;
use serde_json::error::Category;
use serde_json::value::RawValue;

use super::{History, Provider};
use crate::{ReplyBody, json_response};

// ---------------------------------------------------------------------------------------------
// Rejections and errors
// ---------------------------------------------------------------------------------------------

/// Why a request is refused: a message, and for OpenAI-style errors the offending parameter
/// and an error code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Rejection {
    pub(crate) message: String,
    pub(crate) param: Option<String>,
    pub(crate) code: Option<&'static str>,
    /// A failure the request asked for (`x-demo-fail-followup`) rather than a refusal of it:
    /// OpenAI-style bodies then carry the code their API gives the status.
    pub(crate) asked_failure: bool,
}

impl Rejection {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            param: None,
            code: None,
            asked_failure: false,
        }
    }

    /// `x-demo-fail-followup`'s error: the status the request asked for.
    pub(crate) fn failing(status: StatusCode) -> Self {
        let reason = status
            .canonical_reason()
            .map_or_else(String::new, |reason| format!(" {reason}"));
        let mut rejection = Self::new(format!(
            "demo upstream failing the follow-up with {}{reason} as asked",
            status.as_u16()
        ));
        rejection.asked_failure = true;
        rejection
    }

    pub(crate) fn at(mut self, path: &JsonPath<'_>) -> Self {
        self.param = Some(path.to_string());
        self
    }

    pub(crate) fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    pub(crate) fn missing(path: &JsonPath<'_>) -> Self {
        Self::new(format!("Missing required parameter: '{path}'.")).at(path)
    }

    pub(crate) fn wrong_type(path: &JsonPath<'_>, expected: &str, found: &RawValue) -> Self {
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
pub(crate) enum JsonPath<'p> {
    Root(&'static str),
    Member(&'p JsonPath<'p>, &'p str),
    Index(&'p JsonPath<'p>, usize),
}

impl<'p> JsonPath<'p> {
    pub(crate) fn member(&'p self, key: &'p str) -> Self {
        Self::Member(self, key)
    }

    pub(crate) fn index(&'p self, index: usize) -> Self {
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

/// An error answer in a provider's own shape: its body, and the header the API sends with its
/// errors, if any (Bedrock's `x-amzn-errortype`).
pub(crate) struct ErrorShape {
    pub(crate) body: Value,
    pub(crate) header: Option<(&'static str, &'static str)>,
}

/// The answer to a refused or failed request, in the shape of the provider it was meant for.
pub(crate) fn error_response(
    provider: &dyn Provider,
    status: StatusCode,
    rejection: &Rejection,
) -> Response<ReplyBody> {
    let shape = provider.error_shape(status, rejection);
    let mut response = json_response(status, &shape.body);
    if let Some((name, value)) = shape.header {
        response
            .headers_mut()
            .insert(name, HeaderValue::from_static(value));
    }
    response
}

// ---------------------------------------------------------------------------------------------
// Lazy JSON access: what the tool checks read
// ---------------------------------------------------------------------------------------------

pub(crate) fn parse_body(body: &[u8]) -> Result<RawObject<'_>, Rejection> {
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
pub(crate) struct Catalog<'a> {
    pub(crate) names: Vec<Cow<'a, str>>,
    /// Tools that have a name of their own (functions, custom tools); names must be unique.
    named: HashSet<Cow<'a, str>>,
}

impl<'a> Catalog<'a> {
    pub(crate) fn add_named(
        &mut self,
        name: Cow<'a, str>,
        path: &JsonPath<'_>,
    ) -> Result<(), Rejection> {
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
    pub(crate) fn add_builtin(&mut self, kind: Cow<'a, str>) {
        self.names.push(kind);
    }

    /// Checks that a tool choice names a tool of this request.
    pub(crate) fn require(&self, name: &str, path: &JsonPath<'_>) -> Result<(), Rejection> {
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
pub(crate) enum EmptyTools {
    Allowed,
    Rejected,
}

/// The entries of a tools array; `None` when the member is absent or null.
pub(crate) fn tool_entries<'a>(
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

/// A JSON object whose member values stay unparsed text, in document order. Only the members the
/// demo needs get parsed, so large `messages` arrays and tool schemas are scanned, never built
/// into trees. Keys borrow from the body unless they contain escapes.
pub(crate) struct RawObject<'a> {
    members: Vec<(Cow<'a, str>, &'a RawValue)>,
}

impl<'a> RawObject<'a> {
    /// A member's value; `None` when absent or `null` (the providers treat both alike). With
    /// duplicate keys the last wins, as in serde_json.
    pub(crate) fn get(&self, key: &str) -> Option<&'a RawValue> {
        self.members
            .iter()
            .rev()
            .find(|(name, _)| name == key)
            .map(|(_, value)| *value)
            .filter(|value| value.get() != "null")
    }

    /// Gemini's JSON accepts both the camelCase and the proto snake_case member names.
    pub(crate) fn get_either(&self, camel_case: &str, snake_case: &str) -> Option<&'a RawValue> {
        self.get(camel_case).or_else(|| self.get(snake_case))
    }

    /// The members whose value is not `null`, in document order.
    pub(crate) fn present_members(&self) -> impl Iterator<Item = &(Cow<'a, str>, &'a RawValue)> {
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

pub(crate) fn parse_object<'a>(
    raw: &'a RawValue,
    path: &JsonPath<'_>,
) -> Result<RawObject<'a>, Rejection> {
    serde_json::from_str(raw.get()).map_err(|_| Rejection::wrong_type(path, "an object", raw))
}

/// An array of objects, parsed in one pass: tool arrays are most of a large request.
pub(crate) fn parse_object_array<'a>(
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

pub(crate) fn required<'a>(
    object: &RawObject<'a>,
    key: &str,
    path: &JsonPath<'_>,
) -> Result<&'a RawValue, Rejection> {
    object
        .get(key)
        .ok_or_else(|| Rejection::missing(&path.member(key)))
}

pub(crate) fn required_string<'a>(
    object: &RawObject<'a>,
    key: &str,
    path: &JsonPath<'_>,
) -> Result<Cow<'a, str>, Rejection> {
    let raw = required(object, key, path)?;
    string_value(raw).ok_or_else(|| Rejection::wrong_type(&path.member(key), "a string", raw))
}

/// A JSON string's value, borrowed from the input unless it contains escapes; `None` for
/// anything but a string.
pub(crate) fn string_value(raw: &RawValue) -> Option<Cow<'_, str>> {
    let text = raw.get();
    match serde_json::from_str::<&str>(text) {
        Ok(borrowed) => Some(Cow::Borrowed(borrowed)),
        Err(_) => serde_json::from_str::<String>(text).ok().map(Cow::Owned),
    }
}

/// Whether a member is the literal `true` (a `RawValue` holds the value's text, trimmed).
pub(crate) fn is_true(raw: Option<&RawValue>) -> bool {
    raw.is_some_and(|raw| raw.get() == "true")
}

/// The JSON type of a raw value, named as in error messages; its first byte decides.
pub(crate) fn json_kind(raw: &RawValue) -> &'static str {
    match raw.get().as_bytes().first() {
        Some(b'{') => "an object",
        Some(b'[') => "an array",
        Some(b'"') => "a string",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        _ => "a number",
    }
}

// ---------------------------------------------------------------------------------------------
// Conversations: what the history checks read (parsed values: they walk every message)
// ---------------------------------------------------------------------------------------------

pub(crate) fn rejection(message: String, param: String) -> Rejection {
    let mut rejection = Rejection::new(message);
    rejection.param = Some(param);
    rejection
}

/// The conversation array `key` of the request, which must be there.
pub(crate) fn conversation<'a>(request: &'a Value, key: &str) -> Result<&'a [Value], Rejection> {
    match request.get(key) {
        Some(Value::Array(items)) => Ok(items),
        None | Some(Value::Null) => Err(rejection(
            format!("Missing required parameter: '{key}'."),
            key.to_owned(),
        )),
        Some(_) => Err(rejection(
            format!("Invalid type for '{key}': expected an array."),
            key.to_owned(),
        )),
    }
}

/// A string member that must be there.
pub(crate) fn required_str<'a>(
    object: &'a Value,
    key: &str,
    path: &str,
) -> Result<&'a str, Rejection> {
    object.get(key).and_then(Value::as_str).ok_or_else(|| {
        rejection(
            format!("Missing required parameter: '{path}.{key}'."),
            format!("{path}.{key}"),
        )
    })
}

/// The array of a member, empty when absent or of another type.
pub(crate) fn items<'a>(object: &'a Value, key: &str) -> &'a [Value] {
    array(object.get(key))
}

/// A message's text: a string content, or its text parts (those of `kinds`, or every part with
/// a `text` string when `kinds` is empty) joined with spaces; `None` if there is none.
pub(crate) fn text_of(content: Option<&Value>, kinds: &[&str]) -> Option<String> {
    let texts: Vec<&str> = match content? {
        Value::String(text) => vec![text.as_str()],
        Value::Array(parts) => parts
            .iter()
            .filter(|part| {
                kinds.is_empty()
                    || part
                        .get("type")
                        .and_then(Value::as_str)
                        .is_some_and(|kind| kinds.contains(&kind))
            })
            .filter_map(|part| part.get("text").and_then(Value::as_str))
            .collect(),
        _ => Vec::new(),
    };
    let text = texts.join(" ");
    (!text.trim().is_empty()).then_some(text)
}

pub(crate) fn role(message: &Value) -> &str {
    message
        .get("role")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// A tool's `type`.
pub(crate) fn type_of(tool: &Value) -> Option<&str> {
    tool.get("type").and_then(Value::as_str)
}

/// The elements of an array value; none when absent or of another type.
pub(crate) fn array(value: Option<&Value>) -> &[Value] {
    value.and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

/// One message of a conversation, as the pairing of tool calls and results sees it.
pub(crate) enum Exchange {
    /// The model's turn: the keys of its calls (their ids, or their names where calls have
    /// none).
    Calls(Vec<String>),
    /// Any other turn: the results it holds, and its text.
    Results {
        results: Vec<ToolResult>,
        /// More results for the same calls may come in the next message (Chat and Ollama send
        /// one message per result); elsewhere this message must answer every call.
        more_may_follow: bool,
        text: Option<String>,
    },
}

impl Exchange {
    /// A turn that answers no call, with its text if any.
    pub(crate) fn text(text: Option<String>) -> Self {
        Self::Results {
            results: Vec::new(),
            more_may_follow: false,
            text,
        }
    }
}

/// A tool result: the key of the call it answers, and where it is (for the error).
pub(crate) struct ToolResult {
    pub(crate) key: String,
    pub(crate) path: String,
}

/// The rule of every provider but OpenAI Responses: the calls of a model turn must each be
/// answered by the results right after it, and each result must answer one of those calls
/// (each call once). `read` says what a message holds; `unanswered` words the error for calls
/// left without results (the index of their turn, their keys), `stray` the one for a result
/// that answers none (its path, its key).
pub(crate) fn pair_calls(
    messages: &[Value],
    read: impl Fn(usize, &Value) -> Result<Exchange, Rejection>,
    unanswered: impl Fn(usize, &[String]) -> Rejection,
    stray: impl Fn(&str, &str) -> Rejection,
) -> Result<History, Rejection> {
    let mut history = History::default();
    // The keys of the latest model turn's calls not answered yet, and that turn's index.
    let mut pending: Vec<String> = Vec::new();
    let mut calls_at = 0;
    let all_answered = |pending: &[String], calls_at: usize| {
        if pending.is_empty() {
            Ok(())
        } else {
            Err(unanswered(calls_at, pending))
        }
    };
    for (index, message) in messages.iter().enumerate() {
        match read(index, message)? {
            Exchange::Calls(keys) => {
                all_answered(&pending, calls_at)?;
                pending = keys;
                calls_at = index;
            }
            Exchange::Results {
                results,
                more_may_follow,
                text,
            } => {
                for result in results {
                    let Some(at) = pending.iter().position(|key| *key == result.key) else {
                        return Err(stray(&result.path, &result.key));
                    };
                    pending.remove(at);
                    history.tool_results += 1;
                }
                if !more_may_follow {
                    all_answered(&pending, calls_at)?;
                }
                if text.is_some() {
                    history.user_text = text;
                }
            }
        }
    }
    all_answered(&pending, calls_at)?;
    Ok(history)
}

// ---------------------------------------------------------------------------------------------
// Streams
// ---------------------------------------------------------------------------------------------

/// A text in stream deltas: one per word, each after the first with its leading space.
pub(crate) fn text_pieces(text: &str) -> Vec<String> {
    let mut pieces: Vec<String> = Vec::new();
    for (index, word) in text.split(' ').enumerate() {
        match pieces.last_mut() {
            // Runs of spaces stay in one piece rather than making empty deltas.
            Some(last) if word.is_empty() => last.push(' '),
            Some(_) if index > 0 => pieces.push(format!(" {word}")),
            _ => pieces.push(word.to_owned()),
        }
    }
    pieces.retain(|piece| !piece.is_empty());
    pieces
}

/// Argument text in stream deltas: up to three pieces cut at character boundaries, so any text
/// of two characters or more (every JSON object) comes in at least two.
pub(crate) fn argument_pieces(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let size = chars.len().div_ceil(3).max(1);
    chars
        .chunks(size)
        .map(|piece| piece.iter().collect())
        .collect()
}

pub(crate) fn sse_event(name: Option<&str>, data: &Value) -> Bytes {
    let event = match name {
        Some(name) => format!("event: {name}\ndata: {data}\n\n"),
        None => format!("data: {data}\n\n"),
    };
    Bytes::from(event)
}

pub(crate) fn with_member(object: &mut Value, key: &str, value: Value) {
    if let Some(object) = object.as_object_mut() {
        object.insert(key.to_owned(), value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_split_texts_and_arguments() {
        assert_eq!(text_pieces("Let me look"), ["Let", " me", " look"]);
        assert_eq!(text_pieces("one"), ["one"]);
        assert_eq!(text_pieces("a  b").concat(), "a  b");
        assert_eq!(argument_pieces("{}"), ["{", "}"]);
        assert_eq!(argument_pieces(r#"{"a":1}"#).concat(), r#"{"a":1}"#);
        assert_eq!(argument_pieces(r#"{"a":1}"#).len(), 3);
        assert_eq!(argument_pieces("{\"é\":\"ü\"}").concat(), "{\"é\":\"ü\"}");
    }
}
