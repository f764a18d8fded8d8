//! What the assistant said just before the latest user text: whether it asked to go on.
//!
//! "Yes", "k", "do it", "start", "👍" after "Shall I go ahead?" answer the assistant, whatever
//! words some tool has; the same words after "Done. Anything else?" may start something new.
//! The user's text alone cannot tell them apart in a catalog of hundreds of tools (a reply
//! shares a word with a few tools by accident as often as a new topic names one:
//! `docs/BENCHMARKS.md`, "Follow-ups that hold on phrasings nobody wrote down"); what the
//! assistant said can. [`asks_to_go_on`] reads the last sentence of that turn (a sign-off
//! line such as "— Support Team" is not one; code spans are not read), in this order:
//!
//! 1. A prompt of answers in brackets asks, in any script (`Proceed? [y/N]`, `(yes/no)`).
//! 2. A sentence that **invites a new request** does not ask ("Is there anything else?",
//!    "What would you like to do next?", "How can I help?"), unless it names going on ("I can
//!    retry, or we can try something else.").
//! 3. One that names **a step of the assistant's that waits on the user** asks ("Shall I
//!    start?", "Want me to retry?", "I'll run it once you give the word.", "Proceed?",
//!    "Your call.", "Type `y` to continue.", "I won't change anything until you sign off.").
//! 4. A question that **checks the result** does not ("Does this answer your question?",
//!    "Is that what you needed?"), unless the sentence before it names a step or the turn laid
//!    out a plan ("I'll deploy it. Does that look right?").
//! 5. Otherwise **a question asks**, in any language and script (`?`, `？`, `؟`, Greek `;`).
//! 6. A statement does not ("Done.", "You can rerun it anytime."), unless it is a short
//!    afterword to what asks ("Which branch should I use? The rest is set up.").
//!
//! The question mark is the one signal of every language; the other steps read English words,
//! so a turn in another language asks when it ends in a question mark ("¿Algo más?" included).
//! The words were revised on four sets of assistant turns generated from grammars written
//! blind, and measured on a fifth (`docs/BENCHMARKS.md`, "Follow-ups, second round").
//! A reading that errs costs less one way than the other: a reply taken for a new topic falls
//! back to the rule of its words ([`super::is_follow_up`]), which keeps most replies (those
//! with no word a tool has), while a hand-back taken for a question joins the new topic after
//! it to the task before it.

/// How the assistant's turn reads: whether it asks to go on, and by what.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ask {
    /// It does not ask (a hand-back, a statement, or no turn).
    No,
    /// Its words ask: an answer prompt, a step that waits on the user, a check of a step.
    Named,
    /// Only its question mark asks: the one sign every language has, which ends a hand-back
    /// ("¿Algo más?", "他に何かありますか？") as often as an ask. What follows it is read by
    /// what it says against the question ([`super::query`]), not taken for a reply.
    QuestionMark,
}

/// Whether the assistant's turn `said` (the message just before the latest user text) asks
/// the user to go on with the task in hand, so that a short text after it answers it.
pub fn asks_to_go_on(said: &str) -> bool {
    reads(said) != Ask::No
}

/// How the assistant's turn `said` asks to go on, if it does ([`asks_to_go_on`]'s steps).
pub fn reads(said: &str) -> Ask {
    let said = without_sign_off(said);
    if ends_in_answer_prompt(said) {
        return Ask::Named;
    }
    let Some((sentence, question)) = last_sentence(said) else {
        return Ask::No;
    };
    let named = |asks: bool| if asks { Ask::Named } else { Ask::No };
    let before = said
        .rfind(sentence)
        .and_then(|at| said.get(..at))
        .unwrap_or("");
    let last = Words::of(sentence);
    // "Anything else?" hands back; "I can retry, or we can try something else." offers a
    // step of the task.
    if last.invites() && !last.going_on() {
        return Ask::No;
    }
    if last.waiting_step(question) {
        return Ask::Named;
    }
    if question && last.checks_result() {
        // A check of a step named just before it, or of a plan laid out, asks: "I'll deploy
        // it. Does that look right?", "Plan: … Does this look right?".
        let step_before = last_sentence(before).is_some_and(|(s, q)| Words::of(s).waiting_step(q));
        return named(step_before || Words::of(before).plans());
    }
    if question {
        return Ask::QuestionMark;
    }
    // A short statement after what asks ("Which branch should I use? The rest is set up.",
    // "I'll need the cutoff date. Everything else is ready.") leaves the ask standing.
    let Some((previous, asked)) = last_sentence(before) else {
        return Ask::No;
    };
    let previous = Words::of(previous);
    named(
        last.0.len() <= AFTERWORD_WORDS
            && !previous.invites()
            && if asked {
                !previous.checks_result() || previous.waiting_step(true)
            } else {
                previous.consent()
            },
    )
}

