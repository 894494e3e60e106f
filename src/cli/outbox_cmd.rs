//! `litejob outbox`: list outbox rows, and `outbox retry ID` to requeue a
//! dead one. Writes `outbox` (retry only) through `Queue::retry_outbox`.

use litejob::admin::AnyQueue;
use litejob::{OutboxRow, OutboxState};
use serde::Serialize;

use super::{cell_cut, when, CliResult, Out, Table};

/// Flags of `litejob outbox`.
#[derive(Debug, Clone, clap::Args)]
#[command(
    args_conflicts_with_subcommands = true,
    after_help = "Examples:\n  \
    litejob outbox --state dead\n  \
    litejob outbox retry 17"
)]
pub struct OutboxArgs {
    /// `retry ID`, or nothing to list.
    #[command(subcommand)]
    pub action: Option<OutboxAction>,
    /// Only rows in this state: pending, sending, sent, dead.
    #[arg(long, value_parser = super::parse_outbox_state)]
    pub state: Option<OutboxState>,
    /// At most this many, newest first.
    #[arg(long, default_value_t = 100)]
    pub limit: u32,
}

/// Subcommands of `litejob outbox`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum OutboxAction {
    /// Requeue a dead outbox row with a fresh attempt budget.
    #[command(after_help = "Example:\n  litejob outbox retry 17")]
    Retry {
        /// The outbox row id.
        id: i64,
    },
}

#[derive(Serialize)]
struct OutboxList<'a> {
    outbox: &'a [OutboxRow],
}

#[derive(Serialize)]
struct Retried {
    id: i64,
    state: &'static str,
}

/// `litejob outbox [--state S]` and `litejob outbox retry ID`.
pub fn outbox(queue: &AnyQueue, a: &OutboxArgs, json: bool, out: &mut Out) -> CliResult {
    if let Some(OutboxAction::Retry { id }) = &a.action {
        let id = *id;
        // A row that is not dead is refused by the library, whose error
        // says so (exit 1).
        queue.admin().retry_outbox(id)?;
        if json {
            return out.json(&Retried {
                id,
                state: "pending",
            });
        }
        return out.line(format!("outbox {id} requeued (pending)"));
    }
    let rows = queue.outbox(a.state, a.limit)?;
    if json {
        return out.json(&OutboxList { outbox: &rows });
    }
    if rows.is_empty() {
        return out.line("no outbox rows");
    }
    let mut t = Table::new(&[
        "ID",
        "STATE",
        "KIND",
        "ATTEMPTS",
        "JOB",
        "CREATED",
        "NEXT/SENT",
        "KEY",
        "LAST ERROR",
    ]);
    for r in &rows {
        t.row(vec![
            r.id.to_string(),
            r.state.to_string(),
            cell_cut(&r.kind, 32),
            format!("{}/{}", r.attempts, r.max_attempts),
            r.job_id.map_or("-".into(), |j| j.to_string()),
            when(Some(r.created_at)),
            match r.state {
                OutboxState::Sent => when(r.sent_at),
                OutboxState::Pending => when(Some(r.next_attempt_at)),
                _ => "-".into(),
            },
            cell_cut(&r.key, 48),
            r.last_error
                .as_deref()
                .map_or("-".into(), |e| cell_cut(e, 80)),
        ]);
    }
    out.table(&t)
}
