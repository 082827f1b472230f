//! Tests of the domain rules: validation, lease sizing (property-tested) and the result judge.
use super::*;
use proptest::prelude::*;

fn lease() -> LeaseRow {
    LeaseRow {
        id: 10,
        worker_id: 1,
        campaign_id: 5,
        fencing_token: 100,
        first_seq: 3,
        unit_count: 2,
        seqs: None,
        state: "active".into(),
        expired: false,
        deferred: false,
    }
}

fn unit() -> UnitRow {
    UnitRow {
        id: 77,
        campaign_id: 5,
        seq: 4,
        state: "leased".into(),
        lease_id: Some(10),
        fence: Some(100),
        count: 16,
        negative: false,
        exponent: 0,
        first: "8388608".into(),
    }
}

fn code(r: Result<Judgement>) -> &'static str {
    match r {
        Ok(_) => "ok",
        Err(e) => e.code(),
    }
}

/// A lease whose claim left its fresh units to be marked holds those of its seqs that read
/// pending and never fenced; a unit some lease fenced, or one outside its seqs, it does not,
/// nor does a lease that was not deferred.
#[test]
fn a_deferred_lease_holds_its_unmarked_units_and_nothing_else() {
    let d = "a".repeat(64);
    let deferred = LeaseRow {
        deferred: true,
        ..lease()
    };
    let unmarked = UnitRow {
        state: "pending".into(),
        lease_id: None,
        fence: None,
        ..unit()
    };
    assert_eq!(
        judge_post(1, 100, Some(&deferred), Some(&unmarked), None, &d).unwrap(),
        Judgement::Accept
    );
    assert_eq!(
        code(judge_post(
            1,
            100,
            Some(&lease()),
            Some(&unmarked),
            None,
            &d
        )),
        "lease_expired"
    );
    let fenced = UnitRow {
        fence: Some(90),
        ..unmarked.clone()
    };
    assert_eq!(
        code(judge_post(1, 100, Some(&deferred), Some(&fenced), None, &d)),
        "lease_expired"
    );
    let outside = UnitRow {
        seq: 5,
        ..unmarked.clone()
    };
    assert_eq!(
        code(judge_post(
            1,
            100,
            Some(&deferred),
            Some(&outside),
            None,
            &d
        )),
        "lease_mismatch"
    );
    let quarantined = UnitRow {
        state: "quarantined".into(),
        ..unmarked
    };
    assert_eq!(
        code(judge_post(
            1,
            100,
            Some(&deferred),
            Some(&quarantined),
            None,
            &d
        )),
        "lease_expired"
    );
}

#[test]
fn the_judge_accepts_the_holder_and_refuses_everyone_else_with_a_clear_code() {
    let (l, u) = (lease(), unit());
    let d = "a".repeat(64);
    assert_eq!(
        judge_post(1, 100, Some(&l), Some(&u), None, &d).unwrap(),
        Judgement::Accept
    );
    assert_eq!(
        code(judge_post(1, 100, None, Some(&u), None, &d)),
        "not_found"
    );
    assert_eq!(
        code(judge_post(2, 100, Some(&l), Some(&u), None, &d)),
        "forbidden"
    );
    assert_eq!(
        code(judge_post(1, 99, Some(&l), Some(&u), None, &d)),
        "stale_token"
    );
    let outside = UnitRow { seq: 5, ..unit() };
    assert_eq!(
        code(judge_post(1, 100, Some(&l), Some(&outside), None, &d)),
        "lease_mismatch"
    );
    let other_campaign = UnitRow {
        campaign_id: 6,
        ..unit()
    };
    assert_eq!(
        code(judge_post(
            1,
            100,
            Some(&l),
            Some(&other_campaign),
            None,
            &d
        )),
        "lease_mismatch"
    );
    let done = UnitRow {
        state: "done".into(),
        lease_id: None,
        ..unit()
    };
    assert_eq!(
        code(judge_post(1, 100, Some(&l), Some(&done), None, &d)),
        "unit_done"
    );
    let releasedto = UnitRow {
        lease_id: Some(11),
        fence: Some(101),
        ..unit()
    };
    assert_eq!(
        code(judge_post(1, 100, Some(&l), Some(&releasedto), None, &d)),
        "stale_token"
    );
    // Back in the pool from this very lease, leased by nobody since: a late (spooled)
    // result is still taken; quarantined or taken by a newer lease, it is not.
    let expired = LeaseRow {
        state: "expired".into(),
        expired: true,
        ..lease()
    };
    let back_in_pool = UnitRow {
        state: "pending".into(),
        lease_id: None,
        ..unit()
    };
    assert_eq!(
        judge_post(1, 100, Some(&expired), Some(&back_in_pool), None, &d).unwrap(),
        Judgement::Accept
    );
    let quarantined = UnitRow {
        state: "quarantined".into(),
        lease_id: None,
        ..unit()
    };
    assert_eq!(
        code(judge_post(
            1,
            100,
            Some(&expired),
            Some(&quarantined),
            None,
            &d
        )),
        "lease_expired"
    );
    for ended in ["released", "revoked"] {
        let ended = LeaseRow {
            state: ended.into(),
            ..lease()
        };
        assert_eq!(
            code(judge_post(
                1,
                100,
                Some(&ended),
                Some(&back_in_pool),
                None,
                &d
            )),
            "lease_expired"
        );
    }
    let leased_again = UnitRow {
        lease_id: Some(12),
        fence: Some(100),
        ..unit()
    };
    assert_eq!(
        code(judge_post(1, 100, Some(&l), Some(&leased_again), None, &d)),
        "lease_expired"
    );
    // Past its expiry but not yet reclaimed, the unit is still this lease's.
    let overdue = LeaseRow {
        expired: true,
        ..lease()
    };
    assert_eq!(
        judge_post(1, 100, Some(&overdue), Some(&u), None, &d).unwrap(),
        Judgement::Accept
    );
}

