//! A throwaway PostgreSQL cluster for tests.
//!
//! Unless `DATABASE_URL` names a server, the first test that asks starts one
//! from the installed binaries: `initdb` into a temporary directory, a free
//! loopback port, durability switched off (a test database is disposable).
//! As root it runs everything as the `postgres` user, because PostgreSQL
//! refuses to run as root. A detached watchdog stops the cluster and removes
//! its directory once the test process has exited.
//!
//! [`Cluster`] is one such cluster on its own, for a caller that needs one
//! per run and to crash and restart it (`idem real`).
//!
//! Each test gets its own database, cloned from a migrated template, so
//! tests run concurrently without seeing each other's rows.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use sqlx::Executor;
use sqlx::postgres::PgPoolOptions;

use crate::store::pg::{PgStore, SCHEMA_DEFAULT, connect_options, migrator, pool_options};

const TEMPLATE_DB: &str = "idem_template";
/// How long the cluster may take to accept connections, in 100 ms polls.
const READY_POLLS_MAX: u32 = 300;
/// Ports tried for a new cluster, at most: each was free when drawn.
const PORT_TRIES_MAX: u32 = 4;

/// Why a server did not start.
#[derive(Debug, thiserror::Error)]
enum ServerStart {
    /// It exited: most often its port was taken after it was drawn.
    #[error("{0}")]
    Exited(String),
    /// It did not become ready in time, or could not be launched.
    #[error("{0}")]
    NotReady(String),
}

impl From<String> for ServerStart {
    fn from(message: String) -> Self {
        ServerStart::NotReady(message)
    }
}
/// Connections per test database: enough for the 32-way concurrency tests.
const TEST_POOL_CONNECTIONS_MAX: u32 = 40;

/// A running cluster (or a server named by `DATABASE_URL`).
#[derive(Debug)]
pub struct PgCluster {
    /// URL of the maintenance database, without a database name's suffix.
    server_url: String,
    next_db: AtomicU32,
    /// The cluster this process started, if it started one. Kept in a
    /// static, which is never dropped: the watchdog removes it once the
    /// process is gone.
    _cluster: Option<Cluster>,
}

static CLUSTER: OnceLock<Result<PgCluster, String>> = OnceLock::new();

/// The process-wide cluster, started on first use. Panics with the reason if
/// no cluster can be had: a test that needs PostgreSQL fails, it never skips.
pub fn cluster() -> &'static PgCluster {
    try_cluster().unwrap_or_else(|e| panic!("{e}"))
}

