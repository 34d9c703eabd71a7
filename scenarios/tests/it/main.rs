//! Integration tests of idem-scenarios: the catalogue, validation errors,
//! the command line, and the shape of the workspace's code.

mod bench;
mod catalog;
mod cli;
mod docs;
mod explain;
mod explore;
mod fuzz;
mod liveness;
mod mutants;
mod pgbench;
mod real;
mod report;
mod same_script;
mod scheduler;
mod shape;
mod shards;
mod validation;
