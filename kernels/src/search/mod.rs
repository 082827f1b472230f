//! The search of a unit, in the order it runs: its configuration (`config.rs`), the pieces a
//! unit is cut into and each one's route (`unit.rs`), the generation of a piece's exact
//! per-domain polynomials and thresholds (`generation.rs`; the domain size of flat pieces in
//! `rise.rs`), the existence tests of phases 1-2
//! (`existence.rs`), phases 1-3 on a back end (`backend.rs`; the CPU's in `phases.rs` and
//! `stripe.rs`, the GPUs' in `crate::cuda`), the routes without phases 1-3 (`dense.rs`,
//! `periodic.rs`, `progression.rs`), and many units added up (`range.rs`).
//!
//! The items other crates use are re-exported here; inside the crate, modules import from the
//! module that defines an item, so that no two modules import each other.

pub mod backend;
pub mod config;
pub mod dense;
pub mod existence;
pub mod generation;
pub mod narrow;
pub mod periodic;
pub mod phases;
pub mod prior;
pub mod progression;
pub mod range;
mod rise;
pub(crate) mod sincos;
pub mod stripe;
pub mod unit;

// A result lists its skipped runs: their type is part of the search's.
pub use crate::regions::lattice::LatticeRun;
pub use crate::regions::runs::Skipped;
pub use backend::{Backend, DeviceUse, PieceOutcome, SearchError, Stats, Timings};
pub use config::{SearchConfig, SteepSplit, MAX_MIN_BITS};
pub use phases::Cpu;
pub use range::{search_units, RangeResult};
pub use unit::{claim_period, piece_modules, search_unit, warm_period, UnitResult, EXHAUSTIVE_MAX};
