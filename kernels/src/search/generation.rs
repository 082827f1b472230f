//! Generation of one piece of a unit: from `f` to exact integer per-domain polynomials and the
//! thresholds of the three phases (`shared/ALGORITHMS.md` section 3, `docs/error-analysis.md`).
//!
//! Everything after the Taylor coefficients is exact integer arithmetic on values scaled by
//! `2^F` ("fixed units"); every bound is an integer rounded upwards. The only inexact steps are
//! the ball evaluation of the Taylor coefficients (whose radii are carried) and the rounding of
//! the binomial coefficients `beta_m` to `F` fractional bits (bounded by `eps_R`).

use crate::numbers::ball::{Ball, BallError};
use crate::numbers::format::{Exponents, Precision};
use crate::numbers::series::Series;
use crate::oracle::function::Function;
use crate::oracle::verify::{far_beyond, SkipReason};
use crate::plan::UnitSpec;
use crate::search::rise::rise_pays;
use rug::float::Round;
use rug::ops::{AddAssignRound, MulAssignRound, Pow};
use rug::{Float, Integer};
use std::cell::RefCell;
use std::collections::HashMap;

/// Search parameters that shape generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenConfig {
    /// The threshold `k`: arguments with `d <= 2^-k` half-ulps are searched for.
    pub min_bits: u32,
    /// The domain size `n` (domains of `2^n` arguments) of the published method; lowered per
    /// piece where the function's curvature would make the line test fail too often (such a
    /// piece is steep, and may be split: `search::unit::split_steep`).
    pub domain_bits: u32,
    /// Largest domain size where `f` is flatter than that: `n` rises above
    /// `domain_bits` up to this while the curvature allows (§5 of docs/error-analysis.md),
    /// which leaves fewer domains to walk and test; screened pieces' domains too, while the
    /// screen's points per domain allow (§16). At most `domain_bits`: the published size
    /// everywhere.
    pub flat_domain_bits: u32,
    /// Phase 1's quadratic screen (§16 of docs/error-analysis.md): where the line's
    /// curvature kept its domains below the largest size (steep pieces, exp on [1, 2)),
    /// domains up to `flat_domain_bits` whose line lists the few arguments within its
    /// threshold, each checked against the domain's quadratic, when that allows larger domains
    /// than the line test alone. On by default (about twice as fast on steep units and on
    /// [1, 2), BENCHMARKS.md, steep and flat regions); off: the line test everywhere (the
    /// former route, the same HR-cases, other statistics).
    pub quadratic: bool,
    /// `log2` of the number of subdomains per domain in phase 2 (3: kappa = 8).
    pub subdomain_split_bits: u32,
    /// Largest degree of the Taylor polynomial before the piece is split.
    pub max_degree: usize,
    /// The exponent range of a named format (`None`: unbounded). Outputs below `2^emin` are
    /// put on the subnormal grid; pieces whose outputs overflow or round like 0 are refused
    /// ([`GenError::Overflow`], [`GenError::Underflow`]) and listed as skipped by the search.
    pub exponents: Option<Exponents>,
}

impl GenConfig {
    pub fn new(min_bits: u32) -> GenConfig {
        GenConfig {
            min_bits,
            domain_bits: 15,
            flat_domain_bits: FLAT_DOMAIN_BITS,
            quadratic: true,
            subdomain_split_bits: 3,
            max_degree: 12,
            exponents: None,
        }
    }
}

/// Why a piece cannot be handled by one polynomial: the caller splits it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GenError {
    #[error("|f| has a zero or crosses more than one power of two on the piece")]
    Shape,
    #[error("no Taylor polynomial of degree <= {0} is accurate enough on the piece")]
    Degree(usize),
    #[error("the fixed-point width needed exceeds 512 bits")]
    Width,
    #[error("ball arithmetic: {0}")]
    Ball(#[from] BallError),
    /// The search radius alone (with the errors) reaches half the circle: no existence test
    /// can rule anything out, and smaller pieces do not help (the radius does not shrink).
    #[error("the threshold of the existence tests does not fit below 1")]
    Threshold,
    /// The threshold does not fit, but the search radius is below `1/8`: the errors and the
    /// line's quadratic residual fill the circle, and halves may fit (split).
    #[error("the threshold of the existence tests does not fit below 1 on this piece")]
    Curvature,
    /// Every output of the piece has magnitude `2^(emax+1)` or more: no HR-case.
    #[error("f overflows the format on the whole piece")]
    Overflow,
    /// Every output of the piece lies below `2^(emin-p-1)` (a quarter of the smallest
    /// subnormal): each rounds like 0, at distance `|f(x)| 2^(p-emin)` half-ulps from it.
    #[error("f underflows below a quarter of the smallest subnormal on the whole piece")]
    Underflow,
}

/// The smallest domain size the phases support (phase 2 needs subdomains of 4 arguments).
pub const MIN_DOMAIN_BITS: u32 = 5;

/// The default of [`GenConfig::flat_domain_bits`].
pub const FLAT_DOMAIN_BITS: u32 = 20;
pub use crate::numbers::fixed::MAX_LIMBS;
/// How many halvings of a piece generation predicts the degree and width of
/// ([`Generated::halves`]): a unit of `2^40` down to pieces of `2^30` (exp near 300 stops at
/// `2^34`).
pub const MAX_HALVINGS: u32 = 10;

