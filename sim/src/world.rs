//! The world builder: from a scenario and a seed, a turmoil simulation
//! whose hosts run the real engine code.
//!
//! Hosts, in registration (and therefore stepping) order: the store, the
//! providers, the API replicas, the workers, the reconciler, the clients.
//! Everything a host must keep across a crash lives outside its closure:
//! the store's committed state, the providers' ledgers, and each host's id
//! source (a restarted host must not mint the ids it minted before).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, UNIX_EPOCH};

use crate::certify::{certifications, certified_models, file_certifications};
use crate::client::{ClientContext, KnownJobs, RunTime, Wire, run_client};
use crate::decisions::{Decisions, Subject};
use crate::net::{HostClock, SERVICE_PORT, SimClock, SimConnector, SimListener, child_seed};
use crate::rpc::{RemoteStore, StoreObserver, serve_store};
use crate::scenario::{ProviderProfile, Scenario, host};
use crate::scheduler::Scheduler;
use crate::scheduler::reuse::ReuseGate;
use crate::trace::{Recorder, SimRecorder, TraceBody};
use idem_contract::spec::Contract;
use idem_contract::tokenizer::SpecialTokens;
use idem_core::api::{self, AppState, Auth};
use idem_core::clock::{Clock, FIXED_EPOCH_US, SeededIds};
use idem_core::design::Design;
use idem_core::engine::{Engine, MODEL_PROBE_TIMEOUT_MS_DEFAULT, ModelProbes};
use idem_core::provider::openai::{OpenAiClient, OpenAiConfig};
use idem_core::provider::server::{ContractMode, Execution, ExecutionObserver, ProviderServer};
use idem_core::provider::{Provider, ProviderSet};
use idem_core::reconciler::Reconciler;
use idem_core::store::Store;
use idem_core::store::faults::FaultPlan;
use idem_core::store::mem::{Constraints, MemStore};
use idem_core::worker::Worker;
use idem_model::contract::{ProviderSpec, Providers};
use idem_model::model::OwnerId;
use idem_oracle::WorldFacts;

/// The operator's bearer token in every world.
pub const OPERATOR_TOKEN: &str = "token-operator";

/// A built world, ready to step.
pub struct World {
    pub sim: turmoil::Sim<'static>,
    pub store: Arc<MemStore>,
    pub store_plan: FaultPlan,
    pub recorder: SimRecorder,
    pub providers: BTreeMap<String, ProviderServer>,
    /// Each provider's behaviour as the scenario set it, to restore after a fault.
    pub provider_profiles: BTreeMap<String, idem_core::provider::server::Behaviour>,
    /// The realtime clock of every host that reads one (API replicas,
    /// workers, the reconciler), by host name: clock faults change them.
    pub clocks: BTreeMap<String, HostClock>,
    pub facts: WorldFacts,
    /// What happens next and when: the timers, the links' messages, the
    /// store connections' reuse.
    pub scheduler: Scheduler,
    /// Every host, in registration (and therefore stepping) order.
    pub hosts: Vec<String>,
    /// Where the run's random draws are decided (off unless asked).
    pub decisions: Decisions,
}

impl World {
    /// Registers host `name` running `software` (again after a restart).
    fn host<F, Fut>(&mut self, name: &str, software: F)
    where
        F: Fn() -> Fut + 'static,
        Fut: Future<Output = turmoil::Result> + 'static,
    {
        self.hosts.push(name.to_owned());
        self.sim.host(name, software);
    }

    /// Registers client `name` running `future` once.
    fn client(&mut self, name: &str, future: impl Future<Output = turmoil::Result> + 'static) {
        self.hosts.push(name.to_owned());
        self.sim.client(name, future);
    }

    /// The clock of host `name`, made on first use.
    fn clock(&mut self, name: &str) -> HostClock {
        self.clocks.entry(name.to_owned()).or_default().clone()
    }
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World")
            .field("facts", &self.facts)
            .finish_non_exhaustive()
    }
}

