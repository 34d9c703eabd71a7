//! The PostgreSQL store on sqlx.
//!
//! Every operation is one statement or one short transaction. Races are
//! settled by the database: the unique constraint on (owner, key), the partial
//! unique index `attempts_one_open`, row locks, and the conditional UPDATE of
//! the completion. Errors are classified by SQLSTATE and constraint name,
//! never by message text.

mod endings;
mod races;
mod rows;
mod statements;

use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{Postgres, Row, Transaction};

use super::shared::{assert_transition_target, completion_allowed, transition_event};
use super::{
    AttemptCensus, CompleteOutcome, Completion, CreateOutcome, FailJobOutcome, FreeSlots,
    NewAttempt, NewJob, PageAfter, StartOutcome, Store, StoreDump, StoreError, TransitionOutcome,
};
use idem_model::contract::{Certificate, CertificateKey};
use idem_model::model::{
    Attempt, AttemptId, AttemptState, Event, EventKind, IdempotencyKey, Job, JobId, JobState,
    NewEvent, OwnerId, Timestamp,
};
use idem_model::transition;

use self::endings::{lock_prunable_jobs, mark_job_failed, record_lost, record_won};
use self::rows::{
    attempt_from_row, event_from_row, fetch_decoded, insert_event, job_from_row, lock_attempt,
    lock_job_for_dispatch, parse_state,
};
pub use self::rows::{classify, unique_violation};

#[cfg(feature = "bench")]
use super::mem::Constraints;

/// Migrations embedded at build time from `core/migrations`. Run them
/// through [`migrator`], which places them in idem's schema.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// The PostgreSQL schema that holds idem's tables, and its migrations' own
/// bookkeeping (`_sqlx_migrations`), unless configured otherwise. An
/// application that embeds idem-core and runs its own sqlx migrations keeps
/// its tables and its `_sqlx_migrations` in its own schema (usually
/// `public`), and neither side sees the other's.
pub const SCHEMA_DEFAULT: &str = "idem";

/// Checks a schema name: a lower-case SQL identifier (letters, digits and
/// `_`, not starting with a digit, at most 63 bytes), so that it is never
/// quoted and never needs escaping.
pub fn check_schema(name: &str) -> Result<(), String> {
    let mut bytes = name.bytes();
    let valid = name.len() <= 63
        && bytes
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if valid {
        Ok(())
    } else {
        Err(format!(
            "schema {name:?} must be a lower-case SQL identifier (a-z, 0-9, _; at most 63 bytes)"
        ))
    }
}

/// The migrations, to be applied in `schema`: the schema is created if it
/// is missing, and the bookkeeping table is `schema._sqlx_migrations`. The
/// migration files name no schema; the connection's `search_path` (see
/// [`connect_options`]) puts their tables in `schema`.
pub fn migrator(schema: &str) -> sqlx::migrate::Migrator {
    let mut migrator = sqlx::migrate::Migrator::with_migrations(MIGRATOR.iter().cloned().collect());
    migrator.create_schema(schema.to_owned());
    migrator.dangerous_set_table_name(format!("{schema}._sqlx_migrations"));
    migrator
}

/// Connection options for `url` whose every connection resolves idem's
/// tables in `schema` (its `search_path` is that schema alone), with
/// PostgreSQL's JIT compiler off: idem's statements each read or write a
/// few rows, and JIT compiles any plan whose estimated cost passes
/// `jit_above_cost`, which a worker's poll reaches with its per-provider
/// limits unknown when planned (measured: 58 ms of compiling for a read
/// that takes 0.34 ms without it).
pub fn connect_options(url: &str, schema: &str) -> Result<PgConnectOptions, StoreError> {
    check_schema(schema).map_err(StoreError::Unavailable)?;
    let options: PgConnectOptions = url
        .parse()
        .map_err(|e: sqlx::Error| StoreError::Unavailable(format!("database URL: {e}")))?;
    Ok(options.options([("search_path", schema), ("jit", "off")]))
}

