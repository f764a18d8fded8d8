//! One HTTP request through the filter.
//!
//! Headers phase: decide whether the request is ours (POST to an LLM path, JSON, not
//! compressed, not too large) and, if so, drop `content-length` (the body may shrink and Envoy
//! does not fix the header; the upstream would wait for bytes that never come) and buffer.
//! Body phase: at the end of the stream, run the pipeline and replace the body. With hybrid
//! ranking, a request whose vectors are not all cached waits (paused) for one embeddings call,
//! at most `timeout_ms`, and is finished in `on_http_call_response` (by keyword if the call
//! failed). Response headers: report what was done.

use super::{Shared, vectors};
use crate::config::OnError;
use crate::dialect::Dialect;
use crate::embeddings::{Fallback, Gathered, Slot, Source, parse_response};
use crate::pipeline::{
    Analysis, RequestHeaders, Skip, Skipped, body_text, error_body, header_value,
};
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::{Action, BufferType, MapType};
use std::rc::Rc;
use std::time::{Duration, SystemTime};

pub struct Filter {
    shared: Option<Rc<Shared>>,
    /// Set while the request body is being buffered for us.
    buffering: Option<Dialect>,
    /// What happened, for the response headers.
    outcome: Option<Outcome>,
    /// A request waiting for its embeddings call.
    waiting: Option<Waiting>,
}

enum Outcome {
    Filtered {
        kept: usize,
        total: usize,
        ranked: Ranked,
        /// Kept tools in rank order (with their channels when hybrid), for the debug header.
        kept_names: String,
    },
    Skipped(Skipped),
}

/// How a request was ranked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ranked {
    /// `ranking: keyword`.
    Keyword,
    Hybrid,
    /// `ranking: hybrid`, ranked by keyword because the embeddings call failed.
    Fallback(Fallback),
    /// `ranking: hybrid`, ranked by keyword while a new catalog's vectors come in.
    Incomplete,
}

impl Ranked {
    /// What the `x-toolsift` header adds: nothing for keyword ranking.
    fn header_suffix(self) -> String {
        match self {
            Ranked::Keyword => String::new(),
            Ranked::Hybrid => " ranking=hybrid".to_owned(),
            Ranked::Fallback(f) => format!(" ranking=keyword fallback={}", f.name()),
            Ranked::Incomplete => " ranking=keyword fallback=incomplete".to_owned(),
        }
    }
}

/// Everything a paused request needs when its embeddings arrive.
struct Waiting {
    token: u32,
    analysis: Analysis,
    gathered: Gathered,
    slots: Vec<Slot>,
    body: Vec<u8>,
}

/// What the body phase did.
enum Step {
    Done,
    /// An embeddings call is out; the request stays paused until it answers.
    Waiting,
}

impl Filter {
    pub fn new(shared: Option<Rc<Shared>>) -> Filter {
        Filter {
            shared,
            buffering: None,
            outcome: None,
            waiting: None,
        }
    }

    /// Reads the request headers the screening needs and screens them.
    fn screen_headers(&self, shared: &Shared, end_of_stream: bool) -> Result<Dialect, Skip> {
        let header = |name: &str| {
            hostcalls::get_map_value(MapType::HttpRequestHeaders, name).map_err(|_| Skip::Internal)
        };
        let headers = RequestHeaders {
            method: header(":method")?,
            path: header(":path")?,
            content_encoding: header("content-encoding")?,
            content_type: header("content-type")?,
            content_length: header("content-length")?,
            end_of_stream,
        };
        let engine = shared.engine.try_borrow().map_err(|_| Skip::Internal)?;
        headers.screen(&engine.config)
    }

    /// Runs the pipeline over the buffered body and replaces it. Returns the action for the
    /// body or trailers callback.
    fn finish(&mut self, shared: &Shared, dialect: Dialect, body_size: usize) -> Action {
        self.buffering = None;
        let started = now();
        let result = self.filter_body(shared, dialect, body_size);
        if let (Some(start), Some(end)) = (started, now()) {
            let micros = end
                .duration_since(start)
                .unwrap_or(Duration::ZERO)
                .as_micros();
            shared.metrics.record(
                shared.metrics.filter_time_us,
                u64::try_from(micros).unwrap_or(u64::MAX),
            );
        }
        match result {
            Ok(Step::Done) => Action::Continue,
            Ok(Step::Waiting) => Action::Pause,
            Err(skipped) => self.skip(shared, skipped),
        }
    }

