//! The `Mcp-Param-*` headers of a 2026-07-28 `tools/call` (the Streamable HTTP transport's
//! custom headers, SEP-2243): a tool's `inputSchema` may mark a property with
//! `"x-mcp-header": "Token"`, and a client then mirrors that argument's value into an
//! `Mcp-Param-Token` header, so that load balancers and gateways can route on it without
//! reading the body. The server checks each header against the body (the official Python SDK
//! answers a missing or different one with HTTP 400, `HeaderMismatch`).
//!
//! The gateway needs them for the calls it sends itself (`call_tool`'s real call, and a direct
//! call of a tool the client never saw listed, so could not know the headers of): the client
//! mirrored only what the schema it knew declared, and the server's schema is the one the
//! gateway holds.
//!
//! The rules are the specification's, as the official SDKs apply them: an annotation counts only
//! on a property reached from the schema's root through `properties` alone, of type `string`,
//! `integer` or `boolean`, named by an HTTP token, and case-insensitively unique; a schema with
//! any annotation that breaks them is invalid whole (clients drop such a tool, servers check
//! nothing), and then no header is sent. An argument that is absent, `null`, an object or an
//! array has no header.

use super::message::header_value;
use serde_json::Value;

/// What a header's name is made of: `Mcp-Param-` and the annotation's token.
pub const PREFIX: &str = "mcp-param-";

/// The keywords whose value is one schema position (`properties` apart, every applicator keyword
/// takes the walk off the `properties` chain: an annotation below one is invalid).
const SUBSCHEMA_ONE: [&str; 11] = [
    "items",
    "contains",
    "unevaluatedItems",
    "additionalProperties",
    "propertyNames",
    "unevaluatedProperties",
    "not",
    "if",
    "then",
    "else",
    "contentSchema",
];
/// The keywords whose value is a list of schema positions.
const SUBSCHEMA_LIST: [&str; 4] = ["allOf", "anyOf", "oneOf", "prefixItems"];
/// The keywords whose value is a map of schema positions. `$ref` is never followed, and data
/// keywords (`default`, `enum`, `const`, `examples`) are never read as schemas.
const SUBSCHEMA_MAP: [&str; 4] = [
    "patternProperties",
    "dependentSchemas",
    "$defs",
    "definitions",
];

/// One valid annotation: the path of property names from the root, and the header's token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declared {
    pub path: Vec<String>,
    pub token: String,
}

/// The annotations of `input_schema`, or `None` when one of them is invalid (the tool's
/// definition is then invalid whole). A schema without annotations has none.
pub fn declared(input_schema: &Value) -> Option<Vec<Declared>> {
    let mut found: Vec<Declared> = Vec::new();
    // Every property on the `properties` chain met so far: its parent's place here (or none,
    // under the root) and its name; a path is spelled out only for an annotation.
    let mut chain: Vec<(Option<usize>, &str)> = Vec::new();
    // The positions still to visit: where each is (`Place`) and its schema. An explicit stack:
    // schemas come from servers, and their depth must not cost the VM's stack.
    let mut stack: Vec<(Place, &Value)> = vec![(Place::Root, input_schema)];
    while let Some((place, node)) = stack.pop() {
        let Value::Object(schema) = node else {
            continue;
        };
        if let Some(token) = schema.get("x-mcp-header") {
            let Place::Property(at) = place else {
                return None;
            };
            let token = token.as_str().filter(|t| is_token(t))?;
            let typed = schema.get("type").and_then(Value::as_str);
            if !matches!(typed, Some("string" | "integer" | "boolean")) {
                return None;
            }
            if found.iter().any(|d| d.token.eq_ignore_ascii_case(token)) {
                return None;
            }
            found.push(Declared {
                path: spell(&chain, at),
                token: token.to_owned(),
            });
        }
        for (keyword, value) in schema {
            let keyword = keyword.as_str();
            if keyword == "properties" {
                let Value::Object(properties) = value else {
                    continue;
                };
                let parent = match place {
                    Place::Root => Some(None),
                    Place::Property(at) => Some(Some(at)),
                    Place::Off => None,
                };
                for (name, sub) in properties {
                    let below = match parent {
                        Some(parent) => {
                            chain.push((parent, name));
                            Place::Property(chain.len() - 1)
                        }
                        None => Place::Off,
                    };
                    stack.push((below, sub));
                }
            } else if SUBSCHEMA_ONE.contains(&keyword) {
                stack.push((Place::Off, value));
            } else if SUBSCHEMA_LIST.contains(&keyword) {
                if let Value::Array(list) = value {
                    stack.extend(list.iter().map(|sub| (Place::Off, sub)));
                }
            } else if SUBSCHEMA_MAP.contains(&keyword) {
                if let Value::Object(map) = value {
                    stack.extend(map.values().map(|sub| (Place::Off, sub)));
                }
            }
        }
    }
    Some(found)
}

