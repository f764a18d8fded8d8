//! What several dialects share: message text, called tools, tool schemas ([`schema`]),
//! byte-preserving JSON edits ([`splice`]), tool calls edited in place ([`calls`]) and the
//! loop guard's note added to a tool result ([`note`]).

pub mod calls;
pub(crate) mod note;
pub mod schema;
pub mod splice;

use serde::Deserialize;
use serde_json::value::RawValue;

/// The tool calls of a conversation, as every dialect reads them: each called tool once, in
/// first-call order (selection keeps them), the current task's calls with their arguments
/// (the loop guard reads them), and the names the model called in its latest turn (unknown
/// tools are counted from them, once per call).
#[derive(Debug)]
pub(crate) struct History<'t> {
    /// The text the dialect reads: the calls' arguments are places in it.
    text: &'t str,
    pub called: Vec<String>,
    pub task: Vec<crate::loop_guard::PastCall>,
    pub latest: Vec<String>,
    /// The turn `latest` is from.
    latest_turn: Option<usize>,
}

impl<'t> History<'t> {
    pub(crate) fn new(text: &'t str) -> History<'t> {
        History {
            text,
            called: Vec::new(),
            task: Vec::new(),
            latest: Vec::new(),
            latest_turn: None,
        }
    }

    /// A call of `name` with `arguments` (a JSON value, or a string holding JSON as OpenAI
    /// sends them; absent: none), borrowed from the text, made in the turn at `turn` (the
    /// index of its message, or of its turn's first item). It is part of the current task
    /// when it comes after `question`, the latest user message with text.
    pub(crate) fn call(
        &mut self,
        name: &str,
        arguments: Option<&RawValue>,
        turn: usize,
        question: Option<usize>,
    ) {
        if !self.called.iter().any(|c| c == name) {
            self.called.push(name.to_owned());
        }
        if in_task(turn, question) {
            self.task.push(crate::loop_guard::PastCall {
                name: name.to_owned(),
                arguments: arguments.and_then(|raw| crate::json::span_in(self.text, raw.get())),
            });
            if self.latest_turn != Some(turn) {
                self.latest_turn = Some(turn);
                self.latest.clear();
            }
            self.latest.push(name.to_owned());
        }
    }
}

/// The user's turns of a conversation, as every dialect reads them.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Asked {
    /// Where the current task starts: the index of the latest user message with text.
    pub at: Option<usize>,
    /// That message's text (empty when there is none).
    pub latest: String,
    /// The texts of the user messages before it, most recent first, at most
    /// [`super::MAX_EARLIER_TURNS`]: what a follow-up is ranked with ([`crate::followup`]).
    pub earlier: Vec<String>,
    /// The text of the assistant's message just before it, if that is the assistant's and
    /// has text (a message of tool calls alone, or a tool result, has none), its last
    /// [`crate::dialects::MAX_ASSISTANT_BYTES`]: what the latest text may answer.
    pub assistant: Option<String>,
}

/// The user's turns of `messages`: `text` gives a message's text if it is a user's (`None`
/// for any other role); messages whose text is blank are no turn. `said` gives a message's
/// text if it is the assistant's.
pub(crate) fn asked<T>(
    messages: &[T],
    text: impl Fn(&T) -> Option<String>,
    said: impl Fn(&T) -> Option<String>,
) -> Asked {
    let mut turns = messages
        .iter()
        .enumerate()
        .rev()
        .filter_map(|(at, m)| text(m).map(|t| (at, t)))
        .filter(|(_, t)| !t.trim().is_empty());
    let Some((at, latest)) = turns.next() else {
        return Asked::default();
    };
    let assistant = at
        .checked_sub(1)
        .and_then(|before| messages.get(before))
        .and_then(said)
        .filter(|t| !t.trim().is_empty())
        .map(|t| {
            let max = crate::dialects::MAX_ASSISTANT_BYTES;
            if t.len() <= max {
                t
            } else {
                crate::text::tail(&t, max).to_owned()
            }
        });
    Asked {
        at: Some(at),
        latest,
        earlier: turns
            .take(super::MAX_EARLIER_TURNS)
            .map(|(_, t)| t)
            .collect(),
        assistant,
    }
}

/// A user message's text (`keys`: see [`content_text`]); `None` for any other role.
pub(crate) fn user_text(
    role: Option<&str>,
    content: Option<&RawValue>,
    keys: &[&str],
) -> Option<String> {
    role_text("user", role, content, keys)
}

/// The text of a message of `role` (`keys`: see [`content_text`]); `None` for any other role.
pub(crate) fn role_text(
    wanted: &str,
    role: Option<&str>,
    content: Option<&RawValue>,
    keys: &[&str],
) -> Option<String> {
    (role == Some(wanted))
        .then(|| content.map(|c| content_text(c, keys)))
        .flatten()
}

