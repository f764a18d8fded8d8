//! The access log's lines read: the `toolsift` record of each (what `x-toolsift` says, and the
//! record's own fields), and the keys older logs kept apart (`toolsift_tokens`,
//! `toolsift_access`, `toolsift_shadow`). [`super::report`] sums them up and
//! [`super::calibrate`] reads them into the fleet's calibration; neither depends on the other.
//! The formats are in docs/report.md.
//!
//! Nothing a log holds can make this module panic: a line past [`MAX_LINE_BYTES`] is passed
//! over unread, and a value that does not read is `None`.

pub use crate::pipeline::percent_decode;
use std::io::BufRead;

/// A longer line is no access log line of ours: it is counted as malformed, unread.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// A comma-separated list of percent-encoded names, decoded; empty items dropped.
fn names(list: &str) -> Vec<String> {
    list.split(',')
        .filter(|n| !n.is_empty())
        .map(percent_decode)
        .collect()
}

/// The `x-toolsift` value (`toolsift` key) read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Decision {
    /// `filtered`, `refused` (`access=refused`), `refused=<reason>` (`access=refused
    /// refused=<reason>`: `unknown_path`), `skipped=<reason>`, `search=<kind>`, or
    /// `mcp=<what>` (MCP routes).
    pub outcome: String,
    pub kept: Option<u64>,
    pub total: Option<u64>,
    /// Tools the caller may not see (`denied=N`).
    pub denied: u64,
    /// Tools the loop guard took out (`loop=evicted:a,b`).
    pub evicted: Vec<String>,
    /// Tools whose latest result got the loop guard's note (`noted=a`).
    pub noted: Vec<String>,
    /// Made-up tools the model's latest turn called (`unknown=x,y`).
    pub unknown: Vec<String>,
    /// A question the ranking could not read (`weak=0/9`), sent as `weak_query` says.
    pub weak: bool,
    /// Kept tools the fleet's transitions brought in after the history's calls
    /// (`next=cat,diff`).
    pub next: Vec<String>,
}

/// Reads an `x-toolsift` value; `None` when it is none of the shapes the filter writes.
pub fn parse_decision(value: &str) -> Option<Decision> {
    let mut d = Decision::default();
    let mut skipped = None;
    let mut search = None;
    let mut refused = false;
    let mut why = None;
    let mut mcp = None;
    for item in value.split(' ').filter(|i| !i.is_empty()) {
        let (key, v) = item.split_once('=')?;
        let number = || v.parse::<u64>().ok();
        match key {
            "kept" => d.kept = Some(number()?),
            "total" => d.total = Some(number()?),
            "denied" => d.denied = number()?,
            "skipped" if !v.is_empty() => skipped = Some(v),
            "search" => search = Some(v),
            "access" => refused = v == "refused",
            "refused" if !v.is_empty() => why = Some(v),
            "loop" => d.evicted = names(v.strip_prefix("evicted:")?),
            "noted" => d.noted = names(v),
            "unknown" => d.unknown = names(v),
            "weak" => d.weak = true,
            "next" => d.next = names(v),
            "mcp" if mcp.is_none() => mcp = Some(v),
            // Keys this version does not sum up (ranking, fallback, gating, remembered…).
            _ => {}
        }
    }
    d.outcome = match (mcp, skipped, refused, search) {
        (Some(what), ..) => format!("mcp={what}"),
        (None, Some(reason), ..) => format!("skipped={reason}"),
        _ if d.kept.is_none() || d.total.is_none() => return None,
        // Logs written before `refused=` (an unknown path read `access=refused` alone) count
        // as `refused`.
        (None, None, true, _) => match why {
            Some(why) => format!("refused={why}"),
            None => "refused".to_owned(),
        },
        (None, None, false, Some(kind)) => format!("search={kind}"),
        (None, None, false, None) => "filtered".to_owned(),
    };
    Some(d)
}

/// One function call in the model's answer and the called tool's rank in the request's ranking
/// (`None`: a tool the catalog does not rank, `name@-`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub name: String,
    pub rank: Option<usize>,
}

