//! Held-out grammar (written fifth, [`super::HELD_OUT`]): the last message an assistant writes
//! before the user's next turn, as each kind of agent product writes it.
//!
//! It writes two kinds of turn. In an *ask* the assistant waits for the
//! user's word before it does (more of) the task: permission, a plan to
//! approve, options to choose from, a blocker with an offer to retry, the
//! next step of the same task, a clarifying question, a command-line
//! confirmation prompt, a support bot's request to confirm. In a *handback*
//! the assistant has finished or answered and gives the conversation back: a
//! result, a summary, a coding agent's change and test report, an answer, a
//! deliverable, a check that the result suits, a sign-off.
//!
//! This file was written blind, without looking at the other grammars, the
//! generated sets or any detector, so that it can serve as a held-out set.
//! The phrasing comes from what assistants write in real traffic (chat
//! models, support bots, coding and command-line agents, operations bots),
//! including the awkward cases: asks without a question mark, hand-backs that
//! end with a question, and a trailing "Let me know if ..." in both.
//!
//! A turn is composed from slot lists. A family is picked for the situation;
//! the family draws a lead, details (steps, options, bullets) and a closer.
//! Placeholders in braces are filled from a context drawn once per turn
//! (task, unit, environment, file, numbers, names). Chat-style families may
//! also get an opener, an emoji or a signature line. Every random choice goes
//! through the caller's `choose`, so a seeded caller gets the same turns.

use super::Situation;

mod handbacks;

use handbacks::*;

/// An English turn for `situation`. `choose(n)` returns a number in 0..n (the caller's seeded generator).
pub fn english(situation: Situation, choose: &mut dyn FnMut(usize) -> usize) -> String {
    let ctx = Ctx::draw(choose);
    let families = match situation {
        Situation::Ask => ASK_FAMILIES,
        Situation::Handback => HANDBACK_FAMILIES,
    };
    let (family, chatty) = pick_or(choose, families, (hand_done, true));
    let body = family(choose);
    // Prompts, bot reports and support messages carry their own framing, so
    // a chat opener or emoji would make them unrealistic.
    let text = if chatty {
        decorate(situation, body, choose)
    } else {
        body
    };
    ctx.fill(&text)
}

/// A whole turn for `situation` in another language (about twenty per situation, many languages and scripts).
pub fn other_language(situation: Situation, choose: &mut dyn FnMut(usize) -> usize) -> String {
    let turns = match situation {
        Situation::Ask => ASK_OTHER,
        Situation::Handback => HANDBACK_OTHER,
    };
    pick(choose, turns).to_string()
}

/// A family writes the body of a turn, placeholders still unfilled.
type Family = fn(&mut dyn FnMut(usize) -> usize) -> String;

const ASK_FAMILIES: &[(Family, bool)] = &[
    (ask_permission, true),
    (ask_plan, true),
    (ask_options, true),
    (ask_failure, true),
    (ask_next_step, true),
    (ask_clarify, true),
    (ask_cli, false),
    (ask_support, false),
    (ask_destructive, true),
    (ask_code_edit, true),
    (ask_draft, true),
];

const HANDBACK_FAMILIES: &[(Family, bool)] = &[
    (hand_done, true),
    (hand_summary, true),
    (hand_code, true),
    (hand_answer, true),
    (hand_deliverable, true),
    (hand_check, true),
    // Thanks already open the turn, so no chat opener on top.
    (hand_thanks, false),
    (hand_support, false),
    (hand_ops, false),
    (hand_unable, true),
    (hand_howto, true),
    (hand_status, true),
];

// ---------------------------------------------------------------------------
// Drawing helpers. They never index out of range, even if a caller's
// `choose` returns n or more: the filter's code may not panic.

fn pick<T: Copy + Default>(choose: &mut dyn FnMut(usize) -> usize, items: &[T]) -> T {
    pick_or(choose, items, T::default())
}

/// `pick` for items without a default, such as the family table.
fn pick_or<T: Copy>(choose: &mut dyn FnMut(usize) -> usize, items: &[T], fallback: T) -> T {
    let i = choose(items.len());
    items.get(i).or(items.last()).copied().unwrap_or(fallback)
}

fn one_in(choose: &mut dyn FnMut(usize) -> usize, n: usize) -> bool {
    choose(n) == 0
}

fn pick_distinct(
    choose: &mut dyn FnMut(usize) -> usize,
    items: &[&'static str],
    k: usize,
) -> Vec<&'static str> {
    let mut pool = items.to_vec();
    let mut out = Vec::with_capacity(k);
    while out.len() < k && !pool.is_empty() {
        let i = choose(pool.len()).min(pool.len() - 1);
        out.push(pool.remove(i));
    }
    out
}

/// Space or paragraph break between sentences: both are common in chat.
fn gap(choose: &mut dyn FnMut(usize) -> usize) -> &'static str {
    if one_in(choose, 3) { "\n\n" } else { " " }
}

