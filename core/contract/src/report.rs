//! What a certification found: a table of check by input, the failures with
//! their detail, and the evidence a certificate keeps.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write as _};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::tokenizer::TokenizerProfile;

/// Failures listed under the table; past it, one line says how many more.
pub const FAILURE_LINES_MAX: usize = 40;
/// Failures kept in a certificate's evidence.
pub const EVIDENCE_FAILURES_MAX: usize = 64;
/// The longest failure detail kept, in characters.
const DETAIL_CHARS_MAX: usize = 400;

/// The checks, in the order the table shows them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Check {
    /// The rendered prompt decodes back from the provider's tokens exactly.
    TokenizerLossless,
    /// User text that looks like a special token is not encoded as one.
    SpecialTokens,
    /// The prompt and the output budget fit the provider's context window.
    ContextWindow,
    /// The provider answered with a chat completion.
    Transport,
    /// The answer came from the model asked for: by its name, or a dated
    /// snapshot of it (and the provider's model lookup says the same).
    Model,
    /// The answer's content is a JSON object.
    Parse,
    /// It validates against the contract's output schema.
    Schema,
    /// It deserializes into the contract's business type.
    BusinessType,
    /// The business result has the fields the corpus expects.
    RoundTrip,
    /// Every sample of an input gave the same business result.
    Consistency,
}

impl Check {
    pub const ALL: &'static [Check] = &[
        Check::TokenizerLossless,
        Check::SpecialTokens,
        Check::ContextWindow,
        Check::Transport,
        Check::Model,
        Check::Parse,
        Check::Schema,
        Check::BusinessType,
        Check::RoundTrip,
        Check::Consistency,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Check::TokenizerLossless => "tokenizer_lossless",
            Check::SpecialTokens => "special_tokens",
            Check::ContextWindow => "context_window",
            Check::Transport => "transport",
            Check::Model => "model",
            Check::Parse => "parse",
            Check::Schema => "schema",
            Check::BusinessType => "business_type",
            Check::RoundTrip => "round_trip",
            Check::Consistency => "consistency",
        }
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One cell of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckOutcome {
    /// Held for every sample it ran on.
    Pass,
    /// Failed for at least one sample.
    Fail,
    /// Never ran: an earlier check failed, or the input was not sent.
    NotRun,
}

impl CheckOutcome {
    fn mark(self) -> &'static str {
        match self {
            CheckOutcome::Pass => "ok",
            CheckOutcome::Fail => "FAIL",
            CheckOutcome::NotRun => "-",
        }
    }
}

/// One row of the table: an input and how each check went for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputRow {
    pub input: String,
    pub cells: BTreeMap<Check, CheckOutcome>,
    /// The rendered prompt's cost in the provider's tokens.
    pub prompt_tokens: Option<usize>,
}

impl InputRow {
    pub fn new(input: &str) -> Self {
        Self {
            input: input.to_owned(),
            cells: BTreeMap::new(),
            prompt_tokens: None,
        }
    }

    /// One sample's outcome of `check`: a failure sticks.
    pub fn record(&mut self, check: Check, passed: bool) {
        let cell = self.cells.entry(check).or_insert(CheckOutcome::Pass);
        if !passed {
            *cell = CheckOutcome::Fail;
        }
    }

    pub fn cell(&self, check: Check) -> CheckOutcome {
        self.cells
            .get(&check)
            .copied()
            .unwrap_or(CheckOutcome::NotRun)
    }
}

/// One failed check, with what was wrong.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    pub check: Check,
    pub input: String,
    /// The sample (from 1), for checks made per sample.
    pub sample: Option<u32>,
    pub detail: String,
}

impl Failure {
    pub fn new(check: Check, input: &str, sample: Option<u32>, detail: String) -> Self {
        let mut detail: String = detail.chars().take(DETAIL_CHARS_MAX).collect();
        if detail.chars().count() == DETAIL_CHARS_MAX {
            detail.push('…');
        }
        Self {
            check,
            input: input.to_owned(),
            sample,
            detail,
        }
    }
}

/// What is being certified: a provider, the model asked for, and the
/// provider's tokenizer profile.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Target {
    pub provider: String,
    pub model: String,
    pub tokenizer: TokenizerProfile,
}

/// A finished certification run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Certification {
    pub target: Target,
    pub contract: String,
    pub contract_source: String,
    pub prompt_version: String,
    pub schema_version: String,
    pub temperature: f64,
    pub samples_per_input: u32,
    pub max_output_tokens: u32,
    /// What the provider said it serves under the model asked for, when it
    /// says: a certificate is only as good as this staying the same.
    pub model_identity: Option<String>,
    /// The models the answers named.
    pub served_models: BTreeSet<String>,
    pub rows: Vec<InputRow>,
    pub failures: Vec<Failure>,
}