#[test]
fn a_retry_gets_the_same_answer_even_after_the_lease_ended() {
    let l = LeaseRow {
        state: "finished".into(),
        ..lease()
    };
    let u = UnitRow {
        state: "done".into(),
        lease_id: None,
        ..unit()
    };
    let prior = PriorResult {
        id: 9,
        digest: "AB".repeat(32),
        hr_count: 2,
    };
    assert_eq!(
        judge_post(1, 100, Some(&l), Some(&u), Some(&prior), &"ab".repeat(32)).unwrap(),
        Judgement::Replay {
            result_id: 9,
            hr_cases: 2
        }
    );
    assert_eq!(
        code(judge_post(
            1,
            100,
            Some(&l),
            Some(&u),
            Some(&prior),
            &"cd".repeat(32)
        )),
        "conflict"
    );
}

proptest! {
    /// However a worker lies about `elapsed`, the speed it earns is finite and no faster
    /// than the server's clock (or the minimum time) allows.
    #[test]
    fn speeds_are_bounded_by_the_servers_clock(
        count in 1i64..(1 << 40),
        elapsed in proptest::num::f64::ANY,
        wall in 0.0f64..1e6,
    ) {
        if let Some(v) = speed_sample(count, elapsed, wall) {
            prop_assert!(v.is_finite() && v > 0.0);
            prop_assert!(v <= count as f64 / wall.max(MIN_ELAPSED_SECONDS) * (1.0 + 1e-12));
            let p = LeasePolicy { max_units: 64, ..LeasePolicy::default() };
            let n = lease_size(&p, 600, Some(v), 10, Held::default(), 1);
            prop_assert!((1..=64).contains(&n));
        }
    }
}

#[test]
fn campaigns_whose_units_overflow_a_result_are_refused() {
    assert!(check_cases_fit(10, 8, 10_000).is_ok());
    assert!(check_cases_fit(36, 36, 10_000).is_ok());
    assert!(check_cases_fit(20, 1, 10_000).is_err());
    assert!(check_cases_fit(14, 2, 10_000).is_err());
    assert!(
        check_cases_fit(12, 1, 10_000).is_ok(),
        "2^12 expected cases fit"
    );
}

#[test]
fn lies_about_elapsed_do_not_buy_speed() {
    assert_eq!(
        speed_sample(1024, 1e-9, 0.0),
        Some(1024.0 / MIN_ELAPSED_SECONDS)
    );
    assert_eq!(speed_sample(1024, 5e-324, 2.0), Some(512.0));
    assert_eq!(speed_sample(1024, 0.0, 2.0), None);
    assert_eq!(speed_sample(1024, f64::NAN, 2.0), None);
    assert_eq!(speed_sample(1024, 4.0, 2.0), Some(256.0));
}

