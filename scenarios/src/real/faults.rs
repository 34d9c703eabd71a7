//! The fault vocabulary made real. [`treatment`] says, for every kind of
//! `idem_sim::scenario::FaultKind` (an exhaustive match: a new kind does
//! not compile until it has its real-mode treatment, or a refusal), how
//! real mode makes it happen without root; [`refusal`] names a fault of a
//! scenario that cannot be made real as asked, and why. The rest fires,
//! heals and restarts, on the processes, links, providers and store of a
//! [`RealWorld`].

use idem_core::serve_bench::Order;
use idem_core::store::faults::{FaultRule, StoreFault};
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

/// Something the driver does at a time: the simulator's steps, one
/// vocabulary for both drivers (`Bounce` restarts a crashed host).
pub use idem_sim::faults::Step;

/// What a fired fault leaves for later, and how many milliseconds after it
/// fired: its heal, or the restart of a crashed host; `None` for a fault
/// that stays (a store rule runs out by count).
pub fn aftermath(fault: &Fault) -> Option<(u64, Step)> {
    let heal_after = |duration_ms: &u64| (*duration_ms, Step::Heal(fault.clone()));
    match fault {
        Fault::LinkLatency { duration_ms, .. }
        | Fault::Hold { duration_ms, .. }
        | Fault::Partition { duration_ms, .. }
        | Fault::ProviderHang { duration_ms, .. }
        | Fault::ProviderStall { duration_ms, .. }
        | Fault::ProviderError { duration_ms, .. } => Some(heal_after(duration_ms)),
        Fault::ClockOffset { duration_ms, .. } | Fault::ClockDrift { duration_ms, .. } => {
            duration_ms.as_ref().map(heal_after)
        }
        Fault::Crash {
            host,
            restart_after_ms,
        } => restart_after_ms.map(|after_ms| (after_ms, Step::Bounce(host.clone()))),
        Fault::ProviderModelChange { .. }
        | Fault::StoreLoseAck { .. }
        | Fault::StoreFailBeforeApply { .. }
        | Fault::StoreLatency { .. }
        | Fault::ClockJump { .. } => None,
    }
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
        match fault {
            Fault::LinkLatency {
                a,
                b,
                latency_ms_max,
                ..
            } => self.change_links(a, b, LinkChange::Latency(*latency_ms_max), true),
            Fault::Hold { a, b, .. } => self.change_links(a, b, LinkChange::Hold, true),
            Fault::Partition { a, b, oneway, .. } => {
                self.change_links(a, b, LinkChange::Cut { oneway: *oneway }, true);
            }
            Fault::Crash { host, .. } => self.crash(host).await?,
            Fault::ProviderHang { .. }
            | Fault::ProviderStall { .. }
            | Fault::ProviderError { .. }
            | Fault::ProviderModelChange { .. } => self.fire_provider(fault),
            Fault::StoreLoseAck { .. }
            | Fault::StoreFailBeforeApply { .. }
            | Fault::StoreLatency { .. } => self.arm(fault),
            Fault::ClockOffset { .. } | Fault::ClockDrift { .. } | Fault::ClockJump { .. } => {
                self.fire_clock(fault).await;
            }
        }
        Ok(())
    }

    /// A provider fault: the server switches behaviour now.
    fn fire_provider(&mut self, fault: &Fault) {
        match fault {
            Fault::ProviderHang { provider, .. } => {
                self.providers.change(provider, |b| b.hang = true)
            }
            Fault::ProviderStall { provider, .. } => {
                self.providers.change(provider, |b| b.stall = true);
            }
            Fault::ProviderError {
                provider,
                error_per_mille,
                ..
            } => {
                let rate = *error_per_mille;
                self.providers
                    .change(provider, |b| b.error_per_mille = rate);
            }
            Fault::ProviderModelChange { provider, model } => {
                let served = Some(model.clone());
                self.providers
                    .change_profile(provider, |b| b.served_model.clone_from(&served));
                self.providers.change(provider, |b| b.served_model = served);
            }
            // Not a provider fault: see `fire`.
            _ => {}
        }
    }

    /// A store fault: a rule of the plan the store links apply.
    fn arm(&self, fault: &Fault) {
        let (op, fault, nth, count) = match fault {
            Fault::StoreLoseAck { op, nth, count } => (*op, StoreFault::LoseAck, *nth, *count),
            Fault::StoreFailBeforeApply { op, nth, count } => {
                (*op, StoreFault::FailBeforeApply, *nth, *count)
            }
            Fault::StoreLatency {
                op,
                nth,
                count,
                latency_ms,
            } => (
                *op,
                StoreFault::Latency {
                    latency_ms: *latency_ms,
                },
                *nth,
                *count,
            ),
            // Not a store fault: see `fire`.
            _ => return,
        };
        self.store_plan.plan().add(FaultRule {
            op,
            fault,
            first: nth,
            count,
        });
    }

    /// A clock fault: the host's realtime clock changes now.
    async fn fire_clock(&mut self, fault: &Fault) {
        match fault {
            Fault::ClockOffset {
                host, offset_ms, ..
            } => {
                let offset_us = offset_ms.saturating_mul(1000);
                self.change_clock(host, |skew, now_us| skew.set_offset(now_us, offset_us))
                    .await;
            }
            Fault::ClockDrift {
                host, drift_ppm, ..
            } => {
                let ppm = *drift_ppm;
                self.change_clock(host, |skew, now_us| skew.set_drift(now_us, ppm))
                    .await;
            }
            Fault::ClockJump { host, jump_ms } => {
                let by_us = jump_ms.saturating_mul(1000);
                self.change_clock(host, |skew, now_us| skew.jump(now_us, by_us))
                    .await;
            }
            // Not a clock fault: see `fire`.
            _ => {}
        }
    }

    /// Undoes a fault whose duration ran out (see [`aftermath`]).
    pub async fn heal(&mut self, fault: &Fault) {
        match fault {
            Fault::LinkLatency {
                a,
                b,
                latency_ms_max,
                ..
            } => self.change_links(a, b, LinkChange::Latency(*latency_ms_max), false),
            Fault::Hold { a, b, .. } => self.change_links(a, b, LinkChange::Hold, false),
            Fault::Partition { a, b, oneway, .. } => {
                self.change_links(a, b, LinkChange::Cut { oneway: *oneway }, false);
            }
            Fault::ProviderHang { provider, .. }
            | Fault::ProviderStall { provider, .. }
            | Fault::ProviderError { provider, .. } => self.providers.restore(provider),
            // Healed: stepped back to true time, as NTP would.
            Fault::ClockOffset { host, .. } => {
                self.change_clock(host, |skew, now_us| skew.resync(now_us))
                    .await;
            }
            Fault::ClockDrift { host, .. } => {
                self.change_clock(host, |skew, now_us| {
                    skew.set_drift(now_us, 0);
                    skew.resync(now_us);
                })
                .await;
            }
            Fault::Crash { .. }
            | Fault::ProviderModelChange { .. }
            | Fault::StoreLoseAck { .. }
            | Fault::StoreFailBeforeApply { .. }
            | Fault::StoreLatency { .. }
            | Fault::ClockJump { .. } => {}
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
    async fn change_clock(
        &mut self,
        host: &str,
        change: impl FnOnce(&mut idem_sim::net::Skew, i64),
    ) {
        let now_us = self.clock.elapsed_us();
        change(self.skews.entry(host.to_owned()).or_default(), now_us);
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
