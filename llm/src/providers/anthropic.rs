//! Anthropic Messages: `to_wire`, the stream state, and the HTTP provider.

use std::borrow::Cow;
use std::collections::HashMap;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::capability::{Capabilities, image_omitted};
use crate::error::LlmError;
use crate::http::{Endpoint, endpoint_builders};
use crate::protocol::{Protocol, StreamState};
use crate::provider::{EventStream, Provider};
use crate::sse::SseEventRef;
use crate::stream::{FinishReason, StreamEvent, Usage};
use crate::types::{ChatRequest, ContentBlock, Message, ProviderMeta, Role};

/// The provider name written into [`ProviderMeta`] for Anthropic signatures (see
/// [`Protocol::meta_provider`]).
pub const META_PROVIDER: &str = Protocol::Anthropic.meta_provider();
const API_VERSION: &str = "2023-06-01";

/// The request body for `POST /v1/messages`.
pub fn to_wire(req: &ChatRequest, caps: &Capabilities) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(req.model));
    body.insert(caps.max_tokens_field.into(), json!(req.max_tokens));
    body.insert("stream".into(), json!(true));
    if let Some(system) = req.system.as_deref().filter(|s| !s.is_empty()) {
        if req.cache {
            // Breakpoint 1: tools + system, the stable prefix of every request in a session.
            body.insert(
                "system".into(),
                json!([{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}]),
            );
        } else {
            body.insert("system".into(), json!(system));
        }
    }
    let mut messages: Vec<Value> = req
        .messages
        .iter()
        .map(|m| message_to_wire(m, caps))
        .collect();
    if req.cache {
        // Breakpoint 2: the end of the conversation, so the next step reads all of it from cache.
        if let Some(block) = messages
            .last_mut()
            .and_then(|m| m.get_mut("content"))
            .and_then(Value::as_array_mut)
            .and_then(|blocks| blocks.last_mut())
        {
            block["cache_control"] = json!({"type": "ephemeral"});
        }
    }
    body.insert("messages".into(), Value::Array(messages));
    if !req.tools.is_empty() {
        let tools: Vec<Value> = req
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.input_schema}))
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    if let (Some(t), true) = (req.temperature, caps.temperature) {
        body.insert("temperature".into(), json!(t));
    }
    Value::Object(body)
}

fn message_to_wire(m: &Message, caps: &Capabilities) -> Value {
    let role = match m.role {
        Role::User => "user",
        Role::Assistant => "assistant",
    };
    let content: Vec<Value> = m
        .content
        .iter()
        .filter_map(|b| block_to_wire(b, caps))
        .collect();
    json!({"role": role, "content": content})
}

fn block_to_wire(block: &ContentBlock, caps: &Capabilities) -> Option<Value> {
    Some(match block {
        ContentBlock::Text { text } if text.is_empty() => return None,
        ContentBlock::Text { text } => json!({"type": "text", "text": text}),
        ContentBlock::Image { media_type, data } if !caps.images => {
            json!({"type": "text", "text": image_omitted(media_type, data)})
        }
        ContentBlock::Image { media_type, data } => json!({
            "type": "image",
            "source": {"type": "base64", "media_type": media_type, "data": data}
        }),
        ContentBlock::Reasoning { text, meta } => {
            // Only Anthropic's own signed reasoning is replayed; anyone else's is dropped.
            let data = ProviderMeta::for_provider(meta.as_ref(), caps.replays_reasoning_of?)?;
            if let Some(redacted) = data.get("redacted_data") {
                json!({"type": "redacted_thinking", "data": redacted})
            } else {
                let signature = data.get("signature")?;
                json!({"type": "thinking", "thinking": text, "signature": signature})
            }
        }
        ContentBlock::ToolCall {
            id,
            name,
            arguments,
            ..
        } => {
            // Arguments that were not a JSON object cannot be replayed as `input`; the tool
            // result already told the model what was wrong with them.
            let input = if arguments.is_object() {
                arguments.clone()
            } else {
                json!({})
            };
            json!({"type": "tool_use", "id": id, "name": name, "input": input})
        }
        ContentBlock::ToolResult {
            call_id,
            content,
            is_error,
        } => {
            let mut v = json!({"type": "tool_result", "tool_use_id": call_id, "content": content});
            if *is_error {
                v["is_error"] = json!(true);
            }
            v
        }
    })
}

