//! Certification in the simulator: the product's certification run
//! (`idem_core::certify`), through the real OpenAI-compatible client, on
//! turmoil's network, against a simulated provider with the scenario's
//! profile, before any client clicks.
//!
//! Each run happens in a small world of its own (the provider and a
//! certifier host), so that the main world's providers start with empty
//! ledgers and untouched random draws: the certification's calls are not
//! the run's executions, and adding a certified provider does not shift
//! every later draw of the run. Its seed comes from the provider's profile,
//! not from the run's seed: a certificate is a property of the provider, as
//! it would be of a real one certified before a deployment. The outcome is
//! therefore a pure function of the profile and the shipped contract, and
//! is memoized per process (a sweep certifies each distinct profile once).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, UNIX_EPOCH};

use idem_contract::report::Target;
use idem_contract::report::{Certification, Check, Failure};
use idem_contract::spec::Contract;
use idem_core::certify::{ChatEndpoint, RunLimits, certify};
use idem_core::clock::{FIXED_EPOCH_US, SeededIds};
use idem_core::provider::openai::{OpenAiClient, OpenAiConfig};
use idem_core::provider::server::ProviderServer;
use idem_core::store::{Store, StoreError};
use idem_model::contract::{Certificate, Providers};
use idem_model::model::Timestamp;

use crate::net::{SERVICE_PORT, SimConnector, SimListener, child_seed};
use crate::scenario::{ProviderProfile, Scenario, host};
use crate::trace::{Recorder, TraceBody};

/// The certifier's host, in the certification world and in the trace.
pub const CERTIFIER: &str = "certifier";

/// Bounds of a simulated certification: calls in flight, the wait for one
/// answer (simulated), and tries per sample.
pub const LIMITS: RunLimits = RunLimits {
    concurrency: 8,
    call_timeout_ms: 5_000,
    call_tries_max: 3,
};

/// The certification world's step: coarser than a scenario's, since no
/// race is being looked for here, only answers.
const TICK_MS: u64 = 5;
/// The longest a certification world may run, simulated.
const DURATION_MS_MAX: u64 = 30 * 60 * 1_000;
/// Distinct profiles remembered per process; past it the memo starts over.
const MEMO_ENTRIES_MAX: usize = 256;

static MEMO: Mutex<BTreeMap<String, Arc<Certification>>> = Mutex::new(BTreeMap::new());

/// Each provider `scenario` certifies, with its certification, in the
/// topology's order. Each one runs a small simulation of its own: call it
/// outside any runtime.
pub fn certifications(scenario: &Scenario) -> Vec<(ProviderProfile, Arc<Certification>)> {
    scenario
        .topology
        .providers
        .iter()
        .filter(|p| p.certified)
        .map(|p| (p.clone(), certify_profile(p)))
        .collect()
}

/// The providers whose certification passed, each with the model it was
/// certified as (the one it said it serves, else its profile's): the
/// oracle's facts.
pub fn certified_models(
    certifications: &[(ProviderProfile, Arc<Certification>)],
) -> BTreeMap<String, String> {
    certifications
        .iter()
        .filter(|(_, c)| c.passed())
        .map(|(profile, c)| {
            let model = c.model_identity.clone();
            (
                profile.name.clone(),
                model.unwrap_or_else(|| profile.model.clone()),
            )
        })
        .collect()
}

/// Files each certification's outcome, passed or not, as the provider's
/// certificate in `store` at `at` (its evidence naming `source`), and
/// records it as a `certification` event, before any client clicks: the
/// same in every world.
pub async fn file_certifications<S: Store + ?Sized>(
    certifications: &[(ProviderProfile, Arc<Certification>)],
    contract: &Providers,
    store: &S,
    at: Timestamp,
    source: &str,
    recorder: &impl Recorder,
) -> Result<(), StoreError> {
    for (profile, certification) in certifications {
        let key = contract
            .certificate_key(&profile.name)
            .expect("every profile is in the contract");
        store
            .put_certificate(Certificate {
                key,
                passed: certification.passed(),
                evidence: certification.evidence(source),
                at,
            })
            .await?;
        recorder.record(CERTIFIER, event(profile, certification));
    }
    Ok(())
}

