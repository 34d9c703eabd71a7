//! `idem report`: a design review's report. Runs the suite (every scenario
//! under every seed, for the correct design and every naive one) and
//! writes `index.html`, one page per interesting run, `summary.md`,
//! `junit.xml` and `suite.json`; and the run page of `idem run --report`.
//!
//! Every run executes wholly on one worker thread, as in a sweep; the
//! suite keeps each run's record and a few figures, not its trace. Pages
//! need traces, so their runs are executed again: a run is determined by
//! its (scenario, seed, design), and the second execution is checked
//! against the first one's trace hash. Everything written is a function of
//! the runs, except the provenance block (build, command line, wall time).

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use clap::Args;

use idem_core::design::Design;
use idem_core::engine::Policy;
use idem_reports::html::{Performance, Provenance};
use idem_reports::markdown::Illustrated;
use idem_reports::mutants::Role;
use idem_reports::page::{Neighbour, Relation, RunPage};
use idem_reports::stats::RunStats;
use idem_reports::suite::{PageRef, SuiteDesign, SuiteInput, SuiteReport, SuiteRun, SuiteScenario};
use idem_reports::sweep::{SeedRange, Shard, SweptScenario};
use idem_reports::trace::RunTrace;
use idem_reports::{RunRecord, RunVerdict, SweepSummary};
use idem_sim::oracle::Invariant;
use idem_sim::run::RunOutcome;
use idem_sim::scenario::{Scenario, host};

use super::common::{emit, execute, invariant_name, record, window_name};
use super::sweep::{Seeds, all_windows, progress_bar};
use super::{CliError, Exit};
use crate::load::{Loaded, load_set};

/// Seeds searched on each side of a failing seed for a passing neighbour.
pub const NEIGHBOUR_SEEDS_MAX: u64 = 8;

/// The most seeds one report may name: every (scenario, design, seed) runs.
pub const REPORT_SEEDS_MAX: u64 = 1024;

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The directory to write the report into (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Seeds: `A..B` (B excluded), `A..=B`, or one seed `N`.
    #[arg(long, default_value = "0..10")]
    pub seeds: Seeds,
    /// Only these scenarios (catalogue names or files, comma-separated or
    /// repeated); default: the whole catalogue.
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    pub scenarios: Vec<String>,
    /// Only these designs (comma-separated); default: the correct design
    /// and every naive design. The correct design is always included.
    #[arg(long, value_delimiter = ',', value_name = "DESIGNS")]
    pub designs: Vec<Design>,
    /// Worker threads (default: the number of cores). The report is the
    /// same whatever this is.
    #[arg(long)]
    pub jobs: Option<NonZeroUsize>,
}

/// The provenance block of everything this process writes.
pub(super) fn provenance(seeds: &str, performance: Option<Performance>) -> Provenance {
    let build = super::common::build();
    Provenance {
        commit: match &build.commit {
            Some(_) => build.short_commit(),
            None => "unknown: built outside a git checkout".to_owned(),
        },
        version: build.version,
        command_line: std::env::args().collect::<Vec<_>>().join(" "),
        seeds: seeds.to_owned(),
        performance,
    }
}

/// The world's hosts, in lane order: users, API replicas, workers, the
/// reconciler, the store, providers.
pub(super) fn hosts(scenario: &Scenario) -> Vec<String> {
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

fn policy_name(policy: Policy) -> &'static str {
    match policy {
        Policy::Strict => "strict",
        Policy::Hedged { .. } => "hedged",
    }
}

/// A run's trace as the reports read it.
fn trace_of(outcome: &RunOutcome) -> RunTrace {
    RunTrace::parse(&outcome.trace.to_jsonl()).expect("the simulator's own trace lines read back")
}

