//! Transcript integrity: the invariant every request must satisfy.
//!
//! 1. the first message is from the user;
//! 2. roles strictly alternate;
//! 3. every tool call in assistant message `i` is answered by exactly one tool result in message
//!    `i + 1`;
//! 4. no tool result answers an id that the previous message did not call;
//! 5. tool-call ids are non-empty and unique across the whole transcript.
//!
//! Tool calls may only appear in assistant messages and tool results only in user messages.
//!
//! The one legal exception is the state between "the model asked for tools" and "the tools ran":
//! the final assistant message may hold unanswered calls. Callers say which state they are in
//! with [`Tail`]; there is no default, so the exception cannot be granted by accident.

use std::collections::{HashMap, HashSet};

use crate::types::{BlockKind, ContentBlock, Message, Role};

/// Where the transcript is in the execution cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tail {
    /// Ready to be sent: every tool call has its result.
    Complete,
    /// The model's tool calls are about to run: the final assistant message may have unanswered
    /// calls. Never valid for a request.
    PendingToolCalls,
}

/// A broken transcript, naming the message index, block kind and id that broke it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TranscriptError {
    #[error("the transcript is empty; a request needs at least one user message")]
    Empty,
    #[error("message 0 is from the {role:?}; a transcript must start with a user message")]
    FirstNotUser { role: Role },
    #[error(
        "message {index} is from the {role:?}, like the message before it; roles must alternate"
    )]
    RolesNotAlternating { index: usize, role: Role },
    #[error(
        "message {index} ({role:?}) holds a {kind} block{}; tool calls belong to assistant messages and tool results to user messages",
        id_suffix(id)
    )]
    MisplacedBlock {
        index: usize,
        role: Role,
        kind: BlockKind,
        id: Option<String>,
    },
    #[error("message {index} holds a {kind} block with an empty id")]
    EmptyId { index: usize, kind: BlockKind },
    #[error("message {index} repeats tool-call id '{id}', first used in message {first_index}")]
    DuplicateCallId {
        index: usize,
        id: String,
        first_index: usize,
    },
    #[error("tool call '{id}' in message {index} has no tool result in the next message")]
    MissingResult { index: usize, id: String },
    #[error("message {index} answers tool call '{id}' more than once")]
    DuplicateResult { index: usize, id: String },
    #[error(
        "message {index} holds a tool result for '{id}', which the previous message did not call"
    )]
    OrphanResult { index: usize, id: String },
}

fn id_suffix(id: &Option<String>) -> String {
    id.as_ref()
        .map(|id| format!(" with id '{id}'"))
        .unwrap_or_default()
}

/// Checks the transcript invariant (see the module docs).
pub fn validate_transcript(messages: &[Message], tail: Tail) -> Result<(), TranscriptError> {
    if messages.is_empty() {
        return Err(TranscriptError::Empty);
    }
    let validator = TranscriptValidator::from_messages(messages)?;
    match tail {
        Tail::Complete => validator.check_complete(),
        Tail::PendingToolCalls => Ok(()),
    }
}

/// Validates a transcript as it grows. Each appended message is checked against the state the
/// earlier ones left (ids seen, calls awaiting results), so a long session pays per message
/// instead of re-checking the whole transcript every step. [`validate_transcript`] is this
/// validator run over a whole transcript: there is one algorithm.
#[derive(Debug, Clone, Default)]
pub struct TranscriptValidator {
    len: usize,
    last_role: Option<Role>,
    /// Every tool-call id so far, with the index of the message that introduced it.
    seen: HashMap<String, usize>,
    /// The calls of the last message, if it is an assistant message, in order.
    open_calls: Vec<String>,
}

impl TranscriptValidator {
    pub fn new() -> Self {
        Self::default()
    }

    /// A validator that has seen `messages` (pending calls allowed at the end).
    pub fn from_messages(messages: &[Message]) -> Result<Self, TranscriptError> {
        let mut v = Self::new();
        for m in messages {
            v.push(m)?;
        }
        Ok(v)
    }

    /// Messages seen so far.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `id` is already used by a tool call in the transcript.
    pub fn has_call_id(&self, id: &str) -> bool {
        self.seen.contains_key(id)
    }

