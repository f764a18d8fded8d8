//! Ranking: BM25 over each function tool's name, description and parameters.
//!
//! What a tool contributes to an index (its terms per field, its lexical facts, its estimated
//! tokens, later its vector) is read once per distinct tool definition ([`ToolParts`], keyed by
//! its bytes) and shared by every catalog that holds it. A catalog is assembled from its tools'
//! parts (document frequencies and lengths summed), so a new tools array of known tools is never
//! tokenised again, and kept in a cache bounded in bytes: the agent that sends the same catalog
//! every turn pays for it once, and the one whose catalog changes by a tool pays for that tool.

use crate::access::{Annotations, Grant};
use crate::dialects::{CatalogDraft, Dialect, Entry, Item, Layout, Problem, Reader, ToolText};
use crate::fusion::{Fused, LexicalTool, Lexicon};
use bm25::TokenEmbedder;
use std::cell::{Cell, OnceCell, RefCell};
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};
use std::mem::size_of;
use std::ops::Range;
use std::rc::{Rc, Weak};

/// How many times each field's text counts. Repeating a field raises its term frequency the way
/// BM25F field weights do: a word in the name says more than the same word in the description,
/// and a word in the description more than one in a parameter's name or description.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FieldWeights {
    pub name: usize,
    pub description: usize,
    pub params: usize,
}

impl Default for FieldWeights {
    /// Name 4, description 2, parameters 1: the best of the grids over the three shared datasets
    /// in `docs/tuning-notes.md`, and the middle of a flat plateau (name 3–6, description 1–2)
    /// rather than a sharp peak.
    fn default() -> Self {
        FieldWeights {
            name: 4,
            description: 2,
            params: 1,
        }
    }
}

impl FieldWeights {
    fn apply(self, [name, description, params]: [u32; 3]) -> usize {
        (name as usize)
            .saturating_mul(self.name)
            .saturating_add((description as usize).saturating_mul(self.description))
            .saturating_add((params as usize).saturating_mul(self.params))
    }
}

/// BM25 term-frequency saturation. Higher than the textbook 1.2 because field weights work by
/// repetition: a name word already occurs four times, and with k1 = 1.2 it would saturate
/// before a second name word or a description match could add much. 3.0 beat 1.2, 1.5 and 2.0
/// on seal_tools and toolbench and cost livemcpbench nothing measurable.
const K1: f32 = 3.0;
/// BM25 length normalisation. Tools with long parameter lists match many query words by
/// chance; normalising harder (0.9 rather than 0.75) keeps them from crowding out short,
/// precise tools, and helped on all three datasets.
const B: f32 = 0.9;

/// A term's id in the index: the `bm25` crate's hash of the term (FxHash, 32 bits), computed on
/// the tokeniser's buffer, so no term is ever kept as a string.
pub(crate) fn term_id(term: &str) -> u32 {
    <u32 as TokenEmbedder>::embed(term)
}

/// The weight of a term in a document, exactly as the `bm25` crate's `Embedder` computes it
/// (same operations in the same order, so the same `f32`): term-frequency saturation by `K1`,
/// length normalisation by `B` against the catalog's average document length.
/// `length_norm` is [`length_norm`] of the document: the part of the denominator every term of
/// a document shares, computed once per document (the same operations, so the same bits).
fn term_weight(frequency: usize, length_norm: f32) -> f32 {
    let token_frequency = frequency as f32;
    let numerator = token_frequency * (K1 + 1.0);
    let denominator = token_frequency + length_norm;
    numerator / denominator
}

/// `K1 · (1 − B + B · length / avgdl)`: the crate's length normalisation of one document.
fn length_norm(length: usize, avgdl: f32) -> f32 {
    K1 * (1.0 - B + B * (length as f32 / avgdl))
}

/// One distinct term of a tool and how often it occurs in each field.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct TermCount {
    id: u32,
    /// Occurrences in the name, the description and the parameters.
    fields: [u32; 3],
}

