//! Editing a response's JSON text in place: each change is a patch of one byte range, so every
//! byte outside the changed values stays as the provider wrote it.

use crate::dialects::Frame;
use crate::dialects::Problem;
use crate::json::find_path;
use crate::json::splice;
use serde::Deserialize;
use serde_json::Value;
use std::ops::Range;

/// A replacement of one byte range of a text.
pub(crate) type Patch = (Range<usize>, String);

/// `text` with every patch applied, `None` if two overlap or one falls outside it. Insertions
/// (empty ranges) at the same place keep their order.
pub(crate) fn apply_patches(text: &str, mut patches: Vec<Patch>) -> Option<String> {
    patches.sort_by_key(|(range, _)| range.start);
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (range, replacement) in patches {
        out.push_str(text.get(at..range.start)?);
        out.push_str(&replacement);
        at = range.end.max(range.start);
    }
    out.push_str(text.get(at..)?);
    Some(out)
}

/// The patch that sets member `key` of the object at `object` in `text` to the JSON `value`:
/// its value replaced when present, the member added at the end when not.
pub(crate) fn set_member(
    text: &str,
    object: Range<usize>,
    key: &str,
    value: &str,
) -> Option<Patch> {
    if let Some(patch) = replace_member(text, object.clone(), key, value) {
        return Some(patch);
    }
    let members = text
        .get(object.clone())?
        .strip_prefix('{')?
        .strip_suffix('}')?;
    let comma = if members.trim().is_empty() { "" } else { "," };
    let end = object.end.checked_sub(1)?;
    Some((end..end, format!("{comma}{}:{value}", json_string(key))))
}

/// The patch that replaces the value of member `key` of the object at `object` in `text`;
/// `None` when it has no such member.
pub(crate) fn replace_member(
    text: &str,
    object: Range<usize>,
    key: &str,
    value: &str,
) -> Option<Patch> {
    let found = find_path(text.get(object.clone())?, &[key])?;
    Some((
        object.start + found.start..object.start + found.end,
        value.to_owned(),
    ))
}

/// Writes `frame` to `out` as SSE with `patches` applied to its data.
pub(crate) fn write_patched(
    out: &mut String,
    frame: &Frame,
    patches: Vec<Patch>,
) -> Result<(), Problem> {
    let data = apply_patches(&frame.data, patches).ok_or(Problem::BadShape)?;
    Frame {
        event: frame.event.clone(),
        data,
    }
    .write(out);
    Ok(())
}

/// Parses `text` as `T`, which must be written as a JSON object: serde's derived structs would
/// also accept an array of their fields.
pub(crate) fn parse_object<'a, T: Deserialize<'a>>(text: &'a str) -> Result<T, Problem> {
    let parsed = serde_json::from_str(text).map_err(|e| Problem::of(&e))?;
    if text.trim_start().starts_with('{') {
        Ok(parsed)
    } else {
        Err(Problem::BadShape)
    }
}

/// `text` as a JSON string.
pub(crate) fn json_string(text: &str) -> String {
    Value::from(text).to_string()
}

/// Sets member `key` of the object at `path` (the top level for `[]`) to `value` (JSON text):
/// the value replaced in place when the member exists (the last one, as parsers read it),
/// else the member added at the object's end. Every other byte is kept.
pub(crate) fn set_path_member(body: &str, path: &[&str], key: &str, value: &str) -> Option<String> {
    let mut full: Vec<&str> = path.to_vec();
    full.push(key);
    if let Some(span) = find_path(body, &full) {
        return splice(body, span, value);
    }
    let object = if path.is_empty() {
        let start = body.len() - body.trim_start().len();
        let end = body.trim_end().len();
        start..end
    } else {
        find_path(body, path)?
    };
    let text = body.get(object.clone())?;
    if !text.starts_with('{') || !text.ends_with('}') {
        return None;
    }
    let inner = text.get(1..text.len() - 1)?;
    let member = format!("\"{key}\":{value}");
    if inner.trim().is_empty() {
        splice(body, object, &format!("{{{member}}}"))
    } else {
        let close = object.end - 1;
        splice(body, close..close, &format!(",{member}"))
    }
}
