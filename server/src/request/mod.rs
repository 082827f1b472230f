//! What stands between a request and its handler, shared by the API and the views: the
//! extractors (JSON body, path, query), the tokens and their checks (admin, worker, metrics
//! reader), and the gate (rate per address, body limit, deadline).

pub mod auth;
pub mod extract;
pub mod guard;

pub use extract::{ApiJson, ApiPath, ApiQuery};
