//! One scripted model server for every wire format anvil speaks: a wiremock server that answers
//! POSTs to the format's endpoint with SSE bodies — in a fixed order ([`ScriptedServer::in_order`])
//! or chosen from the request ([`ScriptedServer::answering`]) — and records every request body so
//! a test can assert on what was sent. [`wire`] builds the bodies in the shape of the recorded
//! fixtures.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// The four wire formats of anvil's provider adapters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireFormat {
    AnthropicMessages,
    OpenAiChat,
    OpenAiResponses,
    Gemini,
}

impl WireFormat {
    pub const ALL: [WireFormat; 4] = [
        WireFormat::AnthropicMessages,
        WireFormat::OpenAiChat,
        WireFormat::OpenAiResponses,
        WireFormat::Gemini,
    ];

    /// The provider `kind` naming this format in anvil's config.
    pub fn kind(self) -> &'static str {
        match self {
            WireFormat::AnthropicMessages => "anthropic",
            WireFormat::OpenAiChat => "openai-chat",
            WireFormat::OpenAiResponses => "openai-responses",
            WireFormat::Gemini => "gemini",
        }
    }

    /// The end of the path the format's requests go to (the base URL's path comes before it).
    fn path_regex(self) -> &'static str {
        match self {
            WireFormat::AnthropicMessages => "/messages$",
            WireFormat::OpenAiChat => "/chat/completions$",
            WireFormat::OpenAiResponses => "/responses$",
            WireFormat::Gemini => ":streamGenerateContent$",
        }
    }
}

/// One answer: an SSE body (or an error body with `status`), sent after `delay`, with
/// `headers` besides the content type (e.g. `retry-after`).
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub body: String,
    pub delay: Duration,
    pub headers: Vec<(String, String)>,
}

impl Answer {
    /// A 200 event stream.
    pub fn sse(body: impl Into<String>) -> Answer {
        Answer {
            status: 200,
            body: body.into(),
            delay: Duration::ZERO,
            headers: Vec::new(),
        }
    }

    /// An HTTP error with `body`.
    pub fn error(status: u16, body: impl Into<String>) -> Answer {
        Answer {
            status,
            body: body.into(),
            delay: Duration::ZERO,
            headers: Vec::new(),
        }
    }

    pub fn after(mut self, delay: Duration) -> Answer {
        self.delay = delay;
        self
    }

    /// The answer with header `name: value` too.
    pub fn header(mut self, name: &str, value: &str) -> Answer {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }
}

type Answerer = dyn Fn(&Value) -> Answer + Send + Sync;

struct Responder {
    answer: Box<Answerer>,
    requests: Arc<Mutex<Vec<Value>>>,
}

impl Respond for Responder {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        let answer = (self.answer)(&body);
        self.requests.lock().unwrap().push(body);
        let mut template = ResponseTemplate::new(answer.status).set_delay(answer.delay);
        for (name, value) in &answer.headers {
            template = template.insert_header(name.as_str(), value.as_str());
        }
        if answer.status == 200 {
            template
                .insert_header("content-type", "text/event-stream")
                .set_body_string(answer.body)
        } else {
            template.set_body_string(answer.body)
        }
    }
}

/// A model server speaking one [`WireFormat`]; stops when dropped. Derefs to the wiremock
/// server (`uri()`, `received_requests()`).
pub struct ScriptedServer {
    server: MockServer,
    requests: Arc<Mutex<Vec<Value>>>,
}

impl ScriptedServer {
    /// Answers requests with `bodies` in order; past the end, with a 400 "script exhausted".
    pub async fn in_order(format: WireFormat, bodies: Vec<String>) -> ScriptedServer {
        let next = AtomicUsize::new(0);
        Self::answering(format, move |_| {
            match bodies.get(next.fetch_add(1, Ordering::SeqCst)) {
                Some(body) => Answer::sse(body.clone()),
                None => Answer::error(400, "script exhausted"),
            }
        })
        .await
    }

    /// Answers each request with what `answer` makes of its JSON body.
    pub async fn answering(
        format: WireFormat,
        answer: impl Fn(&Value) -> Answer + Send + Sync + 'static,
    ) -> ScriptedServer {
        let server = MockServer::start().await;
        let requests = Arc::new(Mutex::new(Vec::new()));
        Mock::given(wiremock::matchers::method("POST"))
            .and(wiremock::matchers::path_regex(format.path_regex()))
            .respond_with(Responder {
                answer: Box::new(answer),
                requests: requests.clone(),
            })
            .mount(&server)
            .await;
        ScriptedServer { server, requests }
    }

    /// The JSON bodies of the requests answered so far, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.requests.lock().unwrap().clone()
    }
}

impl std::ops::Deref for ScriptedServer {
    type Target = MockServer;

    fn deref(&self) -> &MockServer {
        &self.server
    }
}

/// SSE bodies in each wire format, in the shape of the recorded fixtures.
pub mod wire {
    use serde_json::{Value, json};

    pub use anvil_llm::testing::anthropic_sse::Usage;

