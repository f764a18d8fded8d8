//! An MCP server's tool catalog: read from its `tools/list` pages, ranked with the same index
//! as LLM requests' tools, and cached per server, protocol revision and (for lists the server
//! calls private) authorization context, for as long as the server says (`ttlMs`), bounded in
//! bytes.

use crate::access::{Annotations, Grant};
use crate::dialects::Dialect;
use crate::embeddings::SharedBytes;
use crate::rank::{Catalog, FieldWeights};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::cell::RefCell;
use std::rc::Rc;

/// The name of the server tool that takes part in selection (see [`super::gating`]): never
/// shown to the client, never ranked.
pub const GATING_TOOL: &str = "_tool_gating";

/// One tool as the server listed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tool {
    pub name: String,
    /// The tool's JSON object, as the server wrote it.
    pub raw: String,
}

/// One `tools/list` result.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Page {
    pub tools: Vec<Tool>,
    pub next_cursor: Option<String>,
    /// 2026-07-28 caching hints: how long the list stays fresh, and whether it may be shared
    /// across authorization contexts (`cacheScope: "public"`).
    pub ttl_ms: Option<u64>,
    pub public: Option<bool>,
}

#[derive(Deserialize)]
struct RawPage<'a> {
    #[serde(borrow)]
    tools: Vec<&'a RawValue>,
    #[serde(default, rename = "nextCursor")]
    next_cursor: Option<String>,
    #[serde(borrow, default, rename = "ttlMs")]
    ttl_ms: Option<&'a RawValue>,
    #[serde(default, rename = "cacheScope")]
    cache_scope: Option<String>,
}

#[derive(Deserialize)]
struct RawTool<'a> {
    name: crate::json::Str<'a>,
}

/// Reads a `tools/list` result (JSON object text). Tools that are not objects with a string
/// `name` are left out; `None` when the result has no `tools` array.
pub fn page(result: &str) -> Option<Page> {
    let raw: RawPage = serde_json::from_str(result).ok()?;
    let tools = raw
        .tools
        .iter()
        .filter_map(|t| {
            let tool: RawTool = serde_json::from_str(t.get()).ok()?;
            Some(Tool {
                name: tool.name.into_owned(),
                raw: t.get().to_owned(),
            })
        })
        .collect();
    // ttlMs is an integer; anything else (negative, fractional, huge) reads as no hint.
    let ttl_ms = raw
        .ttl_ms
        .and_then(|t| serde_json::from_str::<u64>(t.get()).ok());
    let public = raw.cache_scope.map(|s| s == "public");
    Some(Page {
        tools,
        next_cursor: raw.next_cursor.filter(|c| !c.is_empty()),
        ttl_ms,
        public,
    })
}

/// A server's whole catalog, ranked.
pub struct ServerCatalog {
    /// Every tool the server listed, in its order; a repeated name counts once (the first).
    pub tools: Vec<Tool>,
    /// The index over the tools that can be found (all but [`GATING_TOOL`]); `None` when there
    /// are none.
    ranked: Option<Catalog>,
    /// Per entry of `ranked`: its place in `tools`.
    rankable: Vec<usize>,
    /// The server exposes [`GATING_TOOL`]: its place in `tools`.
    pub gating: Option<usize>,
    /// The caching hints the list came with, echoed when the gateway answers `tools/list`.
    pub ttl_ms: Option<u64>,
    pub public: Option<bool>,
    /// Bytes this catalog holds (its tools' JSON, counted twice for the index).
    pub bytes: usize,
    /// Per tool: the MCP annotations it declares (what access rules read besides its name).
    annotations: Vec<Annotations>,
    /// Which tools the last grant's callers may see ([`ServerCatalog::allowed_for`]), keyed by
    /// what its decisions depend on, never by who the caller is.
    last_allowed: RefCell<Option<(GrantKey, Rc<[bool]>)>>,
}

/// What a grant's decisions depend on ([`Grant::key`]).
type GrantKey = (bool, Rc<[usize]>);

