//! Reading rows and classifying errors: the helpers every PostgreSQL
//! operation shares.

use sqlx::postgres::{PgRow, PgValueFormat};
use sqlx::{Postgres, Row};

use idem_model::document::Document;

use crate::store::StoreError;
use idem_model::model::{
    Attempt, AttemptId, AttemptState, Event, IdempotencyKey, Job, JobId, NewEvent, OwnerId,
};

/// SQLSTATE of unique_violation.
const SQLSTATE_UNIQUE_VIOLATION: &str = "23505";
/// The foreign key of an event's job: an event for a job that a prune
/// removed is refused by it.
pub(super) const EVENTS_JOB_FKEY: &str = "job_events_job_id_fkey";
/// SQLSTATEs of serialization_failure and deadlock_detected.
const SQLSTATE_RETRYABLE: &[&str] = &["40001", "40P01"];
/// The server does not take this connection's work now (starting up,
/// shutting down, too many connections): nothing was applied.
const SQLSTATE_NOT_ACCEPTING: &[&str] = &["57P03", "53300"];
/// The server ended the session mid-statement (an administrator's or a
/// crash shutdown), as class 08 (connection exception) does: a commit may
/// have landed.
const SQLSTATE_GOING_AWAY: &[&str] = &["57P01", "57P02"];

/// Runs `query` and decodes every row it returns: each read of many rows
/// classifies errors and decodes the same way.
pub(super) async fn fetch_decoded<T>(
    query: sqlx::query::Query<'_, Postgres, sqlx::postgres::PgArguments>,
    executor: impl sqlx::PgExecutor<'_>,
    decode: fn(&PgRow) -> Result<T, StoreError>,
) -> Result<Vec<T>, StoreError> {
    let rows = query.fetch_all(executor).await.map_err(classify)?;
    rows.iter().map(decode).collect()
}

/// The starting or unknown attempt that holds the job's slot in
/// `attempts_one_open`, if any.
pub(super) async fn blocking_attempt(
    conn: &mut sqlx::PgConnection,
    job_id: JobId,
) -> Result<Option<(AttemptId, AttemptState)>, StoreError> {
    let row = sqlx::query(
        "select id, state from attempts
          where job_id = $1 and state in ('starting', 'unknown') order by seq limit 1",
    )
    .bind(job_id.0)
    .fetch_optional(&mut *conn)
    .await
    .map_err(classify)?;
    row.map(|row| {
        Ok((
            AttemptId(row.try_get("id").map_err(classify)?),
            parse_state(row.try_get("state").map_err(classify)?)?,
        ))
    })
    .transpose()
}

/// Locks an attempt's row and returns its job and its state as of the lock.
pub(super) async fn lock_attempt(
    conn: &mut sqlx::PgConnection,
    attempt_id: AttemptId,
) -> Result<Option<(JobId, AttemptState)>, StoreError> {
    let row = sqlx::query("select job_id, state from attempts where id = $1 for update")
        .bind(attempt_id.0)
        .fetch_optional(&mut *conn)
        .await
        .map_err(classify)?;
    row.map(|row| {
        Ok((
            JobId(row.try_get("job_id").map_err(classify)?),
            parse_state(row.try_get("state").map_err(classify)?)?,
        ))
    })
    .transpose()
}

/// Locks the job of an attempt against starts before the attempt becomes
/// running.
///
/// A start refuses a non-hedge attempt while another is running, but no
/// index says so: it reads the running attempts under `FOR SHARE` of the job.
/// Without a conflicting lock here, a start could read the attempt as
/// starting, then wait on `attempts_one_open` for this transaction and find
/// the slot free once the attempt was running, and so start a second attempt
/// beside a running one, which neither serial order allows. `FOR NO KEY
/// UPDATE` conflicts with the start's `FOR SHARE` (and not with the
/// `FOR KEY SHARE` of foreign-key checks).
///
/// Lock order: the attempt first (see [`lock_attempt`]), then the job, as in
/// `complete`.
pub(super) async fn lock_job_for_dispatch(
    conn: &mut sqlx::PgConnection,
    job_id: JobId,
) -> Result<(), StoreError> {
    sqlx::query("select 1 from jobs where id = $1 for no key update")
        .bind(job_id.0)
        .execute(&mut *conn)
        .await
        .map_err(classify)?;
    Ok(())
}

/// Appends `event`; a refusal past its kind's bound per job
/// ([`crate::store::shared::events_per_job_max`]) is not written.
pub(super) async fn insert_event(
    conn: &mut sqlx::PgConnection,
    event: &NewEvent,
) -> Result<(), StoreError> {
    sqlx::query(
        "insert into job_events (job_id, attempt_id, at, kind, detail)
         select $1, $2, $3, $4, $5
          where $6::bigint is null
             or (select count(*) from job_events where job_id = $1 and kind = $4) < $6",
    )
    .bind(event.job_id.0)
    .bind(event.attempt_id.map(|a| a.0))
    .bind(event.at)
    .bind(event.kind.as_str())
    .bind(&event.detail)
    .bind(crate::store::shared::events_per_job_max(event.kind))
    .execute(conn)
    .await
    .map_err(classify)?;
    Ok(())
}

/// The constraint a unique violation names, if `e` is one (SQLSTATE 23505).
pub fn unique_violation(e: &sqlx::Error) -> Option<&str> {
    match e {
        sqlx::Error::Database(db) if db.code().as_deref() == Some(SQLSTATE_UNIQUE_VIOLATION) => {
            db.constraint()
        }
        _ => None,
    }
}

