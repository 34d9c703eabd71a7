//! What a fault does, in terms every world has: its links, a host that
//! crashes, a provider's behaviour, the store's fault plan, a host's
//! clock. The simulator ([`crate::faults`]) and real mode each apply an
//! [`Effect`] their own way (turmoil and the in-process store; proxies,
//! processes and PostgreSQL), but which effect a fault has when it fires
//! and when it heals is decided here, once.

use idem_core::provider::server::{Behaviour, ProviderServer};
use idem_core::store::faults::{FaultRule, StoreFault};

use crate::net::Skew;
use crate::scenario::Fault;

/// A fault's effect on a world, as it fires or heals.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect<'a> {
    /// The links between two hosts change (a hold, a partition, a latency):
    /// the world's network model applies the fault itself.
    Links,
    /// The host's software stops.
    Crash { host: &'a str },
    /// The provider's behaviour changes.
    Provider {
        provider: &'a str,
        change: ProviderChange,
    },
    /// A rule joins the store's fault plan.
    Store(FaultRule),
    /// The host's realtime clock changes.
    Clock { host: &'a str, change: ClockChange },
    /// Nothing (a heal of a fault that stays, or restarts instead).
    Nothing,
}

/// A change of a provider's behaviour.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProviderChange {
    Hang,
    Stall,
    ErrorPerMille(u32),
    /// Serves this model from now on, for good: a heal of another fault
    /// restores the profile, which now names the new model too.
    ServeModel(String),
    /// Back to the profile the scenario gave it.
    Restore,
}

/// A change of a host's realtime clock, at a moment of true time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClockChange {
    OffsetUs(i64),
    DriftPpm(i64),
    JumpUs(i64),
    /// Stepped back to true time, as NTP would.
    Resync,
    /// The drift stops and the clock is stepped back.
    StopDrift,
}

impl ClockChange {
    /// Applies the change to `skew` at true time `now_us`.
    pub fn apply(self, skew: &mut Skew, now_us: i64) {
        match self {
            ClockChange::OffsetUs(offset_us) => skew.set_offset(now_us, offset_us),
            ClockChange::DriftPpm(ppm) => skew.set_drift(now_us, ppm),
            ClockChange::JumpUs(by_us) => skew.jump(now_us, by_us),
            ClockChange::Resync => skew.resync(now_us),
            ClockChange::StopDrift => {
                skew.set_drift(now_us, 0);
                skew.resync(now_us);
            }
        }
    }
}

/// What `fault` does as it fires.
pub fn on_fire(fault: &Fault) -> Effect<'_> {
    let store = |op, fault, first, count| {
        Effect::Store(FaultRule {
            op,
            fault,
            first,
            count,
        })
    };
    match fault {
        Fault::LinkLatency { .. } | Fault::Hold { .. } | Fault::Partition { .. } => Effect::Links,
        Fault::Crash { host, .. } => Effect::Crash { host },
        Fault::ProviderHang { provider: p, .. } => provider(p, ProviderChange::Hang),
        Fault::ProviderStall { provider: p, .. } => provider(p, ProviderChange::Stall),
        Fault::ProviderError {
            provider: p,
            error_per_mille,
            ..
        } => provider(p, ProviderChange::ErrorPerMille(*error_per_mille)),
        Fault::ProviderModelChange { provider: p, model } => {
            provider(p, ProviderChange::ServeModel(model.clone()))
        }
        Fault::StoreLoseAck { op, nth, count } => store(*op, StoreFault::LoseAck, *nth, *count),
        Fault::StoreFailBeforeApply { op, nth, count } => {
            store(*op, StoreFault::FailBeforeApply, *nth, *count)
        }
        Fault::StoreLatency {
            op,
            nth,
            count,
            latency_ms,
        } => {
            let latency_ms = *latency_ms;
            store(*op, StoreFault::Latency { latency_ms }, *nth, *count)
        }
        Fault::ClockOffset {
            host, offset_ms, ..
        } => clock(host, ClockChange::OffsetUs(offset_ms.saturating_mul(1000))),
        Fault::ClockDrift {
            host, drift_ppm, ..
        } => clock(host, ClockChange::DriftPpm(*drift_ppm)),
        Fault::ClockJump { host, jump_ms } => {
            clock(host, ClockChange::JumpUs(jump_ms.saturating_mul(1000)))
        }
    }
}

