//! The catalogue: the scenario files under `scenarios/catalog/`, built into
//! the binary so that `idem run double-click` works from any directory.
//! Each file's `description` tells a reviewer its story, the race window it
//! is meant to reach, and what a failure would mean.

use std::collections::BTreeMap;

macro_rules! catalogue {
    ($($name:literal),* $(,)?) => {
        &[$(($name, include_str!(concat!("../catalog/", $name, ".toml")))),*]
    };
}

/// `(name, file text)`, sorted by name. A test checks that every file in
/// `scenarios/catalog/` is listed here.
const ENTRIES: &[(&str, &str)] = catalogue![
    "backup-button",
    "clock-jump",
    "cross-owner-same-key",
    "double-click",
    "key-reuse-after-completion",
    "lost-ack-on-commit",
    "lost-response-retry",
    "mismatched-payload",
    "model-change",
    "out-of-order-completion",
    "partition-during-failover",
    "reconciler-cancel",
    "retry-storm",
    "store-restart",
    "timeout-unknown",
    "two-workers-race",
    "uncertified-fallback",
    "worker-crash-mid-attempt",
];

/// Every catalogue scenario: name → file text.
pub fn catalog() -> BTreeMap<&'static str, &'static str> {
    ENTRIES.iter().copied().collect()
}

/// One catalogue scenario's file text.
pub fn entry(name: &str) -> Option<&'static str> {
    ENTRIES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, text)| *text)
}

/// The path errors in a catalogue file are reported against.
pub fn display_path(name: &str) -> String {
    format!("scenarios/catalog/{name}.toml")
}
