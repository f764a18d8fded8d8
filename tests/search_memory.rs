//! Search mode's memory of found tools (`search.memory`) in the real Envoy: a session's second
//! turn sees the tools its first turn found, without another search, in every dialect; the
//! memory expires, stays within its bytes, and never crosses sessions, credentials or callers.
//! And the shipped front Envoy (docs/examples/affinity/front.yaml) keeps a session on one of
//! two gateway replicas; stopping that replica loses only the memory.

use crate::common;

use common::llm::{called, request, tool_names, upstream_log};
use common::{Gateway, Response, http, repo};
use serde_json::{Value, json};

const WANT: &str = "get_current_weather";
/// Pinned: shown first, before anything memory offers.
const PINNED: &str = "list_slack_channels";

fn start(memory: Value, extra: Value) -> Gateway {
    Gateway::start(&config(memory, extra))
}

fn config(memory: Value, extra: Value) -> String {
    let mut c = json!({"mode": "search", "min_tools": 20, "always_include": [PINNED],
        "search": {"memory": memory}});
    for (k, v) in extra.as_object().unwrap() {
        c[k] = v.clone();
    }
    c.to_string()
}

/// Where a turn names its session.
#[derive(Clone, Copy)]
enum Session<'a> {
    /// The `x-session-id` header.
    Header(&'a str),
    /// The dialect's own field in the body.
    Field(&'a str),
}

/// One turn: the response, and what the upstream received for it.
struct Turn {
    response: Response,
    log: Vec<Value>,
}

impl Turn {
    /// The function tools the model saw on its first round.
    fn seen(&self, dialect: &str) -> Vec<String> {
        tool_names(dialect, &self.log[0]["body"])
    }

    fn toolsift(&self) -> &str {
        self.response.header("x-toolsift").unwrap_or_default()
    }
}

/// `dialect`'s request naming `session`, sent with `extra` headers to `port` (the gateway or
/// the front Envoy), as the scripted model wanting `WANT`; the upstream log is `upstream`'s.
fn send(
    port: u16,
    dialect: &str,
    stream: bool,
    session: Session<'_>,
    extra: &[(&str, &str)],
) -> Response {
    let (path, mut body) = request(dialect, stream);
    let mut headers = vec![
        ("content-type", "application/json"),
        ("x-demo-model", "scripted"),
        ("x-demo-want", WANT),
        ("authorization", "Bearer key-1"),
    ];
    match session {
        Session::Header(id) => headers.push(("x-session-id", id)),
        Session::Field(id) => match dialect {
            "openai_chat" => body["prompt_cache_key"] = json!(id),
            "openai_responses" => body["safety_identifier"] = json!(id),
            "anthropic" => body["metadata"] = json!({"user_id": id}),
            other => panic!("{other} has no session field"),
        },
    }
    for (name, value) in extra {
        headers.retain(|(n, _)| n != name);
        headers.push((name, value));
    }
    http(port, "POST", &path, &headers, body.to_string().as_bytes())
}

fn turn(gw: &Gateway, dialect: &str, session: Session<'_>, extra: &[(&str, &str)]) -> Turn {
    turn_streamed(gw, dialect, false, session, extra)
}

fn turn_streamed(
    gw: &Gateway,
    dialect: &str,
    stream: bool,
    session: Session<'_>,
    extra: &[(&str, &str)],
) -> Turn {
    http(gw.upstream.port, "POST", "/scripted/log/reset", &[], b"");
    let response = send(gw.port, dialect, stream, session, extra);
    assert_eq!(response.status, 200, "{dialect}: {}", response.text());
    assert!(
        called(dialect, &response).contains(&WANT.to_owned()),
        "{dialect}: {}",
        response.text()
    );
    Turn {
        response,
        log: upstream_log(gw),
    }
}

/// The tools a turn's search found: what its follow-up added to the first request's tools.
fn found(dialect: &str, first: &Turn) -> Vec<String> {
    assert_eq!(first.log.len(), 2, "{dialect}: a request and a follow-up");
    let before = first.seen(dialect);
    let after = tool_names(dialect, &first.log[1]["body"]);
    after[before.len()..].to_vec()
}

/// A session's second turn, in `dialect`, with the session where `session` puts it.
fn second_turn_remembers(
    dialect: &str,
    session: fn(&'static str) -> Session<'static>,
    stream: bool,
) {
    let gw = start(json!({"session": {"header": "x-session-id"}}), json!({}));
    let first = turn_streamed(&gw, dialect, stream, session("s-1"), &[]);
    assert_eq!(first.seen(dialect), ["find_tools", PINNED], "{dialect}");
    assert!(!first.toolsift().contains("remembered="), "{dialect}");
    let found = found(dialect, &first);
    assert!(found.contains(&WANT.to_owned()), "{dialect}: {found:?}");

    let second = turn_streamed(&gw, dialect, stream, session("s-1"), &[]);
    assert_eq!(second.log.len(), 1, "{dialect}: no search this time");
    // The meta-tool, the pinned tool, then what the session found, in the order found: the
    // tools array the first turn's follow-up had, so the provider's prompt cache holds.
    assert_eq!(
        second.seen(dialect),
        tool_names(dialect, &first.log[1]["body"]),
        "{dialect}"
    );
    assert!(
        second
            .toolsift()
            .ends_with(&format!("search=search remembered={}", found.join(","))),
        "{dialect}: {}",
        second.toolsift()
    );
    assert_eq!(gw.stat("toolsift.search.remembered"), found.len() as u64);
    assert_eq!(gw.stat("toolsift.search.rounds"), 1);

    // Another session of the same client: nothing remembered.
    let other = turn_streamed(&gw, dialect, stream, session("s-2"), &[]);
    assert_eq!(other.log.len(), 2, "{dialect}: searched");
    // The same session name with other credentials: another tenant's, nothing remembered.
    let stranger = turn_streamed(
        &gw,
        dialect,
        stream,
        session("s-1"),
        &[("authorization", "Bearer key-2")],
    );
    assert_eq!(stranger.log.len(), 2, "{dialect}: searched");
    assert!(!gw.log_text().contains("panicked"));
}

#[test]
fn openai_chat_remembers_by_prompt_cache_key_and_by_header() {
    second_turn_remembers("openai_chat", Session::Field, false);
    second_turn_remembers("openai_chat", Session::Header, true);
}

#[test]
fn openai_responses_remembers_by_safety_identifier() {
    second_turn_remembers("openai_responses", Session::Field, false);
}

#[test]
fn anthropic_remembers_by_metadata_user_id() {
    second_turn_remembers("anthropic", Session::Field, false);
    second_turn_remembers("anthropic", Session::Field, true);
}

#[test]
fn gemini_remembers_by_header() {
    second_turn_remembers("gemini", Session::Header, false);
}

#[test]
fn bedrock_remembers_by_header() {
    second_turn_remembers("bedrock", Session::Header, false);
}

#[test]
fn ollama_remembers_by_header() {
    second_turn_remembers("ollama", Session::Header, false);
}

#[test]
fn the_header_wins_and_provider_fields_can_be_turned_off() {
    let gw = start(
        json!({"session": {"header": "x-session-id", "provider_fields": false}}),
        json!({}),
    );
    let first = turn(&gw, "openai_chat", Session::Field("s-1"), &[]);
    assert_eq!(first.log.len(), 2);
    let again = turn(&gw, "openai_chat", Session::Field("s-1"), &[]);
    assert_eq!(again.log.len(), 2, "the body's field names no session here");
    turn(&gw, "openai_chat", Session::Header("h-1"), &[]);
    let by_header = turn(&gw, "openai_chat", Session::Header("h-1"), &[]);
    assert_eq!(by_header.log.len(), 1);
}

#[test]
fn callers_never_share_a_memory() {
    // Under access rules the caller's identity keys the memory too, whatever the session is
    // called and whichever credentials the requests carry.
    let access = json!({"access": {"identity": [{"header": "x-tenant"}], "default": "allow",
        "rules": [{"when": ["*"], "deny": ["send_email"]}]}});
    let gw = start(json!({"session": {"header": "x-session-id"}}), access);
    let acme = [("x-tenant", "acme")];
    turn(&gw, "openai_chat", Session::Header("s-1"), &acme);
    let beta = turn(
        &gw,
        "openai_chat",
        Session::Header("s-1"),
        &[("x-tenant", "beta")],
    );
    assert_eq!(beta.log.len(), 2, "searched");
    assert!(!beta.toolsift().contains("remembered="));
    let acme_again = turn(&gw, "openai_chat", Session::Header("s-1"), &acme);
    assert_eq!(acme_again.log.len(), 1);
    assert!(acme_again.toolsift().contains("remembered="));
}

#[test]
fn a_session_is_forgotten_ttl_seconds_after_its_last_turn() {
    let gw = start(
        json!({"session": {"header": "x-session-id"}, "ttl_seconds": 3}),
        json!({}),
    );
    turn(&gw, "anthropic", Session::Header("s-1"), &[]);
    std::thread::sleep(std::time::Duration::from_millis(1200));
    // Used again within the TTL (whole seconds: 3 s is 2 to 3): it lasts from here.
    assert_eq!(
        turn(&gw, "anthropic", Session::Header("s-1"), &[])
            .log
            .len(),
        1
    );
    std::thread::sleep(std::time::Duration::from_millis(1200));
    assert_eq!(
        turn(&gw, "anthropic", Session::Header("s-1"), &[])
            .log
            .len(),
        1
    );
    std::thread::sleep(std::time::Duration::from_millis(4200));
    let late = turn(&gw, "anthropic", Session::Header("s-1"), &[]);
    assert_eq!(late.log.len(), 2, "expired: searched again");
    assert!(!late.toolsift().contains("remembered="));
}

#[test]
fn the_memory_stays_within_max_bytes_and_drops_the_least_recently_used() {
    // 1 KiB: one set; each session's five finds take about 110 bytes.
    let gw = start(
        json!({"session": {"header": "x-session-id"}, "max_bytes": 1024}),
        json!({}),
    );
    let sessions: Vec<String> = (0..12).map(|i| format!("session-{i}")).collect();
    for s in &sessions {
        turn(&gw, "openai_chat", Session::Header(s), &[]);
    }
    // The oldest sessions made room for the newer ones; the newest is remembered.
    let newest = turn(&gw, "openai_chat", Session::Header(&sessions[11]), &[]);
    assert_eq!(newest.log.len(), 1);
    let oldest = turn(&gw, "openai_chat", Session::Header(&sessions[0]), &[]);
    assert_eq!(oldest.log.len(), 2, "evicted: searched again");
}

/// The shipped front Envoy with its listener, admin and replica ports replaced.
fn front_yaml(listener: u16, admin: u16, replicas: [u16; 2]) -> String {
    let yaml = std::fs::read_to_string(repo().join("docs/examples/affinity/front.yaml")).unwrap();
    yaml.replace("port_value: 10000", &format!("port_value: {listener}"))
        .replace("port_value: 9900", &format!("port_value: {admin}"))
        .replace("port_value: 10001", &format!("port_value: {}", replicas[0]))
        .replace("port_value: 10002", &format!("port_value: {}", replicas[1]))
}

#[test]
fn the_front_envoy_keeps_a_session_on_its_replica_and_losing_it_loses_only_memory() {
    let memory = json!({"session": {"header": "x-session-id"}});
    // Replicas of their own: one goes away below, as a process does (its connections reset),
    // not as a listener does (drained, its kept-alive connections still answered).
    let mut replicas: Vec<Option<Gateway>> = (0..2)
        .map(|_| Some(Gateway::start_alone(&config(memory.clone(), json!({})))))
        .collect();
    let ports = [
        replicas[0].as_ref().unwrap().port,
        replicas[1].as_ref().unwrap().port,
    ];
    let front = Gateway::start_rendered(&[], |p| front_yaml(p.listener, p.admin, ports));
    // Which replica's upstream saw a turn, and how many requests.
    let through_front = |session: &str, replicas: &[Option<Gateway>]| -> (usize, Turn) {
        for gw in replicas.iter().flatten() {
            http(gw.upstream.port, "POST", "/scripted/log/reset", &[], b"");
        }
        let response = send(
            front.port,
            "openai_chat",
            false,
            Session::Header(session),
            &[],
        );
        assert_eq!(response.status, 200, "{}", response.text());
        assert!(called("openai_chat", &response).contains(&WANT.to_owned()));
        let served: Vec<(usize, Vec<Value>)> = replicas
            .iter()
            .enumerate()
            .filter_map(|(i, gw)| Some((i, upstream_log(gw.as_ref()?))))
            .filter(|(_, log)| !log.is_empty())
            .collect();
        assert_eq!(served.len(), 1, "one replica served the turn");
        let (i, log) = served.into_iter().next().unwrap();
        (i, Turn { response, log })
    };
    // Every session's turns land on one replica, and its second turn is remembered; the
    // sessions spread over both replicas. Where a session lands is the ring hash's choice, and
    // the replicas' places on the ring follow their ports, drawn anew each run: sessions are
    // added until both replicas have one (8 all on one replica happened about once in 128 runs).
    let mut sessions: Vec<String> = Vec::new();
    let mut home = Vec::new();
    while sessions.len() < 8 || !(home.contains(&0) && home.contains(&1)) {
        assert!(
            sessions.len() < 40,
            "the ring hash sent 40 sessions to one replica: {home:?}"
        );
        sessions.push(format!("agent-{}", sessions.len()));
        let s = sessions.last().unwrap();
        let (first, t1) = through_front(s, &replicas);
        assert_eq!(t1.log.len(), 2, "{s}: searched");
        let (second, t2) = through_front(s, &replicas);
        assert_eq!(second, first, "{s}: the same replica");
        assert_eq!(t2.log.len(), 1, "{s}: remembered");
        assert!(t2.toolsift().contains("remembered="), "{}", t2.toolsift());
        home.push(first);
    }
    assert!(home.contains(&0) && home.contains(&1), "{home:?}");

    // The replica of agent-0 goes away: its next turn is served by the other one, which has
    // no memory of it and searches; the turn after is remembered there.
    let gone = home[0];
    drop(replicas[gone].take());
    let (now, t3) = through_front(&sessions[0], &replicas);
    assert_ne!(now, gone);
    assert_eq!(t3.log.len(), 2, "searched again");
    assert!(!t3.toolsift().contains("remembered="));
    let (after, t4) = through_front(&sessions[0], &replicas);
    assert_eq!(after, now);
    assert_eq!(t4.log.len(), 1, "remembered on the new replica");
    // Sessions of the replica still up kept their memory.
    if let Some(kept) = sessions.iter().zip(&home).find(|(_, h)| **h != gone) {
        let (_, t) = through_front(kept.0, &replicas);
        assert_eq!(t.log.len(), 1, "{}: still remembered", kept.0);
    }
}
