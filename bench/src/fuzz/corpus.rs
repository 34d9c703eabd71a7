//! What the fuzzer keeps of a failure: each signature's first seed shrunk
//! to a minimal world ([`super::shrink`]), described for the summary and,
//! with a corpus directory, written as a scenario file whose header says
//! how to reproduce it and whose `[kept]` table records the path it was
//! kept for.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use idem_core::design::Design;
use idem_oracle::Invariant;
use idem_reports::fuzz::{FuzzFailure, InvariantRef, Minimal};
use idem_sim::run::RunOutcome;
use idem_sim::scenario::Scenario;

use super::bias::Bias;
use super::shrink::{Shrunk, shrink};
use super::{Signature, prepare_leaning};
use crate::record::{build, execute, invariant_name, reproduce};
use crate::runner::Runner;
use idem_scenarios::emit::to_file_kept;
use idem_scenarios::kept::{Kept, RunPath};

/// Why a shrunk failure could not be kept.
#[derive(Debug, thiserror::Error)]
pub enum KeepError {
    #[error("{0}")]
    Io(#[from] crate::output::IoError),
    /// A shrunk world the emitter could not write as a file.
    #[error("cannot write the world: {0}")]
    Emit(#[from] idem_scenarios::emit::EmitError),
}

/// What a failing run leaves for the shrinker and the summary.
#[derive(Clone, Debug)]
pub struct Failed {
    pub seed: u64,
    pub signature: Signature,
    pub message: String,
    /// The world, when it is not the seed's generated one (the guided
    /// search's children).
    pub world: Option<Scenario>,
}

/// How failures are shrunk and kept.
#[derive(Clone, Copy, Debug)]
pub struct ShrinkPlan<'a> {
    pub design: Design,
    /// Candidate runs the shrinker may make per failure.
    pub shrink_runs: u32,
    pub corpus: Option<&'a Path>,
    /// The command that found the failures, for file headers.
    pub found_by: &'a str,
    /// How the worlds were leaned, to make the same world again.
    pub bias: &'a Bias,
}

/// Shrinks each signature's first failure on `runner` (each shrink depends
/// only on its own world, so the results do not depend on the threads),
/// writes it to the corpus, and describes it, in the order given.
pub fn shrink_all(
    firsts: Vec<Failed>,
    plan: &ShrinkPlan<'_>,
    runner: Runner,
) -> Result<(Vec<FuzzFailure>, Duration), KeepError> {
    let mut described = Vec::with_capacity(firsts.len());
    let finished = runner.run(
        firsts.len(),
        |index| shrink_one(&firsts[index], plan),
        |_, failure, _| described.push(failure),
    );
    let failures = described.into_iter().collect::<Result<_, _>>()?;
    Ok((failures, finished.wall))
}

/// Whether `world` under `seed` and `design` fails with these invariants.
fn fails_with(world: &Scenario, seed: u64, design: Design, invariants: &[u8]) -> bool {
    Signature::of(&execute(world, seed, design)).is_some_and(|s| s.invariants() == invariants)
}

fn passes(world: &Scenario, seed: u64, design: Design) -> Option<RunOutcome> {
    execute(world, seed, design)
        .ok()
        .filter(|o| o.report.violations.is_empty())
}

/// The summary's entry for a failure, before shrinking.
fn described(failed: &Failed, design: Design) -> FuzzFailure {
    let seed = failed.seed;
    FuzzFailure {
        signature: failed.signature.to_string(),
        invariants: failed
            .signature
            .invariants()
            .iter()
            .map(|n| InvariantRef {
                invariant: *n,
                name: Invariant::ALL
                    .iter()
                    .find(|i| i.number() == *n)
                    .map_or_else(|| "error".to_owned(), |i| invariant_name(*i)),
            })
            .collect(),
        first_seed: seed,
        message: failed.message.clone(),
        corpus_file: None,
        reproduce: if failed.world.is_some() {
            format!(
                "keep it with --corpus DIR, then: idem run FILE --seed {seed} --design {design}"
            )
        } else {
            format!("idem fuzz --seeds {seed} --design {design} --corpus DIR")
        },
        minimal: None,
        runs: 0,
        seeds: Vec::new(),
    }
}

/// A failure shrunk, described and, with a corpus, written.
fn shrink_one(failed: &Failed, plan: &ShrinkPlan<'_>) -> Result<FuzzFailure, KeepError> {
    let (seed, design) = (failed.seed, plan.design);
    let mut failure = described(failed, design);
    // A world the generator could not write has nothing to shrink.
    let Some(original) = failed
        .world
        .clone()
        .or_else(|| prepare_leaning(seed, plan.bias).ok())
    else {
        return Ok(failure);
    };
    // Under a naive design the minimal world must also pass under the
    // correct one (it shows the naive design's bug, not another); unless
    // the correct design fails the original world too: then that is the
    // finding, and it is shrunk as it is.
    let correct_passes =
        design == Design::Correct || passes(&original, seed, Design::Correct).is_some();
    let invariants = failed.signature.invariants();
    let shrunk = shrink(&original, plan.shrink_runs, |candidate| {
        let Some(candidate) = super::as_file(candidate) else {
            return false;
        };
        fails_with(&candidate, seed, design, &invariants)
            && (!correct_passes
                || design == Design::Correct
                || passes(&candidate, seed, Design::Correct).is_some())
    });
    let minimal = &shrunk.scenario;
    failure.minimal = Some(Minimal {
        users: minimal.clients.len() as u64,
        actions: minimal.clients.iter().map(|c| c.actions.len() as u64).sum(),
        faults: minimal.faults.len() as u64,
        shrink_runs: u64::from(shrunk.runs),
        shrink_steps: u64::from(shrunk.steps),
    });
    let Some(dir) = plan.corpus else {
        return Ok(failure);
    };
    let found = Found {
        failed,
        original: &original,
        shrunk: &shrunk,
        correct_passes,
    };
    let path = write_corpus_file(dir, &found, plan)?;
    failure.reproduce = reproduce(&path, seed, design);
    failure.corpus_file = Some(path);
    Ok(failure)
}

/// A shrunk failure on its way to the corpus.
struct Found<'a> {
    failed: &'a Failed,
    original: &'a Scenario,
    shrunk: &'a Shrunk,
    /// Whether the correct design passes the original world.
    correct_passes: bool,
}

