//! Proto field names in a request, read as their JSON names.
//!
//! ProtoJSON parsers must accept both a field's JSON name
//! (`historyLength`) and its proto name (`history_length`); the A2A
//! conformance kit's clients send the latter. Every request body (both
//! bindings, v1.0 and v0.3) passes through [`json_names`] before it is
//! read, so the rest of the server, the idempotency key and the store see
//! one form, and answers come in the JSON names (DESIGN.md §12).
//!
//! The rewrite is textual: only keys that hold an underscore change, every
//! other byte (numbers, escapes, key order, white space) stays as sent.
//! What a `google.protobuf.Struct` or `Value` holds (`metadata`, a part's
//! `data`) is the client's own and is left alone. Text that is not JSON is
//! returned unchanged, for the parser that follows to refuse.

use crate::error::A2aError;

/// The deepest nesting walked; deeper text is returned unchanged (the
/// parser that follows refuses it).
const MAX_DEPTH: usize = 128;

/// Keys whose values are the client's own (`google.protobuf.Struct` or
/// `Value` in the proto): nothing under them is renamed.
const OPAQUE: [&[u8]; 2] = [b"metadata", b"data"];

/// `text` with every proto field name written as its JSON name, or `None`
/// when nothing needs renaming. A key sent in both forms in one object is
/// refused (ProtoJSON leaves it undefined; taking either would be a guess).
pub(crate) fn json_names(text: &[u8]) -> Result<Option<Vec<u8>>, A2aError> {
    if !text.contains(&b'_') {
        return Ok(None);
    }
    let mut w = Walk {
        b: text,
        at: 0,
        edits: Vec::new(),
    };
    match w.value(true, 0) {
        // Copied only when a key is renamed: a body that needs nothing
        // costs the walk alone.
        Ok(()) if !w.edits.is_empty() => {
            let mut out = Vec::with_capacity(text.len());
            let mut from = 0;
            for (start, end, json) in &w.edits {
                out.extend_from_slice(text.get(from..*start).unwrap_or_default());
                out.push(b'"');
                out.extend_from_slice(json.as_bytes());
                out.push(b'"');
                from = *end;
            }
            out.extend_from_slice(text.get(from..).unwrap_or_default());
            Ok(Some(out))
        }
        Ok(()) | Err(Stop::NotJson) => Ok(None),
        Err(Stop::Both(proto, json)) => Err(A2aError::invalid(format!(
            "an object has both {proto:?} and {json:?}, one field's two names; send one"
        ))),
    }
}

/// A field's JSON name: its proto name with each underscore dropped and
/// the letter after it capitalised (protobuf's `ToJsonName`).
pub(crate) fn json_name(proto: &str) -> String {
    let mut out = String::with_capacity(proto.len());
    let mut upper = false;
    for c in proto.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// An optional integer field (`int32` in the proto) as ProtoJSON writes
/// it: a JSON number, or a string holding one (`"historyLength": "2"`),
/// which its parsers must accept too.
pub(crate) fn int<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    use serde::de::Error;
    use serde::Deserialize;
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Int {
        Number(i64),
        Text(String),
    }
    match Option::<Int>::deserialize(d)? {
        None => Ok(None),
        Some(Int::Number(n)) => Ok(Some(n)),
        Some(Int::Text(t)) => t
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| D::Error::custom(format!("{t:?} is not a whole number"))),
    }
}

/// Why a walk stopped early.
enum Stop {
    /// The text is not JSON (or nests too deep): left to the parser.
    NotJson,
    /// One object has a field under both names.
    Both(String, String),
}

struct Walk<'a> {
    b: &'a [u8],
    at: usize,
    /// Each renamed key: where its quoted text lies, and its JSON name.
    edits: Vec<(usize, usize, String)>,
}

