//! The real world of one run, built from a scenario: the store, the
//! providers, a link for every pair of hosts that talk, and the system
//! under test's processes, each reaching the others only through its
//! links.
//!
//! Hosts and links, as in the simulator: each client reaches each API
//! replica over a link of its own; each engine host (API replica, worker,
//! reconciler) reaches the store and each provider over links of its own.
//! The harness reaches the store directly (the certificates before the
//! run, its history, the quiescence check, the final state): it is the
//! observer, not a host.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use idem_contract::report::Certification;
use idem_core::design::Design;
use idem_core::engine::Policy;
use idem_core::service::ServiceConfig;
use idem_oracle::WorldFacts;
use idem_sim::certify::{certifications, certified_models, file_certifications};
use idem_sim::decisions::Decisions;
use idem_sim::net::{Skew, child_seed};
use idem_sim::scenario::{ProviderProfile, Scenario, host};
use idem_sim::world::{OPERATOR_TOKEN, client_token, contract_of, facts_of, lanes, primaries_of};

use super::clock::{RunClock, now_us};
use super::force::Forcing;
use super::pgwire::StorePlan;
use super::procs::{ProcessSpec, Processes, Readiness};
use super::providers::Providers;
use super::proxy::{Link, LinkSpec};
use super::recorder::RealRecorder;
use super::store::{StoreHost, with_address};
use super::target::{self, TargetConfig};
use super::wal::WalReader;
use super::{RealError, RealOptions, System};

/// What an engine process prints once it serves (its API) or runs (its
/// loops): `idem serve`'s own log lines.
const API_READY: &str = "idem serving";
const LOOPS_READY: &str = "running without the API";

/// Everything a run is made of.
#[derive(Debug)]
pub struct RealWorld {
    pub(super) clock: RunClock,
    pub(super) recorder: RealRecorder,
    /// Every random draw of the run, recorded: the users', the providers',
    /// the links' (a real run's decisions, for the simulator to replay).
    pub(super) decisions: Decisions,
    pub(super) store: StoreHost,
    pub(super) store_plan: StorePlan,
    pub(super) providers: Providers,
    pub(super) links: Vec<Link>,
    pub(super) processes: Processes,
    /// Each engine host's realtime clock error, in true run time.
    pub(super) skews: BTreeMap<String, Skew>,
    pub(super) facts: WorldFacts,
    /// Every host, in the simulator's lane order.
    pub(super) hosts: Vec<String>,
    /// Each client's links to the replicas, in replica order.
    pub(super) replicas: BTreeMap<String, Vec<(String, SocketAddr)>>,
    /// A black-box target runs in place of idem's processes.
    pub(super) target: bool,
    /// Where each of a black-box target's instances listens, in replica
    /// order: the jobs are read back there at the end, past the links'
    /// faults (that read is no user's).
    pub(super) instances: Vec<SocketAddr>,
    /// The races forced on a black-box target ([`super::force`]).
    pub(super) forcing: Option<Forcing>,
}

/// The engine's hosts of `scenario` and the role flags of each.
fn engine_hosts(scenario: &Scenario) -> Vec<(String, &'static [&'static str], &'static str)> {
    let t = &scenario.topology;
    let mut hosts: Vec<(String, &'static [&'static str], &'static str)> = (1..=t.api_replicas)
        .map(|i| {
            (
                host::api(i),
                &["--no-worker", "--no-reconciler"][..],
                API_READY,
            )
        })
        .collect();
    hosts.extend((1..=t.workers).map(|i| {
        (
            host::worker(i),
            &["--no-api", "--no-reconciler"][..],
            LOOPS_READY,
        )
    }));
    if t.reconciler {
        hosts.push((
            host::RECONCILER.to_owned(),
            &["--no-api", "--no-worker"][..],
            LOOPS_READY,
        ));
    }
    hosts
}

/// The races to force on a black-box target, when asked and the scenario
/// has any ([`super::force`]).
fn forcing_of(scenario: &Scenario, asked: bool, clock: &RunClock) -> Option<Forcing> {
    asked
        .then(|| Forcing::new(scenario, clock.clone()))
        .filter(Forcing::has_partners)
}

/// A free loopback port for a process to listen on ([`super::ports`]).
fn free_port() -> Result<u16, RealError> {
    super::ports::free().map_err(|e| RealError::Start(format!("no free port: {e}")))
}

/// The loops' tunables the scenario sets, as `idem serve --service-config`
/// reads them.
fn service_config(scenario: &Scenario) -> ServiceConfig {
    let t = &scenario.topology;
    ServiceConfig {
        worker: t.worker.clone(),
        reconciler: t.reconciler_config.clone(),
        store_call_timeout_ms: t.store_timeout_ms,
        run_pruner: false,
        ..ServiceConfig::default()
    }
}

