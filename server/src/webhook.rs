//! One webhook, as a delivery reaches it: the config's stored form and
//! the headers it makes, its URL checked, its address checked when it is
//! connected to (not only when the config was made: a name may resolve
//! elsewhere by then), HTTP/1.1 connections (over TLS for `https`, the
//! server's certificate checked against the system's roots and
//! `--webhook-ca`'s) kept in a pool by host, redirects never followed,
//! and the response's body read only up to a small bound.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use axum::http::{header, HeaderName, HeaderValue, Method, Request, Uri};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1::{handshake, SendRequest};
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;

use crate::util::lock;

/// The most of a response's body read; the rest is not (the connection
/// is then closed, not reused).
pub(crate) const MAX_RESPONSE_BODY: usize = 16 << 10;

/// The header a2a-sdk's receivers read a config's token from.
const TOKEN_HEADER: &str = "x-a2a-notification-token";

/// `AuthenticationInfo`.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub(crate) struct Authentication {
    pub(crate) scheme: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) credentials: Option<String>,
}

/// A push config as the store keeps it (its id and task are the
/// record's): where to deliver, and what to say who we are.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub(crate) struct Stored {
    pub(crate) url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) authentication: Option<Authentication>,
    /// The protocol version its deliveries are written in, if not v1.0's
    /// (`"0.3"`: the config came from a v0.3 client). Kept in the store,
    /// never in an answer.
    #[serde(
        default,
        rename = "ctxlogProtocol",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) protocol: Option<String>,
}

impl Stored {
    /// The headers a delivery carries beside its body's type: the
    /// `Authorization` the config's authentication makes, its token in
    /// [`TOKEN_HEADER`]; both marked sensitive (never logged).
    pub(crate) fn headers(&self) -> Result<Vec<(HeaderName, HeaderValue)>, String> {
        let value = |what: &str, text: String| {
            HeaderValue::try_from(text)
                .map_err(|_| format!("{what}: holds characters an HTTP header cannot carry"))
        };
        let mut out = Vec::new();
        if let Some(auth) = &self.authentication {
            if auth.scheme.is_empty() || auth.scheme.contains(char::is_whitespace) {
                return Err("authentication.scheme: give one word, such as Bearer".into());
            }
            let text = match auth.credentials.as_deref().filter(|c| !c.is_empty()) {
                Some(credentials) => format!("{} {credentials}", auth.scheme),
                None => auth.scheme.clone(),
            };
            let mut v = value("authentication", text)?;
            v.set_sensitive(true);
            out.push((axum::http::header::AUTHORIZATION, v));
        }
        if let Some(token) = &self.token {
            let mut v = value("token", token.clone())?;
            v.set_sensitive(true);
            out.push((HeaderName::from_static(TOKEN_HEADER), v));
        }
        Ok(out)
    }
}

/// A webhook URL, checked, with what each request to it names.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    host: String,
    port: u16,
    /// `https`: the connection is TLS.
    tls: bool,
    /// The request target: the URL's path and query.
    path: String,
    /// The `Host` header.
    host_header: HeaderValue,
}

impl Target {
    /// The host and port requests go to, and whether over TLS.
    pub(crate) fn authority(&self) -> (String, u16, bool) {
        (self.host.clone(), self.port, self.tls)
    }

    /// Checks `url`: an absolute `http` or `https` URL with a host, and,
    /// unless `allow_private`, not a literal address that [`is_public`]
    /// refuses. The error says what to change.
    pub(crate) fn parse(url: &str, allow_private: bool) -> Result<Target, String> {
        let uri: Uri = url
            .parse()
            .map_err(|e| format!("url: {url:?} is not a URL: {e}"))?;
        let tls = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => return Err(format!("url: {url:?} is not an absolute http or https URL")),
        };
        let host = uri
            .host()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| format!("url: {url:?} names no host"))?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        if !allow_private {
            if let Some(ip) = literal_address(&host) {
                check_public(ip)?;
            } else if is_local_name(&host) {
                return Err(refused(&host));
            }
        }
        let default_port = if tls { 443 } else { 80 };
        let port = uri.port_u16().unwrap_or(default_port);
        let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_string();
        let host_header = HeaderValue::try_from(host_header(&host, port, default_port))
            .map_err(|_| format!("url: {url:?} names a host no Host header can carry"))?;
        Ok(Target {
            host,
            port,
            tls,
            path,
            host_header,
        })
    }
}

