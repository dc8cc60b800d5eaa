//! The A2A v1.0.1 data model in its JSON form (camelCase fields, enum values
//! as proto names, defaults omitted). Fields this build does not know are
//! kept in `extra`. What the store hands back of a stored message, status or
//! artifact is a [`Stored`]: the JSON text exactly as it was stored, with its
//! parsed form beside it.

pub(crate) mod json;
pub mod lifecycle;
pub mod v03;
mod wire;

pub use wire::SpecForm;

use std::fmt;
use std::ops::Deref;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// A JSON object (`google.protobuf.Struct`).
pub type Object = Map<String, Value>;

/// The member (set to `true`) that marks a stored COMPLETED status as the
/// agent's direct reply: the client was answered with the status's message
/// instead of a task. Kept in the stored status, read into the index
/// ([`Store::list_tasks`](crate::Store::list_tasks) passes over such a
/// task), and never on the wire ([`Stored::into_wire`] drops it with every
/// other member the proto does not define).
pub const DIRECT_REPLY: &str = "ctxlogDirectReply";

/// An A2A object with the JSON text it was stored as.
///
/// It reads as the object it holds (`Deref`), and serializes as that text,
/// byte for byte: numbers, key order, escapes and unknown fields exactly as
/// the client or agent sent them, whatever the typed form could represent.
/// One built with [`Stored::new`] (or `From`) has no text and serializes
/// from its value. Two are equal when their values are.
#[derive(Clone)]
pub struct Stored<T> {
    raw: Option<Box<RawValue>>,
    value: T,
}

impl<T> Stored<T> {
    /// An object with no stored text: it serializes from `value`.
    pub fn new(value: T) -> Self {
        Stored { raw: None, value }
    }

    /// The JSON text it was stored as, if it came from the store (or was
    /// deserialized).
    pub fn raw_json(&self) -> Option<&str> {
        self.raw.as_deref().map(RawValue::get)
    }

    /// The object, for changing it (its stored text is dropped).
    pub fn into_inner(self) -> T {
        self.value
    }
}

impl<T: DeserializeOwned> Stored<T> {
    /// Parses `text` into the object, keeping the text.
    pub fn from_json(text: &str) -> serde_json::Result<Self> {
        // Typed first: text that is not a `T` fails before it is copied.
        let text = text.trim();
        let value = serde_json::from_str(text)?;
        let raw = RawValue::from_string(text.to_string())?;
        Ok(Stored {
            raw: Some(raw),
            value,
        })
    }

    /// The object `value` holds, keeping the JSON text it writes as (for
    /// an object built as a `Value`: it is read once, not written out and
    /// parsed again).
    pub(crate) fn from_value(value: serde_json::Value) -> serde_json::Result<Self> {
        let raw = serde_json::value::to_raw_value(&value)?;
        let value = serde_json::from_value(value)?;
        Ok(Stored {
            raw: Some(raw),
            value,
        })
    }
}

impl<T> Deref for Stored<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T> From<T> for Stored<T> {
    fn from(value: T) -> Self {
        Stored::new(value)
    }
}

impl<T: PartialEq> PartialEq for Stored<T> {
    fn eq(&self, other: &Self) -> bool {
        self.value == other.value
    }
}

impl<T: fmt::Debug> fmt::Debug for Stored<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.raw {
            Some(raw) => write!(f, "Stored({})", raw.get()),
            None => write!(f, "Stored({:?})", self.value),
        }
    }
}

impl<T: Serialize> Serialize for Stored<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.raw {
            Some(raw) => raw.serialize(s),
            None => self.value.serialize(s),
        }
    }
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for Stored<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(d)?;
        let value = serde_json::from_str(raw.get()).map_err(serde::de::Error::custom)?;
        Ok(Stored {
            raw: Some(raw),
            value,
        })
    }
}

/// Who sent a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    /// Unspecified.
    #[serde(rename = "ROLE_UNSPECIFIED")]
    Unspecified,
    /// The client.
    #[serde(rename = "ROLE_USER")]
    User,
    /// The agent.
    #[serde(rename = "ROLE_AGENT")]
    Agent,
}

