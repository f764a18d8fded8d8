//! Grammars of the assistant's last turn before the user's next one: test data for the reading
//! of that turn ([`crate::followup`]), drawn by [`super::generated`]. They are no part of the
//! filter, nor of `toolsift::offline::eval`'s API.
//!
//! Each was written blind, without reading the decision it tests nor the grammars before it,
//! from what assistants write in real traffic. The reading was revised on each of them after
//! its first measurement, but for [`HELD_OUT`], written once the reading was final.
//!
//! | grammar | written | what it writes |
//! |---|---|---|
//! | [`plain_closings`] | first | a sentence or two closing on a question or a statement |
//! | [`headed_bullets`] | second | an opener or heading, bullet details, a closing, an emoji |
//! | [`registers`] | third | a form of the situation (plan, options, preview, …) in a varied register |
//! | [`prompts_and_plans`] | fourth | families of asks and hand-backs: plans, options, `[y/N]` prompts, support bots |
//! | [`agent_products`] | fifth | what each kind of agent product writes: chat, support, coding, command-line, operations |
//!
//! The CLI names them by the order they were written (`toolsift eval --followups --generated
//! --assistant first`), as `docs/BENCHMARKS.md`'s commands and figures do.

mod agent_products;
mod headed_bullets;
mod plain_closings;
mod prompts_and_plans;
mod registers;

/// Which of the two turns a grammar writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Situation {
    /// The assistant waits for the user's word before it does (more of) the task: it asks
    /// leave to go on, offers a retry, or proposes the next step.
    Ask,
    /// The assistant has finished or answered and hands the conversation back.
    Handback,
}

/// Writes one turn of a situation; `choose(n)` returns a number in 0..n (the caller's seeded
/// generator), so a seeded caller gets the same turns on every run.
pub type Write = fn(Situation, &mut dyn FnMut(usize) -> usize) -> String;

/// One grammar: its turns in English, and whole turns in other languages.
#[derive(Clone, Copy)]
pub struct Grammar {
    /// Its module's name.
    pub name: &'static str,
    pub english: Write,
    pub other_language: Write,
}

/// The grammar a module writes, named after it.
macro_rules! grammar {
    ($module:ident) => {
        Grammar {
            name: stringify!($module),
            english: $module::english,
            other_language: $module::other_language,
        }
    };
}

pub const PLAIN_CLOSINGS: Grammar = grammar!(plain_closings);
pub const HEADED_BULLETS: Grammar = grammar!(headed_bullets);
pub const REGISTERS: Grammar = grammar!(registers);
pub const PROMPTS_AND_PLANS: Grammar = grammar!(prompts_and_plans);
pub const AGENT_PRODUCTS: Grammar = grammar!(agent_products);

/// The grammar held out: written blind once the reading of the assistant's turn was final, and
/// never used to revise it. `toolsift eval --followups --generated` draws from it by default.
pub const HELD_OUT: Grammar = AGENT_PRODUCTS;

/// Every grammar, in the order they were written (turns in other languages are drawn from them
/// in this order).
pub const WRITTEN: [Grammar; 5] = [
    PLAIN_CLOSINGS,
    HEADED_BULLETS,
    REGISTERS,
    PROMPTS_AND_PLANS,
    AGENT_PRODUCTS,
];
