//! A contract as data: the files a person writes (a TOML file naming a
//! prompt template, an output JSON Schema, a business type and a corpus),
//! read, checked and compiled once (by [`crate::compile`]) into a
//! [`Contract`], with its bounds and its errors.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use minijinja::Environment;
use serde_json::Value;

use idem_model::document::Document;
use idem_model::json::{Json, WideInteger};

use crate::business::BusinessType;

/// The highest sampling temperature a contract may be certified at: above
/// it, a provider that shares the contract may still answer differently
/// from one call to the next, and agreement across samples proves nothing.
pub const TEMPERATURE_MAX: f64 = 0.2;
/// The fewest corpus inputs a contract may have.
pub const CORPUS_INPUTS_MIN: usize = 20;
/// The most corpus inputs a contract may have: a certification's calls are
/// inputs times samples, and must stay bounded.
pub const CORPUS_INPUTS_MAX: usize = 256;
/// The most samples per input.
pub const SAMPLES_PER_INPUT_MAX: u32 = 16;
/// The largest output budget, in tokens.
pub const MAX_OUTPUT_TOKENS_MAX: u32 = 65_536;
/// The largest contract file, schema or corpus read, in bytes.
pub const FILE_LEN_MAX_BYTES: usize = 4 * 1024 * 1024;
/// Problems reported per contract; past it, one closing line says how many more.
pub const PROBLEMS_MAX: usize = 32;
/// Names of contracts and corpus inputs, at most.
pub const NAME_LEN_MAX: usize = 64;

/// The contract idem ships: used when none is named.
pub const SHIPPED_DIR: &str = "core/contracts/triage";

/// One file of a contract: where it is (for messages) and what it says.
#[derive(Clone, Debug)]
pub(super) struct Source {
    pub(super) path: String,
    pub(super) text: String,
}

/// One thing wrong with a contract's files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContractProblem {
    pub path: String,
    /// From 1.
    pub line: usize,
    /// From 1, in characters.
    pub col: usize,
    pub message: String,
}

impl fmt::Display for ContractProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.path, self.line, self.col, self.message
        )
    }
}

/// Why a contract cannot be used. Printed one problem per line.
#[derive(Debug, thiserror::Error)]
pub enum ContractError {
    #[error("{path}: cannot read: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{}", display_problems(.0))]
    Invalid(Vec<ContractProblem>),
}

pub(super) fn display_problems(problems: &[ContractProblem]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

/// One corpus input and what the round trip must give for it.
#[derive(Clone, Debug, PartialEq)]
pub struct CorpusInput {
    pub name: String,
    /// The job params the prompt is rendered from.
    pub params: Value,
    /// The business result's fields that must match, exactly.
    pub expect: BTreeMap<String, Value>,
}

/// A prompt rendered for one call: what the provider is sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RenderedPrompt {
    pub system: String,
    pub user: String,
}

/// A prompt template that would not render for some params.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the {part} prompt does not render: {message}")]
pub struct RenderError {
    pub part: &'static str,
    pub message: String,
}

/// A checked, compiled contract. Cheap to share behind an `Arc`.
pub struct Contract {
    pub name: String,
    pub prompt_version: String,
    pub schema_version: String,
    pub business_type: BusinessType,
    pub temperature: f64,
    pub samples_per_input: u32,
    pub max_output_tokens: u32,
    /// Fields that may differ between samples of one input.
    pub varying_fields: BTreeSet<String>,
    pub inputs: Vec<CorpusInput>,
    /// Where the contract was read from, for reports.
    pub source: String,
    pub(super) schema: Value,
    pub(super) validator: jsonschema::Validator,
    pub(super) templates: Environment<'static>,
}

