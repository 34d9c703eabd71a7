//! `idem explain --fuzz` end to end: a naive design's known weakness comes
//! out as its top trigger, the counts add up, the JSON is the same bytes
//! whatever the threads, and bad input exits 2.

use std::process::{Command, Output};

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

fn idem(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(args)
        .env_remove("IDEM_SEED")
        .output()
        .expect("the idem binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Worlds that check-then-insert fails often enough, and with and
/// without double clicks, for its weakness to show (measured: 17 of 40
/// fail, every one with a double click; 7 worlds have none).
const CHECK_THEN_INSERT_SEEDS: &str = "0..40";

/// Runs `idem explain --fuzz` and returns its text and JSON.
fn explain(seeds: &str, design: &str, jobs: &str) -> Result<(String, serde_json::Value, Vec<u8>)> {
    let dir = tempfile::tempdir()?;
    let json = dir.path().join("explain.json");
    let output = idem(&[
        "explain",
        "--fuzz",
        "--seeds",
        seeds,
        "--design",
        design,
        "--jobs",
        jobs,
        "--json",
        json.to_str().ok_or("utf-8 path")?,
    ]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}{}",
        text(&output.stdout),
        text(&output.stderr)
    );
    let bytes = std::fs::read(&json)?;
    Ok((text(&output.stdout), serde_json::from_slice(&bytes)?, bytes))
}

fn count(value: &serde_json::Value) -> Result<u64> {
    Ok(value
        .as_u64()
        .ok_or_else(|| format!("{value} is not a count"))?)
}

#[test]
fn double_clicks_trigger_check_then_insert() -> Result {
    let (table, json, _) = explain(CHECK_THEN_INSERT_SEEDS, "check-then-insert", "2")?;
    assert_eq!(json["kind"], "explain_fuzz");
    let totals = &json["totals"];
    let judged = count(&totals["passed"])? + count(&totals["failed"])?;
    assert_eq!(
        judged + count(&totals["could_not_finish"])?,
        count(&totals["worlds"])?
    );
    assert_eq!(json["worlds"].as_array().map(Vec::len), Some(40));
    let ranked = json["ranked"].as_array().ok_or("ranked")?;
    for row in ranked {
        let (present, absent) = (&row["present"], &row["absent"]);
        assert_eq!(
            count(&present["trials"])? + count(&absent["trials"])?,
            judged,
            "{row}"
        );
        assert_eq!(
            count(&present["successes"])? + count(&absent["successes"])?,
            count(&totals["failed"])?,
            "{row}"
        );
        let low = row["difference"]["interval"]["low"].as_f64().ok_or("low")?;
        let high = row["difference"]["interval"]["high"]
            .as_f64()
            .ok_or("high")?;
        let estimate = row["difference"]["estimate"].as_f64().ok_or("estimate")?;
        assert!(low <= estimate && estimate <= high, "{row}");
    }
    // The design's race needs two creates of one key in flight at once:
    // a double click leads the triggers (any, or three and more, by
    // measure), and no world without one fails.
    let first = &ranked[0];
    assert!(
        first["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("users.double_click")),
        "{table}"
    );
    assert_eq!(first["effect"], "trigger", "{table}");
    let double = ranked
        .iter()
        .find(|row| row["id"] == "users.double_click")
        .ok_or("the double-click row")?;
    assert_eq!(double["effect"], "trigger", "{table}");
    assert_eq!(count(&double["absent"]["successes"])?, 0, "{table}");
    let triggers = table.find("triggers").ok_or("a triggers section")?;
    let double = table.find("a double click").ok_or("the trigger's label")?;
    let unclear = table.find("no clear effect").ok_or("the unclear section")?;
    assert!(triggers < double && double < unclear, "{table}");
    Ok(())
}

#[test]
fn the_json_is_the_same_bytes_whatever_the_threads() -> Result {
    let (_, _, one) = explain("3..9", "timeout-is-failure", "1")?;
    let (_, _, two) = explain("3..9", "timeout-is-failure", "2")?;
    assert_eq!(one, two);
    Ok(())
}

#[test]
fn bad_input_exits_2() {
    for args in [
        &[
            "explain",
            "--seeds",
            "0..4",
            "--design",
            "check-then-insert",
        ][..],
        &[
            "explain",
            "--fuzz",
            "--seeds",
            "4..2",
            "--design",
            "check-then-insert",
        ],
        &[
            "explain", "--fuzz", "--seeds", "0..4", "--design", "nonsense",
        ],
        &["explain", "--fuzz", "--design", "check-then-insert"],
    ] {
        let output = idem(args);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&output.stderr)
        );
    }
}

