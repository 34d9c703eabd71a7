//! One certification run: every corpus input, every sample, every check,
//! against one provider through the real OpenAI-compatible client.
//!
//! Calls go out a bounded number at a time ([`RunLimits::concurrency`]),
//! each bounded in time and retried a bounded number of times when the
//! transport fails (never when the content is wrong: a wrong answer is the
//! finding). Results are collected by (input, sample), so the report does
//! not depend on the order answers come back in; idempotency keys are drawn
//! from the injected id source before any call, in corpus order, so a
//! simulated run is reproducible.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::task::JoinSet;

use super::report::{Certification, Check, CheckOutcome, Failure, InputRow, Target};
use super::spec::{Contract, RenderedPrompt};
use super::tokenizer;
use crate::clock::IdSource;
use crate::provider::ProviderError;

/// Schema errors kept per failing sample.
const SCHEMA_ERRORS_MAX: usize = 3;

/// One chat completion as the certifier (and the worker) sends it.
#[derive(Clone, Debug, PartialEq)]
pub struct ChatRequest {
    pub model: String,
    pub prompt: RenderedPrompt,
    pub temperature: f64,
    /// Sent as `max_tokens`.
    pub max_output_tokens: u32,
}

/// What a provider answered: the first choice's content, and the model it
/// says produced it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChatAnswer {
    pub content: Option<String>,
    pub model: Option<String>,
}

/// A provider as the certifier talks to it.
#[async_trait]
pub trait ChatEndpoint: Send + Sync + fmt::Debug {
    /// Opens a connection and closes it: can the provider be reached?
    async fn reach(&self) -> Result<(), ProviderError>;
    /// What the provider says it serves under `model`
    /// (`GET /v1/models/{model}`): `None` when it does not say.
    async fn model_identity(&self, model: &str) -> Result<Option<String>, ProviderError>;
    /// One chat completion under the idempotency key `key`.
    async fn chat(&self, request: &ChatRequest, key: &str) -> Result<ChatAnswer, ProviderError>;
}

/// Bounds of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunLimits {
    /// Calls in flight at once.
    pub concurrency: usize,
    /// How long one call may take.
    pub call_timeout_ms: u64,
    /// Tries per sample when the transport fails (1 = no retry).
    pub call_tries_max: u32,
}

impl Default for RunLimits {
    fn default() -> Self {
        Self {
            concurrency: 4,
            call_timeout_ms: 60_000,
            call_tries_max: 3,
        }
    }
}

/// The most calls in flight at once.
pub const CONCURRENCY_MAX: usize = 64;
/// The most tries of one sample.
pub const CALL_TRIES_MAX: u32 = 5;

/// A run that could not be made at all (exit code 2): as opposed to a run
/// that was made and found the provider wanting.
#[derive(Debug, thiserror::Error)]
pub enum CertifyError {
    #[error("provider {provider:?} is unreachable: {detail}")]
    Unreachable { provider: String, detail: String },
    /// The provider refused the credentials (401 or 403): a configuration
    /// to fix, not a finding about the contract.
    #[error(
        "provider {provider:?} refused the API key ({detail}): check the variable its api_key_env names"
    )]
    Unauthorized { provider: String, detail: String },
    #[error("bad run limits: {0}")]
    Limits(String),
}

/// 401 and 403: the provider refuses who is asking, whatever is asked.
fn is_unauthorized(error: &ProviderError) -> bool {
    matches!(
        error,
        ProviderError::Rejected {
            status: 401 | 403,
            ..
        }
    )
}

/// The outcome of one sample's call.
#[derive(Clone, Debug)]
struct SampleAnswer {
    answer: Result<ChatAnswer, String>,
    tries: u32,
    /// The refusal, when the provider refused the credentials.
    unauthorized: Option<String>,
}

