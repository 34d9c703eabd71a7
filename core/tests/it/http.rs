//! The service over real HTTP on loopback, against real PostgreSQL and the
//! provider server: the seed article's fragile points end to end, the
//! bad-input table, and the OpenAPI description checked against the router.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use idem_core::api::ProblemType;
use idem_core::clock::{SystemClock, UuidV7Ids};
use idem_core::engine::{Engine, Policy};
use idem_core::provider::connect::TcpConnector;
use idem_core::provider::openai::{OpenAiClient, OpenAiConfig};
use idem_core::provider::server::{Behaviour, ProviderServer};
use idem_core::provider::{Provider, ProviderSet};
use idem_core::service::{Service, ServiceConfig, ShutdownTrigger, shutdown_pair};
use idem_core::store::Store;
use idem_core::store::mem::MemStore;
use idem_core::testing::pg::fresh_store;
use idem_model::contract::{Certificate, Providers};
use idem_model::model::OwnerId;
use serde_json::{Value, json};

use crate::support::{Reply, send};

type TestResult = Result<(), Box<dyn std::error::Error>>;

pub(crate) const ALICE: &str = "Bearer token-alice";
const BOB: &str = "Bearer token-bob";
pub(crate) const OPERATOR: &str = "Bearer token-operator";

/// A running service with its providers.
pub(crate) struct App {
    pub(crate) addr: SocketAddr,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) providers: BTreeMap<String, ProviderServer>,
    pub(crate) engine: Engine,
    pub(crate) _stop: ShutdownTrigger,
}

/// Which store a service runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Backend {
    Mem,
    Pg,
}

impl Backend {
    pub(crate) async fn store(self) -> Arc<dyn Store> {
        match self {
            Backend::Mem => Arc::new(MemStore::new()),
            Backend::Pg => Arc::new(fresh_store().await),
        }
    }
}

async fn start_provider(behaviour: Behaviour) -> (SocketAddr, ProviderServer) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a provider port");
    let addr = listener.local_addr().expect("provider address");
    let server = ProviderServer::new(behaviour);
    let serving = server.clone();
    tokio::spawn(async move { idem_core::provider::server::serve(listener, serving).await });
    (addr, server)
}

async fn start_app(
    policy: Policy,
    behaviours: Vec<(&str, Behaviour)>,
    config: ServiceConfig,
) -> App {
    start_app_on(Backend::Pg.store().await, policy, behaviours, config).await
}

