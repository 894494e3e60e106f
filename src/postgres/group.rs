//! Group commit of concurrent enqueues on PostgreSQL: producers that call
//! while another producer's insert is in flight are inserted together, in
//! one statement and one commit (one WAL flush for all of them), by
//! whichever of them finds no insert in flight. Writes `jobs` through
//! [`super::enqueue`], nothing else.
//!
//! Why: one enqueue alone is a statement whose fixed costs (planning the
//! dedup, executor start, commit, flush) are most of its time; eight
//! producers each paying them serialise on the server's CPU and on the WAL
//! flush, where eight rows in one statement cost little more than one. A
//! producer alone pays only a lock: its batch is itself.

use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard};

use std::time::Duration;

use super::conn::{self, Pool, Session};
use super::{enqueue, with_conn};
use crate::enqueue::ValidJob;
use crate::error::{Error, Result};
use crate::job::Enqueued;
use crate::time::Millis;

/// A queue's combined enqueues and the connections they use.
pub(crate) struct Enqueuer {
    group: Group,
    /// One batch is in flight at a time; a second connection stands by for
    /// a retry after a broken one. Their sessions always use the generic
    /// plan: a batch's size varies from call to call, and the custom plan
    /// the server would otherwise make for each cost more than inserting a
    /// few rows.
    pool: Pool,
}

impl Enqueuer {
    pub(crate) fn new(session: &Session, wait: Duration) -> Enqueuer {
        let mut generic = session.clone();
        generic
            .setup
            .push_str("; SET plan_cache_mode = force_generic_plan");
        Enqueuer {
            group: Group::default(),
            pool: conn::pool(&generic, 2, wait),
        }
    }

    /// Enqueues `job` with the producers calling at the same moment.
    pub(crate) fn enqueue(&self, job: ValidJob, now: Millis) -> Result<Enqueued> {
        self.group.enqueue(job, |jobs| {
            with_conn(&self.pool, true, |c| match jobs {
                [one] => enqueue::insert_one(c, one, now).map(|e| vec![e]),
                _ => enqueue::insert_many(c, jobs, now),
            })
        })
    }
}

/// Most jobs one combined insert carries; the rest wait for the next.
const MAX_GROUP: usize = 256;

/// The producers waiting for an insert, and the answers of those whose
/// insert is done.
#[derive(Default)]
pub(crate) struct Group {
    state: Mutex<State>,
    answered: Condvar,
}

#[derive(Default)]
struct State {
    next_ticket: u64,
    waiting: Vec<(u64, ValidJob)>,
    /// An insert is in flight: its leader answers it.
    leading: bool,
    answers: HashMap<u64, Result<Enqueued>>,
}

impl Group {
    /// Enqueues `job` with the producers calling at the same moment:
    /// `insert` runs a batch (its keys in order) in one transaction. A
    /// batch that fails as a whole for a reason of one of its rows (the
    /// server refused a row, two batches deadlocked on each other's keys)
    /// is run again one job at a time, so one producer's failure is never
    /// another's; a broken connection or an unreachable server is every
    /// member's answer, as it would have been alone.
    pub(crate) fn enqueue(
        &self,
        job: ValidJob,
        insert: impl Fn(&[ValidJob]) -> Result<Vec<Enqueued>>,
    ) -> Result<Enqueued> {
        let mut st = self.lock();
        let ticket = st.next_ticket;
        st.next_ticket += 1;
        st.waiting.push((ticket, job));
        loop {
            if let Some(answer) = st.answers.remove(&ticket) {
                return answer;
            }
            if st.leading {
                st = self
                    .answered
                    .wait(st)
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                continue;
            }
            st.leading = true;
            let take = st.waiting.len().min(MAX_GROUP);
            let mut batch: Vec<(u64, ValidJob)> = st.waiting.drain(..take).collect();
            drop(st);
            // In key order: two processes' batches then take the unique
            // index's entries in the same order, and cannot deadlock on
            // new keys.
            batch.sort_by(|a, b| a.1.key.cmp(&b.1.key));
            // The leader must hand back leadership however the insert
            // ends, or every producer would wait for ever.
            let answers =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&batch, &insert)))
                    .unwrap_or_else(|_| {
                        batch
                            .iter()
                            .map(|_| {
                                Err(Error::Internal(
                                    "the enqueue panicked: its outcome is unknown".into(),
                                ))
                            })
                            .collect()
                    });
            st = self.lock();
            st.leading = false;
            for ((t, _), a) in batch.iter().zip(answers) {
                st.answers.insert(*t, a);
            }
            self.answered.notify_all();
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Each member's answer to its batch.
fn run(
    batch: &[(u64, ValidJob)],
    insert: &impl Fn(&[ValidJob]) -> Result<Vec<Enqueued>>,
) -> Vec<Result<Enqueued>> {
    let jobs: Vec<ValidJob> = batch.iter().map(|(_, j)| j.clone()).collect();
    match insert(&jobs) {
        Ok(answers) => answers.into_iter().map(Ok).collect(),
        Err(e) if jobs.len() == 1 || shared(&e) => {
            jobs.iter().map(|_| Err(e.duplicate())).collect()
        }
        Err(_) => jobs
            .iter()
            .map(|j| {
                insert(std::slice::from_ref(j)).map(|mut a| a.pop().expect("one answer per job"))
            })
            .collect(),
    }
}

