//! The decision log: the random draws that shape a run, each recorded
//! where it is made, and the means to intervene on them.
//!
//! Three kinds of draw decide how a run unfolds: each message's latency on
//! its link (the scheduler's draw, made in turmoil's distribution), each
//! client action's jitter, and each provider execution's jitter and error
//! roll. Every one of them goes through [`Decisions::draw`] (a provider's
//! through the world's `Chooser`, which times them). Off (the
//! default, and every ordinary run) it is the site's own draw and nothing
//! more. Recording, it also writes down what was decided, so `idem explain`
//! can name it. Intervening, it gives each draw a value kept from a
//! recorded run, or a fresh one from a generator of its own: keeping a
//! prefix of the decisions and redrawing the rest, or redrawing one
//! decision alone, asks what the failure needed.
//!
//! A draw is identified by its site (which link, which client action,
//! which provider choice) and its ordinal at that site, not by its place
//! in the whole run: once one decision changes, the run's later draws come
//! in another order, but "the third message from client-u1 to api-2" still
//! names the same decision.
//!
//! Recording does not change a run: each site still draws from its own
//! generator, so the trace hash of every seed is the one it always was.
//! turmoil's own draws are not among the decisions: with quiet-time
//! skipping (the default) the scheduler draws every latency and turmoil
//! draws none that matter; with every step taken, `idem explain` refuses.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// What a decision decided about, in the run's own terms.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Subject {
    /// How long a message (a TCP `segment`) from `from` to `to` (host
    /// names) took.
    MessageLatency {
        from: String,
        to: String,
        segment: String,
    },
    /// How late a client's action was sent, past its scripted time.
    ClientJitter {
        client: String,
        action: usize,
        label: String,
    },
    /// Which API replica a client's request went to (a load balancer's
    /// choice); the value is the replica's index from 0.
    ClientReplica { client: String },
    /// How much longer than its base latency a provider took.
    ProviderJitter { provider: String },
    /// A provider's roll against its error rate (in 0..1000).
    ProviderErrorRoll { provider: String },
    /// When a step of the scenario's fault number `fault` (from 0, in the
    /// file's order) took effect: `fire`, `heal` or `restart`; the value
    /// is the run's millisecond. Real mode notes these as they happen; a
    /// replay in the simulator plans the step at that time.
    FaultStep {
        fault: usize,
        step: String,
        label: String,
    },
}

impl Subject {
    /// The host that made the decision.
    pub fn host(&self) -> String {
        match self {
            Subject::MessageLatency { from, .. } => from.clone(),
            Subject::ClientJitter { client, .. } | Subject::ClientReplica { client } => {
                crate::scenario::host::client(client)
            }
            Subject::ProviderJitter { provider } | Subject::ProviderErrorRoll { provider } => {
                crate::scenario::host::provider(provider)
            }
            Subject::FaultStep { .. } => crate::scenario::host::DRIVER.to_owned(),
        }
    }

    /// In words, with the value drawn, the time it was drawn and its
    /// ordinal among the decisions about this subject.
    pub fn describe(&self, value: u64, t_ms: u64, ordinal: u32) -> String {
        match self {
            Subject::MessageLatency { from, to, segment } => format!(
                "a {segment} from {from} to {to}, sent at {t_ms} ms, took {value} ms (arriving at {} ms)",
                t_ms + value
            ),
            Subject::ClientJitter { client, label, .. } => {
                format!("client {client}'s {label} was sent {value} ms past its scripted time")
            }
            Subject::ClientReplica { client } => format!(
                "client {client}'s request #{} at {t_ms} ms went to {}",
                ordinal + 1,
                crate::scenario::host::api(
                    u32::try_from(value).unwrap_or(u32::MAX).saturating_add(1)
                )
            ),
            Subject::ProviderJitter { provider } => format!(
                "provider {provider}, executing at {t_ms} ms, took {value} ms longer than its base latency"
            ),
            Subject::ProviderErrorRoll { provider } => {
                format!("provider {provider}'s error roll at {t_ms} ms came up {value} of 1000")
            }
            Subject::FaultStep { step, label, .. } => {
                format!("the {step} of fault {label} took effect at {value} ms")
            }
        }
    }
}

/// One decision of a recorded run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    /// Its place among the run's decisions, from 0.
    pub index: usize,
    /// Simulated milliseconds when it was made.
    pub t_ms: u64,
    pub subject: Subject,
    /// Its place among the decisions about the same subject, from 0.
    pub ordinal: u32,
    pub value: u64,
    /// What a message carried (its first line, when it reads as text),
    /// empty for other decisions. Not part of the decision's identity: an
    /// intervened run's messages may carry other ids or answers.
    pub detail: String,
}

