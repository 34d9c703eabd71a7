//! A deliberately naive job service that speaks the black-box target
//! contract (docs/TARGET.md), for `idem real SCENARIO --target`: the bench
//! must catch it. It belongs to the bench's tests, never to a product.
//!
//! It makes one mistake at a time, chosen by `--mode` (check-then-insert
//! when none is given), each one an engineer could make and each breaking
//! one invariant the bench judges from outside. Everything a mode does not
//! name is plain: jobs live in PostgreSQL (the `database_url` the config
//! names) under a unique (owner, key) index, a create is one `INSERT ...
//! ON CONFLICT DO NOTHING` and a read of the row that holds the key, a
//! reused key with another body is refused with 409, each job is run once
//! in the background by the instance that made it (the provider's
//! idempotency key and the job's id in the request), and its first result
//! is written once.
//!
//! The modes, what breaks, and the scenario that shows it (the bench's
//! tests, `scenarios/tests/it/real.rs`):
//!
//! | mode | the mistake | breaks |
//! |---|---|---|
//! | `check-then-insert` | looks the (owner, key) up, inserts when it finds none, no unique index | 1, `double-click` |
//! | `memory-keys` | keeps keys in the instance's memory, no unique index | 1, `double-click` |
//! | `no-fingerprint` | a reused key returns its job whatever the body | 2, `mismatched-payload` |
//! | `global-key` | a unique index on the key alone, looked up whoever's it is | 2, `cross-owner-same-key` |
//! | `made-up-result` | a succeeded job's result is made up | 3, `double-click` |
//! | `last-writer-wins` | hedges a silent call on the fallback, and each answer writes the result | 3, `out-of-order-completion` |
//! | `merged-result` | hedges the same way, and writes both answers merged | 6, `out-of-order-completion` |
//! | `any-owner-reads` | `GET /v1/jobs/{id}` answers any owner's job | 8, `cross-owner-same-key` |
//! | `fresh-key-retry` | a call silent for a second is sent again under a new key | 9, `timeout-unknown` |
//! | `blind-failover` | a failed call fails over to the job's fallbacks in turn, certified or not (the config's `certified` unread) | 7, `uncertified-fallback` |
//! | `never-finish` | jobs are never run | 10, a one-click scenario |
//!
//! Run: `naive-target --config FILE [--mode MODE]` (the file idem real
//! writes).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

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
use tokio::sync::Mutex;

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

/// The one mistake the service makes (see the module's table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    CheckThenInsert,
    MemoryKeys,
    NoFingerprint,
    GlobalKey,
    MadeUpResult,
    LastWriterWins,
    MergedResult,
    AnyOwnerReads,
    FreshKeyRetry,
    BlindFailover,
    NeverFinish,
}

impl Mode {
    const ALL: &[(&str, Mode)] = &[
        ("check-then-insert", Mode::CheckThenInsert),
        ("memory-keys", Mode::MemoryKeys),
        ("no-fingerprint", Mode::NoFingerprint),
        ("global-key", Mode::GlobalKey),
        ("made-up-result", Mode::MadeUpResult),
        ("last-writer-wins", Mode::LastWriterWins),
        ("merged-result", Mode::MergedResult),
        ("any-owner-reads", Mode::AnyOwnerReads),
        ("fresh-key-retry", Mode::FreshKeyRetry),
        ("blind-failover", Mode::BlindFailover),
        ("never-finish", Mode::NeverFinish),
    ];

    fn parse(name: &str) -> Option<Mode> {
        Self::ALL.iter().find(|(n, _)| *n == name).map(|(_, m)| *m)
    }

    /// The unique index the mode's schema has, if any.
    fn unique_index(self) -> Option<&'static str> {
        match self {
            Mode::CheckThenInsert | Mode::MemoryKeys => None,
            Mode::GlobalKey => {
                Some("create unique index if not exists naive_jobs_key on naive_jobs (key)")
            }
            _ => Some(
                "create unique index if not exists naive_jobs_owner_key on naive_jobs (owner, key)",
            ),
        }
    }

    /// Whether a job is hedged: its call, silent for [`HEDGE_AFTER_MS`],
    /// is sent to the job's first fallback as well.
    fn hedges(self) -> bool {
        matches!(self, Mode::LastWriterWins | Mode::MergedResult)
    }
}