/// Runs `count` tasks over `jobs` threads; results come back in task
/// order. `tick` is called after each.
fn parallel<T: Send>(
    count: usize,
    jobs: usize,
    task: impl Fn(usize) -> T + Sync,
    tick: impl Fn(&T) + Sync,
) -> Vec<T> {
    let next = AtomicUsize::new(0);
    let slots: Mutex<Vec<Option<T>>> = Mutex::new((0..count).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..jobs.min(count).max(1) {
            scope.spawn(|| {
                // Bounded: each pass claims one index below `count`.
                loop {
                    let index = next.fetch_add(1, Ordering::SeqCst);
                    if index >= count {
                        break;
                    }
                    let result = task(index);
                    tick(&result);
                    slots.lock().unwrap_or_else(PoisonError::into_inner)[index] = Some(result);
                }
            });
        }
    });
    slots
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner)
        .into_iter()
        .map(|r| r.expect("every claimed task is filled before the scope ends"))
        .collect()
}

/// A run with the trace a page needs.
struct Traced {
    record: RunRecord,
    trace: RunTrace,
}

fn run_traced(loaded: &Loaded, seed: u64, design: Design) -> Traced {
    let outcome = execute(&loaded.scenario, seed, design);
    let record = record(
        &loaded.scenario,
        &loaded.target,
        seed,
        design,
        &outcome,
        false,
    );
    let trace = outcome.as_ref().map(trace_of).unwrap_or_default();
    Traced { record, trace }
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
            let run = run_traced(loaded, candidate, design);
            if run.record.verdict.passed() {
                return Some((run, Relation::NeighbourSeed));
            }
        }
    }
    if design == Design::Correct {
        return None;
    }
    let run = run_traced(loaded, seed, Design::Correct);
    run.record
        .verdict
        .passed()
        .then_some((run, Relation::CorrectDesign))
}

/// Renders one run's page, with its neighbour for a failing run.
#[allow(clippy::too_many_arguments)]
fn render_page(
    loaded: &Loaded,
    run: &Traced,
    design: Design,
    known: &dyn Fn(u64) -> Option<RunVerdict>,
    link_of: &dyn Fn(&RunRecord) -> Option<String>,
    index_link: Option<&str>,
    provenance: &Provenance,
) -> String {
    let neighbour = if run.record.verdict.passed() {
        None
    } else {
        find_neighbour(loaded, run.record.seed, design, known)
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
            link: link_of(&n.record),
        }),
        searched: NEIGHBOUR_SEEDS_MAX,
        index_link,
        provenance,
    }
    .render()
}

/// `idem run --report FILE`: the page of one run.
pub(super) fn write_run_page(
    loaded: &Loaded,
    seed: u64,
    design: Design,
    outcome: &Result<RunOutcome, String>,
    path: &Path,
) -> Result<(), CliError> {
    let run = Traced {
        record: record(
            &loaded.scenario,
            &loaded.target,
            seed,
            design,
            outcome,
            false,
        ),
        trace: outcome.as_ref().map(trace_of).unwrap_or_default(),
    };
    let provenance = provenance(&format!("{seed}..{}", seed + 1), None);
    let html = render_page(
        loaded,
        &run,
        design,
        &|_| None,
        &|_| None,
        None,
        &provenance,
    );
    std::fs::write(path, html)
        .map_err(|e| CliError::Usage(format!("cannot write {}: {e}", path.display())))
}

fn write(dir: &Path, name: &str, text: &str) -> Result<(), CliError> {
    let path = dir.join(name);
    std::fs::write(&path, text)
        .map_err(|e| CliError::Usage(format!("cannot write {}: {e}", path.display())))
}

