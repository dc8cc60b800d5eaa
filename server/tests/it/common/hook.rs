//! A webhook receiver on 127.0.0.1 for the push tests: it records every
//! request (path, headers, JSON body) and answers as it is told: 2xx, a
//! failure for the first N requests, a redirect, or an oversized body.

#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use tokio::sync::Notify;

/// One request the receiver got.
#[derive(Debug, Clone)]
pub struct Got {
    pub path: String,
    pub headers: HeaderMap,
    pub body: Value,
    /// Answered with a 2xx.
    pub accepted: bool,
}

impl Got {
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_string())
    }

    /// The `ctxlog-event-seq` header.
    pub fn seq(&self) -> u64 {
        self.header("ctxlog-event-seq").unwrap().parse().unwrap()
    }
}

/// How the receiver answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Ok,
    /// 302 to `/moved` (which it would accept).
    Redirect,
    /// 200 with a body of 1 MiB.
    Huge,
}

#[derive(Default)]
pub struct Hook {
    got: Mutex<Vec<Got>>,
    arrived: Notify,
    /// Requests to answer 503 before accepting.
    pub fail_first: AtomicUsize,
    /// TLS handshakes that failed (a client that did not trust the
    /// certificate).
    handshakes_failed: AtomicUsize,
    answer: Mutex<Option<Answer>>,
}

impl Hook {
    /// Starts a receiver on `listener`; it serves until the test ends.
    pub fn serve(listener: tokio::net::TcpListener, answer: Answer) -> Arc<Hook> {
        let hook = Arc::new(Hook::default());
        *hook.answer.lock().unwrap() = Some(answer);
        let app = axum::Router::new()
            .fallback(receive)
            .with_state(hook.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        hook
    }

    /// Starts a receiver on a fresh loopback port that speaks TLS with
    /// the test certificate (tests/data/tls, signed by its `ca.pem`); its
    /// `https` base URL.
    pub async fn start_tls(answer: Answer) -> (Arc<Hook>, String) {
        use hyper_util::rt::TokioIo;
        use hyper_util::service::TowerToHyperService;
        use tokio_rustls::rustls::pki_types::pem::PemObject;
        use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/tls");
        let certs = CertificateDer::pem_file_iter(format!("{dir}/cert.pem"))
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_file(format!("{dir}/key.pem")).unwrap();
        let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
        let config = tokio_rustls::rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}", listener.local_addr().unwrap());
        let hook = Arc::new(Hook::default());
        *hook.answer.lock().unwrap() = Some(answer);
        let app = axum::Router::new()
            .fallback(receive)
            .with_state(hook.clone());
        let served = hook.clone();
        tokio::spawn(async move {
            let hook = served;
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let (acceptor, app, hook) = (acceptor.clone(), app.clone(), hook.clone());
                tokio::spawn(async move {
                    // A client that does not trust the certificate ends
                    // here: nothing is recorded.
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        hook.handshakes_failed.fetch_add(1, Ordering::SeqCst);
                        hook.arrived.notify_waiters();
                        return;
                    };
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), TowerToHyperService::new(app))
                        .await;
                });
            }
        });
        (hook, url)
    }

    /// Starts a receiver on a fresh loopback port; its base URL.
    pub async fn start(answer: Answer) -> (Arc<Hook>, String) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        (Hook::serve(listener, answer), url)
    }

    /// Every request so far.
    pub fn got(&self) -> Vec<Got> {
        self.got.lock().unwrap().clone()
    }

    /// The accepted requests to `path`.
    pub fn accepted(&self, path: &str) -> Vec<Got> {
        self.got()
            .into_iter()
            .filter(|g| g.accepted && g.path == path)
            .collect()
    }

    /// Waits (at most `limit`) until `done` holds of the requests so far;
    /// whether it did.
    pub async fn wait(&self, limit: Duration, done: impl Fn(&[Got]) -> bool) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            let notified = self.arrived.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if done(&self.got.lock().unwrap()) {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || tokio::time::timeout(left, notified).await.is_err() {
                return done(&self.got.lock().unwrap());
            }
        }
    }

    /// Waits (at most `limit`) until `n` TLS handshakes have failed;
    /// whether they did.
    pub async fn wait_handshakes_failed(&self, n: usize, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            let notified = self.arrived.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.handshakes_failed.load(Ordering::SeqCst) >= n {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || tokio::time::timeout(left, notified).await.is_err() {
                return self.handshakes_failed.load(Ordering::SeqCst) >= n;
            }
        }
    }

    /// Waits until `path` has accepted a request whose body holds a
    /// status of `state`.
    pub async fn wait_for_state(&self, path: &str, state: &str, limit: Duration) -> bool {
        self.wait(limit, |got| {
            got.iter()
                .any(|g| g.accepted && g.path == path && state_of(&g.body) == Some(state))
        })
        .await
    }
}

/// The state a pushed status update carries.
pub fn state_of(body: &Value) -> Option<&str> {
    body["statusUpdate"]["status"]["state"].as_str()
}

async fn receive(
    State(hook): State<Arc<Hook>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let failing = hook
        .fail_first
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok();
    let answer = hook.answer.lock().unwrap().unwrap_or(Answer::Ok);
    let accepted = !failing && (answer != Answer::Redirect || uri.path() == "/moved");
    hook.got.lock().unwrap().push(Got {
        path: uri.path().to_string(),
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        accepted,
    });
    hook.arrived.notify_waiters();
    if failing {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    match answer {
        Answer::Redirect if uri.path() != "/moved" => {
            (StatusCode::FOUND, [("location", "/moved")]).into_response()
        }
        Answer::Huge => (StatusCode::OK, vec![b'x'; 1 << 20]).into_response(),
        _ => StatusCode::NO_CONTENT.into_response(),
    }
}
