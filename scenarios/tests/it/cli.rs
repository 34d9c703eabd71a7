//! The `idem` binary end to end: exit codes and outputs.

use std::path::Path;
use std::process::{Command, Output};

fn idem(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(args)
        .output()
        .expect("the idem binary runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn list_names_every_scenario() -> Result<(), Box<dyn std::error::Error>> {
    let output = idem(&["list", "--format", "json"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let entries: Vec<serde_json::Value> = serde_json::from_slice(&output.stdout)?;
    assert_eq!(entries.len(), idem_scenarios::catalog().len());
    assert!(
        entries
            .iter()
            .all(|e| e["description"].as_str().is_some_and(|d| !d.is_empty()))
    );
    Ok(())
}

#[test]
fn run_prints_the_verdict_and_the_repro() -> Result<(), Box<dyn std::error::Error>> {
    let output = idem(&["run", "double-click", "--seed", "7"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.contains("verdict: PASS"), "{text}");
    assert!(
        text.contains("reproduce with: idem run double-click --seed 7"),
        "{text}"
    );

    let output = idem(&["run", "double-click", "--seed", "7", "--format", "json"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    for field in [
        "scenario",
        "seed",
        "design",
        "verdict",
        "violations",
        "windows",
        "trace_hash",
        "steps",
        "sim_ms",
        "stop",
    ] {
        assert!(json.get(field).is_some(), "missing {field} in {json}");
    }
    assert_eq!(json["verdict"], "pass");
    assert_eq!(json["design"], "correct");
    assert_eq!(
        json["windows"].as_object().map(|w| w.len()),
        Some(idem_sim::scenario::Window::ALL.len())
    );
    Ok(())
}

/// `idem run` with its environment.
fn idem_with(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_idem"));
    command.args(args).env_remove("IDEM_SEED");
    command.envs(env.iter().copied());
    command.output().expect("the idem binary runs")
}

#[test]
fn idem_seed_gives_run_its_seed() -> Result<(), Box<dyn std::error::Error>> {
    let by_flag = idem_with(&["run", "double-click", "--seed", "7"], &[]);
    let by_env = idem_with(&["run", "double-click"], &[("IDEM_SEED", "7")]);
    assert_eq!(by_env.status.code(), Some(0), "{}", stderr(&by_env));
    assert_eq!(stdout(&by_env), stdout(&by_flag));
    // The flag wins over the environment.
    let both = idem_with(
        &["run", "double-click", "--seed", "7"],
        &[("IDEM_SEED", "8")],
    );
    assert_eq!(stdout(&both), stdout(&by_flag));
    let other = idem_with(&["run", "double-click"], &[("IDEM_SEED", "8")]);
    assert_ne!(stdout(&other), stdout(&by_flag));
    Ok(())
}

#[test]
fn run_without_a_seed_draws_one_and_prints_it_first() -> Result<(), Box<dyn std::error::Error>> {
    let drawn = idem_with(&["run", "double-click"], &[]);
    assert_eq!(drawn.status.code(), Some(0), "{}", stderr(&drawn));
    let text = stdout(&drawn);
    let first = text.lines().next().ok_or("no output")?;
    let seed: u64 = first
        .strip_prefix("seed ")
        .and_then(|rest| rest.split_whitespace().next())
        .ok_or_else(|| format!("the first line names no seed: {first}"))?
        .parse()?;
    assert!(first.contains("drawn at random"), "{first}");
    // The rest is the run of that seed, as --seed gives it.
    let again = idem_with(&["run", "double-click", "--seed", &seed.to_string()], &[]);
    assert_eq!(text[first.len() + 1..], stdout(&again));
    // In JSON the note goes to stderr, and the record names the seed.
    let json = idem_with(&["run", "double-click", "--format", "json"], &[]);
    let record: serde_json::Value = serde_json::from_slice(&json.stdout)?;
    let seed = record["seed"].as_u64().ok_or("a seed")?;
    assert!(
        stderr(&json).starts_with(&format!("seed {seed} (drawn at random")),
        "{}",
        stderr(&json)
    );
    Ok(())
}

#[test]
fn the_same_seed_gives_the_same_trace() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let (a, b) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
    for path in [&a, &b] {
        let path = path.to_str().ok_or("utf-8 path")?;
        let output = idem(&["run", "lost-ack-on-commit", "--seed", "3", "--trace", path]);
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    }
    assert_eq!(std::fs::read(&a)?, std::fs::read(&b)?);
    let output = idem(&["check-determinism", "lost-ack-on-commit", "--seed", "3"]);
    assert_eq!(output.status.code(), Some(0), "{}", stdout(&output));
    assert!(stdout(&output).contains("deterministic"));
    Ok(())
}

#[test]
fn a_malformed_file_exits_2_with_its_position() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("broken.toml");
    std::fs::write(&path, "[[clients]]\nname = 'a'\n[timing]\ntick_ms = 0\n")?;
    let path = path.to_str().ok_or("utf-8 path")?;
    let output = idem(&["run", path, "--seed", "1"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).starts_with(&format!("{path}:4:11: `tick_ms` must be at least 1")),
        "{}",
        stderr(&output)
    );

    let output = idem(&["run", "no-such-scenario", "--seed", "1"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("idem list"), "{}", stderr(&output));

    let output = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(["run", "double-click"])
        .env("IDEM_SEED", "seven")
        .output()?;
    assert_eq!(output.status.code(), Some(2), "IDEM_SEED is a number");

    // Sweeps and matrices key their runs by scenario name.
    for args in [
        &["sweep", "double-click", "double-click", "--seeds", "0..1"][..],
        &[
            "mutants",
            "--scenarios",
            "double-click,double-click",
            "--seeds",
            "1",
        ],
    ] {
        let output = idem(args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert!(
            stderr(&output).contains("two scenarios are named \"double-click\""),
            "{}",
            stderr(&output)
        );
    }
    Ok(())
}

#[test]
fn sweeps_are_the_same_whatever_the_jobs() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let mut summaries = Vec::new();
    for jobs in ["1", "3"] {
        let json = dir.path().join(format!("sweep-{jobs}.json"));
        let junit = dir.path().join(format!("sweep-{jobs}.xml"));
        let output = idem(&[
            "sweep",
            "double-click",
            "mismatched-payload",
            "--seeds",
            "0..4",
            "--jobs",
            jobs,
            "--json",
            json.to_str().ok_or("utf-8 path")?,
            "--junit",
            junit.to_str().ok_or("utf-8 path")?,
        ]);
        assert_eq!(
            output.status.code(),
            Some(0),
            "{}{}",
            stdout(&output),
            stderr(&output)
        );
        summaries.push((
            stdout(&output),
            std::fs::read(&json)?,
            std::fs::read(&junit)?,
        ));
    }
    assert_eq!(summaries[0], summaries[1]);
    let summary: serde_json::Value = serde_json::from_slice(&summaries[0].1)?;
    assert_eq!(summary["verdict"], "pass");
    assert_eq!(summary["runs"].as_array().map(Vec::len), Some(8));
    Ok(())
}

#[test]
fn a_sweep_fails_when_an_expected_window_is_never_reached() -> Result<(), Box<dyn std::error::Error>>
{
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("quiet.toml");
    std::fs::write(
        &path,
        "expect_windows = ['cas_loser']\n[[clients]]\nname = 'a'\nactions = [{ action = 'click', key = 'k' }]\n",
    )?;
    let output = idem(&[
        "sweep",
        path.to_str().ok_or("utf-8 path")?,
        "--seeds",
        "0..2",
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", stdout(&output));
    assert!(
        stdout(&output).contains("expected window cas_loser was never reached"),
        "{}",
        stdout(&output)
    );
    assert!(Path::new(&path).exists());
    Ok(())
}
