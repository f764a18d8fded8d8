//! The replicas' records, read for the fleet's calibration (`toolsift calibrate`,
//! [`crate::auto_k::fleet`]). Native only, like [`super::report`]; both read the records with [`super::access_log`].
//!
//! Two kinds of line, mixed freely:
//! - the shipped access logs' JSON lines, whose `toolsift` key holds the request's record
//!   (docs/report.md), timed by `start_time`;
//! - the OpenTelemetry Collector's file exporter lines (OTLP JSON: `resourceLogs` →
//!   `scopeLogs` → `logRecords`), whose record is each log record's `body.stringValue`, as
//!   `docs/examples/envoy-otel.yaml` sends it, timed by `timeUnixNano`.
//!
//! A shadowed record counts each of its calls' slots once (`slots=`, or each call's rank where
//! the record has no `slots=`: then no tool was moved). A record read twice (the same log given
//! twice, rotated files that overlap, the same line in an access log and its collector's copy)
//! counts once: records are told apart by their time and their whole text, so two requests of
//! one millisecond with the same record count once, an undercount of no consequence to a
//! share. Whatever a line holds, it is counted and skipped, never a panic.

use super::access_log::{parse_decision, parse_record_parts, split_record};
use crate::auto_k::fleet::{Counts, FleetCalibration, Provenance, catalog_id};
use serde_json::Value;
use std::collections::HashSet;

/// Records remembered to tell a duplicate (16 bytes each); past it, records are no longer
/// checked, and `duplicate` undercounts.
pub const MAX_SEEN: usize = 1 << 21;

/// Lines read into one calibration.
pub struct Collector {
    counts: Counts,
    /// What the shadowed requests called after what their histories had called.
    transitions: crate::transitions::Counter,
    from: Provenance,
    seen: HashSet<u128>,
}

impl Collector {
    /// For a calibration of `max_k` (a slot past it counts at `max_k + 1`).
    pub fn new(max_k: usize) -> Collector {
        Collector {
            counts: Counts::new(max_k),
            transitions: crate::transitions::Counter::default(),
            from: Provenance::default(),
            seen: HashSet::new(),
        }
    }

    /// What has been read so far.
    pub fn read(&self) -> &Provenance {
        &self.from
    }

    /// One line (without its newline); `None`: a line too long to read.
    pub fn add_line(&mut self, line: Option<&[u8]>) {
        let Some(line) = line else {
            self.from.malformed += 1;
            return;
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        let Ok(Value::Object(object)) = serde_json::from_slice::<Value>(line) else {
            self.from.malformed += 1;
            return;
        };
        if let Some(resource_logs) = object.get("resourceLogs") {
            self.add_otlp(resource_logs);
            return;
        }
        match object.get("toolsift") {
            Some(Value::String(record)) if record != "-" && !record.is_empty() => {
                let time = object.get("start_time").and_then(Value::as_str);
                self.add_record(time.map(str::to_owned), record);
            }
            // A request toolsift wrote nothing for.
            Some(Value::String(_) | Value::Null) => {}
            Some(_) => self.from.unreadable += 1,
            None => self.from.foreign += 1,
        }
    }

    /// An OTLP JSON line: every log record's body.
    fn add_otlp(&mut self, resource_logs: &Value) {
        let records = resource_logs
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r.get("scopeLogs")?.as_array())
            .flatten()
            .filter_map(|s| s.get("logRecords")?.as_array())
            .flatten();
        let mut any = false;
        for record in records {
            any = true;
            let body = record.get("body").and_then(|b| b.get("stringValue"));
            let time = ["timeUnixNano", "observedTimeUnixNano"]
                .iter()
                .filter_map(|key| nanos(record.get(*key)?))
                .find(|&n| n > 0)
                .map(rfc3339);
            match body.and_then(Value::as_str) {
                Some(text) if text != "-" && !text.is_empty() => self.add_record(time, text),
                Some(_) => {}
                None => self.from.foreign += 1,
            }
        }
        if !any {
            self.from.foreign += 1;
        }
    }