impl RealWorld {
    /// Builds the world for `scenario`, up to the moment the clients may
    /// start: everything listening, every process ready.
    pub async fn build(
        scenario: &Scenario,
        options: &RealOptions,
        dir: &Path,
    ) -> Result<(Self, Option<WalReader>), RealError> {
        let design = design_of(&options.system);
        let command = match &options.system {
            System::Idem { .. } => None,
            System::Target { command } => Some(command.clone()),
        };
        let store = StoreHost::open(&options.database, design, command.is_none()).await?;
        let recorder = RealRecorder::default();
        let decisions = Decisions::recording();
        let clock = RunClock::start();
        let certifications = certifications_of(scenario)?;
        let facts = world_facts(scenario, &certifications, command.is_some());
        // idem's processes read certificates from, and write their history
        // to, idem's schema; a black-box target has a schema of its own.
        let history = match command {
            None => Some(prepare(scenario, &certifications, &store, &recorder).await?),
            Some(_) => None,
        };
        let providers =
            Providers::start(scenario, options.seed, &recorder, &decisions, clock.clone())
                .map_err(|e| RealError::Start(format!("cannot start the providers: {e}")))?;
        let forcing = forcing_of(scenario, options.force && command.is_some(), &clock);
        let mut world = Self {
            clock,
            recorder,
            decisions,
            store,
            store_plan: StorePlan::default(),
            providers,
            links: Vec::new(),
            processes: Processes::default(),
            skews: BTreeMap::new(),
            facts,
            hosts: lanes(scenario),
            replicas: BTreeMap::new(),
            target: command.is_some(),
            instances: Vec::new(),
            forcing,
        };
        world
            .start(scenario, options, dir, command.as_deref())
            .await?;
        Ok((world, history))
    }

    /// Opens every link and starts the system under test's processes (a
    /// black-box target's `command`, or idem's); the run starts once they
    /// are all ready.
    async fn start(
        &mut self,
        scenario: &Scenario,
        options: &RealOptions,
        dir: &Path,
        command: Option<&str>,
    ) -> Result<(), RealError> {
        // A target's store history is its own: nobody reads it.
        if self.target {
            self.store_plan.gate().history_unread();
        }
        let specs = match command {
            None => self.wire(scenario, options, dir).await?,
            Some(command) => self.wire_target(scenario, options, dir, command).await?,
        };
        for spec in specs {
            self.processes.start(spec).await?;
        }
        self.clock.restart();
        self.decisions.restart();
        Ok(())
    }

    /// A link from `client` to `server`, forwarding to `upstream`.
    async fn link(
        &mut self,
        scenario: &Scenario,
        seed: u64,
        (client, server): (&str, &str),
        upstream: SocketAddr,
    ) -> Result<SocketAddr, RealError> {
        // A target's statements are its own: no store operation to name;
        // its creates' answers are its `job_created` (`super::answers`).
        let forcing = self.forcing.as_ref();
        let tap = if server == host::STORE && !self.target {
            Some(self.store_plan.tap(client, &self.recorder))
        } else if server == host::STORE {
            forcing.map(super::pgwire::forcing_tap)
        } else if self.target && client.starts_with(&host::client("")) {
            Some(super::answers::tap(
                &self.recorder,
                self.store_plan.gate(),
                forcing,
            ))
        } else {
            None
        };
        let spec = LinkSpec {
            client: client.to_owned(),
            server: server.to_owned(),
            upstream,
            latency_ms_min: scenario.timing.latency_ms_min,
            latency_ms_max: scenario.timing.latency_ms_max,
            seed: child_seed(seed, &format!("link/{client}/{server}")),
            decisions: self.decisions.clone(),
            clock: self.clock.clone(),
        };
        let link = Link::start(spec, tap).await.map_err(|e| {
            RealError::Start(format!("cannot open the link {client}-{server}: {e}"))
        })?;
        let address = link.address();
        self.links.push(link);
        Ok(address)
    }

    /// Opens every link and returns how to start each engine process.
    async fn wire(
        &mut self,
        scenario: &Scenario,
        options: &RealOptions,
        dir: &Path,
    ) -> Result<Vec<ProcessSpec>, RealError> {
        let config = dir.join("service.json");
        std::fs::write(
            &config,
            serde_json::to_vec_pretty(&service_config(scenario)).expect("a config serializes"),
        )
        .map_err(|e| RealError::Start(format!("{}: {e}", config.display())))?;
        let mut specs = Vec::new();
        let mut api_ports = BTreeMap::new();
        for (name, roles, ready) in engine_hosts(scenario) {
            let port = free_port()?;
            if ready == API_READY {
                api_ports.insert(name.clone(), port);
            }
            let (store_link, providers) = self.engine_links(scenario, options.seed, &name).await?;
            let args = serve_args(
                scenario,
                options,
                &self.store,
                &Wiring {
                    host: &name,
                    roles,
                    port,
                    store_link,
                    providers: &providers,
                    config: &config,
                    journal: &journal_path(dir, &name),
                },
            );
            specs.push(ProcessSpec {
                host: name.clone(),
                program: program(&options.system),
                args,
                log: dir.join(format!("{name}.log")),
                ready: Readiness::LogLine(ready.to_owned()),
                group: false,
            });
        }
        self.client_links(scenario, options.seed, &api_ports)
            .await?;
        Ok(specs)
    }

