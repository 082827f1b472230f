//! Workers: enrollment tokens, registration, identity, and what the admin sees and does of them.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

#[cfg(feature = "openapi")]
use utoipa::ToSchema;

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
    /// What it computes on, as its latest lease request said (`cpu`, `cuda`); absent for a
    /// worker that does not say.
    #[serde(default)]
    pub backend: Option<String>,
    /// Its device, as it names it (`NVIDIA H100 80GB HBM3`, `AMD EPYC 9654 (96 threads)`).
    #[serde(default)]
    pub device: Option<String>,
    /// From its last contact: see [`WorkerState`].
    #[serde(default)]
    pub state: WorkerState,
}

/// Whether a worker is at work, from its last contact with the coordinators. A working worker
/// heartbeats every third of the lease's lifetime and an idle one asks for work every few
/// seconds, so a silence longer than a heartbeat's interval (plus a minute of slack) is
/// `stale`, and one longer than two lease lifetimes (its leases have expired) `offline`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum WorkerState {
    /// Heard from within a heartbeat's interval.
    Active,
    /// Silent longer than that: stopped, or cut off; its leases may still be running out.
    Stale,
    /// Silent for two lease lifetimes, or never heard from since it registered.
    #[default]
    Offline,
}

impl WorkerState {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerState::Active => "active",
            WorkerState::Stale => "stale",
            WorkerState::Offline => "offline",
        }
    }
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
