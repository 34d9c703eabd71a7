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

/// Check-then-insert fails double-click seed 1 in most redraws, not all.
/// Scanned decision by decision (100 samples each), P(fail) wanders
/// between 55% and 97% up to decision 28 and is 100% from decision 29 on:
/// the first create's insert reaching the store at 25 ms, after the
/// second create's lookup reached it at 21 ms and found no job. The
/// explanation must find that decision by its search from the end, with
/// P(fail) rising across it, and name the race in the run's terms.
#[test]
fn one_failing_run_names_its_decisive_decision() -> Result {
    let (words, json) = explain_run("double-click", "1", "check-then-insert", "50")?;
    assert_eq!(json["kind"], "explain_run");
    assert_eq!(json["invariant"], 1, "{words}");
    let curve = json["curve"].as_array().ok_or("a curve")?;
    let first = &curve[0];
    assert_eq!(first["kept"], 0);
    assert!(estimate(&first["fails"])? < 0.9, "{words}");
    let decisive = &json["decisive"];
    assert!(
        estimate(&decisive["before"])? < estimate(&decisive["after"])?,
        "{words}"
    );
    assert_eq!(json["forced"], serde_json::Value::Null, "{words}");
    // The same decisive decision is the first line after the failure.
    let line = words.lines().nth(1).ok_or("a second line")?;
    assert!(line.starts_with("decisive: decision #"), "{words}");
    let named = decisive["words"].as_str().ok_or("words")?;
    assert!(line.contains(named), "{words}");
    assert!(
        named.contains("first CreateJob call reaching store")
            && named.contains("another create's lookup")
            && named.contains("found no job"),
        "named in the run's terms: {words}"
    );
    assert_eq!(decisive["decision"]["index"], 28, "{words}");
    let at_ms = decisive["decision"]["t_ms"].as_u64().ok_or("t_ms")?;
    assert!(
        at_ms < 30,
        "decided at {at_ms} ms, after the creates: {words}"
    );
    // Each decision up to it was estimated, the decisive one first: with
    // what follows it redrawn, the numbers are the decisive line's, and
    // keeping it raises P(fail), whatever its redraw alone says (the
    // later decisions, kept, were drawn in the world it made).
    let necessity = json["necessity"].as_array().ok_or("necessity")?;
    assert_eq!(necessity[0]["decision"], decisive["decision"]);
    assert_eq!(necessity[0]["fails_redrawn_onward"], decisive["before"]);
    assert_eq!(necessity[0]["fails_kept"], decisive["after"]);
    assert_eq!(necessity[0]["effect"], "raises", "{words}");
    let listed = words
        .lines()
        .find(|l| l.starts_with(&format!("  #{} ", 29)))
        .ok_or("the decisive decision's line")?;
    assert!(listed.contains("raises P(fail)"), "{words}");
    assert!(!words.contains("optional"), "{words}");
    assert!(json["runs"].as_u64().ok_or("runs")? >= 50 * 3);
    Ok(())
}

/// One naive design's first failing catalogue run, and what its
/// explanation must name: `Some(kind)` for the kind of the decisive
/// decision, `None` for a failure the world forces, with words its naming
/// must contain.
struct Case {
    scenario: &'static str,
    seed: &'static str,
    design: &'static str,
    decisive_kind: Option<&'static str>,
    words: &'static str,
}

/// The one entry point of the data-driven explanation tests.
fn check(case: &Case) -> Result {
    let (text, json) = explain_run(case.scenario, case.seed, case.design, "20")?;
    match case.decisive_kind {
        Some(kind) => {
            let decisive = &json["decisive"];
            assert_eq!(decisive["decision"]["subject"]["kind"], kind, "{text}");
            let words = decisive["words"].as_str().ok_or("words")?;
            assert!(words.contains(case.words), "{text}");
        }
        None => {
            assert_eq!(json["decisive"], serde_json::Value::Null, "{text}");
            assert!(text.contains("no draw decides it"), "{text}");
            let forced = &json["forced"];
            let words = forced["words"].as_str().ok_or("forced words")?;
            assert!(words.contains(case.words), "{text}");
            let events = forced["events"].as_array().ok_or("cited events")?;
            assert!(!events.is_empty(), "{text}");
        }
    }
    Ok(())
}

/// Three naive designs: one decided by a draw, two forced by their
/// catalogue world and named from the violation's evidence.
#[test]
fn naive_designs_name_what_their_failure_turns_on() -> Result {
    for case in [
        // Session-scoped keys fail only when the reused key reaches the
        // other replica: the decisive decision is that request's replica
        // choice.
        Case {
            scenario: "key-reuse-after-completion",
            seed: "0",
            design: "session-scoped-key",
            decisive_kind: Some("client_replica"),
            words: "went to api-",
        },
        // The late primary's completion is written over the fallback's,
        // whatever the draws.
        Case {
            scenario: "out-of-order-completion",
            seed: "0",
            design: "last-writer-wins",
            decisive_kind: None,
            words: "the late completion of attempt #1",
        },
        // A stale certificate is used once the model changed, whatever the
        // draws: the change and the start are what it rests on.
        Case {
            scenario: "model-change",
            seed: "0",
            design: "blind-failover",
            decisive_kind: None,
            words: "the fault plan fired provider_model_change",
        },
    ] {
        check(&case)?;
    }
    Ok(())
}

#[test]
fn a_passing_run_has_nothing_to_explain() {
    let output = idem(&["explain", "double-click", "--seed", "1"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).contains("no failure to explain"));
}