/// Every host of `scenario`'s world, in registration (and therefore
/// stepping, and a report's lane) order: the store, the providers, the API
/// replicas, the workers, the reconciler, the clients. Real mode lays out
/// its hosts the same way.
pub fn lanes(scenario: &Scenario) -> Vec<String> {
    let t = &scenario.topology;
    let mut hosts = vec![host::STORE.to_owned()];
    hosts.extend(t.providers.iter().map(|p| host::provider(&p.name)));
    hosts.extend((1..=t.api_replicas).map(host::api));
    hosts.extend((1..=t.workers).map(host::worker));
    if t.reconciler {
        hosts.push(host::RECONCILER.to_owned());
    }
    hosts.extend(scenario.clients.iter().map(|c| host::client(&c.name)));
    hosts
}

/// The client's bearer token.
pub fn client_token(client: &str) -> String {
    format!("token-{client}")
}

/// Polls a future that cannot wait (the in-process store's operations
/// never do) to its output, outside any runtime.
pub fn ready<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(std::task::Waker::noop()))
    {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("an in-process store operation waited"),
    }
}

/// Builds the world for `scenario` under `seed`, running `design`.
pub fn build(scenario: &Scenario, seed: u64, design: Design) -> World {
    build_deciding(scenario, seed, design, Decisions::default())
}

/// [`build`], every random draw decided through `decisions`.
pub fn build_deciding(
    scenario: &Scenario,
    seed: u64,
    design: Design,
    decisions: Decisions,
) -> World {
    let store = Arc::new(MemStore::with_constraints(Constraints::for_design(design)));
    let recorder = SimRecorder::new();
    let contract = contract_of(scenario);
    // Certification before any client clicks, and before the scheduler
    // drives this thread's timers: it runs a world of its own.
    let certified = certify_providers(scenario, &contract, &store, &recorder);
    let mut world = World {
        sim: simulation(scenario, seed),
        store,
        store_plan: FaultPlan::default(),
        recorder,
        providers: BTreeMap::new(),
        provider_profiles: provider_profiles(scenario, seed),
        clocks: BTreeMap::new(),
        facts: facts_of(scenario, certified),
        scheduler: Scheduler::new(&scenario.timing, child_seed(seed, "links")),
        hosts: Vec::new(),
        decisions,
    };
    world.scheduler.decide_with(&world.decisions);
    register_store(&mut world);
    register_providers(&mut world, scenario);
    let engine_parts = EngineParts {
        design,
        contract,
        policy: scenario.policy,
        store_timeout_ms: scenario.topology.store_timeout_ms,
        store_reuse: world.scheduler.reuse_gate(),
        clients: provider_clients(scenario),
    };
    register_apis(&mut world, scenario, seed, &engine_parts);
    register_workers(&mut world, scenario, seed, &engine_parts);
    register_clients(&mut world, scenario, seed);
    world.scheduler.attach(&world.sim, &world.hosts);
    if world.decisions.is_on() {
        for name in &world.hosts {
            world
                .decisions
                .name_host(world.sim.lookup(name.as_str()), name);
        }
    }
    world
}

/// The turmoil simulation of a run: its seed, epoch, tick and latencies.
fn simulation(scenario: &Scenario, seed: u64) -> turmoil::Sim<'static> {
    let timing = scenario.timing;
    turmoil::Builder::new()
        .rng_seed(child_seed(seed, "turmoil"))
        .epoch(UNIX_EPOCH + Duration::from_micros(FIXED_EPOCH_US.unsigned_abs()))
        .tick_duration(Duration::from_millis(timing.tick_ms))
        // turmoil's own limit sits past the settle deadline: the driver
        // stops the run, not turmoil.
        .simulation_duration(Duration::from_millis(timing.settle_ms + 60_000))
        .min_message_latency(Duration::from_millis(timing.latency_ms_min))
        .max_message_latency(Duration::from_millis(timing.latency_ms_max))
        .build()
}

