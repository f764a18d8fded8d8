//! BM25 over each function tool's name, description and parameters.
//!
//! What a tool contributes to an index (its terms per field, its lexical facts, its estimated
//! tokens, later its vector) is read once per distinct tool definition ([`ToolParts`]), and an
//! index is assembled from its tools' parts (document frequencies and lengths summed), so a
//! tools array of known tools is never tokenised again. Catalogs and their cache are
//! [`crate::rank`]'s; hybrid ranking's channels, [`crate::fusion`]'s, over the lexical facts
//! read here.

use crate::dialects::{Dialect, Entry, Item, Problem, Reader, ToolText};
use bm25::TokenEmbedder;
use std::cell::{Cell, OnceCell};
use std::collections::HashSet;
use std::mem::size_of;

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

/// Separates the user turns of a query that holds several, the weightiest first (see
/// [`crate::followup`]): ASCII's record separator, which no user text keeps (each turn has it
/// replaced by a space before the turns are joined).
pub const TURN_MARK: char = '\u{1e}';

/// Each turn of a query of several weighs this much of the turn before it in the query.
pub const TURN_DECAY: f32 = 0.5;

/// Starts the part of a query that only orders what the turns before it leave equal (ASCII's
/// unit separator, which no user text keeps either): a text ranked on its own, with the
/// question before it after this mark, keeps the ranking of its own words and has the
/// question order the tools its words do not reach ([`crate::followup`]).
pub const TIE_MARK: char = '\u{1f}';

/// The weight of the terms after [`TIE_MARK`]: small enough that no sum of them (a question's
/// scores stay far below 100) reaches the weight of one matched term of the turns before it
/// (at least about 0.05 for a term in most of a catalog's tools).
pub const TIE_WEIGHT: f32 = 1e-5;

/// The user turns of a query and the weight of each: the first (the text before the first
/// [`TURN_MARK`]) 1, each next one [`TURN_DECAY`] of the one before it; the text after a
/// [`TIE_MARK`], if any, [`TIE_WEIGHT`]. A query without a mark is one turn of weight 1.
pub fn turn_weights(query: &str) -> impl Iterator<Item = (&str, f32)> {
    let (turns, ties) = match query.split_once(TIE_MARK) {
        Some((turns, ties)) => (turns, Some(ties)),
        None => (query, None),
    };
    turns
        .split(TURN_MARK)
        .scan(1.0f32, |weight, turn| {
            let this = *weight;
            *weight *= TURN_DECAY;
            Some((turn, this))
        })
        .chain(ties.map(|t| (t, TIE_WEIGHT)))
}

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
    pub(crate) reader: Option<Reader>,
    /// The definition's exact bytes: a catalog that reuses these parts is checked against
    /// them byte for byte, so no hash collision can pass one tool off as another.
    pub(crate) text: Box<str>,
    pub entry: Entry,
    /// Sorted by term id.
    terms: Box<[TermCount]>,
    /// Terms in the name, the description and the parameters.
    lengths: [u32; 3],
    lexical: LexicalTool,
    /// The tool's unit vector under this worker's embeddings settings, once known.
    pub(crate) vector: OnceCell<Box<[f32]>>,
    /// When a catalog last took these parts: the least recently used go first.
    pub(crate) last_used: Cell<u64>,
}

impl ToolParts {
    /// Reads one entry of a `dialect` container and tokenises its text.
    pub fn read(dialect: Dialect, item: &Item) -> Result<ToolParts, Problem> {
        let entry = dialect.read_item(item)?;
        Ok(Self::of(Some(Reader::Dialect(dialect)), item.text, entry))
    }

    /// The parts of a tool a custom request shape read from `text`.
    pub(crate) fn of_custom(text: &str, entry: Entry) -> ToolParts {
        ToolParts::of(Some(Reader::Custom), text, entry)
    }

    /// The parts of an entry already read, without its bytes (tests, and indexes built from
    /// entries).
    pub fn of_entry(entry: Entry) -> ToolParts {
        ToolParts::of(None, "", entry)
    }

