//! One request body, end to end: dialect → catalog (cached) → ranking → selection → rewrite.
//! Pure Rust, no proxy-wasm: the filter and the CLI run exactly this.

use crate::access::{Caller, Grant, Policy, Surface, Why};
use crate::config::Config;
use crate::dialects::{Choice, Dialect, Entry, Problem, Reader, Request};
use crate::fusion::{self, Channel, Fused, FusionParams};
use crate::json::splice_bytes;
use crate::rank::{Catalog, CatalogCache, FieldWeights, Found, Scored};
use crate::rewrite::{rebuild_container_text, write_container};
use crate::select::{Selection, Verdict, all_allowed, select};
use crate::weak_query::Reading;
use std::borrow::Cow;
use std::ops::Range;
use std::rc::Rc;

/// A list of next tools up to this long is matched against a catalog's names one by one;
/// a longer one through a hash map.
const SHORT_LIST: usize = 16;

/// Why a request went upstream unchanged. The names are part of the stats (`toolsift.skipped.*`)
/// and of the `x-toolsift` header, so they never change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skip {
    /// Not a POST to a known LLM API path.
    NotLlm,
    /// No body.
    NoBody,
    /// The request has no function tools.
    NoTools,
    /// The request has `min_tools` function tools or fewer.
    FewTools,
    MalformedJson,
    /// JSON, but not the shape of its dialect.
    BadShape,
    /// Larger than `max_body_bytes`.
    TooLarge,
    /// `content-encoding` other than identity.
    Compressed,
    /// A `content-type` that is not JSON.
    ContentType,
    /// A host call failed; never expected.
    Internal,
    /// Signed by the client (AWS SigV4 covers the payload): a rewritten body would fail the
    /// signature check, so it goes upstream as it is (`rewrite_signed` changes that).
    Signed,
    /// The request carries the provider's own tool search (its search tool, Responses
    /// namespaces, or tools it loaded in the conversation): the provider must see every tool.
    NativeSearch,
}

impl Skip {
    pub const ALL: [Skip; 12] = [
        Skip::NotLlm,
        Skip::NoBody,
        Skip::NoTools,
        Skip::FewTools,
        Skip::MalformedJson,
        Skip::BadShape,
        Skip::TooLarge,
        Skip::Compressed,
        Skip::ContentType,
        Skip::Internal,
        Skip::Signed,
        Skip::NativeSearch,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Skip::NotLlm => "not_llm",
            Skip::NoBody => "no_body",
            Skip::NoTools => "no_tools",
            Skip::FewTools => "few_tools",
            Skip::MalformedJson => "malformed_json",
            Skip::BadShape => "bad_shape",
            Skip::TooLarge => "too_large",
            Skip::Compressed => "compressed",
            Skip::ContentType => "content_type",
            Skip::Internal => "internal",
            Skip::Signed => "signed",
            Skip::NativeSearch => "native_search",
        }
    }

    /// Errors are requests toolsift should have been able to read; `on_error` applies to them.
    /// The others are requests with nothing to do.
    pub fn is_error(self) -> bool {
        !matches!(
            self,
            Skip::NotLlm
                | Skip::NoBody
                | Skip::NoTools
                | Skip::FewTools
                | Skip::Signed
                | Skip::NativeSearch
        )
    }
}

impl From<Problem> for Skip {
    fn from(p: Problem) -> Skip {
        match p {
            Problem::MalformedJson => Skip::MalformedJson,
            Problem::BadShape => Skip::BadShape,
        }
    }
}

impl From<crate::custom::ReadError> for Skip {
    fn from(e: crate::custom::ReadError) -> Skip {
        match e {
            crate::custom::ReadError::MalformedJson => Skip::MalformedJson,
            crate::custom::ReadError::NoTools => Skip::NoTools,
            crate::custom::ReadError::BadShape => Skip::BadShape,
            crate::custom::ReadError::Internal => Skip::Internal,
        }
    }
}

/// A request that passed through, and how many function tools it had if that is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Skipped {
    pub reason: Skip,
    pub tools: Option<usize>,
}

impl From<Skip> for Skipped {
    fn from(reason: Skip) -> Skipped {
        Skipped {
            reason,
            tools: None,
        }
    }
}

impl From<Problem> for Skipped {
    fn from(p: Problem) -> Skipped {
        Skip::from(p).into()
    }
}

impl From<crate::custom::ReadError> for Skipped {
    fn from(e: crate::custom::ReadError) -> Skipped {
        Skip::from(e).into()
    }
}

/// Everything decided about one body.
pub struct Analysis {
    /// What read the body: its dialect, or the custom request shape.
    pub reader: Reader,
    pub query: String,
    pub catalog: Rc<Catalog>,
    /// The catalog index came from the cache.
    pub cache_hit: bool,
    pub selection: Selection,
    /// The `top_k` the selection keeps: the configured one, or `auto_k`'s for the catalog.
    pub top_k: usize,
    /// With `auto_k`: the k chosen for the catalog, and where it came from.
    pub auto_k: Option<crate::auto_k::Chosen>,
    /// What the ranking could read of the question ([`crate::weak_query`]).
    pub reading: Reading,
    /// The question was too weak to rank by (its reading fell short of `weak_query`'s, and no
    /// embedding read it with confidence): its tools went as `weak_query.action` says.
    pub weak: bool,
    /// Where the tools container sits in the body.
    pub container: Range<usize>,
    pub stream: bool,
    pub choice: Choice,
    pub called: Vec<String>,
    /// The tools the fleet called next after the history's calls (`auto_k.calibration
    /// .transitions`): catalog entries the caller may see, best first, with their summed
    /// counts. Empty for a first turn or a history with no known transition.
    pub next: Vec<(usize, u64)>,
    /// The channels' votes when the ranking is hybrid.
    pub fused: Option<Rc<Fused>>,
    /// A custom request whose tools are text tags: how its strings are rewritten (`container`
    /// then spans them).
    pub text_edit: Option<crate::custom::TextEdit>,
    /// With access rules: what the caller may see.
    pub access: Option<Governed>,
    /// Tools the loop guard took out of this request: the agent called them in a loop.
    pub evicted: Vec<String>,
    /// Tools the loop guard found looping, evicted or (`report_only`) not.
    pub looping: Vec<String>,
    /// The model's calls, in its latest turn, of tools the request does not carry (made-up
    /// names), one per call: filter mode counts and reports them.
    pub unknown: Vec<String>,
    /// With `loop_guard.note`: the evicted tools whose latest result takes the guidance note,
    /// and where. The only bytes toolsift changes outside the tools array.
    pub notes: Vec<Noted>,
    /// The request carries the provider's own tool search: only access rules take tools out
    /// (it reaches this far only when they deny some; otherwise it is skipped).
    pub native_search: bool,
    /// The session the dialect's own fields name (see [`crate::dialects::Request::session`]).
    pub session: Option<String>,
    /// The model the body names ([`Request::model`]).
    pub model: Option<String>,
}

/// The loop guard's note for one evicted tool: an insertion into the request body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Noted {
    pub tool: String,
    /// Where, in the body (an empty range: nothing the client wrote is replaced, except a
    /// `null` content, which the note becomes).
    pub at: Range<usize>,
    /// The JSON text written there.
    pub text: String,
}

/// What access rules decided for one request.
#[derive(Debug, Clone)]
pub struct Governed {
    pub grant: Grant,
    /// Per catalog entry: the caller may see it (built-ins always).
    pub allowed: Rc<[bool]>,
    /// Tools the caller may not see (function tools and named built-ins), which never go
    /// upstream.
    pub denied: usize,
    /// Of those, the function tools.
    pub denied_functions: usize,
    /// The request is refused as a whole (HTTP 403): no identity, no tool it may see, or
    /// (with `denied: "refused"`) a `tool_choice` naming a denied tool.
    pub denial: Option<Denial>,
}

/// Why a request is refused by access rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// The tool the refusal is about, if one.
    pub tool: Option<String>,
    pub why: Why,
}

impl Denial {
    /// The message the client reads.
    pub fn message(&self) -> String {
        match (&self.tool, &self.why) {
            (_, Why::NoIdentity) => {
                "toolsift: access denied: the request carries no caller identity".to_owned()
            }
            (Some(tool), why) => format!("toolsift: access denied: tool `{tool}`: {why}"),
            (None, _) => {
                "toolsift: access denied: no tool of this request is allowed for this caller"
                    .to_owned()
            }
        }
    }

    /// The 403 body, in the OpenAI error shape most clients parse (as `on_error: reject`'s).
    pub fn body(&self) -> String {
        serde_json::json!({
            "error": {
                "type": "toolsift_error",
                "code": "access_denied",
                "message": self.message(),
            }
        })
        .to_string()
    }
}

impl Analysis {
    /// The body's dialect; `None` for a custom request shape, to which no dialect's own code
    /// (search mode, `_tool_gating` claims, the `tool_choice` writers) applies.
    pub fn dialect(&self) -> Option<Dialect> {
        self.reader.dialect()
    }

    pub fn total(&self) -> usize {
        self.selection.decisions.len()
    }

    pub fn kept(&self) -> usize {
        self.selection.kept_count()
    }

    /// Names of the kept function tools, best ranked first.
    pub fn kept_names(&self) -> Vec<&str> {
        self.selection
            .decisions
            .iter()
            .filter(|d| d.verdict.kept())
            .filter_map(|d| self.catalog.name(d.entry))
            .collect()
    }

    /// Ranks again with every channel of hybrid ranking, given the query's vectors and every
    /// tool's, and selects again.
    pub fn rank_hybrid(&mut self, config: &Config, query: &[&[f32]], tools: &[Option<&[f32]>]) {
        // Every turn of an agent loop asks the same question of the same catalog: its fused
        // ranking is remembered like the keyword one.
        let fused = self
            .catalog
            .remembered_fusion(&self.query)
            .unwrap_or_else(|| {
                let fused = Rc::new(rank_fused(&self.catalog, config, &self.query, query, tools));
                self.catalog.remember_fusion(&self.query, Rc::clone(&fused));
                fused
            });
        // A question the keywords could not read is read when its embeddings match a tool
        // with confidence: it is cut as any other.
        if self.weak && crate::weak_query::dense_confident(&best_cosines(query, tools)) {
            self.weak = false;
        }
        self.selection = self.select(config, &self.with_next(config, &fused.order));
        self.fused = Some(fused);
    }