    fn filter_body(
        &mut self,
        shared: &Shared,
        dialect: Dialect,
        body_size: usize,
    ) -> Result<Step, Skipped> {
        let body = hostcalls::get_buffer(BufferType::HttpRequestBody, 0, body_size)
            .map_err(|_| Skip::Internal)?
            .unwrap_or_default();
        let text = body_text(&body)?;
        let mut engine = shared.engine.try_borrow_mut().map_err(|_| Skip::Internal)?;
        let mut analysis = engine.analyse(dialect, text)?;
        let metrics = &shared.metrics;
        metrics.add(
            if analysis.cache_hit {
                metrics.catalog_cache_hits
            } else {
                metrics.catalog_cache_misses
            },
            1,
        );
        let config = &engine.config;
        let ranked = match shared.hybrid(config) {
            Some((source, e)) => match start_hybrid(shared, &source, config, e, &mut analysis) {
                Start::Ranked(ranked) => ranked,
                Start::Call(token, gathered, slots) => {
                    drop(engine);
                    self.waiting = Some(Waiting {
                        token,
                        analysis,
                        gathered,
                        slots,
                        body,
                    });
                    return Ok(Step::Waiting);
                }
            },
            None => Ranked::Keyword,
        };
        let debug = config.debug;
        drop(engine);
        self.apply(shared, debug, &analysis, text, body.len(), ranked)?;
        Ok(Step::Done)
    }

    /// Writes the selected tools into the body and records what was done.
    fn apply(
        &mut self,
        shared: &Shared,
        debug: bool,
        analysis: &Analysis,
        text: &str,
        body_len: usize,
        ranked: Ranked,
    ) -> Result<(), Skipped> {
        let metrics = &shared.metrics;
        let (kept, total) = (analysis.kept(), analysis.total());
        if let Some(rewritten) = analysis.rewrite(text) {
            hostcalls::set_buffer(
                BufferType::HttpRequestBody,
                0,
                body_len,
                rewritten.as_bytes(),
            )
            .map_err(|_| Skip::Internal)?;
            metrics.add(metrics.rewritten, 1);
        } else {
            metrics.add(metrics.unchanged, 1);
        }
        let (tokens_before, tokens_after) = analysis.tokens_before_after();
        metrics.add(metrics.tools_in, total);
        metrics.add(metrics.tools_out, kept);
        metrics.add(
            metrics.tokens_saved,
            tokens_before.saturating_sub(tokens_after),
        );
        match ranked {
            Ranked::Keyword => {}
            Ranked::Hybrid => metrics.add(metrics.ranked_hybrid, 1),
            Ranked::Fallback(reason) => {
                metrics.add(metrics.ranked_keyword, 1);
                metrics.fallback(reason);
            }
            Ranked::Incomplete => {
                metrics.add(metrics.ranked_keyword, 1);
                metrics.add(metrics.embeddings_incomplete, 1);
            }
        }
        // Prompts stay out of logs above debug level.
        log::debug!(
            "toolsift: {} query={:?} kept {kept}/{total} catalog_cache_hit={} ranked={ranked:?}",
            analysis.dialect,
            analysis.query,
            analysis.cache_hit
        );
        let kept_names = if debug {
            analysis.explain_kept()
        } else {
            String::new()
        };
        self.outcome = Some(Outcome::Filtered {
            kept,
            total,
            ranked,
            kept_names,
        });
        Ok(())
    }

    /// The embeddings call answered (or Envoy gave up on it): rank with what it brought, or by
    /// keyword, finish the body, and let the request go on.
    fn resume(&mut self, shared: &Shared, waiting: Waiting, body_size: usize) -> Action {
        let Waiting {
            mut analysis,
            mut gathered,
            slots,
            body,
            ..
        } = waiting;
        let (debug, ranked) = {
            let Ok(engine) = shared.engine.try_borrow() else {
                return self.skip(shared, Skip::Internal.into());
            };
            let config = &engine.config;
            let ranked = match shared.hybrid(config) {
                Some((source, e)) => {
                    let ranked = rank_with_answer(
                        &source,
                        config,
                        e,
                        &mut analysis,
                        &mut gathered,
                        &slots,
                        body_size,
                    );
                    if ranked == Ranked::Fallback(Fallback::Timeout) {
                        // Too many tool texts to embed within timeout_ms: the root context
                        // fetches them without a deadline while requests go on by keyword.
                        let had_tools = slots.iter().any(|s| matches!(s, Slot::Tool(_)));
                        if let (true, Ok(mut backfill)) =
                            (had_tools, shared.backfill.try_borrow_mut())
                        {
                            backfill.queue(&analysis.catalog, gathered.missing_tools.clone());
                        }
                    }
                    ranked
                }
                None => Ranked::Keyword,
            };
            (config.debug, ranked)
        };
        let result = body_text(&body)
            .and_then(|text| self.apply(shared, debug, &analysis, text, body.len(), ranked));
        match result {
            Ok(()) => Action::Continue,
            Err(skipped) => self.skip(shared, skipped),
        }
    }

