//! The count audit: lies of omission caught by their numbers. No I/O.
//!
//! An argument of an ordinary binade is an HR-case at `min_bits` `K` with probability about
//! `2^(1-K)` (its value's distance to the nearest breakpoint, a floating-point number or a
//! midpoint, is below `2^-K` of a half-ulp), independently enough that a unit's count is close
//! to Poisson with mean `λ = 2^(1-K)` times its judged arguments (`docs/error-analysis.md`,
//! `docs/trust.md`). Where a cost estimate was posted its measured cases per argument are used
//! when lower. Two tests follow:
//!
//! - per result: a count whose Poisson probability of being so low is below [`UNIT_ALPHA`] is
//!   *implausible*; it settles nothing without a trusted result or one more agreeing replica
//!   (`trust::settle`). A volunteer claiming 0 of 128 expected cases (K = 34, units of 2^40) is
//!   caught on every unit.
//! - per owner and campaign: its audited results' counts added up against their expectation;
//!   a total [`OWNER_Z`] standard deviations low (the variance taken [`OVERDISPERSION`] times
//!   Poisson's, for safety) quarantines the owner's workers. A volunteer claiming 0 where 2
//!   are expected (K = 44, units of 2^44) is caught after 73 units.
//!
//! A result whose counters admit more verified candidates than the cases it lists
//! ([`counters_admit_omission`]) is implausible too, wherever it lies.
//!
//! Only ordinary binades are audited: where the engine's rules skip or clear arguments (poles,
//! exact and trivial regions, asymptotes; `regions::skip::runs_are_pointwise`) the counts do
//! not follow the model.

use tmd_wire::UnitStats;

/// Below this probability a result's count is implausible.
pub const UNIT_ALPHA: f64 = 1e-6;

/// Standard deviations below its expectation at which an owner's total quarantines it.
pub const OWNER_Z: f64 = 6.0;

/// The owner test takes the variance of a total this many times Poisson's: counts of nearby
/// units are not quite independent, and the test must not catch an honest owner.
pub const OVERDISPERSION: f64 = 4.0;

/// The cases a unit of `judged` arguments (its arguments less its skipped runs) is expected to
/// hold at `min_bits`: `2^(1-min_bits)` each, or the estimate's measured `cases_per_argument`
/// for the binade when lower.
pub fn expected_cases(judged: f64, min_bits: u32, cases_per_argument: Option<f64>) -> f64 {
    let model = 2f64.powi(1 - min_bits as i32);
    let rate = match cases_per_argument {
        Some(r) if r.is_finite() && r >= 0.0 => r.min(model),
        _ => model,
    };
    (judged.max(0.0) * rate).max(0.0)
}

/// HR-cases an estimate expects of a campaign, over all its arguments and over those done:
/// each binade's expected cases per argument (its `expected_hr_cases` over the arguments of
/// the estimate's units there, `units × 2^unit_bits`) times the campaign's arguments of the
/// binade. `binades` is `(negative, exponent, arguments total, arguments done)`; a binade the
/// estimate lacks expects none.
pub fn estimate_expects(
    e: &tmd_wire::CostEstimate,
    binades: &[(bool, i32, f64, f64)],
) -> (f64, f64) {
    let per_unit = 2f64.powi(e.unit_bits.min(62) as i32);
    let rate: std::collections::HashMap<(bool, i32), f64> = e
        .binades
        .iter()
        .filter(|b| b.units > 0)
        .map(|b| {
            (
                (b.negative, b.exponent),
                b.expected_hr_cases / (b.units as f64 * per_unit),
            )
        })
        .collect();
    binades
        .iter()
        .fold((0.0, 0.0), |(all, done), &(n, x, total, so_far)| {
            let r = rate.get(&(n, x)).copied().unwrap_or(0.0);
            (all + r * total, done + r * so_far)
        })
}

/// `P(X <= k)` for `X` Poisson with mean `lambda`, summed in logarithms (no underflow for
/// large means).
pub fn poisson_cdf(k: u64, lambda: f64) -> f64 {
    if !(lambda > 0.0 && lambda.is_finite()) {
        return 1.0;
    }
    let ln_lambda = lambda.ln();
    // log P(X = i), from i = 0, and the running log of the sum.
    let mut term = -lambda;
    let mut sum = term;
    for i in 1..=k {
        term += ln_lambda - (i as f64).ln();
        let (hi, lo) = if term > sum { (term, sum) } else { (sum, term) };
        sum = hi + (lo - hi).exp().ln_1p();
        // Past the mode the terms only shrink; once they no longer move the sum, stop.
        if i as f64 > lambda && term < sum - 40.0 {
            break;
        }
    }
    sum.exp().min(1.0)
}

/// Whether `observed` cases are improbably few where `expected` were expected.
pub fn implausibly_low(observed: u64, expected: f64) -> bool {
    expected > 0.0 && poisson_cdf(observed, expected) < UNIT_ALPHA
}

/// How many (overdispersed) standard deviations an owner's total `observed` lies below its
/// `expected`, when that is beyond [`OWNER_Z`]; `None` otherwise.
pub fn owner_improbable(observed: f64, expected: f64) -> Option<f64> {
    if !(expected > 0.0 && expected.is_finite()) {
        return None;
    }
    let z = (observed - expected) / (OVERDISPERSION * expected).sqrt();
    (z < -OWNER_Z).then_some(z)
}

