//! Why one run failed (docs: BRIEF §16, issue 23): which of its random
//! decisions made the failure likely, and which ones it needs.
//!
//! The run is replayed with its decision log recorded
//! ([`idem_sim::decisions`]). Then, for a prefix of `k` decisions kept as
//! they were and every later draw made afresh, `samples` runs estimate
//! P(fail | k) with a Wilson interval: P(fail | 0) is how likely the
//! failure is in this world at all, P(fail | n) is 1 (the run itself). A
//! search back from the end, by doubling then bisection, finds the
//! decision after which the failure became as likely as the run ends
//! (the last crossing into that level, where P(fail) jumps for good), and
//! a few evenly spaced prefixes draw the curve along the run's timeline. Last, each decision around that point is redrawn alone,
//! everything else kept, to say which ones the failure needs. When the
//! failure is likely with no decision kept, no draw decides it: the
//! violation's evidence in the run's own trace says what it turns on
//! ([`super::narrate`]).
//!
//! "Fail" means the failure being explained: a violation of the original
//! run's first invariant. Every sample run uses the run's own seed for
//! everything that is not a decision (ids, turmoil's own generator), and
//! sample `j` draws its fresh values from the same generator at every
//! prefix (common random numbers), so two prefixes differ only by the
//! decisions they keep.

use std::num::NonZeroUsize;
use std::time::Duration;

use serde::Serialize;

use idem_core::design::Design;
use idem_oracle::{Invariant, Violation};
use idem_reports::page::likelihood::{DecisiveMark, Likelihood, LikelihoodPoint};
use idem_sim::decisions::{Decision, Decisions, Kept};
use idem_sim::net::child_seed;
use idem_sim::run::{RunOutcome, Verdict, run_deciding};
use idem_sim::scenario::Scenario;

use super::narrate::{Forced, Story};
use super::table::EXPLAIN_SCHEMA;
use super::wilson::Proportion;
use crate::record::invariant_name;
use crate::runner::{Progress, Runner};

/// How many evenly spaced prefixes draw the curve, besides the
/// bisection's own.
const CURVE_POINTS: usize = 6;
/// How many decisions up to the decisive one are each redrawn alone.
const NECESSITY_DECISIONS: usize = 5;
/// With no decision kept, a failure this likely needs no decision: the
/// world makes it.
const LIKELY_ALREADY: f64 = 0.9;
/// Bisection steps, at most: enough for 2^40 decisions.
const BISECTION_STEPS_MAX: usize = 40;

/// What to explain: `scenario` (as `target` names it) under `seed` and
/// `design`, with `samples` runs per estimate.
#[derive(Clone, Debug)]
pub struct RunExplainPlan {
    pub scenario: Scenario,
    pub target: String,
    pub seed: u64,
    pub design: Design,
    pub samples: u32,
    pub jobs: Option<NonZeroUsize>,
}

/// One point of the likelihood curve: P(fail) with the first `kept`
/// decisions as they were.
#[derive(Clone, Debug, Serialize)]
pub struct Point {
    pub kept: usize,
    /// Simulated time of the last kept decision (0 for none).
    pub t_ms: u64,
    pub fails: Proportion,
}

/// The decision after which the failure became likely.
#[derive(Clone, Debug, Serialize)]
pub struct Decisive {
    pub decision: Decision,
    pub words: String,
    /// P(fail) with the decisions before it kept, and with it kept too.
    pub before: Proportion,
    pub after: Proportion,
}

/// One decision near the decisive one, tried three ways, the decisions
/// before it kept each time: redrawn together with what it causes (every
/// later decision drawn afresh), kept, and redrawn alone (every later
/// decision kept as it was). The first two are points of the curve; the
/// third asks whether the run's later draws, kept, make the failure
/// without it, which they can even when the decision is what made them
/// (they were drawn in the world it made).
#[derive(Clone, Debug, Serialize)]
pub struct Necessity {
    pub decision: Decision,
    pub words: String,
    /// P(fail) with it redrawn alone, every other decision kept.
    pub fails_without: Proportion,
    /// Redrawn alone, the failure is no longer likely (the interval's top
    /// below [`RunExplanation::likely_from`]).
    pub needed: bool,
    /// P(fail) with the decisions before it kept, it and every later one
    /// drawn afresh: the decision redrawn with what it causes.
    pub fails_redrawn_onward: Proportion,
    /// P(fail) with it kept too, every later decision drawn afresh.
    pub fails_kept: Proportion,
    /// What keeping it does to P(fail), the later decisions drawn afresh.
    pub effect: Effect,
}

