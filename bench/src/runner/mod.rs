//! The one thread pool of the workspace: every command that runs many
//! simulations (sweep, mutants, report, fuzz, explore, bench) hands its
//! work to a [`Runner`].
//!
//! A run is `count` work items, numbered from 0. Worker threads claim the
//! next unclaimed number, run it (a simulation is single-threaded and not
//! `Send` inside, so each item runs wholly on one thread), and hand the
//! result back; the caller's sink receives the results **in item order**,
//! whatever the number of threads or how they raced. That order is what
//! makes every output (text, JSON, JUnit, trace hashes, fingerprints) the
//! same for `--jobs 1` and `--jobs 32`.
//!
//! A result that finishes before an earlier one waits in a reorder buffer.
//! The buffer is bounded ([`REORDER_WINDOW_MAX`]): a worker does not claim
//! an item that far past the oldest undelivered one, so memory stays flat
//! over a sweep of millions of runs even when one run is slow.
//!
//! A wall-time budget stops claiming new items once it has passed; what
//! was claimed finishes and is delivered. Progress goes to stderr only
//! when a person is watching ([`Progress`]). Which seeds a shard of a
//! many-machine run takes is [`Shard`]'s business; what a sweep, a matrix
//! or a report runs is [`Matrix`]'s.

mod matrix;
mod progress;
mod seeds;

use std::any::Any;
use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

pub use matrix::{Matrix, MatrixRun, Order};
pub use progress::Progress;
pub use seeds::{SEEDS_MAX, Seeds, Shard};

/// Results held back for in-order delivery, at most. A worker waits
/// rather than claim an item this far past the oldest undelivered one.
pub const REORDER_WINDOW_MAX: usize = 4_096;

/// How many threads, what progress to show, and for how long.
#[derive(Debug)]
pub struct Runner {
    jobs: NonZeroUsize,
    budget: Option<Duration>,
    progress: Progress,
}

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Finished {
    /// Items run (and delivered to the sink).
    pub ran: usize,
    /// Whether the budget stopped the run before `count` items.
    pub out_of_time: bool,
    /// The wall time the run took, for the person watching.
    pub wall: Duration,
}

impl Runner {
    /// `jobs` threads (the machine's cores when `None`), no budget, no
    /// progress bar.
    pub fn new(jobs: Option<NonZeroUsize>) -> Self {
        Self {
            jobs: jobs.unwrap_or_else(cores),
            budget: None,
            progress: Progress::hidden(),
        }
    }

    /// Stops claiming items once `budget` of wall time has passed since
    /// [`Runner::run`] began.
    #[must_use]
    pub fn budget(mut self, budget: Duration) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Shows `progress` while a run goes (it is hidden when stderr is not
    /// a terminal).
    #[must_use]
    pub fn progress(mut self, progress: Progress) -> Self {
        self.progress = progress;
        self
    }

    /// The threads a run uses at most.
    pub fn jobs(&self) -> usize {
        self.jobs.get()
    }

    /// Runs `work` on the items `0..count` over the threads, and hands
    /// each result to `sink` in item order, with the progress bar for
    /// messages. A panic in `work` stops the run and is raised again here
    /// once every thread has stopped.
    pub fn run<T: Send>(
        &self,
        count: usize,
        work: impl Fn(usize) -> T + Sync,
        sink: impl FnMut(usize, T, &Progress) + Send,
    ) -> Finished {
        // Wall time for the budget and the person watching; it never
        // enters a result.
        #[allow(clippy::disallowed_methods)]
        let started = Instant::now();
        self.progress.start(self.budget.is_none().then_some(count));
        let shared = Shared {
            state: Mutex::new(State::new(sink)),
            turn: Condvar::new(),
        };
        let threads = self.jobs.get().min(count);
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| self.work_loop(&shared, count, started, &work));
            }
        });
        self.progress.finish();
        let state = shared
            .state
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(panic) = state.panic {
            resume_unwind(panic);
        }
        Finished {
            ran: state.delivered,
            out_of_time: state.out_of_time,
            wall: started.elapsed(),
        }
    }

    /// One worker thread: claims, runs and delivers items until none is
    /// left, the budget has passed, or another worker panicked.
    fn work_loop<T, W, S>(&self, shared: &Shared<T, S>, count: usize, started: Instant, work: &W)
    where
        W: Fn(usize) -> T + Sync,
        S: FnMut(usize, T, &Progress),
    {
        // Bounded: each pass claims one index below `count`.
        loop {
            let Some(index) = self.claim(shared, count, started) else {
                return;
            };
            let result = catch_unwind(AssertUnwindSafe(|| work(index)));
            let mut state = shared.lock();
            let delivered = result.and_then(|value| {
                state.waiting.insert(index, value);
                catch_unwind(AssertUnwindSafe(|| self.deliver(&mut state)))
            });
            match delivered {
                Ok(()) => self.progress.tick(),
                Err(panic) => {
                    state.stopped = true;
                    state.panic.get_or_insert(panic);
                }
            }
            drop(state);
            shared.turn.notify_all();
        }
    }

    /// The next item to run, waiting while the reorder window is full;
    /// `None` when the run is over for this worker.
    fn claim<T, S>(&self, shared: &Shared<T, S>, count: usize, started: Instant) -> Option<usize> {
        let mut state = shared.lock();
        // Bounded: a waiting worker wakes when an earlier item is
        // delivered, which moves the window on, or when the run stops.
        while !state.stopped
            && state.claimed < count
            && state.claimed >= state.delivered + REORDER_WINDOW_MAX
        {
            state = shared
                .turn
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        if state.stopped || state.claimed >= count {
            return None;
        }
        if self
            .budget
            .is_some_and(|budget| started.elapsed() >= budget)
        {
            state.stopped = true;
            state.out_of_time = true;
            drop(state);
            shared.turn.notify_all();
            return None;
        }
        state.claimed += 1;
        Some(state.claimed - 1)
    }

    /// Hands every result that is next in order to the sink.
    fn deliver<T, S>(&self, state: &mut State<T, S>)
    where
        S: FnMut(usize, T, &Progress),
    {
        // Bounded: by the results waiting, at most REORDER_WINDOW_MAX.
        while let Some(value) = state.waiting.remove(&state.delivered) {
            (state.sink)(state.delivered, value, &self.progress);
            state.delivered += 1;
        }
    }
}

