//! Push notifications: configs made over both bindings and inline with a
//! send, every event delivered once and in order with the right headers,
//! retries after failures, a backlog drained once a receiver comes up,
//! deletes that stop delivery, refused and unsafe URLs, and a server with
//! push off answering as the spec requires.

use crate::common;
use crate::hook;

use std::sync::Arc;
use std::time::Duration;

use common::{user, Client, Gated, GatedAgent, TestServer};
use hook::{Answer, Hook};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(30);

/// A server with push on (loopback webhooks allowed, fast retries) whose
/// agent the test drives.
async fn push_server(gated: &Arc<Gated>) -> TestServer {
    TestServer::start(
        Arc::new(GatedAgent(gated.clone())),
        |c| {
            c.push.enabled = true;
            c.push.allow_private = true;
            c.push.retry_base = Duration::from_millis(5);
            c.push.retry_max = Duration::from_millis(50);
            c.push.failing_after = 3;
            c.push.failing_retry = Duration::from_millis(100);
        },
        None,
    )
    .await
}

/// An address nothing listens on (for now).
fn dead_port() -> std::net::SocketAddr {
    let parked = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    parked.local_addr().unwrap()
}

/// A blocking send of `text` with a push config to `url`: the answer.
async fn send_with(c: &Client, id: &str, text: &str, url: &str) -> Value {
    let config = json!({ "url": url });
    c.rpc(
        "SendMessage",
        json!({ "message": user(id, text),
            "configuration": { "taskPushNotificationConfig": config } }),
    )
    .await
    .1
}

/// A push server and a task of `chunks` artifact chunks that ran to its
/// end (its send answered) with a config at an address where nothing
/// listens: the server (its one delivery under way, retrying), that
/// address, and the send's answer.
async fn finished_for_nobody(chunks: usize) -> (TestServer, std::net::SocketAddr, Value) {
    let gated = Gated::new(chunks);
    let server = push_server(&gated).await;
    let addr = dead_port();
    let c = Client::new(&server.url, None);
    gated.open();
    let body = send_with(&c, "m1", "hi", &format!("http://{addr}/h")).await;
    let (_, health) = common::health(&server.url).await;
    assert_eq!(health["push"]["deliveries"], 1, "{health}");
    (server, addr, body)
}

