//! Who is calling: bearer tokens mapped to tenants, and the protocol
//! version every API call must name.

use std::path::Path;

use axum::http::HeaderMap;

use crate::error::A2aError;

/// The tenant every request has when no tokens are configured.
pub const LOCAL_TENANT: &str = "default";

/// Bearer tokens and the tenants they stand for.
#[derive(Clone)]
pub struct Tokens(Vec<(Vec<u8>, String)>);

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the tokens themselves.
        write!(f, "Tokens({} configured)", self.0.len())
    }
}

impl Tokens {
    /// Reads a tokens file: one `TOKEN TENANT` pair per line (separated by
    /// white space), blank lines and `#` comments ignored.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the tokens file {}: {e}", path.display()))?;
        Self::parse(&text)
    }

    /// Parses the text of a tokens file.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut pairs = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut words = line.split_whitespace();
            match (words.next(), words.next(), words.next()) {
                (Some(token), Some(tenant), None) => {
                    pairs.push((token.as_bytes().to_vec(), tenant.to_string()));
                }
                _ => {
                    return Err(format!(
                        "line {} of the tokens file is not `TOKEN TENANT`",
                        n + 1
                    ))
                }
            }
        }
        if pairs.is_empty() {
            return Err("the tokens file holds no `TOKEN TENANT` line".into());
        }
        Ok(Tokens(pairs))
    }

    /// The tenant of the request's `Authorization: Bearer` token. Every
    /// configured token is compared, each in time that depends only on the
    /// lengths, so the answer's timing says nothing about which one
    /// matched or how much of it.
    pub fn tenant_of(&self, headers: &HeaderMap) -> Option<String> {
        let value = headers.get(axum::http::header::AUTHORIZATION)?.as_bytes();
        let token = value
            .strip_prefix(b"Bearer ")
            .or_else(|| value.strip_prefix(b"bearer "))?;
        let mut found = None;
        for (known, tenant) in &self.0 {
            if constant_time_eq(known, token) {
                found = Some(tenant.clone());
            }
        }
        found
    }
}

/// Whether `a` and `b` are equal, in time that depends only on their
/// lengths.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// The protocol version a request names (`A2A-Version` header, or query
/// parameter), checked: `1.0` and `1.0.x` are served; anything else, and
/// none (which the spec says means 0.3), is `VersionNotSupported`.
pub fn check_version(headers: &HeaderMap, query: Option<&str>) -> Result<(), A2aError> {
    let from_header = headers
        .get("a2a-version")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).trim().to_string());
    let from_query = || {
        let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query?).ok()?;
        pairs
            .into_iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("a2a-version"))
            .map(|(_, v)| v.trim().to_string())
    };
    let version = from_header.or_else(from_query).unwrap_or_default();
    let served = version == "1.0"
        || version
            .strip_prefix("1.0.")
            .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    if served {
        Ok(())
    } else if version.is_empty() {
        Err(A2aError::VersionNotSupported(
            "0.3 (no A2A-Version given)".into(),
        ))
    } else {
        Err(A2aError::VersionNotSupported(version))
    }
}

/// The caller's tenant: the token's, or the local tenant when no tokens are
/// configured (`tokens`: the server's).
pub(crate) fn caller(tokens: Option<&Tokens>, headers: &HeaderMap) -> Result<String, A2aError> {
    match tokens {
        None => Ok(LOCAL_TENANT.to_string()),
        Some(tokens) => tokens.tenant_of(headers).ok_or(A2aError::Unauthenticated),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn tokens_map_to_tenants_and_nothing_else_does() {
        let t = Tokens::parse("# comment\n\nsecret-a acme\n  secret-b   globex \n").unwrap();
        let tenant = |v: &str| t.tenant_of(&headers(&[("authorization", v)]));
        assert_eq!(tenant("Bearer secret-a").as_deref(), Some("acme"));
        assert_eq!(tenant("Bearer secret-b").as_deref(), Some("globex"));
        for bad in [
            "Bearer secret-",
            "Bearer secret-ab",
            "Basic secret-a",
            "secret-a",
            "Bearer ",
        ] {
            assert_eq!(tenant(bad), None, "{bad}");
        }
        assert!(Tokens::parse("one two three").is_err());
        assert!(Tokens::parse("# only a comment").is_err());
        assert!(!format!("{t:?}").contains("secret"));
    }

    #[test]
    fn version_one_is_served_and_everything_else_refused() {
        for ok in ["1.0", "1.0.1", " 1.0 "] {
            assert!(
                check_version(&headers(&[("a2a-version", ok)]), None).is_ok(),
                "{ok}"
            );
        }
        assert!(check_version(&HeaderMap::new(), Some("A2A-Version=1.0")).is_ok());
        for bad in ["0.3", "1.1", "2.0", "1", "1.0.x", "1.00"] {
            let e = check_version(&headers(&[("a2a-version", bad)]), None).unwrap_err();
            assert_eq!(e.code(), -32009, "{bad}");
        }
        assert!(check_version(&HeaderMap::new(), None).is_err());
    }
}
