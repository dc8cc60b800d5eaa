//! A2A v0.3 beside v1.0, from one store: v0.3's JSON-RPC methods at the
//! same endpoint ([`rpc`]) and its HTTP+JSON routes under `/v1/`
//! ([`rest`]). A request is translated to v1.0's model at the edge and
//! runs through the same request core; the message is stored as the client
//! sent it (`Store::receive_v03_message`), and every answer and streamed
//! event is translated back into the form of the client's binding
//! (`ctxlog::a2a::v03`: JSON-RPC's `kind`-tagged objects with lowercase
//! roles and states, or HTTP+JSON's protobuf JSON).

pub(crate) mod rest;
pub(crate) mod rpc;

use axum::body::Bytes;
use ctxlog::a2a::v03::{self, Wire};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use crate::bindings::core::{SendConfig, SendParams};
use crate::error::A2aError;

/// A result written in one of v0.3's forms: `value` (a v1.0 object
/// serialized) translated by `translate`.
pub(crate) fn json_of<T: serde::Serialize>(
    value: &T,
    translate: impl FnOnce(Value) -> Value,
) -> Result<String, A2aError> {
    let written =
        |e: serde_json::Error| A2aError::Internal(format!("the result could not be written: {e}"));
    let value = serde_json::to_value(value).map_err(written)?;
    serde_json::to_string(&translate(value)).map_err(written)
}

/// A stream's payload (v1.0's `StreamResponse`, ready for an SSE `data`
/// field) in v0.3's `wire` form. The payload's line breaks were continued on
/// `data:` lines; JSON has none but white space, so they are taken out
/// again before it is read, and the translation writes none.
pub(crate) fn payload(wire: Wire, data: &[u8], last: bool) -> Result<Bytes, A2aError> {
    let bad = |e: serde_json::Error| A2aError::Internal(format!("an event could not be read: {e}"));
    let value: Value = match data.windows(7).any(|w| w == b"\ndata: ") {
        false => serde_json::from_slice(data).map_err(bad)?,
        true => {
            let text = String::from_utf8_lossy(data).replace("\ndata: ", "\n");
            serde_json::from_str(&text).map_err(bad)?
        }
    };
    let out = serde_json::to_vec(&v03::event_to_v03(value, last, wire)).map_err(bad)?;
    Ok(Bytes::from(out))
}

/// `MessageSendParams` (JSON-RPC) and `SendMessageRequest` (HTTP+JSON).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SendParams03 {
    /// (`request` is its proto name in v0.3's HTTP+JSON form.)
    #[serde(alias = "request")]
    message: Box<RawValue>,
    #[serde(default)]
    configuration: Option<SendConfig03>,
}

/// `MessageSendConfiguration` (JSON-RPC) and `SendMessageConfiguration`
/// (HTTP+JSON, where the push config is `pushNotification`).
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SendConfig03 {
    #[serde(default, deserialize_with = "crate::http::protonames::int")]
    history_length: Option<i64>,
    #[serde(default)]
    blocking: Option<bool>,
    #[serde(default, alias = "pushNotification")]
    push_notification_config: Option<Value>,
}

/// A v0.3 send's params as the request core takes them: the message as
/// sent, `blocking: false` as `returnImmediately`, the push config in
/// v1.0's form. In HTTP+JSON's form `blocking` is a protobuf `bool`, left
/// out when false: a configuration without it is not blocking (as
/// a2a-sdk 0.3 reads it); without a configuration a send blocks.
pub(crate) fn send_params(wire: Wire, raw: &str) -> Result<SendParams, A2aError> {
    let p: SendParams03 =
        serde_json::from_str(raw).map_err(|e| A2aError::invalid(e.to_string()))?;
    let mut config = p.configuration.unwrap_or(SendConfig03 {
        blocking: Some(true),
        ..SendConfig03::default()
    });
    if wire == Wire::Proto {
        config.blocking.get_or_insert(false);
    }
    let push = config
        .push_notification_config
        .filter(|c| !c.is_null())
        .map(|c| push_config_in(None, c))
        .transpose()?;
    Ok(SendParams {
        message: p.message,
        configuration: Some(SendConfig {
            history_length: config.history_length,
            return_immediately: config.blocking.map(|b| !b),
            task_push_notification_config: push,
        }),
        v03: true,
    })
}

/// A v0.3 `PushNotificationConfig` in v1.0's `TaskPushNotificationConfig`
/// form: `authentication.schemes` (v0.3 lists them; v1.0 takes one) gives
/// its first as `scheme`.
pub(crate) fn push_config_in(task_id: Option<&str>, config: Value) -> Result<Value, A2aError> {
    let Value::Object(mut c) = config else {
        return Err(A2aError::invalid(
            "pushNotificationConfig: a JSON object with a url",
        ));
    };
    if let Some(task_id) = task_id {
        c.insert("taskId".into(), Value::from(task_id));
    }
    if let Some(auth) = c.remove("authentication").filter(|a| !a.is_null()) {
        let schemes = auth.get("schemes").and_then(Value::as_array);
        let scheme = schemes.and_then(|s| s.first()).and_then(Value::as_str);
        let Some(scheme) = scheme else {
            return Err(A2aError::invalid(
                "pushNotificationConfig.authentication: schemes names none; list one \
                 (such as \"Bearer\") or leave authentication out",
            ));
        };
        let mut v1 = Map::new();
        v1.insert("scheme".into(), Value::from(scheme));
        if let Some(credentials) = auth.get("credentials").filter(|c| !c.is_null()) {
            v1.insert("credentials".into(), credentials.clone());
        }
        c.insert("authentication".into(), Value::Object(v1));
    }
    Ok(Value::Object(c))
}

