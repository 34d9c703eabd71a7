//! Races forced on real processes (`idem real --target COMMAND --force`).
//!
//! Against a real service the race a scenario exists for is reached by
//! luck: two clicks a few milliseconds apart meet inside a service's
//! lookup-to-insert window on one seed in four, and the machine's speed
//! decides which. The simulator reaches them by its schedule; here the
//! proxies on every link make the meeting happen:
//!
//! 1. **Clicks planned together are sent together.** Creates of one
//!    (owner, key) whose send windows overlap in the scenario (each
//!    click's `at_ms` to `at_ms + jitter_ms`: the script may send them in
//!    either order, so they are one race) are partners. At the users'
//!    links the earlier partners wait until the last one is sent, so all
//!    reach the service at once.
//! 2. **Their store work meets.** From then on, a statement that writes
//!    (an `INSERT`, `UPDATE`, `DELETE` or `MERGE`, alone or in a `WITH`)
//!    waits at the service's links to the store until as many lookups
//!    (`SELECT`s, or a `WITH` that writes nothing) as there are partners
//!    have been sent, or as many writes are waiting. A service that looks
//!    a key up and then inserts has each partner's lookup done before any
//!    insert; a service that inserts first, under a unique constraint, has
//!    the inserts meet at the constraint, which refuses all but one.
//!
//! A black-box service's statements cannot be tied to the request that
//! caused them (a pool may run one request's lookup and insert on two
//! connections), so the meeting counts statements by kind: a lookup of
//! background work sent meanwhile counts as a partner's, and a service
//! that serves the creates one at a time never meets. Each wait is
//! bounded ([`PARTNER_SLACK_MS`], [`MEETING_MS_MAX`]), so forcing only
//! ever delays. What was forced, and what was not, is in the record.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use idem_sim::scenario::{Action, Scenario};
use idem_sim::world::client_token;

use super::clock::{RunClock, now_us};

/// How much longer than the scenario's spread an earlier partner waits for
/// the last one to be sent (the users' tasks are scheduled by a real
/// runtime, a little late).
pub const PARTNER_SLACK_MS: u64 = 100;
/// The longest a meeting at the store holds a write.
pub const MEETING_MS_MAX: u64 = 500;

/// An owner's idempotency key.
type OwnerKey = (String, String);

/// Clicks of one (owner, key) that the scenario sends together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Partners {
    clicks: u32,
    /// From the earliest start to the latest end of their send windows.
    spread_ms: u64,
}

/// A meeting at the store under way.
#[derive(Clone, Debug)]
struct Meeting {
    id: u64,
    partners: OwnerKey,
    size: usize,
    began_us: i64,
    /// Lookups sent since it began.
    lookups: usize,
    /// Writes held so far.
    held: usize,
}

#[derive(Clone, Debug, Default)]
struct State {
    /// First sends of each partnered (owner, key) so far.
    sent: BTreeMap<OwnerKey, u32>,
    meeting: Option<Meeting>,
    meetings_begun: u64,
    /// What was forced, a line each, in the run's milliseconds.
    forced: Vec<String>,
}

struct Inner {
    /// Each bearer token's owner.
    owners: BTreeMap<String, String>,
    partners: BTreeMap<OwnerKey, Partners>,
    clock: RunClock,
    state: watch::Sender<State>,
}

/// Shared by the users' links and the service's links to the store.
#[derive(Clone)]
pub struct Forcing(Arc<Inner>);

impl std::fmt::Debug for Forcing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forcing")
            .field("partners", &self.0.partners)
            .finish_non_exhaustive()
    }
}

/// What a held chunk waits for, bounded.
#[derive(Clone, Debug)]
pub struct ForcedWait {
    forcing: Forcing,
    until: Until,
    bound_ms: u64,
}

#[derive(Clone, Debug)]
enum Until {
    /// Every partner of the (owner, key) has been sent.
    Sent(OwnerKey, u32),
    /// The meeting has ended (met, or given up).
    MeetingOver(u64),
}

impl ForcedWait {
    /// Resolves once what it waits for happened, or its bound passed.
    pub async fn pass(&self) {
        let mut state = self.forcing.0.state.subscribe();
        let done = |s: &State| match &self.until {
            Until::Sent(key, clicks) => s.sent.get(key).copied().unwrap_or(0) >= *clicks,
            Until::MeetingOver(id) => s.meeting.as_ref().is_none_or(|m| m.id != *id),
        };
        let waited =
            idem_core::timer::timeout(Duration::from_millis(self.bound_ms), state.wait_for(done))
                .await;
        if waited.is_err() {
            self.forcing.gave_up(&self.until);
        }
    }
}