/// The address a host names literally, as a resolver would read it: an
/// IPv6 or dotted IPv4 address, or one of the IPv4 forms `inet_aton`
/// takes (`127.1`, `2130706433`, `0x7f000001`, `0177.0.0.1`), so that
/// none of them passes the check at creation only to be refused at
/// connect.
fn literal_address(host: &str) -> Option<IpAddr> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Some(ip);
    }
    inet_aton(host).map(IpAddr::V4)
}

/// `host` read as `inet_aton` reads it: one to four numbers (decimal,
/// `0x` hexadecimal, or octal with a leading 0), separated by dots, the
/// last filling the bytes that remain.
fn inet_aton(host: &str) -> Option<Ipv4Addr> {
    let host = host.strip_suffix('.').unwrap_or(host);
    let parts: Vec<&str> = host.split('.').collect();
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let mut numbers = Vec::with_capacity(parts.len());
    for part in &parts {
        let n = if let Some(hex) = part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
            u32::from_str_radix(hex, 16).ok()?
        } else if part.len() > 1 && part.starts_with('0') {
            u32::from_str_radix(part, 8).ok()?
        } else if !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()) {
            part.parse().ok()?
        } else {
            return None;
        };
        numbers.push(n);
    }
    let (last, first) = numbers.split_last()?;
    let mut value: u32 = 0;
    for (i, &n) in first.iter().enumerate() {
        if n > 255 {
            return None;
        }
        value |= n << (24 - 8 * i);
    }
    // What the last number may fill: the bytes after the ones before it.
    let room = 32 - 8 * first.len();
    if room < 32 && u64::from(*last) >= 1u64 << room {
        return None;
    }
    Some(Ipv4Addr::from(value | last))
}

/// Whether `host` names this machine however it is spelt: `localhost`,
/// with a final dot, or a name under it (`a.localhost`, RFC 6761).
fn is_local_name(host: &str) -> bool {
    let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    host == "localhost" || host.ends_with(".localhost") || host == "localhost.localdomain"
}

fn refused(what: &str) -> String {
    format!(
        "url: {what} is not a public address, and webhooks go only to public ones (start the \
         server with --allow-private-webhooks to deliver to loopback and private networks)"
    )
}

fn check_public(ip: IpAddr) -> Result<(), String> {
    match is_public(ip) {
        true => Ok(()),
        false => Err(refused(&ip.to_string())),
    }
}

/// Whether `ip` is a public unicast address: not loopback, private,
/// link-local (cloud metadata services live there), shared (carrier NAT),
/// unspecified, broadcast, multicast, documentation or reserved; IPv6
/// unique-local, site-local and link-local too; an IPv6 address that
/// carries an IPv4 one (mapped `::ffff:a.b.c.d`, compatible `::a.b.c.d`,
/// NAT64 `64:ff9b::/96` and `64:ff9b:1::/48`, 6to4 `2002::/16`) as that
/// IPv4 address; Teredo (`2001::/32`) and the discard prefix (`100::/64`)
/// never.
pub(crate) fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => match embedded_v4(v6) {
            Some(v4) => is_public_v4(v4),
            None => is_public_v6(v6),
        },
    }
}

