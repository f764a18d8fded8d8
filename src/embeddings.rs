//! What hybrid ranking needs from an embeddings service, without any proxy-wasm: the texts that
//! are embedded, the OpenAI-compatible request and response, the cache keys, and a vector cache
//! bounded to a fixed number of entries over any shared key-value store (proxy-wasm shared data
//! in the filter, a map in the CLI).

use crate::dialects::{Entry, ToolText};
use crate::rank::{Catalog, ToolParts};
use sha2::{Digest, Sha256};
use std::cell::RefCell;
use std::collections::{HashMap, HashSet, VecDeque};
use std::rc::Rc;

/// Tool text beyond this many bytes adds nothing a small embedding model reads (MiniLM stops at
/// 256 word pieces) and only costs the call.
const MAX_TOOL_TEXT: usize = 2048;
/// At most this many sentences of a request are embedded besides the whole request (the
/// default and the bound of `embeddings.query_sentences`).
pub const MAX_SENTENCES: usize = crate::config::embeddings::MAX_QUERY_SENTENCES;

/// The text embedded for a tool: name, description, then the parameters' names and
/// descriptions (with the parameters it ranked better on all three shared datasets).
pub fn tool_text(t: &ToolText) -> String {
    let mut text = format!("{}: {}", t.name, t.description);
    if !t.params.is_empty() {
        text.push(' ');
        text.push_str(&t.params);
    }
    crate::text::bounded(&text, MAX_TOOL_TEXT).to_owned()
}

/// The texts embedded for a request: the whole request, then each of its first `sentences`
/// sentences when it has several, so every step of a multi-step task can find its tool. A follow-up's turns are
/// embedded as the lines a person reads ([`crate::followup::readable`]); what only orders
/// ties is not embedded ([`crate::followup::own_words`]).
pub fn query_texts(query: &str, sentences: usize) -> Vec<String> {
    let query = crate::followup::readable(crate::followup::own_words(query));
    let query = query.as_ref();
    let mut texts = vec![crate::text::bounded(query, MAX_TOOL_TEXT).to_owned()];
    if sentences == 0 {
        return texts;
    }
    texts.extend(
        crate::text::sentences(query, sentences.min(MAX_SENTENCES))
            .into_iter()
            .map(|s| crate::text::bounded(s, MAX_TOOL_TEXT).to_owned()),
    );
    texts
}

/// A vector's cache key: SHA-256 of everything that decides the vector: the provider (the
/// endpoint: cluster, authority and path), the model, the dimensions asked for, and the text.
pub type Key = [u8; 32];

pub fn key(provider: &str, model: &str, dimensions: Option<usize>, text: &str) -> Key {
    let mut h = Sha256::new();
    let dimensions = dimensions.map(|d| d.to_string()).unwrap_or_default();
    for part in [provider, model, &dimensions, text] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    h.finalize().into()
}

/// The body of an OpenAI-compatible embeddings request; `input_type`, the role of its texts for
/// a service that takes it as a field (`embeddings.roles.input_type`).
pub fn request_body(
    model: &str,
    inputs: &[&str],
    dimensions: Option<usize>,
    input_type: Option<&str>,
) -> String {
    let mut body = serde_json::json!({
        "model": model,
        "input": inputs,
        "encoding_format": "float",
    });
    if let Some(obj) = body.as_object_mut() {
        if let Some(d) = dimensions {
            obj.insert("dimensions".to_owned(), d.into());
        }
        if let Some(role) = input_type {
            obj.insert("input_type".to_owned(), role.into());
        }
    }
    body.to_string()
}

/// Why a request was ranked by keyword although hybrid ranking was configured. The names are
/// part of the stats (`toolsift.embeddings.fallback.*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fallback {
    /// The call could not be made (for example an unknown cluster).
    Dispatch,
    /// No answer within `timeout_ms` (Envoy answers 504), or no connection within the
    /// cluster's `connect_timeout` (Envoy's own 503 saying so), as from a paused service.
    Timeout,
    /// The service is down (Envoy answers 503: refused, reset, no host) or answered another
    /// non-2xx status.
    Status,
    /// The answer is not an embeddings response for the inputs sent.
    Garbage,
    /// Vectors of another size than configured, or than the ones cached.
    Dimensions,
}

impl Fallback {
    pub const ALL: [Fallback; 5] = [
        Fallback::Dispatch,
        Fallback::Timeout,
        Fallback::Status,
        Fallback::Garbage,
        Fallback::Dimensions,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fallback::Dispatch => "dispatch",
            Fallback::Timeout => "timeout",
            Fallback::Status => "status",
            Fallback::Garbage => "garbage",
            Fallback::Dimensions => "dimensions",
        }
    }

    /// The fallback an HTTP status of the embeddings call means, if it is not a success
    /// (`None`: no response at all, a reset before or while answering: the service is down).
    pub fn of_status(status: Option<u16>) -> Option<Fallback> {
        match status {
            Some(200..=299) => None,
            Some(504) => Some(Fallback::Timeout),
            Some(_) | None => Some(Fallback::Status),
        }
    }

    /// The fallback an embeddings call's answer (`status` and `body`) means, if it is not a
    /// success: as [`Fallback::of_status`], but Envoy's own 503 for a connection that did not
    /// open within the cluster's `connect_timeout` is a timeout too. A service that takes
    /// connections and never answers (paused, overloaded) ends a call either way: with Envoy's
    /// 504 at `timeout_ms`, or, once its listen queue is full and new connections wait, with
    /// that 503 (a background call's timeout is longer than `connect_timeout`). Both mean
    /// "no answer in time", which is what an operator reading `fallback.timeout` looks for;
    /// a refused or reset connection stays `status` (the service is down).
    pub fn of_answer(status: Option<u16>, body: &[u8]) -> Option<Fallback> {
        match status {
            Some(503) if is_connect_timeout(body) => Some(Fallback::Timeout),
            _ => Fallback::of_status(status),
        }
    }
}

/// Whether `body` is Envoy's local reply for an upstream connection that timed out:
/// `upstream connect error or disconnect/reset before headers. reset reason: connection
/// timeout` (the router's text; `retried and the latest reset reason: …` after retries).
/// Envoy writes it, not the service: a service's own 503 never says so.
fn is_connect_timeout(body: &[u8]) -> bool {
    const PREFIX: &[u8] = b"upstream connect error or disconnect/reset before headers.";
    const REASON: &[u8] = b"reset reason: connection timeout";
    body.starts_with(PREFIX) && body.windows(REASON.len()).any(|w| w == REASON)
}

/// The vectors of an embeddings call's answer for `inputs` inputs (`status` `None`: no response
/// at all, a reset before or while answering), or why there are none.
pub fn answer_vectors(
    status: Option<u16>,
    body: &[u8],
    inputs: usize,
    dimensions: Option<usize>,
) -> Result<Vec<Vec<f32>>, Fallback> {
    if let Some(reason) = Fallback::of_answer(status, body) {
        return Err(reason);
    }
    parse_response(body, inputs, dimensions)
}

