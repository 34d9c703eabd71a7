//! The OpenAI-compatible client against the provider server, over real
//! loopback HTTP: how each provider behaviour reaches the caller as an
//! output or as a [`ProviderError`] variant, and what the provider's ledger
//! says was executed and billed. Real time, so latencies are tens of ms.

use std::time::Duration;

use axum::body::Body;
use http_body_util::BodyExt;
use idem_core::provider::connect::TcpConnector;
use idem_core::provider::openai::{OpenAiClient, OpenAiConfig};
use idem_core::provider::server::{
    Behaviour, ContractMode, ExecutionOutcome, ProviderServer, router, serve,
};
use idem_core::provider::{Provider, ProviderCall, ProviderError, RemoteStatus};
use idem_core::timer::{sleep, timeout};
use idem_model::model::{AttemptId, JobId};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tower::ServiceExt;
use uuid::Uuid;

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// How long a test waits for an answer that should come promptly.
const PROMPT_MS: u64 = 2_000;
/// How often, and how many times, a test polls for a state it expects.
const POLL_INTERVAL_MS: u64 = 10;
const POLLS_MAX: u32 = 200;

/// A provider server on a loopback port and a client pointed at it. The
/// server task stops when the fixture is dropped.
struct Fixture {
    server: ProviderServer,
    client: OpenAiClient<TcpConnector>,
    serving: JoinHandle<std::io::Result<()>>,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.serving.abort();
    }
}

async fn start(behaviour: Behaviour) -> Result<Fixture, Box<dyn std::error::Error>> {
    start_server(ProviderServer::new(behaviour)).await
}

async fn start_server(server: ProviderServer) -> Result<Fixture, Box<dyn std::error::Error>> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let authority = listener.local_addr()?.to_string();
    let serving = tokio::spawn(serve(listener, server.clone()));
    let client = OpenAiClient::new(TcpConnector, OpenAiConfig::new(authority, "test-model"))?;
    Ok(Fixture {
        server,
        client,
        serving,
    })
}

/// An authority nothing listens on: bound, then released.
async fn closed_authority() -> Result<String, Box<dyn std::error::Error>> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let authority = listener.local_addr()?.to_string();
    drop(listener);
    Ok(authority)
}

fn attempt(n: u128) -> AttemptId {
    AttemptId(Uuid::from_u128(n))
}

fn call(n: u128, params: Value) -> ProviderCall {
    ProviderCall {
        attempt_id: attempt(n),
        job_id: JobId(Uuid::from_u128(1_000 + n)),
        model: "test-model".to_owned(),
        params: params.into(),
    }
}

fn params() -> Value {
    json!({"text": "Where is my order ORD-42?"})
}

/// Connects and sends, bounded by `PROMPT_MS` so a broken test fails
/// instead of hanging.
async fn send(
    client: &OpenAiClient<TcpConnector>,
    call: ProviderCall,
) -> Result<Value, ProviderError> {
    let exchange = async {
        let answer = client.connect().await?.send(call).await?;
        Ok(answer.output.value().clone())
    };
    timeout(Duration::from_millis(PROMPT_MS), exchange)
        .await
        .expect("the provider answers promptly")
}

/// Polls the provider's status for `key` until `done` accepts it.
async fn wait_for_status(
    client: &OpenAiClient<TcpConnector>,
    key: AttemptId,
    done: impl Fn(&RemoteStatus) -> bool,
) -> Result<RemoteStatus, ProviderError> {
    let mut status = client.status(key).await?;
    for _ in 0..POLLS_MAX {
        if done(&status) {
            return Ok(status);
        }
        sleep(Duration::from_millis(POLL_INTERVAL_MS)).await;
        status = client.status(key).await?;
    }
    panic!("status for {key} never got there; last was {status:?}");
}

#[tokio::test]
async fn valid_output_is_parsed_and_the_execution_billed() -> TestResult {
    let fixture = start(Behaviour::default()).await?;
    let output = send(&fixture.client, call(1, params())).await?;
    // The provider answered the prompt rendered from the shipped contract.
    assert_eq!(output["orders"], json!(["ORD-42"]), "{output}");
    assert_eq!(output["language"], json!("en"), "{output}");
    assert_eq!(output["subject"], json!("Where is my order ORD-42?"));
    assert!(output["summary"].is_string(), "{output}");

    let executions = fixture.server.executions();
    assert_eq!(executions.len(), 1);
    assert_eq!(executions[0].key, attempt(1).to_string());
    assert_eq!(
        executions[0].job_id,
        Some(JobId(Uuid::from_u128(1_001)).to_string())
    );
    assert_eq!(executions[0].outcome, ExecutionOutcome::Succeeded);
    assert_eq!(executions[0].output, Some(output.clone()));
    assert_eq!(fixture.server.billed_count(), 1);
    assert_eq!(
        fixture.client.status(attempt(1)).await?,
        RemoteStatus::Succeeded {
            output: output.into(),
            model: Some("test-model".to_owned()),
        }
    );
    Ok(())
}

