//! The oracle's verdict on a real run, invariant by invariant: held,
//! violated, or not judged, with the reason. Real mode never passes an
//! invariant it could not judge: what it could not see is said.
//!
//! The judge is the simulator's oracle (`idem_oracle::judge`) on the
//! trace real mode assembled, and for a service judged from outside, the
//! oracle's rules for its jobs read back at the end
//! (`idem_oracle::judge_read_backs`). Which invariants it can judge
//! depends on what the run let real mode observe ([`Observed`]): idem's
//! own processes on a store real mode reads give everything; a service
//! judged from outside gives less.

use serde::{Deserialize, Serialize};

use idem_oracle::{
    Invariant, Judgement, OracleInput, ReadBack, Window, count_from_answers, judge as oracle,
    judge_read_backs,
};

/// What real mode observed of a run, besides what it always sees (the
/// clients' requests and answers, the providers' ledgers, its own faults).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observed {
    /// The store's committed history, in commit order (logical decoding).
    pub store_history: bool,
    /// The store's rows at the end.
    pub store_rows: bool,
    /// Every job its users were told of, read back through the service's
    /// API at the end (a service judged from outside: its rows are its
    /// own, its answers are not).
    pub read_back: bool,
}

impl Observed {
    /// Everything: idem's processes on a store real mode reads.
    pub const ALL: Observed = Observed {
        store_history: true,
        store_rows: true,
        read_back: false,
    };
    /// A service judged from outside: its answers (every job read back at
    /// the end included), the ledgers, the faults.
    pub const OUTSIDE: Observed = Observed {
        store_history: false,
        store_rows: false,
        read_back: true,
    };
}

/// One invariant's verdict.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Judged {
    Held,
    Violated { count: u32 },
    NotJudged { reason: String },
}

/// An invariant and its verdict, as the outputs list them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvariantVerdict {
    pub invariant: u8,
    /// snake_case (`one_job_per_intent`).
    pub name: String,
    #[serde(flatten)]
    pub verdict: Judged,
}

/// Why `invariant` cannot be judged from what was `observed`, if it
/// cannot. The rules are what each check reads (`idem_oracle`).
pub fn unjudged(invariant: Invariant, observed: Observed) -> Option<&'static str> {
    let history = "it reads the store's committed history (attempts starting and moving), \
                   which this run could not observe";
    let rows = "it reads the store's rows at the end, which this run could not observe";
    let ends = "it reads the store's rows at the end, or every job read back through the \
                service's API at the end, and a job could not be read back (no answer to its \
                read, or a create answered without a UUID job id)";
    let needs_history = !observed.store_history;
    let needs_rows = !observed.store_rows;
    // What the rows say of how jobs ended, a service's read-back jobs say
    // from outside (`idem_oracle::judge_read_backs`).
    let needs_ends = needs_rows && !observed.read_back;
    match invariant {
        // The clients' answers carry what these need (a job's owner, where
        // no row says it, is the owner its first new-job answer went to).
        Invariant::OneJobPerIntent | Invariant::MismatchRejected | Invariant::OwnerIsolation => {
            None
        }
        // The providers' ledgers carry what this needs (from outside, a
        // billed answer the service received and refused as broken counts
        // as billed work: the store's history would have said it).
        Invariant::SideEffects => None,
        Invariant::Liveness => {
            needs_ends.then_some(if observed.store_history { rows } else { ends })
        }
        Invariant::NothingLost => needs_rows.then_some(rows),
        // From outside: a target is told the certified set (and models),
        // and the ledgers show where its work ran, for which job
        // (`idem_oracle::judge_read_backs`).
        Invariant::CertifiedFailover => (needs_history && !observed.read_back).then_some(history),
        Invariant::Guard | Invariant::TimeoutMeansUnknown | Invariant::WaitsInTrueTime => {
            needs_history.then_some(history)
        }
        Invariant::OneWinner | Invariant::LosersDiscarded => {
            if observed.read_back && needs_rows {
                None
            } else if needs_history {
                Some(if needs_rows { ends } else { history })
            } else {
                needs_rows.then_some(rows)
            }
        }
    }
}

