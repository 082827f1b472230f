//! The progression route: sin, cos and tan where the grid's step is a large angle, and sinpi,
//! cospi and tanpi walked on their grid where it is (`docs/error-analysis.md` §18).
//!
//! In the binade `[2^e, 2^(e+1))` consecutive arguments differ by `h = 2^(e-p+1)`, an angle that
//! is, modulo `2 pi`, essentially arbitrary once `h` is not small: `f` along the grid is no
//! smooth function of the offset, and the dyadic route's pieces shrink until every argument is
//! walked or judged alone, at a cost that doubles with each binade. Here the offsets `t` of a
//! unit are taken along progressions `t = r + q j` (`r < q`), `q` the denominator of a
//! convergent of `h / (2 pi)`: along each one the angle advances by `delta = q h mod 2 pi`,
//! about `2 pi / q'` (`q'` the next denominator), so `f(x_r + j q h) = f(theta_r + j delta)` is
//! smooth in `j` again. Each progression is cut into pieces, each gets the full-degree
//! fixed-point Taylor polynomial of `f` along its angles (`generation::fixed_polynomial_along`,
//! the angles reduced modulo `2 pi` by MPFR at the argument's exponent plus the working
//! precision, as balls), walked at every argument as on the dense route, and only the
//! arguments within the walk's threshold go to MPFR. Nothing is filtered by a heuristic:
//! every argument is walked or judged by MPFR. The route runs on the host for every back end,
//! so its candidates and counts are the same on all.
//!
//! sinpi, cospi and tanpi take the route with `q = 1`: their step `pi h` is a dyadic multiple
//! of `pi`, which no progression shortens, but the grid itself, cut into long pieces of high
//! degree, walks where the dyadic route's pieces have shrunk to a few thousand arguments
//! (binary64's first period of a binade from `2^20` on, `periodic.rs`).

use crate::numbers::ball::Ball;
use crate::numbers::format::Precision;
use crate::oracle::function::Function;
use crate::oracle::verify::{classify_in, ExactCase, HrCase, SkipReason, Verdict, VerifyError};
use crate::plan::UnitSpec;
use crate::regions::lattice::Lattice;
use crate::search::backend::{Backend, SearchError, Stats, Timings};
use crate::search::config::SearchConfig;
use crate::search::dense::{self, Dense, DENSE_MAX_DEGREE};
use crate::search::generation::{fixed_polynomial_along, GenConfig, Line, ALONG_START_PREC};
use crate::search::sincos::{self, Bases};
use rayon::prelude::*;
use rug::float::Constant;
use rug::{Float, Integer};
use std::time::Instant;

/// How the route cuts a unit: a cost rule only, never a bound (every piece's polynomial
/// carries its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cut {
    /// A walked piece spans at most `2^-span_bits` radians: the degree its polynomial needs
    /// stays within [`DENSE_MAX_DEGREE`] at binary64's thresholds (5: about 13 at 44 bits).
    pub span_bits: i32,
    /// The longest walked piece: one polynomial per this many arguments keeps generation a
    /// small part of the time. Longer pieces widen the full words (`C(n, degree)` of rounding
    /// to absorb) and raise the degree, but the narrowed walk (`search::narrow`) adds the same
    /// few words of two limbs an argument: `2^19` against `2^17` cut the generation of sin at
    /// `2^1023` and `2^100` in units of `2^44` three to four times, the host's walk unchanged
    /// (2.4 to 2.7 ns an argument on one core either way).
    pub max_piece: u64,
    /// Pieces shorter than this are judged by MPFR argument by argument.
    pub min_piece: u64,
    /// The route is taken where its pieces average at least this many arguments; below, the
    /// polynomials cost more than the walk saves.
    pub min_average: u64,
}

impl Cut {
    pub const DEFAULT: Cut = Cut {
        span_bits: 5,
        max_piece: 1 << 19,
        min_piece: 64,
        min_average: 256,
    };

    /// Where no progression leaves pieces of 256 arguments on average, the other route would
    /// judge nearly every argument with MPFR (about 2.6 us each on one core): pieces of 64
    /// still cost a fraction of that. On two cores a binade of binary32 sin at `2^29` took 0.60
    /// s so instead of 14.8, a unit of `2^21` of binary64 sin at `2^100` 2.96 s instead of 47.
    pub const FALLBACK: Cut = Cut {
        min_average: 64,
        ..Cut::DEFAULT
    };
}

/// The route is taken where the grid's step `h` satisfies `2 log2 h + p + 1 >= -CURVATURE_BITS`:
/// `2^(p+1) h^2` is the curvature per step of `G` for sin near its maxima, and where it exceeds
/// `2^-CURVATURE_BITS` the dyadic route's domains have shrunk to a few arguments. The value
/// puts binary64 on the route from 2^22: on one H200 and its 16 cores, a unit of 2^32 of sin
/// at 43 bits took the dyadic route 0.38 s at 2^21 and more than 35 s at 2^22 and 2^23, this
/// route 3.1 s at 2^24 (BENCHMARKS.md).
pub const CURVATURE_BITS: i32 = 6;

/// How a unit's offsets are cut into progressions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progressions {
    /// The common difference: offsets `r + q j`, `r < q`.
    pub q: u64,
    /// Pieces each progression is cut into at first (generation may halve them further).
    pub per_class: u64,
    /// Pieces below this many arguments go to MPFR ([`Cut::min_piece`]).
    pub min_piece: u64,
}

