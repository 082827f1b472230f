//! Tests of the trust rules (`domain/trust.rs`): claims, settling, adaptive replication,
//! records and the quarantine bar.

use super::*;
use proptest::prelude::*;
use Verdict::*;

/// Settles complete results of workers not trusted: a plain vote.
fn vote(claims: &[&str], needed: u32, quorum: u32) -> (Settlement, Vec<Verdict>) {
    let replicas: Vec<Replica<'_>> = claims.iter().map(|c| Replica::plain(c)).collect();
    settle(&replicas, needed, quorum)
}

fn policy(adaptive: bool) -> ReplicationPolicy {
    ReplicationPolicy {
        quorum: 2,
        adaptive,
        audit_rate: 0.25,
        trust_after: 10,
    }
}

#[test]
fn the_claim_covers_counters_and_cases_but_not_their_order() {
    let unit = UnitSpec {
        negative: false,
        exponent: 0,
        first: 1 << 23,
        count: 16,
    };
    let stats = UnitStats {
        units: 1,
        domains: 4,
        ..Default::default()
    };
    let case = |x: &str| HrCase {
        x: x.into(),
        bits: 20,
        neg_log2_d: 44.0,
        kind: tmd_wire::HrKind::Fp,
        rounded: "0x1p+1".into(),
    };
    let a = claim_digest(
        &unit,
        &stats,
        &[case("0x1.8p+0"), case("0x1.4p+0")],
        &[],
        &[],
    );
    let b = claim_digest(
        &unit,
        &stats,
        &[case("0x1.4p+0"), case("0x1.8p+0")],
        &[],
        &[],
    );
    assert_eq!(a, b);
    assert_ne!(
        a,
        claim_digest(&unit, &stats, &[case("0x1.4p+0")], &[], &[])
    );
    let flipped = UnitStats {
        domains: 5,
        ..stats
    };
    assert_ne!(
        a,
        claim_digest(
            &unit,
            &flipped,
            &[case("0x1.8p+0"), case("0x1.4p+0")],
            &[],
            &[]
        )
    );
    let other_unit = UnitSpec {
        first: (1 << 23) + 16,
        ..unit
    };
    assert_ne!(
        claim_digest(&unit, &stats, &[], &[], &[]),
        claim_digest(&other_unit, &stats, &[], &[], &[])
    );
    assert_ne!(
        claim_digest(&unit, &stats, &[], &[], &[]),
        claim_digest(&unit, &stats, &[], &["0x1p+0".into()], &[])
    );
    // Skipped runs are part of the claim; none leaves a claim as it was before them.
    let run = tmd_wire::SkippedRun {
        first: "0x1.00001p+0".into(),
        last: "0x1.00002p+0".into(),
        count: 9,
        reason: "overflow".into(),
        rule: String::new(),
    };
    let plain = claim_digest(&unit, &stats, &[], &[], &[]);
    let with_run = claim_digest(&unit, &stats, &[], &[], std::slice::from_ref(&run));
    assert_ne!(plain, with_run);
    let other_reason = tmd_wire::SkippedRun {
        reason: "underflow".into(),
        ..run
    };
    assert_ne!(
        with_run,
        claim_digest(&unit, &stats, &[], &[], &[other_reason])
    );
}

#[test]
fn agreeing_replicas_settle_a_unit_at_its_quorum() {
    assert_eq!(vote(&["a"], 2, 2), (Settlement::Open, vec![Pending]));
    assert_eq!(
        vote(&["a", "a"], 2, 2),
        (Settlement::Done("a".into()), vec![Agreed, Agreed])
    );
    assert_eq!(
        vote(&["a"], 1, 2),
        (Settlement::Done("a".into()), vec![Alone])
    );
    assert_eq!(
        vote(&["a"], 1, 1),
        (Settlement::Done("a".into()), vec![Alone])
    );
    assert_eq!(vote(&[], 1, 1).0, Settlement::Open);
}

