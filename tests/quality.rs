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
