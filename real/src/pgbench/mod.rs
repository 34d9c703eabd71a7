//! The PostgreSQL create path against pgbench, on one throwaway server in
//! one run (issue 14, item 3).
//!
//! Four paths per client count, run back to back so that whatever else the
//! machine is doing weighs on each alike:
//! - `http`: idem's real service (axum, the engine, the pool as
//!   `idem-server` opens it) in this process, on a runtime of its own,
//!   driven over loopback by a compiled HTTP/1 load generator with one
//!   keep-alive connection per client;
//! - `minimal`: a minimal hyper + sqlx service with no idem code in its
//!   request path ([`minimal`]), on a runtime and pool of the same sizes,
//!   running the same statement and giving the same answers, driven by the
//!   same load generator;
//! - `store`: the same `PgStore::create_job`, called directly;
//! - `pgbench`: PostgreSQL's own pgbench running the raw statements such a
//!   create needs at least, `INSERT … ON CONFLICT (owner_id,
//!   idempotency_key) DO NOTHING` and, when the key was taken, the read of
//!   the existing row.
//!
//! The request mix ([`workload`]): about half of the requests repeat an
//! earlier key with the same body, 5% repeat one with another body, the rest
//! are new keys. Every answer is checked: a new key is created, a repeat
//! gets the job id its key was created with, another body is refused; and
//! the table holds exactly the rows the answers name, with no duplicate.
//! The figures to read are `pg_vs_pgbench_throughput_ratio`: idem's
//! requests/s over pgbench's transactions/s at the same client count,
//! measured minutes apart on the same server, which means the same on any
//! machine; and `server_vs_minimal`: idem's server's own CPU per create
//! (its runtime's threads only, so the load generator in the same process
//! is not counted; [`cpu`]) and its requests/s, over the minimal service's.

mod cpu;
mod drive;
mod minimal;
mod pgbench_tool;
mod workload;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sqlx::Row;

use idem_core::store::pg::{PgStore, SCHEMA_DEFAULT};

pub use workload::{MIX, Mix};

/// The most clients a point may have: the pool, the server's
/// `max_connections` and the machine all bound it.
pub const CLIENTS_MAX: u32 = 256;
/// The longest a point may run.
pub const SECONDS_PER_POINT_MAX: u64 = 600;

/// What to run.
#[derive(Clone, Debug)]
pub struct PgBenchArgs {
    /// Client counts, one point per path each.
    pub clients: Vec<u32>,
    /// How long each point runs (pgbench's `-T`, whole seconds).
    pub seconds_per_point: u64,
    /// Seeds each client's choice of keys.
    pub seed: u64,
    /// pgbench; by default the one beside the PostgreSQL server binaries.
    pub pgbench: Option<PathBuf>,
    /// Ping each connection before handing it out (sqlx's default, which
    /// the server's pool turns off), to measure what that costs.
    pub pool_ping: bool,
}

impl Default for PgBenchArgs {
    fn default() -> Self {
        Self {
            clients: vec![1, 8, 32],
            seconds_per_point: 3,
            seed: 1,
            pgbench: None,
            pool_ping: false,
        }
    }
}

/// Why the bench could not run (nothing was measured, or not all of it).
#[derive(Debug, thiserror::Error)]
pub enum PgBenchError {
    #[error("{0}")]
    Usage(String),
    #[error("PostgreSQL: {0}")]
    Database(String),
    #[error("pgbench: {0}")]
    Pgbench(String),
    #[error("the load generator: {0}")]
    Load(String),
}

/// One of the four paths measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BenchPath {
    Http,
    Minimal,
    Store,
    Pgbench,
}

impl BenchPath {
    /// Every path, in the order a client count measures them: the two
    /// services side by side.
    pub const ALL: [BenchPath; 4] = [
        BenchPath::Http,
        BenchPath::Minimal,
        BenchPath::Store,
        BenchPath::Pgbench,
    ];

    pub fn name(self) -> &'static str {
        match self {
            BenchPath::Http => "http",
            BenchPath::Minimal => "minimal",
            BenchPath::Store => "store",
            BenchPath::Pgbench => "pgbench",
        }
    }

    /// The names of the threads that serve this path's requests in this
    /// process, for the paths that have a server of their own.
    fn server_threads(self) -> Option<&'static str> {
        match self {
            BenchPath::Http => Some(drive::THREAD_NAME),
            BenchPath::Minimal => Some(minimal::THREAD_NAME),
            BenchPath::Store | BenchPath::Pgbench => None,
        }
    }
}

