//! The whole service in one process: the HTTP API, the worker, the
//! reconciler and the key-retention pruner over one engine. `idem serve` runs this; the simulator
//! instead places the same parts on separate hosts.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::api::{self, AppState, Auth, ConnectionLimits, LoopHealth};
use crate::clock::UuidV7Ids;
use crate::engine::Engine;
use crate::provider::ProviderSet;
use crate::reconciler::{Reconciler, ReconcilerConfig};
use crate::retention::{Pruner, RetentionConfig};
use crate::store::bounded::STORE_CALL_TIMEOUT_MS_DEFAULT;
use crate::worker::{Worker, WorkerConfig};

/// Which loops run beside the API, and their tunables.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServiceConfig {
    pub body_limit_bytes: usize,
    /// How long a request body may take to arrive (408 past it).
    pub body_read_timeout_ms: u64,
    /// Header read timeout, idle keep-alive, shutdown drain.
    pub http: ConnectionLimits,
    pub run_worker: bool,
    pub run_reconciler: bool,
    pub worker: WorkerConfig,
    pub reconciler: ReconcilerConfig,
    /// Key retention's background pass.
    pub run_pruner: bool,
    pub retention: RetentionConfig,
    /// The bound on every store call the API and the loops make
    /// ([`crate::store::bounded::Bounded`]).
    pub store_call_timeout_ms: u64,
    /// The bound on a request's store work in all, retries included: an
    /// outage is a 503 within it.
    pub request_store_deadline_ms: u64,
}

/// The default bound on a request's store work: below the 5 s in which an
/// outage must be answered, above the PostgreSQL pool's acquire timeout.
pub const REQUEST_STORE_DEADLINE_MS_DEFAULT: u64 = 4_000;

impl Default for ServiceConfig {
    fn default() -> Self {
        Self {
            body_limit_bytes: api::BODY_LIMIT_BYTES_DEFAULT,
            body_read_timeout_ms: api::BODY_READ_TIMEOUT_MS_DEFAULT,
            http: ConnectionLimits::default(),
            run_worker: true,
            run_reconciler: true,
            worker: WorkerConfig::default(),
            reconciler: ReconcilerConfig::default(),
            run_pruner: true,
            retention: RetentionConfig::default(),
            store_call_timeout_ms: STORE_CALL_TIMEOUT_MS_DEFAULT,
            request_store_deadline_ms: REQUEST_STORE_DEADLINE_MS_DEFAULT,
        }
    }
}

/// A shutdown signal many tasks can wait on.
#[derive(Clone, Debug)]
pub struct Shutdown(watch::Receiver<bool>);

/// Pulls the shutdown signal.
#[derive(Debug)]
pub struct ShutdownTrigger(watch::Sender<bool>);

/// A connected trigger and signal.
pub fn shutdown_pair() -> (ShutdownTrigger, Shutdown) {
    let (tx, rx) = watch::channel(false);
    (ShutdownTrigger(tx), Shutdown(rx))
}

impl ShutdownTrigger {
    pub fn trigger(&self) {
        // Nobody listening means everyone has already stopped.
        let _ = self.0.send(true);
    }
}

impl Shutdown {
    /// Whether the trigger has been pulled.
    pub fn is_triggered(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once the trigger is pulled (or dropped).
    pub async fn wait(mut self) {
        let _ = self.0.wait_for(|stop| *stop).await;
    }
}

/// The assembled service.
#[derive(Clone, Debug)]
pub struct Service {
    pub state: AppState,
    pub worker: Worker,
    pub reconciler: Reconciler,
    pub pruner: Pruner,
    /// Which loops have stopped; `/readyz` reads it.
    pub loops: LoopHealth,
    config: ServiceConfig,
}

impl Service {
    pub fn new(engine: Engine, auth: Auth, providers: ProviderSet, config: ServiceConfig) -> Self {
        let worker = Worker::new(engine.clone(), providers.clone(), config.worker.clone());
        let reconciler = Reconciler::new(engine.clone(), providers, config.reconciler.clone());
        let pruner = Pruner::new(engine.clone(), config.retention.clone());
        let loops = LoopHealth::default();
        let state = AppState::new(engine, auth)
            .with_loop_health(loops.clone())
            .with_store_deadline_ms(config.request_store_deadline_ms)
            .with_body_limit_bytes(config.body_limit_bytes)
            .with_body_read_timeout_ms(config.body_read_timeout_ms)
            .with_runner(Arc::new(worker.clone()))
            // Production adapter: request ids name log lines across
            // replicas and restarts, so they are time-ordered and random.
            .with_request_ids(Arc::new(UuidV7Ids));
        Self {
            state,
            worker,
            reconciler,
            pruner,
            loops,
            config,
        }
    }

    /// Serves the API on `listener` and runs the enabled loops until
    /// `shutdown` fires; then drains requests and stops the loops.
    pub async fn run<L>(self, listener: L, shutdown: Shutdown) -> std::io::Result<()>
    where
        L: axum::serve::Listener,
        L::Addr: std::fmt::Debug,
    {
        let mut loops = self.spawn_loops(&shutdown);
        let served = api::serve_with(
            listener,
            api::router(self.state),
            shutdown.wait(),
            &self.config.http,
        )
        .await;
        while loops.join_next().await.is_some() {}
        served
    }

    /// Runs only the enabled loops (a worker or reconciler process without
    /// an API) until `shutdown` fires.
    pub async fn run_loops(self, shutdown: Shutdown) {
        let mut loops = self.spawn_loops(&shutdown);
        while loops.join_next().await.is_some() {}
    }

    fn spawn_loops(&self, shutdown: &Shutdown) -> tokio::task::JoinSet<()> {
        let mut loops = tokio::task::JoinSet::new();
        if self.config.run_worker {
            let (worker, stop) = (self.worker.clone(), shutdown.clone());
            let run = async move { worker.run(stop.wait()).await };
            loops.spawn(watched("worker", run, self.loops.clone(), shutdown.clone()));
        }
        if self.config.run_reconciler {
            let (reconciler, stop) = (self.reconciler.clone(), shutdown.clone());
            let run = async move { reconciler.run(stop.wait()).await };
            loops.spawn(watched(
                "reconciler",
                run,
                self.loops.clone(),
                shutdown.clone(),
            ));
        }
        if self.config.run_pruner {
            let (pruner, stop) = (self.pruner.clone(), shutdown.clone());
            let run = async move { pruner.run(stop.wait()).await };
            loops.spawn(watched("pruner", run, self.loops.clone(), shutdown.clone()));
        }
        loops
    }
}

/// Runs the loop `name` as a task of its own and waits for it: a loop that
/// panics, or returns before `shutdown`, is recorded in `health` (and
/// logged), so that `/readyz` stops saying ready.
async fn watched(
    name: &'static str,
    run: impl std::future::Future<Output = ()> + Send + 'static,
    health: LoopHealth,
    shutdown: Shutdown,
) {
    match tokio::spawn(run).await {
        Ok(()) if shutdown.is_triggered() => {}
        Ok(()) => health.stopped(name, "returned before shutdown".to_owned()),
        Err(e) if e.is_panic() => {
            let payload = e.into_panic();
            let why = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".to_owned());
            health.stopped(name, format!("panicked: {why}"));
        }
        Err(e) => health.stopped(name, format!("cancelled: {e}")),
    }
}

/// Resolves on Ctrl-C or SIGTERM. Production only.
pub async fn os_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("a SIGTERM handler installs");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
