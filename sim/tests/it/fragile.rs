//! The seed article's four fragile points, in the simulator.

use idem_core::engine::Policy;
use idem_core::model::JobRequest;
use idem_sim::run::simulate;
use idem_sim::scenario::{Action, ClientSpec, Scenario, Timing, Topology};
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

pub fn double_click() -> Scenario {
    let mut user = ClientSpec::new("alice", "alice");
    user.actions = vec![
        click(0, "order-42", "hello"),
        click(40, "order-42", "hello"),
    ];
    Scenario {
        name: "double-click".to_owned(),
        description: "Two clicks, one key.".to_owned(),
        topology: Topology::default(),
        policy: Policy::Strict,
        clients: vec![user],
        faults: vec![],
        timing: Timing::default(),
        expect_windows: vec![],
    }
}

#[test]
fn smoke_double_click_runs() {
    let simulated =
        simulate(&double_click(), 7, idem_core::design::Design::Correct).expect("the world runs");
    eprintln!("{}", simulated.trace.to_jsonl());
    eprintln!(
        "stop={:?} sim_ms={} steps={}",
        simulated.stop, simulated.sim_ms, simulated.steps
    );
    assert_eq!(simulated.dump.jobs.len(), 1);
}

#[test]
fn same_seed_same_trace_hash() {
    let scenario = double_click();
    let design = idem_core::design::Design::Correct;
    let report = idem_sim::determinism::check(&scenario, 7, design).expect("runs");
    assert!(report.deterministic(), "{:?}", report.divergence);
    let other = idem_sim::determinism::check(&scenario, 8, design).expect("runs");
    assert_ne!(report.first_hash, other.first_hash);
}
