//! Invariant 2, mismatch rejected, and only a mismatch: a key its owner
//! bound to one canonical body is refused for any other body, and a
//! create is refused for nothing else.
//!
//! It is judged from what the users sent and got back (each create's key
//! and body fingerprint, each answer's status and job id), which is all a
//! service judged from outside shows, and from the store's bindings
//! (`job_created`, the rows) when the run has them. From the answers
//! alone a key is bound to the body of the first create a 2xx answered
//! for it, and a job to the body of the first 2xx create that named it:
//! a later 2xx for the same (owner, key), or naming the same job, with
//! another body accepted a mismatch. Which of the two bodies the key was
//! really bound to only the store knows; that one of the two answers was
//! wrong, the answers show.
//!
//! The converse: a create refused with a 4xx is owed a reason the users
//! can see, the same owner having sent the same key with another body
//! before the answer came. Any other refusal turned a fresh intent away:
//! another owner's equal key taken for this owner's (keys scoped globally
//! instead of per owner), or anything else. A 5xx is not a refusal but
//! the service's own trouble, which a user may retry.

use std::collections::BTreeMap;

use idem_model::model::JobId;

use super::Invariant;
use super::findings::{Findings, seqs_text, short};
use super::index::{Exchange, RunIndex};
use super::intents::{CreatesByOwner, create_requests};
use crate::trace::TraceBody;

pub(super) fn check(run: &RunIndex<'_>, findings: &mut Findings) {
    accepted_for_another_body(run, &store_bindings(run), findings);
    mismatch_replayed(run, findings);
    fresh_intents_refused(run, findings);
}

/// What a key or a job is bound to, and how that is known.
#[derive(Clone, Debug)]
struct Binding<'a> {
    fingerprint: &'a str,
    /// `job J with body F (created at seq 3)`, for the message.
    said: String,
    /// The events that show the binding.
    evidence: Vec<u64>,
}

/// An intent, (owner, key), to the body it is bound to.
type IntentBindings<'a> = BTreeMap<(&'a str, &'a str), Binding<'a>>;

/// The body each intent is bound to in the store: its first
/// `job_created`, else its row.
fn store_bindings<'a>(run: &RunIndex<'a>) -> IntentBindings<'a> {
    let mut bound = IntentBindings::new();
    for job in run.jobs.values() {
        bound.insert(
            (job.owner_id.0.as_str(), job.idempotency_key.as_str()),
            stored(job.id, job.request_fingerprint.as_str(), None),
        );
    }
    let mut created: Vec<_> = run.created.values().flatten().collect();
    created.sort_by_key(|c| c.seq);
    for c in created.iter().rev() {
        // Reverse order: the earliest creation is inserted last and stays.
        bound.insert((c.owner, c.key), stored(c.job, c.fingerprint, Some(c.seq)));
    }
    bound
}

/// A binding the store shows: `job`, created with `fingerprint` (at
/// `created_seq`, when the trace has it).
fn stored(job: JobId, fingerprint: &str, created_seq: Option<u64>) -> Binding<'_> {
    let at = created_seq.map_or(String::new(), |seq| format!(" (created at seq {seq})"));
    Binding {
        fingerprint,
        said: format!("job {job} with body {}{at}", short(fingerprint)),
        evidence: created_seq.into_iter().collect(),
    }
}

/// A binding the answers show: the 2xx `exchange` answered a create with
/// body `fingerprint`.
fn answered<'a>(exchange: &Exchange<'a>, fingerprint: &'a str) -> Binding<'a> {
    let job = exchange
        .job_id
        .map_or("no job id".to_owned(), |job| format!("job {job}"));
    Binding {
        fingerprint,
        said: format!(
            "body {} by the {} at seq {} ({job})",
            short(fingerprint),
            exchange.status,
            exchange.response_seq
        ),
        evidence: exchange.seqs(),
    }
}

/// Bindings made by the answers so far, in answer order.
#[derive(Default)]
struct Answered<'a> {
    by_intent: IntentBindings<'a>,
    by_job: BTreeMap<JobId, Binding<'a>>,
}

/// A 2xx to a create whose body is not the one its intent, or the job the
/// answer named, is bound to: in the store, or by an earlier 2xx. It had
/// to be refused.
/// What an accepted create's key and the job it was answered with are
/// bound to: by the store's history and by the answers before it.
fn bindings<'a>(
    run: &RunIndex<'a>,
    store: &IntentBindings<'a>,
    answers: &Answered<'a>,
    exchange: &Exchange<'a>,
    intent: (&'a str, &'a str),
) -> [(&'static str, Option<Binding<'a>>); 4] {
    let named_in_store = exchange.job_id.and_then(|job| {
        run.fingerprint_of_job(job)
            .map(|fp| stored(job, fp, run.created_seqs(job).first().copied()))
    });
    let named_by_answers = exchange
        .job_id
        .and_then(|j| answers.by_job.get(&j).cloned());
    [
        ("the key", store.get(&intent).cloned()),
        ("the job it names", named_in_store),
        ("the key", answers.by_intent.get(&intent).cloned()),
        ("the job it names", named_by_answers),
    ]
}

