//! Headed turns with bullet details (written second): what an LLM assistant in an agent product
//! writes as its last message before the user's next turn, in two situations ([`Situation`]):
//! - **ask**: before doing what the user asked it asks leave to go on; or it reports a failure
//!   and offers to retry; or it proposes the next step of the same task and waits for the
//!   user's word. As questions ("OK to run it now?") and as statements, imperatives and offers
//!   ("Nothing has been changed yet — say the word and I'll start.").
//! - **handback**: it has finished or answered the previous request and gives the
//!   conversation back: a result, an invitation to ask something new, or both.
//!
//! This file was written blind, as a held-out set: without reading the decision it tests nor
//! the other grammar of assistant turns, so its phrasings are not tuned to either. Only the
//! code style of the generated follow-ups was looked at. After its first measurement the
//! reading of the assistant's turn was revised on it (`docs/BENCHMARKS.md` has both figures),
//! so it is held out no more: [`super::HELD_OUT`] is.
//!
//! Each English turn is composed from slot lists: an optional heading or opener, an optional
//! first sentence saying what is about to happen or what happened, optional details (a
//! sentence or a short bullet list), the asking or handing-back sentence (a question or not,
//! sometimes in bold), and an optional trailing emoji. Sentences about the task name it only by
//! a neutral placeholder ([`TASKS`]: "the export", "the sync"…), never by a tool. Every choice
//! goes through the caller's `choose`, so a seeded caller gets the same turns on every run.
//! [`other_language`] picks one of twenty whole turns per situation, written as a model writes
//! them, in thirteen languages and six scripts.

use super::Situation;

/// What the task is called in a sentence about it.
pub const TASKS: &[&str] = &[
    "the export",
    "the changes",
    "the ticket",
    "the backup",
    "the invoice run",
    "the config",
    "the sync",
    "the migration",
    "the import",
    "the report",
    "the cleanup",
    "the rollout",
    "the records",
    "the batch",
    "the draft",
];

/// What comes after the current step of the same task.
const NEXT_STEPS: &[&str] = &[
    "the next step",
    "the remaining items",
    "the second half",
    "the rest of the list",
    "the verification pass",
    "the final step",
    "the next batch",
    "step three",
];

/// Commands a turn may quote in a code span: generic names, not one tool's.
const COMMANDS: &[&str] = &[
    "deploy.sh",
    "run.sh",
    "backup.sh",
    "sync.sh",
    "./apply --dry-run",
    "make check",
];
/// Files a turn may quote in a code span.
const FILES: &[&str] = &[
    "config.yaml",
    "output.csv",
    "results.json",
    "backup/",
    "report.md",
    "export.csv",
];
/// Tasks that take a plural verb.
const PLURAL_TASKS: &[&str] = &["the changes", "the records"];

const ASK_EMOJI: &[&str] = &["🙂", "👍", "🚀", "🤔", "🙏", "👀", "✋"];
const HANDBACK_EMOJI: &[&str] = &["🎉", "✅", "🙌", "😊", "👍", "✨", "🚀"];

/// Openers before the first sentence; `true` when what follows goes on the same sentence.
const PERMISSION_OPENERS: &[(&str, bool)] = &[
    ("Okay,", true),
    ("Alright,", true),
    ("So,", true),
    ("Got it.", false),
    ("Sure thing.", false),
    ("Quick check:", false),
    ("Heads up:", false),
    ("Understood.", false),
    ("Before I start —", true),
    ("One thing first:", false),
];
const FAILURE_OPENERS: &[(&str, bool)] = &[
    ("Hmm,", true),
    ("Sorry,", true),
    ("Bad news:", false),
    ("Heads up:", false),
    ("Ugh.", false),
    ("Quick update:", false),
    ("So,", true),
];
const STEP_OPENERS: &[(&str, bool)] = &[
    ("Okay,", true),
    ("Alright,", true),
    ("Good progress:", false),
    ("Update:", false),
    ("So,", true),
    ("Nice.", false),
];
const HANDBACK_OPENERS: &[(&str, bool)] = &[
    ("Okay,", true),
    ("Alright,", true),
    ("Good news:", false),
    ("Great news —", true),
    ("There we go.", false),
    ("Voilà!", false),
    ("Update:", false),
    ("So,", true),
];

