//! A2A v0.3's JSON form, translated to and from v1.0's.
//!
//! The store's task model is v1.0's. A server that also speaks v0.3 (the
//! version most deployed clients speak) translates at its edge: an inbound
//! v0.3 message to v1.0 ([`message_to_v1`]; the store keeps the bytes as
//! received and reads them back through this translation), and what it
//! answers from v1.0 to v0.3 ([`task_to_v03`], [`event_to_v03`] and the
//! rest, in either of v0.3's [`Wire`] forms). The two forms differ in names only where v0.3 has its own:
//!
//! | v0.3 | v1.0 |
//! | --- | --- |
//! | `"role": "user"` / `"agent"` | `"ROLE_USER"` / `"ROLE_AGENT"` |
//! | `"state": "input-required"` | `"TASK_STATE_INPUT_REQUIRED"` (and so on) |
//! | `{"kind": "text", "text": …}` | `{"text": …}` |
//! | `{"kind": "file", "file": {"bytes"\|"uri", "mimeType", "name"}}` | `{"raw"\|"url", "mediaType", "filename"}` |
//! | `{"kind": "data", "data": {…}}` | `{"data": …}` (any JSON value) |
//! | `"kind": "message"`, `"task"`, `"status-update"`, `"artifact-update"` | the member that holds it (`StreamResponse`) |
//! | `"final"` on a status update | the stream ends after it |
//!
//! A v1.0 data part that is not an object goes to v0.3 as `{"value": …}`
//! with `"data_part_compat": true` in the part's metadata (a2a-sdk's
//! convention), and comes back as the value. A v1.0 role v0.3 lacks
//! (`ROLE_UNSPECIFIED`) reads as `agent`; the state v0.3 lacks
//! (`TASK_STATE_UNSPECIFIED`) as `unknown`.
//!
//! Everything else (ids, `metadata`, `extensions`, `referenceTaskIds`,
//! timestamps, artifact fields) has the same name and form in both.

pub mod proto;

use serde::Deserialize;
use serde_json::{Map, Value};

/// A v0.3 message's problem, in words a client can act on.
pub type Problem = String;

/// Whether `raw` is a message in one of v0.3's forms: its `role` is
/// `user` or `agent` (JSON-RPC's; v1.0's are `ROLE_USER` and
/// `ROLE_AGENT`), or it holds `content` and no `parts` (HTTP+JSON's).
/// Reads only those members.
pub fn is_v03_message(raw: &[u8]) -> bool {
    #[derive(Deserialize)]
    struct View<'a> {
        #[serde(borrow)]
        role: Option<std::borrow::Cow<'a, str>>,
        content: Option<serde::de::IgnoredAny>,
        parts: Option<serde::de::IgnoredAny>,
    }
    serde_json::from_slice::<View<'_>>(raw).is_ok_and(|v| {
        v.role.is_some_and(|r| r == "user" || r == "agent")
            || (v.content.is_some() && v.parts.is_none())
    })
}

/// A v0.3 `Message` (JSON text) in v1.0's form, as JSON text. Members
/// neither version defines are kept as they are.
///
/// # Examples
///
/// ```
/// let v03 = br#"{"kind":"message","messageId":"m1","role":"user","parts":[{"kind":"text","text":"hi"}]}"#;
/// let v1 = ctxlog::a2a::v03::message_to_v1(v03)?;
/// assert_eq!(v1, r#"{"messageId":"m1","parts":[{"text":"hi"}],"role":"ROLE_USER"}"#);
/// # Ok::<(), String>(())
/// ```
pub fn message_to_v1(raw: &[u8]) -> Result<String, Problem> {
    let value: Value =
        serde_json::from_slice(raw).map_err(|e| format!("not a v0.3 Message in JSON: {e}"))?;
    let v1 = message_value_to_v1(value)?;
    serde_json::to_string(&v1).map_err(|e| e.to_string())
}

