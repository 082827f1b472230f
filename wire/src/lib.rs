//! Types exchanged between `tmd-server` and `tmd-worker` over HTTP.
//!
//! This crate has no I/O and no server-side dependencies, so the worker can use it without
//! pulling in axum or sqlx. The optional `openapi` feature derives OpenAPI schemas (utoipa) for
//! the server's generated document; the worker leaves it off.
//!
//! Conventions: ids are integers; timestamps are RFC 3339 UTC; arguments are C99 hexadecimal
//! strings; argument counts that may exceed 2^64 (whole campaigns) are decimal strings.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

#[cfg(feature = "openapi")]
use utoipa::ToSchema;

mod estimate;
mod plan;
pub use estimate::{BinadeCost, CostEstimate, COST_ESTIMATE_VERSION};
pub use plan::{CampaignPlan, PlanCampaign, SkippedBlock};

/// The body of every HTTP error: a stable machine-readable `code` and a message for a person.
///
/// The codes a client branches on are the constants in [`codes`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ApiError {
    pub code: String,
    pub message: String,
}

/// The stable error codes of [`ApiError::code`].
pub mod codes {
    /// The resource (campaign, lease, unit, route) does not exist.
    pub const NOT_FOUND: &str = "not_found";
    /// The request is malformed or a field is invalid.
    pub const BAD_REQUEST: &str = "bad_request";
    /// No token, or a token the server does not know.
    pub const UNAUTHORIZED: &str = "unauthorized";
    /// A valid token that may not do this (a worker on an admin route, another worker's lease).
    pub const FORBIDDEN: &str = "forbidden";
    /// The lease expired or was released; its units went back to the pool. Ask for new work.
    pub const LEASE_EXPIRED: &str = "lease_expired";
    /// The fencing token is not the current one for this lease or unit: a newer lease owns it.
    pub const STALE_TOKEN: &str = "stale_token";
    /// Another lease already finished this unit.
    pub const UNIT_DONE: &str = "unit_done";
    /// The unit is not part of the lease named in the request.
    pub const LEASE_MISMATCH: &str = "lease_mismatch";
    /// The request conflicts with recorded state (a retry with different content, a state
    /// transition that is not allowed).
    pub const CONFLICT: &str = "conflict";
    /// A reported hard case failed the server's MPFR re-verification.
    pub const FORGED_CASE: &str = "forged_case";
    /// The worker is quarantined (outvoted too often, a forged case, leases left to expire):
    /// it gets no more work until an admin reinstates it. The message says why.
    pub const WORKER_QUARANTINED: &str = "worker_quarantined";
    /// The request body exceeds the server's limit.
    pub const PAYLOAD_TOO_LARGE: &str = "payload_too_large";
    /// The database is unreachable or another transient failure: retry later.
    pub const UNAVAILABLE: &str = "unavailable";
    /// The request took longer than the server allows (408).
    pub const TIMEOUT: &str = "timeout";
    /// Too many requests from one address (429, with `Retry-After`).
    pub const RATE_LIMITED: &str = "rate_limited";
    /// An unexpected server error (logged on the server).
    pub const INTERNAL: &str = "internal";
    /// A cost estimate that cannot be read: another schema version, a number that is not
    /// finite or negative, a binade listed twice (422).
    pub const ESTIMATE_INVALID: &str = "estimate_invalid";
    /// A cost estimate of another campaign: its function, format or min_bits differ, or it
    /// lacks a binade the campaign has units in (422).
    pub const ESTIMATE_MISMATCH: &str = "estimate_mismatch";
    /// The worker's engine version is not one this coordinator accepts (409): results of
    /// different versions cannot be compared. Install the worker of the coordinator's release.
    pub const ENGINE_VERSION: &str = "engine_version";
    /// Verifying the result cost the coordinator more than the unit's results may (422); it
    /// counts against the worker. An honest engine's results stay far below the budget.
    pub const VERIFICATION_BUDGET: &str = "verification_budget";
}

/// A half-open argument range `[from, to)`, each end a C99 hexadecimal or decimal number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ArgRange {
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = "^\\s*[A-Za-z0-9.+_-]{1,100}\\s*$")
    )]
    pub from: String,
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = "^\\s*[A-Za-z0-9.+_-]{1,100}\\s*$")
    )]
    pub to: String,
}