    fn of(reader: Option<Reader>, text: &str, entry: Entry) -> ToolParts {
        let (terms, lengths, lexical) = match &entry {
            Entry::Function(t) => read_terms(t),
            Entry::Builtin => Default::default(),
        };
        ToolParts {
            reader,
            text: text.into(),
            entry,
            terms,
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
    pub(crate) fn heap_bytes(&self) -> usize {
        // Each string and shared box is an allocation of its own (an empty string is none).
        let s = |x: &String| match x.capacity() {
            0 => 0,
            bytes => ALLOCATION + bytes,
        };
        let strings = match &self.entry {
            Entry::Function(t) => {
                ALLOCATION
                    + size_of::<ToolText>()
                    + s(&t.name)
                    + s(&t.description)
                    + s(&t.params)
                    + s(&t.keys)
            }
            Entry::Builtin => 0,
        };
        // The shared box (the parts behind the `Rc`'s two counters), the text, the terms and
        // the lexical facts.
        4 * ALLOCATION
            + RC_COUNTERS
            + size_of::<ToolParts>()
            + self.text.len()
            + strings
            + self.terms.len() * size_of::<TermCount>()
            + self.lexical.heap_bytes()
    }

    /// Bytes of its vector, once known, with the allocation's own.
    pub(crate) fn vector_bytes(&self) -> usize {
        self.vector()
            .map_or(0, |v| ALLOCATION + std::mem::size_of_val(v))
    }
}

/// What reading a tool's terms reuses from one tool to the next, so that a never-seen tool
/// costs no allocation but the ones its parts keep.
#[derive(Default)]
struct TermScratch {
    /// The tool's term ids in text order: name, description, parameters, parameter names.
    ids: Vec<u32>,
    /// An open-addressing table of the tool's distinct terms: slot → 1 + their place in
    /// `counts` (0: empty).
    slots: Vec<u32>,
    /// The distinct terms, in order of first occurrence, with their count per field.
    counts: Vec<TermCount>,
}

thread_local! {
    // One per thread: a proxy-wasm VM runs one thread, the CLI and the tests read on theirs.
    static SCRATCH: std::cell::RefCell<TermScratch> = std::cell::RefCell::default();
}

/// A function tool's distinct terms with their count per field, its terms in the name, the
/// description and the parameters, and its lexical facts.
///
/// Every term is hashed where the tokeniser lends it and goes into one list of ids in text
/// order (the name's and the description's runs are the lexical sequences); distinct terms are
/// counted in a small hash table. Both are scratch kept from tool to tool: only what the parts
/// keep is allocated, each at its final size. Until 2026-11-25 the list was sorted to count
/// it, a list per tool: with the allocations, a third of reading a never-seen tool.
fn read_terms(t: &ToolText) -> (Box<[TermCount]>, [u32; 3], LexicalTool) {
    SCRATCH.with(|scratch| match scratch.try_borrow_mut() {
        Ok(mut scratch) => {
            let read = scratch.read(t);
            // A tool of outsized text leaves its scratch to the allocator, not to the worker
            // for good: the cache can use the room.
            if scratch.ids.capacity() > KEPT_SCRATCH_TERMS {
                *scratch = TermScratch::default();
            }
            read
        }
        // Only a re-entrant call could find it borrowed, and none is made; fresh scratch
        // gives the same answer.
        Err(_) => TermScratch::default().read(t),
    })
}

/// The most terms a tool's scratch is kept for (about 200 KB of ids, table and counts); real
/// tools have tens to a few hundred.
const KEPT_SCRATCH_TERMS: usize = 8192;

impl TermScratch {
    fn read(&mut self, t: &ToolText) -> (Box<[TermCount]>, [u32; 3], LexicalTool) {
        let ids = &mut self.ids;
        ids.clear();
        // Bigrams of unspaced scripts, per field: not counted in its length (below).
        let mut pairs = [0usize; 4];
        let mut field = 0;
        let mut add = |text: &str| {
            crate::text::for_each_term(text, |term| {
                ids.push(term_id(term));
                if crate::text::is_unspaced_pair(term) {
                    if let Some(n) = pairs.get_mut(field) {
                        *n += 1;
                    }
                }
            });
            field += 1;
            ids.len()
        };
        let name_end = add(&t.name);
        let description_end = add(&t.description);
        let params_end = add(&t.params);
        let keys_end = add(&t.keys);
        let fields = [
            0..name_end,
            name_end..description_end,
            description_end..params_end,
        ];
        let terms = self.count(&fields);
        let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        // A field's length counts its words and characters, not the bigrams beside them: a
        // text in Han or kana is as long as it was before bigrams were read, so the catalog's
        // average length, and every Latin question's scores, are what they were.
        let mut field_pairs = pairs.into_iter();
        let lengths =
            fields.map(|range| count(range.len().saturating_sub(field_pairs.next().unwrap_or(0))));
        // The lexical facts in one list: the name's run, the description's, and the terms of
        // the parameter names, sorted and distinct.
        let keys = self.ids.get_mut(params_end..keys_end).unwrap_or_default();
        keys.sort_unstable();
        let distinct_keys = keys
            .iter()
            .zip(keys.iter().skip(1))
            .filter(|(a, b)| a != b)
            .count()
            + usize::from(!keys.is_empty());
        let mut lexical = Vec::with_capacity(description_end + distinct_keys);
        lexical.extend_from_slice(self.ids.get(..description_end).unwrap_or_default());
        for &key in self.ids.get(params_end..keys_end).unwrap_or_default() {
            if lexical.len() == description_end || lexical.last() != Some(&key) {
                lexical.push(key);
            }
        }
        let lexical = LexicalTool {
            ids: lexical.into_boxed_slice(),
            name_end: count(name_end),
            description_end: count(description_end),
        };
        (terms, lengths, lexical)
    }

    /// The distinct terms of `ids` over the name's, the description's and the parameters'
    /// ranges, with their count in each.
    fn count(&mut self, fields: &[std::ops::Range<usize>; 3]) -> Box<[TermCount]> {
        let terms = fields[2].end;
        // At most half full: a probe rarely passes its first slot.
        let bits = (2 * terms).max(16).next_power_of_two().trailing_zeros();
        let size = 1usize << bits;
        if self.slots.len() < size {
            self.slots.resize(size, 0);
        }
        let slots = self.slots.get_mut(..size).unwrap_or_default();
        slots.fill(0);
        let counts = &mut self.counts;
        counts.clear();
        for (field, range) in fields.iter().enumerate() {
            for &id in self.ids.get(range.clone()).unwrap_or_default() {
                // Ids are hashes already: the top bits of a multiplication spread them.
                let mut slot = (id.wrapping_mul(0x9E37_79B1) >> (32 - bits)) as usize;
                while let Some(entry) = slots.get_mut(slot) {
                    if *entry == 0 {
                        let mut term = TermCount { id, fields: [0; 3] };
                        if let Some(n) = term.fields.get_mut(field) {
                            *n = 1;
                        }
                        counts.push(term);
                        *entry = u32::try_from(counts.len()).unwrap_or(u32::MAX);
                        break;
                    }
                    let place = *entry as usize - 1;
                    if let Some(term) = counts.get_mut(place).filter(|term| term.id == id) {
                        if let Some(n) = term.fields.get_mut(field) {
                            *n = n.saturating_add(1);
                        }
                        break;
                    }
                    slot = (slot + 1) & (size - 1);
                }
            }
        }
        counts.as_slice().into()
    }
}

/// What the allocator adds to each allocation, about: dlmalloc's header and its rounding to 8
/// bytes. The cache counts it so that what it holds, estimated, stays near what Envoy's memory
/// shows (without it, 64 MiB of estimated parts took a fifth more).
pub(crate) const ALLOCATION: usize = 16;

/// What an `Rc` allocation holds besides its value: the strong and the weak count.
pub(crate) const RC_COUNTERS: usize = 2 * size_of::<usize>();

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
    pub(crate) fn assemble(docs: &[(usize, &ToolParts)], weights: FieldWeights) -> Index {
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
        Index {
            terms,
            starts,
            postings,
            documents: docs.iter().map(|(entry, _)| *entry).collect(),
        }
    }

    /// A term's IDF and postings, if any document has it. The IDF is computed here, from the
    /// postings' count, rather than kept per term: the same `f32`, for a query's few terms,
    /// and a catalog of hundreds of tools keeps thousands of terms.
    fn postings_of(&self, term: u32) -> Option<(f32, &[(u32, f32)])> {
        let i = self.terms.binary_search(&term).ok()?;
        let (start, end) = (*self.starts.get(i)?, *self.starts.get(i + 1)?);
        let (n, df) = (self.documents.len() as f32, (end - start) as f32);
        Some((
            (1.0 + (n - df + 0.5) / (df + 0.5)).ln(),
            self.postings.get(start as usize..end as usize)?,
        ))
    }

    /// Whether any tool has a term of `text`: whether any tool would score for it.
    pub fn matches(&self, text: &str) -> bool {
        let mut any = false;
        crate::text::for_each_term(text, |term| {
            any = any || self.terms.binary_search(&term_id(term)).is_ok();
        });
        any
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

    /// Every function tool, best first; equal scores keep catalog order. A query of several
    /// user turns ([`TURN_MARK`]) weighs each turn's terms by [`turn_weights`].
    pub fn rank(&self, query: &str) -> Vec<Scored> {
        let mut scores = vec![0f32; self.documents.len()];
        // Each distinct query term counts once. The crate's scorer counts repeats, but a word a
        // user repeats ("weather … weather") is no more a sign of the tool than said once, and
        // counting it twice lets one word outvote the rest of the request: deduplicating lifted
        // seal_tools Recall@5 by five points (`docs/tuning-notes.md`). Turns come weightiest
        // first, so a term counts at the greatest weight of the turns that have it.
        let mut seen = HashSet::new();
        for (turn, turn_weight) in turn_weights(query) {
            crate::text::for_each_term(turn, |term| {
                let id = term_id(term);
                if !seen.insert(id) {
                    return;
                }
                let Some((idf, docs_with_term)) = self.postings_of(id) else {
                    return;
                };
                for &(doc, weight) in docs_with_term {
                    if let Some(s) = scores.get_mut(doc as usize) {
                        // × 1.0 for a query of one turn: the same bits as without weights.
                        *s += idf * weight * turn_weight;
                    }
                }
            });
        }
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

    pub(crate) fn heap_bytes(&self) -> usize {
        self.terms.capacity() * size_of::<u32>()
            + self.starts.capacity() * size_of::<u32>()
            + self.postings.capacity() * size_of::<(u32, f32)>()
            + self.documents.capacity() * size_of::<usize>()
    }
}

/// Sorts postings by term, stably (documents stay in the order they were pushed): a radix
/// sort on the term's 11-bit digits, three passes over the postings with 2,048 counters
/// each, where a comparison sort of a 1,000-tool catalog's 40,000 postings was a third of
/// assembling it (and 16-bit digits spent more on their 65,536 counters than on a 200-tool
/// catalog's 6,000 postings). The three digits are counted in one pass.
fn sort_by_term(triples: &mut Vec<(u32, u32, f32)>) {
    const BITS: u32 = 11;
    const DIGITS: usize = 1 << BITS;
    if triples.len() < 256 {
        triples.sort_by_key(|&(term, _, _)| term);
        return;
    }
    let digit = |term: u32, pass: u32| (term >> (pass * BITS)) as usize & (DIGITS - 1);
    let mut starts = vec![[0u32; 3]; DIGITS];
    for &(term, _, _) in triples.iter() {
        for pass in 0..3 {
            if let Some(count) = starts
                .get_mut(digit(term, pass))
                .and_then(|c| c.get_mut(pass as usize))
            {
                *count += 1;
            }
        }
    }
    let mut at = [0u32; 3];
    for slot in starts.iter_mut() {
        for (start, at) in slot.iter_mut().zip(at.iter_mut()) {
            let count = *start;
            *start = *at;
            *at += count;
        }
    }
    let mut scratch = vec![(0u32, 0u32, 0f32); triples.len()];
    for pass in 0..3 {
        for t in triples.iter() {
            let Some(next) = starts
                .get_mut(digit(t.0, pass))
                .and_then(|c| c.get_mut(pass as usize))
            else {
                continue;
            };
            if let Some(place) = scratch.get_mut(*next as usize) {
                *place = *t;
            }
            *next += 1;
        }
        std::mem::swap(triples, &mut scratch);
    }
}

/// One tool's lexical facts, as term ids, read with its parts: in one list, the name's terms
/// in order, the description's in order, and the terms of the parameter names, sorted and
/// distinct.
#[derive(Debug, Default)]
pub(crate) struct LexicalTool {
    ids: Box<[u32]>,
    name_end: u32,
    description_end: u32,
}

impl LexicalTool {
    /// Name terms in order, for word and phrase matches.
    pub(crate) fn name(&self) -> &[u32] {
        self.ids.get(..self.name_end as usize).unwrap_or_default()
    }

    /// Description terms in order.
    pub(crate) fn description(&self) -> &[u32] {
        let range = self.name_end as usize..self.description_end as usize;
        self.ids.get(range).unwrap_or_default()
    }

    /// Terms of the parameter names, sorted and distinct.
    pub(crate) fn keys(&self) -> &[u32] {
        self.ids
            .get(self.description_end as usize..)
            .unwrap_or_default()
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.ids.len() * std::mem::size_of::<u32>()
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
                params: params.join(", "),
                keys: String::new(),
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
        add(&text.params, weights.params);
        out
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
    fn a_tool_of_outsized_text_is_counted_and_its_scratch_not_kept() {
        let description: String = (0..20_000).map(|i| format!("word{} ", i % 5000)).collect();
        let parts = ToolParts::of_entry(function("big_tool", &description, &["limit"]));
        // "word" and each number are terms of their own: 5,000 numbers, "word", "big",
        // "tool", "limit".
        assert_eq!(parts.terms.len(), 5004);
        let word = parts
            .terms
            .iter()
            .find(|t| t.id == term_id("word"))
            .unwrap();
        assert_eq!(word.fields, [0, 20_000, 0]);
        assert_eq!(parts.lengths, [2, 40_000, 1]);
        SCRATCH.with(|s| assert!(s.borrow().ids.capacity() <= KEPT_SCRATCH_TERMS));
        // A tool read next counts the same as ever.
        let small = ToolParts::of_entry(function("get_weather", "current weather", &["city"]));
        assert_eq!(small.lengths, [2, 2, 1]);
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
}
