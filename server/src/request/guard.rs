//! The gate every request passes before its handler: a request budget per client address, an
//! up-front refusal of bodies declared larger than the limit, and a deadline on the whole
//! request (a body sent a byte a minute cannot hold a task for ever). Also remembers worker
//! tokens recently found unknown, so guessing tokens does not cost a database query each.

use crate::error::Error;
use crate::AppState;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A token bucket per client address.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit {
    /// Requests per second allowed on average.
    pub per_second: f64,
    /// Requests allowed at once after a quiet period.
    pub burst: f64,
    /// Whether loopback clients are limited too (off by default: behind a reverse proxy on the
    /// same machine every client is loopback, and the proxy is where to limit them).
    pub loopback: bool,
}

/// Past this many entries a table starts over, so churn (many addresses, many guessed tokens)
/// cannot grow it without bound.
const MAX_ENTRIES: usize = 100_000;
/// How long an unknown worker token is refused from memory.
const UNKNOWN_TOKEN_SECONDS: u64 = 60;

/// Per-address budgets and recently refused tokens.
pub struct Guard {
    limit: Option<RateLimit>,
    buckets: Mutex<HashMap<IpAddr, (f64, Instant)>>,
    unknown: Mutex<HashMap<[u8; 32], Instant>>,
}

impl Guard {
    pub fn new(limit: Option<RateLimit>) -> Guard {
        Guard {
            limit,
            buckets: Mutex::default(),
            unknown: Mutex::default(),
        }
    }

    /// Takes one request from `ip`'s budget; `false` when it is spent.
    pub fn admit(&self, ip: IpAddr) -> bool {
        let Some(limit) = self.limit else {
            return true;
        };
        if ip.is_loopback() && !limit.loopback {
            return true;
        }
        let mut map = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= MAX_ENTRIES {
            map.clear();
        }
        let now = Instant::now();
        let (tokens, at) = map.entry(ip).or_insert((limit.burst, now));
        *tokens =
            (*tokens + now.duration_since(*at).as_secs_f64() * limit.per_second).min(limit.burst);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Whether this worker token hash was found unknown within the last minute.
    pub fn known_unknown(&self, hash: &[u8; 32]) -> bool {
        let map = self.unknown.lock().unwrap_or_else(|e| e.into_inner());
        map.get(hash)
            .is_some_and(|at| at.elapsed() < Duration::from_secs(UNKNOWN_TOKEN_SECONDS))
    }

    /// Remembers a worker token hash the database does not know (or knows as revoked).
    pub fn note_unknown(&self, hash: [u8; 32]) {
        let mut map = self.unknown.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= MAX_ENTRIES {
            map.clear();
        }
        map.insert(hash, Instant::now());
    }
}

/// The middleware: budget, declared size, deadline.
pub async fn gate(State(s): State<AppState>, req: Request, next: Next) -> Response {
    if let Some(ConnectInfo(peer)) = req.extensions().get::<ConnectInfo<SocketAddr>>() {
        if !s.guard.admit(peer.ip()) {
            return Error::RateLimited("too many requests from this address; slow down".into())
                .into_response();
        }
    }
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > s.config.max_body_bytes as u64) {
        // Refused before a byte of it is read; the connection is not reused.
        let mut r = Error::PayloadTooLarge(format!(
            "the declared body exceeds the server's limit of {} bytes",
            s.config.max_body_bytes
        ))
        .into_response();
        r.headers_mut().insert(
            header::CONNECTION,
            header::HeaderValue::from_static("close"),
        );
        return r;
    }
    match tokio::time::timeout(s.config.request_timeout, next.run(req)).await {
        Ok(r) => r,
        Err(_) => {
            let mut r = Error::Timeout(format!(
                "the request took longer than {} s (a body sent too slowly?)",
                s.config.request_timeout.as_secs()
            ))
            .into_response();
            r.headers_mut().insert(
                header::CONNECTION,
                header::HeaderValue::from_static("close"),
            );
            r
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_allow_the_burst_then_the_rate() {
        let g = Guard::new(Some(RateLimit {
            per_second: 1.0,
            burst: 3.0,
            loopback: false,
        }));
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        assert!((0..3).all(|_| g.admit(ip)));
        assert!(!g.admit(ip));
        assert!(g.admit("192.0.2.2".parse().unwrap()), "another address");
        assert!(g.admit("127.0.0.1".parse().unwrap()), "loopback is exempt");
        assert!(Guard::new(None).admit(ip));
    }

    #[test]
    fn unknown_tokens_are_remembered() {
        let g = Guard::new(None);
        assert!(!g.known_unknown(&[1; 32]));
        g.note_unknown([1; 32]);
        assert!(g.known_unknown(&[1; 32]));
    }
}