/// The IPv4 address an IPv6 one carries, by the forms that route to it.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let low = Ipv4Addr::new(
        (s[6] >> 8) as u8,
        (s[6] & 0xff) as u8,
        (s[7] >> 8) as u8,
        (s[7] & 0xff) as u8,
    );
    match s {
        [0, 0, 0, 0, 0, 0xffff, ..] => Some(low),
        // IPv4-compatible (deprecated; `::` and `::1` are not such).
        [0, 0, 0, 0, 0, 0, hi, _] if hi != 0 => Some(low),
        [0x64, 0xff9b, 0, 0, 0, 0, ..] => Some(low),
        [0x64, 0xff9b, 1, ..] => Some(low),
        [0x2002, a, b, ..] => Some(Ipv4Addr::new(
            (a >> 8) as u8,
            (a & 0xff) as u8,
            (b >> 8) as u8,
            (b & 0xff) as u8,
        )),
        _ => None,
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        || (a == 100 && (64..128).contains(&b))
        || (a == 192 && b == 0 && c == 0)
        || (a == 198 && (18..20).contains(&b))
        || a >= 240)
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let [first, second, third, fourth, ..] = ip.segments();
    !(ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || (first & 0xfe00) == 0xfc00
        || (first & 0xffc0) == 0xfe80
        || (first & 0xffc0) == 0xfec0
        || first == 0x2001 && second == 0x0db8
        || first == 0x2001 && second == 0
        || first == 0x100 && second == 0 && third == 0 && fourth == 0)
}

/// One delivery's request: the body and the headers beside the
/// content type.
pub(crate) struct Post<'a> {
    pub(crate) body: Bytes,
    pub(crate) headers: &'a [(HeaderName, HeaderValue)],
}

/// Idle connections to webhooks by host and port, for any delivery to
/// take: a receiver of many tasks' configs is reached over a few kept
/// connections, not a new one per task. At most [`POOL_PER_HOST`] per
/// host and port, each for at most [`POOL_IDLE`]. It also holds the TLS
/// client's configuration, made at the first `https` delivery.
#[derive(Default)]
pub(crate) struct Pool {
    idle: Mutex<HashMap<(String, u16, bool), Vec<Idle>>>,
    /// `--webhook-ca`: roots trusted beside the system's.
    ca_file: Option<PathBuf>,
    tls: OnceLock<Result<TlsConnector, String>>,
}

/// A kept connection, and since when it is idle.
type Idle = (Sender, Instant);

/// One HTTP/1.1 connection's request half.
type Sender = SendRequest<Full<Bytes>>;

/// The most idle connections kept to one host and port.
const POOL_PER_HOST: usize = 32;
/// How long an idle connection is kept.
const POOL_IDLE: Duration = Duration::from_secs(30);

impl Pool {
    /// A pool whose TLS connections also trust the roots in `ca_file`.
    pub(crate) fn new(ca_file: Option<PathBuf>) -> Self {
        Pool {
            ca_file,
            ..Pool::default()
        }
    }

    /// The TLS client (made once: the system's roots are read then).
    fn tls(&self) -> Result<&TlsConnector, String> {
        self.tls
            .get_or_init(|| tls_client(self.ca_file.as_deref()))
            .as_ref()
            .map_err(Clone::clone)
    }

    fn take(&self, target: &Target) -> Option<Sender> {
        let mut idle = lock(&self.idle);
        let key = target.authority();
        let kept = idle.get_mut(&key)?;
        kept.retain(|(sender, at)| !sender.is_closed() && at.elapsed() < POOL_IDLE);
        let sender = kept.pop().map(|(sender, _)| sender);
        if kept.is_empty() {
            idle.remove(&key);
        }
        sender
    }

    fn put(&self, target: &Target, sender: Sender) {
        if sender.is_closed() {
            return;
        }
        let mut idle = lock(&self.idle);
        let kept = idle.entry(target.authority()).or_default();
        kept.retain(|(sender, at)| !sender.is_closed() && at.elapsed() < POOL_IDLE);
        if kept.len() < POOL_PER_HOST {
            kept.push((sender, Instant::now()));
        }
    }
}

