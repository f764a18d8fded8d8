//! Every Envoy stat toolsift defines, by name and kind, and what each event of the core counts
//! in. The adapter defines them all at configuration and adds to them: which stat an event
//! counts in (a follow-up of search mode or of `unknown_tools.answer`, an MCP call) is decided
//! here and beside the events, never in the adapter. `docs/book/src/reference/metrics.md`
//! lists them; `tests/book.rs` checks that it lists these and no others.

use crate::access::Surface;
use crate::embeddings::Fallback;
use crate::pipeline::Skip;
use std::borrow::Cow;

/// An Envoy stat's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    /// A histogram: each value recorded (µs, a rank).
    Histogram,
    /// A gauge: a value set, not added to. Set once, at configuration ([`configured`]), so
    /// it costs the request path nothing.
    Gauge,
}

/// Which stats are defined: the MCP ones only with `mcp` or `gating` configured (without them
/// `/stats` shows none of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    Always,
    Mcp,
}

macro_rules! fixed {
    ($($(#[$doc:meta])* $variant:ident: $kind:ident $group:ident $name:literal,)*) => {
        /// A stat of a fixed name.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Fixed {
            $($(#[$doc])* $variant,)*
        }

        impl Fixed {
            pub const ALL: &[Fixed] = &[$(Fixed::$variant,)*];

            pub fn name(self) -> &'static str {
                match self {
                    $(Fixed::$variant => $name,)*
                }
            }

            pub fn kind(self) -> Kind {
                match self {
                    $(Fixed::$variant => Kind::$kind,)*
                }
            }

            pub fn group(self) -> Group {
                match self {
                    $(Fixed::$variant => Group::$group,)*
                }
            }
        }
    };
}

fixed! {
    Requests: Counter Always "toolsift.requests",
    /// Requests whose body was rewritten, and those ranked that went on as they came.
    Rewritten: Counter Always "toolsift.rewritten",
    Unchanged: Counter Always "toolsift.unchanged",
    /// Skips that are errors ([`Skip::is_error`]).
    Errors: Counter Always "toolsift.errors",
    ToolsIn: Counter Always "toolsift.tools_in",
    ToolsOut: Counter Always "toolsift.tools_out",
    TokensSaved: Counter Always "toolsift.tokens_saved",
    CatalogCacheHits: Counter Always "toolsift.catalog_cache.hits",
    CatalogCacheMisses: Counter Always "toolsift.catalog_cache.misses",
    FilterTimeUs: Histogram Always "toolsift.filter_time_us",
    /// The filter's time per request in each phase, in µs: reading the body from Envoy,
    /// analysing it with a cached catalog or with a new one (assembled from its tools' parts),
    /// hybrid ranking's own work before its embeddings call, handling that call's answer
    /// (reading it, fusing, selecting, writing), and writing the rewritten body back.
    PhaseReadUs: Histogram Always "toolsift.phase.read_us",
    PhaseAnalyseUs: Histogram Always "toolsift.phase.analyse_us",
    PhaseAssembleUs: Histogram Always "toolsift.phase.assemble_us",
    PhaseHybridUs: Histogram Always "toolsift.phase.hybrid_us",
    PhaseAnswerUs: Histogram Always "toolsift.phase.answer_us",
    PhaseWriteUs: Histogram Always "toolsift.phase.write_us",
    /// Requests ranked with the embeddings, and requests of `ranking: hybrid` ranked by
    /// keyword (a fallback, or a catalog whose vectors are still being fetched).
    RankedHybrid: Counter Always "toolsift.ranking.hybrid",
    RankedKeyword: Counter Always "toolsift.ranking.keyword",
    EmbeddingsCalls: Counter Always "toolsift.embeddings.calls",
    EmbeddingsInputs: Counter Always "toolsift.embeddings.inputs",
    /// New catalogs larger than `max_batch`, ranked by keyword until all their vectors are in.
    EmbeddingsIncomplete: Counter Always "toolsift.embeddings.incomplete",
    /// Tool vectors fetched by background calls.
    EmbeddingsBackfilled: Counter Always "toolsift.embeddings.backfilled",
    /// Search mode: requests sent with the meta-tool, requests that carried the provider's
    /// own tool search (untouched), requests a `native_search` rule handed to it, queries
    /// ranked with embeddings, requests search mode cannot serve (filtered instead),
    /// responses held, streams released at their first output, follow-ups sent, responses
    /// answered after follow-ups, failed follow-ups, and model turns toolsift could not read.
    SearchRequests: Counter Always "toolsift.search.requests",
    SearchNative: Counter Always "toolsift.search.native",
    SearchProvider: Counter Always "toolsift.search.provider",
    SearchHybrid: Counter Always "toolsift.search.hybrid",
    SearchUnsupported: Counter Always "toolsift.search.unsupported",
    SearchHeld: Counter Always "toolsift.search.held",
    SearchReleased: Counter Always "toolsift.search.released",
    SearchRounds: Counter Always "toolsift.search.rounds",
    SearchAnswered: Counter Always "toolsift.search.answered",
    SearchFailed: Counter Always "toolsift.search.failed",
    SearchUnreadable: Counter Always "toolsift.search.unreadable",
    /// Held requests resumed because Envoy did not deliver their body (no
    /// `allow_on_headers_stop_iteration`).
    SearchHeadersNotHeld: Counter Always "toolsift.search.headers_not_held",
    /// The filter's own time per search round: reading the model's turn, searching, and
    /// building and sending the follow-up (model and network time excluded).
    SearchRoundTimeUs: Histogram Always "toolsift.search.round_time_us",
    /// Model calls of tools that do not exist, answered to the model (search mode).
    SearchUnknownTools: Counter Always "toolsift.search.unknown_tools",
    /// Search loops stopped for more searches than `search.max_searches`.
    SearchStorms: Counter Always "toolsift.search.storms",
    SearchSuggested: Counter Always "toolsift.search.suggested",
    SuggestionsFetched: Counter Always "toolsift.suggestions.fetched",
    SuggestionsFailed: Counter Always "toolsift.suggestions.failed",
    /// Tools shown because the session's memory offered them (`search.memory`).
    SearchRemembered: Counter Always "toolsift.search.remembered",
    /// Under access rules, model answers that could not be read (so not checked) and were
    /// replaced by toolsift's error; and requests refused because their response stream is one
    /// toolsift cannot check (Bedrock's binary event stream, Gemini's JSON-array stream).
    AccessUnchecked: Counter Always "toolsift.access.unchecked",
    AccessUnsupportedStream: Counter Always "toolsift.access.unsupported_stream",
    /// Under access rules, calls of remote MCP connectors' tools seen in model answers: the
    /// provider ran them before toolsift saw them, so they are counted, never stopped.
    AccessConnectorCalls: Counter Always "toolsift.access.connector_calls",
    /// Under access rules, requests on paths toolsift does not recognise.
    AccessUnknownPaths: Counter Always "toolsift.access.unknown_paths",
    /// Of those, the ones refused (`"unknown_paths": "deny"`, enforced).
    AccessUnknownPathsRefused: Counter Always "toolsift.access.unknown_paths.refused",
    /// Tools the loop guard found looping, took out of requests, and noted.
    LoopDetected: Counter Always "toolsift.loop.detected",
    LoopEvicted: Counter Always "toolsift.loop.evicted",
    LoopNoted: Counter Always "toolsift.loop.noted",
    /// Filter mode: calls in the model's latest turn of tools the request does not carry.
    UnknownTools: Counter Always "toolsift.unknown_tools",
    /// Filter mode with `unknown_tools.answer`: made-up calls in the model's answers kept from
    /// the client, follow-ups sent, follow-ups that failed, answers that could not be read.
    UnknownToolsCaught: Counter Always "toolsift.unknown_tools.caught",
    UnknownToolsRounds: Counter Always "toolsift.unknown_tools.rounds",
    UnknownToolsFailed: Counter Always "toolsift.unknown_tools.failed",
    UnknownToolsUnreadable: Counter Always "toolsift.unknown_tools.unreadable",
    /// Shadow ranking ([`crate::shadow`]): requests shadowed; calls of ranked tools in their
    /// answers, kept or missed by the selection they were measured against; answers that
    /// could not be read; the ranks of called tools, shadowed and filtered.
    ShadowRequests: Counter Always "toolsift.shadow.requests",
    ShadowCalls: Counter Always "toolsift.shadow.calls",
    ShadowKept: Counter Always "toolsift.shadow.kept",
    ShadowMissed: Counter Always "toolsift.shadow.missed",
    ShadowUnreadable: Counter Always "toolsift.shadow.unreadable",
    ShadowCallRank: Histogram Always "toolsift.shadow.call_rank",
    FilteredCallRank: Histogram Always "toolsift.filtered.call_rank",
    /// `auto_k` ([`crate::auto_k`]): requests selected with their catalog's own k, with the
    /// pooled k, with `top_k` (too little data); those whose k is capped at `max_k`; the k
    /// each request got; shadowed calls learned, and those the VM's shared data kept out;
    /// ks changed when a period's table was decided; values of another configuration or
    /// layout found in the VM's shared data (ignored and replaced).
    AutoKCalibrated: Counter Always "toolsift.auto_k.calibrated",
    AutoKPooled: Counter Always "toolsift.auto_k.pooled",
    AutoKDefault: Counter Always "toolsift.auto_k.default",
    /// `auto_k.calibration`: requests selected with the fleet's k of their catalog, and with
    /// the fleet's pooled k (their catalog has too few calls there).
    AutoKFleet: Counter Always "toolsift.auto_k.fleet",
    AutoKFleetPooled: Counter Always "toolsift.auto_k.fleet_pooled",
    AutoKCapped: Counter Always "toolsift.auto_k.capped",
    AutoKChosen: Histogram Always "toolsift.auto_k.k",
    AutoKLearned: Counter Always "toolsift.auto_k.learned",
    AutoKLost: Counter Always "toolsift.auto_k.lost",
    AutoKChanges: Counter Always "toolsift.auto_k.changes",
    AutoKForeign: Counter Always "toolsift.auto_k.foreign",
    /// Filter mode: questions the ranking could not read ([`crate::weak_query`]), sent with
    /// what `weak_query.action` keeps instead of being cut to `top_k`.
    WeakQuery: Counter Always "toolsift.weak_query",
    /// `auto_k.beyond`: requests past a capped k sent with `find_tools` for the rest.
    AutoKBeyond: Counter Always "toolsift.auto_k.beyond",
    /// `auto_k.keep`, in thousandths (rounded down; 0 without `auto_k`): the target the share
    /// of shadowed calls kept (`toolsift.shadow.kept` over `.calls`) is held to, beside it in
    /// the same scrape for the dashboard and the alert rules.
    AutoKKeepTargetPermille: Gauge Always "toolsift.auto_k.keep_target_permille",
    /// MCP: `tools/list` answered by the gateway and the tokens it saved, `find_tools`
    /// answered, tools suggested, calls sent, direct calls, calls of unknown tools refused.
    McpToolsList: Counter Mcp "toolsift.mcp.tools_list",
    McpTokensSaved: Counter Mcp "toolsift.mcp.tokens_saved",
    McpFindTools: Counter Mcp "toolsift.mcp.find_tools",
    McpSuggested: Counter Mcp "toolsift.mcp.suggested",
    McpCallTool: Counter Mcp "toolsift.mcp.call_tool",
    McpDirectCalls: Counter Mcp "toolsift.mcp.direct_calls",
    McpUnknownTool: Counter Mcp "toolsift.mcp.unknown_tool",
    /// MCP server catalogs found in the cache, fetched, their pages, fetches that failed.
    McpCatalogHits: Counter Mcp "toolsift.mcp.catalog.hits",
    McpCatalogFetches: Counter Mcp "toolsift.mcp.catalog.fetches",
    McpCatalogPages: Counter Mcp "toolsift.mcp.catalog.pages",
    McpCatalogFailed: Counter Mcp "toolsift.mcp.catalog.failed",
    /// `_tool_gating`: calls answered, calls without a verdict, tools excluded, tools
    /// claimed, claims answered without the model.
    McpGatingCalls: Counter Mcp "toolsift.mcp.gating.calls",
    McpGatingFailed: Counter Mcp "toolsift.mcp.gating.failed",
    McpGatingExcluded: Counter Mcp "toolsift.mcp.gating.excluded",
    McpGatingClaimed: Counter Mcp "toolsift.mcp.gating.claimed",
    McpGatingAnswered: Counter Mcp "toolsift.mcp.gating.answered",
    McpListChanged: Counter Mcp "toolsift.mcp.list_changed",
    McpSearchStorms: Counter Mcp "toolsift.mcp.search_storms",
}

/// One Envoy stat: of a fixed name, or one of a family named per reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stat {
    Fixed(Fixed),
    /// `toolsift.skipped.<reason>`.
    Skipped(Skip),
    /// `toolsift.access.denied.<surface>`.
    Denied(Surface),
    /// `toolsift.embeddings.fallback.<reason>`.
    Fallback(Fallback),
}

impl Stat {
    /// Every stat, in the order of [`Stat::index`].
    pub fn all() -> impl Iterator<Item = Stat> {
        let fixed = Fixed::ALL.iter().map(|&f| Stat::Fixed(f));
        let skipped = Skip::ALL.into_iter().map(Stat::Skipped);
        let denied = Surface::ALL.into_iter().map(Stat::Denied);
        let fallback = Fallback::ALL.into_iter().map(Stat::Fallback);
        fixed.chain(skipped).chain(denied).chain(fallback)
    }

    /// This stat's position in [`Stat::all`]: where the adapter keeps its Envoy id.
    pub fn index(self) -> usize {
        let skipped = Fixed::ALL.len();
        let denied = skipped + Skip::ALL.len();
        let fallback = denied + Surface::ALL.len();
        let (base, at) = match self {
            Stat::Fixed(f) => (0, f as usize),
            Stat::Skipped(s) => (skipped, Skip::ALL.iter().position(|&x| x == s).unwrap_or(0)),
            Stat::Denied(s) => (
                denied,
                Surface::ALL.iter().position(|&x| x == s).unwrap_or(0),
            ),
            Stat::Fallback(f) => (
                fallback,
                Fallback::ALL.iter().position(|&x| x == f).unwrap_or(0),
            ),
        };
        base + at
    }

    pub fn name(self) -> Cow<'static, str> {
        match self {
            Stat::Fixed(f) => Cow::Borrowed(f.name()),
            Stat::Skipped(s) => format!("toolsift.skipped.{}", s.name()).into(),
            Stat::Denied(s) => format!("toolsift.access.denied.{}", s.name()).into(),
            Stat::Fallback(f) => format!("toolsift.embeddings.fallback.{}", f.name()).into(),
        }
    }

    pub fn kind(self) -> Kind {
        match self {
            Stat::Fixed(f) => f.kind(),
            _ => Kind::Counter,
        }
    }

    pub fn group(self) -> Group {
        match self {
            Stat::Fixed(f) => f.group(),
            _ => Group::Always,
        }
    }
}

