//! Tests of the server's calls to the engine: plans, re-verification, recomputed skipped runs.
use super::*;

fn unit_at_one(count: u64) -> UnitSpec {
    UnitSpec {
        negative: false,
        exponent: 0,
        first: 1 << 23,
        count,
    }
}

#[test]
fn arguments_are_located_in_their_unit_exactly() {
    let p = Precision::BINARY32;
    let u = unit_at_one(16);
    assert!(in_unit(p, &u, "0x1p+0"));
    assert!(in_unit(p, &u, "0x1.00001ep+0"));
    assert!(!in_unit(p, &u, "0x1.00002p+0"), "one past the unit");
    assert!(!in_unit(p, &u, "-0x1p+0"), "other sign");
    assert!(!in_unit(p, &u, "0x1p+1"), "other binade");
    assert!(!in_unit(p, &u, "0x1.000001p+0"), "not a binary32 number");
    assert!(!in_unit(p, &u, "garbage"));
    assert_eq!(
        locate(Format::bare(p), &u, "0x1p+0"),
        locate(Format::bare(p), &u, "0x2p-1"),
        "one key per argument"
    );
    assert_eq!(
        locate(Format::bare(p), &u, "0x1p+0"),
        locate(Format::bare(p), &u, "1.0")
    );
}

#[test]
fn farm_units_are_2_44_at_binary64_and_bounded_by_their_cases() {
    assert_eq!(default_unit_bits(53, 44), 44);
    assert_eq!(
        default_unit_bits(53, 32),
        41,
        "at most 2^10 expected HR-cases"
    );
    assert_eq!(
        default_unit_bits(24, 20),
        20,
        "binary32 as the engine's default"
    );
    // binary80: units of 2^50 (about 2 s of an H100 in [1, 2) at 54 bits).
    assert_eq!(default_unit_bits(64, 60), 50);
    assert_eq!(default_unit_bits(64, 54), 50);
    assert_eq!(default_unit_bits(8, 30), 12);
    for p in 8..=64 {
        for k in 1..=64 {
            let u = default_unit_bits(p, k);
            let most = if p > 53 { 50 } else { 44 };
            assert!(u <= most && u <= k + 9, "p {p} k {k}: {u}");
            // The server's refusal of campaigns whose results would overflow never fires
            // on a default.
            assert!(
                crate::domain::check_cases_fit(u, k, 10_000).is_ok(),
                "p {p} k {k}"
            );
        }
    }
}

/// A campaign of `function` in `format` at `min_bits` in units of `2^unit_bits`, over `ranges`
/// (none: the whole function), with `campaign create`'s defaults otherwise.
fn new_campaign(
    function: &str,
    format: &str,
    min_bits: u32,
    unit_bits: u32,
    ranges: &[(&str, &str)],
) -> NewCampaign {
    NewCampaign {
        name: "t".into(),
        function: function.into(),
        format: Some(format.into()),
        precision: None,
        min_bits,
        ranges: ranges
            .iter()
            .map(|(from, to)| tmd_wire::ArgRange {
                from: (*from).into(),
                to: (*to).into(),
            })
            .collect(),
        whole: ranges.is_empty(),
        unit_bits: Some(unit_bits),
        replication: 1,
        distinct_owners: false,
        adaptive: false,
        audit_rate: 0.1,
        trust_after: 20,
        trust_all_workers: false,
        priority: 0,
        reduction: true,
    }
}