/// One path at one client count.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PointReport {
    pub path: BenchPath,
    pub clients: u32,
    /// Requests answered (pgbench: transactions run).
    pub requests: u64,
    pub seconds: f64,
    pub requests_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Answers that were not one the request mix allows (each is also a
    /// violation in [`Checks`]); pgbench: failed transactions.
    pub errors: u64,
    /// Statements PostgreSQL ran per request, `BEGIN`/`COMMIT`/`ROLLBACK`
    /// included (from pg_stat_statements; absent where it is not loaded).
    /// Statements that failed are not counted by pg_stat_statements: see
    /// `rollbacks_per_request`.
    pub statements_per_request: Option<f64>,
    /// `ROLLBACK`s per request: each is a transaction that failed or was
    /// abandoned (a create refused by the unique constraint).
    pub rollbacks_per_request: Option<f64>,
    /// Milliseconds PostgreSQL spent executing (and planning) statements,
    /// per request, summed over every backend (pg_stat_statements): the
    /// server's share of a request's cost, next to the client's.
    pub server_ms_per_request: Option<f64>,
    /// CPU milliseconds the service's own runtime threads spent per
    /// request (user and system, from /proc): `http` and `minimal` only,
    /// and only where /proc can be read. The load generator's threads are
    /// not counted.
    #[serde(default)]
    pub server_cpu_ms_per_create: Option<f64>,
}

/// Each path's throughput over pgbench's at one client count.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RatioAt {
    pub clients: u32,
    pub http: f64,
    #[serde(default)]
    pub minimal: f64,
    pub store: f64,
}

/// idem's service against the minimal one at one client count.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MinimalRatioAt {
    pub clients: u32,
    /// idem's server CPU per create over the minimal service's (issue 24's
    /// target: at most 1.5); None without both CPU readings.
    pub server_cpu_vs_minimal_ratio: Option<f64>,
    /// idem's requests/s over the minimal service's (target: at least 0.8).
    pub http_vs_minimal_throughput_ratio: f64,
}

/// What the answers and the table were checked for.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Checks {
    /// Requests whose answer was checked against the request mix.
    pub requests_checked: u64,
    pub keys_created: u64,
    /// Repeats with the same body answered with their key's original job id.
    pub repeats_same_body: u64,
    /// Repeats with another body refused (and, on the store path, naming the
    /// key's original job id).
    pub repeats_other_body: u64,
    /// (owner, key) pairs with more than one row, over every owner the bench
    /// wrote: must be 0.
    pub duplicate_rows: u64,
    /// Everything that was not as it must be; empty when the bench passes.
    pub violations: Vec<String>,
}

/// The bench's result, serializable for `reports/bench/latest.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PgBenchReport {
    /// `select version()`.
    pub server_version: String,
    pub seconds_per_point: u64,
    pub seed: u64,
    pub mix: Mix,
    /// The pool both idem paths use, as `idem-server` opens it.
    pub pool_connections_max: u32,
    /// Whether the pool pinged each connection before handing it out.
    pub pool_ping: bool,
    pub points: Vec<PointReport>,
    pub pg_vs_pgbench_throughput_ratio: Vec<RatioAt>,
    /// idem's service over the minimal one, per client count.
    #[serde(default)]
    pub server_vs_minimal: Vec<MinimalRatioAt>,
    pub checks: Checks,
}

impl PgBenchReport {
    /// Whether every answer and row was as it must be.
    pub fn passed(&self) -> bool {
        self.checks.violations.is_empty()
    }

    /// A plain-text table of the points and ratios.
    pub fn table(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{:<8} {:>7} {:>9} {:>10} {:>8} {:>8} {:>10} {:>10} {:>11} {:>7}",
            "path",
            "clients",
            "requests",
            "req/s",
            "p50 ms",
            "p99 ms",
            "stmts/req",
            "pg ms/req",
            "cpu ms/req",
            "errors"
        );
        for p in &self.points {
            p.row(&mut out);
        }
        self.ratio_lines(&mut out);
        let c = &self.checks;
        let _ = writeln!(
            out,
            "\nchecked {} answers: {} keys created, {} same-body repeats got their job, \
             {} other-body repeats refused, {} duplicate rows",
            c.requests_checked,
            c.keys_created,
            c.repeats_same_body,
            c.repeats_other_body,
            c.duplicate_rows
        );
        for v in &c.violations {
            let _ = writeln!(out, "VIOLATION: {v}");
        }
        out
    }

    /// The ratio lines of [`PgBenchReport::table`].
    fn ratio_lines(&self, out: &mut String) {
        use std::fmt::Write as _;
        let _ = writeln!(out, "\npg_vs_pgbench_throughput_ratio");
        for r in &self.pg_vs_pgbench_throughput_ratio {
            let _ = writeln!(
                out,
                "  {:>3} clients: http {:.2}x, minimal {:.2}x, store {:.2}x",
                r.clients, r.http, r.minimal, r.store
            );
        }
        let _ = writeln!(
            out,
            "\nidem's server against the minimal service (CPU per create, requests/s)"
        );
        for r in &self.server_vs_minimal {
            let cpu = r
                .server_cpu_vs_minimal_ratio
                .map_or_else(|| "-".to_owned(), |c| format!("{c:.2}x"));
            let _ = writeln!(
                out,
                "  {:>3} clients: server_cpu_vs_minimal_ratio {cpu}, \
                 http_vs_minimal_throughput_ratio {:.2}x",
                r.clients, r.http_vs_minimal_throughput_ratio
            );
        }
    }
}

