//! The JSON-RPC 2.0 binding (A2A §9): one POST endpoint. The body is read
//! here (no extractor answers for us), the envelope checked, the method
//! dispatched to the request core, and results and errors framed as
//! JSON-RPC responses (HTTP 200, except for what HTTP itself answers:
//! 401, 413).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::core;
use crate::error::A2aError;
use crate::keys::Key;
use crate::push;
use crate::sse::{self, Framing};
use crate::state::Shared;

/// A JSON-RPC request's members.
#[derive(Deserialize)]
struct Envelope {
    jsonrpc: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    id: Option<Box<RawValue>>,
    method: Option<Value>,
    params: Option<Box<RawValue>>,
}

/// A member that is present (even as `null`) is `Some`.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Box<RawValue>>, D::Error> {
    Box::<RawValue>::deserialize(d).map(Some)
}

/// The endpoint.
pub(crate) async fn endpoint(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let null = || RawValue::NULL.to_owned();
    let tenant = match crate::auth::caller(shared.tokens.as_ref(), &parts.headers) {
        Ok(t) => t,
        Err(e) => return error(&null(), &e),
    };
    let body = match read_body(&shared, &parts.headers, body).await {
        Ok(b) => b,
        Err(e) => return error(&null(), &e),
    };
    let Call { id, method, params } = match envelope(&body) {
        Ok(Some(call)) => call,
        // A notification: nothing is done, and nothing answered.
        Ok(None) => return StatusCode::NO_CONTENT.into_response(),
        Err(e) => return error(&null(), &e),
    };
    if let Err(e) = crate::auth::check_version(&parts.headers, parts.uri.query()) {
        return error(&id, &e);
    }
    dispatch(&shared, &tenant, &parts.headers, id, &method, params).await
}

/// Reads the body, within the configured size and time limits.
pub(crate) async fn read_body(
    shared: &Shared,
    headers: &HeaderMap,
    body: Body,
) -> Result<axum::body::Bytes, A2aError> {
    let config = &shared.config;
    crate::listener::read_body(
        headers,
        body,
        config.body_limit,
        config.body_timeout,
        config.body_min_rate,
    )
    .await
}

/// A request's id, method and params.
struct Call {
    id: Box<RawValue>,
    method: String,
    params: Option<Box<RawValue>>,
}

/// The request's id, method and params; `None` for a notification.
fn envelope(body: &[u8]) -> Result<Option<Call>, A2aError> {
    let raw: Box<RawValue> =
        serde_json::from_slice(body).map_err(|e| A2aError::Parse(e.to_string()))?;
    match raw.get().as_bytes().first() {
        Some(b'{') => {}
        Some(b'[') => {
            return Err(A2aError::InvalidRequest(
                "batch requests are not supported; send one request at a time".into(),
            ))
        }
        _ => {
            return Err(A2aError::InvalidRequest(
                "the request is not a JSON object".into(),
            ))
        }
    }
    let env: Envelope = serde_json::from_str(raw.get())
        .map_err(|e| A2aError::InvalidRequest(format!("not a JSON-RPC request: {e}")))?;
    if env.jsonrpc.as_ref().and_then(Value::as_str) != Some("2.0") {
        return Err(A2aError::InvalidRequest(
            r#"it needs "jsonrpc": "2.0""#.into(),
        ));
    }
    let Some(id) = env.id else {
        return Ok(None);
    };
    if !is_id(id.get()) {
        return Err(A2aError::InvalidRequest(
            "the id must be a string, an integer (of at most 64 bits) or null".into(),
        ));
    }
    let Some(Value::String(method)) = env.method else {
        return Err(A2aError::InvalidRequest(
            "the method must be a string".into(),
        ));
    };
    Ok(Some(Call {
        id,
        method,
        params: env.params,
    }))
}

/// Whether a request's `id` (as sent) is one a response can carry back to
/// any client: a string, null, or an integer that 64 bits hold (JSON-RPC
/// says numbers should not have fractions; one such as `1e999999` is a
/// number to no client's parser).
fn is_id(raw: &str) -> bool {
    match raw.as_bytes().first() {
        Some(b'"') => true,
        Some(b'n') => raw == "null",
        _ => raw.parse::<i64>().is_ok() || raw.parse::<u64>().is_ok(),
    }
}

/// Parses a method's params (`null` or absent: the empty object).
fn params<T: DeserializeOwned>(params: Option<Box<RawValue>>) -> Result<T, A2aError> {
    let text = params.as_ref().map_or("{}", |p| p.get());
    let text = if text == "null" { "{}" } else { text };
    serde_json::from_str(text).map_err(|e| A2aError::invalid(e.to_string()))
}

