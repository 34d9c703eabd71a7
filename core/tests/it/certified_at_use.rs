//! Certified failover enforced where it is used, not where it was once
//! checked (issue 34). A certificate checked when an attempt starts can be
//! stale by the time the attempt is dispatched (a slow store call, a pause,
//! a crash in between) or by the time the provider runs it (it switched
//! models while the request was in flight). So the worker checks the
//! certificate again in the step that dispatches, and an answer counts only
//! if the provider says it came from a model its certificate vouches for;
//! the reconciler holds a status lookup's answer to the same rule.
//!
//! Each defence is tested on its own, and the zoo design that reverts them
//! (`zoo-certificate-checked-at-start`) is run beside the correct one so
//! that every test can fail.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use async_trait::async_trait;
use idem_core::design::Design;
use idem_core::engine::{Engine, Policy, Trigger};
use idem_core::provider::{
    Answer, Dispatch, Provider, ProviderCall, ProviderError, ProviderSet, RemoteStatus,
};
use idem_core::reconciler::{Reconciler, ReconcilerConfig};
use idem_core::store::mem::MemStore;
use idem_core::worker::{AttemptEnd, Hedging, Worker, WorkerConfig};
use idem_model::contract::Certificate;
use idem_model::model::{AttemptId, AttemptState, Job, JobState};
use serde_json::{Value, json};

use crate::support::{FALLBACK, PRIMARY, engine, owner, request};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// The model the fallback was certified on (`Providers::named` names each
/// provider's model after it).
const CERTIFIED_MODEL: &str = FALLBACK;

/// A provider that answers at once, saying `model` produced the output, and
/// counts the calls it was sent.
#[derive(Debug)]
struct Answering {
    model: Option<&'static str>,
    calls: Arc<AtomicU32>,
}

struct Call {
    model: Option<&'static str>,
    calls: Arc<AtomicU32>,
}

#[async_trait]
impl Dispatch for Call {
    async fn send(self: Box<Self>, _call: ProviderCall) -> Result<Answer, ProviderError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(Answer {
            output: json!({"answer": "done"}).into(),
            model: self.model.map(str::to_owned),
        })
    }
}

#[async_trait]
impl Provider for Answering {
    async fn connect(&self) -> Result<Box<dyn Dispatch>, ProviderError> {
        Ok(Box::new(Call {
            model: self.model,
            calls: Arc::clone(&self.calls),
        }))
    }

    async fn status(&self, _key: AttemptId) -> Result<RemoteStatus, ProviderError> {
        Ok(RemoteStatus::Succeeded {
            output: json!({"answer": "done"}).into(),
            model: self.model.map(str::to_owned),
        })
    }

    async fn cancel(&self, _key: AttemptId) -> Result<bool, ProviderError> {
        Ok(false)
    }
}

/// An engine under `design` whose fallback holds a certificate earned on
/// `CERTIFIED_MODEL`, and alice's job with an attempt started on the
/// fallback (the backup button).
async fn started_on_fallback(
    design: Design,
) -> Result<(Engine, Job, idem_model::model::Attempt), Box<dyn std::error::Error>> {
    let engine = engine(Arc::new(MemStore::new()), Policy::Strict, 3).with_design(design, "api");
    store_certificate(&engine, true).await?;
    let job = engine
        .create_job(&owner("alice"), "k", request(json!({"text": "hi"})))
        .await?
        .job()
        .clone();
    let attempt = engine
        .start_attempt(&job, Some(FALLBACK), Trigger::Manual)
        .await?;
    Ok((engine, job, attempt))
}

/// The fallback's certificate, passed or (`passed: false`) revoked.
async fn store_certificate(engine: &Engine, passed: bool) -> TestResult {
    let key = engine
        .providers()
        .certificate_key(FALLBACK)
        .ok_or("the fallback is a known provider")?;
    let evidence: Value = if passed {
        json!({"served_models": [CERTIFIED_MODEL]})
    } else {
        json!({"source": "revoked", "reason": "the provider switched models"})
    };
    engine
        .store()
        .put_certificate(Certificate {
            key,
            passed,
            evidence,
            at: engine.clock().now(),
        })
        .await?;
    Ok(())
}

fn worker(engine: &Engine, model: Option<&'static str>, calls: &Arc<AtomicU32>) -> Worker {
    let mut providers = ProviderSet::new();
    providers.insert(
        FALLBACK.to_owned(),
        Arc::new(Answering {
            model,
            calls: Arc::clone(calls),
        }) as Arc<dyn Provider>,
    );
    Worker::new(engine.clone(), providers, WorkerConfig::default())
}

