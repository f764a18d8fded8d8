//! Search mode's first request: the meta-tool first, then the `always_include` tools, the tools
//! the conversation already called (first-call order), the tools `tool_choice` names and the
//! `eager_k` best-ranked ones; every other function tool is deferred. The order is chosen so a
//! later turn's tools array starts with an earlier turn's, and the provider's prompt cache
//! survives the agent loop.

use crate::config::search::USE_TOOL_NAME;
use crate::config::{Config, glob_match};
use crate::dialects::{CatalogDraft, Dialect, Entry, Layout, ProviderSearch};
use crate::json::{find_path, without_member};
use crate::pipeline::Analysis;
use crate::rewrite::{rebuild_container, splice};
use serde_json::json;
use std::borrow::Cow;

/// What search mode does with one request.
#[derive(Debug)]
pub enum Planned {
    /// The request carries the provider's own tool search: it goes upstream untouched, or
    /// (under access rules) with the caller's denied tools removed, every other byte kept:
    /// this body, when any was denied.
    Native(Option<String>),
    /// A `search.native_search` rule matched the model: the provider searches.
    Provider(ProviderPlan),
    /// The gateway answers `find_tools`.
    Search(Plan),
}

/// A request handed to the provider's own tool search: every tool stays, in its place; the
/// ones search mode would defer get `defer_loading: true`, and the provider's search tool
/// comes first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderPlan {
    pub body: String,
    /// Function tools the model sees from the start (not deferred).
    pub shown: usize,
    /// The `anthropic-beta` value the provider needs, to add to the request's.
    pub beta: Option<String>,
}

/// The first request of a search, and what the follow-ups need to know of it.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The request's dialect.
    pub dialect: Dialect,
    /// The body sent upstream.
    pub body: String,
    /// Per catalog entry: the model can see it (built-ins always can).
    pub visible: Vec<bool>,
    /// The meta-tools' entries exactly as written into the tools array.
    pub meta_entries: Vec<String>,
    /// The meta-tools' names in this request.
    pub names: MetaNames,
    /// The tools shown because the session's memory offered them (not pinned or eager
    /// anyway), in the order shown.
    pub remembered: Vec<String>,
}

/// The names of a request's meta-tools: `search.tool_name` and `use_tool`, unless a client tool
/// already has that name. A client tool is never shadowed or duplicated: the meta-tool takes
/// the first free name of `{name}_2`, `{name}_3`, … (the same for the same catalog, so every turn
/// of an agent loop sees the same tools).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaNames {
    pub find: String,
    /// `None` unless `search.use_tool`.
    pub use_tool: Option<String>,
}

impl MetaNames {
    pub fn for_catalog(config: &Config, taken: impl Fn(&str) -> bool) -> MetaNames {
        let mut chosen: Vec<String> = Vec::new();
        let mut free = |base: &str| -> String {
            let name = std::iter::once(base.to_owned())
                .chain((2..).map(|n| format!("{base}_{n}")))
                .find(|n| !taken(n) && !chosen.contains(n))
                .unwrap_or_else(|| base.to_owned());
            chosen.push(name.clone());
            name
        };
        let find = free(&config.search.tool_name);
        let use_tool = config.search.use_tool.then(|| free(USE_TOOL_NAME));
        MetaNames { find, use_tool }
    }

    pub fn is_meta(&self, name: &str) -> bool {
        name == self.find || self.use_tool.as_deref() == Some(name)
    }

    pub fn is_use_tool(&self, name: &str) -> bool {
        self.use_tool.as_deref() == Some(name)
    }
}

/// What the request's headers leave open to search mode.
#[derive(Debug, Clone, Copy, Default)]
pub struct HeaderRoom<'a> {
    /// The request headers are held: a header can still be added.
    pub held: bool,
    /// The client's own `anthropic-beta` value.
    pub anthropic_beta: &'a str,
}

impl HeaderRoom<'_> {
    fn has_beta(&self, beta: &str) -> bool {
        self.anthropic_beta.split(',').any(|b| b.trim() == beta)
    }
}

impl Plan {
    /// Function tools the model cannot see yet.
    pub fn deferred(&self, analysis: &Analysis) -> usize {
        analysis
            .catalog
            .draft
            .entries
            .iter()
            .zip(&self.visible)
            .filter(|(e, v)| matches!(e, Entry::Function(_)) && !**v)
            .count()
    }
}

/// The client marked the tool `defer_loading: true` (top level, or inside OpenAI Chat's
/// `function`).
pub fn client_deferred(entry: &str) -> bool {
    if !entry.contains("defer_loading") {
        return false;
    }
    let at = |path: &[&str]| find_path(entry, path).and_then(|r| entry.get(r));
    at(&["defer_loading"]) == Some("true") || at(&["function", "defer_loading"]) == Some("true")
}

