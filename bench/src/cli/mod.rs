//! The `idem` command line (clap).
//!
//! Arguments in, text out: each command file parses its flags, calls the
//! library module that does the work, and prints what it returns. Errors
//! meet at one enum, [`CliError`], whose [`CliError::exit`] is the one
//! place an error becomes an exit code.
//!
//! Exit codes, for people and CI alike:
//! - 0: pass (or the command did what it was asked);
//! - 1: an invariant was violated, a determinism check diverged, a run
//!   could not finish, or a sweep missed an expected race window;
//!   (`mutants`) the correct design failed a run or a mutant was not caught;
//! - 2: usage or input error (bad flags, malformed scenario file, unknown
//!   scenario, an input file that cannot be read, unreachable database);
//! - 3: an output could not be written (a summary, a report, a trace, a
//!   corpus or regression file, the bench's files) or rendered: the
//!   machine's trouble (a full disk, a missing directory, no permission),
//!   not the user's input, and the run's verdict is unknown to CI.

mod bench;
mod common;
mod determinism;
mod explain;
mod explore;
mod fuzz;
mod list;
mod merge;
mod mutants;
mod real;
mod regress;
mod report;
mod run;
mod serve;
mod sweep;
mod zoo;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::output::IoError;
use idem_scenarios::load::LoadError;

/// The documented exit codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    Pass = 0,
    Violation = 1,
    Usage = 2,
    Output = 3,
}