/// [`message_to_v1`] on a parsed value, in either of v0.3's forms (one
/// with `content` and no `parts` is HTTP+JSON's, [`proto::message_to_v1`]).
pub fn message_value_to_v1(value: Value) -> Result<Value, Problem> {
    let Value::Object(mut m) = value else {
        return Err("a message is a JSON object".into());
    };
    if m.contains_key("content") && !m.contains_key("parts") {
        return proto::message_to_v1(Value::Object(m));
    }
    match m.remove("kind") {
        None => {}
        Some(Value::String(k)) if k == "message" => {}
        Some(other) => return Err(format!("kind: {other} where a message has \"message\"")),
    }
    let role = match m.get("role").and_then(Value::as_str) {
        Some("user") => "ROLE_USER",
        Some("agent") => "ROLE_AGENT",
        _ => return Err("role: a v0.3 message's role is \"user\" or \"agent\"".into()),
    };
    m.insert("role".into(), Value::from(role));
    if let Some(parts) = m.get_mut("parts") {
        let Value::Array(parts) = parts else {
            return Err("parts: a list of parts".into());
        };
        for (i, part) in parts.iter_mut().enumerate() {
            let taken = std::mem::take(part);
            *part = part_to_v1(taken).map_err(|e| format!("parts[{i}]: {e}"))?;
        }
    }
    Ok(Value::Object(m))
}

/// A v0.3 part in v1.0's form.
fn part_to_v1(part: Value) -> Result<Value, Problem> {
    let Value::Object(mut p) = part else {
        return Err("a part is a JSON object".into());
    };
    let kind = match p.remove("kind") {
        Some(Value::String(k)) => k,
        // Without a kind, the member it holds says which.
        None if p.contains_key("file") => "file".into(),
        None if p.contains_key("data") => "data".into(),
        None => "text".into(),
        Some(other) => {
            return Err(format!(
                "kind: {other} is not \"text\", \"file\" or \"data\""
            ))
        }
    };
    match kind.as_str() {
        "text" => {
            if !p.get("text").is_some_and(Value::is_string) {
                return Err("a text part needs \"text\", a string".into());
            }
        }
        "file" => {
            let file = p.remove("file").unwrap_or(Value::Null);
            file_to_v1(file, &mut p, Wire::JsonRpc)?;
        }
        "data" => {
            if !p.get("data").is_some_and(Value::is_object) {
                return Err("a data part needs \"data\", an object".into());
            }
            unwrap_compat_data(&mut p);
        }
        other => {
            return Err(format!(
                "kind: {other:?} is not \"text\", \"file\" or \"data\""
            ))
        }
    }
    Ok(Value::Object(p))
}

/// A v1.0 data part's value as v0.3's object: an object as it is, any
/// other value as `{"value": …}` with `"data_part_compat": true` in the
/// part's `metadata`.
pub(crate) fn wrap_compat_data(data: Value, metadata: &mut Option<Value>) -> Value {
    if data.is_object() {
        return data;
    }
    let mut meta = match metadata.take() {
        Some(Value::Object(m)) => m,
        _ => Map::new(),
    };
    meta.insert("data_part_compat".into(), Value::Bool(true));
    *metadata = Some(Value::Object(meta));
    let mut wrapped = Map::new();
    wrapped.insert("value".into(), data);
    Value::Object(wrapped)
}

/// Undoes [`wrap_compat_data`] on a part (in v1.0's member names) whose
/// metadata marks it; the mark leaves the metadata (and metadata it
/// leaves empty, the part).
pub(crate) fn unwrap_compat_data(part: &mut Map<String, Value>) {
    let marked = part
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .and_then(|m| m.remove("data_part_compat"))
        .is_some_and(|v| v == Value::Bool(true));
    if part
        .get("metadata")
        .is_some_and(|m| m.as_object().is_some_and(Map::is_empty))
    {
        part.remove("metadata");
    }
    if !marked {
        return;
    }
    if let Some(Value::Object(d)) = part.get_mut("data") {
        if d.len() == 1 {
            if let Some(value) = d.remove("value") {
                part.insert("data".into(), value);
            }
        }
    }
}

/// A v1.0 task state's name in v0.3 (`TASK_STATE_INPUT_REQUIRED` is
/// `input-required`); a name v1.0 lacks is `unknown`.
pub fn state_to_v03(state: &str) -> &'static str {
    match state {
        "TASK_STATE_SUBMITTED" => "submitted",
        "TASK_STATE_WORKING" => "working",
        "TASK_STATE_INPUT_REQUIRED" => "input-required",
        "TASK_STATE_COMPLETED" => "completed",
        "TASK_STATE_CANCELED" => "canceled",
        "TASK_STATE_FAILED" => "failed",
        "TASK_STATE_REJECTED" => "rejected",
        "TASK_STATE_AUTH_REQUIRED" => "auth-required",
        _ => "unknown",
    }
}

