//! `idem provider-server`: the provider test server on a real socket, for
//! demos and tests. `idem serve` and `idem migrate` are the production
//! commands of `idem_core::cli`, the same code `idem-server` runs.

use clap::{Args, ValueEnum};
use idem_core::cli::{LogFormat, init_logging, runtime};
use idem_core::provider::server::{Behaviour, ContractMode, ProviderServer};
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
    #[arg(long, value_enum, default_value = "valid")]
    contract: ContractArg,
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

pub fn provider_server(args: ProviderServerArgs) -> Result<Exit, CliError> {
    init_logging(args.log_format);
    let behaviour = Behaviour {
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
        seed: args.seed,
        ..Behaviour::default()
    };
    runtime()?.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&args.listen)
            .await
            .map_err(|e| CliError::Usage(format!("cannot listen on {}: {e}", args.listen)))?;
        tracing::info!(listen = %args.listen, "provider serving");
        let server = ProviderServer::new(behaviour);
        tokio::select! {
            served = idem_core::provider::server::serve(listener, server) => served?,
            () = os_signal() => {}
        }
        Ok(Exit::Pass)
    })
}