/// The process-wide cluster, started on first use, or why there is none
/// (for a command that must say so and exit, where a test would panic).
/// A failed start is remembered: it is not tried again in this process.
pub fn try_cluster() -> Result<&'static PgCluster, String> {
    CLUSTER
        .get_or_init(|| {
            // Initialization is async (migrating the template) but may be
            // called from inside a runtime, so it runs on a thread of its own.
            std::thread::spawn(|| {
                let (server_url, cluster) = match std::env::var("DATABASE_URL") {
                    Ok(url) if !url.is_empty() => (server_part(&url), None),
                    _ => start_cluster()
                        .map(|(url, cluster)| (url, Some(cluster)))
                        .map_err(|e| format!("cannot start PostgreSQL: {e}"))?,
                };
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| format!("a tokio runtime: {e}"))?;
                runtime
                    .block_on(prepare_template(&server_url))
                    .map_err(|e| format!("cannot prepare the template database: {e}"))?;
                Ok(PgCluster {
                    server_url,
                    next_db: AtomicU32::new(0),
                    _cluster: cluster,
                })
            })
            .join()
            .unwrap_or_else(|_| Err("the cluster start-up thread panicked".to_owned()))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// A fresh, migrated database of its own, as a store.
pub async fn fresh_store() -> PgStore {
    let url = cluster().fresh_database_url().await;
    let options = connect_options(&url, SCHEMA_DEFAULT)
        .unwrap_or_else(|e| panic!("cannot connect to {url}: {e}"));
    // The server's pool settings, so that tests run what a server runs.
    let pool = pool_options(TEST_POOL_CONNECTIONS_MAX)
        .connect_with(options)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {url}: {e}"));
    PgStore::new(pool, SCHEMA_DEFAULT)
}

impl PgCluster {
    /// `postgres://user@host:port`: the server, naming no database.
    pub fn server_url(&self) -> &str {
        &self.server_url
    }

    /// Creates a new database from the migrated template and returns its URL.
    pub async fn fresh_database_url(&self) -> String {
        let n = self.next_db.fetch_add(1, Ordering::SeqCst);
        let name = format!("idem_test_{}_{n}", std::process::id());
        let admin = PgPoolOptions::new()
            .max_connections(1)
            .connect(&format!("{}/postgres", self.server_url))
            .await
            .expect("admin connection");
        admin
            .execute(sqlx::AssertSqlSafe(format!(
                "drop database if exists {name}; "
            )))
            .await
            .expect("drop stale test database");
        admin
            .execute(sqlx::AssertSqlSafe(format!(
                "create database {name} template {TEMPLATE_DB}"
            )))
            .await
            .expect("create test database");
        admin.close().await;
        format!("{}/{name}", self.server_url)
    }
}

/// `postgres://user@host:port/db` -> `postgres://user@host:port`.
fn server_part(url: &str) -> String {
    let scheme_end = url.find("://").map_or(0, |i| i + 3);
    match url[scheme_end..].find('/') {
        Some(slash) => url[..scheme_end + slash].to_owned(),
        None => url.to_owned(),
    }
}

async fn prepare_template(server_url: &str) -> Result<(), String> {
    let admin = PgPoolOptions::new()
        .max_connections(1)
        .connect(&format!("{server_url}/postgres"))
        .await
        .map_err(|e| e.to_string())?;
    // A template left over from another process on a shared server is
    // rebuilt, so that it always has this build's migrations.
    admin
        .execute(sqlx::AssertSqlSafe(format!(
            "drop database if exists {TEMPLATE_DB}"
        )))
        .await
        .map_err(|e| e.to_string())?;
    admin
        .execute(sqlx::AssertSqlSafe(format!(
            "create database {TEMPLATE_DB}"
        )))
        .await
        .map_err(|e| e.to_string())?;
    admin.close().await;
    let options = connect_options(&format!("{server_url}/{TEMPLATE_DB}"), SCHEMA_DEFAULT)
        .map_err(|e| e.to_string())?;
    let template = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .map_err(|e| e.to_string())?;
    migrator(SCHEMA_DEFAULT)
        .run(&template)
        .await
        .map_err(|e| e.to_string())?;
    template.close().await;
    Ok(())
}

/// The directory holding `initdb` and `postgres`.
pub fn pg_bin_dir() -> Result<PathBuf, String> {
    if let Ok(dir) = std::env::var("IDEM_PG_BIN") {
        return Ok(PathBuf::from(dir));
    }
    let mut candidates: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.path().join("bin"))
                .filter(|p| p.join("initdb").exists())
                .collect()
        })
        .unwrap_or_default();
    candidates.sort();
    if let Some(dir) = candidates.pop() {
        return Ok(dir);
    }
    Err("no PostgreSQL binaries: set IDEM_PG_BIN or DATABASE_URL".to_owned())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// A command that runs `program` as the postgres user when we are root.
fn as_cluster_user(program: &Path, root: bool) -> Command {
    if root {
        let mut cmd = Command::new("runuser");
        cmd.args(["-u", "postgres", "--"]).arg(program);
        cmd
    } else {
        Command::new(program)
    }
}

fn free_port() -> Result<u16, String> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(listener.local_addr().map_err(|e| e.to_string())?.port())
}

/// The settings every throwaway cluster starts with: loopback only, and
/// durability switched off (a test database is disposable). `fsync = off`
/// loses nothing while the machine stays up, so a crash of the server
/// process alone (`pg_ctl stop -m immediate`) keeps every commit it
/// acknowledged; `synchronous_commit = off` does not (a commit may be
/// acknowledged before its WAL leaves shared memory), so a caller that
/// crashes the server on purpose turns it back on.
const SETTINGS_DEFAULT: &[(&str, &str)] = &[
    ("listen_addresses", "127.0.0.1"),
    ("fsync", "off"),
    ("synchronous_commit", "off"),
    ("full_page_writes", "off"),
    ("max_connections", "400"),
];

