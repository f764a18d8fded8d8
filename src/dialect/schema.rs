//! Reading a tool's text (name, description, parameters) out of its JSON, in any dialect.
//!
//! The schema is walked as raw JSON, reading only the members ranking needs and skipping the
//! rest unparsed: a schema may hold numbers serde cannot represent (`"maximum": 1e400` is valid
//! JSON), and such a tool is still a function tool, ranked like any other.

use super::ToolText;
use crate::json::Str;
use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;
use std::collections::BTreeMap;
use std::fmt;

/// How deep nested parameter schemas are followed; real schemas rarely pass 4.
const MAX_DEPTH: usize = 8;

/// Builds the ranking text of a tool from its name, description and parameter schema. A
/// description that is not a string reads as none.
pub fn tool_text(
    name: &str,
    description: Option<&RawValue>,
    schema: Option<&RawValue>,
) -> ToolText {
    let mut params = Vec::new();
    let mut keys = Vec::new();
    if let Some(schema) = schema {
        collect_params(schema, 0, &mut params, &mut keys);
    }
    ToolText {
        name: name.to_owned(),
        description: description.and_then(text).unwrap_or_default(),
        params,
        keys,
    }
}

/// The string a raw JSON value holds, if it is one.
fn text(raw: &RawValue) -> Option<String> {
    serde_json::from_str::<Str>(raw.get())
        .ok()
        .map(Str::into_owned)
}

/// The members of one schema object that lead to parameters. Every other member is skipped
/// unparsed; a repeated member counts once, the last (as JSON parsers read objects).
#[derive(Default)]
struct Node<'a> {
    properties: Option<&'a RawValue>,
    description: Option<&'a RawValue>,
    items: Option<&'a RawValue>,
    any_of: Option<&'a RawValue>,
    one_of: Option<&'a RawValue>,
    all_of: Option<&'a RawValue>,
}

impl<'de: 'a, 'a> Deserialize<'de> for Node<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct NodeVisitor<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for NodeVisitor<'a> {
            type Value = Node<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON Schema object")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Node<'a>, M::Error> {
                let mut node = Node::default();
                while let Some(key) = map.next_key::<Str<'de>>()? {
                    let slot = match key.as_ref() {
                        "properties" => &mut node.properties,
                        "description" => &mut node.description,
                        "items" => &mut node.items,
                        "anyOf" => &mut node.any_of,
                        "oneOf" => &mut node.one_of,
                        "allOf" => &mut node.all_of,
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                            continue;
                        }
                    };
                    *slot = Some(map.next_value()?);
                }
                Ok(node)
            }
        }
        d.deserialize_map(NodeVisitor(std::marker::PhantomData))
    }
}

/// Appends each property's name and description, depth first (properties in key order),
/// through objects, arrays and the schema combinators.
fn collect_params(schema: &RawValue, depth: usize, out: &mut Vec<String>, keys: &mut Vec<String>) {
    if depth > MAX_DEPTH {
        return;
    }
    let Ok(node) = serde_json::from_str::<Node>(schema.get()) else {
        return;
    };
    let properties = node
        .properties
        .and_then(|p| serde_json::from_str::<BTreeMap<Str, &RawValue>>(p.get()).ok());
    for (name, prop) in properties.into_iter().flatten() {
        out.push(name.to_string());
        keys.push(name.into_owned());
        let description = serde_json::from_str::<Node>(prop.get())
            .ok()
            .and_then(|n| n.description)
            .and_then(text);
        if let Some(d) = description {
            out.push(d);
        }
        collect_params(prop, depth + 1, out, keys);
    }
    if let Some(items) = node.items {
        collect_params(items, depth + 1, out, keys);
    }
    for alternatives in [node.any_of, node.one_of, node.all_of]
        .into_iter()
        .flatten()
    {
        let Ok(alternatives) = serde_json::from_str::<Vec<&RawValue>>(alternatives.get()) else {
            continue;
        };
        for alt in alternatives {
            collect_params(alt, depth + 1, out, keys);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(json: &str) -> Box<RawValue> {
        RawValue::from_string(json.to_owned()).unwrap()
    }

    #[test]
    fn collects_nested_parameters() {
        let schema = raw(r#"{
            "type": "object",
            "properties": {
                "channel": {"type": "string", "description": "Channel id"},
                "blocks": {"type": "array", "items": {"type": "object", "properties": {
                    "text": {"type": "string", "description": "Block text"}
                }}},
                "when": {"anyOf": [{"type": "object", "properties": {"at": {"type": "string"}}}]}
            }
        }"#);
        let t = tool_text("send", Some(&raw(r#""Sends""#)), Some(&schema));
        assert_eq!(t.description, "Sends");
        assert_eq!(
            t.params,
            [
                "blocks",
                "text",
                "Block text",
                "channel",
                "Channel id",
                "when",
                "at"
            ]
        );
        assert_eq!(t.keys, ["blocks", "text", "channel", "when", "at"]);
    }

    #[test]
    fn tolerates_missing_and_odd_fields() {
        let t = tool_text("x", Some(&raw("42")), Some(&raw(r#""not a schema""#)));
        assert_eq!(
            t,
            ToolText {
                name: "x".into(),
                ..Default::default()
            }
        );
        // Tuple `items`, a non-object `properties`, a description that is not a string.
        let odd = raw(
            r#"{"properties":{"a":{"description":7,"items":[{"type":"string"}]},"b":true},
            "anyOf":"nope"}"#,
        );
        let t = tool_text("y", None, Some(&odd));
        assert_eq!(t.params, ["a", "b"]);
    }

    #[test]
    fn numbers_serde_cannot_hold_do_not_hide_a_tool() {
        let schema = raw(
            r#"{"type":"object","properties":{"amount":{"type":"number","maximum":1e400,
            "description":"How much"},"big":{"type":"integer","minimum":-99999999999999999999999}}}"#,
        );
        let t = tool_text("pay", Some(&raw(r#""Pay \u00e9""#)), Some(&schema));
        assert_eq!(t.description, "Pay é");
        assert_eq!(t.params, ["amount", "How much", "big"]);
    }

    #[test]
    fn repeated_members_count_once_the_last() {
        let schema = raw(
            r#"{"properties":{"a":{"description":"first"}},"properties":{"b":{"description":"last"},"b":{"description":"later"}}}"#,
        );
        assert_eq!(tool_text("t", None, Some(&schema)).params, ["b", "later"]);
    }
}
