//! The library's parts stay in layers, with no circle between them: a core
//! of engine-free types and decisions that names no database crate, the
//! driver boundary, the two engines side by side (neither reaching into
//! the other), the facade, the runtime. A file may use its own part and
//! the parts below it; the crate root (`lib.rs`) and the SQL check (a test
//! of every engine's statements) may use any. A part is named by its path
//! (`crate::sqlite::…`) or through an item the crate root re-exports
//! (`crate::AttemptOutcome` is the core's). The two engines' folders
//! mirror each other ([`mirror`]).

mod mirror;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each part, with the parts it may use.
const LAYERS: &[(&str, &[&str])] = &[
    ("error", &[]),
    ("fault", &["error"]),
    ("core", &["error"]),
    ("driver", &["core", "error", "fault"]),
    ("sqlite", &["core", "driver", "error", "fault"]),
    ("postgres", &["core", "driver", "error", "fault"]),
    (
        "queue",
        &["core", "driver", "error", "fault", "sqlite", "postgres"],
    ),
    (
        "runtime",
        &[
            "core", "driver", "error", "fault", "sqlite", "postgres", "queue",
        ],
    ),
    (
        "testing",
        &[
            "core", "driver", "error", "fault", "sqlite", "postgres", "queue", "runtime",
        ],
    ),
];

/// The parts free to use any other.
const ROOTS: &[&str] = &["lib", "sql_check", "main", "cli"];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The part a source file belongs to: its top folder, or its file stem.
fn part(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

/// The code of a file without its comments (doc comments name other parts
/// for the reader, not the compiler).
fn code(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A path of a `use` tree, or of an expression, after `crate::`: its
/// segments, and the name it binds (its last segment, or its `as` alias).
#[derive(Debug, Clone)]
struct UsePath {
    segments: Vec<String>,
    bound: String,
}

fn skip_space(s: &[char], i: &mut usize) {
    while s.get(*i).is_some_and(|c| c.is_whitespace()) {
        *i += 1;
    }
}

fn ident(s: &[char], i: &mut usize) -> String {
    let start = *i;
    while s.get(*i).is_some_and(|c| c.is_alphanumeric() || *c == '_') {
        *i += 1;
    }
    s[start..*i].iter().collect()
}

/// Reads a `use` tree at `i` under `prefix`: `a::b`, `a::{b, c::{d, e}}`,
/// `a as b`, `a::*`. An expression's path (`crate::x::f(..)`) reads the
/// same way and stops where the path does.
fn use_tree(s: &[char], i: &mut usize, prefix: &[String], out: &mut Vec<UsePath>) {
    skip_space(s, i);
    if s.get(*i) == Some(&'{') {
        *i += 1;
        loop {
            skip_space(s, i);
            match s.get(*i) {
                None => return,
                Some('}') => {
                    *i += 1;
                    return;
                }
                Some(',') => *i += 1,
                Some(_) => {
                    let before = *i;
                    use_tree(s, i, prefix, out);
                    if *i == before {
                        *i += 1;
                    }
                }
            }
        }
    }
    let name = ident(s, i);
    if name.is_empty() {
        // A glob (`a::*`): the path so far.
        if let Some(last) = prefix.last() {
            out.push(UsePath {
                segments: prefix.to_vec(),
                bound: last.clone(),
            });
        }
        return;
    }
    let mut segments = prefix.to_vec();
    segments.push(name.clone());
    if s[*i..].starts_with(&[':', ':']) {
        *i += 2;
        return use_tree(s, i, &segments, out);
    }
    let mut bound = name;
    let mut j = *i;
    skip_space(s, &mut j);
    if ident(s, &mut j) == "as" {
        skip_space(s, &mut j);
        let alias = ident(s, &mut j);
        if !alias.is_empty() {
            bound = alias;
            *i = j;
        }
    }
    out.push(UsePath { segments, bound });
}

/// Every path a file's code names after `crate::` (`$crate::` too).
fn crate_paths(code: &str) -> Vec<UsePath> {
    let s: Vec<char> = code.chars().collect();
    let key: Vec<char> = "crate::".chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i + key.len() <= s.len() {
        let word_start = i == 0 || !(s[i - 1].is_alphanumeric() || s[i - 1] == '_');
        if word_start && s[i..].starts_with(&key) {
            i += key.len();
            use_tree(&s, &mut i, &[], &mut out);
        } else {
            i += 1;
        }
    }
    out
}

/// What the crate root (`lib.rs`) re-exports, by the part each item comes
/// from: its items (`crate::AttemptOutcome` is `core`'s), and the items of
/// its inline modules (`crate::admin::Admin` is `queue`'s).
struct Root {
    items: BTreeMap<String, String>,
    modules: BTreeMap<String, BTreeMap<String, String>>,
}

/// The re-exports of one `pub use` statement's text (after `pub use`):
/// the name each binds and the part it comes from; none for another
/// crate's (`::rusqlite`).
fn re_exports(statement: &str) -> Vec<(String, String)> {
    let statement = statement.trim();
    if statement.starts_with("::") {
        return Vec::new();
    }
    let tree = statement.strip_prefix("crate::").unwrap_or(statement);
    let s: Vec<char> = tree.chars().collect();
    let mut paths = Vec::new();
    use_tree(&s, &mut 0, &[], &mut paths);
    paths
        .into_iter()
        .map(|p| (p.bound, p.segments[0].clone()))
        .collect()
}

/// Every `pub use` statement of `code` as `(where it starts, its text)`.
fn pub_uses(code: &str) -> Vec<(usize, &str)> {
    code.match_indices("pub use ")
        .map(|(at, _)| {
            let text = &code[at + "pub use ".len()..];
            (at, &text[..text.find(';').unwrap_or(text.len())])
        })
        .collect()
}

/// The end of the block whose `{` is at `open`.
fn block_end(code: &str, open: usize) -> usize {
    let mut depth = 0;
    for (k, c) in code[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return open + k;
                }
            }
            _ => {}
        }
    }
    code.len()
}

