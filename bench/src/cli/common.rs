//! What the command files share: printing, and timing for the person
//! watching.

use std::path::Path;
use std::time::{Duration, Instant};

use super::CliError;
use crate::output;

/// Writes to stdout. A closed pipe (`idem list | head`) or a full disk
/// ends the output quietly: there is nobody left to tell, and the exit code
/// still says how the command went.
pub fn emit(text: &str) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

/// Runs `work` and measures its wall time, for the line on stderr; it
/// never enters an output.
#[allow(clippy::disallowed_methods)]
pub fn timed<T>(work: impl FnOnce() -> T) -> (T, Duration) {
    let start = Instant::now();
    let value = work();
    (value, start.elapsed())
}

/// Writes a JUnit rendering to `path`.
pub fn write_junit(
    path: &Path,
    rendered: Result<String, idem_reports::junit::JunitError>,
) -> Result<(), CliError> {
    let xml = rendered.map_err(|e| CliError::Render(e.to_string()))?;
    output::write(path, xml)?;
    Ok(())
}
