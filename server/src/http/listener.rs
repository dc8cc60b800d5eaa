//! The accept loop: each connection served by hyper's HTTP/1 with the
//! limits a server that runs for days needs against slow, idle and too
//! many clients.
//!
//! - A connection must send a complete request header within
//!   `header_timeout` of opening, or of the end of its last response: that
//!   bounds slow headers and idle keep-alive connections alike (hyper's
//!   `header_read_timeout`, whose timer starts when the connection waits
//!   for a request).
//! - A write that makes no progress for `write_timeout` (a client that
//!   stopped reading its stream) closes the connection ([`Stalling`]).
//! - At most `max_connections` connections are served at once; one past
//!   it gets a 503 at once and is closed, before the file descriptors run
//!   out.
//! - Bodies are read against their own deadlines ([`read_body`]).
//!
//! A shutdown stops accepting, and tells every connection to finish its
//! request and close (streams end on the same signal).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::HeaderMap;
use axum::Router;
use http_body_util::BodyExt;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tracing::{debug, warn};

use crate::error::A2aError;
use crate::state::Shared;

/// How long a shutdown waits for connections to finish their requests.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(5);

/// Serves `app` on `listener` until `shutdown` completes.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    shared: Arc<Shared>,
    shutdown: impl Future<Output = ()> + Send,
) -> io::Result<()> {
    let config = &shared.config;
    let places = Arc::new(Semaphore::new(config.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(config.header_timeout)
        .keep_alive(true);
    tokio::pin!(shutdown);
    loop {
        let (stream, _peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors, or a connection reset before
                    // it was taken: wait a moment rather than spin.
                    warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Ok(place) = places.clone().try_acquire_owned() else {
            tokio::spawn(refuse(stream));
            continue;
        };
        let _ = stream.set_nodelay(true);
        let io = TokioIo::new(Stalling::new(stream, config.write_timeout));
        let service = TowerToHyperService::new(app.clone());
        let connection = graceful.watch(http.serve_connection(io, service));
        let counted = shared.clone();
        counted.connections.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                debug!(error = %e, "a connection ended with an error");
            }
            counted.connections.fetch_sub(1, Ordering::Relaxed);
            drop(place);
        });
    }
    drop(listener);
    if tokio::time::timeout(SHUTDOWN_WAIT, graceful.shutdown())
        .await
        .is_err()
    {
        debug!("connections still open after the shutdown wait; they are dropped");
    }
    Ok(())
}

/// A connection past the cap: a 503 saying so, then closed (bounded: a
/// client that does not read it is dropped after a second).
async fn refuse(mut stream: TcpStream) {
    let error = A2aError::TooManyConnections;
    let body = error.rest_body().to_string();
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: \
         {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let write = async {
        stream.write_all(response.as_bytes()).await?;
        stream.shutdown().await
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), write).await;
}

/// Reads a request's body within the server's configured size and time
/// limits ([`read_body`]).
pub(crate) async fn read_request_body(
    shared: &crate::state::Shared,
    headers: &HeaderMap,
    body: Body,
) -> Result<Bytes, A2aError> {
    let config = &shared.config;
    read_body(
        headers,
        body,
        config.body_limit,
        config.body_timeout,
        config.body_min_rate,
    )
    .await
}

/// Reads a request body: refused at once (413) if its `Content-Length` is
/// past `limit`, and cut (408) if it does not arrive in time: each byte
/// must come within `grace` plus the time `min_rate` bytes a second give
/// the bytes before it, so a body that trickles in slower than the rate
/// (or never ends) is cut soon after the grace, and a large body sent at
/// any reasonable speed never is.
pub(crate) async fn read_body(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    grace: Duration,
    min_rate: u64,
) -> Result<Bytes, A2aError> {
    let declared = headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(A2aError::PayloadTooLarge(limit));
    }
    let start = tokio::time::Instant::now();
    let mut body = body;
    let mut bytes = Vec::with_capacity(declared.map_or(0, |n| n as usize));
    loop {
        let allowed = grace + Duration::from_secs_f64(bytes.len() as f64 / min_rate.max(1) as f64);
        let frame = match tokio::time::timeout_at(start + allowed, body.frame()).await {
            Err(_) => return Err(A2aError::BodyTimeout),
            Ok(None) => break,
            Ok(Some(Err(_))) => return Err(A2aError::BodyTimeout),
            Ok(Some(Ok(frame))) => frame,
        };
        if let Ok(data) = frame.into_data() {
            if bytes.len() + data.len() > limit {
                return Err(A2aError::PayloadTooLarge(limit));
            }
            bytes.extend_from_slice(&data);
        }
    }
    Ok(Bytes::from(bytes))
}

/// A stream whose writes fail (`TimedOut`) once one has made no progress
/// for `timeout`: the peer stopped reading. Reads are passed through
/// (their limits are hyper's header timeout and [`read_body`]'s).
pub(crate) struct Stalling<S> {
    inner: S,
    timeout: Duration,
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S> Stalling<S> {
    pub(crate) fn new(inner: S, timeout: Duration) -> Self {
        Stalling {
            inner,
            timeout,
            stalled: None,
        }
    }

    /// After a write attempt: progress clears the clock; none starts it, or
    /// fails the write once it has run out.
    fn watch<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match polled {
            Poll::Ready(result) => {
                self.stalled = None;
                Poll::Ready(result)
            }
            Poll::Pending => {
                let timeout = self.timeout;
                let clock = self
                    .stalled
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                match clock.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the client stopped reading",
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Stalling<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Stalling<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.watch(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.watch(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        // Hyper then queues large bodies' bytes instead of copying them.
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.watch(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The soft limit on open files, from `/proc/self/limits` (Linux), if it
/// can be read.
pub(crate) fn open_files_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}
