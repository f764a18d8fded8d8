//! The JSONPath subset of custom request shapes: `$`, then any number of
//!
//! - `.name` or `['name']` (`["name"]`; `\'`, `\"` and `\\` escape inside the quotes): the
//!   member of an object (of a repeated key the last, as JSON parsers read it);
//! - `[n]`: the item of an array, `[-1]` the last, `[-2]` the one before;
//! - `[*]` (or `.*`): every item of an array, in order.
//!
//! Recursive descent (`..`), filters (`[?(…)]`), slices (`[1:3]`) and unions (`[0,1]`) are
//! refused when the configuration is read, with the reason. A path selects values in a body
//! without building it: each step reads one value's members or items as raw JSON borrowed from
//! the body, so what a path finds is a span of the body's own bytes.

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::fmt;

/// One step of a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// An object's member.
    Key(String),
    /// An array's item; negative counts from the end.
    Index(i64),
    /// Every item of an array.
    Each,
}

/// A parsed path, with the text it was written as (for messages).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JsonPath {
    text: String,
    steps: Vec<Step>,
}

impl fmt::Display for JsonPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl JsonPath {
    /// A path from the body's root: `$` first.
    pub fn parse(text: &str) -> Result<JsonPath, String> {
        let Some(rest) = text.strip_prefix('$') else {
            return Err(format!(
                "`{text}` is not a JSONPath: it must start with `$` (e.g. `$.tools`)"
            ));
        };
        Ok(JsonPath {
            text: text.to_owned(),
            steps: steps(text, rest)?,
        })
    }

    /// A path from a tool's own value (`name`, `function.name`, `['x-name']`); a leading `$`
    /// (or `$.`) is allowed and means the same. Empty: the tool's value itself.
    pub fn parse_relative(text: &str) -> Result<JsonPath, String> {
        let rest = text.strip_prefix('$').unwrap_or(text);
        let rest = match rest.chars().next() {
            None | Some('.' | '[') => Cow::Borrowed(rest),
            Some(_) => Cow::Owned(format!(".{rest}")),
        };
        Ok(JsonPath {
            text: text.to_owned(),
            steps: steps(text, &rest)?,
        })
    }

    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// The path up to its last `[*]`, and the steps after it: `$.tools[*].function` is the
    /// array `$.tools` with each item read at `function`. `None` without a `[*]`.
    pub fn split_at_last_each(&self) -> Option<(JsonPath, JsonPath)> {
        let at = self.steps.iter().rposition(|s| *s == Step::Each)?;
        let (before, after) = (self.steps.get(..at)?, self.steps.get(at + 1..)?);
        let part = |steps: &[Step], text: String| JsonPath {
            text,
            steps: steps.to_vec(),
        };
        Some((
            part(before, format!("{self} (before its last [*])")),
            part(after, format!("{self} (after its last [*])")),
        ))
    }

    /// This path followed by `more`.
    pub fn join(&self, more: &JsonPath) -> JsonPath {
        let mut steps = self.steps.clone();
        steps.extend(more.steps.iter().cloned());
        JsonPath {
            text: format!("{self} then {more}"),
            steps,
        }
    }

    /// The values the path selects in `root`, in document order. Values of the wrong type on
    /// the way (a key of an array, an index of a string) select nothing; so does a value that
    /// is not valid JSON.
    pub fn select<'a>(&self, root: &'a RawValue) -> Vec<&'a RawValue> {
        let mut current = vec![root];
        for step in &self.steps {
            let mut next = Vec::new();
            for value in current {
                apply(step, value, &mut next);
            }
            current = next;
            if current.is_empty() {
                break;
            }
        }
        current
    }

    /// The one value the path selects, if it selects exactly one.
    pub fn select_one<'a>(&self, root: &'a RawValue) -> Option<&'a RawValue> {
        match self.select(root).as_slice() {
            [one] => Some(one),
            _ => None,
        }
    }
}

impl<'de> serde::Deserialize<'de> for JsonPath {
    /// A path written as a string in the configuration: a path that cannot be read is an error
    /// there, named by the field that holds it.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        JsonPath::parse(&text).map_err(de::Error::custom)
    }
}

