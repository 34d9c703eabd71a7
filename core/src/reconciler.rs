//! The reconciler: a separate loop that settles attempts nobody else will.
//!
//! It looks at unknown attempts, and at starting or running attempts that
//! have been there too long (their worker died), asks the provider what
//! became of the request by its idempotency key, and resolves the attempt
//! out of band: succeeded goes through the compare-and-swap, failed and
//! cancelled are recorded, still running waits. Past `unknown_max_ms` it
//! cancels where the provider supports it; otherwise the job stays blocked
//! and the reconciler reports it. Every pass is bounded.
//!
//! How long an attempt has been around is measured on the reconciler's own
//! monotonic clock, from the pass that first saw it, never by subtracting
//! the `started_at` another host's clock wrote from this host's `now()`:
//! with one of the two clocks ahead or behind, that difference says
//! nothing, and acting on it takes a call away from a worker still inside
//! its deadline. Seeing an attempt late (it starts between two passes, or
//! the reconciler restarts and forgets) only makes the wait longer, never
//! shorter. The `wall-clock-deadlines` naive design keeps the subtraction,
//! so that the bench can show what it costs.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::future::join_all;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[cfg(feature = "bench")]
use crate::design::Design;
use crate::engine::{Engine, EngineError, Resolution, Resolved};
use crate::provider::{ProviderError, ProviderSet, RemoteStatus};
use crate::store::PageAfter;
use idem_model::model::{Attempt, AttemptId, AttemptState, EventKind, JobId, Timestamp};

/// The reconciler's configuration is vocabulary (the oracle reads its
/// waits); it lives in idem-model.
pub use idem_model::loops::{PROVIDER_CALL_TIMEOUT_MS_DEFAULT, ReconcilerConfig};

/// Whether a resolution came past `unknown_max_ms` (its note says so).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lateness {
    InTime,
    Overdue,
}

/// The jobs whose one open slot (`attempts_one_open`) an attempt of `open`
/// holds: one starting or unknown.
fn jobs_with_slot_held(open: &[Attempt]) -> BTreeSet<JobId> {
    open.iter()
        .filter(|a| matches!(a.state, AttemptState::Starting | AttemptState::Unknown))
        .map(|a| a.job_id)
        .collect()
}

/// What the reconciler did with one attempt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptAction {
    /// Presumed orphaned: starting or running -> unknown.
    MarkedUnknown,
    ResolvedSucceeded,
    /// Resolved as succeeded but another attempt had already won.
    ResolvedLost,
    ResolvedFailed,
    Cancelled,
    /// The provider is still working on it; wait.
    StillRunning,
    /// Nothing can be learned or done; the job stays blocked.
    Blocked,
    /// The provider could not be asked this time.
    Unreachable,
    /// The attempt moved on while we looked.
    Moved,
}

/// One pass's actions, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PassReport {
    pub actions: Vec<(AttemptId, AttemptAction)>,
    pub errors: Vec<String>,
}

impl PassReport {
    /// Attempts left blocked with no way to resolve them automatically.
    pub fn blocked(&self) -> Vec<AttemptId> {
        self.actions
            .iter()
            .filter(|(_, a)| *a == AttemptAction::Blocked)
            .map(|(id, _)| *id)
            .collect()
    }
}

/// The reconciler. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Reconciler {
    engine: Engine,
    providers: ProviderSet,
    config: ReconcilerConfig,
    /// Blocked attempts already reported, so the trace is not flooded.
    reported: Arc<Mutex<BTreeSet<AttemptId>>>,
    /// When (on this reconciler's monotonic clock) each open attempt was
    /// first seen, and where the next pass reads from.
    rounds: Arc<Mutex<Rounds>>,
}

/// The most open attempts whose waits the reconciler times at once; past
/// it an attempt is timed once an older one leaves (a bound on memory with
/// a million attempts open, far past any real backlog).
pub const SIGHTINGS_MAX: usize = 100_000;