    /// Lets a request through untouched, or answers it with a 400 under `on_error: reject`.
    fn skip(&mut self, shared: &Shared, skipped: Skipped) -> Action {
        self.buffering = None;
        let metrics = &shared.metrics;
        metrics.skipped(skipped.reason);
        if let Some(n) = skipped.tools {
            metrics.add(metrics.tools_in, n);
            metrics.add(metrics.tools_out, n);
        }
        if skipped.reason != Skip::NotLlm {
            self.outcome = Some(Outcome::Skipped(skipped));
        }
        let reject = skipped.reason.is_error()
            && shared
                .engine
                .try_borrow()
                .is_ok_and(|e| e.config.on_error == OnError::Reject);
        if !reject {
            return Action::Continue;
        }
        let body = error_body(skipped.reason);
        // No x-toolsift here: Envoy runs the local reply through on_http_response_headers,
        // which adds it (once) like on any other response.
        let headers = vec![("content-type", "application/json")];
        match hostcalls::send_http_response(400, headers, Some(body.as_bytes())) {
            // The local reply ends the stream; nothing more goes upstream.
            Ok(()) => Action::Pause,
            Err(status) => {
                log::warn!("cannot send the rejection: {status:?}");
                Action::Continue
            }
        }
    }
}

impl Filter {
    fn header_value(&self) -> String {
        match &self.outcome {
            Some(Outcome::Filtered {
                kept,
                total,
                ranked,
                ..
            }) => header_value(*kept, *total, None) + &ranked.header_suffix(),
            Some(Outcome::Skipped(skipped)) => {
                let n = skipped.tools;
                header_value(n.unwrap_or(0), n.unwrap_or(0), Some(skipped))
            }
            None => String::new(),
        }
    }
}

/// How a hybrid-ranked request starts.
enum Start {
    /// Ranked already: every vector was known, or it goes on by keyword (and why).
    Ranked(Ranked),
    /// An embeddings call is out (its token), for these slots of what was gathered.
    Call(u32, Gathered, Vec<Slot>),
}

/// Ranks `analysis` with the embeddings if every vector is known; otherwise sends the call for
/// the missing ones.
fn start_hybrid(
    shared: &Shared,
    source: &Source<'_, vectors::SharedData>,
    config: &crate::config::Config,
    e: &crate::config::Embeddings,
    analysis: &mut Analysis,
) -> Start {
    let gathered = source.gather(&analysis.catalog, &analysis.query);
    if let Some((query, tools)) = gathered.complete() {
        analysis.rank_hybrid(config, &query, &tools);
        return Start::Ranked(Ranked::Hybrid);
    }
    let (slots, inputs) = gathered.plan(&analysis.catalog, e.max_batch);
    if inputs.is_empty() {
        return Start::Ranked(if analysis.catalog.fetching() {
            // The question is known; the tools are still coming in the background.
            Ranked::Incomplete
        } else {
            // Everything is known but the sizes disagree: cached under another model.
            Ranked::Fallback(Fallback::Dimensions)
        });
    }
    let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
    let timeout = Duration::from_millis(e.timeout_ms as u64);
    match vectors::dispatch(e, &refs, timeout) {
        Ok(token) => {
            let metrics = &shared.metrics;
            metrics.add(metrics.embeddings_calls, 1);
            metrics.add(metrics.embeddings_inputs, inputs.len());
            Start::Call(token, gathered, slots)
        }
        Err(status) => {
            log::debug!("embeddings call to {} failed: {status:?}", e.cluster);
            Start::Ranked(Ranked::Fallback(Fallback::Dispatch))
        }
    }
}

/// The vectors of the embeddings answer of the current `on_http_call_response`, or why there
/// are none.
pub(super) fn read_answer(
    body_size: usize,
    inputs: usize,
    dimensions: Option<usize>,
) -> Result<Vec<Vec<f32>>, Fallback> {
    let status = hostcalls::get_map_value(MapType::HttpCallResponseHeaders, ":status")
        .ok()
        .flatten()
        .and_then(|s| s.parse::<u16>().ok());
    if let Some(reason) = Fallback::of_status(status) {
        return Err(reason);
    }
    let answer = hostcalls::get_buffer(BufferType::HttpCallResponseBody, 0, body_size)
        .ok()
        .flatten()
        .unwrap_or_default();
    parse_response(&answer, inputs, dimensions)
}

