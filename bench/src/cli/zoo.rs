//! `idem zoo`: how soon the blind and the guided search find each zoo bug
//! ([`crate::fuzz::zoo`]), over disjoint seed ranges.

use std::num::NonZeroUsize;
use std::path::PathBuf;

use clap::Args;

use idem_core::design::Design;

use super::fuzz::Budget;
use super::{CliError, Exit};
use crate::fuzz::guided::{Lever, Levers};
use crate::fuzz::zoo::{Mode, RANGE_STRIDE, RANGES_START, ZooPlan, measure};

#[derive(Debug, Args)]
pub struct ZooArgs {
    /// Zoo designs to measure, comma-separated (default: the whole zoo).
    #[arg(long, value_delimiter = ',')]
    pub designs: Vec<Design>,
    /// How many disjoint seed ranges, each a campaign per mode.
    #[arg(long, default_value_t = 5)]
    pub ranges: u64,
    /// The first range's first seed; the others follow 10^9 apart.
    #[arg(long, default_value_t = RANGES_START)]
    pub start: u64,
    /// `blind`, `guided` or both, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "blind,guided")]
    pub modes: Vec<String>,
    /// The guided search's levers, comma-separated (default: all of break,
    /// retime, tune, splice).
    #[arg(long, value_delimiter = ',')]
    pub levers: Vec<String>,
    /// Each campaign's cap in runs.
    #[arg(long, default_value_t = 20_000)]
    pub runs_max: u64,
    /// Each campaign's cap in CPU time: `900s`, `30m`.
    #[arg(long, default_value = "30m")]
    pub cpu_max: Budget,
    /// Worker threads (default: the number of cores).
    #[arg(long)]
    pub jobs: Option<NonZeroUsize>,
    /// Write the cells, rows and medians as JSON here.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write the table as Markdown here.
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
}

pub fn zoo_command(args: ZooArgs) -> Result<Exit, CliError> {
    let designs = if args.designs.is_empty() {
        Design::ZOO.to_vec()
    } else {
        args.designs.clone()
    };
    let plan = ZooPlan {
        designs,
        starts: (0..args.ranges)
            .map(|r| args.start.saturating_add(r.saturating_mul(RANGE_STRIDE)))
            .collect(),
        modes: args
            .modes
            .iter()
            .map(|m| mode(m))
            .collect::<Result<_, _>>()?,
        levers: levers(&args.levers)?,
        runs_max: args.runs_max,
        cpu_max: args.cpu_max.0,
        jobs: args.jobs,
    };
    let report = measure(&plan, &mut |cell| {
        eprintln!(
            "{} {} from {}: {} after {} runs, {:.1} CPU-s{}",
            cell.design,
            cell.mode.name(),
            cell.range_start,
            if cell.found { "found" } else { "not found" },
            cell.runs,
            cell.cpu_s,
            cell.lever
                .as_deref()
                .map(|l| format!(" ({l})"))
                .unwrap_or_default()
        );
    });
    let markdown = report.to_markdown();
    if let Some(path) = &args.json {
        let json =
            serde_json::to_string_pretty(&report).map_err(|e| CliError::Render(e.to_string()))?;
        crate::output::write(path, json + "\n")?;
    }
    if let Some(path) = &args.markdown {
        crate::output::write(path, markdown.clone())?;
    }
    print!("{markdown}");
    Ok(Exit::Pass)
}

fn mode(name: &str) -> Result<Mode, CliError> {
    match name {
        "blind" => Ok(Mode::Blind),
        "guided" => Ok(Mode::Guided),
        other => Err(CliError::Usage(format!(
            "unknown mode {other:?}; known: blind, guided"
        ))),
    }
}

fn levers(names: &[String]) -> Result<Levers, CliError> {
    if names.is_empty() {
        return Ok(Levers::default());
    }
    names
        .iter()
        .map(|name| {
            Lever::ALL
                .iter()
                .copied()
                .find(|l| l.name() == name && *l != Lever::Fresh)
                .ok_or_else(|| {
                    CliError::Usage(format!(
                        "unknown lever {name:?}; known: break, retime, tune, splice"
                    ))
                })
        })
        .collect::<Result<_, _>>()
        .map(Levers)
}
