//! The mutants matrix: the bench proving its own power (docs/MODEL.md, naive designs). The
//! correct design runs every scenario under every seed and must pass them
//! all; each naive design is searched seed by seed until some run catches
//! it. What `idem mutants --format json` prints and `--json F` writes.
//!
//! The search order is part of the record's meaning: seed-major (every
//! scenario, in catalogue order, under the first seed; then the next seed),
//! so "seeds tried" is how many seeds the bench needed, and a faster
//! machine or more threads never changes the answer. [`MutantsReport::new`]
//! is pure: it takes the runs in that order and decides, so the verdict
//! logic is tested without running a simulation.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::run::{RunRecord, RunVerdict};
use crate::sweep::SeedRange;

/// What a design is in the matrix, and so what it must do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The design under test proper: it must pass every run.
    Correct,
    /// A naive design: some run must catch it.
    Mutant,
}

/// One design's runs, as the search tried them.
#[derive(Clone, Debug, PartialEq)]
pub struct DesignRuns {
    /// Kebab-case (`correct`, `check-then-insert`, ...).
    pub design: String,
    pub role: Role,
    /// Seed-major, scenarios in catalogue order. For a mutant, the search
    /// may stop at its first failing run; runs after that are ignored.
    pub runs: Vec<RunRecord>,
}

/// A violated invariant, as the matrix names it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct InvariantRecord {
    /// the number in docs/MODEL.md, 1 to 11.
    pub invariant: u8,
    /// snake_case (`one_job_per_intent`).
    pub name: String,
}

/// The first run, in search order, that did not pass.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FirstFailure {
    pub scenario: String,
    pub seed: u64,
    /// `fail` (an invariant was violated) or `error` (the simulation could
    /// not finish).
    pub verdict: RunVerdict,
    /// The invariants violated, each once, by number; empty for an error.
    pub invariants: Vec<InvariantRecord>,
    /// Violations in the run (an invariant may be violated several times).
    pub violations: u64,
    /// The first violation's message; the repro command shows them all,
    /// with their evidence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Why the simulation could not finish, for an error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The command that runs exactly this again.
    pub reproduce: String,
}

/// One row of the matrix.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesignResult {
    pub design: String,
    pub role: Role,
    /// The correct design only: every run of the matrix passed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passed: Option<bool>,
    /// Mutants only: the first failing run violated an invariant. A run
    /// that could not finish is a bench error, not a catch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caught: Option<bool>,
    pub first_failure: Option<FirstFailure>,
    /// Distinct seeds among the runs tried: for a caught mutant, the
    /// failing seed's position from the first seed, from 1.
    pub seeds_tried: u64,
    /// Runs tried, the failing one included.
    pub runs_tried: u64,
    /// Runs tried that did not pass (a mutant's search stops at one).
    pub failed_runs: u64,
}

impl DesignResult {
    /// Whether the row holds what its role asks.
    pub fn ok(&self) -> bool {
        match self.role {
            Role::Correct => self.passed == Some(true),
            Role::Mutant => self.caught == Some(true),
        }
    }
}

/// pass or fail, for the whole matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MatrixVerdict {
    Pass,
    Fail,
}

/// The whole matrix.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MutantsReport {
    /// [`crate::schema::SCHEMA_VERSION`].
    pub schema: u32,
    /// The seeds of the matrix (end excluded); a mutant's search stops
    /// early when caught.
    pub seeds: SeedRange,
    /// The scenarios, in the order each seed runs them.
    pub scenarios: Vec<String>,
    /// `pass` when the correct design passed every run and every mutant
    /// was caught.
    pub verdict: MatrixVerdict,
    /// In the order given: the correct design first, then the mutants.
    pub designs: Vec<DesignResult>,
    /// The build that ran the matrix: its seeds reproduce on this code.
    pub build: crate::schema::BuildStamp,
}

impl MutantsReport {
    /// Judges each design's runs. `scenarios` and `seeds` describe the full
    /// matrix: the correct design passes only if it ran all of it.
    pub fn new(
        seeds: SeedRange,
        scenarios: Vec<String>,
        designs: Vec<DesignRuns>,
        build: crate::schema::BuildStamp,
    ) -> Self {
        let seeds_count = seeds.end.saturating_sub(seeds.start);
        let matrix_runs = seeds_count.saturating_mul(scenarios.len() as u64);
        let designs: Vec<DesignResult> =
            designs.into_iter().map(|d| judge(d, matrix_runs)).collect();
        let verdict = if !designs.is_empty() && designs.iter().all(DesignResult::ok) {
            MatrixVerdict::Pass
        } else {
            MatrixVerdict::Fail
        };
        Self {
            schema: crate::schema::SCHEMA_VERSION,
            seeds,
            scenarios,
            verdict,
            designs,
            build,
        }
    }

    pub fn passed(&self) -> bool {
        self.verdict == MatrixVerdict::Pass
    }

