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

/// The byte range of the value at `path` (a chain of object keys from the top level) in the
/// JSON text `text`, found by a structural scan that skips strings with `memchr` and does not
/// validate them. This is how the filter finds the tools array without running a JSON parser
/// over it: on a catalog-cache hit the tools bytes are identical to ones already parsed and
/// checked, and every other byte of the body still goes through serde. `None` when a key is
/// absent or the text is not shaped as expected.
pub fn find_path(text: &str, path: &[&str]) -> Option<Range<usize>> {
    find_path_with(text.as_bytes(), path, |_, _| None)
}

/// Like [`find_path`], over bytes, and first asking `known` about the bytes from the start of
/// a candidate value to the end (with that start's byte offset): if it recognises a value it
/// has seen before there, it returns that value's length and the value is not scanned. (The
/// catalog cache recognises a tools array by its bytes this way, so a cache hit never scans the
/// tools bytes either.) With a repeated key, `known` may be asked about every occurrence; only
/// the returned span (the last one) counts.
///
/// Bytes, not text: the filter checks as UTF-8 only the bytes it reads, and a recognised tools
/// array is byte for byte one that was checked before. Every boundary of a returned span is an
/// ASCII byte of the JSON structure, so for text it falls on character boundaries.
pub fn find_path_with(
    bytes: &[u8],
    path: &[&str],
    mut known: impl FnMut(usize, &[u8]) -> Option<usize>,
) -> Option<Range<usize>> {
    let mut at = 0;
    let mut span = None;
    for (depth, key) in path.iter().enumerate() {
        let last = depth + 1 == path.len();
        let value = find_key(bytes, at, key, &mut |start| {
            if !last {
                return None;
            }
            let len = known(start, bytes.get(start..)?)?;
            Some(start + len)
        })?;
        at = value.start;
        span = Some(value);
    }
    span
}

/// Finds `key` among the members of the object that starts (after white space) at `from`, the
/// way JSON parsers read objects: keys are compared decoded (`"tool\u0073"` is `tools`), and of
/// a repeated key the last occurrence wins. `known` may supply the end of a matching key's value
/// without a scan.
fn find_key(
    b: &[u8],
    from: usize,
    key: &str,
    known: &mut dyn FnMut(usize) -> Option<usize>,
) -> Option<Range<usize>> {
    let mut i = skip_ws(b, from);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i = skip_ws(b, i + 1);
    if b.get(i) == Some(&b'}') {
        return None;
    }
    let mut found = None;
    loop {
        let key_start = i;
        let key_end = skip_string(b, i)?;
        i = skip_ws(b, key_end);
        if b.get(i) != Some(&b':') {
            return None;
        }
        let value_start = skip_ws(b, i + 1);
        let value_end = if key_is(b.get(key_start..key_end)?, key) {
            let end = match known(value_start) {
                Some(end) => end,
                None => skip_value(b, value_start)?,
            };
            found = Some(value_start..end);
            end
        } else {
            skip_value(b, value_start)?
        };
        i = skip_ws(b, value_end);
        match b.get(i) {
            Some(b',') => i = skip_ws(b, i + 1),
            Some(b'}') => return found,
            _ => return None,
        }
    }
}

/// Whether the JSON string literal `literal` (quotes included) spells `key`.
fn key_is(literal: &[u8], key: &str) -> bool {
    let inner = literal
        .get(1..literal.len().saturating_sub(1))
        .unwrap_or_default();
    if !inner.contains(&b'\\') {
        return inner == key.as_bytes();
    }
    std::str::from_utf8(literal)
        .ok()
        .and_then(|l| serde_json::from_str::<Cow<str>>(l).ok())
        .is_some_and(|decoded| decoded == key)
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\n' | b'\r' | b'\t')) {
        i += 1;
    }
    i
}

/// `i` is at an opening quote; returns the index just past the closing one.
fn skip_string(b: &[u8], i: usize) -> Option<usize> {
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let mut j = i + 1;
    loop {
        j += quote_or_backslash(b.get(j..)?)?;
        if b.get(j) == Some(&b'"') {
            return Some(j + 1);
        }
        j += 2; // a backslash and the character it escapes
    }
}

