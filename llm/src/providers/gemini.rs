//! Gemini GenerateContent (`streamGenerateContent?alt=sse`): `to_wire`, the stream state, and the
//! HTTP provider.
//!
//! Gemini has no tool-call ids on the wire (older models) and names function responses by
//! function name, so `to_wire` first maps every canonical call id to its name. Thought
//! signatures ride on parts: on a `functionCall` part they are kept in the tool call's meta; on
//! a text part they become an empty reasoning block right after the text, and `to_wire` puts
//! them back on that text part. A function call with no Gemini signature (one that another
//! provider made) is sent with Google's documented validator bypass, so a conversation can move
//! to Gemini mid tool chain.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::capability::{Capabilities, SchemaDialect, image_omitted};
use crate::error::LlmError;
use crate::http::{Endpoint, endpoint_builders};
use crate::protocol::{Protocol, StreamState};
use crate::provider::{EventStream, Provider};
use crate::schema::legacy_schema;
use crate::sse::SseEventRef;
use crate::stream::{FinishReason, StreamEvent, Usage};
use crate::types::{ChatRequest, ContentBlock, Message, ProviderMeta, Role};

/// The tag on the provider-specific state this adapter returns (see [`Protocol::meta_provider`]).
pub const META_PROVIDER: &str = Protocol::Gemini.meta_provider();
/// Google's documented placeholder for a function call that Gemini did not produce.
pub const SIGNATURE_BYPASS: &str = "skip_thought_signature_validator";

/// The request body for `POST {base}/models/{model}:streamGenerateContent?alt=sse`.
pub fn to_wire(req: &ChatRequest, caps: &Capabilities) -> Result<Value, LlmError> {
    let names: HashMap<&str, &str> = req
        .messages
        .iter()
        .flat_map(Message::tool_calls)
        .map(|c| (c.id, c.name))
        .collect();
    let mut contents = Vec::new();
    for m in &req.messages {
        let parts = parts_to_wire(m, &names, caps)?;
        if parts.is_empty() {
            continue;
        }
        let role = match m.role {
            Role::User => "user",
            Role::Assistant => "model",
        };
        contents.push(json!({"role": role, "parts": parts}));
    }
    let mut body = Map::new();
    body.insert("contents".into(), Value::Array(contents));
    if let Some(system) = req.system.as_deref().filter(|s| !s.is_empty()) {
        body.insert(
            "systemInstruction".into(),
            json!({"parts": [{"text": system}]}),
        );
    }
    if !req.tools.is_empty() {
        let mut declarations = Vec::new();
        for t in &req.tools {
            let mut d = json!({"name": t.name, "description": t.description});
            match caps.schema {
                SchemaDialect::FullJsonSchema => {
                    d["parametersJsonSchema"] = t.input_schema.clone();
                }
                SchemaDialect::LegacySubset => {
                    d["parameters"] = legacy_schema(&t.input_schema).map_err(|e| {
                        LlmError::Config(format!(
                            "tool '{}' cannot be sent to this Gemini target: its schema at {}",
                            t.name, e
                        ))
                    })?;
                }
            }
            declarations.push(d);
        }
        body.insert(
            "tools".into(),
            json!([{"functionDeclarations": declarations}]),
        );
    }
    let mut generation = json!({"maxOutputTokens": req.max_tokens});
    if let (Some(t), true) = (req.temperature, caps.temperature) {
        generation["temperature"] = json!(t);
    }
    body.insert("generationConfig".into(), generation);
    Ok(Value::Object(body))
}