impl Walk<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.at).copied()
    }

    /// Passes the bytes up to `to` (kept as they are).
    fn copy_to(&mut self, to: usize) -> Result<(), Stop> {
        if to < self.at || to > self.b.len() {
            return Err(Stop::NotJson);
        }
        self.at = to;
        Ok(())
    }

    fn space(&mut self) -> Result<(), Stop> {
        let mut to = self.at;
        while self
            .b
            .get(to)
            .is_some_and(|c| matches!(c, b' ' | b'\t' | b'\n' | b'\r'))
        {
            to += 1;
        }
        self.copy_to(to)
    }

    fn expect(&mut self, byte: u8) -> Result<(), Stop> {
        self.space()?;
        if self.peek() != Some(byte) {
            return Err(Stop::NotJson);
        }
        self.copy_to(self.at + 1)
    }

    /// The end of the string that starts at `self.at` (after its closing
    /// quote).
    fn string_end(&self) -> Result<usize, Stop> {
        let mut i = self.at + 1;
        loop {
            match self.b.get(i) {
                Some(b'"') => return Ok(i + 1),
                Some(b'\\') => i += 2,
                Some(_) => i += 1,
                None => return Err(Stop::NotJson),
            }
        }
    }

    /// One value; `rename` is false under an opaque key.
    fn value(&mut self, rename: bool, depth: usize) -> Result<(), Stop> {
        if depth > MAX_DEPTH {
            return Err(Stop::NotJson);
        }
        self.space()?;
        match self.peek() {
            Some(b'{') => self.object(rename, depth),
            Some(b'[') => {
                self.copy_to(self.at + 1)?;
                self.space()?;
                if self.peek() == Some(b']') {
                    return self.copy_to(self.at + 1);
                }
                loop {
                    self.value(rename, depth + 1)?;
                    self.space()?;
                    match self.peek() {
                        Some(b',') => self.copy_to(self.at + 1)?,
                        Some(b']') => return self.copy_to(self.at + 1),
                        _ => return Err(Stop::NotJson),
                    }
                }
            }
            Some(b'"') => {
                let end = self.string_end()?;
                self.copy_to(end)
            }
            Some(_) => {
                let mut to = self.at;
                while self.b.get(to).is_some_and(|c| {
                    !matches!(c, b',' | b']' | b'}' | b' ' | b'\t' | b'\n' | b'\r')
                }) {
                    to += 1;
                }
                if to == self.at {
                    return Err(Stop::NotJson);
                }
                self.copy_to(to)
            }
            None => Err(Stop::NotJson),
        }
    }

    fn object(&mut self, rename: bool, depth: usize) -> Result<(), Stop> {
        self.copy_to(self.at + 1)?;
        self.space()?;
        if self.peek() == Some(b'}') {
            return self.copy_to(self.at + 1);
        }
        // The object's keys as written and as renamed, to find a field
        // sent under both names.
        let mut keys: Vec<Vec<u8>> = Vec::new();
        let mut renamed: Vec<(String, String)> = Vec::new();
        loop {
            self.space()?;
            if self.peek() != Some(b'"') {
                return Err(Stop::NotJson);
            }
            let end = self.string_end()?;
            let key = self.b.get(self.at + 1..end - 1).ok_or(Stop::NotJson)?;
            // A key with an escape is left as written: no proto name has one.
            let proto = rename && key.contains(&b'_') && !key.contains(&b'\\');
            match std::str::from_utf8(key) {
                Ok(name) if proto => {
                    let json = json_name(name);
                    self.edits.push((self.at, end, json.clone()));
                    self.at = end;
                    keys.push(json.clone().into_bytes());
                    renamed.push((name.to_string(), json));
                }
                _ => {
                    keys.push(key.to_vec());
                    self.copy_to(end)?;
                }
            }
            let opaque = OPAQUE.contains(&key);
            self.expect(b':')?;
            self.value(rename && !opaque, depth + 1)?;
            self.space()?;
            match self.peek() {
                Some(b',') => self.copy_to(self.at + 1)?,
                Some(b'}') => break,
                _ => return Err(Stop::NotJson),
            }
        }
        for (proto, json) in renamed {
            if keys
                .iter()
                .filter(|k| k.as_slice() == json.as_bytes())
                .count()
                > 1
            {
                return Err(Stop::Both(proto, json));
            }
        }
        self.copy_to(self.at + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(text: &str) -> String {
        match json_names(text.as_bytes()) {
            Ok(Some(out)) => String::from_utf8(out).unwrap(),
            Ok(None) => text.to_string(),
            Err(e) => format!("error: {e:?}"),
        }
    }

    #[test]
    fn proto_names_become_json_names_and_nothing_else_changes() {
        let sent = r#"{ "message" : {"message_id":"m_1", "context_id":"c",
            "parts":[{"text":"a_b","media_type":"text/plain"}],
            "reference_task_ids":["t_1"]},
            "configuration":{"history_length":2.50e1,"return_immediately":true} }"#;
        let want = r#"{ "message" : {"messageId":"m_1", "contextId":"c",
            "parts":[{"text":"a_b","mediaType":"text/plain"}],
            "referenceTaskIds":["t_1"]},
            "configuration":{"historyLength":2.50e1,"returnImmediately":true} }"#;
        assert_eq!(names(sent), want);
    }

    #[test]
    fn what_the_client_owns_is_left_as_sent() {
        for sent in [
            r#"{"message":{"metadata":{"user_id":{"first_name":"x"}}}}"#,
            r#"{"parts":[{"data":{"a_b":[{"c_d":1}]}}]}"#,
            r#"{"text":"no_key_here","id":"a_b"}"#,
            r#"{"a_\u0062":1}"#,
        ] {
            assert_eq!(json_names(sent.as_bytes()).unwrap(), None, "{sent}");
        }
        // Beside an opaque member, renaming goes on.
        assert_eq!(
            names(r#"{"metadata":{"k_1":1},"task_id":"t"}"#),
            r#"{"metadata":{"k_1":1},"taskId":"t"}"#
        );
    }

    #[test]
    fn both_names_of_one_field_are_refused_and_bad_json_is_left_to_the_parser() {
        assert!(names(r#"{"taskId":"a","task_id":"b"}"#).starts_with("error"));
        // The same names in different objects are no conflict.
        assert_eq!(
            names(r#"{"a":{"taskId":"x"},"b":{"task_id":"y"}}"#),
            r#"{"a":{"taskId":"x"},"b":{"taskId":"y"}}"#
        );
        for bad in [
            r#"{"task_id":"#,
            r#"{"task_id" 1}"#,
            r#"{"task_id":1,}"#,
            r#"{"task_id":"x"#,
            r#"[{"task_id":1}"#,
        ] {
            assert_eq!(json_names(bad.as_bytes()).unwrap(), None, "{bad}");
        }
        let deep = format!("{}{{\"a_b\":1}}{}", "[".repeat(200), "]".repeat(200));
        assert_eq!(json_names(deep.as_bytes()).unwrap(), None);
    }

    #[test]
    fn json_names_follow_protobuf() {
        assert_eq!(json_name("history_length"), "historyLength");
        assert_eq!(
            json_name("task_push_notification_config"),
            "taskPushNotificationConfig"
        );
        assert_eq!(json_name("historyLength"), "historyLength");
    }
}
