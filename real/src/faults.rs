//! The fault vocabulary made real. [`treatment`] says, for every kind of
//! `idem_sim::scenario::FaultKind` (an exhaustive match: a new kind does
//! not compile until it has its real-mode treatment, or a refusal), how
//! real mode makes it happen without root; [`refusal`] names a fault of a
//! scenario that cannot be made real as asked, and why. The rest applies
//! each fault's effect (`idem_sim::effect`, the simulator's own decision of
//! what a fault does as it fires and heals) to the processes, links,
//! providers and store of a [`RealWorld`].

use idem_core::serve_bench::Order;
use idem_sim::effect::{ClockChange, Effect, on_fire, on_heal};
use idem_sim::scenario::{Fault, FaultKind, Scenario, host};

use super::RealError;
use super::proxy::{Direction, orientation};
use super::world::RealWorld;

/// How real mode makes one kind of fault real, or why it cannot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Treatment {
    Real(&'static str),
    Refused(&'static str),
}

/// How real mode treats `kind`.
pub fn treatment(kind: FaultKind) -> Treatment {
    match kind {
        FaultKind::LinkLatency => Treatment::Real(
            "the link's proxy delays each chunk by a draw up to latency_ms_max, in order",
        ),
        FaultKind::Hold => Treatment::Real(
            "the link's proxy delivers nothing either way, then everything when the hold ends",
        ),
        FaultKind::Partition => Treatment::Real(
            "the link's proxy drops what is sent the cut way; a stream that lost bytes is closed at the heal",
        ),
        FaultKind::Crash => Treatment::Real(
            "an engine process gets SIGKILL, the store `pg_ctl stop -m immediate`, a provider loses its runtime; \
             the links to it refuse connections until it starts again after restart_after_ms",
        ),
        FaultKind::ProviderHang | FaultKind::ProviderStall | FaultKind::ProviderError => {
            Treatment::Real("the provider server switches behaviour while it runs, and back")
        }
        FaultKind::ProviderModelChange => {
            Treatment::Real("the provider server starts serving the other model, for good")
        }
        FaultKind::StoreLoseAck => Treatment::Real(
            "the store link's proxy lets the operation's COMMIT through, drops the answer and closes",
        ),
        FaultKind::StoreFailBeforeApply => Treatment::Real(
            "the store link's proxy closes the connection before the operation's first statement",
        ),
        FaultKind::StoreLatency => {
            Treatment::Real("the store link's proxy holds the operation's first statement back")
        }
        FaultKind::ClockOffset | FaultKind::ClockDrift | FaultKind::ClockJump => Treatment::Real(
            "the engine process's realtime clock is set over its stdin (idem serve --controlled, \
                 a bench-only flag); its monotonic clock is left alone",
        ),
    }
}

/// The first fault of `scenario` real mode cannot make real, and why.
pub fn refusal(scenario: &Scenario, store_can_crash: bool) -> Option<String> {
    scenario.faults.iter().find_map(|spec| {
        let kind = spec.fault.kind();
        if let Treatment::Refused(why) = treatment(kind) {
            return Some(format!("fault {}: {why}", kind.name()));
        }
        match &spec.fault {
            Fault::Crash { host, .. } if host == host::STORE && !store_can_crash => Some(format!(
                "fault {} of host {}: real mode crashes only a PostgreSQL it started itself; \
                 leave out --database-url",
                kind.name(),
                host::STORE
            )),
            _ => None,
        }
    })
}

/// A link fault's change to the faults of one link, either way.
#[derive(Clone, Copy, Debug)]
enum LinkChange {
    Hold,
    Cut { oneway: bool },
    Latency(u64),
}

impl RealWorld {
    /// Applies `fault` now.
    pub async fn fire(&mut self, fault: &Fault) -> Result<(), RealError> {
        self.change_network(fault, true);
        self.apply(on_fire(fault)).await
    }

    /// Undoes a fault whose duration ran out.
    pub async fn heal(&mut self, fault: &Fault) -> Result<(), RealError> {
        self.change_network(fault, false);
        self.apply(on_heal(fault)).await
    }

    async fn apply(&mut self, effect: Effect<'_>) -> Result<(), RealError> {
        match effect {
            // The links' (`change_network`).
            Effect::Links | Effect::Nothing => {}
            Effect::Crash { host } => self.crash(host).await?,
            Effect::Provider { provider, change } => self.providers.change(provider, &change),
            Effect::Store(rule) => self.store_plan.plan().add(rule),
            Effect::Clock { host, change } => self.change_clock(host, change).await,
        }
        Ok(())
    }

    /// A network fault fired (`on`) or healed, on every link it names.
    fn change_network(&self, fault: &Fault, on: bool) {
        match fault {
            Fault::LinkLatency {
                a,
                b,
                latency_ms_max,
                ..
            } => self.change_links(a, b, LinkChange::Latency(*latency_ms_max), on),
            Fault::Hold { a, b, .. } => self.change_links(a, b, LinkChange::Hold, on),
            Fault::Partition { a, b, oneway, .. } => {
                self.change_links(a, b, LinkChange::Cut { oneway: *oneway }, on);
            }
            _ => {}
        }
    }

    /// Applies (or, `on = false`, undoes) a link fault between `a` and `b`
    /// on every link it names.
    fn change_links(&self, a: &str, b: &str, change: LinkChange, on: bool) {
        for link in &self.links {
            let Some(a_to_b) = orientation(link.spec(), a, b) else {
                continue;
            };
            link.update(|faults| {
                let step = |n: &mut u32| *n = if on { *n + 1 } else { n.saturating_sub(1) };
                match change {
                    LinkChange::Hold => step(&mut faults.holds),
                    LinkChange::Cut { oneway } => {
                        let (forward, back) = match a_to_b {
                            Direction::ToServer => {
                                (&mut faults.cut_to_server, &mut faults.cut_to_client)
                            }
                            Direction::ToClient => {
                                (&mut faults.cut_to_client, &mut faults.cut_to_server)
                            }
                        };
                        step(forward);
                        if !oneway {
                            step(back);
                        }
                    }
                    LinkChange::Latency(max) => {
                        if on {
                            faults.latency_ms_max.push(max);
                        } else if let Some(i) = faults.latency_ms_max.iter().position(|m| *m == max)
                        {
                            faults.latency_ms_max.remove(i);
                        }
                    }
                }
            });
        }
    }

    /// Stops `host`'s software: its links refuse new connections.
    async fn crash(&mut self, host: &str) -> Result<(), RealError> {
        self.close_links_to(host);
        if host == host::STORE {
            self.store.crash()?;
        } else if let Some(provider) = host.strip_prefix("provider-") {
            self.providers.crash(provider);
        } else {
            self.processes.kill(host).await;
        }
        Ok(())
    }

    /// Starts `host` again, and opens its links once it can answer.
    pub async fn restart(&mut self, host: &str) -> Result<(), RealError> {
        if host == host::STORE {
            self.store.restart()?;
        } else if let Some(provider) = host.strip_prefix("provider-") {
            self.providers
                .restart(provider)
                .map_err(|e| RealError::Run(format!("cannot restart {host}: {e}")))?;
        } else {
            let before = self.processes.ready_lines(host);
            self.processes.restart(host)?;
            self.resend_clock(host).await;
            if !self.processes.ready_again(host, before).await {
                return Err(RealError::Run(format!(
                    "{host} did not come back after its restart"
                )));
            }
        }
        self.open_links_to(host).await
    }

    fn close_links_to(&self, host: &str) {
        for link in self.links.iter().filter(|l| l.spec().server == host) {
            link.close();
        }
    }

    async fn open_links_to(&self, host: &str) -> Result<(), RealError> {
        for link in self.links.iter().filter(|l| l.spec().server == host) {
            link.reopen()
                .await
                .map_err(|e| RealError::Run(format!("cannot listen for {host} again: {e}")))?;
        }
        Ok(())
    }

    /// Changes `host`'s clock error now and tells its process.
    async fn change_clock(&mut self, host: &str, change: ClockChange) {
        let now_us = self.clock.elapsed_us();
        change.apply(self.skews.entry(host.to_owned()).or_default(), now_us);
        self.resend_clock(host).await;
    }

    /// Tells `host`'s process its clock error as it stands now.
    async fn resend_clock(&mut self, host: &str) {
        let Some(skew) = self.skews.get(host) else {
            return;
        };
        let now_us = self.clock.elapsed_us();
        let offset_us = skew.error_us(now_us);
        // The drift is the error gained over one second of true time.
        let drift_ppm = skew.error_us(now_us + 1_000_000) - offset_us;
        let order = Order::Clock {
            offset_us,
            drift_ppm,
        };
        let line = serde_json::to_string(&order).expect("an order serializes");
        self.processes.send(host, &line).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_made_real() {
        for &kind in FaultKind::ALL {
            assert!(
                matches!(treatment(kind), Treatment::Real(how) if !how.is_empty()),
                "{kind:?}"
            );
        }
    }
}