/// A connection to one webhook, held by a delivery while it sends, then
/// given back to the [`Pool`].
#[derive(Default)]
pub(crate) struct Connection {
    sender: Option<Sender>,
}

impl Connection {
    /// Gives the connection back to `pool`, for the next delivery to the
    /// same host (one the receiver closed is dropped).
    pub(crate) fn park(&mut self, pool: &Pool, target: &Target) {
        if let Some(sender) = self.sender.take() {
            pool.put(target, sender);
        }
    }

    /// Delivers `post` to `target` within `timeout` (connect, request,
    /// response and its bounded body); `Ok` for a 2xx answer, else why
    /// not (a redirect included: it is never followed). A kept connection
    /// the receiver closed meanwhile is replaced at once, not counted as a
    /// failure.
    pub(crate) async fn post(
        &mut self,
        pool: &Pool,
        target: &Target,
        post: &Post<'_>,
        timeout: Duration,
        allow_private: bool,
    ) -> Result<(), String> {
        if self.sender.is_none() {
            self.sender = pool.take(target);
        }
        let attempt = async {
            let kept = self.sender.is_some();
            match self.exchange(pool, target, post, allow_private).await {
                Err(Failure::Unsent(_)) if kept => {
                    self.sender = None;
                    self.exchange(pool, target, post, allow_private).await
                }
                other => other,
            }
        };
        match tokio::time::timeout(timeout, attempt).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(Failure::Unsent(e) | Failure::Answered(e))) => {
                self.sender = None;
                Err(e)
            }
            Err(_) => {
                self.sender = None;
                Err(format!("no answer within {} ms", timeout.as_millis()))
            }
        }
    }

    async fn exchange(
        &mut self,
        pool: &Pool,
        target: &Target,
        post: &Post<'_>,
        allow_private: bool,
    ) -> Result<(), Failure> {
        let reusable = match self.sender.as_mut() {
            Some(s) => s.ready().await.is_ok(),
            None => false,
        };
        if !reusable {
            self.sender = Some(
                connect(pool, target, allow_private)
                    .await
                    .map_err(Failure::Answered)?,
            );
        }
        let Some(sender) = self.sender.as_mut() else {
            return Err(Failure::Answered("no connection".into()));
        };
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(target.path.as_str())
            .header(header::HOST, target.host_header.clone())
            .header(header::CONTENT_TYPE, "application/a2a+json")
            .header(
                header::USER_AGENT,
                concat!("ctxlog-server/", env!("CARGO_PKG_VERSION")),
            );
        for (name, value) in post.headers {
            request = request.header(name, value);
        }
        let request = request
            .body(Full::new(post.body.clone()))
            .map_err(|e| Failure::Answered(format!("the request could not be made: {e}")))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| Failure::Unsent(format!("the request failed: {e}")))?;
        let status = response.status();
        // Read (a bounded part of) the body so the connection can serve
        // the next delivery; past the bound it is closed instead.
        if Limited::new(response.into_body(), MAX_RESPONSE_BODY)
            .collect()
            .await
            .is_err()
        {
            self.sender = None;
        }
        match status.is_success() {
            true => Ok(()),
            false if status.is_redirection() => Err(Failure::Answered(format!(
                "HTTP {status}: a redirect, which is not followed; give the final URL"
            ))),
            false => Err(Failure::Answered(format!("HTTP {status}"))),
        }
    }
}

/// Why an exchange failed: before the receiver answered (on a kept
/// connection, most likely one it closed: worth one more try on a new
/// one), or otherwise.
enum Failure {
    Unsent(String),
    Answered(String),
}

/// The `Host` header of a host and port (an IPv6 address bracketed; the
/// scheme's default port left out).
fn host_header(host: &str, port: u16, default_port: u16) -> String {
    let host = match host.contains(':') {
        true => format!("[{host}]"),
        false => host.to_string(),
    };
    match port == default_port {
        true => host,
        false => format!("{host}:{port}"),
    }
}

