//! `idem regress`: replays every saved schedule (the property test's
//! `scenarios/regressions/`, a fuzz corpus, any folder of scenario files
//! named `…-seed-N.toml` or carrying a `[kept]` table) under the correct
//! design. A regression that fails again fails CI.
//!
//! A saved file is worth keeping only while it still takes the path it was
//! saved for: a change of code can move its seed off the race it found,
//! and the file then passes for nothing. So each file's `[kept]` table
//! records that path (the race windows the correct design reached under
//! the seed, and a fingerprint of the kinds of its events), and a file
//! whose path changed is reported as DRIFT instead of passing silently; a
//! file kept for a naive design must still fail under it. `--update`
//! records the paths anew, once a person has looked.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::Args;

use idem_core::design::Design;
use idem_sim::run::Verdict;

use super::common::emit;
use super::{CliError, Exit};
use crate::output;
use crate::record::{execute, reproduce, window_name};
use idem_scenarios::emit::to_file_kept;
use idem_scenarios::kept::{Kept, RunPath};
use idem_scenarios::load::load;

/// The most files one folder may hold for `regress`.
pub const FILES_MAX: usize = 10_000;

#[derive(Debug, Args)]
pub struct RegressArgs {
    /// Folders of saved schedules.
    #[arg(default_value = "scenarios/regressions")]
    pub dirs: Vec<PathBuf>,
    /// Record each passing file's path anew (rewriting its `[kept]`
    /// table), after a person has judged the drift.
    #[arg(long)]
    pub update: bool,
}

/// The seed a regression file's name records.
pub fn seed_of(file_name: &str) -> Option<u64> {
    file_name
        .strip_suffix(".toml")?
        .rsplit_once("-seed-")?
        .1
        .parse()
        .ok()
}

/// How one file did.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Status {
    Ok,
    /// Passes, but records no path to hold it to.
    Unrecorded,
    /// Passes, but took another path than the one it was kept for (or no
    /// longer fails under the design it was kept for).
    Drift(Vec<String>),
    /// Its path was recorded anew (`--update`).
    Updated,
    Fail,
}

impl Status {
    /// `Drift` if there is any, else `passed`.
    fn drift_or(drift: Vec<String>, passed: Status) -> Status {
        if drift.is_empty() {
            passed
        } else {
            Status::Drift(drift)
        }
    }
}

fn files_in(dir: &Path) -> Result<Vec<PathBuf>, CliError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(CliError::Usage(format!(
                "{}: cannot read: {e}",
                dir.display()
            )));
        }
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .take(FILES_MAX + 1)
        .collect();
    if files.len() > FILES_MAX {
        return Err(CliError::Usage(format!(
            "{}: more than {FILES_MAX} files",
            dir.display()
        )));
    }
    files.sort();
    Ok(files)
}

pub fn regress(args: RegressArgs) -> Result<Exit, CliError> {
    let mut out = String::new();
    let (mut total, mut failed, mut drifted) = (0usize, 0usize, 0usize);
    for dir in &args.dirs {
        let files = files_in(dir)?;
        if files.is_empty() {
            let _ = writeln!(out, "no regressions in {}", dir.display());
        }
        for path in &files {
            total += 1;
            let (status, command) = check(path, args.update)?;
            let (label, detail) = match &status {
                Status::Ok => ("ok    ", String::new()),
                Status::Unrecorded => (
                    "ok    ",
                    " (no path recorded; `idem regress --update` records it)".to_owned(),
                ),
                Status::Updated => ("update", " (path recorded anew)".to_owned()),
                Status::Drift(why) => {
                    drifted += 1;
                    (
                        "DRIFT ",
                        format!("\n           {}", why.join("\n           ")),
                    )
                }
                Status::Fail => {
                    failed += 1;
                    ("FAIL  ", String::new())
                }
            };
            let _ = writeln!(out, "  {label} {command}{detail}");
        }
    }
    let passed = failed == 0 && drifted == 0;
    let _ = writeln!(
        out,
        "{}: {total} regression(s), {failed} failed, {drifted} drifted off the path they were kept for",
        if passed { "PASS" } else { "FAIL" },
    );
    if drifted > 0 {
        let _ = writeln!(
            out,
            "a drifted file no longer tests the race it was kept for: aim it again (or find a seed that reaches it), or accept the new path with `idem regress --update`"
        );
    }
    emit(&out);
    Ok(if passed { Exit::Pass } else { Exit::Violation })
}

