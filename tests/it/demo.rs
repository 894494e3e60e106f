//! `litejob demo` end to end, with the real binary, on a file and on
//! PostgreSQL: a rerun changes only the delivery counts; SIGKILL at random
//! moments (and at the exact step between a send and its acknowledgement)
//! never invoices twice and sends a receipt twice only where the kill
//! landed; several copies at once (several machines, on PostgreSQL) agree.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::backends::{Engine, TestQueue};
use crate::both;
use crate::support::{self, show, Rng};

/// A demo's database and its receipts file: beside the file (the
/// default), or in a directory of the test's for PostgreSQL (`--receipts`;
/// its default, the current directory, has its own test).
struct Demo<'a> {
    q: &'a TestQueue,
    receipts: PathBuf,
    _dir: Option<tempfile::TempDir>,
}

impl Demo<'_> {
    fn new(q: &TestQueue) -> Demo<'_> {
        match q.engine {
            Engine::Sqlite => Demo {
                q,
                receipts: PathBuf::from(format!("{}.receipts", q.location)),
                _dir: None,
            },
            Engine::Postgres => {
                let dir = tempfile::tempdir().unwrap();
                Demo {
                    q,
                    receipts: dir.path().join("receipts"),
                    _dir: Some(dir),
                }
            }
        }
    }

    /// `litejob --db … [--json] demo ARGS [--receipts …]`.
    fn command(&self, json: bool, args: &[&str]) -> Command {
        let mut cmd = Command::new(support::bin());
        cmd.arg("--db").arg(&self.q.location);
        if json {
            cmd.arg("--json");
        }
        cmd.arg("demo").args(args);
        if self.q.engine == Engine::Postgres {
            cmd.arg("--receipts").arg(&self.receipts);
        }
        cmd.env_remove("LITEJOB_DB").env_remove("LITEJOB_FAULT");
        cmd
    }

    /// Runs the demo to completion with `--json`; returns its summary.
    fn json(&self, args: &[&str]) -> Value {
        let out = self.command(true, args).output().expect("run litejob demo");
        assert_eq!(out.status.code(), Some(0), "{}", show(args, &out));
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", show(args, &out)))
    }

    /// The demo as a child, without waiting for it.
    fn child(&self, args: &[&str], fault: Option<&str>) -> std::process::Child {
        let mut cmd = self.command(false, args);
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        if let Some(f) = fault {
            cmd.env("LITEJOB_FAULT", f);
        }
        cmd.spawn().expect("spawn litejob demo")
    }

    /// Receipt lines and how often each appears.
    fn receipt_lines(&self) -> HashMap<String, i64> {
        lines_of(&self.receipts)
    }

    /// Whether the demo's table exists yet.
    fn has_invoices(&self) -> bool {
        match self.q.engine {
            Engine::Sqlite => {
                Path::new(&self.q.location).exists()
                    && self
                        .q
                        .count("SELECT count(*) FROM sqlite_master WHERE name = 'invoices'")
                        == 1
            }
            Engine::Postgres => {
                self.q.count(
                    "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() \
                     AND tablename = 'invoices'",
                ) == 1
            }
        }
    }
}

/// The lines of a receipts file and how often each appears.
fn lines_of(path: &Path) -> HashMap<String, i64> {
    let text = std::fs::read_to_string(path).expect("read receipts");
    let mut seen = HashMap::new();
    for line in text.lines() {
        *seen.entry(line.to_string()).or_default() += 1;
    }
    seen
}

