//! Follow-ups and topic shifts generated from a grammar, not picked: what a decision about a
//! short latest text ([`crate::followup`]) must hold on phrasings nobody wrote down.
//!
//! Each question of a dataset gets a catalog of its own ([`CATALOG`] tools by default: its
//! relevant tools, those of an unrelated question, and tools drawn at random, in a shuffled
//! order, as an agent's catalog mixes them) and one conversation of each [`Family`]:
//! - **replies** after the assistant asks to go on: confirmations of one to four
//!   words from [`OPENERS`], [`ACTIONS`] and [`TAILS`] (some words of them are words tools
//!   have: "run", "start", "send", "fine"), with and without punctuation; confirmations in other
//!   languages or an emoji; retries ("That failed, run it once more."); "the same for X".
//!   Each needs the question's tools.
//! - **topic shifts** after an unrelated question and the assistant handing back: a short topic
//!   in one or two of the question's rarest words, or three words of it as written, in a form
//!   of [`TOPIC_FORMS`]; or the whole question. Each needs its own tools.
//!
//! What the assistant says before each comes from an [`Assistant`] source: five grammars
//! written blind (`grammars`: the reading of the assistant's turn was revised on four of them;
//! one is held out), the fourteen turns it was first written beside, or turns in other
//! languages.
//!
//! Every draw comes from a generator seeded by the question's place and the family, so a run
//! is repeatable. Which words are drawn is fixed by the lists below, written once for every
//! dataset; no list of the decision's own (the words that point back, what the reading of the
//! assistant's turn looks for) is read here.
//!
//! Beside the filter's ranking each row reports the margin of every other form of
//! [`super::forms`] measured for issue 54 and not shipped.

use super::forms::{self, FORMS, Form};
use super::grammars::{self, Grammar, Situation};
use super::{Dataset, EvalError, distinct_relevant, score};
use crate::config::Config;
use crate::dialects::Dialect;
use crate::pipeline::Engine;
use crate::rank::Catalog;
use std::collections::{HashMap, HashSet};

/// Tools in each question's catalog, by default.
pub const CATALOG: usize = 200;

/// What the assistant says before a reply: mostly questions, some statements that ask all
/// the same.
pub const ASKS: &[&str] = &[
    "Shall I go ahead?",
    "Should I proceed?",
    "Do you want me to continue?",
    "Want me to do that?",
    "I can run it now. Go ahead?",
    "Ready. Shall I start?",
    "Let me know if I should proceed.",
    "I will wait for your confirmation.",
];

/// What the assistant says after the unrelated question, before a topic shift.
pub const ANSWERS: &[&str] = &[
    "Done. Is there anything else?",
    "Done.",
    "Here you go.",
    "Anything else?",
    "All set. What next?",
    "That is finished.",
];

pub const OPENERS: &[&str] = &[
    "yes",
    "yeah",
    "yep",
    "ok",
    "okay",
    "sure",
    "k",
    "alright",
    "great",
    "perfect",
    "sounds good",
    "fine",
    "cool",
    "right",
    "absolutely",
    "definitely",
];
pub const ACTIONS: &[&str] = &[
    "go",
    "go ahead",
    "do it",
    "ship it",
    "proceed",
    "continue",
    "carry on",
    "run it",
    "send it",
    "make it so",
    "let's go",
    "go for it",
    "please do",
    "do that",
    "execute",
    "start",
];
pub const TAILS: &[&str] = &["please", "pls", "thanks", "thank you", "now", "asap"];
/// Confirmations in other languages (French, Spanish, German, Portuguese, Japanese, Chinese,
/// Russian, Turkish, Polish).
pub const OTHER_LANGUAGES: &[&str] = &[
    "oui",
    "vas-y",
    "d'accord",
    "sí",
    "adelante",
    "claro",
    "ja",
    "mach das",
    "sim",
    "pode ser",
    "はい",
    "好的",
    "继续",
    "да",
    "давай",
    "evet",
    "tak",
];
pub const EMOJI: &[&str] = &["👍", "✅", "🚀", "👌", "🙏", "💯"];
const RETRY_OPENERS: &[&str] = &[
    "that failed,",
    "hmm,",
    "no,",
    "error.",
    "didn't work,",
    "still broken,",
];
const RETRY_VERBS: &[&str] = &["try", "retry", "redo", "run", "do", "attempt"];
const RETRY_OBJECTS: &[&str] = &["", "it", "that", "this"];
const RETRY_ADVERBS: &[&str] = &["again", "once more", "one more time"];
const SAME_FORMS: &[&str] = &[
    "the same for X",
    "do the same for X",
    "same for X",
    "now for X",
    "and for X?",
    "X too",
    "repeat that for X",
    "same thing but for X",
    "now X",
];
const SAME_PLACES: &[&str] = &[
    "staging",
    "production",
    "the Berlin office",
    "tomorrow",
    "next week",
    "my other account",
    "Bob",
    "the second one",
    "last month",
    "Alice",
    "the team",
];
pub const TOPIC_FORMS: &[&str] = &[
    "What about X?",
    "And X?",
    "X?",
    "X",
    "How about X?",
    "Now X.",
    "X please",
    "Next: X",
    "and X",
];
const ENDINGS: &[&str] = &["", ".", "!", "", "!!"];

