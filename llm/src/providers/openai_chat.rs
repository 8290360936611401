//! OpenAI Chat Completions and compatible servers (Ollama, vLLM, llama.cpp, OpenRouter):
//! `to_wire`, the quirk-tolerant stream state, and the HTTP provider.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::capability::{Capabilities, MaxTokensField, image_omitted};
use crate::error::LlmError;
use crate::http::{Endpoint, endpoint_builders};
use crate::protocol::{Protocol, StreamState};
use crate::provider::{EventStream, Provider};
use crate::sse::SseEventRef;
use crate::stream::{FinishReason, StreamEvent, Usage};
use crate::types::{ChatRequest, ContentBlock, Message, Role};

/// The request body for `POST {base}/chat/completions`.
pub fn to_wire(req: &ChatRequest, caps: &Capabilities) -> Value {
    let mut messages = Vec::new();
    if let Some(system) = req.system.as_deref().filter(|s| !s.is_empty()) {
        messages.push(json!({"role": "system", "content": system}));
    }
    for m in &req.messages {
        match m.role {
            Role::User => user_to_wire(m, caps, &mut messages),
            Role::Assistant => messages.push(assistant_to_wire(m)),
        }
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(req.model));
    body.insert("messages".into(), Value::Array(messages));
    body.insert("stream".into(), json!(true));
    body.insert("stream_options".into(), json!({"include_usage": true}));
    body.insert(caps.max_tokens_field.into(), json!(req.max_tokens));
    if !req.tools.is_empty() {
        let tools: Vec<Value> = req
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.input_schema
                }})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    if let (Some(t), true) = (req.temperature, caps.temperature) {
        body.insert("temperature".into(), json!(t));
    }
    if let Some(key) = &req.prompt_cache_key {
        body.insert("prompt_cache_key".into(), json!(key));
    }
    Value::Object(body)
}

/// Tool results first (as `tool` messages, in order), then the remaining text and images as one
/// user message.
fn user_to_wire(m: &Message, caps: &Capabilities, out: &mut Vec<Value>) {
    let mut parts = Vec::new();
    let mut has_image = false;
    for block in &m.content {
        match block {
            ContentBlock::ToolResult {
                call_id,
                content,
                is_error,
            } => {
                let content = if *is_error {
                    format!("ERROR: {content}")
                } else {
                    content.clone()
                };
                out.push(json!({"role": "tool", "tool_call_id": call_id, "content": content}));
            }
            ContentBlock::Text { text } if !text.is_empty() => {
                parts.push(json!({"type": "text", "text": text}));
            }
            ContentBlock::Image { media_type, data } if !caps.images => {
                parts.push(json!({"type": "text", "text": image_omitted(media_type, data)}));
            }
            ContentBlock::Image { media_type, data } => {
                has_image = true;
                parts.push(json!({"type": "image_url", "image_url": {
                    "url": format!("data:{media_type};base64,{data}")
                }}));
            }
            ContentBlock::Text { .. }
            | ContentBlock::Reasoning { .. }
            | ContentBlock::ToolCall { .. } => {}
        }
    }
    if parts.is_empty() {
        return;
    }
    // Plain strings are understood by every compatible server; parts only when needed.
    let content = if has_image {
        Value::Array(parts)
    } else {
        let text: Vec<&str> = parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect();
        json!(text.join("\n\n"))
    };
    out.push(json!({"role": "user", "content": content}));
}

/// Text (or null) plus `tool_calls` when there are some. Reasoning cannot be replayed here.
fn assistant_to_wire(m: &Message) -> Value {
    let text = m.text();
    let mut msg = json!({
        "role": "assistant",
        "content": if text.is_empty() { Value::Null } else { json!(text) },
    });
    let calls: Vec<Value> = m
        .tool_calls()
        .map(|c| {
            let arguments = match c.arguments {
                Value::String(raw) => raw.clone(),
                other => other.to_string(),
            };
            json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": arguments}})
        })
        .collect();
    if !calls.is_empty() {
        msg["tool_calls"] = Value::Array(calls);
    }
    msg
}

// ---- stream ---------------------------------------------------------------------------------

#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(default, borrow)]
    choices: Option<Vec<Choice<'a>>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default)]
    index: u32,
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning: Option<Cow<'a, str>>,
    #[serde(default)]
    tool_calls: Option<Vec<ToolCallFragment>>,
}

#[derive(Deserialize)]
struct ToolCallFragment {
    #[serde(default)]
    index: Option<u32>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionFragment>,
}

