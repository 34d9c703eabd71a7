//! A directed swarm (issue 23): the fuzzer's coin tosses leaned toward the
//! features of a world that trigger a design's failure and away from those
//! that suppress it, as `idem explain --fuzz` measured them.
//!
//! Swarm testing draws each feature in or out of a world by a coin toss;
//! which features make a race likely is what the trigger table says. A
//! bias multiplies the odds of a leanable feature's toss by
//! [`TRIGGER_ODDS_FACTOR`] for a trigger and divides them by it for a
//! suppressor. The number of draws and their order do not change, so with
//! no bias every seed makes the world it always made; with one, seed `N`
//! makes another world (its kept file is what reproduces it).
//!
//! Leanable are the features drawn by one coin toss in the generator
//! ([`LEANABLE`]); the others (how many users, which actions follow a
//! click, which contract defect) are left as they are.

use std::collections::BTreeMap;

use serde::Deserialize;

/// How much a trigger's odds are multiplied (a suppressor's divided).
pub const TRIGGER_ODDS_FACTOR: f64 = 4.0;
/// Bounds of a leaned probability: a feature is never certain either way.
const P_MIN: f64 = 0.02;
const P_MAX: f64 = 0.98;

/// The features a bias can lean: each fault kind's toss (`fault.KIND`),
/// and these.
pub const LEANABLE: &[&str] = &[
    "policy.hedged",
    "topology.no_reconciler",
    "users.double_click",
    "provider.hangs",
    "provider.stalls",
    "provider.errors",
    "provider.deviates",
    "provider.parses_special_tokens",
    "provider.uncertified",
    "provider.ignores_idempotency_keys",
    "provider.no_status",
    "provider.no_cancel",
];

/// Odds factors by feature id; empty leans nothing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Bias {
    odds: BTreeMap<String, f64>,
}

/// The part of an `idem explain --fuzz` JSON a bias reads.
#[derive(Deserialize)]
struct ExplainFile {
    kind: String,
    design: String,
    ranked: Vec<Row>,
}

#[derive(Deserialize)]
struct Row {
    id: String,
    effect: String,
}

impl Bias {
    /// Whether the bias leans anything.
    pub fn is_none(&self) -> bool {
        self.odds.is_empty()
    }

    /// The probability of a feature's toss, `p` unless the bias leans it.
    /// A feature drawn as the absence of something (no reconciler: the
    /// toss is for one) is leaned with [`Bias::lean_absent`].
    pub fn lean(&self, feature: &str, p: f64) -> f64 {
        match self.odds.get(feature) {
            None => p,
            Some(factor) => leaned(p, *factor),
        }
    }

    /// The probability of a toss whose `true` is the feature's absence
    /// (`p` unless the bias leans it: exactly `p`, so that an unbiased
    /// toss draws as it always did).
    pub fn lean_absent(&self, feature: &str, p: f64) -> f64 {
        match self.odds.get(feature) {
            None => p,
            Some(factor) => 1.0 - leaned(1.0 - p, *factor),
        }
    }

    /// The bias an `idem explain --fuzz --json` file says: its triggers
    /// leaned toward, its suppressors away from; features the generator
    /// cannot lean are named in the second value.
    pub fn from_explanation(text: &str) -> Result<(Self, String, Vec<String>), String> {
        let file: ExplainFile =
            serde_json::from_str(text).map_err(|e| format!("not an explain JSON: {e}"))?;
        if file.kind != "explain_fuzz" {
            return Err(format!(
                "kind {:?}: a bias is read from `idem explain --fuzz --json`",
                file.kind
            ));
        }
        let mut odds = BTreeMap::new();
        let mut unleanable = Vec::new();
        for row in file.ranked {
            let factor = match row.effect.as_str() {
                "trigger" => TRIGGER_ODDS_FACTOR,
                "suppressor" => 1.0 / TRIGGER_ODDS_FACTOR,
                _ => continue,
            };
            if leanable(&row.id) {
                odds.insert(row.id, factor);
            } else {
                unleanable.push(row.id);
            }
        }
        Ok((Self { odds }, file.design, unleanable))
    }
}

