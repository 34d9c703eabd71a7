//! Reading, checking and compiling a contract's files into a
//! [`Contract`] (its types are in [`crate::spec`]).
//!
//! Every problem in a contract's files is reported with `path:line:col`, all
//! of them at once (up to [`PROBLEMS_MAX`]), so that one edit-and-run cycle
//! shows everything wrong. A contract is refused when its output schema is
//! not strict (an object schema that allows keys it does not name, or names
//! keys it does not require), when its temperature is above
//! [`TEMPERATURE_MAX`], or when its corpus has fewer than
//! [`CORPUS_INPUTS_MIN`] inputs: each would let a provider that does not
//! share the contract pass.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock};

use minijinja::{AutoEscape, Environment};
use serde::Deserialize;
use serde_json::Value;
use serde_spanned::Spanned;

use crate::business::BusinessType;
use crate::spec::{
    CORPUS_INPUTS_MAX, CORPUS_INPUTS_MIN, Contract, ContractError, ContractProblem, CorpusInput,
    FILE_LEN_MAX_BYTES, MAX_OUTPUT_TOKENS_MAX, NAME_LEN_MAX, PROBLEMS_MAX, SAMPLES_PER_INPUT_MAX,
    SHIPPED_DIR, Source, TEMPERATURE_MAX, display_problems,
};

const SHIPPED_CONTRACT: &str = include_str!("../../contracts/triage/contract.toml");
const SHIPPED_SCHEMA: &str = include_str!("../../contracts/triage/schema.json");
const SHIPPED_CORPUS: &str = include_str!("../../contracts/triage/corpus.toml");

static SHIPPED: LazyLock<Arc<Contract>> = LazyLock::new(|| {
    let read = |name: &str| -> Result<Source, ContractError> {
        let text = match name {
            "schema.json" => SHIPPED_SCHEMA,
            "corpus.toml" => SHIPPED_CORPUS,
            other => {
                return Err(ContractError::Read {
                    path: format!("{SHIPPED_DIR}/{other}"),
                    source: std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        "the shipped contract has no such file",
                    ),
                });
            }
        };
        Ok(Source {
            path: format!("{SHIPPED_DIR}/{name}"),
            text: text.to_owned(),
        })
    };
    let main = Source {
        path: format!("{SHIPPED_DIR}/contract.toml"),
        text: SHIPPED_CONTRACT.to_owned(),
    };
    match Contract::compile(main, &read) {
        Ok(contract) => Arc::new(contract),
        // A test loads it, so a broken shipped contract never leaves CI.
        Err(e) => panic!("the shipped contract is invalid:\n{e}"),
    }
});

impl Contract {
    /// The contract idem ships (compiled once per process).
    pub fn shipped() -> Arc<Contract> {
        Arc::clone(&SHIPPED)
    }

    /// Reads, checks and compiles the contract at `path`; the files it
    /// names are read relative to its folder.
    pub fn load(path: &Path) -> Result<Contract, ContractError> {
        let dir: PathBuf = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let main = read_source(path)?;
        let read = |name: &str| read_source(&dir.join(name));
        Self::compile(main, &read).map_err(|e| match e {
            Compile::Read(e) => e,
            Compile::Problems(problems) => ContractError::Invalid(problems),
        })
    }
}

