//! A provider to test against: the wire API of [`super::openai`] served by
//! axum, with a behaviour profile that can be changed while it runs.
//!
//! The same code serves on tokio's `TcpListener` in tests and on a turmoil
//! listener in the simulator ([`serve`] is generic over the listener), so it
//! must be deterministic: delays are `crate::timer::sleep` (sim time under
//! turmoil), randomness comes from a ChaCha generator seeded by the profile,
//! and everything that is iterated is ordered.
//!
//! The server keeps a ledger of executions. That ledger is the ground truth
//! the simulator's side-effect invariant is checked against: how many times
//! did the provider actually do (and bill) the work of one attempt?
//!
//! Endpoints:
//! - `POST /v1/chat/completions` with `Idempotency-Key`: executes (or, when
//!   keys are honoured, replays) and answers a chat completion.
//! - `GET /v1/executions/{key}`: the latest execution under `key`, or 404
//!   `{"status":"not_found"}`.
//! - `POST /v1/executions/{key}/cancel`: `{"cancelled": bool}`.
//! - `GET /v1/models/{model}`: the model object, whose `root` is the model
//!   really served under that name (see [`Behaviour::served_model`]).
//!
//! What it answers is a deterministic stand-in for a model that keeps the
//! shipped triage contract (`core/contracts/triage`): it reads the user
//! message as the customer's message and extracts order references, guesses
//! the language from the script and common words, and copies the first
//! line. [`ContractMode`] and [`Behaviour::deviate_one_in`] make it break
//! that contract in the ways certification exists to catch.

mod content;
mod http;
mod state;

pub use content::ContractMode;
pub use http::{REQUEST_BODY_LEN_MAX_BYTES, TLS_HANDSHAKE_TIMEOUT_MS, TlsListener, router, serve};
/// The ledger's vocabulary lives in idem-model: the oracle reads it.
pub use idem_model::ledger::{Execution, ExecutionOutcome};
pub use state::{Behaviour, Choice, Chooser, EXECUTIONS_MAX, ExecutionObserver, ProviderServer};
