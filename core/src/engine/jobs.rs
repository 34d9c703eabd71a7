//! Creating a job for an (owner, key), or replaying it.

use std::collections::BTreeMap;

#[cfg(feature = "bench")]
use crate::design::Design;
use crate::store::{CreateOutcome, NewJob};
use idem_model::fingerprint::Canonical;
use idem_model::json::Json;
use idem_model::model::{IdempotencyKey, Job, JobId, JobRequest, OwnerId};

use super::retry::{Try, retry_store_call};
use super::{Created, Engine, EngineError};

impl Engine {
    /// Create the job for (owner, key), or replay it. The owner comes from
    /// the caller's credentials. The key is bound to the canonical request.
    pub async fn create_job(
        &self,
        owner: &OwnerId,
        key: &str,
        request: JobRequest,
    ) -> Result<Created, EngineError> {
        self.create_job_exact(owner, key, request, None).await
    }

    /// [`Engine::create_job`] with `params` exactly as the client wrote them
    /// (see [`idem_model::json`]): a number serde_json would round keeps its
    /// digits in the fingerprint and in the stored request. `request.params`
    /// is then only the rounded view of the same document.
    pub async fn create_job_exact(
        &self,
        owner: &OwnerId,
        key: &str,
        request: JobRequest,
        params: Option<&Json>,
    ) -> Result<Created, EngineError> {
        let created = self.create(owner, key, request, params).await;
        match &created {
            Ok(Created::New(_)) => self.metrics.job_created(),
            Ok(Created::Replayed(_)) => self.metrics.job_replayed(),
            Err(EngineError::KeyReused { .. }) => self.metrics.job_refused("key_reused"),
            Err(EngineError::InvalidKey(_)) => self.metrics.job_refused("invalid_key"),
            Err(EngineError::UnknownProvider { .. }) => {
                self.metrics.job_refused("unknown_provider");
            }
            Err(EngineError::InvalidFallbacks { .. }) => {
                self.metrics.job_refused("invalid_fallbacks");
            }
            Err(_) => {}
        }
        created
    }

    async fn create(
        &self,
        owner: &OwnerId,
        key: &str,
        request: JobRequest,
        params: Option<&Json>,
    ) -> Result<Created, EngineError> {
        let key = IdempotencyKey::parse(key)?;
        #[cfg(feature = "bench")]
        let key = self.naive_session_scoped(key);
        for provider in std::iter::once(&request.provider).chain(&request.fallbacks) {
            if !self.providers.contains(provider) {
                return Err(EngineError::UnknownProvider {
                    provider: provider.clone(),
                });
            }
        }
        check_fallbacks(&request)?;
        let new = self.new_job(owner, key, request, params);
        #[cfg(feature = "bench")]
        if let Some(found) = self.naive_check_before_insert(&new).await? {
            return found;
        }
        self.insert_or_replay(&new).await
    }

    /// The job to insert: the request made canonical (with `params` exactly
    /// as written, when given) and fingerprinted.
    fn new_job(
        &self,
        owner: &OwnerId,
        key: IdempotencyKey,
        request: JobRequest,
        params: Option<&Json>,
    ) -> NewJob {
        let canonical = Canonical::from_json(&request_body(&request, params));
        NewJob {
            id: self.ids.job_id(),
            owner_id: owner.clone(),
            idempotency_key: key,
            request_fingerprint: canonical.fingerprint(),
            request: canonical,
            provider: request.provider,
            fallbacks: request.fallbacks,
            at: self.clock.now(),
        }
    }

    /// Create-or-get is idempotent by construction, so a lost
    /// acknowledgement is answered by asking again.
    async fn insert_or_replay(&self, new: &NewJob) -> Result<Created, EngineError> {
        retry_store_call(|| async {
            match self.store.create_job(new.clone()).await {
                Ok(CreateOutcome::Created(job)) => Try::Done(Ok(Created::New(job))),
                Ok(CreateOutcome::Existing(job)) => Try::Done(Ok(Created::Replayed(job))),
                #[cfg(feature = "bench")]
                Ok(CreateOutcome::KeyReused { existing, .. })
                    if self.runs(Design::NoFingerprint) =>
                {
                    Try::Done(self.naive_replay_by_key_alone(existing).await)
                }
                Ok(CreateOutcome::KeyReused {
                    existing,
                    differing_pointers,
                }) => Try::Done(Err(EngineError::KeyReused {
                    existing,
                    differing_pointers,
                })),
                Err(e) => Try::from_store_error(e),
            }
        })
        .await
    }

    /// The job, whoever owns it (the loops' view).
    pub async fn job(&self, id: JobId) -> Result<Job, EngineError> {
        self.store
            .job(id)
            .await?
            .ok_or(EngineError::JobNotFound(id))
    }

    /// The job, if it exists and belongs to `owner`. Another owner's job is
    /// reported as not found, so that existence does not leak.
    pub async fn job_for(&self, owner: &OwnerId, id: JobId) -> Result<Job, EngineError> {
        match self.store.job(id).await? {
            Some(job) if &job.owner_id == owner => Ok(job),
            _ => Err(EngineError::JobNotFound(id)),
        }
    }
}

/// The most fallbacks a job may name: each is a provider the service is
/// configured with, named once.
pub const FALLBACKS_MAX: usize = 8;

/// A job's fallbacks are other providers than its primary, each named once,
/// at most [`FALLBACKS_MAX`] of them.
fn check_fallbacks(request: &JobRequest) -> Result<(), EngineError> {
    let invalid = |reason: String| Err(EngineError::InvalidFallbacks { reason });
    if request.fallbacks.len() > FALLBACKS_MAX {
        return invalid(format!("at most {FALLBACKS_MAX} fallbacks"));
    }
    if request.fallbacks.contains(&request.provider) {
        return invalid(format!(
            "the primary {:?} cannot be its own fallback",
            request.provider
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for fallback in &request.fallbacks {
        if !seen.insert(fallback) {
            return invalid(format!("{fallback:?} is named twice"));
        }
    }
    Ok(())
}

/// The request as the JSON object serde writes for it, with `params`
/// exactly as written when given. Built member by member, not through
/// `serde_json::to_value` and back: every create pays for it. The
/// destructuring names every field, so a new one cannot be left out of the
/// fingerprint unnoticed (a test compares this with serde's form).
fn request_body(request: &JobRequest, params: Option<&Json>) -> Json {
    let JobRequest {
        provider,
        fallbacks,
        params: params_value,
    } = request;
    let fallbacks = fallbacks.iter().cloned().map(Json::String).collect();
    let params = params
        .cloned()
        .unwrap_or_else(|| Json::from_value(params_value));
    Json::Object(BTreeMap::from([
        ("fallbacks".to_owned(), Json::Array(fallbacks)),
        ("params".to_owned(), params),
        ("provider".to_owned(), Json::String(provider.clone())),
    ]))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_request_body_is_serdes_form_of_the_request() {
        let request = JobRequest {
            provider: "primary".to_owned(),
            fallbacks: vec!["backup".to_owned(), "b\"2".to_owned()],
            params: json!({"text": "x", "n": [1, 2.5, {"deep": null}]}),
        };
        let serde = Json::from_value(&serde_json::to_value(&request).expect("serializes"));
        assert_eq!(request_body(&request, None), serde);
        let exact = idem_model::json::parse(br#"{"n":18446744073709551617}"#).expect("JSON");
        let Json::Object(mut members) = serde else {
            panic!("a request is an object");
        };
        members.insert("params".to_owned(), exact.clone());
        assert_eq!(request_body(&request, Some(&exact)), Json::Object(members));
    }
}
