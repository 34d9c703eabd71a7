//! The HTTP boundary under hostile or careless clients, on both stores:
//! NUL characters, duplicate keys and numbers past an `f64` in the body,
//! two idempotency keys, server errors that must not leak their text,
//! unknown routes and methods, oversized headers, and slow clients.
//!
//! Every case is written once, over a [`Backend`], and instantiated for the
//! in-process store (`http_hardening::on_mem::*`) and for PostgreSQL
//! (`http_hardening::on_pg::*`).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use idem_core::api::ProblemType;
use idem_core::engine::Policy;
use idem_core::provider::server::Behaviour;
use idem_core::service::ServiceConfig;
use idem_core::store::Store;
use idem_core::store::faults::{FaultPlan, FaultRule, FaultyStore, StoreFault, StoreOp};
use idem_core::store::pg::PgStore;
use idem_core::testing::pg::fresh_store;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::http::{
    ALICE, App, Backend, OPERATOR, attempts_in, body, fast_worker, quiet_config, start_app_on,
    wait_for,
};
use crate::support::{Reply, send};

type TestResult = Result<(), Box<dyn std::error::Error>>;

macro_rules! both_stores {
    ($($case:ident),* $(,)?) => {
        mod on_mem {
            $(
                #[tokio::test]
                async fn $case() -> super::TestResult {
                    super::$case(super::Backend::Mem).await
                }
            )*
        }
        mod on_pg {
            $(
                #[tokio::test]
                async fn $case() -> super::TestResult {
                    super::$case(super::Backend::Pg).await
                }
            )*
        }
    };
}

both_stores! {
    nul_characters_are_400_naming_the_pointer,
    duplicate_keys_anywhere_are_400,
    numbers_past_f64_precision_are_two_intents,
    numbers_stay_exact_from_the_request_to_the_result,
    two_idempotency_keys_are_400,
    server_errors_carry_a_request_id_and_no_internal_text,
    unknown_routes_methods_and_oversized_requests_get_problems,
    slow_clients_are_cut_off,
    an_outage_is_logged_when_it_begins_and_when_it_ends,
}

/// How long the slow-client cases let a client dawdle.
const SLOW_MS: u64 = 300;
/// How long a raw read waits for the server to act, far past `SLOW_MS`.
const READ_WAIT_MS: u64 = 10_000;

fn config() -> ServiceConfig {
    let mut config = quiet_config();
    config.body_read_timeout_ms = SLOW_MS;
    config.http.header_read_timeout_ms = SLOW_MS;
    config
}

async fn app_on(store: Arc<dyn Store>) -> App {
    start_app_on(
        store,
        Policy::Strict,
        vec![("primary", Behaviour::default())],
        config(),
    )
    .await
}

async fn app(backend: Backend) -> App {
    app_on(backend.store().await).await
}

fn create_headers(key: &str) -> Vec<(&'static str, String)> {
    vec![
        ("authorization", ALICE.to_owned()),
        ("content-type", "application/json".to_owned()),
        ("idempotency-key", key.to_owned()),
    ]
}

async fn post(app: &App, path: &str, headers: &[(&str, String)], raw: &str) -> Reply {
    let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
    send(
        app.addr,
        "POST",
        path,
        &headers,
        Some(raw.as_bytes().to_vec()),
    )
    .await
}

