//! `idem real`: one scenario, one seed, for real (`crate::real`). Arguments
//! in, the record out.

use std::path::PathBuf;

use clap::Args;

use idem_core::design::Design;
use idem_reports::RunVerdict;
use idem_reports::html::Provenance;

use super::{CliError, Exit};
use crate::load::load;
use crate::real::{self, Database, RealError, RealOptions, System, record};

#[derive(Debug, Args)]
pub struct RealArgs {
    /// A catalogue name (`idem list`) or a scenario file, run unchanged.
    pub scenario: String,
    /// The root seed: it draws the clients' jitter and replicas, the
    /// providers' and the links' draws (a real run is not replayed byte for
    /// byte: the machine's timing is part of it).
    #[arg(long, env = "IDEM_SEED", default_value_t = 0)]
    pub seed: u64,
    /// The design under test, passed to every `idem serve` process.
    #[arg(long, default_value = "correct")]
    pub design: Design,
    /// Write the JSON record here (every invariant held, violated, or not
    /// judged with the reason).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write the run's page here: the simulator's page from the real trace.
    #[arg(long, value_name = "FILE.html")]
    pub report: Option<PathBuf>,
    /// Use this PostgreSQL (in a schema of the run's own, dropped at the
    /// end; it needs wal_level = logical) instead of a throwaway cluster.
    #[arg(long, value_name = "URL")]
    pub database_url: Option<String>,
    /// Keep the run's files here: each process's log and journal, the
    /// service configuration, trace.jsonl.
    #[arg(long, value_name = "DIR")]
    pub keep: Option<PathBuf>,
}

fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(CliError::Io)
}

fn write(path: &std::path::Path, text: &str) -> Result<(), CliError> {
    std::fs::write(path, text)
        .map_err(|e| CliError::Usage(format!("cannot write {}: {e}", path.display())))
}

pub fn real(args: RealArgs) -> Result<Exit, CliError> {
    let loaded = load(&args.scenario)?;
    let program = std::env::current_exe()
        .map_err(|e| CliError::Usage(format!("cannot find the idem binary: {e}")))?;
    let options = RealOptions {
        seed: args.seed,
        system: System::Idem {
            program,
            design: args.design,
        },
        database: args
            .database_url
            .clone()
            .map_or(Database::Throwaway, Database::Url),
        keep: args.keep.clone(),
    };
    real::check(&loaded.scenario, &options).map_err(|e| CliError::Usage(e.to_string()))?;
    // Wall time of the whole command, for the record only.
    #[allow(clippy::disallowed_methods)]
    let started = std::time::Instant::now();
    let outcome = runtime()?.block_on(real::run(&loaded.scenario, &options));
    let wall_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    if let Err(RealError::Refused(why) | RealError::Start(why)) = &outcome {
        return Err(CliError::Usage(why.clone()));
    }
    let record = record::record(
        &loaded.scenario,
        &loaded.target,
        &options,
        &outcome,
        wall_ms,
    );
    if let Some(path) = &args.json {
        let json = serde_json::to_string_pretty(&record).expect("a record serializes");
        write(path, &format!("{json}\n"))?;
    }
    if let (Some(path), Ok(outcome)) = (&args.report, &outcome) {
        let build = &record.run.build;
        let provenance = Provenance {
            version: build
                .as_ref()
                .map(|b| b.version.clone())
                .unwrap_or_default(),
            commit: build.as_ref().map(|b| b.short_commit()).unwrap_or_default(),
            command_line: std::env::args().collect::<Vec<_>>().join(" "),
            seeds: format!("{}..{}", args.seed, args.seed + 1),
            performance: None,
        };
        write(
            path,
            &record::page(&loaded.scenario, &record, outcome, &provenance),
        )?;
    }
    super::common::emit(&record::text(&record));
    Ok(if record.run.verdict == RunVerdict::Pass {
        Exit::Pass
    } else {
        Exit::Violation
    })
}