    use super::WireFormat;

    fn data_lines(events: &[Value]) -> String {
        events.iter().map(|e| format!("data: {e}\n\n")).collect()
    }

    /// Gemini's servers separate events with CRLF pairs.
    fn data_lines_crlf(events: &[Value]) -> String {
        events
            .iter()
            .map(|e| format!("data: {e}\r\n\r\n"))
            .collect()
    }

    fn named_events(events: &[Value]) -> String {
        events
            .iter()
            .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or("")))
            .collect()
    }

    /// A message with one text block that ends the turn.
    pub fn text(format: WireFormat, text: &str, usage: Usage) -> String {
        match format {
            WireFormat::AnthropicMessages => anvil_llm::testing::anthropic_sse::text(text, usage),
            WireFormat::OpenAiChat => {
                let mut body = data_lines(&[
                    json!({"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "model": "scripted", "choices": [{"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": null}]}),
                    json!({"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "model": "scripted", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
                    chat_usage(usage),
                ]);
                body.push_str("data: [DONE]\n\n");
                body
            }
            WireFormat::OpenAiResponses => {
                let item = json!({"type": "message", "id": "msg_scripted", "status": "completed", "role": "assistant", "content": [{"type": "output_text", "text": text, "annotations": []}]});
                named_events(&[
                    responses_created(),
                    json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "message", "id": "msg_scripted", "status": "in_progress", "role": "assistant", "content": []}}),
                    json!({"type": "response.content_part.added", "item_id": "msg_scripted", "output_index": 0, "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}),
                    json!({"type": "response.output_text.delta", "item_id": "msg_scripted", "output_index": 0, "content_index": 0, "delta": text}),
                    json!({"type": "response.output_text.done", "item_id": "msg_scripted", "output_index": 0, "content_index": 0, "text": text}),
                    json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
                    responses_completed(json!([item]), usage),
                ])
            }
            WireFormat::Gemini => data_lines_crlf(&[gemini_chunk(json!([{"text": text}]), usage)]),
        }
    }

    /// A message with one tool call (`id` is dropped where the format has none: Gemini).
    pub fn tool_call(
        format: WireFormat,
        id: &str,
        name: &str,
        input: &Value,
        usage: Usage,
    ) -> String {
        tool_calls(format, &[(id, name, input.clone())], usage)
    }

    /// A message with parallel tool calls `(id, name, input)`, in order.
    pub fn tool_calls(format: WireFormat, calls: &[(&str, &str, Value)], usage: Usage) -> String {
        match format {
            WireFormat::AnthropicMessages => {
                let mut events = vec![
                    json!({"type": "message_start", "message": {"id": "msg_scripted", "type": "message", "role": "assistant", "content": [], "usage": {"input_tokens": usage.input, "output_tokens": 1}}}),
                ];
                for (i, (id, name, input)) in calls.iter().enumerate() {
                    events.extend([
                        json!({"type": "content_block_start", "index": i, "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
                        json!({"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": input.to_string()}}),
                        json!({"type": "content_block_stop", "index": i}),
                    ]);
                }
                events.extend([
                    json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": usage.output}}),
                    json!({"type": "message_stop"}),
                ]);
                anvil_llm::testing::anthropic_sse::body(&events)
            }
            WireFormat::OpenAiChat => {
                let chunk = |delta: Value, finish: Value| json!({"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "model": "scripted", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
                let mut events = vec![chunk(
                    json!({"role": "assistant", "content": null}),
                    Value::Null,
                )];
                for (i, (id, name, input)) in calls.iter().enumerate() {
                    events.extend([
                        chunk(
                            json!({"tool_calls": [{"index": i, "id": id, "type": "function", "function": {"name": name, "arguments": ""}}]}),
                            Value::Null,
                        ),
                        chunk(
                            json!({"tool_calls": [{"index": i, "function": {"arguments": input.to_string()}}]}),
                            Value::Null,
                        ),
                    ]);
                }
                events.extend([chunk(json!({}), json!("tool_calls")), chat_usage(usage)]);
                let mut body = data_lines(&events);
                body.push_str("data: [DONE]\n\n");
                body
            }
            WireFormat::OpenAiResponses => {
                let mut events = vec![responses_created()];
                let mut items = Vec::new();
                for (i, (id, name, input)) in calls.iter().enumerate() {
                    let item_id = format!("fc_scripted_{i}");
                    let arguments = input.to_string();
                    let item = json!({"type": "function_call", "id": item_id, "call_id": id, "name": name, "arguments": arguments, "status": "completed"});
                    events.extend([
                        json!({"type": "response.output_item.added", "output_index": i, "item": {"type": "function_call", "id": item_id, "call_id": id, "name": name, "arguments": "", "status": "in_progress"}}),
                        json!({"type": "response.function_call_arguments.delta", "item_id": item_id, "output_index": i, "delta": arguments}),
                        json!({"type": "response.function_call_arguments.done", "item_id": item_id, "output_index": i, "arguments": arguments}),
                        json!({"type": "response.output_item.done", "output_index": i, "item": item}),
                    ]);
                    items.push(item);
                }
                events.push(responses_completed(Value::Array(items), usage));
                named_events(&events)
            }
            WireFormat::Gemini => {
                let parts: Vec<Value> = calls
                    .iter()
                    .map(|(_, name, input)| json!({"functionCall": {"name": name, "args": input}}))
                    .collect();
                data_lines_crlf(&[gemini_chunk(Value::Array(parts), usage)])
            }
        }
    }

    fn chat_usage(usage: Usage) -> Value {
        json!({"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "model": "scripted", "choices": [], "usage": {"prompt_tokens": usage.input, "completion_tokens": usage.output, "total_tokens": usage.input + usage.output}})
    }

    fn responses_created() -> Value {
        json!({"type": "response.created", "response": {"id": "resp_scripted", "object": "response", "status": "in_progress", "output": []}})
    }

    fn responses_completed(output: Value, usage: Usage) -> Value {
        json!({"type": "response.completed", "response": {"id": "resp_scripted", "object": "response", "status": "completed", "output": output, "usage": {"input_tokens": usage.input, "output_tokens": usage.output, "total_tokens": usage.input + usage.output}}})
    }

    fn gemini_chunk(parts: Value, usage: Usage) -> Value {
        json!({"candidates": [{"content": {"parts": parts, "role": "model"}, "finishReason": "STOP"}], "usageMetadata": {"promptTokenCount": usage.input, "candidatesTokenCount": usage.output, "totalTokenCount": usage.input + usage.output}, "modelVersion": "scripted"})
    }
}

#[cfg(test)]
mod tests {
    use anvil_llm::config::{Config, ConfigFile};
    use anvil_llm::registry::Registry;
    use anvil_llm::{ChatRequest, Message, collect};
    use serde_json::json;

    use super::wire::{self, Usage};
    use super::{ScriptedServer, WireFormat};

    const USAGE: Usage = Usage {
        input: 11,
        output: 4,
    };

    /// Each format's bodies decode through anvil's own adapter, reached by its config `kind`.
    #[tokio::test]
    async fn every_format_is_understood_by_its_adapter() {
        for format in WireFormat::ALL {
            let input = json!({"file_path": "a.txt"});
            let server = ScriptedServer::in_order(
                format,
                vec![
                    wire::tool_call(format, "call_1", "read_file", &input, USAGE),
                    wire::tool_calls(
                        format,
                        &[
                            ("call_2", "glob", json!({"pattern": "*.rs"})),
                            ("call_3", "grep", json!({"pattern": "fn"})),
                        ],
                        USAGE,
                    ),
                    wire::text(format, "All done.", USAGE),
                ],
            )
            .await;
            let text = format!(
                "[providers.p]\nkind = \"{}\"\nbase_url = \"{}/v1\"\napi_key_env = \"KEY\"\n\n[models.m]\nprovider = \"p\"\nmodel = \"scripted-model\"\n",
                format.kind(),
                server.uri()
            );
            let file = ConfigFile::parse(&text, std::path::Path::new("user.toml")).unwrap();
            let config = Config::merge(Some(("user.toml".into(), file)), None, false).unwrap();
            let registry = Registry::with_env(config, |_| Some("secret".into()));
            let model = registry.resolve("m").unwrap();
            let request = ChatRequest {
                model: model.model.clone(),
                messages: vec![Message::user_text("hi")],
                max_tokens: 64,
                ..ChatRequest::default()
            };
            let first = collect(model.provider.stream(&request).await.unwrap())
                .await
                .unwrap_or_else(|e| panic!("{format:?}: {e}"));
            let calls: Vec<_> = first
                .message
                .tool_calls()
                .map(|call| (call.name.to_string(), call.arguments.clone()))
                .collect();
            assert_eq!(
                calls,
                vec![("read_file".to_string(), input.clone())],
                "{format:?}"
            );
            assert_eq!(
                (first.usage.input, first.usage.output),
                (11, 4),
                "{format:?}"
            );
            let parallel = collect(model.provider.stream(&request).await.unwrap())
                .await
                .unwrap_or_else(|e| panic!("{format:?}: {e}"));
            let calls: Vec<_> = parallel
                .message
                .tool_calls()
                .map(|call| (call.name.to_string(), call.arguments.clone()))
                .collect();
            assert_eq!(
                calls,
                vec![
                    ("glob".to_string(), json!({"pattern": "*.rs"})),
                    ("grep".to_string(), json!({"pattern": "fn"})),
                ],
                "{format:?}"
            );
            let last = collect(model.provider.stream(&request).await.unwrap())
                .await
                .unwrap_or_else(|e| panic!("{format:?}: {e}"));
            assert_eq!(last.message.text(), "All done.", "{format:?}");
            assert_eq!(server.requests().len(), 3, "{format:?}");
            // Past the script: an error, not a hang.
            assert!(model.provider.stream(&request).await.is_err(), "{format:?}");
        }
    }
}