impl Certification {
    /// Certified: every check held on every input, and every check that
    /// could run did.
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
            && self.rows.iter().all(|row| {
                Check::ALL
                    .iter()
                    .all(|c| row.cell(*c) != CheckOutcome::Fail)
            })
            && self
                .rows
                .iter()
                .any(|row| row.cell(Check::RoundTrip) == CheckOutcome::Pass)
    }

    /// The checks that failed somewhere, in table order.
    pub fn failed_checks(&self) -> BTreeSet<Check> {
        self.failures.iter().map(|f| f.check).collect()
    }

    /// How many (input, check) cells passed and failed, per check.
    fn tally(&self) -> BTreeMap<Check, (usize, usize)> {
        let mut tally: BTreeMap<Check, (usize, usize)> =
            Check::ALL.iter().map(|c| (*c, (0, 0))).collect();
        for row in &self.rows {
            for check in Check::ALL {
                let entry = tally.entry(*check).or_default();
                match row.cell(*check) {
                    CheckOutcome::Pass => entry.0 += 1,
                    CheckOutcome::Fail => entry.1 += 1,
                    CheckOutcome::NotRun => {}
                }
            }
        }
        tally
    }

    /// The certificate's evidence: what was checked, on what, and what
    /// failed. `source` says who vouches for it.
    pub fn evidence(&self, build: &str) -> Value {
        let checks: serde_json::Map<String, Value> = self
            .tally()
            .into_iter()
            .map(|(check, (passed, failed))| {
                (
                    check.name().to_owned(),
                    json!({"inputs_passed": passed, "inputs_failed": failed}),
                )
            })
            .collect();
        json!({
            "source": "certification",
            "passed": self.passed(),
            "provider": self.target.provider,
            "model": self.target.model,
            "model_identity": self.model_identity,
            "served_models": self.served_models,
            "contract": self.contract,
            "prompt_version": self.prompt_version,
            "schema_version": self.schema_version,
            "temperature": self.temperature,
            "samples_per_input": self.samples_per_input,
            "max_output_tokens": self.max_output_tokens,
            "tokenizer": self.target.tokenizer,
            "inputs": self.rows.iter().map(|r| r.input.clone()).collect::<Vec<_>>(),
            "checks": checks,
            "failed_checks": self.failed_checks().iter().map(|c| c.name()).collect::<Vec<_>>(),
            "failures": self.failures.iter().take(EVIDENCE_FAILURES_MAX).collect::<Vec<_>>(),
            "failures_total": self.failures.len(),
            "build": build,
        })
    }

    /// The verdict line: `CERTIFIED` or `NOT CERTIFIED (failed: a, b)`.
    pub fn verdict(&self) -> String {
        if self.passed() {
            "CERTIFIED".to_owned()
        } else {
            let failed: Vec<&str> = self.failed_checks().iter().map(|c| c.name()).collect();
            format!("NOT CERTIFIED (failed: {})", failed.join(", "))
        }
    }

    /// The table (check by input), the failures and the verdict, as text.
    pub fn to_text(&self) -> String {
        self.to_text_with_verdict(&self.verdict())
    }

    /// [`Certification::to_text`] under another verdict line (a run cut
    /// short is inconclusive, whatever its table says).
    pub fn to_text_with_verdict(&self, verdict: &str) -> String {
        let mut out = self.header_text();
        out.push('\n');
        out.push_str(&self.table_text());
        out.push_str(&self.failures_text());
        let _ = writeln!(out, "\nverdict: {verdict}");
        out
    }

    /// What was certified against what, in two lines.
    fn header_text(&self) -> String {
        let target = &self.target;
        let identity = match &self.model_identity {
            Some(identity) => format!("serving {identity}"),
            None => "identity not reported".to_owned(),
        };
        format!(
            "provider {} model {} ({identity}), tokenizer {} with a {}-token window, special tokens {}\n\
             contract {} ({}): prompt {}, schema {}, temperature {}, {} inputs x {} samples, output budget {} tokens\n",
            target.provider,
            target.model,
            target.tokenizer.encoding,
            target.tokenizer.context_window_tokens,
            target.tokenizer.special_tokens.name(),
            self.contract,
            self.contract_source,
            self.prompt_version,
            self.schema_version,
            self.temperature,
            self.rows.len(),
            self.samples_per_input,
            self.max_output_tokens,
        )
    }

    /// One line per input, one column per check.
    fn table_text(&self) -> String {
        let mut out = String::new();
        let name_width = self
            .rows
            .iter()
            .map(|r| r.input.chars().count())
            .chain(["input".len()])
            .max()
            .unwrap_or(5);
        let _ = write!(out, "{:<name_width$}  {:>6}", "input", "tokens");
        for check in Check::ALL {
            let _ = write!(out, "  {}", check.name());
        }
        out.push('\n');
        for row in &self.rows {
            let tokens = row
                .prompt_tokens
                .map_or_else(|| "-".to_owned(), |t| t.to_string());
            let _ = write!(out, "{:<name_width$}  {tokens:>6}", row.input);
            for check in Check::ALL {
                let width = check.name().len();
                let _ = write!(out, "  {:<width$}", row.cell(*check).mark());
            }
            out.push('\n');
        }
        out
    }

    /// The failures, at most [`FAILURE_LINES_MAX`] of them.
    fn failures_text(&self) -> String {
        let mut out = String::new();
        if self.failures.is_empty() {
            return out;
        }
        let _ = writeln!(out, "\nfailures ({}):", self.failures.len());
        for failure in self.failures.iter().take(FAILURE_LINES_MAX) {
            let sample = failure
                .sample
                .map_or_else(String::new, |s| format!(" sample {s}"));
            let _ = writeln!(
                out,
                "  {} {}{sample}: {}",
                failure.check, failure.input, failure.detail
            );
        }
        if self.failures.len() > FAILURE_LINES_MAX {
            let more = self.failures.len() - FAILURE_LINES_MAX;
            let _ = writeln!(out, "  ... and {more} more");
        }
        out
    }
}
