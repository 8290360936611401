//! OpenAI Responses (`POST /responses`, streaming): `to_wire`, the stream state, and the HTTP
//! provider.
//!
//! anvil sends `store: false` and asks for `reasoning.encrypted_content`, so reasoning state
//! travels with the transcript instead of living on OpenAI's servers: a reasoning item arrives as
//! a `ReasoningDone` whose meta holds the whole item, and `to_wire` pushes that item back
//! verbatim, in place, on the next request to this provider.

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
use crate::types::{ChatRequest, ContentBlock, ProviderMeta, Role};

/// The tag on the provider-specific state this adapter returns (see [`Protocol::meta_provider`]).
pub const META_PROVIDER: &str = Protocol::OpenaiResponses.meta_provider();

/// The request body for `POST {base}/responses`.
pub fn to_wire(req: &ChatRequest, caps: &Capabilities) -> Value {
    let mut input = Vec::new();
    for m in &req.messages {
        match m.role {
            Role::User => user_items(&m.content, caps, &mut input),
            Role::Assistant => assistant_items(&m.content, &mut input),
        }
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(req.model));
    if let Some(system) = req.system.as_deref().filter(|s| !s.is_empty()) {
        body.insert("instructions".into(), json!(system));
    }
    body.insert("input".into(), Value::Array(input));
    if !req.tools.is_empty() {
        let tools: Vec<Value> = req
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "name": t.name, "description": t.description,
                       "parameters": t.input_schema, "strict": false})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    body.insert("store".into(), json!(false));
    body.insert("include".into(), json!(["reasoning.encrypted_content"]));
    body.insert(caps.max_tokens_field.into(), json!(req.max_tokens));
    if let (Some(t), true) = (req.temperature, caps.temperature) {
        body.insert("temperature".into(), json!(t));
    }
    body.insert("stream".into(), json!(true));
    if let Some(key) = &req.prompt_cache_key {
        body.insert("prompt_cache_key".into(), json!(key));
    }
    Value::Object(body)
}

/// Tool outputs first, in order, then the user's text and images as one message.
fn user_items(blocks: &[ContentBlock], caps: &Capabilities, out: &mut Vec<Value>) {
    let mut content = Vec::new();
    for block in blocks {
        match block {
            ContentBlock::ToolResult {
                call_id,
                content: output,
                is_error,
            } => {
                let output = if *is_error {
                    format!("ERROR: {output}")
                } else {
                    output.clone()
                };
                out.push(
                    json!({"type": "function_call_output", "call_id": call_id, "output": output}),
                );
            }
            ContentBlock::Text { text } if !text.is_empty() => {
                content.push(json!({"type": "input_text", "text": text}));
            }
            ContentBlock::Image { media_type, data } => {
                if caps.images {
                    content.push(json!({"type": "input_image",
                                        "image_url": format!("data:{media_type};base64,{data}")}));
                } else {
                    content.push(
                        json!({"type": "input_text", "text": image_omitted(media_type, data)}),
                    );
                }
            }
            ContentBlock::Text { .. }
            | ContentBlock::Reasoning { .. }
            | ContentBlock::ToolCall { .. } => {}
        }
    }
    if !content.is_empty() {
        out.push(json!({"role": "user", "content": content}));
    }
}

/// Reasoning items (ours only, verbatim), text as an assistant message, calls as
/// `function_call` items — in the order the blocks came.
fn assistant_items(blocks: &[ContentBlock], out: &mut Vec<Value>) {
    let mut text = String::new();
    let flush = |text: &mut String, out: &mut Vec<Value>| {
        if !text.is_empty() {
            out.push(json!({"role": "assistant", "content": [{"type": "output_text", "text": std::mem::take(text)}]}));
        }
    };
    for block in blocks {
        match block {
            ContentBlock::Text { text: t } => text.push_str(t),
            ContentBlock::Reasoning { meta, .. } => {
                if let Some(item) = ProviderMeta::for_provider(meta.as_ref(), META_PROVIDER) {
                    flush(&mut text, out);
                    out.push(item.clone());
                }
            }
            ContentBlock::ToolCall {
                id,
                name,
                arguments,
                ..
            } => {
                flush(&mut text, out);
                let arguments = match arguments {
                    Value::String(raw) => raw.clone(),
                    other => other.to_string(),
                };
                out.push(json!({"type": "function_call", "call_id": id, "name": name, "arguments": arguments}));
            }
            ContentBlock::Image { .. } | ContentBlock::ToolResult { .. } => {}
        }
    }
    flush(&mut text, out);
}

// ---- stream ---------------------------------------------------------------------------------