/// A v0.3 `PushNotificationConfig` given for task `task_id`, as the push
/// methods take it: a v0.3 client's (its deliveries in v0.3's form).
pub(crate) fn config_in(
    task_id: &str,
    config: Value,
) -> Result<crate::push::configs::ConfigIn, A2aError> {
    let config = push_config_in(Some(task_id), config)?;
    let config: crate::push::configs::ConfigIn = serde_json::from_value(config)
        .map_err(|e| A2aError::invalid(format!("pushNotificationConfig: {e}")))?;
    Ok(config.by_v03_client(true))
}

/// A v1.0 `TaskPushNotificationConfig` (as the server answers one) in
/// v0.3's `wire` form: JSON-RPC's `{taskId, pushNotificationConfig}`, or
/// HTTP+JSON's `{name: "tasks/T/pushNotificationConfigs/C",
/// pushNotificationConfig}`.
pub(crate) fn push_config_out(wire: Wire, config: Value) -> Value {
    let Value::Object(mut c) = config else {
        return config;
    };
    let task_id = c.remove("taskId").unwrap_or(Value::from(""));
    let mut inner = Map::new();
    for member in ["id", "url", "token"] {
        if let Some(v) = c.remove(member) {
            inner.insert(member.into(), v);
        }
    }
    if let Some(Value::Object(mut auth)) = c.remove("authentication") {
        let scheme = auth.remove("scheme").unwrap_or(Value::from(""));
        let mut v03 = Map::new();
        v03.insert("schemes".into(), Value::Array(vec![scheme]));
        if let Some(credentials) = auth.remove("credentials") {
            v03.insert("credentials".into(), credentials);
        }
        inner.insert("authentication".into(), Value::Object(v03));
    }
    match wire {
        Wire::JsonRpc => json!({ "taskId": task_id, "pushNotificationConfig": inner }),
        Wire::Proto => {
            let id = inner.get("id").and_then(Value::as_str).unwrap_or_default();
            let name = format!(
                "tasks/{}/pushNotificationConfigs/{id}",
                task_id.as_str().unwrap_or_default()
            );
            json!({ "name": name, "pushNotificationConfig": inner })
        }
    }
}

/// The hint for a v1.0 method or route a v0.3 request named.
pub(crate) fn v1_hint(what: &str) -> A2aError {
    A2aError::MethodNotFound(format!(
        "{what:?} is an A2A v1.0 method, and a request without A2A-Version is v0.3 (spec \
         §3.6.2): send the header A2A-Version: 1.0, or call v0.3's method"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_v03_send_is_the_core_send() {
        let p = send_params(
            Wire::JsonRpc,
            r#"{"message":{"kind":"message","messageId":"m","role":"user","parts":[]},
                "configuration":{"blocking":false,"historyLength":2,
                "pushNotificationConfig":{"url":"http://h/x","authentication":{"schemes":["Bearer"],"credentials":"c"}}}}"#,
        )
        .unwrap();
        let config = p.configuration.unwrap();
        assert_eq!(config.return_immediately, Some(true));
        assert_eq!(config.history_length, Some(2));
        assert_eq!(
            config.task_push_notification_config,
            Some(
                json!({"url": "http://h/x", "authentication": {"scheme": "Bearer", "credentials": "c"}})
            )
        );
        assert!(p.v03 && p.message.get().contains("\"role\":\"user\""));
        assert!(send_params(Wire::JsonRpc, r#"{"configuration":{}}"#).is_err());
        let rest = |text| {
            send_params(Wire::Proto, text)
                .unwrap()
                .configuration
                .unwrap()
        };
        let at_once = |text| rest(text).return_immediately;
        assert_eq!(at_once(r#"{"message":{},"configuration":{}}"#), Some(true));
        assert_eq!(at_once(r#"{"message":{}}"#), Some(false));
        assert_eq!(
            at_once(r#"{"message":{},"configuration":{"blocking":true}}"#),
            Some(false)
        );
        let bad = r#"{"message":{},"configuration":{"pushNotificationConfig":{"url":"u","authentication":{"schemes":[]}}}}"#;
        assert_eq!(send_params(Wire::JsonRpc, bad).unwrap_err().code(), -32602);
    }

    #[test]
    fn push_configs_go_out_in_each_form() {
        let v1 = json!({"taskId": "t", "id": "c", "url": "http://h/x", "token": "k",
            "authentication": {"scheme": "Bearer"}});
        let inner = json!({"id": "c", "url": "http://h/x", "token": "k",
            "authentication": {"schemes": ["Bearer"]}});
        assert_eq!(
            push_config_out(Wire::JsonRpc, v1.clone()),
            json!({"taskId": "t", "pushNotificationConfig": inner})
        );
        assert_eq!(
            push_config_out(Wire::Proto, v1),
            json!({"name": "tasks/t/pushNotificationConfigs/c", "pushNotificationConfig": inner})
        );
    }

    #[test]
    fn a_stream_payload_is_read_across_its_continued_lines() {
        let data = b"{\"statusUpdate\":{\"taskId\":\"t\",\ndata: \"status\":{\"state\":\"TASK_STATE_COMPLETED\"}}}";
        let out = payload(Wire::JsonRpc, data, true).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            v,
            json!({"kind": "status-update", "taskId": "t", "final": true,
                "status": {"state": "completed"}})
        );
        assert!(payload(Wire::Proto, b"{", false).is_err());
    }
}
