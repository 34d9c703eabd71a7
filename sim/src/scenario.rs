//! The runtime description of a scenario: what the world builder needs.
//! The scenario *file* format (TOML, with line-and-column errors) lives in
//! idem-scenarios and is validated there before it becomes this.
//!
//! Every duration is an integer number of milliseconds of simulated time,
//! every probability an integer per mille, and every list bounded by the
//! `*_MAX` constants below, so that a scenario cannot ask for an unbounded
//! world.

use serde::{Deserialize, Serialize};

use idem_contract::tokenizer::TokenizerProfile;
use idem_core::engine::Policy;
use idem_core::provider::server::Behaviour;
use idem_core::reconciler::ReconcilerConfig;
use idem_core::store::faults::StoreOp;
use idem_core::worker::WorkerConfig;
use idem_model::model::JobRequest;

/// The race windows are the oracle's vocabulary.
pub use idem_oracle::Window;

pub const CLIENTS_MAX: usize = 64;
pub const ACTIONS_PER_CLIENT_MAX: usize = 64;
pub const FAULTS_MAX: usize = 64;
pub const API_REPLICAS_MAX: u32 = 8;
pub const WORKERS_MAX: u32 = 8;
pub const PROVIDERS_MAX: usize = 8;
pub const RETRIES_MAX: u32 = 16;
/// The longest a scenario may run, in simulated milliseconds.
pub const SETTLE_MS_MAX: u64 = 30 * 60 * 1000;
/// The largest clock offset or jump, either way: a day.
pub const CLOCK_OFFSET_MS_MAX: i64 = 24 * 60 * 60 * 1000;
/// The largest clock drift, either way: a clock that runs twice as fast, or
/// stands still.
pub const CLOCK_DRIFT_PPM_MAX: i64 = 1_000_000;

/// Host names, shared by the world builder, fault targets and the trace.
pub mod host {
    pub const STORE: &str = "store";
    pub const RECONCILER: &str = "reconciler";
    /// Where the fault driver's own events are recorded, in both worlds.
    pub const DRIVER: &str = "driver";

    pub fn api(index: u32) -> String {
        format!("api-{index}")
    }

    pub fn worker(index: u32) -> String {
        format!("worker-{index}")
    }

    pub fn provider(name: &str) -> String {
        format!("provider-{name}")
    }

    pub fn client(name: &str) -> String {
        format!("client-{name}")
    }
}

/// A whole scenario.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Scenario {
    pub name: String,
    /// What the scenario shows, for a reviewer.
    pub description: String,
    pub topology: Topology,
    pub policy: Policy,
    pub clients: Vec<ClientSpec>,
    pub faults: Vec<FaultSpec>,
    pub timing: Timing,
    /// Race windows this scenario exists to reach. A sweep fails if one of
    /// them is never reached over its seeds.
    pub expect_windows: Vec<Window>,
}

/// The hosts of the world besides the clients.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Topology {
    /// API replicas behind the clients' seeded load balancing (at least 2).
    pub api_replicas: u32,
    pub workers: u32,
    /// Whether the reconciler host runs.
    pub reconciler: bool,
    pub providers: Vec<ProviderProfile>,
    pub worker: WorkerConfig,
    pub reconciler_config: ReconcilerConfig,
    /// How long an engine waits for one store operation before it treats
    /// the outcome as unknown.
    pub store_timeout_ms: u64,
}

/// One simulated provider.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProviderProfile {
    pub name: String,
    pub model: String,
    pub behaviour: Behaviour,
    /// Whether the world certifies this provider against the shipped
    /// contract before any client clicks. The run decides: a provider whose
    /// behaviour breaks the contract fails its certification whatever this
    /// says, and its certificate is on file as failed.
    pub certified: bool,
    /// What the certifier knows of the provider's tokenizer.
    #[serde(default)]
    pub tokenizer: TokenizerProfile,
}

