//! The gate a claim on a file passes its candidates through: the controls
//! read in the claim's transaction, the room each limited queue and
//! partition has, and which of them the claim's query must skip. Writes
//! `queue_starts` (pruning a rate's old starts).

use std::collections::HashMap;

use rusqlite::Connection;

use super::{from_row, load, partition_loads, started, PRUNE_STARTS, ROWS};
use crate::core::controls::{frees_at, room, Limits};
use crate::core::time::Millis;
use crate::error::Result;

/// The controls a claim obeys, read in the claim's own transaction, and
/// the room it found in each queue and partition it met.
pub(crate) struct Gate {
    limits: HashMap<String, Limits>,
    /// Room in a limited queue, counted when a candidate of it first came
    /// up, and the oldest start in its rate's window.
    room: HashMap<String, (usize, Option<Millis>)>,
    /// Each partitioned queue's partitions with a load, counted when the
    /// gate was read: the room left in each (a partition not there has a
    /// partition's whole room).
    partitions: HashMap<String, HashMap<String, usize>>,
    /// Queues the claim's query must skip: paused, or with no room left.
    skipped: Vec<String>,
    /// Partitions the claim's query must skip, as `queue` U+001F `key`:
    /// those with no room left.
    skipped_partitions: Vec<String>,
    /// A job was left queued because its queue's or its partition's cap
    /// or rate was full.
    pub held_back: bool,
    /// When a full rate next frees a start.
    pub wake_at: Option<Millis>,
}

/// What [`Gate::choose`] decided about a round of candidates.
pub(crate) enum Chosen<C> {
    /// These, in order.
    Done(Vec<C>),
    /// A queue or a partition ran out of room and its candidates took
    /// places others may fill: ask again without the full ones, whose
    /// chosen candidates (these) the next round must add back, since its
    /// query skips them.
    Again(Vec<C>),
}

/// A partition's name in the claim's list of partitions to skip.
fn partition_id(queue: &str, key: &str) -> String {
    format!("{queue}\u{1f}{key}")
}

impl Gate {
    /// Reads the controls in force at `now`. An empty `queues` table (no
    /// control anywhere) costs this one read of an empty table, nothing
    /// more. A queue with partition limits has its partitions' load
    /// counted here, so the claim's first query already skips the full
    /// ones (a partition with many jobs waiting at its limit would
    /// otherwise fill every round's candidates).
    pub(crate) fn read(conn: &Connection, now: Millis) -> Result<Gate> {
        let mut limits = HashMap::new();
        let mut skipped = Vec::new();
        let mut st = conn.prepare_cached(ROWS)?;
        for row in st.query_map([], from_row)? {
            let (name, l, _) = row?;
            if l.paused {
                skipped.push(name.clone());
            }
            limits.insert(name, l);
        }
        let mut partitions = HashMap::new();
        let mut skipped_partitions = Vec::new();
        for (name, l) in &limits {
            if l.paused || !l.partitioned() {
                continue;
            }
            if let (Some(floor), Some(_)) = (l.prune_floor(now), l.partition_rate) {
                conn.prepare_cached(PRUNE_STARTS)?
                    .execute(rusqlite::params![name, floor])?;
            }
            let mut rooms = HashMap::new();
            for (key, load) in partition_loads(conn, name, l, now)? {
                let r = crate::core::controls::partition_room(l, &load).unwrap_or(usize::MAX);
                if r == 0 {
                    skipped_partitions.push(partition_id(name, &key));
                }
                rooms.insert(key, r);
            }
            partitions.insert(name.clone(), rooms);
        }
        Ok(Gate {
            limits,
            room: HashMap::new(),
            partitions,
            skipped,
            skipped_partitions,
            held_back: false,
            wake_at: None,
        })
    }

    /// No control anywhere: claims go as they always did.
    pub(crate) fn is_open(&self) -> bool {
        self.limits.is_empty()
    }

    /// Some queue has partition limits.
    pub(crate) fn is_partitioned(&self) -> bool {
        !self.partitions.is_empty()
    }

    /// The limits in force on `queue`, if any.
    pub(crate) fn limits(&self, queue: &str) -> Option<&Limits> {
        self.limits.get(queue)
    }

    /// The queues and the partitions to skip, as the JSON lists the
    /// claim's SQL reads; None for an empty one.
    pub(crate) fn skipped_json(&self) -> (Option<String>, Option<String>) {
        let json =
            |v: &Vec<String>| (!v.is_empty()).then(|| serde_json::to_string(v).unwrap_or_default());
        (json(&self.skipped), json(&self.skipped_partitions))
    }

