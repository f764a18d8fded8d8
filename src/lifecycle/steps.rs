//! An LLM route's body phase in order, once the whole body is in ([`Request::on_body_end`]):
//! read ([`Request::on_body`]) → `_tool_gating` ([`gating`]) → rank, by keyword or hybrid
//! ([`hybrid`]) → the selection written ([`Request::write`]) or search mode's first request
//! planned ([`Request::plan_search`]) → a claim's `tool_choice` → the loop that answers calls
//! of made-up tools ([`Request::answer_unknown`]). A step that waits for a call (the gating
//! server's verdict, the embeddings) leaves the request paused, and the call's answer
//! ([`Request::call_answered`]) takes it on from that step. The adapter hands over what Envoy
//! holds and performs what is asked, through [`BodyHost`]; the order is decided here.

use super::gating::{Gate, GatingCall};
use super::{Action, Ranked, Request, Searched, hybrid};
use crate::config::embeddings::Embeddings;
use crate::dialects::Reader;
use crate::embeddings::{Fallback, SharedBytes, VectorCache};
use crate::mcp::exchange::CallAnswer;
use crate::pipeline::{Analysis, Engine, Skip, Skipped};
use crate::rank::Catalog;
use crate::stats::{Counts, Fixed};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::SystemTime;

/// Whether a request goes on once actions are performed (`Pause`: answered here, a local
/// reply ending the stream, or its headers held), as the response side's callbacks say it.
pub use crate::search::respond::Flow;

/// What the body phase came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The request goes on upstream, with its body as written.
    Done,
    /// A call is out: the request stays paused until its answer ([`Request::call_answered`]).
    Waiting,
    /// Answered here: nothing goes upstream.
    Answered,
}

/// What every request on the worker shares that the body phase reads.
pub struct Worker<'a, S> {
    pub engine: &'a RefCell<Engine>,
    /// Hybrid ranking's vector cache and the embeddings service's identity in its keys;
    /// `None` with keyword ranking.
    pub vectors: Option<&'a (VectorCache<S>, String)>,
}

/// What the body phase asks of the host, besides the actions it hands over.
pub trait BodyHost {
    /// Where Responses id aliases, the sessions' memory and vectors live.
    type Store: SharedBytes;
    /// The first `size` bytes of the request body Envoy holds (`usize::MAX`: all of it);
    /// `None` when Envoy does not give it.
    fn request_body(&self, size: usize) -> Option<Vec<u8>>;
    fn store(&self) -> &Self::Store;
    /// Envoy's clock, in seconds since the epoch.
    fn now_seconds(&self) -> u64;
    /// Envoy's clock for the phases' times; `None` when it cannot be read.
    fn clock(&self) -> Option<SystemTime>;
    /// Records the time since `started` in `stat`; returns the time now.
    fn phase(&self, stat: Fixed, started: Option<SystemTime>) -> Option<SystemTime>;
    fn count(&self, counts: Counts);
    /// Carries out `actions` in order. An error when Envoy refused a change the body needs
    /// (the actions after it are not done).
    fn perform(&mut self, actions: Vec<Action>) -> Result<Flow, Skipped>;
    /// Whether the request headers are still held (`search.hold_headers`).
    fn headers_held(&self) -> bool;
    /// Sends an embeddings call of `inputs` (bounded by `timeout_ms`); its token, `None` when
    /// it could not be sent.
    fn embed(&mut self, e: &Embeddings, inputs: &[&str]) -> Option<u32>;
    /// Sends the `_tool_gating` call; its token, `None` when it could not be sent.
    fn ask(&mut self, call: &GatingCall) -> Option<u32>;
    /// A new catalog's tools that are still without a vector, for the worker's background
    /// calls.
    fn backfill(&mut self, catalog: &Rc<Catalog>, entries: Vec<usize>);
}

/// A request paused until the call `token` answers.
pub(super) struct Pending {
    token: u32,
    reader: Reader,
    analysis: Analysis,
    /// The request body as Envoy gave it.
    body: Vec<u8>,
    call: Waits,
}

/// What a paused request waits for.
enum Waits {
    /// The gating server's verdict (`gating.mcp`).
    Gating,
    /// Hybrid ranking's embeddings of these texts.
    Embeddings(hybrid::Call),
}

