//! Charts drawn on the server as inline SVG (no script): the overview's
//! runs per minute, and a job's attempts on a time line. Built with the
//! escaping [`Html`] builder like the rest of a page.

use super::super::time::format_millis;
use super::html::{human_span, Html};

/// Succeeded runs stacked under failed ones, one bar per minute.
pub fn runs_per_minute(h: &mut Html, start: i64, succeeded: &[i64], failed: &[i64]) {
    let n = succeeded.len().max(1);
    let (w, ht, bar) = (600.0_f64, 90.0_f64, 600.0 / n as f64);
    let max = succeeded
        .iter()
        .zip(failed)
        .map(|(s, f)| s + f)
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let view = format!("0 0 {w} {}", ht + 14.0);
    h.open(
        "svg",
        &[
            ("class", "chart"),
            ("viewBox", &view),
            ("role", "img"),
            ("aria-label", "runs per minute over the last hour"),
        ],
    );
    for (i, (s, f)) in succeeded.iter().zip(failed).enumerate() {
        let x = format!("{:.1}", i as f64 * bar + 0.5);
        let bw = format!("{:.1}", (bar - 1.0).max(1.0));
        let minute = format_millis(start + i as i64 * 60_000);
        h.open("g", &[]);
        h.el("title", &[], |h| {
            h.text(&format!(
                "{} UTC: {s} succeeded, {f} failed",
                &minute[11..16]
            ));
        });
        let sh = *s as f64 / max * ht;
        let fh = *f as f64 / max * ht;
        // An empty minute still gets a sliver, so the hour reads as a line.
        let sy = format!("{:.1}", ht - sh);
        h.open(
            "rect",
            &[
                ("class", "ok"),
                ("x", &x),
                ("y", &sy),
                ("width", &bw),
                ("height", &format!("{:.1}", sh.max(0.5))),
            ],
        )
        .close("rect");
        if *f > 0 {
            h.open(
                "rect",
                &[
                    ("class", "bad"),
                    ("x", &x),
                    ("y", &format!("{:.1}", ht - sh - fh)),
                    ("width", &bw),
                    ("height", &format!("{fh:.1}")),
                ],
            )
            .close("rect");
        }
        h.close("g");
    }
    let label_y = format!("{}", ht + 12.0);
    h.tag("text", &[("x", "0"), ("y", &label_y)], "60 min ago");
    h.tag(
        "text",
        &[
            ("x", &format!("{w}")),
            ("y", &label_y),
            ("text-anchor", "end"),
        ],
        "now",
    );
    h.close("svg");
}

/// One mark per attempt along the span from the first start to the last
/// end, coloured by outcome: retries and their spacing at a glance.
pub fn attempts_line(h: &mut Html, runs: &[(i64, Option<i64>, &str)], now: i64) {
    let Some(first) = runs.iter().map(|r| r.0).min() else {
        return;
    };
    let last = runs
        .iter()
        .map(|r| r.1.unwrap_or(now))
        .max()
        .unwrap_or(first)
        .max(first + 1);
    let (w, pad) = (600.0_f64, 8.0_f64);
    let x_of = |t: i64| pad + (t - first) as f64 / (last - first) as f64 * (w - 2.0 * pad);
    h.open(
        "svg",
        &[
            ("class", "timeline"),
            ("viewBox", "0 0 600 30"),
            ("role", "img"),
            ("aria-label", "attempts on a time line"),
        ],
    );
    h.open(
        "line",
        &[("x1", "8"), ("y1", "15"), ("x2", "592"), ("y2", "15")],
    )
    .close("line");
    for (i, (start, end, outcome)) in runs.iter().enumerate() {
        let x0 = x_of(*start);
        let x1 = x_of(end.unwrap_or(now)).max(x0 + 6.0);
        h.open("g", &[]);
        let took = end.map_or("still running".to_string(), |e| {
            human_span((e - start).max(0) as u64)
        });
        h.el("title", &[], |h| {
            h.text(&format!("attempt {}: {outcome}, {took}", i + 1));
        });
        let class = format!("o-{outcome}");
        h.open(
            "rect",
            &[
                ("class", &class),
                ("x", &format!("{x0:.1}")),
                ("y", "6"),
                ("width", &format!("{:.1}", x1 - x0)),
                ("height", "18"),
                ("rx", "3"),
            ],
        )
        .close("rect");
        h.close("g");
    }
    h.close("svg");
}
