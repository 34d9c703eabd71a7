//! `idem list` and `idem show`: what the catalogue holds.

use clap::Args;
use serde::Serialize;

use std::fmt::Write as _;

use super::common::emit;
use super::run::Format;
use super::{CliError, Exit};
use crate::record::window_name;
use idem_scenarios::catalog;
use idem_scenarios::load::{load, load_catalog};

#[derive(Debug, Args)]
pub struct ListArgs {
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// A catalogue name, or a scenario file's path.
    pub scenario: String,
}

/// One catalogue entry, as `idem list --format json` prints it.
#[derive(Debug, Serialize)]
struct Entry {
    name: String,
    description: String,
    expect_windows: Vec<String>,
}

pub fn list(args: ListArgs) -> Result<Exit, CliError> {
    let entries: Vec<Entry> = load_catalog()?
        .into_iter()
        .map(|l| Entry {
            name: l.scenario.name,
            description: l.scenario.description.trim().to_owned(),
            expect_windows: l
                .scenario
                .expect_windows
                .into_iter()
                .map(window_name)
                .collect(),
        })
        .collect();
    match args.format {
        Format::Json => emit(&format!(
            "{}\n",
            serde_json::to_string_pretty(&entries).expect("entries serialize")
        )),
        Format::Text => {
            let mut out = String::new();
            for entry in &entries {
                let _ = writeln!(out, "{}", entry.name);
                // The first paragraph: the story. The file has the rest.
                let story = entry.description.split("\n\n").next().unwrap_or_default();
                for line in wrap(story, 76) {
                    let _ = writeln!(out, "    {line}");
                }
                if !entry.expect_windows.is_empty() {
                    let _ = writeln!(out, "    windows: {}", entry.expect_windows.join(", "));
                }
                let _ = writeln!(out);
            }
            let _ = writeln!(
                out,
                "run one with: idem run <name> --seed <N>; read one with: idem show <name>"
            );
            emit(&out);
        }
    }
    Ok(Exit::Pass)
}

pub fn show(args: ShowArgs) -> Result<Exit, CliError> {
    if let Some(text) = catalog::entry(&args.scenario) {
        emit(text);
        return Ok(Exit::Pass);
    }
    // A file `idem run` and `idem real` accept is shown as it stands, once
    // it loads as they load it (the same errors, with path, line and
    // column, for one they refuse).
    load(&args.scenario)?;
    let text = std::fs::read_to_string(&args.scenario)
        .map_err(|e| CliError::Usage(format!("{}: cannot be read: {e}", args.scenario)))?;
    emit(&text);
    Ok(Exit::Pass)
}

/// Words joined into lines of at most `width` characters (a longer word
/// gets a line of its own).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}
