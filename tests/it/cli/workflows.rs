//! Workflows from the command: `enqueue --depends-on` refuses a key that
//! is no job's with nothing written; a dependent is `waiting` (listed,
//! counted, explained with what it waits on) until its dependency
//! succeeded; `show` carries a job's output and its links; `cancel` takes
//! the dependents with it; `workflow KEY` prints the graph by level and as
//! JSON.

use std::collections::BTreeSet;

use litejob::Outcome;
use serde_json::{json, Value};

use super::{init, json_of, ok, state_of, stderr_of, Db};
use crate::backends::{Engine, Runtimes, TestQueue};
use crate::both;
use crate::support::sqlite3;

/// Runs every due job of `kind` through the library's runtime in this
/// thread, each finishing with `output`.
fn finish(q: &TestQueue, kind: &'static str, output: Value) {
    let drained = q
        .open()
        .runtime()
        .handler(kind, move |_, _: Value| Outcome::done_with(&output))
        .drain()
        .unwrap();
    assert!(drained.succeeded > 0, "no {kind} job ran: {drained:?}");
}

both! {
    /// A missing dependency key: exit 2, the key named, no job and no edge
    /// written; on a file that does not exist yet, not even the file.
    #[needs(Sqlite3)]
    fn enqueue_depends_on_a_missing_key_exits_2_and_writes_nothing(q) {
        let e = stderr_of(q, &["enqueue", "merge", "--key", "c", "--depends-on", "a"], 2);
        assert!(e.contains("litejob: error:") && e.contains("\"a\""), "{e}");
        if q.engine == Engine::Sqlite {
            assert!(!q.created(), "a refused dependency created the file");
        }
        init(q);
        ok(q, &["enqueue", "part", "--key", "a"], 0);
        for args in [
            vec!["enqueue", "merge", "--key", "c", "--depends-on", "a", "--depends-on", "nosuch"],
            vec!["enqueue", "merge", "--key", "c", "--depends-on", "c"],
            vec!["enqueue", "merge", "--key", "c", "--depends-on", ""],
        ] {
            let e = stderr_of(q, &args, 2);
            assert!(e.contains("litejob: error:"), "{args:?}: {e}");
        }
        let e = stderr_of(
            q,
            &["enqueue", "merge", "--key", "c", "--depends-on", "a", "--depends-on", "nosuch"],
            2,
        );
        assert!(e.contains("\"nosuch\"") && e.contains("nothing was enqueued"), "{e}");
        assert_eq!(q.count("SELECT count(*) FROM jobs"), 1, "only a");
        assert_eq!(q.count("SELECT count(*) FROM job_dependencies"), 0);
        if q.engine == Engine::Sqlite {
            let seen = sqlite3(
                q.db(),
                "SELECT group_concat(idempotency_key) FROM jobs; \
                 SELECT count(*) FROM job_dependencies;",
            );
            assert_eq!(seen.trim(), "a\n0");
        }
    }
}

