//! Tokens and the extractors that check them: the admin token (from the command line or
//! environment) and per-worker tokens (stored as SHA-256 hashes, never in clear).

use crate::error::Error;
use crate::store;
use crate::AppState;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

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
    // The scheme is case-insensitive (RFC 9110, section 11.1): `bearer` is `Bearer`.
    value
        .split_once(' ')
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, t)| t.trim())
        .filter(|t| !t.is_empty() && t.len() <= 256)
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

/// The request carries the admin token or the metrics token (`--metrics-token`).
pub struct MetricsReader;

impl FromRequestParts<AppState> for MetricsReader {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Error> {
        let token = bearer(parts)?;
        let h = hash_token(token);
        let allowed = [
            state.config.admin_token_hash,
            state.config.metrics_token_hash,
        ];
        if allowed.iter().flatten().any(|a| same_hash(&h, a)) {
            return Ok(MetricsReader);
        }
        Err(Error::Unauthorized(
            "/metrics needs the admin token or the metrics token".into(),
        ))
    }
}

/// The request carries a registered worker's token; marks the worker seen.
pub struct Worker {
    pub id: i64,
    /// Measured arguments per second, if any result came in yet.
    pub speed: Option<f64>,
    pub token_hash: [u8; 32],
}

/// How long a worker's identity is taken from memory before the database is asked again
/// (which also refreshes its `last_seen`).
const CACHE_SECONDS: u64 = 10;
/// Past this many entries the cache starts over, so unbounded token churn cannot grow it.
const CACHE_MAX: usize = 100_000;

/// Known worker tokens (by hash), so most requests skip the authentication query. Tokens are
/// never reassigned; a revocation clears the cache, so an entry cannot go wrong, only stale in
/// speed, which the results this server records keep current.
#[derive(Default)]
pub struct WorkerCache {
    map: Mutex<HashMap<[u8; 32], Cached>>,
}

struct Cached {
    id: i64,
    speed: Option<f64>,
    at: Instant,
}

impl WorkerCache {
    fn get(&self, hash: &[u8; 32]) -> Option<(i64, Option<f64>)> {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.get(hash)
            .filter(|c| c.at.elapsed() < Duration::from_secs(CACHE_SECONDS))
            .map(|c| (c.id, c.speed))
    }

    fn put(&self, hash: [u8; 32], id: i64, speed: Option<f64>) {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= CACHE_MAX {
            map.clear();
        }
        map.insert(
            hash,
            Cached {
                id,
                speed,
                at: Instant::now(),
            },
        );
    }

    /// Forgets every entry (a worker's token was revoked).
    pub fn clear(&self) {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// Records a worker's new speed after a result.
    pub fn set_speed(&self, hash: &[u8; 32], speed: Option<f64>) {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = map.get_mut(hash) {
            entry.speed = speed;
        }
    }
}

impl FromRequestParts<AppState> for Worker {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Error> {
        let token_hash = hash_token(bearer(parts)?);
        match worker_by_hash(state, &token_hash).await? {
            Some((id, speed)) => Ok(Worker {
                id,
                speed,
                token_hash,
            }),
            None => Err(Error::Unauthorized("unknown worker token".into())),
        }
    }
}

/// The worker (id, measured speed) whose token has the SHA-256 `hash`, from the cache or the
/// database; `None` for none. A hash found unknown a moment ago is answered from memory:
/// guessing costs no query.
pub async fn worker_by_hash(
    state: &AppState,
    hash: &[u8; 32],
) -> Result<Option<(i64, Option<f64>)>, Error> {
    if let Some(w) = state.workers.get(hash) {
        return Ok(Some(w));
    }
    if state.guard.known_unknown(hash) {
        return Ok(None);
    }
    let found = store::authenticate_worker(&state.relaxed_pool, hash).await?;
    match found {
        Some((id, speed)) => state.workers.put(*hash, id, speed),
        None => state.guard.note_unknown(*hash),
    }
    Ok(found)
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
