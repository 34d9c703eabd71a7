//! The request mix, and the ledger that checks every answer against it.
//!
//! Client `c` owns the keys `k-c-0`, `k-c-1`, …, created in order. A repeat
//! picks a client at random and one of the keys that client has already
//! seen created, so its original body is committed and the answer is
//! known: the same body replays that key's job, another body is refused.
//! Repeats cross clients, so a key is replayed while its owner goes on.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sqlx::Row;
use uuid::Uuid;

use idem_model::model::JobRequest;

use super::Checks;

/// The shares of the request mix, in percent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mix {
    /// A key seen before, with the body it was created with.
    pub repeat_same_body_percent: u32,
    /// A key seen before, with another body.
    pub repeat_other_body_percent: u32,
}

/// Half of the requests repeat a key with the same body; 5% reuse one with
/// another body; the rest are new keys.
pub const MIX: Mix = Mix {
    repeat_same_body_percent: 50,
    repeat_other_body_percent: 5,
};

pub const PRIMARY: &str = "primary";
pub const FALLBACK: &str = "fallback";

/// One request of the mix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ask {
    New { client: u32, index: u64 },
    SameBody { client: u32, index: u64 },
    OtherBody { client: u32, index: u64 },
}

impl Ask {
    pub fn key_of(self) -> (u32, u64) {
        match self {
            Ask::New { client, index }
            | Ask::SameBody { client, index }
            | Ask::OtherBody { client, index } => (client, index),
        }
    }

    pub fn key(self) -> String {
        let (client, index) = self.key_of();
        format!("k-{client}-{index}")
    }

    /// The body: the key's own intent, or (for another body) the same
    /// intent at another temperature.
    pub fn request(self) -> JobRequest {
        let (client, index) = self.key_of();
        let temperature = if matches!(self, Ask::OtherBody { .. }) {
            0.9
        } else {
            0.2
        };
        JobRequest {
            provider: PRIMARY.to_owned(),
            fallbacks: vec![FALLBACK.to_owned()],
            params: json!({
                "prompt": format!("Summarize document {client}-{index} in three sentences."),
                "temperature": temperature,
            }),
        }
    }
}

/// The shared state of one point's clients.
#[derive(Debug)]
pub struct Plan {
    pub seed: u64,
    pub clients: u32,
    pub owner: String,
    /// Per client: how many of its keys it has seen created.
    created: Vec<AtomicU64>,
}

impl Plan {
    pub fn new(seed: u64, clients: u32, owner: String) -> Self {
        Self {
            seed,
            clients,
            owner,
            created: (0..clients).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Client `client`'s generator: seeded by the run's seed, the point and
    /// the client, so that a run can be repeated.
    pub fn rng(&self, client: u32) -> ChaCha8Rng {
        ChaCha8Rng::seed_from_u64(
            self.seed ^ (u64::from(self.clients) << 32) ^ u64::from(client).wrapping_mul(0x9e37),
        )
    }

    /// The next request of `client`, whose next own key is `next_index`.
    pub fn next(&self, client: u32, next_index: u64, rng: &mut ChaCha8Rng) -> Ask {
        let roll = rng.random_range(0..100u32);
        let other = rng.random_range(0..self.clients);
        let seen = self.created[other as usize].load(Ordering::Acquire);
        if seen == 0 || roll >= MIX.repeat_same_body_percent + MIX.repeat_other_body_percent {
            return Ask::New {
                client,
                index: next_index,
            };
        }
        let index = rng.random_range(0..seen);
        if roll < MIX.repeat_same_body_percent {
            Ask::SameBody {
                client: other,
                index,
            }
        } else {
            Ask::OtherBody {
                client: other,
                index,
            }
        }
    }

    /// `client` has seen its key `index` created.
    pub fn created(&self, client: u32, index: u64) {
        self.created[client as usize].store(index + 1, Ordering::Release);
    }
}

/// How a request was answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    Created(Uuid),
    Replayed(Uuid),
    /// Another body refused; the store names the job, HTTP does not.
    Refused(Option<Uuid>),
    /// Anything else, described.
    Unexpected(String),
}

/// Every request and its answer, one client's or all merged.
#[derive(Debug, Default)]
pub struct Ledger {
    pub entries: Vec<(Ask, Answer)>,
}

impl Ledger {
    pub fn merge(&mut self, other: Ledger) {
        self.entries.extend(other.entries);
    }