/// A path written as a string in the configuration; the schema says so, and the text is what
/// a default is written as.
#[cfg(not(target_arch = "wasm32"))]
impl schemars::JsonSchema for JsonPath {
    fn schema_name() -> Cow<'static, str> {
        "JsonPath".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": patterns::path(),
            "description": "A JSONPath from the body's root: `$`, `.name`, `['name']`, `[n]`, `[-1]`, `[*]`."
        })
    }
}

#[cfg(not(target_arch = "wasm32"))]
impl serde::Serialize for JsonPath {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

/// A path from a tool's own value (`custom.fields`): see [`JsonPath::parse_relative`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FieldPath(pub JsonPath);

impl FieldPath {
    pub fn parse(text: &str) -> Result<FieldPath, String> {
        JsonPath::parse_relative(text).map(FieldPath)
    }
}

#[cfg(not(target_arch = "wasm32"))]
impl schemars::JsonSchema for FieldPath {
    fn schema_name() -> Cow<'static, str> {
        "FieldPath".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": patterns::relative(),
            "description": "A path from a tool's own value (`name`, `function.name`, `['x-name']`); empty: the tool itself."
        })
    }
}

#[cfg(not(target_arch = "wasm32"))]
impl serde::Serialize for FieldPath {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> serde::Deserialize<'de> for FieldPath {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        FieldPath::parse(&text).map_err(de::Error::custom)
    }
}

/// Parses the steps after `$` (or of a relative path, which starts with `.` or `[`); `text`
/// is the whole path, for messages.
fn steps(text: &str, rest: &str) -> Result<Vec<Step>, String> {
    let mut steps = Vec::new();
    let mut rest = rest;
    while let Some(c) = rest.chars().next() {
        match c {
            '.' => {
                let after = rest.get(1..).unwrap_or_default();
                if after.starts_with('.') {
                    return Err(unsupported(text, "recursive descent (`..`)"));
                }
                if let Some(tail) = after.strip_prefix('*') {
                    steps.push(Step::Each);
                    rest = tail;
                    continue;
                }
                let end = after
                    .find(|c: char| {
                        matches!(c, '.' | '[' | ']' | '\'' | '"' | '*' | '?' | '@')
                            || c.is_whitespace()
                    })
                    .unwrap_or(after.len());
                let (name, tail) = after.split_at(end);
                if name.is_empty() {
                    return Err(format!(
                        "`{text}`: a `.` must be followed by a member name (or write `['…']`)"
                    ));
                }
                steps.push(Step::Key(name.to_owned()));
                rest = tail;
            }
            '[' => {
                let (step, tail) = bracket(text, rest.get(1..).unwrap_or_default())?;
                steps.push(step);
                rest = tail;
            }
            _ => {
                return Err(format!(
                    "`{text}`: unexpected `{c}`; steps are `.name`, `['name']`, `[n]` and `[*]`"
                ));
            }
        }
    }
    Ok(steps)
}

