//! `/jobs/<id>`: one job — its facts, payload and output, the workflow
//! around it, the attempts on a time line and in a table with their
//! errors, its durable steps, the ledger row, the outbox rows it wrote
//! with their attempts — and the actions that apply to it. The key page
//! shows the same detail under its sentence.

use litejob::admin::{LedgerEntry, Linked, OutboxEntry};
use litejob::{Attempt, Job, JobState, JobStep, OutboxState};

use super::super::super::time::exact_duration;
use super::super::html::{human_span, pct, url, Html};
use super::super::http::{Req, Resp};
use super::super::routes::App;
use super::super::svg;
use super::{action, badge, error, flash, layout};

/// The job page.
pub fn page(app: &App, req: &Req, id: i64) -> litejob::Result<Resp> {
    let now = super::super::super::time::now_ms();
    let Some(d) = app.queue.admin().job_detail(id)? else {
        return Ok(error(404, &format!("no job with id {id}")));
    };
    let mut h = Html::new();
    h.open("h1", &[]);
    h.text(&format!("Job {id} · {} ", d.job.kind));
    badge(&mut h, d.job.state.as_str());
    h.close("h1");
    flash(&mut h, req.param("done"));
    let back = format!("/jobs/{id}");
    let story = Story {
        job: &d.job,
        attempts: &d.attempts,
        steps: &d.steps,
        outbox: &d.outbox,
        ledger: d.ledger.as_ref(),
        dependencies: &d.dependencies,
        dependents: &d.dependents,
    };
    detail(&mut h, app, &story, now, &back)?;
    Ok(layout(app, &format!("Job {id}"), "/jobs", now, h))
}

/// What a job's page shows of it, as the job page and the key page read
/// it.
pub struct Story<'a> {
    /// The job.
    pub job: &'a Job,
    /// Its runs, oldest first.
    pub attempts: &'a [Attempt],
    /// Its durable steps, in the order they ran.
    pub steps: &'a [JobStep],
    /// The outbox rows it wrote, with their attempts.
    pub outbox: &'a [OutboxEntry],
    /// Its key's ledger row.
    pub ledger: Option<&'a LedgerEntry>,
    /// The jobs it depends on.
    pub dependencies: &'a [Linked],
    /// The jobs that depend on it.
    pub dependents: &'a [Linked],
}

/// A job's whole story; `back` is the page its action forms return to.
/// Reads the workflow around the job when it has one.
pub fn detail(h: &mut Html, app: &App, s: &Story, now: i64, back: &str) -> litejob::Result<()> {
    facts(h, app, s.job, now, back);
    if let Some(o) = &s.job.output {
        h.raw("<section id=\"output\"><h2>Output</h2>");
        h.tag("pre", &[], &pretty(o));
        h.raw("</section>");
    }
    let w = if s.dependencies.is_empty() && s.dependents.is_empty() {
        None
    } else {
        app.queue.admin().workflow(&s.job.idempotency_key)?
    };
    super::workflow::section(h, s.job, s.dependencies, s.dependents, w.as_ref());
    h.raw("<section id=\"attempts\"><h2>Attempts</h2>");
    attempt_table(h, s.attempts, now);
    h.raw("</section>");
    step_table(h, s.steps, now);
    ledger(h, s.ledger, now);
    outbox_rows(h, app, s.outbox, now, back);
    Ok(())
}

