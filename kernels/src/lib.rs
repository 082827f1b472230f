//! The search engine for hard-to-round cases (the contract is `shared/ALGORITHMS.md`).
//!
//! Pure computation: no network, no database. The CPU back end uses every core through rayon;
//! the CUDA back end (`cuda`) runs phases 1-3 on NVIDIA GPUs with identical answers.
//!
//! The folders follow the pipeline, each using only those before it: `numbers` (formats,
//! arguments, ball and series arithmetic, fixed-size words), `oracle` (the functions and MPFR's
//! verdict on one argument), `plan` (ranges and whole functions cut into units), `regions`
//! (arguments decided by a rule, without searching), `search` (generation, the existence tests,
//! phases 1-3 on a back end, verification of the candidates), `cuda` (the GPU back end).

pub mod alloc;
pub mod cuda;
pub mod numbers;
pub mod oracle;
pub mod plan;
pub mod regions;
pub mod search;

pub use numbers::format::{Argument, FormatError, Precision};

/// The version of what a unit's result claims beyond its cases: the counters of
/// [`search::Stats`] (domains, phase-1 failures, ...), which depend on the engine's routes
/// (domain sizes, the quadratic screen, where pieces split), not only on the unit. Two results
/// of one unit agree only when computed by the same version, so the coordinator compares
/// results within a version and refuses workers of a version it does not accept
/// (`docs/trust.md`). Raise it with any change that moves a counter of some unit; the
/// reference units of `kernels/tests/engine_version.rs` fail until it is raised.
///
/// 1: the counters as of 2026-11-26. Results recorded before the
/// version existed count as version 0.
/// 2: sin, cos and tan of large arguments along progressions of the angle
/// (`search::progression`), with their own counter.
/// 3: sinpi, cospi and tanpi count the exact cases on their binade's lattice by its rule
/// instead of listing them (`regions::lattice`): the counters stay, the lists shrink.
/// 4: sinpi, cospi and tanpi units of two periods or more search their first period and copy
/// its cases (`search::periodic`), with their own counter; tanpi's poles on the lattice are
/// counted in its run instead of skipped runs.
/// 5: sinpi, cospi and tanpi walked on their grid where its step is a large angle
/// (`search::progression` with `q = 1`: binary64 from `2^20`), counted as progression arguments.
/// 6: on that route, the pieces of sin, cos, sinpi and cospi generated from the sine and cosine
/// of their centers (`search::sincos`): their remainder bounds, so their thresholds and
/// candidates, may differ from the series'.
/// 7: tan and tanpi's pieces on that route from the same two numbers (`tan_along`), and a piece
/// they cannot take halved at once: their pieces, and so the counters, may differ.
/// 8: where the route's default cut finds no progression, a coarser one (pieces of 64
/// arguments on average, `Cut::FALLBACK`) before the other route: such units walk instead of
/// judging every argument with MPFR.
/// 9: dense walks narrowed where a written bound allows (`search::narrow`): each chunk of
/// `2^10` offsets walks fewer differences of two limbs against a threshold a few units of
/// `2^-64` wider, so a piece may keep a few more candidates.
/// 10: a piece of sin, cos, sinpi or cospi whose two numbers show a zero of `f` or more than
/// two output binades on it is halved at once, without asking the general route (which
/// accepted 1 of 1,335 such pieces measured): that rare piece's halves, and so the counters,
/// may differ; and the route's pieces are halved down to 16 arguments, not 64, before MPFR
/// judges them one by one (`Cut::min_piece`): fewer arguments go to MPFR, more are walked;
/// and the sine and cosine of a piece's center are rotated from the last center's on its
/// thread, so a difference's ball, and rarely its rounded integer, may differ.
pub const ENGINE_VERSION: u32 = 10;

/// What the binaries' `--version` prints: their release and the engine version they run.
pub fn version_line(release: &str) -> String {
    format!("{release} (engine version {ENGINE_VERSION})")
}
pub use oracle::function::{Function, UnknownFunction};