both! {
    /// `b` depends on `a`: waiting (listed by `jobs --state waiting`,
    /// counted by `stats`, shown and explained with what it waits on),
    /// then queued once `a` succeeded, whose output `show` carries.
    fn a_dependent_waits_until_its_dependency_succeeded_and_show_says_on_what(q) {
        ok(q, &["enqueue", "part", "--key", "a"], 0);
        assert_eq!(ok(q, &["enqueue", "merge", "--key", "b", "--depends-on", "a"], 0).trim(), "enqueued 2");
        assert_eq!(state_of(q, 2), "waiting");

        let listed = json_of(q, &["jobs", "--state", "waiting"], 0);
        let keys: Vec<&str> = listed["jobs"].as_array().unwrap().iter()
            .map(|j| j["idempotency_key"].as_str().unwrap()).collect();
        assert_eq!(keys, ["b"]);
        let stats = json_of(q, &["stats"], 0);
        assert_eq!((stats["jobs"]["waiting"].as_i64(), stats["by_kind"]["merge"]["waiting"].as_i64()), (Some(1), Some(1)));
        let text = ok(q, &["stats"], 0);
        assert!(text.contains("1 waiting, 1 queued"), "{text}");

        let shown = json_of(q, &["show", "2"], 0);
        assert_eq!(shown["job"]["state"], "waiting");
        let a = json!({"id": 1, "key": "a", "kind": "part", "state": "queued"});
        assert_eq!(shown["dependencies"], json!([a]));
        assert_eq!(shown["waiting_on"], json!([a]));
        assert_eq!(shown["dependents"], json!([]));
        let text = ok(q, &["show", "2"], 0);
        let line = |text: &str, field: &str| -> String {
            text.lines().find(|l| l.starts_with(field)).unwrap_or_else(|| panic!("no {field}:\n{text}")).to_string()
        };
        assert!(line(&text, "waiting on").ends_with("\"a\" (job 1, queued)"), "{text}");
        assert!(line(&text, "depends on").ends_with("1: \"a\" (job 1, queued)"), "{text}");
        let explained = ok(q, &["explain", "b"], 0);
        assert!(explained.contains("waiting: for its dependency \"a\" (job 1, queued)"), "{explained}");
        let explained = json_of(q, &["explain", "b"], 0);
        assert_eq!(explained["waiting_on"], json!([a]));
        assert_eq!(explained["dependencies"], json!([a]));

        finish(q, "part", json!({"rows": 3}));
        assert_eq!(state_of(q, 2), "queued", "queued in the commit that finished a");
        let shown = json_of(q, &["show", "1"], 0);
        let output: Value = serde_json::from_str(shown["job"]["output"].as_str().unwrap()).unwrap();
        assert_eq!(output, json!({"rows": 3}));
        assert_eq!(shown["dependents"][0]["key"], "b");
        let text = ok(q, &["show", "1"], 0);
        assert!(line(&text, "output").contains("{\"rows\":3}"), "{text}");
        assert!(line(&text, "dependents").ends_with("1: \"b\" (job 2, queued)"), "{text}");
        let shown = json_of(q, &["show", "2"], 0);
        assert_eq!((shown["waiting_on"].clone(), shown["dependencies"][0]["state"].clone()), (json!([]), json!("succeeded")));
        let explained = json_of(q, &["explain", "a"], 0);
        assert_eq!(explained["job"]["output"], shown_output(q, 1));
        assert!(json_of(q, &["jobs", "--state", "waiting"], 0)["jobs"].as_array().unwrap().is_empty());
    }
}

/// Job `id`'s `output` as `show --json` has it.
fn shown_output(q: &TestQueue, id: i64) -> Value {
    json_of(q, &["show", &id.to_string()], 0)["job"]["output"].clone()
}

both! {
    /// Cancelling a job cancels what depends on it, directly or through
    /// another, each naming it; an unrelated job stays queued.
    fn cancel_takes_the_dependents_with_it_and_counts_them(q) {
        ok(q, &["enqueue", "part", "--key", "a"], 0);
        ok(q, &["enqueue", "merge", "--key", "b", "--depends-on", "a"], 0);
        ok(q, &["enqueue", "mail", "--key", "c", "--depends-on", "b"], 0);
        ok(q, &["enqueue", "part", "--key", "d"], 0);
        assert_eq!(ok(q, &["cancel", "1"], 0).trim(), "job 1 cancelled, and 2 jobs that depend on it");
        for id in 1..=3 {
            assert_eq!(state_of(q, id), "cancelled", "job {id}");
        }
        assert_eq!(state_of(q, 4), "queued");
        let c = json_of(q, &["show", "3"], 0);
        let why = c["job"]["last_error"].as_str().unwrap();
        assert!(why.contains("\"a\"") && why.contains("cancelled"), "{why}");

        // A waiting job may be cancelled itself.
        ok(q, &["enqueue", "merge", "--key", "e", "--depends-on", "d"], 0);
        ok(q, &["enqueue", "mail", "--key", "f", "--depends-on", "e"], 0);
        let v = json_of(q, &["cancel", "5"], 0);
        assert_eq!(v, json!({"id": 5, "state": "cancelled", "dependents_cancelled": 1}));
        assert_eq!((state_of(q, 4), state_of(q, 6)), ("queued".into(), "cancelled".into()));
        let e = stderr_of(q, &["cancel", "6"], 1);
        assert!(e.contains("cancelled"), "{e}");
    }
}

