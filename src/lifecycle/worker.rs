//! What every request on a worker shares ([`Shared`], built once when Envoy hands over the
//! configuration), and the worker's own events: its tick and the answers of the calls it
//! sends itself (a new catalog's tool vectors fetched in the background, the suggestion
//! server's `tools/list`). The adapter's root context only hands them over.

use super::hybrid::Waiting;
use super::proxy::{Proxy, Status};
use crate::config::Config;
use crate::embeddings::{BackfillQueue, SharedBytes, VectorCache};
use crate::mcp::catalog::CatalogCache;
use crate::mcp::exchange::CallAnswer;
use crate::mcp::suggestions::{Refresh, RefreshStep};
use crate::pipeline::Engine;
use crate::rank::Catalog;
use crate::search::hold::Watchdog;
use crate::shadow::Sampler;
use crate::stats::{Fixed, Stat};
use crate::suggestions::SuggestionServer;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

/// How often the tick looks whether a suggestion server's fetch is due.
const SUGGESTIONS_TICK: Duration = Duration::from_secs(1);

/// How soon the tick comes when background embeddings calls wait to be sent.
const BACKFILL_TICK: Duration = Duration::from_millis(10);

/// How long a background call may take to embed a new catalog's tools: no request waits for
/// it, so it may take as long as a slow model needs.
pub const BACKGROUND_TIMEOUT: Duration = Duration::from_secs(60);

/// What every request on a worker shares: built once, never cloned.
pub struct Shared<S> {
    pub engine: RefCell<Engine>,
    /// Hybrid ranking's vector cache (shared by every worker) and the service's identity in
    /// its keys; `None` with keyword ranking.
    pub vectors: Option<(VectorCache<S>, String)>,
    /// New catalogs' tool vectors being fetched on the worker's ticks.
    pub backfill: RefCell<BackfillQueue>,
    /// Search mode's held request headers, and whether Envoy lets them be held.
    pub watchdog: RefCell<Watchdog>,
    /// MCP routes: this worker's server catalogs.
    pub mcp_cache: RefCell<CatalogCache>,
    /// `suggestions.mcp`: when this worker fetches the suggestion server's list next.
    pub suggestions: RefCell<Option<Refresh>>,
    /// `shadow`: which requests this worker shadows.
    pub sampler: RefCell<Sampler>,
    /// Under access rules: the audit, shadow and per-rule counters.
    pub access: Option<super::audit::AccessStats>,
}

/// The log level a configuration asks for.
pub fn log_level(config: &Config) -> log::LevelFilter {
    if config.debug {
        log::LevelFilter::Debug
    } else {
        log::LevelFilter::Info
    }
}

impl<S: SharedBytes> Shared<S> {
    /// A worker for `config`, its vectors in `store`, its access rules' counters defined. Its
    /// shadow sample draws from Envoy's clock and `worker_id`, so that workers started in the
    /// same instant draw apart. With a suggestion server, the tick starts: clusters are not
    /// ready before, so the first fetch goes on the first tick.
    pub fn new<P: Proxy>(
        proxy: &P,
        config: Config,
        store: S,
        worker_id: u32,
    ) -> Result<Shared<S>, Status> {
        let policy = config.policy().ok().flatten();
        let access = match policy.as_ref() {
            Some(policy) => Some(super::audit::AccessStats::define(proxy, policy)?),
            None => None,
        };
        log::info!(
            "configured: top_k={} min_tools={} ranking={:?}",
            config.top_k,
            config.min_tools,
            config.ranking
        );
        // What the configuration asks for, as gauges: set here once, never per request.
        for (stat, value) in crate::stats::configured(&config) {
            proxy.count(stat, value);
        }
        let vectors = super::hybrid::worker_vectors(&config, store);
        let refresh = suggestion_server(&config).map(Refresh::new);
        if refresh.is_some() {
            if let Err(status) = proxy.set_tick_period(SUGGESTIONS_TICK) {
                log::warn!("suggestions: cannot set the tick period: {status:?}");
            }
        }
        let nanos = proxy.since_epoch().as_nanos() as u64;
        Ok(Shared {
            mcp_cache: RefCell::new(CatalogCache::new(
                config.mcp.as_ref().map_or(0, |m| m.cache_bytes),
            )),
            suggestions: RefCell::new(refresh),
            engine: RefCell::new(Engine::new(config)),
            vectors,
            backfill: RefCell::default(),
            watchdog: RefCell::default(),
            sampler: RefCell::new(Sampler::new(nanos ^ (u64::from(worker_id) << 32))),
            access,
        })
    }