    /// Opens every link and returns how to start each instance of a
    /// black-box target: one per API replica ([`super::target`]).
    async fn wire_target(
        &mut self,
        scenario: &Scenario,
        options: &RealOptions,
        dir: &Path,
        command: &str,
    ) -> Result<Vec<ProcessSpec>, RealError> {
        let mut specs = Vec::new();
        let mut api_ports = BTreeMap::new();
        for index in 1..=scenario.topology.api_replicas {
            let name = host::api(index);
            let port = free_port()?;
            api_ports.insert(name.clone(), port);
            self.instances
                .push(SocketAddr::from(([127, 0, 0, 1], port)));
            let (store_link, providers) = self.engine_links(scenario, options.seed, &name).await?;
            let database_url = with_address(self.store.url(), store_link);
            let config = TargetConfig::new(
                scenario,
                port,
                database_url,
                &providers,
                &self.facts.certified_models,
            );
            let path = dir.join(format!("{name}.target.json"));
            std::fs::write(
                &path,
                serde_json::to_vec_pretty(&config).expect("a config serializes"),
            )
            .map_err(|e| RealError::Start(format!("{}: {e}", path.display())))?;
            let log = dir.join(format!("{name}.log"));
            specs.push(target::process(&name, command, port, &path, &log));
        }
        self.client_links(scenario, options.seed, &api_ports)
            .await?;
        Ok(specs)
    }

    /// The links of engine host `name`: to the store, and to each provider
    /// as (provider, model, the link's address).
    async fn engine_links(
        &mut self,
        scenario: &Scenario,
        seed: u64,
        name: &str,
    ) -> Result<(SocketAddr, Vec<(String, String, SocketAddr)>), RealError> {
        let store_address = self.store.address()?;
        let store_link = self
            .link(scenario, seed, (name, host::STORE), store_address)
            .await?;
        let mut providers = Vec::new();
        for profile in &scenario.topology.providers {
            let upstream = self
                .providers
                .address(&profile.name)
                .expect("started before");
            let link = self
                .link(
                    scenario,
                    seed,
                    (name, &host::provider(&profile.name)),
                    upstream,
                )
                .await?;
            providers.push((profile.name.clone(), profile.model.clone(), link));
        }
        Ok((store_link, providers))
    }

    /// Each client's links to the API replicas listening on `api_ports`.
    async fn client_links(
        &mut self,
        scenario: &Scenario,
        seed: u64,
        api_ports: &BTreeMap<String, u16>,
    ) -> Result<(), RealError> {
        for client in &scenario.clients {
            let client_host = host::client(&client.name);
            let mut replicas = Vec::new();
            for (api, port) in api_ports {
                let upstream = SocketAddr::from(([127, 0, 0, 1], *port));
                let link = self
                    .link(scenario, seed, (&client_host, api), upstream)
                    .await?;
                replicas.push((api.clone(), link));
            }
            // Replica order as the simulator's: api-1, api-2, ..., api-10.
            replicas.sort_by_key(|(api, _)| api_index(api));
            self.replicas.insert(client.name.clone(), replicas);
        }
        Ok(())
    }
}

/// The program idem's processes run.
fn program(system: &System) -> PathBuf {
    match system {
        System::Idem { program, .. } => program.clone(),
        System::Target { .. } => PathBuf::from("sh"),
    }
}

fn api_index(api: &str) -> u32 {
    api.strip_prefix("api-")
        .and_then(|n| n.parse().ok())
        .unwrap_or(u32::MAX)
}

/// Where engine host `host` journals the store outcomes that write nothing.
pub fn journal_path(dir: &Path, host: &str) -> PathBuf {
    dir.join(format!("{host}.journal.jsonl"))
}

/// One engine process's place in the world.
struct Wiring<'a> {
    host: &'a str,
    roles: &'a [&'a str],
    port: u16,
    store_link: SocketAddr,
    /// (provider, model, the link's address).
    providers: &'a [(String, String, SocketAddr)],
    config: &'a Path,
    journal: &'a Path,
}