/// One tool found, best first.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Found {
    /// Place in [`ServerCatalog::tools`].
    pub tool: usize,
    /// Entry in the ranking index ([`ServerCatalog::index`]); `None` for a tool put in by hand.
    pub entry: Option<usize>,
    pub score: f32,
}

impl ServerCatalog {
    pub fn build(pages: Vec<Page>) -> ServerCatalog {
        let ttl_ms = pages.iter().filter_map(|p| p.ttl_ms).min();
        let public = pages.first().and_then(|p| p.public);
        let mut tools: Vec<Tool> = Vec::new();
        for tool in pages.into_iter().flat_map(|p| p.tools) {
            if !tools.iter().any(|t| t.name == tool.name) {
                tools.push(tool);
            }
        }
        let gating = tools.iter().position(|t| t.name == GATING_TOOL);
        let rankable: Vec<usize> = (0..tools.len()).filter(|&i| Some(i) != gating).collect();
        let container = crate::rank::mcp_tools_container(
            rankable
                .iter()
                .filter_map(|&i| tools.get(i))
                .map(|t| (t.name.as_str(), t.raw.as_str())),
        );
        let ranked = (!rankable.is_empty())
            .then(|| Catalog::build(Dialect::Anthropic, &container, FieldWeights::default()).ok())
            .flatten();
        let bytes = tools
            .iter()
            .map(|t| t.raw.len() + t.name.len())
            .sum::<usize>()
            * 2;
        let annotations = tools.iter().map(|t| Annotations::of_tool(&t.raw)).collect();
        ServerCatalog {
            tools,
            ranked,
            rankable,
            gating,
            ttl_ms,
            public,
            bytes,
            annotations,
            last_allowed: RefCell::new(None),
        }
    }

    /// The annotations tool `at` (its place in [`ServerCatalog::tools`]) declares.
    pub fn annotations(&self, at: usize) -> Annotations {
        self.annotations.get(at).copied().unwrap_or_default()
    }

    /// Per tool (in [`ServerCatalog::tools`] order): whether `grant`'s caller may see it, by its
    /// name and annotations. Remembered for the last grant: every request of an agent loop comes
    /// from the same caller, and callers whose applicable rules are the same share the answer.
    pub fn allowed_for(&self, grant: &Grant) -> Rc<[bool]> {
        let key = grant.key();
        if let Ok(last) = self.last_allowed.try_borrow() {
            if let Some((_, allowed)) = last.as_ref().filter(|(k, _)| *k == key) {
                return Rc::clone(allowed);
            }
        }
        let allowed: Rc<[bool]> = self
            .tools
            .iter()
            .enumerate()
            .map(|(at, tool)| grant.tool(&tool.name, &self.annotations(at)).allowed())
            .collect();
        if let Ok(mut last) = self.last_allowed.try_borrow_mut() {
            *last = Some((key, Rc::clone(&allowed)));
        }
        allowed
    }

    /// The place of tool `name` in [`ServerCatalog::tools`].
    pub fn position(&self, name: &str) -> Option<usize> {
        self.tools.iter().position(|t| t.name == name)
    }

    /// Findable tools `allowed` (from [`ServerCatalog::allowed_for`]) leaves out.
    pub fn denied(&self, allowed: &[bool]) -> usize {
        self.rankable
            .iter()
            .filter(|&&at| !allowed.get(at).copied().unwrap_or(false))
            .count()
    }

    pub fn tool(&self, name: &str) -> Option<&Tool> {
        self.tools.iter().find(|t| t.name == name)
    }

    /// A client may call it: the server listed it, and it is not the gating tool.
    pub fn callable(&self, name: &str) -> bool {
        name != GATING_TOOL && self.tool(name).is_some()
    }

    /// Tools the server listed that a client can find.
    pub fn findable(&self) -> usize {
        self.rankable.len()
    }

