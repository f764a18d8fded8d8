//! Custom request shapes: LLM requests of a JSON shape of their own (as gateways such as
//! WSO2's let their users send), read by the configuration's `custom` section instead of a
//! dialect. Two kinds:
//!
//! - JSON paths: the tools are the items of the array at `tools_path`, each read at `fields`
//!   (`name`, `description`, `parameters`, each a path from the tool); the question is the text
//!   at `query_path`. Dropped tools are spliced out of that array as a dialect's are
//!   ([`crate::rewrite`]): every other byte of the body is the client's.
//! - Text tags: the tools are written as [`tags`] inside the strings at `text_path`; the
//!   question is in `<userq>…</userq>` (or at `query_path`). Dropped tools' blocks are cut out
//!   of those strings, and with `strip_tags` the tags' markup too; every other byte of the body,
//!   and of those strings, is the client's.
//!
//! Ranking and selection are the dialects' ([`crate::pipeline::Engine::analyse_custom`]); the
//! shape reads as [`crate::dialects::Reader::Custom`], and its catalogs and tools are cached
//! apart from any dialect's. A custom request has no `tool_choice` and no conversation toolsift
//! can read: only `always_include` pins tools.

mod config;
pub mod jsonpath;
pub mod tags;

use crate::dialects::schema::{Schema, Text, tool_text};
use crate::dialects::shared::content_text;
use crate::dialects::{Entry, MAX_QUERY_BYTES};
use crate::json::span_in;
pub use config::{Custom, ToolFields};
use jsonpath::JsonPath;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::ops::Range;
use std::rc::Rc;

/// Why a body cannot be read as the custom shape (the pipeline's skip reasons of the same
/// names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadError {
    /// Not JSON.
    MalformedJson,
    /// No tools array, or no tagged tool.
    NoTools,
    /// The tools path leads to something other than an array.
    BadShape,
    /// A value was not where the parser said; never expected.
    Internal,
}

/// The `custom` section, compiled.
#[derive(Debug)]
pub struct Shape {
    query: Option<JsonPath>,
    kind: Kind,
    strip_tags: bool,
}

#[derive(Debug)]
enum Kind {
    /// The tools array, and the paths from each of its items to the tool's fields.
    Json {
        array: JsonPath,
        name: JsonPath,
        description: JsonPath,
        parameters: JsonPath,
    },
    /// The strings that hold text tags.
    Tags { strings: JsonPath },
}

/// What a custom shape found in one body.
#[derive(Debug)]
pub struct Found<'b> {
    /// The question, bounded like a dialect's.
    pub query: String,
    /// A text holding every tool (the catalog cache's key): the tools array itself, or the
    /// tagged tools one after another, each after its length.
    pub container: Cow<'b, str>,
    /// Each tool's range in `container`.
    pub items: Vec<Range<usize>>,
    /// The part of the body a rewrite may change: the tools array, or the tagged strings.
    pub span: Range<usize>,
    /// Text tags: how the strings are rewritten (`None`: the array is rebuilt like a dialect's).
    pub text: Option<TextEdit>,
}

impl Shape {
    /// `None` when the section names neither kind (the configuration check refuses that).
    pub fn new(config: &Custom) -> Option<Shape> {
        let kind = match (&config.tools_path, &config.text_path) {
            (Some(tools), _) => {
                let (array, each) = tools
                    .split_at_last_each()
                    .unwrap_or_else(|| (tools.clone(), JsonPath::default()));
                Kind::Json {
                    name: each.join(&config.fields.name.0),
                    description: each.join(&config.fields.description.0),
                    parameters: each.join(&config.fields.parameters.0),
                    array,
                }
            }
            (None, Some(strings)) => Kind::Tags {
                strings: strings.clone(),
            },
            (None, None) => return None,
        };
        Some(Shape {
            query: config.query_path.clone(),
            kind,
            strip_tags: config.strip_tags,
        })
    }

