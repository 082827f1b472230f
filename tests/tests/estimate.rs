//! `tmd-worker estimate` as a user runs it: its JSON is the coordinator's `CostEstimate`,
//! a census (every unit sampled) projects exactly what `search` finds, and a
//! seeded sample of a whole function is the same sample twice.

use serde_json::Value;
use std::collections::BTreeMap;
use std::process::Command;
use tmd_tests::{bin, scratch};

fn worker(args: &[&str]) -> (Value, String) {
    let out = Command::new(bin("tmd-worker"))
        .args(args)
        .args(["--threads", "2", "--backend", "cpu"])
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    (serde_json::from_str(&stdout).unwrap_or(Value::Null), stdout)
}

fn estimate(dir: &std::path::Path, name: &str, args: &[&str]) -> (Value, String) {
    let file = dir.join(name);
    let mut all = vec!["estimate", "--quiet", "--output", "json", "-o"];
    all.push(file.to_str().unwrap());
    all.extend(args);
    let (_, table) = worker(&all);
    let text = std::fs::read_to_string(&file).unwrap();
    (serde_json::from_str(&text).unwrap(), table)
}

/// Every field of the contract (`tmd_wire::CostEstimate`, version 1) is there with its type,
/// and the totals are the binades' sums (errors in quadrature).
fn check_contract(e: &Value) {
    assert_eq!(e["version"], 1, "{e}");
    for k in ["function", "format", "backend"] {
        assert!(e[k].is_string(), "{k}: {e}");
    }
    for k in ["min_bits", "unit_bits", "seed"] {
        assert!(e[k].is_u64(), "{k}: {e}");
    }
    let binades = e["binades"].as_array().unwrap();
    assert!(!binades.is_empty());
    let (mut t, mut tv, mut h, mut hv) = (0.0, 0.0, 0.0, 0.0);
    for b in binades {
        assert!(b["negative"].is_boolean() && b["exponent"].is_i64(), "{b}");
        let units = b["units"].as_u64().unwrap();
        assert!(b["sampled"].as_u64().unwrap() <= units, "{b}");
        let f = |k: &str| b[k].as_f64().unwrap_or_else(|| panic!("{k}: {b}"));
        let (s, se) = (f("seconds_per_unit"), f("seconds_per_unit_stderr"));
        assert!(s >= 0.0 && se >= 0.0);
        t += s * units as f64;
        tv += (se * units as f64).powi(2);
        h += f("expected_hr_cases");
        hv += f("expected_hr_cases_stderr").powi(2);
    }
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1e-12);
    assert!(close(e["total_seconds"].as_f64().unwrap(), t), "{e}");
    assert!(close(
        e["total_seconds_stderr"].as_f64().unwrap(),
        tv.sqrt()
    ));
    assert!(close(e["total_hr_cases"].as_f64().unwrap(), h));
    assert!(close(
        e["total_hr_cases_stderr"].as_f64().unwrap(),
        hv.sqrt()
    ));
}