/// What must hold after any number of complete or killed runs followed by
/// one complete run: one job, one invoice, one sent outbox row per event;
/// each receipt line names a real invoice and its event; each event has a
/// receipt line. Returns the receipt lines seen more than once.
fn check_finished(d: &Demo<'_>, events: i64) -> HashMap<String, i64> {
    let q = |sql: &str| d.q.count(sql);
    assert_eq!(
        q("SELECT count(*) FROM jobs WHERE kind = 'payment.succeeded'"),
        events
    );
    assert_eq!(
        q("SELECT count(*) FROM jobs WHERE kind = 'payment.succeeded' AND state = 'succeeded'"),
        events,
        "every job succeeded"
    );
    assert_eq!(
        q("SELECT count(*) FROM invoices"),
        events,
        "one invoice per event"
    );
    assert_eq!(
        q("SELECT count(DISTINCT provider_event_id) FROM invoices"),
        events
    );
    assert_eq!(q("SELECT count(*) FROM processed_jobs"), events);
    assert_eq!(
        q("SELECT count(*) FROM outbox WHERE kind = 'send_receipt' AND state = 'sent'"),
        events,
        "one receipt sent per invoice"
    );
    assert_eq!(q("SELECT count(*) FROM outbox"), events);

    let invoice_of: HashMap<String, String> =
        d.q.strings("SELECT provider_event_id || ' ' || id FROM invoices")
            .into_iter()
            .map(|l| {
                let (e, id) = l.split_once(' ').unwrap();
                (e.to_string(), id.to_string())
            })
            .collect();
    let lines = d.receipt_lines();
    assert_eq!(
        lines.len() as i64,
        events,
        "one distinct receipt line per invoice"
    );
    for line in lines.keys() {
        let (id, evt) = line.split_once('\t').expect("<invoice id>\\t<event id>");
        assert_eq!(
            invoice_of.get(evt).map(String::as_str),
            Some(id),
            "receipt {line:?} names its event's invoice"
        );
    }
    lines.into_iter().filter(|(_, n)| *n > 1).collect()
}

/// A receipt line sent `n` times needs `n - 1` attempts of its outbox row
/// cut short by a crash: a duplicate is only allowed where a kill landed
/// between the send and its acknowledgement.
fn check_duplicates_were_abandoned(d: &Demo<'_>, dups: &HashMap<String, i64>) {
    for (line, n) in dups {
        let evt = line.split_once('\t').unwrap().1;
        let abandoned = d.q.count(&format!(
            "SELECT count(*) FROM attempts a JOIN outbox o ON o.id = a.outbox_id \
             WHERE o.key = 'receipt:{evt}' AND a.outcome = 'abandoned'"
        ));
        assert!(
            abandoned >= n - 1,
            "receipt {line:?} sent {n} times but only {abandoned} abandoned attempts"
        );
    }
}

both! {
    /// A second run delivers every event again and changes nothing else.
    fn a_second_run_creates_no_job_invoice_or_receipt_only_deliveries_grow(q) {
        let d = Demo::new(q);
        let args = ["--events", "100", "--redeliver", "3", "--seed", "5"];
        let first = d.json(&args);
        assert_eq!(first["events"], 100);
        assert_eq!(first["deliveries"], 300);
        assert_eq!(first["duplicates_absorbed"], 200);
        assert_eq!(first["jobs"], 100);
        assert_eq!(first["invoices"], 100);
        assert_eq!(first["receipts_sent"], 100);
        assert_eq!(first["receipt_lines"], 100);
        assert_eq!(first["dead"], 0);
        assert_eq!(first["this_run"]["new_jobs"], 100);
        assert!(check_finished(&d, 100).is_empty());
        if q.engine == Engine::Postgres {
            let db = first["db"].as_str().unwrap();
            assert!(db.starts_with("postgres://") && !db.contains(":litejob@"), "no password: {db}");
        }

        let snapshot = |d: &Demo<'_>| {
            (
                d.q.strings("SELECT id || ' ' || idempotency_key || ' ' || state FROM jobs ORDER BY id"),
                d.q.strings("SELECT id || ' ' || provider_event_id || ' ' || amount_cents || ' ' || created_at FROM invoices ORDER BY id"),
                d.q.strings("SELECT id || ' ' || key || ' ' || state || ' ' || sent_at FROM outbox ORDER BY id"),
                d.q.strings("SELECT key || ' ' || completed_at FROM processed_jobs ORDER BY key"),
                std::fs::read_to_string(&d.receipts).unwrap(),
            )
        };
        let before = snapshot(&d);

        let second = d.json(&args);
        assert_eq!(second["this_run"]["deliveries"], 300);
        assert_eq!(second["this_run"]["new_jobs"], 0, "{second}");
        assert_eq!(second["this_run"]["duplicates"], 300);
        assert_eq!(second["deliveries"], 600);
        assert_eq!(second["jobs"], 100);
        assert_eq!(second["invoices"], 100);
        assert_eq!(second["receipt_lines"], 100);
        assert_eq!(before, snapshot(&d), "nothing but delivery counts changed");
        assert_eq!(
            q.count("SELECT count(*) FROM jobs WHERE deliveries <> 6"),
            0,
            "each event delivered 3 times per run"
        );
        assert!(check_finished(&d, 100).is_empty());
    }
}

