//! How jobs ended: invariants 3 (one winner) and 6 (losers discarded).
//!
//! The rule restated: a job's result is written once, by the one attempt
//! that won the compare-and-swap; every later completion loses, keeps no
//! output, leaves none in the job, and is recorded as a race.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use idem_model::fingerprint::fingerprint;
use idem_model::model::{Attempt, AttemptId, AttemptState, EventKind, Job, JobId, JobState};

use super::Invariant;
use super::findings::{Findings, seqs_text, short};
use super::index::RunIndex;
use crate::trace::{TraceBody, TraceEvent};

/// How deep the search for a discarded output inside a job's result goes.
const RESULT_DEPTH_MAX: usize = 64;

pub(super) fn check(run: &RunIndex<'_>, findings: &mut Findings) {
    let endings = endings_by_job(run);
    one_winner(run, &endings, findings);
    losers_discarded(run, &endings, findings);
}

/// A job reaching an end in the trace.
#[derive(Clone, Copy, Debug)]
struct Ending<'a> {
    seq: u64,
    /// The job's version after the write, where the event says.
    version: Option<i64>,
    kind: EndingKind<'a>,
}

#[derive(Clone, Copy, Debug)]
enum EndingKind<'a> {
    /// An attempt succeeded: through the compare-and-swap (with the result's
    /// fingerprint), or by a plain transition to succeeded.
    Won {
        attempt: AttemptId,
        result_sha256: Option<&'a str>,
    },
    Failed,
}

impl Ending<'_> {
    fn winner(&self) -> Option<AttemptId> {
        match self.kind {
            EndingKind::Won { attempt, .. } => Some(attempt),
            EndingKind::Failed => None,
        }
    }

    fn describe(&self) -> String {
        match self.kind {
            EndingKind::Won { attempt, .. } => {
                format!("won by attempt {attempt} at seq {}", self.seq)
            }
            EndingKind::Failed => format!("failed at seq {}", self.seq),
        }
    }
}

type Endings<'a> = BTreeMap<JobId, Vec<Ending<'a>>>;

fn endings_by_job<'a>(run: &RunIndex<'a>) -> Endings<'a> {
    let mut endings: Endings<'a> = BTreeMap::new();
    for event in run.events() {
        if let Some((job, ending)) = ending_of(event) {
            endings.entry(job).or_default().push(ending);
        }
    }
    endings
}

/// The job an event ends, and how: a won compare-and-swap, a plain move
/// to succeeded, or a give-up. `None` for any other event.
fn ending_of(event: &TraceEvent) -> Option<(JobId, Ending<'_>)> {
    let ending = match &event.body {
        TraceBody::CompletionWon {
            job_id,
            attempt_id,
            version,
            result_sha256,
            ..
        } => (
            *job_id,
            Ending {
                seq: event.seq,
                version: Some(*version),
                kind: EndingKind::Won {
                    attempt: *attempt_id,
                    result_sha256: Some(result_sha256),
                },
            },
        ),
        TraceBody::AttemptTransition {
            job_id,
            attempt_id,
            to: AttemptState::Succeeded,
            ..
        } => (
            *job_id,
            Ending {
                seq: event.seq,
                version: None,
                kind: EndingKind::Won {
                    attempt: *attempt_id,
                    result_sha256: None,
                },
            },
        ),
        TraceBody::JobFailed { job_id, version } => (
            *job_id,
            Ending {
                seq: event.seq,
                version: Some(*version),
                kind: EndingKind::Failed,
            },
        ),
        _ => return None,
    };
    Some(ending)
}

/// Invariant 3, job by job: what the trace shows, then what the store holds.
fn one_winner(run: &RunIndex<'_>, endings: &Endings<'_>, findings: &mut Findings) {
    let jobs: BTreeSet<JobId> = run.jobs.keys().chain(endings.keys()).copied().collect();
    let none = Vec::new();
    for job in jobs {
        let endings = endings.get(&job).unwrap_or(&none);
        ended_once(job, endings, findings);
        versions_grow(run, job, endings, findings);
        if let Some(row) = run.jobs.get(&job) {
            row_names_its_winner(run, row, endings, findings);
        }
    }
}