/// What one tool definition contributes to every catalog that holds it: its entry as the
/// dialect reads it, its distinct terms with their count per field, the lexical facts of hybrid
/// ranking's `exact` and `param_keys` channels, and (hybrid ranking) its vector. Read once per
/// distinct definition and shared.
pub struct ToolParts {
    /// What read the definition's bytes (`None`: parts of an entry read elsewhere, which the
    /// cache never holds).
    reader: Option<Reader>,
    /// The definition's exact bytes: a catalog that reuses these parts is checked against
    /// them byte for byte, so no hash collision can pass one tool off as another.
    text: Box<str>,
    pub entry: Entry,
    /// Sorted by term id.
    terms: Box<[TermCount]>,
    /// Terms in the name, the description and the parameters.
    lengths: [u32; 3],
    lexical: LexicalTool,
    /// The tool's unit vector under this worker's embeddings settings, once known.
    vector: OnceCell<Box<[f32]>>,
    /// When a catalog last took these parts: the least recently used go first.
    last_used: Cell<u64>,
}

impl ToolParts {
    /// Reads one entry of a `dialect` container and tokenises its text.
    pub fn read(dialect: Dialect, item: &Item) -> Result<ToolParts, Problem> {
        let entry = dialect.read_item(item)?;
        Ok(Self::of(Some(Reader::Dialect(dialect)), item.text, entry))
    }

    /// The parts of a tool a custom request shape read from `text`.
    fn of_custom(text: &str, entry: Entry) -> ToolParts {
        ToolParts::of(Some(Reader::Custom), text, entry)
    }

    /// The parts of an entry already read, without its bytes (tests, and indexes built from
    /// entries).
    pub fn of_entry(entry: Entry) -> ToolParts {
        ToolParts::of(None, "", entry)
    }

    fn of(reader: Option<Reader>, text: &str, entry: Entry) -> ToolParts {
        let mut ids: Vec<(u32, usize)> = Vec::new();
        let mut lengths = [0u32; 3];
        let lexical = match &entry {
            Entry::Function(t) => {
                let field = |text: &str| {
                    let mut out = Vec::new();
                    crate::text::for_each_term(text, |term| out.push(term_id(term)));
                    out
                };
                let name = field(&t.name);
                let description = field(&t.description);
                ids.extend(name.iter().map(|&id| (id, 0)));
                ids.extend(description.iter().map(|&id| (id, 1)));
                let before = ids.len();
                for p in &t.params {
                    crate::text::for_each_term(p, |term| ids.push((term_id(term), 2)));
                }
                let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
                lengths = [
                    count(name.len()),
                    count(description.len()),
                    count(ids.len() - before),
                ];
                LexicalTool::new(name, description, t.keys.iter().flat_map(|k| field(k)))
            }
            Entry::Builtin => LexicalTool::default(),
        };
        ids.sort_unstable();
        let mut terms: Vec<TermCount> = Vec::new();
        for (id, field) in ids {
            if terms.last().is_none_or(|t| t.id != id) {
                terms.push(TermCount {
                    id,
                    ..TermCount::default()
                });
            }
            if let Some(n) = terms.last_mut().and_then(|t| t.fields.get_mut(field)) {
                *n = n.saturating_add(1);
            }
        }
        ToolParts {
            reader,
            text: text.into(),
            entry,
            terms: terms.into(),
            lengths,
            lexical,
            vector: OnceCell::new(),
            last_used: Cell::new(0),
        }
    }

    pub(crate) fn lexical(&self) -> &LexicalTool {
        &self.lexical
    }

    /// The tool's vector, once known.
    pub fn vector(&self) -> Option<&[f32]> {
        self.vector.get().map(|v| &v[..])
    }

    /// Bytes this worker holds for these parts, vector excepted (estimated from what is
    /// allocated; the allocator's own overhead is not counted).
    fn heap_bytes(&self) -> usize {
        // Each string, list and shared box is an allocation of its own.
        let s = |x: &String| ALLOCATION + x.capacity() + size_of::<String>();
        let strings = match &self.entry {
            Entry::Function(t) => {
                3 * ALLOCATION
                    + size_of::<ToolText>()
                    + s(&t.name)
                    + s(&t.description)
                    + t.params.iter().map(s).sum::<usize>()
                    + t.keys.iter().map(s).sum::<usize>()
            }
            Entry::Builtin => 0,
        };
        6 * ALLOCATION
            + size_of::<ToolParts>()
            + self.text.len()
            + strings
            + self.terms.len() * size_of::<TermCount>()
            + self.lexical.heap_bytes()
    }

