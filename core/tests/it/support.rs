//! Builders shared by the integration tests.

use std::sync::Arc;

use idem_core::clock::{ManualClock, SeededIds};
use idem_core::contract::{Certificate, Providers};
use idem_core::engine::{Engine, Policy};
use idem_core::model::{JobRequest, OwnerId};
use idem_core::store::Store;
use serde_json::{Value, json};

pub const PRIMARY: &str = "primary";
pub const FALLBACK: &str = "fallback";

pub fn owner(name: &str) -> OwnerId {
    OwnerId(name.to_owned())
}

pub fn request(params: Value) -> JobRequest {
    JobRequest {
        provider: PRIMARY.to_owned(),
        fallbacks: vec![FALLBACK.to_owned()],
        params,
    }
}

pub fn summarize(prompt: &str) -> JobRequest {
    request(json!({"prompt": prompt, "temperature": 0.1}))
}

/// An engine over `store` with a manual clock and seeded ids.
pub fn engine(store: Arc<dyn Store>, policy: Policy, seed: u64) -> Engine {
    Engine::new(
        store,
        Arc::new(ManualClock::default()),
        Arc::new(SeededIds::new(seed)),
        Providers::named([PRIMARY, FALLBACK, "uncertified"]),
        policy,
    )
}

/// Stores a passed certificate for the fallback under the engine's contract.
pub async fn certify_fallback(engine: &Engine) {
    let key = engine
        .providers()
        .certificate_key(FALLBACK)
        .expect("the fallback is a known provider");
    engine
        .store()
        .put_certificate(Certificate {
            key,
            passed: true,
            evidence: json!({"cases": 1}),
            at: engine.clock().now(),
        })
        .await
        .expect("certificate stored");
}
