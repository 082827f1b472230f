//! The search of one unit: shape splitting, generation, phases 1-3 on a back end, verification.
//!
//! The phases themselves are in `phases.rs` (the CPU's, on fixed-size words); the CUDA back end
//! mirrors them in `kernels/cuda/` and must give identical answers.

use crate::oracle::verify::{classify_in, ExactCase, HrCase, SkipReason, Verdict, VerifyError};
use crate::plan::{split, UnitSpec};
use crate::regions::exact::exact_run;
use crate::regions::lattice::{Lattice, LatticeRun};
use crate::regions::partition::{partition, Part};
use crate::regions::runs::{Runs, Skipped, TrivialRun};
use crate::search::backend::{Backend, PieceOutcome, SearchError, Stats, Timings};
use crate::search::config::SearchConfig;
use crate::search::dense::{self, Dense};
use crate::search::generation::{generate, GenError, Generated};
use crate::search::periodic;
use crate::search::progression::{self, Progressions};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::time::Instant;

/// How one piece of a unit is searched.
pub(crate) enum PiecePlan {
    /// Every argument through MPFR.
    Exhaustive,
    Generated(Box<Generated>),
    /// Every argument walked on the piece's polynomial, the candidates through MPFR (`dense.rs`).
    Dense(Box<Dense>),
    /// Every argument skipped for this reason.
    Skip(SkipReason),
    /// A trivial region.
    Trivial(TrivialRun),
    /// Every argument walked along progressions of the angle (`progression.rs`).
    Progressions(Progressions),
}

/// Pieces at most this long are searched exhaustively with MPFR: a polynomial does not pay.
pub const EXHAUSTIVE_MAX: u64 = 2048;

/// The result of one unit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnitResult {
    pub unit: UnitSpec,
    pub stats: Stats,
    pub hr_cases: Vec<HrCase>,
    pub exact_cases: Vec<ExactCase>,
    /// Arguments not judged (named formats only: overflow, underflow), in argument order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<Skipped>,
    /// The exact cases on the binade's lattice (sinpi, cospi, tanpi), counted by their rule
    /// and not in `exact_cases`; a function of the unit alone, so not in the digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exact_lattice: Option<LatticeRun>,
    pub timings: Timings,
}

impl UnitResult {
    /// SHA-256 of what the result claims (unit, statistics, cases; not the timings): two
    /// honest workers give the same digest for the same unit.
    pub fn digest(&self) -> String {
        let mut claim = serde_json::json!({
            "unit": self.unit,
            "stats": self.stats,
            "hr_cases": self.hr_cases,
            "exact_cases": self.exact_cases,
        });
        // Only named formats skip; bare-precision digests stay what they were.
        if !self.skipped.is_empty() {
            claim["skipped"] = serde_json::json!(self.skipped);
        }
        hex::encode(Sha256::digest(claim.to_string().as_bytes()))
    }
}

/// The pieces of `unit` and how each is searched, in argument order: trivial runs and clear
/// pieces first (`partition::partition`, the same cut the coordinator checks a result's runs
/// with), the rest generated, split where generation asks. Counts the clear arguments and the
/// generation's time.
pub(crate) fn plan_pieces(
    cfg: &SearchConfig,
    unit: UnitSpec,
    stats: &mut Stats,
    timings: &mut Timings,
) -> Vec<(UnitSpec, PiecePlan)> {
    let parts = if cfg.trivial_regions {
        partition(cfg.function, cfg.format(), cfg.min_bits, unit, split)
    } else {
        vec![(unit, Part::Search)]
    };
    let mut pieces = Vec::new();
    for (part, kind) in parts {
        match kind {
            Part::Trivial(t) => {
                pieces.push((part, PiecePlan::Trivial(t)));
                continue;
            }
            Part::Clear => {
                stats.clear_arguments += part.count;
                continue;
            }
            Part::Search => {}
        }
        let (planned, gen_s) = plan_part(cfg, part);
        timings.generation_s += gen_s;
        pieces.extend(planned);
    }
    pieces
}