/// Where the first `"` or `\\` of `b` is, found eight bytes at a time, each eight tested as
/// one number. In Envoy's V8, which runs the `.wasm` about as its baseline compiler does,
/// memchr's SIMD search cost more to start and to finish than most strings of a tools array
/// (keys, names, types, a description) take to test this way: the array scan was a tenth of
/// reading 1,000 never-seen tools.
fn quote_or_backslash(b: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    // A byte of `word` equal to `byte`: its lowest such byte's high bit is the lowest bit set
    // (higher bytes may be set falsely by the borrow, never lower ones).
    let equal = |word: u64, byte: u8| {
        let x = word ^ (ONES * u64::from(byte));
        x.wrapping_sub(ONES) & !x & HIGHS
    };
    let chunks = b.chunks_exact(8);
    let rest = chunks.remainder();
    for (k, chunk) in chunks.enumerate() {
        let word = u64::from_le_bytes(chunk.try_into().ok()?);
        let found = equal(word, b'"') | equal(word, b'\\');
        if found != 0 {
            return Some(k * 8 + (found.trailing_zeros() / 8) as usize);
        }
    }
    let at = rest.iter().position(|&c| c == b'"' || c == b'\\')?;
    Some(b.len() - rest.len() + at)
}

/// `i` is at the start of a value; returns the index just past it.
fn skip_value(b: &[u8], i: usize) -> Option<usize> {
    match b.get(i)? {
        b'"' => skip_string(b, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            loop {
                match b.get(j)? {
                    b'"' => {
                        j = skip_string(b, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        _ => {
            // A number, true, false or null: up to the next delimiter.
            let len = b
                .get(i..)?
                .iter()
                .position(|c| matches!(c, b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t'))?;
            Some(i + len)
        }
    }
}

/// The elements of a JSON array, borrowed.
pub fn array_items(raw: &RawValue) -> Option<Vec<&RawValue>> {
    serde_json::from_str::<Vec<&RawValue>>(raw.get()).ok()
}

/// The byte ranges of the items of the JSON array that is the whole of `text` (white space
/// around it allowed), found by the structural scan of [`find_path`]: items are delimited, not
/// validated (a caller parses the ones it has not seen before). `None` when `text` is not one
/// array, or its items are not separated by single commas.
pub fn array_item_spans(text: &str) -> Option<Vec<Range<usize>>> {
    let b = text.as_bytes();
    let start = skip_ws(b, 0);
    let (end, items) = array_at(b, start)?;
    (skip_ws(b, end) == b.len()).then_some(items)
}

/// Like [`array_item_spans`] for the array that starts `text` (a value [`find_path_with`] is
/// at), with text after it: the array's length and its items' ranges. The catalog cache
/// scans a tools array it does not know this way once, where finding its end and then
/// splitting it scanned it twice.
pub fn array_prefix_spans(bytes: &[u8]) -> Option<(usize, Vec<Range<usize>>)> {
    array_at(bytes, 0)
}

/// The array at `i`: where it ends, and its items.
fn array_at(b: &[u8], mut i: usize) -> Option<(usize, Vec<Range<usize>>)> {
    if b.get(i) != Some(&b'[') {
        return None;
    }
    let mut items = Vec::new();
    i = skip_ws(b, i + 1);
    if b.get(i) == Some(&b']') {
        return Some((i + 1, items));
    }
    loop {
        let end = skip_value(b, i).filter(|&end| end > i)?;
        items.push(i..end);
        i = skip_ws(b, end);
        match b.get(i) {
            Some(b',') => i = skip_ws(b, i + 1),
            Some(b']') => return Some((i + 1, items)),
            _ => return None,
        }
        if matches!(b.get(i), None | Some(b']' | b',')) {
            return None;
        }
    }
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

/// `object` (a JSON object's text) without its top-level member `key` (written without
/// escapes), every other byte kept; `None` when there is no such member.
pub fn without_member(object: &str, key: &str) -> Option<String> {
    let value = find_path(object, &[key])?;
    let b = object.as_bytes();
    let back = |mut i: usize| {
        while i > 0 && b.get(i - 1).is_some_and(u8::is_ascii_whitespace) {
            i -= 1;
        }
        i
    };
    let forward = |mut i: usize| {
        while b.get(i).is_some_and(u8::is_ascii_whitespace) {
            i += 1;
        }
        i
    };
    let colon = back(value.start).checked_sub(1)?;
    let quoted = format!("\"{key}\"");
    let key_start = back(colon).checked_sub(quoted.len())?;
    if object.get(key_start..back(colon)) != Some(quoted.as_str()) || b.get(colon) != Some(&b':') {
        return None;
    }
    let after = forward(value.end);
    let remove = if b.get(after) == Some(&b',') {
        key_start..forward(after + 1)
    } else {
        let before = back(key_start);
        match before.checked_sub(1) {
            Some(comma) if b.get(comma) == Some(&b',') => comma..value.end,
            _ => key_start..value.end,
        }
    };
    splice(object, remove, "")
}

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
        let mut bytes = Vec::with_capacity(base.len());
        self.write_bytes(base.as_bytes(), &mut bytes, |i, _| {
            let text = base.get(self.items.get(i)?.clone())?;
            Some(match item(i, text)? {
                Cow::Borrowed(text) => Cow::Borrowed(text.as_bytes()),
                Cow::Owned(text) => Cow::Owned(text.into_bytes()),
            })
        });
        // Pieces of text cut at JSON structure join into text.
        if let Ok(text) = String::from_utf8(bytes) {
            out.push_str(&text);
        }
    }

    /// [`ArrayLayout::write`] over bytes.
    pub fn write_bytes<'b>(
        &self,
        base: &'b [u8],
        out: &mut Vec<u8>,
        mut item: impl FnMut(usize, &'b [u8]) -> Option<Cow<'b, [u8]>>,
    ) {
        let (Some(first), Some(last)) = (self.items.first(), self.items.last()) else {
            out.extend_from_slice(base.get(self.span.clone()).unwrap_or(b"[]"));
            return;
        };
        let separator = match self.items.get(1) {
            Some(second) => base.get(first.end..second.start).unwrap_or(b","),
            None => b",",
        };
        let mut kept = 0;
        for (i, range) in self.items.iter().enumerate() {
            let Some(text) = base.get(range.clone()).and_then(|t| item(i, t)) else {
                continue;
            };
            out.extend_from_slice(if kept == 0 {
                base.get(self.span.start..first.start).unwrap_or(b"[")
            } else {
                separator
            });
            out.extend_from_slice(&text);
            kept += 1;
        }
        if kept == 0 {
            out.push(b'[');
        }
        out.extend_from_slice(base.get(last.end..self.span.end).unwrap_or(b"]"));
    }
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

/// The largest count a configuration may hold (what `docs/config.schema.json` gives every
/// whole-number field as its `maximum`): far above any sensible setting, and a `usize` on
/// wasm32.
pub const MAX_COUNT: u64 = u32::MAX as u64;

/// A count in the configuration: a JSON integer, or a number with no fractional part, from 0 to
/// [`MAX_COUNT`] and within `T`. Istio hands `pluginConfig` over as a protobuf Struct, whose
/// numbers are doubles, so `5` may arrive as `5.0`. Every count of the configuration is read by
/// this (`#[serde(deserialize_with = "whole_number")]`), or by [`optional_whole_number`].
pub fn whole_number<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: TryFrom<u64>,
{
    whole(f64::deserialize(d)?)
}

/// An optional count: `null` or absent is `None`, anything else as [`whole_number`] reads it.
pub fn optional_whole_number<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: TryFrom<u64>,
{
    Option::<f64>::deserialize(d)?.map(whole).transpose()
}

fn whole<T: TryFrom<u64>, E: serde::de::Error>(n: f64) -> Result<T, E> {
    if n.fract() == 0.0 && (0.0..=MAX_COUNT as f64).contains(&n) {
        if let Ok(count) = T::try_from(n as u64) {
            return Ok(count);
        }
    }
    Err(E::custom(format_args!(
        "expected a whole number, found {n}"
    )))
}

/// A section of the configuration (a struct) from a JSON object only: serde's derive also reads
/// a struct from an array, its fields in order (`"search": []` as every default, `[["a"],
/// ["b"]]` as an access rule), which the schema refuses and nobody writes on purpose. Every
/// section of the configuration is read by this, [`optional_object`] or [`objects`].
pub fn object<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct Only<T>(std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Only<T> {
        type Value = T;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
            T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
        }
    }
    d.deserialize_map(Only(std::marker::PhantomData))
}

/// An optional section: `null` or absent is `None`, anything else as [`object`] reads it.
pub fn optional_object<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Object<T>>::deserialize(d)?.map(|o| o.0))
}

/// A list of sections, each as [`object`] reads it.
pub fn objects<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Vec::<Object<T>>::deserialize(d)?
        .into_iter()
        .map(|o| o.0)
        .collect())
}

/// One section, read by [`object`].
struct Object<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        object(d).map(Object)
    }
}

