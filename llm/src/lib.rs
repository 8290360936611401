//! anvil-llm: the provider layer.
//!
//! Every other anvil crate talks to models through this crate's canonical model and the
//! [`Provider`](provider::Provider) trait. It knows providers and nothing else: it must never
//! depend on another anvil crate.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

/// MessageBuilder, Completion and `collect`.
pub mod builder;
/// The cap on one response's size.
pub mod cap;
/// What each target can take (images, schema dialect, signed reasoning, limits).
pub mod capability;
/// `max_concurrency`: per-provider slots shared by the whole process.
pub mod concurrency;
/// Config files, trust, and where they live.
pub mod config;
pub mod cost;
/// LlmError and the HTTP status check.
pub mod error;
/// Moving a conversation to another provider.
pub mod handoff;
/// The HTTP glue shared by every adapter.
pub mod http;
/// Transcript integrity: the invariant every request satisfies.
pub mod integrity;
pub mod mcp_config;
/// Wire protocols: names, endpoints and the StreamState trait.
pub mod protocol;
/// The Provider trait and EventStream.
pub mod provider;
/// One adapter per wire protocol.
pub mod providers;
/// Resolving a model alias into a ready provider.
pub mod registry;
/// Replaying a recorded response body in memory.
pub mod replay;
/// The retry decorator.
pub mod retry;
/// Tool schemas for targets that cannot take full JSON Schema.
pub mod schema;
/// Server-sent events: the sans-IO decoder and its async wrapper.
pub mod sse;
/// The stream vocabulary: StreamEvent, Usage, FinishReason.
pub mod stream;
/// ScriptedProvider, the test double for the model.
#[cfg(feature = "testing")]
pub mod testing;
/// Cutting text to a length without splitting a character.
pub mod text;
/// The canonical model: messages, content blocks, tool specs, requests.
pub mod types;

pub use builder::{Completion, MessageBuilder, collect};
pub use error::{LlmError, ProviderRefusal};
pub use integrity::{Tail, TranscriptError, TranscriptValidator, validate_transcript};
pub use protocol::Protocol;
pub use provider::{EventStream, Provider};
pub use stream::{FinishReason, StreamEvent, Usage};
pub use types::{ChatRequest, ContentBlock, Message, ProviderMeta, Role, ToolSpec};