/// What keeping a decision does to P(fail) when everything after it is
/// drawn afresh, beyond sampling error (the two Wilson intervals apart).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    Raises,
    Lowers,
    Unclear,
}

impl Effect {
    fn of(onward: &Proportion, kept: &Proportion) -> Self {
        if onward.interval.high < kept.interval.low {
            Effect::Raises
        } else if onward.interval.low > kept.interval.high {
            Effect::Lowers
        } else {
            Effect::Unclear
        }
    }

    fn words(self) -> &'static str {
        match self {
            Effect::Raises => "raises P(fail)",
            Effect::Lowers => "lowers P(fail)",
            Effect::Unclear => "no clear effect",
        }
    }
}

/// The explanation of one failing run, as `--json` writes it.
#[derive(Clone, Debug, Serialize)]
pub struct RunExplanation {
    pub schema: u32,
    /// Always [`EXPLAIN_RUN_KIND`].
    pub kind: &'static str,
    pub scenario: String,
    pub seed: u64,
    pub design: String,
    pub invariant: u8,
    pub invariant_name: String,
    pub violation: String,
    pub decisions: usize,
    pub samples: u32,
    /// Every estimate made, by prefix length.
    pub curve: Vec<Point>,
    /// `None` when the failure is already likely with no decision kept:
    /// the world makes it, not the draws.
    pub decisive: Option<Decisive>,
    /// When no draw decides the failure: the events of the run the
    /// violated invariant rests on, named from its evidence.
    pub forced: Option<Forced>,
    pub necessity: Vec<Necessity>,
    /// The failure counts as likely from this P(fail) on: half-way from
    /// P(fail) with no decision kept to 1.
    pub likely_from: f64,
    /// Sample runs made in all.
    pub runs: u64,
    pub build: idem_reports::BuildStamp,
}

/// The `kind` of a [`RunExplanation`].
pub const EXPLAIN_RUN_KIND: &str = "explain_run";

/// Why an explanation could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    #[error("the run could not finish: {0}")]
    Run(String),
    #[error("seed {seed} passes under {design}: there is no failure to explain")]
    Passed { seed: u64, design: String },
    #[error(
        "the scenario takes every step (timing.skip_quiet = false): turmoil then draws message \
         latencies itself, outside the decision log, so the run cannot be replayed decision by \
         decision"
    )]
    EveryStep,
    #[error(
        "replaying every recorded decision did not reproduce the run (trace hash {replayed} \
         against {recorded}): some draw escapes the decision log"
    )]
    NotReproduced { recorded: String, replayed: String },
}

/// The explanation, and what it took.
#[derive(Debug)]
pub struct ExplainedRun {
    pub explanation: RunExplanation,
    pub threads: usize,
    pub wall: Duration,
}

/// Explains the plan's run.
pub fn explain_run(plan: &RunExplainPlan) -> Result<ExplainedRun, ExplainError> {
    if !plan.scenario.timing.skip_quiet {
        return Err(ExplainError::EveryStep);
    }
    let recording = Decisions::recording();
    let original = simulate(plan, recording.clone())?;
    let Some(first) = original.report.violations.first() else {
        return Err(ExplainError::Passed {
            seed: plan.seed,
            design: plan.design.name().to_owned(),
        });
    };
    let log = recording.log();
    check_replay(plan, &log, &original)?;
    let story = Story::new(&original.trace);
    let mut study = Study::new(plan, &log, first.invariant, &story);
    let explanation = study.explain(first);
    Ok(ExplainedRun {
        explanation,
        threads: study.runner.jobs(),
        wall: study.wall,
    })
}