/// Certifies `target` against `contract` through `endpoint`.
pub async fn certify(
    endpoint: Arc<dyn ChatEndpoint>,
    contract: Arc<Contract>,
    target: &Target,
    ids: &dyn IdSource,
    limits: RunLimits,
) -> Result<Certification, CertifyError> {
    if limits.concurrency == 0 || limits.concurrency > CONCURRENCY_MAX {
        return Err(CertifyError::Limits(format!(
            "concurrency must be 1 to {CONCURRENCY_MAX}"
        )));
    }
    if limits.call_tries_max == 0 || limits.call_tries_max > CALL_TRIES_MAX {
        return Err(CertifyError::Limits(format!(
            "call tries must be 1 to {CALL_TRIES_MAX}"
        )));
    }
    let unreachable = |e: ProviderError| CertifyError::Unreachable {
        provider: target.provider.clone(),
        detail: e.to_string(),
    };
    let timeout = Duration::from_millis(limits.call_timeout_ms);
    crate::timer::timeout(timeout, endpoint.reach())
        .await
        .unwrap_or_else(|_| Err(ProviderError::Unreachable("connect timed out".to_owned())))
        .map_err(unreachable)?;
    let model_identity =
        match crate::timer::timeout(timeout, endpoint.model_identity(&target.model)).await {
            Ok(Ok(identity)) => identity,
            Ok(Err(e)) if is_unauthorized(&e) => {
                return Err(CertifyError::Unauthorized {
                    provider: target.provider.clone(),
                    detail: e.to_string(),
                });
            }
            // The lookup is optional: a provider that cannot answer it is
            // certified without an identity, and its certificate then follows
            // the configured model name alone.
            Ok(Err(_)) | Err(_) => None,
        };

    // Render and check every input's prompt first: the tokenizer checks
    // need no provider, and an input that does not fit the window is not
    // sent (the provider would refuse or truncate it).
    let mut rows: Vec<InputRow> = Vec::with_capacity(contract.inputs.len());
    let mut failures: Vec<Failure> = Vec::new();
    let mut prompts: Vec<Option<RenderedPrompt>> = Vec::with_capacity(contract.inputs.len());
    for input in &contract.inputs {
        let mut row = InputRow::new(&input.name);
        match contract.render(&input.params) {
            Ok(prompt) => {
                let findings =
                    tokenizer::check(&target.tokenizer, &prompt, contract.max_output_tokens);
                row.prompt_tokens = Some(findings.prompt_tokens);
                for (check, result) in [
                    (Check::TokenizerLossless, findings.lossless),
                    (Check::SpecialTokens, findings.special_tokens),
                    (Check::ContextWindow, findings.context_window),
                ] {
                    row.record(check, result.is_ok());
                    if let Err(detail) = result {
                        failures.push(Failure::new(check, &input.name, None, detail));
                    }
                }
                let fits = row.cell(Check::ContextWindow) == CheckOutcome::Pass;
                prompts.push(fits.then_some(prompt));
            }
            // The contract compiled, so every corpus input rendered once;
            // report it rather than assume.
            Err(e) => {
                failures.push(Failure::new(
                    Check::TokenizerLossless,
                    &input.name,
                    None,
                    e.to_string(),
                ));
                row.record(Check::TokenizerLossless, false);
                prompts.push(None);
            }
        }
        rows.push(row);
    }

    // Keys in corpus order, before any call.
    let samples = contract.samples_per_input;
    let mut calls: Vec<(usize, u32, String, ChatRequest)> = Vec::new();
    for (index, prompt) in prompts.iter().enumerate() {
        let Some(prompt) = prompt else { continue };
        for sample in 1..=samples {
            calls.push((
                index,
                sample,
                ids.attempt_id().to_string(),
                ChatRequest {
                    model: target.model.clone(),
                    prompt: prompt.clone(),
                    temperature: contract.temperature,
                    max_output_tokens: contract.max_output_tokens,
                },
            ));
        }
    }
    let answers = run_calls(&endpoint, calls, limits).await;
    // Every call refused for its credentials: nothing was learnt about the
    // contract (a provider without the model lookup shows it only here).
    if let Some(refused) = answers.values().next().and_then(|a| a.unauthorized.clone())
        && answers.values().all(|a| a.unauthorized.is_some())
    {
        return Err(CertifyError::Unauthorized {
            provider: target.provider.clone(),
            detail: refused,
        });
    }

    let mut served_models: BTreeSet<String> = BTreeSet::new();
    for (index, input) in contract.inputs.iter().enumerate() {
        let mut results: Vec<(u32, Value)> = Vec::new();
        for sample in 1..=samples {
            let row = &mut rows[index];
            let mut failed = |row: &mut InputRow, check: Check, detail: String| {
                row.record(check, false);
                failures.push(Failure::new(check, &input.name, Some(sample), detail));
            };
            let Some(answer) = answers.get(&(index, sample)) else {
                if prompts[index].is_some() {
                    failed(row, Check::Transport, "the call did not run".to_owned());
                }
                continue;
            };
            let content = match &answer.answer {
                Ok(ChatAnswer {
                    content: Some(content),
                    model,
                }) => {
                    served_models.extend(model.iter().cloned());
                    content
                }
                Ok(ChatAnswer { content: None, .. }) => {
                    failed(
                        row,
                        Check::Transport,
                        "the answer has no content".to_owned(),
                    );
                    continue;
                }
                Err(detail) => {
                    let detail = format!("{detail} (after {} tries)", answer.tries);
                    failed(row, Check::Transport, detail);
                    continue;
                }
            };
            row.record(Check::Transport, true);
            let output: Value = match serde_json::from_str(content) {
                Ok(output @ Value::Object(_)) => output,
                Ok(_) => {
                    let detail = format!("JSON but not an object: {}", excerpt(content));
                    failed(row, Check::Parse, detail);
                    continue;
                }
                Err(e) => {
                    let detail = format!("not JSON ({e}): {}", excerpt(content));
                    failed(row, Check::Parse, detail);
                    continue;
                }
            };
            row.record(Check::Parse, true);
            let schema_errors = contract.schema_errors(&output, SCHEMA_ERRORS_MAX);
            if !schema_errors.is_empty() {
                failed(row, Check::Schema, schema_errors.join("; "));
                continue;
            }
            row.record(Check::Schema, true);
            let result = match contract.business_type.read(&output) {
                Ok(result) => result,
                Err(e) => {
                    failed(row, Check::BusinessType, e);
                    continue;
                }
            };
            row.record(Check::BusinessType, true);
            let differing: Vec<String> = input
                .expect
                .iter()
                .filter(|(field, want)| result.get(field.as_str()) != Some(want))
                .map(|(field, want)| {
                    format!(
                        "{field}: got {}, want {want}",
                        result.get(field.as_str()).unwrap_or(&Value::Null)
                    )
                })
                .collect();
            if differing.is_empty() {
                row.record(Check::RoundTrip, true);
            } else {
                failed(row, Check::RoundTrip, differing.join("; "));
            }
            results.push((sample, result));
        }
        // Consistency needs two results to compare.
        if results.len() >= 2 {
            let stable = |result: &Value| -> Value {
                let mut result = result.clone();
                if let Value::Object(fields) = &mut result {
                    fields.retain(|name, _| !contract.varying_fields.contains(name));
                }
                result
            };
            let (first_sample, first) = (results[0].0, stable(&results[0].1));
            let deviating: Vec<String> = results[1..]
                .iter()
                .filter(|(_, r)| stable(r) != first)
                .map(|(sample, r)| {
                    format!(
                        "sample {sample} gave {} where sample {first_sample} gave {first}",
                        stable(r)
                    )
                })
                .collect();
            let row = &mut rows[index];
            if deviating.is_empty() {
                row.record(Check::Consistency, true);
            } else {
                row.record(Check::Consistency, false);
                failures.push(Failure::new(
                    Check::Consistency,
                    &input.name,
                    None,
                    deviating.join("; "),
                ));
            }
        }
    }
    Ok(Certification {
        target: target.clone(),
        contract: contract.name.clone(),
        contract_source: contract.source.clone(),
        prompt_version: contract.prompt_version.clone(),
        schema_version: contract.schema_version.clone(),
        temperature: contract.temperature,
        samples_per_input: samples,
        max_output_tokens: contract.max_output_tokens,
        model_identity,
        served_models,
        rows,
        failures,
    })
}