/// A generated piece: exact polynomials and thresholds, the same for every back end.
#[derive(Debug, Clone)]
pub struct Generated {
    pub piece: UnitSpec,
    /// Degree `delta` of the Taylor polynomial.
    pub degree: usize,
    /// Limbs per word; `F = 64 limbs` fractional bits.
    pub limbs: usize,
    /// Domains of `2^domain_bits` arguments; the last one may be partial.
    pub domain_bits: u32,
    pub domains: u64,
    /// Subdomains of `2^sub_bits` arguments in phase 2.
    pub sub_bits: u32,
    /// Whether `|f|` crosses a power of two on the piece (the search radius is doubled).
    pub crossing: bool,
    /// `rho[j][l] = Delta_i^l r_j(0)`, in fixed units, for `j = 0..=degree`.
    pub rho: Vec<Vec<Integer>>,
    /// Walked polynomials (tabulated differences at `i = 0`): the phase-1 line's `b`
    /// (`r_0 - K0 r_2 + eps1`), its slope (`r_1 + K1 r_2`), and `r_2`.
    pub walk_b: Vec<Integer>,
    pub walk_slope: Vec<Integer>,
    pub walk_r2: Vec<Integer>,
    /// Error terms, fixed units, rounded upwards.
    pub bounds: Bounds,
    /// What pieces of `count >> j` arguments (`j = 1, 2, ..`) would need, as (degree, limbs),
    /// predicted from this piece's own remainder coefficients (a steep piece is cut
    /// straight to the size its halves would reach, `search/unit.rs`, `steep_depth`). `None` where
    /// no degree up to the maximum fits. A route only: every piece cut is generated anew.
    pub halves: Vec<Option<(usize, usize)>>,
    /// Whether phase 1 runs the quadratic screen (`existence::quadratic`, threshold `e1` for
    /// the line's points, `t3` for the quadratic's values) instead of the line test.
    pub quadratic: bool,
    /// Phase-1 line adjustment constants `K0 = N^2/16`, `K1 = N/2 - 1`, and phase 2's.
    pub k0: u64,
    pub k1: u64,
    pub k0_sub: u64,
    pub k1_sub: u64,
    /// Thresholds of the existence tests (units of `2^-64`) and of phase 3 (top 64 bits).
    pub e1: u64,
    pub e2: u64,
    pub t3: u64,
}

/// The error terms of a piece, in fixed units (`2^-F` of `G`), each rounded upwards.
#[derive(Debug, Clone)]
pub struct Bounds {
    /// `2^-k` (doubled where the output crosses a power of two).
    pub radius: Integer,
    /// Taylor remainder `eps_T`.
    pub taylor: Integer,
    /// Rounding of the binomial coefficients, `eps_R`.
    pub rounding: Integer,
    /// Terms of degree 3 and more left out of each domain's polynomial.
    pub left_out: Integer,
    /// `max_i |r_2(i)|`.
    pub r2: Integer,
    /// `radius + taylor + rounding + left_out`: the phase-3 threshold.
    pub base: Integer,
    /// Phase 1's `eps''` (base plus the quadratic residual of the line).
    pub eps1: Integer,
    /// Phase 2's `eps''`.
    pub eps2: Integer,
}

impl Generated {
    pub fn frac_bits(&self) -> u32 {
        64 * self.limbs as u32
    }

    pub fn domain_size(&self) -> u64 {
        1 << self.domain_bits
    }

    /// Arguments in domain `i` (the last one may be partial).
    pub fn domain_len(&self, i: u64) -> u64 {
        (self.piece.count - i * self.domain_size()).min(self.domain_size())
    }

    /// The tabulated differences of a walked polynomial at domain `i0`:
    /// `Delta^l w(i0) = sum_m C(i0, m) rho_(l+m)`, exact.
    pub fn shift(rho: &[Integer], i0: u64) -> Vec<Integer> {
        let binom: Vec<Integer> = (0..rho.len() as u32)
            .map(|m| Integer::from(i0).binomial(m))
            .collect();
        (0..rho.len())
            .map(|l| {
                let mut acc = Integer::new();
                for m in 0..rho.len() - l {
                    acc += Integer::from(&binom[m] * &rho[l + m]);
                }
                acc
            })
            .collect()
    }

    /// `r_j(i)` exactly (fixed units).
    pub fn r(&self, j: usize, i: u64) -> Integer {
        let mut acc = Integer::new();
        for (l, c) in self.rho[j].iter().enumerate() {
            acc += c * Integer::from(i).binomial(l as u32);
        }
        acc
    }
}

