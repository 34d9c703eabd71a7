//! The page of one run: for the engineer reproducing a seed and for the
//! reviewer following a link from the index. Header and repro command,
//! the invariant verdicts with their evidence, the swimlane timeline, the
//! attempts, each job's compare-and-swap chain, the race windows, for a
//! failing run the diff against its nearest passing neighbour, and the
//! decision trace.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::diff::align;
use crate::html::{Provenance, ProvenanceView, STATE_COLOURS, script_json};
use crate::run::RunRecord;
use crate::template;
use crate::timeline::{Overlay, Timeline};
use crate::trace::RunTrace;

mod compare;
mod describe;
pub mod likelihood;
mod neighbour;
mod sections;

pub use describe::describe;
pub use neighbour::{Neighbour, Relation};

/// The most trace events a page shows; a longer trace is cut, with a note.
/// With it, a page stays under [`PAGE_BYTES_MAX`].
pub const PAGE_EVENTS_MAX: usize = 3000;

/// The most bytes of trace lines a page shows (each line is embedded
/// twice: for hovering and in the full trace).
pub const PAGE_TRACE_BYTES_MAX: usize = 512 * 1024;

/// The size bound every run page keeps.
pub const PAGE_BYTES_MAX: usize = 4 * 1024 * 1024;

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
    /// For a failing run that `idem explain` explained: its likelihood
    /// band, under the timeline.
    pub likelihood: Option<&'a likelihood::Likelihood>,
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
        let compared = self.neighbour.as_ref().map(|n| {
            let (other, _) = bounded(n.trace);
            (n, align(&trace, &other), other)
        });
        let overlay = Overlay {
            evidence: evidence.clone(),
            divergence: compared
                .as_ref()
                .and_then(|(n, a, other)| neighbour::divergence(n, a, &trace, other)),
            decisive: self
                .likelihood
                .and_then(likelihood::Likelihood::decisive_line),
        };
        let view = RunView {
            r: record,
            description: self.description,
            index_link: self.index_link,
            cut: cut.then(|| Cut::new(self.trace, &trace)),
            invariants: sections::invariants(record, self.invariants),
            state_colours: STATE_COLOURS,
            svg: timeline.to_svg(&overlay),
            jobs: &timeline.jobs,
            attempts: sections::attempts(&timeline),
            chains: sections::chains(&trace, &timeline),
            windows: sections::windows(record),
            diff: compared
                .as_ref()
                .map(|(n, a, other)| compare::diff(&trace, n, a, other)),
            searched: self.searched,
            decisions: sections::decisions(&trace, &evidence),
            likelihood: self.likelihood.map(|l| LikelihoodView {
                // A band that cannot be drawn leaves the words.
                svg: likelihood::band_svg(l, record.sim_ms).unwrap_or_default(),
                l,
            }),
            lines: trace.events.iter().map(|e| e.line.as_str()).collect(),
            p: self.provenance.html_view(),
            events_json: script_json(&events_json(&trace)),
        };
        template::render("run.html", view)
    }
}

/// Everything `run.html` prints.
#[derive(Serialize)]
struct RunView<'a> {
    r: &'a RunRecord,
    description: &'a str,
    index_link: Option<&'a str>,
    cut: Option<Cut>,
    invariants: Vec<sections::Invariant<'a>>,
    state_colours: &'static [(&'static str, &'static str)],
    /// The timeline, drawn.
    svg: String,
    jobs: &'a [String],
    attempts: Vec<sections::Attempt<'a>>,
    chains: Vec<sections::Chain>,
    windows: Vec<sections::Window<'a>>,
    diff: Option<compare::Diff<'a>>,
    searched: u64,
    decisions: Vec<sections::Decision<'a>>,
    likelihood: Option<LikelihoodView<'a>>,
    lines: Vec<&'a str>,
    p: ProvenanceView<'a>,
    events_json: String,
}

/// The likelihood band and the explanation it comes with.
#[derive(Serialize)]
struct LikelihoodView<'a> {
    l: &'a likelihood::Likelihood,
    svg: String,
}

/// The note on a page whose trace was cut.
#[derive(Serialize)]
struct Cut {
    events: usize,
    shown: usize,
    events_max: usize,
    trace_kib: usize,
    page_mib: usize,
}

impl Cut {
    fn new(whole: &RunTrace, shown: &RunTrace) -> Self {
        Self {
            events: whole.events.len(),
            shown: shown.events.len(),
            events_max: PAGE_EVENTS_MAX,
            trace_kib: PAGE_TRACE_BYTES_MAX / 1024,
            page_mib: PAGE_BYTES_MAX / (1024 * 1024),
        }
    }
}

