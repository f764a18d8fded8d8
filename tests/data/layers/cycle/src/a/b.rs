use super::Outer;

pub struct Inner;

pub fn outer(inner: Inner) -> Outer {
    Outer { inner }
}