#[test]
fn a_dispute_takes_another_replica_and_the_majority_wins() {
    assert_eq!(vote(&["a", "b"], 2, 2).0, Settlement::Open);
    assert_eq!(
        vote(&["a", "b", "a"], 2, 2),
        (Settlement::Done("a".into()), vec![Agreed, Outvoted, Agreed])
    );
    assert_eq!(
        vote(&["b", "a", "a"], 2, 2),
        (Settlement::Done("a".into()), vec![Outvoted, Agreed, Agreed])
    );
    // Three different answers: no majority yet, and 2 of 4 is not one either.
    assert_eq!(vote(&["a", "b", "c"], 2, 2).0, Settlement::Open);
    assert_eq!(vote(&["a", "b", "c", "a"], 2, 2).0, Settlement::Open);
    assert_eq!(
        vote(&["a", "b", "c", "a", "a"], 2, 2).0,
        Settlement::Done("a".into())
    );
    // The adaptive discount does not settle a dispute: two must agree.
    assert_eq!(vote(&["a", "b"], 1, 2).0, Settlement::Open);
    // With quorum 3 a dispute needs three agreeing results.
    assert_eq!(vote(&["a", "a", "b"], 3, 3).0, Settlement::Open);
    assert_eq!(
        vote(&["a", "a", "b", "a"], 3, 3).0,
        Settlement::Done("a".into())
    );
}

#[test]
fn endless_disputes_are_quarantined() {
    assert_eq!(
        vote(&["a", "b", "c", "d", "e", "f"], 2, 2).0,
        Settlement::Undecidable
    );
    assert_eq!(
        vote(&["a", "b", "a", "b", "a", "b"], 2, 2).0,
        Settlement::Undecidable
    );
}

#[test]
fn only_trusted_workers_skip_replicas_and_only_when_not_audited() {
    let p = policy(true);
    assert_eq!(replicas_needed(&p, false, 9, 0.99), 2);
    assert_eq!(replicas_needed(&p, false, 10, 0.99), 1);
    assert_eq!(replicas_needed(&p, false, 10, 0.25), 1);
    assert_eq!(replicas_needed(&p, false, 10, 0.2499), 2);
    assert_eq!(replicas_needed(&policy(false), false, 1000, 0.99), 2);
    // A lab's machine stands alone from its first result.
    assert_eq!(replicas_needed(&policy(false), true, 0, 0.0), 1);
}

#[test]
fn a_result_missing_a_verified_case_never_wins_and_the_honest_one_is_not_outvoted() {
    let honest = Replica::plain("cases");
    let liar = Replica {
        missing: Missing::Proven,
        ..Replica::plain("empty")
    };
    // Two colluders against one honest result with the verified cases: they are refuted,
    // the honest result waits for a partner, never outvoted.
    assert_eq!(
        settle(&[honest, liar, liar], 2, 2),
        (Settlement::Open, vec![Pending, Refuted, Refuted])
    );
    assert_eq!(
        settle(&[liar, honest, liar, honest], 2, 2),
        (
            Settlement::Done("cases".into()),
            vec![Refuted, Agreed, Refuted, Agreed]
        )
    );
    // Liars alone never settle, and never count towards the replicas' cap.
    assert_eq!(settle(&[liar; 8], 1, 2).0, Settlement::Open);
    assert_eq!(settle(&[liar], 1, 1).1, vec![Refuted]);
}

#[test]
fn a_trusted_result_stands_alone_and_breaks_ties() {
    let lab = |c| Replica {
        trusted: true,
        ..Replica::plain(c)
    };
    assert_eq!(
        settle(&[lab("a")], 1, 2),
        (Settlement::Done("a".into()), vec![Alone])
    );
    assert_eq!(
        settle(&[Replica::plain("a"), Replica::plain("b"), lab("b")], 2, 2),
        (Settlement::Done("b".into()), vec![Outvoted, Agreed, Agreed])
    );
    // Two labs that disagree decide nothing; the vote goes on.
    assert_eq!(settle(&[lab("a"), lab("b")], 1, 2).0, Settlement::Open);
    // A lab's result that misses a verified case is refuted like any other.
    let wrong_lab = Replica {
        missing: Missing::Proven,
        ..lab("x")
    };
    assert_eq!(
        settle(&[wrong_lab, Replica::plain("a")], 2, 2),
        (Settlement::Open, vec![Refuted, Pending])
    );
}