fn simulate(plan: &RunExplainPlan, decisions: Decisions) -> Result<RunOutcome, ExplainError> {
    run_deciding(&plan.scenario, plan.seed, plan.design, decisions)
        .map_err(|e| ExplainError::Run(e.to_string()))
}

/// Every decision kept must give the run back, byte for byte: otherwise
/// some draw is outside the log, and no estimate would mean anything.
fn check_replay(
    plan: &RunExplainPlan,
    log: &[Decision],
    original: &RunOutcome,
) -> Result<(), ExplainError> {
    let replay = simulate(
        plan,
        Decisions::intervening(Kept::from_log(log, |_| true), 0),
    )?;
    if replay.report.trace_hash == original.report.trace_hash {
        Ok(())
    } else {
        Err(ExplainError::NotReproduced {
            recorded: original.report.trace_hash.clone(),
            replayed: replay.report.trace_hash,
        })
    }
}

/// The estimates of one explanation.
struct Study<'a> {
    plan: &'a RunExplainPlan,
    log: &'a [Decision],
    invariant: Invariant,
    story: &'a Story<'a>,
    runner: Runner,
    curve: Vec<Point>,
    runs: u64,
    wall: Duration,
}

impl<'a> Study<'a> {
    fn new(
        plan: &'a RunExplainPlan,
        log: &'a [Decision],
        invariant: Invariant,
        story: &'a Story<'a>,
    ) -> Self {
        Self {
            plan,
            log,
            invariant,
            story,
            runner: Runner::new(plan.jobs).progress(Progress::hidden()),
            curve: Vec::new(),
            runs: 0,
            wall: Duration::ZERO,
        }
    }

    fn explain(&mut self, violation: &Violation) -> RunExplanation {
        let n = self.log.len();
        let start = self.prefix(0);
        let decisive = (start.estimate < LIKELY_ALREADY && n > 0).then(|| self.bisect());
        let forced = decisive.is_none().then(|| self.story.forced(violation));
        for k in (1..CURVE_POINTS).map(|i| i * n / CURVE_POINTS) {
            self.prefix(k);
        }
        let necessity = match &decisive {
            Some(d) => self.necessity(d.decision.index),
            None => Vec::new(),
        };
        let likely_from = self.likely_from();
        self.curve.sort_by_key(|p| p.kept);
        self.curve.dedup_by_key(|p| p.kept);
        RunExplanation {
            schema: EXPLAIN_SCHEMA,
            kind: EXPLAIN_RUN_KIND,
            scenario: self.plan.target.clone(),
            seed: self.plan.seed,
            design: self.plan.design.name().to_owned(),
            invariant: self.invariant.number(),
            invariant_name: invariant_name(self.invariant),
            violation: violation.message.clone(),
            decisions: n,
            samples: self.plan.samples,
            curve: std::mem::take(&mut self.curve),
            decisive,
            forced,
            necessity,
            likely_from,
            runs: self.runs,
            build: crate::record::build(),
        }
    }

    /// P(fail) with the first `k` decisions kept (the run itself at `n`,
    /// which fails by construction and is not sampled).
    fn prefix(&mut self, k: usize) -> Proportion {
        if let Some(point) = self.curve.iter().find(|p| p.kept == k) {
            return point.fails;
        }
        let fails = if k == self.log.len() {
            Proportion::new(1, 1).expect("one trial")
        } else {
            let kept = Kept::from_log(self.log, |i| i < k);
            self.estimate(&kept)
        };
        let t_ms = k.checked_sub(1).map_or(0, |i| self.log[i].t_ms);
        self.curve.push(Point {
            kept: k,
            t_ms,
            fails,
        });
        fails
    }

