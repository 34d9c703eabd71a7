//! Every catalogue file parses, validates and tells its story; and a few
//! seeds of each pass with the correct design.

use std::collections::BTreeSet;

use idem_core::design::Design;
use idem_scenarios::{catalog, load};
use idem_sim::run::{Verdict, run};

#[test]
fn every_catalogue_file_is_valid_and_described() -> Result<(), Box<dyn std::error::Error>> {
    let entries = catalog();
    assert!(
        entries.len() >= 16,
        "the catalogue lost scenarios: {:?}",
        entries.keys()
    );
    for name in entries.keys() {
        let loaded = load(name)?;
        let scenario = &loaded.scenario;
        assert_eq!(scenario.name, *name);
        assert!(
            scenario.description.split_whitespace().count() >= 30,
            "{name}: the description must tell the story, the window and what a failure means"
        );
    }
    Ok(())
}

#[test]
fn every_file_in_the_catalogue_folder_is_built_in() -> Result<(), Box<dyn std::error::Error>> {
    let folder = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("catalog");
    let mut on_disk = BTreeSet::new();
    for entry in std::fs::read_dir(&folder)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "toml") {
            let stem = path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or_default()
                .to_owned();
            // The file on disk is the one built in.
            assert_eq!(
                catalog().get(stem.as_str()).copied(),
                Some(std::fs::read_to_string(&path)?.as_str())
            );
            on_disk.insert(stem);
        }
    }
    let built_in: BTreeSet<String> = catalog().keys().map(|k| (*k).to_owned()).collect();
    assert_eq!(on_disk, built_in);
    Ok(())
}

#[test]
fn catalogue_files_load_by_path_too() -> Result<(), Box<dyn std::error::Error>> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/catalog/double-click.toml");
    let by_path = load(path)?;
    let by_name = load("double-click")?;
    assert_eq!(by_path.scenario, by_name.scenario);
    assert_eq!(by_path.target, path);
    Ok(())
}

/// The CI sweep covers many seeds in release mode; this keeps a debug
/// `cargo test` honest about the catalogue at a small cost.
#[test]
fn catalogue_passes_its_first_seeds() -> Result<(), Box<dyn std::error::Error>> {
    for name in catalog().keys() {
        let scenario = load(name)?.scenario;
        for seed in 0..2 {
            let outcome = run(&scenario, seed, Design::Correct)?;
            assert_eq!(
                outcome.report.verdict,
                Verdict::Pass,
                "{name} seed {seed}: {:#?}",
                outcome.report.violations
            );
        }
    }
    Ok(())
}
