//! Shadow ranking: know what a cut would cost before making it.
//!
//! A sampled request (`shadow.sample`) goes upstream with every tool its caller may see: ranking
//! and selection run as usual, but only access rules take tools out. The model's answer is read
//! as it passes (never held, never edited), and each tool it calls is looked up in that request's
//! ranking: its rank, and whether the selection (`top_k`, `min_score`, `max_tool_tokens`, pins,
//! the loop guard) would have kept it. Requests not sampled are filtered as usual, and the ranks
//! of the tools their answers call are recorded too: the headroom of the current `top_k`.
//!
//! Everything here is sans-I/O: [`Sampler`] takes no clock, [`Watch`] is fed the answer's head
//! and bytes and hands back a [`Record`]; the proxy-wasm adapter only drives it.

use crate::dialects::Dialect;
use crate::pipeline::{Analysis, header_safe};
use crate::rank::Catalog;
use crate::select::{Decision, Selection, Verdict};
use std::rc::Rc;

/// Which requests are shadowed: a pseudo-random sequence per worker (xorshift64*), seeded once
/// by the host. Statistical sampling needs no cryptographic randomness, and a sequence of its
/// own keeps the decision free of host calls.
#[derive(Debug, Clone)]
pub struct Sampler {
    state: u64,
}

impl Sampler {
    pub fn new(seed: u64) -> Sampler {
        // xorshift must not start at zero; the odd constant mixes weak seeds (a clock's low
        // bits, a context id).
        let mixed = seed ^ 0x9E37_79B9_7F4A_7C15;
        Sampler {
            state: if mixed == 0 { 1 } else { mixed },
        }
    }

    /// Whether the next request is shadowed at `rate` (0: never, 1: always).
    pub fn sample(&mut self, rate: f64) -> bool {
        if rate <= 0.0 {
            return false;
        }
        if rate >= 1.0 {
            return true;
        }
        self.next_unit() < rate
    }

    /// A draw in [0, 1).
    fn next_unit(&mut self) -> f64 {
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        let bits = x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11;
        bits as f64 / (1u64 << 53) as f64
    }
}

/// Where one call of the answer stood in its request's ranking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallRank {
    pub name: String,
    /// 1-based place in the ranking; `None` for a tool the catalog does not rank (a provider
    /// built-in, or a name the request does not carry).
    pub rank: Option<usize>,
    /// The selection keeps it (a filtered request), or would have (a shadowed one).
    pub kept: bool,
    /// The `top_k` that keeps it: its place among the tools the caller may see that the loop
    /// guard left (each of them, pinned or ranked, takes a place as [`crate::select`] counts
    /// them), and 1 for a pinned tool, which any k keeps. What `auto_k` learns from a
    /// shadowed call.
    pub slot: Option<usize>,
}

/// What one request's answer showed, for the stats and the access log.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// Shadowed (every tool forwarded), or filtered as usual.
    pub sampled: bool,
    pub calls: Vec<CallRank>,
    /// The `top_k` the selection had: the configured one, or `auto_k`'s.
    pub top_k: usize,
    /// With `auto_k`: where `top_k` came from, and whether it was capped.
    pub auto_k: Option<crate::auto_k::Chosen>,
    /// Function tools in the request.
    pub tools: usize,
    /// The catalog: see [`catalog_id`].
    pub catalog: u32,
    /// The answer could not be read (an error status, a compressed or cut-off body, an
    /// unknown shape): no calls were seen.
    pub unreadable: bool,
    /// The tools the request's history had called, in the order of their first call (the
    /// latest [`crate::transitions::MAX_HISTORY`]): what `toolsift calibrate` learns the
    /// fleet's transitions from, beside `calls`.
    pub history: Vec<String>,
    /// A question the ranking could not read (`weak=`): shadowed for its history's
    /// transitions alone, its calls teach `auto_k` nothing.
    pub weak: bool,
}

impl Record {
    /// Calls of ranked tools the selection would not have kept (none, in a request filtered
    /// as usual: its model was shown only what was kept).
    pub fn missed(&self) -> usize {
        self.calls
            .iter()
            .filter(|c| c.rank.is_some() && !c.kept)
            .count()
    }

    /// Calls of ranked tools.
    pub fn ranked_calls(&self) -> impl Iterator<Item = &CallRank> {
        self.calls.iter().filter(|c| c.rank.is_some())
    }

