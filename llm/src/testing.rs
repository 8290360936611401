//! [`ScriptedProvider`]: the test double for the model (feature `testing`).
//!
//! It answers each request with the next pre-written response and records every request, so
//! tests can assert on exactly what the model was sent. When the script runs out it fails
//! loudly instead of inventing an answer.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use crate::error::LlmError;
use crate::provider::{EventStream, Provider};
use crate::stream::StreamEvent;
use crate::types::ChatRequest;

/// One scripted answer.
pub enum Scripted {
    /// A stream of these events.
    Events(Vec<StreamEvent>),
    /// The request fails before any event (e.g. an HTTP error).
    Error(LlmError),
    /// These events, then nothing: the stream neither ends nor fails, like a server that
    /// stopped sending mid-response (for tests of cancelling a response part-way).
    Stalls(Vec<StreamEvent>),
}

struct State {
    script: VecDeque<Scripted>,
    requests: Vec<ChatRequest>,
}

pub struct ScriptedProvider {
    name: String,
    state: Mutex<State>,
    /// A pause before each event, for tests of cancellation and slow consumers.
    event_delay: Duration,
    record: bool,
}

impl ScriptedProvider {
    pub fn new(responses: Vec<Vec<StreamEvent>>) -> Self {
        Self::from_script(responses.into_iter().map(Scripted::Events).collect())
    }

    pub fn from_script(script: Vec<Scripted>) -> Self {
        Self {
            name: "scripted".into(),
            state: Mutex::new(State {
                script: script.into(),
                requests: Vec::new(),
            }),
            event_delay: Duration::ZERO,
            record: true,
        }
    }

    /// Stops recording requests: benchmarks should not pay for copying every transcript.
    pub fn without_recording(mut self) -> Self {
        self.record = false;
        self
    }

    pub fn with_event_delay(mut self, delay: Duration) -> Self {
        self.event_delay = delay;
        self
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<ChatRequest> {
        self.lock().requests.clone()
    }

    /// Scripted answers not yet used.
    pub fn remaining(&self) -> usize {
        self.lock().script.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock happens only inside a failing test; the data is
        // still the best record of what happened.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[async_trait::async_trait]
impl Provider for ScriptedProvider {
    fn name(&self) -> &str {
        &self.name
    }

    async fn stream(&self, req: &ChatRequest) -> Result<EventStream, LlmError> {
        let next = {
            let mut state = self.lock();
            if self.record {
                state.requests.push(req.clone());
            }
            state.script.pop_front()
        };
        let delay = self.event_delay;
        match next {
            None => Err(LlmError::Config("script exhausted".into())),
            Some(Scripted::Error(e)) => Err(e),
            Some(Scripted::Events(events)) => Ok(Box::pin(async_stream::stream! {
                for event in events {
                    if !delay.is_zero() {
                        tokio::time::sleep(delay).await;
                    }
                    yield Ok(event);
                }
            })),
            Some(Scripted::Stalls(events)) => Ok(Box::pin(async_stream::stream! {
                for event in events {
                    if !delay.is_zero() {
                        tokio::time::sleep(delay).await;
                    }
                    yield Ok(event);
                }
                std::future::pending::<()>().await;
            })),
        }
    }
}

/// Anthropic Messages SSE bodies, in the shape of the recorded fixtures, for mock HTTP model
/// servers in tests and benchmarks.
pub mod anthropic_sse {
    use serde_json::{Value, json};

    /// The usage a message reports: input tokens at `message_start`, output tokens at
    /// `message_delta`.
    #[derive(Debug, Clone, Copy)]
    pub struct Usage {
        pub input: u64,
        pub output: u64,
    }

    /// `events` as an SSE body, each under its own `type` as the event name.
    pub fn body(events: &[Value]) -> String {
        events
            .iter()
            .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or("")))
            .collect()
    }

    fn message_start(id: &str, usage: Usage) -> Value {
        json!({"type": "message_start", "message": {"id": id, "type": "message", "role": "assistant", "content": [], "usage": {"input_tokens": usage.input, "output_tokens": 1}}})
    }

    fn message_end(stop_reason: &str, usage: Usage) -> [Value; 2] {
        [
            json!({"type": "message_delta", "delta": {"stop_reason": stop_reason}, "usage": {"output_tokens": usage.output}}),
            json!({"type": "message_stop"}),
        ]
    }

    /// A message with one text block, ending the turn.
    pub fn text(text: &str, usage: Usage) -> String {
        let [delta, stop] = message_end("end_turn", usage);
        body(&[
            message_start("msg_t", usage),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
            json!({"type": "content_block_stop", "index": 0}),
            delta,
            stop,
        ])
    }

    /// A message with one tool call whose input arrives as one JSON delta.
    pub fn tool_use(
        id: &str,
        name: &str,
        input: &Value,
        stop_reason: &str,
        usage: Usage,
    ) -> String {
        let [delta, stop] = message_end(stop_reason, usage);
        body(&[
            message_start("msg_c", usage),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": input.to_string()}}),
            json!({"type": "content_block_stop", "index": 0}),
            delta,
            stop,
        ])
    }
}

/// Helpers that build complete responses, each ending with `Finish`.
pub mod script {
    use serde_json::Value;

