//! Reading a tool's text (name, description, parameters) out of its JSON, in any dialect.
//!
//! A parameter schema is read into [`Schema`], which keeps only what ranking reads (property
//! names and descriptions, through `properties`, `items` and the combinators) and skips the
//! rest without building it: a new tool's schema used to become a `serde_json::Value` tree
//! first, and its allocations were a fifth of the time to read a never-seen tool. Skipping also
//! means a number no `f64` holds (`1e400`) in a schema no longer makes the tool unreadable.

use crate::dialects::ToolText;
use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::borrow::Cow;
use std::fmt;

/// How deep nested parameter schemas are followed; real schemas rarely pass 4.
const MAX_DEPTH: usize = 8;

/// Builds the ranking text of a tool from its name, description and parameter schema.
pub fn tool_text(name: &str, description: Option<&Text>, schema: Option<&Schema>) -> ToolText {
    // Measured first, then written: each string is allocated once, at its final size.
    let mut params = Joined::default();
    let mut keys = Joined::default();
    for _pass in ["measure", "write"] {
        if let Some(schema) = schema {
            for_each_param(schema, 0, &mut |name, description| {
                params.add(name);
                keys.add(name);
                if let Some(d) = description {
                    params.add(d);
                }
            });
        }
        params.measured();
        keys.measured();
    }
    ToolText {
        name: name.to_owned(),
        description: description
            .and_then(|d| d.0.as_deref())
            .unwrap_or_default()
            .to_owned(),
        params: params.text,
        keys: keys.text,
    }
}

/// Texts joined by ", ", as `[..].join(", ")` would: added twice, to be measured and then
/// written.
#[derive(Default)]
struct Joined {
    text: String,
    /// Whether the texts are written now (else measured).
    writing: bool,
    /// Parts added so far in this pass.
    parts: usize,
    /// Bytes measured.
    len: usize,
}

impl Joined {
    const SEPARATOR: &'static str = ", ";

    fn add(&mut self, part: &str) {
        let separator = if self.parts > 0 { Self::SEPARATOR } else { "" };
        self.parts += 1;
        if self.writing {
            self.text.push_str(separator);
            self.text.push_str(part);
        } else {
            self.len += separator.len() + part.len();
        }
    }

    /// The measuring pass is over (or the writing one): from now on, write.
    fn measured(&mut self) {
        if !self.writing {
            self.text = String::with_capacity(self.len);
            self.writing = true;
            self.parts = 0;
        }
    }
}

/// Calls `visit` with each property's name and description, depth first (properties in key
/// order, as a JSON object map sorts them), through objects, arrays and the schema
/// combinators.
fn for_each_param<'s>(
    schema: &'s Schema,
    depth: usize,
    visit: &mut impl FnMut(&'s str, Option<&'s str>),
) {
    if depth > MAX_DEPTH {
        return;
    }
    for (name, prop) in &schema.properties {
        visit(name, prop.description.0.as_deref());
        for_each_param(prop, depth + 1, visit);
    }
    let Some(nested) = &schema.nested else {
        return;
    };
    if let Some(items) = &nested.items {
        for_each_param(items, depth + 1, visit);
    }
    for alternatives in [&nested.any_of, &nested.one_of, &nested.all_of] {
        for alt in alternatives {
            for_each_param(alt, depth + 1, visit);
        }
    }
}

/// A JSON string, or nothing when the value is of another type (it is skipped, never an
/// error): a tool's or a property's `description`.
#[derive(Debug, Default, PartialEq)]
pub struct Text<'a>(pub Option<Cow<'a, str>>);

/// What ranking reads of a JSON Schema node. Any JSON value reads as one: a value that is not
/// an object, or a member of the wrong type, reads as empty, as `Value::as_object` and friends
/// would have it. Duplicate keys: the last wins, as in a JSON object map.
#[derive(Debug, Default, PartialEq)]
pub struct Schema<'a> {
    /// `properties`, sorted by name, one entry per name.
    properties: Vec<(Cow<'a, str>, Schema<'a>)>,
    description: Text<'a>,
    /// `items` and the combinators, which few schemas have: apart, so that each property's
    /// schema is small to build, move (sorting the properties) and free.
    nested: Option<Box<Nested<'a>>>,
}

