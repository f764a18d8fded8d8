//! What several dialects share: message text, called tools, tool schemas ([`schema`]),
//! byte-preserving JSON edits ([`splice`]) and tool calls edited in place ([`calls`]).

pub mod calls;
pub mod schema;
pub mod splice;

use serde::Deserialize;
use serde_json::value::RawValue;

/// Records a called tool once, keeping first-call order.
pub(crate) fn note_call(called: &mut Vec<String>, name: &str) {
    if !called.iter().any(|c| c == name) {
        called.push(name.to_owned());
    }
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

#[cfg(test)]
mod tests {
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
