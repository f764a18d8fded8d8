//! Hybrid ranking's step of an LLM request's body phase: ranked at once when every vector is
//! cached ([`start`]), else the texts whose vectors are missing go to the embeddings cluster
//! (the adapter sends the call, within `embeddings.timeout_ms`) and the request is ranked with
//! the answer ([`Call::answered`]), or by keyword with the reason.

use super::Ranked;
use crate::config::Config;
use crate::config::embeddings::Embeddings;
use crate::embeddings::{
    Fallback, Gathered, SharedBytes, Slot, Source, VectorCache, answer_vectors,
};
use crate::mcp::exchange::CallAnswer;
use crate::pipeline::Analysis;
use crate::rank::Catalog;

/// How a hybrid-ranked request starts.
pub enum Start {
    /// Ranked already: every vector was known, or it goes on by keyword (and why); with the
    /// tools to embed in background calls meanwhile, when a request's calls may not carry
    /// them (`roles.input_type`).
    Ranked(Ranked, Option<Vec<usize>>),
    /// The request waits for an embeddings call of these texts.
    Call(Call),
}

/// An embeddings call a request waits for.
pub struct Call {
    /// The texts to embed, in the order the answer's vectors fill the slots.
    pub inputs: Vec<String>,
    gathered: Gathered,
    slots: Vec<Slot>,
}

/// What the call's answer came to.
pub struct Answered {
    pub ranked: Ranked,
    /// The call timed out with tool texts in it (too many to embed within `timeout_ms`): the
    /// catalog entries still without a vector, for the worker's calls without a deadline
    /// (`embeddings::BackfillQueue`) while requests go on by keyword.
    pub backfill: Option<Vec<usize>>,
}

/// A worker's vector cache over `store` and the embeddings service's identity in its keys
/// (cluster, authority and path: vectors from another service are never mixed in), with
/// hybrid ranking; `None` with keyword ranking.
pub fn worker_vectors<S: SharedBytes>(
    config: &Config,
    store: S,
) -> Option<(VectorCache<S>, String)> {
    match (&config.ranking, &config.embeddings) {
        (crate::config::Ranking::Hybrid, Some(e)) => Some((
            VectorCache::new(store, e.cache_size, "toolsift.vectors."),
            format!("{}|{}|{}", e.cluster, e.authority(), e.path),
        )),
        _ => None,
    }
}

/// Where hybrid ranking's vectors come from under `config` (`vectors`: the worker's cache and
/// the service's identity in its keys), with the embeddings settings; `None` with keyword
/// ranking.
pub fn source<'a, S>(
    vectors: Option<&'a (VectorCache<S>, String)>,
    config: &'a Config,
) -> Option<(Source<'a, S>, &'a Embeddings)> {
    let (cache, provider) = vectors?;
    let e = config.embeddings.as_ref()?;
    let source = Source {
        provider,
        model: &e.model,
        dimensions: e.dimensions,
        cache,
        roles: e.roles.as_ref(),
        query_sentences: e.query_sentences,
    };
    Some((source, e))
}

/// The answer of a background call (sent on the worker's tick, see
/// [`crate::embeddings::BackfillQueue`]) for `entries` of `catalog`: their vectors cached
/// (`Ok`: how many), or why none was. Vectors must have the configured size, or the size of
/// those the catalog already has.
pub fn backfilled<S: SharedBytes>(
    source: &Source<'_, S>,
    e: &Embeddings,
    catalog: &Catalog,
    entries: &[usize],
    answer: &CallAnswer,
) -> Result<usize, Fallback> {
    let expected = e.dimensions.or(catalog.known_dimensions());
    let vectors = answer_vectors(answer.status, &answer.body, entries.len(), expected)?;
    source.fill_tools(catalog, entries, vectors);
    Ok(entries.len())
}

/// Ranks `analysis` with the cached vectors if every one is known; otherwise says which texts
/// to embed (the question's first, then up to `max_batch` tools unless the catalog's tools are
/// being fetched in the background already).
pub fn start<S: SharedBytes>(
    source: &Source<'_, S>,
    config: &Config,
    e: &Embeddings,
    analysis: &mut Analysis,
) -> Start {
    let gathered = source.gather(&analysis.catalog, &analysis.query);
    if let Some((query, tools)) = gathered.complete() {
        analysis.rank_hybrid(config, &query, &tools);
        return Start::Ranked(Ranked::Hybrid, None);
    }
    let (slots, inputs) = gathered.plan(&analysis.catalog, e.max_batch);
    if inputs.is_empty() {
        // Tools no call is embedding yet go to background calls, when a request's call may
        // not carry them.
        let backfill = (gathered.split() && !gathered.missing_tools.is_empty())
            .then(|| gathered.missing_tools.clone());
        return Start::Ranked(
            if !gathered.tools_known() {
                // The question is known; the tools are still coming in the background (this
                // catalog's fetch, or another catalog's that holds the same tools).
                Ranked::Incomplete
            } else {
                // Everything is known but the sizes disagree: cached under another model.
                Ranked::Fallback(Fallback::Dimensions)
            },
            backfill,
        );
    }
    Start::Call(Call {
        inputs,
        gathered,
        slots,
    })
}