/// Each provider's behaviour, its draws seeded by the run's seed (the
/// file's seed alone would repeat them on every run): in both worlds.
pub fn provider_profiles(
    scenario: &Scenario,
    seed: u64,
) -> BTreeMap<String, idem_core::provider::server::Behaviour> {
    scenario
        .topology
        .providers
        .iter()
        .map(|p| {
            let mut behaviour = p.behaviour.clone();
            behaviour.seed = child_seed(seed ^ behaviour.seed, &format!("provider/{}", p.name));
            (p.name.clone(), behaviour)
        })
        .collect()
}

/// What the oracle is told of the world; `certified` maps each provider
/// whose certification passed to the model it certified. Real mode judges
/// its runs on the same facts.
pub fn facts_of(scenario: &Scenario, certified: BTreeMap<String, String>) -> WorldFacts {
    WorldFacts {
        client_owners: scenario
            .clients
            .iter()
            .map(|c| (c.name.clone(), c.owner.clone()))
            .collect(),
        certified: certified.keys().cloned().collect::<BTreeSet<_>>(),
        certified_models: certified,
        defects: scenario
            .topology
            .providers
            .iter()
            .map(|p| (p.name.clone(), declared_defects(p)))
            .collect(),
        policy: scenario.policy,
        reconciler: scenario.topology.reconciler,
        reconciler_config: Some(scenario.topology.reconciler_config.clone()),
        primaries: BTreeMap::new(),
    }
}

/// The primary provider each create body of `scenario`'s users names, by
/// the body's fingerprint as the users' script records it
/// ([`crate::client::create_fingerprint`]): [`WorldFacts::primaries`].
pub fn primaries_of(scenario: &Scenario) -> BTreeMap<String, String> {
    scenario
        .clients
        .iter()
        .flat_map(|c| &c.actions)
        .filter_map(|action| match action {
            crate::scenario::Action::Create { request, .. } => Some((
                crate::client::create_fingerprint(request),
                request.provider.clone(),
            )),
            _ => None,
        })
        .collect()
}

/// The contract every provider of the scenario is held to.
pub fn contract_of(scenario: &Scenario) -> Providers {
    let shipped = Contract::shipped();
    Providers {
        specs: scenario
            .topology
            .providers
            .iter()
            .map(|p| {
                let spec = ProviderSpec {
                    model: p.model.clone(),
                    endpoint: None,
                };
                (p.name.clone(), spec)
            })
            .collect(),
        prompt_version: shipped.prompt_version.clone(),
        schema_version: shipped.schema_version.clone(),
    }
}

/// Certifies each provider the scenario asks to (the product's run), and
/// files and records the outcomes; returns the providers that passed,
/// with the model each was certified as.
fn certify_providers(
    scenario: &Scenario,
    contract: &Providers,
    store: &MemStore,
    recorder: &SimRecorder,
) -> BTreeMap<String, String> {
    let certifications = certifications(scenario);
    let at = SimClock::new(FIXED_EPOCH_US).now();
    ready(file_certifications(
        &certifications,
        contract,
        store,
        at,
        "simulation",
        recorder,
    ))
    .expect("the in-process store takes a certificate");
    certified_models(&certifications)
}

/// What every engine-running host shares.
struct EngineParts {
    design: Design,
    contract: Providers,
    policy: idem_core::engine::Policy,
    store_timeout_ms: u64,
    store_reuse: ReuseGate,
    clients: ProviderSet,
}

impl EngineParts {
    /// The engine of host `session`, running the design under test, on
    /// that host's own (possibly faulty) clock. A `poller`'s store calls
    /// (a worker's, the reconciler's: most of a run's calls are their idle
    /// reads) keep their connections open between calls; an API replica
    /// opens one per call, so the races the scenarios aim at on the request
    /// path (two clicks, a lookup and then an insert) keep the width they
    /// were written for.
    fn engine(&self, session: &str, ids: Arc<SeededIds>, clock: HostClock, poller: bool) -> Engine {
        let address = format!("{}:{SERVICE_PORT}", host::STORE);
        let store = if poller {
            RemoteStore::pooled(address, self.store_timeout_ms, self.store_reuse.clone())
        } else {
            RemoteStore::new(address, self.store_timeout_ms)
        };
        Engine::new(
            Arc::new(store),
            Arc::new(SimClock::skewed(FIXED_EPOCH_US, clock)),
            ids,
            self.contract.clone(),
            self.policy,
        )
        .with_model_probes(ModelProbes::new(
            self.clients.clone(),
            MODEL_PROBE_TIMEOUT_MS_DEFAULT,
        ))
        .with_design(self.design, session)
    }
}

