//! OpenTelemetry's GenAI attributes of an LLM request: `gen_ai.provider.name`,
//! `gen_ai.operation.name` and `gen_ai.request.model` (the GenAI semantic conventions, at
//! Development status; `docs/book/src/operate/monitoring.md` names the version followed).
//!
//! A proxy-wasm filter can only hand values to Envoy's access loggers as filter state, and
//! each write costs about 5 µs, so the request's own record (`toolsift`) carries toolsift's
//! decision and this one is written only with `gen_ai: true`: one value,
//! `<provider> <operation> <model>`, that the OpenTelemetry access logger's CEL formatter
//! splits on spaces (`docs/examples/envoy-otel.yaml`). The provider and operation are the
//! dialect's ([`crate::dialects::RequestCodec::gen_ai`]); the model is the body's or, for the
//! APIs that name it in the path (Gemini, Bedrock), the path's, percent-decoded. It is then
//! written as [`header_safe`] writes names (so it never holds a space), `-` when unknown.

use crate::dialects::Dialect;
use crate::pipeline::{header_safe, percent_decode};

/// The filter state's name: `%FILTER_STATE(wasm.toolsift_gen_ai:PLAIN)%`.
pub const FILTER_STATE: &str = "toolsift_gen_ai";

/// Longest model name recorded, in bytes: a model name is client data.
const MAX_MODEL_BYTES: usize = 256;

/// What the headers phase knows of a request's GenAI attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenAi {
    provider: &'static str,
    operation: &'static str,
    /// The model the path names, decoded.
    path_model: Option<String>,
}

impl GenAi {
    /// A request of `dialect` on `path` (its query string is not read).
    pub fn at(dialect: Dialect, path: &str) -> GenAi {
        let codec = dialect.codec();
        let (provider, operation) = codec.gen_ai();
        let path = path.split(['?', '#']).next().unwrap_or_default();
        let path_model = codec
            .model_in_path(path.trim_end_matches('/'))
            .map(percent_decode);
        GenAi {
            provider,
            operation,
            path_model,
        }
    }

    /// Whether the model must come from the body: the path named none.
    pub fn reads_body(&self) -> bool {
        self.path_model.is_none()
    }

    /// The filter state's value, with the model the body names if the path named none.
    pub fn record(&self, body_model: Option<&str>) -> String {
        let model = self
            .path_model
            .as_deref()
            .or(body_model)
            .filter(|m| !m.is_empty())
            .map(|m| header_safe(head(m, MAX_MODEL_BYTES)));
        format!(
            "{} {} {}",
            self.provider,
            self.operation,
            model.as_deref().unwrap_or("-")
        )
    }
}

/// The top-level `model` of a body the pipeline did not analyse (a request it let through:
/// too few tools, no tools, a shape it does not read). Only with `gen_ai`: it reads the body
/// once more.
pub fn model_in_body(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Body<'a> {
        #[serde(borrow, default)]
        model: Option<crate::json::Str<'a>>,
    }
    let parsed: Body = serde_json::from_slice(body).ok()?;
    parsed.model.map(|m| m.to_string())
}

/// `text` cut to at most `max` bytes, at a character boundary.
fn head(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_dialect_names_its_provider_and_operation() {
        let cases = [
            ("/v1/chat/completions", "openai chat gpt-4o"),
            ("/v1/responses", "openai chat gpt-4o"),
            ("/v1/messages", "anthropic chat gpt-4o"),
            ("/api/chat", "ollama chat gpt-4o"),
        ];
        for (path, want) in cases {
            let dialect = Dialect::from_path(path).unwrap();
            assert_eq!(GenAi::at(dialect, path).record(Some("gpt-4o")), want);
        }
    }

    #[test]
    fn gemini_and_bedrock_name_the_model_in_the_path() {
        let gemini = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse";
        let at = GenAi::at(Dialect::from_path(gemini).unwrap(), gemini);
        assert_eq!(
            at.record(None),
            "gcp.gemini generate_content gemini-2.5-flash"
        );
        let bedrock = "/model/us.anthropic.claude-sonnet-4-20250514-v1%3A0/converse-stream";
        let at = GenAi::at(Dialect::from_path(bedrock).unwrap(), bedrock);
        assert_eq!(
            at.record(Some("ignored")),
            "aws.bedrock chat us.anthropic.claude-sonnet-4-20250514-v1:0"
        );
    }

    #[test]
    fn a_body_left_unanalysed_still_names_its_model() {
        assert_eq!(
            model_in_body(br#"{"model":"m\u00e9","tools":[]}"#).as_deref(),
            Some("m\u{e9}")
        );
        for body in [&b"{}"[..], b"[1]", b"{\"model\":3}", b"\xff", b""] {
            assert_eq!(model_in_body(body), None);
        }
    }

    #[test]
    fn a_model_never_breaks_the_record() {
        let at = GenAi::at(Dialect::OpenaiChat, "/v1/chat/completions");
        assert_eq!(at.record(None), "openai chat -");
        assert_eq!(at.record(Some("")), "openai chat -");
        assert_eq!(
            at.record(Some("my model\r\n")),
            "openai chat my%20model%0D%0A"
        );
        let long = "m".repeat(1000);
        assert_eq!(at.record(Some(&long)).len(), "openai chat ".len() + 256);
        // A path whose id decodes to bytes that are not UTF-8, or to spaces.
        let bedrock = "/model/a%20b%FF/converse";
        let at = GenAi::at(Dialect::Bedrock, bedrock);
        assert_eq!(at.record(None), "aws.bedrock chat a%20b%EF%BF%BD");
    }
}
