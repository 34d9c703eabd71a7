//! The triggers-and-suppressors table: from each world's features and
//! verdict, P(fail | present) against P(fail | absent) per feature, ranked;
//! and its renderings as text and JSON.
//!
//! Ranking: *triggers* (the whole interval of the difference above 0)
//! first, by the lower bound of the difference, highest first; then the
//! features whose interval holds 0, by the same key; then *suppressors*
//! (the whole interval below 0), by the upper bound, so that the surest
//! suppressor is last. Ties go by feature id. A feature in every judged
//! world or in none has no contrast and is listed apart.
//!
//! The intervals are per feature: with fifty features at 95%, two or three
//! may clear zero by chance alone. A trigger to act on is one that stays
//! a trigger over another seed range.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use idem_reports::RunVerdict;
use idem_reports::sweep::SeedRange;

use super::features::FEATURES;
use super::wilson::{Difference, Proportion};
use crate::record::build;

/// What one world showed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WorldRecord {
    pub seed: u64,
    /// `error` when the run could not finish: such worlds are counted but
    /// left out of every rate (the bench failed, not the design).
    pub verdict: RunVerdict,
    /// The invariants violated, by number, in order.
    pub invariants: Vec<u8>,
    /// The ids of the features it has, in the feature table's order.
    pub features: Vec<&'static str>,
}

/// What the ranking says of a feature.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// The design fails more often with it (the interval is above 0).
    Trigger,
    /// No clear effect at this many worlds (the interval holds 0).
    Unclear,
    /// The design fails less often with it (the interval is below 0).
    Suppressor,
}

/// One feature's contrast.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Contrast {
    pub id: &'static str,
    pub label: &'static str,
    pub effect: Effect,
    /// Failed worlds among the judged worlds with the feature.
    pub present: Proportion,
    /// Failed worlds among the judged worlds without it.
    pub absent: Proportion,
    /// `present - absent`.
    pub difference: Difference,
}

/// A feature that every judged world has, or none.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NoContrast {
    pub id: &'static str,
    pub label: &'static str,
    /// Judged worlds that have it: 0 or all of them.
    pub present_in: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    /// Worlds run.
    pub worlds: u64,
    pub failed: u64,
    pub passed: u64,
    /// Runs that could not finish, left out of the rates.
    pub could_not_finish: u64,
}

/// How many failed worlds violated one invariant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct InvariantTally {
    pub number: u8,
    pub name: String,
    pub worlds: u64,
}

/// The whole analysis, as `--json` writes it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Explanation {
    pub schema: u32,
    /// Always [`EXPLAIN_FUZZ_KIND`].
    pub kind: &'static str,
    pub design: String,
    pub seeds: SeedRange,
    pub totals: Totals,
    pub invariants: Vec<InvariantTally>,
    /// Every feature with a contrast, in rank order.
    pub ranked: Vec<Contrast>,
    /// The features without one, in the feature table's order.
    pub no_contrast: Vec<NoContrast>,
    /// Every world, by seed.
    pub worlds: Vec<WorldRecord>,
    pub build: idem_reports::BuildStamp,
}

/// The `kind` of an [`Explanation`].
pub const EXPLAIN_FUZZ_KIND: &str = "explain_fuzz";
/// The version of its JSON; bumped on any incompatible change.
pub const EXPLAIN_SCHEMA: u32 = 1;

impl Explanation {
    /// The analysis of `worlds` (in seed order) run under `design`;
    /// `invariant_names` names each invariant number seen.
    pub fn new(
        design: &str,
        seeds: SeedRange,
        worlds: Vec<WorldRecord>,
        invariant_names: &BTreeMap<u8, String>,
    ) -> Self {
        let judged: Vec<&WorldRecord> = worlds
            .iter()
            .filter(|w| w.verdict != RunVerdict::Error)
            .collect();
        let mut ranked = Vec::new();
        let mut no_contrast = Vec::new();
        for feature in FEATURES {
            match contrast(feature.id, feature.label, &judged) {
                Ok(row) => ranked.push(row),
                Err(row) => no_contrast.push(row),
            }
        }
        ranked.sort_by(rank_order);
        Self {
            schema: EXPLAIN_SCHEMA,
            kind: EXPLAIN_FUZZ_KIND,
            design: design.to_owned(),
            seeds,
            totals: totals(&worlds),
            invariants: invariant_tallies(&worlds, invariant_names),
            ranked,
            no_contrast,
            worlds,
            build: build(),
        }
    }

