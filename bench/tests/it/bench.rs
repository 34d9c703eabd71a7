//! `idem bench --quick`: the bench's one bounded invocation in the test
//! suite (the full bench runs by hand; see README). It checks the bench
//! works end to end, not the machine's figures.

use std::process::Command;

use idem_bench::bench::{README_END, README_START};

#[test]
fn a_quick_bench_writes_its_report_and_the_readme_table() -> Result<(), Box<dyn std::error::Error>>
{
    let dir = tempfile::tempdir()?;
    let readme = dir.path().join("README.md");
    std::fs::write(
        &readme,
        format!("# x\n\n{README_START}\nold\n{README_END}\n\nafter\n"),
    )?;
    let out = dir.path().join("bench");
    let output = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(["bench", "--quick", "--jobs", "2", "--out"])
        .arg(&out)
        .arg("--readme")
        .arg(&readme)
        .output()?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("latest.json"))?)?;
    assert_eq!(report["quick"], true);
    // The PostgreSQL section ran against its throwaway server (the details
    // are checked by the pgbench test): every path at both client counts,
    // and every answer as it must be.
    let postgres = &report["postgres"];
    assert_eq!(
        postgres["points"].as_array().map(Vec::len),
        Some(8),
        "{postgres}"
    );
    assert_eq!(postgres["checks"]["duplicate_rows"], 0, "{postgres}");
    assert_eq!(
        postgres["checks"]["violations"],
        serde_json::json!([]),
        "{postgres}"
    );
    assert_eq!(
        postgres["pg_vs_pgbench_throughput_ratio"]
            .as_array()
            .map(Vec::len),
        Some(2),
        "{postgres}"
    );
    assert_eq!(
        postgres["server_vs_minimal"].as_array().map(Vec::len),
        Some(2),
        "{postgres}"
    );
    assert!(report["cores"].as_u64().is_some_and(|c| c >= 1));
    let sim = &report["simulator"];
    let scenarios = sim["scenarios"].as_array().ok_or("scenarios")?;
    assert_eq!(scenarios.len(), idem_scenarios::catalog().len());
    for s in scenarios {
        let ratio = s["sim_vs_turmoil_cost_ratio"].as_f64().ok_or("ratio")?;
        assert!(ratio > 0.0 && ratio.is_finite(), "{s}");
        assert!(
            s["segments_per_seed"].as_f64().is_some_and(|n| n > 0.0),
            "{s}"
        );
        assert_eq!(s["not_passed"], 0, "{s}");
    }
    assert_eq!(sim["catalogue_x1000_extrapolated"], true);
    assert!(
        sim["catalogue_x1000_seconds"]
            .as_f64()
            .is_some_and(|t| t > 0.0)
    );
    assert_eq!(
        sim["catalogue"]["runs"].as_u64(),
        Some(2 * scenarios.len() as u64)
    );
    assert_eq!(sim["scaling"]["jobs"], 2);
    assert_eq!(sim["fuzz"]["worlds"], 4, "{sim}");
    assert_eq!(sim["fuzz"]["passed"], 4, "{sim}");
    assert!(
        sim["fuzz_worlds_per_second"]
            .as_f64()
            .is_some_and(|w| w > 0.0 && w.is_finite()),
        "{sim}"
    );
    let text = std::fs::read_to_string(&readme)?;
    assert!(!text.contains("\nold\n"), "{text}");
    assert!(text.contains("| double-click |"), "{text}");
    assert!(
        text.ends_with(&format!("{README_END}\n\nafter\n")),
        "{text}"
    );
    assert_eq!(
        std::fs::read_to_string(out.join("latest.md"))?,
        text[text.find(README_START).ok_or("start")? + README_START.len() + 1
            ..text.find(README_END).ok_or("end")?]
    );
    Ok(())
}

#[test]
fn a_readme_without_the_markers_is_refused_before_any_bench()
-> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let readme = dir.path().join("README.md");
    std::fs::write(&readme, "# no markers\n")?;
    let output = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(["bench", "--quick", "--out"])
        .arg(dir.path().join("bench"))
        .arg("--readme")
        .arg(&readme)
        .output()?;
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("no bench markers"));
    assert!(!dir.path().join("bench").exists());
    Ok(())
}
