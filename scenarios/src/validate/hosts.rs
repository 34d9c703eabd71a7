//! The hosts of a topology that faults may name.

use std::collections::BTreeSet;

use idem_sim::scenario::{ClientSpec, Topology, host};

/// The hosts faults may name, and how wildcards expand.
pub(super) struct Hosts {
    all: BTreeSet<String>,
    apis: Vec<String>,
    workers: Vec<String>,
    pub(super) clients: BTreeSet<String>,
    /// The hosts whose software reads a clock (the engine's hosts).
    pub(super) clocked: BTreeSet<String>,
}

impl Hosts {
    pub(super) fn new(topology: &Topology, clients: &[ClientSpec]) -> Self {
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
    pub(super) fn expand(&self, name: &str) -> Result<Vec<String>, String> {
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
