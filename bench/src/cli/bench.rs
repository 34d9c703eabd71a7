//! `idem bench`: what a seed, a sweep and a PostgreSQL create cost
//! ([`crate::bench`]), written to `latest.json` and `latest.md` (and
//! README's bench section with `--readme`).

use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};

use clap::Args;

use super::common::emit;
use super::{CliError, Exit};
use crate::bench::{BenchPlan, README_END, README_START, Section, bench, markdown, readme_block};
use crate::output;
use crate::runner::cores;
use idem_real::pgbench::PgBenchArgs;
use idem_scenarios::load::load_set;

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Seeds per scenario for the per-scenario figures and the 1 → N jobs
    /// scaling.
    #[arg(long, default_value_t = 20)]
    pub seeds: u64,
    /// Seeds of the whole-catalogue sweep behind catalogue_x1000_seconds:
    /// 1000 measures it; fewer extrapolate (and the report says so).
    #[arg(long, default_value_t = 1000)]
    pub catalogue_seeds: u64,
    /// Runs of the large sweep whose memory is compared with a 1,000-run
    /// sweep's.
    #[arg(long, default_value_t = 10_000)]
    pub rss_runs: u64,
    /// Worlds of the fuzz run behind fuzz_worlds_per_second (`idem fuzz
    /// --seeds 0..N` of the correct design).
    #[arg(long, default_value_t = 1000)]
    pub fuzz_worlds: u64,
    /// Worker threads for the many-job figures (default: the cores).
    #[arg(long)]
    pub jobs: Option<NonZeroUsize>,
    /// A small bounded bench (seconds: one seed per scenario, the catalogue
    /// over two seeds) that checks the bench works; its figures are
    /// samples, not the machine's, and say so.
    #[arg(long)]
    pub quick: bool,
    /// Where latest.json and latest.md are written.
    #[arg(long, value_name = "DIR", default_value = "reports/bench")]
    pub out: PathBuf,
    /// Also rewrite the bench table between the bench markers of this
    /// file (README.md).
    #[arg(long, value_name = "FILE")]
    pub readme: Option<PathBuf>,
    /// The sections to run, comma-separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "simulator,postgres"
    )]
    pub sections: Vec<Section>,
    /// PostgreSQL section: client counts, one point per path each
    /// (`--quick`: 1,2).
    #[arg(long, value_delimiter = ',', default_value = "1,8,32")]
    pub pg_clients: Vec<u32>,
    /// PostgreSQL section: how long each point runs, in whole seconds
    /// (`--quick`: 1).
    #[arg(long, default_value_t = 3)]
    pub pg_seconds: u64,
    /// PostgreSQL section: seeds the clients' choice of keys.
    #[arg(long, default_value_t = 1)]
    pub pg_seed: u64,
    /// PostgreSQL section: the pgbench to run (default: the one beside the
    /// PostgreSQL server binaries).
    #[arg(long, value_name = "FILE")]
    pub pgbench: Option<PathBuf>,
    /// PostgreSQL section: ping each pooled connection before use (sqlx's
    /// default, off in the server's pool), to measure what it costs.
    #[arg(long)]
    pub pool_ping: bool,
}

/// The plan the flags describe (`--quick` overrides the sizes).
fn plan(args: &BenchArgs) -> Result<BenchPlan, CliError> {
    let jobs = args.jobs.unwrap_or_else(cores);
    let simulator = if args.quick {
        crate::bench::sim::SimPlan {
            seeds: 1,
            catalogue_seeds: 2,
            rss_small_runs: 1,
            rss_large_runs: 2,
            fuzz_worlds: 4,
            jobs,
        }
    } else {
        if args.seeds == 0
            || args.catalogue_seeds == 0
            || args.rss_runs == 0
            || args.fuzz_worlds == 0
        {
            return Err(CliError::Usage(
                "--seeds, --catalogue-seeds, --rss-runs and --fuzz-worlds must be above 0"
                    .to_owned(),
            ));
        }
        crate::bench::sim::SimPlan {
            seeds: args.seeds,
            catalogue_seeds: args.catalogue_seeds,
            rss_small_runs: 1_000,
            rss_large_runs: args.rss_runs,
            fuzz_worlds: args.fuzz_worlds,
            jobs,
        }
    };
    let postgres = PgBenchArgs {
        clients: if args.quick {
            vec![1, 2]
        } else {
            args.pg_clients.clone()
        },
        seconds_per_point: if args.quick { 1 } else { args.pg_seconds },
        seed: args.pg_seed,
        pgbench: args.pgbench.clone(),
        pool_ping: args.pool_ping,
    };
    Ok(BenchPlan {
        sections: args.sections.clone(),
        simulator,
        postgres,
        quick: args.quick,
    })
}

/// README's text, checked for the bench markers before an hour of
/// benching rather than after.
fn read_readme(path: &Path) -> Result<String, CliError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::Usage(format!("{}: cannot read: {e}", path.display())))?;
    readme_block(&text, "").ok_or_else(|| {
        CliError::Usage(format!(
            "{} has no bench markers ({README_START} ... {README_END})",
            path.display()
        ))
    })?;
    Ok(text)
}

pub fn bench_command(args: BenchArgs) -> Result<Exit, CliError> {
    let scenarios = load_set(&[])?;
    let plan = plan(&args)?;
    if let Some(readme) = &args.readme {
        read_readme(readme)?;
    }
    // Nothing measured, or not all of it: bad flags, no PostgreSQL or
    // pgbench, a load generator that could not connect.
    let report = bench(&scenarios, &plan).map_err(|e| CliError::Usage(e.to_string()))?;
    output::create_dir(&args.out)?;
    output::write(&args.out.join("latest.json"), report.to_json())?;
    let table = markdown(&report);
    output::write(&args.out.join("latest.md"), &table)?;
    if let Some(readme) = &args.readme {
        let updated =
            readme_block(&read_readme(readme)?, &table).expect("read_readme checked the markers");
        output::write(readme, updated)?;
    }
    emit(&table);
    let problems = report.problems();
    for problem in &problems {
        eprintln!("idem bench: {problem}");
    }
    Ok(Exit::passed(problems.is_empty()))
}