const ASK_HEADINGS: &[&str] = &[
    "**Ready to proceed**",
    "### Confirmation needed",
    "**Before I run this**",
    "## Next step",
    "**Action required**",
    "⚠️ **Heads up**",
];
const RETRY_HEADINGS: &[&str] = &[
    "**Something went wrong**",
    "### ❌ Failed",
    "**Error**",
    "## Run failed",
];
const HANDBACK_HEADINGS: &[&str] = &[
    "**Summary**",
    "✅ **Complete**",
    "## Result",
    "### What changed",
];

// ---------------------------------------------------------------- ask: before doing it

const PERMISSION_PREFACES: &[&str] = &[
    "I'm about to run {task}.",
    "Next up is {task}.",
    "I've prepared {task}.",
    "Everything's staged for {task}.",
    "{Task} {is} ready to go.",
    "Here's the plan for {task}.",
    "This will overwrite {task}.",
    "{Task} {is} set up; nothing has run yet.",
    "I'll be running `{cmd}` for {task}.",
    "The next command is `{cmd}`, which applies {task}.",
    "Before I touch {task}, I want to double-check with you.",
    "I have everything I need to start {task}.",
    "Running {task} will replace what's there now.",
    "I've drafted {task} and it's ready to apply.",
    "To do this I'll need to restart {task}.",
    "I can handle {task} in one go.",
    "I've checked {task} with `{cmd}` and it looks clean.",
    "This step changes {task} for everyone.",
];
const PERMISSION_DETAILS: &[&str] = &[
    "It should only take a couple of minutes.",
    "This can't be undone.",
    "Nothing has been changed yet.",
    "A backup is taken first, so it's reversible.",
    "It will touch about a dozen files.",
    "It may briefly interrupt anyone using it.",
    "I haven't applied anything so far.",
    "The dry run came back clean.",
    "It runs in the background, so you can keep working.",
    "Once started, it can't be paused.",
];
const PERMISSION_BULLETS: &[&str] = &[
    "- Runs against the current data",
    "- Nothing is deleted",
    "- Takes a few minutes",
    "- Existing entries are overwritten",
    "- A copy is kept in `{file}`",
    "- It can be rolled back",
    "- You'll get a summary at the end",
];
const PERMISSION_QUESTIONS: &[&str] = &[
    "Shall I go ahead?",
    "Should I proceed?",
    "OK to proceed?",
    "Go ahead?",
    "Proceed?",
    "Green light?",
    "Should I run it now?",
    "Do you want me to start {task}?",
    "Would you like me to go ahead with {task}?",
    "Can I go ahead and apply it?",
    "Is it alright if I continue?",
    "Any objections before I start?",
    "Are you happy for me to make the change?",
    "Mind if I run it?",
    "Do I have the go-ahead?",
    "Should I hold off, or go ahead?",
    "Want me to fire it off?",
    "Shall I apply {task} now?",
    "Should I run `{cmd}`?",
    "Ready for me to start?",
    "Does that plan work for you?",
    "Can you confirm before I continue?",
    "Would you like me to proceed, or review it first?",
    "All good to run?",
    "Go for it?",
    "Sound good?",
    "Shall I make it so?",
    "Would it be OK to start now?",
];
const PERMISSION_STATEMENTS: &[&str] = &[
    "Say the word and I'll start.",
    "Give me a thumbs-up and I'll run it.",
    "Just confirm and I'll proceed.",
    "I'll wait for your go-ahead.",
    "Waiting on your confirmation before I continue.",
    "Let me know and I'll kick things off.",
    "Reply \"yes\" to continue.",
    "I won't make any changes until you confirm.",
    "Holding here until you approve.",
    "Up to you.",
    "Please confirm to proceed.",
    "Ready when you are.",
    "Approve it and I'll apply {task}.",
    "If that works for you, I'll start right away.",
    "I can start whenever you're ready.",
    "Happy to go ahead once you give the nod.",
    "If the plan checks out, I'll run `{cmd}`.",
    "Confirm and I'll take it from there.",
    "I'll get going as soon as you OK it.",
    "Please review the plan and confirm.",
    "Standing by for your approval.",
    "Tell me to go and I'll go.",
    "I'd like your OK before touching {task}.",
    "Kindly confirm whether I should proceed.",
    "Just need a yes from you.",
];

