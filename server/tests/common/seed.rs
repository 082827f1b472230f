//! A seeded campaign for the export and dashboard tests: `exp` in binary32 over three binades
//! (one of them negative), worked through the real lease and result endpoints with real
//! HR-cases found by MPFR (which the server re-verifies), and left part done: the last unit
//! pending, the one before it leased.

use super::TestApp;
use serde_json::json;
use tmd_kernels::oracle::verify::{classify, Verdict};
use tmd_kernels::plan::UnitSpec;
use tmd_kernels::{Function, Precision};
use tmd_server::bench::empty_result;
use tmd_wire::{HrCase, HrKind};

/// What was seeded.
pub struct Seeded {
    pub id: i64,
    /// Every HR-case the server recorded, as MPFR found it.
    pub cases: Vec<HrCase>,
    pub units_total: i64,
    pub units_done: i64,
    pub worker_id: i64,
}

/// The search threshold: low, so that each unit of 1024 arguments holds a dozen cases.
pub const MIN_BITS: u32 = 8;

/// The HR-cases of one unit, by MPFR over every argument.
pub fn hard_cases(spec: &tmd_wire::UnitSpec) -> Vec<HrCase> {
    let unit = UnitSpec {
        negative: spec.negative,
        exponent: spec.exponent,
        first: spec.first,
        count: spec.count,
    };
    (0..unit.count)
        .filter_map(|i| {
            match classify(
                Function::Exp,
                Precision::BINARY32,
                &unit.argument(i),
                MIN_BITS,
            ) {
                Ok(Verdict::Hard(c)) => Some(super::engine::wire_case(c)),
                _ => None,
            }
        })
        .collect()
}

/// Creates and works the campaign (see the module comment).
pub async fn seeded_campaign(app: &TestApp) -> Seeded {
    let c = app
        .campaign(json!({
            "function": "exp", "format": "binary32", "min_bits": MIN_BITS, "unit_bits": 10,
            "name": "seeded <b>exp</b>",
            "ranges": [{"from": "-0x1.001p+1", "to": "-0x1p+1"},
                       {"from": "0x1p-1", "to": "0x1.001p-1"},
                       {"from": "0x1p+0", "to": "0x1.001p+0"}]
        }))
        .await;
    let id = c["id"].as_i64().unwrap();
    let units_total = c["units_total"].as_i64().unwrap();
    assert!(units_total >= 4, "{c}");
    let (worker_id, w) = app.worker("seed-worker").await;
    let mut cases = Vec::new();
    let mut units_done = 0;
    // An elapsed time of 1 s per 1024-argument unit makes every later lease of 1 s one unit.
    while units_done < units_total - 2 {
        let lease = w.lease(Some(1)).await.unwrap().lease.unwrap();
        for u in &lease.units {
            let mut r = empty_result(lease.fencing_token, u.unit_id, 1.0);
            r.hr_cases = hard_cases(&u.spec);
            let accepted = w.post(lease.lease_id, u.unit_id, &r).await.unwrap();
            assert_eq!(accepted.hr_cases as usize, r.hr_cases.len());
            cases.extend(r.hr_cases);
            units_done += 1;
        }
    }
    let held = w.lease(Some(1)).await.unwrap().lease.unwrap();
    assert_eq!(held.units.len(), 1, "one unit stays leased");
    assert!(
        cases.iter().any(|c| c.kind == HrKind::Fp) && cases.iter().any(|c| c.kind == HrKind::Mid)
    );
    assert!(
        cases.iter().any(|c| c.x.starts_with('-')),
        "a negative binade is done"
    );
    assert!(
        cases.iter().any(|c| !c.x.starts_with('-')),
        "a positive binade is done"
    );
    Seeded {
        id,
        cases,
        units_total,
        units_done,
        worker_id,
    }
}

/// The value of a C99 hex argument of binary32 (exact in f64), an oracle for the order.
pub fn hex_value(x: &str) -> f64 {
    let (sign, rest) = match x.strip_prefix('-') {
        Some(r) => (-1.0, r),
        None => (1.0, x),
    };
    let rest = rest.strip_prefix("0x").unwrap();
    let (mantissa, exp) = rest.split_once('p').unwrap();
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let mut v = u64::from_str_radix(int, 16).unwrap() as f64;
    let mut scale = 1.0 / 16.0;
    for d in frac.chars() {
        v += f64::from(d.to_digit(16).unwrap()) * scale;
        scale /= 16.0;
    }
    sign * v * 2f64.powi(exp.parse().unwrap())
}
