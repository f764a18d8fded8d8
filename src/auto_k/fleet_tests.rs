#![allow(clippy::unwrap_used, clippy::indexing_slicing)]
use super::*;
use crate::offline::calibrate::{Collector, rfc3339};

fn config(max_k: usize, min_calls: usize) -> AutoKConfig {
    AutoKConfig {
        keep: 0.95,
        min_k: 1,
        max_k,
        min_calls,
        confidence: 0.95,
        period_s: 600,
        beyond: None,
        calibration: None,
    }
}

/// A shadowed request's access log line: its calls' ranks in catalog `catalog`.
fn line(millis: u64, catalog: u32, ranks: &[usize]) -> String {
    let calls: Vec<String> = ranks
        .iter()
        .enumerate()
        .map(|(i, r)| format!("t{i}@{r}"))
        .collect();
    let record = format!(
        "kept=80 total=80 denied=0 shadow=would_keep:5 k=auto:5 calls={} missed=0 top_k=5 \
         tools=80 catalog={catalog:08x}",
        calls.join(",")
    );
    serde_json::json!({
        "start_time": rfc3339(millis * 1_000_000),
        "toolsift": record,
    })
    .to_string()
}

use crate::auto_k::tests::Rng;

/// A draw below `n`.
fn below(rng: &mut Rng, n: u64) -> u64 {
    rng.below(n as usize) as u64
}

/// `n` shadowed requests over `catalogs` catalogs, each line distinct.
fn traffic(rng: &mut Rng, n: u64, catalogs: u64, max_slot: u64) -> Vec<String> {
    (0..n)
        .map(|i| {
            let calls = 1 + below(rng, 3) as usize;
            let ranks: Vec<usize> = (0..calls)
                .map(|_| 1 + below(rng, max_slot) as usize)
                .collect();
            line(1_764_410_400_000 + i, below(rng, catalogs) as u32, &ranks)
        })
        .collect()
}

fn calibrate(lines: &[String], max_k: usize) -> FleetCalibration {
    let mut collector = Collector::new(max_k);
    for l in lines {
        collector.add_line(Some(l.as_bytes()));
    }
    collector.finish(vec!["log".into()]).unwrap()
}

/// The counts alone (what a table is decided from).
fn counts(c: &FleetCalibration) -> (SlotCounts, Vec<CatalogCounts>) {
    (c.pooled.clone(), c.catalogs.clone())
}

#[test]
fn merging_replicas_calibrations_is_calibrating_all_their_records() {
    let mut rng = Rng(7);
    for trial in 0..40 {
        let (n, catalogs) = (50 + below(&mut rng, 400), 1 + below(&mut rng, 120));
        let lines = traffic(&mut rng, n, catalogs, 90);
        let whole = calibrate(&lines, 64);
        let replicas = 1 + below(&mut rng, 6) as usize;
        let mut parts: Vec<Vec<String>> = vec![Vec::new(); replicas];
        for l in &lines {
            parts[below(&mut rng, replicas as u64) as usize].push(l.clone());
        }
        let parts: Vec<FleetCalibration> = parts
            .iter()
            .filter(|p| !p.is_empty())
            .map(|p| calibrate(p, 64))
            .collect();
        let merged = FleetCalibration::merge(&parts).unwrap();
        assert_eq!(counts(&merged), counts(&whole), "trial {trial}");
        let from = merged.from.unwrap();
        assert_eq!(from.shadowed, lines.len() as u64);
        assert_eq!(from.first, whole.from.as_ref().unwrap().first);
        assert_eq!(from.last, whole.from.as_ref().unwrap().last);
        let cfg = config(64, 20);
        assert_eq!(
            whole.table(&cfg, 5),
            FleetCalibration::merge(&parts).unwrap().table(&cfg, 5)
        );
    }
    // Another max_k cannot be merged.
    let lines = traffic(&mut rng, 10, 2, 5);
    assert!(FleetCalibration::merge(&[calibrate(&lines, 64), calibrate(&lines, 32)]).is_none());
    assert!(FleetCalibration::merge(&[]).is_none());
}

#[test]
fn a_calibration_round_trips_through_json_and_passes_its_own_check() {
    let mut rng = Rng(11);
    for _ in 0..20 {
        let max_k = 1 + below(&mut rng, 200) as usize;
        let (n, catalogs) = (1 + below(&mut rng, 300), 1 + below(&mut rng, 200));
        let lines = traffic(&mut rng, n, catalogs, 300);
        let c = calibrate(&lines, max_k);
        let text = serde_json::to_string(&c).unwrap();
        let back: FleetCalibration = serde_json::from_str(&text).unwrap();
        assert_eq!(back, c);
        assert_eq!(back.identity(), c.identity());
        c.check(&config(max_k, 50)).unwrap();
        assert!(c.catalogs.len() <= MAX_CATALOGS);
    }
}