    /// Pretty JSON, newline-terminated.
    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).expect("a report serializes");
        text.push('\n');
        text
    }

    /// The table the command line prints.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "mutants: {} scenarios x seeds {}..{}, searched seed by seed (every scenario under a seed, then the next seed); build {}",
            self.scenarios.len(),
            self.seeds.start,
            self.seeds.end,
            self.build
        );
        let rows: Vec<[String; 5]> = self.designs.iter().map(text_row).collect();
        let head = ["design", "result", "seeds", "runs", "first failure"];
        let width = |column: usize| {
            rows.iter()
                .map(|r| r[column].len())
                .chain([head[column].len()])
                .max()
                .unwrap_or(0)
        };
        let (w0, w1, w2, w3) = (width(0), width(1), width(2), width(3));
        let line = |r: [&str; 5]| {
            format!(
                "  {:w0$}  {:w1$}  {:>w2$}  {:>w3$}  {}",
                r[0], r[1], r[2], r[3], r[4]
            )
        };
        let _ = writeln!(out, "{}", line(head));
        for r in &rows {
            let _ = writeln!(
                out,
                "{}",
                line([&r[0], &r[1], &r[2], &r[3], &r[4]]).trim_end()
            );
        }
        self.repro_text(&mut out, w0);
        self.verdict_text(&mut out);
        out
    }

    /// The command that shows each design's first failure again.
    fn repro_text(&self, out: &mut String, width: usize) {
        let failures: Vec<(&str, &FirstFailure)> = self
            .designs
            .iter()
            .filter_map(|d| Some((d.design.as_str(), d.first_failure.as_ref()?)))
            .collect();
        if !failures.is_empty() {
            let _ = writeln!(out, "reproduce with:");
            for (design, f) in failures {
                let _ = writeln!(out, "  {design:width$}  {}", f.reproduce);
            }
        }
    }

    /// The last line: the verdict, the correct design's runs, the mutants
    /// caught.
    fn verdict_text(&self, out: &mut String) {
        let mutants = self.designs.iter().filter(|d| d.role == Role::Mutant);
        let (caught, total) = mutants.fold((0, 0), |(c, t), d| (c + u64::from(d.ok()), t + 1));
        let correct: Vec<String> = self
            .designs
            .iter()
            .filter(|d| d.role == Role::Correct)
            .map(|d| {
                if d.ok() {
                    format!("{} passed {} runs", d.design, d.runs_tried)
                } else {
                    format!(
                        "{} failed {} of {} runs",
                        d.design, d.failed_runs, d.runs_tried
                    )
                }
            })
            .collect();
        let _ = writeln!(
            out,
            "{}: {}{}{caught} of {total} mutants caught",
            match self.verdict {
                MatrixVerdict::Pass => "PASS",
                MatrixVerdict::Fail => "FAIL",
            },
            correct.join(", "),
            if correct.is_empty() { "" } else { "; " },
        );
    }
}

/// A design's row of the text table: design, result, seeds, runs, first
/// failure.
fn text_row(d: &DesignResult) -> [String; 5] {
    let result = match (d.role, d.ok()) {
        (Role::Correct, true) => "passed",
        (Role::Correct, false) => "FAILED",
        (Role::Mutant, true) => "caught",
        (Role::Mutant, false) => "NOT CAUGHT",
    };
    let first = d.first_failure.as_ref().map_or_else(
        || "-".to_owned(),
        |f| {
            let what = if f.invariants.is_empty() {
                "the simulation failed".to_owned()
            } else {
                f.invariants
                    .iter()
                    .map(|i| format!("invariant {} ({})", i.invariant, i.name))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            format!("{} seed {}: {what}", f.scenario, f.seed)
        },
    );
    [
        d.design.clone(),
        result.to_owned(),
        d.seeds_tried.to_string(),
        d.runs_tried.to_string(),
        first,
    ]
}

/// One design's row from its runs in search order.
fn judge(design: DesignRuns, matrix_runs: u64) -> DesignResult {
    let DesignRuns { design, role, runs } = design;
    let first = runs.iter().position(|r| !r.verdict.passed());
    let tried = match role {
        // The correct design is judged on everything it ran.
        Role::Correct => runs.len(),
        Role::Mutant => first.map_or(runs.len(), |i| i + 1),
    };
    let runs = &runs[..tried];
    let seeds_tried = runs.iter().map(|r| r.seed).collect::<BTreeSet<_>>().len() as u64;
    let failed_runs = runs.iter().filter(|r| !r.verdict.passed()).count() as u64;
    let first_failure = first.map(|i| first_failure(&runs[i]));
    let (passed, caught) = match role {
        Role::Correct => (
            Some(first.is_none() && tried as u64 == matrix_runs && matrix_runs > 0),
            None,
        ),
        Role::Mutant => (
            None,
            Some(first_failure.as_ref().map(|f| f.verdict) == Some(RunVerdict::Fail)),
        ),
    };
    DesignResult {
        design,
        role,
        passed,
        caught,
        first_failure,
        seeds_tried,
        runs_tried: tried as u64,
        failed_runs,
    }
}

fn first_failure(run: &RunRecord) -> FirstFailure {
    FirstFailure {
        scenario: run.scenario.clone(),
        seed: run.seed,
        verdict: run.verdict,
        invariants: run
            .violations
            .iter()
            .map(|v| InvariantRecord {
                invariant: v.invariant,
                name: v.name.clone(),
            })
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect(),
        violations: run.violations.len() as u64,
        message: run.violations.first().map(|v| v.message.clone()),
        error: run.error.clone(),
        reproduce: run.reproduce.clone(),
    }
}
