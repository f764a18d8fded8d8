//! Search mode's response side: one model turn in, either the response the client gets or
//! the next request upstream out.
//!
//! When the model calls only the meta-tool, each call is answered with the best-ranked tools
//! the model cannot see yet (their names, descriptions and parameter schemas), and the
//! follow-up request is the previous one plus the model's turn, the tool results, and the
//! found tools appended at the end of the tools array: everything before them is unchanged,
//! so the provider's prompt cache still holds. The last follow-up goes without the meta-tool,
//! so the model must answer or call a real tool.

use super::plan::{MetaNames, Plan, entry_texts, without_defer};
use super::{Call, Edits, Reply, ToolResult, Usage};
use crate::access::config::Denied;
use crate::access::{Annotations, Decision, Grant, Surface, Why};
use crate::config::Config;
use crate::dialects::{Codec, Dialect};
use crate::dialects::{Layout, MAX_QUERY_BYTES};
use crate::json::find_path;
use crate::pipeline::{Analysis, header_safe};
use crate::rank::{Catalog, Scored};
use crate::rewrite::splice;
use crate::suggestions::Suggestions;
use crate::text::head_and_tail;
use serde::Deserialize;
use serde_json::{Value, json};
use std::borrow::Cow;
use std::rc::Rc;

/// Tools one search returns unless the model asks for another number.
pub const DEFAULT_LIMIT: usize = 5;
/// Tools one search returns at most.
pub const MAX_LIMIT: usize = 20;

/// Why a search is answered with tools the model has already: the same words again.
pub const SEARCHED_ALREADY: &str = "You searched for this already";
/// Why a search is answered with tools the model has already: they are in its tool list.
pub const LISTED_ALREADY: &str = "These tools are in your tool list already";

/// The answer to a search whose tools (`names`) the model has already, LLM or MCP: their
/// names, and a note that starts with `why`.
pub fn already_available(names: &[&str], why: &str) -> Value {
    json!({
        "tools": names.iter().map(|n| json!({"name": n})).collect::<Vec<_>>(),
        "note": format!("{why}: call one of them, or search again with more specific words."),
    })
}

/// The query of a meta-tool call: trimmed, bounded like a request's query (its head and tail
/// when longer), `None` when missing or empty.
fn call_query(call: &Call) -> Option<String> {
    #[derive(Deserialize)]
    struct Arguments {
        #[serde(default)]
        query: Option<Value>,
    }
    let args: Arguments = serde_json::from_str(&call.arguments).ok()?;
    let query = args.query.as_ref()?.as_str()?.trim();
    (!query.is_empty()).then(|| head_and_tail(query, MAX_QUERY_BYTES))
}

/// Why a model call does not reach the client.
#[derive(Debug, Clone, PartialEq)]
enum Refusal {
    /// Access rules refuse it: a denied tool, or refused arguments.
    Access(Why),
    /// The tool is neither the client's nor a built-in of the request (the model made it up,
    /// or misremembered a name): search mode, and filter mode's [`Session::answering`].
    Unknown,
}

/// Closest names an unknown tool's error result offers at most.
const CLOSEST: usize = 3;

/// What to do after a model turn.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// The response goes to the client with these edits (none: byte for byte).
    Deliver(Edits),
    /// This request goes upstream next.
    FollowUp(String),
}

/// One request's search, across its rounds; or, with no search, one request's model turns
/// checked against its caller's grant ([`Session::guard`]) and for made-up tool names
/// ([`Session::answering`]).
#[derive(Clone)]
pub struct Session {
    dialect: Dialect,
    /// The last request body sent upstream.
    body: String,
    /// The request's catalog; `None` for a guard, which knows no tools.
    catalog: Option<Rc<Catalog>>,
    /// The session answers the meta-tool (search mode).
    searching: bool,
    /// Under access rules: what the caller may do, and per catalog entry whether it may see
    /// it (a search never finds a tool it may not).
    grant: Option<Grant>,
    allowed: Option<Rc<[bool]>>,
    /// Model calls refused so far by access rules (denied tools, refused arguments).
    refused: usize,
    /// Under access rules: calls of remote MCP connectors' tools seen in the answers so far.
    connector_calls: usize,
    /// Names of tools the model called that do not exist (search mode, and filter mode's
    /// [`Session::answering`]), in order.
    unknown: Vec<String>,
    /// The queries answered so far (their words, lower-cased), and what each found.
    searched: Vec<(String, Vec<usize>)>,
    /// Meta-tool calls answered so far: repeated and empty searches too, which `searched`
    /// does not keep, since a model that asks the same thing every round is a storm too.
    searches: usize,
    /// `search.max_searches`; and whether the loop was stopped for going past it.
    max_searches: usize,
    stormed: bool,
    /// The client's tool entries, as the client wrote them.
    entries: Vec<String>,
    visible: Vec<bool>,
    meta_entries: Vec<String>,
    names: MetaNames,
    max_rounds: usize,
    /// Follow-ups sent so far.
    rounds: usize,
    /// Usage of every response so far, the first one included.
    usage: Vec<Option<Usage>>,
    /// Tools found, in the order they were added.
    found: Vec<String>,
    /// Rankings of meta-tool queries made outside the session (hybrid ranking, which needs
    /// the query's embeddings), by query; any other query is ranked by keyword.
    rankings: Vec<(String, Vec<Scored>)>,
    /// `suggestions`: tools offered, never callable, when a search finds nothing good; and
    /// the names offered so far.
    suggestions: Option<Rc<Suggestions>>,
    suggested: Vec<String>,
}

impl Session {
    /// A search that starts with `plan`'s request; `client_body` is the body the client sent.
    pub fn new(config: &Config, analysis: &Analysis, client_body: &str, plan: Plan) -> Session {
        let container = client_body
            .get(analysis.container.clone())
            .unwrap_or_default();
        let entries = entry_texts(container, &analysis.catalog.draft)
            .into_iter()
            .map(str::to_owned)
            .collect();
        Session {
            dialect: plan.dialect,
            body: plan.body,
            catalog: Some(Rc::clone(&analysis.catalog)),
            searching: true,
            grant: analysis.access.as_ref().map(|g| g.grant.clone()),
            allowed: analysis.access.as_ref().map(|g| Rc::clone(&g.allowed)),
            refused: 0,
            connector_calls: 0,
            unknown: Vec::new(),
            searched: Vec::new(),
            searches: 0,
            max_searches: config.search.max_searches,
            stormed: false,
            entries,
            visible: plan.visible,
            meta_entries: plan.meta_entries,
            names: plan.names.clone(),
            max_rounds: config.search.max_search_rounds,
            rounds: 0,
            usage: Vec::new(),
            found: Vec::new(),
            rankings: Vec::new(),
            suggestions: None,
            suggested: Vec::new(),
        }
    }

    /// No search, no follow-up: the model's turn is only checked against `grant`, and a
    /// call it refuses is replaced by a refusal in the dialect's own shape (filter mode, and
    /// requests search mode hands to the provider, under access rules).
    pub fn guard(dialect: Dialect, grant: Grant) -> Session {
        Session {
            grant: Some(grant),
            ..Session::bare(dialect)
        }
    }

    /// Filter mode with `unknown_tools.answer`: no search; a model call of a tool the request
    /// does not carry (a made-up name) is answered to the model with an error result naming
    /// the closest tools it was sent, in a follow-up that continues `sent` (the body that
    /// went upstream), at most `unknown_tools.max_rounds` times, and never reaches the client.
    /// A call of a tool the filter ranked out is no made-up name: the client has the tool,
    /// and gets the call. Under access rules calls are checked as [`Session::guard`] checks
    /// them, and a refused call alone in its turn is answered to the model the same way.
    pub fn answering(
        config: &Config,
        analysis: &Analysis,
        dialect: Dialect,
        sent: String,
    ) -> Session {
        Session {
            body: sent,
            catalog: Some(Rc::clone(&analysis.catalog)),
            grant: analysis.access.as_ref().map(|g| g.grant.clone()),
            allowed: analysis.access.as_ref().map(|g| Rc::clone(&g.allowed)),
            visible: analysis.selection.keep.clone(),
            max_rounds: config.unknown_tools.max_rounds,
            ..Session::bare(dialect)
        }
    }

