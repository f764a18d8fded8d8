//! Catalogs: a tools container read and indexed, from its tools' parts ([`ToolParts`], keyed
//! by their bytes and shared by every catalog that holds them), and kept in a cache bounded in
//! bytes: the agent that sends the same catalog every turn pays for it once, and the one whose
//! catalog changes by a tool pays for that tool. The index itself is [`crate::index`]'s.

use crate::access::mask::RuleMatches;
use crate::access::{Annotations, Grant};
use crate::dialects::{CatalogDraft, Dialect, Entry, Item, Layout, Problem, Reader};
use crate::fusion::{Fused, Lexicon};
use crate::index::{ALLOCATION, RC_COUNTERS};
use std::cell::{Cell, OnceCell, RefCell};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::mem::size_of;
use std::ops::Range;
use std::rc::{Rc, Weak};

// Ranking's vocabulary, read with the catalogs that hold it.
pub use crate::index::{FieldWeights, Index, Scored, ToolParts};

/// The index of the function tools a mask lets a caller see, with the mask.
type AllowedIndex = (Box<[bool]>, Rc<Index>);

/// What a grant's decisions depend on ([`Grant::key`]).
type GrantKey = (bool, Rc<[usize]>);

/// A catalog's id: the first 4 bytes of SHA-256 over its function tools' names, sorted and
/// joined by newlines, so the same tools in another order are the same catalog. Its name in
/// the access log is the 8 hex digits ([`crate::shadow::catalog_name`]).
pub fn catalog_id<'a>(names: impl Iterator<Item = &'a str>) -> u32 {
    use sha2::{Digest, Sha256};
    let mut names: Vec<&str> = names.collect();
    names.sort_unstable();
    let mut hasher = Sha256::new();
    for (i, name) in names.iter().enumerate() {
        if i > 0 {
            hasher.update(b"\n");
        }
        hasher.update(name.as_bytes());
    }
    let digest = hasher.finalize();
    let mut head = [0u8; 4];
    for (to, from) in head.iter_mut().zip(digest.iter()) {
        *to = *from;
    }
    u32::from_be_bytes(head)
}

/// A tools container, read and indexed: everything selection and rewriting need that depends
/// only on the container's bytes.
pub struct Catalog {
    /// What read the container: a dialect, or the custom request shape ([`crate::custom`]).
    pub reader: Reader,
    pub draft: CatalogDraft,
    pub index: Index,
    /// What the lexical channels of hybrid ranking read.
    pub lexicon: Lexicon,
    /// Estimated tokens of each entry: bytes / 4, rounded up.
    pub tokens: Vec<usize>,
    /// Each entry's parts, shared with every other catalog that holds the same definition.
    parts: Rc<[Rc<ToolParts>]>,
    /// The container's bytes outside its entries: with the entries' parts, the container
    /// byte for byte, compared in full when a request's tools array is taken for this
    /// catalog. Until 2026-11-25 each catalog kept a copy of its container, half its memory
    /// (111 KB of 214 KB at 200 tools); comparing piece by piece costs more in Envoy's V8
    /// (the parts are scattered over the heap), but a worker now keeps hundreds of catalogs.
    /// The few found again and again keep a copy as well (`copy`).
    frame: Frame,
    /// A copy of the container while the catalog is one of the few the cache finds again and
    /// again, as an agent loop's requests do (the cache's `hot`), compared in one piece. A
    /// whole cache hit at 200 tools in node's V8 (optimising tier, `make bench-v8`'s `same`):
    /// 11.7 µs through the frame, 8.5 µs with the copy (8.0 µs when every catalog kept one).
    copy: RefCell<Option<Box<[u8]>>>,
    /// What the catalog cache finds it by.
    pub(crate) key: Key,
    /// When the catalog was last found or built (the cache's clock): the least recently used
    /// leaves first.
    last_used: Cell<u64>,
    /// The last query and its ranking: every turn of an agent loop asks the same question of
    /// the same catalog.
    last: RefCell<Option<(String, Rc<[Scored]>)>>,
    /// What the ranking reads of the last question ranked ([`Catalog::reading`]).
    last_reading: Cell<Option<crate::weak_query::Reading>>,
    /// The last question's hybrid ranking, once all vectors were known.
    last_fused: RefCell<Option<(String, Rc<Fused>)>>,
    /// Which entries the last grant's callers may see ([`Catalog::allowed_for`]), keyed by
    /// what its decisions depend on, never by who the caller is.
    last_allowed: RefCell<Option<(GrantKey, Rc<[bool]>)>>,
    /// What each access rule says of each tool, for every caller's mask.
    rule_matches: RuleMatches,
    /// The names access rules govern the built-in entries by (`None`: a function tool, or an
    /// entry that is no tool), read the first time access rules ask.
    builtin_names: OnceCell<Box<[Option<Box<str>>]>>,
    /// Whether an entry hands the tools to the provider's own search, read the first time a
    /// request asks.
    native_search: OnceCell<bool>,
    /// Its function tools' names as shadow ranking and `auto_k` name the catalog
    /// ([`catalog_id`]), hashed the first time they ask.
    id: OnceCell<u32>,
    /// The tools' missing vectors are being fetched in the background: requests ask only for
    /// their question's vectors meanwhile.
    fetching: Cell<bool>,
    /// The field weights the index was built with (a caller's own index is built with them).
    weights: FieldWeights,
    /// The index of the function tools the last mask lets a caller see
    /// ([`Catalog::rank_among`]): keyed by the mask, which the rules that apply to a caller
    /// decide, never by who the caller is.
    allowed_index: RefCell<Option<AllowedIndex>>,
    /// Bytes of tool vectors set and questions remembered through this catalog, added to
    /// the cache's count.
    tallies: Tallies,
    /// What this catalog holds of its own (its parts excepted), estimated.
    heap_bytes: usize,
}

impl Catalog {
    /// Reads and indexes `container` on its own, every entry read afresh (the CLI, the tests);
    /// the filter assembles catalogs from shared parts with [`CatalogCache`].
    pub fn build(
        dialect: Dialect,
        container: &str,
        weights: FieldWeights,
    ) -> Result<Catalog, Problem> {
        Catalog::assemble(
            dialect,
            container,
            None,
            weights,
            &Tallies::default(),
            &mut |item: &Item| ToolParts::read(dialect, item).map(Rc::new),
        )
    }

    /// Splits `container` into its entries, takes each entry's parts from `parts_of`, and
    /// indexes them.
    fn assemble(
        dialect: Dialect,
        container: &str,
        scanned: Option<Vec<Range<usize>>>,
        weights: FieldWeights,
        tallies: &Tallies,
        parts_of: &mut dyn FnMut(&Item) -> Result<Rc<ToolParts>, Problem>,
    ) -> Result<Catalog, Problem> {
        let (items, layout) = dialect.split_scanned(container, scanned)?;
        let parts: Rc<[Rc<ToolParts>]> =
            items.iter().map(&mut *parts_of).collect::<Result<_, _>>()?;
        let sizes = items.iter().map(|item| item.text.len()).collect();
        Ok(Catalog::index(
            Reader::Dialect(dialect),
            container,
            parts,
            sizes,
            layout,
            weights,
            tallies,
        ))
    }

    /// Indexes a container's entries, given their parts, sizes and layout.
    fn index(
        reader: Reader,
        container: &str,
        parts: Rc<[Rc<ToolParts>]>,
        sizes: Vec<usize>,
        layout: Layout,
        weights: FieldWeights,
        tallies: &Tallies,
    ) -> Catalog {
        let draft = CatalogDraft {
            entries: parts.iter().map(|p| p.entry.clone()).collect(),
            sizes,
            layout,
        };
        let functions: Vec<(usize, &ToolParts)> = parts
            .iter()
            .enumerate()
            .filter(|(_, p)| matches!(p.entry, Entry::Function(_)))
            .map(|(i, p)| (i, &**p))
            .collect();
        let index = Index::assemble(&functions, weights);
        let lexicon = Lexicon::new(
            parts
                .iter()
                .filter(|p| matches!(p.entry, Entry::Function(_)))
                .cloned()
                .collect(),
        );
        let tokens = draft.sizes.iter().map(|&b| estimate_tokens(b)).collect();
        let frame = Frame::new(container, &draft.entry_ranges());
        let mut catalog = Catalog {
            reader,
            draft,
            index,
            lexicon,
            tokens,
            frame,
            copy: RefCell::new(None),
            key: Key::of(reader, container.as_bytes()),
            last_used: Cell::new(0),
            parts,
            last: RefCell::new(None),
            last_reading: Cell::new(None),
            last_fused: RefCell::new(None),
            last_allowed: RefCell::new(None),
            rule_matches: RuleMatches::default(),
            builtin_names: OnceCell::new(),
            native_search: OnceCell::new(),
            id: OnceCell::new(),
            fetching: Cell::new(false),
            weights,
            allowed_index: RefCell::new(None),
            tallies: tallies.clone(),
            heap_bytes: 0,
        };
        catalog.heap_bytes = catalog.estimate_heap_bytes();
        catalog
    }

