//! What the A2A project's conformance kit checks of push notifications,
//! on both bindings, made as the kit makes them: configs created on a task
//! that has already finished (created, read back, listed, deleted, deleted
//! again, a missing one an error), and a config given inline with a send
//! whose task asks for input, with `authentication` and no `taskId`, then
//! a follow-up that finishes the task: the kit's receiver must get the
//! credentials as `Authorization: {scheme} {credentials}` and a body in
//! the `StreamResponse` form.

use crate::common;
use crate::hook;

use std::sync::Arc;
use std::time::Duration;

use ctxlog_server::agents::{Script, Scripted};
use serde_json::{json, Value};

use common::{user, Client, TestServer};
use hook::{Answer, Hook};

const WAIT: Duration = Duration::from_secs(30);

/// The kit's agent, as far as these tests go: "question" asks for input,
/// anything else completes the task.
fn kit_agent() -> Arc<Scripted> {
    let script: Script = serde_json::from_value(json!({ "rules": [
        { "text": "question", "steps": [
            { "status": "TASK_STATE_INPUT_REQUIRED", "text": "which one?" } ] }
    ], "default": [ { "status": "TASK_STATE_COMPLETED", "text": "done: {text}" } ] }))
    .unwrap();
    Arc::new(Scripted::new(script))
}

async fn kit_server() -> TestServer {
    TestServer::start(
        kit_agent(),
        |c| {
            c.push.enabled = true;
            c.push.allow_private = true;
        },
        None,
    )
    .await
}

/// The two bindings, as the kit's transports call them.
#[derive(Debug, Clone, Copy)]
enum Binding {
    JsonRpc,
    Rest,
}

impl Binding {
    /// A blocking send: the task it answers with.
    async fn send(self, c: &Client, message: Value, configuration: Option<Value>) -> Value {
        let mut params = json!({ "message": message });
        if let Some(configuration) = configuration {
            params["configuration"] = configuration;
        }
        let (status, body) = match self {
            Binding::JsonRpc => c.rpc("SendMessage", params).await,
            Binding::Rest => c.rest("POST", "/message:send", Some(params)).await,
        };
        assert_eq!(status, 200, "{self:?}: {body}");
        let task = match self {
            Binding::JsonRpc => &body["result"]["task"],
            Binding::Rest => &body["task"],
        };
        assert!(task["id"].is_string(), "{self:?}: a task: {body}");
        task.clone()
    }

