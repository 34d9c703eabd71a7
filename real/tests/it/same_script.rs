//! The users' script is written once (`idem_sim::client`): for every
//! catalogue scenario and the same seed, the simulated users and the real
//! ones send the same requests, per user, in order (methods, paths,
//! idempotency keys, bodies, and the replica each went to).
//!
//! The simulator runs the seed; then the same users run for real (the
//! real port: real TCP, the wall clock, real mode's recorder) against a
//! server on loopback that answers each request as the simulator's
//! service answered it, after as long (but within half the user's request
//! timeout, so that a busy machine's few milliseconds cannot turn an
//! answer the simulated user got into a timeout), so both runs see the
//! same answers. A request the simulator's users never sent is answered by
//! nobody and fails the comparison.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;

use idem_core::design::Design;
use idem_core::provider::connect::TcpConnector;
use idem_model::fingerprint::{canonicalize, fingerprint};
use idem_real::clock::RunClock;
use idem_real::recorder::RealRecorder;
use idem_sim::client::{ClientContext, KnownJobs, Wire, run_client};
use idem_sim::net::child_seed;
use idem_sim::scenario::{Scenario, host};
use idem_sim::trace::{Trace, TraceBody};
use idem_sim::world::client_token;

/// The longest a real user may run past the simulator's last answer.
const SLACK_MS: u64 = 10_000;

/// One request as the trace records it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Sent {
    replica: String,
    method: String,
    path: String,
    key: Option<String>,
    fingerprint: Option<String>,
}

/// What the simulator's service did with a request.
#[derive(Clone, Debug)]
enum Reply {
    Answer {
        status: u16,
        replayed: bool,
        body: Value,
        after_ms: u64,
    },
    Failed {
        timed_out: bool,
        after_ms: u64,
    },
    /// The run ended first.
    Never,
}

/// A user's exchanges in the simulator, and whether it ran its script to
/// its end there.
#[derive(Clone, Debug, Default)]
struct User {
    exchanges: Vec<(Sent, Reply)>,
    /// When each exchange's request was sent, in simulated milliseconds.
    sent_ms: Vec<u64>,
    finished: bool,
}

/// A user's requests the simulator sent less than this far apart may leave
/// in either order on the real clock: each action is its own task, and on a
/// loaded machine (CI runs every test binary at once) a task's timer or
/// its connect can be late by more than the gap between two clicks. CI
/// once saw `mismatched-payload`'s two creates, 15 ms apart, swapped.
const SAME_MOMENT_MS: u64 = 50;

/// Whether `sent` is `simulated` (sent at `sent_ms`) up to the order of
/// requests within one moment: the simulated requests are cut where two
/// consecutive ones are [`SAME_MOMENT_MS`] or more apart, and each piece
/// must come back as the same requests in any order. Only the first
/// `sent.len()` requests are compared, the last piece as a subset.
fn same_up_to_moments(sent: &[&Sent], simulated: &[&Sent], sent_ms: &[u64]) -> bool {
    let mut start = 0;
    while start < sent.len().min(simulated.len()) {
        let mut end = start + 1;
        while end < simulated.len()
            && sent_ms[end].saturating_sub(sent_ms[end - 1]) < SAME_MOMENT_MS
        {
            end += 1;
        }
        let mut expected: Vec<&Sent> = simulated[start..end].to_vec();
        let got = &sent[start..end.min(sent.len())];
        for request in got {
            let Some(at) = expected.iter().position(|e| e == request) else {
                return false;
            };
            expected.swap_remove(at);
        }
        start = end;
    }
    true
}

