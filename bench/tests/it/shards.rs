//! Shards that merge: `idem merge` of the shards of a sweep or a fuzz run
//! gives the unsharded run's summary, exit code and window-coverage gate,
//! byte for byte in JSON. The shards run as separate, concurrent processes
//! through deploy/shard.sh, the script the GitHub Actions matrix and the
//! Kubernetes Indexed Job run (with JOB_COMPLETION_INDEX set as Kubernetes
//! sets it), so the mechanics of many machines are the ones checked here.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

fn idem(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(args)
        .output()
        .expect("the idem binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

/// Starts shard `index` of `count` through deploy/shard.sh, as pod `index`
/// of an Indexed Job would (`kubernetes`) or as a matrix job would.
fn start_shard(
    index: usize,
    count: usize,
    kubernetes: bool,
    env: &[(&str, &str)],
    out: &Path,
) -> std::io::Result<Child> {
    let mut command = Command::new("bash");
    command
        .arg(repo().join("deploy/shard.sh"))
        .env("IDEM", env!("CARGO_BIN_EXE_idem"))
        .env("SHARD_COUNT", count.to_string())
        .env("IDEM_SHARD_OUT", out)
        .env("IDEM_SHARD_JOBS", "1")
        .env_remove("SHARD_INDEX")
        .env_remove("JOB_COMPLETION_INDEX")
        .envs(env.iter().copied());
    command.env(
        if kubernetes {
            "JOB_COMPLETION_INDEX"
        } else {
            "SHARD_INDEX"
        },
        index.to_string(),
    );
    command.stdout(std::process::Stdio::piped());
    command.stderr(std::process::Stdio::piped());
    command.spawn()
}

/// Runs `count` shards at once, each its own process, and merges them.
fn sharded(
    count: usize,
    kubernetes: bool,
    env: &[(&str, &str)],
    out: &Path,
) -> Result<(Output, Vec<u8>)> {
    let children = (0..count)
        .map(|i| start_shard(i, count, kubernetes, env, out))
        .collect::<std::io::Result<Vec<_>>>()?;
    let mut files = Vec::new();
    for (i, child) in children.into_iter().enumerate() {
        let output = child.wait_with_output()?;
        assert_eq!(
            output.status.code(),
            Some(0),
            "shard {i}: {}{}",
            text(&output.stdout),
            text(&output.stderr)
        );
        files.push(out.join(format!("shard-{i}-of-{count}.json")));
    }
    let merged = out.join("merged.json");
    let mut args = vec!["merge".to_owned()];
    args.extend(files.iter().map(|f| f.display().to_string()));
    args.extend(["--json".to_owned(), merged.display().to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let output = idem(&args);
    Ok((output, std::fs::read(&merged).unwrap_or_default()))
}

/// The unsharded run, as deploy/shard.sh would start it with one shard.
fn whole(env: &[(&str, &str)], out: &Path) -> Result<(Output, Vec<u8>)> {
    let output = start_shard(0, 1, false, env, out)?.wait_with_output()?;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let json = out.join("shard-0-of-1.json");
    // Its own verdict, from the file: merging one shard is the run itself.
    let verdict = idem(&["merge", json.to_str().ok_or("utf-8 path")?]);
    Ok((verdict, std::fs::read(json)?))
}

/// The merged summary equals the unsharded one in every byte, and so do
/// the printed summary and the exit code.
fn check(env: &[(&str, &str)], count: usize, kubernetes: bool, exit: i32) -> Result {
    let dir = tempfile::tempdir()?;
    let (one, many) = (dir.path().join("one"), dir.path().join("many"));
    let (whole_output, whole_json) = whole(env, &one)?;
    let (merged_output, merged_json) = sharded(count, kubernetes, env, &many)?;
    assert_eq!(whole_output.status.code(), Some(exit), "{env:?}");
    assert_eq!(
        merged_output.status.code(),
        Some(exit),
        "{env:?}: {}",
        text(&merged_output.stderr)
    );
    assert_eq!(text(&merged_output.stdout), text(&whole_output.stdout));
    assert!(
        merged_json == whole_json,
        "{env:?}: the merged summary differs from the unsharded one:\n{}\n---\n{}",
        text(&merged_json),
        text(&whole_json)
    );
    Ok(())
}

#[test]
fn merged_sweep_shards_equal_the_unsharded_sweep() -> Result {
    // Six seeds of the whole catalogue reach every race window (measured),
    // though a shard of two seeds alone need not: the gate is the merge's.
    check(&[("IDEM_SHARD_SEEDS", "0..6")], 3, true, 0)
}

#[test]
fn merged_sweep_shards_of_a_naive_design_fail_alike() -> Result {
    check(
        &[
            ("IDEM_SHARD_SEEDS", "0..4"),
            ("IDEM_SHARD_DESIGN", "check-then-insert"),
        ],
        2,
        false,
        1,
    )
}

#[test]
fn merged_fuzz_shards_equal_the_unsharded_fuzz_run() -> Result {
    check(
        &[("IDEM_SHARD_MODE", "fuzz"), ("IDEM_SHARD_SEEDS", "0..4")],
        2,
        true,
        0,
    )
}

#[test]
fn a_missing_or_repeated_shard_is_refused() -> Result {
    let dir = tempfile::tempdir()?;
    let env = [("IDEM_SHARD_SEEDS", "0..3")];
    for i in 0..2 {
        let output = start_shard(i, 3, false, &env, dir.path())?.wait_with_output()?;
        assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    }
    let shard = |i: usize| dir.path().join(format!("shard-{i}-of-3.json"));
    let (zero, one) = (shard(0), shard(1));
    let (zero, one) = (zero.to_str().ok_or("utf-8")?, one.to_str().ok_or("utf-8")?);
    for args in [&["merge", zero, one][..], &["merge", zero, zero, one]] {
        let output = idem(args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert!(!text(&output.stderr).is_empty());
    }
    Ok(())
}

/// A sweep of the whole catalogue over `seeds`, its JSON summary at `json`.
fn sweep_range(seeds: &str, design: &str, json: &Path) -> Output {
    let json = json.to_str().expect("a utf-8 temporary path");
    let args = [
        "sweep", "--all", "--seeds", seeds, "--design", design, "--jobs", "1",
    ];
    idem(&[&args[..], &["--json", json]].concat())
}

/// Sweeps of adjacent seed ranges, started apart, merge into the sweep of
/// their union, byte for byte; ranges with a gap or an overlap are refused.
#[test]
fn adjacent_seed_ranges_merge_into_the_sweep_of_their_union() -> Result {
    let dir = tempfile::tempdir()?;
    let path = |name: &str| dir.path().join(format!("{name}.json"));
    // A naive design, so that failures and first failing seeds merge too.
    let design = "check-then-insert";
    let whole = sweep_range("0..4", design, &path("whole"));
    for (range, name) in [
        ("3..4", "c"),
        ("0..2", "a"),
        ("2..3", "b"),
        ("1..3", "overlap"),
    ] {
        sweep_range(range, design, &path(name));
    }
    let merged = path("merged");
    let files = [path("c"), path("a"), path("b")].map(|p| p.display().to_string());
    let merged_arg = merged.to_str().ok_or("utf-8")?;
    let output = idem(&[
        "merge", &files[0], &files[1], &files[2], "--json", merged_arg,
    ]);
    assert_eq!(
        output.status.code(),
        whole.status.code(),
        "{}",
        text(&output.stderr)
    );
    assert_eq!(std::fs::read(&merged)?, std::fs::read(path("whole"))?);
    let overlap = path("overlap").display().to_string();
    for refused in [[&files[1], &files[0]], [&files[1], &overlap]] {
        let output = idem(&["merge", refused[0], refused[1]]);
        assert_eq!(output.status.code(), Some(2), "{refused:?}");
        let stderr = text(&output.stderr);
        assert!(stderr.contains("seed ranges"), "{stderr}");
    }
    Ok(())
}

#[test]
fn the_shard_script_refuses_a_missing_index() -> Result {
    let dir = tempfile::tempdir()?;
    let output = Command::new("bash")
        .arg(repo().join("deploy/shard.sh"))
        .env("IDEM", env!("CARGO_BIN_EXE_idem"))
        .env("SHARD_COUNT", "2")
        .env_remove("SHARD_INDEX")
        .env_remove("JOB_COMPLETION_INDEX")
        .env("IDEM_SHARD_OUT", dir.path())
        .output()?;
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).contains("JOB_COMPLETION_INDEX"));
    Ok(())
}

/// The number after `key:` (or in the `value` line after `name: key`).
fn yaml_number(manifest: &str, key: &str) -> Option<u64> {
    let mut lines = manifest.lines().map(str::trim);
    while let Some(line) = lines.next() {
        if let Some(rest) = line.strip_prefix(&format!("{key}:")) {
            return rest.trim().trim_matches('"').parse().ok();
        }
        if line == format!("- name: {key}") {
            let value = lines.next()?.strip_prefix("value:")?;
            return value.trim().trim_matches('"').parse().ok();
        }
    }
    None
}

#[test]
fn the_indexed_jobs_run_one_shard_per_completion_index() -> Result {
    for job in ["sweep", "search"] {
        let manifest =
            std::fs::read_to_string(repo().join(format!("deploy/k8s/{job}-indexed-job.yaml")))?;
        assert!(manifest.contains("completionMode: Indexed"), "{job}");
        assert!(manifest.contains("deploy/shard.sh"), "{job}");
        let completions = yaml_number(&manifest, "completions");
        assert!(completions.is_some(), "{job}");
        assert_eq!(completions, yaml_number(&manifest, "parallelism"), "{job}");
        assert_eq!(completions, yaml_number(&manifest, "SHARD_COUNT"), "{job}");
    }
    for workflow in ["sweep", "search"] {
        let text =
            std::fs::read_to_string(repo().join(format!(".github/workflows/{workflow}.yml")))?;
        let count = yaml_number(&text, "SHARD_COUNT").ok_or("SHARD_COUNT")?;
        let matrix: Vec<String> = (0..count).map(|i| i.to_string()).collect();
        assert!(
            text.contains(&format!("shard: [{}]", matrix.join(", "))),
            "{workflow}: the matrix lists shards 0..{count}"
        );
        assert!(text.contains("deploy/shard.sh"), "{workflow}");
        assert!(text.contains("shard-*-of-$SHARD_COUNT.json"), "{workflow}");
    }
    Ok(())
}

/// The guided search in shards with a time budget, as the nightly search
/// runs it: each shard a campaign on fresh seeds of its own, the merge
/// their sum under the same budget.
#[test]
fn guided_search_shards_with_a_budget_merge() -> Result {
    let dir = tempfile::tempdir()?;
    let env = [
        ("IDEM_SHARD_MODE", "fuzz"),
        ("IDEM_SHARD_BUDGET", "4s"),
        ("IDEM_SHARD_START", "9000"),
    ];
    let (output, merged) = sharded(2, true, &env, dir.path())?;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let merged: serde_json::Value = serde_json::from_slice(&merged)?;
    assert_eq!(merged["time_budget_s"], 4);
    let shards: Vec<serde_json::Value> = (0..2)
        .map(|i| {
            let file = dir.path().join(format!("shard-{i}-of-2.json"));
            serde_json::from_slice(&std::fs::read(file)?).map_err(Into::into)
        })
        .collect::<Result<_>>()?;
    let runs = |v: &serde_json::Value| v["totals"]["runs"].as_u64().unwrap_or(0);
    assert!(shards.iter().all(|s| runs(s) > 0), "every shard ran");
    assert_eq!(runs(&merged), shards.iter().map(runs).sum::<u64>());
    // Shard 1's campaign drew its fresh worlds 10^9 further.
    assert_eq!(shards[1]["seeds"]["start"], 9000 + 1_000_000_000_u64);
    Ok(())
}
