//! A deliberately naive job service that speaks the black-box target
//! contract (docs/TARGET.md), for `idem real SCENARIO --target`: the bench
//! must catch it. It belongs to the bench's tests, never to a product.
//!
//! Its mistake is the classic one, check-then-insert: a create looks the
//! (owner, key) pair up and inserts a new job when it finds none, with no
//! unique constraint to stop a second insert. Two creates of one double
//! click that reach two instances within that window make two jobs, and
//! the user is billed twice (`idem real double-click --target ...`).
//! Everything else is plain: jobs live in PostgreSQL (the `database_url`
//! the config names), each job is executed once by the instance that made
//! it, in the background, with the provider's idempotency key and the
//! job's id in the request.
//!
//! Two more mistakes, each behind a flag, for the invariants judged from
//! the jobs read back at the end: `--mode made-up-result` answers a
//! succeeded job with a result no provider execution produced (invariant
//! 3, one winner), and `--mode never-finish` never runs a job, which stays
//! `running` forever (invariant 10, liveness).
//!
//! Run: `naive-target --config FILE [--mode made-up-result|never-finish]`
//! (the file idem real writes).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use serde_json::{Value, json};
use sqlx::{PgPool, Row};

/// The configuration idem real writes (docs/TARGET.md).
#[derive(Debug, Deserialize)]
struct Config {
    listen: String,
    database_url: String,
    tokens: BTreeMap<String, String>,
    providers: BTreeMap<String, String>,
    #[serde(default)]
    models: BTreeMap<String, String>,
}

/// Which mistakes the service makes besides check-then-insert.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Plain,
    /// A succeeded job's result is made up, not the provider's output.
    MadeUpResult,
    /// Jobs are never run.
    NeverFinish,
}

struct Service {
    config: Config,
    pool: PgPool,
    mode: Mode,
}

type Shared = Arc<Service>;

/// The largest provider answer read.
const ANSWER_LEN_MAX_BYTES: usize = 1024 * 1024;

const SCHEMA: &str = "create table if not exists naive_jobs (
    id uuid primary key default gen_random_uuid(),
    owner text not null,
    key text not null,
    request jsonb not null,
    state text not null,
    result jsonb
)";

fn problem(status: StatusCode, title: &str) -> Response {
    (
        status,
        [("content-type", "application/problem+json")],
        Json(json!({"type": "about:blank", "title": title, "status": status.as_u16()})),
    )
        .into_response()
}

fn owner(service: &Service, headers: &HeaderMap) -> Option<String> {
    let token = headers
        .get("authorization")?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")?;
    service.config.tokens.get(token).cloned()
}

fn job_json(row: &sqlx::postgres::PgRow) -> Value {
    let id: uuid::Uuid = row.get("id");
    let state: String = row.get("state");
    let result: Option<Value> = row.get("result");
    json!({"id": id.to_string(), "state": state, "result": result})
}

/// POST /v1/jobs: check, then insert (the mistake).
async fn create(State(service): State<Shared>, headers: HeaderMap, body: Json<Value>) -> Response {
    let Some(owner) = owner(&service, &headers) else {
        return problem(StatusCode::UNAUTHORIZED, "unknown token");
    };
    let Some(key) = headers.get("idempotency-key").and_then(|k| k.to_str().ok()) else {
        return problem(StatusCode::BAD_REQUEST, "Idempotency-Key is required");
    };
    let found = sqlx::query("select * from naive_jobs where owner = $1 and key = $2")
        .bind(&owner)
        .bind(key)
        .fetch_optional(&service.pool)
        .await;
    match found {
        Ok(Some(row)) => {
            if row.get::<Value, _>("request") != body.0 {
                return problem(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "key reused with another body",
                );
            }
            return (
                StatusCode::OK,
                [("idempotent-replayed", "true")],
                Json(job_json(&row)),
            )
                .into_response();
        }
        Ok(None) => {}
        Err(_) => return problem(StatusCode::SERVICE_UNAVAILABLE, "database unavailable"),
    }
    let inserted = sqlx::query(
        "insert into naive_jobs (owner, key, request, state) values ($1, $2, $3, 'running') returning *",
    )
    .bind(&owner)
    .bind(key)
    .bind(&body.0)
    .fetch_one(&service.pool)
    .await;
    let Ok(row) = inserted else {
        return problem(StatusCode::SERVICE_UNAVAILABLE, "database unavailable");
    };
    let id: uuid::Uuid = row.get("id");
    if service.mode != Mode::NeverFinish {
        tokio::spawn(execute(Arc::clone(&service), id, body.0));
    }
    (StatusCode::CREATED, Json(job_json(&row))).into_response()
}