/// A push method's params, once push notifications are known to be
/// served (when they are not, that is the answer, whatever the params).
fn push_params<T: DeserializeOwned>(
    shared: &Shared,
    raw: Option<Box<RawValue>>,
) -> Result<T, A2aError> {
    push::enabled(shared)?;
    params(raw)
}

async fn dispatch(
    shared: &Arc<Shared>,
    tenant: &str,
    headers: &HeaderMap,
    id: Box<RawValue>,
    method: &str,
    raw: Option<Box<RawValue>>,
) -> Response {
    let keep_alive = core::keep_alive(shared);
    // A send's Idempotency-Key (the same operation's key on either binding).
    let key = match method {
        "SendMessage" | "SendStreamingMessage" => {
            let text = raw.as_ref().map_or("{}", |p| p.get());
            match Key::of(headers, method, text.as_bytes()) {
                Ok(key) => key,
                Err(e) => return error(&id, &e),
            }
        }
        _ => None,
    };
    if matches!(method, "SendStreamingMessage" | "SubscribeToTask") {
        let follow = if method == "SendStreamingMessage" {
            match params(raw) {
                Ok(p) => core::send_streaming(shared, tenant, p, key).await,
                Err(e) => Err(e),
            }
        } else {
            match (params(raw), sse::last_event_id(headers)) {
                (Ok(p), Ok(last)) => core::subscribe(shared, tenant, p, last).await,
                (Err(e), _) | (_, Err(e)) => Err(e),
            }
        };
        return match follow {
            Ok(f) => sse::respond(f, Framing::JsonRpc(id), keep_alive).into_response(),
            Err(e) => error(&id, &e),
        };
    }
    let call = call(shared, tenant, method, raw, key);
    let limit = shared.config.request_timeout + std::time::Duration::from_secs(5);
    let result = match tokio::time::timeout(limit, call).await {
        Ok(r) => r,
        Err(_) => Err(A2aError::Internal("the request timed out".into())),
    };
    match result {
        Ok(result) => success(&id, &result),
        Err(e) => error(&id, &e),
    }
}

/// A non-streaming method's result, as JSON text.
async fn call(
    shared: &Arc<Shared>,
    tenant: &str,
    method: &str,
    raw: Option<Box<RawValue>>,
    key: Option<Key>,
) -> Result<String, A2aError> {
    let json = |v: &dyn erased::Json| v.to_json();
    match method {
        "SendMessage" => json(&core::send(shared, tenant, params(raw)?, key).await?),
        "GetTask" => json(&core::get_task(shared, tenant, params(raw)?).await?),
        "ListTasks" => json(&core::list_tasks(shared, tenant, params(raw)?).await?),
        "CancelTask" => json(&core::cancel_task(shared, tenant, params(raw)?).await?),
        "GetExtendedAgentCard" => core::extended_card(shared),
        "CreateTaskPushNotificationConfig" => {
            json(&push::create(shared, tenant, None, push_params(shared, raw)?).await?)
        }
        "GetTaskPushNotificationConfig" => {
            let p: push::ConfigRef = push_params(shared, raw)?;
            json(&push::get(shared, tenant, &p.task_id, p.id).await?)
        }
        "ListTaskPushNotificationConfigs" => {
            json(&push::list(shared, tenant, push_params(shared, raw)?).await?)
        }
        "DeleteTaskPushNotificationConfig" => {
            let p: push::ConfigRef = push_params(shared, raw)?;
            json(&push::delete(shared, tenant, &p.task_id, p.id).await?)
        }
        other => Err(A2aError::MethodNotFound(format!(
            "{other:?} is not an A2A method; see the agent card"
        ))),
    }
}

/// Serialising any result to JSON text, one call site per method.
mod erased {
    use crate::error::A2aError;

    pub(crate) trait Json {
        fn to_json(&self) -> Result<String, A2aError>;
    }

    impl<T: serde::Serialize> Json for T {
        fn to_json(&self) -> Result<String, A2aError> {
            serde_json::to_string(self)
                .map_err(|e| A2aError::Internal(format!("the result could not be written: {e}")))
        }
    }
}

fn success(id: &RawValue, result: &str) -> Response {
    let body = format!(r#"{{"jsonrpc":"2.0","id":{},"result":{result}}}"#, id.get());
    json_response(StatusCode::OK, body)
}

/// A JSON-RPC error response: HTTP 200, except where HTTP answers itself
/// (authentication, a body too large).
pub(crate) fn error(id: &RawValue, e: &A2aError) -> Response {
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":{},"error":{}}}"#,
        id.get(),
        e.jsonrpc_error()
    );
    let status = match e {
        A2aError::Unauthenticated | A2aError::PayloadTooLarge(_) | A2aError::BodyTimeout => {
            StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::BAD_REQUEST)
        }
        _ => StatusCode::OK,
    };
    let mut response = json_response(status, body);
    crate::error::http_headers(e, response.headers_mut());
    response
}

fn json_response(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}