    /// Finds the question and the tools of `body`, or says why it cannot ([`ReadError`]).
    pub fn read<'b>(&self, body: &'b str) -> Result<Found<'b>, ReadError> {
        let root: &RawValue = serde_json::from_str(body).map_err(|_| ReadError::MalformedJson)?;
        match &self.kind {
            Kind::Json { array, .. } => self.read_array(body, root, array),
            Kind::Tags { strings } => self.read_tags(body, root, strings),
        }
    }

    /// Reads one tool of a [`Found::container`]. What is not a tool (an item without a string
    /// name) is a built-in: kept, never ranked.
    pub fn entry(&self, text: &str) -> Entry {
        match &self.kind {
            Kind::Json {
                name,
                description,
                parameters,
                ..
            } => json_entry(text, name, description, parameters),
            Kind::Tags { .. } => tag_entry(text),
        }
    }

    /// The texts at `query_path`, joined (`None` without one).
    fn question(&self, root: &RawValue) -> Option<String> {
        let path = self.query.as_ref()?;
        let texts: Vec<String> = path
            .select(root)
            .into_iter()
            .map(|v| content_text(v, &["text", "input_text"]))
            .filter(|t| !t.trim().is_empty())
            .collect();
        Some(texts.join("\n"))
    }

    fn read_array<'b>(
        &self,
        body: &'b str,
        root: &'b RawValue,
        array: &JsonPath,
    ) -> Result<Found<'b>, ReadError> {
        let value = array.select_one(root).ok_or(ReadError::NoTools)?;
        let text = value.get();
        if text == "null" {
            return Err(ReadError::NoTools);
        }
        let items: Vec<&RawValue> = serde_json::from_str(text).map_err(|_| ReadError::BadShape)?;
        let span = span_in(body, text).ok_or(ReadError::Internal)?;
        let items = items
            .iter()
            .map(|item| span_in(text, item.get()))
            .collect::<Option<Vec<_>>>()
            .ok_or(ReadError::Internal)?;
        Ok(Found {
            query: bounded(self.question(root).unwrap_or_default()),
            container: Cow::Borrowed(text),
            items,
            span,
            text: None,
        })
    }

    fn read_tags<'b>(
        &self,
        body: &'b str,
        root: &'b RawValue,
        strings: &JsonPath,
    ) -> Result<Found<'b>, ReadError> {
        let mut tagged = Vec::new();
        let mut container = String::new();
        let mut items = Vec::new();
        let mut question = None;
        for value in strings.select(root) {
            // Not a string (or one no Rust string can hold): nothing to read.
            let Some(decoded) = tags::Decoded::new(value.get()) else {
                continue;
            };
            let text = decoded.text.as_str();
            if question.is_none() {
                question = tags::question(text).map(str::to_owned);
            }
            let blocks = tags::blocks(text);
            let markup = if self.strip_tags {
                tags::markup(text)
            } else {
                Vec::new()
            };
            if blocks.is_empty() && markup.is_empty() {
                continue;
            }
            for block in &blocks {
                let block = text.get(block.span.clone()).unwrap_or_default();
                container.push_str(&block.len().to_string());
                container.push(':');
                items.push(container.len()..container.len() + block.len());
                container.push_str(block);
            }
            tagged.push(Tagged {
                span: span_in(body, value.get()).ok_or(ReadError::Internal)?,
                removals: blocks
                    .iter()
                    .map(|b| decoded.literal_range(b.removal.clone()))
                    .collect(),
                markup: markup
                    .into_iter()
                    .map(|m| decoded.literal_range(m))
                    .collect(),
            });
        }
        if items.is_empty() {
            return Err(ReadError::NoTools);
        }
        let span = match (tagged.first(), tagged.last()) {
            (Some(first), Some(last)) => first.span.start..last.span.end,
            _ => return Err(ReadError::Internal),
        };
        let query = match &self.query {
            Some(_) => self.question(root),
            None => question,
        };
        Ok(Found {
            query: bounded(query.unwrap_or_default()),
            container: Cow::Owned(container),
            items,
            span,
            text: Some(TextEdit { strings: tagged }),
        })
    }
}

