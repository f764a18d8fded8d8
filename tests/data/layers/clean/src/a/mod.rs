//! Declaring a child and re-exporting its item is no import of it.

pub mod b;
pub mod c;

pub use b::Inner;

pub struct Shared;
