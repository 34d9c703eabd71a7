//! The statements whose shape depends on the design under test: the
//! product's, with every constraint in force, and (bench only) those of a
//! naive design whose schema lacks one, as `idem real --design` runs them.

use super::PgStore;
#[cfg(feature = "bench")]
use super::classify;
#[cfg(feature = "bench")]
use crate::store::StoreError;
#[cfg(feature = "bench")]
use crate::store::mem::Constraints;

/// The create-or-get statement (see [`PgStore::try_create`]), with the
/// `ON CONFLICT` arbiter it names and the condition that finds the row
/// holding the key.
macro_rules! create_job_sql {
    ($arbiter:literal) => {
        create_job_sql!(
            $arbiter,
            "found.owner_id = $2 and found.idempotency_key = $3"
        )
    };
    ($arbiter:literal, $holder:literal) => {
        concat!(
            "with ins as (
               insert into jobs (id, owner_id, idempotency_key, request_fingerprint, request,
                                 provider, fallbacks, state, version, created_at, updated_at)
               values ($1, $2, $3, $4, $5::jsonb, $6, $7, 'pending', 0, $8, $8)
               on conflict ",
            $arbiter,
            " do nothing
               returning *
             )
             select true as inserted, ins.*, null::text as request_text from ins
             union all
             select false, found.*,
                    case when found.request_fingerprint = $4 then null
                         else found.request::text end
               from jobs found
              where ",
            $holder,
            "
                and not exists (select from ins)"
        )
    };
}

/// The completion's update (see [`PgStore::complete`]), guarded by `$guard`.
macro_rules! complete_sql {
    ($guard:literal) => {
        concat!(
            "update jobs
                set result = $3, completed_by = $4, version = version + 1,
                    state = 'succeeded', updated_at = $5
              where id = $1 and ",
            $guard,
            "
              returning *"
        )
    };
}

/// The create: one intent, one row, by `unique (owner_id, idempotency_key)`.
const CREATE_JOB_SQL: &str = create_job_sql!("(owner_id, idempotency_key)");
/// The compare-and-swap: exactly one attempt's result is ever written.
const COMPLETE_SQL: &str = complete_sql!("version = $2 and completed_by is null");

/// The product's statements: every constraint is in force.
#[cfg(not(feature = "bench"))]
impl PgStore {
    pub(super) fn create_job_sql(&self) -> &'static str {
        CREATE_JOB_SQL
    }

    pub(super) fn complete_sql(&self) -> &'static str {
        COMPLETE_SQL
    }
}

/// The global-key design's unique index: the key alone.
#[cfg(feature = "bench")]
const JOBS_KEY_GLOBAL: &str = "jobs_key_global";

/// The bench's stores for naive designs, whose schema lacks a constraint
/// (as [`MemStore::with_constraints`](crate::store::mem::MemStore::with_constraints)
/// does in process): `idem real --design` runs them against PostgreSQL.
#[cfg(feature = "bench")]
impl PgStore {
    /// This store, for a schema that enforces only `constraints`: the
    /// statements that rely on a missing one do without it. The schema
    /// itself is changed once, by [`PgStore::drop_missing_constraints`].
    pub fn with_constraints(mut self, constraints: Constraints) -> Self {
        self.constraints = constraints;
        self
    }

    /// Drops from the migrated schema what this store's constraints lack:
    /// `unique (owner_id, idempotency_key)` (check-then-insert; made
    /// `unique (idempotency_key)` for global-key) and the partial unique
    /// index `attempts_one_open` (unguarded-attempts). The
    /// compare-and-swap lives in a statement, not in the schema. Every
    /// statement may run again (each `idem serve` process runs them).
    pub async fn drop_missing_constraints(&self) -> Result<(), StoreError> {
        let mut ddl = Vec::new();
        if !self.constraints.owner_key_unique || self.constraints.key_global {
            ddl.push(format!(
                "alter table jobs drop constraint if exists {}",
                crate::store::constraint::JOBS_OWNER_KEY
            ));
        }
        if self.constraints.owner_key_unique && self.constraints.key_global {
            ddl.push(format!(
                "create unique index if not exists {JOBS_KEY_GLOBAL} on jobs (idempotency_key)"
            ));
        }
        if !self.constraints.one_open_attempt {
            ddl.push(format!(
                "drop index if exists {}",
                crate::store::constraint::ATTEMPTS_ONE_OPEN
            ));
        }
        for statement in ddl {
            sqlx::query(sqlx::AssertSqlSafe(statement))
                .execute(&self.pool)
                .await
                .map_err(classify)?;
        }
        Ok(())
    }

    pub(super) fn create_job_sql(&self) -> &'static str {
        match (
            self.constraints.owner_key_unique,
            self.constraints.key_global,
        ) {
            (true, false) => CREATE_JOB_SQL,
            // The key is anyone's: its row is found whoever's it is.
            (true, true) => create_job_sql!("(idempotency_key)", "found.idempotency_key = $3"),
            // No arbiter to name: only the primary key stops an insert.
            (false, _) => create_job_sql!(""),
        }
    }

    pub(super) fn complete_sql(&self) -> &'static str {
        match (
            self.constraints.completion_cas,
            self.constraints.completion_cas_swapped,
        ) {
            (true, false) => COMPLETE_SQL,
            (true, true) => complete_sql!("version = $2 and completed_by is not null"),
            // $2 is still bound: a parameter the statement never reads.
            (false, _) => complete_sql!("$2::bigint is not null"),
        }
    }
}
