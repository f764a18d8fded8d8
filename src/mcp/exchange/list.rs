//! `tools/list`, answered by the gateway: the meta-tools (named so that they never shadow a
//! server tool), the `always_include` tools and those the session found.

use super::find::backends;
use super::{CALL_TOOL, Event, Exchange, Host, Settings, Step, visible};
use crate::access::Surface;
use crate::config::Config;
use crate::mcp::catalog::{self, ServerCatalog};
use crate::search::round::{DEFAULT_LIMIT, MAX_LIMIT};
use serde_json::{Map, Value, json};

impl Exchange {
    pub(super) fn list<H: Host>(
        &mut self,
        host: &H,
        settings: &Settings,
        catalog: &ServerCatalog,
        names: &Names,
    ) -> Step {
        let allowed = self.allowed(catalog);
        let may_see = |at: usize| visible(allowed.as_deref(), at);
        let denied = allowed.as_deref().map(|a| catalog.denied(a));
        let findable = catalog.findable().saturating_sub(denied.unwrap_or(0));
        let mut tools = vec![
            find_tool_definition(&names.find, &names.call, findable, settings.config),
            call_tool_definition(&names.call, &names.find),
        ];
        let listable =
            |at: usize, tool: &catalog::Tool| tool.name != catalog::GATING_TOOL && may_see(at);
        let mut shown = 0;
        for (at, tool) in catalog.tools.iter().enumerate() {
            if listable(at, tool) && settings.config.always_includes(&tool.name) {
                if let Ok(raw) = serde_json::from_str::<Value>(&tool.raw) {
                    tools.push(raw);
                    shown += 1;
                }
            }
        }
        // Then the tools the session found, first-found first (a stable prefix for prompt
        // caches), never one the caller may not see now.
        let mut remembered = 0;
        if let Some((memory, key)) = self.memory {
            let now = host.now_millis() / 1000;
            for name in memory.recall(host.store(), &key, now) {
                let Some((at, tool)) = catalog
                    .position(&name)
                    .and_then(|at| Some((at, catalog.tools.get(at)?)))
                else {
                    continue;
                };
                if listable(at, tool) && !settings.config.always_includes(&tool.name) {
                    if let Ok(raw) = serde_json::from_str::<Value>(&tool.raw) {
                        tools.push(raw);
                        remembered += 1;
                    }
                }
            }
        }
        let mut result = Map::new();
        result.insert("tools".into(), Value::Array(tools));
        if self.head.modern() {
            // Required of list results from 2026-07-28 on: the server's hints, echoed. Under
            // access rules the answer is this caller's, and with a session's memory this
            // session's, growing with its searches: never to be shared or kept.
            let ttl = if self.memory.is_some() {
                0
            } else {
                catalog.ttl_ms.unwrap_or(0)
            };
            result.insert("ttlMs".into(), ttl.into());
            let scope =
                if catalog.public == Some(true) && allowed.is_none() && self.memory.is_none() {
                    "public"
                } else {
                    "private"
                };
            result.insert("cacheScope".into(), scope.into());
        }
        let result = Value::Object(result);
        let full: usize = catalog.tools.iter().map(|t| t.raw.len()).sum();
        let ours = result.to_string().len();
        host.count(Event::Listed {
            tokens_saved: crate::rank::estimate_tokens(full)
                .saturating_sub(crate::rank::estimate_tokens(ours)),
        });
        let remembered_note = if remembered > 0 {
            format!(" remembered={remembered}")
        } else {
            String::new()
        };
        self.outcome = Some(format!(
            "mcp=tools/list kept={shown}{remembered_note} total={}{}",
            catalog.findable(),
            self.denied_note(host, denied)
        ));
        self.result(host, result)
    }

    /// Under access rules, ` denied=N` for `x-toolsift` (the server's findable tools the caller
    /// may not see), counted.
    pub(super) fn denied_note<H: Host>(&self, host: &H, denied: Option<usize>) -> String {
        match denied {
            Some(n) => {
                host.count(Event::Denied(Surface::McpTools, n));
                format!(" denied={n}")
            }
            None => String::new(),
        }
    }
}

/// The meta-tools' names for one catalog: `search.tool_name` and `call_tool`, unless a server
/// tool already has the name; then `{name}_2`, `{name}_3`, … (a server tool is never shadowed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    pub find: String,
    pub call: String,
}

