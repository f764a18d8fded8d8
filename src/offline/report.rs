//! What the access log says, summed up for an operator (`toolsift report`). Native only, like
//! [`super::eval`]; never linked into the `.wasm`.
//!
//! The shipped Envoy configurations log one JSON object per request. The key read here is
//! `toolsift`, the request's one record: the `x-toolsift` value, then the tools' tokens
//! (`tokens=before/after`), the access verdicts (`verdicts=…`) and shadow's ranks of the calls
//! in the model's answer (`calls=… missed=…`). Logs written before the record (toolsift before
//! issue 47) carried the last three under keys of their own, `toolsift_tokens`,
//! `toolsift_access` and `toolsift_shadow`: they are still read. A value Envoy writes as `null`
//! or `"-"` was not set. The formats are in docs/report.md.
//!
//! Nothing a log holds can make this module panic: a line that is not a JSON object is
//! malformed, one without the `toolsift` key foreign, and a value that does not read is counted
//! as unreadable; each is skipped and the rest still adds up. Names are percent-decoded for
//! display. Every map keyed by client data (tool names, catalogs, rules) is bounded: past
//! [`MAX_NAMES`] distinct keys the rest is counted as `others`.

use super::access_log::*;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::BufRead;

/// The largest k of the within-k curve.
pub const MAX_K: usize = 50;
/// The k values of the compact table (the current `top_k` is added).
pub const TABLE_KS: [usize; 10] = [1, 2, 3, 5, 8, 10, 15, 20, 30, 50];
/// Distinct keys kept per map of names; the rest is counted under `others`.
pub const MAX_NAMES: usize = 10_000;
/// The shares of calls the report finds the smallest k for, as (numerator, denominator).
pub const TARGETS: [(u64, u64, &str); 3] = [(95, 100, "95"), (99, 100, "99"), (999, 1000, "99.9")];

/// Counts per name, at most [`MAX_NAMES`] names; the rest under `others`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub names: BTreeMap<String, u64>,
    pub others: u64,
}

impl Counts {
    pub fn add(&mut self, name: &str, n: u64) {
        if let Some(count) = self.names.get_mut(name) {
            *count += n;
        } else if self.names.len() < MAX_NAMES {
            self.names.insert(name.to_owned(), n);
        } else {
            self.others += n;
        }
    }

    pub fn total(&self) -> u64 {
        self.names.values().sum::<u64>() + self.others
    }

    /// Names, most counted first (ties by name).
    pub fn ranked(&self) -> Vec<(&str, u64)> {
        let mut all: Vec<(&str, u64)> = self.names.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        all.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        all
    }
}

/// Calls of ranked tools, by rank.
#[derive(Debug, Clone, Default)]
struct Ranks {
    by_rank: BTreeMap<usize, u64>,
    /// Calls of tools the catalog does not rank (`name@-`).
    unranked: u64,
    missed: u64,
    requests: u64,
}

impl Ranks {
    fn add(&mut self, shadow: &Shadow) {
        self.requests += 1;
        self.missed += shadow.missed;
        for call in &shadow.calls {
            match call.rank {
                Some(rank) => *self.by_rank.entry(rank).or_default() += 1,
                None => self.unranked += 1,
            }
        }
    }

    fn calls(&self) -> u64 {
        self.by_rank.values().sum()
    }

    fn within(&self, k: usize) -> u64 {
        self.by_rank.range(..=k).map(|(_, n)| n).sum()
    }

    fn curve(&self) -> Curve {
        let calls = self.calls();
        let within: Vec<u64> = (1..=MAX_K).map(|k| self.within(k)).collect();
        let smallest_k = TARGETS
            .iter()
            .map(|(num, den, name)| {
                let k = within
                    .iter()
                    .position(|w| calls > 0 && w * den >= calls * num)
                    .map(|i| i + 1);
                ((*name).to_owned(), k)
            })
            .collect();
        Curve {
            requests: self.requests,
            calls,
            unranked_calls: self.unranked,
            missed: self.missed,
            within_k: within,
            smallest_k,
        }
    }
}

/// Ranked calls within each k, for one set of shadow records.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Curve {
    pub requests: u64,
    /// Calls of ranked tools: the curve's denominator.
    pub calls: u64,
    pub unranked_calls: u64,
    /// Calls the selection as configured would not have kept.
    pub missed: u64,
    /// `within_k[i]`: calls ranked within k = i + 1, for k = 1…[`MAX_K`].
    pub within_k: Vec<u64>,
    /// The smallest k (up to [`MAX_K`]) whose calls within reach 95, 99 and 99.9 % (`null`:
    /// more than 50, or no call).
    pub smallest_k: BTreeMap<String, Option<usize>>,
}

