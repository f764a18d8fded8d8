//! Follow-up turns: what a request is ranked by when its latest user text answers or goes
//! on from what came before.
//!
//! The query is the latest user text, so a conversation that ends "Shall I go ahead?" / "Yes,
//! please go ahead." would rank the catalog against "go ahead". When the latest text follows
//! up, the user turns before it join the query, back to the latest one that is not weak itself
//! (the question the follow-up is about), at most [`MAX_EARLIER`]. The turns are weighed
//! ([`crate::index::turn_weights`]) in this order: that question 1, the follow-up a half (its
//! words break ties and add what they name: "do the same for staging"), the weak turns between
//! them a quarter, an eighth. The dialects hand over the earlier turns and the assistant's
//! text before the latest one ([`crate::dialects::Request::earlier`],
//! [`crate::dialects::Request::assistant`]); this module alone decides, for every dialect, the
//! CLI and search mode alike.
//!
//! **What the assistant said decides first.** After a turn that asks to go on ("Shall I go
//! ahead?", "Please confirm and I'll send it.": [`assistant::asks_to_go_on`]), the latest text
//! answers it, whatever its words: "k", "do it", "Definitely start.", "vas-y", "👍". Its words
//! alone cannot tell: in a catalog of 200 tools a reply shares a word with a few tools ("start",
//! "run", "time") as often as a short new topic names one, and the rule of words that shipped
//! before read such replies as new topics (`docs/BENCHMARKS.md`, "Follow-ups that hold on
//! phrasings nobody wrote down"). A reply that says more than its question (more distinct
//! content terms) leads, the question after it.
//!
//! **Otherwise, the text's words.** After a turn that hands back ("Done. Anything else?"), a
//! statement, or none, a text follows up when it is too weak to rank by ([`is_follow_up`]).
//! Length alone does not make a follow-up: a short text can change the topic ("And the weather
//! in Lisbon?", "What about invoices?"), and then the question before it is another task's,
//! whose words only mislead (joined, a short new topic's Recall@5 fell from .356 to .012 on
//! seal_tools). A short text is a new question of its own when it names a topic the catalog
//! has and does not point back to what came before; a word of a conversation's own ("again",
//! "same", "it", [`REFERRING`]) says it follows up, whatever else it names.
//!
//! The follow-up weighs less than its question because its words mislead more than they help:
//! with the follow-up first and the question at half weight, "Yes, please go ahead." after
//! livemcpbench's questions kept Recall@5 .279 where the questions alone keep .352 ("go" names
//! browser tools); with the question first, .363 (`docs/BENCHMARKS.md`, "Follow-up turns").
//!
//! The query is a function of the question turn and the user turns before it, never of what
//! follows the question: every turn of an agent loop (tool calls and their results) ranks the
//! query of the turn that started it, so its selection, and the provider's prompt cache, stay
//! as they were. A loop started by a question that ranks on its own ranks that question alone,
//! as before follow-ups were read.

pub mod assistant;

use crate::index::{Index, TIE_MARK, TURN_MARK};
use assistant::Ask;
use std::borrow::Cow;

/// A user text with fewer distinct content terms than this (words that are not stop words:
/// "Yes, please go ahead." has two, "go" and "ahead"; "Do the same for staging" one) is short,
/// and a follow-up unless it names a topic of its own ([`is_follow_up`]). A question of three
/// content terms or more ranks on its own, as before.
pub const MIN_TERMS: usize = 3;

/// At most this many earlier user turns join a follow-up (the dialects read no more).
pub const MAX_EARLIER: usize = crate::dialects::MAX_EARLIER_TURNS;

/// What joins two turns: a newline, so that sentence splitting (hybrid ranking embeds each
/// sentence) and the lexical channels see the turns apart, then [`TURN_MARK`].
const JOINER: &str = "\n\u{1e}";

/// What puts the question after a text ranked on its own, to order the tools the text's words
/// do not reach: a newline, then [`TIE_MARK`].
const TIE_JOINER: &str = "\n\u{1f}";

