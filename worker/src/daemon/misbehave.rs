//! Deliberate misbehaviour, for the whole-system trust tests: a worker that lies the ways
//! volunteers' machines do, so the tests can check that the coordinator catches each one.
//!
//! It is in the shipped binary (behind a hidden flag) because the tests run the real binary.
//! It gives an attacker nothing: anyone can patch a worker, which is why the coordinator
//! trusts nothing a worker says.

use clap::ValueEnum;
use rand::Rng;
use tmd_kernels::plan::UnitSpec;
use tmd_kernels::Precision;
use tmd_wire::{HrCase, HrKind, UnitResult};

/// How a worker misbehaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Misbehave {
    /// Reports no HR-cases without computing anything.
    Lazy,
    /// Computes, then adds an HR-case that is not one.
    Forge,
    /// Computes, then flips a random bit of one of the engine's counters (broken hardware).
    Flip,
    /// Computes, but never heartbeats and posts each result after its lease expired.
    Late,
}

/// What a lazy worker posts instead of computing: a unit with no failures and no cases.
pub fn lazy_result(fencing_token: i64, spec: &UnitSpec) -> UnitResult {
    UnitResult {
        fencing_token,
        stats: tmd_wire::UnitStats {
            units: 1,
            domains: spec.count.div_ceil(64),
            ..Default::default()
        },
        hr_cases: Vec::new(),
        exact_cases: Vec::new(),
        skipped: Vec::new(),
        elapsed: 0.001,
        digest: "0".repeat(64),
        engine: Some(tmd_kernels::ENGINE_VERSION),
    }
}

/// Adds a case that is not hard to round: the unit's first argument, claimed 60 bits hard.
pub fn forge(result: &mut UnitResult, spec: &UnitSpec, p: Precision) {
    let x = spec.argument(0).to_hex(p);
    result.hr_cases.push(HrCase {
        rounded: x.clone(),
        x,
        bits: 60,
        neg_log2_d: f64::from(p.bits() + 60),
        kind: HrKind::Fp,
    });
}

/// Flips one random low bit of one of the counters.
pub fn flip(result: &mut UnitResult) {
    let mut rng = rand::thread_rng();
    let bit = 1u64 << rng.gen_range(0..8);
    let s = &mut result.stats;
    let counters = [
        &mut s.units,
        &mut s.domains,
        &mut s.phase1_failures,
        &mut s.subdomains,
        &mut s.phase2_failures,
        &mut s.phase3_arguments,
        &mut s.candidates,
        &mut s.false_positives,
    ];
    let i = rng.gen_range(0..counters.len());
    *counters[i] ^= bit;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit() -> UnitSpec {
        UnitSpec {
            negative: false,
            exponent: 0,
            first: 1 << 23,
            count: 1 << 10,
        }
    }

    #[test]
    fn each_lie_changes_what_an_honest_worker_would_post() {
        let honest = lazy_result(1, &unit());
        let mut flipped = honest.clone();
        flip(&mut flipped);
        assert_ne!(flipped.stats, honest.stats);
        let mut forged = honest.clone();
        forge(&mut forged, &unit(), Precision::BINARY32);
        assert_eq!(forged.hr_cases.len(), 1);
        assert_eq!(forged.hr_cases[0].x, "0x1p+0");
        assert_eq!(honest.stats.domains, 16);
    }
}