/// GET /v1/jobs/{id}: the owner's job, or 404.
async fn read(
    State(service): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let Some(owner) = owner(&service, &headers) else {
        return problem(StatusCode::UNAUTHORIZED, "unknown token");
    };
    let Ok(id) = id.parse::<uuid::Uuid>() else {
        return problem(StatusCode::NOT_FOUND, "no such job");
    };
    let row = sqlx::query("select * from naive_jobs where id = $1 and owner = $2")
        .bind(id)
        .bind(&owner)
        .fetch_optional(&service.pool)
        .await;
    match row {
        Ok(Some(row)) => Json(job_json(&row)).into_response(),
        Ok(None) => problem(StatusCode::NOT_FOUND, "no such job"),
        Err(_) => problem(StatusCode::SERVICE_UNAVAILABLE, "database unavailable"),
    }
}

/// Calls the job's provider once and records what came back.
async fn execute(service: Shared, id: uuid::Uuid, request: Value) {
    let provider = request["provider"].as_str().unwrap_or_default().to_owned();
    let answer = match service.config.providers.get(&provider) {
        Some(base) => call_provider(&service, base, &provider, id, &request["params"]).await,
        None => None,
    };
    let (state, result) = match answer {
        Some(_) if service.mode == Mode::MadeUpResult => {
            ("succeeded", Some(json!({"summary": "made up"})))
        }
        Some(content) => ("succeeded", Some(content)),
        None => ("failed", None),
    };
    let _ = sqlx::query("update naive_jobs set state = $2, result = $3 where id = $1")
        .bind(id)
        .bind(state)
        .bind(result)
        .execute(&service.pool)
        .await;
}

/// One chat completion; the answer's content, if it succeeded.
async fn call_provider(
    service: &Service,
    base: &str,
    provider: &str,
    id: uuid::Uuid,
    params: &Value,
) -> Option<Value> {
    let address = base
        .strip_prefix("http://")?
        .trim_end_matches('/')
        .to_owned();
    let body = json!({
        "model": service.config.models.get(provider).cloned().unwrap_or_default(),
        "messages": [{"role": "user", "content": params.to_string()}],
        "metadata": {"job_id": id.to_string()},
    });
    let request = http::Request::post("/v1/chat/completions")
        .header("host", &address)
        .header("content-type", "application/json")
        .header("idempotency-key", format!("{id}-1"))
        .body(Full::new(bytes::Bytes::from(body.to_string())))
        .ok()?;
    let stream = tokio::net::TcpStream::connect(&address).await.ok()?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .ok()?;
    tokio::spawn(connection);
    let response = sender.send_request(request).await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    let limited = http_body_util::Limited::new(response.into_body(), ANSWER_LEN_MAX_BYTES);
    let bytes = limited.collect().await.ok()?.to_bytes();
    let answer: Value = serde_json::from_slice(&bytes).ok()?;
    let content = answer.pointer("/choices/0/message/content")?.as_str()?;
    Some(serde_json::from_str(content).unwrap_or_else(|_| Value::String(content.to_owned())))
}

/// Makes the table; two instances starting at once may race on it.
async fn migrate(pool: &PgPool) -> Result<(), sqlx::Error> {
    const TRIES_MAX: u32 = 5;
    let mut last = None;
    for _ in 0..TRIES_MAX {
        match sqlx::query(SCHEMA).execute(pool).await {
            Ok(_) => return Ok(()),
            Err(e) => last = Some(e),
        }
    }
    Err(last.expect("tried at least once"))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: naive-target --config FILE [--mode made-up-result|never-finish]";
    let (path, mode) = match args.as_slice() {
        [_, flag, path] if flag == "--config" => (path.clone(), Mode::Plain),
        [_, flag, path, mode_flag, mode] if flag == "--config" && mode_flag == "--mode" => {
            let mode = match mode.as_str() {
                "made-up-result" => Mode::MadeUpResult,
                "never-finish" => Mode::NeverFinish,
                _ => return Err(usage.into()),
            };
            (path.clone(), mode)
        }
        _ => return Err(usage.into()),
    };
    let config: Config = serde_json::from_slice(&std::fs::read(&path)?)?;
    let pool = PgPool::connect(&config.database_url).await?;
    migrate(&pool).await?;
    let listener = tokio::net::TcpListener::bind(&config.listen).await?;
    let service = Arc::new(Service { config, pool, mode });
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/v1/jobs", post(create))
        .route("/v1/jobs/{id}", get(read))
        .with_state(service);
    axum::serve(listener, app).await?;
    Ok(())
}