    /// Whether `candidate` is this catalog's container, byte for byte, read by `reader`.
    fn is(&self, reader: Reader, candidate: &[u8]) -> bool {
        if self.reader != reader || candidate.len() != self.key.len {
            return false;
        }
        if let Ok(copy) = self.copy.try_borrow() {
            if let Some(copy) = copy.as_deref() {
                return same_bytes(candidate, copy);
            }
        }
        self.frame
            .matches(candidate, self.parts.iter().map(|p| p.text.as_bytes()))
    }

    /// Takes this catalog's copy of its container away; its size, counted with an allocation.
    fn drop_copy(&self) -> usize {
        let copy = self.copy.try_borrow_mut().ok().and_then(|mut c| c.take());
        copy.map_or(0, |c| ALLOCATION + c.len())
    }

    /// The ranking of every function tool for `query`, remembered for the next call.
    pub fn rank(&self, query: &str) -> Rc<[Scored]> {
        if let Ok(last) = self.last.try_borrow() {
            if let Some((_, ranking)) = last.as_ref().filter(|(q, _)| q == query) {
                return Rc::clone(ranking);
            }
        }
        let ranking: Rc<[Scored]> = self.index.rank(query).into();
        if let Ok(mut last) = self.last.try_borrow_mut() {
            let old = last.as_ref().map_or(0, |(q, r)| ranking_bytes(q, r));
            self.tallies.remembered(old, ranking_bytes(query, &ranking));
            *last = Some((query.to_owned(), Rc::clone(&ranking)));
            self.last_reading.set(None);
        }
        ranking
    }

    /// What the ranking can read of `query` ([`crate::weak_query::Reading`] of its own words),
    /// remembered with the last ranking: every turn of an agent loop asks the same question
    /// of the same catalog, and reads it once.
    pub fn reading(&self, query: &str) -> crate::weak_query::Reading {
        let last = self
            .last
            .try_borrow()
            .is_ok_and(|l| l.as_ref().is_some_and(|(q, _)| q == query));
        if let Some(reading) = self.last_reading.get().filter(|_| last) {
            return reading;
        }
        let reading =
            crate::weak_query::Reading::of(&self.index, crate::followup::own_words(query));
        if last {
            self.last_reading.set(Some(reading));
        }
        reading
    }

    /// The keyword ranking of the function tools `allowed` marks (per entry), scored by
    /// statistics over them alone (their number, lengths and document frequencies): the
    /// scores a catalog of only those tools gives, entries numbered as in this one. A search
    /// under access rules ranks so, and the order a caller sees never depends on tools it may
    /// not see. The index is remembered for the last mask; every tool allowed: [`Catalog::rank`].
    pub fn rank_among(&self, query: &str, allowed: &[bool]) -> Rc<[Scored]> {
        match self.allowed_index(allowed) {
            Some(index) => index.rank(query).into(),
            None => self.rank(query),
        }
    }

    /// The index over the function tools `allowed` marks alone (documents numbered by their
    /// entries in this catalog), and the lexicon parallel to it: what a catalog of only those
    /// tools holds. `None` when every function tool is allowed (this catalog's own are).
    pub fn among(&self, allowed: &[bool]) -> Option<(Rc<Index>, Lexicon)> {
        let index = self.allowed_index(allowed)?;
        let lexicon = Lexicon::new(
            index
                .documents()
                .iter()
                .filter_map(|&e| self.parts.get(e).cloned())
                .collect(),
        );
        Some((index, lexicon))
    }

    /// [`Catalog::among`]'s index, remembered for the last mask.
    fn allowed_index(&self, allowed: &[bool]) -> Option<Rc<Index>> {
        let entries = &self.draft.entries;
        let sees = |e: usize| allowed.get(e).copied().unwrap_or(false);
        let function = |e: usize| matches!(entries.get(e), Some(Entry::Function(_)));
        if (0..entries.len()).all(|e| !function(e) || sees(e)) {
            return None;
        }
        let known = self.allowed_index.try_borrow().ok().and_then(|last| {
            let (mask, index) = last.as_ref()?;
            (**mask == *allowed).then(|| Rc::clone(index))
        });
        let index = known.unwrap_or_else(|| {
            let docs: Vec<(usize, &ToolParts)> = self
                .parts
                .iter()
                .enumerate()
                .filter(|(e, _)| function(*e) && sees(*e))
                .map(|(e, p)| (e, &**p))
                .collect();
            let index = Rc::new(Index::assemble(&docs, self.weights));
            if let Ok(mut last) = self.allowed_index.try_borrow_mut() {
                let bytes =
                    |(mask, index): &AllowedIndex| 2 * ALLOCATION + mask.len() + index.heap_bytes();
                let new = (Box::<[bool]>::from(allowed), Rc::clone(&index));
                self.tallies
                    .remembered(last.as_ref().map_or(0, bytes), bytes(&new));
                *last = Some(new);
            }
            index
        });
        Some(index)
    }

    /// Per entry, whether `grant`'s caller may see it: function tools by name, built-ins by
    /// the name their dialect gives them ([`crate::dialects::RequestCodec::builtin_name`]),
    /// what is no tool always. Remembered for the last grant: every turn of an agent
    /// loop comes from the same caller, and callers whose applicable rules are the same
    /// share the answer.
    pub fn allowed_for(&self, grant: &Grant) -> Rc<[bool]> {
        let key = grant.key();
        if let Ok(last) = self.last_allowed.try_borrow() {
            if let Some((_, allowed)) = last.as_ref().filter(|(k, _)| *k == key) {
                return Rc::clone(allowed);
            }
        }
        let entries = &self.draft.entries;
        let builtins = self.builtin_names();
        let allowed: Rc<[bool]> = grant
            .mask(
                entries.len(),
                |e| match entries.get(e)? {
                    Entry::Function(tool) => Some((tool.name.as_str(), Annotations::default())),
                    Entry::Builtin => Some((builtins.get(e)?.as_deref()?, Annotations::default())),
                },
                &self.rule_matches,
            )
            .into();
        if let Ok(mut last) = self.last_allowed.try_borrow_mut() {
            *last = Some((key, Rc::clone(&allowed)));
        }
        allowed
    }

    /// The names access rules govern the built-in entries by, per entry.
    pub fn builtin_names(&self) -> &[Option<Box<str>>] {
        self.builtin_names.get_or_init(|| {
            let Reader::Dialect(dialect) = self.reader else {
                return vec![None; self.draft.entries.len()].into();
            };
            let codec = dialect.codec();
            self.draft
                .entries
                .iter()
                .zip(self.parts.iter())
                .map(|(entry, parts)| match entry {
                    Entry::Builtin => codec.builtin_name(&parts.text).map(String::into_boxed_str),
                    Entry::Function(_) => None,
                })
                .collect()
        })
    }

    /// Whether a built-in entry hands the tools to the provider's own tool search
    /// ([`crate::dialects::RequestCodec::native_search_entry`]); never for a custom shape.
    pub fn native_search(&self) -> bool {
        *self.native_search.get_or_init(|| {
            let Reader::Dialect(dialect) = self.reader else {
                return false;
            };
            let codec = dialect.codec();
            self.draft
                .entries
                .iter()
                .zip(self.parts.iter())
                .any(|(entry, parts)| {
                    matches!(entry, Entry::Builtin) && codec.native_search_entry(&parts.text)
                })
        })
    }

    /// Whether access rules govern `entry`: a function tool, or a built-in with a name.
    pub fn governed(&self, entry: usize) -> bool {
        self.governed_name(entry).is_some()
    }

    /// The name access rules govern `entry` by: a function tool's, or a built-in's.
    pub fn governed_name(&self, entry: usize) -> Option<&str> {
        match self.draft.entries.get(entry)? {
            Entry::Function(tool) => Some(&tool.name),
            Entry::Builtin => self.builtin_names().get(entry)?.as_deref(),
        }
    }

    pub fn fetching(&self) -> bool {
        self.fetching.get()
    }

    pub fn set_fetching(&self, fetching: bool) {
        self.fetching.set(fetching);
    }

