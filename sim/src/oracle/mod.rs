//! The invariant checker: BRIEF §7's eleven invariants over a run's trace,
//! the store's final state and the providers' ledgers. It is kept apart
//! from the engine on purpose: it shares no code with the decisions it
//! judges, only the data types that describe what happened.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use idem_core::engine::Policy;
use idem_core::provider::server::Execution;
use idem_core::store::StoreDump;

use crate::scenario::Window;
use crate::trace::Trace;

/// The invariants, numbered as in BRIEF §7.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Invariant {
    OneJobPerIntent = 1,
    MismatchRejected = 2,
    OneWinner = 3,
    Guard = 4,
    TimeoutMeansUnknown = 5,
    LosersDiscarded = 6,
    CertifiedFailover = 7,
    OwnerIsolation = 8,
    SideEffects = 9,
    Liveness = 10,
    NothingLost = 11,
}

impl Invariant {
    pub const ALL: &'static [Invariant] = &[
        Invariant::OneJobPerIntent,
        Invariant::MismatchRejected,
        Invariant::OneWinner,
        Invariant::Guard,
        Invariant::TimeoutMeansUnknown,
        Invariant::LosersDiscarded,
        Invariant::CertifiedFailover,
        Invariant::OwnerIsolation,
        Invariant::SideEffects,
        Invariant::Liveness,
        Invariant::NothingLost,
    ];

    /// BRIEF §7's number.
    pub fn number(self) -> u8 {
        self as u8
    }
}

/// One violated invariant, with the trace events that show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    pub invariant: Invariant,
    pub message: String,
    /// `seq`s of the trace events that show the violation, in order.
    pub evidence: Vec<u64>,
}

/// Facts about the world the oracle needs besides the trace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorldFacts {
    /// Which owner each client acts for (client name -> owner).
    pub client_owners: BTreeMap<String, String>,
    /// Providers holding a passed certificate for the whole run.
    pub certified: BTreeSet<String>,
    pub policy: Policy,
    /// Whether a reconciler ran: without one, an unknown attempt waits for
    /// an operator, which counts as a pending action.
    pub reconciler: bool,
}

/// Everything the oracle judges.
#[derive(Clone, Copy, Debug)]
pub struct OracleInput<'a> {
    pub trace: &'a Trace,
    /// The store's final state, read after the run stopped.
    pub dump: &'a StoreDump,
    /// Each provider's ledger (provider name -> executions in order).
    pub executions: &'a BTreeMap<String, Vec<Execution>>,
    pub facts: &'a WorldFacts,
}

/// The oracle's verdict on one run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Judgement {
    /// Empty when every invariant held.
    pub violations: Vec<Violation>,
    /// How often each race window was reached (every window is listed,
    /// zero included).
    pub windows: BTreeMap<Window, u32>,
}

impl Judgement {
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

/// Checks every invariant and counts every window.
pub fn judge(input: OracleInput<'_>) -> Judgement {
    let _ = input;
    todo!("implemented by the oracle")
}
