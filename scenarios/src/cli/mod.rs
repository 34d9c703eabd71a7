//! The `idem` command line (clap).
//!
//! Exit codes, for people and CI alike:
//! - 0: pass (or the command did what it was asked);
//! - 1: an invariant was violated (or a determinism check diverged);
//! - 2: usage or input error (bad flags, malformed scenario file, unreachable database).

mod serve;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
}

#[derive(Debug, Parser)]
#[command(name = "idem", version, about = "One click, one job: the idem engine and its simulation bench")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Apply the database migrations.
    Migrate(serve::MigrateArgs),
    /// Run the HTTP API, worker and reconciler.
    Serve(serve::ServeArgs),
    /// Run the provider server (an OpenAI-compatible test provider).
    ProviderServer(serve::ProviderServerArgs),
}

/// Parses the command line, runs the command, and maps the outcome to the
/// documented exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Migrate(args) => serve::migrate(args),
        Command::Serve(args) => serve::serve(args),
        Command::ProviderServer(args) => serve::provider_server(args),
    };
    match outcome {
        Ok(exit) => exit.into(),
        Err(e) => {
            eprintln!("idem: {e}");
            Exit::Usage.into()
        }
    }
}
