//! Memory of found tools (search mode, `search.memory`): the tools a session's earlier turns
//! found with `find_tools` are offered again from its next request on, without another search
//! (the dynamic tool discovery paper's session cache: TTL, then least recently used).
//!
//! A session is named by a request header, or by the provider's own fields (OpenAI
//! `prompt_cache_key`, `user`, `safety_identifier`; Anthropic `metadata.user_id`), and keyed
//! together with its owner (the caller's identity under access rules, and the request's
//! credentials): one tenant's session name never reaches another's memory. Only a hash of the
//! two is stored, never an identity or a session name.
//!
//! Kept in proxy-wasm shared data (every worker of one Envoy sees it), which has no delete: the
//! memory is a fixed number of sets, each one value of at most `max_bytes / sets` bytes holding
//! sessions most recently used first. A write drops the set's expired sessions first, then the
//! least recently used until the set fits. However many session names clients invent, the
//! memory never holds more than `max_bytes`: a new session only pushes older ones out of its
//! set. Every write is a compare-and-swap on one set, so no worker needs a lock.
//!
//! On MCP routes a session also keeps its search loop since its last call of a real tool
//! ([`Searches`]): how many searches, and each distinct query's answer, so that a repeated
//! query is answered from the first answer and a search storm is stopped.
//!
//! Stored bytes are read as untrusted: a set of another layout ([`LAYOUT`], its first byte) is
//! read as empty and replaced on the next write; a damaged tail is dropped, never trusted,
//! never a panic; and a session is never recalled with more than `max_tools` tools or
//! [`MAX_QUERIES`] queries, whatever the set holds.

use crate::config::search::Memory as MemoryConfig;
use crate::embeddings::SharedBytes;

/// The bytes of one set, when `max_bytes` allows more than one: a few dozen sessions each.
pub const SET_BYTES: usize = 4096;
/// The layout version of a set, its first byte: a set of another is read as empty. 1 is the
/// first with it; the sets before had none.
pub const LAYOUT: u8 = 1;
/// The shared-data keys' prefix; the set's number follows.
const PREFIX: &str = "toolsift.memory.";
/// Attempts at a write that lost a compare-and-swap race before giving up (the tools are then
/// found again by a search).
const WRITE_ATTEMPTS: usize = 3;
/// A stored session: its key, its expiry, its number of tools.
const ENTRY_HEAD: usize = 16 + 8 + 1;
/// The longest tool name remembered (its length is stored in one byte); every LLM API's limit
/// is lower (64 for OpenAI and Anthropic, 128 for Gemini).
const MAX_NAME: usize = 255;
/// The distinct queries of a search loop kept (the latest): well above `search.max_searches`'
/// default, so that a loop stopped by it repeats no search.
pub const MAX_QUERIES: usize = 16;
/// Set in a stored session's expiry when a search loop follows its names. Expiries are seconds
/// since the epoch, far below this bit: sessions written before loops were kept read as they
/// were written.
const HAS_SEARCHES: u64 = 1 << 63;

/// A session's key in the memory: a hash of its owner and its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SessionKey([u8; 16]);

impl SessionKey {
    /// The key of the session `name` (a header's value, or a provider field's) of `owner`
    /// ([`crate::search::alias::owner`]); `None` for an empty name: no session, no memory.
    /// `source` says where the name came from, so a header and a body field with the same
    /// text are two sessions.
    pub fn new(owner: u64, source: &str, name: &[u8]) -> Option<SessionKey> {
        if name.iter().all(u8::is_ascii_whitespace) {
            return None;
        }
        let mut text = owner.to_le_bytes().to_vec();
        text.extend_from_slice(source.as_bytes());
        text.push(0);
        text.extend_from_slice(name);
        Some(SessionKey(xxhash_rust::xxh3::xxh3_128(&text).to_le_bytes()))
    }

    /// The request's session: the configured header's value when it has one, else the
    /// dialect's own field (`field`, when `provider_fields` is on).
    pub fn of_request(
        config: &MemoryConfig,
        owner: u64,
        header: Option<&[u8]>,
        field: Option<&str>,
    ) -> Option<SessionKey> {
        let by_header = header.and_then(|h| SessionKey::new(owner, "header", h));
        by_header.or_else(|| {
            let field = field.filter(|_| config.session.provider_fields)?;
            SessionKey::new(owner, "field", field.as_bytes())
        })
    }
}

