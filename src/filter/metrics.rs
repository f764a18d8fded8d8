//! The filter's Envoy stats. Names are fixed and documented in the book
//! (`docs/book/src/reference/metrics.md`); Envoy shows them as `wasmcustom.<name>` in `/stats`
//! and as `<name>` with `_` for `.` in `/stats/prometheus`.

use super::host::{self, HostError, MetricKind};
use crate::access::Surface;
use crate::embeddings::Fallback;
use crate::lifecycle::Counter;
use crate::pipeline::Skip;
use std::time::{Duration, SystemTime};

pub struct Metrics {
    pub requests: u32,
    pub rewritten: u32,
    pub unchanged: u32,
    pub errors: u32,
    pub tools_in: u32,
    pub tools_out: u32,
    pub tokens_saved: u32,
    pub catalog_cache_hits: u32,
    pub catalog_cache_misses: u32,
    pub filter_time_us: u32,
    /// The filter's time per request in each phase, in µs: reading the body from Envoy,
    /// analysing it with a cached catalog or with a new one (assembled from its tools' parts),
    /// hybrid ranking's own work before its embeddings call, handling that call's answer
    /// (reading it, fusing, selecting, writing), and writing the rewritten body back.
    pub phase_read_us: u32,
    pub phase_analyse_us: u32,
    pub phase_assemble_us: u32,
    pub phase_hybrid_us: u32,
    pub phase_answer_us: u32,
    pub phase_write_us: u32,
    /// One counter per [`Skip`], in [`Skip::ALL`] order.
    skipped: Vec<u32>,
    /// Requests ranked with the embeddings, and requests of `ranking: hybrid` ranked by
    /// keyword (a fallback, or a catalog whose vectors are still being fetched).
    pub ranked_hybrid: u32,
    pub ranked_keyword: u32,
    pub embeddings_calls: u32,
    pub embeddings_inputs: u32,
    /// New catalogs larger than `max_batch`, ranked by keyword until all their vectors are in.
    pub embeddings_incomplete: u32,
    /// Tool vectors fetched by background calls.
    pub embeddings_backfilled: u32,
    /// One counter per [`Fallback`], in [`Fallback::ALL`] order.
    fallback: Vec<u32>,
    /// Search mode: requests sent with the meta-tool, requests that carried the provider's
    /// own tool search (untouched), requests search mode cannot serve (Bedrock streams,
    /// Gemini array streams: filtered instead), responses held, streams released at their
    /// first output, follow-ups sent, responses answered after follow-ups, failed follow-ups,
    /// and model turns toolsift could not read (passed on as they were).
    pub search_requests: u32,
    pub search_native: u32,
    /// Requests a `native_search` rule handed to the provider's own tool search.
    pub search_provider: u32,
    /// `find_tools` / `use_tool` queries ranked with embeddings (`ranking: hybrid`).
    pub search_hybrid: u32,
    pub search_unsupported: u32,
    pub search_held: u32,
    pub search_released: u32,
    pub search_rounds: u32,
    pub search_answered: u32,
    pub search_failed: u32,
    pub search_unreadable: u32,
    /// Held requests resumed because Envoy did not deliver their body (no
    /// `allow_on_headers_stop_iteration`).
    pub search_headers_not_held: u32,
    /// The filter's own time per search round: reading the model's turn, searching, and
    /// building and sending the follow-up (model and network time excluded).
    pub search_round_time_us: u32,
    /// Model calls of tools that do not exist, answered to the model (search mode).
    pub search_unknown_tools: u32,
    /// Search loops stopped for more searches than `search.max_searches`.
    pub search_storms: u32,
    pub search_suggested: u32,
    pub suggestions_fetched: u32,
    pub suggestions_failed: u32,
    /// Tools shown because the session's memory offered them (`search.memory`).
    pub search_remembered: u32,
    /// One counter per access [`Surface`], in [`Surface::ALL`] order.
    access_denied: Vec<u32>,
    /// Under access rules, model answers that could not be read (so not checked) and were
    /// replaced by toolsift's error; and requests refused because their response stream is one
    /// toolsift cannot check (Bedrock's binary event stream, Gemini's JSON-array stream).
    pub access_unchecked: u32,
    pub access_unsupported_stream: u32,
    /// Under access rules, calls of remote MCP connectors' tools seen in model answers: the
    /// provider ran them before toolsift saw them, so they are counted, never stopped.
    pub access_connector_calls: u32,
    /// Under access rules, requests on paths toolsift does not recognise (passed, or with
    /// `"unknown_paths": "deny"` answered).
    pub access_unknown_paths: u32,
    /// Tools the loop guard found looping (evicted, or with `report_only` left in).
    pub loop_detected: u32,
    /// Tools the loop guard took out of requests (each request's count added).
    pub loop_evicted: u32,
    /// Guidance notes the loop guard wrote on evicted tools' latest results.
    pub loop_noted: u32,
    /// Filter mode: calls in the model's latest turn of tools the request does not carry.
    pub unknown_tools: u32,
    /// Filter mode with `unknown_tools.answer`: made-up calls in the model's answers kept from
    /// the client (answered to the model, or dropped), follow-ups sent, follow-ups that failed,
    /// and answers that could not be read (passed on as they were).
    pub unknown_tools_caught: u32,
    pub unknown_tools_rounds: u32,
    pub unknown_tools_failed: u32,
    pub unknown_tools_unreadable: u32,
    /// Shadow ranking (`crate::shadow`): requests shadowed; calls of ranked tools in their
    /// answers, kept or missed by the selection they were measured against; answers that
    /// could not be read; the ranks of called tools, shadowed and filtered.
    pub shadow_requests: u32,
    pub shadow_calls: u32,
    pub shadow_kept: u32,
    pub shadow_missed: u32,
    pub shadow_unreadable: u32,
    pub shadow_call_rank: u32,
    pub filtered_call_rank: u32,
}