#[test]
fn lease_size_follows_speed_within_bounds() {
    let p = LeasePolicy {
        max_units: 64,
        max_held_seconds: 100_000,
        ..LeasePolicy::default()
    };
    let none = Held::default();
    assert_eq!(lease_size(&p, 600, None, 20, none, 1), 1);
    assert_eq!(lease_size(&p, 600, Some(0.0), 20, none, 1), 1);
    // 2^20 arguments per unit at 2^20 per second: 600 s is 600 units, capped at 64.
    assert_eq!(lease_size(&p, 600, Some(1048576.0), 20, none, 1), 64);
    assert_eq!(lease_size(&p, 10, Some(1048576.0), 20, none, 1), 10);
    assert_eq!(lease_size(&p, 1, Some(1.0), 20, none, 1), 1);
    // An unmeasured worker holding its share gets nothing more.
    let full = Held {
        units: 128,
        arguments: 0.0,
    };
    assert_eq!(lease_size(&p, 600, None, 20, full, 1), 0);
}

#[test]
fn an_h100_gets_a_minute_of_units_and_no_more_than_its_share() {
    let p = LeasePolicy::default();
    // One H100: about 90 units of 2^40 arguments per second.
    let h100 = Some(90.0 * 2f64.powi(40));
    assert_eq!(lease_size(&p, 60, h100, 40, Held::default(), 1), 5400);
    // Holding one minute, it may take the next minute early ...
    let one = Held {
        units: 5400,
        arguments: 5400.0 * 2f64.powi(40),
    };
    assert_eq!(lease_size(&p, 60, h100, 40, one, 1), 5400);
    // ... but not more than ten minutes in all.
    let nine = Held {
        units: 9 * 5400 + 10,
        arguments: (9.0 * 5400.0 + 10.0) * 2f64.powi(40),
    };
    assert_eq!(lease_size(&p, 60, h100, 40, nine, 1), 5390);
    let ten = Held {
        units: 10 * 5400,
        arguments: 10.0 * 5400.0 * 2f64.powi(40),
    };
    assert_eq!(lease_size(&p, 60, h100, 40, ten, 1), 0);
    // A slow CPU still gets one unit of 2^44 when it holds nothing.
    assert_eq!(lease_size(&p, 60, Some(1e9), 44, Held::default(), 1), 1);
}

proptest! {
    /// A lease is at least one unit when the worker holds nothing, never more than the
    /// per-lease cap, about the asked seconds (never more than one unit over), and it never
    /// takes a measured worker's holding past its share (except the one unit of a worker
    /// holding nothing).
    #[test]
    fn lease_sizes_respect_time_and_share(
        seconds in 1u32..=21_600,
        speed in proptest::option::of(1e-3f64..1e15),
        unit_bits in 0u32..=62,
        held_units in 0i64..100_000,
        held_fraction in 0.0f64..2.0,
        max_units in 1u32..=100_000,
        max_held_seconds in 1u32..=86_400,
        max_per_worker in 1u32..=1000,
        first in 1u32..=4096,
    ) {
        let p = LeasePolicy {
            max_units,
            max_held_seconds,
            max_units_per_worker: max_per_worker,
            ..LeasePolicy::default()
        };
        let per_unit = 2f64.powi(unit_bits as i32);
        let share = speed.map_or(0.0, |v| v * f64::from(max_held_seconds));
        let held = Held {
            units: held_units,
            arguments: if held_units == 0 { 0.0 } else { share * held_fraction },
        };
        let n = lease_size(&p, seconds, speed, unit_bits, held, first);
        prop_assert!(n <= max_units);
        match speed {
            // An unmeasured worker gets the units it computes at once, within both caps.
            None => {
                let room = (i64::from(max_per_worker) - held_units).max(0);
                prop_assert_eq!(i64::from(n), i64::from(first.min(max_units)).min(room));
            }
            Some(v) => {
                if held_units == 0 {
                    prop_assert!(n >= 1);
                }
                let asked = f64::from(seconds) * v;
                prop_assert!(n <= 1 || f64::from(n) * per_unit <= asked * (1.0 + 1e-9));
                let after = held.arguments + f64::from(n) * per_unit;
                prop_assert!(
                    (held_units == 0 && n == 1) || n == 0 || after <= share * (1.0 + 1e-9)
                );
                // Faster workers never get fewer units.
                let faster = lease_size(&p, seconds, Some(v * 2.0), unit_bits, Held {
                    units: held_units,
                    arguments: held.arguments,
                }, first);
                prop_assert!(faster >= n);
            }
        }
    }
}