/// `POST /api/v1/campaigns`: a new campaign. Exactly one of `format` and `precision`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateCampaign {
    /// A label for people; defaults to `"{function}-{format}"`.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 200))]
    pub name: Option<String>,
    /// The function's name, e.g. `exp`.
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 100))]
    pub function: String,
    /// A named format with its exponent range (`binary16`, `bfloat16`, `binary32`,
    /// `binary64`, `binary80`: subnormal results judged on the subnormal grid, overflowing and
    /// underflowing results skipped and listed), or a bare precision (`p24`, `24`: exponent
    /// unbounded).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 100))]
    pub format: Option<String>,
    /// The precision in bits (8..=64).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(minimum = 8, maximum = 64))]
    pub precision: Option<u32>,
    /// Report arguments with at least this many identical bits after the rounding bit (the
    /// engine takes at most 60).
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 60))]
    pub min_bits: u32,
    /// The argument ranges, each half-open; at least one, unless `whole`.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_items = 1024))]
    pub ranges: Vec<ArgRange>,
    /// The whole function: every finite argument of `format` (a named format) where the
    /// function is defined, instead of `ranges` (which must then be empty). Overflow,
    /// underflow, poles, trivial, far and exact regions are skipped runs as for a range, and a
    /// block where every argument is skipped is one unit. Refused where the whole function is
    /// out of reach (sin, cos, tan of binary64 and binary80), naming the range that is not.
    /// Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub whole: Option<bool>,
    /// log2 of the arguments per unit; the engine's default when absent.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(maximum = 62))]
    pub unit_bits: Option<u32>,
    /// How many agreeing results each unit needs from workers not trusted, from different
    /// workers; default 2 (1 with `trust_all_workers`, and only then). A disagreement takes
    /// more replicas and the majority of the results no verified case refutes wins. A trusted
    /// token's worker settles a unit alone.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 16))]
    pub replication: Option<u32>,
    /// Every worker's result settles a unit alone (replication 1): for a farm of machines the
    /// operator controls, never for volunteers. Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust_all_workers: Option<bool>,
    /// Replicas of a unit must also come from different owners (enrollment tokens' owners);
    /// default true when replication is 2 or more.
    #[serde(default)]
    pub distinct_owners: Option<bool>,
    /// Adaptive replication: a worker with `trust_after` agreed results in a row is replicated
    /// only at `audit_rate`; its first outvoted result ends that. Needs replication >= 2;
    /// default false.
    #[serde(default)]
    pub adaptive: Option<bool>,
    /// Probability in (0, 1] that a trusted worker's result is replicated anyway; default 0.1.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(exclusive_minimum = 0.0, maximum = 1.0))]
    pub audit_rate: Option<f64>,
    /// Agreed results in a row after which a worker is trusted; default 20.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 1000000))]
    pub trust_after: Option<u32>,
    /// Higher first; default 0.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(minimum = -1000000, maximum = 1000000))]
    pub priority: Option<i32>,
}

/// A campaign's lifecycle state. `active` campaigns hand out work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum CampaignState {
    Active,
    Paused,
    Cancelled,
    /// Every unit is done (set by the server, never by a request).
    Complete,
}

impl CampaignState {
    pub fn as_str(self) -> &'static str {
        match self {
            CampaignState::Active => "active",
            CampaignState::Paused => "paused",
            CampaignState::Cancelled => "cancelled",
            CampaignState::Complete => "complete",
        }
    }

    pub fn parse(s: &str) -> Option<CampaignState> {
        match s {
            "active" => Some(CampaignState::Active),
            "paused" => Some(CampaignState::Paused),
            "cancelled" => Some(CampaignState::Cancelled),
            "complete" => Some(CampaignState::Complete),
            _ => None,
        }
    }
}

