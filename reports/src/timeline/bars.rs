//! The attempt bars: one per attempt, a segment per state it held, its
//! end, and the starts it blocked; then a row for each on its lane.

use std::collections::BTreeMap;

use super::folds::JobNumbers;
use super::model::{AttemptBar, Lane, Lanes, Segment, short};
use crate::trace::{Body, RunEvent, RunTrace};

/// The terminal states of an attempt.
const TERMINAL: &[&str] = &["succeeded", "failed", "cancelled", "lost"];

/// The fold over the trace that draws the attempt bars.
pub(super) fn attempt_bars(trace: &RunTrace, lanes: &mut Lanes, end_ms: u64) -> Vec<AttemptBar> {
    let mut bars = Bars {
        bars: Vec::new(),
        by_id: BTreeMap::new(),
        jobs: JobNumbers::default(),
        end_ms,
    };
    for event in &trace.events {
        bars.jobs.see(event);
        bars.see(event, lanes);
    }
    bars.bars
}

struct Bars<'a> {
    bars: Vec<AttemptBar>,
    /// Index in `bars` by attempt id.
    by_id: BTreeMap<&'a str, usize>,
    /// Jobs created so far.
    jobs: JobNumbers,
    end_ms: u64,
}

impl<'a> Bars<'a> {
    fn see(&mut self, event: &'a RunEvent, lanes: &mut Lanes) {
        match &event.body {
            Body::AttemptStarted {
                job_id,
                attempt_id,
                attempt_seq,
                provider,
                ..
            } => self.start(event, job_id, attempt_id, *attempt_seq, provider, lanes),
            Body::AttemptTransition { attempt_id, to, .. } => self.enter(attempt_id, to, event),
            Body::CompletionWon { attempt_id, .. } => self.enter(attempt_id, "succeeded", event),
            Body::CompletionLost { attempt_id, .. } => self.enter(attempt_id, "lost", event),
            Body::AttemptRefused {
                reason,
                blocking_attempt: Some(blocking),
                blocking_state,
                ..
            } => {
                if let Some(&index) = self.by_id.get(blocking.as_str()) {
                    let who = event.caller.as_deref().unwrap_or("a caller");
                    let what = format!(
                        "{who}'s start refused ({reason}): attempt {} is {}",
                        short(blocking),
                        blocking_state.as_deref().unwrap_or("open")
                    );
                    self.bars[index].blocked.push((event.t_ms, event.seq, what));
                }
            }
            _ => {}
        }
    }

    /// A new bar, starting, on the lane of the host that started it.
    fn start(
        &mut self,
        event: &'a RunEvent,
        job_id: &str,
        attempt_id: &'a str,
        number: i64,
        provider: &str,
        lanes: &mut Lanes,
    ) {
        let host = event.caller.as_deref().unwrap_or(&event.host);
        self.bars.push(AttemptBar {
            attempt_id: attempt_id.to_owned(),
            job: self.jobs.number(job_id),
            number,
            provider: provider.to_owned(),
            lane: lanes.index(host),
            row: 0,
            segments: vec![Segment {
                state: "starting".to_owned(),
                t0_ms: event.t_ms,
                t1_ms: self.end_ms,
                seq: event.seq,
            }],
            end: None,
            blocked: Vec::new(),
        });
        self.by_id.insert(attempt_id, self.bars.len() - 1);
    }

    /// Moves the bar of `attempt_id`, if it started, into `state`.
    fn enter(&mut self, attempt_id: &str, state: &str, event: &RunEvent) {
        if let Some(&index) = self.by_id.get(attempt_id) {
            enter(&mut self.bars[index], state, event.t_ms, event.seq);
        }
    }
}

/// Moves `bar` into `state` at `t`.
fn enter(bar: &mut AttemptBar, state: &str, t: u64, seq: u64) {
    if bar.end.is_some() {
        return;
    }
    // An open segment runs to the end of the history until a move ends it.
    let history_end = bar.segments.last().map_or(t, |s| s.t1_ms.max(t));
    if let Some(last) = bar.segments.last_mut() {
        last.t1_ms = t;
    }
    if TERMINAL.contains(&state) {
        bar.end = Some((state.to_owned(), t, seq));
    } else {
        bar.segments.push(Segment {
            state: state.to_owned(),
            t0_ms: t,
            t1_ms: history_end,
            seq,
        });
    }
}

/// Gives every attempt a row on its lane so that overlapping bars do not
/// cover each other; a lane's `rows` becomes the rows it needs.
pub(super) fn assign_rows(attempts: &mut [AttemptBar], lanes: &mut [Lane]) {
    let mut busy_until: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
    for bar in attempts.iter_mut() {
        let start = bar.segments.first().map_or(0, |s| s.t0_ms);
        let end = bar
            .end
            .as_ref()
            .map_or_else(|| bar.segments.last().map_or(start, |s| s.t1_ms), |e| e.1);
        let rows = busy_until.entry(bar.lane).or_default();
        let row = match rows.iter().position(|until| *until < start) {
            Some(row) => row,
            None => {
                rows.push(0);
                rows.len() - 1
            }
        };
        rows[row] = end;
        bar.row = row as u32;
    }
    for (lane, rows) in busy_until {
        lanes[lane].rows = rows.len() as u32;
    }
}
