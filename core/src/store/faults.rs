//! Fault hooks around any store, for the simulator's store host and for
//! tests: apply-then-lose-acknowledgement, fail-before-apply, and latency.
//!
//! A fault rule names an operation, which occurrences of it to hit, and what
//! to do. Rules are consulted in order; every injection is logged so the
//! simulator's trace can show it. The rule list is bounded.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::call::{CallStore, StoreCall, StoreReply, apply};
use super::{Store, StoreError};

pub use idem_model::store_fault::{StoreFault, StoreOp};

/// The most rules one plan holds.
pub const FAULT_RULES_MAX: usize = 64;

/// Hit occurrences `first..first+count` (1-based) of `op` with `fault`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultRule {
    pub op: StoreOp,
    pub fault: StoreFault,
    /// The first occurrence of `op` to hit, counting from 1.
    pub first: u32,
    /// How many consecutive occurrences to hit.
    pub count: u32,
}

/// A fault that was injected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Injected {
    pub op: StoreOp,
    /// Which occurrence of `op` it was, counting from 1.
    pub occurrence: u32,
    pub fault: StoreFault,
}

#[derive(Debug, Default)]
struct PlanState {
    rules: Vec<FaultRule>,
    /// Occurrences seen so far, per operation.
    seen: BTreeMap<StoreOp, u32>,
    injected: Vec<Injected>,
}

/// A shared, mutable plan: the simulator adds rules while the world runs.
#[derive(Clone, Debug, Default)]
pub struct FaultPlan {
    state: Arc<Mutex<PlanState>>,
}

impl FaultPlan {
    /// Adds a rule. Panics past [`FAULT_RULES_MAX`]: plans are written by
    /// scenarios, and a runaway plan is a bug in the scenario runner.
    pub fn add(&self, rule: FaultRule) {
        let mut state = self.lock();
        assert!(
            state.rules.len() < FAULT_RULES_MAX,
            "too many store fault rules"
        );
        state.rules.push(rule);
    }

    /// Counts an occurrence of `op` and returns the fault to inject, if any.
    pub fn next(&self, op: StoreOp) -> Option<StoreFault> {
        let mut state = self.lock();
        let occurrence = {
            let seen = state.seen.entry(op).or_insert(0);
            *seen += 1;
            *seen
        };
        let fault = state
            .rules
            .iter()
            .find(|r| {
                r.op == op && occurrence >= r.first && occurrence < r.first.saturating_add(r.count)
            })
            .map(|r| r.fault)?;
        state.injected.push(Injected {
            op,
            occurrence,
            fault,
        });
        Some(fault)
    }

    /// Everything injected so far, in order.
    pub fn injected(&self) -> Vec<Injected> {
        self.lock().injected.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PlanState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What the fault injector made of one call.
#[derive(Debug)]
pub struct Faulted {
    /// The call's answer, as the store gave it or as the fault replaced it.
    pub result: Result<StoreReply, StoreError>,
    /// The fault injected into this call, if the plan held one for it.
    pub injected: Option<Injected>,
}

impl Faulted {
    /// The call was applied and its acknowledgement is to be lost: the
    /// caller must not see `result`. A wrapper answers that the outcome is
    /// unknown; the simulator's store host drops the connection.
    pub fn ack_lost(&self) -> bool {
        matches!(
            self.injected,
            Some(Injected {
                fault: StoreFault::LoseAck,
                ..
            })
        )
    }
}

/// The one fault injector: applies `call` to `store` under the fault `plan`
/// holds for it. `FaultyStore` and the simulator's store host both go
/// through it, so a fault means the same wherever it is injected.
/// `on_inject` hears of an injected fault before the call is applied (the
/// simulator's trace records it then, ahead of a latency's wait).
pub async fn apply_with_faults(
    store: &dyn Store,
    plan: &FaultPlan,
    call: StoreCall,
    on_inject: impl FnOnce(&Injected),
) -> Faulted {
    let injected_before = plan.injected().len();
    let fault = plan.next(call.op());
    let injected = fault.and_then(|_| plan.injected().get(injected_before).copied());
    if let Some(injected) = &injected {
        on_inject(injected);
    }
    let result = match fault {
        Some(StoreFault::FailBeforeApply) => Err(StoreError::Unavailable(
            "the store refused the operation (injected)".to_owned(),
        )),
        Some(StoreFault::Latency { latency_ms }) => {
            crate::timer::sleep(Duration::from_millis(latency_ms)).await;
            apply(store, call).await
        }
        Some(StoreFault::LoseAck) | None => apply(store, call).await,
    };
    Faulted { result, injected }
}

/// A store wrapped with a fault plan.
#[derive(Clone, Debug)]
pub struct FaultyStore {
    inner: Arc<dyn Store>,
    plan: FaultPlan,
}

impl FaultyStore {
    pub fn new(inner: Arc<dyn Store>, plan: FaultPlan) -> Self {
        Self { inner, plan }
    }

    pub fn plan(&self) -> &FaultPlan {
        &self.plan
    }
}

/// Every operation goes through the plan; `dump` is an inspection, not an
/// operation, and no rule reaches it. A lost acknowledgement is answered as
/// an unknown outcome.
#[async_trait]
impl CallStore for FaultyStore {
    async fn call(&self, call: StoreCall) -> Result<StoreReply, StoreError> {
        if matches!(call, StoreCall::Dump {}) {
            return apply(self.inner.as_ref(), call).await;
        }
        let faulted = apply_with_faults(self.inner.as_ref(), &self.plan, call, |_| {}).await;
        if faulted.ack_lost() {
            faulted.result?;
            return Err(StoreError::Indeterminate(
                "acknowledgement lost (injected)".to_owned(),
            ));
        }
        faulted.result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_hit_the_named_occurrences() {
        let plan = FaultPlan::default();
        plan.add(FaultRule {
            op: StoreOp::Complete,
            fault: StoreFault::LoseAck,
            first: 2,
            count: 2,
        });
        let hits: Vec<_> = (0..5).map(|_| plan.next(StoreOp::Complete)).collect();
        assert_eq!(
            hits,
            vec![
                None,
                Some(StoreFault::LoseAck),
                Some(StoreFault::LoseAck),
                None,
                None
            ]
        );
        assert_eq!(plan.next(StoreOp::CreateJob), None);
        assert_eq!(plan.injected().len(), 2);
        assert_eq!(plan.injected()[0].occurrence, 2);
    }
}
