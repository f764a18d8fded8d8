//! toolsift: cut the `tools` array of LLM requests to the tools the user's question needs.
//!
//! Data flow (each step is a module):
//! request bytes → [`dialects`] (find the query, the tools, the pinned tools; [`custom`] for
//!   request shapes the configuration describes)
//! → [`rank`] (the catalog of the tools array, cached per worker, over a BM25 [`index`] of its
//!   tools' parts; with `ranking: hybrid`, [`fusion`] of the BM25, exact-match, parameter-key
//!   and [`embeddings`] vector channels)
//! → [`select`] (top_k, min_score, token budget, pins; what [`access`] rules let the caller see,
//!   what the [`loop_guard`] evicts)
//! → [`rewrite`] (splice the kept tools back into the original bytes) → bytes.
//!
//! [`pipeline`] runs those steps for one body; it is pure Rust and shared by the
//! proxy-wasm adapter ([`filter`], wasm only) and the `toolsift` CLI. Search mode ([`search`])
//! and MCP ([`mcp`]) build on it. [`lifecycle`] is the core's one entry for Envoy's callbacks
//! (a stream's, a worker's): it decides and acts through a `Proxy` trait, Envoy's ABI as bytes
//! in and out, which the adapter implements once.
//!
//! Every module imports only modules below it (`tests/layers.rs` keeps it so, and keeps a folder
//! module's files from importing each other both ways beyond the known circles it lists):
//! - leaves: [`text`], [`glob`], [`json`], [`sse`], [`pairs`], [`metadata`], [`shared_data`] (the
//!   bytes the workers share);
//! - [`transitions`] (on json: what the fleet calls after what, learned from its records);
//! - [`auto_k`] (on json, shared_data and transitions: how many tools to keep, learned per
//!   catalog, and the fleet's calibration that carries the transitions);
//! - [`access`], [`gating`] (verdicts, `gating.rules`), [`loop_guard`] (on glob), [`dialects`]
//!   (on json, sse, text, and loop_guard's calls);
//! - [`custom`], [`index`], [`rewrite`] (on the dialects);
//! - [`config`] (on access, custom, dialects, gating), [`fusion`] (on index);
//! - [`weak_query`] (on index and text: what the ranking can read of a question, and what a
//!   question it cannot read gets);
//! - [`followup`] (on index: what a follow-up turn is ranked with);
//! - [`rank`] (on index and fusion), then [`select`] (on config and rank), [`embeddings`],
//!   [`suggestions`] (on rank: tools to offer beside the kept ones);
//! - [`pipeline`], then [`shadow`] (what a cut would cost, read from the model's answers),
//!   [`gen_ai`] (a request's OpenTelemetry GenAI attributes), [`connectors`] (on access and
//!   pipeline), [`stats`] (on pipeline and shadow: the counters),
//!   [`search`], [`mcp`], [`lifecycle`] (one stream's callbacks in, through the `Proxy` out), and
//!   the proxy-wasm filter on top;
//! - [`offline`] (native only, never in the `.wasm`: the access log read, summed up and
//!   calibrated from, and the retrieval evaluation, for the CLI and the tests) on everything.

pub mod access;
pub mod auto_k;
pub mod config;
pub mod connectors;
pub mod custom;
pub mod dialects;
pub mod embeddings;
pub mod followup;
pub mod fusion;
pub mod gating;
pub mod gen_ai;
pub mod glob;
pub mod index;
pub mod json;
pub mod lifecycle;
pub mod loop_guard;
pub mod mcp;
pub mod metadata;
#[cfg(not(target_arch = "wasm32"))]
pub mod offline;
pub mod pairs;
pub mod pipeline;
pub mod rank;
pub mod rewrite;
pub mod search;
pub mod select;
pub mod shadow;
pub mod shared_data;
pub mod sse;
pub mod stats;
pub mod suggestions;
pub mod text;
pub mod transitions;
pub mod weak_query;

#[cfg(target_arch = "wasm32")]
mod filter;
