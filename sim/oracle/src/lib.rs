//! idem-oracle, the invariant checker: the eleven invariants of docs/MODEL.md, and a
//! twelfth for clocks, over a run's trace,
//! the store's final state and the providers' ledgers. It is kept apart
//! from the engine on purpose: it shares no code with the decisions it
//! judges, only the data types that describe what happened.
//!
//! Each check restates the rule it enforces instead of importing it from
//! idem-core (the legal attempt moves, the guard, the compare-and-swap), so
//! that a broken state machine in the engine cannot vouch for itself. It
//! depends on idem-model (the vocabulary) and never on idem-core; the one
//! function it calls there is [`idem_model::fingerprint::fingerprint`], a
//! pure function of a JSON value. CI checks the arrow with `cargo tree`.
//!
//! Code map:
//! - [`trace`]: what a run recorded, the evidence (the simulator's recorder
//!   writes it).
//! - [`index`]: the trace, dump and ledgers indexed once.
//! - [`replay`]: the attempt states replayed in trace order.
//! - [`intents`]: 1 one job per intent, 8 owner isolation, 11 nothing
//!   lost (what clients were told).
//! - [`mismatch`]: 2 mismatch rejected, and only a mismatch: from the
//!   bodies users sent and the answers they got, and the store's bindings.
//! - [`completions`]: 3 one winner, 6 losers discarded.
//! - [`attempts`]: 4 guard, 5 timeout means unknown, 7 certified failover.
//! - [`effects`]: 9 side effects (billed work, and executions at once),
//!   10 liveness.
//! - [`waits`]: 12 waits in true time (clock faults).
//! - [`read_back`]: 3, 6 and 10 for a service judged from outside, from
//!   its jobs read back through its API at the end ([`judge_read_backs`]).
//! - `windows`: the race windows ([`Window`]) and their counts.
//! - [`findings`]: the bounded list of violations being collected.
//!
//! Determinism: only ordered collections, no clocks; the same input gives
//! the same judgement, violations in invariant order.

mod attempts;
mod completions;
mod effects;
mod findings;
mod index;
mod intents;
mod mismatch;
mod read_back;
mod replay;
pub mod trace;
mod waits;
mod windows;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use idem_model::dump::StoreDump;
use idem_model::ledger::Execution;
use idem_model::loops::ReconcilerConfig;
use idem_model::policy::Policy;

use crate::trace::Trace;
pub use read_back::{ReadAnswer, ReadBack, judge_read_backs};
pub use windows::{Window, count_from_answers};

/// The invariants, numbered as in docs/MODEL.md; the twelfth says that
/// rules comparing timestamps stay safe when clocks are wrong.
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
    /// The reconciler's waits (stale, overdue) held in true time, whatever
    /// the hosts' clocks read.
    WaitsInTrueTime = 12,
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
        Invariant::WaitsInTrueTime,
    ];

    /// the number in docs/MODEL.md.
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
    /// Providers whose certification before the run passed.
    pub certified: BTreeSet<String>,
    /// What each certified provider said it served when it was certified.
    /// A `provider_model_change` fault to another model makes that
    /// certificate stale from the moment it fires. A certified provider
    /// missing here is taken to be stale after any model change.
    #[serde(default)]
    pub certified_models: BTreeMap<String, String>,
    /// The contract defects each provider's profile declares (its contract
    /// mode, its tokenizer's special-token handling, sampling deviations).
    /// A provider with one must never have passed certification.
    #[serde(default)]
    pub defects: BTreeMap<String, Vec<String>>,
    pub policy: Policy,
    /// Whether a reconciler ran: without one, an unknown attempt waits for
    /// an operator, which counts as a pending action.
    pub reconciler: bool,
    /// The reconciler's waits, to judge them in true time (invariant 12);
    /// `None` leaves that invariant unjudged.
    #[serde(default)]
    pub reconciler_config: Option<ReconcilerConfig>,
    /// The primary provider each create body the users send names, by the
    /// body's fingerprint: how a service judged from outside, with no rows,
    /// tells which provider is a job's primary (invariant 7 from its
    /// ledgers). Empty where the store says it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub primaries: BTreeMap<String, String>,
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
///
/// # Panics
/// If the trace names a client that `facts.client_owners` does not list:
/// the world builder must describe every client it made, and the oracle
/// cannot judge owner isolation without knowing whose client it is.
pub fn judge(input: OracleInput<'_>) -> Judgement {
    let run = index::RunIndex::build(input);
    let mut findings = findings::Findings::default();
    intents::check(&run, &mut findings);
    mismatch::check(&run, &mut findings);
    completions::check(&run, &mut findings);
    attempts::check(&run, &mut findings);
    effects::check(&run, &mut findings);
    waits::check(&run, &mut findings);
    Judgement {
        violations: findings.into_violations(),
        windows: windows::count(&run),
    }
}