/// The plan of one part of a unit to search, in argument order, and the generation's time
/// (summed over threads): generated, split where generation asks (halves, or straight to the
/// predicted size of a steep piece's descendants, [`steep_depth`]), the parts of a split
/// planned in parallel (rayon keeps their order).
fn plan_part(cfg: &SearchConfig, piece: UnitSpec) -> (Vec<(UnitSpec, PiecePlan)>, f64) {
    // Sin, cos and tan where the grid's step is a large angle: along progressions.
    if cfg.progressions {
        if let Some(pr) = progression::plan(cfg.function, cfg.precision, piece) {
            return (vec![(piece, PiecePlan::Progressions(pr))], 0.0);
        }
    }
    if piece.count <= EXHAUSTIVE_MAX {
        let t = Instant::now();
        let plan = match dense::plan(cfg, piece) {
            Some(d) => PiecePlan::Dense(Box::new(d)),
            None => PiecePlan::Exhaustive,
        };
        return (vec![(piece, plan)], t.elapsed().as_secs_f64());
    }
    let t = Instant::now();
    let generated = generate(cfg.function, cfg.precision, &cfg.gen, piece);
    let gen_s = t.elapsed().as_secs_f64();
    let plan = match generated {
        Ok(g) => match steep_depth(cfg, &g) {
            // Steep: pieces that walk fewer differences of fewer limbs.
            0 => PiecePlan::Generated(Box::new(g)),
            depth => return plan_split(cfg, split_times(piece, depth), gen_s),
        },
        Err(GenError::Overflow) => PiecePlan::Skip(SkipReason::Overflow),
        Err(GenError::Underflow) => PiecePlan::Skip(SkipReason::Underflow),
        // Every argument is a candidate: MPFR decides each one (no generation would pay).
        Err(GenError::Threshold) => PiecePlan::Exhaustive,
        // Curvature: halves may fit where the piece does not (erfc near 9 in binary32,
        // where every argument judged by MPFR costs about 0.5 ms).
        Err(
            GenError::Shape
            | GenError::Degree(_)
            | GenError::Width
            | GenError::Ball(_)
            | GenError::Curvature,
        ) => {
            let (left, right) = split(piece);
            return plan_split(cfg, vec![left, right], gen_s);
        }
    };
    (vec![(piece, plan)], gen_s)
}

/// The plans of consecutive parts, concatenated in order, planned in parallel.
fn plan_split(
    cfg: &SearchConfig,
    parts: Vec<UnitSpec>,
    gen_s: f64,
) -> (Vec<(UnitSpec, PiecePlan)>, f64) {
    let planned: Vec<(Vec<(UnitSpec, PiecePlan)>, f64)> =
        parts.into_par_iter().map(|p| plan_part(cfg, p)).collect();
    let mut pieces = Vec::new();
    let mut s = gen_s;
    for (p, t) in planned {
        pieces.extend(p);
        s += t;
    }
    (pieces, s)
}

/// `piece` halved `depth` times with [`split`]: the `2^depth` pieces in order, the same as
/// halving each half again `depth - 1` times.
fn split_times(piece: UnitSpec, depth: u32) -> Vec<UnitSpec> {
    let mut parts = vec![piece];
    for _ in 0..depth {
        parts = parts
            .into_iter()
            .flat_map(|p| {
                let (a, b) = split(p);
                [a, b]
            })
            .collect();
    }
    parts
}

/// How many times a generated piece is halved for speed, 0 where it is searched
/// as it is: where [`split_steep`] splits it, its halves would be split again while the
/// degree and width generation predicts for them ([`Generated::halves`], from this piece's own
/// remainder coefficients) are still wider than `max_limbs` limbs and their halves would keep
/// `min_domains` domains of this piece's size. So a steep piece goes straight to the size its
/// halves' halves would reach instead of generating every size on the way (exp near 300:
/// `2^38` to `2^34`, 16 pieces generated instead of 30). Each piece cut is generated and
/// judged anew (split further if it is still steep), so the prediction chooses only a route.
fn steep_depth(cfg: &SearchConfig, g: &Generated) -> u32 {
    if !split_steep(cfg, g) {
        return 0;
    }
    let mut depth = 1;
    while let Some(Some((_, limbs))) = g.halves.get(depth as usize - 1) {
        let halves = (g.piece.count >> depth) / 2;
        if *limbs <= cfg.steep.limbs_for(g.quadratic)
            || halves < cfg.steep.min_domains.saturating_mul(g.domain_size())
        {
            break;
        }
        depth += 1;
    }
    depth
}

