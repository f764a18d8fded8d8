//! Questions the ranking cannot read, and what becomes of them.
//!
//! BM25 ranks by the terms a question shares with the catalog. A question in Japanese shares
//! none with a catalog described in English; one in Spanish shares a name or two ("Eminem",
//! "Postgres") and little else. Ranked anyway, the first `top_k` tools are chosen by
//! tie-breaking or by one name, and the tools the question needs are cut: in keyword mode,
//! Japanese questions on the shared datasets kept .12–.21 of their tools at k 5 where the same
//! questions in English kept .40–.93 (`docs/BENCHMARKS.md`, "Questions in other languages").
//!
//! What the ranking can read of a question is measured with its own statistics, the same for
//! every language: the share of the question's distinct content terms that the catalog's
//! vocabulary has ([`Reading::coverage`]). Numbers are left out: "2022" or "40.7" say which
//! value, not which tool, and a question in any language keeps them. A question below
//! `min_coverage` (or with no content term at all) is *weak*: it is not cut to `top_k` by
//! chance, but forwarded as `weak_query.action` says, and reported (`weak=` in `x-toolsift`,
//! the record, `toolsift.weak_query`, `toolsift explain` and `toolsift report`). With hybrid
//! ranking a question whose embeddings match a tool with confidence ([`dense_confident`]) is
//! read by them, and cut as any other.

use crate::index::{Index, term_id};
use serde::Deserialize;

/// What is done with a weak question's tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[cfg_attr(
    not(target_arch = "wasm32"),
    derive(schemars::JsonSchema, serde::Serialize)
)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Every tool the caller may see goes upstream, untouched: as without toolsift.
    Pass,
    /// The best `max_k` tools by what ranking there is go (every tool of a catalog no larger):
    /// nothing is cut by chance below the bound, and the request stays within the provider's
    /// limit on tools (OpenAI accepts 128).
    #[default]
    MaxK,
    /// Cut to `top_k` as any question (the behaviour before weak questions were read).
    TopK,
}

impl Action {
    pub fn name(self) -> &'static str {
        match self {
            Action::Pass => "pass",
            Action::MaxK => "max_k",
            Action::TopK => "top_k",
        }
    }
}

/// `weak_query` in the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[cfg_attr(
    not(target_arch = "wasm32"),
    derive(schemars::JsonSchema, serde::Serialize)
)]
#[serde(deny_unknown_fields, default)]
pub struct WeakQueryConfig {
    /// What a question the ranking cannot read gets: `"max_k"` (the best `max_k` tools, by
    /// default), `"pass"` (every tool) or `"top_k"` (cut as any question).
    #[serde(deserialize_with = "crate::json::variant")]
    pub action: Action,
    /// The most tools `"max_k"` sends (1–1024).
    #[serde(deserialize_with = "crate::json::whole_number")]
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(min = 1, max = 1024)))]
    pub max_k: usize,
    /// A question is weak when fewer than this share of its distinct content terms (numbers
    /// left out) are in the catalog's vocabulary, 0 to 1 (0: never weak).
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(min = 0, max = 1)))]
    pub min_coverage: f32,
    /// Hybrid ranking: the coverage from which the keyword channels (`bm25`, `exact`,
    /// `param_keys`) keep their whole weight; below it their weights fall in proportion, so
    /// a question whose words the catalog lacks is ranked by its embeddings rather than
    /// averaged with a keyword ranking of a name or two. 0 to 1 (0: always whole).
    #[cfg_attr(not(target_arch = "wasm32"), schemars(range(min = 0, max = 1)))]
    pub full_coverage: f32,
}

/// `min_coverage`'s default, chosen on half 0 of the translated questions
/// (`tests/data/languages/`, `docs/BENCHMARKS.md`).
pub const DEFAULT_MIN_COVERAGE: f32 = 0.25;

/// `full_coverage`'s default, chosen on half 0 of the translated questions with
/// multilingual-e5-small among 0 (keywords at full weight), 0.5 and 1: 0.5 and 1 lifted every
/// language's hybrid Recall@5 by about the same (Spanish on seal_tools .869 → .929 / .931,
/// Arabic .692 → .775 / .758) and left English's as it was; 0.5 leaves the questions that
/// keywords read well, most English ones, untouched (`docs/BENCHMARKS.md`).
pub const DEFAULT_FULL_COVERAGE: f32 = 0.5;

/// `max_k`'s default: OpenAI's limit on tools.
pub const DEFAULT_MAX_K: usize = 128;

impl Default for WeakQueryConfig {
    fn default() -> Self {
        WeakQueryConfig {
            action: Action::MaxK,
            max_k: DEFAULT_MAX_K,
            min_coverage: DEFAULT_MIN_COVERAGE,
            full_coverage: DEFAULT_FULL_COVERAGE,
        }
    }
}