/// The per-domain polynomials for domains of `2^n` arguments: `rho[j][l] = Delta^l r_j(0)` with
/// `r_j(i) = sum_(m >= j) beta_m C(iN, m - j)`, the number of domains, the bound on the terms
/// of degree 3 and more left out of each domain, and `B_2 >= max_i |r_2(i)|`.
fn per_domain(
    beta: &[Integer],
    degree: usize,
    count: u64,
    n: u32,
) -> (Vec<Vec<Integer>>, u64, Integer, Integer) {
    let big_n = 1u64 << n;
    let domains = count.div_ceil(big_n);
    let mut rho: Vec<Vec<Integer>> = Vec::with_capacity(degree + 1);
    for j in 0..=degree {
        let rj: Vec<Integer> = (0..=(degree - j) as u64)
            .map(|i| {
                let x = Integer::from(i * big_n);
                (j..=degree)
                    .map(|m| &beta[m] * x.clone().binomial((m - j) as u32))
                    .sum::<Integer>()
            })
            .collect();
        let row: Vec<Integer> = (0..rj.len())
            .map(|l| {
                let mut acc = Integer::new();
                for (s, v) in rj.iter().enumerate().take(l + 1) {
                    let c = Integer::from(l as u32).binomial(s as u32);
                    if (l - s) % 2 == 0 {
                        acc += c * v;
                    } else {
                        acc -= c * v;
                    }
                }
                acc
            })
            .collect();
        rho.push(row);
    }
    // B_j = sum_l |rho_(j,l)| C(tau - 1, l) >= max_i |r_j(i)|.
    let bound_j = |j: usize| -> Integer {
        rho[j]
            .iter()
            .enumerate()
            .map(|(l, c)| {
                Integer::from(c.abs_ref()) * Integer::from(domains - 1).binomial(l as u32)
            })
            .sum()
    };
    let left_out: Integer = (3..=degree)
        .map(|j| bound_j(j) * Integer::from(big_n - 1).binomial(j as u32))
        .sum();
    let bound2 = if degree >= 2 {
        bound_j(2)
    } else {
        Integer::new()
    };
    (rho, domains, left_out, bound2)
}

/// The exponent `q` of the output binade a piece's `G = 2^(p - q) |f|` is scaled by, and
/// whether `|f|` crosses into the next one, from bounds `0 < lo <= |f| <= hi` on the piece: `|f|`
/// lies in `[2^q, 2^(q+2))`, clamped to the format's range (below `2^emin` the subnormal grid's
/// binade). `Overflow` or `Underflow` where the whole piece is beyond the range, `Shape` where
/// part of it is or it spans more than two binades (the piece is to be split).
pub(crate) fn output_binade(
    cfg: &GenConfig,
    pb: i32,
    lo: &Float,
    hi: &Float,
) -> Result<(i32, bool), GenError> {
    let mut q = lo.get_exp().expect("nonzero") - 1;
    let mut q_hi = hi.get_exp().expect("nonzero") - 1;
    if let Some(x) = cfg.exponents {
        // |f| >= 2^q and |f| < 2^(q_hi + 1) on the piece.
        if q > x.emax {
            return Err(GenError::Overflow);
        }
        let tiny = x.emin - pb - 1;
        if q_hi < tiny {
            return Err(GenError::Underflow);
        }
        if q_hi > x.emax || q < tiny {
            // Part overflows or rounds like 0: split until each piece is one or the other.
            return Err(GenError::Shape);
        }
        // Below 2^emin the breakpoints are those of the binade 2^emin (the subnormal grid):
        // G = 2^(p - emin) |f| there.
        q = q.max(x.emin);
        q_hi = q_hi.max(q);
    }
    if q_hi > q + 1 {
        return Err(GenError::Shape);
    }
    Ok((q, q_hi == q + 1))
}

/// The words of a piece of `count` arguments at `degree`: `F = 64 L` fractional bits with
/// `2^-F sum_m C(count-1, m) <= 2^-(k+16)`; `L` and that sum (`eps_R` in fixed units).
pub(crate) fn fixed_width(count: u64, degree: usize, k: u32) -> (usize, Integer) {
    let binom_sum = sum_binomials(count - 1, degree);
    let need = binom_sum.significant_bits() + k + 16;
    (need.div_ceil(64) as usize, binom_sum)
}

pub(crate) fn ceil_fixed(x: &Float, frac_bits: u32) -> Integer {
    let mut y = Float::with_val(x.prec().max(64), x);
    y <<= frac_bits;
    y.ceil().to_integer().expect("finite bound")
}

/// `sum_(m <= upto) C(n, m)`, kept per thread by `(n, upto)`: a unit's pieces have a few
/// lengths and degrees, and the sum's dozen big binomials cost a piece generated from two
/// numbers (`sincos`) about a tenth of its time.
fn sum_binomials(n: u64, upto: usize) -> Integer {
    thread_local! {
        static SUMS: RefCell<HashMap<(u64, usize), Integer>> = RefCell::new(HashMap::new());
    }
    SUMS.with(|sums| {
        let mut sums = sums.borrow_mut();
        // A bound on what a thread keeps: a search's pieces need a few dozen sums at most.
        if sums.len() >= 4096 {
            sums.clear();
        }
        sums.entry((n, upto))
            .or_insert_with(|| {
                (0..=upto as u32)
                    .map(|m| Integer::from(n).binomial(m))
                    .sum()
            })
            .clone()
    })
}

/// Generates piece `piece` of the search of `f` at precision `p`.
pub fn generate(
    f: Function,
    p: Precision,
    cfg: &GenConfig,
    piece: UnitSpec,
) -> Result<Generated, GenError> {
    let fx = fixed_polynomial(f, p, cfg, piece)?;
    domains(cfg, piece, fx)
}