impl Curve {
    /// Calls ranked within `k` (any k: the ranks past [`MAX_K`] are not kept, so k > 50 counts
    /// as 50).
    pub fn within(&self, k: usize) -> u64 {
        let i = k.clamp(1, MAX_K) - 1;
        self.within_k.get(i).copied().unwrap_or(0)
    }

    /// The share of calls ranked within `k`, 0 with no call.
    pub fn share(&self, k: usize) -> f64 {
        ratio(self.within(k), self.calls)
    }
}

fn ratio(n: u64, d: u64) -> f64 {
    if d == 0 { 0.0 } else { n as f64 / d as f64 }
}

/// Shadow records of one catalog.
#[derive(Debug, Clone, Default)]
struct CatalogTally {
    tools: Counts,
    sampled: Ranks,
    filtered: u64,
    /// With `auto_k`: the k of its latest record, and what was kept since it took effect.
    auto_k: Option<AutoKTally>,
    /// Records by the k they were selected with (`fleet:12`): what each replica logged.
    ks_logged: BTreeMap<String, u64>,
}

/// Distinct ks listed per catalog (`logged`); the rest is counted under `others`.
pub const MAX_KS_LOGGED: usize = 32;

/// One catalog's `auto_k` k, from the record that first had it to the latest.
#[derive(Debug, Clone, Default)]
struct AutoKTally {
    k: usize,
    source: String,
    capped: Option<f64>,
    /// Requests since, filtered and shadowed; calls of ranked tools in the shadowed ones, and
    /// those the k missed.
    filtered: u64,
    shadowed: u64,
    calls: u64,
    missed: u64,
}

/// One catalog's `auto_k` part: the k chosen last and what it kept since.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AutoKReport {
    pub k: usize,
    /// `auto` (its own calls), `pooled` or `default` (`top_k`).
    pub source: String,
    /// Capped at `max_k`: the share of calls `max_k` keeps.
    pub capped: Option<f64>,
    /// Requests since the k took effect: filtered, and shadowed.
    pub filtered_requests: u64,
    pub shadowed_requests: u64,
    /// Calls of ranked tools in the shadowed ones, and the share of them the k kept: the
    /// share filtered requests' calls keep, measured where the model saw every tool.
    pub calls: u64,
    pub kept: Option<f64>,
    /// Records by the k they were selected with (`fleet:12`, `auto:9`): with several
    /// replicas' logs, the fleet's k beside each replica's own (at most [`MAX_KS_LOGGED`]).
    pub logged: BTreeMap<String, u64>,
}

/// One catalog's part of the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CatalogReport {
    pub catalog: String,
    /// Function tools in its requests (the most common count).
    pub tools: Option<u64>,
    pub filtered_requests: u64,
    #[serde(flatten)]
    pub sampled: Curve,
    /// The share of calls within the current top_k.
    pub within_top_k: Option<f64>,
    /// With `auto_k`: the k its latest record had, and what it kept since.
    pub auto_k: Option<AutoKReport>,
}

/// The shadow records' part of the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ShadowReport {
    /// The `top_k` of the records (the most common when they differ), and how many records
    /// gave each.
    pub top_k: Option<usize>,
    pub top_k_values: BTreeMap<usize, u64>,
    /// Sampled requests (`shadow=`): their calls make the curve.
    pub sampled: Curve,
    /// Filtered requests (`filtered=`): the model saw only the kept tools, so their calls say
    /// little about a larger k; counted, not drawn.
    pub filtered_requests: u64,
    pub filtered_calls: u64,
    /// Calls in filtered requests' answers of tools ranked past top_k (pinned, or known from
    /// earlier turns).
    pub filtered_past_top_k: u64,
    pub within_top_k: Option<f64>,
    /// Calls the selection kept as configured (`calls − missed`), as a share of calls.
    pub kept_as_configured: Option<f64>,
    /// Per catalog, most calls first; omitted from the text when there is one.
    pub catalogs: Vec<CatalogReport>,
}

/// The `toolsift_tokens` part.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Tokens {
    pub requests: u64,
    pub before: u64,
    pub after: u64,
    pub saved: u64,
    pub saved_per_request: f64,
}