/// Simulated time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timing {
    /// turmoil's step: how much simulated time one step advances.
    pub tick_ms: u64,
    /// The deadline: the run stops here even if the system is not quiet.
    pub settle_ms: u64,
    /// Message latency on every link, drawn per message from the seed.
    pub latency_ms_min: u64,
    pub latency_ms_max: u64,
    /// Step from one event (a timer's deadline, a message's due time) to
    /// the next instead of one tick at a time (`crate::scheduler`).
    #[serde(default = "skip_quiet_default")]
    pub skip_quiet: bool,
}

fn skip_quiet_default() -> bool {
    true
}

/// A user (or a browser, or a retrying SDK) with a bearer token.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClientSpec {
    pub name: String,
    pub owner: String,
    /// How long the client waits for one HTTP response before it gives up
    /// on it (and retries, if the action allows).
    pub request_timeout_ms: u64,
    pub actions: Vec<Action>,
    /// After its actions, poll each of its jobs until it is terminal (or the
    /// scenario settles).
    pub await_outcome: bool,
}

/// What a client does, in order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    /// Click: POST /v1/jobs with an idempotency key. Retried with the same
    /// key on a timeout, a lost connection or a 5xx.
    Create {
        at_ms: u64,
        /// Extra delay, uniform in `0..=jitter_ms`, from the client's seed.
        jitter_ms: u64,
        key: String,
        request: JobRequest,
        retries: u32,
        retry_after_ms: u64,
    },
    /// The backup button: POST /v1/jobs/{id}/attempts for the job this
    /// client created under `key`.
    Backup {
        at_ms: u64,
        jitter_ms: u64,
        key: String,
        provider: Option<String>,
    },
    /// GET /v1/jobs/{id} for the job this client created under `key`.
    Get { at_ms: u64, key: String },
    /// GET a job id that belongs to another client's `key` (probing owner
    /// isolation: the answer must be 404).
    Probe {
        at_ms: u64,
        other_client: String,
        key: String,
    },
}

impl Action {
    /// When the action is due, and the jitter added to it: the simulated
    /// and the real clients schedule it alike.
    pub fn at_and_jitter_ms(&self) -> (u64, u64) {
        match self {
            Action::Create {
                at_ms, jitter_ms, ..
            }
            | Action::Backup {
                at_ms, jitter_ms, ..
            } => (*at_ms, *jitter_ms),
            Action::Get { at_ms, .. } | Action::Probe { at_ms, .. } => (*at_ms, 0),
        }
    }
}

/// When a fault fires.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "when", rename_all = "snake_case")]
pub enum When {
    /// At a simulated time.
    At { at_ms: u64 },
    /// When the trace records its `nth` (from 1) event of `kind`.
    After { kind: TriggerKind, nth: u32 },
}

/// Trace events a fault can be triggered by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TriggerKind {
    JobCreated,
    AttemptStarted,
    /// An attempt became running: the provider call is dispatched.
    AttemptDispatched,
    AttemptUnknown,
    ProviderExecutionStarted,
    CompletionWon,
}

impl TriggerKind {
    /// Every kind, in declaration order.
    pub const ALL: &[TriggerKind] = &[
        TriggerKind::JobCreated,
        TriggerKind::AttemptStarted,
        TriggerKind::AttemptDispatched,
        TriggerKind::AttemptUnknown,
        TriggerKind::ProviderExecutionStarted,
        TriggerKind::CompletionWon,
    ];
}

/// A fault and when it fires.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FaultSpec {
    pub when: When,
    pub fault: Fault,
}

