//! The HTTP+JSON binding (A2A §11): resource routes over the same request
//! core. Bodies and query strings are read here (no extractor answers for
//! us); errors are `google.rpc.Status` bodies with the error's HTTP status.
//! axum cannot route a `{id}:cancel` suffix, so `/tasks/{id}` takes the
//! whole segment and the handler splits it.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{FromRequestParts, Path, Request, State};
use axum::http::request::Parts;
use axum::http::{header, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::Router;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::auth::Protocol;
use crate::bindings::core::{self, GetParams, IdParams, ListParams};
use crate::error::A2aError;
use crate::push::configs as push;
use crate::state::keys::Key;
use crate::state::Shared;
use crate::streams::sse::{self, Framing};

/// The binding's routes.
pub(crate) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/message:send", post(send))
        .route("/message:stream", post(stream))
        .route("/tasks", get(list))
        .route("/tasks/{id}", any(task))
        .route("/tasks/{id}/pushNotificationConfigs", any(push))
        .route("/tasks/{id}/pushNotificationConfigs/{config}", any(push))
        .route("/extendedAgentCard", get(extended))
}

/// Checks the caller and that it speaks v1.0 (v0.3's routes are
/// `v03::rest`'s); the tenant.
fn admit(shared: &Shared, parts: &Parts) -> Result<String, A2aError> {
    admit_as(
        shared,
        parts,
        Protocol::V1_0,
        "0.3 (no A2A-Version given) on a v1.0 route; v0.3's routes are under /v1/",
    )
}

/// Checks the caller and that it speaks `version` (else
/// `VersionNotSupported` saying `otherwise`); the tenant.
pub(crate) fn admit_as(
    shared: &Shared,
    parts: &Parts,
    version: Protocol,
    otherwise: &str,
) -> Result<String, A2aError> {
    let tenant = crate::auth::caller(shared.tokens.as_ref(), &parts.headers)?;
    let served = shared.config.protocols;
    match crate::auth::check_version(&parts.headers, parts.uri.query(), served)? {
        asked if asked == version => Ok(tenant),
        _ => Err(A2aError::VersionNotSupported(otherwise.into())),
    }
}

/// A task route's last segment: the task's id and its action (`cancel`,
/// `subscribe`, or none).
pub(crate) fn task_action(segment: &str) -> (String, &str) {
    match segment.rsplit_once(':') {
        Some((id, action @ ("cancel" | "subscribe"))) => (id.to_string(), action),
        _ => (segment.to_string(), ""),
    }
}

/// A task read's params: the id, and `historyLength` from the query.
pub(crate) fn get_params(parts: &Parts, id: String) -> Result<GetParams, A2aError> {
    let q: QueryHistory = query(parts)?;
    Ok(GetParams {
        id,
        history_length: q.history_length,
    })
}

/// A route's path parameters (axum's `Path`), except that a path that does
/// not decode (not UTF-8 once its `%XX` are undone) is answered as every
/// other error is: `InvalidParams`, as JSON (axum's own answer is text).
pub(crate) struct PathParams<T>(pub(crate) T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for PathParams<T> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(params)) => Ok(PathParams(params)),
            Err(rejection) => Err(error(&A2aError::invalid(format!(
                "the URL's path: {}",
                rejection.body_text()
            )))),
        }
    }
}

/// A push route's task id and config id (if it names one).
pub(crate) fn push_path(path: &[(String, String)]) -> (String, Option<String>) {
    let named = |key: &str| path.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
    (named("id").unwrap_or_default(), named("config"))
}

/// A send's body, parsed, with its `Idempotency-Key` (for `operation`).
async fn send_body<T: DeserializeOwned>(
    shared: &Shared,
    parts: &Parts,
    body: Body,
    operation: &str,
) -> Result<(T, Option<Key>), A2aError> {
    let bytes = body_bytes(shared, parts, body).await?;
    let key = Key::of(&parts.headers, operation, &bytes)?;
    let params = serde_json::from_str(json_text(&bytes)?.get())
        .map_err(|e| A2aError::invalid(e.to_string()))?;
    Ok((params, key))
}

/// A request's body, within the configured limits, its proto field names
/// read as JSON names; one of white space alone is `{}`.
pub(crate) async fn body_bytes(
    shared: &Shared,
    parts: &Parts,
    body: Body,
) -> Result<axum::body::Bytes, A2aError> {
    let bytes = crate::http::listener::read_request_body(shared, &parts.headers, body).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(axum::body::Bytes::from_static(b"{}"));
    }
    Ok(match crate::http::protonames::json_names(&bytes)? {
        Some(renamed) => renamed.into(),
        None => bytes,
    })
}

/// A body's JSON (a parse error if it is not JSON).
pub(crate) fn json_text(bytes: &[u8]) -> Result<&serde_json::value::RawValue, A2aError> {
    serde_json::from_slice(bytes).map_err(|e| A2aError::Parse(e.to_string()))
}

/// The query string's parameters (proto names read as their JSON names), as a JSON object of
/// strings, numbers (for `historyLength` and `pageSize`) and booleans.
pub(crate) fn query<T: DeserializeOwned>(parts: &Parts) -> Result<T, A2aError> {
    let pairs: Vec<(String, String)> =
        serde_urlencoded::from_str(parts.uri.query().unwrap_or_default())
            .map_err(|e| A2aError::invalid(format!("the query string does not parse: {e}")))?;
    let mut object = serde_json::Map::new();
    for (key, value) in pairs {
        if key.eq_ignore_ascii_case("a2a-version") {
            continue;
        }
        let key = crate::http::protonames::json_name(&key);
        if object.contains_key(&key) {
            return Err(A2aError::invalid(format!(
                "the query names {key} twice (perhaps under its proto name too); send it once"
            )));
        }
        let v = match key.as_str() {
            "historyLength" | "pageSize" => match value.parse::<i64>() {
                Ok(n) => serde_json::Value::from(n),
                Err(_) => {
                    return Err(A2aError::invalid(format!(
                        "{key}: {value:?} is not a whole number"
                    )))
                }
            },
            "includeArtifacts" => match value.as_str() {
                "true" => serde_json::Value::Bool(true),
                "false" => serde_json::Value::Bool(false),
                _ => {
                    return Err(A2aError::invalid(format!(
                        "includeArtifacts: {value:?} is not true or false"
                    )))
                }
            },
            _ => serde_json::Value::String(value),
        };
        object.insert(key, v);
    }
    serde_json::from_value(serde_json::Value::Object(object))
        .map_err(|e| A2aError::invalid(e.to_string()))
}

