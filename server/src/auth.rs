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

/// A protocol version the server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// A2A v1.0.
    V1_0,
    /// A2A v0.3 (what a request without `A2A-Version` speaks, §3.6.2).
    V0_3,
}

/// The versions a server serves (`--protocols`; both by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Protocols {
    /// A2A v1.0 is served.
    pub v1_0: bool,
    /// A2A v0.3 is served.
    pub v0_3: bool,
}

impl Default for Protocols {
    fn default() -> Self {
        Protocols {
            v1_0: true,
            v0_3: true,
        }
    }
}

impl Protocols {
    /// Parses `--protocols`: a comma-separated list of `1.0` and `0.3`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut served = Protocols {
            v1_0: false,
            v0_3: false,
        };
        for name in text.split(',').map(str::trim) {
            match version_of(name) {
                Some(Protocol::V1_0) => served.v1_0 = true,
                Some(Protocol::V0_3) if !name.is_empty() => served.v0_3 = true,
                _ => {
                    return Err(format!(
                        "--protocols: {name:?} is not a version this server speaks; give 1.0, \
                         0.3 or both (1.0,0.3)"
                    ))
                }
            }
        }
        Ok(served)
    }

    /// Whether `protocol` is served.
    pub fn serves(self, protocol: Protocol) -> bool {
        match protocol {
            Protocol::V1_0 => self.v1_0,
            Protocol::V0_3 => self.v0_3,
        }
    }
}

/// The version a `Major.Minor[.patch]` names (the patch never counts,
/// §3.6); empty is v0.3 (§3.6.2).
fn version_of(text: &str) -> Option<Protocol> {
    if text.is_empty() {
        return Some(Protocol::V0_3);
    }
    let is = |major_minor: &str| match text.strip_prefix(major_minor) {
        Some("") => true,
        Some(rest) => rest
            .strip_prefix('.')
            .is_some_and(|patch| !patch.is_empty() && patch.bytes().all(|b| b.is_ascii_digit())),
        None => false,
    };
    if is("1.0") {
        Some(Protocol::V1_0)
    } else if is("0.3") {
        Some(Protocol::V0_3)
    } else {
        None
    }
}

/// The protocol version a request names (`A2A-Version` header, or query
/// parameter): `1.0` and `1.0.x` are v1.0; none, an empty one, `0.3` and
/// `0.3.x` are v0.3. One that is not served (`served`), or that this
/// server does not know, is `VersionNotSupported`.
pub fn check_version(
    headers: &HeaderMap,
    query: Option<&str>,
    served: Protocols,
) -> Result<Protocol, A2aError> {
    let version = named_version(headers, query);
    match version_of(&version) {
        Some(p) if served.serves(p) => Ok(p),
        _ if version.is_empty() => Err(A2aError::VersionNotSupported(
            "0.3 (no A2A-Version given)".into(),
        )),
        _ => Err(A2aError::VersionNotSupported(version)),
    }
}

/// The version a request asks for, served or not (`None`: one this server
/// does not know).
pub fn requested_version(headers: &HeaderMap, query: Option<&str>) -> Option<Protocol> {
    version_of(&named_version(headers, query))
}

/// The `A2A-Version` a request names (header, else query parameter),
/// trimmed; empty if none.
fn named_version(headers: &HeaderMap, query: Option<&str>) -> String {
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
    from_header.or_else(from_query).unwrap_or_default()
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
    fn versions_are_told_and_only_served_ones_taken() {
        let both = Protocols::default();
        let v = |h: &[(&'static str, &str)], q, served| check_version(&headers(h), q, served);
        for ok in ["1.0", "1.0.1", " 1.0 "] {
            assert_eq!(
                v(&[("a2a-version", ok)], None, both),
                Ok(Protocol::V1_0),
                "{ok}"
            );
        }
        assert_eq!(v(&[], Some("A2A-Version=1.0"), both), Ok(Protocol::V1_0));
        for old in ["0.3", "0.3.0", ""] {
            assert_eq!(
                v(&[("a2a-version", old)], None, both),
                Ok(Protocol::V0_3),
                "{old}"
            );
        }
        assert_eq!(v(&[], None, both), Ok(Protocol::V0_3));
        for bad in ["1.1", "2.0", "1", "1.0.x", "1.00", "0.2", "0.3."] {
            let e = v(&[("a2a-version", bad)], None, both).unwrap_err();
            assert_eq!(e.code(), -32009, "{bad}");
        }
        let only_one = Protocols::parse("1.0").unwrap();
        assert_eq!(v(&[], None, only_one).unwrap_err().code(), -32009);
        let only_old = Protocols::parse("0.3").unwrap();
        assert_eq!(
            v(&[("a2a-version", "1.0")], None, only_old)
                .unwrap_err()
                .code(),
            -32009
        );
        assert_eq!(Protocols::parse(" 1.0 ,0.3").unwrap(), both);
        for bad in ["", "1.0,", "2.0", "0.3,x"] {
            assert!(Protocols::parse(bad).is_err(), "{bad}");
        }
    }
}