fn accepted_for_another_body(
    run: &RunIndex<'_>,
    store: &IntentBindings<'_>,
    findings: &mut Findings,
) {
    let mut answers = Answered::default();
    for exchange in &run.exchanges {
        let (Some(key), Some(offered), true) = (
            exchange.create_key(),
            exchange.create_fingerprint(),
            exchange.is_success(),
        ) else {
            continue;
        };
        let intent = (exchange.owner, key);
        if let Some((bound, binding)) = bindings(run, store, &answers, exchange, intent)
            .into_iter()
            .filter_map(|(bound, binding)| binding.map(|b| (bound, b)))
            .find(|(_, b)| b.fingerprint != offered)
        {
            findings.report(
                Invariant::MismatchRejected,
                format!(
                    "{} to a create with key {key:?} and body {}, but {bound} is bound to {}: it must be refused (409)",
                    exchange.describe(),
                    short(offered),
                    binding.said
                ),
                exchange.seqs().into_iter().chain(binding.evidence),
            );
        }
        let binding = answered(exchange, offered);
        if let Some(job) = exchange.job_id {
            answers.by_job.entry(job).or_insert_with(|| binding.clone());
        }
        answers.by_intent.entry(intent).or_insert(binding);
    }
}

/// The store replaying a job for a create whose body is not the job's.
fn mismatch_replayed(run: &RunIndex<'_>, findings: &mut Findings) {
    for event in run.events() {
        let TraceBody::JobReplayed {
            job_id,
            offered_fingerprint,
        } = &event.body
        else {
            continue;
        };
        let Some(fingerprint) = run.fingerprint_of_job(*job_id) else {
            continue;
        };
        if fingerprint != offered_fingerprint {
            findings.report(
                Invariant::MismatchRejected,
                format!(
                    "the store replayed job {job_id} (body {}) for a create with body {} at seq {}",
                    short(fingerprint),
                    short(offered_fingerprint),
                    event.seq
                ),
                run.created_seqs(*job_id).into_iter().chain([event.seq]),
            );
        }
    }
}

/// A create refused (4xx) though its owner had not sent its key with
/// another body before the answer: a fresh intent turned away.
fn fresh_intents_refused(run: &RunIndex<'_>, findings: &mut Findings) {
    let sent = create_requests(run);
    for exchange in &run.exchanges {
        let (Some(key), Some(offered), true) = (
            exchange.create_key(),
            exchange.create_fingerprint(),
            exchange.is_refusal(),
        ) else {
            continue;
        };
        let before = |&&(seq, sent_key, _): &&(u64, &str, &str)| {
            seq < exchange.response_seq && sent_key == key
        };
        if refusal_explained(&sent, exchange) {
            continue;
        }
        let (others, other_seqs) = other_owners_sending(&sent, exchange, &before);
        let problem = exchange
            .problem
            .map_or(String::new(), |p| format!(" ({p})"));
        findings.report(
            Invariant::MismatchRejected,
            format!(
                "{}{problem} to a create with key {key:?} and body {}, though owner {} had not sent that key with another body: a fresh intent refused{others}",
                exchange.describe(),
                short(offered),
                exchange.owner
            ),
            exchange.seqs().into_iter().chain(other_seqs),
        );
    }
}

/// Whether a create refused with a 4xx is owed its refusal: its owner had
/// sent its key with another body before the answer came (`sent`: every
/// create request, [`create_requests`]).
pub(super) fn refusal_explained(sent: &CreatesByOwner<'_>, exchange: &Exchange<'_>) -> bool {
    let (Some(key), Some(offered), true) = (
        exchange.create_key(),
        exchange.create_fingerprint(),
        exchange.is_refusal(),
    ) else {
        return false;
    };
    sent.get(exchange.owner)
        .into_iter()
        .flatten()
        .filter(|&&(seq, sent_key, _)| seq < exchange.response_seq && sent_key == key)
        .any(|(_, _, fingerprint)| *fingerprint != offered)
}

/// Which other owners had sent the exchange's key before its answer (the
/// likely reason a service that scopes keys globally refused it): the
/// message's tail and those requests' seqs.
fn other_owners_sending(
    sent: &CreatesByOwner<'_>,
    exchange: &Exchange<'_>,
    before: &impl Fn(&&(u64, &str, &str)) -> bool,
) -> (String, Vec<u64>) {
    let mut owners = Vec::new();
    let mut seqs = Vec::new();
    for (owner, requests) in sent {
        if *owner == exchange.owner {
            continue;
        }
        let theirs: Vec<u64> = requests.iter().filter(before).map(|r| r.0).collect();
        if !theirs.is_empty() {
            owners.push(format!("owner {owner} ({})", seqs_text(&theirs)));
            seqs.extend(theirs);
        }
    }
    if owners.is_empty() {
        return (String::new(), seqs);
    }
    let tail = format!(
        "; the same key was sent by {}, but a key is one owner's",
        owners.join(" and ")
    );
    (tail, seqs)
}