/// Reads the vectors of an embeddings response for `inputs` inputs, in input order, each scaled
/// to unit length. Every vector must have `dimensions` entries when that is given, and all the
/// same number otherwise.
pub fn parse_response(
    body: &[u8],
    inputs: usize,
    dimensions: Option<usize>,
) -> Result<Vec<Vec<f32>>, Fallback> {
    // Typed: reading 384 numbers per vector into `f32`s directly costs a fraction of building a
    // `serde_json::Value` tree first. Unknown fields (`object`, `model`, `usage`) are skipped.
    #[derive(serde::Deserialize)]
    struct Answer {
        data: Vec<Item>,
    }
    #[derive(serde::Deserialize)]
    struct Item {
        index: Option<usize>,
        embedding: Vec<f32>,
    }
    let answer: Answer = serde_json::from_slice(body).map_err(|_| Fallback::Garbage)?;
    if answer.data.len() != inputs {
        return Err(Fallback::Garbage);
    }
    let mut out: Vec<Option<Vec<f32>>> = vec![None; inputs];
    for (position, item) in answer.data.into_iter().enumerate() {
        // OpenAI says which input each vector is for; servers that omit it answer in order.
        let index = item.index.unwrap_or(position);
        let mut vector = item.embedding;
        // f32 overflow (a number beyond f32's range reads as infinity) is garbage too.
        if vector.is_empty() || vector.iter().any(|x| !x.is_finite()) {
            return Err(Fallback::Garbage);
        }
        crate::fusion::normalise(&mut vector);
        let slot = out.get_mut(index).ok_or(Fallback::Garbage)?;
        if slot.replace(vector).is_some() {
            return Err(Fallback::Garbage);
        }
    }
    let vectors: Vec<Vec<f32>> = out
        .into_iter()
        .collect::<Option<_>>()
        .ok_or(Fallback::Garbage)?;
    let expected = dimensions.or_else(|| vectors.first().map(Vec::len));
    if vectors.iter().any(|v| Some(v.len()) != expected) {
        return Err(Fallback::Dimensions);
    }
    Ok(vectors)
}

pub use crate::shared_data::{MemoryBytes, SharedBytes};

/// Entries per set of [`VectorCache`]: a vector can live in any of 4 places, and the least
/// recently used of the 4 goes.
pub const WAYS: usize = 4;
/// Attempts at a write that lost a compare-and-swap race before giving up (the vector is then
/// simply fetched again another time).
const WRITE_ATTEMPTS: usize = 3;

/// Vectors by [`Key`], bounded: `capacity` entries in sets of [`WAYS`], each set one value of
/// the shared store ordered most recently used first. Reading moves an entry to the front;
/// writing puts the new entry in front and drops the set's least recently used. The store
/// holds at most `capacity` vectors whatever the catalogs and queries that come by, and no
/// worker ever needs a lock: every write is a compare-and-swap on one set.
pub struct VectorCache<S> {
    store: S,
    sets: usize,
    prefix: String,
    /// The keys of the texts this worker's background calls are embedding now (its own, not
    /// in the shared store): a request or another catalog's background call that misses one
    /// of these does not send its text again, it waits for the answer.
    coming: RefCell<HashSet<Key>>,
}

impl<S: SharedBytes> VectorCache<S> {
    pub fn new(store: S, capacity: usize, prefix: &str) -> Self {
        VectorCache {
            store,
            sets: capacity.div_ceil(WAYS).max(1),
            prefix: prefix.to_owned(),
            coming: RefCell::default(),
        }
    }

    /// Whether a background call of this worker is embedding the text of `key` now.
    pub fn coming(&self, key: &Key) -> bool {
        self.coming.try_borrow().is_ok_and(|c| c.contains(key))
    }

    /// A background call went out with the texts of `keys`.
    fn expect(&self, keys: &[Key]) {
        if let Ok(mut coming) = self.coming.try_borrow_mut() {
            coming.extend(keys.iter().copied());
        }
    }

    /// The background call with the texts of `keys` answered, or failed.
    fn arrived(&self, keys: &[Key]) {
        if let Ok(mut coming) = self.coming.try_borrow_mut() {
            for key in keys {
                coming.remove(key);
            }
        }
    }

    fn set_key(&self, key: &Key) -> String {
        let mut n = [0u8; 8];
        n.copy_from_slice(key.get(..8).unwrap_or(&[0; 8]));
        format!(
            "{}{}",
            self.prefix,
            u64::from_le_bytes(n) % self.sets as u64
        )
    }

    pub fn get(&self, key: &Key) -> Option<Vec<f32>> {
        let set_key = self.set_key(key);
        let (bytes, cas) = self.store.get(&set_key);
        let mut entries = decode_set(&bytes?);
        let pos = entries.iter().position(|(k, _)| k == key)?;
        let vector = entries.get(pos)?.1.clone();
        if pos > 0 {
            // Best effort: if another worker wrote the set meanwhile, recency is a little off.
            let hit = entries.remove(pos);
            entries.insert(0, hit);
            self.store.set(&set_key, &encode_set(&entries), cas);
        }
        Some(vector)
    }

    pub fn put(&self, key: &Key, vector: &[f32]) {
        let set_key = self.set_key(key);
        for _ in 0..WRITE_ATTEMPTS {
            let (bytes, cas) = self.store.get(&set_key);
            let mut entries = bytes.map(|b| decode_set(&b)).unwrap_or_default();
            entries.retain(|(k, _)| k != key);
            entries.insert(0, (*key, vector.to_vec()));
            entries.truncate(WAYS);
            if self.store.set(&set_key, &encode_set(&entries), cas) {
                return;
            }
        }
    }
}

/// The layout version of a set, its first byte: a set of another layout reads as empty and is
/// replaced on the next write. 1 is the first with it; the sets before had none.
pub const SET_LAYOUT: u8 = 1;

/// A set: [`SET_LAYOUT`], then per entry the 32-byte key, the length as u32 LE, then the f32s
/// LE.
pub fn encode_set(entries: &[(Key, Vec<f32>)]) -> Vec<u8> {
    let mut out = vec![SET_LAYOUT];
    for (key, v) in entries {
        out.extend_from_slice(key);
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
        for x in v {
            out.extend_from_slice(&x.to_le_bytes());
        }
    }
    out
}

/// Decodes what [`encode_set`] wrote: at most [`WAYS`] entries, each of finite numbers; a set
/// of another layout reads as empty, and a damaged tail is dropped, never trusted.
pub fn decode_set(bytes: &[u8]) -> Vec<(Key, Vec<f32>)> {
    let four = |b: &[u8]| <[u8; 4]>::try_from(b).ok();
    let mut out = Vec::new();
    let Some((&SET_LAYOUT, mut bytes)) = bytes.split_first() else {
        return out;
    };
    while let (true, Some(key), Some(len)) = (
        out.len() < WAYS,
        bytes.get(..32).and_then(|k| Key::try_from(k).ok()),
        bytes.get(32..36).and_then(four),
    ) {
        let end = 36 + u32::from_le_bytes(len) as usize * 4;
        let Some(body) = bytes.get(36..end) else {
            break;
        };
        let v: Vec<f32> = body
            .chunks_exact(4)
            .filter_map(four)
            .map(f32::from_le_bytes)
            .collect();
        if !v.iter().all(|x| x.is_finite()) {
            break;
        }
        out.push((key, v));
        bytes = bytes.get(end..).unwrap_or_default();
    }
    out
}