/// A campaign as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Campaign {
    pub id: i64,
    pub name: String,
    pub function: String,
    pub precision: u32,
    /// The named format whose real grid judges results (`binary32`: subnormal results on the
    /// subnormal grid, overflow and underflow skipped and listed); absent for a bare precision,
    /// whose exponent is unbounded.
    #[serde(default)]
    pub format: Option<String>,
    /// How results are judged, for people (the format's precision and exponent range, or
    /// "exponent unbounded").
    #[serde(default)]
    pub judged_as: String,
    pub min_bits: u32,
    pub ranges: Vec<ArgRange>,
    pub unit_bits: u32,
    /// Agreeing results a unit needs from workers not trusted.
    pub replication: u32,
    /// Any one worker's result settles a unit (the operator said so at creation).
    #[serde(default)]
    pub trust_all_workers: bool,
    pub distinct_owners: bool,
    pub adaptive: bool,
    pub audit_rate: f64,
    pub trust_after: u32,
    pub priority: i32,
    pub state: CampaignState,
    pub created_at: DateTime<Utc>,
    /// When the last unit was done (state `complete`); absent before.
    #[serde(default)]
    pub completed_at: Option<DateTime<Utc>>,
    pub units_total: i64,
    /// Decimal string: a whole binary64 campaign has 2^64 arguments.
    pub arguments_total: String,
}

/// Counts of one unit state: units and the arguments they hold (decimal string).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct StateCount {
    pub units: i64,
    pub arguments: String,
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

/// The skipped arguments of a campaign's done units for one reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct SkippedSummary {
    pub reason: String,
    pub rule: String,
    pub runs: i64,
    /// Decimal string, as other argument counts.
    pub arguments: String,
}

/// A recorded hard-to-round case, as verified by the server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct StoredHrCase {
    pub x: String,
    pub bits: u32,
    pub neg_log2_d: f64,
    pub kind: HrKind,
    pub rounded: String,
    pub unit_id: i64,
    pub found_at: DateTime<Utc>,
}

/// A unit the server stopped handing out after too many failures or expiries, or whose
/// replicas disagreed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct QuarantinedUnit {
    pub unit_id: i64,
    pub spec: UnitSpec,
    pub attempts: i32,
}

/// `GET /api/v1/campaigns/{id}/progress`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct CampaignProgress {
    pub campaign_id: i64,
    pub state: CampaignState,
    pub total: StateCount,
    pub done: StateCount,
    pub leased: StateCount,
    pub pending: StateCount,
    pub quarantined: StateCount,
    /// Arguments done over arguments total, in percent.
    pub percent_done: f64,
    /// Arguments finished per second over the last hour.
    pub arguments_per_second_last_hour: f64,
    /// Seconds to finish the pending and leased arguments at last hour's rate; absent when
    /// nothing was finished in the last hour.
    pub eta_seconds: Option<f64>,
    /// Every unit is done.
    pub complete: bool,
    /// When the last unit was done; absent while units remain.
    #[serde(default)]
    pub completed_at: Option<DateTime<Utc>>,
    pub hr_cases: i64,
    /// Arguments of done units that were not judged (overflow, underflow, pole), per reason;
    /// never silent.
    #[serde(default)]
    pub skipped: Vec<SkippedSummary>,
    /// The skipped runs themselves, by argument (at most 100; the export lists them all).
    #[serde(default)]
    pub skipped_runs: Vec<SkippedRun>,
    /// The hardest cases so far, most identical bits first (at most 10).
    pub hardest: Vec<StoredHrCase>,
    /// Quarantined units (at most 100).
    pub quarantined_units: Vec<QuarantinedUnit>,
    /// What replication cost and caught.
    pub replication: ReplicationReport,
    /// Progress by expected work: `percent_done` and `eta_seconds` above are the work's.
    #[serde(default)]
    pub work: WorkProgress,
    /// Why units wait instead of being leased (units waiting for another owner's replica,
    /// held units, a paused campaign); empty when none do.
    #[serde(default)]
    pub waiting: Vec<Waiting>,
}

/// Units that wait instead of being leased, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Waiting {
    /// `replica`: each has a result and waits for the next from another worker or owner (the
    /// campaign's replication); `held`: quarantined (repeated failures, or kept for an
    /// admin); `paused`: the campaign is paused.
    pub reason: String,
    pub units: i64,
    /// The same for people, with what would move them.
    pub message: String,
}

/// `POST /api/v1/campaigns/{id}/estimate` (admin): what the coordinator made of a cost
/// estimate it accepted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct EstimateApplied {
    pub campaign_id: i64,
    /// Binades of the campaign weighed by the estimate (all of them).
    pub binades: u64,
    /// The estimate's mean seconds per argument over the campaign: the seconds of one
    /// weighted argument on the estimate's back end.
    pub seconds_per_work: f64,
    /// The cheapest binade's weight, the dearest's, relative to the mean.
    pub min_weight: f64,
    pub max_weight: f64,
    /// The campaign's projected seconds on the estimate's back end.
    pub estimated_seconds_total: f64,
}