/// One of the configuration's names (a unit enum: `"search"`, `"deny"`) from a string only:
/// serde's derive also reads one from an object (`{"search": null}`), which the schema refuses.
/// Every such field of the configuration is read by this.
pub fn variant<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    let name = <Cow<'de, str>>::deserialize(d)?;
    T::deserialize(serde::de::value::CowStrDeserializer::<D::Error>::new(name))
}

/// [`variant`] for an optional name: absent or `null` is `None`.
pub fn optional_variant<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    <Option<Cow<'de, str>>>::deserialize(d)?
        .map(|name| T::deserialize(serde::de::value::CowStrDeserializer::<D::Error>::new(name)))
        .transpose()
}

/// JSON Schema for the rules between a section's fields that its check enforces (one field
/// needs another, one of two, at least one of several), said in the configuration's schema
/// too: each section's `#[schemars(transform = …)]` adds its own with [`add`](rules::add).
#[cfg(not(target_arch = "wasm32"))]
pub mod rules {
    use serde_json::{Value, json};

    /// The characters Rust's `trim` and `char::is_whitespace` take for space (Unicode's
    /// White_Space), as the inside of a pattern's class: `\s` differs between regex engines
    /// (ECMA's, which JSON Schema names, also counts U+FEFF), and the schema must say what the
    /// checks do.
    macro_rules! whitespace {
        () => {
            r"\t-\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
        };
    }

