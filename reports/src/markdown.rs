//! `summary.md`: the suite for a pull-request comment. Tables, the repro
//! commands, and a Mermaid sequence diagram of one failure's evidence
//! (GitHub renders Mermaid in comments).

use std::fmt::Write as _;

use crate::html::Provenance;
use crate::mutants::Role;
use crate::suite::{SuiteReport, SuiteVerdict};
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
    let mut out = String::new();
    let mutants: Vec<_> = suite
        .mutants
        .designs
        .iter()
        .filter(|d| d.role == Role::Mutant)
        .collect();
    let caught = mutants.iter().filter(|d| d.ok()).count();
    let _ = writeln!(
        out,
        "## idem design review: {}\n",
        if suite.verdict == SuiteVerdict::Pass {
            "PASS"
        } else {
            "FAIL"
        }
    );
    let _ = writeln!(
        out,
        "{} scenarios × seeds {}..{} × {} designs ({} runs). The correct design {}; **{caught} of {} naive designs caught**.\n",
        suite.scenarios.len(),
        suite.seeds.start,
        suite.seeds.end,
        suite.designs.len(),
        suite.totals.runs,
        if suite.correct_failures.is_empty() {
            "passed every run".to_owned()
        } else {
            format!("**failed {} runs**", suite.correct_failures.len())
        },
        mutants.len()
    );
    out.push_str("| design | result | seeds to detect | caught by | first failure |\n|---|---|---:|---|---|\n");
    for d in &suite.mutants.designs {
        let result = match (d.role, d.ok()) {
            (Role::Correct, true) => "passed",
            (Role::Correct, false) => "**FAILED**",
            (Role::Mutant, true) => "caught",
            (Role::Mutant, false) => "**NOT CAUGHT**",
        };
        let (by, first) = d.first_failure.as_ref().map_or_else(
            || (String::new(), "-".to_owned()),
            |f| {
                (
                    f.invariants
                        .iter()
                        .map(|i| format!("{} `{}`", i.invariant, i.name))
                        .collect::<Vec<_>>()
                        .join(", "),
                    format!("{} seed {}", f.scenario, f.seed),
                )
            },
        );
        let seeds = if d.role == Role::Mutant {
            d.seeds_tried.to_string()
        } else {
            "-".to_owned()
        };
        let _ = writeln!(
            out,
            "| `{}` | {result} | {seeds} | {by} | {first} |",
            d.design
        );
    }
    out.push_str("\n### Scenarios × designs (runs passed)\n\n| scenario |");
    for d in &suite.designs {
        let _ = write!(out, " {} |", d.name);
    }
    out.push_str("\n|---|");
    for _ in &suite.designs {
        out.push_str("---:|");
    }
    out.push('\n');
    for s in &suite.scenarios {
        let _ = write!(out, "| {} |", s.name);
        for d in &suite.designs {
            let cell = suite.cell(&s.name, &d.name);
            let text = cell.map_or_else(String::new, |c| {
                let mark = if c.failed + c.errors > 0 { " ✗" } else { "" };
                format!("{}/{}{mark}", c.passed, c.runs)
            });
            let _ = write!(out, " {text} |");
        }
        out.push('\n');
    }
    let never = &suite.coverage.never_reached;
    let _ = writeln!(
        out,
        "\nRace windows reached by the correct design: {} of {}{}.",
        suite.coverage.windows.len() - never.len(),
        suite.coverage.windows.len(),
        if never.is_empty() {
            String::new()
        } else {
            format!(" (never: {})", never.join(", "))
        }
    );
    let repros: Vec<(&str, &str)> = suite
        .mutants
        .designs
        .iter()
        .filter_map(|d| {
            Some((
                d.design.as_str(),
                d.first_failure.as_ref()?.reproduce.as_str(),
            ))
        })
        .collect();
    if !repros.is_empty() {
        out.push_str("\n### Reproduce\n\n```sh\n");
        for (design, command) in repros {
            let _ = writeln!(out, "{command}   # {design}");
        }
        out.push_str("```\n");
    }
    if let Some(i) = illustrated {
        let _ = writeln!(
            out,
            "\n### Evidence: {} seed {} under `{}`\n\n{}\n",
            i.scenario, i.seed, i.design, i.message
        );
        out.push_str(&mermaid(i.trace, i.evidence));
    }
    out.push('\n');
    out.push_str(&provenance.to_markdown());
    out
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
