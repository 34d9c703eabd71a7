//! The `[timing]` and `[policy]` sections.

use serde_spanned::Spanned;

use idem_core::engine::Policy;
use idem_sim::scenario::{SETTLE_MS_MAX, Timing};

use super::{Checker, TICK_MS_MAX, value};
use crate::format::{PolicyKind, ScenarioFile, TimingFile};

impl Checker {
    pub(super) fn timing(&mut self, file: &ScenarioFile) -> Timing {
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
        let (latency_ms_min, latency_ms_max) = self.latency_range(t, &defaults);
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

    /// The network's latency range, each end within bounds and in order.
    fn latency_range(&mut self, t: &TimingFile, defaults: &Timing) -> (u64, u64) {
        let latency_ms_min = self.ms(&t.latency_ms_min, "latency_ms_min", defaults.latency_ms_min);
        let latency_ms_max = self.ms(&t.latency_ms_max, "latency_ms_max", defaults.latency_ms_max);
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
        (latency_ms_min, latency_ms_max)
    }

    pub(super) fn policy(&mut self, file: &ScenarioFile) -> Policy {
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
                hedge_after_ms: self.positive_ms(&p.hedge_after_ms, "hedge_after_ms", 1),
            },
        }
    }
}
