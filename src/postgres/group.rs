//! Group commit of concurrent enqueues on PostgreSQL: producers that call
//! while another producer's insert is in flight are inserted together, in
//! one statement and one commit (one WAL flush for all of them), by
//! whichever of them finds no insert in flight. Writes `jobs` through
//! [`super::enqueue`], nothing else.
//!
//! Why: one enqueue alone is a statement whose fixed costs (planning the
//! dedup, executor start, commit, flush) are most of its time; eight
//! producers each paying them serialise on the server's CPU and on the WAL
//! flush, where eight rows in one statement cost little more than one.
//!
//! Every member of a combined insert that failed for a reason of one of
//! its rows (the server refused a row, a key was locked by an open
//! transaction past the combined insert's short lock timeout) inserts its
//! job alone, as without the group: each on its own thread and connection,
//! so one producer's wait or failure is never another's — not even that of
//! the producer whose own open transaction holds the key.

use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::conn::{self, Pool, Session};
use super::enqueue;
use super::store::with_conn;
use crate::core::job::Enqueued;
use crate::core::sync::{lock, wait, wait_timeout};
use crate::core::time::Millis;
use crate::core::validate::ValidJob;
use crate::error::{Error, Result};

/// Most jobs one combined insert carries; the rest wait for the next.
const MAX_GROUP: usize = 256;

/// How long after an insert ends the next one waits for the producers it
/// answered to call again. Without the wait, the first of them to come
/// back found nobody else waiting and went alone, the others gathered
/// behind it: eight producers in a loop split into two groups that took
/// turns, each insert waiting for its own WAL flush (4.2 jobs an insert;
/// 8.0 with the wait, which they end as soon as the last one is back; 30
/// µs was too short for them, 100–500 µs all did). A producer that calls
/// later, or not again, costs the next insert at most this, once.
const GATHER: Duration = Duration::from_micros(200);

/// How long a combined insert waits for a key another transaction holds
/// before its members insert their jobs alone (each then waits the full
/// lock timeout, as a producer alone does). Shorter than the server's
/// deadlock timeout (1 s by default), so two processes' combined inserts
/// crossing on each other's keys give up before a deadlock is declared.
const TOGETHER_LOCK_TIMEOUT_MS: u64 = 100;

/// A queue's combined enqueues and the connections they use.
pub(crate) struct Enqueuer {
    group: Group,
    /// The combined inserts' connections: one insert is in flight at a
    /// time, a second connection stands by for a retry after a broken one.
    /// Their sessions always use the generic plan (a batch's size varies
    /// from call to call, and the custom plan the server would otherwise
    /// make for each cost more than inserting a few rows) and the short
    /// lock timeout above. That plan is made once, from the tables as they
    /// are then, and kept: made while `jobs` or the ledger was small (a new
    /// queue, or one its retention keeps small), it scanned the whole table
    /// for every insert however large the table grew (8,000 enqueues into a
    /// new schema: each scanned every job enqueued before it). With
    /// sequential scans and hash and merge joins off in these sessions
    /// (their only statements are the two inserts), the plan looks each
    /// key up in the unique indexes, whatever the tables' size.
    together: Pool,
    /// The store's pool: a producer's insert of its job alone.
    alone: Pool,
}

impl Enqueuer {
    pub(crate) fn new(session: &Session, alone: Pool, wait: Duration) -> Enqueuer {
        let mut together = session.clone();
        together.set("plan_cache_mode", "force_generic_plan");
        together.set("lock_timeout", format!("{TOGETHER_LOCK_TIMEOUT_MS}ms"));
        for plan in ["enable_seqscan", "enable_hashjoin", "enable_mergejoin"] {
            together.set(plan, "off");
        }
        Enqueuer {
            group: Group::default(),
            together: conn::pool(&together, 2, wait),
            alone,
        }
    }