#[tokio::test]
async fn a_repeated_key_is_executed_once_when_keys_are_honoured() -> TestResult {
    let fixture = start(Behaviour::default()).await?;
    let first = send(&fixture.client, call(1, params())).await?;
    let second = send(&fixture.client, call(1, params())).await?;
    assert_eq!(first, second);
    assert_eq!(fixture.server.executions().len(), 1);
    assert_eq!(fixture.server.billed_count(), 1);
    Ok(())
}

#[tokio::test]
async fn a_repeat_during_the_first_execution_waits_for_it() -> TestResult {
    let fixture = start(Behaviour {
        latency_ms: 50,
        ..Behaviour::default()
    })
    .await?;
    let (first, second) = tokio::join!(
        send(&fixture.client, call(1, params())),
        send(&fixture.client, call(1, params())),
    );
    assert_eq!(first?, second?);
    assert_eq!(fixture.server.billed_count(), 1);
    Ok(())
}

#[tokio::test]
async fn a_repeated_key_is_executed_again_when_keys_are_ignored() -> TestResult {
    let fixture = start(Behaviour {
        honour_idempotency_keys: false,
        ..Behaviour::default()
    })
    .await?;
    send(&fixture.client, call(1, params())).await?;
    send(&fixture.client, call(1, params())).await?;
    let executions = fixture.server.executions();
    assert_eq!(executions.len(), 2);
    assert!(executions.iter().all(|e| e.key == attempt(1).to_string()));
    assert_eq!(fixture.server.billed_count(), 2);
    Ok(())
}

#[tokio::test]
async fn a_definitive_error_is_rejected_and_not_billed() -> TestResult {
    let fixture = start(Behaviour {
        error_per_mille: 1000,
        ..Behaviour::default()
    })
    .await?;
    let refused = send(&fixture.client, call(1, params())).await;
    assert!(
        matches!(refused, Err(ProviderError::Rejected { status: 500, .. })),
        "{refused:?}"
    );
    assert_eq!(fixture.server.billed_count(), 0);
    assert!(matches!(
        fixture.client.status(attempt(1)).await?,
        RemoteStatus::Failed { .. }
    ));

    // Nothing was done, so the same key may do the work once the errors stop.
    fixture.server.set_behaviour(Behaviour::default());
    send(&fixture.client, call(1, params())).await?;
    assert_eq!(fixture.server.billed_count(), 1);
    Ok(())
}

#[tokio::test]
async fn a_closed_port_is_unreachable() -> TestResult {
    let client = OpenAiClient::new(
        TcpConnector,
        OpenAiConfig::new(closed_authority().await?, "m"),
    )?;
    let connected = client.connect().await;
    assert!(
        matches!(connected, Err(ProviderError::Unreachable(_))),
        "{:?}",
        connected.err()
    );
    Ok(())
}

#[tokio::test]
async fn a_hung_answer_times_out_but_the_work_was_done_and_billed() -> TestResult {
    let fixture = start(Behaviour {
        latency_ms: 20,
        hang: true,
        ..Behaviour::default()
    })
    .await?;
    let dispatch = fixture.client.connect().await?;
    let answer = timeout(Duration::from_millis(200), dispatch.send(call(1, params()))).await;
    assert!(answer.is_err(), "the answer never comes: {answer:?}");

    let status = fixture.client.status(attempt(1)).await?;
    assert!(
        matches!(status, RemoteStatus::Succeeded { .. }),
        "{status:?}"
    );
    assert_eq!(fixture.server.billed_count(), 1);
    Ok(())
}

#[tokio::test]
async fn a_client_that_gives_up_does_not_stop_the_work() -> TestResult {
    let fixture = start(Behaviour {
        latency_ms: 300,
        ..Behaviour::default()
    })
    .await?;
    let dispatch = fixture.client.connect().await?;
    let answer = timeout(Duration::from_millis(20), dispatch.send(call(1, params()))).await;
    assert!(answer.is_err(), "gave up before the provider finished");
    assert_eq!(
        fixture.client.status(attempt(1)).await?,
        RemoteStatus::Running
    );

    let status =
        wait_for_status(&fixture.client, attempt(1), |s| *s != RemoteStatus::Running).await?;
    assert!(
        matches!(status, RemoteStatus::Succeeded { .. }),
        "{status:?}"
    );
    assert_eq!(fixture.server.billed_count(), 1);
    Ok(())
}

