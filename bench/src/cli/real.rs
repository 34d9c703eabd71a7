//! `idem real`: one scenario, one seed, for real (`idem_real`). Arguments
//! in, the record out.

use std::ops::Range;
use std::path::PathBuf;

use clap::Args;

use idem_core::design::Design;
use idem_reports::RunVerdict;
use idem_reports::html::Provenance;
use idem_sim::scenario::Scenario;

use super::{CliError, Exit};
use crate::runner::Seeds;
use idem_real::{
    self as real, Database, RealError, RealOptions, RealOutcome, System, compare, record,
};
use idem_scenarios::load::load;

#[derive(Debug, Args)]
pub struct RealArgs {
    /// A catalogue name (`idem list`) or a scenario file, run unchanged.
    /// With `--compare` and no scenario: every catalogue scenario real mode
    /// can run.
    pub scenario: Option<String>,
    /// The root seed: it draws the clients' jitter and replicas, the
    /// providers' and the links' draws (a real run is not replayed byte for
    /// byte: the machine's timing is part of it).
    #[arg(long, env = "IDEM_SEED", default_value_t = 0)]
    pub seed: u64,
    /// Fidelity: run each seed in the simulator and for real, and print
    /// both side by side (verdict per invariant, windows reached, outcome
    /// mix). The correct design passing in one world and failing in the
    /// other is a finding (exit 1).
    #[arg(long)]
    pub compare: bool,
    /// With `--compare`: the seeds, `A..B` (B excluded), `A..=B` or `N`
    /// (instead of `--seed`).
    #[arg(long, requires = "compare", value_name = "A..B")]
    pub seeds: Option<Seeds>,
    /// The design under test, passed to every `idem serve` process.
    #[arg(long, default_value = "correct")]
    pub design: Design,
    /// Test anyone's service instead (docs/TARGET.md): a shell command run
    /// once per API replica, `{port}` (where it must listen on 127.0.0.1)
    /// and `{config}` (a JSON file: listen, database_url, tokens,
    /// providers, models, certified, attempt_deadline_ms, attempts_max,
    /// policy) replaced.
    #[arg(long, value_name = "COMMAND", conflicts_with_all = ["design", "compare"])]
    pub target: Option<String>,
    /// Write the JSON record here (every invariant held, violated, or not
    /// judged with the reason).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write the run's decisions here (each user's jitter and replica, each
    /// chunk's delay through its link, each provider's draws, when each
    /// fault took effect), for `idem run SCENARIO --seed N --decisions FILE`
    /// to replay in the simulator.
    #[arg(long, value_name = "FILE", conflicts_with = "compare")]
    pub decisions_out: Option<PathBuf>,
    /// Write the run's page here: the simulator's page from the real trace.
    #[arg(long, value_name = "FILE.html")]
    pub report: Option<PathBuf>,
    /// Use this PostgreSQL (in a schema of the run's own, dropped at the
    /// end; it needs wal_level = logical) instead of a throwaway cluster.
    #[arg(long, value_name = "URL")]
    pub database_url: Option<String>,
    /// Keep the run's files here: each process's log and journal, the
    /// service configuration, trace.jsonl, decisions.json, and the
    /// database as database.sql (pg_dump; `psql -f` restores it).
    #[arg(long, value_name = "DIR")]
    pub keep: Option<PathBuf>,
    /// With `--target`: force the scenario's create race instead of
    /// waiting for luck. Clicks the scenario sends together (one owner's
    /// key, send windows that overlap) reach the target together, and its
    /// writes to the store wait (500 ms at most) until as many lookups as
    /// clicks were sent, or as many writes wait. The record says what was
    /// forced.
    #[arg(long, requires = "target")]
    pub force: bool,
}

fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Usage(format!("cannot start a runtime: {e}")))
}

fn write(path: &std::path::Path, text: &str) -> Result<(), CliError> {
    std::fs::write(path, text)
        .map_err(|e| CliError::Usage(format!("cannot write {}: {e}", path.display())))
}

/// How to run `seed` for real, as the arguments say.
fn options(args: &RealArgs, seed: u64) -> Result<RealOptions, CliError> {
    let program = std::env::current_exe()
        .map_err(|e| CliError::Usage(format!("cannot find the idem binary: {e}")))?;
    let system = match &args.target {
        Some(command) => System::Target {
            command: command.clone(),
        },
        None => System::Idem {
            program,
            design: args.design,
        },
    };
    Ok(RealOptions {
        seed,
        system,
        database: args
            .database_url
            .clone()
            .map_or(Database::Throwaway, Database::Url),
        keep: args.keep.clone(),
        force: args.force,
    })
}

