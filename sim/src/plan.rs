//! The fault plan: when each fault of a scenario fires, heals or restarts
//! its host, whichever world it runs in. What a fault does to a world is
//! that world's own ([`crate::faults`] in the simulator, real mode's
//! processes and proxies); when it does it, and what it leaves for later,
//! is decided here once for both.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::decisions::{Decisions, Subject};
use crate::scenario::{Fault, FaultSpec, When};
use crate::trace::Recorder;

/// Something the driver does at a time to the scenario's fault number
/// `.0` (from 0, in the file's order): fire or heal it, restart the host
/// it crashed.
#[derive(Clone, Debug)]
pub enum Step {
    Fire(usize, Fault),
    Heal(usize, Fault),
    Bounce(usize, String),
}

impl Step {
    /// The decision of when this step took effect (real mode notes it; a
    /// replay plans the step at the time it kept).
    pub fn subject(&self) -> Subject {
        let (fault, step, label) = match self {
            Step::Fire(index, fault) => (*index, "fire", fault.kind().name()),
            Step::Heal(index, fault) => (*index, "heal", fault.kind().name()),
            Step::Bounce(index, host) => (*index, "restart", host.as_str()),
        };
        Subject::FaultStep {
            fault,
            step: step.to_owned(),
            label: label.to_owned(),
        }
    }
}

/// What the driver still has to do, and when.
#[derive(Debug, Default)]
pub struct Plan {
    /// By run ms, in the order they were planned.
    timed: BTreeMap<u64, Vec<Step>>,
    /// Faults waiting for their trigger, with their numbers.
    triggered: Vec<(usize, FaultSpec)>,
}

impl Plan {
    /// The scenario's faults: those at a time planned, the others waiting
    /// for their trigger; a fault whose firing time `decisions` keeps (a
    /// replayed run's) is planned at that time.
    pub fn new(faults: &[FaultSpec], decisions: &Decisions) -> Self {
        let mut plan = Self::default();
        for (index, spec) in faults.iter().enumerate() {
            let fire = Step::Fire(index, spec.fault.clone());
            match (decisions.kept_first(&fire.subject()), &spec.when) {
                (Some(at_ms), _) | (None, &When::At { at_ms }) => plan.at(at_ms, fire),
                (None, When::After { .. }) => plan.triggered.push((index, spec.clone())),
            }
        }
        plan
    }

    /// Plans `step` for `at_ms`, after whatever is planned for then.
    pub fn at(&mut self, at_ms: u64, step: Step) {
        self.timed.entry(at_ms).or_default().push(step);
    }

    /// When the next planned step is due.
    pub fn next_due(&self) -> Option<Duration> {
        self.timed
            .keys()
            .next()
            .map(|ms| Duration::from_millis(*ms))
    }

    /// The steps due by `now_ms`, in plan order (a step they plan for
    /// `now_ms` waits for the next turn).
    pub fn take_due(&mut self, now_ms: u64) -> Vec<Step> {
        let later = self.timed.split_off(&now_ms.saturating_add(1));
        std::mem::replace(&mut self.timed, later)
            .into_values()
            .flatten()
            .collect()
    }

    /// Plans for `at_ms` every waiting fault whose trigger the trace has
    /// now seen often enough.
    pub fn arm_triggers(&mut self, recorder: &impl Recorder, at_ms: u64) {
        let mut index = 0;
        while index < self.triggered.len() {
            let When::After { kind, nth } = self.triggered[index].1.when else {
                unreachable!("only trigger faults wait here");
            };
            if recorder.trigger_count(kind) >= nth {
                let (number, spec) = self.triggered.remove(index);
                self.at(at_ms, Step::Fire(number, spec.fault));
            } else {
                index += 1;
            }
        }
    }

    /// Whether a fault still waits for its trigger.
    pub fn awaits_triggers(&self) -> bool {
        !self.triggered.is_empty()
    }

    /// Whether nothing is planned at a time (faults waiting for a trigger
    /// that never came do not keep a run going).
    pub fn is_settled(&self) -> bool {
        self.timed.is_empty()
    }
}

/// What fault number `index` leaves for later once fired, and how many
/// milliseconds after it fired: the heal of a fault with a duration, the
/// restart of a crash with one; `None` for a fault that stays (a store
/// rule runs out by count).
pub fn aftermath(index: usize, fault: &Fault) -> Option<(u64, Step)> {
    let heal_after = |duration_ms: &u64| (*duration_ms, Step::Heal(index, fault.clone()));
    match fault {
        Fault::LinkLatency { duration_ms, .. }
        | Fault::Hold { duration_ms, .. }
        | Fault::Partition { duration_ms, .. }
        | Fault::ProviderHang { duration_ms, .. }
        | Fault::ProviderStall { duration_ms, .. }
        | Fault::ProviderError { duration_ms, .. } => Some(heal_after(duration_ms)),
        Fault::ClockOffset { duration_ms, .. } | Fault::ClockDrift { duration_ms, .. } => {
            duration_ms.as_ref().map(heal_after)
        }
        Fault::Crash {
            host,
            restart_after_ms,
        } => restart_after_ms.map(|after_ms| (after_ms, Step::Bounce(index, host.clone()))),
        Fault::ProviderModelChange { .. }
        | Fault::StoreLoseAck { .. }
        | Fault::StoreFailBeforeApply { .. }
        | Fault::StoreLatency { .. }
        | Fault::ClockJump { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decisions::{Decision, Kept};
    use crate::scenario::TriggerKind;

    fn hold(when: When) -> FaultSpec {
        FaultSpec {
            when,
            fault: Fault::Hold {
                a: "client-a".into(),
                b: "api-*".into(),
                duration_ms: 50,
            },
        }
    }

    fn kept(index: usize, step: &str, value: u64) -> Decision {
        Decision {
            index: 0,
            t_ms: value,
            subject: Subject::FaultStep {
                fault: index,
                step: step.to_owned(),
                label: "hold".to_owned(),
            },
            ordinal: 0,
            value,
            detail: String::new(),
        }
    }

    #[test]
    fn a_replay_fires_each_fault_when_the_recorded_run_did() {
        let faults = [
            hold(When::At { at_ms: 10 }),
            hold(When::After {
                kind: TriggerKind::JobCreated,
                nth: 1,
            }),
        ];
        let plain = Plan::new(&faults, &Decisions::default());
        assert_eq!(plain.next_due(), Some(Duration::from_millis(10)));
        assert!(plain.awaits_triggers());
        let log = [
            kept(0, "fire", 14),
            kept(1, "fire", 30),
            kept(1, "heal", 95),
        ];
        let replay = Decisions::replaying(Kept::from_log(&log, |_| true));
        let mut plan = Plan::new(&faults, &replay);
        assert!(
            !plan.awaits_triggers(),
            "the trigger fault fires at its time"
        );
        assert_eq!(plan.next_due(), Some(Duration::from_millis(14)));
        let due: Vec<usize> = plan
            .take_due(30)
            .iter()
            .map(|step| match step {
                Step::Fire(index, _) => *index,
                _ => usize::MAX,
            })
            .collect();
        assert_eq!(due, [0, 1]);
        let heal = aftermath(1, &faults[1].fault).expect("a hold heals").1;
        assert_eq!(replay.kept_first(&heal.subject()), Some(95));
    }
}