/// A job ends once: one success, or one give-up.
fn ended_once(job: JobId, endings: &[Ending<'_>], findings: &mut Findings) {
    if endings.len() <= 1 {
        return;
    }
    let winners: Vec<String> = endings
        .iter()
        .filter_map(|e| e.winner().map(|a| format!("{a} (seq {})", e.seq)))
        .collect();
    let message = if winners.len() > 1 {
        let failed: Vec<String> = endings
            .iter()
            .filter(|e| e.winner().is_none())
            .map(Ending::describe)
            .collect();
        let also = if failed.is_empty() {
            String::new()
        } else {
            format!("; it also {}", failed.join(", "))
        };
        let all = if winners.len() == 2 { "both" } else { "all" };
        format!(
            "job {job}: attempts {} {all} succeeded: the result was written {} times{also}",
            winners.join(" and "),
            winners.len()
        )
    } else {
        let described: Vec<String> = endings.iter().map(Ending::describe).collect();
        format!(
            "job {job} ended {} times ({}): its outcome must be written once",
            endings.len(),
            described.join(", ")
        )
    };
    findings.report(Invariant::OneWinner, message, endings.iter().map(|e| e.seq));
}

/// Every write raises the version; the store never holds less than the
/// last version written.
fn versions_grow(run: &RunIndex<'_>, job: JobId, endings: &[Ending<'_>], findings: &mut Findings) {
    let mut last: Option<(i64, u64)> = None;
    for ending in endings {
        let Some(version) = ending.version else {
            continue;
        };
        if let Some((previous, previous_seq)) = last
            && version <= previous
        {
            findings.report(
                Invariant::OneWinner,
                format!(
                    "job {job}: version went from {previous} (seq {previous_seq}) to {version} (seq {}); it must only grow",
                    ending.seq
                ),
                [previous_seq, ending.seq],
            );
        }
        last = Some((version, ending.seq));
    }
    if let (Some(row), Some((version, seq))) = (run.jobs.get(&job), last)
        && row.version < version
    {
        findings.report(
            Invariant::OneWinner,
            format!(
                "job {job}: the store holds version {}, below version {version} written at seq {seq}",
                row.version
            ),
            [seq],
        );
    }
}

/// The row: `completed_by` names the one succeeded attempt, which won
/// first, and the result is that attempt's output, unchanged since.
fn row_names_its_winner(
    run: &RunIndex<'_>,
    row: &Job,
    endings: &[Ending<'_>],
    findings: &mut Findings,
) {
    let siblings = run
        .attempts_by_job
        .get(&row.id)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let wins: Vec<&Ending<'_>> = endings.iter().filter(|e| e.winner().is_some()).collect();
    let check = RowCheck {
        row,
        siblings,
        win_seqs: wins.iter().map(|e| e.seq).collect(),
    };
    check.one_succeeded_attempt(wins.len(), findings);
    check.completed_by_matches_state(findings);
    check.result_matches_state(findings);
    if let Some(first) = wins.first() {
        check.first_win_is_the_row(first, findings);
    }
    check.result_is_the_winners_output(findings);
}

/// One job's row against its attempts and the wins the trace recorded.
struct RowCheck<'a> {
    row: &'a Job,
    siblings: &'a [&'a Attempt],
    /// The seqs of the trace's winning completions: the evidence.
    win_seqs: Vec<u64>,
}

