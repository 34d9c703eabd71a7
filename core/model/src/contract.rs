//! Provider contracts: which providers exist, and whether one is certified
//! to share the operating contract of the job's primary.
//!
//! A certificate is keyed by (provider, model, prompt_version,
//! schema_version) and stops being valid as soon as any of them changes:
//! the lookup uses the provider's *current* model and the service's
//! *current* prompt and schema versions, so an old certificate simply no
//! longer matches.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::Timestamp;

/// What a certificate is about.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct CertificateKey {
    pub provider: String,
    pub model: String,
    pub prompt_version: String,
    pub schema_version: String,
}

/// The stored result of a certification run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Certificate {
    pub key: CertificateKey,
    pub passed: bool,
    pub evidence: Value,
    pub at: Timestamp,
}

impl Certificate {
    /// What the provider said it served when the certificate was earned
    /// (`model_identity` in the evidence), if it said.
    pub fn model_identity(&self) -> Option<&str> {
        self.evidence.get("model_identity").and_then(Value::as_str)
    }

    /// Whether an answer the provider says came from `model` is one this
    /// certificate vouches for: a model that answered the certification run
    /// (`served_models` in the evidence), else, when none said, the model
    /// the provider reported serving (`model_identity`), else the model
    /// certified by name. A certificate is earned by what answered, so an
    /// answer from anything else is not covered, whatever the name asked.
    pub fn covers_answer_from(&self, model: &str) -> bool {
        let served: Vec<&str> = self
            .evidence
            .get("served_models")
            .and_then(Value::as_array)
            .map(|models| models.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if !served.is_empty() {
            return served.contains(&model);
        }
        self.model_identity().unwrap_or(&self.key.model) == model
    }

    /// Where the provider was reached when the certificate was earned
    /// (`endpoint` in the evidence), if recorded.
    pub fn endpoint(&self) -> Option<&str> {
        self.evidence.get("endpoint").and_then(Value::as_str)
    }
}

/// One provider the service can call.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderSpec {
    pub model: String,
    /// Where the provider is (`https://host:port`), when known. A
    /// certificate earned at another endpoint was earned by another
    /// provider, whatever its name: it is not relied on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
}

/// The providers the service knows, and the contract versions in force.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Providers {
    pub specs: BTreeMap<String, ProviderSpec>,
    pub prompt_version: String,
    pub schema_version: String,
}

impl Providers {
    /// No providers yet, under a contract's prompt and schema versions.
    pub fn for_versions(prompt_version: &str, schema_version: &str) -> Self {
        Self {
            specs: BTreeMap::new(),
            prompt_version: prompt_version.to_owned(),
            schema_version: schema_version.to_owned(),
        }
    }

    /// Providers with the same model name as their provider name, and
    /// contract versions "v1". Convenient for tests and demos.
    pub fn named<'a>(names: impl IntoIterator<Item = &'a str>) -> Self {
        Self {
            specs: names
                .into_iter()
                .map(|n| {
                    (
                        n.to_owned(),
                        ProviderSpec {
                            model: n.to_owned(),
                            endpoint: None,
                        },
                    )
                })
                .collect(),
            prompt_version: "v1".to_owned(),
            schema_version: "v1".to_owned(),
        }
    }

    pub fn contains(&self, name: &str) -> bool {
        self.specs.contains_key(name)
    }

    /// The key a certificate for `provider` must have to be valid today.
    pub fn certificate_key(&self, provider: &str) -> Option<CertificateKey> {
        self.specs.get(provider).map(|spec| CertificateKey {
            provider: provider.to_owned(),
            model: spec.model.clone(),
            prompt_version: self.prompt_version.clone(),
            schema_version: self.schema_version.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn certificate(evidence: Value) -> Certificate {
        Certificate {
            key: CertificateKey {
                provider: "fallback".to_owned(),
                model: "fb".to_owned(),
                prompt_version: "v1".to_owned(),
                schema_version: "v1".to_owned(),
            },
            passed: true,
            evidence,
            at: Timestamp::default(),
        }
    }

    /// What answered the certification run vouches first, then what the
    /// provider reported serving, then the name certified.
    #[test]
    fn an_answer_is_covered_by_what_earned_the_certificate() {
        let cases = [
            (json!({"served_models": ["fb-2024"]}), "fb-2024", true),
            (json!({"served_models": ["fb-2024"]}), "fb", false),
            (
                json!({"served_models": [], "model_identity": "fb-root"}),
                "fb-root",
                true,
            ),
            (json!({"model_identity": "fb-root"}), "fb", false),
            (json!({}), "fb", true),
            (json!({}), "fb-v4", false),
        ];
        for (evidence, model, covered) in cases {
            let label = format!("{evidence} answered by {model}");
            assert_eq!(
                certificate(evidence).covers_answer_from(model),
                covered,
                "{label}"
            );
        }
    }
}
