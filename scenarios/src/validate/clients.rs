//! The `[[clients]]` sections and their actions.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use serde_json::Value;
use serde_spanned::Spanned;

use idem_model::model::{IDEMPOTENCY_KEY_LEN_MAX, JobRequest};
use idem_sim::scenario::{
    ACTIONS_PER_CLIENT_MAX, Action, CLIENTS_MAX, ClientSpec, RETRIES_MAX, Timing, Topology,
};

use super::{Checker, PARAMS_LEN_MAX_BYTES, defaults, value};
use crate::format::{ActionFile, ActionKind, ClientFile, Jitter, ScenarioFile};

/// The keys each client clicks with, by client name: what its backups
/// and gets, and other clients' probes, may name.
type Clicked<'a> = BTreeMap<&'a str, BTreeSet<&'a str>>;

impl Checker {
    pub(super) fn clients(
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
            if !seen.insert(c.name.get_ref().clone()) {
                self.error(
                    c.name.span(),
                    format!("client {:?} is already defined", c.name.get_ref()),
                );
            }
            specs.push(self.client(c, topology, timing));
        }
        let clicked = clicked_keys(file);
        for client in &file.clients {
            let c = client.get_ref();
            for action in &c.actions {
                self.job_reference(c.name.get_ref(), action.get_ref(), &clicked);
            }
        }
        specs
    }

    fn client(&mut self, c: &ClientFile, topology: &Topology, timing: &Timing) -> ClientSpec {
        let name = c.name.get_ref().clone();
        let owner = value(&c.owner, name.clone());
        if let Some(o) = &c.owner {
            self.name(o, "owner");
        }
        let mut spec = ClientSpec::new(&name, &owner);
        spec.request_timeout_ms = self.positive_ms(
            &c.request_timeout_ms,
            "request_timeout_ms",
            spec.request_timeout_ms,
        );
        spec.await_outcome = value(&c.await_outcome, spec.await_outcome);
        spec.actions = self.actions(c, topology, timing);
        spec
    }

    /// A backup, get or probe by client `me` names a job some click makes:
    /// its own for a backup or get, another client's for a probe.
    fn job_reference(&mut self, me: &str, a: &ActionFile, clicked: &Clicked<'_>) {
        let key = a.key.get_ref().as_str();
        match a.action.get_ref() {
            ActionKind::Click => {}
            ActionKind::Backup | ActionKind::Get => {
                if !clicked.get(me).is_some_and(|keys| keys.contains(key)) {
                    let verb = if *a.action.get_ref() == ActionKind::Get {
                        "get"
                    } else {
                        "back up"
                    };
                    self.error(
                        a.key.span(),
                        format!("client {me:?} never clicks with key {key:?}, so it has no job to {verb}"),
                    );
                }
            }
            ActionKind::Probe => {
                let Some(of) = &a.of else { return };
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

    /// A click's fallbacks: known providers, none twice in the request.
    fn fallbacks(
        &mut self,
        a: &ActionFile,
        provider: &str,
        providers: &BTreeSet<&str>,
    ) -> Vec<String> {
        let mut fallbacks = Vec::new();
        for f in a.fallbacks.iter().flat_map(|f| f.get_ref()) {
            self.provider_ref(f, providers);
            if f.get_ref() == provider || fallbacks.contains(f.get_ref()) {
                self.error(
                    f.span(),
                    format!("provider {:?} is already in this request", f.get_ref()),
                );
            }
            fallbacks.push(f.get_ref().clone());
        }
        fallbacks
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

    fn action(
        &mut self,
        a: &ActionFile,
        providers: &BTreeSet<&str>,
        topology: &Topology,
        timing: &Timing,
    ) -> Option<Action> {
        let kind = *a.action.get_ref();
        self.only(
            kind.name(),
            "action",
            &action_fields_present(a),
            action_fields_taken(kind),
        );
        self.key(&a.key);
        let key = a.key.get_ref().clone();
        let at_ms = self.ms(&a.at_ms, "at_ms", 0);
        let (at_ms, jitter_ms) = self.jittered(a, at_ms, timing);
        match kind {
            ActionKind::Click => Some(self.click(a, providers, topology, at_ms, jitter_ms)),
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

    /// A click: a create request to a provider (the topology's first
    /// unless named) with its fallbacks, retried as the file says.
    fn click(
        &mut self,
        a: &ActionFile,
        providers: &BTreeSet<&str>,
        topology: &Topology,
        at_ms: u64,
        jitter_ms: u64,
    ) -> Action {
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
        let fallbacks = self.fallbacks(a, &provider, providers);
        let params = match &a.params {
            None => Value::Object(serde_json::Map::new()),
            Some(p) => self.params(p),
        };
        Action::Create {
            at_ms,
            jitter_ms,
            key: a.key.get_ref().clone(),
            request: JobRequest {
                provider,
                fallbacks,
                params,
            },
            retries: self.bounded(
                &a.retries,
                "retries",
                defaults::RETRIES,
                0,
                RETRIES_MAX,
                " (RETRIES_MAX)",
            ),
            retry_after_ms: self.ms(
                &a.retry_after_ms,
                "retry_after_ms",
                defaults::RETRY_AFTER_MS,
            ),
        }
    }

    /// The runtime's jitter is a delay of `0..=jitter_ms` after `at_ms`; a
    /// range `[lo, hi]` becomes `at_ms + lo` with a jitter of `hi - lo`.
    fn jittered(&mut self, a: &ActionFile, at_ms: u64, timing: &Timing) -> (u64, u64) {
        let jitter = a.jitter_ms.as_ref().map_or(
            Jitter {
                min_ms: 0,
                max_ms: 0,
            },
            |j| *j.get_ref(),
        );
        let what = a.action.get_ref().name();
        match jitter_window(what, at_ms, jitter, timing.settle_ms) {
            Ok(window) => window,
            Err(message) => {
                let span = a
                    .jitter_ms
                    .as_ref()
                    .map(Spanned::span)
                    .or(a.at_ms.as_ref().map(Spanned::span))
                    .unwrap_or_else(|| a.action.span());
                self.error(span, message);
                (at_ms, 0)
            }
        }
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
}

/// Where an action `what` at `at_ms` may happen with `jitter`: its first
/// millisecond and the width of its window, or why the jitter moves it out
/// of the run (before it starts, or at or after `settle_ms`).
fn jitter_window(
    what: &str,
    at_ms: u64,
    jitter: Jitter,
    settle_ms: u64,
) -> Result<(u64, u64), String> {
    let (min_ms, max_ms) = (jitter.min_ms, jitter.max_ms);
    if min_ms > max_ms {
        return Err(format!(
            "the jitter range [{min_ms}, {max_ms}] runs backwards"
        ));
    }
    let earliest = i128::from(at_ms) + i128::from(min_ms);
    let latest = i128::from(at_ms) + i128::from(max_ms);
    if earliest < 0 {
        return Err(format!(
            "the jitter can move this {what} to {earliest} ms, before the run starts"
        ));
    }
    if latest >= i128::from(settle_ms) {
        return Err(format!(
            "this {what} can happen at {latest} ms, at or after settle_ms ({settle_ms})"
        ));
    }
    let start = u64::try_from(earliest).expect("checked non-negative and below settle_ms");
    let width = u64::try_from(latest - earliest).expect("checked non-negative and below settle_ms");
    Ok((start, width))
}

/// The keys each client clicks with.
fn clicked_keys(file: &ScenarioFile) -> Clicked<'_> {
    file.clients
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
        .collect()
}

/// Every optional field an action can set, with where it is set.
fn action_fields_present(a: &ActionFile) -> [(&'static str, Option<Range<usize>>); 7] {
    [
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
    ]
}

/// The fields an action of `kind` takes.
fn action_fields_taken(kind: ActionKind) -> &'static [&'static str] {
    match kind {
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
    }
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