/// The pool a server opens: at most `connections_max` connections, and no
/// ping before each acquire. sqlx pings every connection it hands out by
/// default, one more round trip for every operation (issue 14 found it in
/// 12% of the server's samples under a create load); a connection that broke while idle
/// fails its next statement instead, which the caller sees as unavailable
/// or indeterminate (and retries: every operation is idempotent or
/// re-checked), and sqlx then discards it.
///
/// Waiting for a connection is bounded by [`ACQUIRE_TIMEOUT_MS`]: with the
/// database gone, a caller learns it in that time (and a client gets a
/// 503), instead of sqlx's default of 30 s.
pub fn pool_options(connections_max: u32) -> PgPoolOptions {
    PgPoolOptions::new()
        .max_connections(connections_max)
        .test_before_acquire(false)
        .acquire_timeout(Duration::from_millis(ACQUIRE_TIMEOUT_MS))
}

/// How long a caller waits for a pooled connection, in milliseconds.
pub const ACQUIRE_TIMEOUT_MS: u64 = 3_000;

/// How many times an operation re-runs after losing a benign race (for
/// example two inserts computing the same attempt seq) before giving up.
const CONTENTION_TRIES_MAX: u32 = 4;

/// The advisory lock that serializes prunes: "idem" and "prune" in ASCII.
const PRUNE_LOCK_KEY: i64 = 0x6964_656d_7072_756e;

/// Where a schema stands against this build's migrations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchemaState {
    /// Every migration of this build is applied.
    Current,
    /// No idem tables: the schema, or its migrations' bookkeeping, is not
    /// there.
    Missing,
    /// Some of this build's migrations are not applied yet.
    Behind { pending: usize },
}

/// A worker's poll ([`Store::jobs_needing_attempt`]): every provider with
/// pending jobs (a skip scan of `jobs_pending_by_provider`, one index
/// descent per provider), then each one's oldest pending jobs without an
/// open attempt, up to its free slots (`$1`, `$2`; `$3` for providers not
/// named), through the same index; a job whose next attempt goes to a
/// provider in `$4` (no free slot; after a failed or cancelled attempt:
/// `store::next_provider`) is passed over. A poll reads about the rows it
/// returns, whatever the backlog.
const JOBS_NEEDING_ATTEMPT_SQL: &str = "with recursive primaries (provider) as (
               (select provider from jobs where state = 'pending' order by provider limit 1)
               union all
               select (select j.provider from jobs j
                        where j.state = 'pending' and j.provider > p.provider
                        order by j.provider limit 1)
                 from primaries p where p.provider is not null)
             select j.* from primaries p
             left join unnest($1::text[], $2::int8[]) as free (provider, n)
               on free.provider = p.provider
             cross join lateral (
               select j.* from jobs j
               where j.state = 'pending' and j.provider = p.provider
                 and not exists (select 1 from attempts a
                                  where a.job_id = j.id
                                    and a.state in ('starting', 'running', 'unknown'))
                 and not exists (
                   select 1 from (select a.provider, a.state from attempts a
                                   where a.job_id = j.id order by a.seq desc limit 1) last
                   cross join lateral (select array_prepend(j.provider, j.fallbacks) as candidates) o
                   where o.candidates[(coalesce(array_position(o.candidates, last.provider), 1) - 1
                                       + case when last.state in ('failed', 'cancelled')
                                              then 1 else 0 end)
                                      % cardinality(o.candidates) + 1] = any($4::text[]))
               order by j.created_at, j.id
               limit coalesce(free.n, $3)) j
             where p.provider is not null
             order by j.created_at, j.id";

/// The store on a PostgreSQL pool.
#[derive(Clone, Debug)]
pub struct PgStore {
    pool: PgPool,
    schema: String,
    /// What the schema enforces: everything, except under a naive design
    /// of the bench, whose schema lacks a constraint.
    #[cfg(feature = "bench")]
    constraints: Constraints,
}

