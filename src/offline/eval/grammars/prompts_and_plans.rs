//! Prompts and plans (written fourth): what an LLM assistant writes as its last message before
//! the user's next turn, in one of two [`Situation`]s.
//!
//! - **Ask**: the assistant waits for the user's word before it does (more of) what was asked:
//!   a request for permission, a plan or preview to approve, options to choose from, a failure
//!   or blocker with an offer to retry, a proposed next step of the same task, a clarifying
//!   question it needs answered, a command-line agent's `[y/N]` prompt or a support bot's
//!   request to confirm. Questions and non-questions (imperatives, statements, offers).
//! - **Handback**: the assistant has finished or answered and gives the conversation back: a
//!   result summary (prose, bullets, a coding agent's diff and test counts), an answer to a
//!   question, a deliverable, a check that the result suits, an invitation to ask something
//!   else, a sign-off. Questions and non-questions.
//!
//! It was written blind, as a held-out set: without reading the decision it tests nor the
//! other sets of assistant turns, from what assistants (chat models, support bots, coding
//! agents) write in real traffic. Tasks are named only by neutral phrases ("the migration",
//! "the refund batch", "the sync job"), never by one tool's words.
//!
//! Each turn is composed by the functions below from slot lists: a family is drawn, then its
//! lead, details, steps or options and a closer, each from a list of its own; placeholders
//! (`{t}`, `{T}`, `{n}`, `{scope}`, `{count}`, `{dur}`, `{time}`, `{cmd}`) are filled from one
//! context drawn per turn; an opener, an emoji or a signature line may be added. Every draw
//! goes through the caller's `choose`, so a seeded caller gets the same turns on every run.
//! [`other_language`] picks one of twenty whole turns per situation in other languages.

use super::Situation;

type Choose<'a> = &'a mut dyn FnMut(usize) -> usize;

/// An English turn for `situation`. `choose(n)` returns a number in 0..n (the caller's seeded
/// generator).
pub fn english(situation: Situation, choose: &mut dyn FnMut(usize) -> usize) -> String {
    let context = Context::draw(choose);
    let text = match situation {
        Situation::Ask => ask(choose),
        Situation::Handback => handback(choose),
    };
    context.fill(&text)
}

/// A whole turn for `situation` in another language (twenty per situation, in twenty
/// languages and nine scripts).
pub fn other_language(situation: Situation, choose: &mut dyn FnMut(usize) -> usize) -> String {
    let from = match situation {
        Situation::Ask => OTHER_ASKS,
        Situation::Handback => OTHER_HANDBACKS,
    };
    pick(choose, from).to_owned()
}

// ---------------------------------------------------------------------------------------------
// Drawing.

