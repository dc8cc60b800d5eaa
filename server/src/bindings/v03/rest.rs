//! v0.3's HTTP+JSON routes (`/v1/message:send`, `/v1/tasks/{id}`, …),
//! beside v1.0's (which have no `/v1` prefix, so no path is both). Bodies
//! and answers are v0.3's protobuf JSON ([`Wire::Proto`]).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::Method;
use axum::response::Response;
use axum::routing::{any, get, post};
use axum::Router;
use serde_json::Value;

use ctxlog::a2a::v03::{self, Wire};

use super::{config_in, json_of, push_config_out, send_params};
use crate::auth::Protocol;
use crate::bindings::core::{self, IdParams};
use crate::bindings::rest::{
    admit_as, body_bytes, error, get_params, json_text, ok_json, push_path, task_action, timed,
    PathParams,
};
use crate::error::A2aError;
use crate::push::configs as push;
use crate::state::keys::Key;
use crate::state::Shared;
use crate::streams::sse::{self, Framing};

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

async fn send(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    ok_json(
        async {
            let tenant = admit(&shared, &parts)?;
            let bytes = body_bytes(&shared, &parts, body).await?;
            let text = json_text(&bytes)?.get();
            let key = Key::of(&parts.headers, "SendMessage", &bytes)?;
            let params = send_params(Wire::Proto, text)?;
            let outcome = timed(&shared, core::send(&shared, &tenant, params, key)).await?;
            json_of(&outcome, |v| v03::event_to_v03(v, false, Wire::Proto))
        }
        .await,
    )
}

async fn stream(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let follow = async {
        let tenant = admit(&shared, &parts)?;
        let bytes = body_bytes(&shared, &parts, body).await?;
        let text = json_text(&bytes)?.get();
        let key = Key::of(&parts.headers, "SendStreamingMessage", &bytes)?;
        core::send_streaming(&shared, &tenant, send_params(Wire::Proto, text)?, key).await
    };
    respond(&shared, follow.await)
}

fn respond(shared: &Shared, follow: Result<sse::Follow, A2aError>) -> Response {
    match follow {
        Ok(f) => sse::respond(
            f,
            Framing::Rest {
                translate: Some(|p, last| super::payload(Wire::Proto, p, last)),
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
    PathParams(segment): PathParams<String>,
    request: Request,
) -> Response {
    let (parts, _) = request.into_parts();
    let tenant = match admit(&shared, &parts) {
        Ok(t) => t,
        Err(e) => return error(&e),
    };
    let (id, action) = task_action(&segment);
    match (action, parts.method.clone()) {
        ("", Method::GET) => ok_json(
            async {
                let params = get_params(&parts, id)?;
                let task = timed(&shared, core::get_task(&shared, &tenant, params)).await?;
                json_of(&task, |v| v03::task_to_v03(v, Wire::Proto))
            }
            .await,
        ),
        ("cancel", Method::POST) => ok_json(
            async {
                let cancel = core::cancel_task(&shared, &tenant, IdParams { id });
                let task = timed(&shared, cancel).await?;
                json_of(&task, |v| v03::task_to_v03(v, Wire::Proto))
            }
            .await,
        ),
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
    PathParams(path): PathParams<Vec<(String, String)>>,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    let (task_id, config) = push_path(&path);
    let tenant = match admit(&shared, &parts).and_then(|t| push::enabled(&shared).map(|()| t)) {
        Ok(t) => t,
        Err(e) => return error(&e),
    };
    let out = |v: Value| push_config_out(Wire::Proto, v);
    match (parts.method.clone(), config) {
        (Method::POST, None) => ok_json(
            async {
                let bytes = body_bytes(&shared, &parts, body).await?;
                let body: Value = serde_json::from_str(json_text(&bytes)?.get())
                    .map_err(|e| A2aError::invalid(e.to_string()))?;
                let config = config_in(&task_id, pushed_config(body))?;
                let created = push::create(&shared, &tenant, Some(task_id), config).await?;
                json_of(&created, out)
            }
            .await,
        ),
        (Method::GET, None) => ok_json(
            async {
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
            .await,
        ),
        (Method::GET, Some(id)) => ok_json(
            async {
                let got = push::get(&shared, &tenant, &task_id, Some(id)).await?;
                json_of(&got, out)
            }
            .await,
        ),
        (Method::DELETE, Some(id)) => ok_json(
            async {
                push::delete(&shared, &tenant, &task_id, Some(id)).await?;
                Ok("{}".to_string())
            }
            .await,
        ),
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
    ok_json(admit(&shared, &parts).and_then(|_| super::rpc::extended_card(&shared)))
}