    /// `ranking` with the transitions' next tools fused in ([`crate::transitions::fuse`]);
    /// `ranking` itself when the history named none.
    pub fn with_next<'a>(&self, config: &Config, ranking: &'a [Scored]) -> Cow<'a, [Scored]> {
        if self.next.is_empty() {
            return Cow::Borrowed(ranking);
        }
        let next: Vec<usize> = self.next.iter().map(|(entry, _)| *entry).collect();
        Cow::Owned(crate::transitions::fuse(
            ranking,
            &next,
            config.channel_weights.transitions,
            crate::transitions::RRF_K,
        ))
    }

    /// The kept tools the transitions brought in: those the ranking alone would not have
    /// kept (`next=` of `x-toolsift`), in rank order. Empty when the history named none.
    pub fn brought_in(&self, config: &Config) -> Vec<String> {
        // Every filtered request asks: most have no list, and nothing to look at.
        if self.next.is_empty() {
            return Vec::new();
        }
        // Kept by rank and listed: a pinned tool is kept either way.
        let listed = |entry: usize| self.next.iter().any(|(e, _)| *e == entry);
        let candidates: Vec<usize> = (self.selection.decisions.iter())
            .filter(|d| d.verdict == Verdict::Ranked && listed(d.entry))
            .map(|d| d.entry)
            .collect();
        if candidates.is_empty() {
            return Vec::new();
        }
        let remembered;
        let alone: &[Scored] = match &self.fused {
            Some(fused) => &fused.order,
            None => {
                remembered = self.catalog.rank(&self.query);
                &remembered
            }
        };
        let kept_alone: Vec<usize> = if config.min_score.is_none()
            && config.max_tool_tokens.is_none()
            && self.evicted.is_empty()
        {
            // Without `min_score` and a budget, the selection keeps a tool by rank when fewer
            // than k tools the caller may see rank before it: one pass, no second selection.
            let k = self.selected_k(config);
            let allowed = self.access.as_ref().map(|g| &*g.allowed);
            let visible = |e: usize| allowed.is_none_or(|a| a.get(e).copied().unwrap_or(false));
            alone
                .iter()
                .filter(|s| visible(s.entry))
                .take(k)
                .map(|s| s.entry)
                .collect()
        } else {
            let alone = self.select(config, alone);
            let kept = alone.decisions.iter().filter(|d| d.verdict.kept());
            kept.map(|d| d.entry).collect()
        };
        candidates
            .into_iter()
            .filter(|e| !kept_alone.contains(e))
            .filter_map(|e| self.catalog.name(e).map(str::to_owned))
            .collect()
    }

    /// The k the selection keeps: `top_k` (or `auto_k`'s), or what `weak_query` gives a weak
    /// question.
    pub fn selected_k(&self, config: &Config) -> usize {
        if self.weak {
            config.weak_query.keep(self.top_k)
        } else {
            self.top_k
        }
    }

    /// The k the selection kept, as the shadow record states it: `top_k` (or `auto_k`'s),
    /// or a weak question's bound when it had one.
    pub fn selected_k_or_top_k(&self) -> usize {
        if self.weak {
            self.selection.kept_count().max(self.top_k)
        } else {
            self.top_k
        }
    }

    /// `auto_k`'s choice, when the selection used it: a weak question's k is not the
    /// catalog's, and it teaches `auto_k` nothing.
    pub fn auto_k_used(&self) -> Option<crate::auto_k::Chosen> {
        self.auto_k.filter(|_| !self.weak)
    }

    /// `x-toolsift`'s part for a weak question: ` weak=0/9` (of the question's content terms,
    /// how many the catalog has).
    pub fn weak_suffix(&self) -> Option<String> {
        self.weak.then(|| self.reading.describe())
    }

    /// Selects from `ranking` under `config`, for this request's pins and what its caller may
    /// see.
    pub fn select(&self, config: &Config, ranking: &[crate::rank::Scored]) -> Selection {
        if self.weak && config.weak_query.action == crate::weak_query::Action::Pass {
            let allowed = self.access.as_ref().map(|g| &*g.allowed);
            return all_allowed(&self.catalog, ranking, allowed, &self.evicted);
        }
        select_for(
            config,
            self.selected_k(config),
            &self.catalog,
            ranking,
            &self.choice,
            &self.called,
            self.access.as_ref(),
            &self.evicted,
        )
    }

    /// Shadow ranking: from here on the request carries every tool its caller may see, with
    /// nothing evicted or noted by the loop guard; returns the selection that would have been
    /// applied (which [`crate::shadow::Scorecard`] measures the answer against).
    pub fn shadow(&mut self) -> Selection {
        let would = self.selection.clone();
        for d in &mut self.selection.decisions {
            if !d.verdict.kept() && d.verdict != Verdict::Denied {
                d.verdict = Verdict::Shadow;
            }
        }
        let allowed = self.access.as_ref().map(|g| &*g.allowed);
        for (entry, keep) in self.selection.keep.iter_mut().enumerate() {
            *keep = allowed.is_none_or(|a| a.get(entry).copied().unwrap_or(true));
        }
        self.evicted.clear();
        self.notes.clear();
        would
    }

    /// Whether the request's caller may see tool `name` (always, without access rules).
    pub fn may_see(&self, name: &str) -> bool {
        self.access
            .as_ref()
            .is_none_or(|g| g.grant.shows(name, &crate::access::Annotations::default()))
    }

    /// The first tool of the request its caller may not see, as a refusal naming it (a signed
    /// request, which cannot be rewritten, is refused so).
    pub fn first_denial(&self) -> Option<Denial> {
        let governed = self.access.as_ref()?;
        let entry = (0..governed.allowed.len()).find(|&e| {
            self.catalog.governed(e) && !governed.allowed.get(e).copied().unwrap_or(false)
        })?;
        let name = self.catalog.governed_name(entry)?.to_owned();
        match governed
            .grant
            .tool(&name, &crate::access::Annotations::default())
        {
            crate::access::Decision::Denied(why) => Some(Denial {
                tool: Some(name),
                why,
            }),
            crate::access::Decision::Allowed => None,
        }
    }

    /// Tools the caller may not see (0 without access rules).
    pub fn denied(&self) -> usize {
        self.access.as_ref().map_or(0, |g| g.denied)
    }

    /// Kept tools in rank order, each with the channels that voted for it when the ranking is
    /// hybrid: `get_weather(bm25=1:7.3 vector=2:0.61),search_web(…)`.
    pub fn explain_kept(&self) -> String {
        self.selection
            .decisions
            .iter()
            .filter(|d| d.verdict.kept())
            .filter_map(|d| {
                let name = header_safe(self.catalog.name(d.entry)?);
                let channels = self.fused.as_ref().and_then(|f| f.votes_for(d.entry));
                let channels = channels.map(fusion::describe);
                // The transitions' vote: the tool's place in their list, and its count.
                let next = self
                    .next
                    .iter()
                    .enumerate()
                    .find(|(_, (e, _))| *e == d.entry);
                let next = next.map(|(place, (_, count))| format!("next={}:{count}", place + 1));
                Some(match (channels, next) {
                    (None, None) => name.into_owned(),
                    (Some(channels), None) => format!("{name}({channels})"),
                    (channels, Some(next)) => {
                        let votes: Vec<String> =
                            channels.into_iter().filter(|c| !c.is_empty()).collect();
                        format!("{name}({})", [votes, vec![next]].concat().join(" "))
                    }
                })
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Estimated tokens of the function tools before and after selection.
    pub fn tokens_before_after(&self) -> (usize, usize) {
        let (kept, total) = self.selection.tokens(&self.catalog);
        (total, kept)
    }

    /// The body with the dropped tools spliced out, or `None` when every tool is kept (the
    /// original body then goes upstream as it is).
    pub fn rewrite(&self, body: &str) -> Option<String> {
        let (head, replaced) = self.rewrite_head(body.as_bytes())?;
        let mut out = String::from_utf8(head).ok()?;
        out.push_str(body.get(replaced..)?);
        Some(out)
    }

    /// What replaces the body's first bytes, up to the end of the tools array (or of the last
    /// guidance note, when one comes after it): the rewritten head, and the length of the
    /// original head it replaces. `None` when every tool is kept and nothing is noted. The
    /// rest of the body is unchanged, so a host that can replace a prefix in place (Envoy)
    /// needs no more.
    pub fn rewrite_head(&self, body: &[u8]) -> Option<(Vec<u8>, usize)> {
        if let Some(edit) = &self.text_edit {
            let body = std::str::from_utf8(body).ok()?;
            let (head, replaced) = edit.rewrite_head(body, &self.selection.keep)?;
            return Some((head.into_bytes(), replaced));
        }
        let all_kept = self.selection.keep.iter().all(|k| *k);
        if self.notes.is_empty() {
            if all_kept {
                return None;
            }
            // The head and the kept tools written into one buffer, sized for the whole array.
            let head = body.get(..self.container.start)?;
            let container = body.get(self.container.clone())?;
            let mut out = Vec::with_capacity(head.len() + container.len());
            out.extend_from_slice(head);
            write_container(
                container,
                &self.catalog.draft,
                &self.selection.keep,
                &mut out,
            );
            return Some((out, self.container.end));
        }
        let tools = if all_kept {
            None
        } else {
            Some(self.rebuilt_tools(body)?)
        };
        let mut patches = self.note_patches();
        patches.extend(tools.map(|t| (self.container.clone(), t)));
        let end = patches.iter().map(|(at, _)| at.end).max()?;
        let head = std::str::from_utf8(body.get(..end)?).ok()?;
        let out = crate::dialects::shared::splice::apply_patches(head, patches)?;
        Some((out.into_bytes(), end))
    }

    /// The body with its tools container replaced by `tools` and the guidance notes written:
    /// search mode's first request.
    pub fn with_tools(&self, body: &str, tools: &str) -> Option<String> {
        let mut patches = self.note_patches();
        patches.push((self.container.clone(), tools.to_owned()));
        crate::dialects::shared::splice::apply_patches(body, patches)
    }

    fn note_patches(&self) -> Vec<(Range<usize>, String)> {
        self.notes
            .iter()
            .map(|n| (n.at.clone(), n.text.clone()))
            .collect()
    }

    /// The tools container with the kept tools only.
    fn rebuilt_tools(&self, body: &[u8]) -> Option<String> {
        // The notes' patches are text.
        rebuild_container_text(
            body.get(self.container.clone())?,
            &self.catalog.draft,
            &self.selection.keep,
        )
    }
}

/// The guidance notes for the `evicted` tools, each on its latest result in `text` (the body
/// with its tools array, at `tools`, written `null`), placed in the body. A result that is not
/// found or takes no note gets none: the tool is evicted all the same.
fn notes(
    dialect: Dialect,
    note: &crate::loop_guard::Note,
    evicted: &[String],
    text: &str,
    tools: Range<usize>,
) -> Vec<Noted> {
    let null_end = tools.start + "null".len();
    // Places after the `null` move to after the tools array.
    let to_body = |at: Range<usize>| -> Option<Range<usize>> {
        if at.end <= tools.start {
            Some(at)
        } else if at.start >= null_end {
            Some(at.start - null_end + tools.end..at.end - null_end + tools.end)
        } else {
            None
        }
    };
    let mut out: Vec<Noted> = Vec::new();
    for tool in evicted {
        let found = dialect
            .codec()
            .note_result(text, tool, &note.text_for(tool));
        let Some((at, written)) = found else {
            continue;
        };
        let Some(at) = to_body(at) else {
            continue;
        };
        // Two tools answered by one result (never seen): the first note only.
        let clash =
            |n: &Noted| n.at.start == at.start || (n.at.start < at.end && at.start < n.at.end);
        if out.iter().any(clash) {
            continue;
        }
        out.push(Noted {
            tool: tool.clone(),
            at,
            text: written,
        });
    }
    out
}

/// The calls in `latest` (names the model called in its latest turn) of tools `catalog` does
/// not hold, neither as function tools nor as named built-ins: names the model made up.
fn unknown_calls(latest: &[String], catalog: &Catalog) -> Vec<String> {
    let entries = catalog.draft.entries.len();
    let known = |name: &str| (0..entries).any(|e| catalog.governed_name(e) == Some(name));
    latest.iter().filter(|name| !known(name)).cloned().collect()
}

/// [`select`] with what the caller may see.
#[allow(clippy::too_many_arguments)] // the selection's whole setting, spelled out
fn select_for(
    config: &Config,
    top_k: usize,
    catalog: &Catalog,
    ranking: &[crate::rank::Scored],
    choice: &Choice,
    called: &[String],
    access: Option<&Governed>,
    evicted: &[String],
) -> Selection {
    let allowed = access.map(|g| &*g.allowed);
    select(
        config, top_k, catalog, ranking, choice, called, allowed, evicted,
    )
}

/// What `grant` lets its caller see of `catalog`, and whether the request is refused: decided,
/// recorded on the `tools` and `request` surfaces, and carried out unless in audit mode.
fn govern(grant: &Grant, catalog: &Catalog, choice: &Choice) -> Governed {
    let none = crate::access::Annotations::default();
    let entry = |e: usize| catalog.governed_name(e).map(|name| (name, none));
    let decided = catalog.allowed_for(grant);
    let denial = refusal(grant, catalog, choice, &decided);
    let allowed = grant.judge_mask(Surface::Tools, Rc::clone(&decided), entry);
    // The shadow's mask one by one: the catalog's caches belong to the enforced policy's rules.
    let shadow = |s: &Grant| {
        let mask: Vec<bool> = (0..decided.len())
            .map(|e| entry(e).is_none_or(|(name, a)| s.tool(name, &a).allowed()))
            .collect();
        refusal(s, catalog, choice, &mask).map(|d| d.why)
    };
    let tool = denial.as_ref().and_then(|d| d.tool.clone());
    let denial = grant
        .judge_request(
            Surface::Request,
            tool.as_deref(),
            denial.map(|d| d.why),
            shadow,
        )
        .map(|why| Denial { tool, why });
    let governed = || (0..allowed.len()).filter(|&e| catalog.governed(e));
    let may_use = |e: usize| allowed.get(e).copied().unwrap_or(false);
    let denied = governed().filter(|&e| !may_use(e)).count();
    let denied_functions = catalog
        .draft
        .entries
        .iter()
        .zip(allowed.iter())
        .filter(|(e, a)| matches!(e, Entry::Function(_)) && !**a)
        .count();
    Governed {
        grant: grant.clone(),
        allowed,
        denied,
        denied_functions,
        denial,
    }
}

/// Whether `grant`'s policy refuses the request whole, given what it lets the caller see of
/// `catalog` (`allowed`).
fn refusal(grant: &Grant, catalog: &Catalog, choice: &Choice, allowed: &[bool]) -> Option<Denial> {
    let governed = || (0..allowed.len()).filter(|&e| catalog.governed(e));
    let may_use = |e: usize| allowed.get(e).copied().unwrap_or(false);
    let none = crate::access::Annotations::default();
    if governed().any(|e| !may_use(e)) && governed().all(|e| !may_use(e)) {
        // Not one tool left: never a model called with none (a permission problem would look
        // like a quality problem).
        let why = if grant.is_identified() {
            Why::Default
        } else {
            Why::NoIdentity
        };
        Some(Denial { tool: None, why })
    } else if grant.denied_mode() == crate::access::config::Denied::Refused {
        // A tool_choice naming a denied tool is a denial, not a pin. (Hidden: the tool is
        // gone, and the provider answers as for any tool the request does not have.)
        choice
            .named
            .iter()
            .find_map(|name| match grant.tool(name, &none) {
                crate::access::Decision::Denied(why) => Some(Denial {
                    tool: Some(name.clone()),
                    why,
                }),
                crate::access::Decision::Allowed => None,
            })
    } else {
        None
    }
}

/// The fusion parameters of hybrid ranking under `config`.
pub fn fusion_params(config: &Config) -> FusionParams {
    FusionParams {
        k: config.rrf_k,
        weights: config.channel_weights.as_array(),
    }
}

/// [`fusion_params`] for a question of `reading`: the keyword channels weigh what the
/// question lets them read (`weak_query.full_coverage`).
fn fusion_params_for(config: &Config, reading: Reading) -> FusionParams {
    let mut params = fusion_params(config);
    let share = config.weak_query.lexical_share(reading);
    if share < 1.0 {
        for channel in [Channel::Bm25, Channel::Exact, Channel::ParamKeys] {
            if let Some(w) = params.weights.get_mut(channel as usize) {
                *w *= share;
            }
        }
    }
    params
}

/// Each tool's best cosine with the question's vectors (tools without a vector left out).
pub fn best_cosines(query: &[&[f32]], tools: &[Option<&[f32]>]) -> Vec<f32> {
    tools
        .iter()
        .flatten()
        .map(|v| {
            query
                .iter()
                .map(|q| crate::fusion::dot(q, v))
                .fold(f32::NEG_INFINITY, f32::max)
        })
        .collect()
}

/// Hybrid ranking of `catalog` for `query`, given the query's vectors and every entry's: what
/// [`Analysis::rank_hybrid`] ranks by, and what `toolsift eval` ranks by with embeddings.
pub fn rank_fused(
    catalog: &Catalog,
    config: &Config,
    query: &str,
    query_vectors: &[&[f32]],
    tool_vectors: &[Option<&[f32]>],
) -> Fused {
    // The channels read the query's own words: what only orders keyword ties
    // (`followup::own_words`) would have every channel vote for the earlier question's tools.
    let query = crate::followup::own_words(query);
    fusion::rank(
        &catalog.index,
        &catalog.lexicon,
        catalog.draft.entries.len(),
        query,
        // Remembered from the keyword ranking the request already had.
        &catalog.rank(query),
        Some((query_vectors, tool_vectors)),
        &fusion_params_for(config, Reading::of(&catalog.index, query)),
    )
}

/// [`rank_fused`] of the function tools `allowed` marks (per entry; `None`: all), every channel
/// reading their statistics alone (BM25's and the lexical channels' IDF, each channel's
/// ranks): the ranking a catalog of only those tools gives, entries numbered as in `catalog`.
/// A search under access rules ranks so, as [`Catalog::rank_among`] does by keyword: the order
/// a caller sees never depends on tools it may not see.
pub fn rank_fused_among(
    catalog: &Catalog,
    config: &Config,
    query: &str,
    query_vectors: &[&[f32]],
    tool_vectors: &[Option<&[f32]>],
    allowed: Option<&[bool]>,
) -> Fused {
    let Some((index, lexicon)) = allowed.and_then(|a| catalog.among(a)) else {
        return rank_fused(catalog, config, query, query_vectors, tool_vectors);
    };
    let query = crate::followup::own_words(query);
    fusion::rank(
        &index,
        &lexicon,
        catalog.draft.entries.len(),
        query,
        &index.rank(query),
        Some((query_vectors, tool_vectors)),
        &fusion_params_for(config, Reading::of(&index, query)),
    )
}

/// The request headers that decide whether toolsift reads a request at all.
#[derive(Debug, Default, Clone)]
pub struct RequestHeaders<'a> {
    pub method: Option<&'a str>,
    pub path: Option<&'a str>,
    pub content_encoding: Option<&'a str>,
    pub content_type: Option<&'a str>,
    pub content_length: Option<&'a str>,
    /// The request carries an AWS SigV4 signature (header or presigned query).
    pub signed: bool,
    /// The request has no body.
    pub end_of_stream: bool,
}

/// What a header value that is not UTF-8 reads as: a value no check accepts (not `POST`, not an
/// API path, not `identity`, not JSON). Header values are client bytes, and a `content-type`
/// with a stray byte is no JSON request toolsift should rewrite.
pub const NOT_TEXT: &str = "\u{FFFD}";

impl<'a> RequestHeaders<'a> {
    /// The screening's headers among a request's, as the host gives them (names are lower
    /// case in Envoy), borrowed.
    pub fn from_map(map: &'a crate::pairs::HeaderMap, end_of_stream: bool) -> RequestHeaders<'a> {
        let text = |name: &str| {
            map.get(name)
                .map(|v| std::str::from_utf8(v).unwrap_or(NOT_TEXT))
        };
        let path = text(":path");
        let sigv4 = |v: &str| v.trim_start().starts_with("AWS4-HMAC-SHA256");
        let signed = text("authorization").is_some_and(sigv4)
            || path
                .and_then(|p| p.split_once('?'))
                .is_some_and(|(_, query)| query.contains("X-Amz-Signature="));
        RequestHeaders {
            method: text(":method"),
            path,
            content_encoding: text("content-encoding"),
            content_type: text("content-type"),
            content_length: text("content-length"),
            signed,
            end_of_stream,
        }
    }

    /// The dialect to read the body as, or why the request goes through unread.
    pub fn screen(&self, config: &Config) -> Result<Dialect, Skip> {
        if self.method != Some("POST") {
            return Err(Skip::NotLlm);
        }
        let path = self.path.unwrap_or_default();
        let dialect = config.dialect.resolve(path).ok_or(Skip::NotLlm)?;
        self.screen_body(config)?;
        Ok(dialect)
    }

    /// Whether the path is none toolsift recognises: no LLM API's (as `dialect` resolves it),
    /// and not a custom route's (MCP routes are recognised before). Whatever the method.
    pub fn unknown_path(&self, config: &Config) -> bool {
        let path = self.path.unwrap_or_default();
        let custom = config.custom.as_ref().is_some_and(|c| c.matches(path));
        !custom && config.dialect.resolve(path).is_none()
    }

    /// Like [`RequestHeaders::screen`] for a request on a custom route (`custom.paths`, which
    /// win over the dialects' paths); `None` when it is not on one.
    pub fn screen_custom(&self, config: &Config) -> Option<Result<(), Skip>> {
        let path = self.path.unwrap_or_default();
        if !config.custom.as_ref()?.matches(path) {
            return None;
        }
        if self.method != Some("POST") {
            return Some(Err(Skip::NotLlm));
        }
        Some(self.screen_body(config))
    }

    /// Whether the body of a request toolsift may read can be read.
    fn screen_body(&self, config: &Config) -> Result<(), Skip> {
        if self.end_of_stream {
            return Err(Skip::NoBody);
        }
        // Under access rules a signed request is read (and refused if it carries a denied
        // tool, since it cannot be rewritten).
        if self.signed && !config.rewrite_signed && config.access.is_none() {
            return Err(Skip::Signed);
        }
        if let Some(encoding) = self.content_encoding {
            if !encoding.trim().eq_ignore_ascii_case("identity") {
                return Err(Skip::Compressed);
            }
        }
        if let Some(content_type) = self.content_type {
            if !is_json(content_type) {
                return Err(Skip::ContentType);
            }
        }
        if let Some(length) = self.content_length {
            if length
                .trim()
                .parse::<usize>()
                .is_ok_and(|n| n > config.max_body_bytes)
            {
                return Err(Skip::TooLarge);
            }
        }
        Ok(())
    }
}

/// `application/json`, `application/json; charset=utf-8`, `application/vnd.foo+json`.
fn is_json(content_type: &str) -> bool {
    let media = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    media == "application/json" || media.ends_with("+json")
}

/// The `x-toolsift` header: `kept=5 total=60`, `kept=12 total=12 skipped=few_tools`, or
/// `skipped=compressed` when the tools were never counted.
pub fn header_value(kept: usize, total: usize, skipped: Option<&Skipped>) -> String {
    match skipped {
        None => format!("kept={kept} total={total}"),
        Some(Skipped {
            reason,
            tools: Some(n),
        }) => format!("kept={n} total={n} skipped={}", reason.name()),
        Some(Skipped {
            reason,
            tools: None,
        }) => format!("skipped={}", reason.name()),
    }
}

/// A name from a request (a tool name) as it may appear in a response header: letters, digits
/// and `_-.:/@+~` as they are, every other byte percent-encoded. Names are client data: raw, a
/// `\r\n` would split the response, and `,` `(` ` ` would break the header's lists.
pub fn header_safe(name: &str) -> std::borrow::Cow<'_, str> {
    let safe = |b: u8| b.is_ascii_alphanumeric() || b"_-.:/@+~".contains(&b);
    if name.bytes().all(safe) {
        return std::borrow::Cow::Borrowed(name);
    }
    let mut out = String::with_capacity(name.len() + 8);
    for b in name.bytes() {
        if safe(b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    std::borrow::Cow::Owned(out)
}

/// [`header_safe`]'s inverse: `%XX` sequences decoded (an invalid one kept as it is), bytes that are not UTF-8 replaced.
pub fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let hex = |j: usize| bytes.get(j).and_then(|c| char::from(*c).to_digit(16));
        match (b, hex(i + 1), hex(i + 2)) {
            (b'%', Some(high), Some(low)) => {
                out.push(u8::try_from(high * 16 + low).unwrap_or(b'?'));
                i += 3;
            }
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The JSON error body of `on_error: reject`, in the OpenAI error shape most clients parse.
pub fn error_body(reason: Skip) -> String {
    let message = match reason {
        Skip::MalformedJson => "the request body is not valid JSON",
        Skip::BadShape => "the request body is not a request of this API",
        Skip::TooLarge => "the request body is larger than max_body_bytes",
        Skip::Compressed => "compressed request bodies cannot be filtered",
        Skip::ContentType => "the request body is not JSON",
        _ => "the request could not be filtered",
    };
    serde_json::json!({
        "error": {
            "type": "toolsift_error",
            "code": reason.name(),
            "message": format!("toolsift: {message}"),
        }
    })
    .to_string()
}

/// A request body as text; JSON is UTF-8, so anything else is malformed.
pub fn body_text(body: &[u8]) -> Result<&str, Skipped> {
    std::str::from_utf8(body).map_err(|_| Skip::MalformedJson.into())
}

/// The configuration and the per-worker catalog cache.
pub struct Engine {
    pub config: Config,
    pub weights: FieldWeights,
    cache: CatalogCache,
    /// The `custom` section, compiled.
    custom: Option<crate::custom::Shape>,
    /// The `access` section, compiled.
    policy: Option<Rc<Policy>>,
    /// `gating.rules`, compiled (empty without them).
    gating_rules: crate::gating::Rules,
    /// The `loop_guard` section, compiled.
    loop_guard: Option<crate::loop_guard::LoopGuard>,
    /// The `suggestions` catalog: its inline tools, and the suggestion server's once fetched.
    suggestions: Option<Rc<crate::suggestions::Suggestions>>,
    /// `auto_k`: this worker's side of the VM's calibration, and the period's table it read.
    pub auto_k: Option<crate::auto_k::AutoK>,
    /// The calibration's transitions, indexed (`None` without any, or with
    /// `channel_weights.transitions` 0).
    next_tools: Option<crate::transitions::NextTools>,
}

impl Engine {
    pub fn new(config: Config) -> Engine {
        let cache = CatalogCache::new(config.catalog_cache_size, config.catalog_cache_bytes);
        let custom = config.custom.as_ref().and_then(crate::custom::Shape::new);
        // A configuration that reached here was checked: its policy compiles.
        let policy = config.policy().ok().flatten().map(Rc::new);
        let loop_guard = config.loop_guard().ok().flatten();
        let gating_rules = config
            .gating
            .as_ref()
            .and_then(|g| crate::gating::Rules::new(&g.rules).ok())
            .unwrap_or_default();
        let suggestions = config
            .suggestions
            .as_ref()
            .map(|s| Rc::new(crate::suggestions::Suggestions::new(s, Vec::new())));
        let auto_k = config.auto_k.as_ref().map(|a| {
            // What a slot means besides `auto_k`'s own settings: a calibration learned under
            // another ranking is another's.
            let ranking = [
                ("ranking", format!("{:?}", config.ranking)),
                ("channel_weights", format!("{:?}", config.channel_weights)),
            ];
            crate::auto_k::AutoK::new(a.clone(), config.top_k, &ranking)
        });
        let next_tools = config
            .auto_k
            .as_ref()
            .and_then(|a| a.calibration.as_ref()?.transitions.as_ref())
            .filter(|_| config.channel_weights.transitions > 0.0)
            .map(crate::transitions::NextTools::new)
            .filter(|n| !n.is_empty());
        Engine {
            config,
            weights: FieldWeights::default(),
            next_tools,
            cache,
            custom,
            policy,
            gating_rules,
            loop_guard,
            suggestions,
            auto_k,
        }
    }

    /// The tools the calibration's transitions name after `called` (the history's calls) in
    /// `catalog`, as entries the caller may see (`allowed`), best first with their counts: a
    /// name the catalog lacks, or a tool the caller may not see, takes no place.
    fn next_entries(
        &self,
        catalog: &Catalog,
        called: &[String],
        allowed: Option<&[bool]>,
    ) -> Vec<(usize, u64)> {
        let Some(index) = &self.next_tools else {
            return Vec::new();
        };
        let list = index.next(catalog.id(), called);
        if list.is_empty() {
            return Vec::new();
        }
        // Every catalog name is looked up: a short list (most are a few tools) is compared
        // name by name, lengths first, which costs less than hashing every name.
        let place: std::collections::HashMap<&str, usize> = if list.len() > SHORT_LIST {
            list.iter()
                .enumerate()
                .map(|(i, (name, _))| (*name, i))
                .collect()
        } else {
            std::collections::HashMap::new()
        };
        // Most catalog names differ in length from every listed one: a mask of the listed
        // lengths (modulo 64) passes over them without a comparison.
        let lengths = list
            .iter()
            .fold(0u64, |mask, (name, _)| mask | 1 << (name.len() % 64));
        let place_of = |name: &str| -> Option<usize> {
            if lengths & 1 << (name.len() % 64) == 0 {
                None
            } else if list.len() > SHORT_LIST {
                place.get(name).copied()
            } else {
                list.iter().position(|(n, _)| *n == name)
            }
        };
        let mut found: Vec<Option<usize>> = vec![None; list.len()];
        for entry in 0..catalog.draft.entries.len() {
            let visible = allowed.is_none_or(|a| a.get(entry).copied().unwrap_or(false));
            let Some(i) = catalog.name(entry).and_then(place_of) else {
                continue;
            };
            if let Some(slot) = found.get_mut(i).filter(|s| s.is_none() && visible) {
                *slot = Some(entry);
            }
        }
        found
            .into_iter()
            .zip(&list)
            .filter_map(|(entry, (_, count))| Some((entry?, *count)))
            .collect()
    }

    /// The `suggestions` catalog, `None` without the section.
    pub fn suggestions(&self) -> Option<&Rc<crate::suggestions::Suggestions>> {
        self.suggestions.as_ref()
    }

    /// The suggestion server answered with `tools` (name, JSON object): they join the inline ones (searches
    /// under way keep the catalog they started with).
    pub fn set_fetched_suggestions(&mut self, tools: Vec<(String, String)>) {
        if let Some(config) = &self.config.suggestions {
            self.suggestions = Some(Rc::new(crate::suggestions::Suggestions::new(config, tools)));
        }
    }

    /// `gating.rules`, compiled (empty without them).
    pub fn gating_rules(&self) -> &crate::gating::Rules {
        &self.gating_rules
    }

    /// The `_tool_gating` verdict of `gating.rules` for `analysis`'s question over its tools;
    /// `None` when no rule matches (or there are none).
    pub fn gating_verdict(&self, analysis: &Analysis) -> Option<crate::gating::Verdict> {
        if self.gating_rules.is_empty() {
            return None;
        }
        let catalog = &analysis.catalog;
        let names = (0..catalog.draft.entries.len()).filter_map(|e| catalog.name(e));
        self.gating_rules
            .verdict(crate::followup::own_words(&analysis.query), names)
    }

    /// The access rules, `None` without an `access` section.
    pub fn policy(&self) -> Option<&Rc<Policy>> {
        self.policy.as_ref()
    }

    /// Whether a request the client signed (AWS SigV4) is read but never rewritten: under
    /// access rules without `rewrite_signed`, so its tools can be checked.
    pub fn read_signed_only(&self) -> bool {
        self.policy.is_some() && !self.config.rewrite_signed
    }

    /// What `caller` may do under the access rules; `None` without them.
    pub fn grant(&self, caller: &Caller) -> Option<Grant> {
        self.policy.as_ref().map(|p| p.grant(caller))
    }

    /// Reads, ranks and selects the tools of one body. The body is bytes, not text: only the
    /// bytes read are checked as UTF-8 (bytes that are not are [`Skip::MalformedJson`]), and a
    /// tools array that is a cached catalog's, byte for byte, is neither scanned nor checked
    /// again, though it is most of the body.
    ///
    /// Under access rules the request is read as an anonymous caller's; the filter says who
    /// the caller is with [`Engine::analyse_as`].
    pub fn analyse(
        &mut self,
        dialect: Dialect,
        body: impl AsRef<[u8]>,
    ) -> Result<Analysis, Skipped> {
        self.analyse_as(dialect, body, None)
    }

    /// [`Engine::analyse`] for the caller `grant` describes (`None`: anonymous).
    pub fn analyse_as(
        &mut self,
        dialect: Dialect,
        body: impl AsRef<[u8]>,
        grant: Option<&Grant>,
    ) -> Result<Analysis, Skipped> {
        let body = body.as_ref();
        // Vectors that arrived and catalogs released since the last request may have taken
        // the cache past its bound.
        self.cache.trim();
        // The tools array is located by a structural scan, and the rest of the body is parsed
        // with it blanked out: on a catalog-cache hit no parser ever reads the tools bytes.
        let mut found = None;
        let span = crate::json::find_path_with(body, dialect.tools_path(), |start, rest| {
            let (what, len) = self.cache.find_or_scan(dialect, rest)?;
            found = Some((start, what));
            Some(len)
        })
        .ok_or_else(|| match std::str::from_utf8(body) {
            // No tools, or not JSON at all: the parser tells which.
            Ok(text) => dialect.parse(text).err().map_or(Skip::NoTools, Skip::from),
            Err(_) => Skip::MalformedJson,
        })?;
        // Every other byte is checked as text here, the tools array below unless it is a
        // cached one (checked when it was cached). Pieces that are each valid UTF-8 join into
        // valid UTF-8, and the span's ends are JSON structure (character boundaries in any
        // valid body), so the pieces' checks are a check of the whole.
        let without_tools = splice_bytes(body, span.clone(), b"null").ok_or(Skip::Internal)?;
        let without_tools = String::from_utf8(without_tools).map_err(|_| Skip::MalformedJson)?;
        let request = dialect.parse(&without_tools)?;
        let container = body.get(span.clone()).ok_or(Skip::Internal)?;
        if container == b"null" {
            return Err(Skip::NoTools.into());
        }
        // A repeated `tools` key: only the last one, which providers read, counts.
        let found = found
            .filter(|(start, _)| *start == span.start)
            .map(|(_, what)| what);
        let text = |container| std::str::from_utf8(container).map_err(|_| Skip::MalformedJson);
        let (catalog, cache_hit) = match found {
            Some(Found::Cached(catalog)) => (catalog, true),
            // Not a cached catalog (the scan above compared it with each): assembled from its
            // tools' parts, only tools never seen before read and tokenised.
            Some(Found::Scanned(spans)) => {
                let built =
                    self.cache
                        .build_scanned(dialect, text(container)?, Some(spans), self.weights);
                (built?, false)
            }
            None => (
                self.cache.build(dialect, text(container)?, self.weights)?,
                false,
            ),
        };
        let looping = match &self.loop_guard {
            Some(guard) if !request.history.is_empty() => {
                guard.looping(&request.history, &without_tools)
            }
            _ => Vec::new(),
        };
        let reader = Reader::Dialect(dialect);
        let tools = span.clone();
        let mut analysis =
            self.conclude(reader, request, looping, catalog, cache_hit, span, grant)?;
        if let Some(note) = self.loop_guard.as_ref().and_then(|g| g.note()) {
            analysis.notes = notes(dialect, note, &analysis.evicted, &without_tools, tools);
        }
        Ok(analysis)
    }

    /// Reads, ranks and selects the tools of a body of the `custom` shape (a request on a
    /// custom route): as [`Engine::analyse`] does a dialect's, the catalog cached alike.
    pub fn analyse_custom(&mut self, body: &str) -> Result<Analysis, Skipped> {
        self.analyse_custom_as(body, None)
    }

    /// [`Engine::analyse_custom`] for the caller `grant` describes (`None`: anonymous).
    pub fn analyse_custom_as(
        &mut self,
        body: &str,
        grant: Option<&Grant>,
    ) -> Result<Analysis, Skipped> {
        self.cache.trim();
        let shape = self.custom.as_ref().ok_or(Skip::NotLlm)?;
        let found = shape.read(body)?;
        let (catalog, cache_hit) =
            self.cache
                .get_or_read(&found.container, found.items, self.weights, &mut |text| {
                    shape.entry(text)
                });
        let request = Request {
            query: found.query,
            earlier: Vec::new(),
            assistant: None,
            choice: Choice::default(),
            called: Vec::new(),
            history: Vec::new(),
            latest_calls: Vec::new(),
            stream: false,
            native_search: false,
            session: None,
            model: None,
        };
        let mut analysis = self.conclude(
            Reader::Custom,
            request,
            Vec::new(),
            catalog,
            cache_hit,
            found.span,
            grant,
        )?;
        analysis.text_edit = found.text;
        Ok(analysis)
    }

    /// Ranks and selects a request's catalog (`container`: where its tools sit in the body;
    /// `reader`: what read it). Under access rules the caller's denied tools leave whatever else
    /// happens: also below `min_tools`, also when pinned.
    /// `looping`: the tools the loop guard finds the request's current task calling in a loop.
    #[allow(clippy::too_many_arguments)]
    fn conclude(
        &self,
        reader: Reader,
        request: Request,
        looping: Vec<String>,
        catalog: Rc<Catalog>,
        cache_hit: bool,
        container: Range<usize>,
        grant: Option<&Grant>,
    ) -> Result<Analysis, Skipped> {
        let total = catalog.function_count();
        // The provider searches the tools the request carries, and resolves the tools its
        // search loaded by name: every tool the caller may see stays, untouched.
        let native_search = request.native_search || catalog.native_search();
        let no_tools = Skipped {
            reason: if native_search {
                Skip::NativeSearch
            } else {
                Skip::NoTools
            },
            tools: Some(0),
        };
        if total == 0 && self.policy.is_none() {
            return Err(no_tools);
        }
        let anonymous;
        let grant = match (grant, &self.policy) {
            (Some(grant), _) => Some(grant),
            (None, Some(policy)) => {
                anonymous = policy.grant(&Caller::anonymous());
                Some(&anonymous)
            }
            (None, None) => None,
        };
        let access = grant.map(|grant| govern(grant, &catalog, &request.choice));
        let denied = access.as_ref().map_or(0, |g| g.denied);
        // Only provider built-ins, none denied: nothing to do.
        if total == 0 && denied == 0 {
            return Err(no_tools);
        }
        if native_search && denied == 0 {
            return Err(Skipped {
                reason: Skip::NativeSearch,
                tools: Some(total),
            });
        }
        let mut evicted = if native_search {
            Vec::new()
        } else {
            Self::evicted(looping, &request, &catalog, access.as_ref())
        };
        // `report_only`: the same loops found, none acted on.
        let looping = if self.loop_guard.as_ref().is_some_and(|g| g.reports_only()) {
            std::mem::take(&mut evicted)
        } else {
            evicted.clone()
        };
        if total <= self.config.min_tools && denied == 0 && looping.is_empty() {
            return Err(Skipped {
                reason: Skip::FewTools,
                tools: Some(total),
            });
        }
        let allowed_functions = total - access.as_ref().map_or(0, |g| g.denied_functions);
        // A follow-up ("Yes, go ahead") is ranked with the user turns before it.
        let query = crate::followup::query(
            &request.query,
            &request.earlier,
            request.assistant.as_deref(),
            &catalog.index,
        );
        let ranking = catalog.rank(&query);
        let every_tool = allowed_functions <= self.config.min_tools || native_search;
        // `auto_k`: the k this period's table gives the catalog, for a selection by rank.
        let auto_k = self
            .auto_k
            .as_ref()
            .filter(|_| !every_tool)
            .map(|a| a.chosen(catalog.id()));
        let top_k = auto_k.map_or(self.config.top_k, |c| c.k);
        // What the ranking can read of the question: one it cannot is not cut by chance.
        let reading = catalog.reading(&query);
        let weak = !every_tool
            && self.config.mode == crate::config::Mode::Filter
            && self.config.weak_query.is_weak(reading);
        let unknown = unknown_calls(&request.latest_calls, &catalog);
        // Filter mode's selection only: search mode's eager tools and `find_tools` rank by the
        // question alone.
        let next = if every_tool || self.config.mode != crate::config::Mode::Filter {
            Vec::new()
        } else {
            let allowed = access.as_ref().map(|g| &*g.allowed);
            self.next_entries(&catalog, &request.called, allowed)
        };
        let mut analysis = Analysis {
            reader,
            query,
            catalog,
            cache_hit,
            selection: Selection::default(),
            top_k,
            auto_k,
            reading,
            weak,
            container,
            stream: request.stream,
            choice: request.choice,
            called: request.called,
            next,
            fused: None,
            text_edit: None,
            access,
            evicted,
            looping,
            notes: Vec::new(),
            unknown,
            native_search,
            session: request.session,
            model: request.model,
        };
        analysis.selection = if every_tool {
            let allowed = analysis.access.as_ref().map(|g| &*g.allowed);
            all_allowed(&analysis.catalog, &ranking, allowed, &analysis.evicted)
        } else {
            analysis.select(&self.config, &analysis.with_next(&self.config, &ranking))
        };
        Ok(analysis)
    }

    /// The tools the loop guard takes out of `request`: those its current task calls in a
    /// loop (`looping`), that the catalog has as function tools the caller may see, and that
    /// `tool_choice` does not name (the client insists on them). None when that would leave
    /// no function tool: a model called with none cannot answer.
    fn evicted(
        looping: Vec<String>,
        request: &Request,
        catalog: &Catalog,
        access: Option<&Governed>,
    ) -> Vec<String> {
        if looping.is_empty() {
            return Vec::new();
        }
        let may_see = |e: usize| access.is_none_or(|g| g.allowed.get(e).copied().unwrap_or(false));
        let functions = || {
            (0..catalog.draft.entries.len())
                .filter(move |&e| may_see(e))
                .filter_map(|e| catalog.name(e))
        };
        let evicted: Vec<String> = looping
            .into_iter()
            .filter(|name| !request.choice.named.contains(name))
            .filter(|name| functions().any(|n| n == name))
            .collect();
        let left = functions()
            .filter(|n| !evicted.iter().any(|e| e == n))
            .count();
        if left == 0 { Vec::new() } else { evicted }
    }

    pub fn cached_catalogs(&self) -> usize {
        self.cache.len()
    }

    /// What the worker's catalog cache holds, in bytes (estimated).
    pub fn cache_usage(&mut self) -> crate::rank::CacheUsage {
        self.cache.usage()
    }
}

#[cfg(test)]
mod transitions_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pairs::{HeaderMap, Pair};

    /// Tools for the lexical channels: (name, description, parameter names).
    fn lexical_tools(tools: &[(&str, &str, &[&str])]) -> String {
        let items: Vec<String> = tools
            .iter()
            .map(|(name, description, params)| {
                let properties: serde_json::Map<String, serde_json::Value> = params
                    .iter()
                    .map(|p| ((*p).to_owned(), serde_json::json!({"type": "string"})))
                    .collect();
                serde_json::json!({"type": "function", "function": {"name": name,
                    "description": description,
                    "parameters": {"type": "object", "properties": properties}}})
                .to_string()
            })
            .collect();
        format!("[{}]", items.join(","))
    }

    #[test]
    fn hybrid_ranking_among_the_allowed_tools_is_that_of_a_catalog_of_them_alone() {
        let tools: [(&str, &str, &[&str]); 6] = [
            (
                "send_message",
                "Send a message to a channel",
                &["channel", "text"],
            ),
            // Denied: they carry the query's words (in names, descriptions and parameter
            // names), so they change every lexical statistic and take the channels' best ranks.
            (
                "send_channel_message",
                "Send a message to a channel, message channel",
                &["channel", "message"],
            ),
            ("post_status", "Post a status update", &["status"]),
            (
                "channel_message_send",
                "Message channel send",
                &["message", "send"],
            ),
            (
                "read_messages",
                "Read the messages of a channel",
                &["channel"],
            ),
            ("book_hotel", "Book a hotel in a city", &["city"]),
        ];
        let config = Config::default();
        let query = "send a message to the channel";
        let whole = Catalog::build(
            Dialect::OpenaiChat,
            &lexical_tools(&tools),
            FieldWeights::default(),
        )
        .unwrap();
        // Every tool's vector: a query vector of [1, 0], tools spread around it.
        let vector = |name: &str| -> Vec<f32> {
            let at = tools.iter().position(|t| t.0 == name).unwrap() as f32;
            vec![(at * 0.3).cos(), (at * 0.3).sin()]
        };
        let query_vector = [1.0f32, 0.0];
        let queries: [&[f32]; 1] = [&query_vector];
        let vectors_of = |c: &Catalog| -> Vec<Vec<f32>> {
            (0..c.draft.entries.len())
                .map(|e| vector(c.name(e).unwrap()))
                .collect()
        };
        let ranked = |c: &Catalog, fused: &Fused| -> Vec<(String, f32, String)> {
            fused
                .order
                .iter()
                .map(|s| {
                    let votes = fused.votes_for(s.entry).map(fusion::describe);
                    let name = c.name(s.entry).unwrap().to_owned();
                    (name, s.score, votes.unwrap_or_default())
                })
                .collect()
        };
        let allowed = [true, false, true, false, true, true];
        let kept: Vec<_> = tools
            .iter()
            .zip(allowed)
            .filter(|(_, a)| *a)
            .map(|(t, _)| *t)
            .collect();
        let alone = Catalog::build(
            Dialect::OpenaiChat,
            &lexical_tools(&kept),
            FieldWeights::default(),
        )
        .unwrap();
        let (whole_vectors, alone_vectors) = (vectors_of(&whole), vectors_of(&alone));
        fn refs(v: &[Vec<f32>]) -> Vec<Option<&[f32]>> {
            v.iter().map(|v| Some(v.as_slice())).collect()
        }
        let (whole_refs, alone_refs) = (refs(&whole_vectors), refs(&alone_vectors));
        let among = rank_fused_among(
            &whole,
            &config,
            query,
            &queries,
            &whole_refs,
            Some(&allowed),
        );
        let expected = ranked(
            &alone,
            &rank_fused(&alone, &config, query, &queries, &alone_refs),
        );
        assert_eq!(ranked(&whole, &among), expected);
        assert!(
            expected.iter().any(|(_, _, v)| v.contains("exact=")),
            "{expected:?}"
        );
        assert!(
            expected.iter().any(|(_, _, v)| v.contains("param_keys=")),
            "{expected:?}"
        );
        // Over the whole catalog the allowed tools' ranks and scores differ: the test can fail.
        let everyone = rank_fused(&whole, &config, query, &queries, &whole_refs);
        let filtered: Vec<_> = ranked(&whole, &everyone)
            .into_iter()
            .filter(|(n, ..)| kept.iter().any(|k| k.0 == n))
            .collect();
        assert_ne!(filtered, expected);
        // Every tool allowed, or no mask: the whole catalog's ranking.
        for mask in [None, Some(&[true; 6][..])] {
            let all = rank_fused_among(&whole, &config, query, &queries, &whole_refs, mask);
            assert_eq!(ranked(&whole, &all), ranked(&whole, &everyone));
        }
    }

    /// A header map as the host serialises it.
    fn map(pairs: &[Pair]) -> HeaderMap {
        HeaderMap::new(crate::pairs::encode(pairs))
    }

    fn chat_body(n: usize, query: &str) -> String {
        let tools: Vec<String> = (0..n)
            .map(|i| {
                format!(
                    r#"{{"type":"function","function":{{"name":"tool_{i}","description":"Does thing number {i}","parameters":{{"type":"object","properties":{{"x":{{"type":"integer"}}}}}}}}}}"#
                )
            })
            .collect();
        format!(
            r#"{{"model":"gpt","messages":[{{"role":"user","content":"{query}"}}],"temperature":0.10,"tools":[{}],"tool_choice":"auto"}}"#,
            tools.join(", ")
        )
    }

    /// What a provider reads from `body`: its JSON parsed (a repeated key: the last wins, as in
    /// serde_json's `Value`, Python's json and JSON.parse), the function tools' names.
    fn provider_tools(body: &str) -> Vec<String> {
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        v["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
            .collect()
    }

    #[test]
    fn reports_what_the_provider_reads() {
        let mut engine = Engine::new(Config::from_json(br#"{"top_k":2,"min_tools":3}"#).unwrap());
        // Two `tools` keys: the provider reads the last, so that is the one cut.
        let first = chat_body(25, "run thing number 7");
        let tools_at = first.find(r#""tools":"#).unwrap();
        let twice = format!("{}\"tools\":[],{}", &first[..tools_at], &first[tools_at..]);
        for body in [
            twice.clone(),
            format!("{}{}", &twice[..twice.len() - 1], r#","tools":[]}"#),
        ] {
            match engine.analyse(Dialect::OpenaiChat, &body) {
                Ok(analysis) => {
                    let out = analysis.rewrite(&body).unwrap_or(body.clone());
                    assert_eq!(provider_tools(&out).len(), analysis.kept());
                }
                // Nothing to cut in the array the provider reads: said so, body untouched.
                Err(skipped) => {
                    assert_eq!(skipped.reason, Skip::NoTools, "{body}");
                    assert!(provider_tools(&body).is_empty());
                }
            }
        }
        // An escaped key is the same key.
        let escaped =
            chat_body(25, "run thing number 7").replace(r#""tools":"#, r#""tool\u0073":"#);
        let analysis = engine.analyse(Dialect::OpenaiChat, &escaped).unwrap();
        assert_eq!((analysis.kept(), analysis.total()), (2, 25));
        let out = analysis.rewrite(&escaped).unwrap();
        let parsed: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(parsed["tools"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn a_number_serde_cannot_hold_does_not_hide_a_tool() {
        let mut engine = Engine::new(Config::from_json(br#"{"top_k":2,"min_tools":3}"#).unwrap());
        let body = chat_body(25, "refund the payment")
            .replacen(
                r#""name":"tool_3","description":"Does thing number 3","parameters":{"type":"object","properties":{"x":{"type":"integer"}}}"#,
                r#""name":"refund_payment","description":"Refund a payment","parameters":{"type":"object","properties":{"amount":{"type":"number","maximum":1e400}}}"#,
                1,
            );
        assert!(body.contains("1e400"));
        let analysis = engine.analyse(Dialect::OpenaiChat, &body).unwrap();
        assert_eq!(analysis.total(), 25, "the 1e400 tool is a function tool");
        assert_eq!(analysis.kept_names()[0], "refund_payment");
    }

    #[test]
    fn report_only_finds_the_loop_and_changes_nothing() {
        let history = r#"{"role":"user","content":"run thing number 7"},
  {"role":"assistant","tool_calls":[{"id":"1","type":"function","function":{"name":"tool_7","arguments":"{}"}}]},
  {"role":"tool","tool_call_id":"1","content":"done"},
  {"role":"assistant","tool_calls":[{"id":"2","type":"function","function":{"name":"tool_7","arguments":"{}"}}]},
  {"role":"tool","tool_call_id":"2","content":"done"}"#;
        let plain = chat_body(8, "run thing number 7");
        let tools_at = plain.find(r#","tools":"#).unwrap();
        let tools = &plain[tools_at..plain.len() - 1];
        let body = format!(r#"{{"model":"gpt","messages":[{history}]{tools}}}"#);
        for evicted in [true, false] {
            let config = format!(
                r#"{{"top_k":2,"min_tools":8,"loop_guard":{{"note":{{}},"report_only":{}}}}}"#,
                !evicted
            );
            let mut engine = Engine::new(Config::from_json(config.as_bytes()).unwrap());
            let analysis = engine.analyse(Dialect::OpenaiChat, &body).unwrap();
            assert_eq!(analysis.looping, ["tool_7"], "{config}");
            if evicted {
                assert_eq!(analysis.evicted, ["tool_7"]);
                assert_eq!(analysis.notes.len(), 1);
            } else {
                // Found with few tools all the same, and the request goes as it came.
                assert!(analysis.evicted.is_empty() && analysis.notes.is_empty());
                assert_eq!(analysis.kept(), 8);
                assert!(analysis.rewrite(&body).is_none());
            }
        }
    }

    #[test]
    fn the_loop_guards_note_is_the_only_change_outside_the_tools() {
        let config =
            br#"{"top_k":2,"min_tools":3,"loop_guard":{"note":{"text":"Stop calling {tool}."}}}"#;
        let mut engine = Engine::new(Config::from_json(config).unwrap());
        let history = r#"{"role":"user","content":"run thing number 7"},
  {"role":"assistant","tool_calls":[{"id":"1","type":"function","function":{"name":"tool_7","arguments":"{\"x\":1}"}}]},
  {"role":"tool","tool_call_id":"1","content":"done"},
  {"role":"assistant","tool_calls":[{"id":"2","type":"function","function":{"name":"tool_7","arguments":"{ \"x\": 1 }"}}]},
  {"role":"tool","tool_call_id":"2","content":"done" }"#;
        let plain = chat_body(10, "run thing number 7");
        let tools_at = plain.find(r#","tools":"#).unwrap();
        let tools = &plain[tools_at..plain.len() - 1];
        // The conversation after the tools array, and before it.
        let after = format!(r#"{{"model":"gpt"{tools},"messages":[{history}]}}"#);
        let before = format!(r#"{{"model":"gpt","messages":[{history}]{tools}}}"#);
        for body in [after, before] {
            let analysis = engine.analyse(Dialect::OpenaiChat, &body).unwrap();
            assert_eq!(analysis.evicted, ["tool_7"]);
            assert_eq!(analysis.notes.len(), 1);
            let out = analysis.rewrite(&body).unwrap();
            // Outside the tools array, the body is the client's but for the note.
            let note =
                |text: &str| text.replacen(r#""done" }"#, r#""done\n\nStop calling tool_7." }"#, 1);
            let (head, tail) = (
                note(&body[..analysis.container.start]),
                note(&body[analysis.container.end..]),
            );
            assert_eq!(
                head.len() + tail.len(),
                body.len() - analysis.container.len() + 24
            );
            assert!(out.starts_with(&head) && out.ends_with(&tail), "{out}");
            let middle = &out[head.len()..out.len() - tail.len()];
            assert_eq!(
                serde_json::from_str::<serde_json::Value>(middle)
                    .unwrap()
                    .as_array()
                    .unwrap()
                    .len(),
                2
            );
            assert!(!provider_tools(&out).contains(&"tool_7".to_owned()));
        }
    }

    #[test]
    fn made_up_names_of_the_latest_turn_are_unknown_once() {
        let mut engine = Engine::new(Config::from_json(br#"{"top_k":2,"min_tools":3}"#).unwrap());
        let call = |id: &str, name: &str| {
            format!(
                r#"{{"role":"assistant","tool_calls":[{{"id":"{id}","type":"function","function":{{"name":"{name}","arguments":"{{}}"}}}},{{"id":"{id}b","type":"function","function":{{"name":"tool_1","arguments":"{{}}"}}}}]}},
                {{"role":"tool","tool_call_id":"{id}","content":"no such tool"}},{{"role":"tool","tool_call_id":"{id}b","content":"ok"}}"#
            )
        };
        let body = |turns: &[String]| {
            let plain = chat_body(10, "run thing number 7");
            let question = r#"{"role":"user","content":"run thing number 7"}"#;
            let mut messages = vec![question.to_owned()];
            messages.extend(turns.iter().cloned());
            plain.replace(question, &messages.join(","))
        };
        let unknown = |engine: &mut Engine, turns: &[String]| {
            engine
                .analyse(Dialect::OpenaiChat, body(turns))
                .unwrap()
                .unknown
        };
        assert_eq!(
            unknown(&mut engine, &[call("1", "tool_3")]),
            Vec::<String>::new()
        );
        assert_eq!(
            unknown(&mut engine, &[call("1", "frobnicate")]),
            ["frobnicate"]
        );
        // A later turn: the made-up call was counted when it was the latest.
        assert_eq!(
            unknown(&mut engine, &[call("1", "frobnicate"), call("2", "tool_3")]),
            Vec::<String>::new()
        );
        // A new question after it: no longer the model's latest turn.
        let asked = r#"{"role":"user","content":"and now?"}"#.to_owned();
        assert_eq!(
            unknown(&mut engine, &[call("1", "frobnicate"), asked]),
            Vec::<String>::new()
        );
    }

    #[test]
    fn rewrites_only_the_tools_array() {
        let mut engine = Engine::new(Config::from_json(br#"{"top_k":2,"min_tools":3}"#).unwrap());
        let body = chat_body(10, "run thing number 7");
        let analysis = engine.analyse(Dialect::OpenaiChat, &body).unwrap();
        assert_eq!((analysis.kept(), analysis.total()), (2, 10));
        assert_eq!(analysis.kept_names()[0], "tool_7");
        let out = analysis.rewrite(&body).unwrap();
        let prefix = &body[..analysis.container.start];
        let suffix = &body[analysis.container.end..];
        assert!(out.starts_with(prefix) && out.ends_with(suffix));
        assert!(
            out.contains(r#""temperature":0.10"#),
            "numbers are not reformatted"
        );
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["tools"].as_array().unwrap().len(), 2);
        // Same input, same output; the second time the catalog comes from the cache.
        let again = engine.analyse(Dialect::OpenaiChat, &body).unwrap();
        assert!(again.cache_hit && !analysis.cache_hit);
        assert_eq!(again.rewrite(&body).unwrap(), out);
    }

    #[test]
    fn custom_shapes_are_ranked_selected_and_spliced_like_dialects() {
        let config = Config::from_json(
            br#"{"top_k":2,"min_tools":3,"always_include":["tool_9"],"custom":{"paths":["/wso2/*"],
                "query_path":"$.ask.text","tools_path":"$.payload.functions"}}"#,
        )
        .unwrap();
        let mut engine = Engine::new(config);
        let tools: Vec<String> = (0..10)
            .map(|i| format!(r#"{{"name":"tool_{i}","description":"Does thing number {i}"}}"#))
            .collect();
        let body = format!(
            "{{\"ask\": {{\"text\": \"run thing number 7\"}},\n \"payload\": {{\"functions\": [\n  {}\n]}}, \"t\": 0.10}}",
            tools.join(",\n  ")
        );
        let analysis = engine.analyse_custom(&body).unwrap();
        assert_eq!((analysis.kept(), analysis.total()), (3, 10));
        assert_eq!(analysis.kept_names(), ["tool_7", "tool_0", "tool_9"]);
        let out = analysis.rewrite(&body).unwrap();
        let kept = format!("[\n  {},\n  {},\n  {}\n]", tools[0], tools[7], tools[9]);
        assert_eq!(
            out,
            format!(
                "{}{kept}{}",
                &body[..analysis.container.start],
                &body[analysis.container.end..]
            )
        );
        let again = engine.analyse_custom(&body).unwrap();
        assert!(again.cache_hit && !analysis.cache_hit);
        assert_eq!(again.rewrite(&body).unwrap(), out);
        // The same tools array read by a dialect is another catalog.
        let chat = format!(
            r#"{{"messages":[{{"role":"user","content":"x"}}],"tools":[{}]}}"#,
            tools.join(",\n  ")
        );
        assert_eq!(
            engine
                .analyse(Dialect::OpenaiChat, &chat)
                .err()
                .unwrap()
                .reason,
            Skip::NoTools,
            "no chat tool has a `function`"
        );
        let few = r#"{"payload":{"functions":[{"name":"a"}]}}"#;
        assert_eq!(
            engine.analyse_custom(few).err().unwrap(),
            Skipped {
                reason: Skip::FewTools,
                tools: Some(1)
            }
        );
        assert_eq!(
            engine.analyse_custom("[").err().unwrap().reason,
            Skip::MalformedJson
        );
        // Without a custom section nothing is read as one.
        let mut plain = Engine::new(Config::default());
        assert_eq!(
            plain.analyse_custom(&body).err().unwrap().reason,
            Skip::NotLlm
        );
    }

    #[test]
    fn custom_paths_win_over_the_dialects_paths() {
        let config = Config::from_json(
            br#"{"custom":{"paths":["/wso2/*"],"text_path":"$.messages[*].content"}}"#,
        )
        .unwrap();
        let post = |path: &'static str| RequestHeaders {
            method: Some("POST"),
            path: Some(path),
            ..Default::default()
        };
        assert_eq!(
            post("/wso2/v1/chat/completions").screen_custom(&config),
            Some(Ok(()))
        );
        assert_eq!(post("/wso2/anything").screen_custom(&config), Some(Ok(())));
        assert_eq!(post("/v1/chat/completions").screen_custom(&config), None);
        assert_eq!(
            post("/v1/chat/completions").screen(&config),
            Ok(Dialect::OpenaiChat)
        );
        let gzip = RequestHeaders {
            content_encoding: Some("gzip"),
            ..post("/wso2/x")
        };
        assert_eq!(gzip.screen_custom(&config), Some(Err(Skip::Compressed)));
        let get = RequestHeaders {
            method: Some("GET"),
            ..post("/wso2/x")
        };
        assert_eq!(get.screen_custom(&config), Some(Err(Skip::NotLlm)));
        assert_eq!(post("/wso2/x").screen_custom(&Config::default()), None);
    }

    /// The provider's own tool search, in the tools or at work in the history, is never
    /// filtered: the provider searches (or has loaded) tools the filter would drop.
    #[test]
    fn native_search_requests_are_skipped() {
        let mut engine = Engine::new(Config::from_json(br#"{"top_k":1,"min_tools":0}"#).unwrap());
        let mut reason =
            |dialect: Dialect, body: &str| engine.analyse(dialect, body).err().map(|s| s.reason);
        let tools = r#"{"name":"a","input_schema":{}},{"name":"b","input_schema":{}}"#;
        let anthropic = |messages: &str, extra: &str| {
            format!(
                r#"{{"model":"c","max_tokens":9,"messages":[{messages}],"tools":[{extra}{tools}]}}"#
            )
        };
        let question = r#"{"role":"user","content":"tool_reference? \"tool_reference\""}"#;
        let native = Some(Skip::NativeSearch);
        for search in [
            "tool_search_tool_regex_20251119",
            "tool_search_tool_bm25_20251119",
        ] {
            let entry = format!(r#"{{"type":"{search}","name":"s"}},"#);
            assert_eq!(
                reason(Dialect::Anthropic, &anthropic(question, &entry)),
                native
            );
        }
        // Words about it are not it.
        assert_eq!(reason(Dialect::Anthropic, &anthropic(question, "")), None);
        let referenced = r#"{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"a","input":{}}]},
            {"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"tool_reference","tool_name":"b"}]}]}"#;
        let history = format!("{question},{referenced}");
        assert_eq!(reason(Dialect::Anthropic, &anthropic(&history, "")), native);
        let server = r#"{"role":"assistant","content":[{"type":"tool_search_tool_result","tool_use_id":"s","content":{"type":"tool_search_tool_search_result","tool_references":[{"type":"tool_reference","tool_name":"b"}]}}]}"#;
        let history = format!("{question},{server}");
        assert_eq!(reason(Dialect::Anthropic, &anthropic(&history, "")), native);

        let functions = r#"{"type":"function","name":"a","parameters":{}},{"type":"function","name":"b","parameters":{}}"#;
        let responses = |input: &str, extra: &str| {
            format!(r#"{{"model":"g","input":{input},"tools":[{extra}{functions}]}}"#)
        };
        let q = r#""tool_search""#;
        assert_eq!(reason(Dialect::OpenaiResponses, &responses(q, "")), None);
        for extra in [
            r#"{"type":"tool_search"},"#,
            r#"{"type":"tool_search","execution":"client","parameters":{}},"#,
            r#"{"type":"namespace","name":"crm","description":"d","tools":[]},"#,
        ] {
            assert_eq!(
                reason(Dialect::OpenaiResponses, &responses(q, extra)),
                native
            );
        }
        let loaded = r#"[{"role":"user","content":"q"},
            {"type":"tool_search_call","call_id":"c","execution":"client","arguments":{}},
            {"type":"tool_search_output","call_id":"c","execution":"client","tools":[]}]"#;
        assert_eq!(
            reason(Dialect::OpenaiResponses, &responses(loaded, "")),
            native
        );
        // An ordinary request is ranked and cut as usual.
        assert_eq!(reason(Dialect::OpenaiChat, &chat_body(3, "q")), None);
    }

    #[test]
    fn skips_with_reasons() {
        let mut engine = Engine::new(Config::default());
        let few = chat_body(20, "x");
        let err = engine.analyse(Dialect::OpenaiChat, &few).err().unwrap();
        assert_eq!(
            err,
            Skipped {
                reason: Skip::FewTools,
                tools: Some(20)
            }
        );
        let none = r#"{"messages":[{"role":"user","content":"hi"}]}"#;
        assert_eq!(
            engine
                .analyse(Dialect::OpenaiChat, none)
                .err()
                .unwrap()
                .reason,
            Skip::NoTools
        );
        assert_eq!(
            engine
                .analyse(Dialect::OpenaiChat, "{\"messages\":")
                .err()
                .unwrap()
                .reason,
            Skip::MalformedJson
        );
        assert_eq!(
            engine
                .analyse(Dialect::OpenaiChat, "[1,2]")
                .err()
                .unwrap()
                .reason,
            Skip::BadShape
        );
        assert_eq!(
            body_text(&[0xff, 0xfe]).err().unwrap().reason,
            Skip::MalformedJson
        );
        let bad_tools = r#"{"messages":[],"tools":{"a":1}}"#;
        assert_eq!(
            engine
                .analyse(Dialect::OpenaiChat, bad_tools)
                .err()
                .unwrap()
                .reason,
            Skip::BadShape
        );
    }

    #[test]
    fn screens_headers() {
        let config = Config::default();
        let post = |path: &'static str| RequestHeaders {
            method: Some("POST"),
            path: Some(path),
            content_type: Some("application/json; charset=utf-8"),
            ..Default::default()
        };
        assert_eq!(post("/v1/messages").screen(&config), Ok(Dialect::Anthropic));
        assert_eq!(post("/healthz").screen(&config), Err(Skip::NotLlm));
        let get = RequestHeaders {
            method: Some("GET"),
            ..post("/v1/chat/completions")
        };
        assert_eq!(get.screen(&config), Err(Skip::NotLlm));
        let gzip = RequestHeaders {
            content_encoding: Some("gzip"),
            ..post("/v1/responses")
        };
        assert_eq!(gzip.screen(&config), Err(Skip::Compressed));
        let identity = RequestHeaders {
            content_encoding: Some("Identity"),
            ..post("/v1/responses")
        };
        assert_eq!(identity.screen(&config), Ok(Dialect::OpenaiResponses));
        let form = RequestHeaders {
            content_type: Some("multipart/form-data"),
            ..post("/v1/responses")
        };
        assert_eq!(form.screen(&config), Err(Skip::ContentType));
        let vendor = RequestHeaders {
            content_type: Some("application/vnd.api+json"),
            ..post("/v1/responses")
        };
        assert_eq!(vendor.screen(&config), Ok(Dialect::OpenaiResponses));
        let big = RequestHeaders {
            content_length: Some("99999999999"),
            ..post("/v1/responses")
        };
        assert_eq!(big.screen(&config), Err(Skip::TooLarge));
        let empty = RequestHeaders {
            end_of_stream: true,
            ..post("/v1/responses")
        };
        assert_eq!(empty.screen(&config), Err(Skip::NoBody));
    }

    #[test]
    fn screens_header_bytes_that_are_not_text() {
        let config = Config::default();
        let pairs = |extra: &[(&str, &[u8])]| -> Vec<Pair> {
            let mut pairs: Vec<Pair> = vec![
                (b":method".to_vec(), b"POST".to_vec()),
                (b":path".to_vec(), b"/v1/chat/completions".to_vec()),
            ];
            pairs.extend(
                extra
                    .iter()
                    .map(|(n, v)| (n.as_bytes().to_vec(), v.to_vec())),
            );
            pairs
        };
        let screen = |extra: &[(&str, &[u8])]| {
            RequestHeaders::from_map(&map(&pairs(extra)), false).screen(&config)
        };
        assert_eq!(
            screen(&[("content-type", b"application/json")]),
            Ok(Dialect::OpenaiChat)
        );
        // A stray byte in content-type: not JSON, whatever the rest says.
        assert_eq!(
            screen(&[("content-type", b"application/json; charset=caf\xe9")]),
            Err(Skip::ContentType)
        );
        assert_eq!(
            screen(&[("content-encoding", b"gzi\xff")]),
            Err(Skip::Compressed)
        );
        // Headers the screening does not read may hold anything.
        assert_eq!(screen(&[("x-note", b"\xff\xfe")]), Ok(Dialect::OpenaiChat));
        let bad_path = vec![
            (b":method".to_vec(), b"POST".to_vec()),
            (b":path".to_vec(), b"/v1/chat/completions\xff".to_vec()),
        ];
        assert_eq!(
            RequestHeaders::from_map(&map(&bad_path), false).screen(&config),
            Err(Skip::NotLlm)
        );
    }

    #[test]
    fn signed_requests_pass_unless_configured() {
        let sigv4 = b"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20260101/us-east-1/bedrock/aws4_request, SignedHeaders=host;x-amz-date, Signature=abc";
        let pairs: Vec<Pair> = vec![
            (b":method".to_vec(), b"POST".to_vec()),
            (
                b":path".to_vec(),
                b"/model/amazon.nova-pro-v1:0/converse".to_vec(),
            ),
            (b"authorization".to_vec(), sigv4.to_vec()),
        ];
        let signed = map(&pairs);
        let headers = RequestHeaders::from_map(&signed, false);
        assert_eq!(headers.screen(&Config::default()), Err(Skip::Signed));
        let rewrite = Config {
            rewrite_signed: true,
            ..Config::default()
        };
        assert_eq!(headers.screen(&rewrite), Ok(Dialect::Bedrock));
        // A presigned URL signs too; a bearer token (Bedrock API keys) does not.
        let presigned: Vec<Pair> = vec![(
            b":path".to_vec(),
            b"/model/m/converse?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=ff".to_vec(),
        )];
        assert!(RequestHeaders::from_map(&map(&presigned), false).signed);
        let bearer: Vec<Pair> = vec![
            (b":method".to_vec(), b"POST".to_vec()),
            (b":path".to_vec(), b"/model/m/converse".to_vec()),
            (b"authorization".to_vec(), b"Bearer ABSKexample".to_vec()),
        ];
        assert_eq!(
            RequestHeaders::from_map(&map(&bearer), false).screen(&Config::default()),
            Ok(Dialect::Bedrock)
        );
        assert!(
            !Skip::Signed.is_error(),
            "on_error: reject never rejects a signed request"
        );
    }

    #[test]
    fn reports() {
        assert_eq!(header_value(5, 60, None), "kept=5 total=60");
        let few = Skipped {
            reason: Skip::FewTools,
            tools: Some(12),
        };
        assert_eq!(
            header_value(0, 0, Some(&few)),
            "kept=12 total=12 skipped=few_tools"
        );
        assert_eq!(
            header_value(0, 0, Some(&Skip::Compressed.into())),
            "skipped=compressed"
        );
        let err: serde_json::Value =
            serde_json::from_str(&error_body(Skip::MalformedJson)).unwrap();
        assert_eq!(err["error"]["code"], "malformed_json");
        assert!(
            err["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with("toolsift:")
        );
    }

    #[test]
    fn names_in_headers_are_percent_encoded() {
        assert_eq!(header_safe("get_weather"), "get_weather");
        assert_eq!(
            header_safe("mcp:github/list-issues"),
            "mcp:github/list-issues"
        );
        assert_eq!(
            header_safe("evil\r\nx-injected: yes"),
            "evil%0D%0Ax-injected:%20yes"
        );
        assert_eq!(header_safe("a,b(c)"), "a%2Cb%28c%29");
        assert_eq!(header_safe("météo"), "m%C3%A9t%C3%A9o");
    }

    fn governed_engine(extra: &str) -> Engine {
        Engine::new(
            Config::from_json(
                format!(
                    r#"{{"top_k":2,"min_tools":3,"always_include":["tool_1"],"access":{{
                        "identity":[{{"header":"x-group"}}],"default":"allow",
                        "rules":[{{"when":["*"],"deny":["tool_1","tool_7"]}},
                                 {{"when":["ops"],"allow":["tool_7"]}}]{extra}}}}}"#
                )
                .as_bytes(),
            )
            .unwrap(),
        )
    }

    fn as_caller(engine: &Engine, values: &[&str]) -> Option<Grant> {
        engine.grant(&Caller::new(values.iter().map(|v| (*v).to_owned())))
    }

    #[test]
    fn denied_tools_leave_before_ranking_and_pins() {
        let mut engine = governed_engine("");
        let grant = as_caller(&engine, &["dev"]);
        // tool_7 ranks first and tool_1 is always included: both denied, neither kept.
        let body = chat_body(25, "run thing number 7");
        let a = engine
            .analyse_as(Dialect::OpenaiChat, &body, grant.as_ref())
            .unwrap();
        assert_eq!((a.kept(), a.total(), a.denied()), (2, 25, 2));
        let names = a.kept_names();
        assert!(
            !names.contains(&"tool_7") && !names.contains(&"tool_1"),
            "{names:?}"
        );
        let out = provider_tools(&a.rewrite(&body).unwrap());
        assert_eq!(out.len(), 2);
        assert!(a.access.as_ref().unwrap().denial.is_none());
        // Deny wins over the ops rule's allow.
        let ops = as_caller(&engine, &["ops"]);
        let a = engine
            .analyse_as(Dialect::OpenaiChat, &body, ops.as_ref())
            .unwrap();
        assert!(!a.kept_names().contains(&"tool_7"));
        // A tool_choice naming a denied tool is no pin; hidden: the tool is gone, and the
        // request goes on.
        let chosen = body.replace(
            r#""tool_choice":"auto""#,
            r#""tool_choice":{"type":"function","function":{"name":"tool_7"}}"#,
        );
        let a = engine
            .analyse_as(Dialect::OpenaiChat, &chosen, grant.as_ref())
            .unwrap();
        assert!(a.access.as_ref().unwrap().denial.is_none());
        assert!(!provider_tools(&a.rewrite(&chosen).unwrap()).contains(&"tool_7".to_owned()));
        // Refused: the request is refused, naming the tool.
        let mut refused = governed_engine(r#","denied":"refused""#);
        let grant = as_caller(&refused, &["dev"]);
        let a = refused
            .analyse_as(Dialect::OpenaiChat, &chosen, grant.as_ref())
            .unwrap();
        let denial = a.access.as_ref().unwrap().denial.clone().unwrap();
        assert_eq!(denial.tool.as_deref(), Some("tool_7"));
        assert!(
            denial.message().contains("tool `tool_7`"),
            "{}",
            denial.message()
        );
        let body: serde_json::Value = serde_json::from_str(&denial.body()).unwrap();
        assert_eq!(body["error"]["code"], "access_denied");
    }

    #[test]
    fn denied_tools_leave_requests_under_min_tools_too() {
        let mut engine = governed_engine("");
        let grant = as_caller(&engine, &["dev"]);
        let body = chat_body(3, "anything");
        let a = engine
            .analyse_as(Dialect::OpenaiChat, &body, grant.as_ref())
            .unwrap();
        assert_eq!((a.kept(), a.total(), a.denied()), (2, 3, 1));
        assert_eq!(
            provider_tools(&a.rewrite(&body).unwrap()),
            ["tool_0", "tool_2"]
        );
        // Nothing denied: untouched, as before.
        let mut plain = governed_engine("");
        let ok_tools = chat_body(3, "anything").replace("tool_1", "tool_9");
        let err = plain
            .analyse_as(Dialect::OpenaiChat, &ok_tools, grant.as_ref())
            .err()
            .unwrap();
        assert_eq!(err.reason, Skip::FewTools);
    }

    #[test]
    fn no_identity_or_no_tool_left_is_a_denial() {
        let mut engine = governed_engine("");
        let body = chat_body(25, "run thing number 7");
        // No caller given: anonymous, and the configuration reads an identity.
        let a = engine.analyse(Dialect::OpenaiChat, &body).unwrap();
        let g = a.access.as_ref().unwrap();
        assert_eq!(g.denied, 25);
        assert_eq!(g.denial.as_ref().unwrap().why, Why::NoIdentity);
        assert_eq!(a.kept(), 0);
        // Every tool denied: refused, not forwarded with none.
        let only_denied = chat_body(2, "x").replace("tool_0", "tool_7");
        let grant = as_caller(&engine, &["dev"]);
        let a = engine
            .analyse_as(Dialect::OpenaiChat, &only_denied, grant.as_ref())
            .unwrap();
        assert_eq!(
            a.access.as_ref().unwrap().denial.as_ref().unwrap().why,
            Why::Default
        );
    }

    #[test]
    fn skip_names_are_unique() {
        let mut names: Vec<&str> = Skip::ALL.iter().map(|s| s.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Skip::ALL.len());
    }
}
