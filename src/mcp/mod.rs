//! MCP: toolsift in front of MCP servers (the Streamable HTTP transport, protocol revisions
//! 2025-11-25 and 2026-07-28). A client that lists the server's tools sees `find_tools` and
//! `call_tool`; the gateway answers `find_tools` from the server's whole catalog, ranked with
//! the same code as LLM requests' tools, and turns `call_tool` into the real call. Calls of
//! tools the server did not list never reach it.
//!
//! [`message`] reads JSON-RPC messages (client requests, server answers in JSON or SSE),
//! [`catalog`] the server's `tools/list` pages and the cache, [`gating`] the `_tool_gating`
//! convention, and [`exchange`] is one client request's state machine behind a host trait;
//! [`llm`] applies `_tool_gating` to LLM requests (`gating.mcp`).
//! Pure Rust, no proxy-wasm: `filter/mcp.rs` is the adapter.

pub mod catalog;
pub mod exchange;
pub mod gating;
pub mod llm;
pub mod message;