impl Metrics {
    pub fn define() -> Result<Metrics, HostError> {
        let counter = |name: &str| host::define_metric(MetricKind::Counter, name);
        let histogram = |name: &str| host::define_metric(MetricKind::Histogram, name);
        let skipped = Skip::ALL
            .iter()
            .map(|s| counter(&format!("toolsift.skipped.{}", s.name())))
            .collect::<Result<Vec<_>, _>>()?;
        let access_denied = Surface::ALL
            .iter()
            .map(|s| counter(&format!("toolsift.access.denied.{}", s.name())))
            .collect::<Result<Vec<_>, _>>()?;
        let fallback = Fallback::ALL
            .iter()
            .map(|f| counter(&format!("toolsift.embeddings.fallback.{}", f.name())))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Metrics {
            ranked_hybrid: counter("toolsift.ranking.hybrid")?,
            ranked_keyword: counter("toolsift.ranking.keyword")?,
            embeddings_calls: counter("toolsift.embeddings.calls")?,
            embeddings_inputs: counter("toolsift.embeddings.inputs")?,
            embeddings_incomplete: counter("toolsift.embeddings.incomplete")?,
            embeddings_backfilled: counter("toolsift.embeddings.backfilled")?,
            fallback,
            search_requests: counter("toolsift.search.requests")?,
            search_native: counter("toolsift.search.native")?,
            search_provider: counter("toolsift.search.provider")?,
            search_hybrid: counter("toolsift.search.hybrid")?,
            search_unsupported: counter("toolsift.search.unsupported")?,
            search_held: counter("toolsift.search.held")?,
            search_released: counter("toolsift.search.released")?,
            search_rounds: counter("toolsift.search.rounds")?,
            search_answered: counter("toolsift.search.answered")?,
            search_failed: counter("toolsift.search.failed")?,
            search_unreadable: counter("toolsift.search.unreadable")?,
            search_headers_not_held: counter("toolsift.search.headers_not_held")?,
            search_round_time_us: histogram("toolsift.search.round_time_us")?,
            search_unknown_tools: counter("toolsift.search.unknown_tools")?,
            search_storms: counter("toolsift.search.storms")?,
            search_suggested: counter("toolsift.search.suggested")?,
            suggestions_fetched: counter("toolsift.suggestions.fetched")?,
            suggestions_failed: counter("toolsift.suggestions.failed")?,
            search_remembered: counter("toolsift.search.remembered")?,
            shadow_requests: counter("toolsift.shadow.requests")?,
            shadow_calls: counter("toolsift.shadow.calls")?,
            shadow_kept: counter("toolsift.shadow.kept")?,
            shadow_missed: counter("toolsift.shadow.missed")?,
            shadow_unreadable: counter("toolsift.shadow.unreadable")?,
            shadow_call_rank: histogram("toolsift.shadow.call_rank")?,
            filtered_call_rank: histogram("toolsift.filtered.call_rank")?,
            requests: counter("toolsift.requests")?,
            rewritten: counter("toolsift.rewritten")?,
            unchanged: counter("toolsift.unchanged")?,
            errors: counter("toolsift.errors")?,
            tools_in: counter("toolsift.tools_in")?,
            tools_out: counter("toolsift.tools_out")?,
            tokens_saved: counter("toolsift.tokens_saved")?,
            catalog_cache_hits: counter("toolsift.catalog_cache.hits")?,
            catalog_cache_misses: counter("toolsift.catalog_cache.misses")?,
            filter_time_us: histogram("toolsift.filter_time_us")?,
            phase_read_us: histogram("toolsift.phase.read_us")?,
            phase_analyse_us: histogram("toolsift.phase.analyse_us")?,
            phase_assemble_us: histogram("toolsift.phase.assemble_us")?,
            phase_hybrid_us: histogram("toolsift.phase.hybrid_us")?,
            phase_answer_us: histogram("toolsift.phase.answer_us")?,
            phase_write_us: histogram("toolsift.phase.write_us")?,
            skipped,
            access_denied,
            access_unchecked: counter("toolsift.access.unchecked")?,
            access_unsupported_stream: counter("toolsift.access.unsupported_stream")?,
            access_connector_calls: counter("toolsift.access.connector_calls")?,
            access_unknown_paths: counter("toolsift.access.unknown_paths")?,
            loop_detected: counter("toolsift.loop.detected")?,
            loop_evicted: counter("toolsift.loop.evicted")?,
            loop_noted: counter("toolsift.loop.noted")?,
            unknown_tools: counter("toolsift.unknown_tools")?,
            unknown_tools_caught: counter("toolsift.unknown_tools.caught")?,
            unknown_tools_rounds: counter("toolsift.unknown_tools.rounds")?,
            unknown_tools_failed: counter("toolsift.unknown_tools.failed")?,
            unknown_tools_unreadable: counter("toolsift.unknown_tools.unreadable")?,
        })
    }

    /// Counts what one answer showed shadow ranking: the ranks of the tools it called, and in
    /// a shadowed request whether the selection would have kept each.
    pub fn shadow(&self, record: &crate::shadow::Record) {
        if record.unreadable {
            self.add(self.shadow_unreadable, 1);
        }
        let ranks = if record.sampled {
            self.shadow_call_rank
        } else {
            self.filtered_call_rank
        };
        for rank in record.ranked_calls().filter_map(|c| c.rank) {
            self.record(ranks, rank as u64);
        }
        if record.sampled {
            let calls = record.ranked_calls().count();
            let missed = record.missed();
            self.add(self.shadow_calls, calls);
            self.add(self.shadow_kept, calls.saturating_sub(missed));
            self.add(self.shadow_missed, missed);
        }
    }

    /// Counts `n` denials on `surface`.
    pub fn denied(&self, surface: Surface, n: usize) {
        let position = Surface::ALL.iter().position(|s| *s == surface);
        if let Some(&metric) = position.and_then(|p| self.access_denied.get(p)) {
            self.add(metric, n);
        }
    }

    /// Adds to a counter. A failed stats call must never fail a request, so errors are only
    /// logged.
    pub fn add(&self, metric: u32, n: usize) {
        if n == 0 {
            return;
        }
        if let Err(status) = host::increment_metric(metric, n as u64) {
            log::debug!("increment_metric({metric}) failed: {status:?}");
        }
    }

    pub fn record(&self, metric: u32, value: u64) {
        if let Err(status) = host::record_metric(metric, value) {
            log::debug!("record_metric({metric}) failed: {status:?}");
        }
    }

    /// Records in the histogram `metric` the µs since `start` (from [`now`]), and returns the
    /// time it read: the start of the next phase, without another host call.
    pub fn since(&self, metric: u32, start: Option<SystemTime>) -> Option<SystemTime> {
        let end = now();
        if let (Some(start), Some(end)) = (start, end) {
            let micros = end
                .duration_since(start)
                .unwrap_or(Duration::ZERO)
                .as_micros();
            self.record(metric, u64::try_from(micros).unwrap_or(u64::MAX));
        }
        end
    }

    pub fn fallback(&self, reason: Fallback) {
        let position = Fallback::ALL.iter().position(|f| *f == reason);
        if let Some(&metric) = position.and_then(|p| self.fallback.get(p)) {
            self.add(metric, 1);
        }
    }

    /// Counts what the core asked for.
    pub fn count(&self, counter: Counter, n: usize) {
        let metric = match counter {
            Counter::Skipped(reason) => return self.skipped(reason),
            Counter::SearchNative => self.search_native,
            Counter::SearchProvider => self.search_provider,
            Counter::SearchRequests => self.search_requests,
            Counter::SearchRemembered => self.search_remembered,
            Counter::ToolsIn => self.tools_in,
            Counter::ToolsOut => self.tools_out,
            Counter::SearchUnsupported => self.search_unsupported,
            Counter::AccessUnsupportedStream => self.access_unsupported_stream,
            Counter::AccessUnknownPaths => self.access_unknown_paths,
            Counter::Denied(surface) => return self.denied(surface, n),
            Counter::CatalogCacheHits => self.catalog_cache_hits,
            Counter::CatalogCacheMisses => self.catalog_cache_misses,
            Counter::Rewritten => self.rewritten,
            Counter::Unchanged => self.unchanged,
            Counter::TokensSaved => self.tokens_saved,
            Counter::RankedHybrid => self.ranked_hybrid,
            Counter::RankedKeyword => self.ranked_keyword,
            Counter::Fallback(reason) => return self.fallback(reason),
            Counter::EmbeddingsIncomplete => self.embeddings_incomplete,
            Counter::ShadowRequests => self.shadow_requests,
            Counter::LoopDetected => self.loop_detected,
            Counter::LoopEvicted => self.loop_evicted,
            Counter::LoopNoted => self.loop_noted,
            Counter::UnknownTools => self.unknown_tools,
            // Without the MCP stats (no `gating` section) nothing gates: nothing to count.
            Counter::GatingCalls
            | Counter::GatingFailed
            | Counter::GatingExcluded
            | Counter::GatingClaimed
            | Counter::GatingAnswered => return,
        };
        self.add(metric, n);
    }

    pub fn skipped(&self, reason: Skip) {
        let position = Skip::ALL.iter().position(|s| *s == reason);
        if let Some(&metric) = position.and_then(|p| self.skipped.get(p)) {
            self.add(metric, 1);
        }
        if reason.is_error() {
            self.add(self.errors, 1);
        }
    }
}