impl Names {
    /// The names for a caller that may see the tools `allowed` says (every tool: `None`): a
    /// server tool the caller may not see takes no name from it.
    pub fn for_catalog(
        config: &Config,
        catalog: &ServerCatalog,
        allowed: Option<&[bool]>,
    ) -> Names {
        let taken = |name: &str| {
            catalog
                .position(name)
                .is_some_and(|at| visible(allowed, at))
        };
        let free = |base: &str, also_taken: Option<&str>| {
            std::iter::once(base.to_owned())
                .chain((2..).map(|n| format!("{base}_{n}")))
                .find(|n| !taken(n) && Some(n.as_str()) != also_taken)
                .unwrap_or_else(|| base.to_owned())
        };
        let find = free(&config.search.tool_name, None);
        let call = free(CALL_TOOL, Some(&find));
        Names { find, call }
    }

    /// The names when the catalog is unknown.
    pub fn plain(config: &Config) -> Names {
        Names {
            find: config.search.tool_name.clone(),
            call: CALL_TOOL.to_owned(),
        }
    }
}

fn find_tool_definition(find: &str, call: &str, total: usize, config: &Config) -> Value {
    let backends = backends(config).0;
    json!({
        "name": find,
        "title": "Find tools",
        "description": format!(
            "Search this server's {total} tools by what they should do, and get the best matches \
             with their input schemas. Then call one by its name, or with {call}. Search backends: \
             {backends}."
        ),
        "inputSchema": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What the tool should do, in a few words."},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT,
                          "description": "How many tools to return."}
            },
            "required": ["query"]
        },
        "annotations": {"readOnlyHint": true}
    })
}

