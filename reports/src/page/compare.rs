//! The diff section of a failing run's page: the run beside the run it is
//! compared with, as plain data for `templates/run_diff.html`.

use serde::Serialize;

use super::describe::describe;
use super::neighbour::{Neighbour, Relation, neighbour_name};
use crate::diff::{ALIGN_EVENTS_MAX, Alignment, Row};
use crate::trace::{RunEvent, RunTrace};

/// Diff rows shown at most.
const DIFF_ROWS_MAX: usize = 400;
/// Matching rows kept before the first divergence.
const DIFF_CONTEXT_ROWS: usize = 12;

/// The section.
#[derive(Serialize)]
pub(super) struct Diff<'a> {
    /// How the page names the other run.
    name: String,
    /// Its page, relative to this one.
    link: Option<&'a str>,
    /// Whether it is this seed under the correct design (every
    /// neighbouring seed failed).
    correct_design: bool,
    searched: u64,
    seed: u64,
    design: &'a str,
    /// Matching rows left out before the first shown.
    skipped: usize,
    rows: Vec<DiffRow>,
    /// Rows left out after the last shown.
    more: usize,
    /// No row diverges: the runs differ only in values.
    same_shape: bool,
    /// The alignment read only the first [`ALIGN_EVENTS_MAX`] events.
    cut: bool,
    aligned_max: usize,
}

/// One row: an event of either run, or a match of both.
#[derive(Serialize)]
struct DiffRow {
    left: Option<EventCells>,
    right: Option<EventCells>,
    /// `=`, `◀` (this run only) or `▶` (the other run only).
    mark: &'static str,
    /// In one run only.
    only: bool,
    first: bool,
}

/// One event's cells.
#[derive(Serialize)]
struct EventCells {
    seq: u64,
    t_ms: u64,
    text: String,
}

impl EventCells {
    fn of(event: Option<&RunEvent>) -> Option<Self> {
        event.map(|e| EventCells {
            seq: e.seq,
            t_ms: e.t_ms,
            text: describe(e),
        })
    }
}

/// This run (its trace cut to `trace`) against `n` (cut to `other`).
pub(super) fn diff<'a>(
    trace: &RunTrace,
    n: &'a Neighbour<'a>,
    alignment: &Alignment,
    other: &RunTrace,
) -> Diff<'a> {
    let start = alignment
        .first_divergence
        .map_or(0, |d| d.saturating_sub(DIFF_CONTEXT_ROWS));
    let end = alignment.rows.len().min(start + DIFF_ROWS_MAX);
    let rows = (start..end)
        .map(|index| row(alignment, index, trace, other))
        .collect();
    Diff {
        name: neighbour_name(n),
        link: n.link.as_deref(),
        correct_design: n.relation == Relation::CorrectDesign,
        searched: n.searched,
        seed: n.record.seed,
        design: &n.record.design,
        skipped: start,
        rows,
        more: alignment.rows.len() - end,
        same_shape: alignment.first_divergence.is_none(),
        cut: alignment.cut,
        aligned_max: ALIGN_EVENTS_MAX,
    }
}

fn row(alignment: &Alignment, index: usize, trace: &RunTrace, other: &RunTrace) -> DiffRow {
    let (left, right, mark) = match alignment.rows[index] {
        Row::Both(i, j) => (trace.events.get(i), other.events.get(j), "="),
        Row::Left(i) => (trace.events.get(i), None, "◀"),
        Row::Right(j) => (None, other.events.get(j), "▶"),
    };
    DiffRow {
        left: EventCells::of(left),
        right: EventCells::of(right),
        mark,
        only: !matches!(alignment.rows[index], Row::Both(..)),
        first: alignment.first_divergence == Some(index),
    }
}
