//! What the exchange's tests (and the route's, in `super::super::request`) share: a host that
//! records what the gateway asks of it, a catalog, and requests.

#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use super::*;
use crate::access::Caller;
use crate::config::mcp::Mcp;
use std::cell::RefCell;

/// A request the gateway sent: body, method, name, timeout.
pub(crate) type Sent = (String, String, Option<String>, u64);

/// Hybrid ranking's pieces: the vector cache, the embeddings settings, the configuration.
pub(crate) type Vectors = (
    crate::embeddings::VectorCache<crate::embeddings::MemoryBytes>,
    crate::config::embeddings::Embeddings,
    Config,
);

#[derive(Default)]
pub(crate) struct Mock {
    pub(crate) vectors: Option<Vectors>,
    pub(crate) embedded: RefCell<Vec<Vec<String>>>,
    pub(crate) sent: RefCell<Vec<Sent>>,
    /// The `Mcp-Param-*` headers of each request sent.
    pub(crate) params: RefCell<Vec<Vec<(String, String)>>>,
    pub(crate) answered: RefCell<Vec<(u16, String, String)>>,
    pub(crate) events: RefCell<Vec<Event>>,
    pub(crate) generation: RefCell<u64>,
    pub(crate) now: u64,
    pub(crate) refuse: bool,
    pub(crate) suggestions: Option<std::rc::Rc<crate::suggestions::Suggestions>>,
    /// The shared store `search.memory` keeps sessions in.
    pub(crate) store: crate::embeddings::MemoryBytes,
    /// The request body Envoy buffered, and the response chunk passing.
    pub(crate) request_body: Vec<u8>,
    pub(crate) response_body: RefCell<Vec<u8>>,
    /// The route's cluster.
    pub(crate) cluster: Option<String>,
    /// The servers whose tool list changed.
    pub(crate) changed: RefCell<Vec<String>>,
}

impl Host for Mock {
    type Store = crate::embeddings::MemoryBytes;

    fn hybrid(&self) -> Option<Hybrid<'_, Self::Store>> {
        let (cache, embeddings, config) = self.vectors.as_ref()?;
        Some(Hybrid {
            source: crate::embeddings::Source {
                provider: "test",
                model: &embeddings.model,
                dimensions: embeddings.dimensions,
                cache,
                roles: embeddings.roles.as_ref(),
                query_sentences: embeddings.query_sentences,
            },
            embeddings,
            config,
        })
    }

    fn suggestions(&self) -> Option<std::rc::Rc<crate::suggestions::Suggestions>> {
        self.suggestions.clone()
    }

    fn store(&self) -> &Self::Store {
        &self.store
    }

    fn send_embeddings(&self, inputs: &[&str]) -> Option<u32> {
        let mut embedded = self.embedded.borrow_mut();
        embedded.push(inputs.iter().map(|i| (*i).to_owned()).collect());
        Some(1000 + embedded.len() as u32)
    }

    fn send(
        &self,
        body: &str,
        method: &str,
        name: Option<&str>,
        params: &[(String, String)],
        timeout_ms: u64,
    ) -> Option<u32> {
        if self.refuse {
            return None;
        }
        self.params.borrow_mut().push(params.to_vec());
        let mut sent = self.sent.borrow_mut();
        sent.push((body.into(), method.into(), name.map(Into::into), timeout_ms));
        Some(sent.len() as u32)
    }
    fn respond(&self, status: u16, content_type: &str, body: &[u8]) {
        self.answered.borrow_mut().push((
            status,
            content_type.into(),
            String::from_utf8(body.to_vec()).unwrap(),
        ));
    }
    fn now_millis(&self) -> u64 {
        self.now
    }
    fn generation(&self, _server: &str) -> u64 {
        *self.generation.borrow()
    }
    fn tools_changed(&self, server: &str) {
        *self.generation.borrow_mut() += 1;
        self.changed.borrow_mut().push(server.to_owned());
    }
    fn request_body(&self, len: usize) -> Vec<u8> {
        self.request_body[..len.min(self.request_body.len())].to_vec()
    }
    fn response_body(&self, len: usize) -> Vec<u8> {
        let chunk = self.response_body.borrow();
        chunk[..len.min(chunk.len())].to_vec()
    }
    fn upstream_cluster(&self) -> Option<String> {
        self.cluster.clone()
    }
    fn count(&self, event: Event) {
        self.events.borrow_mut().push(event);
    }
}