/// The named faults; every parameter an integer with a bound.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "fault", rename_all = "snake_case")]
pub enum Fault {
    /// Raises the maximum message latency on the link between `a` and `b`
    /// (both ways) for `duration_ms`; each message's latency is drawn from
    /// the seed up to it.
    LinkLatency {
        a: String,
        b: String,
        latency_ms_max: u64,
        duration_ms: u64,
    },
    /// Messages between `a` and `b` are held (not lost) for `duration_ms`,
    /// then released: responses swallowed, then delivered late.
    Hold {
        a: String,
        b: String,
        duration_ms: u64,
    },
    /// Messages from `a` to `b` (and back, unless `oneway`) are dropped for
    /// `duration_ms`.
    Partition {
        a: String,
        b: String,
        oneway: bool,
        duration_ms: u64,
    },
    /// The host's software stops; with `restart_after_ms` it starts again
    /// (the store keeps what it committed; everything else starts afresh).
    Crash {
        host: String,
        restart_after_ms: Option<u64>,
    },
    /// The provider executes (and bills) but stops answering.
    ProviderHang { provider: String, duration_ms: u64 },
    /// The provider's work never finishes until cancelled.
    ProviderStall { provider: String, duration_ms: u64 },
    /// The provider answers with definitive errors this often.
    ProviderError {
        provider: String,
        error_per_mille: u32,
        duration_ms: u64,
    },
    /// The store applies occurrences `nth..nth+count` of `op` and then loses
    /// the acknowledgement.
    StoreLoseAck { op: StoreOp, nth: u32, count: u32 },
    /// The store refuses occurrences of `op` without applying them.
    StoreFailBeforeApply { op: StoreOp, nth: u32, count: u32 },
    /// The provider silently starts serving `model` under the model name
    /// it is asked for, for good: a certificate earned on the old model no
    /// longer describes it.
    ProviderModelChange { provider: String, model: String },
    /// The store applies occurrences of `op` after a delay.
    StoreLatency {
        op: StoreOp,
        nth: u32,
        count: u32,
        latency_ms: u64,
    },
    /// The host's realtime clock reads `offset_ms` away from true time
    /// (behind, if negative); with `duration_ms`, it is then stepped back
    /// to true time. Monotonic time (timers, deadlines) is not affected.
    ClockOffset {
        host: String,
        offset_ms: i64,
        duration_ms: Option<u64>,
    },
    /// The host's realtime clock gains `drift_ppm` microseconds per second
    /// of true time (loses, if negative); with `duration_ms`, the drift
    /// then stops and the clock is stepped back to true time.
    ClockDrift {
        host: String,
        drift_ppm: i64,
        duration_ms: Option<u64>,
    },
    /// The host's realtime clock steps by `jump_ms`, forward or back, and
    /// stays there.
    ClockJump { host: String, jump_ms: i64 },
}

impl Fault {
    /// This fault's kind. An exhaustive match: a new `Fault` variant does
    /// not compile until it has a kind, and with it a name and a field list.
    pub fn kind(&self) -> FaultKind {
        match self {
            Fault::LinkLatency { .. } => FaultKind::LinkLatency,
            Fault::Hold { .. } => FaultKind::Hold,
            Fault::Partition { .. } => FaultKind::Partition,
            Fault::Crash { .. } => FaultKind::Crash,
            Fault::ProviderHang { .. } => FaultKind::ProviderHang,
            Fault::ProviderStall { .. } => FaultKind::ProviderStall,
            Fault::ProviderError { .. } => FaultKind::ProviderError,
            Fault::ProviderModelChange { .. } => FaultKind::ProviderModelChange,
            Fault::StoreLoseAck { .. } => FaultKind::StoreLoseAck,
            Fault::StoreFailBeforeApply { .. } => FaultKind::StoreFailBeforeApply,
            Fault::StoreLatency { .. } => FaultKind::StoreLatency,
            Fault::ClockOffset { .. } => FaultKind::ClockOffset,
            Fault::ClockDrift { .. } => FaultKind::ClockDrift,
            Fault::ClockJump { .. } => FaultKind::ClockJump,
        }
    }
}

/// The fault vocabulary: the one place that names each kind of [`Fault`]
/// and says which fields it takes. The scenario format parses `fault = ...`
/// into it and checks fields against [`FaultKind::fields`], the emitter
/// writes files from it, the trace names fired faults by
/// [`FaultKind::name`], and the fuzzer keys its table of draws by it.
///
/// The declaration order is the order the scenario format documents the
/// kinds in; serde lists the variants in it in its "expected one of"
/// message for an unknown kind, and the fuzzer draws in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    LinkLatency,
    Hold,
    Partition,
    Crash,
    ProviderHang,
    ProviderStall,
    ProviderError,
    ProviderModelChange,
    StoreLoseAck,
    StoreFailBeforeApply,
    StoreLatency,
    ClockOffset,
    ClockDrift,
    ClockJump,
}

