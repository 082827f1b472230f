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
        complete: false,
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
        complete: false,
        ..lab("x")
    };
    assert_eq!(
        settle(&[wrong_lab, Replica::plain("a")], 2, 2),
        (Settlement::Open, vec![Refuted, Pending])
    );
}

/// A replica of engine version `engine`.
fn of(engine: i32, claim: &str) -> Replica<'_> {
    Replica {
        engine,
        ..Replica::plain(claim)
    }
}

#[test]
fn results_of_another_engine_version_are_neither_agreed_nor_outvoted() {
    // Version 1 and version 2 count domains differently: honest results of both disagree in
    // their claims. Neither outvotes the other; the unit waits for a second result of one.
    assert_eq!(
        settle(&[of(1, "old"), of(2, "new")], 2, 2),
        (Settlement::Open, vec![Pending, Pending])
    );
    assert_eq!(
        settle(&[of(1, "old"), of(2, "new"), of(2, "new")], 2, 2),
        (
            Settlement::Done("new".into()),
            vec![Pending, Agreed, Agreed]
        )
    );
    // Two old results against one new: the old version settles; the new one is not judged.
    assert_eq!(
        settle(&[of(1, "old"), of(2, "new"), of(1, "old")], 2, 2),
        (
            Settlement::Done("old".into()),
            vec![Agreed, Pending, Agreed]
        )
    );
    // A liar within a version is still outvoted by its version's majority, whatever the
    // other version says.
    assert_eq!(
        settle(
            &[of(2, "new"), of(1, "old"), of(2, "lie"), of(2, "new")],
            2,
            2
        ),
        (
            Settlement::Done("new".into()),
            vec![Agreed, Pending, Outvoted, Agreed]
        )
    );
    // Proof is not a vote: a result of any version that misses a verified case is refuted.
    let missing = Replica {
        complete: false,
        ..of(1, "empty")
    };
    assert_eq!(
        settle(&[missing, of(2, "new"), of(2, "new")], 2, 2),
        (
            Settlement::Done("new".into()),
            vec![Refuted, Agreed, Agreed]
        )
    );
    // A trusted result decides for its version: the other version's result is not judged.
    let lab = Replica {
        trusted: true,
        ..of(2, "lab")
    };
    assert_eq!(
        settle(&[of(1, "old"), lab], 2, 2),
        (Settlement::Done("lab".into()), vec![Pending, Alone])
    );
    // Disputes count within a version: six results of one version without a majority
    // quarantine the unit however many of another version there are.
    let mut many = vec![
        of(2, "a"),
        of(2, "b"),
        of(2, "c"),
        of(2, "a"),
        of(2, "b"),
        of(2, "c"),
    ];
    many.insert(1, of(1, "old"));
    assert_eq!(settle(&many, 2, 2).0, Settlement::Undecidable);
    assert_eq!(settle(&many[..4], 2, 2).0, Settlement::Open);
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
    // A hoarder that heartbeats and gives its leases back untouched; an honest worker
    // restarted now and then gives one back per restart and is not expelled for it.
    let hoarder = WorkerReputation {
        leases_idle: 5,
        ..Default::default()
    };
    assert!(quarantine_reason(&hoarder, 0, &bar)
        .unwrap()
        .contains("without computing"));
    let restarted = WorkerReputation {
        leases_idle: 6,
        ..honest
    };
    assert_eq!(quarantine_reason(&restarted, 500, &bar), None);
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

    /// With results of two engine versions, a result is agreed or outvoted only by its own
    /// version's: the verdicts of the deciding version are those it gets alone, and the other
    /// version's results stay pending (none of these is refuted).
    #[test]
    fn versions_are_settled_apart(results in proptest::collection::vec((1i32..3, 0u8..3), 0..10),
                                  quorum in 1u32..4) {
        let names: Vec<(i32, String)> =
            results.iter().map(|(e, c)| (*e, format!("v{e}c{c}"))).collect();
        let replicas: Vec<Replica<'_>> = names.iter().map(|(e, c)| of(*e, c)).collect();
        let (s, v) = settle(&replicas, quorum, quorum);
        prop_assert_eq!(v.len(), replicas.len());
        let alone = |engine: i32| {
            let own: Vec<Replica<'_>> =
                replicas.iter().filter(|r| r.engine == engine).copied().collect();
            settle(&own, quorum, quorum)
        };
        match &s {
            Settlement::Done(w) => {
                let winner = replicas.iter().find(|r| r.claim == w.as_str()).unwrap().engine;
                let (own_s, own_v) = alone(winner);
                prop_assert_eq!(own_s, s.clone());
                let mut own_v = own_v.into_iter();
                for (r, v) in replicas.iter().zip(&v) {
                    if r.engine == winner {
                        prop_assert_eq!(Some(*v), own_v.next());
                    } else {
                        prop_assert_eq!(*v, Pending);
                    }
                }
            }
            _ => {
                prop_assert!(v.iter().all(|v| *v == Pending));
                for e in [1, 2] {
                    prop_assert!(!matches!(alone(e).0, Settlement::Done(_)));
                }
            }
        }
    }
}
