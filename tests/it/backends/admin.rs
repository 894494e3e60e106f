//! The operator's repairs and reports on both backends: retry dead jobs,
//! cancel a queued one, prune finished history (the ledger kept unless
//! asked), stats, one job's detail and one key's explanation.

use std::time::Duration;

use litejob::admin::PruneOptions;
use litejob::{JobFilter, JobState, NewJob};
use serde_json::json;

use crate::both;

both! {
    /// A dead job is requeued with a renewed budget; a queued one cancelled;
    /// the wrong state or a missing id is refused with nothing changed.
    fn retry_and_cancel_apply_only_to_the_right_state(q) {
        let queue = q.open();
        let a = queue.enqueue(NewJob::new("k", "a", &json!({}))).unwrap().id();
        let b = queue.enqueue(NewJob::new("k", "b", &json!({}))).unwrap().id();
        let c = queue.enqueue(NewJob::new("other", "c", &json!({}))).unwrap().id();
        q.exec(&format!(
            "UPDATE jobs SET state = 'dead', attempts = 2, finished_at = 1 WHERE id IN ({a}, {c})"
        ));
        assert!(queue.admin().retry_job(b).unwrap_err().is_invalid_input());
        assert!(queue.admin().retry_job(12345).unwrap_err().is_not_found());
        queue.admin().retry_job(a).unwrap();
        let j = queue.job(a).unwrap().unwrap();
        assert_eq!((j.state, j.attempts, j.finished_at), (JobState::Queued, 0, None));
        assert_eq!(queue.admin().retry_dead_jobs(Some("k")).unwrap(), 0);
        assert_eq!(queue.admin().retry_dead_jobs(None).unwrap(), 1);
        queue.admin().cancel_job(b).unwrap();
        assert_eq!(queue.job(b).unwrap().unwrap().state, JobState::Cancelled);
        assert!(queue.admin().cancel_job(b).unwrap_err().is_invalid_input());
        let listed = queue.jobs(&JobFilter::default().with_state(JobState::Queued)).unwrap();
        assert_eq!(listed.iter().map(|j| j.id).collect::<Vec<_>>(), [c, a], "newest first");
    }
}

both! {
    /// Prune deletes finished jobs and their attempts and sent outbox rows;
    /// the ledger stays, so the key is still a duplicate, unless asked.
    fn prune_keeps_the_ledger_unless_asked(q) {
        let queue = q.open();
        let id = queue.enqueue(NewJob::new("k", "old", &json!({}))).unwrap().id();
        queue.enqueue(NewJob::new("k", "fresh", &json!({}))).unwrap();
        q.exec(&format!(
            "UPDATE jobs SET state = 'succeeded', finished_at = 1 WHERE id = {id}; \
             INSERT INTO attempts (job_id, attempt, key, worker, started_at, finished_at, outcome) \
             VALUES ({id}, 1, 'old', 'w', 1, 1, 'succeeded'); \
             INSERT INTO processed_jobs (key, completed_at, job_id) VALUES ('old', 1, {id})"
        ));
        let r = queue.admin().prune(&PruneOptions::new(Duration::from_secs(60))).unwrap();
        assert_eq!((r.jobs, r.job_attempts, r.ledger), (1, 1, 0), "{r:?}");
        assert_eq!(q.count("SELECT count(*) FROM jobs"), 1, "the queued job stays");
        assert!(queue.enqueue(NewJob::new("k", "old", &json!({}))).unwrap().is_duplicate());
        let r = queue.admin().prune(&PruneOptions::new(Duration::from_secs(60)).with_ledger_older_than(Some(Duration::ZERO)))
            .unwrap();
        assert_eq!(r.ledger, 1, "{r:?}");
        assert!(!queue.enqueue(NewJob::new("k", "old", &json!({}))).unwrap().is_duplicate());
    }
}

both! {
    /// Stats, one job's detail and one key's explanation read what the
    /// tables hold.
    fn stats_detail_and_explain_agree_with_the_tables(q) {
        let queue = q.open();
        let id = queue.enqueue(NewJob::new("mail", "e1", &json!({})).with_queue("q1")).unwrap().id();
        queue.enqueue(NewJob::new("mail", "e1", &json!({}))).unwrap();
        queue.enqueue(NewJob::new("sms", "e2", &json!({}))).unwrap();
        let s = queue.admin().stats().unwrap();
        assert_eq!((s.jobs.total, s.jobs.queued), (2, 2));
        assert_eq!(s.by_kind["mail"].queued, 1);
        assert_eq!(s.by_queue["q1"].total, 1);
        assert_eq!(s.queued_due, 2);
        assert!(s.oldest_queued_age_ms.is_some());
        assert_eq!(s.schema_version, litejob::admin::SCHEMA_VERSION);
        let d = queue.admin().job_detail(id).unwrap().unwrap();
        assert_eq!((d.job.deliveries, d.attempts.len()), (2, 0));
        let e = queue.admin().explain("e1").unwrap();
        assert_eq!((e.deliveries, e.job.map(|j| j.id), e.ledger), (2, Some(id), None));
        assert!(queue.admin().explain("nope").unwrap().job.is_none());
        assert!(queue.admin().job_detail(999).unwrap().is_none());
    }
}
