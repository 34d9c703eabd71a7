//! Finding a scenario by catalogue name or file path, and loading it.

use std::path::Path;

use idem_sim::scenario::Scenario;

use crate::catalog;
use crate::error::{ScenarioError, ScenarioErrors};
use crate::kept::Kept;
use crate::validate::file_from_str;

/// Where a scenario came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    Catalog,
    File,
}

/// A loaded, valid scenario.
#[derive(Clone, Debug)]
pub struct Loaded {
    pub scenario: Scenario,
    pub origin: Origin,
    /// What to pass to `idem run` to load it again: the catalogue name, or
    /// the path as the user gave it.
    pub target: String,
    /// What a saved file was kept for (its `[kept]` table), if it says.
    pub kept: Option<Kept>,
}

/// Why a scenario could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(
        "no scenario {0:?}: not a catalogue name (`idem list` shows them) and not a .toml file"
    )]
    Unknown(String),
    #[error("{0}")]
    Invalid(#[from] ScenarioErrors),
    /// Runs and reports are keyed by scenario name, so a set of scenarios
    /// must not hold one name twice.
    #[error("two scenarios are named {0:?}; runs are keyed by name, so names must be distinct")]
    NamedTwice(String),
}

/// Whether `target` names a file rather than a catalogue entry.
fn is_path(target: &str) -> bool {
    target.ends_with(".toml") || target.contains('/') || target.contains(std::path::MAIN_SEPARATOR)
}

/// Loads a catalogue scenario by name, or a scenario file by path.
pub fn load(target: &str) -> Result<Loaded, LoadError> {
    if !is_path(target)
        && let Some(text) = catalog::entry(target)
    {
        let (scenario, kept) = file_from_str(target, &catalog::display_path(target), text)?;
        return Ok(Loaded {
            scenario,
            origin: Origin::Catalog,
            target: target.to_owned(),
            kept,
        });
    }
    let path = Path::new(target);
    if !is_path(target) && !path.is_file() {
        return Err(LoadError::Unknown(target.to_owned()));
    }
    let text = std::fs::read_to_string(path).map_err(|source| {
        ScenarioErrors::from(ScenarioError::Read {
            path: target.to_owned(),
            source,
        })
    })?;
    let name = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or(target)
        .to_owned();
    let (scenario, kept) = file_from_str(&name, target, &text)?;
    Ok(Loaded {
        scenario,
        origin: Origin::File,
        target: target.to_owned(),
        kept,
    })
}

/// Every catalogue scenario, loaded, by name.
pub fn load_catalog() -> Result<Vec<Loaded>, LoadError> {
    catalog::catalog().into_keys().map(load).collect()
}

/// The scenarios a sweep or a matrix runs: the whole catalogue when
/// `targets` is empty, otherwise each target loaded; sorted by name, so
/// every report lists them in one order, and each name at most once.
pub fn load_set(targets: &[String]) -> Result<Vec<Loaded>, LoadError> {
    let mut scenarios: Vec<Loaded> = if targets.is_empty() {
        load_catalog()?
    } else {
        targets.iter().map(|t| load(t)).collect::<Result<_, _>>()?
    };
    scenarios.sort_by(|a, b| a.scenario.name.cmp(&b.scenario.name));
    if let Some(pair) = scenarios
        .windows(2)
        .find(|p| p[0].scenario.name == p[1].scenario.name)
    {
        return Err(LoadError::NamedTwice(pair[0].scenario.name.clone()));
    }
    Ok(scenarios)
}
