//! What a chunk held at a link waits for before it is delivered: the
//! proxy (`super::proxy`) holds it, the taps that read a link's protocol
//! decide it.

use super::force::ForcedWait;
use super::gate::TriggerGate;

/// What a held chunk waits for before it is delivered.
#[derive(Clone, Debug)]
pub enum Barrier {
    /// An answer that may trigger a fault ([`super::gate`]).
    Trigger(TriggerGate),
    /// A race being forced ([`super::force`]).
    Forced(ForcedWait),
}

impl Barrier {
    /// Resolves when the chunk may go on (every wait is bounded).
    pub async fn pass(&self) {
        match self {
            Barrier::Trigger(gate) => gate.pass().await,
            Barrier::Forced(wait) => wait.pass().await,
        }
    }
}