#[tokio::test]
async fn a_stalled_execution_runs_until_cancelled() -> TestResult {
    let fixture = start(Behaviour {
        stall: true,
        ..Behaviour::default()
    })
    .await?;
    let dispatch = fixture.client.connect().await?;
    let pending = tokio::spawn(dispatch.send(call(1, params())));
    wait_for_status(&fixture.client, attempt(1), |s| *s == RemoteStatus::Running).await?;

    assert!(fixture.client.cancel(attempt(1)).await?);
    let answer = timeout(Duration::from_millis(PROMPT_MS), pending).await??;
    assert!(
        matches!(answer, Err(ProviderError::Rejected { status: 409, .. })),
        "{answer:?}"
    );
    assert_eq!(
        fixture.client.status(attempt(1)).await?,
        RemoteStatus::Cancelled
    );
    assert!(
        fixture.client.cancel(attempt(1)).await?,
        "cancelling again is idempotent"
    );
    assert_eq!(fixture.server.billed_count(), 0);
    Ok(())
}

#[tokio::test]
async fn a_finished_execution_cannot_be_cancelled() -> TestResult {
    let fixture = start(Behaviour::default()).await?;
    send(&fixture.client, call(1, params())).await?;
    assert!(!fixture.client.cancel(attempt(1)).await?);
    assert!(matches!(
        fixture.client.status(attempt(1)).await?,
        RemoteStatus::Succeeded { .. }
    ));
    Ok(())
}

#[tokio::test]
async fn a_key_cancelled_before_its_request_arrives_is_never_executed() -> TestResult {
    let fixture = start(Behaviour::default()).await?;
    assert_eq!(
        fixture.client.status(attempt(1)).await?,
        RemoteStatus::NotFound
    );
    assert!(fixture.client.cancel(attempt(1)).await?);
    let late = send(&fixture.client, call(1, params())).await;
    assert!(
        matches!(late, Err(ProviderError::Rejected { status: 409, .. })),
        "{late:?}"
    );
    assert_eq!(fixture.server.billed_count(), 0);
    Ok(())
}

/// What a contract mode should look like to the client.
#[derive(Debug)]
enum Expect {
    /// Parsed, with exactly these top-level keys.
    Keys(&'static [&'static str]),
    Invalid,
}

async fn check(contract: ContractMode, expect: Expect) -> TestResult {
    let fixture = start(Behaviour {
        contract,
        ..Behaviour::default()
    })
    .await?;
    let answer = send(&fixture.client, call(1, params())).await;
    match (&expect, &answer) {
        (Expect::Keys(keys), Ok(Value::Object(output))) => {
            // Sorted on both sides: the map's own order depends on a
            // serde_json feature some other crate may turn on.
            let mut got: Vec<&str> = output.keys().map(String::as_str).collect();
            got.sort_unstable();
            let mut want = keys.to_vec();
            want.sort_unstable();
            assert_eq!(got, want, "{contract:?}: {output:?}");
        }
        (Expect::Invalid, Err(ProviderError::Invalid(_))) => {}
        _ => panic!("{contract:?}: expected {expect:?}, got {answer:?}"),
    }
    // The provider did the work in every mode; only its answer differs.
    assert_eq!(fixture.server.billed_count(), 1, "{contract:?}");
    Ok(())
}

#[tokio::test]
async fn each_contract_mode_reaches_the_client_as_expected() -> TestResult {
    const TRIAGE: &[&str] = &["language", "orders", "subject", "summary"];
    check(ContractMode::Valid, Expect::Keys(TRIAGE)).await?;
    check(
        ContractMode::InventedKey,
        Expect::Keys(&["confidence", "language", "orders", "subject", "summary"]),
    )
    .await?;
    // The right keys: the formats inside them are what it ignores.
    check(ContractMode::IgnoredFormat, Expect::Keys(TRIAGE)).await?;
    check(ContractMode::Prose, Expect::Invalid).await?;
    Ok(())
}

