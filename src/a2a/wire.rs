//! The A2A form of what the store holds, for a response on the wire.
//!
//! The store keeps every byte it was sent, members the A2A proto does not
//! define included (receivers should ignore what they do not know, so a
//! client or an agent may send them), and hands them back as stored
//! ([`Stored`]). A response, though, must be the spec's form: a strict
//! reader (protobuf's JSON parser without `ignore_unknown_fields`) refuses
//! a member it does not know. The typed parse that every read does anyway
//! puts such members in the `extra` maps, so telling is cheap: an object
//! without any goes out as its stored text, byte for byte; only one that
//! has some is encoded again from its value without them.

use serde::Serialize;

use super::{Artifact, Message, Part, Stored, StreamResponse, Task, TaskStatus};

/// An object whose JSON may carry members the proto does not define.
pub trait SpecForm {
    /// Whether it, or an object in it, carries such a member.
    fn has_unknown(&self) -> bool;
    /// Drops every such member, at every depth.
    fn drop_unknown(&mut self);
}

impl SpecForm for Part {
    fn has_unknown(&self) -> bool {
        !self.extra.is_empty()
    }

    fn drop_unknown(&mut self) {
        self.extra.clear();
    }
}

impl SpecForm for Message {
    fn has_unknown(&self) -> bool {
        !self.extra.is_empty() || self.parts.iter().any(Part::has_unknown)
    }

    fn drop_unknown(&mut self) {
        self.extra.clear();
        self.parts.iter_mut().for_each(Part::drop_unknown);
    }
}

impl SpecForm for Artifact {
    fn has_unknown(&self) -> bool {
        !self.extra.is_empty() || self.parts.iter().any(Part::has_unknown)
    }

    fn drop_unknown(&mut self) {
        self.extra.clear();
        self.parts.iter_mut().for_each(Part::drop_unknown);
    }
}

impl SpecForm for TaskStatus {
    fn has_unknown(&self) -> bool {
        !self.extra.is_empty() || self.message.as_ref().is_some_and(Message::has_unknown)
    }

    fn drop_unknown(&mut self) {
        self.extra.clear();
        if let Some(m) = &mut self.message {
            m.drop_unknown();
        }
    }
}

impl<T: SpecForm + Serialize> Stored<T> {
    /// The object in the spec's form: as stored (its text, byte for byte)
    /// when it holds only members the proto defines, else encoded again
    /// from its value without the others.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctxlog::a2a::{Message, Stored};
    /// let sent = r#"{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi","x-trace":1}],"x-client":"v2"}"#;
    /// let stored: Stored<Message> = Stored::from_json(sent)?;
    /// let wire = serde_json::to_string(&stored.into_wire())?;
    /// assert_eq!(wire, r#"{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}"#);
    /// let plain = r#"{"messageId":"m2", "role":"ROLE_USER", "parts":[{"text":"hi"}]}"#;
    /// let stored: Stored<Message> = Stored::from_json(plain)?;
    /// assert_eq!(serde_json::to_string(&stored.into_wire())?, plain); // untouched
    /// # Ok::<(), serde_json::Error>(())
    /// ```
    pub fn into_wire(self) -> Stored<T> {
        if !self.value.has_unknown() {
            return self;
        }
        let mut value = self.value;
        value.drop_unknown();
        Stored::new(value)
    }
}

impl Task {
    /// The task in the spec's form: its status, history and artifacts each
    /// as [`Stored::into_wire`] gives them.
    pub fn into_wire(self) -> Task {
        Task {
            status: self.status.into_wire(),
            artifacts: self
                .artifacts
                .map(|a| a.into_iter().map(Stored::into_wire).collect()),
            history: self.history.into_iter().map(Stored::into_wire).collect(),
            ..self
        }
    }
}

impl StreamResponse {
    /// The event in the spec's form (see [`Task::into_wire`]).
    pub fn into_wire(self) -> StreamResponse {
        StreamResponse {
            task: self.task.map(Task::into_wire),
            message: self.message.map(Stored::into_wire),
            status_update: self.status_update.map(|mut u| {
                u.status = u.status.into_wire();
                u
            }),
            artifact_update: self.artifact_update.map(|mut u| {
                u.artifact = u.artifact.into_wire();
                u
            }),
        }
    }
}
