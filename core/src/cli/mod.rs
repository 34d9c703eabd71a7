//! The production command line: `serve`, `migrate`, `certify` and
//! `certificates`, as `idem-server` runs them (and `idem serve` /
//! `idem migrate` / `idem certify`). Arguments in, text out: the work is
//! in the library (the service, [`crate::certify`]), and each file here
//! only turns flags into its calls and its answers into lines.
//!
//! Every flag can also be set by an environment variable (named in
//! `--help`); per-provider settings (model, API key variable, timeouts,
//! tokenizer profile, TLS trust) come from a configuration file
//! (`--config idem.toml`, see [`crate::config`]) or flags. API keys are read
//! only from the environment variable a provider's configuration names.
//! Numeric flags are checked at parse time: a value no service could run
//! with is a usage error (exit 2), not a surprise later.

mod certificates;
mod certify;
mod providers;
mod serve;

use std::str::FromStr;
use std::time::Duration;

use clap::{Args, ValueEnum};
use sqlx::Connection;

pub use certificates::{CertificatesArgs, certificates};
pub use certify::{CertifyArgs, CertifyOutcome, certify};
pub use providers::{
    ClientViews, EncodingArg, ProviderArgs, ResolvedProvider, SpecialTokensArg, resolve,
};
pub use serve::{OpsArgs, ServeArgs, serve};

use crate::store::pg::{
    PgStore, SCHEMA_DEFAULT, SchemaState, check_schema, connect_options, pool_options,
};

/// Why a command could not run: exit code 2 for all of them.
#[derive(Debug, thiserror::Error)]
pub enum ServerCliError {
    /// Bad flags or configuration, or a database, address or provider that
    /// cannot be reached.
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// A contract file that cannot be used, as `path:line:col: message` lines.
    #[error("{0}")]
    Contract(#[from] idem_contract::spec::ContractError),
    /// A configuration file that cannot be used.
    #[error("{0}")]
    Config(#[from] crate::config::ConfigFileError),
    /// A certification that learnt nothing: the certificate on file, if
    /// any, is unchanged.
    #[error("{0}")]
    Inconclusive(String),
}

/// How long `serve`, `migrate`, `certify` and `certificates` wait for the
/// database's first connection before saying why it cannot be had.
pub const DATABASE_CONNECT_TIMEOUT_MS: u64 = 5_000;

/// The server's database pool size: what `serve` opens, and what the speed
/// bench measures.
pub const POOL_CONNECTIONS_MAX: u32 = 16;

#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// PostgreSQL URL, e.g. postgres://user@host/db.
    #[arg(long, env = "DATABASE_URL")]
    database_url: String,
    /// The PostgreSQL schema of idem's tables and of its migrations' bookkeeping.
    #[arg(long, env = "IDEM_DATABASE_SCHEMA", default_value = SCHEMA_DEFAULT)]
    database_schema: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Text,
    Json,
}

/// Logs to stderr, as text or as JSON lines, filtered by `RUST_LOG`.
pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// The multi-threaded runtime the production commands run on.
pub fn runtime() -> Result<tokio::runtime::Runtime, ServerCliError> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

fn split_pair<'a>(raw: &'a str, what: &str) -> Result<(&'a str, &'a str), ServerCliError> {
    raw.split_once('=')
        .filter(|(k, v)| !k.is_empty() && !v.is_empty())
        .ok_or_else(|| {
            ServerCliError::Usage(format!("{what} must look like NAME=VALUE, got {raw:?}"))
        })
}

/// `url` with its password (and anything else credential-shaped) cut out,
/// for messages.
fn shown_url(url: &str, text: &str) -> String {
    let userinfo = url
        .split_once("://")
        .and_then(|(_, rest)| rest.rsplit_once('@'))
        .map(|(userinfo, _)| userinfo);
    let password = userinfo.and_then(|u| u.split_once(':')).map(|(_, p)| p);
    crate::redact::redact(text, password.as_slice())
}