/// One remembered session.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stored {
    key: SessionKey,
    /// Seconds since the epoch after which the session is forgotten.
    expiry: u64,
    /// Tools found, in the order they were first found.
    names: Vec<String>,
    /// MCP: the search loop since the session's last call of a real tool.
    searches: Option<Searches>,
}

/// A session's search loop since its last call of a real tool (MCP routes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Searches {
    /// Searches in the loop, the repeated ones too.
    pub count: u8,
    /// Each distinct query's words (a hash of [`crate::text::terms`]) and the tools its first
    /// answer named; the latest [`MAX_QUERIES`].
    pub queries: Vec<(u64, Vec<String>)>,
}

impl Searches {
    /// The tools the first answer to `words` named, if the loop searched for them.
    pub fn answered(&self, words: u64) -> Option<&[String]> {
        self.queries
            .iter()
            .find(|(w, _)| *w == words)
            .map(|(_, names)| names.as_slice())
    }
}

/// What a session holds: its tools, first-found first, and its search loop.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recalled {
    pub names: Vec<String>,
    pub searches: Searches,
}

/// The memory, as `search.memory` sizes it, over a store of bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Memory {
    sets: usize,
    set_bytes: usize,
    ttl: u64,
    max_tools: usize,
}

impl Memory {
    pub fn new(config: &MemoryConfig) -> Memory {
        let sets = (config.max_bytes / SET_BYTES).max(1);
        Memory {
            sets,
            set_bytes: config.max_bytes / sets,
            ttl: config.ttl_seconds as u64,
            max_tools: config.max_tools,
        }
    }

    /// The shared-data keys the memory may use, for tests and tools that measure it.
    pub fn set_keys(&self) -> impl Iterator<Item = String> {
        (0..self.sets).map(|n| format!("{PREFIX}{n}"))
    }

    fn set_key(&self, key: &SessionKey) -> String {
        let mut n = [0u8; 8];
        n.copy_from_slice(key.0.get(..8).unwrap_or(&[0; 8]));
        format!("{PREFIX}{}", u64::from_le_bytes(n) % self.sets as u64)
    }

    /// The tools `key`'s session found so far, first-found first; nothing when it has none or
    /// they expired. A session that is read becomes the most recently used of its set, and its
    /// expiry moves to `now + ttl_seconds` (best effort: a write lost to another worker's
    /// leaves the order as that worker wrote it).
    pub fn recall<S: SharedBytes>(&self, store: &S, key: &SessionKey, now: u64) -> Vec<String> {
        self.recall_session(store, key, now).names
    }

    /// [`Memory::recall`], with the session's search loop.
    pub fn recall_session<S: SharedBytes>(
        &self,
        store: &S,
        key: &SessionKey,
        now: u64,
    ) -> Recalled {
        let set_key = self.set_key(key);
        let (bytes, cas) = store.get(&set_key);
        let mut sessions = bytes.map(|b| read_set(&b)).unwrap_or_default();
        let Some(at) = sessions
            .iter()
            .position(|s| s.key == *key && s.expiry > now)
        else {
            return Recalled::default();
        };
        let mut session = sessions.remove(at);
        // Within this memory's bounds whatever the set held: the latest finds and queries.
        let over = session.names.len().saturating_sub(self.max_tools);
        session.names.drain(..over);
        if let Some(searches) = &mut session.searches {
            let over = searches.queries.len().saturating_sub(MAX_QUERIES);
            searches.queries.drain(..over);
        }
        let recalled = Recalled {
            names: session.names.clone(),
            searches: session.searches.clone().unwrap_or_default(),
        };
        session.expiry = now.saturating_add(self.ttl);
        sessions.insert(0, session);
        store.set(&set_key, &self.bounded(sessions, now), cas);
        recalled
    }

    /// Adds `found` (the tools one request's search loop found, in order) to `key`'s session,
    /// after the ones it has, and takes `forget` out of it (tools the loop guard evicted and
    /// no search found again). The session keeps its `max_tools` latest finds and becomes its
    /// set's most recently used. Nothing is written when nothing changes.
    pub fn remember<S: SharedBytes>(
        &self,
        store: &S,
        key: &SessionKey,
        found: &[String],
        forget: &[String],
        now: u64,
    ) {
        if found.is_empty() && forget.is_empty() {
            return;
        }
        self.update(store, key, now, |session| {
            session.names = self.merged(&session.names, found, forget);
        });
    }