#[derive(Deserialize)]
struct WireEvent {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    output_index: Option<u32>,
    #[serde(default)]
    item_id: Option<String>,
    #[serde(default)]
    item: Option<Value>,
    #[serde(default)]
    delta: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
    #[serde(default)]
    response: Option<Value>,
    #[serde(default)]
    error: Option<Value>,
    #[serde(default)]
    code: Option<Value>,
    #[serde(default)]
    message: Option<String>,
}

/// The Responses stream state machine.
///
/// Each output item becomes one canonical block, numbered in the order items appear. Events
/// name their item by `item_id` (or, for item events, `item.id`), and OpenAI also sends
/// `output_index`; compatible servers (llama.cpp) send only the id, so either is accepted.
#[derive(Debug, Default)]
pub struct ResponsesStreamState {
    by_id: HashMap<String, u32>,
    by_output: HashMap<u32, u32>,
    next_index: u32,
    /// Function-call blocks whose arguments have arrived.
    args_seen: HashMap<u32, bool>,
    saw_call: bool,
    refused: bool,
}

fn usage_of(response: &Value) -> Option<Usage> {
    let u = response.get("usage")?;
    let n = |p: &str| u.pointer(p).and_then(Value::as_u64).unwrap_or(0);
    let cached = n("/input_tokens_details/cached_tokens");
    Some(Usage {
        input: n("/input_tokens").saturating_sub(cached),
        output: n("/output_tokens"),
        cache_read: cached,
        cache_write: 0,
    })
}

fn api_error(error: &Value) -> LlmError {
    let text = |k: &str| {
        error.get(k).filter(|v| !v.is_null()).map(|v| {
            v.as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| v.to_string())
        })
    };
    LlmError::Api {
        kind: text("code")
            .or_else(|| text("type"))
            .unwrap_or_else(|| "error".into()),
        message: text("message").unwrap_or_default(),
    }
}

impl ResponsesStreamState {
    /// The block for the item an event names, allocating one for a new item.
    fn block(
        &mut self,
        item_id: Option<&str>,
        output_index: Option<u32>,
        kind: &str,
    ) -> Result<u32, LlmError> {
        let known = item_id
            .and_then(|id| self.by_id.get(id))
            .or_else(|| output_index.and_then(|i| self.by_output.get(&i)))
            .copied();
        if let Some(index) = known {
            return Ok(index);
        }
        if item_id.is_none() && output_index.is_none() {
            return Err(LlmError::decode(format!(
                "{kind} names no item (no item_id or output_index)"
            )));
        }
        let index = self.next_index;
        self.next_index += 1;
        if let Some(id) = item_id {
            self.by_id.insert(id.to_string(), index);
        }
        if let Some(i) = output_index {
            self.by_output.insert(i, index);
        }
        Ok(index)
    }

    fn event_block(&mut self, ev: &WireEvent) -> Result<u32, LlmError> {
        let item_id = ev
            .item_id
            .as_deref()
            .or_else(|| {
                ev.item
                    .as_ref()
                    .and_then(|i| i.get("id"))
                    .and_then(Value::as_str)
            })
            .map(str::to_owned);
        self.block(item_id.as_deref(), ev.output_index, &ev.kind)
    }

    /// Emits `args` as the call's arguments unless they already arrived.
    fn arguments_once(&mut self, index: u32, args: Option<&str>, out: &mut Vec<StreamEvent>) {
        let seen = self.args_seen.entry(index).or_insert(false);
        if let Some(args) = args.filter(|a| !a.is_empty() && !*seen) {
            *seen = true;
            out.push(StreamEvent::ToolCallDelta {
                index,
                arguments_fragment: args.to_string(),
            });
        }
    }
}