/// Whether the message at `at` comes after the question at `question`.
/// The first of `fields` that is a non-empty string (a field of another type names nothing).
pub(crate) fn first_text(fields: &[Option<&RawValue>]) -> Option<String> {
    fields
        .iter()
        .flatten()
        .filter_map(|raw| crate::json::parse::<crate::json::Str>(raw))
        .find(|text| !text.trim().is_empty())
        .map(std::borrow::Cow::into_owned)
}

pub(crate) fn in_task(at: usize, question: Option<usize>) -> bool {
    question.is_none_or(|q| at > q)
}

/// A text part of a message in any dialect (`{"type":"text","text":…}`, `{"text":…}`).
#[derive(Deserialize)]
pub(crate) struct TextPart<'a> {
    #[serde(borrow, default, rename = "type")]
    pub kind: Option<crate::json::Str<'a>>,
    #[serde(borrow, default)]
    pub text: Option<crate::json::Str<'a>>,
}

/// Text of a message content that is either a string or an array of parts; parts of the types
/// in `text_types` (or untyped parts with `text`) count, everything else (images, files, tool
/// results) is ignored.
pub(crate) fn content_text(content: &RawValue, text_types: &[&str]) -> String {
    if let Ok(s) = serde_json::from_str::<crate::json::Str>(content.get()) {
        return s.into_owned();
    }
    let Ok(parts) = serde_json::from_str::<Vec<TextPart>>(content.get()) else {
        return String::new();
    };
    let mut out = String::new();
    for part in parts {
        let typed_text = match part.kind.as_deref() {
            None => true,
            Some(t) => text_types.contains(&t),
        };
        if let (true, Some(text)) = (typed_text, part.text) {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(&text);
        }
    }
    out
}

/// The name access rules govern a provider built-in entry by (an entry the dialect does not
/// read as a function tool): its `name` (Anthropic's `bash`, a Responses `custom` tool), else
/// its `type` (`web_search`, `code_interpreter`, `mcp`), else, for an object of one member,
/// that member's key (Gemini's `googleSearch`); `None` when it has none of them.
pub(crate) fn builtin_name(entry: &str) -> Option<String> {
    let object: serde_json::Map<String, serde_json::Value> = serde_json::from_str(entry).ok()?;
    let text = |key: &str| object.get(key).and_then(serde_json::Value::as_str);
    if let Some(name) = text("name").or_else(|| text("type")) {
        return Some(name.to_owned());
    }
    let mut keys = object.keys();
    match (keys.next(), keys.next()) {
        (Some(only), None) => Some(only.clone()),
        _ => None,
    }
}

/// The array at `path` of `body` (the last one, as providers read a repeated key), its span
/// and its items' in body offsets; `None` when there is none.
pub(crate) fn array_at(body: &str, path: &[&str]) -> Option<crate::json::ArrayLayout> {
    let span = crate::json::find_path(body, path)?;
    let items = crate::json::array_item_spans(body.get(span.clone())?)?;
    let at = span.start;
    Some(crate::json::ArrayLayout {
        items: items
            .into_iter()
            .map(|r| r.start + at..r.end + at)
            .collect(),
        span,
    })
}

/// Whether `body` may hold one of `words` in a key or string: spelled out, or written with a
/// `\u` escape (the only way a JSON text can escape a letter). A body that holds none need
/// not be read for them: a cheap scan where a structural one would cost more.
pub(crate) fn may_mention(body: &str, words: &[&str]) -> bool {
    let has = |needle: &str| memchr::memmem::find(body.as_bytes(), needle.as_bytes()).is_some();
    words.iter().any(|w| has(w)) || has("\\u")
}

/// The host of a URL, lower case, without user, port, path or query (`https://u@API.x.com:8443/p`
/// gives `api.x.com`; an IPv6 literal keeps its brackets); empty when it has none.
pub(crate) fn url_host(url: &str) -> String {
    let rest = url.trim();
    let rest = rest.split_once("://").map_or(rest, |(_, r)| r);
    // A backslash ends the authority too, as WHATWG URL parsers read `https://a\\@b/`.
    let authority = rest.split(['/', '?', '#', '\\']).next().unwrap_or_default();
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if host.starts_with('[') {
        host.split_inclusive(']').next().unwrap_or_default()
    } else {
        host.split(':').next().unwrap_or_default()
    };
    host.to_ascii_lowercase()
}

/// A JSON array of strings, as a list; `None` for any other value.
pub(crate) fn names(value: &serde_json::Value) -> Option<Vec<String>> {
    value
        .as_array()?
        .iter()
        .map(|v| v.as_str().map(str::to_owned))
        .collect()
}

