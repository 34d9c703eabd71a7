//! The reference: pgbench running the raw statements of a create-or-get.
//!
//! Each pgbench transaction is one request of the same mix's shape: 55% of
//! them hit a key that exists (the insert does nothing, then the row is
//! read), the rest insert a new key. No event row, no fingerprint check, no
//! HTTP: what PostgreSQL must do at least for such a request, in autocommit,
//! with prepared statements (as sqlx uses them).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::workload::{FALLBACK, MIX, PRIMARY};
use super::{BenchPath, PgBenchError, PointReport};

/// Keys that exist before pgbench starts, for its repeats to hit.
const PREPOPULATED_KEYS: u32 = 10_000;
/// pgbench's new keys are drawn from this many: a collision is as rare as
/// it is harmless (it becomes a repeat that is not read).
const NEW_KEYS_SPACE: u64 = 1_000_000_000_000_000;

/// The stored body and fingerprint: the shape of idem's own.
fn body() -> String {
    format!(
        r#"{{"fallbacks": ["{FALLBACK}"], "params": {{"prompt": "Summarize document p in three sentences.", "temperature": 0.2}}, "provider": "{PRIMARY}"}}"#
    )
}
const FINGERPRINT: &str = "5f0c2b1e9a7d3c4b6e8f0a1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d3e4f5";

fn insert(owner: &str, key_prefix: &str) -> String {
    format!(
        "INSERT INTO idem.jobs (id, owner_id, idempotency_key, request_fingerprint, request, \
         provider, fallbacks, state, version, created_at, updated_at) \
         VALUES (gen_random_uuid(), '{owner}', '{key_prefix}' || CAST(:k AS text), '{FINGERPRINT}', \
         '{body}'::jsonb, '{PRIMARY}', '{{{FALLBACK}}}', 'pending', 0, now(), now()) \
         ON CONFLICT (owner_id, idempotency_key) DO NOTHING;",
        body = body()
    )
}

/// The script pgbench runs per transaction.
pub fn script(owner: &str) -> String {
    let repeats = MIX.repeat_same_body_percent + MIX.repeat_other_body_percent;
    format!(
        "\\set roll random(0, 99)\n\
         \\if :roll < {repeats}\n\
         \\set k random(1, {PREPOPULATED_KEYS})\n\
         {insert_existing}\n\
         SELECT * FROM idem.jobs WHERE owner_id = '{owner}' AND idempotency_key = 'p-' || CAST(:k AS text);\n\
         \\else\n\
         \\set k random(1, {NEW_KEYS_SPACE})\n\
         {insert_new}\n\
         \\endif\n",
        insert_existing = insert(owner, "p-"),
        insert_new = insert(owner, "n-"),
    )
}

/// pgbench's threads: one per core, at most one per client.
fn threads(clients: u32) -> u32 {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    clients.min(u32::try_from(cores).unwrap_or(2)).max(1)
}

/// Runs pgbench for `duration` with `clients` connections.
pub async fn run(
    pgbench: &Path,
    database_url: &str,
    admin: &sqlx::PgPool,
    owner: &str,
    clients: u32,
    duration: Duration,
) -> Result<PointReport, PgBenchError> {
    prepopulate(admin, owner).await?;
    let dir = tempfile::Builder::new()
        .prefix("idem-pgbench-")
        .tempdir()
        .map_err(|e| PgBenchError::Pgbench(format!("a log directory: {e}")))?;
    let script_path = dir.path().join("create.sql");
    std::fs::write(&script_path, script(owner))
        .map_err(|e| PgBenchError::Pgbench(format!("writing the script: {e}")))?;
    let args = PgbenchRun {
        clients,
        duration,
        script: &script_path,
        log_prefix: &dir.path().join("log"),
        database_url,
    };
    let stdout = args.run(pgbench).await?;
    let summary = Summary::parse(&stdout)?;
    let latencies_us = read_logs(dir.path())?;
    let (p50_ms, p99_ms) = super::drive::percentiles_ms(latencies_us);
    Ok(PointReport {
        path: BenchPath::Pgbench,
        clients,
        requests: summary.transactions,
        seconds: duration.as_secs_f64(),
        requests_per_s: summary.tps,
        p50_ms,
        p99_ms,
        errors: summary.failed,
        statements_per_request: None,
        rollbacks_per_request: None,
        server_ms_per_request: None,
        server_cpu_ms_per_create: None,
    })
}