fn bounded(query: String) -> String {
    crate::text::head_and_tail(&query, MAX_QUERY_BYTES)
}

/// One item of a tools array, read at the configured fields.
fn json_entry(text: &str, name: &JsonPath, description: &JsonPath, parameters: &JsonPath) -> Entry {
    let Ok(item) = serde_json::from_str::<&RawValue>(text) else {
        return Entry::Builtin;
    };
    let name = name
        .select_one(item)
        .and_then(|v| serde_json::from_str::<String>(v.get()).ok())
        .filter(|n| !n.trim().is_empty());
    let Some(name) = name else {
        return Entry::Builtin;
    };
    let description = description
        .select_one(item)
        .and_then(|v| serde_json::from_str::<Text>(v.get()).ok());
    let schema = parameters
        .select_one(item)
        .and_then(|v| serde_json::from_str::<Schema>(v.get()).ok());
    Entry::Function(Rc::new(tool_text(
        &name,
        description.as_ref(),
        schema.as_ref(),
    )))
}

/// One tagged tool. Its parameters are a JSON Schema (read as a dialect's are) or, when they
/// are not JSON, text that ranks as the parameters' text.
fn tag_entry(text: &str) -> Entry {
    let Some(block) = tags::blocks(text).into_iter().next() else {
        return Entry::Builtin;
    };
    let part = |range: Option<Range<usize>>| range.and_then(|r| text.get(r));
    let name = text.get(block.name).unwrap_or_default();
    let description = Text(part(block.description).map(Cow::Borrowed));
    let parameters = part(block.parameters);
    let schema = parameters.and_then(|p| serde_json::from_str::<Schema>(p).ok());
    let mut tool = tool_text(name, Some(&description), schema.as_ref());
    if let (Some(p), None) = (parameters, &schema) {
        // No schema, so no parameters were read: the text is all of them.
        tool.params = p.to_owned();
    }
    Entry::Function(Rc::new(tool))
}

/// How the tagged strings of a body are rewritten.
#[derive(Debug)]
pub struct TextEdit {
    strings: Vec<Tagged>,
}

/// A string that holds tags: where it is in the body, and byte ranges of its literal.
#[derive(Debug)]
struct Tagged {
    span: Range<usize>,
    /// Each tool's block, in catalog order.
    removals: Vec<Range<usize>>,
    /// Every tag, when `strip_tags` is set.
    markup: Vec<Range<usize>>,
}

impl TextEdit {
    /// What replaces the body's first bytes, up to the end of the last string that changes,
    /// with that length: the strings without the blocks of the tools `keep` drops (indexed
    /// like the catalog's entries) and without their markup when it is stripped. `None` when
    /// nothing changes.
    pub fn rewrite_head(&self, body: &str, keep: &[bool]) -> Option<(String, usize)> {
        let mut out = String::new();
        let mut at = 0;
        let mut entry = 0;
        for string in &self.strings {
            let first = entry;
            let mut cuts = string.markup.clone();
            for removal in &string.removals {
                if !keep.get(entry).copied().unwrap_or(true) {
                    cuts.push(removal.clone());
                }
                entry += 1;
            }
            if cuts.is_empty() {
                continue;
            }
            let literal = body.get(string.span.clone())?;
            let rewritten = tags::cut(literal, &cuts);
            // Cutting a block out joins the text around it, which can make a new tag
            // (`<tooln` + block + `ame>`): the provider would then read other tools than the
            // ones kept. Such a string is not rewritten at all (the request is skipped).
            if string.markup.is_empty() && !reads_as_kept(literal, &rewritten, keep, first) {
                return None;
            }
            out.push_str(body.get(at..string.span.start)?);
            out.push_str(&rewritten);
            at = string.span.end;
        }
        (at > 0).then_some((out, at))
    }
}