/// A service over `store`, with a provider server per behaviour.
pub(crate) async fn start_app_on(
    store: Arc<dyn Store>,
    policy: Policy,
    behaviours: Vec<(&str, Behaviour)>,
    config: ServiceConfig,
) -> App {
    let names: Vec<&str> = behaviours.iter().map(|(n, _)| *n).collect();
    let engine = Engine::new(
        store.clone(),
        Arc::new(SystemClock),
        Arc::new(UuidV7Ids),
        Providers::named(names),
        policy,
    );
    let mut clients = ProviderSet::new();
    let mut servers = BTreeMap::new();
    for (name, behaviour) in behaviours {
        let (addr, server) = start_provider(behaviour).await;
        let client = OpenAiClient::new(TcpConnector, OpenAiConfig::new(addr.to_string(), name))
            .expect("a valid provider config");
        clients.insert(name.to_owned(), Arc::new(client) as Arc<dyn Provider>);
        servers.insert(name.to_owned(), server);
    }
    let auth = idem_core::api::Auth::new()
        .with_owner("token-alice", OwnerId("alice".into()))
        .with_owner("token-bob", OwnerId("bob".into()))
        .with_operator("token-operator");
    let service = Service::new(engine.clone(), auth, clients, config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the API port");
    let addr = listener.local_addr().expect("API address");
    let (stop, shutdown) = shutdown_pair();
    tokio::spawn(service.run(listener, shutdown));
    App {
        addr,
        store,
        providers: servers,
        engine,
        _stop: stop,
    }
}

pub(crate) fn quiet_config() -> ServiceConfig {
    ServiceConfig {
        run_worker: false,
        run_reconciler: false,
        ..ServiceConfig::default()
    }
}

pub(crate) fn fast_worker(deadline_ms: u64, run_reconciler: bool) -> ServiceConfig {
    let mut config = ServiceConfig::default();
    config.worker.poll_interval_ms = 20;
    config.worker.attempt_deadline_ms = deadline_ms;
    config.run_reconciler = run_reconciler;
    config.reconciler.poll_interval_ms = 50;
    config
}

pub(crate) fn body(value: Value) -> Option<Vec<u8>> {
    Some(serde_json::to_vec(&value).expect("JSON serializes"))
}

pub(crate) async fn create(app: &App, key: &str, params: Value) -> Reply {
    send(
        app.addr,
        "POST",
        "/v1/jobs",
        &[
            ("authorization", ALICE),
            ("content-type", "application/json"),
            ("idempotency-key", key),
        ],
        body(json!({"provider": "primary", "fallbacks": ["fallback"], "params": params})),
    )
    .await
}

/// Polls `GET path` until `done` holds; bounded.
pub(crate) async fn wait_for(app: &App, path: &str, done: impl Fn(&Value) -> bool) -> Value {
    for _ in 0..200 {
        let reply = send(app.addr, "GET", path, &[("authorization", ALICE)], None).await;
        if reply.status == 200 && done(&reply.body) {
            return reply.body;
        }
        idem_core::timer::sleep(Duration::from_millis(25)).await;
    }
    panic!("{path} never reached the expected state");
}

pub(crate) fn attempts_in(body: &Value) -> Vec<Value> {
    body["attempts"].as_array().cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_double_click_gets_one_job() -> TestResult {
    let app = start_app(
        Policy::Strict,
        vec![
            ("primary", Behaviour::default()),
            ("fallback", Behaviour::default()),
        ],
        quiet_config(),
    )
    .await;
    let (a, b) = tokio::join!(
        create(&app, "click-1", json!({"text": "hello"})),
        create(&app, "click-1", json!({"text": "hello"}))
    );
    let mut statuses = [a.status, b.status];
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 201], "one creates, one replays");
    assert_eq!(
        a.body["id"], b.body["id"],
        "both clicks get the same job id"
    );
    let replay = if a.status == 200 { &a } else { &b };
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    let created = if a.status == 201 { &a } else { &b };
    assert_eq!(
        created.header("location").map(str::to_owned),
        Some(format!(
            "/v1/jobs/{}",
            created.body["id"].as_str().unwrap_or_default()
        ))
    );
    assert_eq!(app.store.dump().await?.jobs.len(), 1);
    Ok(())
}

