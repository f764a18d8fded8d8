//! Splicing: the new body is the old body with only the tools array rebuilt from the kept
//! tools' original bytes. Nothing is re-serialised, so key order, number formatting, escapes
//! and whitespace everywhere else reach the upstream exactly as the client sent them.

use crate::dialects::{CatalogDraft, Layout};
use std::borrow::Cow;

// The byte-level pieces (an array's layout, a range replaced) sit in `crate::json`, below the
// dialects, which use them too.
pub use crate::json::{ArrayLayout, splice, splice_bytes};

/// The tools container rebuilt with the entries for which `keep[i]` is true.
pub fn rebuild_container(container: &str, catalog: &CatalogDraft, keep: &[bool]) -> String {
    // Pieces of valid text, cut at JSON structure, join into valid text.
    rebuild_container_text(container.as_bytes(), catalog, keep)
        .unwrap_or_else(|| container.to_owned())
}

/// [`rebuild_container`] over bytes, for a caller that needs text: only the bytes written
/// out are checked. `None` if they are not text.
pub fn rebuild_container_text(
    container: &[u8],
    catalog: &CatalogDraft,
    keep: &[bool],
) -> Option<String> {
    let mut out = Vec::with_capacity(container.len());
    write_container(container, catalog, keep, &mut out);
    String::from_utf8(out).ok()
}

/// Appends to `out` the tools container rebuilt with the entries for which `keep[i]` is true:
/// pieces of `container`, cut at its JSON structure. Nothing is checked as text here: a
/// request's tools array reached a catalog only as checked text (read, or compared byte for
/// byte with a catalog's), and the filter's rewrite goes to Envoy as bytes. Checking the kept
/// tools again was what had taken a catalog-cache hit's instructions past 0b54a9e's
/// (docs/BENCHMARKS.md, `make bench-instructions`).
pub fn write_container(container: &[u8], catalog: &CatalogDraft, keep: &[bool], out: &mut Vec<u8>) {
    let kept = |i: usize| keep.get(i).copied().unwrap_or(true);
    match &catalog.layout {
        Layout::Flat(array) => {
            array.write_bytes(container, out, |i, text| {
                kept(i).then_some(Cow::Borrowed(text))
            });
        }
        Layout::Grouped { outer, groups } => {
            outer.write_bytes(container, out, |i, tool| {
                let Some(group) = groups.get(i).and_then(Option::as_ref) else {
                    return Some(Cow::Borrowed(tool));
                };
                let entry = |j: usize| group.first_entry + j;
                let any_kept = (0..group.inner.items.len()).any(|j| kept(entry(j)));
                if !any_kept && group.only_declarations {
                    return None;
                }
                let mut rebuilt = Vec::with_capacity(tool.len());
                rebuilt.extend_from_slice(tool.get(..group.inner.span.start).unwrap_or_default());
                group.inner.write_bytes(tool, &mut rebuilt, |j, text| {
                    kept(entry(j)).then_some(Cow::Borrowed(text))
                });
                rebuilt.extend_from_slice(tool.get(group.inner.span.end..).unwrap_or_default());
                Some(Cow::Owned(rebuilt))
            });
        }
    }
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