    /// The hybrid ranking last remembered for `query`.
    pub fn remembered_fusion(&self, query: &str) -> Option<Rc<Fused>> {
        let last = self.last_fused.try_borrow().ok()?;
        let (q, fused) = last.as_ref()?;
        (q == query).then(|| Rc::clone(fused))
    }

    pub fn remember_fusion(&self, query: &str, fused: Rc<Fused>) {
        if let Ok(mut last) = self.last_fused.try_borrow_mut() {
            let old = last.as_ref().map_or(0, |(q, f)| fusion_bytes(q, f));
            self.tallies.remembered(old, fusion_bytes(query, &fused));
            *last = Some((query.to_owned(), fused));
        }
    }

    /// Every entry's parts, in catalog order.
    pub fn parts(&self) -> &Rc<[Rc<ToolParts>]> {
        &self.parts
    }

    /// The vector of the tool at `entry`, if known.
    pub fn vector(&self, entry: usize) -> Option<&[f32]> {
        self.parts.get(entry)?.vector()
    }

    /// Keeps `vector` as the tool at `entry`'s, for every catalog that holds the tool. A tool
    /// keeps its first vector.
    pub fn remember_vector(&self, entry: usize, vector: Vec<f32>) {
        let Some(parts) = self.parts.get(entry) else {
            return;
        };
        if parts.vector.set(vector.into()).is_ok() {
            let bytes = parts.vector_bytes();
            let vectors = &self.tallies.vectors;
            vectors.set(vectors.get() + bytes);
        }
    }

    /// The size of the tool vectors already known, if any.
    pub fn known_dimensions(&self) -> Option<usize> {
        self.parts.iter().find_map(|p| p.vector()).map(<[f32]>::len)
    }

    /// The catalog's id: [`catalog_id`] of its function tools' names, the same
    /// for the same tools in any order.
    pub fn id(&self) -> u32 {
        *self.id.get_or_init(|| {
            catalog_id((0..self.draft.entries.len()).filter_map(|entry| self.name(entry)))
        })
    }

    pub fn function_count(&self) -> usize {
        self.index.documents().len()
    }

    pub fn name(&self, entry: usize) -> Option<&str> {
        match self.draft.entries.get(entry) {
            Some(Entry::Function(t)) => Some(&t.name),
            _ => None,
        }
    }

    /// What this catalog holds of its own, its parts excepted: the index, the layout and the
    /// frame (its remembered rankings are counted as they are made, [`Tallies`]).
    fn estimate_heap_bytes(&self) -> usize {
        let n = self.draft.entries.len();
        let layout = match &self.draft.layout {
            crate::dialects::Layout::Flat(a) => a.items.capacity() * size_of::<Range<usize>>(),
            crate::dialects::Layout::Grouped { outer, groups } => {
                outer.items.capacity() * size_of::<Range<usize>>()
                    + groups
                        .iter()
                        .flatten()
                        .map(|g| g.inner.items.capacity() * size_of::<Range<usize>>())
                        .sum::<usize>()
                    + groups.capacity() * size_of::<Option<crate::dialects::Group>>()
            }
        };
        let per_entry = size_of::<Entry>()
            + 2 * size_of::<usize>()
            + size_of::<Rc<ToolParts>>()
            // The last grant's mask (remembered rankings are counted as they are made).
            + size_of::<bool>();
        // About twenty allocations of its own (the index's lists, the layout, the frame, the
        // remembered rankings).
        20 * ALLOCATION
            + RC_COUNTERS
            + size_of::<Catalog>()
            + self.index.heap_bytes()
            + self.lexicon.heap_bytes()
            + layout
            + self.frame.heap_bytes()
            + n * per_entry
    }
}

impl Drop for Catalog {
    /// Its remembered questions leave the cache's count with it.
    fn drop(&mut self) {
        let last = self.last.get_mut().as_ref();
        let fused = self.last_fused.get_mut().as_ref();
        let bytes = last.map_or(0, |(q, r)| ranking_bytes(q, r))
            + fused.map_or(0, |(q, f)| fusion_bytes(q, f));
        self.tallies.remembered(bytes, 0);
    }
}

/// Bytes a catalog comes to hold after it is cached, counted by the catalog where it sets
/// them and read by the cache: shared by the cache and its catalogs.
#[derive(Clone, Default)]
struct Tallies {
    /// The tools' vectors (hybrid ranking).
    vectors: Rc<Cell<usize>>,
    /// The questions catalogs remember with their last rankings, and the rankings. Counted as
    /// they are, not reserved for every catalog at their largest (8 KiB a question, and the
    /// hybrid ranking's votes), which was a third of a 200-tool catalog's estimate.
    remembered: Rc<Cell<usize>>,
}

impl Tallies {
    /// A remembered question and ranking of `old` bytes replaced by one of `new`.
    fn remembered(&self, old: usize, new: usize) {
        let remembered = &self.remembered;
        remembered.set(remembered.get().saturating_sub(old) + new);
    }
}

/// What a remembered keyword ranking holds.
fn ranking_bytes(query: &str, ranking: &[Scored]) -> usize {
    2 * ALLOCATION + query.len() + size_of_val(ranking)
}

/// What a remembered hybrid ranking holds.
fn fusion_bytes(query: &str, fused: &Fused) -> usize {
    3 * ALLOCATION
        + query.len()
        + fused.order.capacity() * size_of::<Scored>()
        + fused.votes.capacity() * size_of::<crate::fusion::Votes>()
}

/// Whether two byte ranges hold the same bytes. The `.wasm` compares 64 bytes a step as four
/// 128-bit vectors whose differences are OR-ed and tested once: the C library's `memcmp` that
/// a wasm32 build links compares one byte at a time (a 600 KB tools array took 0.6 ms in
/// Envoy's V8), and sixteen bytes a step as a `u128` took 6.4 µs for a 111 KB tools array in
/// node's V8 (optimising tier) against 3.0 µs for this. What is left after the 64-byte steps
/// is compared 16 bytes a step and then as the last 16 bytes (overlapping what was compared
/// already), so only pieces shorter than 16 bytes go byte by byte: a catalog is compared
/// tool by tool ([`Frame`]), and a tool's last bytes byte by byte took a tenth of the time of
/// a whole 200-tool comparison in node's V8. Natively, `memcmp`.
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
fn same_bytes(mut a: &[u8], mut b: &[u8]) -> bool {
    use core::arch::wasm32::{v128, v128_any_true, v128_or, v128_xor};
    if a.len() != b.len() {
        return false;
    }
    let (whole_a, whole_b) = (a, b);
    while let (Some((x, rest_a)), Some((y, rest_b))) =
        (a.split_first_chunk::<64>(), b.split_first_chunk::<64>())
    {
        // Each quarter as one 16-byte load.
        let [x0, x1, x2, x3] = bytemuck::cast::<[u8; 64], [v128; 4]>(*x);
        let [y0, y1, y2, y3] = bytemuck::cast::<[u8; 64], [v128; 4]>(*y);
        let low = v128_or(v128_xor(x0, y0), v128_xor(x1, y1));
        let high = v128_or(v128_xor(x2, y2), v128_xor(x3, y3));
        if v128_any_true(v128_or(low, high)) {
            return false;
        }
        (a, b) = (rest_a, rest_b);
    }
    let differ = |x: &[u8; 16], y: &[u8; 16]| {
        v128_any_true(v128_xor(
            bytemuck::cast::<[u8; 16], v128>(*x),
            bytemuck::cast::<[u8; 16], v128>(*y),
        ))
    };
    while let (Some((x, rest_a)), Some((y, rest_b))) =
        (a.split_first_chunk::<16>(), b.split_first_chunk::<16>())
    {
        if differ(x, y) {
            return false;
        }
        (a, b) = (rest_a, rest_b);
    }
    if a.is_empty() {
        return true;
    }
    match (whole_a.last_chunk::<16>(), whole_b.last_chunk::<16>()) {
        (Some(x), Some(y)) => !differ(x, y),
        _ => a == b,
    }
}

#[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    a == b
}

/// A container's bytes outside its entries, and where each entry goes among them: with the
/// entries' bytes (their parts'), the container.
struct Frame {
    /// The bytes outside the entries, in order: brackets, separators, a Gemini tool's own
    /// members. The whole container when its entries do not lie in order (no layout makes
    /// such a container; the frame then holds it rather than fail).
    skeleton: Box<[u8]>,
    /// Per entry, where in `skeleton` the bytes before it end.
    before: Box<[u32]>,
}

