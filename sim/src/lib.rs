//! idem-sim
