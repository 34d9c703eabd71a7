//! idem-real: the bench's real world. Real mode runs a scenario file,
//! unchanged, against real processes, a real PostgreSQL and real TCP, with
//! its faults made real without root, as the second backend of the
//! simulator's driver, and judges it with the simulator's own oracle
//! (`idem real`); [`pgbench`] measures idem's PostgreSQL create path
//! against PostgreSQL's own pgbench (`idem bench`'s PostgreSQL section).
//!
//! A real run, in order ([`run`]):
//! 1. [`store`]: a throwaway PostgreSQL cluster (or `--database-url`),
//!    migrated for the design under test, the providers' certificates on
//!    file, a logical decoding slot open ([`wal`]).
//! 2. [`providers`]: the scenario's providers as real HTTP servers, with
//!    their behaviours and ledgers.
//! 3. [`proxy`]: a link for every pair of hosts that talk, each a TCP
//!    proxy inside the harness on a port of [`ports`]; the store's links
//!    read the PostgreSQL wire protocol ([`pgwire`]) to make store faults
//!    real, and hold an answer back at the [`gate`] while a trigger fault
//!    waits for the event it carries.
//! 4. [`procs`]: the system under test's processes: for idem, each API
//!    replica, worker and the reconciler an `idem serve` process of its
//!    own, with its role flags and the bench-only `--design`,
//!    `--service-config`, `--journal` and `--controlled`
//!    (`idem_core::serve_bench`).
//! 5. The users: the simulator's script (`idem_sim::client`), as real HTTP
//!    clients on the real clock; the seed draws their jitter and their
//!    replicas.
//! 6. [`run`](mod@run): the simulator's driver (`idem_sim::driver`) runs
//!    the fault plan, each fault made real by [`faults`], until the system
//!    is quiet or `settle_ms`.
//! 7. The trace ([`recorder`]) is assembled from what real mode observed:
//!    the clients' requests and answers, the store proxies' injections,
//!    the faults, kills and restarts, the providers' ledgers, the store's
//!    committed history ([`history`]), the processes' journals of what
//!    writes nothing, and the store's final rows (for a black-box target,
//!    whose rows are its own, its jobs read back through its API instead:
//!    [`read_back`]); the simulator's oracle judges it ([`judge`]), every
//!    invariant held, violated or not judged with a reason.
//!
//! Nothing is left behind: the processes exit when the harness's pipe to
//! them closes ([`procs`]), and the cluster is removed by a watchdog once
//! the harness is gone (`idem_core::testing::pg`), even after SIGKILL.
//!
//! For what comes next (comparing a real run with a simulated one, and
//! black-box targets): [`RealOutcome::report`] is the simulator's
//! `RunReport` of the same scenario and seed, and [`System`] is where a
//! system under test other than idem's processes goes.

pub mod answers;
pub mod barrier;
pub mod clock;
pub mod compare;
pub mod faults;
pub mod force;
pub mod gate;
pub mod history;
pub mod judge;
pub mod pgbench;
pub mod pgwire;
pub mod ports;
pub mod procs;
pub mod providers;
pub mod proxy;
pub mod read_back;
pub mod record;
pub mod recorder;
mod run;
pub mod store;
pub mod target;
pub mod wal;
pub mod world;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use idem_core::design::Design;
use idem_core::provider::server::Execution;
use idem_core::store::StoreDump;
use idem_oracle::WorldFacts;
use idem_sim::decisions::DecisionFile;
use idem_sim::run::RunReport;
use idem_sim::scenario::Scenario;
use idem_sim::trace::Trace;

pub use judge::{InvariantVerdict, Judged, Observed};
pub use store::Database;

/// The system under test.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum System {
    /// idem's own processes: `program serve ...` per engine host
    /// (`program` is the `idem` binary: it has the bench-only flags).
    Idem { program: PathBuf, design: Design },
    /// Anyone's service, speaking the contract of `docs/TARGET.md`: one
    /// instance of `command` (a shell command; `{port}` and `{config}` are
    /// replaced) per API replica ([`target`]).
    Target { command: String },
}

impl System {
    /// What the outputs call it.
    pub fn describe(&self) -> String {
        match self {
            System::Idem { .. } => "idem processes".to_owned(),
            System::Target { command } => format!("black-box target `{command}`"),
        }
    }

    /// What real mode observes of it, besides what it always sees.
    pub fn observed(&self) -> Observed {
        match self {
            System::Idem { .. } => Observed::ALL,
            System::Target { .. } => Observed::OUTSIDE,
        }
    }
}