    /// A session that searches nothing, knows no tools and sends no follow-up.
    fn bare(dialect: Dialect) -> Session {
        Session {
            dialect,
            body: String::new(),
            catalog: None,
            searching: false,
            grant: None,
            allowed: None,
            refused: 0,
            connector_calls: 0,
            unknown: Vec::new(),
            searched: Vec::new(),
            searches: 0,
            max_searches: 0,
            stormed: false,
            entries: Vec::new(),
            visible: Vec::new(),
            meta_entries: Vec::new(),
            names: MetaNames {
                find: String::new(),
                use_tool: None,
            },
            max_rounds: 0,
            rounds: 0,
            usage: Vec::new(),
            found: Vec::new(),
            rankings: Vec::new(),
            suggestions: None,
            suggested: Vec::new(),
        }
    }

    /// Searches that find nothing good offer tools from `suggestions`.
    pub fn with_suggestions(mut self, suggestions: Option<Rc<Suggestions>>) -> Session {
        self.suggestions = suggestions;
        self
    }

    /// Names of the tools suggested so far.
    pub fn suggested(&self) -> &[String] {
        &self.suggested
    }

    /// The request's catalog, when the session searches.
    pub fn catalog(&self) -> Option<&Rc<Catalog>> {
        self.catalog.as_ref()
    }

    /// Whether the session answers the meta-tool (search mode), or only checks calls.
    pub fn searches(&self) -> bool {
        self.searching
    }

    /// Whether the response side has something to report (`x-toolsift-search`, the access
    /// log): always for a search; without one, once a made-up call was kept from the client or
    /// a follow-up sent.
    pub fn reports(&self) -> bool {
        self.searching || self.rounds > 0 || !self.unknown.is_empty()
    }

    /// Whether the session checks the model's calls against access rules: then what it cannot
    /// read does not reach the client unchecked.
    pub fn checks_calls(&self) -> bool {
        self.grant.is_some()
    }

    /// Model calls refused so far.
    pub fn refused(&self) -> usize {
        self.refused
    }

    /// Calls of remote MCP connectors' tools seen in the answers so far (under access rules).
    pub fn connector_calls(&self) -> usize {
        self.connector_calls
    }

    /// Whether a call of `name` starting in a released stream must be held to the turn's
    /// end: a meta-tool's (answered here), and under access rules every call (its name and
    /// arguments are checked once complete).
    pub fn holds_call(&self, name: &str) -> bool {
        self.grant.is_some() || self.is_meta(name) || self.is_unknown(name)
    }

    /// Model calls of tools that do not exist, so far (a guard knows no tools: none).
    pub fn unknown(&self) -> &[String] {
        &self.unknown
    }

    /// Whether the request has no tool called `name`, function or built-in (a guard, which
    /// knows no tools, never says so).
    fn is_unknown(&self, name: &str) -> bool {
        let Some(catalog) = &self.catalog else {
            return false;
        };
        !self.is_meta(name)
            && !(0..catalog.draft.entries.len()).any(|e| catalog.governed_name(e) == Some(name))
    }

    /// Why `call` may not reach the client; `None` when it may. A call made in a namespace
    /// (`namespace`) is decided by `<namespace>.<name>` and its bare name.
    fn refusal(&self, call: &Call, namespace: Option<&str>) -> Option<Refusal> {
        if let Some(grant) = &self.grant {
            let decided = match namespace {
                Some(namespace) => {
                    let qualified = format!("{namespace}.{}", call.name);
                    let names = [qualified.as_str(), call.name.as_str()];
                    grant.judge_call_named(Surface::Call, &names, &call.arguments)
                }
                None => grant.judge_call(
                    Surface::Call,
                    &call.name,
                    &Annotations::default(),
                    &call.arguments,
                ),
            };
            if let Decision::Denied(why) = decided {
                return Some(Refusal::Access(why));
            }
        }
        let unknown = namespace.is_none() && self.is_unknown(&call.name);
        unknown.then_some(Refusal::Unknown)
    }

    /// [`Session::refusal`] of `call`, a call of the turn `reply`.
    fn refusal_in(&self, reply: &Reply, call: &Call) -> Option<Refusal> {
        let namespace = self.codec().call_namespace(reply, call);
        self.refusal(call, namespace.as_deref())
    }

    /// The caller's tools whose names are closest to `name` (its words as a search), best
    /// first: of the whole catalog when searching (the model can find them), else of the tools
    /// the model was sent.
    fn closest(&self, name: &str) -> Vec<String> {
        let words = crate::text::terms(name).join(" ");
        let sent = |entry: usize| self.searching || self.visible.get(entry).copied() == Some(true);
        self.ranking(&words)
            .iter()
            .filter(|s| s.score > 0.0 && self.may_see(s.entry) && sent(s.entry))
            .filter_map(|s| self.entry_name(s.entry))
            .take(CLOSEST)
            .map(str::to_owned)
            .collect()
    }

    /// Whether any call of `reply` (the meta-tools' aside) is one the caller's grant refuses.
    pub fn refuses_any(&self, reply: &Reply) -> bool {
        reply
            .calls
            .iter()
            .any(|c| !self.is_meta(&c.name) && self.refusal_in(reply, c).is_some())
    }

    /// Under access rules, per catalog entry, whether the caller may see it.
    pub fn allowed(&self) -> Option<&[bool]> {
        self.allowed.as_deref()
    }

    /// Whether the caller may see catalog entry `entry` (always, without access rules).
    fn may_see(&self, entry: usize) -> bool {
        self.allowed
            .as_ref()
            .is_none_or(|a| a.get(entry).copied().unwrap_or(false))
    }

    /// The queries [`Session::on_reply`] will rank for `reply`: those of the `use_tool` calls,
    /// and those of the `find_tools` calls when they will be answered (no real call beside
    /// them, rounds left). Each once, in order.
    pub fn queries(&self, reply: &Reply) -> Vec<String> {
        let meta = || reply.calls.iter().filter(|c| self.is_meta(&c.name));
        let real_calls = reply
            .calls
            .iter()
            .any(|c| !self.is_meta(&c.name) && self.refusal_in(reply, c).is_none());
        let searching = !real_calls && self.rounds < self.max_rounds;
        let mut out: Vec<String> = Vec::new();
        for call in meta().filter(|c| searching || self.names.is_use_tool(&c.name)) {
            if let Some(query) = call_query(call) {
                if !out.contains(&query) {
                    out.push(query);
                }
            }
        }
        out
    }

    /// Has `query` ranked by `order` (best first) instead of by keyword.
    pub fn set_ranking(&mut self, query: String, order: Vec<Scored>) {
        self.rankings.retain(|(q, _)| *q != query);
        self.rankings.push((query, order));
    }

