//! `certify`: one certification run against one provider, its table and
//! verdict printed, its certificate recorded when given a database.
//! Exit 0 certified, 1 not certified, 2 when it could not run or learnt
//! nothing (and then nothing is recorded).

use std::sync::Arc;

use clap::Args;
use serde_json::json;

use super::providers::{
    EncodingArg, ProviderArgs, ResolvedProvider, SpecialTokensArg, provider_specs, resolve,
};
use super::{OutputFormat, ServerCliError, connect_and_migrate, runtime};
use crate::certify::{
    self, CERTIFY_DEADLINE_MS_DEFAULT, CertifyError, ChatEndpoint, Progress, RunBounds, RunLimits,
};
use crate::clock::{Clock, SystemClock, UuidV7Ids};
use crate::store::pg::SCHEMA_DEFAULT;
use idem_contract::report::{Certification, Target};
use idem_contract::spec::Contract;

/// The longest a deadline or call timeout may be set to, in ms: a day.
const TIMEOUT_MS_MAX: u64 = 24 * 60 * 60 * 1000;
/// The largest context window a provider may be said to have.
const CONTEXT_WINDOW_TOKENS_MAX: u32 = 100_000_000;

#[derive(Debug, Args)]
pub struct CertifyArgs {
    /// The provider to certify: NAME=http[s]://HOST[:PORT], or NAME alone
    /// for a provider of the configuration file.
    #[arg(long, value_name = "NAME[=URL]", env = "IDEM_CERTIFY_PROVIDER")]
    provider: String,
    #[command(flatten)]
    provider_args: ProviderArgs,
    /// The model to ask for (default: the configuration file's, else NAME).
    #[arg(long, env = "IDEM_CERTIFY_MODEL")]
    model: Option<String>,
    /// The provider's tokenizer encoding: cl100k_base, o200k_base,
    /// p50k_base or r50k_base (default: the configuration file's, else
    /// cl100k_base).
    #[arg(long, env = "IDEM_CERTIFY_TOKENIZER", value_parser = clap::value_parser!(EncodingArg))]
    tokenizer: Option<EncodingArg>,
    /// The provider's context window in tokens (default: the configuration
    /// file's, else 8192).
    #[arg(long, env = "IDEM_CERTIFY_CONTEXT_WINDOW_TOKENS",
          value_parser = clap::value_parser!(u32).range(1..=i64::from(CONTEXT_WINDOW_TOKENS_MAX)))]
    context_window_tokens: Option<u32>,
    /// How the provider's tokenizer treats text that looks like a special
    /// token: literal, or parsed (a defect).
    #[arg(long, env = "IDEM_CERTIFY_SPECIAL_TOKENS", value_parser = clap::value_parser!(SpecialTokensArg))]
    special_tokens: Option<SpecialTokensArg>,
    /// Record the certificate and its evidence in this PostgreSQL database
    /// (without it, nothing is recorded).
    #[arg(long, env = "DATABASE_URL")]
    database_url: Option<String>,
    /// The PostgreSQL schema of idem's tables (as `serve --database-schema`).
    #[arg(long, env = "IDEM_DATABASE_SCHEMA", default_value = SCHEMA_DEFAULT)]
    database_schema: String,
    /// Calls in flight at once (1 to 64).
    #[arg(long, default_value_t = RunLimits::default().concurrency as u64, env = "IDEM_CERTIFY_CONCURRENCY",
          value_parser = clap::value_parser!(u64).range(1..=certify::run::CONCURRENCY_MAX as u64))]
    concurrency: u64,
    /// How long one call may take (default: the configuration file's
    /// request_timeout_ms, else 60000).
    #[arg(long, env = "IDEM_CERTIFY_REQUEST_TIMEOUT_MS",
          value_parser = clap::value_parser!(u64).range(1..=TIMEOUT_MS_MAX))]
    request_timeout_ms: Option<u64>,
    /// How long the whole certification may take; past it, or once the
    /// first calls all get no answer, it stops, inconclusive (exit 2).
    #[arg(long, default_value_t = CERTIFY_DEADLINE_MS_DEFAULT, env = "IDEM_CERTIFY_DEADLINE_MS",
          value_parser = clap::value_parser!(u64).range(1..=TIMEOUT_MS_MAX))]
    deadline_ms: u64,
    #[arg(long, value_enum, default_value = "text", env = "IDEM_CERTIFY_FORMAT")]
    format: OutputFormat,
}