// ---------------------------------------------------------------- ask: after a failure

const FAILURE_PREFACES: &[&str] = &[
    "{Task} failed partway through.",
    "That didn't work: {task} timed out.",
    "I hit an error while running {task}.",
    "Looks like {task} {was} rejected.",
    "{Task} stopped with a permission error.",
    "Something went wrong with {task}.",
    "The first attempt at {task} didn't go through.",
    "`{cmd}` exited with an error.",
    "{Task} came back with a 503.",
    "Unfortunately {task} couldn't complete.",
    "{Task} ran into a conflict and {was} rolled back.",
    "I wasn't able to finish {task}; the connection dropped.",
    "{Task} only got about halfway before it errored out.",
    "No luck: {task} failed again with the same error.",
];
const FAILURE_DETAILS: &[&str] = &[
    "It looks like a temporary issue on the server side.",
    "Nothing was saved, so it's safe to try again.",
    "The error message was fairly vague.",
    "It may have been a rate limit.",
    "Part of it did go through, though.",
    "I've left the logs above.",
    "I didn't change anything else.",
    "This sometimes happens under load.",
];
const FAILURE_BULLETS: &[&str] = &[
    "- Error: request timed out",
    "- Items processed: 14 of 40",
    "- Nothing was written",
    "- Last step: `{cmd}`",
    "- Cause: probably transient",
];
const FAILURE_QUESTIONS: &[&str] = &[
    "Want me to try again?",
    "Should I retry?",
    "Shall I give it another go?",
    "Do you want me to rerun it with a longer timeout?",
    "Retry now, or wait a bit?",
    "Try once more?",
    "Should I retry, or would you rather look into it first?",
    "Want me to retry just the part that failed?",
    "Would you like me to attempt {task} again?",
    "Should I run `{cmd}` again?",
    "Shall I retry with smaller batches?",
    "Do you want another attempt?",
    "Give it one more shot?",
    "Would you like me to try a different approach?",
    "Retry?",
];
const FAILURE_STATEMENTS: &[&str] = &[
    "I can retry whenever you're ready.",
    "Let me know if you'd like me to try again.",
    "Say the word and I'll rerun it.",
    "I can try again with a smaller batch if you want.",
    "Happy to retry — just tell me.",
    "I'll hold off on retrying until you confirm.",
    "Retrying is an option; your call.",
    "If you'd like, I can give it another shot.",
    "Tell me if I should run {task} again.",
    "I can rerun `{cmd}` as soon as you OK it.",
    "Let me know how you'd like to proceed.",
    "I'll wait for you before trying again.",
    "Just say \"retry\" and I'll go again.",
    "I'm ready to try again once you give the word.",
    "Please advise whether I should retry.",
];

// ---------------------------------------------------------------- ask: the next step