/// Partners of `scenario`: for each (owner, key), the first run of clicks
/// whose send windows overlap, when it has two or more.
fn partners_of(scenario: &Scenario) -> BTreeMap<OwnerKey, Partners> {
    let mut windows: BTreeMap<OwnerKey, Vec<(u64, u64)>> = BTreeMap::new();
    for client in &scenario.clients {
        for action in &client.actions {
            if let Action::Create { key, .. } = action {
                let (at_ms, jitter_ms) = action.at_and_jitter_ms();
                windows
                    .entry((client.owner.clone(), key.clone()))
                    .or_default()
                    .push((at_ms, at_ms + jitter_ms));
            }
        }
    }
    let mut partners = BTreeMap::new();
    for (key, mut spans) in windows {
        spans.sort_unstable();
        let (start_ms, mut end_ms) = spans[0];
        let mut clicks = 1;
        for &(at_ms, until_ms) in &spans[1..] {
            if at_ms > end_ms {
                break;
            }
            clicks += 1;
            end_ms = end_ms.max(until_ms);
        }
        if clicks >= 2 {
            let spread_ms = end_ms - start_ms;
            partners.insert(key, Partners { clicks, spread_ms });
        }
    }
    partners
}

impl Forcing {
    pub fn new(scenario: &Scenario, clock: RunClock) -> Self {
        Self(Arc::new(Inner {
            owners: scenario
                .clients
                .iter()
                .map(|c| (client_token(&c.name), c.owner.clone()))
                .collect(),
            partners: partners_of(scenario),
            clock,
            state: watch::Sender::new(State::default()),
        }))
    }

    /// Whether the scenario has a race to force.
    pub fn has_partners(&self) -> bool {
        !self.0.partners.is_empty()
    }

    fn now_ms(&self) -> u64 {
        self.0.clock.ms_at(now_us())
    }

    /// A user sent a create with bearer `token` and idempotency `key`: what
    /// its request waits for before it goes on to the service.
    pub fn create_sent(&self, token: &str, key: &str) -> Option<ForcedWait> {
        let owner = self.0.owners.get(token)?;
        let owner_key = (owner.clone(), key.to_owned());
        let partners = *self.0.partners.get(&owner_key)?;
        let now_ms = self.now_ms();
        let mut wait = None;
        self.0.state.send_if_modified(|state| {
            let sent = state.sent.entry(owner_key.clone()).or_insert(0);
            if *sent >= partners.clicks {
                return false; // a retry, or a later click
            }
            *sent += 1;
            if *sent < partners.clicks {
                wait = Some(ForcedWait {
                    forcing: self.clone(),
                    until: Until::Sent(owner_key.clone(), partners.clicks),
                    bound_ms: partners.spread_ms + PARTNER_SLACK_MS,
                });
                return true;
            }
            state.meetings_begun += 1;
            state.forced.push(format!(
                "{now_ms} ms: the {} clicks of ({}, {}) sent together",
                partners.clicks, owner_key.0, owner_key.1
            ));
            state.meeting = Some(Meeting {
                id: state.meetings_begun,
                partners: owner_key.clone(),
                size: partners.clicks as usize,
                began_us: now_us(),
                lookups: 0,
                held: 0,
            });
            true
        });
        wait
    }

    /// The service sends the store a statement of `kind`: what it waits
    /// for.
    pub fn statement(&self, kind: StatementKind) -> Option<ForcedWait> {
        let now_ms = self.now_ms();
        let mut wait = None;
        self.0.state.send_if_modified(|state| {
            let Some(meeting) = &mut state.meeting else {
                return false;
            };
            let left_ms = MEETING_MS_MAX as i64 - (now_us() - meeting.began_us) / 1_000;
            if left_ms <= 0 {
                let line = not_met(meeting, now_ms);
                state.forced.push(line);
                state.meeting = None;
                return true;
            }
            match kind {
                StatementKind::Lookup => meeting.lookups += 1,
                StatementKind::Write => meeting.held += 1,
                StatementKind::Other => return false,
            }
            if meeting.lookups >= meeting.size || meeting.held >= meeting.size {
                let line = format!(
                    "{now_ms} ms: their store work met: {} lookup(s) sent, {} write(s) held for them",
                    meeting.lookups, meeting.held
                );
                state.forced.push(line);
                state.meeting = None;
            } else if kind == StatementKind::Write {
                wait = Some(ForcedWait {
                    forcing: self.clone(),
                    until: Until::MeetingOver(meeting.id),
                    bound_ms: left_ms.unsigned_abs(),
                });
            }
            true
        });
        wait
    }