/// A replica of engine version `engine` with `counters` (its full claim) and `cases`.
fn of<'a>(engine: i32, counters: &'a str, cases: &'a str) -> Replica<'a> {
    Replica {
        engine,
        cases,
        ..Replica::plain(counters)
    }
}

#[test]
fn versions_are_compared_by_their_cases_and_counters_within_a_version() {
    // Version 1 and version 2 count domains differently: honest results of both agree on the
    // cases, and settle the unit together.
    assert_eq!(
        settle(&[of(1, "old", "x"), of(2, "new", "x")], 2, 2),
        (Settlement::Done("x".into()), vec![Agreed, Agreed])
    );
    // A liar labelled with the other version is outvoted on its cases like anyone else ...
    assert_eq!(
        settle(
            &[of(2, "new", "x"), of(1, "old-lie", "y"), of(2, "new", "x")],
            2,
            2
        ),
        (Settlement::Done("x".into()), vec![Agreed, Outvoted, Agreed])
    );
    // ... and one honest result beside it does not leave the unit pending for ever: a third
    // replica decides.
    assert_eq!(
        settle(&[of(2, "new", "x"), of(1, "old-lie", "y")], 2, 2),
        (Settlement::Open, vec![Pending, Pending])
    );
    // Within a version the counters are compared: a liar that copies the cases but not the
    // work is outvoted by its version's majority ...
    assert_eq!(
        settle(
            &[of(2, "new", "x"), of(2, "lazy", "x"), of(2, "new", "x")],
            2,
            2
        ),
        (Settlement::Done("x".into()), vec![Agreed, Outvoted, Agreed])
    );
    // ... and without a majority of counters the unit takes another replica.
    assert_eq!(
        settle(&[of(2, "new", "x"), of(2, "lazy", "x")], 2, 2),
        (Settlement::Open, vec![Pending, Pending])
    );
    assert_eq!(
        settle(
            &[of(2, "new", "x"), of(2, "lazy", "x"), of(1, "old", "x")],
            2,
            2
        )
        .0,
        Settlement::Open
    );
    // Proof is not a vote: a result of any version that misses a verified case is refuted.
    let missing = Replica {
        missing: Missing::Proven,
        ..of(1, "empty", "none")
    };
    assert_eq!(
        settle(&[missing, of(2, "new", "x"), of(2, "new", "x")], 2, 2),
        (Settlement::Done("x".into()), vec![Refuted, Agreed, Agreed])
    );
    // A trusted result decides the cases; another version's result that agrees is agreed.
    let lab = Replica {
        trusted: true,
        ..of(2, "lab", "x")
    };
    assert_eq!(
        settle(&[of(1, "old", "x"), lab], 2, 2),
        (Settlement::Done("x".into()), vec![Agreed, Agreed])
    );
    assert_eq!(
        settle(&[of(1, "old", "y"), lab], 2, 2),
        (Settlement::Done("x".into()), vec![Outvoted, Alone])
    );
    // Disputes count over every version.
    let many = vec![
        of(2, "a", "a"),
        of(1, "b", "b"),
        of(2, "c", "c"),
        of(1, "a", "a"),
        of(2, "b", "b"),
        of(1, "c", "c"),
    ];
    assert_eq!(settle(&many, 2, 2).0, Settlement::Undecidable);
    assert_eq!(settle(&many[..4], 2, 2).0, Settlement::Open);
}

#[test]
fn an_implausible_count_settles_nothing_without_one_more_replica() {
    let low = Replica {
        implausible: true,
        ..Replica::plain("empty")
    };
    // Two colluders claiming nothing where many cases are expected: a third replica decides.
    assert_eq!(
        settle(&[low, low], 2, 2),
        (Settlement::Open, vec![Pending, Pending])
    );
    assert_eq!(
        settle(&[low, low, low], 2, 2),
        (
            Settlement::Done("empty".into()),
            vec![Agreed, Agreed, Agreed]
        )
    );
    // An honest third with the cases refutes them (by proof), or outvotes them here.
    assert_eq!(
        settle(
            &[low, Replica::plain("cases"), Replica::plain("cases")],
            2,
            2
        ),
        (
            Settlement::Done("cases".into()),
            vec![Outvoted, Agreed, Agreed]
        )
    );
    // A trusted result settles alone, whatever the others' counts.
    let lab = Replica {
        trusted: true,
        ..Replica::plain("empty")
    };
    assert_eq!(
        settle(&[low, lab], 2, 2),
        (Settlement::Done("empty".into()), vec![Agreed, Agreed])
    );
    // Under adaptive replication's discount, an implausible count needs a partner.
    assert_eq!(settle(&[low], 1, 2).0, Settlement::Open);
}

