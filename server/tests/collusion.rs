//! Two colluding owners, ten identities each, against two honest volunteers under the default
//! trust policy (two agreeing results from different owners): the colluders claim every unit
//! has no case and echo each other. Replicas are drawn among the other active owners (not given
//! to whoever asks next), and a result claiming far fewer cases than the unit's expected count
//! needs a further replica; a lie then meets an honest result, which proves the missing cases.

mod common;

use common::engine::{honest_runs, result, true_cases};
use common::TestApp;
use reqwest::{Method, StatusCode};
use serde_json::json;
use std::collections::HashMap;
use tmd_kernels::Function;
use tmd_server::bench::WorkerClient;
use tmd_wire::{HrCase, UnitSpec};

/// A player of the game: an identity of a colluding owner, or an honest volunteer.
struct Player {
    id: i64,
    client: WorkerClient,
    colluder: bool,
    out: bool,
}

/// How the campaign ended.
#[derive(Debug)]
struct Outcome {
    units: i64,
    done: i64,
    /// Units settled with a colluder's (empty) result among those that settled them.
    settled_on_lies: i64,
    /// The colluders' results, and those voided when their owner was caught.
    lies: i64,
    lies_voided: i64,
    /// True cases missing from the campaign's record.
    cases_missing: usize,
    colluders_quarantined: usize,
    honest_quarantined: usize,
}

