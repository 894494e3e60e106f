//! `litejob queues` and `litejob queue pause|resume|set`: the queue
//! controls, listed and changed. Writes `queues` (and forgets a cleared
//! rate's `queue_starts`) through the `Queue`'s control methods.

use std::collections::BTreeSet;

use clap::{ArgGroup, Subcommand};
use litejob::admin::{AnyQueue, QueueControl, QueueLimits, Rate};
use serde::Serialize;

use super::{cell, cell_cut, CliError, CliResult, Out, Table};

/// Flags of `litejob queues`.
#[derive(Debug, Clone, clap::Args)]
#[command(
    after_help = "Examples:\n  litejob queues\n  litejob queues --json\n\n\
    Every queue that has jobs or controls: paused, its cap on running jobs, its rate limit\n\
    (with the starts counted in the current window), its queued and running jobs."
)]
pub struct QueuesArgs {}

/// Flags of `litejob queue`.
#[derive(Debug, Clone, clap::Args)]
pub struct QueueArgs {
    /// What to change.
    #[command(subcommand)]
    pub action: QueueAction,
}

/// The subcommands of `litejob queue`.
#[derive(Debug, Clone, Subcommand)]
pub enum QueueAction {
    /// Nothing new of the queue starts, in every process on the file
    /// (running jobs finish; enqueues still succeed).
    #[command(after_help = "Examples:\n  litejob queue pause mail\n  \
        litejob queue pause newsletters --create\n\n\
        Every process honours it from its next claim, within one poll interval.")]
    Pause {
        /// The queue: one that a job, a control or a schedule names, unless --create.
        queue: String,
        /// Pause a queue nothing names yet (before its first job).
        #[arg(long)]
        create: bool,
    },
    /// Lift a pause; a cap and a rate stay in force.
    #[command(after_help = "Example:\n  litejob queue resume mail")]
    Resume {
        /// The queue: one that a job, a control or a schedule names.
        queue: String,
    },
    /// Cap the queue's running jobs and limit its starts, across every
    /// process on the file; `none` clears a limit, one not given is kept.
    #[command(
        group(ArgGroup::new("limits").required(true).multiple(true)
            .args(["concurrency", "rate", "partition_concurrency", "partition_rate"])),
        after_help = "Examples:\n  \
        litejob queue set mail --concurrency 2\n  \
        litejob queue set api --rate 100/1m\n  \
        litejob queue set api --concurrency none --rate none\n  \
        litejob queue set reports --create --concurrency 1\n  \
        litejob queue set sync --partition-concurrency 1\n  \
        litejob queue set api --partition-rate 2/1s\n\n\
        --concurrency N: at most N of its jobs running at once (claimed-ahead ones included).\n\
        --rate N/DUR: at most N starts in any window of DUR (500ms, 1s, 1m, 1h, 1d).\n\
        --partition-concurrency, --partition-rate: the same for each partition of the queue\n\
        (enqueue --partition KEY) apart; 1 is one at a time per key."
    )]
    Set {
        /// The queue: one that a job, a control or a schedule names, unless --create.
        queue: String,
        /// Set limits on a queue nothing names yet (before its first job).
        #[arg(long)]
        create: bool,
        /// At most N running at once (N ≥ 1), or `none`.
        #[arg(long, value_name = "N|none", value_parser = parse_concurrency)]
        concurrency: Option<Setting<u32>>,
        /// At most N starts per DUR (`100/1m`), or `none`.
        #[arg(long, value_name = "N/DUR|none", value_parser = parse_rate)]
        rate: Option<Setting<Rate>>,
        /// At most N running at once in each partition (N ≥ 1), or `none`.
        #[arg(long, value_name = "N|none", value_parser = parse_concurrency)]
        partition_concurrency: Option<Setting<u32>>,
        /// At most N starts per DUR in each partition (`2/1s`), or `none`.
        #[arg(long, value_name = "N/DUR|none", value_parser = parse_rate)]
        partition_rate: Option<Setting<Rate>>,
    },
}

/// A limit typed on the command line: a value, or `none` to clear it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting<T> {
    /// `none`.
    Clear,
    /// A value.
    Set(T),
}

/// Parses `--concurrency`: a whole number ≥ 1, or `none`.
pub fn parse_concurrency(s: &str) -> Result<Setting<u32>, String> {
    if s == "none" {
        return Ok(Setting::Clear);
    }
    match s.parse::<u32>() {
        Ok(0) => {
            Err("a cap of 0 would stop the queue: use `litejob queue pause`, or at least 1".into())
        }
        Ok(n) => Ok(Setting::Set(n)),
        Err(_) => Err(format!(
            "bad cap {s:?}: use a whole number of running jobs (at least 1), or none"
        )),
    }
}

/// Parses `--rate`: `N/DUR` (at least 1 start, a window of at least 1 ms),
/// or `none`.
pub fn parse_rate(s: &str) -> Result<Setting<Rate>, String> {
    if s == "none" {
        return Ok(Setting::Clear);
    }
    let bad = || format!("bad rate {s:?}: use N/DUR, like 100/1m or 20/1s, or none");
    let (n, dur) = s.split_once('/').ok_or_else(bad)?;
    let n: u32 = n.trim().parse().map_err(|_| bad())?;
    let window = super::time::parse_duration(dur)?;
    Rate::new(n, window).map(Setting::Set).map_err(|e| match e {
        litejob::Error::InvalidInput(m) => format!("bad rate {s:?}: {m}"),
        other => format!("bad rate {s:?}: {other}"),
    })
}