/// The vectors of one request: the query's texts, and every function tool of its catalog (kept
/// in the tools' parts, shared by every catalog that holds the tool).
pub struct Gathered {
    /// The question's texts as sent (with `roles.query_prefix`).
    pub query_texts: Vec<String>,
    pub query: Vec<Option<Vec<f32>>>,
    /// Every catalog entry's parts, which hold the tools' vectors.
    tools: Rc<[Rc<ToolParts>]>,
    /// Entries of function tools still without a vector.
    pub missing_tools: Vec<usize>,
    /// Entries of function tools without a vector whose text a background call of this worker
    /// is embedding now (for this catalog or another): not asked for again.
    pub coming_tools: Vec<usize>,
    /// `roles.document_prefix`, written before each tool's text.
    tool_prefix: String,
    /// `roles.input_type` is set: a question's texts and tools' texts never share a call.
    split: bool,
}

/// The query's vectors and each catalog entry's, borrowed from a [`Gathered`].
pub type KnownVectors<'a> = (Vec<&'a [f32]>, Vec<Option<&'a [f32]>>);

/// One input of an embeddings call: which vector it fills.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    Query(usize),
    Tool(usize),
}

/// Where vectors come from: the service's identity for cache keys, and the cache.
pub struct Source<'a, S> {
    /// The endpoint: cluster, authority and path (the URL in the CLI).
    pub provider: &'a str,
    pub model: &'a str,
    /// The `dimensions` asked of the service, if any.
    pub dimensions: Option<usize>,
    pub cache: &'a VectorCache<S>,
    /// How the service tells a question from a tool's text (`embeddings.roles`).
    pub roles: Option<&'a crate::config::embeddings::EmbeddingRoles>,
    /// `embeddings.query_sentences`: sentences embedded besides the whole question.
    pub query_sentences: usize,
}

impl<S: SharedBytes> Source<'_, S> {
    /// A text's cache key: the text as sent (prefix included), and the `input_type` its role
    /// is sent with, if any.
    fn key(&self, text: &str, query: bool) -> Key {
        match self.roles.and_then(|r| r.input_type(query)) {
            Some(role) => key(
                self.provider,
                &format!("{}\u{0}{role}", self.model),
                self.dimensions,
                text,
            ),
            None => key(self.provider, self.model, self.dimensions, text),
        }
    }

    fn tool_key(&self, text: &str) -> Key {
        self.key(text, false)
    }

    /// A tool's text as sent (with `roles.document_prefix`).
    fn tool_input(&self, t: &ToolText) -> String {
        with_prefix(self.roles.map_or("", |r| &r.document_prefix), tool_text(t))
    }

    /// Everything already known for `query` over `catalog`: the tools' parts first (this
    /// worker's vectors, kept whatever the shared cache evicts, so a catalog always completes,
    /// and shared by every catalog that holds the tool), then the shared cache for the rest.
    pub fn gather(&self, catalog: &Catalog, query: &str) -> Gathered {
        let prefix = self.roles.map_or("", |r| &r.query_prefix);
        let query_texts: Vec<String> = query_texts(query, self.query_sentences)
            .into_iter()
            .map(|t| with_prefix(prefix, t))
            .collect();
        let query = query_texts
            .iter()
            .map(|t| self.cache.get(&self.key(t, true)))
            .collect();
        let tools = Rc::clone(catalog.parts());
        let (mut missing_tools, mut coming_tools) = (Vec::new(), Vec::new());
        for (i, parts) in tools.iter().enumerate() {
            let Entry::Function(t) = &parts.entry else {
                continue;
            };
            if parts.vector().is_some() {
                continue;
            }
            let key = self.tool_key(&self.tool_input(t));
            match self.cache.get(&key) {
                Some(v) => catalog.remember_vector(i, v),
                None if self.cache.coming(&key) => coming_tools.push(i),
                None => missing_tools.push(i),
            }
        }
        Gathered {
            query_texts,
            query,
            tools,
            missing_tools,
            coming_tools,
            tool_prefix: self
                .roles
                .map_or_else(String::new, |r| r.document_prefix.clone()),
            split: self.roles.is_some_and(|r| r.input_type.is_some()),
        }
    }

    /// Stores the vectors a call returned for `slots` in the cache, in `gathered` and, for
    /// tools, in their parts.
    pub fn fill(
        &self,
        catalog: &Catalog,
        gathered: &mut Gathered,
        slots: &[Slot],
        vectors: Vec<Vec<f32>>,
    ) {
        for (slot, v) in slots.iter().zip(vectors) {
            match *slot {
                Slot::Query(i) => {
                    if let Some(text) = gathered.query_texts.get(i) {
                        self.cache.put(&self.key(text, true), &v);
                    }
                    if let Some(q) = gathered.query.get_mut(i) {
                        *q = Some(v);
                    }
                }
                Slot::Tool(entry) => {
                    if let Some(Entry::Function(t)) = catalog.draft.entries.get(entry) {
                        self.cache.put(&self.tool_key(&self.tool_input(t)), &v);
                    }
                    catalog.remember_vector(entry, v);
                    gathered.missing_tools.retain(|&m| m != entry);
                }
            }
        }
    }

    /// Stores the vectors a background call returned for the tools at `entries` in the cache
    /// and in their parts.
    pub fn fill_tools(&self, catalog: &Catalog, entries: &[usize], vectors: Vec<Vec<f32>>) {
        for (&entry, v) in entries.iter().zip(vectors) {
            if let Some(Entry::Function(t)) = catalog.draft.entries.get(entry) {
                self.cache.put(&self.tool_key(&self.tool_input(t)), &v);
                catalog.remember_vector(entry, v);
            }
        }
    }
}

/// `text` with `prefix` before it (the text itself without one).
fn with_prefix(prefix: &str, text: String) -> String {
    if prefix.is_empty() {
        text
    } else {
        format!("{prefix}{text}")
    }
}

/// The texts of the tools at `entries`, for a background call.
pub fn tool_texts(catalog: &Catalog, entries: &[usize]) -> Vec<String> {
    entries
        .iter()
        .filter_map(|&e| match catalog.draft.entries.get(e) {
            Some(Entry::Function(t)) => Some(tool_text(t)),
            _ => None,
        })
        .collect()
}

/// Catalogs waiting for background calls, at most: each holds its catalog (counted in the
/// catalog cache's bytes) until its tools are in.
pub const MAX_QUEUED_CATALOGS: usize = 16;

/// One background call: tools of a catalog and the cache keys of their texts.
pub struct Batch {
    pub catalog: Rc<Catalog>,
    pub entries: Vec<usize>,
    /// The texts to send, in the order of `entries`; dropped once the call is out.
    pub texts: Vec<String>,
    keys: Vec<Key>,
}

