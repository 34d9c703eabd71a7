//! The two operations whose outcome needs more than one statement's
//! reasoning: create-or-get and starting an attempt under
//! `attempts_one_open` (see docs/STORE.md, "every outcome is one a serial
//! order gives").

use serde_json::json;
use sqlx::postgres::PgRow;
use sqlx::{Acquire, PgConnection, Postgres, Row, Transaction};

use super::PgStore;
use super::rows::{
    EVENTS_JOB_FKEY, attempt_from_row, blocking_attempt, classify, insert_event, job_from_row,
    parse_state, unique_violation,
};
use crate::store::shared::{found_key, refusal_event};
use crate::store::{
    CreateOutcome, NewAttempt, NewJob, StartOutcome, Store, StoreError, constraint,
};
use idem_model::model::{AttemptId, AttemptState, EventKind, Job, JobState, NewEvent};

impl PgStore {
    /// One try at create-or-get, in one statement (one round trip, its own
    /// transaction): the insert, or else the row that holds the key, read in
    /// the statement's snapshot. The shape of pgbench's reference script
    /// (`INSERT … ON CONFLICT DO NOTHING`, then the read) in one statement;
    /// it writes nothing but the new job: a new job's `created` event is
    /// synthesized from its row when the trace is read, and a replay
    /// decides nothing (the engine counts it in its metrics). `Ok(None)`:
    /// nothing decided, run again (the row that refused the insert was
    /// committed after the snapshot, or was pruned before a refusal's event
    /// could name it).
    pub(super) async fn try_create(
        &self,
        new: &NewJob,
    ) -> Result<Option<CreateOutcome>, StoreError> {
        let row = sqlx::query(self.create_job_sql())
            .bind(new.id.0)
            .bind(&new.owner_id.0)
            .bind(new.idempotency_key.as_str())
            .bind(&new.request_fingerprint)
            // The canonical text, cast by PostgreSQL: `numeric` keeps every
            // digit, where a serde_json Value would have rounded some.
            .bind(new.request.text())
            .bind(&new.provider)
            .bind(&new.fallbacks)
            .bind(new.at)
            .fetch_optional(&self.pool)
            .await;
        let row = match row {
            Ok(Some(row)) => row,
            // The key's row committed after this statement's snapshot: the
            // insert waited for it and did nothing, the read cannot see it.
            // A new statement (a new snapshot) will.
            Ok(None) => return Ok(None),
            Err(e) => return self.refused_create(new, e).await,
        };
        let job = job_from_row(&row)?;
        if row.try_get::<bool, _>("inserted").map_err(classify)? {
            return Ok(Some(CreateOutcome::Created(job)));
        }
        let Some(text) = row
            .try_get::<Option<String>, _>("request_text")
            .map_err(classify)?
        else {
            // Same fingerprint: replayed. Nothing is written.
            return Ok(Some(CreateOutcome::Existing(job)));
        };
        self.refuse_other_body(&job, &text, new).await
    }

    /// What a create's statement refused by a constraint means;
    /// `Ok(None)`: run again.
    async fn refused_create(
        &self,
        new: &NewJob,
        e: sqlx::Error,
    ) -> Result<Option<CreateOutcome>, StoreError> {
        match unique_violation(&e) {
            // The id is taken. By a create of the same key (the same
            // request sent twice with one id) whose row this
            // statement's arbiter check ran too early to see: the
            // next try finds the key and replays it, as a serial
            // order would. By a row of another key: running again
            // cannot help, unless that row is gone (pruned).
            Some(constraint::JOBS_PKEY) => match self.job(new.id).await? {
                Some(taken)
                    if taken.owner_id != new.owner_id
                        || taken.idempotency_key != new.idempotency_key =>
                {
                    Err(StoreError::Constraint {
                        constraint: constraint::JOBS_PKEY.to_owned(),
                    })
                }
                Some(_) | None => Ok(None),
            },
            _ => Err(classify(e)),
        }
    }

