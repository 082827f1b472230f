//! The dense route: a small piece too curved for the lines of phases 1-2 (erfc in binary32 near
//! 9) is walked at every argument on its full-degree fixed-point Taylor polynomial, and
//! only the arguments within the threshold go to MPFR (`docs/error-analysis.md` §13).
//!
//! Such a piece used to be judged argument by argument with MPFR (`search::EXHAUSTIVE_MAX`),
//! which costs about 0.25 ms per argument for erfc near 9. Here the polynomial
//! `R~(t) = sum_m beta_m C(t, m)` (`generation::fixed_polynomial`, exact integer coefficients,
//! written error `eps_T + eps_R`) is evaluated by tabulated differences of full degree: exact
//! additions of fixed-size words mod 1, as in phase 3 but without dropping the terms of degree 3
//! and more, so nothing is left out. The route runs on the host for every back end (the CUDA
//! back end is only handed generated pieces), so its candidates and counts are the same on all.

use crate::numbers::fixed::{self, Word};
use crate::plan::UnitSpec;
use crate::search::config::SearchConfig;
use crate::search::generation::{fixed_polynomial, FixedPoly};
use crate::search::narrow::{self, Narrow};
use rug::Integer;

/// Pieces shorter than this are judged by MPFR argument by argument: one polynomial (a series
/// at 800 bits or more) costs about as much as a few hundred MPFR evaluations of a cheap `f`.
pub const DENSE_MIN: u64 = 512;

/// The largest degree the dense route takes (the phases' pieces stop at
/// `GenConfig::max_degree`, 12): the walk costs `degree` word additions per argument, cheap
/// beside one MPFR evaluation, so a higher degree still pays; beyond it, MPFR.
pub const DENSE_MAX_DEGREE: usize = 16;

/// A piece ready for the dense walk: its polynomial and the walk's threshold.
#[derive(Debug, Clone)]
pub struct Dense {
    fx: FixedPoly,
    /// `ceil((radius + eps_T + eps_R) 2^(64-F)) + 1`: an argument is kept when the top 64 bits
    /// `T` of `{R~(t)}` satisfy `T <= t` or `T >= 2^64 - t`.
    t: u64,
    /// The offsets the piece was made for and its narrowed walk over them (`narrow::plan`).
    planned: (u64, Option<Narrow>),
    /// `fx.beta` mod `2^(64 fx.limbs)`, word after word, each as `fx.limbs` limbs least
    /// significant first: what every walk starts from.
    limbs: Vec<u64>,
}

impl Dense {
    /// The piece of `fx` at threshold `t`, to be walked over `count` offsets. Its narrowing
    /// and its words are worked out here, on the thread that generated it: on the GPU's route
    /// far out (millions of pieces a unit) they took a single host thread 3 us a piece
    /// between launches, as long as the launches themselves.
    pub fn new(fx: FixedPoly, t: u64, count: u64) -> Dense {
        let narrowed = narrow::plan(&fx, t, count);
        let mut limbs = vec![0u64; fx.beta.len() * fx.limbs];
        for (b, slot) in fx.beta.iter().zip(limbs.chunks_mut(fx.limbs)) {
            Integer::from(b.keep_bits_ref(64 * fx.limbs as u32))
                .write_digits(slot, rug::integer::Order::Lsf);
        }
        Dense {
            fx,
            t,
            planned: (count, narrowed),
            limbs,
        }
    }

    /// The polynomial.
    pub fn fx(&self) -> &FixedPoly {
        &self.fx
    }

    /// The walk's threshold (see the field).
    pub fn t(&self) -> u64 {
        self.t
    }

    /// The same piece at another threshold, its narrowing planned again.
    pub fn with_threshold(self, t: u64) -> Dense {
        let count = self.planned.0;
        Dense::new(self.fx, t, count)
    }

    /// The narrowed walk over `count` offsets (`narrow::plan`): the one planned with the
    /// piece where `count` is its own.
    pub fn narrowing(&self, count: u64) -> Option<Narrow> {
        match self.planned {
            (c, nw) if c == count => nw,
            _ => narrow::plan(&self.fx, self.t, count),
        }
    }