/// Access decisions of one verdict, by rule and surface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RuleCount {
    pub rule: String,
    pub surface: String,
    pub count: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Access {
    /// Per verdict (`deny`, `would_deny`, `shadow_deny`, `shadow_allow`), most first.
    pub verdicts: BTreeMap<String, Vec<RuleCount>>,
    /// Per verdict, per surface.
    pub by_surface: BTreeMap<String, BTreeMap<String, u64>>,
    /// Tools hidden from callers (`denied=N` of `x-toolsift`), and requests refused whole.
    pub denied_tools: u64,
    pub refused_requests: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Loops {
    /// Requests the loop guard took tools out of, the tools taken out (each request's count
    /// added), and the notes written.
    pub requests: u64,
    pub evicted: u64,
    pub noted: u64,
    pub tools: Counts,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Unknown {
    /// Requests whose model's latest turn called a made-up tool, and per name the requests.
    pub requests: u64,
    pub tools: Counts,
    /// Calls in shadow records' answers of tools the catalog does not rank.
    pub shadow_calls: Counts,
}

/// Requests whose question the ranking could not read (`weak=` of `x-toolsift`), and the
/// tools they carried and were sent with.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct WeakQueries {
    pub requests: u64,
    pub tools_in: u64,
    pub tools_out: u64,
}

/// Requests with kept tools the fleet's transitions brought in (`next=` of `x-toolsift`), the
/// tools, and the calls of them in the answers shadow watched: what the channel kept that the
/// question's ranking would not have.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Transitions {
    pub requests: u64,
    pub tools: Counts,
    /// Calls, in the answers of those requests that shadow watched, of a tool the transitions
    /// brought in.
    pub calls: u64,
}

/// Lines read, and what they were.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Lines {
    pub read: u64,
    /// Lines with the `toolsift` key: one per request.
    pub requests: u64,
    /// Not a JSON object (binary, cut, longer than 1 MiB, not JSON).
    pub malformed: u64,
    /// A JSON object without the `toolsift` key (another log's).
    pub foreign: u64,
    /// Blank lines, ignored.
    pub blank: u64,
    /// Values of our keys that did not read, per key (skipped; the rest of the line counts).
    pub unreadable: BTreeMap<String, u64>,
}

/// The whole report: `toolsift report --json` prints it (docs/report.md lists the keys).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub lines: Lines,
    /// Requests by outcome: `filtered`, `refused`, `refused=unknown_path`,
    /// `skipped=<reason>`, `search=<kind>`,
    /// `mcp=<what>`, and `none` (`toolsift` unset: a request toolsift let through unread,
    /// such as one to a path of no LLM API).
    pub outcomes: BTreeMap<String, u64>,
    /// Function tools received and passed on, summed over requests that counted them.
    pub tools_in: u64,
    pub tools_out: u64,
    pub tokens: Tokens,
    pub shadow: ShadowReport,
    pub access: Access,
    pub loops: Loops,
    pub unknown_tools: Unknown,
    /// Questions the ranking could not read (`weak=`): not cut to `top_k`.
    pub weak_queries: WeakQueries,
    /// Tools the fleet's transitions brought in (`next=`).
    pub transitions: Transitions,
    /// The sentence to act on.
    pub summary: String,
}

/// Adds up access log lines; [`Tally::report`] sums them up.
#[derive(Debug, Default)]
pub struct Tally {
    lines: Lines,
    outcomes: BTreeMap<String, u64>,
    tools_in: u64,
    tools_out: u64,
    tokens: (u64, u64, u64, u64),
    top_k: BTreeMap<usize, u64>,
    sampled: Ranks,
    filtered: Ranks,
    /// Calls of filtered requests ranked past their top_k.
    filtered_past_top_k: u64,
    catalogs: BTreeMap<String, CatalogTally>,
    catalogs_others: u64,
    access: BTreeMap<(&'static str, &'static str, String), u64>,
    denied_tools: u64,
    refused: u64,
    loops: (u64, u64, u64),
    loop_tools: Counts,
    unknown_requests: u64,
    unknown: Counts,
    shadow_unranked: Counts,
    weak: WeakQueries,
    transitions: Transitions,
}

/// A string value of `key`; `Ok(None)` when unset (`null`, `"-"`, absent), `Err` when not a
/// string.
fn value<'a>(
    object: &'a serde_json::Map<String, serde_json::Value>,
    key: &str,
) -> Result<Option<&'a str>, ()> {
    match object.get(key) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(s)) if s == "-" || s.is_empty() => Ok(None),
        Some(serde_json::Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(()),
    }
}

/// A log line's value of `key` (a part's key before the record) read by `parse`, with the key;
/// `Some((None, key))` when it is not a string. `None` when unset.
fn part_or_old<T>(
    object: &serde_json::Map<String, serde_json::Value>,
    key: &'static str,
    parse: fn(&str) -> T,
) -> Option<(Option<T>, &'static str)> {
    match value(object, key) {
        Ok(v) => v.map(|v| (Some(parse(v)), key)),
        Err(()) => Some((None, key)),
    }
}

impl Tally {
    pub fn new() -> Tally {
        Tally::default()
    }

