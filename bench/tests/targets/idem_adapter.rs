//! idem's own engine as a black-box target: reads the configuration
//! `idem real --target` writes (docs/TARGET.md) and becomes `idem serve`
//! with the matching flags, every role in one process. The bench's tests
//! use it to hold the target contract to the engine that defined it.
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