/// The windows a run that `observed` this much cannot see, if any: without
/// the store's history, all but those the users' answers show
/// ([`Window::FROM_ANSWERS`]).
pub fn windows_unseen(observed: Observed) -> Vec<Window> {
    if observed.store_history {
        return Vec::new();
    }
    Window::ALL
        .iter()
        .copied()
        .filter(|w| !Window::FROM_ANSWERS.contains(w))
        .collect()
}

/// The snake_case name serde gives an invariant.
pub fn invariant_name(invariant: Invariant) -> String {
    match serde_json::to_value(invariant) {
        Ok(serde_json::Value::String(name)) => name,
        other => panic!("an invariant serializes to its name, not {other:?}"),
    }
}

/// The oracle's judgement of the invariants that can be judged, and every
/// invariant's verdict.
pub fn judge(
    input: OracleInput<'_>,
    read_backs: &[ReadBack],
    observed: Observed,
) -> (Judgement, Vec<InvariantVerdict>) {
    let mut judgement = oracle(input);
    if observed.read_back {
        judgement
            .violations
            .extend(judge_read_backs(input, read_backs));
        // Stable: each invariant's violations stay in the order found.
        judgement.violations.sort_by_key(|v| v.invariant);
    }
    if !observed.store_history {
        // Without the store's history, the windows the users' answers show.
        judgement.windows = count_from_answers(input);
    }
    judgement
        .violations
        .retain(|v| unjudged(v.invariant, observed).is_none());
    let verdicts = verdicts(&judgement, observed);
    (judgement, verdicts)
}

/// Every invariant's verdict, from the judgement of those judged.
fn verdicts(judgement: &Judgement, observed: Observed) -> Vec<InvariantVerdict> {
    Invariant::ALL
        .iter()
        .map(|&invariant| {
            let verdict = match unjudged(invariant, observed) {
                Some(reason) => Judged::NotJudged {
                    reason: reason.to_owned(),
                },
                None => {
                    let count = judgement
                        .violations
                        .iter()
                        .filter(|v| v.invariant == invariant)
                        .count();
                    if count == 0 {
                        Judged::Held
                    } else {
                        Judged::Violated {
                            count: u32::try_from(count).unwrap_or(u32::MAX),
                        }
                    }
                }
            };
            InvariantVerdict {
                invariant: invariant.number(),
                name: invariant_name(invariant),
                verdict,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn everything_observed_judges_everything_and_less_says_why() {
        for &invariant in Invariant::ALL {
            assert_eq!(unjudged(invariant, Observed::ALL), None, "{invariant:?}");
        }
        let outside = Observed::OUTSIDE;
        let unjudged_outside: Vec<u8> = Invariant::ALL
            .iter()
            .filter(|i| unjudged(**i, outside).is_some())
            .map(|i| i.number())
            .collect();
        assert_eq!(unjudged_outside, [4, 5, 11, 12]);
        let unread = Observed {
            read_back: false,
            ..outside
        };
        for invariant in [
            Invariant::OneWinner,
            Invariant::LosersDiscarded,
            Invariant::Liveness,
        ] {
            let reason = unjudged(invariant, unread).expect("not judged");
            assert!(reason.contains("could not be read back"), "{reason}");
        }
    }

    #[test]
    fn a_verdict_serializes_flat() {
        let verdict = InvariantVerdict {
            invariant: 12,
            name: "waits_in_true_time".into(),
            verdict: Judged::NotJudged { reason: "r".into() },
        };
        assert_eq!(
            serde_json::to_string(&verdict).expect("serializes"),
            r#"{"invariant":12,"name":"waits_in_true_time","verdict":"not_judged","reason":"r"}"#
        );
    }
}
