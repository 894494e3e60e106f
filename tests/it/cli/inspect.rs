//! The reading commands: `jobs` with its filters and aligned columns, `show`
//! (a missing id exits 1; on a file, a missing file is not created) and
//! `stats`.

use litejob::NewJob;
use serde_json::{json, Value};

use super::{json_of, ok, run, stderr_of};
use crate::backends::Engine;
use crate::both;
use crate::support::{litejob, show};

both! {
    /// A full page says on stderr how many jobs the filters match and how
    /// to get the next page (stdout stays one JSON document); `--after`
    /// walks every job once, newest first; a list that was not cut says
    /// nothing.
    fn jobs_says_when_it_cut_the_list_and_after_pages_through_it(q) {
        let queue = q.open();
        let jobs: Vec<NewJob> = (0..1000).map(|i| NewJob::new("k", format!("p{i}"), &i)).collect();
        queue.enqueue_many(jobs).unwrap();
        queue.enqueue(NewJob::new("other", "o", &0).with_queue("mail")).unwrap();
        drop(queue);
        let page = |args: &[&str]| -> (Vec<i64>, String) {
            let mut all = args.to_vec();
            all.push("--json");
            let out = run(q, &all);
            assert_eq!(out.status.code(), Some(0), "{}", show(&all, &out));
            let v: Value = serde_json::from_slice(&out.stdout)
                .unwrap_or_else(|e| panic!("{}: {e}", show(&all, &out)));
            let ids = v["jobs"].as_array().unwrap().iter().map(|j| j["id"].as_i64().unwrap());
            (ids.collect(), String::from_utf8_lossy(&out.stderr).into_owned())
        };
        let (ids, err) = page(&["jobs", "--kind", "k"]);
        assert_eq!(ids.len(), 100);
        assert_eq!(
            err.trim(),
            format!(
                "100 of 1,000 jobs shown, 900 more after these (--limit N, or --after {} for \
                 the next page)",
                ids[99]
            )
        );
        let mut seen: Vec<i64> = Vec::new();
        let mut after: Option<i64> = None;
        loop {
            let cursor = after.map(|a| a.to_string());
            let mut args = vec!["jobs", "--limit", "300"];
            if let Some(c) = &cursor {
                args.extend(["--after", c.as_str()]);
            }
            let (ids, err) = page(&args);
            seen.extend(&ids);
            if err.is_empty() {
                break;
            }
            let more = 1001 - seen.len();
            let expected = format!(
                "300 of 1,001 jobs shown, {more} more after these (--limit N, or --after {} for the \
                 next page)",
                ids[299]
            );
            assert_eq!(err.trim(), expected);
            after = ids.last().copied();
        }
        assert_eq!(seen.len(), 1001);
        assert!(seen.windows(2).all(|w| w[0] > w[1]), "newest first, each once");
        let (ids, err) = page(&["jobs", "--queue", "mail", "--limit", "1"]);
        assert_eq!((ids.len(), err.as_str()), (1, ""));
        let text = run(q, &["jobs", "--state", "queued", "--kind", "k", "--limit", "999"]);
        assert!(
            String::from_utf8_lossy(&text.stderr).starts_with("999 of 1,000 jobs shown, 1 more"),
            "{}",
            show(&["jobs"], &text)
        );
    }
}

both! {
    fn jobs_lists_with_filters_and_json(q) {
        let queue = q.open();
        for i in 0..6 {
            let kind = if i % 2 == 0 { "even" } else { "odd" };
            let name = if i < 3 { "low" } else { "high" };
            queue
                .enqueue(NewJob::new(kind, format!("k{i}"), &i).with_queue(name))
                .unwrap();
        }
        q.exec("UPDATE jobs SET state = 'dead', finished_at = 1 WHERE idempotency_key = 'k0'");
        let ids = |v: &Value| -> Vec<i64> {
            v["jobs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|j| j["id"].as_i64().unwrap())
                .collect()
        };
        assert_eq!(ids(&json_of(q, &["jobs"], 0)), vec![6, 5, 4, 3, 2, 1]);
        assert_eq!(ids(&json_of(q, &["jobs", "--kind", "even"], 0)), vec![5, 3, 1]);
        assert_eq!(ids(&json_of(q, &["jobs", "--queue", "high"], 0)), vec![6, 5, 4]);
        assert_eq!(ids(&json_of(q, &["jobs", "--state", "dead"], 0)), vec![1]);
        assert_eq!(
            ids(&json_of(q, &["jobs", "--kind", "even", "--queue", "low"], 0)),
            vec![3, 1]
        );
        assert_eq!(ids(&json_of(q, &["jobs", "--limit", "2"], 0)), vec![6, 5]);
        let v = json_of(q, &["jobs", "--limit", "1"], 0);
        let j = &v["jobs"][0];
        assert_eq!(j["idempotency_key"], "k5");
        assert_eq!(j["state"], "queued");
        assert_eq!(j["kind"], "odd");

        let text = ok(q, &["jobs"], 0);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 7, "{text}");
        assert!(
            lines[0].starts_with("ID") && lines[0].contains("KEY"),
            "{text}"
        );
        // Columns are aligned: every row's STATE starts where the header's does.
        let col = lines[0].find("STATE").unwrap();
        for l in &lines[1..] {
            assert!(
                l[col..].starts_with("queued") || l[col..].starts_with("dead"),
                "{text}"
            );
        }
        assert_eq!(ok(q, &["jobs", "--kind", "none"], 0).trim(), "no jobs");
    }
}