/// `idem serve`'s arguments for one engine host.
fn serve_args(
    scenario: &Scenario,
    options: &RealOptions,
    store: &StoreHost,
    w: &Wiring<'_>,
) -> Vec<String> {
    let owned = |args: &[&str]| args.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let mut args = owned(&[
        "serve",
        "--store",
        "postgres",
        "--database-url",
        &with_address(store.url(), w.store_link),
        "--database-schema",
        store.schema(),
        "--listen",
        &format!("127.0.0.1:{}", w.port),
        "--operator-token",
        OPERATOR_TOKEN,
        "--log-format",
        "json",
        "--no-pruner",
    ]);
    args.extend(owned(w.roles));
    args.extend(owned(&[
        "--design",
        design_of(&options.system).name(),
        "--session",
        w.host,
        "--service-config",
        &w.config.display().to_string(),
        "--journal",
        &w.journal.display().to_string(),
        "--controlled",
    ]));
    args.extend(world_args(scenario, w.providers));
    args
}

/// The tokens of the scenario's users, its providers (reached over the
/// host's links) and its policy, as `idem serve` flags.
fn world_args(scenario: &Scenario, providers: &[(String, String, SocketAddr)]) -> Vec<String> {
    let mut args = Vec::new();
    for client in &scenario.clients {
        args.push("--token".to_owned());
        args.push(format!("{}={}", client_token(&client.name), client.owner));
    }
    for (name, model, link) in providers {
        args.extend([
            "--provider".to_owned(),
            format!("{name}=http://{link}"),
            "--model".to_owned(),
            format!("{name}={model}"),
        ]);
    }
    if let Policy::Hedged { hedge_after_ms } = scenario.policy {
        args.extend([
            "--policy".to_owned(),
            "hedged".to_owned(),
            "--hedge-after-ms".to_owned(),
            hedge_after_ms.to_string(),
        ]);
    }
    args
}

/// Files each certification in idem's schema, as the simulator does before
/// any client clicks, and starts reading the store's history.
async fn prepare(
    scenario: &Scenario,
    certifications: &[(ProviderProfile, Arc<Certification>)],
    store: &StoreHost,
    recorder: &RealRecorder,
) -> Result<WalReader, RealError> {
    file_certifications(
        certifications,
        &contract_of(scenario),
        store.store(),
        idem_core::clock::micros_to_timestamp(now_us()),
        "real mode, before the run",
        recorder,
    )
    .await
    .map_err(|e| RealError::Start(format!("cannot file a certificate: {e}")))?;
    store.history().await
}

/// The certification of each provider `scenario` certifies: the
/// simulator's own (`idem_sim::certify`, memoized per profile), so that a
/// real run and a simulated run of one scenario are judged on the same
/// facts and certify the same providers. Each certification runs a small
/// simulation with runtimes of its own, so on a thread of its own.
fn certifications_of(
    scenario: &Scenario,
) -> Result<Vec<(ProviderProfile, Arc<Certification>)>, RealError> {
    let scenario = scenario.clone();
    std::thread::spawn(move || certifications(&scenario))
        .join()
        .map_err(|_| RealError::Start("the providers could not be certified".to_owned()))
}

/// The facts the oracle is told, the simulator's; a black-box target's
/// jobs have no rows, so their primaries are the bodies' (`target`).
fn world_facts(
    scenario: &Scenario,
    certifications: &[(ProviderProfile, Arc<Certification>)],
    target: bool,
) -> WorldFacts {
    let mut facts = facts_of(scenario, certified_models(certifications));
    if target {
        facts.primaries = primaries_of(scenario);
    }
    facts
}

/// The design a world runs; a black-box target is judged as the correct
/// design would be (the facts and the store's shape are the correct
/// design's).
pub fn design_of(system: &System) -> Design {
    match system {
        System::Idem { design, .. } => *design,
        System::Target { .. } => Design::Correct,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_hosts_take_their_roles_and_lanes_follow_the_simulator() {
        let scenario = idem_scenarios::load("double-click")
            .expect("catalogue")
            .scenario;
        let hosts: Vec<String> = engine_hosts(&scenario).into_iter().map(|h| h.0).collect();
        assert_eq!(hosts, ["api-1", "api-2", "worker-1", "reconciler"]);
        assert_eq!(
            lanes(&scenario),
            [
                "store",
                "provider-primary",
                "provider-fallback",
                "api-1",
                "api-2",
                "worker-1",
                "reconciler",
                "client-alice"
            ]
        );
        assert!(api_index("api-10") > api_index("api-9"));
        for name in ["double-click", "two-workers-race", "retry-storm"] {
            let scenario = idem_scenarios::load(name).expect("catalogue").scenario;
            let world = idem_sim::world::build(&scenario, 0, Design::Correct);
            assert_eq!(world.hosts, lanes(&scenario), "{name}");
        }
    }
}
