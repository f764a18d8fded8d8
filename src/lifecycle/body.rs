//! An LLM route's body phase: the body read ([`Request::on_body`]: a Responses id alias
//! resolved, the request's connectors governed, its tools analysed, a request refused whole by
//! access rules answered) and the selection written ([`Request::apply`], filter mode). Between
//! the two come `_tool_gating` and ranking, either of which may wait for a call; `steps.rs`
//! runs them in order.

use super::{Action, Counter, Outcome, Ranked, Request};
use crate::access::Surface;
use crate::config::Config;
use crate::dialects::{Dialect, Reader};
use crate::embeddings::SharedBytes;
use crate::pipeline::{Analysis, Denial, Engine, Skip, Skipped, body_text};

/// What reading the body came to.
// Made once per request and taken apart at once: boxing the analysis would only add an
// allocation to the request's path.
#[allow(clippy::large_enum_variant)]
pub enum Read {
    /// Analysed: the adapter performs `actions` (the body as rewritten before its tools were
    /// read), ranks, and hands the analysis to [`Request::apply`].
    Analysed {
        actions: Vec<Action>,
        analysis: Analysis,
    },
    /// Refused whole by access rules: answered, nothing goes upstream.
    Answered(Vec<Action>),
    /// Not filtered (`skipped`, [`Request::skip`]), once `actions` (the body as rewritten
    /// before its tools were read) are done.
    Skipped {
        actions: Vec<Action>,
        skipped: Skipped,
    },
}

/// What a request body callback comes to.
pub enum Chunk {
    /// Not a request toolsift reads: the body passes.
    Pass,
    /// More is to come: buffered.
    Buffer,
    /// Let through unread (too large), or answered: perform these.
    Skip(Vec<Action>),
    /// The whole body is in: read it with this reader ([`Request::on_body`]).
    Read(Reader),
}

impl Request {
    /// A request body callback; `buffered`: the size of everything buffered so far (Envoy's
    /// count is cumulative, not this chunk's). `config`: `None` when it cannot be had (the
    /// request then goes on unread).
    pub fn on_body_chunk(
        &mut self,
        config: Option<&Config>,
        buffered: usize,
        end_of_stream: bool,
    ) -> Chunk {
        let Some(reader) = self.buffering else {
            return Chunk::Pass;
        };
        if config.is_none_or(|c| buffered > c.max_body_bytes) {
            // Going on releases what was buffered and streams the rest through.
            return Chunk::Skip(self.skip(config, Skip::TooLarge.into()));
        }
        if !end_of_stream {
            return Chunk::Buffer;
        }
        Chunk::Read(reader)
    }

    /// The whole request body (`body`, as Envoy gave it), read by `reader`. `aliases`: where
    /// search mode's Responses id aliases live; `now`: seconds since the epoch.
    pub fn on_body<S: SharedBytes>(
        &mut self,
        engine: &mut Engine,
        reader: Reader,
        body: &mut Vec<u8>,
        aliases: &S,
        now: u64,
    ) -> Read {
        self.buffering = None;
        let mut actions = Vec::new();
        let read = self.read_body(engine, reader, body, aliases, now, &mut actions);
        if let Some(gen_ai) = self.gen_ai.take() {
            let model = match &read {
                Ok(Some(analysis)) => analysis.model.clone(),
                _ if gen_ai.reads_body() => crate::gen_ai::model_in_body(body),
                _ => None,
            };
            actions.push(Action::RecordGenAi(gen_ai.record(model.as_deref())));
        }
        match read {
            Ok(Some(analysis)) => Read::Analysed { actions, analysis },
            Ok(None) => Read::Answered(actions),
            // A body rewritten before its tools were read goes on rewritten (a resolved
            // alias must reach the provider even when there is nothing to filter).
            Err(skipped) => Read::Skipped { actions, skipped },
        }
    }

