//! Every SQL statement in the crate's sources, prepared against a fresh
//! migrated file: a misspelt table or column, or a statement the schema no
//! longer fits, fails here rather than on the one path that runs it.
//!
//! The statements are read from the sources themselves, so a new one cannot
//! be left out: every string literal under `src/` (outside unit-test
//! modules) whose first word is an SQL verb. A `format!` template's
//! placeholders are filled from the string constants of its own file (the
//! column lists) or from [`placeholders`] (the SQL built at run time: the
//! claim's rounded LIMIT, the batch insert's rows for each chunk size); a
//! placeholder found in neither fails the test, naming the template. The
//! statements a copy builds from its tables' description ([`built`]) are
//! prepared as the code builds them, in place of their templates.
//!
//! The PostgreSQL backend's statements (`src/postgres/`, its workers in
//! `src/runtime/postgres.rs`, and the demo's app on it in
//! `src/cli/demo/postgres.rs`) are prepared the same way against a fresh
//! PostgreSQL schema, on the server `LITEJOB_TEST_PG` names.
//!
//! Also the fresh file other modules' unit tests open ([`fresh_file`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::core::options::Synchronous;
use crate::sqlite::db::{open_file, ConnConfig};

mod lex;
use lex::{lex, test_modules, Literal};

/// The first words that make a string literal a statement.
const VERBS: &[&str] = &[
    "SELECT",
    "INSERT",
    "UPDATE",
    "DELETE",
    "REPLACE",
    "WITH",
    "CREATE",
    "DROP",
    "ALTER",
    "PRAGMA",
    "BEGIN",
    "COMMIT",
    "ROLLBACK",
    "SAVEPOINT",
    "RELEASE",
    "VACUUM",
    "ANALYZE",
];

/// What a placeholder of a run-time template stands for, by file (a path
/// under `src/`) and name (`""` for `{}`): every value the code can give it.
fn placeholders() -> Vec<(&'static str, &'static str, Vec<String>)> {
    let rows = |n: usize| vec![crate::sqlite::enqueue::ROW_VALUES; n].join(", ");
    vec![
        // The claim's LIMIT: its batch size rounded up to a power of two.
        (
            "sqlite/claim.rs",
            "cap",
            [1, 2, 8, 64, 256, 1024]
                .map(|n: usize| n.to_string())
                .into(),
        ),
        // A batch's multi-row INSERT, one per chunk size.
        (
            "sqlite/enqueue.rs",
            "",
            crate::sqlite::enqueue::ROWS_PER_INSERT.map(rows).into(),
        ),
        ("queue/sqlite.rs", "pages", vec!["1024".into()]),
        // The views a migration drops and creates again.
        (
            "sqlite/schema.rs",
            "v",
            crate::sqlite::schema::VIEWS.map(String::from).into(),
        ),
        (
            "cli/bench/phases.rs",
            "filter",
            vec![String::new(), "AND priority = 0".into()],
        ),
        ("cli/bench/phases.rs", "base", vec!["0".into()]),
        // A session's settings, set in each transaction behind a pooler.
        (
            "postgres/session.rs",
            "",
            vec!["set_config('lock_timeout', '1000ms', true)".into()],
        ),
        ("cli/bench/phases.rs", "kind", vec!["bench.noop".into()]),
    ]
}

/// The files whose statements are built from a description, the copy's
/// tables (`driver::copy::TABLES`): their templates are not expanded, the
/// statements the code builds are prepared instead, every one.
const BUILT: &[&str] = &[
    "driver/copy.rs",
    "sqlite/copy/import.rs",
    "postgres/copy/import.rs",
];

/// The statements a file of [`BUILT`] builds (none when the feature that
/// compiles it is off).
fn built(name: &str) -> Vec<String> {
    #[cfg(feature = "postgres")]
    {
        use crate::driver::copy::{non_empty_sql, TABLES};
        let each = |f: fn(&crate::driver::copy::Table) -> String| TABLES.iter().map(f);
        match name {
            "driver/copy.rs" => each(|t| t.select()).chain([non_empty_sql()]).collect(),
            "sqlite/copy/import.rs" => each(crate::sqlite::copy::insert_sql).collect(),
            "postgres/copy/import.rs" => each(crate::postgres::copy::insert_sql).collect(),
            _ => Vec::new(),
        }
    }
    #[cfg(not(feature = "postgres"))]
    {
        let _ = name;
        Vec::new()
    }
}

/// Every `.rs` file under `dir`, as paths relative to `root`, in order.
fn sources(root: &Path, dir: &Path, found: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            sources(root, &p, found);
        } else if p.extension().is_some_and(|e| e == "rs") {
            found.push(p.strip_prefix(root).unwrap().to_path_buf());
        }
    }
}

fn is_sql(text: &str) -> bool {
    let first = text
        .trim_start()
        .split(|ch: char| !ch.is_ascii_alphabetic())
        .next()
        .unwrap_or("");
    VERBS.contains(&first)
}

