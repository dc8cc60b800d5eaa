//! The JSON-RPC 2.0 binding (A2A §9): one POST endpoint. The body is read
//! here (no extractor answers for us), the envelope checked, the method
//! dispatched to the request core, and results and errors framed as
//! JSON-RPC responses (HTTP 200, except for what HTTP itself answers:
//! 401, 413).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::auth::Protocol;
use crate::bindings::core;
use crate::error::A2aError;
use crate::push::configs as push;
use crate::state::keys::Key;
use crate::state::Shared;
use crate::streams::sse::{self, Framing};

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
    let body = match crate::http::listener::read_request_body(&shared, &parts.headers, body).await {
        Ok(b) => b,
        Err(e) => return error(&null(), &e),
    };
    let Call { id, method, params } = match envelope(&body) {
        Ok(Some(call)) => call,
        // A notification: nothing is done, and nothing answered.
        Ok(None) => return StatusCode::NO_CONTENT.into_response(),
        // The error carries the request's id whenever it could be read.
        Err((id, e)) => return error(&id.unwrap_or_else(null), &e),
    };
    let served = shared.config.protocols;
    match crate::auth::check_version(&parts.headers, parts.uri.query(), served) {
        Ok(version) => {
            let call = Call { id, method, params };
            dispatch(&shared, &tenant, &parts.headers, version, call).await
        }
        Err(e) => error(&id, &e),
    }
}

/// A request's id, method and params.
struct Call {
    id: Box<RawValue>,
    method: String,
    params: Option<Box<RawValue>>,
}

/// A request's failure, with its id if it could be read.
type Refused = (Option<Box<RawValue>>, A2aError);