    /// Its fields in the access log's record (docs/report.md): `calls=get_pod_logs@3,post_update@14
    /// missed=1 top_k=5 tools=200 catalog=3fa2b1c0` (`name@-` for a tool the ranking does not
    /// hold; ` unreadable=1` when the answer could not be read). A shadowed record whose calls'
    /// slots (what `auto_k` learns) differ from their ranks, because access rules, the loop
    /// guard or pins moved tools, adds ` slots=3,12,-`, one per call, for `toolsift calibrate`.
    /// Whether it was shadowed, and
    /// `auto_k`'s source and cap, are the record's head's (`shadow=would_keep:N`, `k=auto:12`).
    pub fn fields(&self) -> String {
        let calls: Vec<String> = self
            .calls
            .iter()
            .map(|c| {
                let rank = c.rank.map_or_else(|| "-".to_owned(), |r| r.to_string());
                format!("{}@{rank}", header_safe(&c.name))
            })
            .collect();
        let mut out = format!(
            "calls={} missed={} top_k={} tools={} catalog={}",
            calls.join(","),
            self.missed(),
            self.top_k,
            self.tools,
            catalog_name(self.catalog),
        );
        if self.sampled
            && self
                .calls
                .iter()
                .any(|c| c.rank.is_some() && c.slot != c.rank)
        {
            let slots: Vec<String> = self
                .calls
                .iter()
                .map(|c| c.slot.map_or_else(|| "-".to_owned(), |s| s.to_string()))
                .collect();
            out.push_str(" slots=");
            out.push_str(&slots.join(","));
        }
        if self.unreadable {
            out.push_str(" unreadable=1");
        }
        // Only a shadowed request's: what its model called next, from every tool, is what
        // the transitions learn (a filtered one's model saw only what was kept).
        if self.sampled && !self.history.is_empty() {
            let history: Vec<String> = self
                .history
                .iter()
                .map(|n| header_safe(n).into_owned())
                .collect();
            out.push_str(" history=");
            out.push_str(&history.join(","));
        }
        out
    }
}

pub use crate::rank::catalog_id;

/// A catalog's short name: its [`catalog_id`] in 8 hex digits.
pub fn catalog_name(id: u32) -> String {
    format!("{id:08x}")
}

/// What the answer's calls are measured against: the request's ranking and what the selection
/// kept, or would have kept.
#[derive(Clone)]
pub struct Scorecard {
    catalog: Rc<Catalog>,
    /// The selection that was (filtered) or would have been (shadowed) applied, in rank order.
    decisions: Vec<Decision>,
    sampled: bool,
    top_k: usize,
    auto_k: Option<crate::auto_k::Chosen>,
    /// The tools the request's history had called (the latest [`crate::transitions::MAX_HISTORY`]).
    history: Vec<String>,
    /// The question was weak ([`crate::weak_query`]).
    weak: bool,
}

impl Scorecard {
    /// For a request filtered as usual (`sampled` false), or shadowed, given the selection that
    /// would have been applied (with the analysis's k).
    pub fn new(analysis: &Analysis, selection: &Selection, sampled: bool) -> Self {
        Scorecard {
            catalog: Rc::clone(&analysis.catalog),
            decisions: selection.decisions.clone(),
            sampled,
            top_k: analysis.selected_k_or_top_k(),
            auto_k: analysis.auto_k_used(),
            // Only a shadowed record names it: a filtered request copies nothing.
            history: if sampled {
                let skip = analysis
                    .called
                    .len()
                    .saturating_sub(crate::transitions::MAX_HISTORY);
                analysis.called.iter().skip(skip).cloned().collect()
            } else {
                Vec::new()
            },
            weak: analysis.weak,
        }
    }

    pub fn sampled(&self) -> bool {
        self.sampled
    }

    /// Where a call of `name` stands. The first of several tools of one name ranks (the one a
    /// provider would resolve the name to is not knowable; names are unique in practice).
    pub fn call(&self, name: &str) -> CallRank {
        let at = self
            .decisions
            .iter()
            .position(|d| self.catalog.name(d.entry) == Some(name));
        let found = at.and_then(|at| self.decisions.get(at));
        let kept = found.is_some_and(|d| d.verdict.kept());
        // A filtered request's model was shown the kept tools alone: a call of another one is
        // a name it made up, not a rank the cut missed.
        let ranked = found.filter(|_| kept || self.sampled);
        let takes_place = |d: &Decision| !matches!(d.verdict, Verdict::Denied | Verdict::Evicted);
        let pinned = |d: &Decision| {
            matches!(
                d.verdict,
                Verdict::ToolChoice | Verdict::Called | Verdict::AlwaysInclude
            )
        };
        let slot = match (ranked, at) {
            // Kept whatever the k: as if it ranked first.
            (Some(d), _) if pinned(d) => Some(1),
            (Some(d), Some(at)) if takes_place(d) => Some(
                self.decisions
                    .iter()
                    .take(at + 1)
                    .filter(|d| takes_place(d))
                    .count(),
            ),
            _ => None,
        };
        CallRank {
            name: name.to_owned(),
            rank: ranked.map(|d| d.rank),
            kept,
            slot,
        }
    }

