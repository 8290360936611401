//! Wire protocols: what each one is called, where it is served, and the [`StreamState`] every
//! adapter implements.
//!
//! This module sits below the adapters (`providers/`), the capability table, config and the
//! HTTP glue, and imports none of them: facts about a protocol that those modules share (its
//! public endpoint, the tag on its provider-specific state) live here, so no two of them need
//! each other. The adapters' stream states are built by [`crate::providers::stream_state`].

use serde::{Deserialize, Serialize};

use crate::error::LlmError;
use crate::sse::SseEventRef;
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
    /// The provider as the OpenTelemetry GenAI conventions name it (`gen_ai.provider.name`).
    pub fn semconv_name(self) -> &'static str {
        match self {
            Protocol::Anthropic => "anthropic",
            Protocol::OpenaiChat | Protocol::OpenaiResponses => "openai",
            Protocol::Gemini => "gcp.gemini",
        }
    }

    pub const ALL: [Protocol; 4] = [
        Protocol::Anthropic,
        Protocol::OpenaiChat,
        Protocol::OpenaiResponses,
        Protocol::Gemini,
    ];

    /// The name used in config and on the command line.
    pub const fn as_str(self) -> &'static str {
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

    /// The public endpoint, used when config names no `base_url`.
    pub const fn default_base_url(self) -> &'static str {
        match self {
            Protocol::Anthropic => "https://api.anthropic.com",
            Protocol::OpenaiChat | Protocol::OpenaiResponses => "https://api.openai.com/v1",
            Protocol::Gemini => "https://generativelanguage.googleapis.com/v1beta",
        }
    }

    /// The tag (`ProviderMeta::provider`) this protocol's adapter puts on the provider-specific
    /// state it returns, such as signed reasoning: the protocol's name. Stored transcripts carry
    /// it, so changing it would make their reasoning unreplayable.
    pub const fn meta_provider(self) -> &'static str {
        self.as_str()
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
