//! Splicing: the new body is the old body with only the tools array rebuilt from the kept
//! tools' original bytes. Nothing is re-serialised, so key order, number formatting, escapes
//! and whitespace everywhere else reach the upstream exactly as the client sent them.

use crate::dialects::{CatalogDraft, Layout};
use crate::json::span_in;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::ops::Range;

/// Where a JSON array and each of its items sit inside some base string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArrayLayout {
    pub span: Range<usize>,
    pub items: Vec<Range<usize>>,
}

impl ArrayLayout {
    /// `array` and `items` must be borrowed from `base`.
    pub fn of(base: &str, array: &str, items: &[&RawValue]) -> Option<Self> {
        let span = span_in(base, array)?;
        let items = items
            .iter()
            .map(|i| span_in(base, i.get()))
            .collect::<Option<Vec<_>>>()?;
        Some(ArrayLayout { span, items })
    }

    /// Writes the array into `out` with the items that `item` returns (`None` drops one), in
    /// their original order. The bytes between `[` and the first item, between items, and
    /// after the last item are the original ones, so a pretty-printed array stays pretty.
    pub fn write<'b>(
        &self,
        base: &'b str,
        out: &mut String,
        mut item: impl FnMut(usize, &'b str) -> Option<Cow<'b, str>>,
    ) {
        let (Some(first), Some(last)) = (self.items.first(), self.items.last()) else {
            out.push_str(base.get(self.span.clone()).unwrap_or("[]"));
            return;
        };
        let separator = match self.items.get(1) {
            Some(second) => base.get(first.end..second.start).unwrap_or(","),
            None => ",",
        };
        let mut kept = 0;
        for (i, range) in self.items.iter().enumerate() {
            let Some(text) = base.get(range.clone()).and_then(|t| item(i, t)) else {
                continue;
            };
            out.push_str(if kept == 0 {
                base.get(self.span.start..first.start).unwrap_or("[")
            } else {
                separator
            });
            out.push_str(&text);
            kept += 1;
        }
        if kept == 0 {
            out.push('[');
        }
        out.push_str(base.get(last.end..self.span.end).unwrap_or("]"));
    }
}

/// The tools container rebuilt with the entries for which `keep[i]` is true.
pub fn rebuild_container(container: &str, catalog: &CatalogDraft, keep: &[bool]) -> String {
    let kept = |i: usize| keep.get(i).copied().unwrap_or(true);
    let mut out = String::with_capacity(container.len());
    match &catalog.layout {
        Layout::Flat(array) => {
            array.write(container, &mut out, |i, text| {
                kept(i).then_some(Cow::Borrowed(text))
            });
        }
        Layout::Grouped { outer, groups } => {
            outer.write(container, &mut out, |i, tool| {
                let Some(group) = groups.get(i).and_then(Option::as_ref) else {
                    return Some(Cow::Borrowed(tool));
                };
                let entry = |j: usize| group.first_entry + j;
                let any_kept = (0..group.inner.items.len()).any(|j| kept(entry(j)));
                if !any_kept && group.only_declarations {
                    return None;
                }
                let mut rebuilt = String::with_capacity(tool.len());
                rebuilt.push_str(tool.get(..group.inner.span.start).unwrap_or_default());
                group.inner.write(tool, &mut rebuilt, |j, text| {
                    kept(entry(j)).then_some(Cow::Borrowed(text))
                });
                rebuilt.push_str(tool.get(group.inner.span.end..).unwrap_or_default());
                Some(Cow::Owned(rebuilt))
            });
        }
    }
    out
}

/// `body` with `range` replaced by `replacement`.
pub fn splice(body: &str, range: Range<usize>, replacement: &str) -> Option<String> {
    Some(
        [
            body.get(..range.start)?,
            replacement,
            body.get(range.end..)?,
        ]
        .concat(),
    )
}

/// [`splice`] over bytes.
pub fn splice_bytes(body: &[u8], range: Range<usize>, replacement: &[u8]) -> Option<Vec<u8>> {
    Some(
        [
            body.get(..range.start)?,
            replacement,
            body.get(range.end..)?,
        ]
        .concat(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialects::Dialect;

    fn rebuild(dialect: Dialect, container: &str, keep: &[bool]) -> String {
        let catalog = dialect.catalog(container).unwrap();
        rebuild_container(container, &catalog, keep)
    }

    #[test]
    fn keeps_items_and_original_separators() {
        let pretty = "[\n  {\"name\":\"a\"},\n  {\"name\":\"b\"},\n  {\"name\":\"c\"}\n]";
        assert_eq!(
            rebuild(Dialect::Anthropic, pretty, &[false, true, true]),
            "[\n  {\"name\":\"b\"},\n  {\"name\":\"c\"}\n]"
        );
        assert_eq!(
            rebuild(Dialect::Anthropic, pretty, &[true, false, true]),
            "[\n  {\"name\":\"a\"},\n  {\"name\":\"c\"}\n]"
        );
        assert_eq!(rebuild(Dialect::Anthropic, "[]", &[]), "[]");
        assert_eq!(
            rebuild(Dialect::Anthropic, pretty, &[false, false, false]),
            "[\n]"
        );
    }

    #[test]
    fn gemini_groups_drop_when_emptied() {
        let tools = r#"[{"googleSearch":{}}, {"functionDeclarations":[{"name":"a"},{"name":"b"}]}, {"functionDeclarations":[{"name":"c"}],"x":1}]"#;
        // entries: googleSearch, a, b, c
        assert_eq!(
            rebuild(Dialect::Gemini, tools, &[true, false, true, true]),
            r#"[{"googleSearch":{}}, {"functionDeclarations":[{"name":"b"}]}, {"functionDeclarations":[{"name":"c"}],"x":1}]"#
        );
        assert_eq!(
            rebuild(Dialect::Gemini, tools, &[true, false, false, false]),
            r#"[{"googleSearch":{}}, {"functionDeclarations":[],"x":1}]"#
        );
    }

    #[test]
    fn splice_replaces_only_the_range() {
        assert_eq!(splice("abcdef", 2..4, "XY").unwrap(), "abXYef");
        assert_eq!(splice("abc", 2..9, "X"), None);
    }
}