    /// The ranking index over the findable tools (what hybrid ranking embeds and fuses).
    pub fn index(&self) -> Option<&Catalog> {
        self.ranked.as_ref()
    }

    /// The tools with some evidence for `query`, best first (equal scores keep the server's
    /// order).
    pub fn rank(&self, query: &str) -> Vec<Found> {
        match &self.ranked {
            Some(ranked) => self.found_in(&ranked.rank(query)),
            None => Vec::new(),
        }
    }

    /// [`ServerCatalog::rank`] of the tools `allowed` (per tool) lets a caller see, scored by
    /// their statistics alone ([`Catalog::rank_among`]).
    pub fn rank_among(&self, query: &str, allowed: &[bool]) -> Vec<Found> {
        let Some(ranked) = &self.ranked else {
            return Vec::new();
        };
        self.found_in(&ranked.rank_among(query, &self.entries_allowed(allowed)))
    }

    /// `allowed` (per tool) per entry of [`ServerCatalog::index`], as
    /// [`crate::pipeline::rank_fused_among`] and [`Catalog::rank_among`] take it.
    pub fn entries_allowed(&self, allowed: &[bool]) -> Vec<bool> {
        self.rankable
            .iter()
            .map(|&tool| allowed.get(tool).copied().unwrap_or(false))
            .collect()
    }

    /// The tools of a ranking of [`ServerCatalog::index`] with some evidence, in its order.
    pub fn found_in(&self, order: &[crate::rank::Scored]) -> Vec<Found> {
        order
            .iter()
            .filter(|s| s.score > 0.0)
            .filter_map(|s| {
                Some(Found {
                    tool: *self.rankable.get(s.entry)?,
                    entry: Some(s.entry),
                    score: s.score,
                })
            })
            .collect()
    }
}

/// Which catalog: the MCP server (the cluster and authority the request goes to) and the
/// protocol revision (lists may differ between revisions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    pub server: String,
    pub revision: String,
}

struct Cached {
    key: Key,
    /// Private lists: the authorization context they belong to.
    private_to: Option<u64>,
    catalog: Rc<ServerCatalog>,
    expires_at: u64,
    /// The server's list generation when fetched (see [`CatalogCache::get`]).
    generation: u64,
}

/// The shared-data key of a server's tool-list generation.
pub fn generation_key(server: &str) -> String {
    format!(
        "toolsift.mcp.generation.{:016x}",
        xxhash_rust::xxh3::xxh3_64(server.as_bytes())
    )
}

/// The layout version of a generation's value, its first byte (then the generation, u64 LE):
/// a value of another layout reads as 0, and the next change replaces it. 1 is the first with
/// it; the values before were the 8 bytes alone.
pub const GENERATION_LAYOUT: u8 = 1;

/// A server's tool-list generation in the store every worker shares (0 before any change, or
/// when the value is of another layout), and the value's compare-and-swap token.
pub fn generation(store: &impl SharedBytes, server: &str) -> (u64, Option<u32>) {
    let (value, cas) = store.get(&generation_key(server));
    (value.as_deref().map_or(0, read_generation), cas)
}

/// The generation `value` holds; 0 for a value of another layout.
pub fn read_generation(value: &[u8]) -> u64 {
    match value.split_first() {
        Some((&GENERATION_LAYOUT, rest)) => <[u8; 8]>::try_from(rest).map_or(0, u64::from_le_bytes),
        _ => 0,
    }
}

/// Raises a server's generation, so every worker drops its catalog (retried when another
/// worker raced it).
pub fn bump_generation(store: &impl SharedBytes, server: &str) {
    let key = generation_key(server);
    for _ in 0..8 {
        let (generation, cas) = generation(store, server);
        let mut next = vec![GENERATION_LAYOUT];
        next.extend_from_slice(&generation.wrapping_add(1).to_le_bytes());
        if store.set(&key, &next, cas) {
            return;
        }
    }
    log::debug!("cannot record the list change of {server}");
}

