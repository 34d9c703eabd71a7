//! idem-oracle's integration tests: the oracle on runs built by hand.

mod judge;
