//! What the A2A project's conformance kit checks, on both bindings: media
//! types, the card's capabilities and cache headers, responses in the
//! spec's form (no member the proto does not define, no direct reply
//! listed or gettable as a task), and both ways of telling a resend.
//!
//! What broke, in an outside run of the kit: a message received with an
//! unknown member was served back with it (a strict reader refuses the
//! response); a direct reply was listed by ListTasks, its status carrying
//! a private `ctxlogDirectReply` member; the card declared an extended
//! card that was not configured; a JSON-RPC call with `text/plain` got
//! -32700 instead of -32005; and the kit's reuse of one messageId for
//! different messages was refused as a conflict where SDKs take messageIds
//! as labels.

use crate::common;

use std::sync::Arc;

use ctxlog_server::agents::{Echo, Script, Scripted};
use ctxlog_server::{Config, Idempotency};
use serde_json::{json, Value};

use common::{reason, user, Client, TestServer};

fn scripted() -> Arc<Scripted> {
    let script: Script = serde_json::from_value(json!({ "rules": [
        { "text": "hello", "steps": [ { "reply": "hi: {text}" } ] }
    ], "default": [ { "status": "TASK_STATE_COMPLETED", "text": "done: {text}" } ] }))
    .unwrap();
    Arc::new(Scripted::new(script))
}

