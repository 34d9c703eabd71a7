//! The attempt state machine, as pure functions over states.
//!
//! Both stores derive their guarded `UPDATE ... WHERE state = ANY(...)`
//! clauses from [`sources`], so the legal moves are written exactly once.

use crate::model::{AttemptId, AttemptState, JobState};

use AttemptState::*;

/// Every legal move `from -> to`. A timeout is never `running -> failed`:
/// after dispatch only the provider knows, so the move is to `unknown`.
const LEGAL: &[(AttemptState, AttemptState)] = &[
    (Starting, Running),
    (Starting, Failed),
    (Starting, Unknown),
    (Running, Succeeded),
    (Running, Failed),
    (Running, Unknown),
    (Running, Lost),
    (Unknown, Succeeded),
    (Unknown, Failed),
    (Unknown, Cancelled),
    (Unknown, Lost),
];

/// Whether `from -> to` is a legal attempt transition.
pub fn is_legal(from: AttemptState, to: AttemptState) -> bool {
    LEGAL.contains(&(from, to))
}

/// Whether a store moves an attempt in state `from` to `to` when asked to
/// move it only from `only_from` (if given): the move must be legal, and a
/// move decided on an earlier reading of the state lands only on that state.
pub fn may_move(from: AttemptState, only_from: Option<AttemptState>, to: AttemptState) -> bool {
    is_legal(from, to) && only_from.is_none_or(|only| only == from)
}

/// The states from which `to` may be entered, in declaration order.
pub fn sources(to: AttemptState) -> Vec<AttemptState> {
    LEGAL
        .iter()
        .filter(|(_, t)| *t == to)
        .map(|(f, _)| *f)
        .collect()
}

/// Terminal states have no way out.
pub fn is_terminal(state: AttemptState) -> bool {
    !LEGAL.iter().any(|(f, _)| *f == state)
}

/// States that block any new attempt of the same job: the provider may have
/// the request and nobody knows the outcome. The database enforces this with
/// the partial unique index `attempts_one_open`.
pub fn blocks_new_attempts(state: AttemptState) -> bool {
    matches!(state, Starting | Unknown)
}

/// States whose completion may still arrive and be offered to the CAS.
pub fn may_complete(state: AttemptState) -> bool {
    is_legal(state, Succeeded)
}

/// The verdict of the guard on a request for a new attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guard {
    Allowed,
    /// Another attempt is starting or unknown (or running, when running
    /// attempts are not allowed to be hedged).
    InFlight {
        attempt: AttemptId,
        state: AttemptState,
    },
    /// The job is no longer pending.
    Completed {
        state: JobState,
    },
}

/// The guard rule of docs/MODEL.md over a job's state and its attempts.
/// `allow_while_running` is the hedging policy: a hedge may start while one
/// other attempt is running, never while two are.
pub fn guard(
    job_state: JobState,
    attempts: &[(AttemptId, AttemptState)],
    allow_while_running: bool,
) -> Guard {
    if job_state.is_terminal() {
        return Guard::Completed { state: job_state };
    }
    let running_allowed = usize::from(allow_while_running);
    let blocking = attempts
        .iter()
        .find(|(_, state)| blocks_new_attempts(*state))
        .or_else(|| {
            attempts
                .iter()
                .filter(|(_, state)| *state == Running)
                .nth(running_allowed)
        });
    match blocking {
        Some((attempt, state)) => Guard::InFlight {
            attempt: *attempt,
            state: *state,
        },
        None => Guard::Allowed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    #[test]
    fn timeout_never_fails_directly_after_dispatch() {
        assert!(is_legal(Running, Unknown));
        assert!(
            is_legal(Running, Failed),
            "a definitive provider error is a failure"
        );
        assert!(!is_legal(Unknown, Running));
        assert!(!is_legal(Starting, Succeeded));
    }

    #[test]
    fn terminal_states() {
        let terminal: Vec<_> = AttemptState::ALL
            .iter()
            .copied()
            .filter(|s| is_terminal(*s))
            .collect();
        assert_eq!(terminal, vec![Succeeded, Failed, Cancelled, Lost]);
    }

    #[test]
    fn sources_are_derived_from_the_table() {
        assert_eq!(sources(Unknown), vec![Starting, Running]);
        assert_eq!(sources(Succeeded), vec![Running, Unknown]);
        assert_eq!(sources(Cancelled), vec![Unknown]);
        assert!(sources(Starting).is_empty());
    }

    #[test]
    fn guard_rule() {
        let a = AttemptId(Uuid::from_u128(1));
        let b = AttemptId(Uuid::from_u128(2));
        assert_eq!(guard(JobState::Pending, &[], false), Guard::Allowed);
        assert_eq!(
            guard(JobState::Pending, &[(a, Failed), (b, Unknown)], true),
            Guard::InFlight {
                attempt: b,
                state: Unknown
            }
        );
        assert_eq!(
            guard(JobState::Pending, &[(a, Running)], false),
            Guard::InFlight {
                attempt: a,
                state: Running
            }
        );
        assert_eq!(
            guard(JobState::Pending, &[(a, Running)], true),
            Guard::Allowed
        );
        assert_eq!(
            guard(JobState::Succeeded, &[(a, Succeeded)], true),
            Guard::Completed {
                state: JobState::Succeeded
            }
        );
    }
}
