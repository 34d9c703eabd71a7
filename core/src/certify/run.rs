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
//!
//! The product's runs ([`certify_bounded`]) have one overall deadline and
//! stop early when the first calls all get no answer; a run that got no
//! answer to some calls and found nothing wrong with the rest is
//! [`CertifyError::Inconclusive`]: nothing was learnt, and no certificate
//! should change because of it.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::calls::{Answers, Call, Deadline, Progress, SampleAnswer, run_calls, what_came_back};
pub use super::endpoint::{ChatAnswer, ChatEndpoint, ChatRequest, RunBounds, RunLimits, describe};
use crate::clock::IdSource;
use crate::provider::ProviderError;
use idem_contract::report::{Certification, Check, CheckOutcome, Failure, InputRow, Target};
use idem_contract::spec::{Contract, CorpusInput, RenderedPrompt};
use idem_contract::tokenizer;

/// Schema errors kept per failing sample.
const SCHEMA_ERRORS_MAX: usize = 3;
/// How long a product certification may take in all, by default.
pub const CERTIFY_DEADLINE_MS_DEFAULT: u64 = 90_000;

/// The most calls in flight at once.
pub const CONCURRENCY_MAX: usize = 64;
/// The most tries of one sample.
pub const CALL_TRIES_MAX: u32 = 5;

/// A run that could not be made at all, or learnt nothing (exit code 2):
/// as opposed to a run that was made and found the provider wanting.
#[derive(Debug, thiserror::Error)]
pub enum CertifyError {
    #[error("provider {provider:?} cannot be reached: {detail}")]
    Unreachable { provider: String, detail: String },
    /// The provider refused the credentials (401 or 403): a configuration
    /// to fix, not a finding about the contract.
    #[error(
        "provider {provider:?} refused the API key ({detail}): check the variable its api_key_env names"
    )]
    Unauthorized { provider: String, detail: String },
    /// Every call was answered 404, 405 or 501: no chat completions there.
    #[error(
        "provider {provider:?} serves no chat completions at this URL (every call got status {status}): check the URL"
    )]
    NotServed { provider: String, status: u16 },
    /// Every call was refused outright (a 4xx): the provider judged every
    /// request and took none, so no answer could be checked. `answers`
    /// names the statuses and the start of what came back.
    #[error("provider {provider:?} refused every call ({answers}): no answer could be checked")]
    Refused { provider: String, answers: String },
    /// Some calls got no answer and the others showed nothing wrong.
    #[error("provider {provider:?}: inconclusive, {why}")]
    Inconclusive {
        provider: String,
        why: String,
        /// What the run found before it stopped.
        certification: Box<Certification>,
    },
    #[error("bad run limits: {0}")]
    Limits(String),
}

/// Statuses that say who or where, not what: a run all of whose calls get
/// one of these learnt nothing about the contract.
fn refuses_the_caller(status: u16) -> bool {
    matches!(status, 401 | 403)
}

fn serves_nothing_here(status: u16) -> bool {
    matches!(status, 404 | 405 | 501)
}

/// Certifies `target` against `contract` through `endpoint`, bounded per
/// call only ([`RunBounds::PER_CALL`]).
pub async fn certify(
    endpoint: Arc<dyn ChatEndpoint>,
    contract: Arc<Contract>,
    target: &Target,
    ids: &dyn IdSource,
    limits: RunLimits,
) -> Result<Certification, CertifyError> {
    certify_bounded(endpoint, contract, target, ids, limits, RunBounds::PER_CALL).await
}

/// Certifies `target` against `contract` through `endpoint` within `bounds`.
pub async fn certify_bounded(
    endpoint: Arc<dyn ChatEndpoint>,
    contract: Arc<Contract>,
    target: &Target,
    ids: &dyn IdSource,
    limits: RunLimits,
    bounds: RunBounds,
) -> Result<Certification, CertifyError> {
    let quiet = |_: Progress| {};
    certify_with_progress(endpoint, contract, target, ids, (limits, bounds), &quiet).await
}

