//! The scripted agent: a JSON script of rules, matched in order against
//! each turn's message, each a list of steps. It makes `ctxlog-server` a
//! ready test double for anyone building an A2A client.
//!
//! ```json
//! {
//!   "name": "refund desk",
//!   "rules": [
//!     { "messageIdPrefix": "slow-", "steps": [
//!         { "status": "TASK_STATE_WORKING", "text": "looking into it" },
//!         { "pauseMs": 500 },
//!         { "status": "TASK_STATE_COMPLETED", "text": "done: {text}" } ] },
//!     { "text": "refund", "steps": [
//!         { "artifact": { "artifactId": "r1", "name": "receipt",
//!                         "parts": [ { "text": "refund of 6.90" },
//!                                    { "raw": "aGVsbG8=", "filename": "r.txt", "mediaType": "text/plain" },
//!                                    { "url": "https://example.com/r.pdf" },
//!                                    { "data": { "amount": 6.9 } } ] },
//!           "append": false, "lastChunk": true },
//!         { "status": "TASK_STATE_INPUT_REQUIRED", "text": "which card?" } ] },
//!     { "text": "hello", "steps": [ { "reply": "hi! you said: {text}" } ] }
//!   ],
//!   "default": [ { "status": "TASK_STATE_COMPLETED", "text": "{text}" } ]
//! }
//! ```
//!
//! A rule matches when every condition it gives holds: `messageIdPrefix`
//! (the message's id starts with it) and `text` (its text parts contain
//! it). The first rule that matches runs; `default` runs when none does
//! (without one, the task completes with the message's text). Steps:
//!
//! | step | what it does |
//! | --- | --- |
//! | `{ "status": STATE, "text": T? }` | a status update (with an agent message of text `T`) |
//! | `{ "artifact": ARTIFACT, "append": B?, "lastChunk": B? }` | an artifact chunk (any A2A `Artifact`: parts of every kind, with filename and mediaType) |
//! | `{ "reply": T }` | a direct reply message (the client gets a message, no task) |
//! | `{ "pauseMs": N }` | waits N ms (ended early, and the script stopped, by a cancel) |
//! | `{ "fail": T }` | FAILED with the message `T` |
//! | `{ "reject": T }` | REJECTED with the message `T` |
//!
//! In every text, `{text}` stands for the message's text.

use std::path::Path;
use std::sync::Arc;

use ctxlog::a2a::{Artifact, Message, Role, TaskState};
use serde::Deserialize;

use super::message_text;
use crate::agent::{
    AgentDescription, AgentError, AgentExecutor, BoxFuture, EventSink, TurnContext,
};

/// A script.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    /// The agent's name on its card.
    #[serde(default)]
    pub name: Option<String>,
    /// The agent's description on its card.
    #[serde(default)]
    pub description: Option<String>,
    /// The rules, tried in order.
    #[serde(default)]
    pub rules: Vec<Rule>,
    /// The steps when no rule matches.
    #[serde(default)]
    pub default: Option<Vec<Step>>,
}

/// A rule: conditions and steps.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Rule {
    /// The messageId starts with this.
    #[serde(default)]
    pub message_id_prefix: Option<String>,
    /// The message's text contains this.
    #[serde(default)]
    pub text: Option<String>,
    /// What to do.
    pub steps: Vec<Step>,
}

/// One step.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Step {
    /// A status update.
    Status {
        /// The state's proto name.
        status: String,
        /// The agent message's text, if any.
        #[serde(default)]
        text: Option<String>,
    },
    /// An artifact chunk.
    Artifact {
        /// The chunk.
        artifact: Box<Artifact>,
        /// Extends the artifact.
        #[serde(default)]
        append: bool,
        /// The artifact's last chunk.
        #[serde(default, rename = "lastChunk")]
        last_chunk: bool,
    },
    /// A direct reply.
    Reply {
        /// Its text.
        reply: String,
    },
    /// A pause.
    Pause {
        /// How long, in milliseconds.
        #[serde(rename = "pauseMs")]
        pause_ms: u64,
    },
    /// FAILED.
    Fail {
        /// The message.
        fail: String,
    },
    /// REJECTED.
    Reject {
        /// The message.
        reject: String,
    },
}

/// The scripts that come with the server, by name: `--agent
/// scripted:NAME` runs one from any directory.
pub const BUILT_IN: [(&str, &str); 3] = [
    (
        "refund-desk",
        include_str!("../../examples/refund-desk.json"),
    ),
    (
        "streaming-report",
        include_str!("../../examples/streaming-report.json"),
    ),
    ("flaky", include_str!("../../examples/flaky.json")),
];

impl Script {
    /// A built-in script by name ([`BUILT_IN`]), else the script file at
    /// `name_or_path`, its every state name checked.
    pub fn named(name_or_path: &str) -> Result<Self, String> {
        match BUILT_IN.iter().find(|(name, _)| *name == name_or_path) {
            Some((name, text)) => Self::parse(text, name),
            None => Self::load(Path::new(name_or_path)),
        }
    }

