//! The result batch (`POST /api/v1/results`): one outcome per unit, in order, with the rules of
//! the single post (replay, fencing, another worker's lease, forged cases), leases mixed in one
//! batch, and the size limits.

mod common;

use common::{code_of, TestApp};
use reqwest::{Method, StatusCode};
use serde_json::json;
use tmd_server::bench::{empty_batch, WorkerClient};
use tmd_wire::{BatchedResult, Lease, UnitOutcome, UnitOutcomeStatus};

/// One batched result per unit of `lease`, without HR-cases.
fn batch_of(lease: &Lease) -> Vec<BatchedResult> {
    empty_batch(lease, 0.01)
}

fn statuses(outcomes: &[UnitOutcome]) -> Vec<(UnitOutcomeStatus, Option<&str>)> {
    outcomes
        .iter()
        .map(|o| (o.status, o.error.as_ref().map(|e| e.code.as_str())))
        .collect()
}

/// A worker whose speed is measured (one unit posted), so its next leases hold many units.
async fn measured(app: &TestApp, name: &str) -> WorkerClient {
    let (_, w) = app.worker(name).await;
    let first = w.lease(None).await.unwrap().lease.unwrap();
    assert_eq!(first.units.len(), 1, "an unmeasured worker gets one unit");
    let out = w.post_batch(batch_of(&first)).await.unwrap();
    assert_eq!(out.outcomes[0].status, UnitOutcomeStatus::Accepted);
    w
}

#[tokio::test]
async fn a_batch_is_recorded_once_and_its_retry_is_replayed() {
    let app = TestApp::new().await;
    let c = app.small_campaign(40, 4).await;
    let cid = c["id"].as_i64().unwrap();
    let w = measured(&app, "gpu").await;
    let lease = w.lease(Some(60)).await.unwrap().lease.unwrap();
    assert!(lease.units.len() > 10, "{} units", lease.units.len());
    let batch = batch_of(&lease);
    let first = w.post_batch(batch.clone()).await.unwrap();
    assert_eq!(first.outcomes.len(), batch.len());
    for (o, b) in first.outcomes.iter().zip(&batch) {
        assert_eq!(o.status, UnitOutcomeStatus::Accepted, "{o:?}");
        assert_eq!((o.lease_id, o.unit_id), (b.lease_id, b.unit_id));
        assert!(o.result_id.is_some() && o.error.is_none());
    }
    // The retry of the whole batch (its answer was lost) changes nothing.
    let again = w.post_batch(batch.clone()).await.unwrap();
    for (a, b) in again.outcomes.iter().zip(&first.outcomes) {
        assert_eq!(a.status, UnitOutcomeStatus::Replayed);
        assert_eq!(a.result_id, b.result_id);
    }
    // So does a single post of one of its units.
    let one = &batch[3];
    let single = w
        .post(one.lease_id, one.unit_id, &one.result)
        .await
        .unwrap();
    assert_eq!(Some(single.result_id), first.outcomes[3].result_id);
    let p = app.progress(cid).await;
    assert_eq!(p["done"]["units"].as_i64(), Some(1 + batch.len() as i64));
    assert_eq!(
        p["replication"]["results"].as_i64(),
        Some(1 + batch.len() as i64)
    );
    let lease_state: String = sqlx::query_scalar("SELECT state FROM leases WHERE id = $1")
        .bind(lease.lease_id)
        .fetch_one(app.db.pool())
        .await
        .unwrap();
    assert_eq!(lease_state, "finished", "its last unit ends the lease");
    let metrics = app.metrics().await;
    assert!(
        metrics.contains(&format!("tmd_results_accepted_total {}", 1 + batch.len())),
        "{metrics}"
    );
}