/// The reconciler's walk over the open attempts.
///
/// A pass reads at most `attempts_per_pass_max` of each state, after
/// `cursor`. When a state filled its page, the next pass resumes after the
/// earliest last attempt of the full pages, so that no attempt is skipped;
/// when none did, the walk is complete and starts again from the oldest.
/// Before the walk, every pass read the same oldest attempts: a few that
/// nothing can settle (blocked until an operator looks) held every slot,
/// and the attempts behind them were never looked at (found by `idem
/// fuzz`, invariant 10).
#[derive(Debug, Default)]
struct Rounds {
    cursor: PageAfter<AttemptId>,
    /// First sighting of each attempt seen in this walk or the last.
    sightings: BTreeMap<AttemptId, Duration>,
    /// The attempts this walk has seen so far.
    walked: BTreeSet<AttemptId>,
}

impl Rounds {
    /// Notes what a pass read, and moves the cursor on.
    fn advance(&mut self, read: &[Attempt], limit: u32) {
        let mut per_state: BTreeMap<AttemptState, (u32, (Timestamp, AttemptId))> = BTreeMap::new();
        for attempt in read {
            self.walked.insert(attempt.id);
            let entry = per_state
                .entry(attempt.state)
                .or_insert((0, (attempt.started_at, attempt.id)));
            entry.0 += 1;
            entry.1 = entry.1.max((attempt.started_at, attempt.id));
        }
        self.cursor = per_state
            .values()
            .filter(|(count, _)| *count >= limit)
            .map(|(_, last)| *last)
            .min();
        if self.cursor.is_none() {
            // The walk is complete: forget what it did not see (it left
            // the open states), and start the next one.
            let walked = std::mem::take(&mut self.walked);
            self.sightings.retain(|id, _| walked.contains(id));
        }
    }
}

/// Why the reconciler cancels an unknown attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cancel {
    /// The provider says it never received the request: cancelling
    /// tombstones the key, so a copy still on the network cannot run late.
    NeverReceived,
    /// It outlived `unknown_max_ms`; `can_ask` says whether the provider
    /// offers a status lookup.
    Overdue { can_ask: bool },
}

impl Reconciler {
    pub fn new(engine: Engine, providers: ProviderSet, config: ReconcilerConfig) -> Self {
        Self {
            engine,
            providers,
            config,
            reported: Arc::default(),
            rounds: Arc::default(),
        }
    }

    pub fn config(&self) -> &ReconcilerConfig {
        &self.config
    }

    /// Runs passes until `shutdown` resolves.
    pub async fn run(&self, shutdown: impl Future<Output = ()>) {
        let interval_ms = self.config.poll_interval_ms;
        crate::periodic::every("reconciler", interval_ms, shutdown, || async {
            self.pass().await.errors
        })
        .await;
    }

    fn lock_rounds(&self) -> std::sync::MutexGuard<'_, Rounds> {
        self.rounds.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Where this pass's read of the open attempts resumes the walk.
    fn walk_cursor(&self) -> PageAfter<AttemptId> {
        // Zoo: every pass reads the oldest page again.
        #[cfg(feature = "bench")]
        if self.engine.design() == Design::ZooReconcilerRereadsOldestPage {
            return None;
        }
        self.lock_rounds().cursor
    }

    /// Whether `attempt` has been around for `wait_ms`: on this host's
    /// monotonic clock since this reconciler first saw it (`now` read after
    /// the store's answer that showed it).
    fn waited(&self, attempt: &Attempt, wait_ms: u64, now: Duration) -> bool {
        let first = {
            let mut rounds = self.lock_rounds();
            let full = rounds.sightings.len() >= SIGHTINGS_MAX;
            match rounds.sightings.get(&attempt.id) {
                Some(first) => *first,
                None if full => return false,
                None => *rounds.sightings.entry(attempt.id).or_insert(now),
            }
        };
        #[cfg(feature = "bench")]
        if self.engine.design() == Design::WallClockDeadlines {
            // Naive: how old the row says it is, by this host's clock.
            let wait = chrono::TimeDelta::milliseconds(i64::try_from(wait_ms).unwrap_or(i64::MAX));
            return attempt.started_at <= self.engine.clock().now() - wait;
        }
        now.saturating_sub(first) >= Duration::from_millis(wait_ms)
    }