impl Request {
    /// The whole body is in: `size` bytes of it in Envoy's buffer, read by `reader`. Runs the
    /// body phase until it ends, is answered, or waits for a call. An error: the request is
    /// not filtered ([`Request::skip`]).
    pub fn on_body_end<H: BodyHost>(
        &mut self,
        host: &mut H,
        worker: &Worker<'_, H::Store>,
        reader: Reader,
        size: usize,
    ) -> Result<Step, Skipped> {
        self.buffering = None;
        let started = host.clock();
        let step = self.read_and_gate(host, worker, reader, size, started);
        host.phase(Fixed::FilterTimeUs, started);
        step
    }

    /// Whether the request waits for the call `token`.
    pub fn waits_for(&self, token: u32) -> bool {
        self.pending.as_ref().is_some_and(|p| p.token == token)
    }

    /// The answer of the call the request waits for (see [`Request::waits_for`]): the body
    /// phase goes on from the step that sent it.
    pub fn call_answered<H: BodyHost>(
        &mut self,
        host: &mut H,
        worker: &Worker<'_, H::Store>,
        answer: &CallAnswer,
    ) -> Result<Step, Skipped> {
        let Some(pending) = self.pending.take() else {
            return Err(Skip::Internal.into());
        };
        let Pending {
            reader,
            mut analysis,
            body,
            call,
            ..
        } = *pending;
        match call {
            Waits::Gating => self.gated(host, worker, Some(answer), reader, analysis, body),
            Waits::Embeddings(call) => {
                let started = host.clock();
                let ranked = {
                    let engine = worker.engine.try_borrow().map_err(|_| Skip::Internal)?;
                    let config = &engine.config;
                    let ranked = match hybrid::source(worker.vectors, config) {
                        Some((source, e)) => {
                            let answered = call.answered(&source, config, e, &mut analysis, answer);
                            if let Some(entries) = answered.backfill {
                                host.backfill(&analysis.catalog, entries);
                            }
                            answered.ranked
                        }
                        None => Ranked::Keyword,
                    };
                    self.apply_verdict(config, &mut analysis);
                    ranked
                };
                let now = seconds(host, started);
                let written = self.write_or_plan(host, worker, &mut analysis, &body, ranked, now);
                self.claim_tool_choice(host, reader);
                if written.is_ok() {
                    self.watch_unknown(host, worker, &analysis);
                }
                host.phase(Fixed::PhaseAnswerUs, started);
                written.map(|()| Step::Done)
            }
        }
    }

    /// Reads the body, then lets `_tool_gating` have its say.
    fn read_and_gate<H: BodyHost>(
        &mut self,
        host: &mut H,
        worker: &Worker<'_, H::Store>,
        reader: Reader,
        size: usize,
        started: Option<SystemTime>,
    ) -> Result<Step, Skipped> {
        let mut body = host.request_body(size).ok_or(Skip::Internal)?;
        // Each phase starts when the last one ended: one clock read less per phase.
        let started = host.phase(Fixed::PhaseReadUs, started);
        let mut engine = worker.engine.try_borrow_mut().map_err(|_| Skip::Internal)?;
        let now = seconds(host, started);
        // `auto_k`: at a new period, the period's table (the request path's cost until then:
        // one comparison).
        if let Some(auto_k) = engine.auto_k.as_mut().filter(|a| !a.is_current(now)) {
            let refreshed = auto_k.refresh(host.store(), now);
            if refreshed.changes > 0 {
                host.count(crate::stats::one(Fixed::AutoKChanges, refreshed.changes));
            }
            if refreshed.foreign > 0 {
                host.count(crate::stats::one(Fixed::AutoKForeign, refreshed.foreign));
            }
        }
        let (actions, analysis) =
            match self.on_body(&mut engine, reader, &mut body, host.store(), now) {
                super::Read::Analysed { actions, analysis } => (actions, analysis),
                super::Read::Skipped { actions, skipped } => {
                    drop(engine);
                    host.perform(actions)?;
                    return Err(skipped);
                }
                super::Read::Answered(actions) => {
                    drop(engine);
                    return match host.perform(actions)? {
                        Flow::Pause => Ok(Step::Answered),
                        // The refusal could not be sent: never let the request go as it is.
                        Flow::Continue => Err(Skip::Internal.into()),
                    };
                }
            };
        let phase = if analysis.cache_hit {
            Fixed::PhaseAnalyseUs
        } else {
            Fixed::PhaseAssembleUs
        };
        host.phase(phase, started);
        host.perform(actions)?;
        let gate = self.gate(&engine, &analysis, reader, &body);
        drop(engine);
        self.after_gate(host, worker, gate, reader, analysis, body)
    }