    /// [`Request::on_body`]'s steps, each adding to `actions`; `None`: answered.
    fn read_body<S: SharedBytes>(
        &mut self,
        engine: &mut Engine,
        reader: Reader,
        body: &mut Vec<u8>,
        aliases: &S,
        now: u64,
        actions: &mut Vec<Action>,
    ) -> Result<Option<Analysis>, Skipped> {
        let sent = body.len();
        let mut changed = false;
        if let Some(resolved) = self.resolve_alias(reader, body, aliases, now)? {
            *body = resolved.into_bytes();
            changed = true;
        }
        if let Some(answered) = self.govern_outside(reader, body, &mut changed)? {
            *actions = answered;
            return Ok(None);
        }
        if changed {
            actions.push(Action::ReplaceBody {
                drain: sent,
                bytes: body.clone(),
            });
        }
        // Only the custom shape reads the body as text: a dialect checks what it reads.
        let grant = self.grant.as_ref();
        let mut analysis = match reader {
            Reader::Custom => engine.analyse_custom_as(body_text(body)?, grant)?,
            Reader::Dialect(dialect) => engine.analyse_as(dialect, &*body, grant)?,
        };
        let cache = if analysis.cache_hit {
            Counter::CatalogCacheHits
        } else {
            Counter::CatalogCacheMisses
        };
        actions.push(Action::Count(cache, 1));
        if let Some(governed) = analysis.access.as_mut() {
            governed.denied += self.outside_denied;
            // Connectors or namespace functions it may see go: the request is not empty.
            let empty = |d: &Denial| d.tool.is_none() && d.why == crate::access::Why::Default;
            if self.outside_kept > 0 && governed.denial.as_ref().is_some_and(empty) {
                governed.denial = None;
            }
        }
        match self.refuse(&analysis) {
            Some(refused) => {
                actions.append(&mut refused?);
                Ok(None)
            }
            None => Ok(Some(analysis)),
        }
    }

    /// In search mode (and filter mode's follow-ups), an OpenAI Responses body whose
    /// `previous_response_id` names a response id the client was shown in place of the one
    /// the provider stored (see [`crate::search::alias`]), with the stored one.
    fn resolve_alias<S: SharedBytes>(
        &self,
        reader: Reader,
        body: &[u8],
        aliases: &S,
        now: u64,
    ) -> Result<Option<String>, Skipped> {
        let follows_up = self.search_headers.is_some() || self.answer_headers.is_some();
        if !follows_up || reader != Reader::Dialect(Dialect::OpenaiResponses) {
            return Ok(None);
        }
        Ok(crate::search::alias::resolve(
            aliases,
            body_text(body)?,
            self.alias_owner,
            now,
        ))
    }

    /// Under access rules, the request's remote MCP connectors and namespaces decided before
    /// its tools are read ([`crate::connectors`]): the body rewritten when they change, and a
    /// 403 when the request is refused for them (`Some`: answered).
    fn govern_outside(
        &mut self,
        reader: Reader,
        body: &mut Vec<u8>,
        changed: &mut bool,
    ) -> Result<Option<Vec<Action>>, Skipped> {
        let (Some(grant), Reader::Dialect(dialect)) = (self.grant.as_ref(), reader) else {
            return Ok(None);
        };
        let outcome = crate::connectors::govern(dialect.codec(), body_text(body)?, grant);
        self.outside_denied = outcome.denied;
        self.outside_kept = outcome.kept;
        if let Some(denial) = &outcome.denial {
            return Ok(Some(self.deny(denial, 0, outcome.denied)));
        }
        if let Some(written) = outcome.body {
            *body = written.into_bytes();
            *changed = true;
        }
        Ok(None)
    }

    /// Under access rules, answers the request with a 403 when it is refused whole (no
    /// identity, no tool its caller may see, a `tool_choice` of a denied tool under
    /// `denied: "refused"`, or a signed request, which cannot be rewritten, carrying denied
    /// tools); a signed request with nothing denied passes unchanged. `None`: go on.
    fn refuse(&mut self, analysis: &Analysis) -> Option<Result<Vec<Action>, Skipped>> {
        let governed = analysis.access.as_ref()?;
        let denial = governed
            .denial
            .clone()
            .or_else(|| self.read_only.then(|| analysis.first_denial()).flatten());
        let Some(denial) = denial else {
            if self.read_only {
                return Some(Err(Skipped {
                    reason: Skip::Signed,
                    tools: Some(analysis.total()),
                }));
            }
            return None;
        };
        Some(Ok(self.deny(&denial, analysis.total(), governed.denied)))
    }

    /// Answers the request with access rules' 403 (`denial`), `total` tools read and `denied`
    /// of them (or of its connectors and namespace functions) denied.
    pub fn deny(&mut self, denial: &Denial, total: usize, denied: usize) -> Vec<Action> {
        log::debug!("toolsift: refused: {}", denial.message());
        self.outcome = Some(Outcome::Denied { total, denied });
        vec![
            Action::Count(Counter::Denied(Surface::Request), 1),
            Action::Count(Counter::Denied(Surface::Tools), denied),
            Action::Reply {
                status: 403,
                body: denial.body(),
            },
        ]
    }

