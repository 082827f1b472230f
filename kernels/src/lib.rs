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

pub mod cuda;
pub mod numbers;
pub mod oracle;
pub mod plan;
pub mod regions;
pub mod search;

pub use numbers::format::{Argument, FormatError, Precision};
pub use oracle::function::{Function, UnknownFunction};