#[test]
fn a_case_only_volunteers_report_and_the_lab_lacks_holds_the_unit_for_a_person() {
    let set = |xs: &[&str]| -> HashSet<String> { xs.iter().map(|x| x.to_string()).collect() };
    let facts = UnitFacts {
        all: set(&["a", "b", "p"]),
        known: HashSet::new(),
    };
    let planter = set(&["a", "b", "p"]);
    let honest = set(&["a", "b"]);
    let sets = [
        CaseSet {
            xs: Some(&planter),
            count: 3,
            trusted: false,
        },
        CaseSet {
            xs: Some(&honest),
            count: 2,
            trusted: false,
        },
        CaseSet {
            xs: Some(&honest),
            count: 2,
            trusted: true,
        },
    ];
    // The lab lacks `p`, which only a volunteer reported: contested, nobody is refuted.
    assert_eq!(
        missing_cases(&sets, &facts),
        vec![Missing::None, Missing::Contested, Missing::Contested]
    );
    let replicas: Vec<Replica<'_>> = [Missing::None, Missing::Contested, Missing::Contested]
        .iter()
        .map(|&missing| Replica {
            missing,
            ..Replica::plain("c")
        })
        .collect();
    assert_eq!(
        settle(&replicas, 2, 2),
        (Settlement::Disputed, vec![Pending, Pending, Pending])
    );
    // Without the lab, a volunteer lacking it is refuted as before.
    assert_eq!(
        missing_cases(&sets[..2], &facts),
        vec![Missing::None, Missing::Proven]
    );
    // Loaded as a known case, `p` is confirmed: the lab is refuted.
    let confirmed = UnitFacts {
        known: set(&["p"]),
        ..facts.clone()
    };
    assert_eq!(
        missing_cases(&sets, &confirmed),
        vec![Missing::None, Missing::Proven, Missing::Proven]
    );
    // A case the lab reported refutes whoever lacks it.
    let lab_full = set(&["a", "b", "p"]);
    let with_lab = [
        sets[1],
        CaseSet {
            xs: Some(&lab_full),
            count: 3,
            trusted: true,
        },
    ];
    assert_eq!(
        missing_cases(&with_lab, &facts),
        vec![Missing::Proven, Missing::None]
    );
    // Sets, not counts: a result with a removed case in place of a missing one is incomplete.
    let swapped = set(&["a", "removed"]);
    assert_eq!(
        missing_cases(
            &[CaseSet {
                xs: Some(&swapped),
                count: 2,
                trusted: false
            }],
            &UnitFacts {
                all: set(&["a", "b"]),
                known: HashSet::new()
            }
        ),
        vec![Missing::Proven]
    );
    // Results recorded before their sets were kept are judged by their count.
    assert_eq!(
        missing_cases(
            &[
                CaseSet {
                    xs: None,
                    count: 2,
                    trusted: false
                },
                CaseSet {
                    xs: None,
                    count: 1,
                    trusted: false
                }
            ],
            &UnitFacts {
                all: set(&["a", "b"]),
                known: HashSet::new()
            }
        ),
        vec![Missing::None, Missing::Proven]
    );
}

#[test]
fn records_count_current_verdicts_and_streaks_break_on_defeat() {
    assert_eq!(
        RecordDelta::of(Pending, Agreed),
        RecordDelta {
            valid: 1,
            streak_add: 1,
            ..Default::default()
        }
    );
    assert_eq!(
        RecordDelta::of(Pending, Outvoted),
        RecordDelta {
            invalid: 1,
            streak_reset: true,
            ..Default::default()
        }
    );
    // Taken back when the partner turned out to be a liar.
    assert_eq!(
        RecordDelta::of(Agreed, Pending),
        RecordDelta {
            valid: -1,
            streak_add: -1,
            ..Default::default()
        }
    );
    assert_eq!(RecordDelta::of(Alone, Alone), RecordDelta::default());
    let d = RecordDelta::of(Pending, Agreed)
        .then(RecordDelta::of(Pending, Outvoted))
        .then(RecordDelta::of(Pending, Agreed));
    assert_eq!(
        d,
        RecordDelta {
            valid: 2,
            invalid: 1,
            refuted: 0,
            streak_add: 1,
            streak_reset: true
        }
    );
}

