//! OpenAI Responses' conversation state, kept the way OpenAI keeps it, so that a client that
//! continues a conversation with `previous_response_id` (and a gateway that answers in its
//! name) is judged as the real API would judge it.
//!
//! Every Responses answer has an id (`resp_demo{SEQ}`) and is stored under it with the
//! conversation it answered (unless the request says `"store": false`). A request whose
//! `previous_response_id` names a stored answer is read as that conversation, the answer's
//! output, then its own `input`; an id never stored (or evicted) is OpenAI's 400
//! `previous_response_not_found`. The store keeps the latest [`CAPACITY`] answers.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{Value, json};

use crate::providers::shared::Rejection;

/// Answers kept at most; the oldest go first.
const CAPACITY: usize = 4096;

#[derive(Default)]
pub(crate) struct Responses {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// id → every item of the conversation up to and including the answer's output.
    conversations: HashMap<String, Arc<Vec<Value>>>,
    /// Ids, oldest first.
    order: VecDeque<String>,
}

impl Responses {
    /// `request` as the model reads it: `input` replaced by the stored conversation that
    /// `previous_response_id` names followed by the request's own input items (a string input
    /// is one user message), and `previous_response_id` removed.
    pub(crate) fn resolve(&self, request: &Value) -> Result<Value, Rejection> {
        let mut items = match request.get("previous_response_id") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(id)) => {
                let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
                let Some(stored) = inner.conversations.get(id) else {
                    let mut rejection =
                        Rejection::new(format!("Previous response with id '{id}' not found."))
                            .with_code("previous_response_not_found");
                    rejection.param = Some("previous_response_id".to_owned());
                    return Err(rejection);
                };
                stored.as_ref().clone()
            }
            Some(_) => {
                let mut rejection =
                    Rejection::new("Invalid type for 'previous_response_id': expected a string.");
                rejection.param = Some("previous_response_id".to_owned());
                return Err(rejection);
            }
        };
        match request.get("input") {
            None | Some(Value::Null) => {}
            Some(Value::String(text)) => items.push(json!({ "role": "user", "content": text })),
            Some(Value::Array(input)) => items.extend(input.iter().cloned()),
            Some(_) => {
                let mut rejection =
                    Rejection::new("Invalid type for 'input': expected a string or an array.");
                rejection.param = Some("input".to_owned());
                return Err(rejection);
            }
        }
        let mut resolved = request.clone();
        if let Some(object) = resolved.as_object_mut() {
            object.remove("previous_response_id");
            object.insert("input".to_owned(), Value::Array(items));
        }
        Ok(resolved)
    }

    /// Stores the answer `id` to `resolved` (a request as [`Responses::resolve`] returns it),
    /// whose output items are `output`; nothing when the request said `"store": false`.
    pub(crate) fn keep(&self, resolved: &Value, id: String, output: &[Value]) {
        if resolved.get("store") == Some(&Value::Bool(false)) {
            return;
        }
        let mut conversation = resolved
            .get("input")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        conversation.extend(output.iter().cloned());
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if inner.order.len() >= CAPACITY {
            if let Some(oldest) = inner.order.pop_front() {
                inner.conversations.remove(&oldest);
            }
        }
        if inner
            .conversations
            .insert(id.clone(), Arc::new(conversation))
            .is_none()
        {
            inner.order.push_back(id);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::*;

    #[test]
    fn continues_stored_conversations() {
        let store = Responses::default();
        let first = store.resolve(&json!({ "input": "weather?" })).unwrap();
        assert_eq!(
            first["input"],
            json!([{ "role": "user", "content": "weather?" }])
        );
        let call =
            json!({ "type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}" });
        store.keep(&first, "resp_1".to_owned(), std::slice::from_ref(&call));

        let output = json!({ "type": "function_call_output", "call_id": "c1", "output": "ok" });
        let next = store
            .resolve(&json!({ "previous_response_id": "resp_1", "input": [output], "model": "m" }))
            .unwrap();
        assert_eq!(
            next,
            json!({ "model": "m", "input": [{ "role": "user", "content": "weather?" }, call, output] })
        );

        let unknown = store
            .resolve(&json!({ "previous_response_id": "resp_9", "input": "hi" }))
            .unwrap_err();
        assert_eq!(
            unknown.message,
            "Previous response with id 'resp_9' not found."
        );
        assert_eq!(unknown.code, Some("previous_response_not_found"));
        assert_eq!(unknown.param.as_deref(), Some("previous_response_id"));
        assert!(store.resolve(&json!({ "input": 3 })).is_err());

        // `"store": false` keeps nothing.
        let unstored = store
            .resolve(&json!({ "input": "x", "store": false }))
            .unwrap();
        store.keep(&unstored, "resp_2".to_owned(), &[]);
        assert!(
            store
                .resolve(&json!({ "previous_response_id": "resp_2" }))
                .is_err()
        );
    }

    #[test]
    fn forgets_the_oldest_past_capacity() {
        let store = Responses::default();
        for n in 0..=CAPACITY {
            store.keep(&json!({ "input": [] }), format!("resp_{n}"), &[]);
        }
        let continues = |id: &str| {
            store
                .resolve(&json!({ "previous_response_id": id }))
                .is_ok()
        };
        assert!(!continues("resp_0"));
        assert!(continues("resp_1"));
        assert!(continues(&format!("resp_{CAPACITY}")));
    }
}
