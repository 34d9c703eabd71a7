//! The seed article's four fragile points, in the simulator, with the real
//! engine: each must pass with the correct design, hold its specific
//! invariant, and reach its race window. Plus the determinism contract.

use idem_core::design::Design;
use idem_core::engine::Policy;
use idem_core::provider::server::Behaviour;
use idem_model::model::JobRequest;
use idem_oracle::Invariant;
use idem_sim::determinism;
use idem_sim::driver::Stop;
use idem_sim::run::{RunOutcome, Verdict, run};
use idem_sim::scenario::{Action, ClientSpec, Scenario, Timing, Topology, Window};
use idem_sim::trace::TraceBody;
use serde_json::json;

fn request(text: &str) -> JobRequest {
    JobRequest {
        provider: "primary".to_owned(),
        fallbacks: vec!["fallback".to_owned()],
        params: json!({"text": text}),
    }
}

fn click(at_ms: u64, key: &str, text: &str) -> Action {
    Action::Create {
        at_ms,
        jitter_ms: 20,
        key: key.to_owned(),
        request: request(text),
        retries: 2,
        retry_after_ms: 500,
    }
}

fn scenario(name: &str, clients: Vec<ClientSpec>) -> Scenario {
    Scenario {
        name: name.to_owned(),
        description: String::new(),
        topology: Topology::default(),
        policy: Policy::Strict,
        clients,
        faults: vec![],
        timing: Timing::default(),
        expect_windows: vec![],
    }
}

fn alice(actions: Vec<Action>) -> ClientSpec {
    let mut client = ClientSpec::new("alice", "alice");
    client.actions = actions;
    client
}

/// Runs and checks the common contract: the correct design passes, the
/// run settles, and `invariant` in particular holds.
fn passes(scenario: &Scenario, seed: u64, invariant: Invariant) -> RunOutcome {
    let outcome = run(scenario, seed, Design::Correct).expect("the world runs");
    let report = &outcome.report;
    assert!(
        report.violations.iter().all(|v| v.invariant != invariant),
        "{invariant:?} violated: {:?}",
        report.violations
    );
    assert_eq!(report.verdict, Verdict::Pass, "{:#?}", report.violations);
    assert_eq!(
        report.stop,
        Stop::Quiescent,
        "the run settles before its deadline"
    );
    outcome
}

fn reached(outcome: &RunOutcome, window: Window) -> u32 {
    outcome.report.windows.get(&window).copied().unwrap_or(0)
}

fn responses(outcome: &RunOutcome) -> Vec<(u16, Option<String>, Option<String>)> {
    outcome
        .trace
        .events
        .iter()
        .filter_map(|e| match &e.body {
            TraceBody::HttpResponse {
                status,
                job_id,
                problem,
                ..
            } => Some((*status, job_id.map(|j| j.to_string()), problem.clone())),
            _ => None,
        })
        .collect()
}

fn double_click() -> Scenario {
    scenario(
        "double-click",
        vec![alice(vec![
            click(0, "order-42", "hello"),
            click(10, "order-42", "hello"),
        ])],
    )
}

#[test]
fn sim_double_click_two_posts_one_job() {
    for seed in 1..=5 {
        let outcome = passes(&double_click(), seed, Invariant::OneJobPerIntent);
        assert!(
            reached(&outcome, Window::DuplicateCreate) >= 1,
            "seed {seed}"
        );
        let ids: std::collections::BTreeSet<_> = responses(&outcome)
            .into_iter()
            .filter(|(status, _, _)| (200..300).contains(status))
            .filter_map(|(_, id, _)| id)
            .collect();
        assert_eq!(ids.len(), 1, "seed {seed}: every 2xx names the same job");
    }
}

