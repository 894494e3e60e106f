//! Schedules, periodic jobs: [`Schedule`] (what a runtime declares),
//! [`CatchUp`] (what it does with the slots no process was running for),
//! the key a slot's job carries, and [`Admin::schedules`](crate::admin::Admin::schedules). Each firing is an
//! ordinary job whose key names its slot, `schedule:<name>:<slot in UTC>`,
//! so any number of processes can declare the same schedule: the first to
//! enqueue a slot creates its job, the others are duplicates. Writes
//! `schedules` through its store only.
//!
//! `slots` is the pure arithmetic (cron, time zones, DST, catch-up);
//! `store` the `schedules` table; the runtime's scheduler thread fires them.

use std::time::Duration;

use serde::Serialize;

use crate::core::job::NewJob;
use crate::core::time::Millis;
use crate::error::{Error, Result};

pub(crate) mod slots;

use slots::Slots;

/// Longest schedule name, in bytes: the name and its slot must fit in a key.
const MAX_SCHEDULE_NAME_BYTES: usize = 200;

/// What a runtime fires, at its start, for the slots that came while no
/// process declaring the schedule was running (or while this one was
/// suspended for over a minute). Slots that come while any process runs
/// always fire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum CatchUp {
    /// The latest missed slot only (the default): a daily report missed
    /// for a week runs once, for the last day.
    #[default]
    Latest,
    /// Every missed slot inside this window before the start (at most the
    /// latest 10,000).
    Window(Duration),
    /// None: the schedule goes on from the next slot.
    None,
}

impl CatchUp {
    /// The word stored in `schedules.catch_up`: `latest`, `window`, `none`.
    pub fn as_str(&self) -> &'static str {
        match self {
            CatchUp::Latest => "latest",
            CatchUp::Window(_) => "window",
            CatchUp::None => "none",
        }
    }

    /// The window of [`CatchUp::Window`], in ms (`schedules.catch_up_window_ms`).
    pub(crate) fn window_ms(&self) -> Option<i64> {
        match self {
            CatchUp::Window(w) => Some(i64::try_from(w.as_millis()).unwrap_or(i64::MAX)),
            _ => None,
        }
    }
}

/// A periodic job: every slot of a cron expression enqueues a job of `kind`
/// with the same payload, under the key `schedule:<name>:<slot>` (the slot
/// in UTC, RFC 3339: `schedule:digest:2026-12-01T06:00:00Z`). Declared on a
/// runtime with [`crate::runtime::RuntimeBuilder::schedule_with`]; checked at
/// [`crate::runtime::RuntimeBuilder::start`] (or earlier with [`Schedule::check`]).
///
/// The `schedules` row shows the declaration of the last runtime started
/// with this name. Processes that declare one name differently at the same
/// time (an old and a new version during a deploy) each fire their own
/// slots until the old one stops.
///
/// ```
/// # use litejob::{CatchUp, Schedule};
/// # use std::time::Duration;
/// let digest = Schedule::new("digest", "0 6 * * MON-FRI", "send_digest", &serde_json::json!({}))
///     .with_tz("Europe/Berlin")
///     .with_queue("mail")
///     .with_max_retries(3)
///     .with_catch_up(CatchUp::Window(Duration::from_secs(24 * 3600)));
/// assert!(digest.check().is_ok());
/// ```
#[derive(Debug, Clone)]
pub struct Schedule {
    pub(crate) name: String,
    pub(crate) cron: String,
    pub(crate) kind: String,
    /// The payload as JSON text, or why it could not be serialized.
    pub(crate) payload: std::result::Result<String, String>,
    pub(crate) tz: String,
    pub(crate) queue: String,
    pub(crate) priority: i64,
    pub(crate) max_retries: Option<u32>,
    pub(crate) catch_up: CatchUp,
}

