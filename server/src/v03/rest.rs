//! v0.3's HTTP+JSON routes (`/v1/message:send`, `/v1/tasks/{id}`, …),
//! beside v1.0's (which have no `/v1` prefix, so no path is both). Bodies
//! and answers are v0.3's protobuf JSON ([`Form::Rest`]).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use axum::http::request::Parts;
use axum::http::{header, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::Router;
use serde_json::Value;

use super::{config_in, json_of, push_config_out, send_params, Form};
use crate::auth::Protocol;
use crate::core::{self, IdParams};
use crate::error::A2aError;
use crate::keys::Key;
use crate::push;
use crate::rest::{admit_as, error, get_params, path_error, push_path, task_action, timed};
use crate::sse::{self, Framing};
use crate::state::Shared;

/// The routes.
pub(crate) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/v1/message:send", post(send))
        .route("/v1/message:stream", post(stream))
        .route("/v1/tasks/{id}", any(task))
        .route("/v1/tasks/{id}/pushNotificationConfigs", any(push))
        .route("/v1/tasks/{id}/pushNotificationConfigs/{config}", any(push))
        .route("/v1/card", get(card))
}

/// Checks the caller and that v0.3 is what it speaks (no `A2A-Version`,
/// or 0.3) and is served; the tenant.
fn admit(shared: &Shared, parts: &Parts) -> Result<String, A2aError> {
    admit_as(
        shared,
        parts,
        Protocol::V0_3,
        "1.0 on a v0.3 route (v1.0's routes have no /v1 prefix)",
    )
}

/// The body as text (`{}` if empty), within the configured limits.
async fn body_text(shared: &Shared, parts: &Parts, body: Body) -> Result<String, A2aError> {
    let bytes = crate::listener::read_request_body(shared, &parts.headers, body).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok("{}".into());
    }
    let text = String::from_utf8(bytes.to_vec())
        .map_err(|_| A2aError::Parse("the body is not UTF-8".into()))?;
    serde_json::from_str::<serde::de::IgnoredAny>(&text)
        .map_err(|e| A2aError::Parse(e.to_string()))?;
    Ok(text)
}

fn ok(result: Result<String, A2aError>) -> Response {
    match result {
        Ok(body) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response(),
        Err(e) => error(&e),
    }
}

async fn send(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    ok(async {
        let tenant = admit(&shared, &parts)?;
        let text = body_text(&shared, &parts, body).await?;
        let key = Key::of(&parts.headers, "SendMessage", text.as_bytes())?;
        let params = send_params(Form::Rest, &text)?;
        let outcome = timed(&shared, core::send(&shared, &tenant, params, key)).await?;
        json_of(&outcome, |v| Form::Rest.event(v, false))
    }
    .await)
}

async fn stream(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let follow = async {
        let tenant = admit(&shared, &parts)?;
        let text = body_text(&shared, &parts, body).await?;
        let key = Key::of(&parts.headers, "SendStreamingMessage", text.as_bytes())?;
        core::send_streaming(&shared, &tenant, send_params(Form::Rest, &text)?, key).await
    };
    respond(&shared, follow.await)
}

fn respond(shared: &Shared, follow: Result<sse::Follow, A2aError>) -> Response {
    match follow {
        Ok(f) => sse::respond(
            f,
            Framing::Rest {
                translate: Some(|p, last| super::payload(Form::Rest, p, last)),
            },
            core::keep_alive(shared),
        ),
        Err(e) => error(&e),
    }
}