/// The lifecycle state of a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TaskState {
    /// Unknown.
    #[serde(rename = "TASK_STATE_UNSPECIFIED")]
    Unspecified,
    /// Accepted, not started.
    #[serde(rename = "TASK_STATE_SUBMITTED")]
    Submitted,
    /// Being processed.
    #[serde(rename = "TASK_STATE_WORKING")]
    Working,
    /// Finished successfully (terminal).
    #[serde(rename = "TASK_STATE_COMPLETED")]
    Completed,
    /// Finished with an error (terminal).
    #[serde(rename = "TASK_STATE_FAILED")]
    Failed,
    /// Canceled (terminal).
    #[serde(rename = "TASK_STATE_CANCELED")]
    Canceled,
    /// Waiting for the user (interrupted).
    #[serde(rename = "TASK_STATE_INPUT_REQUIRED")]
    InputRequired,
    /// Refused by the agent (terminal).
    #[serde(rename = "TASK_STATE_REJECTED")]
    Rejected,
    /// Waiting for authentication (interrupted).
    #[serde(rename = "TASK_STATE_AUTH_REQUIRED")]
    AuthRequired,
}

impl TaskState {
    /// Every state, in proto order.
    pub const ALL: [TaskState; 9] = [
        TaskState::Unspecified,
        TaskState::Submitted,
        TaskState::Working,
        TaskState::Completed,
        TaskState::Failed,
        TaskState::Canceled,
        TaskState::InputRequired,
        TaskState::Rejected,
        TaskState::AuthRequired,
    ];

    /// Whether the state is final: COMPLETED, FAILED, CANCELED or REJECTED.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskState::Completed | TaskState::Failed | TaskState::Canceled | TaskState::Rejected
        )
    }

    /// The proto name, as in JSON (`"TASK_STATE_WORKING"`).
    pub fn name(self) -> &'static str {
        match self {
            TaskState::Unspecified => "TASK_STATE_UNSPECIFIED",
            TaskState::Submitted => "TASK_STATE_SUBMITTED",
            TaskState::Working => "TASK_STATE_WORKING",
            TaskState::Completed => "TASK_STATE_COMPLETED",
            TaskState::Failed => "TASK_STATE_FAILED",
            TaskState::Canceled => "TASK_STATE_CANCELED",
            TaskState::InputRequired => "TASK_STATE_INPUT_REQUIRED",
            TaskState::Rejected => "TASK_STATE_REJECTED",
            TaskState::AuthRequired => "TASK_STATE_AUTH_REQUIRED",
        }
    }

    /// The state of a proto name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// A section of content: exactly one of text, raw bytes (base64), url, data.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Part {
    /// Text content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// File bytes, base64 as in the JSON form (kept as given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
    /// A URL of the file's content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Structured data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    /// Metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Object>,
    /// A file name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
    /// A media (MIME) type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// Fields this build does not know.
    #[serde(flatten)]
    pub extra: Object,
}

impl Part {
    /// A text part.
    pub fn text(text: impl Into<String>) -> Self {
        Part {
            text: Some(text.into()),
            ..Part::default()
        }
    }

    /// Why the part is not one a message may carry: it needs exactly one
    /// content field, and `raw` must be base64.
    pub fn problem(&self) -> Option<&'static str> {
        if self.content_count() != 1 {
            return Some("each part needs exactly one of text, raw, url and data");
        }
        if self.raw.as_deref().is_some_and(|r| !is_base64(r)) {
            return Some(
                "a raw part must be base64 (the standard or the URL-safe alphabet, with or \
                 without padding), as the JSON form of bytes is",
            );
        }
        None
    }

    /// How many of the four content fields are set (a valid part has one).
    pub fn content_count(&self) -> usize {
        [
            self.text.is_some(),
            self.raw.is_some(),
            self.url.is_some(),
            self.data.is_some(),
        ]
        .into_iter()
        .filter(|x| *x)
        .count()
    }
}