/// A piece's Taylor polynomial `R~(t) = sum_m beta_m C(t, m)` with exact integer coefficients
/// in fixed units, and its error terms (`docs/error-analysis.md` §0-2): what the phases'
/// per-domain polynomials and the dense route (`dense.rs`) start from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FixedPoly {
    pub degree: usize,
    /// Limbs per word; `F = 64 limbs` fractional bits.
    pub limbs: usize,
    /// Whether `|f|` crosses a power of two on the piece (the search radius is doubled).
    pub crossing: bool,
    /// `beta_m`, fixed units, `m = 0..=degree`.
    pub beta: Vec<Integer>,
    /// `2^-k` (doubled where the output crosses a power of two), fixed units.
    pub radius: Integer,
    /// Taylor remainder `eps_T`, fixed units, rounded upwards.
    pub taylor: Integer,
    /// Rounding of the binomial coefficients, `eps_R`, fixed units.
    pub rounding: Integer,
    /// The predicted (degree, limbs) of pieces of `count >> j` arguments, `j = 1, 2, ..`
    /// ([`Generated::halves`]).
    pub halves: Vec<Option<(usize, usize)>>,
}

impl FixedPoly {
    pub fn frac_bits(&self) -> u32 {
        64 * self.limbs as u32
    }
}

/// The fixed-point Taylor polynomial of piece `piece`: doubles the working precision until the
/// coefficient balls are narrow enough.
pub fn fixed_polynomial(
    f: Function,
    p: Precision,
    cfg: &GenConfig,
    piece: UnitSpec,
) -> Result<FixedPoly, GenError> {
    fixed_polynomial_by(f, p, cfg, piece, Route::Short)
}

/// Terms of the wide series [`Route::Short`] takes first: enough for degrees up to 8, those
/// of most pieces (exp on [1, 2), the dense pieces near tan's poles).
const WIDE_FIRST: usize = 10;

/// How [`fixed_polynomial`] reaches its polynomial; both give the same one
/// (`generation_tests.rs` holds them to it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// The point series to `max_degree + 2` terms, before the degree is known: engines before
    /// 2026-11-26.
    #[cfg_attr(not(test), allow(dead_code))]
    Full,
    /// The wide series first, to [`WIDE_FIRST`] terms (all of them only where no degree
    /// those cover fits), then the point series only to the degree found: the same terms (each
    /// term of a series rule is computed from the lower ones alone, by the same operations
    /// whatever the length), and none where no degree fits. The point ball lies
    /// within the wide one, so where its series fails the wide one's does too: the errors that
    /// come first here (`Shape`, `Degree`, `Width` instead of `Ball`) split the piece alike.
    /// Steep regions, where most pieces are generated only to be split again (tan near its
    /// poles), generate faster (BENCHMARKS.md, steep and flat regions: tan near its pole).
    Short,
    /// The wide series to `max_degree + 2` terms at once, then the point series only to the
    /// degree found: for pieces that need high degrees (the progressions' pieces, degree 10 to
    /// 16), where [`Route::Short`]'s first attempt would be wasted.
    Wide,
}

pub(crate) fn fixed_polynomial_by(
    f: Function,
    p: Precision,
    cfg: &GenConfig,
    piece: UnitSpec,
    route: Route,
) -> Result<FixedPoly, GenError> {
    doubling(768 + p.bits(), |prec| {
        fixed_at(f, p, cfg, piece, prec, route)
    })
}

/// `attempt` at working precision `prec`, doubled from `start` while the coefficient balls
/// come out too wide (`None`), up to 8192 bits.
fn doubling(
    start: u32,
    mut attempt: impl FnMut(u32) -> Result<Option<FixedPoly>, GenError>,
) -> Result<FixedPoly, GenError> {
    let mut prec = start;
    loop {
        match attempt(prec)? {
            Some(fx) => return Ok(fx),
            None if prec < 8192 => prec *= 2,
            None => return Err(GenError::Width),
        }
    }
}

/// One attempt at working precision `prec`; `None` if the coefficient balls came out too wide.
fn fixed_at(
    f: Function,
    p: Precision,
    cfg: &GenConfig,
    piece: UnitSpec,
    prec: u32,
    route: Route,
) -> Result<Option<FixedPoly>, GenError> {
    beyond_format(f, p, cfg, piece)?;
    let h_exp = piece.exponent - p.bits() as i32 + 1;
    // u(t') = x_center + h t' with t' = t - center: exact balls.
    let mut c = Float::with_val(prec, piece.first + piece.count / 2);
    c <<= h_exp;
    let mut h = Float::with_val(prec, 1);
    h <<= h_exp;
    if piece.negative {
        c = -c;
        h = -h;
    }
    let line = Line {
        center: Ball::from_float(prec, &c),
        step: Ball::from_float(prec, &h),
    };
    fixed_on_line(f, p, cfg, piece.count, &line, route)
}

/// The argument of a piece as a function of its offset `t`: `center + step (t - count/2)`.
/// The dyadic route's is exact (`x_center`, the grid's step `h`); the progression route's
/// (`progression.rs`) is an angle congruent to the argument modulo `2 pi`, and a ball.
#[derive(Debug, Clone)]
pub struct Line {
    pub center: Ball,
    pub step: Ball,
}