    /// Pretty JSON, newline-terminated.
    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).expect("an explanation serializes");
        text.push('\n');
        text
    }

    /// The rows of one effect, in rank order.
    pub fn rows(&self, effect: Effect) -> impl Iterator<Item = &Contrast> {
        self.ranked.iter().filter(move |c| c.effect == effect)
    }
}

/// The contrast of feature `id` over the judged worlds, or why it has
/// none.
fn contrast(
    id: &'static str,
    label: &'static str,
    judged: &[&WorldRecord],
) -> Result<Contrast, NoContrast> {
    let (with, without): (Vec<&&WorldRecord>, Vec<&&WorldRecord>) =
        judged.iter().partition(|w| w.features.contains(&id));
    let failed = |group: &[&&WorldRecord]| {
        group
            .iter()
            .filter(|w| w.verdict == RunVerdict::Fail)
            .count() as u64
    };
    let present = Proportion::new(failed(&with), with.len() as u64);
    let absent = Proportion::new(failed(&without), without.len() as u64);
    let (Some(present), Some(absent)) = (present, absent) else {
        return Err(NoContrast {
            id,
            label,
            present_in: with.len() as u64,
        });
    };
    let difference = Difference::between(&present, &absent);
    let effect = if difference.interval.low > 0.0 {
        Effect::Trigger
    } else if difference.interval.high < 0.0 {
        Effect::Suppressor
    } else {
        Effect::Unclear
    };
    Ok(Contrast {
        id,
        label,
        effect,
        present,
        absent,
        difference,
    })
}

/// Triggers, then unclear rows, by the difference's lower bound, highest
/// first; then suppressors by its upper bound, highest first; then by id.
fn rank_order(a: &Contrast, b: &Contrast) -> Ordering {
    let key = |c: &Contrast| match c.effect {
        Effect::Suppressor => c.difference.interval.high,
        Effect::Trigger | Effect::Unclear => c.difference.interval.low,
    };
    a.effect
        .cmp(&b.effect)
        .then_with(|| key(b).total_cmp(&key(a)))
        .then_with(|| a.id.cmp(b.id))
}

fn totals(worlds: &[WorldRecord]) -> Totals {
    let count = |verdict| worlds.iter().filter(|w| w.verdict == verdict).count() as u64;
    Totals {
        worlds: worlds.len() as u64,
        failed: count(RunVerdict::Fail),
        passed: count(RunVerdict::Pass),
        could_not_finish: count(RunVerdict::Error),
    }
}

fn invariant_tallies(worlds: &[WorldRecord], names: &BTreeMap<u8, String>) -> Vec<InvariantTally> {
    let mut tally: BTreeMap<u8, u64> = BTreeMap::new();
    for number in worlds.iter().flat_map(|w| &w.invariants) {
        *tally.entry(*number).or_default() += 1;
    }
    tally
        .into_iter()
        .map(|(number, worlds)| InvariantTally {
            number,
            name: names.get(&number).cloned().unwrap_or_default(),
            worlds,
        })
        .collect()
}

impl Explanation {
    /// The human table.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let t = &self.totals;
        let _ = writeln!(
            out,
            "explain: design {}, fuzz worlds {}..{}, build {}",
            self.design, self.seeds.start, self.seeds.end, self.build
        );
        let _ = writeln!(
            out,
            "{} worlds: {} failed ({}), {} passed, {} could not finish (left out of the rates)",
            t.worlds,
            t.failed,
            percent(t.failed as f64 / (t.failed + t.passed).max(1) as f64),
            t.passed,
            t.could_not_finish
        );
        for invariant in &self.invariants {
            let _ = writeln!(
                out,
                "  invariant {} ({}) violated in {} worlds",
                invariant.number, invariant.name, invariant.worlds
            );
        }
        out.push_str(
            "\nP(fail | feature present) against P(fail | absent), 95% Wilson intervals;\n\
             the difference with Newcombe's interval. Per-feature intervals: a row that clears\n\
             zero by chance is expected now and then among this many.\n",
        );
        let width = FEATURES.iter().map(|f| f.label.len()).max().unwrap_or(0);
        for (effect, title) in [
            (
                Effect::Trigger,
                "triggers: the design fails more often with",
            ),
            (Effect::Unclear, "no clear effect at this many worlds"),
            (
                Effect::Suppressor,
                "suppressors: the design fails less often with",
            ),
        ] {
            self.section_text(&mut out, effect, title, width);
        }
        self.no_contrast_text(&mut out, width);
        out
    }

    fn no_contrast_text(&self, out: &mut String, width: usize) {
        if self.no_contrast.is_empty() {
            return;
        }
        let _ = writeln!(out, "\nno contrast (in every judged world or in none):");
        for row in &self.no_contrast {
            let _ = writeln!(out, "  {:<width$}  in {} worlds", row.label, row.present_in);
        }
    }

    fn section_text(&self, out: &mut String, effect: Effect, title: &str, width: usize) {
        let rows: Vec<&Contrast> = self.rows(effect).collect();
        let _ = writeln!(out, "\n{title} ({}):", rows.len());
        if rows.is_empty() {
            return;
        }
        let _ = writeln!(
            out,
            "  {:<width$}  {:<22}  {:<22}  difference",
            "feature", "failed with", "failed without"
        );
        for row in rows {
            let _ = writeln!(
                out,
                "  {:<width$}  {:<22}  {:<22}  {}",
                row.label,
                rate(&row.present),
                rate(&row.absent),
                signed(&row.difference)
            );
        }
    }
}