/// Where a schema position is.
#[derive(Clone, Copy)]
enum Place {
    /// The schema's root.
    Root,
    /// A property reached through `properties` alone: its place in the chain.
    Property(usize),
    /// Below some other applicator keyword.
    Off,
}

/// The names from the root down to the property at `at` of `chain`.
fn spell(chain: &[(Option<usize>, &str)], at: usize) -> Vec<String> {
    let mut path = Vec::new();
    let mut next = Some(at);
    while let Some((parent, name)) = next.and_then(|i| chain.get(i)) {
        path.push((*name).to_owned());
        next = *parent;
    }
    path.reverse();
    path
}

/// The `Mcp-Param-*` headers (lowercase names, values as the transport encodes them) of a
/// `tools/call` of `tool` (its JSON object as the server listed it) with `arguments`. None for a
/// tool that declares none, or whose declarations are invalid.
pub fn param_headers(tool: &str, arguments: &Value) -> Vec<(String, String)> {
    if !may_declare(tool) {
        return Vec::new();
    }
    let Ok(Value::Object(tool)) = serde_json::from_str::<Value>(tool) else {
        return Vec::new();
    };
    let Some(schema) = tool.get("inputSchema") else {
        return Vec::new();
    };
    let Some(declared) = declared(schema) else {
        return Vec::new();
    };
    declared
        .iter()
        .filter_map(|d| {
            let value = d
                .path
                .iter()
                .try_fold(arguments, |node, key| node.as_object()?.get(key))?;
            let rendered = match value {
                Value::String(s) => s.clone(),
                Value::Bool(b) => b.to_string(),
                // Integers as written; other numbers as their shortest form ("42.0", "1.5"),
                // which a server compares numerically for an `integer` property.
                Value::Number(n) => n.to_string(),
                Value::Null | Value::Array(_) | Value::Object(_) => return None,
            };
            Some((
                format!("{PREFIX}{}", d.token.to_ascii_lowercase()),
                header_value(&rendered),
            ))
        })
        .collect()
}

/// Whether the tool written `tool` may declare headers at all. Most tools declare none, and every
/// direct call of a 2026-07-28 client asks: a tool whose text never spells the keyword is not
/// parsed. (The keyword's letters can be written otherwise only as `\u` escapes.)
pub fn may_declare(tool: &str) -> bool {
    tool.contains("x-mcp-header") || tool.contains("\\u")
}

