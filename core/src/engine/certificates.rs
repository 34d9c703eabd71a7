//! Whether a provider may take a failover or a hedge: its contract
//! certificate, checked against the model the provider serves now.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[cfg(feature = "bench")]
use crate::design::Design;
use crate::provider::ProviderSet;
use idem_model::contract::Certificate;

use super::{Engine, EngineError, FailureReason, Trigger};
use idem_model::model::{Attempt, EventKind, Job};

/// Where a provider stands with its contract certificate, as a failover
/// decision sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum CertificateStatus {
    /// A passed certificate for the current key, and the provider still
    /// serves the model it was earned on (or does not say).
    Valid,
    /// No certificate for the provider's current (model, prompt version,
    /// schema version).
    Missing,
    /// The certification run failed.
    Failed,
    /// The certificate was revoked (by an operator, or on a model switch).
    Revoked,
    /// A certification of the provider is running in this process; until
    /// it passes, failover to the provider is refused.
    Pending,
    /// The provider now serves another model than the one certified: the
    /// certificate is revoked from here on.
    Stale { certified: String, serving: String },
    /// The provider could not say which model it serves.
    Unverified { detail: String },
    /// The certificate was earned at another endpoint than the one this
    /// service is configured to call under the provider's name.
    OtherEndpoint {
        certified: String,
        configured: String,
    },
}

impl CertificateStatus {
    pub fn is_valid(&self) -> bool {
        matches!(self, CertificateStatus::Valid)
    }

    /// Why a failover to the provider is refused, as events name it.
    pub fn reason(&self) -> &'static str {
        match self {
            CertificateStatus::Valid => "valid",
            CertificateStatus::Missing => "no_certificate",
            CertificateStatus::Failed => "certificate_failed",
            CertificateStatus::Revoked => "certificate_revoked",
            CertificateStatus::Pending => "certification_pending",
            CertificateStatus::Stale { .. } => "certificate_stale",
            CertificateStatus::Unverified { .. } => "model_unverified",
            CertificateStatus::OtherEndpoint { .. } => "certificate_other_endpoint",
        }
    }

    /// What a refused failover records: the reason, and what was certified
    /// against what is there now, where that is known.
    pub fn detail(&self) -> serde_json::Map<String, Value> {
        let mut detail = serde_json::Map::new();
        detail.insert("reason".to_owned(), self.reason().into());
        match self {
            CertificateStatus::Stale { certified, serving } => {
                detail.insert("certified_model".to_owned(), certified.clone().into());
                detail.insert("serving_model".to_owned(), serving.clone().into());
            }
            CertificateStatus::OtherEndpoint {
                certified,
                configured,
            } => {
                detail.insert("certified_endpoint".to_owned(), certified.clone().into());
                detail.insert("configured_endpoint".to_owned(), configured.clone().into());
            }
            CertificateStatus::Unverified { detail: why } => {
                detail.insert("detail".to_owned(), why.clone().into());
            }
            _ => {}
        }
        detail
    }

    /// The decision-trace detail of a refused failover to `provider`.
    pub fn refusal(&self, provider: &str, trigger: Trigger) -> Value {
        let mut detail = serde_json::Map::new();
        detail.insert("provider".to_owned(), provider.into());
        detail.insert("trigger".to_owned(), json!(trigger));
        detail.extend(self.detail());
        let detail = Value::Object(detail);
        tracing::info!(provider, %detail, "failover refused");
        detail
    }
}

/// Providers whose certification is running in this process: failover to
/// them is refused until it passes (see [`CertificateStatus::Pending`]).
#[derive(Clone, Debug, Default)]
pub struct PendingCertifications(
    std::sync::Arc<std::sync::Mutex<std::collections::BTreeSet<String>>>,
);

impl PendingCertifications {
    pub fn start(&self, provider: &str) {
        self.lock().insert(provider.to_owned());
    }

    pub fn finish(&self, provider: &str) {
        self.lock().remove(provider);
    }