/// What became of the attempt: its state and its error's reason.
async fn ended(
    engine: &Engine,
    attempt: AttemptId,
) -> Result<(AttemptState, Option<String>), Box<dyn std::error::Error>> {
    let row = engine.attempt(attempt).await?;
    let reason = row
        .error
        .as_ref()
        .and_then(|e| e.get("reason"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    Ok((row.state, reason))
}

/// One case: the design, the model the fallback's answer names, and what
/// the attempt must end as (state, reason) with the job's state.
struct AnswerCase {
    design: Design,
    answered_by: Option<&'static str>,
    end: (AttemptState, Option<&'static str>),
    job: JobState,
}

async fn check(case: AnswerCase) -> TestResult {
    let (engine, job, attempt) = started_on_fallback(case.design).await?;
    let calls = Arc::new(AtomicU32::new(0));
    let end = worker(&engine, case.answered_by, &calls)
        .execute(job.clone(), attempt.clone(), Hedging::Never)
        .await?;
    let (state, reason) = ended(&engine, attempt.id).await?;
    let label = format!("{} answered by {:?}", case.design, case.answered_by);
    assert_eq!(
        (state, reason.as_deref()),
        case.end,
        "{label}: ended {end:?}"
    );
    assert_eq!(engine.job(job.id).await?.state, case.job, "{label}");
    assert_eq!(calls.load(Ordering::SeqCst), 1, "{label}: dispatched once");
    Ok(())
}

/// The fallback's answer names the model that produced it: the certified
/// one wins; another, or none, is refused (the attempt fails with
/// `uncertified_model` and the job stays open for another attempt), unless
/// the design reverts the check.
#[tokio::test]
async fn an_answer_counts_only_from_the_certified_model() -> TestResult {
    let cases = [
        AnswerCase {
            design: Design::Correct,
            answered_by: Some(CERTIFIED_MODEL),
            end: (AttemptState::Succeeded, None),
            job: JobState::Succeeded,
        },
        AnswerCase {
            design: Design::Correct,
            answered_by: Some("fallback-v4"),
            end: (AttemptState::Failed, Some("uncertified_model")),
            job: JobState::Pending,
        },
        AnswerCase {
            design: Design::Correct,
            answered_by: None,
            end: (AttemptState::Failed, Some("uncertified_model")),
            job: JobState::Pending,
        },
        AnswerCase {
            design: Design::ZooCertificateCheckedAtStart,
            answered_by: Some("fallback-v4"),
            end: (AttemptState::Succeeded, None),
            job: JobState::Succeeded,
        },
    ];
    for case in cases {
        check(case).await?;
    }
    Ok(())
}

/// The certificate lapses after the attempt started and before it is
/// dispatched (the provider switched models and was revoked meanwhile):
/// the dispatch is refused, nothing is sent, and the attempt fails with
/// `not_certified`. The zoo design sends it anyway.
#[tokio::test]
async fn a_certificate_that_lapsed_after_the_start_stops_the_dispatch() -> TestResult {
    for (design, sent, end) in [
        (
            Design::Correct,
            0,
            (AttemptState::Failed, Some("not_certified")),
        ),
        (
            Design::ZooCertificateCheckedAtStart,
            1,
            (AttemptState::Succeeded, None),
        ),
    ] {
        let (engine, job, attempt) = started_on_fallback(design).await?;
        store_certificate(&engine, false).await?;
        let calls = Arc::new(AtomicU32::new(0));
        let _end = worker(&engine, Some(CERTIFIED_MODEL), &calls)
            .execute(job, attempt.clone(), Hedging::Never)
            .await?;
        let (state, reason) = ended(&engine, attempt.id).await?;
        assert_eq!((state, reason.as_deref()), end, "{design}");
        assert_eq!(calls.load(Ordering::SeqCst), sent, "{design}: calls sent");
    }
    Ok(())
}

/// The reconciler resolves an unknown attempt from a status lookup: a
/// "succeeded" from another model than the certified one resolves it as
/// failed with `uncertified_model`, never as the job's result.
#[tokio::test]
async fn a_status_answer_from_another_model_resolves_the_attempt_failed() -> TestResult {
    for (design, end, job_state) in [
        (
            Design::Correct,
            (AttemptState::Failed, Some("uncertified_model")),
            JobState::Pending,
        ),
        // The unknown move's reason stays on a resolved attempt's row.
        (
            Design::ZooCertificateCheckedAtStart,
            (AttemptState::Succeeded, Some("deadline")),
            JobState::Succeeded,
        ),
    ] {
        let (engine, job, attempt) = started_on_fallback(design).await?;
        engine.record_dispatch(attempt.id).await?;
        engine.mark_unknown_after_deadline(attempt.id).await?;
        let mut providers = ProviderSet::new();
        providers.insert(
            FALLBACK.to_owned(),
            Arc::new(Answering {
                model: Some("fallback-v4"),
                calls: Arc::new(AtomicU32::new(0)),
            }) as Arc<dyn Provider>,
        );
        let reconciler = Reconciler::new(engine.clone(), providers, ReconcilerConfig::default());
        let report = reconciler.pass().await;
        let (state, reason) = ended(&engine, attempt.id).await?;
        assert_eq!((state, reason.as_deref()), end, "{design}: {report:?}");
        assert_eq!(engine.job(job.id).await?.state, job_state, "{design}");
    }
    Ok(())
}

/// The primary is the job's own choice and needs no certificate: its
/// answer is used whatever model it names.
#[tokio::test]
async fn the_primary_answer_is_not_held_to_a_certificate() -> TestResult {
    let engine = engine(Arc::new(MemStore::new()), Policy::Strict, 4);
    let job = engine
        .create_job(&owner("alice"), "k", request(json!({"text": "hi"})))
        .await?
        .job()
        .clone();
    let attempt = engine.start_attempt(&job, None, Trigger::Worker).await?;
    assert_eq!(attempt.provider, PRIMARY);
    let calls = Arc::new(AtomicU32::new(0));
    let mut providers = ProviderSet::new();
    providers.insert(
        PRIMARY.to_owned(),
        Arc::new(Answering {
            model: Some("primary-v9"),
            calls: Arc::clone(&calls),
        }) as Arc<dyn Provider>,
    );
    let end = Worker::new(engine.clone(), providers, WorkerConfig::default())
        .execute(job, attempt, Hedging::Never)
        .await?;
    assert_eq!(end, AttemptEnd::Won);
    Ok(())
}
