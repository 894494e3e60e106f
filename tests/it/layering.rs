//! The library's parts stay in layers, with no circle between them: a core
//! of engine-free types and decisions that names no database crate, the
//! driver boundary, the two engines side by side (neither reaching into
//! the other), the facade, the runtime. A file may use its own part and
//! the parts below it; the crate root (`lib.rs`) and the SQL check (a test
//! of every engine's statements) may use any.

use std::collections::BTreeSet;
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

/// The crate's parts a file's code names: `crate::x…` and the names in a
/// `use crate::{x, y…}`.
fn named_parts(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    out.insert(name);
                }
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            out.insert(name);
        }
    }
    out
}

it! {
    fn the_library_s_parts_form_layers_without_a_circle() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        sources(&src, &mut files);
        let parts: BTreeSet<&str> = LAYERS.iter().map(|(p, _)| *p).collect();
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
            for to in named_parts(&code(&text)) {
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