    pub fn contains(&self, provider: &str) -> bool {
        self.lock().contains(provider)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeSet<String>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Asks providers which model they serve, so that a certificate earned on
/// one model is not relied on once the provider has silently moved to
/// another.
#[derive(Clone, Debug)]
pub struct ModelProbes {
    providers: ProviderSet,
    timeout_ms: u64,
}

impl ModelProbes {
    pub fn new(providers: ProviderSet, timeout_ms: u64) -> Self {
        Self {
            providers,
            timeout_ms,
        }
    }

    /// `Ok(None)`: the provider does not say (or has no client here).
    async fn identity(&self, provider: &str) -> Result<Option<String>, String> {
        let Some(client) = self.providers.get(provider) else {
            return Ok(None);
        };
        match crate::timer::timeout(
            std::time::Duration::from_millis(self.timeout_ms),
            client.model_identity(),
        )
        .await
        {
            Ok(Ok(identity)) => Ok(identity),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {} ms", self.timeout_ms)),
        }
    }
}

impl Engine {
    /// Whether `provider` holds a valid certificate: see
    /// [`Engine::certificate_status`].
    pub async fn is_certified(&self, provider: &str) -> Result<bool, EngineError> {
        Ok(self.certificate_status(provider).await?.is_valid())
    }

    /// Where `provider` stands: a passed certificate for its current model
    /// and the current prompt and schema versions, and (with model probes)
    /// the provider still serving the model the certificate was earned on.
    ///
    /// A provider found serving another model has its certificate revoked
    /// in the store (a failed certificate under the same key, its evidence
    /// saying why), so that every replica refuses it from then on, probe or
    /// not, until it is certified again.
    pub async fn certificate_status(
        &self,
        provider: &str,
    ) -> Result<CertificateStatus, EngineError> {
        #[cfg(feature = "bench")]
        if self.runs(Design::BlindFailover) {
            return Ok(self.blind_failover_status(provider));
        }
        let certificate = match self.stored_certificate(provider).await? {
            Ok(certificate) => certificate,
            Err(status) => return Ok(status),
        };
        let (Some(probes), Some(certified)) = (&self.probes, certificate.model_identity()) else {
            return Ok(CertificateStatus::Valid);
        };
        let certified = certified.to_owned();
        match probes.identity(provider).await {
            Ok(Some(serving)) if serving == certified => Ok(CertificateStatus::Valid),
            Ok(Some(serving)) => {
                self.revoke_for_other_model(provider, &certificate, certified, serving)
                    .await
            }
            // It no longer says: nothing shows it is still what was certified.
            Ok(None) => Ok(CertificateStatus::Unverified {
                detail: "the provider no longer reports the model it serves".to_owned(),
            }),
            Err(detail) => Ok(CertificateStatus::Unverified { detail }),
        }
    }

    /// `provider`'s certificate as the store holds it, if it is one to rely
    /// on (passed, not revoked, earned at the configured endpoint, no
    /// certification of it running here); otherwise why not. No probe.
    async fn stored_certificate(
        &self,
        provider: &str,
    ) -> Result<Result<Certificate, CertificateStatus>, EngineError> {
        if self.pending.contains(provider) {
            return Ok(Err(CertificateStatus::Pending));
        }
        let Some(key) = self.providers.certificate_key(provider) else {
            return Ok(Err(CertificateStatus::Missing));
        };
        let Some(certificate) = self.store.certificate(&key).await? else {
            return Ok(Err(CertificateStatus::Missing));
        };
        if crate::certify::manage::is_revoked(&certificate) {
            return Ok(Err(CertificateStatus::Revoked));
        }
        if !certificate.passed {
            return Ok(Err(CertificateStatus::Failed));
        }
        if let Some(moved) = self.endpoint_moved(provider, &certificate) {
            return Ok(Err(moved));
        }
        Ok(Ok(certificate))
    }

    /// The certificate check made in the step that dispatches `attempt`:
    /// `Some(why)` when its provider, off the job's primary, holds no valid
    /// certificate now. The check when the attempt was started is not
    /// enough: a store call, a pause or a crash may lie between that check
    /// and the dispatch, and the provider may switch models meanwhile.
    ///
    /// A refusal is noted in the decision trace; the caller fails the
    /// attempt before anything is sent (see [`FailureReason::NotCertified`]).
    pub async fn refusal_at_dispatch(
        &self,
        job: &Job,
        attempt: &Attempt,
    ) -> Result<Option<CertificateStatus>, EngineError> {
        if attempt.provider == job.provider || !self.checks_certificates_at_use() {
            return Ok(None);
        }
        let status = self.certificate_status(&attempt.provider).await?;
        if status.is_valid() {
            return Ok(None);
        }
        let detail = status.refusal(&attempt.provider, Trigger::Dispatch);
        self.note(job.id, Some(attempt.id), EventKind::FailoverRefused, detail)
            .await;
        Ok(Some(status))
    }

    /// Why an answer to an attempt on `provider` may not become a result:
    /// off the job's `primary`, the answer must say it came from a model
    /// the provider's certificate vouches for, checked against the
    /// certificate the store holds when the answer is used. This is where
    /// certified failover is enforced: whatever store latency, pause, crash
    /// or clock fault came between a certificate check and the provider's
    /// work, an uncertified model's output never reaches the
    /// compare-and-swap. `None`: the answer may be used.
    pub async fn answer_refusal(
        &self,
        primary: &str,
        provider: &str,
        model: Option<&str>,
    ) -> Result<Option<FailureReason>, EngineError> {
        if provider == primary || !self.checks_certificates_at_use() {
            return Ok(None);
        }
        let vouched = match (self.stored_certificate(provider).await?, model) {
            (Ok(certificate), Some(model)) => certificate.covers_answer_from(model),
            _ => false,
        };
        Ok((!vouched).then(|| FailureReason::UncertifiedModel {
            served_model: model.map(str::to_owned),
        }))
    }

    /// Whether certificates are checked where they are used (at dispatch and
    /// on the answer). Only the bench's designs that ignore certificates,
    /// or revert this check, skip it.
    fn checks_certificates_at_use(&self) -> bool {
        #[cfg(feature = "bench")]
        if self.runs(Design::BlindFailover) || self.runs(Design::ZooCertificateCheckedAtStart) {
            return false;
        }
        true
    }

    /// The naive design's answer, kept out of the real path: every
    /// configured provider is taken to share the contract.
    #[cfg(feature = "bench")]
    fn blind_failover_status(&self, provider: &str) -> CertificateStatus {
        if self.providers.contains(provider) {
            CertificateStatus::Valid
        } else {
            CertificateStatus::Missing
        }
    }

    /// [`CertificateStatus::OtherEndpoint`] when `certificate` was earned
    /// at another endpoint than the one `provider` is configured with now.
    /// Not revoked: another replica may still be configured with the
    /// endpoint it was earned at (a rollout in progress).
    fn endpoint_moved(
        &self,
        provider: &str,
        certificate: &Certificate,
    ) -> Option<CertificateStatus> {
        let configured = self
            .providers
            .specs
            .get(provider)
            .and_then(|spec| spec.endpoint.as_deref());
        match (configured, certificate.endpoint()) {
            (Some(configured), Some(certified)) if configured != certified => {
                Some(CertificateStatus::OtherEndpoint {
                    certified: certified.to_owned(),
                    configured: configured.to_owned(),
                })
            }
            _ => None,
        }
    }

    /// Revokes `certificate` in the store, its evidence saying `provider`
    /// was found `serving` another model than the `certified` one, so that
    /// every replica refuses the provider until it is certified again.
    async fn revoke_for_other_model(
        &self,
        provider: &str,
        certificate: &Certificate,
        certified: String,
        serving: String,
    ) -> Result<CertificateStatus, EngineError> {
        let reason = "the provider serves another model than the one certified";
        let evidence = crate::certify::manage::revocation_evidence(
            reason,
            "model probe",
            certificate,
            json!({"certified_model_identity": certified, "serving_model_identity": serving}),
        );
        self.store
            .put_certificate(Certificate {
                key: certificate.key.clone(),
                passed: false,
                evidence,
                at: self.clock.now(),
            })
            .await?;
        tracing::warn!(
            provider, certified = %certified, serving = %serving,
            "certificate revoked: {reason}"
        );
        Ok(CertificateStatus::Stale { certified, serving })
    }
}