/// Every user's requests and what came back, in the order sent.
fn simulated(trace: &Trace) -> BTreeMap<String, User> {
    let mut users: BTreeMap<String, User> = BTreeMap::new();
    // Where each request is in its user's list, and when it was sent.
    let mut sent_at: BTreeMap<(String, u64), (usize, u64)> = BTreeMap::new();
    for event in &trace.events {
        let (client, request_id, reply) = match &event.body {
            TraceBody::HttpRequest {
                client,
                request_id,
                replica,
                method,
                path,
                idempotency_key,
                body_fingerprint,
            } => {
                let user = users.entry(client.clone()).or_default();
                let at = (user.exchanges.len(), event.t_ms);
                user.sent_ms.push(event.t_ms);
                sent_at.insert((client.clone(), *request_id), at);
                let sent = Sent {
                    replica: replica.clone(),
                    method: method.clone(),
                    path: path.clone(),
                    key: idempotency_key.clone(),
                    fingerprint: body_fingerprint.clone(),
                };
                user.exchanges.push((sent, Reply::Never));
                continue;
            }
            TraceBody::ClientDone { client } => {
                users.entry(client.clone()).or_default().finished = true;
                continue;
            }
            TraceBody::HttpResponse {
                client,
                request_id,
                status,
                replayed,
                ..
            } => {
                let reply = Reply::Answer {
                    status: *status,
                    replayed: *replayed,
                    body: answer_body(&event.body),
                    after_ms: 0,
                };
                (client, request_id, reply)
            }
            TraceBody::HttpFailed {
                client,
                request_id,
                error,
            } => {
                let timed_out = error.contains("timed out");
                let reply = Reply::Failed {
                    timed_out,
                    after_ms: 0,
                };
                (client, request_id, reply)
            }
            _ => continue,
        };
        let (index, sent_ms) = sent_at[&(client.clone(), *request_id)];
        let took_ms = event.t_ms.saturating_sub(sent_ms);
        let slot = &mut users.get_mut(client).expect("a user that sent").exchanges[index].1;
        *slot = match reply {
            Reply::Answer {
                status,
                replayed,
                body,
                ..
            } => Reply::Answer {
                status,
                replayed,
                body,
                after_ms: took_ms,
            },
            Reply::Failed { timed_out, .. } => Reply::Failed {
                timed_out,
                after_ms: took_ms,
            },
            Reply::Never => Reply::Never,
        };
    }
    mark_outcomes(&mut users);
    users
}

/// The body of an answer as the user reads it: the job or attempt it
/// names, the problem and the blocking attempt.
fn answer_body(response: &TraceBody) -> Value {
    let TraceBody::HttpResponse {
        job_id,
        attempt_id,
        problem,
        blocking_attempt,
        ..
    } = response
    else {
        return Value::Null;
    };
    let mut body = match (attempt_id, job_id) {
        (Some(attempt), Some(job)) => json!({"id": attempt.to_string(), "job_id": job.to_string()}),
        (None, Some(job)) => json!({"id": job.to_string(), "state": "pending"}),
        _ => json!({}),
    };
    if let Some(problem) = problem {
        body["type"] = json!(problem);
    }
    if let Some(blocking) = blocking_attempt {
        body["blocking_attempt"] = json!(blocking.to_string());
    }
    body
}

/// A user reads its job until it has ended: the last read of each job a
/// user made in the simulator is the one that saw it end.
fn mark_outcomes(users: &mut BTreeMap<String, User>) {
    for user in users.values_mut() {
        let mut seen = std::collections::BTreeSet::new();
        for (sent, reply) in user.exchanges.iter_mut().rev() {
            if sent.method != "GET" || !seen.insert(sent.path.clone()) {
                continue;
            }
            if let Reply::Answer { body, .. } = reply
                && body.get("state").is_some()
            {
                body["state"] = json!("succeeded");
            }
        }
    }
}

/// The server standing in for the simulator's service: one user's
/// exchanges, each answered once.
/// A user's exchanges, each with its reply until it is given.
type Exchanges = Arc<Mutex<Vec<(Sent, Option<Reply>)>>>;

#[derive(Clone)]
struct Replayed {
    /// The user's request timeout.
    timeout_ms: u64,
    exchanges: Exchanges,
    /// Told when a request the simulator never saw arrives.
    beyond: Arc<tokio::sync::Notify>,
}

impl Replayed {
    fn new(user: &User, timeout_ms: u64) -> Self {
        Self {
            timeout_ms,
            exchanges: Arc::new(Mutex::new(
                user.exchanges
                    .iter()
                    .map(|(sent, reply)| (sent.clone(), Some(reply.clone())))
                    .collect(),
            )),
            beyond: Arc::default(),
        }
    }

    /// The reply to the first unanswered exchange that sent `sent`.
    fn take(&self, sent: &Sent) -> Option<Reply> {
        let mut exchanges = self
            .exchanges
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        exchanges
            .iter_mut()
            .find(|(s, reply)| s == sent && reply.is_some())
            .and_then(|(_, reply)| reply.take())
    }