    /// A push method: `Ok(result)` or `Err(the error's body)`.
    async fn call(
        self,
        c: &Client,
        method: &str,
        task: &str,
        config: Value,
    ) -> Result<Value, Value> {
        let id = config["id"].as_str().unwrap_or_default().to_string();
        match self {
            Binding::JsonRpc => {
                let mut params = config;
                params["taskId"] = json!(task);
                let (_, body) = c.rpc(method, params).await;
                match body.get("error") {
                    Some(e) => Err(e.clone()),
                    None => Ok(body["result"].clone()),
                }
            }
            Binding::Rest => {
                let base = format!("/tasks/{task}/pushNotificationConfigs");
                let (status, body) = match method {
                    "CreateTaskPushNotificationConfig" => c.rest("POST", &base, Some(config)).await,
                    "GetTaskPushNotificationConfig" => {
                        c.rest("GET", &format!("{base}/{id}"), None).await
                    }
                    "ListTaskPushNotificationConfigs" => c.rest("GET", &base, None).await,
                    "DeleteTaskPushNotificationConfig" => {
                        c.rest("DELETE", &format!("{base}/{id}"), None).await
                    }
                    other => panic!("no route for {other}"),
                };
                match status {
                    200 => Ok(body),
                    _ => Err(body),
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configs_of_a_finished_task_are_created_read_listed_and_deleted() {
    let server = kit_server().await;
    let c = Client::new(&server.url, None);
    for (n, binding) in [Binding::JsonRpc, Binding::Rest].into_iter().enumerate() {
        let task = binding
            .send(&c, user(&format!("done-{n}"), "hello"), None)
            .await;
        assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
        let task = task["id"].as_str().unwrap();
        let config = json!({ "id": "kit-push", "url": "https://example.com/tck-push-webhook" });
        let call = |method: &'static str, config: Value| binding.call(&c, method, task, config);

        let made = call("CreateTaskPushNotificationConfig", config.clone()).await;
        let made = made.unwrap_or_else(|e| panic!("{binding:?}: create: {e}"));
        assert_eq!((&made["id"], &made["url"]), (&config["id"], &config["url"]));
        let got = call("GetTaskPushNotificationConfig", json!({ "id": "kit-push" })).await;
        let got = got.unwrap_or_else(|e| panic!("{binding:?}: get: {e}"));
        assert_eq!((&got["id"], &got["taskId"]), (&config["id"], &json!(task)));
        let listed = call("ListTaskPushNotificationConfigs", json!({})).await;
        let listed = listed.unwrap_or_else(|e| panic!("{binding:?}: list: {e}"));
        let ids: Vec<&Value> = listed["configs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| &c["id"])
            .collect();
        assert_eq!(ids, [&config["id"]], "{binding:?}: {listed}");

        let missing = call("GetTaskPushNotificationConfig", json!({ "id": "not-made" })).await;
        assert!(
            missing.is_err(),
            "{binding:?}: a config never made: {missing:?}"
        );
        for round in 0..2 {
            let gone = call(
                "DeleteTaskPushNotificationConfig",
                json!({ "id": "kit-push" }),
            )
            .await;
            assert!(gone.is_ok(), "{binding:?}: delete {round}: {gone:?}");
            let after = call("GetTaskPushNotificationConfig", json!({ "id": "kit-push" })).await;
            assert!(
                after.is_err(),
                "{binding:?}: read after a delete: {after:?}"
            );
        }
    }
    server.stop().await;
}

/// The one member a `StreamResponse` has, and its value.
fn stream_response(body: &Value) -> (&str, &Value) {
    let members = body
        .as_object()
        .unwrap_or_else(|| panic!("an object: {body}"));
    assert_eq!(members.len(), 1, "one member: {body}");
    let (kind, value) = members.iter().next().unwrap();
    let kinds = ["task", "message", "statusUpdate", "artifactUpdate"];
    assert!(
        kinds.contains(&kind.as_str()),
        "a StreamResponse member: {body}"
    );
    (kind.as_str(), value)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_config_gets_its_credentials_and_stream_responses() {
    let server = kit_server().await;
    let (hook, base) = Hook::start(Answer::Ok).await;
    let c = Client::new(&server.url, None);
    for (n, binding) in [Binding::JsonRpc, Binding::Rest].into_iter().enumerate() {
        let path = format!("/kit-{n}");
        let credentials = format!("tck-test-token-{n}");
        let config = json!({
            "id": format!("push-{n}"),
            "url": format!("{base}{path}"),
            "authentication": { "scheme": "Bearer", "credentials": credentials },
        });
        let configuration = json!({ "taskPushNotificationConfig": config });
        let asked = user(&format!("ask-{n}"), "a question");
        let task = binding.send(&c, asked, Some(configuration)).await;
        assert_eq!(
            task["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
            "{task}"
        );
        let (task_id, context_id) = (task["id"].clone(), task["contextId"].clone());
        let mut answer = user(&format!("answer-{n}"), "this one");
        answer["taskId"] = task_id.clone();
        let done = binding.send(&c, answer, None).await;
        assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED", "{done}");

        assert!(
            hook.wait_for_state(&path, "TASK_STATE_COMPLETED", WAIT)
                .await,
            "{binding:?}: {:?}",
            hook.got()
        );
        let got = hook.accepted(&path);
        let states: Vec<&str> = got.iter().filter_map(|g| hook::state_of(&g.body)).collect();
        let asked = states
            .iter()
            .position(|s| *s == "TASK_STATE_INPUT_REQUIRED");
        let asked = asked.unwrap_or_else(|| panic!("the question pushed: {states:?}"));
        assert_eq!(states.last(), Some(&"TASK_STATE_COMPLETED"), "{states:?}");
        assert!(asked < states.len() - 1, "{states:?}");
        for g in &got {
            let auth = g.header("authorization");
            assert_eq!(auth, Some(format!("Bearer {credentials}")), "{binding:?}");
            let ty = g.header("content-type").unwrap_or_default();
            assert!(ty.starts_with("application/a2a+json"), "{ty}");
            let (kind, value) = stream_response(&g.body);
            let (id, context) = match kind {
                "task" => (&value["id"], &value["contextId"]),
                _ => (&value["taskId"], &value["contextId"]),
            };
            assert_eq!((id, context), (&task_id, &context_id), "{}", g.body);
        }
    }
    server.stop().await;
}