    /// Reads a script file, checking every state name.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            let names: Vec<&str> = BUILT_IN.iter().map(|(n, _)| *n).collect();
            format!(
                "cannot read the script {}: {e} (the built-in scripts are {})",
                path.display(),
                names.join(", ")
            )
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// A script from its JSON text (`source` names it in errors).
    pub fn parse(text: &str, source: &str) -> Result<Self, String> {
        let script: Script = serde_json::from_str(text)
            .map_err(|e| format!("the script {source} is not valid: {e}"))?;
        let steps = script
            .rules
            .iter()
            .flat_map(|r| &r.steps)
            .chain(script.default.iter().flatten());
        for step in steps {
            if let Step::Status { status, .. } = step {
                if TaskState::from_name(status).is_none() {
                    return Err(format!(
                        "the script {source} names the unknown state {status:?}"
                    ));
                }
            }
        }
        Ok(script)
    }

    /// The steps for a message.
    fn steps_for(&self, message: &Message) -> Vec<Step> {
        let text = message_text(message);
        let rule = self.rules.iter().find(|r| {
            r.message_id_prefix
                .as_deref()
                .is_none_or(|p| message.message_id.starts_with(p))
                && r.text.as_deref().is_none_or(|t| text.contains(t))
        });
        match (rule, &self.default) {
            (Some(rule), _) => rule.steps.clone(),
            (None, Some(default)) => default.clone(),
            (None, None) => vec![Step::Status {
                status: TaskState::Completed.name().into(),
                text: Some("{text}".into()),
            }],
        }
    }
}

/// The agent that runs a script.
#[derive(Debug, Clone)]
pub struct Scripted(Arc<Script>);

impl Scripted {
    /// An agent running `script`.
    pub fn new(script: Script) -> Self {
        Scripted(Arc::new(script))
    }
}

fn agent_message(text: &str, said: &str) -> Message {
    Message::new("", Role::Agent, &[&text.replace("{text}", said)])
}

impl AgentExecutor for Scripted {
    fn describe(&self) -> AgentDescription {
        AgentDescription {
            name: self
                .0
                .name
                .clone()
                .unwrap_or_else(|| "ctxlog scripted agent".into()),
            description: self
                .0
                .description
                .clone()
                .unwrap_or_else(|| "Answers as its script says".into()),
            ..AgentDescription::default()
        }
    }

    fn execute(&self, turn: TurnContext, events: EventSink) -> BoxFuture<Result<(), AgentError>> {
        let script = self.0.clone();
        Box::pin(async move {
            let said = message_text(&turn.message);
            let mut cancel = turn.cancel.clone();
            for step in script.steps_for(&turn.message) {
                match step {
                    Step::Status { status, text } => {
                        let state = TaskState::from_name(&status).unwrap_or(TaskState::Working);
                        let message = text.map(|t| agent_message(&t, &said));
                        events.status(state, message).await?;
                    }
                    Step::Artifact {
                        mut artifact,
                        append,
                        last_chunk,
                    } => {
                        for part in &mut artifact.parts {
                            if let Some(t) = &mut part.text {
                                *t = t.replace("{text}", &said);
                            }
                        }
                        events.artifact(*artifact, append, last_chunk).await?
                    }
                    Step::Reply { reply } => events.reply(agent_message(&reply, &said)).await?,
                    Step::Pause { pause_ms } => {
                        let pause = tokio::time::sleep(std::time::Duration::from_millis(pause_ms));
                        tokio::select! {
                            _ = pause => {}
                            _ = cancel.canceled() => return Ok(()),
                        }
                    }
                    Step::Fail { fail } => {
                        let message = agent_message(&fail, &said);
                        events.status(TaskState::Failed, Some(message)).await?;
                    }
                    Step::Reject { reject } => {
                        let message = agent_message(&reject, &said);
                        events.status(TaskState::Rejected, Some(message)).await?;
                    }
                }
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_scripts_load_and_unknown_states_are_refused() {
        let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
        let mut n = 0;
        for entry in std::fs::read_dir(examples).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "json") {
                Script::load(&path).unwrap();
                n += 1;
            }
        }
        assert!(n >= 3);
        let bad =
            std::env::temp_dir().join(format!("ctxlog-bad-script-{}.json", std::process::id()));
        std::fs::write(&bad, r#"{"rules":[],"default":[{"status":"DONE"}]}"#).unwrap();
        assert!(Script::load(&bad).unwrap_err().contains("DONE"));
        std::fs::write(&bad, r#"{"rules":[],"default":[{"pause":10}]}"#).unwrap();
        assert!(Script::load(&bad).is_err());
        std::fs::remove_file(&bad).unwrap();
    }

    #[test]
    fn rules_match_in_order_by_message_id_prefix_and_text() {
        let script: Script = serde_json::from_str(
            r#"{"rules":[
                {"messageIdPrefix":"a-","text":"x","steps":[{"reply":"both"}]},
                {"text":"x","steps":[{"reply":"text"}]}],
              "default":[{"reply":"default"}]}"#,
        )
        .unwrap();
        let reply = |id: &str, text: &str| match &script.steps_for(&Message::new(
            id,
            Role::User,
            &[text],
        ))[..]
        {
            [Step::Reply { reply }] => reply.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(reply("a-1", "xyz"), "both");
        assert_eq!(reply("b-1", "xyz"), "text");
        assert_eq!(reply("a-1", "nothing"), "default");
    }
}
