//! `idem check-determinism`: run one seed twice and compare the traces.

use std::fmt::Write as _;
use std::panic::{AssertUnwindSafe, catch_unwind};

use clap::Args;

use idem_core::design::Design;
use idem_sim::determinism::{DeterminismReport, Divergence, check};

use super::common::emit;
use super::{CliError, Exit};
use crate::record::build;
use idem_scenarios::load::load;

#[derive(Debug, Args)]
pub struct CheckDeterminismArgs {
    /// A catalogue name or a scenario file.
    pub scenario: String,
    #[arg(long)]
    pub seed: u64,
    /// The design under test (see `idem run --help`).
    #[arg(long, default_value = "correct")]
    pub design: Design,
}

pub fn check_determinism(args: CheckDeterminismArgs) -> Result<Exit, CliError> {
    let loaded = load(&args.scenario)?;
    let design_flag = if args.design == Design::Correct {
        String::new()
    } else {
        format!(" --design {}", args.design)
    };
    let head = format!(
        "{} seed {} design {}",
        loaded.scenario.name, args.seed, args.design
    );
    let checked = catch_unwind(AssertUnwindSafe(|| {
        check(&loaded.scenario, args.seed, args.design)
    }));
    let report = match checked {
        Ok(Ok(report)) => report,
        Ok(Err(error)) => {
            emit(&format!("{head}: the simulation failed: {error}\n"));
            return Ok(Exit::Violation);
        }
        Err(_) => {
            emit(&format!("{head}: the simulation panicked\n"));
            return Ok(Exit::Violation);
        }
    };
    let (out, exit) = match &report.divergence {
        None => (
            format!(
                "{head}: deterministic, two runs gave the same {} trace events (hash {})\n",
                report.events, report.first_hash
            ),
            Exit::Pass,
        ),
        Some(d) => {
            let reproduce = format!(
                "idem check-determinism {} --seed {}{design_flag}",
                loaded.target, args.seed
            );
            (diverged(&head, &report, d, &reproduce), Exit::Violation)
        }
    };
    emit(&out);
    Ok(exit)
}

/// What to say of two runs that differ at `d`.
fn diverged(head: &str, report: &DeterminismReport, d: &Divergence, reproduce: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{head}: NOT deterministic, the runs differ from trace event {}",
        d.index
    );
    let ended = "(the trace had ended)";
    let _ = writeln!(out, "  first run:  {}", d.first.as_deref().unwrap_or(ended));
    let _ = writeln!(
        out,
        "  second run: {}",
        d.second.as_deref().unwrap_or(ended)
    );
    let _ = writeln!(
        out,
        "  hashes: {} / {}",
        report.first_hash, report.second_hash
    );
    let _ = writeln!(out, "reproduce with: {reproduce} (build: idem {})", build());
    out
}
