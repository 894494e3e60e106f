//! Several processes on one database, standing in for several machines:
//! eight real processes enqueueing the same keys at once create each job
//! once and count every delivery; two processes with workers share one
//! backlog and run each job once.

use std::collections::HashMap;
use std::process::Stdio;
use std::time::Duration;

use super::child::{self, check_invariants, enqueue_n, Env};
use crate::both;
use crate::reliability::harness::{kill, wait_timeout};

both! {
    /// 8 processes × the same 200 keys, each in its own order, released
    /// at once: one job per key, one `New` answer per key (the others are
    /// its duplicates, naming its id), and deliveries = every enqueue.
    fn eight_processes_enqueueing_the_same_keys_create_each_job_once(q) {
        drop(q.open());
        let dir = tempfile::tempdir().unwrap();
        let go = dir.path().join("go");
        let (procs, keys) = (8, 200);
        let children: Vec<_> = (0..procs)
            .map(|i| {
                child::child_command(&q.location)
                    .env("LITEJOB_BCHILD_MODE", "enqueue")
                    .env("LITEJOB_BCHILD_GO", &go)
                    .env("LITEJOB_BCHILD_PREFIX", "race")
                    .env("LITEJOB_BCHILD_KEYS", keys.to_string())
                    .env("LITEJOB_BCHILD_SEED", (i + 1).to_string())
                    .env("LITEJOB_BCHILD_OUT", dir.path().join(format!("answers-{i}")))
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        // Every child opened its queue and waits: release them together.
        std::thread::sleep(Duration::from_millis(300));
        std::fs::write(&go, b"go").unwrap();
        let mut answers: HashMap<String, Vec<(String, i64)>> = HashMap::new();
        for (i, c) in children.into_iter().enumerate() {
            let out = c.wait_with_output().unwrap();
            assert!(out.status.success(), "child: {}", String::from_utf8_lossy(&out.stderr));
            let text = std::fs::read_to_string(dir.path().join(format!("answers-{i}"))).unwrap();
            let mut n = 0;
            for line in text.lines() {
                let mut f = line.split('\t');
                let (key, what, id) = (f.next().unwrap(), f.next().unwrap(), f.next().unwrap());
                answers.entry(key.into()).or_default().push((what.into(), id.parse().unwrap()));
                n += 1;
            }
            assert_eq!(n, keys, "every enqueue answered: {text}");
        }
        assert_eq!(answers.len(), keys);
        for (key, a) in &answers {
            let new: Vec<i64> = a.iter().filter(|(w, _)| w == "new").map(|x| x.1).collect();
            assert_eq!(new.len(), 1, "{key}: {a:?}");
            assert!(a.iter().all(|(_, id)| *id == new[0]), "{key}: duplicates name its job: {a:?}");
        }
        assert_eq!(q.count("SELECT count(*) FROM jobs"), keys as i64);
        assert_eq!(q.count("SELECT count(*) FROM jobs WHERE deliveries <> 8"), 0);
        assert_eq!(q.count("SELECT CAST(sum(deliveries) AS bigint) FROM jobs"), (procs * keys) as i64);
    }
}

both! {
    /// Two processes with workers and the same handlers drain one backlog:
    /// both run jobs, each job's work commits once. The `work` runs wait
    /// until both processes have run something: started one after the
    /// other, the first could otherwise drain the backlog alone.
    #[not_pooled("its processes run on child::Env's own schema, reached directly, and look \
                  for idleness with a plain client on litejob's URL, which cannot pass \
                  `options` through a pooler")]
    fn two_processes_share_one_backlog_and_run_each_job_once(q) {
        let env = Env::new(q.engine);
        let queue = env.q.open();
        let mut keys = enqueue_n(&queue, "work", "w", 0, 150);
        keys.extend(enqueue_n(&queue, "quick", "q", 0, 150));
        let together = env.files.starts.with_file_name("together");
        let children: Vec<_> = (0..2)
            .map(|_| {
                env.spawn(&[
                    ("LITEJOB_BCHILD_UNTIL", "idle".into()),
                    ("LITEJOB_BCHILD_TOGETHER", together.display().to_string()),
                ])
            })
            .collect();
        for mut c in children {
            let st = wait_timeout(&mut c, Duration::from_secs(120)).unwrap_or_else(|| kill(&mut c));
            assert!(st.success(), "{st:?}: {}", env.stderr_text());
        }
        let f = check_invariants(&env, &keys);
        assert_eq!(f.succeeded, 300);
        let pids = env.q.strings("SELECT DISTINCT worker FROM attempts WHERE job_id IS NOT NULL")
            .iter()
            .map(|w| w.split('/').next().unwrap().to_string())
            .collect::<std::collections::HashSet<_>>();
        assert_eq!(pids.len(), 2, "both processes ran jobs: {pids:?}");
    }
}