/// The entry without `defer_loading`, for an upstream that does not know it: the only change
/// search mode makes to a forwarded tool's bytes.
pub fn without_defer(entry: &str) -> Cow<'_, str> {
    if !entry.contains("defer_loading") {
        return Cow::Borrowed(entry);
    }
    let mut out = Cow::Borrowed(entry);
    if let Some(stripped) = without_member(&out, "defer_loading") {
        out = Cow::Owned(stripped);
    }
    let inner = find_path(&out, &["function"]).and_then(|r| {
        let stripped = without_member(out.get(r.clone())?, "defer_loading")?;
        splice(&out, r, &stripped)
    });
    match inner {
        Some(stripped) => Cow::Owned(stripped),
        None => out,
    }
}

/// Each catalog entry's JSON text inside `container` (function declarations for Gemini).
pub fn entry_texts<'a>(container: &'a str, draft: &CatalogDraft) -> Vec<&'a str> {
    draft.entry_texts(container)
}

/// The meta-tools' entries in the dialect's format.
pub fn meta_entries(
    config: &Config,
    names: &MetaNames,
    dialect: Dialect,
    deferred_names: &[&str],
) -> Vec<String> {
    let codec = dialect.codec();
    let name = &names.find;
    let mut description = format!(
        "Search the tools available to you. Your tool list shows only some of them: when you \
         need a tool you do not see, call {name} with a few words saying what the tool should \
         do, then call the tool it finds. Found tools are added to your tool list."
    );
    if config.search.catalog_hint && !deferred_names.is_empty() {
        description.push_str(" Tools that can be found: ");
        description.push_str(&deferred_names.join(", "));
        description.push('.');
    }
    let parameters = json!({
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What the tool should do, in a few words."},
            "limit": {
                "type": "integer",
                "description": "How many tools to return: 5 unless said, at most 20.",
                "minimum": 1,
                "maximum": 20
            }
        },
        "required": ["query"]
    });
    let mut out = vec![codec.tool_entry(name, &description, &parameters)];
    if let Some(use_tool) = &names.use_tool {
        let parameters = json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What the tool should do, in a few words."},
                "params": {"type": "object", "description": "The arguments for that tool."}
            },
            "required": ["query", "params"]
        });
        let description = format!(
            "Call a tool you do not see by describing it: the best-matching tool is called \
             with params when they fit its parameters; otherwise you get its parameters back, \
             as from {name}, and can call it yourself."
        );
        out.push(codec.tool_entry(use_tool, &description, &parameters));
    }
    out
}

/// Builds search mode's first request from the client's body and its analysis.
pub fn plan(
    config: &Config,
    analysis: &Analysis,
    body: &str,
    room: HeaderRoom<'_>,
) -> Option<Planned> {
    plan_remembering(config, analysis, body, room, &[])
}

