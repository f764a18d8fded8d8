//! `_tool_gating` for an LLM route's request in filter mode (`gating`): `gating.rules` decide at
//! once, a gating server (`gating.mcp`) is asked once per request and its verdict merged with
//! theirs, and then either the gateway answers a claim itself (`gating.claim: "answer"`, the
//! model never called) or the verdict shapes the selection and `tool_choice`
//! ([`crate::mcp::llm`] says how). The adapter only sends the call this module describes and
//! hands its answer back.

use super::{Action, Counter, Outcome, Request};
use crate::config::gating::ClaimMode;
use crate::config::{Config, Mode};
use crate::dialects::Reader;
use crate::gating::{Verdict, merge};
use crate::mcp::exchange::CallAnswer;
use crate::pipeline::{Analysis, Engine};
use std::time::Duration;

/// What comes before ranking.
pub enum Gate {
    /// Rank and write the selection; the verdict decided so far, if any, shapes it.
    Rank(Vec<Action>),
    /// Ask the gating server first: the adapter sends the call and hands its answer (or that
    /// it could not be sent) to [`Request::gating_answered`].
    Ask(Vec<Action>, GatingCall),
    /// Answered here, without the model (a claim under `gating.claim: "answer"`): the actions
    /// hold the reply.
    Answered(Vec<Action>),
}

/// The `_tool_gating` call to send.
pub struct GatingCall {
    pub cluster: String,
    /// Pseudo-headers first.
    pub headers: Vec<(String, String)>,
    pub body: String,
    pub timeout: Duration,
}

impl Request {
    /// Whether and how `_tool_gating` has its say on the analysed request, once per request:
    /// not in search mode, not for a custom shape (it has no `tool_choice` a claim could name)
    /// nor for a request for the provider's own search (which loses only what access rules
    /// deny). `body`: the request body as Envoy gave it.
    pub fn gate(
        &mut self,
        engine: &Engine,
        analysis: &Analysis,
        reader: Reader,
        body: &[u8],
    ) -> Gate {
        let gated = matches!(reader, Reader::Dialect(_))
            && !self.gating_asked
            && self.search_headers.is_none()
            && !analysis.native_search;
        if !gated {
            return Gate::Rank(Vec::new());
        }
        self.gating_asked = true;
        let local = engine.gating_verdict(analysis);
        let mut actions = Vec::new();
        if let Some(verdict) = &local {
            count_verdict(verdict, &mut actions);
        }
        // What the request asks: a text on its own, without the question that only orders
        // its ranking's ties.
        let asked = crate::followup::own_words(&analysis.query);
        if let Some(call) = gating_call(&engine.config, asked) {
            self.verdict = local;
            return Gate::Ask(actions, call);
        }
        self.with_verdict(&engine.config, analysis, reader, body, local, actions)
    }

    /// The gating server answered, or the call could not be sent (`None`): its verdict is
    /// merged with that of `gating.rules`, and the request goes on with both.
    pub fn gating_answered(
        &mut self,
        config: &Config,
        analysis: &Analysis,
        reader: Reader,
        body: &[u8],
        answer: Option<&CallAnswer>,
    ) -> Gate {
        let mut actions = Vec::new();
        let server = answer.and_then(|answer| {
            actions.push(Action::Count(Counter::GatingCalls, 1));
            let verdict =
                crate::mcp::llm::read_answer(answer.status, &answer.content_type, &answer.body);
            match &verdict {
                None => actions.push(Action::Count(Counter::GatingFailed, 1)),
                Some(v) => count_verdict(v, &mut actions),
            }
            verdict
        });
        let verdict = merge(self.verdict.take(), server);
        self.with_verdict(config, analysis, reader, body, verdict, actions)
    }