#[test]
fn campaign_validation_names_the_bad_field() {
    let ok = CreateCampaign {
        name: None,
        function: "exp".into(),
        format: Some("binary32".into()),
        precision: None,
        min_bits: 16,
        ranges: vec![tmd_wire::ArgRange {
            from: "1".into(),
            to: "2".into(),
        }],
        ..Default::default()
    };
    let v = validate_campaign(&ok).unwrap();
    assert_eq!(v.name, "exp-binary32");
    assert_eq!(v.replication, 2);
    let msg = |c: CreateCampaign| validate_campaign(&c).unwrap_err().to_string();
    // Whole instead of ranges, never both, never neither.
    let whole = validate_campaign(&CreateCampaign {
        ranges: Vec::new(),
        whole: Some(true),
        ..ok.clone()
    })
    .unwrap();
    assert!(whole.whole && whole.ranges.is_empty());
    assert!(msg(CreateCampaign {
        whole: Some(true),
        ..ok.clone()
    })
    .contains("not both"));
    assert!(msg(CreateCampaign {
        ranges: Vec::new(),
        ..ok.clone()
    })
    .contains("at least one range"));
    assert!(msg(CreateCampaign {
        precision: Some(24),
        ..ok.clone()
    })
    .contains("not both"));
    assert!(msg(CreateCampaign {
        format: None,
        ..ok.clone()
    })
    .contains("format"));
    assert!(msg(CreateCampaign {
        ranges: vec![],
        ..ok.clone()
    })
    .contains("ranges"));
    assert!(msg(CreateCampaign {
        min_bits: 0,
        ..ok.clone()
    })
    .contains("min_bits"));
    assert!(msg(CreateCampaign {
        replication: Some(0),
        ..ok.clone()
    })
    .contains("replication"));
    assert!(msg(CreateCampaign {
        unit_bits: Some(63),
        ..ok.clone()
    })
    .contains("unit_bits"));
    assert!(msg(CreateCampaign {
        adaptive: Some(true),
        trust_all_workers: Some(true),
        ..ok.clone()
    })
    .contains("replication >= 2"));
    // Safe by default: two agreeing results from different owners; one alone only when the
    // operator says every worker is trusted, and never both.
    let default = validate_campaign(&ok).unwrap();
    assert_eq!(default.replication, 2);
    assert!(default.distinct_owners && !default.trust_all_workers);
    assert!(msg(CreateCampaign {
        replication: Some(1),
        ..ok.clone()
    })
    .contains("trust_all_workers"));
    let farm = validate_campaign(&CreateCampaign {
        trust_all_workers: Some(true),
        ..ok.clone()
    })
    .unwrap();
    assert!(farm.trust_all_workers && farm.replication == 1);
    assert!(msg(CreateCampaign {
        trust_all_workers: Some(true),
        replication: Some(3),
        ..ok.clone()
    })
    .contains("contradicts"));
    assert!(msg(CreateCampaign {
        replication: Some(2),
        adaptive: Some(true),
        audit_rate: Some(0.0),
        ..ok.clone()
    })
    .contains("audit_rate"));
    assert!(msg(CreateCampaign {
        trust_after: Some(0),
        ..ok.clone()
    })
    .contains("trust_after"));
    let v = validate_campaign(&CreateCampaign {
        replication: Some(2),
        adaptive: Some(true),
        ..ok.clone()
    })
    .unwrap();
    assert!(v.adaptive && v.audit_rate == 0.1 && v.trust_after == 20);
}

#[test]
fn invisible_characters_are_refused_in_texts_people_read() {
    for bad in [
        "hon\u{200b}est",
        "evil\u{202e}txt.exe",
        "tag\u{e0041}",
        "\u{2066}x",
        "soft\u{ad}hyphen",
        "bom\u{feff}",
    ] {
        let e = check_text("name", bad, 200).unwrap_err();
        assert!(e.to_string().contains("invisible"), "{bad:?}: {e}");
    }
    assert_eq!(
        check_text("name", " Zoë's GPU 4090 ", 200).unwrap(),
        "Zoë's GPU 4090"
    );
    assert_eq!(check_text("owner", "東京大学", 200).unwrap(), "東京大学");
}

#[test]
fn only_sensible_campaign_transitions() {
    use CampaignState::*;
    assert!(transition_allowed(Active, Paused));
    assert!(transition_allowed(Paused, Active));
    assert!(transition_allowed(Paused, Cancelled));
    assert!(!transition_allowed(Cancelled, Active));
    assert!(!transition_allowed(Active, Active));
}