/// [`certify_bounded`], telling `progress` how the calls go.
pub async fn certify_with_progress(
    endpoint: Arc<dyn ChatEndpoint>,
    contract: Arc<Contract>,
    target: &Target,
    ids: &dyn IdSource,
    (limits, bounds): (RunLimits, RunBounds),
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<Certification, CertifyError> {
    check_limits(limits)?;
    let mut deadline = Deadline::start(bounds.deadline_ms);
    let model_identity = probe(endpoint.as_ref(), target, limits).await?;
    let (mut rows, mut failures, prompts) = render_inputs(&contract, target);
    failures.extend(identity_failure(target, model_identity.as_deref()));
    let calls = plan_calls(&contract, target, &prompts, ids);
    let (answers, stopped) =
        run_calls(&endpoint, calls, limits, bounds, &mut deadline, progress).await;
    check_refusals(target, &answers)?;
    let mut judged = Judged {
        rows: &mut rows,
        failures: &mut failures,
        served_models: BTreeSet::new(),
        asked: &target.model,
    };
    for (index, input) in contract.inputs.iter().enumerate() {
        let sent = prompts[index].is_some();
        judged.input(&contract, index, input, sent, &answers, stopped.as_deref());
    }
    let served_models = judged.served_models;
    let certification = Certification {
        target: target.clone(),
        contract: contract.name.clone(),
        contract_source: contract.source.clone(),
        prompt_version: contract.prompt_version.clone(),
        schema_version: contract.schema_version.clone(),
        temperature: contract.temperature,
        samples_per_input: contract.samples_per_input,
        max_output_tokens: contract.max_output_tokens,
        model_identity,
        served_models,
        rows,
        failures,
    };
    if bounds.inconclusive_is_error {
        return conclusive(certification, &answers, stopped);
    }
    Ok(certification)
}

fn check_limits(limits: RunLimits) -> Result<(), CertifyError> {
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
    if limits.call_timeout_ms == 0 {
        return Err(CertifyError::Limits(
            "the call timeout must be at least 1 ms".to_owned(),
        ));
    }
    Ok(())
}

/// Can the provider be reached, and what does it say it serves?
async fn probe(
    endpoint: &dyn ChatEndpoint,
    target: &Target,
    limits: RunLimits,
) -> Result<Option<String>, CertifyError> {
    let timeout = Duration::from_millis(limits.call_timeout_ms);
    let unreachable = |detail: String| CertifyError::Unreachable {
        provider: target.provider.clone(),
        detail,
    };
    match crate::timer::timeout(timeout, endpoint.reach()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(unreachable(describe(&e))),
        Err(_) => {
            let ms = limits.call_timeout_ms;
            return Err(unreachable(format!("no connection within {ms} ms")));
        }
    }
    match crate::timer::timeout(timeout, endpoint.model_identity(&target.model)).await {
        Ok(Ok(identity)) => Ok(identity),
        Ok(Err(e @ ProviderError::Rejected { status, .. })) if refuses_the_caller(status) => {
            Err(CertifyError::Unauthorized {
                provider: target.provider.clone(),
                detail: describe(&e),
            })
        }
        // The lookup is optional: a provider that cannot answer it is
        // certified without an identity, and its certificate then follows
        // the configured model name alone.
        Ok(Err(_)) | Err(_) => Ok(None),
    }
}

/// Renders and checks every input's prompt: the tokenizer checks need no
/// provider, and an input that does not fit the window is not sent (the
/// provider would refuse or truncate it).
fn render_inputs(
    contract: &Contract,
    target: &Target,
) -> (Vec<InputRow>, Vec<Failure>, Vec<Option<RenderedPrompt>>) {
    let mut rows = Vec::with_capacity(contract.inputs.len());
    let mut failures = Vec::new();
    let mut prompts = Vec::with_capacity(contract.inputs.len());
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
                let check = Check::TokenizerLossless;
                failures.push(Failure::new(check, &input.name, None, e.to_string()));
                row.record(check, false);
                prompts.push(None);
            }
        }
        rows.push(row);
    }
    (rows, failures, prompts)
}

/// The calls, with their keys drawn in corpus order before any call.
fn plan_calls(
    contract: &Contract,
    target: &Target,
    prompts: &[Option<RenderedPrompt>],
    ids: &dyn IdSource,
) -> Vec<Call> {
    let mut calls = Vec::new();
    for (index, prompt) in prompts.iter().enumerate() {
        let Some(prompt) = prompt else { continue };
        for sample in 1..=contract.samples_per_input {
            let request = ChatRequest {
                model: target.model.clone(),
                prompt: prompt.clone(),
                temperature: contract.temperature,
                max_output_tokens: contract.max_output_tokens,
            };
            calls.push((index, sample, ids.attempt_id().to_string(), request));
        }
    }
    calls
}

