//! The coordinator's HTTP API as the worker sees it: typed calls, and errors sorted into
//! "try again later" (the server is unreachable or busy), "waiting will not help" (the URL
//! points at something that is not a coordinator, TLS fails) and "the server said no". Each
//! says what is wrong in words an operator can act on.

use reqwest::StatusCode;
use serde::de::DeserializeOwned;
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::time::Duration;
use tmd_wire::{
    codes, ApiError, Heartbeat, HeartbeatResponse, IdentifyWorker, LeaseRequest, LeaseResponse,
    RegisterWorker, ReleaseLease, ReleaseResponse, ResultAccepted, ResultBatch,
    ResultBatchResponse, UnitResult, WorkerIdentity, WorkerRegistered,
};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Connection refused, DNS failure, timed out, or a 5xx/429: retry with backoff.
    #[error("{message}")]
    Unavailable {
        message: String,
        retry_after: Option<Duration>,
    },
    /// Waiting will not heal it: the URL is not a tmd coordinator, or TLS fails.
    #[error("{0}")]
    Misconfigured(String),
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

/// The title of the coordinator's OpenAPI document: how a URL is recognised as a coordinator.
const COORDINATOR_TITLE: &str = "tmd-server";

/// What went wrong on the way to the server, from reqwest's error and its sources.
fn transport_error(base: &str, e: &reqwest::Error) -> ClientError {
    let mut causes = Vec::new();
    let mut refused = false;
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            refused |= io.kind() == std::io::ErrorKind::ConnectionRefused;
        }
        let text = s.to_string();
        if !causes.iter().any(|c: &String| c.contains(&text)) {
            causes.push(text);
        }
        source = s.source();
    }
    // reqwest's own line only names the URL; its sources say why.
    let detail = causes[usize::from(causes.len() > 1)..].join(": ");
    let lower = detail.to_lowercase();
    let unavailable = |message: String| ClientError::Unavailable {
        message,
        retry_after: None,
    };
    if e.is_timeout() {
        unavailable(format!("{base}: no answer in time ({detail}); the server is overloaded or a firewall drops the packets"))
    } else if refused {
        unavailable(format!("{base}: connection refused: nothing listens there; is tmd-server running, and is --server right?"))
    } else if lower.contains("dns error") || lower.contains("failed to lookup address") {
        unavailable(format!(
            "{base}: cannot resolve the host name (DNS): {detail}; check --server"
        ))
    } else if lower.contains("certificate")
        || lower.contains("tls")
        || lower.contains("corrupt message")
        || lower.contains("handshake")
    {
        ClientError::Misconfigured(format!("{base}: TLS failed: {detail}. Check the URL's scheme (http:// or https://) and the server's certificate"))
    } else {
        unavailable(format!("{base}: {detail}"))
    }
}

