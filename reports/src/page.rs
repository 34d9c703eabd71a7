//! The page of one run: for the engineer reproducing a seed and for the
//! reviewer following a link from the index. Header and repro command,
//! the invariant verdicts with their evidence, the swimlane timeline, the
//! attempts, each job's compare-and-swap chain, the race windows, for a
//! failing run the diff against its nearest passing neighbour, and the
//! decision trace.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use crate::chain::{StepKind, chains};
use crate::diff::{Row, align};
use crate::html::{Provenance, STATE_COLOURS, esc, page, script_json, state_colour};
use crate::run::{RunRecord, RunVerdict};
use crate::timeline::{Overlay, Timeline, short};
use crate::trace::{Body, Event, RunTrace};

/// The most trace events a page shows; a longer trace is cut, with a note.
/// With it, a page stays under [`PAGE_BYTES_MAX`].
pub const PAGE_EVENTS_MAX: usize = 3000;

/// The most bytes of trace lines a page shows (each line is embedded
/// twice: for hovering and in the full trace).
pub const PAGE_TRACE_BYTES_MAX: usize = 512 * 1024;

/// The size bound every run page keeps.
pub const PAGE_BYTES_MAX: usize = 4 * 1024 * 1024;

/// Diff rows shown at most.
const DIFF_ROWS_MAX: usize = 400;
/// Matching rows kept before the first divergence.
const DIFF_CONTEXT_ROWS: usize = 12;

/// How the compared run relates to this one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Relation {
    /// The nearest passing seed of the same scenario and design.
    NeighbourSeed,
    /// Every seed within the search bound failed: the same seed under the
    /// correct design.
    CorrectDesign,
}

/// The run a failing run is compared with.
#[derive(Clone, Debug)]
pub struct Neighbour<'a> {
    pub record: &'a RunRecord,
    pub trace: &'a RunTrace,
    pub relation: Relation,
    /// Seeds searched on each side.
    pub searched: u64,
    /// Its page, relative to this one, if it has one.
    pub link: Option<String>,
}

/// Everything a run page shows.
#[derive(Clone, Debug)]
pub struct RunPage<'a> {
    /// With violations and their evidence seqs.
    pub record: &'a RunRecord,
    pub trace: &'a RunTrace,
    /// The world's hosts, in lane order.
    pub hosts: &'a [String],
    /// The scenario's description.
    pub description: &'a str,
    /// Every invariant, as (number, snake_case name).
    pub invariants: &'a [(u8, String)],
    /// For a failing run: the run it is compared with, if one was found.
    pub neighbour: Option<Neighbour<'a>>,
    /// Seeds searched on each side when no neighbour was found.
    pub searched: u64,
    /// The suite index, relative to this page.
    pub index_link: Option<&'a str>,
    pub provenance: &'a Provenance,
}

/// A trace cut to [`PAGE_EVENTS_MAX`] events and [`PAGE_TRACE_BYTES_MAX`]
/// bytes of lines, and whether it was.
fn bounded(trace: &RunTrace) -> (RunTrace, bool) {
    let mut bytes = 0;
    let keep = trace
        .events
        .iter()
        .take(PAGE_EVENTS_MAX)
        .take_while(|e| {
            bytes += e.line.len() + 1;
            bytes <= PAGE_TRACE_BYTES_MAX
        })
        .count();
    if keep == trace.events.len() {
        return (trace.clone(), false);
    }
    (
        RunTrace {
            events: trace.events[..keep].to_vec(),
        },
        true,
    )
}

