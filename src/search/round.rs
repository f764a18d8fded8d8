//! (response side; written next)