/// A JSON object's members as a parser that keeps the last of a repeated key reads them;
/// empty when `text` is no object.
pub(crate) fn object(text: &str) -> serde_json::Map<String, serde_json::Value> {
    serde_json::from_str(text).unwrap_or_default()
}

/// `entry` (a JSON object's text) with member `key` of its member object `parent` set to
/// `value` (JSON text); `parent` is added (or replaces a value that is no object) when it is
/// not an object. Every other byte is kept.
pub(crate) fn set_nested_member(
    entry: &str,
    parent: &str,
    key: &str,
    value: &str,
) -> Option<String> {
    use splice::{apply_patches, set_member};
    let whole = entry.len() - entry.trim_start().len()..entry.trim_end().len();
    let patch = match crate::json::find_path(entry, &[parent]) {
        Some(at) if entry.get(at.clone())?.starts_with('{') => set_member(entry, at, key, value)?,
        _ => {
            let object = format!("{{{}:{value}}}", splice::json_string(key));
            set_member(entry, whole, parent, &object)?
        }
    };
    apply_patches(entry, vec![patch])
}

/// The `type` of a built-in entry, its JSON string as written (quotes included), if it has one.
pub(crate) fn entry_type(entry: &str) -> Option<&str> {
    crate::json::find_path(entry, &["type"]).and_then(|r| entry.get(r))
}