fn read_source(path: &Path) -> Result<Source, ContractError> {
    let display = path.display().to_string();
    let text = std::fs::read(path).map_err(|source| ContractError::Read {
        path: display.clone(),
        source,
    })?;
    if text.len() > FILE_LEN_MAX_BYTES {
        return Err(ContractError::Invalid(vec![ContractProblem {
            path: display,
            line: 1,
            col: 1,
            message: format!("the file is larger than {FILE_LEN_MAX_BYTES} bytes"),
        }]));
    }
    let text = String::from_utf8(text).map_err(|_| ContractError::Read {
        path: display.clone(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8"),
    })?;
    Ok(Source {
        path: display,
        text,
    })
}

/// `contract.toml`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ContractFile {
    name: Spanned<String>,
    prompt_version: Spanned<String>,
    schema_version: Spanned<String>,
    business_type: Spanned<String>,
    schema: Spanned<String>,
    corpus: Spanned<String>,
    temperature: Spanned<f64>,
    samples_per_input: Spanned<u32>,
    max_output_tokens: Spanned<u32>,
    #[serde(default)]
    varying_fields: Vec<Spanned<String>>,
    prompt: PromptFile,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PromptFile {
    system: Spanned<String>,
    user: Spanned<String>,
}

/// The corpus file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CorpusFile {
    #[serde(default)]
    inputs: Vec<Spanned<InputFile>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InputFile {
    name: Spanned<String>,
    params: Spanned<toml::Table>,
    expect: Spanned<BTreeMap<String, Spanned<toml::Value>>>,
}

/// What went wrong compiling: a file that could not be read stops
/// everything; problems are collected.
enum Compile {
    Read(ContractError),
    Problems(Vec<ContractProblem>),
}

impl fmt::Display for Compile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Compile::Read(e) => write!(f, "{e}"),
            Compile::Problems(problems) => f.write_str(&display_problems(problems)),
        }
    }
}

/// Collects problems, each against the file it is in.
#[derive(Default)]
struct Problems(Vec<(usize, ContractProblem)>);

impl Problems {
    fn at(&mut self, source: &Source, span: Range<usize>, message: impl Into<String>) {
        let (line, col) = line_col(&source.text, span.start);
        self.0.push((
            span.start,
            ContractProblem {
                path: source.path.clone(),
                line,
                col,
                message: message.into(),
            },
        ));
    }

    fn at_line_col(&mut self, source: &Source, line: usize, col: usize, message: String) {
        self.0.push((
            offset_of(&source.text, line, col),
            ContractProblem {
                path: source.path.clone(),
                line,
                col,
                message,
            },
        ));
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// In file order (files in the order they were read), bounded.
    fn into_vec(mut self) -> Vec<ContractProblem> {
        // Stable: problems of different files keep the order they were found.
        let mut by_file: Vec<String> = Vec::new();
        for (_, p) in &self.0 {
            if !by_file.contains(&p.path) {
                by_file.push(p.path.clone());
            }
        }
        self.0.sort_by_key(|(offset, p)| {
            (
                by_file.iter().position(|f| *f == p.path).unwrap_or(0),
                *offset,
            )
        });
        let total = self.0.len();
        let mut problems: Vec<ContractProblem> = self
            .0
            .into_iter()
            .take(PROBLEMS_MAX)
            .map(|(_, p)| p)
            .collect();
        if total > PROBLEMS_MAX
            && let Some(last) = problems.last().cloned()
        {
            problems.push(ContractProblem {
                message: format!("and {} more problems", total - PROBLEMS_MAX),
                ..last
            });
        }
        problems
    }
}

/// `(line, col)` of byte `offset`, both from 1; columns count characters.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let col = before.get(line_start..).map_or(0, |s| s.chars().count()) + 1;
    (line, col)
}

fn offset_of(text: &str, line: usize, col: usize) -> usize {
    let start: usize = text
        .split_inclusive('\n')
        .take(line.saturating_sub(1))
        .map(str::len)
        .sum();
    start + col.saturating_sub(1)
}