/// A campaign's progress by expected work rather than by units: a unit's work is
/// its arguments times its binade's weight, the binade's cost per argument relative to the
/// campaign's mean (from a posted [`CostEstimate`]), so the campaign's total work equals its
/// arguments. Without an estimate every weight is 1: work is counted in arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct WorkProgress {
    /// `estimate` (weights from a posted estimate) or `arguments` (none: uniform weights).
    pub basis: String,
    /// For people: where the weights come from, or "work: unknown, counted in units" when
    /// there is no estimate.
    pub note: String,
    /// Weighted arguments in all, and per state of their units.
    pub total: f64,
    pub done: f64,
    pub leased: f64,
    pub pending: f64,
    pub quarantined: f64,
    /// Work done over work total, in percent.
    pub percent_done: f64,
    /// Weighted arguments done per second over the last hour (or the campaign's life, when
    /// younger).
    pub per_second_last_hour: f64,
    /// Seconds to finish the pending and leased work at that rate; absent without a rate.
    #[serde(default)]
    pub eta_seconds: Option<f64>,
    /// The estimate's projected seconds on its back end, in all and for the work left.
    #[serde(default)]
    pub estimated_seconds_total: Option<f64>,
    #[serde(default)]
    pub estimated_seconds_left: Option<f64>,
    /// The back end that ran the estimate's sample.
    #[serde(default)]
    pub backend: Option<String>,
}

/// The work a campaign spent on replication, and what it caught.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ReplicationReport {
    /// Results recorded (every replica, void ones included).
    pub results: i64,
    /// Results of quarantined workers, which count for nothing.
    pub void: i64,
    /// Results the majority outvoted.
    pub outvoted: i64,
    /// Results accepted without a replica (trusted workers, unaudited adaptive ones, or any
    /// worker of a campaign that trusts all).
    pub alone: i64,
    /// Done units that rest on one result of a worker whose token is not trusted.
    #[serde(default)]
    pub single_untrusted: i64,
    /// Results that left out an HR-case the server verified in their unit.
    #[serde(default)]
    pub refuted: i64,
    /// Arguments computed over all results divided by the arguments of the done units: 1.0
    /// means no replica was spent; 2.0 means every unit was computed twice.
    pub work_factor: f64,
}

/// `POST /api/v1/enrollment-tokens` (admin): a token with which workers register.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateEnrollmentToken {
    /// How many workers may register with it; 10 when absent.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 1000000))]
    pub uses: Option<u32>,
    /// Lifetime in seconds; 7 days when absent.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 315360000))]
    pub expires_in_seconds: Option<u64>,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 500))]
    pub note: Option<String>,
    /// Who stands behind the workers registered with it (a lab, a volunteer): replicas of a
    /// unit can be required to come from different owners. Default: `token-{id}`.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 200))]
    pub owner: Option<String>,
    /// The machines registered with it are the operator's own (a lab's): their results settle
    /// a unit alone and decide disputes, and they are not held to the owners' share of a
    /// campaign. Default false (volunteers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trusted: Option<bool>,
}

/// The enrollment token, shown once: the server keeps only its hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct EnrollmentToken {
    pub id: i64,
    pub token: String,
    pub uses_left: Option<u32>,
    pub expires_at: Option<DateTime<Utc>>,
}

/// `POST /api/v1/workers/register`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RegisterWorker {
    #[cfg_attr(feature = "openapi", schema(max_length = 200))]
    pub enrollment_token: String,
    /// A label for people, e.g. the host name and GPU.
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 200))]
    pub name: String,
}

/// The worker's own token, shown once: the server keeps only its hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct WorkerRegistered {
    pub worker_id: i64,
    pub token: String,
}

/// `GET /api/v1/workers/me`: who the worker's token says it is; and the answer of
/// `POST /api/v1/workers/identify`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct WorkerIdentity {
    pub worker_id: i64,
}

