//! Adapters: one module per wire protocol, each with `to_wire`, a sans-IO stream state and a
//! thin HTTP provider.

pub mod anthropic;
pub mod gemini;
pub mod openai_chat;
pub mod openai_responses;