both! {
    /// A flag out of range writes nothing: no table, no receipts file.
    fn a_bad_mail_failure_rate_is_refused_before_anything_is_written(q) {
        let d = Demo::new(q);
        let args = ["--mail-failure-rate", "1.5"];
        let out = d.command(false, &args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", show(&args, &out));
        assert!(String::from_utf8_lossy(&out.stderr).contains("mail-failure-rate"));
        assert!(!d.has_invoices() && !d.receipts.exists());
        if q.engine == Engine::Sqlite {
            assert!(!Path::new(&q.location).exists());
        }
    }
}

both! {
    /// SIGKILLs at random moments, then one run to the end: every event
    /// invoiced once, a receipt sent twice only where a kill landed
    /// between the send and its acknowledgement.
    fn killed_at_random_moments_then_run_again_invoices_once_and_resends_only_where_a_kill_landed(q) {
        let d = Demo::new(q);
        let args = ["--events", "300", "--seed", "9", "--lease", "1s"];
        let mut rng = Rng::seeded();
        let (mut sleeps, mut landed) = (Vec::new(), 0);
        for _ in 0..8 {
            let ms = 5 + rng.below(300);
            sleeps.push(ms);
            let mut child = d.child(&args, None);
            std::thread::sleep(Duration::from_millis(ms));
            // A run that finished before the kill is fine too.
            if child.try_wait().unwrap().is_none() {
                landed += 1;
            }
            let _ = child.kill();
            child.wait().unwrap();
        }
        let done = d.json(&args);
        let dups = check_finished(&d, 300);
        check_duplicates_were_abandoned(&d, &dups);
        assert_eq!(
            done["duplicate_receipt_lines"],
            dups.values().map(|n| n - 1).sum::<i64>()
        );
        assert_eq!(done["dead"], 0);
        eprintln!(
            "{landed} of {} kills landed, after {sleeps:?} ms; receipt lines sent twice: {}; abandoned effect attempts: {}",
            sleeps.len(),
            dups.len(),
            q.count("SELECT count(*) FROM attempts WHERE outbox_id IS NOT NULL AND outcome = 'abandoned'")
        );
    }
}

both! {
    /// Aborted at each fault point (a later hit of it, so work is under
    /// way), then run to the end: the same result as a run never
    /// interrupted. Each point on a queue of its own, so every point is
    /// reached whatever the runs before it finished.
    fn aborted_at_every_fault_point_then_run_again_finishes_with_the_same_result(q) {
        let args = ["--events", "80", "--seed", "11", "--lease", "1s"];
        let mut rng = Rng::seeded();
        let mut aborted = Vec::new();
        for point in litejob::fault::POINTS {
            let fresh = TestQueue::new(q.engine);
            let d = Demo::new(&fresh);
            let fault = format!("{point}:{}", 1 + rng.below(5));
            let out = d.child(&args, Some(&fault)).wait_with_output().unwrap();
            if String::from_utf8_lossy(&out.stderr).contains(&format!("aborting at {point}")) {
                assert!(!out.status.success());
                aborted.push(*point);
            }
            let done = d.json(&args);
            let dups = check_finished(&d, 80);
            check_duplicates_were_abandoned(&d, &dups);
            assert_eq!(done["dead"], 0, "{fault}");
        }
        assert_eq!(aborted.len(), litejob::fault::POINTS.len(), "points reached: {aborted:?}");
    }
}

both! {
    /// The process aborts right after a send, before its acknowledgement:
    /// the next run sends exactly that receipt again, and nothing else.
    fn a_crash_between_send_and_acknowledgement_resends_exactly_that_receipt(q) {
        let d = Demo::new(q);
        // One effect thread and no mail failures: the first send writes its
        // line, then the process aborts before recording it.
        let crash = [
            "--events",
            "50",
            "--lease",
            "1s",
            "--mail-failure-rate",
            "0",
            "--effect-workers",
            "1",
        ];
        let out = d.child(&crash, Some("after-effect-before-ack")).wait_with_output().unwrap();
        assert!(!out.status.success(), "{}", show(&crash, &out));
        assert!(String::from_utf8_lossy(&out.stderr).contains("aborting at after-effect-before-ack"));
        let sent_before_crash = d.receipt_lines();
        assert_eq!(sent_before_crash.len(), 1, "{sent_before_crash:?}");

        let done = d.json(&["--events", "50", "--lease", "1s"]);
        let dups = check_finished(&d, 50);
        assert_eq!(dups.len(), 1, "{dups:?}");
        let (line, n) = dups.iter().next().unwrap();
        assert_eq!(*n, 2);
        assert!(
            sent_before_crash.contains_key(line),
            "the duplicate is the line sent at the crash"
        );
        check_duplicates_were_abandoned(&d, &dups);
        assert_eq!(done["duplicate_receipt_lines"], 1);
    }
}

/// `cmd` run by a shell that stops itself first: it starts only on SIGCONT.
fn stopped(cmd: &Command) -> Command {
    let mut sh = Command::new("sh");
    sh.arg("-c")
        .arg(r#"kill -STOP $$ && exec "$0" "$@""#)
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => sh.env(k, v),
            None => sh.env_remove(k),
        };
    }
    sh
}

