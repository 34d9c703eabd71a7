//! `idem serve`'s bench-only flags: what `idem real` needs to run each of
//! the engine's roles as a real process of its own, under a design, with a
//! scenario's tunables and a clock it can fault. Compiled only with the
//! `bench` feature: `idem-server` has none of it, and CI checks that its
//! binary names no naive design.
//!
//! - `--design` runs a naive design: the engine's branch, and PostgreSQL
//!   statements that do without the constraint the design lacks (the
//!   harness drops it from the schema once, before the processes start).
//! - `--service-config FILE` replaces the loops' tunables (poll intervals,
//!   deadlines, the reconciler's waits, the store call bound) with a
//!   scenario's; the role flags (`--no-api`, `--no-worker`,
//!   `--no-reconciler`) still decide which loops run.
//! - `--controlled` makes the process read orders from stdin, one JSON line
//!   each, and exit when stdin ends: the process lives exactly as long as
//!   whoever started it holds the pipe open, even if that one is killed
//!   with SIGKILL (the workspace forbids `unsafe`, so no parent-death
//!   signal). The one order today sets the realtime clock's error
//!   (`{"clock": {"offset_us": N, "drift_ppm": N}}`); the monotonic clock,
//!   on which every wait is measured, is never touched.
//! - `--journal FILE` appends one JSON line per store outcome that writes
//!   nothing to the database (a create answered with the existing job, a
//!   completion refused because the attempt had ended), which PostgreSQL's
//!   own history cannot show.

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use clap::Args;
use serde::{Deserialize, Serialize};

use crate::clock::{Clock, SystemClock, micros_to_timestamp};
use crate::design::Design;
use crate::service::ServiceConfig;
use crate::store::call::{CallStore, StoreCall, StoreReply, apply};
use crate::store::mem::Constraints;
use crate::store::{CompleteOutcome, CreateOutcome, Store, StoreError};
use idem_model::model::{AttemptId, AttemptState, JobId, Timestamp};

/// The longest control line read from stdin; a longer one is an error.
const CONTROL_LINE_LEN_MAX_BYTES: usize = 4096;

/// The bench's flags of `idem serve`.
#[derive(Clone, Debug, Default, Args)]
pub struct BenchServeArgs {
    /// (bench) The design under test: correct, or a naive design.
    #[arg(long, default_value = "correct")]
    pub design: Design,
    /// (bench) This process's name in a real-mode run (`api-1`): the
    /// session of the session-scoped-key design.
    #[arg(long, value_name = "NAME")]
    pub session: Option<String>,
    /// (bench) A JSON service configuration replacing the loops' tunables;
    /// the role flags still decide which loops run.
    #[arg(long, value_name = "FILE")]
    pub service_config: Option<PathBuf>,
    /// (bench) Read orders from stdin (JSON lines) and exit when it ends.
    #[arg(long)]
    pub controlled: bool,
    /// (bench) Append the store outcomes that write nothing to FILE, one
    /// JSON line each.
    #[arg(long, value_name = "FILE")]
    pub journal: Option<PathBuf>,
}

impl BenchServeArgs {
    /// The name the session-scoped-key design scopes keys to.
    fn session(&self) -> &str {
        self.session.as_deref().unwrap_or("serve")
    }

    /// What the schema of the design under test enforces.
    pub fn constraints(&self) -> Constraints {
        Constraints::for_design(self.design)
    }

    /// Replaces `config`'s tunables with the `--service-config` file's,
    /// keeping which loops run.
    pub fn configure(&self, config: &mut ServiceConfig) -> Result<(), String> {
        let Some(path) = &self.service_config else {
            return Ok(());
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("--service-config {}: {e}", path.display()))?;
        let file: ServiceConfig = serde_json::from_str(&text)
            .map_err(|e| format!("--service-config {}: {e}", path.display()))?;
        *config = ServiceConfig {
            run_worker: config.run_worker,
            run_reconciler: config.run_reconciler,
            ..file
        };
        Ok(())
    }

