//! Hybrid ranking: several channels rank the catalog for one query, each by its own evidence,
//! and weighted Reciprocal Rank Fusion merges them.
//!
//! Channels:
//! - `bm25`: the keyword ranking over name, description and parameters ([`crate::index::Index`]);
//! - `exact`: query words found as whole words in the name or the description, and query
//!   phrases (two consecutive words) found there in the same order;
//! - `param_keys`: query words that are a parameter's name ("city", "channel");
//! - `vector`: cosine of the query's embedding and the tool's.
//!
//! A channel votes only for the tools it has evidence for; a tool's fused score is
//! Σ weight / (k + rank) over the channels that voted for it. Each tool's votes are kept, so a
//! kept tool can say which channels put it there.

use crate::index::{Index, LexicalTool, Scored, ToolParts, term_id};
use std::collections::HashSet;
use std::rc::Rc;

/// The ranking channels, in the order of [`Votes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Channel {
    Bm25,
    Exact,
    ParamKeys,
    Vector,
}

impl Channel {
    pub const ALL: [Channel; 4] = [
        Channel::Bm25,
        Channel::Exact,
        Channel::ParamKeys,
        Channel::Vector,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Channel::Bm25 => "bm25",
            Channel::Exact => "exact",
            Channel::ParamKeys => "param_keys",
            Channel::Vector => "vector",
        }
    }

    fn slot(self) -> usize {
        self as usize
    }
}

/// The vectors the `vector` channel reads: the query's (whole request and sentences) and each
/// catalog entry's (`None` for built-ins).
pub type VectorRefs<'a> = (&'a [&'a [f32]], &'a [Option<&'a [f32]>]);

/// One channel's vote for one tool: its rank in that channel (1 = best; equal scores share a
/// rank) and the channel's own score.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Vote {
    pub rank: u32,
    pub score: f32,
}

/// A tool's votes, one slot per [`Channel`].
pub type Votes = [Option<Vote>; 4];

/// How channels are fused.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FusionParams {
    /// The RRF constant: larger flattens the difference between ranks.
    pub k: f32,
    /// Each channel's weight, in [`Channel::ALL`] order.
    pub weights: [f32; 4],
}

impl Default for FusionParams {
    fn default() -> Self {
        FusionParams {
            k: 60.0,
            weights: [1.0; 4],
        }
    }
}