/// Every call refused outright is an error: nothing was learnt about the
/// contract. A refusal of the caller (401, 403) or of the URL (404, 405,
/// 501) says what to fix; any other names what came back (a provider
/// without the model lookup shows its refusal only here).
fn check_refusals(target: &Target, answers: &Answers) -> Result<(), CertifyError> {
    let first = answers.values().next().and_then(SampleAnswer::refused);
    let Some(status) = first else {
        return Ok(());
    };
    if !answers.values().all(|a| a.refused().is_some()) {
        return Ok(());
    }
    let provider = target.provider.clone();
    let same = answers.values().all(|a| a.refused() == Some(status));
    if same && refuses_the_caller(status) {
        let detail = answers
            .values()
            .next()
            .and_then(|a| a.answer.clone().err())
            .map(|(_, detail)| detail)
            .unwrap_or_default();
        return Err(CertifyError::Unauthorized { provider, detail });
    }
    if same && serves_nothing_here(status) {
        return Err(CertifyError::NotServed { provider, status });
    }
    let answers = what_came_back(answers.values());
    Err(CertifyError::Refused { provider, answers })
}

/// The run as a verdict, or [`CertifyError::Inconclusive`] when its only
/// failures are calls that got no usable answer: a provider that answered
/// some calls and refused others was judged (not certified), one that
/// answered none was not.
fn conclusive(
    certification: Certification,
    answers: &Answers,
    stopped: Option<String>,
) -> Result<Certification, CertifyError> {
    let transport_only = certification
        .failed_checks()
        .iter()
        .all(|c| *c == Check::Transport);
    let refused_some = answers.values().any(|a| a.refused().is_some());
    if certification.passed() || !transport_only || refused_some {
        return Ok(certification);
    }
    let unusable: Vec<&SampleAnswer> = answers.values().filter(|a| a.unusable()).collect();
    let why = stopped.unwrap_or_else(|| {
        format!(
            "{} of {} calls got no usable answer ({}) and the rest showed no fault",
            unusable.len(),
            answers.len(),
            what_came_back(unusable.iter().copied())
        )
    });
    Err(CertifyError::Inconclusive {
        provider: certification.target.provider.clone(),
        why,
        certification: Box::new(certification),
    })
}

/// The failure when the provider says it serves another model under the
/// name asked (its model lookup's `root` or `id`): a certificate names the
/// model it was earned on (issue 36: such a provider certified, exit 0).
fn identity_failure(target: &Target, identity: Option<&str>) -> Option<Failure> {
    let identity = identity?;
    if names_the_model(&target.model, identity) {
        return None;
    }
    let detail = format!(
        "GET /v1/models/{} says it serves {identity:?}, not {:?}",
        target.model, target.model
    );
    Some(Failure::new(Check::Model, MODEL_LOOKUP, None, detail))
}

/// The row name of the model lookup's failure.
const MODEL_LOOKUP: &str = "model_lookup";

/// Whether a provider naming `served` serves the model asked for by name:
/// the same name, or a dated snapshot of it (`gpt-4o` answered by
/// `gpt-4o-2024-08-06`, as OpenAI names its snapshots): the name, a dash,
/// then digits and dashes only. `gpt-4o-mini` is another model.
pub fn names_the_model(asked: &str, served: &str) -> bool {
    served == asked
        || served
            .strip_prefix(asked)
            .and_then(|rest| rest.strip_prefix('-'))
            .is_some_and(|rest| {
                rest.starts_with(|c: char| c.is_ascii_digit())
                    && rest.chars().all(|c| c.is_ascii_digit() || c == '-')
            })
}

/// The rows and failures being filled in from the answers.
struct Judged<'a> {
    rows: &'a mut [InputRow],
    failures: &'a mut Vec<Failure>,
    served_models: BTreeSet<String>,
    /// The model asked for: every answer must come from it.
    asked: &'a str,
}