impl RowCheck<'_> {
    fn report(&self, findings: &mut Findings, message: String, evidence: Vec<u64>) {
        findings.report(
            Invariant::OneWinner,
            format!("job {}: {message}", self.row.id),
            evidence,
        );
    }

    /// Two succeeded attempts in the store, where the trace shows at most
    /// one win (two wins are reported where the wins are checked).
    fn one_succeeded_attempt(&self, wins: usize, findings: &mut Findings) {
        let succeeded: Vec<String> = self
            .siblings
            .iter()
            .filter(|a| a.state == AttemptState::Succeeded)
            .map(|a| a.id.to_string())
            .collect();
        if succeeded.len() > 1 && wins <= 1 {
            self.report(
                findings,
                format!(
                    "attempts {} are all succeeded in the store",
                    succeeded.join(" and ")
                ),
                self.win_seqs.clone(),
            );
        }
    }

    /// `completed_by` is set exactly when the job succeeded, and names a
    /// succeeded attempt of the job.
    fn completed_by_matches_state(&self, findings: &mut Findings) {
        match (self.row.state, self.row.completed_by) {
            (JobState::Succeeded, None) => self.report(
                findings,
                "succeeded, but completed_by names no attempt".to_owned(),
                self.win_seqs.clone(),
            ),
            (JobState::Succeeded, Some(named)) => {
                let named_state = self
                    .siblings
                    .iter()
                    .find(|a| a.id == named)
                    .map(|a| a.state);
                if named_state != Some(AttemptState::Succeeded) {
                    let what = named_state.map_or_else(
                        || "not an attempt of the job".to_owned(),
                        |s| format!("in state {s}"),
                    );
                    self.report(
                        findings,
                        format!("completed_by names attempt {named}, which is {what}"),
                        self.win_seqs.clone(),
                    );
                }
            }
            (state, Some(named)) => self.report(
                findings,
                format!("{state}, yet completed_by names attempt {named}"),
                self.win_seqs.clone(),
            ),
            (_, None) => {}
        }
    }

    /// A result exactly when the job succeeded.
    fn result_matches_state(&self, findings: &mut Findings) {
        match (self.row.state, &self.row.result) {
            (JobState::Succeeded, None) => self.report(
                findings,
                "succeeded without a result".to_owned(),
                self.win_seqs.clone(),
            ),
            (JobState::Pending | JobState::Failed, Some(_)) => self.report(
                findings,
                format!("{} but holds a result", self.row.state),
                self.win_seqs.clone(),
            ),
            _ => {}
        }
    }

    /// The first win in the trace is the one the row holds: its attempt is
    /// `completed_by`, and the result is what it won with.
    fn first_win_is_the_row(&self, first: &Ending<'_>, findings: &mut Findings) {
        let EndingKind::Won {
            attempt: first_winner,
            result_sha256,
        } = first.kind
        else {
            unreachable!("wins are filtered to winners");
        };
        if self.row.state != JobState::Succeeded {
            self.report(
                findings,
                format!(
                    "{} in the store, though attempt {first_winner} won at seq {}",
                    self.row.state, first.seq
                ),
                vec![first.seq],
            );
        } else if let Some(named) = self.row.completed_by
            && named != first_winner
        {
            self.report(
                findings,
                format!(
                    "completed_by names attempt {named}, but attempt {first_winner} won first at seq {}",
                    first.seq
                ),
                self.win_seqs.clone(),
            );
        }
        if let (Some(won_with), Some(result)) = (result_sha256, &self.row.result) {
            let holds = result.fingerprint();
            if holds != won_with {
                self.report(
                    findings,
                    format!(
                        "the result ({}) is not the one attempt {first_winner} won with at seq {} ({}): it changed after it was written",
                        short(&holds),
                        first.seq,
                        short(won_with)
                    ),
                    self.win_seqs.clone(),
                );
            }
        }
    }

    /// The result is the output the named winner recorded.
    fn result_is_the_winners_output(&self, findings: &mut Findings) {
        let (Some(named), Some(result)) = (self.row.completed_by, &self.row.result) else {
            return;
        };
        let Some(winner) = self.siblings.iter().find(|a| a.id == named) else {
            return;
        };
        match &winner.output {
            None => self.report(
                findings,
                format!("attempt {named}, which completed_by names, has no output in the store"),
                self.win_seqs.clone(),
            ),
            Some(output) if fingerprint(output) != fingerprint(result.value()) => self.report(
                findings,
                format!(
                    "the result is not the output of attempt {named}, which completed_by names"
                ),
                self.win_seqs.clone(),
            ),
            Some(_) => {}
        }
    }
}

/// What the run shows about one attempt that lost (or should have).
#[derive(Debug, Default)]
struct Loser {
    job: Option<JobId>,
    /// `completion_lost` events for it.
    lost_seqs: Vec<u64>,
    /// `race_lost` notes the engine recorded for it (without a completion
    /// the store saw lose).
    note_seqs: Vec<u64>,
    /// A `race_lost` event in the store's decision trace names it.
    race_event_in_store: bool,
    /// Fingerprints of the output it offered, as the race events say.
    discarded: BTreeSet<String>,
}

