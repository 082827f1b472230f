//! What an honest engine says of a unit, for tests that play workers: its skipped runs, every
//! HR-case by MPFR over every argument, and a result carrying them.

use tmd_kernels::numbers::format::Format;
use tmd_kernels::oracle::verify::{classify_in, Verdict};
use tmd_kernels::Function;
use tmd_server::bench::empty_result;
use tmd_wire::{HrCase, HrKind, Lease, SkippedRun, UnitResult, UnitSpec};

/// The engine's own spelling of a unit.
pub fn engine_unit(spec: &UnitSpec) -> tmd_kernels::plan::UnitSpec {
    tmd_kernels::plan::UnitSpec {
        negative: spec.negative,
        exponent: spec.exponent,
        first: spec.first,
        count: spec.count,
    }
}

/// The unit's skipped runs as an honest engine lists them.
pub fn honest_runs(f: Function, fmt: &str, min_bits: u32, spec: &UnitSpec) -> Vec<SkippedRun> {
    let fmt = Format::named(fmt).unwrap();
    tmd_kernels::regions::skip::skipped_runs(f, fmt, min_bits, engine_unit(spec))
        .unwrap()
        .into_iter()
        .map(|s| SkippedRun {
            rule: s.rule(),
            first: s.first,
            last: s.last,
            count: s.count,
            reason: s.reason.as_str().to_string(),
        })
        .collect()
}

/// Every HR-case of the unit, by MPFR over every argument.
pub fn true_cases(f: Function, fmt: &str, min_bits: u32, spec: &UnitSpec) -> Vec<HrCase> {
    let fmt = Format::named(fmt).unwrap();
    let unit = engine_unit(spec);
    (0..unit.count)
        .filter_map(|i| match classify_in(f, fmt, &unit.argument(i), min_bits) {
            Ok(Verdict::Hard(c)) => Some(wire_case(c)),
            _ => None,
        })
        .collect()
}

/// An HR-case as the engine finds it, as a worker reports it.
pub fn wire_case(c: tmd_kernels::oracle::verify::HrCase) -> HrCase {
    HrCase {
        x: c.x,
        bits: c.bits,
        neg_log2_d: c.neg_log2_d,
        kind: HrKind::parse(c.kind.as_str()).unwrap(),
        rounded: c.rounded,
    }
}

/// A result for `unit` of `lease` with these cases and runs, labelled with `engine`.
pub fn result(lease: &Lease, unit: i64, cases: &[HrCase], runs: &[SkippedRun]) -> UnitResult {
    UnitResult {
        hr_cases: cases.to_vec(),
        skipped: runs.to_vec(),
        ..empty_result(lease.fencing_token, unit, 1.0)
    }
}
