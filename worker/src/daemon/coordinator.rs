//! What the daemon asks of the coordinator, as a trait: the HTTP client in a real run, an
//! in-memory coordinator in the pipeline's tests.

use crate::client::{Client, ClientError};
use std::future::Future;
use tmd_wire::{
    HeartbeatResponse, LeaseResponse, ReleaseLease, ReleaseResponse, ResultAccepted, ResultBatch,
    ResultBatchResponse, UnitResult,
};

pub trait Coordinator: Clone + Send + Sync + 'static {
    fn lease(
        &self,
        seconds: Option<u32>,
    ) -> impl Future<Output = Result<LeaseResponse, ClientError>> + Send;

    fn heartbeat(
        &self,
        lease_id: i64,
        fencing_token: i64,
    ) -> impl Future<Output = Result<HeartbeatResponse, ClientError>> + Send;

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
    ) -> impl Future<Output = Result<LeaseResponse, ClientError>> + Send {
        Client::lease(self, seconds)
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