/// What the workers of one run share.
struct Shared<T, S> {
    state: Mutex<State<T, S>>,
    /// Signalled when an item is delivered or the run stops.
    turn: Condvar,
}

impl<T, S> Shared<T, S> {
    fn lock(&self) -> MutexGuard<'_, State<T, S>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The run's bookkeeping, and the sink: delivering under the same lock
/// keeps the sink's calls in item order and one at a time.
struct State<T, S> {
    /// Items claimed so far: the next claim is this index.
    claimed: usize,
    /// Items handed to the sink so far: the next delivery is this index.
    delivered: usize,
    /// Finished results waiting for an earlier one.
    waiting: BTreeMap<usize, T>,
    stopped: bool,
    out_of_time: bool,
    panic: Option<Box<dyn Any + Send>>,
    sink: S,
}

impl<T, S> State<T, S> {
    fn new(sink: S) -> Self {
        Self {
            claimed: 0,
            delivered: 0,
            waiting: BTreeMap::new(),
            stopped: false,
            out_of_time: false,
            panic: None,
            sink,
        }
    }
}

/// The machine's cores, as the OS offers them to this process.
pub fn cores() -> NonZeroUsize {
    std::thread::available_parallelism().unwrap_or(NonZeroUsize::MIN)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn jobs(n: usize) -> Option<NonZeroUsize> {
        NonZeroUsize::new(n)
    }

    #[test]
    fn results_arrive_in_item_order_whatever_the_threads() {
        for threads in [1, 2, 7] {
            let mut seen = Vec::new();
            let finished = Runner::new(jobs(threads)).run(
                100,
                |i| {
                    // Later items finish first.
                    std::thread::sleep(Duration::from_micros(((100 - i) * 20) as u64));
                    i * 3
                },
                |i, value, _| seen.push((i, value)),
            );
            assert_eq!(finished.ran, 100);
            assert!(!finished.out_of_time);
            assert_eq!(seen, (0..100).map(|i| (i, i * 3)).collect::<Vec<_>>());
        }
    }

    #[test]
    fn no_items_no_threads() {
        let finished = Runner::new(jobs(4)).run(0, |i| i, |_, _, _| panic!("nothing to deliver"));
        assert_eq!(finished.ran, 0);
    }

    #[test]
    fn a_budget_stops_claiming_and_keeps_what_ran() {
        let started = AtomicUsize::new(0);
        let mut seen = Vec::new();
        let finished = Runner::new(jobs(2)).budget(Duration::from_millis(50)).run(
            usize::MAX,
            |i| {
                started.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(5));
                i
            },
            |i, _, _| seen.push(i),
        );
        assert!(finished.out_of_time);
        assert_eq!(finished.ran, started.load(Ordering::SeqCst));
        assert_eq!(seen, (0..finished.ran).collect::<Vec<_>>());
    }

    #[test]
    fn a_panic_in_work_is_raised_after_the_threads_stop() {
        let outcome = catch_unwind(|| {
            Runner::new(jobs(3)).run(50, |i| assert!(i != 7, "item seven"), |_, (), _| {})
        });
        let panic = outcome.expect_err("the panic comes back");
        let message = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        assert!(message.contains("item seven"), "{message}");
    }

    #[test]
    fn the_reorder_window_holds_a_slow_first_item() {
        // Item 0 is slow; the others cannot run further than the window
        // ahead of it, and all arrive in order.
        let mut seen = 0;
        let count = REORDER_WINDOW_MAX + 50;
        Runner::new(jobs(2)).run(
            count,
            |i| {
                if i == 0 {
                    std::thread::sleep(Duration::from_millis(30));
                }
                i
            },
            |i, value, _| {
                assert_eq!((i, value), (seen, seen));
                seen += 1;
            },
        );
        assert_eq!(seen, count);
    }
}