/// [`plan`] for a request whose session found `remembered` in earlier turns (first-found
/// order, [`crate::search::memory`]): those tools are shown too, after the pinned and
/// `eager_k` ones, in that order, as far as `max_tool_tokens` allows. A pinned tool (called,
/// or named by `tool_choice`) that memory offers takes its place among them, so a later turn's
/// tools array reads as the follow-up that found it did, and the provider's prompt cache
/// holds. Denied and evicted tools never come back from memory.
pub fn plan_remembering(
    config: &Config,
    analysis: &Analysis,
    body: &str,
    room: HeaderRoom<'_>,
    remembered: &[String],
) -> Option<Planned> {
    // Search mode serves the dialects' requests, never a custom request shape's.
    let dialect = analysis.dialect()?;
    let catalog = &analysis.catalog;
    let draft = &catalog.draft;
    let container = body.get(analysis.container.clone())?;
    let texts = entry_texts(container, draft);
    if texts.len() != draft.entries.len() {
        return None;
    }
    let is_function = |i: usize| matches!(draft.entries.get(i), Some(Entry::Function(_)));
    // Under access rules a tool the caller may not see is never shown, deferred or findable:
    // it is not there at all (a provider built-in the rules deny included).
    let allowed = |i: usize| {
        analysis
            .access
            .as_ref()
            .is_none_or(|g| g.allowed.get(i).copied().unwrap_or(false))
    };
    // The request carries the provider's own tool search (only under access rules that deny
    // some of its tools does it get here: otherwise it is skipped, untouched).
    if analysis.native_search {
        // The provider searches what the request carries: the denied tools leave it.
        if analysis.denied() == 0 {
            return Some(Planned::Native(None));
        }
        let keep: Vec<bool> = (0..texts.len()).map(allowed).collect();
        let tools = rebuild_container(container, draft, &keep);
        return Some(Planned::Native(Some(analysis.with_tools(body, &tools)?)));
    }

    // Which function tools the model sees, in the order it sees them.
    let mut visible = vec![false; texts.len()];
    let mut order: Vec<usize> = Vec::new();
    // A tool the loop guard evicted is not shown; `find_tools` can still find it, and then
    // it is back for the rest of the turn.
    let evicted = |i: usize| {
        catalog
            .name(i)
            .is_some_and(|n| analysis.evicted.iter().any(|e| e == n))
    };
    let mut show = |i: usize, visible: &mut Vec<bool>| {
        if !allowed(i) || evicted(i) {
            return;
        }
        if let Some(v) = visible.get_mut(i) {
            if !*v {
                *v = true;
                order.push(i);
            }
        }
    };
    let by_name = |name: &str| (0..texts.len()).find(|&i| catalog.name(i) == Some(name));
    let provider = provider_search(config, dialect, body, room);
    // The provider's search loads what it finds itself: memory is the gateway loop's.
    let mut recalled: Vec<usize> = Vec::new();
    if provider.is_none() {
        for i in remembered.iter().filter_map(|n| by_name(n)) {
            if is_function(i) && !recalled.contains(&i) {
                recalled.push(i);
            }
        }
    }
    let pins: Vec<usize> = analysis
        .called
        .iter()
        .chain(&analysis.choice.named)
        .filter_map(|n| by_name(n))
        .collect();
    // Pinned tools memory offers wait for their place among the remembered ones.
    let waiting = |i: usize| recalled.contains(&i) && pins.contains(&i);
    for i in 0..texts.len() {
        if catalog.name(i).is_some_and(|n| config.always_includes(n)) {
            show(i, &mut visible);
        }
    }
    for &i in pins.iter().filter(|&&i| !waiting(i)) {
        show(i, &mut visible);
    }
    // Filter mode plans a search only past a capped `auto_k` (`auto_k.beyond`): the k it
    // would have kept is shown, and `find_tools` finds the rest.
    let eager_k = match config.mode {
        crate::config::Mode::Search => config.search.eager_k,
        crate::config::Mode::Filter => analysis.top_k,
    };
    let mut eager = 0;
    for d in &analysis.selection.decisions {
        if eager >= eager_k {
            break;
        }
        let deferred_by_client = texts.get(d.entry).is_some_and(|t| client_deferred(t));
        let hidden = !visible.get(d.entry).copied().unwrap_or(true);
        if !deferred_by_client && hidden && !waiting(d.entry) && allowed(d.entry) {
            show(d.entry, &mut visible);
            eager += 1;
        }
    }
    // Remembered tools, first-found order, within `max_tool_tokens` (pins always: the
    // budget counts them first, and only the tools memory adds stop at the first that does
    // not fit, so the order stays a prefix of the session's finds).
    let tokens = |i: usize| {
        texts
            .get(i)
            .map_or(0, |t| crate::rank::estimate_tokens(t.len()))
    };
    let mut used: usize = (0..texts.len())
        .filter(|&i| is_function(i) && (visible.get(i).copied().unwrap_or(false) || waiting(i)))
        .map(tokens)
        .sum();
    let mut over_budget = false;
    let mut from_memory: Vec<String> = Vec::new();
    for &i in &recalled {
        if visible.get(i).copied().unwrap_or(true) || !allowed(i) || evicted(i) {
            continue;
        }
        if !waiting(i) {
            let fits = config
                .max_tool_tokens
                .is_none_or(|max| used + tokens(i) <= max);
            if over_budget || !fits {
                over_budget = true;
                continue;
            }
            used += tokens(i);
            from_memory.extend(catalog.name(i).map(str::to_owned));
        }
        show(i, &mut visible);
    }
    // Built-ins are shown unless the caller may not use them.
    for (i, v) in visible.iter_mut().enumerate() {
        if !is_function(i) {
            *v = allowed(i);
        }
    }

    if let Some((search_tool, beta)) = provider {
        // The provider would search a deferred tool: denied ones leave instead.
        let keep: Vec<bool> = (0..texts.len()).map(allowed).collect();
        let tools = defer_for_provider(container, draft, &visible, &keep, &search_tool);
        // What the provider loads: the client's own `defer_loading`, else ours.
        let loaded = |i: usize| match texts.get(i) {
            Some(t) if find_path(t, &["defer_loading"]).is_some() => !client_deferred(t),
            _ => visible.get(i).copied().unwrap_or(true),
        };
        let shown = (0..texts.len())
            .filter(|&i| is_function(i) && allowed(i) && loaded(i))
            .count();
        return Some(Planned::Provider(ProviderPlan {
            body: analysis.with_tools(body, &tools)?,
            shown,
            beta: beta.map(str::to_owned),
        }));
    }

    let deferred_names: Vec<&str> = (0..texts.len())
        .filter(|&i| allowed(i) && !visible.get(i).copied().unwrap_or(true))
        .filter_map(|i| catalog.name(i))
        .collect();
    let names = MetaNames::for_catalog(config, |n| {
        (0..texts.len()).any(|i| catalog.name(i) == Some(n))
    });
    let meta = meta_entries(config, &names, dialect, &deferred_names);
    let shown = order
        .iter()
        .filter_map(|&i| texts.get(i))
        .map(|t| without_defer(t));
    let tools = match &draft.layout {
        Layout::Flat(_) => {
            let builtins = (0..texts.len())
                .filter(|&i| !is_function(i))
                .filter_map(|i| texts.get(i))
                .map(|t| Cow::Borrowed(*t));
            let items: Vec<Cow<str>> = meta
                .iter()
                .map(|m| Cow::Borrowed(m.as_str()))
                .chain(builtins)
                .chain(shown)
                .collect();
            format!("[{}]", items.join(","))
        }
        Layout::Grouped { .. } => {
            // One declarations group (the meta-tool first), then the Tool objects that are not
            // declarations (googleSearch, codeExecution, …) as the client wrote them.
            let declarations: Vec<Cow<str>> = meta
                .iter()
                .map(|m| Cow::Borrowed(m.as_str()))
                .chain(shown)
                .collect();
            let keep: Vec<bool> = (0..texts.len()).map(|i| !is_function(i)).collect();
            let others = rebuild_container(container, draft, &keep);
            let others = others.trim();
            let others = others
                .strip_prefix('[')
                .and_then(|o| o.strip_suffix(']'))
                .unwrap_or_default()
                .trim();
            let mut tools = format!("[{{\"functionDeclarations\":[{}]}}", declarations.join(","));
            if !others.is_empty() {
                tools.push(',');
                tools.push_str(others);
            }
            tools.push(']');
            tools
        }
    };
    let body = analysis.with_tools(body, &tools)?;
    Some(Planned::Search(Plan {
        dialect,
        body,
        visible,
        meta_entries: meta,
        names,
        remembered: from_memory,
    }))
}