impl Mock {
    pub(crate) fn last_sent(&self) -> Value {
        serde_json::from_str(&self.sent.borrow().last().unwrap().0).unwrap()
    }
    pub(crate) fn answer(&self) -> (u16, Value) {
        let (status, _, body) = self.answered.borrow().last().cloned().unwrap();
        (status, serde_json::from_str(&body).unwrap())
    }
}

pub(crate) fn tool(name: &str, description: &str) -> String {
    format!(
        r#"{{"name":"{name}","description":"{description}","inputSchema":{{"type":"object","properties":{{"q":{{"type":"string"}}}}}}}}"#
    )
}

pub(crate) fn catalog_tools() -> Vec<String> {
    vec![
        tool("get_weather", "Current weather for a city"),
        tool("send_email", "Send an email message to a recipient"),
        tool("create_issue", "Create a GitHub issue in a repository"),
        tool("list_files", "List the files in a directory"),
        tool("weather_alerts", "Severe weather alerts for a region"),
    ]
}

pub(crate) fn list_answer(
    id: &str,
    tools: &[String],
    cursor: Option<&str>,
    extra: &str,
) -> CallAnswer {
    let cursor = cursor.map_or(String::new(), |c| format!(",\"nextCursor\":\"{c}\""));
    CallAnswer {
        status: Some(200),
        content_type: "application/json".into(),
        body: format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{{"tools":[{}]{cursor}{extra}}}}}"#,
            tools.join(",")
        )
        .into_bytes(),
    }
}

pub(crate) fn sse(messages: &[String]) -> CallAnswer {
    let mut body = String::new();
    for m in messages {
        body.push_str(&format!("event: message\ndata: {m}\n\n"));
    }
    CallAnswer {
        status: Some(200),
        content_type: "text/event-stream".into(),
        body: body.into_bytes(),
    }
}

pub(crate) struct Setup {
    pub(crate) config: Config,
    pub(crate) mcp: Mcp,
    pub(crate) cache: CatalogCache,
    /// `gating.rules`, compiled as the filter's engine compiles them.
    pub(crate) rules: crate::gating::Rules,
}

impl Setup {
    pub(crate) fn new(config: &str) -> Setup {
        let config = Config::from_json(config.as_bytes()).unwrap();
        let mcp = config.mcp.clone().unwrap_or_default();
        let rules = crate::pipeline::Engine::new(config.clone())
            .gating_rules()
            .clone();
        Setup {
            config,
            mcp,
            cache: CatalogCache::new(1 << 20),
            rules,
        }
    }

    pub(crate) fn settings(&self) -> Settings<'_> {
        Settings {
            config: &self.config,
            mcp: &self.mcp,
            gating: Some(&self.rules).filter(|r| !r.is_empty()),
        }
    }

    /// Runs `body` through a new exchange; the catalog pages (when fetched) come from `pages`.
    pub(crate) fn run(
        &mut self,
        host: &Mock,
        revision: &str,
        body: &str,
        pages: &[Vec<String>],
    ) -> (Exchange, Step) {
        let head = Head {
            server: "mcp|localhost".into(),
            revision: revision.into(),
            ..Head::default()
        };
        self.run_head(host, head, body, pages)
    }

    /// [`Setup::run`] for a request with these headers (its caller, its credentials).
    pub(crate) fn run_head(
        &mut self,
        host: &Mock,
        head: Head,
        body: &str,
        pages: &[Vec<String>],
    ) -> (Exchange, Step) {
        let mut exchange = Exchange::new(head);
        let settings = Settings {
            config: &self.config,
            mcp: &self.mcp,
            gating: Some(&self.rules).filter(|r| !r.is_empty()),
        };
        let mut step = exchange.on_body(host, &mut self.cache, &settings, body.as_bytes());
        let mut page = 0;
        while step == Step::Wait {
            let sent = host.last_sent();
            let waits_for_it = exchange.token() == Some(host.sent.borrow().len() as u32);
            if sent["method"] != "tools/list" || !waits_for_it {
                break;
            }
            let id = sent["id"].to_string();
            let more = (page + 1 < pages.len()).then(|| (page + 2).to_string());
            let answer = list_answer(&id, &pages[page], more.as_deref(), "");
            page += 1;
            let token = exchange.token().unwrap();
            step = exchange.on_call(host, &mut self.cache, &settings, token, answer);
        }
        (exchange, step)
    }
}