/// `POST /api/v1/workers/identify`: which worker holds the token whose SHA-256 this is. A
/// worker pointed at another URL asks this before registering again, without sending its
/// token there (a server that is not a replica of its coordinator must not learn it): a replica
/// (same database) knows it, and the worker keeps its identity, leases and spooled results.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct IdentifyWorker {
    /// The SHA-256 of the worker's token, 64 hexadecimal digits.
    pub token_sha256: String,
}

/// `GET /api/v1/workers` (admin): one worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct WorkerInfo {
    pub id: i64,
    pub name: String,
    pub created_at: DateTime<Utc>,
    pub last_seen: Option<DateTime<Utc>>,
    /// Measured arguments per second (moving average over its results).
    pub arguments_per_second: Option<f64>,
    pub units_done: i64,
    /// The owner of the enrollment token it registered with.
    pub owner: String,
    /// Registered with a trusted (lab) token: its results settle units alone.
    #[serde(default)]
    pub trusted: bool,
    pub reputation: WorkerReputation,
    /// Seconds of MPFR verification its posts cost the coordinators.
    #[serde(default)]
    pub verify_seconds: f64,
    /// When it was quarantined; it gets no work while this is set.
    pub quarantined_at: Option<DateTime<Utc>>,
    pub quarantine_reason: Option<String>,
    /// When an admin revoked its token; it cannot authenticate after that.
    #[serde(default)]
    pub revoked_at: Option<DateTime<Utc>>,
}

/// A worker's record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct WorkerReputation {
    /// Results other workers' results agree with.
    pub valid: i64,
    /// Results the majority outvoted.
    pub invalid: i64,
    /// Posts with a case MPFR refuted.
    pub forged: i64,
    pub leases_total: i64,
    /// Leases that expired before the worker returned them.
    pub leases_expired: i64,
    /// Agreed results since the last outvoted one; trusted at a campaign's `trust_after`.
    pub streak: i64,
    /// Units it reported as failed when releasing a lease (every report counts).
    #[serde(default)]
    pub failed_units: i64,
    /// Results that left out an HR-case the server verified in their unit (proven wrong).
    #[serde(default)]
    pub refuted: i64,
    /// Leases it gave back with units it neither computed nor reported as failed.
    #[serde(default)]
    pub leases_idle: i64,
    /// Units it took in leases, and those it gave back untouched (no result, no failure).
    #[serde(default)]
    pub units_leased: i64,
    #[serde(default)]
    pub units_idle: i64,
    /// Posts whose verification ran out of their unit's or lease's budget.
    #[serde(default)]
    pub verify_overruns: i64,
}

/// `POST /api/v1/workers/{id}/quarantine` (admin).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct QuarantineWorker {
    /// Why, for the worker's operator and the log.
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 500))]
    pub reason: String,
}

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

// ---------------------------------------------------------------------------------------------
// Views of a campaign for people: exports, coverage, hardness histogram (dashboard, CLI).

/// One HR-case as `GET /api/v1/campaigns/{id}/hr-cases?format=json` lists it (the `csv` and
/// `wc` formats carry the same cases, in the same order).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ExportedHrCase {
    /// The argument, C99 hexadecimal.
    pub x: String,
    /// Identical bits after the rounding bit.
    pub bits: u32,
    /// -log2 of the relative distance to the breakpoint.
    pub neg_log2_d: f64,
    pub kind: HrKind,
    /// f(x) rounded to nearest, C99 hexadecimal.
    pub rounded: String,
    pub unit_id: i64,
}

/// `GET /api/v1/campaigns/{id}/hr-cases?format=json&shape=object`: the campaign's HR-cases
/// with its skipped runs (overflow, underflow, pole, trivial and exact runs) in one document;
/// `shape=array` (the default) is the bare array of cases older readers take.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct HrCasesDocument {
    /// The shape's version: 1. A reader refuses a version it does not know.
    pub version: u32,
    pub campaign_id: i64,
    pub function: String,
    pub precision: u32,
    /// The named format, absent for a bare precision (exponent unbounded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    /// How results are judged, for people.
    pub judged_as: String,
    /// The campaign's threshold (the cases' filter may ask for more).
    pub min_bits: u32,
    /// The runs of arguments not listed case by case, per unit, by argument (not filtered).
    pub skipped_runs: Vec<SkippedRun>,
    /// The cases, filtered and ordered as asked, as the array shape lists them.
    pub cases: Vec<ExportedHrCase>,
}