    /// Bytes of its vector, once known, with the allocation's own.
    fn vector_bytes(&self) -> usize {
        self.vector()
            .map_or(0, |v| ALLOCATION + std::mem::size_of_val(v))
    }
}

/// What the allocator adds to each allocation, about: dlmalloc's header and its rounding to 8
/// bytes. The cache counts it so that what it holds, estimated, stays near what Envoy's memory
/// shows (without it, 64 MiB of estimated parts took a fifth more).
const ALLOCATION: usize = 16;

/// A BM25 index over the function tools of one catalog.
///
/// Scoring uses the `bm25` crate's formula, Σ over distinct query terms of IDF × weight with
/// IDF = ln(1 + (N − n + 0.5) / (n + 0.5)) and the crate's term weights, but over postings lists
/// with the IDF computed once: the crate's `Scorer` recomputes IDF per document and searches
/// each document's terms linearly, which costs milliseconds per query on catalogs of thousands.
/// `scores_match_the_crates_scorer` checks the two agree.
pub struct Index {
    /// Distinct terms, sorted; the postings of `terms[i]` are `postings[starts[i]..starts[i + 1]]`.
    terms: Vec<u32>,
    idf: Vec<f32>,
    starts: Vec<u32>,
    /// (document, BM25 term weight), by term, documents in catalog order.
    postings: Vec<(u32, f32)>,
    /// Entry index (in the catalog) of each document, in catalog order.
    documents: Vec<usize>,
}

/// One function tool's place in a ranking.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scored {
    /// Index in the catalog's entries.
    pub entry: usize,
    pub score: f32,
}

impl Index {
    /// An index of `entries` (their parts read afresh).
    pub fn build(entries: &[Entry], weights: FieldWeights) -> Index {
        let parts: Vec<(usize, ToolParts)> = entries
            .iter()
            .enumerate()
            .filter(|(_, e)| matches!(e, Entry::Function(_)))
            .map(|(i, e)| (i, ToolParts::of_entry(e.clone())))
            .collect();
        let docs: Vec<(usize, &ToolParts)> = parts.iter().map(|(i, p)| (*i, p)).collect();
        Index::assemble(&docs, weights)
    }

    /// The index of the documents `docs` (catalog entry, parts): lengths and document
    /// frequencies summed from the parts, nothing tokenised.
    fn assemble(docs: &[(usize, &ToolParts)], weights: FieldWeights) -> Index {
        let lengths: Vec<usize> = docs.iter().map(|(_, p)| weights.apply(p.lengths)).collect();
        let total: usize = lengths.iter().sum();
        let avgdl = if docs.is_empty() {
            1.0
        } else {
            total as f32 / docs.len() as f32
        };
        let avgdl = avgdl.max(1.0);
        let mut triples: Vec<(u32, u32, f32)> =
            Vec::with_capacity(docs.iter().map(|(_, p)| p.terms.len()).sum());
        for ((doc, (_, parts)), &length) in (0u32..).zip(docs).zip(&lengths) {
            let norm = length_norm(length, avgdl);
            for term in &parts.terms {
                let frequency = weights.apply(term.fields);
                // A term only in a field of weight 0 is not in the document at all.
                if frequency > 0 {
                    triples.push((term.id, doc, term_weight(frequency, norm)));
                }
            }
        }
        // By term, documents in catalog order (they were pushed in that order).
        sort_by_term(&mut triples);
        let mut terms = Vec::new();
        let mut starts = Vec::new();
        let mut postings = Vec::with_capacity(triples.len());
        for (term, doc, weight) in triples {
            if terms.last() != Some(&term) {
                terms.push(term);
                starts.push(u32::try_from(postings.len()).unwrap_or(u32::MAX));
            }
            postings.push((doc, weight));
        }
        starts.push(u32::try_from(postings.len()).unwrap_or(u32::MAX));
        let n = docs.len() as f32;
        let idf = starts
            .windows(2)
            .map(|w| {
                let df = w.get(1).zip(w.first()).map_or(0, |(b, a)| b - a) as f32;
                (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
            })
            .collect();
        Index {
            terms,
            idf,
            starts,
            postings,
            documents: docs.iter().map(|(entry, _)| *entry).collect(),
        }
    }

    /// A term's IDF and postings, if any document has it.
    fn postings_of(&self, term: u32) -> Option<(f32, &[(u32, f32)])> {
        let i = self.terms.binary_search(&term).ok()?;
        let (start, end) = (*self.starts.get(i)?, *self.starts.get(i + 1)?);
        Some((
            *self.idf.get(i)?,
            self.postings.get(start as usize..end as usize)?,
        ))
    }

    /// The IDF of a term, if any document has it.
    pub fn idf(&self, term: u32) -> Option<f32> {
        self.postings_of(term).map(|(idf, _)| idf)
    }

    /// The documents (positions in [`Index::documents`]) that contain a term.
    pub fn documents_with(&self, term: u32) -> impl Iterator<Item = usize> + '_ {
        self.postings_of(term)
            .into_iter()
            .flat_map(|(_, docs)| docs.iter().map(|&(doc, _)| doc as usize))
    }

