//! The two engines' folders mirror each other: a reader who knows one
//! finds the same concern under the same file name in the other. A module
//! (a file, or a folder) that one engine has and the other not is listed
//! here as that engine's own, with its reason; so a file added to one
//! engine alone is either mirrored or listed.

use std::collections::BTreeMap;
use std::path::Path;

/// The concern files only SQLite's engine has, each with why the other
/// has none.
const SQLITE_ONLY: &[(&str, &str)] = &[
    (
        "writer",
        "the file's one write connection and its thread: group commit, the WAL's fsync",
    ),
    ("db", "opening the file's connections and its reader pool"),
    (
        "checkpoint",
        "the WAL's checkpoints, which a server runs for itself",
    ),
    (
        "backup",
        "a consistent copy of the file while it is written; a server has its own tools",
    ),
];

/// The concern files only PostgreSQL's engine has, each with why the file
/// has none.
const POSTGRES_ONLY: &[(&str, &str)] = &[
    (
        "session",
        "how a connection to the server opens: its URL, TLS, settings",
    ),
    ("conn", "a connection to a server, its statements and rows"),
    (
        "stmt",
        "statements prepared, or unnamed behind a transaction pooler",
    ),
    (
        "pool",
        "the pool of connections to the server (a file's readers are in db)",
    ),
    ("errors", "how the server's errors become litejob's"),
    (
        "reach",
        "one thread of the process tries the server while it is away",
    ),
    (
        "pooler",
        "a transaction pooler (pgbouncer) between litejob and the server",
    ),
    ("tls", "an encrypted connection, as the URL's sslmode says"),
    (
        "group",
        "producers on many connections inserted in one statement (the file's writer groups its callers itself)",
    ),
    (
        "notify",
        "LISTEN/NOTIFY wake-ups across machines, and the server's clock",
    ),
];

/// The folders both engines have whose files are each engine's own.
const OWN_INSIDE: &[(&str, &str)] = &[(
    "pipeline",
    "each engine runs jobs its own way: a supervisor and workers on the file's writer, a worker per connection on PostgreSQL",
)];

/// The modules of an engine's folder: its files' stems and its folders'
/// names (a module's own folder, `claim/` beside `claim.rs`, is the same
/// module), without `mod.rs` and the tests beside the code.
fn modules(dir: &Path) -> BTreeMap<String, bool> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let is_dir = p.is_dir();
        if !is_dir && p.extension().is_none_or(|x| x != "rs") {
            continue;
        }
        let name = p.file_stem().unwrap().to_string_lossy().to_string();
        if name == "mod" || name == "tests" {
            continue;
        }
        *out.entry(name).or_insert(false) |= is_dir;
    }
    out
}

/// Whether `src/<engine>/<module>` is a module: a file or a folder.
fn has_module(src: &Path, engine: &str, module: &str) -> bool {
    let p = src.join(engine).join(module);
    p.is_dir() || p.with_extension("rs").is_file()
}

/// The modules of `a` (`at` under `src/a/`) that `b` has not, unless
/// `only_a` lists them (as paths under the engine's folder); the folders
/// both have are compared inside, but for [`OWN_INSIDE`]'s.
fn one_sided(src: &Path, at: &str, (a, only_a): (&str, &[(&str, &str)]), b: &str) -> Vec<String> {
    let (mine, theirs) = (
        modules(&src.join(a).join(at)),
        modules(&src.join(b).join(at)),
    );
    let mut wrong = Vec::new();
    for (name, is_dir) in &mine {
        let path = format!("{at}{name}");
        if !theirs.contains_key(name) {
            if !only_a.iter().any(|(o, _)| *o == path) {
                wrong.push(format!(
                    "{a}/{path} has no {b}/{path}: name the concern as the other engine \
                     does, or list it as {a}'s own with its reason"
                ));
            }
        } else if *is_dir && theirs[name] && !OWN_INSIDE.iter().any(|(o, _)| *o == path) {
            wrong.extend(one_sided(src, &format!("{path}/"), (a, only_a), b));
        }
    }
    wrong
}

/// Where the two engines' folders differ: a module one has and the other
/// not, unless listed as that engine's own; and a listed module (or a
/// folder whose files are each engine's own) that is not one engine's
/// alone, or has no reason.
fn unmirrored(src: &Path, a: (&str, &[(&str, &str)]), b: (&str, &[(&str, &str)])) -> Vec<String> {
    let mut wrong = one_sided(src, "", a, b.0);
    wrong.extend(one_sided(src, "", b, a.0));
    for ((this, only), other) in [(a, b.0), (b, a.0)] {
        for (path, why) in only {
            if why.trim().is_empty() {
                wrong.push(format!(
                    "{this}/{path} is listed as {this}'s own without a reason"
                ));
            }
            if !has_module(src, this, path) || has_module(src, other, path) {
                wrong.push(format!(
                    "{this}/{path} is listed as {this}'s own, but it is not"
                ));
            }
        }
    }
    for (path, why) in OWN_INSIDE {
        if why.trim().is_empty() || !has_module(src, a.0, path) || !has_module(src, b.0, path) {
            wrong.push(format!(
                "{path}/ is listed as a folder both engines have, each its own way, \
                 but it is not, or has no reason"
            ));
        }
    }
    wrong
}

it! {
    fn the_two_engines_name_each_concern_with_the_same_file() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let wrong = unmirrored(&src, ("sqlite", SQLITE_ONLY), ("postgres", POSTGRES_ONLY));
        assert!(
            wrong.is_empty(),
            "the engine folders differ:\n{}",
            wrong.join("\n")
        );
    }
}
