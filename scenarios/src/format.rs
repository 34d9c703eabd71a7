//! The scenario file format: TOML read through serde into these types,
//! which mirror what a person writes, not what the simulator runs
//! ([`idem_sim::scenario`]). [`crate::validate`] checks them and converts
//! them; nothing here decides a default or a bound.
//!
//! Every field is wrapped in [`Spanned`] so that a semantic error (a bad
//! range, an unknown host) can name the exact `line:col` it comes from, the
//! way the TOML parser names syntax errors. Every table refuses unknown
//! fields: a typo in a scenario file fails loudly instead of being ignored.
//! `scenarios/README.md` is the reference for people; keep the two in step.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde_spanned::Spanned;

use idem_contract::tokenizer::{Encoding, SpecialTokens};
use idem_core::design::Design;
use idem_core::provider::server::ContractMode;
use idem_core::store::faults::StoreOp;
use idem_sim::scenario::{FaultKind, TriggerKind, Window};

/// A spanned optional field.
pub type Field<T> = Option<Spanned<T>>;

/// A whole scenario file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    /// What the scenario shows, for a reviewer.
    pub description: Field<String>,
    /// Race windows the scenario exists to reach (snake_case names).
    pub expect_windows: Field<Vec<Spanned<Window>>>,
    pub policy: Field<PolicyFile>,
    pub timing: Field<TimingFile>,
    pub topology: Field<TopologyFile>,
    pub worker: Field<WorkerFile>,
    pub reconciler: Field<ReconcilerFile>,
    /// Replaces the default providers when present.
    pub providers: Field<Vec<Spanned<ProviderTable>>>,
    #[serde(default)]
    pub clients: Vec<Spanned<ClientFile>>,
    #[serde(default)]
    pub faults: Vec<Spanned<FaultFile>>,
    /// What a saved regression or corpus file was kept for; the simulator
    /// ignores it, `idem regress` checks it.
    pub kept: Field<KeptFile>,
}

/// `[kept]`: the seed a saved file runs under, the design it was found
/// failing under, and the path it was saved for (the race windows the
/// correct design reached under that seed, and a fingerprint of the kinds
/// of its events), so that `idem regress` can tell when a change of code
/// moved the seed off that path.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeptFile {
    pub seed: Spanned<u64>,
    pub design: Field<Design>,
    pub windows: Field<Vec<Spanned<Window>>>,
    pub event_kinds: Field<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyKind {
    Strict,
    Hedged,
}

/// `[policy]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyFile {
    pub kind: Spanned<PolicyKind>,
    /// Only with `kind = "hedged"`.
    pub hedge_after_ms: Field<u64>,
}

/// `[timing]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimingFile {
    pub tick_ms: Field<u64>,
    pub settle_ms: Field<u64>,
    pub latency_ms_min: Field<u64>,
    pub latency_ms_max: Field<u64>,
    pub skip_quiet: Field<bool>,
}

/// `[topology]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopologyFile {
    pub api_replicas: Field<u32>,
    pub workers: Field<u32>,
    pub reconciler: Field<bool>,
    pub store_timeout_ms: Field<u64>,
}

/// `[worker]`: every worker's (and every API replica's attempt runner's)
/// configuration.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerFile {
    pub poll_interval_ms: Field<u64>,
    pub connect_timeout_ms: Field<u64>,
    pub attempt_deadline_ms: Field<u64>,
    pub attempts_max: Field<u32>,
    pub jobs_per_tick_max: Field<u32>,
}

/// `[reconciler]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReconcilerFile {
    pub poll_interval_ms: Field<u64>,
    pub starting_stale_ms: Field<u64>,
    pub running_stale_ms: Field<u64>,
    pub unknown_max_ms: Field<u64>,
    pub attempts_per_pass_max: Field<u32>,
    pub provider_call_timeout_ms: Field<u64>,
}

/// `[[providers]]`: a simulated provider and its behaviour profile.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderTable {
    pub name: Spanned<String>,
    pub model: Field<String>,
    pub certified: Field<bool>,
    pub latency_ms: Field<u64>,
    pub latency_jitter_ms: Field<u64>,
    pub error_per_mille: Field<u32>,
    pub hang: Field<bool>,
    pub stall: Field<bool>,
    pub honour_idempotency_keys: Field<bool>,
    pub supports_status: Field<bool>,
    pub supports_cancel: Field<bool>,
    pub contract: Field<ContractMode>,
    /// One execution in this many answers differently (0: never).
    pub deviate_one_in: Field<u32>,
    /// The certifier's view of the provider's tokenizer.
    pub tokenizer: Field<Encoding>,
    pub context_window_tokens: Field<u32>,
    pub special_tokens: Field<SpecialTokens>,
    pub seed: Field<u64>,
}