/// One throwaway cluster, started from the installed binaries: `initdb`
/// into a temporary directory, a free loopback port. It is stopped and its
/// directory removed when dropped, and by a detached watchdog once this
/// process is gone, however it went (even `kill -9`).
#[derive(Debug)]
pub struct Cluster {
    bin: PathBuf,
    root: bool,
    /// The temporary directory: the data directory, the socket, the log.
    dir: PathBuf,
    port: u16,
    /// `-c` settings, in order (a later one overrides an earlier one).
    settings: Vec<(String, String)>,
    server: Option<Child>,
}

impl Cluster {
    /// Starts a cluster with [`SETTINGS_DEFAULT`] and then `settings`
    /// (which override the defaults), and waits until it accepts
    /// connections.
    pub fn start(settings: &[(&str, &str)]) -> Result<Self, String> {
        Self::start_on(free_port()?, settings)
    }

    /// [`Cluster::start`], trying `port` first.
    fn start_on(port: u16, settings: &[(&str, &str)]) -> Result<Self, String> {
        let bin = pg_bin_dir()?;
        let root = is_root();
        let dir = tempfile::Builder::new()
            .prefix("idem-pg-")
            .tempdir()
            .map_err(|e| e.to_string())?
            .keep();
        // The watchdog first: from here on the directory is removed
        // whatever happens to this process.
        spawn_watchdog(&bin, root, &dir.join("data"), &dir)?;
        let mut cluster = Self {
            bin,
            root,
            dir,
            port,
            settings: SETTINGS_DEFAULT
                .iter()
                .chain(settings)
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            server: None,
        };
        cluster.init()?;
        // The port was free when it was drawn, but another cluster (another
        // test, another run) may have taken it since: then this server
        // exits at once, and a fresh port is tried.
        for _ in 1..PORT_TRIES_MAX {
            match cluster.run_server() {
                Err(ServerStart::Exited(_)) => cluster.port = free_port()?,
                other => return other.map(|()| cluster).map_err(|e| e.to_string()),
            }
        }
        cluster.run_server().map_err(|e| e.to_string())?;
        Ok(cluster)
    }

