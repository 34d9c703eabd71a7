//! What a seed and a sweep cost (`idem bench`), against outside references
//! measured in the same run, written to `reports/bench/latest.json` and as
//! a Markdown table (`latest.md`, and README's bench section with
//! `--readme`).
//!
//! Sections: the simulator ([`sim`]) and the PostgreSQL create path
//! against pgbench ([`idem_real::pgbench`]), on a throwaway server. A plan
//! picks them; a section not run is null in `latest.json`.
//!
//! The bench reads the wall clock (that is what it measures) and never
//! runs in CI's default path except `--quick`, a small bounded run that
//! checks the bench itself works. The command line is `crate::cli`'s
//! `bench`.

pub mod fuzz;
pub mod sim;
mod timing;

use std::fmt::Write as _;

use serde::Serialize;

use crate::record::build;
use idem_real::pgbench::{self, PgBenchArgs, PgBenchReport};
use idem_scenarios::load::Loaded;

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

/// A part of the bench that a plan can pick.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Section {
    Simulator,
    Postgres,
}

/// What one bench measures.
#[derive(Clone, Debug)]
pub struct BenchPlan {
    pub sections: Vec<Section>,
    /// The simulator section's sizes and threads.
    pub simulator: sim::SimPlan,
    pub postgres: PgBenchArgs,
    /// A `--quick` run: small samples, figures extrapolated.
    pub quick: bool,
}

/// Why the bench measured nothing, or not all of it.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Bad flags, no PostgreSQL or pgbench, a load generator that could
    /// not connect.
    #[error("{0}")]
    Postgres(#[from] pgbench::PgBenchError),
}

/// Runs the plan's sections over `scenarios` (the catalogue).
pub fn bench(scenarios: &[Loaded], plan: &BenchPlan) -> Result<BenchReport, BenchError> {
    let simulator = plan.sections.contains(&Section::Simulator).then(|| {
        eprintln!("idem bench: simulator ({} scenarios)", scenarios.len());
        sim::bench(scenarios, plan.simulator)
    });
    let postgres = if plan.sections.contains(&Section::Postgres) {
        eprintln!(
            "idem bench: PostgreSQL against pgbench (clients {:?}, {} s a point)",
            plan.postgres.clients, plan.postgres.seconds_per_point
        );
        Some(pgbench::run(&plan.postgres)?)
    } else {
        None
    };
    Ok(BenchReport {
        schema: 2,
        date: timing::now_utc(),
        build: build(),
        cores: crate::runner::cores().get(),
        jobs: plan.simulator.jobs.get(),
        quick: plan.quick,
        simulator,
        postgres,
    })
}

impl BenchReport {
    /// `latest.json`'s text.
    pub fn to_json(&self) -> String {
        let mut json = serde_json::to_string_pretty(self).expect("a bench report serializes");
        json.push('\n');
        json
    }

    /// Whether every run measured passed (a bench of runs that did not
    /// pass measured something else); otherwise why not, one line each.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if let Some(s) = &self.simulator {
            let not_passed: u64 = s.scenarios.iter().map(|b| b.not_passed).sum::<u64>()
                + s.catalogue.failed
                + s.catalogue.errors;
            let not_passed = not_passed + s.fuzz.failed + s.fuzz.errors;
            if not_passed > 0 || !s.catalogue.windows_never_reached.is_empty() {
                problems.push(format!(
                    "{not_passed} runs did not pass, windows never reached: {:?}",
                    s.catalogue.windows_never_reached
                ));
            }
        }
        if let Some(pg) = &self.postgres
            && !pg.passed()
        {
            problems.push(format!(
                "the PostgreSQL path gave {} answers it must not",
                pg.checks.violations.len()
            ));
        }
        problems
    }
}

/// `text` with the part between the bench markers replaced by `table`;
/// None without the markers.
pub fn readme_block(text: &str, table: &str) -> Option<String> {
    let start = text.find(README_START)? + README_START.len();
    let end = start + text[start..].find(README_END)?;
    Some(format!("{}\n{table}{}", &text[..start], &text[end..]))
}