    /// The key is held by `job`, whose stored request `text` has another
    /// body than `new`'s: names the differing pointers against the exact
    /// stored request, and records the refusal. The job's key, body and
    /// fingerprint never change, so the read explains the refusal; if a
    /// prune took the job since, the event's foreign key refuses it and
    /// the create runs again (`Ok(None)`: the key is free).
    async fn refuse_other_body(
        &self,
        job: &Job,
        text: &str,
        new: &NewJob,
    ) -> Result<Option<CreateOutcome>, StoreError> {
        let stored = idem_model::json::parse(text.as_bytes())
            .map_err(|e| StoreError::Corrupt(format!("stored request: {e}")))?;
        let (outcome, event) = found_key(job, &stored, new, new.at);
        let Some(event) = event else {
            return Ok(Some(outcome));
        };
        let mut conn = self.pool.acquire().await.map_err(classify)?;
        match insert_event(&mut conn, &event).await {
            Ok(()) => Ok(Some(outcome)),
            Err(StoreError::Constraint { constraint }) if constraint == EVENTS_JOB_FKEY => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub(super) async fn try_start(
        &self,
        new: &NewAttempt,
    ) -> Result<Option<StartOutcome>, StoreError> {
        let mut tx = self.begin().await?;
        let (job_state, read_version) = lock_job_shared(&mut tx, new).await?;
        if job_state.is_terminal() {
            // Recorded under the share lock, so that a prune of the job
            // waits for it (the event names no attempt, so its foreign-key
            // checks lock nothing a dispatch holds).
            let outcome = StartOutcome::Completed { state: job_state };
            insert_event(&mut tx, &refusal_event(new, &outcome)).await?;
            tx.commit().await.map_err(classify)?;
            return Ok(Some(outcome));
        }
        if let Some(attempt) = running_blocker(&mut tx, new).await? {
            tx.rollback().await.map_err(classify)?;
            return Ok(Some(StartOutcome::InFlight {
                attempt,
                state: AttemptState::Running,
            }));
        }
        let row = match insert_in_savepoint(&mut tx, new, read_version).await? {
            Ok(row) => row,
            Err(e) => return refused_insert(tx, new, e).await,
        };
        let attempt = attempt_from_row(&row)?;
        insert_event(
            &mut tx,
            &NewEvent {
                job_id: attempt.job_id,
                attempt_id: Some(attempt.id),
                at: new.at,
                kind: EventKind::AttemptStarted,
                detail: json!({"seq": attempt.seq, "provider": attempt.provider}),
            },
        )
        .await?;
        tx.commit().await.map_err(classify)?;
        Ok(Some(StartOutcome::Started(attempt)))
    }

    /// Records why a start was refused because an attempt is in flight, on
    /// its own: the refused transaction was rolled back. (Inside it, the
    /// event's foreign-key check on the blocking attempt would wait for a
    /// dispatch that holds that attempt and waits for this transaction's
    /// share lock on the job: a deadlock.)
    ///
    /// The job existed when the start read it; if the event now finds it
    /// gone, a prune took it in between, and the start's outcome is the one
    /// it has after that prune: the job is not found.
    pub(super) async fn record_refusal(
        &self,
        new: &NewAttempt,
        outcome: &StartOutcome,
    ) -> Result<(), StoreError> {
        match self.record_event(refusal_event(new, outcome)).await {
            Err(StoreError::Constraint { constraint })
                if constraint == "job_events_job_id_fkey"
                    || constraint == "job_events_attempt_id_fkey" =>
            {
                Err(StoreError::JobNotFound(new.job_id))
            }
            other => other,
        }
    }
}

/// The job's state and version, under a share lock. FOR SHARE: a
/// concurrent completion (which updates the job row) waits for us or we
/// see its result, so no attempt starts on a finished job. Concurrent
/// starts share the lock; the index settles between them.
async fn lock_job_shared(
    tx: &mut PgConnection,
    new: &NewAttempt,
) -> Result<(JobState, i64), StoreError> {
    let job = sqlx::query("select state, version from jobs where id = $1 for share")
        .bind(new.job_id.0)
        .fetch_optional(&mut *tx)
        .await
        .map_err(classify)?
        .ok_or(StoreError::JobNotFound(new.job_id))?;
    let job_state = parse_state::<JobState>(job.try_get("state").map_err(classify)?)?;
    let read_version: i64 = job.try_get("version").map_err(classify)?;
    Ok((job_state, read_version))
}

/// A running attempt that blocks the start. Strict: no other attempt may
/// be running. Hedged: one may (the attempt being hedged), never two.
async fn running_blocker(
    tx: &mut PgConnection,
    new: &NewAttempt,
) -> Result<Option<AttemptId>, StoreError> {
    let running_allowed = i64::from(new.allow_while_running);
    let running = sqlx::query(
        "select id from attempts where job_id = $1 and state = 'running'
          order by seq offset $2 limit 1",
    )
    .bind(new.job_id.0)
    .bind(running_allowed)
    .fetch_optional(&mut *tx)
    .await
    .map_err(classify)?;
    running
        .map(|row| row.try_get("id").map(AttemptId).map_err(classify))
        .transpose()
}

/// The attempt's row, inserted in a savepoint of `tx`; `Ok(Err(_))`: the
/// insert was refused, and the savepoint rolled back. A savepoint, so that
/// a refusal by the index leaves the transaction, and its share lock on
/// the job, alive for the read that names the blocker: the job cannot
/// complete in between, and the blocker is read as it is at one moment
/// while the job is still pending.
async fn insert_in_savepoint(
    tx: &mut Transaction<'static, Postgres>,
    new: &NewAttempt,
    read_version: i64,
) -> Result<Result<PgRow, sqlx::Error>, StoreError> {
    let mut insert = Acquire::begin(&mut *tx).await.map_err(classify)?;
    match insert_attempt(&mut insert, new, read_version).await {
        Ok(row) => {
            insert.commit().await.map_err(classify)?;
            Ok(Ok(row))
        }
        Err(e) => {
            insert.rollback().await.map_err(classify)?;
            Ok(Err(e))
        }
    }
}

/// The attempt's row, numbered after the job's last.
async fn insert_attempt(
    insert: &mut PgConnection,
    new: &NewAttempt,
    read_version: i64,
) -> Result<PgRow, sqlx::Error> {
    sqlx::query(
        "insert into attempts (id, job_id, seq, provider, state, read_version, started_at)
         select $1, $2, coalesce(max(seq), 0) + 1, $3, 'starting', $4, $5
           from attempts where job_id = $2
         returning *",
    )
    .bind(new.id.0)
    .bind(new.job_id.0)
    .bind(&new.provider)
    .bind(read_version)
    .bind(new.at)
    .fetch_one(&mut *insert)
    .await
}

/// What an insert refused by a constraint means, read in `tx` (whose
/// share lock on the job still holds); `Ok(None)`: run again.
async fn refused_insert(
    mut tx: Transaction<'static, Postgres>,
    new: &NewAttempt,
    e: sqlx::Error,
) -> Result<Option<StartOutcome>, StoreError> {
    match unique_violation(&e) {
        // Another insert took our seq; run again with a fresh max.
        Some(constraint::ATTEMPTS_JOB_SEQ) => Ok(None),
        // Our own earlier try landed; its acknowledgement was lost. Read it
        // in this transaction: the share lock on the job still holds off
        // its dispatch, so the attempt is read as it is while this start is
        // ordered.
        Some(constraint::ATTEMPTS_PKEY) => {
            let ours = sqlx::query("select * from attempts where id = $1")
                .bind(new.id.0)
                .fetch_optional(&mut *tx)
                .await
                .map_err(classify)?;
            tx.rollback().await.map_err(classify)?;
            ours.as_ref()
                .map(attempt_from_row)
                .transpose()
                .map(|ours| ours.map(StartOutcome::Started))
        }
        // The guard refused us. Name the blocker; if it was resolved in the
        // meantime, run again.
        Some(constraint::ATTEMPTS_ONE_OPEN) => {
            let blocker = blocking_attempt(&mut tx, new.job_id).await?;
            tx.rollback().await.map_err(classify)?;
            Ok(blocker.map(|(attempt, state)| StartOutcome::InFlight { attempt, state }))
        }
        _ => Err(classify(e)),
    }
}