/// Which background calls to send for new catalogs' tools, bounded: at most one call in flight
/// per catalog and `max_calls` in all, [`MAX_QUEUED_CATALOGS`] catalogs waiting, and a failed
/// call ends its catalog's fetch (a later request may start it again), so a service that
/// times out is never sent a whole catalog at once. A text goes out once while its call is in
/// flight: the texts of every call out are in the worker's [`VectorCache::coming`], where a
/// request's [`Source::gather`] finds them too, and a queued tool whose text is among them
/// waits for that call's answer (another catalog that holds the same tool); a queued tool
/// whose vector came meanwhile (in its parts, or in the shared cache from another worker or
/// request) is not sent. Pure: the filter makes the calls.
#[derive(Default)]
pub struct BackfillQueue {
    /// Catalogs with tools still to send, in turn.
    queued: VecDeque<(Rc<Catalog>, Vec<usize>)>,
    in_flight: HashMap<u32, Batch>,
}

impl BackfillQueue {
    /// Queues `entries` of `catalog` unless its tools are already being fetched or the queue
    /// is full; true when queued.
    pub fn queue(&mut self, catalog: &Rc<Catalog>, entries: Vec<usize>) -> bool {
        if catalog.fetching() || entries.is_empty() || self.queued.len() >= MAX_QUEUED_CATALOGS {
            return false;
        }
        catalog.set_fetching(true);
        self.queued.push_back((Rc::clone(catalog), entries));
        true
    }

    /// The next call the caps allow: up to `max_batch` tools of the first queued catalog that
    /// has no call in flight and a tool to send, while fewer than `max_calls` are in flight.
    /// Tools whose vector is known by now are dropped; tools whose text is in flight wait at
    /// the back of the queue. The caller sends it, then reports [`BackfillQueue::sent`] or
    /// [`BackfillQueue::not_sent`].
    pub fn next_call<S: SharedBytes>(
        &mut self,
        source: &Source<'_, S>,
        max_calls: usize,
        max_batch: usize,
    ) -> Option<Batch> {
        if self.in_flight.len() >= max_calls {
            return None;
        }
        let max_batch = max_batch.max(1);
        // Each queued catalog once at most: one whose tools all wait goes to the back.
        for _ in 0..self.queued.len() {
            let position = self.queued.iter().position(|(catalog, _)| {
                !self
                    .in_flight
                    .values()
                    .any(|b| Rc::ptr_eq(&b.catalog, catalog))
            })?;
            let (catalog, entries) = self.queued.remove(position)?;
            let mut batch = Batch {
                catalog,
                entries: Vec::new(),
                texts: Vec::new(),
                keys: Vec::new(),
            };
            let mut rest = Vec::new();
            for entry in entries {
                if batch.entries.len() >= max_batch {
                    rest.push(entry);
                    continue;
                }
                let Some(Entry::Function(t)) = batch.catalog.draft.entries.get(entry) else {
                    continue;
                };
                if batch.catalog.vector(entry).is_some() {
                    continue;
                }
                let text = source.tool_input(t);
                let key = source.tool_key(&text);
                if source.cache.coming(&key) || batch.keys.contains(&key) {
                    rest.push(entry);
                } else if let Some(v) = source.cache.get(&key) {
                    batch.catalog.remember_vector(entry, v);
                } else {
                    batch.entries.push(entry);
                    batch.texts.push(text);
                    batch.keys.push(key);
                }
            }
            if !rest.is_empty() {
                // Its turn is over: the other catalogs' calls go first.
                self.queued.push_back((Rc::clone(&batch.catalog), rest));
            }
            if !batch.entries.is_empty() {
                return Some(batch);
            }
            self.settle(&batch.catalog);
        }
        None
    }

    /// Sends every call the caps allow ([`BackfillQueue::next_call`]) through `dispatch`,
    /// which gets a call's texts and returns its token (`None`: it could not be sent, and the
    /// catalog's fetch ends). Returns how many calls and texts were sent.
    pub fn send<S: SharedBytes>(
        &mut self,
        source: &Source<'_, S>,
        max_calls: usize,
        max_batch: usize,
        mut dispatch: impl FnMut(&[&str]) -> Option<u32>,
    ) -> (usize, usize) {
        let (mut calls, mut inputs) = (0, 0);
        while let Some(batch) = self.next_call(source, max_calls, max_batch) {
            let refs: Vec<&str> = batch.texts.iter().map(String::as_str).collect();
            match dispatch(&refs) {
                Some(token) => {
                    calls += 1;
                    inputs += refs.len();
                    self.sent(source.cache, token, batch);
                }
                None => self.not_sent(&batch.catalog),
            }
        }
        (calls, inputs)
    }

    /// `batch` went out as `token`: its texts are coming.
    pub fn sent<S: SharedBytes>(&mut self, cache: &VectorCache<S>, token: u32, mut batch: Batch) {
        cache.expect(&batch.keys);
        batch.texts = Vec::new();
        self.in_flight.insert(token, batch);
    }

    /// The call for `catalog` could not be made: its fetch ends.
    pub fn not_sent(&mut self, catalog: &Rc<Catalog>) {
        self.queued.retain(|(c, _)| !Rc::ptr_eq(c, catalog));
        self.settle(catalog);
    }

    /// The catalog and tool entries of the call `token`, if it is one of these.
    pub fn pending(&self, token: u32) -> Option<(Rc<Catalog>, Vec<usize>)> {
        let batch = self.in_flight.get(&token)?;
        Some((Rc::clone(&batch.catalog), batch.entries.clone()))
    }

    /// The call `token` answered (`ok`: its vectors were stored, call this after storing
    /// them): its texts are no longer coming. After a failure the catalog's remaining tools
    /// are dropped. True when tools still wait for a call.
    pub fn answered<S: SharedBytes>(
        &mut self,
        cache: &VectorCache<S>,
        token: u32,
        ok: bool,
    ) -> bool {
        if let Some(batch) = self.in_flight.remove(&token) {
            cache.arrived(&batch.keys);
            if !ok {
                self.queued.retain(|(c, _)| !Rc::ptr_eq(c, &batch.catalog));
            }
            self.settle(&batch.catalog);
        }
        !self.queued.is_empty()
    }

    /// Lets requests ask for `catalog`'s tools again once none is queued or in flight.
    fn settle(&self, catalog: &Rc<Catalog>) {
        let pending = self.queued.iter().any(|(c, _)| Rc::ptr_eq(c, catalog))
            || self
                .in_flight
                .values()
                .any(|b| Rc::ptr_eq(&b.catalog, catalog));
        if !pending {
            catalog.set_fetching(false);
        }
    }
}

impl Gathered {
    /// The inputs of the next call: the query's missing texts, then up to `max_batch` tools
    /// (none while the catalog's tools are being fetched in the background).
    pub fn plan(&self, catalog: &Catalog, max_batch: usize) -> (Vec<Slot>, Vec<String>) {
        let mut slots = Vec::new();
        let mut inputs = Vec::new();
        for (i, (text, v)) in self.query_texts.iter().zip(&self.query).enumerate() {
            if v.is_none() {
                slots.push(Slot::Query(i));
                inputs.push(text.clone());
            }
        }
        // With roles sent as a field, a call is of one role: the question's texts first.
        let batch = if catalog.fetching() || self.split && !slots.is_empty() {
            0
        } else {
            max_batch
        };
        for &entry in self.missing_tools.iter().take(batch) {
            if let Some(Entry::Function(t)) = catalog.draft.entries.get(entry) {
                slots.push(Slot::Tool(entry));
                inputs.push(with_prefix(&self.tool_prefix, tool_text(t)));
            }
        }
        (slots, inputs)
    }

