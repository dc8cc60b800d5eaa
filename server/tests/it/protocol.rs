//! The server over real HTTP on 127.0.0.1: every method on both bindings,
//! every error with its code, HTTP status and ErrorInfo reason, streams
//! (order, two subscribers, one dropping out, Last-Event-ID), resends,
//! the busy context, limits and malformed requests.

use crate::common;

use std::sync::Arc;

use common::{reason, user, Client, Gated, GatedAgent, TestServer};
use ctxlog_server::agents::{Echo, Script, Scripted};
use serde_json::{json, Value};

fn echo() -> Arc<Echo> {
    Arc::new(Echo)
}

/// The task of a SendMessage result (either binding).
fn task_of(result: &Value) -> &Value {
    &result["task"]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_method_on_both_bindings() {
    let server = TestServer::start(echo(), |_| {}, None).await;
    let c = Client::new(&server.url, None);

    // Send, both bindings; the echo agent counts the history it saw.
    let (status, body) = c
        .rpc("SendMessage", json!({ "message": user("m1", "hello") }))
        .await;
    assert_eq!(status, 200, "{body}");
    let first = task_of(&body["result"]).clone();
    assert_eq!(first["status"]["state"], "TASK_STATE_COMPLETED");
    let context = first["contextId"].as_str().unwrap().to_string();
    let mut follow = user("m2", "again");
    follow["contextId"] = json!(context);
    let (status, body) = c
        .rest("POST", "/message:send", Some(json!({ "message": follow })))
        .await;
    assert_eq!(status, 200, "{body}");
    let second = task_of(&body).clone();
    let reply = second["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap();
    // Its history held the first message and the agent's answer.
    assert!(reply.contains("2 earlier turn"), "{reply}");

    // Get, with historyLength.
    let id = second["id"].as_str().unwrap();
    let (_, got) = c
        .rpc("GetTask", json!({ "id": id, "historyLength": 1 }))
        .await;
    assert_eq!(got["result"]["history"].as_array().unwrap().len(), 1);
    let (status, got) = c
        .rest("GET", &format!("/tasks/{id}?historyLength=0"), None)
        .await;
    assert_eq!(status, 200);
    assert!(got.get("history").is_none(), "{got}");

    // List: filters, paging, newest first.
    let (_, page) = c
        .rpc("ListTasks", json!({ "contextId": context, "pageSize": 1 }))
        .await;
    let page = &page["result"];
    assert_eq!(page["totalSize"], 2);
    // Newest status first; the two may share a millisecond (then by id).
    let newest_first = {
        let at = |t: &Value| t["status"]["timestamp"].as_str().unwrap().to_string();
        let key = |t: &Value| {
            (
                std::cmp::Reverse(at(t)),
                t["id"].as_str().unwrap().to_string(),
            )
        };
        let mut both = [first.clone(), second.clone()];
        both.sort_by_key(key);
        both
    };
    assert_eq!(page["tasks"][0]["id"], newest_first[0]["id"]);
    assert!(page["tasks"][0].get("artifacts").is_none());
    let token = page["nextPageToken"].as_str().unwrap();
    let (status, rest) = c
        .rest(
            "GET",
            &format!(
                "/tasks?contextId={context}&pageSize=1&pageToken={token}&includeArtifacts=true"
            ),
            None,
        )
        .await;
    assert_eq!(status, 200, "{rest}");
    assert_eq!(rest["tasks"][0]["id"], newest_first[1]["id"]);
    assert_eq!(rest["nextPageToken"], "");
    assert!(rest["tasks"][0]["artifacts"].is_array());
    let (_, done) = c
        .rest(
            "GET",
            "/tasks?status=TASK_STATE_COMPLETED&statusTimestampAfter=2020-01-01T00:00:00Z",
            None,
        )
        .await;
    assert_eq!(done["totalSize"], 2);

    // Cancel: a terminal task is not cancelable, on both bindings.
    let (_, e) = c.rpc("CancelTask", json!({ "id": id })).await;
    assert_eq!(
        (e["error"]["code"].clone(), reason(&e)),
        (json!(-32002), "TASK_NOT_CANCELABLE".into())
    );
    let (status, e) = c.rest("POST", &format!("/tasks/{id}:cancel"), None).await;
    assert_eq!((status, reason(&e)), (400, "TASK_NOT_CANCELABLE".into()));

    // Subscribe to a terminal task without Last-Event-ID: refused.
    let (_, e) = c.rpc("SubscribeToTask", json!({ "id": id })).await;
    assert_eq!(e["error"]["code"], -32004);
    let sse = c
        .sse("POST", &format!("/tasks/{id}:subscribe"), None, None)
        .await;
    assert_eq!((sse.status, sse.is_sse), (400, false));

    // Extended card: not configured, so not declared (UnsupportedOperation).
    // Push configs: not supported.
    let (_, e) = c.rpc("GetExtendedAgentCard", json!({})).await;
    assert_eq!(e["error"]["code"], -32004);
    let (status, e) = c.rest("GET", "/extendedAgentCard", None).await;
    assert_eq!((status, reason(&e)), (400, "UNSUPPORTED_OPERATION".into()));
    for m in [
        "CreateTaskPushNotificationConfig",
        "GetTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
        "DeleteTaskPushNotificationConfig",
    ] {
        let (_, e) = c.rpc(m, json!({ "taskId": id })).await;
        assert_eq!(e["error"]["code"], -32003, "{m}");
    }
    let (status, e) = c
        .rest("GET", &format!("/tasks/{id}/pushNotificationConfigs"), None)
        .await;
    assert_eq!(
        (status, reason(&e)),
        (400, "PUSH_NOTIFICATION_NOT_SUPPORTED".into())
    );
    let (status, _) = c
        .rest(
            "DELETE",
            &format!("/tasks/{id}/pushNotificationConfigs/x"),
            None,
        )
        .await;
    assert_eq!(status, 400);

    // The agent card, with its cache headers.
    let r = reqwest::get(format!("{}/.well-known/agent-card.json", server.url))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let etag = r.headers()["etag"].to_str().unwrap().to_string();
    assert!(r.headers()["cache-control"]
        .to_str()
        .unwrap()
        .contains("max-age"));
    let card: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    assert_eq!(card["capabilities"]["pushNotifications"], false);
    let bindings: Vec<(&str, &str)> = card["supportedInterfaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            let text = |k: &str| i[k].as_str().unwrap();
            (text("protocolBinding"), text("protocolVersion"))
        })
        .collect();
    assert_eq!(
        bindings,
        [
            ("JSONRPC", "1.0"),
            ("HTTP+JSON", "1.0"),
            ("JSONRPC", "0.3"),
            ("HTTP+JSON", "0.3")
        ]
    );
    let again = reqwest::Client::new()
        .get(format!("{}/.well-known/agent-card.json", server.url))
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 304);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_carry_the_specs_codes_statuses_and_reasons() {
    let server = TestServer::start(echo(), |c| c.body_limit = 4096, None).await;
    let c = Client::new(&server.url, None);
    // JSON-RPC: malformed, not a request, unknown method, bad params.
    let (status, e) = c.raw_rpc(b"{not json".to_vec()).await;
    assert_eq!(
        (status, e["error"]["code"].clone(), e["id"].clone()),
        (200, json!(-32700), Value::Null)
    );
    let (_, e) = c
        .raw_rpc(br#"[{"jsonrpc":"2.0","id":1,"method":"GetTask"}]"#.to_vec())
        .await;
    assert_eq!(e["error"]["code"], -32600);
    let (_, e) = c
        .raw_rpc(br#"{"jsonrpc":"1.0","id":1,"method":"GetTask"}"#.to_vec())
        .await;
    // The error carries the request's id whenever it could be read.
    assert_eq!(
        (e["error"]["code"].clone(), e["id"].clone()),
        (json!(-32600), json!(1))
    );
    // Neither id nor method: no notification, an invalid request.
    let (status, e) = c.raw_rpc(br#"{"jsonrpc":"2.0"}"#.to_vec()).await;
    assert_eq!(
        (status, e["error"]["code"].clone(), e["id"].clone()),
        (200, json!(-32600), Value::Null)
    );
    let (_, e) = c.raw_rpc(br#"{"jsonrpc":"2.0","id":"r1"}"#.to_vec()).await;
    assert_eq!(
        (e["error"]["code"].clone(), e["id"].clone()),
        (json!(-32600), json!("r1"))
    );
    let (_, e) = c
        .raw_rpc(br#"{"jsonrpc":"2.0","id":"r2","method":7}"#.to_vec())
        .await;
    assert_eq!(
        (e["error"]["code"].clone(), e["id"].clone()),
        (json!(-32600), json!("r2"))
    );
    let (_, e) = c
        .raw_rpc(br#"{"jsonrpc":"2.0","id":{},"method":"GetTask"}"#.to_vec())
        .await;
    assert_eq!(e["error"]["code"], -32600);
    let (_, e) = c.rpc("message/send", json!({})).await;
    assert_eq!(
        (e["error"]["code"].clone(), e["id"].clone()),
        (json!(-32601), json!(7))
    );
    let (_, e) = c.rpc("GetTask", json!({ "historyLength": 3 })).await;
    assert_eq!(e["error"]["code"], -32602);
    let (_, e) = c
        .rpc("GetTask", json!({ "id": "x", "historyLength": -1 }))
        .await;
    assert_eq!(e["error"]["code"], -32602);
    let (_, e) = c.rpc("SendMessage", json!({ "message": { "messageId": "m", "role": "ROLE_AGENT", "parts": [{ "text": "x" }] } })).await;
    assert_eq!(e["error"]["code"], -32602);
    // A JSON-RPC error object holds code, message and data only.
    let keys: Vec<&String> = e["error"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["code", "data", "message"]);
    assert_eq!(e["error"]["data"][0]["domain"], "a2a-protocol.org");
    // A notification gets no answer.
    let r = reqwest::Client::new()
        .post(format!("{}/", server.url))
        .header("A2A-Version", "1.0")
        .body(r#"{"jsonrpc":"2.0","method":"GetTask","params":{"id":"x"}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    // REST: malformed JSON, unknown route, unknown task, bad query.
    let r = reqwest::Client::new()
        .post(format!("{}/message:send", server.url))
        .header("A2A-Version", "1.0")
        .body("{")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let body: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    assert_eq!(body["error"]["status"], "INVALID_ARGUMENT");
    let (status, e) = c.rest("GET", "/nowhere", None).await;
    assert_eq!((status, reason(&e)), (404, "METHOD_NOT_FOUND".into()));
    let (status, e) = c.rest("GET", "/tasks/unknown", None).await;
    assert_eq!(
        (status, reason(&e), e["error"]["status"].clone()),
        (404, "TASK_NOT_FOUND".into(), json!("NOT_FOUND"))
    );
    let (status, _) = c.rest("GET", "/tasks?pageSize=many", None).await;
    assert_eq!(status, 400);
    let (status, _) = c.rest("GET", "/tasks?pageSize=500", None).await;
    assert_eq!(status, 400);
    let (status, _) = c.rest("GET", "/tasks?status=DONE", None).await;
    assert_eq!(status, 400);
    // The version: missing or 0.3 is v0.3, whose methods have other
    // names (the error says which header to send); one unknown is refused.
    for version in [None, Some("0.3")] {
        let mut r = reqwest::Client::new()
            .post(format!("{}/", server.url))
            .body(r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"x"}}"#);
        if let Some(v) = version {
            r = r.header("A2A-Version", v);
        }
        let body: Value =
            serde_json::from_str(&r.send().await.unwrap().text().await.unwrap()).unwrap();
        assert_eq!(body["error"]["code"], -32601, "{version:?}");
        let says = body["error"]["message"].as_str().unwrap();
        assert!(says.contains("A2A-Version: 1.0"), "{says}");
    }
    for version in [Some("2.0")] {
        let mut r = reqwest::Client::new()
            .post(format!("{}/", server.url))
            .body(r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"x"}}"#);
        if let Some(v) = version {
            r = r.header("A2A-Version", v);
        }
        let body: Value =
            serde_json::from_str(&r.send().await.unwrap().text().await.unwrap()).unwrap();
        assert_eq!(body["error"]["code"], -32009, "{version:?}");
        let r = reqwest::get(format!("{}/tasks/x", server.url))
            .await
            .unwrap();
        assert_eq!(r.status(), 400);
        let body: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
        assert_eq!(reason(&body), "VERSION_NOT_SUPPORTED");
    }
    let r = reqwest::get(format!("{}/tasks/x?A2A-Version=1.0", server.url))
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    // The body limit.
    let big = json!({ "message": user("big", &"x".repeat(10_000)) });
    let (status, e) = c.rpc("SendMessage", big.clone()).await;
    assert_eq!((status, e["error"]["code"].clone()), (413, json!(-32600)));
    let (status, e) = c.rest("POST", "/message:send", Some(big)).await;
    assert_eq!((status, e["error"]["code"].clone()), (413, json!(413)));
    // Resend with other content: IDEMPOTENCY_CONFLICT; a key twice: invalid.
    c.rpc("SendMessage", json!({ "message": user("same", "first") }))
        .await;
    let (_, e) = c
        .rpc("SendMessage", json!({ "message": user("same", "second") }))
        .await;
    assert_eq!(
        (e["error"]["code"].clone(), reason(&e)),
        (json!(-32602), "IDEMPOTENCY_CONFLICT".into())
    );
    let twice = br#"{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"d","role":"ROLE_USER","parts":[{"text":"a"}],"parts":[{"text":"b"}]}}}"#;
    let (_, e) = c.raw_rpc(twice.to_vec()).await;
    assert_eq!(e["error"]["code"], -32602);
    assert!(e["error"]["message"]
        .as_str()
        .unwrap()
        .contains("\"parts\""));
    // A message to a task that does not exist; context and task mismatch.
    let mut m = user("t1", "x");
    m["taskId"] = json!("no-such-task");
    let (_, e) = c.rpc("SendMessage", json!({ "message": m })).await;
    assert_eq!(e["error"]["code"], -32001);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_to_a_finished_task_is_refused_and_a_follow_up_is_a_new_task() {
    let server = TestServer::start(echo(), |_| {}, None).await;
    let c = Client::new(&server.url, None);
    let (_, body) = c
        .rpc("SendMessage", json!({ "message": user("m1", "hi") }))
        .await;
    let task = task_of(&body["result"]).clone();
    let mut again = user("m2", "more");
    again["taskId"] = task["id"].clone();
    let (_, e) = c.rpc("SendMessage", json!({ "message": again })).await;
    assert_eq!(
        (e["error"]["code"].clone(), reason(&e)),
        (json!(-32004), "UNSUPPORTED_OPERATION".into())
    );
    let mut mismatch = user("m3", "more");
    mismatch["taskId"] = task["id"].clone();
    mismatch["contextId"] = json!("another-context");
    let (_, e) = c.rpc("SendMessage", json!({ "message": mismatch })).await;
    assert_eq!(e["error"]["code"], -32602);
    let mut refine = user("m4", "refine");
    refine["contextId"] = task["contextId"].clone();
    refine["referenceTaskIds"] = json!([task["id"]]);
    let (_, body) = c.rpc("SendMessage", json!({ "message": refine })).await;
    let follow = task_of(&body["result"]);
    assert_ne!(follow["id"], task["id"]);
    assert_eq!(follow["contextId"], task["contextId"]);
    assert_eq!(follow["history"][0]["referenceTaskIds"][0], task["id"]);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resend_never_runs_the_agent_twice() {
    let gated = Gated::new(1);
    let server = TestServer::start(Arc::new(GatedAgent(gated.clone())), |_| {}, None).await;
    let c = Client::new(&server.url, None);
    let send =
        json!({ "message": user("once", "do it"), "configuration": { "returnImmediately": true } });
    let (_, first) = c.rpc("SendMessage", send.clone()).await;
    let task = task_of(&first["result"]).clone();
    // While the turn runs, and after it finished: the same task, no new turn.
    let (_, again) = c.rpc("SendMessage", send.clone()).await;
    assert_eq!(task_of(&again["result"])["id"], task["id"]);
    gated.open();
    let blocking = json!({ "message": user("once", "do it") });
    let (_, done) = c.rest("POST", "/message:send", Some(blocking)).await;
    assert_eq!(task_of(&done)["id"], task["id"]);
    assert_eq!(task_of(&done)["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(gated.calls(), 1);
    // And after a restart on the same store.
    let dir = server.stop().await;
    let server = TestServer::start_in(dir, Arc::new(GatedAgent(gated.clone())), |_| {}, None).await;
    let c = Client::new(&server.url, None);
    let (_, again) = c.rpc("SendMessage", send).await;
    assert_eq!(task_of(&again["result"])["id"], task["id"]);
    assert_eq!(
        task_of(&again["result"])["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    assert_eq!(gated.calls(), 1);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_send_events_in_order_to_every_subscriber_and_resume_from_last_event_id() {
    let gated = Gated::new(3);
    let server = TestServer::start(Arc::new(GatedAgent(gated.clone())), |_| {}, None).await;
    let c = Client::new(&server.url, None);
    // The streaming send (JSON-RPC): the task first, once the agent spoke.
    let body = json!({ "jsonrpc": "2.0", "id": "s1", "method": "SendStreamingMessage",
                       "params": { "message": user("st", "stream") } });
    let mut stream = c.sse("POST", "/", Some(body), None).await;
    assert!(stream.is_sse);
    let first = stream.next().await.unwrap();
    assert_eq!(first.data["id"], "s1");
    let task = first.data["result"]["task"].clone();
    assert_eq!(task["status"]["state"], "TASK_STATE_WORKING");
    let id = task["id"].as_str().unwrap().to_string();
    // Two more subscribers (REST, POST and GET); one drops out at once.
    let mut a = c
        .sse("POST", &format!("/tasks/{id}:subscribe"), None, None)
        .await;
    let mut b = c
        .sse("GET", &format!("/tasks/{id}:subscribe"), None, None)
        .await;
    let snapshot_a = a.next().await.unwrap();
    assert!(snapshot_a.data["task"].is_object());
    let snapshot_b = b.next().await.unwrap();
    assert_eq!(snapshot_a.id, snapshot_b.id);
    drop(b);
    gated.open();
    let rest_of_a = a.all().await;
    let rest_of_send = stream.all().await;
    // The same events, in the same order, with ascending ids; the stream
    // ends after the terminal status.
    let ids = |events: &[common::Event]| events.iter().map(|e| e.id.unwrap()).collect::<Vec<_>>();
    assert_eq!(ids(&rest_of_a), ids(&rest_of_send));
    assert!(ids(&rest_of_a).windows(2).all(|w| w[0] < w[1]));
    let kinds: Vec<&str> = rest_of_a
        .iter()
        .map(|e| {
            if e.data["artifactUpdate"].is_object() {
                "artifact"
            } else {
                "status"
            }
        })
        .collect();
    assert_eq!(kinds, ["artifact", "artifact", "artifact", "status"]);
    assert_eq!(
        rest_of_a[3].data["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    for (x, y) in rest_of_a.iter().zip(&rest_of_send) {
        assert_eq!(x.data, y.data["result"]);
    }
    // A reconnect with Last-Event-ID gets exactly the events after it,
    // replayed from the store, also though the task is terminal now.
    let after = rest_of_a[0].id.unwrap();
    let mut again = c
        .sse("POST", &format!("/tasks/{id}:subscribe"), None, Some(after))
        .await;
    let replayed = again.all().await;
    assert_eq!(ids(&replayed), ids(&rest_of_a)[1..]);
    for (x, y) in replayed.iter().zip(&rest_of_a[1..]) {
        assert_eq!(x.data, y.data);
    }
    let (_, bad) = c.rpc("SubscribeToTask", json!({ "id": id })).await;
    assert_eq!(bad["error"]["code"], -32004);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_the_turn_and_tells_every_subscriber() {
    let gated = Gated::new(1);
    let server = TestServer::start(Arc::new(GatedAgent(gated.clone())), |_| {}, None).await;
    let c = Client::new(&server.url, None);
    let send =
        json!({ "message": user("c1", "slow"), "configuration": { "returnImmediately": true } });
    let (_, body) = c.rest("POST", "/message:send", Some(send)).await;
    let id = task_of(&body)["id"].as_str().unwrap().to_string();
    let mut sub = c
        .sse("POST", &format!("/tasks/{id}:subscribe"), None, None)
        .await;
    sub.next().await.unwrap();
    let (_, canceled) = c.rpc("CancelTask", json!({ "id": id })).await;
    assert_eq!(canceled["result"]["status"]["state"], "TASK_STATE_CANCELED");
    let events = sub.all().await;
    assert_eq!(
        events.last().unwrap().data["statusUpdate"]["status"]["state"],
        "TASK_STATE_CANCELED"
    );
    let (_, got) = c.rpc("GetTask", json!({ "id": id })).await;
    assert_eq!(got["result"]["status"]["state"], "TASK_STATE_CANCELED");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_context_is_refused_under_the_single_active_turn_policy() {
    let gated = Gated::new(0);
    let server = TestServer::start(
        Arc::new(GatedAgent(gated.clone())),
        |c| c.single_active_turn = true,
        None,
    )
    .await;
    let c = Client::new(&server.url, None);
    let send =
        json!({ "message": user("b1", "first"), "configuration": { "returnImmediately": true } });
    let (_, body) = c.rpc("SendMessage", send.clone()).await;
    let task = task_of(&body["result"]).clone();
    let mut second = user("b2", "second");
    second["contextId"] = task["contextId"].clone();
    let (status, e) = c
        .rest(
            "POST",
            "/message:send",
            Some(json!({ "message": second.clone() })),
        )
        .await;
    assert_eq!((status, reason(&e)), (400, "CONTEXT_BUSY".into()));
    assert_eq!(
        e["error"]["details"][0]["metadata"]["taskId"], task["id"],
        "{e}"
    );
    let (_, e) = c
        .rpc("SendMessage", json!({ "message": second.clone() }))
        .await;
    assert_eq!(
        (e["error"]["code"].clone(), reason(&e)),
        (json!(-32004), "CONTEXT_BUSY".into())
    );
    // A resend of the running turn's message is not refused.
    let (_, again) = c.rpc("SendMessage", send).await;
    assert_eq!(task_of(&again["result"])["id"], task["id"]);
    gated.open();
    let (_, done) = c
        .rpc("SendMessage", json!({ "message": user("b1", "first") }))
        .await;
    assert_eq!(
        task_of(&done["result"])["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    // Once the turn is over, the context takes the next message.
    gated.open();
    let (_, next) = c.rpc("SendMessage", json!({ "message": second })).await;
    assert_eq!(
        task_of(&next["result"])["status"]["state"],
        "TASK_STATE_COMPLETED",
        "{next}"
    );
    assert_eq!(gated.calls(), 2);
    server.stop().await;
}

fn scripted(script: Value) -> Arc<Scripted> {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), script.to_string()).unwrap();
    Arc::new(Scripted::new(Script::load(file.path()).unwrap()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_breaks_the_rules_fails_its_task_with_invalid_agent_response() {
    let agent = scripted(json!({ "rules": [
        { "text": "twice", "steps": [
            { "status": "TASK_STATE_COMPLETED", "text": "done" },
            { "status": "TASK_STATE_WORKING" } ] },
        { "text": "append", "steps": [
            { "artifact": { "artifactId": "nope", "parts": [{ "text": "x" }] }, "append": true } ] },
        { "text": "silent", "steps": [ { "status": "TASK_STATE_WORKING" } ] },
        { "text": "hello", "steps": [ { "reply": "hi, {text}" } ] }
    ]}));
    let server = TestServer::start(agent, |_| {}, None).await;
    let c = Client::new(&server.url, None);
    // A bad event after the task completed comes too late for the client,
    // who got the completed task; the agent gets the refusal.
    let (_, r) = c
        .rpc("SendMessage", json!({ "message": user("i0", "twice") }))
        .await;
    assert_eq!(
        task_of(&r["result"])["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    for (n, text) in ["append", "silent"].iter().enumerate() {
        let (_, e) = c
            .rpc(
                "SendMessage",
                json!({ "message": user(&format!("i{}", n + 1), text) }),
            )
            .await;
        assert_eq!(
            (e["error"]["code"].clone(), reason(&e)),
            (json!(-32006), "INVALID_AGENT_RESPONSE".into()),
            "{text}: {e}"
        );
    }
    let (_, list) = c.rpc("ListTasks", json!({})).await;
    let states: Vec<&str> = list["result"]["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["status"]["state"].as_str().unwrap())
        .collect();
    // The others FAILED.
    assert_eq!(
        states.iter().filter(|s| **s == "TASK_STATE_FAILED").count(),
        2,
        "{states:?}"
    );
    // A direct reply: a message, also on a resend, and as the stream's one event.
    let (_, r) = c
        .rpc("SendMessage", json!({ "message": user("h1", "hello") }))
        .await;
    assert_eq!(r["result"]["message"]["parts"][0]["text"], "hi, hello");
    assert!(r["result"].get("task").is_none());
    let (_, r) = c
        .rest(
            "POST",
            "/message:send",
            Some(json!({ "message": user("h1", "hello") })),
        )
        .await;
    assert_eq!(r["message"]["parts"][0]["text"], "hi, hello");
    let mut s = c
        .sse(
            "POST",
            "/message:stream",
            Some(json!({ "message": user("h2", "hello") })),
            None,
        )
        .await;
    let events = s.all().await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].data["message"]["role"], "ROLE_AGENT");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_see_only_their_own_tasks_on_every_path() {
    let tokens = "alpha-token alice\nbeta-token bob\n";
    let server = TestServer::start(echo(), |_| {}, Some(tokens)).await;
    let alice = Client::new(&server.url, Some("alpha-token"));
    let bob = Client::new(&server.url, Some("beta-token"));
    let nobody = Client::new(&server.url, None);
    let wrong = Client::new(&server.url, Some("beta-tokeN"));
    for c in [&nobody, &wrong] {
        let r = reqwest::Client::new()
            .post(format!("{}/", server.url))
            .header("A2A-Version", "1.0")
            .bearer_auth(c.token.clone().unwrap_or_default())
            .body(r#"{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401);
        assert!(r.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .starts_with("Bearer"));
        let (status, _) = c.rest("GET", "/tasks", None).await;
        assert_eq!(status, 401);
    }
    // The card needs no token, and says how to authenticate.
    let card: Value = serde_json::from_str(
        &reqwest::get(format!("{}/.well-known/agent-card.json", server.url))
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    )
    .unwrap();
    assert!(card["securitySchemes"]["bearer"].is_object());
    let mut m = user("m1", "alice's secret");
    m["contextId"] = json!("shared-id");
    let (_, a) = alice
        .rpc("SendMessage", json!({ "message": m.clone() }))
        .await;
    let task = task_of(&a["result"]).clone();
    let id = task["id"].as_str().unwrap();
    // The same messageId and contextId are bob's own.
    m["parts"][0]["text"] = json!("bob's");
    let (_, b) = bob.rpc("SendMessage", json!({ "message": m })).await;
    assert_ne!(task_of(&b["result"])["id"], task["id"]);
    assert!(!b.to_string().contains("alice"));
    let (_, e) = bob.rpc("GetTask", json!({ "id": id })).await;
    assert_eq!(e["error"]["code"], -32001);
    let (status, _) = bob.rest("GET", &format!("/tasks/{id}"), None).await;
    assert_eq!(status, 404);
    let (_, e) = bob.rpc("CancelTask", json!({ "id": id })).await;
    assert_eq!(e["error"]["code"], -32001);
    let (_, e) = bob.rpc("SubscribeToTask", json!({ "id": id })).await;
    assert_eq!(e["error"]["code"], -32001);
    let sub = bob
        .sse("POST", &format!("/tasks/{id}:subscribe"), None, Some(0))
        .await;
    assert_eq!(sub.status, 404);
    let mut follow = user("m2", "into alice's task");
    follow["taskId"] = json!(id);
    let (_, e) = bob.rpc("SendMessage", json!({ "message": follow })).await;
    assert_eq!(e["error"]["code"], -32001);
    let (_, list) = bob.rpc("ListTasks", json!({})).await;
    assert_eq!(list["result"]["totalSize"], 1);
    assert!(!list.to_string().contains("alice"));
    let (_, list) = alice.rest("GET", "/tasks?contextId=shared-id", None).await;
    assert_eq!(list["totalSize"], 1);
    assert_eq!(list["tasks"][0]["id"], task["id"]);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probes_answer_without_a_token_and_name_no_tenant() {
    let tokens = "alpha-token alice\n";
    let server = TestServer::start(echo(), |_| {}, Some(tokens)).await;
    let alice = Client::new(&server.url, Some("alpha-token"));
    let (status, _) = alice
        .rpc("SendMessage", json!({ "message": user("m1", "probe me") }))
        .await;
    assert_eq!(status, 200);
    for (path, word) in [("/livez", "ok"), ("/readyz", "ready")] {
        let r = reqwest::get(format!("{}{path}", server.url)).await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        assert_eq!(r.headers()["cache-control"], "no-store", "{path}");
        let body: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
        // The status and nothing else: no tenant, no store detail.
        assert_eq!(body, json!({ "status": word }), "{path}");
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_answers_while_the_store_takes_writes() {
    let server = TestServer::start(echo(), |_| {}, None).await;
    let r = reqwest::get(format!("{}/healthz", server.url))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    server.stop().await;
}
