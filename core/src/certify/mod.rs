//! Provider contract certification.
//!
//! Providers that share a code path, an HTTP client and a JSON Schema can
//! still behave differently: one invents a top-level key, another answers in
//! prose, a third ignores the system prompt's formats and returns valid JSON
//! that the business logic cannot read. Automatic failover is safe only to a
//! provider *proven* to share the operating contract, so a certificate here
//! is the outcome of a run, not a flag.
//!
//! The contract itself, as data (prompt, schema, business type, corpus,
//! tokenizers, the report's table), is the crate idem-contract; here:
//!
//! - [`run`]: the run itself, over any [`endpoint::ChatEndpoint`] (the
//!   real OpenAI-compatible client, on real or simulated sockets); `calls`
//!   sends its calls and keeps what each one saw;
//! - [`manage`]: recording, listing and revoking certificates.
//!
//! This is product code: `idem-server serve --certify NAME` runs it at
//! start, and `idem certify` / `idem-server certify` on demand.

mod calls;
pub mod endpoint;
pub mod manage;
pub mod run;

pub use calls::Progress;
pub use run::{
    CERTIFY_DEADLINE_MS_DEFAULT, CertifyError, ChatAnswer, ChatEndpoint, ChatRequest, RunBounds,
    RunLimits, certify, certify_bounded, certify_with_progress, names_the_model,
};