/// The provider's search tool entry and the beta to add, when a `search.native_search` rule
/// matches the request's model and the dialect can defer tools. A rule whose beta the client did
/// not send and toolsift cannot add (the request headers are not held) does not apply: the
/// provider would refuse its search tool, and the gateway's own search serves instead.
fn provider_search<'c>(
    config: &'c Config,
    dialect: Dialect,
    body: &str,
    room: HeaderRoom<'_>,
) -> Option<(String, Option<&'c str>)> {
    let rules = &config.search.native_search;
    if rules.is_empty() {
        return None;
    }
    let model: String = find_path(body, &["model"])
        .and_then(|r| body.get(r))
        .and_then(|raw| serde_json::from_str(raw).ok())?;
    let rule = rules.iter().find(|r| glob_match(&r.model, &model))?;
    let (provider_default, takes_beta) = match dialect.codec().provider_search() {
        ProviderSearch::Unsupported => return None,
        ProviderSearch::OperatorDefined => (None, false),
        ProviderSearch::Tool { entry, beta } => (Some(entry), beta),
    };
    let tool = match &rule.tool {
        Some(tool) => serde_json::Value::Object(tool.clone()).to_string(),
        None => provider_default?,
    };
    let beta = (takes_beta && !rule.anthropic_beta.is_empty())
        .then_some(rule.anthropic_beta.as_str())
        .filter(|beta| !room.has_beta(beta));
    if beta.is_some() && !room.held {
        return None;
    }
    Some((tool, beta))
}

/// Anthropic's BM25 tool search tool: it takes natural-language queries, as `find_tools` does.
pub use crate::dialects::anthropic::{
    SEARCH_TOOL as ANTHROPIC_SEARCH_TOOL, SEARCH_TOOL_NAME as ANTHROPIC_SEARCH_TOOL_NAME,
};

/// The tools array (flat: the dialects with deferral) with `search_tool` first,
/// `defer_loading: true` added to every function tool that is not visible, and the entries
/// `keep` says no to left out. Every other byte, separators included, stays; a tool whose
/// `defer_loading` the client set either way is left as the client wrote it.
fn defer_for_provider(
    container: &str,
    draft: &CatalogDraft,
    visible: &[bool],
    keep: &[bool],
    search_tool: &str,
) -> String {
    let Layout::Flat(array) = &draft.layout else {
        return container.to_owned();
    };
    let mut out = Vec::with_capacity(container.len() + 24 * visible.len());
    array.write_bytes(container.as_bytes(), &mut out, |i, bytes| {
        if !keep.get(i).copied().unwrap_or(true) {
            return None;
        }
        // Items of a text container are text.
        let Ok(text) = std::str::from_utf8(bytes) else {
            return Some(Cow::Borrowed(bytes));
        };
        let defer = matches!(draft.entries.get(i), Some(Entry::Function(_)))
            && !visible.get(i).copied().unwrap_or(true)
            && find_path(text, &["defer_loading"]).is_none();
        Some(if defer {
            Cow::Owned(with_defer(text).into_bytes())
        } else {
            Cow::Borrowed(bytes)
        })
    });
    let Ok(out) = String::from_utf8(out) else {
        return container.to_owned();
    };
    match out.find('[') {
        Some(open) => {
            let rest = out.get(open + 1..).unwrap_or_default();
            let comma = if rest.trim_start().starts_with(']') {
                ""
            } else {
                ","
            };
            format!(
                "{}{search_tool}{comma}{rest}",
                out.get(..=open).unwrap_or("[")
            )
        }
        None => out,
    }
}

