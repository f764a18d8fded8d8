//! The transitions as a ranking channel: a request whose history called tools ranks the tools
//! the fleet called next after them beside its question's ranking.
//!
//! [`NextTools`] indexes the calibration's pairs once, when the configuration is read: a
//! request looks up its history's tools instead of scanning every pair. [`fuse`] is the form
//! issue 66 chose on half of its conversations and reported on the other (docs/BENCHMARKS.md,
//! "Learned tool transitions as a ranking channel"): reciprocal rank fusion of the ranking's
//! places and the next list's, the list weighted `channel_weights.transitions`.

use super::{MAX_HISTORY, Pair, Transitions, catalog_id};
use crate::index::Scored;
use std::collections::HashMap;

/// The RRF constant of the fusion: the measured form's (issue 66). Unlike hybrid ranking's
/// `rrf_k` (1, which lets one sure channel lead), 60 lets a tool the ranking and the transitions
/// both place well lead either's first alone.
pub const RRF_K: f32 = 60.0;

/// Each earlier tool's next tools and their counts.
type Successors = HashMap<Box<str>, Vec<(Box<str>, u64)>>;

/// The calibration's transitions, indexed by earlier tool, pooled and per catalog.
#[derive(Debug, Default, Clone)]
pub struct NextTools {
    pooled: Successors,
    catalogs: HashMap<u32, Successors>,
}

fn successors(pairs: &[Pair]) -> Successors {
    let mut of: Successors = HashMap::new();
    for Pair(earlier, next, count) in pairs {
        of.entry(earlier.as_str().into())
            .or_default()
            .push((next.as_str().into(), *count));
    }
    of
}

impl NextTools {
    /// The index of a checked calibration's transitions (a catalog listed twice, which the
    /// check refuses, would keep its last list).
    pub fn new(transitions: &Transitions) -> NextTools {
        NextTools {
            pooled: successors(&transitions.pooled),
            catalogs: transitions
                .catalogs
                .iter()
                .filter_map(|c| Some((catalog_id(&c.catalog)?, successors(&c.pairs))))
                .collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.pooled.is_empty() && self.catalogs.values().all(|s| s.is_empty())
    }

    /// The tools most likely called next in catalog `catalog` after a history that called
    /// `called` (its latest [`MAX_HISTORY`], as a shadowed record holds them): each tool's
    /// summed count over the history's distinct tools, best first, equal counts by name. The
    /// catalog's own pairs when the calibration lists it, else the pooled ones. Tools of the
    /// history are left out (the selection keeps a called tool anyway). The same index and
    /// history give the same list on every replica.
    pub fn next(&self, catalog: u32, called: &[String]) -> Vec<(&str, u64)> {
        let skip = called.len().saturating_sub(MAX_HISTORY);
        let mut history: Vec<&str> = called.iter().skip(skip).map(String::as_str).collect();
        if history.is_empty() {
            return Vec::new();
        }
        history.sort_unstable();
        history.dedup();
        let of = self.catalogs.get(&catalog).unwrap_or(&self.pooled);
        let mut scores: Vec<(&str, u64)> = Vec::new();
        for earlier in &history {
            for (next, count) in of.get(*earlier).into_iter().flatten() {
                let next: &str = next;
                if history.binary_search(&next).is_ok() {
                    continue;
                }
                match scores.iter_mut().find(|(n, _)| *n == next) {
                    Some((_, score)) => *score = score.saturating_add(*count),
                    None => scores.push((next, *count)),
                }
            }
        }
        scores.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        scores
    }
}

/// `ranking` with the next list fused in: each tool scores `1 / (k + p)` for its place `p` in
/// the ranking, plus `weight / (k + q)` for its place `q` in `next` (catalog entries, best
/// first); best first, equal scores in ranking order. Each tool keeps its ranking's score (what
/// `min_score` and the decisions read). A tool of `next` the ranking does not hold is no tool
/// of the catalog's and is passed over.
///
/// Only the next tools move: the others keep their order, so the fusion is a merge, not a sort
/// of the whole catalog.
pub fn fuse(ranking: &[Scored], next: &[usize], weight: f32, k: f32) -> Vec<Scored> {
    let (weight, k) = (f64::from(weight), f64::from(k));
    let place_score = |place: usize| 1.0 / (k + place as f64);
    // Each entry's place in `next` (1-based), by entry: one pass over each list.
    let entries = ranking.iter().map(|s| s.entry + 1).max().unwrap_or(0);
    let mut next_place = vec![0usize; entries];
    for (q, &entry) in next.iter().enumerate().rev() {
        if let Some(place) = next_place.get_mut(entry) {
            *place = q + 1;
        }
    }
    let next_of = |s: &Scored| next_place.get(s.entry).copied().filter(|&q| q > 0);
    // (fused score, place in the ranking, the tool) of each next tool the ranking holds.
    let mut lifted: Vec<(f64, usize, Scored)> = ranking
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            Some((
                place_score(i + 1) + weight * place_score(next_of(s)?),
                i,
                *s,
            ))
        })
        .collect();
    lifted.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut lifted = lifted.into_iter().peekable();
    let mut fused = Vec::with_capacity(ranking.len());
    for (i, scored) in ranking.iter().enumerate() {
        if next_of(scored).is_some() {
            continue;
        }
        let own = place_score(i + 1);
        while let Some((_, _, s)) =
            lifted.next_if(|(score, place, _)| *score > own || (*score == own && *place < i))
        {
            fused.push(s);
        }
        fused.push(*scored);
    }
    fused.extend(lifted.map(|(_, _, s)| s));
    fused
}
