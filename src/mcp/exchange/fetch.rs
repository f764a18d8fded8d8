//! The server's catalog: every page of its `tools/list`, following `nextCursor`, fetched with
//! the client's session and credentials and cached; and what a request gets when it cannot be
//! had.

use super::list::Names;
use super::{
    CallAnswer, Event, Exchange, Host, LIST_ID, Settings, State, Step, Want, request_body,
};
use crate::access::Surface;
use crate::mcp::catalog::{CatalogCache, Key, Page, ServerCatalog, page};
use crate::mcp::govern::{self, Refusal};
use crate::mcp::message::{self, Outcome};
use crate::pipeline::header_safe;
use serde_json::{Map, Value};
use std::rc::Rc;

impl Exchange {
    pub(super) fn key(&self) -> Key {
        Key {
            server: self.head.server.clone(),
            revision: self.head.revision.clone(),
        }
    }

    /// Asks the server for one page of its tools.
    pub(super) fn fetch_page<H: Host>(
        &mut self,
        host: &H,
        settings: &Settings,
        pages: Vec<Page>,
        cursor: Option<&str>,
    ) -> Step {
        let page_id = (LIST_ID + pages.len() as u64 + 1).to_string();
        let mut params = Map::new();
        if let Some(cursor) = cursor {
            params.insert("cursor".into(), Value::String(cursor.to_owned()));
        }
        let body = request_body(&page_id, "tools/list", params, self.meta.as_deref());
        match host.send(
            &body,
            "tools/list",
            None,
            &[],
            settings.mcp.timeout_ms as u64,
        ) {
            Some(token) => {
                self.state = State::Fetching {
                    token,
                    page_id,
                    pages,
                };
                Step::Wait
            }
            None => self.no_catalog(host, settings, None),
        }
    }

    pub(super) fn on_page<H: Host>(
        &mut self,
        host: &H,
        cache: &mut CatalogCache,
        settings: &Settings,
        page_id: &str,
        mut pages: Vec<Page>,
        answer: &CallAnswer,
    ) -> Step {
        let reply = message::server_reply(&answer.content_type, &answer.body, page_id);
        self.note_notifications(host, &reply.notifications);
        let read = match (answer.status, reply.outcome) {
            (Some(200), Some(Outcome::Result(result))) => page(&result),
            _ => None,
        };
        let Some(read) = read else {
            return self.no_catalog(host, settings, answer.status);
        };
        let cursor = read.next_cursor.clone();
        pages.push(read);
        if let Some(cursor) = cursor {
            if pages.len() < settings.mcp.max_pages {
                return self.fetch_page(host, settings, pages, Some(&cursor));
            }
            log::warn!(
                "mcp: {} has more than mcp.max_pages ({}) pages of tools; the rest are left out",
                self.head.server,
                settings.mcp.max_pages
            );
        }
        host.count(Event::CatalogFetched(pages.len()));
        let catalog = Rc::new(ServerCatalog::build(pages));
        let ttl = catalog.ttl_ms.unwrap_or(settings.mcp.catalog_ttl_ms as u64);
        if ttl > 0 {
            let now = host.now_millis();
            let generation = host.generation(&self.head.server);
            cache.put(
                self.key(),
                self.head.auth,
                Rc::clone(&catalog),
                now.saturating_add(ttl),
                generation,
            );
        }
        self.with_catalog(host, settings, &catalog)
    }

    /// The catalog could not be had (`status`: the server's answer, if any).
    fn no_catalog<H: Host>(&mut self, host: &H, settings: &Settings, status: Option<u16>) -> Step {
        host.count(Event::CatalogFailed);
        self.outcome = Some("mcp=pass reason=no_catalog".to_owned());
        let want = self.want.clone();
        match (want, self.head.grant.clone()) {
            // Under access rules the server's list never reaches the client unfiltered.
            (Some(Want::List), Some(_)) if self.refusal_enforced() => {
                host.count(Event::Denied(Surface::McpRequest, 1));
                self.outcome = Some("mcp=refused reason=no_catalog".to_owned());
                self.catalog_error(host, status)
            }
            // A direct call is decided by its name and arguments.
            (Some(Want::Direct { name }), Some(grant)) => {
                let arguments = self.called_arguments();
                match govern::check_call(&grant, None, &name, &arguments) {
                    None => {
                        self.outcome = Some(format!(
                            "mcp=call tool={} reason=no_catalog",
                            header_safe(&name)
                        ));
                        Step::Pass
                    }
                    Some(Refusal::Denied(why)) => {
                        let names = Names::plain(settings.config);
                        self.deny_call(host, &names, &name, &why)
                    }
                    Some(Refusal::Unverified) => {
                        host.count(Event::Denied(Surface::McpCall, 1));
                        self.outcome = Some(format!(
                            "mcp=refused tool={} reason=no_catalog",
                            header_safe(&name)
                        ));
                        self.catalog_error(host, status)
                    }
                }
            }
            (Some(Want::List | Want::Direct { .. }), _) | (None, _) => Step::Pass,
            (Some(Want::Find { .. } | Want::CallTool { .. }), _) => {
                self.catalog_error(host, status)
            }
        }
    }