/// Writes the minimal world under `dir`; returns its path.
fn write_corpus_file(
    dir: &Path,
    found: &Found<'_>,
    plan: &ShrinkPlan<'_>,
) -> Result<String, KeepError> {
    let (seed, design) = (found.failed.seed, plan.design);
    let path = dir
        .join(format!(
            "{design}-{}-seed-{seed}.toml",
            found.failed.signature.short_hash()
        ))
        .display()
        .to_string();
    let mut scenario = found.shrunk.scenario.clone();
    let made = if found.failed.world.is_some() {
        "made by the guided search under"
    } else {
        "generated from"
    };
    scenario.description = format!(
        "A world `idem fuzz` {made} seed {seed}, found failing under the {design} design \
         ({}), shrunk to a minimum. The correct design must keep passing it.",
        found.failed.signature
    );
    // The path it is kept for: what the correct design does under its seed.
    let path_taken = execute(&scenario, seed, Design::Correct)
        .ok()
        .map(|o| RunPath::of(&o));
    let kept = Kept {
        seed,
        design,
        path: path_taken,
    };
    let text = to_file_kept(&scenario, &header(found, plan, &path), Some(&kept))?;
    crate::output::write(Path::new(&path), text)?;
    Ok(path)
}

/// The file's header comment: where it came from and how to run it again.
fn header(found: &Found<'_>, plan: &ShrinkPlan<'_>, path: &str) -> String {
    let (seed, design, failed) = (found.failed.seed, plan.design, found.failed);
    let count = |w: &Scenario| {
        (
            w.clients.len(),
            w.clients.iter().map(|c| c.actions.len()).sum::<usize>(),
            w.faults.len(),
        )
    };
    let (u0, a0, f0) = count(found.original);
    let (u1, a1, f1) = count(&found.shrunk.scenario);
    let mut comment = format!(
        "Found by: {} (seed {seed})\n\
         Build: idem {}\n\
         Signature: {}\n\
         Shrunk from {u0} user(s), {a0} action(s), {f0} fault(s) to {u1}, {a1}, {f1} in {} runs.\n\
         It failed under --design {design} with:\n  {}\n",
        plan.found_by,
        build(),
        failed.signature,
        found.shrunk.runs,
        failed.message.lines().next().unwrap_or_default()
    );
    if design != Design::Correct {
        comment.push_str(if found.correct_passes {
            "It passes under the correct design.\n"
        } else {
            "It FAILS under the correct design too: a bug in idem, not only in the naive design.\n"
        });
    }
    let _ = write!(comment, "Reproduce with: {}", reproduce(path, seed, design));
    comment
}
