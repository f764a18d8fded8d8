//! `toolsift`: explain what the filter would do with one request, and measure its ranking on a
//! tool-retrieval dataset. Both run the filter's own code (`toolsift::pipeline`, `toolsift::rank`,
//! `toolsift::select`), natively.
//!
//! With `--embeddings-url URL --embeddings-model NAME` both rank as the filter does with
//! `ranking: hybrid`, with vectors from that OpenAI-compatible embeddings service.
//!
//! `check` reads Envoy configurations and reports toolsift settings that would misbehave.
//!
//! `report` sums up the access logs the shipped configurations write (`toolsift::offline::report`).
//!
//! `calibrate` counts `auto_k`'s calls over every replica's logs into the fleet's calibration
//! (`toolsift::offline::calibrate`, `toolsift::auto_k::fleet`): the JSON object `auto_k.calibration`
//! takes.
//!
//! `schema` prints the plugin configuration's JSON Schema, derived from the configuration types.
//!
//! Exit codes: 0 on success (a request the filter would skip is a success: the report says why),
//! 2 on bad input (missing file, invalid JSON, invalid configuration, unknown dialect, bad flags)
//! and when the embeddings service of `--embeddings-url` fails. `check`: 0 clean, 1 findings, 2 a
//! file that cannot be read.

mod calibrate;
mod check;
mod eval_cmd;
mod explain;
mod http;
mod hybrid;
mod output;
mod plot;
mod report;
mod schema;
mod tokens;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "toolsift",
    version,
    about = "Explain and measure toolsift's tool selection, with the filter's own code",
    long_about = None
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show, for one request body, which tools the filter keeps and why.
    Explain(explain::Args),
    /// Measure retrieval quality, kept tokens and ranking time on a dataset.
    Eval(eval_cmd::Args),
    /// Check Envoy configurations for toolsift settings that would misbehave (exit 1 on
    /// findings, 2 on a file that cannot be read).
    Check(check::Args),
    /// Sum up access logs: how many called tools each top_k keeps, outcomes, tokens saved,
    /// access decisions, loops and unknown tools.
    Report(report::Args),
    /// Count auto_k's shadowed calls over every replica's logs into the fleet's calibration:
    /// the JSON object `auto_k.calibration` takes.
    Calibrate(calibrate::Args),
    /// Print the plugin configuration's JSON Schema (`--markdown`: the configuration
    /// reference drawn from it).
    Schema(schema::Args),
}

/// A failure to report: the message names the problem; the exit code is 2.
#[derive(Debug)]
pub struct Failure(pub String);

impl<T: std::fmt::Display> From<T> for Failure {
    fn from(e: T) -> Failure {
        Failure(e.to_string())
    }
}

fn main() -> ExitCode {
    // clap prints usage errors itself and exits with 2.
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Explain(args) => explain::run(&args),
        Command::Eval(args) => eval_cmd::run(&args),
        Command::Report(args) => report::run(&args),
        Command::Calibrate(args) => calibrate::run(&args),
        Command::Schema(args) => schema::run(&args),
        Command::Check(args) => return check::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(message)) => {
            eprintln!("toolsift: error: {message}");
            ExitCode::from(2)
        }
    }
}
