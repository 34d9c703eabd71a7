//! `idem bench-pg`: the PostgreSQL create path against pgbench (see
//! [`crate::pgbench`]). A separate command until `idem bench` takes it in.

use std::path::PathBuf;

use clap::Args;

use super::{CliError, Exit};
use crate::pgbench::{self, PgBenchArgs, PgBenchError};

#[derive(Debug, Args)]
pub struct BenchPgArgs {
    /// Client counts, comma-separated: one point per path each.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32")]
    pub clients: Vec<u32>,
    /// How long each point runs, in whole seconds.
    #[arg(long, default_value_t = 3)]
    pub seconds: u64,
    /// Seeds the clients' choice of keys.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// pgbench to run (default: the one beside the PostgreSQL binaries).
    #[arg(long)]
    pub pgbench: Option<PathBuf>,
    /// Ping each pooled connection before use (sqlx's default, off in the
    /// server's pool), to measure what it costs.
    #[arg(long)]
    pub pool_ping: bool,
    /// Write the report as JSON here too.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

pub fn bench_pg(args: BenchPgArgs) -> Result<Exit, CliError> {
    let report = pgbench::run(&PgBenchArgs {
        clients: args.clients,
        seconds_per_point: args.seconds,
        seed: args.seed,
        pgbench: args.pgbench,
        pool_ping: args.pool_ping,
    })
    // Nothing measured, or not all of it: bad flags, no PostgreSQL or
    // pgbench, a load generator that could not connect.
    .map_err(|e: PgBenchError| CliError::Usage(e.to_string()))?;
    print!("{}", report.table());
    if let Some(out) = &args.out {
        let json = serde_json::to_string_pretty(&report).expect("the report serializes");
        std::fs::write(out, json + "\n")
            .map_err(|e| CliError::Usage(format!("cannot write {}: {e}", out.display())))?;
    }
    Ok(if report.passed() {
        Exit::Pass
    } else {
        Exit::Violation
    })
}