/// One connection to the database, to say why there is none: the pool
/// reports only that it timed out, never the refusal or the name that did
/// not resolve behind it.
async fn probe_database(url: &str) -> Result<(), ServerCliError> {
    let fail = |why: String| {
        ServerCliError::Usage(shown_url(
            url,
            &format!("cannot connect to the database: {why}"),
        ))
    };
    let options = sqlx::postgres::PgConnectOptions::from_str(url)
        .map_err(|e| fail(format!("the URL: {e}")))?;
    let timeout = Duration::from_millis(DATABASE_CONNECT_TIMEOUT_MS);
    match crate::timer::timeout(timeout, sqlx::PgConnection::connect_with(&options)).await {
        Ok(Ok(connection)) => {
            let _ = connection.close().await;
            Ok(())
        }
        Ok(Err(e)) => Err(fail(e.to_string())),
        Err(_) => Err(fail(format!(
            "no answer from {}:{} within {DATABASE_CONNECT_TIMEOUT_MS} ms",
            options.get_host(),
            options.get_port()
        ))),
    }
}

/// Opens a pool and brings the schema up to date: a server never runs
/// against a schema older than its code.
async fn connect_and_migrate(
    url: &str,
    schema: &str,
    connections_max: u32,
) -> Result<PgStore, ServerCliError> {
    check_schema(schema).map_err(ServerCliError::Usage)?;
    probe_database(url).await?;
    let store = PgStore::connect(url, schema, connections_max)
        .await
        .map_err(|e| {
            ServerCliError::Usage(shown_url(
                url,
                &format!("cannot connect to the database: {e}"),
            ))
        })?;
    store
        .migrate()
        .await
        .map_err(|e| ServerCliError::Usage(shown_url(url, &format!("migration failed: {e}"))))?;
    Ok(store)
}

/// Opens a small pool on a schema that must already hold this build's
/// tables: nothing is created or migrated, and with `read_only` every
/// transaction is read-only, so PostgreSQL itself refuses a write. What the
/// `certificates` commands use (issue 36: `certificates list` with a
/// mistyped --database-schema created that schema and migrated it).
async fn connect_existing(
    url: &str,
    schema: &str,
    read_only: bool,
) -> Result<PgStore, ServerCliError> {
    check_schema(schema).map_err(ServerCliError::Usage)?;
    probe_database(url).await?;
    let fail = |e: &dyn std::fmt::Display| {
        ServerCliError::Usage(shown_url(
            url,
            &format!("cannot connect to the database: {e}"),
        ))
    };
    let mut options = connect_options(url, schema).map_err(|e| fail(&e))?;
    if read_only {
        options = options.options([("default_transaction_read_only", "on")]);
    }
    let pool = pool_options(2)
        .connect_with(options)
        .await
        .map_err(|e| fail(&e))?;
    let store = PgStore::new(pool, schema);
    match store.schema_state().await.map_err(|e| fail(&e))? {
        SchemaState::Current => Ok(store),
        SchemaState::Missing => Err(ServerCliError::Usage(format!(
            "schema {schema:?} holds no idem tables: check --database-schema \
             (IDEM_DATABASE_SCHEMA), or create them with `migrate`"
        ))),
        SchemaState::Behind { pending } => Err(ServerCliError::Usage(format!(
            "schema {schema:?} lacks {pending} of this build's migrations: run `migrate` first"
        ))),
    }
}