#[tokio::test]
async fn each_unit_is_judged_alone_and_leases_may_be_mixed() {
    let app = TestApp::new().await;
    app.small_campaign(300, 4).await;
    let w = measured(&app, "gpu").await;
    let a = w.lease(Some(1)).await.unwrap().lease.unwrap();
    let b = w.lease(Some(1)).await.unwrap().lease.unwrap();
    assert_ne!(a.lease_id, b.lease_id);
    let (_, other) = app.worker("other").await;
    let theirs = other.lease(None).await.unwrap().lease.unwrap();

    let mut batch = vec![batch_of(&a)[0].clone(), batch_of(&b)[0].clone()];
    // Another worker's unit, posted under its lease: refused for that unit only.
    batch.push(batch_of(&theirs)[0].clone());
    // A wrong fencing token.
    let mut stale = batch_of(&a)[1].clone();
    stale.result.fencing_token -= 1;
    batch.push(stale);
    // A unit of another lease, posted under this one.
    assert!(a.units.len() > 2, "{} units", a.units.len());
    let mut mismatch = batch_of(&a)[2].clone();
    mismatch.lease_id = b.lease_id;
    mismatch.result.fencing_token = b.fencing_token;
    batch.push(mismatch);
    // A malformed result.
    let mut bad = batch_of(&b)[b.units.len() - 1].clone();
    bad.result.digest = "zz".into();
    batch.push(bad);
    let out = w.post_batch(batch).await.unwrap();
    assert_eq!(
        statuses(&out.outcomes),
        vec![
            (UnitOutcomeStatus::Accepted, None),
            (UnitOutcomeStatus::Accepted, None),
            (UnitOutcomeStatus::Refused, Some("forbidden")),
            (UnitOutcomeStatus::Refused, Some("stale_token")),
            (UnitOutcomeStatus::Refused, Some("lease_mismatch")),
            (UnitOutcomeStatus::Refused, Some("bad_request")),
        ]
    );
    // The other worker's unit is untouched: it posts it itself.
    let mine = other.post_batch(batch_of(&theirs)).await.unwrap();
    assert_eq!(mine.outcomes[0].status, UnitOutcomeStatus::Accepted);
}

#[tokio::test]
async fn a_unit_repeated_in_a_batch_is_recorded_once() {
    let app = TestApp::new().await;
    app.small_campaign(4, 4).await;
    let (_, w) = app.worker("w").await;
    let lease = w.lease(None).await.unwrap().lease.unwrap();
    let one = batch_of(&lease)[0].clone();
    let mut different = one.clone();
    different.result.stats.domains += 1;
    different.result.digest = "ab".repeat(32);
    let out = w
        .post_batch(vec![one.clone(), one.clone(), different])
        .await
        .unwrap();
    assert_eq!(
        statuses(&out.outcomes),
        vec![
            (UnitOutcomeStatus::Accepted, None),
            (UnitOutcomeStatus::Replayed, None),
            (UnitOutcomeStatus::Refused, Some("conflict")),
        ]
    );
    assert_eq!(out.outcomes[0].result_id, out.outcomes[1].result_id);
    let results: i64 = sqlx::query_scalar("SELECT count(*) FROM results")
        .fetch_one(app.db.pool())
        .await
        .unwrap();
    assert_eq!(results, 1);
}

#[tokio::test]
async fn a_stale_lease_in_a_batch_is_refused_and_the_rest_recorded() {
    let app = TestApp::with_config(tmd_server::Config {
        policy: tmd_server::LeasePolicy {
            ttl_seconds: 1,
            ..tmd_server::LeasePolicy::default()
        },
        ..common::config()
    })
    .await;
    app.small_campaign(3, 4).await;
    let (_, old) = app.worker("old").await;
    let (_, new) = app.worker("new").await;
    let lost = old.lease(None).await.unwrap().lease.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1300)).await;
    // The expired unit goes to `new` (a newer fencing token); `old` leases the next one.
    let taken = new.lease(None).await.unwrap().lease.unwrap();
    assert_eq!(taken.units[0].unit_id, lost.units[0].unit_id);
    let kept = old.lease(None).await.unwrap().lease.unwrap();
    let out = old
        .post_batch(vec![batch_of(&lost)[0].clone(), batch_of(&kept)[0].clone()])
        .await
        .unwrap();
    assert_eq!(
        statuses(&out.outcomes),
        vec![
            (UnitOutcomeStatus::Refused, Some("stale_token")),
            (UnitOutcomeStatus::Accepted, None),
        ]
    );
}

/// An argument of the unit that MPFR finds not hard at the tests' 8 bits.
fn easy_argument(spec: &tmd_wire::UnitSpec) -> String {
    use tmd_kernels::oracle::verify::{classify, Verdict};
    use tmd_kernels::{Function, Precision};
    let unit = tmd_kernels::plan::UnitSpec {
        negative: spec.negative,
        exponent: spec.exponent,
        first: spec.first,
        count: spec.count,
    };
    (0..unit.count)
        .map(|i| unit.argument(i))
        .find(|a| {
            matches!(
                classify(
                    Function::Exp,
                    Precision::BINARY32,
                    a,
                    common::seed::MIN_BITS
                ),
                Ok(Verdict::NotHard { .. })
            )
        })
        .expect("an easy argument")
        .to_hex(Precision::BINARY32)
}

