//! The protocol's errors as plain data, and how each binding writes them
//! (A2A v1.0.1 §5.4, §9.5, §11.6): a JSON-RPC code, an HTTP status, a
//! `google.rpc` status name and an `ErrorInfo` reason.

use axum::http::{header, HeaderMap, HeaderValue};
use serde_json::{json, Map, Value};

/// `ErrorInfo.domain` of every A2A error.
pub const DOMAIN: &str = "a2a-protocol.org";
const ERROR_INFO: &str = "type.googleapis.com/google.rpc.ErrorInfo";

/// An error a request gets.
#[derive(Debug, Clone, PartialEq)]
pub enum A2aError {
    /// The task does not exist, or is not the caller's.
    TaskNotFound,
    /// Cancel of a task in a terminal state.
    TaskNotCancelable {
        /// Its state's name.
        state: &'static str,
    },
    /// Push notifications are not served here.
    PushNotificationNotSupported,
    /// Not allowed in the task's state, or by the server's policy;
    /// `reason` is the `ErrorInfo` reason (`UNSUPPORTED_OPERATION`, or a
    /// finer one such as `CONTEXT_BUSY`).
    UnsupportedOperation {
        /// What happened and what to do.
        message: String,
        /// The `ErrorInfo` reason.
        reason: &'static str,
        /// `ErrorInfo` metadata (string values).
        metadata: Map<String, Value>,
    },
    /// The agent sent something the task model refuses.
    InvalidAgentResponse(String),
    /// No extended agent card is configured.
    ExtendedAgentCardNotConfigured,
    /// The request's `A2A-Version` is not served.
    VersionNotSupported(String),
    /// A parameter is wrong; `reason` is the `ErrorInfo` reason (for example
    /// `IDEMPOTENCY_CONFLICT`), if there is a finer one than the code.
    InvalidParams {
        /// What is wrong and what is accepted.
        message: String,
        /// A finer `ErrorInfo` reason, if any.
        reason: Option<&'static str>,
    },
    /// Not a JSON-RPC request object.
    InvalidRequest(String),
    /// No such method (or route).
    MethodNotFound(String),
    /// Not JSON.
    Parse(String),
    /// The server failed; the message names no path.
    Internal(String),
    /// No valid bearer token.
    Unauthenticated,
    /// The body is larger than the server accepts.
    PayloadTooLarge(usize),
    /// The server runs as many turns as it may.
    Overloaded(usize),
    /// The request body did not arrive in time (too slow, or never ended).
    BodyTimeout,
    /// The request body's `Content-Type` (this one) is not JSON.
    ContentTypeNotSupported(String),
    /// A part of the message has a media type the agent does not take.
    PartTypeNotSupported {
        /// What is wrong, and what the agent takes.
        message: String,
    },
    /// This `Idempotency-Key` came before with another request.
    KeyConflict(String),
    /// The server serves as many connections as it may.
    TooManyConnections,
    /// The store cannot write now: the disk is full (`full`), or a failed
    /// write or sync made it refuse writes until it is reopened (which the
    /// server does by itself).
    Unavailable {
        /// What happened and what to do.
        message: String,
        /// The disk is full.
        full: bool,
    },
}

impl A2aError {
    /// An `InvalidParams` with no finer reason.
    pub fn invalid(message: impl Into<String>) -> Self {
        A2aError::InvalidParams {
            message: message.into(),
            reason: None,
        }
    }

    /// An `UnsupportedOperation` with the plain reason.
    pub fn unsupported(message: impl Into<String>) -> Self {
        A2aError::UnsupportedOperation {
            message: message.into(),
            reason: "UNSUPPORTED_OPERATION",
            metadata: Map::new(),
        }
    }