/// An HTTP token (RFC 9110, 5.6.2): one or more of the characters a field name may hold.
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(schema: Value) -> String {
        json!({"name": "t", "inputSchema": schema}).to_string()
    }

    fn headers(schema: Value, arguments: Value) -> Vec<(String, String)> {
        param_headers(&tool(schema), &arguments)
    }

    fn pair(name: &str, value: &str) -> (String, String) {
        (name.to_owned(), value.to_owned())
    }

    #[test]
    fn each_declared_argument_is_mirrored_in_its_header() {
        let schema = json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "limit": {"type": "integer", "x-mcp-header": "Limit"},
            "dry": {"type": "boolean", "x-mcp-header": "Dry-Run"},
            "query": {"type": "string"},
            "scope": {"type": "object", "properties": {
                "tenant": {"type": "string", "x-mcp-header": "Tenant"}
            }}
        }});
        let mut got = headers(
            schema,
            json!({"region": "us-west1", "limit": 42, "dry": true, "query": "q",
                   "scope": {"tenant": "acme"}}),
        );
        got.sort();
        assert_eq!(
            got,
            [
                pair("mcp-param-dry-run", "true"),
                pair("mcp-param-limit", "42"),
                pair("mcp-param-region", "us-west1"),
                pair("mcp-param-tenant", "acme"),
            ]
        );
    }

    #[test]
    fn values_that_are_not_plain_ascii_go_base64_encoded() {
        let schema = json!({"type": "object", "properties": {
            "city": {"type": "string", "x-mcp-header": "City"}
        }});
        // What the Python SDK's encode_header_value gives for each.
        for (value, header) in [
            ("Zürich", "=?base64?WsO8cmljaA==?="),
            (" padded", "=?base64?IHBhZGRlZA==?="),
            ("=?base64?abc?=", "=?base64?PT9iYXNlNjQ/YWJjPz0=?="),
            (
                "plain text, with: punctuation",
                "plain text, with: punctuation",
            ),
        ] {
            assert_eq!(
                headers(schema.clone(), json!({ "city": value })),
                [pair("mcp-param-city", header)],
                "{value}"
            );
        }
    }

    #[test]
    fn absent_null_and_structured_arguments_have_no_header() {
        let schema = json!({"type": "object", "properties": {
            "a": {"type": "string", "x-mcp-header": "A"},
            "b": {"type": "object", "properties": {"c": {"type": "string", "x-mcp-header": "C"}}}
        }});
        for arguments in [
            json!({}),
            json!({"a": null}),
            json!({"a": ["x"]}),
            json!({"a": {"x": 1}}),
            json!({"b": "not an object"}),
            json!("not an object"),
        ] {
            assert_eq!(
                headers(schema.clone(), arguments.clone()),
                [],
                "{arguments}"
            );
        }
    }

    #[test]
    fn an_invalid_declaration_anywhere_means_no_header_at_all() {
        let valid = json!({"type": "string", "x-mcp-header": "Region"});
        for invalid in [
            // Below an applicator keyword other than `properties`.
            json!({"items": {"type": "string", "x-mcp-header": "X"}}),
            json!({"anyOf": [{"type": "string", "x-mcp-header": "X"}]}),
            json!({"$defs": {"d": {"type": "string", "x-mcp-header": "X"}}}),
            json!({"properties": {"x": {"properties": {}, "additionalProperties":
                {"type": "string", "x-mcp-header": "X"}}}}),
            // Not a token, not a string, a type that is not allowed, no type.
            json!({"properties": {"x": {"type": "string", "x-mcp-header": "Two words"}}}),
            json!({"properties": {"x": {"type": "string", "x-mcp-header": ""}}}),
            json!({"properties": {"x": {"type": "string", "x-mcp-header": 7}}}),
            json!({"properties": {"x": {"type": "number", "x-mcp-header": "X"}}}),
            json!({"properties": {"x": {"type": ["string"], "x-mcp-header": "X"}}}),
            json!({"properties": {"x": {"x-mcp-header": "X"}}}),
            // The same token twice, whatever its case.
            json!({"properties": {"x": {"type": "string", "x-mcp-header": "region"}}}),
        ] {
            let schema =
                json!({"type": "object", "properties": {"region": valid, "other": invalid}});
            assert_eq!(
                headers(schema.clone(), json!({"region": "eu"})),
                [],
                "{schema}"
            );
        }
        // On the root itself.
        assert_eq!(
            declared(&json!({"type": "object", "x-mcp-header": "X"})),
            None
        );
        // Data keywords are not schemas: an annotation in a default is no declaration.
        let schema = json!({"type": "object", "properties": {"region": valid,
            "other": {"type": "object", "default": {"x-mcp-header": "Nope"},
                      "enum": [{"x-mcp-header": "Nope"}]}}});
        assert_eq!(
            headers(schema, json!({"region": "eu"})),
            [pair("mcp-param-region", "eu")]
        );
    }

    #[test]
    fn an_escaped_keyword_is_read_as_the_keyword() {
        let raw = r#"{"name":"t","inputSchema":{"type":"object","properties":{"r":{"type":"string","x-mcp-h\u0065ader":"R"}}}}"#;
        assert_eq!(
            param_headers(raw, &json!({"r": "v"})),
            [pair("mcp-param-r", "v")]
        );
    }

    #[test]
    fn a_tool_without_a_readable_schema_has_none() {
        for raw in [
            "",
            "not json",
            "[]",
            r#"{"name":"t"}"#,
            r#"{"name":"t","inputSchema":7}"#,
        ] {
            assert_eq!(param_headers(raw, &json!({"a": "b"})), [], "{raw}");
        }
    }

    #[test]
    fn a_deep_schema_costs_no_recursion() {
        // serde_json refuses nesting past 128 when reading; a Value built in code has no
        // such bound, and the walk must not depend on one.
        let nest = |inner: Value, key: &str, wrap: bool| {
            let mut map = serde_json::Map::new();
            map.insert(key.to_owned(), inner);
            if !wrap {
                return Value::Object(map);
            }
            let mut object = serde_json::Map::new();
            object.insert("type".to_owned(), json!("object"));
            object.insert("properties".to_owned(), Value::Object(map));
            Value::Object(object)
        };
        let mut schema = json!({"type": "string", "x-mcp-header": "Deep"});
        let mut arguments = json!("bottom");
        for i in 0..10_000 {
            schema = nest(schema, &format!("p{i}"), true);
            arguments = nest(arguments, &format!("p{i}"), false);
        }
        let found = declared(&schema).unwrap_or_default();
        assert_eq!(found.len(), 1);
        assert_eq!(found.first().map(|d| d.path.len()), Some(10_000));
        // Dropping a Value this deep recurses in serde_json's own Drop: leak them instead, the
        // test's process ends anyway.
        std::mem::forget(schema);
        std::mem::forget(arguments);
    }
}