    async fn answer(
        &self,
        replica: &str,
        request: hyper::Request<hyper::body::Incoming>,
    ) -> Result<hyper::Response<Full<bytes::Bytes>>, String> {
        let (parts, body) = request.into_parts();
        let bytes = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
        let body: Option<Value> = serde_json::from_slice(&bytes).ok();
        let method = parts.method.to_string();
        let path = parts.uri.path().to_owned();
        let sent = Sent {
            replica: replica.to_owned(),
            fingerprint: (method == "POST" && path == "/v1/jobs")
                .then(|| body.as_ref().map(|b| fingerprint(&canonicalize(b))))
                .flatten(),
            key: parts
                .headers
                .get("idempotency-key")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            method,
            path,
        };
        let Some(reply) = self.take(&sent) else {
            self.beyond.notify_one();
            return std::future::pending().await;
        };
        reply_with(reply, self.timeout_ms / 2).await
    }
}

/// Answers as the simulator's service did, after as long.
async fn reply_with(
    reply: Reply,
    answer_ms_max: u64,
) -> Result<hyper::Response<Full<bytes::Bytes>>, String> {
    match reply {
        Reply::Answer {
            status,
            replayed,
            body,
            after_ms,
        } => {
            let after_ms = after_ms.min(answer_ms_max);
            idem_core::timer::sleep(Duration::from_millis(after_ms)).await;
            let mut response = hyper::Response::builder()
                .status(status)
                .header("content-type", "application/json");
            if replayed {
                response = response.header("idempotent-replayed", "true");
            }
            response
                .body(Full::new(bytes::Bytes::from(body.to_string())))
                .map_err(|e| e.to_string())
        }
        // The user's own timeout ends it, as in the simulator.
        Reply::Failed {
            timed_out: true, ..
        }
        | Reply::Never => std::future::pending().await,
        Reply::Failed { after_ms, .. } => {
            idem_core::timer::sleep(Duration::from_millis(after_ms)).await;
            Err("the connection broke, as in the simulator".to_owned())
        }
    }
}

/// Serves `replayed` as replica `replica` on a loopback port; its address.
async fn serve(replayed: Replayed, replica: String) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
    let address = listener.local_addr().expect("an address").to_string();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (replayed, replica) = (replayed.clone(), replica.clone());
            let service = service_fn(move |request| {
                let (replayed, replica) = (replayed.clone(), replica.clone());
                async move { replayed.answer(&replica, request).await }
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service),
            );
        }
    });
    address
}

/// The real users of `scenario` under `seed` against the simulator's
/// answers: what each sent, in order.
async fn real(scenario: &Scenario, seed: u64, sim: &BTreeMap<String, User>) -> Vec<(String, Sent)> {
    let replicas: Vec<String> = (1..=scenario.topology.api_replicas)
        .map(host::api)
        .collect();
    let (recorder, clock, known_jobs) = (
        RealRecorder::default(),
        RunClock::start(),
        KnownJobs::default(),
    );
    let mut users = Vec::new();
    for spec in &scenario.clients {
        let user = sim.get(&spec.name).cloned().unwrap_or_default();
        let replayed = Replayed::new(&user, spec.request_timeout_ms);
        let mut authorities = Vec::new();
        for replica in &replicas {
            authorities.push(serve(replayed.clone(), replica.clone()).await);
        }
        let ctx = ClientContext {
            spec: spec.clone(),
            token: client_token(&spec.name),
            replicas: replicas.clone(),
            known_jobs: known_jobs.clone(),
            seed: child_seed(seed, &format!("client/{}", spec.name)),
            port: Wire {
                connector: TcpConnector,
                authorities,
                time: clock.clone(),
                decisions: Default::default(),
                recorder: recorder.clone(),
                results_recorded: true,
            },
        };
        let user = tokio::spawn(run_client(ctx));
        users.push(tokio::spawn(async move {
            tokio::select! {
                _ = user => {}
                () = replayed.beyond.notified() => {}
            }
        }));
    }
    let longest_ms = sim
        .values()
        .flat_map(|u| &u.exchanges)
        .map(|(_, reply)| match reply {
            Reply::Answer { after_ms, .. } | Reply::Failed { after_ms, .. } => *after_ms,
            Reply::Never => 0,
        })
        .sum::<u64>();
    let budget =
        Duration::from_millis(longest_ms + scenario.timing.settle_ms.min(60_000) + SLACK_MS);
    let _ = idem_core::timer::timeout(budget, futures_all(users)).await;
    recorder
        .finish(&clock)
        .events
        .into_iter()
        .filter_map(|event| match event.body {
            TraceBody::HttpRequest {
                client,
                replica,
                method,
                path,
                idempotency_key,
                body_fingerprint,
                ..
            } => Some((
                client,
                Sent {
                    replica,
                    method,
                    path,
                    key: idempotency_key,
                    fingerprint: body_fingerprint,
                },
            )),
            _ => None,
        })
        .collect()
}

