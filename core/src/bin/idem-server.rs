//! `idem-server`: the product. The HTTP API, the worker and the reconciler
//! over PostgreSQL, and the migrations; nothing of the simulation bench is
//! compiled in (see the `bench` feature of idem-core).
//!
//! Exit codes: 0 on a clean shutdown (or, for `certify`, a certified
//! provider), 1 for a provider that failed certification, 2 on a usage or
//! configuration error (bad flags or contract, an unreachable database or
//! provider, an address that cannot be bound, a certification that learnt
//! nothing).

use std::process::ExitCode;
use std::sync::LazyLock;

use clap::{Parser, Subcommand};
use idem_core::cli::{self, CertificatesArgs, CertifyArgs, MigrateArgs, ServeArgs};

/// `--version`: the version, the commit and whether the tree was dirty.
static VERSION: LazyLock<String> = LazyLock::new(|| idem_model::build_stamp!().to_string());

#[derive(Debug, Parser)]
#[command(
    name = "idem-server",
    version = VERSION.as_str(),
    about = "idem: one click, one job. The HTTP API, worker and reconciler.",
    after_help = "Exit codes:\n  0  clean shutdown; certify: certified\n  1  certify: not certified\n  2  usage or configuration error"
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
    /// Certify a provider against the operating contract (exit 0 certified,
    /// 1 not certified, 2 bad flags, contract, unreachable provider or an
    /// inconclusive run).
    Certify(CertifyArgs),
    /// List, show or revoke the stored certificates.
    Certificates(CertificatesArgs),
}

fn main() -> ExitCode {
    let outcome = match Cli::parse().command {
        Command::Serve(args) => cli::serve(args).map(|()| 0),
        Command::Migrate(args) => cli::migrate(args).map(|()| 0),
        Command::Certify(args) => cli::certify(args).map(|outcome| outcome.exit_code()),
        Command::Certificates(args) => cli::certificates(args).map(|()| 0),
    };
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("idem-server: {e}");
            ExitCode::from(2)
        }
    }
}
