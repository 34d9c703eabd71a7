//! The store's history ([`super::wal`]) as the trace's store events: what
//! the simulator's store host records when it applies an operation, read
//! here from what the operation committed.
//!
//! Every write of the store leaves its decision in `job_events` beside
//! the rows it changed (the store's own account: `attempt_started`,
//! `attempt_transition`, `won`, `race_lost`, `job_failed`,
//! `attempt_refused`, `key_reused`), so a transaction is read by the
//! events it inserted, completed by the rows it wrote (a new job's row, an
//! attempt's `read_version`, the job's version and result after a win).
//! A transaction that inserted a lone note (`ack_rechecked`,
//! `failover_refused`, a reconciler's note, a naive design's `race_lost`
//! note) is the engine recording a note: `note_recorded`, as the simulator
//! records its `record_event` calls. A refusal the store records on its
//! own (the guard's `attempt_refused`, a reused key's `key_reused`) keeps
//! its own event, whichever way it was written.
//!
//! Outcomes that write nothing (a replayed create, a refused completion)
//! are not in the history; the engine processes journal them
//! ([`idem_core::serve_bench::JournalEntry`]).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use idem_model::fingerprint::fingerprint;
use idem_model::model::{AttemptId, AttemptState, EventKind, JobId};
use idem_sim::trace::TraceBody;

use super::wal::{Change, ChangeKind, Commit};

/// The error `reason` of a refusal because another attempt is in flight.
const ATTEMPT_IN_FLIGHT: &str = "attempt_in_flight";

/// Reads commits of idem's tables in one schema.
#[derive(Clone, Debug)]
pub struct History {
    jobs: String,
    attempts: String,
    events: String,
}

/// One `job_events` row a transaction inserted.
#[derive(Debug)]
struct EventRow {
    job_id: JobId,
    attempt_id: Option<AttemptId>,
    kind: EventKind,
    detail: Value,
}

/// What one transaction wrote, indexed.
#[derive(Debug, Default)]
struct Written<'a> {
    /// Attempt rows inserted, by id.
    attempts: BTreeMap<AttemptId, &'a Change>,
    /// Attempts updated.
    moved: BTreeSet<AttemptId>,
    /// Each job's row after the transaction's last update of it.
    jobs: BTreeMap<JobId, &'a Change>,
    /// Attempts the transaction completed (a `won` event).
    won: BTreeSet<AttemptId>,
    /// Attempts the transaction resolved (a `resolved` event): with a win,
    /// a win out of band.
    resolved: BTreeSet<AttemptId>,
}

fn parse<T: std::str::FromStr>(change: &Change, column: &str) -> Result<T, String> {
    let text = change
        .column(column)
        .ok_or_else(|| format!("{}: no {column}", change.table))?;
    text.parse()
        .map_err(|_| format!("{}: {column} {text:?} does not parse", change.table))
}

fn optional_id<T: std::str::FromStr>(change: &Change, column: &str) -> Result<Option<T>, String> {
    match change.column(column) {
        None => Ok(None),
        Some(_) => parse(change, column).map(Some),
    }
}

fn json_column(change: &Change, column: &str) -> Result<Value, String> {
    let text = change
        .column(column)
        .ok_or_else(|| format!("{}: no {column}", change.table))?;
    serde_json::from_str(text).map_err(|e| format!("{}: {column}: {e}", change.table))
}

fn detail_str<'a>(detail: &'a Value, key: &str) -> Option<&'a str> {
    detail.get(key).and_then(Value::as_str)
}

fn detail_state(detail: &Value, key: &str) -> Result<AttemptState, String> {
    detail_str(detail, key)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("an event's {key} is not a state: {detail}"))
}

impl EventRow {
    fn read(change: &Change) -> Result<Self, String> {
        Ok(Self {
            job_id: parse(change, "job_id")?,
            attempt_id: optional_id(change, "attempt_id")?,
            kind: parse(change, "kind")?,
            detail: json_column(change, "detail")?,
        })
    }

    fn attempt(&self) -> Result<AttemptId, String> {
        self.attempt_id
            .ok_or_else(|| format!("a {} event without its attempt", self.kind))
    }

    fn from(&self) -> Result<AttemptState, String> {
        detail_state(&self.detail, "from")
    }
}