const STEP_PREFACES: &[&str] = &[
    "{Task} {is} done.",
    "First part's finished.",
    "That covers {task}.",
    "Step one is complete.",
    "I've finished {task}.",
    "{Task} went through without errors.",
    "{Task} {is} in place.",
    "The first batch is through.",
    "Halfway there: {task} {is} applied.",
    "I've updated {task} and checked it with `{cmd}`.",
    "{Task} {is} looking good so far.",
];
const STEP_DETAILS: &[&str] = &[
    "No errors along the way.",
    "Everything checks out so far.",
    "The output is above if you want to look.",
    "That took about a minute.",
    "Two warnings, nothing serious.",
];
const STEP_BULLETS: &[&str] = &[
    "- {Task}: done",
    "- Errors: none",
    "- Warnings: 2 (minor)",
    "- Output: `{file}`",
    "- Up next: {next}",
];
const STEP_QUESTIONS: &[&str] = &[
    "Shall I move on to {next}?",
    "Want me to continue with {next}?",
    "Ready for {next}?",
    "Should I carry on?",
    "Keep going?",
    "On to {next}?",
    "Next I'd do {next}. Go ahead?",
    "Do you want me to start {next} now?",
    "Should I continue, or do you want to check it first?",
    "Shall I do {next} as well?",
    "Would you like me to proceed with {next}?",
    "Continue?",
    "Does it look OK from your side before I start {next}?",
    "Same again for {next}?",
];
const STEP_STATEMENTS: &[&str] = &[
    "Next step is {next}; let me know when to continue.",
    "I'll start on {next} once you give the word.",
    "If this matches what you expected, I'll move on to {next}.",
    "Pausing here before {next}.",
    "Tell me when you want me to continue with {next}.",
    "I'll pick up {next} when you're ready.",
    "Say go and I'll do {next}.",
    "I can carry on with {next} whenever you like.",
    "Have a look, and if it's fine I'll continue.",
    "I've stopped here so you can check it first.",
    "{Next} can start as soon as you say so.",
    "Ping me when you want {next}.",
];

// ---------------------------------------------------------------- handback

const RESULTS: &[&str] = &[
    "Done.",
    "All set.",
    "Finished.",
    "{Task} {is} complete.",
    "{Task} finished without errors.",
    "I've updated {task}.",
    "{Task} went through.",
    "The changes are in place.",
    "Everything checks out.",
    "That's sorted.",
    "{Task} {has} been applied.",
    "Here's what I found.",
    "Wrapped up {task}.",
    "Fixed.",
    "{Task} {is} finished and verified.",
    "I've taken care of {task}.",
    "{Task} ran cleanly.",
    "Here's the summary.",
    "{Task} {is} up to date now.",
    "I've completed {task} as requested.",
    "The result is saved to `{file}`.",
    "Everything's back to normal.",
    "{Task} {is} live.",
    "All done with {task}.",
    "That should do it.",
    "Here you go.",
    "The answer is in the table above.",
    "{Task} {has} been reverted, as you asked.",
];
const HANDBACK_DETAILS: &[&str] = &[
    "No errors were reported.",
    "It took about two minutes.",
    "Nothing else needed changing.",
    "You can find the full output above.",
    "I've left a short summary above.",
    "All checks passed.",
    "I double-checked the result.",
    "There were a couple of warnings, but nothing that needs action.",
    "I didn't touch anything outside of {task}.",
    "The old version is still in `{file}` if you need it.",
    "Both copies now match.",
];
const HANDBACK_BULLETS: &[&str] = &[
    "- {Task}: done",
    "- Errors: none",
    "- Duration: ~2 min",
    "- Output: `{file}`",
    "- Warnings: 0",
    "- Items processed: 40",
    "- Status: ✅",
];
const INVITE_QUESTIONS: &[&str] = &[
    "Anything else?",
    "Is there anything else you'd like me to do?",
    "What would you like to do next?",
    "Need anything else?",
    "Can I help with anything else?",
    "Anything else I can take care of?",
    "Does that cover it?",
    "Does this answer your question?",
    "What's next?",
    "Is that what you were after?",
    "Anything else on your list?",
    "Is there something else you need?",
    "Did that work for you?",
    "Can I help with something else today?",
    "Does everything look right on your side?",
    "Anything you'd like changed?",
    "What else can I do for you?",
    "Need a hand with anything else?",
];
const INVITE_STATEMENTS: &[&str] = &[
    "Let me know if you need anything else.",
    "Happy to help with anything else.",
    "Ping me if something comes up.",
    "Just shout if you need more.",
    "I'm here if you need anything.",
    "Feel free to ask if anything's unclear.",
    "Hope that helps!",
    "Enjoy!",
    "Have a good one.",
    "That's everything.",
    "Over to you.",
    "Let me know what you'd like to tackle next.",
    "If anything looks off, tell me and I'll take a look.",
    "Feel free to send the next one.",
    "Nothing else is pending on my side.",
    "That's it for this one.",
    "Let me know if you have other questions.",
    "Cheers!",
    "Happy to dig into anything else.",
    "Please reach out if you need further assistance.",
];
const TERSE_HANDBACKS: &[&str] = &[
    "Done!",
    "All done.",
    "✔️ Done.",
    "Sorted.",
    "Complete.",
    "There you go!",
    "Finished — anything else?",
    "Done. Next?",
    "All set — what's next?",
    "Yep, done.",
    "Handled.",
    "Good to go.",
];

