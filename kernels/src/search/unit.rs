//! The search of one unit: shape splitting, generation, phases 1-3 on a back end, verification.
//!
//! The phases themselves are in `phases.rs` (the CPU's, on fixed-size words); the CUDA back end
//! mirrors them in `kernels/cuda/` and must give identical answers.

use crate::oracle::verify::{classify_in, ExactCase, HrCase, SkipReason, Verdict, VerifyError};
use crate::plan::{split, UnitSpec};
use crate::regions::exact::exact_run;
use crate::regions::partition::{partition, Part};
use crate::regions::runs::{Runs, Skipped, TrivialRun};
use crate::search::backend::{Backend, SearchError, Stats, Timings};
use crate::search::config::SearchConfig;
use crate::search::dense::{self, Dense};
use crate::search::generation::{generate, GenError, Generated};
use crate::search::periodic::{self, classes};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::time::Instant;

/// How one piece of a unit is searched.
enum PiecePlan {
    /// Every argument through MPFR.
    Exhaustive,
    Generated(Box<Generated>),
    /// Every argument walked on the piece's polynomial, the candidates through MPFR (`dense.rs`).
    Dense(Box<Dense>),
    /// Every argument skipped for this reason.
    Skip(SkipReason),
    /// A trivial region.
    Trivial(TrivialRun),
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
fn plan_pieces(
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
        let mut stack = vec![part];
        // Depth-first, left to right: pieces come out in argument order.
        while let Some(piece) = stack.pop() {
            // Sinpi, cospi, tanpi on coarse grids: a few values, each judged once.
            let periodic = classes(cfg.function, cfg.format(), piece).is_some();
            if piece.count <= EXHAUSTIVE_MAX || periodic {
                let t = Instant::now();
                // Periodic pieces judge one argument per class: nothing to walk.
                let dense = if periodic {
                    None
                } else {
                    dense::plan(cfg, piece)
                };
                let plan = match dense {
                    Some(d) => PiecePlan::Dense(Box::new(d)),
                    None => PiecePlan::Exhaustive,
                };
                timings.generation_s += t.elapsed().as_secs_f64();
                pieces.push((piece, plan));
                continue;
            }
            let t = Instant::now();
            let generated = generate(cfg.function, cfg.precision, &cfg.gen, piece);
            timings.generation_s += t.elapsed().as_secs_f64();
            match generated {
                // Steep: halves walk fewer differences of fewer limbs (issue 26).
                Ok(g) if split_steep(cfg, &g) => {
                    let (left, right) = split(piece);
                    stack.push(right);
                    stack.push(left);
                }
                Ok(g) => pieces.push((piece, PiecePlan::Generated(Box::new(g)))),
                Err(GenError::Overflow) => {
                    pieces.push((piece, PiecePlan::Skip(SkipReason::Overflow)))
                }
                Err(GenError::Underflow) => {
                    pieces.push((piece, PiecePlan::Skip(SkipReason::Underflow)))
                }
                // Every argument is a candidate: MPFR decides each one (no generation would pay).
                Err(GenError::Threshold) => pieces.push((piece, PiecePlan::Exhaustive)),
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
                    stack.push(right);
                    stack.push(left);
                }
            }
        }
    }
    pieces
}

/// Whether a generated piece is split in halves for speed (issue 26): where `f` is steep in
/// units of its own ulp (the curvature lowered the domain size below the configured one),
/// a large piece needs a high degree and wide words (exp in binary64 on a unit of `2^40` near
/// 300: degree 11, 8 limbs), and every domain walks `2 degree + 1` differences of that many
/// limbs; halves need lower degrees and fewer limbs (`2^34`: degree 8, 5 limbs), and the GPU's
/// phase 1 keeps its two-limb walk. Splitting is only a route: every piece is generated and
/// searched with its own bounds, so no answer changes. It reads only the configuration and
/// the generated piece, so the CPU and CUDA back ends (and `piece_modules`) get the same
/// pieces. Where the domain size is the configured one (exp on [1, 2)) nothing changes.
fn split_steep(cfg: &SearchConfig, g: &Generated) -> bool {
    g.domain_bits < cfg.gen.domain_bits
        && g.limbs > cfg.steep.max_limbs
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
            timings,
        });
    }
    let mut skipped = Runs::default();
    let pieces = plan_pieces(cfg, unit, &mut stats, &mut timings);
    for (piece, plan) in pieces {
        let at = piece.first - unit.first;
        match plan {
            PiecePlan::Trivial(t) => skipped.push(at, piece.count, SkipReason::Trivial, Some(t)),
            PiecePlan::Exhaustive => {
                let t = Instant::now();
                let r = exhaustive(cfg, piece)?;
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
                let out = backend.search_piece(&g, cfg.test, cfg.packet_domains)?;
                stats.add(&out.stats);
                timings.add(&out.timings);
                let t = Instant::now();
                let found = verify_candidates(cfg, piece, &out.candidates)?;
                stats.false_positives += found.false_positives;
                hr_cases.extend(found.hr_cases);
                exact_cases.extend(found.exact_cases);
                timings.verification_s += t.elapsed().as_secs_f64();
            }
            // On the host for every back end: the same candidates and counts on all.
            PiecePlan::Dense(d) => {
                let t = Instant::now();
                let candidates = dense::candidates(&d, piece.count);
                timings.phase3_s += t.elapsed().as_secs_f64();
                stats.dense_arguments += piece.count;
                stats.candidates += candidates.len() as u64;
                let t = Instant::now();
                let found = verify_candidates(cfg, piece, &candidates)?;
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
        timings,
    })
}

/// What MPFR made of a polynomial piece's candidates.
struct Verified {
    hr_cases: Vec<HrCase>,
    exact_cases: Vec<ExactCase>,
    false_positives: u64,
}

/// MPFR's verdict on each candidate offset of `piece`, in order. A polynomial piece is built
/// only where its ball proves no output leaves the format's range, so a skipped candidate is
/// an error, never dropped.
fn verify_candidates(
    cfg: &SearchConfig,
    piece: UnitSpec,
    candidates: &[u64],
) -> Result<Verified, SearchError> {
    let verdicts: Vec<Result<Verdict, VerifyError>> = candidates
        .par_iter()
        .map(|&o| classify_in(cfg.function, cfg.format(), &piece.argument(o), cfg.min_bits))
        .collect();
    let mut out = Verified {
        hr_cases: Vec::new(),
        exact_cases: Vec::new(),
        false_positives: 0,
    };
    for (v, &o) in verdicts.into_iter().zip(candidates) {
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

/// Every argument of the piece through MPFR (for a periodic function on a coarse grid, one
/// argument of each class, `periodic.rs`).
fn exhaustive(cfg: &SearchConfig, piece: UnitSpec) -> Result<Exhaustive, SearchError> {
    let (f, fmt, k) = (cfg.function, cfg.format(), cfg.min_bits);
    let verdicts: Vec<(u64, Verdict)> = match classes(f, fmt, piece) {
        Some(l) => periodic::verdicts(f, fmt, k, piece, l)?,
        None => (0..piece.count)
            .into_par_iter()
            .map(|o| Ok((o, classify_in(f, fmt, &piece.argument(o), k)?)))
            .collect::<Result<_, VerifyError>>()?,
    };
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
