//! `a::c` ↔ `a::d`, siblings naming each other.

pub struct C(pub Option<Box<crate::a::d::D>>);
