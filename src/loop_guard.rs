//! The loop guard: an agent that calls the same tool with the same arguments again, or two
//! tools in turn (A B A B), is stuck. Stateless: the request's own conversation holds the
//! calls, so every gateway replica sees the same history and decides the same. The looping
//! tool leaves the next request's tools (eviction, never blocking: the call that was made
//! ran); in search mode a `find_tools` that finds it again lets it back.
//!
//! Only the calls of the current task count: those after the latest user message that has
//! text. A user who asks the same thing twice in one conversation is not a loop.
//!
//! With `note` configured, the evicted tool's latest result also gets a guidance note, so the
//! model learns why the tool is gone (see [`Note`]); each dialect finds and edits the result.

use crate::glob::Glob;
use crate::json::{optional_object, whole_number};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// `loop_guard` in the configuration.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, default)]
pub struct LoopGuardConfig {
    /// Identical calls (same tool, same arguments as JSON) within `window` that make a loop
    /// (at least 2).
    #[serde(deserialize_with = "whole_number")]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(min = 2)))]
    pub repeats: usize,
    /// How many of the current task's latest calls are looked at (`repeats` to 1000).
    #[serde(deserialize_with = "whole_number")]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(min = 2, max = MAX_WINDOW)))]
    pub window: usize,
    /// Tool-name globs that are meant to repeat (polling, memory reads): never evicted.
    #[cfg_attr(
        not(target_arch = "wasm32"),
        schemars(inner(regex(pattern = crate::json::rules::NOT_BLANK)))
    )]
    pub exempt: Vec<String>,
    /// The guidance note appended to an evicted tool's latest result (the only change outside
    /// the tools array); none when absent, `{}` takes the default text.
    #[serde(deserialize_with = "optional_object")]
    pub note: Option<NoteConfig>,
    /// Loops are found, counted and logged (`loop=detected:`), and nothing is evicted or noted.
    pub report_only: bool,
}

/// `loop_guard.note`.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[cfg_attr(not(target_arch = "wasm32"), derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields, default)]
pub struct NoteConfig {
    /// The note (not empty); `{tool}` stands for the evicted tool's name. Absent: toolsift's
    /// own note, saying the tool was called repeatedly with the same arguments and is gone
    /// for this turn.
    // The default: `DEFAULT_NOTE`.
    #[cfg_attr(
        not(target_arch = "wasm32"),
        schemars(regex(pattern = crate::json::rules::NOT_BLANK))
    )]
    pub text: Option<String>,
    /// Notes for particular tools, by name or glob (not empty); the most specific match wins:
    /// an exact name, then the longest pattern.
    #[cfg_attr(not(target_arch = "wasm32"), schemars(transform = note_tools_schema))]
    pub tools: BTreeMap<String, String>,
}

/// `loop_guard.note.tools`: names and notes not blank.
#[cfg(not(target_arch = "wasm32"))]
fn note_tools_schema(schema: &mut schemars::Schema) {
    use crate::json::rules::NOT_BLANK;
    schema.insert(
        "propertyNames".into(),
        serde_json::json!({"pattern": NOT_BLANK}),
    );
    schema.insert(
        "additionalProperties".into(),
        serde_json::json!({"type": "string", "pattern": NOT_BLANK}),
    );
}

/// The note when `loop_guard.note` gives no `text`.
pub const DEFAULT_NOTE: &str = "[toolsift] `{tool}` has been called repeatedly with the same \
     arguments and is no longer available in this conversation turn. Do not call it again: \
     use the results you already have, try a different approach, or answer the user.";

impl Default for LoopGuardConfig {
    fn default() -> Self {
        // Field data: the common duplicate repeats exactly twice; agent runtimes that guard
        // themselves look at about the last ten calls.
        LoopGuardConfig {
            repeats: 2,
            window: 10,
            exempt: Vec::new(),
            note: None,
            report_only: false,
        }
    }
}

/// The largest `window`: the history is read whole anyway, but a guard that looks further
/// back than this is no longer about the current loop.
const MAX_WINDOW: usize = 1000;

/// One tool call of the conversation, as the request carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PastCall {
    pub name: String,
    /// Where the arguments' JSON is in the text the dialect read (OpenAI Chat and Responses:
    /// a string holding JSON; the others: the value itself); `None` when the call has none.
    /// A place rather than a copy: most requests' calls are never looked at.
    pub arguments: Option<std::ops::Range<usize>>,
}