    /// The record of an answer that made `calls` (`None`: it could not be read).
    pub fn record(&self, calls: Option<Vec<String>>) -> Record {
        let unreadable = calls.is_none();
        Record {
            sampled: self.sampled,
            calls: calls
                .unwrap_or_default()
                .iter()
                .map(|n| self.call(n))
                .collect(),
            top_k: self.top_k,
            auto_k: self.auto_k,
            tools: self.decisions.len(),
            catalog: self.catalog.id(),
            unreadable,
            history: self.history.clone(),
            weak: self.weak,
        }
    }
}

/// The most bytes of a whole (not streamed) answer kept to be read at its end; a larger answer
/// is not read (counted as unreadable).
pub const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;

/// Reads the names of the tools a model's answer calls, from its bytes as they pass: a stream
/// frame by frame (only the unframed tail is kept), a whole answer at its end.
#[derive(Debug)]
pub struct AnswerReader {
    dialect: Dialect,
    state: ReadState,
    /// Bytes not framed yet (a stream), or the whole answer so far.
    pending: Vec<u8>,
    calls: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReadState {
    /// No response head yet.
    Waiting,
    Whole,
    Stream,
    /// Nothing more will be read (and no calls reported).
    Unreadable,
    Done,
}

/// What a response's head says, as the host read it.
#[derive(Debug, Clone, Default)]
pub struct Head<'a> {
    pub status: Option<&'a str>,
    pub content_type: Option<&'a str>,
    pub content_encoding: Option<&'a str>,
}

impl AnswerReader {
    pub fn new(dialect: Dialect) -> AnswerReader {
        AnswerReader {
            dialect,
            state: ReadState::Waiting,
            pending: Vec::new(),
            calls: Vec::new(),
        }
    }

    /// The response head: only a successful, uncompressed answer is read; its content type
    /// says whether it is a stream.
    pub fn on_head(&mut self, head: &Head<'_>) {
        let success = head
            .status
            .and_then(|s| s.trim().parse::<u16>().ok())
            .is_some_and(|s| (200..300).contains(&s));
        let encoded = head
            .content_encoding
            .is_some_and(|e| !e.trim().is_empty() && !e.trim().eq_ignore_ascii_case("identity"));
        self.state = if !success || encoded {
            ReadState::Unreadable
        } else if head.content_type.is_some_and(is_stream_type) {
            ReadState::Stream
        } else {
            ReadState::Whole
        };
    }

    /// The next bytes of the answer.
    pub fn feed(&mut self, bytes: &[u8]) {
        match self.state {
            ReadState::Whole => {
                if self.pending.len() + bytes.len() > MAX_ANSWER_BYTES {
                    self.give_up();
                } else {
                    self.pending.extend_from_slice(bytes);
                }
            }
            ReadState::Stream => {
                self.pending.extend_from_slice(bytes);
                self.read_frames();
                // An event that never ends is not this API's stream.
                if self.pending.len() > MAX_ANSWER_BYTES {
                    self.give_up();
                }
            }
            // Bytes before a head (not seen in Envoy) cannot be placed: not read.
            ReadState::Waiting => self.give_up(),
            ReadState::Unreadable | ReadState::Done => {}
        }
    }

    /// The answer ended: the tools it called, in order, or `None` when it could not be read.
    pub fn finish(&mut self) -> Option<Vec<String>> {
        let state = std::mem::replace(&mut self.state, ReadState::Done);
        let pending = std::mem::take(&mut self.pending);
        match state {
            ReadState::Whole => {
                let text = std::str::from_utf8(&pending).ok()?;
                let codec = self.dialect.codec();
                match codec.read_reply(text) {
                    Ok(reply) => Some(reply.calls.into_iter().map(|c| c.name).collect()),
                    // Gemini's stream without `alt=sse` is one JSON array of responses.
                    Err(_) => {
                        let frames = crate::sse::array_frames(text)?;
                        Some(frames.iter().flat_map(|f| codec.calls_started(f)).collect())
                    }
                }
            }
            // A stream cut in the middle of an event ends with what its whole events showed.
            ReadState::Stream => Some(std::mem::take(&mut self.calls)),
            ReadState::Waiting | ReadState::Unreadable | ReadState::Done => None,
        }
    }

