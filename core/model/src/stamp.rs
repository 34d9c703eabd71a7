//! The build stamp: which code a binary was built from.
//!
//! A seed reproduces a run only on the same code, so every output that
//! names a seed (text, JSON, JUnit, reports) names the build too; and an
//! operator asks a running server which code it is. The commit comes from
//! the calling crate's build script (vergen-gitcl); a build from a tarball
//! without git says so instead of failing.

use std::fmt;

use serde::{Deserialize, Serialize};

/// What vergen writes when it could not ask git.
const VERGEN_DEFAULT: &str = "VERGEN_IDEMPOTENT_OUTPUT";

/// The version, the git commit and whether the tree was dirty.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildStamp {
    pub version: String,
    /// The full commit hash; `None` for a build outside a git checkout.
    pub commit: Option<String>,
    /// Whether tracked files differed from the commit when it was built;
    /// `None` when that is unknown.
    pub dirty: Option<bool>,
}

impl BuildStamp {
    /// From what a build script left in the calling crate's environment;
    /// use [`build_stamp!`](crate::build_stamp), which reads it there.
    pub fn from_build(version: &str, sha: Option<&str>, dirty: Option<&str>) -> Self {
        fn known(value: Option<&str>) -> Option<&str> {
            value.filter(|v| !v.is_empty() && *v != VERGEN_DEFAULT)
        }
        Self {
            version: version.to_owned(),
            commit: known(sha).map(str::to_owned),
            dirty: known(dirty).and_then(|d| d.parse().ok()),
        }
    }

    /// The commit, shortened to 12 hex digits, with `-dirty` when the tree
    /// was dirty; or `unknown`.
    pub fn short_commit(&self) -> String {
        match &self.commit {
            Some(commit) => {
                let short = commit.get(..12).unwrap_or(commit);
                if self.dirty == Some(true) {
                    format!("{short}-dirty")
                } else {
                    short.to_owned()
                }
            }
            None => "unknown".to_owned(),
        }
    }
}

/// `0.1.0 (commit 0123456789ab)`, `0.1.0 (commit 0123456789ab-dirty)`, or
/// `0.1.0 (commit unknown: built outside a git checkout)`.
impl fmt::Display for BuildStamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.commit {
            Some(_) => write!(f, "{} (commit {})", self.version, self.short_commit()),
            None => write!(
                f,
                "{} (commit unknown: built outside a git checkout)",
                self.version
            ),
        }
    }
}

/// The stamp of the crate this is expanded in (its version, and the commit
/// its build script recorded).
#[macro_export]
macro_rules! build_stamp {
    () => {
        $crate::stamp::BuildStamp::from_build(
            env!("CARGO_PKG_VERSION"),
            option_env!("VERGEN_GIT_SHA"),
            option_env!("VERGEN_GIT_DIRTY"),
        )
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_git_build_names_its_commit_and_whether_it_was_dirty() {
        let sha = "0123456789abcdef0123456789abcdef01234567";
        let clean = BuildStamp::from_build("0.1.0", Some(sha), Some("false"));
        assert_eq!(clean.to_string(), "0.1.0 (commit 0123456789ab)");
        assert_eq!(clean.commit.as_deref(), Some(sha));
        let dirty = BuildStamp::from_build("0.1.0", Some(sha), Some("true"));
        assert_eq!(dirty.to_string(), "0.1.0 (commit 0123456789ab-dirty)");
    }

    #[test]
    fn a_build_without_git_says_so() {
        for (sha, dirty) in [
            (None, None),
            (Some(VERGEN_DEFAULT), Some(VERGEN_DEFAULT)),
            (Some(""), Some("")),
        ] {
            let stamp = BuildStamp::from_build("0.1.0", sha, dirty);
            assert_eq!(stamp.commit, None);
            assert_eq!(stamp.dirty, None);
            assert_eq!(
                stamp.to_string(),
                "0.1.0 (commit unknown: built outside a git checkout)"
            );
        }
    }
}