fn call_tool_definition(call: &str, find: &str) -> Value {
    json!({
        "name": call,
        "title": "Call a tool",
        "description": format!("Call a tool that {find} returned, by its name, with its arguments."),
        "inputSchema": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": format!("The tool's name, as {find} returned it.")},
                "arguments": {"type": "object", "description": "The tool's arguments, as its input schema says."}
            },
            "required": ["name"]
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::exchange::testing::*;
    use crate::mcp::exchange::{Head, MODERN_REVISION};

    #[test]
    fn tools_list_shows_the_meta_tools_and_pinned_ones_from_every_page() {
        let mut s = Setup::new(r#"{"always_include":["list_*"],"mcp":{}}"#);
        let host = Mock::default();
        let tools = catalog_tools();
        let (exchange, step) = s.run(
            &host,
            "2025-11-25",
            LIST,
            &[tools[..2].to_vec(), tools[2..].to_vec()],
        );
        assert_eq!(step, Step::Answered);
        let sent = host.sent.borrow().clone();
        assert_eq!(sent.len(), 2, "two pages");
        assert_eq!(host.last_sent()["params"]["cursor"], "2");
        let (status, answer) = host.answer();
        assert_eq!(status, 200);
        assert_eq!(answer["id"], 1);
        let names: Vec<&str> = answer["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["find_tools", "call_tool", "list_files"]);
        assert!(
            answer["result"].get("resultType").is_none(),
            "not before 2026-07-28"
        );
        assert_eq!(
            exchange.header_value(),
            Some("mcp=tools/list kept=1 total=5")
        );
        // Cached: the next list asks the server nothing.
        let (_, step) = s.run(&host, "2025-11-25", LIST, &[]);
        assert_eq!(step, Step::Answered);
        assert_eq!(host.sent.borrow().len(), 2);
        assert!(host.events.borrow().contains(&Event::CatalogHit));
    }

    #[test]
    fn a_server_tool_named_like_a_meta_tool_is_never_shadowed() {
        let mut s = Setup::new(r#"{"mcp":{}}"#);
        let mut tools = catalog_tools();
        tools.push(tool("find_tools", "the server's own search"));
        let host = Mock::default();
        s.run(&host, "2025-11-25", LIST, &[tools.clone()]);
        let (_, answer) = host.answer();
        assert_eq!(answer["result"]["tools"][0]["name"], "find_tools_2");
        // The server's find_tools is called directly; find_tools_2 is the gateway's.
        let (_, step) = s.run(
            &host,
            "2025-11-25",
            &call(7, "find_tools", r#"{"query":"x"}"#),
            &[],
        );
        assert_eq!(step, Step::Pass);
        let (_, step) = s.run(
            &host,
            "2025-11-25",
            &call(8, "find_tools_2", r#"{"query":"email"}"#),
            &[],
        );
        assert_eq!(step, Step::Answered);
        assert_eq!(
            host.answer().1["result"]["structuredContent"]["tools"][0]["name"],
            "send_email"
        );
    }

    impl Setup {
        /// `tools/list` answered from one page of `tools` with the caching hints `extra`.
        fn list_once(&mut self, host: &Mock, head: Head, tools: &[String], extra: &str) -> Value {
            let mut exchange = Exchange::new(head);
            let settings = Settings {
                config: &self.config,
                mcp: &self.mcp,
                gating: Some(&self.rules).filter(|r| !r.is_empty()),
            };
            exchange.on_body(host, &mut self.cache, &settings, LIST.as_bytes());
            let answer = list_answer("7400000001", tools, None, extra);
            assert_eq!(
                exchange.on_call(host, &mut self.cache, &settings, 1, answer),
                Step::Answered
            );
            host.answer().1
        }
    }

    #[test]
    fn ttl_zero_is_never_cached_and_names_stay_stable() {
        let mut s = Setup::new(r#"{"mcp":{}}"#);
        let head = Head {
            revision: MODERN_REVISION.into(),
            ..Head::default()
        };
        let answer = s.list_once(
            &Mock::default(),
            head,
            &catalog_tools(),
            r#","ttlMs":0,"cacheScope":"public""#,
        );
        assert!(s.cache.is_empty());
        let result = &answer["result"];
        assert_eq!(
            (result["ttlMs"].as_u64(), result["cacheScope"].as_str()),
            (Some(0), Some("public"))
        );
    }

    #[test]
    fn a_caller_lists_only_the_always_include_tools_its_rules_allow() {
        for revision in REVISIONS {
            for denied in ["hidden", "refused"] {
                let mut s = setup(denied);
                let host = Mock::default();
                let (exchange, step) = s.run_as(&host, revision, &["a"], LIST);
                assert_eq!(step, Step::Answered);
                let (_, answer) = host.answer();
                let tools = &answer["result"]["tools"];
                // get_wiped is pinned but destructive; send_email is pinned but team b's.
                assert_eq!(names(tools), ["find_tools", "call_tool", "get_weather"]);
                assert!(
                    tools[0]["description"]
                        .as_str()
                        .unwrap()
                        .starts_with("Search this server's 3 tools"),
                    "only what the caller can find is counted: {}",
                    tools[0]["description"]
                );
                assert_eq!(
                    exchange.header_value(),
                    Some("mcp=tools/list kept=1 total=7 denied=4")
                );
                assert!(
                    host.events
                        .borrow()
                        .contains(&Event::Denied(Surface::McpTools, 4))
                );
                let (_, step) = s.run_as(&host, revision, &["b"], LIST);
                assert_eq!(step, Step::Answered);
                let (_, answer) = host.answer();
                assert_eq!(
                    names(&answer["result"]["tools"]),
                    ["find_tools", "call_tool", "send_email"]
                );
            }
        }
    }

    #[test]
    fn a_list_the_server_calls_public_is_answered_private_under_access_rules() {
        let mut s = setup("hidden");
        let head = s.head(MODERN_REVISION, &["a"]);
        let answer = s.list_once(
            &Mock::default(),
            head,
            &governed_tools(),
            r#","ttlMs":60000,"cacheScope":"public""#,
        );
        assert_eq!(answer["result"]["cacheScope"], "private");
    }

    #[test]
    fn a_server_tool_the_caller_may_not_see_takes_no_meta_tool_name() {
        let mut tools = governed_tools();
        tools.push(tool("find_tools", "the server's own search"));
        let config = r#"{"mcp":{},"access":{"identity":[{"header":"x-team"}],"default":"allow",
            "rules":[{"when":["b"],"deny":["find_tools"]}]}}"#;
        let mut s = Setup::new(config);
        let host = Mock::default();
        let head = s.head("2025-11-25", &["a"]);
        s.run_head(&host, head, LIST, &[tools.clone()]);
        assert_eq!(
            host.answer().1["result"]["tools"][0]["name"],
            "find_tools_2"
        );
        // Team b never learns the server has a find_tools: its meta-tool takes the name.
        let head = s.head("2025-11-25", &["b"]);
        s.run_head(&host, head, LIST, &[tools.clone()]);
        assert_eq!(host.answer().1["result"]["tools"][0]["name"], "find_tools");
        let head = s.head("2025-11-25", &["b"]);
        let (_, step) = s.run_head(
            &host,
            head,
            &call(4, "find_tools", r#"{"query":"email"}"#),
            &[tools],
        );
        assert_eq!(step, Step::Answered);
        assert_eq!(
            host.answer().1["result"]["structuredContent"]["tools"][0]["name"],
            "send_email"
        );
        let head = s.head("2025-11-25", &["a"]);
        let (_, step) = s.run_head(&host, head, &call(5, "find_tools", r#"{"query":"x"}"#), &[]);
        assert_eq!(step, Step::Pass, "team a calls the server's own");
    }

    #[test]
    fn a_session_lists_the_tools_it_found_after_the_pinned_ones() {
        for revision in REVISIONS {
            let mut s = Setup::new(MEMORY);
            let host = Mock::default();
            let tools = [catalog_tools()];
            let session = |name| in_session(revision, Some(name));
            s.run_head(&host, session("s1"), &find(2, "weather in Paris"), &tools);
            assert_eq!(names(&structured(&host)["tools"]), ["get_weather"]);
            s.run_head(&host, session("s1"), &find(3, "send an email"), &tools);
            let (exchange, _) = s.run_head(&host, session("s1"), LIST, &tools);
            let listed = &host.answer().1["result"];
            assert_eq!(
                names(&listed["tools"]),
                [
                    "find_tools",
                    "call_tool",
                    "list_files",
                    "get_weather",
                    "send_email"
                ]
            );
            assert_eq!(
                exchange.header_value(),
                Some("mcp=tools/list kept=1 remembered=2 total=5")
            );
            if revision == MODERN_REVISION {
                // The session's list grows with its searches: never kept, never shared.
                assert_eq!(listed["ttlMs"], 0);
                assert_eq!(listed["cacheScope"], "private");
            }
            // Another session, and a request without one, list only the pinned tools.
            for head in [session("s2"), in_session(revision, None)] {
                s.run_head(&host, head, LIST, &tools);
                assert_eq!(
                    names(&host.answer().1["result"]["tools"]),
                    ["find_tools", "call_tool", "list_files"]
                );
            }
        }
        // Without `search.memory`, a session finds and lists as before.
        let mut s = Setup::new(r#"{"always_include":["list_*"],"mcp":{}}"#);
        let host = Mock::default();
        let head = || in_session("2025-11-25", Some("s1"));
        s.run_head(
            &host,
            head(),
            &find(2, "weather in Paris"),
            &[catalog_tools()],
        );
        s.run_head(&host, head(), LIST, &[]);
        assert_eq!(names(&host.answer().1["result"]["tools"]).len(), 3);
        assert_eq!(host.store.size(), (0, 0));
    }

    #[test]
    fn a_session_lists_no_tool_its_caller_may_not_see_now() {
        let mut s = Setup::new(
            &access_config("hidden").replace(r#""mcp":{}"#, r#""mcp":{},"search":{"memory":{}}"#),
        );
        let host = Mock::default();
        let key = crate::search::memory::SessionKey::new(7, "test", b"s1");
        let as_team = |s: &Setup, team: &str| Head {
            session: key,
            ..s.head("2025-11-25", &[team])
        };
        let head = as_team(&s, "a");
        s.run_head(
            &host,
            head,
            &find(2, "weather alerts for a region"),
            &[governed_tools()],
        );
        assert_eq!(names(&structured(&host)["tools"]), ["weather_alerts"]);
        let head = as_team(&s, "a");
        s.run_head(&host, head, LIST, &[governed_tools()]);
        assert_eq!(
            names(&host.answer().1["result"]["tools"]),
            ["find_tools", "call_tool", "get_weather", "weather_alerts"]
        );
        // The same session key under rules that hide the tool (in the filter the key holds the
        // caller, so this is a change of rules): it is not listed.
        let head = as_team(&s, "b");
        s.run_head(&host, head, LIST, &[governed_tools()]);
        assert_eq!(
            names(&host.answer().1["result"]["tools"]),
            ["find_tools", "call_tool", "send_email"]
        );
    }
}
