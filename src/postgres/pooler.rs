//! A transaction pooler (pgbouncer's `pool_mode = transaction`, the mode
//! managed providers default to) in front of the server: finding one when
//! a queue opens, and what the URL's `options` become behind one. Writes
//! nothing.
//!
//! Behind such a pooler each transaction may run on another server
//! session, so nothing may outlive a transaction: no statement prepared
//! before it (see [`super::conn::Stmt`]), no `SET` (settings are set in
//! each transaction instead), no `LISTEN` (wake-ups poll, or listen on
//! `QueueOptions::with_listen_url`'s direct connection). pgbouncer refuses
//! the `options` startup parameter, so a URL's
//! `options=-csearch_path%3DSCHEMA` is taken out of the startup packet and
//! set in each transaction too.
//!
//! How it is found: the session's server backend is read twice, once
//! before and once while a second connection of ours holds a transaction
//! open. A direct connection, or a session pooler, keeps its backend, and
//! two connections never share one; a transaction pooler lends the second
//! connection the first one's backend, or hands the first's second
//! transaction another one, or makes it wait when it has only one. A busy
//! pooler can hide it from one round (another client takes the backend
//! and gives it back), so the probe runs a few. A pooler's refusal of
//! `options` says there is a pooler, not which mode it pools in.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use postgres::{Client, SimpleQueryMessage};

use super::conn::{read_err, PgConn, Session};
use crate::error::{Error, Result};

/// How long the probe's second connection holds its transaction open.
const HOLD: Duration = Duration::from_secs(1);

/// A wait this long for the probe's read means it waited for the other
/// connection's transaction: only a pooler makes a session wait on an idle
/// transaction of another.
const WAITED: Duration = Duration::from_millis(800);

/// True when `e`, an error of opening a connection, is a pooler's refusal
/// of the `options` startup parameter.
pub(crate) fn refused_options(e: &Error) -> bool {
    e.to_string()
        .contains("unsupported startup parameter: options")
}

/// `url` without its `options` query parameter.
pub(crate) fn without_options(url: &str) -> String {
    let Some((base, query)) = url.split_once('?') else {
        return url.to_string();
    };
    let kept: Vec<&str> = query
        .split('&')
        .filter(|kv| kv.split('=').next() != Some("options"))
        .collect();
    if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    }
}

/// The settings in `options` (`-c name=value`, `-cname=value`,
/// `--name=value`, as libpq takes them), or an error naming what is not
/// one.
pub(crate) fn settings(options: &str) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut words = options.split_whitespace();
    while let Some(w) = words.next() {
        let pair = if w == "-c" {
            words.next().unwrap_or("")
        } else {
            w.strip_prefix("-c")
                .or_else(|| w.strip_prefix("--"))
                .unwrap_or("")
        };
        match pair.split_once('=') {
            Some((n, v)) if !n.is_empty() => out.push((n.replace('-', "_"), v.to_string())),
            _ => {
                return Err(Error::invalid(format!(
                    "the URL's options {options:?} hold {w:?}, which is not a setting \
                     (-c name=value)"
                )))
            }
        }
    }
    Ok(out)
}

/// The server backend a connection's next transaction runs on, read by a
/// simple query (one round trip, no prepared statement, so it is safe
/// behind any pooler).
fn backend(c: &mut Client) -> Result<i64> {
    backend_of(c, "SELECT pg_backend_pid()")
}

fn backend_of(c: &mut Client, sql: &str) -> Result<i64> {
    for m in c.simple_query(sql).map_err(read_err)? {
        if let SimpleQueryMessage::Row(r) = m {
            return r
                .get(0)
                .and_then(|p| p.parse().ok())
                .ok_or_else(|| Error::Internal("pg_backend_pid() answered no number".into()));
        }
    }
    Err(Error::Internal("pg_backend_pid() answered no row".into()))
}

