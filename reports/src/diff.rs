//! A failing run against its nearest passing neighbour: the two event
//! sequences aligned by what happened (host and kind, not ids or times,
//! which differ between any two seeds), side by side, with the first
//! point where they part marked.
//!
//! The alignment is a longest common subsequence over event signatures;
//! both traces are cut to [`ALIGN_EVENTS_MAX`] events first, so its cost
//! stays bounded whatever the run.

use crate::trace::{RunEvent, RunTrace};

/// The most events of each trace the alignment reads.
pub const ALIGN_EVENTS_MAX: usize = 1500;

/// One row of the side-by-side view: indexes into the two traces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Row {
    Both(usize, usize),
    Left(usize),
    Right(usize),
}

/// The aligned pair.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Alignment {
    pub rows: Vec<Row>,
    /// The first row that is not a match, if the traces differ in shape.
    pub first_divergence: Option<usize>,
    /// Whether either trace was longer than [`ALIGN_EVENTS_MAX`].
    pub cut: bool,
}

/// What an event is, for alignment: who saw it and what kind it was, and
/// for HTTP the status or path, which is what a reader compares.
pub fn signature(event: &RunEvent) -> String {
    use crate::trace::Body;
    match &event.body {
        Body::HttpRequest {
            method, replica, ..
        } => {
            format!("{} http_request {method} → {replica}", event.host)
        }
        Body::HttpResponse { status, .. } => format!("{} http_response {status}", event.host),
        Body::AttemptTransition { from, to, .. } => {
            format!("{} attempt {from}→{to}", event.host)
        }
        Body::Fault { name, .. } => format!("fault {name}"),
        Body::ProviderExecution { outcome, .. } => {
            format!("{} execution {outcome}", event.host)
        }
        _ => format!(
            "{}{} {}",
            event
                .caller
                .as_deref()
                .map(|c| format!("{c}→"))
                .unwrap_or_default(),
            event.host,
            event.kind()
        ),
    }
}

/// Aligns `left` against `right`.
pub fn align(left: &RunTrace, right: &RunTrace) -> Alignment {
    let cut = left.events.len() > ALIGN_EVENTS_MAX || right.events.len() > ALIGN_EVENTS_MAX;
    let a: Vec<String> = left
        .events
        .iter()
        .take(ALIGN_EVENTS_MAX)
        .map(signature)
        .collect();
    let b: Vec<String> = right
        .events
        .iter()
        .take(ALIGN_EVENTS_MAX)
        .map(signature)
        .collect();
    let (n, m) = (a.len(), b.len());
    // lcs[i][j]: the longest common subsequence of a[i..] and b[j..].
    let width = m + 1;
    let mut lcs = vec![0u32; (n + 1) * width];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i * width + j] = if a[i] == b[j] {
                lcs[(i + 1) * width + j + 1] + 1
            } else {
                lcs[(i + 1) * width + j].max(lcs[i * width + j + 1])
            };
        }
    }
    let mut rows = Vec::with_capacity(n.max(m));
    let (mut i, mut j) = (0, 0);
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            rows.push(Row::Both(i, j));
            i += 1;
            j += 1;
        } else if j < m && (i == n || lcs[i * width + j + 1] >= lcs[(i + 1) * width + j]) {
            rows.push(Row::Right(j));
            j += 1;
        } else {
            rows.push(Row::Left(i));
            i += 1;
        }
    }
    let first_divergence = rows.iter().position(|r| !matches!(r, Row::Both(..)));
    Alignment {
        rows,
        first_divergence,
        cut,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(kinds: &[&str]) -> RunTrace {
        let text: Vec<String> = kinds
            .iter()
            .enumerate()
            .map(|(seq, client)| {
                format!(
                    r#"{{"seq":{seq},"t_ms":{seq},"host":"client-{client}","kind":"client_done","client":"{client}"}}"#
                )
            })
            .collect();
        RunTrace::parse(&text.join("\n")).expect("valid")
    }

    #[test]
    fn aligns_matches_and_marks_the_first_difference() {
        let left = trace(&["a", "b", "x", "c"]);
        let right = trace(&["a", "b", "c", "d"]);
        let alignment = align(&left, &right);
        assert_eq!(
            alignment.rows,
            vec![
                Row::Both(0, 0),
                Row::Both(1, 1),
                Row::Left(2),
                Row::Both(3, 2),
                Row::Right(3)
            ]
        );
        assert_eq!(alignment.first_divergence, Some(2));
        assert!(!alignment.cut);
    }

    #[test]
    fn identical_shapes_do_not_diverge() {
        let alignment = align(&trace(&["a", "b"]), &trace(&["a", "b"]));
        assert_eq!(alignment.first_divergence, None);
    }
}