    /// The polynomial's words (`beta_m` mod `2^(64 fx.limbs)`), `fx.limbs` limbs each, least
    /// significant first.
    pub fn words(&self) -> &[u64] {
        &self.limbs
    }

    /// Word `m` of the polynomial (`beta_m` mod `2^(64 fx.limbs)`) as `fx.limbs` limbs, least
    /// significant first.
    pub fn word_limbs(&self, m: usize) -> &[u64] {
        &self.limbs[m * self.fx.limbs..(m + 1) * self.fx.limbs]
    }
}

/// The dense route for `piece`, or `None` where MPFR is to judge every argument: the route is
/// off, the piece is short, or no polynomial of degree at most [`DENSE_MAX_DEGREE`] fits, or its
/// threshold would keep more than about an eighth of the arguments (then MPFR is as cheap).
pub fn plan(cfg: &SearchConfig, piece: UnitSpec) -> Option<Dense> {
    if !cfg.dense || piece.count < DENSE_MIN {
        return None;
    }
    let mut gen = cfg.gen;
    gen.max_degree = gen.max_degree.max(DENSE_MAX_DEGREE);
    let fx = fixed_polynomial(cfg.function, cfg.precision, &gen, piece).ok()?;
    let t = threshold(&fx)?;
    Some(Dense::new(fx, t, piece.count))
}

/// The walk's threshold in units of `2^-64` (see [`Dense::t`]), where the written bound
/// `radius + eps_T + eps_R` stays below `2^-4`.
pub(crate) fn threshold(fx: &FixedPoly) -> Option<u64> {
    let f = fx.frac_bits();
    let base = Integer::from(&fx.radius + &fx.taylor) + &fx.rounding;
    if Integer::from(&base << 4u32) >= Integer::from(1) << f {
        return None;
    }
    // ceil(base 2^(64 - F)) + 1 < 2^60 + 2.
    let unit = Integer::from(1) << (f - 64);
    let (q, r) = base.div_rem_floor(unit);
    let top = if r != 0 { q + 1u32 } else { q };
    (top + 1u32).to_u64()
}

/// The offsets `t` in `[0, count)` of the piece whose `R~(t)` lies within the threshold of an
/// integer, in increasing order: a superset of the arguments with `d <= 2^-k`. Walked narrowed
/// where `narrow::plan` allows (then the threshold is its widened one), exactly otherwise.
pub fn candidates(d: &Dense, count: u64) -> Vec<u64> {
    let nw = d.narrowing(count);
    macro_rules! dispatch {
        ([$($n:literal),*], [$($l:literal),*]) => {
            match (d.fx.limbs, nw) {
                $(($n, Some(nw)) => narrow::walk::<$n>(&d.limbs, count, nw),)*
                $(($l, None) => walk::<$l>(d, count),)*
                (other, _) => unreachable!("{other} limbs"),
            }
        };
    }
    // `narrow::plan` narrows only words of more than two limbs.
    dispatch!([3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 5, 6, 7, 8])
}

/// [`candidates`] of each of `pieces` (a piece and its number of offsets), on the host's
/// threads, and the seconds the walks took summed over them.
pub fn walk_on_host(pieces: &[(&Dense, u64)]) -> (Vec<Vec<u64>>, f64) {
    use rayon::prelude::*;
    let walked: Vec<(Vec<u64>, f64)> = pieces
        .par_iter()
        .map(|&(d, n)| {
            let t = std::time::Instant::now();
            let kept = candidates(d, n);
            (kept, t.elapsed().as_secs_f64())
        })
        .collect();
    let seconds = walked.iter().map(|w| w.1).sum();
    (walked.into_iter().map(|w| w.0).collect(), seconds)
}

