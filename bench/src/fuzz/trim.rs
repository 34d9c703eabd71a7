//! Trimming a parent (AFL's trim, libFuzzer's `-reduce_inputs`): before a
//! corpus world first has children, it is cut to a smaller world that
//! still reaches its rarest point under the same seed.
//!
//! A parent is kept for a rare point it reached, but it comes with
//! everything else its fresh world drew: up to eight users, a dozen
//! faults, many acts. Each child pays for all of it (a run costs its
//! events), and the break lever's (act, break) pairs grow with the acts,
//! so the pair that splits the rare state's check from its act waits
//! behind pairs on acts that have nothing to do with it. A trimmed parent
//! is cheaper to run and has fewer pairs to try.
//!
//! The cut is the shrinker's ([`super::shrink`]), with "still reaches the
//! point" in place of "still fails", and a small budget of runs: the
//! trimming is paid for by the children that follow.

use idem_core::design::Design;
use idem_sim::scenario::Scenario;

use super::coverage::{Point, Reached, reached};
use super::shrink::shrink;
use crate::record::execute;

/// Runs one trim may make at most.
pub const TRIM_RUNS_MAX: u32 = 16;

/// What a trim came to.
#[derive(Debug)]
pub struct Trimmed {
    /// The smaller world and what it reached, when some cut held.
    pub world: Option<(Scenario, Vec<Reached>)>,
    /// Runs the trim made.
    pub runs: u32,
}

/// Cuts `world` to a smaller one that, under `seed` and `design`, still
/// reaches `point`; at most [`TRIM_RUNS_MAX`] runs.
pub fn trim(world: &Scenario, seed: u64, design: Design, point: Point) -> Trimmed {
    let mut last: Option<(Scenario, Vec<Reached>)> = None;
    let shrunk = shrink(world, TRIM_RUNS_MAX, |candidate| {
        let Some(candidate) = super::as_file(candidate) else {
            return false;
        };
        let Ok(outcome) = execute(&candidate, seed, design) else {
            return false;
        };
        let got = reached(&outcome.trace);
        let holds = got.iter().any(|r| r.point == point);
        if holds {
            last = Some((candidate, got));
        }
        holds
    });
    Trimmed {
        world: last.filter(|_| shrunk.steps > 0),
        runs: shrunk.runs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A trimmed world is smaller and still reaches the point it was
    /// trimmed for.
    #[test]
    fn a_trimmed_parent_is_smaller_and_still_reaches_its_point() {
        let world = super::super::prepare(1_000_000_007).expect("a world");
        let outcome = execute(&world, 1_000_000_007, Design::Correct).expect("runs");
        let got = reached(&outcome.trace);
        let point = got.last().expect("points").point;
        let trimmed = trim(&world, 1_000_000_007, Design::Correct, point);
        assert!(trimmed.runs <= TRIM_RUNS_MAX);
        let (smaller, again) = trimmed.world.expect("some cut holds");
        assert!(again.iter().any(|r| r.point == point));
        let size = |w: &Scenario| {
            w.faults.len() + w.clients.iter().map(|c| c.actions.len()).sum::<usize>()
        };
        assert!(
            size(&smaller) <= size(&world),
            "{} > {}",
            size(&smaller),
            size(&world)
        );
        assert_ne!(smaller, world);
    }
}
