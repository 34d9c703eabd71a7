//! The mutants matrix (`idem mutants`) and the sweep's race-window coverage
//! gate: the verdict logic through one `check` entry point on synthetic
//! runs, the JSON shape, and small real runs of the binary.

use std::collections::BTreeMap;
use std::process::{Command, Output};

use idem_reports::mutants::{DesignRuns, MutantsReport, Role};
use idem_reports::sweep::{SeedRange, Shard, SweptScenario};
use idem_reports::{RunRecord, RunVerdict, SweepSummary, ViolationRecord};
use idem_sim::scenario::Window;

fn idem(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(args)
        .output()
        .expect("the idem binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn window_names() -> Vec<String> {
    Window::ALL
        .iter()
        .map(|w| match serde_json::to_value(w) {
            Ok(serde_json::Value::String(name)) => name,
            other => panic!("a window serializes to its name, not {other:?}"),
        })
        .collect()
}

/// A synthetic run. `outcome`: `.` pass, `F` a violation of invariants 3
/// and 6 (3 twice), `E` a simulation error. `reached`: windows reached once.
fn run(scenario: &str, seed: u64, design: &str, outcome: char, reached: &[&str]) -> RunRecord {
    let violation = |invariant: u8, name: &str| ViolationRecord {
        invariant,
        name: name.to_owned(),
        message: format!("{name} broken"),
        evidence: vec![1],
        evidence_events: Vec::new(),
    };
    let (verdict, violations, error) = match outcome {
        '.' => (RunVerdict::Pass, Vec::new(), None),
        'F' => (
            RunVerdict::Fail,
            vec![
                violation(3, "one_winner"),
                violation(3, "one_winner"),
                violation(6, "losers_discarded"),
            ],
            None,
        ),
        'E' => (
            RunVerdict::Error,
            Vec::new(),
            Some("a host failed".to_owned()),
        ),
        other => panic!("unknown outcome {other:?}"),
    };
    let windows: BTreeMap<String, u32> = window_names()
        .into_iter()
        .map(|w| {
            let count = u32::from(reached.contains(&w.as_str()));
            (w, count)
        })
        .collect();
    RunRecord {
        schema: idem_reports::SCHEMA_VERSION,
        scenario: scenario.to_owned(),
        seed,
        design: design.to_owned(),
        verdict,
        violations,
        error,
        windows,
        expect_windows: Vec::new(),
        trace_hash: format!("{scenario}-{seed}"),
        trace_events: 1,
        steps: 1,
        sim_ms: 1,
        stop: "quiescent".to_owned(),
        reproduce: format!("idem run {scenario} --seed {seed} --design {design}"),
        build: None,
    }
}

/// Builds the matrix report of `scenarios` × `seeds` from each design's
/// outcomes in search order (one character per run, see [`run`]; the run
/// at position `p` is scenario `p % scenarios` under seed `p / scenarios`),
/// and compares a one-line-per-design rendering with `expect`.
fn check(scenarios: &[&str], seeds: u64, designs: &[(&str, &str)], expect: &str) -> MutantsReport {
    let designs = designs
        .iter()
        .map(|(design, outcomes)| DesignRuns {
            design: (*design).to_owned(),
            role: if *design == "correct" {
                Role::Correct
            } else {
                Role::Mutant
            },
            runs: outcomes
                .chars()
                .filter(|c| !c.is_whitespace())
                .enumerate()
                .map(|(p, outcome)| {
                    let seed = (p / scenarios.len()) as u64;
                    run(scenarios[p % scenarios.len()], seed, design, outcome, &[])
                })
                .collect(),
        })
        .collect();
    let report = MutantsReport::new(
        SeedRange {
            start: 0,
            end: seeds,
        },
        scenarios.iter().map(|s| (*s).to_owned()).collect(),
        designs,
        idem_reports::BuildStamp::from_build(
            "0.1.0",
            Some("0123456789abcdef0123456789abcdef01234567"),
            Some("false"),
        ),
    );
    let mut lines: Vec<String> = report
        .designs
        .iter()
        .map(|d| {
            let state = match (d.passed, d.caught) {
                (Some(true), None) => "passed",
                (Some(false), None) => "FAILED",
                (None, Some(true)) => "caught",
                (None, Some(false)) => "NOT CAUGHT",
                other => panic!("a design is judged as passed or caught: {other:?}"),
            };
            let first = d.first_failure.as_ref().map_or("-".to_owned(), |f| {
                let invariants: Vec<String> = f
                    .invariants
                    .iter()
                    .map(|i| i.invariant.to_string())
                    .collect();
                format!(
                    "{}@{} {:?} [{}]",
                    f.scenario,
                    f.seed,
                    f.verdict,
                    invariants.join(",")
                )
            });
            format!(
                "{} {state} first={first} seeds={} runs={} failed={}",
                d.design, d.seeds_tried, d.runs_tried, d.failed_runs
            )
        })
        .collect();
    lines.push(format!("verdict {:?}", report.verdict));
    let actual = lines.join("\n");
    let expect: Vec<&str> = expect
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(actual, expect.join("\n"));
    report
}

#[test]
fn every_mutant_caught_and_correct_clean_passes() {
    check(
        &["a", "b"],
        2,
        &[
            ("correct", ".. .."),
            ("check-then-insert", "F"),
            ("no-fingerprint", ".. .F"),
        ],
        "
        correct passed first=- seeds=2 runs=4 failed=0
        check-then-insert caught first=a@0 Fail [3,6] seeds=1 runs=1 failed=1
        no-fingerprint caught first=b@1 Fail [3,6] seeds=2 runs=4 failed=1
        verdict Pass
        ",
    );
}

#[test]
fn a_mutant_is_judged_on_its_first_failure_only() {
    // Runs past the first failure (speculative runs of another thread)
    // change nothing: not the count, not the failure reported.
    check(
        &["a", "b"],
        2,
        &[("correct", "...."), ("last-writer-wins", ".F E.")],
        "
        correct passed first=- seeds=2 runs=4 failed=0
        last-writer-wins caught first=b@0 Fail [3,6] seeds=1 runs=2 failed=1
        verdict Pass
        ",
    );
}

#[test]
fn a_mutant_that_survives_every_seed_fails_the_matrix() {
    check(
        &["a", "b"],
        2,
        &[("correct", "...."), ("blind-failover", "....")],
        "
        correct passed first=- seeds=2 runs=4 failed=0
        blind-failover NOT CAUGHT first=- seeds=2 runs=4 failed=0
        verdict Fail
        ",
    );
}

#[test]
fn a_mutant_whose_first_failure_is_an_error_is_not_caught() {
    // A run that could not finish is a bench error, not the oracle catching
    // the design, even when a later run would have caught it.
    check(
        &["a", "b"],
        1,
        &[("correct", ".."), ("timeout-is-failure", "EF")],
        "
        correct passed first=- seeds=1 runs=2 failed=0
        timeout-is-failure NOT CAUGHT first=a@0 Error [] seeds=1 runs=1 failed=1
        verdict Fail
        ",
    );
}

#[test]
fn the_correct_design_fails_on_any_failure_or_a_missing_run() {
    check(
        &["a", "b"],
        2,
        &[("correct", ".F .E"), ("check-then-insert", "F")],
        "
        correct FAILED first=b@0 Fail [3,6] seeds=2 runs=4 failed=2
        check-then-insert caught first=a@0 Fail [3,6] seeds=1 runs=1 failed=1
        verdict Fail
        ",
    );
    // Three runs of a four-run matrix: not a pass, however clean.
    check(
        &["a", "b"],
        2,
        &[("correct", ".. ."), ("check-then-insert", "F")],
        "
        correct FAILED first=- seeds=2 runs=3 failed=0
        check-then-insert caught first=a@0 Fail [3,6] seeds=1 runs=1 failed=1
        verdict Fail
        ",
    );
}

#[test]
fn the_report_json_names_designs_and_their_first_failures() -> Result<(), Box<dyn std::error::Error>>
{
    let report = check(
        &["double-click", "mismatched-payload"],
        1,
        &[("correct", ".."), ("check-then-insert", ".F")],
        "
        correct passed first=- seeds=1 runs=2 failed=0
        check-then-insert caught first=mismatched-payload@0 Fail [3,6] seeds=1 runs=2 failed=1
        verdict Pass
        ",
    );
    let json: serde_json::Value = serde_json::from_str(&report.to_json())?;
    assert_eq!(json["schema"], idem_reports::SCHEMA_VERSION);
    assert_eq!(json["verdict"], "pass");
    assert_eq!(
        json["build"]["commit"],
        "0123456789abcdef0123456789abcdef01234567"
    );
    assert_eq!(json["seeds"], serde_json::json!({"start": 0, "end": 1}));
    assert_eq!(
        json["scenarios"],
        serde_json::json!(["double-click", "mismatched-payload"])
    );
    let correct = &json["designs"][0];
    assert_eq!(correct["design"], "correct");
    assert_eq!(correct["role"], "correct");
    assert_eq!(correct["passed"], true);
    assert!(correct.get("caught").is_none(), "{correct}");
    assert!(correct["first_failure"].is_null());
    let mutant = &json["designs"][1];
    assert_eq!(mutant["design"], "check-then-insert");
    assert_eq!(mutant["role"], "mutant");
    assert_eq!(mutant["caught"], true);
    assert!(mutant.get("passed").is_none(), "{mutant}");
    assert_eq!(
        (&mutant["seeds_tried"], &mutant["runs_tried"]),
        (&1.into(), &2.into())
    );
    let first = &mutant["first_failure"];
    assert_eq!(first["scenario"], "mismatched-payload");
    assert_eq!(first["seed"], 0);
    assert_eq!(first["verdict"], "fail");
    assert_eq!(
        first["invariants"],
        serde_json::json!([
            {"invariant": 3, "name": "one_winner"},
            {"invariant": 6, "name": "losers_discarded"}
        ])
    );
    assert_eq!(first["violations"], 3);
    assert_eq!(first["message"], "one_winner broken");
    assert_eq!(
        first["reproduce"],
        "idem run mismatched-payload --seed 0 --design check-then-insert"
    );
    let back: MutantsReport = serde_json::from_value(json)?;
    assert_eq!(back, report);
    let table = report.to_text();
    assert!(
        table.contains("check-then-insert  caught"),
        "the table names each design and its result:\n{table}"
    );
    assert!(
        table.ends_with("PASS: correct passed 2 runs; 1 of 1 mutants caught\n"),
        "{table}"
    );
    Ok(())
}

#[test]
fn mutants_end_to_end_catches_every_mutant_in_two_seeds() -> Result<(), Box<dyn std::error::Error>>
{
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("mutants.json");
    let output = idem(&[
        "mutants",
        "--seeds",
        "2",
        "--format",
        "json",
        "--json",
        path.to_str().ok_or("utf-8 path")?,
    ]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}{}",
        text(&output.stdout),
        text(&output.stderr)
    );
    assert_eq!(std::fs::read(&path)?, output.stdout);
    let json: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    assert_eq!(json["verdict"], "pass");
    let designs = json["designs"].as_array().ok_or("designs")?;
    let names: Vec<&str> = designs
        .iter()
        .filter_map(|d| d["design"].as_str())
        .collect();
    let expected: Vec<&str> = idem_core::design::Design::ALL
        .iter()
        .map(|d| d.name())
        .collect();
    assert_eq!(names, expected);
    assert_eq!(
        designs[0]["runs_tried"].as_u64(),
        Some(2 * idem_scenarios::catalog().len() as u64)
    );
    for mutant in &designs[1..] {
        assert_eq!(mutant["caught"], true, "{mutant}");
        let design = mutant["design"].as_str().ok_or("design")?;
        let reproduce = mutant["first_failure"]["reproduce"]
            .as_str()
            .ok_or("reproduce")?;
        // Every mutant but check-then-insert under seed 0; that one's
        // race on double-click is first won under seed 1.
        let seed = if design == "check-then-insert" { 1 } else { 0 };
        assert!(
            reproduce.ends_with(&format!("--seed {seed} --design {design}")),
            "{reproduce}"
        );
    }
    Ok(())
}