impl PgStore {
    /// A store on `pool`, whose connections must resolve idem's tables in
    /// `schema` (build it with [`connect_options`]).
    pub fn new(pool: PgPool, schema: &str) -> Self {
        Self {
            pool,
            schema: schema.to_owned(),
            #[cfg(feature = "bench")]
            constraints: Constraints::default(),
        }
    }

    /// Connects with a bounded pool, to the tables in `schema`.
    pub async fn connect(
        url: &str,
        schema: &str,
        connections_max: u32,
    ) -> Result<Self, StoreError> {
        let pool = pool_options(connections_max)
            .connect_with(connect_options(url, schema)?)
            .await
            .map_err(classify)?;
        Ok(Self::new(pool, schema))
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// Applies the embedded migrations in the store's schema.
    pub async fn migrate(&self) -> Result<(), sqlx::migrate::MigrateError> {
        migrator(&self.schema).run(&self.pool).await
    }

    /// Where the store's schema stands against this build's migrations,
    /// read without writing anything (a command that only reads must not
    /// create a mistyped schema: issue 36).
    pub async fn schema_state(&self) -> Result<SchemaState, StoreError> {
        // The pool's search_path is the schema alone (see
        // `connect_options`): unqualified names resolve there, or nowhere.
        let exists: bool = sqlx::query_scalar("select to_regclass('_sqlx_migrations') is not null")
            .fetch_one(&self.pool)
            .await
            .map_err(classify)?;
        if !exists {
            return Ok(SchemaState::Missing);
        }
        let applied: Vec<i64> =
            sqlx::query_scalar("select version from _sqlx_migrations where success")
                .fetch_all(&self.pool)
                .await
                .map_err(classify)?;
        let pending = MIGRATOR
            .iter()
            .filter(|m| m.migration_type.is_up_migration() && !applied.contains(&m.version))
            .count();
        Ok(if pending == 0 {
            SchemaState::Current
        } else {
            SchemaState::Behind { pending }
        })
    }

    async fn begin(&self) -> Result<Transaction<'static, Postgres>, StoreError> {
        self.pool.begin().await.map_err(classify)
    }
}

#[async_trait]
impl Store for PgStore {
    async fn create_job(&self, new: NewJob) -> Result<CreateOutcome, StoreError> {
        // Each try that decides nothing saw a row come or go under it (a
        // racing create's commit, a prune); a new statement sees the newer
        // state.
        for _ in 0..CONTENTION_TRIES_MAX {
            if let Some(outcome) = self.try_create(&new).await? {
                return Ok(outcome);
            }
        }
        Err(StoreError::Contended {
            tries: CONTENTION_TRIES_MAX,
        })
    }

    async fn start_attempt(&self, new: NewAttempt) -> Result<StartOutcome, StoreError> {
        for _ in 0..CONTENTION_TRIES_MAX {
            if let Some(outcome) = self.try_start(&new).await? {
                if matches!(outcome, StartOutcome::InFlight { .. }) {
                    self.record_refusal(&new, &outcome).await?;
                }
                return Ok(outcome);
            }
        }
        Err(StoreError::Contended {
            tries: CONTENTION_TRIES_MAX,
        })
    }

