//! [`ResponseCap`]: the most one response may hold, counted event by event (sans-IO).
//!
//! A server that streams without end — a runaway model, a broken proxy, a hostile endpoint —
//! must not fill memory: what a response accumulates (text, reasoning, tool-call arguments,
//! ids, names and replay state, all kept by `MessageBuilder`) is counted as it is decoded, and
//! the stream ends with [`LlmError::ResponseTooLarge`] past the cap. Two things are counted
//! besides the payload, so that no flood stays small by this measure while memory grows:
//! - each new content block costs [`BLOCK_COST`] bytes (a flood of one-character blocks would
//!   otherwise grow the builder's block list far beyond its text);
//! - the body itself may carry at most [`WIRE_BYTES_PER_BYTE`] times the cap, which bounds
//!   what adapters hold between events (arguments waiting for a tool name, items that emit
//!   nothing) and the time spent decoding events that add nothing.

use std::collections::HashSet;

use crate::error::LlmError;
use crate::stream::StreamEvent;
use crate::types::ProviderMeta;

/// The cap when nothing else is said: 4 MiB, about a million tokens of text — far beyond any
/// model's output limit, far below what would strain memory.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 4 * 1024 * 1024;

/// What a new content block counts for, besides its payload.
pub const BLOCK_COST: usize = 256;

/// How many body bytes a response may use per byte of the cap. A real stream spends well under
/// a hundred bytes of JSON per token delta (a few bytes of text), so at the default cap this
/// allows 64 MiB of body, twice what OpenAI's most verbose chunks need for 128k output tokens.
pub const WIRE_BYTES_PER_BYTE: usize = 16;

const CONTENT: &str = "text, reasoning and tool-call arguments";
const WIRE: &str = "stream data";

/// Counts one response against `limit`.
#[derive(Debug, Clone)]
pub struct ResponseCap {
    limit: usize,
    content: usize,
    wire: usize,
    blocks: HashSet<u32>,
}

impl ResponseCap {
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            content: 0,
            wire: 0,
            blocks: HashSet::new(),
        }
    }

    /// Counts `n` bytes of body as they arrive.
    pub fn wire(&mut self, n: usize) -> Result<(), LlmError> {
        self.wire = self.wire.saturating_add(n);
        let limit = self.limit.saturating_mul(WIRE_BYTES_PER_BYTE);
        if self.wire > limit {
            return Err(LlmError::ResponseTooLarge {
                limit: limit as u64,
                what: WIRE,
            });
        }
        Ok(())
    }

    /// Counts one decoded event; an error once the response holds more than the cap.
    pub fn admit(&mut self, event: &StreamEvent) -> Result<(), LlmError> {
        let meta_len = |meta: &Option<ProviderMeta>| {
            meta.as_ref()
                .map_or(0, |m| m.provider.len() + m.data.to_string().len())
        };
        let (index, payload) = match event {
            StreamEvent::TextDelta { index, text }
            | StreamEvent::ReasoningDelta { index, text } => (Some(*index), text.len()),
            StreamEvent::ReasoningDone { index, meta } => (Some(*index), meta_len(meta)),
            StreamEvent::ToolCallStart {
                index,
                id,
                name,
                meta,
            } => (Some(*index), id.len() + name.len() + meta_len(meta)),
            StreamEvent::ToolCallDelta {
                index,
                arguments_fragment,
            } => (Some(*index), arguments_fragment.len()),
            StreamEvent::Usage(_) | StreamEvent::Finish(_) => (None, 0),
        };
        let block = match index {
            Some(i) if self.blocks.insert(i) => BLOCK_COST,
            _ => 0,
        };
        self.content = self.content.saturating_add(payload + block);
        if self.content > self.limit {
            return Err(LlmError::ResponseTooLarge {
                limit: self.limit as u64,
                what: CONTENT,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(index: u32, text: &str) -> StreamEvent {
        StreamEvent::TextDelta {
            index,
            text: text.into(),
        }
    }

    #[test]
    fn text_reasoning_and_arguments_count_until_the_cap() {
        let mut cap = ResponseCap::new(BLOCK_COST * 3 + 30);
        cap.admit(&text(0, &"a".repeat(10))).unwrap();
        cap.admit(&StreamEvent::ReasoningDelta {
            index: 1,
            text: "b".repeat(10),
        })
        .unwrap();
        cap.admit(&StreamEvent::ToolCallDelta {
            index: 2,
            arguments_fragment: "c".repeat(10),
        })
        .unwrap();
        cap.admit(&StreamEvent::Finish(crate::FinishReason::EndTurn))
            .unwrap();
        let err = cap.admit(&text(0, "d")).unwrap_err();
        assert!(matches!(
            err,
            LlmError::ResponseTooLarge { limit, what: CONTENT } if limit == (BLOCK_COST * 3 + 30) as u64
        ));
        assert!(!err.is_retryable());
        assert!(err.to_string().contains("tool-call arguments"), "{err}");
    }

    #[test]
    fn many_tiny_blocks_count_for_their_overhead() {
        let mut cap = ResponseCap::new(100 * BLOCK_COST);
        let admitted = (0..1000).take_while(|i| cap.admit(&text(*i, "x")).is_ok());
        assert!(admitted.count() < 100);
    }

    #[test]
    fn the_body_may_use_a_bounded_multiple_of_the_cap() {
        let mut cap = ResponseCap::new(10);
        cap.wire(10 * WIRE_BYTES_PER_BYTE).unwrap();
        assert!(matches!(
            cap.wire(1),
            Err(LlmError::ResponseTooLarge { what: WIRE, .. })
        ));
    }
}