    /// `postgres://postgres@127.0.0.1:PORT`: the server, naming no database.
    pub fn server_url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The cluster's temporary directory (data directory, socket, log).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// What the server has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("postgres.log")).unwrap_or_default()
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn init(&self) -> Result<(), String> {
        if self.root {
            let status = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&self.dir)
                .status()
                .map_err(|e| e.to_string())?;
            if !status.success() {
                return Err(format!("chown {} to postgres failed", self.dir.display()));
            }
        }
        let initdb = as_cluster_user(&self.bin.join("initdb"), self.root)
            .arg("-D")
            .arg(self.data())
            .args(["-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync"])
            .stdout(Stdio::null())
            .output()
            .map_err(|e| format!("initdb: {e}"))?;
        if !initdb.status.success() {
            return Err(format!(
                "initdb failed: {}",
                String::from_utf8_lossy(&initdb.stderr)
            ));
        }
        Ok(())
    }

    /// Starts the server on the cluster's data directory and port, and
    /// waits until it accepts connections.
    fn run_server(&mut self) -> Result<(), ServerStart> {
        // pg_stat_statements, where it is installed, lets the speed bench
        // count the statements each request costs; it changes no query's
        // result.
        let preload = if self.bin.join("../lib/pg_stat_statements.so").exists() {
            "pg_stat_statements"
        } else {
            ""
        };
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("postgres.log"))
            .map_err(|e| e.to_string())?;
        let mut server = as_cluster_user(&self.bin.join("postgres"), self.root);
        server
            .arg("-D")
            .arg(self.data())
            .args(["-p", &self.port.to_string(), "-k"])
            .arg(&self.dir)
            .args(["-c", &format!("shared_preload_libraries={preload}")]);
        for (name, value) in &self.settings {
            server.args(["-c", &format!("{name}={value}")]);
        }
        let child = server
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("postgres: {e}"))?;
        self.server = Some(child);
        self.await_ready()
    }

    /// Waits until this cluster's own server is ready, or has exited.
    fn await_ready(&mut self) -> Result<(), ServerStart> {
        for _ in 0..READY_POLLS_MAX {
            if let Some(server) = &mut self.server
                && let Ok(Some(status)) = server.try_wait()
            {
                self.server = None;
                return Err(ServerStart::Exited(format!(
                    "postgres exited ({status}) before it was ready on port {}:\n{}",
                    self.port,
                    self.log()
                )));
            }
            // Ready by its own postmaster.pid, not by a connection: a
            // connection to the port may reach another server that holds it.
            if self.is_ready() && TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(ServerStart::NotReady(format!(
            "postgres did not accept connections on port {}:\n{}",
            self.port,
            self.log()
        )))
    }

    /// Whether this cluster's own server says it is ready: the last line
    /// of `postmaster.pid` is its status, and the fourth its port.
    fn is_ready(&self) -> bool {
        let Ok(pid_file) = std::fs::read_to_string(self.data().join("postmaster.pid")) else {
            return false;
        };
        let lines: Vec<&str> = pid_file.lines().map(str::trim).collect();
        lines.get(3) == Some(&self.port.to_string().as_str()) && lines.get(7) == Some(&"ready")
    }

    /// Crashes the server as a power cut would its processes: `pg_ctl stop
    /// -m immediate` (no checkpoint, no goodbye to clients; recovery runs
    /// at the next start). The data directory stays.
    pub fn stop_immediate(&mut self) -> Result<(), String> {
        let stopped = as_cluster_user(&self.bin.join("pg_ctl"), self.root)
            .arg("-D")
            .arg(self.data())
            .args(["stop", "-m", "immediate"])
            .stdout(Stdio::null())
            .output()
            .map_err(|e| format!("pg_ctl: {e}"))?;
        if let Some(mut server) = self.server.take() {
            // Reaped, so that no zombie is left behind.
            let _ = server.wait();
        }
        if stopped.status.success() {
            Ok(())
        } else {
            Err(format!(
                "pg_ctl stop failed: {}",
                String::from_utf8_lossy(&stopped.stderr)
            ))
        }
    }

    /// Starts the server again after [`Cluster::stop_immediate`], on the
    /// same data directory and port.
    pub fn restart(&mut self) -> Result<(), String> {
        self.run_server().map_err(|e| e.to_string())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.server.is_some() {
            let _ = self.stop_immediate();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn start_cluster() -> Result<(String, Cluster), String> {
    let cluster = Cluster::start(&[])?;
    Ok((cluster.server_url(), cluster))
}

/// Stops the cluster and removes its directory once this process is gone.
/// Detached with setsid so that it outlives this process and its group.
fn spawn_watchdog(bin: &Path, root: bool, data: &Path, dir: &Path) -> Result<(), String> {
    let run_as = if root { "runuser -u postgres -- " } else { "" };
    let script = format!(
        "while kill -0 {pid} 2>/dev/null; do sleep 1; done; \
         {run_as}'{pg_ctl}' -D '{data}' stop -m immediate >/dev/null 2>&1; rm -rf '{dir}'",
        pid = std::process::id(),
        pg_ctl = bin.join("pg_ctl").display(),
        data = data.display(),
        dir = dir.display(),
    );
    Command::new("setsid")
        .args(["sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("watchdog: {e}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{Cluster, server_part};

    #[test]
    fn server_part_strips_the_database() {
        assert_eq!(
            server_part("postgres://u:p@h:5432/db?x=1"),
            "postgres://u:p@h:5432"
        );
        assert_eq!(server_part("postgres://h:1"), "postgres://h:1");
    }

    /// A port taken between its draw and the server's start (by another
    /// cluster here) is not mistaken for this cluster's server: the start
    /// moves on to a fresh port.
    #[test]
    fn a_taken_port_is_left_for_a_fresh_one() -> Result<(), String> {
        let first = Cluster::start(&[])?;
        let second = Cluster::start_on(first.port(), &[])?;
        assert_ne!(second.port(), first.port());
        assert!(second.is_ready());
        Ok(())
    }
}
