//! `idem-server`: the product. The HTTP API, the worker and the reconciler
//! over PostgreSQL, and the migrations; nothing of the simulation bench is
//! compiled in (see the `bench` feature of idem-core).
//!
//! Exit codes: 0 on a clean shutdown, 2 on a usage or configuration error
//! (bad flags, an unreachable database, an address that cannot be bound).

use std::process::ExitCode;
use std::sync::LazyLock;

use clap::{Parser, Subcommand};
use idem_core::cli::{self, MigrateArgs, ServeArgs};

/// `--version`: the version, the commit and whether the tree was dirty.
static VERSION: LazyLock<String> = LazyLock::new(|| idem_core::build_stamp!().to_string());

#[derive(Debug, Parser)]
#[command(
    name = "idem-server",
    version = VERSION.as_str(),
    about = "idem: one click, one job. The HTTP API, worker and reconciler.",
    after_help = "Exit codes:\n  0  clean shutdown\n  2  usage or configuration error"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the HTTP API, worker and reconciler.
    Serve(ServeArgs),
    /// Apply the database migrations.
    Migrate(MigrateArgs),
}

fn main() -> ExitCode {
    let outcome = match Cli::parse().command {
        Command::Serve(args) => cli::serve(args),
        Command::Migrate(args) => cli::migrate(args),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("idem-server: {e}");
            ExitCode::from(2)
        }
    }
}