fn parts_to_wire(
    m: &Message,
    names: &HashMap<&str, &str>,
    caps: &Capabilities,
) -> Result<Vec<Value>, LlmError> {
    let mut parts: Vec<Value> = Vec::new();
    for block in &m.content {
        match block {
            ContentBlock::Text { text } if text.is_empty() => {}
            ContentBlock::Text { text } => parts.push(json!({"text": text})),
            ContentBlock::Image { media_type, data } => {
                if caps.images {
                    parts.push(json!({"inlineData": {"mimeType": media_type, "data": data}}));
                } else {
                    parts.push(json!({"text": image_omitted(media_type, data)}));
                }
            }
            ContentBlock::Reasoning { meta, .. } => {
                // Thought summaries are not replayed; a signature is, on the part it came with.
                let Some(signature) = ProviderMeta::for_provider(meta.as_ref(), META_PROVIDER)
                    .and_then(|d| d.get("thoughtSignature"))
                else {
                    continue;
                };
                match parts.last_mut() {
                    Some(last)
                        if last.get("text").is_some() && last.get("thoughtSignature").is_none() =>
                    {
                        last["thoughtSignature"] = signature.clone();
                    }
                    _ => parts.push(json!({"text": "", "thoughtSignature": signature})),
                }
            }
            ContentBlock::ToolCall {
                name,
                arguments,
                meta,
                ..
            } => {
                let own = ProviderMeta::for_provider(meta.as_ref(), META_PROVIDER);
                let mut call = json!({"name": name, "args": if arguments.is_object() { arguments.clone() } else { json!({}) }});
                if let Some(wire_id) = own.and_then(|d| d.get("id")) {
                    call["id"] = wire_id.clone();
                }
                let signature = own
                    .and_then(|d| d.get("thoughtSignature"))
                    .cloned()
                    .unwrap_or_else(|| json!(SIGNATURE_BYPASS));
                parts.push(json!({"functionCall": call, "thoughtSignature": signature}));
            }
            ContentBlock::ToolResult {
                call_id,
                content,
                is_error,
            } => {
                let name = names.get(call_id.as_str()).ok_or_else(|| {
                    LlmError::Config(format!(
                        "tool result '{call_id}' answers no tool call in the transcript; Gemini needs the function name"
                    ))
                })?;
                let key = if *is_error { "error" } else { "result" };
                parts.push(json!({"functionResponse": {"name": name, "response": {key: content}}}));
            }
        }
    }
    Ok(parts)
}

// ---- stream ---------------------------------------------------------------------------------

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    candidates: Vec<Candidate>,
    #[serde(default, rename = "usageMetadata")]
    usage: Option<WireUsage>,
    #[serde(default, rename = "promptFeedback")]
    prompt_feedback: Option<PromptFeedback>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Candidate {
    #[serde(default)]
    index: u32,
    #[serde(default)]
    content: Option<Content>,
    #[serde(default, rename = "finishReason")]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Content {
    #[serde(default)]
    parts: Vec<Part>,
}

#[derive(Deserialize)]
struct Part {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    thought: bool,
    #[serde(default, rename = "thoughtSignature")]
    thought_signature: Option<String>,
    #[serde(default, rename = "functionCall")]
    function_call: Option<FunctionCall>,
}

#[derive(Deserialize)]
struct FunctionCall {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    args: Option<Value>,
    #[serde(default, rename = "partialArgs")]
    partial_args: Vec<PartialArg>,
    #[serde(default, rename = "willContinue")]
    will_continue: bool,
}

#[derive(Deserialize)]
struct PartialArg {
    #[serde(rename = "jsonPath")]
    json_path: String,
    #[serde(default, rename = "stringValue")]
    string_value: Option<String>,
    #[serde(default, rename = "numberValue")]
    number_value: Option<f64>,
    #[serde(default, rename = "boolValue")]
    bool_value: Option<bool>,
    #[serde(default, rename = "nullValue")]
    null_value: Option<Value>,
}

#[derive(Deserialize)]
struct PromptFeedback {
    #[serde(default, rename = "blockReason")]
    block_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default, rename = "promptTokenCount")]
    prompt: u64,
    #[serde(default, rename = "candidatesTokenCount")]
    candidates: u64,
    #[serde(default, rename = "thoughtsTokenCount")]
    thoughts: u64,
    #[serde(default, rename = "cachedContentTokenCount")]
    cached: u64,
}