/// Replays one file; with `update`, records its path anew when it passes.
fn check(path: &Path, update: bool) -> Result<(Status, String), CliError> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let target = path.display().to_string();
    let loaded = load(&target)?;
    let seed = match (&loaded.kept, seed_of(name)) {
        (Some(kept), _) => kept.seed,
        (None, Some(seed)) => seed,
        (None, None) => {
            return Err(CliError::Usage(format!(
                "{target}: no seed: the file has no [kept] table and its name does not end in -seed-N.toml"
            )));
        }
    };
    let command = reproduce(&target, seed, Design::Correct);
    let outcome = match execute(&loaded.scenario, seed, Design::Correct) {
        Ok(outcome) if outcome.report.verdict == Verdict::Pass => outcome,
        _ => return Ok((Status::Fail, command)),
    };
    let now = RunPath::of(&outcome);
    let kept_design = loaded.kept.as_ref().map_or(Design::Correct, |k| k.design);
    if update {
        let kept = Kept {
            seed,
            design: kept_design,
            path: Some(now),
        };
        rewrite(path, &loaded.scenario, &kept)?;
        return Ok((Status::Updated, command));
    }
    let mut drift = Vec::new();
    if kept_design != Design::Correct
        && matches!(
            execute(&loaded.scenario, seed, kept_design),
            Ok(run) if run.report.verdict == Verdict::Pass
        )
    {
        drift.push(format!(
            "no longer fails under --design {kept_design}, the design it was kept to catch"
        ));
    }
    let Some(recorded) = loaded.kept.as_ref().and_then(|k| k.path.as_ref()) else {
        return Ok((Status::drift_or(drift, Status::Unrecorded), command));
    };
    drift.extend(path_drift(recorded, &now));
    Ok((Status::drift_or(drift, Status::Ok), command))
}

/// How the path `now` differs from the path `recorded`.
fn path_drift(recorded: &RunPath, now: &RunPath) -> Vec<String> {
    let names = |ws: &mut dyn Iterator<Item = &idem_sim::scenario::Window>| {
        ws.map(|w| window_name(*w)).collect::<Vec<_>>().join(", ")
    };
    let lost = names(&mut recorded.windows.iter().filter(|w| !now.windows.contains(w)));
    let gained = names(&mut now.windows.iter().filter(|w| !recorded.windows.contains(w)));
    let mut drift = Vec::new();
    if !lost.is_empty() {
        drift.push(format!("race windows no longer reached: {lost}"));
    }
    if !gained.is_empty() {
        drift.push(format!(
            "race windows reached now and not when kept: {gained}"
        ));
    }
    if now.event_kinds != recorded.event_kinds {
        drift.push(format!(
            "event path {} is now {}",
            recorded.event_kinds, now.event_kinds
        ));
    }
    drift
}

/// Writes the file again in the emitted form, its header comment kept and
/// its `[kept]` table replaced.
fn rewrite(
    path: &Path,
    scenario: &idem_sim::scenario::Scenario,
    kept: &Kept,
) -> Result<(), CliError> {
    let text = output::read(path)?;
    let comment: Vec<&str> = text
        .lines()
        .take_while(|l| l.starts_with('#'))
        .map(|l| {
            l.strip_prefix("# ")
                .or_else(|| l.strip_prefix('#'))
                .unwrap_or(l)
        })
        .collect();
    let body = to_file_kept(scenario, &comment.join("\n"), Some(kept))
        .map_err(|e| CliError::Render(format!("{}: cannot write: {e}", path.display())))?;
    output::write(path, body)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::seed_of;

    #[test]
    fn the_seed_is_read_from_the_file_name() {
        assert_eq!(seed_of("last-writer-wins-1a2b3c4d-seed-42.toml"), Some(42));
        assert_eq!(seed_of("x-seed-.toml"), None);
        assert_eq!(seed_of("x.toml"), None);
    }
}
