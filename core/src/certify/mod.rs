//! Provider contract certification.
//!
//! Providers that share a code path, an HTTP client and a JSON Schema can
//! still behave differently: one invents a top-level key, another answers in
//! prose, a third ignores the system prompt's formats and returns valid JSON
//! that the business logic cannot read. Automatic failover is safe only to a
//! provider *proven* to share the operating contract, so a certificate here
//! is the outcome of a run, not a flag:
//!
//! - [`spec`]: the contract as data (prompt template, strict output schema,
//!   business type, corpus, temperature, samples); `compile` reads and
//!   checks its files with `path:line:col` errors; the shipped one is
//!   [`Contract::shipped`];
//! - [`business`]: the business types outputs must deserialize into;
//! - [`tokenizer`]: the prompt through the provider's real vocabulary;
//! - [`run`]: the run itself, over any [`endpoint::ChatEndpoint`] (the
//!   real OpenAI-compatible client, on real or simulated sockets); `calls`
//!   sends its calls and keeps what each one saw;
//! - [`report`]: the table, the failures and the certificate's evidence;
//! - [`manage`]: recording, listing and revoking certificates.
//!
//! This is product code: `idem-server serve --certify NAME` runs it at
//! start, and `idem certify` / `idem-server certify` on demand.

pub mod business;
mod calls;
mod compile;
pub mod endpoint;
pub mod manage;
pub mod report;
pub mod run;
pub mod spec;
pub mod tokenizer;

pub use calls::Progress;
pub use report::{Certification, Check, Target};
pub use run::{
    CERTIFY_DEADLINE_MS_DEFAULT, CertifyError, ChatAnswer, ChatEndpoint, ChatRequest, RunBounds,
    RunLimits, certify, certify_bounded, certify_with_progress, names_the_model,
};
pub use spec::{Contract, ContractError};
pub use tokenizer::{Encoding, SpecialTokens, TokenizerProfile};