impl Judged<'_> {
    /// Judges every sample of the input at `index`, then their consistency.
    fn input(
        &mut self,
        contract: &Contract,
        index: usize,
        input: &CorpusInput,
        sent: bool,
        answers: &Answers,
        stopped: Option<&str>,
    ) {
        let mut results: Vec<(u32, Value)> = Vec::new();
        for sample in 1..=contract.samples_per_input {
            let judged = match answers.get(&(index, sample)) {
                Some(answer) => self.sample(contract, index, answer),
                None if sent => Err((
                    Check::Transport,
                    stopped.unwrap_or("the call did not run").to_owned(),
                )),
                None => continue,
            };
            match judged.and_then(|result| round_trip(input, result)) {
                Ok(result) => {
                    self.rows[index].record(Check::RoundTrip, true);
                    results.push((sample, result));
                }
                Err((check, detail)) => {
                    self.rows[index].record(check, false);
                    let failure = Failure::new(check, &input.name, Some(sample), detail);
                    self.failures.push(failure);
                }
            }
        }
        if let Some(deviating) = inconsistency(contract, &results) {
            self.rows[index].record(Check::Consistency, false);
            let failure = Failure::new(Check::Consistency, &input.name, None, deviating);
            self.failures.push(failure);
        } else if results.len() >= 2 {
            self.rows[index].record(Check::Consistency, true);
        }
    }

    /// One sample through transport, parse, schema and business type: its
    /// business result, or the first check it failed and why.
    fn sample(
        &mut self,
        contract: &Contract,
        index: usize,
        answer: &SampleAnswer,
    ) -> Result<Value, (Check, String)> {
        let row = &mut self.rows[index];
        let content = match &answer.answer {
            Ok(ChatAnswer { content, model }) => {
                self.served_models.extend(model.iter().cloned());
                model_check(self.asked, model.as_deref(), row)?;
                content
            }
            Err((_, detail)) => {
                let tries = answer.tries;
                let times = if tries == 1 { "try" } else { "tries" };
                return Err((
                    Check::Transport,
                    format!("{detail} (after {tries} {times})"),
                ));
            }
        };
        row.record(Check::Transport, true);
        let Some(content) = content else {
            return Err((Check::Parse, "the answer has no content".to_owned()));
        };
        let output = parse_object(content)?;
        row.record(Check::Parse, true);
        let schema_errors = contract.schema_errors(&output, SCHEMA_ERRORS_MAX);
        if !schema_errors.is_empty() {
            return Err((Check::Schema, schema_errors.join("; ")));
        }
        row.record(Check::Schema, true);
        let result = contract
            .business_type
            .read(&output)
            .map_err(|e| (Check::BusinessType, e))?;
        row.record(Check::BusinessType, true);
        Ok(result)
    }
}

/// The answer's content as a JSON object, or why it is not one.
fn parse_object(content: &str) -> Result<Value, (Check, String)> {
    match serde_json::from_str(content) {
        Ok(output @ Value::Object(_)) => Ok(output),
        Ok(_) => Err((
            Check::Parse,
            format!("JSON but not an object: {}", excerpt(content)),
        )),
        Err(e) => Err((
            Check::Parse,
            format!("not JSON ({e}): {}", excerpt(content)),
        )),
    }
}

/// The business result, if it has the fields the corpus expects.
fn round_trip(input: &CorpusInput, result: Value) -> Result<Value, (Check, String)> {
    let differing: Vec<String> = input
        .expect
        .iter()
        .filter(|(field, want)| result.get(field.as_str()) != Some(want))
        .map(|(field, want)| {
            let got = result.get(field.as_str()).unwrap_or(&Value::Null);
            format!("{field}: got {got}, want {want}")
        })
        .collect();
    if differing.is_empty() {
        Ok(result)
    } else {
        Err((Check::RoundTrip, differing.join("; ")))
    }
}

/// How the samples of one input disagree, outside the fields that may
/// vary; `None` when they agree (or fewer than two can be compared).
fn inconsistency(contract: &Contract, results: &[(u32, Value)]) -> Option<String> {
    let stable = |result: &Value| -> Value {
        let mut result = result.clone();
        if let Value::Object(fields) = &mut result {
            fields.retain(|name, _| !contract.varying_fields.contains(name));
        }
        result
    };
    let ((first_sample, first), rest) = results.split_first()?;
    let first = stable(first);
    let deviating: Vec<String> = rest
        .iter()
        .filter(|(_, r)| stable(r) != first)
        .map(|(sample, r)| {
            format!(
                "sample {sample} gave {} where sample {first_sample} gave {first}",
                stable(r)
            )
        })
        .collect();
    (!deviating.is_empty()).then(|| deviating.join("; "))
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

/// Whether an answer names the model asked for. An answer must name its
/// model: failover checks, at use, that the model that ran a job is the
/// certified one and refuses an answer that does not say (the engine's
/// `answer_refusal`), so a provider whose answers never name one could be
/// certified and never serve a failover.
fn model_check(
    asked: &str,
    model: Option<&str>,
    row: &mut InputRow,
) -> Result<(), (Check, String)> {
    let Some(served) = model else {
        row.record(Check::Transport, true);
        let detail = "the answer names no model, so which one ran it cannot be checked";
        return Err((Check::Model, detail.to_owned()));
    };
    if !names_the_model(asked, served) {
        row.record(Check::Transport, true);
        return Err((
            Check::Model,
            format!("answered by model {served:?}, not {asked:?}"),
        ));
    }
    row.record(Check::Model, true);
    Ok(())
}
