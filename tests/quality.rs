//! The retrieval-quality floor: Recall@5 of the default keyword ranking on the three shared
//! datasets may not fall below what `tests/quality-floor.json` records. A deterministic check
//! against regressions (ranking is deterministic), not a timed test. When a change raises
//! recall, raise the floor in the same commit; `docs/BENCHMARKS.md` says how it was measured.

use std::path::PathBuf;
use toolsift::config::Config;
use toolsift::eval::{Dataset, evaluate};
use toolsift::pipeline::Engine;

fn datasets() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/datasets")
}

#[test]
fn recall_at_5_stays_above_the_recorded_floor() {
    let floor_path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/quality-floor.json");
    let floors: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&floor_path).unwrap()).unwrap();
    assert_eq!(floors.len(), 3, "one floor per shared dataset");
    let config = Config::default();
    let weights = Engine::new(config.clone()).weights;
    let mut failures = Vec::new();
    for (name, floor) in &floors {
        let dir = datasets().join(name);
        assert!(
            dir.exists(),
            "{} is missing: the shared datasets must sit beside the repository",
            dir.display()
        );
        let dataset = Dataset::load(&dir.join("tools.jsonl"), &dir.join("queries.jsonl")).unwrap();
        let report = evaluate(
            &dataset,
            &config,
            weights,
            &[5],
            &|t| t.len() / 4,
            &mut |_| {},
        )
        .unwrap();
        let recall = report.recall_at(5).unwrap();
        let floor = floor.as_f64().unwrap();
        println!("{name}: Recall@5 {recall:.4} (floor {floor})");
        if recall < floor {
            failures.push(format!("{name}: Recall@5 {recall:.4} < floor {floor}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Conversations of several turns (`toolsift eval --followups`) on every third to fifth
/// question of each shared dataset, through the filter's pipeline: a follow-up ("Yes, please
/// go ahead.", "Do the same for staging.", "Try again." and the others a short text's words
/// tell apart) keeps Recall@5 within .02 of its question's own; a short new topic after an
/// unrelated question keeps it within .05 of the same text asked alone, and a whole new
/// question within .02. `docs/BENCHMARKS.md` ("Follow-up turns") has every question's figures.
#[test]
fn follow_ups_keep_their_questions_tools_and_new_topics_their_own() {
    use toolsift::eval::{FOLLOW_UPS, MISSED, evaluate_followups};
    let config = Config::default();
    let mut failures = Vec::new();
    for (name, stride) in [("seal_tools", 5), ("toolbench", 3), ("livemcpbench", 1)] {
        let dir = datasets().join(name);
        let mut dataset =
            Dataset::load(&dir.join("tools.jsonl"), &dir.join("queries.jsonl")).unwrap();
        dataset.queries = dataset.queries.into_iter().step_by(stride).collect();
        let r = evaluate_followups(&dataset, &config, 5, &mut |_| {}).unwrap();
        assert!(r.queries > 90, "{name}: {} questions", r.queries);
        for (i, row) in r.rows.iter().enumerate() {
            let (reference, within) = if i >= FOLLOW_UPS.len() {
                // A topic shift: its own text alone (the whole question's is the question's).
                (
                    row.latest_only,
                    if row.kind == "new_question" {
                        0.02
                    } else {
                        0.05
                    },
                )
            } else if MISSED.contains(&row.kind) {
                continue;
            } else {
                (r.question, 0.02)
            };
            println!(
                "{name}: {:<34} {} conversations, Recall@5 {:.3} (reference {reference:.3})",
                row.text, row.queries, row.filter
            );
            assert!(row.queries > 90, "{name}: {row:?}");
            if row.filter < reference - within {
                failures.push(format!(
                    "{name}: {}: Recall@5 {:.3} < {reference:.3} - {within}",
                    row.text, row.filter
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