#[tokio::test]
async fn prose_is_invalid_through_status_lookup_too() -> TestResult {
    let fixture = start(Behaviour {
        contract: ContractMode::Prose,
        ..Behaviour::default()
    })
    .await?;
    let _ = send(&fixture.client, call(1, params())).await;
    let status = fixture.client.status(attempt(1)).await;
    assert!(
        matches!(status, Err(ProviderError::Invalid(_))),
        "{status:?}"
    );
    Ok(())
}

#[tokio::test]
async fn unsupported_status_and_cancel_are_reported() -> TestResult {
    // Disabled in the client: answered without a request, which would
    // otherwise fail as unreachable.
    let mut config = OpenAiConfig::new(closed_authority().await?, "m");
    config.supports_status = false;
    config.supports_cancel = false;
    let client = OpenAiClient::new(TcpConnector, config)?;
    assert_eq!(
        client.status(attempt(1)).await,
        Err(ProviderError::Unsupported("status"))
    );
    assert_eq!(
        client.cancel(attempt(1)).await,
        Err(ProviderError::Unsupported("cancel"))
    );

    // Disabled in the provider: it answers 501.
    let fixture = start(Behaviour {
        supports_status: false,
        supports_cancel: false,
        ..Behaviour::default()
    })
    .await?;
    assert_eq!(
        fixture.client.status(attempt(1)).await,
        Err(ProviderError::Unsupported("status"))
    );
    assert_eq!(
        fixture.client.cancel(attempt(1)).await,
        Err(ProviderError::Unsupported("cancel"))
    );
    Ok(())
}

#[tokio::test]
async fn a_bare_404_is_not_taken_for_never_dispatched() -> TestResult {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let authority = listener.local_addr()?.to_string();
    let serving = tokio::spawn(async move { axum::serve(listener, axum::Router::new()).await });
    let client = OpenAiClient::new(TcpConnector, OpenAiConfig::new(authority, "m"))?;
    let status = client.status(attempt(1)).await;
    serving.abort();
    assert!(
        matches!(status, Err(ProviderError::Rejected { status: 404, .. })),
        "{status:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_full_ledger_refuses_new_work_definitively() -> TestResult {
    let fixture =
        start_server(ProviderServer::with_executions_max(Behaviour::default(), 2)).await?;
    send(&fixture.client, call(1, params())).await?;
    send(&fixture.client, call(2, params())).await?;
    // A replay needs no new entry.
    send(&fixture.client, call(2, params())).await?;
    let refused = send(&fixture.client, call(3, params())).await;
    assert!(
        matches!(refused, Err(ProviderError::Rejected { status: 503, .. })),
        "{refused:?}"
    );
    assert_eq!(fixture.server.executions().len(), 2);
    Ok(())
}

/// A chat-completion request straight to the router, without the client.
fn raw_completion(key: Option<&str>) -> Result<http::Request<Body>, http::Error> {
    let mut request =
        http::Request::post("/v1/chat/completions").header("content-type", "application/json");
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    request.body(Body::from(
        json!({"model": "m", "messages": [{"role": "user", "content": "{\"n\":1}"}]}).to_string(),
    ))
}

#[tokio::test]
async fn a_request_without_an_idempotency_key_is_refused() -> TestResult {
    let server = ProviderServer::default();
    let response = router(server.clone())
        .oneshot(raw_completion(None)?)
        .await?;
    assert_eq!(response.status(), http::StatusCode::BAD_REQUEST);
    let body: Value = serde_json::from_slice(&response.into_body().collect().await?.to_bytes())?;
    assert_eq!(body["error"]["type"], "invalid_request");
    assert!(server.executions().is_empty());
    Ok(())
}

/// The status codes a server answers to `requests_count` distinct keys.
async fn error_pattern(
    seed: u64,
    requests_count: u32,
) -> Result<Vec<u16>, Box<dyn std::error::Error>> {
    let server = ProviderServer::new(Behaviour {
        error_per_mille: 500,
        seed,
        ..Behaviour::default()
    });
    let mut statuses = Vec::new();
    for n in 0..requests_count {
        let response = router(server.clone())
            .oneshot(raw_completion(Some(&format!("key-{n}")))?)
            .await?;
        statuses.push(response.status().as_u16());
    }
    Ok(statuses)
}

#[tokio::test]
async fn the_same_seed_gives_the_same_faults() -> TestResult {
    let first = error_pattern(7, 32).await?;
    assert_eq!(first, error_pattern(7, 32).await?);
    assert_ne!(first, error_pattern(8, 32).await?);
    assert!(first.contains(&200) && first.contains(&500), "{first:?}");
    Ok(())
}
