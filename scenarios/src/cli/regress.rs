//! `idem regress`: replays every schedule the property test ever saved
//! (`scenarios/regressions/*.toml`, each named `…-seed-N.toml`) under the
//! correct design. A regression that fails again fails CI.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::Args;

use idem_core::design::Design;
use idem_sim::run::Verdict;

use super::common::{emit, execute, reproduce};
use super::{CliError, Exit};
use crate::load::load;

#[derive(Debug, Args)]
pub struct RegressArgs {
    /// The folder of saved schedules.
    #[arg(default_value = "scenarios/regressions")]
    pub dir: PathBuf,
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

pub fn regress(args: RegressArgs) -> Result<Exit, CliError> {
    let entries = match std::fs::read_dir(&args.dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            emit(&format!(
                "no regressions: {} does not exist\n",
                args.dir.display()
            ));
            return Ok(Exit::Pass);
        }
        Err(e) => return Err(e.into()),
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    let mut out = String::new();
    let mut failed = 0;
    for path in &files {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let seed = seed_of(name).ok_or_else(|| {
            CliError::Usage(format!(
                "{}: the file name must end in -seed-N.toml",
                path.display()
            ))
        })?;
        let target = path.display().to_string();
        let loaded = load(&target)?;
        let passed = matches!(
            execute(&loaded.scenario, seed, Design::Correct),
            Ok(run) if run.report.verdict == Verdict::Pass
        );
        if !passed {
            failed += 1;
        }
        let _ = writeln!(
            out,
            "  {}  {}",
            if passed { "ok  " } else { "FAIL" },
            reproduce(&target, seed, Design::Correct)
        );
    }
    let _ = writeln!(
        out,
        "{}: {} regression(s), {failed} failed",
        if failed == 0 { "PASS" } else { "FAIL" },
        files.len()
    );
    emit(&out);
    Ok(if failed == 0 {
        Exit::Pass
    } else {
        Exit::Violation
    })
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
