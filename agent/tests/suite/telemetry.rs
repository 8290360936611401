//! The agent's spans: a turn with one tool call makes
//! invoke_agent > step > chat / execute_tool, named and attributed after the OpenTelemetry
//! GenAI conventions, with total input tokens (cached included) in the standard field, time to
//! first token on the request, and no prompt or tool content anywhere.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use anvil_agent::tools::calculator::Calculator;
use anvil_agent::{Agent, AgentConfig, EventSink, ToolRegistry, TurnOutcome};
use anvil_llm::config::Pricing;
use anvil_llm::testing::{ScriptedProvider, script};
use anvil_llm::{ContentBlock, FinishReason, StreamEvent, Usage};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// A span as the test saw it: name, parent's name, and every field recorded on it.
#[derive(Debug, Clone, Default)]
struct Seen {
    name: String,
    parent: Option<String>,
    fields: BTreeMap<String, String>,
}

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<(u64, Seen)>>>);

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0
            .insert(field.name().to_string(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
}

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> tracing_subscriber::Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut seen = Seen {
            name: attrs.metadata().name().to_string(),
            parent: ctx
                .span(id)
                .and_then(|s| s.parent().map(|p| p.name().to_string())),
            ..Seen::default()
        };
        attrs.record(&mut Fields(&mut seen.fields));
        self.0.lock().unwrap().push((id.into_u64(), seen));
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        let mut spans = self.0.lock().unwrap();
        if let Some((_, seen)) = spans.iter_mut().rev().find(|(i, _)| *i == id.into_u64()) {
            values.record(&mut Fields(&mut seen.fields));
        }
    }
}

#[tokio::test]
async fn a_turn_with_a_tool_call_makes_nested_genai_spans() {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let _guard = tracing::subscriber::set_default(subscriber);

    let usage = Usage {
        input: 100,
        output: 20,
        cache_read: 900,
        cache_write: 50,
    };
    let mut first = script::tool_call("c1", "calculator", json!({"a": 2, "b": 2, "op": "add"}));
    first.retain(|e| !matches!(e, StreamEvent::Usage(_)));
    first.insert(first.len() - 1, StreamEvent::Usage(usage));
    let provider = Arc::new(ScriptedProvider::new(vec![
        first,
        vec![
            StreamEvent::TextDelta {
                index: 0,
                text: "SECRET-ANSWER 4".into(),
            },
            StreamEvent::Usage(usage),
            StreamEvent::Finish(FinishReason::EndTurn),
        ],
    ]));
    let mut tools = ToolRegistry::new();
    tools.register(Arc::new(Calculator)).unwrap();
    let (sink, _events) = EventSink::channel(64);
    let mut agent = Agent::new(
        provider,
        Arc::new(tools),
        AgentConfig {
            model: "claude-test".into(),
            system: Some("SECRET-SYSTEM".into()),
            pricing: Some(Pricing {
                input: 3.0,
                output: 15.0,
                cache_read: 0.3,
                cache_write: 3.75,
            }),
            ..AgentConfig::default()
        },
        std::env::temp_dir(),
        sink,
    );
    let outcome = agent
        .run_turn(
            vec![ContentBlock::text("SECRET-PROMPT what is 2+2")],
            CancellationToken::new(),
        )
        .await;
    assert_eq!(outcome, TurnOutcome::Done);

    let spans: Vec<Seen> = capture
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|(_, s)| s.clone())
        .collect();
    let named = |name: &str| -> Vec<&Seen> { spans.iter().filter(|s| s.name == name).collect() };
    let turn = named("invoke_agent");
    assert_eq!(turn.len(), 1, "{spans:#?}");
    assert_eq!(turn[0].fields["gen_ai.operation.name"], "invoke_agent");
    assert_eq!(turn[0].fields["gen_ai.provider.name"], "scripted");
    assert_eq!(turn[0].fields["gen_ai.request.model"], "claude-test");
    assert_eq!(turn[0].fields["anvil.outcome"], "done");
    let steps = named("step");
    assert_eq!(steps.len(), 2);
    assert!(
        steps
            .iter()
            .all(|s| s.parent.as_deref() == Some("invoke_agent"))
    );
    let chats = named("chat");
    assert_eq!(chats.len(), 2);
    for chat in &chats {
        assert_eq!(chat.parent.as_deref(), Some("step"), "{chat:#?}");
        assert_eq!(chat.fields["otel.name"], "chat claude-test");
        assert_eq!(chat.fields["gen_ai.operation.name"], "chat");
        // Total input, cached included; the partitions under anvil.*.
        assert_eq!(chat.fields["gen_ai.usage.input_tokens"], "1050");
        assert_eq!(chat.fields["gen_ai.usage.output_tokens"], "20");
        assert_eq!(chat.fields["anvil.usage.uncached_input_tokens"], "100");
        assert_eq!(chat.fields["anvil.usage.cache_read_tokens"], "900");
        assert_eq!(chat.fields["anvil.usage.cache_write_tokens"], "50");
        assert_eq!(chat.fields["anvil.cost.accounting"], "reported");
        let cost: f64 = chat.fields["anvil.cost_usd"].parse().unwrap();
        assert!(
            (cost - (100.0 * 3.0 + 20.0 * 15.0 + 900.0 * 0.3 + 50.0 * 3.75) / 1e6).abs() < 1e-12
        );
        assert!(chat.fields.contains_key("anvil.ttft_ms"), "{chat:#?}");
        assert!(chat.fields.contains_key("anvil.reserved_usd"), "{chat:#?}");
    }
    let tool = named("execute_tool");
    assert_eq!(tool.len(), 1);
    assert_eq!(tool[0].parent.as_deref(), Some("step"));
    assert_eq!(tool[0].fields["otel.name"], "execute_tool calculator");
    assert_eq!(tool[0].fields["gen_ai.tool.name"], "calculator");
    assert_eq!(tool[0].fields["gen_ai.tool.call.id"], "c1");
    assert_eq!(tool[0].fields["anvil.is_error"], "false");
    // No prompt, system prompt, answer or tool content in any span.
    let all = format!("{spans:?}");
    assert!(!all.contains("SECRET"), "{all}");
}
