//! Integration tests of idem-bench: the command line and what each command
//! does (runs, sweeps, mutants, reports, the property test, fuzzing,
//! explanations, real mode end to end), the shards, and the shape and docs
//! of the whole workspace.

mod bench;
mod cli;
mod docs;
mod explain;
mod explore;
mod fuzz;
mod mutants;
mod real;
mod report;
mod shape;
mod shards;
