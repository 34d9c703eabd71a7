//! The writes that end a job's work in PostgreSQL, each inside the
//! caller's transaction and under the locks it already holds: the rows a
//! completion writes once the compare-and-swap has spoken, the job given
//! up, and the jobs a prune takes. Kept apart from the transactions
//! themselves (in `mod.rs`) so that each of those reads as its order of
//! statements.

use serde_json::Value;
use sqlx::PgConnection;
use sqlx::postgres::PgRow;

use super::rows::{classify, insert_event, job_from_row};
use crate::store::shared::{lost_event, won_events};
use crate::store::{CompleteOutcome, Completion, StoreError};
use idem_model::model::{Attempt, AttemptId, EventKind, Job, JobId, NewEvent, Timestamp};

/// The completion won the compare-and-swap (`row` is the job it
/// updated): its attempt succeeds with the output, and the events say so.
pub(super) async fn record_won(
    tx: &mut PgConnection,
    row: &PgRow,
    attempt: &Attempt,
    completion: &Completion,
) -> Result<CompleteOutcome, StoreError> {
    let job = job_from_row(row)?;
    sqlx::query(
        "update attempts set state = 'succeeded', output = $2, ended_at = $3 where id = $1",
    )
    .bind(completion.attempt_id.0)
    .bind(sqlx::types::Json(&completion.output))
    .bind(completion.at)
    .execute(&mut *tx)
    .await
    .map_err(classify)?;
    for event in won_events(attempt, completion) {
        insert_event(tx, &event).await?;
    }
    Ok(CompleteOutcome::Won(job))
}

/// The completion lost the compare-and-swap: the winner is read, and the
/// attempt is lost, its output discarded (not stored anywhere, only its
/// digest).
pub(super) async fn record_lost(
    tx: &mut PgConnection,
    attempt: &Attempt,
    completion: &Completion,
) -> Result<CompleteOutcome, StoreError> {
    let winner: Option<uuid::Uuid> =
        sqlx::query_scalar("select completed_by from jobs where id = $1")
            .bind(completion.job_id.0)
            .fetch_one(&mut *tx)
            .await
            .map_err(classify)?;
    let winner = winner.map(AttemptId);
    // Discarded: the output is not stored anywhere, only its digest.
    sqlx::query("update attempts set state = 'lost', ended_at = $2 where id = $1")
        .bind(completion.attempt_id.0)
        .bind(completion.at)
        .execute(&mut *tx)
        .await
        .map_err(classify)?;
    insert_event(tx, &lost_event(attempt, completion, winner)).await?;
    Ok(CompleteOutcome::Lost { winner })
}

/// The job, found pending at the version read and with no open attempt
/// (under its row lock), is failed for `reason`, with its event.
pub(super) async fn mark_job_failed(
    tx: &mut PgConnection,
    job_id: JobId,
    reason: Value,
    at: Timestamp,
) -> Result<Job, StoreError> {
    let row = sqlx::query(
        "update jobs set state = 'failed', version = version + 1, updated_at = $2
              where id = $1 returning *",
    )
    .bind(job_id.0)
    .bind(at)
    .fetch_one(&mut *tx)
    .await
    .map_err(classify)?;
    let job = job_from_row(&row)?;
    insert_event(
        tx,
        &NewEvent {
            job_id,
            attempt_id: None,
            at,
            kind: EventKind::JobFailed,
            detail: reason,
        },
    )
    .await?;
    Ok(job)
}

/// The ids of at most `limit` jobs a prune may take, oldest first, locked.
/// FOR UPDATE: a replay or a start that holds the job waits for us, or
/// we for it. A terminal job whose attempts have all ended stays so: no
/// attempt starts on a terminal job, and an ended attempt never reopens.
pub(super) async fn lock_prunable_jobs(
    tx: &mut PgConnection,
    updated_before: Timestamp,
    limit: u32,
) -> Result<Vec<uuid::Uuid>, StoreError> {
    sqlx::query_scalar(
        "select j.id from jobs j
              where j.state in ('succeeded', 'failed') and j.updated_at < $1
                and not exists (select 1 from attempts a
                                 where a.job_id = j.id
                                   and a.state in ('starting', 'running', 'unknown'))
              order by j.updated_at, j.id
              limit $2
              for update of j",
    )
    .bind(updated_before)
    .bind(i64::from(limit))
    .fetch_all(&mut *tx)
    .await
    .map_err(classify)
}
