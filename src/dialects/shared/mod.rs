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

#[cfg(test)]
mod tests {
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