    /// What the body phase reads of this worker.
    pub fn worker(&self) -> super::Worker<'_, S> {
        super::Worker {
            engine: &self.engine,
            vectors: self.vectors.as_ref(),
        }
    }

    /// The worker's tick: sends the background calls requests queued and a due suggestion
    /// fetch, and sets the next tick (only while held requests are watched or a suggestion
    /// server is fetched: a request that queues background calls sets its own). Returns the
    /// held requests whose body has not come, for the adapter to resume: Envoy lacks
    /// `allow_on_headers_stop_iteration`, and they would hang.
    pub fn on_tick<P: Proxy>(&self, proxy: &P) -> Vec<u32> {
        self.send_backfill(proxy);
        let stalled = self.stalled(proxy);
        self.tick_suggestions(proxy);
        let watching = self.watchdog.try_borrow().is_ok_and(|w| w.watching());
        let fetching = self.suggestions.try_borrow().is_ok_and(|r| r.is_some());
        let period = if watching {
            Duration::from_millis(crate::search::hold::TICK_MS)
        } else if fetching {
            SUGGESTIONS_TICK
        } else {
            Duration::ZERO
        };
        if let Err(status) = proxy.set_tick_period(period) {
            log::debug!("cannot set the tick period: {status:?}");
        }
        stalled
    }

    /// The answer of a call the worker sent (`token`); false when it is not one of its own.
    pub fn on_call<P: Proxy>(
        &self,
        proxy: &P,
        token: u32,
        answer: impl Fn() -> CallAnswer,
    ) -> bool {
        self.suggestions_answered(proxy, token, &answer) || self.backfilled(proxy, token, &answer)
    }

    /// A new catalog's tools that a request could not get vectors for within `timeout_ms`:
    /// fetched on the worker's ticks, with [`BACKGROUND_TIMEOUT`].
    pub fn queue_backfill<P: Proxy>(&self, proxy: &P, catalog: &Rc<Catalog>, entries: Vec<usize>) {
        let queued = self
            .backfill
            .try_borrow_mut()
            .is_ok_and(|mut b| b.queue(catalog, entries));
        if queued {
            backfill_tick(proxy);
        }
    }

    /// Sends what the caps allow, `max_batch` tools per call. The tick stops unless something
    /// else needs it: the next one comes when a call answers and frees a slot.
    fn send_backfill<P: Proxy>(&self, proxy: &P) {
        let (Ok(engine), Ok(mut backfill)) =
            (self.engine.try_borrow(), self.backfill.try_borrow_mut())
        else {
            return;
        };
        let Some((source, e)) = super::hybrid::source(self.vectors.as_ref(), &engine.config) else {
            return;
        };
        let (calls, inputs) =
            backfill.send(&source, e.max_background_calls, e.max_batch, |texts| {
                super::hybrid::dispatch(proxy, e, texts, BACKGROUND_TIMEOUT, Waiting::Nobody)
                    .inspect_err(|status| {
                        log::debug!("background embeddings call failed: {status:?}");
                    })
                    .ok()
            });
        proxy.count(Fixed::EmbeddingsCalls.into(), calls as u64);
        proxy.count(Fixed::EmbeddingsInputs.into(), inputs as u64);
    }

    /// A background call for a new catalog's tool vectors answered.
    fn backfilled<P: Proxy>(&self, proxy: &P, token: u32, answer: impl Fn() -> CallAnswer) -> bool {
        let Some((catalog, entries)) = self
            .backfill
            .try_borrow()
            .ok()
            .and_then(|b| b.pending(token))
        else {
            return false;
        };
        let answer = answer();
        let stored = self.engine.try_borrow().is_ok_and(|engine| {
            let Some((source, e)) = super::hybrid::source(self.vectors.as_ref(), &engine.config)
            else {
                return false;
            };
            match super::hybrid::backfilled(&source, e, &catalog, &entries, &answer) {
                Ok(stored) => {
                    proxy.count(Fixed::EmbeddingsBackfilled.into(), stored as u64);
                    true
                }
                Err(reason) => {
                    log::debug!("background embeddings call: {}", reason.name());
                    proxy.count(Stat::Fallback(reason), 1);
                    false
                }
            }
        });
        // Only hybrid ranking keeps vectors, and sends background calls.
        let more = match (self.backfill.try_borrow_mut(), self.vectors.as_ref()) {
            (Ok(mut backfill), Some((cache, _))) => backfill.answered(cache, token, stored),
            _ => false,
        };
        if more {
            backfill_tick(proxy);
        }
        true
    }

    /// The held requests whose body has not come within the grace time: counted, and the
    /// worker stops holding headers.
    fn stalled<P: Proxy>(&self, proxy: &P) -> Vec<u32> {
        let stalled = match self.watchdog.try_borrow_mut() {
            Ok(mut watchdog) => watchdog.stalled(proxy.now_millis()),
            Err(_) => return Vec::new(),
        };
        if !stalled.is_empty() {
            log::warn!(
                "search.hold_headers: a request whose headers were held got no body within {} \
                 ms; Envoy's Wasm filter config lacks `allow_on_headers_stop_iteration: true` \
                 (Istio's WasmPlugin and Envoy Gateway cannot set it). This worker stops \
                 holding headers: search mode goes on without them (no anthropic-beta for \
                 native_search, follow-ups with the request's headers as the filter saw them, \
                 no x-toolsift-search).",
                crate::search::hold::GRACE_MS
            );
            proxy.count(Fixed::SearchHeadersNotHeld.into(), stalled.len() as u64);
        }
        stalled
    }

    /// `suggestions.mcp`: starts a fetch of the suggestion server's `tools/list` when one is
    /// due (on Envoy's start and every `refresh_seconds`).
    fn tick_suggestions<P: Proxy>(&self, proxy: &P) {
        let (Ok(engine), Ok(mut refresh)) =
            (self.engine.try_borrow(), self.suggestions.try_borrow_mut())
        else {
            return;
        };
        let (Some(server), Some(refresh)) = (suggestion_server(&engine.config), refresh.as_mut())
        else {
            return;
        };
        let now = proxy.now_millis();
        if refresh.due(now) {
            refresh.sent(now, send_list(proxy, server, None));
        }
    }

    /// Reads the suggestion server's answer when `token` is its call (every page, then the
    /// tools join the inline ones in the engine); false for other calls.
    fn suggestions_answered<P: Proxy>(
        &self,
        proxy: &P,
        token: u32,
        answer: impl Fn() -> CallAnswer,
    ) -> bool {
        let Ok(mut refresh) = self.suggestions.try_borrow_mut() else {
            return false;
        };
        let Some(refresh) = refresh.as_mut().filter(|r| r.waits_for(token)) else {
            return false;
        };
        let answer = answer();
        let page =
            crate::mcp::suggestions::read_list(answer.status, &answer.content_type, &answer.body);
        let now = proxy.now_millis();
        let Ok(mut engine) = self.engine.try_borrow_mut() else {
            // A request holds the engine (it cannot, between callbacks): try again later.
            refresh.sent(now, None);
            return true;
        };
        match refresh.on_page(now, page) {
            RefreshStep::Next(cursor) => {
                let token = suggestion_server(&engine.config)
                    .and_then(|server| send_list(proxy, server, Some(&cursor)));
                refresh.sent(now, token);
            }
            RefreshStep::Done(pages) => {
                let tools: usize = pages.iter().map(|p| p.tools.len()).sum();
                log::info!("suggestions: {tools} tools from the suggestion server");
                engine.set_fetched_suggestions(crate::mcp::suggestions::tools(pages));
                proxy.count(Fixed::SuggestionsFetched.into(), 1);
            }
            RefreshStep::Failed => {
                log::warn!(
                    "suggestions: the suggestion server's tools/list failed (status {:?}); \
                     keeping the tools there were",
                    answer.status
                );
                proxy.count(Fixed::SuggestionsFailed.into(), 1);
            }
        }
        true
    }
}