/// How `certify` ended, when it reached a verdict: exit 0 or 1. A run
/// that could not be made, or learnt nothing, is a [`ServerCliError`] (exit 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CertifyOutcome {
    Certified,
    NotCertified,
}

impl CertifyOutcome {
    pub fn exit_code(self) -> u8 {
        match self {
            CertifyOutcome::Certified => 0,
            CertifyOutcome::NotCertified => 1,
        }
    }
}

/// Runs one certification with the production id source, telling
/// `progress` how its calls go.
pub(super) async fn certify_one(
    contract: &Arc<Contract>,
    provider: &ResolvedProvider,
    endpoint: &Arc<dyn ChatEndpoint>,
    (limits, bounds): (RunLimits, RunBounds),
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<Certification, ServerCliError> {
    let target = Target {
        provider: provider.name.clone(),
        model: provider.model.clone(),
        tokenizer: provider.tokenizer,
    };
    let limits = RunLimits {
        call_timeout_ms: provider
            .request_timeout_ms
            .unwrap_or(limits.call_timeout_ms),
        ..limits
    };
    let endpoint = Arc::clone(endpoint);
    let contract = Arc::clone(contract);
    let run = (limits, bounds);
    match certify::certify_with_progress(endpoint, contract, &target, &UuidV7Ids, run, progress)
        .await
    {
        Ok(certification) => Ok(certification),
        Err(CertifyError::Inconclusive { why, .. }) => Err(ServerCliError::Inconclusive(format!(
            "certification of {} inconclusive: {why}; nothing recorded",
            provider.name
        ))),
        Err(CertifyError::Unauthorized { detail, .. }) => {
            Err(ServerCliError::Usage(refused_key(provider, &detail)))
        }
        Err(e) => Err(ServerCliError::Usage(e.to_string())),
    }
}

/// A refused API key's message, naming the variable the key came from, or
/// saying that none was configured (issue 36: it said only "the variable
/// its api_key_env names").
fn refused_key(provider: &ResolvedProvider, detail: &str) -> String {
    let name = &provider.name;
    match &provider.api_key_env {
        Some(var) => format!(
            "provider {name:?} refused the API key read from ${var} ({detail}): check the key in {var}"
        ),
        None => format!(
            "provider {name:?} wants an API key ({detail}) and none is configured: name the variable \
             that holds it with api_key_env in the configuration file, or --api-key-env {name}=VARIABLE"
        ),
    }
}

/// Prints a run's progress to stderr: what is about to happen, then about
/// ten lines as calls finish (stdout stays the verdict's, text or JSON).
fn progress_printer(
    provider: &ResolvedProvider,
    deadline_ms: u64,
) -> impl Fn(Progress) + Sync + use<> {
    let name = provider.name.clone();
    let endpoint = provider.endpoint.url();
    move |event| match event {
        Progress::Started { calls, concurrency } => eprintln!(
            "certifying {name} at {endpoint}: {calls} calls, {concurrency} at a time, at most {deadline_ms} ms"
        ),
        Progress::Answered {
            done,
            calls,
            unusable,
        } => {
            let step = (calls / PROGRESS_LINES).max(1);
            if done % step == 0 || done == calls {
                eprintln!("  {done}/{calls} calls done, {unusable} without a usable answer");
            }
        }
    }
}

/// About how many progress lines a run prints.
const PROGRESS_LINES: usize = 10;

/// The provider `--provider` names, with the flags that override its
/// settings applied.
fn provider_of(args: &CertifyArgs) -> Result<(Arc<Contract>, ResolvedProvider), ServerCliError> {
    let (name, url) = match args.provider.split_once('=') {
        Some((name, url)) if !name.is_empty() && !url.is_empty() => (name, Some(url)),
        Some(_) => {
            return Err(ServerCliError::Usage(format!(
                "--provider must look like NAME=URL or NAME, got {:?}",
                args.provider
            )));
        }
        None => (args.provider.as_str(), None),
    };
    let cli_providers: Vec<String> = url.iter().map(|u| format!("{name}={u}")).collect();
    let (contract, mut resolved) = resolve(&args.provider_args, &cli_providers, &[])?;
    let mut provider = resolved.remove(name).ok_or_else(|| {
        ServerCliError::Usage(format!(
            "provider {name}: give --provider {name}=URL, or a configuration file that names it"
        ))
    })?;
    if let Some(model) = &args.model {
        provider.set_model(model.clone())?;
    }
    if let Some(EncodingArg(encoding)) = args.tokenizer {
        provider.tokenizer.encoding = encoding;
    }
    if let Some(window) = args.context_window_tokens {
        provider.tokenizer.context_window_tokens = window;
    }
    if let Some(SpecialTokensArg(special)) = args.special_tokens {
        provider.tokenizer.special_tokens = special;
    }
    if let Some(ms) = args.request_timeout_ms {
        provider.request_timeout_ms = Some(ms);
    }
    Ok((contract, provider))
}

/// `certify`: runs the certification, prints the table, records the
/// certificate when given a database. Errors (bad flags or contract, an
/// unreachable provider or database, an inconclusive run) are exit code 2.
///
/// With `--format json`, an error is printed to stdout as JSON too
/// (`{"error": ..., "exit_code": 2}`), so that a caller parsing stdout
/// learns why there is no verdict.
pub fn certify(args: CertifyArgs) -> Result<CertifyOutcome, ServerCliError> {
    let format = args.format;
    let outcome = certify_run(args);
    if let (Err(e), OutputFormat::Json) = (&outcome, format) {
        let document = json!({"error": e.to_string(), "exit_code": 2});
        println!(
            "{}",
            serde_json::to_string_pretty(&document).expect("JSON values serialize")
        );
    }
    outcome
}

fn certify_run(args: CertifyArgs) -> Result<CertifyOutcome, ServerCliError> {
    let (contract, provider) = provider_of(&args)?;
    let (_, endpoint) = provider.client(Arc::clone(&contract))?;
    let limits = RunLimits {
        concurrency: usize::try_from(args.concurrency).unwrap_or(1),
        ..RunLimits::default()
    };
    runtime()?.block_on(async move {
        let store = match &args.database_url {
            Some(url) => Some(connect_and_migrate(url, &args.database_schema, 2).await?),
            None => None,
        };
        let bounds = RunBounds::product(args.deadline_ms);
        let progress = progress_printer(&provider, args.deadline_ms);
        let run = (limits, bounds);
        let certification = certify_one(&contract, &provider, &endpoint, run, &progress).await?;
        print_certification(&certification, &provider, args.format);
        let Some(store) = &store else {
            if args.format == OutputFormat::Text {
                println!("not recorded: no --database-url (or DATABASE_URL) given");
            }
            return Ok(outcome(&certification));
        };
        let mut resolved = std::collections::BTreeMap::new();
        let endpoint = provider.endpoint.url();
        resolved.insert(provider.name.clone(), provider);
        let providers = provider_specs(&contract, &resolved);
        let build = idem_model::build_stamp!().to_string();
        let key =
            certify::manage::record(store, SystemClock.now(), &providers, &certification, &build)
                .await
                .map_err(|e| ServerCliError::Usage(format!("cannot store the certificate: {e}")))?;
        if args.format == OutputFormat::Text {
            println!(
                "certificate recorded for ({}, {}, {}, {}) at {endpoint}",
                key.provider, key.model, key.prompt_version, key.schema_version
            );
        }
        Ok(outcome(&certification))
    })
}

fn outcome(certification: &Certification) -> CertifyOutcome {
    if certification.passed() {
        CertifyOutcome::Certified
    } else {
        CertifyOutcome::NotCertified
    }
}

fn print_certification(
    certification: &Certification,
    provider: &ResolvedProvider,
    format: OutputFormat,
) {
    let build = idem_model::build_stamp!().to_string();
    match format {
        OutputFormat::Text => {
            println!("idem certify {build}");
            println!("endpoint {}", provider.endpoint.url());
            print!("{}", certification.to_text());
        }
        OutputFormat::Json => {
            let mut evidence = certification.evidence(&build);
            evidence["endpoint"] = json!(provider.endpoint.url());
            let document = json!({"evidence": evidence, "rows": certification.rows});
            println!(
                "{}",
                serde_json::to_string_pretty(&document).expect("JSON values serialize")
            );
        }
    }
}
