//! Wake-ups across processes: a job enqueued by another process (the real
//! `litejob enqueue`) wakes an idle runtime through `LISTEN/NOTIFY` long
//! before its poll would; behind a pooler that drops notifications (the
//! proxy drops every NotificationResponse) the poll still finds it.

use crate::backends::Runtimes;
use std::process::Command;
use std::time::Duration;

use litejob::{JobState, QueueOptions};

use super::pg;
use super::proxy::Proxy;
use crate::backends::{app_handler, done, Engine, TestQueue};
use crate::support::{bin, show, wait_until, LONG};

/// The test server's `host:port`.
pub fn upstream(url: &str) -> String {
    let rest = url.split_once("://").unwrap().1;
    let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    host.split(['/', '?']).next().unwrap().to_string()
}

/// `url` with one more query parameter.
pub fn with_param(url: &str, param: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{param}")
}

/// A runtime through `proxy` polling every `poll`, started and listening:
/// the listener's connection has sent its `LISTEN`, and the wake-up it
/// gives itself on connecting has been spent.
fn idle_runtime(
    q: &TestQueue,
    proxy: &Proxy,
    poll: Duration,
) -> (litejob::admin::AnyQueue, litejob::Runtime) {
    let name = format!(
        "wake_{}_{}",
        std::process::id(),
        crate::support::now_ms() % 1_000_000
    );
    let url = with_param(&proxy.url(&q.location), &format!("application_name={name}"));
    let queue = litejob::admin::AnyQueue::open_with(&url, QueueOptions::default()).unwrap();
    let rt = app_handler(
        Engine::Postgres,
        queue.runtime().workers(1).poll_interval(poll),
        "work",
        done,
    )
    .start()
    .unwrap();
    wait_until("the runtime listens", LONG, || {
        q.count(&format!(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = '{name}' \
             AND query LIKE 'LISTEN%'"
        )) == 1
    });
    std::thread::sleep(Duration::from_millis(500));
    (queue, rt)
}

/// Enqueues from another process, straight to the server.
fn enqueue_elsewhere(q: &TestQueue, key: &str) {
    let args = ["--db", &q.location, "enqueue", "work", "--key", key];
    let out = Command::new(bin())
        .args(args)
        .env_remove("LITEJOB_DB")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&args, &out));
}

fn succeeded(queue: &litejob::admin::AnyQueue, key: &str) -> bool {
    queue
        .job_by_key(key)
        .unwrap()
        .is_some_and(|j| j.state == JobState::Succeeded)
}

it! {
    #[needs(Postgres)]
    fn a_notification_wakes_an_idle_runtime_long_before_its_poll() {
        let q = pg();
        q.create_app_table();
        let proxy = Proxy::start(&upstream(&q.location));
        // A poll this long never fires within the test: only a wake-up can
        // start the job in time.
        let (queue, mut rt) = idle_runtime(&q, &proxy, Duration::from_secs(120));
        for key in ["w-1", "w-2"] {
            enqueue_elsewhere(&q, key);
            wait_until(
                "a wake-up reaches the runtime (its poll is minutes away)",
                Duration::from_secs(30),
                || succeeded(&queue, key),
            );
        }
        rt.stop();
        assert!(
            proxy.notifications_passed() >= 2,
            "{}",
            proxy.notifications_passed()
        );
        assert_eq!(q.count("SELECT count(*) FROM app_rows"), 2);
    }
}

it! {
    #[needs(Postgres)]
    fn behind_a_pooler_that_drops_notifications_the_poll_finds_the_job() {
        let q = pg();
        q.create_app_table();
        let proxy = Proxy::start(&upstream(&q.location));
        proxy.drop_notifications(true);
        let (queue, mut rt) = idle_runtime(&q, &proxy, Duration::from_secs(1));
        enqueue_elsewhere(&q, "p-1");
        wait_until("the poll finds the job", LONG, || succeeded(&queue, "p-1"));
        rt.stop();
        assert!(
            proxy.notifications_dropped() >= 1,
            "the enqueue's notification was dropped"
        );
        assert_eq!(proxy.notifications_passed(), 0);
        assert_eq!(q.count("SELECT count(*) FROM app_rows"), 1);
    }
}
