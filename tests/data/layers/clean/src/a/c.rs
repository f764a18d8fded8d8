use super::Inner;

pub fn wrap(inner: Inner) -> Vec<Inner> {
    self::many(inner)
}

fn many(inner: Inner) -> Vec<Inner> {
    crate::a::c::one(inner)
}

fn one(inner: Inner) -> Vec<Inner> {
    vec![inner]
}