#[derive(Deserialize)]
struct FunctionFragment {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
}

#[derive(Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

impl WireUsage {
    /// `prompt_tokens` includes cached tokens; canonical input is uncached.
    fn canonical(&self) -> Usage {
        let cached = self
            .prompt_tokens_details
            .as_ref()
            .and_then(|d| d.cached_tokens)
            .unwrap_or(0);
        Usage {
            input: self.prompt_tokens.saturating_sub(cached),
            output: self.completion_tokens,
            cache_read: cached,
            cache_write: 0,
        }
    }
}

/// Block indices: reasoning first, then text, then tool calls in wire order.
const REASONING_BLOCK: u32 = 0;
const TEXT_BLOCK: u32 = 1;
const FIRST_TOOL_BLOCK: u32 = 2;

#[derive(Debug, Default)]
struct ToolSlot {
    started: bool,
    id: Option<String>,
    /// Arguments received before the name arrived (rare; held until the call can start).
    held: String,
    /// Everything emitted so far, to recognise a repeat of the complete arguments.
    emitted: String,
}

/// The Chat Completions stream state, implementing every row of the quirks table.
#[derive(Debug, Default)]
pub struct ChatStreamState {
    tools: BTreeMap<u32, ToolSlot>,
    pending_finish: Option<FinishReason>,
    saw_tool: bool,
    done: bool,
}

impl ChatStreamState {
    fn finish(&mut self, out: &mut Vec<StreamEvent>) {
        self.done = true;
        let reason = match self.pending_finish.take() {
            // "stop" with a tool call is a tool call (Ollama, some local servers).
            Some(FinishReason::EndTurn) | None if self.saw_tool => FinishReason::ToolUse,
            Some(reason) => reason,
            None => FinishReason::EndTurn,
        };
        out.push(StreamEvent::Finish(reason));
    }

    fn on_tool_fragment(
        &mut self,
        position: usize,
        frag: ToolCallFragment,
        out: &mut Vec<StreamEvent>,
    ) {
        let wire_index = frag.index.unwrap_or(position as u32);
        let index = FIRST_TOOL_BLOCK + wire_index;
        let slot = self.tools.entry(wire_index).or_default();
        let (name, arguments) = match frag.function {
            Some(f) => (
                f.name.filter(|n| !n.is_empty()),
                f.arguments.unwrap_or_default(),
            ),
            None => (None, String::new()),
        };
        if slot.id.is_none() {
            slot.id = frag.id.clone().filter(|id| !id.is_empty());
        }
        if !slot.started {
            let Some(name) = name else {
                slot.held.push_str(&arguments);
                return;
            };
            slot.started = true;
            self.saw_tool = true;
            out.push(StreamEvent::ToolCallStart {
                index,
                id: canonical_id(slot.id.as_deref()),
                name,
                meta: None,
            });
            let first = std::mem::take(&mut slot.held) + &arguments;
            if !first.is_empty() {
                slot.emitted.push_str(&first);
                out.push(StreamEvent::ToolCallDelta {
                    index,
                    arguments_fragment: first,
                });
            }
            return;
        }
        if arguments.is_empty() {
            return;
        }
        // A later fragment that repeats id + name may carry the complete arguments again
        // (OpenRouter); appending would give `{}{}`.
        let repeats_identity = name.is_some() && frag.id.is_some();
        let fragment = if repeats_identity && !slot.emitted.is_empty() {
            if arguments == slot.emitted {
                return;
            }
            match arguments.strip_prefix(slot.emitted.as_str()) {
                Some(rest) => rest.to_string(),
                None => arguments,
            }
        } else {
            arguments
        };
        slot.emitted.push_str(&fragment);
        out.push(StreamEvent::ToolCallDelta {
            index,
            arguments_fragment: fragment,
        });
    }
}

/// The canonical id for a wire id. Ids that cannot be unique across a transcript — missing,
/// or as short as OpenRouter's `"0"` — are replaced by a locally minted one.
fn canonical_id(wire: Option<&str>) -> String {
    match wire {
        Some(id) if id.len() >= 8 => id.to_string(),
        _ => format!("call_{}", uuid::Uuid::new_v4().simple()),
    }
}

fn map_finish(reason: &str) -> FinishReason {
    match reason {
        "stop" => FinishReason::EndTurn,
        "tool_calls" | "function_call" => FinishReason::ToolUse,
        "length" => FinishReason::MaxTokens,
        "content_filter" => FinishReason::Refusal,
        other => FinishReason::Other(other.to_string()),
    }
}

