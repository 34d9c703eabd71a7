//! Certificates as an operator manages them: recorded from a certification
//! (only when it was conclusive), asserted by hand, listed, revoked.
//!
//! A revocation is a failed certificate under the same key whose evidence
//! says `"source": "revoked"`, why, by whom, and keeps the revoked
//! evidence: every replica reads the same row, so every replica refuses the
//! provider from then on, until it is certified again.

use serde_json::{Value, json};

use crate::store::{Store, StoreError};
use idem_contract::report::Certification;
use idem_model::contract::{Certificate, CertificateKey, Providers};
use idem_model::model::Timestamp;

/// The most certificates read per store call while filtering by provider.
pub const CERTIFICATES_PAGE_MAX: u32 = 100;

/// Whether `certificate` is a revocation (see the module doc).
pub fn is_revoked(certificate: &Certificate) -> bool {
    !certificate.passed && certificate.evidence.get("source") == Some(&json!("revoked"))
}

/// A page of certificates after `after`, at most `limit`, only those of
/// `provider` when one is named (keys are ordered by provider first, so a
/// page stops at the first key of another provider).
pub async fn page(
    store: &dyn Store,
    after: Option<CertificateKey>,
    provider: Option<&str>,
    limit: u32,
) -> Result<Vec<Certificate>, StoreError> {
    let mut page = store.certificates(after, limit).await?;
    if let Some(provider) = provider {
        page.retain(|c| c.key.provider == provider);
    }
    Ok(page)
}

/// Every certificate of `provider`, at most `CERTIFICATES_PAGE_MAX` pages.
pub async fn of_provider(
    store: &dyn Store,
    provider: &str,
) -> Result<Vec<Certificate>, StoreError> {
    let mut found = Vec::new();
    let mut after = Some(CertificateKey {
        provider: provider.to_owned(),
        model: String::new(),
        prompt_version: String::new(),
        schema_version: String::new(),
    });
    for _ in 0..CERTIFICATES_PAGE_MAX {
        let page = store
            .certificates(after.clone(), CERTIFICATES_PAGE_MAX)
            .await?;
        let full = page.len() == CERTIFICATES_PAGE_MAX as usize;
        let mine: Vec<Certificate> = page
            .into_iter()
            .take_while(|c| c.key.provider == provider)
            .collect();
        let done = !full || mine.len() < CERTIFICATES_PAGE_MAX as usize;
        after = mine.last().map(|c| c.key.clone());
        found.extend(mine);
        if done {
            break;
        }
    }
    Ok(found)
}

/// Revokes the certificate under `key`, if there is one that is not
/// already failed: a failed certificate whose evidence keeps the revoked
/// one. Returns the revocation, or `None` when there was nothing to revoke.
pub async fn revoke(
    store: &dyn Store,
    key: &CertificateKey,
    reason: &str,
    by: &str,
    at: Timestamp,
) -> Result<Option<Certificate>, StoreError> {
    let Some(current) = store.certificate(key).await? else {
        return Ok(None);
    };
    if !current.passed {
        return Ok(None);
    }
    let revocation = Certificate {
        key: key.clone(),
        passed: false,
        evidence: revocation_evidence(reason, by, &current, json!({})),
        at,
    };
    store.put_certificate(revocation.clone()).await?;
    tracing::warn!(
        provider = %key.provider, model = %key.model, reason, by,
        "certificate revoked: failover to this provider is refused until it is certified again"
    );
    Ok(Some(revocation))
}

/// The evidence of a revocation of `current`, with `extra` fields.
pub fn revocation_evidence(reason: &str, by: &str, current: &Certificate, extra: Value) -> Value {
    let mut evidence = json!({
        "source": "revoked",
        "reason": reason,
        "revoked_by": by,
        "revoked_evidence": current.evidence,
    });
    if let (Some(fields), Value::Object(more)) = (evidence.as_object_mut(), extra) {
        fields.extend(more);
    }
    evidence
}

/// Stores `certification`'s outcome as the provider's certificate under
/// the contract's versions, replacing any earlier one for that key, and
/// returns the key. Only a conclusive run gets here: an inconclusive one
/// ([`super::CertifyError::Inconclusive`]) is no certification, and
/// whatever certificate was on file stays.
pub async fn record(
    store: &dyn Store,
    at: Timestamp,
    providers: &Providers,
    certification: &Certification,
    build: &str,
) -> Result<CertificateKey, StoreError> {
    let target = &certification.target;
    let key = providers
        .certificate_key(&target.provider)
        .unwrap_or_else(|| CertificateKey {
            provider: target.provider.clone(),
            model: target.model.clone(),
            prompt_version: certification.prompt_version.clone(),
            schema_version: certification.schema_version.clone(),
        });
    let mut evidence = certification.evidence(build);
    let endpoint = providers
        .specs
        .get(&target.provider)
        .and_then(|spec| spec.endpoint.clone());
    if let (Some(fields), Some(endpoint)) = (evidence.as_object_mut(), endpoint) {
        fields.insert("endpoint".to_owned(), endpoint.into());
    }
    store
        .put_certificate(Certificate {
            key: key.clone(),
            passed: certification.passed(),
            evidence,
            at,
        })
        .await?;
    Ok(key)
}