/// The working precision [`fixed_polynomial_along`] starts from, above `p`.
pub const ALONG_START_PREC: u32 = 384;

/// A piece's fixed-point Taylor polynomial along `line(prec)`, working precision doubled until
/// the coefficient balls are narrow enough: the route for arguments that are not the dyadic
/// grid's own (the angles of `progression.rs`). The piece is the offsets `[0, count)`.
pub fn fixed_polynomial_along(
    f: Function,
    p: Precision,
    cfg: &GenConfig,
    count: u64,
    line: impl Fn(u32) -> Line,
) -> Result<FixedPoly, GenError> {
    // Short pieces need few fixed-point bits: start lower than the dyadic route (whose units
    // of 2^40 need 300 bits or more) and double as needed.
    doubling(ALONG_START_PREC + p.bits(), |prec| {
        fixed_on_line(f, p, cfg, count, &line(prec), Route::Wide)
    })
}

/// [`fixed_at`] on a given line at the line's precision.
fn fixed_on_line(
    f: Function,
    p: Precision,
    cfg: &GenConfig,
    count: u64,
    line: &Line,
    route: Route,
) -> Result<Option<FixedPoly>, GenError> {
    let pb = p.bits() as i32;
    let k = cfg.min_bits;
    let prec = line.center.prec();
    let center = count / 2;
    let reach = count - center; // |t - center| <= reach for t in [0, count]
    let len = cfg.max_degree + 2;

    let point = |n| Series::linear(line.center.clone(), line.step.clone(), n);
    // The wide ball covers every t in [0, count]: the center's own radius plus reach |step|.
    let mut reach_f = line.step.mag();
    reach_f.mul_assign_round(&Float::with_val(64, reach), Round::Up);
    let mut wide_rad = Float::with_val(64, &line.center.rad);
    wide_rad.add_assign_round(&reach_f, Round::Up);
    let wide = |n| {
        Series::linear(
            Ball::with_radius(line.center.mid.clone(), &wide_rad),
            line.step.clone(),
            n,
        )
    };
    let (full_point, fw) = match route {
        Route::Full => (Some(f.series(&point(len))?), f.series(&wide(len))?),
        Route::Short => (None, f.series(&wide(len.min(WIDE_FIRST)))?),
        Route::Wide => (None, f.series(&wide(len))?),
    };

    // Shape: |f| on the piece lies in [2^q, 2^(q+2)) at worst.
    let v = &fw.c[0];
    if v.contains_zero() {
        return Err(GenError::Shape);
    }
    let (q, crossing) = output_binade(cfg, pb, &v.mig(), &v.mag())?;
    let negative_value = v.mid.is_sign_negative();

    // G = 2^(p - q) |f|: scale the coefficients.
    let shift = pb - q;
    let to_g = |b: &Ball| {
        let s = b.shl(shift);
        if negative_value {
            s.neg()
        } else {
            s
        }
    };

    // Degree: the smallest whose Lagrange remainder fits 2^-(k+10).
    let budget = Float::with_val(64, 1) >> (k + 10);
    let degree_for = |fw: &Series, reach: u64| {
        (1..=cfg.max_degree.min(fw.len() - 2)).find_map(|d| {
            let mut rem = fw.c[d + 1].mag();
            rem <<= shift;
            let pw_exact = Integer::from(reach).pow((d + 1) as u32);
            let pw = Float::with_val_round(64, &pw_exact, rug::float::Round::Up).0;
            let rem = Float::with_val_round(64, &rem * &pw, rug::float::Round::Up).0;
            (rem <= budget).then_some((d, rem))
        })
    };
    let limbs_for = |count: u64, degree: usize| fixed_width(count, degree, k);
    // Route::Short took the wide series to WIDE_FIRST terms; where no degree they cover fits,
    // all of them. The first degree that fits is the full series' (the same terms), and so are
    // the halves' below, which fit at a degree no higher.
    let (fw, fit) = match degree_for(&fw, reach) {
        None if fw.len() < len => {
            let full = f.series(&wide(len))?;
            let fit = degree_for(&full, reach);
            (full, fit)
        }
        fit => (fw, fit),
    };
    // Pieces of count >> j arguments lie inside this one's wide ball, so its coefficients
    // bound theirs (up to the balls' own rounding): a prediction of their degree and width.
    let halves: Vec<Option<(usize, usize)>> = (1..=MAX_HALVINGS)
        .map(|j| count >> j)
        .take_while(|&c| c >= 2)
        .map(|c| degree_for(&fw, c - c / 2).map(|(d, _)| (d, limbs_for(c, d).0)))
        .collect();
    let Some((degree, taylor_rem)) = fit else {
        return Err(GenError::Degree(cfg.max_degree));
    };
    let (limbs, binom_sum) = limbs_for(count, degree);
    if limbs > MAX_LIMBS {
        return Err(GenError::Width);
    }
    let frac_bits = 64 * limbs as u32;

    let fp = match full_point {
        Some(fp) => fp,
        None => f.series(&point(degree + 1))?,
    };
    let a: Vec<Ball> = fp.c.iter().map(to_g).collect();
    let Some(beta) = differences(&a, degree, center, prec, frac_bits) else {
        return Ok(None);
    };
    // Each beta_m is within rad + 2^-(F+1) <= 2^-F of the exact one: one fixed unit, times
    // C(x, m) <= C(count-1, m).
    let rounding = binom_sum;
    let taylor = ceil_fixed(&taylor_rem, frac_bits);
    let radius_shift = frac_bits as i64 - k as i64 + crossing as i64;
    let radius = Integer::from(1) << radius_shift as u32;
    Ok(Some(FixedPoly {
        degree,
        limbs,
        crossing,
        beta,
        radius,
        taylor,
        rounding,
        halves,
    }))
}