/// The rows of `workflow`'s text by id: (marked, level, state, needs, key).
fn rows(text: &str) -> Vec<(bool, String, String, String, String, String)> {
    text.lines()
        .skip_while(|l| !l.contains("LEVEL"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .map(|l| {
            let mut w: Vec<&str> = l.split_whitespace().collect();
            let marked = w[0] == ">";
            if marked {
                w.remove(0);
            }
            let [level, id, state, _kind, needs, key] = w[..] else {
                panic!("row {l:?}")
            };
            (
                marked,
                id.into(),
                level.into(),
                state.into(),
                needs.into(),
                key.into(),
            )
        })
        .collect()
}

both! {
    /// A fan-in and what follows it, by level, the job asked about marked;
    /// the same graph as JSON; a lone job and an unknown key said so.
    fn workflow_prints_the_graph_by_level_and_as_json(q) {
        ok(q, &["enqueue", "part", "--key", "a"], 0);
        ok(q, &["enqueue", "part", "--key", "b"], 0);
        ok(q, &["enqueue", "merge", "--key", "c", "--depends-on", "a", "--depends-on", "b"], 0);
        ok(q, &["enqueue", "mail", "--key", "d", "--depends-on", "c"], 0);
        ok(q, &["enqueue", "part", "--key", "x"], 0);

        let text = ok(q, &["workflow", "c"], 0);
        assert_eq!(
            text.lines().next(),
            Some("4 jobs linked by 3 dependencies around job 3 (c), marked >"),
            "{text}"
        );
        let s = |v: &str| v.to_string();
        assert_eq!(
            rows(&text),
            vec![
                (false, s("1"), s("0"), s("queued"), s("-"), s("a")),
                (false, s("2"), s("0"), s("queued"), s("-"), s("b")),
                (true, s("3"), s("1"), s("waiting"), s("1,2"), s("c")),
                (false, s("4"), s("2"), s("waiting"), s("3"), s("d")),
            ],
            "{text}"
        );

        finish(q, "part", json!(null));
        let v = json_of(q, &["workflow", "d"], 0);
        assert_eq!((v["key"].as_str(), v["job_id"].as_i64(), v["truncated"].as_bool()), (Some("d"), Some(4), Some(false)));
        let jobs: Vec<(i64, &str, &str, i64)> = v["jobs"].as_array().unwrap().iter()
            .map(|j| (j["id"].as_i64().unwrap(), j["key"].as_str().unwrap(), j["state"].as_str().unwrap(), j["level"].as_i64().unwrap()))
            .collect();
        assert_eq!(jobs, [(1, "a", "succeeded", 0), (2, "b", "succeeded", 0), (3, "c", "queued", 1), (4, "d", "waiting", 2)]);
        let edges: BTreeSet<(i64, i64)> = v["edges"].as_array().unwrap().iter()
            .map(|e| (e["job"].as_i64().unwrap(), e["depends_on"].as_i64().unwrap()))
            .collect();
        assert_eq!(edges, BTreeSet::from([(3, 1), (3, 2), (4, 3)]));
        assert_eq!(v["jobs"][0]["kind"], "part");

        let alone = ok(q, &["workflow", "x"], 0);
        assert!(alone.starts_with("job 5 (x) has no dependencies and no dependents"), "{alone}");
        assert_eq!(rows(&alone), vec![(true, s("5"), s("0"), s("succeeded"), s("-"), s("x"))]);
        let e = stderr_of(q, &["workflow", "nosuch"], 1);
        assert!(e.contains("no job has the key \"nosuch\""), "{e}");
        assert!(crate::cli::run(q, &["workflow", "nosuch", "--json"]).stdout.is_empty());
    }
}
