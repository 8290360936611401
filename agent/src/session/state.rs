//! The reducer: the one place a [`Record`] changes a session. The live agent applies each
//! record it writes through [`SessionState::apply`]; loading a file applies each record read
//! through the same function, so a loaded session is the live one.

use anvil_llm::{Message, Usage};
use serde_json::Value;

use super::record::{Record, Todo};

/// Everything of a session except its messages (which the agent keeps in its request, so a
/// step costs no copy of them; the reducer takes them beside this).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SessionState {
    pub id: String,
    pub cwd: String,
    pub model: String,
    pub anvil_version: String,
    pub todos: Vec<Todo>,
    /// Calls started with no finish recorded, in start order: after a crash, each one's outcome
    /// is unknown.
    pub open_calls: Vec<OpenCall>,
    /// The sum of every response's usage.
    pub usage: Usage,
    /// Model responses so far (one `Usage` record each).
    pub responses: u64,
    /// Checkpoints taken, oldest first.
    pub checkpoints: Vec<String>,
}

/// A tool call that started and has no recorded finish.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenCall {
    pub call_id: String,
    pub name: String,
    pub arguments: Value,
}

/// A record that cannot apply to the session as it stands.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReduceError {
    #[error("message_extended names message {index}, but the session has {len} messages")]
    NoSuchMessage { index: usize, len: usize },
    #[error("tool_finished for call {call_id}, which never started")]
    FinishedUnstarted { call_id: String },
    #[error("a second session_started (session {id})")]
    StartedTwice { id: String },
}

impl SessionState {
    /// Applies one record to this state and `messages`. On error nothing changed.
    pub fn apply(
        &mut self,
        messages: &mut Vec<Message>,
        record: Record,
    ) -> Result<(), ReduceError> {
        match record {
            Record::SessionStarted {
                id,
                cwd,
                model,
                anvil_version,
            } => {
                if !self.id.is_empty() {
                    return Err(ReduceError::StartedTwice { id });
                }
                self.id = id;
                self.cwd = cwd;
                self.model = model;
                self.anvil_version = anvil_version;
            }
            Record::MessageAppended { message } => messages.push(message),
            Record::MessageExtended { index, content } => {
                let len = messages.len();
                let message = messages
                    .get_mut(index)
                    .ok_or(ReduceError::NoSuchMessage { index, len })?;
                message.content.extend(content);
            }
            Record::ContextReplaced { messages: new, .. } => *messages = new,
            Record::ModelChanged { model } => self.model = model,
            Record::TodosChanged { todos } => self.todos = todos,
            Record::ToolStarted {
                call_id,
                name,
                arguments,
            } => self.open_calls.push(OpenCall {
                call_id,
                name,
                arguments,
            }),
            Record::ToolFinished { call_id, .. } => {
                let at = self
                    .open_calls
                    .iter()
                    .position(|c| c.call_id == call_id)
                    .ok_or(ReduceError::FinishedUnstarted { call_id })?;
                self.open_calls.remove(at);
            }
            Record::Usage { usage } => {
                self.usage += usage;
                self.responses += 1;
            }
            Record::CheckpointRecorded { id, .. } => self.checkpoints.push(id),
        }
        Ok(())
    }
}