pub(crate) fn call(id: u32, name: &str, arguments: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{name}","arguments":{arguments}}}}}"#
    )
}

pub(crate) const LIST: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;

// Access rules ------------------------------------------------------------------------------

/// Team `a` may use the weather tools and list files; team `b` may mail and file issues, but
/// only to `*@example.com`; every caller is kept from destructive tools and from `*delete*`.
pub(crate) const ACCESS: &str = r#"{
    "identity": [{"header": "x-team"}],
    "default": "deny",
    "rules": [
        {"when": ["a"], "allow": ["get_*", "weather_*", "list_*"]},
        {"when": ["b"], "allow": ["send_*", "create_*"], "arguments": {"send_email": {"to": ["*@example.com"]}}},
        {"when": ["*"], "deny": ["*delete*"], "deny_annotations": ["destructiveHint"]}
    ],
    "denied": "DENIED"
}"#;

pub(crate) const REVISIONS: [&str; 2] = ["2025-11-25", MODERN_REVISION];

/// The catalog with two tools team `a` may not have whatever its rules allow: a `*delete*` one
/// and a destructive one.
pub(crate) fn governed_tools() -> Vec<String> {
    let mut tools = catalog_tools();
    tools.push(tool("get_then_delete", "Read a record, then delete it"));
    tools.push(
        r#"{"name":"get_wiped","description":"Wipe the weather cache","inputSchema":{"type":"object"},"annotations":{"destructiveHint":true}}"#
            .to_owned(),
    );
    tools
}

/// The configuration with [`ACCESS`] (`denied`: hidden or refused).
pub(crate) fn access_config(denied: &str) -> String {
    let access = ACCESS.replace("DENIED", denied);
    format!(
        r#"{{"always_include":["get_weather","send_email","get_wiped"],"mcp":{{}},"access":{access}}}"#
    )
}

pub(crate) fn setup(denied: &str) -> Setup {
    Setup::new(&access_config(denied))
}

impl Setup {
    /// The headers of a request from a caller with `values` (`x-team`), on `revision`.
    pub(crate) fn head(&self, revision: &str, values: &[&str]) -> Head {
        let policy = Rc::new(self.config.policy().unwrap().unwrap());
        let caller = Caller::new(values.iter().map(|v| (*v).to_owned()));
        Head {
            server: "mcp|localhost".into(),
            revision: revision.into(),
            auth: auth_context([&b"Bearer shared"[..]], Some(&caller)),
            grant: Some(policy.grant(&caller)),
            routing: RoutingHeaders::default(),
            session: None,
        }
    }

    pub(crate) fn run_as(
        &mut self,
        host: &Mock,
        revision: &str,
        values: &[&str],
        body: &str,
    ) -> (Exchange, Step) {
        let head = self.head(revision, values);
        self.run_head(host, head, body, &[governed_tools()])
    }
}

pub(crate) fn names(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

pub(crate) fn only_lists_sent(host: &Mock) -> bool {
    host.sent.borrow().iter().all(|c| c.1 == "tools/list")
}

/// Memory of found tools on MCP routes (`search.memory`): a request of session `name`.
pub(crate) fn in_session(revision: &str, name: Option<&str>) -> Head {
    Head {
        server: "mcp|localhost".into(),
        revision: revision.into(),
        session: name.and_then(|n| crate::search::memory::SessionKey::new(7, "test", n.as_bytes())),
        ..Head::default()
    }
}

pub(crate) const MEMORY: &str = r#"{"always_include":["list_*"],"mcp":{},"search":{"memory":{}}}"#;

pub(crate) fn find(id: u32, query: &str) -> String {
    call(
        id,
        "find_tools",
        &json!({"query": query, "limit": 1}).to_string(),
    )
}

pub(crate) fn structured(host: &Mock) -> Value {
    host.answer().1["result"]["structuredContent"].clone()
}