    /// Goes on with the verdict: a claim under `gating.claim: "answer"` of a tool the request
    /// has and its caller may see, in a request that is not streamed, is answered with a call
    /// of that tool in the dialect's own answer; otherwise the verdict is kept for the
    /// selection ([`Request::apply_verdict`]).
    fn with_verdict(
        &mut self,
        config: &Config,
        analysis: &Analysis,
        reader: Reader,
        body: &[u8],
        verdict: Option<Verdict>,
        mut actions: Vec<Action>,
    ) -> Gate {
        let answers = config
            .gating
            .as_ref()
            .is_some_and(|g| g.claim == ClaimMode::Answer);
        let claim = verdict.as_ref().and_then(|v| v.claim.as_ref()).filter(|c| {
            answers
                && !analysis.stream
                && analysis.may_see(&c.name)
                && (0..analysis.catalog.draft.entries.len())
                    .any(|e| analysis.catalog.name(e) == Some(c.name.as_str()))
        });
        let claim = claim.cloned();
        // Kept for the selection, should the reply below not be sent.
        self.verdict = verdict;
        if let (Some(claim), Reader::Dialect(dialect)) = (claim, reader) {
            let model = crate::mcp::llm::model_of(std::str::from_utf8(body).unwrap_or_default());
            actions.push(Action::Reply {
                status: 200,
                body: crate::mcp::llm::claimed_answer(dialect, &claim, &model),
            });
            actions.push(Action::Count(Counter::GatingAnswered, 1));
            self.gated = Some(crate::mcp::llm::Gated {
                excluded: 0,
                claimed: Some(claim),
            });
            let denied = analysis.access.as_ref().map(|g| g.denied);
            self.outcome = Some(Outcome::filtered(0, analysis.total(), denied));
            return Gate::Answered(actions);
        }
        Gate::Rank(actions)
    }

    /// The verdict, if any, applied to the ranked request's selection.
    pub fn apply_verdict(&mut self, config: &Config, analysis: &mut Analysis) {
        if let Some(verdict) = &self.verdict {
            self.gated = Some(crate::mcp::llm::apply(analysis, config, verdict));
        }
    }

    /// A claim (`gating.claim: "tool_choice"`, or a stream under `"answer"`): `tool_choice`
    /// names the claimed tool in the body that goes upstream, which `written` reads (asked
    /// for only when there is a claim). `None`: nothing to write.
    pub fn claimed_tool_choice(
        &self,
        reader: Reader,
        written: impl FnOnce() -> Vec<u8>,
    ) -> Option<Action> {
        let claim = self.gated.as_ref()?.claimed.as_ref()?;
        let Reader::Dialect(dialect) = reader else {
            return None;
        };
        let written = written();
        let chosen = std::str::from_utf8(&written)
            .ok()
            .and_then(|text| dialect.codec().with_tool_choice(text, &claim.name));
        if chosen.is_none() {
            log::debug!("gating: no tool_choice could be written for the claim");
        }
        Some(Action::ReplaceBody {
            drain: written.len(),
            bytes: chosen?.into_bytes(),
        })
    }
}

/// The `_tool_gating` call for `text` under `gating.mcp` in filter mode; `None` without one.
fn gating_call(config: &Config, text: &str) -> Option<GatingCall> {
    if config.mode != Mode::Filter || text.trim().is_empty() {
        return None;
    }
    let gating = config.gating.as_ref()?.mcp.as_ref()?;
    let (extra, body) = crate::mcp::llm::gating_call(gating, text);
    let mut headers = vec![
        (":method".to_owned(), "POST".to_owned()),
        (":path".to_owned(), gating.path.clone()),
        (":authority".to_owned(), gating.authority().to_owned()),
    ];
    headers.extend(extra);
    Some(GatingCall {
        cluster: gating.cluster.clone(),
        headers,
        body,
        timeout: Duration::from_millis(gating.timeout_ms as u64),
    })
}

/// Counts what a verdict (a server's, or `gating.rules`') excludes and claims.
fn count_verdict(verdict: &Verdict, actions: &mut Vec<Action>) {
    actions.push(Action::Count(
        Counter::GatingExcluded,
        verdict.exclude.len(),
    ));
    if verdict.claim.is_some() {
        actions.push(Action::Count(Counter::GatingClaimed, 1));
    }
}
