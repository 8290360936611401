//! The agent's spans, named and attributed after the OpenTelemetry GenAI semantic conventions:
//! `invoke_agent` (one per turn), `step`, `chat {model}` (one per model request) and
//! `execute_tool {tool}` (one per tool call), with `gen_ai.*` attributes and anvil's own under
//! `anvil.*`. Built on `tracing` alone: with no subscriber (the default) they cost a disabled
//! callsite check; a subscriber (the log file, an OTLP exporter) decides what is kept.
//! `otel.name` is the exported span name (tracing's own names are static).
//!
//! Spans never carry prompt or tool content: only names, ids, token counts, costs, outcomes.

use anvil_llm::Usage;
use tracing::Span;
use tracing::field::Empty;

/// One turn of the agent.
pub fn invoke_agent(provider: &str, model: &str, conversation: Option<&str>) -> Span {
    tracing::info_span!(
        "invoke_agent",
        otel.name = "invoke_agent anvil",
        otel.kind = "internal",
        gen_ai.operation.name = "invoke_agent",
        gen_ai.agent.name = "anvil",
        gen_ai.provider.name = provider,
        gen_ai.request.model = model,
        gen_ai.conversation.id = conversation.unwrap_or(""),
        anvil.outcome = Empty,
        anvil.steps = Empty,
    )
}

/// One step: a model request and the tools it asked for.
pub fn step(step: u32) -> Span {
    tracing::info_span!("step", anvil.step = step)
}

/// One model request.
pub fn chat(provider: &str, model: &str, max_tokens: u32) -> Span {
    tracing::info_span!(
        "chat",
        otel.name = %format_args!("chat {model}"),
        otel.kind = "client",
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = provider,
        gen_ai.request.model = model,
        gen_ai.request.max_tokens = max_tokens,
        gen_ai.response.model = Empty,
        gen_ai.response.finish_reasons = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        anvil.usage.uncached_input_tokens = Empty,
        anvil.usage.cache_read_tokens = Empty,
        anvil.usage.cache_write_tokens = Empty,
        anvil.cost_usd = Empty,
        anvil.cost.accounting = Empty,
        anvil.reserved_usd = Empty,
        anvil.ttft_ms = Empty,
        error.type = Empty,
    )
}

/// Records a response's usage and cost on its `chat` span: total input (cached included) in
/// the standard field, its partitions under `anvil.*`.
pub fn record_usage(span: &Span, usage: &Usage, cost_usd: Option<f64>, estimated: bool) {
    span.record("gen_ai.usage.input_tokens", usage.total_input());
    span.record("gen_ai.usage.output_tokens", usage.output);
    span.record("anvil.usage.uncached_input_tokens", usage.input);
    span.record("anvil.usage.cache_read_tokens", usage.cache_read);
    span.record("anvil.usage.cache_write_tokens", usage.cache_write);
    match cost_usd {
        Some(usd) => {
            span.record("anvil.cost_usd", usd);
            span.record(
                "anvil.cost.accounting",
                if estimated { "estimated" } else { "reported" },
            );
        }
        None => {
            span.record("anvil.cost.accounting", "unknown");
        }
    }
}

/// One tool call.
pub fn execute_tool(name: &str, call_id: &str) -> Span {
    tracing::info_span!(
        "execute_tool",
        otel.name = %format_args!("execute_tool {name}"),
        otel.kind = "internal",
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = name,
        gen_ai.tool.call.id = call_id,
        anvil.is_error = Empty,
    )
}
