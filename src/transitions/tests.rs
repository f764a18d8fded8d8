use super::*;
use crate::index::Scored;
use proptest::prelude::*;

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

/// The request path's next tools, owned.
fn next_of(t: &Transitions, catalog: u32, history: &[String]) -> Vec<(String, u64)> {
    NextTools::new(t)
        .next(catalog, history)
        .into_iter()
        .map(|(n, c)| (n.to_owned(), c))
        .collect()
}

/// What [`NextTools::next`] must give, by scanning every pair: each tool's summed count over
/// the pairs whose earlier tool the history called, best first, equal counts by name.
fn scan_next(t: &Transitions, catalog: u32, history: &[String]) -> Vec<(String, u64)> {
    let history = &history[history.len().saturating_sub(MAX_HISTORY)..];
    if history.is_empty() {
        return Vec::new();
    }
    let own = t
        .catalogs
        .iter()
        .find(|c| catalog_id(&c.catalog) == Some(catalog));
    let pairs = own.map_or(&t.pooled, |c| &c.pairs);
    let mut scores: std::collections::BTreeMap<&str, u64> = Default::default();
    for Pair(earlier, next, count) in pairs {
        if history.contains(earlier) && !history.contains(next) {
            let score = scores.entry(next.as_str()).or_default();
            *score = score.saturating_add(*count);
        }
    }
    let mut out: Vec<(String, u64)> = scores.into_iter().map(|(n, c)| (n.to_owned(), c)).collect();
    out.sort_by_key(|p| std::cmp::Reverse(p.1));
    out
}

/// [`fuse`] as its definition says it, by sorting every tool.
fn fuse_by_sorting(ranking: &[Scored], next: &[usize], weight: f32, k: f32) -> Vec<Scored> {
    let (weight, k) = (f64::from(weight), f64::from(k));
    let mut scored: Vec<(f64, usize, Scored)> = ranking
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let lift = next
                .iter()
                .position(|&e| e == s.entry)
                .map_or(0.0, |q| weight / (k + q as f64 + 1.0));
            (1.0 / (k + i as f64 + 1.0) + lift, i, *s)
        })
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    scored.into_iter().map(|(_, _, s)| s).collect()
}

/// A record: its catalog (one of four), its history and its calls, over a small set of tool
/// names so that pairs recur.
fn any_record() -> impl Strategy<Value = (u32, Vec<String>, Vec<String>)> {
    let name = (0u8..12).prop_map(|i| format!("tool_{i}"));
    (
        0u32..4,
        proptest::collection::vec(name.clone(), 0..5),
        proptest::collection::vec(name, 0..4),
    )
}

fn counted(records: &[(u32, Vec<String>, Vec<String>)]) -> Counter {
    let mut c = Counter::default();
    for (catalog, history, calls) in records {
        c.add(*catalog, history, calls);
    }
    c
}

proptest! {
    /// Replicas' logs read apart and merged are one calibration of all the records, whatever
    /// the split and the order.
    #[test]
    fn replicas_merge_as_one_calibration_of_all_records(
        records in proptest::collection::vec(any_record(), 0..60),
        split in 0usize..60,
    ) {
        let split = split.min(records.len());
        let whole = counted(&records).transitions();
        let mut first = counted(&records[..split]);
        first.absorb(counted(&records[split..]));
        prop_assert_eq!(&first.transitions(), &whole);
        let mut reversed = records.clone();
        reversed.reverse();
        prop_assert_eq!(&counted(&reversed).transitions(), &whole);
    }

    /// What `toolsift calibrate` prints reads back the same, and a plugin takes it.
    #[test]
    fn transitions_round_trip_through_json(records in proptest::collection::vec(any_record(), 0..40)) {
        let t = counted(&records).transitions();
        let text = serde_json::to_string(&t).unwrap();
        let back: Transitions = serde_json::from_str(&text).unwrap();
        prop_assert_eq!(&back, &t);
        prop_assert!(back.check().is_ok());
    }

    /// The merge gives what sorting every tool by its fused score gives, and only reorders.
    #[test]
    fn fusing_the_next_tools_is_reciprocal_rank_fusion(
        scores in proptest::collection::vec(0u8..4, 0..40),
        next in proptest::collection::vec(0usize..50, 0..10),
        weight in prop_oneof![Just(0.0f32), Just(0.5), Just(1.0), Just(4.0)],
        k in prop_oneof![Just(1.0f32), Just(60.0)],
    ) {
        // A ranking of entries 0.., listed out of entry order (built-ins leave gaps).
        let mut ranking: Vec<Scored> = scores
            .iter()
            .enumerate()
            .map(|(i, s)| Scored { entry: i * 2 % 41 + i / 41, score: f32::from(*s) })
            .collect();
        ranking.sort_by(|a, b| b.score.total_cmp(&a.score));
        let mut next = next;
        let mut seen = std::collections::HashSet::new();
        next.retain(|e| seen.insert(*e));
        let fused = fuse(&ranking, &next, weight, k);
        prop_assert_eq!(&fused, &fuse_by_sorting(&ranking, &next, weight, k));
        if next.is_empty() || weight == 0.0 {
            prop_assert_eq!(&fused, &ranking);
        }
    }

    /// The same transitions and history give the same next tools, and none of the history's.
    #[test]
    fn the_same_history_gives_the_same_next_tools(
        records in proptest::collection::vec(any_record(), 0..40),
        history in proptest::collection::vec((0u8..12).prop_map(|i| format!("tool_{i}")), 0..20),
        catalog in 0u32..6,
    ) {
        let t = counted(&records).transitions();
        let a = next_of(&t, catalog, &history);
        let again = t.clone();
        prop_assert_eq!(&a, &next_of(&again, catalog, &history));
        // The index gives what a scan of every pair gives.
        prop_assert_eq!(&a, &scan_next(&t, catalog, &history));
        let latest = &history[history.len().saturating_sub(MAX_HISTORY)..];
        prop_assert!(a.iter().all(|(n, _)| !latest.iter().any(|h| h == n)));
        prop_assert!(a.windows(2).all(|w| w[0].1 > w[1].1 || (w[0].1 == w[1].1 && w[0].0 < w[1].0)));
    }
}