/// exp in binary32 at `min_bits` on [1, 1.125) in units of 2^13 arguments (128 units): a unit
/// holds about 8192 * 2^(1 - min_bits) cases.
async fn play(min_bits: u32) -> Outcome {
    let app = TestApp::new().await;
    let (status, c) = app
        .admin(
            Method::POST,
            "/api/v1/campaigns",
            Some(
                json!({"function": "exp", "format": "binary32", "min_bits": min_bits,
                   "unit_bits": 13, "ranges": [{"from": "0x1p+0", "to": "0x1.2p+0"}]}),
            ),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{c}");
    let id = c["id"].as_i64().unwrap();
    let mut players = Vec::new();
    for owner in ["mallory", "trudy"] {
        let (status, t) = app
            .admin(
                Method::POST,
                "/api/v1/enrollment-tokens",
                Some(json!({"owner": owner})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{t}");
        for i in 0..10 {
            let token = t["token"].as_str().unwrap();
            let (id, client) = app.register(token, &format!("{owner}-{i}")).await;
            players.push(Player {
                id,
                client,
                colluder: true,
                out: false,
            });
        }
    }
    for owner in ["alice", "bob"] {
        let (id, client) = app.enroll(json!({"owner": owner}), owner).await;
        players.push(Player {
            id,
            client,
            colluder: false,
            out: false,
        });
    }
    // Honest volunteers interleaved with the colluders, as requests arrive on a farm.
    players.swap(5, 20);
    players.swap(15, 21);

    let mut truth: HashMap<i64, Vec<HrCase>> = HashMap::new();
    let cases = |spec: &UnitSpec| true_cases(Function::Exp, "binary32", min_bits, spec);
    // A round that leases nothing ends the play only when the next few do too: a replica
    // reserved for an owner just quarantined is drawn again by the next claim or sweep.
    let mut idle_rounds = 0;
    for _round in 0..400 {
        let mut leased = 0;
        for p in players.iter_mut().filter(|p| !p.out) {
            let lease = match p.client.lease(Some(1)).await {
                Ok(r) => r.lease,
                Err(_) => {
                    p.out = true;
                    continue;
                }
            };
            let Some(lease) = lease else { continue };
            leased += 1;
            // Every unit of the lease: one left unposted would wait for the lease's expiry.
            for u in &lease.units {
                let truth = truth.entry(u.unit_id).or_insert_with(|| cases(&u.spec));
                let runs = honest_runs(Function::Exp, "binary32", min_bits, &u.spec);
                let claim: &[HrCase] = if p.colluder { &[] } else { truth };
                let r = result(&lease, u.unit_id, claim, &runs);
                if p.client.post(lease.lease_id, u.unit_id, &r).await.is_err() {
                    p.out = true;
                    break;
                }
            }
        }
        if leased > 0 {
            idle_rounds = 0;
            continue;
        }
        idle_rounds += 1;
        if idle_rounds > 10 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }

    let pool = app.db.pool();
    let (units, done): (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(*) FILTER (WHERE state = 'done') FROM units \
         WHERE campaign_id = $1",
    )
    .bind(id)
    .fetch_one(pool)
    .await
    .unwrap();
    let colluder_ids: Vec<i64> = players
        .iter()
        .filter(|p| p.colluder)
        .map(|p| p.id)
        .collect();
    let (settled_on_lies,): (i64,) = sqlx::query_as(
        "SELECT count(DISTINCT u.id) FROM units u JOIN results r ON r.unit_id = u.id \
         WHERE u.campaign_id = $1 AND u.state = 'done' AND NOT r.void \
           AND r.verdict IN ('agreed', 'alone') AND r.worker_id = ANY($2)",
    )
    .bind(id)
    .bind(&colluder_ids)
    .fetch_one(pool)
    .await
    .unwrap();
    let (lies, lies_voided): (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(*) FILTER (WHERE void) FROM results WHERE worker_id = ANY($1)",
    )
    .bind(&colluder_ids)
    .fetch_one(pool)
    .await
    .unwrap();
    let recorded: Vec<(String,)> = sqlx::query_as("SELECT x FROM hr_cases WHERE campaign_id = $1")
        .bind(id)
        .fetch_all(pool)
        .await
        .unwrap();
    let recorded: std::collections::HashSet<String> = recorded.into_iter().map(|r| r.0).collect();
    let cases_missing = truth
        .values()
        .flatten()
        .filter(|c| !recorded.contains(&c.x))
        .count();
    let mut quarantined = (0, 0);
    for p in &players {
        if app.worker_info(p.id).await["quarantined_at"].is_string() {
            if p.colluder {
                quarantined.0 += 1;
            } else {
                quarantined.1 += 1;
            }
        }
    }
    Outcome {
        units,
        done,
        settled_on_lies,
        lies,
        lies_voided,
        cases_missing,
        colluders_quarantined: quarantined.0,
        honest_quarantined: quarantined.1,
    }
}

/// About 128 cases a unit (as exp in binary64 at 34 bits in units of 2^40 on [1, 1 + 2^-5),
/// where two colluders used to settle 120 of 128 units on their claim of no case): a claim of
/// none is implausible, so it needs a third result, an honest one, which refutes both.
#[tokio::test]
async fn colluders_claiming_no_case_settle_nothing_where_cases_are_dense() {
    let o = play(7).await;
    assert_eq!(o.units, 128, "{o:?}");
    assert_eq!(o.settled_on_lies, 0, "{o:?}");
    assert_eq!(
        o.done, o.units,
        "the honest volunteers finish the campaign: {o:?}"
    );
    assert_eq!(o.cases_missing, 0, "{o:?}");
    assert_eq!(o.colluders_quarantined, 20, "{o:?}");
    assert_eq!(o.honest_quarantined, 0, "{o:?}");
}

/// About 0.125 cases a unit (as at 44 bits in units of 2^40): a claim of none is plausible on
/// its own, but each lie whose replica goes to an honest owner and holds a case is proven, and
/// one proven lie quarantines the owner's every identity and voids its results.
#[tokio::test]
async fn colluders_claiming_no_case_settle_nothing_where_cases_are_sparse() {
    let o = play(17).await;
    println!("{o:?}");
    assert_eq!(o.settled_on_lies, 0, "{o:?}");
    assert_eq!(o.done, o.units, "{o:?}");
    assert_eq!(o.cases_missing, 0, "{o:?}");
    assert_eq!(o.colluders_quarantined, 20, "{o:?}");
    assert_eq!(o.lies_voided, o.lies, "{o:?}");
    assert_eq!(o.honest_quarantined, 0, "{o:?}");
}