/// The report as README's tables and the lines under them.
pub fn markdown(report: &BenchReport) -> String {
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
    simulator_lines(out, s);
}

/// The catalogue, scaling and memory lines under the simulator's table.
fn simulator_lines(out: &mut String, s: &sim::SimBench) {
    let c = &s.catalogue;
    let extrapolated = if s.catalogue_x1000_extrapolated {
        format!("extrapolated from {} seeds, ", c.seeds)
    } else {
        String::new()
    };
    let never = if c.windows_never_reached.is_empty() {
        "none".to_owned()
    } else {
        c.windows_never_reached.join(", ")
    };
    let _ = writeln!(
        out,
        "- `catalogue_x1000_seconds`: **{:.1} s** on {} jobs ({extrapolated}{} runs: {} passed, {} failed, {} errors; windows never reached: {never})",
        s.catalogue_x1000_seconds, c.jobs, c.runs, c.passed, c.failed, c.errors,
    );
    speed_goal_lines(out, s);
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

/// The speed goals' two figures besides the catalogue's: a fuzz world's rate
/// and a catalogue seed against bare turmoil.
fn speed_goal_lines(out: &mut String, s: &sim::SimBench) {
    let f = &s.fuzz;
    let _ = writeln!(
        out,
        "- `fuzz_worlds_per_second`: **{:.1}** on {} jobs (`idem fuzz --seeds 0..{}`: {:.1} s, {} passed, {} failed, {} errors); a world costs {:.1}× a catalogue run",
        f.worlds_per_second,
        f.jobs,
        f.worlds,
        f.wall_seconds,
        f.passed,
        f.failed,
        f.errors,
        f.world_vs_catalogue_run_cost_ratio
    );
    let _ = writeln!(
        out,
        "- `catalogue_seed_vs_turmoil_ratio`: **{:.3}** (a catalogue seed, every scenario once, against the bare turmoil replays of its traffic)",
        s.catalogue_seed_vs_turmoil_ratio
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
        postgres_row(out, pg, ratio);
    }
    minimal_markdown(out, pg);
    let c = &pg.checks;
    let _ = writeln!(
        out,
        "\n- answers checked: {}; duplicate rows: {}; violations: {}",
        c.requests_checked,
        c.duplicate_rows,
        c.violations.len()
    );
}

/// idem's server against the minimal service the bench builds (same
/// statement, same answers, no idem code), per client count.
fn minimal_markdown(out: &mut String, pg: &PgBenchReport) {
    let _ = writeln!(
        out,
        "\nidem's server against a minimal hyper + sqlx service (same statement and answers, no idem code; \
         CPU of each server's own runtime threads per create, the load generator left out):\n"
    );
    let _ = writeln!(
        out,
        "| clients | http req/s | minimal req/s | http CPU/create | minimal CPU/create | server_cpu_vs_minimal_ratio | http_vs_minimal_throughput_ratio |"
    );
    let _ = writeln!(out, "|---:|---:|---:|---:|---:|---:|---:|");
    let ms = |v: Option<f64>| v.map_or("n/a".to_owned(), |v| format!("{v:.3} ms"));
    for ratio in &pg.server_vs_minimal {
        let point = |path: pgbench::BenchPath| {
            pg.points
                .iter()
                .find(|p| p.path == path && p.clients == ratio.clients)
        };
        let (Some(http), Some(minimal)) = (
            point(pgbench::BenchPath::Http),
            point(pgbench::BenchPath::Minimal),
        ) else {
            continue;
        };
        let _ = writeln!(
            out,
            "| {} | {:.0} | {:.0} | {} | {} | {} | {:.2} |",
            ratio.clients,
            http.requests_per_s,
            minimal.requests_per_s,
            ms(http.server_cpu_ms_per_create),
            ms(minimal.server_cpu_ms_per_create),
            ratio
                .server_cpu_vs_minimal_ratio
                .map_or("n/a".to_owned(), |r| format!("{r:.2}")),
            ratio.http_vs_minimal_throughput_ratio
        );
    }
}

/// One client count's row: the three paths side by side.
fn postgres_row(out: &mut String, pg: &PgBenchReport, ratio: &pgbench::RatioAt) {
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
        return;
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