impl WeakQueryConfig {
    /// Checks the bounds; the error names the field under `weak_query`.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if !(1..=1024).contains(&self.max_k) {
            return Err(("max_k", "must be 1 to 1024".to_owned()));
        }
        if !(0.0..=1.0).contains(&self.min_coverage) {
            return Err(("min_coverage", "must be 0 to 1".to_owned()));
        }
        if !(0.0..=1.0).contains(&self.full_coverage) {
            return Err(("full_coverage", "must be 0 to 1".to_owned()));
        }
        Ok(())
    }

    /// The share of their configured weight the keyword channels keep in hybrid ranking for a
    /// question of `reading`: 1 from `full_coverage` up, in proportion below it.
    pub fn lexical_share(&self, reading: Reading) -> f32 {
        if self.full_coverage <= 0.0 {
            return 1.0;
        }
        (reading.coverage() / self.full_coverage).clamp(0.0, 1.0)
    }

    /// Whether a question of `reading` is weak under this configuration.
    pub fn is_weak(&self, reading: Reading) -> bool {
        self.min_coverage > 0.0 && (reading.terms == 0 || reading.coverage() < self.min_coverage)
    }

    /// How many ranked tools a weak question keeps, given the configured `top_k`.
    pub fn keep(&self, top_k: usize) -> usize {
        match self.action {
            Action::Pass => usize::MAX,
            Action::MaxK => self.max_k.max(top_k),
            Action::TopK => top_k,
        }
    }
}

/// At most this many distinct terms of a question are read: a question of more is long enough
/// that its share is known.
const READ_TERMS: usize = 64;

/// Whether `term` is one character of an unspaced script: its bigrams say what it reads, and a
/// character alone (的, の) is in most texts of its script, so it would read a question in
/// Chinese against any catalog with a few Chinese descriptions.
fn is_unspaced_char(term: &str) -> bool {
    let mut chars = term.chars();
    matches!((chars.next(), chars.next()), (Some(c), None) if crate::text::is_unspaced(c))
}

/// What the ranking can read of a question: its distinct content terms, numbers left out, and
/// how many of them the catalog's vocabulary has. A run of Han, kana, Hangul or Thai is read
/// by its bigrams ([`crate::text`] also indexes its characters, which are left out here), and
/// about half of the bigrams straddle two words, which no catalog has whatever its language:
/// an unknown bigram counts half (`unknown_pairs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reading {
    pub terms: u16,
    pub known: u16,
    /// Of the terms the catalog lacks, the bigrams of unspaced scripts.
    pub unknown_pairs: u16,
}

impl Reading {
    /// The reading of `query` (its own words: [`crate::followup::own_words`] is the caller's)
    /// over `index`.
    pub fn of(index: &Index, query: &str) -> Reading {
        let mut seen: Vec<u32> = Vec::new();
        let (mut known, mut unknown_pairs) = (0u16, 0u16);
        crate::text::for_each_term(query, |term| {
            if seen.len() >= READ_TERMS
                || term.bytes().all(|b| b.is_ascii_digit())
                || is_unspaced_char(term)
            {
                return;
            }
            let id = term_id(term);
            if seen.contains(&id) {
                return;
            }
            seen.push(id);
            if index.idf(id).is_some() {
                known += 1;
            } else if crate::text::is_unspaced_pair(term) {
                unknown_pairs += 1;
            }
        });
        Reading {
            terms: seen.len() as u16,
            known,
            unknown_pairs,
        }
    }

    /// The share of the terms the catalog has, unknown bigrams counted half (0 without terms).
    pub fn coverage(self) -> f32 {
        let terms = f32::from(self.terms) - f32::from(self.unknown_pairs) / 2.0;
        if self.terms == 0 || terms <= 0.0 {
            0.0
        } else {
            f32::from(self.known) / terms
        }
    }

    /// `known/terms`, as `x-toolsift` and the record write it.
    pub fn describe(self) -> String {
        format!("{}/{}", self.known, self.terms)
    }
}

/// How far the best tool's cosine must stand above the catalog's others, in standard
/// deviations of the question's cosines over the catalog, for the embeddings to read a
/// question the keywords cannot. Chosen on half 0 of the translated questions (657 that the
/// keywords could not read, 200-tool catalogs) as the smallest step of 0.5 at which cutting
/// the questions past it to `top_k` keeps their tools within .02 of never cutting them, with
/// both embedders: at 5.5, .970 against .979 with multilingual-e5-small, .890 against .906
/// with all-MiniLM-L6-v2 (at 3, .759 and .517: the best cosine of a question neither model
/// reads well still stands out of a catalog by three deviations). It cuts few such
/// questions: the embeddings' share of the work is the fusion's
/// ([`WeakQueryConfig::lexical_share`]).
pub const DENSE_CONFIDENCE: f32 = 5.5;