/// Which of v0.3's two JSON forms: JSON-RPC's schema, or the protobuf
/// JSON its HTTP+JSON binding carries ([`proto`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// JSON-RPC's: `kind` on every object, `"role": "user"`, `"state":
    /// "working"`.
    JsonRpc,
    /// HTTP+JSON's: the JSON of v0.3's protobuf messages.
    Proto,
}

impl Wire {
    /// A file's members for its bytes and its URI.
    fn file_members(self) -> (&'static str, &'static str) {
        match self {
            Wire::JsonRpc => ("bytes", "uri"),
            Wire::Proto => ("fileWithBytes", "fileWithUri"),
        }
    }
}

/// Moves a v0.3 part's `file` object (in `wire`'s form) into the v1.0 part
/// `p`: `raw` or `url`, `mediaType`, `filename`.
pub(crate) fn file_to_v1(
    file: Value,
    p: &mut Map<String, Value>,
    wire: Wire,
) -> Result<(), Problem> {
    let Value::Object(mut file) = file else {
        return Err("file: an object".into());
    };
    let (bytes, uri) = wire.file_members();
    match (file.remove(bytes), file.remove(uri)) {
        (Some(b), None) => p.insert("raw".into(), b),
        (None, Some(u)) => p.insert("url".into(), u),
        _ => {
            return Err(format!(
                "a file has exactly one of \"{bytes}\" and \"{uri}\""
            ))
        }
    };
    if let Some(mime) = file.remove("mimeType") {
        p.insert("mediaType".into(), mime);
    }
    if let Some(name) = file.remove("name") {
        p.insert("filename".into(), name);
    }
    match file.keys().next() {
        Some(extra) => Err(format!("file: {extra:?} is not a member of a v0.3 file")),
        None => Ok(()),
    }
}

/// A v1.0 part in v0.3's `wire` form.
pub(crate) fn part_to_v03(part: Value, wire: Wire) -> Value {
    let Value::Object(mut p) = part else {
        return part;
    };
    let mut out = Map::new();
    let mut metadata = p.remove("metadata");
    let kind = if let Some(text) = p.remove("text") {
        out.insert("text".into(), text);
        "text"
    } else if let Some(data) = p.remove("data") {
        let data = wrap_compat_data(data, &mut metadata);
        let data = match wire {
            Wire::JsonRpc => data,
            Wire::Proto => Value::Object(Map::from_iter([("data".to_string(), data)])),
        };
        out.insert("data".into(), data);
        "data"
    } else {
        let (bytes, uri) = wire.file_members();
        let mut file = Map::new();
        if let Some(raw) = p.remove("raw") {
            file.insert(bytes.into(), raw);
        } else if let Some(url) = p.remove("url") {
            file.insert(uri.into(), url);
        }
        if let Some(media) = p.remove("mediaType") {
            file.insert("mimeType".into(), media);
        }
        if let Some(name) = p.remove("filename") {
            file.insert("name".into(), name);
        }
        out.insert("file".into(), Value::Object(file));
        "file"
    };
    if wire == Wire::JsonRpc {
        out.insert("kind".into(), Value::from(kind));
    }
    if let Some(metadata) = metadata {
        out.insert("metadata".into(), metadata);
    }
    Value::Object(out)
}

/// A v1.0 `Message` (in the spec's form, as [`Stored::into_wire`] gives
/// it) in v0.3's `wire` form: JSON-RPC's role names, parts and `kind`; or
/// the protobuf JSON's `content` (which has no `referenceTaskIds`).
///
/// [`Stored::into_wire`]: crate::a2a::Stored::into_wire
pub fn message_to_v03(value: Value, wire: Wire) -> Value {
    let Value::Object(mut m) = value else {
        return value;
    };
    let parts = match m.remove("parts") {
        Some(Value::Array(parts)) => parts,
        _ => Vec::new(),
    };
    let parts = Value::Array(parts.into_iter().map(|p| part_to_v03(p, wire)).collect());
    match wire {
        Wire::JsonRpc => {
            let role = match m.get("role").and_then(Value::as_str) {
                Some("ROLE_USER") => "user",
                _ => "agent",
            };
            m.insert("role".into(), Value::from(role));
            m.insert("parts".into(), parts);
            m.insert("kind".into(), Value::from("message"));
        }
        Wire::Proto => {
            m.remove("referenceTaskIds");
            m.insert("content".into(), parts);
        }
    }
    Value::Object(m)
}