/// Whether a result's own counters admit cases it does not list: every candidate MPFR did not
/// reject (`candidates - false_positives`) is an HR-case or an exact case, so an honest engine
/// lists at least that many (more where pieces are searched exhaustively, which count no
/// candidates). A result that drops cases but keeps its counters is audited like an
/// implausibly low count; one that also lowers its counters disagrees with its replicas'.
pub fn counters_admit_omission(stats: &UnitStats, listed: usize) -> bool {
    stats.false_positives > stats.candidates
        || stats.candidates - stats.false_positives > listed as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_estimate_expects_cases_per_argument_of_each_binade() {
        let binade = |exponent, units, expected_hr_cases| tmd_wire::BinadeCost {
            negative: false,
            exponent,
            units,
            sampled: 1,
            seconds_per_unit: 1.0,
            seconds_per_unit_stderr: 0.0,
            expected_hr_cases,
            expected_hr_cases_stderr: 0.0,
            arguments: None,
        };
        let e = tmd_wire::CostEstimate {
            version: tmd_wire::COST_ESTIMATE_VERSION,
            function: "exp".into(),
            format: "p24".into(),
            min_bits: 20,
            unit_bits: 10,
            backend: "cpu".into(),
            seed: 1,
            // 8 cases in 4 units of 1024: 1/512 per argument; 1 in 1 unit: 1/1024.
            binades: vec![binade(0, 4, 8.0), binade(1, 1, 1.0)],
            total_seconds: 5.0,
            total_seconds_stderr: 0.0,
            total_hr_cases: 9.0,
            total_hr_cases_stderr: 0.0,
        };
        // The campaign covers half of binade 0 (half of it done), all of binade 1 (none
        // done) and a binade the estimate lacks.
        let (all, done) = estimate_expects(
            &e,
            &[
                (false, 0, 2048.0, 1024.0),
                (false, 1, 1024.0, 0.0),
                (false, 2, 1e6, 1e6),
            ],
        );
        assert_eq!((all, done), (4.0 + 1.0, 2.0));
    }

    #[test]
    fn counters_that_admit_dropped_cases_are_caught() {
        let stats = |candidates, false_positives| UnitStats {
            candidates,
            false_positives,
            ..UnitStats::default()
        };
        assert!(!counters_admit_omission(&stats(10, 7), 3));
        assert!(
            !counters_admit_omission(&stats(10, 7), 5),
            "exhaustive pieces add cases"
        );
        assert!(counters_admit_omission(&stats(10, 7), 2));
        assert!(
            counters_admit_omission(&stats(3, 4), 10),
            "more rejections than candidates"
        );
        assert!(!counters_admit_omission(&stats(0, 0), 0));
    }

    #[test]
    fn poisson_tails_match_closed_forms() {
        // P(X = 0) = e^-λ.
        for lambda in [0.5, 2.0, 10.0, 128.0, 700.0] {
            let p = poisson_cdf(0, lambda);
            assert!((p.ln() + lambda).abs() < 1e-9, "{lambda}: {p}");
        }
        // P(X <= 1) = e^-λ (1 + λ); P(X <= 2) adds λ²/2.
        let l: f64 = 3.0;
        assert!((poisson_cdf(1, l) - (-l).exp() * (1.0 + l)).abs() < 1e-12);
        assert!((poisson_cdf(2, l) - (-l).exp() * (1.0 + l + l * l / 2.0)).abs() < 1e-12);
        // Far above the mean the sum is all of it.
        assert!((poisson_cdf(1000, 10.0) - 1.0).abs() < 1e-12);
        // The median of a large mean.
        let half = poisson_cdf(128, 128.0);
        assert!((0.5..0.55).contains(&half), "{half}");
        assert_eq!(poisson_cdf(5, 0.0), 1.0);
    }

    #[test]
    fn the_unit_test_catches_empty_claims_only_where_cases_are_many() {
        // K = 34, units of 2^40: 128 expected.
        let lambda = expected_cases(2f64.powi(40), 34, None);
        assert_eq!(lambda, 128.0);
        assert!(implausibly_low(0, lambda));
        assert!(implausibly_low(70, lambda), "45% left out");
        assert!(!implausibly_low(100, lambda), "within the noise");
        // K = 44, units of 2^44: 2 expected; no single count says anything.
        let lambda = expected_cases(2f64.powi(44), 44, None);
        assert_eq!(lambda, 2.0);
        assert!(!implausibly_low(0, lambda));
        // An estimate lower than the model lowers the expectation; a higher one does not
        // raise it.
        assert_eq!(expected_cases(1024.0, 8, Some(2f64.powi(-9))), 2.0);
        assert_eq!(expected_cases(1024.0, 8, Some(1.0)), 8.0);
        assert_eq!(expected_cases(1024.0, 8, Some(f64::NAN)), 8.0);
    }

    #[test]
    fn the_owner_test_adds_up_what_one_unit_cannot_show() {
        // An owner claiming nothing where 2 are expected per unit: caught after 73 units.
        let caught = (1..1000)
            .find(|&n| owner_improbable(0.0, 2.0 * n as f64).is_some())
            .unwrap();
        assert_eq!(caught, 73);
        // Half left out at 128 per unit: caught within 5 units.
        let caught = (1..1000)
            .find(|&n| owner_improbable(64.0 * n as f64, 128.0 * n as f64).is_some())
            .unwrap();
        assert!(caught <= 5, "{caught}");
        // An honest owner's totals within a few Poisson deviations are never caught.
        assert_eq!(owner_improbable(10_000.0 - 300.0, 10_000.0), None);
    }
}