impl PastCall {
    /// The call's arguments in `text` (the body the dialect read), as JSON text.
    pub fn arguments_in<'t>(&self, text: &'t str) -> std::borrow::Cow<'t, str> {
        let raw = self
            .arguments
            .as_ref()
            .and_then(|r| text.get(r.clone()))
            .unwrap_or_default();
        if raw.starts_with('"') {
            if let Ok(inner) = serde_json::from_str::<String>(raw) {
                return inner.into();
            }
        }
        raw.into()
    }
}

/// The compiled guard, built once with the configuration.
#[derive(Debug, Clone)]
pub struct LoopGuard {
    repeats: usize,
    window: usize,
    exempt: Vec<Glob>,
    note: Option<Note>,
    report_only: bool,
}

/// The guidance note, compiled: the text for each tool.
#[derive(Debug, Clone)]
pub struct Note {
    text: String,
    /// Per-tool texts, most specific pattern first: exact names, then globs by length (a
    /// longer pattern says more), ties in name order. Specificity rather than the order
    /// written, since Istio hands the configuration over as a protobuf Struct, whose keys
    /// keep no order.
    tools: Vec<(Glob, String)>,
}

impl Note {
    fn new(config: &NoteConfig) -> Result<Note, (String, String)> {
        let text = config.text.as_deref().unwrap_or(DEFAULT_NOTE);
        if text.trim().is_empty() {
            return Err(("note.text".into(), "must not be empty".into()));
        }
        let mut tools = Vec::new();
        for (pattern, text) in &config.tools {
            if pattern.trim().is_empty() {
                return Err(("note.tools".into(), "a tool name must not be empty".into()));
            }
            if text.trim().is_empty() {
                return Err((format!("note.tools.{pattern}"), "must not be empty".into()));
            }
            tools.push((Glob::new(pattern), text.clone()));
        }
        let wild = |g: &Glob| g.as_str().contains(['*', '?']);
        tools.sort_by(|(a, _), (b, _)| {
            (wild(a), std::cmp::Reverse(a.as_str().len()), a.as_str()).cmp(&(
                wild(b),
                std::cmp::Reverse(b.as_str().len()),
                b.as_str(),
            ))
        });
        Ok(Note {
            text: text.to_owned(),
            tools,
        })
    }

    /// The note for the evicted tool `tool`, `{tool}` filled in.
    pub fn text_for(&self, tool: &str) -> String {
        let text = self
            .tools
            .iter()
            .find(|(glob, _)| glob.matches(tool))
            .map_or(self.text.as_str(), |(_, text)| text.as_str());
        text.replace("{tool}", tool)
    }
}

impl LoopGuard {
    /// The guard for `config`; an error names the field.
    pub fn new(config: &LoopGuardConfig) -> Result<LoopGuard, (String, String)> {
        if config.repeats < 2 {
            return Err(("repeats".into(), "must be 2 or more".into()));
        }
        if config.window < config.repeats || config.window > MAX_WINDOW {
            return Err((
                "window".into(),
                format!(
                    "must be from `repeats` ({}) to {MAX_WINDOW}",
                    config.repeats
                ),
            ));
        }
        let mut exempt = Vec::new();
        for (i, pattern) in config.exempt.iter().enumerate() {
            if pattern.trim().is_empty() {
                return Err((format!("exempt[{i}]"), "must not be empty".into()));
            }
            exempt.push(Glob::new(pattern));
        }
        let note = config.note.as_ref().map(Note::new).transpose()?;
        Ok(LoopGuard {
            repeats: config.repeats,
            window: config.window,
            exempt,
            note,
            report_only: config.report_only,
        })
    }

    /// `report_only`: loops are found and reported, never acted on.
    pub fn reports_only(&self) -> bool {
        self.report_only
    }

    /// The guidance note, when configured.
    pub fn note(&self) -> Option<&Note> {
        self.note.as_ref()
    }

    fn exempt(&self, name: &str) -> bool {
        self.exempt.iter().any(|g| g.matches(name))
    }

