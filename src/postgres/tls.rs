//! TLS to the server, as a PostgreSQL URL asks for it: `sslmode`
//! (`disable`, `prefer`, `require`, `verify-ca`, `verify-full`, with
//! libpq's meanings and its default, `prefer`) and `sslrootcert` (a PEM
//! file of the certificate authorities to trust, or `system`). Taken out
//! of the URL before the client reads it, which knows neither the
//! verifying modes nor the root certificate. Writes no table.

use std::path::Path;

use native_tls::{Certificate, TlsConnector};
use postgres::config::SslMode;
use postgres_native_tls::MakeTlsConnector;

use crate::error::{Error, Result};

/// How a connection is encrypted and what of the server's certificate is
/// checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Never TLS.
    Disable,
    /// TLS when the server offers it, its certificate not checked.
    Prefer,
    /// Always TLS, the certificate not checked.
    Require,
    /// Always TLS, the certificate signed by a trusted authority; any
    /// host name.
    VerifyCa,
    /// Always TLS, the certificate signed by a trusted authority and
    /// naming the host connected to.
    VerifyFull,
}

impl Mode {
    fn parse(value: &str) -> Result<Mode> {
        Ok(match value {
            "disable" => Mode::Disable,
            "prefer" => Mode::Prefer,
            "require" => Mode::Require,
            "verify-ca" => Mode::VerifyCa,
            "verify-full" => Mode::VerifyFull,
            other => {
                return Err(Error::invalid(format!(
                    "sslmode={other} in the PostgreSQL URL: expected disable, prefer, require, \
                     verify-ca or verify-full"
                )))
            }
        })
    }
}

/// What the URL asked for: the URL the client reads (without `sslmode`
/// and `sslrootcert`), the mode, and the connector (none when TLS is off).
pub(crate) struct Tls {
    pub url: String,
    pub mode: Mode,
    pub connector: Option<MakeTlsConnector>,
}

impl Tls {
    /// The client's own `sslmode`: whether it asks the server for TLS and
    /// whether it may go on without.
    pub(crate) fn ssl_mode(&self) -> SslMode {
        match self.mode {
            Mode::Disable => SslMode::Disable,
            Mode::Prefer => SslMode::Prefer,
            Mode::Require | Mode::VerifyCa | Mode::VerifyFull => SslMode::Require,
        }
    }
}

/// Reads `sslmode` and `sslrootcert` from `url` and builds the connector
/// they ask for. As libpq does, `require` with a root certificate given
/// checks the certificate as `verify-ca` does. A root certificate file that
/// cannot be read or holds no certificate is refused here, before anything
/// connects.
pub(crate) fn from_url(url: &str) -> Result<Tls> {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, q),
        None => (url, ""),
    };
    let mut mode = None;
    let mut root = None;
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match k {
            "sslmode" => mode = Some(Mode::parse(&decode(v))?),
            "sslrootcert" => root = Some(decode(v)),
            _ => kept.push(pair),
        }
    }
    let url = if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    let root = root.filter(|r| r != "system");
    let mode = match (mode.unwrap_or(Mode::Prefer), &root) {
        (Mode::Require, Some(_)) => Mode::VerifyCa,
        (m, _) => m,
    };
    if mode == Mode::Disable {
        return Ok(Tls {
            url,
            mode,
            connector: None,
        });
    }
    let mut b = TlsConnector::builder();
    match mode {
        Mode::Prefer | Mode::Require => {
            b.danger_accept_invalid_certs(true)
                .danger_accept_invalid_hostnames(true);
        }
        Mode::VerifyCa => {
            b.danger_accept_invalid_hostnames(true);
        }
        Mode::VerifyFull | Mode::Disable => {}
    }
    if let Some(path) = &root {
        for cert in root_certificates(Path::new(path))? {
            b.add_root_certificate(cert);
        }
    }
    let connector = b
        .build()
        .map_err(|e| Error::invalid(format!("cannot set up TLS for the PostgreSQL URL: {e}")))?;
    Ok(Tls {
        url,
        mode,
        connector: Some(MakeTlsConnector::new(connector)),
    })
}

/// The certificates of a PEM file, every one of it.
fn root_certificates(path: &Path) -> Result<Vec<Certificate>> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Error::invalid(format!(
            "sslrootcert={}: cannot read it: {e}",
            path.display()
        ))
    })?;
    const END: &str = "-----END CERTIFICATE-----";
    let mut certs = Vec::new();
    for block in text.split_inclusive(END).filter(|b| b.contains(END)) {
        let cert = Certificate::from_pem(block.trim_start().as_bytes()).map_err(|e| {
            Error::invalid(format!(
                "sslrootcert={}: not a PEM certificate: {e}",
                path.display()
            ))
        })?;
        certs.push(cert);
    }
    if certs.is_empty() {
        return Err(Error::invalid(format!(
            "sslrootcert={}: holds no PEM certificate",
            path.display()
        )));
    }
    Ok(certs)
}

/// A URL query value with its `%XX` escapes (and `+`) decoded.
fn decode(v: &str) -> String {
    let bytes = v.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = |c: u8| (c as char).to_digit(16);
                match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                    (Some(h), Some(l)) => {
                        out.push((h * 16 + l) as u8);
                        i += 3;
                        continue;
                    }
                    _ => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_loses_its_tls_parameters_and_keeps_the_others() {
        let t = from_url("postgres://u:p@h/db?sslmode=require&application_name=x").unwrap();
        assert_eq!(t.url, "postgres://u:p@h/db?application_name=x");
        assert_eq!((t.mode, t.ssl_mode()), (Mode::Require, SslMode::Require));
        let t = from_url("postgres://u@h/db").unwrap();
        assert_eq!(
            (t.url.as_str(), t.mode),
            ("postgres://u@h/db", Mode::Prefer)
        );
        assert!(t.connector.is_some());
        let t = from_url("postgres://u@h/db?sslmode=disable").unwrap();
        assert_eq!(
            (t.url.as_str(), t.mode),
            ("postgres://u@h/db", Mode::Disable)
        );
        assert!(t.connector.is_none());
        let t = from_url("postgres://u@h/db?sslmode=verify-full&sslrootcert=system").unwrap();
        assert_eq!(t.mode, Mode::VerifyFull);
    }

    #[test]
    fn a_bad_mode_or_root_certificate_is_refused_with_what_was_wrong() {
        let e = from_url("postgres://u@h/db?sslmode=verify").err().unwrap();
        assert!(
            e.to_string()
                .contains("sslmode=verify in the PostgreSQL URL"),
            "{e}"
        );
        let e = from_url("postgres://u@h/db?sslmode=verify-full&sslrootcert=%2Fno%2Fsuch.pem")
            .err()
            .unwrap();
        assert!(
            e.to_string()
                .contains("sslrootcert=/no/such.pem: cannot read it"),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let url = format!("postgres://u@h/db?sslrootcert={}", empty.display());
        let e = from_url(&url).err().unwrap();
        assert!(e.to_string().contains("holds no PEM certificate"), "{e}");
    }

    #[test]
    fn query_values_are_percent_decoded() {
        assert_eq!(decode("%2Fetc%2Fca.pem"), "/etc/ca.pem");
        assert_eq!(decode("a+b%"), "a b%");
        assert_eq!(decode("%zz"), "%zz");
    }
}