    /// The ranking of `query`: the one set for it, or the keyword one.
    fn ranking(&self, query: &str) -> Cow<'_, [Scored]> {
        match (
            self.rankings.iter().find(|(q, _)| q == query),
            &self.catalog,
        ) {
            (Some((_, order)), _) => Cow::Borrowed(order),
            // Under access rules, by the statistics of the caller's tools alone.
            (None, Some(catalog)) => match &self.allowed {
                Some(allowed) => Cow::Owned(catalog.rank_among(query, allowed).to_vec()),
                None => Cow::Owned(catalog.index.rank(query)),
            },
            (None, None) => Cow::Owned(Vec::new()),
        }
    }

    /// The request's dialect's codec: how its answers are read and written.
    pub fn codec(&self) -> &'static dyn Codec {
        self.dialect.codec()
    }

    /// The request body sent last.
    pub fn body(&self) -> &str {
        &self.body
    }

    pub fn rounds(&self) -> usize {
        self.rounds
    }

    pub fn found(&self) -> &[String] {
        &self.found
    }

    /// The `x-toolsift-search` header: `rounds=1 found=get_weather usage=812/10,1040/12`.
    pub fn header_value(&self) -> String {
        let usage: Vec<String> = self
            .usage
            .iter()
            .map(|u| match u {
                Some(u) => format!("{}/{}", u.input, u.output),
                None => "-".to_owned(),
            })
            .collect();
        let found: Vec<_> = self.found.iter().map(|n| header_safe(n)).collect();
        // Without a search nothing is found: `rounds=1 usage=…`.
        let found = if self.searching {
            format!(" found={}", found.join(","))
        } else {
            String::new()
        };
        let mut value = format!("rounds={}{found} usage={}", self.rounds, usage.join(","));
        if self.stormed {
            value.push_str(" stopped=max_searches");
        }
        if !self.unknown.is_empty() {
            let unknown: Vec<_> = self.unknown.iter().map(|n| header_safe(n)).collect();
            value.push_str(&format!(" unknown={}", unknown.join(",")));
        }
        if !self.suggested.is_empty() {
            let suggested: Vec<_> = self.suggested.iter().map(|n| header_safe(n)).collect();
            value.push_str(&format!(" suggested={}", suggested.join(",")));
        }
        value
    }

    /// Usage summed over every response, when any reported it.
    fn total_usage(&self) -> Option<Usage> {
        self.usage.iter().flatten().copied().reduce(Usage::plus)
    }

    pub fn is_meta(&self, name: &str) -> bool {
        self.searches() && self.names.is_meta(name)
    }

    /// The name of `entry` in the request's catalog.
    fn entry_name(&self, entry: usize) -> Option<&str> {
        self.catalog.as_ref()?.name(entry)
    }

    /// Decides what follows the model's turn `reply`.
    ///
    /// Under access rules a call the caller's grant refuses (a denied tool, or arguments a rule
    /// does not allow) never reaches the client: beside allowed calls, or when no round remains,
    /// it is dropped and a refusal text takes its place; alone (searches aside) with rounds
    /// left, the model gets an error result for it and the loop goes on.
    pub fn on_reply(&mut self, reply: &Reply) -> Next {
        self.usage.push(reply.usage);
        if let Some(grant) = &self.grant {
            // Run by the provider before the answer came: reported, never stopped.
            for call in self.codec().connector_calls(reply) {
                self.connector_calls += 1;
                grant.note_connector_call(&format!("mcp:{call}"));
            }
        }
        let usage = if self.rounds > 0 {
            self.total_usage()
        } else {
            None
        };
        let meta: Vec<&Call> = reply
            .calls
            .iter()
            .filter(|c| self.is_meta(&c.name))
            .collect();
        let refused: Vec<(&Call, Refusal)> = reply
            .calls
            .iter()
            .filter(|c| !self.is_meta(&c.name))
            .filter_map(|c| Some((c, self.refusal_in(reply, c)?)))
            .collect();
        for (call, refusal) in &refused {
            match refusal {
                Refusal::Access(_) => self.refused += 1,
                Refusal::Unknown => self.unknown.push(call.name.clone()),
            }
        }
        if meta.is_empty() && refused.is_empty() {
            return Next::Deliver(Edits {
                usage,
                ..Edits::default()
            });
        }
        let refused_keys = || refused.iter().map(|(c, _)| call_key(c));
        let drop_meta = |keep: Option<&Call>| -> Vec<String> {
            meta.iter()
                .filter(|c| Some(**c) != keep)
                .map(|c| call_key(c))
                .chain(refused_keys())
                .collect()
        };
        let text = (!refused.is_empty()).then(|| self.refusal_text(&refused));
        // A `use_tool` call that resolves is the model's answer: a direct call of that tool.
        for call in meta.iter().filter(|c| self.names.is_use_tool(&c.name)) {
            if let Some((name, params)) = self.resolve_use_tool(call) {
                return Next::Deliver(Edits {
                    drop: drop_meta(Some(call)),
                    rename: vec![(call_key(call), name, params)],
                    usage,
                    text: text.clone(),
                });
            }
        }
        let real_calls = reply.calls.len() > meta.len() + refused.len();
        if real_calls || self.rounds >= self.max_rounds {
            // Real calls go to the client without the searches beside them; after the last
            // round (the meta-tool was not offered) a stray meta call is dropped too. A refused
            // call leaves with them, and says why in words.
            return Next::Deliver(Edits {
                drop: drop_meta(None),
                usage,
                text: text.clone(),
                ..Edits::default()
            });
        }
        if self.searches + meta.len() > self.max_searches {
            // A search storm: the model has searched enough; it gets no more answers, and the
            // client gets its turn without the searches, and a word on why.
            self.stormed = true;
            let storm = format!("The tool search stopped after {} searches.", self.searches);
            let text = match text {
                Some(refusals) => format!("{refusals}\n{storm}"),
                None => storm,
            };
            return Next::Deliver(Edits {
                drop: drop_meta(None),
                usage,
                text: Some(text),
                ..Edits::default()
            });
        }
        let mut results = Vec::new();
        let mut added = Vec::new();
        for call in &meta {
            self.searches += 1;
            let (result, found) = self.answer(call);
            for entry in found {
                if let Some(v) = self.visible.get_mut(entry) {
                    *v = true;
                }
                if let Some(name) = self.entry_name(entry) {
                    self.found.push(name.to_owned());
                }
                added.push(entry);
            }
            results.push(result);
        }
        for (call, refusal) in &refused {
            let content = self.refusal_for_model(call, refusal);
            results.push(result(call, &content, true));
        }
        match self.follow_up(reply, &results, &added) {
            Some(body) => {
                self.rounds += 1;
                self.body.clone_from(&body);
                Next::FollowUp(body)
            }
            // Cannot happen with a body toolsift wrote; the client then gets the turn without
            // the searches rather than a dangling call.
            None => Next::Deliver(Edits {
                drop: drop_meta(None),
                usage,
                text: text.clone(),
                ..Edits::default()
            }),
        }
    }

    /// What the client reads in place of refused calls: per call, that the tool is not
    /// available (`denied: "hidden"`), or why it is refused (`"refused"`). A refused argument
    /// is always named: the caller sees the tool, and only the value is refused. A tool that
    /// does not exist is said to be so.
    fn refusal_text(&self, refused: &[(&Call, Refusal)]) -> String {
        let hidden = self.denied_mode() == Denied::Hidden;
        let lines: Vec<String> = refused
            .iter()
            .map(|(call, refusal)| match refusal {
                Refusal::Unknown => format!("Tool `{}` does not exist.", call.name),
                Refusal::Access(
                    why @ Why::Argument {
                        argument, value, ..
                    },
                ) => {
                    if hidden {
                        format!(
                            "Tool `{}` was not called: argument `{argument}` may not be {value}.",
                            call.name
                        )
                    } else {
                        format!("Tool `{}` was not called: {why}.", call.name)
                    }
                }
                Refusal::Access(_) if hidden => format!("Tool `{}` is not available.", call.name),
                Refusal::Access(why) => format!("Tool `{}` is not allowed: {why}.", call.name),
            })
            .collect();
        lines.join("\n")
    }

    /// The error result the model gets for a refused call: hidden, as for a tool that does
    /// not exist (naming the meta-tool when the next round offers it); refused, the reason.
    /// A tool that does not exist also gets the names closest to it.
    fn refusal_for_model(&self, call: &Call, refusal: &Refusal) -> Value {
        let hidden = self.denied_mode() == Denied::Hidden;
        let no_such_tool = || {
            let mut text = format!("There is no tool named `{}`.", call.name);
            if !self.searching {
                // Filter mode: the model has all the tools it will get.
                text.push_str(" Call one of the tools in your tool list instead.");
            } else if self.rounds + 1 < self.max_rounds {
                text.push_str(&format!(
                    " Call {} to search the tools available to you.",
                    self.names.find
                ));
            }
            text
        };
        match refusal {
            Refusal::Unknown => json!({
                "error": no_such_tool(),
                "code": "unknown_tool",
                "closest": self.closest(&call.name),
            }),
            Refusal::Access(why @ Why::Argument { .. }) => {
                json!({"error": self.refusal_text(&[(call, Refusal::Access(why.clone()))])})
            }
            Refusal::Access(_) if hidden => json!({"error": no_such_tool()}),
            Refusal::Access(why) => {
                json!({"error": format!("Tool `{}` is not allowed: {why}.", call.name)})
            }
        }
    }

    fn denied_mode(&self) -> Denied {
        self.grant
            .as_ref()
            .map_or(Denied::Hidden, Grant::denied_mode)
    }

    /// The tool result of one meta-tool call, and the entries it makes visible.
    fn answer(&mut self, call: &Call) -> (ToolResult, Vec<usize>) {
        let Some(query) = call_query(call) else {
            let content = json!({
                "error": format!(
                    "{} needs a query: a few words saying what the tool should do",
                    call.name
                )
            });
            return (result(call, &content, true), Vec::new());
        };
        let limit = serde_json::from_str::<Value>(&call.arguments)
            .ok()
            .and_then(|a| a.get("limit").and_then(Value::as_f64))
            .map_or(DEFAULT_LIMIT, |l| l.clamp(1.0, MAX_LIMIT as f64) as usize);
        let words = crate::text::terms(&query).join(" ");
        if self.names.is_use_tool(&call.name) {
            // use_tool's params did not fit its best tool: hand the model that tool's schema.
            let best: Vec<usize> = self.best_tool(&query).into_iter().collect();
            let content = json!({
                "tools": best.iter().map(|&e| self.describe(e)).collect::<Vec<_>>(),
                "note": "The params did not fit this tool's parameters: call it directly."
            });
            let newly: Vec<usize> = best
                .into_iter()
                .filter(|&e| !self.visible.get(e).copied().unwrap_or(true))
                .collect();
            return (result(call, &content, false), newly);
        }
        // The same words again: the first answer's tools, which the model has since.
        if let Some((_, first)) = self.searched.iter().find(|(w, _)| *w == words) {
            let content = self.already_available(first, SEARCHED_ALREADY);
            return (result(call, &content, false), Vec::new());
        }
        let found = self.search(&query, limit);
        // Every best match is in the model's tool list already: a redundant search.
        let best = self.best_seen(&query, limit);
        let redundant = !best.is_empty()
            && best
                .iter()
                .all(|&e| self.visible.get(e).copied().unwrap_or(false));
        self.searched.push((
            words,
            if redundant {
                best.clone()
            } else {
                found.clone()
            },
        ));
        if redundant {
            let content = self.already_available(&best, LISTED_ALREADY);
            return (result(call, &content, false), Vec::new());
        }
        let mut content = if found.is_empty() {
            json!({"tools": [], "note": "No tool matched; try other words."})
        } else {
            json!({
                "tools": found.iter().map(|&e| self.describe(e)).collect::<Vec<_>>(),
                "note": "These tools are now in your tool list: call them directly."
            })
        };
        let suggested = self.suggest(&query, &best);
        if !suggested.is_empty() {
            self.suggested.extend(
                crate::suggestions::names(&suggested)
                    .into_iter()
                    .map(str::to_owned),
            );
            crate::suggestions::add_to(&mut content, suggested);
        }
        (result(call, &content, false), found)
    }

    /// Suggestions for a search whose best matches (of the tools the caller may see) are
    /// `best`: none when the best scores at least `suggestions.min_score`, by keyword (BM25,
    /// whatever ranked the search, so that one threshold means the same everywhere).
    fn suggest(&self, query: &str, best: &[usize]) -> Vec<Value> {
        let Some(suggestions) = &self.suggestions else {
            return Vec::new();
        };
        let keyword = match (&self.catalog, best.first()) {
            (Some(catalog), Some(_)) => catalog
                .index
                .rank(query)
                .iter()
                .filter(|s| s.score > 0.0 && self.may_see(s.entry))
                .map(|s| s.score)
                .next(),
            _ => None,
        };
        if !suggestions.wanted(keyword) {
            return Vec::new();
        }
        let has = |name: &str| {
            (0..self.entries.len()).any(|e| self.entry_name(e) == Some(name)) || self.is_meta(name)
        };
        suggestions.suggest(query, has, self.grant.as_ref())
    }

    /// The answer to a search whose tools the model has already: their names, and a note
    /// that starts with `why`.
    fn already_available(&self, entries: &[usize], why: &str) -> Value {
        let names: Vec<&str> = entries.iter().filter_map(|&e| self.entry_name(e)).collect();
        already_available(&names, why)
    }

    /// The `limit` best-ranked function tools the caller may see, whether the model sees
    /// them already or not.
    fn best_seen(&self, query: &str, limit: usize) -> Vec<usize> {
        self.ranking(query)
            .iter()
            .filter(|s| s.score > 0.0 && self.may_see(s.entry))
            .take(limit)
            .map(|s| s.entry)
            .collect()
    }

    /// Whether the loop was stopped for more searches than `search.max_searches`.
    pub fn stormed(&self) -> bool {
        self.stormed
    }

    /// The best-ranked function tools the model cannot see yet, with some evidence. Tools the
    /// caller may not see are left out inside the search, before `limit`.
    pub fn search(&self, query: &str, limit: usize) -> Vec<usize> {
        self.ranking(query)
            .iter()
            .filter(|s| s.score > 0.0)
            .filter(|s| !self.visible.get(s.entry).copied().unwrap_or(true))
            .filter(|s| self.may_see(s.entry))
            .take(limit)
            .map(|s| s.entry)
            .collect()
    }

    /// The best-ranked function tool of the whole catalog the caller may see.
    fn best_tool(&self, query: &str) -> Option<usize> {
        self.ranking(query)
            .iter()
            .find(|s| self.may_see(s.entry))
            .filter(|s| s.score > 0.0)
            .map(|s| s.entry)
    }

    /// `use_tool(query, params)` as a direct call of the best tool, when params fit it.
    fn resolve_use_tool(&self, call: &Call) -> Option<(String, String)> {
        let args: Value = serde_json::from_str(&call.arguments).ok()?;
        let query = call_query(call)?;
        let params = args.get("params")?;
        let entry = self.best_tool(&query)?;
        let name = self.entry_name(entry)?;
        let schema = self.describe(entry);
        let params_text = params.to_string();
        // Arguments the rules refuse are no call: the model gets the tool's schema instead,
        // and a direct call with them is refused like any other.
        let resolved = call_of(name, &params_text);
        let allowed = self.refusal(&resolved, None).is_none();
        (allowed && fits(params, schema.get("parameters")?)).then(|| (name.to_owned(), params_text))
    }

    /// A tool's name, description and parameter schema, as the tool result lists it.
    fn describe(&self, entry: usize) -> Value {
        let text = self.entries.get(entry).map(String::as_str).unwrap_or("{}");
        let v: Value = serde_json::from_str(text).unwrap_or(Value::Null);
        // Where each dialect keeps them: OpenAI Chat under `function`, Bedrock under
        // `toolSpec`; Anthropic calls the schema `input_schema`, Bedrock `inputSchema.json`.
        let tool = v
            .get("function")
            .or_else(|| v.get("toolSpec"))
            .unwrap_or(&v);
        let parameters = tool
            .get("parameters")
            .or_else(|| tool.get("input_schema"))
            .or_else(|| tool.get("parametersJsonSchema"))
            .or_else(|| tool.get("inputSchema").and_then(|s| s.get("json")))
            .cloned()
            .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
        json!({
            "name": self.entry_name(entry).unwrap_or_default(),
            "description": tool.get("description").cloned().unwrap_or(Value::String(String::new())),
            "parameters": parameters,
        })
    }

    /// The next request: the last one, plus the model's turn and the tool results in the
    /// conversation, plus the found tools at the end of the tools array (minus the meta-tools
    /// when this is the last round).
    fn follow_up(&self, reply: &Reply, results: &[ToolResult], added: &[usize]) -> Option<String> {
        let dialect = self.dialect;
        let codec = dialect.codec();
        let mut items = reply.turn.clone();
        items.extend(codec.tool_results(results));
        let body = append_to_conversation(&self.body, codec.conversation_path(), &items)?;
        let found: Vec<String> = added
            .iter()
            .filter_map(|&e| self.entries.get(e))
            .map(|t| without_defer(t).into_owned())
            .collect();
        let tools_path = dialect.tools_path();
        let mut body = if found.is_empty() {
            body
        } else {
            let grouped = self
                .catalog
                .as_ref()
                .is_some_and(|c| matches!(c.draft.layout, Layout::Grouped { .. }));
            let items = if grouped {
                vec![format!(
                    "{{\"functionDeclarations\":[{}]}}",
                    found.join(",")
                )]
            } else {
                found
            };
            append_to_array(&body, tools_path, &items)?
        };
        if self.rounds + 1 >= self.max_rounds {
            // The last round goes without the meta-tools, so the model answers or calls a real
            // tool; unless they are its only tools: an empty tools array is refused by OpenAI
            // and Anthropic, and Bedrock needs `toolConfig` once the conversation holds tool
            // calls. A search then is answered by nothing: the client gets the turn without it.
            let mut without = body.clone();
            for meta in &self.meta_entries {
                let span = find_path(&without, tools_path)?;
                let tools = without.get(span.clone())?;
                if let Some(removed) = remove_item(tools, meta) {
                    without = splice(&without, span, &removed)?;
                }
            }
            if has_tools(&without, tools_path) {
                body = without;
            }
        }
        Some(body)
    }
}