/// How far one binade (sign and exponent) of a campaign is covered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct BinadeCoverage {
    pub negative: bool,
    /// Arguments are `±1.f × 2^exponent`.
    pub exponent: i32,
    pub units_total: i64,
    pub units_done: i64,
    pub units_leased: i64,
    pub units_quarantined: i64,
    /// Decimal strings, as elsewhere: a binade of binary64 holds 2^52 arguments.
    pub arguments_total: String,
    pub arguments_done: String,
    /// The binade's cost per argument relative to the campaign's mean (1 without an
    /// estimate).
    #[serde(default = "one")]
    pub weight: f64,
}

fn one() -> f64 {
    1.0
}

/// HR-cases with exactly `bits` identical bits after the rounding bit, per kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct HardnessBin {
    pub bits: u32,
    pub fp: i64,
    pub mid: i64,
}

#[cfg(test)]
mod tests;

/// `POST /api/v1/campaigns/{id}/requeue` (admin): quarantined units back to the pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RequeueUnits {
    /// The units to put back (each must be quarantined); all the campaign's quarantined units
    /// when absent.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_items = 100000))]
    pub unit_ids: Option<Vec<i64>>,
}

/// What a requeue did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Requeued {
    /// Units put back in the pool with no attempts and no failure reports.
    pub requeued: u32,
}

/// `POST /api/v1/campaigns/{id}/known-cases` (admin): known HR-cases (ringers) to judge
/// results by. The lines of a CORE-MATH worst-case file (`.wc`) or C99 hexadecimal arguments,
/// one a line; `#` starts a comment; a line's first field is the argument.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct LoadKnownCases {
    #[cfg_attr(feature = "openapi", schema(max_items = 100000))]
    pub lines: Vec<String>,
}

/// An argument that was not loaded as a known case, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct KnownCaseRefused {
    pub x: String,
    pub why: String,
}

/// What loading known cases did. Only cases MPFR verifies as HR-cases of the campaign (its
/// function, format and `min_bits`) inside one of its units count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct KnownCasesLoaded {
    /// Arguments read from the lines.
    pub submitted: u64,
    /// New known cases stored.
    pub loaded: u64,
    pub already_known: u64,
    /// Not HR-cases of the campaign, or outside its units (at most 100 listed).
    pub refused: Vec<KnownCaseRefused>,
    pub refused_total: u64,
    /// Done units reopened: their results lacked a known case.
    pub units_reopened: u64,
    /// Workers whose results a known case refuted (quarantined).
    pub workers_caught: Vec<i64>,
    /// Known cases the campaign holds now.
    pub known_total: i64,
}

/// `POST /api/v1/campaigns/{id}/cases/remove` (admin): HR-cases to take out of a campaign (a
/// planted case: one MPFR confirms but that no engine reports). They are kept in the record,
/// every later result reporting one is refused as forged, and their units are judged again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RemoveCases {
    /// The arguments, C99 hexadecimal (any spelling of the campaign's numbers).
    #[cfg_attr(feature = "openapi", schema(max_items = 10000))]
    pub xs: Vec<String>,
    /// Why, for the record.
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 500))]
    pub reason: String,
}

/// What removing cases did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct CasesRemoved {
    /// Cases taken out (recorded or known cases).
    pub removed: u64,
    /// Arguments that are no case of the campaign (at most 100 listed).
    pub not_found: Vec<String>,
    /// Units judged again, and those of them now done.
    pub units_rejudged: u64,
    pub units_done: u64,
}

/// An enrollment token as listed (`GET /api/v1/enrollment-tokens`); the token itself is never
/// shown again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct EnrollmentTokenInfo {
    pub id: i64,
    pub note: Option<String>,
    pub owner: Option<String>,
    /// Its workers are the operator's own machines (see [`CreateEnrollmentToken::trusted`]).
    #[serde(default)]
    pub trusted: bool,
    /// Registrations left (`None`: unlimited).
    pub uses_left: Option<u32>,
    pub expires_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    /// When an admin revoked it; it registers no worker after that.
    pub revoked_at: Option<DateTime<Utc>>,
    /// Workers registered with it, and how many of them are quarantined.
    pub workers: i64,
    pub quarantined_workers: i64,
}