    /// The catalog entry of each document, in catalog order.
    pub fn documents(&self) -> &[usize] {
        &self.documents
    }

    /// Every function tool, best first; equal scores keep catalog order.
    pub fn rank(&self, query: &str) -> Vec<Scored> {
        let mut scores = vec![0f32; self.documents.len()];
        // Each distinct query term counts once. The crate's scorer counts repeats, but a word a
        // user repeats ("weather … weather") is no more a sign of the tool than said once, and
        // counting it twice lets one word outvote the rest of the request: deduplicating lifted
        // seal_tools Recall@5 by five points (`docs/tuning-notes.md`).
        let mut seen = HashSet::new();
        crate::text::for_each_term(query, |term| {
            let id = term_id(term);
            if !seen.insert(id) {
                return;
            }
            let Some((idf, docs_with_term)) = self.postings_of(id) else {
                return;
            };
            for &(doc, weight) in docs_with_term {
                if let Some(s) = scores.get_mut(doc as usize) {
                    *s += idf * weight;
                }
            }
        });
        // Scores are sums of positive weights: a tool no query term matched scores 0 and
        // ranks after every matched one, in catalog order. Only the matched ones (a few dozen
        // of hundreds, usually) are sorted; sorting them all was a third of ranking's time.
        let (mut ranked, unmatched): (Vec<Scored>, Vec<Scored>) = self
            .documents
            .iter()
            .zip(scores)
            .map(|(&entry, score)| Scored { entry, score })
            .partition(|s| s.score != 0.0);
        // Stable sort: ties stay in catalog order.
        ranked.sort_by(|a, b| b.score.total_cmp(&a.score));
        ranked.extend(unmatched);
        ranked
    }

    fn heap_bytes(&self) -> usize {
        self.terms.capacity() * size_of::<u32>()
            + self.idf.capacity() * size_of::<f32>()
            + self.starts.capacity() * size_of::<u32>()
            + self.postings.capacity() * size_of::<(u32, f32)>()
            + self.documents.capacity() * size_of::<usize>()
    }
}

/// Sorts postings by term, stably (documents stay in the order they were pushed): a radix
/// sort on the term's 11-bit digits, three passes over the postings with 2,048 counters
/// each, where a comparison sort of a 1,000-tool catalog's 40,000 postings was a third of
/// assembling it (and 16-bit digits spent more on their 65,536 counters than on a 200-tool
/// catalog's 6,000 postings).
fn sort_by_term(triples: &mut Vec<(u32, u32, f32)>) {
    const BITS: u32 = 11;
    if triples.len() < 256 {
        triples.sort_by_key(|&(term, _, _)| term);
        return;
    }
    let mut scratch = vec![(0u32, 0u32, 0f32); triples.len()];
    let mut starts = vec![0usize; 1 << BITS];
    for shift in [0, BITS, 2 * BITS] {
        let digit = |t: &(u32, u32, f32)| ((t.0 >> shift) & ((1 << BITS) - 1)) as usize;
        starts.fill(0);
        for t in triples.iter() {
            if let Some(count) = starts.get_mut(digit(t)) {
                *count += 1;
            }
        }
        let mut at = 0;
        for slot in starts.iter_mut() {
            let count = *slot;
            *slot = at;
            at += count;
        }
        for t in triples.iter() {
            if let Some(next) = starts.get_mut(digit(t)) {
                if let Some(place) = scratch.get_mut(*next) {
                    *place = *t;
                }
                *next += 1;
            }
        }
        std::mem::swap(triples, &mut scratch);
    }
}

