//! Tells the unit tests whether a PostgreSQL server was named for them
//! (`LITEJOB_TEST_PG` set when they were built): the unit tests that need
//! one are reported ignored without it, never passed without running.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(litejob_test_pg)");
    println!("cargo::rerun-if-env-changed=LITEJOB_TEST_PG");
    println!("cargo::rerun-if-changed=build.rs");
    if std::env::var("LITEJOB_TEST_PG").is_ok_and(|v| !v.is_empty()) {
        println!("cargo::rustc-cfg=litejob_test_pg");
    }
}
