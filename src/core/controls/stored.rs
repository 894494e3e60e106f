//! Queue controls as a `queues` row holds them, and what the engines read
//! and write with it: a row's columns and the limits they make
//! ([`Columns`]), what an operator's change writes ([`Changed`]), a
//! controlled queue as one read found it, and the listing of every queue
//! ([`listing`]). The same on both engines. Writes no table.

use std::collections::{BTreeMap, HashMap};

use super::{partitions_at_limit, Limits, Load, QueueControl, QueueLimits, Rate};
use crate::core::time::Millis;

/// The limit columns of a `queues` row, in the table's terms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Columns {
    pub paused: bool,
    pub concurrency: Option<i64>,
    pub rate_limit: Option<i64>,
    pub rate_window_ms: Option<i64>,
    pub partition_concurrency: Option<i64>,
    pub partition_rate_limit: Option<i64>,
    pub partition_rate_window_ms: Option<i64>,
}

impl Columns {
    /// The limits a row holds. A cap under 1, or a rate the columns do not
    /// make (a row written by hand), is no limit.
    pub(crate) fn limits(&self) -> Limits {
        let cap = |n: Option<i64>| n.and_then(|n| u32::try_from(n).ok()).filter(|&n| n >= 1);
        Limits {
            paused: self.paused,
            concurrency: cap(self.concurrency),
            rate: Rate::from_columns(self.rate_limit, self.rate_window_ms),
            partition_concurrency: cap(self.partition_concurrency),
            partition_rate: Rate::from_columns(
                self.partition_rate_limit,
                self.partition_rate_window_ms,
            ),
        }
    }
}

impl Limits {
    /// The row's columns for these limits.
    pub(crate) fn columns(&self) -> Columns {
        Columns {
            paused: self.paused,
            concurrency: self.concurrency.map(i64::from),
            rate_limit: self.rate.map(|r| i64::from(r.limit())),
            rate_window_ms: self.rate.map(|r| r.window_ms()),
            partition_concurrency: self.partition_concurrency.map(i64::from),
            partition_rate_limit: self.partition_rate.map(|r| i64::from(r.limit())),
            partition_rate_window_ms: self.partition_rate.map(|r| r.window_ms()),
        }
    }
}

/// What an operator's change to a queue writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Changed {
    /// The limits in force after it.
    pub next: Limits,
    /// The queue's row: None when nothing is left in force (the row is
    /// deleted).
    pub row: Option<Columns>,
    /// Its last rate was cleared: the starts counted for it are deleted.
    pub forget_starts: bool,
}

impl Changed {
    /// What a change (`paused`: Some to set it; `limits`: the limits to
    /// set, clear or keep) of a queue whose row holds `current` writes.
    pub(crate) fn of(current: Limits, paused: Option<bool>, limits: &QueueLimits) -> Changed {
        let next = current.changed(paused, limits);
        Changed {
            next,
            row: (!next.is_empty()).then(|| next.columns()),
            forget_starts: !next.rated() && current.rated(),
        }
    }
}

impl QueueControl {
    /// A controlled queue as one read found it: its row's `limits`,
    /// changed at `updated_at`; `started`, its starts in the rate's window
    /// (shown under a rate only); `partitions`, the load of each of its
    /// partitions with one (read under partition limits only), of which
    /// at most `listed` at their limit are named.
    pub(crate) fn found(
        name: &str,
        limits: &Limits,
        updated_at: Millis,
        started: i64,
        partitions: HashMap<String, Load>,
        listed: usize,
    ) -> QueueControl {
        let mut q = QueueControl::with_limits(name, limits, updated_at);
        q.started_in_window = limits.rate.map(|_| started);
        (q.partitions_at_limit, q.partitions_at_limit_count) =
            partitions_at_limit(limits, partitions, listed);
        q
    }
}