/// Asks for the tick soon: background calls wait to be sent (a period set from a request's
/// context applies to the root context).
fn backfill_tick<P: Proxy>(proxy: &P) {
    if let Err(status) = proxy.set_tick_period(BACKFILL_TICK) {
        log::warn!("cannot set the tick period for background embeddings calls: {status:?}");
    }
}

fn suggestion_server(config: &Config) -> Option<&SuggestionServer> {
    config.suggestions.as_ref().and_then(|s| s.mcp.as_ref())
}

/// Sends one `tools/list` call for the page after `cursor`.
fn send_list<P: Proxy>(proxy: &P, server: &SuggestionServer, cursor: Option<&str>) -> Option<u32> {
    let (extra, body) = crate::mcp::suggestions::list_call(server, cursor);
    let mut headers: Vec<(&str, &str)> = vec![
        (":method", "POST"),
        (":path", &server.path),
        (":authority", server.authority()),
    ];
    headers.extend(extra.iter().map(|(n, v)| (n.as_str(), v.as_str())));
    let timeout = Duration::from_millis(server.timeout_ms);
    proxy
        .dispatch(&server.cluster, headers, body.as_bytes(), timeout)
        .inspect_err(|status| {
            log::warn!(
                "suggestions: cannot call cluster {}: {status:?}",
                server.cluster
            );
        })
        .ok()
}
