//! Tool calls inside a content array (Anthropic `tool_use` blocks, Gemini `functionCall` parts,
//! Bedrock `toolUse` blocks, Ollama `tool_calls`): removed or renamed in place, every other
//! byte kept.

use crate::dialects::Edits;
use crate::dialects::Problem;
use crate::dialects::shared::splice::{Patch, apply_patches, json_string, set_member};
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
    /// The text block took the place of the first dropped call.
    pub text_written: bool,
}

/// Applies `edits.drop` and `edits.rename` to the content array `array`, whose elements are
/// `items` (borrowed from it). `call_key` tells whether an element is a tool call, and by
/// which key (its id, or Gemini's name) the edits name it. `text_block` (an element of the
/// dialect's, holding `edits.text`) takes the place of the first dropped call. Kept elements
/// keep their bytes, and the array its separators.
pub(crate) fn edit_calls<'a>(
    array: &'a str,
    items: &[&'a RawValue],
    shape: &CallShape,
    call_key: impl Fn(&str) -> Result<Option<String>, Problem>,
    edits: &Edits,
    text_block: Option<&str>,
) -> Result<EditedCalls, Problem> {
    let mut kept: Vec<Option<Cow<'a, str>>> = Vec::with_capacity(items.len());
    let mut edited = EditedCalls {
        array: None,
        dropped: 0,
        calls_left: 0,
        blocks_left: 0,
        text_written: false,
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
            match text_block.filter(|_| !edited.text_written) {
                Some(block) => {
                    edited.text_written = true;
                    kept.push(Some(Cow::Owned(block.to_owned())));
                }
                None => kept.push(None),
            }
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

/// [`edit_calls`] on the content array `content` of a whole answer `body` (borrowed from it),
/// as the patch of `body` that rewrites it (`None`: unchanged). `text_block` takes the place
/// of the first dropped call, or, when none was dropped and `or_last`, goes after the last
/// element (a whole answer; a stream's chunk without the call leaves it for a later one).
pub(crate) fn edit_content(
    body: &str,
    content: &RawValue,
    shape: &CallShape,
    call_key: impl Fn(&str) -> Result<Option<String>, Problem>,
    edits: &Edits,
    (text_block, or_last): (Option<&str>, bool),
) -> Result<(Option<Patch>, EditedCalls), Problem> {
    let array = content.get();
    let items = crate::json::array_items(content).ok_or(Problem::BadShape)?;
    let mut edited = edit_calls(array, &items, shape, call_key, edits, text_block)?;
    let rewritten = match (edited.array.take(), text_block) {
        (rewritten, Some(block)) if or_last && !edited.text_written => {
            with_item_appended(rewritten.as_deref().unwrap_or(array), block)
        }
        (rewritten, _) => rewritten,
    };
    let patch = match rewritten {
        Some(rewritten) => {
            let span = crate::json::span_in(body, array).ok_or(Problem::BadShape)?;
            Some((span, rewritten))
        }
        None => None,
    };
    Ok((patch, edited))
}

/// Tells whether a content element is a tool call, and by which key edits name it.
pub(crate) type CallKey = fn(&str) -> Result<Option<String>, Problem>;

/// [`edit_content`] on a whole answer whose `stop_reason` says `"tool_use"` while it calls
/// tools (Anthropic, Bedrock): the patches of `body`, the reason `"end_turn"` once every call
/// is removed (the message is then an answer, and says so). `text_block` as there, or after
/// the last element.
pub(crate) fn edit_turn(
    body: &str,
    content: &RawValue,
    (shape, call_key): (&CallShape, CallKey),
    edits: &Edits,
    text_block: Option<&str>,
    stop_reason: Option<&RawValue>,
) -> Result<Vec<Patch>, Problem> {
    let (patch, edited) = edit_content(body, content, shape, call_key, edits, (text_block, true))?;
    let mut patches: Vec<Patch> = patch.into_iter().collect();
    if edited.dropped > 0 && edited.calls_left == 0 {
        if let Some(reason) = stop_reason.filter(|r| r.get() == r#""tool_use""#) {
            let span = crate::json::span_in(body, reason.get()).ok_or(Problem::BadShape)?;
            patches.push((span, r#""end_turn""#.to_owned()));
        }
    }
    Ok(patches)
}

/// The JSON array text `array` with `item` added at its end, every other byte kept.
pub(crate) fn with_item_appended(array: &str, item: &str) -> Option<String> {
    let close = array.rfind(']')?;
    let inner = array.get(..close)?.trim_end();
    let comma = if inner.ends_with('[') { "" } else { "," };
    Some(format!("{inner}{comma}{item}{}", array.get(close..)?))
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

/// The content blocks of a stream whose events are being edited (Anthropic, Bedrock): which
/// calls were dropped or renamed, where the refusal's text block went, and the index each
/// block has for the client (blocks after a dropped one move down, after the text block up).
pub(crate) struct StreamedBlocks<'e> {
    edits: &'e Edits,
    /// Original indices of the dropped calls.
    dropped: std::collections::BTreeSet<usize>,
    /// Original indices of the renamed calls, with their new arguments.
    renamed: std::collections::BTreeMap<usize, &'e str>,
    calls_left: usize,
    /// The original index of the dropped call whose place the text block took.
    text_at: Option<usize>,
}

/// What becomes of a call whose block starts.
pub(crate) enum CallBlock<'e> {
    Kept,
    /// Renamed to this name (its arguments are written before its block stops).
    Renamed(&'e str),
    /// Dropped; the text block takes its place at this (client) index when it is the first.
    Dropped(Option<(usize, &'e str)>),
}

impl<'e> StreamedBlocks<'e> {
    pub(crate) fn new(edits: &'e Edits) -> Self {
        StreamedBlocks {
            edits,
            dropped: std::collections::BTreeSet::new(),
            renamed: std::collections::BTreeMap::new(),
            calls_left: 0,
            text_at: None,
        }
    }

    /// The index the block at `index` has for the client.
    pub(crate) fn index(&self, index: usize) -> usize {
        index.saturating_sub(self.dropped.range(..index).count())
            + usize::from(self.text_at.is_some_and(|at| at < index))
    }

    /// The block at `index` starts a call of id `id`.
    pub(crate) fn call(&mut self, index: usize, id: &str) -> Result<CallBlock<'e>, Problem> {
        let edits = self.edits;
        if edits.drop.iter().any(|d| d == id) {
            let at = self.index(index);
            self.dropped.insert(index);
            if let (None, Some(text)) = (self.text_at, &edits.text) {
                self.text_at = Some(index);
                return Ok(CallBlock::Dropped(Some((at, text.as_str()))));
            }
            return Ok(CallBlock::Dropped(None));
        }
        self.calls_left += 1;
        match edits.rename.iter().find(|r| r.0 == id) {
            Some((_, name, arguments)) => {
                check_object(arguments)?;
                self.renamed.insert(index, arguments);
                Ok(CallBlock::Renamed(name))
            }
            None => Ok(CallBlock::Kept),
        }
    }

    /// Whether the block's deltas are left out: a dropped call's, or a renamed one's (its
    /// arguments are written whole).
    pub(crate) fn skips_deltas(&self, index: usize) -> bool {
        self.dropped.contains(&index) || self.renamed.contains_key(&index)
    }

    pub(crate) fn dropped(&self, index: usize) -> bool {
        self.dropped.contains(&index)
    }

    /// The new arguments of a renamed call's block.
    pub(crate) fn renamed(&self, index: usize) -> Option<&'e str> {
        self.renamed.get(&index).copied()
    }

    /// Calls were dropped and none is left: the turn ends.
    pub(crate) fn all_dropped(&self) -> bool {
        !self.dropped.is_empty() && self.calls_left == 0
    }

    /// The patch that writes the client's index of the block at `index` in `data`, where its
    /// index is member `key`; none when it does not move.
    pub(crate) fn index_patch(
        &self,
        data: &str,
        key: &str,
        index: usize,
    ) -> Result<Option<Patch>, Problem> {
        let moved = self.index(index);
        if moved == index {
            return Ok(None);
        }
        let span = find_path(data, &[key]).ok_or(Problem::BadShape)?;
        Ok(Some((span, moved.to_string())))
    }
}
