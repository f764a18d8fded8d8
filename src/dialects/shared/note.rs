//! The loop guard's guidance note: appended to the result that answers a tool's latest call,
//! as one insertion into the request body, every other byte kept. Each dialect lists its
//! conversation as [`Turn`]s (where its calls and results are); what is shared here is which
//! result answers the latest call, and how a string, an array of parts or a missing content
//! takes the note.

use crate::json::span_in;
use serde_json::value::RawValue;
use std::ops::Range;

/// One step of a conversation, as the note needs it.
pub(crate) enum Turn<'a> {
    /// The model's calls of one turn, in order: each tool's name and the id its result names
    /// (`None` where the API has none: Gemini and Ollama, mostly).
    Calls(Vec<(String, Option<String>)>),
    /// One tool result.
    Result(Answer<'a>),
}

/// One tool result, and where its content is.
pub(crate) struct Answer<'a> {
    /// The call id it answers, when it names one.
    pub id: Option<String>,
    /// The tool it answers, when it names one (Gemini, Ollama's `tool_name`).
    pub name: Option<String>,
    /// The content: a string (the note follows a blank line), an array of parts (a part
    /// holding the note is added), or `null`/absent (the note becomes the content).
    pub content: Option<&'a RawValue>,
    /// The object holding the content, and the content's key: where an absent content is
    /// added as a string (`None`: the API takes no string there, and such a result no note).
    pub holder: &'a RawValue,
    pub key: Option<&'static str>,
    /// The dialect's text part holding a note, as JSON (`{"type":"text","text":…}`).
    pub part: fn(&str) -> String,
}

/// The result that answers the latest call of `tool`: the one naming its id; without ids,
/// among the results that follow its turn, the one naming the tool at the call's place
/// among that tool's calls of the turn, else the one at the call's place in the turn.
/// `None` when the latest call has no result in `turns`.
pub(crate) fn latest_answer<'t, 'a>(turns: &'t [Turn<'a>], tool: &str) -> Option<&'t Answer<'a>> {
    let (at, calls) = turns.iter().enumerate().rev().find_map(|(at, t)| match t {
        Turn::Calls(calls) if calls.iter().any(|(name, _)| name == tool) => Some((at, calls)),
        _ => None,
    })?;
    let place = calls.iter().rposition(|(name, _)| name == tool)?;
    let id = calls.get(place).and_then(|(_, id)| id.as_deref());
    let answers: Vec<&Answer> = turns
        .get(at + 1..)?
        .iter()
        .map_while(|t| match t {
            Turn::Result(answer) => Some(answer),
            Turn::Calls(_) => None,
        })
        .collect();
    if let Some(id) = id {
        return answers.into_iter().find(|a| a.id.as_deref() == Some(id));
    }
    if answers.iter().any(|a| a.name.is_some()) {
        let among_same = calls
            .get(..place)?
            .iter()
            .filter(|(name, _)| name == tool)
            .count();
        return answers
            .into_iter()
            .filter(|a| a.name.as_deref() == Some(tool))
            .nth(among_same);
    }
    answers.get(place).copied()
}

/// The insertion into `body` (which `turns` borrow from) that appends `note` to the result
/// answering the latest call of `tool`: [`latest_answer`], then [`note_patch`].
pub(crate) fn append(
    body: &str,
    turns: &[Turn],
    tool: &str,
    note: &str,
) -> Option<(Range<usize>, String)> {
    note_patch(body, latest_answer(turns, tool)?, note)
}

/// The insertion into `body` (which `answer` borrows from) that appends `note` to the
/// answer's content; `None` when the content is of no shape that takes one.
pub(crate) fn note_patch(
    body: &str,
    answer: &Answer,
    note: &str,
) -> Option<(Range<usize>, String)> {
    let escaped = |text: &str| {
        let quoted = serde_json::Value::from(text).to_string();
        quoted
            .get(1..quoted.len().saturating_sub(1))
            .unwrap_or_default()
            .to_owned()
    };
    let Some(content) = answer.content else {
        return add_member(body, answer, note);
    };
    let text = content.get();
    let span = span_in(body, text)?;
    match text.as_bytes().first()? {
        b'"' => {
            // Inside the string, before its closing quote.
            let end = span.end.checked_sub(1)?;
            let separated = if text.len() > 2 {
                format!("\n\n{note}")
            } else {
                note.to_owned()
            };
            Some((end..end, escaped(&separated)))
        }
        b'[' => {
            // After the last part, before any space the array closes with.
            let inner = text.strip_suffix(']')?;
            let last = inner.trim_end();
            let at = span.start + last.len();
            let comma = if last.ends_with('[') { "" } else { "," };
            Some((at..at, format!("{comma}{}", (answer.part)(note))))
        }
        _ => None,
    }
}