#[test]
fn mutants_report_the_same_whatever_the_jobs() -> Result<(), Box<dyn std::error::Error>> {
    let mut outputs = Vec::new();
    for jobs in ["1", "3"] {
        let output = idem(&[
            "mutants",
            "--seeds",
            "3",
            "--scenarios",
            "key-reuse-after-completion,double-click",
            "--jobs",
            jobs,
        ]);
        // Most mutants survive two scenarios: the matrix fails.
        assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
        outputs.push(text(&output.stdout));
    }
    assert_eq!(outputs[0], outputs[1]);
    let table = &outputs[0];
    // Rows compared with their columns' padding collapsed.
    let rows: Vec<String> = table
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    for row in [
        "correct passed 3 6 -",
        "check-then-insert caught 2 3 double-click seed 1: invariant 1 (one_job_per_intent)",
        "no-fingerprint caught 1 2 key-reuse-after-completion seed 0: invariant 2 (mismatch_rejected)",
        "blind-failover NOT CAUGHT 3 6 -",
    ] {
        assert!(rows.iter().any(|r| r == row), "missing {row:?} in\n{table}");
    }
    assert!(table.contains("FAIL: correct passed 6 runs;"), "{table}");

    let output = idem(&["mutants", "--seeds", "0"]);
    assert_eq!(output.status.code(), Some(2), "no seeds is a usage error");
    let output = idem(&["mutants", "--scenarios", "no-such-scenario"]);
    assert_eq!(output.status.code(), Some(2));
    Ok(())
}

