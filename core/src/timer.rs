//! Timers: every sleep and timeout the engine (and the simulator's hosts)
//! set goes through [`sleep`] and [`timeout`], never straight to
//! `tokio::time` (`clippy.toml` holds the rule).
//!
//! In the product these are tokio's own. With the `bench` feature they are
//! tokio's too, unless the thread's simulator drives time ([`drive`]): then
//! a timer is a deadline in simulated time, kept in the thread's driver,
//! and it fires when the driver moves time to it ([`Driven::advance_to`]),
//! not when a runtime's clock passes it. That is what lets the simulator
//! step from one event to the next (a timer's deadline, a message's due
//! time) instead of one tick at a time: it knows the earliest deadline of
//! every host, and firing one needs no runtime's clock to move. A timer the
//! driver cannot see would never fire in such a run, which is why no code
//! of core or sim may set one another way.

use std::future::Future;
use std::time::Duration;

#[cfg(not(feature = "bench"))]
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
    use std::task::{Context, Poll, Waker};

    use super::*;

    /// A timeout's deadline passed before its future finished.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
    #[error("deadline has elapsed")]
    pub struct Elapsed;

    /// One thread's simulated time and the timers armed on it.
    struct Driver {
        generation: u64,
        now: Duration,
        next_id: u64,
        /// Armed timers by (deadline, id): the order they fire in.
        armed: BTreeMap<(Duration, u64), Waker>,
    }

    thread_local! {
        /// The simulator's driver of this thread's timers, if one is on. A
        /// thread runs one world at a time, and timers are armed deep in
        /// the engine (and in hyper) with no handle to the world: this is
        /// the one place both can find.
        static DRIVER: RefCell<Option<Driver>> = const { RefCell::new(None) };
        static GENERATIONS: Cell<u64> = const { Cell::new(0) };
    }

    /// While it lives, the timers made on this thread are driven by it.
    #[derive(Debug)]
    pub struct Driven {
        generation: u64,
    }

    /// Starts driving this thread's timers, at simulated time zero.
    ///
    /// # Panics
    /// If a driver is already on: two worlds at once on one thread would
    /// share it.
    pub fn drive() -> Driven {
        let generation = GENERATIONS.with(|g| {
            let next = g.get() + 1;
            g.set(next);
            next
        });
        DRIVER.with(|d| {
            let mut d = d.borrow_mut();
            assert!(
                d.is_none(),
                "one simulated world at a time per thread: drop the last before building the next"
            );
            *d = Some(Driver {
                generation,
                now: Duration::ZERO,
                next_id: 0,
                armed: BTreeMap::new(),
            });
        });
        Driven { generation }
    }

    /// The driven simulated time of this thread, if a driver is on.
    pub fn driven_now() -> Option<Duration> {
        DRIVER.with(|d| d.borrow().as_ref().map(|driver| driver.now))
    }

    fn with_driver<T>(generation: u64, f: impl FnOnce(&mut Driver) -> T) -> Option<T> {
        DRIVER
            .try_with(|d| {
                let mut d = d.try_borrow_mut().ok()?;
                d.as_mut().filter(|x| x.generation == generation).map(f)
            })
            .ok()
            .flatten()
    }

    impl Driven {
        /// Simulated time now.
        pub fn now(&self) -> Duration {
            with_driver(self.generation, |d| d.now).unwrap_or_default()
        }

        /// The earliest deadline of an armed timer, if any.
        pub fn earliest(&self) -> Option<Duration> {
            with_driver(self.generation, |d| d.armed.keys().next().map(|(t, _)| *t)).flatten()
        }

        /// How many timers are armed.
        pub fn armed(&self) -> u64 {
            with_driver(self.generation, |d| d.armed.len() as u64).unwrap_or(0)
        }

        /// Simulated time is `now` from here on (it never goes back):
        /// every timer due by then fires, its task woken to run in the
        /// runtime's next turn. Returns how many fired.
        pub fn advance_to(&self, now: Duration) -> usize {
            let due: Vec<Waker> = with_driver(self.generation, |d| {
                d.now = d.now.max(now);
                let later = d.armed.split_off(&(d.now, u64::MAX));
                std::mem::replace(&mut d.armed, later)
                    .into_values()
                    .collect()
            })
            .unwrap_or_default();
            let fired = due.len();
            // Woken outside the borrow: a waker may reach back into timers.
            for waker in due {
                waker.wake();
            }
            fired
        }
    }

    impl Drop for Driven {
        fn drop(&mut self) {
            let _ = DRIVER.try_with(|d| {
                let mut d = d.borrow_mut();
                if d.as_ref().is_some_and(|x| x.generation == self.generation) {
                    *d = None;
                }
            });
        }
    }

    /// A timer of the thread's driver: a deadline, armed from its first
    /// poll until it fires or is dropped.
    #[derive(Debug)]
    struct DrivenTimer {
        generation: u64,
        id: u64,
        deadline: Duration,
        armed: bool,
    }

    impl DrivenTimer {
        /// On a driven thread, a timer due `duration` from now, its
        /// deadline rounded up to the millisecond as tokio's timer wheel
        /// rounds it; `None` on any other thread.
        fn new(duration: Duration) -> Option<Self> {
            DRIVER.with(|d| {
                let mut d = d.borrow_mut();
                let driver = d.as_mut()?;
                let id = driver.next_id;
                driver.next_id += 1;
                let at_us = driver.now.saturating_add(duration).as_micros();
                let ms = u64::try_from(at_us.div_ceil(1_000)).unwrap_or(u64::MAX);
                Some(Self {
                    generation: driver.generation,
                    id,
                    deadline: Duration::from_millis(ms),
                    armed: false,
                })
            })
        }

        fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
            let (generation, key) = (self.generation, (self.deadline, self.id));
            let ready = with_driver(generation, |d| {
                if key.0 <= d.now {
                    d.armed.remove(&key);
                    true
                } else {
                    d.armed.insert(key, cx.waker().clone());
                    false
                }
            });
            match ready {
                Some(true) => {
                    self.armed = false;
                    Poll::Ready(())
                }
                Some(false) => {
                    self.armed = true;
                    Poll::Pending
                }
                // Its world is gone (the runtime is being torn down).
                None => Poll::Pending,
            }
        }
    }

    impl Drop for DrivenTimer {
        fn drop(&mut self) {
            if self.armed {
                let key = (self.deadline, self.id);
                with_driver(self.generation, |d| d.armed.remove(&key));
            }
        }
    }

    /// A sleep of `duration`: the driver's on a driven thread, else tokio's.
    #[derive(Debug)]
    pub struct Sleep(SleepInner);

    #[derive(Debug)]
    enum SleepInner {
        Tokio(Pin<Box<tokio::time::Sleep>>),
        Driven(DrivenTimer),
    }

    impl Future for Sleep {
        type Output = ();

        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            match &mut self.get_mut().0 {
                SleepInner::Tokio(sleep) => sleep.as_mut().poll(cx),
                SleepInner::Driven(timer) => timer.poll(cx),
            }
        }
    }

    /// `future`, or [`Elapsed`] after `duration`: the driver's on a driven
    /// thread, else tokio's.
    #[derive(Debug)]
    pub struct Timeout<F>(TimeoutInner<F>);

    #[derive(Debug)]
    enum TimeoutInner<F> {
        Tokio(Pin<Box<tokio::time::Timeout<F>>>),
        Driven {
            future: Pin<Box<F>>,
            delay: DrivenTimer,
        },
    }

    impl<F: Future> Future for Timeout<F> {
        type Output = Result<F::Output, Elapsed>;

        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
            match &mut self.get_mut().0 {
                TimeoutInner::Tokio(timeout) => timeout.as_mut().poll(cx).map_err(|_| Elapsed),
                TimeoutInner::Driven { future, delay } => {
                    if let Poll::Ready(output) = future.as_mut().poll(cx) {
                        return Poll::Ready(Ok(output));
                    }
                    delay.poll(cx).map(|()| Err(Elapsed))
                }
            }
        }
    }

    /// A sleep of `duration`.
    #[allow(clippy::disallowed_methods)] // the one place a timer is set
    pub fn sleep(duration: Duration) -> Sleep {
        Sleep(match DrivenTimer::new(duration) {
            Some(timer) => SleepInner::Driven(timer),
            None => SleepInner::Tokio(Box::pin(tokio::time::sleep(duration))),
        })
    }

    /// `future`, or [`Elapsed`] after `duration`.
    #[allow(clippy::disallowed_methods)] // the one place a timer is set
    pub fn timeout<F: Future>(duration: Duration, future: F) -> Timeout<F> {
        Timeout(match DrivenTimer::new(duration) {
            Some(delay) => TimeoutInner::Driven {
                future: Box::pin(future),
                delay,
            },
            None => TimeoutInner::Tokio(Box::pin(tokio::time::timeout(duration, future))),
        })
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
    use std::task::{Context, Poll};

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn poll_once<F: Future>(future: std::pin::Pin<&mut F>) -> Poll<F::Output> {
        future.poll(&mut Context::from_waker(std::task::Waker::noop()))
    }

    #[test]
    fn driven_timers_fire_when_the_driver_reaches_their_deadline() {
        let driven = drive();
        assert_eq!(driven_now(), Some(Duration::ZERO));
        driven.advance_to(ms(100));
        let never_polled = sleep(ms(5));
        assert_eq!(driven.earliest(), None, "an unpolled timer is not armed");
        let mut long = Box::pin(sleep(ms(50)));
        let mut short = Box::pin(sleep(ms(10)));
        // Sub-millisecond deadlines round up, as tokio's wheel rounds them.
        let mut odd = Box::pin(timeout(
            Duration::from_micros(10_500),
            std::future::pending::<()>(),
        ));
        assert!(poll_once(long.as_mut()).is_pending());
        assert!(poll_once(short.as_mut()).is_pending());
        assert!(poll_once(odd.as_mut()).is_pending());
        assert_eq!(driven.earliest(), Some(ms(110)));
        assert_eq!(driven.armed(), 3);
        assert_eq!(driven.advance_to(ms(110)), 1, "only the short one is due");
        assert_eq!(poll_once(short.as_mut()), Poll::Ready(()));
        assert!(
            poll_once(odd.as_mut()).is_pending(),
            "due at 111, not 110.5"
        );
        assert_eq!(driven.advance_to(ms(111)), 1);
        assert_eq!(poll_once(odd.as_mut()), Poll::Ready(Err(Elapsed)));
        // A timeout whose future finishes first is its future's.
        let mut done = Box::pin(timeout(ms(1), std::future::ready(7)));
        assert_eq!(poll_once(done.as_mut()), Poll::Ready(Ok(7)));
        // Time never goes back; a timer already due is ready at once.
        driven.advance_to(ms(3));
        assert_eq!(driven.now(), ms(111));
        assert_eq!(
            poll_once(Box::pin(sleep(Duration::ZERO)).as_mut()),
            Poll::Ready(())
        );
        drop(never_polled);
        assert_eq!(driven.earliest(), Some(ms(150)));
        drop(long);
        assert_eq!(driven.earliest(), None, "a dropped timer is disarmed");
        drop(driven);
        assert_eq!(driven_now(), None);
    }

    #[test]
    #[should_panic(expected = "one simulated world at a time")]
    fn one_driver_per_thread() {
        let _first = drive();
        let _second = drive();
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_driver_timers_are_tokio_timers() {
        sleep(ms(1)).await;
        let timed_out = timeout(ms(1), std::future::pending::<()>()).await;
        assert_eq!(timed_out, Err(Elapsed));
    }
}
