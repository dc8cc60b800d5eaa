//! The server process killed (SIGKILL) mid-turn and mid-stream, then
//! started again on the same directory: nothing acknowledged is lost, the
//! restart policy resolves the interrupted turn, and a stream that
//! reconnects with `Last-Event-ID` gets exactly the events it missed.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{user, Client};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufStream};
use tokio::net::TcpStream;

use common::process;

use process::Process;

/// The server binary on `dir`, with `script` and the restart `policy`.
fn start(dir: &std::path::Path, script: &std::path::Path, policy: &str) -> Process {
    let scripted = format!("scripted:{}", script.display());
    let args = [
        "--dir".as_ref(),
        dir.as_os_str(),
        "--on-restart".as_ref(),
        policy.as_ref(),
        "--agent".as_ref(),
        scripted.as_ref(),
    ];
    Process::ctxlog_server(env!("CARGO_BIN_EXE_ctxlog-server"), &args, "info")
}

fn script(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("script.json");
    let script = json!({ "rules": [
        { "text": "stall", "steps": [
            { "status": "TASK_STATE_WORKING", "text": "on it" },
            { "pauseMs": 600000 },
            { "status": "TASK_STATE_COMPLETED", "text": "never" } ] },
        { "text": "resume", "steps": [
            { "status": "TASK_STATE_WORKING" },
            { "pauseMs": 300 },
            { "status": "TASK_STATE_COMPLETED", "text": "finished {text}" } ] },
        { "text": "chunks", "steps": [
            { "artifact": { "artifactId": "a1", "parts": [{ "text": "part 0" }] } },
            { "artifact": { "artifactId": "a1", "parts": [{ "text": "part 1" }] }, "append": true },
            { "pauseMs": 600000 },
            { "status": "TASK_STATE_COMPLETED" } ] }
    ]});
    std::fs::write(&path, script.to_string()).unwrap();
    path
}

/// Follows the task until it is WORKING.
async fn working(c: &Client, id: &str) {
    let mut sub = c
        .sse("POST", &format!("/tasks/{id}:subscribe"), None, None)
        .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let event = sub.next().await.expect("the stream goes on until WORKING");
        let state = event.data["task"]["status"]["state"]
            .as_str()
            .or(event.data["statusUpdate"]["status"]["state"].as_str());
        if state == Some("TASK_STATE_WORKING") {
            return;
        }
    }
    panic!("the task never became WORKING");
}