    /// The JSON-RPC error code.
    pub fn code(&self) -> i64 {
        match self {
            A2aError::TaskNotFound => -32001,
            A2aError::TaskNotCancelable { .. } => -32002,
            A2aError::PushNotificationNotSupported => -32003,
            A2aError::UnsupportedOperation { .. } => -32004,
            A2aError::ContentTypeNotSupported(_) | A2aError::PartTypeNotSupported { .. } => -32005,
            A2aError::InvalidAgentResponse(_) => -32006,
            A2aError::ExtendedAgentCardNotConfigured => -32007,
            A2aError::VersionNotSupported(_) => -32009,
            A2aError::InvalidParams { .. } | A2aError::KeyConflict(_) => -32602,
            A2aError::InvalidRequest(_) | A2aError::PayloadTooLarge(_) | A2aError::BodyTimeout => {
                -32600
            }
            A2aError::MethodNotFound(_) => -32601,
            A2aError::Parse(_) => -32700,
            A2aError::Internal(_)
            | A2aError::Overloaded(_)
            | A2aError::Unavailable { .. }
            | A2aError::TooManyConnections => -32603,
            // JSON-RPC leaves -32000 to the server; A2A uses -32001 on.
            A2aError::Unauthenticated => -32000,
        }
    }

    /// The HTTP status (the REST binding's, and the JSON-RPC binding's for
    /// the errors HTTP itself answers).
    pub fn http_status(&self) -> u16 {
        match self {
            A2aError::TaskNotFound | A2aError::MethodNotFound(_) => 404,
            A2aError::InvalidAgentResponse(_) | A2aError::Internal(_) => 500,
            A2aError::Unauthenticated => 401,
            A2aError::PayloadTooLarge(_) => 413,
            A2aError::Overloaded(_) | A2aError::TooManyConnections => 503,
            A2aError::BodyTimeout => 408,
            A2aError::ContentTypeNotSupported(_) => 415,
            A2aError::KeyConflict(_) => 422,
            A2aError::Unavailable { full: true, .. } => 507,
            A2aError::Unavailable { full: false, .. } => 503,
            _ => 400,
        }
    }

