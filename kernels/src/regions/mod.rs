//! Regions decided by a rule, without searching argument by argument: exact regions
//! (`exact.rs`) and the exact lattices of finer binades (`lattice.rs`), trivial regions near 0
//! (`trivial.rs`) and pieces decided by enclosures of a monotone `f` (`monotone.rs`), the cut
//! of a unit into such parts (`partition.rs`), the skipped runs they become in a result
//! (`runs.rs`), and a unit's skipped runs recomputed without searching it, for the
//! coordinator (`skip.rs`), with how near a binade's arguments come to the zeros and poles of
//! sin, cos and tan (`angle.rs`).

pub mod angle;
pub mod exact;
pub mod lattice;
pub mod monotone;
pub mod partition;
pub mod runs;
pub mod skip;
pub mod trivial;