#[test]
fn the_bar_quarantines_forgers_liars_and_no_shows_but_not_honest_workers() {
    let bar = QuarantineBar::default();
    let honest = WorkerReputation {
        valid: 500,
        leases_total: 40,
        leases_expired: 2,
        streak: 500,
        ..Default::default()
    };
    assert_eq!(quarantine_reason(&honest, 500, &bar), None);
    let forger = WorkerReputation {
        forged: 1,
        ..honest
    };
    assert!(quarantine_reason(&forger, 0, &bar)
        .unwrap()
        .contains("refutes"));
    let liar = WorkerReputation {
        valid: 0,
        invalid: 3,
        ..Default::default()
    };
    assert!(quarantine_reason(&liar, 0, &bar)
        .unwrap()
        .contains("outvoted"));
    // A new honest worker outvoted once (by two colluders, say) is not expelled for it.
    let outvoted_once = WorkerReputation {
        invalid: 1,
        ..Default::default()
    };
    assert_eq!(quarantine_reason(&outvoted_once, 0, &bar), None);
    // Failures count against what the worker finished; leases released untouched do not
    // dilute them.
    let saboteur = WorkerReputation {
        leases_total: 1000,
        failed_units: 512,
        ..Default::default()
    };
    assert!(quarantine_reason(&saboteur, 0, &bar)
        .unwrap()
        .contains("failed"));
    let flaky = WorkerReputation {
        failed_units: 5,
        ..Default::default()
    };
    assert_eq!(quarantine_reason(&flaky, 100, &bar), None);
    // One bad result in a hundred is under a 5% bar.
    let unlucky = WorkerReputation {
        valid: 99,
        invalid: 1,
        ..Default::default()
    };
    assert_eq!(quarantine_reason(&unlucky, 0, &bar), None);
    let late = WorkerReputation {
        leases_total: 6,
        leases_expired: 5,
        ..Default::default()
    };
    assert!(quarantine_reason(&late, 0, &bar)
        .unwrap()
        .contains("expired"));
    let crashed_once = WorkerReputation {
        leases_total: 1,
        leases_expired: 1,
        ..Default::default()
    };
    assert_eq!(quarantine_reason(&crashed_once, 0, &bar), None);
    let omitter = WorkerReputation {
        refuted: 1,
        ..honest
    };
    assert!(quarantine_reason(&omitter, 500, &bar)
        .unwrap()
        .contains("left out"));
    // A hoarder that heartbeats and gives its leases back untouched, or posts one unit of each
    // and gives the rest back; an honest worker restarted now and then gives some units back
    // per restart and is not expelled for it.
    let hoarder = WorkerReputation {
        leases_idle: 5,
        units_leased: 5,
        units_idle: 5,
        ..Default::default()
    };
    assert!(quarantine_reason(&hoarder, 0, &bar)
        .unwrap()
        .contains("untouched"));
    let partial = WorkerReputation {
        leases_total: 12,
        leases_idle: 12,
        units_leased: 12 * 32,
        units_idle: 12 * 31,
        ..Default::default()
    };
    assert!(quarantine_reason(&partial, 12, &bar)
        .unwrap()
        .contains("untouched"));
    let restarted = WorkerReputation {
        leases_idle: 6,
        units_leased: 5000,
        units_idle: 600,
        ..honest
    };
    assert_eq!(quarantine_reason(&restarted, 500, &bar), None);
    let costly = WorkerReputation {
        verify_overruns: 3,
        ..honest
    };
    assert!(quarantine_reason(&costly, 500, &bar)
        .unwrap()
        .contains("verification"));
}