/// Refuses a piece far beyond the format's range (`verify::far_beyond`: by a factor 2, or
/// beyond MPFR's exponent range, about 2^(±2^30), where no ball can be evaluated): both ends
/// beyond it, the whole piece is (our functions are monotonic on a piece of one sign wherever
/// they get that large or small); one end beyond it: split. Nothing to check without a format.
fn beyond_format(
    f: Function,
    p: Precision,
    cfg: &GenConfig,
    piece: UnitSpec,
) -> Result<(), GenError> {
    if cfg.exponents.is_none() {
        return Ok(());
    }
    let count = piece.count;
    let fmt = crate::numbers::format::Format {
        precision: p,
        exponents: cfg.exponents,
    };
    let beyond = |t: u64| {
        far_beyond(f, fmt, &piece.argument(t).to_float(p)).map(|r| match r {
            SkipReason::Overflow => GenError::Overflow,
            _ => GenError::Underflow,
        })
    };
    match (beyond(0), beyond(count - 1)) {
        (None, None) => Ok(()),
        (Some(a), Some(b)) if a == b => Err(a),
        _ => Err(GenError::Shape),
    }
}

/// The forward differences `beta_m = Delta^m R(0)`, `m <= degree`, of the scaled Taylor
/// polynomial `R(i) = sum_j a_j (i - center)^j` at `i = 0..=degree`, each rounded to `frac_bits`
/// fractional bits; `None` when a ball is wider than half a fixed unit (a higher working
/// precision is needed).
fn differences(
    a: &[Ball],
    degree: usize,
    center: u64,
    prec: u32,
    frac_bits: u32,
) -> Option<Vec<Integer>> {
    // beta_m = Delta^m R(0) from R(i) = sum_j a_j (i - center)^j, i = 0..=degree.
    let r_at: Vec<Ball> = (0..=degree as i64)
        .map(|i| {
            let t = Integer::from(i) - Integer::from(center);
            let mut acc = Ball::zero(prec);
            let mut tp = Integer::from(1);
            for aj in a.iter().take(degree + 1) {
                acc.add_assign(&aj.mul_integer(&tp));
                tp *= &t;
            }
            acc
        })
        .collect();
    let half_unit = Float::with_val(64, 1) >> (frac_bits + 1);
    let mut beta: Vec<Integer> = Vec::with_capacity(degree + 1);
    for m in 0..=degree {
        let mut acc = Ball::zero(prec);
        for (i, ri) in r_at.iter().enumerate().take(m + 1) {
            let c = Integer::from(m as u32).binomial(i as u32);
            let term = ri.mul_integer(&c);
            acc = if (m - i) % 2 == 0 {
                acc.add(&term)
            } else {
                acc.sub(&term)
            };
        }
        if acc.rad > half_unit {
            return None;
        }
        let mut scaled = acc.mid.clone();
        scaled <<= frac_bits;
        beta.push(scaled.round().to_integer().expect("finite"));
    }
    Some(beta)
}

/// Phases 1-3's per-domain polynomials and thresholds for the piece's fixed-point polynomial.
fn domains(cfg: &GenConfig, piece: UnitSpec, fx: FixedPoly) -> Result<Generated, GenError> {
    let mut g = domains_at(cfg, piece, &fx, u32::MAX, false)?;
    let most = cfg.domain_bits.max(cfg.flat_domain_bits);
    if cfg.quadratic && g.domain_bits < most {
        // The line's residual or its left-out terms capped the size. The screen's larger
        // domains, if any, up to the flat pieces' limit: its points per domain and left-out
        // terms bound it.
        if let Ok(q) = domains_at(cfg, piece, &fx, most, true) {
            if q.domain_bits > g.domain_bits {
                return Ok(q);
            }
        }
    }
    while g.domain_bits > cfg.domain_bits
        && !rise_pays(
            &g.walk_b,
            &g.walk_slope,
            g.frac_bits(),
            g.piece.count,
            g.domain_bits,
            g.sub_bits,
            g.e1,
        )
    {
        g = domains_at(cfg, piece, &fx, g.domain_bits - 1, false)?;
    }
    Ok(g)
}

