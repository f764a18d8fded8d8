//! `find_tools`, answered by the gateway: the server's catalog ranked against the query (by
//! keyword, or fused with embeddings under hybrid ranking), after `_tool_gating` and
//! `gating.rules`; and a session's search loop (`search.memory`).

use super::{CallAnswer, Event, Exchange, Host, Settings, State, Step, Want, visible};
use crate::config::Config;
use crate::embeddings::{Fallback, Gathered, Slot, answer_vectors};
use crate::fusion::{Channel, Fused};
use crate::mcp::catalog::{Found, ServerCatalog, Tool};
use crate::mcp::gating::{self, Verdict};
use crate::pipeline::{header_safe, rank_fused_among};
use crate::search::round::{LISTED_ALREADY, SEARCHED_ALREADY, already_available};
use serde_json::{Map, Value, json};
use std::rc::Rc;

impl Exchange {
    /// Answers `find_tools` with the catalog ranked for the query, after the gating verdict.
    pub(super) fn find<H: Host>(
        &mut self,
        host: &H,
        settings: &Settings,
        catalog: &Rc<ServerCatalog>,
        verdict: Option<Verdict>,
    ) -> Step {
        let verdict = gating::merge(self.rules_verdict.take(), verdict);
        let (Some(hybrid), Some(index), Some(query)) =
            (host.hybrid(), catalog.index(), self.query())
        else {
            return self.answer_find(host, settings, catalog, verdict.as_ref(), None);
        };
        let gathered = hybrid.source.gather(index, &query);
        if let Some((q, t)) = gathered.complete() {
            // Under access rules, by the statistics of the caller's tools alone.
            let allowed = self.allowed(catalog).map(|a| catalog.entries_allowed(&a));
            let fused = rank_fused_among(index, hybrid.config, &query, &q, &t, allowed.as_deref());
            host.count(Event::RankedHybrid);
            return self.answer_find(host, settings, catalog, verdict.as_ref(), Some(&fused));
        }
        // The query's vectors, and as many of the catalog's missing tools as one call takes: a
        // big catalog is embedded over several searches, ranked by keyword until it is whole.
        let (slots, inputs) = gathered.plan(index, hybrid.embeddings.max_batch);
        let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
        let token = (!slots.is_empty())
            .then(|| host.send_embeddings(&refs))
            .flatten();
        match token {
            Some(token) => {
                host.count(Event::EmbeddingsCall(refs.len()));
                self.state = State::Embedding {
                    token,
                    catalog: Rc::clone(catalog),
                    verdict,
                    gathered,
                    slots,
                };
                Step::Wait
            }
            None => {
                host.count(Event::RankedKeyword);
                // Nothing to ask with tools still coming (a background call of this worker
                // embeds them) is no fault; nothing to ask otherwise is vectors that disagree.
                if !slots.is_empty() || gathered.tools_known() {
                    host.count(Event::Fallback(if slots.is_empty() {
                        Fallback::Dimensions
                    } else {
                        Fallback::Dispatch
                    }));
                }
                self.answer_find(host, settings, catalog, verdict.as_ref(), None)
            }
        }
    }

    /// `find_tools`'s query.
    fn query(&self) -> Option<String> {
        match &self.want {
            Some(Want::Find { query, .. }) => query.clone(),
            _ => None,
        }
    }

    /// The embeddings call answered: the fused ranking, when every vector is in.
    pub(super) fn with_vectors<H: Host>(
        &self,
        host: &H,
        catalog: &ServerCatalog,
        gathered: &mut Gathered,
        slots: &[Slot],
        answer: &CallAnswer,
    ) -> Option<Fused> {
        let (hybrid, index, query) = (host.hybrid()?, catalog.index()?, self.query()?);
        let dimensions = hybrid
            .embeddings
            .dimensions
            .or_else(|| gathered.known_dimensions());
        let vectors = answer_vectors(answer.status, &answer.body, slots.len(), dimensions);
        let fused = match vectors {
            Ok(vectors) => {
                hybrid.source.fill(index, gathered, slots, vectors);
                let allowed = self.allowed(catalog).map(|a| catalog.entries_allowed(&a));
                gathered.complete().map(|(q, t)| {
                    rank_fused_among(index, hybrid.config, &query, &q, &t, allowed.as_deref())
                })
            }
            Err(reason) => {
                host.count(Event::Fallback(reason));
                None
            }
        };
        host.count(if fused.is_some() {
            Event::RankedHybrid
        } else {
            Event::RankedKeyword
        });
        fused
    }

