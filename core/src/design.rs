//! Designs under test. `Correct` is idem. The others are the naive designs
//! of docs/MODEL.md, built into the same engine and store behind this one
//! switch, so that the simulator can prove its power by catching them.
//! Production always runs `Correct`; nothing outside the simulator and the
//! tests selects another design.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Which design the engine and the in-process store implement.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Design {
    /// idem as designed.
    #[default]
    Correct,
    /// Looks the key up, then inserts; no unique constraint.
    CheckThenInsert,
    /// A reused key with a new body returns the old job.
    NoFingerprint,
    /// A timeout is a failure: the attempt fails and a retry follows at once.
    TimeoutIsFailure,
    /// Completion writes the result without the compare-and-swap.
    LastWriterWins,
    /// No guard: a new attempt starts whatever the others are doing.
    UnguardedAttempts,
    /// Failover and hedging ignore contract certificates.
    BlindFailover,
    /// The key is scoped to a session (each API replica), not to the owner.
    SessionScopedKey,
    /// The key is scoped globally (`unique (idempotency_key)`), not to the
    /// owner: another owner's equal key is taken for this one's, so a
    /// fresh intent is refused as a reused key, or answered with another
    /// owner's job.
    GlobalKey,
    /// A completion whose acknowledgement is lost is called lost, unchecked.
    LostAckMeansLost,
    /// The reconciler's waits (stale, overdue) subtract the `started_at`
    /// another host's clock wrote from its own clock's `now()`, so a clock
    /// ahead or behind makes it act early.
    WallClockDeadlines,
    /// Not a design anyone would choose: a bug planted on purpose (the
    /// compare-and-swap's `completed_by IS NULL` swapped for `IS NOT NULL`)
    /// so that a test can show the property test finding and shrinking a
    /// real defect. Outside `ALL`: the mutants matrix does not list it.
    PlantedSwappedCas,
}

impl Design {
    pub const ALL: &'static [Design] = &[
        Design::Correct,
        Design::CheckThenInsert,
        Design::NoFingerprint,
        Design::TimeoutIsFailure,
        Design::LastWriterWins,
        Design::UnguardedAttempts,
        Design::BlindFailover,
        Design::SessionScopedKey,
        Design::GlobalKey,
        Design::LostAckMeansLost,
        Design::WallClockDeadlines,
    ];

    /// The naive designs only.
    pub fn mutants() -> impl Iterator<Item = Design> {
        Self::ALL.iter().copied().filter(|d| *d != Design::Correct)
    }

    pub fn name(self) -> &'static str {
        match self {
            Design::Correct => "correct",
            Design::CheckThenInsert => "check-then-insert",
            Design::NoFingerprint => "no-fingerprint",
            Design::TimeoutIsFailure => "timeout-is-failure",
            Design::LastWriterWins => "last-writer-wins",
            Design::UnguardedAttempts => "unguarded-attempts",
            Design::BlindFailover => "blind-failover",
            Design::SessionScopedKey => "session-scoped-key",
            Design::GlobalKey => "global-key",
            Design::LostAckMeansLost => "lost-ack-means-lost",
            Design::WallClockDeadlines => "wall-clock-deadlines",
            Design::PlantedSwappedCas => "planted-swapped-cas",
        }
    }
}

impl fmt::Display for Design {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown design name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown design {0:?}; known: correct, check-then-insert, no-fingerprint, timeout-is-failure, last-writer-wins, unguarded-attempts, blind-failover, session-scoped-key, global-key, lost-ack-means-lost, wall-clock-deadlines"
)]
pub struct UnknownDesign(pub String);

impl FromStr for Design {
    type Err = UnknownDesign;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Design::ALL
            .iter()
            .copied()
            .chain([Design::PlantedSwappedCas])
            .find(|d| d.name() == s)
            .ok_or_else(|| UnknownDesign(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for design in Design::ALL {
            assert_eq!(design.name().parse::<Design>(), Ok(*design));
            assert_eq!(
                serde_json::to_value(design).ok(),
                Some(serde_json::json!(design.name()))
            );
        }
        assert!("nope".parse::<Design>().is_err());
        assert_eq!("planted-swapped-cas".parse(), Ok(Design::PlantedSwappedCas));
        assert!(!Design::ALL.contains(&Design::PlantedSwappedCas));
        assert_eq!(Design::mutants().count(), 10);
    }
}