    /// Adds one line (`None`: a line too long to read).
    pub fn add_line(&mut self, line: Option<&[u8]>) {
        self.lines.read += 1;
        let Some(line) = line else {
            self.lines.malformed += 1;
            return;
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            self.lines.blank += 1;
            return;
        }
        let Ok(object) = serde_json::from_slice::<serde_json::Map<_, _>>(line) else {
            self.lines.malformed += 1;
            return;
        };
        if !object.contains_key("toolsift") {
            self.lines.foreign += 1;
            return;
        }
        self.lines.requests += 1;
        let unreadable = |tally: &mut Tally, key: &str| {
            *tally.lines.unreadable.entry(key.to_owned()).or_default() += 1;
        };
        let record = value(&object, "toolsift");
        let (header, own) = match record {
            Ok(Some(v)) => split_record(v),
            _ => (String::new(), Vec::new()),
        };
        let (mut brought_in, mut weak) = (Vec::new(), false);
        match record {
            Err(()) => {
                unreadable(self, "toolsift");
                self.count_outcome("unreadable");
            }
            // Unset, or a record of access verdicts alone (a request toolsift let through).
            Ok(None) => self.count_outcome("none"),
            Ok(Some(_)) if header.is_empty() => self.count_outcome("none"),
            Ok(Some(_)) => match parse_decision(&header) {
                Some(d) => {
                    self.add_decision(&d);
                    weak = d.weak;
                    brought_in = d.next;
                }
                None => {
                    unreadable(self, "toolsift");
                    self.count_outcome("unreadable");
                }
            },
        }
        let parts = parse_record_parts(&header, &own);
        // Each part from the record, or else from its key of old (logs before the record).
        let shadow = parts.shadow.map(|s| (s, "toolsift.shadow")).or_else(|| {
            part_or_old(&object, "toolsift_shadow", parse_shadow).map(|(s, k)| (s.flatten(), k))
        });
        match shadow {
            None => {}
            Some((Some(s), _)) => {
                // A weak question shadowed for its history's transitions: where its calls
                // stood in a ranking that read nothing says nothing of the catalog's k.
                if !(weak && s.sampled) {
                    self.add_shadow(&s);
                }
                let of_next = s.calls.iter().filter(|c| brought_in.contains(&c.name));
                self.transitions.calls += of_next.count() as u64;
            }
            Some((None, key)) => unreadable(self, key),
        }
        let tokens = parts.tokens.map(|t| (t, "toolsift.tokens")).or_else(|| {
            part_or_old(&object, "toolsift_tokens", parse_tokens).map(|(t, k)| (t.flatten(), k))
        });
        match tokens {
            None => {}
            Some((Some((before, after)), _)) => {
                self.tokens.0 += 1;
                self.tokens.1 += before;
                self.tokens.2 += after;
                self.tokens.3 += before.saturating_sub(after);
            }
            Some((None, key)) => unreadable(self, key),
        }
        let access = parts
            .verdicts
            .map(|v| (v, "toolsift.verdicts"))
            .or_else(|| {
                part_or_old(&object, "toolsift_access", parse_access)
                    .map(|(v, k)| (v.unwrap_or((Vec::new(), 1)), k))
            });
        if let Some(((items, bad), key)) = access {
            if bad > 0 {
                unreadable(self, key);
            }
            for item in items {
                *self
                    .access
                    .entry((item.verdict, item.surface, item.rule))
                    .or_default() += 1;
            }
        }
    }

    fn count_outcome(&mut self, outcome: &str) {
        if let Some(n) = self.outcomes.get_mut(outcome) {
            *n += 1;
        } else if self.outcomes.len() < MAX_NAMES {
            self.outcomes.insert(outcome.to_owned(), 1);
        } else {
            *self.outcomes.entry("others".to_owned()).or_default() += 1;
        }
    }

    fn add_decision(&mut self, d: &Decision) {
        self.count_outcome(&d.outcome);
        self.tools_in += d.total.unwrap_or(0);
        self.tools_out += d.kept.unwrap_or(0);
        self.denied_tools += d.denied;
        if !d.next.is_empty() {
            self.transitions.requests += 1;
            for name in &d.next {
                self.transitions.tools.add(name, 1);
            }
        }
        if d.weak {
            self.weak.requests += 1;
            self.weak.tools_in += d.total.unwrap_or(0);
            self.weak.tools_out += d.kept.unwrap_or(0);
        }
        self.refused += u64::from(d.outcome == "refused" || d.outcome.starts_with("refused="));
        if !d.evicted.is_empty() || !d.noted.is_empty() {
            self.loops.0 += u64::from(!d.evicted.is_empty());
            self.loops.1 += d.evicted.len() as u64;
            self.loops.2 += d.noted.len() as u64;
        }
        for name in &d.evicted {
            self.loop_tools.add(name, 1);
        }
        self.unknown_requests += u64::from(!d.unknown.is_empty());
        for name in &d.unknown {
            self.unknown.add(name, 1);
        }
    }

