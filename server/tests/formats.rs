//! Campaigns in named formats over HTTP: an older worker (no `tmd-worker-features: formats`)
//! gets no lease of them, a current one gets the format with the task; a result that leaves
//! out the unit's skipped runs is refused, one with the server's runs is recorded and shown.

mod common;

use common::TestApp;
use reqwest::StatusCode;
use serde_json::{json, Value};
use tmd_server::bench::empty_result;

/// A lease request as a worker from before named formats sends it: no features header (and
/// this build's engine version, which the server requires).
async fn old_worker_lease(app: &TestApp, token: &str) -> Value {
    let resp = reqwest::Client::new()
        .post(app.url("/api/v1/leases"))
        .bearer_auth(token)
        .json(&json!({"seconds": 60, "engine": tmd_kernels::ENGINE_VERSION}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    resp.json().await.unwrap()
}

#[tokio::test]
async fn an_older_worker_gets_only_bare_precision_campaigns() {
    let app = TestApp::new().await;
    let named = app
        .campaign(
            json!({"function": "exp", "format": "binary16", "min_bits": 4,
                         "ranges": [{"from": "1", "to": "2"}], "unit_bits": 6}),
        )
        .await;
    assert_eq!(named["format"], "binary16");
    let (_, w) = app.worker("old").await;
    let old = old_worker_lease(&app, w.token()).await;
    assert!(old["lease"].is_null(), "{old}");
    assert_eq!(old["units_outstanding"], 0, "nothing it could ever get");

    let bare = app
        .campaign(json!({"function": "exp", "precision": 11, "min_bits": 4,
                         "ranges": [{"from": "1", "to": "2"}], "unit_bits": 6}))
        .await;
    assert!(bare["format"].is_null(), "{bare}");
    assert!(bare["judged_as"].as_str().unwrap().contains("unbounded"));
    let old = old_worker_lease(&app, w.token()).await;
    assert_eq!(old["lease"]["task"]["campaign_id"], bare["id"], "{old}");
    assert!(old["lease"]["task"].get("format").is_none(), "{old}");

    // A current worker (the test client declares `formats`) gets the named one, with it.
    let (_, current) = app.worker("current").await;
    let lease = current.lease(Some(60)).await.unwrap().lease.unwrap();
    assert_eq!(lease.task.campaign_id, named["id"].as_i64().unwrap());
    assert_eq!(lease.task.format.as_deref(), Some("binary16"));
}

#[tokio::test]
async fn a_result_must_carry_the_units_skipped_runs() {
    let app = TestApp::new().await;
    // exp on [8, 16) in binary16 overflows from 11.09 on: one unit of 2^10 arguments.
    let c = app
        .campaign(
            json!({"function": "exp", "format": "binary16", "min_bits": 20,
                         "ranges": [{"from": "8", "to": "16"}], "unit_bits": 10}),
        )
        .await;
    let id = c["id"].as_i64().unwrap();
    let (_, w) = app.worker("w").await;
    let lease = w.lease(Some(60)).await.unwrap().lease.unwrap();
    let unit = &lease.units[0];
    let missing = empty_result(lease.fencing_token, unit.unit_id, 1.0);
    let err = w
        .post(lease.lease_id, unit.unit_id, &missing)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("forged_case"), "{err}");
    assert!(err.to_string().contains("overflow"), "{err}");

    // An honest worker reports the run (exp(x) >= 2^16 from x = 1420/128 = 0x1.63p+3 on);
    // the server stores its own, with the rule, and shows it.
    let (_, honest) = app.worker("honest").await;
    // The forger was quarantined and its lease revoked: the unit is back in the pool.
    let lease = honest.lease(Some(60)).await.unwrap().lease.unwrap();
    let unit = &lease.units[0];
    let mut r = empty_result(lease.fencing_token, unit.unit_id, 1.0);
    r.skipped = vec![tmd_wire::SkippedRun {
        first: "0x1.63p+3".into(),
        last: "0x1.ffcp+3".into(),
        count: 2048 - 1420,
        reason: "overflow".into(),
        rule: String::new(),
    }];
    honest.post(lease.lease_id, unit.unit_id, &r).await.unwrap();
    let progress = app.progress(id).await;
    assert_eq!(progress["skipped"][0]["reason"], "overflow", "{progress}");
    assert_eq!(progress["skipped"][0]["arguments"], "628");
    assert!(progress["skipped"][0]["rule"]
        .as_str()
        .unwrap()
        .contains("overflows"));
    assert_eq!(progress["skipped_runs"][0]["first"], "0x1.63p+3");
}

/// sinpi in binary16 on [512, 2048): every argument is a half-integer or an integer, so each
/// unit is one exact run (no case could fit a result otherwise). A result without it is
/// refused as forged; the honest one is recorded, shown in the progress and in the json
/// export's object shape with its rule.
#[tokio::test]
async fn exact_runs_are_checked_stored_and_exported() {
    use tmd_kernels::numbers::format::Format;
    use tmd_kernels::plan::UnitSpec;
    let app = TestApp::new().await;
    let c = app
        .campaign(
            json!({"function": "sinpi", "format": "binary16", "min_bits": 20,
                         "ranges": [{"from": "512", "to": "2048"}], "unit_bits": 10}),
        )
        .await;
    let id = c["id"].as_i64().unwrap();
    let (_, forger) = app.worker("forger").await;
    let lease = forger.lease(Some(60)).await.unwrap().lease.unwrap();
    let unit = &lease.units[0];
    let missing = empty_result(lease.fencing_token, unit.unit_id, 1.0);
    let err = forger
        .post(lease.lease_id, unit.unit_id, &missing)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("forged_case"), "{err}");
    assert!(err.to_string().contains("exact"), "{err}");

    let (_, honest) = app.worker("honest").await;
    let fmt = Format::named("binary16").unwrap();
    let mut posted = 0;
    while let Some(lease) = honest.lease(Some(60)).await.unwrap().lease {
        for u in &lease.units {
            let spec = UnitSpec {
                negative: u.spec.negative,
                exponent: u.spec.exponent,
                first: u.spec.first,
                count: u.spec.count,
            };
            let runs = tmd_kernels::regions::skip::skipped_runs(
                tmd_kernels::Function::Sinpi,
                fmt,
                20,
                spec,
            )
            .unwrap();
            assert_eq!(runs.len(), 1, "{runs:?}");
            let mut r = empty_result(lease.fencing_token, u.unit_id, 1.0);
            r.skipped = runs
                .iter()
                .map(|s| tmd_wire::SkippedRun {
                    first: s.first.clone(),
                    last: s.last.clone(),
                    count: s.count,
                    reason: s.reason.as_str().into(),
                    rule: String::new(),
                })
                .collect();
            honest.post(lease.lease_id, u.unit_id, &r).await.unwrap();
            posted += 1;
        }
    }
    assert_eq!(posted, 2, "binades 9 and 10, one unit each");
    let progress = app.progress(id).await;
    assert_eq!(progress["skipped"][0]["reason"], "exact", "{progress}");
    assert_eq!(progress["skipped"][0]["arguments"], "2048");
    let (status, body) = app
        .admin(
            reqwest::Method::GET,
            &format!("/api/v1/campaigns/{id}/hr-cases?shape=object"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let doc: tmd_wire::HrCasesDocument = serde_json::from_value(body).unwrap();
    assert!(doc.cases.is_empty());
    let runs: Vec<(&str, &str, u64, &str)> = doc
        .skipped_runs
        .iter()
        .map(|s| {
            (
                s.first.as_str(),
                s.last.as_str(),
                s.count,
                s.reason.as_str(),
            )
        })
        .collect();
    assert_eq!(
        runs,
        [
            ("0x1p+9", "0x1.ffcp+9", 1024, "exact"),
            ("0x1p+10", "0x1.ffcp+10", 1024, "exact")
        ]
    );
    assert!(
        doc.skipped_runs[0].rule.contains("1 at k = 1 mod 4"),
        "{}",
        doc.skipped_runs[0].rule
    );
    assert!(doc.skipped_runs[1].rule.contains("sinpi(x) = 0"));
}