impl Frame {
    /// The frame of `container`, whose entries sit at `entries`.
    fn new(container: &str, entries: &[Range<usize>]) -> Frame {
        let bytes = container.as_bytes();
        let whole = || Frame {
            skeleton: bytes.into(),
            before: Box::default(),
        };
        let mut skeleton = Vec::with_capacity(2 * entries.len() + 2);
        let mut before = Vec::with_capacity(entries.len());
        let mut at = 0;
        for entry in entries {
            let Some(gap) = bytes.get(at..entry.start) else {
                return whole();
            };
            skeleton.extend_from_slice(gap);
            let Ok(end) = u32::try_from(skeleton.len()) else {
                return whole();
            };
            before.push(end);
            at = entry.end;
        }
        let Some(last) = bytes.get(at..) else {
            return whole();
        };
        skeleton.extend_from_slice(last);
        Frame {
            skeleton: skeleton.into(),
            before: before.into(),
        }
    }

    /// Whether `candidate` is the container: the frame's bytes with `entries`' between them.
    fn matches<'a>(&self, candidate: &[u8], entries: impl Iterator<Item = &'a [u8]>) -> bool {
        let mut rest = candidate;
        let mut take = |expected: &[u8]| match rest.split_at_checked(expected.len()) {
            Some((head, tail)) if same_bytes(head, expected) => {
                rest = tail;
                true
            }
            _ => false,
        };
        let mut from = 0;
        for (&end, entry) in self.before.iter().zip(entries) {
            let Some(gap) = self.skeleton.get(from..end as usize) else {
                return false;
            };
            if !take(gap) || !take(entry) {
                return false;
            }
            from = end as usize;
        }
        take(self.skeleton.get(from..).unwrap_or_default()) && rest.is_empty()
    }

    fn heap_bytes(&self) -> usize {
        2 * ALLOCATION + self.skeleton.len() + self.before.len() * size_of::<u32>()
    }
}

/// How many first bytes of a container the catalog cache hashes to find it.
const HEAD: usize = 64;

/// What the catalog cache finds a catalog by, before comparing it in full: its container's
/// length, the hash of its first [`HEAD`] bytes (with its reader), and its last eight bytes.
/// A request's tools array is found from the body's bytes at its start, before its end is
/// known: the head's hash takes the cache to the catalogs that begin alike, and each of
/// their lengths and tails is checked against the body at that length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Key {
    len: usize,
    /// `None`: a container shorter than [`HEAD`].
    head: Option<u64>,
    tail: u64,
}

impl Key {
    fn of(reader: Reader, container: &[u8]) -> Key {
        Key {
            len: container.len(),
            head: head_hash(reader, container),
            tail: tail(container),
        }
    }
}

/// The hash of the first [`HEAD`] bytes of `bytes`, seeded by `reader`.
fn head_hash(reader: Reader, bytes: &[u8]) -> Option<u64> {
    let seed = match reader {
        Reader::Dialect(dialect) => dialect as u64,
        Reader::Custom => CUSTOM_SEED,
    };
    Some(xxhash_rust::xxh3::xxh3_64_with_seed(
        bytes.get(..HEAD)?,
        seed,
    ))
}

/// The last eight bytes of `bytes` (fewer when shorter), as a number.
fn tail(bytes: &[u8]) -> u64 {
    let last = bytes
        .get(bytes.len().saturating_sub(8)..)
        .unwrap_or_default();
    last.iter().fold(0, |n, &b| n << 8 | u64::from(b))
}

/// The seed of the hashes of custom request shapes' tools: the dialects' seeds are below 16.
const CUSTOM_SEED: u64 = 1 << 32;

/// The cheap token estimate used in the filter's stats: characters / 4.
pub fn estimate_tokens(bytes: usize) -> usize {
    bytes.div_ceil(4)
}

/// A hasher for keys that are already hashes (xxh3 of a tool's bytes).
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// What [`CatalogCache::find_or_scan`] found.
pub enum Found {
    Cached(Rc<Catalog>),
    /// Not cached: the container's item ranges.
    Scanned(Vec<Range<usize>>),
}

/// What a worker's catalog cache holds, in bytes (estimated).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheUsage {
    /// Cached catalogs' own structures (indexes, layouts).
    pub catalogs: usize,
    /// Catalogs evicted while a request or a search session still holds them.
    pub held: usize,
    /// Tool parts.
    pub parts: usize,
    /// Tool vectors (hybrid ranking).
    pub vectors: usize,
}

impl CacheUsage {
    pub fn total(&self) -> usize {
        self.catalogs + self.held + self.parts + self.vectors
    }
}

/// A cached catalog with what its lookup checks first, side by side in its bucket: the
/// lookup reads them for every catalog whose head hashes alike, and the catalog itself only
/// for the one whose length and tail the body has.
struct Cached {
    len: usize,
    tail: u64,
    catalog: Rc<Catalog>,
}

/// Each worker's catalogs and tool parts, least recently used evicted, bounded in count of
/// catalogs and in bytes (catalogs, held catalogs, parts and vectors together). Per worker:
/// proxy-wasm VMs are single-threaded, so no locking.
pub struct CatalogCache {
    max_catalogs: usize,
    max_bytes: usize,
    /// Catalogs of containers of at least [`HEAD`] bytes, by the hash of their head
    /// ([`Key`]); `short`, the others.
    catalogs: HashMap<u64, Vec<Cached>, BuildHasherDefault<Prehashed>>,
    short: Vec<Cached>,
    /// Catalogs cached, and their bytes.
    count: usize,
    catalogs_bytes: usize,
    /// Catalogs evicted while still held elsewhere (a search session, a request waiting for
    /// its embeddings, a background embeddings call), with their size: they count until
    /// released.
    held: Vec<(Weak<Catalog>, usize)>,
    /// Parts by the xxh3 hash of their dialect and bytes; a hit is confirmed byte for byte.
    parts: HashMap<u64, Rc<ToolParts>, BuildHasherDefault<Prehashed>>,
    parts_bytes: usize,
    /// Bytes of the vectors the parts hold and of the questions the catalogs remember, kept
    /// up to date by the catalogs that set them.
    tallies: Tallies,
    /// The catalogs holding a copy of their container (at most [`HOT_SLOTS`]), and the copies'
    /// bytes. A catalog found again within [`HOT_REUSE`] ticks of the clock gets one if a
    /// slot is free, or its catalog was not found for [`HOT_REUSE`] ticks: the catalogs of
    /// agent loops keep theirs, and requests rotating over many catalogs, each found again
    /// only after more, make no copies (a copy made on every hit would cost more than it
    /// saves).
    hot: Vec<Weak<Catalog>>,
    hot_bytes: usize,
    clock: u64,
}

/// How many catalogs of a worker's cache hold a copy of their container ([`CatalogCache`]'s
/// `hot`).
const HOT_SLOTS: usize = 8;

/// Within how many ticks of the cache's clock (catalogs found or built) a catalog found again
/// counts as hot.
const HOT_REUSE: u64 = 64;

impl CatalogCache {
    /// A cache of at most `max_catalogs` catalogs and `max_bytes` bytes.
    pub fn new(max_catalogs: usize, max_bytes: usize) -> Self {
        CatalogCache {
            max_catalogs,
            max_bytes,
            catalogs: HashMap::default(),
            short: Vec::new(),
            count: 0,
            catalogs_bytes: 0,
            held: Vec::new(),
            parts: HashMap::default(),
            parts_bytes: 0,
            tallies: Tallies::default(),
            hot: Vec::new(),
            hot_bytes: 0,
            clock: 0,
        }
    }

    /// The cached catalog whose container bytes begin `bytes`, if any, with their length.
    pub fn find_prefix(&mut self, dialect: Dialect, bytes: &[u8]) -> Option<(Rc<Catalog>, usize)> {
        let found = self.find(Reader::Dialect(dialect), bytes, false)?;
        let len = found.key.len;
        Some((found, len))
    }

    /// The cached catalog read by `reader` whose container is `bytes` (`exact`), or begins
    /// them. Only catalogs whose head hashes alike are looked at, and of those only the ones
    /// whose length and last bytes the body has at that length are compared in full.
    fn find(&mut self, reader: Reader, bytes: &[u8], exact: bool) -> Option<Rc<Catalog>> {
        let fits = |cached: &&Cached| {
            let len = cached.len;
            (!exact || len == bytes.len())
                && bytes.get(..len).is_some_and(|candidate| {
                    tail(candidate) == cached.tail && cached.catalog.is(reader, candidate)
                })
        };
        let long = head_hash(reader, bytes)
            .and_then(|head| self.catalogs.get(&head))
            .and_then(|bucket| bucket.iter().find(fits));
        let found = Rc::clone(&long.or_else(|| self.short.iter().find(fits))?.catalog);
        self.clock += 1;
        let previous = found.last_used.replace(self.clock);
        if self.clock.saturating_sub(previous) <= HOT_REUSE {
            self.keep_hot(&found, bytes.get(..found.key.len).unwrap_or_default());
        }
        Some(found)
    }

