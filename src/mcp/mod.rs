//! MCP: toolsift in front of MCP servers (the Streamable HTTP transport, protocol revisions
//! 2025-11-25 and 2026-07-28). A client that lists the server's tools sees `find_tools` and
//! `call_tool`; the gateway answers `find_tools` from the server's whole catalog, ranked with
//! the same code as LLM requests' tools, and turns `call_tool` into the real call. Calls of
//! tools the server did not list never reach it.
//!
//! [`message`] reads JSON-RPC messages (client requests, server answers in JSON or SSE),
//! [`param_headers`] gives the `Mcp-Param-*` headers of the calls the gateway sends,
//! [`catalog`] the server's `tools/list` pages and the cache, [`gating`] the `_tool_gating`
//! convention, [`govern`] what access rules make the gateway answer, and [`exchange`] is one
//! client message's state machine behind a host trait, which [`request`] drives from the
//! request's headers to its last response byte;
//! [`llm`] applies `_tool_gating` to LLM requests (`gating.mcp`).
//! Pure Rust, no proxy-wasm: `lifecycle/stream.rs` hands it Envoy's callbacks and
//! `lifecycle/hosts.rs` carries out its asks.

pub mod catalog;
pub mod exchange;
pub mod gating;
pub mod govern;
pub mod llm;
pub mod message;
pub mod param_headers;
pub mod request;
pub mod suggestions;

#[cfg(test)]
mod hostile {
    //! Every parser of this module over mutations of real messages: each byte flipped, each
    //! prefix, bytes inserted. Nothing a client or a server sends may panic.
    #![allow(clippy::indexing_slicing)]

    use super::*;

    const SAMPLES: [&str; 6] = [
        r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"call_tool","arguments":{"name":"a","arguments":{"x":[1,2,{"y":"\u00e9"}]}},"_meta":{"progressToken":1}}}"#,
        r#"{"tools":[{"name":"a","description":"d","inputSchema":{"type":"object","properties":{"q":{"type":"string"}}}}],"nextCursor":"2","ttlMs":5,"cacheScope":"public"}"#,
        "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}\n\n",
        r#"{"content":[{"type":"text","text":"{\"exclude\":[\"a\"],\"claim\":{\"name\":\"b\",\"arguments\":{}}}"}],"structuredContent":{"exclude":["a"],"claim":"b"}}"#,
        r#"{"name":"_tool_gating","inputSchema":{"type":"object","properties":{"m":{"type":"string"}},"required":["m"]}}"#,
        r#"{"name":"q","inputSchema":{"type":"object","properties":{"m":{"type":"string","x-mcp-header":"M"},"o":{"type":"object","properties":{"n":{"type":"integer","x-mcp-header":"N"}}}}},"m":"é","o":{"n":4}}"#,
    ];

    fn every_parser(bytes: &[u8]) {
        let text = String::from_utf8_lossy(bytes);
        if let message::Incoming::Request(r) = message::incoming(bytes) {
            let _ = r.params();
            let routing = message::RoutingHeaders {
                method: Some(r.method.clone()),
                name: Some(text.to_string()),
                params: false,
            };
            let _ = message::routing_mismatch(&routing, &r);
        }
        let _ = message::screen(bytes);
        let _ = message::server_reply("text/event-stream", bytes, "7");
        let _ = message::server_reply("application/json", bytes, "7");
        let _ = message::stream_notifications(&text);
        message::StreamWatch::default().feed(bytes);
        let _ = message::header_value(&text);
        if let Some(page) = catalog::page(&text) {
            let c = catalog::ServerCatalog::build(vec![page.clone()]);
            let _ = c.rank(&text);
            let config = crate::suggestions::SuggestionsConfig::default();
            let s = crate::suggestions::Suggestions::new(&config, suggestions::tools(vec![page]));
            let _ = s.suggest(&text, |_| false, None);
        }
        let _ = suggestions::read_list(Some(200), "application/json", bytes);
        let _ = suggestions::read_list(Some(200), "text/event-stream", bytes);
        let _ = gating::verdict(&text);
        let _ = gating::arguments(&text, &text);
        let arguments = serde_json::from_str(&text).unwrap_or(serde_json::Value::Null);
        let _ = param_headers::param_headers(&text, &arguments);
        for dialect in crate::dialects::Dialect::ALL {
            let _ = dialect.codec().with_tool_choice(&text, "x");
        }
    }

    #[test]
    fn mutated_messages_never_panic() {
        for sample in SAMPLES {
            let bytes = sample.as_bytes();
            for cut in 0..=bytes.len() {
                every_parser(&bytes[..cut]);
            }
            for at in 0..bytes.len() {
                for flip in [0x01u8, 0x20, 0x80, 0xff] {
                    let mut mutated = bytes.to_vec();
                    mutated[at] ^= flip;
                    every_parser(&mutated);
                }
                for insert in [b'{', b'"', b'\\', b'\n', b']'] {
                    let mut mutated = bytes.to_vec();
                    mutated.insert(at, insert);
                    every_parser(&mutated);
                }
            }
        }
    }
}
