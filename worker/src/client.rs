//! The coordinator's HTTP API as the worker sees it: typed calls, and errors sorted into
//! "try again later" (the server is unreachable or busy) and "the server said no".

use reqwest::StatusCode;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::time::Duration;
use tmd_wire::{
    ApiError, Heartbeat, HeartbeatResponse, LeaseRequest, LeaseResponse, RegisterWorker,
    ReleaseLease, ReleaseResponse, ResultAccepted, UnitResult, WorkerRegistered,
};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Connection refused, timed out, or a 5xx/429: retry with backoff.
    #[error("server unreachable or busy: {message}")]
    Unavailable {
        message: String,
        retry_after: Option<Duration>,
    },
    /// The server refused the request with a stable code (see `tmd_wire::codes`).
    #[error("server refused ({status}): {code}: {message}")]
    Refused {
        status: u16,
        code: String,
        message: String,
    },
    #[error("unexpected answer from the server: {0}")]
    Protocol(String),
}

impl ClientError {
    pub fn code(&self) -> Option<&str> {
        match self {
            ClientError::Refused { code, .. } => Some(code),
            _ => None,
        }
    }
}

/// An error with its causes (reqwest's own message hides them: an untrusted certificate would
/// read only "error sending request").
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// A client of one coordinator with one bearer token.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

impl Client {
    /// A client of `server`; `ca_cert` is a PEM file of an extra CA to trust (a lab's own).
    pub fn new(
        server: &str,
        token: Option<String>,
        ca_cert: Option<&std::path::Path>,
    ) -> Result<Client, ClientError> {
        let mut http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(120))
            .user_agent(concat!("tmd-worker/", env!("CARGO_PKG_VERSION")));
        if let Some(path) = ca_cert {
            let pem = std::fs::read(path).map_err(|e| {
                ClientError::Protocol(format!(
                    "cannot read the CA certificate {}: {e}",
                    path.display()
                ))
            })?;
            let cert = reqwest::Certificate::from_pem(&pem).map_err(|e| {
                ClientError::Protocol(format!("bad CA certificate {}: {e}", path.display()))
            })?;
            http = http.add_root_certificate(cert);
        }
        let http = http
            .build()
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        Ok(Client {
            http,
            base: server.trim_end_matches('/').to_string(),
            token,
        })
    }

    pub fn with_token(&self, token: String) -> Client {
        Client {
            token: Some(token),
            ..self.clone()
        }
    }

    async fn post<B: Serialize, R: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<R, ClientError> {
        let url = format!("{}/api/v1{path}", self.base);
        let mut req = self.http.post(&url).json(body);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.map_err(|e| ClientError::Unavailable {
            message: format!("{url}: {}", with_causes(&e)),
            retry_after: None,
        })?;
        let status = resp.status();
        let retry_after = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let bytes = resp.bytes().await.map_err(|e| ClientError::Unavailable {
            message: format!("{url}: {e}"),
            retry_after,
        })?;
        if status.is_success() {
            return serde_json::from_slice(&bytes)
                .map_err(|e| ClientError::Protocol(format!("{url}: {e}")));
        }
        let err: Option<ApiError> = serde_json::from_slice(&bytes).ok();
        if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
            return Err(ClientError::Unavailable {
                message: format!(
                    "{url}: {status}{}",
                    err.map(|e| format!(": {}", e.message)).unwrap_or_default()
                ),
                retry_after,
            });
        }
        let (code, message) = err
            .map(|e| (e.code, e.message))
            .unwrap_or_else(|| ("http".into(), String::from_utf8_lossy(&bytes).into_owned()));
        Err(ClientError::Refused {
            status: status.as_u16(),
            code,
            message,
        })
    }

    pub async fn register(
        &self,
        enrollment_token: &str,
        name: &str,
    ) -> Result<WorkerRegistered, ClientError> {
        self.post(
            "/workers/register",
            &RegisterWorker {
                enrollment_token: enrollment_token.to_string(),
                name: name.to_string(),
            },
        )
        .await
    }

    pub async fn lease(&self, seconds: Option<u32>) -> Result<LeaseResponse, ClientError> {
        self.post("/leases", &LeaseRequest { seconds }).await
    }

    pub async fn heartbeat(
        &self,
        lease_id: i64,
        fencing_token: i64,
    ) -> Result<HeartbeatResponse, ClientError> {
        self.post(
            &format!("/leases/{lease_id}/heartbeat"),
            &Heartbeat { fencing_token },
        )
        .await
    }

    pub async fn post_result(
        &self,
        lease_id: i64,
        unit_id: i64,
        result: &UnitResult,
    ) -> Result<ResultAccepted, ClientError> {
        self.post(
            &format!("/leases/{lease_id}/units/{unit_id}/result"),
            result,
        )
        .await
    }

    pub async fn release(
        &self,
        lease_id: i64,
        body: &ReleaseLease,
    ) -> Result<ReleaseResponse, ClientError> {
        self.post(&format!("/leases/{lease_id}/release"), body)
            .await
    }
}
