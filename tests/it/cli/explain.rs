//! `explain`: one event delivered three times and run once, in a sentence
//! and as JSON (before its run too), an unknown key said so, and a pruned
//! one told from the ledger.

use serde_json::{json, Value};

use super::{init, json_of, ok, run_jobs};
use crate::both;

both! {
    /// Three deliveries, one run: the sentence and the JSON say so.
    fn explain_answers_one_event_delivered_three_times_run_once(q) {
        for _ in 0..3 {
            ok(q, &["enqueue", "k", "--key", "evt_42"], 0);
        }
        let text = ok(q, &["explain", "evt_42"], 0);
        assert!(text.starts_with("1 event, delivered 3 times, not run yet"), "{text}");
        run_jobs(q, "k");

        let text = ok(q, &["explain", "evt_42"], 0);
        let first = text.lines().next().unwrap();
        assert_eq!(first, "1 event, delivered 3 times, run once", "{text}");
        assert!(
            text.contains("succeeded") && text.contains("committed"),
            "{text}"
        );

        let v = json_of(q, &["explain", "evt_42"], 0);
        assert_eq!(v["summary"], "1 event, delivered 3 times, run once");
        assert_eq!(v["deliveries"], 3);
        assert_eq!(v["job"]["state"], "succeeded");
        assert_eq!(v["attempts"].as_array().unwrap().len(), 1);
        assert_eq!(v["attempts"][0]["outcome"], "succeeded");
        assert!(!v["attempts"][0]["worker"].as_str().unwrap().is_empty());
        assert_eq!(v["ledger"]["key"], "evt_42");
        assert_eq!(v["ledger"]["job_id"], 1);
        assert_eq!(v["outbox"], json!([]));
    }
}

both! {
    fn explain_an_unknown_key_says_so(q) {
        init(q);
        let text = ok(q, &["explain", "nobody"], 0);
        assert_eq!(text.lines().next(), Some("no job has this key"), "{text}");
        let v = json_of(q, &["explain", "nobody"], 0);
        assert_eq!(v["summary"], "no job has this key");
        assert_eq!(v["job"], Value::Null);
        assert_eq!(v["ledger"], Value::Null);
        assert_eq!(v["deliveries"], 0);
    }
}

both! {
    /// After a prune took the job row (and its delivery count), explain
    /// says what the ledger still knows instead of "deliveries 0".
    fn explain_after_a_prune_says_what_the_ledger_knows(q) {
        ok(q, &["enqueue", "k", "--key", "evt_pruned"], 0);
        ok(q, &["enqueue", "k", "--key", "evt_pruned"], 0);
        run_jobs(q, "k");
        let v = json_of(q, &["explain", "evt_pruned"], 0);
        assert_eq!((v["deliveries"].as_i64(), v["job_pruned"].as_bool()), (Some(2), Some(false)));
        ok(q, &["prune", "--older-than", "0s"], 0);

        let text = ok(q, &["explain", "evt_pruned"], 0);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains("its job row was pruned"), "{text}");
        assert!(!lines.iter().any(|l| l.starts_with("deliveries")), "{text}");
        let job = lines.iter().find(|l| l.starts_with("job ")).unwrap_or_else(|| panic!("{text}"));
        assert!(
            job.contains("pruned; its work committed at") && job.ends_with("by job 1 (ledger)"),
            "{text}"
        );
        let v = json_of(q, &["explain", "evt_pruned"], 0);
        assert_eq!(v["job"], Value::Null);
        assert_eq!(v["job_pruned"], true);
        assert_eq!(v["ledger"]["job_id"], 1);
        let v = json_of(q, &["explain", "never-seen"], 0);
        assert_eq!(v["job_pruned"], false);
    }
}