/// Whether `text` is base64 as protobuf's JSON form takes bytes: the
/// standard or the URL-safe alphabet, padded or not.
pub fn is_base64(text: &str) -> bool {
    let bytes = text.as_bytes();
    let body = bytes
        .strip_suffix(b"==")
        .or_else(|| bytes.strip_suffix(b"="))
        .unwrap_or(bytes);
    let alphabet = |c: &u8| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/' | b'-' | b'_');
    if !body.iter().all(alphabet) {
        return false;
    }
    if body.len() == bytes.len() {
        body.len() % 4 != 1
    } else {
        bytes.len().is_multiple_of(4)
    }
}

/// One unit of communication.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    /// Made by the sender; unique per sender. (Required by the spec, but
    /// some of its own examples omit it: it reads as empty then, and
    /// [`Store::receive_message`](crate::Store::receive_message) refuses it.)
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message_id: String,
    /// The context, if the sender named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
    /// The task, if the sender named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// Who sent it.
    pub role: Role,
    /// The content.
    pub parts: Vec<Part>,
    /// Metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Object>,
    /// Extension URIs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<String>,
    /// Tasks this message refers back to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reference_task_ids: Vec<String>,
    /// Fields this build does not know.
    #[serde(flatten)]
    pub extra: Object,
}

impl Message {
    /// A message of `role` with text parts.
    pub fn new(message_id: impl Into<String>, role: Role, texts: &[&str]) -> Self {
        Message {
            message_id: message_id.into(),
            context_id: None,
            task_id: None,
            role,
            parts: texts.iter().map(|t| Part::text(*t)).collect(),
            metadata: None,
            extensions: Vec::new(),
            reference_task_ids: Vec::new(),
            extra: Object::new(),
        }
    }

    /// The same message, naming its task and context.
    pub fn in_task(mut self, task_id: impl Into<String>, context_id: impl Into<String>) -> Self {
        self.task_id = Some(task_id.into());
        self.context_id = Some(context_id.into());
        self
    }
}

/// A task's status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatus {
    /// The state.
    pub state: TaskState,
    /// A message with the status (it joins the task's history).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<Message>,
    /// When the status was recorded, ISO 8601 UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
    /// Fields this build does not know.
    #[serde(flatten)]
    pub extra: Object,
}

impl TaskStatus {
    /// A status of `state`, with no message and no timestamp (the store
    /// records the time it stored it).
    pub fn new(state: TaskState) -> Self {
        TaskStatus {
            state,
            message: None,
            timestamp: None,
            extra: Object::new(),
        }
    }

    /// The same status, with a message (which joins the task's history).
    pub fn with_message(mut self, message: Message) -> Self {
        self.message = Some(message);
        self
    }
}

/// An output of a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Artifact {
    /// Unique within its task.
    pub artifact_id: String,
    /// A human-readable name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A human-readable description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The content.
    pub parts: Vec<Part>,
    /// Metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Object>,
    /// Extension URIs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<String>,
    /// Fields this build does not know.
    #[serde(flatten)]
    pub extra: Object,
}

impl Artifact {
    /// An artifact of id `artifact_id` (unique within its task) with `parts`.
    pub fn new(artifact_id: impl Into<String>, parts: Vec<Part>) -> Self {
        Artifact {
            artifact_id: artifact_id.into(),
            name: None,
            description: None,
            parts,
            metadata: None,
            extensions: Vec::new(),
            extra: Object::new(),
        }
    }

    /// The same artifact, with a human-readable name.
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }
}

/// A task: one stateful job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    /// Made by the store.
    pub id: String,
    /// The context it belongs to.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub context_id: String,
    /// Its current status, as the agent stored it.
    pub status: Stored<TaskStatus>,
    /// Its artifacts (omitted unless asked for): a one-chunk artifact as it
    /// was stored; one of several chunks built around their parts, which
    /// are as they were stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifacts: Option<Vec<Stored<Artifact>>>,
    /// Its messages, oldest first, as they were stored (omitted when none
    /// are asked for).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<Stored<Message>>,
    /// Metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Object>,
}

