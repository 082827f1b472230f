//! `units_outstanding` in a lease answer without work: what a daemon run with
//! `--exit-when-idle` decides on. Leased units count (a lease may expire and return them),
//! paused campaigns do not, and 0 comes only when nothing is left.

mod common;

use common::TestApp;
use reqwest::{Method, StatusCode};
use tmd_server::bench::empty_result;

#[tokio::test]
async fn outstanding_units_count_leased_work_and_skip_paused_campaigns() {
    // A worker of unknown speed gets one unit per lease.
    let app = TestApp::new().await;
    let c = app.small_campaign(2, 4).await;
    let cid = c["id"].as_i64().unwrap();
    let (_, a) = app.worker("a").await;
    let (_, b) = app.worker("b").await;
    let (_, idle) = app.worker("idle").await;

    let got = a.lease(None).await.unwrap();
    let la = got.lease.expect("work for a");
    assert_eq!(la.units.len(), 1);
    assert_eq!(
        got.units_outstanding, 0,
        "not asked when a lease is granted"
    );
    let lb = b.lease(None).await.unwrap().lease.expect("work for b");
    assert_eq!(lb.units.len(), 1);

    // Everything is leased to others: nothing to hand out, but 2 units may come back.
    let none = idle.lease(None).await.unwrap();
    assert!(none.lease.is_none());
    assert_eq!(none.units_outstanding, 2);

    // A paused campaign's units wait for an admin, not for an expiry.
    let (status, body) = app
        .admin(
            Method::POST,
            &format!("/api/v1/campaigns/{cid}/pause"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(idle.lease(None).await.unwrap().units_outstanding, 0);
    let (status, body) = app
        .admin(
            Method::POST,
            &format!("/api/v1/campaigns/{cid}/resume"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");

    // a finishes its unit, b gives its one back: one pending unit is left.
    for u in &la.units {
        a.post(
            la.lease_id,
            u.unit_id,
            &empty_result(la.fencing_token, u.unit_id, 1.0),
        )
        .await
        .unwrap();
    }
    b.release(&lb, &[]).await.unwrap();
    let lc = idle
        .lease(None)
        .await
        .unwrap()
        .lease
        .expect("the returned unit");
    let u = lc.units[0].unit_id;
    assert_eq!(a.lease(None).await.unwrap().units_outstanding, 1);
    idle.post(lc.lease_id, u, &empty_result(lc.fencing_token, u, 1.0))
        .await
        .unwrap();
    let done = a.lease(None).await.unwrap();
    assert!(done.lease.is_none());
    assert_eq!(done.units_outstanding, 0, "the campaign is finished");
}
