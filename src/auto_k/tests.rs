#![allow(clippy::unwrap_used, clippy::indexing_slicing)]
use super::*;
use crate::shared_data::MemoryBytes;

/// A seeded generator of its own (splitmix64): the trials are the same on every run.
pub(crate) struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// A distribution of slots over 1..=len, as its cumulative shares.
struct Slots {
    cdf: Vec<f64>,
}

impl Slots {
    /// One of three shapes, its parameters drawn: a geometric head, a Zipf tail, or a mix
    /// of a sharp head with a flat tail (what vague questions add).
    fn random(rng: &mut Rng, len: usize) -> Slots {
        let shape = rng.below(3);
        let (p, s, flat) = (
            0.05 + 0.9 * rng.unit(),
            0.6 + 2.0 * rng.unit(),
            0.3 * rng.unit(),
        );
        let weights: Vec<f64> = (1..=len)
            .map(|r| {
                let r = r as f64;
                match shape {
                    0 => (1.0 - p).powf(r - 1.0) * p,
                    1 => r.powf(-s),
                    _ => (1.0 - flat) * (1.0 - p).powf(r - 1.0) * p + flat / len as f64,
                }
            })
            .collect();
        let sum: f64 = weights.iter().sum();
        let mut acc = 0.0;
        let cdf = weights
            .iter()
            .map(|w| {
                acc += w / sum;
                acc
            })
            .collect();
        Slots { cdf }
    }

    fn draw(&self, rng: &mut Rng) -> usize {
        let u = rng.unit();
        self.cdf
            .iter()
            .position(|&c| u < c)
            .unwrap_or(self.cdf.len() - 1)
            + 1
    }

    /// The share of draws a `top_k` of `k` keeps.
    fn within(&self, k: usize) -> f64 {
        self.cdf.get(k.saturating_sub(1)).copied().unwrap_or(1.0)
    }
}

fn config(keep: f64) -> AutoKConfig {
    AutoKConfig {
        keep,
        min_k: 1,
        max_k: 256,
        min_calls: 200,
        confidence: 0.95,
        period_s: 600,
        beyond: None,
        calibration: None,
    }
}

#[test]
fn the_normal_quantile_is_right_where_it_is_known() {
    for (p, z) in [
        (0.5, 0.0),
        (0.95, 1.644_853_6),
        (0.99, 2.326_347_9),
        (0.8, 0.841_621_2),
    ] {
        assert!((normal_quantile(p) - z).abs() < 1e-6, "{p}");
        assert!((normal_quantile(1.0 - p) + z).abs() < 1e-6, "{p}");
    }
}

#[test]
fn wilsons_bound_is_below_the_share_and_tightens_with_calls() {
    let z = normal_quantile(0.95);
    assert!(wilson_lower(20.0, 20.0, z) < 0.9);
    assert!(wilson_lower(300.0, 300.0, z) > 0.98);
    assert!(wilson_lower(90.0, 100.0, z) < 0.9);
    assert!(wilson_lower(900.0, 1000.0, z) > wilson_lower(90.0, 100.0, z));
    assert_eq!(wilson_lower(0.0, 0.0, z), 0.0);
}

/// The guarantee: drawn from any of the shapes above, the k learned keeps at least `keep` of
/// fresh calls in at least `confidence` of trials (its true share is computed exactly).
#[test]
fn the_learned_k_keeps_the_target_in_at_least_confidence_of_trials() {
    let mut rng = Rng(45);
    for keep in [0.9, 0.95, 0.99] {
        let cfg = config(keep);
        let z = normal_quantile(cfg.confidence);
        let trials = 400;
        let mut short = 0;
        for _ in 0..trials {
            let slots = Slots::random(&mut rng, 200);
            let n = 200 + rng.below(1800);
            let mut h = Histogram::new(cfg.max_k);
            for _ in 0..n {
                h.add(slots.draw(&mut rng));
            }
            // Too few calls for the bound to reach `keep` cap k at max_k (256), which keeps
            // every one of the 200 slots: never short.
            let (k, _) = h.choose(&cfg, z).unwrap();
            if slots.within(k) < keep {
                short += 1;
            }
        }
        // At most 5 % of trials may fall short; 400 trials: mean 20, sd 4.4. Wilson's bound
        // is conservative here (fewer than 5 % fall short): 32 is past the mean by 2.7 sd.
        assert!(
            short <= 32,
            "keep {keep}: {short} of {trials} trials fell short"
        );
    }
}