impl Progressions {
    /// The number of arguments of progression `r` of a unit of `count` arguments.
    pub fn class_len(&self, count: u64, r: u64) -> u64 {
        (count - r).div_ceil(self.q)
    }
}

/// `x mod 2 pi` as a ball of precision `prec`: congruent to `x` modulo `2 pi` and within about
/// `pi` of 0, for an exact `x`. `2 pi` is taken at `exp(x) + prec + 64` bits, so the reduction's
/// error (at most `|n|` times its radius) stays below `2^-(prec + 60)`.
pub fn reduce(x: &Float, prec: u32) -> Ball {
    let e = x.get_exp().unwrap_or(0).max(0) as u32;
    let big = e + prec + 64;
    let two_pi = Ball::constant(big, Constant::Pi).shl(1);
    let n = Float::with_val(big, x / &two_pi.mid)
        .round()
        .to_integer()
        .expect("finite argument");
    Ball::from_float(big.max(x.prec()), x)
        .sub(&two_pi.mul_integer(&n))
        .round_to(prec)
}

/// The grid's step of `unit`, signed: `-h` on the negative side, where offsets run away from 0.
fn step(p: Precision, unit: UnitSpec, times: u64) -> Float {
    let mut h = Float::with_val(64, times);
    h <<= unit.exponent - p.bits() as i32 + 1;
    if unit.negative {
        -h
    } else {
        h
    }
}

/// The denominators `q <= limit` of the convergents of the dyadic rational `num / 2^bits` in
/// `[0, 1)`, from 1 up.
fn convergent_denominators(num: Integer, bits: u32, limit: u64) -> Vec<u64> {
    let mut out = vec![1u64];
    let (mut n, mut d) = (Integer::from(1) << bits, num);
    let (mut q2, mut q1) = (Integer::new(), Integer::from(1));
    while d != 0 {
        let (a, rem) = n.div_rem_floor(d.clone());
        (n, d) = (d, rem);
        let q = a * &q1 + &q2;
        match q.to_u64() {
            Some(v) if v <= limit => out.push(v),
            _ => break,
        }
        (q2, q1) = (q1, q);
    }
    out
}

/// sinpi, cospi and tanpi: functions of the angle `pi x`. Their grid's step `h` is the angle
/// `pi h`, a dyadic multiple of `pi`, so no progression shortens it (`q h` is `q` times as
/// large up to the period): the route walks the grid itself, `q = 1`, on pieces cut by the
/// same rule, the arguments exact (no reduction: `f(x)` is MPFR's of `x`).
fn of_pi(f: Function) -> bool {
    matches!(f, Function::Sinpi | Function::Cospi | Function::Tanpi)
}

/// sinpi, cospi and tanpi take the route where `2 log2 h + p + 1 >= -PI_CURVATURE_BITS`: the
/// curvature per step of `f(pi x)` is that of sin on a grid of step `pi h` (`2 log2 pi` is
/// 3.3 bits), and one binade earlier than that rule's, binary64's `2^20`, where the dyadic
/// route already walks dense pieces of at most `2^11` arguments on the host: on two cores a
/// unit of `2^26` of sinpi there took it 27 ns an argument, at `2^19` (phases, no dense
/// piece) 11 ns (BENCHMARKS.md).
pub const PI_CURVATURE_BITS: i32 = 10;

/// The progressions of `unit` for `f`, or `None` where the dyadic route is to search it: `f` is
/// not sin, cos, tan, sinpi, cospi or tanpi, the grid's step is small enough for the dyadic
/// route, or no progression leaves pieces of [`Cut::min_average`] arguments on average
/// (`plan_with`), by [`Cut::DEFAULT`] or else by [`Cut::FALLBACK`].
pub fn plan(f: Function, p: Precision, unit: UnitSpec) -> Option<Progressions> {
    let h_bits = unit.exponent - p.bits() as i32 + 1;
    let bits = if of_pi(f) {
        PI_CURVATURE_BITS
    } else {
        CURVATURE_BITS
    };
    if 2 * h_bits + p.bits() as i32 + 1 < -bits {
        return None;
    }
    plan_with(f, p, unit, Cut::DEFAULT).or_else(|| plan_with(f, p, unit, Cut::FALLBACK))
}

/// The progressions of `unit` cut by `cut`, wherever `f` is sin, cos or tan: among the
/// convergents' denominators `q <= count`, the one that cuts the unit into the fewest pieces of
/// at most `cut.max_piece` arguments spanning at most `2^-cut.span_bits` radians; `None` where
/// they would average fewer than `cut.min_average` arguments. For sinpi, cospi and tanpi the
/// grid itself (`q = 1`), its step the angle `pi h`.
pub fn plan_with(f: Function, p: Precision, unit: UnitSpec, cut: Cut) -> Option<Progressions> {
    let denominators = if of_pi(f) {
        vec![1]
    } else if matches!(f, Function::Sin | Function::Cos | Function::Tan) {
        // w = h / (2 pi) mod 1 to about 200 bits: the choice of q only, never a bound.
        let theta = reduce(&step(p, unit, 1), 256);
        let two_pi = Float::with_val(256, Constant::Pi) << 1u32;
        let mut w = Float::with_val(256, &theta.mid / &two_pi);
        if w.is_sign_negative() {
            w += 1u32;
        }
        w <<= 200u32;
        let num = w.floor().to_integer().expect("finite");
        convergent_denominators(num, 200, unit.count)
    } else {
        return None;
    };
    let span = f64::powi(2.0, -cut.span_bits);
    let best = denominators
        .into_iter()
        .map(|q| {
            let delta = if of_pi(f) {
                std::f64::consts::PI * step(p, unit, q).to_f64().abs()
            } else {
                reduce(&step(p, unit, q), 64).mid.to_f64().abs()
            };
            let len = unit.count.div_ceil(q);
            let by_span = ((len as f64) * delta / span).ceil().max(1.0);
            let per_class = by_span.max(len.div_ceil(cut.max_piece) as f64);
            (q as f64 * per_class, q, per_class)
        })
        .min_by(|a, b| a.0.total_cmp(&b.0))?;
    let (pieces, q, per_class) = best;
    (unit.count as f64 / pieces >= cut.min_average as f64).then_some(Progressions {
        q,
        per_class: per_class as u64,
        min_piece: cut.min_piece,
    })
}