/// A `toolsift_shadow` record.
#[derive(Debug, Clone, PartialEq)]
pub struct Shadow {
    /// `shadow=`: the tools went to the model untouched; `filtered=`: filtered as usual.
    pub sampled: bool,
    pub calls: Vec<Call>,
    /// Calls of ranked tools the selection would not have kept.
    pub missed: u64,
    pub top_k: Option<usize>,
    /// Function tools in the request.
    pub tools: Option<u64>,
    /// First 8 hex digits of the sha256 of the sorted tool names.
    pub catalog: Option<String>,
    /// With `auto_k`: where `top_k` came from (`k=auto`, `pooled`, `default`), and the share
    /// of calls `max_k` keeps when it capped the k (`capped=0.962`).
    pub auto_k: Option<String>,
    pub capped: Option<f64>,
    /// `slots=`: each call's slot, where one differs from its rank (empty: each is its rank).
    pub slots: Vec<Option<usize>>,
    /// `history=`: the tools the request's history had called, in order (a shadowed
    /// request's; empty without one).
    pub history: Vec<String>,
}

impl Shadow {
    /// The slot of each call that has one (what `auto_k` learns, [`crate::shadow::CallRank`]):
    /// as `slots=` gives it, or its rank where the record has no `slots=` (then no tool was
    /// moved, and each slot is its rank).
    pub fn learned_slots(&self) -> Vec<usize> {
        if self.slots.is_empty() {
            return self.calls.iter().filter_map(|c| c.rank).collect();
        }
        self.slots.iter().flatten().copied().collect()
    }
}

/// `name@rank`, split on the last `@` (names keep `@` unencoded).
fn parse_call(item: &str) -> Option<Call> {
    let (name, rank) = item.rsplit_once('@')?;
    if name.is_empty() {
        return None;
    }
    let rank = match rank {
        "-" => None,
        n => Some(n.parse::<usize>().ok().filter(|r| *r >= 1)?),
    };
    Some(Call {
        name: percent_decode(name),
        rank,
    })
}

/// Reads a `toolsift_shadow` value; `None` when it does not start with `shadow=` or
/// `filtered=`, or a call, `missed`, `top_k` or `tools` does not read.
pub fn parse_shadow(value: &str) -> Option<Shadow> {
    let mut items = value.split(' ').filter(|i| !i.is_empty());
    let (kind, calls) = items.next()?.split_once('=')?;
    let sampled = match kind {
        "shadow" => true,
        "filtered" => false,
        _ => return None,
    };
    let fields = items
        .map(|item| item.split_once('='))
        .collect::<Option<Vec<_>>>()?;
    shadow_from(sampled, calls, &fields)
}

/// A shadow record from its calls (`a@3,b@14`) and its other fields as `(key, value)`: those
/// of `toolsift_shadow` or of the record (other keys are passed over).
fn shadow_from(sampled: bool, calls: &str, fields: &[(&str, &str)]) -> Option<Shadow> {
    let calls = calls
        .split(',')
        .filter(|c| !c.is_empty())
        .map(parse_call)
        .collect::<Option<Vec<_>>>()?;
    let mut shadow = Shadow {
        sampled,
        calls,
        missed: 0,
        top_k: None,
        tools: None,
        catalog: None,
        auto_k: None,
        capped: None,
        slots: Vec::new(),
        history: Vec::new(),
    };
    for (key, v) in fields.iter().copied() {
        match key {
            "missed" => shadow.missed = v.parse().ok()?,
            "top_k" => shadow.top_k = Some(v.parse().ok().filter(|k| *k >= 1)?),
            "tools" => shadow.tools = Some(v.parse().ok()?),
            "catalog" if !v.is_empty() => shadow.catalog = Some(percent_decode(v)),
            "k" if !v.is_empty() => shadow.auto_k = Some(percent_decode(v)),
            "capped" => shadow.capped = Some(v.parse().ok().filter(|s: &f64| s.is_finite())?),
            "slots" => {
                shadow.slots = v
                    .split(',')
                    .map(|s| match s {
                        "-" => Some(None),
                        n => n.parse::<usize>().ok().filter(|s| *s >= 1).map(Some),
                    })
                    .collect::<Option<Vec<_>>>()?;
                // One per call, or it is not a record this grammar wrote.
                if shadow.slots.len() != shadow.calls.len() {
                    return None;
                }
            }
            "history" => {
                shadow.history = v
                    .split(',')
                    .filter(|n| !n.is_empty())
                    .map(percent_decode)
                    .collect();
            }
            _ => {}
        }
    }
    Some(shadow)
}

