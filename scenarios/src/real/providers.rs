//! The scenario's providers as real HTTP servers: the provider test
//! server of idem-core (`provider::server`, the simulator's), each on a
//! loopback port and a runtime of its own, with the scenario's behaviour
//! and its ledger of every execution. A provider fault switches its
//! behaviour while it runs; a crash drops its runtime, and with it every
//! connection and every execution still working (the ledger, like the
//! simulator's, outlives the crash); a restart serves again on the same
//! port.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use idem_core::provider::server::{Behaviour, Execution, ProviderServer};
use idem_sim::net::child_seed;
use idem_sim::scenario::{Scenario, host};
use idem_sim::trace::TraceBody;

use super::recorder::RealRecorder;

/// One provider: its server (behaviour and ledger) and, while it is up,
/// the thread that serves it.
#[derive(Debug)]
struct Provider {
    server: ProviderServer,
    /// The behaviour the scenario gave it, restored when a fault heals.
    profile: Behaviour,
    address: SocketAddr,
    running: Option<Running>,
}

#[derive(Debug)]
struct Running {
    stop: tokio::sync::oneshot::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

/// Every provider of the run.
#[derive(Debug, Default)]
pub struct Providers {
    by_name: BTreeMap<String, Provider>,
}

/// Serves `server` on `listener` on a runtime of its own until `stop`.
fn serve(
    name: &str,
    listener: std::net::TcpListener,
    server: ProviderServer,
) -> std::io::Result<Running> {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    listener.set_nonblocking(true)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let thread = std::thread::Builder::new()
        .name(format!("provider-{name}"))
        .spawn(move || {
            runtime.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                    return;
                };
                tokio::select! {
                    _ = idem_core::provider::server::serve(listener, server) => {}
                    _ = stopped => {}
                }
            });
            // Dropping the runtime drops every connection and every
            // execution still in progress: the crash.
        })?;
    Ok(Running { stop, thread })
}

impl Providers {
    /// Starts every provider of `scenario`, seeded from the run's seed as
    /// the simulator seeds them, each execution recorded in the trace.
    pub fn start(scenario: &Scenario, seed: u64, recorder: &RealRecorder) -> std::io::Result<Self> {
        let mut providers = Self::default();
        for profile in &scenario.topology.providers {
            let mut behaviour = profile.behaviour.clone();
            behaviour.seed =
                child_seed(seed ^ behaviour.seed, &format!("provider/{}", profile.name));
            let server = ProviderServer::named(&profile.name, behaviour.clone());
            let (recorder, name) = (recorder.clone(), profile.name.clone());
            let lane = host::provider(&profile.name);
            server.set_observer(Arc::new(move |execution: &Execution| {
                recorder.record(&lane, TraceBody::provider_execution(&name, execution));
            }));
            let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
            let address = listener.local_addr()?;
            let running = serve(&profile.name, listener, server.clone())?;
            providers.by_name.insert(
                profile.name.clone(),
                Provider {
                    server,
                    profile: behaviour,
                    address,
                    running: Some(running),
                },
            );
        }
        Ok(providers)
    }

    /// Where provider `name` listens.
    pub fn address(&self, name: &str) -> Option<SocketAddr> {
        self.by_name.get(name).map(|p| p.address)
    }

    /// Changes provider `name`'s behaviour now.
    pub fn change(&self, name: &str, change: impl FnOnce(&mut Behaviour)) {
        if let Some(provider) = self.by_name.get(name) {
            let mut behaviour = provider.server.behaviour();
            change(&mut behaviour);
            provider.server.set_behaviour(behaviour);
        }
    }

    /// Changes what provider `name` returns to when a fault heals.
    pub fn change_profile(&mut self, name: &str, change: impl FnOnce(&mut Behaviour)) {
        if let Some(provider) = self.by_name.get_mut(name) {
            change(&mut provider.profile);
        }
    }

    /// Puts provider `name` back to its profile.
    pub fn restore(&self, name: &str) {
        if let Some(provider) = self.by_name.get(name) {
            provider.server.set_behaviour(provider.profile.clone());
        }
    }

    /// Crashes provider `name`: its server and all its work stop.
    pub fn crash(&mut self, name: &str) {
        if let Some(running) = self.by_name.get_mut(name).and_then(|p| p.running.take()) {
            let _ = running.stop.send(());
            let _ = running.thread.join();
        }
    }

    /// Serves provider `name` again, on its port, with its ledger.
    pub fn restart(&mut self, name: &str) -> std::io::Result<()> {
        let Some(provider) = self.by_name.get_mut(name) else {
            return Ok(());
        };
        if provider.running.is_none() {
            let listener = std::net::TcpListener::bind(provider.address)?;
            provider.running = Some(serve(name, listener, provider.server.clone())?);
        }
        Ok(())
    }

    /// Every provider's ledger.
    pub fn ledgers(&self) -> BTreeMap<String, Vec<Execution>> {
        self.by_name
            .iter()
            .map(|(name, p)| (name.clone(), p.server.executions()))
            .collect()
    }

    /// Stops every provider.
    pub fn stop(&mut self) {
        let names: Vec<String> = self.by_name.keys().cloned().collect();
        for name in names {
            self.crash(&name);
        }
    }
}

impl Drop for Providers {
    fn drop(&mut self) {
        self.stop();
    }
}