/// The catalogs of one worker, most recently used last, bounded in bytes.
pub struct CatalogCache {
    entries: Vec<Cached>,
    max_bytes: usize,
}

impl CatalogCache {
    pub fn new(max_bytes: usize) -> CatalogCache {
        CatalogCache {
            entries: Vec::new(),
            max_bytes,
        }
    }

    /// The fresh catalog for `key` that the authorization context `auth` may see. `generation`
    /// is the server's current list generation: a `notifications/tools/list_changed` seen on any
    /// worker raises it, and catalogs fetched before are dropped.
    pub fn get(
        &mut self,
        key: &Key,
        auth: u64,
        now: u64,
        generation: u64,
    ) -> Option<Rc<ServerCatalog>> {
        self.entries.retain(|c| {
            c.expires_at > now && !(c.key.server == key.server && c.generation != generation)
        });
        let at = self
            .entries
            .iter()
            .rposition(|c| c.key == *key && c.private_to.is_none_or(|owner| owner == auth))?;
        let hit = self.entries.remove(at);
        let catalog = Rc::clone(&hit.catalog);
        self.entries.push(hit);
        Some(catalog)
    }

    /// Keeps `catalog` for `ttl_ms` (not at all for 0). A list the server did not call public
    /// stays with the authorization context that fetched it.
    pub fn put(
        &mut self,
        key: Key,
        auth: u64,
        catalog: Rc<ServerCatalog>,
        expires_at: u64,
        generation: u64,
    ) {
        if catalog.bytes > self.max_bytes {
            return;
        }
        let private_to = (catalog.public != Some(true)).then_some(auth);
        self.entries
            .retain(|c| !(c.key == key && c.private_to == private_to));
        let mut used: usize = self.entries.iter().map(|c| c.catalog.bytes).sum();
        while used + catalog.bytes > self.max_bytes && !self.entries.is_empty() {
            let evicted = self.entries.remove(0);
            used -= evicted.catalog.bytes;
        }
        self.entries.push(Cached {
            key,
            private_to,
            catalog,
            expires_at,
            generation,
        });
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, description: &str) -> String {
        format!(
            r#"{{"name":"{name}","description":"{description}","inputSchema":{{"type":"object","properties":{{"city":{{"type":"string"}}}}}}}}"#
        )
    }

