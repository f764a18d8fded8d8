//! PLACEHOLDER: filled in by the helper that owns this dialect.

use super::super::{Edits, Frame, Opening, Reply, ToolResult};
use crate::dialect::Problem;
use serde_json::Value;

pub(super) fn tool_entry(_name: &str, _description: &str, _parameters: &Value) -> String {
    String::new()
}

pub(super) fn read_reply(_body: &str) -> Result<Reply, Problem> {
    Err(Problem::BadShape)
}

pub(super) fn read_stream(_frames: &[Frame]) -> Result<Reply, Problem> {
    Err(Problem::BadShape)
}

pub(super) fn opening(_frames: &[Frame]) -> Opening {
    Opening::Undecided
}

pub(super) fn tool_results(_results: &[ToolResult]) -> Vec<String> {
    Vec::new()
}

pub(super) fn finish_reply(_body: &str, _edits: &Edits) -> Result<String, Problem> {
    Err(Problem::BadShape)
}

pub(super) fn finish_stream(_frames: &[Frame], _edits: &Edits) -> Result<String, Problem> {
    Err(Problem::BadShape)
}