/// The arguments of a piece along its progression, at precision `prec`: for sin, cos and tan
/// angles congruent to them modulo `2 pi` (balls); for sinpi, cospi and tanpi the arguments
/// themselves (exact).
fn line_of(f: Function, p: Precision, unit: UnitSpec, q: u64, middle: &Float, prec: u32) -> Line {
    Line {
        center: line_point(f, middle, prec),
        step: line_point(f, &step(p, unit, q), prec),
    }
}

/// A point or step of a line: the exact argument for sinpi, cospi and tanpi, else reduced
/// modulo `2 pi`.
fn line_point(f: Function, x: &Float, prec: u32) -> Ball {
    if of_pi(f) {
        Ball::from_float(prec, x)
    } else {
        reduce(x, prec)
    }
}

/// What the generation of a piece (or several, merged) came to: the dense pieces to walk, as
/// (progression `r`, first index `j0` along it, arguments, polynomial), and offsets left to
/// MPFR.
#[derive(Default)]
struct Pieces {
    walks: Vec<(u64, u64, u64, Dense)>,
    judged: Vec<u64>,
    generation_s: f64,
}

impl Pieces {
    fn merge(mut self, o: Pieces) -> Pieces {
        self.walks.extend(o.walks);
        self.judged.extend(o.judged);
        self.generation_s += o.generation_s;
        self
    }
}

/// What the walks of a batch found: offsets walked, their candidates, pieces, seconds.
#[derive(Default)]
struct Walked {
    walked: u64,
    pieces: u64,
    candidates: Vec<u64>,
    walk_s: f64,
}

/// Initial pieces generated at once and walked together: enough threads to fill a GPU (a piece
/// of `2^17` arguments is 128 of them), few enough polynomials (about a kilobyte each) to hold.
const BATCH: u64 = 2048;

/// Initial piece `i` of `unit`: the `(i mod per_class)`-th of the `per_class` pieces its
/// progression `r = i / per_class` is cut into (none where that progression is shorter),
/// generated along its angles; a piece whose polynomial does not fit (a zero of `f` or a pole
/// of tan inside, too wide a span for the degree) is halved, and below `min_piece` arguments
/// left to MPFR. Pieces, not progressions, are the unit of parallel work: a unit with `q = 1`
/// is one progression.
fn generate(
    cfg: &SearchConfig,
    unit: UnitSpec,
    pr: Progressions,
    bases: Option<&Bases>,
    i: u64,
) -> Pieces {
    let p = cfg.precision;
    let gen = GenConfig {
        max_degree: cfg.gen.max_degree.max(DENSE_MAX_DEGREE),
        ..cfg.gen
    };
    let (r, k) = (i / pr.per_class, i % pr.per_class);
    let len = pr.class_len(unit.count, r);
    let cut = len.div_ceil(pr.per_class).max(1);
    let offset = |j: u64| r + pr.q * j;
    let mut out = Pieces::default();
    if k * cut >= len {
        return out;
    }
    let mut stack = vec![(k * cut, cut.min(len - k * cut))];
    while let Some((j0, n)) = stack.pop() {
        if n < pr.min_piece {
            out.judged.extend((j0..j0 + n).map(offset));
            continue;
        }
        let t = Instant::now();
        let middle = unit.argument(offset(j0 + n / 2)).to_float(p);
        let line = |prec: u32| line_of(cfg.function, p, unit, pr.q, &middle, prec);
        let quick = bases.and_then(|b| {
            let prec = ALONG_START_PREC + p.bits();
            let theta = b.angle_at(offset(j0 + n / 2)).unwrap_or_else(|| {
                sincos::angle(cfg.function, &line_point(cfg.function, &middle, prec), prec)
            });
            sincos::fixed_along(cfg.function, p, &gen, n, &theta, b)
        });
        let fx = match quick {
            Some(fx) => Some(fx),
            // tan's series need no lower degree than its two numbers' bound (both follow the
            // coefficients' geometric decay within the distance to a pole): where that bound
            // failed, the series failed too on every piece measured, and cost as much again.
            None if bases.is_some() && sincos::is_tan(cfg.function) => None,
            None => fixed_polynomial_along(cfg.function, p, &gen, n, line).ok(),
        };
        let walk = fx.and_then(|fx| dense::threshold(&fx).map(|t| Dense::new(fx, t, n)));
        out.generation_s += t.elapsed().as_secs_f64();
        match walk {
            Some(d) => out.walks.push((r, j0, n, d)),
            None if n >= 2 * pr.min_piece => {
                stack.push((j0 + n / 2, n - n / 2));
                stack.push((j0, n / 2));
            }
            None => out.judged.extend((j0..j0 + n).map(offset)),
        }
    }
    out
}