fn name_ok(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= NAME_LEN_MAX
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

impl Contract {
    /// Compiles the contract file `main`, reading the files it names with
    /// `read`; every problem found, or the contract.
    fn compile(
        main: Source,
        read: &dyn Fn(&str) -> Result<Source, ContractError>,
    ) -> Result<Contract, Compile> {
        let mut problems = Problems::default();
        let file = parse_contract_file(&main, &mut problems)?;
        let header = Header::check(&main, &file, &mut problems);
        let templates = compile_templates(&main, &file.prompt, &mut problems);
        let schema_source = read(file.schema.get_ref()).map_err(Compile::Read)?;
        let (schema, validator, properties) = compile_schema(&schema_source, &mut problems);
        let varying_fields = check_varying_fields(&main, &file, properties.as_ref(), &mut problems);
        let corpus_source = read(file.corpus.get_ref()).map_err(Compile::Read)?;
        let inputs = compile_corpus(&corpus_source, properties.as_ref(), &mut problems);
        let (Some(business_type), Some(validator), Some(schema), Some(templates), true) = (
            header.business_type,
            validator,
            schema,
            templates,
            problems.is_empty(),
        ) else {
            return Err(Compile::Problems(problems.into_vec()));
        };
        let contract = Contract {
            name: file.name.into_inner(),
            prompt_version: file.prompt_version.into_inner(),
            schema_version: file.schema_version.into_inner(),
            business_type,
            temperature: header.temperature,
            samples_per_input: header.samples_per_input,
            max_output_tokens: header.max_output_tokens,
            varying_fields,
            inputs,
            source: main.path.clone(),
            schema,
            validator,
            templates,
        };
        every_input_renders(contract, &corpus_source)
    }
}

/// `contract.toml` parsed, or its one syntax problem.
fn parse_contract_file(main: &Source, problems: &mut Problems) -> Result<ContractFile, Compile> {
    toml::from_str(&main.text).map_err(|e| {
        problems.at(
            main,
            e.span().unwrap_or(0..0),
            e.message().trim_end().to_owned(),
        );
        Compile::Problems(std::mem::take(problems).into_vec())
    })
}

/// The contract file's own fields, checked against their bounds.
struct Header {
    business_type: Option<BusinessType>,
    temperature: f64,
    samples_per_input: u32,
    max_output_tokens: u32,
}

impl Header {
    fn check(main: &Source, file: &ContractFile, problems: &mut Problems) -> Self {
        for (field, value) in [
            ("name", &file.name),
            ("prompt_version", &file.prompt_version),
            ("schema_version", &file.schema_version),
        ] {
            if !name_ok(value.get_ref()) {
                problems.at(
                    main,
                    value.span(),
                    format!(
                        "`{field}` must be 1 to {NAME_LEN_MAX} letters, digits, '-', '_' or '.'"
                    ),
                );
            }
        }
        let header = Self {
            business_type: business_type(main, file, problems),
            temperature: *file.temperature.get_ref(),
            samples_per_input: *file.samples_per_input.get_ref(),
            max_output_tokens: *file.max_output_tokens.get_ref(),
        };
        header.check_bounds(main, file, problems);
        header
    }

    /// Temperature, samples and output budget within their bounds.
    fn check_bounds(&self, main: &Source, file: &ContractFile, problems: &mut Problems) {
        let temperature = self.temperature;
        if !(0.0..=TEMPERATURE_MAX).contains(&temperature) {
            problems.at(
                main,
                file.temperature.span(),
                format!(
                    "`temperature` must be between 0 and {TEMPERATURE_MAX}, got {temperature}: a contract is certified at low temperature"
                ),
            );
        }
        let samples = self.samples_per_input;
        if !(1..=SAMPLES_PER_INPUT_MAX).contains(&samples) {
            problems.at(
                main,
                file.samples_per_input.span(),
                format!("`samples_per_input` must be 1 to {SAMPLES_PER_INPUT_MAX}, got {samples}"),
            );
        }
        let max_output_tokens = self.max_output_tokens;
        if !(1..=MAX_OUTPUT_TOKENS_MAX).contains(&max_output_tokens) {
            problems.at(
                main,
                file.max_output_tokens.span(),
                format!(
                    "`max_output_tokens` must be 1 to {MAX_OUTPUT_TOKENS_MAX}, got {max_output_tokens}"
                ),
            );
        }
    }
}

/// The business type the file names, if it is one idem knows.
fn business_type(
    main: &Source,
    file: &ContractFile,
    problems: &mut Problems,
) -> Option<BusinessType> {
    let business_type = BusinessType::from_name(file.business_type.get_ref());
    if business_type.is_none() {
        problems.at(
            main,
            file.business_type.span(),
            format!(
                "unknown business type {:?}; known: {}",
                file.business_type.get_ref(),
                BusinessType::ALL
                    .iter()
                    .map(|t| t.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        );
    }
    business_type
}

/// The fields that may vary between samples: each must be a property of
/// the output schema.
fn check_varying_fields(
    main: &Source,
    file: &ContractFile,
    properties: Option<&BTreeSet<String>>,
    problems: &mut Problems,
) -> BTreeSet<String> {
    let mut varying_fields = BTreeSet::new();
    for field in &file.varying_fields {
        if let Some(properties) = properties
            && !properties.contains(field.get_ref())
        {
            problems.at(
                main,
                field.span(),
                format!(
                    "{:?} is not a property of the output schema",
                    field.get_ref()
                ),
            );
        }
        varying_fields.insert(field.get_ref().clone());
    }
    varying_fields
}

/// Every corpus input must render: a template that fails on real inputs
/// is a contract bug, found here rather than mid-certification.
fn every_input_renders(contract: Contract, corpus_source: &Source) -> Result<Contract, Compile> {
    let mut problems = Problems::default();
    for (input, spanned) in contract.inputs.iter().zip(corpus_spans(corpus_source)) {
        if let Err(e) = contract.render(&input.params) {
            problems.at(
                corpus_source,
                spanned,
                format!("input {:?}: {e}", input.name),
            );
        }
    }
    if problems.is_empty() {
        Ok(contract)
    } else {
        Err(Compile::Problems(problems.into_vec()))
    }
}

/// The spans of the corpus's inputs, in order (the file has parsed once
/// already, so parsing again cannot fail differently).
fn corpus_spans(source: &Source) -> Vec<Range<usize>> {
    toml::from_str::<CorpusFile>(&source.text)
        .map(|file| file.inputs.iter().map(Spanned::span).collect())
        .unwrap_or_default()
}

fn compile_templates(
    main: &Source,
    prompt: &PromptFile,
    problems: &mut Problems,
) -> Option<Environment<'static>> {
    let mut env = Environment::new();
    // Text goes to the provider exactly as written: no HTML escaping, ever.
    env.set_auto_escape_callback(|_| AutoEscape::None);
    let mut ok = true;
    for (name, template) in [("system", &prompt.system), ("user", &prompt.user)] {
        if let Err(e) = env.add_template_owned(name, template.get_ref().clone()) {
            ok = false;
            let span = template.span();
            // The template's first line is on the line of its opening
            // quotes, or the next one for a multi-line string that starts
            // with a newline.
            let raw = main.text.get(span.clone()).unwrap_or_default();
            let skip = usize::from(
                (raw.starts_with("\"\"\"") || raw.starts_with("'''"))
                    && raw.get(3..).is_some_and(|r| r.starts_with('\n')),
            );
            let (line, _) = line_col(&main.text, span.start);
            let line = line + skip + e.line().unwrap_or(1) - 1;
            let message = format!(
                "the {name} template: {}",
                e.detail().map_or_else(|| e.to_string(), str::to_owned)
            );
            problems.at_line_col(main, line, 1, message);
        }
    }
    ok.then_some(env)
}

/// The schema, its validator and its top-level property names.
fn compile_schema(
    source: &Source,
    problems: &mut Problems,
) -> (
    Option<Value>,
    Option<jsonschema::Validator>,
    Option<BTreeSet<String>>,
) {
    let schema: Value = match serde_json::from_str(&source.text) {
        Ok(schema) => schema,
        Err(e) => {
            problems.at_line_col(source, e.line().max(1), e.column().max(1), e.to_string());
            return (None, None, None);
        }
    };
    let validator = match jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .build(&schema)
    {
        Ok(validator) => Some(validator),
        Err(e) => {
            let pointer = e.schema_path().to_string();
            let offset = locate_pointer(&source.text, &pointer);
            problems.at(
                source,
                offset..offset,
                format!("not a valid JSON Schema: {e}"),
            );
            None
        }
    };
    let mut strictness = Vec::new();
    check_strict(&schema, "", &mut strictness);
    for (pointer, message) in strictness {
        let offset = locate_pointer(&source.text, &pointer);
        problems.at(source, offset..offset, message);
    }
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect());
    (Some(schema), validator, properties)
}

/// A strict schema: the root is an object schema, and every object schema
/// refuses keys it does not name and requires every key it names.
fn check_strict(schema: &Value, pointer: &str, out: &mut Vec<(String, String)>) {
    let Some(object) = schema.as_object() else {
        return;
    };
    let is_object = object.get("type").and_then(Value::as_str) == Some("object");
    if pointer.is_empty() && !is_object {
        out.push((
            String::new(),
            "the output schema must be an object schema (`\"type\": \"object\"`)".to_owned(),
        ));
    }
    if is_object {
        if object.get("additionalProperties") != Some(&Value::Bool(false)) {
            out.push((
                pointer.to_owned(),
                format!(
                    "the object schema at {:?} must set `\"additionalProperties\": false`: a strict schema refuses keys it does not name",
                    display_pointer(pointer)
                ),
            ));
        }
        let named: BTreeSet<&str> = object
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| p.keys().map(String::as_str).collect())
            .unwrap_or_default();
        let required: BTreeSet<&str> = object
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        for missing in named.difference(&required) {
            out.push((
                format!("{pointer}/properties/{missing}"),
                format!(
                    "property {missing:?} must be listed in `required`: a strict schema requires every key it names"
                ),
            ));
        }
    }
    if let Some(properties) = object.get("properties").and_then(Value::as_object) {
        for (name, sub) in properties {
            check_strict(sub, &format!("{pointer}/properties/{name}"), out);
        }
    }
    if let Some(items) = object.get("items") {
        check_strict(items, &format!("{pointer}/items"), out);
    }
}