fn api_error(error: &Value) -> LlmError {
    let text = |v: Option<&Value>| match v {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    LlmError::Api {
        kind: text(error.get("type"))
            .or_else(|| text(error.get("code")))
            .unwrap_or_else(|| "error".into()),
        message: text(error.get("message")).unwrap_or_else(|| error.to_string()),
    }
}

impl StreamState for ChatStreamState {
    fn on_sse(
        &mut self,
        event: SseEventRef<'_>,
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), LlmError> {
        if self.done {
            return Ok(());
        }
        if event.data.trim() == "[DONE]" {
            self.finish(out);
            return Ok(());
        }
        let chunk: Chunk<'_> = serde_json::from_str(event.data).map_err(|e| {
            LlmError::decode(format!(
                "invalid JSON in chat completion chunk ({e}): {}",
                event.data
            ))
        })?;
        if let Some(error) = &chunk.error {
            return Err(api_error(error));
        }
        for choice in chunk.choices.into_iter().flatten() {
            // anvil asks for one choice; any other index is not part of this response.
            if choice.index != 0 {
                continue;
            }
            if let Some(delta) = choice.delta {
                if let Some(r) = delta
                    .reasoning_content
                    .or(delta.reasoning)
                    .filter(|r| !r.is_empty())
                {
                    out.push(StreamEvent::ReasoningDelta {
                        index: REASONING_BLOCK,
                        text: r.into_owned(),
                    });
                }
                if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
                    out.push(StreamEvent::TextDelta {
                        index: TEXT_BLOCK,
                        text: text.into_owned(),
                    });
                }
                for (position, frag) in delta.tool_calls.into_iter().flatten().enumerate() {
                    self.on_tool_fragment(position, frag, out);
                }
            }
            if let Some(reason) = choice.finish_reason.filter(|r| !r.is_empty()) {
                self.pending_finish = Some(map_finish(&reason));
            }
        }
        if let Some(usage) = chunk.usage {
            out.push(StreamEvent::Usage(usage.canonical()));
        }
        Ok(())
    }

    fn on_end(&mut self, out: &mut Vec<StreamEvent>) -> Result<(), LlmError> {
        // No [DONE]: a held finish still completes the response; without one the body was cut.
        if !self.done && self.pending_finish.is_some() {
            self.finish(out);
        }
        Ok(())
    }
}

// ---- HTTP -----------------------------------------------------------------------------------

/// An OpenAI Chat Completions endpoint (OpenAI or any compatible server).
pub struct OpenAiChat {
    endpoint: Endpoint,
    api_key: Option<String>,
}

impl OpenAiChat {
    /// `api_key: None` sends no `Authorization` header (local servers).
    pub fn new(api_key: Option<String>) -> Result<Self, LlmError> {
        Ok(Self {
            endpoint: Endpoint::new(
                Protocol::OpenaiChat,
                "openai",
                Protocol::OpenaiChat.default_base_url(),
            )?,
            api_key,
        })
    }

    endpoint_builders!();

    /// Overrides the max-token field chosen from the endpoint.
    pub fn with_max_tokens_field(mut self, field: MaxTokensField) -> Self {
        self.endpoint.caps.max_tokens_field = field.key();
        self
    }

    fn request(&self, req: &ChatRequest) -> Result<reqwest::RequestBuilder, LlmError> {
        let mut request = self
            .endpoint
            .post(format!("{}/chat/completions", self.endpoint.base_url))?
            .header("accept", "text/event-stream")
            .json(&to_wire(req, &self.endpoint.caps));
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        Ok(request)
    }
}

#[async_trait::async_trait]
impl Provider for OpenAiChat {
    fn name(&self) -> &str {
        &self.endpoint.name
    }

    async fn stream(&self, req: &ChatRequest) -> Result<EventStream, LlmError> {
        self.endpoint
            .send(self.request(req)?, Box::new(ChatStreamState::default()))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::MessageBuilder;
    use crate::types::ToolSpec;

    fn call(id: &str, name: &str, args: Value) -> ContentBlock {
        ContentBlock::ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: args,
            meta: None,
        }
    }

    fn caps(field: MaxTokensField) -> Capabilities {
        let mut caps = Capabilities::of(Protocol::OpenaiChat);
        caps.max_tokens_field = field.key();
        caps
    }

