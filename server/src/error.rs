//! The server's error type and its mapping to HTTP: one JSON envelope `{"code","message"}`.
//!
//! Policy: domain and storage code return [`Error`] variants that say what a client can do
//! about it (each has a stable code from [`tmd_wire::codes`]). Unexpected failures
//! (database, bugs) are `Internal`/`Database`; they are logged once, here at the HTTP edge,
//! and the client gets a generic message, never the database's text.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use tmd_wire::{codes, ApiError};

/// Everything a request can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    LeaseExpired(String),
    #[error("{0}")]
    StaleToken(String),
    #[error("{0}")]
    UnitDone(String),
    #[error("{0}")]
    LeaseMismatch(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    ForgedCase(String),
    /// Verifying the result took more than the unit's (or the worker's) verification budget.
    #[error("{0}")]
    VerifyBudget(String),
    /// A cost estimate that cannot be read (version, numbers).
    #[error("{0}")]
    EstimateInvalid(String),
    /// A cost estimate of another campaign (function, format, min_bits, binades).
    #[error("{0}")]
    EstimateMismatch(String),
    #[error("{0}")]
    PayloadTooLarge(String),
    /// The worker's engine version is not one this coordinator accepts.
    #[error("{0}")]
    EngineVersion(String),
    /// The worker is quarantined: its record fell below the bar or it reported a forged case.
    #[error("{0}")]
    WorkerQuarantined(String),
    /// The server is busy (verification queue full, rate limit): retry after a while.
    #[error("{0}")]
    Unavailable(String),
    /// The request took longer than the server allows.
    #[error("{0}")]
    Timeout(String),
    /// Too many requests from one address.
    #[error("{0}")]
    RateLimited(String),
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    #[error("internal: {0}")]
    Internal(String),
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The stable code clients branch on.
    pub fn code(&self) -> &'static str {
        match self {
            Error::NotFound(_) => codes::NOT_FOUND,
            Error::BadRequest(_) => codes::BAD_REQUEST,
            Error::Unauthorized(_) => codes::UNAUTHORIZED,
            Error::Forbidden(_) => codes::FORBIDDEN,
            Error::LeaseExpired(_) => codes::LEASE_EXPIRED,
            Error::StaleToken(_) => codes::STALE_TOKEN,
            Error::UnitDone(_) => codes::UNIT_DONE,
            Error::LeaseMismatch(_) => codes::LEASE_MISMATCH,
            Error::Conflict(_) => codes::CONFLICT,
            Error::ForgedCase(_) => codes::FORGED_CASE,
            Error::VerifyBudget(_) => codes::VERIFICATION_BUDGET,
            Error::EstimateInvalid(_) => codes::ESTIMATE_INVALID,
            Error::EstimateMismatch(_) => codes::ESTIMATE_MISMATCH,
            Error::PayloadTooLarge(_) => codes::PAYLOAD_TOO_LARGE,
            Error::EngineVersion(_) => codes::ENGINE_VERSION,
            Error::WorkerQuarantined(_) => codes::WORKER_QUARANTINED,
            Error::Unavailable(_) => codes::UNAVAILABLE,
            Error::Timeout(_) => codes::TIMEOUT,
            Error::RateLimited(_) => codes::RATE_LIMITED,
            Error::Database(e) if is_unavailable(e) => codes::UNAVAILABLE,
            Error::Database(_) | Error::Internal(_) => codes::INTERNAL,
        }
    }

    /// The HTTP status for this error.
    pub fn status(&self) -> StatusCode {
        match self {
            Error::NotFound(_) => StatusCode::NOT_FOUND,
            Error::BadRequest(_) => StatusCode::BAD_REQUEST,
            Error::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Error::Forbidden(_) => StatusCode::FORBIDDEN,
            Error::LeaseExpired(_)
            | Error::StaleToken(_)
            | Error::UnitDone(_)
            | Error::LeaseMismatch(_)
            | Error::Conflict(_)
            | Error::EngineVersion(_) => StatusCode::CONFLICT,
            Error::ForgedCase(_)
            | Error::VerifyBudget(_)
            | Error::EstimateInvalid(_)
            | Error::EstimateMismatch(_) => StatusCode::UNPROCESSABLE_ENTITY,
            Error::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Error::WorkerQuarantined(_) => StatusCode::FORBIDDEN,
            Error::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Error::Timeout(_) => StatusCode::REQUEST_TIMEOUT,
            Error::RateLimited(_) => StatusCode::TOO_MANY_REQUESTS,
            Error::Database(e) if is_unavailable(e) => StatusCode::SERVICE_UNAVAILABLE,
            Error::Database(_) | Error::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The envelope sent to the client.
    pub fn envelope(&self) -> ApiError {
        let message = match self {
            Error::Database(e) if is_unavailable(e) => {
                "the database is unavailable; retry later".to_string()
            }
            Error::Database(_) | Error::Internal(_) => {
                "internal error (logged on the server)".to_string()
            }
            other => other.to_string(),
        };
        ApiError {
            code: self.code().to_string(),
            message,
        }
    }
}

fn is_unavailable(e: &sqlx::Error) -> bool {
    matches!(
        e,
        sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Io(_)
            | sqlx::Error::WorkerCrashed
    ) || is_transient(e)
        || matches!(e, sqlx::Error::Database(d) if d.code().is_some_and(|c| is_unavailable_state(&c)))
}

/// SQLSTATEs that say the server is going away or not there yet, not that the request is
/// wrong: a restart of PostgreSQL answers every pooled connection with 57P01 (terminating
/// connection due to administrator command), a crash with 57P02, a server still starting
/// with 57P03; class 08 is a broken connection, 53300 too many connections. Each heals by
/// waiting, so each is a 503 with Retry-After and part of the outage's one log line.
fn is_unavailable_state(code: &str) -> bool {
    matches!(code, "57P01" | "57P02" | "57P03" | "53300") || code.starts_with("08")
}

/// A deadlock or serialization failure: the transaction was rolled back and may simply be run
/// again.
pub fn is_transient(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d)
        if matches!(d.code().as_deref(), Some("40P01") | Some("40001")))
}

