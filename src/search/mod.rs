//! Search mode: the model sees a `find_tools` meta-tool instead of the whole catalog, and the
//! gateway answers it.
//!
//! Request side ([`plan`]): the tools array the upstream gets is the meta-tool, the
//! `always_include` tools, the tools the conversation already called (first-call order) and
//! the `eager_k` best-ranked ones; every other tool is deferred. Response side ([`round`]):
//! when the model calls only `find_tools`, the search runs over the whole catalog and the
//! follow-up request is the previous one plus the model's turn, the tool results and the found
//! tools appended to the tools array. What differs per dialect is its codec's
//! ([`crate::dialects::ResponseCodec`]).
//!
//! Pure Rust, no proxy-wasm: the filter and the CLI share it.

pub mod alias;
pub mod hold;
pub mod memory;
pub mod plan;
pub mod respond;
#[doc(hidden)]
pub mod respond_model;
pub mod round;

// Stream framing and the vocabulary of the dialects' response codecs sit below the dialects,
// which speak them; search mode's own paths to them stay.
pub use crate::dialects::{Call, Edits, Opening, Reply, ToolResult, Usage};
pub use crate::sse::{self, Frame};
