//! Every integration test, in one binary. Each file beside this one is a module of it, as it
//! was a crate of its own before: one crate to compile and link instead of 29 (each of which
//! linked tokio, hyper and the rest again, and built `common` again). cargo-nextest still runs
//! every test in its own process. `tests/e2e/` (containers, `make e2e`) stays a binary of its own.
//!
//! Tests may unwrap, expect, panic and index: a failing test should fail loudly. clippy.toml
//! allows that inside `#[test]` functions; the allow-list here extends it to every module's
//! helpers, once for the whole binary.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

mod access;
mod access_audit;
mod access_llm;
mod access_properties;
mod auto_k;
mod bad_input;
mod book;
mod check;
mod cli;
mod cli_tls;
mod conformance;
mod custom;
mod deploy;
mod fleet;
mod followups;
mod fuzz_regressions;
mod gateway;
mod hybrid;
mod languages;
mod layers;
mod lockfiles;
mod loop_guard;
mod loop_guard_note_properties;
mod loop_guard_properties;
mod native_search;
mod observability;
mod quality;
mod report;
mod schema;
mod schema_properties;
mod search;
mod search_memory;
mod shadow;
mod stat_prefix;
mod unknown_tools;
