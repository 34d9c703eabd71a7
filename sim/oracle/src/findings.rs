//! The violations found so far, bounded: a badly broken run can break one
//! invariant at every event of a two-million-event trace, and a report
//! that lists the first few dozen says everything a reviewer can use.

use std::collections::BTreeMap;

use super::{Invariant, Violation};

/// The most violations listed per invariant; past it they are counted in
/// one closing line.
pub(super) const VIOLATIONS_PER_INVARIANT_MAX: usize = 32;

/// The most evidence `seq`s one violation carries (the earliest ones).
pub(super) const EVIDENCE_PER_VIOLATION_MAX: usize = 64;

#[derive(Debug, Default)]
pub(super) struct Findings {
    violations: Vec<Violation>,
    listed: BTreeMap<Invariant, usize>,
    unlisted: BTreeMap<Invariant, usize>,
}

impl Findings {
    /// Records a violation of `invariant`. Evidence is sorted and
    /// deduplicated here so that every check can pass it in any order.
    pub(super) fn report(
        &mut self,
        invariant: Invariant,
        message: String,
        evidence: impl IntoIterator<Item = u64>,
    ) {
        let listed = self.listed.entry(invariant).or_insert(0);
        if *listed >= VIOLATIONS_PER_INVARIANT_MAX {
            *self.unlisted.entry(invariant).or_insert(0) += 1;
            return;
        }
        *listed += 1;
        let mut evidence: Vec<u64> = evidence.into_iter().collect();
        evidence.sort_unstable();
        evidence.dedup();
        let message = if evidence.len() > EVIDENCE_PER_VIOLATION_MAX {
            let total = evidence.len();
            evidence.truncate(EVIDENCE_PER_VIOLATION_MAX);
            format!(
                "{message} (evidence: the first {EVIDENCE_PER_VIOLATION_MAX} of {total} events)"
            )
        } else {
            message
        };
        self.violations.push(Violation {
            invariant,
            message,
            evidence,
        });
    }

    /// The violations in invariant order (checks' order within one
    /// invariant), each invariant's overflow summarised in a last line.
    pub(super) fn into_violations(self) -> Vec<Violation> {
        let Findings {
            mut violations,
            unlisted,
            ..
        } = self;
        for (invariant, count) in unlisted {
            violations.push(Violation {
                invariant,
                message: format!(
                    "{count} more violations of invariant {} were found and not listed",
                    invariant.number()
                ),
                evidence: Vec::new(),
            });
        }
        // Stable: keeps each invariant's violations in the order found,
        // with the overflow line last.
        violations.sort_by_key(|v| v.invariant);
        violations
    }
}

/// The first characters of a hex fingerprint, enough to tell two apart in
/// a message.
pub(super) fn short(fingerprint: &str) -> String {
    const SHOWN: usize = 12;
    match fingerprint.get(..SHOWN) {
        Some(head) if fingerprint.len() > SHOWN => format!("{head}…"),
        _ => fingerprint.to_owned(),
    }
}

/// `"seq 3"`, `"seqs 3, 7"`, or `"no trace event"`.
pub(super) fn seqs_text(seqs: &[u64]) -> String {
    match seqs {
        [] => "no trace event".to_owned(),
        [one] => format!("seq {one}"),
        many => {
            let list: Vec<String> = many.iter().map(u64::to_string).collect();
            format!("seqs {}", list.join(", "))
        }
    }
}