/// The step inside `[…]` (`inner` starts after the `[`), and the text after the `]`.
fn bracket<'t>(path: &str, inner: &'t str) -> Result<(Step, &'t str), String> {
    let close = |rest: &'t str| -> Result<&'t str, String> {
        rest.strip_prefix(']').ok_or_else(|| {
            if rest.starts_with([',', ':']) {
                unsupported(path, "unions and slices (`[a,b]`, `[1:3]`)")
            } else {
                format!("`{path}`: `[` without its `]`")
            }
        })
    };
    if let Some(rest) = inner.strip_prefix('*') {
        return Ok((Step::Each, close(rest)?));
    }
    if inner.starts_with('?') || inner.starts_with('(') {
        return Err(unsupported(path, "filters and expressions (`[?(…)]`)"));
    }
    if let Some(quote) = inner.chars().next().filter(|c| *c == '\'' || *c == '"') {
        let mut name = String::new();
        let mut chars = inner.char_indices().skip(1);
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, e)) if e == quote || e == '\\' => name.push(e),
                    _ => {
                        return Err(format!(
                            "`{path}`: inside quotes only `\\{quote}` and `\\\\` are escapes"
                        ));
                    }
                },
                c if c == quote => {
                    let rest = inner.get(i + 1..).unwrap_or_default();
                    if rest.starts_with(',') {
                        return Err(unsupported(path, "unions (`['a','b']`)"));
                    }
                    return Ok((Step::Key(name), close(rest)?));
                }
                c => name.push(c),
            }
        }
        return Err(format!(
            "`{path}`: a quoted name without its closing {quote}"
        ));
    }
    let digits = inner
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || (i == 0 && c == '-')))
        .map_or(inner.len(), |(i, _)| i);
    let (number, rest) = inner.split_at(digits);
    if number.is_empty() || number == "-" {
        return Err(format!(
            "`{path}`: `[` must hold a number, `*` or a quoted name"
        ));
    }
    // Digits beyond an i64 name an item past any array's end (or before its start): they
    // select nothing, as the largest index does.
    let index = number.parse::<i64>().unwrap_or(if number.starts_with('-') {
        i64::MIN
    } else {
        i64::MAX
    });
    Ok((Step::Index(index), close(rest)?))
}

/// The path grammar as JSON Schema patterns, for the configuration's schema: exactly what
/// [`JsonPath::parse`] and [`JsonPath::parse_relative`] accept.
#[cfg(not(target_arch = "wasm32"))]
pub mod patterns {
    use crate::json::rules::WHITESPACE;

    /// A member name after `.`: up to the next `.`, `[`, `]`, quote, `*`, `?`, `@` or space.
    fn name() -> String {
        format!(r#"[^.\[\]'"*?@{WHITESPACE}]+"#)
    }
    /// A quoted name: `\'`, `\"` and `\\` escape inside the quotes.
    const QUOTED: &str = r#"'(?:[^'\\]|\\['\\])*'|"(?:[^"\\]|\\["\\])*""#;
    /// Every item: `[*]` or `.*`.
    const EACH: &str = r"(?:\.\*|\[\*\])";

    /// A step that selects one value: `.name`, `['name']`, `[n]`, `[-n]`.
    fn one() -> String {
        format!(r"(?:\.{}|\[(?:-?[0-9]+|{QUOTED})\])", name())
    }

    /// A path from the root, any steps.
    pub fn path() -> String {
        format!(r"^\$(?:{}|{EACH})*$", one())
    }

    /// A path from the root with one `[*]` at most (`custom.tools_path`).
    pub fn one_each() -> String {
        let one = one();
        format!(r"^\${one}*(?:{EACH}{one}*)?$")
    }

    /// A path from a tool's own value: `$` optional, and a first member name without its `.`.
    pub fn relative() -> String {
        format!(r"^\$?(?:\*|{})?(?:{}|{EACH})*$", name(), one())
    }

    /// A path from a tool's own value without `[*]` (`custom.fields` with `tools_path`).
    pub fn relative_one() -> String {
        format!(r"^\$?(?:{})?{}*$", name(), one())
    }
}

fn unsupported(path: &str, what: &str) -> String {
    format!(
        "`{path}`: {what} is not supported; paths are `$` followed by `.name`, `['name']`, `[n]`, \
         `[-n]` and `[*]`"
    )
}

/// One step from one value.
fn apply<'a>(step: &Step, value: &'a RawValue, out: &mut Vec<&'a RawValue>) {
    match step {
        Step::Key(key) => {
            let mut de = serde_json::Deserializer::from_str(value.get());
            if let Ok(Some(found)) = de.deserialize_any(MemberVisitor { key }) {
                out.push(found);
            }
        }
        Step::Index(index) => {
            if let Ok(items) = serde_json::from_str::<Vec<&RawValue>>(value.get()) {
                let at = if *index < 0 {
                    i64::try_from(items.len()).ok().map(|n| n + index)
                } else {
                    Some(*index)
                };
                let item = at
                    .and_then(|at| usize::try_from(at).ok())
                    .and_then(|at| items.get(at));
                out.extend(item.copied());
            }
        }
        Step::Each => {
            if let Ok(items) = serde_json::from_str::<Vec<&RawValue>>(value.get()) {
                out.extend(items);
            }
        }
    }
}