    /// Gives `catalog`, found again soon after it was last used, a copy of its `container` if
    /// it has none and a slot of `hot` is free: never used, its catalog gone, or its catalog
    /// not found for [`HOT_REUSE`] ticks (whose copy is dropped).
    fn keep_hot(&mut self, catalog: &Rc<Catalog>, container: &[u8]) {
        if catalog.copy.try_borrow().map_or(true, |c| c.is_some()) {
            return;
        }
        let stale = self.clock.saturating_sub(HOT_REUSE);
        let room = self.hot.len() < HOT_SLOTS;
        let free = self.hot.iter_mut().find(|slot| {
            slot.upgrade()
                .is_none_or(|held| held.last_used.get() < stale)
        });
        match free {
            Some(slot) => {
                if let Some(held) = slot.upgrade() {
                    self.hot_bytes = self.hot_bytes.saturating_sub(held.drop_copy());
                }
                *slot = Rc::downgrade(catalog);
            }
            None if room => self.hot.push(Rc::downgrade(catalog)),
            None => return,
        }
        if let Ok(mut copy) = catalog.copy.try_borrow_mut() {
            *copy = Some(container.into());
            self.hot_bytes += ALLOCATION + container.len();
        }
    }

    /// What the tools container at the start of `bytes` (a body from the container's first
    /// byte on) is: a cached catalog, with the container's length; or, for a flat dialect, the
    /// container's length and item ranges, found by the one scan that both needs.
    pub fn find_or_scan(&mut self, dialect: Dialect, bytes: &[u8]) -> Option<(Found, usize)> {
        if let Some((catalog, len)) = self.find_prefix(dialect, bytes) {
            return Some((Found::Cached(catalog), len));
        }
        if dialect == Dialect::Gemini {
            return None;
        }
        let (len, spans) = crate::json::array_prefix_spans(bytes)?;
        Some((Found::Scanned(spans), len))
    }

    /// The catalog of `container`, from the cache or assembled (and cached) now. The flag says
    /// whether it was a cache hit.
    pub fn get_or_build(
        &mut self,
        dialect: Dialect,
        container: &str,
        weights: FieldWeights,
    ) -> Result<(Rc<Catalog>, bool), Problem> {
        match self.find_prefix(dialect, container.as_bytes()) {
            Some((catalog, len)) if len == container.len() => Ok((catalog, true)),
            _ => Ok((self.build(dialect, container, weights)?, false)),
        }
    }

    /// Assembles the catalog of `container` from its entries' parts (reading only the entries
    /// never seen before) and caches it.
    pub fn build(
        &mut self,
        dialect: Dialect,
        container: &str,
        weights: FieldWeights,
    ) -> Result<Rc<Catalog>, Problem> {
        self.build_scanned(dialect, container, None, weights)
    }

    /// [`CatalogCache::build`], given the container's item ranges if a scan found them already
    /// ([`CatalogCache::find_or_scan`]).
    pub fn build_scanned(
        &mut self,
        dialect: Dialect,
        container: &str,
        scanned: Option<Vec<Range<usize>>>,
        weights: FieldWeights,
    ) -> Result<Rc<Catalog>, Problem> {
        self.clock += 1;
        let tallies = self.tallies.clone();
        // Parts read for this catalog that could not be cached (a hash shared with other
        // bytes): the catalog carries their size.
        let mut uncached = 0;
        let mut parts_of = |item: &Item| -> Result<Rc<ToolParts>, Problem> {
            let seed = dialect as u64 * 2 + u64::from(item.builtin);
            let known = |p: &ToolParts| p.reader == Some(Reader::Dialect(dialect));
            self.parts_of(item.text, seed, known, &mut uncached, || {
                ToolParts::read(dialect, item)
            })
        };
        let built = Catalog::assemble(
            dialect,
            container,
            scanned,
            weights,
            &tallies,
            &mut parts_of,
        );
        match built {
            Ok(catalog) => Ok(self.keep(catalog, uncached)),
            Err(problem) => {
                // Parts read before the problem stay: they are valid tools.
                self.trim();
                Err(problem)
            }
        }
    }

    /// The catalog of tools a custom request shape found ([`crate::custom`]): `container`
    /// holds them, `items` are their ranges in it, and `read` reads a tool never seen before.
    /// Cached apart from the dialects' catalogs (the same bytes read another way are another
    /// catalog); the flag says whether it was a cache hit.
    pub fn get_or_read(
        &mut self,
        container: &str,
        items: Vec<Range<usize>>,
        weights: FieldWeights,
        read: &mut dyn FnMut(&str) -> Entry,
    ) -> (Rc<Catalog>, bool) {
        if let Some(hit) = self.find(Reader::Custom, container.as_bytes(), true) {
            return (hit, true);
        }
        self.clock += 1;
        let mut uncached = 0;
        let mut parts = Vec::with_capacity(items.len());
        for range in &items {
            let text = container.get(range.clone()).unwrap_or_default();
            let known = |p: &ToolParts| p.reader == Some(Reader::Custom);
            let taken = self.parts_of(text, CUSTOM_SEED, known, &mut uncached, || {
                Ok(ToolParts::of_custom(text, read(text)))
            });
            // Reading a custom tool cannot fail: what is not a tool is a built-in.
            if let Ok(taken) = taken {
                parts.push(taken);
            }
        }
        let sizes = items.iter().map(Range::len).collect();
        let layout = Layout::Flat(crate::json::ArrayLayout {
            span: 0..container.len(),
            items,
        });
        let catalog = Catalog::index(
            Reader::Custom,
            container,
            parts.into(),
            sizes,
            layout,
            weights,
            &self.tallies.clone(),
        );
        (self.keep(catalog, uncached), false)
    }

    /// The parts of the tool written `text`: the cached ones if `known` says they were read
    /// the same way, else `read` now (and cached, unless another tool has the hash).
    fn parts_of(
        &mut self,
        text: &str,
        seed: u64,
        known: impl Fn(&ToolParts) -> bool,
        uncached: &mut usize,
        read: impl FnOnce() -> Result<ToolParts, Problem>,
    ) -> Result<Rc<ToolParts>, Problem> {
        let clock = self.clock;
        let key = xxhash_rust::xxh3::xxh3_64_with_seed(text.as_bytes(), seed);
        if let Some(cached) = self.parts.get(&key) {
            if known(cached) && same_bytes(cached.text.as_bytes(), text.as_bytes()) {
                cached.last_used.set(clock);
                return Ok(Rc::clone(cached));
            }
            let fresh = read()?;
            *uncached += fresh.heap_bytes();
            return Ok(Rc::new(fresh));
        }
        let fresh = Rc::new(read()?);
        fresh.last_used.set(clock);
        self.parts_bytes += fresh.heap_bytes();
        self.parts.insert(key, Rc::clone(&fresh));
        Ok(fresh)
    }

    /// Caches a catalog just built, which also holds `uncached` bytes of parts of its own.
    fn keep(&mut self, mut catalog: Catalog, uncached: usize) -> Rc<Catalog> {
        catalog.heap_bytes += uncached;
        catalog.last_used.set(self.clock);
        let catalog = Rc::new(catalog);
        self.catalogs_bytes += catalog.heap_bytes;
        self.count += 1;
        let cached = Cached {
            len: catalog.key.len,
            tail: catalog.key.tail,
            catalog: Rc::clone(&catalog),
        };
        match catalog.key.head {
            Some(head) => self.catalogs.entry(head).or_default().push(cached),
            None => self.short.push(cached),
        }
        self.trim();
        catalog
    }

    /// What the cache holds now.
    pub fn usage(&mut self) -> CacheUsage {
        self.held.retain(|(catalog, _)| catalog.strong_count() > 0);
        // The map's own table: a key, a pointer and a control byte per slot.
        let table = self.parts.capacity() * (size_of::<u64>() + size_of::<Rc<ToolParts>>() + 1);
        CacheUsage {
            catalogs: self.catalogs_bytes + self.hot_bytes + self.tallies.remembered.get(),
            held: self.held.iter().map(|(_, bytes)| bytes).sum(),
            parts: self.parts_bytes + table,
            vectors: self.tallies.vectors.get(),
        }
    }