/// A v1.0 `TaskStatus` in `wire`'s form (its state's name, its message).
fn status_in(status: &mut Value, wire: Wire) {
    let Value::Object(s) = status else {
        return;
    };
    let state = s.get("state").and_then(Value::as_str);
    let renamed = match (wire, state) {
        (Wire::JsonRpc, state) => Some(state_to_v03(state.unwrap_or_default())),
        (Wire::Proto, Some("TASK_STATE_CANCELED")) => Some("TASK_STATE_CANCELLED"),
        // The others have v1.0's names.
        (Wire::Proto, _) => None,
    };
    if let Some(state) = renamed {
        s.insert("state".into(), Value::from(state));
    }
    if let Some(message) = s.remove("message") {
        s.insert("message".into(), message_to_v03(message, wire));
    }
}

/// A v1.0 `Artifact` in `wire`'s form (its parts).
fn artifact_in(artifact: &mut Value, wire: Wire) {
    if let Some(Value::Array(parts)) = artifact.get_mut("parts") {
        for part in parts.iter_mut() {
            let taken = std::mem::take(part);
            *part = part_to_v03(taken, wire);
        }
    }
}

/// A v1.0 `Task` (in the spec's form) in v0.3's `wire` form
/// (JSON-RPC's with its `kind`).
pub fn task_to_v03(value: Value, wire: Wire) -> Value {
    let Value::Object(mut t) = value else {
        return value;
    };
    if let Some(status) = t.get_mut("status") {
        status_in(status, wire);
    }
    if let Some(Value::Array(history)) = t.get_mut("history") {
        for message in history.iter_mut() {
            let taken = std::mem::take(message);
            *message = message_to_v03(taken, wire);
        }
    }
    if let Some(Value::Array(artifacts)) = t.get_mut("artifacts") {
        artifacts.iter_mut().for_each(|a| artifact_in(a, wire));
    }
    if wire == Wire::JsonRpc {
        t.insert("kind".into(), Value::from("task"));
    }
    Value::Object(t)
}