/// A provider's own tool search tool (Anthropic `tool_search_tool_bm25_*` /
/// `tool_search_tool_regex_*`, OpenAI Responses `tool_search`): the request asks the provider
/// to search its tools.
pub(crate) fn is_search_tool(entry: &str) -> bool {
    entry_type(entry).is_some_and(|t| t.starts_with("\"tool_search"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn mentions_are_found_spelled_out_or_escaped() {
        use super::may_mention;
        assert!(may_mention(r#"{"tools":[{"type":"mcp"}]}"#, &["mcp"]));
        assert!(may_mention(r#"{"tools":[{"type":"m\u0063p"}]}"#, &["mcp"]));
        assert!(!may_mention(
            r#"{"tools":[{"type":"function","name":"m\ncp"}]}"#,
            &["mcp"]
        ));
    }

    #[test]
    fn url_hosts() {
        use super::url_host;
        assert_eq!(
            url_host("https://u:p@API.Example.com:8443/mcp?x=1"),
            "api.example.com"
        );
        assert_eq!(url_host("https://mcp.example.com"), "mcp.example.com");
        assert_eq!(url_host("http://[::1]:8080/sse"), "[::1]");
        assert_eq!(url_host("mcp.example.com/x"), "mcp.example.com");
        assert_eq!(url_host("https://evil.com#@good.com"), "evil.com");
        assert_eq!(url_host("https://evil.com\\@good.com/"), "evil.com");
        assert_eq!(url_host(""), "");
    }

    #[test]
    fn nested_members_are_set_in_place() {
        use super::set_nested_member;
        let set = |e: &str| set_nested_member(e, "cfg", "list", r#"["a"]"#).unwrap();
        assert_eq!(
            set(r#"{"x":1, "cfg":{"on":true}}"#),
            r#"{"x":1, "cfg":{"on":true,"list":["a"]}}"#
        );
        assert_eq!(set(r#"{"cfg":{"list":[]}}"#), r#"{"cfg":{"list":["a"]}}"#);
        assert_eq!(set(r#"{"x":1}"#), r#"{"x":1,"cfg":{"list":["a"]}}"#);
        assert_eq!(set(r#"{"cfg":null}"#), r#"{"cfg":{"list":["a"]}}"#);
    }

    #[test]
    fn built_ins_are_named_by_name_type_or_their_only_member() {
        use super::builtin_name;
        assert_eq!(
            builtin_name(r#"{"type":"bash_20250124","name":"bash"}"#).as_deref(),
            Some("bash")
        );
        assert_eq!(
            builtin_name(r#"{"type":"web_search"}"#).as_deref(),
            Some("web_search")
        );
        assert_eq!(
            builtin_name(r#"{"googleSearch":{}}"#).as_deref(),
            Some("googleSearch")
        );
        assert_eq!(builtin_name(r#"{"a":1,"b":2}"#), None);
        assert_eq!(builtin_name("[1]"), None);
    }

    use super::*;

    #[test]
    fn asked_reads_the_latest_user_turn_and_those_before_it() {
        let m = |role: &'static str, text: &'static str| (role, text);
        let text = |(role, text): &(&str, &str)| (*role == "user").then(|| (*text).to_owned());
        let messages = [
            m("user", "first"),
            m("user", "second"),
            m("assistant", "Shall I?"),
            m("user", " "),
            m("user", "third"),
            m("assistant", "Shall I go ahead?"),
            m("user", "Yes"),
            m("tool", "result"),
        ];
        let said = |(role, text): &(&str, &str)| (*role == "assistant").then(|| (*text).to_owned());
        let a = asked(&messages, text, said);
        assert_eq!(a.at, Some(6));
        assert_eq!(a.latest, "Yes");
        assert_eq!(a.earlier, ["third", "second", "first"]);
        assert_eq!(a.assistant.as_deref(), Some("Shall I go ahead?"));
        // Only the message just before the latest turn: a tool result between is no answer.
        let after_tools = [
            m("assistant", "Shall I?"),
            m("tool", "ok"),
            m("user", "Yes"),
        ];
        assert_eq!(asked(&after_tools, text, said).assistant, None);
        let blank = [m("assistant", " "), m("user", "Yes")];
        assert_eq!(asked(&blank, text, said).assistant, None);
        let long = format!("{}Shall I go ahead?", "x ".repeat(1000));
        let long = [("assistant", long.as_str()), m("user", "Yes")];
        let kept = asked(&long, text, said).assistant.unwrap();
        assert!(kept.len() <= crate::dialects::MAX_ASSISTANT_BYTES);
        assert!(kept.ends_with("Shall I go ahead?"));
        let mut many = vec![m("user", "q"); 10];
        many.push(m("user", "last"));
        assert_eq!(
            asked(&many, text, said).earlier.len(),
            crate::dialects::MAX_EARLIER_TURNS
        );
        assert_eq!(asked(&[m("tool", "x")], text, said), Asked::default());
    }

    #[test]
    fn content_text_reads_strings_and_text_parts() {
        let raw = |s: &str| RawValue::from_string(s.to_owned()).unwrap();
        assert_eq!(
            content_text(&raw(r#""hi \"there\"""#), &["text"]),
            "hi \"there\""
        );
        let parts = raw(
            r#"[{"type":"text","text":"a"},{"type":"image_url","image_url":{}},{"type":"text","text":"b"}]"#,
        );
        assert_eq!(content_text(&parts, &["text"]), "a\nb");
        let bedrock = raw(r#"[{"text":"c"},{"image":{}}]"#);
        assert_eq!(content_text(&bedrock, &["text"]), "c");
        assert_eq!(content_text(&raw("42"), &["text"]), "");
    }
}

/// What the dialects' tests share: a refusal written and read back by the dialect's reader.
#[cfg(test)]
pub(crate) mod testing {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use crate::dialects::Codec;
    use crate::search::{Edits, Reply};

    /// The words the tests refuse with.
    pub(crate) const REFUSAL: &str = "Tool `get_weather` is not available.";

    /// `body` with the loop guard's note `Stop "now".` on the latest result of `tool`, as the
    /// dialect writes it; still JSON, and changed by one insertion (or a `null` replaced).
    pub(crate) fn noted(codec: &dyn Codec, body: &str, tool: &str) -> Option<String> {
        let (at, text) = codec.note_result(body, tool, "Stop \"now\".")?;
        let replaced = body.get(at.clone()).unwrap();
        assert!(replaced.is_empty() || replaced == "null", "{replaced}");
        let out = crate::json::splice(body, at, &text).unwrap();
        serde_json::from_str::<serde_json::Value>(&out).unwrap();
        Some(out)
    }

    /// `answer` (whole, or a stream in the codec's framing) with the calls `drop` names
    /// replaced by [`REFUSAL`], read back by the dialect's own reader: the dropped calls are
    /// gone, the words are in the turn, and a stream is still whole events. Returns the text
    /// the client would get and what its reader sees.
    pub(crate) fn refused(
        codec: &dyn Codec,
        answer: &str,
        stream: bool,
        drop: &[&str],
    ) -> (String, Reply) {
        let edits = Edits {
            drop: drop.iter().map(|d| (*d).to_owned()).collect(),
            text: Some(REFUSAL.to_owned()),
            ..Edits::default()
        };
        let framing = codec.framing();
        let (out, reply) = if stream {
            let frames = framing.frames(answer).0;
            let out = codec.finish_stream(&frames, &edits).unwrap();
            let (again, used) = framing.frames(&out);
            assert_eq!(used, out.len(), "whole events: {out}");
            let reply = codec.read_stream(&again).unwrap();
            (out, reply)
        } else {
            let out = codec.finish_reply(answer, &edits).unwrap();
            serde_json::from_str::<serde_json::Value>(&out).unwrap();
            let reply = codec.read_reply(&out).unwrap();
            (out, reply)
        };
        for call in &reply.calls {
            let key = if call.id.is_empty() {
                &call.name
            } else {
                &call.id
            };
            assert!(!drop.contains(&key.as_str()), "{key} still called: {out}");
        }
        let turn = reply.turn.join("");
        assert_eq!(
            turn.matches("is not available.").count(),
            1,
            "the words, once, in the turn: {turn}"
        );
        (out, reply)
    }
}
