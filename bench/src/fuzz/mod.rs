//! Search beyond the catalogue: every seed a whole generated
//! world ([`world`]), judged by the same oracle as every other run; a
//! failure is known by its [`Signature`], shrunk to a minimal world
//! ([`shrink`]) and kept as a scenario file ([`corpus`]) whose `[kept]`
//! table records the path it was kept for ([`idem_scenarios::kept::RunPath`]), so
//! that `idem regress` notices when the code moves the seed off that path.
//! [`search`] runs a plan's seeds on the runner and puts it together.
//!
//! The command line (`idem fuzz`, `idem merge`) is in `crate::cli`; it
//! parses its arguments, calls [`search::fuzz`] and prints.

pub mod bias;
pub mod campaign;
pub mod corpus;
pub mod coverage;
pub mod guided;
pub mod search;
pub mod shrink;
pub mod world;
pub mod zoo;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use sha2::{Digest, Sha256};

use idem_sim::run::RunOutcome;
use idem_sim::scenario::Scenario;
use idem_sim::trace::{Trace, TraceBody};

use idem_scenarios::emit::{EmitError, to_file};
use idem_scenarios::kept::kind_of;
use idem_scenarios::validate::scenario_from_str;

/// The world of `seed` as the fuzzer runs it: generated, written as a
/// scenario file and read back through the validator, so that what runs is
/// exactly what a corpus file would hold.
pub fn prepare(seed: u64) -> Result<Scenario, String> {
    prepare_leaning(seed, &bias::Bias::default())
}

/// [`prepare`], the world's coin tosses leaned by `bias`.
pub fn prepare_leaning(seed: u64, bias: &bias::Bias) -> Result<Scenario, String> {
    let generated = world::world_leaning(seed, bias);
    let text = to_file(&generated, "").map_err(|e| describe_emit(seed, &e))?;
    scenario_from_str(&generated.name, &format!("fuzz world {seed}"), &text)
        .map_err(|e| format!("the generator made an invalid world for seed {seed}:\n{e}"))
}

/// A world made by changing another (the guided search's children) as a
/// file would hold it, or `None` when the change broke a bound the format
/// enforces.
pub fn as_file(world: &Scenario) -> Option<Scenario> {
    let text = to_file(world, "").ok()?;
    scenario_from_str(&world.name, "changed world", &text).ok()
}

fn describe_emit(seed: u64, error: &EmitError) -> String {
    format!("the world of seed {seed} cannot be written as a file: {error}")
}

/// What tells one failure from another: the invariants a run violated, each
/// with the kinds of the trace events that show it. Two runs with one
/// signature are taken to be one bug and shrunk once.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Signature {
    /// (invariant number, evidence event kinds sorted and distinct), by
    /// invariant. A run that could not finish has one part, numbered 0,
    /// whose only "kind" is its error with the numbers taken out.
    pub parts: Vec<(u8, Vec<String>)>,
}

impl Signature {
    /// The signature of a finished run; `None` when it passed.
    pub fn of(outcome: &Result<RunOutcome, String>) -> Option<Self> {
        let outcome = match outcome {
            Ok(outcome) => outcome,
            Err(error) => {
                return Some(Self {
                    parts: vec![(0, vec![format!("error: {}", without_numbers(error))])],
                });
            }
        };
        if outcome.report.violations.is_empty() {
            return None;
        }
        let mut parts: BTreeMap<u8, BTreeSet<String>> = BTreeMap::new();
        for violation in &outcome.report.violations {
            let kinds = parts.entry(violation.invariant.number()).or_default();
            for seq in &violation.evidence {
                if let Some(event) = usize::try_from(*seq)
                    .ok()
                    .and_then(|i| outcome.trace.events.get(i))
                {
                    kinds.insert(kind_of(&event.body));
                }
            }
        }
        Some(Self {
            parts: parts
                .into_iter()
                .map(|(n, kinds)| (n, kinds.into_iter().collect()))
                .collect(),
        })
    }

    /// The invariant numbers, in order (0 for a run that could not finish).
    pub fn invariants(&self) -> Vec<u8> {
        self.parts.iter().map(|(n, _)| *n).collect()
    }

    /// Eight hex digits of the signature's SHA-256, for file names.
    pub fn short_hash(&self) -> String {
        hex::encode(&Sha256::digest(self.to_string().as_bytes())[..4])
    }
}

impl fmt::Display for Signature {
    /// `3[completion_lost,completion_won] 6[completion_lost]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, (number, kinds)) in self.parts.iter().enumerate() {
            if index > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{number}[{}]", kinds.join(","))?;
        }
        Ok(())
    }
}

/// An error message with every digit run replaced by `#`, so that two
/// runs failing the same way at different times or ids share a signature.
fn without_numbers(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_number = false;
    for c in text.lines().next().unwrap_or_default().chars() {
        if c.is_ascii_hexdigit() && (c.is_ascii_digit() || in_number) {
            if !in_number {
                out.push('#');
            }
            in_number = true;
        } else {
            in_number = false;
            out.push(c);
        }
    }
    out
}

/// The fault kinds that took effect in a run: the driver fired them
/// (network, crash, provider and clock faults), or, for store faults, the
/// store injected one at least once (a rule installed for an operation
/// that never came does nothing).
pub fn exercised(trace: &Trace) -> BTreeSet<String> {
    let mut kinds = BTreeSet::new();
    for event in &trace.events {
        match &event.body {
            TraceBody::Fault { name, .. }
                if !name.starts_with("heal_")
                    && name != "restart"
                    && !name.starts_with("store_") =>
            {
                kinds.insert(name.clone());
            }
            TraceBody::StoreFaultInjected { fault, .. } => {
                kinds.insert(fault.name().to_owned());
            }
            _ => {}
        }
    }
    kinds
}

/// The fault kinds a world holds, whether they took effect or not.
pub fn generated(scenario: &Scenario) -> BTreeSet<String> {
    scenario
        .faults
        .iter()
        .map(|f| f.fault.kind().name().to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_leave_error_signatures() {
        assert_eq!(
            without_numbers("the simulation failed at 1234 ms: host api-2 gone"),
            "the simulation failed at # ms: host api-# gone"
        );
    }

    #[test]
    fn signatures_read_as_invariants_and_kinds() {
        let s = Signature {
            parts: vec![
                (3, vec!["completion_won".into(), "http_response".into()]),
                (6, vec!["completion_lost".into()]),
            ],
        };
        assert_eq!(
            s.to_string(),
            "3[completion_won,http_response] 6[completion_lost]"
        );
        assert_eq!(s.invariants(), vec![3, 6]);
        assert_eq!(s.short_hash().len(), 8);
    }
}
