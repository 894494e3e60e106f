//! Batches: written whole or not at all, answered and stored exactly as one
//! enqueue per job in order would be (ids, duplicates, deliveries, columns),
//! a later chunk meeting a known key keeps the earlier chunks, and
//! concurrent batches with overlapping keys make one job per key.

use litejob::admin::AnyQueue;
use litejob::{Enqueued, NewJob, QueueOptions, Synchronous};
use proptest::prelude::*;
use serde_json::json;

use super::jobs;
use crate::backends::{Engine, TestQueue};
use crate::both;

both! {
    /// 150 jobs in one batch (more than one multi-row INSERT on a file),
    /// then batches holding a key twice and keys seen before: every answer
    /// right, no id spent on a duplicate, and one invalid job refuses its
    /// whole batch.
    fn a_batch_is_written_whole_or_not_at_all(q) {
        let queue = q.open();
        let batch: Vec<NewJob> = (0..150)
            .map(|i| NewJob::new("k", format!("b:{i}"), &json!({ "i": i })))
            .collect();
        let r = queue.enqueue_many(batch).unwrap();
        assert_eq!(r.len(), 150);
        assert!(r.iter().all(|e| !e.is_duplicate()));
        assert_eq!(jobs(q), 150);
        assert_eq!(
            queue.job(r[149].id()).unwrap().unwrap().payload,
            r#"{"i":149}"#,
            "each row has its own job's values"
        );
        // A batch with one duplicate inside and one of an existing key.
        let r = queue
            .enqueue_many(vec![
                NewJob::new("k", "b:new", &json!({})),
                NewJob::new("k", "b:new", &json!({})),
                NewJob::new("k", "b:0", &json!({})),
            ])
            .unwrap();
        assert_eq!(r[0], Enqueued::New(r[0].id()));
        assert_eq!(r[1], Enqueued::Duplicate(r[0].id()));
        assert!(r[2].is_duplicate());
        assert_eq!(jobs(q), 151);
        // The duplicates spent no id: the next new job takes the next one.
        let next = queue
            .enqueue_many(vec![
                NewJob::new("k", "b:1", &json!({})),
                NewJob::new("k", "b:after", &json!({})),
            ])
            .unwrap();
        assert!(next[0].is_duplicate());
        assert_eq!(next[1], Enqueued::New(r[0].id() + 1));
        assert_eq!(jobs(q), 152);
        // One invalid job refuses the whole batch.
        for bad in [
            NewJob::new("", "bad:kind", &json!({})),
            NewJob::new("k", "", &json!({})),
            NewJob::from_json("k", "bad:json", "{oops"),
            NewJob::new("k", "bad:retries", &json!({})).with_max_retries(1_000_000),
        ] {
            let err = queue
                .enqueue_many(vec![
                    NewJob::new("k", "c:1", &json!({})),
                    bad,
                    NewJob::new("k", "c:2", &json!({})),
                ])
                .unwrap_err();
            assert!(err.is_invalid_input(), "{err:?}");
            assert_eq!(jobs(q), 152, "{err}");
        }
        assert_eq!(
            q.count("SELECT deliveries FROM jobs WHERE idempotency_key = 'b:0'"),
            2
        );
        assert_eq!(
            q.count("SELECT CAST(sum(deliveries) AS BIGINT) FROM jobs"),
            150 + 1 + 1 + 1 + 1 + 1,
            "a delivery per enqueue of a key"
        );
    }
}

/// Two queues on one engine that a batch test compares: one takes a batch,
/// the other the same jobs one by one.
struct Pair<'a> {
    a: &'a TestQueue,
    qa: AnyQueue,
    b: TestQueue,
    qb: AnyQueue,
}