/// A client of one coordinator with one bearer token.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
    /// The back end (`cpu`, `cuda`) and device this worker computes on, once its engine is
    /// ready: sent with every lease request, for the coordinator's list of workers.
    device: std::sync::Arc<std::sync::Mutex<Option<(String, String)>>>,
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
            device: Default::default(),
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
        self.send(path, &url, self.http.post(&url).json(body)).await
    }

    /// Sends a request of this API and sorts its answer (see [`ClientError`]).
    async fn send<R: DeserializeOwned>(
        &self,
        path: &str,
        url: &str,
        req: reqwest::RequestBuilder,
    ) -> Result<R, ClientError> {
        // Every request says what this worker understands: a server leases a named format's
        // campaign only to a worker that runs the engine in it.
        let mut req = req.header(tmd_wire::FEATURES_HEADER, tmd_wire::FEATURE_FORMATS);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| transport_error(&self.base, &e))?;
        let status = resp.status();
        let retry_after = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| transport_error(&self.base, &e))?;
        if status.is_success() {
            return match serde_json::from_slice(&bytes) {
                Ok(r) => Ok(r),
                Err(e) => Err(self.identify(path, status, &bytes, e.to_string()).await),
            };
        }
        let err: Option<ApiError> = serde_json::from_slice(&bytes).ok();
        let busy = status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS;
        match err {
            Some(e) if busy => Err(ClientError::Unavailable {
                message: format!("{url}: {status}: {}", e.message),
                retry_after,
            }),
            Some(e) => Err(ClientError::Refused {
                status: status.as_u16(),
                code: e.code,
                message: e.message,
            }),
            // A proxy in front of a coordinator that is down answers so, without tmd's body.
            None if matches!(status.as_u16(), 429 | 502 | 503 | 504) => {
                Err(ClientError::Unavailable {
                    message: format!(
                        "{url}: {status} without a coordinator's error body: a proxy whose coordinator is down?"
                    ),
                    retry_after,
                })
            }
            None => Err(self
                .identify(path, status, &bytes, "not tmd's error body".into())
                .await),
        }
    }

    /// An answer no coordinator gives: asks the server's OpenAPI document whether this is a
    /// coordinator at all. Not one: [`ClientError::Misconfigured`]; one: a protocol error.
    async fn identify(
        &self,
        path: &str,
        status: StatusCode,
        body: &[u8],
        why: String,
    ) -> ClientError {
        let text = String::from_utf8_lossy(&body[..body.len().min(200)]);
        let answer = format!(
            "POST {}/api/v1{path} answered {status} ({why}): {:?}",
            self.base,
            text.trim()
        );
        let doc = format!("{}/api/openapi.json", self.base);
        let title = match self.http.get(&doc).send().await {
            Ok(r) if r.status().is_success() => r
                .json::<serde_json::Value>()
                .await
                .ok()
                .and_then(|v| v["info"]["title"].as_str().map(str::to_string)),
            _ => None,
        };
        if title.as_deref() == Some(COORDINATOR_TITLE) {
            return ClientError::Protocol(answer);
        }
        ClientError::Misconfigured(format!(
            "{} is not a tmd coordinator: {answer}, and {doc} is not tmd-server's API document. \
             Check --server: a coordinator answers 200 on {}/readyz",
            self.base, self.base
        ))
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

    /// Which worker holds `token` at this server, asked with its SHA-256 only
    /// (`POST /workers/identify`): `None` where none does. The token itself is not sent, so a
    /// server that is not a replica of the coordinator that issued it cannot learn it.
    pub async fn identify_token(&self, token: &str) -> Result<Option<WorkerIdentity>, ClientError> {
        let body = IdentifyWorker {
            token_sha256: hex::encode(Sha256::digest(token.as_bytes())),
        };
        match self.post("/workers/identify", &body).await {
            Ok(me) => Ok(Some(me)),
            // Unknown there (a coordinator without this route answers so too).
            Err(e) if e.code() == Some(codes::NOT_FOUND) => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub async fn lease(
        &self,
        seconds: Option<u32>,
        units_in_flight: u32,
    ) -> Result<LeaseResponse, ClientError> {
        let units_in_flight = Some(units_in_flight.clamp(1, 4096));
        let device = self
            .device
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let (backend, device) = device.unzip();
        self.post(
            "/leases",
            &LeaseRequest {
                seconds,
                units_in_flight,
                engine: Some(tmd_kernels::ENGINE_VERSION),
                backend,
                device,
            },
        )
        .await
    }

    /// Names the back end and the device this worker computes on, for every later lease
    /// request: the device on one line within the 200 bytes the coordinator takes (it refuses
    /// the whole request otherwise); nothing where no name is left.
    pub fn set_device(&self, backend: &str, device: &str) {
        let device = super::engine::one_line_within(device, 200);
        let named = (!device.trim().is_empty()).then(|| (backend.to_string(), device));
        *self.device.lock().unwrap_or_else(|e| e.into_inner()) = named;
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

    /// Posts finished units of this worker's leases in one request; the answer has an outcome
    /// per unit, in order.
    pub async fn post_results(
        &self,
        batch: &ResultBatch,
    ) -> Result<ResultBatchResponse, ClientError> {
        self.post("/results", batch).await
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
