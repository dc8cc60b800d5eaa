//! The echo agent: completes each task with the text it got and how many
//! earlier turns the guarded history held, so history is visibly at work.

use ctxlog::a2a::{Message, Role, TaskState};

use super::message_text;
use crate::agent::{
    AgentDescription, AgentError, AgentExecutor, BoxFuture, EventSink, Skill, TurnContext,
};

/// Answers every message with its own text.
#[derive(Debug, Clone, Copy, Default)]
pub struct Echo;

impl AgentExecutor for Echo {
    fn describe(&self) -> AgentDescription {
        AgentDescription {
            name: "ctxlog echo".into(),
            description: "Completes each task with the text it got and how many earlier turns \
                          its context's history held"
                .into(),
            skills: vec![Skill {
                id: "echo".into(),
                name: "Echo".into(),
                description: "Repeats the message's text".into(),
                tags: vec!["echo".into(), "test".into()],
                examples: vec!["hello".into()],
            }],
            ..AgentDescription::default()
        }
    }

    fn execute(&self, turn: TurnContext, events: EventSink) -> BoxFuture<Result<(), AgentError>> {
        Box::pin(async move {
            let earlier = turn.history.turns.len() as u64 + turn.history.omitted;
            let text = format!(
                "{} ({earlier} earlier turn(s) in this context)",
                message_text(&turn.message)
            );
            let reply = Message::new("", Role::Agent, &[&text]);
            events.status(TaskState::Completed, Some(reply)).await?;
            Ok(())
        })
    }
}
