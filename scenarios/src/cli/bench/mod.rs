//! `idem bench`: what a seed and a sweep cost, against outside references
//! measured in the same run, written to `reports/bench/latest.json` and as
//! a Markdown table (`latest.md`, and README's bench section with
//! `--readme`).
//!
//! Sections: the simulator ([`sim`]) and the PostgreSQL create path
//! against pgbench ([`crate::pgbench`]), on a throwaway server. `--sections`
//! picks them; a section not run is null in `latest.json`.
//!
//! The bench reads the wall clock (that is what it measures) and never
//! runs in CI's default path except `--quick`, a small bounded run that
//! checks the bench itself works.

mod sim;

use std::fmt::Write as _;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};

use clap::Args;
use serde::Serialize;

use super::common::{build, emit};
use super::{CliError, Exit};
use crate::load::load_set;
use crate::pgbench::{self, PgBenchArgs, PgBenchReport};

/// The lines around the bench's table in README.md.
pub const README_START: &str =
    "<!-- idem bench: start (written by `idem bench --readme README.md`) -->";
pub const README_END: &str = "<!-- idem bench: end -->";

/// What `latest.json` holds. Schema 1.
#[derive(Debug, Serialize)]
pub struct BenchReport {
    pub schema: u32,
    /// UTC, when the bench ran.
    pub date: String,
    pub build: idem_reports::BuildStamp,
    /// The machine's cores (as the OS offers them to this process).
    pub cores: usize,
    /// The threads the many-job figures used.
    pub jobs: usize,
    /// A `--quick` run: small samples, figures extrapolated.
    pub quick: bool,
    /// Null when `--sections` left it out.
    pub simulator: Option<sim::SimBench>,
    /// The PostgreSQL create path against pgbench. Null when `--sections`
    /// left it out.
    pub postgres: Option<PgBenchReport>,
}

/// A part of the bench that `--sections` can pick.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Section {
    Simulator,
    Postgres,
}

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

/// Wall-clock timing: what a bench measures. The one place the command
/// line reads the clock for it.
#[allow(clippy::disallowed_methods)]
fn timed<T>(work: impl FnOnce() -> T) -> (T, std::time::Duration) {
    let start = std::time::Instant::now();
    let value = work();
    (value, start.elapsed())
}

/// Today's date and time (UTC), for the report.
#[allow(clippy::disallowed_methods)]
fn now_utc() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