#[test]
fn planning_resolves_names_and_refuses_overlaps() {
    let c = new_campaign("EXP", "binary32", 10, 20, &[("1", "2")]);
    let p = plan(&c, 100).unwrap();
    assert_eq!(
        (p.function.as_str(), p.precision, p.unit_bits),
        ("exp", 24, 20)
    );
    assert_eq!(p.units.len(), 8);
    assert!(plan(&c, 7).is_err(), "more units than allowed");
    assert_eq!(p.format.as_deref(), Some("binary32"));
    // Every named format is accepted with its precision, and keeps its name.
    for (name, bits, unit_bits) in [
        ("binary16", 11, 6),
        ("bfloat16", 8, 4),
        ("binary32", 24, 12),
        ("binary64", 53, 40),
        ("binary80", 64, 44),
        ("half", 11, 6),
        ("extended", 64, 44),
    ] {
        let p = plan(
            &NewCampaign {
                format: Some(name.into()),
                unit_bits: Some(unit_bits),
                ranges: vec![tmd_wire::ArgRange {
                    from: "1".into(),
                    to: "1.0625".into(),
                }],
                ..c.clone()
            },
            1 << 16,
        )
        .unwrap();
        assert_eq!(p.precision, bits, "{name}");
        let named = p.format.expect("a named format");
        assert_eq!(Format::named(&named).unwrap().precision.bits(), bits);
        assert!(stored_format(bits, Some(&named)).is_ok());
    }
    // A bare precision has no format: its exponent is unbounded, and says so.
    let p11 = NewCampaign {
        format: Some("p11".into()),
        ..c.clone()
    };
    let p = plan(&p11, 100).unwrap();
    assert_eq!((p.precision, p.format), (11, None));
    assert!(describe_format(11, None).contains("unbounded"));
    assert!(describe_format(11, Some("binary16")).contains("subnormal"));
    // Arguments of a named format are its normal numbers: beyond binary16's largest
    // binade nothing is left.
    let big = NewCampaign {
        format: Some("binary16".into()),
        ranges: vec![tmd_wire::ArgRange {
            from: "0x1p+16".into(),
            to: "0x1p+17".into(),
        }],
        unit_bits: Some(8),
        ..c.clone()
    };
    assert!(plan(&big, 100).is_err());
    let mut twice = c.clone();
    twice.ranges.push(tmd_wire::ArgRange {
        from: "1.5".into(),
        to: "3".into(),
    });
    assert!(plan(&twice, 100)
        .unwrap_err()
        .to_string()
        .contains("overlap"));
    let default = NewCampaign {
        unit_bits: None,
        ..c
    };
    assert_eq!(
        plan(&default, 1000).unwrap().unit_bits,
        tmd_kernels::plan::default_unit_bits(Precision::BINARY32).min(10 + 9)
    );
}

/// A whole campaign plans every finite argument of its format, stores the
/// domain as its one range, and refuses what is out of reach.
#[test]
fn whole_campaigns_plan_the_format_and_refuse_what_is_out_of_reach() {
    let c = new_campaign("exp", "binary16", 8, 6, &[]);
    let p = plan(&c, 1 << 20).unwrap();
    let (from, to) = (&p.ranges[0].from, &p.ranges[0].to);
    assert_eq!((from.as_str(), to.as_str()), ("-0x1.ffcp+15", "0x1p+16"));
    // Every finite binary16 number but -0: 2^16 - 2^11 (infinities, NaNs) - 1.
    let arguments: u64 = p.units.iter().map(|u| u.count).sum();
    assert_eq!(arguments, (1 << 16) - (1 << 11) - 1);
    assert!(
        p.units.iter().any(|u| u.count > 1 << 6),
        "nothing collapsed"
    );
    let sin80 = NewCampaign {
        function: "sin".into(),
        format: Some("binary80".into()),
        ..c.clone()
    };
    let e = plan(&sin80, 1 << 20).unwrap_err().to_string();
    assert!(e.contains("out of reach") && e.contains("0x1p+31"), "{e}");
    // binary64's are planned (in about a second: no binade's skipped runs are bisected): 4,096
    // units of 2^40 a binade from 2^20 on, both signs.
    let sin64 = NewCampaign {
        function: "sin".into(),
        format: Some("binary64".into()),
        unit_bits: Some(40),
        ..c.clone()
    };
    let p = plan(&sin64, 1 << 24).unwrap();
    let far = p.units.iter().filter(|u| u.exponent >= 20).count();
    assert_eq!(far, 2 * 4096 * (1024 - 20));
    let bare = NewCampaign {
        format: Some("p24".into()),
        ..c
    };
    assert!(plan(&bare, 1 << 20)
        .unwrap_err()
        .to_string()
        .contains("named format"));
}

