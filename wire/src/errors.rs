//! The error envelope of every HTTP error and its stable codes, which clients branch on.

use serde::{Deserialize, Serialize};

#[cfg(feature = "openapi")]
use utoipa::ToSchema;

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