    /// Counts one search of `key`'s session (MCP) whose answer named `found`: its loop grows
    /// by one, `words` (the query's, hashed) is kept with `found` unless the loop searched
    /// them already, and `found` is remembered as [`Memory::remember`] does.
    pub fn searched<S: SharedBytes>(
        &self,
        store: &S,
        key: &SessionKey,
        words: u64,
        found: &[String],
        now: u64,
    ) {
        self.update(store, key, now, |session| {
            session.names = self.merged(&session.names, found, &[]);
            let searches = session.searches.get_or_insert_with(Searches::default);
            searches.count = searches.count.saturating_add(1);
            if searches.answered(words).is_none() {
                let kept = found.iter().filter(|n| (1..=MAX_NAME).contains(&n.len()));
                searches.queries.push((words, kept.cloned().collect()));
                let over = searches.queries.len().saturating_sub(MAX_QUERIES);
                searches.queries.drain(..over);
            }
        });
    }

    /// `key`'s session called a real tool: its search loop ends (nothing is written when it
    /// has none).
    pub fn end_searches<S: SharedBytes>(&self, store: &S, key: &SessionKey, now: u64) {
        self.update(store, key, now, |session| session.searches = None);
    }

    /// Changes `key`'s session (a new one when it has none alive) with `change`, and makes it
    /// its set's most recently used; nothing is written when nothing changes.
    fn update<S: SharedBytes>(
        &self,
        store: &S,
        key: &SessionKey,
        now: u64,
        change: impl Fn(&mut Stored),
    ) {
        let set_key = self.set_key(key);
        for _ in 0..WRITE_ATTEMPTS {
            let (bytes, cas) = store.get(&set_key);
            let mut sessions = bytes.map(|b| read_set(&b)).unwrap_or_default();
            let mut session = sessions
                .iter()
                .position(|s| s.key == *key && s.expiry > now)
                .map(|at| sessions.remove(at))
                .unwrap_or(Stored {
                    key: *key,
                    expiry: now,
                    names: Vec::new(),
                    searches: None,
                });
            let before = session.clone();
            change(&mut session);
            if session.names == before.names && session.searches == before.searches {
                return;
            }
            session.expiry = now.saturating_add(self.ttl);
            sessions.insert(0, session);
            if store.set(&set_key, &self.bounded(sessions, now), cas) {
                return;
            }
        }
    }

    /// `known` without `forget`, then each of `found` not there yet; the `max_tools` latest.
    fn merged(&self, known: &[String], found: &[String], forget: &[String]) -> Vec<String> {
        let mut names: Vec<String> = known
            .iter()
            .filter(|n| !forget.contains(n))
            .cloned()
            .collect();
        for name in found {
            if !names.contains(name) && (1..=MAX_NAME).contains(&name.len()) {
                names.push(name.clone());
            }
        }
        // Over `max_tools`: the oldest finds go, those this loop found again last; the rest
        // keep their order (the prompt cache's).
        let mut over = names.len().saturating_sub(self.max_tools);
        names.retain(|n| {
            let drop = over > 0 && !found.contains(n);
            over -= usize::from(drop);
            !drop
        });
        if over > 0 {
            // This loop alone found more than `max_tools`: its earliest finds go.
            let first_found = |n: &String| found.iter().position(|f| f == n).unwrap_or(0);
            let mut by_find: Vec<usize> = names.iter().map(first_found).collect();
            by_find.sort_unstable();
            let cut = by_find.get(over - 1).copied().unwrap_or(usize::MAX);
            names.retain(|n| first_found(n) > cut);
        }
        names
    }

    /// `sessions` (most recently used first) as one set's bytes: expired ones dropped first,
    /// then from the least recently used on whatever does not fit `set_bytes`. The first
    /// session, the one just used, always stays: if it alone is too big its loop's oldest
    /// queries go, then its oldest finds.
    fn bounded(&self, sessions: Vec<Stored>, now: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.set_bytes);
        out.push(LAYOUT);
        for (i, mut session) in sessions.into_iter().enumerate() {
            if session.expiry <= now {
                continue;
            }
            if i == 0 {
                while 1 + encoded_len(&session) > self.set_bytes {
                    match &mut session.searches {
                        Some(searches) if !searches.queries.is_empty() => {
                            searches.queries.remove(0);
                        }
                        _ if !session.names.is_empty() => {
                            session.names.remove(0);
                        }
                        _ => break,
                    }
                }
            }
            if out.len() + encoded_len(&session) > self.set_bytes {
                break;
            }
            encode(&session, &mut out);
        }
        out
    }
}

