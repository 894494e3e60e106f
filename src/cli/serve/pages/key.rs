//! `/keys/<key>`: the `explain` view of one idempotency key — its sentence
//! ("1 event, delivered 10 times, run once"), then the job, the workflow
//! around it, every run, the ledger row and the outbox rows.

use super::super::super::explain::summarize;
use super::super::html::Html;
use super::super::http::{Req, Resp};
use super::super::routes::App;
use super::{error, flash, layout};

/// The key page. A key nothing is known of is 404, with its sentence.
pub fn page(app: &App, req: &Req, key: &str) -> litejob::Result<Resp> {
    let now = super::super::super::time::now_ms();
    let e = app.queue.admin().explain(key)?;
    let sentence = summarize(
        e.job.as_ref(),
        &e.attempts,
        e.ledger.as_ref(),
        &e.outbox,
        now,
    );
    if e.job.is_none() && e.ledger.is_none() {
        return Ok(error(404, &format!("{key}: {sentence}")));
    }
    let mut h = Html::new();
    h.open("h1", &[]).text("Key ");
    h.tag("span", &[("class", "key")], key);
    h.close("h1");
    h.tag("p", &[("class", "sentence"), ("id", "sentence")], &sentence);
    flash(&mut h, req.param("done"));
    let back = format!("/keys/{}", super::super::html::pct(key));
    match &e.job {
        Some(j) => {
            let story = super::job::Story {
                job: j,
                attempts: &e.attempts,
                steps: &e.steps,
                outbox: &e.outbox,
                ledger: e.ledger.as_ref(),
                dependencies: &e.dependencies,
                dependents: &e.dependents,
            };
            super::job::detail(&mut h, app, &story, now, &back)?;
        }
        None => {
            h.raw("<section id=\"ledger\"><h2>Ledger</h2><p>");
            if let Some(l) = &e.ledger {
                h.raw("Work committed ");
                h.time(Some(l.completed_at), now);
                if let Some(by) = l.job_id {
                    h.raw(" by job ").num(by);
                }
                h.raw("; the job row was pruned since.");
            }
            h.raw("</p></section>");
        }
    }
    Ok(layout(app, "Key", "/jobs", now, h))
}
