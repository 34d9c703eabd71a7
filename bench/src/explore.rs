//! The property test behind `idem explore`: proptest generates whole
//! schedules ([`crate::strategies`]); the property is that every invariant
//! holds, in particular that each intent produces exactly one winning
//! result. A failure is shrunk to a minimal schedule and written as a
//! scenario file under `scenarios/regressions/`, which `idem run` replays
//! and `idem regress` keeps running in CI.
//!
//! The cases are cut into chunks of [`CASES_PER_CHUNK`], each a proptest
//! run of its own with a generator seeded by the root seed and the chunk's
//! number, spread over a [`Runner`]'s threads. The chunks are fixed by the
//! root seed, not by the threads, and the failure reported is the first
//! failing chunk's (chunks after a known failure are skipped, never chunks
//! before it), so the same seed explores the same schedules and reports the
//! same failure whatever the number of threads. Chunk 0 is seeded as the
//! whole search was before it was cut, so the first 64 schedules of a seed
//! are the ones they always were.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};
use sha2::{Digest, Sha256};

use idem_core::design::Design;
use idem_sim::run::Verdict;

use crate::output::{self, IoError};
use crate::record::execute;
use crate::runner::{Progress, Runner};
use crate::strategies::{Schedule, schedule};
use idem_scenarios::emit::{EmitError, to_file};

/// How many shrinking steps one failure may take: each is a whole run.
const SHRINK_ITERS_MAX: u32 = 512;

/// Schedules one chunk runs: the unit a thread takes.
pub const CASES_PER_CHUNK: u32 = 64;

/// What the search came to.
#[derive(Debug)]
pub enum Explored {
    /// Every generated schedule passed.
    Passed { cases: u32 },
    /// A schedule failed; here it is, shrunk, with the reason.
    Failed { minimal: Schedule, reason: String },
}

/// Runs the property over `cases` schedules for `design`, on `runner`.
pub fn search(cases: u32, design: Design, rng_seed: u64, runner: Runner) -> Explored {
    let chunks = cases.div_ceil(CASES_PER_CHUNK) as usize;
    let first_failure = AtomicUsize::new(usize::MAX);
    let mut found: Option<Explored> = None;
    runner
        .progress(Progress::on_terminal("chunks of schedules"))
        .run(
            chunks,
            |chunk| {
                if first_failure.load(Ordering::SeqCst) < chunk {
                    return None;
                }
                let done = chunk as u32 * CASES_PER_CHUNK;
                let explored =
                    search_chunk(CASES_PER_CHUNK.min(cases - done), design, rng_seed, chunk);
                if matches!(explored, Explored::Failed { .. }) {
                    first_failure.fetch_min(chunk, Ordering::SeqCst);
                }
                Some(explored)
            },
            |_, explored, _| {
                if found.is_none()
                    && let Some(failed @ Explored::Failed { .. }) = explored
                {
                    found = Some(failed);
                }
            },
        );
    found.unwrap_or(Explored::Passed { cases })
}

/// One chunk: a proptest run of `cases` schedules from the generator of
/// (`rng_seed`, `chunk`).
fn search_chunk(cases: u32, design: Design, rng_seed: u64, chunk: usize) -> Explored {
    let config = Config {
        cases,
        max_shrink_iters: SHRINK_ITERS_MAX,
        failure_persistence: None,
        ..Config::default()
    };
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&rng_seed.to_le_bytes());
    seed_bytes[8..16].copy_from_slice(&(chunk as u64).to_le_bytes());
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
        Err(TestError::Abort(reason)) => aborted(reason.message()),
    }
}

/// A search that proptest gave up on.
fn aborted(reason: &str) -> Explored {
    Explored::Failed {
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
        reason: format!("the search aborted: {reason}"),
    }
}

/// Why a regression file could not be written.
#[derive(Debug, thiserror::Error)]
pub enum WriteRegressionError {
    #[error("cannot write the schedule: {0}")]
    Emit(#[from] EmitError),
    #[error("{0}")]
    Io(#[from] IoError),
}

/// Writes `minimal` as a regression file; returns its path. The file name
/// carries the seed (`…-seed-N.toml`), which `idem regress` reads back.
pub fn write_regression(
    dir: &Path,
    minimal: &Schedule,
    design: Design,
    reason: &str,
    found_by: &str,
) -> Result<PathBuf, WriteRegressionError> {
    let mut scenario = minimal.scenario.clone();
    scenario.description = format!(
        "A schedule `{found_by}` found failing under the {design} design, shrunk to a minimum. \
         The correct design must keep passing it."
    );
    let body = to_file(&scenario, "")?;
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
    let text = to_file(&scenario, &comment)?;
    output::create_dir(dir)?;
    output::write(&path, text)?;
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
