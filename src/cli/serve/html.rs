//! A small HTML builder whose only way to put text from the file on a page
//! escapes it: markup comes from `&'static str` (written in this source),
//! everything else (payloads, errors, keys, kinds: user data) goes through
//! [`Html::text`] or an attribute value, both escaped. Also links and the
//! percent-encoding of the values they carry, and times for people.

use std::fmt::Write as _;

use super::super::time::{format_duration, format_millis};

/// An HTML document or fragment being written.
#[derive(Default)]
pub struct Html {
    out: String,
}

/// Escapes text for an element's content or a quoted attribute value.
pub fn escape(s: &str, out: &mut String) {
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
}

impl Html {
    /// An empty document.
    pub fn new() -> Html {
        Html::default()
    }

    /// Markup written in this source: never data from the file.
    pub fn raw(&mut self, markup: &'static str) -> &mut Self {
        self.out.push_str(markup);
        self
    }

    /// A fragment built by another `Html`: escaped already.
    pub fn append(&mut self, fragment: Html) -> &mut Self {
        self.out.push_str(&fragment.out);
        self
    }

    /// Text, escaped.
    pub fn text(&mut self, s: &str) -> &mut Self {
        escape(s, &mut self.out);
        self
    }

    /// A number.
    pub fn num(&mut self, n: impl std::fmt::Display) -> &mut Self {
        let _ = write!(self.out, "{n}");
        self
    }

    /// `<tag a="v" …>`, every value escaped.
    pub fn open(&mut self, tag: &'static str, attrs: &[(&'static str, &str)]) -> &mut Self {
        self.out.push('<');
        self.out.push_str(tag);
        for (name, value) in attrs {
            self.out.push(' ');
            self.out.push_str(name);
            self.out.push_str("=\"");
            escape(value, &mut self.out);
            self.out.push('"');
        }
        self.out.push('>');
        self
    }

    /// `</tag>`.
    pub fn close(&mut self, tag: &'static str) -> &mut Self {
        self.out.push_str("</");
        self.out.push_str(tag);
        self.out.push('>');
        self
    }

    /// An element with its attributes and the content `f` writes.
    pub fn el(
        &mut self,
        tag: &'static str,
        attrs: &[(&'static str, &str)],
        f: impl FnOnce(&mut Html),
    ) -> &mut Self {
        self.open(tag, attrs);
        f(self);
        self.close(tag)
    }

    /// An element holding only `text`.
    pub fn tag(
        &mut self,
        tag: &'static str,
        attrs: &[(&'static str, &str)],
        text: &str,
    ) -> &mut Self {
        self.open(tag, attrs).text(text).close(tag)
    }

    /// A link.
    pub fn link(&mut self, href: &str, text: &str) -> &mut Self {
        self.tag("a", &[("href", href)], text)
    }

    /// A time for people: UTC to the minute and how long ago (or how
    /// soon), `-` for none.
    pub fn time(&mut self, ms: Option<i64>, now: i64) -> &mut Self {
        self.time_to(ms, now, 16)
    }

    /// [`Html::time`] to the second (a schedule's slots can be a second
    /// apart).
    pub fn time_s(&mut self, ms: Option<i64>, now: i64) -> &mut Self {
        self.time_to(ms, now, 19)
    }

    /// A time shown as the first `len` characters of its UTC form.
    fn time_to(&mut self, ms: Option<i64>, now: i64, len: usize) -> &mut Self {
        let Some(ms) = ms else {
            return self.raw("<span class=\"none\">-</span>");
        };
        let utc = format_millis(ms);
        let iso = format!("{}Z", utc.replace(' ', "T"));
        let title = format!("{utc} UTC");
        self.open("time", &[("datetime", &iso), ("title", &title)]);
        self.text(&utc[..len.min(utc.len())]);
        self.raw(" <small class=\"ago\">");
        self.text(&relative(ms, now));
        self.raw("</small>");
        self.close("time")
    }

    /// The document.
    pub fn finish(self) -> String {
        self.out
    }
}

/// "3 min ago", "in 2 h", "just now".
pub fn relative(ms: i64, now: i64) -> String {
    let d = now - ms;
    if d.abs() < 1000 {
        return "just now".into();
    }
    let span = human_span(d.unsigned_abs());
    if d > 0 {
        format!("{span} ago")
    } else {
        format!("in {span}")
    }
}

/// "850 ms", "12 s", "3 min", "5 h", "2 d".
pub fn human_span(ms: u64) -> String {
    let s = format_duration(std::time::Duration::from_millis(ms));
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let unit = match unit {
        "m" => "min",
        u => u,
    };
    format!("{n} {unit}")
}

/// Percent-encodes a query value or a path segment: everything but
/// unreserved characters.
pub fn pct(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            o.push(b as char);
        } else {
            let _ = write!(o, "%{b:02X}");
        }
    }
    o
}

/// A URL with a query built from the pairs whose value is set.
pub fn url(path: &str, pairs: &[(&str, Option<&str>)]) -> String {
    let mut u = path.to_string();
    let mut sep = '?';
    for (k, v) in pairs {
        if let Some(v) = v {
            u.push(sep);
            u.push_str(k);
            u.push('=');
            u.push_str(&pct(v));
            sep = '&';
        }
    }
    u
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_attributes_are_escaped() {
        let mut h = Html::new();
        h.open("a", &[("href", "/x?a=\"1\"&b")])
            .text("<script>alert('x')</script>")
            .close("a");
        assert_eq!(
            h.finish(),
            "<a href=\"/x?a=&quot;1&quot;&amp;b\">&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;</a>"
        );
    }

    #[test]
    fn urls_encode_their_values_and_times_read_relative() {
        assert_eq!(
            url("/jobs", &[("kind", Some("a b/&")), ("q", None)]),
            "/jobs?kind=a%20b%2F%26"
        );
        assert_eq!(relative(0, 180_000), "3 min ago");
        assert_eq!(relative(7_200_000, 0), "in 2 h");
        assert_eq!(relative(5, 10), "just now");
    }
}
