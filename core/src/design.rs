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
    /// Zoo: a worker task releases its hold on a job only when it finishes,
    /// not when it is dropped: a task cancelled with its host (a crash mid
    /// `start_attempt`) leaves the job held, and this worker never polls it
    /// again (found by `idem explore`, invariant 10).
    ZooJobHoldLeakedOnCancel,
    /// Zoo: the reconciler's presumed-orphaned move lands from whatever
    /// state the attempt is in by then, not only from the state whose
    /// silence it timed: a dispatch that landed behind a slow store is moved
    /// to unknown long before `running_stale_ms` (found by `idem fuzz`,
    /// invariant 12).
    ZooOrphanMoveFromAnyState,
    /// Zoo: a status lookup that cannot be read (unreachable, refused, an
    /// answer that breaks the contract) leaves the attempt unknown for ever,
    /// never reported blocked, however overdue (found by `idem fuzz`,
    /// invariant 10).
    ZooUnreadableStatusNeverBlocked,
    /// Zoo: the reconciler marks an attempt's blocked note as made before
    /// the store has it: one failed write hides the blocked job for good
    /// (found by `idem fuzz`, invariant 10).
    ZooBlockedNoteMarkedBeforeWritten,
    /// Zoo: the reconciler's status lookup and cancel are not bounded: one
    /// answer lost in a partition stalls the pass, and every later one
    /// (found by `idem fuzz`, invariant 10).
    ZooUnboundedStatusLookup,
    /// Zoo: every reconciler pass reads the same oldest page of open
    /// attempts: a page of blocked ones starves every attempt behind them
    /// (found by `idem fuzz`, invariant 10).
    ZooReconcilerRereadsOldestPage,
    /// Zoo: after a cancelled attempt the worker retries the same provider
    /// without asking whether it still qualifies: a fallback whose
    /// certificate lapsed is refused at every poll, and the job stays
    /// pending (found by `idem fuzz`, invariant 10).
    ZooRetryCancelledOnLapsedFallback,
    /// Zoo (a bug the search found in idem's own design, re-planted): a
    /// failover's certificate is checked only when its attempt starts, not
    /// in the step that dispatches it, and the provider's answer is used
    /// whatever model it says produced it. A store call slow enough for the
    /// fallback to switch models in between sends the job to an uncertified
    /// model whose output can win (found by `idem fuzz`, invariant 7).
    ZooCertificateCheckedAtStart,
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

    /// The zoo: bugs the search found in idem's own design, each re-planted
    /// by reverting exactly its fix. Outside `ALL`: the mutants matrix is
    /// for what a careless engineer writes; the zoo measures how soon the
    /// search finds what a careful one wrote.
    pub const ZOO: &'static [Design] = &[
        Design::ZooJobHoldLeakedOnCancel,
        Design::ZooOrphanMoveFromAnyState,
        Design::ZooUnreadableStatusNeverBlocked,
        Design::ZooBlockedNoteMarkedBeforeWritten,
        Design::ZooUnboundedStatusLookup,
        Design::ZooReconcilerRereadsOldestPage,
        Design::ZooRetryCancelledOnLapsedFallback,
        Design::ZooCertificateCheckedAtStart,
    ];

    /// Every design a name can select: `ALL`, the zoo, the planted bug.
    pub fn selectable() -> impl Iterator<Item = Design> {
        Self::ALL
            .iter()
            .chain(Self::ZOO)
            .copied()
            .chain([Design::PlantedSwappedCas])
    }

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
            Design::ZooJobHoldLeakedOnCancel => "zoo-job-hold-leaked-on-cancel",
            Design::ZooOrphanMoveFromAnyState => "zoo-orphan-move-from-any-state",
            Design::ZooUnreadableStatusNeverBlocked => "zoo-unreadable-status-never-blocked",
            Design::ZooBlockedNoteMarkedBeforeWritten => "zoo-blocked-note-marked-before-written",
            Design::ZooUnboundedStatusLookup => "zoo-unbounded-status-lookup",
            Design::ZooReconcilerRereadsOldestPage => "zoo-reconciler-rereads-oldest-page",
            Design::ZooRetryCancelledOnLapsedFallback => "zoo-retry-cancelled-on-lapsed-fallback",
            Design::ZooCertificateCheckedAtStart => "zoo-certificate-checked-at-start",
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
#[error("unknown design {0:?}; known: {known}", known = known_names())]
pub struct UnknownDesign(pub String);

/// The names a design can be selected by, for the error.
fn known_names() -> String {
    Design::selectable()
        .map(Design::name)
        .collect::<Vec<_>>()
        .join(", ")
}

impl FromStr for Design {
    type Err = UnknownDesign;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Design::selectable()
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
        for zoo in Design::ZOO {
            assert!(zoo.name().starts_with("zoo-"), "{zoo}");
            assert_eq!(zoo.name().parse::<Design>(), Ok(*zoo));
            assert!(!Design::ALL.contains(zoo));
        }
    }
}
