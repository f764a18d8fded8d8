//! `toolsift calibrate LOG…`: the fleet's calibration of `auto_k` (`toolsift::auto_k::fleet`) from
//! every replica's records, printed as the one JSON object `auto_k.calibration` takes.

use crate::Failure;
use crate::output::print;
use std::io::BufReader;
use std::path::PathBuf;
use toolsift::offline::access_log::{MAX_LINE_BYTES, for_each_line};
use toolsift::offline::calibrate::Collector;
use toolsift::offline::report::thousands;

#[derive(clap::Args)]
pub struct Args {
    /// Access logs (JSON lines, as the shipped Envoy configurations write them) and the
    /// OpenTelemetry Collector's file exporter output (OTLP JSON lines), of any number of
    /// replicas, mixed; `-` reads standard input.
    #[arg(value_name = "LOG", required = true)]
    logs: Vec<PathBuf>,
    /// The plugins' `auto_k.max_k`: a calibration is refused by a plugin of another.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..=1024))]
    max_k: u16,
}

pub fn run(args: &Args) -> Result<(), Failure> {
    let mut collector = Collector::new(usize::from(args.max_k));
    let mut add = |line: Option<&[u8]>| collector.add_line(line);
    for path in &args.logs {
        let read = if path.as_os_str() == "-" {
            for_each_line(std::io::stdin().lock(), MAX_LINE_BYTES, &mut add)
        } else {
            let file = std::fs::File::open(path)
                .map_err(|e| Failure(format!("cannot read the log {}: {e}", path.display())))?;
            for_each_line(
                BufReader::with_capacity(1 << 16, file),
                MAX_LINE_BYTES,
                &mut add,
            )
        };
        read.map_err(|e| Failure(format!("cannot read the log {}: {e}", path.display())))?;
    }
    let files = args.logs.iter().map(|p| p.display().to_string()).collect();
    let calibration = collector.finish(files).map_err(Failure)?;
    if let Some(from) = &calibration.from {
        eprintln!(
            "toolsift: {} calls of {} shadowed records ({} records read), {} kept apart; \
             skipped {} malformed, {} foreign, {} unreadable, {} duplicate",
            thousands(calibration.pooled.calls),
            thousands(from.shadowed),
            thousands(from.records),
            match calibration.catalogs.len() {
                1 => "1 catalog".to_owned(),
                n => format!("{n} catalogs"),
            },
            thousands(from.malformed),
            thousands(from.foreign),
            thousands(from.unreadable),
            thousands(from.duplicate),
        );
    }
    let mut text = serde_json::to_string(&calibration)?;
    text.push('\n');
    print(&text)
}