impl Schedule {
    /// A schedule `name` firing `kind` with `payload` at every slot of
    /// `cron`: 5 fields (`minute hour day-of-month month day-of-week`), 6
    /// with seconds first, or `@hourly`, `@daily`, `@weekly`, `@monthly`.
    /// UTC, queue `default`, priority 0, the kind's `max_retries`, catch-up
    /// [`CatchUp::Latest`] unless set.
    pub fn new(
        name: impl Into<String>,
        cron: impl Into<String>,
        kind: impl Into<String>,
        payload: &impl Serialize,
    ) -> Schedule {
        Schedule {
            name: name.into(),
            cron: cron.into(),
            kind: kind.into(),
            payload: serde_json::to_string(payload).map_err(|e| e.to_string()),
            tz: "UTC".into(),
            queue: "default".into(),
            priority: 0,
            max_retries: None,
            catch_up: CatchUp::Latest,
        }
    }

    /// The IANA time zone whose wall clock the expression reads (default
    /// `UTC`). A local time that DST skips fires nothing; one it repeats
    /// fires once, at its first occurrence.
    pub fn with_tz(mut self, tz: impl Into<String>) -> Self {
        self.tz = tz.into();
        self
    }

    /// The queue its jobs go to (default `"default"`).
    pub fn with_queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = queue.into();
        self
    }

    /// Its jobs' priority (smaller runs first; default 0).
    pub fn with_priority(mut self, priority: i64) -> Self {
        self.priority = priority;
        self
    }

    /// Its jobs' `max_retries` (default: the kind's, else the queue's).
    pub fn with_max_retries(mut self, n: u32) -> Self {
        self.max_retries = Some(n);
        self
    }

    /// What to fire for the slots missed while no process ran.
    pub fn with_catch_up(mut self, c: CatchUp) -> Self {
        self.catch_up = c;
        self
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Checks the name, the cron expression, the time zone and the payload
    /// without touching any file; [`crate::runtime::RuntimeBuilder::start`] does it
    /// too, and also checks the job against the queue's limits and that the
    /// runtime handles its kind.
    pub fn check(&self) -> Result<()> {
        self.declared().map(|_| ())
    }

    /// The checked declaration.
    pub(crate) fn declared(&self) -> Result<Declared> {
        let name = self.name.as_str();
        if name.trim().is_empty() {
            return Err(Error::invalid("a schedule's name must not be empty"));
        }
        if name.len() > MAX_SCHEDULE_NAME_BYTES {
            return Err(Error::invalid(format!(
                "schedule name is {} bytes, longer than the limit of {MAX_SCHEDULE_NAME_BYTES}",
                name.len()
            )));
        }
        if name.chars().any(char::is_control) {
            return Err(Error::invalid(format!(
                "schedule name {name:?} must not contain control characters"
            )));
        }
        let in_schedule = |e: Error| match e {
            Error::InvalidInput(m) => Error::InvalidInput(format!("schedule {name:?}: {m}")),
            other => other,
        };
        if self.kind.trim().is_empty() {
            return Err(in_schedule(Error::invalid("kind must not be empty")));
        }
        let payload = self.payload.clone().map_err(|e| {
            in_schedule(Error::invalid(format!(
                "payload cannot be serialized to JSON: {e}"
            )))
        })?;
        let slots = Slots::parse(&self.cron, &self.tz).map_err(in_schedule)?;
        Ok(Declared {
            schedule: Schedule {
                payload: Ok(payload.clone()),
                ..self.clone()
            },
            payload,
            slots,
        })
    }
}

/// A checked schedule: its expression parsed, its payload serialized.
#[derive(Debug, Clone)]
pub(crate) struct Declared {
    pub(crate) schedule: Schedule,
    pub(crate) payload: String,
    pub(crate) slots: Slots,
}

impl Declared {
    /// The job of one slot, through the normal enqueue path.
    pub(crate) fn job(&self, slot: Millis) -> NewJob {
        let s = &self.schedule;
        let mut job = NewJob::from_json(&s.kind, slot_key(&s.name, slot), self.payload.clone())
            .with_queue(&s.queue)
            .with_priority(s.priority);
        if let Some(n) = s.max_retries {
            job = job.with_max_retries(n);
        }
        // serde_json wrote it when the schedule was declared.
        job.payload_is_serde_output = true;
        job
    }
}

