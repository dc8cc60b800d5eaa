//! A2A v0.3's JSON form, translated to and from v1.0's.
//!
//! The store's task model is v1.0's. A server that also speaks v0.3 (the
//! version most deployed clients speak) translates at its edge: an inbound
//! v0.3 message to v1.0 ([`message_to_v1`]; the store keeps the bytes as
//! received and reads them back through this translation), and what it
//! answers from v1.0 to v0.3 ([`task_to_v03`], [`event_to_v03`] and the
//! rest). The two forms differ in names only where v0.3 has its own:
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
            let Some(Value::Object(mut file)) = p.remove("file") else {
                return Err("a file part needs \"file\", an object".into());
            };
            match (file.remove("bytes"), file.remove("uri")) {
                (Some(bytes), None) => p.insert("raw".into(), bytes),
                (None, Some(uri)) => p.insert("url".into(), uri),
                _ => return Err("a file has exactly one of \"bytes\" and \"uri\"".into()),
            };
            if let Some(mime) = file.remove("mimeType") {
                p.insert("mediaType".into(), mime);
            }
            if let Some(name) = file.remove("name") {
                p.insert("filename".into(), name);
            }
            if let Some(extra) = file.keys().next() {
                return Err(format!("file: {extra:?} is not a member of a v0.3 file"));
            }
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

/// A v1.0 `Message` (in the spec's form, as [`Stored::into_wire`] gives it)
/// in v0.3's form.
///
/// [`Stored::into_wire`]: crate::a2a::Stored::into_wire
pub fn message_to_v03(value: Value) -> Value {
    let Value::Object(mut m) = value else {
        return value;
    };
    let role = match m.get("role").and_then(Value::as_str) {
        Some("ROLE_USER") => "user",
        _ => "agent",
    };
    m.insert("role".into(), Value::from(role));
    parts_to_v03(&mut m);
    m.insert("kind".into(), Value::from("message"));
    Value::Object(m)
}

/// The `parts` of an object (a message or an artifact) in v0.3's form.
fn parts_to_v03(object: &mut Map<String, Value>) {
    if let Some(Value::Array(parts)) = object.get_mut("parts") {
        for part in parts.iter_mut() {
            let taken = std::mem::take(part);
            *part = part_to_v03(taken);
        }
    }
}

/// A v1.0 part in v0.3's form.
fn part_to_v03(part: Value) -> Value {
    let Value::Object(mut p) = part else {
        return part;
    };
    let mut out = Map::new();
    let mut metadata = p.remove("metadata");
    if let Some(text) = p.remove("text") {
        out.insert("kind".into(), Value::from("text"));
        out.insert("text".into(), text);
    } else if let Some(data) = p.remove("data") {
        out.insert("kind".into(), Value::from("data"));
        out.insert("data".into(), wrap_compat_data(data, &mut metadata));
    } else {
        let mut file = Map::new();
        if let Some(raw) = p.remove("raw") {
            file.insert("bytes".into(), raw);
        } else if let Some(url) = p.remove("url") {
            file.insert("uri".into(), url);
        }
        if let Some(media) = p.remove("mediaType") {
            file.insert("mimeType".into(), media);
        }
        if let Some(name) = p.remove("filename") {
            file.insert("name".into(), name);
        }
        out.insert("kind".into(), Value::from("file"));
        out.insert("file".into(), Value::Object(file));
    }
    if let Some(metadata) = metadata {
        out.insert("metadata".into(), metadata);
    }
    Value::Object(out)
}

/// A v1.0 `TaskStatus` in v0.3's form.
fn status_to_v03(status: &mut Value) {
    let Value::Object(s) = status else {
        return;
    };
    if let Some(state) = s.get("state").and_then(Value::as_str) {
        let state = state_to_v03(state);
        s.insert("state".into(), Value::from(state));
    } else {
        s.insert("state".into(), Value::from("unknown"));
    }
    if let Some(message) = s.remove("message") {
        s.insert("message".into(), message_to_v03(message));
    }
}

/// A v1.0 `Artifact` in v0.3's form.
fn artifact_to_v03(artifact: &mut Value) {
    if let Value::Object(a) = artifact {
        parts_to_v03(a);
    }
}

/// A v1.0 `Task` (in the spec's form) in v0.3's form.
pub fn task_to_v03(value: Value) -> Value {
    let Value::Object(mut t) = value else {
        return value;
    };
    if let Some(status) = t.get_mut("status") {
        status_to_v03(status);
    }
    if let Some(Value::Array(history)) = t.get_mut("history") {
        for message in history.iter_mut() {
            let taken = std::mem::take(message);
            *message = message_to_v03(taken);
        }
    }
    if let Some(Value::Array(artifacts)) = t.get_mut("artifacts") {
        artifacts.iter_mut().for_each(artifact_to_v03);
    }
    t.insert("kind".into(), Value::from("task"));
    Value::Object(t)
}

/// A v1.0 `StreamResponse` (or a `SendMessage` result, `{"task"|"message":
/// …}`) in v0.3's form: the object it holds, with its `kind`. A status
/// update carries `final`: whether the stream ends after it.
pub fn event_to_v03(value: Value, last: bool) -> Value {
    let Value::Object(mut e) = value else {
        return value;
    };
    if let Some(task) = e.remove("task") {
        return task_to_v03(task);
    }
    if let Some(message) = e.remove("message") {
        return message_to_v03(message);
    }
    if let Some(Value::Object(mut u)) = e.remove("statusUpdate") {
        if let Some(status) = u.get_mut("status") {
            status_to_v03(status);
        }
        u.insert("kind".into(), Value::from("status-update"));
        u.insert("final".into(), Value::Bool(last));
        return Value::Object(u);
    }
    if let Some(Value::Object(mut u)) = e.remove("artifactUpdate") {
        if let Some(artifact) = u.get_mut("artifact") {
            artifact_to_v03(artifact);
        }
        u.insert("kind".into(), Value::from("artifact-update"));
        return Value::Object(u);
    }
    Value::Object(e)
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
        assert_eq!(message_to_v03(v1), v03);
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
            event_to_v03(status, true),
            json!({"kind": "status-update", "taskId": "t", "contextId": "c", "final": true,
                "status": {"state": "input-required", "message": {"kind": "message",
                    "messageId": "a", "role": "agent", "parts": [{"kind": "text", "text": "?"}]}}})
        );
        let artifact = json!({"artifactUpdate": {"taskId": "t", "contextId": "c",
            "artifact": {"artifactId": "a", "parts": [{"data": [1]}]}, "lastChunk": true}});
        assert_eq!(
            event_to_v03(artifact, false),
            json!({"kind": "artifact-update", "taskId": "t", "contextId": "c", "lastChunk": true,
                "artifact": {"artifactId": "a", "parts": [{"kind": "data", "data": {"value": [1]},
                    "metadata": {"data_part_compat": true}}]}})
        );
        let task = json!({"task": {"id": "t", "contextId": "c",
            "status": {"state": "TASK_STATE_UNSPECIFIED"}, "history": []}});
        assert_eq!(
            event_to_v03(task, false),
            json!({"kind": "task", "id": "t", "contextId": "c", "status": {"state": "unknown"},
                "history": []})
        );
    }
}