/// Fills a template's placeholders; `Err` names one that has no value.
fn expand(
    text: &str,
    file: &str,
    constants: &HashMap<String, String>,
    table: &[(&str, &str, Vec<String>)],
) -> Result<Vec<String>, String> {
    let mut done = vec![String::new()];
    let mut rest = text;
    while let Some(k) = rest.find(['{', '}']) {
        let (lit, tail) = rest.split_at(k);
        done.iter_mut().for_each(|d| d.push_str(lit));
        if tail.starts_with("{{") || tail.starts_with("}}") {
            done.iter_mut().for_each(|d| d.push_str(&tail[..1]));
            rest = &tail[2..];
            continue;
        }
        let end = tail
            .find('}')
            .ok_or_else(|| format!("unclosed {{ in {text:?}"))?;
        let name = tail[1..end].split(':').next().unwrap();
        rest = &tail[end + 1..];
        let values: Vec<String> = match constants.get(name) {
            Some(v) => vec![v.clone()],
            None => table
                .iter()
                .find(|(f, n, _)| *f == file && *n == name)
                .map(|(_, _, v)| v.clone())
                .ok_or_else(|| {
                    format!("no value for {{{name}}}: add it to sql_check::placeholders()")
                })?,
        };
        done = done
            .iter()
            .flat_map(|d| values.iter().map(move |v| format!("{d}{v}")))
            .collect();
    }
    done.iter_mut().for_each(|d| d.push_str(rest));
    Ok(done)
}

/// Prepares each statement of `sql` (a batch may hold several).
fn prepare_all(conn: &rusqlite::Connection, sql: &str) -> rusqlite::Result<usize> {
    use rusqlite::fallible_iterator::FallibleIterator;
    let mut batch = rusqlite::Batch::new(conn, sql);
    let mut n = 0;
    while batch.next()?.is_some() {
        n += 1;
    }
    Ok(n)
}

/// Whether a source file (a path under `src/`) holds PostgreSQL's SQL.
fn is_postgres_source(name: &str) -> bool {
    name.starts_with("postgres/") || name == "cli/demo/postgres.rs"
}

/// Files whose statements run on both engines (the SQLite check takes them
/// as any file outside `postgres/`).
fn is_shared_source(name: &str) -> bool {
    name == "driver/copy.rs" || name == "core/reports/verify/checks.rs"
}

/// `(where, statement)` for every SQL literal of the files `pick` takes,
/// templates expanded; and the problems met on the way.
fn statements(pick: fn(&str) -> bool) -> (Vec<(String, String)>, Vec<String>) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &root, &mut files);
    let table = placeholders();
    let (mut found, mut problems) = (Vec::new(), Vec::new());
    for file in files {
        let name = file.to_string_lossy().replace('\\', "/");
        // Test-only files: this one, and a folder's `tests.rs` (declared
        // `#[cfg(test)] mod tests;`), whose SQL runs on its own tables.
        if name.starts_with("sql_check/") || name.ends_with("/tests.rs") || !pick(&name) {
            continue;
        }
        let lexed = lex(&std::fs::read_to_string(root.join(&file)).unwrap());
        let tests = test_modules(&lexed.code);
        let live: Vec<&Literal> = lexed
            .literals
            .iter()
            .filter(|l| !tests.iter().any(|r| r.contains(&l.at)))
            .collect();
        let constants: HashMap<String, String> = live
            .iter()
            .filter_map(|l| Some((l.constant.clone()?, l.text.clone())))
            .collect();
        if BUILT.contains(&name.as_str()) {
            let at = format!("src/{name} (built)");
            found.extend(built(&name).into_iter().map(|s| (at.clone(), s)));
        }
        for l in live.iter().filter(|l| is_sql(&l.text)) {
            let at = format!("src/{name}:{}", l.line);
            if BUILT.contains(&name.as_str()) && l.template {
                continue;
            }
            if !l.template {
                found.push((at, l.text.clone()));
                continue;
            }
            match expand(&l.text, &name, &constants, &table) {
                Ok(all) => found.extend(all.into_iter().map(|s| (at.clone(), s))),
                Err(e) => problems.push(format!("{at}: {e}")),
            }
        }
    }
    (found, problems)
}

/// A new queue file in a temporary directory, opened and migrated by the
/// crate's own open path, for unit tests that write to it.
pub(crate) fn fresh_file() -> (tempfile::TempDir, rusqlite::Connection) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = ConnConfig {
        synchronous: Synchronous::Full,
        busy_timeout: std::time::Duration::from_secs(5),
    };
    let conn = open_file(&dir.path().join("q.db"), &cfg).unwrap();
    (dir, conn)
}

