//! A job's compare-and-swap chain, version by version: which attempt moved
//! it, which completions lost and had their output discarded, and, under
//! a design without the compare-and-swap, which write overwrote a result
//! that had already won.

use crate::trace::{Body, RunTrace};

/// What one step did to the job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StepKind {
    /// The job was created at version 0.
    Created,
    /// A completion moved the version; `overwrote` names the result it
    /// replaced, when one had already been written (never with a CAS).
    Won {
        version: i64,
        result_sha256: String,
        out_of_band: bool,
        overwrote: Option<String>,
    },
    /// A completion that lost the compare-and-swap: its output was
    /// discarded.
    Lost {
        winner: Option<String>,
        discarded_sha256: String,
    },
    /// A completion offered by an attempt that had already ended.
    Refused { state: String },
    /// The job gave up, at this version.
    Failed { version: i64 },
}

/// One step of the chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainStep {
    pub seq: u64,
    pub t_ms: u64,
    /// The attempt that made the write, if any.
    pub attempt_id: Option<String>,
    /// The host that called the store.
    pub caller: Option<String>,
    pub kind: StepKind,
}

/// One job's chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chain {
    pub job_id: String,
    /// 1-based, in creation order (as the timeline numbers jobs).
    pub number: usize,
    pub steps: Vec<ChainStep>,
}

impl Chain {
    /// Results written over a result that had already won.
    pub fn overwrites(&self) -> usize {
        self.steps
            .iter()
            .filter(|s| {
                matches!(
                    &s.kind,
                    StepKind::Won {
                        overwrote: Some(_),
                        ..
                    }
                )
            })
            .count()
    }
}

/// Every job's chain, in creation order. `jobs` are the job ids in that
/// order (as [`crate::timeline::Timeline::jobs`] has them).
pub fn chains(trace: &RunTrace, jobs: &[String]) -> Vec<Chain> {
    jobs.iter()
        .enumerate()
        .map(|(index, job)| chain(trace, index + 1, job))
        .collect()
}

/// The chain of `job`, the `number`-th created.
fn chain(trace: &RunTrace, number: usize, job: &str) -> Chain {
    let mut steps = Vec::new();
    // The result written last, which a later win would overwrite.
    let mut current: Option<String> = None;
    for event in trace.events.iter().filter(|e| e.job_id() == Some(job)) {
        if let Some((attempt_id, kind)) = step_kind(&event.body, &mut current) {
            steps.push(ChainStep {
                seq: event.seq,
                t_ms: event.t_ms,
                attempt_id,
                caller: event.caller.clone(),
                kind,
            });
        }
    }
    Chain {
        job_id: job.to_owned(),
        number,
        steps,
    }
}

/// What `body` did to its job, and the attempt that did it, if anything.
fn step_kind(body: &Body, current: &mut Option<String>) -> Option<(Option<String>, StepKind)> {
    Some(match body {
        Body::JobCreated { .. } => (None, StepKind::Created),
        Body::CompletionWon {
            attempt_id,
            version,
            out_of_band,
            result_sha256,
            ..
        } => (
            Some(attempt_id.clone()),
            StepKind::Won {
                version: *version,
                result_sha256: result_sha256.clone(),
                out_of_band: *out_of_band,
                overwrote: current.replace(result_sha256.clone()),
            },
        ),
        Body::CompletionLost {
            attempt_id,
            winner,
            discarded_sha256,
            ..
        } => (
            Some(attempt_id.clone()),
            StepKind::Lost {
                winner: winner.clone(),
                discarded_sha256: discarded_sha256.clone(),
            },
        ),
        Body::CompletionRefused {
            attempt_id, state, ..
        } => (
            Some(attempt_id.clone()),
            StepKind::Refused {
                state: state.clone(),
            },
        ),
        Body::JobFailed { version, .. } => (None, StepKind::Failed { version: *version }),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_winner_is_an_overwrite_and_a_loser_is_discarded() {
        let text = [
            r#"{"seq":0,"t_ms":1,"host":"store","caller":"api-1","kind":"job_created","job_id":"j","owner":"o","key":"k","fingerprint":"f"}"#,
            r#"{"seq":1,"t_ms":5,"host":"store","caller":"worker-1","kind":"completion_won","job_id":"j","attempt_id":"b","from":"running","version":1,"out_of_band":false,"result_sha256":"r1"}"#,
            r#"{"seq":2,"t_ms":9,"host":"store","caller":"worker-1","kind":"completion_won","job_id":"j","attempt_id":"a","from":"running","version":2,"out_of_band":false,"result_sha256":"r2"}"#,
            r#"{"seq":3,"t_ms":12,"host":"store","caller":"worker-1","kind":"completion_lost","job_id":"j","attempt_id":"c","from":"running","winner":"a","discarded_sha256":"r3"}"#,
        ]
        .join("\n");
        let trace = RunTrace::parse(&text).expect("valid");
        let chain = &chains(&trace, &["j".to_owned()])[0];
        assert_eq!(chain.steps.len(), 4);
        assert_eq!(chain.overwrites(), 1);
        assert!(matches!(
            &chain.steps[2].kind,
            StepKind::Won { overwrote: Some(old), version: 2, .. } if old == "r1"
        ));
        assert!(matches!(
            &chain.steps[3].kind,
            StepKind::Lost { discarded_sha256, .. } if discarded_sha256 == "r3"
        ));
    }
}
