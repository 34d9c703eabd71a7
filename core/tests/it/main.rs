//! Integration tests of idem-core, in one binary. Tests that need
//! PostgreSQL get a fresh database of their own from the throwaway cluster
//! that `idem_core::testing::pg` starts on first use.

mod certify;
mod cli;
mod conformance;
mod differential;
mod hardening;
mod http;
mod http_hardening;
mod http_ops;
mod lost_answers;
mod pg_engine;
mod provider;
mod reconciler;
mod support;
mod worker;
