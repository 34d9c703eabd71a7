//! A sweep's summary: many seeds of one or more scenarios, aggregated into
//! pass/fail counts, window coverage and the failures with their repro
//! commands. What `idem sweep --json` writes and the JUnit report renders.

mod merge;
mod summary;
mod tally;
mod text;

pub(crate) use merge::check_shards;
pub use summary::{
    ScenarioCoverage, SeedRange, Shard, SweepCoverage, SweepSummary, SweepVerdict, SweptScenario,
    Totals, WindowCoverage, WindowTally,
};
pub use tally::SweepTally;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::{RunRecord, RunVerdict, ViolationRecord};

    fn record(scenario: &str, seed: u64, windows: &[(&str, u32)], fail: bool) -> RunRecord {
        RunRecord {
            schema: crate::schema::SCHEMA_VERSION,
            scenario: scenario.to_owned(),
            seed,
            design: "correct".to_owned(),
            verdict: if fail {
                RunVerdict::Fail
            } else {
                RunVerdict::Pass
            },
            violations: if fail {
                vec![ViolationRecord {
                    invariant: 1,
                    name: "one_job_per_intent".to_owned(),
                    message: "two jobs".to_owned(),
                    evidence: vec![3, 9],
                    evidence_events: vec![serde_json::json!({"seq": 3})],
                }]
            } else {
                Vec::new()
            },
            error: None,
            windows: windows.iter().map(|(w, c)| ((*w).to_owned(), *c)).collect(),
            expect_windows: vec!["duplicate_create".to_owned(), "mismatch".to_owned()],
            trace_hash: format!("h{seed}"),
            trace_events: 10,
            steps: 10,
            sim_ms: 10,
            stop: "quiescent".to_owned(),
            build: None,
            reproduce: format!("idem run {scenario} --seed {seed}"),
        }
    }

    #[test]
    fn a_tally_counts_distinct_seeds_and_fingerprints_runs_in_any_order() {
        let scenarios = [
            SweptScenario {
                name: "a".to_owned(),
                expect_windows: vec!["duplicate_create".to_owned()],
            },
            SweptScenario {
                name: "b".to_owned(),
                expect_windows: Vec::new(),
            },
        ];
        let runs = vec![
            record("a", 1, &[("duplicate_create", 1)], false),
            record("b", 1, &[("duplicate_create", 3)], false),
            record("a", 70, &[("duplicate_create", 1)], false),
            // Outside the range: only a hand-made summary has one.
            record("b", 500, &[("duplicate_create", 1)], false),
            record("a", 2, &[("duplicate_create", 0)], true),
        ];
        let seeds = SeedRange { start: 1, end: 100 };
        let shard = Shard { index: 0, count: 1 };
        let build = crate::schema::BuildStamp::from_build("0.1.0", None, None);
        let summary = |runs: Vec<RunRecord>| {
            let mut tally = SweepTally::new("correct", seeds, shard, &scenarios);
            for run in runs {
                let position = run.seed - seeds.start + 1;
                tally.add(run, position);
            }
            tally.finish(build.clone())
        };
        let one = summary(runs.clone());
        let mut reversed = runs.clone();
        reversed.reverse();
        assert_eq!(one, summary(reversed));
        assert_eq!(one.runs_fingerprint.len(), 64);
        let tally = &one.coverage.windows[0];
        assert_eq!(
            (tally.seeds, tally.runs, tally.total),
            (3, 4, 6),
            "seeds 1, 70 and 500 reached it; seed 1 twice"
        );
        assert_eq!(one.scenarios[0].first_failing_seed, Some(2));
        assert_eq!(one.failures.len(), 1);
        let mut changed = runs;
        changed[0].trace_hash = "another".to_owned();
        assert_ne!(summary(changed).runs_fingerprint, one.runs_fingerprint);
    }

    #[test]
    fn order_of_arrival_does_not_matter_and_coverage_is_judged() {
        let scenarios = [SweptScenario {
            name: "a".to_owned(),
            expect_windows: vec!["duplicate_create".to_owned(), "mismatch".to_owned()],
        }];
        let runs = vec![
            record("a", 2, &[("duplicate_create", 1), ("mismatch", 0)], true),
            record("a", 1, &[("duplicate_create", 2), ("mismatch", 0)], false),
        ];
        let mut reversed = runs.clone();
        reversed.reverse();
        let seeds = SeedRange { start: 1, end: 3 };
        let shard = Shard { index: 0, count: 1 };
        let build = crate::schema::BuildStamp::from_build(
            "0.1.0",
            Some("0123456789abcdef0123456789abcdef01234567"),
            Some("false"),
        );
        let one = SweepSummary::new("correct", seeds, shard, &scenarios, runs, build.clone());
        let two = SweepSummary::new("correct", seeds, shard, &scenarios, reversed, build);
        assert_eq!(one.to_json(), two.to_json());
        assert_eq!(one.verdict, SweepVerdict::Fail);
        let a = &one.scenarios[0];
        assert_eq!((a.passed, a.failed), (1, 1));
        assert_eq!(a.missing_windows, vec!["mismatch".to_owned()]);
        assert_eq!(
            a.windows["duplicate_create"],
            WindowCoverage { seeds: 2, total: 3 }
        );
        assert_eq!(
            (a.first_failing_seed, a.seeds_to_first_failure),
            (Some(2), Some(2))
        );
        assert!(one.failures[0].violations[0].evidence_events.is_empty());
        assert!(
            one.to_text()
                .contains("reproduce with: idem run a --seed 2")
        );
    }

    #[test]
    fn shards_merge_into_the_unsharded_summary() {
        let scenarios = [
            SweptScenario {
                name: "a".to_owned(),
                expect_windows: vec!["duplicate_create".to_owned(), "mismatch".to_owned()],
            },
            SweptScenario {
                name: "b".to_owned(),
                expect_windows: Vec::new(),
            },
        ];
        let windows = [
            "duplicate_create".to_owned(),
            "mismatch".to_owned(),
            "cas_loser".to_owned(),
        ];
        let all: Vec<RunRecord> = (10..17)
            .flat_map(|seed| {
                [
                    record(
                        "a",
                        seed,
                        &[("duplicate_create", 1), ("mismatch", u32::from(seed == 13))],
                        seed == 15,
                    ),
                    record(
                        "b",
                        seed,
                        &[("mismatch", u32::from(seed % 3 == 0))],
                        seed == 12,
                    ),
                ]
            })
            .collect();
        let seeds = SeedRange { start: 10, end: 17 };
        let build = crate::schema::BuildStamp::from_build("0.1.0", None, None);
        let summary = |shard: Shard| {
            let runs = all
                .iter()
                .filter(|r| (r.seed - seeds.start) % shard.count == shard.index)
                .cloned()
                .collect();
            SweepSummary::new("correct", seeds, shard, &scenarios, runs, build.clone())
                .gate_windows(&windows, true)
        };
        let whole = summary(Shard { index: 0, count: 1 });
        assert!(!whole.passed());
        assert_eq!(whole.coverage.never_reached, vec!["cas_loser".to_owned()]);
        let shards: Vec<SweepSummary> = [2, 0, 1]
            .into_iter()
            .map(|index| summary(Shard { index, count: 3 }))
            .collect();
        // A shard alone misses a window the whole sweep reaches.
        assert!(
            shards
                .iter()
                .any(|s| !s.scenarios[0].missing_windows.is_empty())
        );
        let merged = SweepSummary::merge(shards.clone()).expect("shards of one sweep");
        assert_eq!(merged.to_json(), whole.to_json());
        assert!(SweepSummary::merge(shards[..2].to_vec()).is_err());
        let mut other_build = shards.clone();
        other_build[0].build = crate::schema::BuildStamp::from_build("0.2.0", None, None);
        assert!(SweepSummary::merge(other_build).is_err());
    }
}