    /// The tools `history` (the current task's calls, oldest first, in `text`, the body the
    /// dialect read) shows looping, each once, in the order of their latest call: a call
    /// repeated `repeats` times with the same arguments within the last `window` calls, or
    /// the last four calls alternating between two (A B A B, arguments included).
    pub fn looping(&self, history: &[PastCall], text: &str) -> Vec<String> {
        let recent = history
            .get(history.len().saturating_sub(self.window)..)
            .unwrap_or_default();
        let keyed: Vec<(&str, String)> = recent
            .iter()
            .map(|c| (c.name.as_str(), arguments_key(&c.arguments_in(text))))
            .collect();
        let mut looping: Vec<String> = Vec::new();
        let mut note = |name: &str| {
            if !self.exempt(name) && !looping.iter().any(|n| n == name) {
                looping.push(name.to_owned());
            }
        };
        for (at, call) in keyed.iter().enumerate().rev() {
            // Counted from the latest occurrence of each call only.
            if keyed.get(at + 1..).unwrap_or_default().contains(call) {
                continue;
            }
            if keyed.iter().filter(|c| *c == call).count() >= self.repeats {
                note(call.0);
            }
        }
        if let [.., a1, b1, a2, b2] = keyed.as_slice() {
            if a1 == a2 && b1 == b2 && a1 != b1 {
                note(b2.0);
                note(a2.0);
            }
        }
        looping
    }
}

/// The key two calls' arguments share exactly when they say the same: the JSON canonicalised
/// (object keys sorted, whitespace gone, numbers in one form: `1`, `1.0` and `1e0` are one).
/// Text that is not JSON is its own key, marked so that it never equals a JSON one.
pub fn arguments_key(arguments: &str) -> String {
    let trimmed = arguments.trim();
    if trimmed.is_empty() {
        // No arguments at all: as an empty object, which is what the provider reads.
        return "{}".to_owned();
    }
    match serde_json::from_str::<Value>(trimmed) {
        Ok(value) => {
            let mut out = String::with_capacity(trimmed.len());
            canonical(&value, &mut out);
            out
        }
        Err(_) => format!("\u{0}{trimmed}"),
    }
}

fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, value)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                canonical(value, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        Value::Number(n) => number(n, out),
        other => out.push_str(&other.to_string()),
    }
}