    /// [`whitespace!`]: Unicode's White_Space, as the inside of a pattern's class.
    pub const WHITESPACE: &str = whitespace!();

    /// A pattern for text that is not blank (what `trim` leaves is not empty): one character
    /// at least that is not space.
    pub const NOT_BLANK: &str = concat!("[^", whitespace!(), "]");

    /// `field` is present and not null.
    pub fn set(field: &str) -> Value {
        json!({"required": [field], "properties": {field: {"not": {"type": "null"}}}})
    }

    /// `field` is absent or null.
    pub fn unset(field: &str) -> Value {
        json!({"properties": {field: {"type": "null"}}})
    }

    /// `field` is present and not empty: an array with an item, an object with a member.
    pub fn filled(field: &str) -> Value {
        json!({"required": [field], "properties": {field: {
            "not": {"type": "null"}, "minItems": 1, "minProperties": 1
        }}})
    }

    /// `field` is absent or `value` (the default).
    pub fn only(field: &str, value: Value) -> Value {
        json!({"properties": {field: {"const": value}}})
    }

    /// Adds one rule to `schema`: one of `branches` at least holds.
    pub fn any_of(schema: &mut schemars::Schema, description: &str, branches: Vec<Value>) {
        add(schema, [(description, json!({"anyOf": branches}))]);
    }

    /// Adds one rule to `schema`: exactly one of `branches` holds.
    pub fn one_of(schema: &mut schemars::Schema, description: &str, branches: Vec<Value>) {
        add(schema, [(description, json!({"oneOf": branches}))]);
    }

