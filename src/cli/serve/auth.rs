//! Who may ask, and who may act: the `--token` every request must carry
//! when one is set (an `Authorization: Bearer` header, or the cookie that
//! `/login?token=T` sets), and the per-process CSRF token every action form
//! carries, without which a POST is refused before anything is written.

use std::io::Read;

use super::http::Req;

/// The cookie `/login` sets.
pub const COOKIE: &str = "litejob_token";

/// Compares secrets in time independent of where they differ.
pub fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// True when `req` carries `token` (or no token is required).
pub fn allowed(req: &Req, token: Option<&str>) -> bool {
    let Some(token) = token else {
        return true;
    };
    let bearer = req
        .header("authorization")
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    bearer.is_some_and(|b| same(b, token)) || req.cookie(COOKIE).is_some_and(|c| same(c, token))
}

/// A fresh random token of 32 hex digits from the system's random source.
pub fn random_token() -> std::io::Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Checks `--token`: printable ASCII without spaces, quotes or semicolons,
/// so it travels unchanged in a header and a cookie.
pub fn check_token(t: &str) -> Result<(), String> {
    if t.is_empty() {
        return Err("--token must not be empty".into());
    }
    if !t
        .bytes()
        .all(|b| b.is_ascii_graphic() && !matches!(b, b'"' | b';' | b',' | b'\\'))
    {
        return Err(
            "--token may hold printable ASCII only, without spaces, quotes, commas, \
             semicolons or backslashes"
                .into(),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole_and_random_ones_differ() {
        assert!(same("abc", "abc"));
        assert!(!same("abc", "abd") && !same("abc", "ab"));
        let (a, b) = (random_token().unwrap(), random_token().unwrap());
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
        assert!(check_token("s3cr3t-T0ken").is_ok());
        assert!(check_token("has space").is_err() && check_token("").is_err());
    }
}