/// `GET /v1/tasks/{id}`, `POST /v1/tasks/{id}:cancel`,
/// `GET|POST /v1/tasks/{id}:subscribe`.
async fn task(
    State(shared): State<Arc<Shared>>,
    segment: Result<Path<String>, PathRejection>,
    request: Request,
) -> Response {
    let (parts, _) = request.into_parts();
    let Path(segment) = match segment {
        Ok(s) => s,
        Err(e) => return error(&path_error(e)),
    };
    let tenant = match admit(&shared, &parts) {
        Ok(t) => t,
        Err(e) => return error(&e),
    };
    let (id, action) = task_action(&segment);
    match (action, parts.method.clone()) {
        ("", Method::GET) => ok(async {
            let params = get_params(&parts, id)?;
            let task = timed(&shared, core::get_task(&shared, &tenant, params)).await?;
            json_of(&task, |v| Form::Rest.task(v))
        }
        .await),
        ("cancel", Method::POST) => ok(async {
            let cancel = core::cancel_task(&shared, &tenant, IdParams { id });
            let task = timed(&shared, cancel).await?;
            json_of(&task, |v| Form::Rest.task(v))
        }
        .await),
        ("subscribe", Method::POST | Method::GET) => {
            let follow = match sse::last_event_id(&parts.headers) {
                Ok(last) => core::subscribe(&shared, &tenant, IdParams { id }, last).await,
                Err(e) => Err(e),
            };
            respond(&shared, follow)
        }
        (_, method) => error(&A2aError::MethodNotFound(format!(
            "{method} {} is not an A2A v0.3 route",
            parts.uri.path()
        ))),
    }
}

/// `POST|GET /v1/tasks/{id}/pushNotificationConfigs` and
/// `GET|DELETE /v1/tasks/{id}/pushNotificationConfigs/{config}`.
async fn push(
    State(shared): State<Arc<Shared>>,
    path: Result<Path<Vec<(String, String)>>, PathRejection>,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    let Path(path) = match path {
        Ok(p) => p,
        Err(e) => return error(&path_error(e)),
    };
    let (task_id, config) = push_path(&path);
    let tenant = match admit(&shared, &parts).and_then(|t| push::enabled(&shared).map(|()| t)) {
        Ok(t) => t,
        Err(e) => return error(&e),
    };
    let out = |v: Value| push_config_out(Form::Rest, v);
    match (parts.method.clone(), config) {
        (Method::POST, None) => ok(async {
            let text = body_text(&shared, &parts, body).await?;
            let body: Value =
                serde_json::from_str(&text).map_err(|e| A2aError::Parse(e.to_string()))?;
            let config = config_in(&task_id, pushed_config(body))?;
            let created = push::create(&shared, &tenant, Some(task_id), config).await?;
            json_of(&created, out)
        }
        .await),
        (Method::GET, None) => ok(async {
            let list = push::list(&shared, &tenant, push::ConfigRef::task(task_id)).await?;
            json_of(&list, |v| match v {
                Value::Object(mut m) => {
                    let configs = match m.remove("configs") {
                        Some(Value::Array(c)) => c.into_iter().map(out).collect(),
                        _ => Vec::new(),
                    };
                    serde_json::json!({ "configs": configs })
                }
                other => other,
            })
        }
        .await),
        (Method::GET, Some(id)) => ok(async {
            let got = push::get(&shared, &tenant, &task_id, Some(id)).await?;
            json_of(&got, out)
        }
        .await),
        (Method::DELETE, Some(id)) => ok(async {
            push::delete(&shared, &tenant, &task_id, Some(id)).await?;
            Ok("{}".to_string())
        }
        .await),
        (method, _) => error(&A2aError::MethodNotFound(format!(
            "{method} {} is not an A2A v0.3 route",
            parts.uri.path()
        ))),
    }
}

/// The `PushNotificationConfig` of a create's body: v0.3's
/// `CreateTaskPushNotificationConfigRequest` (`{parent, configId, config:
/// {name, pushNotificationConfig}}`, as a2a-sdk 0.3 sends it), its
/// `config` alone (the binding's body), or the config itself.
fn pushed_config(body: Value) -> Value {
    let config = match body {
        Value::Object(mut b) if b.contains_key("config") => {
            b.remove("config").unwrap_or(Value::Null)
        }
        other => other,
    };
    match config {
        Value::Object(mut c) if c.contains_key("pushNotificationConfig") => {
            c.remove("pushNotificationConfig").unwrap_or(Value::Null)
        }
        other => other,
    }
}

/// `GET /v1/card`: the extended card, as v0.3 reads one.
async fn card(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, _) = request.into_parts();
    ok(admit(&shared, &parts).and_then(|_| super::rpc::extended_card(&shared)))
}