    use crate::stream::{FinishReason, StreamEvent, Usage};

    fn usage() -> StreamEvent {
        StreamEvent::Usage(Usage {
            input: 10,
            output: 5,
            cache_read: 0,
            cache_write: 0,
        })
    }

    /// A text answer that ends the turn.
    pub fn text(text: &str) -> Vec<StreamEvent> {
        vec![
            StreamEvent::TextDelta {
                index: 0,
                text: text.into(),
            },
            usage(),
            StreamEvent::Finish(FinishReason::EndTurn),
        ]
    }

    /// One tool call.
    pub fn tool_call(id: &str, name: &str, arguments: Value) -> Vec<StreamEvent> {
        tool_calls(&[(id, name, arguments)])
    }

    /// Several tool calls in one response (a parallel batch).
    pub fn tool_calls(calls: &[(&str, &str, Value)]) -> Vec<StreamEvent> {
        let mut events = Vec::new();
        for (index, (id, name, arguments)) in calls.iter().enumerate() {
            let index = index as u32;
            events.push(StreamEvent::ToolCallStart {
                index,
                id: (*id).into(),
                name: (*name).into(),
                meta: None,
            });
            events.push(StreamEvent::ToolCallDelta {
                index,
                arguments_fragment: arguments.to_string(),
            });
        }
        events.push(usage());
        events.push(StreamEvent::Finish(FinishReason::ToolUse));
        events
    }

    /// A text answer cut off by the given finish reason.
    pub fn finish_with(text: &str, reason: FinishReason) -> Vec<StreamEvent> {
        vec![
            StreamEvent::TextDelta {
                index: 0,
                text: text.into(),
            },
            StreamEvent::Finish(reason),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::collect;
    use serde_json::json;

    #[tokio::test]
    async fn replays_in_order_records_requests_and_fails_when_exhausted() {
        let p = ScriptedProvider::new(vec![
            script::tool_call("c1", "calc", json!({"a": 1})),
            script::text("4"),
        ]);
        let req = |m: &str| ChatRequest {
            model: m.into(),
            ..ChatRequest::default()
        };
        let c = collect(p.stream(&req("one")).await.unwrap()).await.unwrap();
        assert_eq!(
            c.message.tool_calls().next().unwrap().arguments,
            &json!({"a": 1})
        );
        let c = collect(p.stream(&req("two")).await.unwrap()).await.unwrap();
        assert_eq!(c.message.text(), "4");
        let err = p.stream(&req("three")).await.err().unwrap();
        assert_eq!(err.to_string(), "script exhausted");
        let models: Vec<String> = p.requests().into_iter().map(|r| r.model).collect();
        assert_eq!(models, ["one", "two", "three"]);
    }
}