/// A number in `0..n` from the caller (0 when the list is empty).
fn below(choose: &mut dyn FnMut(usize) -> usize, n: usize) -> usize {
    if n == 0 { 0 } else { choose(n) % n }
}

fn pick(choose: &mut dyn FnMut(usize) -> usize, from: &[&'static str]) -> &'static str {
    let at = below(choose, from.len());
    from.get(at).copied().unwrap_or_default()
}

fn chance(choose: &mut dyn FnMut(usize) -> usize, percent: usize) -> bool {
    below(choose, 100) < percent
}

fn capitalised(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// The first letter lowered, unless the sentence starts with "I" or a code span.
fn lowered(text: &str) -> String {
    let first_word = text.split([' ', '\'']).next().unwrap_or_default();
    if first_word == "I" || text.starts_with('`') {
        return text.to_owned();
    }
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// What fills a template's slots.
struct Slots {
    task: &'static str,
    next: &'static str,
    cmd: &'static str,
    file: &'static str,
}

impl Slots {
    fn drawn(choose: &mut dyn FnMut(usize) -> usize) -> Slots {
        Slots {
            task: pick(choose, TASKS),
            next: pick(choose, NEXT_STEPS),
            cmd: pick(choose, COMMANDS),
            file: pick(choose, FILES),
        }
    }

    fn fill(&self, template: &str) -> String {
        let plural = PLURAL_TASKS.contains(&self.task);
        let (is, has, was) = if plural {
            ("are", "have", "were")
        } else {
            ("is", "has", "was")
        };
        template
            .replace("{Task}", &capitalised(self.task))
            .replace("{task}", self.task)
            .replace("{Next}", &capitalised(self.next))
            .replace("{next}", self.next)
            .replace("{cmd}", self.cmd)
            .replace("{file}", self.file)
            .replace("{is}", is)
            .replace("{has}", has)
            .replace("{was}", was)
    }
}

/// Two or three distinct bullet lines from `from`, filled.
fn bullets(choose: &mut dyn FnMut(usize) -> usize, from: &[&'static str], slots: &Slots) -> String {
    let wanted = 2 + below(choose, 2);
    let mut taken: Vec<&'static str> = Vec::new();
    for _ in 0..wanted * 4 {
        if taken.len() == wanted {
            break;
        }
        let line = pick(choose, from);
        if !taken.contains(&line) {
            taken.push(line);
        }
    }
    taken
        .iter()
        .map(|line| slots.fill(line))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Puts an opener before the first sentence.
fn opened(opener: (&str, bool), first: &str) -> String {
    let (word, runs_on) = opener;
    if runs_on {
        format!("{word} {}", lowered(first))
    } else {
        format!("{word} {first}")
    }
}

/// The lists one kind of asking turn is drawn from.
struct AskKind {
    prefaces: &'static [&'static str],
    details: &'static [&'static str],
    bullets: &'static [&'static str],
    bullet_intro: &'static [&'static str],
    questions: &'static [&'static str],
    statements: &'static [&'static str],
    headings: &'static [&'static str],
    openers: &'static [(&'static str, bool)],
    /// Percent of turns that say first what is about to happen or what happened.
    preface_odds: usize,
}

