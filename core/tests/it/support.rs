//! Builders shared by the integration tests.

use std::sync::Arc;

use idem_core::clock::{ManualClock, SeededIds};
use idem_core::engine::{Engine, Policy};
use idem_core::store::Store;
use idem_model::contract::{Certificate, Providers};
use idem_model::model::{JobRequest, OwnerId};
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

/// A response read off the wire.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: http::HeaderMap,
    /// The body parsed as JSON, or `Value::Null` when empty or not JSON.
    pub body: Value,
    /// The body as sent, for what serde_json's reading would round.
    pub text: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// One HTTP/1 request over a fresh loopback connection.
pub async fn send(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Vec<u8>>,
) -> Reply {
    use http_body_util::{BodyExt, Full};
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connect to the service");
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .expect("HTTP/1 handshake");
    tokio::spawn(connection);
    let mut request = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request
        .body(Full::new(bytes::Bytes::from(body.unwrap_or_default())))
        .expect("a well-formed request");
    let response = sender.send_request(request).await.expect("a response");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("the body")
        .to_bytes();
    Reply {
        status,
        headers,
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        text: String::from_utf8_lossy(&bytes).into_owned(),
    }
}