    /// Whether a question's texts and tools' texts go in calls of their own
    /// (`roles.input_type`).
    pub fn split(&self) -> bool {
        self.split
    }

    /// The size of the vectors already known, if any.
    pub fn known_dimensions(&self) -> Option<usize> {
        let query = self.query.iter().flatten().map(Vec::len);
        query
            .chain(
                self.tools
                    .iter()
                    .filter_map(|p| p.vector())
                    .map(<[f32]>::len),
            )
            .next()
    }

    /// Whether every tool's vector is known: none missing, none coming.
    pub fn tools_known(&self) -> bool {
        self.missing_tools.is_empty() && self.coming_tools.is_empty()
    }

    /// The query's vectors and every tool's, when all are known and of one size.
    pub fn complete(&self) -> Option<KnownVectors<'_>> {
        if !self.tools_known() {
            return None;
        }
        let query: Vec<&[f32]> = self
            .query
            .iter()
            .map(|v| v.as_deref())
            .collect::<Option<_>>()?;
        let dims = query.first()?.len();
        let tools: Vec<Option<&[f32]>> = self.tools.iter().map(|p| p.vector()).collect();
        let same_size = query.iter().all(|v| v.len() == dims)
            && tools.iter().flatten().all(|v| v.len() == dims);
        same_size.then_some((query, tools))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;
    use std::cell::RefCell;

    fn k(i: u8) -> Key {
        key("p", "m", None, &i.to_string())
    }

    #[test]
    fn the_cache_is_bounded_and_evicts_the_least_recently_used() {
        let memory = MemoryBytes::default();
        // One set: every key competes for the same 4 places.
        let cache = VectorCache::new(&memory, 4, "v.");
        for i in 0..4 {
            cache.put(&k(i), &[f32::from(i)]);
        }
        // Touch 0, so 1 is now the least recently used.
        assert_eq!(cache.get(&k(0)), Some(vec![0.0]));
        cache.put(&k(9), &[9.0]);
        assert_eq!(cache.get(&k(1)), None);
        for i in [0, 2, 3, 9] {
            assert!(cache.get(&k(i)).is_some(), "{i}");
        }
        // Memory stays flat whatever comes by.
        for i in 10..200 {
            cache.put(&k(i), &[1.0; 384]);
        }
        let stored = memory.size().1;
        assert!(stored <= 1 + 4 * (36 + 384 * 4), "{stored}");
    }

    /// A set of another layout (the sets before [`SET_LAYOUT`]) reads as empty and is replaced
    /// on the next write; a set of this layout is read to its first vector that is not
    /// numbers, and to [`WAYS`] vectors.
    #[test]
    fn a_set_of_another_layout_or_past_its_bounds_is_not_read() {
        let memory = MemoryBytes::default();
        let cache = VectorCache::new(&memory, 4, "v.");
        let ours = encode_set(&[(k(0), vec![0.5]), (k(1), vec![1.5])]);
        memory.set("v.0", &ours[1..], None);
        assert_eq!(cache.get(&k(0)), None);
        cache.put(&k(2), &[2.0]);
        assert_eq!(cache.get(&k(2)), Some(vec![2.0]));
        let six: Vec<(Key, Vec<f32>)> = (0..6).map(|i| (k(i), vec![f32::from(i)])).collect();
        assert_eq!(decode_set(&encode_set(&six)), six[..WAYS]);
        let bad = encode_set(&[(k(0), vec![0.5]), (k(1), vec![f32::NAN]), (k(2), vec![2.0])]);
        assert_eq!(decode_set(&bad), [(k(0), vec![0.5])]);
    }

    #[test]
    fn many_sets_hold_their_capacity() {
        let memory = MemoryBytes::default();
        let cache = VectorCache::new(&memory, 64, "v.");
        for i in 0..200 {
            cache.put(&k(i), &[f32::from(i), 1.0]);
        }
        let kept = (0..200).filter(|&i| cache.get(&k(i)).is_some()).count();
        assert!((40..=64).contains(&kept), "{kept}");
        assert!(memory.size().0 <= 16);
    }