/// The schemas a schema holds besides its properties.
#[derive(Debug, Default, PartialEq)]
struct Nested<'a> {
    items: Option<Schema<'a>>,
    any_of: Vec<Schema<'a>>,
    one_of: Vec<Schema<'a>>,
    all_of: Vec<Schema<'a>>,
}

impl<'a> Schema<'a> {
    fn nested(&mut self) -> &mut Nested<'a> {
        self.nested.get_or_insert_default()
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(TextVisitor)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Schema<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(SchemaVisitor)
    }
}

/// An object key, borrowed when it has no escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Key<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(TextVisitor)
            .map(|t| Key(t.0.unwrap_or_default()))
    }
}

/// `properties`: a map of schemas, or nothing.
struct Properties<'a>(Vec<(Cow<'a, str>, Schema<'a>)>);

impl<'de: 'a, 'a> Deserialize<'de> for Properties<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(PropertiesVisitor)
    }
}

/// `anyOf`, `oneOf`, `allOf`: a list of schemas, or nothing.
struct Alternatives<'a>(Vec<Schema<'a>>);

impl<'de: 'a, 'a> Deserialize<'de> for Alternatives<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(AlternativesVisitor)
    }
}

/// Accepts every JSON type; what it does not want it drains, member by member, so the rest of
/// the document is still read (and checked) by the parser.
macro_rules! ignore_other_types {
    ($empty:expr) => {
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok($empty)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok($empty)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok($empty)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok($empty)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok($empty)
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok($empty)
        }
    };
}

fn drain_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
}

fn drain_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<(), A::Error> {
    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
    Ok(())
}

struct TextVisitor;

impl<'de> Visitor<'de> for TextVisitor {
    type Value = Text<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Text(Some(Cow::Borrowed(v))))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Text(Some(Cow::Owned(v.to_owned()))))
    }

    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(Text(Some(Cow::Owned(v))))
    }

    ignore_other_types!(Text(None));

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        drain_seq(seq).map(|()| Text(None))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        drain_map(map).map(|()| Text(None))
    }
}

struct SchemaVisitor;

impl<'de> Visitor<'de> for SchemaVisitor {
    type Value = Schema<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Schema::default())
    }

    ignore_other_types!(Schema::default());

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        drain_seq(seq).map(|()| Schema::default())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut schema = Schema::default();
        while let Some(Key(key)) = map.next_key::<Key>()? {
            match key.as_ref() {
                "properties" => schema.properties = map.next_value::<Properties>()?.0,
                "description" => schema.description = map.next_value()?,
                "items" => schema.nested().items = Some(map.next_value()?),
                "anyOf" => schema.nested().any_of = map.next_value::<Alternatives>()?.0,
                "oneOf" => schema.nested().one_of = map.next_value::<Alternatives>()?.0,
                "allOf" => schema.nested().all_of = map.next_value::<Alternatives>()?.0,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(schema)
    }
}

struct PropertiesVisitor;

impl<'de> Visitor<'de> for PropertiesVisitor {
    type Value = Properties<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Properties(Vec::new()))
    }

    ignore_other_types!(Properties(Vec::new()));

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        drain_seq(seq).map(|()| Properties(Vec::new()))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut properties: Vec<(Cow<'de, str>, Schema<'de>)> = Vec::new();
        while let Some(Key(name)) = map.next_key::<Key>()? {
            properties.push((name, map.next_value()?));
        }
        // Key order, one entry per name, the last one written: what a JSON object map holds.
        properties.reverse();
        properties.sort_by(|a, b| a.0.cmp(&b.0));
        properties.dedup_by(|later, kept| later.0 == kept.0);
        Ok(Properties(properties))
    }
}