/// Reads the embeddings answer of the current `on_http_call_response` and ranks with it.
fn rank_with_answer(
    source: &Source<'_, vectors::SharedData>,
    config: &crate::config::Config,
    e: &crate::config::Embeddings,
    analysis: &mut Analysis,
    gathered: &mut Gathered,
    slots: &[Slot],
    body_size: usize,
) -> Ranked {
    // Vectors must match the configured size, or the size of the ones already known: a
    // wrong-sized answer is never cached.
    let expected = e.dimensions.or_else(|| gathered.known_dimensions());
    let vectors = match read_answer(body_size, slots.len(), expected) {
        Ok(vectors) => vectors,
        Err(reason) => return Ranked::Fallback(reason),
    };
    source.fill(&analysis.catalog, gathered, slots, vectors);
    if !gathered.missing_tools.is_empty() {
        return Ranked::Incomplete;
    }
    match gathered.complete() {
        Some((query, tools)) => {
            analysis.rank_hybrid(config, &query, &tools);
            Ranked::Hybrid
        }
        None => Ranked::Fallback(Fallback::Dimensions),
    }
}

impl Context for Filter {
    fn on_http_call_response(
        &mut self,
        token_id: u32,
        _num_headers: usize,
        body_size: usize,
        _num_trailers: usize,
    ) {
        let Some(shared) = self.shared.clone() else {
            return;
        };
        let Some(waiting) = self.waiting.take_if(|w| w.token == token_id) else {
            log::debug!("unexpected http call response {token_id}");
            return;
        };
        if self.resume(&shared, waiting, body_size) == Action::Continue {
            if let Err(status) = hostcalls::resume_http_request() {
                log::warn!("cannot resume the request: {status:?}");
            }
        }
    }
}

impl HttpContext for Filter {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        let Some(shared) = self.shared.clone() else {
            return Action::Continue;
        };
        shared.metrics.add(shared.metrics.requests, 1);
        match self.screen_headers(&shared, end_of_stream) {
            Ok(dialect) => {
                if let Err(status) =
                    hostcalls::set_map_value(MapType::HttpRequestHeaders, "content-length", None)
                {
                    log::warn!("cannot remove content-length: {status:?}");
                    return self.skip(&shared, Skip::Internal.into());
                }
                self.buffering = Some(dialect);
                // Continue, never Pause, from the headers phase: pausing here stalls the
                // request until the idle timeout. The body callbacks do the buffering.
                Action::Continue
            }
            Err(reason) => self.skip(&shared, reason.into()),
        }
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        let (Some(shared), Some(dialect)) = (self.shared.clone(), self.buffering) else {
            return Action::Continue;
        };
        // `body_size` is the size of everything buffered so far, not of this chunk.
        let too_large = shared
            .engine
            .try_borrow()
            .map_or(true, |e| body_size > e.config.max_body_bytes);
        if too_large {
            // Continue releases what was buffered and streams the rest through.
            return self.skip(&shared, Skip::TooLarge.into());
        }
        if !end_of_stream {
            return Action::Pause;
        }
        self.finish(&shared, dialect, body_size)
    }

    fn on_http_request_trailers(&mut self, _num_trailers: usize) -> Action {
        // With trailers (HTTP/2, gRPC-web), the body callback never sees end_of_stream.
        let (Some(shared), Some(dialect)) = (self.shared.clone(), self.buffering) else {
            return Action::Continue;
        };
        self.finish(&shared, dialect, usize::MAX)
    }

    fn on_http_response_headers(&mut self, _num_headers: usize, _end_of_stream: bool) -> Action {
        let Some(shared) = self.shared.as_ref() else {
            return Action::Continue;
        };
        let Ok(engine) = shared.engine.try_borrow() else {
            return Action::Continue;
        };
        if !engine.config.response_header || self.outcome.is_none() {
            return Action::Continue;
        }
        let value = self.header_value();
        add_response_header("x-toolsift", &value);
        if let (true, Some(Outcome::Filtered { kept_names, .. })) =
            (engine.config.debug, &self.outcome)
        {
            add_response_header("x-toolsift-tools", kept_names);
        }
        Action::Continue
    }
}

fn add_response_header(name: &str, value: &str) {
    if let Err(status) = hostcalls::add_map_value(MapType::HttpResponseHeaders, name, value) {
        log::debug!("cannot add {name}: {status:?}");
    }
}

fn now() -> Option<SystemTime> {
    hostcalls::get_current_time().ok()
}