/// Whether the best of `cosines` (one per tool with a vector) stands out of the rest by
/// [`DENSE_CONFIDENCE`] standard deviations: the embeddings found a tool the question is about,
/// rather than a tool that is a little less unlike it than the others. Needs a few tools to
/// tell; below that, never.
pub fn dense_confident(cosines: &[f32]) -> bool {
    dense_margin(cosines).is_some_and(|z| z >= DENSE_CONFIDENCE)
}

/// The best cosine's distance above the mean of `cosines`, in standard deviations; `None` with
/// fewer than 8 tools or no spread.
pub fn dense_margin(cosines: &[f32]) -> Option<f32> {
    let finite = || cosines.iter().copied().filter(|c| c.is_finite());
    let n = finite().count();
    if n < 8 {
        return None;
    }
    let mean = finite().sum::<f32>() / n as f32;
    let var = finite().map(|c| (c - mean) * (c - mean)).sum::<f32>() / n as f32;
    let sd = var.sqrt();
    let best = finite().fold(f32::NEG_INFINITY, f32::max);
    (sd > 1e-6).then(|| (best - mean) / sd)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::dialects::{Entry, ToolText};
    use crate::index::FieldWeights;

    fn index() -> Index {
        let tool = |name: &str, description: &str| {
            Entry::Function(
                ToolText {
                    name: name.into(),
                    description: description.into(),
                    params: String::new(),
                    keys: String::new(),
                }
                .into(),
            )
        };
        Index::build(
            &[
                tool("get_weather", "Current weather for a city"),
                tool("send_slack_message", "Post a message to a Slack channel"),
                tool("map_search_poi", "根据关键字搜索地点，如餐厅、加油站"),
            ],
            FieldWeights::default(),
        )
    }

    #[test]
    fn a_question_in_the_catalogs_words_reads() {
        let r = Reading::of(&index(), "What is the weather in Paris?");
        assert_eq!((r.terms, r.known), (2, 1));
        assert!(!WeakQueryConfig::default().is_weak(r));
    }

    #[test]
    fn a_question_in_another_script_does_not() {
        let r = Reading::of(&index(), "明日の東京の天気を教えてください");
        assert_eq!(r.known, 0);
        assert!(r.terms > 5);
        assert!(WeakQueryConfig::default().is_weak(r));
        // The catalog's own language reads.
        let r = Reading::of(&index(), "附近有什么餐厅");
        assert!(r.known > 0, "{r:?}");
    }

    #[test]
    fn numbers_and_stop_words_are_not_content() {
        let r = Reading::of(&index(), "what is 2022 and 40.7");
        assert_eq!(r, Reading::default());
        assert!(WeakQueryConfig::default().is_weak(r));
        let never = WeakQueryConfig {
            min_coverage: 0.0,
            ..WeakQueryConfig::default()
        };
        assert!(!never.is_weak(r));
    }

    #[test]
    fn a_name_alone_in_a_foreign_question_is_weak() {
        let r = Reading::of(
            &index(),
            "¿Puedes enviar un mensaje al canal de Slack avisando que mañana no hay reunión?",
        );
        assert!(r.known >= 1 && r.coverage() < DEFAULT_MIN_COVERAGE, "{r:?}");
    }

    #[test]
    fn the_actions_keep() {
        let c = WeakQueryConfig::default();
        assert_eq!(c.keep(5), 128);
        let pass = WeakQueryConfig {
            action: Action::Pass,
            ..c
        };
        assert_eq!(pass.keep(5), usize::MAX);
        let top = WeakQueryConfig {
            action: Action::TopK,
            ..c
        };
        assert_eq!(top.keep(5), 5);
    }

    #[test]
    fn dense_confidence_needs_a_tool_that_stands_out() {
        let flat: Vec<f32> = (0..50).map(|i| 0.3 + 0.001 * i as f32).collect();
        assert!(!dense_confident(&flat));
        let mut one = flat.clone();
        one[7] = 0.8;
        assert!(dense_confident(&one));
        // Three deviations are not enough.
        let mut some: Vec<f32> = (0..50).map(|i| 0.3 + 0.01 * (i % 7) as f32).collect();
        some[7] = 0.4;
        assert!(dense_margin(&some).is_some_and(|z| z > 2.0 && z < DENSE_CONFIDENCE));
        assert!(!dense_confident(&some));
        assert_eq!(dense_margin(&[0.5; 3]), None);
        assert_eq!(dense_margin(&[0.5; 20]), None);
        assert!(!dense_confident(&[f32::NAN; 20]));
    }
}