    /// Answers `find_tools` with the catalog ranked for the query (`fused`: with hybrid
    /// ranking's channels), after the gating verdict.
    pub(super) fn answer_find<H: Host>(
        &mut self,
        host: &H,
        settings: &Settings,
        catalog: &ServerCatalog,
        verdict: Option<&Verdict>,
        fused: Option<&Fused>,
    ) -> Step {
        host.count(Event::FindTools);
        let (query, limit) = match &self.want {
            Some(Want::Find {
                query: Some(q),
                limit,
            }) => (q.clone(), *limit),
            _ => return Step::Pass,
        };
        // Under access rules the search finds only what the caller may see, ranked by the
        // statistics of those tools alone: filtered before gating's claim and the limit.
        let allowed = self.allowed(catalog);
        let may_see = |at: usize| visible(allowed.as_deref(), at);
        let mut found = match (fused, allowed.as_deref()) {
            (Some(fused), _) => catalog.found_in(&fused.order),
            (None, Some(allowed)) => catalog.rank_among(&query, allowed),
            (None, None) => catalog.rank(&query),
        };
        found.retain(|f| may_see(f.tool));
        // Suggestions are judged by keyword (BM25), whatever ranked the search, so that one
        // `suggestions.min_score` means the same on every surface.
        let keyword_best = match fused {
            None => found.first().map(|f| f.score),
            Some(_) => catalog
                .rank(&query)
                .iter()
                .find(|f| may_see(f.tool))
                .map(|f| f.score),
        };
        let denied = allowed.as_deref().map(|a| catalog.denied(a));
        let mut gating_note = String::new();
        if let Some(verdict) = verdict {
            let before = found.len();
            found.retain(|f| {
                catalog
                    .tools
                    .get(f.tool)
                    .is_none_or(|t| !verdict.exclude.contains(&t.name))
            });
            host.count(Event::Excluded(before - found.len()));
            gating_note = format!(" gating=excluded:{}", verdict.exclude.len());
            if let Some(claim) = &verdict.claim {
                if catalog.callable(&claim.name) {
                    let claimed = catalog.position(&claim.name).filter(|&at| may_see(at));
                    if let Some(claimed) = claimed {
                        let score = found
                            .iter()
                            .find(|f| f.tool == claimed)
                            .map_or(0.0, |f| f.score);
                        let entry = found
                            .iter()
                            .find(|f| f.tool == claimed)
                            .and_then(|f| f.entry);
                        found.retain(|f| f.tool != claimed);
                        found.insert(
                            0,
                            Found {
                                tool: claimed,
                                entry,
                                score,
                            },
                        );
                        host.count(Event::Claimed);
                        gating_note.push_str(&format!(",claimed:{}", header_safe(&claim.name)));
                    }
                }
            }
        }
        found.truncate(limit);
        let matched = |f: &Found| -> Vec<&'static str> {
            match (fused, f.entry) {
                (Some(fused), Some(entry)) => fused
                    .votes_for(entry)
                    .map(|votes| {
                        Channel::ALL
                            .iter()
                            .zip(votes)
                            .filter(|(_, v)| v.is_some())
                            .map(|(c, _)| c.name())
                            .collect()
                    })
                    .unwrap_or_default(),
                _ => vec!["bm25"],
            }
        };
        let tools: Vec<Value> = found
            .iter()
            .filter_map(|f| Some(describe(catalog.tools.get(f.tool)?, f.score, &matched(f))))
            .collect();
        let found_names: Vec<&str> = found
            .iter()
            .filter_map(|f| catalog.tools.get(f.tool))
            .map(|t| t.name.as_str())
            .collect();
        let names: Vec<String> = found_names
            .iter()
            .map(|n| header_safe(n).into_owned())
            .collect();
        // Every tool found is listed to the client already (`always_include`, or found before
        // in the session): a redundant search.
        let listed = |name: &&str| {
            settings.config.always_includes(name) || self.session_tools.iter().any(|t| t == name)
        };
        let redundant = !found_names.is_empty() && found_names.iter().all(listed);
        if let Some((memory, key)) = self.memory {
            let found: Vec<String> = found_names.iter().map(|n| (*n).to_owned()).collect();
            let now = host.now_millis() / 1000;
            memory.searched(host.store(), &key, words(&query), &found, now);
        }
        let mut structured = if redundant {
            answered_already(&query, &found_names, LISTED_ALREADY)
        } else if tools.is_empty() {
            json!({"query": query, "tools": [], "note": "No tool matched; try other words."})
        } else {
            json!({"query": query, "tools": tools})
        };
        let redundant_note = if redundant {
            " note=listed_already"
        } else {
            ""
        };
        let mut suggested_note = String::new();
        let wanted = |s: &crate::suggestions::Suggestions| !redundant && s.wanted(keyword_best);
        if let Some(suggestions) = host.suggestions().filter(|s| wanted(s)) {
            let has = |name: &str| catalog.position(name).is_some();
            let suggested = suggestions.suggest(&query, has, self.head.grant.as_ref());
            if !suggested.is_empty() {
                host.count(Event::Suggested(suggested.len()));
                let names: Vec<_> = crate::suggestions::names(&suggested)
                    .into_iter()
                    .map(header_safe)
                    .collect();
                suggested_note = format!(" suggested={}", names.join(","));
                crate::suggestions::add_to(&mut structured, suggested);
            }
        }
        let result = tool_result(structured);
        self.outcome = Some(format!(
            "mcp=find_tools found={} total={}{}{gating_note}{suggested_note}{redundant_note}",
            names.join(","),
            catalog.findable(),
            self.denied_note(host, denied)
        ));
        self.result(host, result)
    }

    /// A search the session's loop answers without searching (`search.memory`): past
    /// `search.max_searches` since the session last called a real tool, an error saying the
    /// search stopped; the same words again, the first answer's tools. Notes the tools the
    /// session found before, for [`Exchange::answer_find`].
    pub(super) fn loop_answer<H: Host>(
        &mut self,
        host: &H,
        settings: &Settings,
        catalog: &ServerCatalog,
        query: &str,
    ) -> Option<Step> {
        let (memory, key) = self.memory?;
        let now = host.now_millis() / 1000;
        let session = memory.recall_session(host.store(), &key, now);
        self.session_tools = session.names;
        let searches = session.searches;
        if usize::from(searches.count) >= settings.config.search.max_searches {
            host.count(Event::FindTools);
            host.count(Event::SearchStorm);
            let text = format!(
                "The tool search stopped after {} searches: call one of the tools it found, or answer.",
                searches.count
            );
            return Some(self.tool_error(host, &text, "mcp=find_tools stopped=max_searches"));
        }
        let words = words(query);
        let allowed = self.allowed(catalog);
        let first: Vec<&str> = searches
            .answered(words)?
            .iter()
            .filter(|n| {
                catalog
                    .position(n)
                    .is_some_and(|at| visible(allowed.as_deref(), at))
            })
            .map(String::as_str)
            .collect();
        host.count(Event::FindTools);
        memory.searched(host.store(), &key, words, &[], now);
        let structured = answered_already(query, &first, SEARCHED_ALREADY);
        let names: Vec<_> = first.iter().map(|n| header_safe(n)).collect();
        self.outcome = Some(format!(
            "mcp=find_tools found={} total={} note=searched_already",
            names.join(","),
            catalog.findable()
        ));
        Some(self.result(host, tool_result(structured)))
    }

    /// The session called a real tool: its search loop ends (`search.memory`).
    pub(super) fn end_searches<H: Host>(&self, host: &H) {
        if let Some((memory, key)) = self.memory {
            memory.end_searches(host.store(), &key, host.now_millis() / 1000);
        }
    }
}

