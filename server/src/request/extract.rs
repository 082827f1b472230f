//! The extractors every handler (API and views) reads its request through: a JSON object
//! body, a path and a query string, each turning its rejections into [`Error`]s so that every
//! refusal is the JSON envelope with a stable code.

use crate::error::{Error, Result};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::{header, StatusCode};

/// A JSON object body whose rejections (not JSON, not an object, wrong fields, too large)
/// become [`Error`]s. Only objects: serde would otherwise read `[1]` as `{"seconds": 1}`.
pub struct ApiJson<T>(pub T);

impl<T: serde::de::DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = Error;

    async fn from_request(req: Request, state: &S) -> Result<Self> {
        let json = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|ct| ct.split(';').next())
            .map(|mime| {
                let mime = mime.trim().to_ascii_lowercase();
                mime == "application/json"
                    || (mime.starts_with("application/") && mime.ends_with("+json"))
            })
            .unwrap_or(false);
        if !json {
            return Err(Error::BadRequest(
                "expected a JSON body with Content-Type: application/json".into(),
            ));
        }
        let bytes = axum::body::Bytes::from_request(req, state)
            .await
            .map_err(|r| {
                if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    Error::PayloadTooLarge("the request body exceeds the server's limit".into())
                } else {
                    Error::BadRequest(r.body_text())
                }
            })?;
        if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(Error::BadRequest("the body must be a JSON object".into()));
        }
        serde_json::from_slice(&bytes)
            .map(ApiJson)
            .map_err(|e| Error::BadRequest(format!("invalid JSON body: {e}")))
    }
}

/// A path parameter whose rejections become [`Error`]s.
#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(Error))]
pub struct ApiPath<T>(pub T);

/// A query string whose rejections become [`Error`]s.
#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(Error))]
pub struct ApiQuery<T>(pub T);
