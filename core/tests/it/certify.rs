//! Contract certification over real loopback HTTP, and over TLS: the
//! shipped contract against the provider server in each of its behaviours,
//! each defect failing the check that exists for it; a stale certificate
//! refused on real PostgreSQL; and one whole job run over HTTPS with a
//! certificate generated here.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use idem_contract::report::{Certification, Check, Target};
use idem_contract::spec::Contract;
use idem_contract::tokenizer::{Encoding, SpecialTokens, TokenizerProfile};
use idem_core::certify::{
    CertifyError, ChatEndpoint, RunBounds, RunLimits, certify, certify_bounded,
};
use idem_core::clock::{Clock, ManualClock, SeededIds, SystemClock, UuidV7Ids};
use idem_core::engine::{Engine, EngineError, ModelProbes, Policy, Trigger};
use idem_core::provider::connect::TcpConnector;
use idem_core::provider::openai::{ApiKey, OpenAiClient, OpenAiConfig};
use idem_core::provider::server::{Behaviour, ContractMode, ProviderServer, TlsListener};
use idem_core::provider::tls::{TlsConnector, TlsSettings, client_config};
use idem_core::provider::{Provider, ProviderSet};
use idem_core::service::{Service, ServiceConfig, shutdown_pair};
use idem_core::store::Store;
use idem_core::store::mem::MemStore;
use idem_core::testing::pg::fresh_store;
use idem_model::contract::{Certificate, ProviderSpec, Providers};
use idem_model::model::{EventKind, JobRequest, JobState, OwnerId};
use serde_json::{Value, json};

use crate::support::{FALLBACK, PRIMARY, send};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Calls at once: the loopback provider answers at once, so this bounds
/// the test's time, not the provider's.
const LIMITS: RunLimits = RunLimits {
    concurrency: 16,
    call_timeout_ms: 10_000,
    call_tries_max: 2,
};

async fn start_provider(
    behaviour: Behaviour,
) -> Result<(SocketAddr, ProviderServer), Box<dyn std::error::Error>> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = ProviderServer::new(behaviour);
    tokio::spawn(idem_core::provider::server::serve(listener, server.clone()));
    Ok((addr, server))
}

fn target(tokenizer: TokenizerProfile) -> Target {
    Target {
        provider: "candidate".to_owned(),
        model: "candidate-model".to_owned(),
        tokenizer,
    }
}

/// One behaviour and profile, and the checks it must fail: `must` all fail,
/// nothing outside `must` and `may` fails, and the verdict follows.
struct Case {
    name: &'static str,
    behaviour: Behaviour,
    tokenizer: TokenizerProfile,
    must: &'static [Check],
    may: &'static [Check],
}

