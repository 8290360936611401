//! Adapters: one module per wire protocol, each with `to_wire`, a sans-IO stream state and a
//! thin HTTP provider.

pub mod anthropic;
pub mod gemini;
pub mod openai_chat;
pub mod openai_responses;

use crate::protocol::{Protocol, StreamState};

/// A fresh stream state for one response in `protocol`.
pub fn stream_state(protocol: Protocol) -> Box<dyn StreamState> {
    match protocol {
        Protocol::Anthropic => Box::new(anthropic::AnthropicStreamState::default()),
        Protocol::OpenaiChat => Box::new(openai_chat::ChatStreamState::default()),
        Protocol::OpenaiResponses => Box::new(openai_responses::ResponsesStreamState::default()),
        Protocol::Gemini => Box::new(gemini::GeminiStreamState::default()),
    }
}
