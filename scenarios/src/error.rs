//! Errors of loading a scenario, each naming `path:line:col`.

use std::fmt;
use std::ops::Range;

/// One thing wrong with a scenario file.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("{path}: cannot read: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// TOML syntax, unknown fields and wrong types, as the parser found them.
    #[error("{path}:{line}:{col}: {message}")]
    Syntax {
        path: String,
        line: usize,
        col: usize,
        message: String,
    },
    /// Well-formed TOML that does not describe a valid scenario.
    #[error("{path}:{line}:{col}: {message}")]
    Invalid {
        path: String,
        line: usize,
        col: usize,
        message: String,
    },
}

impl ScenarioError {
    /// `(line, col)`, both from 1, when the error has a position.
    pub fn position(&self) -> Option<(usize, usize)> {
        match self {
            ScenarioError::Read { .. } => None,
            ScenarioError::Syntax { line, col, .. } | ScenarioError::Invalid { line, col, .. } => {
                Some((*line, *col))
            }
        }
    }

    /// The message without the position.
    pub fn message(&self) -> String {
        match self {
            ScenarioError::Read { source, .. } => format!("cannot read: {source}"),
            ScenarioError::Syntax { message, .. } | ScenarioError::Invalid { message, .. } => {
                message.clone()
            }
        }
    }

    pub(crate) fn syntax(path: &str, text: &str, error: &toml::de::Error) -> Self {
        let (line, col) = line_col(text, error.span().map_or(0, |s| s.start));
        ScenarioError::Syntax {
            path: path.to_owned(),
            line,
            col,
            message: error.message().trim_end().to_owned(),
        }
    }

    pub(crate) fn invalid(path: &str, text: &str, span: &Range<usize>, message: String) -> Self {
        let (line, col) = line_col(text, span.start);
        ScenarioError::Invalid {
            path: path.to_owned(),
            line,
            col,
            message,
        }
    }
}

/// Everything wrong with one file, in the order it appears in the file.
/// Never empty.
#[derive(Debug)]
pub struct ScenarioErrors(Vec<ScenarioError>);

impl ScenarioErrors {
    /// # Panics
    /// If `errors` is empty: a rejection always has a reason.
    pub fn new(errors: Vec<ScenarioError>) -> Self {
        assert!(
            !errors.is_empty(),
            "a rejected scenario has at least one error"
        );
        Self(errors)
    }

    pub fn first(&self) -> &ScenarioError {
        &self.0[0]
    }

    pub fn all(&self) -> &[ScenarioError] {
        &self.0
    }
}

impl From<ScenarioError> for ScenarioErrors {
    fn from(error: ScenarioError) -> Self {
        Self(vec![error])
    }
}

impl fmt::Display for ScenarioErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, error) in self.0.iter().enumerate() {
            if index > 0 {
                writeln!(f)?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ScenarioErrors {}

/// The 1-based line and column of byte `offset` in `text`. Columns count
/// characters, not bytes, so that an editor's column matches.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let col = before[line_start..].chars().count() + 1;
    (line, col)
}

#[cfg(test)]
mod tests {
    use super::line_col;

    #[test]
    fn positions_count_lines_and_characters() {
        let text = "a = 1\nbé = 2\n";
        assert_eq!(line_col(text, 0), (1, 1));
        assert_eq!(line_col(text, 4), (1, 5));
        assert_eq!(line_col(text, 6), (2, 1));
        // 'é' is two bytes: the '=' after it is the fourth character.
        assert_eq!(line_col(text, 10), (2, 4));
        assert_eq!(line_col(text, 1_000), (3, 1));
    }
}
