//! The determinism check: run a seed twice and compare the traces byte for
//! byte. On a divergence, name the first differing event, with both sides.

use serde::{Deserialize, Serialize};

use idem_core::design::Design;

use crate::run::{RunError, simulate};
use crate::scenario::Scenario;

/// The first place two runs of one seed differ.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Divergence {
    /// Index of the first differing trace line (event seq).
    pub index: usize,
    /// The line in the first run, or `None` if the first run had ended.
    pub first: Option<String>,
    /// The line in the second run, or `None` if the second run had ended.
    pub second: Option<String>,
}

/// The outcome of a determinism check.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeterminismReport {
    pub scenario: String,
    pub seed: u64,
    pub first_hash: String,
    pub second_hash: String,
    pub events: usize,
    pub divergence: Option<Divergence>,
}

impl DeterminismReport {
    pub fn deterministic(&self) -> bool {
        self.divergence.is_none()
    }
}

/// Runs `scenario` under `seed` with `design` twice and compares the traces.
pub fn check(
    scenario: &Scenario,
    seed: u64,
    design: Design,
) -> Result<DeterminismReport, RunError> {
    let first = simulate(scenario, seed, design)?.trace.to_jsonl();
    let second = simulate(scenario, seed, design)?.trace.to_jsonl();
    Ok(compare(scenario, seed, &first, &second))
}

/// Compares two canonical traces.
pub fn compare(scenario: &Scenario, seed: u64, first: &str, second: &str) -> DeterminismReport {
    let hash = |text: &str| {
        use sha2::{Digest, Sha256};
        hex::encode(Sha256::digest(text.as_bytes()))
    };
    let divergence = first_divergence(first, second);
    DeterminismReport {
        scenario: scenario.name.clone(),
        seed,
        first_hash: hash(first),
        second_hash: hash(second),
        events: first.lines().count(),
        divergence,
    }
}

fn first_divergence(first: &str, second: &str) -> Option<Divergence> {
    let mut a = first.lines();
    let mut b = second.lines();
    let mut index = 0;
    loop {
        match (a.next(), b.next()) {
            (None, None) => return None,
            (x, y) if x == y => index += 1,
            (x, y) => {
                return Some(Divergence {
                    index,
                    first: x.map(str::to_owned),
                    second: y.map(str::to_owned),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::first_divergence;

    #[test]
    fn names_the_first_differing_line() {
        assert_eq!(first_divergence("a\nb\n", "a\nb\n"), None);
        let d = first_divergence("a\nb\nc\n", "a\nx\nc\n").expect("differs");
        assert_eq!(
            (d.index, d.first.as_deref(), d.second.as_deref()),
            (1, Some("b"), Some("x"))
        );
        let d = first_divergence("a\n", "a\nb\n").expect("differs");
        assert_eq!(
            (d.index, d.first, d.second.as_deref()),
            (1, None, Some("b"))
        );
    }
}