/// Every queue with jobs or controls, by name: `counts` gives each
/// queue's jobs queued and running, `controlled` the queues with controls
/// in force (their job counts not read).
pub(crate) fn listing(
    counts: impl IntoIterator<Item = (String, i64, i64)>,
    controlled: Vec<QueueControl>,
) -> Vec<QueueControl> {
    let mut all: BTreeMap<String, QueueControl> = BTreeMap::new();
    for (name, queued, running) in counts {
        let q = all
            .entry(name.clone())
            .or_insert_with(|| QueueControl::named(&name));
        q.queued = queued;
        q.running = running;
    }
    for mut c in controlled {
        if let Some(q) = all.get(&c.name) {
            c.queued = q.queued;
            c.running = q.running;
        }
        all.insert(c.name.clone(), c);
    }
    all.into_values().collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn rate(n: u32, secs: u64) -> Rate {
        Rate::new(n, Duration::from_secs(secs)).unwrap()
    }

    #[test]
    fn a_rows_columns_make_its_limits_and_back() {
        let l = Limits {
            paused: true,
            concurrency: Some(2),
            rate: Some(rate(100, 60)),
            partition_concurrency: Some(1),
            partition_rate: Some(rate(5, 1)),
        };
        let c = l.columns();
        assert_eq!(
            (c.concurrency, c.rate_limit, c.rate_window_ms),
            (Some(2), Some(100), Some(60_000))
        );
        assert_eq!(
            (c.partition_concurrency, c.partition_rate_window_ms),
            (Some(1), Some(1000))
        );
        assert_eq!(c.limits(), l);
        // Written by hand: a cap of 0, or a rate without its window, is none.
        let junk = Columns {
            concurrency: Some(0),
            rate_limit: Some(3),
            partition_concurrency: Some(-1),
            partition_rate_window_ms: Some(10),
            ..Columns::default()
        };
        assert_eq!(junk.limits(), Limits::default());
    }

    #[test]
    fn a_change_keeps_a_row_while_anything_is_in_force_and_forgets_a_cleared_rate() {
        let rated = Limits {
            rate: Some(rate(10, 60)),
            ..Limits::default()
        };
        let set = Changed::of(
            Limits::default(),
            None,
            &QueueLimits::new().rate(rate(10, 60)),
        );
        assert_eq!(set.next, rated);
        assert_eq!(set.row, Some(rated.columns()));
        assert!(!set.forget_starts);

        let paused = Changed::of(rated, Some(true), &QueueLimits::new().no_rate());
        assert!(paused.next.paused && paused.next.rate.is_none());
        assert!(paused.row.is_some());
        assert!(paused.forget_starts);

        let cleared = Changed::of(rated, None, &QueueLimits::new().no_rate());
        assert_eq!((cleared.row, cleared.forget_starts), (None, true));

        // A partition rate left in force keeps the starts.
        let both = Limits {
            partition_rate: Some(rate(1, 1)),
            ..rated
        };
        let kept = Changed::of(both, None, &QueueLimits::new().no_rate());
        assert!(!kept.forget_starts);
    }

    #[test]
    fn a_controlled_queue_shows_its_starts_under_a_rate_and_its_full_partitions() {
        let capped = Limits {
            concurrency: Some(3),
            partition_concurrency: Some(1),
            ..Limits::default()
        };
        let loads = HashMap::from([
            (
                "a".to_string(),
                Load {
                    running: 1,
                    ..Load::default()
                },
            ),
            ("b".to_string(), Load::default()),
        ]);
        let q = QueueControl::found("mail", &capped, 9, 4, loads, 20);
        assert_eq!((q.name.as_str(), q.updated_at), ("mail", Some(9)));
        assert_eq!(q.started_in_window, None);
        assert_eq!(q.partitions_at_limit_count, 1);
        assert_eq!(q.partitions_at_limit[0].key, "a");

        let rated = Limits {
            rate: Some(rate(10, 60)),
            ..Limits::default()
        };
        let q = QueueControl::found("mail", &rated, 9, 4, HashMap::new(), 20);
        assert_eq!(q.started_in_window, Some(4));
        assert!(q.partitions_at_limit.is_empty());
    }

    #[test]
    fn the_listing_merges_job_counts_with_the_controlled_queues_by_name() {
        let limits = Limits {
            paused: true,
            ..Limits::default()
        };
        let controlled = vec![
            QueueControl::with_limits("mail", &limits, 1),
            QueueControl::with_limits("idle", &limits, 2),
        ];
        let counts = [("mail".to_string(), 5, 2), ("default".to_string(), 1, 0)];
        let all = listing(counts, controlled);
        let names: Vec<&str> = all.iter().map(|q| q.name.as_str()).collect();
        assert_eq!(names, ["default", "idle", "mail"]);
        assert_eq!((all[0].queued, all[0].in_force()), (1, false));
        assert_eq!((all[1].queued, all[1].running, all[1].paused), (0, 0, true));
        assert_eq!((all[2].queued, all[2].running, all[2].paused), (5, 2, true));
    }
}
