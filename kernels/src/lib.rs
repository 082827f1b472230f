//! The search engine for hard-to-round cases (the contract is `shared/ALGORITHMS.md`).
//!
//! Pure computation: no network, no database. The CPU back end uses every core through rayon;
//! the CUDA back end (`cuda`) runs phases 1-3 on NVIDIA GPUs with identical answers.

pub mod ball;
pub mod cuda;
pub mod dense;
pub mod exact;
pub mod existence;
pub mod fixed;
pub mod format;
pub mod function;
pub mod generation;
pub mod monotone;
pub mod periodic;
pub mod phases;
pub mod plan;
pub mod range;
pub mod search;
pub mod series;
pub mod skip;
pub mod stripe;
pub mod trivial;
pub mod verify;
pub mod whole;

pub use format::{Argument, FormatError, Precision};
pub use function::{Function, UnknownFunction};