/// A call of `name` with `arguments`, as the model would make it.
fn call_of(name: &str, arguments: &str) -> Call {
    Call {
        id: String::new(),
        name: name.to_owned(),
        arguments: arguments.to_owned(),
    }
}

/// How edits name a call: its id, or its name when the dialect gives none (Gemini).
pub fn call_key(call: &Call) -> String {
    if call.id.is_empty() {
        call.name.clone()
    } else {
        call.id.clone()
    }
}

fn result(call: &Call, content: &Value, is_error: bool) -> ToolResult {
    ToolResult {
        call: call.clone(),
        content: content.to_string(),
        is_error,
    }
}

/// Whether `params` satisfy `schema` as far as a gateway can tell cheaply: every required key
/// present, and every top-level value of the declared type.
pub fn fits(params: &Value, schema: &Value) -> bool {
    let Some(params) = params.as_object() else {
        return false;
    };
    let required = schema
        .get("required")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if required
        .iter()
        .filter_map(Value::as_str)
        .any(|k| !params.contains_key(k))
    {
        return false;
    }
    let properties = schema.get("properties").and_then(Value::as_object);
    params.iter().all(|(key, value)| {
        let Some(declared) = properties
            .and_then(|p| p.get(key))
            .and_then(|p| p.get("type"))
        else {
            return true;
        };
        let types: Vec<&str> = match declared {
            Value::String(t) => vec![t.as_str()],
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
            _ => return true,
        };
        types.iter().any(|t| is_type(value, t))
    })
}

