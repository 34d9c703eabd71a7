//! The store host: a throwaway PostgreSQL cluster that real mode starts
//! and removes itself (`idem_core::testing::pg::Cluster`, as the tests
//! do, as the postgres user when run as root), or a server the user names
//! with `--database-url`, in a schema of the run's own.
//!
//! Prepared before any engine process starts: migrated, without the
//! constraints the design under test lacks, with the providers'
//! certificates on file, and with a logical decoding slot from which the
//! store's history is read ([`super::wal`]).

use std::net::SocketAddr;
use std::path::Path;

use idem_core::design::Design;
use idem_core::store::mem::Constraints;
use idem_core::store::pg::{PgStore, SCHEMA_DEFAULT};
use idem_core::store::{Store, StoreDump};
use idem_core::testing::pg::{Cluster, pg_bin_dir};
use sqlx::{Connection, PgConnection, Row};

use super::RealError;
use super::wal::WalReader;

/// The throwaway cluster's settings on top of the tests' defaults: its
/// history readable by logical decoding, and every acknowledged commit in
/// the log before it is acknowledged, so that a crash of the server
/// (`pg_ctl stop -m immediate`) loses nothing it acknowledged, as with a
/// production server.
const CLUSTER_SETTINGS: &[(&str, &str)] = &[
    ("wal_level", "logical"),
    ("max_replication_slots", "8"),
    ("synchronous_commit", "on"),
    ("timezone", "UTC"),
];

/// How long a server that accepts connections may go on starting up, in
/// polls.
const STARTUP_POLLS_MAX: u32 = 300;
const STARTUP_POLL_MS: u64 = 100;

/// The database real mode makes on its own cluster.
const DATABASE: &str = "idem_real";

/// Connections the harness's own store keeps (certificates, the
/// quiescence check, the final dump).
const HARNESS_CONNECTIONS_MAX: u32 = 2;

/// Where the store is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Database {
    /// A cluster of real mode's own, started and removed with the run.
    Throwaway,
    /// A server the user runs (`--database-url`): the run uses a schema
    /// of its own there and drops it at the end. The server must allow
    /// logical decoding (`wal_level = logical`). Its crash cannot be made
    /// real: idem did not start it.
    Url(String),
}

/// The store of a run.
#[derive(Debug)]
pub struct StoreHost {
    cluster: Option<Cluster>,
    /// The database's URL, naming the server directly.
    url: String,
    schema: String,
    /// The harness's own connection to it (not through any link).
    store: PgStore,
}

/// `url` with its host and port replaced by `address`.
pub fn with_address(url: &str, address: SocketAddr) -> String {
    let scheme_end = url.find("://").map_or(0, |i| i + 3);
    let rest = &url[scheme_end..];
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let userinfo = authority
        .rfind('@')
        .map_or(String::new(), |at| authority[..=at].to_owned());
    format!(
        "{}{userinfo}{address}{}",
        &url[..scheme_end],
        &rest[authority_end..]
    )
}

fn database_error(what: &str) -> impl Fn(String) -> RealError + '_ {
    move |e| RealError::Start(format!("{what}: {e}"))
}

/// Connects to a server that accepts connections but may still be
/// starting up (recovering), trying again for a bounded time.
async fn connect_when_up(url: &str) -> Result<PgConnection, RealError> {
    let mut last = String::new();
    for _ in 0..STARTUP_POLLS_MAX {
        match PgConnection::connect(url).await {
            Ok(connection) => return Ok(connection),
            Err(e) => last = e.to_string(),
        }
        idem_core::timer::sleep(std::time::Duration::from_millis(STARTUP_POLL_MS)).await;
    }
    Err(RealError::Start(format!("cannot reach PostgreSQL: {last}")))
}

/// Starts a throwaway cluster and makes real mode's database on it: the
/// cluster (removed when dropped) and the database's URL.
async fn start_throwaway() -> Result<(Cluster, String), RealError> {
    let cluster = tokio::task::spawn_blocking(|| Cluster::start(CLUSTER_SETTINGS))
        .await
        .map_err(|e| RealError::Start(e.to_string()))?
        .map_err(database_error("cannot start PostgreSQL"))?;
    let server = cluster.server_url();
    let mut admin = connect_when_up(&format!("{server}/postgres")).await?;
    sqlx::query(sqlx::AssertSqlSafe(format!("create database {DATABASE}")))
        .execute(&mut admin)
        .await
        .map_err(|e| database_error("cannot create the database")(e.to_string()))?;
    let _ = admin.close().await;
    Ok((cluster, format!("{server}/{DATABASE}")))
}

/// Migrates the store, then drops the constraints the design under test
/// lacks, so the schema is the one that design would run on.
async fn migrate_for_design(store: &PgStore) -> Result<(), RealError> {
    store
        .migrate()
        .await
        .map_err(|e| database_error("migration failed")(e.to_string()))?;
    store
        .drop_missing_constraints()
        .await
        .map_err(|e| database_error("cannot shape the schema for the design")(e.to_string()))?;
    Ok(())
}