/// One queue in `--json` (see docs/json.md).
#[derive(Serialize)]
struct List<'a> {
    queues: &'a [QueueControl],
}

/// `litejob queues`.
pub fn queues(queue: &AnyQueue, _a: &QueuesArgs, json: bool, out: &mut Out) -> CliResult {
    let all = queue.admin().queue_controls()?;
    if json {
        return out.json(&List { queues: &all });
    }
    if all.is_empty() {
        return out.line("no queues: no jobs and no controls yet");
    }
    let mut t = Table::new(&[
        "QUEUED",
        "RUNNING",
        "PAUSED",
        "CONCURRENCY",
        "RATE",
        "IN WINDOW",
        "PER PARTITION",
        "PARTITIONS AT LIMIT",
        "QUEUE",
    ]);
    for q in &all {
        t.row(vec![
            q.queued.to_string(),
            q.running.to_string(),
            if q.paused { "yes" } else { "no" }.into(),
            q.concurrency.map_or("-".into(), |n| n.to_string()),
            q.rate.map_or("-".into(), |r| r.to_string()),
            q.started_in_window.map_or("-".into(), |n| n.to_string()),
            per_partition(q),
            at_limit(q),
            cell_cut(&q.name, 80),
        ]);
    }
    out.table(&t)
}

/// `litejob queue pause|resume|set`.
pub fn queue_cmd(queue: &AnyQueue, a: &QueueArgs, json: bool, out: &mut Out) -> CliResult {
    let name = match &a.action {
        QueueAction::Pause { queue: q, create } => {
            known(queue, q, Some(*create))?;
            queue.admin().pause_queue(q)?;
            q
        }
        QueueAction::Resume { queue: q } => {
            known(queue, q, None)?;
            queue.admin().resume_queue(q)?;
            q
        }
        QueueAction::Set {
            queue: q,
            create,
            concurrency,
            rate,
            partition_concurrency,
            partition_rate,
        } => {
            known(queue, q, Some(*create))?;
            let mut l = QueueLimits::new();
            l = match concurrency {
                Some(Setting::Set(n)) => l.concurrency(*n),
                Some(Setting::Clear) => l.no_concurrency(),
                None => l,
            };
            l = match rate {
                Some(Setting::Set(r)) => l.rate(*r),
                Some(Setting::Clear) => l.no_rate(),
                None => l,
            };
            l = match partition_concurrency {
                Some(Setting::Set(n)) => l.partition_concurrency(*n),
                Some(Setting::Clear) => l.no_partition_concurrency(),
                None => l,
            };
            l = match partition_rate {
                Some(Setting::Set(r)) => l.partition_rate(*r),
                Some(Setting::Clear) => l.no_partition_rate(),
                None => l,
            };
            queue.admin().set_queue_limits(q, l)?;
            q
        }
    };
    let after = queue
        .admin()
        .queue_controls()?
        .into_iter()
        .find(|c| &c.name == name);
    if json {
        return match &after {
            Some(c) => out.json(c),
            None => out.json(&Uncontrolled {
                name,
                paused: false,
                concurrency: None,
                rate: None,
                rate_limit: None,
                rate_window_ms: None,
                queued: 0,
                running: 0,
                started_in_window: None,
                partition_concurrency: None,
                partition_rate: None,
                partitions_at_limit: Vec::new(),
                partitions_at_limit_count: 0,
                updated_at: None,
            }),
        };
    }
    out.line(format!(
        "queue {}: {}",
        cell(name),
        after
            .as_ref()
            .map_or_else(|| "no controls".to_string(), describe)
    ))
}

/// Refuses a queue that no job, control or schedule names, unless
/// `--create` was given (`create` is None for a command without it): a
/// typo (`queue pause defualt`) would otherwise write a control nobody
/// reads and answer "paused" while the real queue runs on.
fn known(queue: &AnyQueue, name: &str, create: Option<bool>) -> CliResult {
    if create == Some(true) {
        return Ok(());
    }
    let mut names: BTreeSet<String> = queue
        .admin()
        .queue_controls()?
        .into_iter()
        .map(|c| c.name)
        .collect();
    names.extend(queue.admin().schedules()?.into_iter().map(|s| s.queue));
    if names.contains(name) {
        return Ok(());
    }
    const SHOWN: usize = 20;
    let mut list: Vec<String> = names.iter().take(SHOWN).map(|n| cell_cut(n, 80)).collect();
    if names.len() > SHOWN {
        list.push(format!("and {} more (litejob queues)", names.len() - SHOWN));
    }
    let known = if list.is_empty() {
        "none yet".to_string()
    } else {
        list.join(", ")
    };
    let hint = if create.is_some() {
        " (--create sets controls on a queue before its first job)"
    } else {
        ""
    };
    Err(CliError::Input(format!(
        "no queue {name:?}: no job, control or schedule names it; known queues: {known}{hint}"
    )))
}

