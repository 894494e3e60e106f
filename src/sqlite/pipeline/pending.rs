//! A run handed to the writer, waiting for its commit: what a worker holds
//! of it until it sees its end. Writes no table.

use std::time::Instant;

use crossbeam_channel::Receiver;

use crate::core::handler::JobContext;
use crate::core::lifecycle::RunEnd;
use crate::core::time::Millis;
use crate::driver::run::{self, RunStart};
use crate::error::Result;
use crate::sqlite::claim::Started;

use super::Pipe;

/// A run handed to the writer, waiting for its commit.
pub(crate) enum Pending {
    /// A started run: its apply step (or its failure) is on the writer.
    Run(Run),
    /// An apply-only job a worker started: its start and apply step are on
    /// the writer as one operation, the start answered first.
    Start(Start),
}

impl Pending {
    /// Where the run's final answer arrives.
    pub(crate) fn answer(&self) -> &Receiver<Result<RunEnd>> {
        match self {
            Pending::Run(r) => &r.rx,
            Pending::Start(s) => &s.applied,
        }
    }

    /// Its answer arrived: finishing it will not block.
    pub(crate) fn is_ready(&self) -> bool {
        !self.answer().is_empty()
    }
}

/// An apply-only job's start and apply step, sent to the writer as one
/// operation ([`crate::sqlite::writer::Writer::start`]).
pub(crate) struct Start {
    pub(crate) id: i64,
    pub(crate) kind: String,
    /// What it started, once the start committed; None when nothing was
    /// (the claim was lost, or its queue paused since).
    pub(crate) started: Receiver<Result<Option<Started>>>,
    /// The apply step's answer.
    pub(crate) applied: Receiver<Result<RunEnd>>,
    /// The random draw of its retry's jitter.
    pub(crate) backoff_unit: f64,
    pub(crate) t0: Instant,
}

/// A started run: what its end line needs, and where its commit arrives.
pub(crate) struct Run {
    pub(crate) rx: Receiver<Result<RunEnd>>,
    pub(crate) ctx: JobContext,
    pub(crate) attempt_id: i64,
    pub(crate) backoff_at: Millis,
    pub(crate) t0: Instant,
}

impl Run {
    /// The run `ctx` names, started with attempt `attempt_id` and handed
    /// to the writer at `t0`, whose answer comes to `rx`; when it fails, it
    /// runs again after the backoff from `now` (`unit`: its jitter's random
    /// draw).
    pub(crate) fn new(
        s: &Pipe,
        rx: Receiver<Result<RunEnd>>,
        ctx: JobContext,
        attempt_id: i64,
        (unit, now): (f64, Millis),
        t0: Instant,
    ) -> Run {
        Run {
            rx,
            backoff_at: run::backoff_at(&s.cfg.backoff, &ctx, unit, now),
            ctx,
            attempt_id,
            t0,
        }
    }

    /// The context its handler receives, from its job and its start.
    pub(crate) fn context(s: &Pipe, id: i64, kind: &str, st: &Started) -> JobContext {
        run::context(
            RunStart {
                id,
                kind,
                key: &st.key,
                queue: &st.queue,
                attempt: st.attempt,
                max_attempts: st.max_attempts,
                run_id: st.attempt_id,
                timeout: s.cfg.timeout_for(kind, st.timeout_ms),
            },
            &s.steps,
            s.max_output,
        )
    }
}