/// The batch's dense pieces walked on `backend`: their candidates as offsets of the unit.
fn walk(
    backend: &dyn Backend,
    pr: Progressions,
    walks: &[(u64, u64, u64, Dense)],
) -> Result<Walked, SearchError> {
    let pieces: Vec<(&Dense, u64)> = walks.iter().map(|(_, _, n, d)| (d, *n)).collect();
    let (kept, walk_s) = backend.walk_dense(&pieces)?;
    let mut out = Walked {
        walked: pieces.iter().map(|p| p.1).sum(),
        pieces: pieces.len() as u64,
        candidates: Vec::new(),
        walk_s,
    };
    for ((r, j0, _, _), k) in walks.iter().zip(kept) {
        out.candidates
            .extend(k.into_iter().map(|j| r + pr.q * (j0 + j)));
    }
    Ok(out)
}

/// The bases of `unit`'s line where its pieces are generated from two numbers (sin, cos,
/// sinpi, cospi: `sincos.rs`), unless the configuration turns that off.
fn unit_bases(cfg: &SearchConfig, unit: UnitSpec, pr: Progressions) -> Option<Bases> {
    if !cfg.sincos || !sincos::takes(cfg.function) {
        return None;
    }
    let p = cfg.precision;
    let prec = ALONG_START_PREC + p.bits();
    let line_step = line_point(cfg.function, &step(p, unit, pr.q), prec);
    let bases = Bases::new(sincos::step_angle(cfg.function, &line_step, prec));
    if of_pi(cfg.function) {
        return Some(bases);
    }
    // Offsets below 2^64 and angles below 2^66: 128 bits more keep the centers' angles as
    // precise as a reduction at `prec` would.
    let wide = prec + 128;
    let first = reduce(&unit.argument(0).to_float(p), wide);
    Some(bases.with_origin(first, reduce(&step(p, unit, 1), wide)))
}

/// The dense pieces of initial pieces `range` of `unit` (`generate`, on this thread), with
/// their lengths: what the back ends' walks are tested on, and what the example
/// `progression_cut` times cut by cut.
pub fn dense_pieces(
    cfg: &SearchConfig,
    unit: UnitSpec,
    pr: Progressions,
    range: std::ops::Range<u64>,
) -> Vec<(Dense, u64)> {
    let bases = unit_bases(cfg, unit, pr);
    range
        .flat_map(|i| generate(cfg, unit, pr, bases.as_ref(), i).walks)
        .map(|(_, _, n, d)| (d, n))
        .collect()
}

/// What the route found on a unit (or a part of one): cases in argument order, arguments
/// skipped by MPFR's verdict, the counts and times.
pub(crate) struct Searched {
    pub hr_cases: Vec<HrCase>,
    pub exact_cases: Vec<ExactCase>,
    pub skipped: Vec<(u64, SkipReason)>,
    pub stats: Stats,
    pub timings: Timings,
}