/// One tool's votes for a header or a log line: `bm25=1:7.31 exact=2:4.10 vector=3:0.612`
/// (channel=rank:score).
pub fn describe(votes: &Votes) -> String {
    Channel::ALL
        .iter()
        .zip(votes)
        .filter_map(|(c, v)| {
            let v = v.as_ref()?;
            Some(format!("{}={}:{}", c.name(), v.rank, round(v.score)))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn round(x: f32) -> String {
    format!("{x:.3}")
        .trim_end_matches('0')
        .trim_end_matches('.')
        .to_owned()
}

/// A fused ranking: every function tool best first (as the selection step wants it) and, per
/// catalog entry, the channels that voted for it.
#[derive(Debug, Clone, Default)]
pub struct Fused {
    pub order: Vec<Scored>,
    /// Indexed by catalog entry; built-in entries have no votes.
    pub votes: Vec<Votes>,
}

impl Fused {
    pub fn votes_for(&self, entry: usize) -> Option<&Votes> {
        self.votes.get(entry)
    }
}

/// The lexical facts of each function tool the `exact` and `param_keys` channels read: the
/// tools' parts, which hold them.
pub struct Lexicon {
    /// Parallel to the index's documents.
    tools: Vec<Rc<ToolParts>>,
}

impl Lexicon {
    /// The lexicon of the function tools whose parts are `tools`, in document order.
    pub fn new(tools: Vec<Rc<ToolParts>>) -> Lexicon {
        Lexicon { tools }
    }

    /// The lexicon of the function tools among `entries` (their parts read afresh).
    pub fn build(entries: &[crate::dialects::Entry]) -> Lexicon {
        Lexicon::new(
            entries
                .iter()
                .filter(|e| matches!(e, crate::dialects::Entry::Function(_)))
                .map(|e| Rc::new(ToolParts::of_entry(e.clone())))
                .collect(),
        )
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.tools.capacity() * std::mem::size_of::<Rc<ToolParts>>()
    }
}

/// The query as the lexical channels read it: distinct terms with their IDF, and the phrases
/// (consecutive term pairs) it contains.
struct QueryTerms {
    terms: Vec<(u32, f32)>,
    phrases: Vec<(u32, u32, f32)>,
}

impl QueryTerms {
    fn new(index: &Index, query: &str) -> QueryTerms {
        let mut sequence: Vec<u32> = Vec::new();
        crate::text::for_each_term(query, |t| sequence.push(term_id(t)));
        let mut seen = HashSet::new();
        // Words no tool has carry no evidence; their IDF is unknown and they are left out.
        let terms: Vec<(u32, f32)> = sequence
            .iter()
            .filter(|id| seen.insert(**id))
            .filter_map(|&id| Some((id, index.idf(id)?)))
            .collect();
        let idf = |id: u32| terms.iter().find(|(t, _)| *t == id).map(|(_, w)| *w);
        let mut phrases: Vec<(u32, u32, f32)> = Vec::new();
        for pair in sequence.windows(2) {
            if let [a, b] = *pair {
                if a != b && !phrases.iter().any(|p| p.0 == a && p.1 == b) {
                    if let (Some(x), Some(y)) = (idf(a), idf(b)) {
                        phrases.push((a, b, x + y));
                    }
                }
            }
        }
        QueryTerms { terms, phrases }
    }
}

/// `exact`: IDF of each query word found whole in the name (twice: a name says more) or the
/// description, plus both words' IDF for each query phrase found in order in either.
fn exact_score(tool: &LexicalTool, q: &QueryTerms) -> f32 {
    let mut score = 0.0;
    for &(id, idf) in &q.terms {
        if tool.name().contains(&id) {
            score += 2.0 * idf;
        }
        if tool.description().contains(&id) {
            score += idf;
        }
    }
    for &(a, b, idf) in &q.phrases {
        let has = |seq: &[u32]| seq.windows(2).any(|w| w == [a, b]);
        if has(tool.name()) || has(tool.description()) {
            score += idf;
        }
    }
    score
}

/// `param_keys`: IDF of each query word that names a parameter.
fn param_key_score(tool: &LexicalTool, q: &QueryTerms) -> f32 {
    q.terms
        .iter()
        .filter(|(id, _)| tool.keys().binary_search(id).is_ok())
        .map(|(_, idf)| idf)
        .sum()
}

/// Dot product over the common length. Eight running sums instead of one: a single sum is a
/// chain of dependent additions that neither the CPU nor the compiler may reorder, and it made
/// the vector channel most of hybrid ranking's time. In the .wasm (built with `simd128`) the
/// eight sums are two 128-bit vectors, four multiplications and additions per instruction;
/// natively the same sums one by one. Both add the same numbers in the same order, so the CLI
/// and the filter compute the same bits.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let main = n - n % 8;
    let (Some((a, a_tail)), Some((b, b_tail))) = (
        a.get(..n).and_then(|a| a.split_at_checked(main)),
        b.get(..n).and_then(|b| b.split_at_checked(main)),
    ) else {
        return 0.0;
    };
    let tail: f32 = a_tail.iter().zip(b_tail).map(|(x, y)| x * y).sum();
    let [l0, l1, l2, l3] = eight_sums(a, b);
    ((l0 + l1) + l2) + l3 + tail
}

/// The eight running sums of [`dot`] over `a` and `b` (whole chunks of eight), lane k holding
/// Σ a[k]·b[k] over the chunks, with lane k + 4 added to lane k.
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
fn eight_sums(mut a: &[f32], mut b: &[f32]) -> [f32; 4] {
    use core::arch::wasm32::{f32x4_add, f32x4_extract_lane, f32x4_mul, f32x4_splat, v128};
    let (mut low, mut high) = (f32x4_splat(0.0), f32x4_splat(0.0));
    // Four chunks per turn: Envoy's V8 runs this as baseline code, which pays for every turn
    // of a loop. The sums take the chunks in the same order as one chunk per turn would.
    while let (Some((x, rest_a)), Some((y, rest_b))) =
        (a.split_first_chunk::<32>(), b.split_first_chunk::<32>())
    {
        // Each quarter of a chunk as one 16-byte load.
        let [x0, x1, x2, x3, x4, x5, x6, x7] = bytemuck::cast::<[f32; 32], [v128; 8]>(*x);
        let [y0, y1, y2, y3, y4, y5, y6, y7] = bytemuck::cast::<[f32; 32], [v128; 8]>(*y);
        low = f32x4_add(low, f32x4_mul(x0, y0));
        high = f32x4_add(high, f32x4_mul(x1, y1));
        low = f32x4_add(low, f32x4_mul(x2, y2));
        high = f32x4_add(high, f32x4_mul(x3, y3));
        low = f32x4_add(low, f32x4_mul(x4, y4));
        high = f32x4_add(high, f32x4_mul(x5, y5));
        low = f32x4_add(low, f32x4_mul(x6, y6));
        high = f32x4_add(high, f32x4_mul(x7, y7));
        (a, b) = (rest_a, rest_b);
    }
    while let (Some((x, rest_a)), Some((y, rest_b))) =
        (a.split_first_chunk::<8>(), b.split_first_chunk::<8>())
    {
        let [x0, x1] = bytemuck::cast::<[f32; 8], [v128; 2]>(*x);
        let [y0, y1] = bytemuck::cast::<[f32; 8], [v128; 2]>(*y);
        low = f32x4_add(low, f32x4_mul(x0, y0));
        high = f32x4_add(high, f32x4_mul(x1, y1));
        (a, b) = (rest_a, rest_b);
    }
    let sum = f32x4_add(low, high);
    [
        f32x4_extract_lane::<0>(sum),
        f32x4_extract_lane::<1>(sum),
        f32x4_extract_lane::<2>(sum),
        f32x4_extract_lane::<3>(sum),
    ]
}

#[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
fn eight_sums(a: &[f32], b: &[f32]) -> [f32; 4] {
    let mut lanes = [0f32; 8];
    for (x, y) in a.chunks_exact(8).zip(b.chunks_exact(8)) {
        let (Ok(x), Ok(y)) = (<&[f32; 8]>::try_from(x), <&[f32; 8]>::try_from(y)) else {
            continue;
        };
        // Spelled out: a loop over the lanes is not always unrolled.
        lanes[0] += x[0] * y[0];
        lanes[1] += x[1] * y[1];
        lanes[2] += x[2] * y[2];
        lanes[3] += x[3] * y[3];
        lanes[4] += x[4] * y[4];
        lanes[5] += x[5] * y[5];
        lanes[6] += x[6] * y[6];
        lanes[7] += x[7] * y[7];
    }
    [
        lanes[0] + lanes[4],
        lanes[1] + lanes[5],
        lanes[2] + lanes[6],
        lanes[3] + lanes[7],
    ]
}

/// Scales `v` to unit length (cosine then is a dot product); a zero vector stays zero.
pub fn normalise(v: &mut [f32]) {
    let norm = dot(v, v).sqrt();
    if norm > 0.0 && norm.is_finite() {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}

/// Ranks with every channel and fuses. `vectors`, if any, are the query's unit vectors (the
/// whole request and its sentences: a tool's cosine is its best against any of them) and each
/// catalog entry's (indexed by entry; `None` for built-ins or tools without one); without them
/// the `vector` channel is silent. `bm25` is the keyword ranking of `query` over `index`, which
/// the caller has already computed (the filter ranks by keyword first, as its fallback).
pub fn rank(
    index: &Index,
    lexicon: &Lexicon,
    entries: usize,
    query: &str,
    bm25: &[Scored],
    vectors: Option<VectorRefs<'_>>,
    params: &FusionParams,
) -> Fused {
    let q = QueryTerms::new(index, query);
    let documents = index.documents();
    let mut votes: Vec<Votes> = vec![[None; 4]; entries];
    let mut channel = |c: Channel, scores: Vec<(usize, f32)>| {
        let limit = if c == Channel::Vector {
            VECTOR_VOTES
        } else {
            usize::MAX
        };
        for (entry, vote) in ranks(scores, limit) {
            if let Some(slot) = votes.get_mut(entry).and_then(|v| v.get_mut(c.slot())) {
                *slot = Some(vote);
            }
        }
    };
    channel(
        Channel::Bm25,
        bm25.iter()
            .filter(|s| s.score > 0.0)
            .map(|s| (s.entry, s.score))
            .collect(),
    );
    // Only tools with a query word anywhere in their text can score in the lexical channels:
    // the index's postings name them, so the other tools are never visited.
    let mut candidates: Vec<usize> = q
        .terms
        .iter()
        .flat_map(|&(id, _)| index.documents_with(id))
        .collect();
    candidates.sort_unstable();
    candidates.dedup();
    let lexical = |score: fn(&LexicalTool, &QueryTerms) -> f32| -> Vec<(usize, f32)> {
        candidates
            .iter()
            .filter_map(|&doc| {
                let tool = lexicon.tools.get(doc)?.lexical();
                Some((*documents.get(doc)?, score(tool, &q)))
            })
            .filter(|(_, s)| *s > 0.0)
            .collect()
    };
    channel(Channel::Exact, lexical(exact_score));
    channel(Channel::ParamKeys, lexical(param_key_score));
    if let Some((query_vectors, tool_vectors)) = vectors {
        channel(
            Channel::Vector,
            documents
                .iter()
                .filter_map(|&entry| {
                    let v = tool_vectors.get(entry).copied().flatten()?;
                    let best = query_vectors
                        .iter()
                        .map(|q| dot(q, v))
                        .fold(f32::NEG_INFINITY, f32::max);
                    Some((entry, best))
                })
                .collect(),
        );
    }
    let fused_score = |v: &Votes| -> f32 {
        v.iter()
            .zip(params.weights)
            .filter_map(|(vote, w)| vote.map(|vote| w / (params.k + vote.rank as f32)))
            .sum()
    };
    let scored = documents.iter().map(|&entry| Scored {
        entry,
        score: votes.get(entry).map_or(0.0, fused_score),
    });
    // Equal fused scores keep catalog order. Fused scores are never negative: the tools no
    // channel voted for (0) come last, in catalog order, without being sorted.
    let (mut order, unvoted): (Vec<Scored>, Vec<Scored>) = scored.partition(|s| s.score > 0.0);
    order.sort_unstable_by(|a, b| best_first(a.score, a.entry, b.score, b.entry));
    order.extend(unvoted);
    Fused { order, votes }
}

/// The tools the vector channel votes for, at most: the question's closest 100. Cosine ranks
/// every tool, and a tool ranked r gets weight / (`rrf_k` + r): beyond 100 that is under a
/// hundredth of the first rank's weight, and sorting every tool of a large catalog (and then
/// every tool in the fusion, since all had a vote) cost more than the channel's dot products
/// in Envoy's V8.
pub const VECTOR_VOTES: usize = 100;

/// Higher score first; equal scores in catalog order (the order the channels list tools
/// in), so an unstable sort gives what a stable one did.
fn best_first(a: f32, a_entry: usize, b: f32, b_entry: usize) -> std::cmp::Ordering {
    b.total_cmp(&a).then(a_entry.cmp(&b_entry))
}

/// Ranks (1 = best, equal scores share a rank) for one channel's scores (listed in catalog
/// order for equal scores), for the best `limit` of them.
fn ranks(mut scores: Vec<(usize, f32)>, limit: usize) -> impl Iterator<Item = (usize, Vote)> {
    let order = |a: &(usize, f32), b: &(usize, f32)| best_first(a.1, a.0, b.1, b.0);
    if limit < scores.len() {
        scores.select_nth_unstable_by(limit.saturating_sub(1), order);
        scores.truncate(limit);
    }
    scores.sort_unstable_by(order);
    let mut rank = 0u32;
    let mut previous = f32::NAN;
    scores
        .into_iter()
        .enumerate()
        .map(move |(i, (entry, score))| {
            if score != previous {
                rank = i as u32 + 1;
                previous = score;
            }
            (entry, Vote { rank, score })
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialects::{Entry, ToolText};
    use crate::index::FieldWeights;

    fn tool(name: &str, description: &str, keys: &[&str]) -> Entry {
        Entry::Function(
            ToolText {
                name: name.into(),
                description: description.into(),
                params: keys.join(", "),
                keys: keys.join(", "),
            }
            .into(),
        )
    }

    fn catalog() -> Vec<Entry> {
        vec![
            tool(
                "send_slack_message",
                "Post a message to a Slack channel",
                &["channel", "text"],
            ),
            tool("get_weather", "Current weather for a city", &["city"]),
            Entry::Builtin,
            tool(
                "create_issue",
                "Open an issue in a GitHub repository",
                &["repo", "title"],
            ),
            tool(
                "search_web",
                "Search the web for pages about a topic",
                &["query"],
            ),
        ]
    }

    fn fused(query: &str, vectors: Option<VectorRefs<'_>>) -> Fused {
        let entries = catalog();
        let index = Index::build(&entries, FieldWeights::default());
        let lexicon = Lexicon::build(&entries);
        rank(
            &index,
            &lexicon,
            entries.len(),
            query,
            &index.rank(query),
            vectors,
            &FusionParams::default(),
        )
    }

    #[test]
    fn a_limited_channel_votes_for_its_best_in_order() {
        let scores: Vec<(usize, f32)> = (0..300).map(|i| (i, ((i * 37) % 101) as f32)).collect();
        let all: Vec<_> = ranks(scores.clone(), usize::MAX).collect();
        let best: Vec<_> = ranks(scores, 100).collect();
        assert_eq!(best.len(), 100);
        assert_eq!(
            best[..],
            all[..100],
            "the same first 100, ties in catalog order"
        );
    }

    #[test]
    fn equal_scores_share_a_rank() {
        let r: Vec<_> = ranks(vec![(0, 1.0), (1, 3.0), (2, 1.0), (3, 0.5)], 10).collect();
        let rank_of = |e: usize| r.iter().find(|(x, _)| *x == e).map(|(_, v)| v.rank);
        assert_eq!(rank_of(1), Some(1));
        assert_eq!(rank_of(0), Some(2));
        assert_eq!(rank_of(2), Some(2));
        assert_eq!(rank_of(3), Some(4));
    }

    #[test]
    fn channels_vote_for_their_evidence_only() {
        let f = fused("weather in the city of Paris", None);
        assert_eq!(f.order.first().map(|s| s.entry), Some(1));
        let votes = f.votes_for(1).copied().unwrap_or_default();
        assert_eq!(votes[Channel::Bm25.slot()].map(|v| v.rank), Some(1));
        assert_eq!(votes[Channel::Exact.slot()].map(|v| v.rank), Some(1));
        assert_eq!(votes[Channel::ParamKeys.slot()].map(|v| v.rank), Some(1));
        assert!(votes[Channel::Vector.slot()].is_none());
        // No channel has evidence for the Slack tool.
        assert_eq!(f.votes_for(0), Some(&[None; 4]));
        // The built-in is not ranked at all.
        assert!(f.order.iter().all(|s| s.entry != 2));
        assert_eq!(f.order.len(), 4);
    }

    #[test]
    fn a_phrase_in_order_counts_more_than_its_words_apart() {
        let exact = |query: &str| {
            fused(query, None)
                .votes_for(0)
                .and_then(|v| v[Channel::Exact.slot()])
                .map_or(0.0, |v| v.score)
        };
        // Same words; only "slack channel" is a phrase of the Slack tool's description.
        let phrase = exact("slack channel");
        let apart = exact("channel slack");
        assert!(apart > 0.0 && phrase > apart, "{phrase} vs {apart}");
    }

    #[test]
    fn the_vector_channel_finds_what_no_word_matches() {
        // Unit vectors: the query points at the Slack tool.
        let v = |x: f32, y: f32| vec![x, y];
        let tools = [
            v(1.0, 0.0),
            v(0.0, 1.0),
            v(0.0, 0.0),
            v(0.6, 0.8),
            v(0.0, 1.0),
        ];
        let refs: Vec<Option<&[f32]>> = tools
            .iter()
            .enumerate()
            .map(|(i, t)| (i != 2).then_some(t.as_slice()))
            .collect();
        let query = v(1.0, 0.0);
        let f = fused(
            "tell my colleague the build broke",
            Some((&[query.as_slice()], &refs)),
        );
        assert_eq!(f.order.first().map(|s| s.entry), Some(0));
        let votes = f.votes_for(0).copied().unwrap_or_default();
        assert_eq!(votes[Channel::Vector.slot()].map(|v| v.rank), Some(1));
        assert!(votes[Channel::Bm25.slot()].is_none());
    }

    #[test]
    fn dot_products_of_any_length() {
        let a: Vec<f32> = (0..19).map(|i| i as f32).collect();
        let naive: f32 = a.iter().map(|x| x * x).sum();
        assert_eq!(dot(&a, &a), naive);
        assert_eq!(dot(&a[..3], &a[..3]), 5.0);
        assert_eq!(dot(&[], &[]), 0.0);
        // Unequal lengths: the common prefix.
        assert_eq!(dot(&a[..9], &a), dot(&a[..9], &a[..9]));
    }

    #[test]
    fn normalise_makes_unit_vectors_and_leaves_zero_alone() {
        let mut v = vec![3.0, 4.0];
        normalise(&mut v);
        assert!((dot(&v, &v) - 1.0).abs() < 1e-6);
        let mut z = vec![0.0, 0.0];
        normalise(&mut z);
        assert_eq!(z, [0.0, 0.0]);
    }
}