/// The kinds of conversation, replies first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    Confirmation,
    OtherLanguage,
    Retry,
    SameFor,
    TopicWord,
    TopicWords,
    TopicPhrase,
    NewQuestion,
}

impl Family {
    pub const ALL: [Family; 8] = [
        Family::Confirmation,
        Family::OtherLanguage,
        Family::Retry,
        Family::SameFor,
        Family::TopicWord,
        Family::TopicWords,
        Family::TopicPhrase,
        Family::NewQuestion,
    ];

    /// A reply needs the question's tools; a topic shift its own.
    pub fn is_reply(self) -> bool {
        matches!(
            self,
            Family::Confirmation | Family::OtherLanguage | Family::Retry | Family::SameFor
        )
    }

    /// How far below its reference a family's Recall@k may be (issue 54's margins).
    pub fn within(self) -> f64 {
        if self.is_reply() { 0.02 } else { 0.05 }
    }

    pub fn name(self) -> &'static str {
        match self {
            Family::Confirmation => "confirmation",
            Family::OtherLanguage => "other_language",
            Family::Retry => "retry",
            Family::SameFor => "same_for",
            Family::TopicWord => "topic_word",
            Family::TopicWords => "topic_words",
            Family::TopicPhrase => "topic_phrase",
            Family::NewQuestion => "new_question",
        }
    }
}

/// A small seeded generator (xorshift64): the same draws on every run and machine.
struct Draw(u64);