#[tokio::test]
async fn http_mismatched_payload_is_409_naming_the_pointers() -> TestResult {
    let app = start_app(
        Policy::Strict,
        vec![
            ("primary", Behaviour::default()),
            ("fallback", Behaviour::default()),
        ],
        quiet_config(),
    )
    .await;
    let first = create(&app, "k", json!({"text": "hello", "lang": "en"})).await;
    assert_eq!(first.status, 201);
    let reused = create(&app, "k", json!({"text": "goodbye", "lang": "en"})).await;
    assert_eq!(reused.status, 409);
    assert_eq!(
        reused.header("content-type"),
        Some("application/problem+json")
    );
    assert_eq!(
        reused.body["type"],
        "urn:idem:problem:idempotency-key-reused"
    );
    assert_eq!(reused.body["differing_pointers"], json!(["/params/text"]));
    let job = app.store.dump().await?.jobs.remove(0);
    assert_eq!(
        job.request.value()["params"]["text"],
        "hello",
        "the stored job is unchanged"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_hanging_provider_leaves_unknown_and_blocks_the_backup_button() -> TestResult {
    let hang = Behaviour {
        hang: true,
        latency_ms: 20,
        ..Behaviour::default()
    };
    let app = start_app(
        Policy::Strict,
        vec![("primary", hang), ("fallback", Behaviour::default())],
        fast_worker(300, false),
    )
    .await;
    let job_id = create(&app, "hang-1", json!({"text": "slow"})).await.body["id"]
        .as_str()
        .expect("a job id")
        .to_owned();
    let attempts_path = format!("/v1/jobs/{job_id}/attempts");
    let listed = wait_for(&app, &attempts_path, |b| {
        attempts_in(b)
            .first()
            .is_some_and(|a| a["state"] == "unknown")
    })
    .await;
    let first = attempts_in(&listed)[0]["id"]
        .as_str()
        .expect("attempt id")
        .to_owned();
    // The backup button is refused: the provider may still be working.
    let backup = send(
        app.addr,
        "POST",
        &attempts_path,
        &[("authorization", ALICE)],
        None,
    )
    .await;
    assert_eq!(backup.status, 409);
    assert_eq!(backup.body["type"], "urn:idem:problem:attempt-in-flight");
    assert_eq!(backup.body["blocking_attempt"], first.as_str());
    assert_eq!(backup.body["blocking_state"], "unknown");
    // The operator resolves it; the job is unblocked.
    let resolution = send(
        app.addr,
        "POST",
        &format!("/v1/attempts/{first}/resolution"),
        &[
            ("authorization", OPERATOR),
            ("content-type", "application/json"),
        ],
        body(json!({"outcome": "failed", "error": {"by": "operator"}})),
    )
    .await;
    assert_eq!(resolution.status, 200, "{:?}", resolution.body);
    assert_eq!(resolution.body["attempt_state"], "failed");
    let backup = send(
        app.addr,
        "POST",
        &attempts_path,
        &[("authorization", ALICE)],
        None,
    )
    .await;
    // The worker is still polling and may start the second attempt before
    // the backup press lands; either way the second attempt is not blocked
    // by the first, and there is exactly one of it.
    if backup.status == 409 {
        assert_eq!(backup.body["type"], "urn:idem:problem:attempt-in-flight");
        assert_ne!(backup.body["blocking_attempt"], first.as_str());
    } else {
        assert_eq!(backup.status, 201, "{:?}", backup.body);
        assert_eq!(backup.body["seq"], 2);
    }
    let attempts = app.engine.store().attempts(job_id.parse()?).await?;
    assert_eq!(attempts.len(), 2, "one attempt after the resolution");
    // The attempt went unknown, never failed, before the operator acted.
    let events = app.engine.store().events(job_id.parse()?).await?;
    let first_moves: Vec<_> = events
        .iter()
        .filter(|e| e.attempt_id.map(|a| a.to_string()) == Some(first.clone()))
        .filter_map(|e| {
            e.detail
                .get("to")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(first_moves, vec!["running", "unknown", "failed"]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_reconciler_resolves_a_hung_attempt_by_status_lookup() -> TestResult {
    let hang = Behaviour {
        hang: true,
        latency_ms: 20,
        ..Behaviour::default()
    };
    let mut config = fast_worker(200, true);
    config.reconciler.unknown_max_ms = 60_000;
    let app = start_app(
        Policy::Strict,
        vec![("primary", hang), ("fallback", Behaviour::default())],
        config,
    )
    .await;
    let job_id = create(&app, "hang-2", json!({"text": "slow"})).await.body["id"]
        .as_str()
        .expect("a job id")
        .to_owned();
    let job = wait_for(&app, &format!("/v1/jobs/{job_id}"), |b| {
        b["state"] == "succeeded"
    })
    .await;
    let executions = app.providers["primary"].executions();
    assert_eq!(
        executions.len(),
        1,
        "one billed execution, found by its key"
    );
    assert_eq!(Some(&job["result"]), executions[0].output.as_ref());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_hedged_attempts_complete_out_of_order_and_the_late_primary_loses() -> TestResult {
    let slow = Behaviour {
        latency_ms: 1_200,
        ..Behaviour::default()
    };
    let fast = Behaviour {
        latency_ms: 30,
        ..Behaviour::default()
    };
    let app = start_app(
        Policy::Hedged {
            hedge_after_ms: 150,
        },
        vec![("primary", slow), ("fallback", fast)],
        fast_worker(5_000, false),
    )
    .await;
    let key = app
        .engine
        .providers()
        .certificate_key("fallback")
        .expect("known");
    app.store
        .put_certificate(Certificate {
            key,
            passed: true,
            evidence: json!({"test": "hedge"}),
            at: app.engine.clock().now(),
        })
        .await?;
    let job_id = create(&app, "hedge-1", json!({"text": "race"})).await.body["id"]
        .as_str()
        .expect("a job id")
        .to_owned();
    let attempts = wait_for(&app, &format!("/v1/jobs/{job_id}/attempts"), |b| {
        let all = attempts_in(b);
        all.len() == 2
            && all
                .iter()
                .all(|a| a["state"] == "succeeded" || a["state"] == "lost")
    })
    .await;
    let all = attempts_in(&attempts);
    let primary = all
        .iter()
        .find(|a| a["provider"] == "primary")
        .expect("primary attempt");
    let hedge = all
        .iter()
        .find(|a| a["provider"] == "fallback")
        .expect("hedge attempt");
    assert_eq!(primary["seq"], 1, "the primary was sent first");
    assert_eq!(
        hedge["state"], "succeeded",
        "the hedge answered first and won"
    );
    assert_eq!(
        primary["state"], "lost",
        "the primary answered later and lost"
    );
    assert_eq!(
        primary["output"],
        Value::Null,
        "the late output is discarded"
    );
    let job = wait_for(&app, &format!("/v1/jobs/{job_id}"), |b| {
        b["state"] == "succeeded"
    })
    .await;
    assert_eq!(job["completed_by"], hedge["id"]);
    assert_eq!(job["version"], 1);
    let events = send(
        app.addr,
        "GET",
        &format!("/v1/jobs/{job_id}/events"),
        &[("authorization", ALICE)],
        None,
    )
    .await;
    let kinds: Vec<_> = events.body["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| {
            (
                e["kind"].as_str().unwrap_or("").to_owned(),
                e["attempt_id"].clone(),
            )
        })
        .collect();
    assert!(kinds.contains(&("race_lost".to_owned(), primary["id"].clone())));
    assert!(kinds.iter().any(|(k, _)| k == "hedge_fired"));
    Ok(())
}

#[tokio::test]
async fn http_owners_are_isolated() -> TestResult {
    let app = start_app(
        Policy::Strict,
        vec![
            ("primary", Behaviour::default()),
            ("fallback", Behaviour::default()),
        ],
        quiet_config(),
    )
    .await;
    let id = create(&app, "mine", json!({})).await.body["id"]
        .as_str()
        .expect("a job id")
        .to_owned();
    for (method, path) in [
        ("GET", format!("/v1/jobs/{id}")),
        ("GET", format!("/v1/jobs/{id}/attempts")),
        ("GET", format!("/v1/jobs/{id}/events")),
        ("POST", format!("/v1/jobs/{id}/attempts")),
    ] {
        let reply = send(app.addr, method, &path, &[("authorization", BOB)], None).await;
        assert_eq!(reply.status, 404, "{method} {path}");
        assert_eq!(reply.body["type"], "urn:idem:problem:not-found");
    }
    assert!(
        app.store.dump().await?.attempts.is_empty(),
        "bob started nothing"
    );
    Ok(())
}

/// One row of the bad-input table.
struct Bad<'a> {
    what: &'a str,
    method: &'a str,
    path: String,
    headers: Vec<(&'a str, String)>,
    body: Option<Vec<u8>>,
    status: u16,
    problem: ProblemType,
}

/// Sends one malformed request; checks its status, its problem+json body,
/// and that it wrote nothing.
async fn check(app: &App, row: Bad<'_>) {
    let headers: Vec<(&str, &str)> = row.headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
    let reply = send(app.addr, row.method, &row.path, &headers, row.body).await;
    assert_eq!(reply.status, row.status, "{}: {:?}", row.what, reply.body);
    assert_eq!(
        reply.header("content-type"),
        Some("application/problem+json"),
        "{}",
        row.what
    );
    assert_eq!(reply.body["type"], row.problem.uri(), "{}", row.what);
    assert_eq!(reply.body["status"], row.status, "{}", row.what);
    let dump = app.store.dump().await.expect("dump");
    assert!(
        dump.jobs.is_empty() && dump.attempts.is_empty() && dump.events.is_empty(),
        "{} wrote something",
        row.what
    );
}

#[tokio::test]
async fn http_bad_input_gets_problem_json_and_writes_nothing() -> TestResult {
    let app = start_app(
        Policy::Strict,
        vec![
            ("primary", Behaviour::default()),
            ("fallback", Behaviour::default()),
        ],
        quiet_config(),
    )
    .await;
    let json_ct = ("content-type", "application/json".to_owned());
    let alice = ("authorization", ALICE.to_owned());
    let key = |k: &str| ("idempotency-key", k.to_owned());
    let good = || body(json!({"provider": "primary", "params": {}}));
    let random = uuid::Uuid::from_u128(7);
    use ProblemType as P;
    let rows = vec![
        Bad {
            what: "no token",
            method: "POST",
            path: "/v1/jobs".into(),
            headers: vec![json_ct.clone(), key("a")],
            body: good(),
            status: 401,
            problem: P::Unauthorized,
        },
        Bad {
            what: "unknown token",
            method: "POST",
            path: "/v1/jobs".into(),
            headers: vec![
                ("authorization", "Bearer nope".into()),
                json_ct.clone(),
                key("a"),
            ],
            body: good(),
            status: 401,
            problem: P::Unauthorized,
        },
        Bad {
            what: "operator creating a job",
            method: "POST",
            path: "/v1/jobs".into(),
            headers: vec![
                ("authorization", OPERATOR.into()),
                json_ct.clone(),
                key("a"),
            ],
            body: good(),
            status: 403,
            problem: P::Forbidden,
        },
        Bad {
            what: "missing key",
            method: "POST",
            path: "/v1/jobs".into(),
            headers: vec![alice.clone(), json_ct.clone()],
            body: good(),
            status: 400,
            problem: P::MissingIdempotencyKey,
        },
        Bad {
            what: "empty key",
            method: "POST",
            path: "/v1/jobs".into(),
            headers: vec![alice.clone(), json_ct.clone(), key("")],
            body: good(),
            status: 400,
            problem: P::InvalidIdempotencyKey,
        },
        Bad {
            what: "key with a space",
            method: "POST",
            path: "/v1/jobs".into(),
            headers: vec![alice.clone(), json_ct.clone(), key("a b")],
            body: good(),
            status: 400,
            problem: P::InvalidIdempotencyKey,
        },
        Bad {
            what: "key of 256 bytes",
            method: "POST",
            path: "/v1/jobs".into(),
            headers: vec![alice.clone(), json_ct.clone(), key(&"k".repeat(256))],
            body: good(),
            status: 400,
            problem: P::InvalidIdempotencyKey,
        },
        Bad {
            what: "text body",
            method: "POST",
            path: "/v1/jobs".into(),
            headers: vec![
                alice.clone(),
                ("content-type", "text/plain".into()),
                key("a"),
            ],
            body: Some(b"hello".to_vec()),
            status: 415,
            problem: P::UnsupportedMediaType,
        },
        Bad {
            what: "no content type",
            method: "POST",
            path: "/v1/jobs".into(),
            headers: vec![alice.clone(), key("a")],
            body: good(),
            status: 415,
            problem: P::UnsupportedMediaType,
        },
        Bad {
            what: "malformed JSON",
            method: "POST",
            path: "/v1/jobs".into(),
            headers: vec![alice.clone(), json_ct.clone(), key("a")],
            body: Some(b"{\"provider\": ".to_vec()),
            status: 400,
            problem: P::MalformedJson,
        },
        Bad {
            what: "empty body",
            method: "POST",
            path: "/v1/jobs".into(),
            headers: vec![alice.clone(), json_ct.clone(), key("a")],
            body: None,
            status: 400,
            problem: P::MalformedJson,
        },
        Bad {
            what: "unknown field",
            method: "POST",
            path: "/v1/jobs".into(),
            headers: vec![alice.clone(), json_ct.clone(), key("a")],
            body: body(json!({"provider": "primary", "owner": "bob"})),
            status: 400,
            problem: P::MalformedJson,
        },
        Bad {
            what: "missing provider",
            method: "POST",
            path: "/v1/jobs".into(),
            headers: vec![alice.clone(), json_ct.clone(), key("a")],
            body: body(json!({"params": {}})),
            status: 400,
            problem: P::MalformedJson,
        },
        Bad {
            what: "body over 64 KiB",
            method: "POST",
            path: "/v1/jobs".into(),
            headers: vec![alice.clone(), json_ct.clone(), key("a")],
            body: body(json!({"provider": "primary", "params": {"blob": "x".repeat(70 * 1024)}})),
            status: 413,
            problem: P::PayloadTooLarge,
        },
        Bad {
            what: "unknown provider",
            method: "POST",
            path: "/v1/jobs".into(),
            headers: vec![alice.clone(), json_ct.clone(), key("a")],
            body: body(json!({"provider": "nobody"})),
            status: 422,
            problem: P::UnknownProvider,
        },
        Bad {
            what: "unknown fallback",
            method: "POST",
            path: "/v1/jobs".into(),
            headers: vec![alice.clone(), json_ct.clone(), key("a")],
            body: body(json!({"provider": "primary", "fallbacks": ["nobody"]})),
            status: 422,
            problem: P::UnknownProvider,
        },
        Bad {
            what: "job id not a uuid",
            method: "GET",
            path: "/v1/jobs/42".into(),
            headers: vec![alice.clone()],
            body: None,
            status: 404,
            problem: P::NotFound,
        },
        Bad {
            what: "no such job",
            method: "GET",
            path: format!("/v1/jobs/{random}"),
            headers: vec![alice.clone()],
            body: None,
            status: 404,
            problem: P::NotFound,
        },
        Bad {
            what: "backup button on no job",
            method: "POST",
            path: format!("/v1/jobs/{random}/attempts"),
            headers: vec![alice.clone()],
            body: None,
            status: 404,
            problem: P::NotFound,
        },
        Bad {
            what: "backup button with bad body",
            method: "POST",
            path: format!("/v1/jobs/{random}/attempts"),
            headers: vec![alice.clone(), json_ct.clone()],
            body: body(json!({"provider": 7})),
            status: 400,
            problem: P::MalformedJson,
        },
        Bad {
            what: "owner resolving",
            method: "POST",
            path: format!("/v1/attempts/{random}/resolution"),
            headers: vec![alice.clone(), json_ct.clone()],
            body: body(json!({"outcome": "cancelled"})),
            status: 403,
            problem: P::Forbidden,
        },
        Bad {
            what: "bad resolution",
            method: "POST",
            path: format!("/v1/attempts/{random}/resolution"),
            headers: vec![("authorization", OPERATOR.into()), json_ct.clone()],
            body: body(json!({"outcome": "maybe"})),
            status: 400,
            problem: P::MalformedJson,
        },
        Bad {
            what: "resolving no attempt",
            method: "POST",
            path: format!("/v1/attempts/{random}/resolution"),
            headers: vec![("authorization", OPERATOR.into()), json_ct.clone()],
            body: body(json!({"outcome": "cancelled"})),
            status: 404,
            problem: P::NotFound,
        },
        Bad {
            what: "unknown route",
            method: "GET",
            path: "/v2/jobs".into(),
            headers: vec![alice.clone()],
            body: None,
            status: 404,
            problem: P::NotFound,
        },
    ];
    for row in rows {
        check(&app, row).await;
    }
    Ok(())
}

#[tokio::test]
async fn http_openapi_description_matches_the_router() -> TestResult {
    let spec: Value = serde_json::from_str(include_str!("../../openapi.json"))?;
    assert_eq!(spec["openapi"], "3.1.0");
    let mut documented = std::collections::BTreeSet::new();
    for (path, item) in spec["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("path item").keys() {
            documented.insert((method.to_uppercase(), path.clone()));
        }
    }
    let routed: std::collections::BTreeSet<_> = idem_core::api::routes()
        .into_iter()
        .map(|(method, path, _)| (method.to_string(), path.to_owned()))
        .collect();
    assert_eq!(
        documented, routed,
        "every route is documented and every documented route exists"
    );
    let problem_types: Vec<String> = ProblemType::ALL.iter().map(|p| p.uri()).collect();
    let documented_types: Vec<String> = serde_json::from_value(
        spec["components"]["schemas"]["Problem"]["properties"]["type"]["enum"].clone(),
    )?;
    assert_eq!(problem_types, documented_types);
    // Every documented operation is served: unauthenticated calls get 401.
    let app = start_app(
        Policy::Strict,
        vec![("primary", Behaviour::default())],
        quiet_config(),
    )
    .await;
    let sample = uuid::Uuid::from_u128(1);
    for (method, path) in &documented {
        let concrete = path.replace("{id}", &sample.to_string());
        let reply = send(app.addr, method, &concrete, &[], None).await;
        // Probes and metrics are for the platform, not for callers.
        let public = ["/healthz", "/readyz", "/metrics", "/openapi.json"].contains(&path.as_str());
        let expected = if public { 200 } else { 401 };
        assert_eq!(reply.status, expected, "{method} {path}");
        let documented_statuses = spec["paths"][path][method.to_lowercase()]["responses"]
            .as_object()
            .expect("responses");
        assert!(
            documented_statuses.contains_key(&expected.to_string()),
            "{method} {path} documents {expected}"
        );
    }
    Ok(())
}

/// Issue 22, item 21: the document the service serves is as strict as the
/// service: its providers are the only `ProviderName`s, and each primary
/// may name only the others as fallbacks; what it calls invalid the
/// server refuses, and what it calls valid the server takes.
#[tokio::test]
async fn http_the_served_document_names_the_configured_providers() -> TestResult {
    let app = start_app(
        Policy::Strict,
        vec![
            ("primary", Behaviour::default()),
            ("backup", Behaviour::default()),
        ],
        quiet_config(),
    )
    .await;
    let served = send(app.addr, "GET", "/openapi.json", &[], None).await;
    assert_eq!(served.status, 200);
    let schemas = &served.body["components"]["schemas"];
    assert_eq!(
        schemas["ProviderName"]["enum"],
        json!(["backup", "primary"])
    );
    assert_eq!(
        schemas["JobRequest"]["oneOf"],
        json!([
            {"properties": {"provider": {"const": "backup"}, "fallbacks": {"items": {"enum": ["primary"]}}}},
            {"properties": {"provider": {"const": "primary"}, "fallbacks": {"items": {"enum": ["backup"]}}}},
        ])
    );
    let create = |key: &'static str, body: Value| {
        let headers = [
            ("authorization", ALICE),
            ("idempotency-key", key),
            ("content-type", "application/json"),
        ];
        let addr = app.addr;
        async move {
            send(
                addr,
                "POST",
                "/v1/jobs",
                &headers,
                Some(body.to_string().into_bytes()),
            )
            .await
        }
    };
    let valid = create(
        "k-valid",
        json!({"provider": "primary", "fallbacks": ["backup"]}),
    )
    .await;
    assert_eq!(valid.status, 201, "{}", valid.body);
    let unknown = create("k-unknown", json!({"provider": "elsewhere"})).await;
    assert_eq!(unknown.status, 422, "{}", unknown.body);
    let itself = create(
        "k-itself",
        json!({"provider": "primary", "fallbacks": ["primary"]}),
    )
    .await;
    assert_eq!(itself.status, 422, "{}", itself.body);
    // A backup press with `provider: null` is the primary's, as documented.
    let id = valid.body["id"].as_str().unwrap_or_default().to_owned();
    let press = send(
        app.addr,
        "POST",
        &format!("/v1/jobs/{id}/attempts"),
        &[
            ("authorization", ALICE),
            ("content-type", "application/json"),
        ],
        Some(br#"{"provider":null}"#.to_vec()),
    )
    .await;
    assert_ne!(press.status, 400, "{}", press.body);
    assert_ne!(press.status, 500, "{}", press.body);
    Ok(())
}
