//! `idem sweep`: many seeds of one or more scenarios, over every core.
//!
//! Each seed runs wholly inside one worker thread (a simulation is
//! single-threaded and not `Send` inside); workers take the next
//! (scenario, seed) from a shared counter. Results are put back in
//! (scenario, seed) order before anything is printed or written, so the
//! summary, the JSON and the JUnit files are the same whatever `--jobs` is.
//!
//! Two coverage gates: each scenario must reach its own `expect_windows`
//! under some seed, and a sweep of the whole catalogue (`--all`) must reach
//! every race window of docs/MODEL.md (`Window::ALL`) in some run. A window no
//! scenario reaches is a race the bench claims to test and does not.

use std::io::IsTerminal;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use idem_core::design::Design;
use idem_reports::sweep::{SeedRange, Shard, SweepTally};
use idem_sim::scenario::Window;

use super::common::{build, emit, execute, record, swept, window_name};
use super::{CliError, Exit};
use crate::load::{Loaded, load_set};

/// The most seeds one sweep may name.
pub const SEEDS_MAX: u64 = 1_000_000;

#[derive(Debug, Args)]
pub struct SweepArgs {
    /// Catalogue names or scenario files.
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    pub scenarios: Vec<String>,
    /// Sweep the whole catalogue; the sweep then also fails if any race
    /// window of docs/MODEL.md is reached by no run.
    #[arg(long)]
    pub all: bool,
    /// Seeds: `A..B` (B excluded), `A..=B`, or one seed `N`.
    #[arg(long)]
    pub seeds: Seeds,
    /// Worker threads (default: the number of cores).
    #[arg(long)]
    pub jobs: Option<NonZeroUsize>,
    /// Run only the seeds whose index in the range is congruent to `i`
    /// modulo `n` (`--shard 0/4` ... `--shard 3/4`). Window coverage is
    /// judged on this shard's seeds alone.
    #[arg(long, value_name = "i/n")]
    pub shard: Option<ShardArg>,
    /// The design under test (see `idem run --help`).
    #[arg(long, default_value = "correct")]
    pub design: Design,
    /// Write the summary as JSON here (schema in scenarios/README.md).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write a JUnit XML report here.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Take every simulation step, skipping no quiet time (as if every
    /// scenario said `timing.skip_quiet = false`): slower, and each seed a
    /// different, equally valid run.
    #[arg(long)]
    pub every_step: bool,
}

/// A seed range, end excluded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seeds {
    pub start: u64,
    pub end: u64,
}

impl FromStr for Seeds {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let number = |t: &str| {
            t.trim()
                .parse::<u64>()
                .map_err(|_| format!("{t:?} is not a seed (a whole number)"))
        };
        let (start, end) = if let Some((a, b)) = s.split_once("..=") {
            let b = number(b)?;
            (
                number(a)?,
                b.checked_add(1)
                    .ok_or("the range ends past the last seed")?,
            )
        } else if let Some((a, b)) = s.split_once("..") {
            (number(a)?, number(b)?)
        } else {
            let n = number(s)?;
            (n, n.checked_add(1).ok_or("the seed is past the last seed")?)
        };
        if start >= end {
            return Err(format!("the range {s} holds no seeds"));
        }
        if end - start > SEEDS_MAX {
            return Err(format!("at most {SEEDS_MAX} seeds per sweep"));
        }
        Ok(Seeds { start, end })
    }
}

/// `i/n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardArg {
    pub index: u64,
    pub count: u64,
}

impl FromStr for ShardArg {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (i, n) = s
            .split_once('/')
            .ok_or("a shard is written i/n, like 0/4")?;
        let index: u64 = i
            .trim()
            .parse()
            .map_err(|_| format!("{i:?} is not a shard index"))?;
        let count: u64 = n
            .trim()
            .parse()
            .map_err(|_| format!("{n:?} is not a shard count"))?;
        if count == 0 || index >= count {
            return Err(format!(
                "shard {s}: the index must be below the count (0/{n} to {}/{n})",
                count.max(1) - 1
            ));
        }
        Ok(ShardArg { index, count })
    }
}

impl Seeds {
    /// The seeds of shard `shard`, in order.
    pub fn shard(self, shard: ShardArg) -> Vec<u64> {
        (self.start..self.end)
            .enumerate()
            .filter(|(index, _)| *index as u64 % shard.count == shard.index)
            .map(|(_, seed)| seed)
            .collect()
    }
}