    fn add_shadow(&mut self, s: &Shadow) {
        if let Some(k) = s.top_k {
            *self.top_k.entry(k).or_default() += 1;
        }
        for call in s.calls.iter().filter(|c| c.rank.is_none()) {
            self.shadow_unranked.add(&call.name, 1);
        }
        if s.sampled {
            self.sampled.add(s);
        } else {
            self.filtered.add(s);
            if let Some(k) = s.top_k {
                self.filtered_past_top_k += s
                    .calls
                    .iter()
                    .filter(|c| c.rank.is_some_and(|r| r > k))
                    .count() as u64;
            }
        }
        let name = s.catalog.clone().unwrap_or_else(|| "-".to_owned());
        let known = self.catalogs.contains_key(&name);
        if !known && self.catalogs.len() >= MAX_NAMES {
            self.catalogs_others += 1;
            return;
        }
        let catalog = self.catalogs.entry(name).or_default();
        if let Some(tools) = s.tools {
            catalog.tools.add(&tools.to_string(), 1);
        }
        if s.sampled {
            catalog.sampled.add(s);
        } else {
            catalog.filtered += 1;
        }
        if let (Some(source), Some(k)) = (&s.auto_k, s.top_k) {
            let logged = format!("{source}:{k}");
            let room = catalog.ks_logged.len() < MAX_KS_LOGGED;
            if room || catalog.ks_logged.contains_key(&logged) {
                *catalog.ks_logged.entry(logged).or_default() += 1;
            } else {
                *catalog.ks_logged.entry("others".to_owned()).or_default() += 1;
            }
            let same = catalog
                .auto_k
                .as_ref()
                .is_some_and(|a| a.k == k && &a.source == source);
            if !same {
                catalog.auto_k = Some(AutoKTally {
                    k,
                    source: source.clone(),
                    ..AutoKTally::default()
                });
            }
            if let Some(a) = catalog.auto_k.as_mut() {
                a.capped = s.capped;
                if s.sampled {
                    a.shadowed += 1;
                    a.calls += s.calls.iter().filter(|c| c.rank.is_some()).count() as u64;
                    a.missed += s.missed;
                } else {
                    a.filtered += 1;
                }
            }
        }
    }

    /// The report of the lines added so far.
    pub fn report(&self) -> Report {
        // The most common top_k; the larger one on a tie.
        let top_k = self
            .top_k
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then(a.0.cmp(b.0)))
            .map(|(k, _)| *k);
        let sampled = self.sampled.curve();
        let within_top_k =
            |curve: &Curve| top_k.filter(|_| curve.calls > 0).map(|k| curve.share(k));
        let mut catalogs: Vec<CatalogReport> = self
            .catalogs
            .iter()
            .map(|(name, c)| {
                let curve = c.sampled.curve();
                CatalogReport {
                    catalog: name.clone(),
                    tools: c.tools.ranked().first().and_then(|(t, _)| t.parse().ok()),
                    filtered_requests: c.filtered,
                    within_top_k: within_top_k(&curve),
                    sampled: curve,
                    auto_k: c.auto_k.as_ref().map(|a| AutoKReport {
                        k: a.k,
                        source: a.source.clone(),
                        capped: a.capped,
                        filtered_requests: a.filtered,
                        shadowed_requests: a.shadowed,
                        calls: a.calls,
                        kept: (a.calls > 0)
                            .then(|| ratio(a.calls.saturating_sub(a.missed), a.calls)),
                        logged: c.ks_logged.clone(),
                    }),
                }
            })
            .collect();
        catalogs.sort_by(|a, b| {
            b.sampled
                .calls
                .cmp(&a.sampled.calls)
                .then(b.sampled.requests.cmp(&a.sampled.requests))
                .then(a.catalog.cmp(&b.catalog))
        });
        let shadow = ShadowReport {
            top_k,
            top_k_values: self.top_k.clone(),
            within_top_k: within_top_k(&sampled),
            kept_as_configured: (sampled.calls > 0)
                .then(|| ratio(sampled.calls.saturating_sub(sampled.missed), sampled.calls)),
            sampled,
            filtered_requests: self.filtered.requests,
            filtered_calls: self.filtered.calls(),
            filtered_past_top_k: self.filtered_past_top_k,
            catalogs,
        };
        let mut verdicts: BTreeMap<String, Vec<RuleCount>> = BTreeMap::new();
        let mut by_surface: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
        for ((verdict, surface, rule), count) in &self.access {
            verdicts
                .entry((*verdict).to_owned())
                .or_default()
                .push(RuleCount {
                    rule: rule.clone(),
                    surface: (*surface).to_owned(),
                    count: *count,
                });
            *by_surface
                .entry((*verdict).to_owned())
                .or_default()
                .entry((*surface).to_owned())
                .or_default() += count;
        }
        for list in verdicts.values_mut() {
            list.sort_by(|a, b| b.count.cmp(&a.count).then(a.rule.cmp(&b.rule)));
        }
        let (requests, before, after, saved) = self.tokens;
        let mut report = Report {
            lines: self.lines.clone(),
            outcomes: self.outcomes.clone(),
            tools_in: self.tools_in,
            tools_out: self.tools_out,
            tokens: Tokens {
                requests,
                before,
                after,
                saved,
                saved_per_request: ratio(saved, requests),
            },
            shadow,
            access: Access {
                verdicts,
                by_surface,
                denied_tools: self.denied_tools,
                refused_requests: self.refused,
            },
            loops: Loops {
                requests: self.loops.0,
                evicted: self.loops.1,
                noted: self.loops.2,
                tools: self.loop_tools.clone(),
            },
            unknown_tools: Unknown {
                requests: self.unknown_requests,
                tools: self.unknown.clone(),
                shadow_calls: self.shadow_unranked.clone(),
            },
            weak_queries: self.weak.clone(),
            transitions: self.transitions.clone(),
            summary: String::new(),
        };
        report.summary = summary(&report.shadow);
        report
    }
}

