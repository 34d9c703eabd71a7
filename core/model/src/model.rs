//! The domain model: a [`Job`] is the durable record of one user intent, an
//! [`Attempt`] is one try to fulfil it, and an [`Event`] is one line of the
//! decision trace a reviewer reads to see why the engine did what it did.

use std::fmt;
use std::str::FromStr;

use crate::document::Document;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

/// Timestamps come from the injected [`crate::clock::Clock`], never from the
/// database's `now()`, so that the simulator controls time.
pub type Timestamp = DateTime<Utc>;

macro_rules! uuid_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub Uuid);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl FromStr for $name {
            type Err = uuid::Error;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Uuid::parse_str(s).map($name)
            }
        }
    };
}

uuid_id!(
    /// Identifies a job. Minted by the engine's [`crate::clock::IdSource`].
    JobId
);
uuid_id!(
    /// Identifies an attempt. It doubles as the provider-side idempotency key,
    /// so a provider that honours keys executes one attempt at most once.
    AttemptId
);

/// The owner an idempotency key is scoped to. It comes from the caller's
/// credentials, never from the request body.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct OwnerId(pub String);

impl fmt::Display for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The longest idempotency key accepted, in bytes.
pub const IDEMPOTENCY_KEY_LEN_MAX: usize = 255;

/// A client-chosen idempotency key: 1–255 visible ASCII characters (0x21–0x7E).
/// Validation happens once, at construction, so every key in the system is valid.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct IdempotencyKey(String);

/// Why a string is not a valid idempotency key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("the idempotency key is empty")]
    Empty,
    #[error(
        "the idempotency key is {len_bytes} bytes long; at most {IDEMPOTENCY_KEY_LEN_MAX} are allowed"
    )]
    TooLong { len_bytes: usize },
    #[error("the idempotency key has a character that is not visible ASCII at byte {position}")]
    NotVisibleAscii { position: usize },
}