/// The unit of binary16 significands `[first, first + count)` at `2^exponent`.
#[test]
fn a_binade_that_skips_nothing_answers_for_its_units() {
    let b64 = Format::named("binary64").unwrap();
    let lead = 1u64 << 52;
    let in_one = half_unit(false, 0, lead + (5 << 32), 1 << 32);
    // Unknown until learned (the first unit is recomputed), then answered for any unit.
    assert!(!skips_nothing("exp", b64, 40, &in_one));
    learn_binade("exp", b64, 40, &in_one);
    assert!(skips_nothing("exp", b64, 40, &in_one));
    assert!(check_skipped("exp", b64, 40, &in_one, &[])
        .unwrap()
        .is_empty());
    // The same binade for another function or min_bits is learned apart.
    assert!(!skips_nothing("sin", b64, 40, &in_one));
    assert!(!skips_nothing("exp", b64, 44, &in_one));
    // [512, 1024): exp overflows binary64 from about 709.78 on, so no unit there is answered
    // from the binade, and one beyond the edge has its run.
    let edge = half_unit(false, 9, lead + (lead >> 1), 1 << 32);
    learn_binade("exp", b64, 40, &edge);
    assert!(!skips_nothing("exp", b64, 40, &edge));
    let runs = check_skipped("exp", b64, 40, &edge, &[]);
    assert!(
        runs.is_err(),
        "a unit beyond 709.78 must list its overflow run"
    );
    // Near 0 a trivial rule reaches: never answered from the binade.
    let tiny = half_unit(false, -30, lead, 1 << 32);
    learn_binade("exp", b64, 40, &tiny);
    assert!(!skips_nothing("exp", b64, 40, &tiny));
    // Subnormal significands (below 2^(p-1) in binade emin) are outside the binade key.
    let sub = half_unit(false, -1022, 0, 1 << 32);
    learn_binade("exp", b64, 40, &sub);
    assert!(!skips_nothing("exp", b64, 40, &sub));
    // A function with poles is always recomputed.
    let t = half_unit(false, 0, lead, 1 << 32);
    learn_binade("tan", b64, 40, &t);
    assert!(!skips_nothing("tan", b64, 40, &t));
    // Far trivial runs depend on the cut (tanh near 1 in [64, 128)), and so do exact runs
    // (sinpi in [2^51, 2^52), every argument a half-integer): never answered from the
    // binade, and a unit there without its run is refused.
    for (f, e) in [("tanh", 6), ("sinpi", 51), ("exp2", 60)] {
        let far = half_unit(false, e, lead, 1 << 32);
        learn_binade(f, b64, 40, &far);
        assert!(!skips_nothing(f, b64, 40, &far), "{f}");
        assert!(
            !skips_nothing(f, Format::bare(Precision::new(53).unwrap()), 40, &far),
            "{f}"
        );
    }
    let far = half_unit(false, 6, lead, 1 << 32);
    assert!(
        check_skipped("tanh", b64, 40, &far, &[]).is_err(),
        "tanh's far run is required"
    );
}

fn half_unit(negative: bool, exponent: i32, first: u64, count: u64) -> UnitSpec {
    UnitSpec {
        negative,
        exponent,
        first,
        count,
    }
}

fn run(first: &str, last: &str, count: u64, reason: &str) -> SkippedRun {
    SkippedRun {
        first: first.into(),
        last: last.into(),
        count,
        reason: reason.into(),
        rule: String::new(),
    }
}

