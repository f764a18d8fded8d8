//! Tool calls inside a content array (Anthropic `tool_use` blocks, Gemini `functionCall` parts,
//! Bedrock `toolUse` blocks, Ollama `tool_calls`): removed or renamed in place, every other
//! byte kept.

use crate::dialects::Edits;
use crate::dialects::Problem;
use crate::dialects::shared::splice::{apply_patches, json_string, set_member};
use crate::json::ArrayLayout;
use crate::json::find_path;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use std::borrow::Cow;

/// Rejects arguments that are not a JSON object, so a bad rename cannot break the response.
pub(crate) fn check_object(arguments: &str) -> Result<(), Problem> {
    match serde_json::from_str::<Map<String, Value>>(arguments) {
        Ok(_) => Ok(()),
        Err(_) => Err(Problem::BadShape),
    }
}

/// Where one dialect's tool call keeps its name and arguments inside a content block.
pub(crate) struct CallShape {
    /// Key chain from the block to the object holding `name` and the arguments (empty: the
    /// block itself).
    pub object: &'static [&'static str],
    /// The key of the arguments object in it.
    pub arguments: &'static str,
}

/// What [`edit_calls`] did to a content array.
pub(crate) struct EditedCalls {
    /// The rewritten array, when some call was dropped or renamed.
    pub array: Option<String>,
    pub dropped: usize,
    pub calls_left: usize,
    /// Elements of any kind left in the array.
    pub blocks_left: usize,
}

/// Applies `edits.drop` and `edits.rename` to the content array `array`, whose elements are
/// `items` (borrowed from it). `call_key` tells whether an element is a tool call, and by
/// which key (its id, or Gemini's name) the edits name it. Kept elements keep their bytes, and
/// the array its separators.
pub(crate) fn edit_calls<'a>(
    array: &'a str,
    items: &[&'a RawValue],
    shape: &CallShape,
    call_key: impl Fn(&str) -> Result<Option<String>, Problem>,
    edits: &Edits,
) -> Result<EditedCalls, Problem> {
    let mut kept: Vec<Option<Cow<'a, str>>> = Vec::with_capacity(items.len());
    let mut edited = EditedCalls {
        array: None,
        dropped: 0,
        calls_left: 0,
        blocks_left: 0,
    };
    let mut renamed = 0;
    for item in items {
        let text = item.get();
        let Some(key) = call_key(text)? else {
            kept.push(Some(Cow::Borrowed(text)));
            continue;
        };
        if edits.drop.contains(&key) {
            edited.dropped += 1;
            kept.push(None);
            continue;
        }
        edited.calls_left += 1;
        match edits.rename.iter().find(|r| r.0 == key) {
            Some((_, name, arguments)) => {
                renamed += 1;
                kept.push(Some(Cow::Owned(rename_call(text, shape, name, arguments)?)));
            }
            None => kept.push(Some(Cow::Borrowed(text))),
        }
    }
    edited.blocks_left = kept.iter().filter(|k| k.is_some()).count();
    if edited.dropped + renamed == 0 {
        return Ok(edited);
    }
    let layout = ArrayLayout::of(array, array, items).ok_or(Problem::BadShape)?;
    let mut out = String::with_capacity(array.len());
    layout.write(array, &mut out, |i, _| {
        kept.get_mut(i).and_then(Option::take)
    });
    edited.array = Some(out);
    Ok(edited)
}

/// The call block `block` with a new name and arguments, every other byte kept.
fn rename_call(
    block: &str,
    shape: &CallShape,
    name: &str,
    arguments: &str,
) -> Result<String, Problem> {
    check_object(arguments)?;
    let object = if shape.object.is_empty() {
        0..block.len()
    } else {
        find_path(block, shape.object).ok_or(Problem::BadShape)?
    };
    let patches = [
        set_member(block, object.clone(), "name", &json_string(name)),
        set_member(block, object, shape.arguments, arguments.trim()),
    ];
    let patches = patches
        .into_iter()
        .collect::<Option<Vec<_>>>()
        .ok_or(Problem::BadShape)?;
    apply_patches(block, patches).ok_or(Problem::BadShape)
}