impl IdempotencyKey {
    pub fn parse(raw: &str) -> Result<Self, KeyError> {
        if raw.is_empty() {
            return Err(KeyError::Empty);
        }
        if raw.len() > IDEMPOTENCY_KEY_LEN_MAX {
            return Err(KeyError::TooLong {
                len_bytes: raw.len(),
            });
        }
        if let Some(position) = raw.bytes().position(|b| !(0x21..=0x7e).contains(&b)) {
            return Err(KeyError::NotVisibleAscii { position });
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for IdempotencyKey {
    type Error = KeyError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<IdempotencyKey> for String {
    fn from(key: IdempotencyKey) -> Self {
        key.0
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Declares a string-backed state enum whose spelling is shared by Rust,
/// JSON and the `state` columns of the database.
macro_rules! state_enum {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum $name { $($(#[$vdoc])* $variant),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = UnknownState;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($text => Ok($name::$variant),)+
                    other => Err(UnknownState { kind: stringify!($name), text: other.to_owned() }),
                }
            }
        }
    };
}

/// A state string read back from storage that this build does not know.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} {text:?}")]
pub struct UnknownState {
    pub kind: &'static str,
    pub text: String,
}

state_enum!(
    /// The state of a job. Only a completion (compare-and-swap) or giving up
    /// moves a job out of `Pending`, and both raise its version.
    JobState {
        /// No attempt has won yet; attempts may run.
        Pending = "pending",
        /// One attempt won the compare-and-swap; `completed_by` names it.
        Succeeded = "succeeded",
        /// Every allowed attempt failed definitively; nothing will run again.
        Failed = "failed",
    }
);

state_enum!(
    /// The state of one attempt; the legal moves are in [`crate::transition`].
    AttemptState {
        /// The row exists; the provider may or may not have the request.
        Starting = "starting",
        /// The request was dispatched; the provider has it.
        Running = "running",
        /// This attempt won the job's compare-and-swap.
        Succeeded = "succeeded",
        /// A definitive failure: the provider did not and will not execute it.
        Failed = "failed",
        /// A timeout after dispatch: the provider may still be working.
        /// Blocks new attempts until it is resolved.
        Unknown = "unknown",
        /// Cancelled out of band while unknown.
        Cancelled = "cancelled",
        /// It completed after another attempt had won; its output was discarded.
        Lost = "lost",
    }
);

impl JobState {
    pub fn is_terminal(self) -> bool {
        !matches!(self, JobState::Pending)
    }
}

/// What a client asks for. Its canonical JSON form is what the idempotency
/// key is bound to (see [`crate::fingerprint`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobRequest {
    pub provider: String,
    #[serde(default)]
    pub fallbacks: Vec<String>,
    #[serde(default = "empty_object")]
    pub params: Value,
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

/// The durable record of one intent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub id: JobId,
    pub owner_id: OwnerId,
    pub idempotency_key: IdempotencyKey,
    /// Hex SHA-256 of the canonical request.
    pub request_fingerprint: String,
    /// The canonical request body, its numbers exact.
    pub request: Document,
    pub provider: String,
    pub fallbacks: Vec<String>,
    pub state: JobState,
    /// Grows by one on every completion or give-up; never shrinks.
    pub version: i64,
    pub completed_by: Option<AttemptId>,
    /// The winning output, its numbers exact.
    pub result: Option<Document>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// One try at fulfilling a job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    pub id: AttemptId,
    pub job_id: JobId,
    /// 1 for the first attempt of a job, then 2, 3, ...
    pub seq: i32,
    pub provider: String,
    pub state: AttemptState,
    /// The job version this attempt read when it started; its completion is a
    /// compare-and-swap against it.
    pub read_version: i64,
    pub started_at: Timestamp,
    pub ended_at: Option<Timestamp>,
    pub output: Option<Value>,
    pub error: Option<Value>,
}

state_enum!(
    /// The kinds of decision-trace events.
    EventKind {
        /// A job was created for a new (owner, key). Never stored: a store's
        /// `events` synthesizes it from the job's row as the first event.
        /// (A create with a known key and the same body records nothing: it
        /// decides nothing; the engine's metrics count it.)
        Created = "created",
        /// A create with a known key and a different body was refused.
        KeyReused = "key_reused",
        AttemptStarted = "attempt_started",
        /// A new attempt was refused because another was in flight or the job was done.
        AttemptRefused = "attempt_refused",
        /// An attempt changed state (dispatch, timeout to unknown, failure, cancel).
        AttemptTransition = "attempt_transition",
        /// An attempt won the compare-and-swap.
        Won = "won",
        /// An attempt completed after another had won; its output was discarded.
        RaceLost = "race_lost",
        /// An unknown attempt was resolved out of band (reconciler or operator).
        Resolved = "resolved",
        /// The job gave up after its last allowed attempt failed.
        JobFailed = "job_failed",
        /// A failover or hedge to an uncertified provider was refused.
        FailoverRefused = "failover_refused",
        /// A hedge attempt was started on a certified fallback.
        HedgeFired = "hedge_fired",
        /// A completion whose acknowledgement was lost was re-checked.
        AckRechecked = "ack_rechecked",
        /// The reconciler looked at an attempt and left a note.
        ReconcilerNote = "reconciler_note",
    }
);

/// A decision-trace event to record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NewEvent {
    pub job_id: JobId,
    pub attempt_id: Option<AttemptId>,
    pub at: Timestamp,
    pub kind: EventKind,
    pub detail: Value,
}

/// A recorded decision-trace event; `seq` orders events across the store.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub seq: i64,
    pub job_id: JobId,
    pub attempt_id: Option<AttemptId>,
    pub at: Timestamp,
    pub kind: EventKind,
    pub detail: Value,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_validation() {
        assert!(IdempotencyKey::parse("order-42").is_ok());
        assert_eq!(IdempotencyKey::parse(""), Err(KeyError::Empty));
        assert_eq!(
            IdempotencyKey::parse(&"k".repeat(256)),
            Err(KeyError::TooLong { len_bytes: 256 })
        );
        assert!(IdempotencyKey::parse(&"k".repeat(255)).is_ok());
        assert_eq!(
            IdempotencyKey::parse("a b"),
            Err(KeyError::NotVisibleAscii { position: 1 })
        );
        assert_eq!(
            IdempotencyKey::parse("clé"),
            Err(KeyError::NotVisibleAscii { position: 2 })
        );
    }

    #[test]
    fn states_round_trip_through_text() {
        for state in AttemptState::ALL {
            assert_eq!(state.as_str().parse::<AttemptState>(), Ok(*state));
        }
        for state in JobState::ALL {
            assert_eq!(state.as_str().parse::<JobState>(), Ok(*state));
        }
        assert!("paused".parse::<JobState>().is_err());
    }
}
