//! The attempt policy: whether attempts of one job may overlap. The engine
//! enforces it; the oracle reads it to judge the guard (invariant 4).

use serde::{Deserialize, Serialize};

/// Whether attempts may overlap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Policy {
    /// One attempt in flight at a time (the default).
    #[default]
    Strict,
    /// A second attempt may start on a certified fallback while the first is
    /// running and silent past `hedge_after_ms`.
    Hedged { hedge_after_ms: u64 },
}

impl Policy {
    pub fn allows_overlap(self) -> bool {
        matches!(self, Policy::Hedged { .. })
    }
}