impl Draw {
    fn new(seed: u64) -> Draw {
        // Never zero, and nearby seeds far apart.
        Draw(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        let at = self.below(from.len());
        from.get(at).copied().unwrap_or_default()
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

fn capitalised(draw: &mut Draw, text: String) -> String {
    if !draw.chance(50) {
        return text;
    }
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => text,
    }
}

fn ended(draw: &mut Draw, text: String) -> String {
    let ending = draw.pick(ENDINGS);
    capitalised(draw, text) + ending
}

fn confirmation(draw: &mut Draw) -> String {
    loop {
        let mut parts = Vec::new();
        if draw.chance(60) {
            parts.push(draw.pick(OPENERS));
        }
        if draw.chance(60) {
            parts.push(draw.pick(ACTIONS));
        }
        if draw.chance(30) {
            parts.push(draw.pick(TAILS));
        }
        let words: usize = parts.iter().map(|p| p.split(' ').count()).sum();
        if parts.is_empty() || words > 4 {
            continue;
        }
        let joiner = if draw.chance(50) { ", " } else { " " };
        return ended(draw, parts.join(joiner));
    }
}

fn other_language(draw: &mut Draw) -> String {
    if draw.chance(25) {
        let mut text = draw.pick(EMOJI).to_owned();
        if draw.chance(30) {
            text.push_str(draw.pick(EMOJI));
        }
        return text;
    }
    let mut text = draw.pick(OTHER_LANGUAGES).to_owned();
    if draw.chance(30) {
        text = format!("{text} {}", draw.pick(OTHER_LANGUAGES));
    }
    if draw.chance(20) {
        text = format!("{text} {}", draw.pick(EMOJI));
    }
    ended(draw, text)
}

fn retry(draw: &mut Draw) -> String {
    let mut words = Vec::new();
    if draw.chance(40) {
        words.push(draw.pick(RETRY_OPENERS));
    }
    words.push(draw.pick(RETRY_VERBS));
    let object = draw.pick(RETRY_OBJECTS);
    if !object.is_empty() {
        words.push(object);
    }
    words.push(draw.pick(RETRY_ADVERBS));
    ended(draw, words.join(" "))
}

fn same_for(draw: &mut Draw) -> String {
    let form = draw.pick(SAME_FORMS);
    let place = draw.pick(SAME_PLACES);
    capitalised(draw, form.replace('X', place))
}

/// Three words of `question` as written (longer than three letters), from a drawn place.
fn phrase_of(question: &str, draw: &mut Draw) -> Option<String> {
    let words: Vec<&str> = question
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() > 3)
        .collect();
    let start = draw.below(words.len());
    let chosen = words.get(start..(start + 3).min(words.len()))?;
    (!chosen.is_empty()).then(|| chosen.join(" "))
}

/// Where the assistant's turns come from: a decision that reads them must be measured on
/// turns it was not written from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Assistant {
    /// [`ASKS`] and [`ANSWERS`]: the fourteen turns the reading of the assistant's turn was
    /// first written beside.
    Lists,
    /// Plain closings, a sentence or two: written blind, then used to revise the reading.
    PlainClosings,
    /// Headed turns with bullet details: written blind, then used to revise the reading again.
    HeadedBullets,
    /// A form of the situation in a varied register: written blind, then used to revise the
    /// reading a third time.
    Registers,
    /// Plans, options, command-line prompts and support bots: written blind, measured once as
    /// held out, then used to revise the reading a fourth time.
    PromptsAndPlans,
    /// What each kind of agent product writes: written blind once the reading was final; held
    /// out.
    AgentProducts,
    /// The five grammars' turns in other languages.
    OtherLanguages,
}

impl Assistant {
    pub const ALL: [Assistant; 7] = [
        Assistant::Lists,
        Assistant::PlainClosings,
        Assistant::HeadedBullets,
        Assistant::Registers,
        Assistant::PromptsAndPlans,
        Assistant::AgentProducts,
        Assistant::OtherLanguages,
    ];

    /// The name the CLI reads and the report prints: a grammar's by the order it was written
    /// in, as `docs/BENCHMARKS.md`'s commands and figures name them.
    pub fn name(self) -> &'static str {
        match self {
            Assistant::Lists => "lists",
            Assistant::PlainClosings => "first",
            Assistant::HeadedBullets => "second",
            Assistant::Registers => "third",
            Assistant::PromptsAndPlans => "fourth",
            Assistant::AgentProducts => "fifth",
            Assistant::OtherLanguages => "other_languages",
        }
    }

    pub fn from_name(name: &str) -> Option<Assistant> {
        Assistant::ALL.into_iter().find(|a| a.name() == name)
    }

    /// The source of the held-out grammar (`grammars::HELD_OUT`): what the CLI draws from by
    /// default.
    pub fn held_out() -> Assistant {
        Assistant::ALL
            .into_iter()
            .find(|a| {
                a.grammar()
                    .is_some_and(|g| g.name == grammars::HELD_OUT.name)
            })
            .unwrap_or(Assistant::AgentProducts)
    }

    /// The grammar this source draws English turns from.
    fn grammar(self) -> Option<Grammar> {
        match self {
            Assistant::Lists | Assistant::OtherLanguages => None,
            Assistant::PlainClosings => Some(grammars::PLAIN_CLOSINGS),
            Assistant::HeadedBullets => Some(grammars::HEADED_BULLETS),
            Assistant::Registers => Some(grammars::REGISTERS),
            Assistant::PromptsAndPlans => Some(grammars::PROMPTS_AND_PLANS),
            Assistant::AgentProducts => Some(grammars::AGENT_PRODUCTS),
        }
    }

    /// What the assistant says before a conversation of `family`: it asks to go on before a
    /// reply, hands back before a topic shift.
    fn turn(self, family: Family, draw: &mut Draw) -> String {
        let situation = if family.is_reply() {
            Situation::Ask
        } else {
            Situation::Handback
        };
        if let Some(grammar) = self.grammar() {
            return (grammar.english)(situation, &mut |n| draw.below(n));
        }
        match self {
            Assistant::OtherLanguages => {
                let written = draw.below(grammars::WRITTEN.len());
                let grammar = grammars::WRITTEN
                    .get(written)
                    .unwrap_or(&grammars::HELD_OUT);
                (grammar.other_language)(situation, &mut |n| draw.below(n))
            }
            _ => draw
                .pick(match situation {
                    Situation::Ask => ASKS,
                    Situation::Handback => ANSWERS,
                })
                .to_owned(),
        }
    }
}