    /// One toolsift record (docs/report.md), logged at `time`.
    fn add_record(&mut self, time: Option<String>, record: &str) {
        self.from.records += 1;
        let (header, own) = split_record(record);
        let Some(shadow) = parse_record_parts(&header, &own).shadow else {
            return;
        };
        let Some(shadow) = shadow else {
            self.from.unreadable += 1;
            return;
        };
        if !shadow.sampled {
            return;
        }
        let Some(id) = shadow.catalog.as_deref().and_then(catalog_id) else {
            self.from.unreadable += 1;
            return;
        };
        if self.read_before(time.as_deref(), record) {
            self.from.duplicate += 1;
            return;
        }
        self.from.shadowed += 1;
        // A weak question (`weak=`) is shadowed for its history's transitions alone: the
        // filter's `auto_k` learns nothing from its calls, and neither does the calibration.
        let weak = parse_decision(&header).is_some_and(|d| d.weak);
        if !weak {
            for slot in shadow.learned_slots() {
                self.counts.add(id, slot);
            }
        }
        let calls: Vec<String> = shadow.calls.iter().map(|c| c.name.clone()).collect();
        self.transitions.add(id, &shadow.history, &calls);
        if let Some(time) = time {
            if self.from.first.as_ref().is_none_or(|f| time < *f) {
                self.from.first = Some(time.clone());
            }
            if self.from.last.as_ref().is_none_or(|l| time > *l) {
                self.from.last = Some(time);
            }
        }
    }

    /// Whether a record of this time and text was read before (and remembers it).
    fn read_before(&mut self, time: Option<&str>, record: &str) -> bool {
        use sha2::{Digest, Sha256};
        let mut hash = Sha256::new();
        hash.update(time.unwrap_or_default().as_bytes());
        hash.update([0]);
        hash.update(record.as_bytes());
        let digest = hash.finalize();
        let mut first = [0u8; 16];
        first.copy_from_slice(digest.get(..16).unwrap_or(&[0; 16]));
        let key = u128::from_le_bytes(first);
        if self.seen.contains(&key) {
            return true;
        }
        if self.seen.len() < MAX_SEEN {
            self.seen.insert(key);
        }
        false
    }

    /// The calibration of every shadowed call read from `files`; an error that says what was
    /// read when no call was.
    pub fn finish(self, files: Vec<String>) -> Result<FleetCalibration, String> {
        if self.counts.is_empty() {
            let f = &self.from;
            return Err(format!(
                "nothing to calibrate from: {} toolsift records, {} of them shadowed with calls \
                 ({} malformed lines, {} without a toolsift record, {} unreadable, {} \
                 duplicates); auto_k learns from shadowed answers: set `shadow.sample` above 0",
                f.records, f.shadowed, f.malformed, f.foreign, f.unreadable, f.duplicate
            ));
        }
        let mut from = self.from;
        from.files = files;
        let mut calibration = self.counts.calibration(Some(from));
        if !self.transitions.is_empty() {
            calibration.transitions = Some(self.transitions.transitions());
        }
        Ok(calibration)
    }
}

/// An OTLP time: nanoseconds as a string (OTLP JSON's encoding of 64-bit integers), or a
/// number.
fn nanos(value: &Value) -> Option<u64> {
    match value {
        Value::String(s) => s.parse().ok(),
        Value::Number(n) => n.as_u64(),
        _ => None,
    }
}

/// Nanoseconds since the epoch as Envoy's `%START_TIME%` writes a time:
/// `2026-11-29T10:00:00.123Z` (UTC, milliseconds).
pub fn rfc3339(nanos: u64) -> String {
    let secs = nanos / 1_000_000_000;
    let millis = (nanos / 1_000_000) % 1000;
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's days-to-civil, for days since 1970-01-01 (never negative here).
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}
