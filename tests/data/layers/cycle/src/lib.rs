//! A crate with two import circles below the top level, for `tests/layers.rs`.

pub mod a;
