//! What every HTML page shares: escaping, the page shell with its inline
//! style and script, and the provenance block.
//!
//! Pages are self-contained: style, script and pictures are inline, and
//! nothing names a network address, so a page opens from a file on a
//! machine with no network and looks the same in ten years. They are also
//! deterministic: everything but the provenance block is a function of the
//! suite's results, and the provenance block sits between two markers
//! ([`PROVENANCE_OPEN`], [`PROVENANCE_CLOSE`]) so that a comparison can
//! leave out exactly it.

use serde::{Deserialize, Serialize};

use crate::template;
pub use crate::template::esc;

/// Opens the only part of a page that may differ between two renderings
/// of the same suite.
pub const PROVENANCE_OPEN: &str = "<!-- provenance -->";
/// Closes it.
pub const PROVENANCE_CLOSE: &str = "<!-- /provenance -->";

/// Which build ran the suite, how it was asked to, and how fast it went.
/// The command line fills it; nothing else in a report depends on it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    /// The `idem` version.
    pub version: String,
    /// The source commit the build came from, as the build knows it.
    pub commit: String,
    /// The command line, as typed.
    pub command_line: String,
    /// `A..B`, end excluded.
    pub seeds: String,
    /// Wall-clock figures; they differ from run to run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub performance: Option<Performance>,
}

/// How fast the suite ran, measured by the command line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Performance {
    pub wall_ms: u64,
    pub threads: u64,
    pub runs: u64,
    /// Simulation steps over all runs.
    pub steps: u64,
    /// Simulated milliseconds over all runs.
    pub sim_ms: u64,
}

impl Performance {
    fn per_second(&self, count: u64) -> f64 {
        if self.wall_ms == 0 {
            return 0.0;
        }
        count as f64 * 1000.0 / self.wall_ms as f64
    }
}

impl Provenance {
    /// The block as HTML, between the markers.
    pub fn to_html(&self) -> String {
        template::render(
            "provenance.html",
            minijinja::context! { p => minijinja::value::Serde(self.html_view()) },
        )
    }

    /// The block as Markdown, between the same markers (HTML comments are
    /// invisible in a rendered pull-request comment).
    pub fn to_markdown(&self) -> String {
        template::render(
            "provenance.md",
            minijinja::context! { p => minijinja::value::Serde(self.markdown_view()) },
        )
    }

    /// What `provenance.html` prints, as `p`.
    pub(crate) fn html_view(&self) -> ProvenanceView<'_> {
        self.view(self.performance.as_ref().map(Performance::html_line))
    }

    /// What `provenance.md` prints, as `p`.
    pub(crate) fn markdown_view(&self) -> ProvenanceView<'_> {
        self.view(self.performance.as_ref().map(Performance::markdown_line))
    }

    fn view(&self, performance: Option<String>) -> ProvenanceView<'_> {
        ProvenanceView {
            version: &self.version,
            commit: &self.commit,
            command_line: &self.command_line,
            seeds: &self.seeds,
            performance,
        }
    }
}

/// What the provenance templates print.
#[derive(Serialize)]
pub(crate) struct ProvenanceView<'a> {
    version: &'a str,
    commit: &'a str,
    command_line: &'a str,
    seeds: &'a str,
    /// The wall-clock figures in a sentence.
    performance: Option<String>,
}

impl Performance {
    /// The figures in a sentence, for the HTML block.
    fn html_line(&self) -> String {
        format!(
            "{} runs on {} threads in {:.1} s wall: {:.1} runs/s, {:.0} steps/s, {:.0} simulated s per wall s",
            self.runs,
            self.threads,
            self.wall_ms as f64 / 1000.0,
            self.per_second(self.runs),
            self.per_second(self.steps),
            self.per_second(self.sim_ms) / 1000.0,
        )
    }

    /// The figures in a shorter sentence, for the Markdown block.
    fn markdown_line(&self) -> String {
        format!(
            "{} runs in {:.1} s wall on {} threads ({:.1} runs/s)",
            self.runs,
            self.wall_ms as f64 / 1000.0,
            self.threads,
            self.per_second(self.runs)
        )
    }
}

/// Removes every provenance block (markers included) from `text`: what
/// two renderings of one suite must agree on.
pub fn without_provenance(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(PROVENANCE_OPEN) {
        out.push_str(&rest[..start]);
        match rest[start..].find(PROVENANCE_CLOSE) {
            Some(end) => rest = &rest[start + end + PROVENANCE_CLOSE.len()..],
            None => {
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// JSON made safe inside `<script type="application/json">`: `<` can
/// only occur inside JSON strings, where `\u003c` means the same.
pub fn script_json(json: &str) -> String {
    json.replace('<', "\\u003c")
}

/// The colour of each attempt state, shared by the timeline, the legend
/// and the CAS chain.
pub const STATE_COLOURS: &[(&str, &str)] = &[
    ("starting", "#94a3b8"),
    ("running", "#3b82f6"),
    ("unknown", "#f59e0b"),
    ("succeeded", "#16a34a"),
    ("failed", "#dc2626"),
    ("cancelled", "#6b7280"),
    ("lost", "#8b5cf6"),
];

/// The colour of `state` (grey for one this report does not know).
pub fn state_colour(state: &str) -> &'static str {
    STATE_COLOURS
        .iter()
        .find(|(name, _)| *name == state)
        .map_or("#a3a3a3", |(_, colour)| colour)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_script_breakouts() {
        assert_eq!(
            esc(r#"<a href="x">&'"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(
            script_json(r#"{"a":"</script>"}"#),
            r#"{"a":"\u003c/script>"}"#
        );
    }

    #[test]
    fn provenance_is_cut_out_exactly() {
        let provenance = Provenance {
            version: "0.1.0".into(),
            commit: "abc".into(),
            command_line: "idem report".into(),
            seeds: "0..3".into(),
            performance: None,
        };
        let page = format!("<p>a</p>{}<p>b</p>", provenance.to_html());
        assert_eq!(without_provenance(&page), "<p>a</p><p>b</p>");
        let markdown = format!("x\n{}y\n", provenance.to_markdown());
        assert_eq!(without_provenance(&markdown), "x\n\ny\n");
    }
}