/// The keys of the record's own fields, after what `x-toolsift` says (docs/report.md, "The
/// record"): `x-toolsift` (and an MCP route's value) never uses them.
pub const RECORD_KEYS: [&str; 10] = [
    "tokens",
    "verdicts",
    "calls",
    "missed",
    "top_k",
    "tools",
    "catalog",
    "slots",
    "unreadable",
    "history",
];

/// A `toolsift` record split: what `x-toolsift` says (its fields in their order), and the
/// record's own fields ([`RECORD_KEYS`]) as `(key, value)`. A value logged before the record
/// has no fields of its own.
pub fn split_record(value: &str) -> (String, Vec<(&str, &str)>) {
    let mut header: Vec<&str> = Vec::new();
    let mut own = Vec::new();
    for field in value.split(' ').filter(|f| !f.is_empty()) {
        match field.split_once('=') {
            Some((key, v)) if RECORD_KEYS.contains(&key) => own.push((key, v)),
            _ => header.push(field),
        }
    }
    (header.join(" "), own)
}

/// The record's own parts, read.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RecordParts {
    /// `tokens=before/after`: `Some(None)` when it does not read.
    pub tokens: Option<Option<(u64, u64)>>,
    /// `verdicts=…`: the items that read, and how many did not.
    pub verdicts: Option<(Vec<AccessItem>, usize)>,
    /// `calls=… missed=… top_k=… tools=… catalog=…`: `Some(None)` when it does not read.
    pub shadow: Option<Option<Shadow>>,
}

/// Reads the record's own fields (from [`split_record`]). Shadow's part takes from what
/// `x-toolsift` says whether the request was shadowed (`shadow=would_keep:N`) and, with
/// `auto_k`, where its k came from and its cap (`k=auto:12 capped=0.962`).
pub fn parse_record_parts(header: &str, own: &[(&str, &str)]) -> RecordParts {
    let field = |key: &str| own.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
    let header_field = |key: &str| {
        header
            .split(' ')
            .find_map(|f| f.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
    };
    let shadow = field("calls").map(|calls| {
        let sampled = header_field("shadow").is_some();
        // `auto_k`'s source and cap, as `toolsift_shadow` said them (`k=auto`).
        let source = header_field("k").and_then(|k| k.split(':').next());
        let auto_k = source.map(|k| ("k", k)).into_iter();
        let capped = header_field("capped").map(|c| ("capped", c));
        let fields: Vec<(&str, &str)> = own.iter().copied().chain(auto_k).chain(capped).collect();
        shadow_from(sampled, calls, &fields)
    });
    RecordParts {
        tokens: field("tokens").map(parse_tokens),
        verdicts: field("verdicts").map(|v| parse_access_list(v, ',')),
        shadow,
    }
}

/// Reads a `toolsift_tokens` value, `before/after`.
pub fn parse_tokens(value: &str) -> Option<(u64, u64)> {
    let (before, after) = value.trim().split_once('/')?;
    Some((before.parse().ok()?, after.parse().ok()?))
}

/// The access surfaces a `toolsift_access` item may name.
pub const SURFACES: [&str; 6] = [
    "request",
    "tools",
    "call",
    "mcp_request",
    "mcp_tools",
    "mcp_call",
];
/// The verdicts, in the order the report lists them.
pub const VERDICTS: [&str; 4] = ["deny", "would_deny", "shadow_deny", "shadow_allow"];

/// One `verdict:surface:rule:tool` item of `toolsift_access`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessItem {
    pub verdict: &'static str,
    pub surface: &'static str,
    /// The rule's name, `default`, or `#N`.
    pub rule: String,
    /// `None` for a whole request (`-`).
    pub tool: Option<String>,
}

/// One item. Rule and tool names keep `:` unencoded, so `a:b:c` after the surface is read as
/// rule `a` and tool `b:c`: tool names (MCP servers' prefixes) hold colons more often than
/// the operator's rule names do.
fn parse_access_item(item: &str) -> Option<AccessItem> {
    let mut parts = item.splitn(3, ':');
    let verdict = parts.next()?;
    let surface = parts.next()?;
    let (rule, tool) = parts.next()?.split_once(':')?;
    let verdict = VERDICTS.into_iter().find(|v| *v == verdict)?;
    let surface = SURFACES.into_iter().find(|s| *s == surface)?;
    if rule.is_empty() || tool.is_empty() {
        return None;
    }
    Some(AccessItem {
        verdict,
        surface,
        rule: percent_decode(rule),
        tool: (tool != "-").then(|| percent_decode(tool)),
    })
}

