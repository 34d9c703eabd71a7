//! Writing a runtime [`Scenario`] back as a scenario file, every field
//! explicit. Used to save what the property test found (a shrunk schedule)
//! under `scenarios/regressions/`, where `idem run` replays it. Reading the
//! text back with [`crate::validate::scenario_from_str`] gives the same
//! scenario; a test holds the two together.

use serde::Serialize;
use serde_json::Value as Json;
use toml::{Table, Value};

use idem_core::engine::Policy;
use idem_core::reconciler::ReconcilerConfig;
use idem_core::worker::WorkerConfig;
use idem_model::model::JobRequest;
use idem_sim::scenario::{
    Action, ClientSpec, Fault, FaultSpec, ProviderProfile, Scenario, Timing, Topology, When,
};

use crate::kept::Kept;

/// Why a scenario cannot be written as a file.
#[derive(Debug, thiserror::Error)]
pub enum EmitError {
    #[error("{what} = {value} does not fit a TOML integer")]
    TooLarge { what: &'static str, value: u64 },
    #[error("request params hold a JSON null, which TOML cannot express")]
    NullParam,
    #[error("cannot write TOML: {0}")]
    Toml(#[from] toml::ser::Error),
}

/// The scenario as file text, headed by `comment` (one `#` line per line).
pub fn to_file(scenario: &Scenario, comment: &str) -> Result<String, EmitError> {
    to_file_kept(scenario, comment, None)
}

/// The scenario as file text with a `[kept]` table: what the file was
/// kept for (its seed, the design it failed under, the path it took).
pub fn to_file_kept(
    scenario: &Scenario,
    comment: &str,
    kept: Option<&Kept>,
) -> Result<String, EmitError> {
    let mut root = Table::new();
    root.insert(
        "description".into(),
        Value::String(scenario.description.clone()),
    );
    root.insert(
        "expect_windows".into(),
        Value::Array(
            scenario
                .expect_windows
                .iter()
                .map(|w| Value::String(name_of(w)))
                .collect(),
        ),
    );
    root.insert("policy".into(), Value::Table(policy(scenario.policy)?));
    root.insert("timing".into(), timing(&scenario.timing)?);
    let topology = &scenario.topology;
    root.insert("topology".into(), topology_table(topology)?);
    root.insert("worker".into(), worker(&topology.worker)?);
    root.insert(
        "reconciler".into(),
        reconciler(&topology.reconciler_config)?,
    );
    root.insert("providers".into(), providers(&topology.providers)?);
    root.insert("clients".into(), clients(&scenario.clients)?);
    root.insert("faults".into(), faults(&scenario.faults)?);
    if let Some(kept) = kept {
        root.insert("kept".into(), kept_table(kept)?);
    }
    let mut text = commented(comment);
    text.push_str(&toml::to_string(&root)?);
    Ok(text)
}

/// `comment` as `#` lines, one per line.
fn commented(comment: &str) -> String {
    let mut text = String::new();
    for line in comment.lines() {
        text.push_str("# ");
        text.push_str(line);
        text.push('\n');
    }
    text
}

/// `[timing]`.
fn timing(timing: &Timing) -> Result<Value, EmitError> {
    Ok(table([
        ("tick_ms", int("tick_ms", timing.tick_ms)?),
        ("settle_ms", int("settle_ms", timing.settle_ms)?),
        (
            "latency_ms_min",
            int("latency_ms_min", timing.latency_ms_min)?,
        ),
        (
            "latency_ms_max",
            int("latency_ms_max", timing.latency_ms_max)?,
        ),
        ("skip_quiet", Value::Boolean(timing.skip_quiet)),
    ]))
}

/// `[topology]`: the hosts besides the clients, and the store timeout.
fn topology_table(topology: &Topology) -> Result<Value, EmitError> {
    Ok(table([
        (
            "api_replicas",
            Value::Integer(i64::from(topology.api_replicas)),
        ),
        ("workers", Value::Integer(i64::from(topology.workers))),
        ("reconciler", Value::Boolean(topology.reconciler)),
        (
            "store_timeout_ms",
            int("store_timeout_ms", topology.store_timeout_ms)?,
        ),
    ]))
}

/// `[worker]`.
fn worker(worker: &WorkerConfig) -> Result<Value, EmitError> {
    Ok(table([
        (
            "poll_interval_ms",
            int("poll_interval_ms", worker.poll_interval_ms)?,
        ),
        (
            "connect_timeout_ms",
            int("connect_timeout_ms", worker.connect_timeout_ms)?,
        ),
        (
            "attempt_deadline_ms",
            int("attempt_deadline_ms", worker.attempt_deadline_ms)?,
        ),
        (
            "attempts_max",
            Value::Integer(i64::from(worker.attempts_max)),
        ),
        (
            "jobs_per_tick_max",
            Value::Integer(i64::from(worker.jobs_per_tick_max)),
        ),
    ]))
}

/// `[reconciler]`.
fn reconciler(reconciler: &ReconcilerConfig) -> Result<Value, EmitError> {
    Ok(table([
        (
            "poll_interval_ms",
            int("poll_interval_ms", reconciler.poll_interval_ms)?,
        ),
        (
            "starting_stale_ms",
            int("starting_stale_ms", reconciler.starting_stale_ms)?,
        ),
        (
            "running_stale_ms",
            int("running_stale_ms", reconciler.running_stale_ms)?,
        ),
        (
            "unknown_max_ms",
            int("unknown_max_ms", reconciler.unknown_max_ms)?,
        ),
        (
            "attempts_per_pass_max",
            Value::Integer(i64::from(reconciler.attempts_per_pass_max)),
        ),
        (
            "provider_call_timeout_ms",
            int(
                "provider_call_timeout_ms",
                reconciler.provider_call_timeout_ms,
            )?,
        ),
    ]))
}

/// `[[providers]]`: each provider's profile, behaviour and tokenizer.
fn providers(providers: &[ProviderProfile]) -> Result<Value, EmitError> {
    let mut out = Vec::with_capacity(providers.len());
    for p in providers {
        let b = &p.behaviour;
        out.push(table([
            ("name", Value::String(p.name.clone())),
            ("model", Value::String(p.model.clone())),
            ("certified", Value::Boolean(p.certified)),
            ("latency_ms", int("latency_ms", b.latency_ms)?),
            (
                "latency_jitter_ms",
                int("latency_jitter_ms", b.latency_jitter_ms)?,
            ),
            (
                "error_per_mille",
                Value::Integer(i64::from(b.error_per_mille)),
            ),
            ("hang", Value::Boolean(b.hang)),
            ("stall", Value::Boolean(b.stall)),
            (
                "honour_idempotency_keys",
                Value::Boolean(b.honour_idempotency_keys),
            ),
            ("supports_status", Value::Boolean(b.supports_status)),
            ("supports_cancel", Value::Boolean(b.supports_cancel)),
            ("contract", Value::String(name_of(&b.contract))),
            (
                "deviate_one_in",
                Value::Integer(i64::from(b.deviate_one_in)),
            ),
            ("tokenizer", Value::String(name_of(&p.tokenizer.encoding))),
            (
                "context_window_tokens",
                Value::Integer(i64::from(p.tokenizer.context_window_tokens)),
            ),
            (
                "special_tokens",
                Value::String(name_of(&p.tokenizer.special_tokens)),
            ),
            ("seed", int("seed", b.seed)?),
        ]));
    }
    Ok(Value::Array(out))
}

/// `[[clients]]`, each with its actions.
fn clients(clients: &[ClientSpec]) -> Result<Value, EmitError> {
    let mut out = Vec::with_capacity(clients.len());
    for c in clients {
        let mut actions = Vec::with_capacity(c.actions.len());
        for a in &c.actions {
            actions.push(action(a)?);
        }
        out.push(table([
            ("name", Value::String(c.name.clone())),
            ("owner", Value::String(c.owner.clone())),
            (
                "request_timeout_ms",
                int("request_timeout_ms", c.request_timeout_ms)?,
            ),
            ("await_outcome", Value::Boolean(c.await_outcome)),
            ("actions", Value::Array(actions)),
        ]));
    }
    Ok(Value::Array(out))
}

/// `[[faults]]`: each fault's fields and when it fires.
fn faults(faults: &[FaultSpec]) -> Result<Value, EmitError> {
    let mut out = Vec::with_capacity(faults.len());
    for f in faults {
        let mut entry = fault(&f.fault)?;
        match f.when {
            When::At { at_ms } => {
                entry.insert("at_ms".into(), int("at_ms", at_ms)?);
            }
            When::After { kind, nth } => {
                entry.insert(
                    "after".into(),
                    table([
                        ("kind", Value::String(name_of(&kind))),
                        ("nth", Value::Integer(i64::from(nth))),
                    ]),
                );
            }
        }
        out.push(Value::Table(entry));
    }
    Ok(Value::Array(out))
}

/// `[kept]`: the seed, the design, and the path if one was recorded.
fn kept_table(kept: &Kept) -> Result<Value, EmitError> {
    let mut t = Table::new();
    t.insert("seed".into(), int("seed", kept.seed)?);
    t.insert(
        "design".into(),
        Value::String(kept.design.name().to_owned()),
    );
    if let Some(path) = &kept.path {
        t.insert(
            "windows".into(),
            Value::Array(
                path.windows
                    .iter()
                    .map(|w| Value::String(name_of(w)))
                    .collect(),
            ),
        );
        t.insert(
            "event_kinds".into(),
            Value::String(path.event_kinds.clone()),
        );
    }
    Ok(Value::Table(t))
}

fn policy(policy: Policy) -> Result<Table, EmitError> {
    Ok(match policy {
        Policy::Strict => [("kind".to_owned(), Value::String("strict".into()))]
            .into_iter()
            .collect(),
        Policy::Hedged { hedge_after_ms } => [
            ("kind".to_owned(), Value::String("hedged".into())),
            (
                "hedge_after_ms".to_owned(),
                int("hedge_after_ms", hedge_after_ms)?,
            ),
        ]
        .into_iter()
        .collect(),
    })
}

fn action(action: &Action) -> Result<Value, EmitError> {
    let (name, key, at_ms) = match action {
        Action::Create { key, at_ms, .. } => ("click", key, at_ms),
        Action::Backup { key, at_ms, .. } => ("backup", key, at_ms),
        Action::Get { key, at_ms } => ("get", key, at_ms),
        Action::Probe { key, at_ms, .. } => ("probe", key, at_ms),
    };
    let mut t = Table::new();
    t.insert("action".into(), Value::String(name.into()));
    t.insert("key".into(), Value::String(key.clone()));
    t.insert("at_ms".into(), int("at_ms", *at_ms)?);
    match action {
        Action::Create {
            jitter_ms,
            request,
            retries,
            retry_after_ms,
            ..
        } => {
            t.insert("jitter_ms".into(), int("jitter_ms", *jitter_ms)?);
            click_request(&mut t, request)?;
            t.insert("retries".into(), Value::Integer(i64::from(*retries)));
            t.insert(
                "retry_after_ms".into(),
                int("retry_after_ms", *retry_after_ms)?,
            );
        }
        Action::Backup {
            jitter_ms,
            provider,
            ..
        } => {
            t.insert("jitter_ms".into(), int("jitter_ms", *jitter_ms)?);
            if let Some(provider) = provider {
                t.insert("provider".into(), Value::String(provider.clone()));
            }
        }
        Action::Get { .. } => {}
        Action::Probe { other_client, .. } => {
            t.insert("of".into(), Value::String(other_client.clone()));
        }
    }
    Ok(Value::Table(t))
}

/// A click's request: its provider, fallbacks and parameters.
fn click_request(t: &mut Table, request: &JobRequest) -> Result<(), EmitError> {
    t.insert("provider".into(), Value::String(request.provider.clone()));
    t.insert(
        "fallbacks".into(),
        Value::Array(
            request
                .fallbacks
                .iter()
                .cloned()
                .map(Value::String)
                .collect(),
        ),
    );
    t.insert("params".into(), json_to_toml(&request.params)?);
    Ok(())
}

/// One fault as a file's table, without when it fires: `fault` is the
/// kind's name and the rest are the kind's fields, read from the fault's
/// serialized form (whose field names are the file's, a test holds them
/// together). An absent optional field is left out.
fn fault(fault: &Fault) -> Result<Table, EmitError> {
    let kind = fault.kind();
    let mut t = Table::new();
    t.insert("fault".into(), Value::String(kind.name().to_owned()));
    let serialized = serde_json::to_value(fault).expect("faults serialize");
    for &field in kind.fields() {
        match serialized.get(field) {
            None | Some(Json::Null) => {}
            Some(Json::Number(n)) if n.as_i64().is_none() && n.as_u64().is_some() => {
                let value = n.as_u64().expect("checked in the guard");
                return Err(EmitError::TooLarge { what: field, value });
            }
            Some(value) => {
                t.insert(field.to_owned(), json_to_toml(value)?);
            }
        }
    }
    Ok(t)
}

fn table<const N: usize>(entries: [(&str, Value); N]) -> Value {
    Value::Table(
        entries
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
    )
}

fn int(what: &'static str, value: u64) -> Result<Value, EmitError> {
    i64::try_from(value)
        .map(Value::Integer)
        .map_err(|_| EmitError::TooLarge { what, value })
}

/// The name serde gives a unit enum value (snake_case throughout).
fn name_of<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(Json::String(name)) => name,
        other => panic!("a unit enum serializes to a string, not {other:?}"),
    }
}

fn json_to_toml(value: &Json) -> Result<Value, EmitError> {
    Ok(match value {
        Json::Null => return Err(EmitError::NullParam),
        Json::Bool(b) => Value::Boolean(*b),
        Json::Number(n) => match n.as_i64() {
            Some(i) => Value::Integer(i),
            None => Value::Float(n.as_f64().unwrap_or_default()),
        },
        Json::String(s) => Value::String(s.clone()),
        Json::Array(items) => {
            Value::Array(items.iter().map(json_to_toml).collect::<Result<_, _>>()?)
        }
        Json::Object(map) => Value::Table(
            map.iter()
                .map(|(k, v)| Ok((k.clone(), json_to_toml(v)?)))
                .collect::<Result<_, EmitError>>()?,
        ),
    })
}