/// How to run.
#[derive(Clone, Debug)]
pub struct RealOptions {
    pub seed: u64,
    pub system: System,
    pub database: Database,
    /// Keep the run's files here (each process's log and journal, the
    /// service configuration, `trace.jsonl`, `decisions.json`, and the
    /// database as `database.sql`); without it they go to a temporary
    /// directory removed at the end.
    pub keep: Option<PathBuf>,
    /// Force the scenario's create race on a black-box target
    /// ([`force`]): clicks sent together reach it together, and their
    /// store work meets.
    pub force: bool,
}

/// Why a real run could not be made or finished.
#[derive(Debug, thiserror::Error)]
pub enum RealError {
    /// The scenario asks for something real mode cannot make real.
    #[error("real mode cannot run this scenario: {0}")]
    Refused(String),
    /// The world could not be built (no PostgreSQL, a process that would
    /// not start).
    #[error("{0}")]
    Start(String),
    /// Something failed during the run (a restart that did not come back,
    /// a history that could not be read).
    #[error("{0}")]
    Run(String),
}

/// A judged real run.
#[derive(Clone, Debug)]
pub struct RealOutcome {
    /// The simulator's report shape for the same scenario and seed: its
    /// `sim_ms` is the run's wall milliseconds, `steps` 0.
    pub report: RunReport,
    /// Every invariant, held, violated or not judged with the reason.
    pub invariants: Vec<InvariantVerdict>,
    /// What real mode could observe of the system (the windows it could
    /// see follow: [`judge::windows_unseen`]).
    pub observed: Observed,
    pub trace: Trace,
    pub dump: StoreDump,
    pub executions: BTreeMap<String, Vec<Execution>>,
    pub facts: WorldFacts,
    /// Every host, in the simulator's lane order.
    pub hosts: Vec<String>,
    /// What the run decided, as the simulator's decision log names it:
    /// each user's jitter and replica, each chunk's delay through its
    /// link, each provider's draws, when each fault took effect
    /// (`idem run --decisions` replays them).
    pub decisions: DecisionFile,
    /// What was forced ([`force`]), a line each; empty when nothing was.
    pub forced: Vec<String>,
}

/// Refuses `scenario` if a fault of it cannot be made real with `options`.
pub fn check(scenario: &Scenario, options: &RealOptions) -> Result<(), RealError> {
    let store_can_crash = options.database == Database::Throwaway;
    let refused = match &options.system {
        System::Idem { .. } => None,
        System::Target { .. } => target::refusal(scenario),
    };
    match refused.or_else(|| faults::refusal(scenario, store_can_crash)) {
        Some(why) => Err(RealError::Refused(why)),
        None => Ok(()),
    }
}

/// The run's directory: kept, or temporary.
enum RunDir {
    Kept(PathBuf),
    Temporary(tempfile::TempDir),
}

impl RunDir {
    fn new(keep: Option<&Path>) -> Result<Self, RealError> {
        match keep {
            Some(dir) => {
                std::fs::create_dir_all(dir)
                    .map_err(|e| RealError::Start(format!("{}: {e}", dir.display())))?;
                Ok(RunDir::Kept(dir.to_owned()))
            }
            None => tempfile::Builder::new()
                .prefix("idem-real-")
                .tempdir()
                .map(RunDir::Temporary)
                .map_err(|e| RealError::Start(format!("a run directory: {e}"))),
        }
    }

    fn path(&self) -> &Path {
        match self {
            RunDir::Kept(dir) => dir,
            RunDir::Temporary(dir) => dir.path(),
        }
    }
}

/// Runs `scenario` for real and judges it. Needs a multi-threaded tokio
/// runtime (the store's crash and restart block a worker thread).
pub async fn run(scenario: &Scenario, options: &RealOptions) -> Result<RealOutcome, RealError> {
    check(scenario, options)?;
    let dir = RunDir::new(options.keep.as_deref())?;
    let (world, history) = world::RealWorld::build(scenario, options, dir.path()).await?;
    let outcome = run::run_in(world, history, scenario, options, dir.path()).await?;
    if let RunDir::Kept(dir) = &dir {
        let decisions =
            serde_json::to_string_pretty(&outcome.decisions).expect("decisions serialize");
        for (name, text) in [
            ("trace.jsonl", outcome.trace.to_jsonl()),
            ("decisions.json", format!("{decisions}\n")),
        ] {
            let path = dir.join(name);
            std::fs::write(&path, text)
                .map_err(|e| RealError::Run(format!("{}: {e}", path.display())))?;
        }
    }
    Ok(outcome)
}