/// The query to rank for a request whose latest user text is `latest`, whose earlier user
/// turns are `earlier` (most recent first) and whose assistant said `assistant` just before
/// `latest`. `latest` follows up when the assistant asked to go on
/// ([`assistant::asks_to_go_on`]) and it says no more than its question (no more distinct
/// content terms), or, without such a turn, when it is too weak to rank by
/// ([`is_follow_up`]); a follow-up is ranked as the question it follows up, then `latest`,
/// then the weak turns between, joined by [`TURN_MARK`]s. Any other `latest` ranks on its
/// own words, and the question before it, after a [`TIE_MARK`], only orders the tools those
/// words do not reach: a reply taken for a new topic keeps its question's best tools in the
/// places its own words leave, and a new topic loses nothing. `index` is the request's
/// catalog's: a text no tool has a term of is weak too. A deterministic function of its
/// arguments, so a catalog's rankings are remembered per query as before.
pub fn query(latest: &str, earlier: &[String], assistant: Option<&str>, index: &Index) -> String {
    let ask = assistant.map_or(Ask::No, assistant::reads);
    answering(latest, earlier, ask, index)
}

/// [`query`] with what the assistant's turn says decided by the caller: `answers`, whether
/// `latest` answers a question to go on (the evaluation measures other ways to decide it;
/// nothing else calls it, so the `.wasm` leaves it out).
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn query_answering(
    latest: &str,
    earlier: &[String],
    answers: bool,
    index: &Index,
) -> String {
    let ask = if answers { Ask::Named } else { Ask::No };
    answering(latest, earlier, ask, index)
}

/// After a turn whose question mark alone asks, a text of at least this many distinct content
/// terms says as much as a question of its own, whatever its language. Replies to an ask are
/// short in every language (at most 7 terms, Han and kana counted in bigrams, among the 84
/// hand-written replies of half 0); a new question seldom is. Chosen on half 0 of
/// `tests/data/languages/` (hand-backs and asks in seven languages between translated
/// questions) among 6 to 12, alone and with a share of the question's terms (0.3 to 1.0, which
/// changed nothing beside it): a new question after a hand-back kept its Recall@5 within .018
/// of its own, every reply its question's (`docs/BENCHMARKS.md`, "Follow-ups in any
/// language").
pub const STANDS_ALONE_TERMS: usize = 8;

/// [`query`] for an assistant's turn read as `ask`.
fn answering(latest: &str, earlier: &[String], ask: Ask, index: &Index) -> String {
    let latest = unmarked(latest);
    if earlier.is_empty() {
        return latest.into_owned();
    }
    let mut between = Vec::new();
    let mut question = None;
    for turn in earlier
        .iter()
        .filter(|t| !t.trim().is_empty())
        .take(MAX_EARLIER)
    {
        if is_follow_up(turn, index) {
            between.push(turn);
        } else {
            question = Some(turn);
            break;
        }
    }
    let question = question.map(|q| unmarked(q));
    let says_more = |q: &str| {
        let own = content_terms(&latest, COUNTED_TERMS);
        own > 0 && content_terms(q, own) < own
    };
    // Whether `latest` says as much as a question of its own, in any language: after a turn
    // whose question mark alone asks, where the assistant's words cannot tell.
    let stands_alone = || content_terms(&latest, COUNTED_TERMS) >= STANDS_ALONE_TERMS;
    let follows_up = match ask {
        Ask::Named => !question.as_deref().is_some_and(says_more),
        // A text that goes back to its task ("attempt it one more time") answers it still.
        Ask::QuestionMark => !question
            .as_deref()
            .is_some_and(|q| says_more(q) || !refers_back(&latest) && stands_alone()),
        Ask::No => is_follow_up(&latest, index),
    };
    if !follows_up {
        return match question {
            Some(q) => [latest.as_ref(), q.as_ref()].join(TIE_JOINER),
            None => latest.into_owned(),
        };
    }
    let mut turns: Vec<&str> = Vec::with_capacity(2 + between.len());
    if let Some(q) = &question {
        turns.push(q);
    }
    turns.push(&latest);
    let between: Vec<Cow<'_, str>> = between.into_iter().map(|t| unmarked(t)).collect();
    turns.extend(between.iter().map(|t| t.as_ref()));
    turns.join(JOINER)
}

/// `query` without what only orders ties ([`TIE_MARK`] and after): what hybrid ranking's
/// channels read, and what a query is embedded from.
pub fn own_words(query: &str) -> &str {
    query
        .split_once(TIE_JOINER)
        .or_else(|| query.split_once(TIE_MARK))
        .map_or(query, |(own, _)| own)
}

