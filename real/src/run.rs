//! The driver of a real run: the clients start, faults fire when their
//! time comes or when real mode observes their trigger event, and the run
//! ends when the system is quiet (every client done, no fault left to
//! fire, heal or restart, every job and attempt terminal in the store) or
//! at the scenario's `settle_ms`, as in the simulator. Then everything is
//! stopped, the store's history drained, the trace assembled and judged.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use tokio::task::JoinSet;

use idem_core::provider::connect::TcpConnector;
use idem_core::serve_bench::JournalLine;
use idem_sim::client::{ClientContext, KnownJobs, Wire, run_client};
use idem_sim::decisions::{DecisionFile, Decisions, Subject};
use idem_sim::driver::{Backend, Stop, drive};
use idem_sim::plan::Plan;
use idem_sim::run::{RunReport, Verdict as SimVerdict};
use idem_sim::scenario::host::DRIVER;
use idem_sim::scenario::{Fault, Scenario, host};
use idem_sim::trace::{Recorder, TraceBody};
use idem_sim::world::client_token;

use super::clock::now_us;
use super::gate::TriggerGate;
use super::history::History;
use super::judge::{Observed, judge};
use super::recorder::{RealRecorder, Source};
use super::wal::WalReader;
use super::world::{RealWorld, design_of, journal_path};
use super::{RealError, RealOptions, RealOutcome};

/// How often the driver looks at the clock, the triggers and its plan.
const DRIVER_TICK_MS: u64 = 5;
/// The least time without a commit before the system counts as quiet.
const QUIET_MS_MIN: u64 = 300;
/// How often the store's history is read during the run.
const HISTORY_POLL_MS: u64 = 10;
/// Reads of the store's history after the run, until one finds nothing.
const HISTORY_DRAIN_POLLS_MAX: u32 = 100;
/// Journal lines read per process, at most.
const JOURNAL_LINES_MAX: usize = 1_000_000;

/// Reads the store's history into the trace until told to stop, then
/// drains it. The first history it could not read is the error.
async fn follow_history(
    mut reader: WalReader,
    history: History,
    recorder: RealRecorder,
    gate: TriggerGate,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Result<(), String> {
    let take = |commits: Vec<super::wal::Commit>| -> Result<usize, String> {
        let n = commits.len();
        for commit in commits {
            for body in history.events(&commit)? {
                recorder.record_at(Source::Store, commit.t_us, host::STORE, None, body);
            }
        }
        Ok(n)
    };
    loop {
        if *stop.borrow() {
            break;
        }
        // A failed read is a server that is down (a crash): try again.
        if let Ok(commits) = reader.poll().await {
            take(commits)?;
        }
        gate.read();
        tokio::select! {
            () = idem_core::timer::sleep(Duration::from_millis(HISTORY_POLL_MS)) => {}
            () = gate.read_wanted() => {}
            _ = stop.changed() => {}
        }
    }
    for _ in 0..HISTORY_DRAIN_POLLS_MAX {
        match reader.poll().await {
            Ok(commits) if commits.is_empty() => return Ok(()),
            Ok(commits) => {
                take(commits)?;
            }
            Err(e) => {
                idem_core::timer::sleep(Duration::from_millis(HISTORY_POLL_MS)).await;
                if reader.poll().await.is_err() {
                    return Err(format!(
                        "the store's history could not be read to its end: {e}"
                    ));
                }
            }
        }
    }
    Err("the store's history did not run dry".to_owned())
}

/// The real world as the driver's backend (`idem_sim::driver`): time is the
/// wall clock, the world runs by itself between the driver's looks, and the
/// users run as tasks of the harness.
struct RealBackend<'a> {
    world: &'a mut RealWorld,
    scenario: &'a Scenario,
    clients: JoinSet<()>,
}

impl Backend for RealBackend<'_> {
    type Error = RealError;
    type Recorder = RealRecorder;

    fn recorder(&self) -> &RealRecorder {
        &self.world.recorder
    }

    fn record_driver(&self, body: TraceBody) {
        self.world.recorder.record(DRIVER, body);
    }

    fn decisions(&self) -> &Decisions {
        &self.world.decisions
    }

    fn note_step(&self, subject: Subject) {
        let now_ms = self.world.clock.elapsed_ms();
        self.world.decisions.note(|| subject, now_ms, now_ms);
    }

    /// Sleeps until the plan's next step, for at most a driver tick, or
    /// until a store link's answer waits at the trigger gate.
    async fn advance(&mut self, due: Option<Duration>, settle: Duration) -> Option<Duration> {
        let now = self.world.clock.elapsed();
        let tick = now + Duration::from_millis(DRIVER_TICK_MS);
        let wake = due.map_or(tick, |due| due.min(tick)).min(settle);
        if wake > now {
            tokio::select! {
                () = idem_core::timer::sleep(wake - now) => {}
                () = self.world.store_plan.gate().look_wanted() => {}
            }
        }
        let now = self.world.clock.elapsed();
        (now < settle).then_some(now)
    }

    async fn step(&mut self) -> Result<(), RealError> {
        Ok(())
    }

    /// A trigger fault fires as soon as the driver has seen its event.
    fn trigger_due(&self, at: Duration) -> Duration {
        at
    }

    fn now(&self) -> Duration {
        self.world.clock.elapsed()
    }

    async fn fire(&mut self, fault: &Fault) -> Result<(), RealError> {
        self.world.fire(fault).await
    }

    async fn heal(&mut self, fault: &Fault) -> Result<(), RealError> {
        self.world.heal(fault).await
    }

    async fn restart(&mut self, host: &str) -> Result<(), RealError> {
        self.world.restart(host).await
    }

    fn looked(&mut self, plan: &Plan) {
        self.world.store_plan.gate().looked(plan.awaits_triggers());
    }

    fn clients_done(&mut self) -> bool {
        while self.clients.try_join_next().is_some() {}
        self.clients.is_empty()
    }

    async fn settled(&mut self) -> bool {
        self.world.settled(self.scenario).await
    }

    /// Real mode runs to quiescence or its deadline.
    async fn at_rest(&mut self, _plan: &Plan, _now: Duration) -> bool {
        false
    }
}