/// Envoy's clock, for the filter's time histograms; `None` if the host cannot tell.
pub use super::host::now;

/// The MCP stats (docs/book/src/reference/metrics.md lists them).
pub struct McpMetrics {
    pub tools_list: u32,
    pub tokens_saved: u32,
    pub find_tools: u32,
    pub suggested: u32,
    pub call_tool: u32,
    pub direct: u32,
    pub unknown: u32,
    pub catalog_hits: u32,
    pub catalog_fetches: u32,
    pub catalog_pages: u32,
    pub catalog_failed: u32,
    pub gating_calls: u32,
    pub gating_failed: u32,
    pub gating_excluded: u32,
    pub gating_claimed: u32,
    pub gating_answered: u32,
    pub list_changed: u32,
    pub search_storms: u32,
}

impl McpMetrics {
    /// The stat of one of `_tool_gating`'s counters; `None` for the others.
    pub fn gating(&self, counter: Counter) -> Option<u32> {
        match counter {
            Counter::GatingCalls => Some(self.gating_calls),
            Counter::GatingFailed => Some(self.gating_failed),
            Counter::GatingExcluded => Some(self.gating_excluded),
            Counter::GatingClaimed => Some(self.gating_claimed),
            Counter::GatingAnswered => Some(self.gating_answered),
            _ => None,
        }
    }