/// A v1.0 `StreamResponse` (or a `SendMessage` result, `{"task"|"message":
/// …}`) in v0.3's `wire` form: JSON-RPC's is the object it holds with its
/// `kind`; the protobuf JSON keeps the member that holds it. A status
/// update carries `final`: whether the stream ends after it (`last`).
pub fn event_to_v03(value: Value, last: bool, wire: Wire) -> Value {
    let Value::Object(e) = value else {
        return value;
    };
    let Some((member, inner)) = e.into_iter().next() else {
        return Value::Object(Map::new());
    };
    let (kind, inner) = match (member.as_str(), inner) {
        ("task", task) => ("task", task_to_v03(task, wire)),
        ("message", message) => ("message", message_to_v03(message, wire)),
        ("statusUpdate", Value::Object(mut u)) => {
            if let Some(status) = u.get_mut("status") {
                status_in(status, wire);
            }
            u.insert("final".into(), Value::Bool(last));
            ("status-update", Value::Object(u))
        }
        ("artifactUpdate", Value::Object(mut u)) => {
            if let Some(artifact) = u.get_mut("artifact") {
                artifact_in(artifact, wire);
            }
            ("artifact-update", Value::Object(u))
        }
        (_, other) => ("", other),
    };
    match (wire, inner) {
        (Wire::JsonRpc, Value::Object(mut o)) if !kind.is_empty() => {
            o.insert("kind".into(), Value::from(kind));
            Value::Object(o)
        }
        (Wire::JsonRpc, inner) => inner,
        (Wire::Proto, inner) => Value::Object(Map::from_iter([(member, inner)])),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_message_goes_to_v1_and_back() {
        let v03 = json!({
            "kind": "message", "messageId": "m1", "role": "user", "contextId": "c",
            "parts": [
                {"kind": "text", "text": "hi", "metadata": {"a": 1}},
                {"kind": "file", "file": {"uri": "https://x/y.png", "mimeType": "image/png", "name": "y.png"}},
                {"kind": "file", "file": {"bytes": "aGk="}},
                {"kind": "data", "data": {"k": [1, 2]}},
                {"kind": "data", "data": {"value": 7}, "metadata": {"data_part_compat": true}},
            ],
            "referenceTaskIds": ["t0"],
        });
        let v1 = message_value_to_v1(v03.clone()).unwrap();
        assert_eq!(
            v1,
            json!({
                "messageId": "m1", "role": "ROLE_USER", "contextId": "c",
                "parts": [
                    {"text": "hi", "metadata": {"a": 1}},
                    {"url": "https://x/y.png", "mediaType": "image/png", "filename": "y.png"},
                    {"raw": "aGk="},
                    {"data": {"k": [1, 2]}},
                    {"data": 7},
                ],
                "referenceTaskIds": ["t0"],
            })
        );
        assert_eq!(message_to_v03(v1, Wire::JsonRpc), v03);
    }

    #[test]
    fn what_is_not_a_v03_message_is_refused_with_where() {
        for (bad, says) in [
            (json!([]), "object"),
            (json!({"role": "ROLE_USER", "parts": []}), "role"),
            (json!({"kind": "task", "role": "user"}), "kind"),
            (
                json!({"role": "user", "parts": [{"kind": "file", "file": {}}]}),
                "parts[0]",
            ),
            (
                json!({"role": "user", "parts": [{"kind": "image"}]}),
                "parts[0]",
            ),
            (
                json!({"role": "user", "parts": [{"kind": "data", "data": 3}]}),
                "parts[0]",
            ),
            (json!({"role": "user", "parts": "x"}), "parts"),
        ] {
            let e = message_value_to_v1(bad.clone()).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn only_v03_roles_are_taken_for_v03() {
        assert!(is_v03_message(br#"{"role":"user","parts":[]}"#));
        assert!(is_v03_message(br#"{"role":"agent"}"#));
        assert!(!is_v03_message(br#"{"role":"ROLE_USER"}"#));
        assert!(!is_v03_message(b"not json"));
        assert!(is_v03_message(br#"{"role":"ROLE_USER","content":[]}"#));
        assert!(!is_v03_message(
            br#"{"role":"ROLE_USER","content":[],"parts":[]}"#
        ));
    }

    #[test]
    fn events_carry_their_kind_and_final() {
        let status = json!({"statusUpdate": {"taskId": "t", "contextId": "c",
            "status": {"state": "TASK_STATE_INPUT_REQUIRED",
                "message": {"messageId": "a", "role": "ROLE_AGENT", "parts": [{"text": "?"}]}}}});
        assert_eq!(
            event_to_v03(status, true, Wire::JsonRpc),
            json!({"kind": "status-update", "taskId": "t", "contextId": "c", "final": true,
                "status": {"state": "input-required", "message": {"kind": "message",
                    "messageId": "a", "role": "agent", "parts": [{"kind": "text", "text": "?"}]}}})
        );
        let artifact = json!({"artifactUpdate": {"taskId": "t", "contextId": "c",
            "artifact": {"artifactId": "a", "parts": [{"data": [1]}]}, "lastChunk": true}});
        assert_eq!(
            event_to_v03(artifact, false, Wire::JsonRpc),
            json!({"kind": "artifact-update", "taskId": "t", "contextId": "c", "lastChunk": true,
                "artifact": {"artifactId": "a", "parts": [{"kind": "data", "data": {"value": [1]},
                    "metadata": {"data_part_compat": true}}]}})
        );
        let task = json!({"task": {"id": "t", "contextId": "c",
            "status": {"state": "TASK_STATE_UNSPECIFIED"}, "history": []}});
        assert_eq!(
            event_to_v03(task, false, Wire::JsonRpc),
            json!({"kind": "task", "id": "t", "contextId": "c", "status": {"state": "unknown"},
                "history": []})
        );
    }
}