/// The job's facts and payload, with the actions that apply to it.
fn facts(h: &mut Html, app: &App, j: &Job, now: i64, back: &str) {
    h.raw("<section id=\"facts\"><h2>The job</h2><dl class=\"facts\">");
    let id = j.id.to_string();
    fact(h, "id", |h| {
        h.link(&format!("/jobs/{id}"), &id);
    });
    fact(h, "key", |h| {
        h.open("span", &[("class", "key")]);
        h.link(
            &format!("/keys/{}", pct(&j.idempotency_key)),
            &j.idempotency_key,
        );
        h.close("span");
    });
    fact(h, "kind", |h| {
        h.link(&url("/jobs", &[("kind", Some(&j.kind))]), &j.kind);
    });
    fact(h, "queue", |h| {
        h.link(&url("/jobs", &[("queue", Some(&j.queue))]), &j.queue);
    });
    if let Some(p) = &j.partition {
        fact(h, "partition", |h| {
            h.text(p);
        });
    }
    if let Some(ms) = j.timeout_ms {
        fact(h, "timeout", |h| {
            h.text(&exact_duration(ms));
        });
    }
    fact(h, "state", |h| badge(h, j.state.as_str()));
    fact(h, "attempts", |h| {
        h.text(&format!(
            "{} of {} charged, {} abandoned",
            j.attempts, j.max_attempts, j.abandoned
        ));
    });
    fact(h, "deliveries", |h| {
        h.num(j.deliveries);
    });
    fact(h, "priority", |h| {
        h.num(j.priority);
    });
    fact(h, "created", |h| {
        h.time(Some(j.created_at), now);
    });
    fact(h, "run at", |h| {
        h.time(Some(j.run_at), now);
    });
    fact(h, "finished", |h| {
        h.time(j.finished_at, now);
    });
    if let Some(owner) = &j.lease_owner {
        fact(h, "lease", |h| {
            h.text(owner).raw(" until ");
            h.time(j.lease_expires_at, now);
        });
    }
    if let Some(e) = &j.last_error {
        fact(h, "last error", |h| {
            h.tag("pre", &[("id", "last-error")], e);
        });
    }
    h.raw("</dl>");
    let path = format!("/jobs/{id}");
    match j.state {
        JobState::Dead => action(h, app, &format!("{path}/retry"), back, "Retry", false),
        JobState::Queued | JobState::Waiting | JobState::Running => {
            action(h, app, &format!("{path}/cancel"), back, "Cancel", true)
        }
        _ => {}
    }
    h.raw("</section>");

    h.raw("<section id=\"payload\"><h2>Payload</h2>");
    h.tag("pre", &[], &pretty(&j.payload));
    h.raw("</section>");
}

fn ledger(h: &mut Html, ledger: Option<&LedgerEntry>, now: i64) {
    h.raw("<section id=\"ledger\"><h2>Ledger</h2>");
    match ledger {
        Some(l) => {
            h.raw("<p>Work committed ");
            h.time(Some(l.completed_at), now);
            if let Some(by) = l.job_id {
                h.raw(" by job ").num(by);
            }
            h.raw(": a run of this key again is a duplicate.</p>");
        }
        None => {
            h.raw("<p class=\"none\">No row: the work of this key has not committed.</p>");
        }
    }
    h.raw("</section>");
}

fn outbox_rows(h: &mut Html, app: &App, outbox: &[OutboxEntry], now: i64, back: &str) {
    h.raw("<section id=\"outbox-rows\"><h2>Outbox rows it wrote</h2>");
    if outbox.is_empty() {
        h.raw("<p class=\"none\">None.</p>");
    }
    for o in outbox {
        let r = &o.row;
        let oid = r.id.to_string();
        h.open("div", &[("class", "outbox-row"), ("data-id", &oid)]);
        h.open("h3", &[]);
        h.text(&format!("outbox {oid} · {} ", r.kind));
        badge(h, r.state.as_str());
        h.close("h3");
        h.raw("<dl class=\"facts\">");
        fact(h, "key", |h| {
            h.tag("span", &[("class", "key")], &r.key);
        });
        fact(h, "attempts", |h| {
            h.text(&format!("{} of {}", r.attempts, r.max_attempts));
        });
        fact(h, "created", |h| {
            h.time(Some(r.created_at), now);
        });
        match r.state {
            OutboxState::Sent => fact(h, "sent", |h| {
                h.time(r.sent_at, now);
            }),
            OutboxState::Pending => fact(h, "next attempt", |h| {
                h.time(Some(r.next_attempt_at), now);
            }),
            _ => {}
        }
        if let Some(e) = &r.last_error {
            fact(h, "last error", |h| {
                h.tag("pre", &[], e);
            });
        }
        h.raw("</dl>");
        h.tag("pre", &[], &pretty(&r.payload));
        if r.state == OutboxState::Dead {
            action(
                h,
                app,
                &format!("/outbox/{oid}/retry"),
                back,
                "Retry effect",
                false,
            );
        }
        attempt_table(h, &o.attempts, now);
        h.raw("</div>");
    }
    h.raw("</section>");
}

