use super::c::C;

pub struct D(pub C);