/// One line saying what an event did, for tables.
pub fn describe(event: &Event) -> String {
    let caller = event
        .caller
        .as_deref()
        .map(|c| format!("{c} → {}: ", event.host))
        .unwrap_or_default();
    let text = match &event.body {
        Body::HttpRequest {
            method,
            path,
            replica,
            request_id,
            ..
        } => format!("request {request_id}: {method} {path} → {replica}"),
        Body::HttpResponse {
            request_id,
            status,
            problem,
            replayed,
            ..
        } => format!(
            "response {request_id}: {status}{}{}",
            problem
                .as_deref()
                .map(|p| format!(" {}", p.rsplit(':').next().unwrap_or(p)))
                .unwrap_or_default(),
            if *replayed { " (replayed)" } else { "" }
        ),
        Body::HttpFailed {
            request_id, error, ..
        } => format!("request {request_id}: no response ({error})"),
        Body::ClientDone { client } => format!("{client} is done"),
        Body::JobCreated {
            job_id, owner, key, ..
        } => format!("job {} created for ({owner}, {key})", short(job_id)),
        Body::JobReplayed { job_id } => format!("job {} replayed", short(job_id)),
        Body::KeyReused {
            job_id,
            differing_pointers,
        } => format!(
            "key of job {} reused with another body ({})",
            short(job_id),
            differing_pointers.join(", ")
        ),
        Body::AttemptStarted {
            attempt_id,
            attempt_seq: seq,
            provider,
            read_version,
            job_id,
        } => format!(
            "attempt {} (#{seq} of job {}) started on {provider}, read version {read_version}",
            short(attempt_id),
            short(job_id)
        ),
        Body::AttemptRefused {
            reason,
            blocking_attempt,
            blocking_state,
            ..
        } => format!(
            "start refused: {reason}{}",
            blocking_attempt
                .as_deref()
                .map(|a| format!(
                    ", attempt {} is {}",
                    short(a),
                    blocking_state.as_deref().unwrap_or("open")
                ))
                .unwrap_or_default()
        ),
        Body::AttemptTransition {
            attempt_id,
            from,
            to,
            reason,
            ..
        } => format!(
            "attempt {} {from} → {to}{}",
            short(attempt_id),
            reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        ),
        Body::CompletionWon {
            attempt_id,
            from,
            version,
            out_of_band,
            result_sha256,
            ..
        } => format!(
            "attempt {} won from {from}: version {version}, result {}{}",
            short(attempt_id),
            short(result_sha256),
            if *out_of_band { " (out of band)" } else { "" }
        ),
        Body::CompletionLost {
            attempt_id,
            winner,
            discarded_sha256,
            ..
        } => format!(
            "attempt {} lost to {}: output {} discarded",
            short(attempt_id),
            winner.as_deref().map_or("?", short),
            short(discarded_sha256)
        ),
        Body::CompletionRefused {
            attempt_id, state, ..
        } => format!(
            "completion of attempt {} refused: it is {state}",
            short(attempt_id)
        ),
        Body::JobFailed { job_id, version } => {
            format!("job {} failed at version {version}", short(job_id))
        }
        Body::NoteRecorded { event, detail, .. } => format!("note {event} {detail}"),
        Body::StoreFaultInjected {
            op,
            occurrence,
            fault,
        } => format!(
            "fault injected on {op} #{occurrence}: {}",
            fault
                .get("kind")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("?")
        ),
        Body::ProviderExecution {
            key,
            exec_seq,
            billed,
            outcome,
            ..
        } => format!(
            "execution {exec_seq} for attempt {}: {outcome}{}",
            short(key),
            if *billed { ", billed" } else { "" }
        ),
        Body::Fault { name, detail } => format!("fault {name} {detail}"),
        Body::Truncated => "the trace was cut short".to_owned(),
        Body::Other => event.kind().to_owned(),
    };
    format!("{caller}{text}")
}