    /// Goes on as `_tool_gating` decided: the gating server asked, the request answered here,
    /// or ranked and written.
    fn after_gate<H: BodyHost>(
        &mut self,
        host: &mut H,
        worker: &Worker<'_, H::Store>,
        gate: Gate,
        reader: Reader,
        analysis: Analysis,
        body: Vec<u8>,
    ) -> Result<Step, Skipped> {
        match gate {
            Gate::Rank(actions) => {
                host.perform(actions)?;
                self.rank_and_write(host, worker, reader, analysis, body)
            }
            Gate::Answered(actions) => match host.perform(actions)? {
                Flow::Pause => Ok(Step::Answered),
                // The reply could not be sent: the request goes on with the verdict.
                Flow::Continue => self.rank_and_write(host, worker, reader, analysis, body),
            },
            Gate::Ask(actions, call) => {
                host.perform(actions)?;
                if let Some(token) = host.ask(&call) {
                    self.pending = Some(Box::new(Pending {
                        token,
                        reader,
                        analysis,
                        body,
                        call: Waits::Gating,
                    }));
                    return Ok(Step::Waiting);
                }
                // Not sent: the request goes on without the server's verdict.
                self.gated(host, worker, None, reader, analysis, body)
            }
        }
    }

    /// The gating server's verdict (`None`: the call got no answer, or was not sent) merged
    /// with that of `gating.rules`; the request goes on with both.
    fn gated<H: BodyHost>(
        &mut self,
        host: &mut H,
        worker: &Worker<'_, H::Store>,
        answer: Option<&CallAnswer>,
        reader: Reader,
        analysis: Analysis,
        body: Vec<u8>,
    ) -> Result<Step, Skipped> {
        let gate = {
            let engine = worker.engine.try_borrow().map_err(|_| Skip::Internal)?;
            self.gating_answered(&engine.config, &analysis, reader, &body, answer)
        };
        self.after_gate(host, worker, gate, reader, analysis, body)
    }

    /// Ranks (hybrid when configured, which may wait for an embeddings call) and writes the
    /// selection into the body.
    fn rank_and_write<H: BodyHost>(
        &mut self,
        host: &mut H,
        worker: &Worker<'_, H::Store>,
        reader: Reader,
        mut analysis: Analysis,
        body: Vec<u8>,
    ) -> Result<Step, Skipped> {
        let engine = worker.engine.try_borrow().map_err(|_| Skip::Internal)?;
        let config = &engine.config;
        let started = host.clock();
        // A request for the provider's own search keeps every allowed tool: nothing to rank.
        let hybrid = hybrid::source(worker.vectors, config).filter(|_| !analysis.native_search);
        let ranked = match hybrid {
            Some((source, e)) => match hybrid::start(&source, config, e, &mut analysis) {
                hybrid::Start::Ranked(ranked, backfill) => {
                    if let Some(entries) = backfill {
                        host.backfill(&analysis.catalog, entries);
                    }
                    ranked
                }
                hybrid::Start::Call(call) => {
                    let inputs: Vec<&str> = call.inputs.iter().map(String::as_str).collect();
                    match host.embed(e, &inputs) {
                        Some(token) => {
                            host.count(crate::stats::embeddings_call(inputs.len()));
                            host.phase(Fixed::PhaseHybridUs, started);
                            drop(engine);
                            self.pending = Some(Box::new(Pending {
                                token,
                                reader,
                                analysis,
                                body,
                                call: Waits::Embeddings(call),
                            }));
                            return Ok(Step::Waiting);
                        }
                        None => Ranked::Fallback(Fallback::Dispatch),
                    }
                }
            },
            None => Ranked::Keyword,
        };
        if ranked != Ranked::Keyword {
            host.phase(Fixed::PhaseHybridUs, started);
        }
        self.apply_verdict(config, &mut analysis);
        drop(engine);
        let now = seconds(host, started);
        self.write_or_plan(host, worker, &mut analysis, &body, ranked, now)?;
        self.claim_tool_choice(host, reader);
        self.watch_unknown(host, worker, &analysis);
        Ok(Step::Done)
    }