impl History {
    /// The history of idem's tables in `schema`.
    pub fn new(schema: &str) -> Self {
        Self {
            jobs: format!("{schema}.jobs"),
            attempts: format!("{schema}.attempts"),
            events: format!("{schema}.job_events"),
        }
    }

    /// The store events of one committed transaction, in the order it
    /// wrote them.
    pub fn events(&self, commit: &Commit) -> Result<Vec<TraceBody>, String> {
        let (written, rows) = self.index(commit)?;
        let mut bodies: Vec<(usize, TraceBody)> = Vec::new();
        for (index, change) in commit.changes.iter().enumerate() {
            if change.table == self.jobs && change.action == ChangeKind::Insert {
                bodies.push((index, created(change)?));
            }
        }
        for (index, row) in rows {
            if let Some(body) = event(&written, row)? {
                bodies.push((index, body));
            }
        }
        bodies.sort_by_key(|(index, _)| *index);
        Ok(bodies.into_iter().map(|(_, body)| body).collect())
    }

    /// What `commit` wrote, and the events it inserted with their places.
    fn index<'a>(
        &self,
        commit: &'a Commit,
    ) -> Result<(Written<'a>, Vec<(usize, EventRow)>), String> {
        let mut written = Written::default();
        let mut rows = Vec::new();
        for (index, change) in commit.changes.iter().enumerate() {
            let table = change.table.as_str();
            match change.action {
                ChangeKind::Insert if table == self.attempts => {
                    written.attempts.insert(parse(change, "id")?, change);
                }
                ChangeKind::Update if table == self.attempts => {
                    written.moved.insert(parse(change, "id")?);
                }
                ChangeKind::Update if table == self.jobs => {
                    written.jobs.insert(parse(change, "id")?, change);
                }
                ChangeKind::Insert if table == self.events => {
                    let row = EventRow::read(change)?;
                    if let Some(attempt) = row.attempt_id {
                        match row.kind {
                            EventKind::Won => written.won.insert(attempt),
                            EventKind::Resolved => written.resolved.insert(attempt),
                            _ => false,
                        };
                    }
                    rows.push((index, row));
                }
                _ => {}
            }
        }
        Ok((written, rows))
    }
}

/// A new job's row.
fn created(change: &Change) -> Result<TraceBody, String> {
    Ok(TraceBody::JobCreated {
        job_id: parse(change, "id")?,
        owner: parse(change, "owner_id")?,
        key: parse(change, "idempotency_key")?,
        fingerprint: parse(change, "request_fingerprint")?,
    })
}

/// The trace event one `job_events` row stands for, if any (a win's
/// `resolved` row is folded into the win).
fn event(written: &Written<'_>, row: EventRow) -> Result<Option<TraceBody>, String> {
    let moved = row.attempt_id.is_some_and(|a| written.moved.contains(&a));
    let won = row.attempt_id.is_some_and(|a| written.won.contains(&a));
    let body = match row.kind {
        EventKind::AttemptStarted => started(written, &row)?,
        EventKind::AttemptTransition => TraceBody::AttemptTransition {
            job_id: row.job_id,
            attempt_id: row.attempt()?,
            from: row.from()?,
            to: detail_state(&row.detail, "to")?,
            reason: row
                .detail
                .get("error")
                .and_then(|e| detail_str(e, "reason"))
                .map(str::to_owned),
        },
        EventKind::Won => completion_won(written, &row)?,
        EventKind::RaceLost if moved => TraceBody::CompletionLost {
            job_id: row.job_id,
            attempt_id: row.attempt()?,
            from: row.from()?,
            winner: detail_str(&row.detail, "winner").and_then(|w| w.parse().ok()),
            discarded_sha256: detail_str(&row.detail, "discarded_output_sha256")
                .unwrap_or_default()
                .to_owned(),
        },
        EventKind::Resolved if won => return Ok(None),
        EventKind::JobFailed if written.jobs.contains_key(&row.job_id) => TraceBody::JobFailed {
            job_id: row.job_id,
            version: parse(written.jobs[&row.job_id], "version")?,
        },
        EventKind::AttemptRefused => refused(row),
        EventKind::KeyReused => key_reused(row),
        _ => TraceBody::NoteRecorded {
            job_id: row.job_id,
            attempt_id: row.attempt_id,
            event: row.kind,
            detail: row.detail,
        },
    };
    Ok(Some(body))
}

