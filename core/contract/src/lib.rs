//! The operating contract a provider is certified against, as data.
//!
//! Providers that share a code path, an HTTP client and a JSON Schema can
//! still behave differently: one invents a top-level key, another answers in
//! prose, a third ignores the system prompt's formats and returns valid JSON
//! that the business logic cannot read. This crate says what "the same
//! contract" means, without any I/O of its own; idem-core's `certify`
//! module runs a certification against it and records the certificate.
//!
//! - [`spec`]: the contract (prompt template, strict output schema,
//!   business type, corpus, temperature, samples); `compile` reads and
//!   checks its files with `path:line:col` errors; the shipped one is
//!   [`spec::Contract::shipped`];
//! - [`business`]: the business types outputs must deserialize into;
//! - [`tokenizer`]: the prompt through the provider's real vocabulary;
//! - [`report`]: a run's table, its failures and the certificate's
//!   evidence.

pub mod business;
mod compile;
pub mod report;
pub mod spec;
pub mod tokenizer;
