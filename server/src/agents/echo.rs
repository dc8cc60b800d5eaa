//! The echo agent: works a moment, streams the text it got back as an
//! artifact in a few chunks, and completes with the text and how many
//! earlier turns the guarded history held, so that a first stream shows
//! every kind of event and history is visibly at work.

use ctxlog::a2a::{Artifact, Message, Part, Role, TaskState};

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
            let said = message_text(&turn.message);
            events.status(TaskState::Working, None).await?;
            let chunks = chunks(&said, 3);
            let last = chunks.len() - 1;
            for (i, chunk) in chunks.into_iter().enumerate() {
                let artifact = Artifact::new("echo", vec![Part::text(chunk)]).with_name("echo");
                events.artifact(artifact, i > 0, i == last).await?;
            }
            let earlier = turn.history.turns.len() as u64 + turn.history.omitted;
            let text = format!("{said} ({earlier} earlier turn(s) in this context)");
            let reply = Message::new("", Role::Agent, &[&text]);
            events.status(TaskState::Completed, Some(reply)).await?;
            Ok(())
        })
    }
}

/// `text` in at most `n` pieces of about equal length (split between
/// characters); one piece, however short the text.
fn chunks(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let size = chars.len().div_ceil(n.max(1)).max(1);
    let mut out: Vec<String> = chars.chunks(size).map(|c| c.iter().collect()).collect();
    if out.is_empty() {
        out.push(String::new());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_split_into_at_most_three_pieces_between_characters() {
        assert_eq!(chunks("hello there", 3), ["hell", "o th", "ere"]);
        assert_eq!(chunks("héé", 3), ["h", "é", "é"]);
        assert_eq!(chunks("hi", 3), ["h", "i"]);
        assert_eq!(chunks("", 3), [""]);
        assert_eq!(chunks("hello there", 3).concat(), "hello there");
    }
}
