//! What clients were told about their intents: invariants 1 (one job per
//! intent), 8 (owner isolation) and 11 (nothing lost); 2 (mismatch
//! rejected) is [`super::mismatch`]'s. An intent is an (owner, idempotency
//! key); the owner of a request is the owner of the client that sent it,
//! never anything in the body.

use std::collections::{BTreeMap, BTreeSet};

use idem_model::model::JobId;

use super::Invariant;
use super::findings::{Findings, seqs_text};
use super::index::{JobCreation, RunIndex};
use crate::trace::TraceBody;

pub(super) fn check(run: &RunIndex<'_>, findings: &mut Findings) {
    let sightings = sightings_by_intent(run);
    one_job_per_intent(&sightings, findings);
    billed_jobs_within_intents(run, &sightings, findings);
    owner_isolation(run, findings);
    nothing_lost(run, findings);
}

/// Where one job of an intent showed up.
#[derive(Debug, Default)]
struct Sightings {
    row: bool,
    created: Vec<u64>,
    /// Seqs of 2xx creates naming it (request and response).
    acknowledged: Vec<u64>,
    responses: Vec<u64>,
}

/// The create requests each owner sent, in trace order:
/// (seq, the key the client sent, the body's fingerprint).
pub(super) type CreatesByOwner<'a> = BTreeMap<&'a str, Vec<(u64, &'a str, &'a str)>>;

/// Every create request of the run, by owner ([`CreatesByOwner`]).
pub(super) fn create_requests<'a>(run: &RunIndex<'a>) -> CreatesByOwner<'a> {
    let mut requests = CreatesByOwner::new();
    for event in run.events() {
        let TraceBody::HttpRequest {
            client,
            method,
            path,
            idempotency_key: Some(key),
            body_fingerprint: Some(fingerprint),
            ..
        } = &event.body
        else {
            continue;
        };
        if method != "POST" || path.trim_end_matches('/') != "/v1/jobs" {
            continue;
        }
        let Some(owner) = run.input.facts.client_owners.get(client.as_str()) else {
            continue;
        };
        requests.entry(owner.as_str()).or_default().push((
            event.seq,
            key.as_str(),
            fingerprint.as_str(),
        ));
    }
    requests
}

/// The intent a created job belongs to: the key the user sent. Normally
/// the stored key is that key; a design that rewrites keys (scoping them to
/// a session, say) stores another, so the job is traced back to the latest
/// earlier request of its owner with the same body.
fn intent_key<'a>(requests: &CreatesByOwner<'a>, created: &JobCreation<'a>) -> &'a str {
    let Some(sent) = requests.get(created.owner) else {
        return created.key;
    };
    let earlier = || sent.iter().filter(|(seq, _, _)| *seq < created.seq);
    if earlier().any(|(_, key, _)| *key == created.key) {
        return created.key;
    }
    earlier()
        .rev()
        .find(|(_, _, fingerprint)| *fingerprint == created.fingerprint)
        .map_or(created.key, |(_, key, _)| key)
}

/// An intent, (owner, key), to where each of its jobs showed up.
type IntentSightings<'a> = BTreeMap<(&'a str, &'a str), BTreeMap<JobId, Sightings>>;

/// Invariant 1. Every job the run associates with one intent (a row of the
/// dump, a `job_created`, a 2xx create naming it) must be the same job, and
/// the store must have created it once. Intents are what users sent: a row
/// counts under the intent its creation is traced back to.
fn one_job_per_intent(sightings: &IntentSightings<'_>, findings: &mut Findings) {
    for ((owner, key), jobs) in sightings {
        let created_total: usize = jobs.values().map(|s| s.created.len()).sum();
        if jobs.len() <= 1 && created_total <= 1 {
            continue;
        }
        let described = describe_sightings(jobs);
        let message = if jobs.len() > 1 {
            format!(
                "owner {owner}, key {key:?}: one intent has {} jobs: {}",
                jobs.len(),
                described.join(", ")
            )
        } else {
            format!(
                "owner {owner}, key {key:?}: the store created the intent's job {created_total} times: {}",
                described.join(", ")
            )
        };
        let evidence = jobs
            .values()
            .flat_map(|s| s.created.iter().chain(&s.acknowledged).copied());
        findings.report(Invariant::OneJobPerIntent, message, evidence);
    }
}