#[test]
fn k_never_falls_as_keep_rises_and_never_passes_max_k() {
    let mut rng = Rng(7);
    for _ in 0..300 {
        let slots = Slots::random(&mut rng, 120);
        let n = 1 + rng.below(3000);
        let max_k = 1 + rng.below(100);
        let mut h = Histogram::new(max_k);
        for _ in 0..n {
            h.add(slots.draw(&mut rng));
        }
        let mut last = 0;
        for keep in [0.5, 0.8, 0.9, 0.95, 0.99, 0.999] {
            let cfg = AutoKConfig {
                max_k,
                ..config(keep)
            };
            let (k, capped) = h.choose(&cfg, normal_quantile(cfg.confidence)).unwrap();
            assert!(k >= last, "keep {keep}: {k} < {last}");
            assert!(k <= max_k);
            assert_eq!(
                capped.is_some(),
                k == max_k && {
                    let z = normal_quantile(cfg.confidence);
                    wilson_lower(h.within(max_k), h.total(), z) < keep
                }
            );
            last = k;
        }
    }
}

#[test]
fn min_k_bounds_a_calibrated_k_from_below() {
    let mut h = Histogram::new(64);
    for _ in 0..1000 {
        h.add(1);
    }
    let cfg = AutoKConfig {
        min_k: 3,
        ..config(0.95)
    };
    assert_eq!(h.choose(&cfg, 1.645), Some((3, None)));
    assert_eq!(Histogram::new(64).choose(&cfg, 1.645), None);
}

#[test]
fn with_no_data_the_k_is_top_k() {
    let store = MemoryBytes::default();
    let mut a = AutoK::new(config(0.99), 7, &[]);
    assert_eq!(a.chosen(1).k, 7);
    a.refresh(&store, 1000);
    let chosen = a.chosen(0xdead_beef);
    assert_eq!((chosen.k, chosen.source), (7, Source::Default));
    // Fewer than min_calls pooled: still top_k.
    a.learn(&store, 1, &[30; 199], 1001);
    a.refresh(&store, 1000 + 600);
    assert_eq!(a.chosen(1).source, Source::Default);
    assert_eq!(a.chosen(1).k, 7);
}

/// A table read under settings other than the ones that wrote it (shared data outlives a
/// configuration; a fleet file is written elsewhere) still gives a k within those settings:
/// a k past `max_k` is `max_k`, one under `min_k` is `min_k`, a share only beside `max_k`,
/// and a default k is this `top_k`, not the table's.
#[test]
fn a_table_gives_ks_within_the_settings_it_is_read_with() {
    let cfg = AutoKConfig {
        min_k: 4,
        max_k: 16,
        ..config(0.9)
    };
    let decided = |k, source, capped| Decision {
        chosen: Chosen { k, source, capped },
        since: 0,
    };
    let table = Table {
        epoch: 0,
        fallback: decided(2, Source::Pooled, Some(0.5)),
        catalogs: vec![
            (1, decided(5_000, Source::Calibrated, Some(0.9))),
            (2, decided(40, Source::Default, None)),
            (3, decided(usize::MAX, Source::Fleet, Some(f32::NAN))),
        ],
    };
    let of = |id| {
        let c = table.chosen(id, &cfg, 7);
        (c.k, c.source, c.capped)
    };
    assert_eq!(of(1), (16, Source::Calibrated, Some(0.9)));
    assert_eq!(of(2), (7, Source::Default, None));
    assert_eq!(of(3), (16, Source::Fleet, None));
    assert_eq!(of(9), (4, Source::Pooled, None));
}