#[test]
fn skipped_runs_are_recomputed_and_a_forged_or_missing_run_is_refused() {
    let fmt = Format::named("binary16").unwrap();
    // exp on [8, 16) in binary16: overflow from log(2^16) = 11.09 on.
    let unit = half_unit(false, 3, 1024, 1024);
    let expected = check_skipped("exp", fmt, 10, &unit, &[]).unwrap_err();
    assert!(
        matches!(&expected, Error::ForgedCase(m) if m.contains("lists 0 runs") && m.contains("overflow")),
        "a missing run is refused: {expected}"
    );
    let engine = tmd_kernels::regions::skip::skipped_runs(
        Function::Exp,
        fmt,
        10,
        EngineUnit {
            negative: false,
            exponent: 3,
            first: 1024,
            count: 1024,
        },
    )
    .unwrap();
    assert_eq!(engine.len(), 1);
    let honest = run(
        &engine[0].first,
        &engine[0].last,
        engine[0].count,
        "overflow",
    );
    assert_eq!(honest.last, "0x1.ffcp+3");
    let stored = check_skipped("exp", fmt, 10, &unit, std::slice::from_ref(&honest)).unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].reason, "overflow");
    assert!(stored[0].rule.contains("emax"), "{}", stored[0].rule);
    // The same run spelled another way is the same run.
    let respelled = SkippedRun {
        last: "0x3.ff8p+2".into(),
        ..honest.clone()
    };
    let r = check_skipped("exp", fmt, 10, &unit, &[respelled]);
    assert!(r.is_ok(), "{r:?}");
    // Forged: one argument fewer, another reason, a run that starts elsewhere, an extra run.
    for forged in [
        vec![SkippedRun {
            count: honest.count - 1,
            ..honest.clone()
        }],
        vec![SkippedRun {
            reason: "underflow".into(),
            ..honest.clone()
        }],
        vec![SkippedRun {
            first: "0x1.8p+3".into(),
            ..honest.clone()
        }],
        vec![honest.clone(), run("0x1p+3", "0x1p+3", 1, "pole")],
    ] {
        let e = check_skipped("exp", fmt, 10, &unit, &forged).unwrap_err();
        assert!(matches!(e, Error::ForgedCase(_)), "{forged:?}: {e}");
    }
    // A unit in range skips nothing, and a run claimed there is refused.
    let calm = half_unit(false, 0, 1024, 1024);
    assert!(check_skipped("exp", fmt, 10, &calm, &[])
        .unwrap()
        .is_empty());
    assert!(check_skipped(
        "exp",
        fmt,
        10,
        &calm,
        &[run("0x1p+0", "0x1p+0", 1, "overflow")]
    )
    .is_err());
    // A bare precision of the same function has an unbounded exponent: nothing skipped.
    let bare = Format::bare(Precision::new(11).unwrap());
    assert!(skips_nothing("exp", bare, 10, &unit));
    assert!(!skips_nothing("exp", fmt, 10, &unit));
    assert!(
        !skips_nothing("tanpi", bare, 10, &unit),
        "poles are skipped in any format"
    );
    assert!(check_skipped("exp", bare, 10, &unit, &[])
        .unwrap()
        .is_empty());
}

/// A tie at `d = 1/2` (exp2(-26) = 2^-26 in binary16, halfway between 0 and the
/// midpoint 2^-25) is stored as `fp`, the convention of the engine's verification
/// (docs/error-analysis.md §7), whatever the worker said.
#[test]
fn ties_at_one_half_are_stored_as_fp() {
    let b16 = Format::named("binary16").unwrap();
    let unit = half_unit(true, 4, 0x680, 1);
    let case = HrCase {
        x: "-0x1.ap+4".into(),
        bits: 1,
        neg_log2_d: 1.0,
        kind: HrKind::Mid,
        rounded: "0x0p+0".into(),
    };
    let v = verify_result("exp2", b16, 1, &unit, &[case], &[], &CaseBounds::default()).unwrap();
    assert_eq!(
        (v[0].bits, v[0].kind, v[0].neg_log2_d),
        (1, HrKind::Fp, 1.0)
    );
}