impl StreamState for ResponsesStreamState {
    fn on_sse(
        &mut self,
        event: SseEventRef<'_>,
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), LlmError> {
        let ev: WireEvent = serde_json::from_str(event.data).map_err(|e| {
            LlmError::decode(format!(
                "invalid JSON in Responses event ({e}): {}",
                event.data
            ))
        })?;
        match ev.kind.as_str() {
            "response.output_item.added" => {
                let index = self.event_block(&ev)?;
                let item = ev.item.as_ref().unwrap_or(&Value::Null);
                if item.get("type").and_then(Value::as_str) == Some("function_call") {
                    let field = |k: &str| item.get(k).and_then(Value::as_str).unwrap_or("");
                    let (call_id, name) = (field("call_id"), field("name"));
                    if call_id.is_empty() || name.is_empty() {
                        return Err(LlmError::decode(format!(
                            "function_call item {} has no call_id or name",
                            field("id")
                        )));
                    }
                    out.push(StreamEvent::ToolCallStart {
                        index,
                        id: call_id.to_string(),
                        name: name.to_string(),
                        meta: None,
                    });
                    self.saw_call = true;
                    let args = item.get("arguments").and_then(Value::as_str);
                    self.arguments_once(index, args, out);
                }
            }
            "response.output_text.delta" | "response.refusal.delta" => {
                if ev.kind == "response.refusal.delta" {
                    self.refused = true;
                }
                let index = self.event_block(&ev)?;
                if let Some(text) = ev.delta.filter(|d| !d.is_empty()) {
                    out.push(StreamEvent::TextDelta { index, text });
                }
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                let index = self.event_block(&ev)?;
                if let Some(text) = ev.delta.filter(|d| !d.is_empty()) {
                    out.push(StreamEvent::ReasoningDelta { index, text });
                }
            }
            "response.function_call_arguments.delta" => {
                let index = self.event_block(&ev)?;
                if !self.args_seen.contains_key(&index) {
                    return Err(LlmError::decode(
                        "function call arguments for an item that never started",
                    ));
                }
                if let Some(delta) = ev.delta.filter(|d| !d.is_empty()) {
                    self.args_seen.insert(index, true);
                    out.push(StreamEvent::ToolCallDelta {
                        index,
                        arguments_fragment: delta,
                    });
                }
            }
            "response.function_call_arguments.done" => {
                // The complete arguments again: used only when no delta carried them.
                let index = self.event_block(&ev)?;
                self.arguments_once(index, ev.arguments.as_deref(), out);
            }
            "response.output_item.done" => {
                let index = self.event_block(&ev)?;
                let item = ev.item.unwrap_or(Value::Null);
                match item.get("type").and_then(Value::as_str) {
                    Some("reasoning") => out.push(StreamEvent::ReasoningDone {
                        index,
                        meta: Some(ProviderMeta::new(META_PROVIDER, item)),
                    }),
                    Some("function_call") => {
                        let args = item.get("arguments").and_then(Value::as_str);
                        self.arguments_once(index, args, out);
                    }
                    _ => {}
                }
            }
            "response.completed" => {
                let response = ev.response.unwrap_or(Value::Null);
                if let Some(usage) = usage_of(&response) {
                    out.push(StreamEvent::Usage(usage));
                }
                out.push(StreamEvent::Finish(if self.refused {
                    FinishReason::Refusal
                } else if self.saw_call {
                    FinishReason::ToolUse
                } else {
                    FinishReason::EndTurn
                }));
            }
            "response.incomplete" => {
                let response = ev.response.unwrap_or(Value::Null);
                if let Some(usage) = usage_of(&response) {
                    out.push(StreamEvent::Usage(usage));
                }
                let reason = response
                    .pointer("/incomplete_details/reason")
                    .and_then(Value::as_str)
                    .unwrap_or("unknown");
                out.push(StreamEvent::Finish(match reason {
                    "max_output_tokens" => FinishReason::MaxTokens,
                    "content_filter" => FinishReason::Refusal,
                    other => FinishReason::Other(other.to_string()),
                }));
            }
            "response.failed" => {
                let response = ev.response.unwrap_or(Value::Null);
                return Err(api_error(response.get("error").unwrap_or(&Value::Null)));
            }
            "error" => {
                // Either {"type":"error","error":{...}} or the fields at the top level.
                return Err(match &ev.error {
                    Some(e) => api_error(e),
                    None => LlmError::Api {
                        kind: ev
                            .code
                            .map(|c| {
                                c.as_str()
                                    .map(str::to_owned)
                                    .unwrap_or_else(|| c.to_string())
                            })
                            .unwrap_or_else(|| "error".into()),
                        message: ev.message.unwrap_or_default(),
                    },
                });
            }
            // created, in_progress, content parts, built-in tool events, and anything new.
            _ => {}
        }
        Ok(())
    }

    fn on_end(&mut self, _out: &mut Vec<StreamEvent>) -> Result<(), LlmError> {
        // Without response.completed / incomplete the response was cut short.
        Ok(())
    }
}

// ---- HTTP -----------------------------------------------------------------------------------

/// An OpenAI Responses endpoint.
pub struct OpenAiResponses {
    endpoint: Endpoint,
    api_key: Option<String>,
}

impl OpenAiResponses {
    /// `api_key: None` sends no `Authorization` header (local servers).
    pub fn new(api_key: Option<String>) -> Result<Self, LlmError> {
        Ok(Self {
            endpoint: Endpoint::new(
                Protocol::OpenaiResponses,
                "openai",
                Protocol::OpenaiResponses.default_base_url(),
            )?,
            api_key,
        })
    }

    endpoint_builders!();
}

#[async_trait::async_trait]
impl Provider for OpenAiResponses {
    fn name(&self) -> &str {
        &self.endpoint.name
    }