#[test]
fn the_same_calibration_gives_the_same_table_whatever_its_order() {
    let mut rng = Rng(3);
    let lines = traffic(&mut rng, 3000, 12, 40);
    let c = calibrate(&lines, 64);
    let cfg = config(64, 100);
    let table = c.table(&cfg, 5);
    let mut shuffled = c.clone();
    shuffled.catalogs.reverse();
    shuffled.from = None;
    let other = shuffled.table(&cfg, 5);
    assert_eq!(shuffled.identity(), c.identity());
    for id in 0..12 {
        assert_eq!(table.chosen(id, &cfg, 5), other.chosen(id, &cfg, 5));
        assert_eq!(
            table.chosen(id, &cfg, 5),
            c.table(&cfg, 5).chosen(id, &cfg, 5)
        );
    }
    // Another count is another identity.
    let mut more = c.clone();
    more.pooled.slots[0].1 += 1;
    assert_ne!(more.identity(), c.identity());
}

#[test]
fn the_table_takes_each_catalog_its_own_k_the_others_the_pooled_one() {
    // Catalog 1: every call at slot 2 (k 2 once the bound allows it); catalog 2 few calls.
    let mut lines: Vec<String> = (0..400).map(|i| line(i, 1, &[2])).collect();
    lines.extend((0..10).map(|i| line(1000 + i, 2, &[30])));
    let c = calibrate(&lines, 64);
    let cfg = config(64, 200);
    let table = c.table(&cfg, 7);
    let own = table.chosen(1, &cfg, 7);
    assert_eq!((own.k, own.source), (2, Source::Fleet));
    // Too few calls of its own, and a catalog never seen: the pooled k.
    for id in [2, 99] {
        assert_eq!(table.chosen(id, &cfg, 7).source, Source::FleetPooled);
    }
    // Too few calls in all: top_k.
    let few = calibrate(&lines[..50], 64);
    let chosen = few.table(&cfg, 7).chosen(1, &cfg, 7);
    assert_eq!((chosen.k, chosen.source), (7, Source::Default));
}

#[test]
fn catalogs_past_the_limit_fall_into_the_pooled_calls() {
    let mut lines = Vec::new();
    let mut at = 0;
    // Catalog c has c + 1 calls: the two least called are 0 and 1.
    for c in 0..(MAX_CATALOGS as u32 + 2) {
        for _ in 0..=c {
            lines.push(line(at, c, &[1 + (c as usize % 9)]));
            at += 1;
        }
    }
    let cal = calibrate(&lines, 64);
    assert_eq!(cal.catalogs.len(), MAX_CATALOGS);
    let kept: Vec<u32> = cal
        .catalogs
        .iter()
        .map(|c| catalog_id(&c.catalog).unwrap())
        .collect();
    assert!(!kept.contains(&0) && !kept.contains(&1));
    assert_eq!(cal.pooled.calls, lines.len() as u64);
    assert_eq!(cal.from.as_ref().unwrap().pooled_only, 1 + 2);
    cal.check(&config(64, 1)).unwrap();
}