impl From<Fixed> for Stat {
    fn from(f: Fixed) -> Stat {
        Stat::Fixed(f)
    }
}

/// The gauges a plugin sets once, at configuration: what `config` asks for.
pub fn configured(config: &crate::config::Config) -> Vec<(Stat, u64)> {
    let keep = config.auto_k.as_ref().map_or(0, |a| a.keep_permille());
    vec![(Fixed::AutoKKeepTargetPermille.into(), keep)]
}

/// What one event adds: up to two stats, each with its amount (a histogram's: the value it
/// records).
pub type Counts = [Option<(Stat, u64)>; 2];

/// `n` added to `stat`.
pub fn one(stat: impl Into<Stat>, n: usize) -> Counts {
    [Some((stat.into(), n as u64)), None]
}

/// `a` and `b`, each with its amount.
pub fn two(a: (impl Into<Stat>, u64), b: Option<(impl Into<Stat>, u64)>) -> Counts {
    [Some((a.0.into(), a.1)), b.map(|(s, n)| (s.into(), n))]
}

/// An embeddings call of `inputs` texts (a request's, a search's or an MCP `find_tools`').
pub fn embeddings_call(inputs: usize) -> Counts {
    two(
        (Fixed::EmbeddingsCalls, 1),
        Some((Fixed::EmbeddingsInputs, inputs as u64)),
    )
}

