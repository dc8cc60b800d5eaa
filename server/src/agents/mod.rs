//! Agents bundled with the server: [`Echo`], which shows the guarded
//! history at work, and [`Scripted`], a test double for anyone building an
//! A2A client.

mod echo;
mod scripted;

pub use echo::Echo;
pub use scripted::{Script, Scripted, BUILT_IN};

use ctxlog::a2a::Message;

/// The text of a message's text parts, joined by newlines.
pub fn message_text(message: &Message) -> String {
    message
        .parts
        .iter()
        .filter_map(|p| p.text.as_deref())
        .collect::<Vec<_>>()
        .join("\n")
}
