//! Validation: from the file types of [`crate::format`] to the simulator's
//! [`Scenario`], or to every error, each with its position.
//!
//! Defaults come from the simulator's own `Default` impls (`Topology`,
//! `Timing`, `ClientSpec::new`, `Policy`), so a small file is enough and a
//! default changed there changes here. Bounds come from its `*_MAX`
//! constants. The validator collects errors instead of stopping at the
//! first, so that one edit-and-run cycle shows everything wrong with a file.
//!
//! Determinism: the result depends only on the text. The only maps are
//! ordered, and nothing reads a clock or the environment.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Display;
use std::ops::Range;

use serde_json::Value;
use serde_spanned::Spanned;

use idem_core::certify::TokenizerProfile;
use idem_core::design::Design;
use idem_core::engine::Policy;
use idem_core::model::{IDEMPOTENCY_KEY_LEN_MAX, JobRequest};
use idem_core::provider::server::Behaviour;
use idem_sim::scenario::{
    ACTIONS_PER_CLIENT_MAX, API_REPLICAS_MAX, Action, CLIENTS_MAX, CLOCK_DRIFT_PPM_MAX,
    CLOCK_OFFSET_MS_MAX, ClientSpec, FAULTS_MAX, Fault, FaultKind, FaultSpec, PROVIDERS_MAX,
    ProviderProfile, RETRIES_MAX, SETTLE_MS_MAX, Scenario, Timing, Topology, WORKERS_MAX, When,
    Window, host,
};

use crate::error::{ScenarioError, ScenarioErrors};
use crate::format::{
    ActionFile, ActionKind, ClientFile, FaultFile, Field, Jitter, PolicyKind, ProviderFile,
    ScenarioFile,
};
use crate::kept::{Kept, RunPath};

/// One simulation step is at most this long; longer steps would hide the
/// interleavings the bench exists to find.
pub const TICK_MS_MAX: u64 = 1_000;
/// Provider and client names become host names and tokens.
pub const NAME_LEN_MAX: usize = 40;
/// A worker's attempts per job, at most.
pub const WORKER_ATTEMPTS_MAX: u32 = 64;
/// Jobs a worker picks up per poll, at most.
pub const WORKER_JOBS_PER_TICK_LIMIT: u32 = 1_024;
/// Attempts the reconciler looks at per pass, at most.
pub const RECONCILER_ATTEMPTS_PER_PASS_LIMIT: u32 = 1_024;
/// A click's `params`, serialized, at most (the API refuses large bodies).
pub const PARAMS_LEN_MAX_BYTES: usize = 16 * 1024;
/// A scenario's description, at most.
pub const DESCRIPTION_LEN_MAX_BYTES: usize = 16 * 1024;
/// A provider's `deviate_one_in`, at most.
pub const DEVIATE_ONE_IN_MAX: u32 = 1_000_000;
/// A provider's `context_window_tokens`, at most.
pub const CONTEXT_WINDOW_TOKENS_MAX: u32 = 100_000_000;
/// Errors reported per file; past it, one closing error says how many more.
pub const ERRORS_MAX: usize = 32;

/// Defaults the simulator leaves to the file format.
pub mod defaults {
    /// A click is not retried unless the file says so.
    pub const RETRIES: u32 = 0;
    /// Pause before a click's retry.
    pub const RETRY_AFTER_MS: u64 = 1_000;
    /// Store faults hit the first occurrence, once.
    pub const NTH: u32 = 1;
    pub const COUNT: u32 = 1;
}

/// Validates `text` (the contents of `path`) and builds the scenario
/// `name`.
pub fn scenario_from_str(name: &str, path: &str, text: &str) -> Result<Scenario, ScenarioErrors> {
    file_from_str(name, path, text).map(|(scenario, _)| scenario)
}

/// Validates `text` and builds the scenario `name`, with what the file was
/// kept for, if it says.
pub fn file_from_str(
    name: &str,
    path: &str,
    text: &str,
) -> Result<(Scenario, Option<Kept>), ScenarioErrors> {
    let file = crate::format::parse(text).map_err(|e| ScenarioError::syntax(path, text, &e))?;
    let mut checker = Checker::default();
    let kept = checker.kept(&file);
    let scenario = checker.scenario(name, file);
    if checker.errors.is_empty() {
        return Ok((scenario, kept));
    }
    // In file order; errors at one position keep the order they were found.
    checker.errors.sort_by_key(|(span, _)| span.start);
    let total = checker.errors.len();
    let mut errors: Vec<ScenarioError> = checker
        .errors
        .iter()
        .take(ERRORS_MAX)
        .map(|(span, message)| ScenarioError::invalid(path, text, span, message.clone()))
        .collect();
    if total > ERRORS_MAX {
        let (span, _) = &checker.errors[ERRORS_MAX];
        errors.push(ScenarioError::invalid(
            path,
            text,
            span,
            format!("and {} more errors", total - ERRORS_MAX),
        ));
    }
    Err(ScenarioErrors::new(errors))
}

/// The hosts faults may name, and how wildcards expand.
struct Hosts {
    all: BTreeSet<String>,
    apis: Vec<String>,
    workers: Vec<String>,
    clients: BTreeSet<String>,
    /// The hosts whose software reads a clock (the engine's hosts).
    clocked: BTreeSet<String>,
}

impl Hosts {
    fn new(topology: &Topology, clients: &[ClientSpec]) -> Self {
        let apis: Vec<String> = (1..=topology.api_replicas).map(host::api).collect();
        let workers: Vec<String> = (1..=topology.workers).map(host::worker).collect();
        let clients: BTreeSet<String> = clients.iter().map(|c| host::client(&c.name)).collect();
        let mut all: BTreeSet<String> = BTreeSet::new();
        all.insert(host::STORE.to_owned());
        if topology.reconciler {
            all.insert(host::RECONCILER.to_owned());
        }
        all.extend(apis.iter().cloned());
        all.extend(workers.iter().cloned());
        all.extend(topology.providers.iter().map(|p| host::provider(&p.name)));
        all.extend(clients.iter().cloned());
        let mut clocked: BTreeSet<String> = apis.iter().chain(&workers).cloned().collect();
        if topology.reconciler {
            clocked.insert(host::RECONCILER.to_owned());
        }
        Self {
            all,
            apis,
            workers,
            clients,
            clocked,
        }
    }

