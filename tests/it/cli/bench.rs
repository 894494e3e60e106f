//! `bench`: its figures, the file it keeps with every job gone the full path
//! (ledger row and succeeded attempt), and bad settings refused with status
//! 2 before the file is created.

use serde_json::json;

use super::{json_of, stderr_of};
use crate::support::TestDb;

it! {
    fn bench_with_a_db_keeps_the_file_and_every_job_went_the_full_path() {
        let db = TestDb::new();
        let v = json_of(
            &db,
            &[
                "bench",
                "--jobs",
                "300",
                "--workers",
                "2",
                "--schedule",
                "* * * * * *",
            ],
            0,
        );
        for rate in [
            "enqueue_per_sec",
            "enqueue_concurrent_per_sec",
            "enqueue_async_per_sec",
            "enqueue_batch_per_sec",
            "process_per_sec",
            "machine_fsync_us",
            "machine_wake_round_trip_us",
        ] {
            assert!(v[rate].as_f64().is_some_and(|x| x > 0.0), "{rate}: {v}");
        }
        let (p50, p99) = (
            v["latency_p50_us"].as_u64().unwrap(),
            v["latency_p99_us"].as_u64().unwrap(),
        );
        assert!(p50 <= p99, "{v}");
        // How many of the 30 probes (a tenth of the jobs) ran under load.
        assert!(
            v["latency_samples"].as_u64().is_some_and(|n| n <= 30),
            "{v}"
        );
        assert_eq!(
            (&v["jobs"], &v["sync"], &v["async_tasks"], &v["kept"]),
            (&json!(300), &json!("full"), &json!(256), &json!(true)),
            "{v}"
        );
        // The schedule was declared on the measuring runtime.
        assert_eq!(v["schedule"], "* * * * * *", "{v}");
        assert_eq!(
            db.count(
                "SELECT count(*) FROM schedules WHERE name = 'bench.tick' AND kind = 'bench.tick'"
            ),
            1
        );
        // Every benchmarked job succeeded, and the full path left its trace per
        // job: its key in the ledger and a succeeded attempt row.
        assert_eq!(
            db.count("SELECT count(*) FROM jobs WHERE state='succeeded' AND kind = 'bench.noop'"),
            300
        );
        assert_eq!(
            db.count(
                "SELECT count(*) FROM jobs j JOIN processed_jobs p ON p.key = j.idempotency_key \
             JOIN attempts a ON a.job_id = j.id AND a.outcome = 'succeeded' \
             WHERE j.kind = 'bench.noop'"
            ),
            300
        );
        let probe = format!("{}-fsync-probe", db.path.display());
        assert!(
            !std::path::Path::new(&probe).exists(),
            "{probe} left behind"
        );
    }
}

it! {
    fn bench_refuses_bad_settings_with_status_2_before_creating_the_file() {
        let db = TestDb::new();
        for (args, says) in [
            (&["bench", "--jobs", "10"][..], "--jobs"),
            (&["bench", "--sync", "sometimes"][..], "synchronous"),
            (&["bench", "--workers", "0"][..], "--workers"),
            (&["bench", "--async-tasks", "0"][..], "--async-tasks"),
            (
                &["bench", "--schedule", "61 * * * *"][..],
                "cron expression",
            ),
        ] {
            let err = stderr_of(&db, args, 2);
            assert!(err.contains(says), "{args:?}: {err}");
            assert!(!db.path.exists(), "{args:?} created the file");
        }
    }
}