/// Invariant 6.
fn losers_discarded(run: &RunIndex<'_>, endings: &Endings<'_>, findings: &mut Findings) {
    for (job, endings) in endings {
        let mut wins = endings.iter().filter(|e| e.winner().is_some());
        let Some(first) = wins.next() else {
            continue;
        };
        let first_winner = first.winner().expect("filtered to winners");
        for later in wins {
            let attempt = later.winner().expect("filtered to winners");
            findings.report(
                Invariant::LosersDiscarded,
                format!(
                    "job {job}: attempt {attempt} completed at seq {} after attempt {first_winner} had won at seq {}, and was not discarded: last writer wins",
                    later.seq, first.seq
                ),
                [first.seq, later.seq],
            );
        }
    }
    for (attempt, loser) in losers(run) {
        check_loser(run, attempt, &loser, findings);
    }
}

/// Every attempt the run shows lost: lost in the store, or named by a race
/// event of the trace or of the store.
fn losers(run: &RunIndex<'_>) -> BTreeMap<AttemptId, Loser> {
    let mut losers: BTreeMap<AttemptId, Loser> = BTreeMap::new();
    losers_in_trace(run, &mut losers);
    losers_in_store(run, &mut losers);
    losers
}

/// The trace's account: `completion_lost` events (with the output each
/// offered), then the `race_lost` notes the engine recorded.
fn losers_in_trace(run: &RunIndex<'_>, losers: &mut BTreeMap<AttemptId, Loser>) {
    for event in run.events() {
        if let TraceBody::CompletionLost {
            job_id,
            attempt_id,
            discarded_sha256,
            ..
        } = &event.body
        {
            let loser = losers.entry(*attempt_id).or_default();
            loser.job = Some(*job_id);
            loser.lost_seqs.push(event.seq);
            loser.discarded.insert(discarded_sha256.clone());
        }
    }
    for event in run.events() {
        if let TraceBody::NoteRecorded {
            job_id,
            attempt_id: Some(attempt),
            event: EventKind::RaceLost,
            ..
        } = &event.body
        {
            let loser = losers.entry(*attempt).or_default();
            loser.job = Some(*job_id);
            loser.note_seqs.push(event.seq);
        }
    }
}

/// The store's account: its `race_lost` events (with the output each
/// discarded), then the attempts it holds lost.
fn losers_in_store(run: &RunIndex<'_>, losers: &mut BTreeMap<AttemptId, Loser>) {
    for event in &run.input.dump.events {
        if event.kind != EventKind::RaceLost {
            continue;
        }
        let Some(attempt) = event.attempt_id else {
            continue;
        };
        let loser = losers.entry(attempt).or_default();
        loser.job = Some(event.job_id);
        loser.race_event_in_store = true;
        if let Some(sha) = event
            .detail
            .get("discarded_output_sha256")
            .and_then(Value::as_str)
        {
            loser.discarded.insert(sha.to_owned());
        }
    }
    for row in &run.input.dump.attempts {
        if row.state == AttemptState::Lost {
            losers.entry(row.id).or_default().job = Some(row.job_id);
        }
    }
}

/// Invariant 6 for one loser: it is lost in the store (a false race is the
/// one thing reported otherwise), a race event records it, it kept no
/// output, and its output is neither the job's result nor inside it.
fn check_loser(run: &RunIndex<'_>, attempt: AttemptId, loser: &Loser, findings: &mut Findings) {
    let row = run.attempts.get(&attempt).copied();
    let lost_evidence = lost_evidence(run, attempt, loser);
    let mut report = |message: String, extra: &[u64]| {
        findings.report(
            Invariant::LosersDiscarded,
            message,
            lost_evidence.iter().chain(extra).copied(),
        );
    };
    if let Some(message) = false_race(run, attempt, loser, row) {
        // Its output and the result follow from where it really stands;
        // the false race is the one thing to report.
        report(message, &[]);
        return;
    }
    if loser.lost_seqs.is_empty() && loser.note_seqs.is_empty() && !loser.race_event_in_store {
        report(
            format!("attempt {attempt} is lost, but no race event records it"),
            &[],
        );
    }
    if let Some(row) = row
        && row.output.is_some()
    {
        report(
            format!("lost attempt {attempt} kept its output in the store"),
            &[],
        );
    }
    if let Some((message, extra)) = output_in_result(run, attempt, loser, row) {
        report(message, &extra);
    }
}

