//! `litejob bench`: measures this machine (to be written).

use std::path::Path;

/// Flags of `litejob bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {}

/// Runs the benchmark; `db` is `--db` if given. Returns the exit status.
pub fn run(_db: Option<&Path>, _args: &BenchArgs, _json: bool) -> Result<i32, litejob::Error> {
    Ok(0)
}