    /// Search mode plans its first request; filter mode writes the selected tools into the
    /// body and records what was done. `now`: Envoy's clock in seconds.
    fn write_or_plan<H: BodyHost>(
        &mut self,
        host: &mut H,
        worker: &Worker<'_, H::Store>,
        analysis: &mut Analysis,
        body: &[u8],
        ranked: Ranked,
        now: u64,
    ) -> Result<(), Skipped> {
        let engine = worker.engine.try_borrow().map_err(|_| Skip::Internal)?;
        let held = host.headers_held();
        if self.reach_beyond(&engine.config, analysis) {
            host.count(crate::stats::one(Fixed::AutoKBeyond, 1));
        }
        let searched =
            self.plan_search(&engine, analysis, body, ranked, held, host.store(), now)?;
        drop(engine);
        if let Searched::Planned { actions, search } = searched {
            host.perform(actions)?;
            // Search mode's own loop replaces the access rules' guard (it checks calls the
            // same way). When the provider searches there is no loop: the guard, if any,
            // stays on the answer.
            if let Some(search) = search {
                host.perform(vec![Action::Watch(search)])?;
            }
            return Ok(());
        }
        // `toolsift.phase.write_us`: the rewrite and its write into Envoy's buffer, not the
        // counts and the access log's filter state recorded after it.
        let started = host.clock();
        let engine = worker.engine.try_borrow().map_err(|_| Skip::Internal)?;
        let (write, written) = self.write(&engine.config, analysis, body)?;
        drop(engine);
        let replaced = write
            .iter()
            .any(|a| matches!(a, Action::ReplaceBody { .. }));
        host.perform(write)?;
        if replaced {
            host.phase(Fixed::PhaseWriteUs, started);
        }
        let engine = worker.engine.try_borrow().map_err(|_| Skip::Internal)?;
        let record = self.record(&engine.config, analysis, ranked, written);
        drop(engine);
        host.perform(record)?;
        Ok(())
    }

    /// A claim's `tool_choice` written into the body that goes upstream.
    fn claim_tool_choice<H: BodyHost>(&mut self, host: &mut H, reader: Reader) {
        let written = || host.request_body(usize::MAX).unwrap_or_default();
        if let Some(write) = self.claimed_tool_choice(reader, written) {
            if host.perform(vec![write]).is_err() {
                log::warn!("cannot write the claimed tool_choice");
            }
        }
    }

    /// Filter mode with `unknown_tools.answer`: once the body that goes upstream is written
    /// (kept tools, the loop guard's notes, a claimed `tool_choice`), the answer is watched
    /// for calls of tools the request does not carry, answered in follow-ups that continue
    /// that body. The loop replaces the access rules' guard, whose checks it makes as well.
    fn watch_unknown<H: BodyHost>(
        &mut self,
        host: &mut H,
        worker: &Worker<'_, H::Store>,
        analysis: &Analysis,
    ) {
        if self.answer_headers.is_none() {
            return;
        }
        let Ok(engine) = worker.engine.try_borrow() else {
            return;
        };
        let sent = host.request_body(usize::MAX).unwrap_or_default();
        let held = host.headers_held();
        if let Some(answering) = self.answer_unknown(&engine.config, analysis, sent, held) {
            drop(engine);
            // Watching cannot fail: nothing of Envoy's is changed.
            let _ = host.perform(vec![Action::Watch(answering)]);
        }
    }
}

/// Seconds since the epoch at `read` (a time the phase clock read already: one host call less
/// per step), or by the host's clock when there is none.
fn seconds<H: BodyHost>(host: &H, read: Option<SystemTime>) -> u64 {
    read.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or_else(|| host.now_seconds(), |d| d.as_secs())
}
