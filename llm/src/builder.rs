//! [`MessageBuilder`]: folds stream events into one assistant message, and [`collect`].
//!
//! Transitions are fallible: a delta for a block that never started, a start that conflicts
//! with an earlier one, a block whose kind changes, or anything after `Finish` is a
//! [`LlmError::Decode`]. The result is a [`Completion`]; only a committed one (finish `EndTurn`
//! or `ToolUse`) hands out tool calls to execute.

use std::collections::BTreeMap;

use futures::StreamExt;
use serde::Serialize;
use serde_json::Value;

use crate::error::LlmError;
use crate::provider::EventStream;
use crate::stream::{FinishReason, StreamEvent, Usage};
use crate::types::{ContentBlock, Message, ProviderMeta, Role, ToolCallRef};

/// A whole response: the assistant message, why it ended, and what it cost.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Completion {
    pub message: Message,
    pub finish: FinishReason,
    pub usage: Usage,
}

impl Completion {
    /// Whether the response ended normally, so its tool calls may run.
    pub fn is_committed(&self) -> bool {
        self.finish.is_committed()
    }

    /// The tool calls to execute: all of them for a committed response, none after an abnormal
    /// finish (max tokens, refusal, an unknown stop), whose calls may be cut short.
    pub fn executable_tool_calls(&self) -> Vec<ToolCallRef<'_>> {
        if self.is_committed() {
            self.message.tool_calls().collect()
        } else {
            Vec::new()
        }
    }
}

#[derive(Debug)]
enum Slot {
    Text(String),
    Reasoning {
        text: String,
        meta: Option<ProviderMeta>,
        done: bool,
    },
    ToolCall {
        id: String,
        name: String,
        arguments: String,
        meta: Option<ProviderMeta>,
    },
}

impl Slot {
    fn kind(&self) -> &'static str {
        match self {
            Slot::Text(_) => "text",
            Slot::Reasoning { .. } => "reasoning",
            Slot::ToolCall { .. } => "tool call",
        }
    }
}

/// Builds a [`Completion`] from [`StreamEvent`]s.
#[derive(Debug, Default)]
pub struct MessageBuilder {
    slots: BTreeMap<u32, Slot>,
    usage: Usage,
    finish: Option<FinishReason>,
}

