//! A back end: what runs phases 1-3 of a generated piece (the CPU's in `phases.rs`, the GPUs'
//! in `cuda/`), and what it reports of the piece: the candidates, the counts of each phase
//! (identical across back ends) and the time each phase took.

use crate::oracle::verify::VerifyError;
use crate::search::dense::{self, Dense};
use crate::search::existence::Test;
use crate::search::generation::Generated;
use serde::{Deserialize, Serialize};

/// Counts of what each phase did; identical across back ends for the same unit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    pub units: u64,
    pub domains: u64,
    pub phase1_failures: u64,
    pub subdomains: u64,
    pub phase2_failures: u64,
    pub phase3_arguments: u64,
    pub candidates: u64,
    pub false_positives: u64,
    /// Arguments evaluated one by one with MPFR where no polynomial was used.
    pub exhaustive_arguments: u64,
    /// Polynomial pieces the units were cut into.
    pub pieces: u64,
    /// Arguments proven free of HR-cases by enclosures (`monotone.rs`, clear pieces), not
    /// walked: searched by that proof. Absent from the JSON when 0, so the digests of results
    /// without clear pieces stay what they were.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub clear_arguments: u64,
    /// Arguments walked on their piece's full-degree polynomial (`dense.rs`), whose candidates
    /// (counted in `candidates`) MPFR judged. Absent from the JSON when 0, as above.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dense_arguments: u64,
    /// Arguments walked along progressions of the angle (`progression.rs`: sin, cos and tan
    /// of large arguments), whose candidates MPFR judged. Absent from the JSON when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub progression_arguments: u64,
    /// Arguments whose verdicts are copies of those 2, 4, ... before them (`periodic.rs`:
    /// sinpi, cospi and tanpi on coarse grids), not searched again. Absent from the JSON when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub periodic_arguments: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl Stats {
    pub fn add(&mut self, o: &Stats) {
        self.units += o.units;
        self.domains += o.domains;
        self.phase1_failures += o.phase1_failures;
        self.subdomains += o.subdomains;
        self.phase2_failures += o.phase2_failures;
        self.phase3_arguments += o.phase3_arguments;
        self.candidates += o.candidates;
        self.false_positives += o.false_positives;
        self.exhaustive_arguments += o.exhaustive_arguments;
        self.pieces += o.pieces;
        self.clear_arguments += o.clear_arguments;
        self.dense_arguments += o.dense_arguments;
        self.progression_arguments += o.progression_arguments;
        self.periodic_arguments += o.periodic_arguments;
    }
}

/// Seconds spent per phase (summed over threads for the parallel ones).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Timings {
    pub generation_s: f64,
    pub phase1_s: f64,
    pub phase2_s: f64,
    pub phase3_s: f64,
    pub verification_s: f64,
    pub exhaustive_s: f64,
}

impl Timings {
    pub fn add(&mut self, o: &Timings) {
        self.generation_s += o.generation_s;
        self.phase1_s += o.phase1_s;
        self.phase2_s += o.phase2_s;
        self.phase3_s += o.phase3_s;
        self.verification_s += o.verification_s;
        self.exhaustive_s += o.exhaustive_s;
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SearchError {
    #[error(transparent)]
    Verify(#[from] VerifyError),
    #[error("back end: {0}")]
    Backend(String),
    /// More cases than a list holds (a periodic unit's copies of its period, `periodic.rs`):
    /// a property of the unit, the same on every back end, so never tried again elsewhere.
    #[error("too many cases: {0}")]
    TooManyCases(String),
}

/// The outcome of the search of one polynomial piece, before verification.
#[derive(Debug, Default)]
pub struct PieceOutcome {
    pub stats: Stats,
    pub candidates: Vec<u64>,
    pub timings: Timings,
}

/// A back end runs phases 1-3 of a generated piece.
pub trait Backend: Sync {
    fn search_piece(
        &self,
        g: &Generated,
        test: Test,
        packet_domains: u64,
    ) -> Result<PieceOutcome, SearchError>;
    fn name(&self) -> String;
    /// After a piece failed on this back end with `err`: changes what may have caused it (the
    /// CUDA back end halves its device memory per piece) and says whether running the piece
    /// again here may succeed. A deterministic failure (MPFR's) is not the back end's.
    fn recover(&self, _err: &SearchError) -> bool {
        false
    }
    /// What happened to a device of this back end that can compute nothing more (a CUDA
    /// context lost to a sticky error), if one did: its pieces then fail at once, and only a
    /// new process can use the device again.
    fn lost(&self) -> Option<String> {
        None
    }
    /// Each device's work so far (empty for the CPU), for the daemon's account.
    fn device_use(&self) -> Vec<DeviceUse> {
        Vec::new()
    }
    /// Walks dense pieces (`dense.rs`: a polynomial and its number of offsets): the kept
    /// offsets of each, increasing, and the seconds it took (summed over threads on the host).
    /// The walk is exact mod 1, so every back end keeps the host's offsets.
    fn walk_dense(&self, pieces: &[(&Dense, u64)]) -> Result<(Vec<Vec<u64>>, f64), SearchError> {
        Ok(dense::walk_on_host(pieces))
    }
    /// Whether pieces run side by side here (the GPU's slots): then a unit hands all its
    /// generated pieces at once. The CPU's phases fill every core with one piece already.
    fn overlaps_pieces(&self) -> bool {
        false
    }
}

/// One device's work so far: pieces run and time with at least one piece on it.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceUse {
    pub device: usize,
    pub pieces: u64,
    pub busy_s: f64,
}