/// `1234567` → `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `n / d` as `93.4 %`; a share short of all never reads `100.0 %` (it reads `99.9 %`).
pub fn percent(n: u64, d: u64) -> String {
    if d == 0 {
        return "-".to_owned();
    }
    let text = format!("{:.1} %", ratio(n, d) * 100.0);
    if n < d && text == "100.0 %" {
        "99.9 %".to_owned()
    } else {
        text
    }
}

/// The k the sentence compares the current top_k with: the table's next smaller one (2 when
/// top_k is 1).
pub fn compared_k(top_k: usize) -> usize {
    TABLE_KS
        .iter()
        .rev()
        .copied()
        .find(|k| *k < top_k.min(MAX_K + 1))
        .unwrap_or(2)
}

/// "with top_k 8, 99.1 % of the 1,204 calls seen would have been kept; with 5, 93.4 %", then
/// the smallest k for each target share.
pub fn summary(shadow: &ShadowReport) -> String {
    let curve = &shadow.sampled;
    if curve.requests == 0 {
        return "no shadowed request in the log: nothing says yet how many called tools top_k \
                keeps (configure `shadow`)."
            .to_owned();
    }
    if curve.calls == 0 {
        return format!(
            "{} shadowed requests, but their answers called no ranked tool: nothing to measure yet.",
            thousands(curve.requests)
        );
    }
    let calls = thousands(curve.calls);
    let mut text = match shadow.top_k {
        Some(k) => {
            let other = compared_k(k);
            format!(
                "with top_k {k}, {} of the {calls} calls seen would have been kept; with {other}, {}.",
                percent(curve.within(k), curve.calls),
                percent(curve.within(other), curve.calls),
            )
        }
        None => format!("{calls} calls seen (no top_k in the records)."),
    };
    let needs: Vec<String> = TARGETS
        .iter()
        .map(|(_, _, name)| {
            let k = curve.smallest_k.get(*name).copied().flatten();
            match k {
                Some(k) => format!("{name} % needs top_k {k}"),
                None => format!("{name} % needs more than {MAX_K}"),
            }
        })
        .collect();
    text.push_str(&format!(" {}.", needs.join(", ")));
    text
}

