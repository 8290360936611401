//! The canonical model: provider-neutral messages, content blocks, tool specs and requests.
//!
//! Nothing here knows about HTTP or any particular provider. Adapters translate these types to
//! and from their wire protocol.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Who wrote a message. There is no system role (the system prompt lives on [`ChatRequest`])
/// and no tool role (tool results are content blocks in a user message).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
}

/// Opaque provider-specific state (signatures, encrypted reasoning) attached to a block.
///
/// It is replayed verbatim, and only to the provider named in `provider`; every other adapter
/// drops it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProviderMeta {
    pub provider: String,
    pub data: Value,
}

impl ProviderMeta {
    pub fn new(provider: impl Into<String>, data: Value) -> Self {
        Self {
            provider: provider.into(),
            data,
        }
    }

    /// The meta's data when it belongs to `provider`, `None` for anyone else's.
    pub fn for_provider<'a>(meta: Option<&'a ProviderMeta>, provider: &str) -> Option<&'a Value> {
        meta.filter(|m| m.provider == provider).map(|m| &m.data)
    }
}

/// One typed part of a message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    Text {
        text: String,
    },
    Image {
        media_type: String,
        /// Base64-encoded bytes.
        data: String,
    },
    Reasoning {
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        meta: Option<ProviderMeta>,
    },
    ToolCall {
        id: String,
        name: String,
        arguments: Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        meta: Option<ProviderMeta>,
    },
    ToolResult {
        call_id: String,
        content: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
}

impl ContentBlock {
    pub fn text(text: impl Into<String>) -> Self {
        ContentBlock::Text { text: text.into() }
    }

    pub fn tool_result(
        call_id: impl Into<String>,
        content: impl Into<String>,
        is_error: bool,
    ) -> Self {
        ContentBlock::ToolResult {
            call_id: call_id.into(),
            content: content.into(),
            is_error,
        }
    }

    /// The block's kind as it appears in JSON and in error messages.
    pub fn kind(&self) -> BlockKind {
        match self {
            ContentBlock::Text { .. } => BlockKind::Text,
            ContentBlock::Image { .. } => BlockKind::Image,
            ContentBlock::Reasoning { .. } => BlockKind::Reasoning,
            ContentBlock::ToolCall { .. } => BlockKind::ToolCall,
            ContentBlock::ToolResult { .. } => BlockKind::ToolResult,
        }
    }
}

/// The kind of a [`ContentBlock`], without its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockKind {
    Text,
    Image,
    Reasoning,
    ToolCall,
    ToolResult,
}

impl std::fmt::Display for BlockKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BlockKind::Text => "text",
            BlockKind::Image => "image",
            BlockKind::Reasoning => "reasoning",
            BlockKind::ToolCall => "tool_call",
            BlockKind::ToolResult => "tool_result",
        })
    }
}

/// A borrowed view of one tool call inside a message.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ToolCallRef<'a> {
    pub id: &'a str,
    pub name: &'a str,
    pub arguments: &'a Value,
}

/// A role plus an ordered list of content blocks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: Vec<ContentBlock>,
}

impl Message {
    pub fn new(role: Role, content: Vec<ContentBlock>) -> Self {
        Self { role, content }
    }

    pub fn user_text(text: impl Into<String>) -> Self {
        Self::new(Role::User, vec![ContentBlock::text(text)])
    }

    pub fn assistant_text(text: impl Into<String>) -> Self {
        Self::new(Role::Assistant, vec![ContentBlock::text(text)])
    }

    /// All text blocks, concatenated in order.
    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    /// The tool calls in this message, in order.
    pub fn tool_calls(&self) -> impl Iterator<Item = ToolCallRef<'_>> {
        self.content.iter().filter_map(|b| match b {
            ContentBlock::ToolCall {
                id,
                name,
                arguments,
                ..
            } => Some(ToolCallRef {
                id,
                name,
                arguments,
            }),
            _ => None,
        })
    }
}

/// A tool as the model sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
}

/// One request to a model.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    pub messages: Vec<Message>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolSpec>,
    pub max_tokens: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Ask for prompt caching where the provider needs to be told (Anthropic breakpoints).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cache: bool,
    /// Routes requests with the same prefix to the same cache (OpenAI's `prompt_cache_key`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_cache_key: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn every_block() -> Vec<Message> {
        vec![
            Message::new(
                Role::User,
                vec![
                    ContentBlock::text("look at this"),
                    ContentBlock::Image {
                        media_type: "image/png".into(),
                        data: "iVBORw0KGgo=".into(),
                    },
                ],
            ),
            Message::new(
                Role::Assistant,
                vec![
                    ContentBlock::Reasoning {
                        text: "thinking".into(),
                        meta: Some(ProviderMeta::new("anthropic", json!({"signature": "sig"}))),
                    },
                    ContentBlock::Reasoning {
                        text: "plain".into(),
                        meta: None,
                    },
                    ContentBlock::ToolCall {
                        id: "call_1".into(),
                        name: "read_file".into(),
                        arguments: json!({"path": "a.rs"}),
                        meta: None,
                    },
                ],
            ),
            Message::new(
                Role::User,
                vec![
                    ContentBlock::tool_result("call_1", "fn main() {}", false),
                    ContentBlock::tool_result("call_1", "oops", true),
                ],
            ),
        ]
    }

    #[test]
    fn json_round_trip_of_every_block_is_lossless() {
        let messages = every_block();
        let json = serde_json::to_value(&messages).unwrap();
        insta::assert_json_snapshot!(json);
        let back: Vec<Message> = serde_json::from_value(json).unwrap();
        assert_eq!(back, messages);
    }

    #[test]
    fn accessors() {
        let m = Message::new(
            Role::Assistant,
            vec![
                ContentBlock::text("a"),
                ContentBlock::ToolCall {
                    id: "x".into(),
                    name: "t".into(),
                    arguments: json!({}),
                    meta: None,
                },
                ContentBlock::text("b"),
            ],
        );
        assert_eq!(m.text(), "ab");
        let calls: Vec<_> = m.tool_calls().collect();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].id, "x");
    }
}