/// JSON Schema's (and Gemini's upper-case) type names.
fn is_type(value: &Value, name: &str) -> bool {
    match name.to_ascii_lowercase().as_str() {
        "string" => value.is_string(),
        "integer" => value.as_f64().is_some_and(|n| n.fract() == 0.0),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        "null" => value.is_null(),
        _ => true,
    }
}

/// `body` with `items` (JSON texts) appended to the array at `path`. OpenAI Responses' `input`
/// may be a plain string: it becomes a user message followed by the items.
pub fn append_to_conversation(body: &str, path: &[&str], items: &[String]) -> Option<String> {
    let span = find_path(body, path)?;
    let value = body.get(span.clone())?;
    if value.starts_with('"') {
        let mut array = format!("[{{\"role\":\"user\",\"content\":{value}}}");
        for item in items {
            array.push(',');
            array.push_str(item);
        }
        array.push(']');
        return splice(body, span, &array);
    }
    append_to_array(body, path, items)
}

/// `body` with `items` appended to the array at `path`, every existing byte kept.
pub fn append_to_array(body: &str, path: &[&str], items: &[String]) -> Option<String> {
    let span = find_path(body, path)?;
    let array = body.get(span.clone())?;
    let close = span.start + array.rfind(']')?;
    let empty = array
        .get(1..array.len().saturating_sub(1))
        .is_some_and(|inner| inner.trim().is_empty());
    let mut insert = String::new();
    for (i, item) in items.iter().enumerate() {
        if i > 0 || !empty {
            insert.push(',');
        }
        insert.push_str(item);
    }
    splice(body, close..close, &insert)
}

/// Whether the tools container at `path` still holds a tool (Gemini: a declaration, or a Tool
/// object other than an emptied declarations group).
fn has_tools(body: &str, path: &[&str]) -> bool {
    let Some(tools) = find_path(body, path).and_then(|span| body.get(span)) else {
        return false;
    };
    let Ok(items) = serde_json::from_str::<Vec<&serde_json::value::RawValue>>(tools) else {
        return false;
    };
    items.iter().any(|item| {
        let declarations =
            find_path(item.get(), &["functionDeclarations"]).and_then(|span| item.get().get(span));
        match declarations {
            Some(d) => d
                .trim_start_matches('[')
                .trim_start()
                .starts_with(|c| c != ']'),
            None => true,
        }
    })
}

