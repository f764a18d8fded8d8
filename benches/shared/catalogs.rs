//! The catalogs the offline benchmarks replay the shared datasets in (`auto_k`, `learn`): the
//! 200-tool catalogs `benches/shadow_replay.py` builds, the same shuffled, and the whole
//! catalog; and the seeded generator they draw with.

use proptest::prelude::Rng;
use proptest::test_runner::{RngAlgorithm, TestRng};
use std::collections::HashSet;
use toolsift::offline::eval::Dataset;

/// The tools of one catalog in the first layout, as `benches/shadow_replay.py` replays them.
pub const CATALOG_TOOLS: usize = 200;

/// The 200-tool catalogs: queries dealt at a stride to as few catalogs as keep each one's
/// relevant tools within [`CATALOG_TOOLS`]; each catalog is those tools in the dataset's order,
/// then the dataset's first others.
pub fn catalogs_of_200(dataset: &Dataset) -> Vec<Dataset> {
    let relevant_of = |group: &[&toolsift::offline::eval::Query]| -> HashSet<String> {
        group
            .iter()
            .flat_map(|q| q.relevant.iter().cloned())
            .collect()
    };
    let deal = |catalogs: usize| -> Vec<Vec<&toolsift::offline::eval::Query>> {
        (0..catalogs)
            .map(|c| dataset.queries.iter().skip(c).step_by(catalogs).collect())
            .collect()
    };
    let groups = (1..=dataset.queries.len())
        .map(deal)
        .find(|groups| groups.iter().all(|g| relevant_of(g).len() <= CATALOG_TOOLS))
        .expect("one query per catalog fits");
    groups
        .iter()
        .enumerate()
        .map(|(c, group)| {
            let wanted = relevant_of(group);
            let mut tools: Vec<_> = dataset
                .tools
                .iter()
                .filter(|t| wanted.contains(&t.name))
                .cloned()
                .collect();
            let others = dataset.tools.iter().filter(|t| !wanted.contains(&t.name));
            let room = CATALOG_TOOLS.saturating_sub(tools.len());
            tools.extend(others.take(room).cloned());
            Dataset {
                name: format!("{} catalog {c}", dataset.name),
                tools,
                queries: group.iter().map(|&q| q.clone()).collect(),
            }
        })
        .collect()
}

/// The catalogs of `dataset` in `layout` (`"200-tool"`, `"200-tool, shuffled"`, else the whole
/// catalog). The shuffled 200-tool catalogs hold the same tools in a fixed random order: a tool
/// no query term matches ranks where its catalog lists it, and `shadow_replay.py` lists the
/// relevant tools first.
pub fn catalogs_in(dataset: &Dataset, layout: &str) -> Vec<Dataset> {
    match layout {
        "200-tool" => catalogs_of_200(dataset),
        "200-tool, shuffled" => {
            let mut catalogs = catalogs_of_200(dataset);
            for (c, catalog) in catalogs.iter_mut().enumerate() {
                shuffle(&mut catalog.tools, &mut seeded(1000 + c as u64));
            }
            catalogs
        }
        _ => vec![dataset.clone()],
    }
}

/// Fisher–Yates, with `rng`.
pub fn shuffle<T>(items: &mut [T], rng: &mut TestRng) {
    for i in (1..items.len()).rev() {
        items.swap(i, rng.random_range(0..=i));
    }
}

/// A generator of its own per seed (the property tests' ChaCha): the same draws on every run.
pub fn seeded(seed: u64) -> TestRng {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    TestRng::from_seed(RngAlgorithm::ChaCha, &bytes)
}

/// The seeds a benchmark runs over: `--seeds N` on its command line, else `default`.
/// `program` names it in the usage a wrong argument gets.
pub fn seeds_argument(program: &str, default: u64) -> u64 {
    let mut seeds = default;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--seeds" => seeds = args.next().and_then(|n| n.parse().ok()).expect("--seeds N"),
            other => panic!("unknown argument {other} (usage: {program} [--seeds N])"),
        }
    }
    seeds
}