/// Inserts the keys pgbench's repeats ask for.
async fn prepopulate(admin: &sqlx::PgPool, owner: &str) -> Result<(), PgBenchError> {
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "/* idem_bench_rows */ INSERT INTO idem.jobs (id, owner_id, idempotency_key, \
         request_fingerprint, request, provider, fallbacks, state, version, created_at, updated_at) \
         SELECT gen_random_uuid(), $1, 'p-' || g, '{FINGERPRINT}', $2::jsonb, '{PRIMARY}', \
         ARRAY['{FALLBACK}'], 'pending', 0, now(), now() FROM generate_series(1, {PREPOPULATED_KEYS}) g"
    )))
    .bind(owner)
    .bind(body())
    .execute(admin)
    .await
    .map_err(|e| PgBenchError::Database(format!("prepopulating pgbench's keys: {e}")))?;
    Ok(())
}

/// One pgbench run's arguments.
struct PgbenchRun<'a> {
    clients: u32,
    duration: Duration,
    script: &'a Path,
    log_prefix: &'a Path,
    database_url: &'a str,
}

impl PgbenchRun<'_> {
    /// Runs `pgbench` and returns what it printed, or why it failed.
    async fn run(&self, pgbench: &Path) -> Result<String, PgBenchError> {
        let mut command = Command::new(pgbench);
        command
            .args(["-n", "-M", "prepared"])
            .args(["-c", &self.clients.to_string()])
            .args(["-j", &threads(self.clients).to_string()])
            .args(["-T", &self.duration.as_secs().to_string()])
            .arg("-f")
            .arg(self.script)
            .arg("-l")
            .arg(format!("--log-prefix={}", self.log_prefix.display()))
            .arg(self.database_url);
        let output = tokio::task::spawn_blocking(move || command.output())
            .await
            .map_err(|e| PgBenchError::Pgbench(e.to_string()))?
            .map_err(|e| PgBenchError::Pgbench(format!("cannot run pgbench: {e}")))?;
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        if !output.status.success() {
            return Err(PgBenchError::Pgbench(format!(
                "exited with {}: {}{}",
                output.status,
                stdout,
                String::from_utf8_lossy(&output.stderr)
            )));
        }
        Ok(stdout)
    }
}

/// What pgbench prints at the end.
#[derive(Debug, PartialEq)]
pub struct Summary {
    pub transactions: u64,
    pub failed: u64,
    /// Excluding the time spent connecting.
    pub tps: f64,
}

impl Summary {
    pub fn parse(stdout: &str) -> Result<Self, PgBenchError> {
        let field = |prefix: &str| {
            stdout
                .lines()
                .find_map(|line| line.trim().strip_prefix(prefix))
                .and_then(|rest| rest.split_whitespace().next())
                .map(str::to_owned)
        };
        let missing =
            |what: &str| PgBenchError::Pgbench(format!("no {what} in its output:\n{stdout}"));
        let transactions = field("number of transactions actually processed:")
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| missing("transaction count"))?;
        let failed = field("number of failed transactions:")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let tps = field("tps =")
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| missing("tps"))?;
        Ok(Self {
            transactions,
            failed,
            tps,
        })
    }
}

/// Per-transaction latencies from pgbench's logs (`-l`): one file per
/// thread, one line per transaction, the latency in microseconds third.
fn read_logs(dir: &Path) -> Result<Vec<u32>, PgBenchError> {
    let mut latencies = Vec::new();
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| PgBenchError::Pgbench(format!("reading its logs: {e}")))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("log."))
        })
        .collect();
    names.sort();
    for path in names {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| PgBenchError::Pgbench(format!("reading {}: {e}", path.display())))?;
        for line in text.lines() {
            let latency = line
                .split_whitespace()
                .nth(2)
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or_else(|| {
                    PgBenchError::Pgbench(format!("a log line without a latency: {line:?}"))
                })?;
            latencies.push(u32::try_from(latency).unwrap_or(u32::MAX));
        }
    }
    Ok(latencies)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_is_read_from_pgbench_output() {
        let out = "transaction type: create.sql\nscaling factor: 1\n\
                   number of transactions actually processed: 12345\n\
                   number of failed transactions: 0 (0.000%)\n\
                   latency average = 0.811 ms\n\
                   initial connection time = 3.1 ms\n\
                   tps = 1232.858946 (without initial connection time)\n";
        assert_eq!(
            Summary::parse(out).unwrap(),
            Summary {
                transactions: 12345,
                failed: 0,
                tps: 1232.858946
            }
        );
        assert!(Summary::parse("pgbench: error").is_err());
    }

    #[test]
    fn the_script_repeats_the_mix_share_and_reads_only_repeats() {
        let s = script("o");
        assert!(s.contains("\\if :roll < 55\n"));
        assert_eq!(
            s.matches("ON CONFLICT (owner_id, idempotency_key) DO NOTHING")
                .count(),
            2
        );
        assert_eq!(s.matches("SELECT * FROM idem.jobs").count(), 1);
    }
}