/// What one answer showed shadow ranking: the ranks of the tools it called, and in a shadowed
/// request whether the selection would have kept each.
pub fn shadow(record: &crate::shadow::Record) -> Vec<(Stat, u64)> {
    let mut counts = Vec::new();
    if record.unreadable {
        counts.push((Fixed::ShadowUnreadable.into(), 1));
    }
    let ranks = if record.sampled {
        Fixed::ShadowCallRank
    } else {
        Fixed::FilteredCallRank
    };
    for rank in record.ranked_calls().filter_map(|c| c.rank) {
        counts.push((ranks.into(), rank as u64));
    }
    if record.sampled {
        let calls = record.ranked_calls().count();
        let missed = record.missed();
        counts.push((Fixed::ShadowCalls.into(), calls as u64));
        counts.push((
            Fixed::ShadowKept.into(),
            calls.saturating_sub(missed) as u64,
        ));
        counts.push((Fixed::ShadowMissed.into(), missed as u64));
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stat_has_its_own_index_and_name() {
        let all: Vec<Stat> = Stat::all().collect();
        for (i, stat) in all.iter().enumerate() {
            assert_eq!(stat.index(), i, "{stat:?}");
        }
        let mut names: Vec<String> = all.iter().map(|s| s.name().into_owned()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), all.len());
        assert!(names.iter().all(|n| n.starts_with("toolsift.")));
    }

    #[test]
    fn the_keep_target_is_set_in_thousandths_rounded_down() {
        let target = |json: &str| {
            let config = crate::config::Config::from_json(json.as_bytes()).unwrap();
            let set = configured(&config);
            assert_eq!(set.len(), 1);
            assert_eq!(set[0].0, Stat::Fixed(Fixed::AutoKKeepTargetPermille));
            assert_eq!(set[0].0.kind(), Kind::Gauge);
            set[0].1
        };
        assert_eq!(target(r#"{"top_k":5}"#), 0);
        let auto = |keep: &str| {
            target(&format!(
                r#"{{"top_k":5,"shadow":{{"sample":0.1}},"auto_k":{{"keep":{keep}}}}}"#
            ))
        };
        assert_eq!(auto("0.95"), 950);
        assert_eq!(auto("0.9"), 900);
        assert_eq!(auto("0.999"), 999);
        // Never above the target: a target the selection could not meet would always alert.
        assert_eq!(auto("0.9999"), 999);
        assert_eq!(auto("0.0001"), 0);
    }
}