/// A sweep summary of runs reaching the given windows, gated or not.
fn sweep(runs: &[(&str, u64, &[&str])], gated: bool) -> SweepSummary {
    let records: Vec<RunRecord> = runs
        .iter()
        .map(|(scenario, seed, reached)| run(scenario, *seed, "correct", '.', reached))
        .collect();
    let scenarios: Vec<SweptScenario> = runs
        .iter()
        .map(|(scenario, _, _)| SweptScenario {
            name: (*scenario).to_owned(),
            expect_windows: Vec::new(),
        })
        .collect();
    SweepSummary::new(
        "correct",
        SeedRange { start: 0, end: 2 },
        Shard { index: 0, count: 1 },
        &scenarios,
        records,
        idem_reports::BuildStamp::from_build(
            "0.1.0",
            Some("0123456789abcdef0123456789abcdef01234567"),
            Some("false"),
        ),
    )
    .gate_windows(&window_names(), gated)
}

#[test]
fn the_coverage_gate_fails_a_whole_catalogue_sweep_missing_a_window()
-> Result<(), Box<dyn std::error::Error>> {
    let all = window_names();
    let (first_half, second_half) = all.split_at(all.len() / 2);
    let first: Vec<&str> = first_half.iter().map(String::as_str).collect();
    // Every window but the last.
    let most: Vec<&str> = second_half[..second_half.len() - 1]
        .iter()
        .map(String::as_str)
        .collect();
    let last = all.last().ok_or("windows")?.clone();
    let runs: [(&str, u64, &[&str]); 3] = [("a", 0, &first), ("a", 1, &first), ("b", 1, &most)];

    let gated = sweep(&runs, true);
    assert!(!gated.passed());
    assert_eq!(gated.coverage.never_reached, vec![last.clone()]);
    let names: Vec<&str> = gated
        .coverage
        .windows
        .iter()
        .map(|t| t.window.as_str())
        .collect();
    assert_eq!(
        names,
        all.iter().map(String::as_str).collect::<Vec<_>>(),
        "docs/MODEL.md's order"
    );
    let tally = &gated.coverage.windows[0];
    assert_eq!((tally.seeds, tally.runs, tally.total), (2, 2, 2));
    let tally = &gated.coverage.windows[first.len()];
    assert_eq!((tally.seeds, tally.runs, tally.total), (1, 1, 1));
    let table = gated.to_text();
    assert!(
        table.contains(last.as_str()) && table.contains("NEVER REACHED"),
        "{table}"
    );
    assert!(table.ends_with("1 race windows never reached\n"), "{table}");
    let json: serde_json::Value = serde_json::from_str(&gated.to_json())?;
    assert_eq!(json["verdict"], "fail");
    assert_eq!(json["coverage"]["gated"], true);
    assert_eq!(json["coverage"]["never_reached"], serde_json::json!([last]));
    let junit = idem_reports::junit::render(&gated)?;
    assert!(
        junit.contains(&format!("race window {last} was never reached")),
        "{junit}"
    );

    // The same runs, not the whole catalogue: reported, not judged.
    let ungated = sweep(&runs, false);
    assert!(ungated.passed());
    assert_eq!(ungated.coverage.never_reached, vec![last.clone()]);
    assert!(!idem_reports::junit::render(&ungated)?.contains("race windows"));

    // Every window reached somewhere: the gate holds.
    let rest: Vec<&str> = second_half.iter().map(String::as_str).collect();
    let covered = sweep(&[("a", 0, &first), ("b", 1, &rest)], true);
    assert!(covered.passed(), "{}", covered.to_text());
    assert!(covered.coverage.never_reached.is_empty());
    Ok(())
}

