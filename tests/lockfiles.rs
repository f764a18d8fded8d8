//! The packages of their own (`fuzz/`, `benches/v8/`) build the core with the root's
//! dependencies at the root's versions: a fuzz crash or a V8 timing is then about the code the
//! filter ships, not about another `serde_json` or `bm25`. Their lockfiles start from the root's
//! (`make lockfiles`); this fails when one drifts from it.
//!
//! A package is shared when both lockfiles have a version of it that cargo could substitute for
//! the other (semver-compatible: the same major, or the same minor below 1.0): cargo resolves
//! `getrandom 0.3` and `getrandom 0.4` as two packages, and a dependency only `fuzz/` has may
//! bring in a major of its own.

use std::collections::BTreeMap;

use crate::common::repo;

/// The `(name, version)` of every `[[package]]` of a Cargo.lock.
fn locked(file: &str) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo().join(file)).unwrap();
    let mut packages = Vec::new();
    for block in text.split("[[package]]").skip(1) {
        let field = |key: &str| {
            block.lines().find_map(|line| {
                line.strip_prefix(key)?
                    .trim_start()
                    .strip_prefix('=')?
                    .trim()
                    .strip_prefix('"')?
                    .strip_suffix('"')
                    .map(str::to_owned)
            })
        };
        let (Some(name), Some(version)) = (field("name"), field("version")) else {
            panic!("{file}: a [[package]] without a name or a version: {block}");
        };
        packages.push((name, version));
    }
    assert!(packages.len() > 50, "{file}: {} packages", packages.len());
    packages
}

/// The part of a version that semver-compatible versions share: `1.0.228` → `1`, `0.8.21` →
/// `0.8`, `0.0.3` → `0.0.3` (build metadata and pre-release tags off).
fn compatible(version: &str) -> String {
    let core = version.split(['+', '-']).next().unwrap_or(version);
    let parts: Vec<&str> = core.split('.').collect();
    match parts.as_slice() {
        [major, ..] if *major != "0" => (*major).to_owned(),
        ["0", minor, ..] if *minor != "0" => format!("0.{minor}"),
        _ => core.to_owned(),
    }
}

/// Where `file` locks a shared package at another version than the root's Cargo.lock.
fn drift(file: &str) -> Vec<String> {
    let root: BTreeMap<(String, String), String> = locked("Cargo.lock")
        .into_iter()
        .map(|(name, version)| ((name, compatible(&version)), version))
        .collect();
    locked(file)
        .into_iter()
        .filter_map(|(name, version)| {
            let ours = root.get(&(name.clone(), compatible(&version)))?;
            (*ours != version).then(|| format!("{name} {version} (the root locks {ours})"))
        })
        .collect()
}

#[test]
fn the_fuzz_and_v8_lockfiles_agree_with_the_root() {
    for file in ["fuzz/Cargo.lock", "benches/v8/Cargo.lock"] {
        let drifted = drift(file);
        assert!(
            drifted.is_empty(),
            "{file} locks {} shared packages at other versions than Cargo.lock: {drifted:#?}; \
             run `make lockfiles`",
            drifted.len()
        );
    }
}

#[test]
fn drift_is_seen() {
    assert_eq!(compatible("1.0.228"), "1");
    assert_eq!(compatible("0.8.21"), "0.8");
    assert_eq!(compatible("0.0.3"), "0.0.3");
    assert_eq!(compatible("1.0.1+wasi-0.2.4"), "1");
    // The root against itself: nothing; against a lockfile with one version moved: that one.
    assert!(drift("Cargo.lock").is_empty());
    let root = std::fs::read_to_string(repo().join("Cargo.lock")).unwrap();
    let (name, version) = locked("Cargo.lock")
        .into_iter()
        .find(|(name, _)| name == "serde_json")
        .unwrap();
    let moved = root.replacen(
        &format!("name = \"{name}\"\nversion = \"{version}\""),
        &format!("name = \"{name}\"\nversion = \"{version}9\""),
        1,
    );
    assert_ne!(moved, root);
    let file = crate::common::scratch_file("lockfiles", "Cargo.lock", &moved);
    let relative = file.strip_prefix(repo()).unwrap().to_str().unwrap();
    assert_eq!(
        drift(relative),
        [format!("serde_json {version}9 (the root locks {version})")]
    );
}
