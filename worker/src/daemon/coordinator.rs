//! What the daemon asks of the coordinator, as a trait: the HTTP client in a real run, an
//! in-memory coordinator in the pipeline's tests.

use super::client::{Client, ClientError};
use std::future::Future;
use tmd_wire::{
    HeartbeatResponse, LeaseResponse, ReleaseLease, ReleaseResponse, ResultAccepted, ResultBatch,
    ResultBatchResponse, UnitResult,
};

pub trait Coordinator: Clone + Send + Sync + 'static {
    /// Asks for about `seconds` of work; `units_in_flight` is what the worker computes at once
    /// (what an unmeasured worker's first lease holds).
    fn lease(
        &self,
        seconds: Option<u32>,
        units_in_flight: u32,
    ) -> impl Future<Output = Result<LeaseResponse, ClientError>> + Send;

    fn heartbeat(
        &self,
        lease_id: i64,
        fencing_token: i64,
    ) -> impl Future<Output = Result<HeartbeatResponse, ClientError>> + Send;

    /// Names the back end (`cpu`, `cuda`) and device the worker computes on, once its engine
    /// is ready, for the lease requests after it (the coordinator lists them per worker).
    fn set_device(&self, _backend: &str, _device: &str) {}

    fn post_result(
        &self,
        lease_id: i64,
        unit_id: i64,
        result: &UnitResult,
    ) -> impl Future<Output = Result<ResultAccepted, ClientError>> + Send;

    fn post_results(
        &self,
        batch: &ResultBatch,
    ) -> impl Future<Output = Result<ResultBatchResponse, ClientError>> + Send;

    fn release(
        &self,
        lease_id: i64,
        body: &ReleaseLease,
    ) -> impl Future<Output = Result<ReleaseResponse, ClientError>> + Send;
}

impl Coordinator for Client {
    fn lease(
        &self,
        seconds: Option<u32>,
        units_in_flight: u32,
    ) -> impl Future<Output = Result<LeaseResponse, ClientError>> + Send {
        Client::lease(self, seconds, units_in_flight)
    }

    fn set_device(&self, backend: &str, device: &str) {
        Client::set_device(self, backend, device)
    }

    fn heartbeat(
        &self,
        lease_id: i64,
        fencing_token: i64,
    ) -> impl Future<Output = Result<HeartbeatResponse, ClientError>> + Send {
        Client::heartbeat(self, lease_id, fencing_token)
    }

    fn post_result(
        &self,
        lease_id: i64,
        unit_id: i64,
        result: &UnitResult,
    ) -> impl Future<Output = Result<ResultAccepted, ClientError>> + Send {
        Client::post_result(self, lease_id, unit_id, result)
    }

    fn post_results(
        &self,
        batch: &ResultBatch,
    ) -> impl Future<Output = Result<ResultBatchResponse, ClientError>> + Send {
        Client::post_results(self, batch)
    }

    fn release(
        &self,
        lease_id: i64,
        body: &ReleaseLease,
    ) -> impl Future<Output = Result<ReleaseResponse, ClientError>> + Send {
        Client::release(self, lease_id, body)
    }
}
