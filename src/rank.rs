//! Ranking: BM25 over each function tool's name, description and parameters, with an index
//! built once per distinct tools array and kept in a small LRU cache, so the agent that sends
//! the same catalog every turn pays for indexing once.

use crate::dialect::{CatalogDraft, Dialect, Entry, Problem, ToolText};
use crate::fusion::{Fused, Lexicon};
use bm25::{EmbedderBuilder, TokenEmbedder, Tokenizer};
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

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

/// BM25 term-frequency saturation. Higher than the textbook 1.2 because field weights work by
/// repetition: a name word already occurs four times, and with k1 = 1.2 it would saturate
/// before a second name word or a description match could add much. 3.0 beat 1.2, 1.5 and 2.0
/// on seal_tools and toolbench and cost livemcpbench nothing measurable.
const K1: f32 = 3.0;
/// BM25 length normalisation. Tools with long parameter lists match many query words by
/// chance; normalising harder (0.9 rather than 0.75) keeps them from crowding out short,
/// precise tools, and helped on all three datasets.
const B: f32 = 0.9;

/// The tokenizer the `bm25` crate's embedder sees: documents reach it already normalised by
/// [`crate::text`] and joined with spaces, so splitting at spaces gives back exactly those terms
/// (tokenising a weighted document twice was most of the cost of building an index).
#[derive(Default, Clone, Copy)]
pub struct Normalised;

impl Tokenizer for Normalised {
    fn tokenize(&self, input_text: &str) -> Vec<String> {
        input_text
            .split(' ')
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect()
    }
}

/// A term's id in the index: the same hash the crate's embedder gives it.
pub(crate) fn term_id(term: &str) -> u32 {
    <u32 as TokenEmbedder>::embed(term)
}

/// A BM25 index over the function tools of one catalog.
///
/// The `bm25` crate's `Embedder` gives each document term its BM25 weight (term-frequency
/// saturation and length normalisation). Scoring uses the crate's formula, Σ over distinct query
/// terms of IDF × weight with IDF = ln(1 + (N − n + 0.5) / (n + 0.5)), but over postings lists
/// with the IDF computed once: the crate's `Scorer` recomputes IDF per document and searches each
/// document's terms linearly, which costs milliseconds per query on catalogs of thousands.
/// `scores_match_the_crates_scorer` checks the two agree.
pub struct Index {
    /// Per term: its IDF and the (document, BM25 term weight) pairs that contain it.
    postings: HashMap<u32, (f32, Vec<(u32, f32)>)>,
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
    pub fn build(entries: &[Entry], weights: FieldWeights) -> Index {
        let mut docs = Vec::new();
        let mut documents = Vec::new();
        for (i, entry) in entries.iter().enumerate() {
            if let Entry::Function(text) = entry {
                docs.push(document_terms(text, weights));
                documents.push(i);
            }
        }
        let total: usize = docs.iter().map(Vec::len).sum();
        let avgdl = if docs.is_empty() {
            1.0
        } else {
            total as f32 / docs.len() as f32
        };
        let embedder = EmbedderBuilder::<u32, Normalised>::with_avgdl(avgdl.max(1.0))
            .k1(K1)
            .b(B)
            .build();
        let mut postings: HashMap<u32, (f32, Vec<(u32, f32)>)> = HashMap::new();
        for (doc, terms) in (0u32..).zip(&docs) {
            let mut embedding = embedder.embed(&terms.join(" "));
            // The embedding has one entry per occurrence, all with the same weight.
            let mut seen = HashSet::new();
            embedding.0.retain(|t| seen.insert(t.index));
            for term in embedding.0 {
                postings
                    .entry(term.index)
                    .or_default()
                    .1
                    .push((doc, term.value));
            }
        }
        let n = docs.len() as f32;
        for (idf, docs_with_term) in postings.values_mut() {
            let df = docs_with_term.len() as f32;
            *idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
        }
        Index {
            postings,
            documents,
        }
    }

    /// The IDF of a term, if any document has it.
    pub fn idf(&self, term: u32) -> Option<f32> {
        self.postings.get(&term).map(|(idf, _)| *idf)
    }