/// The TLS client for `https` webhooks: the system's root certificates
/// and those of `ca_file` (PEM), TLS 1.2 and 1.3, HTTP/1.1 by ALPN.
fn tls_client(ca_file: Option<&Path>) -> Result<TlsConnector, String> {
    let mut roots = RootCertStore::empty();
    let system = rustls_native_certs::load_native_certs();
    let (added, _) = roots.add_parsable_certificates(system.certs);
    if let Some(path) = ca_file {
        for cert in ca_certs(path)? {
            roots
                .add(cert)
                .map_err(|e| format!("--webhook-ca {}: {e}", path.display()))?;
        }
    }
    if roots.is_empty() {
        return Err(format!(
            "no root certificate to check an https webhook's against: the system's store \
             gave {added} (install the CA certificates package) and --webhook-ca names none"
        ));
    }
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("the TLS client could not be made: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsConnector::from(Arc::new(config)))
}

/// Reads the roots of `ca_file` (PEM), for `--webhook-ca` to be checked
/// when the server starts; how many there are.
pub(crate) fn check_ca_file(ca_file: &Path) -> Result<usize, String> {
    match ca_certs(ca_file)?.len() {
        0 => Err(format!(
            "--webhook-ca {}: it holds no PEM certificate",
            ca_file.display()
        )),
        n => Ok(n),
    }
}

/// The certificates of a PEM file (`--webhook-ca`); the error names it.
fn ca_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let named = |e: &dyn std::fmt::Display| format!("--webhook-ca {}: {e}", path.display());
    CertificateDer::pem_file_iter(path)
        .map_err(|e| named(&e))?
        .map(|cert| cert.map_err(|e| named(&e)))
        .collect()
}

/// Resolves the target's host and connects to the first address allowed
/// (unless `allow_private`, only public ones: checked here, on the
/// addresses actually connected to).
async fn connect(pool: &Pool, target: &Target, allow_private: bool) -> Result<Sender, String> {
    let tls = match target.tls {
        true => Some(pool.tls()?),
        false => None,
    };
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((target.host.as_str(), target.port))
        .await
        .map_err(|e| format!("{} does not resolve: {e}", target.host))?
        .collect();
    let allowed: Vec<SocketAddr> = addrs
        .iter()
        .copied()
        .filter(|a| allow_private || is_public(a.ip()))
        .collect();
    if allowed.is_empty() {
        return Err(match addrs.first() {
            Some(a) => refused(&format!("{} (resolved to {})", target.host, a.ip())),
            None => format!("{} resolves to no address", target.host),
        });
    }
    let mut last = String::new();
    for addr in allowed {
        match tokio::net::TcpStream::connect(addr).await {
            Ok(stream) => {
                let _ = stream.set_nodelay(true);
                return match tls {
                    None => http1(TokioIo::new(stream), addr).await,
                    Some(tls) => {
                        let name = match target.host.parse::<IpAddr>() {
                            Ok(ip) => ServerName::IpAddress(ip.into()),
                            Err(_) => ServerName::try_from(target.host.clone()).map_err(|e| {
                                format!("{}: not a TLS server name: {e}", target.host)
                            })?,
                        };
                        let stream = tls
                            .connect(name, stream)
                            .await
                            .map_err(|e| format!("TLS handshake with {addr} failed: {e}"))?;
                        http1(TokioIo::new(stream), addr).await
                    }
                };
            }
            Err(e) => last = format!("cannot connect to {addr}: {e}"),
        }
    }
    Err(last)
}

