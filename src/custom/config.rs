//! The configuration's `custom` section: which requests have the custom shape, and where their
//! question and tools are. [`crate::config::Config`] holds it; [`super::Shape`] is it compiled.

use super::jsonpath::{FieldPath, JsonPath, Step};
use crate::json::object;
use serde::Deserialize;

/// Custom request shapes (`custom`): requests whose path matches `paths` are read by this
/// shape instead of a dialect (see [`super::Shape`]). Either the tools are a JSON array
/// (`tools_path`, each tool's `fields`, the question at `query_path`), or they are written as
/// text tags in strings (`text_path`; the question in `<userq>`, or at `query_path`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
#[cfg_attr(not(target_arch = "wasm32"), schemars(transform = custom_rules))]
pub struct Custom {
    /// Glob patterns over the request path (without its query): `*` any run of characters,
    /// `/` included, `?` one. Requests there are read by this shape, whatever dialect their
    /// path names.
    #[cfg_attr(
        not(target_arch = "wasm32"),
        schemars(length(min = 1), inner(regex(pattern = r"^[/*]")))
    )]
    pub paths: Vec<String>,
    /// Where the question is: the texts it selects, joined (`[*]`: with line breaks).
    /// Required with `tools_path`; with `text_path`, it replaces `<userq>`.
    #[serde(default)]
    pub query_path: Option<JsonPath>,
    /// The tools array; with a `[*]`, the array before it, each tool read at what follows.
    #[serde(default)]
    pub tools_path: Option<JsonPath>,
    /// Where each tool of `tools_path` keeps its name, description and parameter schema.
    #[serde(default, deserialize_with = "object")]
    pub fields: ToolFields,
    /// The strings that hold tools as text tags.
    #[serde(default)]
    pub text_path: Option<JsonPath>,
    /// Text tags: remove the tags' markup from the strings forwarded, keeping their contents.
    #[serde(default)]
    pub strip_tags: bool,
}

/// Paths from a tool's own value to its fields (`name`, `function.name`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, default)]
pub struct ToolFields {
    /// Path from a tool to its name (`function.name`, `['x-name']`).
    pub name: FieldPath,
    /// Path from a tool to its description.
    pub description: FieldPath,
    /// Path from a tool to its parameters' JSON Schema.
    pub parameters: FieldPath,
}

impl Default for ToolFields {
    fn default() -> Self {
        let path = |p: &str| FieldPath::parse(p).unwrap_or_default();
        ToolFields {
            name: path("name"),
            description: path("description"),
            parameters: path("parameters"),
        }
    }
}

/// What [`Custom::check`] holds between fields: `tools_path` or `text_path`, one of them.
/// With `tools_path`: `query_path`, at most one `[*]` in it, no `strip_tags`, and `fields`
/// that select one value each; with `text_path`, `fields` as their defaults.
#[cfg(not(target_arch = "wasm32"))]
fn custom_rules(schema: &mut schemars::Schema) {
    use super::jsonpath::patterns;
    use crate::json::rules::{add, only, set};
    use serde_json::json;
    let one = json!({"pattern": patterns::relative_one()});
    let defaults = ToolFields::default();
    let default = |path: &FieldPath| json!({"const": path.0.to_string()});
    add(
        schema,
        [
            (
                "`tools_path` (tools in a JSON array) or `text_path` (tools in text tags), one of \
                 them.",
                json!({"oneOf": [set("tools_path"), set("text_path")]}),
            ),
            (
                "With `tools_path`: `query_path` is required, `tools_path` has one `[*]` at most, \
                 each of `fields` selects one value (no `[*]`), and no `strip_tags`.",
                json!({"if": set("tools_path"), "then": {"allOf": [
                set("query_path"),
                only("strip_tags", false.into()),
                {"properties": {
                    "tools_path": {"pattern": patterns::one_each()},
                    "fields": {"properties": {
                        "name": one, "description": one, "parameters": one
                    }}
                }}
                ]}}),
            ),
            (
                "With `text_path`: `fields` as their defaults (text tags name their fields).",
                json!({"if": set("text_path"), "then": {"properties": {"fields": {"properties": {
                    "name": default(&defaults.name),
                    "description": default(&defaults.description),
                    "parameters": default(&defaults.parameters)
                }}}}}),
            ),
        ],
    );
}

impl Custom {
    /// Checks the section; an error names the field below `custom`, and why.
    pub fn check(&self) -> Result<(), (String, String)> {
        if self.paths.is_empty() {
            return Err(invalid("paths", "must name at least one path pattern"));
        }
        for (i, p) in self.paths.iter().enumerate() {
            if !p.starts_with('/') && !p.starts_with('*') {
                return Err(invalid(format!("paths[{i}]"), "must start with `/` or `*`"));
            }
        }
        let each = |p: &JsonPath| p.steps().iter().filter(|s| **s == Step::Each).count();
        match (&self.tools_path, &self.text_path) {
            (Some(_), Some(_)) => Err(invalid(
                "text_path",
                "set `tools_path` (tools in a JSON array) or `text_path` (tools in text tags), \
                 not both",
            )),
            (None, None) => Err(invalid(
                "tools_path",
                "required: set `tools_path` (tools in a JSON array) or `text_path` (tools in \
                 text tags)",
            )),
            (Some(tools), None) => {
                if each(tools) > 1 {
                    return Err(invalid(
                        "tools_path",
                        format!(
                            "`{tools}` must select one array: at most one `[*]`, before the \
                             path to each tool (`$.tools[*].function`)"
                        ),
                    ));
                }
                if self.query_path.is_none() {
                    return Err(invalid(
                        "query_path",
                        "required with `tools_path` (e.g. `$.messages[-1].content`)",
                    ));
                }
                if self.strip_tags {
                    return Err(invalid(
                        "strip_tags",
                        "applies to text tags (`text_path`) only",
                    ));
                }
                for (name, field) in [
                    ("name", &self.fields.name),
                    ("description", &self.fields.description),
                    ("parameters", &self.fields.parameters),
                ] {
                    if each(&field.0) > 0 {
                        return Err(invalid(
                            format!("fields.{name}"),
                            "must select one value: no `[*]`",
                        ));
                    }
                }
                Ok(())
            }
            (None, Some(_)) => {
                if self.fields != ToolFields::default() {
                    return Err(invalid(
                        "fields",
                        "applies to `tools_path` only (text tags name their fields)",
                    ));
                }
                Ok(())
            }
        }
    }

    /// Whether a request to `path` has this shape.
    pub fn matches(&self, path: &str) -> bool {
        let path = path.split(['?', '#']).next().unwrap_or_default();
        self.paths.iter().any(|p| crate::glob::matches(p, path))
    }
}

/// An error of the section: the field below `custom`, and why.
fn invalid(field: impl Into<String>, why: impl Into<String>) -> (String, String) {
    (field.into(), why.into())
}