/// As its [`Assistant::name`].
impl serde::Serialize for Assistant {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

/// One conversation of `family` for `question` in `catalog`, drawn as [`evaluate_generated`]
/// draws them, from a generator seeded with `seed`: its latest user text and what the
/// assistant said before it (a reply's question is `question`, a topic's another one); none
/// when the question has no word to restate. For tests that send generated conversations
/// through Envoy.
pub fn sample(
    family: Family,
    question: &str,
    catalog: &Catalog,
    assistant: Assistant,
    seed: u64,
) -> Option<(String, String)> {
    conversation(family, question, catalog, assistant, &mut Draw::new(seed))
}

/// The latest user text of `family` for `question`, and what the assistant said before it
/// (from `assistant`); none when the question has no word to restate.
fn conversation(
    family: Family,
    question: &str,
    catalog: &Catalog,
    assistant: Assistant,
    draw: &mut Draw,
) -> Option<(String, String)> {
    let topic = |words: Option<String>, draw: &mut Draw| {
        words.map(|w| draw.pick(TOPIC_FORMS).replace('X', &w))
    };
    let latest = match family {
        Family::Confirmation => Some(confirmation(draw)),
        Family::OtherLanguage => Some(other_language(draw)),
        Family::Retry => Some(retry(draw)),
        Family::SameFor => Some(same_for(draw)),
        Family::TopicWord => topic(rarest_words(question, 1, catalog), draw),
        Family::TopicWords => topic(rarest_words(question, 2, catalog), draw),
        Family::TopicPhrase => {
            let words = phrase_of(question, draw);
            topic(words, draw)
        }
        Family::NewQuestion => Some(question.to_owned()),
    }?;
    Some((latest, assistant.turn(family, draw)))
}

/// The `words` content terms of `question` that the fewest tools of `catalog` have, in the
/// question's order ([`super::restated`] without its "What about").
fn rarest_words(question: &str, words: usize, catalog: &Catalog) -> Option<String> {
    super::restated(question, words, catalog).and_then(|r| {
        r.strip_prefix("What about ")?
            .strip_suffix('?')
            .map(str::to_owned)
    })
}

/// One family's figures.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GeneratedRow {
    pub family: Family,
    pub conversations: usize,
    /// Recall@k of the question alone (a reply's reference).
    pub question: f64,
    /// Recall@k of the latest text alone (a topic shift's reference).
    pub latest_only: f64,
    /// Recall@k as the filter ranks the conversation.
    pub filter: f64,
    /// `filter` less the reference.
    pub margin: f64,
    /// Each form of [`FORMS`] after the filter's: its Recall@k less the reference.
    pub forms: Vec<FormMargin>,
    /// The phrasing with the lowest margin among those drawn at least [`WORST_MIN`] times.
    pub worst: Option<Worst>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FormMargin {
    pub form: String,
    pub margin: f64,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Worst {
    pub text: String,
    pub conversations: usize,
    pub margin: f64,
}

/// A phrasing must be drawn this often for its margin to be reported as the worst.
pub const WORST_MIN: usize = 5;

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GeneratedReport {
    pub dataset: String,
    pub k: usize,
    pub catalog: usize,
    /// The questions' half: `Some(h)` scores the questions at even (0) or odd (1) places.
    pub half: Option<usize>,
    /// Where the assistant's turns came from.
    pub assistant: Assistant,
    /// How the filter read them ([`crate::followup::assistant::asks_to_go_on`]): the turns
    /// before replies read as asking to go on, of all of them, and the turns before topic
    /// shifts read as not asking, of all of them.
    pub asks_read: [usize; 2],
    pub handbacks_read: [usize; 2],
    pub questions: usize,
    pub rows: Vec<GeneratedRow>,
}

#[derive(Default)]
struct Sums {
    conversations: usize,
    question: f64,
    latest_only: f64,
    filter: f64,
    /// Recall summed per form of [`FORMS`] after the filter's.
    forms: Vec<f64>,
    /// Per phrasing (lowercased): conversations and summed margins.
    phrasings: HashMap<String, (usize, f64)>,
}

/// What a generated evaluation measures: `dataset`'s questions of one `half` (or all), each in
/// a catalog of `size` tools, Recall@`k`, the assistant's turns from `assistant`.
#[derive(Clone, Copy, Debug)]
pub struct Setting {
    pub k: usize,
    pub size: usize,
    pub half: Option<usize>,
    pub assistant: Assistant,
}

/// Recall@`k` of every [`Family`] under `setting`, through the filter's pipeline as
/// [`super::evaluate_followups`] sends its conversations, and under every other form of
/// [`FORMS`].
pub fn evaluate_generated(
    dataset: &Dataset,
    config: &Config,
    setting: Setting,
    progress: &mut dyn FnMut(usize),
) -> Result<GeneratedReport, EvalError> {
    let Setting {
        k,
        size,
        half,
        assistant,
    } = setting;
    if k == 0 || size == 0 {
        return Err(EvalError(
            "k and the catalog size must be at least 1".to_owned(),
        ));
    }
    let by_name: HashMap<&str, usize> = dataset
        .tools
        .iter()
        .enumerate()
        .map(|(i, t)| (t.name.as_str(), i))
        .collect();
    let tools_of = |q: &super::Query| -> Vec<usize> {
        distinct_relevant(q)
            .iter()
            .filter_map(|name| by_name.get(name).copied())
            .collect()
    };
    let others: Vec<Form> = FORMS.into_iter().filter(|f| *f != Form::Filter).collect();
    let mut engine = Engine::new(config.clone());
    let weights = engine.weights;
    let mut sums: HashMap<Family, Sums> = HashMap::new();
    let (mut asks_read, mut handbacks_read) = ([0; 2], [0; 2]);
    let mut questions = 0;
    let count = dataset.queries.len();
    for (at, q) in dataset.queries.iter().enumerate() {
        progress(at + 1);
        if half.is_some_and(|h| at % 2 != h) {
            continue;
        }
        let own = tools_of(q);
        let other = (0..count)
            .map(|step| (at + count / 2 + step) % count)
            .filter(|&i| i != at)
            .filter_map(|i| dataset.queries.get(i))
            .map(|o| (o, tools_of(o)))
            .find(|(_, theirs)| !theirs.is_empty() && theirs.iter().all(|t| !own.contains(t)));
        let (Some((other, theirs)), false) = (other, own.is_empty()) else {
            continue;
        };
        questions += 1;
        let mut draw = Draw::new(at as u64);
        let mut chosen: Vec<usize> = own.clone();
        chosen.extend(theirs.iter().filter(|t| !own.contains(t)));
        let target = size.min(dataset.tools.len()).max(chosen.len());
        let mut taken: HashSet<usize> = chosen.iter().copied().collect();
        while chosen.len() < target {
            let pick = draw.below(dataset.tools.len());
            if taken.insert(pick) {
                chosen.push(pick);
            }
        }
        for i in (1..chosen.len()).rev() {
            chosen.swap(i, draw.below(i + 1));
        }
        let lines: Vec<&str> = chosen
            .iter()
            .filter_map(|&t| dataset.tools.get(t).map(|tool| tool.line.as_str()))
            .collect();
        let array = format!("[{}]", lines.join(","));
        let catalog = Catalog::build(Dialect::OpenaiChat, &array, weights).map_err(|p| {
            EvalError(format!(
                "the tools do not form a tools array ({})",
                p.reason()
            ))
        })?;
        // Entry of each chosen tool: the array holds them in `chosen`'s order.
        let relevant: HashSet<usize> = chosen
            .iter()
            .enumerate()
            .filter(|(_, t)| own.contains(t))
            .map(|(entry, _)| entry)
            .collect();
        let recall = |order: &[usize]| {
            let ranks: Vec<Option<usize>> = relevant
                .iter()
                .map(|e| order.iter().take(k).position(|o| o == e).map(|p| p + 1))
                .collect();
            score(&ranks, &[k]).recall.first().copied().unwrap_or(0.0)
        };
        let alone = |text: &str| -> Vec<usize> {
            catalog.index.rank(text).iter().map(|s| s.entry).collect()
        };
        let question_recall = recall(&alone(&q.query));
        for family in Family::ALL {
            let Some((latest, said)) =
                conversation(family, &q.query, &catalog, assistant, &mut draw)
            else {
                continue;
            };
            let earlier = if family.is_reply() {
                q.query.as_str()
            } else {
                other.query.as_str()
            };
            let messages = serde_json::json!([
                {"role": "user", "content": earlier},
                {"role": "assistant", "content": said},
                {"role": "user", "content": latest},
            ]);
            let filter_order = super::followups::filter_ranking(&mut engine, &array, &messages)?;
            let asks = crate::followup::assistant::asks_to_go_on(&said);
            let read = if family.is_reply() {
                &mut asks_read
            } else {
                &mut handbacks_read
            };
            read[0] += usize::from(asks == family.is_reply());
            read[1] += 1;
            let (filter, latest_only) = (recall(&filter_order), recall(&alone(&latest)));
            let reference = if family.is_reply() {
                question_recall
            } else {
                latest_only
            };
            let s = sums.entry(family).or_default();
            s.forms.resize(others.len(), 0.0);
            for (form, sum) in others.iter().zip(s.forms.iter_mut()) {
                if let Some(order) = forms::ranking(*form, &catalog, earlier, &said, &latest) {
                    *sum += recall(&order);
                }
            }
            s.conversations += 1;
            s.question += question_recall;
            s.latest_only += latest_only;
            s.filter += filter;
            let phrasing = s.phrasings.entry(latest.to_lowercase()).or_default();
            phrasing.0 += 1;
            phrasing.1 += filter - reference;
        }
    }
    let rows = Family::ALL
        .iter()
        .filter_map(|&family| {
            let s = sums.get(&family)?;
            let n = s.conversations as f64;
            let (question, latest_only) = (s.question / n, s.latest_only / n);
            let reference = if family.is_reply() {
                question
            } else {
                latest_only
            };
            let worst = s
                .phrasings
                .iter()
                .filter(|(_, (count, _))| *count >= WORST_MIN)
                .map(|(text, &(count, sum))| Worst {
                    text: text.clone(),
                    conversations: count,
                    margin: sum / count as f64,
                })
                .min_by(|a, b| a.margin.total_cmp(&b.margin).then(a.text.cmp(&b.text)));
            let forms = others
                .iter()
                .zip(&s.forms)
                .map(|(form, sum)| FormMargin {
                    form: form.name(),
                    margin: sum / n - reference,
                })
                .collect();
            Some(GeneratedRow {
                family,
                conversations: s.conversations,
                question,
                latest_only,
                filter: s.filter / n,
                margin: s.filter / n - reference,
                forms,
                worst,
            })
        })
        .collect();
    Ok(GeneratedReport {
        dataset: dataset.name.clone(),
        k,
        catalog: size,
        half,
        assistant,
        asks_read,
        handbacks_read,
        questions,
        rows,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::*;

    #[test]
    fn the_grammar_draws_the_same_phrasings_every_run() {
        let draws = |seed| {
            let mut d = Draw::new(seed);
            [
                confirmation(&mut d),
                other_language(&mut d),
                retry(&mut d),
                same_for(&mut d),
            ]
        };
        assert_eq!(draws(7), draws(7));
        assert_ne!(draws(7), draws(8));
        for seed in 0..200 {
            let [c, _, r, s] = draws(seed);
            let words = c.split_whitespace().count();
            assert!((1..=4).contains(&words), "{c}");
            assert!(
                RETRY_ADVERBS.iter().any(|a| r.to_lowercase().contains(a)),
                "{r}"
            );
            assert!(!s.contains('X'), "{s}");
        }
    }

    /// Every grammar of assistant turns (each written blind, without tests of its own): the
    /// same turns for the same seed; in each situation, hundreds of distinct English turns of
    /// 2,000, at least a third of them not ending in a question mark, none empty or with a
    /// slot left unfilled; whole turns in other languages.
    #[test]
    fn every_grammar_of_assistant_turns_is_varied_and_filled() {
        for grammar in grammars::WRITTEN {
            let (name, english, other) = (grammar.name, grammar.english, grammar.other_language);
            for situation in [Situation::Ask, Situation::Handback] {
                let draws = |seed: u64| {
                    let mut d = Draw::new(seed);
                    (0..2000)
                        .map(|_| english(situation, &mut |n| d.below(n)))
                        .collect::<Vec<_>>()
                };
                let turns = draws(11);
                assert_eq!(turns, draws(11), "{name}");
                let distinct: HashSet<&String> = turns.iter().collect();
                assert!(
                    distinct.len() >= 200,
                    "{name} {situation:?}: {}",
                    distinct.len()
                );
                let questions = turns
                    .iter()
                    .filter(|t| {
                        t.trim_end_matches(|c: char| !c.is_alphanumeric() && c != '?')
                            .ends_with('?')
                    })
                    .count();
                assert!(
                    questions * 3 <= turns.len() * 2,
                    "{name} {situation:?}: {questions}"
                );
                for t in &turns {
                    assert!(
                        !t.trim().is_empty() && !t.contains(['{', '}']),
                        "{name}: {t:?}"
                    );
                }
                let mut d = Draw::new(5);
                for _ in 0..100 {
                    assert!(
                        !other(situation, &mut |n| d.below(n)).trim().is_empty(),
                        "{name}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_held_out_source_draws_from_the_held_out_grammar() {
        let held_out = Assistant::held_out();
        assert_eq!(
            held_out.grammar().map(|g| g.name),
            Some(grammars::HELD_OUT.name)
        );
        assert_eq!(held_out.name(), "fifth");
    }

    #[test]
    fn a_phrase_is_three_of_the_questions_words() {
        let mut d = Draw::new(3);
        let p = phrase_of(
            "Please convert the quarterly report into a PDF file",
            &mut d,
        )
        .unwrap();
        let n = p.split(' ').count();
        assert!((1..=3).contains(&n), "{p}");
        assert!(p.split(' ').all(|w| w.len() > 3), "{p}");
        assert_eq!(phrase_of("a to be", &mut d), None);
    }

    #[test]
    fn every_family_is_scored_in_catalogs_of_the_size_asked() {
        let d = crate::offline::eval::tests::followup_dataset();
        let config = Config::from_json(br#"{"top_k":1,"min_tools":0}"#).unwrap();
        let setting = |half| Setting {
            k: 1,
            size: 3,
            half,
            assistant: Assistant::held_out(),
        };
        let r = evaluate_generated(&d, &config, setting(None), &mut |_| {}).unwrap();
        assert_eq!((r.questions, r.catalog), (2, 3));
        let families: Vec<Family> = r.rows.iter().map(|row| row.family).collect();
        assert_eq!(families, Family::ALL);
        let new_question = r.rows.last().unwrap();
        // The whole question after another: its own tool, alone and through the filter.
        assert_eq!(new_question.latest_only, 1.0);
        assert_eq!(new_question.filter, 1.0);
        let halves: Vec<usize> = [0, 1]
            .iter()
            .map(|&h| evaluate_generated(&d, &config, setting(Some(h)), &mut |_| {}).unwrap())
            .map(|r| r.questions)
            .collect();
        assert_eq!(halves, [1, 1]);
    }
}