    /// The hosts `name` stands for, or why it names none.
    fn expand(&self, name: &str) -> Result<Vec<String>, String> {
        match name {
            "api-*" => return Ok(self.apis.clone()),
            "worker-*" if !self.workers.is_empty() => return Ok(self.workers.clone()),
            _ => {}
        }
        if self.all.contains(name) {
            return Ok(vec![name.to_owned()]);
        }
        let known: Vec<&str> = self.all.iter().map(String::as_str).collect();
        let hint = if name == host::RECONCILER {
            " (the reconciler is off in this topology)".to_owned()
        } else {
            String::new()
        };
        Err(format!(
            "unknown host {name:?}{hint}; hosts here: {}, api-*, worker-*",
            known.join(", ")
        ))
    }
}

#[derive(Default)]
struct Checker {
    errors: Vec<(Range<usize>, String)>,
}

/// A field's value, or `default` when it is absent.
fn value<T: Clone>(field: &Field<T>, default: T) -> T {
    field.as_ref().map_or(default, |f| f.get_ref().clone())
}

impl Checker {
    fn error(&mut self, span: Range<usize>, message: impl Into<String>) {
        self.errors.push((span, message.into()));
    }

    /// A number within `min..=max`, or an error at the field; `note` says
    /// where the maximum comes from.
    fn bounded<T>(
        &mut self,
        field: &Field<T>,
        name: &str,
        default: T,
        min: T,
        max: T,
        note: &str,
    ) -> T
    where
        T: Copy + PartialOrd + Display,
    {
        let Some(field) = field else { return default };
        let v = *field.get_ref();
        if v < min {
            self.error(
                field.span(),
                format!("`{name}` must be at least {min}, got {v}"),
            );
        } else if v > max {
            self.error(
                field.span(),
                format!("`{name}` must be at most {max}{note}, got {v}"),
            );
        }
        v
    }

    fn name(&mut self, name: &Spanned<String>, what: &str) {
        let text = name.get_ref();
        let valid_chars = text
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
        if text.is_empty() || text.len() > NAME_LEN_MAX || !valid_chars {
            self.error(
                name.span(),
                format!(
                    "{what} name {text:?} must be 1 to {NAME_LEN_MAX} characters of a-z, 0-9, '-' and '_' (it becomes a host name)"
                ),
            );
        }
    }

