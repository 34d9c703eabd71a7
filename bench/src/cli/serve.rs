//! `idem provider-server`: the provider test server on a real socket, for
//! demos and tests. `idem serve` and `idem migrate` are the production
//! commands of `idem_core::cli`, the same code `idem-server` runs.

use clap::{Args, ValueEnum};
use idem_core::cli::{LogFormat, init_logging, runtime};
use idem_core::provider::server::{Behaviour, ContractMode, ProviderServer, TlsListener};
use idem_core::service::os_signal;

use super::{CliError, Exit};

#[derive(Debug, Args)]
pub struct ProviderServerArgs {
    #[arg(long, default_value = "127.0.0.1:9001")]
    listen: String,
    #[arg(long, default_value_t = 200)]
    latency_ms: u64,
    /// Execute and bill, but never answer.
    #[arg(long)]
    hang: bool,
    /// Never finish the work.
    #[arg(long)]
    stall: bool,
    /// Per-thousand chance of a definitive error.
    #[arg(long, default_value_t = 0)]
    error_per_mille: u32,
    /// Execute (and bill) every request, even with a repeated Idempotency-Key.
    #[arg(long)]
    ignore_idempotency_keys: bool,
    /// How the answers break the triage contract, if they do. (Named
    /// apart from `certify --contract FILE` and `serve --contract FILE`,
    /// which name a contract; `--contract` is still accepted here.)
    #[arg(
        long = "contract-defect",
        alias = "contract",
        value_enum,
        default_value = "valid"
    )]
    contract: ContractArg,
    /// One execution in this many answers differently (0: never).
    #[arg(long, default_value_t = 0)]
    deviate_one_in: u32,
    /// Serve this model whatever is asked for (a silent model switch).
    #[arg(long)]
    served_model: Option<String>,
    /// Serve HTTPS with this PEM certificate chain (needs --tls-key).
    #[arg(long, requires = "tls_key", value_name = "FILE")]
    tls_cert: Option<std::path::PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, requires = "tls_cert", value_name = "FILE")]
    tls_key: Option<std::path::PathBuf>,
    /// Require this environment variable's value as the API key
    /// (`Authorization: Bearer ...`): 401 without it.
    #[arg(long, value_name = "VAR")]
    api_key_env: Option<String>,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    #[arg(long, value_enum, default_value = "text")]
    log_format: LogFormat,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ContractArg {
    Valid,
    InventedKey,
    Prose,
    IgnoredFormat,
}

/// The provider server stopped serving: like `idem serve`'s own errors,
/// exit 2.
fn stopped(error: std::io::Error) -> CliError {
    CliError::Usage(format!("the provider server stopped: {error}"))
}

/// The served provider's behaviour, as the flags say.
fn behaviour(args: &ProviderServerArgs) -> Behaviour {
    Behaviour {
        latency_ms: args.latency_ms,
        hang: args.hang,
        stall: args.stall,
        error_per_mille: args.error_per_mille,
        honour_idempotency_keys: !args.ignore_idempotency_keys,
        contract: match args.contract {
            ContractArg::Valid => ContractMode::Valid,
            ContractArg::InventedKey => ContractMode::InventedKey,
            ContractArg::Prose => ContractMode::Prose,
            ContractArg::IgnoredFormat => ContractMode::IgnoredFormat,
        },
        deviate_one_in: args.deviate_one_in,
        served_model: args.served_model.clone(),
        seed: args.seed,
        ..Behaviour::default()
    }
}

/// The API key the server requires, from the variable `--api-key-env`
/// names.
fn api_key(args: &ProviderServerArgs) -> Result<Option<String>, CliError> {
    args.api_key_env
        .as_deref()
        .map(|var| {
            std::env::var(var)
                .ok()
                .filter(|key| !key.is_empty())
                .ok_or_else(|| {
                    CliError::Usage(format!("--api-key-env {var}: the variable is not set"))
                })
        })
        .transpose()
}

pub fn provider_server(args: ProviderServerArgs) -> Result<Exit, CliError> {
    init_logging(args.log_format);
    let behaviour = behaviour(&args);
    let api_key = api_key(&args)?;
    runtime()?.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&args.listen)
            .await
            .map_err(|e| CliError::Usage(format!("cannot listen on {}: {e}", args.listen)))?;
        let server = ProviderServer::new(behaviour);
        if let Some(api_key) = &api_key {
            server.require_api_key(api_key);
        }
        if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
            let listener = TlsListener::from_pem_files(listener, cert, key)
                .map_err(|e| CliError::Usage(format!("cannot serve TLS: {e}")))?;
            tracing::info!(listen = %args.listen, "provider serving HTTPS");
            tokio::select! {
                served = idem_core::provider::server::serve(listener, server) => served.map_err(stopped)?,
                () = os_signal() => {}
            }
        } else {
            tracing::info!(listen = %args.listen, "provider serving");
            tokio::select! {
                served = idem_core::provider::server::serve(listener, server) => served.map_err(stopped)?,
                () = os_signal() => {}
            }
        }
        Ok(Exit::Pass)
    })
}