/// The content member added to the answer's holder, which has none, or its `null` (which
/// serde reads as none) replaced.
fn add_member(body: &str, answer: &Answer, note: &str) -> Option<(Range<usize>, String)> {
    let key = answer.key?;
    let holder = answer.holder.get();
    let object = span_in(body, holder)?;
    if let Some(value) = crate::json::find_path(holder, &[key]) {
        if holder.get(value.clone())? != "null" {
            return None;
        }
        let at = object.start + value.start..object.start + value.end;
        return Some((at, serde_json::Value::from(note).to_string()));
    }
    let members = holder.strip_suffix('}')?.trim_end();
    let at = object.start + members.len();
    let comma = if members.ends_with('{') { "" } else { "," };
    let value = serde_json::Value::from(note).to_string();
    Some((at..at, format!("{comma}\"{key}\":{value}")))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn text_part(note: &str) -> String {
        format!(
            r#"{{"type":"text","text":{}}}"#,
            serde_json::Value::from(note)
        )
    }

    fn answer<'a>(holder: &'a RawValue, content: Option<&'a RawValue>) -> Answer<'a> {
        Answer {
            id: None,
            name: None,
            content,
            holder,
            key: Some("content"),
            part: text_part,
        }
    }

    fn noted(body: &str, content_key: bool) -> Option<String> {
        #[derive(serde::Deserialize)]
        struct B<'a> {
            #[serde(borrow)]
            r: &'a RawValue,
        }
        #[derive(serde::Deserialize)]
        struct R<'a> {
            #[serde(borrow, default)]
            content: Option<&'a RawValue>,
        }
        let b: B = serde_json::from_str(body).unwrap();
        let r: R = serde_json::from_str(b.r.get()).unwrap();
        let a = answer(b.r, if content_key { r.content } else { None });
        let (range, text) = note_patch(body, &a, "stop \"now\"")?;
        let mut out = body.to_owned();
        out.replace_range(range, &text);
        Some(out)
    }

    #[test]
    fn strings_arrays_null_and_absent_contents_take_the_note() {
        assert_eq!(
            noted(r#"{"r":{"content":"sunny" }}"#, true).unwrap(),
            r#"{"r":{"content":"sunny\n\nstop \"now\"" }}"#
        );
        assert_eq!(
            noted(r#"{"r":{"content":""}}"#, true).unwrap(),
            r#"{"r":{"content":"stop \"now\""}}"#
        );
        assert_eq!(
            noted(
                "{\"r\":{\"content\":[ {\"type\":\"text\",\"text\":\"a\"} \n]}}",
                true
            )
            .unwrap(),
            "{\"r\":{\"content\":[ {\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"stop \\\"now\\\"\"} \n]}}"
        );
        assert_eq!(
            noted(r#"{"r":{"content":[ ]}}"#, true).unwrap(),
            r#"{"r":{"content":[{"type":"text","text":"stop \"now\""} ]}}"#
        );
        assert_eq!(
            noted(r#"{"r":{"content":null}}"#, true).unwrap(),
            r#"{"r":{"content":"stop \"now\""}}"#
        );
        assert_eq!(
            noted(r#"{"r":{"id":1 }}"#, true).unwrap(),
            r#"{"r":{"id":1,"content":"stop \"now\"" }}"#
        );
        assert_eq!(
            noted(r#"{"r":{ }}"#, true).unwrap(),
            r#"{"r":{"content":"stop \"now\"" }}"#
        );
        // Content of another shape, or a holder that has the key after all: no note.
        assert_eq!(noted(r#"{"r":{"content":5}}"#, true), None);
        assert_eq!(noted(r#"{"r":{"content":{"a":1}}}"#, true), None);
        assert_eq!(noted(r#"{"r":{"content":"x"}}"#, false), None);
    }

    fn calls(list: &[(&str, Option<&str>)]) -> Turn<'static> {
        Turn::Calls(
            list.iter()
                .map(|(n, id)| ((*n).to_owned(), id.map(str::to_owned)))
                .collect(),
        )
    }

    #[test]
    fn the_answer_of_the_latest_call_by_id_name_or_place() {
        let holder = RawValue::from_string("{}".into()).unwrap();
        let result = |id: Option<&str>, name: Option<&str>| {
            Turn::Result(Answer {
                id: id.map(str::to_owned),
                name: name.map(str::to_owned),
                ..answer(&holder, None)
            })
        };
        let id_of = |a: Option<&Answer>| a.and_then(|a| a.id.clone());
        let turns = [
            calls(&[("a", Some("1"))]),
            result(Some("1"), None),
            calls(&[("b", Some("2")), ("a", Some("3"))]),
            result(Some("3"), None),
            result(Some("2"), None),
        ];
        assert_eq!(id_of(latest_answer(&turns, "a")).as_deref(), Some("3"));
        assert_eq!(id_of(latest_answer(&turns, "b")).as_deref(), Some("2"));
        assert!(latest_answer(&turns, "c").is_none());
        // By name, the second call of `a` in its turn: the second result named `a`.
        let turns = [
            calls(&[("a", None), ("b", None), ("a", None)]),
            result(Some("x"), Some("a")),
            result(Some("y"), Some("b")),
            result(Some("z"), Some("a")),
        ];
        assert_eq!(id_of(latest_answer(&turns, "a")).as_deref(), Some("z"));
        // By place: no names, no ids.
        let turns = [
            calls(&[("b", None), ("a", None)]),
            result(Some("p"), None),
            result(Some("q"), None),
        ];
        assert_eq!(id_of(latest_answer(&turns, "a")).as_deref(), Some("q"));
        // The latest call was never answered: no note, though an older one was.
        let turns = [
            calls(&[("a", Some("1"))]),
            result(Some("1"), None),
            calls(&[("a", Some("2"))]),
        ];
        assert!(latest_answer(&turns, "a").is_none());
    }
}
