//! What OpenAI's two APIs, Chat Completions and Responses, share: the tools check (the same
//! tool kinds, with the name in a different place) and the error shape.

use std::borrow::Cow;

use hyper::StatusCode;
use serde_json::json;
use serde_json::value::RawValue;

use super::shared::{
    Catalog, EmptyTools, ErrorShape, JsonPath, RawObject, Rejection, parse_object,
    parse_object_array, required, required_string, string_value, tool_entries,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OpenAiApi {
    Chat,
    Responses,
}

impl OpenAiApi {
    /// The name of a `function` or `custom` tool, or of a tool choice naming one. Chat nests it
    /// under the kind (`{"type":"function","function":{"name":..}}`); Responses puts it at the top.
    fn tool_name<'a>(
        self,
        object: &RawObject<'a>,
        kind: &str,
        path: &JsonPath<'_>,
    ) -> Result<Cow<'a, str>, Rejection> {
        match self {
            Self::Chat => {
                let inner_path = path.member(kind);
                let inner = parse_object(required(object, kind, path)?, &inner_path)?;
                required_string(&inner, "name", &inner_path)
            }
            Self::Responses => required_string(object, "name", path),
        }
    }
}

/// Function and custom tools have names of their own; the others (`web_search`, `file_search`,
/// `mcp`...) are reported by their type.
fn is_named_kind(kind: &str) -> bool {
    kind == "function" || kind == "custom"
}

pub(crate) fn openai_tools<'a>(
    request: &RawObject<'a>,
    api: OpenAiApi,
) -> Result<Catalog<'a>, Rejection> {
    // Chat Completions rejects `"tools": []`; Responses accepts it (its own default).
    let empty = match api {
        OpenAiApi::Chat => EmptyTools::Rejected,
        OpenAiApi::Responses => EmptyTools::Allowed,
    };
    let tools_path = JsonPath::Root("tools");
    let entries = tool_entries(request.get("tools"), &tools_path, empty)?;
    let mut catalog = Catalog::default();
    for (index, tool) in entries.iter().flatten().enumerate() {
        let path = tools_path.index(index);
        let kind = required_string(tool, "type", &path)?;
        if is_named_kind(&kind) {
            catalog.add_named(api.tool_name(tool, &kind, &path)?, &path)?;
        } else {
            catalog.add_builtin(kind);
        }
    }
    if let Some(choice) = request.get("tool_choice") {
        let choice_path = JsonPath::Root("tool_choice");
        if entries.is_none() && api == OpenAiApi::Chat {
            let message = "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.";
            return Err(Rejection::new(message).at(&choice_path));
        }
        check_openai_tool_choice(choice, &choice_path, &catalog, api)?;
    }
    Ok(catalog)
}

fn check_openai_tool_choice(
    raw: &RawValue,
    path: &JsonPath<'_>,
    catalog: &Catalog<'_>,
    api: OpenAiApi,
) -> Result<(), Rejection> {
    if let Some(mode) = string_value(raw) {
        return match &*mode {
            "none" | "auto" | "required" => Ok(()),
            _ => {
                let message = format!(
                    "Invalid value: '{mode}'. Supported values are: 'none', 'auto', and 'required'."
                );
                Err(Rejection::new(message).at(path))
            }
        };
    }
    let choice = parse_object(raw, path)?;
    let kind = required_string(&choice, "type", path)?;
    if is_named_kind(&kind) {
        return catalog.require(&api.tool_name(&choice, &kind, path)?, path);
    }
    if kind == "allowed_tools" {
        // Chat nests the list as `allowed_tools.tools`; Responses puts `tools` in the choice.
        let (holder, holder_path) = match api {
            OpenAiApi::Chat => {
                let holder_path = path.member("allowed_tools");
                let holder = parse_object(required(&choice, "allowed_tools", path)?, &holder_path)?;
                (holder, holder_path)
            }
            OpenAiApi::Responses => (choice, *path),
        };
        let list_path = holder_path.member("tools");
        let allowed = parse_object_array(required(&holder, "tools", &holder_path)?, &list_path)?;
        for (index, tool) in allowed.iter().enumerate() {
            let entry_path = list_path.index(index);
            let kind = required_string(tool, "type", &entry_path)?;
            if is_named_kind(&kind) {
                catalog.require(&api.tool_name(tool, &kind, &entry_path)?, &entry_path)?;
            }
        }
    }
    // Choices of a hosted tool are not checked: hosted types have dated aliases
    // (`web_search_preview_2025_03_11`), so a type mismatch would not prove the choice invalid.
    Ok(())
}

/// `{"error": {"message", "type", "param", "code"}}`, with the type OpenAI gives the status; a
/// failure the request asked for carries the code OpenAI gives the status, a refusal its own.
pub(crate) fn error_shape(status: StatusCode, rejection: &Rejection) -> ErrorShape {
    let (kind, status_code) = match status.as_u16() {
        401 => ("invalid_request_error", Some("invalid_api_key")),
        404 => ("invalid_request_error", Some("model_not_found")),
        429 => ("requests", Some("rate_limit_exceeded")),
        500..=599 => ("server_error", None),
        _ => ("invalid_request_error", None),
    };
    let code = if rejection.asked_failure {
        status_code
    } else {
        rejection.code
    };
    ErrorShape {
        body: json!({
            "error": { "message": rejection.message, "type": kind, "param": rejection.param, "code": code },
        }),
        header: None,
    }
}