impl Pair<'_> {
    /// On PostgreSQL without waiting for each commit's flush: what is
    /// compared is the answers and the rows, and a hundred enqueues one by
    /// one per case would each wait for one.
    fn new(a: &TestQueue) -> Pair<'_> {
        let b = TestQueue::new(a.engine);
        let opts = match a.engine {
            Engine::Sqlite => QueueOptions::default(),
            Engine::Postgres => QueueOptions::default().with_synchronous(Synchronous::Normal),
        };
        let (qa, qb) = (a.open_with(opts.clone()), b.open_with(opts));
        Pair { a, qa, b, qb }
    }

    /// Empties both queues (ids start again at 1, as in a new one) and
    /// brings them to the state a batch test starts from: keys `s:0`… of
    /// [`SPECIAL`] as three kinds of key a batch may meet: a job already
    /// in `jobs` (i % 3 == 0), only a ledger row, its job pruned
    /// (i % 3 == 1), and unseen (i % 3 == 2).
    fn reset(&self) {
        for (q, queue) in [(self.a, &self.qa), (&self.b, &self.qb)] {
            q.exec(match q.engine {
                Engine::Sqlite => {
                    "DELETE FROM jobs; DELETE FROM processed_jobs; \
                     DELETE FROM sqlite_sequence WHERE name = 'jobs'"
                }
                Engine::Postgres => "TRUNCATE jobs, processed_jobs RESTART IDENTITY CASCADE",
            });
            for i in (0..SPECIAL).filter(|i| i % 3 == 0) {
                queue
                    .enqueue(NewJob::new("k", format!("s:{i}"), &json!({})))
                    .unwrap();
            }
            let ledger: Vec<String> = (0..SPECIAL)
                .filter(|i| i % 3 == 1)
                .map(|i| format!("('s:{i}', 1, {})", 9000 + i))
                .collect();
            q.exec(&format!(
                "INSERT INTO processed_jobs (key, completed_at, job_id) VALUES {}",
                ledger.join(", ")
            ));
        }
    }
}

const SPECIAL: usize = 12;

/// Every job row, by id, one string per row, as a batch test compares two
/// queues.
fn job_rows(q: &TestQueue) -> Vec<String> {
    q.strings(
        "SELECT CAST(id AS TEXT) || '|' || idempotency_key || '|' || CAST(deliveries AS TEXT) \
         || '|' || kind || '|' || queue || '|' || payload || '|' || CAST(priority AS TEXT) \
         || '|' || CAST(max_attempts AS TEXT) FROM jobs ORDER BY id",
    )
}

/// Enqueues `keys` as one batch into one queue of `pair` and one by one
/// into the other (both from [`Pair::reset`]), and checks the answers and
/// the rows are the same. Each job's payload, queue, priority and retries
/// come from its key, so a value bound to the wrong row shows.
fn batch_like_one_by_one(pair: &Pair<'_>, keys: &[String]) -> Result<(), TestCaseError> {
    let batch = || -> Vec<NewJob> {
        keys.iter()
            .map(|k| {
                let n = k.len() as i64 + k.bytes().map(i64::from).sum::<i64>();
                NewJob::new("k", k.clone(), &json!({ "k": k }))
                    .with_queue(format!("q{}", n % 3))
                    .with_priority(n % 7 - 3)
                    .with_max_retries((n % 4) as u32)
            })
            .collect()
    };
    pair.reset();
    let (qa, qb) = (&pair.qa, &pair.qb);
    let together = qa.enqueue_many(batch()).unwrap();
    let one_by_one: Vec<Enqueued> = batch()
        .into_iter()
        .map(|j| qb.enqueue(j).unwrap())
        .collect();
    prop_assert_eq!(&together, &one_by_one);
    prop_assert_eq!(job_rows(pair.a), job_rows(&pair.b));
    // And the next job takes the next id on both: a refused multi-row
    // insert spent none.
    let next = |q: &AnyQueue| q.enqueue(NewJob::new("k", "next", &json!({}))).unwrap();
    prop_assert_eq!(next(qa), next(qb));
    Ok(())
}

both! {
    /// A batch whose later chunk meets a key seen before keeps its earlier
    /// chunks, and answers like one enqueue per job.
    fn a_batch_whose_later_chunk_meets_a_known_key_keeps_its_earlier_chunks(q) {
        let pair = Pair::new(q);
        let fresh = |n: usize| (0..n).map(|i| format!("f:{i}")).collect::<Vec<_>>();
        // 130 jobs: a chunk of 100 goes in, the chunk of 25 after it holds a
        // key in `jobs` at 110 (its failure must not undo the first chunk).
        let mut keys = fresh(130);
        keys[110] = "s:0".into();
        batch_like_one_by_one(&pair, &keys).unwrap();
        // A key known only to the ledger as the last row of a chunk of 25.
        let mut keys = fresh(130);
        keys[124] = "s:1".into();
        batch_like_one_by_one(&pair, &keys).unwrap();
        // Both, and a chunk of 5 after them.
        let mut keys = fresh(136);
        keys[0] = "s:3".into();
        keys[130] = "s:4".into();
        batch_like_one_by_one(&pair, &keys).unwrap();
    }
}