/// Reads every line of `reader` into a new [`Tally`]'s counts.
pub fn tally<R: BufRead>(reader: R, tally: &mut Tally) -> std::io::Result<()> {
    for_each_line(reader, MAX_LINE_BYTES, |line| tally.add_line(line))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    fn line(toolsift: &str, shadow: Option<&str>) -> String {
        serde_json::json!({"status": 200, "toolsift": toolsift, "toolsift_shadow": shadow})
            .to_string()
    }

    #[test]
    fn auto_k_per_catalog_is_the_latest_k_and_what_it_kept_since() {
        let mut t = Tally::new();
        let rec = |v: &str| line("kept=5 total=200", Some(v));
        for v in [
            "shadow=a@9 missed=1 top_k=5 tools=200 catalog=c1 k=default",
            "filtered=a@3 missed=0 top_k=12 tools=200 catalog=c1 k=auto",
            "shadow=a@3,b@11 missed=0 top_k=12 tools=200 catalog=c1 k=auto",
            "shadow=a@13 missed=1 top_k=12 tools=200 catalog=c1 k=auto",
            "shadow=a@70 missed=1 top_k=64 tools=900 catalog=c2 k=pooled capped=0.962",
            "shadow=a@2 missed=0 top_k=5 tools=200 catalog=c3",
        ] {
            t.add_line(Some(rec(v).as_bytes()));
        }
        let r = t.report();
        let of = |name: &str| {
            let c = r
                .shadow
                .catalogs
                .iter()
                .find(|c| c.catalog == name)
                .unwrap();
            c.auto_k.clone()
        };
        let c1 = of("c1").unwrap();
        assert_eq!((c1.k, c1.source.as_str()), (12, "auto"));
        assert_eq!((c1.filtered_requests, c1.shadowed_requests), (1, 2));
        assert_eq!(c1.calls, 3);
        assert!((c1.kept.unwrap() - 2.0 / 3.0).abs() < 1e-9);
        let c2 = of("c2").unwrap();
        assert_eq!(
            (c2.k, c2.source.as_str(), c2.capped),
            (64, "pooled", Some(0.962))
        );
        assert_eq!(of("c3"), None, "a record without k= has no auto_k");
        assert_eq!(r.lines.unreadable.get("toolsift_shadow"), None);
        let bad = parse_shadow("shadow=a@1 top_k=5 k=auto capped=nan");
        assert_eq!(bad, None);
    }

    #[test]
    fn tools_the_transitions_brought_in_are_counted_with_their_calls() {
        let mut t = Tally::new();
        let rec = |v: &str| serde_json::json!({"toolsift": v}).to_string();
        for v in [
            // Shadowed: the model called one of the two tools the transitions brought in.
            "kept=200 total=200 k=fleet:5 next=cat,diff%20two shadow=would_keep:5 \
             calls=cat@2,ls@1 missed=0 top_k=5 tools=200 catalog=c1 history=ls",
            "kept=5 total=200 k=fleet:5 next=cat",
            "kept=5 total=200 k=fleet:5",
            // Weak, shadowed for its history's transitions: not on the curve.
            "kept=128 total=200 weak=0/3 shadow=would_keep:128 calls=cat@40 missed=0 \
             top_k=128 tools=200 catalog=c1 history=ls",
        ] {
            t.add_line(Some(rec(v).as_bytes()));
        }
        let r = t.report();
        assert_eq!((r.transitions.requests, r.transitions.calls), (2, 1));
        assert_eq!(
            r.transitions.tools.ranked(),
            vec![("cat", 2), ("diff two", 1)]
        );
        assert_eq!(r.shadow.sampled.requests, 1);
        assert_eq!(r.weak_queries.requests, 1);
    }

    #[test]
    fn a_record_reads_as_its_keys_of_old_did() {
        // The same requests, as one record and as the keys written before it.
        let pairs = [
            (
                "kept=64 total=900 k=pooled:64 capped=0.962 shadow=would_keep:64 \
                 tokens=90000/90000 calls=a@70,b@- missed=1 top_k=64 tools=900 catalog=c2",
                r#"{"toolsift":"kept=64 total=900 k=pooled:64 capped=0.962 shadow=would_keep:64",
                "toolsift_tokens":"90000/90000","toolsift_shadow":
                "shadow=a@70,b@- missed=1 top_k=64 tools=900 catalog=c2 k=pooled capped=0.962"}"#,
            ),
            (
                "kept=5 total=200 k=auto:5 denied=1 tokens=9000/400 \
                 verdicts=deny:tools:r%2C1:x,would_deny:call:default:y:z \
                 calls= missed=0 top_k=5 tools=200 catalog=c1 unreadable=1",
                r#"{"toolsift":"kept=5 total=200 k=auto:5 denied=1","toolsift_tokens":"9000/400",
                "toolsift_access":"deny:tools:r%2C1:x would_deny:call:default:y:z",
                "toolsift_shadow":"filtered= missed=0 top_k=5 tools=200 catalog=c1 k=auto"}"#,
            ),
            (
                "verdicts=would_deny:request:default:-",
                r#"{"toolsift":null,"toolsift_access":"would_deny:request:default:-"}"#,
            ),
        ];
        let (mut new, mut old) = (Tally::new(), Tally::new());
        for (record, keys) in pairs {
            let line = serde_json::json!({ "toolsift": record }).to_string();
            new.add_line(Some(line.as_bytes()));
            old.add_line(Some(keys.replace('\n', "").as_bytes()));
        }
        let (new, old) = (new.report(), old.report());
        assert_eq!(new, old);
        assert_eq!(new.tokens.requests, 2);
        assert_eq!(new.shadow.sampled.calls, 1);
        assert_eq!(new.shadow.filtered_requests, 1);
        assert_eq!(
            new.shadow.catalogs[0].auto_k.as_ref().unwrap().capped,
            Some(0.962)
        );
        assert_eq!(new.access.by_surface.len(), 2);
        assert!(new.lines.unreadable.is_empty(), "{:?}", new.lines);
        // The record's own keys split from what `x-toolsift` says.
        let (header, own) = split_record(pairs[1].0);
        assert_eq!(header, "kept=5 total=200 k=auto:5 denied=1");
        assert_eq!(own.first(), Some(&("tokens", "9000/400")));
        assert_eq!(own.len(), 8);
    }

    #[test]
    fn unknown_paths_are_refusals_of_their_own_and_old_logs_still_read() {
        let mut t = Tally::new();
        for l in [
            line("kept=0 total=0 access=refused refused=unknown_path", None),
            // Written before `refused=`: a refusal.
            line("kept=0 total=0 denied=0 access=refused", None),
            line("kept=0 total=4 denied=4 access=refused", None),
        ] {
            t.add_line(Some(l.as_bytes()));
        }
        let r = t.report();
        assert_eq!(r.outcomes.get("refused=unknown_path"), Some(&1));
        assert_eq!(r.outcomes.get("refused"), Some(&2));
        assert_eq!((r.access.refused_requests, r.access.denied_tools), (3, 4));
    }

    #[test]
    fn a_tally_counts_lines_and_outcomes() {
        let mut t = Tally::new();
        for l in [
            line(
                "kept=5 total=80",
                Some("shadow=a@1,b@7,c@- missed=1 top_k=5 tools=80 catalog=aa"),
            ),
            line(
                "kept=5 total=80",
                Some("filtered=a@2,z@9 missed=0 top_k=5 tools=80 catalog=aa"),
            ),
            line("skipped=compressed", None),
            r#"{"toolsift":null,"toolsift_shadow":"-"}"#.to_owned(),
            r#"{"toolsift":"-"}"#.to_owned(),
            r#"{"toolsift":42}"#.to_owned(),
            r#"{"other":1}"#.to_owned(),
            "[1,2]".to_owned(),
            "\u{0}\u{1}garbage".to_owned(),
            "   ".to_owned(),
        ] {
            t.add_line(Some(l.as_bytes()));
        }
        t.add_line(None);
        let r = t.report();
        assert_eq!(r.lines.read, 11);
        assert_eq!(r.lines.requests, 6);
        assert_eq!(
            (r.lines.malformed, r.lines.foreign, r.lines.blank),
            (3, 1, 1)
        );
        assert_eq!(r.lines.unreadable.get("toolsift"), Some(&1));
        assert_eq!(r.outcomes.get("filtered"), Some(&2));
        assert_eq!(r.outcomes.get("none"), Some(&2));
        assert_eq!(r.outcomes.get("skipped=compressed"), Some(&1));
        assert_eq!((r.tools_in, r.tools_out), (160, 10));
        let s = &r.shadow;
        assert_eq!(s.top_k, Some(5));
        assert_eq!(
            (
                s.sampled.requests,
                s.sampled.calls,
                s.sampled.unranked_calls
            ),
            (1, 2, 1)
        );
        assert_eq!(s.sampled.within(5), 1);
        assert_eq!(s.sampled.within(7), 2);
        assert_eq!(s.sampled.smallest_k.get("95"), Some(&Some(7)));
        assert_eq!(
            (s.filtered_requests, s.filtered_calls, s.filtered_past_top_k),
            (1, 2, 1)
        );
        assert_eq!(s.kept_as_configured, Some(0.5));
        assert_eq!(r.unknown_tools.shadow_calls.names.get("c"), Some(&1));
        assert_eq!(
            r.summary,
            "with top_k 5, 50.0 % of the 2 calls seen would have been kept; with 3, 50.0 %. \
             95 % needs top_k 7, 99 % needs top_k 7, 99.9 % needs top_k 7."
        );
    }

    #[test]
    fn the_most_common_top_k_is_current() {
        let mut t = Tally::new();
        for k in [8, 8, 5] {
            let l = line("kept=5 total=80", Some(&format!("shadow=a@1 top_k={k}")));
            t.add_line(Some(l.as_bytes()));
        }
        let r = t.report();
        assert_eq!(r.shadow.top_k, Some(8));
        assert_eq!(r.shadow.top_k_values, BTreeMap::from([(5, 1), (8, 2)]));
    }

    #[test]
    fn numbers_read_as_people_write_them() {
        assert_eq!(thousands(1204), "1,204");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(12), "12");
        assert_eq!(percent(1193, 1204), "99.1 %");
        assert_eq!(percent(9999, 10000), "99.9 %");
        assert_eq!(percent(5, 5), "100.0 %");
        assert_eq!(percent(0, 0), "-");
        assert_eq!(compared_k(8), 5);
        assert_eq!(compared_k(5), 3);
        assert_eq!(compared_k(1), 2);
        assert_eq!(compared_k(60), 50);
    }

    #[test]
    fn counts_are_bounded() {
        let mut c = Counts::default();
        for i in 0..MAX_NAMES + 5 {
            c.add(&i.to_string(), 1);
        }
        assert_eq!((c.names.len(), c.others), (MAX_NAMES, 5));
        assert_eq!(c.total(), (MAX_NAMES + 5) as u64);
    }
}