/// One refused body: what it shows, the path, the headers, the raw body,
/// and the pointer the problem must name.
type BodyRow<'a> = (&'a str, String, Vec<(&'a str, String)>, &'a str, &'a str);

/// The reply is the problem named, with that status.
fn check_problem(what: &str, reply: &Reply, status: u16, problem: ProblemType) {
    assert_eq!(reply.status, status, "{what}: {:?}", reply.body);
    assert_eq!(
        reply.header("content-type"),
        Some("application/problem+json"),
        "{what}"
    );
    assert_eq!(reply.body["type"], problem.uri(), "{what}");
    assert_eq!(reply.body["status"], status, "{what}");
}

async fn check_nothing_written(app: &App, what: &str) {
    let dump = app.store.dump().await.expect("dump");
    assert!(
        dump.jobs.is_empty() && dump.attempts.is_empty() && dump.events.is_empty(),
        "{what} wrote something: {dump:?}"
    );
}

async fn nul_characters_are_400_naming_the_pointer(backend: Backend) -> TestResult {
    let app = app(backend).await;
    let attempt = uuid::Uuid::from_u128(7);
    let operator = vec![
        ("authorization", OPERATOR.to_owned()),
        ("content-type", "application/json".to_owned()),
    ];
    let alice = vec![
        ("authorization", ALICE.to_owned()),
        ("content-type", "application/json".to_owned()),
    ];
    let job = uuid::Uuid::from_u128(9);
    let rows: Vec<BodyRow<'_>> = vec![
        (
            "in a string of params",
            "/v1/jobs".into(),
            create_headers("k1"),
            r#"{"provider":"primary","params":{"a":["x\u0000y"]}}"#,
            "/params/a/0",
        ),
        (
            "in a key of params",
            "/v1/jobs".into(),
            create_headers("k2"),
            r#"{"provider":"primary","params":{"k\u0000":1}}"#,
            "/params/k\u{0}",
        ),
        (
            "in the provider",
            "/v1/jobs".into(),
            create_headers("k3"),
            r#"{"provider":"prim\u0000ary"}"#,
            "/provider",
        ),
        (
            "in a resolution's result",
            format!("/v1/attempts/{attempt}/resolution"),
            operator.clone(),
            r#"{"outcome":"succeeded","result":{"text":"\u0000"}}"#,
            "/result/text",
        ),
        (
            "in a resolution's error",
            format!("/v1/attempts/{attempt}/resolution"),
            operator,
            r#"{"outcome":"failed","error":["ok","\u0000"]}"#,
            "/error/1",
        ),
        (
            "in the backup button's provider",
            format!("/v1/jobs/{job}/attempts"),
            alice,
            r#"{"provider":"\u0000"}"#,
            "/provider",
        ),
    ];
    for (what, path, headers, raw, pointer) in rows {
        let reply = post(&app, &path, &headers, raw).await;
        check_problem(what, &reply, 400, ProblemType::NulCharacter);
        assert_eq!(reply.body["pointer"], pointer, "{what}");
    }
    check_nothing_written(&app, "a NUL character").await;
    Ok(())
}

async fn duplicate_keys_anywhere_are_400(backend: Backend) -> TestResult {
    let app = app(backend).await;
    let attempt = uuid::Uuid::from_u128(7);
    let operator = vec![
        ("authorization", OPERATOR.to_owned()),
        ("content-type", "application/json".to_owned()),
    ];
    let rows: Vec<BodyRow<'_>> = vec![
        (
            "at the top level",
            "/v1/jobs".into(),
            create_headers("k1"),
            r#"{"provider":"primary","provider":"primary"}"#,
            "/provider",
        ),
        (
            "inside params, where the last one used to win",
            "/v1/jobs".into(),
            create_headers("k2"),
            r#"{"provider":"primary","params":{"amount":1,"amount":1000}}"#,
            "/params/amount",
        ),
        (
            "deep inside an array",
            "/v1/jobs".into(),
            create_headers("k3"),
            r#"{"provider":"primary","params":{"items":[{},{"a/b":1,"a/b":1}]}}"#,
            "/params/items/1/a~1b",
        ),
        (
            "in a resolution",
            format!("/v1/attempts/{attempt}/resolution"),
            operator,
            r#"{"outcome":"failed","error":{"why":1,"why":2}}"#,
            "/error/why",
        ),
    ];
    for (what, path, headers, raw, pointer) in rows {
        let reply = post(&app, &path, &headers, raw).await;
        check_problem(what, &reply, 400, ProblemType::MalformedJson);
        assert_eq!(reply.body["pointer"], pointer, "{what}");
    }
    check_nothing_written(&app, "a duplicate key").await;
    Ok(())
}