/// What a grant's decisions depend on ([`Grant::key`]).
type GrantKey = (bool, Rc<[usize]>);

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
    /// The container's text, compared in full when a request's tools array is taken for this
    /// catalog. A copy of its own: comparing with the parts' bytes, scattered over the heap,
    /// took two to three times as long in Envoy's V8 (52–77 µs against 22 µs for 600 KB). A
    /// request whose tools array matches it needs its own bytes neither checked as UTF-8 nor
    /// read again: the rewrite takes the kept tools from here.
    container: Box<str>,
    /// The last query and its ranking: every turn of an agent loop asks the same question of
    /// the same catalog.
    last: RefCell<Option<(String, Rc<[Scored]>)>>,
    /// The last question's hybrid ranking, once all vectors were known.
    last_fused: RefCell<Option<(String, Rc<Fused>)>>,
    /// Which entries the last grant's callers may see ([`Catalog::allowed_for`]), keyed by
    /// what its decisions depend on, never by who the caller is.
    last_allowed: RefCell<Option<(GrantKey, Rc<[bool]>)>>,
    /// The tools' missing vectors are being fetched in the background: requests ask only for
    /// their question's vectors meanwhile.
    fetching: Cell<bool>,
    /// Bytes of tool vectors set through this catalog, added to the cache's count.
    vector_bytes: Rc<Cell<usize>>,
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
            &Rc::default(),
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
        vector_bytes: &Rc<Cell<usize>>,
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
            vector_bytes,
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
        vector_bytes: &Rc<Cell<usize>>,
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
        let mut catalog = Catalog {
            reader,
            draft,
            index,
            lexicon,
            tokens,
            parts,
            container: container.into(),
            last: RefCell::new(None),
            last_fused: RefCell::new(None),
            last_allowed: RefCell::new(None),
            fetching: Cell::new(false),
            vector_bytes: Rc::clone(vector_bytes),
            heap_bytes: 0,
        };
        catalog.heap_bytes = catalog.estimate_heap_bytes();
        catalog
    }

    /// Whether `candidate` is this catalog's container, byte for byte, read by `reader`.
    fn is(&self, reader: Reader, candidate: &[u8]) -> bool {
        self.reader == reader && same_bytes(candidate, self.container.as_bytes())
    }

    /// The container this catalog was read from (for a dialect's catalog, byte for byte the
    /// tools array of every request it is found for).
    pub fn container(&self) -> &str {
        &self.container
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
            *last = Some((query.to_owned(), Rc::clone(&ranking)));
        }
        ranking
    }

    /// Per entry, whether `grant`'s caller may see it (built-ins: always; access rules
    /// govern function tools by name). Remembered for the last grant: every turn of an agent
    /// loop comes from the same caller, and callers whose applicable rules are the same
    /// share the answer.
    pub fn allowed_for(&self, grant: &Grant) -> Rc<[bool]> {
        let key = grant.key();
        if let Ok(last) = self.last_allowed.try_borrow() {
            if let Some((_, allowed)) = last.as_ref().filter(|(k, _)| *k == key) {
                return Rc::clone(allowed);
            }
        }
        let none = Annotations::default();
        let allowed: Rc<[bool]> = self
            .draft
            .entries
            .iter()
            .map(|entry| match entry {
                Entry::Function(tool) => grant.tool(&tool.name, &none).allowed(),
                Entry::Builtin => true,
            })
            .collect();
        if let Ok(mut last) = self.last_allowed.try_borrow_mut() {
            *last = Some((key, Rc::clone(&allowed)));
        }
        allowed
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
            self.vector_bytes.set(self.vector_bytes.get() + bytes);
        }
    }

    /// The size of the tool vectors already known, if any.
    pub fn known_dimensions(&self) -> Option<usize> {
        self.parts.iter().find_map(|p| p.vector()).map(<[f32]>::len)
    }

    pub fn function_count(&self) -> usize {
        self.index.documents.len()
    }

    pub fn name(&self, entry: usize) -> Option<&str> {
        match self.draft.entries.get(entry) {
            Some(Entry::Function(t)) => Some(&t.name),
            _ => None,
        }
    }

    /// What this catalog holds of its own, its parts excepted: the index, the layout, the
    /// container copy, and room for its remembered rankings.
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
            // The remembered keyword and hybrid rankings, and the last grant's mask.
            + 3 * size_of::<Scored>()
            + size_of::<bool>()
            + size_of::<crate::fusion::Votes>();
        // About twenty allocations of its own (the index's lists, the layout, the copy, the
        // remembered rankings).
        20 * ALLOCATION
            + size_of::<Catalog>()
            + self.index.heap_bytes()
            + self.lexicon.heap_bytes()
            + layout
            + self.container.len()
            + n * per_entry
            + 2 * crate::dialects::MAX_QUERY_BYTES
    }
}

