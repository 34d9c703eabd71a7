//! The system under test's processes: each one an OS process the harness
//! starts, kills with SIGKILL and starts again, with its output in a log
//! file of the run's directory.
//!
//! Nothing is left behind when the harness dies, however it dies: every
//! process is started with `--controlled` (or, for a command that knows no
//! such flag, under the same contract), reads its stdin from a pipe the
//! harness holds, and exits when that pipe ends, which the kernel ends
//! when the harness is gone, even after SIGKILL. Each process also runs in
//! a process group of its own, so that a Ctrl-C meant for the harness does
//! not reach it before the harness can stop it in order. (The workspace
//! forbids `unsafe`, so there is no parent-death signal to ask for.)

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::process::{Child, ChildStdin, Command};

use super::RealError;

/// How long a process may take to say it is ready, in polls of its log.
const READY_POLL_MS: u64 = 20;
pub const READY_WAIT_MS_MAX: u64 = 30_000;
/// How long one health check may take.
const HEALTHZ_TIMEOUT_MS: u64 = 500;

/// How to start one process.
#[derive(Clone, Debug)]
pub struct ProcessSpec {
    /// The host it is, in the trace (`api-1`).
    pub host: String,
    pub program: PathBuf,
    pub args: Vec<String>,
    pub log: PathBuf,
    pub ready: Readiness,
    /// Killed with its whole process group (a black-box target's shell
    /// and everything it started), not only the process itself.
    pub group: bool,
}

/// How the harness knows a process is ready.
#[derive(Clone, Debug)]
pub enum Readiness {
    /// A line of its log says it (counted: a restart must say it again).
    LogLine(String),
    /// `GET /healthz` at this address answers 200 (a black-box target).
    Healthz(std::net::SocketAddr),
}

impl Readiness {
    /// How many times the process has said it is ready (log lines), or
    /// 0 for a health check (which has no memory of earlier answers).
    fn count(&self, log: &Path) -> usize {
        match self {
            Readiness::LogLine(line) => ready_count(log, line),
            Readiness::Healthz(_) => 0,
        }
    }

    /// Whether the process is ready now, having said it `before` times.
    async fn ready(&self, log: &Path, before: usize) -> bool {
        match self {
            Readiness::LogLine(line) => ready_count(log, line) > before,
            Readiness::Healthz(address) => healthz(*address).await,
        }
    }
}

/// Whether `GET /healthz` at `address` answers 200 within a poll.
async fn healthz(address: std::net::SocketAddr) -> bool {
    use tokio::io::AsyncReadExt;
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(address).await.ok()?;
        let request =
            format!("GET /healthz HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut head = [0u8; 12];
        stream.read_exact(&mut head).await.ok()?;
        Some(head.starts_with(b"HTTP/1.") && &head[9..12] == b"200")
    };
    idem_core::timer::timeout(Duration::from_millis(HEALTHZ_TIMEOUT_MS), exchange)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}

#[derive(Debug)]
struct Running {
    child: Child,
    /// Held open: the process lives while it is.
    stdin: ChildStdin,
    group: bool,
}

impl Running {
    /// SIGKILL to the process (or its whole group), then reaped.
    async fn kill(mut self) {
        if self.group
            && let Some(pid) = self.child.id()
        {
            // The group's id is the leader's pid (`process_group(0)`).
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{pid}")])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .await;
        }
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}

/// The processes of a run, by host.
#[derive(Debug, Default)]
pub struct Processes {
    specs: BTreeMap<String, ProcessSpec>,
    running: BTreeMap<String, Running>,
}

fn spawn(spec: &ProcessSpec) -> Result<Running, RealError> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&spec.log)
        .map_err(|e| RealError::Start(format!("{}: {e}", spec.log.display())))?;
    let err = log
        .try_clone()
        .map_err(|e| RealError::Start(format!("{}: {e}", spec.log.display())))?;
    let mut command = Command::new(&spec.program);
    // Only the flags configure the process: none of the harness's own
    // settings leak in, and its log says when it is ready whatever the
    // harness's filter is.
    for (name, _) in std::env::vars_os() {
        let name_text = name.to_string_lossy();
        if name_text.starts_with("IDEM_") || name_text == "DATABASE_URL" {
            command.env_remove(&name);
        }
    }
    let mut child = command
        .env("RUST_LOG", "info")
        .args(&spec.args)
        .stdin(Stdio::piped())
        .stdout(log)
        .stderr(err)
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| RealError::Start(format!("{}: {e}", spec.program.display())))?;
    let stdin = child
        .stdin
        .take()
        .ok_or_else(|| RealError::Start(format!("{}: no stdin", spec.host)))?;
    Ok(Running {
        child,
        stdin,
        group: spec.group,
    })
}