async fn post(
    url: &str,
    path: &str,
    content_type: Option<&str>,
    accept: Option<&str>,
    body: &str,
) -> (u16, String, Value) {
    let mut r = reqwest::Client::new()
        .post(format!("{url}{path}"))
        .header("A2A-Version", "1.0")
        .body(body.to_string());
    if let Some(t) = content_type {
        r = r.header("content-type", t);
    }
    if let Some(a) = accept {
        r = r.header("accept", a);
    }
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    let ty = r
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let text = r.text().await.unwrap();
    (
        status,
        ty,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn rpc_body(method: &str, params: Value) -> String {
    json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params }).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_must_be_json_and_answers_come_in_the_clients_type() {
    let server = TestServer::start(Arc::new(Echo), |_| {}, None).await;
    let url = &server.url;
    let send = |id: &str| rpc_body("SendMessage", json!({ "message": user(id, "hi") }));
    // Another type is refused before the body is read.
    for ty in ["text/plain", "application/xml"] {
        let (status, _, body) = post(url, "/", Some(ty), None, "not json").await;
        assert_eq!(
            (status, body["error"]["code"].clone()),
            (200, json!(-32005)),
            "{ty}"
        );
        let rest = json!({ "message": user("r", "hi") }).to_string();
        let (status, _, body) = post(url, "/message:send", Some(ty), None, &rest).await;
        assert_eq!(status, 415, "{ty}: {body}");
        assert_eq!(reason(&body), "CONTENT_TYPE_NOT_SUPPORTED");
    }
    // A part whose media type the agent does not take (§3.1.1).
    let odd = json!({ "messageId": "odd", "role": "ROLE_USER",
                      "parts": [{ "raw": "dGNr", "mediaType": "application/x-unsupported" }] });
    let (status, _, body) = post(
        url,
        "/",
        Some("application/json"),
        None,
        &rpc_body("SendMessage", json!({ "message": odd.clone() })),
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (200, json!(-32005)),
        "{body}"
    );
    let rest = json!({ "message": odd }).to_string();
    let (status, _, body) = post(url, "/message:send", Some("application/json"), None, &rest).await;
    assert_eq!(
        (status, reason(&body)),
        (400, "CONTENT_TYPE_NOT_SUPPORTED".to_string())
    );
    // Both JSON types are taken (with parameters), and the answer is in
    // the type sent, or asked for, else application/json.
    for (i, (ty, accept, answered)) in [
        (Some("application/json"), None, "application/json"),
        (
            Some("application/a2a+json; charset=utf-8"),
            None,
            "application/a2a+json",
        ),
        (None, Some("application/a2a+json"), "application/a2a+json"),
        (None, None, "application/json"),
    ]
    .into_iter()
    .enumerate()
    {
        let (status, got, body) = post(url, "/", ty, accept, &send(&format!("j{i}"))).await;
        assert_eq!((status, got.as_str()), (200, answered), "{body}");
        let rest = json!({ "message": user(&format!("r{i}"), "hi") }).to_string();
        let (status, got, body) = post(url, "/message:send", ty, accept, &rest).await;
        assert_eq!((status, got.as_str()), (200, answered), "{body}");
        assert!(body["task"]["id"].is_string());
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_card_declares_what_is_configured_and_can_be_cached() {
    let plain = TestServer::start(Arc::new(Echo), |_| {}, None).await;
    let card_of = |url: String| async move {
        let r = reqwest::get(format!("{url}/.well-known/agent-card.json"))
            .await
            .unwrap();
        let headers = r.headers().clone();
        let card: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
        (headers, card)
    };
    let (headers, card) = card_of(plain.url.clone()).await;
    assert_eq!(card["capabilities"]["extendedAgentCard"], false);
    for h in ["etag", "last-modified", "cache-control"] {
        assert!(headers.contains_key(h), "{h}");
    }
    let c = Client::new(&plain.url, None);
    let (_, r) = c.rpc("GetExtendedAgentCard", json!({})).await;
    assert_eq!(r["error"]["code"], -32004, "{r}");
    let (status, _) = c.rest("GET", "/extendedAgentCard", None).await;
    assert_eq!(status, 400);
    // Conditional requests.
    let http = reqwest::Client::new();
    let at = format!("{}/.well-known/agent-card.json", plain.url);
    for (name, value) in [
        ("if-none-match", headers["etag"].clone()),
        ("if-modified-since", headers["last-modified"].clone()),
    ] {
        let r = http.get(&at).header(name, value).send().await.unwrap();
        assert_eq!(r.status(), 304, "{name}");
        assert_eq!(r.headers()["etag"], headers["etag"]);
    }
    let r = http
        .get(&at)
        .header("if-none-match", "\"other\"")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    plain.stop().await;

    let extended = json!({ "name": "more", "description": "the extended card" });
    let with = TestServer::start(
        Arc::new(Echo),
        |c: &mut Config| c.extended_card = Some(extended.clone()),
        None,
    )
    .await;
    let (_, card) = card_of(with.url.clone()).await;
    assert_eq!(card["capabilities"]["extendedAgentCard"], true);
    let (_, r) = Client::new(&with.url, None)
        .rpc("GetExtendedAgentCard", json!({}))
        .await;
    assert_eq!(r["result"], extended);
    with.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_carry_no_member_the_proto_does_not_define() {
    let server = TestServer::start(scripted(), |_| {}, None).await;
    let c = Client::new(&server.url, None);
    let mut m = user("u1", "with extras");
    m["xClientVersion"] = json!("2.1");
    m["parts"][0]["xTrace"] = json!({ "span": 7 });
    let (_, sent) = c.rpc("SendMessage", json!({ "message": m })).await;
    let task = &sent["result"]["task"];
    let first = &task["history"][0];
    assert_eq!(
        first["parts"][0],
        json!({ "text": "with extras" }),
        "{sent}"
    );
    assert!(first.get("xClientVersion").is_none());
    let id = task["id"].as_str().unwrap();
    for got in [
        c.rpc("GetTask", json!({ "id": id })).await.1["result"].clone(),
        c.rest("GET", &format!("/tasks/{id}"), None).await.1,
        c.rpc("ListTasks", json!({})).await.1["result"]["tasks"][0].clone(),
    ] {
        assert_eq!(
            got["history"][0]["parts"][0],
            json!({ "text": "with extras" })
        );
        assert!(got["history"][0].get("xClientVersion").is_none());
        assert!(got["status"].get("ctxlogDirectReply").is_none());
    }
    let events = c
        .sse("GET", &format!("/tasks/{id}:subscribe"), None, Some(0))
        .await
        .all()
        .await;
    assert!(!events.is_empty());
    for e in events {
        assert!(!e.data.to_string().contains("xTrace"), "{}", e.data);
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_reply_is_a_message_and_never_a_task() {
    let server = TestServer::start(scripted(), |_| {}, None).await;
    let c = Client::new(&server.url, None);
    let (_, answer) = c
        .rpc(
            "SendMessage",
            json!({ "message": user("h1", "hello there") }),
        )
        .await;
    let reply = &answer["result"]["message"];
    assert_eq!(reply["parts"][0]["text"], "hi: hello there", "{answer}");
    assert!(reply.get("taskId").is_none(), "{reply}");
    assert!(reply["contextId"].is_string());
    // Not listed, on either binding.
    let (_, listed) = c.rpc("ListTasks", json!({})).await;
    assert_eq!(listed["result"]["totalSize"], 0, "{listed}");
    let (_, listed) = c.rest("GET", "/tasks", None).await;
    assert_eq!(listed["totalSize"], 0);
    // A resend gets the reply again.
    let (_, again) = c
        .rpc(
            "SendMessage",
            json!({ "message": user("h1", "hello there") }),
        )
        .await;
    assert_eq!(again["result"]["message"], *reply);
    // The stored task behind it answers as one that does not exist. (Its
    // id is not the client's to know; the store keeps it, and the server
    // finds it here by listing the store's tasks of the context.)
    let tasks = {
        let dir = server.stop().await;
        let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default()).unwrap();
        let context = reply["contextId"].as_str().unwrap();
        let info = store.context_info("default", context).unwrap();
        assert_eq!(info.context_id, context);
        let id = store
            .find_received("default", user("h1", "hello there").to_string().as_bytes())
            .unwrap()
            .unwrap()
            .task_id;
        store.close().unwrap();
        (dir, id)
    };
    let (dir, task_id) = tasks;
    let server = TestServer::start_in(dir, scripted(), |_| {}, None).await;
    let c = Client::new(&server.url, None);
    for (_, r) in [
        c.rpc("GetTask", json!({ "id": task_id })).await,
        c.rpc("CancelTask", json!({ "id": task_id })).await,
    ] {
        assert_eq!(r["error"]["code"], -32001, "{r}");
    }
    let sub = c
        .sse("GET", &format!("/tasks/{task_id}:subscribe"), None, Some(0))
        .await;
    assert_eq!(sub.status, 404);
    let mut follow = user("h2", "more");
    follow["taskId"] = json!(task_id);
    let (_, r) = c.rpc("SendMessage", json!({ "message": follow })).await;
    assert_eq!(r["error"]["code"], -32001, "{r}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_ids_are_scoped_to_their_context_or_taken_as_labels() {
    // --idempotency message-id: two conversations may both begin at m1.
    let server = TestServer::start(Arc::new(Echo), |_| {}, None).await;
    let c = Client::new(&server.url, None);
    let in_context = |ctx: &str, text: &str| {
        let mut m = user("m1", text);
        m["contextId"] = json!(ctx);
        json!({ "message": m })
    };
    let (_, a) = c.rpc("SendMessage", in_context("ca", "first")).await;
    let (_, b) = c.rpc("SendMessage", in_context("cb", "second")).await;
    assert_ne!(a["result"]["task"]["id"], b["result"]["task"]["id"], "{b}");
    // The same content in the same context is a resend; other content a
    // conflict.
    let (_, again) = c.rpc("SendMessage", in_context("ca", "first")).await;
    assert_eq!(again["result"]["task"]["id"], a["result"]["task"]["id"]);
    let (_, clash) = c.rpc("SendMessage", in_context("ca", "changed")).await;
    assert_eq!(reason(&clash), "IDEMPOTENCY_CONFLICT", "{clash}");
    let (_, n1) = c
        .rpc("SendMessage", json!({ "message": user("n", "x") }))
        .await;
    let (_, n2) = c
        .rpc("SendMessage", json!({ "message": user("n", "y") }))
        .await;
    assert!(n1["result"]["task"].is_object());
    assert_eq!(reason(&n2), "IDEMPOTENCY_CONFLICT");
    server.stop().await;

    // --idempotency header: messageIds are labels.
    let server = TestServer::start(
        Arc::new(Echo),
        |c: &mut Config| c.idempotency = Idempotency::Header,
        None,
    )
    .await;
    let c = Client::new(&server.url, None);
    let (_, x) = c
        .rpc(
            "SendMessage",
            json!({ "message": user("tck-1", "Blocking request") }),
        )
        .await;
    let (_, y) = c
        .rpc(
            "SendMessage",
            json!({ "message": user("tck-1", "Non-blocking request") }),
        )
        .await;
    let (_, z) = c
        .rpc(
            "SendMessage",
            json!({ "message": user("tck-1", "Blocking request") }),
        )
        .await;
    let ids: Vec<&Value> = [&x, &y, &z]
        .iter()
        .map(|r| &r["result"]["task"]["id"])
        .collect();
    assert!(ids.iter().all(|i| i.is_string()), "{x} {y} {z}");
    assert!(ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2]);
    assert_eq!(
        z["result"]["task"]["status"]["message"]["parts"][0]["text"],
        json!("Blocking request (0 earlier turn(s) in this context)")
    );
    server.stop().await;
}

/// A keyed send: JSON-RPC or REST, blocking.
async fn keyed(c: &Client, rest: bool, key: &str, message: Value) -> (u16, Value) {
    let http = reqwest::Client::new();
    let (path, body) = match rest {
        true => ("/message:send".to_string(), json!({ "message": message })),
        false => (
            "/".to_string(),
            json!({ "jsonrpc": "2.0", "id": 9, "method": "SendMessage", "params": { "message": message } }),
        ),
    };
    let r = http
        .post(format!("{}{path}", c.base))
        .header("A2A-Version", "1.0")
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (
        status,
        serde_json::from_str(&r.text().await.unwrap()).unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotency_key_replays_its_first_answer_across_restarts() {
    for mode in [Idempotency::MessageId, Idempotency::Header] {
        let server = TestServer::start(
            Arc::new(Echo),
            move |c: &mut Config| c.idempotency = mode,
            None,
        )
        .await;
        let c = Client::new(&server.url, None);
        for rest in [false, true] {
            let key = format!("key-{rest}");
            let task = |r: &Value| {
                if rest {
                    r["task"].clone()
                } else {
                    r["result"]["task"].clone()
                }
            };
            let (_, first) = keyed(&c, rest, &key, user(&format!("k-{rest}"), "once")).await;
            let (_, replay) = keyed(&c, rest, &key, user(&format!("k-{rest}"), "once")).await;
            assert_eq!(
                task(&replay)["id"],
                task(&first)["id"],
                "{mode:?} {rest}: {replay}"
            );
            assert_eq!(task(&replay)["history"].as_array().unwrap().len(), 2);
            // The same key with another request.
            let (status, clash) = keyed(&c, rest, &key, user(&format!("k-{rest}"), "twice")).await;
            assert_eq!(reason(&clash), "IDEMPOTENCY_CONFLICT", "{clash}");
            assert_eq!(status, if rest { 422 } else { 200 });
            if !rest {
                assert_eq!(clash["error"]["code"], -32602);
            }
        }
        // Durable: a new process replays it.
        let dir = server.stop().await;
        let server = TestServer::start_in(
            dir,
            Arc::new(Echo),
            move |c: &mut Config| c.idempotency = mode,
            None,
        )
        .await;
        let c = Client::new(&server.url, None);
        let (_, after) = keyed(&c, false, "key-false", user("k-false", "once")).await;
        assert_eq!(
            after["result"]["task"]["history"].as_array().unwrap().len(),
            2,
            "{after}"
        );
        let (_, listed) = c.rpc("ListTasks", json!({})).await;
        assert_eq!(
            listed["result"]["totalSize"], 2,
            "{mode:?}: one task per key"
        );
        server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proto_field_names_are_read_as_their_json_names() {
    let server = TestServer::start(
        Arc::new(Echo),
        |c: &mut Config| {
            c.push.enabled = true;
            c.push.allow_private = true;
        },
        None,
    )
    .await;
    let c = Client::new(&server.url, None);
    let message = json!({ "message_id": "pn1", "context_id": "ctx-pn", "role": "ROLE_USER",
        "parts": [{ "text": "hello", "media_type": "text/plain" }],
        "metadata": { "user_id": "u_1" } });
    let (_, sent) = c
        .rpc(
            "SendMessage",
            json!({ "message": message, "configuration": { "history_length": 0 } }),
        )
        .await;
    let task = &sent["result"]["task"];
    assert_eq!(task["contextId"], "ctx-pn", "{sent}");
    assert!(
        task.get("history").is_none(),
        "history_length was ignored: {sent}"
    );
    let id = task["id"].as_str().unwrap();

    // Reads, both bindings: history_length is heard; what is served
    // back is in the JSON names, the client's metadata as sent.
    let (_, got) = c
        .rpc("GetTask", json!({ "id": id, "history_length": 1 }))
        .await;
    assert_eq!(
        got["result"]["history"].as_array().unwrap().len(),
        1,
        "{got}"
    );
    let (_, got) = c
        .rest("GET", &format!("/tasks/{id}?history_length=1"), None)
        .await;
    assert_eq!(got["history"].as_array().unwrap().len(), 1, "{got}");
    // An int32 may come as a string, as ProtoJSON allows.
    let (_, got) = c
        .rpc("GetTask", json!({ "id": id, "historyLength": "1" }))
        .await;
    assert_eq!(
        got["result"]["history"].as_array().unwrap().len(),
        1,
        "{got}"
    );
    let (_, bad) = c
        .rpc("GetTask", json!({ "id": id, "historyLength": "one" }))
        .await;
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    let (_, all) = c.rpc("GetTask", json!({ "id": id })).await;
    let first = &all["result"]["history"][0];
    assert_eq!(first["messageId"], "pn1", "{all}");
    assert_eq!(first["parts"][0]["mediaType"], "text/plain");
    assert_eq!(first["metadata"], json!({ "user_id": "u_1" }));
    assert!(first.get("message_id").is_none(), "{first}");
    let (_, listed) = c
        .rpc(
            "ListTasks",
            json!({ "context_id": "ctx-pn", "page_size": 1 }),
        )
        .await;
    assert_eq!(listed["result"]["tasks"][0]["id"], id, "{listed}");
    let (_, listed) = c.rest("GET", "/tasks?context_id=nowhere", None).await;
    assert_eq!(
        listed["tasks"],
        json!([]),
        "context_id was ignored: {listed}"
    );

    // Push configs over JSON-RPC name their task as task_id.
    let (_, made) = c
        .rpc(
            "CreateTaskPushNotificationConfig",
            json!({ "task_id": id, "id": "pc", "url": "http://127.0.0.1:9/hook" }),
        )
        .await;
    assert_eq!(made["result"]["taskId"], id, "{made}");
    let (_, configs) = c
        .rpc("ListTaskPushNotificationConfigs", json!({ "task_id": id }))
        .await;
    assert_eq!(configs["result"]["configs"][0]["id"], "pc", "{configs}");

    // A field under both names is refused, naming both.
    let (_, both) = c
        .rpc(
            "GetTask",
            json!({ "id": id, "history_length": 1, "historyLength": 2 }),
        )
        .await;
    assert_eq!(both["error"]["code"], -32602, "{both}");
    let text = both["error"]["message"].as_str().unwrap();
    assert!(
        text.contains("history_length") && text.contains("historyLength"),
        "{text}"
    );
    let (status, both) = c
        .rest(
            "GET",
            &format!("/tasks/{id}?history_length=1&historyLength=1"),
            None,
        )
        .await;
    assert_eq!(status, 400, "{both}");
    server.stop().await;
}
