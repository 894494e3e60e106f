//! The workflow around a job drawn on the server as inline SVG (no
//! script): a box per job in the columns [`Workflow::columns`] gives,
//! coloured by state and linking to the job's page, and an arrow from each
//! dependency to the job that waits for it. Built with the escaping
//! [`Html`] builder like the rest of a page.

use std::collections::{HashMap, HashSet, VecDeque};

use litejob::admin::{Linked, Workflow};

use super::html::Html;

/// Most jobs drawn: the nearest to the job asked about. A larger picture
/// stops being readable; the command lists them all.
pub const DRAWN: usize = 60;

const NODE_W: f64 = 170.0;
const NODE_H: f64 = 38.0;
const GAP_X: f64 = 56.0;
const GAP_Y: f64 = 14.0;
const PAD: f64 = 6.0;
/// Characters of a key that fit in a box.
const KEY_CHARS: usize = 24;

/// The ids drawn: job `w.job_id` and the jobs nearest to it along the
/// edges, either way, at most [`DRAWN`].
pub fn drawn(w: &Workflow) -> HashSet<i64> {
    let mut near: HashMap<i64, Vec<i64>> = HashMap::new();
    for &(a, b) in &w.edges {
        near.entry(a).or_default().push(b);
        near.entry(b).or_default().push(a);
    }
    let mut seen = HashSet::from([w.job_id]);
    let mut next = VecDeque::from([w.job_id]);
    while let Some(at) = next.pop_front() {
        for &n in near.get(&at).into_iter().flatten() {
            if seen.len() >= DRAWN {
                return seen;
            }
            if seen.insert(n) {
                next.push_back(n);
            }
        }
    }
    seen
}

/// Draws the jobs of `w` that [`drawn`] picks, and the edges between them.
pub fn workflow(h: &mut Html, w: &Workflow) {
    let shown = drawn(w);
    let columns: Vec<Vec<&Linked>> = w
        .columns()
        .into_iter()
        .map(|c| c.into_iter().filter(|j| shown.contains(&j.id)).collect())
        .filter(|c: &Vec<&Linked>| !c.is_empty())
        .collect();
    let rows = columns.iter().map(Vec::len).max().unwrap_or(1);
    // Each column centred on the tallest, so a fan-in meets in the middle.
    let mut at: HashMap<i64, (f64, f64)> = HashMap::new();
    for (ci, column) in columns.iter().enumerate() {
        let top = (rows - column.len()) as f64 / 2.0;
        for (ri, j) in column.iter().enumerate() {
            let x = PAD + ci as f64 * (NODE_W + GAP_X);
            let y = PAD + (top + ri as f64) * (NODE_H + GAP_Y);
            at.insert(j.id, (x, y));
        }
    }
    let width = 2.0 * PAD + columns.len() as f64 * (NODE_W + GAP_X) - GAP_X;
    let height = 2.0 * PAD + rows as f64 * (NODE_H + GAP_Y) - GAP_Y;
    let view = format!("0 0 {width} {height}");
    let label = format!("the workflow around job {}", w.job_id);
    h.open(
        "svg",
        &[
            ("class", "workflow"),
            ("id", "workflow-graph"),
            ("viewBox", &view),
            ("width", &format!("{width}")),
            ("role", "img"),
            ("aria-label", &label),
        ],
    );
    h.raw(
        "<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" \
         markerWidth=\"7\" markerHeight=\"7\" orient=\"auto\"><path d=\"M0,0L10,5L0,10z\"/>\
         </marker></defs>",
    );
    for &(job, dep) in &w.edges {
        if let (Some(&(x1, y1)), Some(&(x2, y2))) = (at.get(&dep), at.get(&job)) {
            edge(h, (x1 + NODE_W, y1 + NODE_H / 2.0), (x2, y2 + NODE_H / 2.0));
        }
    }
    for j in columns.iter().flatten() {
        node(h, j, at[&j.id], j.id == w.job_id);
    }
    h.close("svg");
}

/// A curve from a dependency's right side to its dependent's left side,
/// ending in an arrow.
fn edge(h: &mut Html, from: (f64, f64), to: (f64, f64)) {
    let mid = (from.0 + to.0) / 2.0;
    let d = format!(
        "M{:.1},{:.1} C{mid:.1},{:.1} {mid:.1},{:.1} {:.1},{:.1}",
        from.0, from.1, from.1, to.1, to.0, to.1
    );
    h.open(
        "path",
        &[("class", "edge"), ("d", &d), ("marker-end", "url(#arrow)")],
    )
    .close("path");
}

/// A job's box: its key, then its kind and state; a link to its page.
fn node(h: &mut Html, j: &Linked, (x, y): (f64, f64), asked: bool) {
    let id = j.id.to_string();
    let class = format!(
        "node n-{}{}",
        j.state.as_str(),
        if asked { " self" } else { "" }
    );
    h.open(
        "a",
        &[
            ("href", &format!("/jobs/{id}")),
            ("class", &class),
            ("data-id", &id),
        ],
    );
    h.tag(
        "title",
        &[],
        &format!("job {id} · {} · {} · {}", j.key, j.kind, j.state),
    );
    h.open(
        "rect",
        &[
            ("x", &format!("{x:.1}")),
            ("y", &format!("{y:.1}")),
            ("width", &format!("{NODE_W}")),
            ("height", &format!("{NODE_H}")),
            ("rx", "6"),
        ],
    )
    .close("rect");
    let tx = format!("{:.1}", x + 8.0);
    h.tag(
        "text",
        &[("x", &tx), ("y", &format!("{:.1}", y + 16.0))],
        &cut(&j.key, KEY_CHARS),
    );
    h.tag(
        "text",
        &[
            ("class", "sub"),
            ("x", &tx),
            ("y", &format!("{:.1}", y + 31.0)),
        ],
        &cut(&format!("{id} · {} · {}", j.kind, j.state), KEY_CHARS + 4),
    );
    h.close("a");
}

/// `s` cut to `max` characters with an ellipsis.
fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut t: String = s.chars().take(max - 1).collect();
    t.push('…');
    t
}