impl Processes {
    /// Starts `spec`'s process and waits until its log says it is ready.
    pub async fn start(&mut self, spec: ProcessSpec) -> Result<(), RealError> {
        // A log that already says it is ready (a restart appends) must say
        // it again: count the lines that say it.
        let before = spec.ready.count(&spec.log);
        let mut running = spawn(&spec)?;
        let polls = READY_WAIT_MS_MAX / READY_POLL_MS;
        for _ in 0..polls {
            if spec.ready.ready(&spec.log, before).await {
                self.running.insert(spec.host.clone(), running);
                self.specs.insert(spec.host.clone(), spec);
                return Ok(());
            }
            if let Ok(Some(status)) = running.child.try_wait() {
                return Err(RealError::Start(format!(
                    "{} exited ({status}) before it was ready; its log:\n{}",
                    spec.host,
                    tail(&spec.log)
                )));
            }
            idem_core::timer::sleep(Duration::from_millis(READY_POLL_MS)).await;
        }
        running.kill().await;
        Err(RealError::Start(format!(
            "{} was not ready within {READY_WAIT_MS_MAX} ms; its log:\n{}",
            spec.host,
            tail(&spec.log)
        )))
    }

    /// Whether `host` is one of these processes.
    pub fn has(&self, host: &str) -> bool {
        self.specs.contains_key(host)
    }

    /// SIGKILL, and reaped.
    pub async fn kill(&mut self, host: &str) {
        if let Some(running) = self.running.remove(host) {
            running.kill().await;
        }
    }

    /// Starts `host` again as it was started (without waiting for it).
    pub fn restart(&mut self, host: &str) -> Result<(), RealError> {
        let Some(spec) = self.specs.get(host) else {
            return Ok(());
        };
        if !self.running.contains_key(host) {
            let running = spawn(spec)?;
            self.running.insert(host.to_owned(), running);
        }
        Ok(())
    }

    /// Waits until restarted `host` says it is ready again (bounded).
    pub async fn ready_again(&self, host: &str, before: usize) -> bool {
        let Some(spec) = self.specs.get(host) else {
            return false;
        };
        for _ in 0..READY_WAIT_MS_MAX / READY_POLL_MS {
            if spec.ready.ready(&spec.log, before).await {
                return true;
            }
            idem_core::timer::sleep(Duration::from_millis(READY_POLL_MS)).await;
        }
        false
    }

    /// How many times `host`'s log has said it is ready.
    pub fn ready_lines(&self, host: &str) -> usize {
        self.specs
            .get(host)
            .map_or(0, |spec| spec.ready.count(&spec.log))
    }

    /// Sends one order line to `host` (if it is running).
    pub async fn send(&mut self, host: &str, line: &str) {
        if let Some(running) = self.running.get_mut(host) {
            let mut text = line.to_owned();
            text.push('\n');
            let _ = running.stdin.write_all(text.as_bytes()).await;
            let _ = running.stdin.flush().await;
        }
    }

    /// Kills every process.
    pub async fn stop_all(&mut self) {
        let hosts: Vec<String> = self.running.keys().cloned().collect();
        for host in hosts {
            self.kill(&host).await;
        }
    }
}

fn ready_count(log: &Path, ready: &str) -> usize {
    std::fs::read_to_string(log).map_or(0, |text| text.matches(ready).count())
}

/// The end of a log, for an error message.
/// The end of a log, at most about 4,000 bytes, from the start of a line
/// (a line longer than that is cut at a character).
fn tail(log: &Path) -> String {
    const TAIL_BYTES: usize = 4_000;
    let text = std::fs::read_to_string(log).unwrap_or_default();
    if text.len() <= TAIL_BYTES {
        return text;
    }
    let cut = text.len() - TAIL_BYTES;
    let start = match text.as_bytes()[cut..].iter().position(|b| *b == b'\n') {
        Some(newline) if cut + newline + 1 < text.len() => cut + newline + 1,
        _ => (cut..text.len())
            .find(|i| text.is_char_boundary(*i))
            .unwrap_or(text.len()),
    };
    text[start..].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_excerpt_starts_at_a_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("a.log");
        let lines: Vec<String> = (0..400)
            .map(|i| format!("line {i:04} of the log"))
            .collect();
        std::fs::write(&log, lines.join("\n") + "\n").expect("writes");
        let excerpt = tail(&log);
        assert!(excerpt.len() <= 4_000);
        assert!(excerpt.starts_with("line "), "{}", &excerpt[..40]);
        assert!(excerpt.ends_with("line 0399 of the log\n"));
        std::fs::write(&log, "short\n").expect("writes");
        assert_eq!(tail(&log), "short\n");
    }

    #[test]
    fn readiness_is_counted_so_a_restart_must_say_it_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("a.log");
        std::fs::write(&log, "x\n{\"message\":\"idem serving\"}\n").expect("writes");
        assert_eq!(ready_count(&log, "idem serving"), 1);
        assert_eq!(ready_count(&dir.path().join("none.log"), "idem serving"), 0);
        assert!(tail(&log).ends_with("}\n"));
    }
}