/// The trace event of `profile`'s certification.
fn event(profile: &ProviderProfile, certification: &Certification) -> TraceBody {
    TraceBody::Certification {
        provider: profile.name.clone(),
        model: profile.model.clone(),
        model_identity: certification.model_identity.clone(),
        passed: certification.passed(),
        failed_checks: certification
            .failed_checks()
            .iter()
            .map(|c| c.name().to_owned())
            .collect(),
    }
}

/// The certification of `profile` against the shipped contract.
pub fn certify_profile(profile: &ProviderProfile) -> Arc<Certification> {
    let key = serde_json::to_string(profile).expect("profiles serialize");
    if let Some(found) = MEMO
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&key)
    {
        return Arc::clone(found);
    }
    let certification = Arc::new(certify_afresh(profile));
    let mut memo = MEMO.lock().unwrap_or_else(PoisonError::into_inner);
    if memo.len() >= MEMO_ENTRIES_MAX {
        memo.clear();
    }
    memo.insert(key, Arc::clone(&certification));
    certification
}

/// The certification of `profile`, run now, without the memo.
pub fn certify_afresh(profile: &ProviderProfile) -> Certification {
    let contract = Contract::shipped();
    let target = Target {
        provider: profile.name.clone(),
        model: profile.model.clone(),
        tokenizer: profile.tokenizer,
    };
    let seed = child_seed(profile.behaviour.seed, &format!("certify/{}", profile.name));
    let mut sim = turmoil::Builder::new()
        .rng_seed(child_seed(seed, "turmoil"))
        .epoch(UNIX_EPOCH + Duration::from_micros(FIXED_EPOCH_US.unsigned_abs()))
        .tick_duration(Duration::from_millis(TICK_MS))
        .simulation_duration(Duration::from_millis(DURATION_MS_MAX))
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(5))
        .build();
    let mut behaviour = profile.behaviour.clone();
    behaviour.seed = child_seed(seed, "provider");
    let server = ProviderServer::named(&profile.name, behaviour);
    let provider_host = host::provider(&profile.name);
    sim.host(provider_host.as_str(), move || {
        let server = server.clone();
        async move {
            let listener = SimListener::bind(SERVICE_PORT).await?;
            idem_core::provider::server::serve(listener, server).await?;
            Ok(())
        }
    });
    let outcome: Arc<Mutex<Option<Certification>>> = Arc::default();
    let (slot, run_target) = (Arc::clone(&outcome), target.clone());
    let config = OpenAiConfig::new(format!("{provider_host}:{SERVICE_PORT}"), &profile.model);
    sim.client(CERTIFIER, async move {
        let client = OpenAiClient::with_contract(SimConnector, config, Arc::clone(&contract))?;
        let endpoint: Arc<dyn ChatEndpoint> = Arc::new(client);
        let ids = SeededIds::new(child_seed(seed, "ids"));
        let certification = match certify(endpoint, contract, &run_target, &ids, LIMITS).await {
            Ok(certification) => certification,
            Err(e) => not_run(&run_target, &e.to_string()),
        };
        *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(certification);
        Ok(())
    });
    let finished = sim.run();
    let certification = outcome
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    match (finished, certification) {
        (Ok(()), Some(certification)) => certification,
        (Err(e), _) => not_run(&target, &format!("the certification world failed: {e}")),
        (Ok(()), None) => not_run(&target, "the certifier finished without an outcome"),
    }
}

/// A certification that could not be made: not passed, saying why.
fn not_run(target: &Target, why: &str) -> Certification {
    let contract = Contract::shipped();
    Certification {
        target: target.clone(),
        contract: contract.name.clone(),
        contract_source: contract.source.clone(),
        prompt_version: contract.prompt_version.clone(),
        schema_version: contract.schema_version.clone(),
        temperature: contract.temperature,
        samples_per_input: contract.samples_per_input,
        max_output_tokens: contract.max_output_tokens,
        model_identity: None,
        served_models: Default::default(),
        rows: Vec::new(),
        failures: vec![Failure {
            check: Check::Transport,
            input: String::new(),
            sample: None,
            detail: why.to_owned(),
        }],
    }
}