fn encoded_len(session: &Stored) -> usize {
    let names_len = |names: &[String]| names.iter().map(|n| 1 + n.len()).sum::<usize>();
    let searches_len = session.searches.as_ref().map_or(0, |s| {
        2 + s
            .queries
            .iter()
            .map(|(_, names)| 8 + 1 + names_len(names))
            .sum::<usize>()
    });
    ENTRY_HEAD + names_len(&session.names) + searches_len
}

/// One session: the 16-byte key, the expiry as u64 LE (its top bit set when a search loop
/// follows), the names; then the loop, if any: its count (one byte), its number of queries,
/// and each query as its words' hash (u64 LE) and names. Names are a count (one byte), then
/// each name as its length (one byte) and its UTF-8 bytes.
fn encode(session: &Stored, out: &mut Vec<u8>) {
    out.extend_from_slice(&session.key.0);
    let flag = if session.searches.is_some() {
        HAS_SEARCHES
    } else {
        0
    };
    out.extend_from_slice(&((session.expiry & !HAS_SEARCHES) | flag).to_le_bytes());
    encode_names(&session.names, out);
    if let Some(searches) = &session.searches {
        out.push(searches.count);
        let queries = searches.queries.iter().take(u8::MAX as usize);
        out.push(queries.len() as u8);
        for (words, names) in queries {
            out.extend_from_slice(&words.to_le_bytes());
            encode_names(names, out);
        }
    }
}

fn encode_names(names: &[String], out: &mut Vec<u8>) {
    let names: Vec<&String> = names
        .iter()
        .filter(|n| n.len() <= MAX_NAME)
        .take(u8::MAX as usize)
        .collect();
    out.push(names.len() as u8);
    for name in names {
        out.push(name.len() as u8);
        out.extend_from_slice(name.as_bytes());
    }
}

/// The sessions of a set's bytes: none when the set is of another layout.
fn read_set(bytes: &[u8]) -> Vec<Stored> {
    match bytes.split_first() {
        Some((&LAYOUT, sessions)) => decode(sessions),
        _ => Vec::new(),
    }
}

/// Decodes what [`encode`] wrote, session after session; a damaged tail (cut short, a name that
/// is not UTF-8) is dropped, never trusted.
fn decode(mut bytes: &[u8]) -> Vec<Stored> {
    let mut out = Vec::new();
    while let Some((session, rest)) = decode_one(bytes) {
        out.push(session);
        bytes = rest;
    }
    out
}

fn decode_one(bytes: &[u8]) -> Option<(Stored, &[u8])> {
    let key = SessionKey(bytes.get(..16)?.try_into().ok()?);
    let expiry = u64::from_le_bytes(bytes.get(16..24)?.try_into().ok()?);
    let (names, mut rest) = decode_names(bytes.get(24..)?)?;
    let searches = if expiry & HAS_SEARCHES != 0 {
        let count = *rest.first()?;
        let queries_count = *rest.get(1)?;
        rest = rest.get(2..)?;
        let mut queries = Vec::with_capacity(queries_count as usize);
        for _ in 0..queries_count {
            let words = u64::from_le_bytes(rest.get(..8)?.try_into().ok()?);
            let (names, after) = decode_names(rest.get(8..)?)?;
            queries.push((words, names));
            rest = after;
        }
        Some(Searches { count, queries })
    } else {
        None
    };
    let stored = Stored {
        key,
        expiry: expiry & !HAS_SEARCHES,
        names,
        searches,
    };
    Some((stored, rest))
}

fn decode_names(bytes: &[u8]) -> Option<(Vec<String>, &[u8])> {
    let count = *bytes.first()?;
    let mut rest = bytes.get(1..)?;
    let mut names = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let len = *rest.first()? as usize;
        let name = std::str::from_utf8(rest.get(1..1 + len)?).ok()?;
        names.push(name.to_owned());
        rest = rest.get(1 + len..)?;
    }
    Some((names, rest))
}

