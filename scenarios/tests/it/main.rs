//! Integration tests of idem-scenarios: the catalogue, validation errors,
//! and the command line.

mod bench;
mod catalog;
mod cli;
mod explore;
mod fuzz;
mod liveness;
mod mutants;
mod pgbench;
mod report;
mod scheduler;
mod shards;
mod validation;