struct Service {
    config: Config,
    pool: PgPool,
    mode: Mode,
    /// `memory-keys`: each (owner, key) this instance has seen, with its
    /// job and body. Another instance has its own.
    keys: Mutex<BTreeMap<(String, String), (uuid::Uuid, Value)>>,
}

type Shared = Arc<Service>;

/// The largest provider answer read.
const ANSWER_LEN_MAX_BYTES: usize = 1024 * 1024;
/// How long a call may be silent before a hedging mode calls the fallback.
const HEDGE_AFTER_MS: u64 = 500;
/// How long a call may be silent before `fresh-key-retry` sends it again.
const RETRY_AFTER_MS: u64 = 1_000;

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

fn unavailable() -> Response {
    problem(StatusCode::SERVICE_UNAVAILABLE, "database unavailable")
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

/// The answer to a create that found `row` holding its key: the job again
/// for the same body (or any body, for `no-fingerprint`), else 409.
fn found(service: &Service, row: &sqlx::postgres::PgRow, body: &Value) -> Response {
    if service.mode != Mode::NoFingerprint && row.get::<Value, _>("request") != *body {
        return problem(StatusCode::CONFLICT, "key reused with another body");
    }
    (
        StatusCode::OK,
        [("idempotent-replayed", "true")],
        Json(job_json(row)),
    )
        .into_response()
}

/// A new job's answer, its run started in the background.
fn created(service: &Shared, row: &sqlx::postgres::PgRow, body: Value) -> Response {
    let id: uuid::Uuid = row.get("id");
    if service.mode != Mode::NeverFinish {
        tokio::spawn(execute(Arc::clone(service), id, body));
    }
    (StatusCode::CREATED, Json(job_json(row))).into_response()
}

/// POST /v1/jobs.
async fn create(State(service): State<Shared>, headers: HeaderMap, body: Json<Value>) -> Response {
    let Some(owner) = owner(&service, &headers) else {
        return problem(StatusCode::UNAUTHORIZED, "unknown token");
    };
    let Some(key) = headers.get("idempotency-key").and_then(|k| k.to_str().ok()) else {
        return problem(StatusCode::BAD_REQUEST, "Idempotency-Key is required");
    };
    match service.mode {
        Mode::CheckThenInsert => check_then_insert(&service, &owner, key, body.0).await,
        Mode::MemoryKeys => memory_keys(&service, &owner, key, body.0).await,
        _ => insert_or_found(&service, &owner, key, body.0).await,
    }
}

/// The mistake of `check-then-insert`: look the key up, then insert, with
/// no unique index to stop a second insert.
async fn check_then_insert(service: &Shared, owner: &str, key: &str, body: Value) -> Response {
    let found_row = sqlx::query("select * from naive_jobs where owner = $1 and key = $2")
        .bind(owner)
        .bind(key)
        .fetch_optional(&service.pool)
        .await;
    match found_row {
        Ok(Some(row)) => found(service, &row, &body),
        Ok(None) => match insert(service, owner, key, &body).await {
            Ok(row) => created(service, &row, body),
            Err(_) => unavailable(),
        },
        Err(_) => unavailable(),
    }
}

/// The mistake of `memory-keys`: the instance's own memory decides
/// whether a key is new, and another instance's memory is not this one.
async fn memory_keys(service: &Shared, owner: &str, key: &str, body: Value) -> Response {
    let mut keys = service.keys.lock().await;
    if let Some((id, known)) = keys.get(&(owner.to_owned(), key.to_owned())) {
        if *known != body {
            return problem(StatusCode::CONFLICT, "key reused with another body");
        }
        let row = sqlx::query("select * from naive_jobs where id = $1")
            .bind(id)
            .fetch_one(&service.pool)
            .await;
        return match row {
            Ok(row) => found(service, &row, &body),
            Err(_) => unavailable(),
        };
    }
    let Ok(row) = insert(service, owner, key, &body).await else {
        return unavailable();
    };
    keys.insert(
        (owner.to_owned(), key.to_owned()),
        (row.get("id"), body.clone()),
    );
    created(service, &row, body)
}

/// One statement under the mode's unique index: the new job's row, or the
/// row that holds the key (the owner's, or for `global-key` anyone's).
async fn insert_or_found(service: &Shared, owner: &str, key: &str, body: Value) -> Response {
    let inserted = sqlx::query(
        "insert into naive_jobs (owner, key, request, state) values ($1, $2, $3, 'running')
         on conflict do nothing returning *",
    )
    .bind(owner)
    .bind(key)
    .bind(&body)
    .fetch_optional(&service.pool)
    .await;
    match inserted {
        Ok(Some(row)) => return created(service, &row, body),
        Ok(None) => {}
        Err(_) => return unavailable(),
    }
    let holder = if service.mode == Mode::GlobalKey {
        sqlx::query("select * from naive_jobs where key = $1").bind(key)
    } else {
        sqlx::query("select * from naive_jobs where owner = $1 and key = $2")
            .bind(owner)
            .bind(key)
    };
    match holder.fetch_optional(&service.pool).await {
        Ok(Some(row)) => found(service, &row, &body),
        _ => unavailable(),
    }
}

async fn insert(
    service: &Service,
    owner: &str,
    key: &str,
    body: &Value,
) -> Result<sqlx::postgres::PgRow, sqlx::Error> {
    sqlx::query(
        "insert into naive_jobs (owner, key, request, state) values ($1, $2, $3, 'running') returning *",
    )
    .bind(owner)
    .bind(key)
    .bind(body)
    .fetch_one(&service.pool)
    .await
}

/// GET /v1/jobs/{id}: the owner's job (any owner's, for
/// `any-owner-reads`), or 404.
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
    let row = sqlx::query("select * from naive_jobs where id = $1 and (owner = $2 or $3)")
        .bind(id)
        .bind(&owner)
        .bind(service.mode == Mode::AnyOwnerReads)
        .fetch_optional(&service.pool)
        .await;
    match row {
        Ok(Some(row)) => Json(job_json(&row)).into_response(),
        Ok(None) => problem(StatusCode::NOT_FOUND, "no such job"),
        Err(_) => unavailable(),
    }
}