#[test]
fn subnormal_results_are_verified_on_the_subnormal_grid() {
    // An example: exp(-0x1.8feebp+6) is about 16.3 bits hard on binary32's
    // subnormal grid, and -0x1.8ff9eap+6 (hard only with an unbounded exponent) is not.
    let b32 = Format::named("binary32").unwrap();
    let unit = UnitSpec {
        negative: true,
        exponent: 6,
        first: 0xc7f000,
        count: 4096,
    };
    let case = |x: &str| HrCase {
        x: x.into(),
        bits: 16,
        neg_log2_d: 40.0,
        kind: HrKind::Fp,
        rounded: "0x1p-140".into(),
    };
    let v = verify_result(
        "exp",
        b32,
        12,
        &unit,
        &[case("-0x1.8feebp+6")],
        &[],
        &CaseBounds::default(),
    )
    .unwrap();
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].bits, 16);
    let e = verify_result(
        "exp",
        b32,
        12,
        &unit,
        &[case("-0x1.8ff9eap+6")],
        &[],
        &CaseBounds::default(),
    )
    .unwrap_err();
    assert!(matches!(e, Error::ForgedCase(_)), "{e}");
    let p24 = Format::bare(Precision::BINARY32);
    assert!(verify_result(
        "exp",
        p24,
        12,
        &unit,
        &[case("-0x1.8ff9eap+6")],
        &[],
        &CaseBounds::default()
    )
    .is_ok());
}

/// A trivial run's arguments are all hard (expm1(x) rounds like x near 0, here with 16 bits
/// and more): MPFR confirms any of them, but an engine lists the run, never a case inside it,
/// so such a case is refused before MPFR; so is a case an admin removed, and a verification
/// past its deadline.
#[test]
fn cases_inside_skipped_runs_removed_or_late_are_refused() {
    let b32 = Format::named("binary32").unwrap();
    let unit = UnitSpec {
        negative: false,
        exponent: -40,
        first: 1 << 23,
        count: 1 << 23,
    };
    let runs = unit_runs("expm1", b32, 16, &unit).unwrap();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].reason, "trivial");
    let x = "0x1.000002p-40";
    let planted = HrCase {
        x: x.into(),
        bits: 30,
        neg_log2_d: 60.0,
        kind: HrKind::Fp,
        rounded: x.into(),
    };
    // MPFR alone confirms it: it is hard.
    assert!(verify_result(
        "expm1",
        b32,
        16,
        &unit,
        std::slice::from_ref(&planted),
        &[],
        &CaseBounds::default()
    )
    .is_ok());
    let bounds = CaseBounds {
        runs: &runs,
        ..CaseBounds::default()
    };
    let e = verify_result(
        "expm1",
        b32,
        16,
        &unit,
        std::slice::from_ref(&planted),
        &[],
        &bounds,
    )
    .unwrap_err();
    assert!(
        matches!(&e, Error::ForgedCase(m) if m.contains("skipped run") && m.contains("trivial")),
        "{e}"
    );
    assert!(run_holding(b32, &unit, &runs, (1 << 23) + 1).is_some());

    // A case an admin removed, however it is spelled.
    let exp_unit = unit_at_one(1024);
    let hard = HrCase {
        x: "0x1.000004p+0".into(),
        bits: 1,
        neg_log2_d: 1.0,
        kind: HrKind::Fp,
        rounded: "0x1p+0".into(),
    };
    let removed = vec![canonical_argument(b32, "0x2.000008p-1").unwrap()];
    let bounds = CaseBounds {
        removed: &removed,
        ..CaseBounds::default()
    };
    let e = verify_result(
        "exp",
        b32,
        1,
        &exp_unit,
        std::slice::from_ref(&hard),
        &[],
        &bounds,
    )
    .unwrap_err();
    assert!(
        matches!(&e, Error::ForgedCase(m) if m.contains("removed")),
        "{e}"
    );

    // A verification whose deadline has passed stops before MPFR.
    let bounds = CaseBounds {
        deadline: Some(std::time::Instant::now()),
        ..CaseBounds::default()
    };
    let e = verify_result("exp", b32, 1, &exp_unit, &[hard], &[], &bounds).unwrap_err();
    assert!(matches!(e, Error::VerifyBudget(_)), "{e}");
}