#[test]
fn replicas_are_drawn_among_other_owners_preferring_volunteers_under_their_share() {
    use ReplicaPreference::{OverShare, Trusted, Volunteer};
    let k = |s: &str| s.to_string();
    let active = vec![
        (k("o:a"), Volunteer),
        (k("o:b"), Volunteer),
        (k("o:b"), Volunteer),
        (k("o:h"), Volunteer),
        (k("o:lab"), Trusted),
    ];
    // The first replica's owner is never drawn; the other volunteers equally, however many
    // workers; the lab's time goes to fresh units while volunteers can check each other.
    let taken = vec![k("o:a")];
    let mut seen = std::collections::BTreeMap::new();
    for i in 0..1000 {
        let key = draw_replica(&active, &taken, f64::from(i) / 1000.0).unwrap();
        *seen.entry(key).or_insert(0) += 1;
    }
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[&k("o:b")], 500);
    // An owner over its share is drawn only when nobody else is eligible, the lab before it.
    let over = vec![
        (k("o:b"), OverShare),
        (k("o:h"), Volunteer),
        (k("o:lab"), Trusted),
    ];
    for i in 0..10 {
        assert_eq!(
            draw_replica(&over, &taken, f64::from(i) / 10.0),
            Some(k("o:h"))
        );
        assert_eq!(
            draw_replica(&over[..1], &taken, f64::from(i) / 10.0),
            Some(k("o:b"))
        );
        let no_h = [over[0].clone(), over[2].clone()];
        assert_eq!(
            draw_replica(&no_h, &taken, f64::from(i) / 10.0),
            Some(k("o:lab"))
        );
    }
    // A key listed twice counts at its best.
    let twice = vec![
        (k("o:b"), OverShare),
        (k("o:b"), Volunteer),
        (k("o:lab"), Trusted),
    ];
    assert_eq!(draw_replica(&twice, &taken, 0.9), Some(k("o:b")));
    // Nobody eligible: no reservation.
    let all = [k("o:a"), k("o:b"), k("o:h"), k("o:lab")];
    assert_eq!(draw_replica(&active, &all, 0.5), None);
    assert_eq!(draw_replica(&[], &[], 0.99), None);
}

proptest! {
    /// A settled unit's winner is a strict majority of at least the quorum when results
    /// disagree, every loser is outvoted, and adding an agreeing result never unsettles it.
    #[test]
    fn settlements_are_majorities(claims in proptest::collection::vec(0u8..3, 0..8),
                                  quorum in 1u32..4, discount in proptest::bool::ANY) {
        let names: Vec<String> = claims.iter().map(|c| format!("c{c}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let needed = if discount { 1 } else { quorum };
        let (s, v) = vote(&refs, needed, quorum);
        prop_assert_eq!(v.len(), refs.len());
        if let Settlement::Done(w) = &s {
            let size = refs.iter().filter(|c| *c == w).count();
            let distinct: std::collections::HashSet<_> = refs.iter().collect();
            if distinct.len() > 1 {
                prop_assert!(2 * size > refs.len() && size >= quorum.max(2) as usize);
            } else {
                prop_assert!(size >= needed as usize);
            }
            for (c, v) in refs.iter().zip(&v) {
                prop_assert_eq!(*v == Outvoted, c != w);
            }
            let mut more = refs.clone();
            more.push(w.as_str());
            prop_assert_eq!(vote(&more, needed, quorum).0, Settlement::Done(w.clone()));
        } else {
            prop_assert!(v.iter().all(|v| *v == Pending));
        }
    }

    /// With results of two engine versions whose counters agree within each version, the
    /// settlement is the one the cases alone give (the versions' counters never matter across
    /// versions).
    #[test]
    fn versions_are_settled_by_their_cases(results in proptest::collection::vec((1i32..3, 0u8..3), 0..10),
                                          quorum in 1u32..4) {
        let names: Vec<(i32, String, String)> = results
            .iter()
            .map(|(e, c)| (*e, format!("v{e}c{c}"), format!("c{c}")))
            .collect();
        let replicas: Vec<Replica<'_>> =
            names.iter().map(|(e, counters, cases)| of(*e, counters, cases)).collect();
        let cases_only: Vec<&str> = names.iter().map(|(_, _, c)| c.as_str()).collect();
        prop_assert_eq!(settle(&replicas, quorum, quorum), vote(&cases_only, quorum, quorum));
    }
}