/// The agent's news: a task's status changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatusUpdateEvent {
    /// The task.
    pub task_id: String,
    /// Its context.
    pub context_id: String,
    /// The new status.
    pub status: Stored<TaskStatus>,
    /// Metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Object>,
}

impl TaskStatusUpdateEvent {
    /// Task `task_id` of context `context_id` has `status` now.
    pub fn new(
        task_id: impl Into<String>,
        context_id: impl Into<String>,
        status: TaskStatus,
    ) -> Self {
        TaskStatusUpdateEvent {
            task_id: task_id.into(),
            context_id: context_id.into(),
            status: status.into(),
            metadata: None,
        }
    }
}

/// The agent's news: an artifact chunk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskArtifactUpdateEvent {
    /// The task.
    pub task_id: String,
    /// Its context.
    pub context_id: String,
    /// The chunk: its parts, and the artifact's other fields.
    pub artifact: Stored<Artifact>,
    /// Extends the artifact of the same id instead of creating or replacing it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub append: bool,
    /// The artifact's final chunk: nothing may follow it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub last_chunk: bool,
    /// Metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Object>,
}

impl TaskArtifactUpdateEvent {
    /// The first (and, unless more follow with
    /// [`appending`](Self::appending), only) chunk of `artifact`, for task
    /// `task_id` of context `context_id`.
    pub fn new(
        task_id: impl Into<String>,
        context_id: impl Into<String>,
        artifact: Artifact,
    ) -> Self {
        TaskArtifactUpdateEvent {
            task_id: task_id.into(),
            context_id: context_id.into(),
            artifact: artifact.into(),
            append: false,
            last_chunk: false,
            metadata: None,
        }
    }

    /// The same chunk, extending the artifact of its id.
    pub fn appending(mut self) -> Self {
        self.append = true;
        self
    }

    /// The same chunk, as the artifact's last: nothing may follow it.
    pub fn last(mut self) -> Self {
        self.last_chunk = true;
        self
    }
}

/// One item of a stream: exactly one field is set.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StreamResponse {
    /// A whole task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<Task>,
    /// A message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<Stored<Message>>,
    /// A status change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_update: Option<TaskStatusUpdateEvent>,
    /// An artifact chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_update: Option<TaskArtifactUpdateEvent>,
}

/// The answer to a task listing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListTasksResponse {
    /// The page's tasks, newest status first.
    pub tasks: Vec<Task>,
    /// The next page's token; empty on the last page.
    pub next_page_token: String,
    /// The page size used.
    pub page_size: u32,
    /// All matching tasks, before paging.
    pub total_size: u32,
    /// Tasks of this page that could not be read (a damaged record): left
    /// out of `tasks` and listed here with why, so that one damaged task
    /// never hides the others. Not part of the A2A form (never serialized).
    #[serde(skip)]
    pub damaged: Vec<DamagedTask>,
}

/// A task a listing could not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamagedTask {
    /// The task.
    pub task_id: String,
    /// What is wrong, with the segment and offset of the damage.
    pub reason: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_is_taken_in_both_alphabets_padded_or_not_and_nothing_else() {
        for ok in [
            "", "aGVsbG8=", "aGVsbG8", "aGk=", "aGk", "+/+/", "-_-_", "YQ==", "YQ",
        ] {
            assert!(is_base64(ok), "{ok:?}");
        }
        for bad in [
            "not base64!",
            "aGVsbG8===",
            "a",
            "aGVsb",
            "YQ=",
            "Y=Q=",
            "aGk\n",
            "é",
        ] {
            assert!(!is_base64(bad), "{bad:?}");
        }
    }

    #[test]
    fn a_raw_part_that_is_not_base64_is_a_problem() {
        let mut part = Part::text("x");
        assert_eq!(part.problem(), None);
        part.text = None;
        part.raw = Some("not base64!".into());
        assert!(part.problem().is_some_and(|p| p.contains("base64")));
        part.raw = Some("aGVsbG8=".into());
        assert_eq!(part.problem(), None);
        part.url = Some("https://example.com".into());
        assert!(part.problem().is_some_and(|p| p.contains("exactly one")));
    }
}
