//! How every connection of a queue is set up ([`Session`]): the parsed URL,
//! the settings each connection or, behind a transaction pooler, each
//! transaction opens with, the server's reach and the URL's TLS; and the
//! URL as messages show it ([`redact`]). Writes nothing.

use std::sync::Arc;

use postgres::NoTls;

use super::conn::{connect_err, with_causes, PgConn, Types};
use crate::error::{Error, Result};

/// How every connection of a queue is set up.
#[derive(Clone)]
pub(crate) struct Session {
    pub config: postgres::Config,
    /// The URL without its password, for messages.
    pub location: String,
    /// Settings of every connection (`synchronous_commit`, `lock_timeout`,
    /// and, behind a transaction pooler, those of the URL's `options`): on
    /// a direct connection set once when it opens, behind a transaction
    /// pooler set in each transaction ([`Session::local`]).
    settings: Vec<(&'static str, String)>,
    /// `settings` as the statement each transaction opens with, behind a
    /// transaction pooler (empty on a direct connection).
    pub(super) local: Arc<str>,
    /// Connections go through a transaction pooler (see [`super::pooler`]).
    pub(crate) pooled: bool,
    /// Behind a transaction pooler: the statements' parameter types, read
    /// once for every connection (see [`Stmt`]).
    pub(super) types: Types,
    /// Whether the server can be reached, shared by every clone.
    pub(crate) reach: Arc<super::reach::Reach>,
    /// The URL's TLS (`sslmode`): none when it is disabled.
    pub(crate) tls: Option<postgres_native_tls::MakeTlsConnector>,
}

/// `value` as an SQL string literal.
fn literal(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

impl Session {
    pub(crate) fn new(config: postgres::Config, location: String) -> Session {
        Session {
            config,
            location,
            settings: Vec::new(),
            local: Arc::from(""),
            pooled: false,
            types: Types::default(),
            reach: Arc::default(),
            tls: None,
        }
    }

    /// Sets `name` to `value` on every connection (replacing an earlier
    /// value of it).
    pub(crate) fn set(&mut self, name: &'static str, value: impl Into<String>) {
        let value = value.into();
        match self.settings.iter_mut().find(|(n, _)| *n == name) {
            Some(s) => s.1 = value,
            None => self.settings.push((name, value)),
        }
        self.local = Arc::from(self.local_sql());
    }

    /// True for a queue opened read-only (its sessions refuse writes).
    pub(crate) fn read_only(&self) -> bool {
        self.settings
            .iter()
            .any(|(n, v)| *n == "default_transaction_read_only" && v == "on")
    }

    /// From here on, connections go through a transaction pooler.
    pub(crate) fn set_pooled(&mut self) {
        self.pooled = true;
        self.local = Arc::from(self.local_sql());
    }

    /// Sets the URL's `options`, which a pooler refused at login, as
    /// settings of every connection instead.
    pub(crate) fn set_options(&mut self, settings: Vec<(String, String)>) {
        for (n, v) in settings {
            // Names of the URL's options live as long as the queue.
            let n: &'static str = Box::leak(n.into_boxed_str());
            self.set(n, v);
        }
    }

    /// The settings as one statement: `set_config` takes a value as the
    /// server's configuration file would (a list for `search_path`).
    fn sql(&self, local: bool) -> String {
        if self.settings.is_empty() {
            return String::new();
        }
        let sets: Vec<String> = self
            .settings
            .iter()
            .map(|(n, v)| {
                // A transaction's own read-only mode is this one (the
                // default only applies to the next transaction).
                let n = match *n {
                    "default_transaction_read_only" if local => "transaction_read_only",
                    n => n,
                };
                format!("set_config({}, {}, {local})", literal(n), literal(v))
            })
            .collect();
        format!("SELECT {}", sets.join(", "))
    }

    fn local_sql(&self) -> String {
        if self.pooled {
            self.sql(true)
        } else {
            String::new()
        }
    }

    /// Opens one connection with the session settings. While the server
    /// is out of reach, at most one thread of the process tries, once per
    /// backoff step; the others are refused at once.
    pub(crate) fn connect(&self) -> Result<PgConn> {
        let mut c = self.connect_bare()?;
        self.settle(&mut c)?;
        Ok(c)
    }

    /// Sets the session's settings on `c`, a connection [`connect_bare`]
    /// opened, once it is known not to go through a transaction pooler
    /// (where they would stay on a server session other clients share).
    ///
    /// [`connect_bare`]: Session::connect_bare
    pub(crate) fn settle(&self, c: &mut PgConn) -> Result<()> {
        c.pooled = self.pooled;
        c.local = self.local.clone();
        if !self.pooled && !self.settings.is_empty() {
            c.client
                .batch_execute(&self.sql(false))
                .map_err(connect_err)?;
        }
        Ok(())
    }

    /// Opens one connection without the session's settings (see
    /// [`Session::settle`]).
    pub(crate) fn connect_bare(&self) -> Result<PgConn> {
        match self.reach.admit(&self.location) {
            super::reach::Admit::Try => {}
            super::reach::Admit::Refused(e) => return Err(e),
        }
        let connected = match &self.tls {
            Some(tls) => self.config.connect(tls.clone()),
            None => self.config.connect(NoTls),
        };
        let client = match connected {
            Ok(c) => c,
            Err(e) => {
                let text = with_causes(&e);
                let err = connect_err(e);
                if matches!(err, Error::Connection(_)) {
                    self.reach.failed(&self.location, &text);
                } else {
                    self.reach.gave_up();
                }
                return Err(err);
            }
        };
        self.reach.succeeded(&self.location);
        Ok(PgConn::new(client, self))
    }
}

/// The URL without its password, for messages and `Queue::location`.
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    match rest.split_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split(':').next().unwrap_or("");
            if userinfo.contains(':') {
                format!("{scheme}://{user}:***@{host}")
            } else {
                format!("{scheme}://{userinfo}@{host}")
            }
        }
        None => url.to_string(),
    }
}
