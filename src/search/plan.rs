//! (request side; written next)