/// An attempt's start, from its event and its row.
fn started(written: &Written<'_>, row: &EventRow) -> Result<TraceBody, String> {
    let id = row.attempt()?;
    let attempt = written
        .attempts
        .get(&id)
        .ok_or_else(|| format!("attempt {id} started without its row"))?;
    Ok(TraceBody::AttemptStarted {
        job_id: row.job_id,
        attempt_id: id,
        attempt_seq: parse(attempt, "seq")?,
        provider: parse(attempt, "provider")?,
        read_version: parse(attempt, "read_version")?,
    })
}

/// A win, with the job's version and result after it.
fn completion_won(written: &Written<'_>, row: &EventRow) -> Result<TraceBody, String> {
    let job = written
        .jobs
        .get(&row.job_id)
        .ok_or_else(|| format!("job {} won without its row", row.job_id))?;
    let id = row.attempt()?;
    Ok(TraceBody::CompletionWon {
        job_id: row.job_id,
        attempt_id: id,
        from: row.from()?,
        version: parse(job, "version")?,
        out_of_band: written.resolved.contains(&id),
        result_sha256: fingerprint(&json_column(job, "result")?),
    })
}

/// A start refused; an attempt in flight is named as the blocker.
fn refused(row: EventRow) -> TraceBody {
    let reason = detail_str(&row.detail, "reason")
        .unwrap_or_default()
        .to_owned();
    let in_flight = reason == ATTEMPT_IN_FLIGHT;
    TraceBody::AttemptRefused {
        job_id: row.job_id,
        blocking_attempt: row.attempt_id.filter(|_| in_flight),
        blocking_state: detail_str(&row.detail, "blocking_state").and_then(|s| s.parse().ok()),
        reason,
    }
}