/// Runs `idem explain SCENARIO --seed N` and returns its text and JSON.
fn explain_run(
    scenario: &str,
    seed: &str,
    design: &str,
    samples: &str,
) -> Result<(String, serde_json::Value)> {
    let dir = tempfile::tempdir()?;
    let json = dir.path().join("explain.json");
    let output = idem(&[
        "explain",
        scenario,
        "--seed",
        seed,
        "--design",
        design,
        "--samples",
        samples,
        "--json",
        json.to_str().ok_or("utf-8 path")?,
    ]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}{}",
        text(&output.stdout),
        text(&output.stderr)
    );
    Ok((
        text(&output.stdout),
        serde_json::from_slice(&std::fs::read(&json)?)?,
    ))
}

fn estimate(proportion: &serde_json::Value) -> Result<f64> {
    Ok(proportion["estimate"].as_f64().ok_or("an estimate")?)
}

/// Check-then-insert fails double-click seed 1 in most redraws, not all:
/// the explanation must find the decision after which it became likely,
/// made before the first job was committed (the race is decided by then),
/// with P(fail) below the threshold before it and at or above it after.
#[test]
fn one_failing_run_names_its_decisive_decision() -> Result {
    let (words, json) = explain_run("double-click", "1", "check-then-insert", "30")?;
    assert_eq!(json["kind"], "explain_run");
    assert_eq!(json["invariant"], 1, "{words}");
    let curve = json["curve"].as_array().ok_or("a curve")?;
    let first = &curve[0];
    assert_eq!(first["kept"], 0);
    assert!(estimate(&first["fails"])? < 0.9, "{words}");
    let likely_from = json["likely_from"].as_f64().ok_or("likely_from")?;
    let decisive = &json["decisive"];
    assert!(estimate(&decisive["before"])? < likely_from, "{words}");
    assert!(estimate(&decisive["after"])? >= likely_from, "{words}");
    // The same decisive decision is the first line after the failure.
    let line = words.lines().nth(1).ok_or("a second line")?;
    assert!(line.starts_with("decisive: decision #"), "{words}");
    assert!(
        line.contains(decisive["words"].as_str().ok_or("words")?),
        "{words}"
    );
    let at_ms = decisive["decision"]["t_ms"].as_u64().ok_or("t_ms")?;
    assert!(
        at_ms < 30,
        "decided at {at_ms} ms, after the creates: {words}"
    );
    // Each decision redrawn alone was estimated, the decisive one first.
    let necessity = json["necessity"].as_array().ok_or("necessity")?;
    assert_eq!(necessity[0]["decision"], decisive["decision"]);
    assert!(json["runs"].as_u64().ok_or("runs")? >= 30 * 3);
    Ok(())
}

/// A catalogue world built to fail a design whatever the draws: the
/// explanation says so instead of naming a decision.
#[test]
fn a_failure_the_world_makes_names_no_decision() -> Result {
    let (words, json) = explain_run("out-of-order-completion", "0", "last-writer-wins", "20")?;
    assert_eq!(json["decisive"], serde_json::Value::Null, "{words}");
    assert!(words.contains("the world makes it"), "{words}");
    Ok(())
}

#[test]
fn a_passing_run_has_nothing_to_explain() {
    let output = idem(&["explain", "double-click", "--seed", "1"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).contains("no failure to explain"));
}

/// Session-scoped keys fail only when the reused key reaches the other
/// replica: the decisive decision is that request's replica choice, and
/// redrawing it alone makes the failure unlikely.
#[test]
fn a_session_scoped_key_fails_on_the_replica_choice() -> Result {
    let (words, json) = explain_run(
        "key-reuse-after-completion",
        "0",
        "session-scoped-key",
        "20",
    )?;
    let decisive = &json["decisive"];
    assert_eq!(
        decisive["decision"]["subject"]["kind"], "client_replica",
        "{words}"
    );
    let necessity = json["necessity"].as_array().ok_or("necessity")?;
    assert_eq!(necessity[0]["needed"], true, "{words}");
    Ok(())
}
