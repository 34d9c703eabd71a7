//! One run's page: the run again with its trace, its neighbour for a
//! failing run (the nearest passing seed, else the correct design), and
//! the page rendered by `idem_reports::page`.

use idem_core::design::Design;
use idem_oracle::Invariant;
use idem_reports::html::{Performance, Provenance};
use idem_reports::page::likelihood::Likelihood;
use idem_reports::page::{Neighbour, Relation, RunPage};
use idem_reports::trace::RunTrace;
use idem_reports::{RunRecord, RunVerdict};
use idem_sim::run::RunOutcome;
use idem_sim::scenario::{Scenario, host};

use crate::record::{Evidence, build, execute, invariant_name, record};
use idem_scenarios::load::Loaded;

/// Seeds searched on each side of a failing seed for a passing neighbour.
pub const NEIGHBOUR_SEEDS_MAX: u64 = 8;

/// The provenance block of everything one command writes.
pub fn provenance(command_line: &str, seeds: &str, performance: Option<Performance>) -> Provenance {
    let build = build();
    Provenance {
        commit: match &build.commit {
            Some(_) => build.short_commit(),
            None => "unknown: built outside a git checkout".to_owned(),
        },
        version: build.version,
        command_line: command_line.to_owned(),
        seeds: seeds.to_owned(),
        performance,
    }
}

/// The world's hosts, in lane order: users, API replicas, workers, the
/// reconciler, the store, providers.
pub fn hosts(scenario: &Scenario) -> Vec<String> {
    let mut hosts: Vec<String> = scenario
        .clients
        .iter()
        .map(|c| host::client(&c.name))
        .collect();
    hosts.extend((1..=scenario.topology.api_replicas).map(host::api));
    hosts.extend((1..=scenario.topology.workers).map(host::worker));
    if scenario.topology.reconciler {
        hosts.push(host::RECONCILER.to_owned());
    }
    hosts.push(host::STORE.to_owned());
    hosts.extend(
        scenario
            .topology
            .providers
            .iter()
            .map(|p| host::provider(&p.name)),
    );
    hosts
}

fn invariants() -> Vec<(u8, String)> {
    Invariant::ALL
        .iter()
        .map(|i| (i.number(), invariant_name(*i)))
        .collect()
}

/// A run's trace as the reports read it.
pub fn trace_of(outcome: &RunOutcome) -> RunTrace {
    RunTrace::parse(&outcome.trace.to_jsonl()).expect("the simulator's own trace lines read back")
}

/// A run with the trace a page needs.
#[derive(Debug)]
pub struct Traced {
    pub record: RunRecord,
    pub trace: RunTrace,
}

impl Traced {
    /// The record and trace of a run already executed.
    pub fn of(
        loaded: &Loaded,
        seed: u64,
        design: Design,
        outcome: &Result<RunOutcome, String>,
    ) -> Self {
        Self {
            record: record(loaded, seed, design, outcome, Evidence::Seqs),
            trace: outcome.as_ref().map(trace_of).unwrap_or_default(),
        }
    }

    /// Runs `loaded` under `seed` and `design`.
    pub fn run(loaded: &Loaded, seed: u64, design: Design) -> Self {
        Self::of(
            loaded,
            seed,
            design,
            &execute(&loaded.scenario, seed, design),
        )
    }
}

/// The run a failing run is compared with: the nearest passing seed
/// (N-1, N+1, N-2, ...) within [`NEIGHBOUR_SEEDS_MAX`], else the same seed
/// under the correct design. `known` answers verdicts already run.
fn find_neighbour(
    loaded: &Loaded,
    seed: u64,
    design: Design,
    known: &dyn Fn(u64) -> Option<RunVerdict>,
) -> Option<(Traced, Relation)> {
    for distance in 1..=NEIGHBOUR_SEEDS_MAX {
        let candidates = [seed.checked_sub(distance), seed.checked_add(distance)];
        for candidate in candidates.into_iter().flatten() {
            if known(candidate).is_some_and(|v| !v.passed()) {
                continue;
            }
            let run = Traced::run(loaded, candidate, design);
            if run.record.verdict.passed() {
                return Some((run, Relation::NeighbourSeed));
            }
        }
    }
    if design == Design::Correct {
        return None;
    }
    let run = Traced::run(loaded, seed, Design::Correct);
    run.record
        .verdict
        .passed()
        .then_some((run, Relation::CorrectDesign))
}

/// What a page knows of the suite around its run.
pub struct Around<'a> {
    /// The verdicts of the same scenario and design under other seeds,
    /// where the suite ran them.
    pub known: &'a dyn Fn(u64) -> Option<RunVerdict>,
    /// The page of a run, relative to this page, if it has one.
    pub link_of: &'a dyn Fn(&RunRecord) -> Option<String>,
    /// The suite index, relative to this page.
    pub index_link: Option<&'a str>,
    pub provenance: &'a Provenance,
    /// The run's likelihood band, when `idem explain` made one.
    pub likelihood: Option<&'a Likelihood>,
}

impl std::fmt::Debug for Around<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Around")
            .field("index_link", &self.index_link)
            .field("provenance", &self.provenance)
            .finish_non_exhaustive()
    }
}

impl Around<'_> {
    /// A run page alone (`idem run --report`): no suite around it.
    pub fn alone(provenance: &Provenance) -> Around<'_> {
        Around {
            known: &|_| None,
            link_of: &|_| None,
            index_link: None,
            provenance,
            likelihood: None,
        }
    }
}

/// Renders one run's page, with its neighbour for a failing run.
pub fn render(loaded: &Loaded, run: &Traced, design: Design, around: &Around<'_>) -> String {
    let neighbour = if run.record.verdict.passed() {
        None
    } else {
        find_neighbour(loaded, run.record.seed, design, around.known)
    };
    let invariants = invariants();
    let hosts = hosts(&loaded.scenario);
    RunPage {
        record: &run.record,
        trace: &run.trace,
        hosts: &hosts,
        description: &loaded.scenario.description,
        invariants: &invariants,
        neighbour: neighbour.as_ref().map(|(n, relation)| Neighbour {
            record: &n.record,
            trace: &n.trace,
            relation: relation.clone(),
            searched: NEIGHBOUR_SEEDS_MAX,
            link: (around.link_of)(&n.record),
        }),
        searched: NEIGHBOUR_SEEDS_MAX,
        index_link: around.index_link,
        provenance: around.provenance,
        likelihood: around.likelihood,
    }
    .render()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_the_worlds_in_lane_order() {
        let loaded = idem_scenarios::load::load("timeout-unknown").expect("a catalogue scenario");
        let hosts = hosts(&loaded.scenario);
        assert_eq!(hosts.first().map(String::as_str), Some("client-alice"));
        assert!(hosts.contains(&"store".to_owned()));
        assert!(hosts.contains(&"reconciler".to_owned()));
        let store = hosts.iter().position(|h| h == "store");
        let provider = hosts.iter().position(|h| h.starts_with("provider-"));
        assert!(store < provider, "providers come last: {hosts:?}");
    }
}
