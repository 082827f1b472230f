//! Every reported case is re-verified with MPFR before it is stored: real HR-cases are
//! recorded with the server's own figures, forged ones refuse the whole post.

mod common;

use common::{code_of, TestApp};
use reqwest::Method;
use serde_json::json;
use tmd_kernels::oracle::verify::{classify, Verdict};
use tmd_kernels::plan::UnitSpec;
use tmd_kernels::{Function, Precision};
use tmd_server::bench::empty_result;
use tmd_wire::{HrCase, HrKind};

/// A hard and a not-hard argument of the unit, found with MPFR.
fn hard_and_easy(f: Function, p: Precision, unit: &UnitSpec, min_bits: u32) -> (HrCase, String) {
    let (mut hard, mut easy) = (None, None);
    for i in 0..unit.count {
        let a = unit.argument(i);
        match classify(f, p, &a, min_bits).unwrap() {
            Verdict::Hard(c) if hard.is_none() => {
                hard = Some(HrCase {
                    x: c.x,
                    bits: c.bits,
                    neg_log2_d: c.neg_log2_d,
                    kind: if c.kind.as_str() == "fp" {
                        HrKind::Fp
                    } else {
                        HrKind::Mid
                    },
                    rounded: c.rounded,
                })
            }
            Verdict::NotHard { .. } if easy.is_none() => easy = Some(a.to_hex(p)),
            _ => {}
        }
    }
    (
        hard.expect("a hard case in 1024 arguments at 8 bits"),
        easy.unwrap(),
    )
}

#[tokio::test]
async fn forged_cases_are_rejected_and_real_ones_recorded_as_verified() {
    let app = TestApp::new().await;
    let c = app
        .campaign(json!({
            "function": "exp", "format": "binary32", "min_bits": 8, "unit_bits": 10,
            "ranges": [{"from": "0x1p+0", "to": "0x1.0008p+0"}]
        }))
        .await;
    let cid = c["id"].as_i64().unwrap();
    // The first unit, which every worker below leases in turn.
    let spec = UnitSpec {
        negative: false,
        exponent: 0,
        first: 1 << 23,
        count: 1 << 10,
    };
    let (hard, easy) = hard_and_easy(Function::Exp, Precision::BINARY32, &spec, 8);
    let post = |lease: &tmd_wire::Lease, cases: Vec<HrCase>| {
        assert_eq!(lease.units[0].spec.first, spec.first);
        let mut r = empty_result(lease.fencing_token, lease.units[0].unit_id, 1.0);
        r.hr_cases = cases;
        r
    };

    let forged = [
        HrCase {
            x: easy.clone(),
            ..hard.clone()
        },
        HrCase {
            x: "0x1p+1".into(),
            ..hard.clone()
        },
        HrCase {
            x: "0x1.000001p+0".into(),
            ..hard.clone()
        },
        HrCase {
            x: "not-a-number".into(),
            ..hard.clone()
        },
    ];
    // Each forger is quarantined at once: its lease is revoked, the unit goes back to the pool
    // for the next worker, and the forger gets no more work.
    for (i, f) in forged.into_iter().enumerate() {
        let x = f.x.clone();
        let (id, w) = app.worker(&format!("forger-{i}")).await;
        let lease = w.lease(None).await.unwrap().lease.unwrap();
        let result = post(&lease, vec![hard.clone(), f]);
        assert_eq!(
            code_of(
                w.post(lease.lease_id, lease.units[0].unit_id, &result)
                    .await
            ),
            "forged_case",
            "{x}"
        );
        assert_eq!(code_of(w.lease(None).await), "worker_quarantined");
        let (_, info) = app
            .admin(Method::GET, &format!("/api/v1/workers/{id}"), None)
            .await;
        assert_eq!(info["reputation"]["forged"], 1, "{info}");
        assert!(info["quarantined_at"].is_string(), "{info}");
        assert!(
            info["quarantine_reason"]
                .as_str()
                .unwrap()
                .contains("refutes"),
            "{info}"
        );
    }
    let p = app.progress(cid).await;
    assert_eq!(
        (p["hr_cases"].as_i64(), p["done"]["units"].as_i64()),
        (Some(0), Some(0))
    );
    assert_eq!(
        (
            p["leased"]["units"].as_i64(),
            p["pending"]["units"].as_i64()
        ),
        (Some(0), Some(1)),
        "a refused post records nothing, and the forger's lease is revoked"
    );
    let (_, w) = app.worker("honest").await;
    let lease = w.lease(None).await.unwrap().lease.unwrap();
    let u = &lease.units[0];

    // A real case with understated figures is stored as the server computed it.
    let understated = HrCase {
        bits: 8,
        neg_log2_d: 8.0,
        ..hard.clone()
    };
    let accepted = w
        .post(lease.lease_id, u.unit_id, &post(&lease, vec![understated]))
        .await
        .unwrap();
    assert_eq!(accepted.hr_cases, 1);
    let p = app.progress(cid).await;
    assert_eq!(p["hr_cases"], 1);
    assert_eq!(p["complete"], true);
    let stored = &p["hardest"][0];
    assert_eq!(stored["x"], hard.x);
    assert_eq!(stored["bits"], hard.bits);
    assert_eq!(stored["neg_log2_d"], hard.neg_log2_d);
    assert_eq!(stored["kind"], json!(hard.kind));
    assert_eq!(stored["rounded"], hard.rounded);
    assert_eq!(stored["unit_id"], u.unit_id);
    let text = app.metrics().await;
    assert!(text.contains("tmd_forged_cases_total 4"), "{text}");
    assert!(text.contains("tmd_hr_cases_verified_total 1"), "{text}");
}

#[tokio::test]
async fn exact_cases_must_be_exact() {
    let app = TestApp::new().await;
    app.campaign(json!({
        "function": "sqrt", "format": "binary32", "min_bits": 10, "unit_bits": 4,
        "ranges": [{"from": "4", "to": "0x1.00002p+2"}]
    }))
    .await;
    let (_, w) = app.worker("w").await;
    let lease = w.lease(None).await.unwrap().lease.unwrap();
    let unit = lease.units[0].unit_id;
    let mut r = empty_result(lease.fencing_token, unit, 1.0);
    r.exact_cases = vec!["0x1.000002p+2".into()];
    assert_eq!(
        code_of(w.post(lease.lease_id, unit, &r).await),
        "forged_case"
    );
    let (_, w) = app.worker("w2").await;
    let lease = w.lease(None).await.unwrap().lease.unwrap();
    let mut r = empty_result(lease.fencing_token, unit, 1.0);
    r.exact_cases = vec!["0x1p+2".into()];
    w.post(lease.lease_id, unit, &r).await.unwrap();
    let stored: serde_json::Value = sqlx::query_scalar("SELECT exact_cases FROM results")
        .fetch_one(app.db.pool())
        .await
        .unwrap();
    assert_eq!(stored, json!(["0x1p+2"]));
}
