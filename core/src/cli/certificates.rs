//! `certificates list|show|revoke`: the stored certificates, as an
//! operator manages them without psql.

use clap::{Args, Subcommand};
use serde_json::json;

use super::{OutputFormat, ServerCliError, connect_existing, runtime};
use crate::certify::manage;
use crate::clock::{Clock, SystemClock};
use crate::store::Store;
use crate::store::pg::SCHEMA_DEFAULT;
use idem_model::contract::Certificate;

#[derive(Debug, Args)]
pub struct CertificatesArgs {
    /// PostgreSQL URL of the service's database.
    #[arg(long, env = "DATABASE_URL")]
    database_url: String,
    /// The PostgreSQL schema of idem's tables.
    #[arg(long, env = "IDEM_DATABASE_SCHEMA", default_value = SCHEMA_DEFAULT)]
    database_schema: String,
    #[command(subcommand)]
    command: CertificatesCommand,
}

#[derive(Debug, Subcommand)]
enum CertificatesCommand {
    /// One line per certificate: key, passed, source, when.
    List {
        /// Only this provider's.
        #[arg(long)]
        provider: Option<String>,
        #[arg(long, value_enum, default_value = "text")]
        format: OutputFormat,
    },
    /// A provider's certificates with their evidence, as JSON.
    Show {
        #[arg(long)]
        provider: String,
    },
    /// Revoke a provider's passed certificates (those of --model, or of
    /// every model): failover to it is refused on every replica until it
    /// is certified again.
    Revoke {
        #[arg(long)]
        provider: String,
        /// Only the certificate for this model.
        #[arg(long)]
        model: Option<String>,
        /// Why, kept in the revocation's evidence (not empty).
        #[arg(long, value_parser = reason)]
        reason: String,
    },
}

/// A revocation's reason: something an operator reading the evidence
/// later can act on, so not empty or blank (issue 36).
fn reason(raw: &str) -> Result<String, String> {
    let reason = raw.trim();
    if reason.is_empty() {
        return Err("say why: the reason is kept in the revocation's evidence".to_owned());
    }
    Ok(reason.to_owned())
}

/// Runs one `certificates` command; prints what it found or did.
pub fn certificates(args: CertificatesArgs) -> Result<(), ServerCliError> {
    runtime()?.block_on(async move {
        // Only revoke writes; none of them creates or migrates anything.
        let read_only = !matches!(args.command, CertificatesCommand::Revoke { .. });
        let store = connect_existing(&args.database_url, &args.database_schema, read_only).await?;
        let failed = |e| ServerCliError::Usage(format!("the store: {e}"));
        match args.command {
            CertificatesCommand::List { provider, format } => {
                let all = match &provider {
                    Some(provider) => manage::of_provider(&store, provider).await,
                    None => every(&store).await,
                }
                .map_err(failed)?;
                print_list(&all, format);
            }
            CertificatesCommand::Show { provider } => {
                let all = manage::of_provider(&store, &provider)
                    .await
                    .map_err(failed)?;
                let shown = serde_json::to_string_pretty(&all).expect("certificates serialize");
                println!("{shown}");
            }
            CertificatesCommand::Revoke {
                provider,
                model,
                reason,
            } => revoke(&store, &provider, model.as_deref(), &reason).await?,
        }
        Ok(())
    })
}

/// Every stored certificate, a page at a time (at most
/// [`manage::CERTIFICATES_PAGE_MAX`] pages).
async fn every(store: &dyn Store) -> Result<Vec<Certificate>, crate::store::StoreError> {
    let mut all: Vec<Certificate> = Vec::new();
    for _ in 0..manage::CERTIFICATES_PAGE_MAX {
        let after = all.last().map(|c| c.key.clone());
        let page = store
            .certificates(after, manage::CERTIFICATES_PAGE_MAX)
            .await?;
        let last = page.len() < manage::CERTIFICATES_PAGE_MAX as usize;
        all.extend(page);
        if last {
            break;
        }
    }
    Ok(all)
}

fn print_list(all: &[Certificate], format: OutputFormat) {
    if format == OutputFormat::Json {
        let shown = serde_json::to_string_pretty(all).expect("certificates serialize");
        println!("{shown}");
        return;
    }
    println!("provider\tmodel\tprompt_version\tschema_version\tpassed\tsource\tat");
    for c in all {
        let source = c.evidence.get("source").and_then(|s| s.as_str());
        println!(
            "{}\t{}\t{}\t{}\t{}\t{}\t{}",
            c.key.provider,
            c.key.model,
            c.key.prompt_version,
            c.key.schema_version,
            c.passed,
            source.unwrap_or("-"),
            c.at.to_rfc3339()
        );
    }
    println!("{} certificates", all.len());
}

async fn revoke(
    store: &dyn Store,
    provider: &str,
    model: Option<&str>,
    reason: &str,
) -> Result<(), ServerCliError> {
    let failed = |e| ServerCliError::Usage(format!("the store: {e}"));
    let all = manage::of_provider(store, provider).await.map_err(failed)?;
    let mut revoked = 0;
    for certificate in all
        .iter()
        .filter(|c| c.passed && model.is_none_or(|m| c.key.model == m))
    {
        let by = "operator (idem-server certificates revoke)";
        let done = manage::revoke(store, &certificate.key, reason, by, SystemClock.now())
            .await
            .map_err(failed)?;
        if let Some(done) = done {
            revoked += 1;
            println!("{}", json!({"revoked": done.key}));
        }
    }
    if revoked == 0 {
        return Err(ServerCliError::Usage(format!(
            "no passed certificate of {provider}{} to revoke",
            model.map(|m| format!(" for model {m}")).unwrap_or_default()
        )));
    }
    println!("{revoked} certificates revoked");
    Ok(())
}
