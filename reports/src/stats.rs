//! The figures of one run that a suite's plots aggregate: attempt
//! latencies per provider and billed provider work. A sweep keeps these
//! (small) instead of whole traces.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::timeline::Timeline;
use crate::trace::{Body, RunTrace};

/// One attempt that ended: how long it took, start to terminal state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptLatency {
    pub provider: String,
    pub latency_ms: u64,
    /// The terminal state.
    pub state: String,
}

/// One run's figures.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunStats {
    pub attempts: Vec<AttemptLatency>,
    /// Provider executions billed, over every job.
    pub billed: u64,
    /// Billed executions beyond the winner's: per job, every billed
    /// execution but one when the job has a winner, all of them when not.
    pub wasted: u64,
}

impl RunStats {
    pub fn from_trace(trace: &RunTrace) -> Self {
        let timeline = Timeline::build(trace, &[], trace.end_ms());
        let attempts = timeline
            .attempts
            .iter()
            .filter_map(|bar| {
                let (state, end, _) = bar.end.as_ref()?;
                let start = bar.segments.first()?.t0_ms;
                Some(AttemptLatency {
                    provider: bar.provider.clone(),
                    latency_ms: end.saturating_sub(start),
                    state: state.clone(),
                })
            })
            .collect();
        let mut billed_per_job: BTreeMap<String, u64> = BTreeMap::new();
        let mut won: BTreeSet<String> = BTreeSet::new();
        for event in &trace.events {
            match &event.body {
                Body::ProviderExecution {
                    billed: true,
                    job_id,
                    ..
                } => {
                    *billed_per_job
                        .entry(job_id.clone().unwrap_or_default())
                        .or_insert(0) += 1;
                }
                Body::CompletionWon { job_id, .. } => {
                    won.insert(job_id.clone());
                }
                _ => {}
            }
        }
        let billed = billed_per_job.values().sum();
        let wasted = billed_per_job
            .iter()
            .map(|(job, n)| n.saturating_sub(u64::from(won.contains(job))))
            .sum();
        Self {
            attempts,
            billed,
            wasted,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_latency_and_work_beyond_the_winner() {
        let text = [
            r#"{"seq":0,"t_ms":10,"host":"store","caller":"worker-1","kind":"attempt_started","job_id":"j","attempt_id":"a","attempt_seq":1,"provider":"primary","read_version":0}"#,
            r#"{"seq":1,"t_ms":20,"host":"store","caller":"worker-1","kind":"attempt_started","job_id":"j","attempt_id":"b","attempt_seq":2,"provider":"fallback","read_version":0}"#,
            r#"{"seq":2,"t_ms":200,"host":"provider-fallback","kind":"provider_execution","provider":"fallback","key":"b","job_id":"j","exec_seq":1,"billed":true,"outcome":"succeeded"}"#,
            r#"{"seq":3,"t_ms":210,"host":"store","caller":"worker-1","kind":"completion_won","job_id":"j","attempt_id":"b","from":"running","version":1,"out_of_band":false,"result_sha256":"r"}"#,
            r#"{"seq":4,"t_ms":900,"host":"provider-primary","kind":"provider_execution","provider":"primary","key":"a","job_id":"j","exec_seq":1,"billed":true,"outcome":"succeeded"}"#,
            r#"{"seq":5,"t_ms":910,"host":"store","caller":"worker-1","kind":"completion_lost","job_id":"j","attempt_id":"a","from":"running","winner":"b","discarded_sha256":"x"}"#,
        ]
        .join("\n");
        let stats = RunStats::from_trace(&RunTrace::parse(&text).expect("valid"));
        assert_eq!((stats.billed, stats.wasted), (2, 1));
        let latencies: Vec<(&str, u64, &str)> = stats
            .attempts
            .iter()
            .map(|a| (a.provider.as_str(), a.latency_ms, a.state.as_str()))
            .collect();
        assert_eq!(
            latencies,
            vec![("primary", 900, "lost"), ("fallback", 190, "succeeded")]
        );
    }
}