/// Property for the fuzz target: any bytes decode without a panic, and what decodes encodes
/// back to the bytes it came from.
pub fn decode_round_trips(bytes: &[u8]) -> bool {
    let sessions = decode(bytes);
    let mut again = Vec::new();
    for s in &sessions {
        encode(s, &mut again);
    }
    bytes.starts_with(&again)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embeddings::MemoryBytes;

    fn memory(max_bytes: usize, ttl: usize, max_tools: usize) -> Memory {
        Memory::new(&MemoryConfig {
            max_bytes,
            ttl_seconds: ttl,
            max_tools,
            ..MemoryConfig::default()
        })
    }

    /// A memory of one set of `set_bytes`, keeping 100 tools for 100 seconds.
    fn one_set(set_bytes: usize) -> Memory {
        Memory {
            sets: 1,
            set_bytes,
            ttl: 100,
            max_tools: 100,
        }
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    fn key(owner: u64, name: &str) -> SessionKey {
        SessionKey::new(owner, "header", name.as_bytes()).unwrap()
    }

    #[test]
    fn a_session_recalls_what_it_found_in_first_found_order() {
        let store = MemoryBytes::default();
        let m = memory(4096, 60, 20);
        let k = key(1, "s1");
        assert!(m.recall(&store, &k, 0).is_empty());
        m.remember(&store, &k, &names(&["b", "a"]), &[], 0);
        m.remember(&store, &k, &names(&["c", "a"]), &[], 1);
        assert_eq!(m.recall(&store, &k, 2), names(&["b", "a", "c"]));
        // Another session, another owner: nothing.
        assert!(m.recall(&store, &key(1, "s2"), 2).is_empty());
        assert!(m.recall(&store, &key(2, "s1"), 2).is_empty());
    }

    /// Found by the property test below: a loop that finds more than `max_tools` (one of them
    /// found in an earlier turn) keeps its latest finds, the earlier one among them.
    #[test]
    fn a_loop_finding_more_than_max_tools_keeps_its_latest_finds() {
        let store = MemoryBytes::default();
        let m = memory(1024, 60, 6);
        let k = key(1, "s1");
        m.remember(&store, &k, &names(&["_"]), &[], 0);
        let found = names(&["__", "a", "b", "c", "d", "_", "e"]);
        m.remember(&store, &k, &found, &[], 0);
        assert_eq!(
            m.recall(&store, &k, 0),
            names(&["_", "a", "b", "c", "d", "e"])
        );
    }

    #[test]
    fn sessions_expire_ttl_after_their_last_use() {
        let store = MemoryBytes::default();
        let m = memory(4096, 10, 20);
        let k = key(1, "s");
        m.remember(&store, &k, &names(&["a"]), &[], 100);
        // Used at 105: forgotten at 115, not 110; used again at 114: at 124.
        assert_eq!(m.recall(&store, &k, 105), names(&["a"]));
        assert_eq!(m.recall(&store, &k, 114), names(&["a"]));
        assert!(m.recall(&store, &k, 124).is_empty());
        // An expired session found again starts afresh.
        m.remember(&store, &k, &names(&["b"]), &[], 200);
        assert_eq!(m.recall(&store, &k, 201), names(&["b"]));
    }

    #[test]
    fn a_full_set_drops_expired_sessions_first_then_the_least_recently_used() {
        let store = MemoryBytes::default();
        // One set of 1024 bytes: each session below takes 25 + 5 * 11 = 80 bytes, 12 fit.
        let m = memory(1024, 100, 20);
        let tools = names(&[
            "tool_aaaa0",
            "tool_aaaa1",
            "tool_aaaa2",
            "tool_aaaa3",
            "tool_aaaa4",
        ]);
        let keys: Vec<SessionKey> = (0..14).map(|i| key(1, &format!("s{i}"))).collect();
        for (i, k) in keys.iter().take(12).enumerate() {
            m.remember(&store, k, &tools, &[], i as u64);
        }
        assert!(
            keys.iter()
                .take(12)
                .all(|k| m.recall(&store, k, 20) == tools)
        );
        // s0 used last now; s1 is the least recently used.
        m.recall(&store, &keys[0], 21);
        m.remember(&store, &keys[12], &tools, &[], 22);
        assert!(m.recall(&store, &keys[1], 23).is_empty(), "LRU evicted");
        assert_eq!(m.recall(&store, &keys[0], 23), tools);
        // Now let every session but one expire: a new one evicts nobody alive.
        let alive = keys[5];
        assert_eq!(m.recall(&store, &alive, 100), tools);
        m.remember(&store, &keys[13], &tools, &[], 170);
        assert_eq!(m.recall(&store, &alive, 171), tools);
        assert_eq!(
            store.size().1,
            1 + 2 * 80,
            "the layout byte and two sessions"
        );
    }

    #[test]
    fn a_session_keeps_its_latest_finds_and_forgets_evicted_tools() {
        let store = MemoryBytes::default();
        let m = memory(4096, 100, 3);
        let k = key(1, "s");
        m.remember(&store, &k, &names(&["a", "b", "c", "d"]), &[], 0);
        assert_eq!(m.recall(&store, &k, 1), names(&["b", "c", "d"]));
        m.remember(&store, &k, &[], &names(&["c"]), 1);
        assert_eq!(m.recall(&store, &k, 2), names(&["b", "d"]));
        // Found again after the eviction: back, at the end.
        m.remember(&store, &k, &names(&["c"]), &[], 2);
        assert_eq!(m.recall(&store, &k, 3), names(&["b", "d", "c"]));
    }

    #[test]
    fn a_session_too_big_for_its_set_keeps_its_latest_finds() {
        let store = MemoryBytes::default();
        let m = one_set(100);
        let long: Vec<String> = (0..10).map(|i| format!("{i:0>20}")).collect();
        let k = key(1, "s");
        m.remember(&store, &k, &long, &[], 0);
        let kept = m.recall(&store, &k, 1);
        assert_eq!(kept, long[7..]);
        assert!(store.size().1 <= 100);
    }

    #[test]
    fn empty_session_names_have_no_memory() {
        let config = MemoryConfig::default();
        assert_eq!(SessionKey::of_request(&config, 1, Some(b" "), None), None);
        assert_eq!(SessionKey::of_request(&config, 1, None, Some("")), None);
        // The header wins; a header and a field with the same text are two sessions.
        let by_header = SessionKey::of_request(&config, 1, Some(b"x"), Some("y"));
        assert_eq!(by_header, SessionKey::new(1, "header", b"x"));
        assert_ne!(
            SessionKey::of_request(&config, 1, None, Some("x")),
            by_header
        );
        let off = MemoryConfig {
            session: crate::config::search::SessionSource {
                header: Some("x-session".to_owned()),
                provider_fields: false,
            },
            ..MemoryConfig::default()
        };
        assert_eq!(SessionKey::of_request(&off, 1, None, Some("y")), None);
    }

    #[test]
    fn a_search_loop_counts_keeps_first_answers_and_ends_on_a_real_call() {
        let store = MemoryBytes::default();
        let m = memory(4096, 60, 20);
        let k = key(1, "s");
        m.searched(&store, &k, 11, &names(&["a", "b"]), 0);
        m.searched(&store, &k, 11, &names(&["c"]), 1);
        m.searched(&store, &k, 12, &[], 2);
        let r = m.recall_session(&store, &k, 3);
        assert_eq!(r.names, names(&["a", "b", "c"]));
        assert_eq!(r.searches.count, 3);
        assert_eq!(r.searches.answered(11), Some(&names(&["a", "b"])[..]));
        assert_eq!(r.searches.answered(12), Some(&[][..]));
        assert_eq!(r.searches.answered(13), None);
        // Another session has no loop; a real call ends this one, its tools stay.
        assert_eq!(
            m.recall_session(&store, &key(2, "s"), 3),
            Recalled::default()
        );
        m.end_searches(&store, &k, 4);
        let r = m.recall_session(&store, &k, 5);
        assert_eq!((r.names.len(), r.searches), (3, Searches::default()));
        // Only the latest queries are kept.
        for words in 0..(MAX_QUERIES as u64 + 3) {
            m.searched(&store, &k, words, &[], 6);
        }
        let searches = m.recall_session(&store, &k, 7).searches;
        assert_eq!(searches.queries.len(), MAX_QUERIES);
        assert_eq!(searches.answered(2), None);
        assert!(searches.answered(MAX_QUERIES as u64 + 2).is_some());
        // Nothing is written for a session without a loop to end.
        let before = store.size();
        m.end_searches(&store, &key(3, "never"), 8);
        assert_eq!(store.size(), before);
    }

    #[test]
    fn a_loop_too_big_for_its_set_drops_its_oldest_queries_first() {
        let store = MemoryBytes::default();
        let m = one_set(400);
        let k = key(1, "s");
        let long = |i: u64| vec![format!("{i:0>40}")];
        m.remember(&store, &k, &names(&["kept"]), &[], 0);
        // 25 bytes of head, 5 + 6 * 41 of names, 2 + 51 a query: two queries fit.
        for i in 0..6 {
            m.searched(&store, &k, i, &long(i), 0);
        }
        assert!(store.size().1 <= 400);
        let r = m.recall_session(&store, &k, 1);
        assert_eq!(r.searches.count, 6);
        assert_eq!(r.searches.queries.len(), 2);
        assert!(r.searches.answered(5).is_some() && r.searches.answered(3).is_none());
        assert_eq!(r.names.len(), 7, "every find kept");
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;
        use std::collections::HashMap;

        /// One step: session `s` of owner `o` at second `t` remembers tools `found` (none:
        /// only recalls).
        fn step() -> impl Strategy<Value = (u64, u8, u64, Option<Vec<String>>)> {
            (
                0..3u64,
                0..24u8,
                0..5u64,
                prop::option::of(prop::collection::vec("[a-z_]{1,30}", 0..8)),
            )
        }

        /// One step of an MCP session's loop: search `words` finding `found`, or (none) a
        /// call of a real tool.
        fn loop_step() -> impl Strategy<Value = (u64, u8, u64, Option<(u64, Vec<String>)>)> {
            (
                0..3u64,
                0..24u8,
                0..5u64,
                prop::option::of((0..6u64, prop::collection::vec("[a-z_]{1,30}", 0..8))),
            )
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(200))]

            /// Whatever the sessions, owners and times: the store never holds more than
            /// `max_bytes`, a session recalls only tools it was given itself, and a session
            /// just written recalls what it was given (the latest `max_tools`).
            #[test]
            fn bounded_and_never_crossing(
                max_bytes in 1024usize..9000,
                steps in prop::collection::vec(step(), 1..80),
            ) {
                let m = memory(max_bytes, 30, 6);
                let store = MemoryBytes::default();
                let mut given: HashMap<SessionKey, Vec<String>> = HashMap::new();
                let mut now = 0;
                for (owner, session, dt, found) in steps {
                    now += dt;
                    let k = key(owner, &format!("s{session}"));
                    match found {
                        Some(found) => {
                            m.remember(&store, &k, &found, &[], now);
                            given.entry(k).or_default().extend(found.iter().cloned());
                            let recalled = m.recall(&store, &k, now);
                            let mut want: Vec<String> = Vec::new();
                            for n in &found {
                                if !want.contains(n) {
                                    want.push(n.clone());
                                }
                            }
                            let tail = want.len().saturating_sub(6);
                            for n in want.get(tail..).unwrap_or_default() {
                                prop_assert!(recalled.contains(n), "{n} lost: {recalled:?}");
                            }
                        }
                        None => {
                            let recalled = m.recall(&store, &k, now);
                            let mine = given.get(&k).cloned().unwrap_or_default();
                            prop_assert!(recalled.iter().all(|n| mine.contains(n)));
                        }
                    }
                    prop_assert!(store.size().1 <= max_bytes, "{} bytes", store.size().1);
                    prop_assert!(store.size().0 <= m.sets);
                }
            }

            /// Whatever the loops: the store stays bounded, a session's loop counts its own
            /// searches since its last real call (while it lives), and a query it answered
            /// names only tools that session found.
            #[test]
            fn loops_are_bounded_and_their_own(
                max_bytes in 1024usize..9000,
                steps in prop::collection::vec(loop_step(), 1..80),
            ) {
                let m = memory(max_bytes, 30, 6);
                let store = MemoryBytes::default();
                let mut given: HashMap<SessionKey, Vec<String>> = HashMap::new();
                let mut counts: HashMap<SessionKey, u8> = HashMap::new();
                let mut now = 0;
                for (owner, session, dt, step) in steps {
                    now += dt;
                    let k = key(owner, &format!("s{session}"));
                    let before = m.recall_session(&store, &k, now).searches;
                    match step {
                        Some((words, found)) => {
                            m.searched(&store, &k, words, &found, now);
                            given.entry(k).or_default().extend(found.iter().cloned());
                            let after = m.recall_session(&store, &k, now).searches;
                            prop_assert_eq!(after.count, before.count.saturating_add(1));
                            prop_assert!(after.answered(words).is_some());
                            counts.insert(k, after.count);
                        }
                        None => {
                            m.end_searches(&store, &k, now);
                            let after = m.recall_session(&store, &k, now).searches;
                            prop_assert_eq!(after, Searches::default());
                            counts.insert(k, 0);
                        }
                    }
                    let recalled = m.recall_session(&store, &k, now).searches;
                    prop_assert!(recalled.count <= counts.get(&k).copied().unwrap_or(0));
                    let mine = given.get(&k).cloned().unwrap_or_default();
                    for (_, names) in &recalled.queries {
                        prop_assert!(names.iter().all(|n| mine.contains(n)));
                    }
                    prop_assert!(store.size().1 <= max_bytes, "{} bytes", store.size().1);
                }
            }

            /// A set's bytes decode and encode back, loops and all.
            #[test]
            fn sets_with_loops_round_trip(
                steps in prop::collection::vec(loop_step(), 1..30),
            ) {
                let m = memory(4096, 30, 6);
                let store = MemoryBytes::default();
                for (owner, session, _, step) in steps {
                    let k = key(owner, &format!("s{session}"));
                    match step {
                        Some((words, found)) => m.searched(&store, &k, words, &found, 1),
                        None => m.end_searches(&store, &k, 1),
                    }
                }
                for set in m.set_keys() {
                    if let (Some(bytes), _) = store.get(&set) {
                        prop_assert_eq!(bytes.first(), Some(&LAYOUT));
                        let bytes = bytes.get(1..).unwrap_or_default().to_vec();
                        prop_assert!(decode_round_trips(&bytes));
                        let mut again = Vec::new();
                        for s in decode(&bytes) {
                            encode(&s, &mut again);
                        }
                        prop_assert_eq!(again, bytes);
                    }
                }
            }
        }
    }

    #[test]
    fn damaged_bytes_decode_to_what_is_whole() {
        let mut bytes = Vec::new();
        let whole = Stored {
            key: key(1, "a"),
            expiry: 9,
            names: names(&["x", "yz"]),
            searches: None,
        };
        encode(&whole, &mut bytes);
        let cut = bytes.len();
        encode(&whole, &mut bytes);
        assert_eq!(decode(&bytes).len(), 2);
        assert_eq!(
            decode(bytes.get(..cut + 20).unwrap()),
            std::slice::from_ref(&whole)
        );
        // A name that is not UTF-8 ends the decoding there.
        let mut bad = bytes.clone();
        if let Some(b) = bad.get_mut(cut + ENTRY_HEAD + 1) {
            *b = 0xff;
        }
        assert_eq!(decode(&bad), std::slice::from_ref(&whole));
        assert!(decode_round_trips(&bytes) && decode_round_trips(&bad));
        assert!(decode(&[0xff; 7]).is_empty());
        // A session with a loop, cut anywhere in the loop: what came before stays whole.
        let looped = Stored {
            key: key(1, "b"),
            expiry: 9,
            names: names(&["x"]),
            searches: Some(Searches {
                count: 2,
                queries: vec![(5, names(&["x"]))],
            }),
        };
        let mut bytes = Vec::new();
        encode(&whole, &mut bytes);
        let cut = bytes.len();
        encode(&looped, &mut bytes);
        assert_eq!(decode(&bytes), [whole.clone(), looped]);
        for end in cut..bytes.len() {
            assert_eq!(
                decode(bytes.get(..end).unwrap()),
                std::slice::from_ref(&whole)
            );
            assert!(decode_round_trips(bytes.get(..end).unwrap()));
        }
    }

    /// A set of another layout (the sets before [`LAYOUT`], another version's) reads as empty
    /// and is replaced on the next write; a session of this layout holding more than this
    /// memory's bounds is recalled within them.
    #[test]
    fn a_set_of_another_layout_is_ignored_and_one_past_the_bounds_is_cut() {
        let m = memory(4096, 30, 3);
        let store = MemoryBytes::default();
        let k = key(1, "s");
        let whole = Stored {
            key: k,
            expiry: 100,
            names: names(&["a", "b", "c", "d", "e"]),
            searches: Some(Searches {
                count: 200,
                queries: (0..40).map(|w| (w, names(&["q"]))).collect(),
            }),
        };
        let mut old = Vec::new();
        encode(&whole, &mut old);
        let set = m.set_keys().next().unwrap();
        store.set(&set, &old, None);
        assert_eq!(m.recall_session(&store, &k, 1), Recalled::default());
        m.remember(&store, &k, &names(&["x"]), &[], 1);
        assert_eq!(m.recall(&store, &k, 1), names(&["x"]));
        let mut ours = vec![LAYOUT];
        encode(&whole, &mut ours);
        store.set(&set, &ours, None);
        let recalled = m.recall_session(&store, &k, 1);
        assert_eq!(recalled.names, names(&["c", "d", "e"]));
        assert_eq!(recalled.searches.queries.len(), MAX_QUERIES);
        assert_eq!(recalled.searches.queries.last().map(|q| q.0), Some(39));
    }
}
