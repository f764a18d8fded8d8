//! The ways of deciding what a short latest text is ranked with that issue 54 measured, beside
//! the one that ships ([`Form::Filter`], through the pipeline): each gives the ranking a
//! generated conversation ([`super::generated`]) would get under it. None but the filter's is
//! built into the `.wasm`.
//!
//! - the latest text's words alone (the rule of issue 46, [`crate::followup::is_follow_up`]),
//!   as a switch and with the shipped blend (a text ranked on its own has its question order
//!   the tools its words do not reach);
//! - the assistant's turn read by its question mark alone, the part of the shipped reading
//!   that needs no language;
//! - the retrieval signal: a short text is a new topic only when its own ranking is strong,
//!   its best tool scoring at least a share of what its terms could give;
//! - a blend: the short text's ranking and its question's fused by reciprocal rank, so that
//!   neither reading loses everything when the guess is wrong.
//!
//! The retrieval signal's share and the blend's weight come in three settings each; the one
//! kept in `docs/BENCHMARKS.md` was chosen on the questions at even places (`--half 0`).

use crate::followup::{self, MIN_TERMS};
use crate::rank::Catalog;
use std::collections::HashMap;

/// One way of deciding.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Form {
    /// As the filter decides: the pipeline's own ranking.
    Filter,
    /// By the latest text's words alone, the assistant's turn unread (issue 46's rule).
    Words,
    /// [`Form::Words`], and a text ranked on its own has its question order the tools its
    /// words do not reach (the shipped blend, without the assistant's turn).
    WordsThenQuestion,
    /// A text after an assistant's turn whose last sentence ends in a question mark answers
    /// it; otherwise by its words.
    QuestionMark,
    /// By its words, and a short text (fewer than [`MIN_TERMS`] content terms) that names a
    /// topic is a reply all the same unless its best tool scores at least this share of the
    /// summed IDF of its terms the catalog has.
    Strength(f32),
    /// A text of fewer content terms than its question ranked by reciprocal-rank fusion of its
    /// own ranking and its question's (`1 / (60 + rank)` each), the question's × this; a
    /// longer one alone.
    Blend(f32),
}

/// Every form, the filter's first.
pub const FORMS: [Form; 10] = [
    Form::Filter,
    Form::Words,
    Form::WordsThenQuestion,
    Form::QuestionMark,
    Form::Strength(1.0),
    Form::Strength(1.5),
    Form::Strength(2.0),
    Form::Blend(1.0),
    Form::Blend(2.0),
    Form::Blend(4.0),
];

impl Form {
    pub fn name(self) -> String {
        match self {
            Form::Filter => "filter".to_owned(),
            Form::Words => "words".to_owned(),
            Form::WordsThenQuestion => "words_then_q".to_owned(),
            Form::QuestionMark => "question_mark".to_owned(),
            Form::Strength(share) => format!("strength_{share}"),
            Form::Blend(weight) => format!("blend_{weight}"),
        }
    }
}

/// Reciprocal-rank fusion's constant (the usual 60).
const RRF_K: f32 = 60.0;

