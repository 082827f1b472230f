//! Types exchanged between `tmd-server` and `tmd-worker` over HTTP.
//!
//! This crate has no I/O and no server-side dependencies, so the worker can use it without
//! pulling in axum or sqlx.

use serde::{Deserialize, Serialize};

/// The body of every HTTP error: a stable machine-readable `code` and a message for a person.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiError {
    pub code: String,
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_envelope_has_code_and_message() {
        let e = ApiError {
            code: "lease_expired".into(),
            message: "the lease expired; ask for new work".into(),
        };
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(json["code"], "lease_expired");
        let back: ApiError = serde_json::from_value(json).unwrap();
        assert_eq!(back, e);
    }
}