    async fn stream(&self, req: &ChatRequest) -> Result<EventStream, LlmError> {
        let mut request = self
            .endpoint
            .post(format!("{}/responses", self.endpoint.base_url))?
            .header("accept", "text/event-stream")
            .json(&to_wire(req, &self.endpoint.caps));
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        self.endpoint
            .send(request, Box::new(ResponsesStreamState::default()))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(events: &[&str]) -> Result<crate::builder::Completion, LlmError> {
        crate::protocol::test_support::complete(&mut ResponsesStreamState::default(), events)
    }

    #[test]
    fn incomplete_max_output_tokens_is_max_tokens() {
        let c = run(&[
            r#"{"type":"response.output_text.delta","output_index":0,"item_id":"m","delta":"hel"}"#,
            r#"{"type":"response.incomplete","response":{"incomplete_details":{"reason":"max_output_tokens"},"usage":{"input_tokens":5,"output_tokens":3}}}"#,
        ])
        .unwrap();
        assert_eq!(c.finish, FinishReason::MaxTokens);
        assert_eq!(c.usage.output, 3);
    }

    #[test]
    fn items_named_only_by_id_as_llama_cpp_sends_them() {
        let c = run(&[
            r#"{"type":"response.output_item.added","item":{"id":"msg_1","type":"message","content":[],"role":"assistant"}}"#,
            r#"{"type":"response.output_text.delta","item_id":"msg_1","delta":"po"}"#,
            r#"{"type":"response.output_text.delta","item_id":"msg_1","delta":"ng"}"#,
            r#"{"type":"response.output_item.added","item":{"id":"fc_1","type":"function_call","call_id":"call_1","name":"f","arguments":""}}"#,
            r#"{"type":"response.function_call_arguments.delta","item_id":"fc_1","delta":"{}"}"#,
            r#"{"type":"response.completed","response":{"usage":{"input_tokens":34,"output_tokens":2,"input_tokens_details":{"cached_tokens":5}}}}"#,
        ])
        .unwrap();
        assert_eq!(c.message.text(), "pong");
        assert_eq!(c.message.tool_calls().count(), 1);
        assert_eq!(
            c.usage,
            Usage {
                input: 29,
                output: 2,
                cache_read: 5,
                cache_write: 0
            }
        );
    }

    #[test]
    fn an_event_naming_no_item_is_a_decode_error() {
        assert!(matches!(
            run(&[r#"{"type":"response.output_text.delta","delta":"x"}"#]),
            Err(LlmError::Decode(_))
        ));
    }

    #[test]
    fn unknown_event_types_are_ignored() {
        let c = run(&[
            r#"{"type":"response.web_search_call.searching","output_index":0,"item_id":"ws"}"#,
            r#"{"type":"response.brand_new","x":1}"#,
            r#"{"type":"response.completed","response":{}}"#,
        ])
        .unwrap();
        assert_eq!(c.finish, FinishReason::EndTurn);
    }

    #[test]
    fn arguments_from_done_when_no_delta_came() {
        let c = run(&[
            r#"{"type":"response.output_item.added","output_index":0,"item":{"type":"function_call","id":"fc_1","call_id":"call_1","name":"f","arguments":""}}"#,
            r#"{"type":"response.function_call_arguments.done","output_index":0,"item_id":"fc_1","arguments":"{\"a\":1}"}"#,
            r#"{"type":"response.output_item.done","output_index":0,"item":{"type":"function_call","id":"fc_1","call_id":"call_1","name":"f","arguments":"{\"a\":1}"}}"#,
            r#"{"type":"response.completed","response":{}}"#,
        ])
        .unwrap();
        assert_eq!(c.finish, FinishReason::ToolUse);
        assert_eq!(
            c.message.tool_calls().next().unwrap().arguments,
            &json!({"a": 1})
        );
    }

    #[test]
    fn to_wire_shape() {
        let req = ChatRequest {
            model: "gpt-5".into(),
            system: Some("sys".into()),
            messages: vec![crate::types::Message::user_text("hi")],
            tools: vec![crate::types::ToolSpec {
                name: "f".into(),
                description: "d".into(),
                input_schema: json!({"type": "object"}),
            }],
            max_tokens: 300,
            temperature: None,
            ..ChatRequest::default()
        };
        let wire = to_wire(&req, &Capabilities::of(Protocol::OpenaiResponses));
        assert_eq!(wire["instructions"], "sys");
        assert_eq!(wire["store"], false);
        assert_eq!(wire["include"], json!(["reasoning.encrypted_content"]));
        assert_eq!(wire["max_output_tokens"], 300);
        assert_eq!(
            wire["tools"][0],
            json!({"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"}, "strict": false})
        );
        assert_eq!(
            wire["input"],
            json!([{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}])
        );
        assert!(wire.get("temperature").is_none());
    }
}