fn send_now(text: &str, id: &str) -> Value {
    json!({ "message": user(id, text), "configuration": { "returnImmediately": true } })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_killed_mid_way_is_failed_on_restart() {
    let dir = tempfile::tempdir().unwrap();
    let script = script(dir.path());
    let store = dir.path().join("store");
    let server = start(&store, &script, "fail");
    let c = Client::new(&server.url, None);
    let (_, body) = c.rpc("SendMessage", send_now("stall here", "k1")).await;
    let id = body["result"]["task"]["id"].as_str().unwrap().to_string();
    working(&c, &id).await;
    server.kill();

    let server = start(&store, &script, "fail");
    let c = Client::new(&server.url, None);
    let (_, got) = c.rpc("GetTask", json!({ "id": id })).await;
    let task = &got["result"];
    assert_eq!(task["status"]["state"], "TASK_STATE_FAILED", "{got}");
    let why = task["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap();
    assert!(why.contains("interrupted"), "{why}");
    // Nothing acknowledged is lost: the message and the WORKING status's.
    let texts: Vec<&str> = task["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["parts"][0]["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts[..2], ["stall here", "on it"]);
    // A resend is the same task, not a new turn.
    let (_, again) = c.rpc("SendMessage", send_now("stall here", "k1")).await;
    assert_eq!(again["result"]["task"]["id"], json!(id));
    assert_eq!(
        again["result"]["task"]["status"]["state"],
        "TASK_STATE_FAILED"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_killed_mid_way_is_run_again_under_resume() {
    let dir = tempfile::tempdir().unwrap();
    let script = script(dir.path());
    let store = dir.path().join("store");
    let server = start(&store, &script, "resume");
    let c = Client::new(&server.url, None);
    let (_, body) = c
        .rest("POST", "/message:send", Some(send_now("resume me", "r1")))
        .await;
    let id = body["task"]["id"].as_str().unwrap().to_string();
    working(&c, &id).await;
    server.kill();

    let server = start(&store, &script, "resume");
    let c = Client::new(&server.url, None);
    // A blocking resend waits for the resumed turn's outcome.
    let (_, done) = c
        .rest(
            "POST",
            "/message:send",
            Some(json!({ "message": user("r1", "resume me") })),
        )
        .await;
    assert_eq!(done["task"]["id"], json!(id));
    assert_eq!(
        done["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{done}"
    );
    assert_eq!(
        done["task"]["status"]["message"]["parts"][0]["text"],
        "finished resume me"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_by_a_kill_resumes_from_its_last_event_id_with_exactly_what_it_missed() {
    let dir = tempfile::tempdir().unwrap();
    let script = script(dir.path());
    let store = dir.path().join("store");
    let server = start(&store, &script, "fail");
    let c = Client::new(&server.url, None);
    let request = json!({ "jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
                          "params": { "message": user("s1", "chunks please") } });
    let mut stream = c.sse("POST", "/", Some(request), None).await;
    // Until the stream has shown the second chunk (the snapshot it starts
    // with may already hold either chunk).
    let mut seen = Vec::new();
    while !seen
        .iter()
        .any(|e: &common::Event| e.data.to_string().contains("part 1"))
    {
        seen.push(
            stream
                .next()
                .await
                .expect("the stream goes on until the second chunk"),
        );
    }
    let id = seen[0].data["result"]["task"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    server.kill();
    drop(stream);

    let server = start(&store, &script, "fail");
    let c = Client::new(&server.url, None);
    // The client kept only the first event it received; it asks for the rest.
    let last = seen[0].id.unwrap();
    let mut again = c
        .sse("POST", &format!("/tasks/{id}:subscribe"), None, Some(last))
        .await;
    let missed = again.all().await;
    // No gap and no duplicate: what it had, then what it got, is everything
    // the store holds for the task (its own message aside), in order.
    let mut all = c
        .sse("GET", &format!("/tasks/{id}:subscribe"), None, Some(0))
        .await;
    let everything = all.all().await;
    let ids = |events: &[common::Event]| events.iter().map(|e| e.id.unwrap()).collect::<Vec<_>>();
    let mut joined = vec![last];
    joined.extend(ids(&missed));
    // The snapshot's id is the number of events it reflects; the events
    // after it are the rest.
    let mut expected: Vec<u64> = ids(&everything).into_iter().filter(|&i| i > last).collect();
    expected.insert(0, last);
    assert_eq!(joined, expected);
    for (got, want) in missed
        .iter()
        .zip(everything.iter().skip_while(|e| e.id.unwrap() <= last))
    {
        assert_eq!(got.data, want.data);
    }
    let end = missed.last().unwrap();
    assert_eq!(
        end.data["statusUpdate"]["status"]["state"],
        "TASK_STATE_FAILED"
    );
    // A chunk sent before the kill that the client had not taken is there.
    if seen.len() > 1 {
        assert!(missed.iter().any(|e| e.data.to_string().contains("part 1")));
    }
}

/// The `syncedOnWorker` count `/healthz` gives, once it also sees
/// `connections` open (its own included).
async fn synced_on_worker(url: &str, connections: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, health) = common::health(url).await;
        if health["connections"].as_u64() >= Some(connections) {
            return health["syncedOnWorker"].as_u64().unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "never {connections} open: {health}"
        );
        tokio::task::yield_now().await;
    }
}

/// A script, written in `dir`, whose agent completes every task with its
/// message's text.
fn completing_agent(dir: &Path) -> std::path::PathBuf {
    let script = dir.join("once.json");
    let once = json!({ "default": [{ "status": "TASK_STATE_COMPLETED", "text": "{text}" }] });
    std::fs::write(&script, once.to_string()).unwrap();
    script
}

/// Restarts the server on `store`: every task of `ids` is COMPLETED, its
/// message's text the one given.
async fn all_completed(store: &Path, script: &Path, ids: &[(String, String)]) {
    let server = start(store, script, "fail");
    let c = Client::new(&server.url, None);
    for (id, text) in ids {
        let (_, got) = c.rpc("GetTask", json!({ "id": id })).await;
        let task = &got["result"];
        assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{got}");
        assert_eq!(task["history"][0]["parts"][0]["text"], json!(text), "{got}");
    }
}

/// Sends `text` as message `id` on `conn` and checks its task COMPLETED:
/// the task's id and the text, for [`all_completed`].
async fn send_completed(
    conn: &mut BufStream<TcpStream>,
    id: &str,
    text: String,
) -> (String, String) {
    let message = user(id, &text);
    let body = call_on(conn, "SendMessage", json!({ "message": message })).await;
    let task = &body["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{body}");
    (task["id"].as_str().unwrap().to_string(), text)
}

/// One JSON-RPC call on `conn`, an HTTP/1.1 connection kept open (a
/// pooling client may open a second one while the first is handed back).
async fn call_on(conn: &mut BufStream<TcpStream>, method: &str, params: Value) -> Value {
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
    let body = body.to_string();
    let head = format!(
        "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         A2A-Version: 1.0\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).await.unwrap();
    conn.write_all(body.as_bytes()).await.unwrap();
    conn.flush().await.unwrap();
    let mut length = None;
    loop {
        let mut line = String::new();
        conn.read_line(&mut line).await.unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().ok();
            }
        }
    }
    let mut body = vec![0; length.expect("the answer has a Content-Length")];
    conn.read_exact(&mut body).await.unwrap();
    serde_json::from_slice(&body).unwrap()
}

/// A lone client's writes are synced on the server's async worker rather
/// than by the store's syncer (`/healthz` counts them); with a second
/// connection open the syncer syncs them again. Either way, what a send
/// answered survives a SIGKILL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_clients_writes_synced_on_the_worker_survive_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let script = completing_agent(dir.path());
    let store = dir.path().join("store");
    let server = start(&store, &script, "fail");
    let address = server.url.trim_start_matches("http://").to_string();
    let mut conn = BufStream::new(TcpStream::connect(&address).await.unwrap());
    let mut ids = Vec::new();
    for i in 0..20 {
        ids.push(send_completed(&mut conn, &format!("m{i}"), format!("hello {i}")).await);
    }
    // Two writes a send: its message, and its turn's status.
    let alone = synced_on_worker(&server.url, 1).await;
    assert_eq!(alone, 40, "synced on the worker");

    let other = TcpStream::connect(&address).await.unwrap();
    let before = synced_on_worker(&server.url, 3).await;
    for i in 20..30 {
        ids.push(send_completed(&mut conn, &format!("m{i}"), format!("hello {i}")).await);
    }
    assert_eq!(synced_on_worker(&server.url, 3).await, before);
    drop(other);
    server.kill();

    all_completed(&store, &script, &ids).await;
}

/// Many sends in flight: the store's syncs linger so that more writes
/// share each (`/healthz` counts those that did); once sends are few
/// again, none lingers. Every answered send survives a SIGKILL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_sends_share_lingering_syncs_that_survive_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let script = completing_agent(dir.path());
    let store = dir.path().join("store");
    let server = start(&store, &script, "fail");
    let c = Client::new(&server.url, None);
    let clients: Vec<_> = (0..48)
        .map(|k| {
            let c = c.clone();
            tokio::spawn(async move {
                let mut ids = Vec::new();
                for i in 0..10 {
                    let text = format!("hello {k}/{i}");
                    let message = user(&format!("m{k}-{i}"), &text);
                    let (_, body) = c.rpc("SendMessage", json!({ "message": message })).await;
                    let task = &body["result"]["task"];
                    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{body}");
                    ids.push((task["id"].as_str().unwrap().to_string(), text));
                }
                ids
            })
        })
        .collect();
    let mut ids = Vec::new();
    for client in clients {
        ids.extend(client.await.unwrap());
    }
    let (_, health) = common::health(&server.url).await;
    let lingered = health["lingeredSyncs"].as_u64().unwrap();
    assert!(lingered > 0, "no sync lingered under 48 clients: {health}");
    assert!(
        health["groupSyncs"].as_u64().unwrap() >= lingered,
        "{health}"
    );

    // One send at a time, with a second connection open (so the syncer,
    // not the worker, syncs): no sync lingers any more.
    let address = server.url.trim_start_matches("http://").to_string();
    let mut conn = BufStream::new(TcpStream::connect(&address).await.unwrap());
    let other = TcpStream::connect(&address).await.unwrap();
    for i in 0..20 {
        ids.push(send_completed(&mut conn, &format!("a{i}"), format!("alone {i}")).await);
    }
    let (_, health) = common::health(&server.url).await;
    assert_eq!(
        health["lingeredSyncs"].as_u64().unwrap(),
        lingered,
        "a sync lingered with one send in flight: {health}"
    );
    drop(other);
    server.kill();

    all_completed(&store, &script, &ids).await;
}