/// Searches `unit` along the progressions `pr`: the pieces of every progression generated on
/// the host's threads and walked on `backend` in batches (a batch generated while the one
/// before walks), then the walks' candidates and the arguments left to MPFR judged by MPFR,
/// in argument order.
pub(crate) fn search(
    cfg: &SearchConfig,
    unit: UnitSpec,
    pr: Progressions,
    backend: &dyn Backend,
) -> Result<Searched, SearchError> {
    let initial = pr.q.min(unit.count) * pr.per_class;
    let bases = unit_bases(cfg, unit, pr);
    let gen_batch = |b: u64| {
        (b * BATCH..((b + 1) * BATCH).min(initial))
            .into_par_iter()
            .map(|i| generate(cfg, unit, pr, bases.as_ref(), i))
            .reduce(Pieces::default, Pieces::merge)
    };
    let batches = initial.div_ceil(BATCH);
    let (mut generation_s, mut judged) = (0.0, Vec::new());
    let mut walked = Walked::default();
    let mut ready = gen_batch(0);
    for b in 0..batches {
        // The walked pieces are freed beside the next batch's generation, not between
        // batches while the other threads wait.
        let walks = std::mem::take(&mut ready.walks);
        let (next, found) = rayon::join(
            || (b + 1 < batches).then(|| gen_batch(b + 1)),
            move || walk(backend, pr, &walks),
        );
        let found = found?;
        generation_s += ready.generation_s;
        judged.append(&mut ready.judged);
        walked.walked += found.walked;
        walked.pieces += found.pieces;
        walked.candidates.extend(found.candidates);
        walked.walk_s += found.walk_s;
        ready = next.unwrap_or_default();
    }
    let c = walked;
    let mut stats = Stats::default();
    let mut timings = Timings::default();
    stats.progression_arguments = c.walked;
    stats.pieces = c.pieces;
    timings.generation_s = generation_s;
    timings.phase3_s = c.walk_s;
    let candidates = c.candidates;
    stats.candidates = candidates.len() as u64;
    stats.exhaustive_arguments = judged.len() as u64;
    // sinpi, cospi and tanpi: the lattice's exact cases (and tanpi's poles) are counted by its
    // rule, neither judged nor listed, as on the other routes.
    let lattice = Lattice::of(cfg.function, cfg.format(), unit);
    let off_lattice = |&(o, _): &(u64, bool)| !lattice.is_some_and(|l| l.covers(unit.first + o));
    let mut all: Vec<(u64, bool)> = candidates
        .into_iter()
        .map(|o| (o, true))
        .chain(judged.into_iter().map(|o| (o, false)))
        .filter(off_lattice)
        .collect();
    all.sort_unstable();
    let t = Instant::now();
    let verdicts: Vec<Result<Verdict, VerifyError>> = all
        .par_iter()
        .map(|&(o, _)| classify_in(cfg.function, cfg.format(), &unit.argument(o), cfg.min_bits))
        .collect();
    timings.verification_s += t.elapsed().as_secs_f64();
    let mut out = Searched {
        hr_cases: Vec::new(),
        exact_cases: Vec::new(),
        skipped: Vec::new(),
        stats,
        timings,
    };
    for (v, &(o, walked)) in verdicts.into_iter().zip(&all) {
        match v? {
            Verdict::Hard(c) => out.hr_cases.push(c),
            Verdict::Exact(e) => out.exact_cases.push(e),
            Verdict::NotHard { .. } if walked => out.stats.false_positives += 1,
            Verdict::NotHard { .. } => {}
            Verdict::Skipped(r) => out.skipped.push((o, r)),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numbers::format::Format;

    /// The reduced angle is congruent to the argument: its sine and cosine are MPFR's of the
    /// argument itself (which reduces on its own), within the ball, at 2^21, 2^100 and 2^1023.
    #[test]
    fn reduced_angles_are_congruent_modulo_two_pi() {
        for (m, e) in [
            (0x1_2345_6789_abcdu64, 21),
            (0x1f_ffff_ffff_ffff, 100),
            (0x10_0000_0000_0001, 1023),
        ] {
            for negative in [false, true] {
                let mut x = Float::with_val(53, m);
                x <<= e - 52;
                if negative {
                    x = -x;
                }
                let theta = reduce(&x, 200);
                assert!(theta.mid.clone().abs() < 3.15, "{x}: {}", theta.mid);
                assert!(
                    theta.rad < Float::with_val(64, 1) >> 195u32,
                    "{}",
                    theta.rad
                );
                let (s, c) = theta.sin_cos();
                let truth_s = Float::with_val(220, x.sin_ref());
                let truth_c = Float::with_val(220, x.cos_ref());
                for (b, t) in [(s, truth_s), (c, truth_c)] {
                    let d = Float::with_val(220, &b.mid - &t).abs();
                    assert!(d <= Float::with_val(64, 1) >> 190u32, "{x}: off by {d}");
                }
            }
        }
    }

    /// The convergents of the golden ratio's fractional part have Fibonacci denominators.
    #[test]
    fn convergent_denominators_follow_the_continued_fraction() {
        let mut phi = (Float::with_val(300, 5).sqrt() - 1u32) / 2u32;
        phi <<= 200u32;
        let num = phi.floor().to_integer().unwrap();
        let q = convergent_denominators(num, 200, 1000);
        assert_eq!(
            q,
            vec![1, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610, 987]
        );
    }

    /// Pieces generated from two numbers (`sincos.rs`) hold their written bound: on the first
    /// pieces of units of sin at `2^24`, `2^100` and `2^1000`, cos at `2^500`, tan at `2^100`
    /// and `2^1000`, sinpi at `2^22`, cospi at `2^30` and tanpi at `2^22` (binary64, 44 bits,
    /// both signs), `|R~(t) - G(t)| <= eps_T + eps_R`
    /// at sampled offsets against MPFR at 600 bits; the general route's polynomial of the same
    /// piece has a degree within one of theirs and its values are within both bounds of them.
    #[test]
    fn pieces_from_two_numbers_hold_their_bound() {
        let fmt = Format::named("binary64").unwrap();
        let p = fmt.precision;
        let (mut quick, mut tan_quick) = (0, 0);
        for (f, exponent) in [
            (Function::Sin, 24),
            (Function::Sin, 100),
            (Function::Sin, 1000),
            (Function::Cos, 500),
            (Function::Tan, 100),
            (Function::Tan, 1000),
            (Function::Sinpi, 22),
            (Function::Cospi, 30),
            (Function::Tanpi, 22),
        ] {
            for negative in [false, true] {
                let unit = UnitSpec {
                    negative,
                    exponent,
                    first: 0x5_4321_0fed_cba9,
                    count: 1 << 30,
                };
                let cfg = SearchConfig::in_format(f, fmt, 44);
                let gen = GenConfig {
                    max_degree: DENSE_MAX_DEGREE,
                    ..cfg.gen
                };
                let pr = plan(f, p, unit).expect("the route");
                let bases = unit_bases(&cfg, unit, pr).expect("bases");
                let prec = ALONG_START_PREC + p.bits();
                for i in 0..2 {
                    let (r, k) = (i / pr.per_class, i % pr.per_class);
                    let len = pr.class_len(unit.count, r);
                    let cut = len.div_ceil(pr.per_class).max(1);
                    let (j0, n) = (k * cut, cut.min(len - k * cut));
                    let offset = |j: u64| r + pr.q * (j0 + j);
                    let middle = unit.argument(offset(n / 2)).to_float(p);
                    let theta = sincos::angle(f, &line_point(f, &middle, prec), prec);
                    let Some(fx) = sincos::fixed_along(f, p, &gen, n, &theta, &bases) else {
                        continue;
                    };
                    quick += 1;
                    tan_quick += sincos::is_tan(f) as usize;
                    let line = |prec: u32| line_of(f, p, unit, pr.q, &middle, prec);
                    // tan's series may fail on a piece its two numbers take.
                    let general = fixed_polynomial_along(f, p, &gen, n, line).ok();
                    assert!(general.is_some() || sincos::is_tan(f), "{f} 2^{exponent}");
                    if let Some(g) = &general {
                        assert!(fx.degree <= g.degree + 1, "{f} 2^{exponent}");
                        if !sincos::is_tan(f) {
                            assert!(fx.degree.abs_diff(g.degree) <= 1, "{f} 2^{exponent}");
                        }
                    }
                    let fb = fx.frac_bits();
                    let value = |t: u64| {
                        let x = unit.argument(offset(t)).to_float(p);
                        Float::with_val(600, f.eval(&x, 600).0).abs()
                    };
                    // G = 2^s |f|: s read off beta_0 ~ G(0) 2^F.
                    let g0 = Float::with_val(600, &fx.beta[0]) >> fb;
                    let s = Float::with_val(64, &g0 / value(0)).log2().round().to_f64() as i32;
                    let bound = Integer::from(&fx.taylor + &fx.rounding) + 1u32;
                    let at = |beta: &[Integer], t: u64, shift: u32| -> Integer {
                        let sum: Integer = beta
                            .iter()
                            .enumerate()
                            .map(|(m, b)| b * Integer::from(t).binomial(m as u32))
                            .sum();
                        sum << shift
                    };
                    for t in (0..n).step_by((n / 40).max(1) as usize).chain([n - 1]) {
                        let mut g = value(t);
                        g <<= s + fb as i32;
                        let truth = g.round().to_integer().unwrap();
                        let r = at(&fx.beta, t, 0);
                        let d = Integer::from(&r - &truth).abs();
                        assert!(
                            d <= bound,
                            "{f} 2^{exponent} piece {i} t={t}: {d} > {bound}"
                        );
                        // Both polynomials at the wider one's fixed point.
                        let Some(general) = &general else { continue };
                        let gbound = Integer::from(&general.taylor + &general.rounding) + 1u32;
                        let gf = general.frac_bits();
                        let (w, a, b) = (fb.max(gf), at(&fx.beta, t, 0), at(&general.beta, t, 0));
                        let a = a << (w - fb);
                        let b = b << (w - gf);
                        let both = (bound.clone() << (w - fb)) + (gbound.clone() << (w - gf));
                        assert!(
                            Integer::from(&a - &b).abs() <= both,
                            "{f} 2^{exponent} t={t}"
                        );
                    }
                }
            }
        }
        assert!(quick >= 24, "{quick} pieces from two numbers");
        assert!(tan_quick >= 6, "{tan_quick} pieces of tan from two numbers");
    }

    /// Every case MPFR finds argument by argument on a unit, and no other: the route against a
    /// brute force, for `cut` (a coarser one lets small units walk pieces), with cases found
    /// and arguments walked.
    fn against_mpfr(f: Function, fmt: Format, k: u32, unit: UnitSpec, cut: Cut) -> (usize, u64) {
        let cfg = SearchConfig::in_format(f, fmt, k);
        let pr = plan_with(f, fmt.precision, unit, cut).expect("progressions");
        let t = std::time::Instant::now();
        let found = search(&cfg, unit, pr, &crate::search::phases::Cpu).unwrap();
        let route_s = t.elapsed().as_secs_f64();
        let t = std::time::Instant::now();
        // The lattice's exact cases are counted by rule, not listed (sinpi, cospi, tanpi).
        let lattice = Lattice::of(f, fmt, unit);
        let truth: Vec<Verdict> = (0..unit.count)
            .into_par_iter()
            .filter(|&o| !lattice.is_some_and(|l| l.covers(unit.first + o)))
            .map(|o| classify_in(f, fmt, &unit.argument(o), k).unwrap())
            .collect();
        let (mut hard, mut exact) = (Vec::<HrCase>::new(), Vec::<ExactCase>::new());
        for v in truth {
            match v {
                Verdict::Hard(c) => hard.push(c),
                Verdict::Exact(e) => exact.push(e),
                _ => {}
            }
        }
        let what = format!("{f} {} {unit:?} {pr:?}", fmt.name());
        println!(
            "{what}: route {route_s:.3} s, MPFR {:.3} s; {:?} {:?}",
            t.elapsed().as_secs_f64(),
            found.stats,
            found.timings
        );
        assert_eq!(found.hr_cases, hard, "{what}");
        assert_eq!(found.exact_cases, exact, "{what}");
        assert!(found.skipped.is_empty(), "{what}");
        let s = &found.stats;
        assert_eq!(
            s.progression_arguments + s.exhaustive_arguments,
            unit.count,
            "{what}: every argument walked or judged once"
        );
        (hard.len(), s.progression_arguments)
    }

    fn unit(fmt: Format, negative: bool, exponent: i32, first: u64, bits: u32) -> UnitSpec {
        let p = fmt.precision.bits();
        UnitSpec {
            negative,
            exponent,
            first: (1u64 << (p - 1)) + first,
            count: 1 << bits,
        }
    }

    /// A generated piece carries its narrowing and its words (planned where it is made, for
    /// the GPU's packing): they are `narrow::plan`'s for its own count and its coefficients mod
    /// `2^(64 limbs)`; another count or threshold is planned afresh.
    #[test]
    fn pieces_carry_their_own_narrowing_and_words() {
        let b64 = Format::named("binary64").unwrap();
        let u = unit(b64, false, 1023, 0x3_1415_9265_3589, 32);
        let cfg = SearchConfig::in_format(Function::Sin, b64, 43);
        let pr = plan(Function::Sin, b64.precision, u).expect("the route");
        let pieces = dense_pieces(&cfg, u, pr, 0..2);
        assert!(!pieces.is_empty());
        let mut narrowed = 0;
        for (d, n) in pieces {
            let own = d.narrowing(n);
            assert_eq!(own, crate::search::narrow::plan(d.fx(), d.t(), n));
            narrowed += own.is_some() as usize;
            assert_eq!(
                d.narrowing(n / 2),
                crate::search::narrow::plan(d.fx(), d.t(), n / 2)
            );
            let modulus = Integer::from(1) << (64 * d.fx().limbs as u32);
            for (m, b) in d.fx().beta.iter().enumerate() {
                let (_, r) = <(Integer, Integer)>::from(b.div_rem_euc_ref(&modulus));
                let mut want = r.to_digits::<u64>(rug::integer::Order::Lsf);
                want.resize(d.fx().limbs, 0);
                assert_eq!(d.word_limbs(m), &want[..], "word {m}");
            }
            let wide = d.clone().with_threshold(d.t() * 4);
            assert_eq!(
                wide.narrowing(n),
                crate::search::narrow::plan(d.fx(), d.t() * 4, n)
            );
        }
        assert!(narrowed > 0, "no piece narrowed");
    }

    /// binary64 units of 2^17 arguments at 2^21, 2^100, 2^500 and 2^1023, sin, cos and tan
    /// on both signs, at 12 bits (about 64 cases a unit): the route's cases are MPFR's.
    #[test]
    fn binary64_units_far_out_match_mpfr_argument_by_argument() {
        let b64 = Format::named("binary64").unwrap();
        let cut = Cut {
            span_bits: 2,
            max_piece: 1 << 14,
            min_piece: 32,
            min_average: 32,
        };
        let mut cases = 0;
        let mut walked = 0;
        for (f, negative, e, first) in [
            (Function::Sin, false, 21, 0x1234_5678_9abc),
            (Function::Cos, true, 100, 0x8_0000_0000_0000),
            (Function::Tan, false, 500, 0xf_ffff_fffe_0000),
            (Function::Sin, true, 1023, 0x3_1415_9265_3589),
            (Function::Cos, false, 1023, 0x7_7777_0000_0000),
        ] {
            let (c, w) = against_mpfr(f, b64, 12, unit(b64, negative, e, first, 17), cut);
            cases += c;
            walked += w;
        }
        assert!(cases > 100, "{cases} cases");
        assert!(walked > 1 << 18, "{walked} walked");
    }

    /// Where the default cut finds no progression, the coarser one walks: a binary64 unit of
    /// `2^21` at `2^100` and a binary32 one at `2^29`, against MPFR.
    #[test]
    fn the_fallback_cut_walks_what_the_default_leaves_to_mpfr() {
        let b64 = Format::named("binary64").unwrap();
        let b32 = Format::named("binary32").unwrap();
        for (f, fmt, u) in [
            (Function::Sin, b64, unit(b64, false, 100, 0, 21)),
            (Function::Sin, b32, unit(b32, false, 29, 0x20_0000, 21)),
        ] {
            assert_eq!(plan_with(f, fmt.precision, u, Cut::DEFAULT), None);
            assert_eq!(
                plan(f, fmt.precision, u),
                plan_with(f, fmt.precision, u, Cut::FALLBACK)
            );
            let (c, w) = against_mpfr(f, fmt, 12, u, Cut::FALLBACK);
            assert!(
                c > 400 && w > u.count * 9 / 10,
                "{f} {u:?}: {c} cases, {w} walked"
            );
        }
    }

    /// binary32 far out on units of 2^20 (a coarser cut lets them walk), at 10 bits.
    #[test]
    fn binary32_units_far_out_match_mpfr_argument_by_argument() {
        let b32 = Format::named("binary32").unwrap();
        let cut = Cut {
            min_average: 64,
            ..Cut::DEFAULT
        };
        for (f, negative, e) in [(Function::Sin, false, 40), (Function::Tan, true, 90)] {
            let (c, w) = against_mpfr(f, b32, 10, unit(b32, negative, e, 0x12_3400, 20), cut);
            assert!(c > 200 && w > 1 << 19, "{f} 2^{e}: {c} cases, {w} walked");
        }
    }

    /// binary32: whole binades far out (2^23 arguments each), the engine's own cut where it
    /// takes the route (about 100 s on two cores: `--long`).
    #[test]
    #[ignore]
    fn binary32_binades_far_out_match_mpfr_argument_by_argument() {
        let b32 = Format::named("binary32").unwrap();
        for (f, negative, e) in [
            (Function::Sin, false, 40),
            (Function::Cos, true, 64),
            (Function::Tan, true, 90),
            (Function::Sin, true, 127),
        ] {
            let u = unit(b32, negative, e, 0, 23);
            // The engine's cut: the default where it finds a progression, else the coarser
            // one (cos at 2^64: the default's pieces would average fewer than 256 arguments).
            let cut = if plan_with(f, b32.precision, u, Cut::DEFAULT).is_some() {
                Cut::DEFAULT
            } else {
                Cut::FALLBACK
            };
            assert_eq!(
                plan(f, b32.precision, u),
                plan_with(f, b32.precision, u, cut)
            );
            let (c, w) = against_mpfr(f, b32, 10, u, cut);
            assert!(c > 1000 && w > 1 << 22, "{f} 2^{e}: {c} cases, {w} walked");
        }
    }

    /// sinpi, cospi and tanpi walked on their grid (`q = 1`): binary32 units of 2^20 at 2^6
    /// and 2^8 (4 and 16 periods, zeros, poles and lattice points inside) and binary64 units
    /// of 2^17 at 2^21, 2^27 and 2^30, both signs, at 10 and 12 bits: MPFR's cases.
    #[test]
    fn functions_of_pi_x_walked_on_their_grid_match_mpfr() {
        let b32 = Format::named("binary32").unwrap();
        for (f, negative, e) in [
            (Function::Sinpi, false, 8),
            (Function::Cospi, true, 6),
            (Function::Tanpi, false, 8),
            (Function::Tanpi, true, 6),
        ] {
            let u = unit(b32, negative, e, 0x1_2340, 20);
            assert_eq!(plan(f, b32.precision, u).map(|pr| pr.q), Some(1));
            let (c, w) = against_mpfr(f, b32, 10, u, Cut::DEFAULT);
            assert!(c > 200 && w > 1 << 19, "{f} 2^{e}: {c} cases, {w} walked");
        }
        let b64 = Format::named("binary64").unwrap();
        let cut = Cut {
            min_average: 32,
            ..Cut::DEFAULT
        };
        for (f, negative, e, first) in [
            (Function::Sinpi, true, 21, 0xf_ffff_fffe_0000),
            (Function::Cospi, false, 30, 0x3_ffff_fff0_0000),
            (Function::Tanpi, true, 27, 0x7_ffff_ffff_0000),
        ] {
            let (c, w) = against_mpfr(f, b64, 12, unit(b64, negative, e, first, 17), cut);
            assert!(c > 8 && w > 1 << 16, "{f} 2^{e}: {c} cases, {w} walked");
        }
    }

    /// `search_unit` takes the route where `plan` says so, and finds what the dyadic route
    /// finds: sin and cos in binary64 near 2^24 (where both are cheap), on and off.
    #[test]
    fn search_unit_takes_the_route_and_agrees_with_the_dyadic_one() {
        use crate::search::{search_unit, Cpu};
        let b64 = Format::named("binary64").unwrap();
        for (f, negative) in [(Function::Sin, false), (Function::Cos, true)] {
            let u = unit(b64, negative, 24, 0x5_5555_0000_0000, 20);
            assert!(plan(f, b64.precision, u).is_some());
            let mut cfg = SearchConfig::in_format(f, b64, 16);
            let on = search_unit(&cfg, u, &Cpu).unwrap();
            cfg.progressions = false;
            let off = search_unit(&cfg, u, &Cpu).unwrap();
            assert_eq!(on.stats.progression_arguments, u.count);
            assert_eq!(off.stats.progression_arguments, 0);
            assert!(on.hr_cases.len() > 4, "{f}: {} cases", on.hr_cases.len());
            assert_eq!(on.hr_cases, off.hr_cases, "{f}");
            assert_eq!(on.exact_cases, off.exact_cases, "{f}");
            assert_eq!(on.skipped, off.skipped, "{f}");
        }
        // Below 2^22 the dyadic route keeps binary64's sin, below 2^20 its sinpi.
        let u = unit(b64, false, 21, 0, 20);
        assert!(plan(Function::Sin, b64.precision, u).is_none());
        assert!(plan(Function::Sinpi, b64.precision, u).is_some());
        assert!(plan(Function::Sinpi, b64.precision, unit(b64, false, 20, 0, 20)).is_some());
        assert!(plan(Function::Sinpi, b64.precision, unit(b64, false, 19, 0, 20)).is_none());
        // sinpi, cospi and tanpi on a piece of a binade's period, route on and off.
        for f in [Function::Sinpi, Function::Cospi, Function::Tanpi] {
            let u = unit(b64, true, 22, 0x3_ffff_fffc_0000, 19);
            let mut cfg = SearchConfig::in_format(f, b64, 16);
            cfg.periodic = false;
            let on = search_unit(&cfg, u, &Cpu).unwrap();
            cfg.progressions = false;
            let off = search_unit(&cfg, u, &Cpu).unwrap();
            // Walked, but around the zero (and the pole) judged by MPFR.
            let s = &on.stats;
            assert_eq!(s.progression_arguments + s.exhaustive_arguments, u.count);
            assert!(s.progression_arguments > u.count - 1024, "{f}: {s:?}");
            assert_eq!(off.stats.progression_arguments, 0);
            assert!(on.hr_cases.len() > 2, "{f}: {} cases", on.hr_cases.len());
            assert_eq!(on.hr_cases, off.hr_cases, "{f}");
            assert_eq!(on.exact_cases, off.exact_cases, "{f}");
            assert_eq!(on.skipped, off.skipped, "{f}");
            assert_eq!(on.exact_lattice, off.exact_lattice, "{f}");
        }
        assert!(plan(Function::Exp, b64.precision, unit(b64, false, 100, 0, 30)).is_none());
    }
}