/// Invariant 1 from the providers' side: every job that did billed work
/// belongs to an intent a user sent, so more distinct jobs billed than
/// intents sent is work done for nobody (a job made for a retry and never
/// answered, keys kept in one process's memory). The ledgers name each
/// call's job (`metadata.job_id`) whatever the service keeps, so this is
/// judged from outside too, where a store's rows are not seen and answers
/// name only the jobs users were told about. Reported when a billed job is
/// tied to no intent at all; an excess of jobs each tied to one is already
/// [`one_job_per_intent`]'s finding.
fn billed_jobs_within_intents(
    run: &RunIndex<'_>,
    sightings: &IntentSightings<'_>,
    findings: &mut Findings,
) {
    let intents: BTreeSet<(&str, &str)> = create_requests(run)
        .iter()
        .flat_map(|(owner, sent)| sent.iter().map(move |(_, key, _)| (*owner, *key)))
        .collect();
    let mut billed: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for execution in run.executions.iter().filter(|e| e.billed) {
        if let Some(job) = execution.job_id {
            let seqs = billed.entry(job).or_default();
            seqs.extend(execution.succeeded_seq.or(execution.seen.last().copied()));
        }
    }
    // Jobs the run ties to an intent (a row, a creation, an answer): an
    // excess among them is already one intent with two jobs.
    let sighted: BTreeSet<String> = sightings
        .values()
        .flat_map(|jobs| jobs.keys().map(ToString::to_string))
        .collect();
    let unsighted: Vec<&str> = billed
        .keys()
        .copied()
        .filter(|job| !sighted.contains(*job))
        .collect();
    if billed.len() <= intents.len() || unsighted.is_empty() {
        return;
    }
    let named = format!("; never answered to a user: {}", unsighted.join(", "));
    let sent = match intents.len() {
        1 => "1 intent".to_owned(),
        n => format!("{n} intents"),
    };
    let message = format!(
        "{} jobs did billed work at the providers for {sent} sent{named}",
        billed.len()
    );
    let evidence = billed.values().flatten().copied();
    findings.report(Invariant::OneJobPerIntent, message, evidence);
}

/// Every job the run associates with each intent, and where: the store's
/// rows, the trace's creations, and the 2xx creates that named it.
fn sightings_by_intent<'a>(run: &RunIndex<'a>) -> IntentSightings<'a> {
    let requests = create_requests(run);
    let mut intents: IntentSightings<'a> = BTreeMap::new();
    for job in run.jobs.values() {
        let key = run
            .created
            .get(&job.id)
            .and_then(|c| c.first())
            .map_or(job.idempotency_key.as_str(), |c| intent_key(&requests, c));
        intents
            .entry((job.owner_id.0.as_str(), key))
            .or_default()
            .entry(job.id)
            .or_default()
            .row = true;
    }
    for created in run.created.values().flatten() {
        intents
            .entry((created.owner, intent_key(&requests, created)))
            .or_default()
            .entry(created.job)
            .or_default()
            .created
            .push(created.seq);
    }
    for exchange in &run.exchanges {
        let (Some(key), Some(job), true) = (
            exchange.create_key(),
            exchange.job_id,
            exchange.is_success(),
        ) else {
            continue;
        };
        let sightings = intents
            .entry((exchange.owner, key))
            .or_default()
            .entry(job)
            .or_default();
        sightings.acknowledged.extend(exchange.seqs());
        sightings.responses.push(exchange.response_seq);
    }
    intents
}

/// `job j (a row in the store; created at seq 3; acknowledged at seq 4)`,
/// for each job of one intent.
fn describe_sightings(jobs: &BTreeMap<JobId, Sightings>) -> Vec<String> {
    jobs.iter()
        .map(|(job, s)| {
            let mut places = Vec::new();
            if s.row {
                places.push("a row in the store".to_owned());
            }
            if !s.created.is_empty() {
                places.push(format!("created at {}", seqs_text(&s.created)));
            }
            if !s.responses.is_empty() {
                places.push(format!("acknowledged at {}", seqs_text(&s.responses)));
            }
            format!("job {job} ({})", places.join("; "))
        })
        .collect()
}

/// Invariant 8. A successful answer names only jobs of the client's owner:
/// the owner of the job's row (or `job_created`), or, where the run does
/// not see the store (a service judged from outside), the owner whose
/// create the job was first answered to as a new job.
fn owner_isolation(run: &RunIndex<'_>, findings: &mut Findings) {
    for exchange in &run.exchanges {
        let (Some(job), true) = (exchange.job_id, exchange.is_success()) else {
            continue;
        };
        if let Some(owner) = run.owner_of_job(job) {
            if owner != exchange.owner {
                findings.report(
                    Invariant::OwnerIsolation,
                    format!(
                        "{} naming job {job}, which belongs to owner {owner}",
                        exchange.describe()
                    ),
                    exchange.seqs(),
                );
            }
            continue;
        }
        // A job known nowhere else is its first new-job answer's owner's.
        let Some(first) = run.answered_new(job) else {
            continue;
        };
        if first.owner != exchange.owner {
            findings.report(
                Invariant::OwnerIsolation,
                format!(
                    "{} naming job {job}, which {} as a new job",
                    exchange.describe(),
                    first.describe()
                ),
                exchange.seqs().into_iter().chain(first.seqs()),
            );
        }
    }
}

/// Invariant 11. Every job a successful answer named is in the store at the
/// end, whatever crashed in between.
fn nothing_lost(run: &RunIndex<'_>, findings: &mut Findings) {
    let mut missing: BTreeMap<JobId, Vec<u64>> = BTreeMap::new();
    for exchange in &run.exchanges {
        if let (Some(job), true) = (exchange.job_id, exchange.is_success())
            && !run.jobs.contains_key(&job)
        {
            missing.entry(job).or_default().extend(exchange.seqs());
        }
    }
    for (job, seqs) in missing {
        let created = run.created_seqs(job);
        let created_text = if created.is_empty() {
            String::new()
        } else {
            format!(" (created at {})", seqs_text(&created))
        };
        findings.report(
            Invariant::NothingLost,
            format!(
                "job {job}{created_text} was acknowledged with 2xx but is not in the store at the end"
            ),
            seqs.into_iter().chain(created),
        );
    }
}