/// Runs the job: one call to its provider, and the answer written once;
/// or the mode's way.
async fn execute(service: Shared, id: uuid::Uuid, request: Value) {
    let provider = request["provider"].as_str().unwrap_or_default().to_owned();
    let params = request["params"].clone();
    if service.mode.hedges() {
        let fallback = request["fallbacks"][0].as_str().map(str::to_owned);
        return hedge(&service, id, &provider, fallback, &params).await;
    }
    if service.mode == Mode::BlindFailover {
        let answer = blind_failover(&service, id, &provider, &request).await;
        return write_result(&service, id, answer, true).await;
    }
    let first = call_provider(&service, &provider, id, 1, &params);
    let answer = if service.mode == Mode::FreshKeyRetry {
        first_of_two(first, async {
            idem_core::timer::sleep(Duration::from_millis(RETRY_AFTER_MS)).await;
            call_provider(&service, &provider, id, 2, &params).await
        })
        .await
    } else {
        first.await
    };
    let answer = match answer {
        Some(_) if service.mode == Mode::MadeUpResult => Some(json!({"summary": "made up"})),
        other => other,
    };
    write_result(&service, id, answer, true).await;
}

/// The mistake of `blind-failover`: the job's provider, then each of its
/// fallbacks in turn until one answers, whether or not its certification
/// passed (the config's `certified` is never read).
async fn blind_failover(
    service: &Shared,
    id: uuid::Uuid,
    provider: &str,
    request: &Value,
) -> Option<Value> {
    let params = &request["params"];
    let fallbacks = request["fallbacks"].as_array().into_iter().flatten();
    let providers = std::iter::once(provider).chain(fallbacks.filter_map(Value::as_str));
    for (n, provider) in (1..).zip(providers) {
        if let Some(answer) = call_provider(service, provider, id, n, params).await {
            return Some(answer);
        }
    }
    None
}

/// The first of two calls to answer with success (the second starts at
/// its own time): `fresh-key-retry`'s call and its resend.
async fn first_of_two(
    first: impl std::future::Future<Output = Option<Value>>,
    second: impl std::future::Future<Output = Option<Value>>,
) -> Option<Value> {
    let mut first = std::pin::pin!(first);
    let mut second = std::pin::pin!(second);
    let (answer, first_done) = tokio::select! {
        answer = &mut first => (answer, true),
        answer = &mut second => (answer, false),
    };
    match answer {
        Some(answer) => Some(answer),
        None if first_done => second.await,
        None => first.await,
    }
}

