//! `litejob schedules`: every schedule declared on the file, with its last
//! fired slot and its next one. Reads only; writes no table (the runtimes
//! that declare schedules write their rows).

use litejob::admin::{AnyQueue, ScheduleRow};
use serde::Serialize;

use super::{cell, cell_cut, when, CliResult, Out, Table};

/// Flags of `litejob schedules`.
#[derive(Debug, Clone, clap::Args)]
#[command(
    after_help = "Examples:\n  litejob schedules\n  litejob schedules --json\n\n\
    A slot's job has the key schedule:<name>:<slot in UTC>, e.g.\n  \
    litejob explain schedule:digest:2026-12-01T06:00:00Z"
)]
pub struct SchedulesArgs {}

/// One schedule in `--json`: the row's fields.
#[derive(Serialize)]
struct Entry<'a> {
    name: &'a str,
    cron: &'a str,
    tz: &'a str,
    kind: &'a str,
    last_slot_at: Option<i64>,
    next_slot_at: Option<i64>,
    payload: &'a str,
    queue: &'a str,
    priority: i64,
    max_retries: Option<i64>,
    catch_up: &'a str,
    catch_up_window_ms: Option<i64>,
    updated_at: i64,
}

impl<'a> From<&'a ScheduleRow> for Entry<'a> {
    fn from(r: &'a ScheduleRow) -> Self {
        Entry {
            name: &r.name,
            cron: &r.cron,
            tz: &r.tz,
            kind: &r.kind,
            last_slot_at: r.last_slot_at,
            next_slot_at: r.next_slot_at,
            payload: &r.payload,
            queue: &r.queue,
            priority: r.priority,
            max_retries: r.max_retries,
            catch_up: &r.catch_up,
            catch_up_window_ms: r.catch_up_window_ms,
            updated_at: r.updated_at,
        }
    }
}

#[derive(Serialize)]
struct List<'a> {
    schedules: Vec<Entry<'a>>,
}

/// `litejob schedules`.
pub fn schedules(queue: &AnyQueue, _a: &SchedulesArgs, json: bool, out: &mut Out) -> CliResult {
    let rows = queue.admin().schedules()?;
    if json {
        return out.json(&List {
            schedules: rows.iter().map(Entry::from).collect(),
        });
    }
    if rows.is_empty() {
        return out.line("no schedules");
    }
    let mut t = Table::new(&["NAME", "CRON", "TZ", "KIND", "LAST SLOT", "NEXT SLOT"]);
    for r in &rows {
        t.row(vec![
            cell_cut(&r.name, 40),
            cell_cut(&r.cron, 32),
            cell(&r.tz),
            cell_cut(&r.kind, 32),
            when(r.last_slot_at),
            when(r.next_slot_at),
        ]);
    }
    out.table(&t)
}