/// The entries of `catalog` in the order `form` ranks a conversation of `earlier` (the user's
/// question), the assistant's `said`, then `latest`; `None` for [`Form::Filter`], which only
/// the pipeline gives.
pub fn ranking(
    form: Form,
    catalog: &Catalog,
    earlier: &str,
    said: &str,
    latest: &str,
) -> Option<Vec<usize>> {
    let index = &catalog.index;
    let earlier = [earlier.to_owned()];
    let by_words = || followup::is_follow_up(latest, index);
    // The forms are switches: a text ranked on its own ranks alone, as before the blend.
    let answering = |answers: bool| {
        let query = followup::query_answering(latest, &earlier, answers, index);
        order(catalog, followup::own_words(&query))
    };
    match form {
        Form::Filter => None,
        Form::Words => Some(answering(by_words())),
        Form::WordsThenQuestion => Some(order(
            catalog,
            &followup::query_answering(latest, &earlier, by_words(), index),
        )),
        Form::QuestionMark => Some(answering(
            followup::assistant::ends_in_question(said) || by_words(),
        )),
        Form::Strength(share) => {
            let weak = || content_terms(latest) < MIN_TERMS && strength(catalog, latest) < share;
            Some(answering(by_words() || weak()))
        }
        Form::Blend(weight) => {
            if content_terms(latest) >= content_terms(&earlier[0]) {
                return Some(order(catalog, latest));
            }
            let place = |text: &str| -> HashMap<usize, f32> {
                let ranked = index.rank(text);
                ranked
                    .iter()
                    .filter(|s| s.score > 0.0)
                    .enumerate()
                    .map(|(rank, s)| (s.entry, 1.0 / (RRF_K + rank as f32 + 1.0)))
                    .collect()
            };
            let (own, question) = (place(latest), place(&earlier[0]));
            let mut fused: Vec<(usize, f32)> = index
                .documents()
                .iter()
                .map(|&e| {
                    let of = |m: &HashMap<usize, f32>| m.get(&e).copied().unwrap_or(0.0);
                    (e, of(&own) + weight * of(&question))
                })
                .collect();
            fused.sort_by(|a, b| b.1.total_cmp(&a.1));
            Some(fused.into_iter().map(|(e, _)| e).collect())
        }
    }
}

fn order(catalog: &Catalog, query: &str) -> Vec<usize> {
    catalog.index.rank(query).iter().map(|s| s.entry).collect()
}

fn content_terms(text: &str) -> usize {
    crate::text::terms(text)
        .iter()
        .collect::<std::collections::HashSet<_>>()
        .len()
}

/// How strongly `text` alone names a tool of `catalog`: its best tool's score over the summed
/// IDF of its distinct terms the catalog has (0 when it has none).
fn strength(catalog: &Catalog, text: &str) -> f32 {
    let mut seen = std::collections::HashSet::new();
    let mut idf = 0.0;
    crate::text::for_each_term(text, |t| {
        let id = crate::index::term_id(t);
        if seen.insert(id) {
            idf += catalog.index.idf(id).unwrap_or(0.0);
        }
    });
    let best = catalog.index.rank(text).first().map_or(0.0, |s| s.score);
    if idf > 0.0 { best / idf } else { 0.0 }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::*;
    use crate::dialects::Dialect;
    use crate::rank::FieldWeights;

    fn catalog() -> Catalog {
        let tool = |name: &str, description: &str| {
            format!(
                r#"{{"type":"function","function":{{"name":"{name}","description":"{description}","parameters":{{"type":"object","properties":{{}}}}}}}}"#
            )
        };
        let tools = [
            tool("deploy_service", "Deploy a service to an environment"),
            tool("start_vm", "Start a virtual machine"),
            tool("get_weather", "Current weather forecast for a city"),
        ];
        Catalog::build(
            Dialect::OpenaiChat,
            &format!("[{}]", tools.join(",")),
            FieldWeights::default(),
        )
        .unwrap()
    }

    const QUESTION: &str = "Deploy the billing service to the production environment";

    #[test]
    fn each_form_decides_a_reply_that_names_a_tool_its_own_way() {
        let c = catalog();
        let first =
            |form: Form, said: &str| ranking(form, &c, QUESTION, said, "start")?.first().copied();
        assert_eq!(first(Form::Filter, "Shall I go ahead?"), None);
        // "start" names the VM tool: by its words, a new topic.
        assert_eq!(first(Form::Words, "Shall I go ahead?"), Some(1));
        // After a question, an answer: the deploy tool leads; after a statement, by words.
        assert_eq!(first(Form::QuestionMark, "Shall I go ahead?"), Some(0));
        assert_eq!(first(Form::QuestionMark, "Done."), Some(1));
        // Blended, the question's tool and the text's are the first two either way.
        let blended = ranking(Form::Blend(2.0), &c, QUESTION, "Done.", "start").unwrap();
        assert_eq!(blended[..2], [0, 1]);
        assert!(strength(&c, "start") > 0.0);
        assert_eq!(strength(&c, "nothing here"), 0.0);
        assert_eq!(
            ranking(Form::Strength(f32::MAX), &c, QUESTION, "", "start").unwrap()[0],
            0
        );
    }
}