/// A catalog with enough calls gets its own k; one with too few, the pooled k; and two
/// workers of one VM read the same table.
#[test]
fn catalogs_calibrate_pool_and_share_one_table() {
    let store = MemoryBytes::default();
    let cfg = AutoKConfig {
        min_calls: 100,
        period_s: 10,
        ..config(0.9)
    };
    let mut one = AutoK::new(cfg.clone(), 5, &[]);
    let mut two = AutoK::new(cfg, 5, &[]);
    // Catalog 1: every call at slot 2 or 3; catalog 2: a few calls at slot 40.
    for i in 0..300 {
        one.learn(&store, 1, &[2 + i % 2], 100);
    }
    two.learn(&store, 2, &[40, 40], 100);
    let changed = one.refresh(&store, 1000).changes;
    assert_eq!(
        two.refresh(&store, 1001).changes,
        0,
        "the table was decided already"
    );
    assert_eq!(changed, 0, "a first table changes nothing");
    for worker in [&one, &two] {
        assert_eq!(worker.chosen(1).k, 3);
        assert_eq!(worker.chosen(1).source, Source::Calibrated);
        assert_eq!(worker.chosen(2).source, Source::Pooled);
        assert_eq!(worker.chosen(9).source, Source::Pooled);
    }
    assert_eq!(one.chosen(2), two.chosen(2));
}

/// However the calibration moves, a k changes at most once per `period_s`, and workers
/// refreshing at different moments of a period agree.
#[test]
fn a_k_changes_at_most_once_per_period() {
    let store = MemoryBytes::default();
    let cfg = AutoKConfig {
        min_calls: 50,
        period_s: 30,
        ..config(0.95)
    };
    let mut workers = [
        AutoK::new(cfg.clone(), 5, &[]),
        AutoK::new(cfg.clone(), 5, &[]),
    ];
    let mut rng = Rng(3);
    let mut changes_at: Vec<u64> = Vec::new();
    let mut last_k = None;
    for now in 1_000..4_000u64 {
        // The traffic drifts: slots spread wider every 500 s.
        let spread = 1 + ((now - 1_000) / 500) as usize * 4;
        workers[0].learn(&store, 1, &[1 + rng.below(spread)], now);
        let w = rng.below(2);
        workers[w].refresh(&store, now);
        let k = workers[w].chosen(1).k;
        let other = &workers[1 - w];
        if other.is_current(now) {
            assert_eq!(other.chosen(1).k, k, "two workers in one period");
        }
        if last_k.is_some_and(|l| l != k) {
            changes_at.push(now);
        }
        last_k = Some(k);
    }
    assert!(changes_at.len() >= 3, "the drift moved k: {changes_at:?}");
    for pair in changes_at.windows(2) {
        assert!(pair[1] - pair[0] >= 30, "changes at {pair:?}");
    }
}

#[test]
fn old_calls_are_halved_so_the_estimate_follows_drift() {
    let cfg = AutoKConfig {
        min_calls: 50,
        ..config(0.9)
    };
    let mut c = Calibration::new(cfg.max_k);
    for _ in 0..400 {
        c.learn(&cfg, 1, &[1], 0);
    }
    let z = normal_quantile(cfg.confidence);
    assert_eq!(c.catalogs[0].histogram.choose(&cfg, z).unwrap().0, 1);
    // The traffic moves to slot 20: after as many calls again, the old ones weigh little.
    for _ in 0..1200 {
        c.learn(&cfg, 1, &[20], 0);
    }
    assert!(c.catalogs[0].histogram.total() <= window(&cfg));
    assert_eq!(c.catalogs[0].histogram.choose(&cfg, z).unwrap().0, 20);
}

#[test]
fn the_least_recently_calibrated_catalog_is_evicted() {
    let cfg = config(0.9);
    let mut c = Calibration::new(cfg.max_k);
    for id in 0..MAX_CATALOGS as u32 {
        c.learn(&cfg, id, &[1], u64::from(id) + 10);
    }
    c.learn(&cfg, 0, &[1], 1_000);
    c.learn(&cfg, 9_999, &[1], 1_001);
    assert_eq!(c.catalogs.len(), MAX_CATALOGS);
    let ids: Vec<u32> = c.catalogs.iter().map(|x| x.id).collect();
    assert!(ids.contains(&0) && ids.contains(&9_999) && !ids.contains(&1));
    assert_eq!(c.pooled.total(), MAX_CATALOGS as f64 + 2.0);
}

