//! Search mode's first request ([`Request::plan_search`]): the meta-tool and the pinned tools
//! instead of the catalog, the provider's own search, or the request as it came; and the
//! response side that runs the loop from the answer's headers on ([`SearchLoop`]), which
//! filter mode runs too to answer calls of made-up tools ([`Request::answer_unknown`]).

use super::{Action, Counter, Outcome, Ranked, Request, loop_counts, loops_detected, noted_tools};
use crate::access::Surface;
use crate::dialects::Reader;
use crate::embeddings::SharedBytes;
use crate::pipeline::{Analysis, Engine, Skipped, body_text};
use crate::search::memory::{Memory, SessionKey};
use crate::search::plan::{HeaderRoom, Planned, plan_remembering};
use crate::search::respond::Responder;
use crate::search::round::Session;

/// What search mode made of a request body.
pub enum Searched {
    /// Not a request search mode plans (filter mode, or one it filters instead): the caller
    /// writes the selection ([`Request::write`]).
    Filter,
    /// Planned: what to do now, and the loop to run on the answer (search mode's own search;
    /// none when the provider searches).
    Planned {
        actions: Vec<Action>,
        search: Option<Box<SearchLoop>>,
    },
}

/// A search loop, from the answer's headers to its last byte: the adapter feeds the responder
/// what Envoy hands over and carries out what it asks.
pub struct SearchLoop {
    pub responder: Responder,
    /// The client's request headers, for the follow-ups.
    pub headers: Vec<(String, String)>,
    /// Whose Responses id aliases the follow-ups make ([`crate::search::alias::owner`]).
    pub owner: u64,
    /// `search.memory`: where what the loop finds is remembered once it ends.
    pub memory: Option<Remembering>,
}

/// The session whose memory a search loop adds to.
pub struct Remembering {
    pub memory: Memory,
    pub key: SessionKey,
    /// Tools the loop guard took out of the request: forgotten unless found again.
    pub evicted: Vec<String>,
}

/// What the plan showed the model, for the `x-toolsift` header.
struct Shown {
    /// Function tools shown.
    tools: usize,
    /// The header's `search=` value.
    kind: &'static str,
    /// Tools shown because the session's memory offered them.
    remembered: Vec<String>,
}

impl Request {
    /// Search mode's first request (`body`: as the analysis read it). `headers_held`: the
    /// request headers are still held, so a header can be added (`anthropic-beta` for the
    /// provider's search) and the answer's may be held too. `store` holds the sessions'
    /// memory of found tools; `now`: Envoy's clock in seconds.
    #[allow(clippy::too_many_arguments)]
    pub fn plan_search<S: SharedBytes>(
        &mut self,
        engine: &Engine,
        analysis: &Analysis,
        body: &[u8],
        ranked: Ranked,
        headers_held: bool,
        store: &S,
        now: u64,
    ) -> Result<Searched, Skipped> {
        let Some((headers, path_stream)) = self.search_headers.take() else {
            return Ok(Searched::Filter);
        };
        let config = &engine.config;
        // Search mode reads the whole request as text (it builds the follow-ups from it).
        let text = body_text(body)?;
        let beta = header(&headers, "anthropic-beta").unwrap_or_default();
        let room = HeaderRoom {
            held: headers_held,
            anthropic_beta: beta,
        };
        // The session's memory of found tools, read once here and written when the loop ends.
        let memory = config.search.memory.as_ref().and_then(|m| {
            let key = SessionKey::of_request(
                m,
                self.alias_owner,
                self.session_header.as_deref(),
                analysis.session.as_deref(),
            )?;
            Some((Memory::new(m), key))
        });
        let remembered = memory
            .as_ref()
            .map_or_else(Vec::new, |(m, key)| m.recall(store, key, now));
        let mut actions = Vec::new();
        let mut search = None;
        let shown = match plan_remembering(config, analysis, text, room, &remembered) {
            None => return Ok(Searched::Filter),
            Some(Planned::Native(without_denied)) => {
                actions.push(Action::Count(Counter::SearchNative, 1));
                let denied = analysis.access.as_ref().map_or(0, |g| g.denied_functions);
                let tools = analysis.total().saturating_sub(denied);
                match without_denied {
                    Some(new) => replace(&mut actions, analysis, body, new, tools),
                    None => actions.push(Action::Count(Counter::Unchanged, 1)),
                }
                Shown::only(tools, "native")
            }
            Some(Planned::Provider(plan)) => {
                replace(&mut actions, analysis, body, plan.body, plan.shown);
                if let Some(added) = &plan.beta {
                    if let Some(value) = with_beta(beta, added) {
                        actions.push(Action::SetRequestHeader {
                            name: "anthropic-beta",
                            value,
                        });
                    }
                }
                actions.push(Action::Count(Counter::SearchProvider, 1));
                Shown::only(plan.shown, "provider")
            }
            Some(Planned::Search(plan)) => {
                let tools = analysis.total() - plan.deferred(analysis);
                // The session keeps the body it sent, to extend it for the follow-ups.
                replace(&mut actions, analysis, body, plan.body.clone(), tools);
                let remembered = plan.remembered.clone();
                actions.push(Action::Count(Counter::SearchRemembered, remembered.len()));
                let session = Session::new(config, analysis, text, plan)
                    .with_suggestions(engine.suggestions().cloned());
                actions.push(Action::Count(Counter::SearchRequests, 1));
                let stream = analysis.stream || path_stream;
                // Response headers are held only where holding request headers proved to work.
                search = Some(Box::new(SearchLoop {
                    responder: Responder::new(session, stream, headers_held),
                    headers,
                    owner: self.alias_owner,
                    memory: memory.map(|(memory, key)| Remembering {
                        memory,
                        key,
                        evicted: analysis.evicted.clone(),
                    }),
                }));
                Shown {
                    tools,
                    kind: "search",
                    remembered,
                }
            }
        };
        self.outcome = Some(Outcome::Filtered {
            kept: shown.tools,
            total: analysis.total(),
            ranked,
            search: Some(shown.kind),
            kept_names: String::new(),
            denied: analysis.access.as_ref().map(|g| g.denied),
            evicted: analysis.evicted.clone(),
            detected: loops_detected(analysis),
            remembered: shown.remembered,
            noted: noted_tools(analysis),
            // Search mode answers made-up names itself (`x-toolsift-search`).
            unknown: Vec::new(),
            shadow: None,
            auto_k: analysis.auto_k_used(),
            weak: None,
            next: Vec::new(),
        });
        actions.extend(loop_counts(analysis));
        actions.push(Action::Count(
            Counter::Denied(Surface::Tools),
            analysis.denied(),
        ));
        Ok(Searched::Planned { actions, search })
    }
}

