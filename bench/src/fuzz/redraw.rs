//! The redraw lever: a child that is its parent up to the moment the
//! parent reached a rare state, and draws every random decision after it
//! afresh (moonpool's and Antithesis's exploration from interesting
//! states, on the decision log `idem explain` intervenes on).
//!
//! The break, retime, tune and splice levers change a parent's world (a
//! fault added or moved, a setting swapped) and run it under the parent's
//! seed. A redraw changes nothing in the world: it keeps the parent's
//! decisions (each message's latency, each client's jitter and replica,
//! each provider's jitter and error roll) made before the branch moment,
//! by subject and ordinal, and draws the rest from a generator of its own.
//! So the rare state is reached again, and what follows it is another
//! sample: a bug that needs a rare state *and* a second unlikely timing
//! after it costs one rare world and a few dozen redraws, not the product
//! of two rarities in fresh worlds.
//!
//! A branched run is reproduced by its world, its seed and its branch (the
//! kept decisions and the sample seed); children of a branched world by
//! another lever carry their parent's branch, so each is still its parent
//! up to its own change.

use idem_sim::decisions::{Decision, Decisions, Kept};

/// The decisions a branched run keeps, and where the rest come from.
#[derive(Clone, Debug)]
pub struct Branch {
    /// The parent's decisions made before `at_ms`.
    pub kept: Kept,
    /// Seeds the generator every later decision is drawn from.
    pub sample_seed: u64,
    /// The branch moment, in simulated milliseconds.
    pub at_ms: u64,
}

impl Branch {
    /// The parent's decisions in `log` made before `at_ms`, the rest to
    /// be drawn from `sample_seed`.
    pub fn at(log: &[Decision], at_ms: u64, sample_seed: u64) -> Self {
        Self {
            kept: Kept::from_log(log, |i| log.get(i).is_some_and(|d| d.t_ms < at_ms)),
            sample_seed,
            at_ms,
        }
    }

    /// The decision source a run on this branch uses (it records, so the
    /// branched run's own log can be branched from in turn).
    pub fn decisions(&self) -> Decisions {
        Decisions::intervening(self.kept.clone(), self.sample_seed)
    }
}

/// What a corpus world keeps of its run's log: the decisions up to
/// `until_ms` (no child branches later than its last counted event),
/// without the messages' text, which only a reader needs.
pub fn kept_log(mut log: Vec<Decision>, until_ms: u64) -> Vec<Decision> {
    log.retain(|d| d.t_ms <= until_ms);
    for d in &mut log {
        d.detail = String::new();
    }
    log.shrink_to_fit();
    log
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{execute, execute_deciding};
    use idem_core::design::Design;

    /// A branched run is its parent up to the branch moment, and a
    /// sample of its own after it; the same branch gives the same run.
    #[test]
    fn a_redraw_keeps_the_prefix_and_redraws_the_rest() {
        let world = idem_scenarios::load::load("backup-button")
            .expect("in the catalogue")
            .scenario;
        let recording = Decisions::recording();
        let parent = execute_deciding(&world, 4, Design::Correct, recording.clone()).expect("runs");
        assert_eq!(
            parent.report.trace_hash,
            execute(&world, 4, Design::Correct)
                .expect("runs")
                .report
                .trace_hash,
            "recording does not change a run"
        );
        let log = kept_log(recording.log(), u64::MAX);
        let last_ms = log.last().expect("decisions").t_ms;
        let at_ms = last_ms / 2;
        let mut differed = 0;
        for sample_seed in 0..8 {
            let branch = Branch::at(&log, at_ms, sample_seed);
            let child =
                execute_deciding(&world, 4, Design::Correct, branch.decisions()).expect("runs");
            let before = |o: &idem_sim::run::RunOutcome| {
                o.trace
                    .events
                    .iter()
                    .filter(|e| e.t_ms < at_ms)
                    .cloned()
                    .collect::<Vec<_>>()
            };
            assert_eq!(before(&child), before(&parent), "seed {sample_seed}");
            let again =
                execute_deciding(&world, 4, Design::Correct, branch.decisions()).expect("runs");
            assert_eq!(child.report.trace_hash, again.report.trace_hash);
            differed += usize::from(child.report.trace_hash != parent.report.trace_hash);
        }
        assert!(differed > 0, "some redraw went another way");
    }
}
