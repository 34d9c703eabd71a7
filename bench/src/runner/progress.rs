//! The progress bar of a run: on stderr when a person is watching, hidden
//! otherwise, so that CI logs and piped output stay clean and stdout holds
//! only the result.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A progress bar counting `unit`s, with a message the run updates.
#[derive(Debug)]
pub struct Progress {
    bar: ProgressBar,
    unit: &'static str,
    /// Also show the rate (`12.3/s`).
    rate: bool,
}

impl Progress {
    /// Nothing drawn.
    pub fn hidden() -> Self {
        Self {
            bar: ProgressBar::hidden(),
            unit: "",
            rate: false,
        }
    }

    /// A bar of `unit`s on stderr when it is a terminal; hidden otherwise.
    pub fn on_terminal(unit: &'static str) -> Self {
        let bar = if std::io::stderr().is_terminal() {
            ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr())
        } else {
            ProgressBar::hidden()
        };
        Self {
            bar,
            unit,
            rate: false,
        }
    }

    /// Also shows how many units a second go by.
    #[must_use]
    pub fn with_rate(mut self) -> Self {
        self.rate = true;
        self
    }

    /// The message beside the count (`3 failed`).
    pub fn message(&self, message: impl Into<String>) {
        self.bar.set_message(message.into());
    }

    /// A bar of `len` units, or a spinner when the length is not known
    /// (a run under a time budget).
    pub(crate) fn start(&self, len: Option<usize>) {
        let unit = self.unit;
        let rate = if self.rate { ", {per_sec}" } else { "" };
        let template = match len {
            Some(len) => {
                self.bar.set_length(len as u64);
                format!(
                    "{{bar:40}} {{pos}}/{{len}} {unit}{rate}, {{msg}} [{{elapsed_precise}}, eta {{eta}}]"
                )
            }
            None => format!("{{spinner}} {{pos}} {unit}{rate}, {{msg}} [{{elapsed_precise}}]"),
        };
        self.bar
            .set_style(ProgressStyle::with_template(&template).expect("a valid template"));
        self.bar.reset_elapsed();
    }

    pub(crate) fn tick(&self) {
        self.bar.inc(1);
    }

    pub(crate) fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