/// Maps a sqlx error onto the store's error enum: by SQLSTATE for database
/// errors, and by whether the statement may have reached the server for
/// transport errors.
pub fn classify(e: sqlx::Error) -> StoreError {
    match e {
        sqlx::Error::Database(db) => {
            let sqlstate = db.code().map(|c| c.into_owned()).unwrap_or_default();
            if let Some(name) = db.constraint() {
                return StoreError::Constraint {
                    constraint: name.to_owned(),
                };
            }
            if SQLSTATE_RETRYABLE.contains(&sqlstate.as_str()) {
                return StoreError::Contended { tries: 1 };
            }
            // The server is going away or refuses connections (an outage,
            // not a bug): the caller answers 503, never 500.
            if SQLSTATE_NOT_ACCEPTING.contains(&sqlstate.as_str()) {
                return StoreError::Unavailable(format!("SQLSTATE {sqlstate}: {}", db.message()));
            }
            if sqlstate.starts_with("08") || SQLSTATE_GOING_AWAY.contains(&sqlstate.as_str()) {
                return StoreError::Indeterminate(format!("SQLSTATE {sqlstate}: {}", db.message()));
            }
            StoreError::Database {
                sqlstate,
                message: db.message().to_owned(),
            }
        }
        // Never reached the server: nothing was applied.
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::BeginFailed => {
            StoreError::Unavailable(e.to_string())
        }
        // The connection broke mid-conversation: a commit may have landed.
        sqlx::Error::Io(_) | sqlx::Error::Tls(_) | sqlx::Error::Protocol(_) => {
            StoreError::Indeterminate(e.to_string())
        }
        other => StoreError::Corrupt(other.to_string()),
    }
}

pub(super) fn parse_state<S: std::str::FromStr<Err = idem_model::model::UnknownState>>(
    text: String,
) -> Result<S, StoreError> {
    text.parse()
        .map_err(|e: idem_model::model::UnknownState| StoreError::Corrupt(e.to_string()))
}

pub(super) fn job_from_row(row: &PgRow) -> Result<Job, StoreError> {
    let key: String = row.try_get("idempotency_key").map_err(classify)?;
    Ok(Job {
        id: JobId(row.try_get("id").map_err(classify)?),
        owner_id: OwnerId(row.try_get("owner_id").map_err(classify)?),
        idempotency_key: IdempotencyKey::parse(&key)
            .map_err(|e| StoreError::Corrupt(e.to_string()))?,
        request_fingerprint: row.try_get("request_fingerprint").map_err(classify)?,
        request: document_column(row, "request")?
            .ok_or_else(|| StoreError::Corrupt("a job row without its request".to_owned()))?,
        provider: row.try_get("provider").map_err(classify)?,
        fallbacks: row.try_get("fallbacks").map_err(classify)?,
        state: parse_state(row.try_get("state").map_err(classify)?)?,
        version: row.try_get("version").map_err(classify)?,
        completed_by: row
            .try_get::<Option<uuid::Uuid>, _>("completed_by")
            .map_err(classify)?
            .map(AttemptId),
        result: document_column(row, "result")?,
        created_at: row.try_get("created_at").map_err(classify)?,
        updated_at: row.try_get("updated_at").map_err(classify)?,
    })
}

/// A `jsonb` column as an exact [`Document`]: sqlx's reading of it as a
/// [`serde_json::Value`] rounds a number `numeric` keeps, so the column's
/// own text is parsed as well.
fn document_column(row: &PgRow, column: &str) -> Result<Option<Document>, StoreError> {
    let value: Option<serde_json::Value> = row.try_get(column).map_err(classify)?;
    let Some(value) = value else {
        return Ok(None);
    };
    let raw = row.try_get_raw(column).map_err(classify)?;
    let bytes = raw
        .as_bytes()
        .map_err(|e| StoreError::Corrupt(format!("the {column} column: {e}")))?;
    // In the binary format, jsonb is a version byte (1) before its text.
    let text = match raw.format() {
        PgValueFormat::Binary => bytes.get(1..).unwrap_or_default(),
        PgValueFormat::Text => bytes,
    };
    Document::with_value_of_text(value, text)
        .map(Some)
        .map_err(|e| StoreError::Corrupt(format!("the {column} column: {e}")))
}

pub(super) fn attempt_from_row(row: &PgRow) -> Result<Attempt, StoreError> {
    Ok(Attempt {
        id: AttemptId(row.try_get("id").map_err(classify)?),
        job_id: JobId(row.try_get("job_id").map_err(classify)?),
        seq: row.try_get("seq").map_err(classify)?,
        provider: row.try_get("provider").map_err(classify)?,
        state: parse_state(row.try_get("state").map_err(classify)?)?,
        read_version: row.try_get("read_version").map_err(classify)?,
        started_at: row.try_get("started_at").map_err(classify)?,
        ended_at: row.try_get("ended_at").map_err(classify)?,
        output: row.try_get("output").map_err(classify)?,
        error: row.try_get("error").map_err(classify)?,
    })
}

pub(super) fn event_from_row(row: &PgRow) -> Result<Event, StoreError> {
    Ok(Event {
        seq: row.try_get("seq").map_err(classify)?,
        job_id: JobId(row.try_get("job_id").map_err(classify)?),
        attempt_id: row
            .try_get::<Option<uuid::Uuid>, _>("attempt_id")
            .map_err(classify)?
            .map(AttemptId),
        at: row.try_get("at").map_err(classify)?,
        kind: parse_state(row.try_get("kind").map_err(classify)?)?,
        detail: row.try_get("detail").map_err(classify)?,
    })
}