/// At most this many distinct content terms of a reply are counted to tell whether it says
/// more than its question: a text of more is as long as any question.
const COUNTED_TERMS: usize = 64;

/// How many distinct content terms `text` has, counted up to `at_most` (a reply's few terms
/// are compared with a question's many: counting stops where the comparison is decided).
fn content_terms(text: &str, at_most: usize) -> usize {
    distinct_terms(text, at_most).len()
}

/// The first `at_most` distinct content terms of `text` (a few, so a vector beats a hash set).
fn distinct_terms(text: &str, at_most: usize) -> Vec<u32> {
    let mut terms: Vec<u32> = Vec::new();
    crate::text::for_each_term(text, |t| {
        if terms.len() < at_most {
            let id = crate::index::term_id(t);
            if !terms.contains(&id) {
                terms.push(id);
            }
        }
    });
    terms
}

/// Whether `latest` says too little to rank by on its own. A text of [`MIN_TERMS`] content
/// terms or more does when no tool of `index` has any of them, or, below [`REFERRING_TERMS`],
/// when it goes back to what came before ([`REFERRING`]). A shorter one does unless it names
/// a topic of its own: a term that at most [`TOPIC_SHARE`] of the tools have ("And the
/// weather in Lisbon?", "What about invoices?"), and no word that goes back to what came
/// before ([`REFERRING`]: "Do the same for staging", "Try it again").
pub fn is_follow_up(latest: &str, index: &Index) -> bool {
    let terms = distinct_terms(latest, REFERRING_TERMS);
    if terms.len() >= MIN_TERMS {
        // "That failed, attempt it one more time." goes back to its task as "Try it again"
        // does: what a reply says when the assistant's ask was not read.
        return terms.len() < REFERRING_TERMS && refers_back(latest) || !index.matches(latest);
    }
    // One tool at least: in a catalog of a few, a word of one tool names it.
    let most = (TOPIC_SHARE * index.documents().len() as f32).max(1.0);
    let names_a_topic = terms.iter().any(|&term| {
        let with = index.documents_with(term).count();
        with > 0 && with as f32 <= most
    });
    !names_a_topic || refers_back(latest)
}

/// A text of [`MIN_TERMS`] content terms or more but fewer than this follows up when it has a
/// word that goes back to what came before ([`REFERRING`]), as a shorter one does. Chosen on
/// the even half of the shared datasets' questions after turns in other languages (where the
/// assistant's asks are read least, so the most replies are read by their words): 4, 5 and 6
/// keep retries .038, .049 and .056 more Recall@5 than 3 on seal_tools, and no family less
/// (`docs/BENCHMARKS.md`).
pub const REFERRING_TERMS: usize = 6;

/// The largest share of the catalog's tools a short text's term may be in and still name a
/// topic of its own: a word that many tools have ("data", "get") says what kind of thing is
/// asked, not which.
pub const TOPIC_SHARE: f32 = 0.1;

/// Words with which a short text goes on with, repeats or redoes what came before, or points
/// back to it: a conversation's own words, whatever else the text names. Matched whole and in
/// any case. A tool may have one ("retry_job"); a short text that has it still follows up.
const REFERRING: &[&str] = &[
    "again", "ahead", "also", "another", "carry", "continue", "instead", "it", "other", "proceed",
    "redo", "repeat", "retry", "same", "them", "too",
];

/// Pairs of words that say the same as [`REFERRING`] where each word alone does not: "go"
/// names browser tools, and "on" is in most requests.
const REFERRING_PAIRS: &[(&str, &str)] = &[("go", "on")];

/// Whether `text` has a word of [`REFERRING`], or two words of [`REFERRING_PAIRS`] in a row.
fn refers_back(text: &str) -> bool {
    let mut previous = "";
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
        .any(|word| {
            let pair = REFERRING_PAIRS.iter().any(|(first, second)| {
                previous.eq_ignore_ascii_case(first) && word.eq_ignore_ascii_case(second)
            });
            previous = word;
            pair || REFERRING.iter().any(|r| word.eq_ignore_ascii_case(r))
        })
}