    fn kept(&mut self, file: &ScenarioFile) -> Option<Kept> {
        let kept = file.kept.as_ref()?.get_ref();
        let event_kinds = kept.event_kinds.as_ref().map(|e| {
            let text = e.get_ref();
            if text.len() != 16 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
                self.error(
                    e.span(),
                    "`event_kinds` is a fingerprint of 16 hex digits, as `idem fuzz` and `idem regress --update` write it",
                );
            }
            text.to_ascii_lowercase()
        });
        let windows = kept.windows.as_ref().map(|ws| {
            let mut windows: Vec<Window> = ws.get_ref().iter().map(|w| *w.get_ref()).collect();
            windows.sort();
            windows.dedup();
            windows
        });
        let path = match (windows, event_kinds) {
            (Some(windows), Some(event_kinds)) => Some(RunPath {
                windows,
                event_kinds,
            }),
            (None, None) => None,
            _ => {
                self.error(
                    file.kept.as_ref().map(Spanned::span).unwrap_or_default(),
                    "a recorded path names both `windows` and `event_kinds`",
                );
                None
            }
        };
        Some(Kept {
            seed: *kept.seed.get_ref(),
            design: value(&kept.design, Design::Correct),
            path,
        })
    }

    fn scenario(&mut self, name: &str, file: ScenarioFile) -> Scenario {
        let description = value(&file.description, String::new());
        if let Some(d) = &file.description
            && d.get_ref().len() > DESCRIPTION_LEN_MAX_BYTES
        {
            self.error(
                d.span(),
                format!("the description must be at most {DESCRIPTION_LEN_MAX_BYTES} bytes"),
            );
        }
        let timing = self.timing(&file);
        let policy = self.policy(&file);
        let topology = self.topology(&file);
        let clients = self.clients(&file, &topology, &timing);
        let faults = self.faults(&file, &topology, &clients, &timing);
        let mut expect_windows = Vec::new();
        if let Some(windows) = &file.expect_windows {
            for window in windows.get_ref() {
                if expect_windows.contains(window.get_ref()) {
                    self.error(window.span(), "this window is already expected");
                } else {
                    expect_windows.push(*window.get_ref());
                }
            }
        }
        Scenario {
            name: name.to_owned(),
            description,
            topology,
            policy,
            clients,
            faults,
            timing,
            expect_windows,
        }
    }

    fn timing(&mut self, file: &ScenarioFile) -> Timing {
        let defaults = Timing::default();
        let Some(t) = &file.timing else {
            return defaults;
        };
        let t = t.get_ref();
        let tick_ms = self.bounded(&t.tick_ms, "tick_ms", defaults.tick_ms, 1, TICK_MS_MAX, "");
        let settle_ms = self.bounded(
            &t.settle_ms,
            "settle_ms",
            defaults.settle_ms,
            1,
            SETTLE_MS_MAX,
            " (SETTLE_MS_MAX, 30 simulated minutes)",
        );
        let latency_ms_min = self.bounded(
            &t.latency_ms_min,
            "latency_ms_min",
            defaults.latency_ms_min,
            0,
            SETTLE_MS_MAX,
            "",
        );
        let latency_ms_max = self.bounded(
            &t.latency_ms_max,
            "latency_ms_max",
            defaults.latency_ms_max,
            0,
            SETTLE_MS_MAX,
            "",
        );
        if latency_ms_min > latency_ms_max {
            let span = t
                .latency_ms_min
                .as_ref()
                .or(t.latency_ms_max.as_ref())
                .map(Spanned::span)
                .unwrap_or_default();
            self.error(
                span,
                format!(
                    "latency_ms_min ({latency_ms_min}) is above latency_ms_max ({latency_ms_max})"
                ),
            );
        }
        if tick_ms > settle_ms {
            let span = t.tick_ms.as_ref().map(Spanned::span).unwrap_or_default();
            self.error(
                span,
                format!("tick_ms ({tick_ms}) is longer than settle_ms ({settle_ms})"),
            );
        }
        Timing {
            tick_ms,
            settle_ms,
            latency_ms_min,
            latency_ms_max,
            skip_quiet: value(&t.skip_quiet, defaults.skip_quiet),
        }
    }

    fn policy(&mut self, file: &ScenarioFile) -> Policy {
        let Some(p) = &file.policy else {
            return Policy::default();
        };
        let p = p.get_ref();
        match (*p.kind.get_ref(), &p.hedge_after_ms) {
            (PolicyKind::Strict, None) => Policy::Strict,
            (PolicyKind::Strict, Some(h)) => {
                self.error(
                    h.span(),
                    "`hedge_after_ms` applies only to kind = \"hedged\"",
                );
                Policy::Strict
            }
            (PolicyKind::Hedged, None) => {
                self.error(p.kind.span(), "a hedged policy needs `hedge_after_ms`");
                Policy::Hedged { hedge_after_ms: 1 }
            }
            (PolicyKind::Hedged, Some(_)) => Policy::Hedged {
                hedge_after_ms: self.bounded(
                    &p.hedge_after_ms,
                    "hedge_after_ms",
                    1,
                    1,
                    SETTLE_MS_MAX,
                    "",
                ),
            },
        }
    }

    fn topology(&mut self, file: &ScenarioFile) -> Topology {
        let mut topology = Topology::default();
        if let Some(t) = &file.topology {
            let t = t.get_ref();
            topology.api_replicas = self.bounded(
                &t.api_replicas,
                "api_replicas",
                topology.api_replicas,
                2,
                API_REPLICAS_MAX,
                " (API_REPLICAS_MAX)",
            );
            topology.workers = self.bounded(
                &t.workers,
                "workers",
                topology.workers,
                0,
                WORKERS_MAX,
                " (WORKERS_MAX)",
            );
            topology.reconciler = value(&t.reconciler, topology.reconciler);
            topology.store_timeout_ms = self.bounded(
                &t.store_timeout_ms,
                "store_timeout_ms",
                topology.store_timeout_ms,
                1,
                SETTLE_MS_MAX,
                "",
            );
        }
        if let Some(w) = &file.worker {
            let w = w.get_ref();
            let c = &mut topology.worker;
            c.poll_interval_ms = self.bounded(
                &w.poll_interval_ms,
                "poll_interval_ms",
                c.poll_interval_ms,
                1,
                SETTLE_MS_MAX,
                "",
            );
            c.connect_timeout_ms = self.bounded(
                &w.connect_timeout_ms,
                "connect_timeout_ms",
                c.connect_timeout_ms,
                1,
                SETTLE_MS_MAX,
                "",
            );
            c.attempt_deadline_ms = self.bounded(
                &w.attempt_deadline_ms,
                "attempt_deadline_ms",
                c.attempt_deadline_ms,
                1,
                SETTLE_MS_MAX,
                "",
            );
            c.attempts_max = self.bounded(
                &w.attempts_max,
                "attempts_max",
                c.attempts_max,
                1,
                WORKER_ATTEMPTS_MAX,
                "",
            );
            c.jobs_per_tick_max = self.bounded(
                &w.jobs_per_tick_max,
                "jobs_per_tick_max",
                c.jobs_per_tick_max,
                1,
                WORKER_JOBS_PER_TICK_LIMIT,
                "",
            );
        }
        if let Some(r) = &file.reconciler {
            let r = r.get_ref();
            let c = &mut topology.reconciler_config;
            c.poll_interval_ms = self.bounded(
                &r.poll_interval_ms,
                "poll_interval_ms",
                c.poll_interval_ms,
                1,
                SETTLE_MS_MAX,
                "",
            );
            c.starting_stale_ms = self.bounded(
                &r.starting_stale_ms,
                "starting_stale_ms",
                c.starting_stale_ms,
                1,
                SETTLE_MS_MAX,
                "",
            );
            c.running_stale_ms = self.bounded(
                &r.running_stale_ms,
                "running_stale_ms",
                c.running_stale_ms,
                1,
                SETTLE_MS_MAX,
                "",
            );
            c.unknown_max_ms = self.bounded(
                &r.unknown_max_ms,
                "unknown_max_ms",
                c.unknown_max_ms,
                1,
                SETTLE_MS_MAX,
                "",
            );
            c.attempts_per_pass_max = self.bounded(
                &r.attempts_per_pass_max,
                "attempts_per_pass_max",
                c.attempts_per_pass_max,
                1,
                RECONCILER_ATTEMPTS_PER_PASS_LIMIT,
                "",
            );
            c.provider_call_timeout_ms = self.bounded(
                &r.provider_call_timeout_ms,
                "provider_call_timeout_ms",
                c.provider_call_timeout_ms,
                1,
                SETTLE_MS_MAX,
                "",
            );
        }
        if let Some(providers) = &file.providers {
            if providers.get_ref().is_empty() {
                self.error(providers.span(), "a scenario needs at least one provider");
            } else {
                let defaults = std::mem::take(&mut topology.providers);
                topology.providers = self.providers(providers.get_ref(), &defaults);
            }
        }
        topology
    }

    fn providers(
        &mut self,
        files: &[Spanned<ProviderFile>],
        defaults: &[ProviderProfile],
    ) -> Vec<ProviderProfile> {
        let mut seen: BTreeSet<String> = BTreeSet::new();
        let mut profiles = Vec::with_capacity(files.len());
        for (index, file) in files.iter().enumerate() {
            if index == PROVIDERS_MAX {
                self.error(
                    file.span(),
                    format!("at most {PROVIDERS_MAX} providers (PROVIDERS_MAX) are allowed"),
                );
            }
            let p = file.get_ref();
            self.name(&p.name, "provider");
            let name = p.name.get_ref().clone();
            if !seen.insert(name.clone()) {
                self.error(
                    p.name.span(),
                    format!("provider {name:?} is already defined"),
                );
            }
            // A provider named like a default one starts from that profile;
            // any other from the default behaviour, uncertified.
            let base = defaults
                .iter()
                .find(|d| d.name == name)
                .cloned()
                .unwrap_or_else(|| ProviderProfile {
                    name: name.clone(),
                    model: format!("{name}-model"),
                    behaviour: defaults
                        .first()
                        .map(|d| d.behaviour.clone())
                        .unwrap_or_default(),
                    certified: false,
                    tokenizer: TokenizerProfile::default(),
                });
            let b = &base.behaviour;
            let behaviour = Behaviour {
                latency_ms: self.bounded(
                    &p.latency_ms,
                    "latency_ms",
                    b.latency_ms,
                    0,
                    SETTLE_MS_MAX,
                    "",
                ),
                latency_jitter_ms: self.bounded(
                    &p.latency_jitter_ms,
                    "latency_jitter_ms",
                    b.latency_jitter_ms,
                    0,
                    SETTLE_MS_MAX,
                    "",
                ),
                error_per_mille: self.bounded(
                    &p.error_per_mille,
                    "error_per_mille",
                    b.error_per_mille,
                    0,
                    1_000,
                    "",
                ),
                hang: value(&p.hang, b.hang),
                stall: value(&p.stall, b.stall),
                honour_idempotency_keys: value(
                    &p.honour_idempotency_keys,
                    b.honour_idempotency_keys,
                ),
                supports_status: value(&p.supports_status, b.supports_status),
                supports_cancel: value(&p.supports_cancel, b.supports_cancel),
                contract: value(&p.contract, b.contract),
                deviate_one_in: self.bounded(
                    &p.deviate_one_in,
                    "deviate_one_in",
                    b.deviate_one_in,
                    0,
                    DEVIATE_ONE_IN_MAX,
                    "",
                ),
                // Only a provider_model_change fault changes it.
                served_model: None,
                seed: value(&p.seed, b.seed),
            };
            let t = &base.tokenizer;
            let tokenizer = TokenizerProfile {
                encoding: value(&p.tokenizer, t.encoding),
                context_window_tokens: self.bounded(
                    &p.context_window_tokens,
                    "context_window_tokens",
                    t.context_window_tokens,
                    1,
                    CONTEXT_WINDOW_TOKENS_MAX,
                    "",
                ),
                special_tokens: value(&p.special_tokens, t.special_tokens),
            };
            let model = value(&p.model, base.model.clone());
            if let Some(m) = &p.model
                && (m.get_ref().is_empty() || m.get_ref().len() > 255)
            {
                self.error(m.span(), "a model name must be 1 to 255 bytes");
            }
            profiles.push(ProviderProfile {
                name,
                model,
                behaviour,
                certified: value(&p.certified, base.certified),
                tokenizer,
            });
        }
        profiles
    }

    fn clients(
        &mut self,
        file: &ScenarioFile,
        topology: &Topology,
        timing: &Timing,
    ) -> Vec<ClientSpec> {
        if file.clients.is_empty() {
            self.error(0..0, "a scenario needs at least one [[clients]] entry");
            return Vec::new();
        }
        let mut seen: BTreeSet<String> = BTreeSet::new();
        let mut specs = Vec::with_capacity(file.clients.len());
        for (index, client) in file.clients.iter().enumerate() {
            if index == CLIENTS_MAX {
                self.error(
                    client.span(),
                    format!("at most {CLIENTS_MAX} clients (CLIENTS_MAX) are allowed"),
                );
            }
            let c = client.get_ref();
            self.name(&c.name, "client");
            let name = c.name.get_ref().clone();
            if !seen.insert(name.clone()) {
                self.error(c.name.span(), format!("client {name:?} is already defined"));
            }
            let owner = value(&c.owner, name.clone());
            if let Some(o) = &c.owner {
                self.name(o, "owner");
            }
            let mut spec = ClientSpec::new(&name, &owner);
            spec.request_timeout_ms = self.bounded(
                &c.request_timeout_ms,
                "request_timeout_ms",
                spec.request_timeout_ms,
                1,
                SETTLE_MS_MAX,
                "",
            );
            spec.await_outcome = value(&c.await_outcome, spec.await_outcome);
            spec.actions = self.actions(c, topology, timing);
            specs.push(spec);
        }
        // Keys each client clicks, for the backup button, gets and probes.
        let clicked: BTreeMap<&str, BTreeSet<&str>> = file
            .clients
            .iter()
            .map(|c| {
                let c = c.get_ref();
                let keys = c
                    .actions
                    .iter()
                    .filter(|a| *a.get_ref().action.get_ref() == ActionKind::Click)
                    .map(|a| a.get_ref().key.get_ref().as_str())
                    .collect();
                (c.name.get_ref().as_str(), keys)
            })
            .collect();
        for client in &file.clients {
            let c = client.get_ref();
            let me = c.name.get_ref().as_str();
            for action in &c.actions {
                let a = action.get_ref();
                let key = a.key.get_ref().as_str();
                match a.action.get_ref() {
                    ActionKind::Click => {}
                    ActionKind::Backup | ActionKind::Get => {
                        if !clicked.get(me).is_some_and(|keys| keys.contains(key)) {
                            self.error(
                                a.key.span(),
                                format!(
                                    "client {me:?} never clicks with key {key:?}, so it has no job to {}",
                                    if *a.action.get_ref() == ActionKind::Get { "get" } else { "back up" }
                                ),
                            );
                        }
                    }
                    ActionKind::Probe => {
                        let Some(of) = &a.of else { continue };
                        let other = of.get_ref().as_str();
                        match clicked.get(other) {
                            None => self.error(of.span(), format!("unknown client {other:?}")),
                            Some(_) if other == me => self.error(
                                of.span(),
                                "a probe looks at another client's job; use `get` for the client's own",
                            ),
                            Some(keys) if !keys.contains(key) => self.error(
                                a.key.span(),
                                format!("client {other:?} never clicks with key {key:?}, so there is no job to probe"),
                            ),
                            Some(_) => {}
                        }
                    }
                }
            }
        }
        specs
    }

    fn actions(
        &mut self,
        client: &ClientFile,
        topology: &Topology,
        timing: &Timing,
    ) -> Vec<Action> {
        let providers: BTreeSet<&str> =
            topology.providers.iter().map(|p| p.name.as_str()).collect();
        let mut actions = Vec::with_capacity(client.actions.len());
        for (index, action) in client.actions.iter().enumerate() {
            if index == ACTIONS_PER_CLIENT_MAX {
                self.error(
                    action.span(),
                    format!("at most {ACTIONS_PER_CLIENT_MAX} actions per client (ACTIONS_PER_CLIENT_MAX) are allowed"),
                );
            }
            if let Some(converted) = self.action(action.get_ref(), &providers, topology, timing) {
                actions.push(converted);
            }
        }
        actions
    }

    /// Refuses the fields that do not apply to an action or fault kind.
    fn only(
        &mut self,
        kind: &str,
        what: &str,
        present: &[(&str, Option<Range<usize>>)],
        allowed: &[&str],
    ) {
        for (field, span) in present {
            if let Some(span) = span
                && !allowed.contains(field)
            {
                self.error(
                    span.clone(),
                    format!(
                        "`{field}` does not apply to a {kind} {what} (it takes: {})",
                        allowed.join(", ")
                    ),
                );
            }
        }
    }

    fn key(&mut self, key: &Spanned<String>) {
        let k = key.get_ref();
        if k.is_empty()
            || k.len() > IDEMPOTENCY_KEY_LEN_MAX
            || !k.bytes().all(|b| b.is_ascii_graphic())
        {
            self.error(
                key.span(),
                format!("an idempotency key must be 1 to {IDEMPOTENCY_KEY_LEN_MAX} visible ASCII characters"),
            );
        }
    }

    fn provider_ref(&mut self, name: &Spanned<String>, providers: &BTreeSet<&str>) {
        if !providers.contains(name.get_ref().as_str()) {
            let known: Vec<&str> = providers.iter().copied().collect();
            self.error(
                name.span(),
                format!(
                    "unknown provider {:?}; providers here: {}",
                    name.get_ref(),
                    known.join(", ")
                ),
            );
        }
    }

    fn action(
        &mut self,
        a: &ActionFile,
        providers: &BTreeSet<&str>,
        topology: &Topology,
        timing: &Timing,
    ) -> Option<Action> {
        let kind = *a.action.get_ref();
        let present = [
            ("jitter_ms", a.jitter_ms.as_ref().map(Spanned::span)),
            ("provider", a.provider.as_ref().map(Spanned::span)),
            ("fallbacks", a.fallbacks.as_ref().map(Spanned::span)),
            ("params", a.params.as_ref().map(Spanned::span)),
            ("retries", a.retries.as_ref().map(Spanned::span)),
            (
                "retry_after_ms",
                a.retry_after_ms.as_ref().map(Spanned::span),
            ),
            ("of", a.of.as_ref().map(Spanned::span)),
        ];
        let allowed: &[&str] = match kind {
            ActionKind::Click => &[
                "action",
                "key",
                "at_ms",
                "jitter_ms",
                "provider",
                "fallbacks",
                "params",
                "retries",
                "retry_after_ms",
            ],
            ActionKind::Backup => &["action", "key", "at_ms", "jitter_ms", "provider"],
            ActionKind::Get => &["action", "key", "at_ms"],
            ActionKind::Probe => &["action", "key", "at_ms", "of"],
        };
        self.only(kind.name(), "action", &present, allowed);
        self.key(&a.key);
        let key = a.key.get_ref().clone();
        let at_ms = self.bounded(&a.at_ms, "at_ms", 0, 0, SETTLE_MS_MAX, "");
        let jitter = a.jitter_ms.as_ref().map_or(
            Jitter {
                min_ms: 0,
                max_ms: 0,
            },
            |j| *j.get_ref(),
        );
        let (at_ms, jitter_ms) = self.jittered(a, at_ms, jitter, timing);
        match kind {
            ActionKind::Click => {
                let provider = match &a.provider {
                    Some(p) => {
                        self.provider_ref(p, providers);
                        p.get_ref().clone()
                    }
                    None => topology
                        .providers
                        .first()
                        .map(|p| p.name.clone())
                        .unwrap_or_default(),
                };
                let mut fallbacks = Vec::new();
                for f in a.fallbacks.iter().flat_map(|f| f.get_ref()) {
                    self.provider_ref(f, providers);
                    if f.get_ref() == &provider || fallbacks.contains(f.get_ref()) {
                        self.error(
                            f.span(),
                            format!("provider {:?} is already in this request", f.get_ref()),
                        );
                    }
                    fallbacks.push(f.get_ref().clone());
                }
                let params = match &a.params {
                    None => Value::Object(serde_json::Map::new()),
                    Some(p) => self.params(p),
                };
                let retries = self.bounded(
                    &a.retries,
                    "retries",
                    defaults::RETRIES,
                    0,
                    RETRIES_MAX,
                    " (RETRIES_MAX)",
                );
                let retry_after_ms = self.bounded(
                    &a.retry_after_ms,
                    "retry_after_ms",
                    defaults::RETRY_AFTER_MS,
                    0,
                    SETTLE_MS_MAX,
                    "",
                );
                Some(Action::Create {
                    at_ms,
                    jitter_ms,
                    key,
                    request: JobRequest {
                        provider,
                        fallbacks,
                        params,
                    },
                    retries,
                    retry_after_ms,
                })
            }
            ActionKind::Backup => {
                if let Some(p) = &a.provider {
                    self.provider_ref(p, providers);
                }
                Some(Action::Backup {
                    at_ms,
                    jitter_ms,
                    key,
                    provider: a.provider.as_ref().map(|p| p.get_ref().clone()),
                })
            }
            ActionKind::Get => Some(Action::Get { at_ms, key }),
            ActionKind::Probe => match &a.of {
                None => {
                    self.error(
                        a.action.span(),
                        "a probe needs `of`: the client whose job it looks at",
                    );
                    None
                }
                Some(of) => Some(Action::Probe {
                    at_ms,
                    other_client: of.get_ref().clone(),
                    key,
                }),
            },
        }
    }

    /// The runtime's jitter is a delay of `0..=jitter_ms` after `at_ms`; a
    /// range `[lo, hi]` becomes `at_ms + lo` with a jitter of `hi - lo`.
    fn jittered(
        &mut self,
        a: &ActionFile,
        at_ms: u64,
        jitter: Jitter,
        timing: &Timing,
    ) -> (u64, u64) {
        let span = a
            .jitter_ms
            .as_ref()
            .map(Spanned::span)
            .or(a.at_ms.as_ref().map(Spanned::span))
            .unwrap_or_else(|| a.action.span());
        if jitter.min_ms > jitter.max_ms {
            self.error(
                span,
                format!(
                    "the jitter range [{}, {}] runs backwards",
                    jitter.min_ms, jitter.max_ms
                ),
            );
            return (at_ms, 0);
        }
        let earliest = i128::from(at_ms) + i128::from(jitter.min_ms);
        let latest = i128::from(at_ms) + i128::from(jitter.max_ms);
        if earliest < 0 {
            self.error(
                span,
                format!(
                    "the jitter can move this {} to {earliest} ms, before the run starts",
                    a.action.get_ref().name()
                ),
            );
            return (at_ms, 0);
        }
        if latest >= i128::from(timing.settle_ms) {
            self.error(
                span,
                format!(
                    "this {} can happen at {latest} ms, at or after settle_ms ({})",
                    a.action.get_ref().name(),
                    timing.settle_ms
                ),
            );
            return (at_ms, 0);
        }
        let start = u64::try_from(earliest).expect("checked non-negative and below settle_ms");
        let width =
            u64::try_from(latest - earliest).expect("checked non-negative and below settle_ms");
        (start, width)
    }

    fn params(&mut self, params: &Spanned<toml::Value>) -> Value {
        let converted = match params.get_ref() {
            toml::Value::Table(_) => to_json(params.get_ref()),
            _ => Err("`params` must be a table, like { text = \"hello\" }".to_owned()),
        };
        match converted {
            Ok(v) => {
                let len = serde_json::to_string(&v).map_or(usize::MAX, |s| s.len());
                if len > PARAMS_LEN_MAX_BYTES {
                    self.error(
                        params.span(),
                        format!("`params` is {len} bytes as JSON; at most {PARAMS_LEN_MAX_BYTES} are allowed"),
                    );
                }
                v
            }
            Err(message) => {
                self.error(params.span(), message);
                Value::Null
            }
        }
    }

    fn faults(
        &mut self,
        file: &ScenarioFile,
        topology: &Topology,
        clients: &[ClientSpec],
        timing: &Timing,
    ) -> Vec<FaultSpec> {
        let hosts = Hosts::new(topology, clients);
        let providers: BTreeSet<&str> =
            topology.providers.iter().map(|p| p.name.as_str()).collect();
        let mut specs = Vec::new();
        let mut over_limit_reported = false;
        for fault in &file.faults {
            let f = fault.get_ref();
            let when = self.when(f, timing);
            for converted in self.fault(f, &hosts, &providers, timing) {
                if specs.len() == FAULTS_MAX && !over_limit_reported {
                    over_limit_reported = true;
                    self.error(
                        fault.span(),
                        format!("at most {FAULTS_MAX} faults (FAULTS_MAX) are allowed, counting each host a wildcard stands for"),
                    );
                }
                specs.push(FaultSpec {
                    when: when.clone(),
                    fault: converted,
                });
            }
        }
        specs
    }

    fn when(&mut self, f: &FaultFile, timing: &Timing) -> When {
        match (&f.at_ms, &f.after) {
            (Some(_), Some(after)) => {
                self.error(
                    after.span(),
                    "a fault fires either `at_ms` or `after` an event, not both",
                );
                When::At { at_ms: 0 }
            }
            (Some(at), None) => {
                let at_ms = *at.get_ref();
                if at_ms >= timing.settle_ms {
                    self.error(
                        at.span(),
                        format!("`at_ms` = {at_ms} is at or after settle_ms ({}): the fault would never fire", timing.settle_ms),
                    );
                }
                When::At { at_ms }
            }
            (None, Some(after)) => {
                let after = after.get_ref();
                When::After {
                    kind: *after.kind.get_ref(),
                    nth: self.bounded(&after.nth, "nth", 1, 1, u32::MAX, ""),
                }
            }
            (None, None) => When::At { at_ms: 0 },
        }
    }

    fn required<T: Clone>(
        &mut self,
        field: &Field<T>,
        name: &str,
        kind: FaultKind,
        at: &Spanned<FaultKind>,
    ) -> Option<T> {
        match field {
            Some(v) => Some(v.get_ref().clone()),
            None => {
                self.error(at.span(), format!("a {} fault needs `{name}`", kind.name()));
                None
            }
        }
    }

    fn hosts(
        &mut self,
        field: &Field<String>,
        name: &str,
        kind: FaultKind,
        at: &Spanned<FaultKind>,
        hosts: &Hosts,
    ) -> Vec<String> {
        let Some(h) = field else {
            self.error(at.span(), format!("a {} fault needs `{name}`", kind.name()));
            return Vec::new();
        };
        match hosts.expand(h.get_ref()) {
            Ok(expanded) => expanded,
            Err(message) => {
                self.error(h.span(), message);
                Vec::new()
            }
        }
    }

    fn duration(&mut self, f: &FaultFile) -> Option<u64> {
        let d = self.required(&f.duration_ms, "duration_ms", *f.fault.get_ref(), &f.fault)?;
        Some(self.bounded(&f.duration_ms, "duration_ms", d, 1, SETTLE_MS_MAX, ""))
    }

    /// The faults one `[[faults]]` table stands for (one per host a
    /// wildcard expands to), after checking that it sets only the fields
    /// its kind takes.
    fn fault(
        &mut self,
        f: &FaultFile,
        hosts: &Hosts,
        providers: &BTreeSet<&str>,
        timing: &Timing,
    ) -> Vec<Fault> {
        let kind = *f.fault.get_ref();
        self.only(
            kind.name(),
            "fault",
            &fault_fields_present(f),
            kind.fields(),
        );
        match kind {
            FaultKind::LinkLatency | FaultKind::Hold | FaultKind::Partition => {
                self.link_faults(f, kind, hosts, timing)
            }
            FaultKind::Crash => self.crash_faults(f, hosts),
            FaultKind::ProviderHang | FaultKind::ProviderStall | FaultKind::ProviderError => {
                self.provider_fault(f, kind, providers)
            }
            FaultKind::ProviderModelChange => self.model_change_fault(f, providers),
            FaultKind::StoreLoseAck | FaultKind::StoreFailBeforeApply | FaultKind::StoreLatency => {
                self.store_fault(f, kind)
            }
            FaultKind::ClockOffset | FaultKind::ClockDrift | FaultKind::ClockJump => {
                self.clock_fault(f, kind, hosts)
            }
        }
    }

    /// A link latency, hold or partition on every pair of hosts `a` and `b`
    /// stand for.
    fn link_faults(
        &mut self,
        f: &FaultFile,
        kind: FaultKind,
        hosts: &Hosts,
        timing: &Timing,
    ) -> Vec<Fault> {
        let at = &f.fault;
        let a = self.hosts(&f.a, "a", kind, at, hosts);
        let b = self.hosts(&f.b, "b", kind, at, hosts);
        let duration_ms = self.duration(f);
        let latency_ms_max = if kind == FaultKind::LinkLatency {
            self.latency_ms_max(f, timing)
        } else {
            Some(0)
        };
        let (Some(duration_ms), Some(latency_ms_max)) = (duration_ms, latency_ms_max) else {
            return Vec::new();
        };
        let mut faults = Vec::new();
        for x in &a {
            for y in &b {
                if x == y {
                    let span = f.b.as_ref().map(Spanned::span).unwrap_or_else(|| at.span());
                    self.error(
                        span,
                        format!("a link joins two different hosts; both ends are {x:?}"),
                    );
                    continue;
                }
                let (a, b) = (x.clone(), y.clone());
                faults.push(match kind {
                    FaultKind::LinkLatency => Fault::LinkLatency {
                        a,
                        b,
                        latency_ms_max,
                        duration_ms,
                    },
                    FaultKind::Hold => Fault::Hold { a, b, duration_ms },
                    _ => Fault::Partition {
                        a,
                        b,
                        oneway: value(&f.oneway, false),
                        duration_ms,
                    },
                });
            }
        }
        faults
    }

    /// A link latency fault's `latency_ms_max`: required, within bounds,
    /// and not below the timing's `latency_ms_min`.
    fn latency_ms_max(&mut self, f: &FaultFile, timing: &Timing) -> Option<u64> {
        let max = self.required(
            &f.latency_ms_max,
            "latency_ms_max",
            FaultKind::LinkLatency,
            &f.fault,
        );
        let (Some(max), Some(field)) = (max, &f.latency_ms_max) else {
            return None;
        };
        if max < timing.latency_ms_min {
            self.error(
                field.span(),
                format!(
                    "`latency_ms_max` ({max}) is below the timing's latency_ms_min ({})",
                    timing.latency_ms_min
                ),
            );
        }
        Some(self.bounded(
            &f.latency_ms_max,
            "latency_ms_max",
            max,
            0,
            SETTLE_MS_MAX,
            "",
        ))
    }

    /// A crash of every server `host` stands for; clients cannot crash.
    fn crash_faults(&mut self, f: &FaultFile, hosts: &Hosts) -> Vec<Fault> {
        let at = &f.fault;
        let targets = self.hosts(&f.host, "host", FaultKind::Crash, at, hosts);
        let restart_after_ms = f.restart_after_ms.as_ref().map(|_| {
            self.bounded(
                &f.restart_after_ms,
                "restart_after_ms",
                1,
                1,
                SETTLE_MS_MAX,
                "",
            )
        });
        let mut faults = Vec::new();
        for host in targets {
            if hosts.clients.contains(&host) {
                let span = f
                    .host
                    .as_ref()
                    .map(Spanned::span)
                    .unwrap_or_else(|| at.span());
                self.error(
                    span,
                    format!("{host:?} is a user, not a server: clients cannot crash"),
                );
                continue;
            }
            faults.push(Fault::Crash {
                host,
                restart_after_ms,
            });
        }
        faults
    }

    /// A provider hang, stall or error rate on a provider of the topology.
    fn provider_fault(
        &mut self,
        f: &FaultFile,
        kind: FaultKind,
        providers: &BTreeSet<&str>,
    ) -> Vec<Fault> {
        let at = &f.fault;
        let provider = self.required(&f.provider, "provider", kind, at);
        if let Some(p) = &f.provider {
            self.provider_ref(p, providers);
        }
        let duration_ms = self.duration(f);
        let error_per_mille = if kind == FaultKind::ProviderError {
            self.required(&f.error_per_mille, "error_per_mille", kind, at)
                .map(|e| self.bounded(&f.error_per_mille, "error_per_mille", e, 0, 1_000, ""))
        } else {
            Some(0)
        };
        let (Some(provider), Some(duration_ms), Some(error_per_mille)) =
            (provider, duration_ms, error_per_mille)
        else {
            return Vec::new();
        };
        vec![match kind {
            FaultKind::ProviderHang => Fault::ProviderHang {
                provider,
                duration_ms,
            },
            FaultKind::ProviderStall => Fault::ProviderStall {
                provider,
                duration_ms,
            },
            _ => Fault::ProviderError {
                provider,
                error_per_mille,
                duration_ms,
            },
        }]
    }

    /// A provider of the topology silently serving another model.
    fn model_change_fault(&mut self, f: &FaultFile, providers: &BTreeSet<&str>) -> Vec<Fault> {
        let (kind, at) = (FaultKind::ProviderModelChange, &f.fault);
        let provider = self.required(&f.provider, "provider", kind, at);
        if let Some(p) = &f.provider {
            self.provider_ref(p, providers);
        }
        let model = self.required(&f.model, "model", kind, at);
        if let Some(m) = &f.model
            && (m.get_ref().is_empty() || m.get_ref().len() > 255)
        {
            self.error(m.span(), "a model name must be 1 to 255 bytes");
        }
        let (Some(provider), Some(model)) = (provider, model) else {
            return Vec::new();
        };
        vec![Fault::ProviderModelChange { provider, model }]
    }

    /// A rule of the store's fault plan: a lost acknowledgement, a refusal
    /// before applying, or a delay, on occurrences of one operation.
    fn store_fault(&mut self, f: &FaultFile, kind: FaultKind) -> Vec<Fault> {
        let op = self.required(&f.op, "op", kind, &f.fault);
        let nth = self.bounded(&f.nth, "nth", defaults::NTH, 1, u32::MAX, "");
        let count = self.bounded(&f.count, "count", defaults::COUNT, 1, u32::MAX, "");
        let latency_ms = if kind == FaultKind::StoreLatency {
            self.required(&f.latency_ms, "latency_ms", kind, &f.fault)
                .map(|l| self.bounded(&f.latency_ms, "latency_ms", l, 0, SETTLE_MS_MAX, ""))
        } else {
            Some(0)
        };
        let (Some(op), Some(latency_ms)) = (op, latency_ms) else {
            return Vec::new();
        };
        vec![match kind {
            FaultKind::StoreLoseAck => Fault::StoreLoseAck { op, nth, count },
            FaultKind::StoreFailBeforeApply => Fault::StoreFailBeforeApply { op, nth, count },
            _ => Fault::StoreLatency {
                op,
                nth,
                count,
                latency_ms,
            },
        }]
    }

    /// A clock fault on every host `host` stands for. Only hosts that read
    /// a clock take one: the API replicas, the workers and the reconciler.
    fn clock_fault(&mut self, f: &FaultFile, kind: FaultKind, hosts: &Hosts) -> Vec<Fault> {
        let at = &f.fault;
        let targets = self.hosts(&f.host, "host", kind, at, hosts);
        let (field, name, max) = match kind {
            FaultKind::ClockOffset => (&f.offset_ms, "offset_ms", CLOCK_OFFSET_MS_MAX),
            FaultKind::ClockDrift => (&f.drift_ppm, "drift_ppm", CLOCK_DRIFT_PPM_MAX),
            _ => (&f.jump_ms, "jump_ms", CLOCK_OFFSET_MS_MAX),
        };
        let amount = self
            .required(field, name, kind, at)
            .map(|v| self.bounded(field, name, v, -max, max, ""));
        let duration_ms = f
            .duration_ms
            .as_ref()
            .map(|_| self.bounded(&f.duration_ms, "duration_ms", 1, 1, SETTLE_MS_MAX, ""));
        let Some(amount) = amount else {
            return Vec::new();
        };
        let mut faults = Vec::new();
        for host in targets {
            if !hosts.clocked.contains(&host) {
                let span = f
                    .host
                    .as_ref()
                    .map(Spanned::span)
                    .unwrap_or_else(|| at.span());
                self.error(
                    span,
                    format!(
                        "{host:?} reads no clock; clock faults apply to the API replicas, the workers and the reconciler"
                    ),
                );
                continue;
            }
            faults.push(match kind {
                FaultKind::ClockOffset => Fault::ClockOffset {
                    host,
                    offset_ms: amount,
                    duration_ms,
                },
                FaultKind::ClockDrift => Fault::ClockDrift {
                    host,
                    drift_ppm: amount,
                    duration_ms,
                },
                _ => Fault::ClockJump {
                    host,
                    jump_ms: amount,
                },
            });
        }
        faults
    }
}