    /// The decision after which the failure reached the level the run
    /// ends at: the first prefix, going back from the end, whose P(fail)
    /// falls short of it is bracketed by doubling the distance from the
    /// end, and the crossing inside the bracket found by bisection, so
    /// the search costs O(log n) estimates where a scan would cost n.
    ///
    /// The level is the lower end of the interval of P(fail) with all but
    /// the last decision kept (and at least [`Self::likely_from`]): a
    /// prefix whose estimate is within sampling error of the end counts
    /// as there. Searching from the end finds the last crossing, the one
    /// after which the failure stays as likely as it ends: P(fail) along
    /// a run is not monotone (keeping a decision can make the failure less
    /// likely), and a search from the start, or by the larger net rise of
    /// two halves, stops at an early noisy high instead (double-click seed
    /// 1: 96% at decision 22, 55% at 28, 100% from 29 on).
    fn bisect(&mut self) -> Decisive {
        let n = self.log.len();
        let level = self
            .prefix(n - 1)
            .interval
            .low
            .max(self.likely_from())
            .min(1.0);
        let reached = |study: &mut Self, k: usize| study.prefix(k).estimate >= level;
        let mut high = n;
        let mut low = 0;
        let mut back = 1;
        for _ in 0..BISECTION_STEPS_MAX {
            let k = n.saturating_sub(back);
            if k == 0 || !reached(self, k) {
                low = k;
                break;
            }
            high = k;
            back *= 2;
        }
        for _ in 0..BISECTION_STEPS_MAX {
            if high - low <= 1 {
                break;
            }
            let middle = low + (high - low) / 2;
            if reached(self, middle) {
                high = middle;
            } else {
                low = middle;
            }
        }
        let decision = self.log[high - 1].clone();
        Decisive {
            words: self.story.decision(self.log, high - 1),
            before: self.prefix(high - 1),
            after: self.prefix(high),
            decision,
        }
    }

    /// Half-way from P(fail) with no decision kept to 1.
    fn likely_from(&mut self) -> f64 {
        f64::midpoint(self.prefix(0).estimate, 1.0)
    }

    /// The decisive decision and the few before it, each redrawn with
    /// what it causes, kept, and redrawn alone ([`Necessity`]).
    fn necessity(&mut self, decisive: usize) -> Vec<Necessity> {
        let likely_from = self.likely_from();
        let first = decisive.saturating_sub(NECESSITY_DECISIONS - 1);
        (first..=decisive)
            .rev()
            .map(|index| {
                let fails_redrawn_onward = self.prefix(index);
                let fails_kept = self.prefix(index + 1);
                let kept = Kept::from_log(self.log, |i| i != index);
                let fails_without = self.estimate(&kept);
                let decision = self.log[index].clone();
                Necessity {
                    words: self.story.decision(self.log, index),
                    needed: fails_without.interval.high < likely_from,
                    fails_without,
                    effect: Effect::of(&fails_redrawn_onward, &fails_kept),
                    fails_redrawn_onward,
                    fails_kept,
                    decision,
                }
            })
            .collect()
    }

    /// `samples` runs keeping `kept`, sample `j` drawing the rest from
    /// its own generator; how many fail as the original did.
    fn estimate(&mut self, kept: &Kept) -> Proportion {
        let samples = usize::try_from(self.plan.samples).expect("a u32 fits in usize");
        let mut failed = 0_u64;
        let (plan, invariant) = (self.plan, self.invariant);
        let finished = self.runner.run(
            samples,
            |j| {
                let sample_seed = child_seed(plan.seed, &format!("explain/sample/{j}"));
                let decisions = Decisions::intervening(kept.clone(), sample_seed);
                // A run that cannot finish is not the failure explained.
                simulate(plan, decisions).is_ok_and(|outcome| fails_as(&outcome, invariant))
            },
            |_, fails, _| failed += u64::from(fails),
        );
        self.runs += finished.ran as u64;
        self.wall += finished.wall;
        Proportion::new(failed, finished.ran as u64).expect("at least one sample")
    }
}

fn fails_as(outcome: &RunOutcome, invariant: Invariant) -> bool {
    outcome.report.verdict == Verdict::Fail
        && outcome
            .report
            .violations
            .iter()
            .any(|v| v.invariant == invariant)
}