/// The engine's threshold is at most 60 bits (phase 3 keeps 64 bits of
/// each fraction); the server refused only above 256.
#[test]
fn min_bits_above_the_engines_limit_is_refused() {
    let c = CreateCampaign {
        function: "exp".into(),
        format: Some("binary64".into()),
        min_bits: 61,
        ranges: vec![tmd_wire::ArgRange {
            from: "1".into(),
            to: "2".into(),
        }],
        ..Default::default()
    };
    let e = validate_campaign(&c).unwrap_err().to_string();
    assert!(e.contains("min_bits") && e.contains("60"), "{e}");
    assert!(validate_campaign(&CreateCampaign { min_bits: 60, ..c }).is_ok());
}

#[test]
fn an_unmeasured_worker_gets_a_few_rounds_of_its_units_in_flight() {
    assert_eq!(first_lease_units(None), 1);
    assert_eq!(first_lease_units(Some(1)), FIRST_LEASE_ROUNDS);
    assert_eq!(first_lease_units(Some(16)), 16 * FIRST_LEASE_ROUNDS);
    let p = LeasePolicy {
        max_units: 100,
        max_units_per_worker: 1000,
        ..LeasePolicy::default()
    };
    // Capped like any unmeasured lease.
    let held = Held::default();
    assert_eq!(
        lease_size(&p, 60, None, 30, held, first_lease_units(Some(4096))),
        100
    );
    assert_eq!(
        lease_size(&p, 60, None, 30, held, first_lease_units(Some(8))),
        8 * FIRST_LEASE_ROUNDS
    );
}

#[test]
fn a_lease_of_scattered_units_holds_exactly_its_seqs() {
    let scattered = LeaseRow {
        first_seq: 2,
        unit_count: 3,
        seqs: Some(vec![2, 4, 9]),
        ..lease()
    };
    assert!(scattered.holds_seq(4) && scattered.holds_seq(9) && scattered.holds_seq(2));
    assert!(!scattered.holds_seq(3) && !scattered.holds_seq(5) && !scattered.holds_seq(10));
    let d = "a".repeat(64);
    let u = UnitRow { seq: 4, ..unit() };
    assert_eq!(
        judge_post(1, 100, Some(&scattered), Some(&u), None, &d).unwrap(),
        Judgement::Accept
    );
    let outside = UnitRow { seq: 3, ..unit() };
    assert_eq!(
        code(judge_post(
            1,
            100,
            Some(&scattered),
            Some(&outside),
            None,
            &d
        )),
        "lease_mismatch"
    );
}

#[test]
fn a_lease_takes_a_share_of_the_pending_units_never_below_the_floor() {
    assert_eq!(pending_cap(58_640, 0.05), 2_932);
    assert_eq!(pending_cap(100, 0.05), LEASE_CAP_FLOOR);
    assert_eq!(pending_cap(0, 0.05), LEASE_CAP_FLOOR);
    assert_eq!(pending_cap(1_000, 1.0), 1_000);
    assert_eq!(pending_cap(1_000, f64::NAN), 1_000);
}

#[test]
fn worker_state_follows_the_heartbeat_and_the_lease_lifetime() {
    use tmd_wire::WorkerState;
    let now = chrono::Utc::now();
    let ago = |s: i64| Some(now - chrono::Duration::seconds(s));
    // Default lease lifetime 300 s: heartbeats every 100 s.
    assert_eq!(worker_state(ago(5), false, now, 300), WorkerState::Active);
    assert_eq!(worker_state(ago(150), false, now, 300), WorkerState::Active);
    assert_eq!(worker_state(ago(170), false, now, 300), WorkerState::Stale);
    assert_eq!(worker_state(ago(599), false, now, 300), WorkerState::Stale);
    assert_eq!(
        worker_state(ago(600), false, now, 300),
        WorkerState::Offline
    );
    // Never heard from, or revoked: offline whatever the clock says.
    assert_eq!(worker_state(None, false, now, 300), WorkerState::Offline);
    assert_eq!(worker_state(ago(1), true, now, 300), WorkerState::Offline);
    // The thresholds scale with the lifetime: 60 s leases heartbeat every 20 s.
    assert_eq!(worker_state(ago(90), false, now, 60), WorkerState::Stale);
    assert_eq!(worker_state(ago(130), false, now, 60), WorkerState::Offline);
}