    /// Checks `message` as the next one; on success it becomes part of the state.
    pub fn push(&mut self, message: &Message) -> Result<(), TranscriptError> {
        let index = self.len;
        match (index, self.last_role) {
            (0, _) if message.role != Role::User => {
                return Err(TranscriptError::FirstNotUser { role: message.role });
            }
            (_, Some(last)) if last == message.role => {
                return Err(TranscriptError::RolesNotAlternating {
                    index,
                    role: message.role,
                });
            }
            _ => {}
        }
        // Placement, empty ids and uniqueness over the original blocks (a set would hide a
        // duplicate within one message).
        let mut new_calls: Vec<&str> = Vec::new();
        for block in &message.content {
            match (message.role, block) {
                (Role::Assistant, ContentBlock::ToolCall { id, .. }) => {
                    if id.is_empty() {
                        return Err(TranscriptError::EmptyId {
                            index,
                            kind: BlockKind::ToolCall,
                        });
                    }
                    let first = self
                        .seen
                        .get(id.as_str())
                        .copied()
                        .or_else(|| new_calls.contains(&id.as_str()).then_some(index));
                    if let Some(first_index) = first {
                        return Err(TranscriptError::DuplicateCallId {
                            index,
                            id: id.clone(),
                            first_index,
                        });
                    }
                    new_calls.push(id);
                }
                (Role::User, ContentBlock::ToolResult { call_id, .. }) => {
                    if call_id.is_empty() {
                        return Err(TranscriptError::EmptyId {
                            index,
                            kind: BlockKind::ToolResult,
                        });
                    }
                }
                (Role::User, ContentBlock::ToolCall { id, .. }) => {
                    return Err(TranscriptError::MisplacedBlock {
                        index,
                        role: Role::User,
                        kind: BlockKind::ToolCall,
                        id: Some(id.clone()),
                    });
                }
                (Role::Assistant, ContentBlock::ToolResult { call_id, .. }) => {
                    return Err(TranscriptError::MisplacedBlock {
                        index,
                        role: Role::Assistant,
                        kind: BlockKind::ToolResult,
                        id: Some(call_id.clone()),
                    });
                }
                (
                    _,
                    ContentBlock::Text { .. }
                    | ContentBlock::Image { .. }
                    | ContentBlock::Reasoning { .. },
                ) => {}
            }
        }
        if message.role == Role::User {
            // Pair this message's results with the previous message's calls.
            let mut answered: HashSet<&str> = HashSet::new();
            for block in &message.content {
                if let ContentBlock::ToolResult { call_id, .. } = block {
                    if !self.open_calls.iter().any(|c| c == call_id) {
                        return Err(TranscriptError::OrphanResult {
                            index,
                            id: call_id.clone(),
                        });
                    }
                    if !answered.insert(call_id) {
                        return Err(TranscriptError::DuplicateResult {
                            index,
                            id: call_id.clone(),
                        });
                    }
                }
            }
            if let Some(missing) = self
                .open_calls
                .iter()
                .find(|c| !answered.contains(c.as_str()))
            {
                return Err(TranscriptError::MissingResult {
                    index: index - 1,
                    id: missing.clone(),
                });
            }
        }
        // Commit.
        self.open_calls = new_calls.iter().map(|c| c.to_string()).collect();
        for id in new_calls {
            self.seen.insert(id.to_string(), index);
        }
        self.len += 1;
        self.last_role = Some(message.role);
        Ok(())
    }