/// Whether two byte ranges hold the same bytes. The `.wasm` compares 64 bytes a step as four
/// 128-bit vectors whose differences are OR-ed and tested once: the C library's `memcmp` that
/// a wasm32 build links compares one byte at a time (a 600 KB tools array took 0.6 ms in
/// Envoy's V8), and sixteen bytes a step as a `u128` took 6.4 µs for a 111 KB tools array in
/// node's V8 (optimising tier) against 3.0 µs for this. Natively, `memcmp`.
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
fn same_bytes(mut a: &[u8], mut b: &[u8]) -> bool {
    use core::arch::wasm32::{v128, v128_any_true, v128_or, v128_xor};
    if a.len() != b.len() {
        return false;
    }
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
    a == b
}

#[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    a == b
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

/// Each worker's catalogs and tool parts, least recently used evicted, bounded in count of
/// catalogs and in bytes (catalogs, held catalogs, parts and vectors together). Per worker:
/// proxy-wasm VMs are single-threaded, so no locking.
pub struct CatalogCache {
    max_catalogs: usize,
    max_bytes: usize,
    /// Most recently used last.
    catalogs: Vec<Rc<Catalog>>,
    catalogs_bytes: usize,
    /// Catalogs evicted while still held elsewhere (a search session, a request waiting for
    /// its embeddings, a background embeddings call), with their size: they count until
    /// released.
    held: Vec<(Weak<Catalog>, usize)>,
    /// Parts by the xxh3 hash of their dialect and bytes; a hit is confirmed byte for byte.
    parts: HashMap<u64, Rc<ToolParts>, BuildHasherDefault<Prehashed>>,
    parts_bytes: usize,
    /// Bytes of the vectors the parts hold, kept up to date by the catalogs that set them.
    vector_bytes: Rc<Cell<usize>>,
    clock: u64,
}

impl CatalogCache {
    /// A cache of at most `max_catalogs` catalogs and `max_bytes` bytes.
    pub fn new(max_catalogs: usize, max_bytes: usize) -> Self {
        CatalogCache {
            max_catalogs,
            max_bytes,
            catalogs: Vec::new(),
            catalogs_bytes: 0,
            held: Vec::new(),
            parts: HashMap::default(),
            parts_bytes: 0,
            vector_bytes: Rc::default(),
            clock: 0,
        }
    }