    async fn transition_attempt(
        &self,
        attempt_id: AttemptId,
        only_from: Option<AttemptState>,
        to: AttemptState,
        error: Option<Value>,
        at: Timestamp,
    ) -> Result<TransitionOutcome, StoreError> {
        assert_transition_target(to);
        let ended_at = transition::is_terminal(to).then_some(at);
        let mut tx = self.begin().await?;
        // Lock the row and read the state it is in now. Under READ COMMITTED
        // a locking read that waited for another transaction returns the row
        // as that one committed it, so the decision below and the refusal's
        // `current` are the same fact, taken under the lock that orders this
        // move after every earlier one. (A conditional UPDATE whose miss is
        // explained by a second read is two facts: the update can miss a
        // version that the read then sees.)
        let Some((job_id, from)) = lock_attempt(&mut tx, attempt_id).await? else {
            return Err(StoreError::AttemptNotFound(attempt_id));
        };
        if !transition::may_move(from, only_from, to) {
            tx.rollback().await.map_err(classify)?;
            return Ok(TransitionOutcome::Refused { current: from });
        }
        if to == AttemptState::Running {
            lock_job_for_dispatch(&mut tx, job_id).await?;
        }
        let row = sqlx::query(
            "update attempts
                set state = $2, ended_at = coalesce($3, ended_at), error = coalesce($4, error)
              where id = $1
              returning *",
        )
        .bind(attempt_id.0)
        .bind(to.as_str())
        .bind(ended_at)
        .bind(&error)
        .fetch_one(&mut *tx)
        .await
        .map_err(classify)?;
        let attempt = attempt_from_row(&row)?;
        insert_event(
            &mut tx,
            &transition_event(&attempt, from, error.as_ref(), at),
        )
        .await?;
        tx.commit().await.map_err(classify)?;
        Ok(TransitionOutcome::Moved { attempt, from })
    }

    async fn complete(&self, completion: Completion) -> Result<CompleteOutcome, StoreError> {
        let mut tx = self.begin().await?;
        let attempt_row = sqlx::query("select * from attempts where id = $1 for update")
            .bind(completion.attempt_id.0)
            .fetch_optional(&mut *tx)
            .await
            .map_err(classify)?
            .ok_or(StoreError::AttemptNotFound(completion.attempt_id))?;
        let attempt = attempt_from_row(&attempt_row)?;
        assert_eq!(
            attempt.job_id, completion.job_id,
            "completion names another job's attempt"
        );
        if !completion_allowed(attempt.state, completion.out_of_band) {
            tx.rollback().await.map_err(classify)?;
            return Ok(CompleteOutcome::NotOpen {
                state: attempt.state,
            });
        }
        // The compare-and-swap: exactly one attempt's result is ever written.
        let won = sqlx::query(self.complete_sql())
            .bind(completion.job_id.0)
            .bind(attempt.read_version)
            .bind(sqlx::types::Json(&completion.output))
            .bind(completion.attempt_id.0)
            .bind(completion.at)
            .fetch_optional(&mut *tx)
            .await
            .map_err(classify)?;
        let outcome = match won {
            Some(row) => record_won(&mut tx, &row, &attempt, &completion).await?,
            None => record_lost(&mut tx, &attempt, &completion).await?,
        };
        tx.commit().await.map_err(classify)?;
        Ok(outcome)
    }

    async fn fail_job(
        &self,
        job_id: JobId,
        read_version: i64,
        reason: Value,
        at: Timestamp,
    ) -> Result<FailJobOutcome, StoreError> {
        let mut tx = self.begin().await?;
        // Lock the job first so that a concurrent start (FOR SHARE) either
        // committed before us, and the attempt query below sees it, or waits.
        let row = sqlx::query("select * from jobs where id = $1 for update")
            .bind(job_id.0)
            .fetch_optional(&mut *tx)
            .await
            .map_err(classify)?
            .ok_or(StoreError::JobNotFound(job_id))?;
        let job = job_from_row(&row)?;
        let open: i64 = sqlx::query_scalar(
            "select count(*) from attempts
              where job_id = $1 and state in ('starting', 'running', 'unknown')",
        )
        .bind(job_id.0)
        .fetch_one(&mut *tx)
        .await
        .map_err(classify)?;
        if job.state != JobState::Pending || job.version != read_version || open > 0 {
            tx.rollback().await.map_err(classify)?;
            return Ok(FailJobOutcome::Stale {
                state: job.state,
                version: job.version,
            });
        }
        let job = mark_job_failed(&mut tx, job_id, reason, at).await?;
        tx.commit().await.map_err(classify)?;
        Ok(FailJobOutcome::Failed(job))
    }