/// Whether a generated piece is split in halves for speed: where `f` is steep in
/// units of its own ulp (the curvature lowered the domain size below the configured one),
/// a large piece needs a high degree and wide words (exp in binary64 on a unit of `2^40` near
/// 300: degree 11, 8 limbs), and every domain walks `2 degree + 1` differences of that many
/// limbs; halves need lower degrees and fewer limbs (`2^34`: degree 8, 5 limbs), and the GPU's
/// phase 1 keeps its two-limb walk. Splitting is only a route: every piece is generated and
/// searched with its own bounds, so no answer changes. It reads only the configuration and
/// the generated piece, so the CPU and CUDA back ends (and `piece_modules`) get the same
/// pieces. Where the domain size is the configured one (exp on [1, 2)) nothing changes,
/// also where the quadratic screen's domains reach it (exp near 16 and 32: the unsplit
/// pieces of 7 limbs ran 16-24% faster screened than split to 5 or 6, docs/benchmarks-history.md,
/// 2026-11-25). A
/// screened piece is split down to 6 limbs instead of 5 ([`SteepSplit`]).
fn split_steep(cfg: &SearchConfig, g: &Generated) -> bool {
    g.domain_bits < cfg.gen.domain_bits
        && g.limbs > cfg.steep.limbs_for(g.quadratic)
        && g.piece.count / 2 >= cfg.steep.min_domains.saturating_mul(g.domain_size())
}

/// The kernel modules, as (limbs, degree), that the generated pieces of `unit` need: what a GPU
/// must have compiled before the unit runs. The daemon compiles them while its GPU self-tests
/// (`cuda::warm_up`), so that a fresh machine's first unit does not wait for its own module.
pub fn piece_modules(cfg: &SearchConfig, unit: UnitSpec) -> Vec<(usize, usize)> {
    if exact_run(cfg.function, cfg.format(), unit).is_some() {
        return Vec::new();
    }
    // Dense pieces run on the host and need no module: skip building their polynomials.
    let cfg = SearchConfig {
        dense: false,
        ..*cfg
    };
    let mut modules: Vec<(usize, usize)> =
        plan_pieces(&cfg, unit, &mut Stats::default(), &mut Timings::default())
            .into_iter()
            .filter_map(|(_, plan)| match plan {
                PiecePlan::Generated(g) => Some((g.limbs, g.degree)),
                _ => None,
            })
            .collect();
    modules.sort_unstable();
    modules.dedup();
    modules
}