/// Finds one member of an object among its raw members: the last of a repeated key. Anything
/// but an object has no members.
struct MemberVisitor<'k> {
    key: &'k str,
}

impl<'de, 'k> Visitor<'de> for MemberVisitor<'k> {
    type Value = Option<&'de RawValue>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(key) = map.next_key::<Key<'de>>()? {
            let value: &'de RawValue = map.next_value()?;
            if key.0 == self.key {
                found = Some(value);
            }
        }
        Ok(found)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

/// An object key, borrowed when it has no escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> serde::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(s.to_owned())))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(json: &str) -> Box<RawValue> {
        RawValue::from_string(json.to_owned()).unwrap()
    }

    fn texts(path: &str, json: &str) -> Vec<String> {
        let root = raw(json);
        JsonPath::parse(path)
            .unwrap()
            .select(&root)
            .iter()
            .map(|v| v.get().to_owned())
            .collect()
    }

    #[test]
    fn parses_the_subset() {
        use Step::*;
        let steps = |p: &str| JsonPath::parse(p).unwrap().steps().to_vec();
        assert_eq!(steps("$"), []);
        assert_eq!(steps("$.a.b"), [Key("a".into()), Key("b".into())]);
        assert_eq!(
            steps("$.messages[-1].content"),
            [Key("messages".into()), Index(-1), Key("content".into())]
        );
        assert_eq!(
            steps(r#"$['x-y']["a\"b"][0][*].*"#),
            [Key("x-y".into()), Key("a\"b".into()), Index(0), Each, Each]
        );
        assert_eq!(steps("$.météo"), [Key("météo".into())]);
        assert_eq!(steps(r"$['it\'s']"), [Key("it's".into())]);
        let rel = |p: &str| JsonPath::parse_relative(p).unwrap().steps().to_vec();
        assert_eq!(
            rel("function.name"),
            [Key("function".into()), Key("name".into())]
        );
        assert_eq!(rel("$.name"), [Key("name".into())]);
        assert_eq!(rel("['na.me']"), [Key("na.me".into())]);
        assert_eq!(rel(""), []);
    }

    #[test]
    fn refuses_what_it_does_not_support_and_says_why() {
        let err = |p: &str| JsonPath::parse(p).unwrap_err();
        assert!(err("tools").contains("must start with `$`"));
        assert!(err("$..name").contains("recursive descent"));
        assert!(err("$.tools[?(@.name)]").contains("filters"));
        assert!(err("$.tools[1:3]").contains("slices"));
        assert!(err("$.tools[0,1]").contains("unions"));
        assert!(err("$['a','b']").contains("unions"));
        assert!(err("$.tools[0").contains("without its `]`"));
        assert!(err("$.tools[]").contains("must hold a number"));
        assert!(err("$.tools[-]").contains("must hold a number"));
        assert!(err("$.tools[x]").contains("must hold a number"));
        assert!(err("$['abc").contains("without its closing"));
        assert!(err(r"$['a\n']").contains("escapes"));
        assert!(err("$.").contains("member name"));
        assert!(err("$.a b").contains("unexpected"));
        assert!(err("$x").contains("unexpected `x`"));
    }

    #[test]
    fn an_index_past_an_i64_selects_nothing() {
        let body = r#"{"tools":[1, 2]}"#;
        assert!(texts("$.tools[99999999999999999999]", body).is_empty());
        assert!(texts("$.tools[-99999999999999999999]", body).is_empty());
    }

    /// The schema's patterns (`patterns`) accept exactly the paths the parser does.
    #[test]
    fn the_schemas_patterns_are_the_grammar() {
        let fits = |pattern: String, text: &str| {
            jsonschema::validator_for(&serde_json::json!({"pattern": pattern}))
                .unwrap()
                .is_valid(&serde_json::json!(text))
        };
        let paths = [
            "$",
            "$.tools",
            "$.tools[*]",
            "$.tools.*",
            "$.tools[*].function",
            "$.a[*].b[*]",
            "$.messages[-1].content",
            "$['x-tools'][0]",
            r#"$["a\"b"]"#,
            r"$['a\'b\\']",
            "$.tools[99999999999999999999]",
            "$.é.ß",
            "$.a\u{feff}b",
            "$.a\u{a0}b",
            "name",
            "function.name",
            "['x-name']",
            "*",
            "$name",
            "",
            "tools",
            "$..name",
            "$.tools[?(@.name)]",
            "$.tools[1:3]",
            "$.tools[0,1]",
            "$['a','b']",
            "$.tools[0",
            "$.tools[]",
            "$.tools[-]",
            "$['abc",
            r"$['a\n']",
            "$.",
            "$.a b",
            "$x",
            "a..b",
            " a",
            "[*]x",
        ];
        let each = |p: &JsonPath| p.steps().iter().filter(|s| **s == Step::Each).count();
        for text in paths {
            let absolute = JsonPath::parse(text);
            assert_eq!(fits(patterns::path(), text), absolute.is_ok(), "{text}");
            assert_eq!(
                fits(patterns::one_each(), text),
                absolute.as_ref().is_ok_and(|p| each(p) <= 1),
                "{text}"
            );
            let relative = JsonPath::parse_relative(text);
            assert_eq!(fits(patterns::relative(), text), relative.is_ok(), "{text}");
            assert_eq!(
                fits(patterns::relative_one(), text),
                relative.as_ref().is_ok_and(|p| each(p) == 0),
                "{text}"
            );
        }
    }

    #[test]
    fn selects_spans_of_the_body() {
        let body = r#"{"messages":[{"content":"a"},{"content":"b"},{"content":["p"]}],"tools":[1, 2],"x":{"y":{"z":true}}}"#;
        assert_eq!(texts("$.messages[-1].content", body), [r#"["p"]"#]);
        assert_eq!(texts("$.messages[0].content", body), [r#""a""#]);
        assert_eq!(
            texts("$.messages[*].content", body),
            [r#""a""#, r#""b""#, r#"["p"]"#]
        );
        assert_eq!(texts("$.tools", body), ["[1, 2]"]);
        assert_eq!(texts("$.tools[*]", body), ["1", "2"]);
        assert_eq!(texts("$.x.y.z", body), ["true"]);
        assert_eq!(texts("$['x']['y']", body), [r#"{"z":true}"#]);
        assert!(texts("$.messages[3]", body).is_empty());
        assert!(texts("$.messages[-4]", body).is_empty());
        assert!(texts("$.tools.a", body).is_empty(), "a key of an array");
        assert!(texts("$.x[0]", body).is_empty(), "an index of an object");
        assert!(texts("$.x[*]", body).is_empty(), "[*] reads arrays only");
        assert!(texts("$.nothing", body).is_empty());
        assert_eq!(texts("$", body), [body]);
        // What a path selects is borrowed from the body: its span is the body's own bytes.
        let root = raw(body);
        let found = JsonPath::parse("$.tools")
            .unwrap()
            .select_one(&root)
            .unwrap();
        let span = crate::json::span_in(root.get(), found.get()).unwrap();
        assert_eq!(&body[span], "[1, 2]");
    }

    #[test]
    fn reads_keys_as_parsers_do() {
        // A repeated key: the last one; an escaped key is the same key.
        assert_eq!(texts("$.tools", r#"{"tools":[1],"tools":[2]}"#), ["[2]"]);
        assert_eq!(texts("$.tools", r#"{"tool\u0073":[3]}"#), ["[3]"]);
    }

    #[test]
    fn splits_at_the_last_each() {
        let p = JsonPath::parse("$.tools[*].function").unwrap();
        let (array, each) = p.split_at_last_each().unwrap();
        assert_eq!(array.steps(), [Step::Key("tools".into())]);
        assert_eq!(each.steps(), [Step::Key("function".into())]);
        assert!(
            JsonPath::parse("$.tools")
                .unwrap()
                .split_at_last_each()
                .is_none()
        );
        let name = JsonPath::parse_relative("name").unwrap();
        assert_eq!(each.join(&name).steps().len(), 2);
    }
}