/// `12/40  30% [18-45]`.
fn rate(p: &Proportion) -> String {
    format!(
        "{}/{} {:>4} [{}-{}]",
        p.successes,
        p.trials,
        percent(p.estimate),
        points(p.interval.low),
        points(p.interval.high)
    )
}

/// `+41 [+25, +55] points`.
fn signed(d: &Difference) -> String {
    let sign = |x: f64| {
        let p = points(x);
        if p > 0 {
            format!("+{p}")
        } else {
            p.to_string()
        }
    };
    format!(
        "{} [{}, {}] points",
        sign(d.estimate),
        sign(d.interval.low),
        sign(d.interval.high)
    )
}

/// A probability in whole percentage points.
fn points(x: f64) -> i64 {
    (x * 100.0).round() as i64
}

fn percent(x: f64) -> String {
    format!("{}%", points(x))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn world(seed: u64, failed: bool, features: &[&'static str]) -> WorldRecord {
        WorldRecord {
            seed,
            verdict: if failed {
                RunVerdict::Fail
            } else {
                RunVerdict::Pass
            },
            invariants: if failed { vec![1] } else { Vec::new() },
            features: features.to_vec(),
        }
    }

    /// Forty worlds: a double click in half of them, and every world with
    /// one fails; a hedged policy in the other half, none failing; a
    /// crash in every world; one world that could not finish.
    fn explanation() -> Explanation {
        let mut worlds: Vec<WorldRecord> = (0..40)
            .map(|seed| {
                if seed % 2 == 0 {
                    world(seed, true, &["fault.crash", "users.double_click"])
                } else {
                    world(seed, false, &["fault.crash", "policy.hedged"])
                }
            })
            .collect();
        worlds.push(WorldRecord {
            seed: 40,
            verdict: RunVerdict::Error,
            invariants: Vec::new(),
            features: vec!["users.double_click"],
        });
        let names = BTreeMap::from([(1, "one_intent_one_job".to_owned())]);
        Explanation::new(
            "check-then-insert",
            SeedRange { start: 0, end: 41 },
            worlds,
            &names,
        )
    }

    #[test]
    fn triggers_lead_suppressors_close_and_constant_features_have_no_contrast() {
        let e = explanation();
        assert_eq!(e.ranked.first().map(|c| c.id), Some("users.double_click"));
        assert_eq!(e.ranked.first().map(|c| c.effect), Some(Effect::Trigger));
        assert_eq!(e.ranked.last().map(|c| c.id), Some("policy.hedged"));
        assert_eq!(e.ranked.last().map(|c| c.effect), Some(Effect::Suppressor));
        let crash = e.no_contrast.iter().find(|c| c.id == "fault.crash");
        assert_eq!(crash.map(|c| c.present_in), Some(40));
        let bench = e.no_contrast.iter().find(|c| c.id == "users.backup");
        assert_eq!(bench.map(|c| c.present_in), Some(0));
        assert_eq!(e.ranked.len() + e.no_contrast.len(), FEATURES.len());
        let double = &e.ranked[0];
        assert_eq!((double.present.successes, double.present.trials), (20, 20));
        assert_eq!((double.absent.successes, double.absent.trials), (0, 20));
        assert_eq!(
            e.totals,
            Totals {
                worlds: 41,
                failed: 20,
                passed: 20,
                could_not_finish: 1
            }
        );
        assert_eq!(e.invariants[0].worlds, 20);
    }

    #[test]
    fn the_text_names_the_trigger_in_domain_words() {
        let text = explanation().to_text();
        let triggers = text.find("triggers").expect("a trigger section");
        let suppressors = text.find("suppressors").expect("a suppressor section");
        let double = text.find("a double click").expect("the trigger's label");
        assert!(triggers < double && double < suppressors, "{text}");
        assert!(text.contains("20/20 100% [84-100]"), "{text}");
        assert!(text.contains("1 could not finish"), "{text}");
    }
}