    /// The error a request that needs the catalog gets when it cannot be had. The server's
    /// refusal (401, 404: a session gone) stays visible to the client.
    fn catalog_error<H: Host>(&mut self, host: &H, status: Option<u16>) -> Step {
        let status = status.filter(|s| !(200..300).contains(s)).unwrap_or(200);
        let message = format!(
            "toolsift: cannot read the server's tools ({})",
            match status {
                200 => "no answer".to_owned(),
                s => format!("HTTP {s}"),
            }
        );
        self.error(host, status, govern::INTERNAL_ERROR, &message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::exchange::Head;
    use crate::mcp::exchange::testing::*;

    #[test]
    fn without_a_catalog_requests_pass_or_get_an_error() {
        let s = Setup::new(r#"{"mcp":{}}"#);
        for answer in [
            CallAnswer::default(),
            CallAnswer {
                status: Some(404),
                content_type: "application/json".into(),
                body: b"{}".to_vec(),
            },
            CallAnswer {
                status: Some(200),
                content_type: "application/json".into(),
                body: br#"{"jsonrpc":"2.0","id":7400000001,"error":{"code":1,"message":"no"}}"#
                    .to_vec(),
            },
            CallAnswer {
                status: Some(200),
                content_type: "text/event-stream".into(),
                body: b"\xff\xfe".to_vec(),
            },
            CallAnswer {
                status: Some(200),
                content_type: "application/json".into(),
                body: br#"{"jsonrpc":"2.0","id":7400000001,"result":{"tools":5}}"#.to_vec(),
            },
        ] {
            for (body, passes) in [
                (LIST.to_owned(), true),
                (call(1, "x", "{}"), true),
                (call(1, "find_tools", r#"{"query":"a"}"#), false),
            ] {
                let host = Mock::default();
                let mut exchange = Exchange::new(Head::default());
                let settings = s.settings();
                let mut cache = CatalogCache::new(1 << 20);
                assert_eq!(
                    exchange.on_body(&host, &mut cache, &settings, body.as_bytes()),
                    Step::Wait
                );
                let step = exchange.on_call(&host, &mut cache, &settings, 1, answer.clone());
                if passes {
                    assert_eq!(step, Step::Pass);
                    assert!(host.answered.borrow().is_empty());
                } else {
                    assert_eq!(step, Step::Answered);
                    let (status, a) = host.answer();
                    assert_eq!(status, if answer.status == Some(404) { 404 } else { 200 });
                    assert_eq!(a["error"]["code"], -32603);
                }
            }
        }
        // A host that cannot send: the same.
        let host = Mock {
            refuse: true,
            ..Mock::default()
        };
        let mut exchange = Exchange::new(Head::default());
        let settings = s.settings();
        assert_eq!(
            exchange.on_body(&host, &mut CatalogCache::new(1), &settings, LIST.as_bytes()),
            Step::Pass
        );
    }

    #[test]
    fn without_the_catalog_nothing_passes_ungoverned() {
        let failures = [
            CallAnswer::default(),
            CallAnswer {
                status: Some(503),
                content_type: "text/plain".into(),
                body: b"upstream connect error".to_vec(),
            },
            list_answer("7400000001", &["{".to_owned()], None, ""),
        ];
        let annotated = access_config("hidden");
        for revision in REVISIONS {
            for failure in &failures {
                // Names-only rules: a direct call is decided by its name.
                let names_only = r#"{"mcp":{},"access":{"identity":[{"header":"x-team"}],
                    "rules":[{"when":["a"],"allow":["get_*"]}],"denied":"refused"}}"#;
                for (config, body, expect) in [
                    (names_only, LIST.to_owned(), "mcp=refused reason=no_catalog"),
                    (
                        names_only,
                        call(1, "get_weather", "{}"),
                        "mcp=call tool=get_weather reason=no_catalog",
                    ),
                    (
                        names_only,
                        call(1, "send_email", "{}"),
                        "mcp=refused tool=send_email reason=access",
                    ),
                    // A rule reads annotations the gateway cannot see: refused.
                    (
                        annotated.as_str(),
                        call(1, "get_weather", "{}"),
                        "mcp=refused tool=get_weather reason=no_catalog",
                    ),
                    (
                        names_only,
                        call(1, "call_tool", r#"{"name":"get_weather"}"#),
                        "mcp=pass reason=no_catalog",
                    ),
                ] {
                    let s = Setup::new(config);
                    let host = Mock::default();
                    let mut exchange = Exchange::new(s.head(revision, &["a"]));
                    let settings = s.settings();
                    let mut cache = CatalogCache::new(1 << 20);
                    assert_eq!(
                        exchange.on_body(&host, &mut cache, &settings, body.as_bytes()),
                        Step::Wait
                    );
                    let step = exchange.on_call(&host, &mut cache, &settings, 1, failure.clone());
                    assert_eq!(exchange.header_value(), Some(expect), "{body}");
                    if expect.starts_with("mcp=call") {
                        assert_eq!(step, Step::Pass, "{body}");
                        assert!(host.answered.borrow().is_empty());
                    } else {
                        assert_eq!(step, Step::Answered, "{body}");
                        assert!(host.sent.borrow().len() == 1 && only_lists_sent(&host));
                    }
                    if body == LIST {
                        let (_, answer) = host.answer();
                        assert_eq!(answer["error"]["code"], -32603, "never the server's list");
                        assert!(
                            host.events
                                .borrow()
                                .contains(&Event::Denied(Surface::McpRequest, 1))
                        );
                    }
                }
            }
        }
    }
}