fn root(src: &Path) -> Root {
    let code = code(&std::fs::read_to_string(src.join("lib.rs")).unwrap());
    let mut modules = BTreeMap::new();
    let mut inside = Vec::new();
    for (at, _) in code.match_indices("pub mod ") {
        let rest = &code[at + "pub mod ".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let after = rest[name.len()..].trim_start();
        if !after.starts_with('{') {
            continue;
        }
        let open = code.len() - after.len();
        let end = block_end(&code, open);
        let items: BTreeMap<String, String> = pub_uses(&code[open..end])
            .into_iter()
            .flat_map(|(_, t)| re_exports(t))
            .collect();
        modules.insert(name, items);
        inside.push(open..end);
    }
    let items = pub_uses(&code)
        .into_iter()
        .filter(|(at, _)| !inside.iter().any(|r| r.contains(at)))
        .flat_map(|(_, t)| re_exports(t))
        .collect();
    Root { items, modules }
}

/// The parts a path after `crate::` reaches: the part it names, or the
/// part a root re-export it names comes from (a root module named whole,
/// `crate::admin`, reaches every part its items come from).
fn parts_of(path: &UsePath, root: &Root) -> Vec<String> {
    let first = &path.segments[0];
    if let Some(part) = root.items.get(first) {
        return vec![part.clone()];
    }
    if let Some(items) = root.modules.get(first) {
        return match path.segments.get(1).and_then(|s| items.get(s)) {
            Some(part) => vec![part.clone()],
            None if path.segments.len() == 1 => items.values().cloned().collect(),
            None => Vec::new(),
        };
    }
    vec![first.clone()]
}

/// The crate's parts a file's code names: `crate::x…`, the names in a
/// `use crate::{x, y…}` (nested groups too), and the items the crate root
/// re-exports, read as the part they come from.
fn named_parts(code: &str, root: &Root) -> BTreeSet<String> {
    crate_paths(code)
        .iter()
        .flat_map(|p| parts_of(p, root))
        .collect()
}

it! {
    fn the_library_s_parts_form_layers_without_a_circle() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        sources(&src, &mut files);
        let parts: BTreeSet<&str> = LAYERS.iter().map(|(p, _)| *p).collect();
        let root = root(&src);
        let mut wrong = Vec::new();
        for file in &files {
            let from = part(&src, file);
            if ROOTS.contains(&from.as_str()) {
                continue;
            }
            let allowed = LAYERS
                .iter()
                .find(|(p, _)| *p == from)
                .unwrap_or_else(|| panic!("{}: a part the layers do not place", file.display()))
                .1;
            let text = std::fs::read_to_string(file).unwrap();
            for to in named_parts(&code(&text), &root) {
                if to != from && parts.contains(to.as_str()) && !allowed.contains(&to.as_str()) {
                    wrong.push(format!("{} uses {to}", file.display()));
                }
            }
        }
        assert!(
            wrong.is_empty(),
            "uses across the layers:\n{}",
            wrong.join("\n")
        );
    }
}

it! {
    fn the_core_names_no_database_crate() {
        let core = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/core");
        let mut files = Vec::new();
        sources(&core, &mut files);
        let mut named = Vec::new();
        for file in &files {
            let text = code(&std::fs::read_to_string(file).unwrap());
            for db in ["rusqlite", "postgres::", "r2d2"] {
                if text.contains(db) {
                    named.push(format!("{} names {db}", file.display()));
                }
            }
        }
        assert!(named.is_empty(), "{}", named.join("\n"));
    }
}

it! {
    fn a_part_named_through_the_crate_root_is_the_part_it_comes_from() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let root = root(&src);
        let named = |code: &str| named_parts(code, &root).into_iter().collect::<Vec<_>>();
        assert_eq!(named("use crate::AttemptOutcome;"), ["core"]);
        assert_eq!(named("fn f() -> crate::Result<()> {}"), ["error"]);
        assert_eq!(named("use crate::{Queue, Runtime as R};"), ["queue", "runtime"]);
        assert_eq!(named("use crate::admin::{Admin, Stats};"), ["core", "queue"]);
        assert_eq!(
            named("use crate::{core::{job::Job, time}, sqlite::{db, tx::JobTx}};"),
            ["core", "sqlite"]
        );
        // Another crate, re-exported at the root, is no part of this one.
        assert_eq!(named("use crate::rusqlite::params;"), ["rusqlite"]);
    }
}
