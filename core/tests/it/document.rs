//! The OpenAPI document the service serves, held to the server body by
//! body: each row's body is valid by the served document exactly when the
//! server takes it (issue 36: `params` was documented as an object while
//! any JSON was taken; numbers were documented within ±1e300 while the
//! server took up to ±1.797e308; a resolution took members its outcome
//! does not have, where a job refuses them).
//!
//! The server's verdict is its status; the document's is what the row
//! says, and, where serde_json reads the body without rounding a number
//! (so the validator sees what the server sees), the `jsonschema`
//! validator's verdict on the served schema as well.

use std::sync::Arc;

use idem_core::engine::Policy;
use idem_core::provider::server::Behaviour;
use idem_core::store::mem::MemStore;
use idem_model::json::Json;
use serde_json::{Value, json};

use crate::http::{ALICE, App, OPERATOR, quiet_config, start_app_on};
use crate::support::send;

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Where a row's body goes.
#[derive(Clone, Copy, Debug)]
enum Route {
    CreateJob,
    /// A resolution of an attempt that does not exist: a body the server
    /// reads is answered 404, one it refuses 400.
    Resolve,
}

impl Route {
    fn schema(self) -> &'static str {
        match self {
            Route::CreateJob => "JobRequest",
            Route::Resolve => "Resolution",
        }
    }
}

/// One body and whether the document calls it valid.
struct Row {
    route: Route,
    body: String,
    valid: bool,
}

fn row(route: Route, body: impl ToString, valid: bool) -> Row {
    Row {
        route,
        body: body.to_string(),
        valid,
    }
}

/// A job body whose `params` are the given text.
fn params(text: &str) -> String {
    format!(r#"{{"provider":"primary","params":{text}}}"#)
}

fn rows() -> Vec<Row> {
    use Route::{CreateJob as C, Resolve as R};
    let max_digits = format!("{:.0}", f64::MAX);
    let past_max_digits = format!("{}9", &max_digits[..max_digits.len() - 1]);
    vec![
        row(C, json!({"provider": "primary"}), true),
        row(C, params("{}"), true),
        row(
            C,
            params(r#"{"text":"x","n":[1,2.5,null,true,{"d":"e"}]}"#),
            true,
        ),
        // params: an object, nothing else.
        row(C, params("[null,null]"), false),
        row(C, params(r#""str""#), false),
        row(C, params("42"), false),
        row(C, params("null"), false),
        row(C, params("true"), false),
        // Numbers: up to f64::MAX in magnitude, exactly.
        row(C, params(r#"{"n":1e300}"#), true),
        row(C, params(r#"{"n":1.7976931348623157e308}"#), true),
        row(C, params(r#"{"n":-1.7976931348623157e308}"#), true),
        row(C, params(&format!(r#"{{"n":{max_digits}}}"#)), true),
        row(C, params(&format!(r#"{{"n":{past_max_digits}}}"#)), false),
        row(C, params(r#"{"n":1.7976931348623158e308}"#), false),
        row(C, params(r#"{"n":-1e309}"#), false),
        row(C, params(r#"{"n":18446744073709551617}"#), true),
        // Members, fallbacks and providers.
        row(C, json!({"provider": "primary", "extra": 1}), false),
        row(
            C,
            json!({"provider": "primary", "fallbacks": ["backup"]}),
            true,
        ),
        row(
            C,
            json!({"provider": "primary", "fallbacks": ["primary"]}),
            false,
        ),
        row(C, json!({"provider": "elsewhere"}), false),
        row(C, json!([]), false),
        // Resolutions: exactly the members of their outcome.
        row(R, json!({"outcome": "cancelled"}), true),
        row(R, json!({"outcome": "cancelled", "note": "x"}), false),
        row(R, json!({"outcome": "failed"}), true),
        row(R, json!({"outcome": "failed", "error": {"why": "x"}}), true),
        row(R, json!({"outcome": "failed", "reason": "x"}), false),
        row(R, json!({"outcome": "succeeded", "result": {"a": 1}}), true),
        row(R, json!({"outcome": "succeeded"}), false),
        row(
            R,
            json!({"outcome": "succeeded", "result": 1, "evidence": 2}),
            false,
        ),
        row(R, json!({"outcome": "unknown"}), false),
    ]
}

/// The served document's verdict on `body`, when serde_json reads the
/// body exactly (otherwise the validator would judge another number than
/// the server does).
fn document_verdict(document: &Value, route: Route, body: &str) -> Option<bool> {
    let value: Value = serde_json::from_str(body).ok()?;
    let exact = idem_model::json::parse(body.as_bytes()).ok()?;
    if Json::from_value(&value) != exact {
        return None;
    }
    let mut schema = document.clone();
    schema["$ref"] = json!(format!("#/components/schemas/{}", route.schema()));
    let validator = jsonschema::validator_for(&schema).expect("the served document compiles");
    Some(validator.is_valid(&value))
}

/// Whether the server took `body` on `route`.
async fn server_verdict(app: &App, route: Route, body: &str, n: usize) -> (bool, Value) {
    let key = format!("document-{n}");
    let (path, token) = match route {
        Route::CreateJob => ("/v1/jobs".to_owned(), ALICE),
        Route::Resolve => (
            format!("/v1/attempts/{}/resolution", uuid::Uuid::from_u128(7)),
            OPERATOR,
        ),
    };
    let headers = [
        ("authorization", token),
        ("idempotency-key", key.as_str()),
        ("content-type", "application/json"),
    ];
    let reply = send(
        app.addr,
        "POST",
        &path,
        &headers,
        Some(body.as_bytes().to_vec()),
    )
    .await;
    let taken = match route {
        Route::CreateJob => matches!(reply.status, 200 | 201),
        Route::Resolve => reply.status == 404,
    };
    let refused = matches!(reply.status, 400 | 422);
    assert!(
        taken || refused,
        "{body}: status {} {}",
        reply.status,
        reply.body
    );
    (taken, reply.body)
}

#[tokio::test]
async fn document_and_server_agree_on_every_body() -> TestResult {
    let app = start_app_on(
        Arc::new(MemStore::new()),
        Policy::Strict,
        vec![
            ("primary", Behaviour::default()),
            ("backup", Behaviour::default()),
        ],
        quiet_config(),
    )
    .await;
    let document = send(app.addr, "GET", "/openapi.json", &[], None).await.body;
    let mut validator_judged = 0;
    for (n, row) in rows().into_iter().enumerate() {
        let (taken, answer) = server_verdict(&app, row.route, &row.body, n).await;
        assert_eq!(taken, row.valid, "server on {}: {answer}", row.body);
        if let Some(valid) = document_verdict(&document, row.route, &row.body) {
            assert_eq!(valid, row.valid, "document on {}", row.body);
            validator_judged += 1;
        }
    }
    // The validator judged most rows; the rest carry numbers only the
    // exact reader sees.
    assert!(validator_judged >= 24, "{validator_judged} rows judged");
    Ok(())
}