impl StoreHost {
    /// Starts (or reaches) the store and, with `migrate`, migrates it for
    /// `design` (a black-box target gets the database empty).
    pub async fn open(
        database: &Database,
        design: Design,
        migrate: bool,
    ) -> Result<Self, RealError> {
        let (cluster, url, schema) = match database {
            Database::Throwaway => {
                let (cluster, url) = start_throwaway().await?;
                (Some(cluster), url, SCHEMA_DEFAULT.to_owned())
            }
            Database::Url(url) => (
                None,
                url.clone(),
                format!("idem_real_{}", std::process::id()),
            ),
        };
        let store = PgStore::connect(&url, &schema, HARNESS_CONNECTIONS_MAX)
            .await
            .map_err(|e| database_error("cannot connect to the database")(e.to_string()))?
            .with_constraints(Constraints::for_design(design));
        if migrate {
            migrate_for_design(&store).await?;
        }
        Ok(Self {
            cluster,
            url,
            schema,
            store,
        })
    }

    /// The database's URL, naming the server directly.
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// The server's own address (what the links to the store forward to).
    pub fn address(&self) -> Result<SocketAddr, RealError> {
        let scheme_end = self.url.find("://").map_or(0, |i| i + 3);
        let rest = &self.url[scheme_end..];
        let authority = &rest[..rest.find(['/', '?']).unwrap_or(rest.len())];
        let host_port = authority.rsplit('@').next().unwrap_or(authority);
        let host_port = if host_port.contains(':') {
            host_port.to_owned()
        } else {
            format!("{host_port}:5432")
        };
        std::net::ToSocketAddrs::to_socket_addrs(&host_port)
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| RealError::Start(format!("cannot resolve the database at {host_port}")))
    }

    /// Whether the store can be crashed: only a cluster real mode started.
    pub fn can_crash(&self) -> bool {
        self.cluster.is_some()
    }

    /// The harness's own connection to the store.
    pub fn store(&self) -> &PgStore {
        &self.store
    }

    /// Starts reading the store's history from now on: a slot of the run's
    /// own (a temporary one on a server real mode did not start, so that a
    /// killed run leaves no slot holding that server's log).
    pub async fn history(&self) -> Result<WalReader, RealError> {
        let slot = format!("idem_real_{}", std::process::id());
        WalReader::create(&self.url, &slot, self.cluster.is_none())
            .await
            .map_err(RealError::Start)
    }

    /// The server crashes (`pg_ctl stop -m immediate`).
    pub fn crash(&mut self) -> Result<(), RealError> {
        let cluster = self.cluster.as_mut().ok_or_else(|| {
            RealError::Run("the store cannot crash: real mode did not start it".to_owned())
        })?;
        tokio::task::block_in_place(|| cluster.stop_immediate()).map_err(RealError::Run)
    }

    /// The server starts again on its data (recovery runs).
    pub fn restart(&mut self) -> Result<(), RealError> {
        let Some(cluster) = self.cluster.as_mut() else {
            return Ok(());
        };
        tokio::task::block_in_place(|| cluster.restart()).map_err(RealError::Run)
    }

    /// Whether every job and every attempt is terminal (the simulator's
    /// quiescence); `false` while the store does not answer.
    pub async fn settled(&self) -> bool {
        let open = sqlx::query(
            "select (select count(*) from jobs where state not in ('succeeded', 'failed'))
                  + (select count(*) from attempts
                      where state in ('starting', 'running', 'unknown')) as open",
        )
        .fetch_one(self.store.pool())
        .await;
        open.ok()
            .and_then(|row| row.try_get::<i64, _>("open").ok())
            .is_some_and(|n| n == 0)
    }

    /// The store's final state.
    pub async fn dump(&self) -> Result<StoreDump, RealError> {
        self.store
            .dump()
            .await
            .map_err(|e| RealError::Run(format!("cannot read the store's final state: {e}")))
    }

    /// Removes what the run made: the cluster, or the run's schema on the
    /// user's server. With `keep`, the database is first written there as
    /// `database.sql` (pg_dump's plain format: `psql -f` restores it), so
    /// what a target or the engine left can be read after the run.
    pub async fn close(self, keep: Option<&Path>) -> Result<(), RealError> {
        let kept = match keep {
            Some(dir) => self.dump_sql(&dir.join("database.sql")).await,
            None => Ok(()),
        };
        self.remove().await;
        kept
    }

    /// The database as SQL in `path`, by pg_dump.
    async fn dump_sql(&self, path: &Path) -> Result<(), RealError> {
        let bin = pg_bin_dir().map_err(RealError::Run)?;
        let mut command = tokio::process::Command::new(bin.join("pg_dump"));
        command
            .arg("--dbname")
            .arg(&self.url)
            .arg("--file")
            .arg(path);
        if self.cluster.is_none() {
            command.arg("--schema").arg(&self.schema);
        }
        let output = command
            .output()
            .await
            .map_err(|e| RealError::Run(format!("pg_dump: {e}")))?;
        if output.status.success() {
            return Ok(());
        }
        let said = String::from_utf8_lossy(&output.stderr);
        Err(RealError::Run(format!(
            "pg_dump could not keep the database in {}: {}",
            path.display(),
            said.trim()
        )))
    }

    async fn remove(mut self) {
        if self.cluster.take().is_none() {
            let drop = format!("drop schema if exists {} cascade", self.schema);
            let _ = sqlx::query(sqlx::AssertSqlSafe(drop))
                .execute(self.store.pool())
                .await;
        }
        self.store.pool().close().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_points_at_another_address_keeping_the_rest() {
        let to = SocketAddr::from(([127, 0, 0, 1], 4000));
        assert_eq!(
            with_address("postgres://u:p@db.example:5432/idem?sslmode=disable", to),
            "postgres://u:p@127.0.0.1:4000/idem?sslmode=disable"
        );
        assert_eq!(
            with_address("postgres://127.0.0.1:1/x", to),
            "postgres://127.0.0.1:4000/x"
        );
    }
}
