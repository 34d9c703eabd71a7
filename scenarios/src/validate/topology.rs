//! The `[topology]`, `[worker]`, `[reconciler]` and `[[providers]]`
//! sections.

use std::collections::BTreeSet;

use serde_spanned::Spanned;

use idem_contract::tokenizer::TokenizerProfile;
use idem_core::provider::server::Behaviour;
use idem_sim::scenario::{API_REPLICAS_MAX, PROVIDERS_MAX, ProviderProfile, Topology, WORKERS_MAX};

use super::{
    CONTEXT_WINDOW_TOKENS_MAX, Checker, DEVIATE_ONE_IN_MAX, RECONCILER_ATTEMPTS_PER_PASS_LIMIT,
    WORKER_ATTEMPTS_MAX, WORKER_JOBS_PER_TICK_LIMIT, value,
};
use crate::format::{ProviderTable, ReconcilerFile, ScenarioFile, TopologyFile, WorkerFile};

impl Checker {
    pub(super) fn topology(&mut self, file: &ScenarioFile) -> Topology {
        let mut topology = Topology::default();
        if let Some(t) = &file.topology {
            self.sizes(t.get_ref(), &mut topology);
        }
        if let Some(w) = &file.worker {
            self.worker(w.get_ref(), &mut topology);
        }
        if let Some(r) = &file.reconciler {
            self.reconciler(r.get_ref(), &mut topology);
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

    /// `[topology]`: how many of each server, and the store's timeout.
    fn sizes(&mut self, t: &TopologyFile, topology: &mut Topology) {
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
        topology.store_timeout_ms = self.positive_ms(
            &t.store_timeout_ms,
            "store_timeout_ms",
            topology.store_timeout_ms,
        );
    }

    fn worker(&mut self, w: &WorkerFile, topology: &mut Topology) {
        let c = &mut topology.worker;
        c.poll_interval_ms =
            self.positive_ms(&w.poll_interval_ms, "poll_interval_ms", c.poll_interval_ms);
        c.connect_timeout_ms = self.positive_ms(
            &w.connect_timeout_ms,
            "connect_timeout_ms",
            c.connect_timeout_ms,
        );
        c.attempt_deadline_ms = self.positive_ms(
            &w.attempt_deadline_ms,
            "attempt_deadline_ms",
            c.attempt_deadline_ms,
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

    fn reconciler(&mut self, r: &ReconcilerFile, topology: &mut Topology) {
        let c = &mut topology.reconciler_config;
        c.poll_interval_ms =
            self.positive_ms(&r.poll_interval_ms, "poll_interval_ms", c.poll_interval_ms);
        c.starting_stale_ms = self.positive_ms(
            &r.starting_stale_ms,
            "starting_stale_ms",
            c.starting_stale_ms,
        );
        c.running_stale_ms =
            self.positive_ms(&r.running_stale_ms, "running_stale_ms", c.running_stale_ms);
        c.unknown_max_ms = self.positive_ms(&r.unknown_max_ms, "unknown_max_ms", c.unknown_max_ms);
        c.attempts_per_pass_max = self.bounded(
            &r.attempts_per_pass_max,
            "attempts_per_pass_max",
            c.attempts_per_pass_max,
            1,
            RECONCILER_ATTEMPTS_PER_PASS_LIMIT,
            "",
        );
        c.provider_call_timeout_ms = self.positive_ms(
            &r.provider_call_timeout_ms,
            "provider_call_timeout_ms",
            c.provider_call_timeout_ms,
        );
    }

    fn providers(
        &mut self,
        files: &[Spanned<ProviderTable>],
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
            let base = base_profile(&name, defaults);
            if let Some(m) = &p.model {
                self.model_name(m);
            }
            profiles.push(ProviderProfile {
                name,
                model: value(&p.model, base.model.clone()),
                behaviour: self.behaviour(p, &base.behaviour),
                certified: value(&p.certified, base.certified),
                tokenizer: self.tokenizer(p, &base.tokenizer),
            });
        }
        profiles
    }

    /// A provider's behaviour: the file's fields over `b`.
    fn behaviour(&mut self, p: &ProviderTable, b: &Behaviour) -> Behaviour {
        Behaviour {
            latency_ms: self.ms(&p.latency_ms, "latency_ms", b.latency_ms),
            latency_jitter_ms: self.ms(
                &p.latency_jitter_ms,
                "latency_jitter_ms",
                b.latency_jitter_ms,
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
            honour_idempotency_keys: value(&p.honour_idempotency_keys, b.honour_idempotency_keys),
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
        }
    }

    /// The certifier's view of a provider's tokenizer: the file's fields
    /// over `t`.
    fn tokenizer(&mut self, p: &ProviderTable, t: &TokenizerProfile) -> TokenizerProfile {
        TokenizerProfile {
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
        }
    }
}

/// What a provider named `name` starts from: the default provider of that
/// name, or else the first default's behaviour, uncertified.
fn base_profile(name: &str, defaults: &[ProviderProfile]) -> ProviderProfile {
    defaults
        .iter()
        .find(|d| d.name == name)
        .cloned()
        .unwrap_or_else(|| ProviderProfile {
            name: name.to_owned(),
            model: format!("{name}-model"),
            behaviour: defaults
                .first()
                .map(|d| d.behaviour.clone())
                .unwrap_or_default(),
            certified: false,
            tokenizer: TokenizerProfile::default(),
        })
}