/// One form per numeric value: integers (however written) as integers, other values in
/// the shortest form that reads back as the same double.
fn number(n: &serde_json::Number, out: &mut String) {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53: every integer below is a double
    if let Some(i) = n.as_i64() {
        let _ = write!(out, "{i}");
    } else if let Some(u) = n.as_u64() {
        let _ = write!(out, "{u}");
    } else if let Some(f) = n.as_f64() {
        if f.fract() == 0.0 && f.abs() < EXACT {
            let _ = write!(out, "{}", f as i64);
        } else {
            let _ = write!(out, "{f:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Calls as a dialect reads them from a body: their arguments' places in one text.
    struct Calls {
        text: String,
        calls: Vec<PastCall>,
    }

    fn call(name: &str, arguments: &str) -> (String, String) {
        (name.into(), arguments.into())
    }

    fn calls(list: &[(String, String)]) -> Calls {
        let mut text = String::new();
        let mut calls = Vec::new();
        for (name, arguments) in list {
            let start = text.len();
            text.push_str(arguments);
            calls.push(PastCall {
                name: name.clone(),
                arguments: Some(start..text.len()),
            });
            text.push(',');
        }
        Calls { text, calls }
    }

    impl LoopGuard {
        fn of(&self, list: &[(String, String)]) -> Vec<String> {
            let c = calls(list);
            self.looping(&c.calls, &c.text)
        }
    }

    fn guard(repeats: usize, window: usize, exempt: &[&str]) -> LoopGuard {
        LoopGuard::new(&LoopGuardConfig {
            repeats,
            window,
            exempt: exempt.iter().map(|s| s.to_string()).collect(),
            note: None,
            report_only: false,
        })
        .unwrap()
    }

    #[test]
    fn arguments_written_differently_are_one_key() {
        let same = [
            r#"{"a":1,"b":{"c":[1,2.0],"d":"x"}}"#,
            r#"{ "b": {"d":"x", "c":[1e0, 2]}, "a": 1.0 }"#,
            "\n{\"a\":1,\"b\":{\"c\":[1,2],\"d\":\"x\"}}\n",
        ];
        for text in same {
            assert_eq!(arguments_key(text), arguments_key(same[0]), "{text}");
        }
        assert_eq!(arguments_key(""), arguments_key("{}"));
        for other in [
            r#"{"a":1,"b":{"c":[2,1],"d":"x"}}"#,
            r#"{"a":"1","b":{"c":[1,2],"d":"x"}}"#,
            r#"{"a":1.5,"b":{"c":[1,2],"d":"x"}}"#,
            r#"{"a":1,"b":{"c":[1,2],"d":"x"},"e":null}"#,
        ] {
            assert_ne!(arguments_key(other), arguments_key(same[0]), "{other}");
        }
        assert_ne!(arguments_key("not json"), arguments_key(r#""not json""#));
    }

    #[test]
    fn the_same_call_twice_is_a_loop_and_other_arguments_are_not() {
        let g = guard(2, 10, &[]);
        let logs = call("get_pod_logs", r#"{"pod":"web-1"}"#);
        assert_eq!(g.of(std::slice::from_ref(&logs)), Vec::<String>::new());
        assert_eq!(
            g.of(&[
                logs.clone(),
                call("x", "{}"),
                call("get_pod_logs", r#"{ "pod" : "web-1" }"#)
            ]),
            ["get_pod_logs"]
        );
        assert!(
            g.of(&[logs.clone(), call("get_pod_logs", r#"{"pod":"web-2"}"#)])
                .is_empty()
        );
        // Out of the window: no longer the current loop.
        let mut history = vec![logs.clone()];
        history.extend((0..10).map(|i| call("step", &format!(r#"{{"n":{i}}}"#))));
        history.push(logs.clone());
        assert!(g.of(&history).is_empty());
        assert_eq!(
            guard(3, 10, &[]).of(&[logs.clone(), logs.clone()]),
            Vec::<String>::new()
        );
        assert_eq!(
            guard(3, 10, &[]).of(&[logs.clone(), logs.clone(), logs]),
            ["get_pod_logs"]
        );
    }

    #[test]
    fn alternation_is_a_loop_and_exempt_tools_never_are() {
        let (a, b) = (call("read", r#"{"f":1}"#), call("write", r#"{"f":1}"#));
        let history = [a.clone(), b.clone(), a.clone(), b.clone()];
        // With repeats 3 only the alternation says so; latest call first.
        assert_eq!(guard(3, 10, &[]).of(&history), ["write", "read"]);
        assert_eq!(guard(3, 10, &["wr*"]).of(&history), ["read"]);
        assert_eq!(guard(2, 10, &["*"]).of(&history), Vec::<String>::new());
    }

    #[test]
    fn bad_settings_name_their_field() {
        let bad = |repeats, window| {
            LoopGuard::new(&LoopGuardConfig {
                repeats,
                window,
                ..LoopGuardConfig::default()
            })
            .unwrap_err()
            .0
        };
        assert_eq!(bad(1, 10), "repeats");
        assert_eq!(bad(3, 2), "window");
        assert_eq!(bad(2, 5000), "window");
        let bad_note = |json: &str| {
            let note: NoteConfig = serde_json::from_str(json).unwrap();
            LoopGuard::new(&LoopGuardConfig {
                note: Some(note),
                ..LoopGuardConfig::default()
            })
            .unwrap_err()
            .0
        };
        assert_eq!(bad_note(r#"{"text":" "}"#), "note.text");
        assert_eq!(bad_note(r#"{"tools":{"":"x"}}"#), "note.tools");
        assert_eq!(bad_note(r#"{"tools":{"a*":""}}"#), "note.tools.a*");
    }

    #[test]
    fn the_most_specific_note_names_the_tool() {
        let note: NoteConfig = serde_json::from_str(
            r#"{"text":"stop {tool}","tools":{"*":"any {tool}","get_*":"get {tool}",
                "get_weather_*":"weather {tool}","get_weather_now":"now"}}"#,
        )
        .unwrap();
        let note = Note::new(&note).unwrap();
        assert_eq!(note.text_for("get_weather_now"), "now");
        assert_eq!(
            note.text_for("get_weather_today"),
            "weather get_weather_today"
        );
        assert_eq!(note.text_for("get_pods"), "get get_pods");
        assert_eq!(note.text_for("list"), "any list");
        let plain = Note::new(&NoteConfig::default()).unwrap();
        assert!(
            plain
                .text_for("x_y")
                .contains("`x_y` has been called repeatedly")
        );
        let own = Note::new(&NoteConfig {
            text: Some("stop {tool}".into()),
            ..NoteConfig::default()
        })
        .unwrap();
        assert_eq!(own.text_for("a"), "stop a");
    }
}
