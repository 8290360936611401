//! What each wire protocol (target) can take, consulted by every `to_wire`.
//!
//! | target            | images | tool schema                     | signed reasoning            | max-token field                   | temperature | reasoning replay |
//! |-------------------|--------|---------------------------------|-----------------------------|-----------------------------------|-------------|------------------|
//! | anthropic         | yes    | full JSON Schema                | `thinking` signature        | `max_tokens`                      | yes         | same provider    |
//! | openai-chat       | yes    | full JSON Schema                | none                        | `max_completion_tokens`/`max_tokens` | yes      | never            |
//! | openai-responses  | yes    | full JSON Schema                | `encrypted_content` item    | `max_output_tokens`               | yes         | same provider    |
//! | gemini            | yes    | full (`parametersJsonSchema`), or the legacy subset (`parameters`) | `thoughtSignature` on parts | `generationConfig.maxOutputTokens` | yes | same provider |
//!
//! Reasoning state is replayed only to the provider that produced it; on a switch it is
//! dropped, never forwarded (see [`crate::handoff`]).

use serde::{Deserialize, Serialize};

use crate::protocol::Protocol;

/// How a target accepts tool input schemas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SchemaDialect {
    /// The schema is sent as written (JSON Schema, `$ref` and unions included).
    FullJsonSchema,
    /// Gemini's legacy OpenAPI-style `parameters` field: a documented subset, compiled by
    /// [`crate::schema::legacy_schema`], which rejects what it cannot express.
    LegacySubset,
}

/// Which field carries the output-token limit on OpenAI Chat. OpenAI's current models want
/// `max_completion_tokens`; most compatible servers only know `max_tokens`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MaxTokensField {
    MaxTokens,
    MaxCompletionTokens,
}

impl MaxTokensField {
    /// `max_completion_tokens` for OpenAI itself, `max_tokens` for everyone else.
    pub fn default_for(base_url: &str) -> Self {
        if base_url.contains("api.openai.com") {
            MaxTokensField::MaxCompletionTokens
        } else {
            MaxTokensField::MaxTokens
        }
    }

    pub fn key(self) -> &'static str {
        match self {
            MaxTokensField::MaxTokens => "max_tokens",
            MaxTokensField::MaxCompletionTokens => "max_completion_tokens",
        }
    }
}

/// One target's capabilities.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    pub images: bool,
    pub schema: SchemaDialect,
    /// The `ProviderMeta::provider` whose reasoning this target replays; `None` when reasoning
    /// cannot be replayed at all.
    pub replays_reasoning_of: Option<&'static str>,
    /// The request field carrying the output limit.
    pub max_tokens_field: &'static str,
    pub temperature: bool,
}

impl Capabilities {
    pub fn of(protocol: Protocol) -> Self {
        match protocol {
            Protocol::Anthropic => Capabilities {
                images: true,
                schema: SchemaDialect::FullJsonSchema,
                replays_reasoning_of: Some(Protocol::Anthropic.meta_provider()),
                max_tokens_field: "max_tokens",
                temperature: true,
            },
            Protocol::OpenaiChat => Capabilities {
                images: true,
                schema: SchemaDialect::FullJsonSchema,
                replays_reasoning_of: None,
                max_tokens_field: "max_completion_tokens",
                temperature: true,
            },
            Protocol::OpenaiResponses => Capabilities {
                images: true,
                schema: SchemaDialect::FullJsonSchema,
                replays_reasoning_of: Some(Protocol::OpenaiResponses.meta_provider()),
                max_tokens_field: "max_output_tokens",
                temperature: true,
            },
            Protocol::Gemini => Capabilities {
                images: true,
                schema: SchemaDialect::FullJsonSchema,
                replays_reasoning_of: Some(Protocol::Gemini.meta_provider()),
                max_tokens_field: "maxOutputTokens",
                temperature: true,
            },
        }
    }

    pub fn with_schema(mut self, schema: SchemaDialect) -> Self {
        self.schema = schema;
        self
    }

    pub fn with_images(mut self, images: bool) -> Self {
        self.images = images;
        self
    }
}

/// The text sent in place of an image to a target that cannot take images: what it was (type
/// and size), so the model knows something is there.
pub fn image_omitted(media_type: &str, data: &str) -> String {
    let size = size_label(base64_decoded_len(data));
    format!("[image omitted: {media_type}, {size}; this model does not accept images]")
}

/// How many bytes base64 `data` decodes to (from its length and padding; not validated).
pub fn base64_decoded_len(data: &str) -> usize {
    let padding = data.bytes().rev().take_while(|&b| b == b'=').count();
    (data.len() / 4 * 3).saturating_sub(padding)
}

/// A size for people: `512 bytes`, `34 KB`, `2.1 MB`.
pub fn size_label(bytes: usize) -> String {
    if bytes >= 1024 * 1024 {
        format!("{:.1} MB", bytes as f64 / (1024.0 * 1024.0))
    } else if bytes >= 1024 {
        format!("{} KB", bytes / 1024)
    } else {
        format!("{bytes} bytes")
    }
}
