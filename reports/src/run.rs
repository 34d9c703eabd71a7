//! One run's record: what `idem run --format json` prints, and what a sweep
//! collects per seed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// How one run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunVerdict {
    /// Every invariant held.
    Pass,
    /// At least one invariant was violated.
    Fail,
    /// The simulation itself could not finish (a host failed or the bench
    /// panicked): a bug in the bench or the world, reported as a failure.
    Error,
}

impl RunVerdict {
    /// Whether the run counts as passed.
    pub fn passed(self) -> bool {
        self == RunVerdict::Pass
    }
}

/// One violated invariant.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ViolationRecord {
    /// the number in docs/MODEL.md, 1 to 11.
    pub invariant: u8,
    /// Its name, snake_case (`one_job_per_intent`).
    pub name: String,
    pub message: String,
    /// `seq`s of the trace events that show it.
    pub evidence: Vec<u64>,
    /// Those trace events, as JSON objects with the fields of their trace
    /// lines (object keys sorted). Only `idem run` fills this; a sweep
    /// leaves it empty (the repro command brings it back) so that its
    /// summary stays small.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence_events: Vec<serde_json::Value>,
}

/// One run of one scenario under one seed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// [`crate::schema::SCHEMA_VERSION`].
    pub schema: u32,
    pub scenario: String,
    pub seed: u64,
    /// The design under test (`correct` or a mutant's name).
    pub design: String,
    pub verdict: RunVerdict,
    /// Empty when the run passed; in invariant order.
    pub violations: Vec<ViolationRecord>,
    /// Why the simulation could not finish, when `verdict` is `error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Every race window, with how often this run reached it (0 included).
    pub windows: BTreeMap<String, u32>,
    /// The windows the scenario exists to reach.
    pub expect_windows: Vec<String>,
    /// Hex SHA-256 of the trace's JSON lines: equal hashes, equal runs.
    pub trace_hash: String,
    pub trace_events: u64,
    /// Simulation steps taken.
    pub steps: u64,
    /// Simulated milliseconds when the run stopped.
    pub sim_ms: u64,
    /// `quiescent` (everything settled), `at_rest` (only reads left, every
    /// unsettled job awaiting an operator) or `deadline` (settle_ms reached).
    pub stop: String,
    /// The command that runs exactly this again.
    pub reproduce: String,
    /// The build that ran it: a seed reproduces a run only on the same
    /// code. Set on a record that stands alone (`idem run`); the records
    /// inside a sweep or a matrix leave it to the summary's `build`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<crate::schema::BuildStamp>,
}

impl RunRecord {
    /// A record for a run that could not finish.
    pub fn error(
        scenario: &str,
        seed: u64,
        design: &str,
        expect_windows: Vec<String>,
        error: String,
        reproduce: String,
    ) -> Self {
        Self {
            schema: crate::schema::SCHEMA_VERSION,
            scenario: scenario.to_owned(),
            seed,
            design: design.to_owned(),
            verdict: RunVerdict::Error,
            violations: Vec::new(),
            error: Some(error),
            windows: BTreeMap::new(),
            expect_windows,
            trace_hash: String::new(),
            trace_events: 0,
            steps: 0,
            sim_ms: 0,
            stop: "error".to_owned(),
            reproduce,
            build: None,
        }
    }

    /// The expected windows this run reached.
    pub fn expected_reached(&self) -> impl Iterator<Item = &str> {
        self.expect_windows
            .iter()
            .filter(|w| self.windows.get(*w).copied().unwrap_or(0) > 0)
            .map(String::as_str)
    }

    /// One line per violation (or the error), for logs and JUnit.
    pub fn failure_text(&self) -> String {
        let mut text = String::new();
        if let Some(error) = &self.error {
            text.push_str(&format!("the simulation failed: {error}\n"));
        }
        for v in &self.violations {
            text.push_str(&format!(
                "invariant {} ({}): {}\n",
                v.invariant, v.name, v.message
            ));
        }
        text
    }
}

/// `word` as one word of a shell command: as it is when it is plain, in
/// single quotes otherwise (a repro command names a file, whatever its
/// name).
pub fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./+=:@".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// Names with how often each came, those that came at all (the race
/// windows a run reached, the faults it took): `a x2, b x1`, or `none`.
pub fn counted<W: std::fmt::Display>(windows: &BTreeMap<W, u32>) -> String {
    let reached: Vec<String> = windows
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(w, n)| format!("{w} x{n}"))
        .collect();
    if reached.is_empty() {
        "none".to_owned()
    } else {
        reached.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::shell_word;

    #[test]
    fn a_plain_word_stays_and_any_other_is_quoted() {
        assert_eq!(shell_word("double-click"), "double-click");
        assert_eq!(shell_word("my dir/x.toml"), "'my dir/x.toml'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(shell_word(""), "''");
    }
}
