//! The five LLM request dialects: where each keeps the user's question, the tools, the tool
//! that `tool_choice` names and the tools the conversation already called.
//!
//! Each dialect module turns a body into a [`Request`] (cheap: runs on every request), splits a
//! tools container into its entries (a structural scan), and reads one entry into an [`Entry`]
//! (costly: runs once per distinct tool definition, then cached in [`crate::rank`]).

mod anthropic;
mod bedrock;
mod gemini;
mod openai_chat;
mod openai_responses;
pub mod schema;

use crate::rewrite::ArrayLayout;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::fmt;

/// Longest query text ranked, in bytes; longer text keeps its head and tail.
pub const MAX_QUERY_BYTES: usize = 8 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dialect {
    OpenaiChat,
    OpenaiResponses,
    Anthropic,
    Gemini,
    Bedrock,
}

impl Dialect {
    pub const ALL: [Dialect; 5] = [
        Dialect::OpenaiChat,
        Dialect::OpenaiResponses,
        Dialect::Anthropic,
        Dialect::Gemini,
        Dialect::Bedrock,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Dialect::OpenaiChat => "openai_chat",
            Dialect::OpenaiResponses => "openai_responses",
            Dialect::Anthropic => "anthropic",
            Dialect::Gemini => "gemini",
            Dialect::Bedrock => "bedrock",
        }
    }

    /// The dialect an API path belongs to. Query strings are ignored; unknown paths are `None`.
    pub fn from_path(path: &str) -> Option<Dialect> {
        let path = path.split(['?', '#']).next().unwrap_or_default();
        let path = path.trim_end_matches('/');
        if path.ends_with("/chat/completions") {
            Some(Dialect::OpenaiChat)
        } else if path.ends_with("/responses") {
            Some(Dialect::OpenaiResponses)
        } else if path.ends_with("/messages") {
            Some(Dialect::Anthropic)
        } else if path.ends_with(":generateContent") || path.ends_with(":streamGenerateContent") {
            Some(Dialect::Gemini)
        } else if is_bedrock_converse(path) {
            Some(Dialect::Bedrock)
        } else {
            None
        }
    }

    /// The chain of keys under which this dialect keeps its tools array.
    pub fn tools_path(self) -> &'static [&'static str] {
        match self {
            Dialect::Bedrock => &["toolConfig", "tools"],
            _ => &["tools"],
        }
    }

    /// Reads what ranking and selection need from a body of this dialect: everything but the
    /// tools array, which [`crate::json::find_path`] locates and [`Dialect::catalog`] reads.
    pub fn parse(self, body: &str) -> Result<Request, Problem> {
        let mut request = match self {
            Dialect::OpenaiChat => openai_chat::parse(body),
            Dialect::OpenaiResponses => openai_responses::parse(body),
            Dialect::Anthropic => anthropic::parse(body),
            Dialect::Gemini => gemini::parse(body),
            Dialect::Bedrock => bedrock::parse(body),
        }?;
        request.query = crate::text::head_and_tail(&request.query, MAX_QUERY_BYTES);
        Ok(request)
    }

    /// Lists the tools in a tools container of this dialect, with the layout needed to splice it:
    /// [`Dialect::split`], then [`Dialect::read_entry`] for each entry.
    pub fn catalog(self, container: &str) -> Result<CatalogDraft, Problem> {
        let (items, layout) = self.split(container)?;
        let sizes = items.iter().map(|i| i.text.len()).collect();
        let entries = items
            .iter()
            .map(|i| self.read_item(i))
            .collect::<Result<_, _>>()?;
        Ok(CatalogDraft {
            entries,
            sizes,
            layout,
        })
    }

    /// The entries of a tools container, not read yet, and the layout to splice it. For the
    /// flat dialects a structural scan that does not parse the entries: the catalog cache
    /// reads only the entries it has not seen before.
    pub fn split(self, container: &str) -> Result<(Vec<Item<'_>>, Layout), Problem> {
        self.split_scanned(container, None)
    }

    /// Like [`Dialect::split`], with the flat container's item ranges when a scan already found
    /// them ([`crate::json::array_prefix_spans`]).
    pub fn split_scanned(
        self,
        container: &str,
        scanned: Option<Vec<std::ops::Range<usize>>>,
    ) -> Result<(Vec<Item<'_>>, Layout), Problem> {
        if self == Dialect::Gemini {
            return gemini::split(container);
        }
        let spans = match scanned {
            Some(spans) => spans,
            None => crate::json::array_item_spans(container).ok_or(Problem::BadShape)?,
        };
        let items = spans
            .iter()
            .map(|span| Item {
                text: container.get(span.clone()).unwrap_or_default(),
                builtin: false,
            })
            .collect();
        let layout = ArrayLayout {
            span: 0..container.len(),
            items: spans,
        };
        Ok((items, Layout::Flat(layout)))
    }

    /// Reads one entry of a container (a function declaration for Gemini). An entry that is
    /// JSON but not a tool this dialect defines is a built-in (kept, never ranked); one that is
    /// not JSON at all makes the whole container [`Problem::BadShape`], as a parser reading the
    /// whole array would.
    pub fn read_item(self, item: &Item) -> Result<Entry, Problem> {
        if item.builtin {
            return Ok(Entry::Builtin);
        }
        let read = match self {
            Dialect::OpenaiChat => openai_chat::entry(item.text),
            Dialect::OpenaiResponses => openai_responses::entry(item.text),
            Dialect::Anthropic => anthropic::entry(item.text),
            Dialect::Gemini => gemini::entry(item.text),
            Dialect::Bedrock => bedrock::entry(item.text),
        };
        match read {
            Some(entry) => Ok(entry),
            None => serde_json::from_str::<serde::de::IgnoredAny>(item.text)
                .map(|_| Entry::Builtin)
                .map_err(|_| Problem::BadShape),
        }
    }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `/model/{id}/converse` and `/model/{id}/converse-stream`, with or without a prefix.