impl RealWorld {
    /// Reads the store's `history` into the trace until `stopped`.
    fn follow(
        &self,
        history: WalReader,
        stopped: tokio::sync::watch::Receiver<bool>,
    ) -> impl Future<Output = Result<(), String>> + use<> {
        follow_history(
            history,
            History::new(self.store.schema()),
            self.recorder.clone(),
            self.store_plan.gate().clone(),
            stopped,
        )
    }

    /// Starts every user: the simulator's script, over real TCP through
    /// each user's links to the replicas.
    fn start_clients(&self, scenario: &Scenario, seed: u64) -> JoinSet<()> {
        let mut clients = JoinSet::new();
        let known_jobs = KnownJobs::default();
        let replicas: Vec<String> = (1..=scenario.topology.api_replicas)
            .map(host::api)
            .collect();
        for spec in &scenario.clients {
            let port = Wire {
                connector: TcpConnector,
                authorities: self.replicas[&spec.name]
                    .iter()
                    .map(|(_, link)| link.to_string())
                    .collect(),
                time: self.clock.clone(),
                decisions: self.decisions.clone(),
                recorder: self.recorder.clone(),
                results_recorded: true,
            };
            let ctx = ClientContext {
                token: client_token(&spec.name),
                spec: spec.clone(),
                replicas: replicas.clone(),
                known_jobs: known_jobs.clone(),
                seed: idem_sim::net::child_seed(seed, &format!("client/{}", spec.name)),
                port,
            };
            clients.spawn(run_client(ctx));
        }
        clients
    }

    /// Runs the plan until the system is quiet or the deadline. The
    /// clients still running then are stopped.
    async fn drive(&mut self, scenario: &Scenario, seed: u64) -> Result<Stop, RealError> {
        let clients = self.start_clients(scenario, seed);
        let mut backend = RealBackend {
            world: self,
            scenario,
            clients,
        };
        let stop = drive(&mut backend, scenario).await;
        backend.clients.abort_all();
        while backend.clients.join_next().await.is_some() {}
        stop
    }

    /// Whether the system has settled: for idem's processes, every job and
    /// attempt terminal in the store and the store quiet; for a black-box
    /// target (its store unread), no provider execution running and
    /// nothing observed for [`QUIET_MS_MIN`] (its clients, which waited for
    /// their jobs' outcomes, are done).
    async fn settled(&self, scenario: &Scenario) -> bool {
        if self.target {
            let quiet_us = i64::try_from(QUIET_MS_MIN * 1_000).unwrap_or(i64::MAX);
            let running = self
                .providers
                .ledgers()
                .values()
                .flatten()
                .any(|e| e.outcome == idem_core::provider::server::ExecutionOutcome::Running);
            return !running
                && self
                    .recorder
                    .latest(Source::Harness)
                    .is_none_or(|t_us| now_us().saturating_sub(t_us) >= quiet_us);
        }
        self.store_quiet(scenario) && self.store.settled().await
    }

    /// Whether the store has committed nothing for a while: every job may
    /// be settled while a process still has something to write about it (a
    /// worker re-checking a completion whose acknowledgement was lost, a
    /// reconciler's note). The while is two of the slowest poller's
    /// intervals, at least [`QUIET_MS_MIN`].
    fn store_quiet(&self, scenario: &Scenario) -> bool {
        let t = &scenario.topology;
        let quiet_ms = (2 * t
            .worker
            .poll_interval_ms
            .max(t.reconciler_config.poll_interval_ms))
        .max(QUIET_MS_MIN);
        let quiet_us = i64::try_from(quiet_ms * 1_000).unwrap_or(i64::MAX);
        self.recorder
            .latest(Source::Store)
            .is_none_or(|t_us| now_us().saturating_sub(t_us) >= quiet_us)
    }

