//! `suggestions.mcp`: the root context fetches the suggestion server's `tools/list` (every page)
//! when Envoy starts and every `refresh_seconds`, on its ticks; the answer's tools join the
//! inline ones in the engine. When to fetch is [`Refresh`]'s; this adds the calls.

use super::shared::Shared;
use super::{callout, host};
use crate::mcp::suggestions::RefreshStep;
use crate::stats::Fixed;
use crate::suggestions::SuggestionServer;
use std::time::Duration;

/// How often the root context's tick looks whether a fetch is due.
pub const TICK: Duration = Duration::from_secs(1);

/// Starts a fetch when one is due (on the root context's tick).
pub fn tick(shared: &Shared) {
    let Ok(engine) = shared.engine.try_borrow() else {
        return;
    };
    let Some(server) = engine
        .config
        .suggestions
        .as_ref()
        .and_then(|s| s.mcp.as_ref())
    else {
        return;
    };
    let Ok(mut refresh) = shared.suggestions.try_borrow_mut() else {
        return;
    };
    let Some(refresh) = refresh.as_mut() else {
        return;
    };
    let now = host::now_millis();
    if refresh.due(now) {
        refresh.sent(now, send(server, None));
    }
}

/// Reads the suggestion server's answer when `token` is its call; `false` for other calls.
pub fn answered(shared: &Shared, token: u32, num_headers: usize, body_size: usize) -> bool {
    let Ok(mut refresh) = shared.suggestions.try_borrow_mut() else {
        return false;
    };
    let Some(refresh) = refresh.as_mut().filter(|r| r.waits_for(token)) else {
        return false;
    };
    let answer = callout::call_answer(num_headers, body_size);
    let page =
        crate::mcp::suggestions::read_list(answer.status, &answer.content_type, &answer.body);
    let now = host::now_millis();
    let Ok(mut engine) = shared.engine.try_borrow_mut() else {
        // A request holds the engine (it cannot, between callbacks): try again later.
        refresh.sent(now, None);
        return true;
    };
    match refresh.on_page(now, page) {
        RefreshStep::Next(cursor) => {
            let server = engine
                .config
                .suggestions
                .as_ref()
                .and_then(|s| s.mcp.as_ref());
            let token = server.and_then(|server| send(server, Some(&cursor)));
            refresh.sent(now, token);
        }
        RefreshStep::Done(pages) => {
            let tools: usize = pages.iter().map(|p| p.tools.len()).sum();
            log::info!("suggestions: {tools} tools from the suggestion server");
            engine.set_fetched_suggestions(crate::mcp::suggestions::tools(pages));
            shared.metrics.add(Fixed::SuggestionsFetched, 1);
        }
        RefreshStep::Failed => {
            log::warn!(
                "suggestions: the suggestion server's tools/list failed (status {:?}); keeping \
                 the tools there were",
                answer.status
            );
            shared.metrics.add(Fixed::SuggestionsFailed, 1);
        }
    }
    true
}

/// Sends one `tools/list` call for the page after `cursor`.
fn send(server: &SuggestionServer, cursor: Option<&str>) -> Option<u32> {
    let (extra, body) = crate::mcp::suggestions::list_call(server, cursor);
    let mut headers: Vec<(&str, &str)> = vec![
        (":method", "POST"),
        (":path", &server.path),
        (":authority", server.authority()),
    ];
    headers.extend(extra.iter().map(|(n, v)| (n.as_str(), v.as_str())));
    let timeout = Duration::from_millis(server.timeout_ms);
    match host::dispatch(&server.cluster, headers, body.as_bytes(), timeout) {
        Ok(token) => Some(token),
        Err(status) => {
            log::warn!(
                "suggestions: cannot call cluster {}: {status:?}",
                server.cluster
            );
            None
        }
    }
}