const PERMISSION: AskKind = AskKind {
    prefaces: PERMISSION_PREFACES,
    details: PERMISSION_DETAILS,
    bullets: PERMISSION_BULLETS,
    bullet_intro: &["Here's what will happen:", "What this does:", "Summary:"],
    questions: PERMISSION_QUESTIONS,
    statements: PERMISSION_STATEMENTS,
    headings: ASK_HEADINGS,
    openers: PERMISSION_OPENERS,
    preface_odds: 60,
};
const RETRY: AskKind = AskKind {
    prefaces: FAILURE_PREFACES,
    details: FAILURE_DETAILS,
    bullets: FAILURE_BULLETS,
    bullet_intro: &["Details:", "What I saw:", "Where it stopped:"],
    questions: FAILURE_QUESTIONS,
    statements: FAILURE_STATEMENTS,
    headings: RETRY_HEADINGS,
    openers: FAILURE_OPENERS,
    // A failure is nearly always reported before the offer to retry.
    preface_odds: 85,
};
const NEXT_STEP: AskKind = AskKind {
    prefaces: STEP_PREFACES,
    details: STEP_DETAILS,
    bullets: STEP_BULLETS,
    bullet_intro: &["Status:", "So far:", "Progress:"],
    questions: STEP_QUESTIONS,
    statements: STEP_STATEMENTS,
    headings: ASK_HEADINGS,
    openers: STEP_OPENERS,
    preface_odds: 60,
};

fn ask(choose: &mut dyn FnMut(usize) -> usize) -> String {
    let slots = Slots::drawn(choose);
    let kind = match below(choose, 3) {
        0 => &PERMISSION,
        1 => &RETRY,
        _ => &NEXT_STEP,
    };
    let mut lead: Vec<String> = Vec::new();
    if chance(choose, kind.preface_odds) {
        lead.push(slots.fill(pick(choose, kind.prefaces)));
        if chance(choose, 25) {
            lead.push(slots.fill(pick(choose, kind.details)));
        }
    }
    let mut blocks: Vec<String> = Vec::new();
    if chance(choose, 10) {
        blocks.push(pick(choose, kind.headings).to_owned());
    }
    let listed = chance(choose, 12);
    // The closing sentence: a question a little more often than not.
    let closing_template = if chance(choose, 52) {
        pick(choose, kind.questions)
    } else {
        pick(choose, kind.statements)
    };
    let mut closing = slots.fill(closing_template);
    let bold = chance(choose, 8);
    // Sometimes an offer and a question both: "Nothing's changed yet. Go ahead?"
    if !listed && lead.is_empty() && chance(choose, 15) {
        lead.push(slots.fill(pick(choose, kind.details)));
    }
    let opener = if chance(choose, 18) {
        Some(pick_opener(choose, kind.openers))
    } else {
        None
    };
    match (opener, lead.first_mut()) {
        (Some(opener), Some(first)) => *first = opened(opener, first),
        (Some(opener), None) => closing = opened(opener, &closing),
        (None, _) => {}
    }
    // Bold goes on the asking sentence alone, never on an opener before it.
    if bold && (opener.is_none() || !lead.is_empty()) {
        closing = format!("**{closing}**");
    }
    if listed {
        if !lead.is_empty() {
            blocks.push(lead.join(" "));
        }
        let intro = pick(choose, kind.bullet_intro);
        blocks.push(format!(
            "{intro}\n{}",
            bullets(choose, kind.bullets, &slots)
        ));
        blocks.push(closing);
    } else {
        lead.push(closing);
        let separator = if !blocks.is_empty() || chance(choose, 10) {
            "\n\n"
        } else {
            " "
        };
        if separator == " " {
            blocks.push(lead.join(" "));
        } else {
            blocks.extend(lead);
        }
    }
    let mut text = blocks.join("\n\n");
    if chance(choose, 12) {
        text.push(' ');
        text.push_str(pick(choose, ASK_EMOJI));
    }
    text
}