/// The contract defects `profile` declares, by name: what a provider that
/// shares the contract never does.
fn declared_defects(profile: &ProviderProfile) -> Vec<String> {
    let b = &profile.behaviour;
    let mut defects = Vec::new();
    match b.contract {
        ContractMode::Valid => {}
        ContractMode::InventedKey => defects.push("contract = invented_key".to_owned()),
        ContractMode::Prose => defects.push("contract = prose".to_owned()),
        ContractMode::IgnoredFormat => defects.push("contract = ignored_format".to_owned()),
    }
    if profile.tokenizer.special_tokens == SpecialTokens::Parsed {
        defects.push("special_tokens = parsed".to_owned());
    }
    if b.deviate_one_in > 0 {
        defects.push(format!("deviate_one_in = {}", b.deviate_one_in));
    }
    if b.hang || b.stall || b.error_per_mille == 1_000 {
        defects.push("never answers".to_owned());
    }
    defects
}

fn provider_clients(scenario: &Scenario) -> ProviderSet {
    scenario
        .topology
        .providers
        .iter()
        .map(|p| {
            let config = OpenAiConfig::new(
                format!("{}:{SERVICE_PORT}", host::provider(&p.name)),
                p.model.clone(),
            );
            let client = OpenAiClient::new(SimConnector, config)
                .expect("a simulated provider config is valid");
            (p.name.clone(), Arc::new(client) as Arc<dyn Provider>)
        })
        .collect()
}

fn register_store(world: &mut World) {
    let store: Arc<dyn Store> = world.store.clone();
    let (plan, recorder) = (world.store_plan.clone(), world.recorder.clone());
    let observer = StoreObserver::default();
    world.host(host::STORE, move || {
        let serving = serve_store(
            store.clone(),
            plan.clone(),
            observer.clone(),
            recorder.clone(),
            host::STORE.to_owned(),
            SERVICE_PORT,
        );
        async move { serving.await.map_err(Into::into) }
    });
}

fn register_providers(world: &mut World, scenario: &Scenario) {
    for profile in &scenario.topology.providers {
        let behaviour = world.provider_profiles[&profile.name].clone();
        let server = ProviderServer::named(&profile.name, behaviour);
        if world.decisions.is_on() {
            server.set_chooser(Arc::new(ProviderChooser {
                decisions: world.decisions.clone(),
                time: SimTime,
            }));
        }
        server.set_observer(execution_observer(world.recorder.clone(), &profile.name));
        let host_name = host::provider(&profile.name);
        world.providers.insert(profile.name.clone(), server.clone());
        world.host(host_name.as_str(), move || {
            let server = server.clone();
            async move {
                let listener = SimListener::bind(SERVICE_PORT).await?;
                idem_core::provider::server::serve(listener, server).await?;
                Ok(())
            }
        });
    }
}

/// Records each of `provider`'s executions in the trace, as its host
/// sees it.
pub fn execution_observer(recorder: impl Recorder, provider: &str) -> ExecutionObserver {
    let (name, host_name) = (provider.to_owned(), host::provider(provider));
    Arc::new(move |execution: &Execution| {
        recorder.record(&host_name, TraceBody::provider_execution(&name, execution));
    })
}

