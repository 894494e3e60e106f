//! Command-line parsing and dispatch (to be written).

pub mod bench;
pub mod demo;

/// Runs the command and returns the exit status.
pub fn main() -> i32 {
    0
}
