//! Slow, idle and too many clients, over raw TCP: each is cut by its limit
//! within a bounded time, and none of them stops the server answering
//! others.
//!
//! What broke: idle connections, slowloris headers, chunked bodies that
//! never end and bodies shorter than their Content-Length were held 45-63 s
//! and more; 20,115 idle connections used up the file descriptors and a
//! normal request timed out; a Content-Length above the body limit was read
//! before it was refused; a client that stopped reading its stream kept
//! the server's memory.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ctxlog::a2a::{Artifact, Part, TaskState};
use ctxlog_server::agents::Echo;
use ctxlog_server::{AgentError, AgentExecutor, BoxFuture, Config, EventSink, TurnContext};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use common::{user, Client, TestServer};

fn short(c: &mut Config) {
    c.header_timeout = Duration::from_millis(400);
    c.body_timeout = Duration::from_millis(400);
    c.body_min_rate = 1024;
    c.write_timeout = Duration::from_millis(400);
}

async fn connect(url: &str) -> TcpStream {
    TcpStream::connect(url.trim_start_matches("http://"))
        .await
        .unwrap()
}

/// Everything the server sends until it closes the connection, and how
/// long that took; panics if it is still open after `limit`.
async fn until_closed(stream: &mut TcpStream, limit: Duration) -> (String, Duration) {
    let start = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match tokio::time::timeout_at((start + limit).into(), stream.read(&mut buf)).await {
            Err(_) => panic!(
                "still open after {limit:?}: {}",
                String::from_utf8_lossy(&got)
            ),
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
    (String::from_utf8_lossy(&got).into_owned(), start.elapsed())
}

async fn connections(url: &str) -> u64 {
    common::health(url).await.1["connections"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_slow_header_and_slow_body_connections_are_cut() {
    let server = TestServer::start(Arc::new(Echo), short, None).await;
    // Idle from the start.
    let mut idle = connect(&server.url).await;
    let (_, took) = until_closed(&mut idle, Duration::from_secs(10)).await;
    assert!(took >= Duration::from_millis(300), "{took:?}");

    // Idle after a response (keep-alive).
    let mut kept = connect(&server.url).await;
    kept.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let (answer, _) = until_closed(&mut kept, Duration::from_secs(10)).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    // A header sent a byte at a time, forever.
    let mut slow = connect(&server.url).await;
    slow.write_all(b"POST / HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    let trickle = async {
        for _ in 0..100 {
            if slow.write_all(b"x").await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the slow header was never cut");
    };
    tokio::time::timeout(Duration::from_secs(10), trickle)
        .await
        .unwrap();

    // A chunked body that never ends, and a body shorter than its length.
    for head in [
        "POST / HTTP/1.1\r\nhost: x\r\na2a-version: 1.0\r\ncontent-type: application/json\r\n\
         transfer-encoding: chunked\r\n\r\n1\r\n{\r\n",
        "POST /message:send HTTP/1.1\r\nhost: x\r\na2a-version: 1.0\r\ncontent-type: \
         application/json\r\ncontent-length: 100\r\n\r\n{",
    ] {
        let mut body = connect(&server.url).await;
        body.write_all(head.as_bytes()).await.unwrap();
        let (answer, took) = until_closed(&mut body, Duration::from_secs(10)).await;
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("REQUEST_TIMEOUT"), "{answer}");
        assert!(took < Duration::from_secs(5), "{took:?}");
    }

    // A Content-Length past the limit is refused before any body is sent.
    let mut large = connect(&server.url).await;
    let head = format!(
        "POST / HTTP/1.1\r\nhost: x\r\na2a-version: 1.0\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n",
        (4 << 20) + 1
    );
    large.write_all(head.as_bytes()).await.unwrap();
    let (answer, _) = until_closed(&mut large, Duration::from_secs(10)).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");

    // A slow call is not a slow client: a blocking send that outlasts the
    // header timeout is answered.
    let c = Client::new(&server.url, None);
    let (_, done) = c
        .rpc("SendMessage", json!({ "message": user("m1", "hi") }))
        .await;
    assert_eq!(
        done["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_cap_get_503_and_the_server_still_answers() {
    let server = TestServer::start(
        Arc::new(Echo),
        |c| {
            c.max_connections = 4;
            c.header_timeout = Duration::from_secs(30);
        },
        None,
    )
    .await;
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(connect(&server.url).await);
    }
    for _ in 0..20 {
        let mut extra = connect(&server.url).await;
        let (answer, _) = until_closed(&mut extra, Duration::from_secs(10)).await;
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
        assert!(answer.contains("TOO_MANY_CONNECTIONS"), "{answer}");
    }
    // Let one go: a request gets through again (once the server has seen
    // the close).
    drop(held.pop());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut next = connect(&server.url).await;
        next.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let (answer, _) = until_closed(&mut next, Duration::from_secs(10)).await;
        if answer.starts_with("HTTP/1.1 200") {
            assert!(answer.contains("\"connections\":4"), "{answer}");
            break;
        }
        assert!(Instant::now() < deadline, "no place freed: {answer}");
    }
    drop(held);
    server.stop().await;
}

/// Completes each task with `chunks` artifact chunks of 1 MiB each.
struct Big {
    chunks: usize,
}

impl AgentExecutor for Big {
    fn execute(&self, _turn: TurnContext, events: EventSink) -> BoxFuture<Result<(), AgentError>> {
        let chunks = self.chunks;
        Box::pin(async move {
            for i in 0..chunks {
                let text = "x".repeat(1 << 20);
                let artifact = Artifact::new("big", vec![Part::text(text)]);
                events.artifact(artifact, i > 0, i + 1 == chunks).await?;
            }
            events.status(TaskState::Completed, None).await?;
            Ok(())
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_whose_client_stops_reading_is_cut() {
    let server = TestServer::start(Arc::new(Big { chunks: 24 }), short, None).await;
    let c = Client::new(&server.url, None);
    let (_, sent) = c
        .rpc("SendMessage", json!({ "message": user("m1", "big") }))
        .await;
    let id = sent["result"]["task"]["id"].as_str().unwrap().to_string();
    // A subscriber that asks for all 24 MiB of it, and reads none.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let addr = server.url.trim_start_matches("http://").parse().unwrap();
    let mut stalled = socket.connect(addr).await.unwrap();
    let head = format!(
        "GET /tasks/{id}:subscribe HTTP/1.1\r\nhost: x\r\na2a-version: 1.0\r\n\
         last-event-id: 0\r\n\r\n"
    );
    stalled.write_all(head.as_bytes()).await.unwrap();
    // Five times the write timeout without reading: the server has given
    // up on it (its writes made no progress) and closed the connection.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (got, _) = until_closed(&mut stalled, Duration::from_secs(20)).await;
    assert!(
        got.starts_with("HTTP/1.1 200"),
        "{}",
        &got[..got.len().min(200)]
    );
    assert!(
        got.len() < 24 << 20,
        "cut before the end: {} bytes",
        got.len()
    );
    // Only the health check's own connection is left.
    assert_eq!(connections(&server.url).await, 1);
    server.stop().await;
}