    pub fn define() -> Result<McpMetrics, host::HostError> {
        let counter = |name: &str| host::define_metric(MetricKind::Counter, name);
        Ok(McpMetrics {
            tools_list: counter("toolsift.mcp.tools_list")?,
            tokens_saved: counter("toolsift.mcp.tokens_saved")?,
            find_tools: counter("toolsift.mcp.find_tools")?,
            suggested: counter("toolsift.mcp.suggested")?,
            call_tool: counter("toolsift.mcp.call_tool")?,
            direct: counter("toolsift.mcp.direct_calls")?,
            unknown: counter("toolsift.mcp.unknown_tool")?,
            catalog_hits: counter("toolsift.mcp.catalog.hits")?,
            catalog_fetches: counter("toolsift.mcp.catalog.fetches")?,
            catalog_pages: counter("toolsift.mcp.catalog.pages")?,
            catalog_failed: counter("toolsift.mcp.catalog.failed")?,
            gating_calls: counter("toolsift.mcp.gating.calls")?,
            gating_failed: counter("toolsift.mcp.gating.failed")?,
            gating_excluded: counter("toolsift.mcp.gating.excluded")?,
            gating_claimed: counter("toolsift.mcp.gating.claimed")?,
            gating_answered: counter("toolsift.mcp.gating.answered")?,
            list_changed: counter("toolsift.mcp.list_changed")?,
            search_storms: counter("toolsift.mcp.search_storms")?,
        })
    }
}
