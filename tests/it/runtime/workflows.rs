//! Results and workflows: a job's output commits with it; a dependent
//! waits until its dependencies succeeded and becomes queued in the commit
//! of the last; a dependency that ends dead or cancelled cancels its
//! dependents, transitively, with the reason; a missing key or a cycle is
//! refused with nothing written; pruning keeps what a waiting job needs;
//! `wait` answers at the end.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use litejob::admin::{AnyQueue, PruneOptions};
use litejob::testing::ManualClock;
use litejob::{JobState, NewJob, Outcome, QueueOptions};
use serde_json::{json, Value};

use crate::backends::{Runtimes, TestQueue};
use crate::both;

fn open(q: &TestQueue, clock: &ManualClock) -> AnyQueue {
    q.open_with(QueueOptions::default().with_clock(clock.clone()))
}

fn state(queue: &AnyQueue, key: &str) -> JobState {
    queue.job_by_key(key).unwrap().unwrap().state
}

/// `a` and `b` fan in to `c`.
fn fan_in() -> Vec<NewJob> {
    vec![
        NewJob::new("part", "a", &2),
        NewJob::new("part", "b", &3),
        NewJob::new("merge", "c", &json!({})).with_depends_on(["a", "b"]),
    ]
}

both! {
    /// `c` waits for `a` and `b`, is queued in the commit that finishes the
    /// last of them, reads both results in its transaction, and its own
    /// result is what `wait` returns.
    fn a_fan_in_runs_after_both_parts_and_reads_their_results(q) {
        let c = ManualClock::default();
        let queue = open(q, &c);
        let got = queue.enqueue_many(fan_in()).unwrap();
        assert!(got.iter().all(|e| !e.is_duplicate()));
        assert_eq!(state(&queue, "c"), JobState::Waiting);
        let drained = queue
            .runtime()
            .handler("part", |_, n: i64| Outcome::done_with(&(n * 10)))
            .drain()
            .unwrap();
        assert_eq!(drained.succeeded, 2, "a and b");
        assert_eq!(state(&queue, "c"), JobState::Queued, "both parts succeeded");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let drained = queue
            .runtime()
            .handler("merge", move |tx, _: Value| {
                let a: Option<i64> = tx.dependency_output("a")?;
                let b: Option<i64> = tx.dependency_output("b")?;
                s.lock().unwrap().push((a, b));
                Outcome::done_with(&json!({ "sum": a.unwrap_or(0) + b.unwrap_or(0) }))
            })
            .drain()
            .unwrap();
        assert_eq!(drained.succeeded, 1);
        assert_eq!(*seen.lock().unwrap(), vec![(Some(20), Some(30))]);
        let job = queue.wait("c", Duration::from_secs(5)).unwrap().unwrap();
        assert_eq!(job.state, JobState::Succeeded);
        let out: Value = serde_json::from_str(job.output.as_deref().unwrap()).unwrap();
        assert_eq!(out, json!({"sum": 50}));
        assert_eq!(
            q.count("SELECT count(*) FROM job_dependencies"),
            2,
            "the edges stay for the graph"
        );
    }
}

both! {
    /// The dependent waits while one dependency is unfinished, whatever the
    /// order the parts end in.
    fn a_dependent_waits_until_its_last_dependency_succeeded(q) {
        let c = ManualClock::default();
        let queue = open(q, &c);
        queue
            .enqueue_many(vec![
                NewJob::new("first", "a", &1),
                NewJob::new("second", "b", &1),
                NewJob::new("merge", "c", &1).with_depends_on(["a", "b"]),
            ])
            .unwrap();
        let done = |b: crate::backends::TestBuilder, kind: &str| {
            b.handler(kind, |_, _: Value| Ok(Outcome::Done))
        };
        done(queue.runtime(), "second").drain().unwrap();
        assert_eq!(state(&queue, "b"), JobState::Succeeded);
        assert_eq!(state(&queue, "c"), JobState::Waiting);
        let d = done(queue.runtime(), "merge").drain().unwrap();
        assert_eq!(d.total(), 0, "a waiting job is never claimed");
        done(queue.runtime(), "first").drain().unwrap();
        assert_eq!(state(&queue, "c"), JobState::Queued);
    }
}

