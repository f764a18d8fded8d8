//! Response ids the client was shown for responses stored under another id.
//!
//! A watched OpenAI Responses stream that calls `find_tools` after its first text is continued
//! with the follow-up's stream, under the id the client already has (`response.created`): the
//! official SDK refuses a stream whose id changes. But the provider stored the conversation
//! under the follow-up's id; the first response ends in a `find_tools` call it never saw
//! answered. So the gateway remembers `shown → real`, and a later request whose
//! `previous_response_id` names `shown` goes upstream naming `real`.
//!
//! Kept in proxy-wasm shared data (every worker sees it) in a fixed number of slots (a slot
//! holds one alias; a newer one with the same slot replaces it), each with an expiry: bounded
//! memory, no deletion needed.

use crate::embeddings::SharedBytes;
use crate::json::find_path;
use crate::rewrite::splice;

/// Slots: aliases kept at most (about 100 bytes each).
pub const SLOTS: u64 = 4096;
/// How long an alias is honoured, in seconds: an agent continues a conversation within minutes;
/// a day covers a paused session.
pub const TTL_SECONDS: u64 = 24 * 60 * 60;

fn slot_key(shown: &str) -> String {
    let slot = xxhash_rust::xxh3::xxh3_64(shown.as_bytes()) % SLOTS;
    format!("toolsift.alias.{slot}")
}

/// Remembers that the client knows `real` as `shown`, until `now + TTL_SECONDS`.
pub fn remember<S: SharedBytes>(store: &S, shown: &str, real: &str, now: u64) {
    let value = format!("{} {shown} {real}", now.saturating_add(TTL_SECONDS));
    store.set(&slot_key(shown), value.as_bytes(), None);
}

/// The id stored for `shown`, if an alias for it is known and not expired.
pub fn lookup<S: SharedBytes>(store: &S, shown: &str, now: u64) -> Option<String> {
    let (value, _) = store.get(&slot_key(shown));
    let value = String::from_utf8(value?).ok()?;
    let mut parts = value.split(' ');
    let expiry: u64 = parts.next()?.parse().ok()?;
    let (stored_shown, real) = (parts.next()?, parts.next()?);
    (stored_shown == shown && now < expiry).then(|| real.to_owned())
}

/// `body` (an OpenAI Responses request) with its `previous_response_id` replaced by the id it
/// stands for, when it names an alias; `None` when there is nothing to replace.
pub fn resolve<S: SharedBytes>(store: &S, body: &str, now: u64) -> Option<String> {
    let span = find_path(body, &["previous_response_id"])?;
    let shown: String = serde_json::from_str(body.get(span.clone())?).ok()?;
    let real = lookup(store, &shown, now)?;
    splice(body, span, &serde_json::Value::String(real).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embeddings::MemoryBytes;

    #[test]
    fn an_alias_is_followed_until_it_expires() {
        let store = MemoryBytes::default();
        remember(&store, "resp_shown", "resp_real", 1_000);
        assert_eq!(
            lookup(&store, "resp_shown", 1_001).as_deref(),
            Some("resp_real")
        );
        assert_eq!(lookup(&store, "resp_other", 1_001), None);
        assert_eq!(lookup(&store, "resp_shown", 1_000 + TTL_SECONDS), None);
    }

    #[test]
    fn a_request_naming_the_shown_id_names_the_real_one() {
        let store = MemoryBytes::default();
        remember(&store, "resp_a", "resp_b", 0);
        let body = r#"{"model":"gpt","previous_response_id": "resp_a","input":[{"type":"function_call_output","call_id":"c","output":"ok"}]}"#;
        let resolved = resolve(&store, body, 1).unwrap();
        assert_eq!(
            resolved,
            body.replace(r#""resp_a""#, r#""resp_b""#),
            "only the id changes"
        );
        assert_eq!(resolve(&store, &resolved, 1), None);
        assert_eq!(resolve(&store, r#"{"input":"hi"}"#, 1), None);
        assert_eq!(resolve(&store, r#"{"previous_response_id":null}"#, 1), None);
    }

    #[test]
    fn a_slot_holds_the_newest_alias() {
        let store = MemoryBytes::default();
        // Find two ids sharing a slot.
        let first = "resp_0".to_owned();
        let second = (1..)
            .map(|i| format!("resp_{i}"))
            .find(|id| slot_key(id) == slot_key(&first))
            .unwrap();
        remember(&store, &first, "real_0", 0);
        remember(&store, &second, "real_1", 0);
        assert_eq!(lookup(&store, &first, 1), None);
        assert_eq!(lookup(&store, &second, 1).as_deref(), Some("real_1"));
    }
}
