//! Adapters: one module per wire protocol, each with `to_wire`, a sans-IO stream state and a
//! thin HTTP provider.

pub mod anthropic;
pub mod openai_chat;