pub fn report(args: ReportArgs) -> Result<Exit, CliError> {
    if args.seeds.end - args.seeds.start > REPORT_SEEDS_MAX {
        return Err(CliError::Usage(format!(
            "at most {REPORT_SEEDS_MAX} seeds per report"
        )));
    }
    let scenarios = load_set(&args.scenarios)?;
    let mut designs: Vec<Design> = if args.designs.is_empty() {
        Design::ALL.to_vec()
    } else {
        Design::ALL
            .iter()
            .copied()
            .filter(|d| *d == Design::Correct || args.designs.contains(d))
            .collect()
    };
    designs.dedup();
    let jobs = args
        .jobs
        .or_else(|| std::thread::available_parallelism().ok())
        .map_or(1, NonZeroUsize::get);
    let seeds: Vec<u64> = (args.seeds.start..args.seeds.end).collect();
    let tasks: Vec<(Design, usize, u64)> = designs
        .iter()
        .flat_map(|d| {
            let seeds = &seeds;
            (0..scenarios.len()).flat_map(move |s| seeds.iter().map(move |seed| (*d, s, *seed)))
        })
        .collect();
    let seed_text = format!("{}..{}", args.seeds.start, args.seeds.end);

    // Wall time for the performance block; it never enters anything else.
    #[allow(clippy::disallowed_methods)]
    let started = Instant::now();
    let progress = progress_bar(tasks.len(), "runs");
    let failed = AtomicUsize::new(0);
    let runs = parallel(
        tasks.len(),
        jobs,
        |index| {
            let (design, s, seed) = tasks[index];
            let loaded = &scenarios[s];
            let outcome = execute(&loaded.scenario, seed, design);
            let record = record(
                &loaded.scenario,
                &loaded.target,
                seed,
                design,
                &outcome,
                false,
            );
            let stats = outcome
                .as_ref()
                .map(|o| RunStats::from_trace(&trace_of(o)))
                .unwrap_or_default();
            SuiteRun { record, stats }
        },
        |run| {
            if !run.record.verdict.passed() {
                let n = failed.fetch_add(1, Ordering::SeqCst) + 1;
                progress.set_message(format!("{n} failed"));
            }
            progress.inc(1);
        },
    );
    progress.finish_and_clear();
    let suite_wall = started.elapsed();

    let suite_scenarios: Vec<SuiteScenario> = scenarios
        .iter()
        .map(|l| SuiteScenario {
            name: l.scenario.name.clone(),
            policy: policy_name(l.scenario.policy).to_owned(),
            expect_windows: l
                .scenario
                .expect_windows
                .iter()
                .copied()
                .map(window_name)
                .collect(),
        })
        .collect();
    let correct_records: Vec<RunRecord> = runs
        .iter()
        .filter(|r| r.record.design == Design::Correct.name())
        .map(|r| r.record.clone())
        .collect();
    let verdicts: BTreeMap<(String, String, u64), (RunVerdict, String)> = runs
        .iter()
        .map(|r| {
            (
                (
                    r.record.scenario.clone(),
                    r.record.design.clone(),
                    r.record.seed,
                ),
                (r.record.verdict, r.record.trace_hash.clone()),
            )
        })
        .collect();
    let whole_catalogue = args.scenarios.is_empty();
    let suite = SuiteReport::new(SuiteInput {
        seeds: SeedRange {
            start: args.seeds.start,
            end: args.seeds.end,
        },
        scenarios: suite_scenarios.clone(),
        designs: designs
            .iter()
            .map(|d| SuiteDesign {
                name: d.name().to_owned(),
                role: if *d == Design::Correct {
                    Role::Correct
                } else {
                    Role::Mutant
                },
            })
            .collect(),
        windows: all_windows(),
        gate_windows: whole_catalogue,
        runs,
        build: super::common::build(),
    });

    // Pages: each run again, with its trace.
    let by_name: BTreeMap<&str, &Loaded> = scenarios
        .iter()
        .map(|l| (l.scenario.name.as_str(), l))
        .collect();
    let design_of = |name: &str| {
        designs
            .iter()
            .copied()
            .find(|d| d.name() == name)
            .expect("every page's design is in the suite")
    };
    let page_progress = progress_bar(suite.pages.len(), "pages");
    let provisional = provenance(&seed_text, None);
    let rendered: Vec<(String, Option<Traced>)> = parallel(
        suite.pages.len(),
        jobs,
        |index| {
            let page: &PageRef = &suite.pages[index];
            let loaded = by_name[page.scenario.as_str()];
            let design = design_of(&page.design);
            let run = run_traced(loaded, page.seed, design);
            let recorded = &verdicts[&(page.scenario.clone(), page.design.clone(), page.seed)];
            assert_eq!(
                run.record.trace_hash, recorded.1,
                "{} seed {} under {}: a second execution gave another trace; the run is not deterministic",
                page.scenario, page.seed, page.design
            );
            let known = |seed: u64| {
                verdicts
                    .get(&(page.scenario.clone(), page.design.clone(), seed))
                    .map(|v| v.0)
            };
            let link_of = |r: &RunRecord| {
                suite
                    .page_of(&r.scenario, &r.design, r.seed)
                    .map(|p| p.file.trim_start_matches("runs/").to_owned())
            };
            let html = render_page(
                loaded,
                &run,
                design,
                &known,
                &link_of,
                Some("../index.html"),
                &provisional,
            );
            (html, Some(run))
        },
        |_| page_progress.inc(1),
    );
    page_progress.finish_and_clear();
    let elapsed = started.elapsed();

    let performance = Performance {
        wall_ms: u64::try_from(suite_wall.as_millis()).unwrap_or(u64::MAX),
        threads: jobs as u64,
        runs: suite.totals.runs,
        steps: suite.totals.steps,
        sim_ms: suite.totals.sim_ms,
    };
    let provenance = provenance(&seed_text, Some(performance));
    std::fs::create_dir_all(args.out.join("runs"))
        .map_err(|e| CliError::Usage(format!("cannot create {}: {e}", args.out.display())))?;
    // The pages' provenance has no performance figures (they were drawn
    // before the suite's total was known); the index's has.
    for (page, (html, _)) in suite.pages.iter().zip(&rendered) {
        write(&args.out, &page.file, html)?;
    }
    let index = idem_reports::index::render(&suite, &provenance)
        .map_err(|e| CliError::Usage(e.to_string()))?;
    write(&args.out, "index.html", &index)?;
    let illustrated = suite
        .pages
        .iter()
        .zip(&rendered)
        .find(|(p, _)| p.verdict == RunVerdict::Fail)
        .and_then(|(p, (_, run))| Some((p, run.as_ref()?)));
    let md = idem_reports::markdown::render(
        &suite,
        illustrated
            .and_then(|(p, run)| {
                let v = run.record.violations.first()?;
                Some(Illustrated {
                    scenario: &p.scenario,
                    design: &p.design,
                    seed: p.seed,
                    evidence: &v.evidence,
                    message: &v.message,
                    trace: &run.trace,
                })
            })
            .as_ref(),
        &provenance,
    );
    write(&args.out, "summary.md", &md)?;
    let correct_sweep = SweepSummary::new(
        Design::Correct.name(),
        suite.seeds,
        Shard { index: 0, count: 1 },
        &suite_scenarios
            .iter()
            .map(|s| SweptScenario {
                name: s.name.clone(),
                expect_windows: s.expect_windows.clone(),
            })
            .collect::<Vec<_>>(),
        correct_records,
        suite.build.clone(),
    )
    .gate_windows(&all_windows(), whole_catalogue);
    let junit = idem_reports::junit::render_suite(&suite, &correct_sweep)
        .map_err(|e| CliError::Usage(e.to_string()))?;
    write(&args.out, "junit.xml", &junit)?;
    write(&args.out, "suite.json", &suite.to_json())?;

    emit(&suite.mutants.to_text());
    emit(&format!(
        "report written to {} ({} run pages)\n",
        args.out.join("index.html").display(),
        suite.pages.len()
    ));
    eprintln!(
        "{} runs on {jobs} threads in {:.1} s, {} pages in {:.1} s more",
        suite.totals.runs,
        suite_wall.as_secs_f64(),
        suite.pages.len(),
        (elapsed - suite_wall).as_secs_f64()
    );
    Ok(if suite.passed() {
        Exit::Pass
    } else {
        Exit::Violation
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_the_worlds_in_lane_order() {
        let loaded = crate::load::load("timeout-unknown").expect("a catalogue scenario");
        let hosts = hosts(&loaded.scenario);
        assert_eq!(hosts.first().map(String::as_str), Some("client-alice"));
        assert!(hosts.contains(&"store".to_owned()));
        assert!(hosts.contains(&"reconciler".to_owned()));
        let store = hosts.iter().position(|h| h == "store");
        let provider = hosts.iter().position(|h| h.starts_with("provider-"));
        assert!(store < provider, "providers come last: {hosts:?}");
    }
}
