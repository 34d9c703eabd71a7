//! A contract as data: the files a person writes (a TOML file naming a
//! prompt template, an output JSON Schema, a business type and a corpus),
//! read, checked and compiled once (by [`super::compile`]) into a
//! [`Contract`], with its bounds and its errors.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use minijinja::Environment;
use serde_json::Value;

use super::business::BusinessType;

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

impl Contract {
    /// The output schema, as written.
    pub fn schema(&self) -> &Value {
        &self.schema
    }

    /// Renders the prompt for `params`.
    pub fn render(&self, params: &Value) -> Result<RenderedPrompt, RenderError> {
        let context = minijinja::context! { params => minijinja::Value::from(minijinja::value::Serde(params)) };
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
