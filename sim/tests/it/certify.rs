//! Certification in the simulator: the product's run against simulated
//! providers before clients click. A defective profile fails its own check
//! whatever the scenario's flag says; a model switch mid-run makes the
//! certificate stale, and failover to it is refused from then on.

use std::collections::BTreeSet;

use idem_contract::report::Check;
use idem_contract::tokenizer::{SpecialTokens, TokenizerProfile};
use idem_core::design::Design;
use idem_core::engine::Policy;
use idem_core::provider::server::{Behaviour, ContractMode};
use idem_model::model::JobRequest;
use idem_oracle::Invariant;
use idem_sim::certify::{certify_afresh, certify_profile};
use idem_sim::determinism;
use idem_sim::run::{Verdict, run};
use idem_sim::scenario::{
    Action, ClientSpec, Fault, FaultSpec, ProviderProfile, Scenario, Timing, Topology, When, Window,
};
use idem_sim::trace::TraceBody;
use serde_json::json;

fn profile(behaviour: Behaviour, tokenizer: TokenizerProfile) -> ProviderProfile {
    ProviderProfile {
        name: "fallback".to_owned(),
        model: "fallback-model".to_owned(),
        behaviour: Behaviour {
            latency_ms: 200,
            ..behaviour
        },
        certified: true,
        tokenizer,
    }
}

/// Certifies `profile` in a certification world and checks the checks that
/// failed: exactly `must`, plus any of `may`.
fn check(name: &str, profile: ProviderProfile, must: &[Check], may: &[Check]) {
    let certification = certify_profile(&profile);
    let failed = certification.failed_checks();
    let must: BTreeSet<Check> = must.iter().copied().collect();
    let allowed: BTreeSet<Check> = must.iter().chain(may).copied().collect();
    assert!(
        must.is_subset(&failed) && failed.is_subset(&allowed),
        "{name}: failed {failed:?}, must {must:?}\n{}",
        certification.to_text()
    );
    assert_eq!(certification.passed(), must.is_empty(), "{name}");
}

#[test]
fn sim_each_profile_defect_fails_its_own_check() {
    let tokenizer = TokenizerProfile::default();
    let contract = |contract| Behaviour {
        contract,
        ..Behaviour::default()
    };
    check(
        "compliant",
        profile(Behaviour::default(), tokenizer),
        &[],
        &[],
    );
    check(
        "invented key",
        profile(contract(ContractMode::InventedKey), tokenizer),
        &[Check::Schema],
        &[],
    );
    check(
        "prose",
        profile(contract(ContractMode::Prose), tokenizer),
        &[Check::Parse],
        &[],
    );
    check(
        "ignored format",
        profile(contract(ContractMode::IgnoredFormat), tokenizer),
        &[Check::BusinessType],
        &[],
    );
    check(
        "special tokens parsed",
        profile(
            Behaviour::default(),
            TokenizerProfile {
                special_tokens: SpecialTokens::Parsed,
                ..tokenizer
            },
        ),
        &[Check::SpecialTokens],
        &[],
    );
    check(
        "a 1,024-token window",
        profile(
            Behaviour::default(),
            TokenizerProfile {
                context_window_tokens: 1_024,
                ..tokenizer
            },
        ),
        &[Check::ContextWindow],
        &[],
    );
    check(
        "one sample in 5 deviates",
        profile(
            Behaviour {
                deviate_one_in: 5,
                ..Behaviour::default()
            },
            tokenizer,
        ),
        &[Check::Consistency],
        &[Check::RoundTrip],
    );
    check(
        "a provider that never answers",
        profile(
            Behaviour {
                hang: true,
                ..Behaviour::default()
            },
            tokenizer,
        ),
        &[Check::Transport],
        &[],
    );
}

fn request(text: &str) -> JobRequest {
    JobRequest {
        provider: "primary".to_owned(),
        fallbacks: vec!["fallback".to_owned()],
        params: json!({"text": text}),
    }
}

fn click(client: &str, at_ms: u64, key: &str) -> ClientSpec {
    let mut spec = ClientSpec::new(client, client);
    spec.actions = vec![Action::Create {
        at_ms,
        jitter_ms: 20,
        key: key.to_owned(),
        request: request("Where is ORD-5?"),
        retries: 0,
        retry_after_ms: 1_000,
    }];
    spec
}