/// A queue with no jobs and no controls, as `--json` shows any queue.
#[derive(Serialize)]
struct Uncontrolled<'a> {
    name: &'a str,
    paused: bool,
    concurrency: Option<u32>,
    rate: Option<String>,
    rate_limit: Option<u32>,
    rate_window_ms: Option<i64>,
    queued: i64,
    running: i64,
    started_in_window: Option<i64>,
    partition_concurrency: Option<u32>,
    partition_rate: Option<String>,
    partitions_at_limit: Vec<String>,
    partitions_at_limit_count: i64,
    updated_at: Option<i64>,
}

/// A queue's limits per partition, for its row: `1 running, 2/1s`, or `-`.
fn per_partition(q: &QueueControl) -> String {
    let mut parts = Vec::new();
    if let Some(n) = q.partition_concurrency {
        parts.push(format!("{n} running"));
    }
    if let Some(r) = q.partition_rate {
        parts.push(r.to_string());
    }
    if parts.is_empty() {
        return "-".into();
    }
    parts.join(", ")
}

/// The partitions at their limit, for people: `2: shop:1 (1 running),
/// shop:7 (1 running)`, the first few of them; `-` without partition limits.
pub fn at_limit(q: &QueueControl) -> String {
    if q.partition_concurrency.is_none() && q.partition_rate.is_none() {
        return "-".into();
    }
    const SHOWN: usize = 3;
    let mut list: Vec<String> = q
        .partitions_at_limit
        .iter()
        .take(SHOWN)
        .map(|p| match p.started_in_window {
            Some(n) if q.partition_concurrency.is_none() => {
                format!("{} ({n} in the window)", cell_cut(&p.key, 40))
            }
            _ => format!("{} ({} running)", cell_cut(&p.key, 40), p.running),
        })
        .collect();
    if q.partitions_at_limit_count as usize > list.len() {
        list.push("…".into());
    }
    if list.is_empty() {
        return "0".into();
    }
    format!("{}: {}", q.partitions_at_limit_count, list.join(", "))
}

/// The controls in force and the load they count, for people: `paused;
/// at most 2 running (1 now); at most 100 starts per 1m (7 in the
/// window)`, or `no controls`.
pub fn describe(q: &QueueControl) -> String {
    let mut parts = Vec::new();
    if q.paused {
        parts.push("paused".to_string());
    }
    if let Some(n) = q.concurrency {
        parts.push(format!("at most {n} running ({} now)", q.running));
    }
    if let Some(r) = q.rate {
        let text = r.to_string();
        let window = text.split_once('/').map_or("", |(_, w)| w);
        parts.push(format!(
            "at most {} starts per {window} ({} in the window)",
            r.limit(),
            q.started_in_window.unwrap_or(0)
        ));
    }
    if let Some(n) = q.partition_concurrency {
        parts.push(format!("at most {n} running per partition"));
    }
    if let Some(r) = q.partition_rate {
        let text = r.to_string();
        let window = text.split_once('/').map_or("", |(_, w)| w);
        parts.push(format!(
            "at most {} starts per {window} per partition",
            r.limit()
        ));
    }
    if q.partitions_at_limit_count > 0 {
        parts.push(format!(
            "{} partitions at their limit",
            q.partitions_at_limit_count
        ));
    }
    if parts.is_empty() {
        return "no controls".into();
    }
    parts.join("; ")
}

/// Why a queued job that is due waits on its queue's controls, or None:
/// `queue mail is paused`, `queue mail is at its cap (2 of 2 running)`,
/// `queue api's rate 20/1s is used up (20 starts in the window)`, and for
/// a job of `partition`, `partition shop:42 of queue api is at its limit
/// (1 running)`.
pub fn waiting(q: &QueueControl, partition: Option<&str>) -> Option<String> {
    let name = cell(&q.name);
    if q.paused {
        return Some(format!(
            "queue {name} is paused (litejob queue resume {name})"
        ));
    }
    if let Some(p) = partition.and_then(|p| q.partitions_at_limit.iter().find(|f| f.key == p)) {
        let cap_full = q
            .partition_concurrency
            .is_some_and(|n| p.running >= i64::from(n));
        return Some(match (cap_full, q.partition_rate, p.started_in_window) {
            (false, Some(r), Some(n)) => format!(
                "partition {} of queue {name} is at its rate limit {r} ({n} starts in the window)",
                cell(&p.key)
            ),
            _ => format!(
                "partition {} of queue {name} is at its limit ({} running)",
                cell(&p.key),
                p.running
            ),
        });
    }
    if let Some(n) = q.concurrency {
        if q.running >= i64::from(n) {
            return Some(format!(
                "queue {name} is at its cap ({} of {n} running)",
                q.running
            ));
        }
    }
    if let (Some(r), Some(started)) = (q.rate, q.started_in_window) {
        if started >= i64::from(r.limit()) {
            return Some(format!(
                "queue {name}'s rate {r} is used up ({started} starts in the window)"
            ));
        }
    }
    None
}