fn pick(choose: Choose, from: &[&'static str]) -> &'static str {
    let at = choose(from.len().max(1));
    from.get(at).copied().unwrap_or_default()
}

fn chance(choose: Choose, percent: usize) -> bool {
    choose(100) < percent
}

/// Up to `count` different entries of `from`, in the order of the list.
fn several(choose: Choose, from: &[&'static str], count: usize) -> Vec<&'static str> {
    let wanted = count.min(from.len());
    let mut taken: Vec<usize> = Vec::new();
    let mut tries = 0;
    while taken.len() < wanted && tries < 64 {
        let at = choose(from.len());
        if !taken.contains(&at) {
            taken.push(at);
        }
        tries += 1;
    }
    taken.sort_unstable();
    taken
        .iter()
        .filter_map(|&at| from.get(at).copied())
        .collect()
}

fn capitalised(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// Joins sentences with single spaces, leaving out empty ones; one that ends bare (on a word,
/// a code span or a quote) gets a period when another follows.
fn sentences(parts: &[&str]) -> String {
    let kept: Vec<&str> = parts.iter().filter(|p| !p.is_empty()).copied().collect();
    let last = kept.len().saturating_sub(1);
    let mut text = String::new();
    for (at, part) in kept.iter().enumerate() {
        if at > 0 {
            text.push(' ');
        }
        text.push_str(part);
        let bare = part
            .chars()
            .last()
            .is_some_and(|c| c.is_alphanumeric() || c == '`' || c == '"');
        if bare && at < last {
            text.push('.');
        }
    }
    text
}

/// Fills a placeholder of a family's own (not the turn's [`Context`]) from `from`.
fn own(choose: Choose, text: &str, placeholder: &str, from: &[&'static str]) -> String {
    text.replace(placeholder, pick(choose, from))
}

/// What a turn's placeholders are filled with: one task and its surroundings per turn.
struct Context {
    task: &'static str,
    scope: &'static str,
    count: &'static str,
    duration: &'static str,
    time: &'static str,
    command: &'static str,
}

impl Context {
    fn draw(choose: Choose) -> Context {
        Context {
            task: pick(choose, TASKS),
            scope: pick(choose, SCOPES),
            count: pick(choose, COUNTS),
            duration: pick(choose, DURATIONS),
            time: pick(choose, TIMES),
            command: pick(choose, COMMANDS),
        }
    }

    fn fill(&self, template: &str) -> String {
        let the = format!("the {}", self.task);
        template
            .replace("{T}", &capitalised(&the))
            .replace("{t}", &the)
            .replace("{n}", self.task)
            .replace("{scope}", self.scope)
            .replace("{count}", self.count)
            .replace("{dur}", self.duration)
            .replace("{time}", self.time)
            .replace("{cmd}", self.command)
    }
}

// ---------------------------------------------------------------------------------------------
// What every turn may talk about.

/// Neutral task nouns, used as "the X", "The X" or "your X".
const TASKS: &[&str] = &[
    "migration",
    "rollout",
    "refund batch",
    "report",
    "cleanup",
    "PR",
    "sync job",
    "backfill",
    "import",
    "config change",
    "index rebuild",
    "deploy",
    "invoice run",
    "schema change",
    "cache purge",
    "data export",
    "upgrade",
    "bulk rename",
    "archive job",
    "hotfix",
    "data fix",
    "permissions update",
    "nightly job",
    "dependency bump",
    "newsletter draft",
    "price update",
    "account merge",
    "backup",
];
const SCOPES: &[&str] = &[
    "on staging",
    "in production",
    "for all 4 regions",
    "for the EU tenant",
    "against the replica",
    "for last month's data",
    "for the 312 affected accounts",
    "across 18 repositories",
    "on the main branch",
    "for the pilot group",
    "in the shared workspace",
    "for the Q3 records",
];
const COUNTS: &[&str] = &[
    "14 files",
    "3 tables",
    "212 records",
    "1,480 rows",
    "37 accounts",
    "9 repositories",
    "62 invoices",
    "5 services",
    "128 entries",
    "2 config files",
    "4,096 documents",
    "11 users",
];
const DURATIONS: &[&str] = &[
    "about 4 minutes",
    "roughly 20 minutes",
    "under a minute",
    "about an hour",
    "around 90 seconds",
    "10–15 minutes",
    "a little over 2 hours",
];
const TIMES: &[&str] = &["02:00 UTC", "23:30", "6 pm", "01:15", "midnight", "07:45"];
const COMMANDS: &[&str] = &[
    "make deploy",
    "make migrate",
    "./run.sh --apply",
    "git push origin main",
    "npm run release",
    "make backfill",
    "./scripts/cleanup --force",
    "make sync",
];
const EMOJI: &[&str] = &[" 🙂", " 👍", " 🙏", " 🚀", " 👀", " ✨", " 😊"];
const SIGNATURES: &[&str] = &[
    "\n\n— Ops Bot",
    "\n— Release Assistant",
    "\n\n— Your assistant",
    "\n— Build Bot",
    "\n\n— Helpdesk",
    "\n— Data Team Assistant",
];

/// A signature or an emoji, now and then, after the body.
fn decorated(choose: Choose, body: String) -> String {
    let roll = choose(100);
    if roll < 9 {
        body + pick(choose, EMOJI)
    } else if roll < 16 {
        body + pick(choose, SIGNATURES)
    } else {
        body
    }
}

// ---------------------------------------------------------------------------------------------
// Ask: waiting for the user's word.

const ASK_OPENERS: &[&str] = &[
    "Sure.",
    "Got it.",
    "Okay.",
    "Alright!",
    "Thanks for the details.",
    "Understood.",
    "On it.",
    "Good call.",
    "Makes sense.",
    "Thanks — that helps.",
    "No problem.",
    "Sounds good.",
];

/// Closers that ask to go ahead, as questions and as statements.
const GO_AHEAD: &[&str] = &[
    "OK to proceed?",
    "Should I go ahead with it?",
    "Want me to run it now?",
    "Shall I apply it?",
    "Do you want me to kick it off?",
    "Good to go?",
    "Can I go ahead?",
    "Would you like me to start now, or wait until {time}?",
    "Is it alright if I push this now?",
    "Shall I do it for real this time?",
    "Your call — go ahead?",
    "Ready for me to run it?",
    "Say the word and I'll start.",
    "Just confirm and I'll apply it.",
    "Give me a 👍 and I'll kick it off.",
    "Nothing has been changed yet; I'm waiting on your OK.",
    "Type `yes` to continue, or `no` to cancel.",
    "I'll leave it staged until you confirm.",
    "Let me know and I'll run it.",
    "Awaiting your approval.",
    "Once you give the go-ahead it takes {dur}.",
    "Standing by for your confirmation",
    "Ready when you are.",
    "Please confirm to continue.",
    "I can start right away if you'd like.",
    "Your approval is the only thing left",
    "If you're happy with that, I'll go ahead on your signal.",
];
const PERMISSION_LEADS: &[&str] = &[
    "{T} is ready to go {scope}.",
    "I've staged {t} {scope}.",
    "Everything for {t} is prepared.",
    "{T} is queued up {scope} but not started.",
    "I have the changes for {t} ready to apply {scope}.",
    "Heads up: {t} will touch {count}.",
    "This next part of {t} can't be undone.",
    "I'm about to run {t} {scope}.",
    "The next command is `{cmd}`, run {scope}.",
    "I've written the change for {t}; it isn't applied yet.",
    "{T} looks good in the dry run.",
    "I can take care of {t} {scope} now.",
];
const WARNINGS: &[&str] = &[
    "It will overwrite 14 files.",
    "There's no automatic rollback for this part.",
    "It should take {dur}.",
    "Nothing goes out until you confirm.",
    "Expect {dur} of read-only mode while it runs.",
    "It will restart 2 services along the way.",
    "About {count} will be affected.",
    "Emails will go to real customers.",
    "The old values will be kept in a backup table.",
    "Traffic may be slow for {dur}.",
];

fn permission(choose: Choose) -> String {
    let opener = if chance(choose, 25) {
        pick(choose, ASK_OPENERS)
    } else {
        ""
    };
    let lead = pick(choose, PERMISSION_LEADS);
    let warning = if chance(choose, 55) {
        pick(choose, WARNINGS)
    } else {
        ""
    };
    let closer = pick(choose, GO_AHEAD);
    decorated(choose, sentences(&[opener, lead, warning, closer]))
}

const PLAN_LEADS: &[&str] = &[
    "Here's the plan for {t}:",
    "**Plan: {t}**",
    "Proposed steps for {t}:",
    "### What I'll do",
    "This is how I'd tackle {t}:",
    "Plan before I touch anything:",
    "Preview of {t} {scope}:",
    "## {T}, step by step",
];
const PLAN_INLINE_LEADS: &[&str] = &[
    "My plan for {t}:",
    "Proposed approach for {t}:",
    "Here's what I have in mind for {t}:",
    "For {t}, roughly:",
];
/// Steps of a plan, in a plausible order: a plan keeps the order of this list.
const STEPS: &[&str] = &[
    "take a backup of the current state",
    "pause the scheduled jobs while it runs",
    "run it on staging first",
    "compare the output against yesterday's",
    "roll out to 10% and watch the error rate for {dur}",
    "apply it {scope}",
    "check that the counts match before and after",
    "re-run the checks",
    "remove the temporary files",
    "add a short note to the changelog",
    "open a PR with the changes",
    "let the owners know it's done",
];
/// Why there is a plan at all, before it (now and then).
const PLAN_PREAMBLES: &[&str] = &[
    "I went through the current setup first. Most of {t} is mechanical, but one step touches live data, so I'd rather you look before I run anything.",
    "I've read through what's there and sketched the work out. It's about {count} in total, and I estimate {dur} end to end.",
    "Since this is {scope} and not easy to reverse, I'd like to run the approach by you first.",
    "Thanks for the context. I checked the logs from the last attempt, and the main risk is the step that rewrites existing data, so I've put a check right after it.",
];
const PLAN_NOTES: &[&str] = &[
    "Estimated time: {dur}.",
    "Nothing is deleted until the last step.",
    "Only the apply step changes anything.",
    "I can stop after any step.",
    "Total scope: {count}.",
];
const PLAN_CLOSERS: &[&str] = &[
    "Does this plan work for you before I start?",
    "Any changes, or should I go ahead?",
    "Want me to run all of it, or just the first step?",
    "Look right to you?",
    "Should I start with step 1?",
    "Anything you'd like me to add or drop before I begin?",
    "OK to start?",
    "If it looks right, give me the go-ahead and I'll begin.",
    "I won't make any changes until you sign off on this.",
    "Approve it and I'll start with the first step.",
    "Happy to adjust any of the steps first; otherwise confirm and I'll start.",
    "Let me know if I should proceed as written.",
    "Reply `approve` to start, or tell me what to change.",
    "Waiting on your sign-off",
];

fn plan(choose: Choose) -> String {
    let count = 2 + choose(3);
    let steps = several(choose, STEPS, count);
    let note = if chance(choose, 35) {
        pick(choose, PLAN_NOTES)
    } else {
        ""
    };
    let closer = pick(choose, PLAN_CLOSERS);
    let style = choose(4);
    let body = if style == 3 {
        let mut text = format!("{} first I'd", pick(choose, PLAN_INLINE_LEADS));
        let last = steps.len().saturating_sub(1);
        for (at, step) in steps.iter().enumerate() {
            let joint = match at {
                0 => " ",
                1 if last == 1 => ", then ",
                _ if at == last => ", and finally ",
                _ => ", then ",
            };
            text.push_str(joint);
            text.push_str(step);
        }
        text.push('.');
        sentences(&[&text, note])
    } else {
        let lines: Vec<String> = steps
            .iter()
            .enumerate()
            .map(|(at, step)| match style {
                0 => format!("{}. {}", at + 1, capitalised(step)),
                1 => format!("- {}", capitalised(step)),
                _ => format!("{}) {step}", at + 1),
            })
            .collect();
        let mut text = format!("{}\n{}", pick(choose, PLAN_LEADS), lines.join("\n"));
        if chance(choose, 30) {
            text = format!("{}\n\n{text}", pick(choose, PLAN_PREAMBLES));
        }
        if !note.is_empty() {
            text = format!("{text}\n\n{note}");
        }
        text
    };
    decorated(choose, format!("{body}\n\n{closer}"))
}

/// Two ways of doing a task, as an assistant offers them.
const OPTION_PAIRS: &[(&str, &str)] = &[
    (
        "run it all at once tonight: faster, but {dur} of downtime",
        "do it in batches of 500: slower, no downtime",
    ),
    (
        "replace the old version outright",
        "keep both side by side for a week, then switch",
    ),
    (
        "fix only the {count} that were flagged",
        "redo everything from scratch",
    ),
    (
        "merge it as-is and clean up in a follow-up",
        "split it into two smaller changes first",
    ),
    ("start it right now", "schedule it for {time}"),
    (
        "send it to everyone at once",
        "send it to a 10% sample first and check the replies",
    ),
    (
        "skip the rows with errors and list them at the end",
        "stop at the first error so nothing partial lands",
    ),
    (
        "overwrite the existing copy",
        "save the result next to it under a new name",
    ),
    ("apply it {scope} only", "apply it everywhere in one go"),
    (
        "keep the current format",
        "switch to the new layout and update the templates",
    ),
];
const THIRD_OPTIONS: &[&str] = &[
    "leave it for now and revisit next week",
    "hand it to the owning team to decide",
    "do a dry run first and decide after",
    "pause everything until the freeze ends",
];
const OPTION_LEADS: &[&str] = &[
    "There are {k} ways I could do {t}:",
    "I can handle {t} {k} different ways:",
    "Options for {t}:",
    "Before I go on with {t}, I need you to pick an approach.",
    "**How should I run {t}?**",
    "I need a decision on {t} before I continue:",
    "I found {k} workable options for {t}:",
];
const OPTION_CLOSERS: &[&str] = &[
    "Which would you prefer?",
    "Which way should I go?",
    "Which one works best for you?",
    "Any preference?",
    "I'd lean toward the first. Okay with you?",
    "Which do you want me to go with?",
    "Pick one and I'll take it from there.",
    "Just reply with the number.",
    "My vote is the first option, but it's your call.",
    "Let me know which and I'll get started.",
    "Tell me the letter or number and I'll carry on.",
    "I'll wait for your pick before changing anything.",
    "Either works on my end; I just need you to choose",
];

fn options(choose: Choose) -> String {
    let (first, second) = OPTION_PAIRS
        .get(choose(OPTION_PAIRS.len()))
        .copied()
        .unwrap_or_default();
    let mut all = vec![first, second];
    if chance(choose, 30) {
        all.push(pick(choose, THIRD_OPTIONS));
    }
    let k = if all.len() == 3 { "three" } else { "two" };
    let lead = pick(choose, OPTION_LEADS).replace("{k}", k);
    let closer = pick(choose, OPTION_CLOSERS);
    let style = choose(4);
    let body = if style == 3 {
        let rest: Vec<String> = all.iter().skip(1).map(|o| format!("or {o}")).collect();
        format!("{lead} either {first}, {}.", rest.join(", "))
            .replace(": either", ": I could either")
            .replace(". either", ". Either")
            .replace("?** either", "?**\n\nEither")
    } else {
        let lines: Vec<String> = all
            .iter()
            .enumerate()
            .map(|(at, option)| match style {
                0 => format!("{}) {option}", at + 1),
                1 => format!(
                    "**{}.** {}",
                    ["A", "B", "C"].get(at).copied().unwrap_or("C"),
                    capitalised(option)
                ),
                _ => format!("- Option {}: {}", at + 1, capitalised(option)),
            })
            .collect();
        format!("{lead}\n\n{}", lines.join("\n"))
    };
    decorated(choose, format!("{body}\n\n{closer}"))
}

const FAILURE_LEADS: &[&str] = &[
    "{T} failed {at}.",
    "I hit a problem with {t} {at}.",
    "⚠️ {T} stopped {at}.",
    "Couldn't finish {t}; it broke off {at}.",
    "Ran into a blocker on {t} {at}.",
    "Bad news: {t} didn't go through. It failed {at}.",
    "**{T} failed** {at}.",
];
const FAILURE_POINTS: &[&str] = &[
    "at step 3 of 5",
    "after 1,204 of 2,000 rows",
    "on the last batch",
    "during validation",
    "right at the start",
    "halfway through",
    "while uploading the results",
];
const ERRORS: &[&str] = &[
    "`permission denied`",
    "\"Connection reset by peer\"",
    "`timeout after 30s`",
    "`409 Conflict`",
    "\"quota exceeded\"",
    "`lock held by another process`",
    "`checksum mismatch`",
    "\"invalid date format in row 88\"",
    "`503 Service Unavailable`",
    "\"disk full\"",
    "`401 Unauthorized`",
];
const ERROR_FORMS: &[&str] = &[
    "The error was {e}.",
    "Error: {e}",
    "It returned {e}.",
    "The log says {e}.",
    "Last line of output: {e}",
];
const CAUSES: &[&str] = &[
    "Looks like a transient network issue.",
    "Probably a missing permission on my side.",
    "Someone else may be running it at the same time.",
    "Nothing was changed; it rolled back cleanly.",
    "The first {count} went through before it stopped.",
    "This usually clears up after a few minutes.",
    "The source file seems to have a malformed line.",
];
const FAILURE_CLOSERS: &[&str] = &[
    "Want me to retry?",
    "Should I try again with a longer timeout?",
    "Do you want me to skip the bad rows and continue?",
    "Shall I roll back what went through, or keep it?",
    "Retry now, or wait for the {time} window?",
    "Should I resume from where it stopped?",
    "How would you like me to handle it?",
    "I can retry from where it stopped; just say so.",
    "If you can grant me access, I'll pick it back up.",
    "Let me know how you'd like to proceed.",
    "Say `retry` and I'll run it again.",
    "I'll hold off until you tell me whether to retry or roll back.",
    "Once the lock clears I can resume. Give me the word.",
    "I can try once more with smaller batches if you want",
];

fn failure(choose: Choose) -> String {
    let lead = pick(choose, FAILURE_LEADS).replace("{at}", pick(choose, FAILURE_POINTS));
    let error = pick(choose, ERROR_FORMS).replace("{e}", pick(choose, ERRORS));
    let cause = if chance(choose, 55) {
        pick(choose, CAUSES)
    } else {
        ""
    };
    let closer = pick(choose, FAILURE_CLOSERS);
    let body = if chance(choose, 40) {
        format!("{}\n\n{}", sentences(&[&lead, &error, cause]), closer)
    } else {
        sentences(&[&lead, &error, cause, closer])
    };
    decorated(choose, body)
}

const DONE_PARTS: &[&str] = &[
    "{T} is done on staging.",
    "Step 1 is finished and the backup is in place.",
    "The first half of {t} went through cleanly.",
    "I've drafted {t}.",
    "The tests pass locally.",
    "The dry run is clean: {count} would change, no errors.",
    "{T} is merged into the staging branch.",
    "The first batch of {t} is through: {count}, no failures.",
    "✅ Validation passed for {t}.",
];
const NEXT_INTROS: &[&str] = &[
    "The next step is to {x}.",
    "Next up would be to {x}.",
    "From here I'd {x}.",
    "What's left is to {x}.",
    "The remaining step: {x}.",
    "I could {x} next.",
];
const NEXT_ACTIONS: &[&str] = &[
    "apply the same change in production",
    "run it for the remaining {count}",
    "open the PR for review",
    "send it to the full list",
    "delete the old copies",
    "turn the flag on for everyone",
    "schedule the rest for {time}",
    "merge it into main",
    "run `{cmd}`",
    "tag the release",
];
const NEXT_CLOSERS: &[&str] = &[
    "Want me to continue with that?",
    "Should I carry on?",
    "Shall I?",
    "OK to continue?",
    "I can handle that too if you want.",
    "Happy to take that on now; just let me know.",
    "I'll wait for your go before doing that part.",
    "Let me know if I should keep going",
];

fn next_step(choose: Choose) -> String {
    let opener = if chance(choose, 20) {
        pick(choose, ASK_OPENERS)
    } else {
        ""
    };
    let done = pick(choose, DONE_PARTS);
    let next = pick(choose, NEXT_INTROS).replace("{x}", pick(choose, NEXT_ACTIONS));
    let closer = if chance(choose, 60) {
        pick(choose, NEXT_CLOSERS)
    } else {
        pick(choose, GO_AHEAD)
    };
    decorated(choose, sentences(&[opener, done, &next, closer]))
}

const CLARIFY_LEADS: &[&str] = &[
    "Quick question before I start {t}:",
    "One thing I need to know for {t}:",
    "Before I go further with {t}:",
    "To get {t} right, I need one detail:",
    "I can do that, but first:",
    "Almost ready with {t}. Just one thing:",
    "",
];
const CLARIFY_QUESTIONS: &[&str] = &[
    "should it include archived items?",
    "which environment, staging or production?",
    "should it apply tonight or right away?",
    "what date range should I use?",
    "who should get the notification when it's done?",
    "is it OK to overwrite the existing file, or should I keep a copy?",
    "should failed rows be skipped, or should I stop at the first one?",
    "do you want the output as CSV or as a spreadsheet?",
    "which branch should I base it on?",
    "does this cover all {count}, or only the active ones?",
    "what time zone are the dates in?",
    "do you want me to notify the affected users, or keep it quiet?",
];
const CLARIFY_TAILS: &[&str] = &[
    "Everything else is ready to go.",
    "I'll pause here until I hear back.",
    "The rest is set up.",
    "Once I know, it takes {dur}.",
];
const CLARIFY_STATEMENTS: &[&str] = &[
    "I need the date range before I can continue.",
    "Tell me which environment to target and I'll carry on.",
    "Let me know whether archived items should be included.",
    "I'm missing the target branch; send it over and I'll pick it up from there.",
    "Once I know who owns it, I can finish {t}.",
    "I'll need the exact cutoff date. Everything else is ready.",
    "Please confirm the account ID so I don't touch the wrong one.",
    "I need to know which of the {count} are in scope before I go on.",
    "Send me the file with the new values and I'll continue with {t}.",
];

fn clarify(choose: Choose) -> String {
    let opener = if chance(choose, 25) {
        pick(choose, ASK_OPENERS)
    } else {
        ""
    };
    let body = if chance(choose, 65) {
        let lead = pick(choose, CLARIFY_LEADS);
        let question = pick(choose, CLARIFY_QUESTIONS);
        let asked = if lead.is_empty() {
            capitalised(question)
        } else {
            format!("{lead} {question}")
        };
        let tail = if chance(choose, 30) {
            pick(choose, CLARIFY_TAILS)
        } else {
            ""
        };
        sentences(&[opener, &asked, tail])
    } else {
        sentences(&[opener, pick(choose, CLARIFY_STATEMENTS)])
    };
    decorated(choose, body)
}

/// What a support bot handles for a customer, as "your X".
const SUPPORT_ITEMS: &[&str] = &[
    "refund",
    "order change",
    "subscription update",
    "address change",
    "plan upgrade",
    "cancellation request",
    "invoice correction",
    "account merge",
    "refund batch",
    "data export",
];
const SUPPORT_GREETINGS: &[&str] = &[
    "Thanks for waiting!",
    "Thank you for your patience.",
    "Hi there!",
    "Thanks for reaching out.",
    "",
];
const SUPPORT_ASK_LEADS: &[&str] = &[
    "I've located the {s} on your account.",
    "I can process your {s} right now.",
    "Your {s} is ready to be submitted.",
    "I found 3 orders that match your request.",
    "I can reverse the {s} for you.",
];
const SUPPORT_ASKS: &[&str] = &[
    "Would you like me to go ahead?",
    "To continue, please reply YES.",
    "Just confirm and I'll submit it for you.",
    "Shall I proceed with this?",
    "Please confirm that you'd like to continue.",
    "Can you confirm the email address on the account so I can continue?",
    "Let me know if you'd like me to proceed.",
];
const SUPPORT_SIGNATURES: &[&str] = &["\n\n— Support Assistant", "", "\n— Helpdesk Bot", " 😊", ""];

fn support_ask(choose: Choose) -> String {
    let template = pick(choose, SUPPORT_ASK_LEADS);
    let lead = own(choose, template, "{s}", SUPPORT_ITEMS);
    let body = sentences(&[
        pick(choose, SUPPORT_GREETINGS),
        &lead,
        pick(choose, SUPPORT_ASKS),
    ]);
    body + pick(choose, SUPPORT_SIGNATURES)
}

const CLI_ASK_LEADS: &[&str] = &[
    "I'm going to run `{cmd}` {scope}.",
    "Next command: `{cmd}`",
    "About to execute `{cmd}` for {t}.",
    "To finish {t} I need to run `{cmd}`.",
];
const CLI_EFFECTS: &[&str] = &[
    "This modifies {count}.",
    "This rewrites 14 files.",
    "This restarts 2 services.",
    "This pushes to the shared branch.",
    "This can't be undone.",
    "",
];
const CLI_CLOSERS: &[&str] = &[
    "Proceed? [y/N]",
    "Continue? (yes/no)",
    "Run it?",
    "Type `y` to continue.",
    "Approve to run this command.",
    "Allow this command?",
    "Waiting for approval to run",
];

fn cli_ask(choose: Choose) -> String {
    let first = sentences(&[pick(choose, CLI_ASK_LEADS), pick(choose, CLI_EFFECTS)]);
    format!("{first}\n\n{}", pick(choose, CLI_CLOSERS))
}

const SHORT_ASKS: &[&str] = &[
    "Proceed now?",
    "Shall I merge?",
    "Apply now?",
    "Go ahead with the {n}?",
    "Ready. Start the {n}?",
    "Confirm and I'll run it.",
    "Waiting on your go.",
    "Run it? 🙂",
    "Standing by.",
    "Good to merge?",
    "Staged and ready. Your call.",
    "Ship the {n}?",
    "Ready to send. Confirm?",
    "Awaiting approval",
    "OK to delete them?",
    "Retry it?",
    "Start the {n} now, or later?",
    "All prepped, just need your yes.",
    "Should I continue with the rest?",
    "Holding here until you say go.",
];

fn ask(choose: Choose) -> String {
    let roll = choose(100);
    if roll < 18 {
        permission(choose)
    } else if roll < 32 {
        plan(choose)
    } else if roll < 46 {
        options(choose)
    } else if roll < 60 {
        failure(choose)
    } else if roll < 72 {
        next_step(choose)
    } else if roll < 82 {
        clarify(choose)
    } else if roll < 88 {
        support_ask(choose)
    } else if roll < 94 {
        cli_ask(choose)
    } else {
        pick(choose, SHORT_ASKS).to_owned()
    }
}

// ---------------------------------------------------------------------------------------------
// Handback: done, handing the conversation back.

const CHECKS: &[&str] = &[
    "Does that look right to you?",
    "Is this what you were after?",
    "Does that answer your question?",
    "Is that the format you wanted?",
    "Does this work for you?",
    "Make sense?",
    "Did that fix it on your end?",
    "Does that line up with what you're seeing?",
    "Let me know if anything looks off.",
    "Hope that helps!",
    "Hope that clears it up.",
    "Tell me if the numbers don't match what you expected.",
    "Shout if something doesn't look right",
    "That should be everything you asked for.",
    "It should all be working now.",
];
const INVITES: &[&str] = &[
    "Anything else I can help with?",
    "Is there anything else you need?",
    "What else can I do for you?",
    "Anything else on your list today?",
    "If anything else comes up, just ask.",
    "Happy to help with anything else.",
    "Feel free to reach out if you need anything else.",
    "I'm here if you need anything else.",
    "Ping me anytime.",
    "Got other questions? Fire away.",
];
const SIGN_OFFS: &[&str] = &[
    "Have a great day!",
    "Cheers!",
    "Take care 👋",
    "Thanks for reaching out!",
    "Enjoy the rest of your week.",
    "Talk soon",
    "Happy shipping 🚀",
    "Have a good one.",
];

/// How a handback ends: a check, an invitation, a sign-off, two of them, or nothing.
fn handback_closer(choose: Choose) -> String {
    let roll = choose(100);
    if roll < 30 {
        pick(choose, CHECKS).to_owned()
    } else if roll < 55 {
        pick(choose, INVITES).to_owned()
    } else if roll < 66 {
        pick(choose, SIGN_OFFS).to_owned()
    } else if roll < 74 {
        sentences(&[pick(choose, CHECKS), pick(choose, SIGN_OFFS)])
    } else if roll < 84 {
        sentences(&[pick(choose, CHECKS), pick(choose, INVITES)])
    } else {
        String::new()
    }
}

const DONE_OPENERS: &[&str] = &[
    "Done!",
    "All set.",
    "✅ Finished.",
    "That's complete.",
    "Okay, that's done.",
    "Great news!",
    "Good news!",
    "",
    "",
];
const DONE_CORES: &[&str] = &[
    "{T} is complete.",
    "{T} went through without errors.",
    "{T} finished in {dur}.",
    "{T} has been applied {scope}.",
    "{T} is live {scope}.",
    "I've finished {t}.",
    "{T} ran cleanly {scope}.",
    "{T} wrapped up at {time}.",
    "I've wrapped up {t} {scope}.",
    "{T} is merged and deployed.",
    "Wrapped up {t} with no errors.",
    "I ran {t} {scope} and it completed.",
];
const DONE_DETAILS: &[&str] = &[
    "{count} were updated; none failed.",
    "A backup was taken first and is kept for 7 days.",
    "The full log is in `logs/latest.txt`.",
    "Total run time was {dur}.",
    "Totals match the source to the cent.",
    "I also cleared out the temporary files.",
    "Nothing else was touched.",
    "Monitoring has been quiet since.",
    "The old version is archived in case you ever need it.",
    "Error rate stayed flat at 0.02%.",
    "{count} were skipped because they were already up to date.",
    "The owners have been notified.",
    "You may need to refresh the page to see the new data.",
];

/// What was checked after a task, as a paragraph of its own (now and then).
const VERIFICATIONS: &[&str] = &[
    "I double-checked a sample of 20 by hand and they all look right; the counts before and after match, and nothing outside the target was touched.",
    "Afterwards I re-ran the validation, compared the totals against the source, and skimmed the logs for warnings. All clean.",
    "For the record: it started at {time}, took {dur}, and the error log is empty.",
];

fn done_summary(choose: Choose) -> String {
    let opener = pick(choose, DONE_OPENERS);
    let core = pick(choose, DONE_CORES);
    let many = choose(3);
    let details = several(choose, DONE_DETAILS, many);
    let mut parts: Vec<&str> = vec![opener, core];
    parts.extend(details.iter().copied());
    let closer = handback_closer(choose);
    let mut body = sentences(&parts);
    if chance(choose, 20) {
        body = format!("{body}\n\n{}", pick(choose, VERIFICATIONS));
    }
    let text = if closer.is_empty() {
        body
    } else if chance(choose, 35) {
        format!("{body}\n\n{closer}")
    } else {
        sentences(&[&body, &closer])
    };
    decorated(choose, text)
}

const SUMMARY_HEADINGS: &[&str] = &[
    "**Summary**",
    "## What changed",
    "Here's a recap:",
    "Summary of {t}:",
    "What I did:",
    "{T} is done. Quick rundown:",
    "### Result",
    "All finished with {t}. Here's what happened:",
];
const DONE_ITEMS: &[&str] = &[
    "Updated {count}",
    "Removed 3 unused settings",
    "Added a regression test for the empty-input case",
    "Re-ran the checks, all green",
    "Documented the change in the README",
    "Verified the totals (4,812 before and after)",
    "Tagged the release as v2.4.1",
    "Notified the owners by email",
    "Left the old copy in `archive/` for a week",
    "Bumped the version and regenerated the lockfile",
    "Closed the 4 related tickets",
    "Applied it {scope}",
    "Finished in {dur}",
    "Fixed the off-by-one in the date filter",
];
const BULLETS: &[&str] = &["- ", "• ", "✅ ", "* "];

fn bullet_summary(choose: Choose) -> String {
    let heading = pick(choose, SUMMARY_HEADINGS);
    let many = 2 + choose(3);
    let items = several(choose, DONE_ITEMS, many);
    let bullet = pick(choose, BULLETS);
    let end = if chance(choose, 30) { "." } else { "" };
    let lines: Vec<String> = items
        .iter()
        .map(|item| format!("{bullet}{item}{end}"))
        .collect();
    let closer = handback_closer(choose);
    let mut text = format!("{heading}\n{}", lines.join("\n"));
    if !closer.is_empty() {
        text = format!("{text}\n\n{closer}");
    }
    decorated(choose, text)
}

const ANSWER_LEADS: &[&str] = &[
    "Short answer: yes.",
    "Good question!",
    "Yes, that's expected.",
    "No, that's normal.",
    "Here's what's going on:",
    "Got it, here's the explanation.",
    "In short:",
    "I checked, and",
    "",
];
const ANSWER_BODIES: &[&str] = &[
    "{T} only runs once a night at {time}, so anything changed after that shows up the next morning.",
    "{T} counts only completed items, which is why its totals are lower than the dashboard's.",
    "{T} retries up to 3 times on its own; after that the item is flagged for a person to look at.",
    "{T} skips anything older than 90 days, so the older entries you saw are left alone on purpose.",
    "the numbers differ because {t} uses UTC while the dashboard shows local time.",
    "{T} took {dur} last time, and most of that is the validation step at the end.",
    "the gap is {count}, all created before the cutoff, so they aren't included.",
    "it's safe to re-run {t}; repeated runs won't double anything.",
    "{T} reads from the replica, which can lag the primary by a minute or two.",
    "the warning in the log is harmless; it only means a cache miss on the first run.",
    "{T} is still scheduled for {time}; nothing about it changed last week.",
];
/// What an answer explains: something that runs.
const JOBS: &[&str] = &[
    "sync job",
    "nightly job",
    "backfill",
    "archive job",
    "cleanup",
    "import",
    "report",
    "invoice run",
    "backup",
    "reminder run",
];
const ANSWER_ASIDES: &[&str] = &[
    "If you ever need it sooner, it can also be triggered by hand.",
    "It works the same way {scope}.",
    "This is also noted in the runbook.",
    "",
    "",
];

fn answer(choose: Choose) -> String {
    let lead = pick(choose, ANSWER_LEADS);
    let job = pick(choose, JOBS);
    let raw = pick(choose, ANSWER_BODIES)
        .replace("{T}", &format!("The {job}"))
        .replace("{t}", &format!("the {job}"));
    let body = if lead.ends_with(':') || lead.ends_with("and") {
        match raw.strip_prefix("The ") {
            Some(rest) => format!("the {rest}"),
            None => raw,
        }
    } else {
        capitalised(&raw)
    };
    let aside = pick(choose, ANSWER_ASIDES);
    let closer = handback_closer(choose);
    decorated(choose, sentences(&[lead, &body, aside, &closer]))
}

const CLI_DONE: &[&str] = &[
    "Done.",
    "Finished.",
    "✔ Complete.",
    "Implemented.",
    "All done.",
];
const CHANGED: &[&str] = &[
    "Changed 3 files (+42 −7).",
    "Changed 1 file (+5 −2).",
    "Changed 8 files (+310 −96).",
    "Touched 2 files; no other changes.",
    "Edited `config/settings.yaml` and `lib/retry.js`.",
    "Updated the handler and added tests in `tests/retry_test.py`.",
];
const TEST_LINES: &[&str] = &[
    "`make test`: 118 passed, 0 failed.",
    "All 42 tests pass.",
    "Lint and type checks are clean.",
    "`npm test` is green (64 passing).",
    "Tests pass locally; CI is running now.",
    "The build succeeds and the new test covers the empty case.",
];

fn cli_done(choose: Choose) -> String {
    let first = sentences(&[pick(choose, CLI_DONE), pick(choose, CHANGED)]);
    let tests = pick(choose, TEST_LINES);
    let closer = if chance(choose, 60) {
        handback_closer(choose)
    } else {
        String::new()
    };
    let mut text = format!("{first}\n\n{tests}");
    if !closer.is_empty() {
        text = format!("{text}\n\n{closer}");
    }
    text
}

const SHORT_HANDBACKS: &[&str] = &[
    "Done here.",
    "All done! 🎉",
    "That should do it.",
    "Fixed ✅",
    "You're all set.",
    "All sorted!",
    "Done. {T} is live.",
    "Complete. Nothing else pending.",
    "All good now 👍",
    "Finished, no errors",
    "Done. Need anything else?",
    "Yep, all done.",
    "{T} is finished. Anything else?",
    "There you have it.",
    "Done, and tested.",
    "Good to go now!",
];

const SUPPORT_DONE: &[&str] = &[
    "Your {s} has been processed.",
    "I've updated your {s}.",
    "Good news, your {s} went through.",
    "The {s} is now complete on your account.",
    "I've cancelled the duplicate {s} for you.",
];
const SUPPORT_DETAILS: &[&str] = &[
    "You should see it reflected within 3–5 business days.",
    "A confirmation email is on its way.",
    "Your reference number is #48213.",
    "No further action is needed on your part.",
    "",
];
const SUPPORT_CLOSERS: &[&str] = &[
    "Is there anything else I can help you with today?",
    "Thanks for contacting us, and have a lovely day!",
    "If you have any other questions, we're here 24/7.",
    "Was this helpful?",
    "Thank you for your patience!",
    "Is there anything else you'd like to know?",
];

fn support_done(choose: Choose) -> String {
    let template = pick(choose, SUPPORT_DONE);
    let done = own(choose, template, "{s}", SUPPORT_ITEMS);
    let body = sentences(&[
        pick(choose, SUPPORT_GREETINGS),
        &done,
        pick(choose, SUPPORT_DETAILS),
        pick(choose, SUPPORT_CLOSERS),
    ]);
    body + pick(choose, SUPPORT_SIGNATURES)
}

const DELIVERABLES: &[&str] = &[
    "Here's the {d}, trimmed to one page.",
    "I've attached the {d} as a CSV (1,204 rows).",
    "The {d} is in the shared folder under `exports/2024-06/`.",
    "Below is the {d} with the changes highlighted.",
    "I've put the {d} together; it's linked in the ticket.",
    "The final version of the {d} is ready in your drafts.",
    "The {d} is saved as `summary.md` in the project root.",
];
/// What a deliverable is.
const DELIVERABLE_ITEMS: &[&str] = &[
    "report",
    "summary",
    "newsletter draft",
    "data export",
    "status update",
    "changelog",
    "audit list",
    "cost breakdown",
    "handover doc",
    "comparison table",
];
const FACTS: &[&str] = &[
    "It covers {count}.",
    "Totals: 4,812 items, 17 flagged.",
    "I kept the original wording wherever I could.",
    "Numbers are as of {time} today.",
    "The biggest change is in the last section.",
    "",
];

fn deliverable(choose: Choose) -> String {
    let closer = handback_closer(choose);
    let closer = if closer.is_empty() {
        pick(choose, CHECKS).to_owned()
    } else {
        closer
    };
    let template = pick(choose, DELIVERABLES);
    let item = own(choose, template, "{d}", DELIVERABLE_ITEMS);
    let text = sentences(&[&item, pick(choose, FACTS), &closer]);
    decorated(choose, text)
}

fn handback(choose: Choose) -> String {
    let roll = choose(100);
    if roll < 22 {
        done_summary(choose)
    } else if roll < 38 {
        bullet_summary(choose)
    } else if roll < 54 {
        answer(choose)
    } else if roll < 66 {
        cli_done(choose)
    } else if roll < 76 {
        pick(choose, SHORT_HANDBACKS).to_owned()
    } else if roll < 86 {
        support_done(choose)
    } else {
        deliverable(choose)
    }
}

// ---------------------------------------------------------------------------------------------
// Whole turns in other languages.

/// French, Spanish, German, Portuguese, Italian, Dutch, Polish, Turkish, Russian, Ukrainian,
/// Greek, Japanese, Chinese, Korean, Arabic, Hebrew, Hindi, Vietnamese, Swedish, Indonesian.
const OTHER_ASKS: &[&str] = &[
    "J'ai préparé la migration sur l'environnement de test ; elle modifiera 3 tables. Je la lance en production ?",
    "Tengo listo el reembolso de 12 pedidos. ¿Quieres que lo procese ahora o prefieres revisarlo antes?",
    "Der Export ist vorbereitet, aber noch nicht gestartet. Gib mir kurz Bescheid, dann führe ich ihn aus (dauert etwa 10 Minuten).",
    "Encontrei duas opções para a limpeza:\n1) apagar tudo com mais de 90 dias\n2) só arquivar\n\nQual você prefere?",
    "Il rollout si è fermato al 40% con l'errore \"timeout\". Vuoi che riprovi da dove si è interrotto?",
    "Ik heb een plan voor de opschoning klaarstaan:\n- eerst een back-up maken\n- daarna de oude records verwijderen\n\nZal ik beginnen?",
    "Raport jest gotowy do wysłania do 40 odbiorców. Potwierdź, a wyślę go od razu.",
    "Senkronizasyon görevi 3. adımda \"izin reddedildi\" hatasıyla durdu. Tekrar denememi ister misin?",
    "Миграция прошла на тестовом сервере без ошибок. Запустить её в продакшене?",
    "Перш ніж почати оновлення, уточніть, будь ласка: включати архівні записи чи ні?",
    "Η ενημέρωση είναι έτοιμη αλλά δεν έχει εφαρμοστεί ακόμα. Περιμένω την έγκρισή σου για να συνεχίσω.",
    "移行の準備ができました。本番環境で実行してもよろしいですか？",
    "同步任务在第 3 步失败了，错误是“权限不足”。要我重试一次吗？",
    "보고서 초안을 만들었습니다. 이대로 팀 전체에 보낼까요?",
    "جهّزت دفعة الاسترداد لـ 25 طلبًا. هل تريد أن أبدأ التنفيذ الآن؟",
    "יש שתי דרכים לבצע את הגיבוי: עכשיו, או הלילה בשתיים. מה עדיף לך?",
    "डिप्लॉय तैयार है, बस आपकी मंज़ूरी चाहिए। क्या मैं इसे अभी शुरू कर दूँ?",
    "Tôi đã chuẩn bị xong bản cập nhật. Bạn xác nhận thì tôi sẽ chạy ngay.",
    "Jag har förberett städningen men inte kört den än. Säg till så sätter jag igång.",
    "Ekspor data sudah siap. Mau saya jalankan sekarang, atau nanti malam saja?",
];

/// The same twenty languages, handing back.
const OTHER_HANDBACKS: &[&str] = &[
    "C'est fait : la migration est terminée et les 3 tables sont à jour. Besoin d'autre chose ?",
    "¡Listo! El informe ya está en tu carpeta compartida. ¿Te sirve así?",
    "Erledigt – der Export ist abgeschlossen, 1.204 Zeilen. Sag Bescheid, wenn du noch etwas brauchst.",
    "Pronto! A limpeza foi concluída sem erros. Posso ajudar em mais alguma coisa?",
    "Fatto. Il rollout è completato in tutte le regioni. Buona giornata!",
    "Klaar! De synchronisatie is gelukt en alles staat weer gelijk. Laat het weten als er nog iets is.",
    "Gotowe. Zwroty zostały zaksięgowane. Czy mogę pomóc w czymś jeszcze?",
    "Tamamlandı: rapor e-postayla gönderildi. Başka bir konuda yardımcı olabilir miyim?",
    "Готово! Отчёт сформирован и лежит в общей папке. Если понадобится что-то ещё — пишите.",
    "Зроблено: оновлення встановлено, помилок немає. Чи є ще питання?",
    "Ολοκληρώθηκε! Το αντίγραφο ασφαλείας πέρασε χωρίς σφάλματα. Χρειάζεσαι κάτι άλλο;",
    "完了しました。レポートは共有フォルダに保存してあります。ほかに何かあればお気軽にどうぞ。",
    "搞定了！清理已经完成，共删除 86 个过期文件。还有别的需要帮忙吗？",
    "배포가 완료되었습니다. 문제가 있으면 언제든지 말씀해 주세요.",
    "تم! اكتملت المزامنة بنجاح. هل هناك أي شيء آخر يمكنني مساعدتك فيه؟",
    "סיימתי – הדוח נשלח לכל הצוות. בהצלחה!",
    "हो गया! रिपोर्ट भेज दी गई है। क्या यह आपके काम की है?",
    "Xong rồi! Bản sao lưu đã hoàn tất. Bạn cần gì thêm cứ nói nhé.",
    "Klart! Rapporten ligger i den delade mappen. Hoppas att det var det du behövde.",
    "Selesai. Migrasi berjalan lancar tanpa error. Ada lagi yang bisa saya bantu?",
];
