//! Claim lanes: a large campaign's claims run side by side on disjoint stripes of its units,
//! every unit is leased once and only once, a held lane is stepped over, and units back from
//! an expired lease are claimed again in their lane.

mod common;

use common::TestApp;
use std::collections::BTreeSet;
use tmd_server::bench::empty_batch;
use tmd_server::{Config, LeasePolicy};

/// Units of the campaigns here: 4 lanes of 4,096 units at the default 8 lanes.
const UNITS: u32 = 16_384;

/// The campaign's lanes as stored: (lane, lo, hi, fresh_from).
async fn lanes(app: &TestApp, id: i64) -> Vec<(i32, i32, i32, i32)> {
    sqlx::query_as(
        "SELECT lane, lo, hi, fresh_from FROM claim_lanes WHERE campaign_id = $1 ORDER BY lane",
    )
    .bind(id)
    .fetch_all(app.db.pool())
    .await
    .unwrap()
}

/// The seq of each unit of a lease, as the lease records them (a run from its first, or
/// the list where they are not one run).
async fn seqs(app: &TestApp, lease_id: i64) -> Vec<i32> {
    let (first, count, listed): (i32, i32, Option<Vec<i32>>) =
        sqlx::query_as("SELECT first_seq, unit_count, seqs FROM leases WHERE id = $1")
            .bind(lease_id)
            .fetch_one(app.db.pool())
            .await
            .unwrap();
    listed.unwrap_or_else(|| (first..first + count).collect())
}

/// Sixteen workers claiming at once, each posting and claiming again until the campaign is
/// done: every unit is leased exactly once, each lease is a contiguous run of seqs within
/// one lane's stripe, and the lanes cover the campaign's seqs without gap or overlap.
#[tokio::test]
async fn concurrent_claims_in_lanes_lease_every_unit_once_in_contiguous_runs() {
    let app = TestApp::new().await;
    let c = app.small_campaign(UNITS, 4).await;
    let id = c["id"].as_i64().unwrap();
    let mut workers = Vec::new();
    for i in 0..16 {
        let (wid, w) = app.worker(&format!("w{i}")).await;
        app.measured_fast(wid).await;
        workers.push(w);
    }
    let runs = futures_util::future::join_all(workers.iter().map(|w| async move {
        let mut leases = Vec::new();
        while let Some(l) = w.lease(Some(600)).await.unwrap().lease {
            leases.push(l.lease_id);
            w.post_batch(empty_batch(&l, 1e-6)).await.unwrap();
        }
        leases
    }))
    .await;
    let stripes = lanes(&app, id).await;
    assert_eq!(stripes.len(), 4, "{stripes:?}");
    assert_eq!(stripes[0].1, 0);
    for pair in stripes.windows(2) {
        assert_eq!(pair[0].2, pair[1].1, "stripes meet: {stripes:?}");
    }
    assert!(stripes[3].2 >= UNITS as i32);
    let mut seen = BTreeSet::new();
    let mut leases = 0;
    for lease in runs.into_iter().flatten() {
        leases += 1;
        let s = seqs(&app, lease).await;
        assert!(!s.is_empty());
        assert!(
            s.len() <= 820,
            "lease {lease}: at most 5% of what is pending"
        );
        assert_eq!(
            *s.last().unwrap() - s[0] + 1,
            s.len() as i32,
            "lease {lease} is a contiguous run: {s:?}"
        );
        let lane = stripes.iter().find(|l| l.1 <= s[0] && s[0] < l.2).unwrap();
        assert!(
            *s.last().unwrap() < lane.2,
            "lease {lease} stays in its lane"
        );
        for q in s {
            assert!(seen.insert(q), "seq {q} leased twice");
        }
    }
    assert_eq!(seen.len(), UNITS as usize);
    assert!(leases >= 20, "{leases} leases");
    let p = app.progress(id).await;
    assert_eq!(p["complete"], true, "{p}");
}

/// A claim finding a lane held by another claim (here a transaction of the test's own that
/// locks lane 0) takes the next lane's units at once instead of waiting for its turn.
#[tokio::test]
async fn a_claim_steps_over_a_held_lane() {
    let app = TestApp::new().await;
    let c = app.small_campaign(UNITS, 4).await;
    let id = c["id"].as_i64().unwrap();
    let (_, w) = app.worker("first").await;
    // The first claim cuts the campaign into lanes and, with none held, takes lane 0.
    let first = w.lease(Some(1)).await.unwrap().lease.unwrap();
    assert_eq!(seqs(&app, first.lease_id).await, vec![0]);
    let stripes = lanes(&app, id).await;
    assert_eq!(stripes.len(), 4);
    assert_eq!(stripes[0].3, 1, "lane 0's cursor moved past its unit");

    let mut held = app.db.pool().begin().await.unwrap();
    sqlx::query("SELECT 1 FROM claim_lanes WHERE campaign_id = $1 AND lane = 0 FOR UPDATE")
        .bind(id)
        .execute(&mut *held)
        .await
        .unwrap();
    let (_, other) = app.worker("other").await;
    let l = tokio::time::timeout(std::time::Duration::from_secs(20), other.lease(Some(1)))
        .await
        .expect("the claim did not wait for the held lane")
        .unwrap()
        .lease
        .unwrap();
    assert_eq!(seqs(&app, l.lease_id).await, vec![stripes[1].1]);
    held.rollback().await.unwrap();
    // Lane 0 free again: the next claim goes on from its cursor.
    let l = other.lease(Some(1)).await.unwrap().lease.unwrap();
    assert_eq!(seqs(&app, l.lease_id).await, vec![1]);
}