/// A create refused: its key is bound to another body.
fn key_reused(row: EventRow) -> TraceBody {
    TraceBody::KeyReused {
        job_id: row.job_id,
        offered_fingerprint: detail_str(&row.detail, "offered_fingerprint")
            .unwrap_or_default()
            .to_owned(),
        differing_pointers: row
            .detail
            .get("differing_pointers")
            .and_then(Value::as_array)
            .map(|p| {
                p.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::Datum;

    const JOB: &str = "00000000-0000-0000-0000-00000000000a";
    const ATTEMPT: &str = "00000000-0000-0000-0000-00000000000b";

    fn change(table: &str, action: ChangeKind, columns: &[(&str, Option<&str>)]) -> Change {
        Change {
            table: format!("idem.{table}"),
            action,
            columns: columns
                .iter()
                .map(|(k, v)| {
                    (
                        (*k).to_owned(),
                        v.map_or(Datum::Null, |v| Datum::Text(v.to_owned())),
                    )
                })
                .collect(),
        }
    }

    fn event(kind: &str, attempt: Option<&str>, detail: &str) -> Change {
        change(
            "job_events",
            ChangeKind::Insert,
            &[
                ("job_id", Some(JOB)),
                ("attempt_id", attempt),
                ("kind", Some(kind)),
                ("detail", Some(detail)),
            ],
        )
    }

    fn events(changes: Vec<Change>) -> Vec<TraceBody> {
        History::new("idem")
            .events(&Commit {
                lsn: 1,
                t_us: 0,
                changes,
            })
            .expect("decodes")
    }

    #[test]
    fn a_start_reads_its_attempt_row() {
        let bodies = events(vec![
            change(
                "attempts",
                ChangeKind::Insert,
                &[
                    ("id", Some(ATTEMPT)),
                    ("job_id", Some(JOB)),
                    ("seq", Some("2")),
                    ("provider", Some("primary")),
                    ("read_version", Some("0")),
                ],
            ),
            event(
                "attempt_started",
                Some(ATTEMPT),
                r#"{"seq": 2, "provider": "primary"}"#,
            ),
        ]);
        assert_eq!(
            bodies,
            [TraceBody::AttemptStarted {
                job_id: JOB.parse().expect("id"),
                attempt_id: ATTEMPT.parse().expect("id"),
                attempt_seq: 2,
                provider: "primary".into(),
                read_version: 0,
            }]
        );
    }

    #[test]
    fn a_win_reads_the_jobs_new_version_and_result() {
        let job_row = change(
            "jobs",
            ChangeKind::Update,
            &[
                ("id", Some(JOB)),
                ("version", Some("1")),
                ("result", Some(r#"{"b": 2, "a": 1}"#)),
            ],
        );
        let attempt_row = change("attempts", ChangeKind::Update, &[("id", Some(ATTEMPT))]);
        let bodies = events(vec![
            job_row,
            attempt_row,
            event(
                "resolved",
                Some(ATTEMPT),
                r#"{"outcome": "succeeded", "from": "unknown"}"#,
            ),
            event(
                "won",
                Some(ATTEMPT),
                r#"{"from": "unknown", "read_version": 0}"#,
            ),
        ]);
        assert_eq!(
            bodies,
            [TraceBody::CompletionWon {
                job_id: JOB.parse().expect("id"),
                attempt_id: ATTEMPT.parse().expect("id"),
                from: AttemptState::Unknown,
                version: 1,
                out_of_band: true,
                result_sha256: fingerprint(&serde_json::json!({"a": 1, "b": 2})),
            }]
        );
    }

    #[test]
    fn a_lone_note_is_a_note_and_a_race_lost_with_its_row_is_a_loss() {
        let note = r#"{"reason": "acknowledgement lost", "winner": null}"#;
        let lone = events(vec![event("race_lost", Some(ATTEMPT), note)]);
        assert!(matches!(
            lone.as_slice(),
            [TraceBody::NoteRecorded {
                event: EventKind::RaceLost,
                ..
            }]
        ));
        let lost = events(vec![
            change("attempts", ChangeKind::Update, &[("id", Some(ATTEMPT))]),
            event(
                "race_lost",
                Some(ATTEMPT),
                r#"{"from": "running", "winner": null, "discarded_output_sha256": "d"}"#,
            ),
        ]);
        assert_eq!(
            lost,
            [TraceBody::CompletionLost {
                job_id: JOB.parse().expect("id"),
                attempt_id: ATTEMPT.parse().expect("id"),
                from: AttemptState::Running,
                winner: None,
                discarded_sha256: "d".into(),
            }]
        );
    }

    #[test]
    fn refusals_transitions_and_new_jobs_read_their_rows() {
        let bodies = events(vec![
            change(
                "jobs",
                ChangeKind::Insert,
                &[
                    ("id", Some(JOB)),
                    ("owner_id", Some("alice")),
                    ("idempotency_key", Some("k")),
                    ("request_fingerprint", Some("f")),
                ],
            ),
            event(
                "attempt_refused",
                Some(ATTEMPT),
                r#"{"reason": "attempt_in_flight", "blocking_state": "unknown", "provider": "p"}"#,
            ),
            event(
                "attempt_transition",
                Some(ATTEMPT),
                r#"{"from": "running", "to": "unknown", "error": {"reason": "deadline"}}"#,
            ),
            event("ack_rechecked", Some(ATTEMPT), r#"{"concluded": "won"}"#),
        ]);
        let job_id: JobId = JOB.parse().expect("id");
        let attempt_id: AttemptId = ATTEMPT.parse().expect("id");
        assert_eq!(
            bodies,
            [
                TraceBody::JobCreated {
                    job_id,
                    owner: "alice".into(),
                    key: "k".into(),
                    fingerprint: "f".into(),
                },
                TraceBody::AttemptRefused {
                    job_id,
                    reason: "attempt_in_flight".into(),
                    blocking_attempt: Some(attempt_id),
                    blocking_state: Some(AttemptState::Unknown),
                },
                TraceBody::AttemptTransition {
                    job_id,
                    attempt_id,
                    from: AttemptState::Running,
                    to: AttemptState::Unknown,
                    reason: Some("deadline".into()),
                },
                TraceBody::NoteRecorded {
                    job_id,
                    attempt_id: Some(attempt_id),
                    event: EventKind::AckRechecked,
                    detail: serde_json::json!({"concluded": "won"}),
                },
            ]
        );
    }
}