    /// One bounded pass over orphaned and unknown attempts, from one read
    /// of the store: a pass costs one query (one round trip), not one per
    /// state, whether or not it finds anything.
    pub async fn pass(&self) -> PassReport {
        let mut report = PassReport::default();
        let store = self.engine.store().clone();
        let limit = self.config.attempts_per_pass_max;
        let cursor = self.walk_cursor();
        let open = match store
            .attempts_in_states(
                &[
                    AttemptState::Starting,
                    AttemptState::Running,
                    AttemptState::Unknown,
                ],
                cursor,
                limit,
            )
            .await
        {
            Ok(open) => open,
            Err(e) => {
                report.errors.push(e.to_string());
                return report;
            }
        };
        let mut unknowns = self.presume_stale_orphaned(&open, &mut report).await;
        unknowns.sort_by_key(|a| (a.started_at, a.id));
        unknowns.truncate(limit as usize);
        let now = self.engine.clock().monotonic();
        // The unknown attempts are reconciled side by side, each bounded by
        // its own calls' timeouts: one lookup that never comes back holds
        // its attempt for `provider_call_timeout_ms`, not the pass and
        // every attempt behind it (issue 25: a status answer lost in a
        // partition stalled the reconciler for good). Results keep the
        // order the attempts were listed in.
        let settled = join_all(unknowns.iter().map(|attempt| {
            let overdue = self.waited(attempt, self.config.unknown_max_ms, now);
            self.reconcile(attempt, overdue)
        }))
        .await;
        for (attempt, settled) in unknowns.iter().zip(settled) {
            match settled {
                Ok(action) => report.actions.push((attempt.id, action)),
                Err(e) => report.errors.push(e.to_string()),
            }
        }
        self.lock_rounds().advance(&open, limit);
        report
    }

    /// Moves every starting or running attempt silent past its stale
    /// bound to unknown (the worker that held it is presumed gone), and
    /// returns the attempts to reconcile in this pass: those already
    /// unknown and those just moved.
    async fn presume_stale_orphaned(
        &self,
        open: &[Attempt],
        report: &mut PassReport,
    ) -> Vec<Attempt> {
        let now = self.engine.clock().monotonic();
        let slot_held = jobs_with_slot_held(open);
        let mut unknowns = Vec::new();
        for attempt in open.iter().cloned() {
            let stale_ms = match attempt.state {
                AttemptState::Starting => self.config.starting_stale_ms,
                AttemptState::Running => self.config.running_stale_ms,
                _ => {
                    unknowns.push(attempt);
                    continue;
                }
            };
            // A hedge still running beside an unknown attempt cannot become
            // unknown until that one is settled: the move would be refused
            // by the index after a second of waits, every pass, and reported
            // as an error. It is moved by the first pass after the slot is
            // free (its wait is counted meanwhile).
            let slot_taken =
                attempt.state == AttemptState::Running && slot_held.contains(&attempt.job_id);
            if !self.waited(&attempt, stale_ms, now) || slot_taken {
                continue;
            }
            let action = match self
                .engine
                .presume_orphaned(attempt.id, attempt.state)
                .await
            {
                Ok(moved) => {
                    // Now unknown: reconciled in this same pass, as a read
                    // after the move would have found it.
                    if moved.state == AttemptState::Unknown {
                        unknowns.push(moved);
                    }
                    AttemptAction::MarkedUnknown
                }
                Err(EngineError::IllegalTransition { .. }) => AttemptAction::Moved,
                Err(e) => {
                    report.errors.push(e.to_string());
                    continue;
                }
            };
            report.actions.push((attempt.id, action));
        }
        unknowns
    }

    /// Ask the provider about one unknown attempt and act on the answer.
    async fn reconcile(
        &self,
        attempt: &Attempt,
        overdue: bool,
    ) -> Result<AttemptAction, EngineError> {
        let Some(provider) = self.providers.get(&attempt.provider) else {
            return self.blocked(attempt, "no client for the provider").await;
        };
        let resolution = match self.bounded("status", provider.status(attempt.id)).await {
            Ok(RemoteStatus::Succeeded { output, model }) => {
                self.vetted(attempt, output, model).await?
            }
            Ok(RemoteStatus::Failed { error }) => Resolution::Failed { error },
            Ok(RemoteStatus::Cancelled) => Resolution::Cancelled,
            // Never received. Cancelling tombstones the key, so a request
            // still in flight on the network cannot execute later.
            Ok(RemoteStatus::NotFound) => {
                return self
                    .cancel(attempt, provider.as_ref(), Cancel::NeverReceived)
                    .await;
            }
            Ok(RemoteStatus::Running) if overdue => {
                return self
                    .cancel(
                        attempt,
                        provider.as_ref(),
                        Cancel::Overdue { can_ask: true },
                    )
                    .await;
            }
            Ok(RemoteStatus::Running) => return Ok(AttemptAction::StillRunning),
            Err(ProviderError::Unsupported(_)) if overdue => {
                return self
                    .cancel(
                        attempt,
                        provider.as_ref(),
                        Cancel::Overdue { can_ask: false },
                    )
                    .await;
            }
            Err(ProviderError::Unsupported(_)) => return Ok(AttemptAction::StillRunning),
            Err(e) if overdue => return self.unreadable(attempt, &e).await,
            Err(_) => return Ok(AttemptAction::Unreachable),
        };
        self.resolve(attempt, resolution, Lateness::InTime).await
    }