/// The query as a person reads it: its turns on lines of their own, the weightiest first, the
/// one that only orders ties last (the CLI shows it so).
pub fn readable(query: &str) -> Cow<'_, str> {
    if query.contains([TURN_MARK, TIE_MARK]) {
        Cow::Owned(query.replace([TURN_MARK, TIE_MARK], ""))
    } else {
        Cow::Borrowed(query)
    }
}

/// A user's text with any [`TURN_MARK`] or [`TIE_MARK`] in it made a space: only joining
/// turns writes one.
fn unmarked(text: &str) -> Cow<'_, str> {
    if text.contains([TURN_MARK, TIE_MARK]) {
        Cow::Owned(text.replace([TURN_MARK, TIE_MARK], " "))
    } else {
        Cow::Borrowed(text)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::*;
    use crate::dialects::{Dialect, Entry};
    use crate::index::FieldWeights;
    use crate::rank::Catalog;

    fn tool(name: &str, description: &str) -> String {
        format!(
            r#"{{"type":"function","function":{{"name":"{name}","description":"{description}","parameters":{{"type":"object","properties":{{}}}}}}}}"#
        )
    }

    fn catalog() -> Catalog {
        let tools = [
            tool("book_flight", "Book a flight ticket between two airports"),
            tool("get_weather", "Current weather forecast for a city"),
            tool("deploy_service", "Deploy a service to an environment"),
            tool("restart_pod", "Restart a Kubernetes pod"),
            tool("send_email", "Send an email message to a recipient"),
            tool("go_to_page", "Go to a web page in the browser"),
        ];
        let array = format!("[{}]", tools.join(","));
        Catalog::build(Dialect::OpenaiChat, &array, FieldWeights::default()).unwrap()
    }

    fn names(catalog: &Catalog, query: &str) -> Vec<String> {
        catalog
            .index
            .rank(query)
            .iter()
            .take(2)
            .map(|s| match &catalog.draft.entries[s.entry] {
                Entry::Function(t) => t.name.clone(),
                Entry::Builtin => String::new(),
            })
            .collect()
    }

    const QUESTION: &str = "Deploy the billing service to the production environment";

    #[test]
    fn a_question_ranks_on_its_own() {
        let c = catalog();
        let earlier = vec!["Book me a flight to Paris".to_owned()];
        // On its own words; the question before it only orders what they leave equal.
        let q = query(QUESTION, &earlier, None, &c.index);
        assert_eq!(q, format!("{QUESTION}\n\u{1f}Book me a flight to Paris"));
        assert_eq!(own_words(&q), QUESTION);
        // No earlier turns: the latest text, however weak.
        assert_eq!(
            query("Yes, go ahead.", &[], None, &c.index),
            "Yes, go ahead."
        );
    }

    #[test]
    fn a_confirmation_is_ranked_with_the_question_before_it() {
        let c = catalog();
        let earlier = vec![QUESTION.to_owned(), "Hello".to_owned()];
        for latest in [
            "Yes, please go ahead.",
            "Try again",
            "Do the same for staging",
        ] {
            // The question leads; the older "Hello" is another task's, and stays out.
            let q = query(latest, &earlier, None, &c.index);
            assert_eq!(q, format!("{QUESTION}\n\u{1e}{latest}"));
            assert_eq!(names(&c, &q)[0], "deploy_service", "{latest}");
            // The turn alone would not find it ("go" finds the browser tool).
            assert_ne!(names(&c, latest)[0], "deploy_service", "{latest}");
        }
    }

    #[test]
    fn no_tool_scoring_makes_a_follow_up_even_with_many_terms() {
        let c = catalog();
        let latest = "Absolutely splendid, marvellous, proceed immediately";
        assert!(is_follow_up(latest, &c.index));
        assert!(!is_follow_up(QUESTION, &c.index));
        let earlier = vec![QUESTION.to_owned()];
        assert!(query(latest, &earlier, None, &c.index).starts_with(QUESTION));
    }

    #[test]
    fn a_few_terms_that_go_back_follow_up_and_more_rank_on_their_own() {
        let c = catalog();
        // Three to five terms, one of them a word that goes back: a retry, whatever tool
        // words it has ("restart", "deploy").
        for latest in [
            "That failed, restart it one more time.",
            "Deploy it again to the same environment",
        ] {
            assert!(is_follow_up(latest, &c.index), "{latest}");
        }
        // Six terms or more rank on their own words, "it" or not.
        let long = "Send it as an email message to the finance recipient list";
        assert!(!is_follow_up(long, &c.index));
        // Without such a word, a text of three terms ranks on its own.
        assert!(!is_follow_up("Restart the failed Kubernetes pod", &c.index));
    }

    #[test]
    fn the_follow_ups_words_still_count() {
        let c = catalog();
        // "weather" at half weight beside the question's three words at full weight: the two
        // tools lead. ("too" points back: without it, "and the weather?" is a new topic.)
        let q = query(
            "and the weather too?",
            &["Book a flight ticket to Paris".to_owned()],
            None,
            &c.index,
        );
        let mut top = names(&c, &q);
        top.sort();
        assert_eq!(top, ["book_flight", "get_weather"]);
        let weights: Vec<f32> = crate::index::turn_weights(&q).map(|(_, w)| w).collect();
        assert_eq!(weights, [1.0, 0.5]);
    }

    #[test]
    fn a_short_new_topic_ranks_on_its_own() {
        let c = catalog();
        let earlier = vec![QUESTION.to_owned()];
        for latest in [
            "And the weather in Lisbon?",
            "What about email?",
            "Restart pods",
        ] {
            assert!(!is_follow_up(latest, &c.index), "{latest}");
            let q = query(latest, &earlier, None, &c.index);
            assert_eq!(own_words(&q), latest);
            assert_eq!(names(&c, &q)[0], names(&c, latest)[0], "{latest}");
        }
        assert_eq!(names(&c, "And the weather in Lisbon?")[0], "get_weather");
        // A topic of its own is a question a later follow-up goes back to.
        let earlier = vec!["What about email?".to_owned(), QUESTION.to_owned()];
        let q = query("Yes, go ahead.", &earlier, None, &c.index);
        assert_eq!(q, "What about email?\n\u{1e}Yes, go ahead.");
        assert_eq!(names(&c, &q)[0], "send_email");
    }

    #[test]
    fn a_word_that_points_back_keeps_a_short_text_a_follow_up() {
        let c = catalog();
        let earlier = vec![QUESTION.to_owned()];
        for latest in [
            "Do the same for the flight",
            "Restart it",
            "Weather again",
            "Send an EMAIL TOO",
            "What about the other page?",
        ] {
            assert!(is_follow_up(latest, &c.index), "{latest}");
            assert!(query(latest, &earlier, None, &c.index).starts_with(QUESTION));
        }
        // Whole words only: "items" is not "it", nor "sameday" "same".
        assert!(!refers_back("items sameday"));
        assert!(refers_back("(again)"));
        assert!(refers_back("OK, go on.") && refers_back("Go  ON"));
        assert!(!refers_back("go to the page on GitHub") && !refers_back("on, go"));
    }

    #[test]
    fn a_word_many_tools_have_names_no_topic() {
        let tools: Vec<String> = (0..10)
            .map(|i| {
                let what = if i < 2 { "report" } else { "other thing" };
                tool(&format!("tool_{i}"), &format!("Makes a {what} number {i}"))
            })
            .collect();
        let array = format!("[{}]", tools.join(","));
        let c = Catalog::build(Dialect::OpenaiChat, &array, FieldWeights::default()).unwrap();
        // "report" is in 2 of 10 tools, more than a tenth: a kind of thing, not a topic.
        assert!(is_follow_up("And the report?", &c.index));
        assert!(!is_follow_up("And tool 3?", &c.index));
        // A word no tool has names nothing either.
        assert!(is_follow_up("And Lisbon?", &c.index));
    }

    #[test]
    fn weak_turns_between_join_after_the_follow_up() {
        let c = catalog();
        let earlier: Vec<String> = ["Try again", " ", "Yes", QUESTION, "Book a flight ticket"]
            .map(String::from)
            .to_vec();
        let q = query("Go on", &earlier, None, &c.index);
        assert_eq!(
            q,
            format!("{QUESTION}\n\u{1e}Go on\n\u{1e}Try again\n\u{1e}Yes")
        );
        assert_eq!(readable(&q), format!("{QUESTION}\nGo on\nTry again\nYes"));
        // No question within MAX_EARLIER turns: the weak ones, most recent first.
        let weak: Vec<String> = ["a one", "b four", "c three", QUESTION]
            .map(String::from)
            .to_vec();
        let q = query("ok", &weak, None, &c.index);
        assert_eq!(q, "ok\n\u{1e}a one\n\u{1e}b four\n\u{1e}c three");
    }

    #[test]
    fn after_an_ask_a_reply_is_ranked_with_its_question_whatever_its_words() {
        let c = catalog();
        let earlier = vec![QUESTION.to_owned()];
        let ask = Some("I can deploy it now. Shall I go ahead?");
        // "page" and "email" name tools: by their words alone, new topics.
        for latest in ["page me", "email me when done", "k", "👍"] {
            let q = query(latest, &earlier, ask, &c.index);
            assert_eq!(q, format!("{QUESTION}\n\u{1e}{latest}"), "{latest}");
            assert_eq!(names(&c, &q)[0], "deploy_service", "{latest}");
        }
        assert!(!is_follow_up("page me", &c.index) && !is_follow_up("Restart pods", &c.index));
        // After a turn that hands back, the same short topic ranks on its own words.
        for said in ["Done. Anything else?", "Deployed.", "Here you go!"] {
            let q = query("Restart pods", &earlier, Some(said), &c.index);
            assert_eq!(q, format!("Restart pods\n\u{1f}{QUESTION}"));
        }
        // A reply that says more than its question is a request of its own.
        let short = vec!["Deploy billing".to_owned()];
        let longer = "yes, and then restart the pod and send an email";
        let q = query(longer, &short, ask, &c.index);
        assert_eq!(q, format!("{longer}\n\u{1f}Deploy billing"));
        // No earlier turn: the text alone, whatever was asked.
        assert_eq!(query("k", &[], ask, &c.index), "k");
    }

    #[test]
    fn the_question_after_a_text_on_its_own_orders_only_what_its_words_leave() {
        let c = catalog();
        let earlier = vec![QUESTION.to_owned()];
        let q = query("Restart pods", &earlier, Some("Done."), &c.index);
        let ranked = c.index.rank(&q);
        let alone = c.index.rank("Restart pods");
        // The text's one match keeps its place and, to the bit, its score's order…
        assert_eq!(ranked[0].entry, alone[0].entry);
        assert!(ranked[0].score > 1.0 && ranked[1].score < 0.01);
        // … and the question's tool comes next, where the catalog's order put the first tool.
        assert_eq!(names(&c, &q)[1], "deploy_service");
        assert_eq!(names(&c, "Restart pods")[1], "book_flight");
        assert_eq!(readable(&q), format!("Restart pods\n{QUESTION}"));
        // A mark of the user's own is a space, in every turn.
        let earlier = ["deploy\u{1f}the service to production".to_owned()];
        let q = query("a\u{1f}b pods", &earlier, None, &c.index);
        assert_eq!(q, "a b pods\n\u{1f}deploy the service to production");
    }

    #[test]
    fn a_mark_in_user_text_is_a_space() {
        let c = catalog();
        assert_eq!(
            query("deploy\u{1e}service now please", &[], None, &c.index),
            "deploy service now please"
        );
        let q = query("ok", &["x\u{1e}y".to_owned()], None, &c.index);
        assert_eq!(q, "ok\n\u{1e}x y");
        let question = "deploy\u{1e}the service to production";
        let q = query("ok", &[question.to_owned()], None, &c.index);
        assert_eq!(q, "deploy the service to production\n\u{1e}ok");
    }

    #[test]
    fn an_earlier_turn_scores_at_half_weight() {
        let c = catalog();
        let score = |q: &str, name: &str| {
            let ranked = c.index.rank(q);
            ranked
                .iter()
                .find(|s| matches!(&c.draft.entries[s.entry], Entry::Function(t) if t.name == name))
                .unwrap()
                .score
        };
        let alone = score("Restart the Kubernetes pod", "restart_pod");
        assert!(alone > 0.0);
        let joined = score("ok\n\u{1e}Restart the Kubernetes pod", "restart_pod");
        assert_eq!(joined, alone * crate::index::TURN_DECAY);
        // A term of both turns counts once, at the first turn's weight.
        let both = score("pod\n\u{1e}pod", "restart_pod");
        assert_eq!(both, score("pod", "restart_pod"));
        assert!(JOINER.ends_with(TURN_MARK));
    }
}