    /// The room left in a limited queue, counted once per claim.
    fn room_in(&mut self, conn: &Connection, queue: &str, now: Millis) -> Result<usize> {
        if let Some(&(r, _)) = self.room.get(queue) {
            return Ok(r);
        }
        let l = self.limits[queue];
        let mut oldest = None;
        if let Some(rate) = l.rate {
            if let Some(floor) = l.prune_floor(now) {
                conn.prepare_cached(PRUNE_STARTS)?
                    .execute(rusqlite::params![queue, floor])?;
            }
            oldest = started(conn, queue, rate, now)?.1;
        }
        let (load, _) = load(conn, queue, &l, now)?;
        let r = room(&l, &load);
        self.room.insert(queue.to_string(), (r, oldest));
        Ok(r)
    }

    /// A rate this claim found or left full frees its next start when its
    /// oldest start leaves the window (one of this claim's, if none is
    /// older): the earliest such moment. A full partition rate is looked
    /// at again a tenth of its window on (its oldest start is not read).
    fn note_full_rates(&mut self, used: &HashMap<String, usize>, now: Millis) {
        for (q, &(room, oldest)) in &self.room {
            let Some(rate) = self.limits.get(q).and_then(|l| l.rate) else {
                continue;
            };
            if used.get(q).copied().unwrap_or(0) >= room {
                let at = frees_at(oldest.unwrap_or(now), rate);
                self.wake_at = Some(self.wake_at.map_or(at, |w| w.min(at)));
            }
        }
        if !self.skipped_partitions.is_empty() {
            for (q, l) in &self.limits {
                if let (Some(rate), true) = (l.partition_rate, self.partitions.contains_key(q)) {
                    let at = now + (rate.window_ms() / 10).max(1);
                    self.wake_at = Some(self.wake_at.map_or(at, |w| w.min(at)));
                }
            }
        }
    }

    /// Whether a candidate of `queue` (in `partition`) is skipped by the
    /// next round's query.
    fn is_skipped(&self, queue: &str, partition: Option<&str>) -> bool {
        self.skipped.iter().any(|s| s == queue)
            || partition.is_some_and(|p| {
                self.partitions.contains_key(queue)
                    && self.skipped_partitions.contains(&partition_id(queue, p))
            })
    }

    /// Takes candidates in their order (priority first) up to `limit`,
    /// each of a limited queue while the queue has room, and each of a
    /// limited partition while the partition has room. `key_of` names a
    /// candidate's queue and partition.
    pub(crate) fn choose<C>(
        &mut self,
        conn: &Connection,
        candidates: Vec<C>,
        limit: usize,
        now: Millis,
        key_of: impl Fn(&C) -> (&str, Option<&str>),
    ) -> Result<Chosen<C>> {
        let mut used: HashMap<String, usize> = HashMap::new();
        // Per round, like `used`: a round asked again is given back the
        // chosen candidates of full partitions, which count again.
        let mut used_in: HashMap<(String, String), usize> = HashMap::new();
        let mut chosen = Vec::with_capacity(candidates.len().min(limit));
        let mut filled = false;
        for c in candidates {
            if chosen.len() == limit {
                break;
            }
            let (q, partition) = key_of(&c);
            let Some(l) = self.limits.get(q).copied().filter(Limits::limited) else {
                chosen.push(c);
                continue;
            };
            if let (Some(p), true) = (partition, l.partitioned()) {
                let room = self
                    .partitions
                    .get(q)
                    .and_then(|rooms| rooms.get(p).copied())
                    .unwrap_or_else(|| crate::core::controls::empty_partition_room(&l));
                let taken = used_in
                    .get(&(q.to_string(), p.to_string()))
                    .copied()
                    .unwrap_or(0);
                if taken >= room {
                    self.held_back = true;
                    let id = partition_id(q, p);
                    if !self.skipped_partitions.contains(&id) {
                        self.skipped_partitions.push(id);
                        filled = true;
                    }
                    continue;
                }
            }
            if l.concurrency.is_some() || l.rate.is_some() {
                let room = self.room_in(conn, q, now)?;
                let n = used.entry(q.to_string()).or_default();
                if *n >= room {
                    self.held_back = true;
                    if !self.skipped.iter().any(|s| s == q) {
                        self.skipped.push(q.to_string());
                        filled = true;
                    }
                    continue;
                }
                *n += 1;
            }
            if let (Some(p), true) = (partition, l.partitioned()) {
                *used_in.entry((q.to_string(), p.to_string())).or_default() += 1;
            }
            chosen.push(c);
        }
        if filled && chosen.len() < limit {
            chosen.retain(|c| {
                let (q, p) = key_of(c);
                self.is_skipped(q, p)
            });
            return Ok(Chosen::Again(chosen));
        }
        self.note_full_rates(&used, now);
        Ok(Chosen::Done(chosen))
    }
}