    #[test]
    fn reads_pages() {
        let result = format!(
            r#"{{"tools":[{},{{"name":5}},7,{}],"nextCursor":"2","ttlMs":60000,"cacheScope":"public","resultType":"complete"}}"#,
            tool("get_weather", "Current weather in a city"),
            tool("send_mail", "Send an email")
        );
        let p = page(&result).unwrap();
        assert_eq!(
            p.tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
            ["get_weather", "send_mail"]
        );
        assert_eq!(
            (p.next_cursor.as_deref(), p.ttl_ms, p.public),
            (Some("2"), Some(60000), Some(true))
        );
        for hostile in [
            "",
            "{}",
            "[]",
            r#"{"tools":{}}"#,
            r#"{"tools":null}"#,
            r#"{"tools":[],"nextCursor":5}"#,
            r#"{"tools":[],"cacheScope":1}"#,
        ] {
            assert_eq!(page(hostile), None, "{hostile}");
        }
        for ttl in ["-1", "1.5", "1e400", "\"5\"", "99999999999999999999999"] {
            let p = page(&format!(r#"{{"tools":[],"ttlMs":{ttl}}}"#)).unwrap();
            assert_eq!(p.ttl_ms, None, "{ttl}");
        }
        assert_eq!(
            page(r#"{"tools":[],"nextCursor":""}"#).unwrap().next_cursor,
            None
        );
    }

    #[test]
    fn ranks_and_hides_the_gating_tool() {
        let p = page(&format!(
            r#"{{"tools":[{},{},{},{}]}}"#,
            tool("send_mail", "Send an email"),
            tool(GATING_TOOL, "weather weather weather"),
            tool("get_weather", "Current weather in a city"),
            tool("send_mail", "a repeated name")
        ))
        .unwrap();
        let c = ServerCatalog::build(vec![p]);
        assert_eq!(c.tools.len(), 3);
        assert_eq!(c.findable(), 2);
        assert_eq!(c.gating, Some(1));
        let found = c.rank("what is the weather in Paris");
        assert_eq!(found.len(), 1);
        assert_eq!(c.tools[found[0].tool].name, "get_weather");
        assert!(c.callable("send_mail") && !c.callable(GATING_TOOL) && !c.callable("nope"));
        assert!(ServerCatalog::build(vec![]).rank("x").is_empty());
    }

    #[test]
    fn a_callers_search_scores_as_a_server_of_its_tools_alone() {
        let tools = [
            ("get_weather", "Current weather in a city"),
            (GATING_TOOL, "weather weather weather"),
            ("weather_alerts", "Severe weather alerts, weather warnings"),
            ("get_forecast", "Weather forecast for a city"),
            ("send_mail", "Send an email about the weather"),
        ];
        let server = |listed: &[(&str, &str)]| {
            let texts: Vec<String> = listed.iter().map(|(n, d)| tool(n, d)).collect();
            ServerCatalog::build(vec![
                page(&format!(r#"{{"tools":[{}]}}"#, texts.join(","))).unwrap(),
            ])
        };
        let whole = server(&tools);
        let query = "weather forecast for my city";
        // Per tool of the whole server: the caller may see get_weather and get_forecast.
        let allowed = [true, true, false, true, false];
        let alone = server(&[tools[0], tools[3]]);
        let scores = |c: &ServerCatalog, found: Vec<Found>| -> Vec<(String, f32)> {
            found
                .into_iter()
                .map(|f| (c.tools[f.tool].name.clone(), f.score))
                .collect()
        };
        let among = scores(&whole, whole.rank_among(query, &allowed));
        assert_eq!(among, scores(&alone, alone.rank(query)));
        assert_eq!(among.len(), 2);
        // The whole server's statistics score them otherwise.
        let all = scores(&whole, whole.rank(query));
        let of = |list: &[(String, f32)], name: &str| {
            list.iter().find(|(n, _)| n == name).map(|(_, s)| *s)
        };
        assert_ne!(of(&all, "get_weather"), of(&among, "get_weather"));
    }

    #[test]
    fn cache_honours_ttl_scope_generation_and_size() {
        let key = |s: &str| Key {
            server: s.into(),
            revision: "2026-07-28".into(),
        };
        let catalog = |public: Option<bool>| {
            let mut p = page(&format!(r#"{{"tools":[{}]}}"#, tool("a", "b"))).unwrap();
            p.public = public;
            Rc::new(ServerCatalog::build(vec![p]))
        };
        let mut cache = CatalogCache::new(10_000);
        cache.put(key("s"), 1, catalog(Some(true)), 100, 0);
        assert!(
            cache.get(&key("s"), 2, 50, 0).is_some(),
            "public: any context"
        );
        assert!(cache.get(&key("s"), 2, 100, 0).is_none(), "expired");
        cache.put(key("s"), 1, catalog(None), 100, 0);
        assert!(
            cache.get(&key("s"), 2, 50, 0).is_none(),
            "private: other context"
        );
        assert!(cache.get(&key("s"), 1, 50, 0).is_some());
        assert!(cache.get(&key("s"), 1, 50, 1).is_none(), "list changed");
        assert!(cache.is_empty());
        let bytes = catalog(None).bytes;
        let mut small = CatalogCache::new(bytes * 2);
        for (i, s) in ["a", "b", "c"].iter().enumerate() {
            small.put(key(s), 0, catalog(None), 100, i as u64);
        }
        assert_eq!(small.len(), 2);
        assert!(
            small.get(&key("a"), 0, 0, 0).is_none(),
            "least recently used evicted"
        );
        CatalogCache::new(1).put(key("x"), 0, catalog(None), 100, 0);
    }
}
