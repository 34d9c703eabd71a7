//! Validation: from the file types of [`crate::format`] to the simulator's
//! [`Scenario`], or to every error, each with its position.
//!
//! Defaults come from the simulator's own `Default` impls (`Topology`,
//! `Timing`, `ClientSpec::new`, `Policy`), so a small file is enough and a
//! default changed there changes here. Bounds come from its `*_MAX`
//! constants. The validator collects errors instead of stopping at the
//! first, so that one edit-and-run cycle shows everything wrong with a file.
//!
//! The [`Checker`] goes through a file section by section, one module
//! each: [`timing`] (and the policy), [`topology`] (and the providers),
//! [`clients`] (and their actions), [`faults`].
//!
//! Determinism: the result depends only on the text. The only maps are
//! ordered, and nothing reads a clock or the environment.

use std::collections::BTreeSet;
use std::fmt::Display;
use std::ops::Range;

use serde_spanned::Spanned;

use idem_core::design::Design;
use idem_sim::scenario::{SETTLE_MS_MAX, Scenario, Window};

use crate::error::{ScenarioError, ScenarioErrors};
use crate::format::{Field, ScenarioFile};
use crate::kept::{Kept, RunPath};

mod clients;
mod faults;
mod hosts;
mod timing;
mod topology;

/// One simulation step is at most this long; longer steps would hide the
/// interleavings the bench exists to find.
pub const TICK_MS_MAX: u64 = 1_000;
/// Provider and client names become host names and tokens.
pub const NAME_LEN_MAX: usize = 40;
/// A worker's attempts per job, at most.
pub const WORKER_ATTEMPTS_MAX: u32 = 64;
/// Jobs a worker picks up per poll, at most.
pub const WORKER_JOBS_PER_TICK_LIMIT: u32 = 1_024;
/// Attempts the reconciler looks at per pass, at most.
pub const RECONCILER_ATTEMPTS_PER_PASS_LIMIT: u32 = 1_024;
/// A click's `params`, serialized, at most (the API refuses large bodies).
pub const PARAMS_LEN_MAX_BYTES: usize = 16 * 1024;
/// A scenario's description, at most.
pub const DESCRIPTION_LEN_MAX_BYTES: usize = 16 * 1024;
/// A provider's `deviate_one_in`, at most.
pub const DEVIATE_ONE_IN_MAX: u32 = 1_000_000;
/// A provider's `context_window_tokens`, at most.
pub const CONTEXT_WINDOW_TOKENS_MAX: u32 = 100_000_000;
/// A model name, at most (a provider's or a `provider_model_change`'s).
pub const MODEL_NAME_LEN_MAX_BYTES: usize = 255;
/// Errors reported per file; past it, one closing error says how many more.
pub const ERRORS_MAX: usize = 32;

/// Defaults the simulator leaves to the file format.
pub mod defaults {
    /// A click is not retried unless the file says so.
    pub const RETRIES: u32 = 0;
    /// Pause before a click's retry.
    pub const RETRY_AFTER_MS: u64 = 1_000;
    /// Store faults hit the first occurrence, once.
    pub const NTH: u32 = 1;
    pub const COUNT: u32 = 1;
}

/// Validates `text` (the contents of `path`) and builds the scenario
/// `name`.
pub fn scenario_from_str(name: &str, path: &str, text: &str) -> Result<Scenario, ScenarioErrors> {
    file_from_str(name, path, text).map(|(scenario, _)| scenario)
}

/// Validates `text` and builds the scenario `name`, with what the file was
/// kept for, if it says.
pub fn file_from_str(
    name: &str,
    path: &str,
    text: &str,
) -> Result<(Scenario, Option<Kept>), ScenarioErrors> {
    let file = crate::format::parse(text).map_err(|e| ScenarioError::syntax(path, text, &e))?;
    let mut checker = Checker::default();
    let kept = checker.kept(&file);
    let scenario = checker.scenario(name, file);
    if checker.errors.is_empty() {
        return Ok((scenario, kept));
    }
    // In file order; errors at one position keep the order they were found.
    checker.errors.sort_by_key(|(span, _)| span.start);
    let total = checker.errors.len();
    let mut errors: Vec<ScenarioError> = checker
        .errors
        .iter()
        .take(ERRORS_MAX)
        .map(|(span, message)| ScenarioError::invalid(path, text, span, message.clone()))
        .collect();
    if total > ERRORS_MAX {
        let (span, _) = &checker.errors[ERRORS_MAX];
        errors.push(ScenarioError::invalid(
            path,
            text,
            span,
            format!("and {} more errors", total - ERRORS_MAX),
        ));
    }
    Err(ScenarioErrors::new(errors))
}

#[derive(Default)]
struct Checker {
    errors: Vec<(Range<usize>, String)>,
}

/// A field's value, or `default` when it is absent.
fn value<T: Clone>(field: &Field<T>, default: T) -> T {
    field.as_ref().map_or(default, |f| f.get_ref().clone())
}

impl Checker {
    fn error(&mut self, span: Range<usize>, message: impl Into<String>) {
        self.errors.push((span, message.into()));
    }

