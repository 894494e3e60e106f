//! `queue pause|resume|set` name an existing queue: a typo is refused with
//! the queues that exist, and `--create` sets controls before a queue's
//! first job.

use litejob::{CatchUp, Outcome, Schedule};
use serde_json::Value;

use super::{init, json_of, ok, stderr_of};
use crate::backends::{handler, Runtimes};
use crate::both;

both! {
    /// A queue no job, control or schedule names is refused (exit 2,
    /// nothing written, the known queues listed); one a schedule alone
    /// names is known; `--create` takes a new one, which is known from
    /// then on.
    fn a_queue_nobody_names_is_refused_unless_created(q) {
        init(q);
        ok(q, &["enqueue", "k", "--key", "a"], 0);
        ok(q, &["enqueue", "k", "--key", "b", "--queue", "mail"], 0);
        // A schedule whose queue has no job yet (no catch-up: it fires
        // nothing at its declaration).
        let queue = q.open();
        let mut rt = handler(queue.runtime(), "tick", |_, _: Value| Ok(Outcome::Done))
            .schedule_with(
                Schedule::new("yearly", "@yearly", "tick", &())
                    .with_queue("reports")
                    .with_catch_up(CatchUp::None),
            )
            .start()
            .unwrap();
        rt.stop();
        assert_eq!(q.count("SELECT count(*) FROM jobs WHERE queue = 'reports'"), 0);

        for args in [
            vec!["queue", "pause", "defualt"],
            vec!["queue", "resume", "defualt"],
            vec!["queue", "set", "defualt", "--concurrency", "2"],
            vec!["queue", "pause", "defualt", "--json"],
        ] {
            let e = stderr_of(q, &args, 2);
            assert!(e.contains("no queue \"defualt\""), "{args:?}: {e}");
            assert!(
                e.contains("known queues: default, mail, reports"),
                "{args:?}: {e}"
            );
        }
        let e = stderr_of(q, &["queue", "pause", "defualt"], 2);
        assert!(e.contains("--create"), "{e}");
        assert_eq!(q.count("SELECT count(*) FROM queues"), 0, "a refusal wrote a control");

        let out = ok(q, &["queue", "pause", "reports"], 0);
        assert!(out.contains("queue reports: paused"), "{out}");
        let v = json_of(q, &["queue", "set", "newsletters", "--create", "--concurrency", "1"], 0);
        assert_eq!((v["name"].as_str(), v["concurrency"].as_i64()), (Some("newsletters"), Some(1)));
        // Its control makes it known.
        ok(q, &["queue", "pause", "newsletters"], 0);
        assert_eq!(q.count("SELECT count(*) FROM queues WHERE paused"), 2);
    }
}