impl Request {
    /// `auto_k.beyond: "find_tools"`: a filtered request whose k is capped at `max_k` (and
    /// that is not shadowed) is planned as search mode plans one, with its k best tools
    /// shown and `find_tools` for the rest. True when it will be.
    pub fn reach_beyond(&mut self, config: &crate::config::Config, analysis: &Analysis) -> bool {
        let beyond = config.auto_k.as_ref().and_then(|a| a.beyond).is_some();
        let capped = analysis.auto_k_used().is_some_and(|c| c.capped.is_some());
        if !beyond || !capped || self.shadow_drawn == Some(true) || self.search_headers.is_some() {
            return false;
        }
        self.search_headers = self.answer_headers.take();
        self.search_headers.is_some()
    }

    /// Filter mode with `unknown_tools.answer`, once the body went on: the loop that answers
    /// the model's calls of tools the request did not carry (`sent`: the body as the upstream
    /// got it, read back from Envoy). `None` when no such loop runs: the option is off, the
    /// request is a custom shape's or asks for the provider's own search, or `sent` is not
    /// text.
    pub fn answer_unknown(
        &mut self,
        config: &crate::config::Config,
        analysis: &Analysis,
        sent: Vec<u8>,
        headers_held: bool,
    ) -> Option<Box<SearchLoop>> {
        if !config.answers_unknown_tools() {
            // The headers were kept for `auto_k.beyond`, which this request did not need.
            return None;
        }
        let (headers, path_stream) = self.answer_headers.take()?;
        let (Reader::Dialect(dialect), false) = (analysis.reader, analysis.native_search) else {
            return None;
        };
        let sent = String::from_utf8(sent).ok()?;
        let session = Session::answering(config, analysis, dialect, sent);
        let stream = analysis.stream || path_stream;
        Some(Box::new(SearchLoop {
            // Response headers are held only where holding request headers proved to work.
            responder: Responder::new(session, stream, headers_held),
            headers,
            owner: self.alias_owner,
            memory: None,
        }))
    }
}

impl Shown {
    fn only(tools: usize, kind: &'static str) -> Shown {
        Shown {
            tools,
            kind,
            remembered: Vec::new(),
        }
    }
}

/// The whole body replaced by `new`, which shows the model `shown` of the request's tools.
fn replace(actions: &mut Vec<Action>, analysis: &Analysis, body: &[u8], new: String, shown: usize) {
    actions.push(Action::ReplaceBody {
        drain: body.len(),
        bytes: new.into_bytes(),
    });
    actions.push(Action::Count(Counter::Rewritten, 1));
    actions.push(Action::Count(Counter::ToolsIn, analysis.total()));
    actions.push(Action::Count(Counter::ToolsOut, shown));
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// The client's `anthropic-beta` list (comma-separated) with `beta` added; `None` when it is
/// there already.
fn with_beta(current: &str, beta: &str) -> Option<String> {
    if current.split(',').any(|b| b.trim() == beta) {
        return None;
    }
    Some(if current.trim().is_empty() {
        beta.to_owned()
    } else {
        format!("{current},{beta}")
    })
}