/// A failure of the connection or the server, not of a row: every
/// member's, and not made better by trying each alone.
fn shared(e: &Error) -> bool {
    matches!(
        e,
        Error::Connection(_) | Error::OutcomeUnknown(_) | Error::Busy(_) | Error::ReadOnly(_)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    fn job(key: &str) -> ValidJob {
        ValidJob {
            queue: "default".into(),
            kind: "k".into(),
            key: key.into(),
            payload: "{}".into(),
            priority: 0,
            run_at: 0,
            max_attempts: 2,
        }
    }

    /// `k<t>-<i>` as a number of its own, so an answer names its job.
    fn id_of(key: &str) -> i64 {
        let (t, i) = key[1..].split_once('-').unwrap();
        t.parse::<i64>().unwrap() * 1000 + i.parse::<i64>().unwrap()
    }

    #[test]
    fn producers_calling_together_share_inserts_and_each_gets_its_own_answer() {
        let group = Arc::new(Group::default());
        let calls = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let (group, calls) = (group.clone(), calls.clone());
                std::thread::spawn(move || {
                    (0..50)
                        .map(|i| {
                            let key = format!("k{t}-{i}");
                            let got = group
                                .enqueue(job(&key), |jobs| {
                                    calls.fetch_add(1, Ordering::SeqCst);
                                    std::thread::sleep(std::time::Duration::from_millis(1));
                                    Ok(jobs.iter().map(|j| Enqueued::New(id_of(&j.key))).collect())
                                })
                                .unwrap();
                            assert_eq!(got, Enqueued::New(id_of(&key)));
                        })
                        .count()
                })
            })
            .collect();
        let done: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(done, 400);
        let inserts = calls.load(Ordering::SeqCst);
        assert!(
            inserts < 400,
            "{inserts} inserts for 400 concurrent enqueues"
        );
    }

    #[test]
    fn a_batch_refused_for_one_row_is_retried_alone_so_only_that_producer_fails() {
        let group = Group::default();
        let insert = |jobs: &[ValidJob]| {
            if jobs.iter().any(|j| j.key == "bad") {
                Err(Error::InvalidInput("the server refused the payload".into()))
            } else {
                Ok(jobs.iter().map(|_| Enqueued::New(1)).collect())
            }
        };
        let batch = vec![(0, job("bad")), (1, job("good"))];
        let answers = run(&batch, &insert);
        assert!(matches!(answers[0], Err(Error::InvalidInput(_))));
        assert_eq!(*answers[1].as_ref().unwrap(), Enqueued::New(1));
        assert_eq!(
            group.enqueue(job("good"), insert).unwrap(),
            Enqueued::New(1)
        );
    }

    #[test]
    fn a_broken_connection_is_every_members_answer_without_a_retry_each() {
        let calls = AtomicUsize::new(0);
        let insert = |_: &[ValidJob]| -> Result<Vec<Enqueued>> {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(Error::OutcomeUnknown("the connection broke".into()))
        };
        let batch = vec![(0, job("a")), (1, job("b")), (2, job("c"))];
        let answers = run(&batch, &insert);
        assert!(answers
            .iter()
            .all(|a| matches!(a, Err(Error::OutcomeUnknown(_)))));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