impl RunPage<'_> {
    /// The page's HTML.
    pub fn render(&self) -> String {
        let record = self.record;
        let (trace, cut) = bounded(self.trace);
        let timeline = Timeline::build(&trace, self.hosts, record.sim_ms);
        let evidence: BTreeSet<u64> = record
            .violations
            .iter()
            .flat_map(|v| v.evidence.iter().copied())
            .collect();
        let alignment = self.neighbour.as_ref().map(|n| {
            let (other, _) = bounded(n.trace);
            (align(&trace, &other), other)
        });
        let divergence = match (&self.neighbour, &alignment) {
            (Some(n), Some((a, other))) => a.first_divergence.and_then(|row| {
                let t = match a.rows[row] {
                    Row::Both(i, _) | Row::Left(i) => trace.events.get(i)?.t_ms,
                    Row::Right(j) => other.events.get(j)?.t_ms,
                };
                Some((t, format!("first divergence from {}", neighbour_name(n))))
            }),
            _ => None,
        };
        let overlay = Overlay {
            evidence: evidence.clone(),
            divergence,
        };
        let mut body = String::new();
        self.header(&mut body);
        if cut {
            let _ = write!(
                body,
                r#"<p class="note">This run's trace has {} events; the page shows the first {} (at most {PAGE_EVENTS_MAX} events and {} KiB of trace, the bound that keeps a page under {} MiB). <code>{} --trace run.jsonl</code> writes them all.</p>"#,
                self.trace.events.len(),
                trace.events.len(),
                PAGE_TRACE_BYTES_MAX / 1024,
                PAGE_BYTES_MAX / (1024 * 1024),
                esc(&record.reproduce)
            );
        }
        self.verdicts(&mut body);
        timeline_section(&mut body, &timeline, &overlay);
        attempts_section(&mut body, &timeline);
        chain_section(&mut body, &trace, &timeline);
        self.windows(&mut body);
        if let (Some(n), Some((a, other))) = (&self.neighbour, &alignment) {
            diff_section(&mut body, record, &trace, n, a, other);
        } else if !record.verdict.passed() {
            let _ = write!(
                body,
                r#"<h2>Diff</h2><p class="note">No passing run to compare with: every seed within {} of {} fails, and so does this seed under the correct design.</p>"#,
                self.searched, record.seed
            );
        }
        decision_trace(&mut body, &trace, &evidence);
        body.push_str(&self.provenance.to_html());
        let events: Vec<&str> = trace.events.iter().map(|e| e.line.as_str()).collect();
        let _ = write!(
            body,
            r#"<script type="application/json" id="events">[{}]</script>"#,
            script_json(&events.join(","))
        );
        page(
            &format!(
                "{} seed {} ({}): {}",
                record.scenario,
                record.seed,
                record.design,
                verdict_word(record.verdict)
            ),
            &body,
        )
    }

    fn header(&self, out: &mut String) {
        let r = self.record;
        if let Some(index) = self.index_link {
            let _ = write!(out, r#"<p><a href="{}">← suite index</a></p>"#, esc(index));
        }
        let _ = write!(
            out,
            r#"<h1>{} <span class="muted">seed {} · design {}</span> {}</h1>"#,
            esc(&r.scenario),
            r.seed,
            esc(&r.design),
            badge(r.verdict)
        );
        let _ = write!(out, "<p>{}</p>", esc(self.description));
        let _ = write!(
            out,
            r#"<div class="summary"><div>stop: <b>{}</b> at {} simulated ms</div><div>{} steps</div><div>{} trace events</div><div>trace hash <code>{}</code></div></div>"#,
            esc(&r.stop),
            r.sim_ms,
            r.steps,
            r.trace_events,
            esc(&r.trace_hash)
        );
        let _ = write!(
            out,
            r#"<p>Reproduce: <code class="repro">{}</code></p>"#,
            esc(&r.reproduce)
        );
    }

    fn verdicts(&self, out: &mut String) {
        let r = self.record;
        out.push_str("<h2>Invariants</h2>");
        if let Some(error) = &r.error {
            let _ = write!(
                out,
                r#"<p class="violation">The simulation could not finish: {}</p>"#,
                esc(error)
            );
        }
        out.push_str(r#"<table><tr><th class="num">#</th><th>invariant</th><th>verdict</th></tr>"#);
        for (number, name) in self.invariants {
            let violated = r
                .violations
                .iter()
                .filter(|v| v.invariant == *number)
                .count();
            let verdict = if r.verdict == RunVerdict::Error {
                r#"<span class="muted">not judged</span>"#.to_owned()
            } else if violated == 0 {
                r#"<span style="color:var(--pass)">✓ held</span>"#.to_owned()
            } else {
                format!(r#"<b style="color:var(--fail)">✗ violated {violated}×</b>"#)
            };
            let _ = write!(
                out,
                r#"<tr><td class="num">{number}</td><td><code>{}</code></td><td>{verdict}</td></tr>"#,
                esc(name)
            );
        }
        out.push_str("</table>");
        for v in &r.violations {
            let seqs: Vec<String> = v.evidence.iter().map(u64::to_string).collect();
            let _ = write!(
                out,
                r#"<div class="violation"><b>invariant {} ({})</b>: {}<br><button type="button" data-evidence="{}">show the evidence on the timeline</button> <span class="muted">events {}</span></div>"#,
                v.invariant,
                esc(&v.name),
                esc(&v.message),
                seqs.join(" "),
                esc(&seqs.join(", "))
            );
        }
    }

    fn windows(&self, out: &mut String) {
        let r = self.record;
        out.push_str("<h2>Race windows</h2><table><tr><th>window</th><th class=\"num\">times reached</th><th>expected by the scenario</th></tr>");
        for (window, count) in &r.windows {
            let expected = r.expect_windows.contains(window);
            if *count == 0 && !expected {
                continue;
            }
            let _ = write!(
                out,
                r#"<tr><td><code>{}</code></td><td class="num">{count}</td><td>{}</td></tr>"#,
                esc(window),
                match (expected, *count > 0) {
                    (true, true) => "expected, reached",
                    (true, false) => "expected, <b>not reached by this seed</b>",
                    _ => "",
                }
            );
        }
        out.push_str("</table>");
    }
}

fn verdict_word(verdict: RunVerdict) -> &'static str {
    match verdict {
        RunVerdict::Pass => "PASS",
        RunVerdict::Fail => "FAIL",
        RunVerdict::Error => "ERROR",
    }
}

/// The verdict as a coloured badge.
pub fn badge(verdict: RunVerdict) -> String {
    let class = match verdict {
        RunVerdict::Pass => "pass",
        RunVerdict::Fail => "fail",
        RunVerdict::Error => "error",
    };
    format!(
        r#"<span class="badge {class}">{}</span>"#,
        verdict_word(verdict)
    )
}

fn neighbour_name(n: &Neighbour<'_>) -> String {
    match n.relation {
        Relation::NeighbourSeed => format!("passing seed {}", n.record.seed),
        Relation::CorrectDesign => {
            format!("seed {} under the correct design", n.record.seed)
        }
    }
}

fn timeline_section(out: &mut String, timeline: &Timeline, overlay: &Overlay) {
    out.push_str(r#"<h2>Timeline</h2><div class="timeline-block"><div class="timeline-tools"><button type="button" data-zoom="0.5">zoom in</button><button type="button" data-zoom="2">zoom out</button><button type="button" data-zoom="reset">whole run</button><span class="muted">wheel to zoom, drag to pan, hover for the trace event · showing <span class="zoom-label"></span></span></div>"#);
    out.push_str(r#"<div class="legend">"#);
    for (state, colour) in STATE_COLOURS {
        let fill = if *state == "unknown" {
            "repeating-linear-gradient(45deg,#f59e0b 0 3px,#fbbf24 3px 6px)"
        } else {
            colour
        };
        let _ = write!(
            out,
            r#"<span><span class="sw" style="background:{fill}"></span>{state}</span>"#
        );
    }
    out.push_str(concat!(
        r#"<span>│ arrows: request, response (green ok, orange error), store call (teal), lost ack (red dashed)</span>"#,
        r#"<span>⊘ refused start</span><span>⌀ lost, output discarded</span><span>$ billed</span><span>✖ crash ↻ restart</span><span>⚡ store fault</span><span>⏱ clock stepped</span><span>shaded: fault window</span>"#,
        "</div>"
    ));
    let _ = write!(
        out,
        r#"<div class="timeline-wrap">{}</div></div>"#,
        timeline.to_svg(overlay)
    );
    if !timeline.jobs.is_empty() {
        out.push_str(r#"<p class="muted">Jobs: "#);
        let names: Vec<String> = timeline
            .jobs
            .iter()
            .enumerate()
            .map(|(i, j)| format!("job {} = <code>{}</code>", i + 1, esc(j)))
            .collect();
        out.push_str(&names.join(", "));
        out.push_str("</p>");
    }
}

fn attempts_section(out: &mut String, timeline: &Timeline) {
    out.push_str("<h2>Attempts</h2>");
    if timeline.attempts.is_empty() {
        out.push_str("<p class=\"muted\">No attempt started.</p>");
        return;
    }
    out.push_str(r#"<table><tr><th>job</th><th class="num">#</th><th>attempt</th><th>provider</th><th>started by</th><th>states (ms)</th><th>end</th><th>starts it blocked</th></tr>"#);
    for bar in &timeline.attempts {
        let states: Vec<String> = bar
            .segments
            .iter()
            .map(|s| {
                format!(
                    r#"<span style="color:{}">{}</span> {}–{}"#,
                    state_colour(&s.state),
                    esc(&s.state),
                    s.t0_ms,
                    s.t1_ms
                )
            })
            .collect();
        let end = match &bar.end {
            Some((state, t, _)) => format!(
                r#"<b style="color:{}">{}</b> at {t}"#,
                state_colour(state),
                esc(state)
            ),
            None => "<b>still open when the history ended</b>".to_owned(),
        };
        let blocked: Vec<String> = bar
            .blocked
            .iter()
            .map(|(t, _, what)| format!("{t} ms: {}", esc(what)))
            .collect();
        let _ = write!(
            out,
            r#"<tr><td>{}</td><td class="num">{}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{end}</td><td>{}</td></tr>"#,
            bar.job,
            bar.number,
            esc(short(&bar.attempt_id)),
            esc(&bar.provider),
            esc(&timeline.lanes[bar.lane].host),
            states.join(" → "),
            blocked.join("<br>")
        );
    }
    out.push_str("</table>");
}

fn chain_section(out: &mut String, trace: &RunTrace, timeline: &Timeline) {
    out.push_str("<h2>Compare-and-swap chain</h2>");
    let chains = chains(trace, &timeline.jobs);
    if chains.is_empty() {
        out.push_str("<p class=\"muted\">No job was created.</p>");
        return;
    }
    for chain in chains {
        let _ = write!(
            out,
            r#"<h3>job {} <code class="muted">{}</code>{}</h3><table class="chain"><tr><th class="num">seq</th><th class="num">ms</th><th>version</th><th>attempt</th><th>by</th><th>what happened</th></tr>"#,
            chain.number,
            esc(&chain.job_id),
            if chain.overwrites() > 0 {
                r#" <span class="badge fail">result overwritten</span>"#
            } else {
                ""
            }
        );
        for step in &chain.steps {
            let attempt = step
                .attempt_id
                .as_deref()
                .map(|a| {
                    let number = timeline
                        .attempt(a)
                        .map(|b| format!(" (#{} on {})", b.number, esc(&b.provider)))
                        .unwrap_or_default();
                    format!("<code>{}</code>{number}", esc(short(a)))
                })
                .unwrap_or_default();
            let (version, class, what) = match &step.kind {
                StepKind::Created => ("0".to_owned(), "", "created".to_owned()),
                StepKind::Won {
                    version,
                    result_sha256,
                    out_of_band,
                    overwrote,
                } => match overwrote {
                    Some(old) => (
                        format!("{} → {version}", version - 1),
                        "overwrite",
                        format!(
                            "wrote result {} over result {} that had already won: the first winner's result is gone",
                            esc(short(result_sha256)),
                            esc(short(old))
                        ),
                    ),
                    None => (
                        format!("{} → {version}", version - 1),
                        "",
                        format!(
                            "won{}: result {}",
                            if *out_of_band {
                                " (resolved out of band)"
                            } else {
                                ""
                            },
                            esc(short(result_sha256))
                        ),
                    ),
                },
                StepKind::Lost {
                    winner,
                    discarded_sha256,
                } => (
                    "unchanged".to_owned(),
                    "lost",
                    format!(
                        "lost the compare-and-swap to {}: output {} discarded",
                        winner.as_deref().map_or("?", short),
                        esc(short(discarded_sha256))
                    ),
                ),
                StepKind::Refused { state } => (
                    "unchanged".to_owned(),
                    "lost",
                    format!("completion refused: the attempt was already {}", esc(state)),
                ),
                StepKind::Failed { version } => (
                    version.to_string(),
                    "",
                    "the job gave up (failed)".to_owned(),
                ),
            };
            let _ = write!(
                out,
                r#"<tr><td class="num">{}</td><td class="num">{}</td><td>{version}</td><td>{attempt}</td><td>{}</td><td class="{class}">{what}</td></tr>"#,
                step.seq,
                step.t_ms,
                esc(step.caller.as_deref().unwrap_or(""))
            );
        }
        out.push_str("</table>");
    }
}

fn diff_section(
    out: &mut String,
    record: &RunRecord,
    trace: &RunTrace,
    n: &Neighbour<'_>,
    alignment: &crate::diff::Alignment,
    other: &RunTrace,
) {
    let name = neighbour_name(n);
    let link = n
        .link
        .as_deref()
        .map(|l| format!(r#" (<a href="{}">its page</a>)"#, esc(l)))
        .unwrap_or_default();
    let why = match n.relation {
        Relation::NeighbourSeed => format!(
            "the nearest passing seed of the same scenario and design (searched seeds {} ± {})",
            record.seed, n.searched
        ),
        Relation::CorrectDesign => format!(
            "every seed within {} ± {} fails under {}, so this compares with the same seed under the correct design",
            record.seed,
            n.searched,
            esc(&record.design)
        ),
    };
    let _ = write!(
        out,
        r#"<h2>Diff against {}</h2><p>This failing run beside {}{link}: {why}. Events are aligned by host and kind (ids and times differ between any two runs); <span style="background:#fef9c3">yellow</span> events are in one run only; the first divergence is marked, on the timeline too.</p>"#,
        esc(&name),
        esc(&name),
    );
    let start = alignment
        .first_divergence
        .map_or(0, |d| d.saturating_sub(DIFF_CONTEXT_ROWS));
    let shown = &alignment.rows[start..alignment.rows.len().min(start + DIFF_ROWS_MAX)];
    let _ = write!(
        out,
        r#"<table class="diff"><tr><th colspan="3">this run: seed {} · {}</th><th></th><th colspan="3">{}: seed {} · {}</th></tr>"#,
        record.seed,
        esc(&record.design),
        esc(&name),
        n.record.seed,
        esc(&n.record.design)
    );
    if start > 0 {
        let _ = write!(
            out,
            r#"<tr class="gap"><td colspan="7">… {start} matching events before …</td></tr>"#
        );
    }
    let cells = |event: Option<&Event>, only: bool| match event {
        Some(e) => format!(
            r#"<td class="num{0}">{1}</td><td class="num{0}">{2}</td><td class="{3}" data-seq="{1}">{4}</td>"#,
            if only { " only" } else { "" },
            e.seq,
            e.t_ms,
            if only { "only" } else { "" },
            esc(&describe(e))
        ),
        None => "<td></td><td></td><td></td>".to_owned(),
    };
    for (offset, row) in shown.iter().enumerate() {
        let index = start + offset;
        let first = alignment.first_divergence == Some(index);
        let (left, right, mark) = match *row {
            Row::Both(i, j) => (trace.events.get(i), other.events.get(j), "="),
            Row::Left(i) => (trace.events.get(i), None, "◀"),
            Row::Right(j) => (None, other.events.get(j), "▶"),
        };
        let only = !matches!(row, Row::Both(..));
        let _ = write!(
            out,
            r#"<tr{}>{}<td>{}</td>{}</tr>"#,
            if first {
                r#" class="first-diverge" id="first-divergence""#
            } else {
                ""
            },
            cells(left, only),
            if first {
                format!("{mark} first divergence")
            } else {
                mark.to_owned()
            },
            // The right side's seqs are the other run's; no hover there.
            cells(right, only).replace(" data-seq=", " data-other-seq=")
        );
    }
    if start + shown.len() < alignment.rows.len() {
        let _ = write!(
            out,
            r#"<tr class="gap"><td colspan="7">… {} more rows …</td></tr>"#,
            alignment.rows.len() - start - shown.len()
        );
    }
    out.push_str("</table>");
    if alignment.first_divergence.is_none() {
        out.push_str("<p class=\"note\">The two runs have the same sequence of events by host and kind: they differ in the values the events carry (ids, times, results), not in what happened.</p>");
    }
    if alignment.cut {
        let _ = write!(
            out,
            r#"<p class="note">Only the first {} events of each run were aligned.</p>"#,
            crate::diff::ALIGN_EVENTS_MAX
        );
    }
}

fn decision_trace(out: &mut String, trace: &RunTrace, evidence: &BTreeSet<u64>) {
    out.push_str("<h2>Decision trace</h2><p class=\"muted\">What the store decided and the fault plan did, in order (HTTP traffic and provider executions are on the timeline, and in the full trace below). Evidence events are highlighted.</p>");
    out.push_str(r#"<table><tr><th class="num">seq</th><th class="num">ms</th><th>kind</th><th>what happened</th></tr>"#);
    for event in &trace.events {
        let decision = event.host == "store" || matches!(event.body, Body::Fault { .. });
        if !decision && !evidence.contains(&event.seq) {
            continue;
        }
        let _ = write!(
            out,
            r#"<tr{} data-seq="{}"><td class="num">{}</td><td class="num">{}</td><td><code>{}</code></td><td>{}</td></tr>"#,
            if evidence.contains(&event.seq) {
                r#" class="ev""#
            } else {
                ""
            },
            event.seq,
            event.seq,
            event.t_ms,
            esc(event.kind()),
            esc(&describe(event))
        );
    }
    out.push_str("</table>");
    let _ = write!(
        out,
        "<details><summary>The whole trace ({} events, JSON lines)</summary><pre>",
        trace.events.len()
    );
    for event in &trace.events {
        out.push_str(&esc(&event.line));
        out.push('\n');
    }
    out.push_str("</pre></details>");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::ViolationRecord;

    fn record(verdict: RunVerdict) -> RunRecord {
        RunRecord {
            schema: crate::SCHEMA_VERSION,
            scenario: "s".to_owned(),
            seed: 3,
            design: "last-writer-wins".to_owned(),
            verdict,
            violations: if verdict == RunVerdict::Fail {
                vec![ViolationRecord {
                    invariant: 3,
                    name: "one_winner".to_owned(),
                    message: "two winners".to_owned(),
                    evidence: vec![1, 2],
                    evidence_events: Vec::new(),
                }]
            } else {
                Vec::new()
            },
            error: None,
            windows: [("cas_loser".to_owned(), 0)].into_iter().collect(),
            expect_windows: vec!["cas_loser".to_owned()],
            trace_hash: "h".to_owned(),
            trace_events: 3,
            steps: 10,
            sim_ms: 20,
            stop: "quiescent".to_owned(),
            reproduce: "idem run s --seed 3 --design last-writer-wins".to_owned(),
            build: None,
        }
    }

    fn trace(second_winner: bool) -> RunTrace {
        let last = if second_winner {
            r#"{"seq":2,"t_ms":9,"host":"store","caller":"worker-1","kind":"completion_won","job_id":"j","attempt_id":"a","from":"running","version":2,"out_of_band":false,"result_sha256":"r2"}"#
        } else {
            r#"{"seq":2,"t_ms":9,"host":"store","caller":"worker-1","kind":"completion_lost","job_id":"j","attempt_id":"a","from":"running","winner":"b","discarded_sha256":"r2"}"#
        };
        let text = [
            r#"{"seq":0,"t_ms":1,"host":"store","caller":"api-1","kind":"job_created","job_id":"j","owner":"o","key":"k","fingerprint":"f"}"#,
            r#"{"seq":1,"t_ms":5,"host":"store","caller":"worker-1","kind":"completion_won","job_id":"j","attempt_id":"b","from":"running","version":1,"out_of_band":false,"result_sha256":"r1"}"#,
            last,
        ]
        .join("\n");
        RunTrace::parse(&text).expect("valid")
    }

    #[test]
    fn a_failing_page_shows_the_overwrite_the_evidence_and_the_named_neighbour() {
        let failing = record(RunVerdict::Fail);
        let mut passing = record(RunVerdict::Pass);
        passing.seed = 4;
        let (bad, good) = (trace(true), trace(false));
        let hosts = vec![
            "api-1".to_owned(),
            "worker-1".to_owned(),
            "store".to_owned(),
        ];
        let invariants = vec![
            (3, "one_winner".to_owned()),
            (6, "losers_discarded".to_owned()),
        ];
        let provenance = Provenance::default();
        let html = RunPage {
            record: &failing,
            trace: &bad,
            hosts: &hosts,
            description: "a story",
            invariants: &invariants,
            neighbour: Some(Neighbour {
                record: &passing,
                trace: &good,
                relation: Relation::NeighbourSeed,
                searched: 8,
                link: None,
            }),
            searched: 8,
            index_link: Some("../index.html"),
            provenance: &provenance,
        }
        .render();
        assert!(html.contains("result overwritten"));
        assert!(html.contains("Diff against passing seed 4"));
        assert!(html.contains(r#"id="first-divergence""#));
        assert!(html.contains(r#"data-evidence="1 2""#));
        assert!(html.contains("✗ violated 1×"));
        assert!(!html.contains("http://") && !html.contains("https://"));
        assert!(html.len() < PAGE_BYTES_MAX);
    }

    #[test]
    fn a_long_trace_is_cut_with_a_note_and_stays_in_bounds() {
        let mut lines = Vec::new();
        for seq in 0..(PAGE_EVENTS_MAX + 500) {
            lines.push(format!(
                r#"{{"seq":{seq},"t_ms":{seq},"host":"client-a","kind":"http_request","client":"a","request_id":{seq},"replica":"api-1","method":"GET","path":"/v1/jobs/{}","idempotency_key":null,"body_fingerprint":null}}"#,
                "x".repeat(200)
            ));
        }
        let long = RunTrace::parse(&lines.join("\n")).expect("valid");
        let record = record(RunVerdict::Pass);
        let provenance = Provenance::default();
        let html = RunPage {
            record: &record,
            trace: &long,
            hosts: &["client-a".to_owned(), "api-1".to_owned()],
            description: "",
            invariants: &[],
            neighbour: None,
            searched: 0,
            index_link: None,
            provenance: &provenance,
        }
        .render();
        assert!(html.contains("the page shows the first "));
        assert!(html.contains(&format!("trace has {} events", PAGE_EVENTS_MAX + 500)));
        assert!(html.len() < PAGE_BYTES_MAX, "{} bytes", html.len());
    }
}
