//! The provider's state: its behaviour profile, the ledger of executions,
//! and admission (execute, replay, or refuse when the ledger is full).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use idem_model::ledger::{Execution, ExecutionOutcome};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::watch;

use super::content::{ContractMode, content_for};

/// The most executions the ledger keeps; past it, new work is refused with a
/// definitive 503 rather than letting memory grow without bound.
pub const EXECUTIONS_MAX: usize = 10_000;

/// How the provider behaves. Changeable while the server runs
/// ([`ProviderServer::set_behaviour`]), which is how faults are injected.
/// Missing fields take their defaults, unknown fields are refused (a typo in
/// a scenario file should fail loudly).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Behaviour {
    /// Time from receiving a request to finishing its work.
    pub latency_ms: u64,
    /// Extra latency, uniform in `0..=latency_jitter_ms`, drawn from the
    /// seeded generator.
    pub latency_jitter_ms: u64,
    /// Chance, per thousand requests, of a definitive server error: the work
    /// is not done and not billed, and the answer says so.
    pub error_per_mille: u32,
    /// The work is done and billed, but no chat-completion answer is ever
    /// sent (status lookup still shows it). Checked when the answer is due.
    pub hang: bool,
    /// The work never finishes: the execution stays running until cancelled.
    pub stall: bool,
    /// A repeated `Idempotency-Key` replays the first execution (or waits for
    /// it) instead of executing and billing again.
    pub honour_idempotency_keys: bool,
    /// Whether `GET /v1/executions/{key}` is offered (else 501).
    pub supports_status: bool,
    /// Whether `POST /v1/executions/{key}/cancel` is offered (else 501).
    pub supports_cancel: bool,
    pub contract: ContractMode,
    /// One execution in this many (the ledger's `seq` a multiple of it)
    /// answers differently, though the temperature is low: another
    /// language. 0: never.
    pub deviate_one_in: u32,
    /// The model really served, whatever is asked for: reported in answers
    /// and as the model object's `root`. `None`: the model asked for. A
    /// provider that silently switches models changes this.
    pub served_model: Option<String>,
    /// Seeds the generator behind jitter and errors. Setting a behaviour with
    /// a different seed restarts the generator from it.
    pub seed: u64,
}

impl Default for Behaviour {
    fn default() -> Self {
        Self {
            latency_ms: 0,
            latency_jitter_ms: 0,
            error_per_mille: 0,
            hang: false,
            stall: false,
            honour_idempotency_keys: true,
            supports_status: true,
            supports_cancel: true,
            contract: ContractMode::Valid,
            deviate_one_in: 0,
            served_model: None,
            seed: 0,
        }
    }
}

/// A ledger entry and what its waiters need.
pub(super) struct Record {
    pub(super) execution: Execution,
    /// The content text as produced, answered verbatim.
    pub(super) content: String,
    /// The model that ran it, named in every answer about it.
    pub(super) model: String,
    /// Lets replays of a running execution wait for it to finish.
    outcome: watch::Sender<ExecutionOutcome>,
}

/// Called with an execution each time it enters the ledger or finishes:
/// how the simulator's trace sees every execution, billed or not.
pub type ExecutionObserver = Arc<dyn Fn(&Execution) + Send + Sync>;

pub(super) struct Ledger {
    pub(super) records: Vec<Record>,
    observer: Option<ExecutionObserver>,
    /// The latest record for each key, as an index into `records`.
    latest_by_key: BTreeMap<String, usize>,
    records_max: usize,
}

impl Ledger {
    /// Enters an execution of `key`: `ran` is the model that runs it, and
    /// `asked` the model the request named (`None`: no request, a
    /// tombstone).
    pub(super) fn push(
        &mut self,
        key: &str,
        job_id: Option<String>,
        outcome: ExecutionOutcome,
        content: String,
        (asked, ran): (Option<&str>, &str),
    ) -> usize {
        assert!(
            self.records.len() < self.records_max,
            "checked by the caller"
        );
        let index = self.records.len();
        self.records.push(Record {
            execution: Execution {
                key: key.to_owned(),
                job_id,
                seq: index as u64 + 1,
                billed: false,
                outcome,
                output: None,
                served_model: asked.filter(|asked| *asked != ran).map(|_| ran.to_owned()),
            },
            content,
            model: ran.to_owned(),
            outcome: watch::Sender::new(outcome),
        });
        self.latest_by_key.insert(key.to_owned(), index);
        self.notify(index);
        index
    }

    pub(super) fn is_full(&self) -> bool {
        self.records.len() >= self.records_max
    }

    pub(super) fn latest(&self, key: &str) -> Option<usize> {
        self.latest_by_key.get(key).copied()
    }

