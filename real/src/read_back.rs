//! The end of a black-box target's run: every job its users were told of
//! (each job id answered to a client) read back with `GET /v1/jobs/{id}`
//! and that client's token, once the run has settled and before anything
//! stops. Its store is its own; these answers are what the oracle judges
//! how jobs ended from (`idem_oracle::judge_read_backs`: one winner,
//! losers discarded, liveness).
//!
//! Each succeeded job is read a second time, half a second after the
//! first reads: a late result written over the winner's shows as a
//! change between the reads, or against what a user was shown during the
//! run (the clients record each job answer's result fingerprint).
//!
//! Each read goes straight to an instance, past the links and their
//! faults: it is the judge's, not a user's. An instance that does not
//! answer is asked again, the next one first, for a bounded while; a job
//! that never answers leaves those invariants not judged, with the reason.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::Value;

use idem_core::provider::connect::TcpConnector;
use idem_model::model::{JobId, JobState};
use idem_oracle::{ReadAnswer, ReadBack};
use idem_sim::client::{Request, exchange};
use idem_sim::world::client_token;

use super::judge::Observed;
use super::recorder::RealRecorder;
use super::world::RealWorld;

/// How long one read may take.
const READ_TIMEOUT_MS: u64 = 2_000;
/// Tries per job, across the instances in turn, and the pause between.
const TRIES_MAX: usize = 10;
const RETRY_PAUSE_MS: u64 = 200;
/// How long after the first reads each succeeded job is read again: a
/// result written over the winner's after the first read shows then.
const READ_AGAIN_AFTER_MS: u64 = 500;

impl RealWorld {
    /// What a run that `observed` this much reads back: for a black-box
    /// target, whose rows are its own, every job while it still runs, and
    /// whether every job answered; for idem's processes, nothing.
    pub(super) async fn read_back(&self, mut observed: Observed) -> (Vec<ReadBack>, Observed) {
        if !observed.read_back {
            return (Vec::new(), observed);
        }
        let reads = read_back(&self.recorder, &self.instances).await;
        observed.read_back = reads.is_some();
        (reads.unwrap_or_default(), observed)
    }
}

/// Every job answered to a client, read back at `instances`, and each
/// succeeded one read again a moment later (the oracle holds every read
/// to the results users were shown before: a result is written once);
/// `None` if a job did not answer its first read, or a create's success
/// named no job id to read.
pub async fn read_back(recorder: &RealRecorder, instances: &[SocketAddr]) -> Option<Vec<ReadBack>> {
    if recorder.created_without_an_id() {
        return None;
    }
    let mut reads = Vec::new();
    for (job, client) in recorder.answered_jobs() {
        let answer = read_one(job, &client_token(&client), instances).await?;
        reads.push(ReadBack {
            job_id: job,
            client,
            answer,
        });
    }
    let succeeded: Vec<(JobId, String)> = reads
        .iter()
        .filter(|r| {
            matches!(
                r.answer,
                ReadAnswer::Job {
                    state: JobState::Succeeded,
                    ..
                }
            )
        })
        .map(|r| (r.job_id, r.client.clone()))
        .collect();
    if !succeeded.is_empty() {
        idem_core::timer::sleep(Duration::from_millis(READ_AGAIN_AFTER_MS)).await;
    }
    for (job, client) in succeeded {
        // A second read that goes unanswered leaves the first to judge.
        if let Some(answer) = read_one(job, &client_token(&client), instances).await {
            reads.push(ReadBack {
                job_id: job,
                client,
                answer,
            });
        }
    }
    Some(reads)
}

async fn read_one(job: JobId, token: &str, instances: &[SocketAddr]) -> Option<ReadAnswer> {
    let read = Request {
        method: "GET".to_owned(),
        path: format!("/v1/jobs/{job}"),
        key: None,
        body: None,
    };
    let timeout = Duration::from_millis(READ_TIMEOUT_MS);
    for address in instances.iter().cycle().take(TRIES_MAX) {
        let authority = address.to_string();
        let call = exchange(&TcpConnector, &authority, token, &read);
        if let Ok(Ok(answer)) = idem_core::timer::timeout(timeout, call).await {
            match answer.status {
                404 => return Some(ReadAnswer::NotFound),
                200..=299 => {
                    if let Some(read) = job_answer(&answer.body) {
                        return Some(read);
                    }
                }
                _ => {}
            }
        }
        idem_core::timer::sleep(Duration::from_millis(RETRY_PAUSE_MS)).await;
    }
    None
}

/// A job's body as the contract defines it (docs/TARGET.md): `succeeded`
/// and `failed` are ended, any other `state` is pending; `result`, null or
/// absent for none.
fn job_answer(body: &Value) -> Option<ReadAnswer> {
    let state = match body.get("state")?.as_str()? {
        "succeeded" => JobState::Succeeded,
        "failed" => JobState::Failed,
        _ => JobState::Pending,
    };
    let result = body.get("result").filter(|r| !r.is_null()).cloned();
    Some(ReadAnswer::Job { state, result })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_job_body_reads_as_the_contract_says() {
        let read = |body: Value| job_answer(&body);
        assert_eq!(
            read(json!({"id": "x", "state": "queued", "result": null})),
            Some(ReadAnswer::Job {
                state: JobState::Pending,
                result: None
            })
        );
        assert_eq!(
            read(json!({"id": "x", "state": "succeeded", "result": {"a": 1}})),
            Some(ReadAnswer::Job {
                state: JobState::Succeeded,
                result: Some(json!({"a": 1}))
            })
        );
        assert_eq!(
            read(json!({"id": "x", "state": "failed"})),
            Some(ReadAnswer::Job {
                state: JobState::Failed,
                result: None
            })
        );
        assert_eq!(read(json!({"id": "x"})), None);
    }
}
