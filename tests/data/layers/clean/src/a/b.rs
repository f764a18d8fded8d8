use super::Shared;

pub struct Inner(pub Shared);
