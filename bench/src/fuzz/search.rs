//! The fuzzer's search: every seed of the plan a whole generated world,
//! run on a [`Runner`]; failures deduplicated by signature, each
//! signature's first seed shrunk and kept ([`super::corpus`]); the
//! summary.
//!
//! With a seed range the summary is the same whatever the number of
//! threads (shrinking is a function of the world, the seed, the design and
//! the signature alone). With a time budget the number of seeds run
//! depends on the machine.

use std::collections::{BTreeMap, BTreeSet};
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use idem_core::design::Design;
use idem_reports::fuzz::{FuzzHeader, FuzzRun, FuzzTally};
use idem_reports::sweep::{SeedRange, Shard as ReportShard};
use idem_reports::{FuzzSummary, RunVerdict};

use super::bias::Bias;
use super::campaign::{self, Stop};
use super::corpus::{Failed, KeepError, ShrinkPlan, shrink_all};
use super::guided::{Campaign, Lever, Levers};
use super::world::FAULT_KINDS;
use super::{Signature, exercised, generated, prepare_leaning};
use crate::output::IoError;
use crate::record::{all_windows, build, execute, invariant_name, window_name};
use crate::runner::{Progress, Runner, SEEDS_MAX, Seeds, Shard};

/// Which seeds to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeedPlan {
    /// The range's seeds (the shard's part of it).
    Range(Seeds),
    /// Seeds from `start` on (the shard's part) until `budget` of wall
    /// time has passed, at most [`SEEDS_MAX`].
    Timed { start: u64, budget: Duration },
    /// The guided search ([`super::guided`]) from seed `start`'s world on,
    /// until `budget` of wall time has passed, at most [`SEEDS_MAX`] runs.
    /// A shard starts its fresh worlds at `start + index * GUIDED_SHARD_STRIDE`.
    Guided { start: u64, budget: Duration },
}

/// How far apart the fresh seeds of a guided campaign's shards start: each
/// shard is a campaign of its own, on seeds no other shard draws.
pub const GUIDED_SHARD_STRIDE: u64 = 1_000_000_000;

/// What to fuzz.
#[derive(Clone, Debug)]
pub struct FuzzPlan {
    pub seeds: SeedPlan,
    pub shard: Shard,
    pub design: Design,
    /// Candidate runs the shrinker may make per failure signature.
    pub shrink_runs: u32,
    /// Where each failure's minimal world is written, if anywhere.
    pub corpus: Option<PathBuf>,
    pub jobs: Option<NonZeroUsize>,
    /// How the worlds' coin tosses lean (none: the plain swarm), and the
    /// file that said so, for the found-by line.
    pub bias: Bias,
    pub directed_by: Option<String>,
    /// Keep every run's line for the summary's `runs` (memory then grows
    /// with the runs, not only with the failures).
    pub keep_runs: bool,
}