fn display_pointer(pointer: &str) -> &str {
    if pointer.is_empty() { "/" } else { pointer }
}

/// The byte offset in `text` (a JSON document) of the value a JSON pointer
/// names, found by looking for each key in turn after the previous one.
/// Good enough to put an editor's cursor there; 0 when it cannot tell.
fn locate_pointer(text: &str, pointer: &str) -> usize {
    let mut at = 0;
    for segment in pointer.split('/').filter(|s| !s.is_empty()) {
        let needle = format!("\"{}\"", segment.replace("~1", "/").replace("~0", "~"));
        match text.get(at..).and_then(|rest| rest.find(&needle)) {
            Some(found) => at += found,
            None => break,
        }
    }
    at
}

fn compile_corpus(
    source: &Source,
    properties: Option<&BTreeSet<String>>,
    problems: &mut Problems,
) -> Vec<CorpusInput> {
    let file: CorpusFile = match toml::from_str(&source.text) {
        Ok(file) => file,
        Err(e) => {
            problems.at(
                source,
                e.span().unwrap_or(0..0),
                e.message().trim_end().to_owned(),
            );
            return Vec::new();
        }
    };
    if file.inputs.len() < CORPUS_INPUTS_MIN {
        problems.at(
            source,
            0..0,
            format!(
                "the corpus has {} inputs; a certification needs at least {CORPUS_INPUTS_MIN}",
                file.inputs.len()
            ),
        );
    }
    if file.inputs.len() > CORPUS_INPUTS_MAX {
        problems.at(
            source,
            file.inputs[CORPUS_INPUTS_MAX].span(),
            format!("at most {CORPUS_INPUTS_MAX} inputs (CORPUS_INPUTS_MAX) are allowed"),
        );
    }
    let mut names = BTreeSet::new();
    let mut inputs = Vec::with_capacity(file.inputs.len());
    for input in &file.inputs {
        if let Some(input) =
            compile_input(source, input.get_ref(), &mut names, properties, problems)
        {
            inputs.push(input);
        }
    }
    inputs
}