impl PointReport {
    /// The point as a row of [`PgBenchReport::table`].
    fn row(&self, out: &mut String) {
        use std::fmt::Write as _;
        let statements = self
            .statements_per_request
            .map_or_else(|| "-".to_owned(), |s| format!("{s:.2}"));
        let server = self
            .server_ms_per_request
            .map_or_else(|| "-".to_owned(), |s| format!("{s:.3}"));
        let cpu = self
            .server_cpu_ms_per_create
            .map_or_else(|| "-".to_owned(), |c| format!("{c:.3}"));
        let _ = writeln!(
            out,
            "{:<8} {:>7} {:>9} {:>10.0} {:>8.2} {:>8.2} {:>10} {:>10} {:>11} {:>7}",
            self.path.name(),
            self.clients,
            self.requests,
            self.requests_per_s,
            self.p50_ms,
            self.p99_ms,
            statements,
            server,
            cpu,
            self.errors
        );
    }
}

/// Wall-clock time, for measuring only: the bench's one reader of the real
/// clock (nothing it decides depends on it but when to stop).
#[allow(clippy::disallowed_methods)]
pub(crate) fn now() -> std::time::Instant {
    std::time::Instant::now()
}

fn check_args(args: &PgBenchArgs) -> Result<(), PgBenchError> {
    if args.clients.is_empty() {
        return Err(PgBenchError::Usage("no client counts given".into()));
    }
    if let Some(bad) = args.clients.iter().find(|&&c| c == 0 || c > CLIENTS_MAX) {
        return Err(PgBenchError::Usage(format!(
            "client count {bad} is outside 1..={CLIENTS_MAX}"
        )));
    }
    if args.seconds_per_point == 0 || args.seconds_per_point > SECONDS_PER_POINT_MAX {
        return Err(PgBenchError::Usage(format!(
            "seconds per point must be in 1..={SECONDS_PER_POINT_MAX}, got {}",
            args.seconds_per_point
        )));
    }
    Ok(())
}

/// Runs the bench: starts a throwaway PostgreSQL (or uses the server
/// `DATABASE_URL` names), measures every point, checks every answer and the
/// table. Violations are reported in the result, not as an error: the
/// figures are still worth reading.
pub fn run(args: &PgBenchArgs) -> Result<PgBenchReport, PgBenchError> {
    check_args(args)?;
    let pgbench = match &args.pgbench {
        Some(path) => path.clone(),
        None => idem_core::testing::pg::pg_bin_dir()
            .map_err(PgBenchError::Pgbench)?
            .join("pgbench"),
    };
    if !pgbench.exists() {
        return Err(PgBenchError::Pgbench(format!(
            "{} not found (give --pgbench)",
            pgbench.display()
        )));
    }
    let cluster = idem_core::testing::pg::try_cluster().map_err(PgBenchError::Database)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| PgBenchError::Load(format!("a tokio runtime: {e}")))?;
    let database_url = runtime.block_on(cluster.fresh_database_url());
    runtime.block_on(run_on(args, &pgbench, &database_url))
}