/// At most this many words make a statement after an ask an afterword that leaves it standing
/// ("Everything else is ready to go.", "Once I know, it takes under a minute.").
const AFTERWORD_WORDS: usize = 10;

/// Whether `said` ends in a prompt of answers in brackets, as command-line tools write them:
/// `[y/N]`, `(yes/no)`, `(s/n)`: two to four short answers, in any script, split by `/`.
fn ends_in_answer_prompt(said: &str) -> bool {
    let text = said.trim_end_matches(|c: char| c.is_whitespace() || c == '.' || c == ':');
    let Some(open) = (match text.chars().last() {
        Some(']') => Some('['),
        Some(')') => Some('('),
        _ => None,
    }) else {
        return false;
    };
    let Some(inner) = text
        .rfind(open)
        .and_then(|at| text.get(at + 1..text.len() - 1))
    else {
        return false;
    };
    let answers: Vec<&str> = inner.split('/').map(str::trim).collect();
    (2..=4).contains(&answers.len())
        && answers
            .iter()
            .all(|a| (1..=6).contains(&a.chars().count()) && a.chars().all(char::is_alphabetic))
}

/// `said` without the last lines that sign it off ("Thanks,\nMaya from Support", "— Ops
/// Bot"): up to two lines of at most four words with no mark that ends a sentence, after a
/// line that has one or is a sentence without it.
fn without_sign_off(said: &str) -> &str {
    let whole = said.trim_end();
    let mut text = whole;
    for _ in 0..2 {
        let Some((before, line)) = text.rsplit_once('\n') else {
            break;
        };
        if !signs_off(line) {
            break;
        }
        let before = before.trim_end();
        let ended = before
            .trim_end_matches(|c: char| !c.is_alphanumeric() && !ends_sentence(c))
            .ends_with(ends_sentence);
        if ended {
            return before;
        }
        text = before;
    }
    // Lines taken off after a sentence without its mark ("Waiting on your sign-off\n— Ops
    // Bot"): that sentence ends the turn.
    let last_line = text.rsplit('\n').next().unwrap_or(text);
    if text.len() < whole.len() && !signs_off(last_line) {
        text
    } else {
        said
    }
}

/// Whether `line` could sign a turn off: at most four words, no mark that ends a sentence,
/// and no step that waits on the user ("Proceed when ready" is no signature).
fn signs_off(line: &str) -> bool {
    let marked = line.contains(ends_sentence);
    let line = line.trim_matches(|c: char| !c.is_alphanumeric());
    !marked
        && !line.is_empty()
        && line.split_whitespace().count() <= 4
        && !Words::of(line).waiting_step(false)
}

/// Whether the last sentence of `said` ends in a question mark: the reading of
/// [`asks_to_go_on`] that needs no language.
pub fn ends_in_question(said: &str) -> bool {
    last_sentence(without_sign_off(said)).is_some_and(|(_, question)| question)
}

/// The last sentence of `text` and whether it is a question, after what follows its last
/// word or mark (closing quotes, markdown, an emoji); `None` when `text` has no word.
fn last_sentence(text: &str) -> Option<(&str, bool)> {
    // Line breaks and spaces between the closing marks count as neither ("Go ahead? \n").
    let text = text.trim_end_matches(|c: char| {
        c.is_whitespace() || (!c.is_alphanumeric() && !ends_sentence(c))
    });
    let end = text.trim_end_matches(|c: char| ends_sentence(c) || c.is_whitespace());
    let question = text.get(end.len()..)?.chars().any(is_question_mark);
    // The sentence starts after the last mark that ends one: one followed by a space (so
    // "report.pdf" and "v1.2" stay whole), perhaps after what closes it (`**Done.** What
    // next?`, `"Done." Next?`), or one of the marks written without a space.
    let mut start = 0;
    let mut mark: Option<(usize, char)> = None;
    for (at, c) in end.char_indices() {
        if let Some((p, m)) = mark {
            if c.is_whitespace() || !spaced(m) {
                start = p + m.len_utf8();
                mark = None;
            } else if !closes(c) {
                mark = None;
            }
        }
        if ends_sentence(c) {
            mark = Some((at, c));
        }
    }
    let sentence = end.get(start..)?.trim();
    sentence
        .chars()
        .any(char::is_alphanumeric)
        .then_some((sentence, question))
}

