//! Numbers: precisions, formats and arguments with their C99 hex (`format.rs`), and the
//! arithmetic the engine computes with: balls on MPFR (`ball.rs`), power series of balls
//! (`series.rs`), fixed-size words of 64-bit limbs (`fixed.rs`).

pub mod ball;
pub mod fixed;
pub mod format;
pub mod series;
