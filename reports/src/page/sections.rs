//! What the run page's sections show, as plain data for their templates
//! (`templates/run_*.html`): one function per section.

use std::collections::BTreeSet;

use serde::Serialize;

use super::describe::describe;
use crate::chain::{self, StepKind};
use crate::html::state_colour;
use crate::run::RunRecord;
use crate::timeline::{Timeline, short};
use crate::trace::{Body, RunTrace};

/// One invariant and how often this run violated it.
#[derive(Serialize)]
pub(super) struct Invariant<'a> {
    number: u8,
    name: &'a str,
    violated: usize,
}

/// Every invariant, in the order given.
pub(super) fn invariants<'a>(record: &RunRecord, all: &'a [(u8, String)]) -> Vec<Invariant<'a>> {
    all.iter()
        .map(|(number, name)| Invariant {
            number: *number,
            name,
            violated: record
                .violations
                .iter()
                .filter(|v| v.invariant == *number)
                .count(),
        })
        .collect()
}

/// One attempt's row.
#[derive(Serialize)]
pub(super) struct Attempt<'a> {
    job: usize,
    number: i64,
    attempt: &'a str,
    provider: &'a str,
    host: &'a str,
    segments: Vec<State<'a>>,
    end: Option<End<'a>>,
    blocked: Vec<Blocked<'a>>,
}

/// A state an attempt held.
#[derive(Serialize)]
pub(super) struct State<'a> {
    state: &'a str,
    colour: &'static str,
    t0_ms: u64,
    t1_ms: u64,
}

/// The state an attempt ended in, and when.
#[derive(Serialize)]
pub(super) struct End<'a> {
    state: &'a str,
    colour: &'static str,
    t_ms: u64,
}

/// A start an attempt blocked.
#[derive(Serialize)]
pub(super) struct Blocked<'a> {
    t_ms: u64,
    what: &'a str,
}

/// Every attempt, as the timeline has them.
pub(super) fn attempts(timeline: &Timeline) -> Vec<Attempt<'_>> {
    timeline
        .attempts
        .iter()
        .map(|bar| Attempt {
            job: bar.job,
            number: bar.number,
            attempt: short(&bar.attempt_id),
            provider: &bar.provider,
            host: &timeline.lanes[bar.lane].host,
            segments: bar
                .segments
                .iter()
                .map(|s| State {
                    state: &s.state,
                    colour: state_colour(&s.state),
                    t0_ms: s.t0_ms,
                    t1_ms: s.t1_ms,
                })
                .collect(),
            end: bar.end.as_ref().map(|(state, t, _)| End {
                state,
                colour: state_colour(state),
                t_ms: *t,
            }),
            blocked: bar
                .blocked
                .iter()
                .map(|(t, _, what)| Blocked { t_ms: *t, what })
                .collect(),
        })
        .collect()
}

/// One job's compare-and-swap chain.
#[derive(Serialize)]
pub(super) struct Chain {
    number: usize,
    job_id: String,
    overwritten: bool,
    steps: Vec<StepRow>,
}

/// One step of a chain.
#[derive(Serialize)]
pub(super) struct StepRow {
    seq: u64,
    t_ms: u64,
    /// The version column: `0`, `1 → 2`, `unchanged`.
    version: String,
    attempt: Option<String>,
    /// The attempt's number and provider, when the timeline has it.
    on: Option<AttemptOn>,
    caller: String,
    #[serde(flatten)]
    what: What,
}

#[derive(Serialize)]
pub(super) struct AttemptOn {
    number: i64,
    provider: String,
}

/// What a step did, by `kind`: each kind is a sentence of its own in
/// `run_chain.html`. Hashes are short.
#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum What {
    Created,
    Won {
        result: String,
        out_of_band: bool,
    },
    /// A win over a result that had already won (no compare-and-swap).
    Overwrite {
        result: String,
        old: String,
    },
    Lost {
        winner: String,
        result: String,
    },
    Refused {
        state: String,
    },
    Failed,
}

/// Every job's chain, in creation order.
pub(super) fn chains(trace: &RunTrace, timeline: &Timeline) -> Vec<Chain> {
    chain::chains(trace, &timeline.jobs)
        .into_iter()
        .map(|c| Chain {
            number: c.number,
            overwritten: c.overwrites() > 0,
            steps: c.steps.iter().map(|s| step(s, timeline)).collect(),
            job_id: c.job_id,
        })
        .collect()
}

fn step(s: &chain::ChainStep, timeline: &Timeline) -> StepRow {
    let (version, what) = match &s.kind {
        StepKind::Created => ("0".to_owned(), What::Created),
        StepKind::Won {
            version,
            result_sha256,
            out_of_band,
            overwrote,
        } => (
            format!("{} → {version}", version - 1),
            won(result_sha256, *out_of_band, overwrote.as_deref()),
        ),
        StepKind::Lost {
            winner,
            discarded_sha256,
        } => (
            "unchanged".to_owned(),
            What::Lost {
                winner: winner.as_deref().map_or("?", short).to_owned(),
                result: short(discarded_sha256).to_owned(),
            },
        ),
        StepKind::Refused { state } => (
            "unchanged".to_owned(),
            What::Refused {
                state: state.clone(),
            },
        ),
        StepKind::Failed { version } => (version.to_string(), What::Failed),
    };
    StepRow {
        seq: s.seq,
        t_ms: s.t_ms,
        version,
        attempt: s.attempt_id.as_deref().map(|a| short(a).to_owned()),
        on: s
            .attempt_id
            .as_deref()
            .and_then(|a| timeline.attempt(a))
            .map(|b| AttemptOn {
                number: b.number,
                provider: b.provider.clone(),
            }),
        caller: s.caller.clone().unwrap_or_default(),
        what,
    }
}

/// A win, or, without a compare-and-swap, a win over a result that had
/// already won.
fn won(result: &str, out_of_band: bool, overwrote: Option<&str>) -> What {
    let result = short(result).to_owned();
    match overwrote {
        Some(old) => What::Overwrite {
            result,
            old: short(old).to_owned(),
        },
        None => What::Won {
            result,
            out_of_band,
        },
    }
}

/// A race window the run reached or its scenario expects.
#[derive(Serialize)]
pub(super) struct Window<'a> {
    window: &'a str,
    count: u32,
    expected: bool,
}

/// The windows worth a row: reached, or expected.
pub(super) fn windows(record: &RunRecord) -> Vec<Window<'_>> {
    record
        .windows
        .iter()
        .map(|(window, count)| Window {
            window,
            count: *count,
            expected: record.expect_windows.contains(window),
        })
        .filter(|w| w.count > 0 || w.expected)
        .collect()
}

/// One row of the decision trace.
#[derive(Serialize)]
pub(super) struct Decision<'a> {
    seq: u64,
    t_ms: u64,
    kind: &'a str,
    text: String,
    evidence: bool,
}

/// What the store decided and the fault plan did, and every evidence
/// event.
pub(super) fn decisions<'a>(trace: &'a RunTrace, evidence: &BTreeSet<u64>) -> Vec<Decision<'a>> {
    trace
        .events
        .iter()
        .filter(|e| {
            e.host == "store" || matches!(e.body, Body::Fault { .. }) || evidence.contains(&e.seq)
        })
        .map(|e| Decision {
            seq: e.seq,
            t_ms: e.t_ms,
            kind: e.kind(),
            text: describe(e),
            evidence: evidence.contains(&e.seq),
        })
        .collect()
}
