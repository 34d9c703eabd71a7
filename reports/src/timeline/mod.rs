//! The swimlane timeline of one run: a lane per host, time to the right.
//!
//! Jepsen's timeline is the anchor (a column per process, an operation
//! whose outcome is indeterminate drawn as a bar to the end of the
//! history, nemesis intervals shaded); this one also knows what only idem
//! knows: attempts and their states, the *unknown* state running until
//! something resolves it, the refusals it caused, lost completions, and
//! the fault plan. [`Timeline::build`] turns a trace into drawing
//! primitives (pure, tested), one fold over the trace per family of
//! primitive; [`Timeline::to_svg`] draws them. Every primitive keeps the
//! `seq`s of the events it shows, for hovering and for highlighting a
//! violation's evidence.

use crate::trace::RunTrace;

mod bars;
mod faults;
mod folds;
mod model;
mod svg;

pub use faults::fault_kinds;
use model::Lanes;
pub use model::{
    Arrow, ArrowKind, AttemptBar, FaultWindow, Lane, Mark, Overlay, Segment, Span, Timeline, short,
};

impl Timeline {
    /// Lays out `trace` over `hosts` (the world's hosts, in the order the
    /// lanes should have) up to `end_ms` (when the run stopped): one fold
    /// over the trace per family of primitive, each in the trace's order.
    pub fn build(trace: &RunTrace, hosts: &[String], end_ms: u64) -> Self {
        let end_ms = end_ms.max(trace.end_ms()).max(1);
        let mut lanes = Lanes::new(hosts);
        let jobs = folds::jobs(trace);
        let arrows = folds::arrows(trace, &mut lanes);
        let spans = folds::spans(trace, &mut lanes, end_ms);
        let mut attempts = bars::attempt_bars(trace, &mut lanes, end_ms);
        let faults = faults::fault_windows(trace, &mut lanes, end_ms);
        let marks = folds::marks(trace, &mut lanes);
        bars::assign_rows(&mut attempts, &mut lanes.lanes);
        Timeline {
            lanes: lanes.lanes,
            end_ms,
            arrows,
            spans,
            attempts,
            faults,
            marks,
            jobs,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(lines: &[&str]) -> RunTrace {
        RunTrace::parse(&lines.join("\n")).expect("a valid trace")
    }

    const J: &str = "11111111-0000-0000-0000-000000000000";
    const A: &str = "aaaaaaaa-0000-0000-0000-000000000000";

    fn unknown_then_resolved() -> RunTrace {
        let lines = [
            r#"{"seq":0,"t_ms":0,"host":"client-alice","kind":"http_request","client":"alice","request_id":0,"replica":"api-1","method":"POST","path":"/v1/jobs","idempotency_key":"k","body_fingerprint":"f"}"#.to_owned(),
            format!(
                r#"{{"seq":1,"t_ms":5,"host":"store","caller":"api-1","kind":"job_created","job_id":"{J}","owner":"alice","key":"k","fingerprint":"f"}}"#
            ),
            format!(
                r#"{{"seq":2,"t_ms":9,"host":"client-alice","kind":"http_response","client":"alice","request_id":0,"status":201,"job_id":"{J}","attempt_id":null,"replayed":false,"problem":null,"blocking_attempt":null}}"#
            ),
            format!(
                r#"{{"seq":3,"t_ms":100,"host":"store","caller":"worker-1","kind":"attempt_started","job_id":"{J}","attempt_id":"{A}","attempt_seq":1,"provider":"primary","read_version":0}}"#
            ),
            format!(
                r#"{{"seq":4,"t_ms":105,"host":"store","caller":"worker-1","kind":"attempt_transition","job_id":"{J}","attempt_id":"{A}","from":"starting","to":"running","reason":null}}"#
            ),
            format!(
                r#"{{"seq":5,"t_ms":108,"host":"provider-primary","kind":"provider_execution","provider":"primary","key":"{A}","job_id":"{J}","exec_seq":1,"billed":false,"outcome":"running"}}"#
            ),
            format!(
                r#"{{"seq":6,"t_ms":2105,"host":"store","caller":"worker-1","kind":"attempt_transition","job_id":"{J}","attempt_id":"{A}","from":"running","to":"unknown","reason":"deadline"}}"#
            ),
            format!(
                r#"{{"seq":7,"t_ms":3000,"host":"store","caller":"api-2","kind":"attempt_refused","job_id":"{J}","reason":"attempt_in_flight","blocking_attempt":"{A}","blocking_state":"unknown"}}"#
            ),
            format!(
                r#"{{"seq":8,"t_ms":5000,"host":"store","caller":"reconciler","kind":"completion_won","job_id":"{J}","attempt_id":"{A}","from":"unknown","version":1,"out_of_band":true,"result_sha256":"r"}}"#
            ),
        ];
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        trace(&refs)
    }

    fn hosts() -> Vec<String> {
        [
            "client-alice",
            "api-1",
            "api-2",
            "worker-1",
            "reconciler",
            "store",
            "provider-primary",
        ]
        .into_iter()
        .map(str::to_owned)
        .collect()
    }

    #[test]
    fn an_unknown_attempt_runs_until_its_resolution_and_carries_the_refusal() {
        let timeline = Timeline::build(&unknown_then_resolved(), &hosts(), 6000);
        assert_eq!(
            timeline.lanes.len(),
            hosts().len(),
            "one lane per host, no more"
        );
        let bar = timeline.attempt(A).expect("the attempt has a bar");
        assert_eq!(bar.lane, timeline.lane("worker-1").expect("a lane"));
        let states: Vec<(&str, u64, u64)> = bar
            .segments
            .iter()
            .map(|s| (s.state.as_str(), s.t0_ms, s.t1_ms))
            .collect();
        assert_eq!(
            states,
            vec![
                ("starting", 100, 105),
                ("running", 105, 2105),
                ("unknown", 2105, 5000)
            ]
        );
        assert_eq!(bar.end, Some(("succeeded".to_owned(), 5000, 8)));
        assert_eq!(bar.unknown(), Some((2105, 5000, true)));
        assert_eq!(bar.blocked.len(), 1);
        assert!(bar.blocked[0].2.contains("api-2"), "{:?}", bar.blocked);
        // The store calls are arrows from their callers.
        let from_reconciler = timeline
            .arrows
            .iter()
            .find(|a| a.seqs == vec![8])
            .expect("an arrow for the resolution");
        assert_eq!(
            from_reconciler.from,
            timeline.lane("reconciler").expect("a lane")
        );
        assert_eq!(from_reconciler.to, timeline.lane("store").expect("a lane"));
        // The dispatch reaches the provider from the worker that moved the
        // attempt to running.
        assert!(timeline.arrows.iter().any(|a| a.kind == ArrowKind::Dispatch
            && a.from == timeline.lane("worker-1").expect("a lane")));
    }

    #[test]
    fn an_unresolved_unknown_runs_to_the_end_of_the_history() {
        let full = unknown_then_resolved();
        let cut = RunTrace {
            events: full.events[..7].to_vec(),
        };
        let timeline = Timeline::build(&cut, &hosts(), 6000);
        let bar = timeline.attempt(A).expect("a bar");
        assert_eq!(bar.end, None);
        assert_eq!(bar.unknown(), Some((2105, 6000, false)));
        let svg = timeline.to_svg(&Overlay::default());
        assert!(svg.contains("still open when the history ended"));
    }

    #[test]
    fn svg_has_a_lane_per_host_and_highlights_evidence() {
        let timeline = Timeline::build(&unknown_then_resolved(), &hosts(), 6000);
        let overlay = Overlay {
            evidence: [8].into_iter().collect(),
            divergence: Some((3000, "diverges".to_owned())),
            decisive: Some((2105, "the provider answered late".to_owned())),
        };
        let svg = timeline.to_svg(&overlay);
        assert_eq!(svg.matches("class=\"lane-label\"").count(), hosts().len());
        assert!(svg.contains("state-unknown"));
        assert!(svg.matches(" ev\"").count() >= 1, "evidence is marked");
        assert!(svg.contains("class=\"diverge\""));
        assert!(svg.contains("decisive: the provider answered late"));
        assert!(!svg.contains("http://") && !svg.contains("https://"));
    }

    #[test]
    fn faults_shade_the_lanes_they_touch_until_healed() {
        let t = trace(&[
            r#"{"seq":0,"t_ms":5,"host":"driver","kind":"fault","name":"partition","detail":{"a":"worker-1","b":"provider-primary","duration_ms":100,"fault":"partition","oneway":false}}"#,
            r#"{"seq":1,"t_ms":7,"host":"driver","kind":"fault","name":"crash","detail":{"fault":"crash","host":"store","restart_after_ms":50}}"#,
            r#"{"seq":2,"t_ms":57,"host":"driver","kind":"fault","name":"restart","detail":{"host":"store"}}"#,
            r#"{"seq":3,"t_ms":105,"host":"driver","kind":"fault","name":"heal_partition","detail":{"a":"worker-1","b":"provider-primary","duration_ms":100,"fault":"partition","oneway":false}}"#,
            r#"{"seq":4,"t_ms":110,"host":"driver","kind":"fault","name":"provider_hang","detail":{"duration_ms":9000,"fault":"provider_hang","provider":"primary"}}"#,
        ]);
        let timeline = Timeline::build(&t, &hosts(), 200);
        let windows: Vec<(&str, u64, u64, bool, usize)> = timeline
            .faults
            .iter()
            .map(|f| (f.name.as_str(), f.t0_ms, f.t1_ms, f.healed, f.lanes.len()))
            .collect();
        assert_eq!(
            windows,
            vec![
                ("down", 7, 57, true, 1),
                ("partition", 5, 105, true, 2),
                ("provider_hang", 110, 200, false, 1),
            ]
        );
        assert_eq!(timeline.marks.iter().filter(|m| m.glyph == "✖").count(), 1);
        assert_eq!(timeline.marks.iter().filter(|m| m.glyph == "↻").count(), 1);
    }

    #[test]
    fn clock_faults_mark_or_shade_the_host_whose_clock_moved() {
        let t = trace(&[
            r#"{"seq":0,"t_ms":5,"host":"driver","kind":"fault","name":"clock_jump","detail":{"fault":"clock_jump","host":"reconciler","jump_ms":3600000}}"#,
            r#"{"seq":1,"t_ms":6,"host":"driver","kind":"fault","name":"clock_offset","detail":{"duration_ms":null,"fault":"clock_offset","host":"worker-1","offset_ms":-600000}}"#,
            r#"{"seq":2,"t_ms":7,"host":"driver","kind":"fault","name":"clock_drift","detail":{"duration_ms":50,"drift_ppm":500,"fault":"clock_drift","host":"worker-1"}}"#,
            r#"{"seq":3,"t_ms":57,"host":"driver","kind":"fault","name":"heal_clock_drift","detail":{"duration_ms":50,"drift_ppm":500,"fault":"clock_drift","host":"worker-1"}}"#,
        ]);
        let timeline = Timeline::build(&t, &hosts(), 200);
        let titles: Vec<&str> = timeline
            .marks
            .iter()
            .filter(|m| m.glyph == "⏱")
            .map(|m| m.title.as_str())
            .collect();
        assert_eq!(
            titles,
            vec![
                "reconciler's clock jumped +3600000 ms",
                "worker-1's clock set -600000 ms off true time",
            ]
        );
        let windows: Vec<(&str, u64, u64)> = timeline
            .faults
            .iter()
            .map(|f| (f.name.as_str(), f.t0_ms, f.t1_ms))
            .collect();
        assert_eq!(windows, vec![("clock_drift", 7, 57)]);
        assert!(
            timeline
                .to_svg(&Overlay::default())
                .contains("clock jumped")
        );
    }
}