    /// The documents (positions in [`Index::documents`]) that contain a term.
    pub fn documents_with(&self, term: u32) -> impl Iterator<Item = usize> + '_ {
        self.postings
            .get(&term)
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
        for term in crate::text::terms(query) {
            let id = term_id(&term);
            if !seen.insert(id) {
                continue;
            }
            let Some((idf, docs_with_term)) = self.postings.get(&id) else {
                continue;
            };
            for &(doc, weight) in docs_with_term {
                if let Some(s) = scores.get_mut(doc as usize) {
                    *s += idf * weight;
                }
            }
        }
        let mut ranked: Vec<Scored> = self
            .documents
            .iter()
            .zip(scores)
            .map(|(&entry, score)| Scored { entry, score })
            .collect();
        // Stable sort: ties stay in catalog order.
        ranked.sort_by(|a, b| b.score.total_cmp(&a.score));
        ranked
    }
}

fn document_terms(text: &ToolText, weights: FieldWeights) -> Vec<String> {
    let mut out = Vec::new();
    let mut add = |field: &str, times: usize| {
        if times == 0 {
            return;
        }
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

/// A tools container, read and indexed: everything selection and rewriting need that depends
/// only on the container's bytes.
pub struct Catalog {
    pub draft: CatalogDraft,
    pub index: Index,
    /// What the lexical channels of hybrid ranking read.
    pub lexicon: Lexicon,
    /// Estimated tokens of each entry: bytes / 4, rounded up.
    pub tokens: Vec<usize>,
    /// The last query and its ranking: every turn of an agent loop asks the same question of
    /// the same catalog.
    last: RefCell<Option<(String, Rc<[Scored]>)>>,
    /// The container's first and last bytes, to rule out cache candidates before hashing.
    edges: (Vec<u8>, Vec<u8>),
    /// Every function tool's embedding, once all are known (hybrid ranking): later requests
    /// with this catalog need no cache lookups for them.
    vectors: RefCell<Option<ToolVectors>>,
    /// The last question's hybrid ranking, once all vectors were known.
    last_fused: RefCell<Option<(String, Rc<Fused>)>>,
    /// The tools' missing vectors are being fetched in the background: requests ask only for
    /// their question's vectors meanwhile.
    fetching: std::cell::Cell<bool>,
}

/// Unit vectors of a catalog's entries (`None` for built-ins).
pub type ToolVectors = Rc<Vec<Option<Vec<f32>>>>;

impl Catalog {
    pub fn build(
        dialect: Dialect,
        container: &str,
        weights: FieldWeights,
    ) -> Result<Catalog, Problem> {
        let draft = dialect.catalog(container)?;
        let index = Index::build(&draft.entries, weights);
        let lexicon = Lexicon::build(draft.entries.iter().filter_map(|e| match e {
            Entry::Function(t) => Some(t),
            Entry::Builtin => None,
        }));
        let tokens = draft
            .sizes
            .iter()
            .map(|&bytes| estimate_tokens(bytes))
            .collect();
        let bytes = container.as_bytes();
        let edge = |range: std::ops::Range<usize>| bytes.get(range).unwrap_or_default().to_vec();
        let edges = (
            edge(0..bytes.len().min(32)),
            edge(bytes.len().saturating_sub(32)..bytes.len()),
        );
        Ok(Catalog {
            draft,
            index,
            lexicon,
            tokens,
            last: RefCell::new(None),
            edges,
            vectors: RefCell::new(None),
            last_fused: RefCell::new(None),
            fetching: std::cell::Cell::new(false),
        })
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

    /// This worker's vectors of the tools (`None` for those not fetched yet).
    pub fn vectors(&self) -> Option<ToolVectors> {
        self.vectors.try_borrow().ok()?.as_ref().map(Rc::clone)
    }

    pub fn remember_vectors(&self, vectors: ToolVectors) {
        if let Ok(mut v) = self.vectors.try_borrow_mut() {
            *v = Some(vectors);
        }
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
}

/// The cheap token estimate used in the filter's stats: characters / 4.
pub fn estimate_tokens(bytes: usize) -> usize {
    bytes.div_ceil(4)
}

/// A least-recently-used cache of catalogs keyed by dialect and a 128-bit hash of the container
/// bytes. Per worker: proxy-wasm VMs are single-threaded, so no locking.
pub struct CatalogCache {
    capacity: usize,
    /// Most recently used last.
    entries: Vec<(CacheKey, Rc<Catalog>)>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct CacheKey {
    dialect: Dialect,
    hash: u128,
    len: usize,
}

impl CatalogCache {
    pub fn new(capacity: usize) -> Self {
        CatalogCache {
            capacity,
            entries: Vec::new(),
        }
    }

    /// The cached catalog whose container bytes begin `text`, if any, with their length. The
    /// candidates' first and last bytes are compared before any hashing.
    pub fn find_prefix(&mut self, dialect: Dialect, text: &str) -> Option<(Rc<Catalog>, usize)> {
        let bytes = text.as_bytes();
        let pos = self.entries.iter().rposition(|(key, catalog)| {
            key.dialect == dialect
                && bytes.get(..key.len).is_some_and(|candidate| {
                    candidate.starts_with(&catalog.edges.0)
                        && candidate.ends_with(&catalog.edges.1)
                        && xxhash_rust::xxh3::xxh3_128(candidate) == key.hash
                })
        })?;
        let hit = self.entries.remove(pos);
        let found = (Rc::clone(&hit.1), hit.0.len);
        self.entries.push(hit);
        Some(found)
    }

    /// The catalog of `container`, from the cache or built (and cached) now. The flag says
    /// whether it was a cache hit.
    pub fn get_or_build(
        &mut self,
        dialect: Dialect,
        container: &str,
        weights: FieldWeights,
    ) -> Result<(Rc<Catalog>, bool), Problem> {
        let key = CacheKey {
            dialect,
            hash: xxhash_rust::xxh3::xxh3_128(container.as_bytes()),
            len: container.len(),
        };
        if let Some(pos) = self.entries.iter().position(|(k, _)| *k == key) {
            let hit = self.entries.remove(pos);
            let catalog = Rc::clone(&hit.1);
            self.entries.push(hit);
            return Ok((catalog, true));
        }
        let catalog = Rc::new(Catalog::build(dialect, container, weights)?);
        if self.capacity > 0 {
            if self.entries.len() >= self.capacity {
                self.entries.remove(0);
            }
            self.entries.push((key, Rc::clone(&catalog)));
        }
        Ok((catalog, false))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn function(name: &str, description: &str, params: &[&str]) -> Entry {
        Entry::Function(ToolText {
            name: name.into(),
            description: description.into(),
            params: params.iter().map(|p| p.to_string()).collect(),
            keys: Vec::new(),
        })
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
                    &format!("{n} tool that sends and lists"),
                    &["channel", "text"],
                )
            })
            .collect();
        let index = Index::build(&entries, FieldWeights::default());
        let docs: Vec<String> = entries
            .iter()
            .map(|e| match e {
                Entry::Function(t) => document_terms(t, FieldWeights::default()).join(" "),
                Entry::Builtin => unreachable!(),
            })
            .collect();
        let avgdl =
            docs.iter().map(|d| d.split(' ').count()).sum::<usize>() as f32 / docs.len() as f32;
        let embedder = EmbedderBuilder::<u32, Normalised>::with_avgdl(avgdl)
            .k1(K1)
            .b(B)
            .build();
        let mut scorer = bm25::Scorer::<u32>::new();
        for (doc, entry) in (0u32..).zip(&entries) {
            let Entry::Function(t) = entry else {
                unreachable!()
            };
            let text = document_terms(t, FieldWeights::default()).join(" ");
            scorer.upsert(&doc, embedder.embed(&text));
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
    fn cache_hits_and_evicts_least_recent() {
        let mut cache = CatalogCache::new(2);
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
        let body_tail = format!("{a}, \"max_tokens\": 5}}");
        assert_eq!(
            cache
                .find_prefix(Dialect::Anthropic, &body_tail)
                .map(|(_, len)| len),
            Some(a.len())
        );
        assert!(cache.find_prefix(Dialect::Gemini, &body_tail).is_none());
        assert!(
            cache
                .find_prefix(Dialect::Anthropic, r#"[{"name":"d"}]"#)
                .is_none()
        );
    }
}