pub fn bench(args: BenchArgs) -> Result<Exit, CliError> {
    let scenarios = load_set(&[])?;
    let cores = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
    let jobs = args
        .jobs
        .unwrap_or(NonZeroUsize::new(cores).unwrap_or(NonZeroUsize::MIN));
    let plan = if args.quick {
        sim::SimPlan {
            seeds: 1,
            catalogue_seeds: 2,
            rss_small_runs: 1,
            rss_large_runs: 2,
            jobs,
        }
    } else {
        if args.seeds == 0 || args.catalogue_seeds == 0 || args.rss_runs == 0 {
            return Err(CliError::Usage(
                "--seeds, --catalogue-seeds and --rss-runs must be above 0".to_owned(),
            ));
        }
        sim::SimPlan {
            seeds: args.seeds,
            catalogue_seeds: args.catalogue_seeds,
            rss_small_runs: 1_000,
            rss_large_runs: args.rss_runs,
            jobs,
        }
    };
    if let Some(readme) = &args.readme {
        // Checked first: an hour of benching should not end on a bad path.
        readme_block(&std::fs::read_to_string(readme)?, "").ok_or_else(|| {
            CliError::Usage(format!(
                "{} has no bench markers ({README_START} ... {README_END})",
                readme.display()
            ))
        })?;
    }
    let pg_args = PgBenchArgs {
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
    let simulator = args.sections.contains(&Section::Simulator).then(|| {
        eprintln!("idem bench: simulator ({} scenarios)", scenarios.len());
        sim::bench(&scenarios, plan)
    });
    let postgres = if args.sections.contains(&Section::Postgres) {
        eprintln!(
            "idem bench: PostgreSQL against pgbench (clients {:?}, {} s a point)",
            pg_args.clients, pg_args.seconds_per_point
        );
        // Nothing measured, or not all of it: bad flags, no PostgreSQL or
        // pgbench, a load generator that could not connect.
        Some(pgbench::run(&pg_args).map_err(|e| CliError::Usage(e.to_string()))?)
    } else {
        None
    };
    let report = BenchReport {
        schema: 2,
        date: now_utc(),
        build: build(),
        cores,
        jobs: jobs.get(),
        quick: args.quick,
        simulator,
        postgres,
    };
    std::fs::create_dir_all(&args.out)?;
    let mut json = serde_json::to_string_pretty(&report).expect("a bench report serializes");
    json.push('\n');
    std::fs::write(args.out.join("latest.json"), json)?;
    let table = markdown(&report);
    std::fs::write(args.out.join("latest.md"), &table)?;
    if let Some(readme) = &args.readme {
        write_readme(readme, &table)?;
    }
    emit(&table);
    // A bench of runs that did not pass measured something else.
    let mut passed = true;
    if let Some(s) = &report.simulator {
        let not_passed: u64 = s.scenarios.iter().map(|b| b.not_passed).sum::<u64>()
            + s.catalogue.failed
            + s.catalogue.errors;
        if not_passed > 0 || !s.catalogue.windows_never_reached.is_empty() {
            eprintln!(
                "idem bench: {not_passed} runs did not pass, windows never reached: {:?}",
                s.catalogue.windows_never_reached
            );
            passed = false;
        }
    }
    if let Some(pg) = &report.postgres
        && !pg.passed()
    {
        eprintln!(
            "idem bench: the PostgreSQL path gave {} answers it must not",
            pg.checks.violations.len()
        );
        passed = false;
    }
    Ok(if passed { Exit::Pass } else { Exit::Violation })
}

/// `text` with the part between the bench markers replaced by `table`;
/// None without the markers.
fn readme_block(text: &str, table: &str) -> Option<String> {
    let start = text.find(README_START)? + README_START.len();
    let end = start + text[start..].find(README_END)?;
    Some(format!("{}\n{table}{}", &text[..start], &text[end..]))
}

fn write_readme(path: &Path, table: &str) -> Result<(), CliError> {
    let text = std::fs::read_to_string(path)?;
    let updated = readme_block(&text, table)
        .ok_or_else(|| CliError::Usage(format!("{} lost its bench markers", path.display())))?;
    std::fs::write(path, updated)?;
    Ok(())
}

/// The report as README's tables and the lines under them.
fn markdown(report: &BenchReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "`idem bench` on {} ({} cores, {} jobs), build {}{}:\n",
        report.date,
        report.cores,
        report.jobs,
        report.build,
        if report.quick {
            " — a --quick sample, not the machine's figures"
        } else {
            ""
        }
    );
    match &report.simulator {
        Some(s) => simulator_markdown(&mut out, s),
        None => out.push_str("Simulator: not measured by this run (`--sections`).\n"),
    }
    match &report.postgres {
        Some(pg) => postgres_markdown(&mut out, pg),
        None => out.push_str("\nPostgreSQL path: not measured by this run (`--sections`).\n"),
    }
    out
}

