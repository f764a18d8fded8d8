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
//! memory, no deletion needed. A slot's value is text, `<LAYOUT> <expiry> <shown> <real>
//! <owner>`; a value of another layout, or not whole, is no alias (and the slot is replaced by
//! the next alias that falls in it).
//!
//! An alias belongs to its [`owner`]: the caller (under access rules) and the credentials of
//! the request that made it. A request of another owner naming the shown id is not redirected:
//! one tenant cannot reach another's stored conversation through the gateway's table, even
//! behind one shared provider key.

use crate::embeddings::SharedBytes;
use crate::json::find_path;
use crate::rewrite::splice;

/// Slots: aliases kept at most (about 100 bytes each).
pub const SLOTS: u64 = 4096;
/// How long an alias is honoured, in seconds: an agent continues a conversation within minutes;
/// a day covers a paused session.
pub const TTL_SECONDS: u64 = 24 * 60 * 60;

/// The layout version of a slot's value, its first word: a value of another is no alias. `a1`
/// is the first with it; the values before started with the expiry.
pub const LAYOUT: &str = "a1";
/// The longest response id followed: providers' ids are a few dozen characters.
pub const MAX_ID: usize = 256;

/// The request headers that say on whose account a request runs, besides the caller's identity.
pub const CREDENTIALS: [&str; 5] = [
    "authorization",
    "x-api-key",
    "api-key",
    "x-goog-api-key",
    "cookie",
];

/// Whose aliases a request makes and may follow: a hash of the caller's identity (`caller`, the
/// [`crate::access::Caller::key`] under access rules) and its [`CREDENTIALS`].
pub fn owner<'a>(caller: Option<&str>, header: impl Fn(&str) -> Option<&'a [u8]>) -> u64 {
    let mut text: Vec<u8> = caller.unwrap_or_default().as_bytes().to_vec();
    for name in CREDENTIALS {
        text.push(0);
        text.extend_from_slice(header(name).unwrap_or_default());
    }
    xxhash_rust::xxh3::xxh3_64(&text)
}

/// The shared-data key of the slot `shown` falls in.
pub fn slot_key(shown: &str) -> String {
    let slot = xxhash_rust::xxh3::xxh3_64(shown.as_bytes()) % SLOTS;
    format!("toolsift.alias.{slot}")
}

/// Remembers that `owner`'s client knows `real` as `shown`, until `now + TTL_SECONDS`.
pub fn remember<S: SharedBytes>(store: &S, shown: &str, real: &str, owner: u64, now: u64) {
    if [shown, real]
        .iter()
        .any(|id| id.is_empty() || id.len() > MAX_ID || id.contains(' '))
    {
        return;
    }
    let value = format!(
        "{LAYOUT} {} {shown} {real} {owner:016x}",
        now.saturating_add(TTL_SECONDS)
    );
    store.set(&slot_key(shown), value.as_bytes(), None);
}

/// The id stored for `shown`, if `owner` made an alias for it and it has not expired.
pub fn lookup<S: SharedBytes>(store: &S, shown: &str, owner: u64, now: u64) -> Option<String> {
    let (value, _) = store.get(&slot_key(shown));
    let value = String::from_utf8(value?).ok()?;
    let mut parts = value.split(' ');
    if parts.next()? != LAYOUT {
        return None;
    }
    let expiry: u64 = parts.next()?.parse().ok()?;
    let (stored_shown, real) = (parts.next()?, parts.next()?);
    let stored_owner = u64::from_str_radix(parts.next()?, 16).ok()?;
    let whole = parts.next().is_none() && (1..=MAX_ID).contains(&real.len());
    (whole && stored_shown == shown && stored_owner == owner && now < expiry)
        .then(|| real.to_owned())
}

/// `body` (an OpenAI Responses request of `owner`) with its `previous_response_id` replaced by
/// the id it stands for, when it names an alias of that owner; `None` when there is nothing to
/// replace.
pub fn resolve<S: SharedBytes>(store: &S, body: &str, owner: u64, now: u64) -> Option<String> {
    let span = find_path(body, &["previous_response_id"])?;
    let shown: String = serde_json::from_str(body.get(span.clone())?).ok()?;
    let real = lookup(store, &shown, owner, now)?;
    splice(body, span, &serde_json::Value::String(real).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embeddings::MemoryBytes;

    #[test]
    fn an_alias_is_followed_until_it_expires() {
        let store = MemoryBytes::default();
        remember(&store, "resp_shown", "resp_real", 7, 1_000);
        assert_eq!(
            lookup(&store, "resp_shown", 7, 1_001).as_deref(),
            Some("resp_real")
        );
        assert_eq!(lookup(&store, "resp_other", 7, 1_001), None);
        assert_eq!(lookup(&store, "resp_shown", 7, 1_000 + TTL_SECONDS), None);
    }

    #[test]
    fn a_request_naming_the_shown_id_names_the_real_one() {
        let store = MemoryBytes::default();
        remember(&store, "resp_a", "resp_b", 7, 0);
        let body = r#"{"model":"gpt","previous_response_id": "resp_a","input":[{"type":"function_call_output","call_id":"c","output":"ok"}]}"#;
        let resolved = resolve(&store, body, 7, 1).unwrap();
        assert_eq!(
            resolved,
            body.replace(r#""resp_a""#, r#""resp_b""#),
            "only the id changes"
        );
        assert_eq!(resolve(&store, &resolved, 7, 1), None);
        // Another owner (another caller, or other credentials) is not redirected.
        assert_eq!(resolve(&store, body, 8, 1), None);
        assert_eq!(resolve(&store, r#"{"input":"hi"}"#, 7, 1), None);
        assert_eq!(
            resolve(&store, r#"{"previous_response_id":null}"#, 7, 1),
            None
        );
    }

    #[test]
    fn the_owner_is_the_caller_and_its_credentials() {
        let headers =
            |auth: &'static [u8]| move |name: &str| (name == "authorization").then_some(auth);
        let a = owner(Some("[\"acme\"]"), headers(b"Bearer k1"));
        assert_eq!(a, owner(Some("[\"acme\"]"), headers(b"Bearer k1")));
        assert_ne!(a, owner(Some("[\"beta\"]"), headers(b"Bearer k1")));
        assert_ne!(a, owner(Some("[\"acme\"]"), headers(b"Bearer k2")));
        assert_ne!(a, owner(None, headers(b"Bearer k1")));
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
        remember(&store, &first, "real_0", 7, 0);
        remember(&store, &second, "real_1", 7, 0);
        assert_eq!(lookup(&store, &first, 7, 1), None);
        assert_eq!(lookup(&store, &second, 7, 1).as_deref(), Some("real_1"));
    }
}
