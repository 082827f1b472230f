//! The oracle: the functions searched, each defined once (name, MPFR evaluation, series rule,
//! domain; `function.rs`), and MPFR's verdict on one argument, its exact hardness on the
//! format's grid (`verify.rs`). Every other part of the engine is checked against it.

pub mod function;
pub mod verify;