    /// The transcript is ready for a request: no tool call waits for its result.
    pub fn check_complete(&self) -> Result<(), TranscriptError> {
        match self.open_calls.first() {
            Some(id) => Err(TranscriptError::MissingResult {
                index: self.len - 1,
                id: id.clone(),
            }),
            None if self.len == 0 => Err(TranscriptError::Empty),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(id: &str) -> ContentBlock {
        ContentBlock::ToolCall {
            id: id.into(),
            name: "t".into(),
            arguments: json!({}),
            meta: None,
        }
    }
    fn result(id: &str) -> ContentBlock {
        ContentBlock::tool_result(id, "ok", false)
    }
    fn user(blocks: Vec<ContentBlock>) -> Message {
        Message::new(Role::User, blocks)
    }
    fn assistant(blocks: Vec<ContentBlock>) -> Message {
        Message::new(Role::Assistant, blocks)
    }
    fn text(t: &str) -> ContentBlock {
        ContentBlock::text(t)
    }
    fn ok(m: &[Message]) {
        assert_eq!(validate_transcript(m, Tail::Complete), Ok(()));
    }
    fn err(m: &[Message]) -> TranscriptError {
        validate_transcript(m, Tail::Complete).unwrap_err()
    }

    #[test]
    fn empty_transcript_is_rejected() {
        assert_eq!(err(&[]), TranscriptError::Empty);
    }

    #[test]
    fn rule1_first_message_is_from_the_user() {
        ok(&[user(vec![text("hi")])]);
        assert_eq!(
            err(&[assistant(vec![text("hi")])]),
            TranscriptError::FirstNotUser {
                role: Role::Assistant
            }
        );
    }

    #[test]
    fn rule2_roles_alternate() {
        ok(&[
            user(vec![text("a")]),
            assistant(vec![text("b")]),
            user(vec![text("c")]),
        ]);
        assert_eq!(
            err(&[user(vec![text("a")]), user(vec![text("b")])]),
            TranscriptError::RolesNotAlternating {
                index: 1,
                role: Role::User
            }
        );
        assert_eq!(
            err(&[
                user(vec![text("a")]),
                assistant(vec![text("b")]),
                assistant(vec![text("c")])
            ]),
            TranscriptError::RolesNotAlternating {
                index: 2,
                role: Role::Assistant
            }
        );
    }

    #[test]
    fn rule3_every_call_has_exactly_one_result_in_the_next_message() {
        ok(&[
            user(vec![text("go")]),
            assistant(vec![call("a"), call("b")]),
            user(vec![result("b"), result("a")]),
        ]);
        assert_eq!(
            err(&[
                user(vec![text("go")]),
                assistant(vec![call("a"), call("b")]),
                user(vec![result("a")]),
            ]),
            TranscriptError::MissingResult {
                index: 1,
                id: "b".into()
            }
        );
        // The result is there, but two messages later.
        assert_eq!(
            err(&[
                user(vec![text("go")]),
                assistant(vec![call("a")]),
                user(vec![text("wait")]),
                assistant(vec![text("ok")]),
                user(vec![result("a")]),
            ]),
            TranscriptError::MissingResult {
                index: 1,
                id: "a".into()
            }
        );
    }

    #[test]
    fn rule4_no_orphan_results() {
        assert_eq!(
            err(&[
                user(vec![text("go")]),
                assistant(vec![call("a")]),
                user(vec![result("a"), result("zzz")]),
            ]),
            TranscriptError::OrphanResult {
                index: 2,
                id: "zzz".into()
            }
        );
        // A result in the very first message has nothing to answer.
        assert_eq!(
            err(&[user(vec![result("a")])]),
            TranscriptError::OrphanResult {
                index: 0,
                id: "a".into()
            }
        );
    }

    #[test]
    fn rule5_ids_are_unique_across_steps() {
        ok(&[
            user(vec![text("go")]),
            assistant(vec![call("a")]),
            user(vec![result("a")]),
            assistant(vec![call("b")]),
            user(vec![result("b")]),
        ]);
        assert_eq!(
            err(&[
                user(vec![text("go")]),
                assistant(vec![call("a")]),
                user(vec![result("a")]),
                assistant(vec![call("a")]),
                user(vec![result("a")]),
            ]),
            TranscriptError::DuplicateCallId {
                index: 3,
                id: "a".into(),
                first_index: 1
            }
        );
    }

    #[test]
    fn duplicate_ids_within_one_message() {
        // Two calls sharing an id and one result: must fail (a set would hide it).
        assert_eq!(
            err(&[
                user(vec![text("go")]),
                assistant(vec![call("a"), call("a")]),
                user(vec![result("a")]),
            ]),
            TranscriptError::DuplicateCallId {
                index: 1,
                id: "a".into(),
                first_index: 1
            }
        );
    }

    #[test]
    fn duplicate_results() {
        assert_eq!(
            err(&[
                user(vec![text("go")]),
                assistant(vec![call("a")]),
                user(vec![result("a"), result("a")]),
            ]),
            TranscriptError::DuplicateResult {
                index: 2,
                id: "a".into()
            }
        );
    }

    #[test]
    fn empty_ids() {
        assert_eq!(
            err(&[user(vec![text("go")]), assistant(vec![call("")])]),
            TranscriptError::EmptyId {
                index: 1,
                kind: BlockKind::ToolCall
            }
        );
        assert_eq!(
            err(&[
                user(vec![text("go")]),
                assistant(vec![call("a")]),
                user(vec![result("")])
            ]),
            TranscriptError::EmptyId {
                index: 2,
                kind: BlockKind::ToolResult
            }
        );
    }

    #[test]
    fn malformed_block_roles_fail_even_when_ids_match() {
        // A call on a user message, answered "correctly" by an assistant result.
        assert_eq!(
            err(&[user(vec![call("a")]), assistant(vec![result("a")])]),
            TranscriptError::MisplacedBlock {
                index: 0,
                role: Role::User,
                kind: BlockKind::ToolCall,
                id: Some("a".into())
            }
        );
        assert_eq!(
            err(&[
                user(vec![text("go")]),
                assistant(vec![call("a"), result("a")])
            ]),
            TranscriptError::MisplacedBlock {
                index: 1,
                role: Role::Assistant,
                kind: BlockKind::ToolResult,
                id: Some("a".into())
            }
        );
    }

    #[test]
    fn pending_tail_is_legal_only_when_declared() {
        let mut t = vec![
            user(vec![text("go")]),
            assistant(vec![text("let me look"), call("a")]),
        ];
        assert_eq!(validate_transcript(&t, Tail::PendingToolCalls), Ok(()));
        assert_eq!(
            validate_transcript(&t, Tail::Complete),
            Err(TranscriptError::MissingResult {
                index: 1,
                id: "a".into()
            })
        );
        // Only after the results are appended is it a legal request.
        t.push(user(vec![result("a")]));
        assert_eq!(validate_transcript(&t, Tail::Complete), Ok(()));
    }

    #[test]
    fn pending_tail_does_not_excuse_earlier_messages() {
        let t = vec![
            user(vec![text("go")]),
            assistant(vec![call("a")]),
            user(vec![text("no result")]),
            assistant(vec![call("b")]),
        ];
        assert_eq!(
            validate_transcript(&t, Tail::PendingToolCalls),
            Err(TranscriptError::MissingResult {
                index: 1,
                id: "a".into()
            })
        );
    }

    #[test]
    fn the_incremental_validator_agrees_and_rejects_without_committing() {
        let mut v = TranscriptValidator::new();
        v.push(&user(vec![text("go")])).unwrap();
        v.push(&assistant(vec![call("a")])).unwrap();
        assert!(v.has_call_id("a"));
        assert_eq!(
            v.check_complete(),
            Err(TranscriptError::MissingResult {
                index: 1,
                id: "a".into()
            })
        );
        // A bad message is refused and leaves the state as it was.
        assert!(v.push(&user(vec![result("zzz")])).is_err());
        assert_eq!(v.len(), 2);
        v.push(&user(vec![result("a")])).unwrap();
        assert_eq!(v.check_complete(), Ok(()));
        assert_eq!(
            v.push(&assistant(vec![call("a")])),
            Err(TranscriptError::DuplicateCallId {
                index: 3,
                id: "a".into(),
                first_index: 1
            })
        );
    }

    #[test]
    fn errors_read_as_sentences() {
        let e = TranscriptError::MisplacedBlock {
            index: 3,
            role: Role::User,
            kind: BlockKind::ToolCall,
            id: Some("x".into()),
        };
        assert_eq!(
            e.to_string(),
            "message 3 (User) holds a tool_call block with id 'x'; tool calls belong to assistant messages and tool results to user messages"
        );
    }
}