/// Runs every call, at most `limits.concurrency` at a time.
async fn run_calls(
    endpoint: &Arc<dyn ChatEndpoint>,
    calls: Vec<(usize, u32, String, ChatRequest)>,
    limits: RunLimits,
) -> BTreeMap<(usize, u32), SampleAnswer> {
    let mut answers = BTreeMap::new();
    let mut running = JoinSet::new();
    let mut pending = calls.into_iter();
    loop {
        while running.len() < limits.concurrency {
            let Some((index, sample, key, request)) = pending.next() else {
                break;
            };
            let endpoint = Arc::clone(endpoint);
            running.spawn(async move {
                let answer = call_with_retries(endpoint.as_ref(), &request, &key, limits).await;
                ((index, sample), answer)
            });
        }
        match running.join_next().await {
            Some(Ok((at, answer))) => {
                answers.insert(at, answer);
            }
            // A call task that panicked: its sample is reported missing as
            // a transport failure below, never silently passed.
            Some(Err(e)) => tracing::error!(error = %e, "a certification call failed to run"),
            None => break,
        }
    }
    answers
}

async fn call_with_retries(
    endpoint: &dyn ChatEndpoint,
    request: &ChatRequest,
    key: &str,
    limits: RunLimits,
) -> SampleAnswer {
    let timeout = Duration::from_millis(limits.call_timeout_ms);
    let mut last = String::new();
    for tries in 1..=limits.call_tries_max {
        // The same key on every try: a provider that honours keys replays a
        // request it already executed instead of billing it again.
        match crate::timer::timeout(timeout, endpoint.chat(request, key)).await {
            Ok(Ok(answer)) => {
                return SampleAnswer {
                    answer: Ok(answer),
                    tries,
                    unauthorized: None,
                };
            }
            // The content was judged by the provider and refused: a finding,
            // not a transport hiccup. Only a refusal that may pass on a
            // second try (429, 5xx) is retried.
            Ok(Err(e @ ProviderError::Rejected { status, .. }))
                if status != 429 && status < 500 =>
            {
                return SampleAnswer {
                    answer: Err(e.to_string()),
                    tries,
                    unauthorized: is_unauthorized(&e).then(|| e.to_string()),
                };
            }
            Ok(Err(e)) => last = e.to_string(),
            Err(_) => last = format!("no answer within {} ms", limits.call_timeout_ms),
        }
    }
    SampleAnswer {
        answer: Err(last),
        tries: limits.call_tries_max,
        unauthorized: None,
    }
}

/// The start of a provider's answer, for a failure's detail.
fn excerpt(text: &str) -> String {
    const EXCERPT_CHARS_MAX: usize = 120;
    let mut out: String = text.chars().take(EXCERPT_CHARS_MAX).collect();
    if text.chars().count() > EXCERPT_CHARS_MAX {
        out.push('…');
    }
    format!("{out:?}")
}