/// `[[clients]]`: a user with a bearer token and a script.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientFile {
    pub name: Spanned<String>,
    pub owner: Field<String>,
    pub request_timeout_ms: Field<u64>,
    pub await_outcome: Field<bool>,
    #[serde(default)]
    pub actions: Vec<Spanned<ActionFile>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionKind {
    /// POST /v1/jobs with an idempotency key.
    #[serde(alias = "create")]
    Click,
    /// The backup button: POST /v1/jobs/{id}/attempts.
    Backup,
    /// GET /v1/jobs/{id} of the client's own job.
    Get,
    /// GET another client's job (owner isolation).
    Probe,
}

impl ActionKind {
    pub fn name(self) -> &'static str {
        match self {
            ActionKind::Click => "click",
            ActionKind::Backup => "backup",
            ActionKind::Get => "get",
            ActionKind::Probe => "probe",
        }
    }
}

/// One action of a client's script. One flat table for every kind, so
/// that each field keeps its position; which fields apply to which kind is
/// checked by the validator.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionFile {
    pub action: Spanned<ActionKind>,
    pub key: Spanned<String>,
    pub at_ms: Field<u64>,
    pub jitter_ms: Field<Jitter>,
    /// click: the job's provider; backup: the new attempt's provider.
    pub provider: Field<String>,
    pub fallbacks: Field<Vec<Spanned<String>>>,
    pub params: Field<toml::Value>,
    pub retries: Field<u32>,
    pub retry_after_ms: Field<u64>,
    /// probe: whose job to look at.
    pub of: Field<String>,
}

/// A click's timing noise: `jitter_ms = 40` delays it by 0 to 40 ms;
/// `jitter_ms = [-20, 20]` moves it by -20 to +20 ms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Jitter {
    pub min_ms: i64,
    pub max_ms: i64,
}

impl<'de> Deserialize<'de> for Jitter {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct JitterVisitor;
        impl<'de> Visitor<'de> for JitterVisitor {
            type Value = Jitter;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a jitter in milliseconds (40) or a range of them ([-20, 20])")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Jitter, E> {
                if v < 0 {
                    return Err(E::custom(
                        "a single jitter must not be negative; write a range like [-20, 20]",
                    ));
                }
                Ok(Jitter {
                    min_ms: 0,
                    max_ms: v,
                })
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Jitter, E> {
                let v = i64::try_from(v).map_err(|_| E::custom("jitter out of range"))?;
                self.visit_i64(v)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Jitter, A::Error> {
                let min_ms: i64 = seq
                    .next_element()?
                    .ok_or_else(|| de::Error::custom("a jitter range needs two numbers"))?;
                let max_ms: i64 = seq
                    .next_element()?
                    .ok_or_else(|| de::Error::custom("a jitter range needs two numbers"))?;
                if seq.next_element::<i64>()?.is_some() {
                    return Err(de::Error::custom("a jitter range has exactly two numbers"));
                }
                Ok(Jitter { min_ms, max_ms })
            }
        }
        deserializer.deserialize_any(JitterVisitor)
    }
}

/// `[[faults]]`: one flat table for every kind (see [`ActionFile`]). Which
/// fields each kind takes is [`FaultKind::fields`]; the validator refuses
/// the others.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultFile {
    pub fault: Spanned<FaultKind>,
    /// Fire at a simulated time...
    pub at_ms: Field<u64>,
    /// ...or when the trace records the `nth` event of `kind`.
    pub after: Field<AfterFile>,
    pub a: Field<String>,
    pub b: Field<String>,
    pub host: Field<String>,
    pub provider: Field<String>,
    pub oneway: Field<bool>,
    pub duration_ms: Field<u64>,
    pub latency_ms_max: Field<u64>,
    pub restart_after_ms: Field<u64>,
    pub error_per_mille: Field<u32>,
    /// provider_model_change: the model served from then on.
    pub model: Field<String>,
    pub op: Field<StoreOp>,
    pub nth: Field<u32>,
    pub count: Field<u32>,
    pub latency_ms: Field<u64>,
    /// clock_offset: how far the host's clock reads from true time.
    pub offset_ms: Field<i64>,
    /// clock_drift: microseconds gained per second (lost, if negative).
    pub drift_ppm: Field<i64>,
    /// clock_jump: how far the clock steps.
    pub jump_ms: Field<i64>,
}

/// `after = { kind = "attempt_dispatched", nth = 1 }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AfterFile {
    pub kind: Spanned<TriggerKind>,
    pub nth: Field<u32>,
}

/// Parses the TOML text into the file types, without validating.
pub fn parse(text: &str) -> Result<ScenarioFile, toml::de::Error> {
    toml::from_str(text)
}