#[test]
fn a_capped_k_says_what_max_k_keeps() {
    let cfg = AutoKConfig {
        max_k: 10,
        min_calls: 10,
        ..config(0.99)
    };
    let mut c = Calibration::new(cfg.max_k);
    let slots: Vec<usize> = (1..=100).map(|i| if i <= 90 { 1 } else { 50 }).collect();
    c.learn(&cfg, 4, &slots, 0);
    let (table, _) = c.decide(&cfg, 5, None, 0, 0);
    let chosen = table.chosen(4, &cfg, 5);
    assert_eq!(chosen.k, 10);
    assert!((chosen.capped.unwrap() - 0.9).abs() < 1e-6);
    assert_eq!(chosen.header_suffix(), " k=auto:10 capped=0.900");
}

const F: Fingerprint = Fingerprint(0x5eed);

#[test]
fn values_round_trip_and_bad_bytes_read_as_none() {
    let cfg = config(0.95);
    let mut c = Calibration::new(cfg.max_k);
    c.learn(&cfg, 7, &[1, 2, 300], 5);
    c.learn(&cfg, 8, &[4], 6);
    let bytes = c.encode(F);
    assert_eq!(Calibration::decode(&bytes, F, cfg.max_k), Some(c.clone()));
    let (table, _) = c.decide(
        &AutoKConfig {
            min_calls: 1,
            ..cfg
        },
        5,
        None,
        3,
        9,
    );
    let encoded = table.encode(F);
    assert_eq!(Table::decode(&encoded, F), Some(table.clone()));
    for cut in 0..bytes.len() {
        assert!(
            Calibration::decode(&bytes[..cut], F, 256).is_none(),
            "cut {cut}"
        );
    }
    for cut in 0..encoded.len() {
        assert!(Table::decode(&encoded[..cut], F).is_none(), "cut {cut}");
    }
    // Bytes past a value's end: not a value this layout wrote.
    assert!(Table::decode(&[&encoded[..], &[0][..]].concat(), F).is_none());
    assert!(Calibration::decode(&[&bytes[..], &[0][..]].concat(), F, 256).is_none());
    // Another fingerprint's, or another version's: none.
    assert!(Table::decode(&encoded, Fingerprint(1)).is_none());
    assert!(Calibration::decode(&bytes, Fingerprint(1), 256).is_none());
    let mut old = encoded.clone();
    old[0] = 1;
    assert!(Table::decode(&old, F).is_none());
    // A smaller max_k folds the slots past it into its last bucket.
    let small = Calibration::decode(&bytes, F, 2).unwrap();
    assert_eq!(small.pooled.within(2), 2.0);
    assert_eq!(small.pooled.total(), 4.0);
}

/// The fingerprint changes with every setting that decides what a value means, and with the
/// caller's (the ranking); not with `beyond`, which only says what goes past a capped k.
#[test]
fn the_fingerprint_names_every_setting_a_k_depends_on() {
    let base = config(0.9);
    let of = |cfg: &AutoKConfig, top_k: usize, more: &[(&str, String)]| {
        AutoK::new(cfg.clone(), top_k, more).fingerprint()
    };
    let first = of(&base, 5, &[]);
    assert_eq!(
        first,
        of(&base, 5, &[]),
        "the same settings, another fingerprint"
    );
    let others = [
        of(&config(0.95), 5, &[]),
        of(
            &AutoKConfig {
                min_k: 2,
                ..base.clone()
            },
            5,
            &[],
        ),
        of(
            &AutoKConfig {
                max_k: 8,
                ..base.clone()
            },
            5,
            &[],
        ),
        of(
            &AutoKConfig {
                min_calls: 7,
                ..base.clone()
            },
            5,
            &[],
        ),
        of(
            &AutoKConfig {
                confidence: 0.9,
                ..base.clone()
            },
            5,
            &[],
        ),
        of(
            &AutoKConfig {
                period_s: 60,
                ..base.clone()
            },
            5,
            &[],
        ),
        of(&base, 6, &[]),
        of(&base, 5, &[("ranking", "Hybrid".into())]),
    ];
    for (i, other) in others.iter().enumerate() {
        assert_ne!(first, *other, "setting {i} does not change the fingerprint");
    }
    let beyond = AutoKConfig {
        beyond: Some(Beyond::FindTools),
        ..base.clone()
    };
    assert_eq!(first, of(&beyond, 5, &[]));
}

