//! A crate whose folder module imports one way, for `tests/layers.rs`.

pub mod a;
