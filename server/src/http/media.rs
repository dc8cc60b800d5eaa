//! Media types: what a request body may be, and what a response is written
//! in. The spec's bindings name different types (JSON-RPC
//! `application/json`, HTTP+JSON `application/a2a+json` as a SHOULD), and
//! clients send and expect either; both are JSON, so both are taken, and a
//! response is written in the type the client used.

use axum::http::{header, HeaderMap, HeaderValue};

use crate::error::A2aError;

/// The two JSON types.
pub(crate) const JSON: &str = "application/json";
pub(crate) const A2A_JSON: &str = "application/a2a+json";

/// The type a body's `Content-Type` names, without its parameters
/// (`charset=utf-8`), in lower case.
pub(crate) fn essence(value: &HeaderValue) -> String {
    let text = String::from_utf8_lossy(value.as_bytes());
    text.split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

/// Checks a request body's `Content-Type`: `application/json` or
/// `application/a2a+json` (with any parameters), or none given; anything
/// else is refused before the body is read.
pub(crate) fn check_request(headers: &HeaderMap) -> Result<(), A2aError> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Ok(());
    };
    match essence(value).as_str() {
        JSON | A2A_JSON => Ok(()),
        other => Err(A2aError::ContentTypeNotSupported(other.to_string())),
    }
}

/// The type to write a response in: the request body's type if it had one
/// of the two, else the first of them its `Accept` names, else
/// `application/json` (what most clients expect).
pub(crate) fn response_type(headers: &HeaderMap) -> HeaderValue {
    let sent = headers.get(header::CONTENT_TYPE).map(essence);
    let asked = || {
        let accept = headers.get(header::ACCEPT)?;
        String::from_utf8_lossy(accept.as_bytes())
            .split(',')
            .map(|t| {
                t.split(';')
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .to_ascii_lowercase()
            })
            .find(|t| t == JSON || t == A2A_JSON)
    };
    match sent.filter(|t| t == A2A_JSON || t == JSON).or_else(asked) {
        Some(t) if t == A2A_JSON => HeaderValue::from_static(A2A_JSON),
        _ => HeaderValue::from_static(JSON),
    }
}

/// Checks the media types of a message's parts (`message`: its JSON)
/// against the agent's: a part whose `mediaType` the agent does not take is
/// `ContentTypeNotSupported` (§3.1.1; a part without one is taken). The
/// agent's types may be wildcards (`*/*`, `image/*`). A message in one of
/// A2A v0.3's forms (`v03`) is read as it came: its `parts` (or the
/// protobuf form's `content`), each file's `file.mimeType`.
pub(crate) fn check_parts(message: &str, takes: &[String], v03: bool) -> Result<(), A2aError> {
    // `content` and `file` are read only for v0.3 (to v1.0 they are
    // members it does not define, whatever their shape).
    #[derive(serde::Deserialize)]
    struct Parts {
        #[serde(default)]
        parts: Option<Vec<Typed>>,
        #[serde(default)]
        content: Option<serde_json::Value>,
    }
    #[derive(serde::Deserialize)]
    struct Typed {
        #[serde(rename = "mediaType", default)]
        media_type: Option<String>,
        #[serde(default)]
        file: Option<serde_json::Value>,
    }
    // A message that does not parse is the receive's to refuse.
    let Ok(Parts { parts, content }) = serde_json::from_str::<Parts>(message) else {
        return Ok(());
    };
    let parts = match (v03, parts, content) {
        (false, parts, _) | (true, parts @ Some(_), _) => parts.unwrap_or_default(),
        (true, None, Some(content)) => match serde_json::from_value(content) {
            Ok(parts) => parts,
            Err(_) => return Ok(()),
        },
        (true, None, None) => Vec::new(),
    };
    let taken = |ty: &str| {
        let ty = ty
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        let (major, _) = ty.split_once('/').unwrap_or((&ty, ""));
        takes.iter().any(|t| {
            let t = t.trim().to_ascii_lowercase();
            t == ty || t == "*/*" || t.strip_suffix("/*") == Some(major)
        })
    };
    for (i, part) in parts.iter().enumerate() {
        let in_file = part
            .file
            .as_ref()
            .filter(|_| v03)
            .and_then(|f| f.get("mimeType"))
            .and_then(serde_json::Value::as_str);
        let media_type = in_file.or(part.media_type.as_deref());
        if let Some(ty) = media_type.filter(|t| !taken(t)) {
            return Err(A2aError::PartTypeNotSupported {
                message: format!(
                    "part {i} has mediaType {ty:?}, which this agent does not take; it takes {}",
                    takes.join(", ")
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn both_json_types_are_taken_with_parameters_and_nothing_else() {
        for ok in [
            "application/json",
            "application/a2a+json",
            "Application/JSON; charset=utf-8",
            "application/a2a+json;charset=UTF-8",
        ] {
            assert!(
                check_request(&headers(&[("content-type", ok)])).is_ok(),
                "{ok}"
            );
        }
        assert!(check_request(&HeaderMap::new()).is_ok(), "none given");
        for bad in [
            "text/plain",
            "application/xml",
            "application/x-www-form-urlencoded",
            "",
        ] {
            let e = check_request(&headers(&[("content-type", bad)])).unwrap_err();
            assert_eq!((e.code(), e.http_status()), (-32005, 415), "{bad}");
        }
    }

    #[test]
    fn a_part_must_have_a_media_type_the_agent_takes() {
        let takes = vec!["text/plain".to_string(), "image/*".to_string()];
        let message =
            |ty: &str| format!(r#"{{"parts":[{{"text":"a"}},{{"raw":"","mediaType":"{ty}"}}]}}"#);
        for ok in ["text/plain", "Text/Plain; charset=utf-8", "image/png"] {
            assert!(check_parts(&message(ok), &takes, false).is_ok(), "{ok}");
        }
        let e = check_parts(&message("application/x-unsupported"), &takes, false).unwrap_err();
        assert_eq!((e.code(), e.http_status()), (-32005, 400));
        assert!(e.message().contains("part 1"));
        assert!(check_parts(&message("video/mp4"), &["*/*".to_string()], false).is_ok());
        // v0.3's forms: the file's mimeType, in parts or in content.
        let rpc = r#"{"parts":[{"kind":"file","file":{"uri":"u","mimeType":"video/mp4"}}]}"#;
        let proto = r#"{"content":[{"file":{"fileWithUri":"u","mimeType":"video/mp4"}}]}"#;
        for v03 in [rpc, proto] {
            let e = check_parts(v03, &takes, true).unwrap_err();
            assert!(e.message().contains("part 0"), "{v03}");
            assert!(check_parts(v03, &["video/*".to_string()], true).is_ok());
        }
    }

    #[test]
    fn a_response_is_written_in_the_clients_type() {
        let of = |pairs: &[(&'static str, &'static str)]| response_type(&headers(pairs));
        assert_eq!(of(&[]), JSON);
        assert_eq!(of(&[("content-type", "application/a2a+json")]), A2A_JSON);
        assert_eq!(of(&[("content-type", "application/json")]), JSON);
        assert_eq!(of(&[("accept", "application/a2a+json")]), A2A_JSON);
        assert_eq!(
            of(&[("accept", "text/html, application/a2a+json;q=0.9")]),
            A2A_JSON
        );
        assert_eq!(of(&[("accept", "*/*")]), JSON);
        assert_eq!(
            of(&[
                ("content-type", "application/json"),
                ("accept", "application/a2a+json")
            ]),
            JSON
        );
    }
}
