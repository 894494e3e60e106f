//! Help: every command has `--help` with an example, and asking for help
//! creates no file.

use crate::support::{litejob_ok, TestDb};

#[test]
fn every_command_has_help_with_an_example() {
    let db = TestDb::new();
    for cmd in [
        "init",
        "enqueue",
        "jobs",
        "show",
        "explain",
        "retry",
        "cancel",
        "outbox",
        "stats",
        "prune",
        "demo",
        "bench",
        "schedules",
    ] {
        let out = litejob_ok(&db.path, &[cmd, "--help"], 0);
        assert!(out.contains("Example"), "litejob {cmd} --help:\n{out}");
    }
    let out = litejob_ok(&db.path, &["outbox", "retry", "--help"], 0);
    assert!(out.contains("Example"), "{out}");
    let out = litejob_ok(&db.path, &["--help"], 0);
    assert!(out.contains("explain"), "{out}");
    assert!(!db.path.exists(), "--help created the file");
}