/// Reads a `toolsift_access` value: its items that read, and how many did not.
pub fn parse_access(value: &str) -> (Vec<AccessItem>, usize) {
    parse_access_list(value, ' ')
}

/// Items separated by `separator` (a space in `toolsift_access`, a comma in the record's
/// `verdicts=`): those that read, and how many did not.
fn parse_access_list(value: &str, separator: char) -> (Vec<AccessItem>, usize) {
    let mut bad = 0;
    let items = value
        .split(separator)
        .filter(|i| !i.is_empty())
        .filter_map(|i| {
            let item = parse_access_item(i);
            bad += usize::from(item.is_none());
            item
        })
        .collect();
    (items, bad)
}

/// Calls `each` with every line of `reader` (without its `\n`, a final line without one
/// included), never holding more than `max` bytes of one: a longer line is passed as `None`.
pub fn for_each_line<R: BufRead>(
    mut reader: R,
    max: usize,
    mut each: impl FnMut(Option<&[u8]>),
) -> std::io::Result<()> {
    let mut line = Vec::new();
    let mut overlong = false;
    loop {
        let (used, ended, eof) = {
            let buf = match reader.fill_buf() {
                Ok(buf) => buf,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            let (part, used, ended) = match memchr::memchr(b'\n', buf) {
                Some(i) => (buf.get(..i).unwrap_or_default(), i + 1, true),
                None => (buf, buf.len(), false),
            };
            if !overlong {
                if line.len() + part.len() > max {
                    overlong = true;
                    line = Vec::new();
                } else {
                    line.extend_from_slice(part);
                }
            }
            (used, ended, buf.is_empty())
        };
        reader.consume(used);
        if ended || (eof && (overlong || !line.is_empty())) {
            each((!overlong).then_some(line.as_slice()));
            line.clear();
            overlong = false;
        }
        if eof {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    #[test]
    fn percent_decoding_keeps_bad_sequences() {
        assert_eq!(percent_decode("a%20b"), "a b");
        assert_eq!(percent_decode("evil%0D%0Ax"), "evil\r\nx");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
        assert_eq!(percent_decode("%FF"), "\u{FFFD}");
        assert_eq!(percent_decode("caf%C3%A9"), "café");
    }

    #[test]
    fn decisions() {
        let d = parse_decision("kept=5 total=200").unwrap();
        assert_eq!(
            (d.outcome.as_str(), d.kept, d.total),
            ("filtered", Some(5), Some(200))
        );
        let d = parse_decision("kept=12 total=12 skipped=few_tools").unwrap();
        assert_eq!(d.outcome, "skipped=few_tools");
        assert_eq!(d.total, Some(12));
        let d = parse_decision("skipped=compressed").unwrap();
        assert_eq!((d.outcome.as_str(), d.total), ("skipped=compressed", None));
        let d = parse_decision("kept=0 total=200 denied=3 access=refused").unwrap();
        assert_eq!((d.outcome.as_str(), d.denied), ("refused", 3));
        let d = parse_decision("kept=0 total=0 access=refused refused=unknown_path").unwrap();
        assert_eq!((d.outcome.as_str(), d.denied), ("refused=unknown_path", 0));
        // An older log's unknown path: a refusal with no reason.
        let d = parse_decision("kept=0 total=0 denied=0 access=refused").unwrap();
        assert_eq!(d.outcome, "refused");
        let d = parse_decision(
            "kept=5 total=200 denied=2 loop=evicted:a,b%2Cc noted=a unknown=x,y@z ranking=hybrid search=search",
        )
        .unwrap();
        assert_eq!(d.outcome, "search=search");
        assert_eq!(d.evicted, ["a", "b,c"]);
        assert_eq!(d.noted, ["a"]);
        assert_eq!(d.unknown, ["x", "y@z"]);
        assert_eq!(d.denied, 2);
        let d = parse_decision("mcp=tools/list kept=1 total=250").unwrap();
        assert_eq!(d.outcome, "mcp=tools/list");
    }

    #[test]
    fn decisions_that_do_not_read() {
        for bad in [
            "",
            "kept=5",
            "kept=five total=6",
            "kept=-1 total=6",
            "hello",
            "kept=5 total=6 loop=a,b",
            "kept=5 total=6 denied=",
            "kept=99999999999999999999999 total=1",
        ] {
            assert_eq!(parse_decision(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn shadow_records() {
        let s = parse_shadow(
            "shadow=get_pod_logs@3,post_update@14 missed=1 top_k=5 tools=200 catalog=3fa2b1c0",
        )
        .unwrap();
        assert!(s.sampled);
        assert_eq!(
            s.calls,
            [
                Call {
                    name: "get_pod_logs".into(),
                    rank: Some(3)
                },
                Call {
                    name: "post_update".into(),
                    rank: Some(14)
                }
            ]
        );
        assert_eq!((s.missed, s.top_k, s.tools), (1, Some(5), Some(200)));
        assert_eq!(s.catalog.as_deref(), Some("3fa2b1c0"));
        let s = parse_shadow("filtered=get_pod_logs@3 missed=0 top_k=5 tools=200 catalog=3fa2b1c0")
            .unwrap();
        assert!(!s.sampled);
        // No call in the answer.
        let s = parse_shadow("shadow= missed=0 top_k=5 tools=200 catalog=3fa2b1c0").unwrap();
        assert!(s.calls.is_empty());
        // Names with '@' split on the last one; unranked calls; percent-encoded names.
        let s = parse_shadow("shadow=me@example.com@2,web_search@-,a%20b%40c@7 top_k=5").unwrap();
        assert_eq!(
            s.calls,
            [
                Call {
                    name: "me@example.com".into(),
                    rank: Some(2)
                },
                Call {
                    name: "web_search".into(),
                    rank: None
                },
                Call {
                    name: "a b@c".into(),
                    rank: Some(7)
                }
            ]
        );
        // Missing keys are absent, not errors.
        let s = parse_shadow("shadow=a@1").unwrap();
        assert_eq!((s.top_k, s.tools, s.catalog), (None, None, None));
    }

    #[test]
    fn shadow_records_that_do_not_read() {
        for bad in [
            "",
            "-",
            "kept=5 total=6",
            "shadow=a",
            "shadow=a@0",
            "shadow=a@x",
            "shadow=@3",
            "shadow=a@3 missed=x",
            "shadow=a@3 top_k=0",
            "shadow=a@3 top_k",
            "sampled=a@3",
        ] {
            assert_eq!(parse_shadow(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn tokens() {
        assert_eq!(parse_tokens("18621/1778"), Some((18621, 1778)));
        for bad in ["", "1", "1/", "/1", "a/b", "1/2/3", "-1/2"] {
            assert_eq!(parse_tokens(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn access_items() {
        let (items, bad) = parse_access(
            "would_deny:tools:no-shell:run_shell deny:request:default:- shadow_allow:call:%231:srv:tool bogus deny:nowhere:r:t deny:tools::t",
        );
        assert_eq!(bad, 3);
        assert_eq!(
            items,
            [
                AccessItem {
                    verdict: "would_deny",
                    surface: "tools",
                    rule: "no-shell".into(),
                    tool: Some("run_shell".into())
                },
                AccessItem {
                    verdict: "deny",
                    surface: "request",
                    rule: "default".into(),
                    tool: None
                },
                AccessItem {
                    verdict: "shadow_allow",
                    surface: "call",
                    rule: "#1".into(),
                    tool: Some("srv:tool".into())
                },
            ]
        );
    }

    #[test]
    fn lines_are_split_within_the_bound() {
        let text = b"a\n\nbbbbbbbbbb\ncc\r\nlast";
        let mut seen = Vec::new();
        for_each_line(std::io::BufReader::with_capacity(3, &text[..]), 5, |l| {
            seen.push(l.map(|l| String::from_utf8_lossy(l).into_owned()));
        })
        .unwrap();
        assert_eq!(
            seen,
            [
                Some("a".into()),
                Some("".into()),
                None,
                Some("cc\r".into()),
                Some("last".into())
            ]
        );
        let mut n = 0;
        for_each_line(&b""[..], 5, |_| n += 1).unwrap();
        assert_eq!(n, 0);
    }
}