/// The request's id, method and params; `None` for a notification (a
/// method and no id). A request with neither is no notification: it is
/// refused, as every malformed request is.
fn envelope(body: &[u8]) -> Result<Option<Call>, Refused> {
    let no_id = |e: A2aError| (None, e);
    let raw: Box<RawValue> =
        serde_json::from_slice(body).map_err(|e| no_id(A2aError::Parse(e.to_string())))?;
    match raw.get().as_bytes().first() {
        Some(b'{') => {}
        Some(b'[') => {
            return Err(no_id(A2aError::InvalidRequest(
                "batch requests are not supported; send one request at a time".into(),
            )))
        }
        _ => {
            return Err(no_id(A2aError::InvalidRequest(
                "the request is not a JSON object".into(),
            )))
        }
    }
    let env: Envelope = serde_json::from_str(raw.get()).map_err(|e| {
        no_id(A2aError::InvalidRequest(format!(
            "not a JSON-RPC request: {e}"
        )))
    })?;
    // The id, if it is one a response can carry back.
    let id_present = env.id.is_some();
    let id = env.id.filter(|id| is_id(id.get()));
    let refused = |id: &Option<Box<RawValue>>, why: &str| {
        Err((id.clone(), A2aError::InvalidRequest(why.into())))
    };
    if env.jsonrpc.as_ref().and_then(Value::as_str) != Some("2.0") {
        return refused(&id, r#"it needs "jsonrpc": "2.0""#);
    }
    let method = match env.method {
        Some(Value::String(method)) => Some(method),
        None => None,
        Some(_) => return refused(&id, "the method must be a string"),
    };
    let (id, method) = match (id, method) {
        (Some(id), Some(method)) => (id, method),
        (None, Some(_)) if !id_present => return Ok(None),
        (None, _) if id_present => {
            return refused(
                &None,
                "the id must be a string, an integer (of at most 64 bits) or null",
            )
        }
        (id, _) => return refused(&id, "a request needs a method (a string)"),
    };
    let params = match env.params {
        Some(raw) => Some(json_names(raw).map_err(|e| (Some(id.clone()), e))?),
        None => None,
    };
    Ok(Some(Call { id, method, params }))
}

/// `params` with its proto field names read as JSON names.
fn json_names(params: Box<RawValue>) -> Result<Box<RawValue>, A2aError> {
    match crate::http::protonames::json_names(params.get().as_bytes())? {
        // The rewrite changes keys only: it is JSON when what it read was.
        Some(text) => String::from_utf8(text)
            .ok()
            .and_then(|t| RawValue::from_string(t).ok())
            .ok_or_else(|| A2aError::invalid("the params could not be read")),
        None => Ok(params),
    }
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

/// A push method's params, once push notifications are known to be
/// served (when they are not, that is the answer, whatever the params).
fn push_params<T: DeserializeOwned>(
    shared: &Shared,
    raw: Option<Box<RawValue>>,
) -> Result<T, A2aError> {
    push::enabled(shared)?;
    core::params(raw)
}

async fn dispatch(
    shared: &Arc<Shared>,
    tenant: &str,
    headers: &HeaderMap,
    version: Protocol,
    call: Call,
) -> Response {
    let Call { id, method, params } = call;
    let keep_alive = core::keep_alive(shared);
    let streams = match version {
        Protocol::V1_0 => matches!(method.as_str(), "SendStreamingMessage" | "SubscribeToTask"),
        Protocol::V0_3 => crate::bindings::v03::rpc::streams(&method),
    };
    if streams {
        let (follow, translate) = match version {
            Protocol::V1_0 => (follow(shared, tenant, headers, &method, params).await, None),
            Protocol::V0_3 => {
                let f = crate::bindings::v03::rpc::follow(shared, tenant, headers, &method, params)
                    .await;
                (f, Some(crate::bindings::v03::rpc::TRANSLATE))
            }
        };
        return match follow {
            Ok(f) => sse::respond(f, Framing::JsonRpc { id, translate }, keep_alive),
            Err(e) => error(&id, &e),
        };
    }
    let limit = shared.config.request_timeout + std::time::Duration::from_secs(5);
    let result = match version {
        Protocol::V1_0 => {
            tokio::time::timeout(limit, self::call(shared, tenant, headers, &method, params)).await
        }
        Protocol::V0_3 => {
            let call = crate::bindings::v03::rpc::call(shared, tenant, headers, &method, params);
            tokio::time::timeout(limit, call).await
        }
    };
    match result.unwrap_or_else(|_| Err(A2aError::Internal("the request timed out".into()))) {
        Ok(result) => success(&id, &result),
        Err(e) => error(&id, &e),
    }
}

/// A streaming method's stream.
async fn follow(
    shared: &Arc<Shared>,
    tenant: &str,
    headers: &HeaderMap,
    method: &str,
    raw: Option<Box<RawValue>>,
) -> Result<crate::streams::sse::Follow, A2aError> {
    if method == "SendStreamingMessage" {
        let text = core::params_text(&raw);
        let key = Key::of(headers, method, text.as_bytes())?;
        core::send_streaming(shared, tenant, core::params(raw)?, key).await
    } else {
        let last = sse::last_event_id(headers)?;
        core::subscribe(shared, tenant, core::params(raw)?, last).await
    }
}

/// A non-streaming method's result, as JSON text.
async fn call(
    shared: &Arc<Shared>,
    tenant: &str,
    headers: &HeaderMap,
    method: &str,
    raw: Option<Box<RawValue>>,
) -> Result<String, A2aError> {
    let json = |v: &dyn erased::Json| v.to_json();
    match method {
        "SendMessage" => {
            let text = core::params_text(&raw);
            let key = Key::of(headers, method, text.as_bytes())?;
            json(&core::send(shared, tenant, core::params(raw)?, key).await?)
        }
        "GetTask" => json(&core::get_task(shared, tenant, core::params(raw)?).await?),
        "ListTasks" => json(&core::list_tasks(shared, tenant, core::params(raw)?).await?),
        "CancelTask" => json(&core::cancel_task(shared, tenant, core::params(raw)?).await?),
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
        other if crate::bindings::v03::rpc::is_method(other) => {
            Err(A2aError::MethodNotFound(format!(
                "{other:?} is an A2A v0.3 method, and this request names A2A-Version 1.0: call \
             v1.0's method, or leave the header out for v0.3"
            )))
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

pub(crate) fn success(id: &RawValue, result: &str) -> Response {
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