#[test]
fn adjacent_runs_of_one_reason_merge_across_units_and_binades() {
    use tmd_kernels::oracle::verify::SkipReason;
    let fmt = Format::named("binary32").unwrap();
    let run = |first: &str, last: &str, count: u64, reason: &str, rule: String| SkippedRun {
        first: first.into(),
        last: last.into(),
        count,
        reason: reason.into(),
        rule,
    };
    let trivial = |bits| {
        TrivialRun {
            like: "x".into(),
            bits,
        }
        .rule()
    };
    let under = SkipReason::Underflow.rule().to_string();
    let runs = vec![
        // Two binades of one trivial region, then a gap, then a run of another reason.
        run("0x1p-42", "0x1.fffffep-42", 1 << 23, "trivial", trivial(20)),
        run("0x1p-41", "0x1.fffffep-41", 1 << 23, "trivial", trivial(19)),
        run(
            "0x1.000002p-40",
            "0x1.fffffep-40",
            (1 << 23) - 1,
            "trivial",
            trivial(18),
        ),
        run(
            "0x1p-39",
            "0x1.fffffep-39",
            1 << 23,
            "underflow",
            under.clone(),
        ),
        // Negative numbers in value order: -2^-38 < ... < -2^-40.
        run(
            "-0x1.fffffep-39",
            "-0x1p-39",
            1 << 23,
            "underflow",
            under.clone(),
        ),
        run(
            "-0x1.fffffep-40",
            "-0x1p-40",
            1 << 23,
            "underflow",
            under.clone(),
        ),
    ];
    let mut sorted = runs.clone();
    sorted.rotate_left(4);
    let merged = merge_runs(fmt, sorted);
    assert_eq!(merged.len(), 4, "{merged:#?}");
    assert_eq!(
        (
            merged[0].first.as_str(),
            merged[0].last.as_str(),
            merged[0].count
        ),
        ("-0x1.fffffep-39", "-0x1p-40", 2 << 23)
    );
    assert_eq!(
        (
            merged[1].first.as_str(),
            merged[1].last.as_str(),
            merged[1].count
        ),
        ("0x1p-42", "0x1.fffffep-41", 2 << 23)
    );
    assert_eq!(merged[1].rule, trivial(19), "the fewest bits of the two");
    assert_eq!(
        merged[2].first, "0x1.000002p-40",
        "a gap of one number is kept"
    );
    assert_eq!(merged[3].reason, "underflow");
    // Different rules of one reason stay apart.
    let other = TrivialRun {
        like: "-x".into(),
        bits: 20,
    }
    .rule();
    let apart = vec![
        run("0x1p-42", "0x1.fffffep-42", 1 << 23, "trivial", trivial(20)),
        run("0x1p-41", "0x1.fffffep-41", 1 << 23, "trivial", other),
    ];
    assert_eq!(merge_runs(fmt, apart).len(), 2);
}

/// Up to 512 binades every one is planned; beyond, every k-th and the last, at most 513, and
/// each binade takes the cost of the planned one nearest to it.
#[test]
fn the_plan_weighs_many_binades_by_a_sample() {
    assert_eq!(planned_binades(3), [0, 1, 2]);
    assert_eq!(planned_binades(512).len(), 512);
    for n in [513, 1000, 2046, 32_766] {
        let p = planned_binades(n);
        assert!(p.len() <= MAX_PLANNED_BINADES + 1, "{n}: {}", p.len());
        assert_eq!((p[0], *p.last().unwrap()), (0, n - 1));
        assert!(p.windows(2).all(|w| w[0] < w[1]));
        for i in 0..n {
            let near = p[nearest_planned(&p, i)];
            let best = p.iter().map(|&q| q.abs_diff(i)).min().unwrap();
            assert_eq!(near.abs_diff(i), best, "{n}: binade {i}");
        }
    }
    assert_eq!(nearest_planned(&[0, 4, 8], 2), 0);
    assert_eq!(nearest_planned(&[0, 4, 8], 3), 1);
    assert_eq!(nearest_planned(&[0, 4, 8], 8), 2);
}