    /// Evicts until the cache is within its bounds: parts no catalog holds first (least
    /// recently used first), then the least recently used catalog, and so on. Evicting down to
    /// seven eighths of the bound leaves room, so this runs once per several new catalogs.
    pub fn trim(&mut self) {
        if self.count > self.max_catalogs {
            self.evict_catalogs(self.count - self.max_catalogs);
        }
        if self.usage().total() <= self.max_bytes {
            return;
        }
        let target = self.max_bytes - self.max_bytes / 8;
        loop {
            self.evict_free_parts(target);
            if self.usage().total() <= target || self.count == 0 {
                return;
            }
            // An eighth of the catalogs at a time: each eviction frees a catalog's own bytes
            // and then its tools' parts that no other catalog holds.
            self.evict_catalogs(self.count.div_ceil(8));
        }
    }

    /// Evicts the `n` least recently used catalogs.
    fn evict_catalogs(&mut self, n: usize) {
        let mut ages: Vec<(u64, usize)> = self
            .catalogs
            .values()
            .flatten()
            .chain(&self.short)
            .map(|c| (c.catalog.last_used.get(), Rc::as_ptr(&c.catalog) as usize))
            .collect();
        ages.sort_unstable();
        let oldest: std::collections::HashSet<usize> =
            ages.iter().take(n).map(|&(_, at)| at).collect();
        let is_old = |c: &Cached| oldest.contains(&(Rc::as_ptr(&c.catalog) as usize));
        let mut evicted = Vec::with_capacity(n);
        let mut split = |bucket: &mut Vec<Cached>| {
            let (old, kept): (Vec<Cached>, Vec<Cached>) =
                std::mem::take(bucket).into_iter().partition(is_old);
            *bucket = kept;
            evicted.extend(old.into_iter().map(|c| c.catalog));
        };
        self.catalogs.values_mut().for_each(&mut split);
        split(&mut self.short);
        self.catalogs.retain(|_, bucket| !bucket.is_empty());
        for catalog in evicted {
            self.retire(catalog);
        }
    }

    /// Accounts for a catalog just taken out of the cache.
    fn retire(&mut self, catalog: Rc<Catalog>) {
        self.count -= 1;
        // Its copy leaves with it, and its slot of `hot` is free.
        self.hot_bytes = self.hot_bytes.saturating_sub(catalog.drop_copy());
        let this = Rc::downgrade(&catalog);
        self.hot.retain(|slot| !slot.ptr_eq(&this));
        self.catalogs_bytes -= catalog.heap_bytes;
        // Its tools were in use until now: they leave after parts unused for longer.
        for parts in catalog.parts.iter() {
            parts.last_used.set(self.clock);
        }
        if Rc::strong_count(&catalog) > 1 {
            self.held
                .push((Rc::downgrade(&catalog), catalog.heap_bytes));
        }
    }

    /// Drops parts only the cache holds, least recently used first, until the usage is at most
    /// `target`.
    fn evict_free_parts(&mut self, target: usize) {
        let mut usage = self.usage().total();
        if usage <= target {
            return;
        }
        let mut free: Vec<(u64, u64)> = self
            .parts
            .iter()
            .filter(|(_, p)| Rc::strong_count(p) == 1)
            .map(|(key, p)| (p.last_used.get(), *key))
            .collect();
        // Oldest first, but only as many as the bytes to free call for (estimated from the
        // parts' average size) are picked out and sorted, a batch at a time: sorting all of a
        // worker's tens of thousands of parts made every few requests of never-seen tools
        // take milliseconds longer.
        let average = (self.parts_bytes / self.parts.len().max(1)).max(1);
        let mut rest = free.as_mut_slice();
        while usage > target && !rest.is_empty() {
            let wanted = ((usage - target) / average + 1).min(rest.len());
            if wanted < rest.len() {
                rest.select_nth_unstable(wanted);
            }
            let (batch, later) = rest.split_at_mut(wanted);
            batch.sort_unstable();
            for &(_, key) in batch.iter() {
                if usage <= target {
                    break;
                }
                if let Some(parts) = self.parts.remove(&key) {
                    let bytes = parts.heap_bytes();
                    let vector = parts.vector_bytes();
                    self.parts_bytes -= bytes;
                    let vectors = &self.tallies.vectors;
                    vectors.set(vectors.get().saturating_sub(vector));
                    usage = usage.saturating_sub(bytes + vector);
                }
            }
            rest = later;
        }
    }

    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Distinct tool definitions whose parts are kept.
    pub fn parts_len(&self) -> usize {
        self.parts.len()
    }
}

