//! `a` ↔ `a::b`: this file holds a `b::Inner`, and `b` imports `Outer` from here.

pub mod b;
pub mod c;
pub mod d;

pub struct Outer {
    pub inner: b::Inner,
}