fn is_bedrock_converse(path: &str) -> bool {
    let mut segments = path.rsplit('/');
    let last = segments.next();
    let _model_id = segments.next();
    let model = segments.next();
    matches!(last, Some("converse" | "converse-stream")) && model == Some("model")
}

/// Why a body cannot be handled. Every variant passes the request upstream unchanged (or is
/// answered with a 400 under `on_error: reject`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Problem {
    /// Not JSON at all, or not UTF-8.
    MalformedJson,
    /// JSON, but not the shape this dialect's API accepts (e.g. `tools` not an array).
    BadShape,
}

impl Problem {
    /// Syntax errors are malformed JSON; valid JSON of the wrong types is a bad shape.
    pub(crate) fn of(e: &serde_json::Error) -> Problem {
        if e.is_data() {
            Problem::BadShape
        } else {
            Problem::MalformedJson
        }
    }

    pub fn reason(self) -> &'static str {
        match self {
            Problem::MalformedJson => "malformed_json",
            Problem::BadShape => "bad_shape",
        }
    }
}

/// What one request body says, besides its tools.
#[derive(Debug)]
pub struct Request {
    pub dialect: Dialect,
    /// The latest user text, bounded to [`MAX_QUERY_BYTES`].
    pub query: String,
    /// What `tool_choice` (or the dialect's equivalent) asks for.
    pub choice: Choice,
    /// Tools the conversation already called, in the order of their first call.
    pub called: Vec<String>,
    pub stream: bool,
}

/// Tools that selection must keep because the request says so.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Choice {
    /// Tools named by `tool_choice`, `allowed_tools` or `allowedFunctionNames`.
    pub named: Vec<String>,
    /// The model must call some tool (`required`, `any`, mode `ANY`): never send zero tools.
    pub requires_tool: bool,
}

impl Choice {
    pub(crate) fn name(&mut self, name: impl Into<String>) {
        let name = name.into();
        if !self.named.contains(&name) {
            self.named.push(name);
        }
    }
}

/// Records a called tool once, keeping first-call order.
pub(crate) fn note_call(called: &mut Vec<String>, name: &str) {
    if !called.iter().any(|c| c == name) {
        called.push(name.to_owned());
    }
}

/// One entry of a tools container, as [`Dialect::split`] finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Item<'a> {
    /// The entry's JSON text.
    pub text: &'a str,
    /// The container's structure says it is a built-in (a Gemini Tool object without function
    /// declarations): it is not read.
    pub builtin: bool,
}

/// One entry of a tools container.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    /// A function schema: ranked, and removed when not selected. Shared by every catalog that
    /// holds the same tool definition.
    Function(std::rc::Rc<ToolText>),
    /// A provider built-in (web search, code interpreter, MCP connector, …): always kept.
    Builtin,
}