impl RunExplanation {
    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).expect("an explanation serializes");
        text.push('\n');
        text
    }

    /// For people: the decisive decision first, then what the failure
    /// needs, then the curve.
    pub fn to_text(&self) -> String {
        let mut lines = vec![format!(
            "{} seed {} under {} fails invariant {} ({}): {}",
            self.scenario,
            self.seed,
            self.design,
            self.invariant,
            self.invariant_name,
            self.violation
        )];
        lines.extend(self.decisive_lines());
        lines.extend(self.necessity_lines());
        lines.push("likelihood along the run (decisions kept, up to ms, P(fail)):".to_owned());
        for p in &self.curve {
            lines.push(format!(
                "  {:>6}  {:>7} ms  {}",
                p.kept,
                p.t_ms,
                percent(&p.fails)
            ));
        }
        let mut text = lines.join("\n");
        text.push('\n');
        text
    }

    fn decisive_lines(&self) -> Vec<String> {
        match &self.decisive {
            Some(d) => vec![
                format!(
                    "decisive: decision #{} of {} at {} ms: {}",
                    d.decision.index + 1,
                    self.decisions,
                    d.decision.t_ms,
                    d.words
                ),
                format!(
                    "P(fail) {} with the decisions before it kept, {} with it kept too ({} samples each)",
                    percent(&d.before),
                    percent(&d.after),
                    self.samples
                ),
            ],
            None => self.forced_lines(),
        }
    }

    /// No draw decides the failure: say so, and what it rests on.
    fn forced_lines(&self) -> Vec<String> {
        let start = &self.curve[0].fails;
        let made = if start.estimate >= 1.0 {
            "force it"
        } else {
            "make it likely"
        };
        let mut lines = vec![format!(
            "no draw decides it: with none of the run's {} decisions kept the failure already \
             happens {} of the time; the scenario's own timing and faults {made}, not a draw",
            self.decisions,
            percent(start)
        )];
        if let Some(forced) = &self.forced {
            lines.push(format!("it turns on {}", forced.words));
            lines.push("the events the violation rests on:".to_owned());
            for c in &forced.events {
                lines.push(format!(
                    "  seq {:<5} {:>7} ms  {}: {}",
                    c.seq, c.t_ms, c.host, c.words
                ));
            }
        }
        lines
    }

    /// Each decision near the decisive one, its three numbers said in
    /// words: what it causes, kept or redrawn with it, and the later
    /// draws' own share.
    fn necessity_lines(&self) -> Vec<String> {
        if self.necessity.is_empty() {
            return Vec::new();
        }
        let mut lines = vec![
            "the decisions up to it, each with every decision before it kept; P(fail) when it is \
             redrawn with all that follows it (every later decision drawn afresh), when it is \
             kept, and when it alone is redrawn (every later decision kept as it was):"
                .to_owned(),
        ];
        for n in &self.necessity {
            let alone = if n.needed {
                "the failure needs this draw itself"
            } else {
                "the later decisions, kept as they were, still make the failure"
            };
            lines.push(format!(
                "  #{:<5} {}: redrawn with what follows {}, kept {}; redrawn alone {}: {alone}",
                n.decision.index + 1,
                n.effect.words(),
                percent(&n.fails_redrawn_onward),
                percent(&n.fails_kept),
                percent(&n.fails_without),
            ));
            lines.push(format!("         {}", n.words));
        }
        lines
    }
}

impl RunExplanation {
    /// The likelihood band for the run's page.
    pub fn likelihood(&self) -> Likelihood {
        Likelihood {
            points: self
                .curve
                .iter()
                .map(|p| LikelihoodPoint {
                    kept: p.kept,
                    t_ms: p.t_ms,
                    estimate: p.fails.estimate,
                    low: p.fails.interval.low,
                    high: p.fails.interval.high,
                })
                .collect(),
            likely_from: self.likely_from,
            decisive: self.decisive.as_ref().map(|d| DecisiveMark {
                t_ms: d.decision.t_ms,
                words: d.words.clone(),
            }),
            forced: self.forced.as_ref().map(|f| DecisiveMark {
                t_ms: f.t_ms,
                words: f.words.clone(),
            }),
            samples: self.samples,
            text: self.to_text(),
        }
    }
}

/// "97% [93%, 99%]".
fn percent(p: &Proportion) -> String {
    format!(
        "{:.0}% [{:.0}%, {:.0}%]",
        p.estimate * 100.0,
        p.interval.low * 100.0,
        p.interval.high * 100.0
    )
}
