//! One round of posts: a batch of results in one request, or one request per result where the
//! coordinator has no batch route or refuses the batch as a whole, and what became of each
//! result.

use super::BATCH_MAX;
use crate::daemon::client::ClientError;
use crate::daemon::coordinator::Coordinator;
use crate::state::SpoolEntry;
use std::collections::HashMap;
use std::time::Duration;
use tmd_wire::{
    codes, BatchedResult, ResultBatch, ResultBatchResponse, UnitOutcome, UnitOutcomeStatus,
};
use tracing::{debug, error, info, warn};

/// What became of one posted result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Accepted,
    /// Not taken now (server unreachable or busy, token unknown, quarantine): kept.
    Later,
    /// Never to be taken (the unit went to another lease, ...): dropped.
    Refused(String),
    /// The result itself is unacceptable (400, 413): dropped, its unit released as failed.
    Unacceptable(String),
}

fn verdict_of_code(code: &str) -> Verdict {
    match code {
        codes::UNAUTHORIZED | codes::WORKER_QUARANTINED => Verdict::Later,
        codes::BAD_REQUEST | codes::PAYLOAD_TOO_LARGE => Verdict::Unacceptable(code.into()),
        _ => Verdict::Refused(code.into()),
    }
}

/// How results are posted to this coordinator, as its answers taught.
pub struct Route {
    /// One result per request: the coordinator has no batch route.
    single: bool,
    /// Most results in one batch (fewer once the server found a batch too large).
    pub batch_max: usize,
}

impl Default for Route {
    fn default() -> Route {
        Route {
            single: false,
            batch_max: BATCH_MAX,
        }
    }
}

/// What a round of posts did.
pub struct Round {
    /// Each result's, in order.
    pub verdicts: Vec<Verdict>,
    pub requests: u64,
    /// How long the server asked to wait before the next request.
    pub hint: Option<Duration>,
    /// The coordinator's message where it refused a post because the worker is quarantined.
    pub quarantined: Option<String>,
}

/// Every result not taken now, in one request.
fn later(n: usize, hint: Option<Duration>) -> Round {
    Round {
        verdicts: vec![Verdict::Later; n],
        requests: 1,
        hint,
        quarantined: None,
    }
}

/// Posts `chunk` (one request, or one per unit where the server has no batch route or
/// refuses the batch as a whole) and says what became of each unit, in order.
pub async fn post_round<C: Coordinator>(
    coord: &C,
    chunk: &[SpoolEntry],
    route: &mut Route,
) -> Round {
    if !route.single {
        if let Some(round) = post_batch(coord, chunk, route).await {
            return round;
        }
    }
    post_singly(coord, chunk).await
}

/// Posts `chunk` in one request: `None` where its results are to be posted one by one.
async fn post_batch<C: Coordinator>(
    coord: &C,
    chunk: &[SpoolEntry],
    route: &mut Route,
) -> Option<Round> {
    let batch = ResultBatch {
        results: chunk
            .iter()
            .map(|e| BatchedResult {
                lease_id: e.lease_id,
                unit_id: e.unit_id,
                result: e.result.clone(),
            })
            .collect(),
    };
    match coord.post_results(&batch).await {
        Ok(resp) => Some(batch_answered(chunk, &resp)),
        Err(e) => batch_failed(e, chunk, route),
    }
}

/// The server's answer to a batch, unit by unit; a unit it does not mention is kept for a
/// later batch.
fn batch_answered(chunk: &[SpoolEntry], resp: &ResultBatchResponse) -> Round {
    let by_unit: HashMap<(i64, i64), &UnitOutcome> = resp
        .outcomes
        .iter()
        .map(|o| ((o.lease_id, o.unit_id), o))
        .collect();
    let quarantined = resp
        .outcomes
        .iter()
        .filter_map(|o| o.error.as_ref())
        .find(|e| e.code == codes::WORKER_QUARANTINED)
        .map(|e| e.message.clone());
    let (mut accepted, mut replayed, mut other) = (0, 0, 0);
    let verdicts = chunk
        .iter()
        .map(|e| {
            let Some(o) = by_unit.get(&(e.lease_id, e.unit_id)) else {
                return Verdict::Later;
            };
            match o.status {
                UnitOutcomeStatus::Accepted => {
                    accepted += 1;
                    debug!(unit.id = e.unit_id, hr_cases = ?o.hr_cases, "result accepted");
                    Verdict::Accepted
                }
                UnitOutcomeStatus::Replayed => {
                    replayed += 1;
                    Verdict::Accepted
                }
                UnitOutcomeStatus::Refused => {
                    other += 1;
                    verdict_of_code(o.error.as_ref().map_or("", |e| e.code.as_str()))
                }
                UnitOutcomeStatus::Retry => {
                    other += 1;
                    Verdict::Later
                }
            }
        })
        .collect();
    info!(
        units = chunk.len(),
        accepted, replayed, other, "results posted"
    );
    Round {
        verdicts,
        requests: 1,
        hint: None,
        quarantined,
    }
}

