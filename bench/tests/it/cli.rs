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

/// `idem show` takes what `idem run` takes: a catalogue name, or a file
/// (printed as it stands), and refuses a broken file the way `run` does.
#[test]
fn show_prints_a_file_that_run_accepts() -> Result<(), Box<dyn std::error::Error>> {
    let file = "../scenarios/regressions/correct-edab21ea-seed-8800000134.toml";
    let output = idem(&["show", file]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(stdout(&output), std::fs::read_to_string(file)?);
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("broken.toml");
    std::fs::write(&path, "[[clients]]\nname = 'a'\n[timing]\ntick_ms = 0\n")?;
    let path = path.to_str().ok_or("utf-8 path")?;
    let output = idem(&["show", path]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).starts_with(&format!("{path}:4:11:")),
        "{}",
        stderr(&output)
    );
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
    assert_eq!(summary["totals"]["runs"], 8);
    assert!(summary.get("runs").is_none(), "no record per run");
    assert_eq!(
        summary["runs_fingerprint"].as_str().map(str::len),
        Some(64),
        "{summary}"
    );
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

/// Provider test servers on loopback, served by a runtime of their own
/// while the test thread runs `idem certify` as a child process.
struct Providers {
    runtime: tokio::runtime::Runtime,
}

impl Providers {
    fn new() -> Result<Self, std::io::Error> {
        Ok(Self {
            runtime: tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?,
        })
    }

    /// Serves one provider with `behaviour`; its base URL.
    fn start(
        &self,
        behaviour: idem_core::provider::server::Behaviour,
        api_key: Option<&str>,
    ) -> Result<String, std::io::Error> {
        let listener = self
            .runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
        let addr = listener.local_addr()?;
        let server = idem_core::provider::server::ProviderServer::new(behaviour);
        if let Some(key) = api_key {
            server.require_api_key(key);
        }
        self.runtime
            .spawn(idem_core::provider::server::serve(listener, server));
        Ok(format!("http://{addr}"))
    }
}

#[test]
fn certify_exits_0_certified_1_not_certified_2_when_it_cannot_run()
-> Result<(), Box<dyn std::error::Error>> {
    use idem_core::provider::server::{Behaviour, ContractMode};
    let providers = Providers::new()?;
    // The check each defect must fail, named in the verdict.
    for (mode, code, verdict) in [
        (ContractMode::Valid, 0, "verdict: CERTIFIED"),
        (
            ContractMode::InventedKey,
            1,
            "verdict: NOT CERTIFIED (failed: schema)",
        ),
        (
            ContractMode::Prose,
            1,
            "verdict: NOT CERTIFIED (failed: parse)",
        ),
        (
            ContractMode::IgnoredFormat,
            1,
            "verdict: NOT CERTIFIED (failed: business_type)",
        ),
    ] {
        let url = providers.start(
            Behaviour {
                contract: mode,
                ..Behaviour::default()
            },
            None,
        )?;
        let output = idem(&[
            "certify",
            "--provider",
            &format!("good={url}"),
            "--concurrency",
            "8",
        ]);
        assert_eq!(
            output.status.code(),
            Some(code),
            "{mode:?}: {}",
            stderr(&output)
        );
        assert!(
            stdout(&output).contains(verdict),
            "{mode:?}:\n{}",
            stdout(&output)
        );
    }

    // Unreachable, a bad contract, a bad flag: 2, and no verdict.
    let dir = tempfile::tempdir()?;
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../core/contracts/triage");
    for file in ["contract.toml", "schema.json", "corpus.toml"] {
        std::fs::copy(shipped.join(file), dir.path().join(file))?;
    }
    let contract = dir.path().join("contract.toml");
    let text =
        std::fs::read_to_string(&contract)?.replace("temperature = 0.0", "temperature = 0.7");
    std::fs::write(&contract, text)?;
    let url = providers.start(Behaviour::default(), None)?;
    let contract = contract.to_str().ok_or("utf-8 path")?;
    for (args, says) in [
        (
            vec!["certify", "--provider", "gone=http://127.0.0.1:1"],
            "cannot be reached: cannot connect",
        ),
        (
            vec![
                "certify",
                "--provider",
                &format!("good={url}"),
                "--contract",
                contract,
            ],
            "`temperature` must be between 0 and 0.2",
        ),
        (
            vec!["certify", "--provider", "good=ftp://x"],
            "must start with http:// or https://",
        ),
    ] {
        let output = idem(&args);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains(says),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(!stdout(&output).contains("verdict"), "{args:?}");
    }

    // A provider that wants an API key: the configuration names the
    // variable, the key comes from the environment and appears nowhere in
    // the output; a wrong key is 2, not a verdict.
    let url = providers.start(Behaviour::default(), Some("sk-cli-test-key"))?;
    let config = dir.path().join("idem.toml");
    std::fs::write(
        &config,
        format!(
            "[providers.keyed]\nurl = \"{url}\"\nmodel = \"keyed-model\"\napi_key_env = \"IDEM_TEST_KEYED_API_KEY\"\n"
        ),
    )?;
    let config = config.to_str().ok_or("utf-8 path")?;
    for (key, code) in [("sk-cli-test-key", 0), ("sk-wrong", 2)] {
        let output = Command::new(env!("CARGO_BIN_EXE_idem"))
            .args([
                "certify",
                "--config",
                config,
                "--provider",
                "keyed",
                "--concurrency",
                "8",
            ])
            .env("IDEM_TEST_KEYED_API_KEY", key)
            .output()?;
        assert_eq!(
            output.status.code(),
            Some(code),
            "{key}: {}",
            stderr(&output)
        );
        assert!(!stdout(&output).contains(key) && !stderr(&output).contains(key));
    }
    Ok(())
}

/// The trace hash `idem run NAME --seed SEED --design DESIGN ARGS` prints.
fn hash_of(
    name: &str,
    seed: u64,
    design: &str,
    args: &[&str],
) -> Result<String, Box<dyn std::error::Error>> {
    let seed = seed.to_string();
    let mut all = vec![
        "run", name, "--seed", &seed, "--design", design, "--format", "json",
    ];
    all.extend_from_slice(args);
    let record: serde_json::Value = serde_json::from_str(&stdout(&idem(&all)))?;
    Ok(record["trace_hash"].as_str().unwrap_or_default().to_owned())
}

/// A run's own decisions, written as a decision file and replayed with
/// `idem run --decisions`, give the same run (the same trace hash); the
/// decisions of another seed's run make another run.
fn check_replay(name: &str, seed: u64, design: &str) -> Result<(), Box<dyn std::error::Error>> {
    use idem_sim::decisions::{DecisionFile, Decisions};
    let scenario = idem_scenarios::load(name)?.scenario;
    let design_value: idem_core::design::Design = design.parse()?;
    let dir = tempfile::tempdir()?;
    let mut hashes = Vec::new();
    for recorded_seed in [seed, seed + 1] {
        let decisions = Decisions::recording();
        idem_sim::run::run_deciding(&scenario, recorded_seed, design_value, decisions.clone())?;
        let file = DecisionFile {
            scenario: name.to_owned(),
            seed: recorded_seed,
            design: design.to_owned(),
            decisions: decisions.log(),
        };
        let path = dir.path().join(format!("{recorded_seed}.json"));
        std::fs::write(&path, serde_json::to_string(&file)?)?;
        let path = path.to_str().ok_or("a path")?;
        hashes.push(hash_of(name, seed, design, &["--decisions", path])?);
    }
    assert_eq!(hashes[0], hash_of(name, seed, design, &[])?, "{name}");
    assert_ne!(
        hashes[0], hashes[1],
        "{name}: another seed's decisions, another run"
    );
    Ok(())
}

#[test]
fn a_runs_decisions_replayed_give_the_same_run() -> Result<(), Box<dyn std::error::Error>> {
    check_replay("double-click", 7, "check-then-insert")?;
    check_replay("timeout-unknown", 3, "timeout-is-failure")
}

#[test]
fn a_malformed_decision_file_exits_2_with_its_position() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("real.json");
    std::fs::write(&path, "{\"decisions\": [\n  {\"index\": 0}\n]}\n")?;
    let output = idem(&[
        "run",
        "double-click",
        "--seed",
        "1",
        "--decisions",
        path.to_str().ok_or("a path")?,
    ]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("real.json:2:"),
        "{}",
        stderr(&output)
    );
    Ok(())
}