async fn futures_all(handles: Vec<tokio::task::JoinHandle<()>>) {
    for handle in handles {
        let _ = handle.await;
    }
}

/// One scenario and seed, its simulated users' exchanges already had:
/// each user's real requests are the simulated ones, in order; a user the
/// run stopped before its end may have sent one more.
async fn check(name: String, seed: u64, sim: BTreeMap<String, User>) -> Result<(), String> {
    let scenario = idem_scenarios::load(&name)
        .map_err(|e| e.to_string())?
        .scenario;
    let real = real(&scenario, seed, &sim).await;
    for (client, user) in &sim {
        let sent: Vec<&Sent> = real
            .iter()
            .filter(|(c, _)| c == client)
            .map(|(_, s)| s)
            .collect();
        let simulated: Vec<&Sent> = user.exchanges.iter().map(|(s, _)| s).collect();
        let same = if user.finished {
            sent.len() == simulated.len()
        } else {
            sent.len() <= simulated.len() + 1
        } && same_up_to_moments(&sent, &simulated, &user.sent_ms);
        if !same {
            return Err(format!(
                "{name} seed {seed}, user {client}:\n simulated {simulated:#?}\n real {sent:#?}"
            ));
        }
    }
    Ok(())
}

/// Every catalogue scenario under seeds 0 and 1: first every simulated
/// run (they are CPU-bound, and would delay the real users' timers if they
/// ran beside them), then every real run at once (their users mostly wait).
#[test]
fn simulated_and_real_users_send_the_same_requests_for_every_catalogue_scenario() {
    let names: Vec<String> = idem_scenarios::catalog()
        .into_keys()
        .map(str::to_owned)
        .collect();
    assert!(names.len() >= 18, "{names:?}");
    let mut cases = Vec::new();
    for name in &names {
        let scenario = idem_scenarios::load(name).expect("catalogue").scenario;
        for seed in [0, 1] {
            let outcome =
                idem_sim::run::run(&scenario, seed, Design::Correct).expect("the simulation runs");
            cases.push((name.clone(), seed, simulated(&outcome.trace)));
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let failures: Vec<String> = runtime.block_on(async {
        let checks: Vec<_> = cases
            .into_iter()
            .map(|(name, seed, sim)| tokio::spawn(check(name, seed, sim)))
            .collect();
        let mut failures = Vec::new();
        for check in checks {
            match check.await {
                Ok(Ok(())) => {}
                Ok(Err(failure)) => failures.push(failure),
                Err(e) => failures.push(e.to_string()),
            }
        }
        failures
    });
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Requests of one moment may come back in either order; nothing else
/// may move, and a request that was never sent is never accepted.
#[test]
fn requests_of_one_moment_may_swap_and_no_others() {
    let request = |path: &str| Sent {
        replica: "api-1".to_owned(),
        method: "GET".to_owned(),
        path: path.to_owned(),
        key: None,
        fingerprint: None,
    };
    let (a, b, c, d) = (request("/a"), request("/b"), request("/c"), request("/d"));
    let simulated = [&a, &b, &c];
    let sent_ms = [0, 15, 200];
    let check = |sent: &[&Sent]| same_up_to_moments(sent, &simulated, &sent_ms);
    assert!(check(&[&a, &b, &c]));
    assert!(check(&[&b, &a, &c]));
    assert!(check(&[&b, &a]));
    assert!(!check(&[&a, &c, &b]));
    assert!(!check(&[&c, &a, &b]));
    assert!(!check(&[&a, &d, &c]));
    assert!(!check(&[&a, &a, &c]));
}