impl WireUsage {
    /// Cumulative per chunk. Cached tokens are inside `promptTokenCount`; thoughts are billed as
    /// output but counted apart from `candidatesTokenCount`.
    fn canonical(&self) -> Usage {
        Usage {
            input: self.prompt.saturating_sub(self.cached),
            output: self.candidates + self.thoughts,
            cache_read: self.cached,
            cache_write: 0,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    Text,
    Thought,
}

/// A function call whose arguments arrive in pieces (`willContinue`).
#[derive(Debug)]
struct StreamingCall {
    index: u32,
    args: Value,
}

/// The Gemini stream state machine.
#[derive(Debug, Default)]
pub struct GeminiStreamState {
    next_index: u32,
    open: Option<(Open, u32)>,
    call: Option<StreamingCall>,
    pending: Option<String>,
    blocked: bool,
    saw_call: bool,
}

fn new_call_id() -> String {
    format!("call_{}", uuid::Uuid::new_v4().simple())
}

impl GeminiStreamState {
    fn alloc(&mut self) -> u32 {
        let i = self.next_index;
        self.next_index += 1;
        i
    }

    fn block(&mut self, kind: Open) -> u32 {
        match self.open {
            Some((k, i)) if k == kind => i,
            _ => {
                let i = self.alloc();
                self.open = Some((kind, i));
                i
            }
        }
    }

    fn end_call(&mut self, out: &mut Vec<StreamEvent>) {
        if let Some(call) = self.call.take() {
            out.push(StreamEvent::ToolCallDelta {
                index: call.index,
                arguments_fragment: call.args.to_string(),
            });
        }
    }

    fn on_part(&mut self, part: Part, out: &mut Vec<StreamEvent>) -> Result<(), LlmError> {
        if let Some(fc) = part.function_call {
            return self.on_function_call(fc, part.thought_signature, out);
        }
        let Some(text) = part.text else {
            // inlineData, executableCode and other parts are not modelled.
            return Ok(());
        };
        let kind = if part.thought {
            Open::Thought
        } else {
            Open::Text
        };
        if !text.is_empty() {
            let index = self.block(kind);
            out.push(match kind {
                Open::Text => StreamEvent::TextDelta { index, text },
                Open::Thought => StreamEvent::ReasoningDelta { index, text },
            });
        }
        if let Some(signature) = part.thought_signature {
            let meta = Some(ProviderMeta::new(
                META_PROVIDER,
                json!({"thoughtSignature": signature}),
            ));
            match (kind, self.open) {
                // A signed thought closes its own reasoning block.
                (Open::Thought, Some((Open::Thought, index))) => {
                    out.push(StreamEvent::ReasoningDone { index, meta });
                }
                // A signed text part: an empty reasoning block right after it carries the
                // signature, and to_wire puts it back on that text part.
                _ => {
                    let index = self.alloc();
                    out.push(StreamEvent::ReasoningDone { index, meta });
                }
            }
            self.open = None;
        }
        Ok(())
    }

    fn on_function_call(
        &mut self,
        fc: FunctionCall,
        signature: Option<String>,
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), LlmError> {
        self.open = None;
        match (&mut self.call, fc.name) {
            // Pieces of the call in progress; an empty functionCall ends it.
            (Some(call), None) => {
                for piece in &fc.partial_args {
                    set_path(&mut call.args, piece)?;
                }
                if let Some(Value::Object(args)) = fc.args
                    && let Value::Object(acc) = &mut call.args
                {
                    acc.extend(args);
                }
                if fc.partial_args.is_empty() && !fc.will_continue {
                    self.end_call(out);
                }
            }
            (None, None) => {
                return Err(LlmError::decode(
                    "a Gemini functionCall part continues a call that never started",
                ));
            }
            (_, Some(name)) => {
                self.end_call(out);
                let index = self.alloc();
                self.saw_call = true;
                let mut meta = Map::new();
                if let Some(s) = signature {
                    meta.insert("thoughtSignature".into(), json!(s));
                }
                if let Some(id) = &fc.id {
                    meta.insert("id".into(), json!(id));
                }
                out.push(StreamEvent::ToolCallStart {
                    index,
                    id: fc
                        .id
                        .clone()
                        .filter(|id| !id.is_empty())
                        .unwrap_or_else(new_call_id),
                    name,
                    meta: (!meta.is_empty())
                        .then(|| ProviderMeta::new(META_PROVIDER, Value::Object(meta))),
                });
                let mut args = fc.args.unwrap_or_else(|| json!({}));
                if fc.will_continue {
                    let mut call = StreamingCall { index, args };
                    for piece in &fc.partial_args {
                        set_path(&mut call.args, piece)?;
                    }
                    self.call = Some(call);
                } else {
                    for piece in &fc.partial_args {
                        set_path(&mut args, piece)?;
                    }
                    out.push(StreamEvent::ToolCallDelta {
                        index,
                        arguments_fragment: args.to_string(),
                    });
                }
            }
        }
        Ok(())
    }
}

/// Applies one `partialArgs` piece: `$.a.b` or `$.a[0]`; string values append (they continue
/// across pieces while `willContinue`), other values replace.
fn set_path(root: &mut Value, piece: &PartialArg) -> Result<(), LlmError> {
    let path = piece
        .json_path
        .strip_prefix('$')
        .ok_or_else(|| LlmError::decode(format!("unsupported jsonPath '{}'", piece.json_path)))?;
    let mut target = root;
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            let key = &after[..end];
            if !target.is_object() {
                *target = json!({});
            }
            target = target
                .as_object_mut()
                .map(|o| o.entry(key.to_string()).or_insert(Value::Null))
                .ok_or_else(|| LlmError::decode("jsonPath walks into a non-object"))?;
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix('[') {
            let end = after.find(']').ok_or_else(|| {
                LlmError::decode(format!("unsupported jsonPath '{}'", piece.json_path))
            })?;
            let i: usize = after[..end].parse().map_err(|_| {
                LlmError::decode(format!("unsupported jsonPath '{}'", piece.json_path))
            })?;
            if !target.is_array() {
                *target = json!([]);
            }
            let arr = target
                .as_array_mut()
                .ok_or_else(|| LlmError::decode("jsonPath walks into a non-array"))?;
            if i > 10_000 {
                return Err(LlmError::decode("jsonPath index out of range"));
            }
            while arr.len() <= i {
                arr.push(Value::Null);
            }
            target = &mut arr[i];
            rest = &after[end + 1..];
        } else {
            return Err(LlmError::decode(format!(
                "unsupported jsonPath '{}'",
                piece.json_path
            )));
        }
    }
    if let Some(s) = &piece.string_value {
        match target {
            Value::String(acc) => acc.push_str(s),
            other => *other = json!(s),
        }
    } else if let Some(n) = piece.number_value {
        *target = json!(n);
    } else if let Some(b) = piece.bool_value {
        *target = json!(b);
    } else if piece.null_value.is_some() {
        *target = Value::Null;
    }
    Ok(())
}

fn map_finish(reason: &str, saw_call: bool) -> FinishReason {
    match reason {
        "STOP" if saw_call => FinishReason::ToolUse,
        "STOP" => FinishReason::EndTurn,
        "MAX_TOKENS" => FinishReason::MaxTokens,
        "SAFETY"
        | "RECITATION"
        | "BLOCKLIST"
        | "PROHIBITED_CONTENT"
        | "SPII"
        | "IMAGE_SAFETY"
        | "IMAGE_PROHIBITED_CONTENT"
        | "IMAGE_RECITATION" => FinishReason::Refusal,
        other => FinishReason::Other(other.to_string()),
    }
}

impl StreamState for GeminiStreamState {
    fn on_sse(
        &mut self,
        event: SseEventRef<'_>,
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), LlmError> {
        let chunk: Chunk = serde_json::from_str(event.data).map_err(|e| {
            LlmError::decode(format!(
                "invalid JSON in Gemini chunk ({e}): {}",
                event.data
            ))
        })?;
        if let Some(error) = chunk.error {
            let text = |k: &str| {
                error.get(k).map(|v| {
                    v.as_str()
                        .map(str::to_owned)
                        .unwrap_or_else(|| v.to_string())
                })
            };
            return Err(LlmError::Api {
                kind: text("status")
                    .or_else(|| text("code"))
                    .unwrap_or_else(|| "error".into()),
                message: text("message").unwrap_or_default(),
            });
        }
        if chunk.prompt_feedback.and_then(|f| f.block_reason).is_some() {
            self.blocked = true;
        }
        for candidate in chunk.candidates {
            if candidate.index != 0 {
                continue;
            }
            for part in candidate.content.map(|c| c.parts).unwrap_or_default() {
                self.on_part(part, out)?;
            }
            // Held, not acted on: old API versions put STOP on chunks that are not the last.
            if let Some(reason) = candidate.finish_reason {
                self.pending = Some(reason);
            }
        }
        if let Some(usage) = chunk.usage {
            out.push(StreamEvent::Usage(usage.canonical()));
        }
        Ok(())
    }

