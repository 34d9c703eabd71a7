//! Test support shared by the workspace's tests: a throwaway PostgreSQL
//! cluster. Enabled by the `test-support` feature; never part of a release.

pub mod pg;