    /// Moves a running execution to `outcome`; false if it had already
    /// left running (cancelled meanwhile).
    pub(super) fn finish(&mut self, index: usize, outcome: ExecutionOutcome) -> bool {
        assert_ne!(outcome, ExecutionOutcome::Running);
        let record = &mut self.records[index];
        if record.execution.outcome != ExecutionOutcome::Running {
            return false;
        }
        record.execution.outcome = outcome;
        if outcome == ExecutionOutcome::Succeeded {
            record.execution.billed = true;
            record.execution.output = Some(
                serde_json::from_str(&record.content)
                    .unwrap_or_else(|_| Value::String(record.content.clone())),
            );
        }
        record.outcome.send_replace(outcome);
        self.notify(index);
        true
    }

    fn notify(&self, index: usize) {
        if let Some(observer) = &self.observer {
            observer(&self.records[index].execution);
        }
    }

    /// The `seq` the next entry will get.
    fn next_seq(&self) -> u64 {
        self.records.len() as u64 + 1
    }
}

/// One of a provider's random choices, made per execution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// Extra latency, in whole milliseconds, up to `max_ms`.
    JitterMs { max_ms: u64 },
    /// A roll in 0..1000: under the error rate, the execution fails.
    ErrorRoll,
}

impl Choice {
    /// The provider's own way to make the choice from its generator.
    pub fn draw(self, rng: &mut ChaCha8Rng) -> u64 {
        match self {
            Choice::JitterMs { max_ms } => rng.random_range(0..=max_ms),
            // Drawn as a u32, as it always was: a u64 range would take
            // other bits of the stream and change every seed's run.
            Choice::ErrorRoll => u64::from(rng.random_range(0..1000_u32)),
        }
    }
}

/// Makes a provider's random choices in its place. The simulator's
/// decision log sits here, so that `idem explain` can keep or redraw each
/// choice; without one, the provider draws from its own generator.
pub trait Chooser: Send + Sync {
    /// Makes `choice` for `provider`; `rng` is the provider's generator,
    /// for a chooser that draws as the provider would.
    fn choose(&self, provider: &str, choice: Choice, rng: &mut ChaCha8Rng) -> u64;
}

pub(super) struct Shared {
    /// Names the provider in its outputs, so that two providers' answers
    /// to the same request differ.
    name: String,
    pub(super) behaviour: Behaviour,
    rng: ChaCha8Rng,
    chooser: Option<Arc<dyn Chooser>>,
    pub(super) ledger: Ledger,
    /// The bearer token every request must carry, as a real provider's API
    /// key: `None` lets every request in.
    pub(super) api_key: Option<String>,
}

impl Shared {
    fn choose(&mut self, choice: Choice) -> u64 {
        match &self.chooser {
            Some(chooser) => chooser.choose(&self.name, choice, &mut self.rng),
            None => choice.draw(&mut self.rng),
        }
    }
}

/// A handle on one simulated provider: its behaviour and its ledger. Cheap
/// to clone; clones share everything.
#[derive(Clone)]
pub struct ProviderServer {
    shared: Arc<Mutex<Shared>>,
}

impl fmt::Debug for ProviderServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shared = self.lock();
        f.debug_struct("ProviderServer")
            .field("behaviour", &shared.behaviour)
            .field("executions", &shared.ledger.records.len())
            .finish_non_exhaustive()
    }
}

impl Default for ProviderServer {
    fn default() -> Self {
        Self::new(Behaviour::default())
    }
}

/// What admitting a chat completion decided, under the lock.
pub(super) enum Admission {
    /// Honoured key: answer with the execution at this index once it finishes.
    Replay(usize, watch::Receiver<ExecutionOutcome>),
    /// New execution at this index.
    Execute {
        index: usize,
        delay_ms: u64,
        fails: bool,
        stalls: bool,
        outcome: watch::Receiver<ExecutionOutcome>,
    },
    LedgerFull,
}

impl ProviderServer {
    pub fn new(behaviour: Behaviour) -> Self {
        Self::with_executions_max(behaviour, EXECUTIONS_MAX)
    }

    /// A server whose outputs carry `name` (outputs of different providers,
    /// and of different executions, are then all distinct).
    pub fn named(name: &str, behaviour: Behaviour) -> Self {
        let server = Self::new(behaviour);
        name.clone_into(&mut server.lock().name);
        server
    }

    /// Refuses, with 401 and nothing executed, every request that does not
    /// carry `Authorization: Bearer <api_key>`: how a test shows that a
    /// client sends the key it was configured with.
    pub fn require_api_key(&self, api_key: &str) {
        self.lock().api_key = Some(api_key.to_owned());
    }

    /// Installs the observer that sees every ledger change.
    /// Hands the provider's random choices to `chooser`.
    pub fn set_chooser(&self, chooser: Arc<dyn Chooser>) {
        self.lock().chooser = Some(chooser);
    }

