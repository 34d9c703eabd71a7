//! Integration tests of idem-scenarios: the catalogue, validation errors,
//! and what the catalogue's scenarios reach in the simulator.

mod catalog;
mod liveness;
mod scheduler;
mod validation;
