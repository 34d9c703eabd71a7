//! Stopping a run that has come to rest before its settle deadline.
//!
//! A world whose jobs wait for an operator never becomes quiescent: its
//! clients keep reading the blocked jobs, its worker and reconciler keep
//! polling, and until the deadline every one of those reads costs steps
//! while nothing can change. Profiled, such worlds were two thirds of
//! `idem fuzz`'s CPU (they run 120 s simulated where the others settle in
//! 10-40 s). A run is at rest, and stops, when all of these hold:
//!
//! - every fault has fired and healed, and every crashed host is back;
//! - every client has run its script (every click and its retries, every
//!   backup press and its wait for a job id) and at most reads its jobs;
//! - the trace has recorded nothing but reads of jobs for twice the
//!   world's longest timer (a poll, a call or request timeout, a provider's
//!   slowest answer, a retry delay), so that any host still about to act
//!   would have acted;
//! - every pending job has an attempt in flight, and every attempt in
//!   flight waits for an operator: it is unknown and a reconciler note says
//!   it is blocked, or it is a hedged job's running attempt that cannot
//!   become unknown while such a blocked attempt holds the job's slot, or
//!   there is no reconciler to move it.
//!
//! Nothing the world does can then change its state: a blocked attempt
//! stays blocked until its provider answers otherwise, and the providers'
//! answers are fixed once the faults have healed and the quiet time has
//! let every live execution finish. The oracle judges the run exactly as it would at
//! the deadline, whose extra time would hold only reads.

use idem_core::engine::Policy;
use idem_core::store::{Store, StoreDump};
use idem_model::model::AttemptState;

use crate::plan::Plan;
use crate::scenario::{Action, Scenario};
use crate::world::{World, ready};

/// Tells when a run has come to rest.
#[derive(Debug)]
pub struct Rest {
    /// How long only reads must have happened.
    idle_ms: u64,
    /// The world's clients.
    clients: usize,
    /// The change count at the last full look that found the world not at
    /// rest: until the trace changes, the answer is the same.
    looked_at: Option<u64>,
}

impl Rest {
    pub fn new(scenario: &Scenario) -> Self {
        Self {
            idle_ms: 2 * longest_timer_ms(scenario),
            clients: scenario.clients.len(),
            looked_at: None,
        }
    }

    /// Whether `world` is at rest at `now_ms`; cheap unless the trace has
    /// been quiet long enough, and then the store is read once per change.
    pub fn at_rest(&mut self, world: &World, plan: &Plan, now_ms: u64) -> bool {
        if !plan.is_settled() || world.recorder.clients_reading() < self.clients {
            return false;
        }
        let (last_change_ms, changes) = world.recorder.last_change();
        if now_ms < last_change_ms.saturating_add(self.idle_ms) || self.looked_at == Some(changes) {
            return false;
        }
        self.looked_at = Some(changes);
        let dump = ready(Store::dump(world.store.as_ref())).expect("the in-process store dumps");
        awaiting_operator(world, &dump)
    }
}

/// Whether every pending job has an attempt in flight and every attempt
/// in flight waits for an operator.
fn awaiting_operator(world: &World, dump: &StoreDump) -> bool {
    let blocked = world.recorder.blocked();
    let in_flight = |a: &&idem_model::model::Attempt| {
        matches!(
            a.state,
            AttemptState::Starting | AttemptState::Running | AttemptState::Unknown
        )
    };
    // Without a reconciler nobody but an operator moves an attempt the
    // worker has let go of; with one, only a blocked unknown attempt waits.
    // An execution still running at its provider after the quiet time is
    // one a hang or stall fault left unfinished for good: a live one
    // would have answered within the provider's latency and been traced.
    let blocked_unknown = |a: &idem_model::model::Attempt| {
        a.state == AttemptState::Unknown && blocked.contains(&a.id)
    };
    // A hedged job's second attempt still running past its deadline cannot
    // become unknown while the first one holds the job's unknown slot
    // (`attempts_one_open`): it waits for whoever resolves that one.
    let slot_held_by_blocked = |a: &idem_model::model::Attempt| {
        a.state == AttemptState::Running
            && dump
                .attempts
                .iter()
                .any(|other| other.job_id == a.job_id && blocked_unknown(other))
    };
    let waits = |a: &idem_model::model::Attempt| {
        !world.facts.reconciler || blocked_unknown(a) || slot_held_by_blocked(a)
    };
    let pending_have_one = dump
        .jobs
        .iter()
        .filter(|j| !j.state.is_terminal())
        .all(|j| {
            dump.attempts
                .iter()
                .filter(in_flight)
                .any(|a| a.job_id == j.id)
        });
    pending_have_one && dump.attempts.iter().filter(in_flight).all(waits)
}

/// The longest time any host of the world may wait before it acts again:
/// a poll interval, a timeout, a provider's slowest answer, a client's
/// retry delay, the hedging delay, the slowest link.
fn longest_timer_ms(scenario: &Scenario) -> u64 {
    let t = &scenario.topology;
    let providers = t
        .providers
        .iter()
        .map(|p| p.behaviour.latency_ms + p.behaviour.latency_jitter_ms);
    let clients = scenario.clients.iter().map(|c| {
        let retry_after_ms = c.actions.iter().map(|a| match a {
            Action::Create { retry_after_ms, .. } => *retry_after_ms,
            _ => 0,
        });
        c.request_timeout_ms + retry_after_ms.max().unwrap_or(0)
    });
    let hosts = [
        t.worker.poll_interval_ms,
        t.worker.connect_timeout_ms + t.worker.attempt_deadline_ms,
        t.reconciler_config.poll_interval_ms + t.reconciler_config.provider_call_timeout_ms,
        t.store_timeout_ms,
        match scenario.policy {
            Policy::Hedged { hedge_after_ms } => hedge_after_ms,
            Policy::Strict => 0,
        },
        scenario.timing.latency_ms_max,
    ];
    hosts
        .into_iter()
        .chain(providers)
        .chain(clients)
        .max()
        .unwrap_or(0)
}