/// MCP tools (`name`, and the tool's JSON object as the server wrote it) as an Anthropic-style
/// tools array (`name`, `description`, `input_schema`), which a [`Catalog`] reads like any
/// request's tools: how MCP servers' catalogs and the suggestions' are ranked.
pub fn mcp_tools_container<'a>(tools: impl Iterator<Item = (&'a str, &'a str)>) -> String {
    #[derive(serde::Deserialize)]
    struct McpTool<'a> {
        #[serde(borrow, default)]
        description: Option<&'a serde_json::value::RawValue>,
        #[serde(borrow, default, rename = "inputSchema")]
        input_schema: Option<&'a serde_json::value::RawValue>,
    }
    let mut out = String::from("[");
    for (n, (name, raw)) in tools.enumerate() {
        if n > 0 {
            out.push(',');
        }
        let parsed: Option<McpTool> = serde_json::from_str(raw).ok();
        out.push_str("{\"name\":");
        out.push_str(&serde_json::to_string(name).unwrap_or_else(|_| "\"\"".into()));
        if let Some(description) = parsed.as_ref().and_then(|t| t.description) {
            out.push_str(",\"description\":");
            out.push_str(description.get());
        }
        if let Some(schema) = parsed.as_ref().and_then(|t| t.input_schema) {
            out.push_str(",\"input_schema\":");
            out.push_str(schema.get());
        }
        out.push('}');
    }
    out.push(']');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat_tools(tools: &[(&str, &str)]) -> String {
        let items: Vec<String> = tools
            .iter()
            .map(|(name, description)| {
                format!(
                    r#"{{"type":"function","function":{{"name":"{name}","description":"{description}","parameters":{{"type":"object","properties":{{"city":{{"type":"string","description":"the city"}}}}}}}}}}"#
                )
            })
            .collect();
        format!("[{}]", items.join(", "))
    }

    #[test]
    fn a_callers_ranking_scores_as_a_catalog_of_its_tools_alone() {
        let tools = [
            ("get_weather", "Current weather in a city"),
            ("get_forecast", "Weather forecast for a city"),
            (
                "weather_alerts",
                "Severe weather alerts for a city, weather warnings",
            ),
            ("send_email", "Send an email about the weather"),
            ("book_hotel", "Book a hotel in a city"),
        ];
        let whole = Catalog::build(
            Dialect::OpenaiChat,
            &chat_tools(&tools),
            FieldWeights::default(),
        )
        .unwrap();
        let query = "what is the weather forecast in the city";
        for allowed in [
            vec![true, false, true, false, true],
            vec![false, true, false, true, false],
            vec![true, true, true, true, true],
        ] {
            let kept: Vec<(&str, &str)> = tools
                .iter()
                .zip(&allowed)
                .filter(|(_, a)| **a)
                .map(|(t, _)| *t)
                .collect();
            let alone = Catalog::build(
                Dialect::OpenaiChat,
                &chat_tools(&kept),
                FieldWeights::default(),
            )
            .unwrap();
            let by_name = |c: &Catalog, ranking: &[Scored]| -> Vec<(String, f32)> {
                ranking
                    .iter()
                    .map(|s| (c.name(s.entry).unwrap().to_owned(), s.score))
                    .collect()
            };
            let among = whole.rank_among(query, &allowed);
            let only: Vec<_> = by_name(&whole, &among)
                .into_iter()
                .filter(|(n, _)| kept.iter().any(|(k, _)| k == n))
                .collect();
            assert_eq!(only, by_name(&alone, &alone.rank(query)), "{allowed:?}");
            assert_eq!(
                among.len(),
                kept.len(),
                "only the caller's tools are ranked"
            );
            // The same mask again: the index is remembered, the ranking the same.
            assert_eq!(whole.rank_among(query, &allowed), among);
        }
        // With the whole catalog's statistics the scores differ: the test can fail.
        let partial = [true, false, true, false, true];
        let among = whole.rank_among(query, &partial);
        let full = whole.rank(query);
        let score = |r: &[Scored], e: usize| r.iter().find(|s| s.entry == e).map(|s| s.score);
        assert_ne!(score(&among, 0), score(&full, 0));
    }

    #[test]
    fn a_catalog_of_known_tools_is_assembled_from_their_parts() {
        let mut cache = CatalogCache::new(16, 64 << 20);
        let w = FieldWeights::default();
        let first = chat_tools(&[
            ("get_weather", "Current weather for a city"),
            ("send_email", "Sends an email"),
            ("create_issue", "Opens an issue"),
        ]);
        let a = cache.build(Dialect::OpenaiChat, &first, w).unwrap();
        assert_eq!(cache.parts_len(), 3);
        // The same tools, reordered, one dropped, one added, pretty-printed separators.
        let second = chat_tools(&[
            ("create_issue", "Opens an issue"),
            ("get_weather", "Current weather for a city"),
            ("book_flight", "Books a flight"),
        ])
        .replace(", ", ",\n  ");
        let b = cache.build(Dialect::OpenaiChat, &second, w).unwrap();
        assert_eq!(cache.parts_len(), 4, "only book_flight was read");
        assert!(Rc::ptr_eq(&a.parts()[2], &b.parts()[0]));
        assert!(Rc::ptr_eq(&a.parts()[0], &b.parts()[1]));
        // Exactly the catalog a fresh read builds: same layout, same scores to the bit.
        let fresh = Catalog::build(Dialect::OpenaiChat, &second, w).unwrap();
        for query in ["weather in Paris", "open an issue for the flight", "x"] {
            let (ours, theirs) = (b.index.rank(query), fresh.index.rank(query));
            assert_eq!(ours.len(), theirs.len());
            for (o, t) in ours.iter().zip(&theirs) {
                assert_eq!((o.entry, o.score.to_bits()), (t.entry, t.score.to_bits()));
            }
        }
        assert_eq!(b.draft.sizes, fresh.draft.sizes);
        assert_eq!(b.tokens, fresh.tokens);
        let kept = [true, false, true];
        assert_eq!(
            crate::rewrite::rebuild_container(&second, &b.draft, &kept),
            crate::rewrite::rebuild_container(&second, &fresh.draft, &kept)
        );
    }

    #[test]
    fn a_cached_catalog_is_recognised_only_by_its_exact_bytes() {
        let mut cache = CatalogCache::new(16, 64 << 20);
        let w = FieldWeights::default();
        let tools = chat_tools(&[("get_weather", "Weather"), ("send_email", "Email")]);
        cache.build(Dialect::OpenaiChat, &tools, w).unwrap();
        let body_tail = format!("{tools}, \"max_tokens\": 5}}");
        assert_eq!(
            cache
                .find_prefix(Dialect::OpenaiChat, body_tail.as_bytes())
                .map(|(_, len)| len),
            Some(tools.len())
        );
        // Same length, same first and last bytes, one byte changed inside a tool or between
        // tools: another catalog.
        for other in [
            tools.replacen("Weather", "Weathex", 1),
            tools.replacen(", ", " ,", 1),
        ] {
            assert_eq!(other.len(), tools.len());
            assert!(
                cache
                    .find_prefix(Dialect::OpenaiChat, other.as_bytes())
                    .is_none()
            );
        }
        assert!(
            cache
                .find_prefix(Dialect::Anthropic, tools.as_bytes())
                .is_none()
        );
        assert!(
            cache
                .get_or_build(Dialect::OpenaiChat, &tools, w)
                .unwrap()
                .1
        );
    }

    #[test]
    fn a_catalog_is_matched_byte_for_byte_through_its_frame() {
        let mut cache = CatalogCache::new(16, 64 << 20);
        let w = FieldWeights::default();
        let containers = [
            (Dialect::OpenaiChat, chat_tools(&[("a", "A"), ("b", "B"), ("c", "C")])),
            (
                Dialect::Anthropic,
                "[\n  {\"name\":\"a\",\"description\":\"x\"} ,\n  {\"type\":\"web_search_20250305\",\"name\":\"web_search\"}\n]".into(),
            ),
            (
                Dialect::Gemini,
                r#"[{"functionDeclarations":[{"name":"a","description":"x"}, {"name":"b"}],"x":1},{"googleSearch":{}},{"functionDeclarations":[{"name":"c"}]}]"#.into(),
            ),
        ];
        for (dialect, container) in containers {
            let catalog = cache.build(dialect, &container, w).unwrap();
            let body = format!("{container},\"stream\":true}}");
            assert_eq!(
                cache
                    .find_prefix(dialect, body.as_bytes())
                    .map(|(c, len)| (Rc::as_ptr(&c), len)),
                Some((Rc::as_ptr(&catalog), container.len())),
                "{container}"
            );
            // Found again at once: the catalog keeps a copy of its container now. Compared
            // either way, any one byte changed, anywhere (in a tool or between tools), or one
            // missing: not this catalog.
            assert!(catalog.copy.borrow().is_some());
            let bytes = container.as_bytes();
            for with_copy in [true, false] {
                if !with_copy {
                    catalog.drop_copy();
                }
                assert!(catalog.is(Reader::Dialect(dialect), bytes));
                for at in 0..bytes.len() {
                    let mut changed = bytes.to_vec();
                    changed[at] = if bytes[at] == b' ' { b'\t' } else { b' ' };
                    assert!(!catalog.is(Reader::Dialect(dialect), &changed), "{at}");
                    let mut shorter = bytes.to_vec();
                    shorter.remove(at);
                    assert!(!catalog.is(Reader::Dialect(dialect), &shorter), "{at}");
                }
            }
        }
    }

    #[test]
    fn only_catalogs_found_again_soon_keep_a_copy_of_their_container() {
        let mut cache = CatalogCache::new(1000, 256 << 20);
        let w = FieldWeights::default();
        let tools = |set: &str| {
            chat_tools(&[
                ("get_weather", "Current weather in a city"),
                (set, "A tool of its own"),
            ])
        };
        let has_copy = |catalog: &Rc<Catalog>| catalog.copy.borrow().is_some();
        let copies_bytes = |catalogs: &[&Rc<Catalog>]| -> usize {
            catalogs
                .iter()
                .filter(|c| has_copy(c))
                .map(|c| ALLOCATION + c.key.len)
                .sum()
        };
        let find = |cache: &mut CatalogCache, container: &str| {
            let (found, len) = cache
                .find_prefix(Dialect::OpenaiChat, container.as_bytes())
                .unwrap();
            assert_eq!(len, container.len());
            found
        };
        // An agent loop: the same tools array again at once.
        let agent = tools("agent_tool");
        let looped = cache.build(Dialect::OpenaiChat, &agent, w).unwrap();
        assert!(!has_copy(&looped));
        find(&mut cache, &agent);
        assert!(has_copy(&looped));
        assert_eq!(cache.hot_bytes, copies_bytes(&[&looped]));
        // Requests rotating over more catalogs than HOT_REUSE ticks: each is found again only
        // after all the others, and none makes a copy.
        let rotating: Vec<String> = (0..100).map(|i| tools(&format!("rotating_{i}"))).collect();
        let built: Vec<Rc<Catalog>> = rotating
            .iter()
            .map(|t| cache.build(Dialect::OpenaiChat, t, w).unwrap())
            .collect();
        for _ in 0..3 {
            for t in &rotating {
                find(&mut cache, t);
            }
        }
        assert!(built.iter().all(|c| !has_copy(c)));
        assert_eq!(cache.hot.len(), 1);
        // Nine more agent loops: the first takes the slot of the loop not seen for longer than
        // HOT_REUSE ticks (its copy dropped), seven take the free slots, and the ninth finds
        // every slot's catalog recently used.
        let loops: Vec<String> = (0..9).map(|i| tools(&format!("loop_{i}"))).collect();
        let mut hot = Vec::new();
        for t in &loops {
            hot.push(cache.build(Dialect::OpenaiChat, t, w).unwrap());
            find(&mut cache, t);
        }
        assert!(!has_copy(&looped));
        assert!(hot[..HOT_SLOTS].iter().all(has_copy));
        assert!(!has_copy(&hot[HOT_SLOTS]));
        let all: Vec<&Rc<Catalog>> = hot.iter().chain([&looped]).collect();
        assert_eq!(cache.hot_bytes, copies_bytes(&all));
        // The copies count in the cache's bytes, and leave with their catalogs.
        let catalogs = cache.usage().catalogs;
        assert!(catalogs >= cache.catalogs_bytes + cache.hot_bytes);
        let hot_before = cache.hot_bytes;
        cache.max_catalogs = 4;
        cache.trim();
        assert!(cache.hot_bytes < hot_before);
        let kept: usize = hot.iter().filter(|c| has_copy(c)).count();
        assert_eq!(cache.hot.len(), kept);
        assert_eq!(cache.hot_bytes, copies_bytes(&all));
    }

    #[test]
    fn hundreds_of_catalogs_that_begin_alike_are_each_found() {
        let mut cache = CatalogCache::new(1000, 256 << 20);
        let w = FieldWeights::default();
        // Per-user tool sets from a shared pool: every set begins with the same tools (so
        // their heads hash alike), and sets of the same length differ by which tools follow.
        let pool: Vec<(String, String)> = (0..60)
            .map(|i| (format!("tool_{i}"), format!("does thing {i}")))
            .collect();
        let set = |i: usize| {
            let mut tools: Vec<(&str, &str)> = pool[..3]
                .iter()
                .map(|(n, d)| (n.as_str(), d.as_str()))
                .collect();
            tools.extend(
                pool[3..]
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| (i >> (j % 9)) & 1 == 1 || j % 13 == i % 13)
                    .map(|(_, (n, d))| (n.as_str(), d.as_str())),
            );
            chat_tools(&tools)
        };
        let sets: Vec<String> = (0..400).map(set).collect();
        let mut built = Vec::new();
        for (i, tools) in sets.iter().enumerate() {
            match cache.find_prefix(Dialect::OpenaiChat, tools.as_bytes()) {
                // Two indexes can make the same set.
                Some((found, _)) => {
                    let first = sets.iter().position(|t| t == tools).unwrap();
                    assert!(first < i);
                    built.push(found);
                }
                None => built.push(cache.build(Dialect::OpenaiChat, tools, w).unwrap()),
            }
        }
        for (tools, catalog) in sets.iter().zip(&built) {
            let body = format!("{tools}],\"model\":\"m\"}}");
            let (found, len) = cache
                .find_prefix(Dialect::OpenaiChat, body.as_bytes())
                .unwrap();
            assert!(Rc::ptr_eq(&found, catalog));
            assert_eq!(len, tools.len());
        }
        // A set no one sent, beginning like the others: found nowhere.
        let unsent = chat_tools(&[("tool_0", "does thing 0"), ("tool_1", "does thing 1")]);
        assert!(
            cache
                .find_prefix(Dialect::OpenaiChat, unsent.as_bytes())
                .is_none()
        );
    }

    #[test]
    fn cache_hits_and_evicts_least_recent() {
        let mut cache = CatalogCache::new(2, 64 << 20);
        let w = FieldWeights::default();
        let a = r#"[{"name":"a"}]"#;
        let b = r#"[{"name":"b"}]"#;
        let c = r#"[{"name":"c"}]"#;
        assert!(!cache.get_or_build(Dialect::Anthropic, a, w).unwrap().1);
        assert!(cache.get_or_build(Dialect::Anthropic, a, w).unwrap().1);
        assert!(
            !cache
                .get_or_build(Dialect::OpenaiResponses, a, w)
                .unwrap()
                .1,
            "dialect is part of the key"
        );
        assert!(!cache.get_or_build(Dialect::Anthropic, b, w).unwrap().1);
        assert!(!cache.get_or_build(Dialect::Anthropic, c, w).unwrap().1);
        assert_eq!(cache.len(), 2);
        assert!(
            !cache.get_or_build(Dialect::Anthropic, a, w).unwrap().1,
            "a was evicted"
        );
        assert!(cache.find_prefix(Dialect::Gemini, a.as_bytes()).is_none());
    }

    #[test]
    fn the_cache_stays_within_its_bytes_and_counts_held_catalogs() {
        const BOUND: usize = 1 << 20;
        let mut cache = CatalogCache::new(1000, BOUND);
        let w = FieldWeights::default();
        let catalog = |i: usize| {
            let tools: Vec<(String, String)> = (0..50)
                .map(|j| {
                    (
                        format!("tool_{i}_{j}"),
                        format!("does thing {j} of set {i} with some description words"),
                    )
                })
                .collect();
            let refs: Vec<(&str, &str)> = tools
                .iter()
                .map(|(n, d)| (n.as_str(), d.as_str()))
                .collect();
            chat_tools(&refs)
        };
        let held = cache.build(Dialect::OpenaiChat, &catalog(0), w).unwrap();
        let held_bytes = held.heap_bytes;
        for i in 1..200 {
            cache.build(Dialect::OpenaiChat, &catalog(i), w).unwrap();
            let usage = cache.usage();
            assert!(usage.total() <= BOUND, "{i}: {usage:?}");
        }
        // The first catalog was evicted long ago, but it is still held (as a search session
        // holds its catalog): it counts, and so do its tools' parts.
        let usage = cache.usage();
        assert_eq!(usage.held, held_bytes);
        assert!(held.parts().iter().all(|p| Rc::strong_count(p) > 1));
        drop(held);
        assert_eq!(cache.usage().held, 0);
        // Vectors set through a catalog count, and the bound holds with them.
        let last = cache.build(Dialect::OpenaiChat, &catalog(500), w).unwrap();
        for entry in 0..50 {
            last.remember_vector(entry, vec![0.5; 384]);
        }
        assert_eq!(cache.usage().vectors, 50 * (384 * 4 + ALLOCATION));
        for i in 501..600 {
            cache.build(Dialect::OpenaiChat, &catalog(i), w).unwrap();
            assert!(cache.usage().total() <= BOUND);
        }
        // Released, its tools go with their vectors when newer tools need the room.
        drop(last);
        for i in 600..700 {
            cache.build(Dialect::OpenaiChat, &catalog(i), w).unwrap();
        }
        assert_eq!(cache.usage().vectors, 0);
    }

    #[test]
    fn free_parts_leave_least_recently_used_first_and_no_more_than_needed() {
        let w = FieldWeights::default();
        for freed in [0usize, 1, 7, 150, 499, 500] {
            let mut cache = CatalogCache::new(1000, 1 << 30);
            for i in 0..100 {
                let tools: Vec<(String, String)> = (0..5)
                    .map(|j| (format!("tool_{i}_{j}"), format!("does {j} of {i}")))
                    .collect();
                let refs: Vec<(&str, &str)> = tools
                    .iter()
                    .map(|(n, d)| (n.as_str(), d.as_str()))
                    .collect();
                cache
                    .build(Dialect::OpenaiChat, &chat_tools(&refs), w)
                    .unwrap();
            }
            cache.evict_catalogs(100);
            // Distinct ages, in no order the keys have.
            for (age, p) in (0u64..).zip(cache.parts.values()) {
                p.last_used.set(age.wrapping_mul(7919) % 1009);
            }
            let mut oldest: Vec<(u64, u64, usize)> = cache
                .parts
                .iter()
                .map(|(key, p)| (p.last_used.get(), *key, p.heap_bytes()))
                .collect();
            oldest.sort_unstable();
            let usage = cache.usage().total();
            let target = usage - oldest[..freed].iter().map(|o| o.2).sum::<usize>();
            cache.evict_free_parts(target);
            let kept: Vec<u64> = oldest[freed..].iter().map(|o| o.1).collect();
            let mut left: Vec<u64> = cache.parts.keys().copied().collect();
            left.sort_unstable();
            let mut expected = kept.clone();
            expected.sort_unstable();
            assert_eq!(left, expected, "{freed} freed");
        }
    }

    #[test]
    fn a_malformed_entry_is_a_bad_shape_and_a_non_tool_a_builtin() {
        let mut cache = CatalogCache::new(16, 64 << 20);
        let w = FieldWeights::default();
        let bad = r#"[{"type":"function","function":{"name":"a"}}, {"function": 5, "x": tru}]"#;
        assert_eq!(
            cache.build(Dialect::OpenaiChat, bad, w).err(),
            Some(Problem::BadShape)
        );
        let odd = r#"[{"type":"function","function":{"name":"a"}}, {"function": 5}, 7]"#;
        let c = cache.build(Dialect::OpenaiChat, odd, w).unwrap();
        assert_eq!(c.draft.entries[1], Entry::Builtin);
        assert_eq!(c.draft.entries[2], Entry::Builtin);
        for bad in [r#"{"a":1}"#, "[1,]", r#"[{"name":"a"} {"name":"b"}]"#] {
            assert_eq!(
                cache.build(Dialect::Anthropic, bad, w).err(),
                Some(Problem::BadShape),
                "{bad}"
            );
        }
    }
}
