//! Help: every command has `--help` with an example, and asking for help
//! creates nothing (no file, no tables).

use super::ok;
use crate::both;

both! {
    fn every_command_has_help_with_an_example(q) {
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
            "copy",
            "backup",
            "verify",
        ] {
            let out = ok(q, &[cmd, "--help"], 0);
            assert!(out.contains("Example"), "litejob {cmd} --help:\n{out}");
        }
        // Where bench writes, since it writes somewhere without --db.
        let out = ok(q, &["bench", "--help"], 0);
        assert!(
            out.contains("temporary directory") && out.contains("removed when it ends")
                && out.contains("With --db it writes that file"),
            "{out}"
        );
        let out = ok(q, &["outbox", "retry", "--help"], 0);
        assert!(out.contains("Example"), "{out}");
        let out = ok(q, &["--help"], 0);
        assert!(out.contains("explain"), "{out}");
        assert!(!q.created(), "--help created the queue");
    }
}
