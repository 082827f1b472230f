//! The estimator of `estimate`: a binade's total projected from a simple random sample of its
//! units (without replacement), with its standard error under the finite-population
//! correction, and where to spend the next sampled units.

/// A binade's projected total and its standard error.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Projection {
    pub total: f64,
    pub stderr: f64,
}

/// The total over a population of `pool` units from the values `xs` of a simple random sample
/// of them drawn without replacement: `pool * mean`, with standard error
/// `pool * sqrt((1 - n/pool) s^2 / n)` (`s^2` the sample variance, `n - 1` in its
/// denominator). Zero when nothing was sampled; the error is 0 when every unit was sampled
/// (nothing is left to guess) and when one was (no variance can be measured: the contract's
/// rule, `tmd_wire::BinadeCost`).
pub fn project(pool: u64, xs: &[f64]) -> Projection {
    let n = xs.len();
    if n == 0 || pool == 0 {
        return Projection {
            total: 0.0,
            stderr: 0.0,
        };
    }
    let big_n = pool as f64;
    let mean = xs.iter().sum::<f64>() / n as f64;
    let total = big_n * mean;
    if n < 2 {
        return Projection { total, stderr: 0.0 };
    }
    let s2 = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1) as f64;
    let fpc = (1.0 - n as f64 / big_n).max(0.0);
    Projection {
        total,
        stderr: big_n * (fpc * s2 / n as f64).sqrt(),
    }
}

/// What is known of one binade when choosing the next units.
#[derive(Debug, Clone)]
pub struct Sampled {
    /// Units of the binade that may be sampled.
    pub pool: u64,
    /// Units still available to the sample.
    pub available: usize,
    /// The seconds of the units sampled so far.
    pub xs: Vec<f64>,
}

/// How many more units each binade samples, `k` in all: one at a time where one more shrinks
/// the variance of the total time, `pool^2 s^2 (1/n - 1/(n+1))`, most per expected second
/// (the binade's mean). A binade of one sample is taken to vary as much as its mean (its
/// variance is unknown). Fewer than `k` when the binades run out.
pub fn allocate(binades: &[Sampled], k: usize) -> Vec<usize> {
    let mut extra = vec![0usize; binades.len()];
    let stat: Vec<(f64, f64)> = binades
        .iter()
        .map(|b| {
            let n = b.xs.len().max(1) as f64;
            let mean = b.xs.iter().sum::<f64>() / n;
            let s2 = if b.xs.len() >= 2 {
                b.xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1.0)
            } else {
                mean * mean
            };
            (mean.max(1e-9), s2)
        })
        .collect();
    for _ in 0..k {
        let mut best: Option<(usize, f64)> = None;
        for (i, b) in binades.iter().enumerate() {
            if extra[i] >= b.available {
                continue;
            }
            let n = (b.xs.len() + extra[i]).max(1) as f64;
            let big_n = b.pool as f64;
            let (cost, s2) = stat[i];
            let gain = big_n * big_n * s2 * (1.0 / n - 1.0 / (n + 1.0)) / cost;
            if best.is_none_or(|(_, g)| gain > g) {
                best = Some((i, gain));
            }
        }
        match best {
            Some((i, _)) => extra[i] += 1,
            None => break,
        }
    }
    extra
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    proptest! {
        /// A sample of every unit is the population: the exact total, no error.
        #[test]
        fn a_census_is_exact(xs in prop::collection::vec(0.0f64..1e3, 1..50)) {
            let p = project(xs.len() as u64, &xs);
            let sum: f64 = xs.iter().sum();
            prop_assert!((p.total - sum).abs() <= 1e-9 * sum.max(1.0));
            prop_assert_eq!(p.stderr, 0.0);
        }

        /// Scaling every value scales the total and its error; the order does not matter.
        #[test]
        fn the_projection_is_linear_and_symmetric(
            xs in prop::collection::vec(0.0f64..1e3, 2..30),
            extra in 0u64..1000,
            c in 0.001f64..1e3,
        ) {
            let pool = xs.len() as u64 + extra;
            let p = project(pool, &xs);
            let scaled: Vec<f64> = xs.iter().map(|x| x * c).collect();
            let q = project(pool, &scaled);
            prop_assert!((q.total - c * p.total).abs() <= 1e-9 * (c * p.total).max(1.0));
            prop_assert!((q.stderr - c * p.stderr).abs() <= 1e-9 * (c * p.stderr).max(1.0));
            let mut rev = xs.clone();
            rev.reverse();
            let r = project(pool, &rev);
            prop_assert!((r.total - p.total).abs() <= 1e-9 * p.total.max(1.0));
            prop_assert!(p.stderr >= 0.0);
        }

        /// The error shrinks as the sample grows towards the population (same variance).
        #[test]
        fn the_correction_shrinks_the_error(n in 2usize..20, extra in 1u64..100) {
            let xs: Vec<f64> = (0..n).map(|i| (i % 2) as f64).collect();
            let small = project(n as u64 + extra, &xs);
            let big = project(n as u64 + extra + 1000, &xs);
            prop_assert!(small.stderr < big.stderr);
        }

        /// The allocation never takes more than is available, nor more than asked.
        #[test]
        fn allocation_respects_what_is_left(
            avail in prop::collection::vec(0usize..5, 1..8),
            k in 0usize..40,
        ) {
            let binades: Vec<Sampled> = avail
                .iter()
                .enumerate()
                .map(|(i, &a)| Sampled { pool: 10 + a as u64, available: a, xs: vec![1.0 + i as f64, 2.0] })
                .collect();
            let extra = allocate(&binades, k);
            prop_assert!(extra.iter().zip(&avail).all(|(e, a)| e <= a));
            prop_assert_eq!(extra.iter().sum::<usize>(), k.min(avail.iter().sum()));
        }
    }

    /// The estimator is unbiased and its error honest: over many seeded samples of a known
    /// skewed population, the mean projection is the true total and about 95% of the
    /// intervals of two standard errors hold it.
    #[test]
    fn samples_of_a_known_population_cover_its_total() {
        let pop: Vec<f64> = (0..400)
            .map(|i| 1.0 + ((i * 37) % 101) as f64 / 10.0)
            .collect();
        let truth: f64 = pop.iter().sum();
        let mut rng = StdRng::seed_from_u64(7);
        let (trials, n) = (4000, 20);
        let (mut sum, mut covered) = (0.0, 0);
        for _ in 0..trials {
            let idx = rand::seq::index::sample(&mut rng, pop.len(), n);
            let xs: Vec<f64> = idx.iter().map(|i| pop[i]).collect();
            let p = project(pop.len() as u64, &xs);
            sum += p.total;
            covered += usize::from((p.total - truth).abs() <= 2.0 * p.stderr);
        }
        let mean = sum / trials as f64;
        assert!(
            (mean - truth).abs() < 0.01 * truth,
            "mean {mean} vs {truth}"
        );
        let rate = covered as f64 / trials as f64;
        assert!((0.90..0.99).contains(&rate), "coverage {rate}");
    }

    /// The expensive, varied binade gets the next units, not the cheap steady one.
    #[test]
    fn allocation_goes_where_the_variance_is() {
        let binades = vec![
            Sampled {
                pool: 1000,
                available: 100,
                xs: vec![0.001, 0.001, 0.001],
            },
            Sampled {
                pool: 1000,
                available: 100,
                xs: vec![1.0, 3.0, 2.0],
            },
        ];
        assert_eq!(allocate(&binades, 5), vec![0, 5]);
    }
}
