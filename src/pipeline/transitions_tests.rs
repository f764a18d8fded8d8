//! The transitions' channel in the pipeline: a later turn keeps the tool the fleet called next
//! after its history's calls; a first turn, a weight of 0 and a denied tool are as without it.

use super::*;

/// Matched by none of the later turn's words, `diff_files` comes last.
const TOOLS: [(&str, &str); 12] = [
    ("list_directory", "List the entries of a folder"),
    ("create_backup", "Create a backup copy of a folder"),
    ("restore_backup", "Restore a folder from its backup copy"),
    ("delete_file", "Delete a file"),
    ("move_file", "Move a file to another folder"),
    ("send_email", "Send an email message"),
    ("get_weather", "Current weather for a city"),
    ("search_web", "Search the web for pages"),
    ("translate_text", "Translate text into another language"),
    ("create_issue", "Open an issue in a repository"),
    ("read_file", "Print the contents of a file"),
    (
        "diff_files",
        "Show the differences between two files line by line",
    ),
];

/// An OpenAI Chat body: `history` (when true) is a first turn that called `list_directory`.
fn body(question: &str, history: bool) -> String {
    let tools: Vec<String> = TOOLS
        .iter()
        .map(|(name, description)| {
            format!(
                r#"{{"type":"function","function":{{"name":"{name}","description":"{description}","parameters":{{"type":"object","properties":{{}}}}}}}}"#
            )
        })
        .collect();
    let earlier = if history {
        r#"{"role":"user","content":"what is in the project folder?"},
           {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function",
             "function":{"name":"list_directory","arguments":"{}"}}]},
           {"role":"tool","tool_call_id":"c1","content":"a.txt backup/"},"#
    } else {
        ""
    };
    format!(
        r#"{{"model":"gpt","messages":[{earlier}{{"role":"user","content":"{question}"}}],"tools":[{}]}}"#,
        tools.join(",")
    )
}

/// A configuration with `auto_k` and a calibration whose transitions are `pooled`, the
/// channel weighted `weight`, and `extra` sections.
fn engine(pooled: &str, weight: f32, extra: &str) -> Engine {
    let json = format!(
        r#"{{"min_tools":3,"channel_weights":{{"transitions":{weight}}},
            "shadow":{{"sample":0.1}},
            "auto_k":{{"keep":0.95,"max_k":8,"calibration":{{"version":1,"max_k":8,
              "pooled":{{"calls":40,"slots":[[1,30],[2,10]]}},
              "transitions":{{"pooled":{pooled}}}}}}}{extra}}}"#
    );
    Engine::new(Config::from_json(json.as_bytes()).unwrap())
}

const LEARNED: &str = r#"[["list_directory","rm_everything",50],["list_directory","diff_files",9],
    ["send_email","get_weather",4]]"#;

fn kept(engine: &mut Engine, body: &str) -> (Vec<String>, Vec<String>, String) {
    let config = engine.config.clone();
    let analysis = engine.analyse(Dialect::OpenaiChat, body).unwrap();
    let kept = analysis
        .kept_names()
        .iter()
        .map(|n| (*n).to_owned())
        .collect();
    (kept, analysis.brought_in(&config), analysis.explain_kept())
}

const LATER: &str = "now compare the backup copy with the folder";

#[test]
fn a_later_turn_keeps_the_tool_the_fleet_called_next() {
    let (with, brought_in, explained) = kept(&mut engine(LEARNED, 1.0, ""), &body(LATER, true));
    let (without, none, _) = kept(&mut engine(LEARNED, 0.0, ""), &body(LATER, true));
    assert!(with.contains(&"diff_files".to_owned()), "{with:?}");
    assert!(!without.contains(&"diff_files".to_owned()), "{without:?}");
    assert_eq!(brought_in, vec!["diff_files".to_owned()]);
    assert!(none.is_empty());
    // A name the catalog lacks takes no place: diff_files is the list's first.
    assert!(explained.contains("diff_files(next=1:9)"), "{explained}");
    // The same history and question, the same tools.
    let again = kept(&mut engine(LEARNED, 1.0, ""), &body(LATER, true));
    assert_eq!(again.0, with);
}

#[test]
fn a_first_turn_ranks_as_without_transitions() {
    let first = body(LATER, false);
    let (with, brought_in, _) = kept(&mut engine(LEARNED, 1.0, ""), &first);
    let (without, _, _) = kept(&mut engine(LEARNED, 0.0, ""), &first);
    assert_eq!(with, without);
    assert!(brought_in.is_empty());
    // A history with no known transition ranks as without them too.
    let unknown = r#"[["send_email","get_weather",4]]"#;
    let (with, brought_in, _) = kept(&mut engine(unknown, 1.0, ""), &body(LATER, true));
    let (without, _, _) = kept(&mut engine(unknown, 0.0, ""), &body(LATER, true));
    assert_eq!(with, without);
    assert!(brought_in.is_empty());
}

#[test]
fn a_transition_never_brings_back_a_tool_the_caller_may_not_see() {
    let access = r#","access":{"identity":[{"header":"x-group"}],"default":"allow",
        "rules":[{"when":["*"],"deny":["diff_files"]}]}"#;
    let mut governed = engine(LEARNED, 1.0, access);
    let grant = governed.grant(&Caller::new(["dev".to_owned()]));
    let analysis = governed
        .analyse_as(Dialect::OpenaiChat, body(LATER, true), grant.as_ref())
        .unwrap();
    assert!(!analysis.kept_names().contains(&"diff_files"));
    assert!(analysis.next.is_empty(), "{:?}", analysis.next);
    assert!(analysis.brought_in(&governed.config).is_empty());
}

#[test]
fn a_calibration_without_transitions_ranks_by_the_question_alone() {
    let (with, _, _) = kept(&mut engine("[]", 1.0, ""), &body(LATER, true));
    let (without, _, _) = kept(&mut engine(LEARNED, 0.0, ""), &body(LATER, true));
    assert_eq!(with, without);
}
