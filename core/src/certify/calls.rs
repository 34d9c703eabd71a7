//! A certification's calls: sent a bounded number at a time, each bounded
//! in time and tried a bounded number of times, and each call's outcome
//! kept with what the provider answered, so that a run that learnt nothing
//! can say what it saw (issue 36: a provider answering 400 or 500 to every
//! call was reported as giving no answer).

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;

use super::endpoint::{ChatAnswer, ChatEndpoint, ChatRequest, RunBounds, RunLimits, describe};
use crate::provider::ProviderError;

/// One call to make: input, sample, idempotency key and request.
pub(super) type Call = (usize, u32, String, ChatRequest);

/// How a run is going, as it goes: what a command line shows while a
/// certification runs (a run of 69 calls against a provider answering in
/// 1.5 s takes half a minute).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// The calls are about to go out, `concurrency` at a time.
    Started { calls: usize, concurrency: usize },
    /// One more call is done (its every try): `done` of `calls`, of which
    /// `unusable` got no usable answer.
    Answered {
        done: usize,
        calls: usize,
        unusable: usize,
    },
}

/// Why a call's answer cannot be judged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Unusable {
    /// A definitive refusal of the request (a 4xx other than 429): the
    /// provider judged it and said no.
    Refused(u16),
    /// An answer that is not a chat completion (an HTML page, another API).
    NotAChatCompletion,
    /// No answer: not reached, timed out, broken, or a 5xx or 429 on every
    /// try.
    NoAnswer,
}

/// The outcome of one sample's call.
#[derive(Clone, Debug)]
pub(super) struct SampleAnswer {
    /// The answer, or why it cannot be judged and what the last try saw.
    pub(super) answer: Result<ChatAnswer, (Unusable, String)>,
    pub(super) tries: u32,
}

impl SampleAnswer {
    /// Nothing to judge and nothing the provider decided: the early stop
    /// counts these.
    pub(super) fn unusable(&self) -> bool {
        matches!(
            self.answer,
            Err((Unusable::NoAnswer | Unusable::NotAChatCompletion, _))
        )
    }

    /// The status of a definitive refusal.
    pub(super) fn refused(&self) -> Option<u16> {
        match self.answer {
            Err((Unusable::Refused(status), _)) => Some(status),
            _ => None,
        }
    }
}

/// The most distinct descriptions [`what_came_back`] names.
const KINDS_SHOWN_MAX: usize = 3;

/// What came back for the calls in `answers` that got no usable answer,
/// grouped by what the last try saw, the commonest first: "4 calls, each
/// tried 3 times: no definitive answer: status 500 ...: \"<html>…\"".
pub(super) fn what_came_back<'a>(answers: impl Iterator<Item = &'a SampleAnswer>) -> String {
    let mut kinds: BTreeMap<(&str, u32), usize> = BTreeMap::new();
    for answer in answers {
        if let Err((_, detail)) = &answer.answer {
            *kinds.entry((detail.as_str(), answer.tries)).or_default() += 1;
        }
    }
    let mut kinds: Vec<((&str, u32), usize)> = kinds.into_iter().collect();
    kinds.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let shown: Vec<String> = kinds
        .iter()
        .take(KINDS_SHOWN_MAX)
        .map(|((detail, tries), count)| {
            let calls = if *count == 1 { "call" } else { "calls" };
            let tried = match (*count, *tries) {
                (_, 1) => String::new(),
                (1, n) => format!(", tried {n} times"),
                (_, n) => format!(", each tried {n} times"),
            };
            format!("{count} {calls}{tried}: {detail}")
        })
        .collect();
    let more = kinds.len().saturating_sub(KINDS_SHOWN_MAX);
    let more = if more > 0 {
        format!("; and {more} other answers")
    } else {
        String::new()
    };
    format!("{}{more}", shown.join("; "))
}

/// The run's deadline, armed when there is one.
pub(super) struct Deadline {
    sleep: Option<Pin<Box<dyn std::future::Future<Output = ()> + Send>>>,
    pub(super) ms: u64,
}

impl Deadline {
    pub(super) fn start(deadline_ms: Option<u64>) -> Self {
        Self {
            sleep: deadline_ms.map(|ms| {
                let sleep = crate::timer::sleep(Duration::from_millis(ms));
                Box::pin(sleep) as Pin<Box<dyn std::future::Future<Output = ()> + Send>>
            }),
            ms: deadline_ms.unwrap_or(0),
        }
    }

    /// Resolves when the deadline passes; never without one.
    async fn passed(&mut self) {
        match &mut self.sleep {
            Some(sleep) => sleep.as_mut().await,
            None => std::future::pending().await,
        }
    }
}

/// The answers so far, by (input, sample).
pub(super) type Answers = BTreeMap<(usize, u32), SampleAnswer>;