/// Units of an expired lease go back to their lane as returned work and are claimed again
/// before the lane's fresh units; a lane whose fresh units are all leased stays open for
/// them.
#[tokio::test]
async fn units_of_an_expired_lease_are_claimed_again_in_their_lane() {
    let app = TestApp::with_config(Config {
        policy: LeasePolicy {
            ttl_seconds: 3,
            ..LeasePolicy::default()
        },
        ..common::config()
    })
    .await;
    let c = app.small_campaign(UNITS, 4).await;
    let id = c["id"].as_i64().unwrap();
    let (wid, dies) = app.worker("dies").await;
    let lane0 = lanes_after_first(&app, id, &dies).await;
    app.measured_fast(wid).await;
    // The rest of lane 0 in leases of 5% of what is pending, never finished (a few claims,
    // well within the leases' 3 s).
    let mut taken = BTreeSet::from([0]);
    loop {
        let l = dies.lease(Some(600)).await.unwrap().lease.unwrap();
        let s = seqs(&app, l.lease_id).await;
        if s[0] >= lane0.2 {
            break;
        }
        taken.extend(s);
    }
    assert_eq!(taken.len(), lane0.2 as usize, "all of lane 0 leased");
    assert_eq!(lanes(&app, id).await[0].3, lane0.2);
    tokio::time::sleep(std::time::Duration::from_millis(3500)).await;
    let (_, other) = app.worker("other").await;
    // The expiry runs on this lease request; lane 0 is open again for its returned units.
    let l = other.lease(Some(1)).await.unwrap().lease.unwrap();
    assert_eq!(seqs(&app, l.lease_id).await, vec![0]);
}

/// The first claim of the campaign (one unit, to `w`), and lane 0 as then stored.
async fn lanes_after_first(
    app: &TestApp,
    id: i64,
    w: &tmd_server::bench::WorkerClient,
) -> (i32, i32, i32, i32) {
    let l = w.lease(Some(1)).await.unwrap().lease.unwrap();
    assert_eq!(seqs(app, l.lease_id).await, vec![0]);
    lanes(app, id).await[0]
}

/// A campaign claimed in one turn before it had lanes (its cursor past its first units) is
/// cut into lanes that start where the cursor lies: no unit below it is leased again, none
/// above it is skipped, and the campaign completes.
#[tokio::test]
async fn lanes_made_mid_campaign_start_at_its_cursor() {
    let app = TestApp::new().await;
    let c = app.small_campaign(UNITS, 4).await;
    let id = c["id"].as_i64().unwrap();
    // As claims in one turn and their results would have left it: the first 5,000 units done.
    sqlx::query(
        "UPDATE units SET state = 'done', fence = 1, done_at = now() \
         WHERE campaign_id = $1 AND seq < 5000",
    )
    .bind(id)
    .execute(app.db.pool())
    .await
    .unwrap();
    sqlx::query("UPDATE campaigns SET fresh_from = 5000 WHERE id = $1")
        .bind(id)
        .execute(app.db.pool())
        .await
        .unwrap();
    let (wid, w) = app.worker("after").await;
    let first = w.lease(Some(1)).await.unwrap().lease.unwrap();
    assert_eq!(seqs(&app, first.lease_id).await, vec![5000]);
    let stripes = lanes(&app, id).await;
    assert_eq!(stripes[0], (0, 0, 4096, 4096), "lane 0 has nothing fresh");
    assert_eq!(stripes[1].3, 5001);
    assert_eq!(stripes[2].3, stripes[2].1);
    w.post_batch(empty_batch(&first, 1e-6)).await.unwrap();
    app.measured_fast(wid).await;
    let mut seen = BTreeSet::from([5000]);
    while let Some(l) = w.lease(Some(600)).await.unwrap().lease {
        for q in seqs(&app, l.lease_id).await {
            assert!(seen.insert(q), "seq {q} leased twice");
        }
        w.post_batch(empty_batch(&l, 1e-6)).await.unwrap();
    }
    assert_eq!(seen, (5000..UNITS as i32).collect::<BTreeSet<_>>());
    assert_eq!(app.progress(id).await["complete"], true);
}
