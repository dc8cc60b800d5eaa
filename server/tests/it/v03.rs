//! A2A v0.3 beside v1.0 on one server: v0.3's JSON-RPC methods and
//! HTTP+JSON routes answer in v0.3's forms, a task is shared between the
//! versions, the message is stored as the v0.3 client sent it, and
//! `--protocols` chooses what is served. (a2a-sdk 0.3.26's own client is
//! driven against the server in server/interop/v03.)

use crate::common;

use std::sync::Arc;

use common::{Client, Gated, GatedAgent, TestServer};
use ctxlog_server::agents::Echo;
use ctxlog_server::auth::Protocols;
use serde_json::{json, Value};

const MESSAGE: &str = r#"{"kind":"message","messageId":"m-v03","role":"user","parts":[{"kind":"text","text":"hello over v0.3"}]}"#;

/// A POST without `A2A-Version` (as a v0.3 client sends it), sent.
async fn send(url: &str, path: &str, body: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{url}{path}"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap()
}

/// [`send`], its body read whole.
async fn post(url: &str, path: &str, body: &str) -> (u16, String) {
    let r = send(url, path, body).await;
    (r.status().as_u16(), r.text().await.unwrap())
}

/// A GET without `A2A-Version`, its body as JSON.
async fn get(url: &str) -> Value {
    let text = reqwest::get(url).await.unwrap().text().await.unwrap();
    serde_json::from_str(&text).unwrap()
}