/// One row of `schedules`, as [`Admin::schedules`](crate::admin::Admin::schedules) reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ScheduleRow {
    /// The schedule's name, the middle of its jobs' keys.
    pub name: String,
    /// The cron expression, as declared.
    pub cron: String,
    /// The IANA time zone its expression reads.
    pub tz: String,
    /// The kind of its jobs.
    pub kind: String,
    /// Its jobs' payload (JSON text).
    pub payload: String,
    /// Its jobs' queue.
    pub queue: String,
    /// Its jobs' priority.
    pub priority: i64,
    /// Its jobs' `max_retries`; `None`: the kind's default.
    pub max_retries: Option<i64>,
    /// `latest`, `window` or `none` (see [`crate::core::schedule::CatchUp`]).
    pub catch_up: String,
    /// The window of `window`, in ms.
    pub catch_up_window_ms: Option<i64>,
    /// The latest slot fired (ms since the epoch); `None` before the first.
    pub last_slot_at: Option<Millis>,
    /// The next slot (ms since the epoch); `None` when it has no more.
    pub next_slot_at: Option<Millis>,
    /// When the declaration was last written (a start that changed it).
    pub updated_at: Millis,
}

impl ScheduleRow {
    /// The idempotency key of this schedule's job for `slot`:
    /// `schedule:<name>:<slot in UTC, RFC 3339>`.
    pub fn slot_key(&self, slot: Millis) -> String {
        crate::core::schedule::slot_key(&self.name, slot)
    }

    /// The declaration's fields differ from `d`'s: what changed, for the log.
    pub(crate) fn changes(&self, d: &Declared) -> Vec<String> {
        let s = &d.schedule;
        let mut out = Vec::new();
        let mut field = |what: &str, old: String, new: String| {
            if old != new {
                out.push(format!("{what} {old} → {new}"));
            }
        };
        field("cron", format!("{:?}", self.cron), format!("{:?}", s.cron));
        field("tz", self.tz.clone(), s.tz.clone());
        field("kind", self.kind.clone(), s.kind.clone());
        field("payload", self.payload.clone(), d.payload.clone());
        field("queue", self.queue.clone(), s.queue.clone());
        field(
            "priority",
            self.priority.to_string(),
            s.priority.to_string(),
        );
        field(
            "max_retries",
            format!("{:?}", self.max_retries),
            format!("{:?}", s.max_retries.map(i64::from)),
        );
        field(
            "catch_up",
            format!("{} {:?}", self.catch_up, self.catch_up_window_ms),
            format!("{} {:?}", s.catch_up.as_str(), s.catch_up.window_ms()),
        );
        out
    }
}

/// What a start found in the row it declared.
#[derive(Debug)]
pub(crate) enum Declaration {
    /// No row had the name.
    New,
    /// The row held the same declaration.
    Same(ScheduleRow),
    /// The row held another declaration (what changed), now replaced.
    Changed(ScheduleRow, Vec<String>),
}

impl Declaration {
    /// What a start declaring `d` finds in `before`, the row of its name
    /// (None: there is none).
    pub(crate) fn of(before: Option<ScheduleRow>, d: &Declared) -> Declaration {
        match before {
            None => Declaration::New,
            Some(row) => {
                let changes = row.changes(d);
                if changes.is_empty() {
                    Declaration::Same(row)
                } else {
                    Declaration::Changed(row, changes)
                }
            }
        }
    }

    /// Whether the start writes its declaration: a new row, or the new
    /// declaration of a changed one (the last start wins). The same
    /// declaration is left as it was, its `updated_at` too.
    pub(crate) fn writes(&self) -> bool {
        !matches!(self, Declaration::Same(_))
    }

    /// The row as it was before the start.
    pub(crate) fn before(&self) -> Option<&ScheduleRow> {
        match self {
            Declaration::New => None,
            Declaration::Same(r) | Declaration::Changed(r, _) => Some(r),
        }
    }
}