    #[test]
    fn to_wire_snapshot_two_calls_two_results() {
        let req = ChatRequest {
            model: "gpt-4o".into(),
            system: Some("Be brief.".into()),
            messages: vec![
                Message::user_text("Weather in Oslo and Lima?"),
                Message::new(
                    Role::Assistant,
                    vec![
                        ContentBlock::Reasoning {
                            text: "dropped".into(),
                            meta: None,
                        },
                        call("call_a", "get_weather", json!({"city": "Oslo"})),
                        call("call_b", "get_weather", json!({"city": "Lima"})),
                    ],
                ),
                Message::new(
                    Role::User,
                    vec![
                        ContentBlock::tool_result("call_a", "-3°C, snow", false),
                        ContentBlock::tool_result("call_b", "city not found", true),
                        ContentBlock::text("Thanks."),
                    ],
                ),
            ],
            tools: vec![ToolSpec {
                name: "get_weather".into(),
                description: "Current weather for a city.".into(),
                input_schema: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
            }],
            max_tokens: 256,
            temperature: Some(0.0),
            ..ChatRequest::default()
        };
        let wire = to_wire(&req, &caps(MaxTokensField::MaxTokens));
        insta::assert_json_snapshot!(wire);
        let msgs = wire["messages"].as_array().unwrap();
        let roles: Vec<&str> = msgs.iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(
            roles,
            ["system", "user", "assistant", "tool", "tool", "user"]
        );
        assert_eq!(msgs[4]["content"], "ERROR: city not found");
        assert!(!wire.to_string().contains("dropped"));
    }

    #[test]
    fn prompt_cache_key_is_sent_when_configured() {
        let mut req = ChatRequest::default();
        let all = caps(MaxTokensField::MaxTokens);
        assert!(to_wire(&req, &all).get("prompt_cache_key").is_none());
        req.prompt_cache_key = Some("anvil-abc".into());
        assert_eq!(to_wire(&req, &all)["prompt_cache_key"], "anvil-abc");
    }

    #[test]
    fn images_become_data_urls() {
        let mut out = Vec::new();
        let all = caps(MaxTokensField::MaxTokens);
        user_to_wire(
            &Message::new(
                Role::User,
                vec![
                    ContentBlock::text("what is this"),
                    ContentBlock::Image {
                        media_type: "image/png".into(),
                        data: "AAAA".into(),
                    },
                ],
            ),
            &all,
            &mut out,
        );
        assert_eq!(
            out[0]["content"][1]["image_url"]["url"],
            "data:image/png;base64,AAAA"
        );
        let mut text_only = Vec::new();
        user_to_wire(
            &Message::new(
                Role::User,
                vec![ContentBlock::Image {
                    media_type: "image/png".into(),
                    data: "AAAA".into(),
                }],
            ),
            &all.with_images(false),
            &mut text_only,
        );
        assert_eq!(
            text_only[0]["content"],
            "[image omitted: image/png, 3 bytes; this model does not accept images]"
        );
    }

    #[test]
    fn max_tokens_field_follows_the_target() {
        let req = ChatRequest::default();
        assert!(
            to_wire(
                &req,
                &caps(MaxTokensField::default_for(
                    Protocol::OpenaiChat.default_base_url()
                ))
            )
            .get("max_completion_tokens")
            .is_some()
        );
        assert!(
            to_wire(
                &req,
                &caps(MaxTokensField::default_for("http://localhost:11434/v1"))
            )
            .get("max_tokens")
            .is_some()
        );
    }

    // ---- the quirks table, row by row ----

    fn run(chunks: &[&str]) -> Result<(Vec<StreamEvent>, crate::builder::Completion), LlmError> {
        let out = crate::protocol::test_support::events(&mut ChatStreamState::default(), chunks)?;
        let mut b = MessageBuilder::new();
        for e in &out {
            b.push(e)?;
        }
        Ok((out, b.finish()?))
    }

