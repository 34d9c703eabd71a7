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
use idem_sim::decisions::Decisions;
use idem_sim::effect::{ProviderChange, change_provider};
use idem_sim::scenario::Scenario;
use idem_sim::world::{ProviderChooser, execution_observer, provider_profiles};

use super::clock::RunClock;
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
    /// the simulator seeds them, each execution recorded in the trace and
    /// each random choice through `decisions`.
    pub fn start(
        scenario: &Scenario,
        seed: u64,
        recorder: &RealRecorder,
        decisions: &Decisions,
        clock: RunClock,
    ) -> std::io::Result<Self> {
        let mut providers = Self::default();
        for (name, behaviour) in provider_profiles(scenario, seed) {
            let server = ProviderServer::named(&name, behaviour.clone());
            server.set_observer(execution_observer(recorder.clone(), &name));
            if decisions.is_on() {
                server.set_chooser(Arc::new(ProviderChooser {
                    decisions: decisions.clone(),
                    time: clock.clone(),
                }));
            }
            let listener = super::ports::bind()?;
            let address = listener.local_addr()?;
            let running = serve(&name, listener, server.clone())?;
            providers.by_name.insert(
                name,
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

    /// Changes provider `name`'s behaviour now (or back to its profile).
    pub fn change(&mut self, name: &str, change: &ProviderChange) {
        if let Some(provider) = self.by_name.get_mut(name) {
            change_provider(&provider.server, &mut provider.profile, change);
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
