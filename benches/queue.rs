//! Criterion benches (to come).
fn main() {}
