//! Timers: every sleep and timeout the engine (and the simulator's hosts)
//! set goes through [`sleep`] and [`timeout`], never straight to
//! `tokio::time` (`clippy.toml` holds the rule).
//!
//! In the product these are tokio's own. With the `bench` feature they are
//! the same tokio timers, and in addition each one, while it is armed,
//! registers its deadline with the thread's observer if one is installed
//! ([`observe`]). The simulator installs one: knowing the earliest deadline
//! of every host is what lets it skip simulated time in which every host is
//! waiting on a timer and nothing is in flight (`idem_sim::quiet`). A timer
//! the observer cannot see would fire late after such a skip, which is why
//! no code of core or sim may set one another way.

use std::future::Future;
use std::time::Duration;

pub use tokio::time::error::Elapsed;

#[cfg(not(feature = "bench"))]
mod imp {
    use super::*;

    /// A sleep of `duration`: tokio's.
    #[allow(clippy::disallowed_methods)] // the one place the product sets a timer
    pub fn sleep(duration: Duration) -> tokio::time::Sleep {
        tokio::time::sleep(duration)
    }

    /// `future`, or [`Elapsed`] after `duration`: tokio's.
    #[allow(clippy::disallowed_methods)] // the one place the product sets a timer
    pub fn timeout<F: Future>(duration: Duration, future: F) -> tokio::time::Timeout<F> {
        tokio::time::timeout(duration, future)
    }
}

#[cfg(feature = "bench")]
mod imp {
    use std::cell::{Cell, RefCell};
    use std::collections::BTreeMap;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use super::*;

    /// Reads the current simulated time, or `None` outside a simulated host.
    pub type Now = fn() -> Option<Duration>;

    /// The armed deadlines of one thread's timers, as a multiset.
    struct Registry {
        generation: u64,
        now: Now,
        deadlines: BTreeMap<Duration, u32>,
    }

    thread_local! {
        static REGISTRY: RefCell<Option<Registry>> = const { RefCell::new(None) };
        static GENERATIONS: Cell<u64> = const { Cell::new(0) };
    }

    /// While it lives, the timers of this thread report their deadlines.
    #[derive(Debug)]
    pub struct Observing {
        generation: u64,
    }

    /// Starts observing this thread's timers; `now` reads the clock the
    /// deadlines are measured on. Replaces any observer already installed.
    pub fn observe(now: Now) -> Observing {
        let generation = GENERATIONS.with(|g| {
            let next = g.get() + 1;
            g.set(next);
            next
        });
        REGISTRY.with(|r| {
            *r.borrow_mut() = Some(Registry {
                generation,
                now,
                deadlines: BTreeMap::new(),
            });
        });
        Observing { generation }
    }

    impl Observing {
        /// Whether this is still the thread's observer (no later
        /// [`observe`] replaced it).
        pub fn is_current(&self) -> bool {
            REGISTRY.with(|r| {
                r.borrow()
                    .as_ref()
                    .is_some_and(|reg| reg.generation == self.generation)
            })
        }

        /// The earliest deadline of an armed timer, if any.
        pub fn earliest(&self) -> Option<Duration> {
            REGISTRY.with(|r| {
                r.borrow()
                    .as_ref()
                    .filter(|reg| reg.generation == self.generation)
                    .and_then(|reg| reg.deadlines.keys().next().copied())
            })
        }

        /// How many timers are armed.
        pub fn armed(&self) -> u64 {
            REGISTRY.with(|r| {
                r.borrow()
                    .as_ref()
                    .filter(|reg| reg.generation == self.generation)
                    .map_or(0, |reg| reg.deadlines.values().map(|n| u64::from(*n)).sum())
            })
        }
    }

    impl Drop for Observing {
        fn drop(&mut self) {
            REGISTRY.with(|r| {
                let mut r = r.borrow_mut();
                if r.as_ref()
                    .is_some_and(|reg| reg.generation == self.generation)
                {
                    *r = None;
                }
            });
        }
    }

    /// One timer's registration: its deadline (fixed when the timer is
    /// made, as tokio fixes it), armed from its first poll until it fires
    /// or is dropped. A timer never polled never fires, so it is not armed.
    #[derive(Debug)]
    struct Watch {
        deadline: Option<(u64, Duration)>,
        armed: bool,
    }

    impl Watch {
        fn new(duration: Duration) -> Self {
            let deadline = REGISTRY.with(|r| {
                r.borrow().as_ref().and_then(|reg| {
                    (reg.now)().map(|now| (reg.generation, now.saturating_add(duration)))
                })
            });
            Self {
                deadline,
                armed: false,
            }
        }

        fn arm(&mut self) {
            if self.armed {
                return;
            }
            if let Some((generation, deadline)) = self.deadline {
                REGISTRY.with(|r| {
                    if let Some(reg) = r.borrow_mut().as_mut()
                        && reg.generation == generation
                    {
                        *reg.deadlines.entry(deadline).or_default() += 1;
                        self.armed = true;
                    }
                });
            }
        }