/// A batch the server did not answer unit by unit: the round (its results kept), or `None`
/// where they are to be posted one by one (no batch route, or the batch refused as a whole).
fn batch_failed(e: ClientError, chunk: &[SpoolEntry], route: &mut Route) -> Option<Round> {
    match e {
        ClientError::Refused { status: 404, .. } => {
            warn!("the coordinator has no batch route (an older tmd-server); posting one result per request");
            route.single = true;
            None
        }
        ClientError::Refused { code, .. }
            if code == codes::PAYLOAD_TOO_LARGE && chunk.len() > 1 =>
        {
            route.batch_max = (chunk.len() / 2).max(1);
            warn!(
                batch_max = route.batch_max,
                "a batch of results was too large for the server; sending smaller ones"
            );
            Some(later(chunk.len(), Some(Duration::from_millis(100))))
        }
        e if e
            .code()
            .is_some_and(|c| verdict_of_code(c) == Verdict::Later) =>
        {
            error!(error = %e, "results not taken now; they stay in the spool");
            let mut round = later(chunk.len(), None);
            if e.code() == Some(codes::WORKER_QUARANTINED) {
                round.quarantined = Some(e.to_string());
            }
            Some(round)
        }
        ClientError::Refused { code, message, .. } => {
            // Refused as a whole: each unit posted alone gets its own answer.
            warn!(%code, %message, "the batch was refused as a whole; posting its units one by one");
            None
        }
        ClientError::Unavailable {
            message,
            retry_after,
        } => {
            warn!(%message, results = chunk.len(), "server unavailable; the results stay in the spool");
            Some(later(chunk.len(), retry_after))
        }
        e => {
            error!(error = %e, results = chunk.len(), "results not posted; they stay in the spool");
            Some(later(chunk.len(), None))
        }
    }
}

/// Posts `chunk` one result per request, until the server does not take one now: the rest
/// then waits too, without a request each.
async fn post_singly<C: Coordinator>(coord: &C, chunk: &[SpoolEntry]) -> Round {
    let mut round = Round {
        verdicts: Vec::with_capacity(chunk.len()),
        requests: 0,
        hint: None,
        quarantined: None,
    };
    for e in chunk {
        let v = post_one(coord, e, &mut round).await;
        let stop = v == Verdict::Later;
        round.verdicts.push(v);
        if stop {
            break;
        }
    }
    round.verdicts.resize(chunk.len(), Verdict::Later);
    round.requests = round.verdicts.len() as u64;
    round
}

/// Posts one result; a wait the server asks for or its word of a quarantine go to `round`.
async fn post_one<C: Coordinator>(coord: &C, e: &SpoolEntry, round: &mut Round) -> Verdict {
    match coord.post_result(e.lease_id, e.unit_id, &e.result).await {
        Ok(acc) => {
            info!(
                unit.id = e.unit_id,
                lease.id = e.lease_id,
                hr_cases = acc.hr_cases,
                "result accepted"
            );
            Verdict::Accepted
        }
        Err(ClientError::Unavailable {
            message,
            retry_after,
        }) => {
            warn!(%message, unit.id = e.unit_id, "server unavailable; the result stays in the spool");
            round.hint = retry_after;
            Verdict::Later
        }
        Err(ClientError::Refused { code, message, .. }) => {
            let v = verdict_of_code(&code);
            if v == Verdict::Later {
                error!(%code, %message, "the result stays in the spool");
            }
            if code == codes::WORKER_QUARANTINED {
                round.quarantined = Some(message);
            }
            v
        }
        Err(err) => {
            error!(error = %err, unit.id = e.unit_id, "the result stays in the spool");
            Verdict::Later
        }
    }
}