pub fn real(args: RealArgs) -> Result<Exit, CliError> {
    if args.compare {
        return compare(&args);
    }
    let Some(scenario) = &args.scenario else {
        return Err(CliError::Usage(
            "name a scenario (a catalogue name or a file); only --compare runs the catalogue"
                .to_owned(),
        ));
    };
    let loaded = load(scenario)?;
    let options = options(&args, args.seed)?;
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
    if let (Some(path), Ok(outcome)) = (&args.decisions_out, &outcome) {
        let json = serde_json::to_string_pretty(&outcome.decisions).expect("decisions serialize");
        write(path, &format!("{json}\n"))?;
    }
    if let (Some(path), Ok(outcome)) = (&args.report, &outcome) {
        write_page(&args, path, &loaded.scenario, &record, outcome)?;
    }
    super::common::emit(&record::text(&record));
    Ok(if record.run.verdict == RunVerdict::Pass {
        Exit::Pass
    } else {
        Exit::Violation
    })
}

/// Writes the run's page, its provenance taken from the record's build so
/// the page names the binary that ran.
fn write_page(
    args: &RealArgs,
    path: &std::path::Path,
    scenario: &Scenario,
    record: &record::RealRecord,
    outcome: &RealOutcome,
) -> Result<(), CliError> {
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
    write(path, &record::page(scenario, record, outcome, &provenance))
}

/// `--compare`: each seed of each scenario in the simulator, then for real.
fn compare(args: &RealArgs) -> Result<Exit, CliError> {
    let scenarios = match &args.scenario {
        Some(target) => vec![load(target)?],
        None => idem_scenarios::load::load_catalog()?,
    };
    let seeds = args
        .seeds
        .map_or(args.seed..args.seed + 1, |s| s.start..s.end);
    let runtime = runtime()?;
    let mut gathered = Gathered::default();
    for loaded in &scenarios {
        compare_scenario(
            args,
            &runtime,
            &loaded.scenario,
            seeds.clone(),
            &mut gathered,
        )?;
    }
    let Gathered {
        comparisons,
        refused,
        errors,
    } = gathered;
    let summary = compare::Summary::of(&comparisons, refused, errors);
    super::common::emit(&summary.text());
    if let Some(path) = &args.json {
        let json = serde_json::json!({"comparisons": comparisons, "summary": summary});
        let text = serde_json::to_string_pretty(&json).expect("comparisons serialize");
        write(path, &format!("{text}\n"))?;
    }
    let violated = comparisons.iter().any(|c| !c.sim.passed || !c.real.passed);
    Ok(
        if summary.findings > 0 || violated || !summary.errors.is_empty() {
            Exit::Violation
        } else {
            Exit::Pass
        },
    )
}

/// What `--compare` gathers over the scenarios, for the summary and the
/// JSON at the end.
#[derive(Default)]
struct Gathered {
    comparisons: Vec<compare::Comparison>,
    /// Scenarios real mode refused, with the reason.
    refused: Vec<String>,
    /// Real runs that could not finish, with the error.
    errors: Vec<String>,
}

/// One scenario's seeds compared, each printed as it ends. A scenario real
/// mode refuses is noted and skipped when the whole catalogue runs, and an
/// error when it was named.
fn compare_scenario(
    args: &RealArgs,
    runtime: &tokio::runtime::Runtime,
    scenario: &Scenario,
    seeds: Range<u64>,
    gathered: &mut Gathered,
) -> Result<(), CliError> {
    for seed in seeds {
        let options = options(args, seed)?;
        if let Err(why) = real::check(scenario, &options) {
            if args.scenario.is_some() {
                return Err(CliError::Usage(why.to_string()));
            }
            gathered.refused.push(format!("{}: {why}", scenario.name));
            break;
        }
        let sim = compare::simulate(scenario, seed, args.design).map_err(CliError::Usage)?;
        // A run that could not finish is said, and the rest go on.
        let outcome = match runtime.block_on(real::run(scenario, &options)) {
            Ok(outcome) => outcome,
            Err(e) => {
                super::common::emit(&format!("{} seed {seed}: ERROR {e}\n", scenario.name));
                gathered
                    .errors
                    .push(format!("{} seed {seed}: {e}", scenario.name));
                continue;
            }
        };
        let comparison = compare::compare(
            scenario,
            seed,
            args.design,
            sim,
            compare::summarize(&outcome),
        );
        super::common::emit(&compare::text(&comparison));
        gathered.comparisons.push(comparison);
    }
    Ok(())
}
