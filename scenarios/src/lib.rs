//! idem-scenarios
