//! Tokens and the extractors that check them: the admin token (from the command line or
//! environment) and per-worker tokens (stored as SHA-256 hashes, never in clear).

use crate::error::Error;
use crate::store;
use crate::AppState;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use sha2::{Digest, Sha256};

/// Prefix of worker tokens, so a leaked token is recognisable in logs and scanners.
pub const WORKER_PREFIX: &str = "tmdw_";
/// Prefix of enrollment tokens.
pub const ENROLLMENT_PREFIX: &str = "tmde_";

/// A fresh random token: the prefix and 32 random bytes in hex.
pub fn new_token(prefix: &str) -> String {
    let bytes: [u8; 32] = rand::random();
    format!("{prefix}{}", hex::encode(bytes))
}

/// The SHA-256 of a token, as stored. Tokens are 256-bit random, so an unsalted fast hash is
/// enough: there is nothing to brute-force.
pub fn hash_token(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Compares two hashes in time independent of where they differ.
pub fn same_hash(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn bearer(parts: &Parts) -> Result<&str, Error> {
    let value = parts
        .headers
        .get(axum::http::header::AUTHORIZATION)
        .ok_or_else(|| Error::Unauthorized("missing Authorization: Bearer <token>".into()))?;
    let value = value
        .to_str()
        .map_err(|_| Error::Unauthorized("malformed Authorization header".into()))?;
    value
        .strip_prefix("Bearer ")
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| Error::Unauthorized("expected Authorization: Bearer <token>".into()))
}

/// The request carries the admin token.
pub struct Admin;

impl FromRequestParts<AppState> for Admin {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Error> {
        let token = bearer(parts)?;
        let Some(admin) = state.config.admin_token_hash else {
            return Err(Error::Forbidden(
                "this server has no admin token configured (TMD_ADMIN_TOKEN)".into(),
            ));
        };
        if same_hash(&hash_token(token), &admin) {
            return Ok(Admin);
        }
        if token.starts_with(WORKER_PREFIX) {
            return Err(Error::Forbidden(
                "a worker token cannot do admin operations".into(),
            ));
        }
        Err(Error::Unauthorized("wrong admin token".into()))
    }
}

/// The request carries a registered worker's token; marks the worker seen.
pub struct Worker {
    pub id: i64,
    /// Measured arguments per second, if any result came in yet.
    pub speed: Option<f64>,
}

impl FromRequestParts<AppState> for Worker {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Error> {
        let token = bearer(parts)?;
        match store::authenticate_worker(&state.relaxed_pool, &hash_token(token)).await? {
            Some((id, speed)) => Ok(Worker { id, speed }),
            None => Err(Error::Unauthorized("unknown worker token".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_prefixed_and_hash_stably() {
        let a = new_token(WORKER_PREFIX);
        let b = new_token(WORKER_PREFIX);
        assert_ne!(a, b);
        assert!(a.starts_with("tmdw_") && a.len() == 5 + 64);
        assert!(same_hash(&hash_token(&a), &hash_token(&a)));
        assert!(!same_hash(&hash_token(&a), &hash_token(&b)));
    }
}