/// A range's plan collapses exp's overflowing units of [512, 1024) as a whole plan does
/// (but for the one the whole plan leaves alone at the edge), and its probes leave out any
/// unit the search skips whole: its binade weighs about what the whole plan's does, not the
/// nothing of its middle unit, which overflows.
#[test]
fn a_range_weighs_a_binade_by_its_units_the_search_runs() {
    let campaign = |whole: bool| {
        let range: &[(&str, &str)] = if whole { &[] } else { &[("512", "1024")] };
        new_campaign("exp", "binary64", 44, 44, range)
    };
    let cost = |whole: bool| {
        let p = plan(&campaign(whole), 1 << 20).unwrap();
        let fmt = stored_format(p.precision, p.format.as_deref()).unwrap();
        let samples: Vec<BinadeSample> = binade_samples(&p.units, p.unit_bits)
            .into_iter()
            .filter(|b| !b.negative && b.exponent == 9)
            .collect();
        assert_eq!(samples.len(), 1);
        let b = &samples[0];
        let costs = planned_costs("exp", fmt, 44, &samples).unwrap();
        (b.arguments, b.searched, b.probes.len(), costs[0].3)
    };
    let (args, range_searched, probes, range) = cost(false);
    assert_eq!((args, probes), (1 << 52, 9));
    let (args, searched, _, whole) = cost(true);
    assert_eq!(args, 1 << 52);
    assert!(searched < args / 2, "the whole plan collapses the overflow");
    assert_eq!(
        range_searched + (1 << 44),
        searched,
        "the range's plan collapses it"
    );
    // The middle unit (128 of 256) overflows: priced by it, the binade would weigh nothing.
    assert!(whole > 0.0 && range > 0.0, "whole {whole}, range {range}");
    let ratio = range / whole;
    assert!((0.8..1.25).contains(&ratio), "range / whole = {ratio}");
}

/// A campaign of a function with a reduction plans its base binades and keeps what it derives;
/// without the reduction, or for a function without one, it plans every binade and derives
/// nothing.
#[test]
fn campaigns_derive_what_the_reduction_covers() {
    let reduced = plan(&new_campaign("cbrt", "binary16", 6, 7, &[]), 100_000).unwrap();
    let every = plan(
        &NewCampaign {
            reduction: false,
            ..new_campaign("cbrt", "binary16", 6, 7, &[])
        },
        100_000,
    )
    .unwrap();
    let record = reduced.derivation.as_ref().expect("cbrt derives");
    assert_eq!(record.runs.len(), 4, "{:?}", record.runs);
    assert!(every.derivation.is_none());
    assert!(reduced.units.len() * 3 < every.units.len());
    let derived: u128 = record.runs.iter().map(|r| r.count).sum();
    let count = |p: &Plan| p.units.iter().map(|u| u128::from(u.count)).sum::<u128>();
    assert_eq!(
        count(&reduced) + derived,
        count(&every),
        "every argument once"
    );
    let exp = plan(&new_campaign("exp", "binary16", 6, 7, &[]), 100_000).unwrap();
    assert!(exp.derivation.is_none());
    let range = plan(
        &new_campaign("exp2", "binary16", 5, 6, &[("1", "16")]),
        100_000,
    )
    .unwrap();
    assert!(range.derivation.is_some(), "a range derives too");
    assert!(
        range.units.len() < 32,
        "{} of 64 units searched",
        range.units.len()
    );
}
