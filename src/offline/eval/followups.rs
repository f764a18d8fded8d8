//! Conversations of several user turns, evaluated through the filter's pipeline: does the
//! query the filter ranks ([`crate::followup::query`]) keep the tools the conversation's last
//! request needs?
//!
//! Two families, built from every query of a dataset the same way (no text is written for a
//! particular query):
//! - **follow-ups** ([`FOLLOW_UPS`]): the question, [`FOLLOW_UP_ASK`], then a confirmation,
//!   "do the same for …" or "try again". They need the question's tools, which their own
//!   words do not find.
//! - **topic shifts** ([`SHIFTS`]): another, unrelated question of the dataset (one that needs
//!   none of this query's tools), [`ANSWERED`], then this query's request as a new topic:
//!   short ("What about" and its one or two most specific words, the ones the fewest tools of
//!   the catalog have, as a user restates a topic in a few words), or the whole question.
//!   They need their own tools, and the earlier question's words only mislead.
//!
//! Each row sets the filter's Recall@k beside the same latest text ranked alone.

use super::{Dataset, EvalError, distinct_relevant, score};
use crate::config::Config;
use crate::dialects::Dialect;
use crate::pipeline::Engine;
use crate::rank::Catalog;
use std::collections::HashMap;

/// What the assistant asks before each follow-up of [`FOLLOW_UPS`].
pub const FOLLOW_UP_ASK: &str = "Shall I go ahead?";

/// The follow-up turns that end a conversation after [`FOLLOW_UP_ASK`], by kind: fixed,
/// generic templates, the same for every query of every dataset.
/// The first three are the ones follow-ups were first built and measured with; the next four
/// were written later, and the last two are misses the book's Limits page names: three
/// content words that tools have, and a "do the same" that says so with no word of it.
pub const FOLLOW_UPS: [(&str, &str); 9] = [
    ("confirmation", "Yes, please go ahead."),
    ("same_for", "Do the same for staging."),
    ("try_again", "Try again."),
    ("carry_on", "OK, carry on."),
    ("go_for_it", "Sure, go for it."),
    ("check_again", "Please check again."),
    ("the_other", "What about the other one?"),
    ("thanks", "Sounds good, thanks."),
    ("for_another", "Now for the Berlin office."),
];

/// The kinds of [`FOLLOW_UPS`] that a short text's words do not tell from a new request.
pub const MISSED: [&str; 2] = ["thanks", "for_another"];

/// What the assistant answers to the unrelated question before a topic shift.
pub const ANSWERED: &str = "Done. Is there anything else?";

/// The topic shifts, by kind, and how each row names its latest text.
pub const SHIFTS: [(&str, &str); 3] = [
    ("new_topic_word", "What about <its rarest word>?"),
    ("new_topic", "What about <its 2 rarest words>?"),
    ("new_question", "<the question> after another"),
];

/// Recall@k of one kind of conversation.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FollowupRow {
    pub kind: &'static str,
    /// The conversation's latest user text, or how it is made of each query.
    pub text: &'static str,
    /// Conversations of this kind scored: a topic shift needs a word of its query that the
    /// catalog has, and an unrelated question.
    pub queries: usize,
    /// Ranked by the latest user text alone: how toolsift ranked it before it read the turns
    /// before it.
    pub latest_only: f64,
    /// Ranked by the query the filter ranks ([`crate::followup::query`], through
    /// [`Engine::analyse`]).
    pub filter: f64,
}

/// [`evaluate_followups`]' answer.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FollowupReport {
    pub dataset: String,
    pub k: usize,
    /// Queries with relevant tools (the others are not scored).
    pub queries: usize,
    /// Recall@k of the question as the only turn, through the filter.
    pub question: f64,
    /// [`FOLLOW_UPS`], then [`SHIFTS`].
    pub rows: Vec<FollowupRow>,
}

