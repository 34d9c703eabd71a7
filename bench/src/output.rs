//! Writing what a command produces (summaries, reports, corpus files,
//! traces) to files, with an error that names the path. An output that
//! cannot be written is the machine's trouble, not the user's input: the
//! command line gives it its own exit code (`crate::cli`).

use std::path::{Path, PathBuf};

/// What was being done to the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoAction {
    Write,
    Create,
    Read,
}

/// A file or directory that could not be written, created or read back.
#[derive(Debug, thiserror::Error)]
#[error("cannot {} {}: {source}", action.verb(), path.display())]
pub struct IoError {
    pub action: IoAction,
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

impl IoAction {
    fn verb(self) -> &'static str {
        match self {
            IoAction::Write => "write",
            IoAction::Create => "create",
            IoAction::Read => "read",
        }
    }

    /// A closure that turns an I/O error on `path` into an [`IoError`].
    pub fn on(self, path: &Path) -> impl FnOnce(std::io::Error) -> IoError + '_ {
        move |source| IoError {
            action: self,
            path: path.to_owned(),
            source,
        }
    }
}

/// Writes `contents` to `path`.
pub fn write(path: &Path, contents: impl AsRef<[u8]>) -> Result<(), IoError> {
    std::fs::write(path, contents).map_err(IoAction::Write.on(path))
}

/// Creates `path` and its parents.
pub fn create_dir(path: &Path) -> Result<(), IoError> {
    std::fs::create_dir_all(path).map_err(IoAction::Create.on(path))
}

/// Reads `path`, a file the command itself keeps (not one the user named
/// as an input: that is an input error).
pub fn read(path: &Path) -> Result<String, IoError> {
    std::fs::read_to_string(path).map_err(IoAction::Read.on(path))
}