    /// A wait reached its bound: the meeting or the sending it waited for
    /// is given up, and the record says so.
    fn gave_up(&self, until: &Until) {
        let now_ms = self.now_ms();
        self.0.state.send_if_modified(|state| match until {
            Until::MeetingOver(id) => match &state.meeting {
                Some(meeting) if meeting.id == *id => {
                    let line = not_met(meeting, now_ms);
                    state.forced.push(line);
                    state.meeting = None;
                    true
                }
                _ => false,
            },
            Until::Sent((owner, key), clicks) => {
                let sent = state.sent.get(&(owner.clone(), key.clone())).copied();
                let line = format!(
                    "{now_ms} ms: NOT forced: {} of the {clicks} clicks of ({owner}, {key}) sent in time",
                    sent.unwrap_or(0)
                );
                if state.forced.last() == Some(&line) {
                    return false;
                }
                state.forced.push(line);
                true
            }
        });
    }

    /// What was forced, a line each; a meeting still waiting at the end
    /// (no statement came after it began) did not meet.
    pub fn forced(&self) -> Vec<String> {
        let state = self.0.state.borrow();
        let mut forced = state.forced.clone();
        if let Some(meeting) = &state.meeting {
            forced.push(not_met(meeting, self.now_ms()));
        }
        forced
    }
}

fn not_met(meeting: &Meeting, now_ms: u64) -> String {
    format!(
        "{now_ms} ms: NOT forced: the store work of ({}, {}) did not meet ({} lookup(s) and {} write(s) of {} within {MEETING_MS_MAX} ms)",
        meeting.partners.0, meeting.partners.1, meeting.lookups, meeting.held, meeting.size
    )
}

/// What a statement is to a meeting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatementKind {
    /// It reads rows: a `SELECT`, or a `WITH` that writes nothing.
    Lookup,
    /// It changes rows: an `INSERT`, `UPDATE`, `DELETE` or `MERGE`, alone
    /// or in a `WITH`.
    Write,
    /// Anything else (`BEGIN`, `COMMIT`, `SET`, ...).
    Other,
}