impl FaultKind {
    /// Every kind once, in declaration order (a unit test holds this list
    /// to the variants serde knows).
    pub const ALL: &'static [FaultKind] = &[
        FaultKind::LinkLatency,
        FaultKind::Hold,
        FaultKind::Partition,
        FaultKind::Crash,
        FaultKind::ProviderHang,
        FaultKind::ProviderStall,
        FaultKind::ProviderError,
        FaultKind::ProviderModelChange,
        FaultKind::StoreLoseAck,
        FaultKind::StoreFailBeforeApply,
        FaultKind::StoreLatency,
        FaultKind::ClockOffset,
        FaultKind::ClockDrift,
        FaultKind::ClockJump,
    ];

    /// The kind's name: `fault = "..."` in a scenario file, the `fault` tag
    /// of a serialized [`Fault`], and the trace's fault event name (its heal
    /// is `heal_` and this).
    pub const fn name(self) -> &'static str {
        match self {
            FaultKind::LinkLatency => "link_latency",
            FaultKind::Hold => "hold",
            FaultKind::Partition => "partition",
            FaultKind::Crash => "crash",
            FaultKind::ProviderHang => "provider_hang",
            FaultKind::ProviderStall => "provider_stall",
            FaultKind::ProviderError => "provider_error",
            FaultKind::ProviderModelChange => "provider_model_change",
            FaultKind::StoreLoseAck => "store_lose_ack",
            FaultKind::StoreFailBeforeApply => "store_fail_before_apply",
            FaultKind::StoreLatency => "store_latency",
            FaultKind::ClockOffset => "clock_offset",
            FaultKind::ClockDrift => "clock_drift",
            FaultKind::ClockJump => "clock_jump",
        }
    }

    /// The kind whose [`name`](Self::name) is `name`.
    pub fn from_name(name: &str) -> Option<FaultKind> {
        FaultKind::ALL.iter().copied().find(|k| k.name() == name)
    }

    /// The fields a fault of this kind takes, besides `fault` and when it
    /// fires, in the order the format documents (and its errors list) them.
    /// They are the scenario file's keys and the fields of the matching
    /// [`Fault`] variant alike; a test in idem-bench (tests/it/report.rs) holds the two
    /// together.
    pub const fn fields(self) -> &'static [&'static str] {
        match self {
            FaultKind::LinkLatency => &["a", "b", "latency_ms_max", "duration_ms"],
            FaultKind::Hold => &["a", "b", "duration_ms"],
            FaultKind::Partition => &["a", "b", "oneway", "duration_ms"],
            FaultKind::Crash => &["host", "restart_after_ms"],
            FaultKind::ProviderHang | FaultKind::ProviderStall => &["provider", "duration_ms"],
            FaultKind::ProviderError => &["provider", "error_per_mille", "duration_ms"],
            FaultKind::ProviderModelChange => &["provider", "model"],
            FaultKind::StoreLoseAck | FaultKind::StoreFailBeforeApply => &["op", "nth", "count"],
            FaultKind::StoreLatency => &["op", "nth", "count", "latency_ms"],
            FaultKind::ClockOffset => &["host", "offset_ms", "duration_ms"],
            FaultKind::ClockDrift => &["host", "drift_ppm", "duration_ms"],
            FaultKind::ClockJump => &["host", "jump_ms"],
        }
    }
}

impl Default for Topology {
    /// Two API replicas, one worker, a reconciler, and a certified primary
    /// plus an uncertified fallback, answering in 200 ms.
    fn default() -> Self {
        let provider = |name: &str, certified: bool| ProviderProfile {
            name: name.to_owned(),
            model: format!("{name}-model"),
            behaviour: Behaviour {
                latency_ms: 200,
                ..Behaviour::default()
            },
            certified,
            tokenizer: TokenizerProfile::default(),
        };
        Self {
            api_replicas: 2,
            workers: 1,
            reconciler: true,
            providers: vec![provider("primary", true), provider("fallback", false)],
            worker: WorkerConfig {
                poll_interval_ms: 100,
                connect_timeout_ms: 1_000,
                attempt_deadline_ms: 2_000,
                attempts_max: 3,
                jobs_per_tick_max: 16,
                attempts_concurrent_max: 32,
            },
            reconciler_config: ReconcilerConfig {
                poll_interval_ms: 250,
                starting_stale_ms: 3_000,
                running_stale_ms: 6_000,
                unknown_max_ms: 10_000,
                attempts_per_pass_max: 32,
                provider_call_timeout_ms: 2_000,
            },
            store_timeout_ms: 1_000,
        }
    }
}

