//! `litejob demo`: the receipts scenario (to be written).

use std::path::Path;

/// Flags of `litejob demo`.
#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {}

/// Runs the demo on the file at `db`; returns the exit status.
pub fn run(_db: &Path, _args: &DemoArgs, _json: bool) -> Result<i32, litejob::Error> {
    Ok(0)
}