/// The trace's lines as one JSON array's items, for hovering.
fn events_json(trace: &RunTrace) -> String {
    let events: Vec<&str> = trace.events.iter().map(|e| e.line.as_str()).collect();
    events.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::{RunVerdict, ViolationRecord};

    fn record(verdict: RunVerdict) -> RunRecord {
        RunRecord {
            schema: crate::schema::SCHEMA_VERSION,
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
            likelihood: None,
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
            likelihood: None,
        }
        .render();
        assert!(html.contains("the page shows the first "));
        assert!(html.contains(&format!("trace has {} events", PAGE_EVENTS_MAX + 500)));
        assert!(html.len() < PAGE_BYTES_MAX, "{} bytes", html.len());
    }

    /// A trace with something of every family the page draws: requests,
    /// an attempt that goes unknown and blocks a start, a provider
    /// execution, a lost completion, a crash and a partition.
    fn eventful() -> RunTrace {
        let (j, a, b) = (
            "11111111-0000-0000-0000-000000000000",
            "aaaaaaaa-0000-0000-0000-000000000000",
            "bbbbbbbb-0000-0000-0000-000000000000",
        );
        let lines = [
            r#"{"seq":0,"t_ms":0,"host":"client-alice","kind":"http_request","client":"alice","request_id":0,"replica":"api-1","method":"POST","path":"/v1/jobs"}"#.to_owned(),
            format!(r#"{{"seq":1,"t_ms":5,"host":"store","caller":"api-1","kind":"job_created","job_id":"{j}","owner":"alice","key":"k"}}"#),
            r#"{"seq":2,"t_ms":9,"host":"client-alice","kind":"http_response","client":"alice","request_id":0,"status":201,"problem":null,"replayed":false}"#.to_owned(),
            format!(r#"{{"seq":3,"t_ms":100,"host":"store","caller":"worker-1","kind":"attempt_started","job_id":"{j}","attempt_id":"{a}","attempt_seq":1,"provider":"primary","read_version":0}}"#),
            format!(r#"{{"seq":4,"t_ms":105,"host":"store","caller":"worker-1","kind":"attempt_transition","job_id":"{j}","attempt_id":"{a}","from":"starting","to":"running","reason":null}}"#),
            format!(r#"{{"seq":5,"t_ms":108,"host":"provider-primary","kind":"provider_execution","provider":"primary","key":"{a}","job_id":"{j}","exec_seq":1,"billed":false,"outcome":"running"}}"#),
            r#"{"seq":6,"t_ms":150,"host":"driver","kind":"fault","name":"partition","detail":{"a":"worker-1","b":"provider-primary","duration_ms":100,"fault":"partition","oneway":false}}"#.to_owned(),
            format!(r#"{{"seq":7,"t_ms":2105,"host":"store","caller":"worker-1","kind":"attempt_transition","job_id":"{j}","attempt_id":"{a}","from":"running","to":"unknown","reason":"deadline"}}"#),
            format!(r#"{{"seq":8,"t_ms":3000,"host":"store","caller":"api-1","kind":"attempt_refused","job_id":"{j}","reason":"attempt_in_flight","blocking_attempt":"{a}","blocking_state":"unknown"}}"#),
            r#"{"seq":9,"t_ms":3100,"host":"driver","kind":"fault","name":"crash","detail":{"fault":"crash","host":"worker-1","restart_after_ms":50}}"#.to_owned(),
            format!(r#"{{"seq":10,"t_ms":4000,"host":"provider-primary","kind":"provider_execution","provider":"primary","key":"{a}","job_id":"{j}","exec_seq":1,"billed":true,"outcome":"succeeded"}}"#),
            format!(r#"{{"seq":11,"t_ms":5000,"host":"store","caller":"reconciler","kind":"completion_won","job_id":"{j}","attempt_id":"{a}","from":"unknown","version":1,"out_of_band":true,"result_sha256":"r1"}}"#),
            format!(r#"{{"seq":12,"t_ms":5100,"host":"store","caller":"worker-1","kind":"attempt_started","job_id":"{j}","attempt_id":"{b}","attempt_seq":2,"provider":"fallback","read_version":1}}"#),
            format!(r#"{{"seq":13,"t_ms":5200,"host":"store","caller":"worker-1","kind":"completion_lost","job_id":"{j}","attempt_id":"{b}","from":"running","winner":"{a}","discarded_sha256":"r2"}}"#),
        ];
        RunTrace::parse(&lines.join("\n")).expect("valid")
    }

    #[test]
    fn every_section_renders_what_the_trace_holds() {
        let record = record(RunVerdict::Pass);
        let provenance = Provenance::default();
        let hosts: Vec<String> = [
            "client-alice",
            "api-1",
            "worker-1",
            "reconciler",
            "store",
            "provider-primary",
        ]
        .into_iter()
        .map(str::to_owned)
        .collect();
        let html = RunPage {
            record: &record,
            trace: &eventful(),
            hosts: &hosts,
            description: "a story with <markup> & 'quotes'",
            invariants: &[(3, "one_winner".to_owned())],
            neighbour: None,
            searched: 0,
            index_link: None,
            provenance: &provenance,
            likelihood: None,
        }
        .render();
        assert!(html.contains("a story with &lt;markup&gt; &amp; &#39;quotes&#39;"));
        assert!(html.contains("attempt state-unknown"), "the unknown bar");
        assert!(html.contains(r#"class="refused"#), "the refused start");
        assert!(
            html.contains("api-1&#39;s start refused"),
            "who was refused"
        );
        assert!(html.contains(">aaaaaaaa</code>"), "the attempts table");
        assert!(html.contains("won (resolved out of band): result r1"));
        assert!(html.contains("lost the compare-and-swap to aaaaaaaa: output r2 discarded"));
        assert!(html.contains("fault down"), "worker-1 down after its crash");
        assert!(html.contains(">partition</text>"), "the partition window");
        assert!(html.contains(r#"data-title="worker-1 crashed""#));
        assert!(html.contains("<pre>{&quot;seq&quot;:0,"), "the whole trace");
        assert_eq!(html.matches(r#"class="lane-label""#).count(), hosts.len());
    }
}