impl Call {
    /// The call's answer as Envoy gave it (`status` `None`: no response, a reset): its
    /// vectors cached and the request ranked with them, or by keyword with the reason. Vectors
    /// must have the configured size, or the size of those already known: a wrong-sized
    /// answer is never cached.
    pub fn answered<S: SharedBytes>(
        mut self,
        source: &Source<'_, S>,
        config: &Config,
        e: &Embeddings,
        analysis: &mut Analysis,
        answer: &CallAnswer,
    ) -> Answered {
        let expected = e.dimensions.or_else(|| self.gathered.known_dimensions());
        let vectors = answer_vectors(answer.status, &answer.body, self.slots.len(), expected);
        let ranked = match vectors {
            Err(reason) => Ranked::Fallback(reason),
            Ok(vectors) => {
                source.fill(&analysis.catalog, &mut self.gathered, &self.slots, vectors);
                if self.gathered.tools_known() {
                    match self.gathered.complete() {
                        Some((query, tools)) => {
                            analysis.rank_hybrid(config, &query, &tools);
                            Ranked::Hybrid
                        }
                        None => Ranked::Fallback(Fallback::Dimensions),
                    }
                } else {
                    Ranked::Incomplete
                }
            }
        };
        let had_tools = self.slots.iter().any(|s| matches!(s, Slot::Tool(_)));
        // A call that timed out hands its tools to background calls; with roles sent as a
        // field, a question's call never carries them, and they go there at once.
        let split = self.gathered.split() && !self.gathered.missing_tools.is_empty();
        let backfill = (ranked == Ranked::Fallback(Fallback::Timeout) && had_tools || split)
            .then_some(self.gathered.missing_tools);
        Answered { ranked, backfill }
    }
}

/// Sends an embeddings call for `inputs` under the settings `e`, bounded by their
/// `timeout_ms`; its token, `None` when the call cannot be made.
pub fn send<P: super::proxy::Proxy>(proxy: &P, e: &Embeddings, inputs: &[&str]) -> Option<u32> {
    let timeout = std::time::Duration::from_millis(e.timeout_ms as u64);
    dispatch(proxy, e, inputs, timeout, Waiting::Request)
        .inspect_err(|status| log::debug!("embeddings call to {} failed: {status:?}", e.cluster))
        .ok()
}

/// The header a background call carries: toolsift-embed serves the calls requests wait for
/// before these (other services ignore it).
pub const BACKGROUND_HEADER: (&str, &str) = ("x-toolsift-priority", "background");

/// Who waits for an embeddings call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waiting {
    /// A request, within `timeout_ms`.
    Request,
    /// Nobody: the worker's background fetch of a catalog's tools ([`BACKGROUND_HEADER`]).
    Nobody,
}

/// Sends one embeddings request; the answer comes to the calling context's
/// `on_http_call_response`, or Envoy answers 504 after `timeout`.
pub fn dispatch<P: super::proxy::Proxy>(
    proxy: &P,
    e: &Embeddings,
    inputs: &[&str],
    timeout: std::time::Duration,
    waiting: Waiting,
) -> Result<u32, super::proxy::Status> {
    // A request's calls carry its question (tools' texts share them only without
    // `roles.input_type`); background calls carry tools' texts.
    let role = e
        .roles
        .as_ref()
        .and_then(|r| r.input_type(waiting == Waiting::Request));
    let body = crate::embeddings::request_body(&e.model, inputs, e.dimensions, role);
    let mut headers: Vec<(&str, &str)> = vec![
        (":method", "POST"),
        (":path", &e.path),
        (":authority", e.authority()),
        ("content-type", "application/json"),
    ];
    if waiting == Waiting::Nobody {
        headers.push(BACKGROUND_HEADER);
    }
    headers.extend(e.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    proxy.dispatch(&e.cluster, headers, body.as_bytes(), timeout)
}