/// The events that show the attempt lost: its `completion_lost` events,
/// else its start, its last move and its `race_lost` notes.
fn lost_evidence(run: &RunIndex<'_>, attempt: AttemptId, loser: &Loser) -> Vec<u64> {
    if loser.lost_seqs.is_empty() {
        let life = run.replay.lives.get(&attempt);
        life.iter()
            .flat_map(|l| l.started_seq.into_iter().chain([l.since_seq]))
            .chain(loser.note_seqs.iter().copied())
            .collect()
    } else {
        loser.lost_seqs.clone()
    }
}

/// A race says the attempt lost, but the store holds it in another state
/// (won, even): what to say about it, if so.
fn false_race(
    run: &RunIndex<'_>,
    attempt: AttemptId,
    loser: &Loser,
    row: Option<&Attempt>,
) -> Option<String> {
    let row = row.filter(|row| row.state != AttemptState::Lost)?;
    let won = run
        .jobs
        .get(&row.job_id)
        .is_some_and(|job| job.completed_by == Some(attempt));
    Some(if won {
        format!(
            "a race event says attempt {attempt} lost ({}), but it won: job {}'s completed_by names it",
            race_text(loser),
            row.job_id
        )
    } else {
        format!(
            "attempt {attempt} lost the race ({}) but is {} in the store",
            race_text(loser),
            row.state
        )
    })
}

/// The loser's output found in its job's result: as the whole result (by
/// the fingerprint a race event recorded), or, from the provider's ledger,
/// merged into it. The message and the extra evidence, if so.
fn output_in_result(
    run: &RunIndex<'_>,
    attempt: AttemptId,
    loser: &Loser,
    row: Option<&Attempt>,
) -> Option<(String, Vec<u64>)> {
    let job = row.map(|r| r.job_id).or(loser.job)?;
    let result = run.jobs.get(&job).and_then(|j| j.result.as_ref())?;
    let result_fingerprint = result.fingerprint();
    if loser.discarded.contains(&result_fingerprint) {
        return Some((
            format!(
                "the output attempt {attempt} lost with ({}) is job {job}'s result",
                short(&result_fingerprint)
            ),
            Vec::new(),
        ));
    }
    // The provider's ledger holds what the loser produced: none of it may
    // have been merged into the result.
    let key = attempt.to_string();
    run.executions_for_key(&key).find_map(|execution| {
        let output = execution.output?;
        contains_value(result.value(), output, RESULT_DEPTH_MAX).then(|| {
            (
                format!(
                    "the output of lost attempt {attempt} (provider {} execution {}) appears in job {job}'s result",
                    execution.provider, execution.exec_seq
                ),
                execution.seen.clone(),
            )
        })
    })
}

fn race_text(loser: &Loser) -> String {
    if !loser.lost_seqs.is_empty() {
        format!("completion lost at {}", seqs_text(&loser.lost_seqs))
    } else if !loser.note_seqs.is_empty() {
        format!("race_lost note at {}", seqs_text(&loser.note_seqs))
    } else {
        "a race_lost event in the store".to_owned()
    }
}

/// Whether `needle` is `haystack` or one of its parts, compared as
/// canonical JSON. Bare numbers, booleans and nulls are not searched for
/// inside: they coincide too easily to prove anything.
pub(super) fn contains_value(haystack: &Value, needle: &Value, depth_left: usize) -> bool {
    if fingerprint(haystack) == fingerprint(needle) {
        return true;
    }
    let searchable = matches!(
        needle,
        Value::Object(_) | Value::Array(_) | Value::String(_)
    );
    if !searchable || depth_left == 0 {
        return false;
    }
    match haystack {
        Value::Object(map) => map
            .values()
            .any(|v| contains_value(v, needle, depth_left - 1)),
        Value::Array(items) => items
            .iter()
            .any(|v| contains_value(v, needle, depth_left - 1)),
        _ => false,
    }
}