    /// Whether the answer is past reading (finished, or not readable).
    pub fn done(&self) -> bool {
        matches!(self.state, ReadState::Done)
    }

    fn give_up(&mut self) {
        self.state = ReadState::Unreadable;
        self.pending = Vec::new();
        self.calls.clear();
    }

    fn read_frames(&mut self) {
        let codec = self.dialect.codec();
        let Some((frames, consumed)) = codec.framing().wire_frames(&self.pending) else {
            // Not the stream this API sends (not text, or a broken binary frame).
            self.give_up();
            return;
        };
        for frame in &frames {
            self.calls.extend(codec.calls_started(frame));
        }
        self.pending.drain(..consumed.min(self.pending.len()));
    }
}

/// Whether a response content type is one of the stream framings the dialects read.
fn is_stream_type(content_type: &str) -> bool {
    let t = content_type.to_ascii_lowercase();
    t.contains("text/event-stream")
        || t.contains("ndjson")
        || t.contains("jsonl")
        || t.contains("vnd.amazon.eventstream")
}

/// One request's shadow bookkeeping, from the body phase to the answer's last byte.
pub struct Watch {
    card: Scorecard,
    reader: AnswerReader,
}

impl Watch {
    pub fn new(card: Scorecard, dialect: Dialect) -> Watch {
        Watch {
            card,
            reader: AnswerReader::new(dialect),
        }
    }

    pub fn sampled(&self) -> bool {
        self.card.sampled()
    }

    pub fn on_head(&mut self, head: &Head<'_>) {
        self.reader.on_head(head);
    }

    pub fn feed(&mut self, bytes: &[u8]) {
        self.reader.feed(bytes);
    }

    /// Whether the answer's record was taken already.
    pub fn finished(&self) -> bool {
        self.reader.done()
    }