    async fn put_certificate(&self, certificate: Certificate) -> Result<(), StoreError> {
        let key = &certificate.key;
        sqlx::query(
            "insert into provider_certificates
                    (provider, model, prompt_version, schema_version, passed, evidence, at)
             values ($1, $2, $3, $4, $5, $6, $7)
             on conflict (provider, model, prompt_version, schema_version)
             do update set passed = excluded.passed, evidence = excluded.evidence, at = excluded.at",
        )
        .bind(&key.provider)
        .bind(&key.model)
        .bind(&key.prompt_version)
        .bind(&key.schema_version)
        .bind(certificate.passed)
        .bind(&certificate.evidence)
        .bind(certificate.at)
        .execute(&self.pool)
        .await
        .map_err(classify)?;
        Ok(())
    }

    async fn certificate(&self, key: &CertificateKey) -> Result<Option<Certificate>, StoreError> {
        let row = sqlx::query(
            "select passed, evidence, at from provider_certificates
              where provider = $1 and model = $2 and prompt_version = $3 and schema_version = $4",
        )
        .bind(&key.provider)
        .bind(&key.model)
        .bind(&key.prompt_version)
        .bind(&key.schema_version)
        .fetch_optional(&self.pool)
        .await
        .map_err(classify)?;
        row.map(|row| {
            Ok(Certificate {
                key: key.clone(),
                passed: row.try_get("passed").map_err(classify)?,
                evidence: row.try_get("evidence").map_err(classify)?,
                at: row.try_get("at").map_err(classify)?,
            })
        })
        .transpose()
    }

