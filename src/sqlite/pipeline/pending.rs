//! A run handed to the writer, waiting for its commit.

use std::time::Instant;

use crossbeam_channel::Receiver;

use crate::core::handler::JobContext;
use crate::core::lifecycle::RunEnd;
use crate::core::time::Millis;
use crate::driver::run::{self, RunStart};
use crate::error::Result;
use crate::sqlite::claim;

use super::Pipe;

/// A run handed to the writer, waiting for its commit.
pub(crate) enum Pending {
    /// Started by the worker; its apply step (or failure) is on the writer.
    Running(Running),
    /// An apply-only job whose start and apply were both handed to the
    /// writer at once (start in a light commit, apply after it).
    Starting {
        id: i64,
        kind: String,
        start_rx: Receiver<Result<Option<claim::Started>>>,
        apply_rx: Receiver<Result<RunEnd>>,
        backoff_unit: f64,
        t0: Instant,
    },
}

impl Pending {
    /// Where the run's final answer arrives.
    pub(crate) fn answer(&self) -> &Receiver<Result<RunEnd>> {
        match self {
            Pending::Running(r) => &r.rx,
            Pending::Starting { apply_rx, .. } => apply_rx,
        }
    }

    /// Its answer arrived: finishing it will not block.
    pub(crate) fn is_ready(&self) -> bool {
        !self.answer().is_empty()
    }
}

/// A started run: what its end line needs, and where its commit arrives.
pub(crate) struct Running {
    pub(crate) rx: Receiver<Result<RunEnd>>,
    pub(crate) ctx: JobContext,
    pub(crate) attempt_id: i64,
    pub(crate) backoff_at: Millis,
    pub(crate) t0: Instant,
}

/// The context a handler receives, from its job and its start.
pub(crate) fn context(s: &Pipe, id: i64, kind: &str, st: &claim::Started) -> JobContext {
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