/// Whether process `pid` is stopped (by a signal).
fn is_stopped(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The state follows the parenthesised command name.
    stat.rsplit_once(')')
        .is_some_and(|(_, rest)| rest.trim_start().starts_with('T'))
}

both! {
    /// Three copies at once on one database (three machines, on
    /// PostgreSQL) finish with the same result: each event one job, one
    /// invoice, one receipt, whichever copy ran it. The copies are released
    /// together (each waits stopped until all three are up): started one
    /// after the other, the first could be done before the last began.
    /// Which copy runs which job is the queue's business: a copy may run
    /// none (another claimed them all first, which a file on tmpfs makes
    /// common), so that is reported, not asserted.
    fn three_copies_at_once_on_one_database_finish_with_the_same_result(q) {
        let d = Demo::new(q);
        let args = ["--events", "150", "--seed", "3"];
        let children: Vec<_> = (0..3)
            .map(|_| {
                stopped(&d.command(true, &args))
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        support::wait_until("the three copies wait stopped", support::LONG, || {
            children.iter().all(|c| is_stopped(c.id()))
        });
        let cont = Command::new("kill")
            .arg("-CONT")
            .args(children.iter().map(|c| c.id().to_string()))
            .status()
            .unwrap();
        assert!(cont.success());
        let mut new_jobs = 0;
        for child in children {
            let out = child.wait_with_output().unwrap();
            assert_eq!(out.status.code(), Some(0), "{}", show(&args, &out));
            let s: Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(s["jobs"], 150, "{s}");
            assert_eq!(s["invoices"], 150, "{s}");
            assert_eq!(s["receipts_sent"], 150, "{s}");
            assert_eq!(s["receipt_lines"], 150, "{s}");
            assert_eq!(s["duplicate_receipt_lines"], 0, "{s}");
            new_jobs += s["this_run"]["new_jobs"].as_i64().unwrap();
        }
        assert_eq!(new_jobs, 150, "each event created its job once, in one copy or another");
        assert!(check_finished(&d, 150).is_empty());
        assert_eq!(q.count("SELECT CAST(sum(deliveries) AS bigint) FROM jobs"), 1350);
        let mut runs: HashMap<String, usize> = HashMap::new();
        for w in q.strings("SELECT worker FROM attempts WHERE job_id IS NOT NULL") {
            *runs.entry(w.split('/').next().unwrap().to_string()).or_default() += 1;
        }
        eprintln!("job runs per copy (pid): {runs:?}");
    }
}

both! {
    /// SIGTERM: a graceful stop with a partial summary, nothing left
    /// running; a rerun finishes the work.
    fn sigterm_stops_gracefully_with_a_partial_summary_and_a_rerun_finishes(q) {
        let d = Demo::new(q);
        let args = ["--events", "600", "--lease", "1s"];
        let child = d.child(&args, None);
        support::wait_until("demo has invoiced something", Duration::from_secs(30), || {
            d.has_invoices() && q.count("SELECT count(*) FROM invoices") > 0
        });
        let term = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(term.success());
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", show(&args, &out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("interrupted"), "{stdout}");
        assert_eq!(
            q.count("SELECT count(*) FROM jobs WHERE state = 'running'"),
            0,
            "running jobs finished or were released"
        );
        assert_eq!(
            q.count("SELECT count(*) FROM outbox WHERE state = 'sending'"),
            0,
            "running sends finished or were released"
        );
        d.json(&args);
        let dups = check_finished(&d, 600);
        check_duplicates_were_abandoned(&d, &dups);
    }
}

it! {
    /// On PostgreSQL there is no file to put the receipts beside: they go to
    /// `./litejob-demo.receipts`, in the directory the demo runs in.
    #[needs(Postgres)]
    fn on_postgres_the_receipts_go_to_the_current_directory() {
        let q = crate::postgres::pg();
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new(support::bin())
            .args(["--db", &q.location, "--json", "demo", "--events", "20"])
            .current_dir(dir.path())
            .env_remove("LITEJOB_DB")
            .env_remove("LITEJOB_FAULT")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", show(&["demo"], &out));
        let s: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(s["receipts"], "litejob-demo.receipts");
        assert_eq!(
            lines_of(&dir.path().join("litejob-demo.receipts")).len(),
            20
        );
        let help = Command::new(support::bin())
            .args(["demo", "--help"])
            .output()
            .unwrap();
        assert!(String::from_utf8_lossy(&help.stdout).contains("./litejob-demo.receipts"));
    }
}

both! {
    /// A second signal exits at once with 130; a rerun loses nothing.
    fn a_second_signal_exits_at_once_with_130_and_a_rerun_finishes(q) {
        let d = Demo::new(q);
        // Every send takes 3 s, so the graceful stop has running sends to wait for.
        let args = ["--events", "20", "--lease", "1s", "--send-delay", "3s"];
        let mut child = d.child(&args, None);
        support::wait_until("a receipt is being sent", Duration::from_secs(30), || {
            d.has_invoices() && q.count("SELECT count(*) FROM outbox WHERE state = 'sending'") > 0
        });
        let pid = child.id().to_string();
        let kill = |sig: &str| {
            let ok = Command::new("kill")
                .args([sig, pid.as_str()])
                .status()
                .unwrap();
            assert!(ok.success());
        };
        kill("-TERM");
        // The first signal is being handled (the stop waits for the sends)...
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            child.try_wait().unwrap().is_none(),
            "the graceful stop waits for the running sends"
        );
        // ...and the second one exits at once.
        kill("-INT");
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(130), "a second signal exits with 130");
        // Nothing was lost: a normal run finishes the work, each receipt once
        // (the interrupted sends had not written their line yet).
        d.json(&["--events", "20", "--lease", "1s"]);
        let dups = check_finished(&d, 20);
        assert!(dups.is_empty(), "{dups:?}");
    }
}