/// Tabulated differences `Delta^m R~(t)` from `Delta^m R~(0) = beta_m`, advanced by
/// `Delta^m += Delta^(m+1)` (ascending `m`, so each reads the old `Delta^(m+1)`): `R~(t)` exactly
/// mod 1 at every `t`.
fn walk<const L: usize>(d: &Dense, count: u64) -> Vec<u64> {
    let mut w: Vec<Word<L>> = (0..d.fx.beta.len())
        .map(|m| d.word_limbs(m).try_into().expect("L limbs"))
        .collect();
    let (low, high) = (d.t, 0u64.wrapping_sub(d.t));
    let mut out = Vec::new();
    for t in 0..count {
        let top = fixed::floor64(&w[0]);
        if top <= low || top >= high {
            out.push(t);
        }
        for m in 0..w.len() - 1 {
            let up = w[m + 1];
            fixed::add(&mut w[m], &up);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numbers::format::Format;
    use crate::oracle::function::Function;
    use rug::Float;

    fn erfc_piece(first: u64, count: u64) -> UnitSpec {
        UnitSpec {
            negative: false,
            exponent: 3,
            first,
            count,
        }
    }

    fn erfc_cfg(k: u32) -> SearchConfig {
        let fmt = Format::named("binary32").unwrap();
        SearchConfig::in_format(Function::Erfc, fmt, k)
    }

    /// The walked `R~(t)` is the polynomial `sum_m beta_m C(t, m)` exactly (mod 1), and lies
    /// within `eps_T + eps_R` of MPFR's `G` at every argument of an erfc piece near 9 whose
    /// curvature fills the phases' circle.
    #[test]
    fn walked_values_are_within_the_written_bound_of_g() {
        let cfg = erfc_cfg(16);
        let piece = erfc_piece((9 << 20) + 40960, 2048);
        let d = plan(&cfg, piece).expect("the dense route fits");
        assert!(d.fx.degree > 2, "degree {}", d.fx.degree);
        let f = d.fx.frac_bits();
        let one = Integer::from(1) << f;
        let err = Integer::from(&d.fx.taylor + &d.fx.rounding);
        let x0 = piece.argument(0).to_float(cfg.precision);
        let e0 = Float::with_val(4000, x0.erfc_ref()).get_exp().unwrap() - 1;
        let mut w: Vec<Integer> = d.fx.beta.clone();
        for t in 0..piece.count {
            let exact: Integer =
                d.fx.beta
                    .iter()
                    .enumerate()
                    .map(|(m, b)| b * Integer::from(t).binomial(m as u32))
                    .sum();
            assert_eq!(Integer::from(&w[0] - &exact), 0, "t={t}");
            if t % 61 == 0 {
                // G = 2^(24 - q) erfc(x), q the piece's smaller output exponent: read off
                // G(0) ~ beta_0 and erfc(x_0).
                let x = piece.argument(t).to_float(cfg.precision);
                let y = Float::with_val(4000, x.erfc_ref());
                let q = 24 + e0 - (d.fx.beta[0].significant_bits() as i32 - 1 - f as i32);
                let mut g = y;
                g <<= 24 - q + f as i32;
                let truth = g.to_integer().unwrap();
                let diff = Integer::from(&exact - &truth).abs();
                assert!(diff <= Integer::from(&err + 1u32), "t={t}: {diff} > {err}");
            }
            for m in 0..w.len() - 1 {
                let up = w[m + 1].clone();
                w[m] += up;
            }
        }
        // The word walk keeps the same values mod 1.
        let kept = candidates(&d, piece.count);
        let base = Integer::from(&d.fx.radius + &err);
        let mut w: Vec<Integer> = d.fx.beta.clone();
        for t in 0..piece.count {
            let frac = Integer::from(w[0].keep_bits_ref(f));
            let dist = Integer::from(&one - &frac).min(frac);
            if dist <= base {
                assert!(
                    kept.binary_search(&t).is_ok(),
                    "t={t} within the bound, dropped"
                );
            }
            for m in 0..w.len() - 1 {
                let up = w[m + 1].clone();
                w[m] += up;
            }
        }
        assert!(kept.len() < 64, "{} kept", kept.len());
    }

    /// Short pieces, the route turned off, and a threshold too wide to filter: MPFR.
    #[test]
    fn the_route_is_refused_where_it_does_not_pay() {
        let piece = erfc_piece(9 << 20, 1024);
        assert!(plan(&erfc_cfg(16), piece).is_some());
        assert!(plan(&erfc_cfg(16), erfc_piece(9 << 20, DENSE_MIN - 1)).is_none());
        let mut off = erfc_cfg(16);
        off.dense = false;
        assert!(plan(&off, piece).is_none());
        assert!(plan(&erfc_cfg(3), piece).is_none());
    }
}
