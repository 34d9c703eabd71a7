//! A provider's ledger, as the bench records it: every execution a request
//! started, billed or not. The provider test server keeps it; the oracle
//! judges side effects (invariant 9) from it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where an execution stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecutionOutcome {
    Running,
    /// The work was done and billed.
    Succeeded,
    /// A definitive error: nothing done, nothing billed.
    Failed,
    /// Cancelled before it finished, or a key cancelled before any request
    /// carried it (then `job_id` is `None`): nothing billed.
    Cancelled,
}

impl ExecutionOutcome {
    /// The outcome's name, as serialized.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }
}

/// One entry of the provider's ledger.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Execution {
    /// The request's `Idempotency-Key`.
    pub key: String,
    /// `metadata.job_id` of the request, if it had one.
    pub job_id: Option<String>,
    /// 1 for the first entry of the ledger, then 2, 3, ...
    pub seq: u64,
    /// Whether the work was done and charged for.
    pub billed: bool,
    pub outcome: ExecutionOutcome,
    /// Once succeeded: the content parsed as JSON, or the raw text when it is
    /// not JSON (prose).
    pub output: Option<Value>,
    /// The model that really ran it, when that is not the model the request
    /// asked for (a provider that silently switched models): what makes an
    /// output uncertified whatever the certificate said when it was checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served_model: Option<String>,
}