#[test]
fn every_sql_statement_in_the_sources_prepares_against_a_fresh_file() {
    let (_dir, conn) = fresh_file();
    let (found, mut problems) = statements(|name| !is_postgres_source(name));
    // The tables an application makes (the demo's) before its statements.
    for (at, sql) in found
        .iter()
        .filter(|(_, s)| s.trim_start().starts_with("CREATE"))
    {
        if let Err(e) = conn.execute_batch(sql) {
            problems.push(format!("{at}: {e}\n    {sql}"));
        }
    }
    for (at, sql) in &found {
        match prepare_all(&conn, sql) {
            Ok(0) => problems.push(format!("{at}: no statement in {sql:?}")),
            Ok(_) => {}
            Err(e) => problems.push(format!("{at}: {e}\n    {sql}")),
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The scan sees what it must: named constants, function-local ones,
    // inline SQL, templates filled from a constant and from the table.
    let has = |s: &str| found.iter().any(|(_, f)| f == s);
    assert!(has(crate::sqlite::tx::RUN_SAVEPOINT));
    assert!(has("DELETE FROM processed_jobs WHERE key = ?1"));
    assert!(has("SELECT state FROM outbox WHERE id = ?1"));
    assert!(has(&format!(
        "SELECT {} FROM jobs WHERE id = ?1",
        crate::sqlite::reads::JOB_COLUMNS
    )));
    let batch_inserts = found
        .iter()
        .filter(|(at, s)| {
            at.starts_with("src/sqlite/enqueue.rs") && s.contains("RETURNING idempotency_key, id")
        })
        .count();
    assert_eq!(batch_inserts, crate::sqlite::enqueue::ROWS_PER_INSERT.len());
    assert!(found.len() >= 80, "only {} statements found", found.len());
}

#[cfg(feature = "postgres")]
#[test]
#[cfg_attr(
    not(litejob_test_pg),
    ignore = "needs PostgreSQL: LITEJOB_TEST_PG=postgres://… when the tests are built"
)]
fn every_postgres_statement_in_the_sources_prepares_against_a_fresh_schema() {
    let base = crate::postgres::pg_base();
    let schema = format!("sql_check_{}", std::process::id());
    let mut admin = postgres::Client::connect(&base, postgres::NoTls).unwrap();
    admin
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"
        ))
        .unwrap();
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}options=-csearch_path%3D{schema}");
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    crate::postgres::schema::migrate(&mut crate::postgres::conn::PgConn::direct(
        postgres::Client::connect(&url, postgres::NoTls).unwrap(),
    ))
    .unwrap();
    let (found, mut problems) =
        statements(|name| is_postgres_source(name) || is_shared_source(name));
    // The tables an application makes (the demo's) before its statements.
    for (at, sql) in found
        .iter()
        .filter(|(_, s)| s.trim_start().starts_with("CREATE"))
    {
        if let Err(e) = c.batch_execute(sql) {
            problems.push(format!("{at}: {e}\n    {sql}"));
        }
    }
    for (at, sql) in &found {
        if let Err(e) = c.prepare(sql) {
            problems.push(format!("{at}: {e}\n    {sql}"));
        }
    }
    let _ = admin.batch_execute(&format!("DROP SCHEMA {schema} CASCADE"));
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let has = |s: &str| found.iter().any(|(_, f)| f == s);
    assert!(has(crate::postgres::claim::CLAIM));
    assert!(has(crate::postgres::enqueue::INSERT_MANY));
    // The copy's statements, built from its tables' description.
    for t in crate::driver::copy::TABLES {
        assert!(has(&t.select()) && has(&crate::postgres::copy::insert_sql(t)));
    }
    assert!(found.len() >= 30, "only {} statements found", found.len());
}

#[test]
fn the_scan_reads_continuations_escapes_raw_strings_and_skips_comments_and_tests() {
    let src = r####"
        // "SELECT in a comment"
        /* "DELETE in a /* nested */ comment" */const A: &str = "SELECT 1 \
                         FROM t";
        let q = '"'; let e = '\''; fn f<'a>(x: &'a str) {}
        let s = format!(
            "SELECT {A} WHERE x = '{{}}' AND y = \"q\"\n");
        let r = r#"UPDATE "t" SET a = 1"#;
        #[cfg(test)]
        mod tests { fn t() { let _ = "INSERT INTO nothing"; } }
        let after = "COMMIT";
    "####;
    let lexed = lex(src);
    let tests = test_modules(&lexed.code);
    let live: Vec<_> = lexed
        .literals
        .iter()
        .filter(|l| !tests.iter().any(|r| r.contains(&l.at)))
        .map(|l| (l.text.as_str(), l.template, l.constant.as_deref(), l.line))
        .collect();
    assert_eq!(
        live,
        [
            ("SELECT 1 FROM t", false, Some("A"), 3),
            ("SELECT {A} WHERE x = '{{}}' AND y = \"q\"\n", true, None, 7),
            ("UPDATE \"t\" SET a = 1", false, None, 8),
            ("COMMIT", false, None, 11),
        ]
    );
    let constants = HashMap::from([("A".to_string(), "1".to_string())]);
    assert_eq!(
        expand(live[1].0, "x.rs", &constants, &[]).unwrap(),
        ["SELECT 1 WHERE x = '{}' AND y = \"q\"\n"]
    );
    assert!(expand("SELECT {nope}", "x.rs", &constants, &[])
        .unwrap_err()
        .contains("{nope}"));
}