#[test]
fn a_summary_without_coverage_still_reads() -> Result<(), Box<dyn std::error::Error>> {
    let summary = sweep(&[("a", 0, &[])], false);
    let mut json: serde_json::Value = serde_json::from_str(&summary.to_json())?;
    json.as_object_mut().ok_or("object")?.remove("coverage");
    let back: SweepSummary = serde_json::from_value(json)?;
    assert!(!back.coverage.gated);
    assert!(back.coverage.windows.is_empty());
    Ok(())
}

#[test]
fn a_whole_catalogue_sweep_reports_and_gates_every_window() -> Result<(), Box<dyn std::error::Error>>
{
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("sweep.json");
    let output = idem(&[
        "sweep",
        "--all",
        "--seeds",
        "0..1",
        "--json",
        path.to_str().ok_or("utf-8 path")?,
    ]);
    let table = text(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{table}{}",
        text(&output.stderr)
    );
    assert!(
        table.contains("race windows over the sweep (each must be reached"),
        "{table}"
    );
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&path)?)?;
    assert_eq!(json["coverage"]["gated"], true);
    let windows: Vec<&str> = json["coverage"]["windows"]
        .as_array()
        .ok_or("windows")?
        .iter()
        .filter_map(|t| t["window"].as_str())
        .collect();
    assert_eq!(
        windows,
        window_names()
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
    );

    // One scenario is not the catalogue: its coverage is listed, not gated.
    let output = idem(&["sweep", "double-click", "--seeds", "0..1"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stdout));
    assert!(text(&output.stdout).contains("race windows over the sweep:"));
    Ok(())
}