#[test]
fn counted_pairs_are_bounded() {
    let mut c = Counter::default();
    // 300 catalogs, each earlier tool followed by 20 others: past every bound.
    for catalog in 0..300u32 {
        for e in 0..40 {
            for n in 0..20 {
                c.add(
                    catalog,
                    &[format!("e{e}")],
                    &[format!("n{n}_{}", (e + n) % 7)],
                );
            }
        }
    }
    let t = c.transitions();
    assert!(t.check().is_ok(), "{:?}", t.check());
    assert_eq!(t.catalogs.len(), MAX_CATALOGS);
    for pairs in std::iter::once(&t.pooled).chain(t.catalogs.iter().map(|c| &c.pairs)) {
        assert!(pairs.len() <= MAX_PAIRS);
        let mut of: HashMap<&str, usize> = HashMap::new();
        for p in pairs {
            *of.entry(&p.0).or_default() += 1;
        }
        assert!(of.values().all(|n| *n <= MAX_SUCCESSORS), "{of:?}");
    }
}

#[test]
fn the_most_frequent_next_tools_lead_and_the_catalog_s_own_pairs_win() {
    let mut c = Counter::default();
    let catalog = 0x3fa2_b1c0;
    for _ in 0..3 {
        c.add(catalog, &names(&["ls"]), &names(&["cat"]));
    }
    c.add(catalog, &names(&["ls", "cd"]), &names(&["diff", "ls"]));
    c.add(7, &names(&["ls"]), &names(&["rm"]));
    let t = c.transitions();
    assert_eq!(
        next_of(&t, catalog, &names(&["ls"])),
        vec![("cat".to_owned(), 3), ("diff".to_owned(), 1)]
    );
    assert_eq!(
        next_of(&t, catalog, &names(&["ls", "cd"])),
        vec![("cat".to_owned(), 3), ("diff".to_owned(), 2)]
    );
    // A catalog without pairs of its own takes the pool's.
    assert_eq!(
        next_of(&t, 9, &names(&["ls"])),
        vec![
            ("cat".to_owned(), 3),
            ("diff".to_owned(), 1),
            ("rm".to_owned(), 1)
        ]
    );
    // A first turn has no history: nothing.
    assert!(next_of(&t, catalog, &[]).is_empty());
    // A tool called again is no transition.
    assert!(!t.pooled.iter().any(|p| p.0 == "ls" && p.1 == "ls"));
}

#[test]
fn bad_transitions_are_refused_with_the_field_named() {
    let refused = |json: &str| -> Refused {
        let t: Transitions = serde_json::from_str(json).unwrap();
        t.check().unwrap_err()
    };
    assert_eq!(refused(r#"{"pooled":[["a","",1]]}"#).0, "pooled[0][1]");
    assert_eq!(refused(r#"{"pooled":[["a","b",0]]}"#).0, "pooled[0][2]");
    assert_eq!(
        refused(r#"{"catalogs":[{"catalog":"XYZ","pairs":[]}]}"#).0,
        "catalogs[0].catalog"
    );
    assert_eq!(
        refused(
            r#"{"catalogs":[{"catalog":"0000000a","pairs":[]},{"catalog":"0000000a","pairs":[]}]}"#
        )
        .0,
        "catalogs[1].catalog"
    );
    let long = "x".repeat(MAX_NAME + 1);
    assert_eq!(
        refused(&format!(r#"{{"pooled":[["{long}","b",1]]}}"#)).0,
        "pooled[0][0]"
    );
    let many: Vec<String> = (0..=MAX_PAIRS)
        .map(|i| format!(r#"["a","t{i}",1]"#))
        .collect();
    let (field, why) = refused(&format!(r#"{{"pooled":[{}]}}"#, many.join(",")));
    assert_eq!(field, "pooled");
    assert!(why.contains("at most 2048"), "{why}");
    // A count past what a configuration holds does not even read.
    assert!(serde_json::from_str::<Transitions>(r#"{"pooled":[["a","b",1e30]]}"#).is_err());
    assert!(serde_json::from_str::<Transitions>(r#"{"pooled":[["a","b",-1]]}"#).is_err());
    assert!(serde_json::from_str::<Transitions>(r#"{"pairs":[]}"#).is_err());
}

#[test]
fn huge_counts_halve_and_keep_their_shares() {
    let mut counts = HashMap::new();
    counts.insert(("a".to_owned(), "b".to_owned()), u64::MAX);
    counts.insert(("a".to_owned(), "c".to_owned()), u64::MAX / 2);
    let pairs = bounded(counts);
    assert!(
        pairs
            .iter()
            .all(|p| p.2 <= crate::json::MAX_COUNT && p.2 > 0)
    );
    assert_eq!(pairs[0].1, "b");
    assert!(pairs[0].2 >= pairs[1].2 * 2 - 1);
}
