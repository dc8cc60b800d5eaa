//! A2A v0.3's HTTP+JSON form: the JSON of v0.3's protobuf messages, which
//! its REST binding carries (and which differs from its JSON-RPC form);
//! what goes out in it is [`super::task_to_v03`] and the rest with
//! [`Wire::Proto`]:
//!
//! | v0.3 HTTP+JSON | v1.0 |
//! | --- | --- |
//! | a message's `content` | `parts` |
//! | `{"file": {"fileWithUri"\|"fileWithBytes", "mimeType", "name"}}` | `{"url"\|"raw", "mediaType", "filename"}` |
//! | `{"data": {"data": {…}}}` | `{"data": …}` |
//! | `TASK_STATE_CANCELLED` | `TASK_STATE_CANCELED` |
//! | `"final"` on a status update | the stream ends after it |
//! | `{"name": "tasks/T/pushNotificationConfigs/C", "pushNotificationConfig": {…}}` | `{"taskId", "id", …}` |
//!
//! Roles and the other states have v1.0's names. v0.3's proto has no
//! `referenceTaskIds`: a v0.3 reader of this form does not get them.
//! Its clients parse strictly, so what goes out holds only v0.3's members.

use serde_json::{Map, Value};

use super::{Problem, Wire};

/// A v0.3 HTTP+JSON `Message` (parsed) in v1.0's form: `content` becomes
/// `parts`, each in v1.0's form; every other member is kept.
pub fn message_to_v1(value: Value) -> Result<Value, Problem> {
    let Value::Object(mut m) = value else {
        return Err("a message is a JSON object".into());
    };
    match m.get("role").and_then(Value::as_str) {
        Some("ROLE_USER" | "ROLE_AGENT") => {}
        _ => return Err("role: a message's role is \"ROLE_USER\" or \"ROLE_AGENT\"".into()),
    }
    let Some(Value::Array(content)) = m.remove("content") else {
        return Err("content: a list of parts".into());
    };
    let parts = content
        .into_iter()
        .enumerate()
        .map(|(i, p)| part_to_v1(p).map_err(|e| format!("content[{i}]: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    m.insert("parts".into(), Value::Array(parts));
    Ok(Value::Object(m))
}

fn part_to_v1(part: Value) -> Result<Value, Problem> {
    let Value::Object(mut p) = part else {
        return Err("a part is a JSON object".into());
    };
    if let Some(file) = p.remove("file") {
        super::file_to_v1(file, &mut p, Wire::Proto)?;
    } else if let Some(data) = p.remove("data") {
        let Value::Object(mut data) = data else {
            return Err("data: an object holding \"data\"".into());
        };
        let inner = data.remove("data").unwrap_or(Value::Object(Map::new()));
        let Value::Object(object) = inner else {
            return Err("data.data: an object".into());
        };
        p.insert("data".into(), Value::Object(object));
        super::unwrap_compat_data(&mut p);
    }
    Ok(Value::Object(p))
}

#[cfg(test)]
mod tests {
    use super::super::{event_to_v03, message_to_v03};
    use super::*;
    use serde_json::json;

    #[test]
    fn a_message_goes_to_v1_and_back() {
        let v03 = json!({
            "messageId": "m1", "role": "ROLE_USER", "taskId": "t",
            "content": [
                {"text": "hi", "metadata": {"a": 1}},
                {"file": {"fileWithUri": "https://x/y.png", "mimeType": "image/png", "name": "y.png"}},
                {"file": {"fileWithBytes": "aGk="}},
                {"data": {"data": {"k": [1, 2]}}},
                {"data": {"data": {"value": "s"}}, "metadata": {"data_part_compat": true}},
            ],
        });
        let v1 = message_to_v1(v03.clone()).unwrap();
        assert_eq!(
            v1,
            json!({
                "messageId": "m1", "role": "ROLE_USER", "taskId": "t",
                "parts": [
                    {"text": "hi", "metadata": {"a": 1}},
                    {"url": "https://x/y.png", "mediaType": "image/png", "filename": "y.png"},
                    {"raw": "aGk="},
                    {"data": {"k": [1, 2]}},
                    {"data": "s"},
                ],
            })
        );
        assert_eq!(message_to_v03(v1, Wire::Proto), v03);
    }

    #[test]
    fn what_is_not_a_message_is_refused_with_where() {
        for (bad, says) in [
            (json!({"role": "user", "content": []}), "role"),
            (json!({"role": "ROLE_USER", "parts": []}), "content"),
            (
                json!({"role": "ROLE_USER", "content": [{"file": {}}]}),
                "content[0]",
            ),
            (
                json!({"role": "ROLE_USER", "content": [{"data": {"data": 1}}]}),
                "content[0]",
            ),
        ] {
            let e = message_to_v1(bad.clone()).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn events_carry_final_and_v03_names() {
        let status = json!({"statusUpdate": {"taskId": "t", "contextId": "c",
            "status": {"state": "TASK_STATE_CANCELED", "message": {"messageId": "a",
                "role": "ROLE_AGENT", "parts": [{"text": "x"}], "referenceTaskIds": ["r"]}}}});
        assert_eq!(
            event_to_v03(status, true, Wire::Proto),
            json!({"statusUpdate": {"taskId": "t", "contextId": "c", "final": true,
                "status": {"state": "TASK_STATE_CANCELLED", "message": {"messageId": "a",
                    "role": "ROLE_AGENT", "content": [{"text": "x"}]}}}})
        );
        let task = json!({"task": {"id": "t", "status": {"state": "TASK_STATE_WORKING"},
            "artifacts": [{"artifactId": "a", "parts": [{"raw": "aGk=", "filename": "f"}]}]}});
        assert_eq!(
            event_to_v03(task, false, Wire::Proto),
            json!({"task": {"id": "t", "status": {"state": "TASK_STATE_WORKING"},
                "artifacts": [{"artifactId": "a", "parts": [{"file": {"fileWithBytes": "aGk=",
                    "name": "f"}}]}]}})
        );
    }
}