impl MessageBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies one event.
    pub fn push(&mut self, event: &StreamEvent) -> Result<(), LlmError> {
        if let Some(reason) = &self.finish {
            return Err(LlmError::Decode(format!(
                "{} arrived after the response finished ({reason:?})",
                event_name(event)
            )));
        }
        match event {
            StreamEvent::TextDelta { index, text } => {
                match self
                    .slots
                    .entry(*index)
                    .or_insert_with(|| Slot::Text(String::new()))
                {
                    Slot::Text(buf) => buf.push_str(text),
                    other => return Err(kind_conflict(*index, "text", other)),
                }
            }
            StreamEvent::ReasoningDelta { index, text } => {
                match self.slots.entry(*index).or_insert_with(|| Slot::Reasoning {
                    text: String::new(),
                    meta: None,
                    done: false,
                }) {
                    Slot::Reasoning { done: true, .. } => {
                        return Err(LlmError::Decode(format!(
                            "reasoning delta for block {index}, which already ended"
                        )));
                    }
                    Slot::Reasoning { text: buf, .. } => buf.push_str(text),
                    other => return Err(kind_conflict(*index, "reasoning", other)),
                }
            }
            StreamEvent::ReasoningDone { index, meta } => {
                match self.slots.entry(*index).or_insert_with(|| Slot::Reasoning {
                    text: String::new(),
                    meta: None,
                    done: false,
                }) {
                    Slot::Reasoning { done: true, .. } => {
                        return Err(LlmError::Decode(format!(
                            "reasoning block {index} ended twice"
                        )));
                    }
                    Slot::Reasoning {
                        meta: slot_meta,
                        done,
                        ..
                    } => {
                        *slot_meta = meta.clone();
                        *done = true;
                    }
                    other => return Err(kind_conflict(*index, "reasoning", other)),
                }
            }
            StreamEvent::ToolCallStart {
                index,
                id,
                name,
                meta,
            } => {
                // Check everything before reserving the slot.
                if id.is_empty() || name.is_empty() {
                    return Err(LlmError::Decode(format!(
                        "tool call at block {index} started without an id or a name"
                    )));
                }
                match self.slots.get(index) {
                    Some(Slot::ToolCall {
                        id: old_id,
                        name: old_name,
                        ..
                    }) if old_id == id && old_name == name => return Ok(()),
                    Some(Slot::ToolCall { id: old_id, .. }) => {
                        return Err(LlmError::Decode(format!(
                            "tool call at block {index} started twice, as '{old_id}' and as '{id}'"
                        )));
                    }
                    Some(other) => return Err(kind_conflict(*index, "tool call", other)),
                    None => {}
                }
                if let Some((other, _)) = self.slots.iter().find(
                    |(_, s)| matches!(s, Slot::ToolCall { id: other_id, .. } if other_id == id),
                ) {
                    return Err(LlmError::Decode(format!(
                        "tool call id '{id}' used by blocks {other} and {index}"
                    )));
                }
                self.slots.insert(
                    *index,
                    Slot::ToolCall {
                        id: id.clone(),
                        name: name.clone(),
                        arguments: String::new(),
                        meta: meta.clone(),
                    },
                );
            }
            StreamEvent::ToolCallDelta {
                index,
                arguments_fragment,
            } => match self.slots.get_mut(index) {
                Some(Slot::ToolCall { arguments, .. }) => arguments.push_str(arguments_fragment),
                Some(other) => return Err(kind_conflict(*index, "tool call", other)),
                None => {
                    return Err(LlmError::Decode(format!(
                        "tool-call arguments for block {index} arrived before the call started"
                    )));
                }
            },
            StreamEvent::Usage(usage) => self.usage.absorb(usage),
            StreamEvent::Finish(reason) => self.finish = Some(reason.clone()),
        }
        Ok(())
    }

    /// Whether a `Finish` event has been applied.
    pub fn is_finished(&self) -> bool {
        self.finish.is_some()
    }

    /// The completed response, or [`LlmError::UnexpectedEof`] when the stream never finished.
    pub fn finish(self) -> Result<Completion, LlmError> {
        let finish = self.finish.ok_or(LlmError::UnexpectedEof)?;
        Ok(Completion {
            message: build_message(self.slots),
            finish,
            usage: self.usage,
        })
    }

    /// What arrived before the stream broke off. It is not a [`Completion`], so nothing in it
    /// can be executed; it is for showing and recording partial output.
    pub fn into_partial(self) -> (Message, Usage) {
        (build_message(self.slots), self.usage)
    }
}

fn build_message(slots: BTreeMap<u32, Slot>) -> Message {
    let content = slots
        .into_values()
        .filter_map(|slot| match slot {
            Slot::Text(text) if text.is_empty() => None,
            Slot::Text(text) => Some(ContentBlock::Text { text }),
            Slot::Reasoning { text, meta, .. } if text.is_empty() && meta.is_none() => None,
            Slot::Reasoning { text, meta, .. } => Some(ContentBlock::Reasoning { text, meta }),
            Slot::ToolCall {
                id,
                name,
                arguments,
                meta,
            } => Some(ContentBlock::ToolCall {
                id,
                name,
                arguments: parse_arguments(arguments),
                meta,
            }),
        })
        .collect();
    Message::new(Role::Assistant, content)
}

/// Empty arguments mean "no arguments" (`{}`). Arguments that are not valid JSON stay a string,
/// so dispatch can tell the model exactly what it sent.
fn parse_arguments(raw: String) -> Value {
    if raw.trim().is_empty() {
        return Value::Object(Default::default());
    }
    serde_json::from_str(&raw).unwrap_or(Value::String(raw))
}

fn kind_conflict(index: u32, wanted: &str, found: &Slot) -> LlmError {
    LlmError::Decode(format!(
        "block {index} is a {} block but received a {wanted} event",
        found.kind()
    ))
}