/// Marks a response refused because the database is unreachable, with the error: the
/// request observer reports it to the server's [`crate::outage::Outage`], which logs once per
/// outage instead of once per request.
#[derive(Clone, Debug)]
pub struct DatabaseUnavailable(pub String);

impl Error {
    /// The database is unreachable or overloaded: expected during its restarts, and healed by
    /// waiting.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Error::Database(e) if is_unavailable(e))
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let status = self.status();
        // A database outage is logged once by the outage tracker; a busy verifier is
        // back-pressure, not a fault.
        if status.is_server_error()
            && !self.is_unavailable()
            && !matches!(self, Error::Unavailable(_))
        {
            tracing::error!(error = %self, code = self.code(), "request failed");
        }
        let mut response = (status, axum::Json(self.envelope())).into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE || status == StatusCode::TOO_MANY_REQUESTS {
            // Workers back off by this much before retrying.
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static("5"),
            );
        }
        if self.is_unavailable() {
            // Seen by the outage tracker: one log line per outage, not per request.
            response
                .extensions_mut()
                .insert(DatabaseUnavailable(self.to_string()));
        }
        response
    }
}

impl From<JsonRejection> for Error {
    fn from(r: JsonRejection) -> Self {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            Error::PayloadTooLarge("the request body exceeds the server's limit".into())
        } else {
            Error::BadRequest(r.body_text())
        }
    }
}

impl From<PathRejection> for Error {
    fn from(r: PathRejection) -> Self {
        Error::BadRequest(r.body_text())
    }
}

impl From<QueryRejection> for Error {
    fn from(r: QueryRejection) -> Self {
        Error::BadRequest(r.body_text())
    }
}