    /// Enqueues `job` with the producers calling at the same moment.
    pub(crate) fn enqueue(&self, job: ValidJob, now: Millis) -> Result<Enqueued> {
        if !job.depends_on.is_empty() {
            // Its own transaction: a refused dependency is its answer alone.
            return with_conn(&self.alone, true, |c| enqueue::insert_one(c, &job, now));
        }
        self.group.enqueue(
            job,
            |jobs| {
                with_conn(&self.together, true, |c| match jobs {
                    [one] => enqueue::insert_one(c, one, now).map(|e| vec![e]),
                    _ => enqueue::insert_many(c, jobs, now),
                })
            },
            |one| with_conn(&self.alone, true, |c| enqueue::insert_one(c, one, now)),
        )
    }
}

/// The producers waiting for an insert, and the answers of those whose
/// insert is done.
#[derive(Default)]
pub(crate) struct Group {
    state: Mutex<State>,
    answered: Condvar,
    /// A leader gathering the producers of the last insert: told when the
    /// last of them calls again.
    back: Condvar,
}

#[derive(Default)]
struct State {
    next_ticket: u64,
    waiting: Vec<(u64, ValidJob)>,
    /// A combined insert is in flight, or its leader is gathering: its
    /// leader answers it.
    leading: bool,
    answers: HashMap<u64, Answer>,
    /// Producers answered by the last insert that have not called again,
    /// and when it ended (see [`GATHER`]).
    returning: usize,
    ended_at: Option<Instant>,
}

/// What a member of a combined insert learns.
#[derive(Debug)]
enum Answer {
    Done(Result<Enqueued>),
    /// Insert your job yourself.
    Alone,
}

impl Group {
    /// Enqueues `job` with the producers waiting at the same moment, by
    /// `together` (their jobs in key order, in one statement: a batch of
    /// one when nobody else waits), or by `alone`, on this thread, when the
    /// combined insert failed for a reason of one of its rows. A broken
    /// connection or an unreachable server is every member's answer, as it
    /// would have been alone.
    pub(crate) fn enqueue(
        &self,
        job: ValidJob,
        together: impl Fn(&[ValidJob]) -> Result<Vec<Enqueued>>,
        alone: impl Fn(&ValidJob) -> Result<Enqueued>,
    ) -> Result<Enqueued> {
        let mut st = self.lock();
        let ticket = st.next_ticket;
        st.next_ticket += 1;
        st.waiting.push((ticket, job.clone()));
        if st.returning > 0 {
            st.returning -= 1;
            if st.returning == 0 {
                self.back.notify_all();
            }
        }
        loop {
            match st.answers.remove(&ticket) {
                Some(Answer::Done(r)) => return r,
                Some(Answer::Alone) => {
                    drop(st);
                    return alone(&job);
                }
                None => {}
            }
            if st.leading {
                st = wait(&self.answered, st);
                continue;
            }
            // Even a batch of one is in flight: the producers that call
            // meanwhile gather behind it.
            st.leading = true;
            st = self.gather(st);
            let take = st.waiting.len().min(MAX_GROUP);
            let mut batch: Vec<(u64, ValidJob)> = st.waiting.drain(..take).collect();
            drop(st);
            // In key order: two processes' combined inserts then take the
            // unique index's entries in the same order.
            batch.sort_by(|a, b| a.1.key.cmp(&b.1.key));
            let (tickets, jobs): (Vec<u64>, Vec<ValidJob>) = batch.into_iter().unzip();
            // The leader must hand back leadership however the insert
            // ends, or every producer would wait for ever.
            let insert = std::panic::AssertUnwindSafe(|| run(&jobs, &together));
            let answers = std::panic::catch_unwind(insert).unwrap_or_else(|_| {
                let e = Error::OutcomeUnknown(
                    "the combined enqueue panicked: its outcome is unknown (enqueue again with \
                     the same key)"
                        .into(),
                );
                jobs.iter()
                    .map(|_| Answer::Done(Err(e.duplicate())))
                    .collect()
            });
            st = self.lock();
            st.leading = false;
            st.returning = tickets.len();
            st.ended_at = Some(Instant::now());
            for (t, a) in tickets.into_iter().zip(answers) {
                st.answers.insert(t, a);
            }
            self.answered.notify_all();
        }
    }

    /// Waits, up to [`GATHER`] after the last insert ended, for the
    /// producers it answered to call again.
    fn gather<'a>(&self, mut st: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        if let Some(until) = st.ended_at.map(|t| t + GATHER) {
            while st.returning > 0 {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                st = wait_timeout(&self.back, st, left);
            }
        }
        // Those that have not called by now are not counted on again.
        st.returning = 0;
        st
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }
}