/// The hedging modes: the call, and after [`HEDGE_AFTER_MS`] of silence
/// the same on the fallback. `last-writer-wins` writes each answer as it
/// comes; `merged-result` waits for both and writes them merged.
async fn hedge(
    service: &Shared,
    id: uuid::Uuid,
    provider: &str,
    fallback: Option<String>,
    params: &Value,
) {
    let first = call_provider(service, provider, id, 1, params);
    let second = async {
        idem_core::timer::sleep(Duration::from_millis(HEDGE_AFTER_MS)).await;
        match &fallback {
            Some(fallback) => call_provider(service, fallback, id, 2, params).await,
            None => None,
        }
    };
    if service.mode == Mode::LastWriterWins {
        let write = |answer: Option<Value>| async move {
            if answer.is_some() {
                write_result(service, id, answer, false).await;
            }
        };
        tokio::join!(async { write(first.await).await }, async {
            write(second.await).await;
        });
        let _ = sqlx::query(
            "update naive_jobs set state = 'failed' where id = $1 and state = 'running'",
        )
        .bind(id)
        .execute(&service.pool)
        .await;
        return;
    }
    let merged = match tokio::join!(first, second) {
        (Some(a), Some(b)) => Some(json!({"answers": [a, b]})),
        (Some(one), None) | (None, Some(one)) => Some(one),
        (None, None) => None,
    };
    write_result(service, id, merged, true).await;
}

/// Writes the job's outcome: succeeded with `answer`'s content, or failed.
/// `once`: only while the job is still running (the first answer stays).
async fn write_result(service: &Service, id: uuid::Uuid, answer: Option<Value>, once: bool) {
    let state = if answer.is_some() {
        "succeeded"
    } else {
        "failed"
    };
    let _ = sqlx::query(
        "update naive_jobs set state = $2, result = $3 where id = $1 and (state = 'running' or not $4)",
    )
    .bind(id)
    .bind(state)
    .bind(answer)
    .bind(once)
    .execute(&service.pool)
    .await;
}

/// One chat completion of the job's `n`th call (its idempotency key is
/// `{id}-{n}`): the answer's content, if it succeeded.
async fn call_provider(
    service: &Service,
    provider: &str,
    id: uuid::Uuid,
    n: u32,
    params: &Value,
) -> Option<Value> {
    let base = service.config.providers.get(provider)?;
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
        .header("idempotency-key", format!("{id}-{n}"))
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

/// Makes the table and the mode's unique index; two instances starting at
/// once may race on them.
async fn migrate(pool: &PgPool, mode: Mode) -> Result<(), sqlx::Error> {
    const TRIES_MAX: u32 = 5;
    let mut last = None;
    for _ in 0..TRIES_MAX {
        let mut made = sqlx::query(SCHEMA).execute(pool).await.map(|_| ());
        if let (Ok(()), Some(index)) = (&made, mode.unique_index()) {
            made = sqlx::query(index).execute(pool).await.map(|_| ());
        }
        match made {
            Ok(()) => return Ok(()),
            Err(e) => last = Some(e),
        }
    }
    Err(last.expect("tried at least once"))
}

/// `--config FILE [--mode MODE]`.
fn parse_args(args: &[String]) -> Result<(String, Mode), String> {
    let modes: Vec<&str> = Mode::ALL.iter().map(|(name, _)| *name).collect();
    let usage = format!(
        "usage: naive-target --config FILE [--mode {}]",
        modes.join("|")
    );
    match args {
        [_, flag, path] if flag == "--config" => Ok((path.clone(), Mode::CheckThenInsert)),
        [_, flag, path, mode_flag, mode] if flag == "--config" && mode_flag == "--mode" => {
            let mode =
                Mode::parse(mode).ok_or_else(|| format!("unknown mode {mode:?}; {usage}"))?;
            Ok((path.clone(), mode))
        }
        _ => Err(usage),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (path, mode) = parse_args(&args)?;
    let config: Config = serde_json::from_slice(&std::fs::read(&path)?)?;
    let pool = PgPool::connect(&config.database_url).await?;
    migrate(&pool, mode).await?;
    let listener = tokio::net::TcpListener::bind(&config.listen).await?;
    let service = Arc::new(Service {
        config,
        pool,
        mode,
        keys: Mutex::new(BTreeMap::new()),
    });
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/v1/jobs", post(create))
        .route("/v1/jobs/{id}", get(read))
        .with_state(service);
    axum::serve(listener, app).await?;
    Ok(())
}
