//! Ollama's native chat request: `messages` (roles `system`, `user`, `assistant`, `tool`;
//! assistant `tool_calls: [{"function":{"name","arguments":{…}}}]`), `tools` in OpenAI's
//! function format, and `stream`, which is true when absent. Ollama has no `tool_choice`.

use crate::dialects::shared::{History, asked, role_text, user_text};
use crate::dialects::{Choice, Problem, Request};
use crate::json::Str;
use serde::Deserialize;
use serde_json::value::RawValue;

#[derive(Deserialize)]
struct Body<'a> {
    /// The model, for OpenTelemetry's `gen_ai.request.model` ([`crate::gen_ai`]).
    #[serde(borrow, default)]
    model: Option<Str<'a>>,
    #[serde(borrow, default)]
    messages: Option<Vec<Message<'a>>>,
    #[serde(default)]
    stream: Option<bool>,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow, default)]
    role: Option<Str<'a>>,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
    #[serde(borrow, default)]
    tool_calls: Option<Vec<ToolCall<'a>>>,
}

#[derive(Deserialize)]
struct ToolCall<'a> {
    #[serde(borrow, default)]
    function: Option<Named<'a>>,
}

#[derive(Deserialize)]
struct Named<'a> {
    #[serde(borrow, default)]
    name: Option<Str<'a>>,
    /// An object (Ollama's own form), or a string holding JSON (OpenAI's).
    #[serde(borrow, default)]
    arguments: Option<&'a RawValue>,
}

pub(crate) fn parse(body: &str) -> Result<Request, Problem> {
    let parsed: Body = serde_json::from_str(body).map_err(|e| Problem::of(&e))?;
    let messages = parsed.messages.ok_or(Problem::BadShape)?;
    // Tool results are role "tool": an agent loop keeps ranking against its question.
    let turns = asked(
        &messages,
        |m| user_text(m.role.as_deref(), m.content, &["text"]),
        |m| role_text("assistant", m.role.as_deref(), m.content, &["text"]),
    );
    let question = turns.at;
    let mut history = History::new(body);
    for (at, message) in messages.iter().enumerate() {
        for call in message.tool_calls.iter().flatten().filter_map(|c| c.function.as_ref()) {
            if let Some(name) = &call.name {
                history.call(name, call.arguments, at, question);
            }
        }
    }
    Ok(Request {
        query: turns.latest,
        earlier: turns.earlier,
        assistant: turns.assistant,
        choice: Choice::default(),
        called: history.called,
        history: history.task,
        latest_calls: history.latest,
        // "This is a streaming endpoint": only `"stream": false` asks for one object.
        stream: parsed.stream.unwrap_or(true),
        native_search: false,
        // The API has no field naming a session: only the configured header does.
        model: parsed.model.map(|m| m.to_string()),
        session: None,
    })
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_note_goes_on_the_latest_result_of_the_tool() {
        use crate::dialects::Codec;
        use crate::dialects::shared::testing::noted;
        let codec: &dyn Codec = &super::super::Ollama;
        let body = r#"{"messages":[{"role":"user","content":"hi"},
 {"role":"assistant","content":"","tool_calls":[{"function":{"name":"b","arguments":{}}},{"function":{"name":"a","arguments":{}}}]},
 {"role":"tool","content":"bee"},
 {"role":"tool","content":"ay"}]}"#;
        // No names, no ids: by place.
        assert_eq!(
            noted(codec, body, "a").unwrap(),
            body.replace(r#""ay""#, r#""ay\n\nStop \"now\".""#)
        );
        // Named results are matched by name.
        let named = body
            .replace(r#""content":"bee"}"#, r#""content":"ay","tool_name":"a"}"#)
            .replace(r#""content":"ay"}"#, r#""content":"bee","tool_name":"b"}"#);
        assert_eq!(
            noted(codec, &named, "a").unwrap(),
            named.replacen(r#""ay""#, r#""ay\n\nStop \"now\".""#, 1)
        );
    }
    use super::*;

    #[test]
    fn streams_unless_told_not_to() {
        let body = |extra: &str| format!(r#"{{"model":"m","messages":[]{extra}}}"#);
        assert!(parse(&body("")).unwrap().stream);
        assert!(parse(&body(r#","stream":true"#)).unwrap().stream);
        assert!(!parse(&body(r#","stream":false"#)).unwrap().stream);
        assert_eq!(parse(&body(r#","stream":"no""#)).err(), Some(Problem::BadShape));
    }

    #[test]
    fn reads_the_question_and_the_calls() {
        let body = r#"{"model":"llama3.2","messages":[
            {"role":"user","content":"weather in Paris?"},
            {"role":"assistant","content":"","tool_calls":[{"function":{"name":"get_weather","arguments":{"city":"Paris"}}}]},
            {"role":"tool","content":"22 degrees","tool_name":"get_weather"}]}"#;
        let request = parse(body).unwrap();
        assert_eq!(request.query, "weather in Paris?");
        assert_eq!(request.called, ["get_weather"]);
        assert_eq!(request.choice, Choice::default());
    }
}
