//! Operations over HTTP, on both stores: the list endpoints, `/metrics`,
//! `/readyz`, and key retention end to end.

use std::time::Duration;

use idem_core::api::ProblemType;
use idem_core::engine::Policy;
use idem_core::provider::server::Behaviour;
use idem_core::retention::{Pruner, RetentionConfig};
use idem_core::service::ServiceConfig;
use serde_json::{Value, json};

use crate::http::{
    ALICE, App, Backend, OPERATOR, body, create, fast_worker, quiet_config, start_app_on, wait_for,
};
use crate::support::send;

type TestResult = Result<(), Box<dyn std::error::Error>>;

macro_rules! both_stores {
    ($($case:ident),* $(,)?) => {
        mod on_mem {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() -> super::TestResult {
                    super::$case(super::Backend::Mem).await
                }
            )*
        }
        mod on_pg {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() -> super::TestResult {
                    super::$case(super::Backend::Pg).await
                }
            )*
        }
    };
}

both_stores! {
    list_jobs_pages_the_callers_jobs_newest_first,
    list_attempts_shows_what_is_blocked_to_the_operator,
    metrics_and_readiness,
    retention_prunes_finished_jobs_and_their_keys_make_new_jobs,
}

async fn app(backend: Backend, behaviour: Behaviour, config: ServiceConfig) -> App {
    start_app_on(
        backend.store().await,
        Policy::Strict,
        vec![("primary", behaviour), ("fallback", Behaviour::default())],
        config,
    )
    .await
}

async fn get(app: &App, path: &str, token: &str) -> crate::support::Reply {
    send(app.addr, "GET", path, &[("authorization", token)], None).await
}

fn ids(body: &Value, list: &str) -> Vec<String> {
    body[list]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|i| i["id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

async fn list_jobs_pages_the_callers_jobs_newest_first(backend: Backend) -> TestResult {
    let app = app(backend, Behaviour::default(), quiet_config()).await;
    let mut created = Vec::new();
    for i in 0..5 {
        let reply = create(&app, &format!("k{i}"), json!({"i": i})).await;
        created.push(reply.body["id"].as_str().ok_or("an id")?.to_owned());
        // Distinct creation times, so that newest-first is this order reversed.
        idem_core::timer::sleep(Duration::from_millis(2)).await;
    }
    created.reverse();
    let mut seen = Vec::new();
    let mut path = "/v1/jobs?limit=2".to_owned();
    for _ in 0..5 {
        let page = get(&app, &path, ALICE).await;
        assert_eq!(page.status, 200, "{:?}", page.body);
        seen.extend(ids(&page.body, "jobs"));
        match page.body["next_cursor"].as_str() {
            Some(cursor) => path = format!("/v1/jobs?limit=2&cursor={cursor}"),
            None => break,
        }
    }
    assert_eq!(seen, created, "every job once, newest first");
    let bob = get(&app, "/v1/jobs", "Bearer token-bob").await;
    assert_eq!(bob.status, 200);
    assert_eq!(bob.body["jobs"], json!([]), "bob sees none of alice's jobs");
    for bad in [
        "/v1/jobs?limit=0",
        "/v1/jobs?limit=101",
        "/v1/jobs?cursor=zz",
        "/v1/jobs?x=1",
    ] {
        let reply = get(&app, bad, ALICE).await;
        assert_eq!(reply.status, 400, "{bad}");
        assert_eq!(reply.body["type"], ProblemType::InvalidQuery.uri(), "{bad}");
    }
    assert_eq!(get(&app, "/v1/jobs", OPERATOR).await.status, 403);
    assert_eq!(get(&app, "/v1/jobs", "Bearer nobody").await.status, 401);
    Ok(())
}

async fn list_attempts_shows_what_is_blocked_to_the_operator(backend: Backend) -> TestResult {
    let hang = Behaviour {
        hang: true,
        ..Behaviour::default()
    };
    let app = app(backend, hang, fast_worker(200, false)).await;
    let job = create(&app, "stuck", json!({"text": "slow"})).await;
    let job_id = job.body["id"].as_str().ok_or("an id")?.to_owned();
    let listed = wait_for(&app, &format!("/v1/jobs/{job_id}/attempts"), |b| {
        b["attempts"][0]["state"] == "unknown"
    })
    .await;
    let blocked = get(&app, "/v1/attempts?state=unknown", OPERATOR).await;
    assert_eq!(blocked.status, 200, "{:?}", blocked.body);
    assert_eq!(ids(&blocked.body, "attempts"), ids(&listed, "attempts"));
    let item = &blocked.body["attempts"][0];
    assert_eq!(item["job_id"], job_id.as_str());
    assert!(item["started_at"].is_string(), "since when");
    assert!(item["age_ms"].as_i64().is_some_and(|ms| ms >= 0));
    assert_eq!(blocked.body["next_cursor"], Value::Null);
    let running = get(&app, "/v1/attempts?state=running", OPERATOR).await;
    assert_eq!(running.body["attempts"], json!([]));
    assert_eq!(
        get(&app, "/v1/attempts?state=unknown", ALICE).await.status,
        403
    );
    for bad in [
        "/v1/attempts",
        "/v1/attempts?state=failed",
        "/v1/attempts?state=unknown&limit=x",
    ] {
        let reply = get(&app, bad, OPERATOR).await;
        assert_eq!(reply.status, 400, "{bad}");
        assert_eq!(reply.body["type"], ProblemType::InvalidQuery.uri(), "{bad}");
    }
    Ok(())
}

async fn metrics_and_readiness(backend: Backend) -> TestResult {
    let app = app(backend, Behaviour::default(), quiet_config()).await;
    let ready = get(&app, "/readyz", "").await;
    assert_eq!(
        (ready.status, ready.body["status"].clone()),
        (200, json!("ready"))
    );
    create(&app, "k", json!({"text": "a"})).await;
    create(&app, "k", json!({"text": "a"})).await;
    assert_eq!(create(&app, "k", json!({"text": "b"})).await.status, 409);
    let reply = send(app.addr, "GET", "/metrics", &[], None).await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    // The body is text, not JSON: fetch it raw.
    let text = raw_get(app.addr, "/metrics").await?;
    for line in [
        "idem_jobs_created_total 1",
        "idem_jobs_replayed_total 1",
        "idem_jobs_refused_total{reason=\"key_reused\"} 1",
        "idem_attempts{state=\"unknown\"} 0",
        "idem_unknown_attempt_oldest_age_seconds 0",
        "idem_store_up 1",
        "# TYPE idem_cas_losses_total counter",
        "idem_jobs_pruned_total 0",
    ] {
        assert!(text.contains(line), "{line:?} in\n{text}");
    }
    Ok(())
}

async fn raw_get(
    addr: std::net::SocketAddr,
    path: &str,
) -> Result<String, Box<dyn std::error::Error>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nhost: idem\r\nconnection: close\r\n\r\n").as_bytes(),
        )
        .await?;
    let mut received = Vec::new();
    stream.read_to_end(&mut received).await?;
    Ok(String::from_utf8_lossy(&received).into_owned())
}