/// Searches one unit on `backend`: splits it where needed, generates, runs the phases, verifies.
pub fn search_unit(
    cfg: &SearchConfig,
    unit: UnitSpec,
    backend: &dyn Backend,
) -> Result<UnitResult, SearchError> {
    let mut stats = Stats {
        units: 1,
        ..Stats::default()
    };
    let mut timings = Timings::default();
    let mut hr_cases = Vec::new();
    let mut exact_cases = Vec::new();
    // A unit where every argument is exact (sinpi, cospi, tanpi, exp2 far from 0): one run, by
    // the rule `skip.rs` recomputes (`exact.rs`).
    if let Some(run) = exact_run(cfg.function, cfg.format(), unit) {
        return Ok(UnitResult {
            unit,
            stats,
            hr_cases,
            exact_cases,
            skipped: vec![run],
            exact_lattice: None,
            timings,
        });
    }
    // Sinpi, cospi and tanpi on a grid coarse enough that the unit holds two periods: its
    // first period searched, its cases copied 2, 4, ... further.
    if let Some(l) = periodic_route(cfg, unit) {
        let (base, timings) = periodic_base(cfg, unit, l, backend)?;
        let all = periodic::repeat(cfg.format(), unit, l, &base)?;
        let mut stats = base.stats;
        stats.periodic_arguments += unit.count - l;
        let lattice = Lattice::of(cfg.function, cfg.format(), unit);
        return Ok(UnitResult {
            unit,
            stats,
            hr_cases: all.hr_cases,
            exact_cases: all.exact_cases,
            skipped: all.skipped,
            exact_lattice: lattice.and_then(|t| t.run(unit, cfg.precision)),
            timings,
        });
    }
    let mut skipped = Runs::default();
    // Exact cases on the lattice are counted by rule: no MPFR call, no list.
    let lattice = Lattice::of(cfg.function, cfg.format(), unit);
    let pieces = plan_pieces(cfg, unit, &mut stats, &mut timings);
    // A back end that overlaps pieces (the GPU's slots) gets all the generated pieces of the
    // unit at once: a steep unit is 64 pieces, which one after the other left all but one
    // slot to other units. The outcomes are taken in piece order below, so the
    // result is the same either way.
    let mut outcomes: Vec<Option<Result<PieceOutcome, SearchError>>> = if backend.overlaps_pieces()
    {
        pieces
            .par_iter()
            .map(|(_, plan)| match plan {
                PiecePlan::Generated(g) => {
                    Some(backend.search_piece(g, cfg.test, cfg.packet_domains))
                }
                _ => None,
            })
            .collect()
    } else {
        Vec::new()
    };
    for (i, (piece, plan)) in pieces.into_iter().enumerate() {
        let at = piece.first - unit.first;
        match plan {
            PiecePlan::Trivial(t) => skipped.push(at, piece.count, SkipReason::Trivial, Some(t)),
            PiecePlan::Exhaustive => {
                let t = Instant::now();
                let r = exhaustive(cfg, piece, lattice)?;
                timings.exhaustive_s += t.elapsed().as_secs_f64();
                stats.exhaustive_arguments += piece.count;
                hr_cases.extend(r.0);
                exact_cases.extend(r.1);
                for (o, reason) in r.2 {
                    skipped.push(at + o, 1, reason, None);
                }
            }
            PiecePlan::Skip(reason) => skipped.push(at, piece.count, reason, None),
            PiecePlan::Generated(g) => {
                let out = match outcomes.get_mut(i).and_then(Option::take) {
                    Some(out) => out?,
                    None => backend.search_piece(&g, cfg.test, cfg.packet_domains)?,
                };
                stats.add(&out.stats);
                timings.add(&out.timings);
                let t = Instant::now();
                let found = verify_candidates(cfg, piece, &out.candidates, lattice)?;
                stats.false_positives += found.false_positives;
                hr_cases.extend(found.hr_cases);
                exact_cases.extend(found.exact_cases);
                timings.verification_s += t.elapsed().as_secs_f64();
            }
            // Generated on the host, walked on the back end (the same candidates on all).
            PiecePlan::Progressions(pr) => {
                let found = progression::search(cfg, piece, pr, backend)?;
                stats.add(&found.stats);
                timings.add(&found.timings);
                hr_cases.extend(found.hr_cases);
                exact_cases.extend(found.exact_cases);
                for (o, reason) in found.skipped {
                    skipped.push(at + o, 1, reason, None);
                }
            }
            // On the host for every back end: the same candidates and counts on all.
            PiecePlan::Dense(d) => {
                let t = Instant::now();
                let candidates = dense::candidates(&d, piece.count);
                timings.phase3_s += t.elapsed().as_secs_f64();
                stats.dense_arguments += piece.count;
                stats.candidates += candidates.len() as u64;
                let t = Instant::now();
                let found = verify_candidates(cfg, piece, &candidates, lattice)?;
                stats.false_positives += found.false_positives;
                hr_cases.extend(found.hr_cases);
                exact_cases.extend(found.exact_cases);
                timings.verification_s += t.elapsed().as_secs_f64();
            }
        }
    }
    let skipped = skipped.into_skipped(unit, cfg.precision);
    Ok(UnitResult {
        unit,
        stats,
        hr_cases,
        exact_cases,
        skipped,
        exact_lattice: lattice.and_then(|l| l.run(unit, cfg.precision)),
        timings,
    })
}