/// The array text without the item written exactly as `item`, and its separator.
fn remove_item(array: &str, item: &str) -> Option<String> {
    let start = array.find(item)?;
    let end = start + item.len();
    let b = array.as_bytes();
    let mut after = end;
    while b.get(after).is_some_and(u8::is_ascii_whitespace) {
        after += 1;
    }
    if b.get(after) == Some(&b',') {
        return splice(array, start..after + 1, "");
    }
    let mut before = start;
    while before > 0 && b.get(before - 1).is_some_and(u8::is_ascii_whitespace) {
        before -= 1;
    }
    if before > 0 && b.get(before - 1) == Some(&b',') {
        return splice(array, before - 1..end, "");
    }
    splice(array, start..end, "")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialects::Dialect;
    use crate::pipeline::Engine;
    use crate::search::plan::{HeaderRoom, Planned, plan};

    /// An OpenAI Chat request with `n` tools (one of them `get_weather`), and its session.
    fn session(config: &str, n: usize) -> (Session, String) {
        let config = Config::from_json(config.as_bytes()).unwrap();
        let mut tools: Vec<String> = (0..n)
            .map(|i| {
                format!(
                    r#"{{"type":"function","function":{{"name":"tool_{i}","description":"Does chore {i}","parameters":{{"type":"object"}}}}}}"#
                )
            })
            .collect();
        tools.push(r#"{"type":"function","function":{"name":"get_weather","description":"Current weather for a city","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}"#.to_owned());
        let body = format!(
            r#"{{"model":"m","messages":[{{"role":"user","content":"What is the weather in Paris?"}}],"tools":[{}]}}"#,
            tools.join(",")
        );
        let mut engine = Engine::new(config.clone());
        let analysis = engine.analyse(Dialect::OpenaiChat, &body).unwrap();
        let room = HeaderRoom::default();
        let Some(Planned::Search(plan)) = plan(&config, &analysis, &body, room) else {
            panic!("planned");
        };
        let suggestions = engine.suggestions().cloned();
        (
            Session::new(&config, &analysis, &body, plan).with_suggestions(suggestions),
            body,
        )
    }

    fn call(id: &str, name: &str, arguments: &str) -> Call {
        Call {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    fn reply(calls: Vec<Call>, usage: (u64, u64)) -> Reply {
        let turn = calls
            .iter()
            .map(|c| {
                format!(
                    r#"{{"role":"assistant","tool_calls":[{{"id":"{}","type":"function","function":{{"name":"{}","arguments":{}}}}}]}}"#,
                    c.id,
                    c.name,
                    serde_json::Value::String(c.arguments.clone())
                )
            })
            .collect();
        Reply {
            calls,
            usage: Some(Usage {
                input: usage.0,
                output: usage.1,
            }),
            turn,
        }
    }

    const SEARCH: &str = r#"{"mode":"search","min_tools":3}"#;

    #[test]
    fn a_search_is_answered_with_a_follow_up_that_only_appends() {
        let (mut s, _) = session(SEARCH, 30);
        let first_body = s.body().to_owned();
        let search = reply(
            vec![call("c1", "find_tools", r#"{"query":"weather in a city"}"#)],
            (100, 10),
        );
        let Next::FollowUp(body) = s.on_reply(&search) else {
            panic!("a follow-up");
        };
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        // The conversation: the question, the model's turn, the tool result.
        let messages = v["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 3);
        assert_eq!(messages[2]["role"], "tool");
        assert_eq!(messages[2]["tool_call_id"], "c1");
        let result: serde_json::Value =
            serde_json::from_str(messages[2]["content"].as_str().unwrap()).unwrap();
        assert_eq!(result["tools"][0]["name"], "get_weather");
        assert_eq!(result["tools"][0]["parameters"]["required"][0], "city");
        // The tools: the first request's, then what was found, as the client wrote it.
        let first: serde_json::Value = serde_json::from_str(&first_body).unwrap();
        let (t1, t2) = (
            first["tools"].as_array().unwrap(),
            v["tools"].as_array().unwrap(),
        );
        assert_eq!(t2[..t1.len()], t1[..], "prefix-stable");
        assert!(
            t2[t1.len()..]
                .iter()
                .any(|t| t["function"]["name"] == "get_weather")
        );
        assert_eq!(s.found()[0], "get_weather");
        assert_eq!(s.rounds(), 1);
        // Then the model calls the tool: delivered, with the usage of both rounds.
        let done = reply(
            vec![call("c2", "get_weather", r#"{"city":"Paris"}"#)],
            (300, 20),
        );
        let Next::Deliver(edits) = s.on_reply(&done) else {
            panic!("delivered");
        };
        assert_eq!(edits.drop, Vec::<String>::new());
        assert_eq!(
            edits.usage,
            Some(Usage {
                input: 400,
                output: 30
            })
        );
        assert!(
            s.header_value().starts_with("rounds=1 found=get_weather"),
            "{}",
            s.header_value()
        );
    }

    /// The last tool result of a follow-up body, read as JSON.
    fn last_result(body: &str) -> Value {
        let v: Value = serde_json::from_str(body).unwrap();
        let messages = v["messages"].as_array().unwrap();
        serde_json::from_str(messages.last().unwrap()["content"].as_str().unwrap()).unwrap()
    }

    #[test]
    fn a_weak_search_gets_suggestions_that_stay_uncallable() {
        let config = r#"{"mode":"search","min_tools":3,"search":{"max_search_rounds":5},
            "suggestions":{"min_score":50,"k":2,"tools":[
                {"name":"create_jira_issue","description":"Create a Jira issue for a bug","source":"the Jira MCP server"},
                {"name":"get_weather","description":"Weather (the client has it: never suggested)"},
                {"name":"send_fax","description":"Send a fax"}]}}"#;
        let (mut s, _) = session(config, 30);
        let search = |id: &str, query: &str| {
            reply(
                vec![call(id, "find_tools", &format!(r#"{{"query":"{query}"}}"#))],
                (1, 1),
            )
        };
        let Next::FollowUp(body) = s.on_reply(&search("c1", "file a jira issue for this bug"))
        else {
            panic!("a follow-up");
        };
        let result = last_result(&body);
        assert_eq!(
            result["suggestions"][0]["name"], "create_jira_issue",
            "{result}"
        );
        assert_eq!(result["suggestions"][0]["suggested"], true);
        assert_eq!(result["suggestions"][0]["source"], "the Jira MCP server");
        assert_eq!(result["suggestions"].as_array().unwrap().len(), 1);
        assert!(result["suggestions_note"].is_string());
        let sent: Value = serde_json::from_str(&body).unwrap();
        assert!(
            !sent["tools"].to_string().contains("create_jira_issue"),
            "a suggestion never joins the tools"
        );
        assert!(s.header_value().contains(" suggested=create_jira_issue"));
        // Calling it anyway is calling a tool that does not exist.
        let Next::FollowUp(body) = s.on_reply(&reply(
            vec![call("c2", "create_jira_issue", r#"{"title":"x"}"#)],
            (1, 1),
        )) else {
            panic!("answered to the model");
        };
        assert_eq!(last_result(&body)["code"], "unknown_tool");
        // A search whose best match scores above min_score gets none.
        let config = config.replace(r#""min_score":50"#, r#""min_score":0.5"#);
        let (mut s, _) = session(&config, 30);
        let Next::FollowUp(body) = s.on_reply(&search("c1", "weather in a city")) else {
            panic!("a follow-up");
        };
        assert!(last_result(&body).get("suggestions").is_none());
        assert!(s.suggested().is_empty());
    }

    #[test]
    fn a_search_again_or_for_tools_the_model_has_says_so_and_adds_nothing() {
        let config = r#"{"mode":"search","min_tools":3,"search":{"max_search_rounds":5}}"#;
        let (mut s, _) = session(config, 30);
        let search = |id: &str, query: &str| {
            reply(
                vec![call(id, "find_tools", &format!(r#"{{"query":"{query}"}}"#))],
                (1, 1),
            )
        };
        let Next::FollowUp(first) = s.on_reply(&search("c1", "weather in a city")) else {
            panic!("a follow-up");
        };
        let tools = |body: &str| {
            serde_json::from_str::<Value>(body).unwrap()["tools"]
                .as_array()
                .unwrap()
                .len()
        };
        // The same words (case and spacing aside): the first answer's tools, nothing added.
        let Next::FollowUp(again) = s.on_reply(&search("c2", "Weather  in a CITY")) else {
            panic!("a follow-up");
        };
        let result = last_result(&again);
        assert!(
            result["note"]
                .as_str()
                .unwrap()
                .starts_with("You searched for this already")
        );
        assert_eq!(result["tools"][0]["name"], "get_weather", "{result}");
        assert_eq!(tools(&again), tools(&first), "nothing added");
        // Other words whose best matches the model has already: a redundant search.
        let Next::FollowUp(redundant) = s.on_reply(&search("c3", "current weather for a city"))
        else {
            panic!("a follow-up");
        };
        let result = last_result(&redundant);
        assert!(
            result["note"]
                .as_str()
                .unwrap()
                .starts_with("These tools are in your tool list already"),
            "{result}"
        );
        assert_eq!(tools(&redundant), tools(&first), "nothing added");
        assert!(!s.stormed());
    }

    #[test]
    fn more_searches_than_max_searches_end_the_loop_with_the_models_turn() {
        let config =
            r#"{"mode":"search","min_tools":3,"search":{"max_searches":2,"max_search_rounds":5}}"#;
        let (mut s, _) = session(config, 30);
        let search =
            |id: &str, query: &str| call(id, "find_tools", &format!(r#"{{"query":"{query}"}}"#));
        let two = reply(
            vec![search("c1", "chore 1"), search("c2", "chore 2")],
            (1, 1),
        );
        assert!(matches!(s.on_reply(&two), Next::FollowUp(_)));
        let third = reply(vec![search("c3", "chore 3")], (1, 1));
        let Next::Deliver(edits) = s.on_reply(&third) else {
            panic!("the loop ends");
        };
        assert_eq!(edits.drop, ["c3"]);
        assert_eq!(
            edits.text.as_deref(),
            Some("The tool search stopped after 2 searches.")
        );
        assert!(s.stormed());
        assert!(
            s.header_value().contains(" stopped=max_searches"),
            "{}",
            s.header_value()
        );
        assert!(Config::from_json(br#"{"search":{"max_searches":0}}"#).is_err());
    }

    #[test]
    fn the_same_search_again_and_again_is_a_storm_too() {
        // Found by the agent-loop replay (benches/agent_loops.rs): repeated searches were
        // answered but not counted, so a model asking the same words every round was never
        // stopped.
        let config =
            r#"{"mode":"search","min_tools":3,"search":{"max_searches":2,"max_search_rounds":5}}"#;
        let (mut s, _) = session(config, 30);
        let search = |id: &str| {
            reply(
                vec![call(id, "find_tools", r#"{"query":"weather in a city"}"#)],
                (1, 1),
            )
        };
        assert!(matches!(s.on_reply(&search("c1")), Next::FollowUp(_)));
        assert!(matches!(s.on_reply(&search("c2")), Next::FollowUp(_)));
        let Next::Deliver(edits) = s.on_reply(&search("c3")) else {
            panic!("the third search ends the loop");
        };
        assert_eq!(edits.drop, ["c3"]);
        assert_eq!(
            edits.text.as_deref(),
            Some("The tool search stopped after 2 searches.")
        );
        assert!(s.stormed());
    }

    #[test]
    fn an_empty_query_gets_an_error_never_the_catalog() {
        let (mut s, _) = session(SEARCH, 30);
        let Next::FollowUp(body) = s.on_reply(&reply(
            vec![call("c", "find_tools", r#"{"query":"  "}"#)],
            (1, 1),
        )) else {
            panic!("answered");
        };
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let content = v["messages"][2]["content"].as_str().unwrap();
        assert!(content.contains("needs a query"), "{content}");
        assert!(s.found().is_empty());
    }

    #[test]
    fn searches_beside_real_calls_are_dropped() {
        let (mut s, _) = session(SEARCH, 30);
        let mixed = reply(
            vec![
                call("c1", "find_tools", r#"{"query":"x"}"#),
                call("c2", "tool_3", "{}"),
            ],
            (5, 5),
        );
        assert_eq!(
            s.on_reply(&mixed),
            Next::Deliver(Edits {
                drop: vec!["c1".into()],
                ..Edits::default()
            })
        );
    }

    #[test]
    fn the_last_round_goes_without_the_meta_tool_unless_it_is_alone() {
        // With other tools shown, the last follow-up drops the meta-tool.
        let (mut s, _) = session(
            r#"{"mode":"search","min_tools":3,"search":{"max_search_rounds":1}}"#,
            30,
        );
        let Next::FollowUp(body) = s.on_reply(&reply(
            vec![call("c", "find_tools", r#"{"query":"weather"}"#)],
            (1, 1),
        )) else {
            panic!("answered");
        };
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let names: Vec<&str> = v["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap())
            .collect();
        assert!(
            !names.contains(&"find_tools") && names.contains(&"get_weather"),
            "{names:?}"
        );
        // A search that finds nothing leaves the meta-tool alone: it stays, never `"tools":[]`.
        let (mut s, _) = session(
            r#"{"mode":"search","min_tools":3,"search":{"max_search_rounds":1}}"#,
            30,
        );
        let Next::FollowUp(body) = s.on_reply(&reply(
            vec![call("c", "find_tools", r#"{"query":"zzzz qqqq"}"#)],
            (1, 1),
        )) else {
            panic!("answered");
        };
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let names: Vec<&str> = v["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["find_tools"]);
        // Past the last round a stray search is dropped.
        let stray = reply(
            vec![call("c9", "find_tools", r#"{"query":"more"}"#)],
            (1, 1),
        );
        let Next::Deliver(edits) = s.on_reply(&stray) else {
            panic!("delivered");
        };
        assert_eq!(edits.drop, ["c9"]);
    }

    #[test]
    fn use_tool_with_fitting_params_becomes_the_call() {
        let (mut s, _) = session(
            r#"{"mode":"search","min_tools":3,"search":{"use_tool":true}}"#,
            30,
        );
        let fits = reply(
            vec![call(
                "u",
                "use_tool",
                r#"{"query":"weather in a city","params":{"city":"Paris"}}"#,
            )],
            (1, 1),
        );
        let Next::Deliver(edits) = s.on_reply(&fits) else {
            panic!("resolved");
        };
        assert_eq!(
            edits.rename,
            [(
                "u".to_owned(),
                "get_weather".to_owned(),
                r#"{"city":"Paris"}"#.to_owned()
            )]
        );
        // Params that miss a required key: the tool's schema comes back instead.
        let (mut s, _) = session(
            r#"{"mode":"search","min_tools":3,"search":{"use_tool":true}}"#,
            30,
        );
        let missing = reply(
            vec![call(
                "u",
                "use_tool",
                r#"{"query":"weather in a city","params":{}}"#,
            )],
            (1, 1),
        );
        assert!(matches!(s.on_reply(&missing), Next::FollowUp(_)));
    }

    /// [`session`]'s request under access rules that deny `get_weather` and the tools
    /// `tool_1*` to the caller (group `staff`), and restrict `tool_2`'s `unit` to `c`.
    fn governed(config: &str, n: usize, denied: &str) -> Session {
        let access = format!(
            r#""access":{{"identity":[{{"header":"x-group"}}],"default":"allow","denied":"{denied}",
            "rules":[{{"when":["staff"],"deny":["get_weather","tool_1*"],
                       "arguments":{{"tool_2":{{"unit":["c"]}}}}}}]}}"#
        );
        let config = config.replacen('{', &format!("{{{access},"), 1);
        let config = Config::from_json(config.as_bytes()).unwrap();
        let mut tools: Vec<String> = (0..n)
            .map(|i| {
                format!(
                    r#"{{"type":"function","function":{{"name":"tool_{i}","description":"Current weather chore {i}","parameters":{{"type":"object"}}}}}}"#
                )
            })
            .collect();
        tools.push(r#"{"type":"function","function":{"name":"get_weather","description":"Current weather for a city weather weather","parameters":{"type":"object"}}}"#.to_owned());
        let body = format!(
            r#"{{"model":"m","messages":[{{"role":"user","content":"hello"}}],"tools":[{}]}}"#,
            tools.join(",")
        );
        let mut engine = Engine::new(config.clone());
        let grant = engine.grant(&crate::access::Caller::new(["staff".to_owned()]));
        let analysis = engine
            .analyse_as(Dialect::OpenaiChat, &body, grant.as_ref())
            .unwrap();
        let Some(Planned::Search(plan)) = plan(&config, &analysis, &body, HeaderRoom::default())
        else {
            panic!("planned");
        };
        Session::new(&config, &analysis, &body, plan)
    }

    #[test]
    fn a_search_finds_only_allowed_tools_and_the_limit_counts_them() {
        let s = governed(SEARCH, 30, "hidden");
        // get_weather ranks first and the tool_1* tools well: none is found, and the limit
        // is filled with allowed tools.
        let found: Vec<&str> = s
            .search("current weather", 3)
            .into_iter()
            .map(|e| s.entry_name(e).unwrap())
            .collect();
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(
            found
                .iter()
                .all(|n| *n != "get_weather" && !n.starts_with("tool_1")),
            "{found:?}"
        );
        // use_tool resolves only to an allowed tool.
        assert_ne!(
            s.best_tool("weather for a city")
                .and_then(|e| s.entry_name(e)),
            Some("get_weather")
        );
    }

    #[test]
    fn a_denied_call_alone_gets_an_error_result_and_the_loop_goes_on() {
        let mut s = governed(SEARCH, 30, "hidden");
        let denied = reply(vec![call("c1", "get_weather", "{}")], (5, 5));
        let Next::FollowUp(body) = s.on_reply(&denied) else {
            panic!("a follow-up");
        };
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let result = v["messages"][2]["content"].as_str().unwrap();
        assert!(
            result.contains("There is no tool named `get_weather`")
                && result.contains("Call find_tools"),
            "{result}"
        );
        assert!(
            !body.contains(r#""name":"get_weather","description""#),
            "never offered"
        );
        assert_eq!(s.refused(), 1);
        // Refused mode: the model reads why.
        let mut s = governed(SEARCH, 30, "refused");
        let Next::FollowUp(body) = s.on_reply(&denied) else {
            panic!("a follow-up");
        };
        assert!(
            body.contains("is not allowed: denied by access rule 0"),
            "{body}"
        );
        // Refused arguments: named in both modes.
        let mut s = governed(SEARCH, 30, "hidden");
        let bad = reply(vec![call("c2", "tool_2", r#"{"unit":"f"}"#)], (1, 1));
        let Next::FollowUp(body) = s.on_reply(&bad) else {
            panic!("a follow-up");
        };
        assert!(
            body.contains("was not called: argument `unit` may not be"),
            "{body}"
        );
    }

    #[test]
    fn a_call_of_a_tool_that_does_not_exist_is_answered_to_the_model_never_delivered() {
        let (mut s, _) = session(SEARCH, 30);
        // The model misremembers `get_weather`.
        let made_up = reply(
            vec![call("c1", "get_weather_now", r#"{"city":"Paris"}"#)],
            (5, 5),
        );
        let Next::FollowUp(body) = s.on_reply(&made_up) else {
            panic!("a follow-up");
        };
        let v: Value = serde_json::from_str(&body).unwrap();
        let result: Value =
            serde_json::from_str(v["messages"][2]["content"].as_str().unwrap()).unwrap();
        assert_eq!(result["code"], "unknown_tool", "{result}");
        assert!(
            result["error"]
                .as_str()
                .unwrap()
                .contains("There is no tool named `get_weather_now`. Call find_tools"),
            "{result}"
        );
        assert_eq!(result["closest"][0], "get_weather", "{result}");
        assert_eq!(s.unknown(), ["get_weather_now"]);
        assert_eq!(s.refused(), 0, "not an access refusal");
        assert!(s.header_value().ends_with(" unknown=get_weather_now"));
        assert!(s.holds_call("get_weather_now") && !s.holds_call("tool_3"));

        // Beside a real call: dropped, and the client reads that it does not exist.
        let (mut s, _) = session(SEARCH, 30);
        let mixed = reply(
            vec![call("c1", "tool_3", "{}"), call("c2", "no_such_tool", "{}")],
            (1, 1),
        );
        let Next::Deliver(edits) = s.on_reply(&mixed) else {
            panic!("delivered");
        };
        assert_eq!(edits.drop, ["c2"]);
        assert_eq!(
            edits.text.as_deref(),
            Some("Tool `no_such_tool` does not exist.")
        );

        // A client tool is never unknown.
        let (mut s, _) = session(SEARCH, 30);
        let real = reply(vec![call("c1", "tool_29", "{}")], (1, 1));
        assert_eq!(
            s.on_reply(&real),
            Next::Deliver(Edits {
                usage: None,
                ..Edits::default()
            })
        );
    }

    #[test]
    fn a_denied_call_beside_an_allowed_one_or_in_the_last_round_is_refused_in_words() {
        let mut s = governed(SEARCH, 30, "hidden");
        let mixed = reply(
            vec![
                call("c1", "find_tools", r#"{"query":"x"}"#),
                call("c2", "get_weather", "{}"),
                call("c3", "tool_3", "{}"),
            ],
            (1, 1),
        );
        let Next::Deliver(edits) = s.on_reply(&mixed) else {
            panic!("delivered");
        };
        assert_eq!(edits.drop, ["c1", "c2"]);
        assert_eq!(
            edits.text.as_deref(),
            Some("Tool `get_weather` is not available.")
        );
        // No round left: the denied call becomes words, and the turn ends.
        let mut s = governed(
            r#"{"mode":"search","min_tools":3,"search":{"max_search_rounds":1}}"#,
            30,
            "refused",
        );
        let search = reply(
            vec![call("c1", "find_tools", r#"{"query":"chore"}"#)],
            (1, 1),
        );
        assert!(matches!(s.on_reply(&search), Next::FollowUp(_)));
        let Next::Deliver(edits) = s.on_reply(&reply(vec![call("c9", "tool_12", "{}")], (1, 1)))
        else {
            panic!("delivered");
        };
        assert_eq!(edits.drop, ["c9"]);
        assert_eq!(
            edits.text.as_deref(),
            Some("Tool `tool_12` is not allowed: denied by access rule 0 (`tool_1*`).")
        );
        // An allowed call passes as it is.
        let mut s = governed(SEARCH, 30, "hidden");
        let ok = reply(vec![call("c4", "tool_2", r#"{"unit":"c"}"#)], (1, 1));
        assert_eq!(s.on_reply(&ok), Next::Deliver(Edits::default()));
    }

    /// Filter mode with `unknown_tools.answer`: [`session`]'s request filtered to `top_k`,
    /// the session answering made-up calls, the body that went upstream, and the kept names.
    fn answering(extra: &str) -> (Session, String, Vec<String>) {
        let config = format!(r#"{{"min_tools":3,"unknown_tools":{{"answer":true{extra}}}}}"#);
        let config = Config::from_json(config.as_bytes()).unwrap();
        let (_, body) = session(SEARCH, 30);
        let mut engine = Engine::new(config.clone());
        let analysis = engine.analyse(Dialect::OpenaiChat, &body).unwrap();
        let (head, replaced) = analysis.rewrite_head(body.as_bytes()).unwrap();
        let sent = String::from_utf8(head).unwrap() + &body[replaced..];
        let kept = analysis
            .kept_names()
            .into_iter()
            .map(str::to_owned)
            .collect();
        let s = Session::answering(&config, &analysis, Dialect::OpenaiChat, sent.clone());
        (s, sent, kept)
    }

    #[test]
    fn filter_mode_answers_a_made_up_call_with_the_closest_tools_it_was_sent() {
        let (mut s, sent, kept) = answering("");
        assert!(
            kept.contains(&"get_weather".to_owned()) && kept.len() == 5,
            "{kept:?}"
        );
        assert!(!s.searches() && !s.reports());
        assert!(s.holds_call("get_weather_now") && !s.holds_call("get_weather"));
        let made_up = reply(
            vec![call("c1", "get_weather_now", r#"{"city":"Paris"}"#)],
            (5, 5),
        );
        let Next::FollowUp(body) = s.on_reply(&made_up) else {
            panic!("a follow-up");
        };
        // The body that went upstream, plus the model's turn and the error result: the tools
        // stay the filtered ones, and nothing sends the model searching.
        let (v, first): (Value, Value) = (
            serde_json::from_str(&body).unwrap(),
            serde_json::from_str(&sent).unwrap(),
        );
        assert_eq!(v["tools"], first["tools"]);
        assert_eq!(v["messages"].as_array().unwrap().len(), 3);
        let result = last_result(&body);
        assert_eq!(result["code"], "unknown_tool");
        assert_eq!(
            result["error"],
            "There is no tool named `get_weather_now`. Call one of the tools in your tool list instead."
        );
        assert_eq!(result["closest"], json!(["get_weather"]));
        assert!(!body.contains("find_tools"));
        assert!(s.reports());
        // Then the model calls a tool it has: delivered, usage of both rounds.
        let done = reply(
            vec![call("c2", "get_weather", r#"{"city":"Paris"}"#)],
            (7, 3),
        );
        let Next::Deliver(edits) = s.on_reply(&done) else {
            panic!("delivered");
        };
        assert!(edits.drop.is_empty() && edits.text.is_none());
        assert_eq!(
            edits.usage,
            Some(Usage {
                input: 12,
                output: 8
            })
        );
        assert_eq!(
            s.header_value(),
            "rounds=1 usage=5/5,7/3 unknown=get_weather_now"
        );
    }

    #[test]
    fn filter_mode_delivers_a_tool_it_ranked_out_and_names_only_tools_it_sent() {
        let (mut s, _, kept) = answering("");
        // tool_29 is the client's, ranked out: the client has it, so the call is delivered.
        assert!(!kept.contains(&"tool_29".to_owned()));
        let ranked_out = reply(vec![call("c1", "tool_29", "{}")], (1, 1));
        assert_eq!(s.on_reply(&ranked_out), Next::Deliver(Edits::default()));
        assert!(s.unknown().is_empty() && !s.reports());
        // A made-up name closest to a ranked-out tool: only tools the model was sent are named.
        let (mut s, _, kept) = answering("");
        let Next::FollowUp(body) = s.on_reply(&reply(vec![call("c1", "tool_29_v2", "{}")], (1, 1)))
        else {
            panic!("a follow-up");
        };
        let closest = last_result(&body)["closest"].clone();
        let closest: Vec<String> = serde_json::from_value(closest).unwrap();
        assert!(!closest.is_empty(), "kept tool_* names share a word");
        assert!(
            closest.iter().all(|n| kept.contains(n) && n != "tool_29"),
            "{closest:?} of {kept:?}"
        );
    }

    #[test]
    fn filter_mode_under_access_rules_answers_a_refused_call_as_a_made_up_one() {
        let config = Config::from_json(
            br#"{"min_tools":3,"unknown_tools":{"answer":true},
                "access":{"identity":[{"header":"x-group"}],"default":"allow",
                "rules":[{"when":["staff"],"deny":["tool_1*"]}]}}"#,
        )
        .unwrap();
        let (_, body) = session(SEARCH, 30);
        let mut engine = Engine::new(config.clone());
        let grant = engine.grant(&crate::access::Caller::new(["staff".to_owned()]));
        let analysis = engine
            .analyse_as(Dialect::OpenaiChat, &body, grant.as_ref())
            .unwrap();
        let mut s = Session::answering(&config, &analysis, Dialect::OpenaiChat, body);
        assert!(
            s.checks_calls() && s.holds_call("get_weather"),
            "every call is held"
        );
        let Next::FollowUp(sent) = s.on_reply(&reply(vec![call("c1", "tool_12", "{}")], (1, 1)))
        else {
            panic!("a follow-up");
        };
        assert_eq!(
            last_result(&sent)["error"],
            "There is no tool named `tool_12`. Call one of the tools in your tool list instead."
        );
        assert_eq!((s.refused(), s.unknown().len()), (1, 0));
    }

    /// What the client gets for a turn of `calls`, which `s` must deliver: the calls it drops,
    /// and the words in their place.
    fn delivered(s: &mut Session, calls: Vec<Call>) -> (Vec<String>, Option<String>) {
        let Next::Deliver(edits) = s.on_reply(&reply(calls, (1, 1))) else {
            panic!("delivered");
        };
        (edits.drop, edits.text)
    }

    #[test]
    fn filter_mode_drops_a_made_up_call_beside_a_real_one_or_past_its_rounds() {
        let (mut s, _, _) = answering("");
        let mixed = vec![
            call("c1", "get_weather", "{}"),
            call("c2", "no_such_tool", "{}"),
        ];
        let dropped = (
            vec!["c2".to_owned()],
            Some("Tool `no_such_tool` does not exist.".to_owned()),
        );
        assert_eq!(delivered(&mut s, mixed), dropped);
        // One round: the second made-up call is dropped, and the turn says so.
        let (mut s, _, _) = answering(r#","max_rounds":1"#);
        let made_up = |id: &str| vec![call(id, "no_such_tool", "{}")];
        assert!(matches!(
            s.on_reply(&reply(made_up("c1"), (1, 1))),
            Next::FollowUp(_)
        ));
        assert_eq!(delivered(&mut s, made_up("c2")), dropped);
        assert_eq!(s.unknown(), ["no_such_tool", "no_such_tool"]);
        assert_eq!(s.rounds(), 1);
    }

    #[test]
    fn a_guard_refuses_without_searching() {
        let config = Config::from_json(
            br#"{"access":{"identity":[{"header":"x-group"}],"default":"deny",
                "rules":[{"when":["staff"],"allow":["get_*"]}]}}"#,
        )
        .unwrap();
        let engine = Engine::new(config);
        let grant = engine
            .grant(&crate::access::Caller::new(["staff".to_owned()]))
            .unwrap();
        let mut s = Session::guard(Dialect::Anthropic, grant);
        assert!(!s.searches() && s.holds_call("anything"));
        let turn = vec![
            call("a", "get_weather", "{}"),
            call("b", "delete_all", "{}"),
        ];
        assert_eq!(
            delivered(&mut s, turn),
            (
                vec!["b".to_owned()],
                Some("Tool `delete_all` is not available.".to_owned())
            )
        );
        // Nothing is a meta-tool to a guard, whatever its name.
        let find = vec![call("f", "find_tools", "{}")];
        assert_eq!(delivered(&mut s, find).0, ["f"]);
        assert_eq!(s.refused(), 2);
    }

    #[test]
    fn usage_sums_saturate() {
        let big = Usage {
            input: u64::MAX - 1,
            output: 3,
        };
        assert_eq!(
            big.plus(Usage {
                input: 9,
                output: 4
            }),
            Usage {
                input: u64::MAX,
                output: 7
            }
        );
    }
}