    /// What a status lookup's "succeeded" resolves the attempt to: its
    /// output, unless the engine refuses the answer at this moment of use
    /// (off the job's primary, a model its certificate does not vouch
    /// for), and then failed, with the refusal as its error.
    async fn vetted(
        &self,
        attempt: &Attempt,
        output: idem_model::document::Document,
        model: Option<String>,
    ) -> Result<Resolution, EngineError> {
        let primary = self.engine.job(attempt.job_id).await?.provider;
        let refusal = self
            .engine
            .answer_refusal(&primary, &attempt.provider, model.as_deref())
            .await?;
        Ok(match refusal {
            Some(reason) => Resolution::Failed {
                error: reason.to_value(),
            },
            None => Resolution::Succeeded { result: output },
        })
    }

    /// Cancels at the provider, then resolves the attempt as cancelled.
    async fn cancel(
        &self,
        attempt: &Attempt,
        provider: &dyn crate::provider::Provider,
        why: Cancel,
    ) -> Result<AttemptAction, EngineError> {
        match self.bounded("cancel", provider.cancel(attempt.id)).await {
            Ok(true) => {
                let lateness = match why {
                    Cancel::Overdue { .. } => Lateness::Overdue,
                    _ => Lateness::InTime,
                };
                self.resolve(attempt, Resolution::Cancelled, lateness)
                    .await
            }
            // It finished meanwhile; the next pass reads its status.
            Ok(false) if why != (Cancel::Overdue { can_ask: false }) => Ok(AttemptAction::StillRunning),
            // It finished, and the provider cannot say with what result:
            // no pass will ever learn more, so an operator must look (found
            // by `idem fuzz`: such a job stayed blocked, unreported, for
            // ever, the reconciler cancelling in vain every pass).
            Ok(false) => {
                self.blocked(
                    attempt,
                    "the provider finished the work and cannot say with what result (no status lookup)",
                )
                .await
            }
            Err(ProviderError::Unsupported(_)) => {
                let reason = if why == Cancel::NeverReceived {
                    "the provider never received the request, and cannot refuse a late copy"
                } else {
                    "the provider cannot cancel"
                };
                self.blocked(attempt, reason).await
            }
            Err(_) => Ok(AttemptAction::Unreachable),
        }
    }

    /// `call` to a provider, bounded by `provider_call_timeout_ms`. No
    /// answer in time is a broken conversation: the attempt stays as it is
    /// and the next pass asks again.
    async fn bounded<T>(
        &self,
        what: &'static str,
        call: impl Future<Output = Result<T, ProviderError>>,
    ) -> Result<T, ProviderError> {
        // Zoo: the call is waited for however long it takes.
        #[cfg(feature = "bench")]
        if self.engine.design() == Design::ZooUnboundedStatusLookup {
            return call.await;
        }
        let timeout_ms = self.config.provider_call_timeout_ms;
        crate::timer::timeout(Duration::from_millis(timeout_ms), call)
            .await
            .unwrap_or_else(|_| {
                Err(ProviderError::Broken(format!(
                    "no answer to the {what} call within {timeout_ms} ms"
                )))
            })
    }