fn provider(provider: &str, change: ProviderChange) -> Effect<'_> {
    Effect::Provider { provider, change }
}

fn clock(host: &str, change: ClockChange) -> Effect<'_> {
    Effect::Clock { host, change }
}

/// What `fault` does as its duration runs out. Faults without a heal
/// (a crash, which restarts instead; the store's rules, which run out by
/// count; model changes and clock jumps, which stay) do nothing.
pub fn on_heal(fault: &Fault) -> Effect<'_> {
    match fault {
        Fault::LinkLatency { .. } | Fault::Hold { .. } | Fault::Partition { .. } => Effect::Links,
        Fault::ProviderHang { provider, .. }
        | Fault::ProviderStall { provider, .. }
        | Fault::ProviderError { provider, .. } => Effect::Provider {
            provider,
            change: ProviderChange::Restore,
        },
        Fault::ClockOffset { host, .. } => Effect::Clock {
            host,
            change: ClockChange::Resync,
        },
        Fault::ClockDrift { host, .. } => Effect::Clock {
            host,
            change: ClockChange::StopDrift,
        },
        Fault::Crash { .. }
        | Fault::ProviderModelChange { .. }
        | Fault::StoreLoseAck { .. }
        | Fault::StoreFailBeforeApply { .. }
        | Fault::StoreLatency { .. }
        | Fault::ClockJump { .. } => Effect::Nothing,
    }
}

/// Changes a running provider `server` whose scenario profile is
/// `profile` (what [`ProviderChange::Restore`] goes back to).
pub fn change_provider(server: &ProviderServer, profile: &mut Behaviour, change: &ProviderChange) {
    let mut behaviour = server.behaviour();
    match change {
        ProviderChange::Hang => behaviour.hang = true,
        ProviderChange::Stall => behaviour.stall = true,
        ProviderChange::ErrorPerMille(rate) => behaviour.error_per_mille = *rate,
        ProviderChange::ServeModel(model) => {
            profile.served_model = Some(model.clone());
            behaviour.served_model = Some(model.clone());
        }
        ProviderChange::Restore => behaviour = profile.clone(),
    }
    server.set_behaviour(behaviour);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::FaultKind;

    #[test]
    fn a_provider_fault_heals_back_to_a_profile_that_keeps_a_model_change() {
        let server = ProviderServer::named("p", Behaviour::default());
        let mut profile = Behaviour::default();
        change_provider(&server, &mut profile, &ProviderChange::Hang);
        assert!(server.behaviour().hang);
        change_provider(
            &server,
            &mut profile,
            &ProviderChange::ServeModel("m2".into()),
        );
        change_provider(&server, &mut profile, &ProviderChange::Restore);
        assert!(!server.behaviour().hang);
        assert_eq!(server.behaviour().served_model.as_deref(), Some("m2"));
    }

    #[test]
    fn only_faults_with_a_duration_heal() {
        let crash = Fault::Crash {
            host: "api-1".into(),
            restart_after_ms: Some(5),
        };
        assert_eq!(on_fire(&crash), Effect::Crash { host: "api-1" });
        assert_eq!(on_heal(&crash), Effect::Nothing);
        let jump = Fault::ClockJump {
            host: "worker-1".into(),
            jump_ms: -3,
        };
        assert_eq!(
            on_fire(&jump),
            Effect::Clock {
                host: "worker-1",
                change: ClockChange::JumpUs(-3_000)
            }
        );
        assert_eq!(jump.kind(), FaultKind::ClockJump);
        assert_eq!(on_heal(&jump), Effect::Nothing);
    }
}