/// A `find_tools` result: `structured`, and the same as text for clients that read only text.
fn tool_result(structured: Value) -> Value {
    json!({
        "content": [{"type": "text", "text": structured.to_string()}],
        "structuredContent": structured,
        "isError": false,
    })
}

/// `find_tools`' answer naming tools the client has already (`why`: how), for `query`.
fn answered_already(query: &str, names: &[&str], why: &str) -> Value {
    let mut content = already_available(names, why);
    if let Some(object) = content.as_object_mut() {
        object.insert("query".into(), Value::String(query.to_owned()));
    }
    content
}

/// A query's words as a session's loop keeps them: the same words, the same search.
fn words(query: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(crate::text::terms(query).join(" ").as_bytes())
}

/// A found tool as `find_tools` returns it: the server's definition, its score, and a schema
/// version (a hash of the definition) in `_meta`, so a client can tell a stale cached schema.
fn describe(tool: &Tool, score: f32, matched: &[&str]) -> Value {
    let mut object = serde_json::from_str::<Map<String, Value>>(&tool.raw).unwrap_or_default();
    let version = format!("{:016x}", xxhash_rust::xxh3::xxh3_64(tool.raw.as_bytes()));
    let meta = object
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(meta) = meta.as_object_mut() {
        meta.insert("toolsift/schemaVersion".into(), Value::String(version));
    }
    // Rounded to what tells tools apart: BM25 scores are ~1-50, fused ones ~0.01-3.
    let score = (f64::from(score) * 10_000.0).round() / 10_000.0;
    object.insert("score".into(), json!(score));
    object.insert("matched".into(), json!(matched));
    Value::Object(object)
}