impl Default for Timing {
    /// 1 ms steps, 1–5 ms per message, settled within two minutes, quiet
    /// time skipped.
    fn default() -> Self {
        Self {
            tick_ms: 1,
            settle_ms: 120_000,
            latency_ms_min: 1,
            latency_ms_max: 5,
            skip_quiet: true,
        }
    }
}

impl ClientSpec {
    /// A client with no actions yet, waiting 1 s per request and awaiting
    /// its jobs' outcomes.
    pub fn new(name: &str, owner: &str) -> Self {
        Self {
            name: name.to_owned(),
            owner: owner.to_owned(),
            request_timeout_ms: 1_000,
            actions: Vec::new(),
            await_outcome: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// The variant names serde knows for `FaultKind`, read from its error
    /// for an unknown one, so that the test needs no hand-made list.
    fn serde_variant_names() -> Vec<String> {
        let error = serde_json::from_str::<FaultKind>("\"no_such_fault\"")
            .expect_err("not a fault kind")
            .to_string();
        let listed = error
            .split_once("expected one of ")
            .map(|(_, rest)| rest)
            .unwrap_or_else(|| panic!("serde lists the variants: {error}"));
        listed
            .split(", ")
            .map(|quoted| quoted.split('`').nth(1).expect("quoted").to_owned())
            .collect()
    }

    #[test]
    fn all_lists_every_kind_once_in_declaration_order() {
        let names: Vec<String> = FaultKind::ALL.iter().map(|k| k.name().to_owned()).collect();
        assert_eq!(names, serde_variant_names());
        let distinct: BTreeSet<FaultKind> = FaultKind::ALL.iter().copied().collect();
        assert_eq!(distinct.len(), FaultKind::ALL.len());
    }

    #[test]
    fn names_round_trip_and_match_serde() {
        for &kind in FaultKind::ALL {
            assert_eq!(FaultKind::from_name(kind.name()), Some(kind));
            assert_eq!(
                serde_json::to_value(kind).expect("serializes"),
                serde_json::Value::String(kind.name().to_owned())
            );
        }
        assert_eq!(FaultKind::from_name("heal_hold"), None);
        assert_eq!(FaultKind::from_name(""), None);
    }

    #[test]
    fn every_kind_takes_distinct_fields_and_none_of_the_reserved() {
        for &kind in FaultKind::ALL {
            let fields: BTreeSet<&str> = kind.fields().iter().copied().collect();
            assert_eq!(fields.len(), kind.fields().len(), "{kind:?}");
            assert!(!fields.is_empty(), "{kind:?}");
            for reserved in ["fault", "at_ms", "after"] {
                assert!(!fields.contains(reserved), "{kind:?} takes {reserved}");
            }
        }
    }

    #[test]
    fn a_fault_serializes_with_its_kinds_name_and_fields() {
        let faults = [
            Fault::Crash {
                host: host::STORE.to_owned(),
                restart_after_ms: None,
            },
            Fault::StoreLatency {
                op: StoreOp::CreateJob,
                nth: 1,
                count: 2,
                latency_ms: 3,
            },
            Fault::ClockJump {
                host: host::RECONCILER.to_owned(),
                jump_ms: -5,
            },
        ];
        for fault in faults {
            let kind = fault.kind();
            let serde_json::Value::Object(mut map) =
                serde_json::to_value(&fault).expect("serializes")
            else {
                panic!("a fault serializes to an object");
            };
            assert_eq!(
                map.remove("fault"),
                Some(serde_json::Value::String(kind.name().to_owned()))
            );
            let mut keys: Vec<&str> = map.keys().map(String::as_str).collect();
            keys.sort_unstable();
            let mut fields = kind.fields().to_vec();
            fields.sort_unstable();
            assert_eq!(keys, fields, "{kind:?}");
        }
    }
}