/// Recall@`k` of the conversations the module names, each sent as an OpenAI chat body with the
/// whole catalog through the filter's pipeline ([`Engine::analyse`]) and ranked with the query
/// the pipeline chose, beside its latest text ranked alone and the question on its own.
/// `progress` is called with the number of queries done.
pub fn evaluate_followups(
    dataset: &Dataset,
    config: &Config,
    k: usize,
    progress: &mut dyn FnMut(usize),
) -> Result<FollowupReport, EvalError> {
    if k == 0 {
        return Err(EvalError("k must be at least 1".to_owned()));
    }
    let array = dataset.tools_array();
    let position = dataset.positions();
    let mut engine = Engine::new(config.clone());
    let mut ranked = |messages: serde_json::Value| filter_ranking(&mut engine, &array, &messages);
    let recall = |order: &[usize], relevant: &[&str]| {
        let mut rank_of: HashMap<usize, usize> = HashMap::new();
        for (i, &entry) in order.iter().enumerate().take(k) {
            rank_of.insert(entry, i + 1);
        }
        let ranks: Vec<Option<usize>> = relevant
            .iter()
            .map(|name| position.get(name).and_then(|e| rank_of.get(e).copied()))
            .collect();
        score(&ranks, &[k]).recall.first().copied().unwrap_or(0.0)
    };
    let catalog = Catalog::build(
        Dialect::OpenaiChat,
        &array,
        Engine::new(config.clone()).weights,
    )
    .map_err(|p| {
        EvalError(format!(
            "the tools do not form a tools array ({})",
            p.reason()
        ))
    })?;
    let alone =
        |text: &str| -> Vec<usize> { catalog.index.rank(text).iter().map(|s| s.entry).collect() };
    let user = |text: &str| serde_json::json!({"role": "user", "content": text});
    let (mut question_sum, mut n) = (0.0, 0usize);
    // Per row: conversations, and the sums of Recall@k alone and through the filter.
    let mut sums = [(0usize, 0.0, 0.0); FOLLOW_UPS.len() + SHIFTS.len()];
    for (done, q) in dataset.queries.iter().enumerate() {
        let relevant = distinct_relevant(q);
        if relevant.is_empty() {
            progress(done + 1);
            continue;
        }
        n += 1;
        let question = recall(&ranked(serde_json::json!([user(&q.query)]))?, &relevant);
        question_sum += question;
        let (follow_ups, shifts) = sums.split_at_mut(FOLLOW_UPS.len());
        for ((_, text), row) in FOLLOW_UPS.iter().zip(follow_ups.iter_mut()) {
            let conversation = serde_json::json!([
                user(&q.query),
                {"role": "assistant", "content": FOLLOW_UP_ASK},
                user(text),
            ]);
            row.0 += 1;
            row.1 += recall(&alone(text), &relevant);
            row.2 += recall(&ranked(conversation)?, &relevant);
        }
        if let Some(other) = unrelated(dataset, done) {
            let word = restated(&q.query, 1, &catalog);
            let words = restated(&q.query, 2, &catalog);
            let latest = [word.as_deref(), words.as_deref(), Some(q.query.as_str())];
            for (text, row) in latest.into_iter().zip(shifts.iter_mut()) {
                let Some(text) = text else { continue };
                let conversation = serde_json::json!([
                    user(other),
                    {"role": "assistant", "content": ANSWERED},
                    user(text),
                ]);
                row.0 += 1;
                row.1 += recall(&alone(text), &relevant);
                row.2 += recall(&ranked(conversation)?, &relevant);
            }
        }
        progress(done + 1);
    }
    let mean = |sum: f64, n: usize| if n == 0 { 0.0 } else { sum / n as f64 };
    let kinds = FOLLOW_UPS.iter().chain(SHIFTS.iter());
    Ok(FollowupReport {
        dataset: dataset.name.clone(),
        k,
        queries: n,
        question: mean(question_sum, n),
        rows: kinds
            .zip(sums)
            .map(
                |(&(kind, text), (count, latest_only, filter))| FollowupRow {
                    kind,
                    text,
                    queries: count,
                    latest_only: mean(latest_only, count),
                    filter: mean(filter, count),
                },
            )
            .collect(),
    })
}

/// The ranking the filter's pipeline makes of a conversation (`messages`) sent as an OpenAI chat
/// body with the tools array `array` as it is written: the catalog's ranking for the query the
/// pipeline chose.
pub(super) fn filter_ranking(
    engine: &mut Engine,
    array: &str,
    messages: &serde_json::Value,
) -> Result<Vec<usize>, EvalError> {
    let head = serde_json::json!({"model": "m", "messages": messages}).to_string();
    // The tools array as the file has it, spliced in after the messages.
    let body = format!(
        "{},\"tools\":{array}}}",
        head.strip_suffix('}').unwrap_or(&head)
    );
    let analysis = engine
        .analyse(Dialect::OpenaiChat, body.as_bytes())
        .map_err(|s| {
            EvalError(format!(
                "the filter skipped a conversation ({})",
                s.reason.name()
            ))
        })?;
    // The ranking the pipeline made, remembered by the catalog for its query.
    let ranking = analysis.catalog.rank(&analysis.query);
    Ok(ranking.iter().map(|s| s.entry).collect())
}

/// The question asked before query `at` changes topic: the first query from halfway round the
/// dataset on that has relevant tools and shares none with `at`'s.
fn unrelated(dataset: &Dataset, at: usize) -> Option<&str> {
    let queries = &dataset.queries;
    let own = distinct_relevant(queries.get(at)?);
    (0..queries.len())
        .map(|step| (at + queries.len() / 2 + step) % queries.len())
        .filter(|&i| i != at)
        .filter_map(|i| queries.get(i))
        .find(|other| {
            let theirs = distinct_relevant(other);
            !theirs.is_empty() && theirs.iter().all(|t| !own.contains(t))
        })
        .map(|other| other.query.as_str())
}