async fn retention_prunes_finished_jobs_and_their_keys_make_new_jobs(
    backend: Backend,
) -> TestResult {
    let mut config = fast_worker(5_000, false);
    config.run_pruner = false;
    let app = app(backend, Behaviour::default(), config).await;
    let done = create(&app, "done", json!({"text": "a"})).await;
    let done_id = done.body["id"].as_str().ok_or("an id")?.to_owned();
    wait_for(&app, &format!("/v1/jobs/{done_id}"), |b| {
        b["state"] == "succeeded"
    })
    .await;
    // A pruner with no retention at all: everything finished is past it.
    let pruner = Pruner::new(
        app.engine.clone(),
        RetentionConfig {
            retention_ms: 0,
            prune_batch_max: 1,
            ..RetentionConfig::default()
        },
    );
    // A job still pending is never pruned, however old. Its provider is one
    // only this second service knows, so the first service's worker, which
    // polls the same store, cannot run it to an end (it would otherwise
    // race the pruner for it).
    let hanging = start_app_on(
        app.store.clone(),
        Policy::Strict,
        vec![(
            "stuck",
            Behaviour {
                hang: true,
                ..Behaviour::default()
            },
        )],
        quiet_config(),
    )
    .await;
    let pending = send(
        hanging.addr,
        "POST",
        "/v1/jobs",
        &[
            ("authorization", ALICE),
            ("content-type", "application/json"),
            ("idempotency-key", "pending"),
        ],
        body(json!({"provider": "stuck", "params": {"text": "b"}})),
    )
    .await;
    assert_eq!(pending.status, 201, "{:?}", pending.body);
    idem_core::timer::sleep(Duration::from_millis(5)).await;
    let report = pruner.pass().await;
    assert_eq!((report.pruned, report.errors.len()), (1, 0), "{report:?}");
    assert_eq!(
        get(&app, &format!("/v1/jobs/{done_id}"), ALICE)
            .await
            .status,
        404
    );
    let pending_id = pending.body["id"].as_str().ok_or("an id")?;
    assert_eq!(
        get(&app, &format!("/v1/jobs/{pending_id}"), ALICE)
            .await
            .status,
        200
    );
    // The pruned job's key is free: the same request makes a new job.
    let again = create(&app, "done", json!({"text": "a"})).await;
    assert_eq!(again.status, 201, "{:?}", again.body);
    assert_ne!(again.body["id"], done.body["id"]);
    let text = raw_get(app.addr, "/metrics").await?;
    assert!(text.contains("idem_jobs_pruned_total 1"), "{text}");
    Ok(())
}