both! {
    /// Batches from several threads at once (on a file they share the
    /// writer's transactions, each in its own savepoint): with keys that
    /// overlap between them, every key is still one job, every answer names
    /// it, and every enqueue of a key counts as a delivery.
    fn concurrent_batches_with_overlapping_keys_make_one_job_per_key(q) {
        let queue = q.open();
        let answers: Vec<Vec<(String, Enqueued)>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|t| {
                    let queue = queue.clone();
                    s.spawn(move || {
                        let mut got = Vec::new();
                        for b in 0..5 {
                            // 30 keys from a pool of 200 that every thread draws on.
                            let keys: Vec<String> = (0..30)
                                .map(|i| format!("p:{}", (t * 37 + b * 53 + i * 7) % 200))
                                .collect();
                            let jobs = keys
                                .iter()
                                .map(|k| NewJob::new("k", k.clone(), &json!({})))
                                .collect();
                            let r = queue.enqueue_many(jobs).unwrap();
                            got.extend(keys.into_iter().zip(r));
                        }
                        got
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let all: Vec<(String, Enqueued)> = answers.into_iter().flatten().collect();
        let mut seen = std::collections::HashMap::<String, i64>::new();
        for (key, e) in &all {
            let job = queue.job_by_key(key).unwrap().expect("a job for every key");
            assert_eq!(e.id(), job.id, "{key}: {e:?}");
            *seen.entry(key.clone()).or_default() += 1;
        }
        for (key, n) in &seen {
            let job = queue.job_by_key(key).unwrap().unwrap();
            assert_eq!(job.deliveries, *n, "{key}");
        }
        assert_eq!(jobs(q), seen.len() as i64);
        let new = all.iter().filter(|(_, e)| !e.is_duplicate()).count();
        assert_eq!(new, seen.len(), "exactly one New answer per key");
    }
}

/// The keys of one case of [`a_batch_answers_like_one_enqueue_per_job`]:
/// fresh keys, keys of [`Pair::reset`]'s kinds inserted among them, and
/// perhaps one key twice.
fn case_keys(
    fresh: &[usize],
    special: Vec<(usize, usize)>,
    twice: Option<(usize, usize)>,
) -> Vec<String> {
    let mut keys: Vec<String> = fresh.iter().map(|i| format!("f:{i}")).collect();
    for (at, i) in special {
        keys.insert(at.min(keys.len()), format!("s:{i}"));
    }
    if let Some((from, to)) = twice {
        if !keys.is_empty() {
            let k = keys[from % keys.len()].clone();
            keys.insert(to.min(keys.len()), k);
        }
    }
    keys
}

both! {
    /// `enqueue_many` answers, and leaves the queue, exactly as one
    /// `enqueue` per job in order would: the same ids (in order, none spent
    /// on a duplicate), the same duplicates (of jobs in the queue, of pruned
    /// jobs in the ledger, and of a key twice in the batch) and the same
    /// delivery counts and columns. On a file, batches of up to 140 new keys
    /// go in by multi-row INSERTs and a chunk holding a key seen before goes
    /// in one by one; on PostgreSQL a batch of distinct keys is one
    /// statement. The cases share two queues, emptied before each.
    fn a_batch_answers_like_one_enqueue_per_job(q) {
        let pair = Pair::new(q);
        let config = proptest::test_runner::Config {
            source_file: Some(file!()),
            ..crate::support::proptest_config(40)
        };
        let cases = (
            prop::sample::subsequence((0..300usize).collect::<Vec<_>>(), 0..140),
            prop::collection::vec((0..140usize, 0..SPECIAL), 0..4),
            prop::option::weighted(0.2, (0..140usize, 0..140usize)),
        );
        let checked = proptest::test_runner::TestRunner::new(config).run(&cases, |(fresh, special, twice)| {
            batch_like_one_by_one(&pair, &case_keys(&fresh, special, twice))
        });
        if let Err(e) = checked {
            panic!("{e}");
        }
    }
}