// ---- stream ---------------------------------------------------------------------------------

#[derive(Deserialize)]
struct WireEvent<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default)]
    index: Option<u32>,
    #[serde(default, borrow)]
    delta: Option<WireDelta<'a>>,
    #[serde(default)]
    content_block: Option<Value>,
    #[serde(default)]
    message: Option<WireMessage>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<WireError>,
}

#[derive(Deserialize)]
struct WireDelta<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    partial_json: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    thinking: Option<Cow<'a, str>>,
    #[serde(default)]
    signature: Option<String>,
    #[serde(default)]
    stop_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireMessage {
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize, Default)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
}

impl WireUsage {
    /// Anthropic's `input_tokens` already excludes cache reads and writes: it is uncached input.
    fn canonical(&self) -> Usage {
        Usage {
            input: self.input_tokens.unwrap_or(0),
            output: self.output_tokens.unwrap_or(0),
            cache_read: self.cache_read_input_tokens.unwrap_or(0),
            cache_write: self.cache_creation_input_tokens.unwrap_or(0),
        }
    }
}

#[derive(Deserialize)]
struct WireError {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

#[derive(Debug)]
enum OpenBlock {
    Text,
    Thinking {
        signature: Option<String>,
    },
    ToolUse {
        /// `input` given whole at the start (some compatible servers send no deltas).
        initial_input: Option<String>,
        saw_delta: bool,
    },
    Other,
}

/// The Anthropic stream state machine: `message_start`, then content blocks opened, filled by
/// deltas and closed, then `message_delta` (stop reason, usage) and `message_stop`.
#[derive(Debug, Default)]
pub struct AnthropicStreamState {
    open: HashMap<u32, OpenBlock>,
    stop_reason: Option<FinishReason>,
}

fn map_stop_reason(reason: &str) -> FinishReason {
    match reason {
        "end_turn" | "stop_sequence" => FinishReason::EndTurn,
        "tool_use" => FinishReason::ToolUse,
        "max_tokens" | "model_context_window_exceeded" => FinishReason::MaxTokens,
        "refusal" => FinishReason::Refusal,
        other => FinishReason::Other(other.to_string()),
    }
}

fn require_index(index: Option<u32>, kind: &str) -> Result<u32, LlmError> {
    index.ok_or_else(|| LlmError::decode(format!("{kind} event without an index")))
}

impl StreamState for AnthropicStreamState {
    fn on_sse(
        &mut self,
        event: SseEventRef<'_>,
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), LlmError> {
        let wire: WireEvent<'_> = serde_json::from_str(event.data).map_err(|e| {
            LlmError::decode(format!(
                "invalid JSON in Anthropic event ({e}): {}",
                event.data
            ))
        })?;
        match wire.kind.as_ref() {
            "message_start" => {
                if let Some(usage) = wire.message.and_then(|m| m.usage) {
                    out.push(StreamEvent::Usage(usage.canonical()));
                }
            }
            "content_block_start" => {
                let index = require_index(wire.index, "content_block_start")?;
                let block = wire.content_block.unwrap_or(Value::Null);
                let open = match block.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        if let Some(text) = block.get("text").and_then(Value::as_str)
                            && !text.is_empty()
                        {
                            out.push(StreamEvent::TextDelta {
                                index,
                                text: text.to_string(),
                            });
                        }
                        OpenBlock::Text
                    }
                    Some("tool_use") => {
                        let field =
                            |name: &str| block.get(name).and_then(Value::as_str).map(str::to_owned);
                        let (Some(id), Some(name)) = (field("id"), field("name")) else {
                            return Err(LlmError::decode(format!(
                                "tool_use block {index} started without an id or a name"
                            )));
                        };
                        out.push(StreamEvent::ToolCallStart {
                            index,
                            id,
                            name,
                            meta: None,
                        });
                        let initial_input = block
                            .get("input")
                            .filter(|v| v.as_object().is_some_and(|o| !o.is_empty()))
                            .map(Value::to_string);
                        OpenBlock::ToolUse {
                            initial_input,
                            saw_delta: false,
                        }
                    }
                    Some("thinking") => {
                        if let Some(text) = block.get("thinking").and_then(Value::as_str)
                            && !text.is_empty()
                        {
                            out.push(StreamEvent::ReasoningDelta {
                                index,
                                text: text.to_string(),
                            });
                        }
                        OpenBlock::Thinking { signature: None }
                    }
                    Some("redacted_thinking") => {
                        let data = block.get("data").cloned().unwrap_or(Value::Null);
                        out.push(StreamEvent::ReasoningDone {
                            index,
                            meta: Some(ProviderMeta::new(
                                META_PROVIDER,
                                json!({"redacted_data": data}),
                            )),
                        });
                        OpenBlock::Other
                    }
                    // Server tools and future block kinds: not modelled, ignored.
                    _ => OpenBlock::Other,
                };
                self.open.insert(index, open);
            }
            "content_block_delta" => {
                let index = require_index(wire.index, "content_block_delta")?;
                let Some(delta) = wire.delta else {
                    return Ok(());
                };
                match delta.kind.as_deref() {
                    Some("text_delta") => {
                        if let Some(text) = delta.text.filter(|t| !t.is_empty()) {
                            out.push(StreamEvent::TextDelta {
                                index,
                                text: text.into_owned(),
                            });
                        }
                    }
                    Some("input_json_delta") => {
                        if let Some(OpenBlock::ToolUse { saw_delta, .. }) =
                            self.open.get_mut(&index)
                        {
                            *saw_delta = true;
                        }
                        if let Some(frag) = delta.partial_json.filter(|f| !f.is_empty()) {
                            out.push(StreamEvent::ToolCallDelta {
                                index,
                                arguments_fragment: frag.into_owned(),
                            });
                        }
                    }
                    Some("thinking_delta") => {
                        if let Some(text) = delta.thinking.filter(|t| !t.is_empty()) {
                            out.push(StreamEvent::ReasoningDelta {
                                index,
                                text: text.into_owned(),
                            });
                        }
                    }
                    Some("signature_delta") => {
                        if let Some(OpenBlock::Thinking { signature }) = self.open.get_mut(&index) {
                            *signature = delta.signature;
                        }
                    }
                    _ => {}
                }
            }
            "content_block_stop" => {
                let index = require_index(wire.index, "content_block_stop")?;
                match self.open.remove(&index) {
                    Some(OpenBlock::Thinking { signature }) => {
                        out.push(StreamEvent::ReasoningDone {
                            index,
                            meta: signature
                                .map(|s| ProviderMeta::new(META_PROVIDER, json!({"signature": s}))),
                        });
                    }
                    Some(OpenBlock::ToolUse {
                        initial_input: Some(input),
                        saw_delta: false,
                    }) => out.push(StreamEvent::ToolCallDelta {
                        index,
                        arguments_fragment: input,
                    }),
                    Some(OpenBlock::ToolUse { .. } | OpenBlock::Text | OpenBlock::Other) | None => {
                    }
                }
            }
            "message_delta" => {
                if let Some(usage) = wire.usage {
                    out.push(StreamEvent::Usage(usage.canonical()));
                }
                if let Some(reason) = wire.delta.and_then(|d| d.stop_reason) {
                    self.stop_reason = Some(map_stop_reason(&reason));
                }
            }
            "message_stop" => {
                let reason = self.stop_reason.take().unwrap_or_else(|| {
                    FinishReason::Other("message_stop without a stop_reason".into())
                });
                out.push(StreamEvent::Finish(reason));
            }
            "error" => {
                let error = wire.error.unwrap_or(WireError {
                    kind: None,
                    message: None,
                });
                return Err(LlmError::Api {
                    kind: error.kind.unwrap_or_else(|| "error".into()),
                    message: error.message.unwrap_or_default(),
                });
            }
            // ping and anything new: ignored, never an error.
            _ => {}
        }
        Ok(())
    }

    fn on_end(&mut self, _out: &mut Vec<StreamEvent>) -> Result<(), LlmError> {
        // Without message_stop the response is incomplete; emitting nothing lets the builder
        // report UnexpectedEof.
        Ok(())
    }
}

