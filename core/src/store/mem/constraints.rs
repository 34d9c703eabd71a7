//! The constraints a naive design's store lacks: the bench's alone, so
//! the product's store cannot be built without one.

use serde::{Deserialize, Serialize};

use crate::design::Design;

/// Which constraints the store enforces. All of them, unless a naive design
/// under test removes one (the simulator's mutants), exactly as dropping the
/// constraint would in PostgreSQL. Only the bench can drop one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Constraints {
    /// `unique (owner_id, idempotency_key)` on jobs.
    pub owner_key_unique: bool,
    /// That constraint made global, `unique (idempotency_key)`: a key is
    /// looked up whoever's it is (the global-key design).
    #[serde(default)]
    pub key_global: bool,
    /// The partial unique index `attempts_one_open`.
    pub one_open_attempt: bool,
    /// The completion's `WHERE version = $2 AND completed_by IS NULL`.
    /// Without it the last writer wins.
    pub completion_cas: bool,
    /// The planted bug: `completed_by IS NOT NULL` instead of `IS NULL`.
    pub completion_cas_swapped: bool,
}

impl Default for Constraints {
    fn default() -> Self {
        Self {
            owner_key_unique: true,
            key_global: false,
            one_open_attempt: true,
            completion_cas: true,
            completion_cas_swapped: false,
        }
    }
}

impl Constraints {
    /// What the schema of `design` enforces: a naive design that does
    /// without a constraint runs against a store that lacks it.
    pub fn for_design(design: Design) -> Self {
        Self {
            owner_key_unique: design != Design::CheckThenInsert,
            key_global: design == Design::GlobalKey,
            one_open_attempt: design != Design::UnguardedAttempts,
            completion_cas: design != Design::LastWriterWins,
            completion_cas_swapped: design == Design::PlantedSwappedCas,
        }
    }
}