fn simulator_markdown(out: &mut String, s: &sim::SimBench) {
    let _ = writeln!(
        out,
        "| scenario | seeds/s | steps/seed | wall/seed | bare turmoil/seed | sim_vs_turmoil_cost_ratio | every step: wall/seed | every step: ratio |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|");
    for b in &s.scenarios {
        let _ = writeln!(
            out,
            "| {} | {:.1} | {:.0} | {:.1} ms | {:.1} ms | {:.2} | {:.1} ms | {:.2} |",
            b.scenario,
            b.seeds_per_s,
            b.steps_per_seed,
            b.wall_per_seed_ms,
            b.turmoil_wall_per_seed_ms,
            b.sim_vs_turmoil_cost_ratio,
            b.exact_wall_per_seed_ms,
            b.exact_vs_turmoil_cost_ratio
        );
    }
    let _ = writeln!(
        out,
        "\n{} seeds per scenario, each run three ways in turn on one thread: idem (quiet time skipped), \
         idem taking every step (`skip_quiet = false`, the simulator before skips) and a bare turmoil \
         program replaying the run's traffic (same hosts, connections, segments, tick, latencies and \
         simulated time; no idem code; every step taken).\n",
        s.seeds_per_scenario
    );
    let c = &s.catalogue;
    let _ = writeln!(
        out,
        "- `catalogue_x1000_seconds`: **{:.1} s** on {} jobs ({}{} runs: {} passed, {} failed, {} errors; windows never reached: {})",
        s.catalogue_x1000_seconds,
        c.jobs,
        if s.catalogue_x1000_extrapolated {
            format!("extrapolated from {} seeds, ", c.seeds)
        } else {
            String::new()
        },
        c.runs,
        c.passed,
        c.failed,
        c.errors,
        if c.windows_never_reached.is_empty() {
            "none".to_owned()
        } else {
            c.windows_never_reached.join(", ")
        }
    );
    let _ = writeln!(
        out,
        "- 1 → {} jobs: {:.1} s → {:.1} s over {} runs ({:.2}×)",
        s.scaling.jobs,
        s.scaling.jobs_1_seconds,
        s.scaling.jobs_n_seconds,
        s.scaling.runs,
        s.scaling.speedup
    );
    let m = &s.memory;
    let kib =
        |v: Option<u64>| v.map_or("n/a".to_owned(), |k| format!("{:.1} MB", k as f64 / 1024.0));
    let _ = writeln!(
        out,
        "- memory: a {}-run sweep starts at {} and ends at {} resident, peak {}; a {}-run sweep peaks at {} (ratio {})",
        m.large.runs,
        kib(m.large.rss_start_kib),
        kib(m.large.rss_end_kib),
        kib(m.large.rss_peak_kib),
        m.small.runs,
        kib(m.small.rss_peak_kib),
        m.peak_ratio.map_or("n/a".to_owned(), |r| format!("{r:.3}"))
    );
}

fn postgres_markdown(out: &mut String, pg: &PgBenchReport) {
    let _ = writeln!(
        out,
        "\nThe PostgreSQL create path ({} s a point, about half the keys repeated; {}, pool of {}{}):\n",
        pg.seconds_per_point,
        pg.server_version
            .split(" on ")
            .next()
            .unwrap_or(&pg.server_version),
        pg.pool_connections_max,
        if pg.pool_ping {
            ", pinged before use"
        } else {
            ""
        }
    );
    let _ = writeln!(
        out,
        "| clients | http req/s | store req/s | pgbench tx/s | http p99 | pgbench p99 | http / pgbench | store / pgbench |"
    );
    let _ = writeln!(out, "|---:|---:|---:|---:|---:|---:|---:|---:|");
    for ratio in &pg.pg_vs_pgbench_throughput_ratio {
        let point = |path: pgbench::BenchPath| {
            pg.points
                .iter()
                .find(|p| p.path == path && p.clients == ratio.clients)
        };
        let (Some(http), Some(store), Some(raw)) = (
            point(pgbench::BenchPath::Http),
            point(pgbench::BenchPath::Store),
            point(pgbench::BenchPath::Pgbench),
        ) else {
            continue;
        };
        let _ = writeln!(
            out,
            "| {} | {:.0} | {:.0} | {:.0} | {:.1} ms | {:.1} ms | {:.2} | {:.2} |",
            ratio.clients,
            http.requests_per_s,
            store.requests_per_s,
            raw.requests_per_s,
            http.p99_ms,
            raw.p99_ms,
            ratio.http,
            ratio.store
        );
    }
    let c = &pg.checks;
    let _ = writeln!(
        out,
        "\n- answers checked: {}; duplicate rows: {}; violations: {}",
        c.requests_checked,
        c.duplicate_rows,
        c.violations.len()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_readme_block_is_replaced_between_its_markers_only() {
        let text = format!("intro\n{README_START}\nold table\n{README_END}\nafter\n");
        let updated = readme_block(&text, "new table\n").expect("markers");
        assert_eq!(
            updated,
            format!("intro\n{README_START}\nnew table\n{README_END}\nafter\n")
        );
        assert_eq!(readme_block("no markers", "x"), None);
        assert_eq!(
            readme_block(&format!("{README_END} {README_START}"), "x"),
            None
        );
    }
}