/// A tool object's text with `"defer_loading":true` as its last member.
fn with_defer(entry: &str) -> String {
    let trimmed = entry.trim_end();
    let Some(head) = trimmed.strip_suffix('}') else {
        return entry.to_owned();
    };
    let empty = head
        .trim_start()
        .strip_prefix('{')
        .is_some_and(|inner| inner.trim().is_empty());
    let comma = if empty { "" } else { "," };
    format!("{head}{comma}\"defer_loading\":true}}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::Engine;
    use serde_json::Value;

    fn planned(config: &str, dialect: Dialect, body: &str) -> Planned {
        let config = Config::from_json(config.as_bytes()).unwrap();
        let mut engine = Engine::new(config.clone());
        let analysis = engine.analyse(dialect, body).unwrap();
        plan(
            &config,
            &analysis,
            body,
            HeaderRoom {
                held: true,
                anthropic_beta: "",
            },
        )
        .unwrap()
    }

    const RULES: &str = r#"{"mode":"search","min_tools":1,"always_include":["keep_me"],
        "search":{"native_search":[{"model":"claude-opus-*"},{"model":"gpt-5.4*"},
        {"model":"router/*","tool":{"type":"openrouter:tool_search"}}]}}"#;

    fn anthropic_body(model: &str) -> String {
        format!(
            r#"{{"model":"{model}","max_tokens":9,"messages":[{{"role":"user","content":"weather in Paris"}}],
"tools": [ {{"name":"get_weather","description":"weather","input_schema":{{"type":"object"}}}},
  {{"name":"keep_me","input_schema":{{}}}},
  {{"type":"web_search_20250305","name":"web_search"}},
  {{"name":"send_email","input_schema":{{}},"defer_loading":false}},
  {{"name":"get_time","input_schema":{{}} }} ]}}"#
        )
    }

    #[test]
    fn provider_search_defers_in_place_and_adds_its_tool() {
        let body = anthropic_body("claude-opus-4-5");
        let Planned::Provider(p) = planned(RULES, Dialect::Anthropic, &body) else {
            panic!("a native_search rule matches");
        };
        assert_eq!(
            p.beta.as_deref(),
            Some(crate::config::search::TOOL_SEARCH_BETA)
        );
        assert_eq!(
            p.shown, 2,
            "keep_me, and send_email the client keeps loaded"
        );
        let tools_at = body.find("\"tools\"").unwrap();
        assert_eq!(
            p.body.get(..tools_at),
            body.get(..tools_at),
            "bytes before the tools"
        );
        let expected = r#"[{"type":"tool_search_tool_bm25_20251119","name":"tool_search_tool_bm25"}, {"name":"get_weather","description":"weather","input_schema":{"type":"object"},"defer_loading":true},
  {"name":"keep_me","input_schema":{}},
  {"type":"web_search_20250305","name":"web_search"},
  {"name":"send_email","input_schema":{},"defer_loading":false},
  {"name":"get_time","input_schema":{} ,"defer_loading":true} ]}"#;
        assert_eq!(p.body.get(tools_at + "\"tools\": ".len()..), Some(expected));
        serde_json::from_str::<Value>(&p.body).unwrap();
    }

    #[test]
    fn rules_by_model_and_dialect() {
        // No rule for the model: the gateway answers `find_tools`.
        let body = anthropic_body("claude-haiku-4-5");
        assert!(matches!(
            planned(RULES, Dialect::Anthropic, &body),
            Planned::Search(_)
        ));
        // OpenAI Responses: its own `tool_search`, no beta header.
        let responses = r#"{"model":"gpt-5.4-mini","input":"weather in Paris","tools":[
            {"type":"function","name":"get_weather","parameters":{}},
            {"type":"function","name":"get_time","parameters":{}}]}"#;
        let Planned::Provider(p) = planned(RULES, Dialect::OpenaiResponses, responses) else {
            panic!("gpt-5.4* matches");
        };
        assert_eq!(p.beta, None);
        assert!(
            p.body.contains(r#""tools":[{"type":"tool_search"},"#),
            "{}",
            p.body
        );
        assert_eq!(p.body.matches(r#""defer_loading":true"#).count(), 2);
        // Chat Completions: only with the rule's own tool.
        let chat = |model: &str| {
            format!(
                r#"{{"model":"{model}","messages":[{{"role":"user","content":"weather"}}],"tools":[
                {{"type":"function","function":{{"name":"get_weather","parameters":{{}}}}}},
                {{"type":"function","function":{{"name":"get_time","parameters":{{}}}}}}]}}"#
            )
        };
        let Planned::Provider(p) = planned(RULES, Dialect::OpenaiChat, &chat("router/x")) else {
            panic!("the rule names its tool");
        };
        assert!(p.body.contains(r#"[{"type":"openrouter:tool_search"},"#));
        assert!(
            p.body.contains(r#""parameters":{}},"defer_loading":true}"#),
            "{}",
            p.body
        );
        assert!(matches!(
            planned(
                r#"{"mode":"search","min_tools":1,"search":{"native_search":[{"model":"*"}]}}"#,
                Dialect::OpenaiChat,
                &chat("gpt-4o")
            ),
            Planned::Search(_)
        ));
    }

    #[test]
    fn a_rule_needing_a_beta_toolsift_cannot_add_does_not_apply() {
        let config = Config::from_json(RULES.as_bytes()).unwrap();
        let body = anthropic_body("claude-opus-4-5");
        let mut engine = Engine::new(config.clone());
        let analysis = engine.analyse(Dialect::Anthropic, &body).unwrap();
        let plan_with = |held: bool, beta: &str| {
            let room = HeaderRoom {
                held,
                anthropic_beta: beta,
            };
            plan(&config, &analysis, &body, room).unwrap()
        };
        // Headers not held, no beta from the client: the gateway's own search.
        assert!(matches!(plan_with(false, ""), Planned::Search(_)));
        // The client sent the beta: the provider searches, and there is nothing to add.
        let beta = format!(
            "prompt-caching-2024-07-31, {}",
            crate::config::search::TOOL_SEARCH_BETA
        );
        let Planned::Provider(p) = plan_with(false, &beta) else {
            panic!("the client's beta serves");
        };
        assert_eq!(p.beta, None);
        // Held: toolsift adds it.
        let Planned::Provider(p) = plan_with(true, "") else {
            panic!("held headers take the beta");
        };
        assert_eq!(
            p.beta.as_deref(),
            Some(crate::config::search::TOOL_SEARCH_BETA)
        );
    }

    #[test]
    fn meta_tools_never_shadow_a_client_tool() {
        let config =
            Config::from_json(br#"{"mode":"search","min_tools":1,"search":{"use_tool":true}}"#)
                .unwrap();
        let taken = ["find_tools", "find_tools_2", "use_tool"];
        let names = MetaNames::for_catalog(&config, |n| taken.contains(&n));
        assert_eq!(names.find, "find_tools_3");
        assert_eq!(names.use_tool.as_deref(), Some("use_tool_2"));
        assert!(names.is_meta("find_tools_3") && names.is_meta("use_tool_2"));
        assert!(!names.is_meta("find_tools") && !names.is_meta("use_tool"));
        let free = MetaNames::for_catalog(&config, |_| false);
        assert_eq!(
            (free.find.as_str(), free.use_tool.as_deref()),
            ("find_tools", Some("use_tool"))
        );
        // In a plan: the meta-tool takes the free name; the client's tool stays as written.
        let body = r#"{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"find my tools"}],
"tools":[{"name":"find_tools","description":"Find tools in the workshop","input_schema":{}},
{"name":"get_weather","input_schema":{}}]}"#;
        let Planned::Search(plan) = planned(
            r#"{"mode":"search","min_tools":1,"always_include":["find_tools"]}"#,
            Dialect::Anthropic,
            body,
        ) else {
            panic!("searched");
        };
        assert_eq!(plan.names.find, "find_tools_2");
        let sent: Value = serde_json::from_str(&plan.body).unwrap();
        let names: Vec<&str> = sent["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["find_tools_2", "find_tools"]);
        assert_eq!(
            sent["tools"][1]["description"],
            "Find tools in the workshop"
        );
    }

    /// `plan` for the caller in group `group` under rules that deny `send_*` and `get_time`
    /// to everyone, and `get_weather` to `guests`.
    fn governed(config: &str, dialect: Dialect, body: &str, group: &str) -> Planned {
        let access = r#""access":{"identity":[{"header":"x-group"}],"default":"allow",
            "rules":[{"when":["*"],"deny":["send_*","get_time"]},
                     {"when":["guests"],"deny":["get_weather"]}]}"#;
        let config = config.replacen('{', &format!("{{{access},"), 1);
        let config = Config::from_json(config.as_bytes()).unwrap();
        let mut engine = Engine::new(config.clone());
        let grant = engine.grant(&crate::access::Caller::new([group.to_owned()]));
        let analysis = engine.analyse_as(dialect, body, grant.as_ref()).unwrap();
        let room = HeaderRoom {
            held: true,
            anthropic_beta: "",
        };
        plan(&config, &analysis, body, room).unwrap()
    }

    fn names_in(dialect_tools: &Value) -> Vec<String> {
        dialect_tools
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|t| t["name"].as_str().map(str::to_owned))
            .collect()
    }

    #[test]
    fn denied_tools_are_never_shown_pinned_or_hinted() {
        // send_email is always included, called in the history and named by tool_choice;
        // get_time ranks first for the question (eager_k 2): all denied.
        let body = r#"{"model":"claude-haiku-4-5","max_tokens":9,"tool_choice":{"type":"tool","name":"send_email"},
"messages":[{"role":"user","content":"what time is it"},
 {"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"send_email","input":{}}]},
 {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"},{"type":"text","text":"what time is it"}]}],
"tools":[{"name":"get_time","description":"what time is it now","input_schema":{}},
 {"name":"send_email","description":"send an email","input_schema":{}},
 {"name":"get_weather","description":"weather","input_schema":{}},
 {"name":"keep_me","description":"kept","input_schema":{}},
 {"name":"tell_time","description":"what time is it in a city","input_schema":{}},
 {"name":"list_files","description":"files","input_schema":{}}]}"#;
        let config = r#"{"mode":"search","min_tools":1,"always_include":["keep_me","send_*"],
            "search":{"eager_k":2,"catalog_hint":true}}"#;
        let Planned::Search(p) = governed(config, Dialect::Anthropic, body, "staff") else {
            panic!("searched");
        };
        let sent: Value = serde_json::from_str(&p.body).unwrap();
        let shown = names_in(&sent["tools"]);
        assert_eq!(shown[0], "find_tools");
        assert!(shown.contains(&"keep_me".to_owned()), "{shown:?}");
        for denied in ["send_email", "get_time"] {
            assert!(!shown.contains(&denied.to_owned()), "{denied} in {shown:?}");
            assert!(!p.meta_entries[0].contains(denied), "{denied} hinted");
        }
        // eager_k 2 shows the two best allowed tools, not a denied one in their place.
        assert_eq!(shown.len(), 1 + 3, "{shown:?}");
        assert!(p.meta_entries[0].contains("Tools that can be found:"));
        // The denied tools are not deferred either: nothing can make them visible.
        // get_time and send_email are the catalog's first two entries.
        assert!(!p.visible[0] && !p.visible[1]);
    }

    #[test]
    fn native_search_requests_lose_their_denied_tools_and_nothing_else() {
        let body = r#"{"model":"claude-opus-4-5","max_tokens":9,"messages":[{"role":"user","content":"x"}],
"tools": [ {"type":"tool_search_tool_bm25_20251119","name":"tool_search_tool_bm25"},
  {"name":"get_weather","input_schema":{},"defer_loading":true},
  {"name":"send_email","input_schema":{},"defer_loading":true} ,
  {"name":"keep_me","input_schema":{}} ]}"#;
        let config = r#"{"mode":"search","min_tools":1}"#;
        let Planned::Native(Some(out)) = governed(config, Dialect::Anthropic, body, "staff") else {
            panic!("native, rewritten");
        };
        assert_eq!(
            out,
            body.replace(
                r#",
  {"name":"send_email","input_schema":{},"defer_loading":true} "#,
                ""
            )
        );
        // Nothing denied, or no access rules: skipped before any plan, untouched.
        let native = |config: &str, body: &str| {
            let config = Config::from_json(config.as_bytes()).unwrap();
            let mut engine = Engine::new(config);
            let grant = engine.grant(&crate::access::Caller::new(["staff".to_owned()]));
            let skipped = engine.analyse_as(Dialect::Anthropic, body, grant.as_ref());
            skipped.err().map(|s| s.reason)
        };
        let clean = body.replace("send_email", "read_email");
        let access = r#"{"mode":"search","min_tools":1,"access":{"identity":[{"header":"x"}],
            "default":"allow","rules":[{"when":["*"],"deny":["send_*"]}]}}"#;
        let skip = Some(crate::pipeline::Skip::NativeSearch);
        assert_eq!(native(access, &clean), skip);
        assert_ne!(native(access, body), skip, "send_email is denied");
        assert_eq!(native(config, body), skip);
    }

    #[test]
    fn provider_search_never_defers_a_denied_tool() {
        let body = anthropic_body("claude-opus-4-5");
        let Planned::Provider(p) = governed(RULES, Dialect::Anthropic, &body, "guests") else {
            panic!("provider");
        };
        let sent: Value = serde_json::from_str(&p.body).unwrap();
        let names = names_in(&sent["tools"]);
        assert_eq!(
            names,
            ["tool_search_tool_bm25", "keep_me", "web_search"],
            "get_weather (guests), send_email and get_time (everyone) are gone"
        );
        assert_eq!(p.shown, 1);
    }

    /// An OpenAI Chat request with tools `tool_a` … `tool_h` (equal sizes), whose history
    /// called `tool_b`.
    fn remembering_body() -> String {
        let tools: Vec<String> = ('a'..='h')
            .map(|c| {
                format!(
                    r#"{{"type":"function","function":{{"name":"tool_{c}","description":"does {c}","parameters":{{}}}}}}"#
                )
            })
            .collect();
        format!(
            r#"{{"model":"m","messages":[{{"role":"user","content":"do things"}},
{{"role":"assistant","tool_calls":[{{"id":"c1","type":"function","function":{{"name":"tool_b","arguments":"{{}}"}}}}]}},
{{"role":"tool","tool_call_id":"c1","content":"ok"}}],"tools":[{}]}}"#,
            tools.join(",")
        )
    }

    fn remembering(config: &str, remembered: &[&str], evicted: &[&str]) -> (Vec<String>, Plan) {
        let config = Config::from_json(config.as_bytes()).unwrap();
        let mut engine = Engine::new(config.clone());
        let body = remembering_body();
        let mut analysis = engine.analyse(Dialect::OpenaiChat, &body).unwrap();
        analysis.evicted = evicted.iter().map(|s| (*s).to_owned()).collect();
        let remembered: Vec<String> = remembered.iter().map(|s| (*s).to_owned()).collect();
        let room = HeaderRoom::default();
        let Some(Planned::Search(p)) =
            plan_remembering(&config, &analysis, &body, room, &remembered)
        else {
            panic!("searched");
        };
        let sent: Value = serde_json::from_str(&p.body).unwrap();
        let shown = sent["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
            .collect();
        (shown, p)
    }

    #[test]
    fn remembered_tools_follow_the_pins_in_first_found_order() {
        let config = r#"{"mode":"search","min_tools":1,"always_include":["tool_a"]}"#;
        // tool_b is called (a pin) and remembered: it keeps its remembered place. An unknown
        // name and a repeat change nothing.
        let (shown, p) = remembering(
            config,
            &["tool_f", "tool_b", "gone", "tool_d", "tool_f"],
            &[],
        );
        assert_eq!(
            shown,
            ["find_tools", "tool_a", "tool_f", "tool_b", "tool_d"]
        );
        assert_eq!(
            p.remembered,
            ["tool_f", "tool_d"],
            "the pin is no memory's doing"
        );
        // Without memory: the pins only.
        let (shown, p) = remembering(config, &[], &[]);
        assert_eq!(shown, ["find_tools", "tool_a", "tool_b"]);
        assert!(p.remembered.is_empty());
        // The loop guard's evicted tool does not come back from memory.
        let (shown, _) = remembering(config, &["tool_f", "tool_d"], &["tool_f"]);
        assert_eq!(shown, ["find_tools", "tool_a", "tool_b", "tool_d"]);
    }

    #[test]
    fn remembered_tools_stop_at_the_token_budget_and_pins_never_do() {
        let body = remembering_body();
        let each = body
            .find(r#"{"type":"function","function":{"name":"tool_a""#)
            .and_then(|start| {
                let tail = body.get(start..)?;
                tail.find(",{\"type\"")
            })
            .unwrap();
        let each = crate::rank::estimate_tokens(each);
        // Room for the two pins and one remembered tool.
        let config = format!(
            r#"{{"mode":"search","min_tools":1,"always_include":["tool_a"],"max_tool_tokens":{}}}"#,
            3 * each
        );
        let (shown, p) = remembering(&config, &["tool_f", "tool_b", "tool_d", "tool_e"], &[]);
        assert_eq!(shown, ["find_tools", "tool_a", "tool_f", "tool_b"]);
        assert_eq!(p.remembered, ["tool_f"]);
        // Pins past the budget stay.
        let config =
            r#"{"mode":"search","min_tools":1,"always_include":["tool_a"],"max_tool_tokens":1}"#;
        let (shown, p) = remembering(config, &["tool_d", "tool_b"], &[]);
        assert_eq!(shown, ["find_tools", "tool_a", "tool_b"]);
        assert!(p.remembered.is_empty());
    }

    #[test]
    fn denied_tools_never_come_back_from_memory() {
        let body = remembering_body();
        let config = Config::from_json(
            br#"{"mode":"search","min_tools":1,"access":{"identity":[{"header":"x-group"}],
                "default":"allow","rules":[{"when":["*"],"deny":["tool_d"]}]}}"#,
        )
        .unwrap();
        let mut engine = Engine::new(config.clone());
        let grant = engine.grant(&crate::access::Caller::new(["staff".to_owned()]));
        let analysis = engine
            .analyse_as(Dialect::OpenaiChat, &body, grant.as_ref())
            .unwrap();
        let remembered = ["tool_d".to_owned(), "tool_e".to_owned()];
        let Some(Planned::Search(p)) = plan_remembering(
            &config,
            &analysis,
            &body,
            HeaderRoom::default(),
            &remembered,
        ) else {
            panic!("searched");
        };
        assert_eq!(p.remembered, ["tool_e"]);
        assert!(!p.body.contains("tool_d"));
    }

    #[test]
    fn defer_marker() {
        assert_eq!(with_defer(r#"{"a":1}"#), r#"{"a":1,"defer_loading":true}"#);
        assert_eq!(with_defer("{ }"), r#"{ "defer_loading":true}"#);
        assert_eq!(
            with_defer("{\"a\":1}\n"),
            "{\"a\":1,\"defer_loading\":true}"
        );
    }
}