both! {
    /// A discarded dependency cancels its dependents and theirs, each
    /// naming the key and state that cancelled it; nothing of them runs.
    fn a_dead_dependency_cancels_its_dependents_transitively_with_the_reason(q) {
        let c = ManualClock::default();
        let queue = open(q, &c);
        queue
            .enqueue_many(vec![
                NewJob::new("fragile", "e", &1),
                NewJob::new("after", "f", &1).with_depends_on(["e"]),
                NewJob::new("after", "g", &1).with_depends_on(["f"]),
                NewJob::new("other", "h", &1),
            ])
            .unwrap();
        let d = queue
            .runtime()
            .handler("fragile", |_, _: Value| Ok(Outcome::Discard("bad input".into())))
            .handler("after", |_, _: Value| Ok(Outcome::Done))
            .handler("other", |_, _: Value| Ok(Outcome::Done))
            .drain()
            .unwrap();
        assert_eq!((d.discarded, d.succeeded), (1, 1), "{d:?}");
        for key in ["f", "g"] {
            let job = queue.job_by_key(key).unwrap().unwrap();
            assert_eq!(job.state, JobState::Cancelled, "{key}");
            let why = job.last_error.unwrap_or_default();
            assert!(why.contains("\"e\"") && why.contains("dead"), "{key}: {why}");
            assert!(job.finished_at.is_some());
        }
        assert_eq!(q.count("SELECT count(*) FROM attempts WHERE key IN ('f', 'g')"), 0);
        // A dependent enqueued later on a dead job starts cancelled.
        let late = queue
            .enqueue(NewJob::new("after", "late", &1).with_depends_on(["e"]))
            .unwrap();
        assert!(!late.is_duplicate());
        assert_eq!(state(&queue, "late"), JobState::Cancelled);
    }
}

both! {
    /// A key no job has, or a cycle in a batch, is refused and nothing of
    /// the batch is written.
    fn a_missing_dependency_or_a_cycle_is_refused_with_nothing_written(q) {
        let c = ManualClock::default();
        let queue = open(q, &c);
        queue.enqueue(NewJob::new("k", "there", &1)).unwrap();
        let before = q.count("SELECT count(*) FROM jobs");
        let e = queue
            .enqueue(NewJob::new("k", "orphan", &1).with_depends_on(["nowhere"]))
            .unwrap_err();
        assert!(matches!(e, litejob::Error::InvalidInput(_)), "{e}");
        assert!(e.to_string().contains("\"nowhere\""), "{e}");
        let e = queue
            .enqueue_many(vec![
                NewJob::new("k", "x", &1).with_depends_on(["there"]),
                NewJob::new("k", "y", &1).with_depends_on(["nowhere"]),
            ])
            .unwrap_err();
        assert!(e.to_string().contains("\"nowhere\""), "{e}");
        let e = queue
            .enqueue_many(vec![
                NewJob::new("k", "p", &1).with_depends_on(["r"]),
                NewJob::new("k", "q", &1).with_depends_on(["p"]),
                NewJob::new("k", "r", &1).with_depends_on(["q"]),
            ])
            .unwrap_err();
        assert!(e.to_string().contains("cycle"), "{e}");
        let e = queue
            .enqueue(NewJob::new("k", "self", &1).with_depends_on(["self"]))
            .unwrap_err();
        assert!(e.to_string().contains("itself"), "{e}");
        assert_eq!(q.count("SELECT count(*) FROM jobs"), before);
        assert_eq!(q.count("SELECT count(*) FROM job_dependencies"), 0);
    }
}

both! {
    /// The same workflow enqueued twice is a duplicate of each job, with no
    /// second edge.
    fn a_workflow_enqueued_twice_is_a_duplicate_of_itself(q) {
        let c = ManualClock::default();
        let queue = open(q, &c);
        let first = queue.enqueue_many(fan_in()).unwrap();
        let again = queue.enqueue_many(fan_in()).unwrap();
        assert!(again.iter().all(|e| e.is_duplicate()));
        let ids = |v: &[litejob::Enqueued]| v.iter().map(|e| e.id()).collect::<Vec<_>>();
        assert_eq!(ids(&first), ids(&again));
        assert_eq!(q.count("SELECT count(*) FROM job_dependencies"), 2);
    }
}

both! {
    /// Cancelling a job of a workflow cancels what depends on it, and
    /// `wait` on a cancelled dependent answers with it.
    fn cancelling_a_job_cancels_its_dependents(q) {
        let c = ManualClock::default();
        let queue = open(q, &c);
        queue.enqueue_many(fan_in()).unwrap();
        let a = queue.job_by_key("a").unwrap().unwrap();
        queue.admin().cancel_job(a.id).unwrap();
        assert_eq!(state(&queue, "c"), JobState::Cancelled);
        let c_job = queue.wait("c", Duration::from_secs(1)).unwrap().unwrap();
        assert!(c_job.last_error.unwrap().contains("\"a\""));
        // A waiting job can be cancelled too.
        queue
            .enqueue_many(vec![
                NewJob::new("part", "a2", &1),
                NewJob::new("merge", "c2", &1).with_depends_on(["a2"]),
            ])
            .unwrap();
        let c2 = queue.job_by_key("c2").unwrap().unwrap();
        queue.admin().cancel_job(c2.id).unwrap();
        assert_eq!(state(&queue, "c2"), JobState::Cancelled);
        assert_eq!(state(&queue, "a2"), JobState::Queued, "a dependency is not touched");
    }
}