impl fmt::Debug for Contract {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Contract")
            .field("name", &self.name)
            .field("prompt_version", &self.prompt_version)
            .field("schema_version", &self.schema_version)
            .field("business_type", &self.business_type)
            .field("temperature", &self.temperature)
            .field("samples_per_input", &self.samples_per_input)
            .field("inputs", &self.inputs.len())
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// `json` as a template value with its numbers exact: an integer of up to
/// 128 bits is a template integer (printed, and written by `tojson`, with
/// all its digits); a number neither that nor an `f64` holds is its exact
/// digits as text, since the template engine has no wider number (so
/// `tojson` writes it as a JSON string, digits intact).
fn template_value(json: &Json) -> minijinja::Value {
    match json {
        Json::Null => minijinja::Value::from(()),
        Json::Bool(b) => minijinja::Value::from(*b),
        Json::String(s) => minijinja::Value::from(s.as_str()),
        Json::Number(n) => match n.as_wide_integer() {
            Some(WideInteger::Signed(i)) => minijinja::Value::from(i),
            Some(WideInteger::Unsigned(u)) => minijinja::Value::from(u),
            None => {
                let read = json.to_value();
                if Json::from_value(&read) == *json {
                    minijinja::Value::from(minijinja::value::Serde(&read))
                } else {
                    minijinja::Value::from(n.canonical_text())
                }
            }
        },
        Json::Array(items) => items.iter().map(template_value).collect(),
        Json::Object(members) => members
            .iter()
            .map(|(k, v)| (k.clone(), template_value(v)))
            .collect::<BTreeMap<_, _>>()
            .into(),
    }
}

impl Contract {
    /// The output schema, as written.
    pub fn schema(&self) -> &Value {
        &self.schema
    }

    /// Renders the prompt for `params`.
    pub fn render(&self, params: &Value) -> Result<RenderedPrompt, RenderError> {
        self.render_exact(&Document::from(params.clone()))
    }

    /// Renders the prompt for `params`, its numbers exact (see
    /// [`template_value`]).
    pub fn render_exact(&self, params: &Document) -> Result<RenderedPrompt, RenderError> {
        let params = if params.is_rounded_in_value() {
            template_value(&params.json())
        } else {
            minijinja::Value::from(minijinja::value::Serde(params.value()))
        };
        let context = minijinja::context! { params => params };
        let render = |part: &'static str| {
            self.templates
                .get_template(part)
                .and_then(|t| t.render(&context))
                .map_err(|e| RenderError {
                    part,
                    message: e.to_string(),
                })
        };
        Ok(RenderedPrompt {
            system: render("system")?,
            user: render("user")?,
        })
    }

    /// Every way `output` breaks the schema, each as `at <pointer>: <why>`,
    /// at most `errors_max`. Empty when it validates.
    pub fn schema_errors(&self, output: &Value, errors_max: usize) -> Vec<String> {
        self.validator
            .iter_errors(output)
            .take(errors_max)
            .map(|e| {
                let at = e.instance_path().to_string();
                let at = if at.is_empty() { "/".to_owned() } else { at };
                format!("at {at}: {e}")
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shipped contract writes params that have no `text` with
    /// `tojson`: a number an `f64` would round reaches the provider with
    /// its digits.
    #[test]
    fn numbers_reach_the_prompt_with_their_digits() {
        let contract = Contract::shipped();
        let params = Document::parse(
            br#"{"n":18446744073709551617,"m":-170141183460469231731687303715884105729,"x":0.10000000000000000000001,"k":1.5}"#,
        )
        .expect("valid JSON");
        let user = contract.render_exact(&params).expect("renders").user;
        for digits in [
            "18446744073709551617",
            "0.10000000000000000000001",
            "1.70141183460469231731687303715884105729e+38",
            "1.5",
        ] {
            assert!(user.contains(digits), "{digits} in {user}");
        }
        // Params a `Value` holds render exactly as before.
        let plain = serde_json::json!({"n": 7, "k": 1.5});
        assert_eq!(
            contract.render_exact(&Document::from(plain.clone())),
            contract.render(&plain)
        );
    }
}
