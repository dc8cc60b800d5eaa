//! v0.3's JSON-RPC methods, at the same endpoint as v1.0's: `bindings/rpc.rs`
//! calls them for a request without `A2A-Version` (or naming 0.3), and
//! frames what they answer.

use std::sync::Arc;

use axum::http::HeaderMap;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use ctxlog::a2a::v03::{self, Wire};

use super::{config_in, json_of, push_config_out, send_params, v1_hint};
use crate::bindings::core::{self, params, GetParams, IdParams};
use crate::error::A2aError;
use crate::push::configs as push;
use crate::state::keys::Key;
use crate::state::Shared;
use crate::streams::sse::{self, Follow, Translate};

/// `GetTaskPushNotificationConfigParams`, `ListTaskPushNotificationConfigParams`
/// and `DeleteTaskPushNotificationConfigParams`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConfigRef03 {
    id: String,
    #[serde(default)]
    push_notification_config_id: Option<String>,
}

/// `TaskPushNotificationConfig`, as `tasks/pushNotificationConfig/set`
/// takes it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SetConfig03 {
    task_id: String,
    push_notification_config: Value,
}

/// Every v0.3 method's name.
const METHODS: [&str; 10] = [
    "message/send",
    "message/stream",
    "tasks/get",
    "tasks/cancel",
    "tasks/resubscribe",
    "tasks/pushNotificationConfig/set",
    "tasks/pushNotificationConfig/get",
    "tasks/pushNotificationConfig/list",
    "tasks/pushNotificationConfig/delete",
    "agent/getAuthenticatedExtendedCard",
];

/// Whether `method` is one of v0.3's.
pub(crate) fn is_method(method: &str) -> bool {
    METHODS.contains(&method)
}

/// Whether `method` answers with a stream.
pub(crate) fn streams(method: &str) -> bool {
    matches!(method, "message/stream" | "tasks/resubscribe")
}

/// How a stream's events are written: v0.3's JSON-RPC form.
pub(crate) const TRANSLATE: Translate =
    |payload, last| super::payload(Wire::JsonRpc, payload, last);

/// A streaming v0.3 method's stream.
pub(crate) async fn follow(
    shared: &Arc<Shared>,
    tenant: &str,
    headers: &HeaderMap,
    method: &str,
    raw: Option<Box<RawValue>>,
) -> Result<Follow, A2aError> {
    if method == "message/stream" {
        let text = core::params_text(&raw);
        let key = Key::of(headers, "SendStreamingMessage", text.as_bytes())?;
        core::send_streaming(shared, tenant, send_params(Wire::JsonRpc, text)?, key).await
    } else {
        let last = sse::last_event_id(headers)?;
        core::subscribe(shared, tenant, params::<IdParams>(raw)?, last).await
    }
}

/// A non-streaming v0.3 method's result, as JSON text.
pub(crate) async fn call(
    shared: &Arc<Shared>,
    tenant: &str,
    headers: &HeaderMap,
    method: &str,
    raw: Option<Box<RawValue>>,
) -> Result<String, A2aError> {
    match method {
        "message/send" => {
            let text = core::params_text(&raw);
            let key = Key::of(headers, "SendMessage", text.as_bytes())?;
            let outcome =
                core::send(shared, tenant, send_params(Wire::JsonRpc, text)?, key).await?;
            json_of(&outcome, |v| v03::event_to_v03(v, false, Wire::JsonRpc))
        }
        "tasks/get" => {
            let task = core::get_task(shared, tenant, params::<GetParams>(raw)?).await?;
            json_of(&task, |v| v03::task_to_v03(v, Wire::JsonRpc))
        }
        "tasks/cancel" => {
            let task = core::cancel_task(shared, tenant, params::<IdParams>(raw)?).await?;
            json_of(&task, |v| v03::task_to_v03(v, Wire::JsonRpc))
        }
        "tasks/pushNotificationConfig/set" => {
            push::enabled(shared)?;
            let p: SetConfig03 = params(raw)?;
            let config = config_in(&p.task_id, p.push_notification_config)?;
            let out = push::create(shared, tenant, Some(p.task_id), config).await?;
            json_of(&out, |v| push_config_out(Wire::JsonRpc, v))
        }
        "tasks/pushNotificationConfig/get" => {
            push::enabled(shared)?;
            let p: ConfigRef03 = params(raw)?;
            let out = push::get(shared, tenant, &p.id, p.push_notification_config_id).await?;
            json_of(&out, |v| push_config_out(Wire::JsonRpc, v))
        }
        "tasks/pushNotificationConfig/list" => {
            push::enabled(shared)?;
            let p: ConfigRef03 = params(raw)?;
            let list = push::list(shared, tenant, push::ConfigRef::task(p.id)).await?;
            json_of(&list, |v| match v {
                Value::Object(mut m) => match m.remove("configs") {
                    Some(Value::Array(configs)) => Value::Array(
                        configs
                            .into_iter()
                            .map(|c| push_config_out(Wire::JsonRpc, c))
                            .collect(),
                    ),
                    _ => Value::Array(Vec::new()),
                },
                other => other,
            })
        }
        "tasks/pushNotificationConfig/delete" => {
            push::enabled(shared)?;
            let p: ConfigRef03 = params(raw)?;
            push::delete(shared, tenant, &p.id, p.push_notification_config_id).await?;
            Ok("null".into())
        }
        "agent/getAuthenticatedExtendedCard" => extended_card(shared),
        "SendMessage"
        | "SendStreamingMessage"
        | "GetTask"
        | "ListTasks"
        | "CancelTask"
        | "SubscribeToTask"
        | "GetExtendedAgentCard"
        | "CreateTaskPushNotificationConfig"
        | "GetTaskPushNotificationConfig"
        | "ListTaskPushNotificationConfigs"
        | "DeleteTaskPushNotificationConfig" => Err(v1_hint(method)),
        other => Err(A2aError::MethodNotFound(format!(
            "{other:?} is not an A2A v0.3 method; see the agent card"
        ))),
    }
}

/// The extended card, as v0.3 reads one (`AuthenticatedExtendedCardNotConfigured`,
/// -32007, without one).
pub(crate) fn extended_card(shared: &Shared) -> Result<String, A2aError> {
    shared
        .cards
        .extended_v03
        .clone()
        .ok_or(A2aError::ExtendedAgentCardNotConfigured)
}
