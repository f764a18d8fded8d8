//! Reading a tool's text (name, description, parameters) out of its JSON, in any dialect.

use super::ToolText;
use serde_json::Value;

/// How deep nested parameter schemas are followed; real schemas rarely pass 4.
const MAX_DEPTH: usize = 8;

/// Builds the ranking text of a tool from its name, description and parameter schema.
pub fn tool_text(name: &str, description: Option<&Value>, schema: Option<&Value>) -> ToolText {
    let mut params = Vec::new();
    let mut keys = Vec::new();
    if let Some(schema) = schema {
        collect_params(schema, 0, &mut params, &mut keys);
    }
    ToolText {
        name: name.to_owned(),
        description: description
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        params,
        keys,
    }
}

/// Appends each property's name and description, depth first, through objects, arrays and the
/// schema combinators.
fn collect_params(schema: &Value, depth: usize, out: &mut Vec<String>, keys: &mut Vec<String>) {
    if depth > MAX_DEPTH {
        return;
    }
    let Some(obj) = schema.as_object() else {
        return;
    };
    if let Some(props) = obj.get("properties").and_then(Value::as_object) {
        for (name, prop) in props {
            out.push(name.clone());
            keys.push(name.clone());
            if let Some(d) = prop.get("description").and_then(Value::as_str) {
                out.push(d.to_owned());
            }
            collect_params(prop, depth + 1, out, keys);
        }
    }
    if let Some(items) = obj.get("items") {
        collect_params(items, depth + 1, out, keys);
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(alternatives) = obj.get(key).and_then(Value::as_array) {
            for alt in alternatives {
                collect_params(alt, depth + 1, out, keys);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
        let t = tool_text("send", Some(&json!("Sends")), Some(&schema));
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
        let t = tool_text("x", None, Some(&json!("not a schema")));
        assert_eq!(
            t,
            ToolText {
                name: "x".into(),
                ..Default::default()
            }
        );
    }
}