/// One corpus input, checked: a unique valid name, expectations on
/// properties of the output schema, JSON parameters.
fn compile_input(
    source: &Source,
    input: &InputFile,
    names: &mut BTreeSet<String>,
    properties: Option<&BTreeSet<String>>,
    problems: &mut Problems,
) -> Option<CorpusInput> {
    let name = input.name.get_ref();
    if !name_ok(name) {
        problems.at(
            source,
            input.name.span(),
            format!("an input name must be 1 to {NAME_LEN_MAX} letters, digits, '-', '_' or '.'"),
        );
    }
    if !names.insert(name.clone()) {
        problems.at(
            source,
            input.name.span(),
            format!("input {name:?} is already defined"),
        );
    }
    let expect = compile_expect(source, input, properties, problems);
    match serde_json::to_value(input.params.get_ref()) {
        Ok(params) => Some(CorpusInput {
            name: name.clone(),
            params,
            expect,
        }),
        Err(e) => {
            problems.at(source, input.params.span(), format!("not JSON: {e}"));
            None
        }
    }
}

/// What the round trip must give for one input: at least one field, each
/// a property of the output schema, each value JSON.
fn compile_expect(
    source: &Source,
    input: &InputFile,
    properties: Option<&BTreeSet<String>>,
    problems: &mut Problems,
) -> BTreeMap<String, Value> {
    if input.expect.get_ref().is_empty() {
        problems.at(
            source,
            input.expect.span(),
            "`expect` must name at least one field the round trip must give",
        );
    }
    let mut expect = BTreeMap::new();
    for (field, value) in input.expect.get_ref() {
        if let Some(properties) = properties
            && !properties.contains(field)
        {
            problems.at(
                source,
                value.span(),
                format!("{field:?} is not a property of the output schema"),
            );
        }
        match serde_json::to_value(value.get_ref()) {
            Ok(v) => {
                expect.insert(field.clone(), v);
            }
            Err(e) => problems.at(source, value.span(), format!("not JSON: {e}")),
        }
    }
    expect
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sources(
        contract: &str,
        schema: &str,
        corpus: &str,
    ) -> (Source, impl Fn(&str) -> Result<Source, ContractError>) {
        let (schema, corpus) = (schema.to_owned(), corpus.to_owned());
        let read = move |name: &str| -> Result<Source, ContractError> {
            let text = match name {
                "schema.json" => schema.clone(),
                "corpus.toml" => corpus.clone(),
                _ => {
                    return Err(ContractError::Read {
                        path: name.to_owned(),
                        source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
                    });
                }
            };
            Ok(Source {
                path: name.to_owned(),
                text,
            })
        };
        (
            Source {
                path: "contract.toml".to_owned(),
                text: contract.to_owned(),
            },
            read,
        )
    }

    /// Compiles the shipped files with `edit` applied to one of them and
    /// returns the problems as `path:line:col: message` lines.
    fn check(file: &str, from: &str, to: &str) -> Vec<String> {
        let mut texts = [
            SHIPPED_CONTRACT.to_owned(),
            SHIPPED_SCHEMA.to_owned(),
            SHIPPED_CORPUS.to_owned(),
        ];
        let index = ["contract.toml", "schema.json", "corpus.toml"]
            .iter()
            .position(|f| *f == file)
            .expect("a file of the contract");
        assert!(texts[index].contains(from), "{file} has no {from:?}");
        texts[index] = texts[index].replacen(from, to, 1);
        let (main, read) = sources(&texts[0], &texts[1], &texts[2]);
        match Contract::compile(main, &read) {
            Ok(_) => Vec::new(),
            Err(Compile::Problems(problems)) => problems.iter().map(ToString::to_string).collect(),
            Err(Compile::Read(e)) => vec![e.to_string()],
        }
    }

    #[test]
    fn the_shipped_contract_compiles_and_renders_verbatim() {
        let contract = Contract::shipped();
        assert!(contract.inputs.len() >= CORPUS_INPUTS_MIN);
        assert!(contract.temperature <= TEMPERATURE_MAX);
        let markup = contract
            .inputs
            .iter()
            .find(|i| i.name == "html-pasted-from-email-client")
            .expect("the corpus has markup");
        let rendered = contract.render(&markup.params).expect("renders");
        assert_eq!(Some(rendered.user.as_str()), markup.params["text"].as_str());
        // Params without text are sent as their JSON.
        let other = contract
            .render(&serde_json::json!({"n": 5}))
            .expect("renders");
        assert_eq!(other.user, r#"{"n": 5}"#);
    }

    #[test]
    fn each_mistake_is_reported_where_it_is() {
        let cases: &[(&str, &str, &str, &str)] = &[
            (
                "contract.toml",
                "temperature = 0.0",
                "temperature = 0.7",
                "contract.toml:27:15: `temperature` must be between 0 and 0.2, got 0.7",
            ),
            (
                "contract.toml",
                "samples_per_input = 3",
                "samples_per_input = 0",
                "contract.toml:28:21: `samples_per_input` must be 1 to 16, got 0",
            ),
            (
                "contract.toml",
                "business_type = \"triage_v1\"",
                "business_type = \"invoice\"",
                "contract.toml:18:17: unknown business type \"invoice\"",
            ),
            (
                "contract.toml",
                "varying_fields = [\"summary\"]",
                "varying_fields = [\"summry\"]",
                "contract.toml:35:19: \"summry\" is not a property of the output schema",
            ),
            (
                "contract.toml",
                "name = \"triage\"",
                "name = \"triage\"\ncolour = \"blue\"",
                "contract.toml:13:1: unknown field `colour`",
            ),
            (
                "contract.toml",
                "{{ params.text if",
                "{{ params.text iff",
                "contract.toml:58:1: the user template",
            ),
            (
                "schema.json",
                "\"additionalProperties\": false,",
                "",
                "schema.json:1:1: the object schema at \"/\" must set `\"additionalProperties\": false`",
            ),
            (
                "schema.json",
                "\"required\": [\"orders\", \"language\", \"subject\", \"summary\"]",
                "\"required\": [\"orders\", \"language\", \"subject\"]",
                "schema.json:16:5: property \"summary\" must be listed in `required`",
            ),
            (
                "schema.json",
                "\"maxItems\": 32,",
                "\"maxItems\": 32,,",
                "schema.json:11:",
            ),
            (
                "corpus.toml",
                "expect = { orders = [\"ORD-10422\"], language = \"en\",",
                "expect = { orderz = [\"ORD-10422\"], language = \"en\",",
                "corpus.toml:16:21: \"orderz\" is not a property of the output schema",
            ),
            (
                "corpus.toml",
                "name = \"no-order-question\"",
                "name = \"short-where-is-my-order\"",
                "corpus.toml:26:8: input \"short-where-is-my-order\" is already defined",
            ),
        ];
        for (file, from, to, want) in cases {
            let got = check(file, from, to);
            assert!(
                got.iter().any(|line| line.starts_with(want)),
                "{file}: {from:?} -> {to:?}: want a line starting {want:?}, got {got:#?}"
            );
        }
    }

    #[test]
    fn a_corpus_below_the_minimum_is_refused() {
        let cut = SHIPPED_CORPUS
            .split("[[inputs]]")
            .take(6)
            .collect::<Vec<_>>()
            .join("[[inputs]]");
        let (main, read) = sources(SHIPPED_CONTRACT, SHIPPED_SCHEMA, &cut);
        let Err(Compile::Problems(problems)) = Contract::compile(main, &read) else {
            panic!("a 5-input corpus compiled");
        };
        assert!(
            problems[0]
                .message
                .contains("the corpus has 5 inputs; a certification needs at least 20"),
            "{problems:?}"
        );
    }
}