// ---- HTTP -----------------------------------------------------------------------------------

/// An Anthropic Messages endpoint: Anthropic's own, or any server speaking its wire format
/// (llama.cpp's server, a proxy).
pub struct Anthropic {
    endpoint: Endpoint,
    /// Sent as `x-api-key`; `None` sends no key header (a local server).
    api_key: Option<String>,
}

impl Anthropic {
    pub fn new(api_key: impl Into<String>) -> Result<Self, LlmError> {
        let mut provider = Self::without_key()?;
        provider.api_key = Some(api_key.into());
        Ok(provider)
    }

    /// Sends no `x-api-key` header: for a server at another `base_url` that needs no key
    /// (Anthropic's own endpoint refuses such requests with a 401).
    pub fn without_key() -> Result<Self, LlmError> {
        Ok(Self {
            endpoint: Endpoint::new(
                Protocol::Anthropic,
                "anthropic",
                Protocol::Anthropic.default_base_url(),
            )?,
            api_key: None,
        })
    }

    endpoint_builders!();
}

#[async_trait::async_trait]
impl Provider for Anthropic {
    fn name(&self) -> &str {
        &self.endpoint.name
    }

    async fn stream(&self, req: &ChatRequest) -> Result<EventStream, LlmError> {
        let mut request = self
            .endpoint
            .post(format!("{}/v1/messages", self.endpoint.base_url))?
            .header("anthropic-version", API_VERSION)
            .header("accept", "text/event-stream")
            .json(&to_wire(req, &self.endpoint.caps));
        if let Some(key) = &self.api_key {
            request = request.header("x-api-key", key);
        }
        self.endpoint
            .send(request, Box::new(AnthropicStreamState::default()))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::ToolSpec;

    fn request() -> ChatRequest {
        ChatRequest {
            model: "claude-sonnet-4-5".into(),
            system: Some("You are terse.".into()),
            messages: vec![
                Message::new(
                    Role::User,
                    vec![
                        ContentBlock::text("Weather in Oslo?"),
                        ContentBlock::text(""),
                    ],
                ),
                Message::new(
                    Role::Assistant,
                    vec![
                        ContentBlock::Reasoning {
                            text: "foreign thoughts".into(),
                            meta: Some(ProviderMeta::new(
                                "openai-responses",
                                json!({"encrypted_content": "xyz"}),
                            )),
                        },
                        ContentBlock::Reasoning {
                            text: "my thoughts".into(),
                            meta: Some(ProviderMeta::new(
                                META_PROVIDER,
                                json!({"signature": "sig=="}),
                            )),
                        },
                        ContentBlock::Reasoning {
                            text: "unsigned".into(),
                            meta: None,
                        },
                        ContentBlock::text("Checking."),
                        ContentBlock::ToolCall {
                            id: "toolu_1".into(),
                            name: "get_weather".into(),
                            arguments: json!({"city": "Oslo"}),
                            meta: None,
                        },
                    ],
                ),
                Message::new(
                    Role::User,
                    vec![ContentBlock::tool_result("toolu_1", "-3°C, snow", false)],
                ),
            ],
            tools: vec![ToolSpec {
                name: "get_weather".into(),
                description: "Current weather for a city.".into(),
                input_schema: json!({
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"]
                }),
            }],
            max_tokens: 1024,
            temperature: None,
            ..ChatRequest::default()
        }
    }

    fn caps() -> Capabilities {
        Capabilities::of(Protocol::Anthropic)
    }

    #[test]
    fn a_text_only_target_gets_a_placeholder_for_images() {
        let m = Message::new(
            Role::User,
            vec![ContentBlock::Image {
                media_type: "image/png".into(),
                data: "AAAA".into(),
            }],
        );
        assert_eq!(
            message_to_wire(&m, &caps().with_images(false))["content"][0],
            json!({"type": "text", "text": "[image omitted: image/png, 3 bytes; this model does not accept images]"})
        );
    }

    #[test]
    fn to_wire_snapshot() {
        insta::assert_json_snapshot!(to_wire(&request(), &caps()));
    }

    #[test]
    fn cache_hints_are_exactly_two_breakpoints() {
        let req = ChatRequest {
            cache: true,
            ..request()
        };
        let wire = to_wire(&req, &caps());
        insta::assert_json_snapshot!(wire);
        assert_eq!(wire.to_string().matches("cache_control").count(), 2);
        assert_eq!(
            wire["system"][0]["cache_control"],
            json!({"type": "ephemeral"})
        );
        let last = wire["messages"].as_array().unwrap().last().unwrap();
        assert_eq!(
            last["content"][0]["cache_control"],
            json!({"type": "ephemeral"})
        );
        // Off by default.
        assert!(
            !to_wire(&request(), &caps())
                .to_string()
                .contains("cache_control")
        );
    }

    #[test]
    fn foreign_reasoning_and_empty_text_are_absent() {
        let wire = to_wire(&request(), &caps()).to_string();
        assert!(!wire.contains("foreign thoughts"));
        assert!(!wire.contains("unsigned"));
        assert!(!wire.contains(r#""text":"""#));
    }

    #[test]
    fn error_results_and_images() {
        let m = Message::new(
            Role::User,
            vec![
                ContentBlock::tool_result("t", "boom", true),
                ContentBlock::Image {
                    media_type: "image/png".into(),
                    data: "AAAA".into(),
                },
            ],
        );
        assert_eq!(
            message_to_wire(&m, &caps()),
            json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t", "content": "boom", "is_error": true},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
            ]})
        );
    }