        fn disarm(&mut self) {
            if !self.armed {
                return;
            }
            self.armed = false;
            if let Some((generation, deadline)) = self.deadline {
                // A timer dropped while its thread is being torn down finds
                // no registry; there is nothing left to tell.
                let _ = REGISTRY.try_with(|r| {
                    if let Ok(mut r) = r.try_borrow_mut()
                        && let Some(reg) = r.as_mut()
                        && reg.generation == generation
                        && let Some(count) = reg.deadlines.get_mut(&deadline)
                    {
                        *count -= 1;
                        if *count == 0 {
                            reg.deadlines.remove(&deadline);
                        }
                    }
                });
            }
        }
    }

    impl Drop for Watch {
        fn drop(&mut self) {
            self.disarm();
        }
    }

    /// A sleep of `duration`: tokio's, watched.
    #[derive(Debug)]
    pub struct Sleep {
        inner: Pin<Box<tokio::time::Sleep>>,
        watch: Watch,
    }

    impl Future for Sleep {
        type Output = ();

        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            let this = self.get_mut();
            this.watch.arm();
            let poll = this.inner.as_mut().poll(cx);
            if poll.is_ready() {
                this.watch.disarm();
            }
            poll
        }
    }

    /// `future`, or [`Elapsed`] after `duration`: tokio's, watched.
    #[derive(Debug)]
    pub struct Timeout<F> {
        inner: Pin<Box<tokio::time::Timeout<F>>>,
        watch: Watch,
    }

    impl<F: Future> Future for Timeout<F> {
        type Output = Result<F::Output, Elapsed>;

        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
            let this = self.get_mut();
            this.watch.arm();
            let poll = this.inner.as_mut().poll(cx);
            if poll.is_ready() {
                this.watch.disarm();
            }
            poll
        }
    }

    /// A sleep of `duration`.
    #[allow(clippy::disallowed_methods)] // the one place a timer is set
    pub fn sleep(duration: Duration) -> Sleep {
        Sleep {
            watch: Watch::new(duration),
            inner: Box::pin(tokio::time::sleep(duration)),
        }
    }

    /// `future`, or [`Elapsed`] after `duration`.
    #[allow(clippy::disallowed_methods)] // the one place a timer is set
    pub fn timeout<F: Future>(duration: Duration, future: F) -> Timeout<F> {
        Timeout {
            watch: Watch::new(duration),
            inner: Box::pin(tokio::time::timeout(duration, future)),
        }
    }
}

pub use imp::*;

/// hyper's timer (the server's header read timeout) on [`sleep`], so the
/// simulator sees hyper's deadlines too. Like hyper-util's `TokioTimer`, it
/// reads the runtime's clock, which under turmoil is simulated time.
#[derive(Clone, Copy, Debug, Default)]
pub struct HyperTimer;

/// A [`sleep`] as hyper wants it.
struct HyperSleep(std::pin::Pin<Box<dyn Future<Output = ()> + Send + Sync>>);

impl Future for HyperSleep {
    type Output = ();

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        self.0.as_mut().poll(cx)
    }
}

impl hyper::rt::Sleep for HyperSleep {}

impl hyper::rt::Timer for HyperTimer {
    fn sleep(&self, duration: Duration) -> std::pin::Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(HyperSleep(Box::pin(sleep(duration))))
    }

    fn sleep_until(
        &self,
        deadline: std::time::Instant,
    ) -> std::pin::Pin<Box<dyn hyper::rt::Sleep>> {
        self.sleep(deadline.saturating_duration_since(self.now()))
    }

    // The runtime's clock, as TokioTimer reads it: simulated time under
    // turmoil, where the deadlines hyper computes from it are kept.
    #[allow(clippy::disallowed_methods)]
    fn now(&self) -> std::time::Instant {
        tokio::time::Instant::now().into_std()
    }
}

#[cfg(all(test, feature = "bench"))]
mod tests {
    use super::*;

    fn fixed_now() -> Option<Duration> {
        Some(Duration::from_millis(100))
    }

    #[tokio::test(start_paused = true)]
    async fn armed_timers_report_their_deadlines_until_they_fire_or_drop() {
        let observing = observe(fixed_now);
        assert!(observing.is_current());
        let never_polled = sleep(Duration::from_millis(5));
        assert_eq!(observing.earliest(), None, "an unpolled timer is not armed");
        // Boxed, so that dropping it drops the timer.
        let mut long = Box::pin(sleep(Duration::from_millis(50)));
        let short = sleep(Duration::from_millis(10));
        assert!(futures_poll(long.as_mut()).is_pending());
        assert_eq!(observing.earliest(), Some(Duration::from_millis(150)));
        short.await;
        assert_eq!(observing.armed(), 1, "a fired timer is disarmed");
        let timed_out = timeout(Duration::from_millis(1), std::future::pending::<()>()).await;
        assert!(timed_out.is_err());
        drop(never_polled);
        assert_eq!(observing.earliest(), Some(Duration::from_millis(150)));
        drop(long);
        assert_eq!(observing.earliest(), None);
        let newer = observe(fixed_now);
        assert!(!observing.is_current());
        drop(observing);
        assert!(
            newer.is_current(),
            "an older observer leaves a newer one alone"
        );
        drop(newer);
        // Without an observer, timers are plain tokio timers.
        sleep(Duration::from_millis(1)).await;
    }

    fn futures_poll<F: Future>(future: std::pin::Pin<&mut F>) -> std::task::Poll<F::Output> {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        future.poll(&mut cx)
    }
}
