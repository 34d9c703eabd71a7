//! The driver: one program for both worlds. It runs a scenario's fault
//! plan ([`crate::plan`]) against a [`Backend`], the simulated world
//! ([`crate::run`]: turmoil, the in-process store, simulated time) or the
//! real one (real mode: processes, PostgreSQL, TCP proxies, the wall
//! clock), and stops the run when the world is quiet, at rest, or at the
//! scenario's settle deadline. When a fault fires, what it leaves for
//! later, how a fault is recorded and when a trigger fault fires are
//! decided here, once; what a fault does to a world is the backend's.

use std::time::Duration;

use serde_json::json;

use serde::{Deserialize, Serialize};

use crate::decisions::{Decisions, Subject};
use crate::plan::{Plan, Step, aftermath};
use crate::scenario::{Fault, Scenario};
use crate::trace::{Recorder, TraceBody};

/// Why a run stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    /// Every client was done, every fault had healed and every job and
    /// attempt was settled.
    Quiescent,
    /// The scenario's settle deadline.
    Deadline,
    /// Before the deadline, nothing left to happen but reads: every fault
    /// healed, every click made, and every job not settled waiting for an
    /// operator ([`crate::rest`]).
    AtRest,
}

/// How often the driver looks for quiescence (run time): the check reads
/// the whole store, so it stays off the per-step path.
pub const QUIESCENCE_CHECK_MS: u64 = 100;

/// A world the driver can run: what moves its time, what makes a fault
/// happen in it, and what says it has settled.
///
/// The driver is awaited where it is called, never spawned, so the
/// futures need not be `Send`; the simulated backend's never wait (its
/// driver is polled once to its end).
#[allow(async_fn_in_trait)]
pub trait Backend {
    type Error;
    type Recorder: Recorder;

    fn recorder(&self) -> &Self::Recorder;

    /// Records what the driver did, now, under `host::DRIVER`.
    fn record_driver(&self, body: TraceBody);

    /// Where the run's decisions are made: a replay keeps when each fault
    /// step took effect.
    fn decisions(&self) -> &Decisions;

    /// Notes that a fault step took effect now (`subject`), for a world
    /// whose timing is its own (real mode); the simulator's is its plan's.
    fn note_step(&self, subject: Subject) {
        let _ = subject;
    }

    /// Moves the world on to its next moment: never past `due` (the plan's
    /// next step) nor `settle`. Returns the run time reached, or `None`
    /// once the world has reached `settle`.
    async fn advance(&mut self, due: Option<Duration>, settle: Duration) -> Option<Duration>;

    /// Lets the world run at the moment reached (hosts act, messages
    /// land).
    async fn step(&mut self) -> Result<(), Self::Error>;

    /// When a fault whose trigger the step at `at` recorded fires.
    fn trigger_due(&self, at: Duration) -> Duration;

    /// The run's time now.
    fn now(&self) -> Duration;

    async fn fire(&mut self, fault: &Fault) -> Result<(), Self::Error>;
    async fn heal(&mut self, fault: &Fault) -> Result<(), Self::Error>;
    /// Starts crashed `host` again.
    async fn restart(&mut self, host: &str) -> Result<(), Self::Error>;

    /// The driver has looked at the run once more (its plan as it stands);
    /// a world that waits on the driver's looks hears of it here.
    fn looked(&mut self, plan: &Plan) {
        let _ = plan;
    }

    /// Every user has run its script to the end.
    fn clients_done(&mut self) -> bool;
    /// Every job and attempt has settled, and the store is quiet.
    async fn settled(&mut self) -> bool;
    /// Nothing can change any more but by an operator's hand: the run may
    /// stop before its deadline ([`crate::rest`]).
    async fn at_rest(&mut self, plan: &Plan, now: Duration) -> bool;
}

/// Runs `scenario`'s fault plan against `backend` until the world is quiet
/// or at rest, or its settle deadline.
pub async fn drive<B: Backend>(backend: &mut B, scenario: &Scenario) -> Result<Stop, B::Error> {
    let settle = Duration::from_millis(scenario.timing.settle_ms);
    let mut plan = Plan::new(&scenario.faults, backend.decisions());
    let mut next_check = Duration::from_millis(QUIESCENCE_CHECK_MS);
    loop {
        let Some(at) = backend.advance(plan.next_due(), settle).await else {
            return Ok(Stop::Deadline);
        };
        let at_ms = millis(at);
        for step in plan.take_due(at_ms) {
            perform(backend, step, at_ms, &mut plan).await?;
        }
        backend.step().await?;
        // Trigger faults fire once the driver has seen their event.
        let armed_ms = millis(backend.trigger_due(at));
        plan.arm_triggers(backend.recorder(), armed_ms);
        backend.looked(&plan);
        let now = backend.now();
        if now >= next_check {
            next_check = now + Duration::from_millis(QUIESCENCE_CHECK_MS);
            if backend.clients_done() && plan.is_settled() && backend.settled().await {
                return Ok(Stop::Quiescent);
            }
            if backend.at_rest(&plan, now).await {
                return Ok(Stop::AtRest);
            }
        }
    }
}

/// Fires or heals one fault, or restarts a crashed host, at `now_ms`:
/// recorded first, then done; what a fired fault leaves to do later (its
/// heal, or the restart) is planned.
async fn perform<B: Backend>(
    backend: &mut B,
    step: Step,
    now_ms: u64,
    plan: &mut Plan,
) -> Result<(), B::Error> {
    backend.note_step(step.subject());
    match step {
        Step::Bounce(_, host) => {
            backend.record_driver(fault_event("restart", json!({"host": host})));
            backend.restart(&host).await?;
        }
        Step::Fire(index, fault) => {
            backend.record_driver(fault_event(fault.kind().name(), detail(&fault)));
            backend.fire(&fault).await?;
            if let Some((after_ms, later)) = aftermath(index, &fault) {
                let kept = backend.decisions().kept_first(&later.subject());
                plan.at(kept.unwrap_or(now_ms + after_ms), later);
            }
        }
        Step::Heal(_, fault) => {
            let name = format!("heal_{}", fault.kind().name());
            backend.record_driver(fault_event(&name, detail(&fault)));
            backend.heal(&fault).await?;
        }
    }
    Ok(())
}

fn fault_event(name: &str, detail: serde_json::Value) -> TraceBody {
    TraceBody::Fault {
        name: name.to_owned(),
        detail,
    }
}

/// A fault as the trace's event detail: its serialized form.
fn detail(fault: &Fault) -> serde_json::Value {
    serde_json::to_value(fault).expect("faults serialize")
}

/// Whole milliseconds of `d`.
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).expect("run time fits u64 milliseconds")
}