/// Each member's answer to a combined insert: one per member, in order.
fn run(jobs: &[ValidJob], together: &impl Fn(&[ValidJob]) -> Result<Vec<Enqueued>>) -> Vec<Answer> {
    match together(jobs) {
        Ok(answers) if answers.len() == jobs.len() => {
            answers.into_iter().map(|a| Answer::Done(Ok(a))).collect()
        }
        Ok(answers) => {
            let e = Error::OutcomeUnknown(format!(
                "the combined enqueue answered {} of {} jobs (enqueue again with the same key)",
                answers.len(),
                jobs.len()
            ));
            jobs.iter()
                .map(|_| Answer::Done(Err(e.duplicate())))
                .collect()
        }
        Err(e) if shared(&e) => jobs
            .iter()
            .map(|_| Answer::Done(Err(e.duplicate())))
            .collect(),
        // Rolled back (the statement is one transaction): nothing of it was
        // written, so each member's insert alone is the first.
        Err(_) => jobs.iter().map(|_| Answer::Alone).collect(),
    }
}

/// A failure of the connection or the server, or one after the commit:
/// every member's, and not made better by trying each alone.
fn shared(e: &Error) -> bool {
    matches!(
        e,
        Error::Connection(_) | Error::OutcomeUnknown(_) | Error::ReadOnly(_) | Error::Internal(_)
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
            depends_on: Vec::new(),
            partition: None,
            timeout_ms: None,
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
        let inserts = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let (group, inserts) = (group.clone(), inserts.clone());
                std::thread::spawn(move || {
                    for i in 0..50 {
                        let key = format!("k{t}-{i}");
                        let slow = || std::thread::sleep(std::time::Duration::from_millis(1));
                        let got = group
                            .enqueue(
                                job(&key),
                                |jobs| {
                                    inserts.fetch_add(1, Ordering::SeqCst);
                                    slow();
                                    Ok(jobs.iter().map(|j| Enqueued::New(id_of(&j.key))).collect())
                                },
                                |one| {
                                    inserts.fetch_add(1, Ordering::SeqCst);
                                    slow();
                                    Ok(Enqueued::New(id_of(&one.key)))
                                },
                            )
                            .unwrap();
                        assert_eq!(got, Enqueued::New(id_of(&key)));
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        let inserts = inserts.load(Ordering::SeqCst);
        assert!(
            inserts < 400,
            "{inserts} inserts for 400 concurrent enqueues"
        );
    }

    #[test]
    fn a_combined_insert_refused_for_one_row_leaves_each_member_to_insert_alone() {
        let together = |jobs: &[ValidJob]| {
            if jobs.iter().any(|j| j.key == "held") {
                Err(Error::Busy("a key is locked by an open transaction".into()))
            } else {
                Ok(jobs.iter().map(|_| Enqueued::New(1)).collect())
            }
        };
        let answers = run(&[job("held"), job("free")], &together);
        assert!(
            answers.iter().all(|a| matches!(a, Answer::Alone)),
            "{answers:?}"
        );
    }

    #[test]
    fn a_broken_connection_is_every_members_answer_without_a_retry_each() {
        let calls = AtomicUsize::new(0);
        let together = |_: &[ValidJob]| -> Result<Vec<Enqueued>> {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(Error::OutcomeUnknown("the connection broke".into()))
        };
        let answers = run(&[job("a"), job("b"), job("c")], &together);
        assert!(answers
            .iter()
            .all(|a| matches!(a, Answer::Done(Err(Error::OutcomeUnknown(_))))));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_lone_producer_whose_key_is_locked_inserts_it_alone_after_the_short_wait() {
        let group = Group::default();
        let got = group.enqueue(
            job("k1-1"),
            |_| {
                Err(Error::Busy(
                    "the key is locked by an open transaction".into(),
                ))
            },
            |one| Ok(Enqueued::Duplicate(id_of(&one.key))),
        );
        assert_eq!(got.unwrap(), Enqueued::Duplicate(1001));
    }
}
