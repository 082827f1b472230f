//! `tmd-worker`: local searches and the worker daemon.
fn main() {}