/// Sampling every unit projects exactly the HR-cases a search of the range finds, binade by
/// binade, with no uncertainty. Units the search would list as one skipped run (here the
/// trivial binades near 0) are known without running them: they are not sampled and cost nothing.
#[test]
fn a_census_estimate_is_the_search() {
    let dir = scratch("estimate-census");
    let range = [
        "-f",
        "exp",
        "--format",
        "binary32",
        "--min-bits",
        "14",
        "--unit-bits",
        "18",
        "--from",
        "-0x1p+1",
        "--to",
        "0x1p+1",
    ];
    let mut args = range.to_vec();
    args.extend(["--samples", "1000000"]);
    let (e, table) = estimate(&dir, "census.json", &args);
    check_contract(&e);
    assert!(table.contains("total:"), "{table}");
    let mut search = vec!["search", "--quiet", "--output", "json"];
    search.extend(range);
    let (found, _) = worker(&search);
    let mut by_binade: BTreeMap<(bool, i32), f64> = BTreeMap::new();
    for c in found["hr_cases"].as_array().unwrap() {
        let x = c["x"].as_str().unwrap();
        let v =
            tmd_kernels::numbers::format::parse_number(x, 24, rug::float::Round::Nearest).unwrap();
        let binade = (v.is_sign_negative(), v.get_exp().unwrap() - 1);
        *by_binade.entry(binade).or_default() += 1.0;
    }
    assert!(by_binade.values().sum::<f64>() > 100.0, "{by_binade:?}");
    let (mut sampled, mut skipped) = (0, 0);
    for b in e["binades"].as_array().unwrap() {
        let n = b["sampled"].as_u64().unwrap();
        assert!(n <= b["units"].as_u64().unwrap(), "{b}");
        if n == 0 {
            // A binade left out whole: the search skips every argument of it.
            assert_eq!(b["seconds_per_unit"], 0.0, "{b}");
            assert_eq!(b["expected_hr_cases"], 0.0, "{b}");
            skipped += 1;
        }
        sampled += n;
        assert_eq!(b["expected_hr_cases_stderr"], 0.0, "{b}");
        assert_eq!(b["seconds_per_unit_stderr"], 0.0, "{b}");
        let key = (
            b["negative"].as_bool().unwrap(),
            b["exponent"].as_i64().unwrap() as i32,
        );
        let want = by_binade.get(&key).copied().unwrap_or(0.0);
        assert_eq!(b["expected_hr_cases"].as_f64().unwrap(), want, "{key:?}");
    }
    assert!(
        sampled > 100 && skipped > 0,
        "{sampled} sampled, {skipped} binades skipped"
    );
}

/// A whole function in a sample: every binade of the plan listed, collapsed blocks unsampled
/// and free, and the same seed samples the same units (the same HR-cases projected).
#[test]
fn a_whole_function_sample_is_seeded() {
    let dir = scratch("estimate-whole");
    let args = [
        "-f",
        "exp",
        "--format",
        "binary16",
        "--min-bits",
        "8",
        "--unit-bits",
        "5",
        "--whole",
        "--samples",
        "2",
        "--seed",
        "7",
    ];
    let (a, _) = estimate(&dir, "a.json", &args);
    let (b, _) = estimate(&dir, "b.json", &args);
    check_contract(&a);
    assert_eq!(
        (a["seed"].as_u64(), a["unit_bits"].as_u64()),
        (Some(7), Some(5))
    );
    let binades = a["binades"].as_array().unwrap();
    // Both signs of every binade of binary16: exponents -14..=15.
    assert_eq!(binades.len(), 2 * 30, "{a}");
    for (x, y) in binades.iter().zip(b["binades"].as_array().unwrap()) {
        assert_eq!(x["expected_hr_cases"], y["expected_hr_cases"]);
        assert_eq!(x["sampled"], y["sampled"]);
        assert!(x["sampled"].as_u64().unwrap() <= 2);
    }
    // exp overflows above 2^4 (binary16's largest number is 65504 ~ e^11.09): one unit per
    // binade there, a collapsed block whose arguments all overflow, costs nothing.
    let top = binades
        .iter()
        .find(|b| b["negative"] == false && b["exponent"] == 10)
        .unwrap();
    assert_eq!(
        (top["units"].as_u64(), top["sampled"].as_u64()),
        (Some(1), Some(0))
    );
    assert_eq!(top["seconds_per_unit"], 0.0);
}

/// The whole function and negative bounds on the command line; a whole function out of reach
/// is refused with the range it can do.
#[test]
fn estimate_takes_negative_bounds_and_refuses_what_is_out_of_reach() {
    let dir = scratch("estimate-cli");
    let (e, _) = estimate(
        &dir,
        "neg.json",
        &[
            "-f",
            "exp",
            "--format",
            "binary16",
            "--min-bits",
            "8",
            "--from",
            "-0x1p+3",
            "--to",
            "-0x1p+1",
        ],
    );
    assert!(e["binades"]
        .as_array()
        .unwrap()
        .iter()
        .all(|b| b["negative"] == true));
    let out = Command::new(bin("tmd-worker"))
        .args([
            "estimate",
            "-f",
            "sin",
            "--format",
            "binary80",
            "--whole",
            "--backend",
            "cpu",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("out of reach") && err.contains("--from=-0x1p+31"),
        "{err}"
    );
}