/// A worker configured with `max_k` 8 finds the calibration and table a worker with `max_k`
/// 64 wrote (the configuration before an update, with the same `vm_id`): it reads neither
/// into a k, counts each once, selects within its own bounds and replaces them.
#[test]
fn another_configurations_values_are_ignored_counted_and_replaced() {
    let store = MemoryBytes::default();
    let before = AutoKConfig {
        min_calls: 50,
        max_k: 64,
        ..config(0.95)
    };
    let mut old = AutoK::new(before.clone(), 5, &[]);
    for _ in 0..100 {
        assert!(old.learn(&store, 1, &[40, 41], 100).written);
    }
    assert_eq!(old.refresh(&store, 1_000), Refreshed::default());
    assert_eq!(
        (old.chosen(1).k, old.chosen(1).source),
        (41, Source::Calibrated)
    );
    assert_eq!(old.chosen(2).source, Source::Pooled);

    let after = AutoKConfig {
        max_k: 8,
        min_k: 2,
        ..before
    };
    let mut new = AutoK::new(after.clone(), 5, &[]);
    assert_eq!(
        new.refresh(&store, 1_001),
        Refreshed {
            changes: 0,
            foreign: 2
        },
        "the table and the calibration are another's"
    );
    for id in [1, 2, 3] {
        let chosen = new.chosen(id);
        assert_eq!(
            (chosen.k, chosen.source),
            (5, Source::Default),
            "catalog {id}"
        );
    }
    // The table was replaced: the next worker of the new settings reads it, and no foreign.
    let (table, _) = store.get(TABLE_KEY);
    assert!(Table::decode(&table.unwrap(), new.fingerprint()).is_some());
    let mut other = AutoK::new(after.clone(), 5, &[]);
    assert_eq!(other.refresh(&store, 1_002), Refreshed::default());
    assert_eq!(other.chosen(1), new.chosen(1));
    // The first calls learned replace the old calibration, counted once.
    let learned = new.learn(&store, 1, &[3], 1_003);
    assert_eq!((learned.written, learned.foreign), (true, true));
    let learned = new.learn(&store, 1, &[3], 1_004);
    assert_eq!((learned.written, learned.foreign), (true, false));
    assert_eq!(new.read_calibration(&store).pooled.total(), 2.0);
    // Learned under the new settings: a k within them, the old worker's values gone.
    for _ in 0..100 {
        new.learn(&store, 1, &[30], 1_005);
    }
    let later = 1_000 + 3 * after.period_s as u64;
    assert_eq!(new.refresh(&store, later).foreign, 0);
    let chosen = new.chosen(1);
    assert_eq!((chosen.k, chosen.source), (8, Source::Calibrated));
    assert!(chosen.capped.is_some());
    // And the old worker, were it still running, finds the new values foreign in turn.
    assert_eq!(old.refresh(&store, later + 1).foreign, 2);
    assert!((1..=64).contains(&old.chosen(1).k));
}

/// The input `make fuzz` found (issue 58): 54 bytes that version 1 read as a table whose k
/// was 16,544. Under either key, alone or behind this version's header, no k leaves its
/// bounds.
#[test]
fn the_fuzzed_table_of_k_16544_is_never_used() {
    let input: [u8; 54] = [
        1, 132, 2, 0, 0, 96, 0, 0, 32, 65, 3, 0, 0, 0, 0, 64, 1, 0, 7, 0, 16, 0, 0, 0, 0, 1, 0, 1,
        0, 0, 1, 0, 1, 0, 0, 0, 160, 64, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2,
    ];
    let cfg = AutoKConfig {
        min_calls: 2,
        max_k: 1 + usize::from(input[0] % 64),
        period_s: 7,
        ..config(0.9)
    };
    let mut worker = AutoK::new(cfg.clone(), 5, &[]);
    let mut forged = header(worker.fingerprint());
    forged.extend_from_slice(&input[1..]);
    for bytes in [&input[..], &forged[..]] {
        let store = MemoryBytes::default();
        store.set(CALIBRATION_KEY, bytes, None);
        store.set(TABLE_KEY, bytes.get(bytes.len() / 2..).unwrap(), None);
        for now in [0, 3, 1_000, 1_007, u64::MAX] {
            worker.refresh(&store, now);
            let chosen = worker.chosen(0);
            assert!(
                (chosen.k == 5 && chosen.source == Source::Default)
                    || (cfg.min_k..=cfg.max_k).contains(&chosen.k),
                "k {} out of bounds",
                chosen.k
            );
        }
    }
}