async fn run_on(
    args: &PgBenchArgs,
    pgbench: &std::path::Path,
    database_url: &str,
) -> Result<PgBenchReport, PgBenchError> {
    let bench = Bench::connect(args, pgbench, database_url).await?;
    let server_version: String = sqlx::query_scalar("select version()")
        .fetch_one(&bench.admin)
        .await
        .map_err(db)?;
    let mut points = Vec::new();
    let mut checks = Checks::default();
    for &clients in &args.clients {
        for path in BenchPath::ALL {
            points.push(bench.point(path, clients, &mut checks).await?);
        }
    }
    bench.server.stop().await;
    bench.minimal.stop().await;
    checks.duplicate_rows = workload::duplicate_rows(&bench.admin).await.map_err(db)?;
    if checks.duplicate_rows != 0 {
        checks.violations.push(format!(
            "{} (owner, key) pairs have more than one row",
            checks.duplicate_rows
        ));
    }
    bench.admin.close().await;
    bench.store.pool().close().await;
    let pg_vs_pgbench_throughput_ratio = ratios(&points);
    let server_vs_minimal = minimal_ratios(&points);
    Ok(PgBenchReport {
        server_version,
        seconds_per_point: args.seconds_per_point,
        seed: args.seed,
        mix: MIX,
        pool_connections_max: POOL_CONNECTIONS_MAX,
        pool_ping: args.pool_ping,
        points,
        pg_vs_pgbench_throughput_ratio,
        server_vs_minimal,
        checks,
    })
}

/// The pool the service opens, as `idem-server` sizes it.
const POOL_CONNECTIONS_MAX: u32 = idem_core::cli::POOL_CONNECTIONS_MAX;

fn db(e: sqlx::Error) -> PgBenchError {
    PgBenchError::Database(e.to_string())
}

/// What every point of a run uses: the database, idem's store and HTTP
/// service on it, the minimal service, and pgbench.
struct Bench<'a> {
    args: &'a PgBenchArgs,
    pgbench: &'a std::path::Path,
    database_url: &'a str,
    store: PgStore,
    /// One connection for the bench's own queries.
    admin: sqlx::PgPool,
    statements: Statements,
    server: drive::HttpServer,
    minimal: minimal::MinimalServer,
}

impl<'a> Bench<'a> {
    async fn connect(
        args: &'a PgBenchArgs,
        pgbench: &'a std::path::Path,
        database_url: &'a str,
    ) -> Result<Self, PgBenchError> {
        let pool = drive::open_pool(database_url, args.pool_ping).await?;
        let store = PgStore::new(pool, SCHEMA_DEFAULT);
        let admin = sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .connect(database_url)
            .await
            .map_err(db)?;
        let statements = Statements::enable(&admin).await;
        let server = drive::HttpServer::start(database_url, args.pool_ping).await?;
        let minimal = minimal::MinimalServer::start(database_url, args.pool_ping).await?;
        Ok(Self {
            args,
            pgbench,
            database_url,
            store,
            admin,
            statements,
            server,
            minimal,
        })
    }

    /// One point: `path` at `clients` clients for the point's duration,
    /// its answers and rows checked into `checks`.
    async fn point(
        &self,
        path: BenchPath,
        clients: u32,
        checks: &mut Checks,
    ) -> Result<PointReport, PgBenchError> {
        let owner = format!("bench-{}-{clients}", path.name());
        let duration = Duration::from_secs(self.args.seconds_per_point);
        let admin = &self.admin;
        self.statements.reset(admin).await;
        let mut point = match path {
            BenchPath::Http | BenchPath::Minimal | BenchPath::Store => {
                let plan = Arc::new(workload::Plan::new(self.args.seed, clients, owner.clone()));
                let (measured, cpu_ms) = self.drive(path, &plan, duration).await?;
                let ledger_errors = measured.ledger.check(&plan, checks);
                let rows = workload::rows_of(admin, &owner).await.map_err(db)?;
                measured.ledger.check_rows(&owner, &rows, checks);
                let mut point = measured.point(path, clients, ledger_errors);
                point.server_cpu_ms_per_create = cpu_ms.map(|ms| ms / point.requests.max(1) as f64);
                point
            }
            BenchPath::Pgbench => {
                let url = self.database_url;
                pgbench_tool::run(self.pgbench, url, admin, &owner, clients, duration).await?
            }
        };
        if let Some(counted) = self.statements.read(admin).await {
            let requests = point.requests.max(1) as f64;
            point.statements_per_request = Some(counted.statements as f64 / requests);
            point.rollbacks_per_request = Some(counted.rollbacks as f64 / requests);
            point.server_ms_per_request = Some(counted.server_ms / requests);
        }
        Ok(point)
    }
}

