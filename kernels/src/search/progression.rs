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
use crate::search::sincos::{self, Bases, Miss, Rotor};
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
    /// Pieces shorter than this are judged by MPFR argument by argument. Near a zero of `f`
    /// pieces are halved until one output binade pair holds their values, so the arguments
    /// within a few pieces of the zero go to MPFR: with 16 instead of 64, a unit of `2^32` of
    /// sin at `2^1023` left 34,359 arguments to MPFR instead of 132,939 for 2.8% more pieces
    /// (a piece costs about what MPFR takes for eight arguments), and a unit of `2^44` on an
    /// H100 had spent 63 of its 291 s in MPFR.
    pub min_piece: u64,
    /// The route is taken where its pieces average at least this many arguments; below, the
    /// polynomials cost more than the walk saves.
    pub min_average: u64,
}

impl Cut {
    pub const DEFAULT: Cut = Cut {
        span_bits: 5,
        max_piece: 1 << 19,
        min_piece: 16,
        min_average: 256,
    };

    /// Where no progression leaves pieces of 256 arguments on average, the other route would
    /// judge nearly every argument with MPFR (about 2.6 us each on one core): pieces of 64
    /// arguments on average still cost a fraction of that. On two cores a binade of binary32
    /// sin at `2^29` took 0.60 s so instead of 14.8, a unit of `2^21` of binary64 sin at
    /// `2^100` 2.96 s instead of 47.
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
pub const BATCH: u64 = 2048;

/// Initial pieces are generated in chains of this many, one after the other on one thread, the
/// first from its center's angle and the others by rotation from the one before
/// (`Bases::sin_cos_at`): chains start at multiples of it, so every piece's numbers are the
/// same whatever thread makes it, on every back end and run. A thread's share of a batch is
/// then at most a chain too many.
const CHAIN: u64 = 16;

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
    rotor: &mut Rotor,
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
    let mut first = true;
    while let Some((j0, n)) = stack.pop() {
        // The initial piece's center follows the last one's on this thread by a rotation
        // (`Rotor`); halves, rarer, start from their own angle.
        let rotate = std::mem::take(&mut first) && !sincos::is_tan(cfg.function);
        if n < pr.min_piece {
            out.judged.extend((j0..j0 + n).map(offset));
            continue;
        }
        let t = Instant::now();
        let middle = unit.argument(offset(j0 + n / 2)).to_float(p);
        let line = |prec: u32| line_of(cfg.function, p, unit, pr.q, &middle, prec);
        let quick = bases.map(|b| {
            let center = offset(j0 + n / 2);
            if let Some((s, c)) = rotate.then(|| b.sin_cos_at(center, rotor)).flatten() {
                return sincos::fixed_from_sin_cos(cfg.function, p, &gen, n, s, c, b);
            }
            let prec = ALONG_START_PREC + p.bits();
            let theta = b.angle_at(center).unwrap_or_else(|| {
                sincos::angle(cfg.function, &line_point(cfg.function, &middle, prec), prec)
            });
            sincos::fixed_along(cfg.function, p, &gen, n, &theta, b)
        });
        let fx = match quick {
            Some(Ok(fx)) => Some(fx),
            // Halved at once: the general route's shape check fails there too (`Miss::Shape`).
            Some(Err(Miss::Shape)) => None,
            // tan's series need no lower degree than its two numbers' bound (both follow the
            // coefficients' geometric decay within the distance to a pole): where that bound
            // failed, the series failed too on every piece measured, and cost as much again.
            Some(Err(Miss::Other)) if sincos::is_tan(cfg.function) => None,
            _ => fixed_polynomial_along(cfg.function, p, &gen, n, line).ok(),
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
/// `progression_cut` times cut by cut. The search's own pieces where `range` starts at a
/// multiple of [`CHAIN`].
pub fn dense_pieces(
    cfg: &SearchConfig,
    unit: UnitSpec,
    pr: Progressions,
    range: std::ops::Range<u64>,
) -> Vec<(Dense, u64)> {
    let bases = unit_bases(cfg, unit, pr);
    let mut rotor = Rotor::default();
    range
        .flat_map(|i| {
            if i.is_multiple_of(CHAIN) {
                rotor.restart();
            }
            generate(cfg, unit, pr, bases.as_ref(), i, &mut rotor).walks
        })
        .map(|(_, _, n, d)| (d, n))
        .collect()
}

/// The initial pieces of `unit` along `pr`: every progression's `per_class`.
fn initial_pieces(unit: UnitSpec, pr: Progressions) -> u64 {
    pr.q.min(unit.count) * pr.per_class
}

/// Batch `b` of `unit`'s initial pieces (`BATCH` of them, fewer at the end) generated on the
/// current thread pool.
fn generate_batch(
    cfg: &SearchConfig,
    unit: UnitSpec,
    pr: Progressions,
    bases: Option<&Bases>,
    b: u64,
) -> Pieces {
    let (start, end) = (b * BATCH, ((b + 1) * BATCH).min(initial_pieces(unit, pr)));
    (0..(end - start).div_ceil(CHAIN))
        .into_par_iter()
        .map_init(Rotor::default, |rotor, c| {
            rotor.restart();
            (start + c * CHAIN..(start + (c + 1) * CHAIN).min(end))
                .map(|i| generate(cfg, unit, pr, bases, i, rotor))
                .fold(Pieces::default(), Pieces::merge)
        })
        .reduce(Pieces::default, Pieces::merge)
}

/// The first `batches` batches of `unit`'s initial pieces generated as [`search`] generates
/// them, on the current thread pool, and dropped unwalked: the dense pieces made. What
/// `tmd-worker bench --generation-only` times thread count by thread count.
pub fn generate_only(cfg: &SearchConfig, unit: UnitSpec, pr: Progressions, batches: u64) -> u64 {
    let bases = unit_bases(cfg, unit, pr);
    let all = initial_pieces(unit, pr).div_ceil(BATCH);
    (0..batches.min(all))
        .map(|b| generate_batch(cfg, unit, pr, bases.as_ref(), b).walks.len() as u64)
        .sum()
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
    let initial = initial_pieces(unit, pr);
    let bases = unit_bases(cfg, unit, pr);
    let gen_batch = |b: u64| generate_batch(cfg, unit, pr, bases.as_ref(), b);
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
#[path = "progression_tests.rs"]
mod tests;