fn any_source() -> impl proptest::strategy::Strategy<Value = Source> {
    proptest::prop_oneof![
        proptest::strategy::Just(Source::Calibrated),
        proptest::strategy::Just(Source::Pooled),
        proptest::strategy::Just(Source::Default),
    ]
}

fn any_decision() -> impl proptest::strategy::Strategy<Value = Decision> {
    use proptest::prelude::*;
    (
        any::<u16>(),
        any_source(),
        proptest::option::of(any::<f32>()),
        any::<u64>(),
    )
        .prop_map(|(k, source, capped, since)| Decision {
            chosen: Chosen {
                k: usize::from(k),
                source,
                capped,
            },
            since,
        })
}

proptest::proptest! {
    #[test]
    fn any_bytes_decode_without_panicking(bytes in proptest::collection::vec(0u8..=255, 0..300)) {
        let _ = Calibration::decode(&bytes, F, 64);
        let _ = Table::decode(&bytes, F);
        let mut with_header = header(F);
        with_header.extend_from_slice(&bytes);
        let _ = Calibration::decode(&with_header, F, 64);
        let _ = Table::decode(&with_header, F);
    }

    /// Whatever table a worker holds (any k, any source, any share), the k it selects a
    /// catalog with is in [`min_k`, `max_k`], or `top_k` by default; a capped k is `max_k`.
    #[test]
    fn chosen_is_within_bounds_whatever_the_table(
        min_k in 1usize..=1024,
        span in 0usize..=1024,
        top_k in 0usize..=2048,
        fallback in any_decision(),
        catalogs in proptest::collection::vec((0u32..4, any_decision()), 0..6),
        id in 0u32..5,
    ) {
        let cfg = AutoKConfig {
            min_k,
            max_k: (min_k + span).min(MAX_K_LIMIT),
            ..config(0.9)
        };
        let mut worker = AutoK::new(cfg.clone(), top_k, &[]);
        worker.table = Some(Table { epoch: 0, fallback, catalogs: catalogs.clone() });
        let chosen = worker.chosen(id);
        let read = Table { epoch: 0, fallback, catalogs }.chosen(id, &cfg, top_k);
        proptest::prop_assert_eq!(read, chosen);
        match chosen.source {
            Source::Default => proptest::prop_assert_eq!(chosen.k, top_k),
            _ => proptest::prop_assert!(
                (cfg.min_k..=cfg.max_k).contains(&chosen.k),
                "k {} outside [{}, {}]", chosen.k, cfg.min_k, cfg.max_k
            ),
        }
        if let Some(share) = chosen.capped {
            proptest::prop_assert_eq!(chosen.k, cfg.max_k);
            proptest::prop_assert!((0.0..=1.0).contains(&share));
        }
    }

    /// The same through the shared data: any bytes behind this worker's own header, as the
    /// table and as the calibration, and the k stays in bounds after a refresh and a learn.
    #[test]
    fn chosen_is_within_bounds_whatever_the_store_holds(
        table in proptest::collection::vec(0u8..=255, 0..200),
        calibration in proptest::collection::vec(0u8..=255, 0..200),
        max_k in 1usize..=64,
        now in 0u64..10_000,
    ) {
        let cfg = AutoKConfig { max_k, min_calls: 1, ..config(0.9) };
        let mut worker = AutoK::new(cfg.clone(), 5, &[]);
        let store = MemoryBytes::default();
        store.set(TABLE_KEY, &[header(worker.fingerprint()), table].concat(), None);
        store.set(CALIBRATION_KEY, &[header(worker.fingerprint()), calibration].concat(), None);
        for at in [now, now + 1_000] {
            worker.refresh(&store, at);
            let chosen = worker.chosen(1);
            proptest::prop_assert!(
                (chosen.source == Source::Default && chosen.k == 5)
                    || (cfg.min_k..=cfg.max_k).contains(&chosen.k),
                "k {}", chosen.k
            );
            worker.learn(&store, 1, &[3], at);
        }
    }
}