pub fn sweep(args: SweepArgs) -> Result<Exit, CliError> {
    let mut scenarios = load_set(&args.scenarios)?;
    if args.every_step {
        for loaded in &mut scenarios {
            loaded.scenario.timing.skip_quiet = false;
        }
    }
    let shard = args.shard.unwrap_or(ShardArg { index: 0, count: 1 });
    let seeds = args.seeds.shard(shard);
    if seeds.is_empty() {
        return Err(CliError::Usage(format!(
            "shard {}/{} of seeds {}..{} holds no seeds",
            shard.index, shard.count, args.seeds.start, args.seeds.end
        )));
    }
    let jobs = args
        .jobs
        .or_else(|| std::thread::available_parallelism().ok())
        .map_or(1, NonZeroUsize::get);
    let swept = swept(&scenarios);
    let tally = SweepTally::new(
        args.design.name(),
        SeedRange {
            start: args.seeds.start,
            end: args.seeds.end,
        },
        Shard {
            index: shard.index,
            count: shard.count,
        },
        &swept,
    );
    let runs = scenarios.len() * seeds.len();
    // Wall time for the person watching; it never enters the summary.
    #[allow(clippy::disallowed_methods)]
    let started = Instant::now();
    let summary = run_all(&scenarios, &seeds, jobs, args.design, tally)
        .finish(build())
        .gate_windows(&all_windows(), args.all);
    let elapsed = started.elapsed();
    if let Some(path) = &args.json {
        std::fs::write(path, summary.to_json())
            .map_err(|e| CliError::Usage(format!("cannot write {}: {e}", path.display())))?;
    }
    if let Some(path) = &args.junit {
        let xml =
            idem_reports::junit::render(&summary).map_err(|e| CliError::Usage(e.to_string()))?;
        std::fs::write(path, xml)
            .map_err(|e| CliError::Usage(format!("cannot write {}: {e}", path.display())))?;
    }
    emit(&summary.to_text());
    eprintln!(
        "{runs} runs on {jobs} threads in {:.1} s",
        elapsed.as_secs_f64()
    );
    Ok(if summary.passed() {
        Exit::Pass
    } else {
        Exit::Violation
    })
}

/// Every race window's name, in docs/MODEL.md's order.
pub(super) fn all_windows() -> Vec<String> {
    Window::ALL.iter().copied().map(window_name).collect()
}

/// A progress bar on stderr when a person is watching, hidden otherwise
/// (so CI logs and piped output stay clean).
pub(super) fn progress_bar(len: usize, unit: &str) -> ProgressBar {
    let progress = if std::io::stderr().is_terminal() {
        ProgressBar::with_draw_target(Some(len as u64), ProgressDrawTarget::stderr())
    } else {
        ProgressBar::hidden()
    };
    progress.set_style(
        ProgressStyle::with_template(&format!(
            "{{bar:40}} {{pos}}/{{len}} {unit}, {{msg}} [{{elapsed_precise}}, eta {{eta}}]"
        ))
        .expect("a valid template"),
    );
    progress
}

/// Runs every seed of every scenario over `jobs` threads and adds each
/// run to `tally` as it finishes; no record of a run is kept past that
/// (the tally keeps aggregates and failures), so memory stays flat.
pub(super) fn run_all(
    scenarios: &[Loaded],
    seeds: &[u64],
    jobs: usize,
    design: Design,
    tally: SweepTally,
) -> SweepTally {
    let runs = scenarios.len() * seeds.len();
    let progress = progress_bar(runs, "runs");
    let failed = AtomicUsize::new(0);
    progress.set_message("0 failed");
    let next = AtomicUsize::new(0);
    let tally = Mutex::new(tally);
    std::thread::scope(|scope| {
        for _ in 0..jobs.min(runs) {
            scope.spawn(|| {
                // Bounded: each pass claims one index below `runs`.
                loop {
                    let index = next.fetch_add(1, Ordering::SeqCst);
                    if index >= runs {
                        break;
                    }
                    let (s, position) = (index / seeds.len(), index % seeds.len());
                    let (loaded, seed) = (&scenarios[s], seeds[position]);
                    let outcome = execute(&loaded.scenario, seed, design);
                    let record = record(
                        &loaded.scenario,
                        &loaded.target,
                        seed,
                        design,
                        &outcome,
                        false,
                    );
                    drop(outcome);
                    if !record.verdict.passed() {
                        let n = failed.fetch_add(1, Ordering::SeqCst) + 1;
                        progress.set_message(format!("{n} failed"));
                    }
                    tally
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .add(record, position as u64 + 1);
                    progress.inc(1);
                }
            });
        }
    });
    progress.finish_and_clear();
    tally.into_inner().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_and_shards_parse() {
        assert_eq!("3..6".parse(), Ok(Seeds { start: 3, end: 6 }));
        assert_eq!("3..=6".parse(), Ok(Seeds { start: 3, end: 7 }));
        assert_eq!("9".parse(), Ok(Seeds { start: 9, end: 10 }));
        assert!("6..3".parse::<Seeds>().is_err());
        assert!("a..3".parse::<Seeds>().is_err());
        let seeds = Seeds { start: 10, end: 20 };
        assert_eq!(seeds.shard("1/4".parse().expect("valid")), vec![11, 15, 19]);
        assert!("4/4".parse::<ShardArg>().is_err());
        assert!("0/0".parse::<ShardArg>().is_err());
    }
}