/// The per-domain polynomials and thresholds of `fx` with domains of at most `2^max_bits`, for
/// phase 1's line test or (`quadratic`) its quadratic screen.
fn domains_at(
    cfg: &GenConfig,
    piece: UnitSpec,
    fx: &FixedPoly,
    max_bits: u32,
    quadratic: bool,
) -> Result<Generated, GenError> {
    let k = cfg.min_bits;
    let count = piece.count;
    let frac_bits = fx.frac_bits();
    let (degree, limbs, crossing, beta) = (fx.degree, fx.limbs, fx.crossing, &fx.beta);
    let (radius, taylor, rounding) = (fx.radius.clone(), fx.taylor.clone(), fx.rounding.clone());
    let halves = fx.halves.clone();

    // A bound on |r_2| anywhere: the second difference of R~ at step 1.
    let r2_global: Integer = (2..=degree)
        .map(|m| {
            Integer::from(beta[m].abs_ref()) * Integer::from(count - 1).binomial((m - 2) as u32)
        })
        .sum();

    let mut n = if quadratic {
        first_screen_bits(cfg, k, count, frac_bits, &r2_global)
    } else {
        first_domain_bits(cfg, k, count, frac_bits, &r2_global)
    }
    .min(max_bits);
    // Smaller domains until the terms of degree 3 and more that each domain's polynomial leaves
    // out are small beside the search radius (they grow like N^3): a quarter of it for the line
    // test, 2^SCREEN_LEFT_OUT_BITS radii for the screen, whose domains fail only where the
    // quadratic comes within `base` of a breakpoint. The screen also keeps the expected number
    // of points within the line's threshold, `2 N eps1`, at most SCREEN_HITS.
    let (rho, domains, left_out, bound2) = loop {
        let (rho, domains, left_out, bound2) = per_domain(beta, degree, count, n);
        let fits = if quadratic {
            let eps1 = Integer::from(&radius + &taylor)
                + &rounding
                + &left_out
                + Integer::from(if bound2 < r2_global {
                    &bound2
                } else {
                    &r2_global
                }) * (1u64 << (2 * n - 4));
            left_out <= Integer::from(&radius << SCREEN_LEFT_OUT_BITS)
                && eps1 << (n + 1) <= Integer::from(SCREEN_HITS) << frac_bits
        } else {
            left_out <= Integer::from(&radius >> 2u32)
        };
        if fits || n <= MIN_DOMAIN_BITS {
            break (rho, domains, left_out, bound2);
        }
        n -= 1;
    };
    // Subdomains no larger than those of the published domain size: where domains grow on
    // flat pieces phase 2 splits them into more parts instead, since a failing
    // subdomain costs phase 3 one evaluation per argument.
    let sub_bits = n
        .min(cfg.domain_bits)
        .saturating_sub(cfg.subdomain_split_bits)
        .max(2);
    let r2_bound = bound2.min(r2_global);
    // Thresholds near 1 filter nothing: smaller pieces have smaller derivatives.
    if Integer::from(&left_out + &taylor) > Integer::from(1) << (frac_bits - 6) {
        return Err(GenError::Degree(degree));
    }

    let base = Integer::from(&radius + &taylor) + &rounding + &left_out;
    let k0 = 1u64 << (2 * n - 4);
    let k1 = (1u64 << (n - 1)) - 1;
    let k0_sub = 1u64 << (2 * sub_bits - 4).min(63);
    let k0_sub = if sub_bits >= 2 { k0_sub } else { 1 };
    let k1_sub = (1u64 << (sub_bits - 1)) - 1;
    let eps1 = &base + Integer::from(&r2_bound * k0);
    let eps2 = &base + Integer::from(&r2_bound * k0_sub);
    let (e1, e2, t3) = thresholds(frac_bits, &radius, &base, &eps1, &eps2, n, sub_bits)?;
    let (walk_b, walk_slope, walk_r2) = walks(&rho, degree, k0, k1, &eps1);

    Ok(Generated {
        piece,
        degree,
        limbs,
        domain_bits: n,
        domains,
        sub_bits,
        crossing,
        rho,
        walk_b,
        walk_slope,
        walk_r2,
        bounds: Bounds {
            radius,
            taylor,
            rounding,
            left_out,
            r2: r2_bound,
            base,
            eps1,
            eps2,
        },
        halves,
        quadratic,
        k0,
        k1,
        k0_sub,
        k1_sub,
        e1,
        e2,
        t3,
    })
}

/// The domain size to start from, in bits: at most the larger of `cfg.domain_bits` and
/// `cfg.flat_domain_bits`, and the piece's `count`;
/// lowered where the quadratic residual of the line, `|r2| N^2/16` (`r2_global` bounds `r2`,
/// `frac_bits` fractional), would make phase 1 fail often: a test places up to ~4N points,
/// so keep `4N * 2 |r2| N^2 / 16 = N^3 |r2| / 2` below 1/16.
fn first_domain_bits(
    cfg: &GenConfig,
    k: u32,
    count: u64,
    frac_bits: u32,
    r2_global: &Integer,
) -> u32 {
    let log2_r2 = r2_global.significant_bits() as i64 - frac_bits as i64;
    let cap = ((-3 - log2_r2) / 3).max(0) as u32;
    let n = cfg
        .domain_bits
        .max(cfg.flat_domain_bits)
        .min(cap)
        .min(k.saturating_sub(4))
        .min(63 - count.leading_zeros());
    n.max(MIN_DOMAIN_BITS)
}

/// Points within the line's threshold that a screened domain holds on average, at most: each
/// costs the screen a step and a quadratic's value, a fraction of the continued fraction that
/// finds them, so a few per domain buy domains `(SCREEN_HITS / (1/32))^(1/3)` times larger
/// than the line's cap (16 per domain: 8 times slower near 64; docs/benchmarks-history.md,
/// 2026-11-25).
pub const SCREEN_HITS: u32 = 4;