/// An HTTP/1.1 client connection over `io` (a TCP or TLS stream).
async fn http1<T>(io: TokioIo<T>, addr: SocketAddr) -> Result<Sender, String>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (sender, connection) = handshake(io)
        .await
        .map_err(|e| format!("HTTP handshake with {addr} failed: {e}"))?;
    // The connection's task ends when the sender is dropped or the peer
    // closes it.
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_addresses_are_told_from_the_others() {
        for ip in ["8.8.8.8", "1.1.1.1", "2606:4700::1111", "::ffff:8.8.8.8"] {
            assert!(is_public(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "::1",
            "::",
            "fc00::1",
            "fd12::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            // IPv6 forms that carry a private IPv4 address, and prefixes
            // that are no one's.
            "::127.0.0.1",
            "::10.0.0.1",
            "64:ff9b::7f00:1",
            "64:ff9b::a9fe:a9fe",
            "64:ff9b:1::7f00:1",
            "2002:7f00:1::1",
            "2002:a9fe:a9fe::1",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "100::1",
            "fec0::1",
        ] {
            assert!(!is_public(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["::8.8.8.8", "64:ff9b::808:808", "2002:808:808::1"] {
            assert!(is_public(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn every_spelling_of_a_private_host_is_refused_at_creation() {
        for url in [
            "http://[::127.0.0.1]/h",
            "http://[64:ff9b::7f00:1]/h",
            "http://localhost./h",
            "http://LOCALHOST/h",
            "http://a.localhost/h",
            "http://127.1/h",
            "http://127.0.1/h",
            "http://2130706433/h",
            "http://0x7f000001/h",
            "http://0x7f.1/h",
            "http://0177.0.0.1/h",
            "http://017700000001/h",
            "http://169.254.43518/h",
            "http://10.1/h",
        ] {
            let e = Target::parse(url, false).unwrap_err();
            assert!(e.contains("--allow-private-webhooks"), "{url}: {e}");
        }
        // Names and numbers that are no address stay names (checked at
        // connect, on what they resolve to).
        for url in [
            "http://8.8.8.8/h",
            "http://134744072/h",
            "http://1.example/h",
            "http://0xg/h",
        ] {
            assert!(Target::parse(url, false).is_ok(), "{url}");
        }
        assert_eq!(inet_aton("127.1"), Some(Ipv4Addr::new(127, 0, 0, 1)));
        assert_eq!(inet_aton("0x7f.0.0.1"), Some(Ipv4Addr::new(127, 0, 0, 1)));
        assert_eq!(inet_aton("1.2.3.4."), Some(Ipv4Addr::new(1, 2, 3, 4)));
        assert_eq!(inet_aton("1.2.3.256"), None);
        assert_eq!(inet_aton("1.2.65536"), None);
        assert_eq!(inet_aton("4294967296"), None);
        assert_eq!(inet_aton("1.2.3.4.5"), None);
        assert_eq!(inet_aton("08"), None);
        assert_eq!(inet_aton(""), None);
    }

    #[test]
    fn urls_are_checked_and_private_literals_refused_unless_allowed() {
        assert!(Target::parse("http://example.com/hook", false).is_ok());
        let https = Target::parse("https://example.com/hook", false).unwrap();
        assert_eq!(https.authority(), ("example.com".into(), 443, true));
        assert_eq!(https.host_header, "example.com");
        let odd = Target::parse("https://example.com:8443/hook", false).unwrap();
        assert_eq!(odd.host_header, "example.com:8443");
        for url in ["ftp://example.com/x", "/relative", "http://", "not a url"] {
            assert!(Target::parse(url, true).is_err(), "{url}");
        }
        for url in [
            "http://127.0.0.1:9/hook",
            "http://[::1]:9/hook",
            "http://169.254.169.254/latest",
            "http://localhost/hook",
        ] {
            let e = Target::parse(url, false).unwrap_err();
            assert!(e.contains("--allow-private-webhooks"), "{url}: {e}");
            assert!(Target::parse(url, true).is_ok(), "{url}");
        }
        let t = Target::parse("http://[::1]:8080/h?x=1", true).unwrap();
        assert_eq!((t.host.as_str(), t.port), ("::1", 8080));
        assert_eq!(t.host_header, "[::1]:8080");
        assert_eq!(t.path, "/h?x=1");
    }
}
