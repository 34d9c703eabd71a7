//! idem-model: idem's vocabulary, with no engine and no I/O.
//!
//! A [`model::Job`] is the durable record of one user intent; an
//! [`model::Attempt`] is one try to fulfil it. The legal moves of an attempt
//! are a table ([`transition`]); an idempotency key is bound to the
//! canonical request ([`fingerprint`], over the strict parser of [`json`]);
//! failover needs a [`contract`] certificate. The policies and the loops'
//! configurations ([`policy`], [`loops`]) and what the bench records of a
//! run ([`ledger`], [`store_fault`], [`dump`]) are data too.
//!
//! The engine (idem-core) re-exports every module here under its old path;
//! the oracle (idem-oracle) and the reports (idem-reports) depend on this
//! crate and not on the engine, so that what judges and what shows a run
//! share no code with the decisions they judge.

pub mod contract;
pub mod document;
pub mod dump;
pub mod fingerprint;
pub mod json;
pub mod ledger;
pub mod loops;
pub mod model;
pub mod policy;
pub mod stamp;
pub mod store_fault;
pub mod transition;
