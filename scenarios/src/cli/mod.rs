//! The `idem` command line (clap).
//!
//! Exit codes, for people and CI alike:
//! - 0: pass (or the command did what it was asked);
//! - 1: an invariant was violated, a determinism check diverged, a run
//!   could not finish, or a sweep missed an expected race window;
//!   (`mutants`) the correct design failed a run or a mutant was not caught;
//! - 2: usage or input error (bad flags, malformed scenario file, unknown
//!   scenario, unreachable database).

pub mod bench;
mod common;
mod determinism;
pub mod explore;
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

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::load::LoadError;

/// The documented exit codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    Pass = 0,
    Violation = 1,
    Usage = 2,
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> Self {
        ExitCode::from(exit as u8)
    }
}

/// Errors that end a command with exit code 2, with the message to print.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// An unknown or malformed scenario: printed as `path:line:col: message`
    /// lines, with nothing in front, so that editors and CI can jump to them.
    #[error("{0}")]
    Scenario(#[from] LoadError),
    /// `serve` and `migrate`: the production commands' own errors.
    #[error("{0}")]
    Server(#[from] idem_core::cli::CliError),
}

const EXIT_CODES: &str = "\
Exit codes:
  0  pass: every invariant held (and, for a sweep, every expected window was reached)
  1  a violated invariant, a determinism divergence, a run that could not finish,
     or a sweep that missed an expected race window
     (mutants: the correct design failed a run, or a mutant was not caught)
  2  usage or input error: bad flags, an unknown scenario, a malformed scenario file
     (reported as path:line:col: message), an unreachable database";

/// `--version`: the version, the commit and whether the tree was dirty.
static VERSION: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| common::build().to_string());

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
    /// Search beyond the catalogue: a whole generated world per seed, a
    /// swarm of faults, failures shrunk and kept in a corpus.
    #[command(after_help = EXIT_CODES)]
    Fuzz(fuzz::FuzzArgs),
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
        Command::Run(args) => run::run(args),
        Command::Sweep(args) => sweep::sweep(args),
        Command::CheckDeterminism(args) => determinism::check_determinism(args),
        Command::Mutants(args) => mutants::mutants(args),
        Command::Explore(args) => explore::explore(args),
        Command::Report(args) => report::report(args),
        Command::Regress(args) => regress::regress(args),
        Command::Fuzz(args) => fuzz::fuzz(args),
        Command::Merge(args) => merge::merge(args),
        Command::Bench(args) => bench::bench(args),
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
        Err(CliError::Scenario(LoadError::Invalid(errors))) => {
            eprintln!("{errors}");
            Exit::Usage.into()
        }
        Err(e) => {
            eprintln!("idem: {e}");
            Exit::Usage.into()
        }
    }
}