both! {
    /// Pruning keeps a finished dependency while a job that depends on it
    /// has not finished, and prunes it once that one has.
    fn prune_keeps_a_dependency_while_its_dependent_waits(q) {
        let c = ManualClock::default();
        let queue = open(q, &c);
        queue.enqueue_many(fan_in()).unwrap();
        queue
            .runtime()
            .handler("part", |_, _: Value| Ok(Outcome::Done))
            .drain()
            .unwrap();
        c.advance(Duration::from_secs(3600));
        let opts = PruneOptions::new(Duration::from_secs(60));
        let r = queue.admin().prune(&opts).unwrap();
        assert_eq!(r.jobs, 0, "c still needs a and b");
        assert!(queue.job_by_key("a").unwrap().is_some());
        queue
            .runtime()
            .handler("merge", |_, _: Value| Ok(Outcome::Done))
            .drain()
            .unwrap();
        c.advance(Duration::from_secs(3600));
        let r = queue.admin().prune(&opts).unwrap();
        assert_eq!(r.jobs, 3);
        assert_eq!(q.count("SELECT count(*) FROM job_dependencies"), 0);
    }
}

both! {
    /// An output over the queue's payload limit fails the run for good,
    /// with the reason; a smaller one commits.
    fn an_output_over_the_limit_kills_the_run_with_the_reason(q) {
        let c = ManualClock::default();
        let queue = q.open_with(
            QueueOptions::default()
                .with_clock(c.clone())
                .with_max_payload_bytes(1024),
        );
        queue.enqueue(NewJob::new("big", "big-1", &2000)).unwrap();
        queue.enqueue(NewJob::new("big", "small-1", &10)).unwrap();
        let d = queue
            .runtime()
            .handler("big", |_, n: usize| Outcome::done_with(&"x".repeat(n)))
            .drain()
            .unwrap();
        assert_eq!((d.succeeded, d.discarded), (1, 1), "{d:?}");
        let big = queue.job_by_key("big-1").unwrap().unwrap();
        assert_eq!(big.state, JobState::Dead);
        assert!(big.last_error.unwrap().contains("over the limit of 1024"));
        assert_eq!(big.output, None);
        let small = queue.job_by_key("small-1").unwrap().unwrap();
        assert_eq!(small.output.as_deref(), Some(format!("\"{}\"", "x".repeat(10)).as_str()));
    }
}

both! {
    /// `wait` returns `None` at the timeout, and answers a job finished by a
    /// runtime of this process at its commit, well before its poll.
    fn wait_answers_at_the_end_or_none_at_the_timeout(q) {
        let queue = q.open();
        queue.enqueue(NewJob::new("slow", "w-1", &1)).unwrap();
        let t0 = Instant::now();
        assert!(queue.wait("w-1", Duration::from_millis(100)).unwrap().is_none());
        assert!(t0.elapsed() >= Duration::from_millis(100));
        assert!(queue.wait("nobody", Duration::from_millis(10)).unwrap().is_none());
        let mut rt = queue
            .runtime()
            .poll_interval(Duration::from_secs(30))
            .handler("slow", |_, _: Value| Outcome::done_with(&"ok"))
            .start()
            .unwrap();
        let job = queue.wait("w-1", Duration::from_secs(20)).unwrap().unwrap();
        rt.stop();
        assert_eq!(job.output.as_deref(), Some("\"ok\""));
        let detail = queue.admin().job_detail(job.id).unwrap().unwrap();
        assert!(detail.dependencies.is_empty() && detail.dependents.is_empty());
    }
}

both! {
    /// The workflow around a job: every job linked to it, either way, with
    /// their states and edges; the detail of a waiting job names what it
    /// waits for.
    fn the_workflow_around_a_job_names_every_linked_job_and_edge(q) {
        let c = ManualClock::default();
        let queue = open(q, &c);
        let mut jobs = fan_in();
        jobs.push(NewJob::new("mail", "d", &1).with_depends_on(["c"]));
        jobs.push(NewJob::new("alone", "z", &1));
        queue.enqueue_many(jobs).unwrap();
        let w = queue.admin().workflow("d").unwrap().unwrap();
        let mut keys: Vec<&str> = w.jobs.iter().map(|j| j.key.as_str()).collect();
        keys.sort();
        assert_eq!(keys, vec!["a", "b", "c", "d"]);
        assert_eq!(w.edges.len(), 3);
        assert!(!w.truncated);
        let cols: Vec<usize> = w.columns().iter().map(|c| c.len()).collect();
        assert_eq!(cols, vec![2, 1, 1]);
        assert!(queue.admin().workflow("missing").unwrap().is_none());
        let c_id = queue.job_by_key("c").unwrap().unwrap().id;
        let detail = queue.admin().job_detail(c_id).unwrap().unwrap();
        let deps: Vec<&str> = detail.dependencies.iter().map(|l| l.key.as_str()).collect();
        assert_eq!(deps, vec!["a", "b"]);
        assert_eq!(detail.dependents.len(), 1);
        let e = queue.admin().explain("c").unwrap();
        assert_eq!(e.dependencies.len(), 2);
    }
}