/// `p` with its odds multiplied by `factor`, kept within bounds.
fn leaned(p: f64, factor: f64) -> f64 {
    let odds = p / (1.0 - p) * factor;
    (odds / (1.0 + odds)).clamp(P_MIN, P_MAX)
}

fn leanable(id: &str) -> bool {
    LEANABLE.contains(&id)
        || id.strip_prefix("fault.").is_some_and(|kind| {
            idem_sim::scenario::FaultKind::ALL
                .iter()
                .any(|k| k.name() == kind)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bias(effect: &str) -> Bias {
        let text = format!(
            r#"{{"kind":"explain_fuzz","design":"d","ranked":[{{"id":"policy.hedged","effect":"{effect}"}},{{"id":"users.one","effect":"{effect}"}}]}}"#
        );
        Bias::from_explanation(&text).expect("a valid file").0
    }

    #[test]
    fn no_bias_leans_nothing() {
        assert_eq!(Bias::default().lean("policy.hedged", 0.4), 0.4);
    }

    #[test]
    fn a_trigger_is_drawn_more_often_and_a_suppressor_less() {
        let toward = bias("trigger").lean("policy.hedged", 0.4);
        let away = bias("suppressor").lean("policy.hedged", 0.4);
        assert!(toward > 0.7 && toward < 0.75, "{toward}");
        assert!(away > 0.14 && away < 0.15, "{away}");
        // The absence of a reconciler is tossed as its presence.
        let no_reconciler = Bias {
            odds: [("topology.no_reconciler".to_owned(), TRIGGER_ODDS_FACTOR)].into(),
        };
        assert!(no_reconciler.lean_absent("topology.no_reconciler", 0.85) < 0.85);
    }

    #[test]
    fn features_the_generator_cannot_lean_are_named() {
        let text = r#"{"kind":"explain_fuzz","design":"d","ranked":[{"id":"users.one","effect":"trigger"},{"id":"fault.crash","effect":"trigger"}]}"#;
        let (bias, design, unleanable) = Bias::from_explanation(text).expect("valid");
        assert_eq!(design, "d");
        assert_eq!(unleanable, vec!["users.one".to_owned()]);
        assert!(bias.lean("fault.crash", 0.5) > 0.5);
        assert!(
            Bias::from_explanation(r#"{"kind":"explain_run","design":"d","ranked":[]}"#).is_err()
        );
    }

    /// Over the same seeds, a bias toward hedging and crashes makes more
    /// worlds with them; with no bias every world is the one it was.
    #[test]
    fn a_directed_swarm_draws_its_triggers_more_often() {
        use crate::fuzz::world::{world, world_leaning};
        let text = r#"{"kind":"explain_fuzz","design":"d","ranked":[
            {"id":"policy.hedged","effect":"trigger"},
            {"id":"fault.crash","effect":"trigger"}]}"#;
        let (bias, _, _) = Bias::from_explanation(text).expect("valid");
        let hedged = |w: &idem_sim::scenario::Scenario| {
            matches!(w.policy, idem_core::engine::Policy::Hedged { .. })
        };
        let crashes = |w: &idem_sim::scenario::Scenario| {
            w.faults
                .iter()
                .any(|f| f.fault.kind() == idem_sim::scenario::FaultKind::Crash)
        };
        let (mut plain, mut leaned) = ((0, 0), (0, 0));
        for seed in 0..200 {
            let w = world(seed);
            assert_eq!(w, world_leaning(seed, &Bias::default()));
            plain = (
                plain.0 + usize::from(hedged(&w)),
                plain.1 + usize::from(crashes(&w)),
            );
            let l = world_leaning(seed, &bias);
            leaned = (
                leaned.0 + usize::from(hedged(&l)),
                leaned.1 + usize::from(crashes(&l)),
            );
        }
        assert!(
            leaned.0 > plain.0 + 30,
            "hedged: {plain:?} against {leaned:?}"
        );
        assert!(
            leaned.1 > plain.1 + 30,
            "crashes: {plain:?} against {leaned:?}"
        );
    }
}
