//! The agent's spans, named and attributed after the OpenTelemetry GenAI semantic conventions:
//! `invoke_agent` (one per turn), `step`, `chat {model}` (one per model request) and
//! `execute_tool {tool}` (one per tool call), with `gen_ai.*` attributes and anvil's own under
//! `anvil.*`. Built on `tracing` alone: with no subscriber (the default) they cost a disabled
//! callsite check; a subscriber (the log file, an OTLP exporter) decides what is kept.
//! `otel.name` is the exported span name (tracing's own names are static).
//!
//! Spans never carry prompt or tool content: only names, ids, token counts, costs, outcomes.
//!
//! Metrics are `tracing` events under the target [`METRICS`] whose fields name the instrument
//! (`histogram.…`, `monotonic_counter.…`, the convention `tracing-opentelemetry`'s metrics
//! layer reads): `gen_ai.client.token.usage` by model and token type, `anvil.cost.usd` by model
//! and accounting, `anvil.tool.duration` (seconds) by tool.

use anvil_llm::Usage;
use tracing::Span;
use tracing::field::Empty;

/// The target of the metric events.
pub const METRICS: &str = "anvil::metrics";

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
    tracing::info_span!("step", anvil.step = i64::from(step))
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
        gen_ai.request.max_tokens = i64::from(max_tokens),
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
pub fn record_usage(
    span: &Span,
    model: &str,
    usage: &Usage,
    cost_usd: Option<f64>,
    estimated: bool,
) {
    let accounting = match (cost_usd, estimated) {
        (None, _) => "unknown",
        (Some(_), true) => "estimated",
        (Some(_), false) => "reported",
    };
    tracing::event!(
        target: METRICS,
        tracing::Level::INFO,
        histogram.gen_ai.client.token.usage = usage.total_input(),
        gen_ai.token.type = "input",
        gen_ai.operation.name = "chat",
        gen_ai.request.model = model,
    );
    tracing::event!(
        target: METRICS,
        tracing::Level::INFO,
        histogram.gen_ai.client.token.usage = usage.output,
        gen_ai.token.type = "output",
        gen_ai.operation.name = "chat",
        gen_ai.request.model = model,
    );
    if let Some(usd) = cost_usd {
        tracing::event!(
            target: METRICS,
            tracing::Level::INFO,
            monotonic_counter.anvil.cost.usd = usd,
            gen_ai.request.model = model,
            anvil.cost.accounting = accounting,
        );
    }
    // As signed integers: an unsigned one is exported as a string, which backends cannot sum.
    let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    span.record("gen_ai.usage.input_tokens", int(usage.total_input()));
    span.record("gen_ai.usage.output_tokens", int(usage.output));
    span.record("anvil.usage.uncached_input_tokens", int(usage.input));
    span.record("anvil.usage.cache_read_tokens", int(usage.cache_read));
    span.record("anvil.usage.cache_write_tokens", int(usage.cache_write));
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

/// How long a tool call took, as a metric.
pub fn record_tool_duration(name: &str, seconds: f64, is_error: bool) {
    tracing::event!(
        target: METRICS,
        tracing::Level::INFO,
        histogram.anvil.tool.duration = seconds,
        gen_ai.tool.name = name,
        anvil.is_error = is_error,
    );
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
