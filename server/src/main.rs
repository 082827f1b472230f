//! `tmd-server`: the coordinator.
fn main() {}