    fn on_end(&mut self, out: &mut Vec<StreamEvent>) -> Result<(), LlmError> {
        self.end_call(out);
        if self.blocked {
            out.push(StreamEvent::Finish(FinishReason::Refusal));
        } else if let Some(reason) = self.pending.take() {
            out.push(StreamEvent::Finish(map_finish(&reason, self.saw_call)));
        }
        Ok(())
    }
}

// ---- HTTP -----------------------------------------------------------------------------------

/// A Gemini GenerateContent endpoint.
pub struct Gemini {
    endpoint: Endpoint,
    api_key: String,
}

impl Gemini {
    pub fn new(api_key: impl Into<String>) -> Result<Self, LlmError> {
        Ok(Self {
            endpoint: Endpoint::new(
                Protocol::Gemini,
                "gemini",
                Protocol::Gemini.default_base_url(),
            )?,
            api_key: api_key.into(),
        })
    }

    endpoint_builders!();
}

#[async_trait::async_trait]
impl Provider for Gemini {
    fn name(&self) -> &str {
        &self.endpoint.name
    }

    async fn stream(&self, req: &ChatRequest) -> Result<EventStream, LlmError> {
        let body = to_wire(req, &self.endpoint.caps)?;
        let request = self
            .endpoint
            .post(format!(
                "{}/models/{}:streamGenerateContent?alt=sse",
                self.endpoint.base_url, req.model
            ))?
            .header("x-goog-api-key", &self.api_key)
            .header("accept", "text/event-stream")
            .json(&body);
        self.endpoint
            .send(request, Box::new(GeminiStreamState::default()))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(chunks: &[&str]) -> Result<crate::builder::Completion, LlmError> {
        crate::protocol::test_support::complete(&mut GeminiStreamState::default(), chunks)
    }

    #[test]
    fn stop_with_a_call_is_tool_use_and_parallel_calls_get_distinct_ids() {
        let c = run(&[r#"{"candidates":[{"content":{"parts":[{"functionCall":{"name":"w","args":{"city":"Oslo"}}},{"functionCall":{"name":"w","args":{"city":"Lima"}}}]},"finishReason":"STOP"}]}"#]).unwrap();
        assert_eq!(c.finish, FinishReason::ToolUse);
        let ids: Vec<&str> = c.message.tool_calls().map(|c| c.id).collect();
        assert_eq!(ids.len(), 2);
        assert_ne!(ids[0], ids[1]);
    }

    #[test]
    fn finish_reasons() {
        for (wire, reason) in [
            ("STOP", FinishReason::EndTurn),
            ("MAX_TOKENS", FinishReason::MaxTokens),
            ("SAFETY", FinishReason::Refusal),
            ("RECITATION", FinishReason::Refusal),
            (
                "MALFORMED_FUNCTION_CALL",
                FinishReason::Other("MALFORMED_FUNCTION_CALL".into()),
            ),
        ] {
            let chunk = format!(
                r#"{{"candidates":[{{"content":{{"parts":[{{"text":"x"}}]}},"finishReason":"{wire}"}}]}}"#
            );
            assert_eq!(run(&[&chunk]).unwrap().finish, reason, "{wire}");
        }
    }

    #[test]
    fn a_non_final_stop_does_not_end_the_response() {
        let c = run(&[
            r#"{"candidates":[{"content":{"parts":[{"text":"a"}]},"finishReason":"STOP"}]}"#,
            r#"{"candidates":[{"content":{"parts":[{"text":"b"}]},"finishReason":"STOP"}]}"#,
        ])
        .unwrap();
        assert_eq!(c.message.text(), "ab");
    }

    #[test]
    fn a_blocked_prompt_is_a_refusal() {
        let c = run(&[r#"{"promptFeedback":{"blockReason":"SAFETY"}}"#]).unwrap();
        assert_eq!(c.finish, FinishReason::Refusal);
    }

    #[test]
    fn no_finish_reason_is_unexpected_eof() {
        assert!(matches!(
            run(&[r#"{"candidates":[{"content":{"parts":[{"text":"a"}]}}]}"#]),
            Err(LlmError::UnexpectedEof)
        ));
    }

    #[test]
    fn an_error_chunk_is_an_api_error() {
        let e = run(&[r#"{"error":{"code":429,"message":"Resource exhausted","status":"RESOURCE_EXHAUSTED"}}"#]).unwrap_err();
        assert!(
            matches!(&e, LlmError::Api { kind, .. } if kind == "RESOURCE_EXHAUSTED"),
            "{e:?}"
        );
    }

    #[test]
    fn usage_subtracts_cached_and_adds_thoughts() {
        let c = run(&[r#"{"candidates":[{"content":{"parts":[{"text":"a"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":1000,"cachedContentTokenCount":600,"candidatesTokenCount":20,"thoughtsTokenCount":30}}"#]).unwrap();
        assert_eq!(
            c.usage,
            Usage {
                input: 400,
                output: 50,
                cache_read: 600,
                cache_write: 0
            }
        );
    }

    fn caps() -> Capabilities {
        Capabilities::of(Protocol::Gemini)
    }

    #[test]
    fn to_wire_maps_results_by_name_and_signs_foreign_calls() {
        let req = ChatRequest {
            model: "gemini-2.5-pro".into(),
            system: Some("sys".into()),
            messages: vec![
                Message::user_text("hi"),
                Message::new(
                    Role::Assistant,
                    vec![ContentBlock::ToolCall {
                        id: "toolu_1".into(),
                        name: "get_weather".into(),
                        arguments: json!({"city": "Oslo"}),
                        // Made by Anthropic: foreign meta is never forwarded.
                        meta: Some(ProviderMeta::new("anthropic", json!({"x": 1}))),
                    }],
                ),
                Message::new(
                    Role::User,
                    vec![ContentBlock::tool_result("toolu_1", "not found", true)],
                ),
            ],
            max_tokens: 100,
            ..ChatRequest::default()
        };
        let wire = to_wire(&req, &caps()).unwrap();
        assert_eq!(
            wire["contents"][1]["parts"][0],
            json!({"functionCall": {"name": "get_weather", "args": {"city": "Oslo"}}, "thoughtSignature": SIGNATURE_BYPASS})
        );
        assert_eq!(
            wire["contents"][2]["parts"][0],
            json!({"functionResponse": {"name": "get_weather", "response": {"error": "not found"}}})
        );
        assert_eq!(
            wire["systemInstruction"],
            json!({"parts": [{"text": "sys"}]})
        );
    }

    #[test]
    fn legacy_dialect_compiles_or_rejects_tool_schemas() {
        let mut req = ChatRequest {
            model: "m".into(),
            messages: vec![Message::user_text("hi")],
            tools: vec![crate::types::ToolSpec {
                name: "t".into(),
                description: "d".into(),
                input_schema: json!({"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]}),
            }],
            ..ChatRequest::default()
        };
        let legacy = caps().with_schema(SchemaDialect::LegacySubset);
        let wire = to_wire(&req, &legacy).unwrap();
        let decl = &wire["tools"][0]["functionDeclarations"][0];
        assert_eq!(decl["parameters"]["required"], json!(["title"]));
        assert!(decl.get("parametersJsonSchema").is_none());
        let full = to_wire(&req, &caps()).unwrap();
        assert!(
            full["tools"][0]["functionDeclarations"][0]
                .get("parametersJsonSchema")
                .is_some()
        );
        req.tools[0].input_schema =
            json!({"type": "object", "properties": {"id": {"type": ["string", "integer"]}}});
        let e = to_wire(&req, &legacy).unwrap_err().to_string();
        assert!(e.contains("$.properties.id.type"), "{e}");
        // The full dialect sends the union as written.
        assert!(to_wire(&req, &caps()).is_ok());
    }
}