fn lowercase_first(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

fn capitalize(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// Appends `closer` after a gap unless it is empty (an empty entry means "no closer").
/// After a list, a quote, a table or a code block the closer needs its own paragraph.
fn close(s: &mut String, closer: &str, choose: &mut dyn FnMut(usize) -> usize) {
    if closer.is_empty() {
        return;
    }
    if ends_in_block(s) {
        s.push_str("\n\n");
    } else {
        s.push_str(gap(choose));
    }
    s.push_str(closer);
}

fn ends_in_block(s: &str) -> bool {
    let last = s.lines().last().unwrap_or("");
    let numbered = last
        .split_once(". ")
        .is_some_and(|(head, _)| !head.is_empty() && head.chars().all(|c| c.is_ascii_digit()));
    numbered || last.starts_with(['-', '*', '•', '>', '|']) || last.ends_with("```")
}

fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

// ---------------------------------------------------------------------------
// Per-turn context.

/// Task name, the unit it works on, the verb for starting it, and its script.
const TASKS: &[(&str, &str, &str, &str)] = &[
    ("the migration", "tables", "run", "migrate.sh"),
    ("the refund batch", "refunds", "process", "refunds.sh"),
    ("the sync job", "records", "run", "sync.sh"),
    ("the report", "rows", "generate", "report.sh"),
    ("the import", "rows", "run", "import.sh"),
    ("the cleanup", "files", "run", "cleanup.sh"),
    ("the rollout", "servers", "continue", "rollout.sh"),
    ("the backfill", "records", "run", "backfill.sh"),
    ("the invoice run", "invoices", "start", "invoices.sh"),
    ("the data export", "rows", "start", "export.sh"),
    ("the price update", "products", "apply", "prices.sh"),
    ("the account merge", "accounts", "perform", "merge.sh"),
    ("the archive job", "documents", "run", "archive.sh"),
    ("the schedule change", "shifts", "apply", "schedule.sh"),
    ("the email campaign", "recipients", "send", "campaign.sh"),
    (
        "the quarterly reconciliation",
        "transactions",
        "run",
        "reconcile.sh",
    ),
];

const ENVS: &[&str] = &[
    "staging",
    "production",
    "the test workspace",
    "the EU region",
    "the sandbox",
];

const FILES: &[&str] = &[
    "report_final.csv",
    "config.yaml",
    "customers_export.xlsx",
    "mapping.json",
    "schedule.txt",
    "rates_2024.csv",
    "settings.toml",
    "notes.md",
];

/// Source file and its test file, drawn together so a change summary is coherent.
const PATHS: &[(&str, &str)] = &[
    ("src/jobs/sync.py", "tests/test_sync.py"),
    ("lib/billing/refunds.rb", "spec/billing/refunds_spec.rb"),
    ("src/utils/dates.ts", "src/utils/dates.test.ts"),
    ("app/services/export.go", "app/services/export_test.go"),
    ("src/report/render.rs", "tests/report_render.rs"),
    (
        "internal/schedule/window.go",
        "internal/schedule/window_test.go",
    ),
    (
        "src/main/java/com/acme/Invoices.java",
        "src/test/java/com/acme/InvoicesTest.java",
    ),
];

const TEAMS: &[&str] = &[
    "finance team",
    "ops team",
    "support team",
    "data team",
    "billing team",
    "on-call engineer",
    "account manager",
];

/// Future times only: the asks schedule things and the hand-backs name the next run.
const WHENS: &[&str] = &[
    "tonight",
    "tomorrow morning",
    "after 6 pm",
    "this weekend",
    "on Monday",
    "during the maintenance window",
    "later today",
    "at the top of the hour",
    "first thing tomorrow",
];

/// Appointment times for the support families, which need a concrete slot.
const SLOTS: &[&str] = &[
    "Thursday at 10:30",
    "Friday at 2 pm",
    "next Tuesday morning",
    "the 14th at 9:00",
];

const USER_NAMES: &[&str] = &[
    "Priya", "Marcus", "Ana", "Tom", "Keiko", "Sam", "Olu", "Fatima", "Jonas", "Lena", "Diego",
    "Mei",
];

const AGENT_NAMES: &[&str] = &[
    "Alex", "Jordan", "Maya", "Chris", "Dana", "Riley", "Noor", "Ben",
];

const CURRENCIES: &[&str] = &["$", "€", "£"];

struct Ctx {
    values: Vec<(&'static str, String)>,
}

impl Ctx {
    fn draw(choose: &mut dyn FnMut(usize) -> usize) -> Self {
        let (task, unit, verb, script) = pick(choose, TASKS);
        let (path, path2) = pick(choose, PATHS);
        let n = 2 + choose(480);
        let total = n + 10 + choose(4000);
        let fail = 2 + choose(47);
        let amount = format!(
            "{}{}.{:02}",
            pick(choose, CURRENCIES),
            5 + choose(400),
            choose(100)
        );
        let values = vec![
            ("{Task}", capitalize(task)),
            ("{task}", task.to_string()),
            ("{unit}", unit.to_string()),
            ("{verb}", verb.to_string()),
            ("{script}", script.to_string()),
            ("{env}", pick(choose, ENVS).to_string()),
            ("{file}", pick(choose, FILES).to_string()),
            ("{path}", path.to_string()),
            ("{path2}", path2.to_string()),
            ("{team}", pick(choose, TEAMS).to_string()),
            ("{when}", pick(choose, WHENS).to_string()),
            ("{slot}", pick(choose, SLOTS).to_string()),
            ("{name}", pick(choose, USER_NAMES).to_string()),
            ("{agent}", pick(choose, AGENT_NAMES).to_string()),
            ("{n}", n.to_string()),
            ("{total}", thousands(total)),
            ("{left}", thousands(total - n)),
            ("{fail}", fail.to_string()),
            ("{mins}", (2 + choose(44)).to_string()),
            ("{secs}", format!("{:02}", choose(60))),
            ("{amount}", amount),
            ("{order}", format!("#{}", 100_000 + choose(900_000))),
            ("{digits}", format!("{:04}", choose(10_000))),
            ("{ticket}", format!("#{}", 10_000 + choose(90_000))),
        ];
        Ctx { values }
    }

    fn fill(&self, template: &str) -> String {
        let mut out = template.to_string();
        for (key, value) in &self.values {
            out = out.replace(key, value);
        }
        out
    }
}

// ---------------------------------------------------------------------------
// Decoration shared by the chat-style families.

const ASK_OPENERS: &[&str] = &[
    "Sure, I can help with that.",
    "Got it.",
    "Understood.",
    "Okay.",
    "Thanks, {name}.",
    "Good idea.",
    "Thanks for the details.",
    "Hi {name}!",
];

const HANDBACK_OPENERS: &[&str] = &[
    "Okay!",
    "Thanks for waiting.",
    "Sorry for the delay.",
    "Thanks, {name}.",
    "Alright.",
    "Hi {name}!",
    "Sure.",
];

const ASK_EMOJI: &[&str] = &["🙂", "👍", "🙏", "🤔"];
const HANDBACK_EMOJI: &[&str] = &["🙂", "👍", "😊", "🎉", "🚀"];

const SIGNATURES: &[&str] = &[
    "— {agent}",
    "Cheers,\n{agent}",
    "Best regards,\n{agent}",
    "Thanks,\n{agent}",
];

fn decorate(situation: Situation, body: String, choose: &mut dyn FnMut(usize) -> usize) -> String {
    let (openers, emoji) = match situation {
        Situation::Ask => (ASK_OPENERS, ASK_EMOJI),
        Situation::Handback => (HANDBACK_OPENERS, HANDBACK_EMOJI),
    };
    let mut out = String::new();
    if one_in(choose, 4) {
        out.push_str(pick(choose, openers));
        out.push_str(if one_in(choose, 3) { "\n\n" } else { " " });
    }
    out.push_str(&body);
    if one_in(choose, 9) {
        out.push(' ');
        out.push_str(pick(choose, emoji));
    }
    if one_in(choose, 14) {
        out.push_str("\n\n");
        out.push_str(pick(choose, SIGNATURES));
    }
    out
}

// ---------------------------------------------------------------------------
// Ask: permission to start.

const PERMISSION_LEADS: &[&str] = &[
    "I'm ready to {verb} {task} in {env}.",
    "Everything is staged for {task}.",
    "I've prepared {task}: {total} {unit} are in scope.",
    "The dry run for {task} came back clean: {total} {unit} would change and there are no conflicts.",
    "I have everything I need to {verb} {task}.",
    "{Task} is queued, but I haven't started it.",
    "I've checked the inputs for {task} and they look consistent.",
    "The preview for {task} is ready. It touches {total} {unit} in {env}.",
    "I can {verb} {task} now.",
    "All the pre-checks for {task} passed.",
];

const PERMISSION_NOTES: &[&str] = &[
    "It should take about {mins} minutes.",
    "Nothing in {env} changes until you confirm.",
    "This is hard to undo once it starts.",
    "I'll post progress here while it runs.",
    "The {team} asked to be told before this runs, so I'll let them know as well.",
    "The last run took {mins} minutes, so expect something similar.",
    "I'd suggest doing it {when}, when traffic is low.",
];

const PERMISSION_ASKS: &[&str] = &[
    "Should I go ahead?",
    "Do you want me to proceed?",
    "Okay to start?",
    "Can I go ahead and {verb} it now, or would you rather I do it {when}?",
    "Want me to kick it off?",
    "Just say the word and I'll start.",
    "I'll wait for your go-ahead before running anything.",
    "Give me a thumbs-up and I'll {verb} it.",
    "Let me know if you'd like me to proceed.",
    "Reply \"go\" when you're ready and I'll start.",
    "Shall I {verb} it now?",
    "Please confirm and I'll start right away.",
    "I haven't changed anything yet, so confirm and I'll get going.",
    "Would you like me to go ahead {when}?",
    "Do I have your OK to start?",
    "Ready when you are.",
    "Let me know when it's a good time to start.",
    "Are you happy for me to go ahead?",
];

fn ask_permission(choose: &mut dyn FnMut(usize) -> usize) -> String {
    let mut s = pick(choose, PERMISSION_LEADS).to_string();
    if one_in(choose, 2) {
        s.push(' ');
        s.push_str(pick(choose, PERMISSION_NOTES));
    }
    close(&mut s, pick(choose, PERMISSION_ASKS), choose);
    s
}

// ---------------------------------------------------------------------------
// Ask: a plan to approve.

const PLAN_LEADS: &[&str] = &[
    "Here's my plan for {task}:",
    "Before I touch anything, here's what I intend to do:",
    "Proposed steps for {task}:",
    "This is how I'd approach {task}:",
    "**Plan for {task}**",
    "Here's the outline. Nothing has been run yet:",
    "I'd break {task} into these steps:",
    "Here's what {task} would look like:",
];

const PLAN_PROSE_LEADS: &[&str] = &[
    "Here's what I have in mind for {task}.",
    "I've worked out an approach for {task}.",
    "Before I start {task}, here's the plan.",
    "I'd like to run this past you first.",
];

// Steps start with a verb so they can be capitalized for lists and used as-is in prose.
const PLAN_STEPS: &[&str] = &[
    "take a snapshot of the current {unit} so we can roll back",
    "do a trial run of {task} in {env}",
    "compare the counts before and after (I expect {total})",
    "pause after the first {n} {unit} and check for errors",
    "let the {team} know once it's done",
    "update `{file}` with the new values",
    "remove the leftover {unit} from the last attempt",
    "re-run the checks and share the results with you",
    "leave the remaining {unit} to run {when}",
    "archive the old `{file}`",
    "fix the {fail} {unit} that failed validation",
    "turn off the nightly job while this runs",
    "send you a short summary with the before and after numbers",
];

const PLAN_CLOSERS: &[&str] = &[
    "Does this look right?",
    "Any changes before I start?",
    "Let me know if you want me to adjust anything; otherwise I'll start with step 1.",
    "If that works for you, I'll begin.",
    "Want me to go ahead with this?",
    "Approve it and I'll get started, or tell me what to change.",
    "Sound good?",
    "Shall I start with step 1?",
    "I'll hold here until you confirm the plan.",
    "Let me know if you have any questions about the plan.",
    "Happy to change the order if you'd prefer.",
    "Does that match what you had in mind?",
    "If you'd rather skip any of these, tell me which.",
    "OK to proceed?",
    "Once you give the go-ahead I'll start.",
];

fn ask_plan(choose: &mut dyn FnMut(usize) -> usize) -> String {
    let k = 3 + choose(3);
    let steps = pick_distinct(choose, PLAN_STEPS, k);
    let mut s = String::new();
    match choose(4) {
        0 | 1 => {
            s.push_str(pick(choose, PLAN_LEADS));
            s.push_str("\n\n");
            let numbered = one_in(choose, 2);
            for (i, step) in steps.iter().enumerate() {
                if numbered {
                    s.push_str(&format!("{}. ", i + 1));
                } else {
                    s.push_str("- ");
                }
                s.push_str(&capitalize(step));
                s.push('\n');
            }
            s.pop();
        }
        2 => {
            s.push_str(pick(choose, PLAN_LEADS));
            s.push('\n');
            for (i, step) in steps.iter().enumerate() {
                s.push_str(&format!("\n**Step {}:** {}", i + 1, capitalize(step)));
            }
        }
        _ => {
            s.push_str(pick(choose, PLAN_PROSE_LEADS));
            s.push_str(" First I'll ");
            let last = steps.len() - 1;
            for (i, step) in steps.iter().enumerate() {
                if i == last {
                    s.push_str(", and finally ");
                } else if i > 0 {
                    s.push_str(", then ");
                }
                s.push_str(step);
            }
            s.push('.');
        }
    }
    s.push_str("\n\n");
    s.push_str(pick(choose, PLAN_CLOSERS));
    s
}

// ---------------------------------------------------------------------------
// Ask: options to choose from.

const OPTION_LEADS: &[&str] = &[
    "There are a few ways we could handle {task}:",
    "I see a couple of options for {task}:",
    "You have a choice here:",
    "How would you like me to handle the {fail} {unit} that didn't match?",
    "Before I continue, I need you to pick an approach:",
    "{Task} can go one of these ways:",
    "I can do this a couple of different ways:",
];

const OPTIONS: &[&str] = &[
    "run it all at once {when} (faster, but {env} will be slow for about {mins} minutes)",
    "split it into batches of {n} (slower, but safer)",
    "skip the {fail} problem {unit} and deal with them by hand later",
    "fix the {fail} problem {unit} first, then rerun everything",
    "keep the existing `{file}` and only add the new {unit}",
    "replace `{file}` entirely",
    "wait until the {team} signs off",
    "do a dry run first and go through the output together",
    "roll back to yesterday's version and start over",
    "only handle the {unit} from this month",
];

const OPTION_RECS: &[&str] = &[
    "I'd lean toward {opt}, but it's your call.",
    "My recommendation would be {opt}.",
    "Personally I'd go with {opt}.",
    "{Opt} is the safer bet, for what it's worth.",
];

const OPTION_CLOSERS: &[&str] = &[
    "Which would you prefer?",
    "Which one should I go with?",
    "Let me know which option you'd like.",
    "Tell me which one and I'll set it up.",
    "Your call. I'll wait to hear back.",
    "Any preference?",
    "What would you like to do?",
    "Pick one and I'll take it from there.",
    "Or, if you have another idea, I'm open to it.",
];

fn ask_options(choose: &mut dyn FnMut(usize) -> usize) -> String {
    let k = 2 + choose(2);
    let options = pick_distinct(choose, OPTIONS, k);
    let style = choose(4);
    let labels: [&str; 3] = if style == 1 || style == 3 {
        ["1", "2", "3"]
    } else {
        ["A", "B", "C"]
    };
    let mut s = pick(choose, OPTION_LEADS).to_string();
    s.push_str("\n\n");
    for (label, option) in labels.iter().zip(&options) {
        let text = capitalize(option);
        let line = match style {
            0 => format!("**Option {label}:** {text}"),
            1 => format!("{label}. {text}"),
            2 => format!("- **{label}**: {text}"),
            _ => format!("Option {label}: {text}"),
        };
        s.push_str(&line);
        s.push('\n');
    }
    s.push('\n');
    if one_in(choose, 2) {
        let opt = format!(
            "option {}",
            pick(choose, labels.get(..k).unwrap_or(&labels))
        );
        let rec = pick(choose, OPTION_RECS)
            .replace("{opt}", &opt)
            .replace("{Opt}", &capitalize(&opt));
        s.push_str(&rec);
        s.push(' ');
    }
    if one_in(choose, 4) {
        let choices = if k == 2 {
            format!("{} or {}", labels[0], labels[1])
        } else {
            format!("{}, {} or {}", labels[0], labels[1], labels[2])
        };
        s.push_str(&format!("Just reply with {choices}."));
    } else {
        s.push_str(pick(choose, OPTION_CLOSERS));
    }
    s
}

// ---------------------------------------------------------------------------
// Ask: a failure or blocker, with an offer to retry.

const FAIL_LEADS: &[&str] = &[
    "{Task} stopped partway through: {n} of {total} {unit} went through, then it hit a timeout.",
    "I ran into a problem with {task}: `permission denied` when writing to `{file}`.",
    "Heads up: {task} failed on {fail} {unit} with a validation error.",
    "I couldn't finish {task}. The connection to {env} dropped after about {mins} minutes.",
    "Unfortunately {task} didn't go through. The error was `quota exceeded`.",
    "❌ {Task} failed at step 3 of 5.",
    "I wasn't able to {verb} {task} because `{file}` is locked by another process.",
    "Something went wrong while running {task}: {fail} {unit} were rejected.",
    "{Task} is blocked. I don't have write access to {env}.",
    "The first attempt at {task} failed with `503 Service Unavailable`.",
    "I tried to {verb} {task}, but `{file}` is missing a required column.",
];

const FAIL_DETAILS: &[&str] = &[
    "Nothing was lost; the {unit} that already went through are fine.",
    "No changes were saved, so we're back where we started.",
    "The other process is expected to finish {when}.",
    "It looks like a temporary issue on the server side.",
    "I think my access to {env} expired.",
    "Here's the relevant line from the log:\n\n```\nERROR batch {n}: request timed out after 30s\n```",
    "The {team} mentioned maintenance today, which might explain it.",
];

const FAIL_OFFERS: &[&str] = &[
    "Want me to retry?",
    "I can try again now, or hold off and try {when}. Which do you prefer?",
    "Should I retry just the {fail} failed {unit}?",
    "I can retry with smaller batches if you'd like.",
    "If you can give me access to `{file}`, I'll run it again.",
    "Let me know if you want me to try again.",
    "Would you like me to pick up where it left off?",
    "Say \"retry\" and I'll run it again.",
    "Once that's sorted, tell me and I'll resume from where it stopped.",
    "I can roll back the partial changes or continue from where it stopped. Your call.",
    "How would you like to proceed?",
    "Do you want me to try a different approach?",
    "I'll leave it as is until I hear from you.",
];

fn ask_failure(choose: &mut dyn FnMut(usize) -> usize) -> String {
    let mut s = pick(choose, FAIL_LEADS).to_string();
    if one_in(choose, 2) {
        s.push_str(gap(choose));
        s.push_str(pick(choose, FAIL_DETAILS));
    }
    close(&mut s, pick(choose, FAIL_OFFERS), choose);
    s
}

// ---------------------------------------------------------------------------
// Ask: part of the task is done, the next step waits for the user.

const NEXT_LEADS: &[&str] = &[
    "The first batch is done: {n} of {total} {unit} processed with no errors.",
    "Step 1 is finished and the backup of {env} is complete.",
    "I've drafted the first half of {task}.",
    "Phase one of {task} is complete and everything checks out.",
    "I've updated `{file}`, which covers the first part of {task}.",
    "{n} {unit} are done so far.",
    "✅ The first {n} {unit} went through cleanly.",
    "The test run in {env} worked as expected.",
];

const NEXT_STEPS: &[&str] = &[
    "Next up is the remaining {left} {unit}.",
    "The next step would be switching {env} over to the new version.",
    "After this I'd move on to the cleanup.",
    "The rest should take roughly {mins} minutes.",
    "The remaining {left} {unit} are the larger ones, so they'll take longer.",
    "Next I'd apply the same change to production.",
];

const NEXT_CLOSERS: &[&str] = &[
    "Shall I continue?",
    "Want me to keep going?",
    "Should I carry on with the rest?",
    "Ready to continue whenever you are.",
    "Let me know and I'll do the rest.",
    "Can you take a quick look before I go on?",
    "I'll pause here until you give me the OK.",
    "Do you want me to continue now, or pick it up {when}?",
    "If everything looks good on your side, I'll start the next batch.",
    "Let me know if you'd like me to continue.",
    "Okay to move on?",
    "Just reply \"continue\" and I'll pick it back up.",
];

fn ask_next_step(choose: &mut dyn FnMut(usize) -> usize) -> String {
    let mut s = pick(choose, NEXT_LEADS).to_string();
    if !one_in(choose, 3) {
        s.push(' ');
        s.push_str(pick(choose, NEXT_STEPS));
    }
    close(&mut s, pick(choose, NEXT_CLOSERS), choose);
    s
}

// ---------------------------------------------------------------------------
// Ask: a clarifying question the assistant needs answered.

const CLARIFY_LEADS: &[&str] = &[
    "Quick question before I start:",
    "One thing I need to check first.",
    "Before I set up {task}, I need a bit more information.",
    "Just to make sure I get this right:",
    "I can do that, but I need one detail first.",
    "Happy to help with {task}.",
    "",
];

const CLARIFY_QUESTIONS: &[&str] = &[
    "Should this go to staging or straight to production?",
    "Do you want the {unit} sorted by date or by amount?",
    "Which account should {task} be billed to?",
    "Should I include the {fail} archived {unit}, or leave them out?",
    "What time zone should I use for the schedule?",
    "Do you want to keep the old `{file}` or overwrite it?",
    "Who should get the summary when it's done?",
    "Is this for the whole team or just your account?",
    "Did you mean the {unit} from last month, or all of them?",
    "Do you have a deadline for {task}?",
    "Please send me the order number so I can look it up.",
    "I'll need the account ID before I can go any further.",
    "Tell me which {unit} to leave out and I'll take it from there.",
    "Could you paste the error message you're seeing?",
    "Can you share the latest version of `{file}`?",
    "I'm not sure whether you want the totals per month or per week, so let me know.",
    "Which format works best for you: CSV, PDF, or a spreadsheet?",
    "What should happen to the {unit} that already exist?",
];

const CLARIFY_TAILS: &[&str] = &[
    "Once I know that, I'll {verb} {task}.",
    "As soon as I have that I'll get started.",
    "Then I can set it up.",
    "No rush.",
    "I'd rather not guess and get it wrong.",
];

fn ask_clarify(choose: &mut dyn FnMut(usize) -> usize) -> String {
    let mut s = pick(choose, CLARIFY_LEADS).to_string();
    let k = if one_in(choose, 4) { 2 } else { 1 };
    let questions = pick_distinct(choose, CLARIFY_QUESTIONS, k);
    for (i, q) in questions.iter().enumerate() {
        if !s.is_empty() {
            s.push(' ');
        }
        if i > 0 {
            s.push_str("Also: ");
        }
        if s.ends_with(": ") && !q.starts_with('I') {
            s.push_str(&lowercase_first(q));
        } else {
            s.push_str(q);
        }
    }
    if one_in(choose, 3) {
        s.push(' ');
        s.push_str(pick(choose, CLARIFY_TAILS));
    }
    s
}

// ---------------------------------------------------------------------------
// Ask: a command-line agent's confirmation prompt.

const CLI_PROCEED: &[&str] = &[
    "Proceed? [y/N]",
    "Continue? [Y/n]",
    "Run it? (y/n)",
    "Do you want to proceed? (yes/no)",
];

const CLI_APPLY: &[&str] = &[
    "Apply these changes? [y/N]",
    "Apply? (y/n)",
    "Write changes to disk? [Y/n]",
];

const CLI_NEW_FILES: &[&str] = &["CHANGELOG.md", "scripts/verify.sh", "fixtures/sample.csv"];

fn ask_cli(choose: &mut dyn FnMut(usize) -> usize) -> String {
    match choose(7) {
        0 => format!(
            "About to run `./scripts/{{script}}` against {{env}}.\n{}",
            pick(choose, CLI_PROCEED)
        ),
        1 => format!(
            "The following files will be modified:\n\n  M {{path}}\n  M {{path2}}\n  A {}\n\n{}",
            pick(choose, CLI_NEW_FILES),
            pick(choose, CLI_APPLY)
        ),
        2 => format!(
            "Dry run finished: {{n}} {{unit}} to update, {{fail}} to remove, 0 errors.\n{}",
            pick(
                choose,
                &["Apply for real? [y/N]", "Continue with the real run? (y/n)"]
            )
        ),
        3 => format!(
            "`{{file}}` already exists.\n{}",
            pick(
                choose,
                &[
                    "Overwrite? [y/N]",
                    "Replace it? (y/n)",
                    "Overwrite, skip, or abort? [o/s/A]"
                ]
            )
        ),
        4 => format!(
            "This will delete {{fail}} {{unit}} from {{env}}.\n{}",
            pick(
                choose,
                &[
                    "Type 'yes' to continue:",
                    "Type the environment name to confirm:"
                ]
            )
        ),
        5 => pick(
            choose,
            &[
                "? Continue with the remaining {left} {unit}? (Y/n)",
                "{n}/{total} done. Press Enter to continue or Ctrl+C to cancel.",
                "Paused after batch 1. Resume? [y/N]",
            ],
        )
        .to_string(),
        _ => format!(
            "I need to run `./scripts/{{script}} --dry-run` to check this.\n{}",
            pick(
                choose,
                &[
                    "Allow? (y/n)",
                    "Allow once / Always allow / Deny",
                    "OK to run this command? [y/N]"
                ]
            )
        ),
    }
}

// ---------------------------------------------------------------------------
// Ask: a support bot's request to confirm.

const SUPPORT_GREETINGS: &[&str] = &[
    "Hi {name}, thanks for reaching out!",
    "Thanks for your patience, {name}.",
    "Hello {name},",
    "Thanks for getting in touch.",
    "Hi there!",
];

const SUPPORT_ASK_LEADS: &[&str] = &[
    "Just to confirm, you'd like to cancel order {order}?",
    "I can issue a refund of {amount} to the card ending in {digits}.",
    "I found your account, but there are two subscriptions on it: a monthly plan and an annual one. Which one would you like to cancel?",
    "To reset your password, I'll send a link to the email address on file.",
    "I can move your appointment to {slot} instead.",
    "I can see that order {order} was charged twice. I can refund the duplicate charge of {amount}.",
    "Before I can make changes to the account, I need to verify your identity. Could you confirm the email address and the last four digits of the card on file?",
    "I can upgrade your plan today, and the difference of {amount} will be added to your next invoice.",
];

const SUPPORT_ASK_CLOSERS: &[&str] = &[
    "Shall I go ahead?",
    "Reply YES to confirm, or let me know if anything needs to change.",
    "Would you like me to proceed?",
    "Please confirm and I'll take care of it.",
    "Is that correct?",
    "Could you confirm the last four digits of the card so I can verify it's you?",
    "Once you confirm, I'll process it right away.",
    "Does that work for you?",
    "Just let me know and I'll get it done.",
    "Can you confirm that's what you'd like?",
];

const SUPPORT_SIGNS: &[&str] = &[
    "— {agent}",
    "Kind regards,\n{agent}",
    "Best,\n{agent}\nCustomer Support",
    "{agent} from the support team",
];

fn support_wrap(body: String, choose: &mut dyn FnMut(usize) -> usize) -> String {
    let mut s = String::new();
    if one_in(choose, 2) {
        let greeting = pick(choose, SUPPORT_GREETINGS);
        s.push_str(greeting);
        let own_line = greeting.ends_with(',') || one_in(choose, 2);
        s.push_str(if own_line { "\n\n" } else { " " });
    }
    s.push_str(&body);
    if one_in(choose, 3) {
        s.push_str("\n\n");
        s.push_str(pick(choose, SUPPORT_SIGNS));
    }
    s
}

fn ask_support(choose: &mut dyn FnMut(usize) -> usize) -> String {
    let mut body = pick(choose, SUPPORT_ASK_LEADS).to_string();
    // A lead that already asks its question stands alone.
    if !body.ends_with('?') {
        body.push(' ');
        body.push_str(pick(choose, SUPPORT_ASK_CLOSERS));
    }
    support_wrap(body, choose)
}

// ---------------------------------------------------------------------------
// Ask: a warning before a destructive step.

const DESTRUCTIVE_LEADS: &[&str] = &[
    "Heads up: this will permanently remove {n} {unit} from {env}.",
    "⚠️ Warning: {task} will overwrite `{file}`, and there's no backup from today.",
    "Before I go further: this next step can't be undone.",
    "This will affect all {total} {unit} in {env}, including the ones the {team} is using.",
    "**This is destructive.** {Task} deletes the old {unit} once the new ones are written.",
    "To finish {task} I need to drop and recreate the {unit} in {env}.",
];

const DESTRUCTIVE_ASKS: &[&str] = &[
    "I'd rather not do that without an explicit OK from you.",
    "Are you sure you want me to continue?",
    "If you're sure, reply \"yes, delete\" and I'll run it.",
    "Let me know if you'd like me to take a backup first.",
    "Do you want me to go ahead anyway?",
    "Please confirm you want this before I run it.",
    "Should I take a backup first, or go ahead as is?",
    "I'll stop here until you confirm.",
];

fn ask_destructive(choose: &mut dyn FnMut(usize) -> usize) -> String {
    let mut s = pick(choose, DESTRUCTIVE_LEADS).to_string();
    close(&mut s, pick(choose, DESTRUCTIVE_ASKS), choose);
    s
}

// ---------------------------------------------------------------------------
// Ask: a coding agent proposes an edit and waits.

/// A diagnosis and the fix that goes with it.
const CODE_LEADS: &[(&str, &str)] = &[
    (
        "I found the cause: `{path}` treats the timestamp as local time instead of UTC, so {task} skips the last hour of each day.",
        "I'd like to switch it to UTC and add a test for the boundary case.",
    ),
    (
        "The failing test comes from an off-by-one error in `{path}`.",
        "The loop should stop at the last index, not one past it.",
    ),
    (
        "I've tracked the problem down to `{path}`: it retries forever when {env} returns an empty response.",
        "Here's the change I'd make:\n\n```diff\n- max_retries = None\n+ max_retries = 3\n```",
    ),
    (
        "It looks like `{path}` still points at the old `{file}`.",
        "I can update the reference and remove the dead code around it.",
    ),
    (
        "The slowdown is in `{path}`, which loads all of the {unit} into memory before filtering.",
        "I'd rewrite the loop to stream the {unit} in pages of {n}.",
    ),
];

/// Scope notes that fit any of the fixes.
const CODE_SCOPES: &[&str] = &[
    "It's a small change plus a regression test in `{path2}`.",
    "This would touch `{path}` and `{path2}`, nothing else.",
    "No other callers are affected as far as I can tell.",
    "",
];

const CODE_CLOSERS: &[&str] = &[
    "Okay to make this edit?",
    "Should I apply it?",
    "Want me to go ahead and make the change?",
    "Let me know if you'd like me to apply it or would rather handle it yourself.",
    "I haven't changed anything yet.",
    "Shall I apply it and run the tests?",
    "Do you want me to make the change?",
    "Let me know how you'd like to proceed.",
];

fn ask_code_edit(choose: &mut dyn FnMut(usize) -> usize) -> String {
    let (lead, fix) = pick(choose, CODE_LEADS);
    let mut s = lead.to_string();
    s.push_str(gap(choose));
    s.push_str(fix);
    let scope = pick(choose, CODE_SCOPES);
    if !scope.is_empty() {
        s.push_str(if fix.ends_with("```") { "\n\n" } else { " " });
        s.push_str(scope);
    }
    s.push_str("\n\n");
    s.push_str(pick(choose, CODE_CLOSERS));
    s
}

// ---------------------------------------------------------------------------
// Ask: a draft to approve before it goes out.

const DRAFT_LEADS: &[&str] = &[
    "Here's a draft of the announcement for {task}. I haven't sent it yet:",
    "Before I send anything to the {team}, here's what I'd write:",
    "Draft message for your review:",
    "This is what the customer email would say:",
];

// Shared with the hand-back deliverables: the same draft is a deliverable
// when the user sends it and an ask when the assistant would.
const DRAFT_BODIES: &[&str] = &[
    "> Hi all, {task} will run {when}. It should take about {mins} minutes, and you don't need to do anything on your side. Thanks!",
    "> Quick update: we're starting {task} {when}. Expect {env} to be a little slower while it runs.",
    "> Hello, we noticed a problem with your recent order {order} and are issuing a refund of {amount}. It should reach your account within 5–7 business days.",
    "**Subject:** Heads up about {task}\n\nHi team,\n\n{Task} is going ahead {when}. If you see anything odd afterwards, reply to this email.\n\nThanks,\n{agent}",
    "> {Task} is done for this month. {total} {unit} were processed and {fail} need a second look; the details are in `{file}`.",
];

const DRAFT_ASKS: &[&str] = &[
    "Should I send it as is, or would you like changes?",
    "Okay to send?",
    "Let me know if you want any edits before I send it to the {team}.",
    "If it looks good, I'll send it {when}.",
    "Any tweaks before it goes out?",
    "Want me to send it now?",
];

fn ask_draft(choose: &mut dyn FnMut(usize) -> usize) -> String {
    format!(
        "{}\n\n{}\n\n{}",
        pick(choose, DRAFT_LEADS),
        pick(choose, DRAFT_BODIES),
        pick(choose, DRAFT_ASKS)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// A small seeded generator standing in for the caller's.
    fn lcg(seed: u64) -> impl FnMut(usize) -> usize {
        let mut state = seed;
        move |n| {
            assert!(n > 0, "choose called with an empty range");
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((state >> 33) as usize) % n
        }
    }

    const BOTH: [Situation; 2] = [Situation::Ask, Situation::Handback];

    #[test]
    fn same_choices_give_same_turns() {
        for situation in BOTH {
            let mut a = lcg(7);
            let mut b = lcg(7);
            for _ in 0..300 {
                assert_eq!(english(situation, &mut a), english(situation, &mut b));
                assert_eq!(
                    other_language(situation, &mut a),
                    other_language(situation, &mut b)
                );
            }
        }
    }

    #[test]
    fn turns_are_non_empty_and_fully_filled() {
        for situation in BOTH {
            let mut choose = lcg(11);
            for _ in 0..2000 {
                for turn in [
                    english(situation, &mut choose),
                    other_language(situation, &mut choose),
                ] {
                    assert!(!turn.trim().is_empty());
                    assert!(!turn.contains('{'), "unfilled placeholder: {turn}");
                    assert!(!turn.contains('}'), "unfilled placeholder: {turn}");
                }
            }
        }
    }

    #[test]
    fn english_turns_are_diverse() {
        for situation in BOTH {
            let mut choose = lcg(42);
            let distinct: HashSet<String> =
                (0..2000).map(|_| english(situation, &mut choose)).collect();
            assert!(distinct.len() > 1800, "{situation:?}: {}", distinct.len());
        }
    }

    #[test]
    fn other_language_covers_the_lists() {
        for situation in BOTH {
            let mut choose = lcg(3);
            let distinct: HashSet<String> = (0..2000)
                .map(|_| other_language(situation, &mut choose))
                .collect();
            assert!(distinct.len() >= 20, "{situation:?}: {}", distinct.len());
        }
    }

    #[test]
    fn the_two_situations_do_not_share_turns() {
        let mut choose = lcg(5);
        let asks: HashSet<String> = (0..2000)
            .map(|_| english(Situation::Ask, &mut choose))
            .collect();
        let backs: HashSet<String> = (0..2000)
            .map(|_| english(Situation::Handback, &mut choose))
            .collect();
        assert!(asks.is_disjoint(&backs));
    }
}
