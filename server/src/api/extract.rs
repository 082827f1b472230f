//! What every handler shares besides its own logic: the JSON body extractor (objects only,
//! every rejection an [`Error`]) and the error answers added to each operation of the OpenAPI
//! document.

use crate::error::{Error, Result};
use axum::extract::{FromRequest, Request};
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

/// Adds to every operation the error answers the server's layers give whatever the handler:
/// 400 (a body or path that does not parse or validate), 401 and 403 (a route with a token),
/// 408 (too slow), 413 (a body over the limit), 429 (over the address's rate), 503 (database or
/// verification busy). Clients
/// generated from the document must know them all.
pub fn document_errors(api: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
    let error = |what: &str| {
        ResponseBuilder::new()
            .description(what)
            .content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name("ApiError")))
                    .build(),
            )
            .build()
    };
    for item in api.paths.paths.values_mut() {
        for op in [
            &mut item.get,
            &mut item.post,
            &mut item.put,
            &mut item.delete,
            &mut item.patch,
        ]
        .into_iter()
        .flatten()
        {
            let secured = op.security.as_ref().is_some_and(|s| !s.is_empty());
            let has_input =
                op.request_body.is_some() || op.parameters.as_ref().is_some_and(|p| !p.is_empty());
            let mut add = |code: &str, what: &str| {
                op.responses
                    .responses
                    .entry(code.to_string())
                    .or_insert_with(|| error(what).into());
            };
            if has_input {
                add("400", "bad_request: the input does not parse or validate");
            }
            if secured {
                add("401", "unauthorized: missing, malformed or unknown token");
                add("403", "forbidden: the token may not do this");
            }
            add("408", "timeout: the request took too long");
            add(
                "429",
                "rate_limited: too many requests from this address; see Retry-After",
            );
            if op.request_body.is_some() {
                add(
                    "413",
                    "payload_too_large: the body exceeds the server's limit",
                );
            }
            add("503", "unavailable: retry after Retry-After seconds");
        }
    }
}
