//! The suggestion server of `suggestions.mcp`: its `tools/list` calls (2026-07-28 revision, no
//! session), their answers, and when each worker fetches the list (at start, every
//! `refresh_seconds`, sooner again after a failure). The filter's root context sends the calls
//! on its ticks; the tools found join the inline ones ([`crate::suggestions::Suggestions`]).

use super::catalog::{self, Page};
use crate::suggestions::SuggestionServer;
use serde_json::json;

/// `tools/list` pages read at most from the suggestion server.
pub const MAX_PAGES: usize = 20;

/// The `tools/list` request for one page (`cursor`: the previous page's `nextCursor`): its
/// headers (besides the pseudo-headers the host sets) and body.
pub fn list_call(
    server: &SuggestionServer,
    cursor: Option<&str>,
) -> (Vec<(String, String)>, String) {
    let params = match cursor {
        Some(c) => json!({"cursor": c}),
        None => json!({}),
    };
    super::llm::modern_call("tools/list", None, params, &server.headers)
}

/// The tools of a whole list, as [`crate::suggestions::Suggestions::new`] takes them.
pub fn tools(pages: Vec<Page>) -> Vec<(String, String)> {
    pages
        .into_iter()
        .flat_map(|p| p.tools)
        .map(|t| (t.name, t.raw))
        .collect()
}

/// The suggestion server's `tools/list` answer as a page; `None` for anything else (an error,
/// a failed call, a body that is no list).
pub fn read_list(status: Option<u16>, content_type: &str, body: &[u8]) -> Option<Page> {
    if status != Some(200) {
        return None;
    }
    let id = super::exchange::GATING_ID;
    match super::message::server_reply(content_type, body, id).outcome? {
        super::message::Outcome::Result(result) => catalog::page(&result),
        super::message::Outcome::Error(_) => None,
    }
}

/// When each worker fetches the suggestion server's list: at start, then every
/// `refresh_seconds`; a failed fetch keeps the tools it had and tries again sooner.
#[derive(Debug, Clone, PartialEq)]
pub struct Refresh {
    refresh_ms: u64,
    /// When the next fetch is due (milliseconds since the epoch; 0: at once).
    due_ms: u64,
    /// The call in flight, and the pages read so far.
    in_flight: Option<u32>,
    pages: Vec<Page>,
}

/// What follows one page of the suggestion server's list.
#[derive(Debug, Clone, PartialEq)]
pub enum RefreshStep {
    /// Fetch the page after this cursor.
    Next(String),
    /// The whole list: these pages.
    Done(Vec<Page>),
    /// The fetch failed: keep what there is.
    Failed,
}

/// How soon a failed fetch is tried again, at most.
const RETRY_MS: u64 = 30_000;

impl Refresh {
    pub fn new(server: &SuggestionServer) -> Refresh {
        Refresh {
            refresh_ms: server.refresh_seconds.saturating_mul(1000),
            due_ms: 0,
            in_flight: None,
            pages: Vec::new(),
        }
    }

    /// Whether a fetch should start now.
    pub fn due(&self, now_ms: u64) -> bool {
        self.in_flight.is_none() && now_ms >= self.due_ms
    }

    /// A call was sent (`token`), or could not be (`None`: tried again later).
    pub fn sent(&mut self, now_ms: u64, token: Option<u32>) {
        self.in_flight = token;
        if token.is_none() {
            self.pages.clear();
            self.due_ms = now_ms.saturating_add(RETRY_MS.min(self.refresh_ms));
        }
    }

    /// Whether `token` is the call in flight.
    pub fn waits_for(&self, token: u32) -> bool {
        self.in_flight == Some(token)
    }

    /// The call in flight answered with `page` (`None`: it failed).
    pub fn on_page(&mut self, now_ms: u64, page: Option<Page>) -> RefreshStep {
        self.in_flight = None;
        let Some(page) = page else {
            self.pages.clear();
            self.due_ms = now_ms.saturating_add(RETRY_MS.min(self.refresh_ms));
            return RefreshStep::Failed;
        };
        let cursor = page.next_cursor.clone();
        self.pages.push(page);
        match cursor {
            Some(cursor) if self.pages.len() < MAX_PAGES => RefreshStep::Next(cursor),
            _ => {
                self.due_ms = now_ms.saturating_add(self.refresh_ms);
                RefreshStep::Done(std::mem::take(&mut self.pages))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;

    #[test]
    fn the_list_is_fetched_page_by_page_then_again_after_refresh_seconds() {
        let server: SuggestionServer =
            serde_json::from_str(r#"{"cluster":"c","refresh_seconds":60}"#).unwrap();
        let mut r = Refresh::new(&server);
        assert!(r.due(0));
        r.sent(1_000, Some(7));
        assert!(!r.due(1_000) && r.waits_for(7) && !r.waits_for(8));
        let page = |json: &str| catalog::page(json);
        let step = r.on_page(1_000, page(r#"{"tools":[{"name":"a"}],"nextCursor":"2"}"#));
        assert_eq!(step, RefreshStep::Next("2".into()));
        r.sent(1_000, Some(8));
        let RefreshStep::Done(pages) = r.on_page(1_100, page(r#"{"tools":[{"name":"b"}]}"#)) else {
            panic!("done");
        };
        assert_eq!(pages.len(), 2);
        assert!(!r.due(61_099) && r.due(61_100));
        // A failure (or a call that cannot be sent) tries again within 30 s.
        r.sent(61_100, Some(9));
        assert_eq!(r.on_page(61_200, None), RefreshStep::Failed);
        assert!(!r.due(91_199) && r.due(91_200));
        r.sent(91_200, None);
        assert!(r.due(121_200));
    }

    #[test]
    fn only_a_200_list_answer_is_read() {
        let body = br#"{"jsonrpc":"2.0","id":7400000999,"result":{"tools":[{"name":"a"}]}}"#;
        assert_eq!(
            read_list(Some(200), "application/json", body)
                .unwrap()
                .tools
                .len(),
            1
        );
        assert!(read_list(Some(500), "application/json", body).is_none());
        assert!(read_list(None, "application/json", body).is_none());
        let error = br#"{"jsonrpc":"2.0","id":7400000999,"error":{"code":-1,"message":"x"}}"#;
        assert!(read_list(Some(200), "application/json", error).is_none());
        assert!(read_list(Some(200), "application/json", b"\xff{").is_none());
    }
}