async fn check(case: Case) -> TestResult {
    let deviates = case.behaviour.deviate_one_in > 0;
    let (addr, server) = start_provider(case.behaviour).await?;
    let client = OpenAiClient::new(
        TcpConnector,
        OpenAiConfig::new(addr.to_string(), "candidate-model"),
    )?;
    let endpoint: Arc<dyn ChatEndpoint> = Arc::new(client);
    let contract = Contract::shipped();
    // A deviating provider deviates on every n-th call to arrive: calls made
    // one at a time arrive in the order they are made, so which sample
    // deviates, and so which check catches it, is the same on every run
    // (16 at once, a run now and then caught it by round trip alone).
    let limits = if deviates {
        RunLimits {
            concurrency: 1,
            ..LIMITS
        }
    } else {
        LIMITS
    };
    let certification = certify(
        endpoint,
        Arc::clone(&contract),
        &target(case.tokenizer),
        &SeededIds::new(7),
        limits,
    )
    .await?;
    let failed = certification.failed_checks();
    let must: BTreeSet<Check> = case.must.iter().copied().collect();
    let allowed: BTreeSet<Check> = must.iter().chain(case.may).copied().collect();
    assert!(
        must.is_subset(&failed) && failed.is_subset(&allowed),
        "{}: failed {failed:?}, must {must:?}, may {:?}\n{}",
        case.name,
        case.may,
        certification.to_text()
    );
    assert_eq!(certification.passed(), must.is_empty(), "{}", case.name);
    let text = certification.to_text();
    for check in &must {
        assert!(
            text.contains(&format!("  {check} ")),
            "{}: the failures list does not name {check}:\n{text}",
            case.name
        );
    }
    // Every input was tried, and (unless the window refused it) sent
    // samples_per_input times.
    assert_eq!(
        certification.rows.len(),
        contract.inputs.len(),
        "{}",
        case.name
    );
    if !must.contains(&Check::ContextWindow) {
        let calls = contract.inputs.len() * contract.samples_per_input as usize;
        assert_eq!(server.executions().len(), calls, "{}", case.name);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_defect_fails_its_own_check_and_a_compliant_provider_certifies() -> TestResult {
    let tokenizer = TokenizerProfile::default();
    let contract = |contract| Behaviour {
        contract,
        ..Behaviour::default()
    };
    let cases = vec![
        Case {
            name: "compliant",
            behaviour: Behaviour::default(),
            tokenizer,
            must: &[],
            may: &[],
        },
        Case {
            name: "compliant, o200k_base",
            behaviour: Behaviour::default(),
            tokenizer: TokenizerProfile {
                encoding: Encoding::O200kBase,
                context_window_tokens: 128_000,
                ..tokenizer
            },
            must: &[],
            may: &[],
        },
        Case {
            name: "an invented top-level key",
            behaviour: contract(ContractMode::InventedKey),
            tokenizer,
            must: &[Check::Schema],
            may: &[],
        },
        Case {
            name: "prose instead of JSON",
            behaviour: contract(ContractMode::Prose),
            tokenizer,
            must: &[Check::Parse],
            may: &[],
        },
        Case {
            name: "the system prompt's formats ignored",
            behaviour: contract(ContractMode::IgnoredFormat),
            tokenizer,
            must: &[Check::BusinessType],
            may: &[],
        },
        Case {
            name: "a tokenizer that parses special tokens in user text",
            behaviour: Behaviour::default(),
            tokenizer: TokenizerProfile {
                special_tokens: SpecialTokens::Parsed,
                ..tokenizer
            },
            must: &[Check::SpecialTokens],
            may: &[],
        },
        Case {
            name: "a context window too small for the long input",
            behaviour: Behaviour::default(),
            tokenizer: TokenizerProfile {
                context_window_tokens: 1_024,
                ..tokenizer
            },
            must: &[Check::ContextWindow],
            may: &[],
        },
        Case {
            // Which input a deviating sample lands on is the order of the
            // calls (made one at a time here); the answer differs from its
            // siblings in any case, and from the corpus wherever the
            // corpus pins the language.
            name: "one sample in 7 deviates at temperature 0",
            behaviour: Behaviour {
                deviate_one_in: 7,
                ..Behaviour::default()
            },
            tokenizer,
            must: &[Check::Consistency],
            may: &[Check::RoundTrip],
        },
        // Issue 36: a provider serving another model than the one asked
        // for certified, exit 0. A dated snapshot of the model asked for
        // is that model, as OpenAI names its snapshots.
        Case {
            name: "another model served under the name asked",
            behaviour: served("other-model"),
            tokenizer,
            must: &[Check::Model],
            may: &[],
        },
        Case {
            name: "a bigger sibling's name is another model",
            behaviour: served("candidate-model-mini"),
            tokenizer,
            must: &[Check::Model],
            may: &[],
        },
        Case {
            name: "a dated snapshot of the model asked for",
            behaviour: served("candidate-model-2024-08-06"),
            tokenizer,
            must: &[],
            may: &[],
        },
    ];
    for case in cases {
        check(case).await?;
    }
    Ok(())
}

/// A compliant provider that serves `model` whatever is asked for.
fn served(model: &str) -> Behaviour {
    Behaviour {
        served_model: Some(model.to_owned()),
        ..Behaviour::default()
    }
}

#[tokio::test]
async fn an_unreachable_provider_is_an_error_not_a_verdict() -> TestResult {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    drop(listener);
    let client = OpenAiClient::new(TcpConnector, OpenAiConfig::new(addr.to_string(), "m"))?;
    let outcome = certify(
        Arc::new(client),
        Contract::shipped(),
        &target(TokenizerProfile::default()),
        &SeededIds::new(1),
        LIMITS,
    )
    .await;
    assert!(
        matches!(outcome, Err(CertifyError::Unreachable { .. })),
        "{outcome:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_refused_api_key_is_an_error_not_a_verdict() -> TestResult {
    let (addr, server) = start_provider(Behaviour::default()).await?;
    server.require_api_key("sk-right");
    for key in [None, Some("sk-wrong")] {
        let mut config = OpenAiConfig::new(addr.to_string(), "candidate-model");
        config.api_key = key.map(ApiKey::new);
        let outcome = certify(
            Arc::new(OpenAiClient::new(TcpConnector, config)?),
            Contract::shipped(),
            &target(TokenizerProfile::default()),
            &SeededIds::new(1),
            LIMITS,
        )
        .await;
        assert!(
            matches!(&outcome, Err(CertifyError::Unauthorized { detail, .. }) if detail.contains("401")),
            "{key:?}: {outcome:?}"
        );
    }
    assert!(server.executions().is_empty());
    let mut config = OpenAiConfig::new(addr.to_string(), "candidate-model");
    config.api_key = Some(ApiKey::new("sk-right"));
    let certification = certify(
        Arc::new(OpenAiClient::new(TcpConnector, config)?),
        Contract::shipped(),
        &target(TokenizerProfile::default()),
        &SeededIds::new(1),
        LIMITS,
    )
    .await?;
    assert!(certification.passed(), "{}", certification.to_text());
    Ok(())
}

#[tokio::test]
async fn the_evidence_names_what_was_certified() -> TestResult {
    let (addr, _) = start_provider(Behaviour {
        served_model: Some("candidate-model-2026-01".to_owned()),
        ..Behaviour::default()
    })
    .await?;
    let client = OpenAiClient::new(
        TcpConnector,
        OpenAiConfig::new(addr.to_string(), "candidate-model"),
    )?;
    let contract = Contract::shipped();
    let certification = certify(
        Arc::new(client),
        Arc::clone(&contract),
        &target(TokenizerProfile::default()),
        &SeededIds::new(2),
        LIMITS,
    )
    .await?;
    let evidence = certification.evidence("test build");
    assert_eq!(evidence["source"], "certification");
    assert_eq!(evidence["passed"], true);
    assert_eq!(evidence["provider"], "candidate");
    assert_eq!(evidence["model"], "candidate-model");
    assert_eq!(evidence["model_identity"], "candidate-model-2026-01");
    assert_eq!(
        evidence["served_models"],
        json!(["candidate-model-2026-01"])
    );
    assert_eq!(evidence["prompt_version"], json!(contract.prompt_version));
    assert_eq!(evidence["schema_version"], json!(contract.schema_version));
    assert_eq!(
        evidence["inputs"].as_array().map(Vec::len),
        Some(contract.inputs.len())
    );
    assert_eq!(evidence["checks"]["schema"]["inputs_failed"], 0);
    assert_eq!(evidence["failures"], json!([]));
    Ok(())
}

fn request() -> JobRequest {
    JobRequest {
        provider: PRIMARY.to_owned(),
        fallbacks: vec![FALLBACK.to_owned()],
        params: json!({"text": "Where is ORD-77?"}),
    }
}

/// What the code under test logs on this thread, as plain text.
#[derive(Clone, Default)]
struct CapturedLogs(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for CapturedLogs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .map_err(|_| std::io::ErrorKind::Other)?
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl CapturedLogs {
    /// Captures until the guard drops (the test's runtime is one thread).
    fn start(&self) -> tracing::subscriber::DefaultGuard {
        let writer = self.clone();
        tracing::subscriber::set_default(
            tracing_subscriber::fmt()
                .with_ansi(false)
                .with_writer(move || writer.clone())
                .finish(),
        )
    }

    fn text(&self) -> String {
        self.0
            .lock()
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }
}

/// Also issue 22, item 5: the revocation and each refused failover are
/// logged, naming what was certified and what is served.
#[tokio::test]
async fn pg_a_model_switch_makes_the_certificate_stale_and_failover_is_refused() -> TestResult {
    let logs = CapturedLogs::default();
    let _capturing = logs.start();
    let store = fresh_store().await;
    let contract = Contract::shipped();
    let (addr, fallback) = start_provider(Behaviour::default()).await?;
    let client = Arc::new(OpenAiClient::new(
        TcpConnector,
        OpenAiConfig::new(addr.to_string(), "fallback-model"),
    )?);
    // A real certification of the fallback, recorded as `idem certify` does.
    let certification = certify(
        client.clone(),
        Arc::clone(&contract),
        &Target {
            provider: FALLBACK.to_owned(),
            model: "fallback-model".to_owned(),
            tokenizer: TokenizerProfile::default(),
        },
        &SeededIds::new(3),
        LIMITS,
    )
    .await?;
    assert!(certification.passed(), "{}", certification.to_text());
    let mut providers = Providers::for_versions(&contract.prompt_version, &contract.schema_version);
    for (name, model) in [(PRIMARY, "primary-model"), (FALLBACK, "fallback-model")] {
        providers.specs.insert(
            name.to_owned(),
            ProviderSpec {
                model: model.to_owned(),
                endpoint: None,
            },
        );
    }
    let key = providers
        .certificate_key(FALLBACK)
        .ok_or("the fallback is configured")?;
    let clock = Arc::new(ManualClock::default());
    store
        .put_certificate(Certificate {
            key: key.clone(),
            passed: certification.passed(),
            evidence: certification.evidence("test build"),
            at: idem_core::clock::Clock::now(clock.as_ref()),
        })
        .await?;
    let mut clients = ProviderSet::new();
    clients.insert(FALLBACK.to_owned(), client as Arc<dyn Provider>);
    let engine = Engine::new(
        Arc::new(store.clone()),
        clock,
        Arc::new(SeededIds::new(4)),
        providers,
        Policy::Strict,
    )
    .with_model_probes(ModelProbes::new(clients, 2_000));
    let alice = OwnerId("alice".to_owned());

    // Before the switch: the backup button may use the fallback.
    let first = engine.create_job(&alice, "k-1", request()).await?;
    let attempt = engine
        .start_attempt(first.job(), Some(FALLBACK), Trigger::Manual)
        .await?;
    assert_eq!(attempt.provider, FALLBACK);

    // The provider silently serves another model under the same name.
    fallback.set_behaviour(Behaviour {
        served_model: Some("fallback-model-2026-06".to_owned()),
        ..Behaviour::default()
    });
    let second = engine.create_job(&alice, "k-2", request()).await?;
    let refused = engine
        .start_attempt(second.job(), Some(FALLBACK), Trigger::Manual)
        .await;
    assert!(
        matches!(refused, Err(EngineError::ProviderNotCertified { .. })),
        "{refused:?}"
    );
    // Revoked in the database, for every replica, with the reason.
    let stored = store
        .certificate(&key)
        .await?
        .ok_or("the certificate row")?;
    assert!(!stored.passed);
    assert_eq!(stored.evidence["source"], "revoked");
    assert_eq!(
        stored.evidence["certified_model_identity"],
        "fallback-model"
    );
    assert_eq!(
        stored.evidence["serving_model_identity"],
        "fallback-model-2026-06"
    );
    let events = store.events(second.job().id).await?;
    let refusal = events
        .iter()
        .find(|e| e.kind == EventKind::FailoverRefused)
        .ok_or("a failover_refused event")?;
    assert_eq!(refusal.detail["reason"], "certificate_stale");
    // The event names what was certified and what is served now.
    assert_eq!(refusal.detail["certified_model"], "fallback-model");
    assert_eq!(refusal.detail["serving_model"], "fallback-model-2026-06");
    // Switching back does not restore it: a revoked certificate needs a new
    // certification, and a later refusal says it was revoked, not failed.
    fallback.set_behaviour(Behaviour::default());
    assert!(!engine.is_certified(FALLBACK).await?);
    let third = engine.create_job(&alice, "k-3", request()).await?;
    let refused = engine
        .start_attempt(third.job(), Some(FALLBACK), Trigger::Manual)
        .await;
    assert!(refused.is_err(), "{refused:?}");
    let events = store.events(third.job().id).await?;
    let refusal = events
        .iter()
        .find(|e| e.kind == EventKind::FailoverRefused)
        .ok_or("a failover_refused event")?;
    assert_eq!(refusal.detail["reason"], "certificate_revoked");
    let logged = logs.text();
    let revoked = logged
        .lines()
        .find(|l| l.contains("certificate revoked"))
        .ok_or_else(|| format!("no revocation logged: {logged}"))?;
    assert!(revoked.contains("certified=fallback-model"), "{revoked}");
    assert!(
        revoked.contains("serving=fallback-model-2026-06"),
        "{revoked}"
    );
    let refusals: Vec<&str> = logged
        .lines()
        .filter(|l| l.contains("failover refused"))
        .collect();
    assert_eq!(refusals.len(), 2, "{logged}");
    assert!(refusals[0].contains("certificate_stale"), "{logged}");
    assert!(refusals[1].contains("certificate_revoked"), "{logged}");
    Ok(())
}

/// A self-signed certificate for `localhost`, as PEM (certificate, key).
fn localhost_certificate() -> Result<(String, String), rcgen::Error> {
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()])?;
    Ok((certified.cert.pem(), certified.signing_key.serialize_pem()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_job_runs_over_tls_on_loopback() -> TestResult {
    let (cert_pem, key_pem) = localhost_certificate()?;
    let dir = tempfile::tempdir()?;
    let (cert_path, key_path) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert_path, &cert_pem)?;
    std::fs::write(&key_path, &key_pem)?;

    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = tcp.local_addr()?.port();
    let listener = TlsListener::from_pem_files(tcp, &cert_path, &key_path)?;
    let server = ProviderServer::new(Behaviour::default());
    server.require_api_key("sk-test-not-a-secret");
    tokio::spawn(idem_core::provider::server::serve(listener, server.clone()));

    // Trusting only the compiled-in roots, the handshake fails before
    // anything is sent: unreachable, never dispatched.
    let untrusting = OpenAiClient::new(
        TlsConnector::new(TcpConnector, client_config(&TlsSettings::default())?),
        OpenAiConfig::new(format!("localhost:{port}"), PRIMARY),
    )?;
    let refused = untrusting.connect().await.map(drop);
    assert!(
        matches!(
            refused,
            Err(idem_core::provider::ProviderError::Unreachable(_))
        ),
        "{refused:?}"
    );
    assert!(server.executions().is_empty());

    let tls = client_config(&TlsSettings {
        ca_file: Some(cert_path.clone()),
        ..TlsSettings::default()
    })?;
    // Trusted, but without the key: the provider refuses before executing.
    let keyless = OpenAiClient::new(
        TlsConnector::new(TcpConnector, tls.clone()),
        OpenAiConfig::new(format!("localhost:{port}"), PRIMARY),
    )?;
    let refused = Provider::model_identity(&keyless).await;
    assert!(
        matches!(
            refused,
            Err(idem_core::provider::ProviderError::Rejected { status: 401, .. })
        ),
        "{refused:?}"
    );
    assert!(server.executions().is_empty());

    let mut config = OpenAiConfig::new(format!("localhost:{port}"), PRIMARY);
    config.api_key = Some(ApiKey::new("sk-test-not-a-secret"));
    let client = OpenAiClient::new(TlsConnector::new(TcpConnector, tls), config)?;
    assert!(!format!("{client:?}").contains("sk-test"));
    let mut clients = ProviderSet::new();
    clients.insert(PRIMARY.to_owned(), Arc::new(client) as Arc<dyn Provider>);
    let engine = Engine::new(
        Arc::new(MemStore::new()),
        Arc::new(SystemClock),
        Arc::new(UuidV7Ids),
        Providers::named([PRIMARY]),
        Policy::Strict,
    );
    let auth = idem_core::api::Auth::new().with_owner("token-alice", OwnerId("alice".into()));
    let mut service_config = ServiceConfig::default();
    service_config.worker.poll_interval_ms = 20;
    let service = Service::new(engine.clone(), auth, clients, service_config);
    let api = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = api.local_addr()?;
    let (_stop, shutdown) = shutdown_pair();
    tokio::spawn(service.run(api, shutdown));

    let created = send(
        addr,
        "POST",
        "/v1/jobs",
        &[
            ("authorization", "Bearer token-alice"),
            ("content-type", "application/json"),
            ("idempotency-key", "tls-1"),
        ],
        Some(serde_json::to_vec(&json!({
            "provider": PRIMARY,
            "params": {"text": "Bonjour, ma commande ORD-20931 est arrivée abîmée."}
        }))?),
    )
    .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    let id = created.body["id"].as_str().ok_or("a job id")?.to_owned();
    let mut job = Value::Null;
    for _ in 0..200 {
        job = send(
            addr,
            "GET",
            &format!("/v1/jobs/{id}"),
            &[("authorization", "Bearer token-alice")],
            None,
        )
        .await
        .body;
        if job["state"] == json!(JobState::Succeeded) {
            break;
        }
        idem_core::timer::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(job["state"], json!(JobState::Succeeded), "{job}");
    assert_eq!(job["result"]["orders"], json!(["ORD-20931"]), "{job}");
    assert_eq!(job["result"]["language"], "fr", "{job}");
    let executions = server.executions();
    assert_eq!(executions.len(), 1);
    assert!(executions[0].billed);
    Ok(())
}

/// A certificate on file and the configuration the service runs with now:
/// the certificate holds only while its whole key and its endpoint are
/// what the configuration says.
struct KeyCase {
    name: &'static str,
    change: fn(&mut Providers),
    valid: bool,
    reason: &'static str,
}

async fn check_key(case: KeyCase) -> TestResult {
    let certified = |providers: &mut Providers| {
        providers.prompt_version = "prompt-1".to_owned();
        providers.schema_version = "schema-1".to_owned();
        for (name, model, endpoint) in [
            (PRIMARY, "primary-model", "https://primary.example:443"),
            (FALLBACK, "fallback-model", "https://fallback.example:443"),
        ] {
            providers.specs.insert(
                name.to_owned(),
                ProviderSpec {
                    model: model.to_owned(),
                    endpoint: Some(endpoint.to_owned()),
                },
            );
        }
    };
    let mut then = Providers::default();
    certified(&mut then);
    let store = Arc::new(MemStore::new());
    store
        .put_certificate(Certificate {
            key: then.certificate_key(FALLBACK).ok_or("configured")?,
            passed: true,
            evidence: json!({"source": "certification", "endpoint": "https://fallback.example:443"}),
            at: idem_core::clock::Clock::now(&ManualClock::default()),
        })
        .await?;
    let mut now = then.clone();
    (case.change)(&mut now);
    let engine = Engine::new(
        store,
        Arc::new(ManualClock::default()),
        Arc::new(SeededIds::new(9)),
        now,
        Policy::Strict,
    );
    let status = engine.certificate_status(FALLBACK).await?;
    assert_eq!(status.is_valid(), case.valid, "{}: {status:?}", case.name);
    assert_eq!(status.reason(), case.reason, "{}", case.name);
    // The backup button follows the same answer: 422 when not valid.
    let job = engine
        .create_job(&OwnerId("alice".to_owned()), case.name, request())
        .await?;
    let manual = engine
        .start_attempt(job.job(), Some(FALLBACK), Trigger::Manual)
        .await;
    if case.valid {
        assert!(manual.is_ok(), "{}: {manual:?}", case.name);
    } else {
        assert!(
            matches!(manual, Err(EngineError::ProviderNotCertified { .. })),
            "{}: {manual:?}",
            case.name
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_certificate_stops_being_valid_when_its_key_or_endpoint_changes() -> TestResult {
    let cases = vec![
        KeyCase {
            name: "unchanged",
            change: |_| {},
            valid: true,
            reason: "valid",
        },
        KeyCase {
            name: "model",
            change: |p| {
                if let Some(spec) = p.specs.get_mut(FALLBACK) {
                    spec.model = "fallback-model-2".to_owned();
                }
            },
            valid: false,
            reason: "no_certificate",
        },
        KeyCase {
            name: "prompt_version",
            change: |p| p.prompt_version = "prompt-2".to_owned(),
            valid: false,
            reason: "no_certificate",
        },
        KeyCase {
            name: "schema_version",
            change: |p| p.schema_version = "schema-2".to_owned(),
            valid: false,
            reason: "no_certificate",
        },
        KeyCase {
            name: "endpoint",
            change: |p| {
                if let Some(spec) = p.specs.get_mut(FALLBACK) {
                    spec.endpoint = Some("https://elsewhere.example:443".to_owned());
                }
            },
            valid: false,
            reason: "certificate_other_endpoint",
        },
        KeyCase {
            name: "provider",
            // The certified provider's name now stands for another one
            // (its old entry gone, a new name given its settings).
            change: |p| {
                if let Some(spec) = p.specs.remove(FALLBACK) {
                    p.specs.insert("fallback-2".to_owned(), spec);
                }
                p.specs.insert(
                    FALLBACK.to_owned(),
                    ProviderSpec {
                        model: "other-model".to_owned(),
                        endpoint: Some("https://other.example:443".to_owned()),
                    },
                );
            },
            valid: false,
            reason: "no_certificate",
        },
    ];
    for case in cases {
        check_key(case).await?;
    }
    Ok(())
}

/// The shipped contract against `behaviour` within the product's bounds:
/// each call `call_timeout_ms`, the whole run `deadline_ms`.
async fn certify_within(
    behaviour: Behaviour,
    model: &str,
    call_timeout_ms: u64,
    deadline_ms: u64,
) -> Result<Certification, CertifyError> {
    let (addr, _server) = start_provider(behaviour)
        .await
        .map_err(|e| CertifyError::Limits(e.to_string()))?;
    let client = OpenAiClient::new(TcpConnector, OpenAiConfig::new(addr.to_string(), model))
        .map_err(|e| CertifyError::Limits(e.to_string()))?;
    let limits = RunLimits {
        concurrency: 4,
        call_timeout_ms,
        call_tries_max: 3,
    };
    let target = Target {
        provider: "candidate".to_owned(),
        model: model.to_owned(),
        tokenizer: TokenizerProfile::default(),
    };
    certify_bounded(
        Arc::new(client),
        Contract::shipped(),
        &target,
        &SeededIds::new(5),
        limits,
        RunBounds::product(deadline_ms),
    )
    .await
}

/// Issue 22, item 2: a provider that never answers (`--hang`: the work is
/// done, the answer never sent; `--stall`: the work never ends) ends the
/// certification within its deadline, inconclusive: once the first calls
/// all time out (here 3 tries of 0.3 s each, where waiting for every call
/// would take 69 x 3 x 0.3 s / 4 = 15.5 s), and by the deadline when each
/// call may take longer than the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_that_never_answers_is_inconclusive_within_the_deadline() -> TestResult {
    let hang = Behaviour {
        hang: true,
        ..Behaviour::default()
    };
    let stall = Behaviour {
        stall: true,
        ..Behaviour::default()
    };
    for (what, behaviour, call_timeout_ms, deadline_ms, within_ms) in [
        ("hang, calls time out", hang.clone(), 300, 60_000, 8_000),
        ("stall, calls time out", stall, 300, 60_000, 8_000),
        ("hang, the deadline first", hang, 60_000, 1_500, 5_000),
    ] {
        let started = SystemClock.monotonic();
        let outcome =
            certify_within(behaviour, "candidate-model", call_timeout_ms, deadline_ms).await;
        let took = SystemClock.monotonic().saturating_sub(started);
        assert!(
            took < Duration::from_millis(within_ms),
            "{what}: took {took:?}"
        );
        let Err(CertifyError::Inconclusive {
            why, certification, ..
        }) = outcome
        else {
            panic!("{what}: not inconclusive: {outcome:?}");
        };
        assert!(!certification.passed(), "{what}");
        assert!(
            why.contains("no answer") || why.contains("deadline"),
            "{what}: {why}"
        );
    }
    Ok(())
}

/// Issue 22, item 1: a model name is one escaped path segment: a space
/// does not panic, `?` does not cut the name short, and an empty name is
/// refused when the client is built.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_names_are_escaped_not_trusted() -> TestResult {
    for model in ["my model", "a?b", "../x", "%2e"] {
        let certification = certify_within(Behaviour::default(), model, 10_000, 60_000).await?;
        assert_eq!(certification.model_identity.as_deref(), Some(model));
        assert!(
            certification.passed(),
            "{model}: {}",
            certification.to_text()
        );
    }
    for bad in ["", "a\nb"] {
        let built = OpenAiClient::new(TcpConnector, OpenAiConfig::new("127.0.0.1:1", bad));
        assert!(built.is_err(), "{bad:?} built a client");
    }
    Ok(())
}

/// A server that answers every request 401, echoing the credentials it
/// was sent, as some gateways do.
async fn echoing_gateway() -> Result<SocketAddr, Box<dyn std::error::Error>> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let app = axum::Router::new().fallback(|headers: http::HeaderMap| async move {
        let sent = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        (
            http::StatusCode::UNAUTHORIZED,
            format!(r#"{{"error": "invalid credentials: {sent}"}}"#),
        )
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(addr)
}

/// Issue 22, item 4: a 401 that echoes the key prints no key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_a_provider_echoes_is_never_shown() -> TestResult {
    const KEY: &str = "sk-test-0123456789abcdefSECRET";
    let addr = echoing_gateway().await?;
    let mut config = OpenAiConfig::new(addr.to_string(), "m");
    config.api_key = Some(ApiKey::new(KEY));
    let client = OpenAiClient::new(TcpConnector, config)?;
    let outcome = certify_bounded(
        Arc::new(client),
        Contract::shipped(),
        &target(TokenizerProfile::default()),
        &SeededIds::new(5),
        LIMITS,
        RunBounds::product(30_000),
    )
    .await;
    let Err(error @ CertifyError::Unauthorized { .. }) = outcome else {
        panic!("not refused for its credentials: {outcome:?}");
    };
    let shown = format!("{error} {error:?}");
    assert!(!shown.contains("SECRET"), "{shown}");
    assert!(shown.contains("<redacted>"), "{shown}");
    Ok(())
}

/// Issue 22, item 10: the messages say what happened once, in words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_and_broken_providers_are_reported_plainly() -> TestResult {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let closed = listener.local_addr()?;
    drop(listener);
    let client = OpenAiClient::new(TcpConnector, OpenAiConfig::new(closed.to_string(), "m"))?;
    let outcome = certify_bounded(
        Arc::new(client),
        Contract::shipped(),
        &target(TokenizerProfile::default()),
        &SeededIds::new(5),
        LIMITS,
        RunBounds::product(30_000),
    )
    .await;
    let text = outcome.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(text.contains("cannot be reached: cannot connect"), "{text}");
    assert!(!text.contains("unreachable"), "{text}");
    // A definitive 5xx is described as a refusal, and one try is one try.
    let (addr, _server) = start_provider(Behaviour {
        error_per_mille: 1000,
        ..Behaviour::default()
    })
    .await?;
    let client = OpenAiClient::new(TcpConnector, OpenAiConfig::new(addr.to_string(), "m"))?;
    let limits = RunLimits {
        call_tries_max: 1,
        ..LIMITS
    };
    let certification = certify_bounded(
        Arc::new(client),
        Contract::shipped(),
        &target(TokenizerProfile::default()),
        &SeededIds::new(5),
        limits,
        RunBounds::PER_CALL,
    )
    .await?;
    let detail = &certification.failures[0].detail;
    assert!(detail.contains("(after 1 try)"), "{detail}");
    assert!(!detail.contains("broke after dispatch"), "{detail}");
    Ok(())
}

/// A server answering every request with `status`, `content_type` and
/// `body`, whatever was asked.
async fn answering(
    status: u16,
    content_type: &'static str,
    body: &'static str,
) -> Result<SocketAddr, Box<dyn std::error::Error>> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let status = http::StatusCode::from_u16(status)?;
    let app = axum::Router::new()
        .fallback(move || async move { (status, [("content-type", content_type)], body) });
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(addr)
}

/// Issue 36, item 3: a run that could not judge the provider's answers
/// names what the provider answered, its status and the start of its body.
/// (A provider answering 400 to every call was "inconclusive: 0 of 69
/// calls got no answer"; 500s, HTML and definitive errors were "the first
/// 4 calls got no answer".)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certification_names_what_the_provider_answered() -> TestResult {
    let json = "application/json";
    let cases = [
        (
            400,
            json,
            r#"{"error":{"message":"response_format json_object is not supported"}}"#,
            &[
                "refused every call",
                "status 400",
                "json_object is not supported",
            ][..],
        ),
        (
            500,
            "text/html",
            "<html><body>upstream exploded</body></html>",
            &["no usable answer", "status 500", "upstream exploded"],
        ),
        (
            200,
            "text/html",
            "<html><body>welcome to nginx</body></html>",
            &["not a chat completion", "welcome to nginx"],
        ),
        (
            503,
            json,
            r#"{"error":{"definitive":true,"message":"overloaded"}}"#,
            &["status 503", "overloaded"],
        ),
    ];
    let limits = RunLimits {
        concurrency: 4,
        call_timeout_ms: 2_000,
        call_tries_max: 2,
    };
    for (status, content_type, body, says) in cases {
        let addr = answering(status, content_type, body).await?;
        let config = OpenAiConfig::new(addr.to_string(), "candidate-model");
        let outcome = certify_bounded(
            Arc::new(OpenAiClient::new(TcpConnector, config)?),
            Contract::shipped(),
            &target(TokenizerProfile::default()),
            &SeededIds::new(5),
            limits,
            RunBounds::product(30_000),
        )
        .await;
        let said = outcome.err().map(|e| e.to_string()).unwrap_or_default();
        for words in says {
            assert!(said.contains(words), "{status}: {words:?} not in {said}");
        }
        assert!(!said.contains("got no answer"), "{status}: {said}");
    }
    Ok(())
}

/// `idem certify` as its binaries parse it.
#[derive(Debug, clap::Parser)]
struct CertifyCommand {
    #[command(flatten)]
    args: idem_core::cli::CertifyArgs,
}

/// Issue 36, item 3: a refused API key's message names the variable the
/// key was read from, or says that none is configured and how to name one.
#[test]
fn a_refused_key_names_its_variable() -> TestResult {
    use clap::Parser;
    let servers = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let (addr, server) = servers.block_on(start_provider(Behaviour::default()))?;
    server.require_api_key("sk-right");
    let provider = format!("p=http://{addr}");
    // HOME holds no API key, but it is set wherever tests run, and the
    // message must name it, never its value.
    for (key_flags, says) in [
        (&["--api-key-env", "p=HOME"][..], "read from $HOME"),
        (&[], "--api-key-env p=VARIABLE"),
    ] {
        let args = [&["certify", "--provider", &provider][..], key_flags].concat();
        let parsed = CertifyCommand::try_parse_from(args)?;
        let said = idem_core::cli::certify(parsed.args)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(said.contains(says), "{key_flags:?}: {said}");
        assert!(said.contains("401"), "{key_flags:?}: {said}");
        let home = std::env::var("HOME").unwrap_or_default();
        assert!(home.len() < 4 || !said.contains(&home), "{said}");
    }
    Ok(())
}

/// Five providers a certification cannot learn anything from: one that
/// answers 404 to everything, a TLS server reached over plain HTTP, one
/// that dies after its first answers, a plain server reached over HTTPS,
/// and a TLS server whose certificate no known CA issued. Their addresses, served from a
/// runtime of their own (the command line runs its own).
fn useless_providers() -> Result<(tokio::runtime::Runtime, [String; 5]), Box<dyn std::error::Error>>
{
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let urls = runtime.block_on(async {
        let not_found = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let not_found_addr = not_found.local_addr()?;
        let app = axum::Router::new().fallback(|| async { http::StatusCode::NOT_FOUND });
        tokio::spawn(async move { axum::serve(not_found, app).await });

        let (cert_pem, key_pem) = localhost_certificate()?;
        let dir = tempfile::tempdir()?;
        let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
        std::fs::write(&cert, cert_pem)?;
        std::fs::write(&key, key_pem)?;
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let tls_addr = tcp.local_addr()?;
        let listener = TlsListener::from_pem_files(tcp, &cert, &key)?;
        let tls = ProviderServer::new(Behaviour::default());
        tokio::spawn(idem_core::provider::server::serve(listener, tls));

        let dying = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let dying_addr = dying.local_addr()?;
        let server = ProviderServer::new(Behaviour::default());
        let serving = tokio::spawn(idem_core::provider::server::serve(dying, server.clone()));
        tokio::spawn(async move {
            while server.executions().len() < 10 {
                idem_core::timer::sleep(Duration::from_millis(5)).await;
            }
            serving.abort();
        });
        Ok::<_, Box<dyn std::error::Error>>([
            format!("http://{not_found_addr}"),
            format!("http://{tls_addr}"),
            format!("http://{dying_addr}"),
            format!("https://{not_found_addr}"),
            format!("https://localhost:{}", tls_addr.port()),
        ])
    })?;
    Ok((runtime, urls))
}

/// Issue 22, item 3: a certification that could not run (or learnt
/// nothing) exits 2 and leaves the certificate on file as it was, over
/// plain HTTP to a TLS port and over HTTPS to a plain one alike; and
/// (item 10) a certificate no known CA issued says how to give its CA.
#[test]
fn a_certification_that_learnt_nothing_leaves_the_certificate() -> TestResult {
    use clap::Parser;
    let (servers, urls) = useless_providers()?;
    let (url, key, before) = servers.block_on(async {
        let url = idem_core::testing::pg::cluster().fresh_database_url().await;
        let store = idem_core::store::pg::PgStore::connect(&url, "idem", 2).await?;
        store.migrate().await?;
        let contract = Contract::shipped();
        let key = idem_model::contract::CertificateKey {
            provider: "p".to_owned(),
            model: "m".to_owned(),
            prompt_version: contract.prompt_version.clone(),
            schema_version: contract.schema_version.clone(),
        };
        let before = Certificate {
            key: key.clone(),
            passed: true,
            evidence: json!({"source": "certification", "earlier": true}),
            at: SystemClock.now(),
        };
        store.put_certificate(before.clone()).await?;
        Ok::<_, Box<dyn std::error::Error>>((url, key, before))
    })?;
    for provider_url in &urls {
        let provider = format!("p={provider_url}");
        let parsed = CertifyCommand::try_parse_from([
            "certify",
            "--provider",
            &provider,
            "--model",
            "m",
            "--request-timeout-ms",
            "2000",
            "--deadline-ms",
            "30000",
            "--database-url",
            &url,
        ])?;
        let outcome = idem_core::cli::certify(parsed.args);
        assert!(outcome.is_err(), "{provider_url}: {outcome:?}");
        // Issue 36: HTTPS to a plain HTTP server says so plainly.
        if provider_url.starts_with("https://127.0.0.1") {
            let said = outcome
                .as_ref()
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(said.contains("did not answer in TLS"), "{said}");
            assert!(said.contains("http://, not https://"), "{said}");
        }
        if provider_url.starts_with("https://localhost") {
            let said = outcome
                .as_ref()
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(said.contains("--ca-file"), "{said}");
        }
        let after = servers.block_on(async {
            let store = idem_core::store::pg::PgStore::connect(&url, "idem", 1).await?;
            Ok::<_, Box<dyn std::error::Error>>(store.certificate(&key).await?)
        })?;
        assert_eq!(after.as_ref(), Some(&before), "{provider_url}: {outcome:?}");
    }
    Ok(())
}