    fn feed(lines: &[&str]) -> Result<Vec<StreamEvent>, LlmError> {
        crate::protocol::test_support::events(&mut AnthropicStreamState::default(), lines)
    }

    #[test]
    fn an_invented_event_type_is_ignored() {
        assert_eq!(
            feed(&[r#"{"type":"brand_new_event","x":1}"#]).unwrap(),
            vec![]
        );
    }

    #[test]
    fn error_event_is_an_api_error() {
        let err = feed(&[
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        ])
        .unwrap_err();
        assert!(
            matches!(&err, LlmError::Api { kind, message } if kind == "overloaded_error" && message == "Overloaded"),
            "{err:?}"
        );
        assert!(err.is_retryable());
    }

    #[test]
    fn stop_reasons() {
        for (wire, reason) in [
            ("end_turn", FinishReason::EndTurn),
            ("stop_sequence", FinishReason::EndTurn),
            ("tool_use", FinishReason::ToolUse),
            ("max_tokens", FinishReason::MaxTokens),
            ("refusal", FinishReason::Refusal),
            ("pause_turn", FinishReason::Other("pause_turn".into())),
        ] {
            let delta = format!(r#"{{"type":"message_delta","delta":{{"stop_reason":"{wire}"}}}}"#);
            let events = feed(&[&delta, r#"{"type":"message_stop"}"#]).unwrap();
            assert_eq!(events.last(), Some(&StreamEvent::Finish(reason)));
        }
    }

    #[test]
    fn tool_use_with_whole_input_at_start_and_no_deltas() {
        let events = feed(&[
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t1","name":"f","input":{"a":1}}}"#,
            r#"{"type":"content_block_stop","index":0}"#,
        ])
        .unwrap();
        assert_eq!(
            events[1],
            StreamEvent::ToolCallDelta {
                index: 0,
                arguments_fragment: r#"{"a":1}"#.into()
            }
        );
    }

    #[test]
    fn invalid_json_is_a_decode_error() {
        assert!(matches!(feed(&["{not json"]), Err(LlmError::Decode(_))));
    }
}
