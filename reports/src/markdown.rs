//! `summary.md`: the suite for a pull-request comment. Tables, the repro
//! commands, and a Mermaid sequence diagram of one failure's evidence
//! (GitHub renders Mermaid in comments). `templates/summary.md` writes it.

use std::fmt::Write as _;

use serde::Serialize;

use crate::html::{Provenance, ProvenanceView};
use crate::mutants::{DesignResult, Role};
use crate::suite::{Cell, SuiteReport};
use crate::template;
use crate::trace::{Body, RunTrace};

/// One failing run whose evidence the summary draws.
#[derive(Clone, Debug)]
pub struct Illustrated<'a> {
    pub scenario: &'a str,
    pub design: &'a str,
    pub seed: u64,
    /// Evidence seqs of its first violation.
    pub evidence: &'a [u64],
    pub message: &'a str,
    pub trace: &'a RunTrace,
}

/// The Markdown summary.
pub fn render(
    suite: &SuiteReport,
    illustrated: Option<&Illustrated<'_>>,
    provenance: &Provenance,
) -> String {
    let mutants = suite
        .mutants
        .designs
        .iter()
        .filter(|d| d.role == Role::Mutant);
    let view = SummaryView {
        s: suite,
        caught: mutants.clone().filter(|d| d.ok()).count(),
        mutants: mutants.count(),
        designs: suite
            .mutants
            .designs
            .iter()
            .map(|d| DesignRow { d, ok: d.ok() })
            .collect(),
        matrix: matrix(suite),
        repros: suite
            .mutants
            .designs
            .iter()
            .filter_map(|d| {
                Some(Repro {
                    design: &d.design,
                    command: &d.first_failure.as_ref()?.reproduce,
                })
            })
            .collect(),
        illustrated: illustrated.map(|i| IllustratedView {
            scenario: i.scenario,
            design: i.design,
            seed: i.seed,
            message: i.message,
        }),
        mermaid: illustrated.map(|i| mermaid(i.trace, i.evidence)),
        p: provenance.markdown_view(),
    };
    template::render("summary.md", view)
}

/// Everything `summary.md` prints.
#[derive(Serialize)]
struct SummaryView<'a> {
    s: &'a SuiteReport,
    caught: usize,
    mutants: usize,
    designs: Vec<DesignRow<'a>>,
    matrix: Vec<MatrixRow<'a>>,
    repros: Vec<Repro<'a>>,
    illustrated: Option<IllustratedView<'a>>,
    mermaid: Option<String>,
    p: ProvenanceView<'a>,
}

#[derive(Serialize)]
struct DesignRow<'a> {
    #[serde(flatten)]
    d: &'a DesignResult,
    ok: bool,
}

/// A scenario's cells, in design order.
#[derive(Serialize)]
struct MatrixRow<'a> {
    scenario: &'a str,
    cells: Vec<Option<&'a Cell>>,
}

fn matrix(suite: &SuiteReport) -> Vec<MatrixRow<'_>> {
    suite
        .scenarios
        .iter()
        .map(|s| MatrixRow {
            scenario: &s.name,
            cells: suite
                .designs
                .iter()
                .map(|d| suite.cell(&s.name, &d.name))
                .collect(),
        })
        .collect()
}

/// The command that shows a design's first failure again.
#[derive(Serialize)]
struct Repro<'a> {
    design: &'a str,
    command: &'a str,
}

#[derive(Serialize)]
struct IllustratedView<'a> {
    scenario: &'a str,
    design: &'a str,
    seed: u64,
    message: &'a str,
}

/// A Mermaid sequence diagram of the evidence events: each a message from
/// the host that caused it to the host that saw it.
pub fn mermaid(trace: &RunTrace, evidence: &[u64]) -> String {
    let name = |host: &str| host.replace(['-', ' '], "_");
    let mut out = String::from("```mermaid\nsequenceDiagram\n");
    let mut participants: Vec<String> = Vec::new();
    let mut lines = Vec::new();
    for seq in evidence {
        let Some(event) = usize::try_from(*seq).ok().and_then(|i| trace.events.get(i)) else {
            continue;
        };
        let (from, to) = match &event.body {
            Body::HttpRequest { replica, .. } => (event.host.clone(), replica.clone()),
            _ => (
                event.caller.clone().unwrap_or_else(|| event.host.clone()),
                event.host.clone(),
            ),
        };
        for host in [&from, &to] {
            if !participants.contains(host) {
                participants.push(host.clone());
            }
        }
        let text = crate::page::describe(event)
            .replace(';', ",")
            .replace('#', "no. ");
        let text = text.rsplit(": ").next().unwrap_or(&text).to_owned();
        lines.push(format!(
            "    {}->>{}: {} ms: {}",
            name(&from),
            name(&to),
            event.t_ms,
            text
        ));
    }
    for p in participants {
        let _ = writeln!(out, "    participant {} as {p}", name(&p));
    }
    for line in lines {
        out.push_str(&line);
        out.push('\n');
    }
    out.push_str("```\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::tests::input;

    #[test]
    fn summarises_and_draws_the_evidence() {
        let suite = SuiteReport::new(input(Some(2)));
        let trace = RunTrace::parse(concat!(
            r#"{"seq":0,"t_ms":1,"host":"client-a","kind":"http_request","client":"a","request_id":0,"replica":"api-1","method":"POST","path":"/v1/jobs"}"#,
            "\n",
            r#"{"seq":1,"t_ms":5,"host":"store","caller":"api-1","kind":"job_created","job_id":"j","owner":"o","key":"k","fingerprint":"f"}"#
        ))
        .expect("valid");
        let md = render(
            &suite,
            Some(&Illustrated {
                scenario: "b",
                design: "last-writer-wins",
                seed: 2,
                evidence: &[0, 1],
                message: "two winners",
                trace: &trace,
            }),
            &Provenance::default(),
        );
        assert!(md.contains("| `last-writer-wins` | caught | 3 |"), "{md}");
        assert!(md.contains("```mermaid\nsequenceDiagram"));
        assert!(md.contains("client_a->>api_1: 1 ms"));
        assert!(md.contains("api_1->>store: 5 ms"));
        assert!(md.contains("idem run b --seed 2 --design last-writer-wins"));
    }
}