    async fn certificates(
        &self,
        after: Option<CertificateKey>,
        limit: u32,
    ) -> Result<Vec<Certificate>, StoreError> {
        // Ordered as the in-process store orders keys: by their bytes.
        let rows = sqlx::query(
            "select provider, model, prompt_version, schema_version, passed, evidence, at
               from provider_certificates
              where $1::text is null
                 or (provider collate \"C\", model collate \"C\",
                     prompt_version collate \"C\", schema_version collate \"C\")
                    > ($1, $2, $3, $4)
              order by provider collate \"C\", model collate \"C\",
                       prompt_version collate \"C\", schema_version collate \"C\"
              limit $5",
        )
        .bind(after.as_ref().map(|k| &k.provider))
        .bind(after.as_ref().map(|k| &k.model))
        .bind(after.as_ref().map(|k| &k.prompt_version))
        .bind(after.as_ref().map(|k| &k.schema_version))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(classify)?;
        rows.iter()
            .map(|row| {
                Ok(Certificate {
                    key: CertificateKey {
                        provider: row.try_get("provider").map_err(classify)?,
                        model: row.try_get("model").map_err(classify)?,
                        prompt_version: row.try_get("prompt_version").map_err(classify)?,
                        schema_version: row.try_get("schema_version").map_err(classify)?,
                    },
                    passed: row.try_get("passed").map_err(classify)?,
                    evidence: row.try_get("evidence").map_err(classify)?,
                    at: row.try_get("at").map_err(classify)?,
                })
            })
            .collect()
    }

    async fn record_event(&self, event: NewEvent) -> Result<(), StoreError> {
        let mut conn = self.pool.acquire().await.map_err(classify)?;
        insert_event(&mut conn, &event).await
    }

    async fn job(&self, id: JobId) -> Result<Option<Job>, StoreError> {
        let row = sqlx::query("select * from jobs where id = $1")
            .bind(id.0)
            .fetch_optional(&self.pool)
            .await
            .map_err(classify)?;
        row.as_ref().map(job_from_row).transpose()
    }

    async fn job_by_key(
        &self,
        owner: &OwnerId,
        key: &IdempotencyKey,
    ) -> Result<Option<Job>, StoreError> {
        let row = sqlx::query("select * from jobs where owner_id = $1 and idempotency_key = $2")
            .bind(&owner.0)
            .bind(key.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(classify)?;
        row.as_ref().map(job_from_row).transpose()
    }

    async fn jobs_needing_attempt(&self, free: &FreeSlots) -> Result<Vec<Job>, StoreError> {
        let (providers, limits): (Vec<&str>, Vec<i64>) = free
            .per_provider
            .iter()
            .map(|(provider, n)| (provider.as_str(), i64::from(*n)))
            .unzip();
        let saturated: Vec<&str> = free.saturated().collect();
        fetch_decoded(
            sqlx::query(JOBS_NEEDING_ATTEMPT_SQL)
                .bind(providers)
                .bind(limits)
                .bind(i64::from(free.others))
                .bind(saturated),
            &self.pool,
            job_from_row,
        )
        .await
    }

    async fn attempts_in_states(
        &self,
        states: &[AttemptState],
        after: PageAfter<AttemptId>,
        limit: u32,
    ) -> Result<Vec<Attempt>, StoreError> {
        // Each state once: the lateral read below runs once per entry.
        let states: Vec<&str> = states
            .iter()
            .map(|s| s.as_str())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        fetch_decoded(
            // Each state's oldest, through the partial index on (state,
            // started_at); then all of them oldest first.
            sqlx::query(
                "select a.* from unnest($1::text[]) as s(state)
                 cross join lateral (
                   select * from attempts
                    where attempts.state = s.state
                      and ($2::timestamptz is null or (started_at, id) > ($2, $3))
                    order by started_at, id
                    limit $4) as a
                 order by a.started_at, a.id",
            )
            .bind(&states)
            .bind(after.map(|(at, _)| at))
            .bind(after.map(|(_, id)| id.0))
            .bind(i64::from(limit)),
            &self.pool,
            attempt_from_row,
        )
        .await
    }

    async fn attempt(&self, id: AttemptId) -> Result<Option<Attempt>, StoreError> {
        let row = sqlx::query("select * from attempts where id = $1")
            .bind(id.0)
            .fetch_optional(&self.pool)
            .await
            .map_err(classify)?;
        row.as_ref().map(attempt_from_row).transpose()
    }

    async fn attempts(&self, job_id: JobId) -> Result<Vec<Attempt>, StoreError> {
        fetch_decoded(
            sqlx::query("select * from attempts where job_id = $1 order by seq").bind(job_id.0),
            &self.pool,
            attempt_from_row,
        )
        .await
    }

    async fn events(&self, job_id: JobId) -> Result<Vec<Event>, StoreError> {
        // One statement, so that the job's row and its events are read in
        // one snapshot. The first row is `shared::created_event` in SQL (the
        // conformance suite holds the two stores to the same answer).
        fetch_decoded(
            sqlx::query(
                "select * from (
                   select 0::bigint as seq, id as job_id, null::uuid as attempt_id,
                          created_at as at, $2::text as kind,
                          jsonb_build_object('fingerprint', request_fingerprint) as detail
                     from jobs where id = $1
                   union all
                   select seq, job_id, attempt_id, at, kind, detail
                     from job_events where job_id = $1
                 ) trace
                 order by seq",
            )
            .bind(job_id.0)
            .bind(EventKind::Created.as_str()),
            &self.pool,
            event_from_row,
        )
        .await
    }

    async fn dump(&self) -> Result<StoreDump, StoreError> {
        let mut tx = self.begin().await?;
        sqlx::query("set transaction isolation level repeatable read")
            .execute(&mut *tx)
            .await
            .map_err(classify)?;
        let jobs = fetch_decoded(
            sqlx::query(
                "select * from jobs
                  order by owner_id collate \"C\", idempotency_key collate \"C\", created_at, id",
            ),
            &mut *tx,
            job_from_row,
        )
        .await?;
        let attempts = fetch_decoded(
            sqlx::query("select * from attempts order by job_id, seq"),
            &mut *tx,
            attempt_from_row,
        )
        .await?;
        let events = fetch_decoded(
            sqlx::query("select * from job_events order by seq"),
            &mut *tx,
            event_from_row,
        )
        .await?;
        tx.commit().await.map_err(classify)?;
        Ok(StoreDump {
            jobs,
            attempts,
            events,
        })
    }

    async fn jobs_of_owner(
        &self,
        owner: &OwnerId,
        after: PageAfter<JobId>,
        limit: u32,
    ) -> Result<Vec<Job>, StoreError> {
        fetch_decoded(
            sqlx::query(
                // `created_at is not null` (always true) names the
                // predicate of the partial index jobs_by_owner (migration
                // 0003), which serves this order.
                "select * from jobs
                  where owner_id = $1 and created_at is not null
                    and ($2::timestamptz is null or (created_at, id) < ($2, $3))
                  order by created_at desc, id desc
                  limit $4",
            )
            .bind(&owner.0)
            .bind(after.map(|(at, _)| at))
            .bind(after.map(|(_, id)| id.0))
            .bind(i64::from(limit)),
            &self.pool,
            job_from_row,
        )
        .await
    }

    async fn attempts_page(
        &self,
        state: AttemptState,
        after: PageAfter<AttemptId>,
        limit: u32,
    ) -> Result<Vec<Attempt>, StoreError> {
        fetch_decoded(
            sqlx::query(
                "select * from attempts
                  where state = $1
                    and ($2::timestamptz is null or (started_at, id) > ($2, $3))
                  order by started_at, id
                  limit $4",
            )
            .bind(state.as_str())
            .bind(after.map(|(at, _)| at))
            .bind(after.map(|(_, id)| id.0))
            .bind(i64::from(limit)),
            &self.pool,
            attempt_from_row,
        )
        .await
    }

    async fn attempt_census(&self) -> Result<AttemptCensus, StoreError> {
        let rows = sqlx::query(
            "select state, count(*) as n, min(started_at) as oldest from attempts group by state",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(classify)?;
        let mut counts = Vec::new();
        let mut oldest_unknown = None;
        for row in &rows {
            let state: AttemptState = parse_state(row.try_get("state").map_err(classify)?)?;
            counts.push((state, row.try_get::<i64, _>("n").map_err(classify)?));
            if state == AttemptState::Unknown {
                oldest_unknown = row.try_get("oldest").map_err(classify)?;
            }
        }
        Ok(AttemptCensus::of(counts, oldest_unknown))
    }

    async fn prune_jobs(
        &self,
        updated_before: Timestamp,
        limit: u32,
    ) -> Result<Vec<JobId>, StoreError> {
        let mut tx = self.begin().await?;
        // Prunes run one at a time: two that raced for the same rows would
        // each lock fewer than `limit`, which no serial order gives.
        sqlx::query("select pg_advisory_xact_lock($1)")
            .bind(PRUNE_LOCK_KEY)
            .execute(&mut *tx)
            .await
            .map_err(classify)?;
        let ids = lock_prunable_jobs(&mut tx, updated_before, limit).await?;
        if ids.is_empty() {
            tx.commit().await.map_err(classify)?;
            return Ok(Vec::new());
        }
        // Lock the attempts too, so that an event naming one of them that is
        // being written now either commits before the delete below reads
        // (and is deleted) or waits and then finds its attempt gone.
        sqlx::query("select 1 from attempts where job_id = any($1) for update")
            .bind(&ids)
            .execute(&mut *tx)
            .await
            .map_err(classify)?;
        // One statement: jobs.completed_by and attempts.job_id reference each
        // other, and foreign keys are checked at its end.
        sqlx::query(
            "with pruned_events as (
                  delete from job_events
                   where job_id = any($1)
                      or attempt_id in (select id from attempts where job_id = any($1))),
                  pruned_attempts as (delete from attempts where job_id = any($1))
             delete from jobs where id = any($1)",
        )
        .bind(&ids)
        .execute(&mut *tx)
        .await
        .map_err(classify)?;
        tx.commit().await.map_err(classify)?;
        Ok(ids.into_iter().map(JobId).collect())
    }
}