    /// A number within `min..=max`, or an error at the field; `note` says
    /// where the maximum comes from.
    fn bounded<T>(
        &mut self,
        field: &Field<T>,
        name: &str,
        default: T,
        min: T,
        max: T,
        note: &str,
    ) -> T
    where
        T: Copy + PartialOrd + Display,
    {
        let Some(field) = field else { return default };
        let v = *field.get_ref();
        if v < min {
            self.error(
                field.span(),
                format!("`{name}` must be at least {min}, got {v}"),
            );
        } else if v > max {
            self.error(
                field.span(),
                format!("`{name}` must be at most {max}{note}, got {v}"),
            );
        }
        v
    }

    /// A time in milliseconds of at least 1, at most [`SETTLE_MS_MAX`].
    fn positive_ms(&mut self, field: &Field<u64>, name: &str, default: u64) -> u64 {
        self.bounded(field, name, default, 1, SETTLE_MS_MAX, "")
    }

    /// A time in milliseconds, at most [`SETTLE_MS_MAX`].
    fn ms(&mut self, field: &Field<u64>, name: &str, default: u64) -> u64 {
        self.bounded(field, name, default, 0, SETTLE_MS_MAX, "")
    }

    /// A model name, as a provider serves it.
    fn model_name(&mut self, model: &Spanned<String>) {
        let len = model.get_ref().len();
        if len == 0 || len > MODEL_NAME_LEN_MAX_BYTES {
            self.error(
                model.span(),
                format!("a model name must be 1 to {MODEL_NAME_LEN_MAX_BYTES} bytes"),
            );
        }
    }

    fn name(&mut self, name: &Spanned<String>, what: &str) {
        let text = name.get_ref();
        let valid_chars = text
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
        if text.is_empty() || text.len() > NAME_LEN_MAX || !valid_chars {
            self.error(
                name.span(),
                format!(
                    "{what} name {text:?} must be 1 to {NAME_LEN_MAX} characters of a-z, 0-9, '-' and '_' (it becomes a host name)"
                ),
            );
        }
    }

    fn kept(&mut self, file: &ScenarioFile) -> Option<Kept> {
        let kept = file.kept.as_ref()?.get_ref();
        let event_kinds = kept.event_kinds.as_ref().map(|e| {
            let text = e.get_ref();
            if text.len() != 16 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
                self.error(
                    e.span(),
                    "`event_kinds` is a fingerprint of 16 hex digits, as `idem fuzz` and `idem regress --update` write it",
                );
            }
            text.to_ascii_lowercase()
        });
        let windows = kept.windows.as_ref().map(|ws| {
            let mut windows: Vec<Window> = ws.get_ref().iter().map(|w| *w.get_ref()).collect();
            windows.sort();
            windows.dedup();
            windows
        });
        let path = match (windows, event_kinds) {
            (Some(windows), Some(event_kinds)) => Some(RunPath {
                windows,
                event_kinds,
            }),
            (None, None) => None,
            _ => {
                self.error(
                    file.kept.as_ref().map(Spanned::span).unwrap_or_default(),
                    "a recorded path names both `windows` and `event_kinds`",
                );
                None
            }
        };
        Some(Kept {
            seed: *kept.seed.get_ref(),
            design: value(&kept.design, Design::Correct),
            path,
        })
    }

    fn scenario(&mut self, name: &str, file: ScenarioFile) -> Scenario {
        let description = value(&file.description, String::new());
        if let Some(d) = &file.description
            && d.get_ref().len() > DESCRIPTION_LEN_MAX_BYTES
        {
            self.error(
                d.span(),
                format!("the description must be at most {DESCRIPTION_LEN_MAX_BYTES} bytes"),
            );
        }
        let timing = self.timing(&file);
        let policy = self.policy(&file);
        let topology = self.topology(&file);
        let clients = self.clients(&file, &topology, &timing);
        let faults = self.faults(&file, &topology, &clients, &timing);
        let mut expect_windows = Vec::new();
        if let Some(windows) = &file.expect_windows {
            for window in windows.get_ref() {
                if expect_windows.contains(window.get_ref()) {
                    self.error(window.span(), "this window is already expected");
                } else {
                    expect_windows.push(*window.get_ref());
                }
            }
        }
        Scenario {
            name: name.to_owned(),
            description,
            topology,
            policy,
            clients,
            faults,
            timing,
            expect_windows,
        }
    }

    /// Refuses the fields that do not apply to an action or fault kind.
    fn only(
        &mut self,
        kind: &str,
        what: &str,
        present: &[(&str, Option<Range<usize>>)],
        allowed: &[&str],
    ) {
        for (field, span) in present {
            if let Some(span) = span
                && !allowed.contains(field)
            {
                self.error(
                    span.clone(),
                    format!(
                        "`{field}` does not apply to a {kind} {what} (it takes: {})",
                        allowed.join(", ")
                    ),
                );
            }
        }
    }

    fn provider_ref(&mut self, name: &Spanned<String>, providers: &BTreeSet<&str>) {
        if !providers.contains(name.get_ref().as_str()) {
            let known: Vec<&str> = providers.iter().copied().collect();
            self.error(
                name.span(),
                format!(
                    "unknown provider {:?}; providers here: {}",
                    name.get_ref(),
                    known.join(", ")
                ),
            );
        }
    }
}