/// The search backends `find_tools` ranks with.
pub(super) fn backends(config: &Config) -> (&'static str, Value) {
    match config.ranking {
        crate::config::Ranking::Keyword => ("keyword (BM25)", json!(["keyword"])),
        crate::config::Ranking::Hybrid => (
            "keyword (BM25) and embeddings, fused (hybrid)",
            json!(["keyword", "embeddings"]),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::exchange::MODERN_REVISION;
    use crate::mcp::exchange::testing::*;

    #[test]
    fn find_tools_ranks_the_whole_catalog() {
        let mut s = Setup::new(r#"{"mcp":{}}"#);
        let host = Mock::default();
        let body = call(
            2,
            "find_tools",
            r#"{"query":"what's the weather in Paris","limit":1}"#,
        );
        let (exchange, step) = s.run(&host, MODERN_REVISION, &body, &[catalog_tools()]);
        assert_eq!(step, Step::Answered);
        let (status, answer) = host.answer();
        assert_eq!(status, 200);
        let result = &answer["result"];
        assert_eq!(result["resultType"], "complete");
        let found = result["structuredContent"]["tools"].as_array().unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0]["name"], "get_weather");
        assert_eq!(found[0]["inputSchema"]["type"], "object");
        assert!(found[0]["score"].as_f64().unwrap() > 0.0);
        assert_eq!(found[0]["matched"], json!(["bm25"]));
        assert_eq!(
            found[0]["_meta"]["toolsift/schemaVersion"]
                .as_str()
                .unwrap()
                .len(),
            16
        );
        let text: Value =
            serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(text, result["structuredContent"]);
        assert_eq!(
            exchange.header_value(),
            Some("mcp=find_tools found=get_weather total=5")
        );
    }

    #[test]
    fn a_find_tools_that_finds_nothing_good_gets_suggestions_never_callable() {
        let config = r#"{"mcp":{},"suggestions":{"min_score":100,"tools":[
            {"name":"book_meeting_room","description":"Book a meeting room for a team","source":"the calendar server"},
            {"name":"get_weather","description":"the server has it: never suggested"}]}}"#;
        let mut s = Setup::new(config);
        let engine = crate::pipeline::Engine::new(s.config.clone());
        let host = Mock {
            suggestions: engine.suggestions().cloned(),
            ..Mock::default()
        };
        let body = call(
            2,
            "find_tools",
            r#"{"query":"book a room for the weather team"}"#,
        );
        let (exchange, step) = s.run(&host, MODERN_REVISION, &body, &[catalog_tools()]);
        assert_eq!(step, Step::Answered);
        let result = &host.answer().1["result"]["structuredContent"];
        assert_eq!(result["tools"][0]["name"], "get_weather", "{result}");
        let suggested = result["suggestions"].as_array().unwrap();
        assert_eq!(suggested.len(), 1, "{result}");
        assert_eq!(suggested[0]["name"], "book_meeting_room");
        assert_eq!(suggested[0]["suggested"], true);
        assert_eq!(suggested[0]["source"], "the calendar server");
        assert!(suggested[0].get("inputSchema").is_none());
        assert!(host.events.borrow().contains(&Event::Suggested(1)));
        assert!(
            exchange
                .header_value()
                .unwrap()
                .ends_with(" suggested=book_meeting_room")
        );
        // Calling a suggestion is calling a tool the server did not list: never sent.
        let sent = host.sent.borrow().len();
        let body = call(3, "book_meeting_room", "{}");
        s.run(&host, MODERN_REVISION, &body, &[catalog_tools()]);
        assert_eq!(host.sent.borrow().len(), sent, "the server never sees it");
        assert!(
            host.answer().1["error"]["message"]
                .as_str()
                .unwrap()
                .contains("find_tools")
        );
        // A good match scores above min_score: no suggestions.
        let mut s = Setup::new(&config.replace(r#""min_score":100"#, r#""min_score":0.1"#));
        let host = Mock {
            suggestions: crate::pipeline::Engine::new(s.config.clone())
                .suggestions()
                .cloned(),
            ..Mock::default()
        };
        let body = call(
            2,
            "find_tools",
            r#"{"query":"book a room for the weather team"}"#,
        );
        s.run(&host, MODERN_REVISION, &body, &[catalog_tools()]);
        assert!(
            host.answer().1["result"]["structuredContent"]
                .get("suggestions")
                .is_none()
        );
    }

    #[test]
    fn find_tools_without_a_query_is_an_error_result_never_the_catalog() {
        let mut s = Setup::new(r#"{"mcp":{}}"#);
        for args in [r#"{}"#, r#"{"query":"  "}"#, r#"{"query":5}"#] {
            let host = Mock::default();
            let (_, step) = s.run(
                &host,
                "2025-11-25",
                &call(3, "find_tools", args),
                &[catalog_tools()],
            );
            assert_eq!(step, Step::Answered);
            let (_, answer) = host.answer();
            assert_eq!(answer["result"]["isError"], true, "{args}");
            assert!(answer["result"].get("structuredContent").is_none());
        }
    }

    #[test]
    fn gating_rules_exclude_and_claim_in_find_tools() {
        // The configuration's own gating, no server tool: the same effect as a server's verdict.
        let mut s = Setup::new(
            r#"{"mcp":{},"gating":{"rules":[
                {"when":{"words":["weather"]},"exclude":["get_weather*"]},
                {"when":{"regex":"(?i)alerts?"},"claim":"send_email"}]}}"#,
        );
        let host = Mock::default();
        let body = call(9, "find_tools", r#"{"query":"weather alerts"}"#);
        let (exchange, step) = s.run(&host, "2025-11-25", &body, &[catalog_tools()]);
        assert_eq!(step, Step::Answered);
        let names: Vec<String> = host.answer().1["result"]["structuredContent"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(names, ["send_email", "weather_alerts"]);
        let header = exchange.header_value().unwrap();
        assert!(
            header.ends_with("gating=excluded:1,claimed:send_email"),
            "{header}"
        );
        assert!(host.events.borrow().contains(&Event::Excluded(1)));
        // No call was made for the verdict: only the catalog's pages went to the server.
        assert!(only_lists_sent(&host));
    }

    #[test]
    fn gating_excludes_and_claims() {
        let mut s = Setup::new(r#"{"mcp":{"gating_timeout_ms":250}}"#);
        let mut tools = catalog_tools();
        tools.push(
            r#"{"name":"_tool_gating","inputSchema":{"type":"object","properties":{"message":{"type":"string"}},"required":["message"]}}"#
                .to_owned(),
        );
        let body = call(9, "find_tools", r#"{"query":"weather alerts"}"#);
        let verdict = |answer: &str| {
            sse(&[format!(
                r#"{{"jsonrpc":"2.0","id":7400000999,"result":{answer}}}"#
            )])
        };
        let run = |s: &mut Setup, answer: CallAnswer| {
            let host = Mock::default();
            let (mut exchange, step) = s.run(&host, "2025-11-25", &body, &[tools.clone()]);
            assert_eq!(step, Step::Wait);
            let sent = host.sent.borrow().last().cloned().unwrap();
            assert_eq!((sent.2.as_deref(), sent.3), (Some("_tool_gating"), 250));
            let gating: Value = serde_json::from_str(&sent.0).unwrap();
            assert_eq!(
                gating["params"]["arguments"],
                json!({"message": "weather alerts"})
            );
            let token = exchange.token().unwrap();
            let settings = Settings {
                config: &s.config,
                mcp: &s.mcp,
                gating: None,
            };
            let step = exchange.on_call(&host, &mut s.cache, &settings, token, answer);
            assert_eq!(step, Step::Answered);
            let names: Vec<String> = host.answer().1["result"]["structuredContent"]["tools"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["name"].as_str().unwrap().to_owned())
                .collect();
            (
                names,
                exchange.header_value().unwrap().to_owned(),
                host.events.borrow().clone(),
            )
        };
        let (plain, _, _) = run(&mut s, verdict(r#"{"structuredContent":{}}"#));
        assert_eq!(plain, ["weather_alerts", "get_weather"]);
        let (names, header, events) = run(
            &mut s,
            verdict(r#"{"structuredContent":{"exclude":["get_weather"],"claim":"send_email"}}"#),
        );
        assert_eq!(names, ["send_email", "weather_alerts"]);
        assert!(
            header.ends_with("gating=excluded:1,claimed:send_email"),
            "{header}"
        );
        assert!(events.contains(&Event::Claimed) && events.contains(&Event::Excluded(1)));
        // Fail-open: no answer, an error, garbage.
        for answer in [
            CallAnswer::default(),
            verdict(r#"{"isError":true,"structuredContent":{"exclude":["weather_alerts"]}}"#),
            CallAnswer {
                status: Some(500),
                ..verdict(r#"{"structuredContent":{"exclude":["weather_alerts"]}}"#)
            },
            sse(&["not json".into()]),
        ] {
            let (names, _, events) = run(&mut s, answer);
            assert_eq!(names, plain);
            assert!(events.contains(&Event::GatingFailed));
        }
    }

    /// A vector for `text`: a hashed bag of its words (texts that share words are near).
    fn bag(text: &str) -> Vec<f32> {
        let mut v = vec![0.0f32; 16];
        for word in text
            .to_lowercase()
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
        {
            let h = xxhash_rust::xxh3::xxh3_64(word.as_bytes()) as usize;
            v[h % 16] += 1.0;
        }
        v[0] += 0.01;
        v
    }

    #[test]
    fn hybrid_ranking_embeds_the_catalog_and_fuses_the_channels() {
        let config = Config::from_json(
            br#"{"ranking":"hybrid","embeddings":{"cluster":"e","model":"m","max_batch":3},"mcp":{}}"#,
        )
        .unwrap();
        let embeddings = config.embeddings.clone().unwrap();
        let mut s = Setup::new(r#"{"mcp":{}}"#);
        s.config = config.clone();
        let cache = crate::embeddings::VectorCache::new(
            crate::embeddings::MemoryBytes::default(),
            100,
            "v.",
        );
        let host = Mock {
            vectors: Some((cache, embeddings, config)),
            ..Mock::default()
        };
        let body = call(
            2,
            "find_tools",
            r#"{"query":"storm warnings for my region"}"#,
        );
        let answer_embeddings = |inputs: &[String]| {
            CallAnswer {
            status: Some(200),
            content_type: "application/json".into(),
            body: json!({"data": inputs.iter().enumerate().map(|(i, t)| json!({"index": i, "embedding": bag(t)})).collect::<Vec<_>>()})
                .to_string()
                .into_bytes(),
        }
        };
        // Five tools, three per call: the first search embeds the query and three tools, and goes
        // by keyword; the second embeds the rest and is fused.
        let mut rounds = Vec::new();
        for _ in 0..3 {
            let (mut exchange, step) = s.run(&host, "2025-11-25", &body, &[catalog_tools()]);
            if step == Step::Wait {
                let inputs = host.embedded.borrow().last().cloned().unwrap();
                let token = exchange.token().unwrap();
                let settings = Settings {
                    config: &s.config,
                    mcp: &s.mcp,
                    gating: None,
                };
                let step = exchange.on_call(
                    &host,
                    &mut s.cache,
                    &settings,
                    token,
                    answer_embeddings(&inputs),
                );
                assert_eq!(step, Step::Answered);
            }
            let found = host.answer().1["result"]["structuredContent"]["tools"].clone();
            rounds.push(found);
        }
        let calls = host.embedded.borrow().clone();
        assert_eq!(calls.len(), 2, "{calls:?}");
        assert_eq!(calls[0].len(), 4, "the query and max_batch tools");
        assert_eq!(calls[1].len(), 2, "the last two tools");
        assert_eq!(
            rounds[0][0]["matched"],
            json!(["bm25"]),
            "keyword while incomplete"
        );
        let matched = rounds[1][0]["matched"].as_array().unwrap();
        assert!(matched.contains(&json!("vector")), "{matched:?}");
        assert_eq!(rounds[1], rounds[2], "the third search needs no call");
        assert!(host.events.borrow().contains(&Event::RankedHybrid));
        // A failing service: by keyword.
        let (mut exchange, _) = s.run(
            &host,
            "2025-11-25",
            &call(3, "find_tools", r#"{"query":"new words entirely"}"#),
            &[],
        );
        let token = exchange.token().unwrap();
        let settings = Settings {
            config: &s.config,
            mcp: &s.mcp,
            gating: None,
        };
        let step = exchange.on_call(
            &host,
            &mut s.cache,
            &settings,
            token,
            CallAnswer {
                status: Some(503),
                ..CallAnswer::default()
            },
        );
        assert_eq!(step, Step::Answered);
        assert!(
            host.events
                .borrow()
                .contains(&Event::Fallback(Fallback::Status))
        );
    }

    #[test]
    fn find_tools_finds_only_allowed_tools_before_the_limit() {
        for revision in REVISIONS {
            let mut s = setup("hidden");
            let host = Mock::default();
            let body = call(
                2,
                "find_tools",
                r#"{"query":"what's the current weather in Paris","limit":1}"#,
            );
            // Without rules for it, get_weather would come first. It is pinned: listed already.
            let (exchange, _) = s.run_as(&host, revision, &["a"], &body);
            let found = &host.answer().1["result"]["structuredContent"]["tools"];
            assert_eq!(names(found), ["get_weather"]);
            assert_eq!(
                exchange.header_value(),
                Some("mcp=find_tools found=get_weather total=7 denied=4 note=listed_already")
            );
            // Team b may have no weather tool: the limit is filled from what it may see, or the
            // search finds nothing; never a weather tool.
            let body = call(3, "find_tools", r#"{"query":"weather","limit":5}"#);
            let (exchange, _) = s.run_as(&host, revision, &["b"], &body);
            let found = names(&host.answer().1["result"]["structuredContent"]["tools"]);
            assert!(found.is_empty(), "{found:?}");
            assert_eq!(
                exchange.header_value(),
                Some("mcp=find_tools found= total=7 denied=5")
            );
            // A search for a denied tool by its own words finds the allowed ones only.
            let body = call(
                4,
                "find_tools",
                r#"{"query":"read a record then delete it"}"#,
            );
            s.run_as(&host, revision, &["a"], &body);
            let found = names(&host.answer().1["result"]["structuredContent"]["tools"]);
            assert!(!found.contains(&"get_then_delete".to_owned()), "{found:?}");
            assert!(only_lists_sent(&host));
        }
    }

    #[test]
    fn gating_claims_and_the_gating_tool_follow_the_rules() {
        let gating = r#"{"name":"_tool_gating","inputSchema":{"type":"object","properties":{"query":{"type":"string"}},"required":["query"]}}"#;
        let mut tools = governed_tools();
        tools.push(gating.to_owned());
        let body = call(9, "find_tools", r#"{"query":"weather alerts"}"#);
        // Team a may call the gating tool; its claim of a tool team a may not see is dropped.
        let config = r#"{"mcp":{},"access":{"identity":[{"header":"x-team"}],"rules":[
            {"when":["a"],"allow":["weather_*","get_*","_tool_gating"]},
            {"when":["b"],"allow":["weather_*","get_*"]}]}}"#;
        let mut s = Setup::new(config);
        let host = Mock::default();
        let head = s.head("2025-11-25", &["a"]);
        let (mut exchange, step) = s.run_head(&host, head, &body, &[tools.clone()]);
        assert_eq!(step, Step::Wait, "the gating tool is called");
        let verdict = sse(&[
            r#"{"jsonrpc":"2.0","id":7400000999,"result":{"structuredContent":{"claim":"send_email"}}}"#
                .to_owned(),
        ]);
        let token = exchange.token().unwrap();
        let settings = Settings {
            config: &s.config,
            mcp: &s.mcp,
            gating: None,
        };
        assert_eq!(
            exchange.on_call(&host, &mut s.cache, &settings, token, verdict),
            Step::Answered
        );
        let found = names(&host.answer().1["result"]["structuredContent"]["tools"]);
        assert_eq!(found[0], "weather_alerts", "{found:?}");
        assert!(!found.contains(&"send_email".to_owned()));
        assert!(!exchange.header_value().unwrap().contains("claimed"));
        // Team b may not call it: the search goes on without it.
        let host = Mock::default();
        let head = s.head("2025-11-25", &["b"]);
        let (_, step) = s.run_head(&host, head, &body, &[tools]);
        assert_eq!(step, Step::Answered);
        assert!(only_lists_sent(&host), "no gating call");
        let found = names(&host.answer().1["result"]["structuredContent"]["tools"]);
        assert_eq!(found[0], "weather_alerts", "{found:?}");
    }

    #[test]
    fn a_repeated_or_redundant_search_is_told_what_the_client_has() {
        let mut s = Setup::new(MEMORY);
        let host = Mock::default();
        let tools = [catalog_tools()];
        let head = || in_session("2025-11-25", Some("s1"));
        s.run_head(&host, head(), &find(2, "weather in Paris"), &tools);
        assert_eq!(names(&structured(&host)["tools"]), ["get_weather"]);
        // The same words (in another case, with a mark): the first answer, without a search.
        let (exchange, _) = s.run_head(&host, head(), &find(3, "Weather in PARIS!"), &tools);
        let answer = structured(&host);
        assert_eq!(names(&answer["tools"]), ["get_weather"]);
        assert_eq!(answer["query"], "Weather in PARIS!");
        assert!(
            answer["note"]
                .as_str()
                .unwrap()
                .starts_with("You searched for this already: call one of them"),
            "{answer}"
        );
        assert_eq!(
            exchange.header_value(),
            Some("mcp=find_tools found=get_weather total=5 note=searched_already")
        );
        // Other words whose tools the session found already.
        let (exchange, _) = s.run_head(
            &host,
            head(),
            &find(4, "current weather for a city"),
            &tools,
        );
        let answer = structured(&host);
        assert_eq!(names(&answer["tools"]), ["get_weather"]);
        assert!(answer["note"].as_str().unwrap().starts_with(LISTED_ALREADY));
        assert!(answer["tools"][0].get("inputSchema").is_none());
        assert_eq!(
            exchange.header_value(),
            Some("mcp=find_tools found=get_weather total=5 note=listed_already")
        );
        // Without a session, only the stateless part: a pinned tool is listed already.
        let (_, _) = s.run_head(
            &host,
            in_session("2025-11-25", None),
            &find(5, "list the files in a directory"),
            &tools,
        );
        let answer = structured(&host);
        assert_eq!(names(&answer["tools"]), ["list_files"]);
        assert!(answer["note"].as_str().unwrap().starts_with(LISTED_ALREADY));
        s.run_head(
            &host,
            in_session("2025-11-25", None),
            &find(6, "weather in Paris"),
            &tools,
        );
        assert!(structured(&host)["tools"][0].get("inputSchema").is_some());
    }

    #[test]
    fn a_search_storm_ends_with_an_error_until_a_real_tool_is_called() {
        let mut s = Setup::new(r#"{"mcp":{},"search":{"max_searches":2,"memory":{}}}"#);
        let host = Mock::default();
        let tools = [catalog_tools()];
        let head = || in_session("2025-11-25", Some("s1"));
        s.run_head(&host, head(), &find(2, "weather in Paris"), &tools);
        s.run_head(&host, head(), &find(3, "weather in Paris"), &tools);
        let (exchange, _) = s.run_head(&host, head(), &find(4, "send an email"), &tools);
        let (status, answer) = host.answer();
        assert_eq!(status, 200);
        assert_eq!(answer["result"]["isError"], true);
        assert_eq!(
            answer["result"]["content"][0]["text"],
            "The tool search stopped after 2 searches: call one of the tools it found, or answer."
        );
        assert_eq!(
            exchange.header_value(),
            Some("mcp=find_tools stopped=max_searches")
        );
        assert!(host.events.borrow().contains(&Event::SearchStorm));
        // Another session searches on.
        s.run_head(
            &host,
            in_session("2025-11-25", Some("s2")),
            &find(5, "send an email"),
            &tools,
        );
        assert_eq!(names(&structured(&host)["tools"]), ["send_email"]);
        // A call of a real tool ends the loop: the session searches again.
        let (_, step) = s.run_head(&host, head(), &call(6, "get_weather", "{}"), &tools);
        assert_eq!(step, Step::Pass);
        s.run_head(&host, head(), &find(7, "send an email"), &tools);
        assert_eq!(names(&structured(&host)["tools"]), ["send_email"]);
        // As does call_tool.
        s.run_head(&host, head(), &find(8, "create an issue"), &tools);
        s.run_head(&host, head(), &find(9, "list files"), &tools);
        assert_eq!(host.answer().1["result"]["isError"], true);
        let sent = host.sent.borrow().len();
        s.run_head(
            &host,
            head(),
            &call(10, "call_tool", r#"{"name":"list_files","arguments":{}}"#),
            &tools,
        );
        assert_eq!(host.sent.borrow().len(), sent + 1, "the call went out");
        s.run_head(&host, head(), &find(11, "list files"), &tools);
        assert_eq!(names(&structured(&host)["tools"]), ["list_files"]);
    }
}