    /// Resolves the attempt out of band and notes it in the decision trace;
    /// `overdue` marks a cancel made because the attempt outlived
    /// `unknown_max_ms`.
    async fn resolve(
        &self,
        attempt: &Attempt,
        resolution: Resolution,
        lateness: Lateness,
    ) -> Result<AttemptAction, EngineError> {
        let outcome = match &resolution {
            Resolution::Succeeded { .. } => "succeeded",
            Resolution::Failed { .. } => "failed",
            Resolution::Cancelled => "cancelled",
        };
        match self
            .engine
            .resolve_out_of_band(attempt.id, resolution)
            .await
        {
            Ok(resolved) => {
                let detail = match lateness {
                    Lateness::Overdue => json!({"resolved": outcome, "overdue": true}),
                    Lateness::InTime => json!({"resolved": outcome}),
                };
                // Best effort: the resolution is in the trace as its own
                // event; the note adds who decided it.
                let _recorded = self.note(attempt, detail).await;
                Ok(match resolved {
                    Resolved::Won(_) => AttemptAction::ResolvedSucceeded,
                    Resolved::Lost { .. } => AttemptAction::ResolvedLost,
                    Resolved::Ended(a) if a.state == AttemptState::Cancelled => {
                        AttemptAction::Cancelled
                    }
                    Resolved::Ended(_) => AttemptAction::ResolvedFailed,
                })
            }
            Err(EngineError::NotResolvable { .. }) => Ok(AttemptAction::Moved),
            Err(e) => Err(e),
        }
    }

    /// An attempt past `unknown_max_ms` whose status cannot be read: still
    /// asked on every pass, but an operator is told now. Before, an answer
    /// that broke the output contract (a provider whose stored output is
    /// prose) kept the attempt unknown and the job blocked for ever,
    /// unreported (found by `idem fuzz`, invariant 10).
    async fn unreadable(
        &self,
        attempt: &Attempt,
        error: &ProviderError,
    ) -> Result<AttemptAction, EngineError> {
        // Zoo: unreachable for ever, never reported.
        #[cfg(feature = "bench")]
        if self.engine.design() == Design::ZooUnreadableStatusNeverBlocked {
            return Ok(AttemptAction::Unreachable);
        }
        self.blocked(attempt, unreadable_status(error)).await
    }

    /// Leave the attempt blocked, and say so once in the decision trace.
    /// The note is the operator's only report that the attempt is blocked,
    /// so it is marked as made only once the store has it: a note the store
    /// failed is made again on the next pass (found by `idem fuzz`: one
    /// failed write hid a blocked job for good, invariant 10).
    async fn blocked(&self, attempt: &Attempt, reason: &str) -> Result<AttemptAction, EngineError> {
        #[cfg(feature = "bench")]
        if self.engine.design() == Design::ZooBlockedNoteMarkedBeforeWritten {
            return self.blocked_marked_before_written(attempt, reason).await;
        }
        let reported = self
            .reported
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&attempt.id);
        if !reported {
            tracing::warn!(attempt = %attempt.id, job = %attempt.job_id, reason, "attempt blocked; needs an operator");
            if self
                .note(attempt, json!({"blocked": true, "reason": reason}))
                .await
            {
                self.reported
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(attempt.id);
            }
        }
        Ok(AttemptAction::Blocked)
    }

    /// Zoo: the note is marked as made before the store has it, so one
    /// failed write means it is never made.
    #[cfg(feature = "bench")]
    async fn blocked_marked_before_written(
        &self,
        attempt: &Attempt,
        reason: &str,
    ) -> Result<AttemptAction, EngineError> {
        let first_time = self
            .reported
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(attempt.id);
        if first_time {
            let _recorded = self
                .note(attempt, json!({"blocked": true, "reason": reason}))
                .await;
        }
        Ok(AttemptAction::Blocked)
    }

    /// Whether the note was recorded.
    async fn note(&self, attempt: &Attempt, detail: Value) -> bool {
        self.engine
            .note(
                attempt.job_id,
                Some(attempt.id),
                EventKind::ReconcilerNote,
                detail,
            )
            .await
    }
}

/// Why a status lookup that failed leaves the attempt blocked, for the
/// decision trace (a fixed text: the provider's own words stay in the log).
fn unreadable_status(error: &ProviderError) -> &'static str {
    match error {
        ProviderError::Unreachable(_) | ProviderError::Broken(_) => {
            "the provider cannot be reached to ask for the attempt's status"
        }
        ProviderError::Rejected { .. } => "the provider refuses the status lookup",
        ProviderError::Invalid(_) => "the provider's status answer breaks the output contract",
        ProviderError::Unsupported(_) => "the provider offers no status lookup",
    }
}