    /// Starts taking orders on stdin (with `--controlled`), and returns the
    /// clock the orders steer.
    ///
    /// The orders are read on a thread of their own, not on tokio's
    /// blocking pool: a runtime waits, when it is dropped, for every
    /// blocking task to end, and a read of a stdin the harness holds open
    /// never ends. A `serve` that failed (its port taken, say) dropped its
    /// runtime on the way out and hung there for good, its error never
    /// said (issue 35: about 1 run in 20 under load).
    pub fn control(&self) -> Option<Arc<ControlledClock>> {
        if !self.controlled {
            return None;
        }
        let clock = Arc::new(ControlledClock::default());
        let steered = Arc::clone(&clock);
        let started = std::thread::Builder::new()
            .name("orders".to_owned())
            .spawn(move || {
                take_orders(std::io::stdin().lock(), &steered);
                // Whoever started this process is gone, or let it go.
                tracing::info!("stdin closed: exiting");
                std::process::exit(0);
            });
        if let Err(e) = started {
            tracing::error!(error = %e, "no thread to read orders on: exiting");
            std::process::exit(2);
        }
        Some(clock)
    }

    /// `store`, journalling what writes nothing (with `--journal`).
    pub fn journaled(&self, store: Arc<dyn Store>) -> Result<Arc<dyn Store>, String> {
        let Some(path) = &self.journal else {
            return Ok(store);
        };
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| format!("--journal {}: {e}", path.display()))?;
        Ok(Arc::new(Journaled {
            inner: store,
            host: self.session().to_owned(),
            file: Mutex::new(file),
        }))
    }

    /// `engine`, running the design under test.
    pub fn engine(&self, engine: crate::engine::Engine) -> crate::engine::Engine {
        engine.with_design(self.design, self.session())
    }
}

/// One order on stdin.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Order {
    /// From now on the realtime clock reads `offset_us` away from true time,
    /// gaining `drift_ppm` microseconds per second of true time.
    Clock { offset_us: i64, drift_ppm: i64 },
}

/// Reads orders from `input` until it ends.
fn take_orders(input: impl std::io::BufRead, clock: &ControlledClock) {
    for line in input.lines() {
        match line {
            Ok(line) if line.len() <= CONTROL_LINE_LEN_MAX_BYTES => {
                match serde_json::from_str::<Order>(&line) {
                    Ok(Order::Clock {
                        offset_us,
                        drift_ppm,
                    }) => clock.set(offset_us, drift_ppm),
                    Err(e) => tracing::error!(error = %e, "a control line that is no order"),
                }
            }
            Ok(_) => tracing::error!("a control line over its bound"),
            Err(_) => break,
        }
    }
}

/// The production clock with an error on its realtime face that the
/// harness sets: a standing offset plus a drift since the order came. The
/// monotonic face is the production one, untouched.
#[derive(Debug, Default)]
pub struct ControlledClock {
    skew: Mutex<Skew>,
}

#[derive(Clone, Copy, Debug, Default)]
struct Skew {
    offset_us: i64,
    drift_ppm: i64,
    /// The monotonic reading when the order came.
    since: Duration,
}

impl ControlledClock {
    fn set(&self, offset_us: i64, drift_ppm: i64) {
        *self.skew.lock().unwrap_or_else(PoisonError::into_inner) = Skew {
            offset_us,
            drift_ppm,
            since: SystemClock.monotonic(),
        };
    }

    /// What the realtime face reads minus true time, now.
    fn error_us(&self) -> i64 {
        let skew = *self.skew.lock().unwrap_or_else(PoisonError::into_inner);
        let elapsed_us = i128::try_from(
            SystemClock
                .monotonic()
                .saturating_sub(skew.since)
                .as_micros(),
        )
        .unwrap_or(i128::MAX);
        let drifted = i128::from(skew.drift_ppm).saturating_mul(elapsed_us) / 1_000_000;
        let drifted =
            i64::try_from(drifted).unwrap_or(if drifted < 0 { i64::MIN } else { i64::MAX });
        skew.offset_us.saturating_add(drifted)
    }
}

impl Clock for ControlledClock {
    fn now(&self) -> Timestamp {
        let true_us = SystemClock.now().timestamp_micros();
        micros_to_timestamp(true_us.saturating_add(self.error_us()))
    }

    fn monotonic(&self) -> Duration {
        SystemClock.monotonic()
    }
}

/// One line of the journal: a store outcome that wrote nothing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum JournalEntry {
    /// A create found the job its key already had, with the same body.
    JobReplayed {
        job_id: JobId,
        offered_fingerprint: String,
    },
    /// A completion offered by an attempt that had already ended.
    CompletionRefused {
        job_id: JobId,
        attempt_id: AttemptId,
        state: AttemptState,
    },
}

/// A journal line: when (true realtime, microseconds since the epoch,
/// whatever the process's controlled clock reads), which process, what.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JournalLine {
    pub t_us: i64,
    pub host: String,
    #[serde(flatten)]
    pub entry: JournalEntry,
}

