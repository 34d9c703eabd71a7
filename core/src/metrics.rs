//! The service's metrics, served at `/metrics` in the Prometheus text format
//! (version 0.0.4).
//!
//! prometheus-client (the Prometheus project's own Rust client) is used
//! rather than the `metrics` facade with its Prometheus exporter: its
//! registry is a value each engine owns, not a process-wide recorder, so
//! two services in one test process (or the simulator's hosts) never mix
//! their counts, nothing is installed globally, and nothing reads a clock
//! behind the engine's back (durations are measured with the injected
//! [`crate::clock::Clock`]).
//!
//! Counters are counted where things happen (the engine, the worker, the
//! pruner); the attempt gauges are read from the store when `/metrics` is
//! scraped, so every replica reports the same, current, numbers.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::store::AttemptCensus;
use idem_model::model::Timestamp;

/// The label set of a labelled metric.
type Labels = Vec<(&'static str, String)>;

/// Provider latency buckets: 5 ms doubling to about 41 s.
const LATENCY_BUCKET_FIRST_S: f64 = 0.005;
const LATENCY_BUCKETS: u16 = 14;

/// The metrics of one engine and everything built on it.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    jobs_created: Counter,
    jobs_replayed: Counter,
    jobs_refused: Family<Labels, Counter>,
    cas_losses: Counter,
    jobs_pruned: Counter,
    provider_latency: Family<Labels, Histogram>,
    attempts: Family<Labels, Gauge>,
    unknown_oldest_age: Gauge<f64, AtomicU64>,
    store_up: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// Each metric's help text, as `/metrics` shows it.
const JOBS_CREATED_HELP: &str = "Jobs created: a new (owner, key)";
const JOBS_REPLAYED_HELP: &str =
    "Creates answered with the existing job: the same key and the same canonical body";
const JOBS_REFUSED_HELP: &str =
    "Creates refused, by reason (key_reused, invalid_key, unknown_provider, invalid_fallbacks)";
const CAS_LOSSES_HELP: &str =
    "Completions that lost the compare-and-swap: another attempt had won; the output was discarded";
const JOBS_PRUNED_HELP: &str = "Terminal jobs deleted by key retention";
const PROVIDER_CALL_SECONDS_HELP: &str = "Provider calls from dispatch to answer or deadline, by provider and outcome (ok, error, timeout)";
const ATTEMPTS_HELP: &str = "Attempts in the store, by state (read from the store at scrape time)";
const UNKNOWN_ATTEMPT_OLDEST_AGE_SECONDS_HELP: &str =
    "Age of the oldest unknown attempt, since it started (0 when there is none)";
const STORE_UP_HELP: &str = "1 if the store answered the last scrape's census in time, else 0";

/// Registers `metric` under `name` with its help text, and returns it.
fn registered<M: prometheus_client::registry::Metric + Clone>(
    registry: &mut Registry,
    name: &str,
    help: &str,
    metric: M,
) -> M {
    registry.register(name, help, metric.clone());
    metric
}

impl Metrics {
    pub fn new() -> Self {
        let mut r = Registry::with_prefix("idem");
        let latency = Family::<Labels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(
                LATENCY_BUCKET_FIRST_S,
                2.0,
                LATENCY_BUCKETS,
            ))
        });
        Self {
            jobs_created: registered(
                &mut r,
                "jobs_created",
                JOBS_CREATED_HELP,
                Counter::default(),
            ),
            jobs_replayed: registered(
                &mut r,
                "jobs_replayed",
                JOBS_REPLAYED_HELP,
                Counter::default(),
            ),
            jobs_refused: registered(&mut r, "jobs_refused", JOBS_REFUSED_HELP, Family::default()),
            cas_losses: registered(&mut r, "cas_losses", CAS_LOSSES_HELP, Counter::default()),
            jobs_pruned: registered(&mut r, "jobs_pruned", JOBS_PRUNED_HELP, Counter::default()),
            provider_latency: registered(
                &mut r,
                "provider_call_seconds",
                PROVIDER_CALL_SECONDS_HELP,
                latency,
            ),
            attempts: registered(&mut r, "attempts", ATTEMPTS_HELP, Family::default()),
            unknown_oldest_age: registered(
                &mut r,
                "unknown_attempt_oldest_age_seconds",
                UNKNOWN_ATTEMPT_OLDEST_AGE_SECONDS_HELP,
                Gauge::default(),
            ),
            store_up: registered(&mut r, "store_up", STORE_UP_HELP, Gauge::default()),
            registry: r,
        }
    }

    /// The store did not answer a scrape's census in time.
    pub fn store_down(&self) {
        self.store_up.set(0);
    }

    pub fn job_created(&self) {
        self.jobs_created.inc();
    }

    pub fn job_replayed(&self) {
        self.jobs_replayed.inc();
    }

    pub fn job_refused(&self, reason: &'static str) {
        self.jobs_refused
            .get_or_create(&vec![("reason", reason.to_owned())])
            .inc();
    }

    pub fn cas_lost(&self) {
        self.cas_losses.inc();
    }

    pub fn jobs_pruned(&self, count: u64) {
        self.jobs_pruned.inc_by(count);
    }

    /// One provider call of `elapsed_ms`, ended `outcome`.
    pub fn provider_call(&self, provider: &str, outcome: &'static str, elapsed_ms: i64) {
        #[allow(clippy::cast_precision_loss)]
        let seconds = elapsed_ms.max(0) as f64 / 1000.0;
        self.provider_latency
            .get_or_create(&vec![
                ("provider", provider.to_owned()),
                ("outcome", outcome.to_owned()),
            ])
            .observe(seconds);
    }

    /// Sets the attempt gauges from a census taken `now`; `None` when the
    /// store did not answer.
    pub fn census(&self, census: Option<&AttemptCensus>, now: Timestamp) {
        let Some(census) = census else {
            self.store_up.set(0);
            return;
        };
        self.store_up.set(1);
        for (state, count) in &census.counts {
            self.attempts
                .get_or_create(&vec![("state", state.as_str().to_owned())])
                .set(*count);
        }
        #[allow(clippy::cast_precision_loss)]
        let age_s = census.oldest_unknown_started_at.map_or(0.0, |started| {
            (now - started).num_milliseconds().max(0) as f64 / 1000.0
        });
        self.unknown_oldest_age.set(age_s);
    }

    /// The Prometheus text format's content type.
    pub const CONTENT_TYPE: &'static str = prometheus_text::CONTENT_TYPE;

    /// Everything, in the Prometheus text format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        prometheus_text::encode(&mut text, &self.registry)
            .expect("writing to a String cannot fail");
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::micros_to_timestamp;
    use idem_model::model::AttemptState;

    #[test]
    fn counts_render_as_prometheus_text() {
        let metrics = Metrics::new();
        metrics.job_created();
        metrics.job_refused("key_reused");
        metrics.provider_call("primary", "ok", 250);
        let now = micros_to_timestamp(10_000_000);
        let census = AttemptCensus::of(
            [(AttemptState::Unknown, 2)],
            Some(micros_to_timestamp(4_000_000)),
        );
        metrics.census(Some(&census), now);
        let text = metrics.encode();
        for line in [
            "# TYPE idem_jobs_created_total counter",
            "idem_jobs_created_total 1",
            "idem_jobs_refused_total{reason=\"key_reused\"} 1",
            "idem_attempts{state=\"unknown\"} 2",
            "idem_attempts{state=\"running\"} 0",
            "idem_unknown_attempt_oldest_age_seconds 6.0",
            "idem_store_up 1",
            "idem_provider_call_seconds_bucket{provider=\"primary\",outcome=\"ok\",le=\"0.32\"} 1",
        ] {
            assert!(text.contains(line), "{line} in:\n{text}");
        }
    }
}
