//! The gateway's own resource, `toolsift://capabilities`: added to the server's
//! `resources/list`, and read by the gateway.

use super::find::backends;
use super::{CALL_TOOL, CAPABILITIES_URI, CallAnswer, Exchange, Host, Settings, State, Step};
use crate::config::Config;
use crate::mcp::message::Outcome;
use crate::search::round::{DEFAULT_LIMIT, MAX_LIMIT};
use serde_json::{Map, Value, json};

/// The gateway's resource, as `resources/list` shows it.
fn capabilities_resource(config: &Config) -> Value {
    json!({
        "uri": CAPABILITIES_URI,
        "name": "toolsift-capabilities",
        "title": "toolsift: tool search in the gateway",
        "description": format!(
            "What this gateway's {} can do: its search backends (keyword), limits and meta-tools.",
            config.search.tool_name
        ),
        "mimeType": "application/json"
    })
}

impl Exchange {
    /// Sends the client's `resources/list` on to the server, to add the gateway's own resource
    /// to its answer.
    pub(super) fn list_resources<H: Host>(
        &mut self,
        host: &H,
        settings: &Settings,
        body: &[u8],
    ) -> Step {
        let Ok(body) = std::str::from_utf8(body) else {
            return Step::Pass;
        };
        match host.send(
            body,
            "resources/list",
            None,
            &[],
            settings.mcp.timeout_ms as u64,
        ) {
            Some(token) => {
                self.state = State::Resources { token };
                Step::Wait
            }
            None => Step::Pass,
        }
    }

    /// The server's resources (none when it has no resources, or did not answer), then the
    /// gateway's `toolsift://capabilities`.
    pub(super) fn deliver_resources<H: Host>(
        &mut self,
        host: &H,
        settings: &Settings,
        answer: &CallAnswer,
    ) -> Step {
        let reply = self.server_reply(host, answer);
        let mut result = match reply.outcome {
            Some(Outcome::Result(result)) => {
                serde_json::from_str::<Map<String, Value>>(&result).unwrap_or_default()
            }
            _ => Map::new(),
        };
        result.remove("resultType");
        let resources = result
            .entry("resources")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Some(list) = resources.as_array_mut() {
            list.push(capabilities_resource(settings.config));
        }
        if self.head.modern() {
            // Required of list results from 2026-07-28 on; without the server's, never cached.
            result.entry("ttlMs").or_insert_with(|| 0.into());
            result
                .entry("cacheScope")
                .or_insert_with(|| "private".into());
        }
        self.outcome = Some("mcp=resources/list".to_owned());
        self.result(host, Value::Object(result))
    }

    /// `resources/read toolsift://capabilities`: what this gateway's search can do.
    pub(super) fn capabilities<H: Host>(&mut self, host: &H, settings: &Settings) -> Step {
        let text = json!({
            "gateway": "toolsift",
            "version": env!("CARGO_PKG_VERSION"),
            "meta_tools": {"find": settings.config.search.tool_name, "call": CALL_TOOL},
            "search": {
                "backends": backends(settings.config).1,
                "limit": {"default": DEFAULT_LIMIT, "max": MAX_LIMIT},
                "empty_query": "error"
            },
            "tool_gating": "_tool_gating",
            "schema_version": "_meta.toolsift/schemaVersion"
        });
        let result = json!({"contents": [{
            "uri": CAPABILITIES_URI,
            "mimeType": "application/json",
            "text": text.to_string()
        }]});
        self.outcome = Some("mcp=capabilities".to_owned());
        self.result(host, result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::catalog::CatalogCache;
    use crate::mcp::exchange::testing::*;
    use crate::mcp::exchange::{Head, MODERN_REVISION};

    #[test]
    fn resources_list_adds_the_capabilities_and_read_answers_it() {
        let s = Setup::new(r#"{"mcp":{}}"#);
        let settings = s.settings();
        let list = r#"{"jsonrpc":"2.0","id":4,"method":"resources/list"}"#;
        for (answer, count) in [
            (
                CallAnswer {
                    status: Some(200),
                    content_type: "application/json".into(),
                    body: br#"{"jsonrpc":"2.0","id":4,"result":{"resources":[{"uri":"file:///a","name":"a"}]}}"#
                        .to_vec(),
                },
                2,
            ),
            (
                CallAnswer {
                    status: Some(404),
                    content_type: "application/json".into(),
                    body: br#"{"jsonrpc":"2.0","id":4,"error":{"code":-32601,"message":"Method not found"}}"#
                        .to_vec(),
                },
                1,
            ),
            (CallAnswer::default(), 1),
        ] {
            let host = Mock::default();
            let mut exchange = Exchange::new(Head::default());
            let mut cache = CatalogCache::new(1);
            assert_eq!(exchange.on_body(&host, &mut cache, &settings, list.as_bytes()), Step::Wait);
            assert_eq!(host.sent.borrow()[0].0, list, "the client's request, as it was");
            assert_eq!(exchange.on_call(&host, &mut cache, &settings, 1, answer), Step::Answered);
            let (status, answer) = host.answer();
            let resources = answer["result"]["resources"].as_array().unwrap();
            assert_eq!((status, resources.len()), (200, count));
            assert_eq!(resources[count - 1]["uri"], CAPABILITIES_URI);
        }
        // Later pages are the server's alone.
        let host = Mock::default();
        let page = r#"{"jsonrpc":"2.0","id":5,"method":"resources/list","params":{"cursor":"2"}}"#;
        let step = Exchange::new(Head::default()).on_body(
            &host,
            &mut CatalogCache::new(1),
            &settings,
            page.as_bytes(),
        );
        assert_eq!(step, Step::Pass);
        let read = r#"{"jsonrpc":"2.0","id":6,"method":"resources/read","params":{"uri":"toolsift://capabilities"}}"#;
        let mut exchange = Exchange::new(Head {
            revision: MODERN_REVISION.into(),
            ..Head::default()
        });
        assert_eq!(
            exchange.on_body(&host, &mut CatalogCache::new(1), &settings, read.as_bytes()),
            Step::Answered
        );
        let contents = &host.answer().1["result"]["contents"][0];
        let text: Value = serde_json::from_str(contents["text"].as_str().unwrap()).unwrap();
        assert_eq!(text["search"]["backends"], json!(["keyword"]));
        assert!(host.sent.borrow().is_empty());
    }
}