both! {
    /// A job with its payload as given, its deliveries, no attempts and no
    /// outbox rows yet; a missing id exits 1 with nothing on stdout.
    fn show_prints_a_job_and_a_missing_id_exits_1(q) {
        ok(q, &["enqueue", "k", "--key", "s1", "--payload", "[1,2]"], 0);
        ok(q, &["enqueue", "k", "--key", "s1"], 0);
        let v = json_of(q, &["show", "1"], 0);
        assert_eq!(v["job"]["idempotency_key"], "s1");
        assert_eq!(v["job"]["payload"], "[1,2]");
        assert_eq!(v["job"]["deliveries"], 2);
        assert_eq!(v["attempts"], json!([]));
        assert_eq!(v["outbox"], json!([]));
        let text = ok(q, &["show", "1"], 0);
        assert!(text.contains("s1") && text.contains("queued"), "{text}");

        let e = stderr_of(q, &["show", "99"], 1);
        assert!(e.contains("litejob: error:") && e.contains("99"), "{e}");
        assert!(run(q, &["show", "99"]).stdout.is_empty());
        if q.engine == Engine::Sqlite {
            // Read commands refuse a missing file instead of creating one.
            let dir = tempfile::tempdir().unwrap();
            let missing = dir.path().join("typo.db");
            let out = litejob(&missing, &["jobs"]);
            assert_eq!(out.status.code(), Some(1), "{}", show(&["jobs"], &out));
            assert!(!missing.exists());
        }
    }
}

both! {
    /// Counts per state, kind and queue, the due backlog, the ledger, and
    /// the sizes (on PostgreSQL the tables' size stands for the file's).
    fn stats_counts_states_kinds_queues_and_sizes(q) {
        let queue = q.open();
        for i in 0..5 {
            let kind = if i < 3 { "a" } else { "b" };
            queue
                .enqueue(
                    NewJob::new(kind, format!("s{i}"), &i)
                        .with_queue(if i == 0 { "x" } else { "default" }),
                )
                .unwrap();
        }
        drop(queue);
        q.exec("UPDATE jobs SET state = 'dead', finished_at = 1 WHERE id = 5");
        let v = json_of(q, &["stats"], 0);
        assert_eq!(v["jobs"]["total"], 5);
        assert_eq!(v["jobs"]["queued"], 4);
        assert_eq!(v["jobs"]["dead"], 1);
        assert_eq!(v["by_kind"]["a"]["queued"], 3);
        assert_eq!(v["by_kind"]["b"]["dead"], 1);
        assert_eq!(v["by_queue"]["x"]["total"], 1);
        assert_eq!(v["by_queue"]["default"]["total"], 4);
        assert_eq!(v["outbox"]["total"], 0);
        assert_eq!(v["queued_due"], 4);
        assert!(v["oldest_queued_age_ms"].as_i64().unwrap() >= 0);
        assert!(v["file_bytes"].as_u64().unwrap() > 0);
        assert!(v["wal_bytes"].is_u64());
        assert_eq!(v["schema_version"], litejob::admin::SCHEMA_VERSION);
        assert_eq!(v["ledger_rows"], 0);
        let text = ok(q, &["stats"], 0);
        assert!(
            text.contains("4 queued") && text.contains("1 dead"),
            "{text}"
        );
    }
}