    /// The key's job id as created, per key.
    fn created_ids(&self) -> BTreeMap<(u32, u64), Uuid> {
        self.entries
            .iter()
            .filter_map(|(ask, answer)| match (ask, answer) {
                (Ask::New { .. }, Answer::Created(id)) => Some((ask.key_of(), *id)),
                _ => None,
            })
            .collect()
    }

    /// Checks every answer against the mix; returns how many were wrong.
    pub fn check(&self, plan: &Plan, checks: &mut Checks) -> u64 {
        let created = self.created_ids();
        let mut wrong = 0u64;
        let listed_before = checks.violations.len();
        for (ask, answer) in &self.entries {
            checks.requests_checked += 1;
            let original = created.get(&ask.key_of()).copied();
            let fine = match (ask, answer) {
                (Ask::New { .. }, Answer::Created(_)) => {
                    checks.keys_created += 1;
                    true
                }
                (Ask::SameBody { .. }, Answer::Replayed(id)) if Some(*id) == original => {
                    checks.repeats_same_body += 1;
                    true
                }
                (Ask::OtherBody { .. }, Answer::Refused(named))
                    if named.is_none() || *named == original =>
                {
                    checks.repeats_other_body += 1;
                    true
                }
                _ => false,
            };
            if !fine {
                wrong += 1;
                // Bounded: the first few tell the story.
                if checks.violations.len() < listed_before + VIOLATIONS_LISTED_MAX {
                    checks.violations.push(format!(
                        "{}: {ask:?} with key {} was answered {answer:?} (key created as {original:?})",
                        plan.owner,
                        ask.key()
                    ));
                }
            }
        }
        if wrong as usize > VIOLATIONS_LISTED_MAX {
            checks.violations.push(format!(
                "{}: {} more wrong answers",
                plan.owner,
                wrong as usize - VIOLATIONS_LISTED_MAX
            ));
        }
        wrong
    }

    /// Checks the table: exactly one row per key created, with the id the
    /// creating answer named.
    pub fn check_rows(&self, owner: &str, rows: &BTreeMap<String, Uuid>, checks: &mut Checks) {
        let expected: BTreeMap<String, Uuid> = self
            .created_ids()
            .into_iter()
            .map(|((client, index), id)| (format!("k-{client}-{index}"), id))
            .collect();
        if &expected != rows {
            let missing = expected.keys().filter(|k| !rows.contains_key(*k)).count();
            let extra = rows.keys().filter(|k| !expected.contains_key(*k)).count();
            let other_id = expected
                .iter()
                .filter(|(k, id)| rows.get(*k).is_some_and(|row| row != *id))
                .count();
            checks.violations.push(format!(
                "{owner}: the table does not hold what the answers say: {missing} created keys \
                 missing, {extra} rows no answer created, {other_id} rows with another id"
            ));
        }
    }
}

/// How many wrong answers of one point are listed word for word.
const VIOLATIONS_LISTED_MAX: usize = 3;

/// The owner's rows: key -> job id. Tagged so that statement counts leave it out.
pub async fn rows_of(
    admin: &sqlx::PgPool,
    owner: &str,
) -> Result<BTreeMap<String, Uuid>, sqlx::Error> {
    let rows = sqlx::query(
        "/* idem_bench_rows */ select idempotency_key, id from idem.jobs where owner_id = $1",
    )
    .bind(owner)
    .fetch_all(admin)
    .await?;
    rows.iter()
        .map(|row| Ok((row.try_get("idempotency_key")?, row.try_get("id")?)))
        .collect()
}

/// (owner, key) pairs with more than one row, over the whole table.
pub async fn duplicate_rows(admin: &sqlx::PgPool) -> Result<u64, sqlx::Error> {
    let count: i64 = sqlx::query_scalar(
        "/* idem_bench_rows */ select count(*) from (
           select 1 from idem.jobs group by owner_id, idempotency_key having count(*) > 1) d",
    )
    .fetch_one(admin)
    .await?;
    Ok(u64::try_from(count).unwrap_or(0))
}