#[tokio::test]
async fn a_forged_case_in_a_batch_quarantines_the_worker_and_refuses_the_rest() {
    let app = TestApp::new().await;
    let c = app
        .campaign(json!({
            "function": "exp", "format": "binary32", "min_bits": 8, "unit_bits": 10,
            "ranges": [{"from": "0x1p+0", "to": "0x1.0018p+0"}]
        }))
        .await;
    let cid = c["id"].as_i64().unwrap();
    let w = measured(&app, "forger").await;
    let lease = w.lease(Some(600)).await.unwrap().lease.unwrap();
    assert_eq!(lease.units.len(), 2, "the campaign's two other units");
    let mut batch = batch_of(&lease);
    // Real cases for the first unit (MPFR finds them), an argument that is not hard for the
    // second.
    batch[0].result.hr_cases = common::seed::hard_cases(&lease.units[0].spec);
    assert!(!batch[0].result.hr_cases.is_empty());
    let mut forged = batch[0].result.hr_cases[0].clone();
    forged.x = easy_argument(&lease.units[1].spec);
    batch[1].result.hr_cases = vec![forged];
    let out = w.post_batch(batch).await.unwrap();
    assert_eq!(
        statuses(&out.outcomes),
        vec![
            (UnitOutcomeStatus::Refused, Some("worker_quarantined")),
            (UnitOutcomeStatus::Refused, Some("forged_case")),
        ]
    );
    assert!(out.outcomes[1]
        .error
        .as_ref()
        .unwrap()
        .message
        .contains("now quarantined"));
    assert_eq!(code_of(w.lease(None).await), "worker_quarantined");
    let p = app.progress(cid).await;
    // Its first unit (posted before) is void and redone; nothing of the batch is recorded.
    assert_eq!(p["done"]["units"].as_i64(), Some(0), "{p}");
    assert_eq!(p["hr_cases"].as_i64(), Some(0), "{p}");
}

#[tokio::test]
async fn batches_are_bounded_and_a_full_one_fits_the_body_limit() {
    let app = TestApp::new().await;
    app.small_campaign(2, 4).await;
    let (_, w) = app.worker("w").await;
    let lease = w.lease(None).await.unwrap().lease.unwrap();
    let one = batch_of(&lease)[0].clone();
    let (status, body) = app
        .call(
            Method::POST,
            "/api/v1/results",
            Some(w.token()),
            Some(json!({ "results": vec![one.clone(); 1001] })),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["code"], "bad_request");
    assert!(body["message"].as_str().unwrap().contains("1000"), "{body}");
    let (status, body) = app
        .call(
            Method::POST,
            "/api/v1/results",
            Some(w.token()),
            Some(json!({ "results": [] })),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    // 1000 results without cases, with the largest counters, fit the default body limit.
    let mut big = one.clone();
    big.lease_id = i64::MAX;
    big.unit_id = i64::MAX;
    big.result.fencing_token = i64::MAX;
    big.result.elapsed = 123_456.789_012_345;
    let s = &mut big.result.stats;
    for v in [
        &mut s.units,
        &mut s.domains,
        &mut s.phase1_failures,
        &mut s.subdomains,
        &mut s.phase2_failures,
        &mut s.phase3_arguments,
        &mut s.candidates,
        &mut s.false_positives,
    ] {
        *v = u64::MAX;
    }
    let text = serde_json::to_vec(&tmd_wire::ResultBatch {
        results: vec![big; 1000],
    })
    .unwrap();
    assert!(
        text.len() < app.config.max_body_bytes,
        "{} bytes against a limit of {}",
        text.len(),
        app.config.max_body_bytes
    );
}

#[tokio::test]
async fn a_complete_campaign_is_active_again_when_its_units_are_reopened() {
    let app = TestApp::new().await;
    let c = app.small_campaign(3, 4).await;
    let cid = c["id"].as_i64().unwrap();
    let (id, w) = measured_id(&app, "w").await;
    let lease = w.lease(Some(600)).await.unwrap().lease.unwrap();
    assert_eq!(lease.units.len(), 2);
    let out = w.post_batch(batch_of(&lease)).await.unwrap();
    assert!(out
        .outcomes
        .iter()
        .all(|o| o.status == UnitOutcomeStatus::Accepted));
    let p = app.progress(cid).await;
    assert_eq!(
        (p["state"].as_str(), p["complete"].as_bool()),
        (Some("complete"), Some(true))
    );
    assert!(p["completed_at"].is_string(), "{p}");
    // The worker turns out to be bad: what it alone vouched for is redone, so the campaign has
    // work again.
    let (status, v) = app.quarantine(id, "bad hardware").await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let p = app.progress(cid).await;
    assert_eq!(p["state"], "active", "{p}");
    assert!(p["completed_at"].is_null(), "{p}");
    assert_eq!(p["pending"]["units"], 3);
}

/// [`measured`], with the worker's id.
async fn measured_id(app: &TestApp, name: &str) -> (i64, WorkerClient) {
    let (id, w) = app.worker(name).await;
    let first = w.lease(None).await.unwrap().lease.unwrap();
    let out = w.post_batch(batch_of(&first)).await.unwrap();
    assert_eq!(out.outcomes[0].status, UnitOutcomeStatus::Accepted);
    (id, w)
}
