//! Black-box targets (`idem real SCENARIO --target 'COMMAND'`): anyone's
//! service, in any language, in place of idem's processes, as long as it
//! speaks the contract of `docs/TARGET.md`.
//!
//! Each API replica of the scenario's topology is one instance of
//! COMMAND, run by `sh` with `{port}` (where it must listen, on
//! 127.0.0.1) and `{config}` (the path of a JSON file, [`TargetConfig`])
//! replaced. The instances share nothing but the database the config
//! names; their background work (calling providers, recovering) is their
//! own business, so the scenario's workers and reconciler have no process
//! here, and a fault naming one is refused. Every instance reaches the
//! database and each provider over a link of its own, as idem's processes
//! do, and is ready when `GET /healthz` answers 200.
//!
//! Nothing is left behind: COMMAND runs in a process group with a watcher
//! that kills the whole group when the harness's pipe to it ends, which
//! the kernel ends when the harness is gone, even after SIGKILL.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;

use serde::{Deserialize, Serialize};

use idem_core::engine::Policy;
use idem_sim::scenario::{Fault, Scenario, TriggerKind, When, host};
use idem_sim::world::client_token;

use super::procs::{ProcessSpec, Readiness};

/// The JSON file `{config}` names.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetConfig {
    /// Where to listen: `127.0.0.1:{port}`.
    pub listen: String,
    /// A fresh, empty PostgreSQL database of the run's own: the service
    /// makes its own tables there.
    pub database_url: String,
    /// Each bearer token the clients send, and the owner it stands for.
    pub tokens: BTreeMap<String, String>,
    /// Each provider's name and its base URL (`POST {url}/v1/chat/completions`).
    pub providers: BTreeMap<String, String>,
    /// Each provider's name and the model to ask it for.
    pub models: BTreeMap<String, String>,
    /// The providers whose contract certification passed before the run,
    /// each with the model it was certified on: work may leave a job's
    /// primary only for one of these, and only while it answers with that
    /// model (the answer's `model`).
    pub certified: BTreeMap<String, String>,
    /// How long one provider call may take before its outcome is unknown.
    pub attempt_deadline_ms: u64,
    /// Attempts per job, retries and failovers included.
    pub attempts_max: u32,
    /// Whether attempts of one job may overlap: `{"kind": "strict"}`, or
    /// `{"kind": "hedged", "hedge_after_ms": N}` (a second attempt on a
    /// certified fallback once the first is silent that long).
    pub policy: Policy,
}

impl TargetConfig {
    /// The configuration of one instance; `certified`: each certified
    /// provider and its model (`idem_oracle::WorldFacts::certified_models`).
    pub fn new(
        scenario: &Scenario,
        port: u16,
        database_url: String,
        providers: &[(String, String, SocketAddr)],
        certified: &BTreeMap<String, String>,
    ) -> Self {
        Self {
            listen: format!("127.0.0.1:{port}"),
            database_url,
            tokens: scenario
                .clients
                .iter()
                .map(|c| (client_token(&c.name), c.owner.clone()))
                .collect(),
            providers: providers
                .iter()
                .map(|(name, _, link)| (name.clone(), format!("http://{link}")))
                .collect(),
            models: providers
                .iter()
                .map(|(name, model, _)| (name.clone(), model.clone()))
                .collect(),
            certified: certified.clone(),
            attempt_deadline_ms: scenario.topology.worker.attempt_deadline_ms,
            attempts_max: scenario.topology.worker.attempts_max,
            policy: scenario.policy,
        }
    }
}

/// The name a scenario file gives `kind` (`job_created`).
pub fn trigger_name(kind: TriggerKind) -> String {
    match serde_json::to_value(kind) {
        Ok(serde_json::Value::String(name)) => name,
        other => panic!("a trigger kind serializes to its name, not {other:?}"),
    }
}

/// `command` with `{port}` and `{config}` replaced.
pub fn expand(command: &str, port: u16, config: &Path) -> String {
    command
        .replace("{port}", &port.to_string())
        .replace("{config}", &shell_quote(&config.display().to_string()))
}

fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// The shell script that runs `command` in its process group, with a
/// watcher that kills the group once the harness's pipe (the script's
/// stdin, kept as fd 3: an asynchronous list's stdin is /dev/null) ends.
/// The command runs in the foreground, so the script ends when it does
/// (with its status, the watcher killed): a target that dies at start is
/// seen at once, not after the whole wait for it to be ready.
fn script(command: &str) -> String {
    format!(
        "exec 3<&0\n( cat >/dev/null <&3; kill -KILL 0 ) &\nwatcher=$!\n( {command}\n) </dev/null\nstatus=$?\nkill -KILL \"$watcher\" 2>/dev/null\nexit \"$status\"\n"
    )
}

/// How to start the instance that is `host`, listening on `port`.
pub fn process(host: &str, command: &str, port: u16, config: &Path, log: &Path) -> ProcessSpec {
    ProcessSpec {
        host: host.to_owned(),
        program: "sh".into(),
        args: vec!["-c".to_owned(), script(&expand(command, port, config))],
        log: log.to_owned(),
        ready: Readiness::Healthz(SocketAddr::from(([127, 0, 0, 1], port))),
        group: true,
    }
}

/// Whether `name` is a host a target has no process for.
fn processless(name: &str) -> bool {
    name.starts_with("worker-") || name == host::RECONCILER
}