/// Runs every call, at most `limits.concurrency` at a time, until they are
/// all answered, the deadline passes, or (with `stop_when_silent`) the
/// first wave got no usable answer at all, telling `progress` as calls
/// finish. Says why it stopped early, if it did.
pub(super) async fn run_calls(
    endpoint: &Arc<dyn ChatEndpoint>,
    calls: Vec<Call>,
    limits: RunLimits,
    bounds: RunBounds,
    deadline: &mut Deadline,
    progress: &(dyn Fn(Progress) + Sync),
) -> (Answers, Option<String>) {
    let total = calls.len();
    progress(Progress::Started {
        calls: total,
        concurrency: limits.concurrency,
    });
    let mut answers = Answers::new();
    let mut running = JoinSet::new();
    let mut pending = calls.into_iter();
    loop {
        while running.len() < limits.concurrency
            && let Some(call) = pending.next()
        {
            running.spawn(sample(Arc::clone(endpoint), call, limits));
        }
        let joined = tokio::select! {
            joined = running.join_next() => joined,
            () = deadline.passed() => {
                let why = deadline_passed(deadline.ms, &answers);
                return (answers, Some(why));
            }
        };
        match joined {
            Some(Ok((at, answer))) => {
                answers.insert(at, answer);
                progress(Progress::Answered {
                    done: answers.len(),
                    calls: total,
                    unusable: answers.values().filter(|a| a.answer.is_err()).count(),
                });
            }
            // A call task that panicked: its sample is reported missing as
            // a transport failure, never silently passed.
            Some(Err(e)) => tracing::error!(error = %e, "a certification call failed to run"),
            None => return (answers, None),
        }
        if bounds.stop_when_silent
            && let Some(why) = silent_so_far(&answers, limits)
        {
            return (answers, Some(why));
        }
    }
}

/// Why a run stopped at its deadline, with what came back so far.
fn deadline_passed(deadline_ms: u64, answers: &Answers) -> String {
    let mut why = format!("the certification's deadline of {deadline_ms} ms passed");
    if answers.values().any(SampleAnswer::unusable) {
        let seen = what_came_back(answers.values().filter(|a| a.unusable()));
        why.push_str(&format!("; calls without a usable answer: {seen}"));
    }
    why
}

/// Why the run stops early, once the first wave of calls (one per
/// concurrent slot) got no usable answer at all.
fn silent_so_far(answers: &Answers, limits: RunLimits) -> Option<String> {
    (answers.len() >= limits.concurrency && answers.values().all(SampleAnswer::unusable)).then(
        || {
            format!(
                "the first {} calls got no usable answer ({}); the rest were not sent",
                answers.len(),
                what_came_back(answers.values())
            )
        },
    )
}

/// One call, every try of it, keyed by its (input, sample).
async fn sample(
    endpoint: Arc<dyn ChatEndpoint>,
    (index, sample, key, request): Call,
    limits: RunLimits,
) -> ((usize, u32), SampleAnswer) {
    let answer = call_with_retries(endpoint.as_ref(), &request, &key, limits).await;
    ((index, sample), answer)
}

async fn call_with_retries(
    endpoint: &dyn ChatEndpoint,
    request: &ChatRequest,
    key: &str,
    limits: RunLimits,
) -> SampleAnswer {
    let timeout = Duration::from_millis(limits.call_timeout_ms);
    let mut last = String::new();
    for tries in 1..=limits.call_tries_max {
        // The same key on every try: a provider that honours keys replays a
        // request it already executed instead of billing it again.
        let outcome = match crate::timer::timeout(timeout, endpoint.chat(request, key)).await {
            Ok(answer) => settled(answer),
            Err(_) => Err(format!("no answer within {} ms", limits.call_timeout_ms)),
        };
        match outcome {
            Ok(answer) => return SampleAnswer { answer, tries },
            Err(retry) => last = retry,
        }
    }
    SampleAnswer {
        answer: Err((Unusable::NoAnswer, last)),
        tries: limits.call_tries_max,
    }
}

/// One try's answer as the call's outcome, or what it saw when another try
/// may do better. A refusal (a 4xx other than 429) was judged by the
/// provider: a finding, not a hiccup; an answer that is not a chat
/// completion would be the same again. Only no answer, a 429 or a 5xx is
/// tried again.
fn settled(
    answer: Result<ChatAnswer, ProviderError>,
) -> Result<Result<ChatAnswer, (Unusable, String)>, String> {
    match answer {
        Ok(answer) => Ok(Ok(answer)),
        Err(e @ ProviderError::Rejected { status, .. }) if status != 429 && status < 500 => {
            Ok(Err((Unusable::Refused(status), describe(&e))))
        }
        Err(e @ ProviderError::Invalid(_)) => Ok(Err((Unusable::NotAChatCompletion, describe(&e)))),
        Err(e) => Err(describe(&e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unusable(kind: Unusable, detail: &str, tries: u32) -> SampleAnswer {
        SampleAnswer {
            answer: Err((kind, detail.to_owned())),
            tries,
        }
    }

    /// What came back is named, commonest first, with how often it was
    /// tried, and past three kinds only counted.
    #[test]
    fn what_came_back_names_the_answers() {
        let status = "no definitive answer: status 500: \"<html>boom</html>\"";
        let answers = [
            unusable(Unusable::NoAnswer, status, 3),
            unusable(Unusable::NoAnswer, status, 3),
            unusable(Unusable::Refused(400), "refused with status 400: bad", 1),
        ];
        assert_eq!(
            what_came_back(answers.iter()),
            format!("2 calls, each tried 3 times: {status}; 1 call: refused with status 400: bad")
        );
        let many: Vec<SampleAnswer> = (0..5)
            .map(|i| unusable(Unusable::NoAnswer, &format!("kind {i}"), 2))
            .collect();
        assert_eq!(
            what_came_back(many.iter()),
            "1 call, tried 2 times: kind 0; 1 call, tried 2 times: kind 1; \
             1 call, tried 2 times: kind 2; and 2 other answers"
        );
    }
}
