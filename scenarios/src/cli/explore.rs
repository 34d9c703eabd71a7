//! `idem explore`: the property test. proptest generates whole schedules
//! (`crate::strategies`); the property is that every invariant holds, in
//! particular that each intent produces exactly one winning result. A
//! failure is shrunk to a minimal schedule and written as a scenario file
//! under `scenarios/regressions/`, which `idem run` replays and
//! `idem regress` keeps running in CI.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::Args;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};
use sha2::{Digest, Sha256};

use idem_core::design::Design;
use idem_sim::run::Verdict;

use super::common::{build, emit, execute};
use super::{CliError, Exit};
use crate::emit::to_file;
use crate::strategies::{Schedule, schedule};

/// How many shrinking steps one failure may take: each is a whole run.
const SHRINK_ITERS_MAX: u32 = 512;

#[derive(Debug, Args)]
pub struct ExploreArgs {
    /// How many schedules to generate and run.
    #[arg(long, default_value_t = 256)]
    pub cases: u32,
    /// The design under test (see `idem run --help`); `planted-swapped-cas`
    /// is a bug planted to show that the search finds and shrinks one.
    #[arg(long, default_value = "correct")]
    pub design: Design,
    /// Seeds the generator: the same seed explores the same schedules.
    #[arg(long, default_value_t = 0)]
    pub rng_seed: u64,
    /// Where a failing schedule is written.
    #[arg(long, default_value = "scenarios/regressions")]
    pub out: PathBuf,
    /// Do not write the failing schedule, only report it.
    #[arg(long)]
    pub no_write: bool,
}

/// What the search came to.
#[derive(Debug)]
pub enum Explored {
    /// Every generated schedule passed.
    Passed { cases: u32 },
    /// A schedule failed; here it is, shrunk, with the reason.
    Failed { minimal: Schedule, reason: String },
}

/// Runs the property over `cases` schedules for `design`.
pub fn search(cases: u32, design: Design, rng_seed: u64) -> Explored {
    let config = Config {
        cases,
        max_shrink_iters: SHRINK_ITERS_MAX,
        failure_persistence: None,
        ..Config::default()
    };
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&rng_seed.to_le_bytes());
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes);
    let mut runner = TestRunner::new_with_rng(config, rng);
    let outcome = runner.run(&schedule(), |generated| {
        match execute(&generated.scenario, generated.seed, design) {
            Ok(run) if run.report.verdict == Verdict::Pass => Ok(()),
            Ok(run) => {
                let violated: Vec<String> = run
                    .report
                    .violations
                    .iter()
                    .map(|v| {
                        format!(
                            "invariant {} ({:?}): {}",
                            v.invariant.number(),
                            v.invariant,
                            v.message
                        )
                    })
                    .collect();
                Err(TestCaseError::fail(violated.join("\n")))
            }
            Err(error) => Err(TestCaseError::fail(error)),
        }
    });
    match outcome {
        Ok(()) => Explored::Passed { cases },
        Err(TestError::Fail(reason, minimal)) => Explored::Failed {
            minimal,
            reason: reason.message().to_owned(),
        },
        Err(TestError::Abort(reason)) => Explored::Failed {
            minimal: Schedule {
                scenario: idem_sim::scenario::Scenario {
                    name: "aborted".to_owned(),
                    description: String::new(),
                    topology: Default::default(),
                    policy: Default::default(),
                    clients: Vec::new(),
                    faults: Vec::new(),
                    timing: Default::default(),
                    expect_windows: Vec::new(),
                },
                seed: 0,
            },
            reason: format!("the search aborted: {}", reason.message()),
        },
    }
}

/// Writes `minimal` as a regression file; returns its path. The file name
/// carries the seed (`…-seed-N.toml`), which `idem regress` reads back.
pub fn write_regression(
    dir: &Path,
    minimal: &Schedule,
    design: Design,
    reason: &str,
    found_by: &str,
) -> Result<PathBuf, CliError> {
    let mut scenario = minimal.scenario.clone();
    scenario.description = format!(
        "A schedule `{found_by}` found failing under the {design} design, shrunk to a minimum. \
         The correct design must keep passing it."
    );
    let body = to_file(&scenario, "")
        .map_err(|e| CliError::Usage(format!("cannot write the schedule: {e}")))?;
    let digest = hex::encode(&Sha256::digest(body.as_bytes())[..4]);
    let path = dir.join(format!("{design}-{digest}-seed-{}.toml", minimal.seed));
    let mut comment = format!("Found by: {found_by}\nIt failed under --design {design} with:\n");
    for line in reason.lines() {
        let _ = writeln!(comment, "  {line}");
    }
    let _ = write!(
        comment,
        "Reproduce with: idem run {} --seed {} --design {design}",
        path.display(),
        minimal.seed
    );
    let text = to_file(&scenario, &comment)
        .map_err(|e| CliError::Usage(format!("cannot write the schedule: {e}")))?;
    std::fs::create_dir_all(dir)?;
    std::fs::write(&path, text)?;
    Ok(path)
}

/// A one-line picture of a schedule, for reports.
pub fn describe(schedule: &Schedule) -> String {
    let s = &schedule.scenario;
    let actions: usize = s.clients.iter().map(|c| c.actions.len()).sum();
    format!(
        "seed {}, {} client(s), {actions} action(s), {} fault(s), policy {:?}",
        schedule.seed,
        s.clients.len(),
        s.faults.len(),
        s.policy
    )
}

pub fn explore(args: ExploreArgs) -> Result<Exit, CliError> {
    let found_by = format!(
        "idem explore --design {} --cases {} --rng-seed {}",
        args.design, args.cases, args.rng_seed
    );
    match search(args.cases, args.design, args.rng_seed) {
        Explored::Passed { cases } => {
            emit(&format!(
                "PASS: {cases} generated schedules, every invariant held under --design {}\n",
                args.design
            ));
            Ok(Exit::Pass)
        }
        Explored::Failed { minimal, reason } => {
            let mut out = format!(
                "FAIL under --design {}: shrunk to {}\n{reason}\n",
                args.design,
                describe(&minimal)
            );
            if !args.no_write {
                let path = write_regression(&args.out, &minimal, args.design, &reason, &found_by)?;
                let _ = writeln!(out, "written to {}", path.display());
                let _ = writeln!(
                    out,
                    "reproduce with: idem run {} --seed {} --design {} (build: idem {})",
                    path.display(),
                    minimal.seed,
                    args.design,
                    build()
                );
            }
            emit(&out);
            Ok(Exit::Violation)
        }
    }
}
