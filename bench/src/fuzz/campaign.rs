//! A search campaign on the runner: batches of candidate worlds from a
//! [`Campaign`] (guided, or with no levers the blind swarm: fresh worlds
//! only, exactly the worlds `idem fuzz --seeds` runs), each run's failure
//! known by its signature, until a stop.
//!
//! Cost is counted in runs and in CPU time: each run's own thread CPU time,
//! read from `/proc/thread-self/schedstat` around it, so that what another
//! process does on the machine does not count (wall time would), and the
//! guided search's own bookkeeping (coverage, choosing parents) is counted
//! with the run it follows. A detection's cost is what the runs up to and
//! including it cost, in the campaign's order.

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::time::Duration;

use idem_core::design::Design;
use idem_sim::run::RunOutcome;
use idem_sim::scenario::Scenario;

use super::guided::{Campaign, Candidate, Lever};
use super::{Signature, prepare};
use crate::record::execute;
use crate::runner::Runner;

/// Candidates per batch, whatever the threads: a campaign's choices
/// depend on its results in order, a batch at a time, so the batch size
/// fixes them.
pub const BATCH: usize = 8;

/// When a campaign stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stop {
    /// At most this many runs.
    pub runs_max: u64,
    /// At most this much CPU time, summed over runs.
    pub cpu_max: Option<Duration>,
    /// At most this much wall time (the machine's, for a person's budget).
    pub wall_max: Option<Duration>,
    /// At the first failure.
    pub at_first_failure: bool,
}

/// A failing run, with what it cost to reach.
#[derive(Clone, Debug)]
pub struct Detection {
    pub candidate: Candidate,
    pub signature: Signature,
    /// The first violation, in words.
    pub message: String,
    /// Runs up to and including this one.
    pub runs: u64,
    /// CPU time of those runs.
    pub cpu: Duration,
}

/// What a campaign did.
#[derive(Debug, Default)]
pub struct Outcome {
    pub runs: u64,
    pub cpu: Duration,
    /// Each signature's first detection, in the order found.
    pub detections: Vec<Detection>,
    /// Runs made by each lever.
    pub by_lever: BTreeMap<Lever, u64>,
    /// Coverage points reached.
    pub points: usize,
    pub wall: Duration,
}

/// One run's result as the campaign reads it.
struct Ran {
    outcome: Result<RunOutcome, String>,
    cpu: Duration,
}

impl Outcome {
    /// Counts one run, and keeps it as a detection if it fails in a way
    /// the campaign has not seen yet.
    fn count(&mut self, candidate: Candidate, ran: Ran) {
        self.runs += 1;
        self.cpu += ran.cpu;
        *self.by_lever.entry(candidate.lever).or_default() += 1;
        if let Some(signature) = Signature::of(&ran.outcome)
            && !self.detections.iter().any(|d| d.signature == signature)
        {
            self.detections.push(Detection {
                message: first_violation(&ran.outcome),
                candidate,
                signature,
                runs: self.runs,
                cpu: self.cpu,
            });
        }
    }
}

/// Runs `campaign` under `design` on `jobs` threads until `stop`; hands
/// the campaign back, to go on from where it stopped. `each` sees every
/// run, in the campaign's order.
pub fn run(
    mut campaign: Campaign,
    design: Design,
    jobs: Option<NonZeroUsize>,
    stop: Stop,
    each: &mut dyn FnMut(&Candidate, &Result<RunOutcome, String>),
) -> (Outcome, Campaign) {
    let mut out = Outcome::default();
    // Wall time only for a person's budget; it never enters a result.
    #[allow(clippy::disallowed_methods)]
    let started = std::time::Instant::now();
    // Bounded: every batch makes at least one run or the campaign stops,
    // and runs are bounded by `runs_max`.
    while !over(&out, &stop, started.elapsed()) {
        let making = thread_cpu();
        let batch = campaign.batch(BATCH, &fresh_world);
        out.cpu += thread_cpu().saturating_sub(making);
        if batch.is_empty() {
            break;
        }
        let mut results = Vec::with_capacity(batch.len());
        Runner::new(jobs).run(
            batch.len(),
            |i| measured(&batch[i], design),
            |_, ran, _| results.push(ran),
        );
        for (candidate, ran) in batch.into_iter().zip(results) {
            let absorbing = thread_cpu();
            campaign.absorb(&candidate, ran.outcome.as_ref().ok());
            out.cpu += thread_cpu().saturating_sub(absorbing);
            each(&candidate, &ran.outcome);
            out.count(candidate, ran);
            if over(&out, &stop, started.elapsed()) {
                break;
            }
        }
    }
    out.points = campaign.points();
    out.wall = started.elapsed();
    (out, campaign)
}

fn over(out: &Outcome, stop: &Stop, wall: Duration) -> bool {
    out.runs >= stop.runs_max
        || stop.cpu_max.is_some_and(|max| out.cpu >= max)
        || stop.wall_max.is_some_and(|max| wall >= max)
        || stop.at_first_failure && !out.detections.is_empty()
}

/// Runs one candidate and measures its thread's CPU time.
fn measured(candidate: &Candidate, design: Design) -> Ran {
    let before = thread_cpu();
    let outcome = execute(&candidate.world, candidate.seed, design);
    let cpu = thread_cpu().saturating_sub(before);
    Ran { outcome, cpu }
}

/// `invariant N: message` of a run's first violation, or its error.
fn first_violation(outcome: &Result<RunOutcome, String>) -> String {
    match outcome {
        Ok(o) => o
            .report
            .violations
            .first()
            .map(|v| format!("invariant {}: {}", v.invariant.number(), v.message))
            .unwrap_or_default(),
        Err(error) => error.clone(),
    }
}

/// This thread's CPU time so far: the first field of
/// `/proc/thread-self/schedstat`, nanoseconds on a CPU. Zero where there is
/// no such file (not Linux): costs are then counted in runs alone.
pub fn thread_cpu() -> Duration {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(Duration::ZERO, Duration::from_nanos)
}

/// The world of a fresh seed, as the blind swarm makes it.
fn fresh_world(seed: u64) -> Option<Scenario> {
    prepare(seed).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_measures_its_own_cpu() {
        let before = thread_cpu();
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        assert!(x != 1);
        assert!(thread_cpu() > before);
    }
}