/// Whether the string `rewritten` holds exactly the tools of `literal` that `keep` keeps
/// (`first`: the catalog entry of the string's first tool), in order.
fn reads_as_kept(literal: &str, rewritten: &str, keep: &[bool], first: usize) -> bool {
    let names = |literal: &str| -> Option<Vec<String>> {
        let decoded = tags::Decoded::new(literal)?;
        let text = decoded.text.as_str();
        let names = tags::blocks(text)
            .into_iter()
            .map(|b| text.get(b.name).unwrap_or_default().to_owned());
        Some(names.collect())
    };
    let (Some(before), Some(after)) = (names(literal), names(rewritten)) else {
        return false;
    };
    let kept: Vec<String> = before
        .into_iter()
        .enumerate()
        .filter(|(i, _)| keep.get(first + i).copied().unwrap_or(true))
        .map(|(_, name)| name)
        .collect();
    kept == after
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::pipeline::Skip;

    fn shape(custom: &str) -> Shape {
        let config = Config::from_json(format!(r#"{{"custom":{custom}}}"#).as_bytes()).unwrap();
        Shape::new(config.custom.as_ref().unwrap()).unwrap()
    }

    fn names(shape: &Shape, found: &Found) -> Vec<String> {
        found
            .items
            .iter()
            .map(|r| match shape.entry(&found.container[r.clone()]) {
                Entry::Function(t) => t.name.clone(),
                Entry::Builtin => "(builtin)".to_owned(),
            })
            .collect()
    }

    #[test]
    fn reads_tools_at_json_paths() {
        let s = shape(
            r#"{"paths":["/x/*"],"query_path":"$.input.turns[-1].text","tools_path":"$.payload.functions",
                "fields":{"name":"fn.id","description":"fn['summary']","parameters":"args"}}"#,
        );
        let body = r#"{"input":{"turns":[{"text":"old"},{"text":"weather in Paris?"}]},
            "payload":{"functions":[{"fn":{"id":"get_weather","summary":"Weather now"},"args":{"type":"object","properties":{"city":{"type":"string","description":"The city"}}}},
            {"fn":{"id":"send_email"}}, {"fn":{"id":7}}, 3]}}"#;
        let found = s.read(body).unwrap();
        assert_eq!(found.query, "weather in Paris?");
        assert_eq!(&body[found.span.clone()], found.container);
        assert!(found.container.starts_with('[') && found.container.ends_with(']'));
        assert_eq!(
            names(&s, &found),
            ["get_weather", "send_email", "(builtin)", "(builtin)"]
        );
        let Entry::Function(tool) = s.entry(&found.container[found.items[0].clone()]) else {
            panic!()
        };
        assert_eq!(tool.description, "Weather now");
        assert_eq!(tool.keys, "city");
        assert!(tool.params.contains("The city"));
    }

    #[test]
    fn reads_the_each_form_of_tools_path_and_joined_questions() {
        let s = shape(
            r#"{"paths":["/x"],"query_path":"$.messages[*].content","tools_path":"$.tools[*].function"}"#,
        );
        let body = r#"{"messages":[{"content":"first"},{"content":[{"type":"text","text":"second"},{"type":"image"}]},{"content":42}],
            "tools":[{"type":"function","function":{"name":"a","description":"A"}},{"type":"function","function":{"name":"b"}}]}"#;
        let found = s.read(body).unwrap();
        assert_eq!(found.query, "first\nsecond");
        assert_eq!(names(&s, &found), ["a", "b"]);
    }

    #[test]
    fn says_why_it_cannot_read_a_body() {
        let s = shape(r#"{"paths":["/x"],"query_path":"$.q","tools_path":"$.tools"}"#);
        assert_eq!(Skip::from(s.read("{").unwrap_err()), Skip::MalformedJson);
        assert_eq!(
            Skip::from(s.read(r#"{"tools":[]} x"#).unwrap_err()),
            Skip::MalformedJson
        );
        assert_eq!(
            Skip::from(s.read(r#"{"q":"x"}"#).unwrap_err()),
            Skip::NoTools
        );
        assert_eq!(
            Skip::from(s.read(r#"{"tools":null}"#).unwrap_err()),
            Skip::NoTools
        );
        assert_eq!(
            Skip::from(s.read(r#"{"tools":{"a":1}}"#).unwrap_err()),
            Skip::BadShape
        );
        // No question: ranked against nothing, as a dialect's request without user text.
        assert_eq!(s.read(r#"{"tools":[]}"#).unwrap().query, "");
        let t = shape(r#"{"paths":["/x"],"text_path":"$.messages[*].content"}"#);
        assert_eq!(
            Skip::from(
                t.read(r#"{"messages":[{"content":"no tags"}]}"#)
                    .unwrap_err()
            ),
            Skip::NoTools
        );
    }

    /// A chat body whose system message lists tools as tags, with escapes a client may write.
    const TAGGED: &str = r#"{"model":"m","messages":[{"role":"system","content":"Tools:\n<toolname>get_weather</toolname><tooldescription>Weather for a \"city\" \u2014 now</tooldescription>\n<toolname>send_email</toolname><tooldescription>Send an e-mail</tooldescription>\n<toolname>book_flight</toolname>\n<tooldescription>Book a flight \u00e0 Paris</tooldescription><toolparameters>{\"type\":\"object\",\"properties\":{\"from\":{\"type\":\"string\"}}}</toolparameters>\nEnd."},{"role":"user","content":"<userq>weather in Paris</userq>"}],"temperature":0.20}"#;

    #[test]
    fn reads_tools_written_as_tags() {
        let s = shape(r#"{"paths":["/x"],"text_path":"$.messages[*].content"}"#);
        let found = s.read(TAGGED).unwrap();
        assert_eq!(found.query, "weather in Paris");
        assert_eq!(
            names(&s, &found),
            ["get_weather", "send_email", "book_flight"]
        );
        let entry = |i: usize| match s.entry(&found.container[found.items[i].clone()]) {
            Entry::Function(t) => t,
            Entry::Builtin => panic!(),
        };
        assert_eq!(entry(0).description, "Weather for a \"city\" — now");
        assert_eq!(entry(2).keys, "from");
        assert_eq!(&TAGGED[found.span.clone()][..10], r#""Tools:\n<"#);
        // A question at query_path wins over <userq>.
        let q =
            shape(r#"{"paths":["/x"],"text_path":"$.messages[0].content","query_path":"$.model"}"#);
        assert_eq!(q.read(TAGGED).unwrap().query, "m");
        // Parameters that are not JSON rank as text.
        let t = tag_entry("<toolname>a</toolname><toolparameters>city, date</toolparameters>");
        let Entry::Function(t) = t else { panic!() };
        assert_eq!(t.params, "city, date");
    }

    fn rewrite(s: &Shape, body: &str, keep: &[bool]) -> Option<String> {
        let found = s.read(body).unwrap();
        let (head, replaced) = found.text.as_ref().unwrap().rewrite_head(body, keep)?;
        Some(head + &body[replaced..])
    }

    fn message(body: &str, i: usize) -> String {
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        v["messages"][i]["content"].as_str().unwrap().to_owned()
    }

    #[test]
    fn cuts_dropped_tools_out_of_the_string_keeping_every_other_byte() {
        let s = shape(r#"{"paths":["/x"],"text_path":"$.messages[*].content"}"#);
        assert_eq!(rewrite(&s, TAGGED, &[true, true, true]), None);
        let out = rewrite(&s, TAGGED, &[true, false, true]).unwrap();
        assert_eq!(
            out,
            TAGGED.replace(
                r#"<toolname>send_email</toolname><tooldescription>Send an e-mail</tooldescription>\n"#,
                ""
            )
        );
        assert_eq!(
            message(&out, 0),
            "Tools:\n<toolname>get_weather</toolname><tooldescription>Weather for a \"city\" — now</tooldescription>\n<toolname>book_flight</toolname>\n<tooldescription>Book a flight à Paris</tooldescription><toolparameters>{\"type\":\"object\",\"properties\":{\"from\":{\"type\":\"string\"}}}</toolparameters>\nEnd."
        );
        let out = rewrite(&s, TAGGED, &[false, true, false]).unwrap();
        assert_eq!(
            message(&out, 0),
            "Tools:\n<toolname>send_email</toolname><tooldescription>Send an e-mail</tooldescription>\nEnd."
        );
        assert!(out.ends_with(
            r#"{"role":"user","content":"<userq>weather in Paris</userq>"}],"temperature":0.20}"#
        ));
    }

    #[test]
    fn a_cut_that_would_make_a_new_tag_is_not_made() {
        // Dropping `a` would join `<tooln` and `ame>` into a `<toolname>` of a tool `c` the
        // client never had: the string is left as it is, and the request skipped.
        let s = shape(r#"{"paths":["/x"],"text_path":"$.messages[*].content"}"#);
        let body = r#"{"messages":[{"role":"user","content":"<tooln<toolname>a</toolname>ame>c</toolname> and <toolname>b</toolname>"}]}"#;
        assert_eq!(rewrite(&s, body, &[false, true]), None);
        assert!(rewrite(&s, body, &[true, false]).is_some());
    }

    #[test]
    fn strips_the_markup_when_asked() {
        let s = shape(r#"{"paths":["/x"],"text_path":"$.messages[*].content","strip_tags":true}"#);
        // Every tool kept: the markup still goes, in every string that has some.
        let out = rewrite(&s, TAGGED, &[true, true, true]).unwrap();
        assert_eq!(message(&out, 1), "weather in Paris");
        assert!(
            message(&out, 0)
                .starts_with("Tools:\nget_weatherWeather for a \"city\" — now\nsend_email")
        );
        let out = rewrite(&s, TAGGED, &[false, false, true]).unwrap();
        assert_eq!(
            message(&out, 0),
            "Tools:\nbook_flight\nBook a flight à Paris{\"type\":\"object\",\"properties\":{\"from\":{\"type\":\"string\"}}}\nEnd."
        );
        assert!(out.starts_with(r#"{"model":"m","messages":[{"role":"system","content":"Tools:\nbook_flight\nBook a flight \u00e0 Paris"#));
        assert!(out.ends_with(r#","temperature":0.20}"#));
    }

    #[test]
    fn finds_tags_behind_escapes_and_in_non_ascii_text() {
        let s = shape(r#"{"paths":["/x"],"text_path":"$.p"}"#);
        // `<` written as \u003c, names in Greek, a tool split over an escaped newline.
        let body = r#"{"p":"\u003ctoolname>καιρός</toolname><tooldescription>Ο καιρός\ttώρα</tooldescription>\r\n<toolname>άλλο</toolname>\n<tooldescription>x</tooldescription>","z":1}"#;
        let found = s.read(body).unwrap();
        assert_eq!(names(&s, &found), ["καιρός", "άλλο"]);
        let out = rewrite(&s, body, &[false, true]).unwrap();
        assert_eq!(
            out,
            r#"{"p":"<toolname>άλλο</toolname>\n<tooldescription>x</tooldescription>","z":1}"#
        );
        let out = rewrite(&s, body, &[true, false]).unwrap();
        assert_eq!(
            out,
            r#"{"p":"\u003ctoolname>καιρός</toolname><tooldescription>Ο καιρός\ttώρα</tooldescription>\r\n","z":1}"#
        );
    }
}
