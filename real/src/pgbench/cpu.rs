//! The CPU time of one runtime's threads in this process, from
//! `/proc/self/task/<tid>/stat`: each service under the bench runs on a
//! runtime of its own with named threads, so its own cost per request can
//! be told apart from the load generator's, which shares the process.
//!
//! The figures are in clock ticks of `USER_HZ`, which Linux fixes at 100
//! for user space on every architecture this bench runs on (x86, arm64:
//! `getconf CLK_TCK` says 100); the workspace forbids `unsafe`, so
//! `sysconf` is not called. A test compares the ticks with the
//! nanoseconds of `/proc/self/task/<tid>/schedstat`, which would catch
//! another tick rate.

use std::path::Path;

/// Clock ticks per second of `/proc`'s CPU times (Linux's `USER_HZ`).
pub const TICKS_PER_S: u64 = 100;

/// The longest thread name the kernel keeps (`TASK_COMM_LEN` less the NUL):
/// a longer name reads back cut to this many bytes.
const COMM_BYTES_MAX: usize = 15;

/// The most threads read: far above what the bench starts (two runtimes of
/// one thread per core, the load generator's, pgbench is another process).
const THREADS_MAX: usize = 4096;

/// CPU milliseconds (user and system) so far of this process's threads
/// named `name`; None when `/proc` cannot be read (not Linux).
pub fn threads_cpu_ms(name: &str) -> Option<f64> {
    let comm = comm_of(name);
    let tasks = std::fs::read_dir("/proc/self/task").ok()?;
    let mut ticks = 0u64;
    let mut found = false;
    for task in tasks.take(THREADS_MAX).flatten() {
        let dir = task.path();
        // A thread that ended is no longer listed and its CPU time drops
        // out of the sum: a reading is meant for a runtime whose threads
        // live through it (tokio's workers do).
        if read_trimmed(&dir.join("comm")).as_deref() != Some(comm) {
            continue;
        }
        if let Some(t) = read_trimmed(&dir.join("stat")).and_then(|s| stat_ticks(&s)) {
            ticks += t;
            found = true;
        }
    }
    found.then(|| ticks as f64 * 1000.0 / TICKS_PER_S as f64)
}

/// `name` as the kernel keeps it.
fn comm_of(name: &str) -> &str {
    let mut end = name.len().min(COMM_BYTES_MAX);
    // Bounded by the name's length: back to a character boundary.
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    &name[..end]
}

fn read_trimmed(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim_end().to_owned())
}

/// utime + stime of a `stat` line (fields 14 and 15, counted after the
/// command name, which may itself hold spaces and parentheses).
fn stat_ticks(stat: &str) -> Option<u64> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_comm.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_gives_user_and_system_ticks() {
        let line = "4242 (a (b) c) S 1 2 3 4 5 6 7 8 9 10 1234 56 0 0 20 0 4 0";
        assert_eq!(stat_ticks(line), Some(1290));
        assert_eq!(stat_ticks("4242 (x) S 1 2"), None);
    }

    #[test]
    fn a_long_thread_name_is_matched_as_the_kernel_cuts_it() {
        assert_eq!(comm_of("idem-bench-server"), "idem-bench-serv");
        assert_eq!(comm_of("short"), "short");
        assert_eq!(comm_of("ééééééééé"), "ééééééé");
    }

    fn task_dir(comm: &str) -> Option<std::path::PathBuf> {
        std::fs::read_dir("/proc/self/task")
            .ok()?
            .flatten()
            .map(|t| t.path())
            .find(|p| read_trimmed(&p.join("comm")).as_deref() == Some(comm))
    }

    /// A named thread that burns CPU is found and charged, and its ticks
    /// agree with the scheduler's nanoseconds at 100 ticks a second.
    #[test]
    fn a_busy_named_thread_is_charged_at_user_hz() {
        const NAME: &str = "cpu-test-burner";
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<u64>();
        let burner = std::thread::Builder::new()
            .name(NAME.to_owned())
            .spawn(move || {
                let mut x = 0u64;
                // Spins until told to stop (bounded by the test, which stops
                // it after its reading).
                for i in 0..u64::MAX {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
                    if i % 1_000_000 == 0 && rx.try_recv().is_ok() {
                        break;
                    }
                }
                let _ = done_tx.send(x);
            })
            .expect("a thread starts");
        std::thread::sleep(std::time::Duration::from_millis(300));
        let dir = task_dir(NAME).expect("the thread is listed");
        let ms = threads_cpu_ms(NAME).expect("the thread is read");
        let schedstat = read_trimmed(&dir.join("schedstat"));
        let _ = tx.send(());
        let _ = done_rx.recv();
        burner.join().expect("the thread ends");
        assert!(ms > 50.0, "{ms} ms");
        // Without schedstats in the kernel there is nothing to compare.
        if let Some(ns) = schedstat.and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok()) {
            let sched_ms = ns / 1e6;
            assert!(
                (ms - sched_ms).abs() < 0.25 * sched_ms + 20.0,
                "stat says {ms} ms, schedstat {sched_ms} ms"
            );
        }
    }
}