    fn tc(index: u32, id: Option<&str>, name: Option<&str>, args: &str) -> String {
        let mut f = json!({"index": index, "function": {"arguments": args}});
        if let Some(id) = id {
            f["id"] = json!(id);
            f["type"] = json!("function");
        }
        if let Some(name) = name {
            f["function"]["name"] = json!(name);
        }
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [f]}, "finish_reason": null}]})
            .to_string()
    }

    fn fin(reason: &str) -> String {
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]}).to_string()
    }

    #[test]
    fn quirk_id_and_name_only_in_the_first_fragment() {
        let (events, c) = run(&[
            &tc(0, Some("call_abcdefgh"), Some("f"), ""),
            &tc(0, None, None, "{\"a\""),
            &tc(0, None, None, ":1}"),
            &fin("tool_calls"),
            "[DONE]",
        ])
        .unwrap();
        let starts = events
            .iter()
            .filter(|e| matches!(e, StreamEvent::ToolCallStart { .. }))
            .count();
        assert_eq!(starts, 1);
        assert_eq!(
            c.message.content,
            vec![call("call_abcdefgh", "f", json!({"a": 1}))]
        );
        assert_eq!(c.finish, FinishReason::ToolUse);
    }

    #[test]
    fn quirk_id_and_name_repeated_on_every_delta() {
        let (_, c) = run(&[
            &tc(0, Some("call_abcdefgh"), Some("f"), "{\"a\""),
            &tc(0, Some("call_abcdefgh"), Some("f"), ":1}"),
            &fin("tool_calls"),
            "[DONE]",
        ])
        .unwrap();
        assert_eq!(
            c.message.content,
            vec![call("call_abcdefgh", "f", json!({"a": 1}))]
        );
    }

    #[test]
    fn quirk_missing_ids_are_synthesized_unique() {
        let (_, c) = run(&[
            &tc(0, None, Some("f"), "{}"),
            &tc(1, None, Some("g"), "{}"),
            &fin("stop"),
        ])
        .unwrap();
        let ids: Vec<&str> = c.message.tool_calls().map(|c| c.id).collect();
        assert_eq!(ids.len(), 2);
        assert_ne!(ids[0], ids[1]);
        assert!(ids.iter().all(|id| id.starts_with("call_") && id.len() > 8));
    }

    #[test]
    fn quirk_whole_arguments_in_one_chunk() {
        let (events, c) = run(&[
            &tc(0, Some("call_12345678"), Some("f"), "{\"x\":[1,2]}"),
            &fin("tool_calls"),
        ])
        .unwrap();
        assert_eq!(events.len(), 3); // start, one delta, finish
        assert_eq!(
            c.message.content,
            vec![call("call_12345678", "f", json!({"x": [1, 2]}))]
        );
    }

    #[test]
    fn quirk_finish_reason_mapping() {
        for (wire, reason) in [
            ("stop", FinishReason::EndTurn),
            ("tool_calls", FinishReason::ToolUse),
            ("length", FinishReason::MaxTokens),
            ("content_filter", FinishReason::Refusal),
            ("something_new", FinishReason::Other("something_new".into())),
        ] {
            let (_, c) = run(&[
                r#"{"choices":[{"index":0,"delta":{"content":"hi"}}]}"#,
                &fin(wire),
                "[DONE]",
            ])
            .unwrap();
            assert_eq!(c.finish, reason, "{wire}");
        }
    }

    #[test]
    fn quirk_stop_with_a_tool_call_is_tool_use() {
        let (_, c) = run(&[
            &tc(0, Some("call_12345678"), Some("f"), "{}"),
            &fin("stop"),
            "[DONE]",
        ])
        .unwrap();
        assert_eq!(c.finish, FinishReason::ToolUse);
    }

    #[test]
    fn quirk_finish_before_the_usage_only_chunk() {
        let (events, c) = run(&[
            r#"{"choices":[{"index":0,"delta":{"content":"hi"}}],"usage":null}"#,
            &fin("stop"),
            r#"{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":2}}"#,
            "[DONE]",
        ])
        .unwrap();
        // Usage is emitted before Finish, and Finish is last.
        let n = events.len();
        assert!(matches!(events[n - 2], StreamEvent::Usage(_)));
        assert!(matches!(
            events[n - 1],
            StreamEvent::Finish(FinishReason::EndTurn)
        ));
        assert_eq!(c.usage.input, 10);
        assert_eq!(c.usage.output, 2);
    }

    #[test]
    fn quirk_no_done_emits_the_held_finish() {
        let (_, c) = run(&[
            r#"{"choices":[{"index":0,"delta":{"content":"hi"}}]}"#,
            &fin("stop"),
        ])
        .unwrap();
        assert_eq!(c.finish, FinishReason::EndTurn);
    }

    #[test]
    fn quirk_neither_finish_nor_done_is_unexpected_eof() {
        let err = run(&[r#"{"choices":[{"index":0,"delta":{"content":"hi"}}]}"#]).unwrap_err();
        assert!(matches!(err, LlmError::UnexpectedEof));
    }

    #[test]
    fn quirk_done_without_any_finish_reason() {
        let (_, c) = run(&[
            r#"{"choices":[{"index":0,"delta":{"content":"hi"}}]}"#,
            "[DONE]",
        ])
        .unwrap();
        assert_eq!(c.finish, FinishReason::EndTurn);
        let (_, c) = run(&[&tc(0, Some("call_12345678"), Some("f"), "{}"), "[DONE]"]).unwrap();
        assert_eq!(c.finish, FinishReason::ToolUse);
    }

    #[test]
    fn quirk_a_later_fragment_repeating_the_complete_arguments_is_not_appended() {
        let (_, c) = run(&[
            &tc(0, Some("0"), Some("f"), "{}"),
            &tc(0, Some("0"), Some("f"), "{}"),
            "[DONE]",
        ])
        .unwrap();
        let calls: Vec<_> = c.message.tool_calls().collect();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].arguments, &json!({}));
        // "0" cannot be unique across a transcript: a local id is minted.
        assert!(calls[0].id.starts_with("call_"));
        // A repeat that extends what was sent contributes only the rest.
        let (_, c) = run(&[
            &tc(0, Some("call_12345678"), Some("f"), "{\"a\":"),
            &tc(0, Some("call_12345678"), Some("f"), "{\"a\":1}"),
            "[DONE]",
        ])
        .unwrap();
        assert_eq!(
            c.message.tool_calls().next().unwrap().arguments,
            &json!({"a": 1})
        );
    }

    #[test]
    fn quirk_null_or_empty_content_and_role_only_deltas_are_ignored() {
        let (events, _) = run(&[
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"refusal":null}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
            r#"{"choices":[{"index":0,"delta":null,"finish_reason":null}]}"#,
            &fin("stop"),
        ])
        .unwrap();
        assert_eq!(events, vec![StreamEvent::Finish(FinishReason::EndTurn)]);
    }

    #[test]
    fn quirk_reasoning_content_and_reasoning_are_reasoning_deltas() {
        let (_, c) = run(&[
            r#"{"choices":[{"index":0,"delta":{"reasoning_content":"a"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"reasoning":"b"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"c"}}]}"#,
            &fin("stop"),
        ])
        .unwrap();
        assert_eq!(
            c.message.content,
            vec![
                ContentBlock::Reasoning {
                    text: "ab".into(),
                    meta: None
                },
                ContentBlock::text("c")
            ]
        );
    }

    #[test]
    fn quirk_error_payload_is_an_api_error() {
        let err = run(&[
            r#"{"choices":[{"index":0,"delta":{"content":"x"}}]}"#,
            r#"{"error":{"code":400,"message":"Token limit reached"},"choices":[]}"#,
            "[DONE]",
        ])
        .unwrap_err();
        assert!(
            matches!(&err, LlmError::Api { kind, message } if kind == "400" && message == "Token limit reached"),
            "{err:?}"
        );
    }

    #[test]
    fn quirk_cached_tokens_are_subtracted_from_input() {
        let (_, c) = run(&[
            r#"{"choices":[],"usage":{"prompt_tokens":1000,"completion_tokens":20,"prompt_tokens_details":{"cached_tokens":800}}}"#,
            "[DONE]",
        ])
        .unwrap();
        assert_eq!(
            c.usage,
            Usage {
                input: 200,
                output: 20,
                cache_read: 800,
                cache_write: 0
            }
        );
    }

    #[test]
    fn a_fragment_before_its_name_is_held() {
        let (_, c) = run(&[
            &tc(0, Some("call_12345678"), None, "{\"a\""),
            &tc(0, None, Some("f"), ":1}"),
            "[DONE]",
        ])
        .unwrap();
        assert_eq!(
            c.message.content,
            vec![call("call_12345678", "f", json!({"a": 1}))]
        );
    }

    #[test]
    fn authorization_is_omitted_without_a_key() {
        let keyless = OpenAiChat::new(None)
            .unwrap()
            .with_base_url("http://localhost:1/v1");
        let built = keyless
            .request(&ChatRequest::default())
            .unwrap()
            .build()
            .unwrap();
        assert!(built.headers().get("authorization").is_none());
        let keyed = OpenAiChat::new(Some("sk-test".into())).unwrap();
        let built = keyed
            .request(&ChatRequest::default())
            .unwrap()
            .build()
            .unwrap();
        assert_eq!(built.headers()["authorization"], "Bearer sk-test");
    }
}