    pub fn set_observer(&self, observer: ExecutionObserver) {
        self.lock().ledger.observer = Some(observer);
    }

    /// A server whose ledger holds at most `executions_max` entries.
    pub fn with_executions_max(behaviour: Behaviour, executions_max: usize) -> Self {
        assert!(
            executions_max > 0,
            "a provider must be able to execute something"
        );
        Self {
            shared: Arc::new(Mutex::new(Shared {
                name: "provider".to_owned(),
                rng: ChaCha8Rng::seed_from_u64(behaviour.seed),
                chooser: None,
                behaviour,
                ledger: Ledger {
                    records: Vec::new(),
                    observer: None,
                    latest_by_key: BTreeMap::new(),
                    records_max: executions_max,
                },
                api_key: None,
            })),
        }
    }

    /// The lock is never held across an await, and no code panics while
    /// holding it except on a broken invariant, after which the ledger is
    /// still the best record there is.
    pub(super) fn lock(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn behaviour(&self) -> Behaviour {
        self.lock().behaviour.clone()
    }

    /// Changes the behaviour for requests from now on. Executions already
    /// admitted keep the latency, error and stall they were given; `hang` is
    /// read when an answer is due, so it also swallows answers in progress.
    pub fn set_behaviour(&self, behaviour: Behaviour) {
        let mut shared = self.lock();
        if behaviour.seed != shared.behaviour.seed {
            shared.rng = ChaCha8Rng::seed_from_u64(behaviour.seed);
        }
        shared.behaviour = behaviour;
    }

    /// The ledger, in the order entries were made.
    pub fn executions(&self) -> Vec<Execution> {
        self.lock()
            .ledger
            .records
            .iter()
            .map(|record| record.execution.clone())
            .collect()
    }

    /// How many executions were done and charged for.
    pub fn billed_count(&self) -> usize {
        self.lock()
            .ledger
            .records
            .iter()
            .filter(|record| record.execution.billed)
            .count()
    }

    /// The latest execution under `key`.
    pub fn execution(&self, key: &str) -> Option<Execution> {
        let shared = self.lock();
        shared
            .ledger
            .latest(key)
            .map(|index| shared.ledger.records[index].execution.clone())
    }

    /// Admits a chat request under `key` for `model`: a replay of the
    /// key's execution, or a new one, run by the model served now.
    pub(super) fn admit(
        &self,
        key: &str,
        job_id: Option<String>,
        model: &str,
        user_content: &str,
    ) -> Admission {
        let mut shared = self.lock();
        let behaviour = shared.behaviour.clone();
        if behaviour.honour_idempotency_keys
            && let Some(index) = shared.ledger.latest(key)
        {
            let record = &shared.ledger.records[index];
            // A definitive failure did nothing, so a retry under the same
            // key is new work; everything else is replayed.
            if record.execution.outcome != ExecutionOutcome::Failed {
                return Admission::Replay(index, record.outcome.subscribe());
            }
        }
        if shared.ledger.is_full() {
            return Admission::LedgerFull;
        }
        // Both draws happen for every execution, so that the sequence of
        // draws depends only on the seed and the order of requests.
        let jitter_ms = shared.choose(Choice::JitterMs {
            max_ms: behaviour.latency_jitter_ms,
        });
        let fails = shared.choose(Choice::ErrorRoll) < u64::from(behaviour.error_per_mille);
        let seq = shared.ledger.next_seq();
        let tag = format!("{} #{seq}", shared.name);
        let deviates =
            behaviour.deviate_one_in > 0 && seq.is_multiple_of(u64::from(behaviour.deviate_one_in));
        let content = content_for(behaviour.contract, &tag, user_content, deviates);
        let ran = behaviour.served_model.as_deref().unwrap_or(model);
        let index = shared.ledger.push(
            key,
            job_id,
            ExecutionOutcome::Running,
            content,
            (Some(model), ran),
        );
        Admission::Execute {
            outcome: shared.ledger.records[index].outcome.subscribe(),
            index,
            delay_ms: behaviour.latency_ms.saturating_add(jitter_ms),
            fails,
            stalls: behaviour.stall,
        }
    }

    pub(super) fn finish(&self, index: usize, outcome: ExecutionOutcome) {
        self.lock().ledger.finish(index, outcome);
    }
}

/// Waits until the execution has left running.
pub(super) async fn finished(mut outcome: watch::Receiver<ExecutionOutcome>) {
    // The sender lives in the ledger as long as any handle on the server, and
    // this task holds one, so the wait cannot fail.
    let waited = outcome
        .wait_for(|outcome| *outcome != ExecutionOutcome::Running)
        .await;
    assert!(waited.is_ok(), "the ledger outlives its waiters");
}