fn event_name(event: &StreamEvent) -> &'static str {
    match event {
        StreamEvent::TextDelta { .. } => "a text delta",
        StreamEvent::ReasoningDelta { .. } => "a reasoning delta",
        StreamEvent::ReasoningDone { .. } => "a reasoning end",
        StreamEvent::ToolCallStart { .. } => "a tool-call start",
        StreamEvent::ToolCallDelta { .. } => "a tool-call delta",
        StreamEvent::Usage(_) => "usage",
        StreamEvent::Finish(_) => "a second finish",
    }
}

/// Drains a stream into a [`Completion`]. A stream error is returned as is; a stream that ends
/// without `Finish` is [`LlmError::UnexpectedEof`].
pub async fn collect(mut stream: EventStream) -> Result<Completion, LlmError> {
    let mut builder = MessageBuilder::new();
    while let Some(event) = stream.next().await {
        builder.push(&event?)?;
    }
    builder.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn text(index: u32, t: &str) -> StreamEvent {
        StreamEvent::TextDelta {
            index,
            text: t.into(),
        }
    }
    fn start(index: u32, id: &str) -> StreamEvent {
        StreamEvent::ToolCallStart {
            index,
            id: id.into(),
            name: "f".into(),
            meta: None,
        }
    }
    fn delta(index: u32, frag: &str) -> StreamEvent {
        StreamEvent::ToolCallDelta {
            index,
            arguments_fragment: frag.into(),
        }
    }
    fn finish(reason: FinishReason) -> StreamEvent {
        StreamEvent::Finish(reason)
    }
    fn build(events: &[StreamEvent]) -> Result<Completion, LlmError> {
        let mut b = MessageBuilder::new();
        for e in events {
            b.push(e)?;
        }
        b.finish()
    }
    fn call(id: &str, args: Value) -> ContentBlock {
        ContentBlock::ToolCall {
            id: id.into(),
            name: "f".into(),
            arguments: args,
            meta: None,
        }
    }
    fn decode_err(r: Result<(), LlmError>) -> String {
        match r {
            Err(LlmError::Decode(m)) => m,
            other => panic!("expected Decode, got {other:?}"),
        }
    }

    #[test]
    fn text_then_tool_call() {
        let c = build(&[
            text(0, "Hel"),
            text(0, "lo"),
            start(1, "a"),
            delta(1, "{\"a\""),
            delta(1, ":1}"),
            finish(FinishReason::ToolUse),
        ])
        .unwrap();
        assert_eq!(
            c.message.content,
            vec![ContentBlock::text("Hello"), call("a", json!({"a": 1}))]
        );
        assert_eq!(c.finish, FinishReason::ToolUse);
        assert_eq!(c.executable_tool_calls().len(), 1);
    }

    #[test]
    fn a_call_with_no_deltas_gets_an_empty_object() {
        let c = build(&[start(0, "a"), finish(FinishReason::ToolUse)]).unwrap();
        assert_eq!(c.message.content, vec![call("a", json!({}))]);
    }

    #[test]
    fn interleaved_calls_keep_order_and_arguments() {
        let c = build(&[
            start(0, "a"),
            start(1, "b"),
            delta(1, "{\"city\":"),
            delta(0, "{\"city\":"),
            delta(0, "\"Oslo\"}"),
            delta(1, "\"Lima\"}"),
            finish(FinishReason::ToolUse),
        ])
        .unwrap();
        assert_eq!(
            c.message.content,
            vec![
                call("a", json!({"city": "Oslo"})),
                call("b", json!({"city": "Lima"}))
            ]
        );
    }

    #[test]
    fn invalid_arguments_are_kept_as_a_string() {
        let c = build(&[
            start(0, "a"),
            delta(0, "not json"),
            finish(FinishReason::ToolUse),
        ])
        .unwrap();
        assert_eq!(c.message.content, vec![call("a", json!("not json"))]);
    }

    #[test]
    fn a_truncated_stream_is_unexpected_eof() {
        assert!(matches!(
            build(&[text(0, "partial")]),
            Err(LlmError::UnexpectedEof)
        ));
    }

    #[test]
    fn a_delta_before_its_start_is_a_decode_error() {
        let mut b = MessageBuilder::new();
        let m = decode_err(b.push(&delta(3, "{}")));
        assert!(m.contains("block 3"), "{m}");
    }

    #[test]
    fn a_conflicting_duplicate_start_is_a_decode_error() {
        let mut b = MessageBuilder::new();
        b.push(&start(0, "a")).unwrap();
        // The identical start again is harmless (servers repeat it)...
        b.push(&start(0, "a")).unwrap();
        // ...a different id for the same block is not,
        decode_err(b.push(&start(0, "b")));
        // nor is the same id on another block,
        decode_err(b.push(&start(1, "a")));
        // nor a tool call over a text block.
        b.push(&text(2, "x")).unwrap();
        decode_err(b.push(&start(2, "c")));
        // Nothing was reserved by the failed starts.
        b.push(&finish(FinishReason::ToolUse)).unwrap();
        let c = b.finish().unwrap();
        assert_eq!(c.message.tool_calls().count(), 1);
    }

    #[test]
    fn nothing_may_follow_finish() {
        let mut b = MessageBuilder::new();
        b.push(&finish(FinishReason::EndTurn)).unwrap();
        decode_err(b.push(&text(0, "late")));
        decode_err(b.push(&finish(FinishReason::EndTurn)));
    }

    #[test]
    fn block_kinds_cannot_change() {
        let mut b = MessageBuilder::new();
        b.push(&text(0, "x")).unwrap();
        decode_err(b.push(&StreamEvent::ReasoningDelta {
            index: 0,
            text: "y".into(),
        }));
        decode_err(b.push(&delta(0, "{}")));
    }

    #[test]
    fn an_abnormal_finish_executes_zero_tools() {
        for reason in [
            FinishReason::MaxTokens,
            FinishReason::Refusal,
            FinishReason::Other("pause_turn".into()),
        ] {
            let c = build(&[start(0, "a"), delta(0, "{\"a\":"), finish(reason.clone())]).unwrap();
            assert_eq!(c.message.tool_calls().count(), 1, "the call is recorded");
            assert!(c.executable_tool_calls().is_empty(), "{reason:?}");
        }
        // A stream that broke off yields only a partial, which has no executable calls at all.
        let mut b = MessageBuilder::new();
        b.push(&start(0, "a")).unwrap();
        let (partial, _) = b.into_partial();
        assert_eq!(partial.tool_calls().count(), 1);
    }

    #[test]
    fn reasoning_blocks_carry_meta_and_empty_text_is_dropped() {
        let meta = ProviderMeta::new("anthropic", json!({"signature": "s"}));
        let c = build(&[
            StreamEvent::ReasoningDelta {
                index: 0,
                text: "hmm".into(),
            },
            StreamEvent::ReasoningDone {
                index: 0,
                meta: Some(meta.clone()),
            },
            StreamEvent::ReasoningDone {
                index: 1,
                meta: Some(meta.clone()),
            },
            text(2, ""),
            text(3, "answer"),
            finish(FinishReason::EndTurn),
        ])
        .unwrap();
        assert_eq!(
            c.message.content,
            vec![
                ContentBlock::Reasoning {
                    text: "hmm".into(),
                    meta: Some(meta.clone())
                },
                ContentBlock::Reasoning {
                    text: String::new(),
                    meta: Some(meta)
                },
                ContentBlock::text("answer"),
            ]
        );
    }

    #[test]
    fn usage_is_absorbed() {
        let c = build(&[
            StreamEvent::Usage(Usage {
                input: 10,
                output: 1,
                ..Usage::default()
            }),
            StreamEvent::Usage(Usage {
                output: 5,
                ..Usage::default()
            }),
            finish(FinishReason::EndTurn),
        ])
        .unwrap();
        assert_eq!(c.usage.input, 10);
        assert_eq!(c.usage.output, 5);
    }
}