    /// The answer ended: what it showed.
    pub fn finish(&mut self) -> Record {
        let calls = self.reader.finish();
        self.card.record(calls)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    #[test]
    fn sampling_rates_at_the_ends_never_draw_wrong() {
        let mut s = Sampler::new(7);
        assert!((0..1000).all(|_| !s.sample(0.0)));
        assert!((0..1000).all(|_| s.sample(1.0)));
    }

    #[test]
    fn sampling_half_stays_within_binomial_bounds_for_any_seed() {
        // 4,000 draws at p = 0.5: sd 31.6; 4 sd either side.
        for seed in [0, 1, 42, u64::MAX, 0x9E37_79B9_7F4A_7C15] {
            let mut s = Sampler::new(seed);
            let hits = (0..4000).filter(|_| s.sample(0.5)).count();
            assert!((1874..=2126).contains(&hits), "seed {seed}: {hits}");
        }
    }

    #[test]
    fn catalog_names_ignore_order() {
        let a = catalog_id(["b", "a", "c"].into_iter());
        let b = catalog_id(["c", "b", "a"].into_iter());
        assert_eq!(a, b);
        assert_eq!(catalog_name(a).len(), 8);
        assert_eq!(catalog_name(0x3fa2_b1c0), "3fa2b1c0");
        assert_ne!(a, catalog_id(["a", "b"].into_iter()));
    }

    #[test]
    fn the_fields_name_each_call_and_what_was_missed() {
        let record = Record {
            sampled: true,
            calls: vec![
                CallRank {
                    name: "get_pod_logs".into(),
                    rank: Some(3),
                    kept: true,
                    slot: Some(3),
                },
                CallRank {
                    name: "post update".into(),
                    rank: Some(14),
                    kept: false,
                    slot: Some(14),
                },
                CallRank {
                    name: "web_search".into(),
                    rank: None,
                    kept: false,
                    slot: None,
                },
            ],
            top_k: 5,
            auto_k: None,
            tools: 200,
            catalog: 0x3fa2_b1c0,
            unreadable: false,
            history: Vec::new(),
            weak: false,
        };
        assert_eq!(record.missed(), 1);
        assert_eq!(
            record.fields(),
            "calls=get_pod_logs@3,post%20update@14,web_search@- missed=1 top_k=5 tools=200 \
             catalog=3fa2b1c0"
        );
    }

    #[test]
    fn a_shadowed_record_names_slots_only_where_they_differ_from_ranks() {
        let call = |name: &str, rank, slot| CallRank {
            name: name.into(),
            rank,
            kept: true,
            slot,
        };
        let mut record = Record {
            sampled: true,
            calls: vec![call("a", Some(4), Some(4)), call("b", None, None)],
            top_k: 5,
            auto_k: None,
            tools: 9,
            catalog: 1,
            unreadable: false,
            history: Vec::new(),
            weak: false,
        };
        assert!(!record.fields().contains("slots="));
        // A pinned tool takes slot 1 whatever its rank; a denied one no slot.
        record.calls = vec![call("a", Some(4), Some(1)), call("b", Some(2), None)];
        assert!(
            record.fields().ends_with(" catalog=00000001 slots=1,-"),
            "{}",
            record.fields()
        );
        record.sampled = false;
        assert!(!record.fields().contains("slots="));
    }

    #[test]
    fn a_shadowed_record_names_its_history_s_calls() {
        let mut record = Record {
            sampled: true,
            calls: vec![CallRank {
                name: "cat".into(),
                rank: Some(7),
                kept: true,
                slot: Some(7),
            }],
            top_k: 5,
            auto_k: None,
            tools: 9,
            catalog: 1,
            unreadable: false,
            history: vec!["ls".into(), "cd dir".into()],
            weak: false,
        };
        assert!(
            record
                .fields()
                .ends_with(" catalog=00000001 history=ls,cd%20dir"),
            "{}",
            record.fields()
        );
        // A filtered request's model saw only the kept tools: nothing to learn from.
        record.sampled = false;
        assert!(!record.fields().contains("history="));
    }

    fn head<'a>(status: &'a str, content_type: &'a str) -> Head<'a> {
        Head {
            status: Some(status),
            content_type: Some(content_type),
            content_encoding: None,
        }
    }

    #[test]
    fn a_whole_answer_is_read_at_its_end_in_any_chunks() {
        let body = r#"{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}"#;
        for cut in [1, 7, body.len()] {
            let mut r = AnswerReader::new(Dialect::OpenaiChat);
            r.on_head(&head("200", "application/json"));
            for chunk in body.as_bytes().chunks(cut) {
                r.feed(chunk);
            }
            assert_eq!(r.finish(), Some(vec!["get_weather".to_owned()]));
        }
    }

    #[test]
    fn a_stream_is_read_frame_by_frame_whatever_the_cuts() {
        let stream = concat!(
            "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"\"}}]}}]}\n\n",
            "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"call_2\",\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"arguments\":\"{}\"}}]}}]}\n\n",
            "data: [DONE]\n\n"
        );
        for cut in 1..40 {
            let mut r = AnswerReader::new(Dialect::OpenaiChat);
            r.on_head(&head("200", "text/event-stream; charset=utf-8"));
            for chunk in stream.as_bytes().chunks(cut) {
                r.feed(chunk);
            }
            assert_eq!(
                r.finish(),
                Some(vec!["get_weather".to_owned(), "get_time".to_owned()]),
                "cut {cut}"
            );
        }
    }

    #[test]
    fn errors_compressed_and_garbled_answers_are_unreadable() {
        let mut r = AnswerReader::new(Dialect::OpenaiChat);
        r.on_head(&head("500", "application/json"));
        r.feed(b"{}");
        assert_eq!(r.finish(), None);
        let mut r = AnswerReader::new(Dialect::OpenaiChat);
        r.on_head(&Head {
            status: Some("200"),
            content_type: Some("application/json"),
            content_encoding: Some("gzip"),
        });
        assert_eq!(r.finish(), None);
        let mut r = AnswerReader::new(Dialect::OpenaiChat);
        r.on_head(&head("200", "application/json"));
        r.feed(b"\xff\xfe not json");
        assert_eq!(r.finish(), None);
        // A stream of bytes that are not text: given up, never a panic.
        let mut r = AnswerReader::new(Dialect::Anthropic);
        r.on_head(&head("200", "text/event-stream"));
        r.feed(b"data: \xff\xff\xff\n\n");
        r.feed(b"data: {}\n\n");
        let _ = r.finish();
        assert!(r.done());
    }
}