/// The idempotency key of a slot's job: `schedule:<name>:<slot in UTC>`.
pub(crate) fn slot_key(name: &str, slot: Millis) -> String {
    format!("schedule:{name}:{}", slots::format_slot(slot))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_key_names_the_schedule_and_the_slot_in_utc() {
        // 2026-12-01T06:00:00Z
        assert_eq!(
            slot_key("digest", 1_796_104_800_000),
            "schedule:digest:2026-12-01T06:00:00Z"
        );
    }

    #[test]
    fn a_declaration_is_checked_whole() {
        let ok = Schedule::new("digest", "0 6 * * *", "send_digest", &1);
        assert!(ok.check().is_ok());
        let cases = [
            (Schedule::new("", "0 6 * * *", "k", &1), "name"),
            (Schedule::new("  ", "0 6 * * *", "k", &1), "name"),
            (Schedule::new("a\nb", "0 6 * * *", "k", &1), "control"),
            (
                Schedule::new("x".repeat(201), "0 6 * * *", "k", &1),
                "limit",
            ),
            (Schedule::new("d", "0 6 * * *", "", &1), "kind"),
            (Schedule::new("d", "0 66 * * *", "k", &1), "cron expression"),
            (ok.clone().with_tz("Nowhere/City"), "time zone"),
        ];
        for (s, says) in cases {
            let e = s.check().unwrap_err();
            assert!(matches!(e, Error::InvalidInput(_)), "{s:?}: {e:?}");
            assert!(e.to_string().contains(says), "{s:?}: {e}");
        }
        let bad_payload = Schedule::new(
            "d",
            "0 6 * * *",
            "k",
            &std::collections::HashMap::from([((1, 2), 3)]),
        );
        assert!(bad_payload
            .check()
            .unwrap_err()
            .to_string()
            .contains("payload"));
    }

    /// The row a start of `d` would have written, its slots `last`.
    fn row_of(d: &Declared, last: Option<Millis>) -> ScheduleRow {
        let s = &d.schedule;
        ScheduleRow {
            name: s.name.clone(),
            cron: s.cron.clone(),
            tz: s.tz.clone(),
            kind: s.kind.clone(),
            payload: d.payload.clone(),
            queue: s.queue.clone(),
            priority: s.priority,
            max_retries: s.max_retries.map(i64::from),
            catch_up: s.catch_up.as_str().into(),
            catch_up_window_ms: s.catch_up.window_ms(),
            last_slot_at: last,
            next_slot_at: None,
            updated_at: 5,
        }
    }

    #[test]
    fn a_start_writes_its_declaration_only_when_new_or_changed() {
        let digest = || Schedule::new("digest", "0 6 * * *", "send_digest", &1);
        let d = digest().declared().unwrap();
        let found = Declaration::of(None, &d);
        assert!(matches!(found, Declaration::New) && found.writes());
        assert!(found.before().is_none());

        let same = Declaration::of(Some(row_of(&d, Some(7))), &d);
        assert!(matches!(same, Declaration::Same(_)), "{same:?}");
        assert!(!same.writes());
        assert_eq!(same.before().unwrap().last_slot_at, Some(7));

        let moved = digest().with_tz("Europe/Berlin").with_priority(3);
        let changed = Declaration::of(Some(row_of(&d, Some(7))), &moved.declared().unwrap());
        let Declaration::Changed(before, changes) = &changed else {
            panic!("{changed:?}");
        };
        assert!(changed.writes());
        assert_eq!(before.last_slot_at, Some(7));
        assert_eq!(changes, &["tz UTC → Europe/Berlin", "priority 0 → 3"]);
    }

    #[test]
    fn a_slots_job_carries_the_schedules_options() {
        let d = Schedule::new(
            "digest",
            "0 6 * * *",
            "send_digest",
            &serde_json::json!({"a": 1}),
        )
        .with_queue("mail")
        .with_priority(-2)
        .with_max_retries(4)
        .declared()
        .unwrap();
        let j = d.job(1_796_104_800_000);
        assert_eq!(j.key, "schedule:digest:2026-12-01T06:00:00Z");
        assert_eq!(j.kind, "send_digest");
        assert_eq!(j.queue, "mail");
        assert_eq!(j.priority, -2);
        assert_eq!(j.max_retries, Some(4));
        assert_eq!(j.payload.as_deref(), Ok(r#"{"a":1}"#));
    }
}