impl Bench<'_> {
    /// Drives `path` (not pgbench) for `duration`; with the CPU
    /// milliseconds its server's threads spent meanwhile, where it has a
    /// server and /proc can be read.
    async fn drive(
        &self,
        path: BenchPath,
        plan: &Arc<workload::Plan>,
        duration: Duration,
    ) -> Result<(drive::Measured, Option<f64>), PgBenchError> {
        let threads = path.server_threads();
        let before_ms = threads.and_then(cpu::threads_cpu_ms);
        let measured = match path {
            BenchPath::Http => drive::http(self.server.addr, plan, duration).await?,
            BenchPath::Minimal => drive::http(self.minimal.addr, plan, duration).await?,
            _ => drive::store(&self.store, plan, duration).await?,
        };
        let after_ms = threads.and_then(cpu::threads_cpu_ms);
        let cpu_ms = before_ms.zip(after_ms).map(|(b, a)| (a - b).max(0.0));
        Ok((measured, cpu_ms))
    }
}

/// idem's server against the minimal service, per client count where both
/// were measured.
fn minimal_ratios(points: &[PointReport]) -> Vec<MinimalRatioAt> {
    let at = |path, clients| {
        points
            .iter()
            .find(|p| p.path == path && p.clients == clients)
    };
    let clients: std::collections::BTreeSet<u32> = points.iter().map(|p| p.clients).collect();
    clients
        .into_iter()
        .filter_map(|c| {
            let (http, minimal) = (at(BenchPath::Http, c)?, at(BenchPath::Minimal, c)?);
            let over = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
            let cpu = http
                .server_cpu_ms_per_create
                .zip(minimal.server_cpu_ms_per_create)
                .map(|(h, m)| over(h, m));
            Some(MinimalRatioAt {
                clients: c,
                server_cpu_vs_minimal_ratio: cpu,
                http_vs_minimal_throughput_ratio: over(http.requests_per_s, minimal.requests_per_s),
            })
        })
        .collect()
}

/// Each path's requests/s over pgbench's, per client count.
fn ratios(points: &[PointReport]) -> Vec<RatioAt> {
    let mut by_clients: BTreeMap<u32, BTreeMap<BenchPath, f64>> = BTreeMap::new();
    for p in points {
        by_clients
            .entry(p.clients)
            .or_default()
            .insert(p.path, p.requests_per_s);
    }
    by_clients
        .into_iter()
        .filter_map(|(clients, rates)| {
            let reference = *rates.get(&BenchPath::Pgbench)?;
            let ratio = |path| {
                if reference > 0.0 {
                    rates.get(&path).copied().unwrap_or(0.0) / reference
                } else {
                    0.0
                }
            };
            Some(RatioAt {
                clients,
                http: ratio(BenchPath::Http),
                minimal: ratio(BenchPath::Minimal),
                store: ratio(BenchPath::Store),
            })
        })
        .collect()
}

/// Statement counts from pg_stat_statements, when the server loads it.
#[derive(Debug)]
struct Statements {
    enabled: bool,
}

impl Statements {
    async fn enable(admin: &sqlx::PgPool) -> Self {
        let enabled = sqlx::query("create extension if not exists pg_stat_statements")
            .execute(admin)
            .await
            .is_ok()
            && sqlx::query("select pg_stat_statements_reset()")
                .execute(admin)
                .await
                .is_ok();
        Self { enabled }
    }

    async fn reset(&self, admin: &sqlx::PgPool) {
        if self.enabled {
            // A failed reset only makes the next count too high; the count
            // is a diagnostic, not a verdict.
            let _ = sqlx::query("select pg_stat_statements_reset()")
                .execute(admin)
                .await;
        }
    }

    /// Statements and rollbacks since the last reset in this database, the
    /// bench's own bookkeeping left out.
    async fn read(&self, admin: &sqlx::PgPool) -> Option<Counted> {
        if !self.enabled {
            return None;
        }
        let row = sqlx::query(
            "select coalesce(sum(calls), 0)::bigint as statements,
                    coalesce(sum(total_exec_time + total_plan_time), 0)::float8 as server_ms,
                    coalesce(sum(calls) filter (where query ilike 'rollback%'), 0)::bigint
                      as rollbacks
               from pg_stat_statements
              where dbid = (select oid from pg_database where datname = current_database())
                and query not ilike '%pg_stat_statements%'
                and query not ilike '%idem_bench_rows%'",
        )
        .fetch_one(admin)
        .await
        .ok()?;
        Some(Counted {
            statements: row.try_get("statements").ok()?,
            rollbacks: row.try_get("rollbacks").ok()?,
            server_ms: row.try_get("server_ms").ok()?,
        })
    }
}

/// What pg_stat_statements counted over one point.
#[derive(Debug)]
struct Counted {
    statements: i64,
    rollbacks: i64,
    server_ms: f64,
}