async fn numbers_past_f64_precision_are_two_intents(backend: Backend) -> TestResult {
    let app = app(backend).await;
    let headers = create_headers("big");
    let with = |n: &str| format!(r#"{{"provider":"primary","params":{{"n":{n}}}}}"#);
    let first = post(&app, "/v1/jobs", &headers, &with("18446744073709551616")).await;
    assert_eq!(first.status, 201, "{:?}", first.body);
    // One more than 2^64: the same f64, another numeric, another intent.
    let other = post(&app, "/v1/jobs", &headers, &with("18446744073709551617")).await;
    check_problem("2^64 + 1", &other, 409, ProblemType::IdempotencyKeyReused);
    assert_eq!(other.body["differing_pointers"], json!(["/params/n"]));
    // The same number spelled another way is the same intent.
    for spelling in ["1.8446744073709551616e19", "18446744073709551616.000"] {
        let again = post(&app, "/v1/jobs", &headers, &with(spelling)).await;
        assert_eq!(again.status, 200, "{spelling}: {:?}", again.body);
        assert_eq!(again.body["id"], first.body["id"]);
    }
    // A number no reader can hold is refused, by pointer.
    let huge = post(&app, "/v1/jobs", &create_headers("huge"), &with("1e400")).await;
    check_problem("1e400", &huge, 400, ProblemType::MalformedJson);
    assert_eq!(huge.body["pointer"], "/params/n");
    assert_eq!(app.store.dump().await?.jobs.len(), 1);
    Ok(())
}

/// Numbers no `f64` holds keep their digits end to end: in the job's
/// params as the API answers them, in the operator's resolution as stored
/// and answered, and in the store's own rows.
async fn numbers_stay_exact_from_the_request_to_the_result(backend: Backend) -> TestResult {
    const BIG: &str = "18446744073709551617";
    const FINE: &str = "0.10000000000000000000001";
    let hang = Behaviour {
        hang: true,
        ..Behaviour::default()
    };
    let app = start_app_on(
        backend.store().await,
        Policy::Strict,
        vec![("primary", hang)],
        fast_worker(200, false),
    )
    .await;
    let raw = format!(r#"{{"provider":"primary","params":{{"n":{BIG},"x":{FINE}}}}}"#);
    let created = post(&app, "/v1/jobs", &create_headers("exact"), &raw).await;
    assert_eq!(created.status, 201, "{}", created.text);
    let exact_params = format!(r#""params":{{"n":{BIG},"x":{FINE}}}"#);
    assert!(created.text.contains(&exact_params), "{}", created.text);
    let job = created.body["id"].as_str().ok_or("a job id")?.to_owned();
    let listed = wait_for(&app, &format!("/v1/jobs/{job}/attempts"), |b| {
        attempts_in(b)
            .first()
            .is_some_and(|a| a["state"] == "unknown")
    })
    .await;
    let attempt = attempts_in(&listed)[0]["id"]
        .as_str()
        .ok_or("an attempt id")?
        .to_owned();
    let resolution =
        format!(r#"{{"outcome":"succeeded","result":{{"total":{BIG},"share":{FINE}}}}}"#);
    let operator = vec![
        ("authorization", OPERATOR.to_owned()),
        ("content-type", "application/json".to_owned()),
    ];
    let path = format!("/v1/attempts/{attempt}/resolution");
    let resolved = post(&app, &path, &operator, &resolution).await;
    assert_eq!(resolved.status, 200, "{}", resolved.text);
    let exact_result = format!(r#""result":{{"share":{FINE},"total":{BIG}}}"#);
    assert!(resolved.text.contains(&exact_result), "{}", resolved.text);
    let read = send(
        app.addr,
        "GET",
        &format!("/v1/jobs/{job}"),
        &[("authorization", ALICE)],
        None,
    )
    .await;
    assert_eq!(read.status, 200, "{}", read.text);
    assert!(read.text.contains(&exact_params), "{}", read.text);
    assert!(read.text.contains(&exact_result), "{}", read.text);
    let stored = app.store.dump().await?.jobs.pop().ok_or("the job")?;
    let exact = |text: &str| idem_model::json::parse(text.as_bytes());
    assert_eq!(
        stored.result.ok_or("a result")?.json(),
        exact(&format!(r#"{{"total":{BIG},"share":{FINE}}}"#))?
    );
    assert_eq!(
        stored.request.member_or_null("params").json(),
        exact(&format!(r#"{{"n":{BIG},"x":{FINE}}}"#))?
    );
    Ok(())
}

async fn two_idempotency_keys_are_400(backend: Backend) -> TestResult {
    let app = app(backend).await;
    let mut headers = create_headers("one");
    headers.push(("idempotency-key", "two".to_owned()));
    let reply = post(&app, "/v1/jobs", &headers, r#"{"provider":"primary"}"#).await;
    check_problem(
        "two Idempotency-Key headers",
        &reply,
        400,
        ProblemType::InvalidIdempotencyKey,
    );
    check_nothing_written(&app, "two keys").await;
    Ok(())
}

/// Log lines written while the guard lives, as text.
#[derive(Clone, Debug, Default)]
struct CapturedLog(Arc<Mutex<Vec<u8>>>);

impl CapturedLog {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(PoisonError::into_inner)).into_owned()
    }
}

impl std::io::Write for CapturedLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Captures this thread's log (a current-thread test runtime runs the
/// server on it too).
fn capture_log() -> (CapturedLog, tracing::subscriber::DefaultGuard) {
    let log = CapturedLog::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    (log, tracing::subscriber::set_default(subscriber))
}

/// The reply is a server error whose body names a request id and none of
/// `secret`, and the log names both.
fn check_server_error(what: &str, reply: &Reply, status: u16, log: &CapturedLog, secret: &str) {
    assert_eq!(reply.status, status, "{what}: {:?}", reply.body);
    assert_eq!(
        reply.header("content-type"),
        Some("application/problem+json")
    );
    let request_id = reply.body["request_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{what}: no request_id in {:?}", reply.body));
    let text = reply.body.to_string();
    assert!(
        !text.contains(secret),
        "{what}: the body leaks {secret:?}: {text}"
    );
    let log = log.text();
    let line = log
        .lines()
        .find(|line| line.contains(request_id))
        .unwrap_or_else(|| panic!("{what}: no log line names {request_id}:\n{log}"));
    assert!(
        line.contains(secret),
        "{what}: the log line lacks {secret:?}: {line}"
    );
}

async fn server_errors_carry_a_request_id_and_no_internal_text(backend: Backend) -> TestResult {
    let (log, _guard) = capture_log();
    let (inner, pg): (Arc<dyn Store>, Option<PgStore>) = match backend {
        Backend::Mem => (backend.store().await, None),
        Backend::Pg => {
            let pg = fresh_store().await;
            (Arc::new(pg.clone()), Some(pg))
        }
    };
    let plan = FaultPlan::default();
    // Every try of the engine's bounded retry is refused.
    plan.add(FaultRule {
        op: StoreOp::CreateJob,
        fault: StoreFault::FailBeforeApply,
        first: 1,
        count: idem_core::engine::ACK_RECHECKS_MAX,
    });
    let app = app_on(Arc::new(FaultyStore::new(inner, plan))).await;
    let reply = post(
        &app,
        "/v1/jobs",
        &create_headers("k"),
        r#"{"provider":"primary"}"#,
    )
    .await;
    check_server_error("store unavailable", &reply, 503, &log, "(injected)");
    assert_eq!(reply.body["type"], ProblemType::StoreUnavailable.uri());
    if let Some(pg) = pg {
        // A real database error: its message names the relation.
        let created = post(
            &app,
            "/v1/jobs",
            &create_headers("k"),
            r#"{"provider":"primary"}"#,
        )
        .await;
        assert_eq!(created.status, 201, "{:?}", created.body);
        let id = created.body["id"].as_str().ok_or("a job id")?;
        sqlx::query("alter table job_events rename to job_events_gone")
            .execute(pg.pool())
            .await?;
        let reply = send(
            app.addr,
            "GET",
            &format!("/v1/jobs/{id}/events"),
            &[("authorization", ALICE)],
            None,
        )
        .await;
        check_server_error("database error", &reply, 500, &log, "job_events");
        assert_eq!(reply.body["type"], ProblemType::Internal.uri());
    }
    Ok(())
}

/// Issue 36, item 5: every `/readyz` 503 during an outage was logged at
/// ERROR and every `/metrics` scrape at WARN. The outage is logged once
/// when the probes first see it (WARN) and once when it ends (INFO); the
/// probes' answers carry the rest.
async fn an_outage_is_logged_when_it_begins_and_when_it_ends(backend: Backend) -> TestResult {
    const PROBES: u32 = 5;
    let (log, _guard) = capture_log();
    let plan = FaultPlan::default();
    // Every read of the outage: the readiness probes' and the scrapes'.
    plan.add(FaultRule {
        op: StoreOp::Read,
        fault: StoreFault::FailBeforeApply,
        first: 1,
        count: 2 * PROBES,
    });
    let app = app_on(Arc::new(FaultyStore::new(backend.store().await, plan))).await;
    for _ in 0..PROBES {
        let ready = send(app.addr, "GET", "/readyz", &[], None).await;
        assert_eq!(ready.status, 503, "{}", ready.body);
        assert!(ready.body["request_id"].is_string(), "{}", ready.body);
        let metrics = send(app.addr, "GET", "/metrics", &[], None).await;
        assert_eq!(metrics.status, 200);
        assert!(metrics.text.contains("idem_store_up 0"), "{}", metrics.text);
    }
    let ready = send(app.addr, "GET", "/readyz", &[], None).await;
    assert_eq!(ready.status, 200, "the outage is over: {}", ready.body);
    let text = log.text();
    let lines = |level: &str| text.lines().filter(|l| l.contains(level)).count();
    assert_eq!(lines(" ERROR "), 0, "{text}");
    assert_eq!(lines(" WARN "), 1, "{text}");
    assert!(text.contains("does not answer the probes"), "{text}");
    assert!(text.contains("answers the probes again"), "{text}");
    Ok(())
}

async fn unknown_routes_methods_and_oversized_requests_get_problems(
    backend: Backend,
) -> TestResult {
    let app = app(backend).await;
    let job = uuid::Uuid::from_u128(3);
    let unknown = send(
        app.addr,
        "GET",
        "/v1/nothing",
        &[("authorization", ALICE)],
        None,
    )
    .await;
    check_problem("unknown route", &unknown, 404, ProblemType::NotFound);
    for (method, path, allowed) in [
        ("DELETE", "/v1/jobs".to_owned(), "POST"),
        ("PUT", format!("/v1/jobs/{job}"), "GET"),
        ("GET", format!("/v1/attempts/{job}/resolution"), "POST"),
    ] {
        let reply = send(app.addr, method, &path, &[("authorization", ALICE)], None).await;
        check_problem(
            &format!("{method} {path}"),
            &reply,
            405,
            ProblemType::MethodNotAllowed,
        );
        let allow = reply.header("allow").unwrap_or_default();
        assert!(allow.contains(allowed), "{method} {path}: Allow: {allow:?}");
    }
    let big = body(json!({"provider": "primary", "params": {"blob": "x".repeat(70 * 1024)}}));
    let headers: Vec<(&str, String)> = create_headers("big");
    let borrowed: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
    let reply = send(app.addr, "POST", "/v1/jobs", &borrowed, big).await;
    check_problem(
        "body over the limit",
        &reply,
        413,
        ProblemType::PayloadTooLarge,
    );
    let names: Vec<String> = (0..idem_core::api::HEADERS_MAX + 10)
        .map(|i| format!("x-filler-{i}"))
        .collect();
    let many: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "1")).collect();
    let reply = send(app.addr, "GET", "/healthz", &many, None).await;
    check_problem(
        "too many headers",
        &reply,
        431,
        ProblemType::HeaderFieldsTooLarge,
    );
    let long = "v".repeat(idem_core::api::HEADER_BYTES_MAX + 1);
    let reply = send(
        app.addr,
        "GET",
        "/healthz",
        &[("x-long", long.as_str())],
        None,
    )
    .await;
    check_problem(
        "headers too long",
        &reply,
        431,
        ProblemType::HeaderFieldsTooLarge,
    );
    check_nothing_written(&app, "a refused request").await;
    Ok(())
}

/// Reads what the server sends until it closes the connection, waiting at
/// most [`READ_WAIT_MS`]; `None` if it never closes.
async fn read_until_closed(stream: &mut tokio::net::TcpStream) -> Option<Vec<u8>> {
    let mut received = Vec::new();
    let read = stream.read_to_end(&mut received);
    match idem_core::timer::timeout(Duration::from_millis(READ_WAIT_MS), read).await {
        Ok(Ok(_)) => Some(received),
        // A reset is a close too.
        Ok(Err(_)) => Some(received),
        Err(_) => None,
    }
}

async fn slow_clients_are_cut_off(backend: Backend) -> TestResult {
    let app = app(backend).await;
    // Headers that never finish: the connection is closed, unanswered.
    let mut stream = tokio::net::TcpStream::connect(app.addr).await?;
    stream
        .write_all(b"POST /v1/jobs HTTP/1.1\r\nhost: idem\r\n")
        .await?;
    let received = read_until_closed(&mut stream)
        .await
        .ok_or("a connection that never sent its headers stayed open")?;
    assert!(
        !String::from_utf8_lossy(&received).contains("201"),
        "no job was created"
    );
    // An idle keep-alive connection is closed after its request.
    let mut stream = tokio::net::TcpStream::connect(app.addr).await?;
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: idem\r\n\r\n")
        .await?;
    let received = read_until_closed(&mut stream)
        .await
        .ok_or("an idle keep-alive connection stayed open")?;
    assert!(String::from_utf8_lossy(&received).starts_with("HTTP/1.1 200"));
    // A body that does not arrive: 408 with a problem.
    let mut stream = tokio::net::TcpStream::connect(app.addr).await?;
    let head = format!(
        "POST /v1/jobs HTTP/1.1\r\nhost: idem\r\nauthorization: {ALICE}\r\n\
         content-type: application/json\r\nidempotency-key: slow\r\n\
         content-length: 100\r\n\r\n{{\"provider\""
    );
    stream.write_all(head.as_bytes()).await?;
    let received = read_until_closed(&mut stream)
        .await
        .ok_or("a body that never came held the connection")?;
    let text = String::from_utf8_lossy(&received);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("application/problem+json"), "{text}");
    let problem: Value = serde_json::from_str(text.split("\r\n\r\n").nth(1).unwrap_or(""))?;
    assert_eq!(problem["type"], ProblemType::RequestTimeout.uri());
    check_nothing_written(&app, "a slow client").await;
    Ok(())
}
