//! idem's own engine as a black-box target: reads the configuration
//! `idem real --target` writes (docs/TARGET.md) and becomes `idem serve`
//! with the matching flags, every role in one process: the certified
//! providers asserted (`--certified`), the attempt deadline, the attempts
//! allowed and the policy as the scenario sets them. The bench's tests use
//! it to hold the target contract to the engine that defined it.
//!
//! Run: `idem-target-adapter IDEM_BINARY --config FILE`.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt as _;

use serde::Deserialize;

#[derive(Debug, Deserialize)]
struct Config {
    listen: String,
    database_url: String,
    tokens: BTreeMap<String, String>,
    providers: BTreeMap<String, String>,
    #[serde(default)]
    models: BTreeMap<String, String>,
    /// Each certified provider and its model: asserted to `idem serve`
    /// (`--certified`), which then fails over and hedges to them only.
    #[serde(default)]
    certified: BTreeMap<String, String>,
    attempt_deadline_ms: Option<u64>,
    attempts_max: Option<u32>,
    policy: Option<Policy>,
}

/// The config's `policy`.
#[derive(Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Policy {
    Strict,
    Hedged { hedge_after_ms: u64 },
}

/// `idem serve`'s flags for `config`.
fn serve_args(config: &Config) -> Vec<String> {
    let mut args: Vec<String> = [
        "serve",
        "--store",
        "postgres",
        "--database-url",
        &config.database_url,
        "--listen",
        &config.listen,
        "--no-pruner",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    for (token, owner) in &config.tokens {
        args.extend(["--token".to_owned(), format!("{token}={owner}")]);
    }
    for (name, url) in &config.providers {
        args.extend(["--provider".to_owned(), format!("{name}={url}")]);
    }
    for (name, model) in &config.models {
        args.extend(["--model".to_owned(), format!("{name}={model}")]);
    }
    for name in config.certified.keys() {
        args.extend(["--certified".to_owned(), name.clone()]);
    }
    if let Some(ms) = config.attempt_deadline_ms {
        args.extend(["--attempt-deadline-ms".to_owned(), ms.to_string()]);
    }
    if let Some(max) = config.attempts_max {
        args.extend(["--attempts-max".to_owned(), max.to_string()]);
    }
    if let Some(Policy::Hedged { hedge_after_ms }) = config.policy {
        args.extend(["--policy".to_owned(), "hedged".to_owned()]);
        args.extend(["--hedge-after-ms".to_owned(), hedge_after_ms.to_string()]);
    }
    args
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (idem, path) = match args.as_slice() {
        [_, idem, flag, path] if flag == "--config" => (idem.clone(), path.clone()),
        _ => return Err("usage: idem-target-adapter IDEM_BINARY --config FILE".into()),
    };
    let config: Config = serde_json::from_slice(&std::fs::read(&path)?)?;
    // Only succeeds by not returning.
    let error = std::process::Command::new(idem)
        .args(serve_args(&config))
        .exec();
    Err(error.into())
}
