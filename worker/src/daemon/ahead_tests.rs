//! Tests of compiling ahead: which units stand for a lease and the binades after it, that
//! the modules the next binade needs are among theirs, and that a compiled module is cached.

use super::*;
use tmd_kernels::numbers::format::Format;
use tmd_kernels::oracle::function::Function;
use tmd_kernels::plan::split_range_in;

fn cfg(f: Function) -> SearchConfig {
    SearchConfig::in_format(f, Format::named("binary64").unwrap(), 44)
}

fn units(f: Function, from: &str, to: &str, bits: u32) -> Vec<EngineUnit> {
    split_range_in(f, Format::named("binary64").unwrap(), from, to, Some(bits)).unwrap()
}

const LOW: u64 = 1 << 52;

/// The unit of `2^44` arguments number `k` of binade `e` (positive).
fn unit_at(e: i32, k: u64) -> EngineUnit {
    EngineUnit {
        negative: false,
        exponent: e,
        first: LOW + (k << 44),
        count: 1 << 44,
    }
}

#[test]
fn a_lease_is_planned_by_its_runs_and_the_binades_at_and_beside_its_end() {
    let c = cfg(Function::Exp);
    // The last 16 units of [1, 2) and the first 16 of [2, 4) (256 units a binade).
    let lease = units(Function::Exp, "0x1.fp+0", "0x1.1p+1", 44);
    assert_eq!(lease.len(), 32);
    assert_eq!((lease[0], lease[31]), (unit_at(0, 240), unit_at(1, 15)));
    let planned = planned_units(&c, &lease);
    let mut want = vec![
        lease[0], lease[8], lease[15], lease[16], lease[24], lease[31],
    ];
    // Then 32 units spread over [2, 4), [4, 8) and [1, 2), less those planned already.
    let spread: Vec<u64> = (0..32).map(|i| i * 255 / 31).collect();
    assert_eq!(&spread[..4], [0, 8, 16, 24]);
    for e in [1, 2, 0] {
        for u in spread.iter().map(|&k| unit_at(e, k)) {
            if !want.contains(&u) {
                want.push(u);
            }
        }
    }
    assert_eq!(planned, want);
    // [2, 4)'s units 0 and 8 and [1, 2)'s 255 are the lease's own.
    assert_eq!(planned.len(), 6 + 30 + 32 + 31);
    // One unit: itself, then its binade and the two beside it.
    let one = planned_units(&c, &lease[..1]);
    assert_eq!(one[0], lease[0]);
    assert_eq!(one.len(), 1 + 32 + 32 + 32, "{one:?}");
}

#[test]
fn samples_stay_in_the_format_and_the_function_s_domain() {
    // The top binade of binary64 has no binade above it.
    let top = planned_units(&cfg(Function::Exp), &[unit_at(1023, 255)]);
    assert!(top.iter().all(|u| u.exponent == 1023 || u.exponent == 1022));
    assert_eq!(top.iter().filter(|u| u.exponent == 1022).count(), 32);
    // acos is defined on [-1, 1]: beside [0.5, 1) only [0.25, 0.5), of either sign.
    for negative in [false, true] {
        let last = EngineUnit {
            negative,
            exponent: -1,
            first: (1 << 53) - (1 << 44),
            count: 1 << 44,
        };
        let planned = planned_units(&cfg(Function::Acos), &[last]);
        assert!(planned.iter().all(|u| u.negative == negative));
        let exponents: std::collections::BTreeSet<i32> =
            planned.iter().map(|u| u.exponent).collect();
        assert_eq!(exponents.into_iter().collect::<Vec<_>>(), [-2, -1]);
    }
    // A unit as large as a binade of a small format: one unit a binade.
    let f16 = SearchConfig::in_format(Function::Exp, Format::named("binary16").unwrap(), 12);
    let whole = EngineUnit {
        negative: false,
        exponent: 0,
        first: 1 << 10,
        count: 1 << 10,
    };
    let planned = planned_units(&f16, &[whole]);
    assert_eq!(planned.len(), 3);
    assert!(planned
        .iter()
        .all(|u| u.count == 1 << 10 && u.first == 1 << 10));
}

/// The point of planning ahead: the modules that the units after a lease need are planned
/// while it runs. On exp at 44 bits, [32, 64) needs (6, 8) from about its 20th unit of 256 and
/// [64, 128) needs (6, 9), which no unit of [16, 32) needs: a lease ending in [16, 32) plans
/// both binades' modules, a lease at the start of [32, 64) the (6, 8) of its middle.
#[test]
fn the_modules_after_a_lease_are_planned_with_it() {
    let c = cfg(Function::Exp);
    let sampled = |e: i32| -> Vec<Module> {
        let us: Vec<EngineUnit> = (0..256).step_by(8).map(|k| unit_at(e, k)).collect();
        modules_of(&c, &us)
    };
    let end_of_16 = units(Function::Exp, "0x1.fp+4", "0x1p+5", 44);
    let ahead = modules_of(&c, &planned_units(&c, &end_of_16));
    let own = modules_of(&c, &end_of_16);
    let next = sampled(5);
    assert!(next.iter().any(|m| !own.contains(m)), "{own:?} {next:?}");
    for m in &next {
        assert!(
            ahead.contains(m),
            "{m:?} of [32, 64) not planned: {ahead:?}"
        );
    }
    let start_of_32 = units(Function::Exp, "0x1p+5", "0x1.1p+5", 44);
    let ahead = modules_of(&c, &planned_units(&c, &start_of_32));
    for m in next.iter().chain(&sampled(6)) {
        assert!(ahead.contains(m), "{m:?} not planned: {ahead:?}");
    }
}

#[test]
fn a_unit_that_cannot_be_planned_adds_no_module() {
    // log of a negative binade: outside the domain, planned as nothing rather than a failure.
    let c = cfg(Function::Log);
    let outside = EngineUnit {
        negative: true,
        exponent: 0,
        first: LOW,
        count: 1 << 20,
    };
    let inside = units(Function::Log, "0x1p+1", "0x1.0000001p+1", 20);
    assert_eq!(modules_of(&c, &[outside]), Vec::<Module>::new());
    let with = modules_of(&c, &[outside, inside[0]]);
    assert!(!with.is_empty());
    assert_eq!(with, modules_of(&c, &inside[..1]));
}

/// Compiles a module for the H100's architecture without a GPU (NVRTC from the wheel, as CI
/// has it): afterwards the process's cache holds it, so a unit needing it does not compile.
#[test]
fn modules_compiled_ahead_are_in_the_cache_for_the_units() {
    if !cuda::nvrtc_available() {
        let required = std::env::var("TMD_REQUIRE_NVRTC").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "TMD_REQUIRE_NVRTC=1 but libnvrtc cannot be loaded"
        );
        eprintln!("skipping: libnvrtc cannot be loaded");
        return;
    }
    let arches = ["sm_90".to_string()];
    let compiled = compile_modules(&arches, &[(2, 3)]);
    assert!(compiled.is_empty() || compiled == [(2, 3)]);
    let again = cuda::compile(2, 3, "sm_90").expect("compiled");
    assert!(again.cached);
    assert!(again.image.starts_with(b"\x7fELF"));
}