    /// Filter mode: writes the selected tools into the body (`body`: as the analysis read it)
    /// and records what was done ([`Request::write`], then [`Request::record`]). Shadow
    /// ranking measures what the selection keeps instead of applying it.
    pub fn apply(
        &mut self,
        config: &Config,
        analysis: &mut Analysis,
        body: &[u8],
        ranked: Ranked,
    ) -> Result<Vec<Action>, Skipped> {
        let (mut actions, written) = self.write(config, analysis, body)?;
        actions.extend(self.record(config, analysis, ranked, written));
        Ok(actions)
    }

    /// Filter mode's write: the body's replacement (or that it goes on unchanged), and shadow's
    /// start. Apart from [`Request::record`] so that the adapter times the write alone
    /// (`toolsift.phase.write_us`).
    pub fn write(
        &mut self,
        config: &Config,
        analysis: &mut Analysis,
        body: &[u8],
    ) -> Result<(Vec<Action>, Written), Skipped> {
        let mut actions = Vec::new();
        // Debug names the tools a shadowed request's selection would have kept.
        let would_keep_names =
            (config.debug && self.shadow_drawn == Some(true)).then(|| analysis.explain_kept());
        // Before shadow forwards every tool: what the selection (applied or measured) kept.
        let next = analysis.brought_in(config);
        let shadow = self.start_shadow(analysis, &mut actions);
        let (kept, total) = (analysis.kept(), analysis.total());
        match rewritten(analysis, body)? {
            Some((bytes, drain)) => {
                actions.push(Action::ReplaceBody { drain, bytes });
                actions.push(Action::Count(Counter::Rewritten, 1));
            }
            None => actions.push(Action::Count(Counter::Unchanged, 1)),
        }
        let written = Written {
            would_keep_names,
            shadow,
            kept,
            total,
            next,
        };
        Ok((actions, written))
    }

    /// Filter mode's record of what [`Request::write`] did: the counts, the access log's
    /// tokens, and the outcome the answer's headers report.
    pub fn record(
        &mut self,
        config: &Config,
        analysis: &mut Analysis,
        ranked: Ranked,
        written: Written,
    ) -> Vec<Action> {
        let Written {
            would_keep_names,
            shadow,
            kept,
            total,
            next,
        } = written;
        let debug = config.debug;
        let mut actions = Vec::new();
        let (tokens_before, tokens_after) = analysis.tokens_before_after();
        // For the access log's record (`toolsift report`): the tools' tokens as sent and as
        // forwarded, written with the rest of it once the answer's headers come.
        self.tokens = Some((tokens_before, tokens_after));
        actions.push(Action::Count(Counter::ToolsIn, total));
        actions.push(Action::Count(Counter::ToolsOut, kept));
        actions.push(Action::Count(
            Counter::TokensSaved,
            tokens_before.saturating_sub(tokens_after),
        ));
        match ranked {
            Ranked::Keyword => {}
            Ranked::Hybrid => actions.push(Action::Count(Counter::RankedHybrid, 1)),
            Ranked::Fallback(reason) => {
                actions.push(Action::Count(Counter::RankedKeyword, 1));
                actions.push(Action::Count(Counter::Fallback(reason), 1));
            }
            Ranked::Incomplete => {
                actions.push(Action::Count(Counter::RankedKeyword, 1));
                actions.push(Action::Count(Counter::EmbeddingsIncomplete, 1));
            }
        }
        // Prompts stay out of logs above debug level.
        log::debug!(
            "toolsift: {} query={:?} kept {kept}/{total} catalog_cache_hit={} ranked={ranked:?}",
            analysis.reader.name(),
            analysis.query,
            analysis.cache_hit
        );
        let kept_names = match would_keep_names {
            Some(names) => names,
            None if debug => analysis.explain_kept(),
            None => String::new(),
        };
        actions.push(Action::Count(
            Counter::Denied(Surface::Tools),
            analysis.denied(),
        ));
        // The provider's own search (here only under access rules that took tools out).
        if analysis.native_search {
            actions.push(Action::Count(Counter::SearchNative, 1));
        }
        self.outcome = Some(Outcome::Filtered {
            kept,
            total,
            ranked,
            search: analysis.native_search.then_some("native"),
            kept_names,
            denied: analysis.access.as_ref().map(|g| g.denied),
            evicted: analysis.evicted.clone(),
            detected: loops_detected(analysis),
            remembered: Vec::new(),
            noted: noted_tools(analysis),
            unknown: analysis.unknown.clone(),
            shadow,
            auto_k: analysis.auto_k_used(),
            weak: analysis.weak_suffix(),
            next,
        });
        if analysis.weak {
            actions.push(Action::Count(Counter::WeakQuery, 1));
        }
        if let Some(chosen) = analysis.auto_k_used() {
            actions.push(Action::Count(Counter::AutoK(chosen.source), chosen.k));
            if chosen.capped.is_some() {
                actions.push(Action::Count(Counter::AutoKCapped, 1));
            }
        }
        actions.extend(loop_counts(analysis));
        actions.push(Action::Count(Counter::UnknownTools, analysis.unknown.len()));
        actions
    }