    /// Adds `rules` to `schema`'s `allOf`, each with its description: what `toolsift check`
    /// says when a configuration breaks the rule, and the configuration reference lists.
    pub fn add<'a>(
        schema: &mut schemars::Schema,
        rules: impl IntoIterator<Item = (&'a str, Value)>,
    ) {
        let rules: Vec<Value> = rules
            .into_iter()
            .map(|(description, mut rule)| {
                if let Value::Object(rule) = &mut rule {
                    rule.insert("description".to_owned(), description.into());
                }
                rule
            })
            .collect();
        match schema.get_mut("allOf") {
            Some(Value::Array(all)) => all.extend(rules),
            _ => {
                schema.insert("allOf".to_owned(), Value::Array(rules));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Eight bytes at a time find what memchr finds, at every length and offset, with
        /// both bytes and their neighbours (a borrow from `!` or `[` must not count).
        #[test]
        fn quote_or_backslash_is_memchr2(
            bytes in proptest::collection::vec(
                proptest::sample::select(vec![b'"', b'\\', b'!', b'#', b'[', b']', b'a', 0, 0xff]),
                0..80,
            ),
        ) {
            proptest::prop_assert_eq!(
                quote_or_backslash(&bytes),
                memchr::memchr2(b'"', b'\\', &bytes)
            );
        }
    }

    #[test]
    fn splits_arrays_without_parsing_items() {
        fn spans(t: &str) -> Option<Vec<&str>> {
            array_item_spans(t).map(|r| r.into_iter().map(|r| &t[r]).collect())
        }
        assert_eq!(
            spans(r#" [ {"a":"]"} ,[1,2], 3,"x" ] "#),
            Some(vec![r#"{"a":"]"}"#, "[1,2]", "3", r#""x""#])
        );
        assert_eq!(spans("[]"), Some(vec![]));
        assert_eq!(spans("[ \n ]"), Some(vec![]));
        for bad in [
            "", "{}", "[1,]", "[,1]", "[1 2]", "[1", "[1]x", "[{]", "[1,,2]", "null",
        ] {
            assert_eq!(spans(bad), None, "{bad}");
        }
    }

    #[test]
    fn removes_one_member() {
        let without = |o: &str| without_member(o, "defer_loading");
        assert_eq!(
            without(r#"{"name":"a", "defer_loading": true, "x":1}"#).unwrap(),
            r#"{"name":"a", "x":1}"#
        );
        assert_eq!(
            without(r#"{"name":"a" , "defer_loading":true}"#).unwrap(),
            r#"{"name":"a" }"#
        );
        assert_eq!(without(r#"{"defer_loading":true}"#).unwrap(), "{}");
        assert_eq!(without(r#"{"name":"defer_loading"}"#), None);
    }

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

    #[test]
    fn finds_values_by_path_without_parsing() {
        let body = r#"{ "a\"tools": "x\\", "n": -1.5e3, "t": true,
            "toolConfig" : {"x": [1, {"tools": 0}], "tools" :[{"s":"]}\""}] },
            "tools": [ ] }"#;
        let at = |path: &[&str]| find_path(body, path).map(|r| &body[r]);
        assert_eq!(at(&["tools"]), Some("[ ]"));
        assert_eq!(at(&["toolConfig", "tools"]), Some(r#"[{"s":"]}\""}]"#));
        assert_eq!(at(&["n"]), Some("-1.5e3"));
        assert_eq!(at(&["missing"]), None);
        assert_eq!(at(&["n", "tools"]), None);
        assert_eq!(find_path("[1]", &["tools"]), None);
        assert_eq!(find_path(r#"{"tools": [1, 2"#, &["tools"]), None);
        assert_eq!(find_path(r#"{"a": "unterminated"#, &["tools"]), None);
        assert_eq!(find_path("{}", &["tools"]), None);
        // A recognised value is not scanned: its length is taken as given.
        let mut asked = Vec::new();
        let known = find_path_with(body.as_bytes(), &["toolConfig", "tools"], |start, rest| {
            asked.push(start);
            rest.starts_with(b"[{").then_some(r#"[{"s":"]}\""}]"#.len())
        });
        assert_eq!(known.map(|r| &body[r]), Some(r#"[{"s":"]}\""}]"#));
        assert_eq!(asked.len(), 1);
    }

    #[test]
    fn keys_are_read_as_parsers_read_them() {
        // Repeated key: the last wins, as in JSON.parse, Python's json and Go's encoding/json.
        let twice = r#"{"tools":[1,2,3],"messages":[],"tools":[4]}"#;
        assert_eq!(find_path(twice, &["tools"]).map(|r| &twice[r]), Some("[4]"));
        // Escaped spellings are the same key.
        let escaped = r#"{"tool\u0073":[5],"model":"m"}"#;
        assert_eq!(
            find_path(escaped, &["tools"]).map(|r| &escaped[r]),
            Some("[5]")
        );
        let nested = r#"{"toolConfig":{"tools":[1]},"toolConfig":{"t\u006fols":[2],"x":1}}"#;
        assert_eq!(
            find_path(nested, &["toolConfig", "tools"]).map(|r| &nested[r]),
            Some("[2]")
        );
        // Every occurrence may be asked about; only the last one's span is returned.
        let mut asked = Vec::new();
        let span = find_path_with(twice.as_bytes(), &["tools"], |start, _| {
            asked.push(start);
            None
        });
        assert_eq!(asked, [9, 39]);
        assert_eq!(span, Some(39..42));
        // A key that is only similar is another key.
        assert_eq!(find_path(r#"{"tools ":[1]}"#, &["tools"]), None);
        assert_eq!(find_path(r#"{"\"tools":[1]}"#, &["tools"]), None);
    }
}