/// Whether a target shows the `kind` of event a fault may wait for: a
/// create answered as a new job is its `job_created`
/// ([`super::answers`]), and the providers' ledgers show an execution
/// starting; the attempts' moves and the compare-and-swap are events of
/// idem's store history, which a target's own store does not give.
pub fn shows(kind: TriggerKind) -> bool {
    match kind {
        TriggerKind::JobCreated | TriggerKind::ProviderExecutionStarted => true,
        TriggerKind::AttemptStarted
        | TriggerKind::AttemptDispatched
        | TriggerKind::AttemptUnknown
        | TriggerKind::CompletionWon => false,
    }
}

/// The first fault of `scenario` a black-box target cannot take, and why.
pub fn refusal(scenario: &Scenario) -> Option<String> {
    scenario.faults.iter().find_map(|spec| {
        let kind = spec.fault.kind();
        if let When::After { kind: trigger, .. } = spec.when
            && !shows(trigger)
        {
            return Some(format!(
                "fault {} after {} with --target: that event is one of idem's store history \
                 (an attempt's move or a completion), which a black-box target's own store \
                 does not show; a target's faults may wait for job_created (a create answered \
                 as a new job) or provider_execution_started (the providers' ledgers)",
                kind.name(),
                trigger_name(trigger)
            ));
        }
        let why = match &spec.fault {
            Fault::StoreLoseAck { .. }
            | Fault::StoreFailBeforeApply { .. }
            | Fault::StoreLatency { .. } => Some(
                "a store fault names one of idem's store operations, recognised by idem's SQL; \
                 a black-box target's statements are its own"
                    .to_owned(),
            ),
            Fault::ClockOffset { .. } | Fault::ClockDrift { .. } | Fault::ClockJump { .. } => Some(
                "a black-box target's clock cannot be set from outside without root \
                     (idem's own processes take theirs over a bench-only pipe)"
                    .to_owned(),
            ),
            Fault::Crash { host, .. } if processless(host) => Some(format!(
                "a black-box target runs as its API replicas only; {host} is no process of it"
            )),
            Fault::LinkLatency { a, b, .. }
            | Fault::Hold { a, b, .. }
            | Fault::Partition { a, b, .. }
                if processless(a) || processless(b) =>
            {
                let named = if processless(a) { a } else { b };
                Some(format!(
                    "a black-box target runs as its API replicas only; {named} is no process of it"
                ))
            }
            _ => None,
        }?;
        Some(format!("fault {} with --target: {why}", kind.name()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_gets_its_port_and_config_and_a_watcher() {
        let command = expand(
            "python3 svc.py --port {port} --config {config}",
            4100,
            Path::new("/tmp/a b/c.json"),
        );
        assert_eq!(
            command,
            "python3 svc.py --port 4100 --config '/tmp/a b/c.json'"
        );
        let script = script(&command);
        assert!(script.contains("( python3 svc.py"), "{script}");
        assert!(script.contains("kill -KILL 0"), "{script}");
    }

    #[test]
    fn the_config_carries_the_scenario_s_settings() {
        let scenario = idem_scenarios::load("out-of-order-completion")
            .expect("catalogue")
            .scenario;
        let link = SocketAddr::from(([127, 0, 0, 1], 9));
        let providers = [("fallback".to_owned(), "m-f".to_owned(), link)];
        let certified = BTreeMap::from([("fallback".to_owned(), "m-f".to_owned())]);
        let config = TargetConfig::new(&scenario, 1, "postgres://x".into(), &providers, &certified);
        let json = serde_json::to_value(&config).expect("serializes");
        assert_eq!(json["certified"], serde_json::json!({"fallback": "m-f"}));
        assert_eq!(
            json["policy"],
            serde_json::json!({"kind": "hedged", "hedge_after_ms": 500})
        );
        assert_eq!(
            json["attempt_deadline_ms"],
            scenario.topology.worker.attempt_deadline_ms
        );
        assert_eq!(json["attempts_max"], scenario.topology.worker.attempts_max);
    }

    #[test]
    fn faults_a_target_cannot_take_are_refused_by_name() {
        let double_click = idem_scenarios::load("double-click")
            .expect("catalogue")
            .scenario;
        assert_eq!(refusal(&double_click), None);
        let lost_ack = idem_scenarios::load("lost-ack-on-commit")
            .expect("catalogue")
            .scenario;
        let why = refusal(&lost_ack).expect("refused");
        assert!(
            why.starts_with("fault store_lose_ack with --target"),
            "{why}"
        );
        let crash = idem_scenarios::load("worker-crash-mid-attempt")
            .expect("catalogue")
            .scenario;
        let why = refusal(&crash).expect("refused");
        assert!(why.contains("worker-1 is no process"), "{why}");
        for name in ["lost-response-retry", "store-restart"] {
            let scenario = idem_scenarios::load(name).expect("catalogue").scenario;
            assert_eq!(refusal(&scenario), None, "{name}: job_created shows");
        }
        let mut dispatched = double_click;
        dispatched.faults = crash.faults.clone();
        dispatched.faults[0].fault = Fault::Crash {
            host: host::api(1),
            restart_after_ms: None,
        };
        dispatched.faults[0].when = When::After {
            kind: TriggerKind::AttemptDispatched,
            nth: 1,
        };
        let why = refusal(&dispatched).expect("refused");
        assert!(
            why.starts_with("fault crash after attempt_dispatched with --target"),
            "{why}"
        );
    }
}