/// Searches the first period of `unit`'s binade now where `unit` takes the periodic route and
/// this process has not searched it yet: the seconds it took, `None` where there was nothing
/// to do. Units of one binade started side by side each search the period they miss
/// ([`periodic_base`] never waits: a blocked rayon thread could be the one the search needs),
/// so a caller about to start many of them (an estimate's sample) warms their periods first,
/// one at a time, and times the period apart from the units.
pub fn warm_period(
    cfg: &SearchConfig,
    unit: UnitSpec,
    backend: &dyn Backend,
) -> Result<Option<f64>, SearchError> {
    let Some((l, _)) = uncached_period(cfg, unit) else {
        return Ok(None);
    };
    let t = Instant::now();
    periodic_base(cfg, unit, l, backend)?;
    Ok(Some(t.elapsed().as_secs_f64()))
}

/// Whether `unit`'s search would first search its binade's first period, which this process
/// has not searched: `None` where it would not (no periodic route, or the period is cached),
/// else a claim ([`periodic::Claim`]): the one caller that gets `Mine` searches the unit
/// holding it, and callers that see `Busy` leave units of that binade for later rather than
/// search the same period side by side (the daemon's slots). Waiting is theirs to arrange:
/// nothing here blocks.
pub fn claim_period(cfg: &SearchConfig, unit: UnitSpec) -> Option<periodic::Claim> {
    let (_, key) = uncached_period(cfg, unit)?;
    Some(periodic::claim(&key))
}

/// The period of `unit`'s binade and its cache key where `unit`'s search would search that
/// first period now: it takes the periodic route (not an exact run) and this process has not
/// searched the period.
fn uncached_period(cfg: &SearchConfig, unit: UnitSpec) -> Option<(u64, String)> {
    if exact_run(cfg.function, cfg.format(), unit).is_some() {
        return None;
    }
    let l = periodic_route(cfg, unit)?;
    let key = period_key(cfg, unit);
    periodic::cached(&key).is_none().then_some((l, key))
}

/// The period `L` whose first instance in its binade `unit` is searched through
/// (`periodic.rs`), `None` where `unit` is searched itself.
fn periodic_route(cfg: &SearchConfig, unit: UnitSpec) -> Option<u64> {
    cfg.periodic
        .then(|| periodic::period(cfg.function, cfg.format(), unit))
        .flatten()
}

/// The key of `unit`'s binade's first period in this process's cache.
fn period_key(cfg: &SearchConfig, unit: UnitSpec) -> String {
    format!("{cfg:?} {} {}", unit.negative, unit.exponent)
}

/// The search of the first period of `unit`'s binade (`periodic.rs`), from this process's
/// cache where it searched it before, and the time it took here (none from the cache).
fn periodic_base(
    cfg: &SearchConfig,
    unit: UnitSpec,
    l: u64,
    backend: &dyn Backend,
) -> Result<(std::sync::Arc<periodic::Base>, Timings), SearchError> {
    let fmt = cfg.format();
    let key = period_key(cfg, unit);
    if let Some(base) = periodic::cached(&key) {
        return Ok((base, Timings::default()));
    }
    let first = periodic::base_unit(fmt, unit, l);
    let r = search_unit(cfg, first, backend)?;
    let cases = periodic::Cases {
        hr_cases: r.hr_cases,
        exact_cases: r.exact_cases,
        skipped: r.skipped,
    };
    let base = periodic::Base::new(fmt, first, r.stats, cases)?;
    Ok((periodic::remember(key, base), r.timings))
}

/// What MPFR made of a polynomial piece's candidates.
struct Verified {
    hr_cases: Vec<HrCase>,
    exact_cases: Vec<ExactCase>,
    false_positives: u64,
}