#[test]
fn sim_mismatched_payload_gets_409() {
    let scenario = scenario(
        "mismatched-payload",
        vec![alice(vec![
            click(0, "k", "hello"),
            click(300, "k", "goodbye"),
        ])],
    );
    let outcome = passes(&scenario, 3, Invariant::MismatchRejected);
    assert_eq!(reached(&outcome, Window::Mismatch), 1);
    assert!(
        responses(&outcome).iter().any(|(s, _, p)| *s == 409
            && p.as_deref() == Some("urn:idem:problem:idempotency-key-reused"))
    );
}

#[test]
fn sim_timeout_becomes_unknown_and_blocks_the_backup_button() {
    let mut scenario = scenario(
        "timeout-unknown",
        vec![alice(vec![
            click(0, "k", "slow"),
            Action::Backup {
                at_ms: 2_800,
                jitter_ms: 0,
                key: "k".to_owned(),
                provider: None,
            },
        ])],
    );
    // The provider takes longer than the worker's 2 s deadline.
    scenario.topology.providers[0].behaviour = Behaviour {
        latency_ms: 3_500,
        ..Behaviour::default()
    };
    let outcome = passes(&scenario, 5, Invariant::TimeoutMeansUnknown);
    let moves: Vec<_> = outcome
        .trace
        .events
        .iter()
        .filter_map(|e| match &e.body {
            TraceBody::AttemptTransition { to, .. } => Some(to.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        moves,
        vec!["running", "unknown"],
        "a timeout is unknown, never failed"
    );
    assert!(
        responses(&outcome).iter().any(
            |(s, _, p)| *s == 409 && p.as_deref() == Some("urn:idem:problem:attempt-in-flight")
        ),
        "the backup button is refused while unknown"
    );
    assert!(reached(&outcome, Window::BlockedAttempt) >= 1);
    assert!(reached(&outcome, Window::LateResultAfterUnknown) >= 1);
    assert!(
        reached(&outcome, Window::ReconcilerResolution) >= 1,
        "the reconciler resolves it by status lookup"
    );
    assert_eq!(outcome.dump.jobs[0].state.as_str(), "succeeded");
}

#[test]
fn sim_out_of_order_completion_the_late_primary_loses() {
    let mut scenario = scenario(
        "out-of-order-completion",
        vec![alice(vec![click(0, "k", "race")])],
    );
    scenario.policy = Policy::Hedged {
        hedge_after_ms: 300,
    };
    scenario.topology.providers[0].behaviour = Behaviour {
        latency_ms: 1_500,
        ..Behaviour::default()
    };
    scenario.topology.providers[1].certified = true;
    scenario.topology.providers[1].behaviour = Behaviour {
        latency_ms: 100,
        ..Behaviour::default()
    };
    let outcome = passes(&scenario, 11, Invariant::OneWinner);
    let dump = &outcome.dump;
    assert!(reached(&outcome, Window::HedgeFired) >= 1);
    assert!(reached(&outcome, Window::CasLoser) >= 1);
    let job = &dump.jobs[0];
    let primary = dump
        .attempts
        .iter()
        .find(|a| a.provider == "primary")
        .expect("the primary attempt");
    let hedge = dump
        .attempts
        .iter()
        .find(|a| a.provider == "fallback")
        .expect("the hedge");
    assert_eq!(primary.seq, 1, "the primary went first");
    assert_eq!(
        job.completed_by,
        Some(hedge.id),
        "the hedge returned first and won"
    );
    assert_eq!(
        primary.state.as_str(),
        "lost",
        "the primary returned later and lost"
    );
}

#[test]
fn sim_same_seed_same_trace_hash_different_seed_differs() {
    let scenario = double_click();
    let report = determinism::check(&scenario, 7, Design::Correct).expect("runs");
    assert!(report.deterministic(), "{:?}", report.divergence);
    assert_eq!(report.first_hash, report.second_hash);
    let other = determinism::check(&scenario, 8, Design::Correct).expect("runs");
    assert_ne!(report.first_hash, other.first_hash);
}
