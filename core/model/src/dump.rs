//! A store's whole content, in a stable order: what tests compare and what
//! the oracle reads after a run.

use serde::{Deserialize, Serialize};

use crate::model::{Attempt, Event, Job};

/// Everything a store holds, in a stable order; for tests and the oracle.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StoreDump {
    /// Ordered by (owner, key).
    pub jobs: Vec<Job>,
    /// Ordered by (job id, seq).
    pub attempts: Vec<Attempt>,
    /// Ordered by seq.
    pub events: Vec<Event>,
}