/// Why `first`'s connections go through a transaction pooler, or None
/// when they do not (a direct connection or a session pooler). Opens a
/// second connection of `session` for a moment. Both are bare
/// ([`Session::connect_bare`]): nothing of theirs may stay on a pooler's
/// shared server session.
pub(crate) fn probe(session: &Session, first: &mut PgConn) -> Result<Option<String>> {
    let mut other = session.connect_bare()?;
    // One round can miss a busy pooler (a third client takes the backend
    // between two reads and gives it back); none finds one where there is
    // none, so a few rounds settle it. Across rounds too, each of our
    // connections keeps one backend for its life on a direct connection
    // or behind a session pooler: one that shows another backend in a
    // later round is lent one per transaction.
    let (mut firsts, mut others) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let (found, pids, back) = round(first, other)?;
        if found.is_some() {
            return Ok(found);
        }
        firsts.push(pids.0);
        others.push(pids.1);
        other = back;
    }
    for (who, pids) in [("its first", &firsts), ("its second", &others)] {
        if let Some(changed) = pids.iter().find(|p| **p != pids[0]) {
            return Ok(Some(format!(
                "{who} connection ran on server backend {}, then on {changed}",
                pids[0]
            )));
        }
    }
    Ok(None)
}

/// Rounds of [`probe`] before it concludes there is no transaction pooler:
/// a round costs two round trips on each connection (a few ms in all on a
/// direct one), and under a busy pooler a round can miss it.
const ROUNDS: usize = 32;

/// One round of [`probe`]: `first`'s backend read, then read again while
/// `other` holds a transaction open. Gives `other` back, with the backends
/// the round saw `first` and `other` on.
fn round(first: &mut PgConn, mut other: PgConn) -> Result<(Option<String>, (i64, i64), PgConn)> {
    let before = backend(&mut first.client)?;
    let (held, is_held) = mpsc::channel::<Result<i64>>();
    let (done, is_done) = mpsc::channel::<()>();
    let holder = std::thread::Builder::new()
        .name("litejob-pg-probe".into())
        .spawn(move || {
            // One simple query of two statements: one round trip.
            let pid = backend_of(
                &mut other.client,
                "START TRANSACTION; SELECT pg_backend_pid()",
            );
            let _ = held.send(pid);
            let _ = is_done.recv_timeout(HOLD);
            let _ = other.client.simple_query("ROLLBACK");
            other
        })
        .map_err(Error::Io)?;
    let held_by_other = is_held
        .recv_timeout(HOLD * 10)
        .map_err(|_| Error::Internal("the pooler probe's second connection did not answer".into()))
        .and_then(|r| r);
    let asked = Instant::now();
    let after = held_by_other
        .as_ref()
        .ok()
        .map(|_| backend(&mut first.client));
    let waited = asked.elapsed();
    let _ = done.send(());
    let other = holder
        .join()
        .map_err(|_| Error::Internal("the pooler probe's thread panicked".into()))?;
    let held = held_by_other?;
    let after = after.transpose()?.unwrap_or(before);
    let found = if held == before {
        // Two connections of ours on one backend: only a pooler lends one
        // server session to several clients.
        Some(format!(
            "two of its connections ran on one server backend, {before}"
        ))
    } else if after != before {
        Some(format!(
            "its server session changed between two transactions, from backend {before} to \
             {after}"
        ))
    } else if waited >= WAITED {
        Some(format!(
            "a transaction waited {} ms for another connection's idle transaction",
            waited.as_millis()
        ))
    } else {
        None
    };
    Ok((found, (before, held), other))
}

/// Says once, when a queue opens, that it found a transaction pooler and
/// what litejob does about it.
pub(crate) fn announce(location: &str, why: &str, listen: bool) {
    let wakeups = if listen {
        "wake-ups listen on the direct connection QueueOptions::with_listen_url names"
    } else {
        "wake-ups come from polling every poll_interval (QueueOptions::with_listen_url names a \
         direct connection to LISTEN on)"
    };
    log::info!(
        target: "litejob",
        "{location} goes through a transaction pooler ({why}): statements are prepared inside \
         their transactions, settings are set in each transaction, and {wakeups}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_taken_out_of_the_url_and_read_as_settings() {
        assert_eq!(
            without_options("postgres://u:p@h:6432/db?options=-csearch_path%3Ds1&sslmode=disable"),
            "postgres://u:p@h:6432/db?sslmode=disable"
        );
        assert_eq!(
            without_options("postgres://u@h/db?options=-c%20a%3Db"),
            "postgres://u@h/db"
        );
        assert_eq!(without_options("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(
            settings("-csearch_path=s1,public -c lock_timeout=5s --work-mem=64MB").unwrap(),
            vec![
                ("search_path".to_string(), "s1,public".to_string()),
                ("lock_timeout".to_string(), "5s".to_string()),
                ("work_mem".to_string(), "64MB".to_string()),
            ]
        );
        let e = settings("-x").unwrap_err();
        assert!(e.to_string().contains("not a setting"), "{e}");
    }
}
