//! Reading Rust source for its string literals: comments, plain, byte and
//! raw strings with their escapes and continuations, char literals and
//! lifetimes, and which code lies in test modules.

/// A string literal of a source file.
pub(super) struct Literal {
    pub(super) line: usize,
    pub(super) text: String,
    /// The first argument of a `format!`.
    pub(super) template: bool,
    /// `NAME` when the literal is the value of `const NAME: &str`.
    pub(super) constant: Option<String>,
    /// Where it starts in the file's code (see [`Lexed::code`]).
    pub(super) at: usize,
}

/// A source file split into its string literals and the rest.
pub(super) struct Lexed {
    pub(super) literals: Vec<Literal>,
    /// The source without comments, each literal written as `""`: its
    /// braces are the code's own.
    pub(super) code: String,
}

/// A position in source text, and its line.
struct Cursor {
    pub(super) c: Vec<char>,
    pub(super) i: usize,
    pub(super) line: usize,
}

impl Cursor {
    fn at(&self, k: usize) -> char {
        self.c.get(k).copied().unwrap_or('\0')
    }

    /// Steps over one char, counting lines.
    fn step(&mut self) -> char {
        let ch = self.at(self.i);
        self.line += usize::from(ch == '\n');
        self.i += 1;
        ch
    }

    /// At a `r"…"`, `r#"…"#` or `br…`: the `r` starts a token.
    fn at_raw_string(&self) -> bool {
        let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
        let i = self.i;
        let starts = i == 0
            || !ident(self.c[i - 1])
            || (self.c[i - 1] == 'b' && (i < 2 || !ident(self.c[i - 2])));
        let mut k = i + 1;
        while self.at(k) == '#' {
            k += 1;
        }
        starts && self.c[i] == 'r' && self.at(k) == '"'
    }

    /// Skips a line or (nested) block comment.
    fn comment(&mut self) {
        if self.at(self.i + 1) == '/' {
            while self.i < self.c.len() && self.at(self.i) != '\n' {
                self.i += 1;
            }
            return;
        }
        let mut depth = 0;
        while self.i < self.c.len() {
            if self.at(self.i) == '/' && self.at(self.i + 1) == '*' {
                depth += 1;
                self.i += 2;
            } else if self.at(self.i) == '*' && self.at(self.i + 1) == '/' {
                depth -= 1;
                self.i += 2;
                if depth == 0 {
                    return;
                }
            } else {
                self.step();
            }
        }
    }

    /// Reads a raw string from its `r`.
    fn raw_string(&mut self) -> String {
        self.i += 1;
        let mut hashes = 0;
        while self.at(self.i) == '#' {
            hashes += 1;
            self.i += 1;
        }
        self.i += 1;
        let mut text = String::new();
        while self.i < self.c.len() {
            if self.at(self.i) == '"' && (1..=hashes).all(|h| self.at(self.i + h) == '#') {
                self.i += 1 + hashes;
                break;
            }
            text.push(self.step());
        }
        text
    }

    /// Reads a quoted string from its `"`, with its escapes and line
    /// continuations.
    fn quoted_string(&mut self) -> String {
        self.i += 1;
        let mut text = String::new();
        while self.i < self.c.len() && self.at(self.i) != '"' {
            if self.at(self.i) != '\\' {
                text.push(self.step());
                continue;
            }
            self.i += 1;
            match self.step() {
                'n' => text.push('\n'),
                't' => text.push('\t'),
                'r' => text.push('\r'),
                '0' => text.push('\0'),
                'x' => {
                    let hex: String = self.c[self.i..self.i + 2].iter().collect();
                    text.push(char::from(u8::from_str_radix(&hex, 16).unwrap()));
                    self.i += 2;
                }
                'u' => {
                    let end = self.i + self.c[self.i..].iter().position(|&ch| ch == '}').unwrap();
                    let hex: String = self.c[self.i + 1..end].iter().collect();
                    text.push(char::from_u32(u32::from_str_radix(&hex, 16).unwrap()).unwrap());
                    self.i = end + 1;
                }
                // A line continuation: the newline and the next line's
                // indentation are not part of the text.
                '\n' => {
                    while self.at(self.i).is_whitespace() {
                        self.step();
                    }
                }
                other => text.push(other),
            }
        }
        self.i += 1;
        text
    }
}

/// Reads Rust source text: comments, string literals (plain, byte, raw,
/// with their escapes and line continuations), char literals and
/// lifetimes; the rest is copied to [`Lexed::code`].
pub(super) fn lex(src: &str) -> Lexed {
    let mut cur = Cursor {
        c: src.chars().collect(),
        i: 0,
        line: 1,
    };
    let mut out = Lexed {
        literals: Vec::new(),
        code: String::new(),
    };
    while cur.i < cur.c.len() {
        let (ch, next) = (cur.at(cur.i), cur.at(cur.i + 1));
        if ch == '/' && (next == '/' || next == '*') {
            cur.comment();
            out.code.push(' ');
        } else if ch == 'r' && cur.at_raw_string() {
            let line = cur.line;
            let text = cur.raw_string();
            push_literal(&mut out, line, text);
        } else if ch == '"' {
            let line = cur.line;
            let text = cur.quoted_string();
            push_literal(&mut out, line, text);
        } else if ch == '\'' && (next == '\\' || cur.at(cur.i + 2) == '\'') {
            // A char literal (a lifetime has no closing quote): up to its
            // closing quote, past an escaped one.
            let from = cur.i + 2 + usize::from(next == '\\');
            cur.i = from + cur.c[from..].iter().position(|&q| q == '\'').unwrap() + 1;
            out.code.push_str("' '");
        } else {
            out.code.push(cur.step());
        }
    }
    out
}

/// Records a literal with what the code just before it says about it.
fn push_literal(out: &mut Lexed, line: usize, text: String) {
    let before = out.code.trim_end();
    let template = before.ends_with("format!(");
    let constant = before
        .strip_suffix('=')
        .map(str::trim_end)
        .and_then(|b| {
            b.strip_suffix("&str")
                .or_else(|| b.strip_suffix("&'static str"))
        })
        .and_then(|b| b.trim_end().strip_suffix(':'))
        .and_then(|b| {
            let b = b.trim_end();
            let name_len = b
                .chars()
                .rev()
                .take_while(|&ch| ch.is_alphanumeric() || ch == '_')
                .count();
            let (rest, name) = b.split_at(b.len() - name_len);
            rest.trim_end().ends_with("const").then(|| name.to_string())
        });
    out.literals.push(Literal {
        line,
        text,
        template,
        constant,
        at: out.code.len(),
    });
    out.code.push_str("\"\"");
}

/// The byte ranges of `code` inside `#[cfg(test)] mod … { … }` blocks.
pub(super) fn test_modules(code: &str) -> Vec<std::ops::Range<usize>> {
    let mut ranges = Vec::new();
    let mut from = 0;
    while let Some(k) = code[from..].find("#[cfg(test)]") {
        let start = from + k;
        let rest = code[start + "#[cfg(test)]".len()..].trim_start();
        from = start + 1;
        let Some(after_mod) = rest.strip_prefix("mod ") else {
            continue;
        };
        let Some(open) = after_mod.find(['{', ';']) else {
            continue;
        };
        if after_mod.as_bytes()[open] == b';' {
            continue;
        }
        let open = code.len() - after_mod.len() + open;
        let mut depth = 0;
        for (k, b) in code.as_bytes()[open..].iter().enumerate() {
            match b {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        ranges.push(start..open + k + 1);
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    ranges
}