/// The primary always fails; the fallback is certified; Alice's job fails
/// over before `change_at_ms`, Bob's after it.
fn failover_world(fallback: ProviderProfile, change_at_ms: Option<u64>) -> Scenario {
    let mut topology = Topology::default();
    topology.providers[0].behaviour.error_per_mille = 1_000;
    topology.providers[1] = fallback;
    topology.worker.attempts_max = 2;
    Scenario {
        name: "failover".to_owned(),
        description: String::new(),
        topology,
        policy: Policy::Strict,
        clients: vec![click("alice", 0, "a-1"), click("bob", 4_000, "b-1")],
        faults: change_at_ms
            .map(|at_ms| FaultSpec {
                when: When::At { at_ms },
                fault: Fault::ProviderModelChange {
                    provider: "fallback".to_owned(),
                    model: "fallback-model-v2".to_owned(),
                },
            })
            .into_iter()
            .collect(),
        timing: Timing::default(),
        expect_windows: vec![],
    }
}

/// Which clients' jobs ran an attempt on the fallback.
fn fallback_jobs(outcome: &idem_sim::run::RunOutcome) -> usize {
    outcome
        .dump
        .attempts
        .iter()
        .filter(|a| a.provider == "fallback")
        .count()
}

#[test]
fn sim_a_model_switch_makes_the_certificate_stale() {
    let fallback = profile(Behaviour::default(), TokenizerProfile::default());
    // Without the switch, both jobs fail over.
    let steady = run(&failover_world(fallback.clone(), None), 3, Design::Correct).expect("runs");
    assert_eq!(
        steady.report.verdict,
        Verdict::Pass,
        "{:?}",
        steady.report.violations
    );
    assert_eq!(fallback_jobs(&steady), 2);

    let switched = failover_world(fallback, Some(2_500));
    let outcome = run(&switched, 3, Design::Correct).expect("runs");
    assert_eq!(
        outcome.report.verdict,
        Verdict::Pass,
        "{:?}",
        outcome.report.violations
    );
    assert_eq!(
        fallback_jobs(&outcome),
        1,
        "only Alice's job, before the switch"
    );
    assert!(outcome.report.windows[&Window::FailoverRefused] >= 1);

    // The naive design fails over blindly, and the oracle sees the stale
    // certificate.
    let blind = run(&switched, 3, Design::BlindFailover).expect("runs");
    let stale: Vec<_> = blind
        .report
        .violations
        .iter()
        .filter(|v| v.invariant == Invariant::CertifiedFailover)
        .collect();
    assert_eq!(stale.len(), 1, "{:?}", blind.report.violations);
    assert!(
        stale[0]
            .message
            .contains("not the certified fallback-model"),
        "{}",
        stale[0].message
    );
}

#[test]
fn sim_a_flag_cannot_certify_a_defective_provider() {
    let prose = profile(
        Behaviour {
            contract: ContractMode::Prose,
            ..Behaviour::default()
        },
        TokenizerProfile::default(),
    );
    let outcome = run(&failover_world(prose, None), 1, Design::Correct).expect("runs");
    assert_eq!(
        outcome.report.verdict,
        Verdict::Pass,
        "{:?}",
        outcome.report.violations
    );
    assert_eq!(fallback_jobs(&outcome), 0);
    let certification = outcome
        .trace
        .events
        .iter()
        .find_map(|e| match &e.body {
            TraceBody::Certification {
                provider,
                passed,
                failed_checks,
                ..
            } if provider == "fallback" => Some((*passed, failed_checks.clone())),
            _ => None,
        })
        .expect("the fallback was certified before the run");
    assert_eq!(certification, (false, vec!["parse".to_owned()]));
}

#[test]
fn sim_certification_keeps_a_seed_one_trace() {
    let fallback = profile(
        Behaviour {
            latency_jitter_ms: 50,
            error_per_mille: 100,
            ..Behaviour::default()
        },
        TokenizerProfile::default(),
    );
    // The certification itself, run twice from scratch: the same answers,
    // the same failures, in the same order.
    let first = certify_afresh(&fallback);
    assert_eq!(first, certify_afresh(&fallback));
    let scenario = failover_world(fallback, Some(2_500));
    let report = determinism::check(&scenario, 5, Design::Correct).expect("runs");
    assert!(report.deterministic(), "{:?}", report.divergence);
}