impl Decision {
    pub fn describe(&self) -> String {
        let words = self.subject.describe(self.value, self.t_ms, self.ordinal);
        if self.detail.is_empty() {
            words
        } else {
            format!("{words}: {}", self.detail)
        }
    }

    fn key(&self) -> (Subject, u32) {
        (self.subject.clone(), self.ordinal)
    }
}

/// A recorded run's decisions as a file: what real mode writes (`idem
/// real --decisions-out`) and `idem run --decisions` replays.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionFile {
    /// The run's scenario, seed and design, for the reader.
    #[serde(default)]
    pub scenario: String,
    #[serde(default)]
    pub seed: u64,
    #[serde(default)]
    pub design: String,
    pub decisions: Vec<Decision>,
}

/// The values an intervened run keeps, by subject and ordinal; every
/// other draw comes from `fresh`.
#[derive(Clone, Debug, Default)]
pub struct Kept(BTreeMap<(Subject, u32), u64>);

impl Kept {
    /// The decisions of `log` whose index `keep` accepts.
    pub fn from_log(log: &[Decision], keep: impl Fn(usize) -> bool) -> Self {
        Self(
            log.iter()
                .filter(|d| keep(d.index))
                .map(|d| (d.key(), d.value))
                .collect(),
        )
    }
}

#[derive(Debug)]
enum Mode {
    Record,
    Intervene {
        kept: Kept,
        fresh: ChaCha8Rng,
    },
    /// Keeps what it is given, and draws the rest as an ordinary run of
    /// the seed would: a recorded run (a real one) replayed.
    Replay {
        kept: Kept,
    },
}

#[derive(Debug)]
struct Inner {
    mode: Mode,
    log: Vec<Decision>,
    ordinals: BTreeMap<Subject, u32>,
    /// Message ends by address, for naming them once the run is over.
    names: BTreeMap<IpAddr, String>,
}

/// The run's decision source; cheap to clone, clones share the log. The
/// default is off.
#[derive(Clone, Debug, Default)]
pub struct Decisions(Option<Arc<Mutex<Inner>>>);

impl Decisions {
    /// Records every decision; each is drawn as an ordinary run draws it.
    pub fn recording() -> Self {
        Self::with_mode(Mode::Record)
    }

    /// Keeps the values in `kept` and draws the rest from a generator
    /// seeded with `sample_seed`; records what it decided.
    pub fn intervening(kept: Kept, sample_seed: u64) -> Self {
        Self::with_mode(Mode::Intervene {
            kept,
            fresh: ChaCha8Rng::seed_from_u64(sample_seed),
        })
    }

    /// Keeps the values in `kept` and lets every other draw be the site's
    /// own, as in an ordinary run; records what it decided.
    pub fn replaying(kept: Kept) -> Self {
        Self::with_mode(Mode::Replay { kept })
    }

    fn with_mode(mode: Mode) -> Self {
        Self(Some(Arc::new(Mutex::new(Inner {
            mode,
            log: Vec::new(),
            ordinals: BTreeMap::new(),
            names: BTreeMap::new(),
        }))))
    }

    pub fn is_on(&self) -> bool {
        self.0.is_some()
    }

    /// Makes the decision about `subject` at `t_ms`: `draw` is the site's
    /// own way of drawing, and `own` its generator.
    pub fn draw(
        &self,
        subject: impl FnOnce() -> Subject,
        t_ms: u64,
        own: &mut ChaCha8Rng,
        draw: impl Fn(&mut ChaCha8Rng) -> u64,
    ) -> u64 {
        self.draw_detailed(|| (subject(), String::new()), t_ms, own, draw)
    }

    /// [`Decisions::draw`], with a detail for the log.
    pub fn draw_detailed(
        &self,
        subject: impl FnOnce() -> (Subject, String),
        t_ms: u64,
        own: &mut ChaCha8Rng,
        draw: impl Fn(&mut ChaCha8Rng) -> u64,
    ) -> u64 {
        let Some(inner) = &self.0 else {
            return draw(own);
        };
        // Named before the lock: naming may look up host names.
        let (subject, detail) = subject();
        let mut inner = inner.lock().unwrap_or_else(PoisonError::into_inner);
        let ordinal = {
            let next = inner.ordinals.entry(subject.clone()).or_default();
            let ordinal = *next;
            *next += 1;
            ordinal
        };
        let value = match &mut inner.mode {
            Mode::Record => draw(own),
            Mode::Intervene { kept, fresh } => match kept.0.get(&(subject.clone(), ordinal)) {
                Some(value) => *value,
                None => draw(fresh),
            },
            Mode::Replay { kept } => match kept.0.get(&(subject.clone(), ordinal)) {
                Some(value) => *value,
                None => draw(own),
            },
        };
        let index = inner.log.len();
        inner.log.push(Decision {
            index,
            t_ms,
            subject,
            ordinal,
            value,
            detail,
        });
        value
    }