/// Why a fuzz run could not finish.
#[derive(Debug, thiserror::Error)]
pub enum FuzzError {
    #[error("shard {}/{} of seeds {}..{} holds no seeds", shard.index, shard.count, seeds.start, seeds.end)]
    NoSeeds { seeds: Seeds, shard: Shard },
    #[error("{0}")]
    Io(#[from] IoError),
    #[error("{0}")]
    Keep(#[from] KeepError),
}

/// The summary and how long the two halves took.
#[derive(Debug)]
pub struct Fuzzed {
    pub summary: FuzzSummary,
    pub threads: usize,
    pub searched: Duration,
    pub shrunk: Duration,
}

/// Runs the plan: the seeds, then the shrinking of each new signature.
pub fn fuzz(plan: &FuzzPlan) -> Result<Fuzzed, FuzzError> {
    if let SeedPlan::Range(seeds) = plan.seeds
        && seeds.shard(plan.shard).is_empty()
    {
        return Err(FuzzError::NoSeeds {
            seeds,
            shard: plan.shard,
        });
    }
    if let Some(dir) = &plan.corpus {
        crate::output::create_dir(dir)?;
    }
    let runner = Runner::new(plan.jobs);
    let threads = runner.jobs();
    let (searched_seeds, searched) = match plan.seeds {
        SeedPlan::Guided { start, budget } => run_guided(plan, start, budget),
        _ => run_seeds(plan, runner),
    };
    let shrinking = ShrinkPlan {
        design: plan.design,
        shrink_runs: plan.shrink_runs,
        corpus: plan.corpus.as_deref(),
        found_by: &found_by(plan),
        bias: &plan.bias,
    };
    let Searched { tally, firsts } = searched_seeds;
    let firsts = firsts.into_values().collect();
    let (failures, shrunk) = shrink_all(firsts, &shrinking, Runner::new(plan.jobs))?;
    let header = header(plan, tally.seeds_end());
    let summary: FuzzSummary = tally.finish(header, failures);
    Ok(Fuzzed {
        summary,
        threads,
        searched,
        shrunk,
    })
}

/// What the search keeps: the aggregates, and each signature's failure
/// with the lowest seed (the one shrunk), so memory grows with distinct
/// failures, not with runs.
struct Searched {
    tally: FuzzTally,
    firsts: BTreeMap<Signature, Failed>,
}

impl Searched {
    fn add(&mut self, (run, failed): Ran) {
        if let Some(failed) = failed {
            match self.firsts.get(&failed.signature) {
                Some(known) if known.seed <= failed.seed => {}
                _ => {
                    self.firsts.insert(failed.signature.clone(), failed);
                }
            }
        }
        self.tally.add(run);
    }
}

/// The summary's header: what was fuzzed, by which build.
fn header(plan: &FuzzPlan, seeds_end: Option<u64>) -> FuzzHeader {
    let (seeds, time_budget_s) = match plan.seeds {
        SeedPlan::Range(range) => (
            SeedRange {
                start: range.start,
                end: range.end,
            },
            None,
        ),
        SeedPlan::Timed { start, budget } => (
            SeedRange {
                start,
                end: seeds_end.unwrap_or(start),
            },
            Some(budget.as_secs()),
        ),
        SeedPlan::Guided { start, budget } => {
            let start = guided_start(start, plan.shard);
            (
                SeedRange {
                    start,
                    end: seeds_end.unwrap_or(start),
                },
                Some(budget.as_secs()),
            )
        }
    };
    FuzzHeader {
        design: plan.design.name().to_owned(),
        seeds,
        time_budget_s,
        shard: ReportShard {
            index: plan.shard.index,
            count: plan.shard.count,
        },
        fault_kinds: fault_kinds(),
        windows: all_windows(),
        build: build(),
    }
}

/// Every fault kind the generator knows, in its table's order.
fn fault_kinds() -> Vec<String> {
    FAULT_KINDS
        .iter()
        .map(|k| k.kind.name().to_owned())
        .collect()
}

/// The command that found a failure, for file headers.
fn found_by(plan: &FuzzPlan) -> String {
    let mut command = format!("idem fuzz --design {}", plan.design);
    match plan.seeds {
        SeedPlan::Range(range) => {
            command.push_str(&format!(" --seeds {}..{}", range.start, range.end));
        }
        SeedPlan::Timed { start, budget } => {
            command.push_str(&format!(
                " --budget {}s --blind --start {start}",
                budget.as_secs()
            ));
        }
        SeedPlan::Guided { start, budget } => {
            command.push_str(&format!(" --budget {}s --start {start}", budget.as_secs()));
        }
    }
    if plan.shard.count > 1 {
        command.push_str(&format!(
            " --shard {}/{}",
            plan.shard.index, plan.shard.count
        ));
    }
    if let Some(file) = &plan.directed_by {
        command.push_str(&format!(" --direct {file}"));
    }
    command
}

/// One seed's run, reduced: the summary's line, and the failure, if any.
type Ran = (FuzzRun, Option<Failed>);

/// Runs the plan's seeds; the results come back by seed and are added up.
fn run_seeds(plan: &FuzzPlan, runner: Runner) -> (Searched, Duration) {
    let (count, seed_at): (usize, Box<dyn Fn(usize) -> u64 + Sync>) = match plan.seeds {
        SeedPlan::Range(range) => {
            let list = range.shard(plan.shard);
            (list.len(), Box::new(move |i| list[i]))
        }
        SeedPlan::Timed { start, .. } | SeedPlan::Guided { start, .. } => {
            let shard = plan.shard;
            let count = usize::try_from(SEEDS_MAX).unwrap_or(usize::MAX);
            (
                count,
                Box::new(move |i| {
                    shard
                        .nth_seed(start, i as u64)
                        .expect("SEEDS_MAX seeds from a u64 start fit")
                }),
            )
        }
    };
    let runner = match plan.seeds {
        SeedPlan::Timed { budget, .. } | SeedPlan::Guided { budget, .. } => runner.budget(budget),
        SeedPlan::Range(_) => runner,
    };
    let progress = Progress::on_terminal("runs").with_rate();
    progress.message("0 failed");
    let mut searched = Searched {
        tally: FuzzTally::new(&fault_kinds(), plan.keep_runs),
        firsts: BTreeMap::new(),
    };
    let mut seen = Seen::default();
    let finished = runner.progress(progress).run(
        count,
        |index| run_seed(seed_at(index), plan.design, &plan.bias),
        |_, one, progress| {
            progress.message(seen.add(&one));
            searched.add(one);
        },
    );
    (searched, finished.wall)
}

/// Runs a guided campaign for `budget` from `start` (this shard's part:
/// its own fresh seeds); every run is tallied, each signature's first
/// failure kept with its world.
fn run_guided(plan: &FuzzPlan, start: u64, budget: Duration) -> (Searched, Duration) {
    let start = guided_start(start, plan.shard);
    let progress = Progress::on_terminal("runs").with_rate();
    progress.start(None);
    let mut searched = Searched {
        tally: FuzzTally::new(&fault_kinds(), plan.keep_runs),
        firsts: BTreeMap::new(),
    };
    let mut seen = Seen::default();
    let stop = Stop {
        runs_max: SEEDS_MAX,
        cpu_max: None,
        wall_max: Some(budget),
        at_first_failure: false,
    };
    let campaign = Campaign::new(start, Levers::default());
    let (outcome, _) = campaign::run(campaign, plan.design, plan.jobs, stop, &mut |c, o| {
        let mut one = judged(c.seed, &c.world, o);
        if let Some(failed) = &mut one.1 {
            failed.world = (c.lever != Lever::Fresh).then(|| c.world.clone());
        }
        progress.tick();
        progress.message(seen.add(&one));
        searched.add(one);
    });
    progress.finish();
    (searched, outcome.wall)
}

/// Where a guided shard's fresh worlds start.
fn guided_start(start: u64, shard: Shard) -> u64 {
    start.saturating_add(shard.index.saturating_mul(GUIDED_SHARD_STRIDE))
}

/// What the progress bar tells of the runs so far.
#[derive(Debug, Default)]
struct Seen {
    failed: usize,
    signatures: BTreeSet<Signature>,
    kinds: BTreeSet<String>,
}

impl Seen {
    fn add(&mut self, (run, failed): &Ran) -> String {
        self.kinds.extend(run.exercised.iter().cloned());
        if let Some(f) = failed {
            self.failed += 1;
            self.signatures.insert(f.signature.clone());
        }
        format!(
            "{} failed ({} signatures), fault kinds {}/{}",
            self.failed,
            self.signatures.len(),
            self.kinds.len(),
            FAULT_KINDS.len()
        )
    }
}

/// Runs one seed's world under `design`.
fn run_seed(seed: u64, design: Design, bias: &Bias) -> Ran {
    let scenario = match prepare_leaning(seed, bias) {
        Ok(scenario) => scenario,
        Err(error) => return unprepared(seed, error),
    };
    judged(seed, &scenario, &execute(&scenario, seed, design))
}

/// One run of `scenario` under `seed`, reduced to the summary's line and
/// its failure, if any.
fn judged(
    seed: u64,
    scenario: &idem_sim::scenario::Scenario,
    outcome: &Result<idem_sim::run::RunOutcome, String>,
) -> Ran {
    let signature = Signature::of(outcome);
    let mut run = FuzzRun {
        seed,
        verdict: RunVerdict::Error,
        trace_hash: String::new(),
        signature: signature.as_ref().map(ToString::to_string),
        generated: generated(scenario).into_iter().collect(),
        exercised: Vec::new(),
        windows: BTreeMap::new(),
    };
    let message = match outcome {
        Ok(o) => {
            run.verdict = if o.report.violations.is_empty() {
                RunVerdict::Pass
            } else {
                RunVerdict::Fail
            };
            run.trace_hash = o.report.trace_hash.clone();
            run.exercised = exercised(&o.trace).into_iter().collect();
            run.windows = o
                .report
                .windows
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(w, n)| (window_name(*w), *n))
                .collect();
            first_violation(o)
        }
        Err(error) => error.clone(),
    };
    let failed = signature.map(|signature| Failed {
        seed,
        signature,
        message,
        world: None,
    });
    (run, failed)
}

/// `invariant N (name): message` of a run's first violation, or nothing.
fn first_violation(outcome: &idem_sim::run::RunOutcome) -> String {
    outcome
        .report
        .violations
        .first()
        .map(|v| {
            format!(
                "invariant {} ({}): {}",
                v.invariant.number(),
                invariant_name(v.invariant),
                v.message
            )
        })
        .unwrap_or_default()
}

/// A seed whose world the generator could not write or read back.
fn unprepared(seed: u64, error: String) -> Ran {
    let signature = Signature::of(&Err(error.clone())).unwrap_or_default();
    (
        FuzzRun {
            seed,
            verdict: RunVerdict::Error,
            trace_hash: String::new(),
            signature: Some(signature.to_string()),
            generated: Vec::new(),
            exercised: Vec::new(),
            windows: BTreeMap::new(),
        },
        Some(Failed {
            seed,
            signature,
            message: error,
            world: None,
        }),
    )
}