fn fact(h: &mut Html, name: &str, value: impl FnOnce(&mut Html)) {
    h.tag("dt", &[], name);
    h.el("dd", &[], value);
}

/// The attempts on a time line, then one row each with its error.
fn attempt_table(h: &mut Html, attempts: &[Attempt], now: i64) {
    if attempts.is_empty() {
        h.raw("<p class=\"none\">No run yet.</p>");
        return;
    }
    let runs: Vec<(i64, Option<i64>, &str)> = attempts
        .iter()
        .map(|a| (a.started_at, a.finished_at, a.outcome.as_str()))
        .collect();
    svg::attempts_line(h, &runs, now);
    h.raw("<table class=\"attempts\"><thead><tr><th class=\"num\">#</th><th>outcome</th>")
        .raw("<th>started</th><th class=\"num\">took</th><th>worker</th><th>error</th></tr>")
        .raw("</thead><tbody>");
    for a in attempts {
        h.raw("<tr><td class=\"num\">")
            .num(a.attempt)
            .raw("</td><td>");
        badge(h, a.outcome.as_str());
        h.raw("</td><td>");
        h.time(Some(a.started_at), now);
        h.raw("</td><td class=\"num\">");
        match a.finished_at {
            Some(f) => h.text(&human_span((f - a.started_at).max(0) as u64)),
            None => h.raw("<span class=\"none\">-</span>"),
        };
        h.raw("</td>");
        h.tag("td", &[], &a.worker);
        h.raw("<td>");
        if let Some(e) = &a.error {
            h.tag("pre", &[("class", "error")], e);
        }
        h.raw("</td></tr>");
    }
    h.raw("</tbody></table>");
}

/// The durable steps, one row each: which attempt's call was recorded,
/// which later ones reused it, and the result. Nothing for a job without
/// steps.
fn step_table(h: &mut Html, steps: &[JobStep], now: i64) {
    if steps.is_empty() {
        return;
    }
    h.raw("<section id=\"steps\"><h2>Steps</h2>");
    h.raw("<table class=\"steps\"><thead><tr><th>step</th><th class=\"num\">recorded in</th>")
        .raw("<th>reused in</th><th>started</th><th class=\"num\">took</th><th>result</th></tr>")
        .raw("</thead><tbody>");
    for s in steps {
        h.open("tr", &[("data-step", &s.name)]);
        h.tag("td", &[("class", "key")], &s.name);
        h.raw("<td class=\"num\">attempt ")
            .num(s.attempt)
            .raw("</td>");
        let reused: Vec<String> = s.reused_in.iter().map(|a| a.to_string()).collect();
        if reused.is_empty() {
            h.raw("<td><span class=\"none\">not reused</span></td>");
        } else {
            h.tag("td", &[], &format!("attempt {}", reused.join(", ")));
        }
        h.raw("<td>");
        h.time(Some(s.started_at), now);
        h.raw("</td><td class=\"num\">");
        h.text(&human_span((s.finished_at - s.started_at).max(0) as u64));
        h.raw("</td><td>");
        h.tag("pre", &[], &pretty(&s.output));
        h.raw("</td>");
        h.close("tr");
    }
    h.raw("</tbody></table></section>");
}

/// JSON text indented for reading; as stored when it does not parse.
fn pretty(json: &str) -> String {
    serde_json::from_str::<serde_json::Value>(json)
        .and_then(|v| serde_json::to_string_pretty(&v))
        .unwrap_or_else(|_| json.to_string())
}
