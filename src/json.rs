//! Borrowed JSON: where a value sits in the original bytes, so it can be spliced rather than
//! re-serialised (serde_json would reorder keys and reformat numbers, and the upstream must see
//! the client's bytes).

use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::ops::Range;

/// Byte range of `inner` inside `outer`. `inner` must be a sub-slice of `outer` (serde_json's
/// borrowed `RawValue`s are), which the checks below confirm instead of trusting.
pub fn span_in(outer: &str, inner: &str) -> Option<Range<usize>> {
    let start = (inner.as_ptr() as usize).checked_sub(outer.as_ptr() as usize)?;
    let end = start.checked_add(inner.len())?;
    (end <= outer.len()).then_some(start..end)
}

/// The elements of a JSON array, borrowed.
pub fn array_items(raw: &RawValue) -> Option<Vec<&RawValue>> {
    serde_json::from_str::<Vec<&RawValue>>(raw.get()).ok()
}

/// A JSON string borrowed when it has no escapes, owned when it has.
pub type Str<'a> = Cow<'a, str>;

/// Parses `raw` as `T`, `None` if it has another shape.
pub fn parse<'a, T: Deserialize<'a>>(raw: &'a RawValue) -> Option<T> {
    serde_json::from_str(raw.get()).ok()
}

/// Whether a raw JSON value is the literal `true`.
pub fn is_true(raw: Option<&RawValue>) -> bool {
    raw.is_some_and(|r| r.get() == "true")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_of_borrowed_values() {
        let body = r#"{"a": [1, {"b": 2}], "c": "x"}"#;
        #[derive(Deserialize)]
        struct Top<'a> {
            #[serde(borrow)]
            a: &'a RawValue,
        }
        let top: Top = serde_json::from_str(body).unwrap();
        let span = span_in(body, top.a.get()).unwrap();
        assert_eq!(&body[span], r#"[1, {"b": 2}]"#);
        let items = array_items(top.a).unwrap();
        let second = span_in(body, items[1].get()).unwrap();
        assert_eq!(&body[second], r#"{"b": 2}"#);
        assert_eq!(span_in(body, "elsewhere"), None);
    }
}