struct AlternativesVisitor;

impl<'de> Visitor<'de> for AlternativesVisitor {
    type Value = Alternatives<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Alternatives(Vec::new()))
    }

    ignore_other_types!(Alternatives(Vec::new()));

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::new();
        while let Some(alternative) = seq.next_element()? {
            out.push(alternative);
        }
        Ok(Alternatives(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        drain_map(map).map(|()| Alternatives(Vec::new()))
    }
}

/// Bedrock's `inputSchema`: the schema is its `json` member (a value of another type has
/// none).
#[derive(Debug, Default, PartialEq)]
pub struct Member<'a>(pub Option<Schema<'a>>);

impl<'de: 'a, 'a> Deserialize<'de> for Member<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(MemberVisitor)
    }
}

struct MemberVisitor;

impl<'de> Visitor<'de> for MemberVisitor {
    type Value = Member<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Member(None))
    }

    ignore_other_types!(Member(None));

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        drain_seq(seq).map(|()| Member(None))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut json = None;
        while let Some(Key(key)) = map.next_key::<Key>()? {
            if key == "json" {
                json = Some(map.next_value()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(Member(json))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn read(schema: &Value, description: &Value) -> ToolText {
        let (schema, description) = (schema.to_string(), description.to_string());
        let schema: Schema = serde_json::from_str(&schema).unwrap();
        let description: Text = serde_json::from_str(&description).unwrap();
        tool_text("send", Some(&description), Some(&schema))
    }

    #[test]
    fn collects_nested_parameters() {
        let schema = json!({
            "type": "object",
            "properties": {
                "channel": {"type": "string", "description": "Channel id"},
                "blocks": {"type": "array", "items": {"type": "object", "properties": {
                    "text": {"type": "string", "description": "Block text"}
                }}},
                "when": {"anyOf": [{"type": "object", "properties": {"at": {"type": "string"}}}]}
            }
        });
        let t = read(&schema, &json!("Sends"));
        assert_eq!(t.description, "Sends");
        assert_eq!(
            t.params,
            "blocks, text, Block text, channel, Channel id, when, at"
        );
        assert_eq!(t.keys, "blocks, text, channel, when, at");
        assert_eq!(t.params.capacity(), t.params.len(), "allocated at its size");
    }

    #[test]
    fn tolerates_missing_and_odd_fields() {
        let t = read(&json!("not a schema"), &json!(5));
        assert_eq!(
            t,
            ToolText {
                name: "send".into(),
                ..Default::default()
            }
        );
        let odd = json!({"properties": {"a": true, "b": {"description": 7, "items": [1]},
            "c": {"anyOf": {"x": 1}, "oneOf": "y", "allOf": [null, {"properties": 3}]}},
            "items": "z"});
        let t = read(&odd, &json!({"text": "no"}));
        assert_eq!(t.params, "a, b, c");
        assert_eq!(t.description, "");
    }

    #[test]
    fn duplicate_keys_keep_the_last_and_escapes_are_read() {
        let text = r#"{"properties": {"b": {"description": "first"}, "a\u0062c": {},
            "b": {"description": "second"}}, "description": "x", "description": 1}"#;
        let schema: Schema = serde_json::from_str(text).unwrap();
        let t = tool_text("f", None, Some(&schema));
        assert_eq!(t.params, "abc, b, second");
    }

    #[test]
    fn numbers_no_float_holds_are_skipped() {
        let text = r#"{"properties": {"n": {"maximum": 1e400, "description": "big"}}}"#;
        let schema: Schema = serde_json::from_str(text).unwrap();
        assert_eq!(tool_text("f", None, Some(&schema)).params, "n, big");
        // Still JSON, though: a broken document is an error.
        assert!(serde_json::from_str::<Schema>(r#"{"properties": {"n": tru}}"#).is_err());
    }
}