    /// The `google.rpc.Status` name the REST body carries.
    pub fn status_name(&self) -> &'static str {
        match self {
            A2aError::TaskNotFound | A2aError::MethodNotFound(_) => "NOT_FOUND",
            A2aError::InvalidParams { .. }
            | A2aError::InvalidRequest(_)
            | A2aError::Parse(_)
            | A2aError::ContentTypeNotSupported(_)
            | A2aError::PartTypeNotSupported { .. }
            | A2aError::KeyConflict(_) => "INVALID_ARGUMENT",
            A2aError::InvalidAgentResponse(_) | A2aError::Internal(_) => "INTERNAL",
            A2aError::Unauthenticated => "UNAUTHENTICATED",
            A2aError::PayloadTooLarge(_)
            | A2aError::Overloaded(_)
            | A2aError::TooManyConnections
            | A2aError::Unavailable { full: true, .. } => "RESOURCE_EXHAUSTED",
            A2aError::BodyTimeout => "DEADLINE_EXCEEDED",
            A2aError::Unavailable { full: false, .. } => "UNAVAILABLE",
            _ => "FAILED_PRECONDITION",
        }
    }

    /// The `ErrorInfo` reason: the A2A error's name in upper snake case
    /// without `Error` (§11.6), or a finer one.
    pub fn reason(&self) -> &'static str {
        match self {
            A2aError::TaskNotFound => "TASK_NOT_FOUND",
            A2aError::TaskNotCancelable { .. } => "TASK_NOT_CANCELABLE",
            A2aError::PushNotificationNotSupported => "PUSH_NOTIFICATION_NOT_SUPPORTED",
            A2aError::UnsupportedOperation { reason, .. } => reason,
            A2aError::InvalidAgentResponse(_) => "INVALID_AGENT_RESPONSE",
            A2aError::ExtendedAgentCardNotConfigured => "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
            A2aError::VersionNotSupported(_) => "VERSION_NOT_SUPPORTED",
            A2aError::InvalidParams { reason, .. } => reason.unwrap_or("INVALID_PARAMS"),
            A2aError::InvalidRequest(_) => "INVALID_REQUEST",
            A2aError::MethodNotFound(_) => "METHOD_NOT_FOUND",
            A2aError::Parse(_) => "PARSE_ERROR",
            A2aError::Internal(_) => "INTERNAL",
            A2aError::Unauthenticated => "UNAUTHENTICATED",
            A2aError::PayloadTooLarge(_) => "PAYLOAD_TOO_LARGE",
            A2aError::Overloaded(_) => "TOO_MANY_TURNS",
            A2aError::BodyTimeout => "REQUEST_TIMEOUT",
            A2aError::ContentTypeNotSupported(_) | A2aError::PartTypeNotSupported { .. } => {
                "CONTENT_TYPE_NOT_SUPPORTED"
            }
            A2aError::KeyConflict(_) => "IDEMPOTENCY_CONFLICT",
            A2aError::TooManyConnections => "TOO_MANY_CONNECTIONS",
            A2aError::Unavailable { full: true, .. } => "STORAGE_FULL",
            A2aError::Unavailable { full: false, .. } => "STORE_UNAVAILABLE",
        }
    }

    /// The human-readable message.
    pub fn message(&self) -> String {
        match self {
            A2aError::TaskNotFound => {
                "task not found: no such task for this caller; check the task id".into()
            }
            A2aError::TaskNotCancelable { state } => {
                format!("the task is {state}, a terminal state, and cannot be canceled")
            }
            A2aError::PushNotificationNotSupported => {
                "push notifications are not supported by this server (the agent card says \
                 pushNotifications: false); poll GetTask or subscribe instead"
                    .into()
            }
            A2aError::UnsupportedOperation { message, .. } => message.clone(),
            A2aError::InvalidAgentResponse(m) => format!("the agent's response is invalid: {m}"),
            A2aError::ExtendedAgentCardNotConfigured => {
                "no extended agent card is configured on this server".into()
            }
            A2aError::VersionNotSupported(v) => format!(
                "A2A-Version {v} is not served here: send A2A-Version: 1.0 for v1.0, or no \
                 header for v0.3 where the agent card's supportedInterfaces list it"
            ),
            A2aError::InvalidParams { message, .. } => format!("invalid parameters: {message}"),
            A2aError::InvalidRequest(m) => format!("invalid request: {m}"),
            A2aError::MethodNotFound(m) => format!("method not found: {m}"),
            A2aError::Parse(m) => format!("invalid JSON payload: {m}"),
            A2aError::Internal(m) => format!("internal error: {m}"),
            A2aError::Unauthenticated => {
                "authentication required: send Authorization: Bearer <token>".into()
            }
            A2aError::PayloadTooLarge(limit) => {
                format!(
                    "the request body is larger than {limit} bytes, the most this server accepts"
                )
            }
            A2aError::Overloaded(max) => {
                format!("the server is running its maximum of {max} turns at once; retry shortly")
            }
            A2aError::BodyTimeout => "the request body did not arrive in time: send it whole, \
                                        at a steady pace"
                .into(),
            A2aError::PartTypeNotSupported { message } => message.clone(),
            A2aError::KeyConflict(key) => format!(
                "Idempotency-Key {key:?} came before with another request: send that request \
                 again to get its answer, or use a new key for a new request"
            ),
            A2aError::ContentTypeNotSupported(t) => format!(
                "the request's Content-Type {t:?} is not supported: send the body as \
                 application/json or application/a2a+json"
            ),
            A2aError::TooManyConnections => {
                "the server serves as many connections as it may; retry shortly, or reuse an \
                 open connection"
                    .into()
            }
            A2aError::Unavailable { message, .. } => message.clone(),
        }
    }

    /// The error's `google.rpc.ErrorInfo`, as the one detail object.
    pub fn details(&self) -> Value {
        let mut metadata = match self {
            A2aError::UnsupportedOperation { metadata, .. } => metadata.clone(),
            _ => Map::new(),
        };
        metadata.insert(
            "timestamp".into(),
            Value::String(ctxlog::time::iso8601_ms(now_ms())),
        );
        json!([{
            "@type": ERROR_INFO,
            "reason": self.reason(),
            "domain": DOMAIN,
            "metadata": metadata,
        }])
    }

    /// The JSON-RPC error object: `code`, `message`, `data` only.
    pub fn jsonrpc_error(&self) -> Value {
        json!({ "code": self.code(), "message": self.message(), "data": self.details() })
    }

    /// The REST error body (`google.rpc.Status` in JSON).
    pub fn rest_body(&self) -> Value {
        json!({ "error": {
            "code": self.http_status(),
            "status": self.status_name(),
            "message": self.message(),
            "details": self.details(),
        }})
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A store error as the caller sees it. Damage, I/O and a poisoned store
/// are internal errors whose message names no path.
pub fn from_store(e: ctxlog::Error) -> A2aError {
    use ctxlog::Error as E;
    match e {
        E::TaskNotFound | E::ContextNotFound => A2aError::TaskNotFound,
        E::TaskNotCancelable { state } => A2aError::TaskNotCancelable { state },
        E::UnsupportedOperation { reason } => A2aError::unsupported(reason),
        E::InvalidParams { field, reason } => A2aError::invalid(format!("{field}: {reason}")),
        E::ContextRejected { reason } => A2aError::InvalidParams {
            message: format!("contextId rejected: {reason}"),
            reason: Some("CONTEXT_REJECTED"),
        },
        E::IdempotencyConflict { message_id } => A2aError::InvalidParams {
            message: format!(
                "messageId {message_id:?} was already received with different content; resend \
                 the original message or use a new messageId"
            ),
            reason: Some("IDEMPOTENCY_CONFLICT"),
        },
        E::ContextBusy { task_id, since_ms } => busy(&task_id, since_ms),
        E::Poisoned {
            cause: Some(std::io::ErrorKind::StorageFull),
        } => A2aError::Unavailable {
            message: "the server's disk is full: the store refuses writes until space is freed \
                      (the server reopens it by itself); nothing was stored for this request \
                      (GET /healthz answers 200 once the store takes writes)"
                .into(),
            full: true,
        },
        E::Poisoned { .. } => A2aError::Unavailable {
            message: "the store refuses writes after a failed write or sync to disk, and the \
                      server is reopening it: retry shortly (GET /healthz answers 200 once it \
                      takes writes again)"
                .into(),
            full: false,
        },
        E::Io { source, .. } if source.kind() == std::io::ErrorKind::StorageFull => {
            A2aError::Unavailable {
                message: "the server's disk is full: nothing was stored; retry once space is \
                          freed (GET /healthz answers 200 once the store takes writes)"
                    .into(),
                full: true,
            }
        }
        E::Io { .. } => A2aError::Unavailable {
            message: "the store could not write to disk: nothing more was stored; retry shortly \
                      (GET /healthz says whether the store takes writes)"
                .into(),
            full: false,
        },
        E::ReadOnly => A2aError::Unavailable {
            message: "this server is a standby: it serves reads from a copy of the writer's \
                      replica and writes nothing; send writes to the writer, or promote this \
                      server (SIGUSR1) if the writer is gone"
                .into(),
            full: false,
        },
        E::Replica { reason, .. } => A2aError::Unavailable {
            message: format!("the store's replica: {reason}"),
            full: false,
        },
        E::Corrupt { .. } | E::MissingRecords { .. } => {
            A2aError::Internal("stored data could not be read".into())
        }
        _ => A2aError::Internal("the store failed".into()),
    }
}

/// A store error that cut a turn whose message was already stored (task
/// `task_id`): the answer says so, where a refused write's says nothing
/// was stored. The message stays received (a resend finds the task), and
/// the task is failed once the store takes writes again; a follow-up
/// naming it asks again.
pub(crate) fn turn_cut(error: A2aError, task_id: &str) -> A2aError {
    match error {
        A2aError::Unavailable { full, .. } => {
            let cause = match full {
                true => "the server's disk is full",
                false => "the store refused a write",
            };
            A2aError::Unavailable {
                message: format!(
                    "the message was received and stored (task {task_id}), but the agent's \
                     answer could not be: {cause}. The task is failed once the store takes \
                     writes again (GET /healthz answers 200 then); send a follow-up that \
                     names it in referenceTaskIds to ask again"
                ),
                full,
            }
        }
        other => other,
    }
}

/// The error a message to a context whose turn is running gets, under the
/// single-active-turn policy.
pub fn busy(task_id: &str, since_ms: u64) -> A2aError {
    let mut metadata = Map::new();
    metadata.insert("taskId".into(), Value::String(task_id.to_string()));
    metadata.insert(
        "since".into(),
        Value::String(ctxlog::time::iso8601_ms(since_ms)),
    );
    A2aError::UnsupportedOperation {
        message: format!(
            "the context's turn is running (task {task_id}); this server runs one turn per \
             context at a time: retry once it is done, or cancel it"
        ),
        reason: "CONTEXT_BUSY",
        metadata,
    }
}

/// The headers an error's response carries besides its body: the
/// challenge of a 401; `Connection: close` after a body cut short (the
/// rest of it is never read).
pub(crate) fn http_headers(e: &A2aError, headers: &mut HeaderMap) {
    match e {
        A2aError::Unauthenticated => {
            headers.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"a2a\""),
            );
        }
        A2aError::BodyTimeout | A2aError::PayloadTooLarge(_) => {
            headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_error_has_the_specs_code_status_and_reason() {
        let table = [
            (A2aError::TaskNotFound, -32001, 404, "TASK_NOT_FOUND"),
            (
                A2aError::TaskNotCancelable { state: "x" },
                -32002,
                400,
                "TASK_NOT_CANCELABLE",
            ),
            (
                A2aError::PushNotificationNotSupported,
                -32003,
                400,
                "PUSH_NOTIFICATION_NOT_SUPPORTED",
            ),
            (
                A2aError::unsupported("x"),
                -32004,
                400,
                "UNSUPPORTED_OPERATION",
            ),
            (
                A2aError::InvalidAgentResponse("x".into()),
                -32006,
                500,
                "INVALID_AGENT_RESPONSE",
            ),
            (
                A2aError::ExtendedAgentCardNotConfigured,
                -32007,
                400,
                "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
            ),
            (
                A2aError::VersionNotSupported("0.3".into()),
                -32009,
                400,
                "VERSION_NOT_SUPPORTED",
            ),
            (
                from_store(ctxlog::Error::Io {
                    op: "append",
                    path: "/secret/path".into(),
                    source: std::io::ErrorKind::StorageFull.into(),
                }),
                -32603,
                507,
                "STORAGE_FULL",
            ),
            (
                from_store(ctxlog::Error::Poisoned { cause: None }),
                -32603,
                503,
                "STORE_UNAVAILABLE",
            ),
            (
                from_store(ctxlog::Error::Poisoned {
                    cause: Some(std::io::ErrorKind::PermissionDenied),
                }),
                -32603,
                503,
                "STORE_UNAVAILABLE",
            ),
            (
                from_store(ctxlog::Error::Poisoned {
                    cause: Some(std::io::ErrorKind::StorageFull),
                }),
                -32603,
                507,
                "STORAGE_FULL",
            ),
        ];
        for (e, code, status, reason) in table {
            assert_eq!(
                (e.code(), e.http_status(), e.reason()),
                (code, status, reason)
            );
            let rpc = e.jsonrpc_error();
            let keys: Vec<&String> = rpc.as_object().unwrap().keys().collect();
            assert_eq!(keys, ["code", "data", "message"]);
            assert_eq!(rpc["data"][0]["domain"], DOMAIN);
            assert_eq!(e.rest_body()["error"]["details"][0]["reason"], reason);
            assert!(!e.message().contains("/secret"), "no path: {}", e.message());
        }
    }
}