fn register_apis(world: &mut World, scenario: &Scenario, seed: u64, parts: &EngineParts) {
    let mut auth = Auth::new().with_operator(OPERATOR_TOKEN);
    for client in &scenario.clients {
        auth = auth.with_owner(&client_token(&client.name), OwnerId(client.owner.clone()));
    }
    for index in 1..=scenario.topology.api_replicas {
        let name = host::api(index);
        let ids = Arc::new(SeededIds::new(child_seed(seed, &format!("ids/{name}"))));
        let engine = parts.engine(&name, ids, world.clock(&name), false);
        // The replica runs the attempts its backup button starts.
        let runner = Worker::new(
            engine.clone(),
            parts.clients.clone(),
            scenario.topology.worker.clone(),
        );
        let state = AppState::new(engine, auth.clone()).with_runner(Arc::new(runner));
        world.host(name.as_str(), move || {
            let state = state.clone();
            async move {
                let listener = SimListener::bind(SERVICE_PORT).await?;
                api::serve(listener, api::router(state), std::future::pending()).await?;
                Ok(())
            }
        });
    }
}

fn register_workers(world: &mut World, scenario: &Scenario, seed: u64, parts: &EngineParts) {
    for index in 1..=scenario.topology.workers {
        let name = host::worker(index);
        let ids = Arc::new(SeededIds::new(child_seed(seed, &format!("ids/{name}"))));
        let worker = Worker::new(
            parts.engine(&name, ids, world.clock(&name), true),
            parts.clients.clone(),
            scenario.topology.worker.clone(),
        );
        world.host(name.as_str(), move || {
            let worker = worker.clone();
            async move {
                worker.run(std::future::pending()).await;
                Ok(())
            }
        });
    }
    if scenario.topology.reconciler {
        let ids = Arc::new(SeededIds::new(child_seed(seed, "ids/reconciler")));
        let reconciler = Reconciler::new(
            parts.engine(host::RECONCILER, ids, world.clock(host::RECONCILER), true),
            parts.clients.clone(),
            scenario.topology.reconciler_config.clone(),
        );
        world.host(host::RECONCILER, move || {
            let reconciler = reconciler.clone();
            async move {
                reconciler.run(std::future::pending()).await;
                Ok(())
            }
        });
    }
}

fn register_clients(world: &mut World, scenario: &Scenario, seed: u64) {
    let replicas: Vec<String> = (1..=scenario.topology.api_replicas)
        .map(host::api)
        .collect();
    let port = Wire {
        connector: SimConnector,
        authorities: replicas
            .iter()
            .map(|api| format!("{api}:{SERVICE_PORT}"))
            .collect(),
        time: SimTime,
        decisions: world.decisions.clone(),
        recorder: world.recorder.clone(),
        results_recorded: false,
    };
    let known_jobs = KnownJobs::default();
    for spec in &scenario.clients {
        let ctx = ClientContext {
            token: client_token(&spec.name),
            spec: spec.clone(),
            replicas: replicas.clone(),
            known_jobs: known_jobs.clone(),
            seed: child_seed(seed, &format!("client/{}", spec.name)),
            port: port.clone(),
        };
        world.client(host::client(&spec.name).as_str(), async move {
            run_client(ctx).await;
            Ok(())
        });
    }
}

/// Simulated time, as the users read it.
#[derive(Clone, Copy, Debug)]
struct SimTime;

impl RunTime for SimTime {
    fn now_ms(&self) -> u64 {
        crate::scheduler::sim_elapsed_ms()
    }
}

/// A provider's random choices, made through the run's decision log and
/// timed by the world's clock.
#[derive(Debug)]
pub struct ProviderChooser<T> {
    pub decisions: Decisions,
    pub time: T,
}

impl<T: RunTime> idem_core::provider::server::Chooser for ProviderChooser<T> {
    fn choose(
        &self,
        provider: &str,
        choice: idem_core::provider::server::Choice,
        rng: &mut rand_chacha::ChaCha8Rng,
    ) -> u64 {
        use idem_core::provider::server::Choice;
        let subject = || match choice {
            Choice::JitterMs { .. } => Subject::ProviderJitter {
                provider: provider.to_owned(),
            },
            Choice::ErrorRoll => Subject::ProviderErrorRoll {
                provider: provider.to_owned(),
            },
        };
        self.decisions
            .draw(subject, self.time.now_ms(), rng, |rng| choice.draw(rng))
    }
}