impl StatementKind {
    pub fn of(sql: &str) -> Self {
        let sql = sql.trim_start().to_ascii_lowercase();
        let verbs = ["insert", "update", "delete", "merge"];
        let first = sql
            .split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            .next()
            .unwrap_or_default();
        let writes_in_with = || {
            sql.split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
                .any(|word| verbs.contains(&word))
        };
        match first {
            verb if verbs.contains(&verb) => StatementKind::Write,
            "with" if writes_in_with() => StatementKind::Write,
            "select" | "with" | "table" | "values" => StatementKind::Lookup,
            _ => StatementKind::Other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(text: &str) -> Scenario {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let file = dir.path().join("partners.toml");
        std::fs::write(&file, text).expect("writes");
        idem_scenarios::load(&file.display().to_string())
            .expect("a scenario")
            .scenario
    }

    const DOUBLE_CLICK: &str = "description = \"x\"\n[[clients]]\nname = \"alice\"\nactions = [\n\
        { action = \"click\", key = \"k\", jitter_ms = 10, params = {} },\n\
        { action = \"click\", key = \"k\", jitter_ms = 10, params = {} },\n\
        { action = \"click\", key = \"later\", params = {} },\n\
        { action = \"click\", key = \"later\", at_ms = 5000, params = {} },\n]\n";

    #[test]
    fn clicks_whose_send_windows_overlap_are_partners_and_later_ones_are_not() {
        let partners = partners_of(&scenario(DOUBLE_CLICK));
        let owner = scenario(DOUBLE_CLICK).clients[0].owner.clone();
        assert_eq!(
            partners,
            BTreeMap::from([(
                (owner, "k".to_owned()),
                Partners {
                    clicks: 2,
                    spread_ms: 10
                }
            )])
        );
    }

    #[test]
    fn statements_that_write_are_told_from_lookups_and_the_rest() {
        use StatementKind::{Lookup, Other, Write};
        for (sql, kind) in [
            ("INSERT INTO jobs VALUES ($1)", Write),
            ("  update jobs set x = 1", Write),
            (
                "WITH ins AS (INSERT INTO jobs ...) SELECT * FROM ins",
                Write,
            ),
            ("with j as (select 1) select * from j", Lookup),
            ("SELECT * FROM jobs WHERE key = $1 FOR UPDATE", Lookup),
            ("select inserted_at from jobs", Lookup),
            ("BEGIN", Other),
            ("commit", Other),
            ("SET statement_timeout = 5", Other),
        ] {
            assert_eq!(StatementKind::of(sql), kind, "{sql}");
        }
    }

    #[tokio::test]
    async fn the_first_click_waits_for_its_partner_and_a_write_for_the_partner_s_lookup() {
        let forcing = Forcing::new(&scenario(DOUBLE_CLICK), RunClock::start());
        let token = client_token("alice");
        let first = forcing
            .create_sent(&token, "k")
            .expect("waits for its partner");
        let waiting = tokio::spawn(async move { first.pass().await });
        assert!(forcing.create_sent(&token, "k").is_none(), "the last goes");
        idem_core::timer::timeout(Duration::from_millis(50), waiting)
            .await
            .expect("the first goes once the last is sent")
            .expect("no panic");
        assert!(
            forcing.create_sent(&token, "k").is_none(),
            "a retry is not held"
        );
        assert!(forcing.create_sent(&token, "later").is_none());

        use StatementKind::{Lookup, Other, Write};
        assert!(forcing.statement(Other).is_none(), "a BEGIN goes on");
        assert!(forcing.statement(Lookup).is_none(), "a lookup goes on");
        let write = forcing.statement(Write).expect("the insert waits");
        let waiting = tokio::spawn(async move { write.pass().await });
        assert!(forcing.statement(Lookup).is_none(), "the partner's lookup");
        idem_core::timer::timeout(Duration::from_millis(50), waiting)
            .await
            .expect("the insert goes once both lookups were sent")
            .expect("no panic");
        assert!(forcing.statement(Write).is_none(), "the meeting is over");
        let forced = forcing.forced();
        assert_eq!(forced.len(), 2, "{forced:?}");
        assert!(forced[1].contains("2 lookup(s) sent, 1 write(s) held"));
    }

    #[tokio::test]
    async fn inserts_sent_first_meet_each_other() {
        let forcing = Forcing::new(&scenario(DOUBLE_CLICK), RunClock::start());
        let token = client_token("alice");
        let _first = forcing.create_sent(&token, "k");
        forcing.create_sent(&token, "k");
        let write = forcing
            .statement(StatementKind::Write)
            .expect("the first insert waits");
        let waiting = tokio::spawn(async move { write.pass().await });
        assert!(forcing.statement(StatementKind::Write).is_none());
        idem_core::timer::timeout(Duration::from_millis(50), waiting)
            .await
            .expect("both inserts go together")
            .expect("no panic");
    }

    #[tokio::test]
    async fn a_meeting_that_never_happens_holds_a_write_no_longer_than_its_bound() {
        let forcing = Forcing::new(&scenario(DOUBLE_CLICK), RunClock::start());
        let token = client_token("alice");
        let _first = forcing.create_sent(&token, "k");
        forcing.create_sent(&token, "k");
        let write = forcing.statement(StatementKind::Write).expect("waits");
        idem_core::timer::timeout(Duration::from_millis(MEETING_MS_MAX * 3), write.pass())
            .await
            .expect("bounded");
        assert!(
            forcing
                .forced()
                .last()
                .expect("a line")
                .contains("NOT forced")
        );
        assert!(
            forcing.statement(StatementKind::Write).is_none(),
            "given up"
        );

        let silent = Forcing::new(&scenario(DOUBLE_CLICK), RunClock::start());
        let _first = silent.create_sent(&token, "k");
        silent.create_sent(&token, "k");
        let forced = silent.forced();
        assert!(
            forced.last().is_some_and(|l| l.contains("did not meet")),
            "a meeting no statement reached is said at the end: {forced:?}"
        );
    }
}