/// MPFR's verdict on each candidate offset of `piece`, in order, but those on the binade's
/// exact `lattice` (exact by its rule: neither judged nor listed). A polynomial piece is built
/// only where its ball proves no output leaves the format's range, so a skipped candidate is
/// an error, never dropped.
fn verify_candidates(
    cfg: &SearchConfig,
    piece: UnitSpec,
    candidates: &[u64],
    lattice: Option<Lattice>,
) -> Result<Verified, SearchError> {
    let off_lattice = |&&o: &&u64| !lattice.is_some_and(|t| t.covers(piece.first + o));
    let candidates: Vec<u64> = candidates.iter().filter(off_lattice).copied().collect();
    let verdicts: Vec<Result<Verdict, VerifyError>> = candidates
        .par_iter()
        .map(|&o| classify_in(cfg.function, cfg.format(), &piece.argument(o), cfg.min_bits))
        .collect();
    let mut out = Verified {
        hr_cases: Vec::new(),
        exact_cases: Vec::new(),
        false_positives: 0,
    };
    for (v, &o) in verdicts.into_iter().zip(&candidates) {
        match v? {
            Verdict::Hard(c) => out.hr_cases.push(c),
            Verdict::Exact(e) => out.exact_cases.push(e),
            Verdict::NotHard { .. } => out.false_positives += 1,
            Verdict::Skipped(r) => {
                return Err(SearchError::Backend(format!(
                    "{}: a candidate of a polynomial piece is out of range ({}): \
                     generation and verification disagree",
                    piece.argument(o).to_hex(cfg.precision),
                    r.as_str()
                )))
            }
        }
    }
    Ok(out)
}

/// What the exhaustive search of a piece found: cases, exact cases, skipped offsets.
type Exhaustive = (Vec<HrCase>, Vec<ExactCase>, Vec<(u64, SkipReason)>);