/// Every optional field a `[[faults]]` table can set, by its name in the
/// file, with where it is set (`None` if it is not). The names are the ones
/// [`FaultKind::fields`] lists; `fault`, `at_ms` and `after` are not here
/// because every kind takes them.
fn fault_fields_present(f: &FaultFile) -> [(&'static str, Option<Range<usize>>); 17] {
    [
        ("a", f.a.as_ref().map(Spanned::span)),
        ("b", f.b.as_ref().map(Spanned::span)),
        ("host", f.host.as_ref().map(Spanned::span)),
        ("provider", f.provider.as_ref().map(Spanned::span)),
        ("oneway", f.oneway.as_ref().map(Spanned::span)),
        ("duration_ms", f.duration_ms.as_ref().map(Spanned::span)),
        (
            "latency_ms_max",
            f.latency_ms_max.as_ref().map(Spanned::span),
        ),
        (
            "restart_after_ms",
            f.restart_after_ms.as_ref().map(Spanned::span),
        ),
        (
            "error_per_mille",
            f.error_per_mille.as_ref().map(Spanned::span),
        ),
        ("op", f.op.as_ref().map(Spanned::span)),
        ("nth", f.nth.as_ref().map(Spanned::span)),
        ("count", f.count.as_ref().map(Spanned::span)),
        ("latency_ms", f.latency_ms.as_ref().map(Spanned::span)),
        ("offset_ms", f.offset_ms.as_ref().map(Spanned::span)),
        ("drift_ppm", f.drift_ppm.as_ref().map(Spanned::span)),
        ("jump_ms", f.jump_ms.as_ref().map(Spanned::span)),
        ("model", f.model.as_ref().map(Spanned::span)),
    ]
}

/// TOML to JSON, refusing what JSON cannot say.
fn to_json(value: &toml::Value) -> Result<Value, String> {
    Ok(match value {
        toml::Value::String(s) => Value::String(s.clone()),
        toml::Value::Integer(i) => Value::from(*i),
        toml::Value::Float(f) => serde_json::Number::from_f64(*f)
            .map(Value::Number)
            .ok_or_else(|| format!("`params` cannot hold {f}: JSON has no such number"))?,
        toml::Value::Boolean(b) => Value::Bool(*b),
        toml::Value::Datetime(d) => {
            return Err(format!(
                "`params` cannot hold the date-time {d}: write it as a string"
            ));
        }
        toml::Value::Array(items) => {
            Value::Array(items.iter().map(to_json).collect::<Result<_, _>>()?)
        }
        toml::Value::Table(table) => Value::Object(
            table
                .iter()
                .map(|(k, v)| Ok((k.clone(), to_json(v)?)))
                .collect::<Result<_, String>>()?,
        ),
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// The fields a `[[faults]]` table can set are exactly the fields some
    /// kind takes: a field the file type has but no kind lists would be
    /// refused for every kind, and one a kind lists but the file type lacks
    /// could never be set.
    #[test]
    fn the_fault_table_sets_exactly_the_fields_the_kinds_take() {
        let text = "[[faults]]\nfault = 'hold'\na = 'x'\nb = 'y'\nhost = 'h'\nprovider = 'p'\n\
                    oneway = true\nduration_ms = 1\nlatency_ms_max = 1\nrestart_after_ms = 1\n\
                    error_per_mille = 1\nop = 'complete'\nnth = 1\ncount = 1\nlatency_ms = 1\n\
                    offset_ms = 1\ndrift_ppm = 1\njump_ms = 1\nmodel = 'm'\n";
        let file = crate::format::parse(text).expect("every field parses");
        let present = fault_fields_present(file.faults[0].get_ref());
        for (name, span) in &present {
            assert!(span.is_some(), "{name} is set in the text but not seen");
        }
        let settable: BTreeSet<&str> = present.iter().map(|(name, _)| *name).collect();
        assert_eq!(settable.len(), present.len(), "a field is listed twice");
        let taken: BTreeSet<&str> = FaultKind::ALL
            .iter()
            .flat_map(|kind| kind.fields().iter().copied())
            .collect();
        assert_eq!(settable, taken);
    }
}