async fn rpc03(url: &str, method: &str, params: &str) -> Value {
    let body = format!(r#"{{"jsonrpc":"2.0","id":"a","method":"{method}","params":{params}}}"#);
    let (status, text) = post(url, "/", &body).await;
    assert_eq!(status, 200, "{text}");
    serde_json::from_str(&text).unwrap()
}

/// The data of each SSE event in `text`.
fn events(text: &str) -> Vec<Value> {
    text.split("\n\n")
        .filter_map(|block| {
            let data: Vec<&str> = block
                .lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .collect();
            (!data.is_empty()).then(|| serde_json::from_str(&data.join("\n")).unwrap())
        })
        .collect()
}

#[tokio::test]
async fn a_task_is_shared_between_the_versions_and_kept_as_sent() {
    let server = TestServer::start(Arc::new(Echo), |_| {}, None).await;
    let sent = rpc03(
        &server.url,
        "message/send",
        &format!(r#"{{"message":{MESSAGE}}}"#),
    )
    .await;
    let task = &sent["result"];
    assert_eq!(task["kind"], "task");
    assert_eq!(task["status"]["state"], "completed");
    assert_eq!(
        task["history"][0],
        serde_json::from_str::<Value>(MESSAGE).unwrap()
    );
    assert_eq!(task["history"][1]["role"], "agent");
    assert_eq!(task["artifacts"][0]["parts"][0]["kind"], "text");
    let id = task["id"].as_str().unwrap();
    // v1.0 reads it in its form.
    let v1 = Client::new(&server.url, None);
    let (_, got) = v1.rpc("GetTask", json!({ "id": id })).await;
    assert_eq!(got["result"]["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(got["result"]["history"][0]["role"], "ROLE_USER");
    assert!(got["result"]["history"][0].get("kind").is_none());
    // v0.3's HTTP+JSON reads it in the protobuf form.
    let rest = get(&format!("{}/v1/tasks/{id}?historyLength=1", server.url)).await;
    assert_eq!(rest["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(rest["history"].as_array().unwrap().len(), 1);
    assert_eq!(rest["history"][0]["role"], "ROLE_AGENT");
    assert!(rest["history"][0]["content"][0]["text"].is_string());
    // A resend in v1.0's form is the same message: the same task.
    let v1_form = json!({"messageId": "m-v03", "role": "ROLE_USER",
        "parts": [{"text": "hello over v0.3"}]});
    let (_, again) = v1.rpc("SendMessage", json!({ "message": v1_form })).await;
    assert_eq!(again["result"]["task"]["id"], id);
    // The store holds the bytes the v0.3 client sent.
    let context = task["contextId"].as_str().unwrap().to_string();
    let dir = server.stop().await;
    let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default()).unwrap();
    let first = store.last_messages("default", &context, 2).unwrap();
    assert_eq!(first[0].raw, MESSAGE.as_bytes());
}

/// A streaming POST without `A2A-Version`, its body read whole; the
/// agent's gate is opened once the stream's first event has arrived, so
/// the stream starts with the task as the agent's first status left it
/// and carries every event after (a turn done before the stream read the
/// task would leave the stream that task alone).
async fn stream_gated(url: &str, path: &str, body: &str, gated: &Gated) -> (u16, String) {
    use futures_util::StreamExt;
    let r = send(url, path, body).await;
    let status = r.status().as_u16();
    let mut chunks = r.bytes_stream();
    let mut text = String::new();
    let mut opened = false;
    while let Some(chunk) = chunks.next().await {
        text.push_str(std::str::from_utf8(&chunk.unwrap()).unwrap());
        if !opened && text.contains("\n\n") {
            gated.open();
            opened = true;
        }
    }
    (status, text)
}

#[tokio::test]
async fn a_v03_stream_has_kinds_and_ends_final() {
    let gated = Gated::new(2);
    let agent = Arc::new(GatedAgent(gated.clone()));
    let server = TestServer::start(agent, |_| {}, None).await;
    let message = MESSAGE.replace("m-v03", "m-stream");
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"message/stream","params":{{"message":{message}}}}}"#
    );
    let (status, text) = stream_gated(&server.url, "/", &body, &gated).await;
    assert_eq!(status, 200);
    let results: Vec<Value> = events(&text)
        .into_iter()
        .map(|e| e["result"].clone())
        .collect();
    assert_eq!(results[0]["kind"], "task");
    let statuses: Vec<&Value> = results
        .iter()
        .filter(|r| r["kind"] == "status-update")
        .collect();
    let (last, rest) = statuses.split_last().unwrap();
    assert_eq!(
        (last["final"].clone(), last["status"]["state"].clone()),
        (json!(true), json!("completed"))
    );
    assert!(rest.iter().all(|s| s["final"] == false));
    assert!(results.iter().any(|r| r["kind"] == "artifact-update"));
    // The same over v0.3's HTTP+JSON: the protobuf form, `final` too.
    let proto = r#"{"message":{"messageId":"m-rest","role":"ROLE_USER","content":[{"text":"hi"}]},"configuration":{"blocking":true}}"#;
    let (status, text) = stream_gated(&server.url, "/v1/message:stream", proto, &gated).await;
    assert_eq!(status, 200);
    let all = events(&text);
    assert!(all[0]["task"]["id"].is_string());
    assert_eq!(all.last().unwrap()["statusUpdate"]["final"], true);
    server.stop().await;
}

#[tokio::test]
async fn protocols_choose_what_is_served() {
    let only_v1 = TestServer::start(
        Arc::new(Echo),
        |c| c.protocols = Protocols::parse("1.0").unwrap(),
        None,
    )
    .await;
    let refused = rpc03(&only_v1.url, "tasks/get", r#"{"id":"x"}"#).await;
    assert_eq!(refused["error"]["code"], -32009);
    let (status, _) = post(&only_v1.url, "/v1/message:send", "{}").await;
    assert_eq!(status, 400);
    let card = get(&format!("{}/.well-known/agent-card.json", only_v1.url)).await;
    assert!(card.get("url").is_none());
    assert_eq!(card["supportedInterfaces"].as_array().unwrap().len(), 2);
    only_v1.stop().await;

    let only_v03 = TestServer::start(
        Arc::new(Echo),
        |c| c.protocols = Protocols::parse("0.3").unwrap(),
        None,
    )
    .await;
    let (_, v1) = Client::new(&only_v03.url, None)
        .rpc("GetTask", json!({"id": "x"}))
        .await;
    assert_eq!(v1["error"]["code"], -32009);
    let missing = rpc03(&only_v03.url, "tasks/get", r#"{"id":"x"}"#).await;
    assert_eq!(missing["error"]["code"], -32001);
    let proto = r#"{"message":{"messageId":"m1","role":"ROLE_USER","content":[{"text":"hi"}]}}"#;
    let (status, text) = post(&only_v03.url, "/v1/message:send", proto).await;
    assert_eq!(status, 200, "{text}");
    let sent: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(sent["task"]["status"]["state"], "TASK_STATE_COMPLETED");
    let card = get(&format!("{}/.well-known/agent-card.json", only_v03.url)).await;
    assert_eq!(card["protocolVersion"], "0.3.0");
    assert!(card["supportedInterfaces"]
        .as_array()
        .unwrap()
        .iter()
        .all(|i| i["protocolVersion"] == "0.3"));
    only_v03.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v03_reads_proto_field_names_on_both_bindings() {
    let server = TestServer::start(
        Arc::new(Echo),
        |c| {
            c.push.enabled = true;
            c.push.allow_private = true;
        },
        None,
    )
    .await;
    // JSON-RPC: message_id and history_length are heard.
    let sent = rpc03(
        &server.url,
        "message/send",
        r#"{"message":{"kind":"message","message_id":"s03","role":"user",
            "parts":[{"kind":"text","text":"snake"}]},
            "configuration":{"history_length":1}}"#,
    )
    .await;
    let task = &sent["result"];
    assert_eq!(task["history"].as_array().unwrap().len(), 1, "{sent}");
    let id = task["id"].as_str().unwrap().to_string();
    let got = rpc03(&server.url, "tasks/get", &format!(r#"{{"id":"{id}"}}"#)).await;
    assert_eq!(got["result"]["history"][0]["messageId"], "s03", "{got}");
    let got = rpc03(
        &server.url,
        "tasks/get",
        &format!(r#"{{"id":"{id}","history_length":1}}"#),
    )
    .await;
    assert_eq!(
        got["result"]["history"].as_array().unwrap().len(),
        1,
        "{got}"
    );
    let set = rpc03(
        &server.url,
        "tasks/pushNotificationConfig/set",
        &format!(
            r#"{{"task_id":"{id}","push_notification_config":{{"id":"p1","url":"http://127.0.0.1:9/h"}}}}"#
        ),
    )
    .await;
    assert_eq!(set["result"]["taskId"], id.as_str(), "{set}");
    assert_eq!(set["result"]["pushNotificationConfig"]["id"], "p1", "{set}");

    // HTTP+JSON: the proto names, `request` (the message's proto name)
    // among them.
    let (status, text) = post(
        &server.url,
        "/v1/message:send",
        r#"{"request":{"message_id":"r03","role":"ROLE_USER","content":[{"text":"proto"}]},
            "configuration":{"blocking":true,"history_length":1}}"#,
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let task: Value = serde_json::from_str(&text).unwrap();
    let rest_id = task["task"]["id"].as_str().expect(&text).to_string();
    assert_eq!(
        task["task"]["history"].as_array().unwrap().len(),
        1,
        "{text}"
    );
    let got = get(&format!(
        "{}/v1/tasks/{rest_id}?history_length=1",
        server.url
    ))
    .await;
    assert_eq!(got["history"].as_array().unwrap().len(), 1, "{got}");
    let (status, text) = post(
        &server.url,
        &format!("/v1/tasks/{rest_id}/pushNotificationConfigs"),
        r#"{"config":{"push_notification_config":{"id":"p2","url":"http://127.0.0.1:9/h"}}}"#,
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("pushNotificationConfigs/p2"), "{text}");
    server.stop().await;
}