/// Every argument of the piece through MPFR, but those on the binade's exact `lattice`.
fn exhaustive(
    cfg: &SearchConfig,
    piece: UnitSpec,
    lattice: Option<Lattice>,
) -> Result<Exhaustive, SearchError> {
    let (f, fmt, k) = (cfg.function, cfg.format(), cfg.min_bits);
    let on_lattice = |o: u64| lattice.is_some_and(|t| t.covers(piece.first + o));
    let verdicts: Vec<(u64, Verdict)> = (0..piece.count)
        .into_par_iter()
        .filter(|&o| !on_lattice(o))
        .map(|o| Ok((o, classify_in(f, fmt, &piece.argument(o), k)?)))
        .collect::<Result<_, VerifyError>>()?;
    let mut hr = Vec::new();
    let mut exact = Vec::new();
    let mut skipped = Vec::new();
    for (o, v) in verdicts {
        match v {
            Verdict::Hard(c) => hr.push(c),
            Verdict::Exact(e) => exact.push(e),
            Verdict::NotHard { .. } => {}
            Verdict::Skipped(r) => skipped.push((o, r)),
        }
    }
    Ok((hr, exact, skipped))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numbers::format::{Format, Precision};
    use crate::search::config::SteepSplit;
    use crate::Function;

    /// The pieces the former route made of `unit`: halves, each generated, while generation
    /// failed or [`split_steep`] asked (no prediction).
    fn halving_route(cfg: &SearchConfig, unit: UnitSpec) -> Vec<(UnitSpec, usize, usize)> {
        let mut out = Vec::new();
        let mut stack = vec![unit];
        while let Some(piece) = stack.pop() {
            if piece.count <= EXHAUSTIVE_MAX {
                continue;
            }
            match generate(cfg.function, cfg.precision, &cfg.gen, piece) {
                Ok(g) if !split_steep(cfg, &g) => out.push((piece, g.degree, g.limbs)),
                Err(GenError::Overflow | GenError::Underflow | GenError::Threshold) => {}
                _ => {
                    let (l, r) = split(piece);
                    stack.push(r);
                    stack.push(l);
                }
            }
        }
        out
    }

    fn generated(cfg: &SearchConfig, unit: UnitSpec) -> Vec<(UnitSpec, usize, usize)> {
        plan_pieces(cfg, unit, &mut Stats::default(), &mut Timings::default())
            .into_iter()
            .map(|(p, plan)| match plan {
                PiecePlan::Generated(g) => (p, g.degree, g.limbs),
                _ => panic!("{p:?}: not a generated piece"),
            })
            .collect()
    }

    /// The steep pieces go straight to the size the halving route reached, and it is
    /// the same cut: exp in binary64 at 44 bits on units of `2^40` from [16, 32) to [512, 1024)
    /// and on the negative side, sinh near 256, and exp in binary80 near 256, with the line
    /// test and with the quadratic screen.
    #[test]
    fn predicted_steep_splits_are_the_halving_routes() {
        let b64 = Format::named("binary64").unwrap();
        let b80 = Format::named("binary80").unwrap();
        let cases = [
            (Function::Exp, b64, false, 4, 40),
            (Function::Exp, b64, false, 6, 40),
            (Function::Exp, b64, false, 8, 40),
            (Function::Exp, b64, false, 9, 40),
            (Function::Exp, b64, true, 8, 40),
            (Function::Sinh, b64, false, 8, 40),
            (Function::Exp, b80, false, 8, 44),
        ];
        let mut screened_splits = 0;
        for ((f, fmt, negative, e, u), quadratic) in
            cases.into_iter().flat_map(|c| [(c, false), (c, true)])
        {
            let k = if fmt.precision.bits() == 64 { 54 } else { 44 };
            let mut cfg = SearchConfig::in_format(f, fmt, k);
            cfg.gen.quadratic = quadratic;
            let p = fmt.precision.bits();
            let unit = UnitSpec {
                negative,
                exponent: e,
                first: (1u64 << (p - 1)) + (3u64 << (p - 4)),
                count: 1 << u,
            };
            let old = halving_route(&cfg, unit);
            let new = generated(&cfg, unit);
            println!(
                "{f} {} 2^{e} negative {negative} screen {quadratic}: {} pieces",
                fmt.name(),
                old.len()
            );
            // The line's pieces all split; screened ones stay whole where the screen's domains
            // reach the configured size (exp near 16).
            assert!(quadratic || old.len() >= 2, "not split");
            screened_splits += (quadratic && old.len() >= 2) as u32;
            assert_eq!(old, new, "{f} {} 2^{e} negative {negative}", fmt.name());
        }
        assert!(
            screened_splits >= 5,
            "{screened_splits} screened cases split"
        );
    }

    // `STEEP_CASES`, the table of `kernels/tests/pipeline.rs`.
    include!("../../tests/common/steep_cases.rs");

    /// The same at the small precisions of `kernels/tests/pipeline.rs`
    /// (`steep_regions_split_against_brute_force`), with the split forced on (`max_limbs: 0`),
    /// where pieces go several halvings deep and the halves' domain sizes differ.
    #[test]
    fn forced_steep_splits_are_the_halving_routes() {
        for (f, bits, from, to, k, u) in STEEP_CASES {
            let p = Precision::new(bits).unwrap();
            let mut cfg = SearchConfig::new(f, p, k);
            cfg.steep = SteepSplit {
                max_limbs: 0,
                max_limbs_screened: 0,
                min_domains: 128,
            };
            let mut split_units = 0;
            for unit in crate::plan::split_range(f, p, from, to, Some(u)).unwrap() {
                let new: Vec<_> =
                    plan_pieces(&cfg, unit, &mut Stats::default(), &mut Timings::default())
                        .into_iter()
                        .filter_map(|(p, plan)| match plan {
                            PiecePlan::Generated(g) => Some((p, g.degree, g.limbs)),
                            _ => None,
                        })
                        .collect();
                let old = halving_route(&cfg, unit);
                split_units += (new.len() > 1) as u32;
                assert_eq!(old, new, "{f} p={bits} {unit:?}");
            }
            assert!(split_units > 0, "{f} p={bits}: nothing split");
        }
    }
}