/// The text of a function tool that ranking reads.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolText {
    pub name: String,
    pub description: String,
    /// Parameter names and descriptions, nested ones included (properties in key order).
    pub params: Vec<String>,
    /// Parameter names alone, nested ones included: the parameter-key channel of hybrid
    /// ranking matches query words against them.
    pub keys: Vec<String>,
}

/// Where the entries of a container sit, for splicing.
#[derive(Debug, Clone)]
pub enum Layout {
    /// One array of entries (OpenAI, Anthropic, Bedrock).
    Flat(ArrayLayout),
    /// Gemini: an array of Tool objects, some holding a `functionDeclarations` array.
    Grouped {
        outer: ArrayLayout,
        groups: Vec<Option<Group>>,
    },
}

/// The function declarations inside one Gemini Tool object.
#[derive(Debug, Clone)]
pub struct Group {
    /// The declarations array, relative to the Tool object's own start.
    pub inner: ArrayLayout,
    /// Index in [`CatalogDraft::entries`] of the group's first declaration.
    pub first_entry: usize,
    /// The Tool object holds nothing but declarations: drop it when none is kept.
    pub only_declarations: bool,
}

/// The tools of one container, in catalog order, and how to splice them.
#[derive(Debug, Clone)]
pub struct CatalogDraft {
    pub entries: Vec<Entry>,
    /// Byte length of each entry's JSON, for the token estimate.
    pub sizes: Vec<usize>,
    pub layout: Layout,
}

/// A text part of a message in any dialect (`{"type":"text","text":…}`, `{"text":…}`).
#[derive(Deserialize)]
pub(crate) struct TextPart<'a> {
    #[serde(borrow, default, rename = "type")]
    pub kind: Option<crate::json::Str<'a>>,
    #[serde(borrow, default)]
    pub text: Option<crate::json::Str<'a>>,
}

/// Text of a message content that is either a string or an array of parts; parts of the types
/// in `text_types` (or untyped parts with `text`) count, everything else (images, files, tool
/// results) is ignored.
pub(crate) fn content_text(content: &RawValue, text_types: &[&str]) -> String {
    if let Ok(s) = serde_json::from_str::<crate::json::Str>(content.get()) {
        return s.into_owned();
    }
    let Ok(parts) = serde_json::from_str::<Vec<TextPart>>(content.get()) else {
        return String::new();
    };
    let mut out = String::new();
    for part in parts {
        let typed_text = match part.kind.as_deref() {
            None => true,
            Some(t) => text_types.contains(&t),
        };
        if let (true, Some(text)) = (typed_text, part.text) {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(&text);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dialect_from_path() {
        let cases = [
            ("/v1/chat/completions", Some(Dialect::OpenaiChat)),
            (
                "/openai/deployments/gpt4o/chat/completions?api-version=2024-10-21",
                Some(Dialect::OpenaiChat),
            ),
            ("/api/v1/chat/completions/", Some(Dialect::OpenaiChat)),
            ("/v1/responses", Some(Dialect::OpenaiResponses)),
            ("/v1/messages", Some(Dialect::Anthropic)),
            (
                "/v1beta/models/gemini-2.5-flash:generateContent",
                Some(Dialect::Gemini),
            ),
            (
                "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
                Some(Dialect::Gemini),
            ),
            (
                "/model/anthropic.claude-3-5-sonnet-20240620-v1:0/converse",
                Some(Dialect::Bedrock),
            ),
            (
                "/model/amazon.nova-pro-v1:0/converse-stream",
                Some(Dialect::Bedrock),
            ),
            ("/v1/models", None),
            ("/v1/embeddings", None),
            ("/converse", None),
            ("/v1/messages/count_tokens", None),
        ];
        for (path, want) in cases {
            assert_eq!(Dialect::from_path(path), want, "{path}");
        }
    }

    #[test]
    fn content_text_reads_strings_and_text_parts() {
        let raw = |s: &str| RawValue::from_string(s.to_owned()).unwrap();
        assert_eq!(
            content_text(&raw(r#""hi \"there\"""#), &["text"]),
            "hi \"there\""
        );
        let parts = raw(
            r#"[{"type":"text","text":"a"},{"type":"image_url","image_url":{}},{"type":"text","text":"b"}]"#,
        );
        assert_eq!(content_text(&parts, &["text"]), "a\nb");
        let bedrock = raw(r#"[{"text":"c"},{"image":{}}]"#);
        assert_eq!(content_text(&bedrock, &["text"]), "c");
        assert_eq!(content_text(&raw("42"), &["text"]), "");
    }
}