pub fn migrate(args: MigrateArgs) -> Result<(), ServerCliError> {
    runtime()?.block_on(async {
        connect_and_migrate(&args.database_url, &args.database_schema, 2).await?;
        println!("migrations applied");
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    /// The commands as a binary parses them.
    #[derive(Debug, Parser)]
    enum Command {
        Serve(ServeArgs),
        Certify(CertifyArgs),
    }

    fn parse(args: &[&str]) -> Result<Command, clap::Error> {
        Command::try_parse_from(std::iter::once("idem-server").chain(args.iter().copied()))
    }

    /// Issue 22, items 8 and 22: values no service or certification could
    /// run with are usage errors when the flags are read.
    #[test]
    fn values_nothing_could_run_with_are_usage_errors() {
        let serve = [
            "serve",
            "--token",
            "t=o",
            "--provider",
            "p=http://127.0.0.1:1",
        ];
        for bad in [
            &["--retention-ms", "10000000000000000"][..],
            &["--retention-ms", "0"],
            &["--attempts-max", "0"],
            &["--body-limit-bytes", "0"],
            &["--header-read-timeout-ms", "0"],
            &["--body-read-timeout-ms", "0"],
            &["--attempt-deadline-ms", "0"],
            &["--attempts-concurrent-max", "0"],
            &["--prune-batch-max", "0"],
        ] {
            let args: Vec<&str> = serve.iter().chain(bad).copied().collect();
            assert!(parse(&args).is_err(), "{bad:?} was accepted");
        }
        assert!(parse(&serve).is_ok());
        let certify_flags = ["certify", "--provider", "p=http://127.0.0.1:1"];
        for bad in [
            &["--request-timeout-ms", "0"][..],
            &["--context-window-tokens", "0"],
            &["--concurrency", "0"],
            &["--concurrency", "65"],
            &["--deadline-ms", "0"],
        ] {
            let args: Vec<&str> = certify_flags.iter().chain(bad).copied().collect();
            assert!(parse(&args).is_err(), "{bad:?} was accepted");
        }
        // Read, then refused before anything runs.
        for (bad, says) in [
            (&["--model", ""][..], "model name"),
            (&["--provider", "p=http://127.0.0.1:99999"], "port"),
            (&["--provider", "p=http://u:hunter22@h:1"], "credentials"),
        ] {
            let mut args: Vec<&str> = certify_flags.to_vec();
            if bad[0] == "--provider" {
                args.truncate(1);
            }
            args.extend(bad);
            let Ok(Command::Certify(parsed)) = parse(&args) else {
                panic!("{bad:?} did not parse");
            };
            let error = certify(parsed)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(error.contains(says), "{bad:?}: {error}");
            assert!(!error.contains("hunter22"), "{error}");
        }
    }

    /// Issue 36, item 4: `serve` refuses a token table that cannot mean
    /// what was meant, before anything starts, and splits TOKEN=OWNER at
    /// the last `=` (a token may end in base64 padding).
    #[test]
    fn serve_refuses_a_confused_token_table() {
        let serve = |flags: &[&str]| -> Result<crate::api::Auth, String> {
            let mut args = vec!["serve", "--provider", "p=http://127.0.0.1:1"];
            args.extend(flags);
            let Ok(Command::Serve(parsed)) = parse(&args) else {
                return Err(format!("{flags:?} did not parse"));
            };
            serve::auth(&parsed).map_err(|e| e.to_string())
        };
        for (flags, says) in [
            (
                &["--token", "t=alice", "--token", "t=bob"][..],
                "given twice",
            ),
            (
                &["--token", "t=alice", "--operator-token", "t"],
                "operator token",
            ),
            (&["--token", "t a=alice"], "space"),
            (&["--token", "t=al ice"], "space"),
            (&["--token", "t="], "TOKEN=OWNER"),
        ] {
            let error = serve(flags).err().unwrap_or_default();
            assert!(error.contains(says), "{flags:?}: {error}");
        }
        let auth = serve(&["--token", "dGVzdA===alice"]).expect("a padded token");
        assert_eq!(
            auth.principal(Some("Bearer dGVzdA==")),
            Some(&crate::api::Principal::Owner(idem_model::model::OwnerId(
                "alice".to_owned()
            )))
        );
    }

    /// Issue 22, item 9: a database that cannot be reached is a usage
    /// error within [`DATABASE_CONNECT_TIMEOUT_MS`] that says why, and
    /// shows no password.
    #[test]
    fn an_unreachable_database_says_why_at_once() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port");
        let url = format!("postgres://idem:hunter22@{closed}/idem");
        let error = migrate(MigrateArgs {
            database_url: url,
            database_schema: SCHEMA_DEFAULT.to_owned(),
        })
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(error.contains("cannot connect to the database"), "{error}");
        assert!(error.to_lowercase().contains("refused"), "{error}");
        assert!(!error.contains("hunter22"), "{error}");
    }
}