/// "What about" and the `words` content terms of `question` that the fewest tools of
/// `catalog` have (in the question's order), as a user restates a topic in a few words; none
/// when the catalog has no term of it.
pub fn restated(question: &str, words: usize, catalog: &Catalog) -> Option<String> {
    // (place in the question, term, IDF), each term once.
    let mut terms: Vec<(usize, String, f32)> = Vec::new();
    crate::text::for_each_term(question, |term| {
        if terms.iter().any(|(_, t, _)| t == term) {
            return;
        }
        if let Some(idf) = catalog.index.idf(crate::index::term_id(term)) {
            terms.push((terms.len(), term.to_owned(), idf));
        }
    });
    if terms.is_empty() {
        return None;
    }
    // Stable: equal IDFs keep the question's order.
    terms.sort_by(|a, b| b.2.total_cmp(&a.2));
    terms.truncate(words);
    terms.sort_unstable_by_key(|(place, _, _)| *place);
    let chosen: Vec<&str> = terms.iter().map(|(_, t, _)| t.as_str()).collect();
    Some(format!("What about {}?", chosen.join(" ")))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::*;
    use crate::offline::eval::tests::{close, tiny_tools};

    #[test]
    fn follow_ups_are_ranked_with_their_question_through_the_pipeline() {
        let queries = [
            r#"{"id":"q1","query":"what is the weather forecast in Paris","relevant":["get_weather"]}"#,
            r#"{"id":"q2","query":"create a billing invoice for the customer","relevant":["create_invoice"]}"#,
            r#"{"id":"q3","query":"weather","relevant":[]}"#,
        ]
        .join("\n");
        let d = Dataset::parse("tiny", &tiny_tools(), &queries).unwrap();
        let config = Config::from_json(br#"{"top_k":1,"min_tools":0}"#).unwrap();
        let mut done = 0;
        let r = evaluate_followups(&d, &config, 1, &mut |n| done = n).unwrap();
        assert_eq!((r.queries, r.k, done), (2, 1, 3));
        assert!(close(r.question, 1.0));
        assert_eq!(r.rows.len(), FOLLOW_UPS.len() + SHIFTS.len());
        for row in &r.rows[..FOLLOW_UPS.len()] {
            // Alone, a follow-up matches nothing: the first tool (catalog order), q1's.
            assert!(close(row.latest_only, 0.5), "{row:?}");
            assert!(close(row.filter, 1.0), "{row:?}");
        }
        // Each question's topic, restated after the other: its own tool, alone and through
        // the filter.
        for row in &r.rows[FOLLOW_UPS.len()..] {
            assert_eq!(row.queries, 2, "{row:?}");
            assert!(close(row.latest_only, 1.0), "{row:?}");
            assert!(close(row.filter, 1.0), "{row:?}");
        }
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["rows"][0]["kind"], "confirmation");
        assert_eq!(json["rows"][FOLLOW_UPS.len() + 1]["kind"], "new_topic");
    }

    #[test]
    fn a_topic_is_restated_by_its_rarest_words_in_order() {
        let c = Catalog::build(
            Dialect::OpenaiChat,
            &Dataset::parse(
                "tiny",
                &tiny_tools(),
                r#"{"id":1,"query":"q","relevant":[]}"#,
            )
            .unwrap()
            .tools_array(),
            Default::default(),
        )
        .unwrap();
        // "invoice" and "billing" are each one tool's; "customer" too, but later ("create"
        // is one tool's as well, and first). No term of the catalog: nothing to restate.
        let q = "please create a billing invoice for the customer";
        assert_eq!(restated(q, 1, &c).unwrap(), "What about create?");
        assert_eq!(restated(q, 2, &c).unwrap(), "What about create billing?");
        assert_eq!(restated("hello there", 2, &c), None);
    }

    #[test]
    fn the_unrelated_question_shares_no_tool() {
        let queries = [
            r#"{"id":"a","query":"weather in Paris","relevant":["get_weather"]}"#,
            r#"{"id":"b","query":"weather in Rome","relevant":["get_weather"]}"#,
            r#"{"id":"c","query":"send an email","relevant":["send_email"]}"#,
            r#"{"id":"d","query":"nothing","relevant":[]}"#,
        ]
        .join("\n");
        let d = Dataset::parse("tiny", &tiny_tools(), &queries).unwrap();
        assert_eq!(unrelated(&d, 0), Some("send an email"));
        assert_eq!(unrelated(&d, 1), Some("send an email"));
        assert_eq!(unrelated(&d, 2), Some("weather in Paris"));
    }
}
