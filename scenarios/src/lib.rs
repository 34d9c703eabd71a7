//! idem-scenarios: scenario files, the catalogue, proptest strategies, and
//! the `idem` command line for people and CI.

pub mod cli;