/// Where a naive design's failure shows: a catalogue scenario, or a small
/// world of its own.
enum World {
    Catalogue(&'static str),
    File(&'static str),
}

/// Two owners pick the same key for the same request: keys scoped
/// globally answer the second with the first owner's job.
const SAME_KEY_SAME_BODY: &str = "description = \"two owners, one key, one body\"\n\
    [[clients]]\nname = \"alice\"\nactions = [{ action = \"click\", key = \"order-1\", params = { item = \"book\" } }]\n\
    [[clients]]\nname = \"bob\"\nactions = [{ action = \"click\", key = \"order-1\", at_ms = 200, params = { item = \"book\" } }]\n";

/// For every invariant, a naive design that breaks it, where and under
/// which seed (docs/MODEL.md, "Which design breaks which invariant").
const BROKEN_BY: &[(u64, &str, World, u64)] = &[
    (1, "check-then-insert", World::Catalogue("double-click"), 1),
    (
        2,
        "no-fingerprint",
        World::Catalogue("mismatched-payload"),
        0,
    ),
    (2, "global-key", World::Catalogue("cross-owner-same-key"), 0),
    (
        3,
        "last-writer-wins",
        World::Catalogue("out-of-order-completion"),
        0,
    ),
    (
        4,
        "unguarded-attempts",
        World::Catalogue("backup-button"),
        0,
    ),
    (
        5,
        "timeout-is-failure",
        World::Catalogue("timeout-unknown"),
        0,
    ),
    (
        6,
        "lost-ack-means-lost",
        World::Catalogue("lost-ack-on-commit"),
        0,
    ),
    (7, "blind-failover", World::Catalogue("model-change"), 0),
    (8, "global-key", World::File(SAME_KEY_SAME_BODY), 0),
    (
        9,
        "unguarded-attempts",
        World::Catalogue("backup-button"),
        0,
    ),
    (
        12,
        "wall-clock-deadlines",
        World::Catalogue("clock-jump"),
        0,
    ),
];

/// The invariants no naive design breaks yet, each with the reason
/// docs/MODEL.md gives.
const BROKEN_BY_NONE: &[(u64, &str)] = &[
    (
        10,
        "every design settles jobs with the same worker and reconciler; the oracle's own runs hold the check",
    ),
    (
        11,
        "every design answers a create after the store committed it; the oracle's own runs hold the check",
    ),
];

#[test]
fn every_invariant_is_broken_by_a_naive_design_or_says_why_none_does()
-> Result<(), Box<dyn std::error::Error>> {
    let listed: std::collections::BTreeSet<u64> = BROKEN_BY
        .iter()
        .map(|(i, ..)| *i)
        .chain(BROKEN_BY_NONE.iter().map(|(i, _)| *i))
        .collect();
    let every: std::collections::BTreeSet<u64> = idem_oracle::Invariant::ALL
        .iter()
        .map(|i| u64::from(i.number()))
        .collect();
    assert_eq!(
        listed, every,
        "each invariant is broken by a design, or says why not"
    );
    let dir = tempfile::tempdir()?;
    for (invariant, design, world, seed) in BROKEN_BY {
        let scenario = match world {
            World::Catalogue(name) => (*name).to_owned(),
            World::File(text) => {
                let file = dir.path().join(format!("invariant-{invariant}.toml"));
                std::fs::write(&file, text)?;
                file.display().to_string()
            }
        };
        let seed = seed.to_string();
        let run = |design: &str| {
            let output = idem(&[
                "run", &scenario, "--seed", &seed, "--design", design, "--format", "json",
            ]);
            let record: serde_json::Value =
                serde_json::from_slice(&output.stdout).unwrap_or(serde_json::Value::Null);
            (output.status.code(), record)
        };
        let (code, record) = run(design);
        assert_eq!(code, Some(1), "{design} on {scenario}: {record}");
        let violations = record["violations"].as_array().ok_or("violations")?;
        assert!(
            violations.iter().any(|v| v["invariant"] == *invariant),
            "{design} breaks invariant {invariant} on {scenario} seed {seed}: {record}"
        );
        assert_eq!(
            run("correct").0,
            Some(0),
            "correct on {scenario} seed {seed}"
        );
    }
    Ok(())
}