    #[test]
    fn a_write_that_loses_a_race_is_retried() {
        struct Racy<'a>(&'a MemoryBytes, RefCell<bool>);
        impl SharedBytes for Racy<'_> {
            fn get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
                self.0.get(key)
            }
            fn set(&self, key: &str, value: &[u8], cas: Option<u32>) -> bool {
                if self.1.replace(false) {
                    // Another worker writes first.
                    self.0.set(key, &encode_set(&[(k(7), vec![7.0])]), None);
                }
                self.0.set(key, value, cas)
            }
        }
        let memory = MemoryBytes::default();
        memory.set("v.0", &encode_set(&[]), None);
        let racy = Racy(&memory, RefCell::new(true));
        let cache = VectorCache::new(&racy, 4, "v.");
        cache.put(&k(1), &[1.0]);
        assert_eq!(cache.get(&k(1)), Some(vec![1.0]));
        assert_eq!(cache.get(&k(7)), Some(vec![7.0]));
    }

    #[test]
    fn a_damaged_set_is_not_trusted() {
        let mut bytes = encode_set(&[(k(1), vec![1.0, 2.0])]);
        bytes.truncate(bytes.len() - 1);
        assert!(decode_set(&bytes).is_empty());
    }

    fn catalog(n: usize) -> Catalog {
        let tools: Vec<String> = (0..n)
            .map(|i| format!(r#"{{"type":"function","function":{{"name":"tool_{i}","description":"does thing {i}"}}}}"#))
            .collect();
        Catalog::build(
            crate::dialects::Dialect::OpenaiChat,
            &format!("[{}]", tools.join(",")),
            crate::rank::FieldWeights::default(),
        )
        .unwrap()
    }

    #[test]
    fn a_catalog_larger_than_the_shared_cache_still_completes() {
        let memory = MemoryBytes::default();
        let cache = VectorCache::new(&memory, 4, "v.");
        let source = Source {
            provider: "p",
            model: "m",
            dimensions: None,
            cache: &cache,
            roles: None,
            query_sentences: MAX_SENTENCES,
        };
        let catalog = catalog(10);
        let mut g = source.gather(&catalog, "thing");
        assert_eq!(g.missing_tools.len(), 10);
        let (slots, inputs) = g.plan(&catalog, 6);
        assert_eq!((slots.len(), inputs.len()), (7, 7));
        assert_eq!(slots.first(), Some(&Slot::Query(0)));
        source.fill(&catalog, &mut g, &slots, vec![vec![1.0, 0.0]; 7]);
        assert_eq!(g.missing_tools.len(), 4);
        assert!(g.complete().is_none());
        // The next request asks for the four remaining tools, and for the query again: the
        // 4-vector cache has evicted it.
        let mut g = source.gather(&catalog, "thing");
        let (slots, _) = g.plan(&catalog, 6);
        assert_eq!(slots.len(), 5);
        source.fill(&catalog, &mut g, &slots, vec![vec![0.0, 1.0]; 5]);
        assert!(g.complete().is_some());
        // The shared cache kept at most 4 of the 11 vectors; this worker's memo has them all.
        let g = source.gather(&catalog, "another question");
        assert!(g.missing_tools.is_empty());
        assert_eq!(g.tools.iter().filter(|p| p.vector().is_some()).count(), 10);
        assert!(Rc::ptr_eq(&g.tools, catalog.parts()));
        assert_eq!(g.plan(&catalog, 6).0, [Slot::Query(0)]);
    }

    #[test]
    fn while_tools_are_fetched_in_the_background_requests_ask_only_for_their_question() {
        let memory = MemoryBytes::default();
        let cache = VectorCache::new(&memory, 100, "v.");
        let source = Source {
            provider: "p",
            model: "m",
            dimensions: None,
            cache: &cache,
            roles: None,
            query_sentences: MAX_SENTENCES,
        };
        let catalog = catalog(5);
        catalog.set_fetching(true);
        let g = source.gather(&catalog, "thing");
        assert_eq!(g.plan(&catalog, 32).0, [Slot::Query(0)]);
        assert_eq!(tool_texts(&catalog, &g.missing_tools).len(), 5);
        source.fill_tools(&catalog, &g.missing_tools, vec![vec![1.0, 0.0]; 5]);
        catalog.set_fetching(false);
        let mut g = source.gather(&catalog, "thing");
        assert!(g.missing_tools.is_empty());
        let (slots, _) = g.plan(&catalog, 32);
        source.fill(&catalog, &mut g, &slots, vec![vec![0.0, 1.0]]);
        assert!(g.complete().is_some());
    }

    fn test_source(cache: &VectorCache<MemoryBytes>) -> Source<'_, MemoryBytes> {
        Source {
            provider: "p",
            model: "m",
            dimensions: None,
            cache,
            roles: None,
            query_sentences: MAX_SENTENCES,
        }
    }

    /// An empty cache, and catalogs of `a` and `b` tools (`tool_0`…), read apart: the tools
    /// they have in common have the same texts and no parts in common.
    fn two_catalogs(a: usize, b: usize) -> (VectorCache<MemoryBytes>, Rc<Catalog>, Rc<Catalog>) {
        let cache = VectorCache::new(MemoryBytes::default(), 1000, "v.");
        (cache, Rc::new(catalog(a)), Rc::new(catalog(b)))
    }

    /// The next call the caps allow, sent as `token`.
    fn send_next(
        q: &mut BackfillQueue,
        source: &Source<'_, MemoryBytes>,
        token: u32,
    ) -> Option<(Rc<Catalog>, Vec<usize>)> {
        let batch = q.next_call(source, 2, 32)?;
        let sent = (Rc::clone(&batch.catalog), batch.entries.clone());
        q.sent(source.cache, token, batch);
        Some(sent)
    }

    #[test]
    fn background_calls_are_one_per_catalog_and_capped_in_all() {
        let cache = VectorCache::new(MemoryBytes::default(), 1000, "v.");
        let source = test_source(&cache);
        // Tools of their own per catalog: none is another's.
        let named = |prefix: &str, n: usize| {
            let tools: Vec<String> = (0..n)
                .map(|i| format!(r#"{{"type":"function","function":{{"name":"{prefix}{i}","description":"{prefix} {i}"}}}}"#))
                .collect();
            let container = format!("[{}]", tools.join(","));
            let dialect = crate::dialects::Dialect::OpenaiChat;
            Rc::new(Catalog::build(dialect, &container, Default::default()).unwrap())
        };
        let (a, b, c) = (named("a", 70), named("b", 40), named("c", 10));
        let mut q = BackfillQueue::default();
        assert!(q.queue(&a, (0..70).collect()));
        assert!(!q.queue(&a, vec![1]), "a catalog is fetched once at a time");
        assert!(q.queue(&b, (0..40).collect()));
        assert!(q.queue(&c, (0..10).collect()));
        // Two calls at most in flight, one per catalog, 32 tools each.
        let (first, e1) = send_next(&mut q, &source, 1).unwrap();
        let (second, e2) = send_next(&mut q, &source, 2).unwrap();
        assert!(Rc::ptr_eq(&first, &a) && Rc::ptr_eq(&second, &b));
        assert_eq!((e1.len(), e2.len()), (32, 32));
        assert!(q.next_call(&source, 2, 32).is_none(), "the global cap");
        // One answers: the next call is the waiting catalog's, not a's second.
        assert!(q.answered(source.cache, 1, true));
        let (third, e3) = send_next(&mut q, &source, 3).unwrap();
        assert!(Rc::ptr_eq(&third, &c) && e3.len() == 10);
        assert!(q.next_call(&source, 2, 32).is_none());
        assert!(c.fetching());
        assert!(q.answered(source.cache, 3, true));
        assert!(!c.fetching(), "c is complete");
        // b's call fails: its remaining 8 tools are dropped, and a later request may try again.
        let (fourth, e4) = send_next(&mut q, &source, 4).unwrap();
        assert!(Rc::ptr_eq(&fourth, &a) && e4 == (32..64).collect::<Vec<_>>());
        assert!(q.answered(source.cache, 2, false));
        assert!(!b.fetching());
        assert!(
            q.next_call(&source, 2, 32).is_none(),
            "a has a call in flight"
        );
        assert!(q.answered(source.cache, 4, true));
        let (fifth, e5) = send_next(&mut q, &source, 5).unwrap();
        assert!(Rc::ptr_eq(&fifth, &a) && e5.len() == 6);
        assert!(q.pending(9).is_none());
    }

    /// What the root context sends on its tick: every call the caps allow, each with its
    /// tools' texts; a call that cannot be sent ends its catalog's fetch.
    #[test]
    fn the_queue_sends_what_the_caps_allow() {
        let (cache, a, b) = two_catalogs(40, 43);
        let source = test_source(&cache);
        let mut q = BackfillQueue::default();
        assert!(q.queue(&a, (0..40).collect()));
        // b's last 3 tools are its own (the rest are a's).
        assert!(q.queue(&b, (40..43).collect()));
        let mut sent = Vec::new();
        let (calls, inputs) = q.send(&source, 2, 32, |texts| {
            sent.push(texts.len());
            Some(sent.len() as u32)
        });
        assert_eq!((calls, inputs), (2, 35));
        assert_eq!(sent, [32, 3]);
        assert_eq!(q.pending(2).map(|(_, e)| e), Some(vec![40, 41, 42]));
        assert_eq!(
            q.send(&source, 2, 32, |_| Some(9)),
            (0, 0),
            "two in flight: the cap"
        );
        assert!(q.answered(source.cache, 1, true), "a's last 8 wait");
        assert_eq!(q.send(&source, 2, 32, |_| None), (0, 0));
        assert!(
            !q.answered(source.cache, 2, true),
            "a's fetch ended when its call could not be sent"
        );
        assert!(!a.fetching() && !b.fetching());
    }

    /// Two catalogs with the same tools (read apart: no parts in common, the texts alike) and
    /// a new tool in the second: while the first's background call embeds the shared tools,
    /// the second's sends only its new tool, then takes the shared tools' vectors from the
    /// cache once the first call has answered. Each text goes to the service once.
    #[test]
    fn a_text_in_flight_is_sent_once_whatever_catalogs_ask_for_it() {
        let (cache, a, b) = two_catalogs(10, 11);
        let source = test_source(&cache);
        assert!(!Rc::ptr_eq(&a.parts()[0], &b.parts()[0]));
        let mut q = BackfillQueue::default();
        // Each call's texts; a call's token is its number.
        let calls: RefCell<Vec<Vec<String>>> = RefCell::default();
        let dispatch = |texts: &[&str]| {
            let mut calls = calls.borrow_mut();
            calls.push(texts.iter().map(|t| (*t).to_owned()).collect());
            Some(calls.len() as u32)
        };
        assert!(q.queue(&a, (0..10).collect()));
        assert_eq!(q.send(&source, 2, 32, dispatch), (1, 10));
        assert!(q.queue(&b, (0..11).collect()));
        assert_eq!(
            q.send(&source, 2, 32, dispatch),
            (1, 1),
            "b's new tool only"
        );
        assert_eq!(calls.borrow()[1], ["tool_10: does thing 10"]);
        assert!(
            q.answered(source.cache, 2, true),
            "b's 10 shared tools wait"
        );
        assert!(b.fetching());
        // The shared tools are still coming: nothing to send.
        assert_eq!(q.send(&source, 2, 32, dispatch), (0, 0));
        // a's call answers: b's tools are in the cache, and b's fetch ends without a call.
        let (catalog, entries) = q.pending(1).unwrap();
        source.fill_tools(&catalog, &entries, vec![vec![1.0, 0.0]; entries.len()]);
        assert!(q.answered(source.cache, 1, true));
        assert_eq!(q.send(&source, 2, 32, dispatch), (0, 0));
        assert!(!a.fetching() && !b.fetching());
        assert_eq!((0..10).filter(|&i| b.vector(i).is_some()).count(), 10);
        let sent: Vec<String> = calls.take().concat();
        let mut unique = sent.clone();
        unique.sort();
        unique.dedup();
        assert_eq!((sent.len(), unique.len()), (11, 11), "{sent:?}");
    }

    /// A background call that fails leaves its texts to whoever asks next: the other catalog
    /// that waited for them sends them itself.
    #[test]
    fn texts_a_failed_call_carried_are_sent_by_the_catalog_that_waited() {
        let (cache, a, b) = two_catalogs(10, 10);
        let source = test_source(&cache);
        let mut q = BackfillQueue::default();
        assert!(q.queue(&a, (0..10).collect()));
        assert!(q.queue(&b, (0..10).collect()));
        assert_eq!(
            q.send(&source, 2, 32, |_| Some(1)),
            (1, 10),
            "b waits for a"
        );
        assert!(q.answered(source.cache, 1, false));
        assert!(!a.fetching() && b.fetching());
        assert_eq!(q.send(&source, 2, 32, |_| Some(2)), (1, 10));
    }

    /// Two requests on one worker: the first request's catalog has a background call in
    /// flight; a request with another catalog that holds the same tools asks only for its
    /// question and its new tool, and is ranked once both calls are in.
    #[test]
    fn a_request_does_not_ask_for_texts_a_background_call_is_embedding() {
        let (cache, a, b) = two_catalogs(10, 11);
        let source = test_source(&cache);
        let mut q = BackfillQueue::default();
        assert!(q.queue(&a, (0..10).collect()));
        assert_eq!(q.send(&source, 2, 32, |_| Some(1)), (1, 10));
        // A request with a's catalog: its tools are being fetched, only the question goes.
        let g = source.gather(&a, "thing");
        assert_eq!(g.plan(&a, 32).0, [Slot::Query(0)]);
        // A request with b's: its 10 shared tools are coming, its new one is asked for.
        let mut g = source.gather(&b, "thing");
        assert_eq!((g.missing_tools.len(), g.coming_tools.len()), (1, 10));
        let (slots, inputs) = g.plan(&b, 32);
        assert_eq!(slots, [Slot::Query(0), Slot::Tool(10)]);
        assert_eq!(inputs[1], "tool_10: does thing 10");
        source.fill(&b, &mut g, &slots, vec![vec![1.0, 0.0]; 2]);
        assert!(!g.tools_known() && g.complete().is_none());
        // The background call answers: the next request is ranked without a call.
        let (catalog, entries) = q.pending(1).unwrap();
        source.fill_tools(&catalog, &entries, vec![vec![0.0, 1.0]; 10]);
        assert!(!q.answered(source.cache, 1, true));
        let g = source.gather(&b, "thing");
        assert!(g.plan(&b, 32).0.is_empty());
        assert!(g.complete().is_some());
    }

    #[test]
    fn the_background_queue_is_bounded() {
        let mut q = BackfillQueue::default();
        let catalogs: Vec<Rc<Catalog>> = (0..=MAX_QUEUED_CATALOGS)
            .map(|_| Rc::new(catalog(2)))
            .collect();
        let queued = catalogs.iter().filter(|c| q.queue(c, vec![0, 1])).count();
        assert_eq!(queued, MAX_QUEUED_CATALOGS);
        assert!(!catalogs.last().unwrap().fetching());
    }

    #[test]
    fn responses_are_read_in_input_order_and_checked() {
        let body = br#"{"object":"list","data":[
            {"object":"embedding","index":1,"embedding":[0,2]},
            {"object":"embedding","index":0,"embedding":[3,4]}],"model":"m"}"#;
        let v = parse_response(body, 2, None).unwrap();
        assert_eq!(v, vec![vec![0.6, 0.8], vec![0.0, 1.0]]);
        assert_eq!(parse_response(body, 2, Some(2)).map(|v| v.len()), Ok(2));
        assert_eq!(parse_response(body, 2, Some(3)), Err(Fallback::Dimensions));
        assert_eq!(parse_response(body, 3, None), Err(Fallback::Garbage));
        let mixed = br#"{"data":[{"embedding":[1,0]},{"embedding":[1,0,0]}]}"#;
        assert_eq!(parse_response(mixed, 2, None), Err(Fallback::Dimensions));
        for garbage in [
            &b"<html>oops</html>"[..],
            br#"{"data":"no"}"#,
            br#"{"data":[{"embedding":["x"]}]}"#,
            br#"{"data":[{"embedding":[]}]}"#,
            br#"{"data":[{"index":5,"embedding":[1]}]}"#,
            br#"{"error":{"message":"bad key"}}"#,
            br#"{"data":[{"index":-1,"embedding":[1]}]}"#,
            br#"{"data":[{"embedding":[1e39]}]}"#,
            br#"{"data":[{"embedding":null}]}"#,
        ] {
            assert_eq!(parse_response(garbage, 1, None), Err(Fallback::Garbage));
        }
        let twice = br#"{"data":[{"index":0,"embedding":[1]},{"index":0,"embedding":[1]}]}"#;
        assert_eq!(parse_response(twice, 2, None), Err(Fallback::Garbage));
    }

    #[test]
    fn statuses_map_to_fallbacks() {
        assert_eq!(Fallback::of_status(Some(200)), None);
        assert_eq!(Fallback::of_status(Some(504)), Some(Fallback::Timeout));
        assert_eq!(Fallback::of_status(Some(503)), Some(Fallback::Status));
        assert_eq!(Fallback::of_status(Some(401)), Some(Fallback::Status));
        assert_eq!(Fallback::of_status(None), Some(Fallback::Status));
    }

    /// Envoy's own replies to an embeddings call, as its router writes them: a connect that
    /// timed out is a timeout like the request timeout's 504; a refused connection, a reset,
    /// no host, or a service's own 503 stay `status`.
    #[test]
    fn envoy_s_connect_timeout_is_a_timeout() {
        let timeout = |status, body: &str| Fallback::of_answer(Some(status), body.as_bytes());
        for body in [
            "upstream connect error or disconnect/reset before headers. reset reason: connection \
             timeout",
            "upstream connect error or disconnect/reset before headers. retried and the latest \
             reset reason: connection timeout",
        ] {
            assert_eq!(timeout(503, body), Some(Fallback::Timeout), "{body}");
            assert_eq!(
                answer_vectors(Some(503), body.as_bytes(), 1, None),
                Err(Fallback::Timeout)
            );
        }
        assert_eq!(
            timeout(504, "upstream request timeout"),
            Some(Fallback::Timeout)
        );
        for body in [
            "upstream connect error or disconnect/reset before headers. reset reason: connection \
             failure, transport failure reason: delayed connect error: 111",
            "upstream connect error or disconnect/reset before headers. reset reason: connection \
             termination",
            "upstream connect error or disconnect/reset before headers. reset reason: overflow",
            "no healthy upstream",
            r#"{"error": "reset reason: connection timeout"}"#,
            "",
        ] {
            assert_eq!(timeout(503, body), Some(Fallback::Status), "{body}");
        }
        // The text on another status is the service's, not Envoy's.
        let text = "upstream connect error or disconnect/reset before headers. reset reason: \
                    connection timeout";
        assert_eq!(timeout(502, text), Some(Fallback::Status));
        assert_eq!(timeout(200, text), None);
        // No response at all (a reset) is the service down, whatever the body says.
        assert_eq!(
            Fallback::of_answer(None, text.as_bytes()),
            Some(Fallback::Status)
        );
    }

    #[test]
    fn request_bodies_are_openai_shaped() {
        let b: Value =
            serde_json::from_str(&request_body("m", &["a", "b"], Some(256), None)).unwrap();
        assert_eq!(b["model"], "m");
        assert_eq!(b["input"], serde_json::json!(["a", "b"]));
        assert_eq!(b["dimensions"], 256);
        let b: Value = serde_json::from_str(&request_body("m", &["a"], None, None)).unwrap();
        assert!(b.get("dimensions").is_none());
        assert!(b.get("input_type").is_none());
        let b: Value =
            serde_json::from_str(&request_body("m", &["a"], None, Some("query"))).unwrap();
        assert_eq!(b["input_type"], "query");
    }

    /// `roles`: prefixes are written before the texts sent and keyed; with `input_type` a
    /// question's texts and tools' texts never share a call, and a text keyed under one role
    /// is not found under the other.
    #[test]
    fn roles_mark_the_texts_and_split_the_calls() {
        let memory = MemoryBytes::default();
        let cache = VectorCache::new(&memory, 64, "v.");
        let prefixes = crate::config::embeddings::EmbeddingRoles {
            query_prefix: "query: ".into(),
            document_prefix: "passage: ".into(),
            input_type: None,
        };
        let mut source = Source {
            provider: "p",
            model: "m",
            dimensions: None,
            cache: &cache,
            roles: Some(&prefixes),
            query_sentences: MAX_SENTENCES,
        };
        let catalog = catalog(3);
        let g = source.gather(&catalog, "thing");
        let (slots, inputs) = g.plan(&catalog, 6);
        assert_eq!(slots.len(), 4, "the question and three tools, in one call");
        assert_eq!(inputs[0], "query: thing");
        assert!(
            inputs[1..].iter().all(|t| t.starts_with("passage: ")),
            "{inputs:?}"
        );
        let field = crate::config::embeddings::EmbeddingRoles {
            input_type: Some(crate::config::embeddings::InputTypes {
                query: "query".into(),
                document: "passage".into(),
            }),
            ..prefixes.clone()
        };
        source.roles = Some(&field);
        let mut g = source.gather(&catalog, "thing");
        let (slots, inputs) = g.plan(&catalog, 6);
        assert_eq!((slots.len(), inputs[0].as_str()), (1, "query: thing"));
        source.fill(&catalog, &mut g, &slots, vec![vec![1.0, 0.0]]);
        let (slots, _) = g.plan(&catalog, 6);
        assert_eq!(slots.len(), 3, "then the tools, in calls of their own");
        assert!(slots.iter().all(|s| matches!(s, Slot::Tool(_))));
        // The question's vector is keyed under its role: not found as a tool's text, nor
        // without roles.
        assert!(source.gather(&catalog, "thing").query[0].is_some());
        assert_ne!(
            source.key("query: thing", true),
            source.key("query: thing", false)
        );
        source.roles = None;
        assert!(source.gather(&catalog, "thing").query[0].is_none());
    }

    #[test]
    fn keys_separate_provider_model_dimensions_and_text() {
        assert_ne!(key("a", "bc", None, "d"), key("ab", "c", None, "d"));
        assert_ne!(key("p", "m", None, "x"), key("p", "m2", None, "x"));
        assert_eq!(key("p", "m", None, "x"), key("p", "m", None, "x"));
        // Vectors asked at another size are other vectors.
        assert_ne!(key("p", "m", None, "x"), key("p", "m", Some(256), "x"));
        assert_ne!(key("p", "m", Some(256), "x"), key("p", "m", Some(512), "x"));
    }

    #[test]
    fn queries_are_embedded_whole_and_by_sentence() {
        assert_eq!(
            query_texts("weather in Paris", MAX_SENTENCES),
            ["weather in Paris"]
        );
        let t = query_texts(
            "Geocode the museum address. Then find parking nearby!",
            MAX_SENTENCES,
        );
        assert_eq!(
            t,
            [
                "Geocode the museum address. Then find parking nearby!",
                "Geocode the museum address",
                "Then find parking nearby"
            ]
        );
        let three = "Geocode the museum address. Then find parking nearby. Book a table for two.";
        assert_eq!(
            query_texts(three, 2),
            [
                three,
                "Geocode the museum address",
                "Then find parking nearby"
            ]
        );
        assert_eq!(query_texts(three, 0), [three]);
    }
}
