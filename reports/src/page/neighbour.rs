//! The run a failing run is compared with, and how the page names it.

use crate::diff::{Alignment, Row};
use crate::run::RunRecord;
use crate::trace::RunTrace;

/// How the compared run relates to this one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Relation {
    /// The nearest passing seed of the same scenario and design.
    NeighbourSeed,
    /// Every seed within the search bound failed: the same seed under the
    /// correct design.
    CorrectDesign,
}

/// The run a failing run is compared with.
#[derive(Clone, Debug)]
pub struct Neighbour<'a> {
    pub record: &'a RunRecord,
    pub trace: &'a RunTrace,
    pub relation: Relation,
    /// Seeds searched on each side.
    pub searched: u64,
    /// Its page, relative to this one, if it has one.
    pub link: Option<String>,
}

/// Where and how the timeline marks the first divergence from `n`.
pub(super) fn divergence(
    n: &Neighbour<'_>,
    alignment: &Alignment,
    trace: &RunTrace,
    other: &RunTrace,
) -> Option<(u64, String)> {
    let row = alignment.first_divergence?;
    let t = match alignment.rows[row] {
        Row::Both(i, _) | Row::Left(i) => trace.events.get(i)?.t_ms,
        Row::Right(j) => other.events.get(j)?.t_ms,
    };
    Some((t, format!("first divergence from {}", neighbour_name(n))))
}

/// How the page names the run it compares with.
pub(super) fn neighbour_name(n: &Neighbour<'_>) -> String {
    match n.relation {
        Relation::NeighbourSeed => format!("passing seed {}", n.record.seed),
        Relation::CorrectDesign => {
            format!("seed {} under the correct design", n.record.seed)
        }
    }
}