    /// `shadow`, as the selection is written: a shadowed request keeps every tool its caller
    /// may see, and the answer of any ranked request is watched. Returns, when shadowed, how
    /// many tools the selection would have kept.
    fn start_shadow(
        &mut self,
        analysis: &mut Analysis,
        actions: &mut Vec<Action>,
    ) -> Option<usize> {
        // A weak question's answer says nothing of its catalog's ranking (`auto_k` never
        // learns from it), so it is shadowed only when its history called tools: what its
        // model calls next is what `toolsift calibrate` learns the fleet's transitions from,
        // and referring-back later turns ("and the other one?") are the weak ones most.
        let drawn = self.shadow_drawn.take()? && (!analysis.weak || !analysis.called.is_empty());
        let dialect = analysis.dialect()?;
        // The provider's own search gets every allowed tool anyway: no cut to measure.
        if analysis.native_search {
            return None;
        }
        let (card, would_keep) = if drawn {
            let would = analysis.shadow();
            actions.push(Action::Count(Counter::ShadowRequests, 1));
            let card = crate::shadow::Scorecard::new(analysis, &would, true);
            (card, Some(would.kept_count()))
        } else {
            let card = crate::shadow::Scorecard::new(analysis, &analysis.selection, false);
            (card, None)
        };
        self.shadow = Some(crate::shadow::Watch::new(card, dialect));
        would_keep
    }
}

/// What filter mode's write leaves for its record: shadow's count of what the selection would
/// have kept, the names debug shows, and the tools kept of all.
pub struct Written {
    would_keep_names: Option<String>,
    shadow: Option<usize>,
    kept: usize,
    total: usize,
    /// The kept tools the transitions brought in ([`crate::pipeline::Analysis::brought_in`]).
    next: Vec<String>,
}

/// The body with the dropped tools spliced out, and how many bytes of the body it replaces;
/// `None` when every tool is kept (the body goes on as it is). Only the bytes up to the end
/// of the tools array are written: Envoy's `set_buffer` at offset 0 drains the given length
/// and puts the new bytes before what remains, so the rest of the body never leaves Envoy's
/// buffer.
fn rewritten(analysis: &Analysis, body: &[u8]) -> Result<Option<(Vec<u8>, usize)>, Skipped> {
    let Some(head) = analysis.rewrite_head(body) else {
        // Tools were dropped but could not be cut out (a custom shape's text tags whose cut
        // would make new tags): the request goes on as the client sent it, counted.
        if analysis.kept() < analysis.total() {
            return Err(Skip::BadShape.into());
        }
        return Ok(None);
    };
    Ok(Some(head))
}

/// The tools whose guidance note went upstream.
pub fn noted_tools(analysis: &Analysis) -> Vec<String> {
    analysis.notes.iter().map(|n| n.tool.clone()).collect()
}

/// With `loop_guard.report_only`: the tools found looping and left in.
pub fn loops_detected(analysis: &Analysis) -> Vec<String> {
    if analysis.evicted.is_empty() {
        analysis.looping.clone()
    } else {
        Vec::new()
    }
}

/// The loop guard's counts for one request that went upstream.
pub fn loop_counts(analysis: &Analysis) -> [Action; 3] {
    if !analysis.looping.is_empty() {
        log::debug!("toolsift: loop detected: {:?}", analysis.looping);
    }
    [
        Action::Count(Counter::LoopDetected, analysis.looping.len()),
        Action::Count(Counter::LoopEvicted, analysis.evicted.len()),
        Action::Count(Counter::LoopNoted, analysis.notes.len()),
    ]
}
