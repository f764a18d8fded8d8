//! Replays the fuzz corpus (`fuzz/corpus/<target>/`) and every crash the fuzzers found
//! (`fuzz/regressions/<target>/`) through the targets' own properties (`fuzz/src/lib.rs`),
//! natively: `make test` checks them without cargo-fuzz or a nightly compiler.

#[path = "../fuzz/src/lib.rs"]
mod fuzz;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

fn inputs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).collect();
    files.sort();
    files
}

#[test]
fn corpus_and_regressions_hold_every_property() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut failures = Vec::new();
    for (name, property) in fuzz::TARGETS {
        let corpus = inputs(&root.join("corpus").join(name));
        assert!(!corpus.is_empty(), "fuzz/corpus/{name} is empty or missing");
        assert!(
            root.join("src/bin").join(format!("{name}.rs")).exists(),
            "fuzz target {name} has no fuzz/src/bin/{name}.rs"
        );
        let regressions = inputs(&root.join("regressions").join(name));
        for file in corpus.iter().chain(&regressions) {
            let data = std::fs::read(file).unwrap();
            if catch_unwind(AssertUnwindSafe(|| property(&data))).is_err() {
                failures.push(file.display().to_string());
            }
        }
    }
    assert!(failures.is_empty(), "properties broken by: {failures:#?}");
}

#[test]
fn every_target_file_is_registered() {
    let bins = inputs(&Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/src/bin"));
    assert!(!bins.is_empty());
    for bin in bins {
        let name = bin.file_stem().unwrap().to_str().unwrap();
        assert!(
            fuzz::TARGETS.iter().any(|(target, _)| *target == name),
            "fuzz/src/bin/{name}.rs is not in fuzz::TARGETS"
        );
    }
}