    /// The cached catalog whose container bytes begin `bytes`, if any, with their length. Each
    /// candidate of the right dialect and length is compared byte for byte.
    pub fn find_prefix(&mut self, dialect: Dialect, bytes: &[u8]) -> Option<(Rc<Catalog>, usize)> {
        let pos = self.catalogs.iter().rposition(|catalog| {
            bytes
                .get(..catalog.container.len())
                .is_some_and(|candidate| catalog.is(Reader::Dialect(dialect), candidate))
        })?;
        let hit = self.catalogs.remove(pos);
        let found = (Rc::clone(&hit), hit.container.len());
        self.catalogs.push(hit);
        Some(found)
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
        let vector_bytes = Rc::clone(&self.vector_bytes);
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
            &vector_bytes,
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
        let bytes = container.as_bytes();
        if let Some(pos) = self
            .catalogs
            .iter()
            .rposition(|c| c.is(Reader::Custom, bytes))
        {
            let hit = self.catalogs.remove(pos);
            self.catalogs.push(Rc::clone(&hit));
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
            &Rc::clone(&self.vector_bytes),
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
        let catalog = Rc::new(catalog);
        self.catalogs_bytes += catalog.heap_bytes;
        self.catalogs.push(Rc::clone(&catalog));
        self.trim();
        catalog
    }

    /// What the cache holds now.
    pub fn usage(&mut self) -> CacheUsage {
        self.held.retain(|(catalog, _)| catalog.strong_count() > 0);
        // The map's own table: a key, a pointer and a control byte per slot.
        let table = self.parts.capacity() * (size_of::<u64>() + size_of::<Rc<ToolParts>>() + 1);
        CacheUsage {
            catalogs: self.catalogs_bytes,
            held: self.held.iter().map(|(_, bytes)| bytes).sum(),
            parts: self.parts_bytes + table,
            vectors: self.vector_bytes.get(),
        }
    }

    /// Evicts until the cache is within its bounds: parts no catalog holds first (least
    /// recently used first), then the least recently used catalog, and so on. Evicting down to
    /// seven eighths of the bound leaves room, so this runs once per several new catalogs.
    pub fn trim(&mut self) {
        while self.catalogs.len() > self.max_catalogs {
            self.evict_catalog();
        }
        if self.usage().total() <= self.max_bytes {
            return;
        }
        let target = self.max_bytes - self.max_bytes / 8;
        loop {
            self.evict_free_parts(target);
            if self.usage().total() <= target || self.catalogs.is_empty() {
                return;
            }
            self.evict_catalog();
        }
    }

    fn evict_catalog(&mut self) {
        if self.catalogs.is_empty() {
            return;
        }
        let catalog = self.catalogs.remove(0);
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
        let mut free: Vec<(u64, u64)> = self
            .parts
            .iter()
            .filter(|(_, p)| Rc::strong_count(p) == 1)
            .map(|(key, p)| (p.last_used.get(), *key))
            .collect();
        free.sort_unstable();
        let mut usage = self.usage().total();
        for (_, key) in free {
            if usage <= target {
                break;
            }
            if let Some(parts) = self.parts.remove(&key) {
                let bytes = parts.heap_bytes();
                let vector = parts.vector_bytes();
                self.parts_bytes -= bytes;
                self.vector_bytes
                    .set(self.vector_bytes.get().saturating_sub(vector));
                usage = usage.saturating_sub(bytes + vector);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.catalogs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.catalogs.is_empty()
    }

    /// Distinct tool definitions whose parts are kept.
    pub fn parts_len(&self) -> usize {
        self.parts.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bm25::{EmbedderBuilder, Tokenizer};

    fn function(name: &str, description: &str, params: &[&str]) -> Entry {
        Entry::Function(
            ToolText {
                name: name.into(),
                description: description.into(),
                params: params.iter().map(|p| p.to_string()).collect(),
                keys: Vec::new(),
            }
            .into(),
        )
    }

    /// The tokenizer the crate's embedder sees in these tests: documents are already
    /// normalised and joined with spaces.
    #[derive(Default, Clone, Copy)]
    struct Normalised;

    impl Tokenizer for Normalised {
        fn tokenize(&self, input_text: &str) -> Vec<String> {
            input_text
                .split(' ')
                .filter(|t| !t.is_empty())
                .map(str::to_owned)
                .collect()
        }
    }

    /// A tool's document as BM25F-by-repetition reads it: each field's terms repeated by its
    /// weight (how the index was built before tools were read into parts).
    fn document_terms(text: &ToolText, weights: FieldWeights) -> Vec<String> {
        let mut out = Vec::new();
        let mut add = |field: &str, times: usize| {
            let terms = crate::text::terms(field);
            for _ in 0..times {
                out.extend(terms.iter().cloned());
            }
        };
        add(&text.name, weights.name);
        add(&text.description, weights.description);
        for p in &text.params {
            add(p, weights.params);
        }
        out
    }

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
    fn name_matches_outrank_parameter_matches() {
        let entries = vec![
            function(
                "create_calendar_event",
                "Adds an event",
                &["title", "attendees"],
            ),
            function(
                "send_email",
                "Sends an email",
                &["to", "subject", "calendar"],
            ),
            Entry::Builtin,
            function("get_weather", "Current weather for a city", &["city"]),
        ];
        let index = Index::build(&entries, FieldWeights::default());
        let ranked = index.rank("put a meeting on my calendar");
        assert_eq!(ranked[0].entry, 0);
        assert_eq!(ranked[1].entry, 1);
        assert_eq!(
            ranked[2],
            Scored {
                entry: 3,
                score: 0.0
            }
        );
        assert_eq!(ranked.len(), 3, "built-ins are not ranked");
    }

    #[test]
    fn scores_match_the_crates_scorer() {
        let names = [
            "send_slack_message",
            "list_slack_channels",
            "get_weather",
            "send_email",
        ];
        let entries: Vec<Entry> = names
            .iter()
            .map(|n| {
                function(
                    n,
                    &format!("{n} tool that sends and lists messages"),
                    &["channel", "text", "Sends the text to the channel"],
                )
            })
            .collect();
        let weights = FieldWeights::default();
        let index = Index::build(&entries, weights);
        let texts: Vec<&ToolText> = entries
            .iter()
            .map(|e| match e {
                Entry::Function(t) => &**t,
                Entry::Builtin => unreachable!(),
            })
            .collect();
        let docs: Vec<String> = texts
            .iter()
            .map(|t| document_terms(t, weights).join(" "))
            .collect();
        let avgdl =
            docs.iter().map(|d| d.split(' ').count()).sum::<usize>() as f32 / docs.len() as f32;
        let embedder = EmbedderBuilder::<u32, Normalised>::with_avgdl(avgdl)
            .k1(K1)
            .b(B)
            .build();
        let mut scorer = bm25::Scorer::<u32>::new();
        for (doc, text) in (0u32..).zip(&docs) {
            let embedding = embedder.embed(text);
            // Every posting weight is the crate's own, to the bit.
            for t in &embedding.0 {
                let (_, postings) = index.postings_of(t.index).unwrap();
                let &(_, ours) = postings.iter().find(|(d, _)| *d == doc).unwrap();
                assert_eq!(ours.to_bits(), t.value.to_bits(), "doc {doc}");
            }
            scorer.upsert(&doc, embedding);
        }
        for query in [
            "send a slack message to the channel",
            "weather weather email",
            "nothing",
        ] {
            let ours = index.rank(query);
            // Ours counts each distinct query term once; give the crate's scorer the same.
            let mut q = embedder.embed(&crate::text::terms(query).join(" "));
            let mut seen = HashSet::new();
            q.0.retain(|t| seen.insert(t.index));
            for s in ours {
                let theirs = scorer.score(&(s.entry as u32), &q).unwrap();
                assert!(
                    (s.score - theirs).abs() <= 1e-5 * theirs.abs().max(1.0),
                    "{query}: {s:?} vs {theirs}"
                );
            }
        }
    }

    #[test]
    fn postings_sort_by_term_keeping_document_order() {
        for n in [10usize, 5000] {
            let mut triples: Vec<(u32, u32, f32)> = (0..n as u32)
                .map(|i| (i.wrapping_mul(2_654_435_761) % 977 * 65_599, i, i as f32))
                .collect();
            let mut expected = triples.clone();
            expected.sort_by_key(|&(term, doc, _)| (term, doc));
            sort_by_term(&mut triples);
            assert_eq!(triples, expected, "{n}");
        }
    }

    #[test]
    fn ties_keep_catalog_order() {
        let entries = vec![function("a_tool", "", &[]), function("b_tool", "", &[])];
        let index = Index::build(&entries, FieldWeights::default());
        let ranked: Vec<usize> = index
            .rank("nothing matches")
            .iter()
            .map(|s| s.entry)
            .collect();
        assert_eq!(ranked, [0, 1]);
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