#[test]
fn bad_lines_are_counted_and_skipped_and_each_record_counts_once() {
    let good = line(5, 3, &[4, 9]);
    let otlp = serde_json::json!({"resourceLogs": [{"resource": {}, "scopeLogs": [{"scope": {},
    "logRecords": [
        {"timeUnixNano": "1764410400123000000",
         "body": {"stringValue": "kept=9 total=9 denied=0 shadow=would_keep:2 calls=x@6 \
                  missed=1 top_k=2 tools=9 catalog=00000003 slots=5"}},
        {"timeUnixNano": "1764410400124000000", "body": {"stringValue": "-"}}
    ]}]}]})
    .to_string();
    let cut = &good[..good.len() / 2];
    let filtered = serde_json::json!({"toolsift":
        "kept=5 total=80 denied=0 calls=a@2 missed=0 top_k=5 tools=80 catalog=00000003"})
    .to_string();
    let lines: Vec<Option<&[u8]>> = vec![
        Some(good.as_bytes()),
        Some(good.as_bytes()),
        Some(cut.as_bytes()),
        Some(b"not json"),
        Some(br#"{"status": "200"}"#),
        Some(br#"{"toolsift": 7}"#),
        Some(br#"{"toolsift": "shadow=would_keep:5 calls=a@x catalog=00000003"}"#),
        Some(br#"{"toolsift": "shadow=would_keep:5 calls=a@2 catalog=nothex"}"#),
        Some(br#"{"toolsift": "shadow=would_keep:5 calls=a@2,b@3 catalog=00000003 slots=1"}"#),
        Some(b"   "),
        None,
        Some(otlp.as_bytes()),
        Some(filtered.as_bytes()),
    ];
    let mut collector = Collector::new(8);
    for l in lines {
        collector.add_line(l);
    }
    let read = collector.read().clone();
    assert_eq!(
        (
            read.malformed,
            read.foreign,
            read.unreadable,
            read.duplicate,
            read.shadowed
        ),
        (3, 1, 4, 1, 2)
    );
    let c = collector.finish(vec![]).unwrap();
    // 4 and 9 (past max_k 8: slot 9) from the access log; 5, its slot, from the OTLP record.
    assert_eq!(c.pooled.slots, vec![(4, 1), (5, 1), (9, 1)]);
    let from = c.from.unwrap();
    assert_eq!(from.first.as_deref(), Some("1970-01-01T00:00:00.005Z"));
    assert_eq!(from.last.as_deref(), Some("2025-11-29T10:00:00.123Z"));
}

#[test]
fn nothing_to_calibrate_from_is_an_error_that_says_why() {
    let mut collector = Collector::new(64);
    collector.add_line(Some(br#"{"toolsift": "kept=5 total=80 denied=0"}"#));
    let error = collector.finish(vec![]).unwrap_err();
    assert!(error.contains("nothing to calibrate from"), "{error}");
    assert!(error.contains("shadow.sample"), "{error}");
}

#[test]
fn a_calibration_that_cannot_be_used_is_refused_with_its_field() {
    let lines: Vec<String> = (0..30).map(|i| line(i, 1, &[2, 3])).collect();
    let good = calibrate(&lines, 64);
    let cfg = config(64, 10);
    let refused_at = |edit: &dyn Fn(&mut FleetCalibration), cfg: &AutoKConfig| {
        let mut c = good.clone();
        edit(&mut c);
        c.check(cfg).unwrap_err().0
    };
    assert_eq!(refused_at(&|_| {}, &config(32, 10)), "max_k");
    assert_eq!(refused_at(&|c| c.version = 2, &cfg), "version");
    assert_eq!(refused_at(&|c| c.pooled.calls += 1, &cfg), "pooled.calls");
    assert_eq!(
        refused_at(&|c| c.pooled.slots[0].1 = MAX_COUNT + 1, &cfg),
        "pooled.slots[0]"
    );
    assert_eq!(
        refused_at(&|c| c.pooled.slots.reverse(), &cfg),
        "pooled.slots[1]"
    );
    assert_eq!(
        refused_at(&|c| c.pooled.slots[0].0 = 66, &cfg),
        "pooled.slots[0]"
    );
    assert_eq!(
        refused_at(&|c| c.pooled.slots[0].0 = 0, &cfg),
        "pooled.slots[0]"
    );
    assert_eq!(
        refused_at(&|c| c.catalogs[0].catalog = "ABCDEF01".into(), &cfg),
        "catalogs[0].catalog"
    );
    let twice = |c: &mut FleetCalibration| {
        let again = c.catalogs[0].clone();
        c.catalogs.push(again);
    };
    assert_eq!(refused_at(&twice, &cfg), "catalogs[1].catalog");
    let many = |c: &mut FleetCalibration| {
        c.catalogs = (0..=MAX_CATALOGS as u32)
            .map(|i| CatalogCounts {
                catalog: format!("{i:08x}"),
                calls: 0,
                slots: vec![],
            })
            .collect();
    };
    assert_eq!(refused_at(&many, &cfg), "catalogs");
    let more_than_pooled = |c: &mut FleetCalibration| {
        c.catalogs[0].slots[0].1 += 1000;
        c.catalogs[0].calls += 1000;
    };
    assert_eq!(refused_at(&more_than_pooled, &cfg), "pooled.calls");
}

#[test]
fn times_print_as_envoy_prints_start_time() {
    assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
    assert_eq!(rfc3339(951_782_400_000_000_000), "2000-02-29T00:00:00.000Z");
    assert_eq!(
        rfc3339(1_764_410_400_123_456_789),
        "2025-11-29T10:00:00.123Z"
    );
}

#[test]
fn the_configuration_reads_a_calibration_and_names_the_field_it_refuses() {
    use crate::config::Config;
    let plugin = |calibration: &str| {
        format!(
            r#"{{"shadow": {{"sample": 0.1}}, "auto_k": {{"keep": 0.95, "max_k": 8,
                "calibration": {calibration}}}}}"#
        )
    };
    // As Istio hands it over: every number a double.
    let good = r#"{"version": 1.0, "max_k": 8.0, "pooled": {"calls": 3.0, "slots": [[1.0, 2.0], [9, 1]]},
        "catalogs": [{"catalog": "0000000c", "calls": 2, "slots": [[1, 2]]}],
        "from": {"files": ["a.log"], "records": 7.0, "shadowed": 3}}"#;
    let config = Config::from_json(plugin(good).as_bytes()).unwrap();
    let calibration = config.auto_k.unwrap().calibration.unwrap();
    assert_eq!(calibration.pooled.slots, vec![(1, 2), (9, 1)]);
    for (calibration, field) in [
        (
            good.replace("\"max_k\": 8.0", "\"max_k\": 16"),
            "auto_k.calibration.max_k",
        ),
        (
            good.replace("[9, 1]", "[9, -1]"),
            "auto_k.calibration.pooled.slots",
        ),
        (
            good.replace("[9, 1]", "[9, 1e300]"),
            "auto_k.calibration.pooled.slots",
        ),
        (
            good.replace("[9, 1]", "[10, 1]"),
            "auto_k.calibration.pooled.slots[1]",
        ),
        (
            good.replace("\"calls\": 3.0", "\"calls\": 4"),
            "auto_k.calibration.pooled.calls",
        ),
        (
            good.replace("0000000c", "c"),
            "auto_k.calibration.catalogs[0].catalog",
        ),
        (
            good.replace("\"version\": 1.0", "\"version\": 2"),
            "auto_k.calibration.version",
        ),
        (
            good.replace("\"files\"", "\"file\""),
            "auto_k.calibration.from",
        ),
        ("[1, 2]".to_owned(), "auto_k.calibration"),
    ] {
        let error = Config::from_json(plugin(&calibration).as_bytes())
            .unwrap_err()
            .0;
        assert!(error.contains(field), "{calibration}: {error}");
    }
    // 10 MB of catalogs: refused, by count.
    let many: Vec<String> = (0..240_000)
        .map(|i| format!(r#"{{"catalog": "{i:08x}", "calls": 0, "slots": []}}"#))
        .collect();
    let huge = good.replace(
        r#"[{"catalog": "0000000c", "calls": 2, "slots": [[1, 2]]}]"#,
        &format!("[{}]", many.join(",")),
    );
    assert!(huge.len() > 10_000_000);
    let error = Config::from_json(plugin(&huge).as_bytes()).unwrap_err().0;
    assert!(
        error.contains("auto_k.calibration.catalogs"),
        "{}",
        &error[..200.min(error.len())]
    );
}

#[test]
fn a_worker_given_the_fleets_calibration_selects_with_it_from_its_first_request() {
    use crate::auto_k::AutoK;
    use crate::shared_data::{MemoryBytes, SharedBytes};
    let mut lines: Vec<String> = (0..300).map(|i| line(i, 1, &[3])).collect();
    lines.extend((0..300).map(|i| line(1000 + i, 2, &[1 + (i as usize % 20)])));
    let mut cfg = config(16, 100);
    cfg.calibration = Some(calibrate(&lines, 16));
    let store = MemoryBytes::default();
    let mut worker = AutoK::new(cfg.clone(), 5, &[]);
    // Before any refresh, at any time: the fleet's k, and nothing read or written.
    assert!(worker.is_current(0));
    let own = worker.chosen(1);
    assert_eq!((own.k, own.source), (3, Source::Fleet));
    let capped = worker.chosen(2);
    assert_eq!((capped.k, capped.source), (16, Source::Fleet));
    assert!(capped.capped.is_some());
    assert_eq!(worker.chosen(7).source, Source::FleetPooled);
    assert_eq!(worker.refresh(&store, 10_000), Default::default());
    assert!(!worker.learns());
    assert!(!worker.learn(&store, 1, &[9, 9, 9], 10).written);
    assert_eq!(store.get(crate::auto_k::CALIBRATION_KEY).0, None);
    assert_eq!(store.get(crate::auto_k::TABLE_KEY).0, None);
    // Every replica: the same k.
    let other = AutoK::new(cfg.clone(), 5, &[]);
    for id in [1, 2, 7] {
        assert_eq!(worker.chosen(id), other.chosen(id));
    }
    // Its fingerprint is another's than without the calibration: the VM's old values are
    // foreign to it.
    let mut local = cfg.clone();
    local.calibration = None;
    assert_ne!(
        AutoK::new(local, 5, &[]).fingerprint(),
        worker.fingerprint()
    );
}

/// A shadowed request whose history had called `history`, and whose model then called `calls`.
fn line_with_history(millis: u64, catalog: u32, history: &[&str], calls: &[&str]) -> String {
    let calls: Vec<String> = calls
        .iter()
        .enumerate()
        .map(|(i, c)| format!("{c}@{}", i + 1))
        .collect();
    let record = format!(
        "kept=80 total=80 shadow=would_keep:5 calls={} missed=0 top_k=5 tools=80 \
         catalog={catalog:08x} history={}",
        calls.join(","),
        history.join(",")
    );
    serde_json::json!({"start_time": rfc3339(millis * 1_000_000), "toolsift": record}).to_string()
}

#[test]
fn calibrate_learns_transitions_and_replicas_merge_into_the_same() {
    let mut rng = Rng(66);
    let tools = ["ls", "cat", "diff", "mean", "quote", "order", "cd"];
    let lines: Vec<String> = (0..300)
        .map(|i| {
            let pick = |rng: &mut Rng| tools[below(rng, tools.len() as u64) as usize];
            let history: Vec<&str> = (0..below(&mut rng, 3)).map(|_| pick(&mut rng)).collect();
            let calls: Vec<&str> = (0..1 + below(&mut rng, 2))
                .map(|_| pick(&mut rng))
                .collect();
            line_with_history(
                1_764_410_400_000 + i,
                below(&mut rng, 3) as u32,
                &history,
                &calls,
            )
        })
        .collect();
    let whole = calibrate(&lines, 64);
    let transitions = whole.transitions.clone().unwrap();
    assert!(!transitions.pooled.is_empty());
    assert!(whole.check(&config(64, 20)).is_ok());
    let parts: Vec<FleetCalibration> = lines.chunks(70).map(|c| calibrate(c, 64)).collect();
    let merged = FleetCalibration::merge(&parts).unwrap();
    assert_eq!(merged.transitions, whole.transitions);
    // The calibration object reads back with its transitions.
    let text = serde_json::to_string(&whole).unwrap();
    let back: FleetCalibration = serde_json::from_str(&text).unwrap();
    assert_eq!(back.transitions, whole.transitions);
    // Without histories there are none, and the object is as before.
    let plain = calibrate(&traffic(&mut rng, 50, 2, 9), 64);
    assert!(plain.transitions.is_none());
    assert!(
        !serde_json::to_string(&plain)
            .unwrap()
            .contains("transitions")
    );
}

#[test]
fn a_calibration_with_bad_transitions_is_refused_with_the_field_named() {
    let lines = vec![line_with_history(1_764_410_400_000, 1, &["ls"], &["cat"])];
    let mut c = calibrate(&lines, 64);
    c.transitions.as_mut().unwrap().pooled[0].2 = 0;
    let (field, _) = c.check(&config(64, 20)).unwrap_err();
    assert_eq!(field, "transitions.pooled[0][2]");
}

#[test]
fn a_weak_question_teaches_the_transitions_and_not_the_k() {
    let ls_then_cat = line_with_history(1_764_410_400_000, 1, &["ls"], &["cat"]);
    // The same record, its question weak: shadowed for its history's transitions alone.
    let weak = line_with_history(1_764_410_400_001, 1, &["ls"], &["cat"])
        .replace("kept=80 total=80", "kept=80 total=80 weak=0/3");
    let plain = calibrate(std::slice::from_ref(&ls_then_cat), 64);
    let both = calibrate(&[ls_then_cat, weak], 64);
    assert_eq!(
        both.pooled, plain.pooled,
        "a weak question's calls are no slots"
    );
    assert_eq!(both.from.as_ref().map(|f| f.shadowed), Some(2));
    let pairs = both.transitions.unwrap().pooled;
    assert_eq!(
        pairs,
        vec![crate::transitions::Pair("ls".into(), "cat".into(), 2)]
    );
}