fn pick_opener(
    choose: &mut dyn FnMut(usize) -> usize,
    from: &[(&'static str, bool)],
) -> (&'static str, bool) {
    let at = below(choose, from.len());
    from.get(at).copied().unwrap_or(("", false))
}

fn handback(choose: &mut dyn FnMut(usize) -> usize) -> String {
    let slots = Slots::drawn(choose);
    if chance(choose, 8) {
        let mut text = pick(choose, TERSE_HANDBACKS).to_owned();
        if chance(choose, 30) {
            text.push(' ');
            text.push_str(pick(choose, HANDBACK_EMOJI));
        }
        return text;
    }
    // 0–5: result and invitation; 6–8: result alone; 9: invitation alone.
    let shape = below(choose, 10);
    let with_result = shape <= 8;
    let with_invite = shape <= 5 || shape == 9;
    let mut blocks: Vec<String> = Vec::new();
    if chance(choose, 10) {
        blocks.push(pick(choose, HANDBACK_HEADINGS).to_owned());
    }
    let mut lead: Vec<String> = Vec::new();
    let mut list: Option<String> = None;
    if with_result {
        lead.push(slots.fill(pick(choose, RESULTS)));
        if chance(choose, 30) {
            lead.push(slots.fill(pick(choose, HANDBACK_DETAILS)));
        }
        if chance(choose, 12) {
            list = Some(bullets(choose, HANDBACK_BULLETS, &slots));
        }
    }
    let invite = if with_invite {
        let template = if chance(choose, 50) {
            pick(choose, INVITE_QUESTIONS)
        } else {
            pick(choose, INVITE_STATEMENTS)
        };
        let mut sentence = slots.fill(template);
        if chance(choose, 6) {
            sentence = format!("**{sentence}**");
        }
        Some(sentence)
    } else {
        None
    };
    if chance(choose, 15) {
        let opener = pick_opener(choose, HANDBACK_OPENERS);
        // Not before a sentence that is an opener itself ("Here you go.").
        if let Some(first) = lead.first_mut().filter(|f| !f.starts_with("Here")) {
            *first = opened(opener, first);
        }
    }
    let spaced = !blocks.is_empty() || list.is_some() || chance(choose, 12);
    match (list, spaced) {
        (Some(list), _) => {
            if !lead.is_empty() {
                blocks.push(lead.join(" "));
            }
            blocks.push(list);
            blocks.extend(invite);
        }
        (None, true) => {
            blocks.extend(lead);
            blocks.extend(invite);
        }
        (None, false) => {
            lead.extend(invite);
            blocks.push(lead.join(" "));
        }
    }
    let mut text = blocks.join("\n\n");
    if chance(choose, 14) {
        text.push(' ');
        text.push_str(pick(choose, HANDBACK_EMOJI));
    }
    text
}

/// An English last assistant turn of the situation, composed from the slot lists.
pub fn english(situation: Situation, choose: &mut dyn FnMut(usize) -> usize) -> String {
    match situation {
        Situation::Ask => ask(choose),
        Situation::Handback => handback(choose),
    }
}

/// Whole asking turns in French, Spanish, German, Portuguese, Italian, Japanese, Chinese,
/// Russian, Korean, Arabic, Hindi, Turkish and Polish.
pub const OTHER_ASKS: &[&str] = &[
    "J'ai préparé l'export. Voulez-vous que je le lance maintenant ?",
    "L'opération a échoué : délai d'attente dépassé. Je peux réessayer si vous le souhaitez.",
    "Todo está listo para la migración. ¿Quieres que continúe?",
    "La sincronización falló a mitad de camino. ¿Lo intento de nuevo? 🙏",
    "Ich habe die Änderungen vorbereitet, aber noch nichts übernommen. Soll ich fortfahren?",
    "Der Import ist fehlgeschlagen. Sag Bescheid, dann versuche ich es noch einmal.",
    "Posso seguir com o backup agora? Só preciso da sua confirmação.",
    "A primeira parte terminou. Me avise quando quiser que eu passe para a próxima etapa.",
    "Ho preparato la configurazione, ma non l'ho ancora applicata. Procedo?",
    "バックアップの準備ができました。このまま実行してもよろしいですか？",
    "同期中にエラーが発生しました。もう一度試しますか？",
    "我已经准备好导出了。要我现在开始吗？",
    "迁移失败了，可能是网络超时。如果需要，我可以重试一次。",
    "Я подготовил изменения, но пока ничего не применял. Продолжить?",
    "**Импорт завершился с ошибкой.** Могу попробовать ещё раз — просто скажите.",
    "설정 변경을 적용할 준비가 되었습니다. 진행할까요?",
    "لقد جهّزت التحديث ولم أطبّقه بعد. هل تريد أن أبدأ الآن؟",
    "बैकअप तैयार है। क्या मैं इसे अभी शुरू कर दूँ?",
    "Senkronizasyon başarısız oldu. Tekrar denememi ister misin?",
    "Pierwszy krok gotowy. Daj znać, czy mam przejść do następnego.",
];

/// Whole handing-back turns in the same languages.
pub const OTHER_HANDBACKS: &[&str] = &[
    "C'est fait ! L'export s'est terminé sans erreur. Autre chose ?",
    "Les modifications sont appliquées. N'hésitez pas si vous avez besoin d'autre chose.",
    "¡Listo! La copia de seguridad se completó correctamente. ¿Algo más en lo que pueda ayudarte?",
    "He actualizado la configuración. Avísame si necesitas algo más. 😊",
    "Erledigt – die Synchronisierung ist abgeschlossen. Kann ich sonst noch etwas für dich tun?",
    "Die Änderungen sind übernommen. Melde dich, wenn du noch etwas brauchst.",
    "Pronto! O relatório foi gerado. Precisa de mais alguma coisa?",
    "Tudo certo com a migração. Se precisar de algo mais, é só falar.",
    "Fatto! Il backup è stato completato. Posso aiutarti con qualcos'altro?",
    "完了しました。エクスポートは正常に終了しています。他に何かお手伝いできることはありますか？",
    "設定を更新しました。ほかにご要望があればお知らせください。",
    "搞定了！同步已经完成，没有报错。还有什么需要我帮忙的吗？",
    "更改已经全部应用。如有其他需要，随时告诉我。",
    "✅ **Готово!** Резервная копия создана. Чем ещё могу помочь?",
    "Изменения применены. Если понадобится что-то ещё — пишите.",
    "완료했습니다! 가져오기가 문제없이 끝났어요. 더 필요한 것이 있으신가요?",
    "تم الانتهاء من التصدير بنجاح. هل هناك أي شيء آخر يمكنني مساعدتك به؟",
    "हो गया! बदलाव लागू कर दिए गए हैं। और कुछ चाहिए तो बताइए।",
    "Tamamdır, yedekleme bitti. Başka bir isteğin var mı?",
    "Gotowe! Eksport zakończył się bez błędów. Daj znać, jeśli potrzebujesz czegoś jeszcze. 🎉",
];

/// A whole last assistant turn of the situation in another language than English.
pub fn other_language(situation: Situation, choose: &mut dyn FnMut(usize) -> usize) -> String {
    let from = match situation {
        Situation::Ask => OTHER_ASKS,
        Situation::Handback => OTHER_HANDBACKS,
    };
    pick(choose, from).to_owned()
}
