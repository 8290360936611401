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
                replays_reasoning_of: Some(crate::providers::anthropic::META_PROVIDER),
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
                replays_reasoning_of: Some(crate::providers::openai_responses::META_PROVIDER),
                max_tokens_field: "max_output_tokens",
                temperature: true,
            },
            Protocol::Gemini => Capabilities {
                images: true,
                schema: SchemaDialect::FullJsonSchema,
                replays_reasoning_of: Some(crate::providers::gemini::META_PROVIDER),
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

/// The text sent in place of an image to a target that cannot take images.
pub const IMAGE_OMITTED: &str = "[image omitted: this model does not accept images]";