/// `log2` of how many radii the terms a screened domain leaves out may reach (§16): they enter
/// only `base`, i.e. the check's and phase 3's threshold, whose flags stay rare (`2 base` per
/// point, about `2^-39` at 44 bits), so the screen's domains grow until the points per domain
/// bind instead (near 256 for exp in binary64 at 44 bits: `2^13` against `2^12` with one
/// radius; docs/benchmarks-history.md, 2026-11-25).
pub const SCREEN_LEFT_OUT_BITS: u32 = 4;

/// The screen's starting domain size: at most the larger of `cfg.domain_bits` and
/// `cfg.flat_domain_bits`, `k - 4` and the piece's `count`, and where
/// `2 N eps1 ~ N^3 |r2| / 8` stays within [`SCREEN_HITS`].
fn first_screen_bits(
    cfg: &GenConfig,
    k: u32,
    count: u64,
    frac_bits: u32,
    r2_global: &Integer,
) -> u32 {
    let log2_r2 = r2_global.significant_bits() as i64 - frac_bits as i64;
    let hits = SCREEN_HITS.ilog2() as i64;
    let cap = ((4 + hits - log2_r2) / 3).max(0) as u32;
    let n = cfg
        .domain_bits
        .max(cfg.flat_domain_bits)
        .min(cap)
        .min(k.saturating_sub(4))
        .min(63 - count.leading_zeros());
    n.max(MIN_DOMAIN_BITS)
}

/// The tests' 64-bit thresholds `(e1, e2, t3)` of phases 1, 2 (domains of `2^n` and
/// subdomains of `2^sub_bits` arguments, errors `eps1` and `eps2`) and 3 (error `base`), all
/// with `frac_bits` fractional bits; an error where phase 1 or 2's would reach 2^64.
fn thresholds(
    frac_bits: u32,
    radius: &Integer,
    base: &Integer,
    eps1: &Integer,
    eps2: &Integer,
    n: u32,
    sub_bits: u32,
) -> Result<(u64, u64, u64), GenError> {
    let big_n = 1u64 << n;
    let to64 = |x: Integer| -> Integer {
        // ceil(x 2^(64 - F))
        let sh = frac_bits - 64;
        let (q, r) = x.div_rem_floor(Integer::from(1) << sh);
        if r != 0 {
            q + 1
        } else {
            q
        }
    };
    // A test threshold must lie below 2^64: one saturated at 2^64 - 1 could still be passed
    // (the flat-line shortcut, or d = 2^64 - 1) although no point is then ruled out.
    let below_one = |x: Integer| x.to_u64().filter(|&v| v < u64::MAX);
    let (Some(e1), Some(e2)) = (
        below_one(to64(Integer::from(eps1 * 2u32)) + big_n + 2),
        below_one(to64(Integer::from(eps2 * 2u32)) + (1u64 << sub_bits) + 2),
    ) else {
        // With a radius below 1/8 it is the errors and the line's quadratic residual that fill
        // the circle, and halves, whose values may cross no power of two and whose terms are
        // smaller, may fit (erfc in binary32 near 9): split. The radius itself never
        // shrinks.
        let small_radius = Integer::from(radius << 3u32) < Integer::from(1) << frac_bits;
        return Err(if small_radius {
            GenError::Curvature
        } else {
            GenError::Threshold
        });
    };
    // Phase 3's threshold may saturate: it then keeps every argument (sound).
    let t3 = (to64(base.clone()) + 1u32).to_u64().unwrap_or(u64::MAX);
    Ok((e1, e2, t3))
}

/// The walked polynomials of [`Generated`] from the per-domain `rho` (tabulated differences at
/// `i = 0`, index `l`): the phase-1 line's `b` (`r_0 - K0 r_2 + eps1`), its slope
/// (`r_1 + K1 r_2`), and `r_2`.
fn walks(
    rho: &[Vec<Integer>],
    degree: usize,
    k0: u64,
    k1: u64,
    eps1: &Integer,
) -> (Vec<Integer>, Vec<Integer>, Vec<Integer>) {
    let zero = Integer::new();
    let get = |row: &Vec<Integer>, l: usize| row.get(l).cloned().unwrap_or_else(|| zero.clone());
    let walk_b: Vec<Integer> = (0..=degree)
        .map(|l| {
            let r2 = if degree >= 2 {
                get(&rho[2], l)
            } else {
                Integer::new()
            };
            let mut v = get(&rho[0], l) - r2 * k0;
            if l == 0 {
                v += eps1;
            }
            v
        })
        .collect();
    let walk_slope: Vec<Integer> = (0..degree)
        .map(|l| {
            let r2 = if degree >= 2 {
                get(&rho[2], l)
            } else {
                Integer::new()
            };
            get(&rho[1], l) + r2 * k1
        })
        .collect();
    let walk_r2: Vec<Integer> = if degree >= 2 {
        rho[2].clone()
    } else {
        vec![Integer::new()]
    };
    (walk_b, walk_slope, walk_r2)
}

#[cfg(test)]
#[path = "generation_tests.rs"]
mod tests;