impl Exit {
    /// Pass, or a violation.
    pub fn passed(passed: bool) -> Self {
        if passed { Exit::Pass } else { Exit::Violation }
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> Self {
        ExitCode::from(exit as u8)
    }
}

/// Why a command ended without a verdict, with the message to print.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Bad flags or values, or an input file that cannot be read or used.
    #[error("{0}")]
    Usage(String),
    /// An unknown or malformed scenario: printed as `path:line:col: message`
    /// lines, with nothing in front, so that editors and CI can jump to them.
    #[error("{0}")]
    Scenario(#[from] LoadError),
    /// An output that could not be written (or a file the command keeps
    /// that could not be read back).
    #[error("{0}")]
    Io(#[from] IoError),
    /// An output that could not be rendered (a plot, JUnit XML, a world
    /// the emitter cannot write as a scenario file).
    #[error("{0}")]
    Render(String),
    /// `serve`, `migrate` and `certify`: the production commands' own
    /// errors (bad flags or configuration, an unreachable database or
    /// provider).
    #[error("{0}")]
    Server(#[from] idem_core::cli::ServerCliError),
}

impl CliError {
    /// The exit code of each error: the one place they are decided.
    pub fn exit(&self) -> Exit {
        match self {
            CliError::Usage(_) | CliError::Scenario(_) | CliError::Server(_) => Exit::Usage,
            CliError::Io(_) | CliError::Render(_) => Exit::Output,
        }
    }
}

const EXIT_CODES: &str = "\
Exit codes:
  0  pass: every invariant held (and, for a sweep, every expected window was reached)
  1  a violated invariant, a determinism divergence, a run that could not finish,
     or a sweep that missed an expected race window
     (mutants: the correct design failed a run, or a mutant was not caught)
  2  usage or input error: bad flags, an unknown scenario, a malformed scenario file
     (reported as path:line:col: message), an input file that cannot be read,
     an unreachable database
  3  an output could not be written or rendered (--json, --junit, --trace, a report,
     a corpus or regression file): the machine's trouble, not the input's";

/// `--version`: the version, the commit and whether the tree was dirty.
static VERSION: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| crate::record::build().to_string());

/// The command line as typed, for provenance blocks.
fn command_line() -> String {
    std::env::args().collect::<Vec<_>>().join(" ")
}

#[derive(Debug, Parser)]
#[command(
    name = "idem",
    version = VERSION.as_str(),
    about = "One click, one job: the idem engine and its simulation bench",
    after_help = EXIT_CODES
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List the catalogue's scenarios and what each one shows.
    #[command(after_help = EXIT_CODES)]
    List(list::ListArgs),
    /// Print a catalogue scenario's file, to read or to copy and change.
    #[command(after_help = EXIT_CODES)]
    Show(list::ShowArgs),
    /// Run one scenario under one seed and judge it.
    #[command(after_help = EXIT_CODES)]
    Run(run::RunArgs),
    /// Run many seeds of one or more scenarios in parallel, for CI.
    #[command(after_help = EXIT_CODES)]
    Sweep(sweep::SweepArgs),
    /// Run one seed twice and check that the traces are identical.
    #[command(after_help = EXIT_CODES)]
    CheckDeterminism(determinism::CheckDeterminismArgs),
    /// The correct design against every scenario and seed, and each naive
    /// design searched seed by seed until the bench catches it.
    #[command(after_help = EXIT_CODES)]
    Mutants(mutants::MutantsArgs),
    /// The property test: generate schedules, run them, shrink a failure to
    /// a minimal one and save it under scenarios/regressions/.
    #[command(after_help = EXIT_CODES)]
    Explore(explore::ExploreArgs),
    /// A design review's report: the suite (every scenario and seed, the
    /// correct design and every naive one) as self-contained HTML pages,
    /// summary.md, junit.xml and suite.json.
    #[command(after_help = EXIT_CODES)]
    Report(report::ReportArgs),
    /// Replay every saved regression under the correct design.
    #[command(after_help = EXIT_CODES)]
    Regress(regress::RegressArgs),
    /// Why a run failed: the decision after which the failure became
    /// likely and the decisions it needs; with --fuzz, which features of a
    /// fuzz world make a design fail more often (triggers) or less often
    /// (suppressors). Wilson intervals throughout; exit 0 whenever it ran.
    #[command(after_help = EXIT_CODES)]
    Explain(explain::ExplainArgs),
    /// Search beyond the catalogue: a whole generated world per seed, a
    /// swarm of faults, failures shrunk and kept in a corpus.
    #[command(after_help = EXIT_CODES)]
    Fuzz(fuzz::FuzzArgs),
    /// How soon the blind and the guided search find each zoo bug (a bug
    /// the search once found in idem, re-planted), over disjoint seed
    /// ranges: runs and CPU-seconds to first detection.
    #[command(after_help = EXIT_CODES)]
    Zoo(zoo::ZooArgs),
    /// Merge the JSON summaries of the shards of one sweep or fuzz run
    /// into the summary, verdict and exit code of the unsharded run.
    #[command(after_help = EXIT_CODES)]
    Merge(merge::MergeArgs),
    /// Measure what a seed, a sweep and a PostgreSQL create cost, against
    /// bare turmoil and pgbench measured in the same run.
    #[command(after_help = EXIT_CODES)]
    Bench(bench::BenchArgs),
    /// Apply the database migrations (as `idem-server migrate` does).
    Migrate(idem_core::cli::MigrateArgs),
    /// Run the HTTP API, worker and reconciler (as `idem-server serve` does).
    Serve(idem_core::cli::ServeArgs),
    /// Run one scenario for real: idem's processes, a throwaway PostgreSQL,
    /// real TCP and real faults, judged by the same oracle.
    #[command(after_help = EXIT_CODES)]
    Real(real::RealArgs),
    /// Run the provider server (an OpenAI-compatible test provider).
    ProviderServer(serve::ProviderServerArgs),
    /// Certify a provider against the operating contract (as
    /// `idem-server certify` does): exit 0 certified, 1 not certified,
    /// 2 bad flags or contract, or an unreachable provider or database.
    Certify(idem_core::cli::CertifyArgs),
}

/// Parses the command line, runs the command, and maps the outcome to the
/// documented exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::List(args) => list::list(args),
        Command::Show(args) => list::show(args),
        Command::Run(args) => run::run_command(args),
        Command::Sweep(args) => sweep::sweep_command(args),
        Command::CheckDeterminism(args) => determinism::check_determinism(args),
        Command::Mutants(args) => mutants::mutants_command(args),
        Command::Explore(args) => explore::explore_command(args),
        Command::Report(args) => report::report_command(args),
        Command::Regress(args) => regress::regress(args),
        Command::Explain(args) => explain::explain_command(args),
        Command::Fuzz(args) => fuzz::fuzz_command(args),
        Command::Zoo(args) => zoo::zoo_command(args),
        Command::Merge(args) => merge::merge(args),
        Command::Bench(args) => bench::bench_command(args),
        Command::Migrate(args) => idem_core::cli::migrate(args)
            .map(|()| Exit::Pass)
            .map_err(CliError::from),
        Command::Serve(args) => idem_core::cli::serve(args)
            .map(|()| Exit::Pass)
            .map_err(CliError::from),
        Command::Real(args) => real::real(args),
        Command::ProviderServer(args) => serve::provider_server(args),
        Command::Certify(args) => idem_core::cli::certify(args)
            .map(|outcome| match outcome {
                idem_core::cli::CertifyOutcome::Certified => Exit::Pass,
                idem_core::cli::CertifyOutcome::NotCertified => Exit::Violation,
            })
            .map_err(CliError::from),
    };
    match outcome {
        Ok(exit) => exit.into(),
        Err(error) => {
            match &error {
                CliError::Scenario(LoadError::Invalid(errors)) => eprintln!("{errors}"),
                other => eprintln!("idem: {other}"),
            }
            error.exit().into()
        }
    }
}