/// A store whose outcomes that write nothing are journalled.
#[derive(Debug)]
struct Journaled {
    inner: Arc<dyn Store>,
    host: String,
    file: Mutex<std::fs::File>,
}

/// What a call needs remembered to journal its outcome.
enum Offer {
    Create {
        fingerprint: String,
    },
    Complete {
        job_id: JobId,
        attempt_id: AttemptId,
    },
}

#[async_trait]
impl CallStore for Journaled {
    async fn call(&self, call: StoreCall) -> Result<StoreReply, StoreError> {
        let offer = match &call {
            StoreCall::CreateJob { new } => Some(Offer::Create {
                fingerprint: new.request_fingerprint.clone(),
            }),
            StoreCall::Complete { completion } => Some(Offer::Complete {
                job_id: completion.job_id,
                attempt_id: completion.attempt_id,
            }),
            _ => None,
        };
        let reply = apply(self.inner.as_ref(), call).await;
        let entry = match (offer, &reply) {
            (
                Some(Offer::Create { fingerprint }),
                Ok(StoreReply::CreateJob(CreateOutcome::Existing(job))),
            ) => Some(JournalEntry::JobReplayed {
                job_id: job.id,
                offered_fingerprint: fingerprint,
            }),
            (
                Some(Offer::Complete { job_id, attempt_id }),
                Ok(StoreReply::Complete(CompleteOutcome::NotOpen { state })),
            ) => Some(JournalEntry::CompletionRefused {
                job_id,
                attempt_id,
                state: *state,
            }),
            _ => None,
        };
        if let Some(entry) = entry {
            self.write(entry);
        }
        reply
    }
}

impl Journaled {
    fn write(&self, entry: JournalEntry) {
        let line = JournalLine {
            t_us: SystemClock.now().timestamp_micros(),
            host: self.host.clone(),
            entry,
        };
        let mut text = serde_json::to_string(&line).expect("a journal line serializes");
        text.push('\n');
        // One write per line, unbuffered: a line written is the kernel's
        // before this process can be killed.
        let mut file = self.file.lock().unwrap_or_else(PoisonError::into_inner);
        if let Err(e) = file.write_all(text.as_bytes()) {
            tracing::error!(error = %e, "journal line lost");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_order_is_one_json_line() {
        let order: Order =
            serde_json::from_str(r#"{"clock":{"offset_us":-5,"drift_ppm":100}}"#).expect("order");
        assert_eq!(
            order,
            Order::Clock {
                offset_us: -5,
                drift_ppm: 100
            }
        );
        assert!(serde_json::from_str::<Order>(r#"{"clock":{"offset_us":1}}"#).is_err());
    }

    #[test]
    fn orders_are_taken_until_the_input_ends_and_others_are_skipped() {
        let clock = ControlledClock::default();
        let input = "{\"clock\":{\"offset_us\":1,\"drift_ppm\":0}}\nnot an order\n\
                     {\"clock\":{\"offset_us\":7000000,\"drift_ppm\":0}}\n";
        take_orders(std::io::Cursor::new(input), &clock);
        let error_us = clock.error_us();
        assert!((6_999_000..=7_000_000).contains(&error_us), "{error_us}");
    }

    #[test]
    fn the_controlled_clock_reads_true_time_plus_its_error() {
        let clock = ControlledClock::default();
        assert_eq!(clock.error_us(), 0);
        clock.set(3_600_000_000, 0);
        let ahead = clock.now().timestamp_micros() - SystemClock.now().timestamp_micros();
        assert!((3_599_000_000..=3_600_000_000).contains(&ahead), "{ahead}");
        // A clock that stands still loses what passes; never gains.
        clock.set(0, -1_000_000);
        std::thread::sleep(Duration::from_millis(20));
        assert!(clock.error_us() <= -20_000, "{}", clock.error_us());
    }

    #[test]
    fn a_journal_line_names_its_outcome() {
        let line = JournalLine {
            t_us: 7,
            host: "api-1".to_owned(),
            entry: JournalEntry::JobReplayed {
                job_id: JobId(uuid::Uuid::from_u128(1)),
                offered_fingerprint: "f".to_owned(),
            },
        };
        let text = serde_json::to_string(&line).expect("serializes");
        assert_eq!(
            text,
            r#"{"t_us":7,"host":"api-1","outcome":"job_replayed","job_id":"00000000-0000-0000-0000-000000000001","offered_fingerprint":"f"}"#
        );
        assert_eq!(serde_json::from_str::<JournalLine>(&text).ok(), Some(line));
    }
}
