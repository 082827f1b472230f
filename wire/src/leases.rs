//! Leases: a worker's request for work, the units and task it gets, heartbeats and the release
//! of what it does not finish.

use crate::campaigns::{CampaignState, Waiting};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

#[cfg(doc)]
use crate::results::UnitResult;
#[cfg(feature = "openapi")]
use utoipa::ToSchema;

/// The engine version a lease request or a result stands for: the one it names, or 0 where it
/// names none (workers older than the field).
pub fn engine_version(engine: Option<u32>) -> u32 {
    engine.unwrap_or(0)
}

/// `POST /api/v1/leases`: a worker asks for work.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct LeaseRequest {
    /// About how many seconds of work the worker wants; the server's default when absent.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 604800))]
    pub seconds: Option<u32>,
    /// Units the worker computes at once (its slots). A worker the server has not measured yet
    /// gets up to a few rounds of that many units (four) instead of one, so that all its slots
    /// start at once and stay busy until its first results measure it; capped by the server's
    /// limits per lease and per worker. Absent: one unit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 4096))]
    pub units_in_flight: Option<u32>,
    /// The worker's engine version (`tmd_kernels::ENGINE_VERSION`); absent: version 0, that
    /// of workers older than the field. A version the coordinator does not accept is refused
    /// with `engine_version` before any work is handed out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<u32>,
    /// What the worker computes on (`cpu` or `cuda`), shown to people in the worker list;
    /// absent from workers older than the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(max_length = 200))]
    pub backend: Option<String>,
    /// Its device as it names it (a GPU's name, a CPU's model and threads), for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(max_length = 200))]
    pub device: Option<String>,
}

/// The arguments of one unit: significands `X` in `[first, first + count)` of the binade
/// `2^exponent` with that sign (the engine's `UnitSpec`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct UnitSpec {
    pub negative: bool,
    pub exponent: i32,
    pub first: u64,
    pub count: u64,
}

/// One unit of a lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct LeasedUnit {
    pub unit_id: i64,
    #[serde(flatten)]
    pub spec: UnitSpec,
}

/// What the worker computes for a lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct LeaseTask {
    pub campaign_id: i64,
    pub function: String,
    pub precision: u32,
    pub min_bits: u32,
    /// The named format whose exponent range judges results; absent for a bare precision
    /// (exponent unbounded). Sent only to workers that declared [`FEATURES_HEADER`]
    /// `formats`: an older worker would ignore it and judge on the wrong grid, so it gets no
    /// lease of a formatted campaign.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
}

/// The request header in which a worker lists what it understands, comma-separated. A
/// header rather than a field of [`LeaseRequest`] (which refuses unknown fields), so a new
/// worker still gets work from an older server, and an older worker (no header) gets only
/// bare-precision campaigns from a newer one.
pub const FEATURES_HEADER: &str = "tmd-worker-features";

/// The feature of [`FEATURES_HEADER`]: the worker runs the engine in [`LeaseTask::format`]
/// and reports [`UnitResult::skipped`].
pub const FEATURE_FORMATS: &str = "formats";

/// A lease: a contiguous run of units of one campaign, owned until `expires_at` (database
/// clock) unless extended by heartbeats.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Lease {
    pub lease_id: i64,
    /// Present it with every heartbeat, result and release of this lease.
    pub fencing_token: i64,
    pub expires_at: DateTime<Utc>,
    /// Heartbeat at least this often (a third of the lease's lifetime).
    pub heartbeat_seconds: u32,
    pub task: LeaseTask,
    pub units: Vec<LeasedUnit>,
}

/// The answer to a lease request: a lease, or none when there is no work now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct LeaseResponse {
    pub lease: Option<Lease>,
    /// When `lease` is absent: ask again after this many seconds.
    pub retry_after_seconds: u32,
    /// When `lease` is absent: units still pending or leased (to anyone) in the campaigns this
    /// worker may work on. 0 means nothing is left that could come back to it, so a daemon run
    /// with `--exit-when-idle` may stop; above 0 some lease may still expire and return work.
    #[serde(default)]
    pub units_outstanding: i64,
    /// When `lease` is absent: why outstanding units are not handed out (the campaigns this
    /// worker may work on).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiting: Vec<Waiting>,
}

/// `POST /api/v1/leases/{id}/heartbeat`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Heartbeat {
    pub fencing_token: i64,
}

/// The lease's new expiry, and its campaign's state (stop working when `cancelled`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct HeartbeatResponse {
    pub expires_at: DateTime<Utc>,
    pub campaign_state: CampaignState,
}

/// `POST /api/v1/leases/{id}/release`: give back the lease's unfinished units.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ReleaseLease {
    pub fencing_token: i64,
    /// Units the worker failed on: they count an attempt (and may be quarantined); the others
    /// go back to the pool as they were.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_items = 100000))]
    pub failed_units: Vec<i64>,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_length = 2000))]
    pub reason: Option<String>,
}

/// What became of the released units.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ReleaseResponse {
    pub returned: u32,
    pub quarantined: u32,
}
