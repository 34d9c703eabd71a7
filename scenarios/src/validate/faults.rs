//! The `[[faults]]` sections: when each fires and what it does, one
//! fault per host a wildcard stands for.

use std::collections::BTreeSet;
use std::ops::Range;

use serde_spanned::Spanned;

use idem_sim::scenario::{
    CLOCK_DRIFT_PPM_MAX, CLOCK_OFFSET_MS_MAX, ClientSpec, FAULTS_MAX, Fault, FaultKind, FaultSpec,
    Timing, Topology, When,
};

use super::hosts::Hosts;
use super::{Checker, defaults, value};
use crate::format::{FaultFile, Field, ScenarioFile};

impl Checker {
    pub(super) fn faults(
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
        Some(self.positive_ms(&f.duration_ms, "duration_ms", d))
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
        Some(self.ms(&f.latency_ms_max, "latency_ms_max", max))
    }

    /// A crash of every server `host` stands for; clients cannot crash.
    fn crash_faults(&mut self, f: &FaultFile, hosts: &Hosts) -> Vec<Fault> {
        let at = &f.fault;
        let targets = self.hosts(&f.host, "host", FaultKind::Crash, at, hosts);
        let restart_after_ms = f
            .restart_after_ms
            .as_ref()
            .map(|_| self.positive_ms(&f.restart_after_ms, "restart_after_ms", 1));
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
        if let Some(m) = &f.model {
            self.model_name(m);
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
                .map(|l| self.ms(&f.latency_ms, "latency_ms", l))
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
            .map(|_| self.positive_ms(&f.duration_ms, "duration_ms", 1));
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
            faults.push(clock(kind, host, amount, duration_ms));
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

/// A clock fault of `kind` on `host`, moving its clock by `amount`.
fn clock(kind: FaultKind, host: String, amount: i64, duration_ms: Option<u64>) -> Fault {
    match kind {
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
    }
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