/// Sends a message that returns at once; the task's id.
async fn begin(c: &Client, id: &str, config: Option<Value>) -> String {
    let mut configuration = json!({ "returnImmediately": true });
    if let Some(config) = config {
        configuration["taskPushNotificationConfig"] = config;
    }
    let (status, body) = c
        .rpc(
            "SendMessage",
            json!({ "message": user(id, "hi"), "configuration": configuration }),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    body["result"]["task"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {body}"))
        .to_string()
}

/// The events a task's stream would carry, in the order the receiver at
/// `path` accepted them: (seq, kind).
fn delivered(hook: &Hook, path: &str) -> Vec<(u64, String)> {
    hook.accepted(path)
        .iter()
        .map(|g| {
            let kind = g.body.as_object().unwrap().keys().next().unwrap().clone();
            (g.seq(), kind)
        })
        .collect()
}

/// The ids of a task's configs, as JSON-RPC lists them.
async fn config_ids(c: &Client, task: &str) -> Vec<String> {
    let (_, list) = c
        .rpc("ListTaskPushNotificationConfigs", json!({ "taskId": task }))
        .await;
    let configs = list["result"]["configs"].as_array();
    let configs = configs.unwrap_or_else(|| panic!("a listing: {list}"));
    configs
        .iter()
        .map(|c| c["id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_send_keeps_its_config_and_is_delivered_to_once() {
    let gated = Gated::new(1);
    let server = push_server(&gated).await;
    let (hook, base) = Hook::start(Answer::Ok).await;
    let c = Client::new(&server.url, None);
    let config = json!({ "id": "c1", "url": format!("{base}/h") });
    let task = begin(&c, "m1", Some(config.clone())).await;
    // The same message and config again: the same task, the config that
    // was stored with the message.
    assert_eq!(begin(&c, "m1", Some(config)).await, task);
    // With another config, the resend's is set beside it.
    let other = json!({ "id": "c2", "url": format!("{base}/h2") });
    assert_eq!(begin(&c, "m1", Some(other)).await, task);
    assert_eq!(config_ids(&c, &task).await, ["c1", "c2"]);
    gated.open();
    for path in ["/h", "/h2"] {
        assert!(
            hook.wait_for_state(path, "TASK_STATE_COMPLETED", WAIT)
                .await,
            "{path}: {:?}",
            hook.got()
        );
    }
    // WORKING, one chunk, COMPLETED, once each, to each config.
    let first = delivered(&hook, "/h");
    assert_eq!(first.len(), 3, "{first:?}");
    assert_eq!(delivered(&hook, "/h2"), first);
    assert_eq!(hook.got().len(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_event_arrives_once_in_order_with_its_headers() {
    let gated = Gated::new(2);
    let server = push_server(&gated).await;
    let (hook, base) = Hook::start(Answer::Ok).await;
    let c = Client::new(&server.url, None);

    // Inline with the send.
    let inline = json!({ "url": format!("{base}/inline"), "token": "tok-1",
        "authentication": { "scheme": "Bearer", "credentials": "secret" } });
    let task = begin(&c, "m1", Some(inline)).await;
    // Over JSON-RPC, and over HTTP+JSON, while the turn waits at its gate
    // (after its WORKING, which the inline config gets).
    assert!(
        hook.wait_for_state("/inline", "TASK_STATE_WORKING", WAIT)
            .await
    );
    let (status, body) = c
        .rpc(
            "CreateTaskPushNotificationConfig",
            json!({ "taskId": task, "id": "rpc", "url": format!("{base}/rpc") }),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        body["result"],
        json!({ "id": "rpc", "taskId": task, "url": format!("{base}/rpc") })
    );
    let (status, body) = c
        .rest(
            "POST",
            &format!("/tasks/{task}/pushNotificationConfigs"),
            Some(json!({ "id": "rest", "url": format!("{base}/rest") })),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["id"], "rest");

    gated.open();
    for path in ["/inline", "/rpc", "/rest"] {
        assert!(
            hook.wait_for_state(path, "TASK_STATE_COMPLETED", WAIT)
                .await,
            "{path}: {:?}",
            hook.got()
        );
    }
    // The inline config saw every update the turn wrote: WORKING, two
    // chunks, COMPLETED; the others those after they were made.
    let all = delivered(&hook, "/inline");
    let kinds: Vec<&str> = all.iter().map(|(_, k)| k.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "statusUpdate",
            "artifactUpdate",
            "artifactUpdate",
            "statusUpdate"
        ]
    );
    let seqs: Vec<u64> = all.iter().map(|(s, _)| *s).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    for path in ["/rpc", "/rest"] {
        let got = delivered(&hook, path);
        assert_eq!(got[..], all[1..], "{path}");
    }
    let first = &hook.accepted("/inline")[0];
    assert_eq!(
        first.header("content-type").unwrap(),
        "application/a2a+json"
    );
    assert_eq!(first.header("authorization").unwrap(), "Bearer secret");
    assert_eq!(first.header("x-a2a-notification-token").unwrap(), "tok-1");
    assert_eq!(first.body["statusUpdate"]["taskId"], task.as_str());
    assert!(hook.accepted("/rpc")[0].header("authorization").is_none());
    // Nothing was sent twice.
    assert_eq!(hook.got().len(), 4 + 3 + 3);

    // Reads over both bindings give the same configs.
    assert_eq!(config_ids(&c, &task).await, [task.as_str(), "rpc", "rest"]);
    // In pages of pageSize, in the order they were made.
    let page = |size: i64, token: &str| {
        let c = c.clone();
        let params = json!({ "taskId": task, "pageSize": size, "pageToken": token });
        async move { c.rpc("ListTaskPushNotificationConfigs", params).await.1 }
    };
    let first = page(2, "").await;
    let ids = |p: &serde_json::Value| -> Vec<String> {
        p["result"]["configs"].as_array().map_or(Vec::new(), |a| {
            a.iter()
                .map(|c| c["id"].as_str().unwrap().to_string())
                .collect()
        })
    };
    assert_eq!(ids(&first), [task.as_str(), "rpc"], "{first}");
    let token = first["result"]["nextPageToken"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!token.is_empty(), "{first}");
    let second = page(2, &token).await;
    assert_eq!(ids(&second), ["rest"], "{second}");
    assert_eq!(second["result"]["nextPageToken"], "", "{second}");
    assert_eq!(ids(&page(0, "").await).len(), 3);
    let bad = page(2, "zz").await;
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    let (status, got) = c
        .rest(
            "GET",
            &format!("/tasks/{task}/pushNotificationConfigs/rest"),
            None,
        )
        .await;
    assert_eq!(
        (status, got["url"].as_str()),
        (200, Some(&*format!("{base}/rest")))
    );
    let (_, got) = c
        .rpc(
            "GetTaskPushNotificationConfig",
            json!({ "taskId": task, "id": task }),
        )
        .await;
    assert_eq!(got["result"]["token"], "tok-1");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_retried_and_everything_arrives_in_order() {
    let gated = Gated::new(3);
    let server = push_server(&gated).await;
    let (hook, base) = Hook::start(Answer::Ok).await;
    // More failures than `failing_after`: the config is marked failing
    // and still delivered to.
    hook.fail_first
        .store(5, std::sync::atomic::Ordering::SeqCst);
    let c = Client::new(&server.url, None);
    let task = begin(&c, "m1", Some(json!({ "url": format!("{base}/h") }))).await;
    gated.open();
    assert!(
        hook.wait_for_state("/h", "TASK_STATE_COMPLETED", WAIT)
            .await
    );
    let got = delivered(&hook, "/h");
    assert_eq!(got.len(), 5, "{got:?}");
    assert!(got.windows(2).all(|w| w[0].0 < w[1].0), "{got:?}");
    // The failures were of the first event, sent again until accepted.
    let attempts = hook.got();
    assert_eq!(attempts.len(), 10);
    assert!(attempts[..6].iter().all(|g| g.seq() == attempts[0].seq()));
    let (_, health) = common::health(&server.url).await;
    // Delivered to again: no longer failing.
    assert_eq!(health["push"]["failing"], json!([]), "{health}");
    let bodies = hook.accepted("/h");
    assert!(bodies
        .iter()
        .all(|g| g.body.to_string().contains(task.as_str())));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_down_for_the_whole_task_gets_the_backlog_in_order() {
    let (server, addr, body) = finished_for_nobody(4).await;
    assert_eq!(
        body["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{body}"
    );
    // The receiver comes up on that port.
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let hook = Hook::serve(listener, Answer::Ok);
    assert!(
        hook.wait_for_state("/h", "TASK_STATE_COMPLETED", WAIT)
            .await
    );
    let got = delivered(&hook, "/h");
    assert_eq!(got.len(), 6, "{got:?}");
    assert!(got.windows(2).all(|w| w[0].0 < w[1].0), "{got:?}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_config_gets_nothing_more_and_delete_is_idempotent() {
    let gated = Gated::new(1);
    let server = push_server(&gated).await;
    let (hook, base) = Hook::start(Answer::Ok).await;
    let c = Client::new(&server.url, None);
    let task = begin(&c, "m1", None).await;
    for id in ["kept", "gone"] {
        let (status, _) = c
            .rpc(
                "CreateTaskPushNotificationConfig",
                json!({ "taskId": task, "id": id, "url": format!("{base}/{id}") }),
            )
            .await;
        assert_eq!(status, 200);
    }
    for _ in 0..2 {
        let (status, body) = c
            .rest(
                "DELETE",
                &format!("/tasks/{task}/pushNotificationConfigs/gone"),
                None,
            )
            .await;
        assert_eq!(status, 200, "{body}");
    }
    let (_, body) = c
        .rpc(
            "DeleteTaskPushNotificationConfig",
            json!({ "taskId": task, "id": "gone" }),
        )
        .await;
    assert_eq!(body["result"], json!({}));
    let (_, body) = c
        .rpc(
            "GetTaskPushNotificationConfig",
            json!({ "taskId": task, "id": "gone" }),
        )
        .await;
    assert_eq!(body["error"]["code"], -32001, "{body}");
    gated.open();
    assert!(
        hook.wait_for_state("/kept", "TASK_STATE_COMPLETED", WAIT)
            .await
    );
    assert!(hook.got().iter().all(|g| g.path == "/kept"));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsafe_urls_are_refused_redirects_not_followed_large_answers_cut() {
    let gated = Gated::new(0);
    let strict = TestServer::start(
        Arc::new(GatedAgent(gated.clone())),
        |c| c.push.enabled = true,
        None,
    )
    .await;
    let c = Client::new(&strict.url, None);
    let task = begin(&c, "m1", None).await;
    for url in [
        "http://127.0.0.1:9/h",
        "http://localhost/h",
        "http://10.0.0.1/h",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]/h",
        "https://127.0.0.1/h",
        "ftp://example.com/h",
        "",
    ] {
        let (_, body) = c
            .rpc(
                "CreateTaskPushNotificationConfig",
                json!({ "taskId": task, "url": url }),
            )
            .await;
        assert_eq!(body["error"]["code"], -32602, "{url}: {body}");
    }
    // Inline too, and then nothing is stored.
    let (_, body) = c
        .rpc(
            "SendMessage",
            json!({ "message": user("m2", "hi"), "configuration": {
                "taskPushNotificationConfig": { "url": "http://127.0.0.1:9/h" } } }),
        )
        .await;
    assert_eq!(body["error"]["code"], -32602, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("--allow-private-webhooks"), "{body}");
    gated.open();
    strict.stop().await;

    let gated = Gated::new(0);
    let server = push_server(&gated).await;
    let c = Client::new(&server.url, None);
    let (moved, moved_base) = Hook::start(Answer::Redirect).await;
    let (huge, huge_base) = Hook::start(Answer::Huge).await;
    let task = begin(&c, "m1", Some(json!({ "url": format!("{huge_base}/h") }))).await;
    c.rpc(
        "CreateTaskPushNotificationConfig",
        json!({ "taskId": task, "id": "moved", "url": format!("{moved_base}/h") }),
    )
    .await;
    gated.open();
    // The large answers are read only in part, and delivery goes on.
    assert!(
        huge.wait_for_state("/h", "TASK_STATE_COMPLETED", WAIT)
            .await
    );
    assert_eq!(delivered(&huge, "/h").len(), 2);
    // The redirect is retried, never followed.
    assert!(moved.wait(WAIT, |got| got.len() >= 3).await);
    assert!(moved.got().iter().all(|g| g.path == "/h"));
    // Past `failing_after` failures it is marked failing, and says why.
    assert!(moved.wait(WAIT, |got| got.len() >= 4).await);
    let (_, health) = common::health(&server.url).await;
    let failing = health["push"]["failing"].as_array().unwrap().clone();
    assert_eq!(failing.len(), 1, "{health}");
    assert_eq!(failing[0]["configId"], "moved");
    assert!(
        failing[0]["lastError"]
            .as_str()
            .unwrap()
            .contains("redirect"),
        "{health}"
    );
    assert!(
        !health.to_string().contains(&moved_base),
        "no URL in /healthz"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_push_every_method_answers_not_supported() {
    let plain = TestServer::start(Arc::new(ctxlog_server::agents::Echo), |_| {}, None).await;
    let c = Client::new(&plain.url, None);
    let (_, card) = c.rest("GET", "/.well-known/agent-card.json", None).await;
    assert_eq!(card["capabilities"]["pushNotifications"], false);
    for method in [
        "CreateTaskPushNotificationConfig",
        "GetTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
        "DeleteTaskPushNotificationConfig",
    ] {
        let (_, body) = c.rpc(method, json!({ "taskId": "t", "id": "x" })).await;
        assert_eq!(body["error"]["code"], -32003, "{method}: {body}");
    }
    for (method, path) in [
        ("POST", "/tasks/t/pushNotificationConfigs"),
        ("GET", "/tasks/t/pushNotificationConfigs"),
        ("GET", "/tasks/t/pushNotificationConfigs/x"),
        ("DELETE", "/tasks/t/pushNotificationConfigs/x"),
    ] {
        let (status, _) = c
            .rest(
                method,
                path,
                (method == "POST").then(|| json!({ "url": "http://x" })),
            )
            .await;
        assert_eq!(status, 400, "{method} {path}");
    }
    let (_, body) = c
        .rpc(
            "SendMessage",
            json!({ "message": user("m1", "hi"), "configuration": {
                "taskPushNotificationConfig": { "url": "http://example.com/h" } } }),
        )
        .await;
    assert_eq!(body["error"]["code"], -32003, "{body}");
    plain.stop().await;

    let gated = Gated::new(0);
    let server = push_server(&gated).await;
    let c = Client::new(&server.url, None);
    let (_, card) = c.rest("GET", "/.well-known/agent-card.json", None).await;
    assert_eq!(card["capabilities"]["pushNotifications"], true);
    // An unknown task is no task, for every method.
    let (_, body) = c
        .rpc(
            "CreateTaskPushNotificationConfig",
            json!({ "taskId": "nope", "url": "http://127.0.0.1:9/h" }),
        )
        .await;
    assert_eq!(body["error"]["code"], -32001, "{body}");
    let (status, _) = c
        .rest("GET", "/tasks/nope/pushNotificationConfigs", None)
        .await;
    assert_eq!(status, 404);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenants_task_and_configs_are_not_found() {
    let tokens = "alpha-token alice\nbeta-token bob\n";
    let gated = Gated::new(0);
    let server = TestServer::start(
        Arc::new(GatedAgent(gated.clone())),
        |c| {
            c.push.enabled = true;
            c.push.allow_private = true;
        },
        Some(tokens),
    )
    .await;
    let alice = Client::new(&server.url, Some("alpha-token"));
    let bob = Client::new(&server.url, Some("beta-token"));
    let task = begin(&alice, "m1", Some(json!({ "url": "http://127.0.0.1:9/h" }))).await;
    let (_, body) = alice
        .rpc("ListTaskPushNotificationConfigs", json!({ "taskId": task }))
        .await;
    assert_eq!(body["result"]["configs"].as_array().unwrap().len(), 1);
    for (method, params) in [
        ("ListTaskPushNotificationConfigs", json!({ "taskId": task })),
        (
            "GetTaskPushNotificationConfig",
            json!({ "taskId": task, "id": task }),
        ),
        (
            "DeleteTaskPushNotificationConfig",
            json!({ "taskId": task, "id": task }),
        ),
        (
            "CreateTaskPushNotificationConfig",
            json!({ "taskId": task, "url": "http://127.0.0.1:9/x" }),
        ),
    ] {
        let (_, body) = bob.rpc(method, params).await;
        assert_eq!(body["error"]["code"], -32001, "{method}: {body}");
    }
    // Bob's delete did nothing.
    let (_, body) = alice
        .rpc("ListTaskPushNotificationConfigs", json!({ "taskId": task }))
        .await;
    assert_eq!(body["result"]["configs"].as_array().unwrap().len(), 1);
    gated.open();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_with_deliveries_retrying_still_closes_the_store_cleanly() {
    // Nothing listens there: the delivery retries until the stop.
    let (server, _, _) = finished_for_nobody(0).await;
    let dir = server.stop().await;
    // The close wrote its checkpoint: nothing to read past it.
    let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default()).unwrap();
    let report = store.open_report();
    assert!(report.from_checkpoint && report.replayed == 0, "{report:?}");
    assert_eq!(store.push_tasks().unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_quick_tasks_get_every_update_even_the_last() {
    // Many tasks that end at once, their deliveries racing their turns:
    // each one's updates arrive, all of them, once. (A delivery that read
    // the task's state after its page could take the task for over
    // without its last update; the push bench's 3,000 deliveries caught
    // that once, this test is too small to be sure to.)
    let server = TestServer::start(
        Arc::new(ctxlog_server::agents::Echo),
        |c| {
            c.push.enabled = true;
            c.push.allow_private = true;
        },
        None,
    )
    .await;
    let (hook, base) = Hook::start(Answer::Ok).await;
    let c = Client::new(&server.url, None);
    let tasks = 40;
    let mut sends = Vec::new();
    for i in 0..tasks {
        let (c, url) = (c.clone(), format!("{base}/t{i}"));
        sends.push(tokio::spawn(async move {
            send_with(&c, &format!("m{i}"), "some words to echo", &url).await
        }));
    }
    let mut per_task = None;
    for (i, send) in sends.into_iter().enumerate() {
        let body = send.await.unwrap();
        assert!(body["result"].is_object(), "{body}");
        let path = format!("/t{i}");
        assert!(
            hook.wait(WAIT, |got| got.iter().any(|g| g.path == path
                && g.body["statusUpdate"]["status"]["state"]
                    == "TASK_STATE_COMPLETED"))
                .await,
            "{path}"
        );
        // Every task's updates, all of them, once.
        let n = delivered(&hook, &path).len();
        assert_eq!(*per_task.get_or_insert(n), n, "{path}");
    }
    assert!(per_task.unwrap() >= 2);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_hangs_holds_only_its_share_of_the_places() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::AsyncReadExt;

    // Accepts, reads, never answers; counts the connections open at once.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hang = format!("http://{}/h", listener.local_addr().unwrap());
    let open = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let (o, m) = (open.clone(), most.clone());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let (o, m) = (o.clone(), m.clone());
            tokio::spawn(async move {
                m.fetch_max(o.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                let mut buf = [0u8; 4096];
                while matches!(socket.read(&mut buf).await, Ok(n) if n > 0) {}
                o.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    let gated = Gated::new(0);
    let server = TestServer::start(
        Arc::new(GatedAgent(gated.clone())),
        |c| {
            c.push.enabled = true;
            c.push.allow_private = true;
            c.push.timeout = Duration::from_millis(300);
            c.push.retry_base = Duration::from_millis(5);
            c.push.retry_max = Duration::from_millis(20);
            // 8 places: 2 per host, 2 for retries.
            c.push.max_in_flight = 8;
        },
        None,
    )
    .await;
    let c = Client::new(&server.url, None);
    for i in 0..10 {
        gated.open();
        send_with(&c, &format!("h{i}"), "hi", &hang).await;
    }
    let (hook, base) = Hook::start(Answer::Ok).await;
    gated.open();
    send_with(&c, "ok", "hi", &format!("{base}/ok")).await;
    assert!(
        hook.wait_for_state("/ok", "TASK_STATE_COMPLETED", WAIT)
            .await
    );
    assert!(
        most.load(Ordering::SeqCst) >= 1,
        "the hanging receiver was reached"
    );
    assert!(
        most.load(Ordering::SeqCst) <= 2,
        "{} requests at once to one host",
        most.load(Ordering::SeqCst)
    );
    // The ten still try, at their pace.
    let (_, health) = common::health(&server.url).await;
    assert!(
        health["push"]["deliveries"].as_u64() >= Some(10),
        "{health}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_that_failed_take_only_the_retry_places() {
    use tokio::io::AsyncReadExt;

    // Eight receivers that close their first connection at once (a quick
    // failure) and hang on every later one.
    let connections = Arc::new(tokio::sync::Semaphore::new(0));
    let mut hanging = Vec::new();
    for _ in 0..8 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        hanging.push(format!("http://{}/h", listener.local_addr().unwrap()));
        let connections = connections.clone();
        tokio::spawn(async move {
            let mut first = true;
            while let Ok((mut socket, _)) = listener.accept().await {
                connections.add_permits(1);
                if std::mem::take(&mut first) {
                    continue;
                }
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    while matches!(socket.read(&mut buf).await, Ok(n) if n > 0) {}
                });
            }
        });
    }
    let gated = Gated::new(0);
    let server = TestServer::start(
        Arc::new(GatedAgent(gated.clone())),
        |c| {
            c.push.enabled = true;
            c.push.allow_private = true;
            // Longer than the test waits: a hanging request holds its
            // place throughout.
            c.push.timeout = Duration::from_secs(120);
            c.push.retry_base = Duration::from_millis(5);
            c.push.retry_max = Duration::from_millis(20);
            // 8 places: 2 per host, 2 for retries.
            c.push.max_in_flight = 8;
        },
        None,
    )
    .await;
    let c = Client::new(&server.url, None);
    // One config per receiver: its first request fails at once; two of
    // the retries hang on the two retry places, the others wait for one
    // (each holding one of its host's two places).
    for (i, url) in hanging.iter().enumerate() {
        gated.open();
        send_with(&c, &format!("first-{i}"), "hi", url).await;
    }
    let seen = tokio::time::timeout(WAIT, connections.acquire_many(10)).await;
    assert!(
        seen.is_ok(),
        "each receiver failed once, and two retries hang"
    );
    // A new config per receiver: their first requests would take all
    // eight healthy places (one per host is left) were the hosts not
    // known to fail.
    for (i, url) in hanging.iter().enumerate() {
        gated.open();
        send_with(&c, &format!("more-{i}"), "hi", url).await;
    }
    let (hook, base) = Hook::start(Answer::Ok).await;
    gated.open();
    send_with(&c, "ok", "hi", &format!("{base}/ok")).await;
    assert!(
        hook.wait_for_state("/ok", "TASK_STATE_COMPLETED", WAIT)
            .await,
        "a healthy receiver waited behind hosts that hang"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_webhooks_get_every_event_when_their_certificate_is_trusted() {
    let ca = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/tls/ca.pem");
    assert_eq!(ctxlog_server::check_webhook_ca(ca.as_ref()), Ok(1));
    assert!(ctxlog_server::check_webhook_ca("Cargo.toml".as_ref()).is_err());
    let (hook, base) = Hook::start_tls(Answer::Ok).await;
    for trusted in [true, false] {
        let gated = Gated::new(1);
        let server = TestServer::start(
            Arc::new(GatedAgent(gated.clone())),
            |c| {
                c.push.enabled = true;
                c.push.allow_private = true;
                c.push.retry_base = Duration::from_millis(5);
                c.push.retry_max = Duration::from_millis(20);
                c.push.failing_after = 2;
                c.push.failing_retry = Duration::from_millis(50);
                // Untrusted: roots that do not include the test CA.
                c.push.ca_file = Some(match trusted {
                    true => ca.into(),
                    false => ca.replace("ca.pem", "other-ca.pem").into(),
                });
            },
            None,
        )
        .await;
        let c = Client::new(&server.url, None);
        let path = format!("/{trusted}");
        let config = json!({ "url": format!("{base}{path}"), "token": "tls-token" });
        let task = begin(&c, "m1", Some(config)).await;
        gated.open();
        if trusted {
            assert!(
                hook.wait_for_state(&path, "TASK_STATE_COMPLETED", WAIT)
                    .await,
                "{:?}",
                hook.got()
            );
            let got = hook.accepted(&path);
            assert!(got
                .iter()
                .all(|g| g.header("x-a2a-notification-token").as_deref() == Some("tls-token")));
            let seqs: Vec<u64> = got.iter().map(|g| g.seq()).collect();
            assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
        } else {
            // Neither the system's roots nor the other CA know the test
            // CA: every handshake fails, nothing arrives, and after
            // `failing_after` failures the config is marked failing (a
            // third attempt comes only after that).
            assert!(hook.wait_handshakes_failed(3, WAIT).await);
            let (_, health) = common::health(&server.url).await;
            let failing = &health["push"]["failing"];
            assert_eq!(failing[0]["taskId"], task.as_str(), "{health}");
            let error = failing[0]["lastError"].as_str().unwrap();
            assert!(error.contains("TLS handshake"), "{error}");
            assert!(hook.accepted(&path).is_empty());
        }
        server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tokens_healthz_counts_failing_configs_and_names_none() {
    // /healthz answers without a token: with tenants, it says how many
    // configs fail and nothing of whose, which task, or where.
    let tokens = "alpha-token alice\n";
    let gated = Gated::new(0);
    let server = TestServer::start(
        Arc::new(GatedAgent(gated.clone())),
        |c| {
            c.push.enabled = true;
            c.push.allow_private = true;
            c.push.retry_base = Duration::from_millis(5);
            c.push.failing_after = 1;
        },
        Some(tokens),
    )
    .await;
    let alice = Client::new(&server.url, Some("alpha-token"));
    let hook = "http://127.0.0.1:9/secret-path";
    let task = begin(
        &alice,
        "m1",
        Some(json!({ "url": hook, "id": "cfg\nWARN forged" })),
    )
    .await;
    let deadline = std::time::Instant::now() + WAIT;
    let health = loop {
        let (_, health) = common::health(&server.url).await;
        if health["push"]["failingCount"].as_u64() >= Some(1) {
            break health;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never failing: {health}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let text = health.to_string();
    assert!(health["push"].get("failing").is_none(), "{health}");
    for secret in ["alice", task.as_str(), "cfg", "127.0.0.1:9", "secret-path"] {
        assert!(!text.contains(secret), "{secret} in {health}");
    }
    gated.open();
    server.stop().await;
}
