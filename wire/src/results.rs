//! Results: a finished unit's statistics and HR-cases as a worker posts them, singly or in
//! batches, and what the coordinator answers for each unit.

use crate::errors::ApiError;
use serde::{Deserialize, Serialize};

#[cfg(feature = "openapi")]
use utoipa::ToSchema;

/// The engine's counters for one unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct UnitStats {
    pub units: u64,
    pub domains: u64,
    pub phase1_failures: u64,
    pub subdomains: u64,
    pub phase2_failures: u64,
    pub phase3_arguments: u64,
    pub candidates: u64,
    pub false_positives: u64,
}

/// Whether a hard case is close to a floating-point number or to a midpoint between two.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum HrKind {
    Fp,
    Mid,
}

impl HrKind {
    pub fn as_str(self) -> &'static str {
        match self {
            HrKind::Fp => "fp",
            HrKind::Mid => "mid",
        }
    }

    pub fn parse(s: &str) -> Option<HrKind> {
        match s {
            "fp" => Some(HrKind::Fp),
            "mid" => Some(HrKind::Mid),
            _ => None,
        }
    }
}

/// A hard-to-round case as the worker reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct HrCase {
    /// The argument, C99 hexadecimal.
    #[cfg_attr(feature = "openapi", schema(pattern = "^[A-Za-z0-9.+_-]{1,64}$"))]
    pub x: String,
    /// Identical bits after the rounding bit.
    pub bits: u32,
    /// -log2 of the relative distance to the breakpoint.
    pub neg_log2_d: f64,
    pub kind: HrKind,
    /// f(x) rounded to nearest, C99 hexadecimal.
    #[cfg_attr(feature = "openapi", schema(pattern = "^[A-Za-z0-9.+_-]{1,64}$"))]
    pub rounded: String,
}

/// Consecutive arguments of a unit that were not judged, and why. Reasons are open-ended
/// codes (`overflow`, `underflow`, `pole` today; new engine reasons need no new schema), each
/// with its rule for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct SkippedRun {
    /// The smallest argument of the run, C99 hexadecimal.
    #[cfg_attr(feature = "openapi", schema(pattern = "^[A-Za-z0-9.+_-]{1,64}$"))]
    pub first: String,
    /// The largest argument of the run, C99 hexadecimal.
    #[cfg_attr(feature = "openapi", schema(pattern = "^[A-Za-z0-9.+_-]{1,64}$"))]
    pub last: String,
    /// Arguments in the run.
    pub count: u64,
    /// Why: `overflow`, `underflow`, `pole`, ...
    #[cfg_attr(feature = "openapi", schema(pattern = "^[a-z0-9_]{1,64}$"))]
    pub reason: String,
    /// The rule for people (set by the server; ignored in a posted result).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_length = 1000))]
    pub rule: String,
}

/// `POST /api/v1/leases/{lease_id}/units/{unit_id}/result`: one finished unit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct UnitResult {
    pub fencing_token: i64,
    pub stats: UnitStats,
    #[cfg_attr(feature = "openapi", schema(max_items = 10000))]
    pub hr_cases: Vec<HrCase>,
    /// Arguments (C99 hexadecimal) where f(x) is exactly representable.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_items = 10000))]
    pub exact_cases: Vec<String>,
    /// The runs of the unit's arguments that were not judged (overflow, underflow, pole), in
    /// the engine's order. The server recomputes them and refuses a result whose runs differ.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(max_items = 10000))]
    pub skipped: Vec<SkippedRun>,
    /// Wall-clock seconds the worker spent on the unit.
    #[cfg_attr(feature = "openapi", schema(minimum = 0.0, maximum = 1000000000.0))]
    pub elapsed: f64,
    /// Hex SHA-256 digest of the unit's result, as the engine computes it.
    #[cfg_attr(feature = "openapi", schema(pattern = "^[0-9a-fA-F]{64}$"))]
    pub digest: String,
    /// The engine version that computed the result (`tmd_kernels::ENGINE_VERSION`): its
    /// counters are compared only with results of the same version. Absent: version 0, that
    /// of workers older than the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<u32>,
}

/// The server's answer to an accepted result; a retry of the same post gets the same answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ResultAccepted {
    pub result_id: i64,
    pub unit_id: i64,
    /// HR-cases verified and recorded with this result.
    pub hr_cases: u32,
}

/// `POST /api/v1/results`: finished units of one or more of the worker's leases, recorded in
/// one request. Each unit is judged as a single post of it would be (fencing, verification,
/// replication, trust); the answer has one outcome per unit, in the same order, so a retry of
/// a partly accepted batch is safe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ResultBatch {
    #[cfg_attr(feature = "openapi", schema(min_items = 1, max_items = 1000))]
    pub results: Vec<BatchedResult>,
}

/// One unit's result in a [`ResultBatch`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct BatchedResult {
    pub lease_id: i64,
    pub unit_id: i64,
    pub result: UnitResult,
}

/// What became of one unit of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum UnitOutcomeStatus {
    /// Recorded now.
    Accepted,
    /// The same result was recorded before (a retry): same `result_id`.
    Replayed,
    /// Not recorded; `error` says why with the code a single post would answer
    /// (`lease_expired`, `stale_token`, `unit_done`, `forged_case`, `bad_request`, ...).
    Refused,
    /// Not judged now (the server is busy verifying): post this unit again later.
    Retry,
}

/// The outcome of one unit of a batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct UnitOutcome {
    pub lease_id: i64,
    pub unit_id: i64,
    pub status: UnitOutcomeStatus,
    /// For `accepted` and `replayed`.
    #[serde(default)]
    pub result_id: Option<i64>,
    /// HR-cases verified and recorded with the result (`accepted`, `replayed`).
    #[serde(default)]
    pub hr_cases: Option<u32>,
    /// For `refused` and `retry`.
    #[serde(default)]
    pub error: Option<ApiError>,
}

/// The answer to a [`ResultBatch`]: one outcome per posted unit, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ResultBatchResponse {
    pub outcomes: Vec<UnitOutcome>,
}