/// A mark that ends a sentence (a line break does too).
fn ends_sentence(c: char) -> bool {
    matches!(c, '.' | '!' | '\n' | '…' | '。' | '！' | '｡') || is_question_mark(c)
}

/// What may close a sentence after its mark: markdown's emphasis and code, quotes, brackets.
fn closes(c: char) -> bool {
    matches!(
        c,
        '*' | '_' | '`' | '~' | '"' | '\'' | '”' | '’' | '»' | ')' | ']'
    )
}

/// A mark that ends a sentence only when a space follows it (Latin punctuation); the CJK
/// marks and a line break end one wherever they stand.
fn spaced(c: char) -> bool {
    matches!(c, '.' | '!' | '?' | '…')
}

/// A question mark: Latin and CJK (full width), Arabic, Greek, Ethiopic, and the combined
/// forms.
fn is_question_mark(c: char) -> bool {
    matches!(
        c,
        '?' | '？' | '؟' | '\u{37e}' | '⁇' | '⁈' | '⁉' | '‽' | '፧'
    )
}

/// The lowercased words of a text (letters, digits and apostrophes), and what they say.
/// Every reading here is English.
struct Words(Vec<String>);

impl Words {
    /// The words of `text` outside its code spans (`` `./apply.sh --confirm` `` is no prose).
    fn of(text: &str) -> Words {
        let word = |w: &str| {
            let w = w.to_lowercase();
            if w.contains('’') {
                w.replace('’', "'")
            } else {
                w
            }
        };
        Words(
            text.split('`')
                .step_by(2)
                .flat_map(|prose| {
                    prose.split(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '’'))
                })
                .filter(|w| !w.is_empty())
                .map(word)
                .collect(),
        )
    }

    fn has(&self, word: &str) -> bool {
        self.0.iter().any(|w| w == word)
    }

    fn starting(&self, prefix: &str) -> bool {
        self.0.iter().any(|w| w.starts_with(prefix))
    }

    /// `first` followed by one of `then`.
    fn pair(&self, first: &str, then: &[&str]) -> bool {
        self.0
            .windows(2)
            .any(|p| matches!(p, [x, y] if x == first && then.contains(&y.as_str())))
    }

    /// Asks for something "else" ("Is there anything else?", "Let me know if you need
    /// anything else."), or what comes next ("What next?", "What would you like to do
    /// next?"; a step of the task asked about starts otherwise: "Shall I move on to the next
    /// step?").
    fn invites(&self) -> bool {
        let open = self
            .0
            .first()
            .is_some_and(|w| matches!(w.as_str(), "what" | "what's" | "whats" | "how" | "where"));
        // An offer of help is an invitation too ("How can I help?", "Happy to help
        // further."), unless it names going on.
        let helps = (self.has("help") || self.has("assist"))
            && (open || self.pair("to", &["help", "assist"]) || self.has("further"));
        // Support offered if something is wrong ("If anything looks off, tell me.").
        let trouble = self.has("if")
            && [
                "off", "wrong", "issue", "issues", "problem", "problems", "trouble", "unclear",
            ]
            .iter()
            .any(|w| self.has(w));
        let next = open && self.has("next")
            || self.pair("what's", &["next"])
            || self.pair("whats", &["next"])
            || self.0 == ["next"];
        // "Anything else?", "What else can I do?"; not "Everything else is ready."
        let something_else = [
            "anything",
            "something",
            "anyone",
            "someone",
            "what",
            "who",
            "where",
            "how",
        ]
        .iter()
        .any(|w| self.pair(w, &["else"]));
        something_else || next || helps || trouble
    }

    /// A word of going on with the task ("proceed", "retry", "start", "go ahead").
    fn going_on(&self) -> bool {
        [
            "proceed", "continue", "retry", "retrying", "rerun", "start", "begin",
        ]
        .iter()
        .any(|w| self.has(w))
            || self.pair("go", &["ahead"])
            || self.has("go-ahead")
    }

    /// A step of the assistant's that waits on the user: the assistant as the one who would
    /// act ("Shall I …", "Should I …", "Want me to …", "I'll … once you confirm", "If you'd
    /// like, I can …", "Happy to do that if you want."), or a word of going on or of the
    /// user's consent ("Proceed?", "Retry?", "Please confirm.", "Say the word.", "Your call.",
    /// "Ready when you are.", "Pausing here before the next batch.", "Let me know.").
    fn waiting_step(&self, question: bool) -> bool {
        let assistant_acts = || {
            self.offers_to_act()
                || self.pair("shall", &["i", "we"])
                || self.pair("should", &["i", "we"])
                || self.pair("can", &["i"])
                || self.pair("may", &["i"])
                || self.has("i'll")
                || self.pair("me", &["to"])
                || self.pair("want", &["me"])
                || self.pair("like", &["me"])
                || self.pair("if", &["i"])
                || self.pair("before", &["i"])
        };
        let users_wish = self.pair("if", &["you"])
            && ["want", "like", "wish", "prefer", "you'd"]
                .iter()
                .any(|w| self.has(w));
        let willing = self.pair("happy", &["to"]) || self.pair("glad", &["to"]);
        let waits_on_user =
            self.pair("let", &["me"]) && self.has("know") || self.pair("tell", &["me"]);
        let again = self.has("again") || self.starting("retr");
        // A word of going on asks in a question ("Proceed?") or as an order to the user's
        // word ("Tell me when to start."); in a report it names what runs ("It retries on its
        // own.", "You can rerun it anytime.").
        let going_on = || {
            self.going_on()
                && (question || waits_on_user || self.first_is_going_on() || self.tells_to_answer())
        };
        let offer = || {
            willing && (users_wish || again || waits_on_user)
                || waits_on_user && (users_wish || self.has("which") || self.has("whether"))
        };
        let just_ask = || self.0 == ["let", "me", "know"];
        // The cheapest first: most asks name the assistant's step ("Shall I …?").
        assistant_acts() || self.consent() || going_on() || offer() || just_ask()
    }

    /// The assistant offers a step of its own: "I can run it now", "I could also archive
    /// them", "I will send it"; not "wherever I could" (the modal names no act).
    fn offers_to_act(&self) -> bool {
        const MODALS: &[&str] = &["shall", "should", "can", "could", "may", "will", "would"];
        self.0
            .windows(3)
            .any(|w| matches!(w, [i, modal, _] if i == "i" && MODALS.contains(&modal.as_str())))
    }

    /// The sentence tells the user how to answer: "Type `y` to continue.", "Reply to
    /// proceed." (the answer in a code span is not read).
    fn tells_to_answer(&self) -> bool {
        self.0.first().is_some_and(|w| {
            matches!(
                w.as_str(),
                "type" | "reply" | "respond" | "enter" | "press" | "click" | "hit"
            )
        })
    }

    /// Words of the user's consent or input that the assistant waits for ("Please confirm.",
    /// "Your call.", "Ready when you are.", "until you sign off", "I'll need the cutoff
    /// date.", "I just need you to choose").
    fn consent(&self) -> bool {
        self.has("confirm")
            || self.pair(
                "your",
                &[
                    "call", "ok", "okay", "approval", "confirmation", "go-ahead", "yes", "sign-off",
                    "signoff", "decision",
                ],
            )
            || self.pair("for", &["confirmation", "approval"])
            || self.starting("approv") && !self.has("approved")
            || self.has("permission")
            || self.pair("sign", &["off"])
            || self.pair("the", &["word"])
            || self.pair("say", &["so", "go", "yes"])
            || self.pair("a", &["yes", "go"])
            || (self.pair("the", &["go"]) || self.pair("your", &["go"])) && self.has("ahead")
            || ["reply", "respond", "type"]
                .iter()
                .any(|w| self.pair(w, &["yes", "with", "go"]))
            || self.pair("up", &["to"]) && self.has("you")
            || self.has("ready") && (self.has("when") || self.has("whenever"))
            || self.pair("once", &["you"])
            || self.pair("until", &["you", "you've", "you're"])
            || self.pair("soon", &["as"]) && self.has("you")
            || self.pair("whenever", &["you", "you're"])
            || self.pair("need", &["you"]) && self.pair("you", &["to"])
            || self.pair("i'll", &["need"])
            || self.pair("i", &["need"])
            || self.starting("paus")
            // "Waiting on your sign-off"; not "Thanks for waiting!"
            || self.starting("wait") && !self.has("thanks") && !self.has("thank")
            || self.pair("stopped", &["here"])
            || self.pair("standing", &["by"])
            || self.pair("hold", &["off"])
            || self.pair("green", &["light"])
            || self.pair("when", &["you"]) && (self.has("want") || self.has("ready"))
    }

    /// The sentence starts with a word of going on: an order or a bare ask ("Proceed.",
    /// "Retry when ready").
    fn first_is_going_on(&self) -> bool {
        self.0
            .first()
            .is_some_and(|w| Words(vec![w.clone()]).going_on())
    }

    /// Says what the assistant is about to do ("I'll deploy it.", "I'm going to …", "The
    /// plan is …", "Next, …").
    fn plans(&self) -> bool {
        self.has("i'll")
            || self.pair("i", &["will"])
            || self.pair("going", &["to"])
            || self.pair("about", &["to"])
            || self.has("plan")
            || self.pair("ready", &["to"])
            || self.pair("next", &["step"])
    }

    /// Asks whether the delivered result suits ("Does this answer your question?", "Did that
    /// work for you?", "Is that what you were after?", "Anything you'd like changed?", "Does
    /// everything look right?").
    fn checks_result(&self) -> bool {
        let aux = |w: &str| {
            matches!(
                w,
                "does" | "do" | "did" | "is" | "was" | "are" | "were" | "has" | "have"
            )
        };
        let deictic = |w: &str| {
            matches!(
                w,
                "that" | "this" | "it" | "everything" | "these" | "those" | "all"
            )
        };
        let about_the_result = match self.0.as_slice() {
            [first, second, ..] => aux(first) && deictic(second),
            _ => false,
        };
        let what_was_wanted = self.pair(
            "you",
            &[
                "needed",
                "wanted",
                "meant",
                "asked",
                "expected",
                "were",
                "had",
                "requested",
                "hoped",
            ],
        );
        // "Does that plan work for you?" asks about what is to come, and "Does this cover all
        // of them, or only some?" for a choice.
        (about_the_result && !self.has("plan") && !self.has("or"))
            || what_was_wanted
            || [
                "answer",
                "answers",
                "helpful",
                "sense",
                "changed",
                "unclear",
                "questions",
            ]
            .iter()
            .any(|w| self.has(w))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_question_asks_to_go_on() {
        for said in [
            "Shall I go ahead?",
            "I can run it now. Go ahead?",
            "Ready. Shall I start?",
            "I'll deploy billing to production. **Would you like me to proceed?**",
            "Shall I convert report.pdf?",
            "Shall I go ahead? 🙂",
            "\"Proceed?\"",
            "¿Continúo?",
            "続けますか？",
            "Продолжить?",
            "هل أتابع؟",
            "Να συνεχίσω\u{37e}",
            "Done. Should I also update the docs?",
            "Shall I move on to the next step?",
        ] {
            assert!(asks_to_go_on(said), "{said}");
        }
    }

    #[test]
    fn an_invitation_or_a_report_does_not() {
        for said in [
            "Done. Is there anything else?",
            "Anything else?",
            "All set. What next?",
            "What would you like to do next?",
            "Done.",
            "Here you go.",
            "That is finished.",
            "Let me know if you need anything else.",
            "Let me know if you have any questions.",
            "Let me know if I can help further.",
            "The file is at /tmp/out.txt",
            "",
            "  \n ",
            "🙂",
            "?",
        ] {
            assert!(!asks_to_go_on(said), "{said}");
        }
    }

    #[test]
    fn a_statement_asks_when_it_asks_for_consent() {
        for said in [
            "Let me know if I should proceed.",
            "I will wait for your confirmation.",
            "Please confirm and I will send it.",
            "Say the word and I'll start.",
            "If you'd like, I can run it now.",
            "Awaiting your approval.",
            "Give me the go-ahead and it's done",
            "Tell me when and I'll start",
            "I can deploy it to staging too if you want.",
        ] {
            assert!(asks_to_go_on(said), "{said}");
        }
        // A short afterword leaves an ask standing, and a hand-back a hand-back.
        for said in [
            "Confirm? Note that it takes five minutes.",
            "Which branch should I base it on? The rest is set up.",
            "I'll need the exact cutoff date. Everything else is ready.",
        ] {
            assert!(asks_to_go_on(said), "{said}");
        }
        for said in [
            "Anything else? Have a great day.",
            "Does this answer your question? Cheers!",
            "Thanks for waiting! Your refund has been processed.",
        ] {
            assert!(!asks_to_go_on(said), "{said}");
        }
    }

    #[test]
    fn a_check_of_the_result_or_an_offer_of_help_is_no_question_to_go_on() {
        for said in [
            "Here's the summary. Does this answer your question?",
            "Did that work for you?",
            "The export is ready. **Is that what you were after?** ✅",
            "How can I help?",
            "Happy to help further.",
            "If anything looks off, tell me and I'll take a look.",
            "All set — what's next?",
            "Done. Next?",
        ] {
            assert!(!asks_to_go_on(said), "{said}");
        }
        // A check of a plan, before the step it names, asks.
        for said in [
            "I'll deploy it to staging. Does that look right?",
            "I could also archive the old files. Would that help?",
            "Keep going?",
            "Mind if I run it?",
            "I've stopped here so you can check it first.",
            "Ping me when you want the next batch.",
        ] {
            assert!(asks_to_go_on(said), "{said}");
        }
    }

    #[test]
    fn a_prompt_of_answers_or_an_order_to_answer_asks() {
        for said in [
            "Next command: `make deploy`.\n\nProceed? [y/N]",
            "About to push to main. Continue? (yes/no)",
            "¿Continuar? (s/n)",
            "Type `y` to continue.",
            "I've staged it. Type `yes` to continue, or `no` to cancel.",
            "Happy to take that on now; just let me know.",
            "I won't make any changes until you sign off on this.",
            "Either works on my end; I just need you to choose",
            "Standing by.",
            "I can retry, or we can try something else.",
            "Does this cover all 3 tables, or only the active ones?",
        ] {
            assert!(asks_to_go_on(said), "{said}");
        }
        for said in [
            "The report is in (see above).",
            "Totals: (12/40)",
            "Everything else is ready.",
            "Click the link to view the report.",
            "I kept the original wording wherever I could. Does that look right?",
            "Done. The permissions update is live.",
        ] {
            assert!(!asks_to_go_on(said), "{said}");
        }
    }

    #[test]
    fn a_sign_off_after_a_sentence_without_its_mark_is_not_read() {
        for said in [
            "Waiting on your sign-off\n\n— Ops Bot",
            "Your approval is the only thing left\n\n— Helpdesk",
            "Let me know when you're ready and I'll run it\n\nBest regards,\nThe Support Team",
            "Let me know if I should keep going\n— Data Team Assistant",
        ] {
            assert!(asks_to_go_on(said), "{said}");
        }
        assert!(!asks_to_go_on("All done\n\nCheers,\nMaya"));
    }

    #[test]
    fn the_last_sentence_is_cut_where_a_mark_and_a_space_end_the_one_before() {
        assert_eq!(
            last_sentence("Done. Is it ok? Really."),
            Some(("Really", false))
        );
        assert_eq!(
            last_sentence("See v1.2 of report.pdf, shall I?"),
            Some(("See v1.2 of report.pdf, shall I", true))
        );
        assert_eq!(
            last_sentence("完成しました。続けますか？"),
            Some(("続けますか", true))
        );
        assert_eq!(last_sentence("Done.\nProceed"), Some(("Proceed", false)));
        assert_eq!(last_sentence("...?!"), None);
        // Found by the fuzzer: a line break after the mark hid it.
        assert_eq!(
            last_sentence("Shall I go ahead? \n\t "),
            Some(("Shall I go ahead", true))
        );
        assert!(asks_to_go_on("Shall I go ahead? \n\t "));
        assert!(asks_to_go_on("Shall I go ahead?\n\n🙂\n"));
    }
}
