//! Wire protocols and their sans-IO stream states.
//!
//! Every adapter has a [`StreamState`]: a pure state machine that turns one decoded SSE event
//! into canonical [`StreamEvent`]s. The same machine serves live HTTP streams, recorded bodies
//! ([`replay_body`]) and benchmarks.

use serde::{Deserialize, Serialize};

use crate::builder::{Completion, MessageBuilder};
use crate::error::LlmError;
use crate::providers::{anthropic, gemini, openai_chat, openai_responses};
use crate::sse::{SseDecoder, SseEventRef, SseLimits};
use crate::stream::StreamEvent;

/// A wire protocol. Also the `kind` of a provider in config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    Anthropic,
    OpenaiChat,
    OpenaiResponses,
    Gemini,
}

impl Protocol {
    pub const ALL: [Protocol; 4] = [
        Protocol::Anthropic,
        Protocol::OpenaiChat,
        Protocol::OpenaiResponses,
        Protocol::Gemini,
    ];

    /// The name used in config and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Anthropic => "anthropic",
            Protocol::OpenaiChat => "openai-chat",
            Protocol::OpenaiResponses => "openai-responses",
            Protocol::Gemini => "gemini",
        }
    }

    pub fn parse(name: &str) -> Option<Protocol> {
        Protocol::ALL.into_iter().find(|p| p.as_str() == name)
    }

    /// A fresh stream state for one response.
    pub fn new_state(self) -> Box<dyn StreamState> {
        match self {
            Protocol::Anthropic => Box::new(anthropic::AnthropicStreamState::default()),
            Protocol::OpenaiChat => Box::new(openai_chat::ChatStreamState::default()),
            Protocol::OpenaiResponses => {
                Box::new(openai_responses::ResponsesStreamState::default())
            }
            Protocol::Gemini => Box::new(gemini::GeminiStreamState::default()),
        }
    }
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The sans-IO half of an adapter: wire events in, canonical events out.
pub trait StreamState: Send {
    /// Handles one SSE event, appending what it produces to `out`.
    fn on_sse(
        &mut self,
        event: SseEventRef<'_>,
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), LlmError>;

    /// The body ended. Emits whatever the protocol defers to the end (a held finish); emits
    /// nothing when the response was cut short, so the builder reports `UnexpectedEof`.
    fn on_end(&mut self, out: &mut Vec<StreamEvent>) -> Result<(), LlmError>;
}

/// Runs a recorded response body through decoder → stream state → builder, in memory.
pub fn replay_body(protocol: Protocol, body: &[u8]) -> Result<Completion, LlmError> {
    replay_chunks(protocol, std::iter::once(body))
}

/// Like [`replay_body`], with the body arriving in the given chunks.
pub fn replay_chunks<'a>(
    protocol: Protocol,
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> Result<Completion, LlmError> {
    let mut decoder = SseDecoder::new(SseLimits::default());
    let mut state = protocol.new_state();
    let mut builder = MessageBuilder::new();
    let mut events = Vec::new();
    for chunk in chunks {
        decoder.feed(chunk, &mut |e| state.on_sse(e, &mut events))?;
        for e in events.drain(..) {
            builder.push(&e)?;
        }
    }
    state.on_end(&mut events)?;
    for e in events.drain(..) {
        builder.push(&e)?;
    }
    builder.finish()
}

/// Feeding SSE data payloads straight into a stream state, for the adapters' unit tests.
#[cfg(test)]
pub(crate) mod test_support {
    use super::StreamState;
    use crate::builder::{Completion, MessageBuilder};
    use crate::error::LlmError;
    use crate::sse::SseEventRef;
    use crate::stream::StreamEvent;

    /// The events `state` produces for these `data:` payloads, end of body included.
    pub(crate) fn events(
        state: &mut dyn StreamState,
        data: &[&str],
    ) -> Result<Vec<StreamEvent>, LlmError> {
        let mut out = Vec::new();
        for d in data {
            state.on_sse(
                SseEventRef {
                    event: None,
                    data: d,
                },
                &mut out,
            )?;
        }
        state.on_end(&mut out)?;
        Ok(out)
    }

    /// Those events built into a completion.
    pub(crate) fn complete(
        state: &mut dyn StreamState,
        data: &[&str],
    ) -> Result<Completion, LlmError> {
        let mut b = MessageBuilder::new();
        for e in events(state, data)? {
            b.push(&e)?;
        }
        b.finish()
    }
}