fn ok<T: Serialize>(result: Result<T, A2aError>) -> Response {
    ok_json(result.and_then(|v| {
        serde_json::to_string(&v)
            .map_err(|e| A2aError::Internal(format!("the result could not be written: {e}")))
    }))
}

/// A result already written as JSON text, or its error.
pub(crate) fn ok_json(result: Result<String, A2aError>) -> Response {
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

/// A REST error response.
pub(crate) fn error(e: &A2aError) -> Response {
    let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::BAD_REQUEST);
    let mut response = (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        e.rest_body().to_string(),
    )
        .into_response();
    crate::error::http_headers(e, response.headers_mut());
    response
}

pub(crate) async fn timed<T>(
    shared: &Shared,
    f: impl std::future::Future<Output = Result<T, A2aError>>,
) -> Result<T, A2aError> {
    let limit = shared.config.request_timeout + std::time::Duration::from_secs(5);
    tokio::time::timeout(limit, f)
        .await
        .unwrap_or_else(|_| Err(A2aError::Internal("the request timed out".into())))
}

async fn send(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body_) = request.into_parts();
    let result = async {
        let tenant = admit(&shared, &parts)?;
        let (params, key) = send_body(&shared, &parts, body_, "SendMessage").await?;
        timed(&shared, core::send(&shared, &tenant, params, key)).await
    };
    ok(result.await)
}

async fn stream(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body_) = request.into_parts();
    let result = async {
        let tenant = admit(&shared, &parts)?;
        let (params, key) = send_body(&shared, &parts, body_, "SendStreamingMessage").await?;
        core::send_streaming(&shared, &tenant, params, key).await
    };
    match result.await {
        Ok(f) => sse::respond(
            f,
            Framing::Rest { translate: None },
            core::keep_alive(&shared),
        )
        .into_response(),
        Err(e) => error(&e),
    }
}

async fn list(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, _) = request.into_parts();
    let result = async {
        let tenant = admit(&shared, &parts)?;
        let params: ListParams = query(&parts)?;
        timed(&shared, core::list_tasks(&shared, &tenant, params)).await
    };
    ok(result.await)
}

/// `GET /tasks/{id}`, `POST /tasks/{id}:cancel`, `POST|GET /tasks/{id}:subscribe`.
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
    let headers = &parts.headers;
    match (action, parts.method.clone()) {
        ("", Method::GET) => {
            let result = async {
                let params = get_params(&parts, id)?;
                timed(&shared, core::get_task(&shared, &tenant, params)).await
            };
            ok(result.await)
        }
        ("cancel", Method::POST) => ok(timed(
            &shared,
            core::cancel_task(&shared, &tenant, IdParams { id }),
        )
        .await),
        ("subscribe", Method::POST | Method::GET) => {
            let result = match sse::last_event_id(headers) {
                Ok(last) => core::subscribe(&shared, &tenant, IdParams { id }, last).await,
                Err(e) => Err(e),
            };
            match result {
                Ok(f) => sse::respond(
                    f,
                    Framing::Rest { translate: None },
                    core::keep_alive(&shared),
                )
                .into_response(),
                Err(e) => error(&e),
            }
        }
        (_, method) => error(&A2aError::MethodNotFound(format!(
            "{method} {} is not an A2A route",
            parts.uri.path()
        ))),
    }
}

/// `historyLength` of a task read's query.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct QueryHistory {
    #[serde(default)]
    history_length: Option<i64>,
}

/// `POST|GET /tasks/{id}/pushNotificationConfigs` and
/// `GET|DELETE /tasks/{id}/pushNotificationConfigs/{config}`.
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
    match (parts.method.clone(), config) {
        (Method::POST, None) => ok(async {
            let (config, _) = send_body(&shared, &parts, body, "").await?;
            push::create(&shared, &tenant, Some(task_id), config).await
        }
        .await),
        (Method::GET, None) => ok(async {
            let mut q: push::ConfigRef = query(&parts)?;
            q.task_id = task_id;
            push::list(&shared, &tenant, q).await
        }
        .await),
        (Method::GET, Some(id)) => ok(push::get(&shared, &tenant, &task_id, Some(id)).await),
        (Method::DELETE, Some(id)) => ok(push::delete(&shared, &tenant, &task_id, Some(id)).await),
        (method, _) => error(&A2aError::MethodNotFound(format!(
            "{method} {} is not an A2A route",
            parts.uri.path()
        ))),
    }
}

async fn extended(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, _) = request.into_parts();
    match admit(&shared, &parts).and_then(|_| core::extended_card(&shared)) {
        Ok(card) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            card,
        )
            .into_response(),
        Err(e) => error(&e),
    }
}

/// Anything else.
pub(crate) async fn not_found(request: Request) -> Response {
    error(&A2aError::MethodNotFound(format!(
        "{} {} is not an A2A route; see the agent card at /.well-known/agent-card.json",
        request.method(),
        request.uri().path()
    )))
}