    /// Each engine process's journal, into the trace (as the simulator's
    /// store host records these outcomes: host `store`, the caller named).
    fn read_journals(&self, dir: &Path) -> Result<(), RealError> {
        for host in &self.hosts {
            let Ok(text) = std::fs::read_to_string(journal_path(dir, host)) else {
                continue;
            };
            for line in text
                .lines()
                .filter(|l| !l.trim().is_empty())
                .take(JOURNAL_LINES_MAX)
            {
                let line: JournalLine = serde_json::from_str(line)
                    .map_err(|e| RealError::Run(format!("{host}'s journal: {e}: {line}")))?;
                let body = match line.entry {
                    idem_core::serve_bench::JournalEntry::JobReplayed {
                        job_id,
                        offered_fingerprint,
                    } => TraceBody::JobReplayed {
                        job_id,
                        offered_fingerprint,
                    },
                    idem_core::serve_bench::JournalEntry::CompletionRefused {
                        job_id,
                        attempt_id,
                        state,
                    } => TraceBody::CompletionRefused {
                        job_id,
                        attempt_id,
                        state,
                    },
                };
                self.recorder.record_at(
                    Source::Journal,
                    line.t_us,
                    host::STORE,
                    Some(&line.host),
                    body,
                );
            }
        }
        Ok(())
    }
}

/// Runs `scenario` for real in a built world, and judges it.
pub async fn run_in(
    mut world: RealWorld,
    history: Option<WalReader>,
    scenario: &Scenario,
    options: &RealOptions,
    dir: &Path,
) -> Result<RealOutcome, RealError> {
    let (stop_history, stopped) = tokio::sync::watch::channel(false);
    let following = history.map(|history| tokio::spawn(world.follow(history, stopped)));
    let stop = world.drive(scenario, options.seed).await;
    let run_ms = world.clock.elapsed_ms();
    let (read_backs, observed) = world.read_back(options.system.observed()).await;
    // The engine first (it writes), then the providers (their ledgers are
    // final from here), then the store's history to its end.
    world.processes.stop_all().await;
    world.providers.stop();
    let executions = world.providers.ledgers();
    stop_history.send_replace(true);
    let followed = match following {
        Some(following) => following
            .await
            .map_err(|e| RealError::Run(format!("reading the store's history: {e}")))?,
        None => Ok(()),
    };
    let stop = stop?;
    followed.map_err(RealError::Run)?;
    world.read_journals(dir)?;
    let trace = world.recorder.finish(&world.clock);
    let dump = if observed.store_rows {
        world.store.dump().await?
    } else {
        idem_core::store::StoreDump::default()
    };
    let judged = Judged {
        trace,
        dump,
        read_backs,
        executions,
        stop,
        run_ms,
    };
    judged.outcome(world, scenario, options, observed).await
}

/// What a finished run left, to judge.
struct Judged {
    trace: idem_sim::trace::Trace,
    dump: idem_core::store::StoreDump,
    /// A black-box target's jobs, read back at the end.
    read_backs: Vec<idem_oracle::ReadBack>,
    executions: BTreeMap<String, Vec<idem_core::provider::server::Execution>>,
    stop: Stop,
    run_ms: u64,
}

impl Judged {
    /// The simulator's report of the run, `judgement` given.
    fn report(
        &self,
        judgement: idem_oracle::Judgement,
        scenario: &Scenario,
        options: &RealOptions,
    ) -> RunReport {
        RunReport {
            scenario: scenario.name.clone(),
            seed: options.seed,
            design: design_of(&options.system),
            verdict: if judgement.passed() {
                SimVerdict::Pass
            } else {
                SimVerdict::Fail
            },
            violations: judgement.violations,
            windows: judgement.windows,
            trace_hash: self.trace.hash(),
            trace_events: self.trace.events.len(),
            steps: 0,
            sim_ms: self.run_ms,
            stop: self.stop,
        }
    }

    /// Judges the run and releases the world.
    async fn outcome(
        self,
        world: RealWorld,
        scenario: &Scenario,
        options: &RealOptions,
        observed: Observed,
    ) -> Result<RealOutcome, RealError> {
        let input = idem_oracle::OracleInput {
            trace: &self.trace,
            dump: &self.dump,
            executions: &self.executions,
            facts: &world.facts,
        };
        let (judgement, invariants) = judge(input, &self.read_backs, observed);
        let report = self.report(judgement, scenario, options);
        let decisions = DecisionFile {
            scenario: scenario.name.clone(),
            seed: options.seed,
            design: report.design.name().to_owned(),
            decisions: world.decisions.log(),
        };
        let forced = world
            .forcing
            .as_ref()
            .map(super::force::Forcing::forced)
            .unwrap_or_default();
        let RealWorld {
            store,
            facts,
            hosts,
            ..
        } = world;
        store.close(options.keep.as_deref()).await?;
        Ok(RealOutcome {
            decisions,
            report,
            invariants,
            observed,
            trace: self.trace,
            dump: self.dump,
            executions: self.executions,
            facts,
            hosts,
            forced,
        })
    }
}