    /// The run starts now: what was decided before, while the world was
    /// being set up (real mode's processes connecting and migrating), is
    /// forgotten, and every subject's ordinals count from 0 again.
    pub fn restart(&self) {
        if let Some(inner) = &self.0 {
            let mut inner = inner.lock().unwrap_or_else(PoisonError::into_inner);
            inner.log.clear();
            inner.ordinals.clear();
        }
    }

    /// Notes a decision the world made by itself (when a fault took
    /// effect), `value` at `t_ms`; nothing when off.
    pub fn note(&self, subject: impl FnOnce() -> Subject, t_ms: u64, value: u64) {
        if self.is_on() {
            let mut unused = ChaCha8Rng::seed_from_u64(0);
            self.draw(subject, t_ms, &mut unused, |_| value);
        }
    }

    /// The value a replay keeps for the first decision about `subject`,
    /// if it keeps one.
    pub fn kept_first(&self, subject: &Subject) -> Option<u64> {
        let inner = self.0.as_ref()?;
        let inner = inner.lock().unwrap_or_else(PoisonError::into_inner);
        match &inner.mode {
            Mode::Replay { kept } | Mode::Intervene { kept, .. } => {
                kept.0.get(&(subject.clone(), 0)).copied()
            }
            Mode::Record => None,
        }
    }

    /// Gives a host's address its name, for the messages it sends and
    /// receives.
    pub fn name_host(&self, ip: IpAddr, name: &str) {
        if let Some(inner) = &self.0 {
            let mut inner = inner.lock().unwrap_or_else(PoisonError::into_inner);
            inner.names.insert(ip, name.to_owned());
        }
    }

    /// The address's name, or the address when it has none.
    pub fn host_name(&self, ip: IpAddr) -> String {
        self.0
            .as_ref()
            .and_then(|inner| {
                let inner = inner.lock().unwrap_or_else(PoisonError::into_inner);
                inner.names.get(&ip).cloned()
            })
            .unwrap_or_else(|| ip.to_string())
    }

    /// Every decision made so far, in order.
    pub fn log(&self) -> Vec<Decision> {
        self.0
            .as_ref()
            .map(|inner| {
                inner
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .log
                    .clone()
            })
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use rand::Rng;

    use super::*;

    fn subject(n: usize) -> Subject {
        Subject::ClientJitter {
            client: "u".to_owned(),
            action: n,
            label: format!("click {n}"),
        }
    }

    fn draws(decisions: &Decisions, rng: &mut ChaCha8Rng) -> Vec<u64> {
        (0..6)
            .map(|n| decisions.draw(|| subject(n % 3), 0, rng, |r| r.random_range(0..1_000_000)))
            .collect()
    }

    #[test]
    fn off_and_recording_draw_as_the_site_would() {
        let off = draws(&Decisions::default(), &mut ChaCha8Rng::seed_from_u64(3));
        let recording = Decisions::recording();
        let recorded = draws(&recording, &mut ChaCha8Rng::seed_from_u64(3));
        assert_eq!(off, recorded);
        let log = recording.log();
        assert_eq!(log.len(), 6);
        assert_eq!(log[4].ordinal, 1, "the second draw about subject 1");
        assert_eq!(log.iter().map(|d| d.value).collect::<Vec<_>>(), recorded);
    }

    #[test]
    fn an_intervention_keeps_what_it_is_given_and_redraws_the_rest() {
        let recording = Decisions::recording();
        let recorded = draws(&recording, &mut ChaCha8Rng::seed_from_u64(3));
        let log = recording.log();
        let all = Decisions::intervening(Kept::from_log(&log, |_| true), 99);
        assert_eq!(draws(&all, &mut ChaCha8Rng::seed_from_u64(0)), recorded);
        let prefix = Decisions::intervening(Kept::from_log(&log, |i| i < 2), 99);
        let redrawn = draws(&prefix, &mut ChaCha8Rng::seed_from_u64(0));
        assert_eq!(redrawn[..2], recorded[..2]);
        assert_ne!(redrawn[2..], recorded[2..]);
        let one = Decisions::intervening(Kept::from_log(&log, |i| i != 4), 99);
        let changed = draws(&one, &mut ChaCha8Rng::seed_from_u64(0));
        let differing: Vec<usize> = (0..6).filter(|&i| changed[i] != recorded[i]).collect();
        assert_eq!(differing, vec![4]);
    }
}
