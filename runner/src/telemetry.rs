//! Where both binaries' `tracing` output goes: the log file and, when configured, an OTLP
//! exporter. One subscriber, installed once at start ([`init`]), held until exit ([`Guard`]).
//!
//! Logs: JSON lines in `<data dir>/anvil/logs/<binary>.log`, written by a non-blocking
//! appender (a writer thread; a full buffer drops lines rather than slow a turn), filtered by
//! `ANVIL_LOG` (an EnvFilter such as `debug` or `anvil_llm=trace`). Never on stdout or stderr:
//! in headless mode those carry the requested output only. `anvil` logs only when `ANVIL_LOG`
//! is set (start-up stays a few milliseconds); `anvil-evals run` and `worker`, long-running
//! services, log at `info` by default.
//!
//! Traces (cargo feature `otel`, on by default): when `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, spans at `info` and above are exported over
//! OTLP — `OTEL_EXPORTER_OTLP_PROTOCOL` `grpc` or `http/protobuf` (the default), the other
//! standard `OTEL_EXPORTER_OTLP_*` variables as the exporter reads them. Nothing is exported
//! and no exporter starts otherwise. Export runs on the SDK's batch thread with a bounded
//! queue: an unreachable endpoint never slows a turn (spans past the queue are dropped, and
//! the SDK logs how many); at exit the flush waits at most [`FLUSH_TIMEOUT`].
//!
//! Context crosses processes as W3C trace context in the `TRACEPARENT` environment variable:
//! an eval worker passes its trial's to the `anvil -p` it runs ([`traceparent`]), which
//! continues it ([`adopt_parent`]); a malformed value is ignored.

use std::time::Duration;

use tracing::Span;
use tracing_appender::non_blocking::WorkerGuard;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// How long the exit waits for the last spans to be exported.
pub const FLUSH_TIMEOUT: Duration = Duration::from_secs(2);

/// The environment variable that carries W3C trace context into a child process.
pub const TRACEPARENT: &str = "TRACEPARENT";

/// Keeps the log writer and the exporter running; dropping it flushes both. Hold it until
/// exit (and drop it before `std::process::exit`, which runs no destructors).
#[must_use = "dropping the guard stops the log writer and the exporter"]
pub struct Guard {
    _log: Option<WorkerGuard>,
    #[cfg(feature = "otel")]
    otel: Option<otel::Exporter>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        #[cfg(feature = "otel")]
        if let Some(exporter) = self.otel.take() {
            exporter.shutdown();
        }
    }
}

/// Installs the subscriber for `binary` (the log file's name). `default_log`: the log filter
/// when `ANVIL_LOG` is unset, `None` for no log file then. A log that cannot be opened, or an
/// exporter that cannot be built, is no error: the program runs without it (the log says so
/// when there is one).
pub fn init(binary: &str, default_log: Option<&str>) -> Guard {
    let (log_layer, log_guard) = match log_writer(binary, default_log) {
        Some((writer, guard, filter)) => {
            // Events only, each line with its own fields: a layer that saw spans would format
            // every span's fields as it opens (tens of µs a step), and spans are the traces'.
            let layer = tracing_subscriber::fmt::layer()
                .json()
                .with_ansi(false)
                .with_current_span(false)
                .with_span_list(false)
                .with_writer(writer)
                // Metric events are for the metrics exporter, not lines of the log.
                .with_filter(EnvFilter::new(format!(
                    "{filter},{}=off",
                    anvil_agent::telemetry::METRICS
                )))
                .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
                    meta.is_event()
                }));
            (Some(layer), Some(guard))
        }
        None => (None, None),
    };
    #[cfg(feature = "otel")]
    {
        let exporter = otel::Exporter::from_env(binary);
        let otel_layer = exporter.as_ref().map(|e| e.layer());
        let metrics_layer = exporter.as_ref().map(|e| e.metrics_layer());
        if log_layer.is_none() && otel_layer.is_none() {
            return Guard {
                _log: None,
                otel: None,
            };
        }
        let _ = tracing_subscriber::registry()
            .with(log_layer)
            .with(otel_layer)
            .with(metrics_layer)
            .try_init();
        Guard {
            _log: log_guard,
            otel: exporter,
        }
    }
    #[cfg(not(feature = "otel"))]
    {
        if let Some(layer) = log_layer {
            let _ = tracing_subscriber::registry().with(layer).try_init();
        }
        Guard { _log: log_guard }
    }
}

/// The log file's writer and filter, when logging is on.
fn log_writer(
    binary: &str,
    default: Option<&str>,
) -> Option<(
    tracing_appender::non_blocking::NonBlocking,
    WorkerGuard,
    String,
)> {
    let filter = match (std::env::var("ANVIL_LOG"), default) {
        (Ok(f), _) if !f.trim().is_empty() => f,
        (_, Some(d)) => d.to_string(),
        _ => return None,
    };
    // A filter that does not parse is `info` (EnvFilter::new would say so on stderr, which
    // is the program's own).
    let filter = match EnvFilter::try_new(&filter) {
        Ok(_) => filter,
        Err(_) => "info".to_string(),
    };
    let dir = anvil_llm::config::data_dir()?.join("logs");
    std::fs::create_dir_all(&dir).ok()?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("{binary}.log")))
        .ok()?;
    let (writer, guard) = tracing_appender::non_blocking(file);
    Some((writer, guard, filter))
}

/// `span`'s W3C trace context, for a child process's `TRACEPARENT`; `None` when no trace is
/// being exported.
pub fn traceparent(span: &Span) -> Option<String> {
    #[cfg(feature = "otel")]
    {
        otel::traceparent(span)
    }
    #[cfg(not(feature = "otel"))]
    {
        let _ = span;
        None
    }
}

/// `span`'s trace id (32 hex digits), when a trace is being exported.
pub fn trace_id(span: &Span) -> Option<String> {
    #[cfg(feature = "otel")]
    {
        otel::trace_id(span)
    }
    #[cfg(not(feature = "otel"))]
    {
        let _ = span;
        None
    }
}

/// Whether `value` is a W3C `traceparent` of version 00 exactly as the standard writes it:
/// `00-` 32 lowercase hex digits `-` 16 `-` 2, nothing else (the propagator alone accepts a
/// leading `+` or short ids, and would join another trace).
pub fn well_formed_traceparent(value: &str) -> bool {
    let parts: Vec<&str> = value.split('-').collect();
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    parts.len() == 4
        && parts[0] == "00"
        && hex(parts[1], 32)
        && hex(parts[2], 16)
        && hex(parts[3], 2)
        && parts[1].bytes().any(|b| b != b'0')
        && parts[2].bytes().any(|b| b != b'0')
}

/// Makes `span` continue the trace this process was started in (`TRACEPARENT`), when there is
/// a valid one; a malformed value is ignored.
pub fn adopt_parent(span: &Span) {
    #[cfg(feature = "otel")]
    otel::adopt_parent(span);
    #[cfg(not(feature = "otel"))]
    let _ = span;
}

#[cfg(feature = "otel")]
mod otel {
    use std::collections::HashMap;

    use opentelemetry::propagation::TextMapPropagator;
    use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
    use opentelemetry_otlp::{Protocol, WithExportConfig};
    use opentelemetry_sdk::metrics::SdkMeterProvider;
    use opentelemetry_sdk::propagation::TraceContextPropagator;
    use opentelemetry_sdk::trace::SdkTracerProvider;
    use tracing::Span;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    use tracing_subscriber::Layer;
    use tracing_subscriber::filter::LevelFilter;

    use super::{FLUSH_TIMEOUT, TRACEPARENT};

    /// The OTLP exporters (traces and metrics) and what they run on.
    pub(super) struct Exporter {
        provider: SdkTracerProvider,
        meters: SdkMeterProvider,
        /// gRPC (tonic) needs a Tokio runtime of its own, apart from the program's: one
        /// worker thread, only when gRPC is chosen.
        runtime: Option<tokio::runtime::Runtime>,
    }

    impl Exporter {
        /// The exporter the standard environment asks for; `None` when no endpoint is set (or
        /// the exporter cannot be built, which is logged).
        pub(super) fn from_env(binary: &str) -> Option<Exporter> {
            let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
            if !set("OTEL_EXPORTER_OTLP_ENDPOINT") && !set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
                return None;
            }
            let protocol = std::env::var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                .or_else(|_| std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL"))
                .unwrap_or_default();
            let grpc = protocol.trim().eq_ignore_ascii_case("grpc");
            let runtime = match grpc {
                true => Some(
                    tokio::runtime::Builder::new_multi_thread()
                        .worker_threads(1)
                        .thread_name("anvil-otlp")
                        .enable_all()
                        .build()
                        .ok()?,
                ),
                false => None,
            };
            let _entered = runtime.as_ref().map(|r| r.enter());
            let built = if grpc {
                opentelemetry_otlp::SpanExporter::builder()
                    .with_tonic()
                    .build()
                    .and_then(|spans| {
                        opentelemetry_otlp::MetricExporter::builder()
                            .with_tonic()
                            .build()
                            .map(|metrics| (spans, metrics))
                    })
            } else {
                opentelemetry_otlp::SpanExporter::builder()
                    .with_http()
                    .with_protocol(Protocol::HttpBinary)
                    .build()
                    .and_then(|spans| {
                        opentelemetry_otlp::MetricExporter::builder()
                            .with_http()
                            .with_protocol(Protocol::HttpBinary)
                            .build()
                            .map(|metrics| (spans, metrics))
                    })
            };
            // The program's stderr is its own: a broken exporter is logged (when there is a
            // log) and otherwise silent, never a failed turn.
            let (exporter, metric_exporter) = match built {
                Ok(e) => e,
                Err(e) => {
                    tracing::warn!("OTLP export is off: {e}");
                    return None;
                }
            };
            let resource = opentelemetry_sdk::Resource::builder()
                .with_service_name(binary.to_string())
                .with_attribute(opentelemetry::KeyValue::new(
                    "service.version",
                    env!("CARGO_PKG_VERSION"),
                ))
                .build();
            let provider = SdkTracerProvider::builder()
                .with_batch_exporter(exporter)
                .with_resource(resource.clone())
                .build();
            let meters = SdkMeterProvider::builder()
                .with_periodic_exporter(metric_exporter)
                .with_resource(resource)
                .build();
            drop(_entered);
            Some(Exporter {
                provider,
                meters,
                runtime,
            })
        }

        /// The layer that turns `info` spans into exported ones. Spans only: an event's text
        /// (a provider's error, a failed trial's stderr) can quote content, so no event
        /// becomes a span event.
        pub(super) fn layer<S>(&self) -> impl Layer<S> + use<S>
        where
            S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
        {
            tracing_opentelemetry::layer()
                .with_tracer(self.provider.tracer("anvil"))
                .with_filter(LevelFilter::INFO)
                .with_filter(tracing_subscriber::filter::filter_fn(|meta| meta.is_span()))
        }

        /// Metric events (target `anvil::metrics`) as OTLP metrics.
        pub(super) fn metrics_layer<S>(&self) -> impl Layer<S> + use<S>
        where
            S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
        {
            tracing_opentelemetry::MetricsLayer::new(self.meters.clone()).with_filter(
                tracing_subscriber::filter::Targets::new()
                    .with_target(anvil_agent::telemetry::METRICS, LevelFilter::INFO),
            )
        }

        /// Exports what is left, waiting at most [`FLUSH_TIMEOUT`] for each signal.
        pub(super) fn shutdown(self) {
            let _ = self.provider.shutdown_with_timeout(FLUSH_TIMEOUT);
            let _ = self.meters.shutdown_with_timeout(FLUSH_TIMEOUT);
            if let Some(runtime) = self.runtime {
                runtime.shutdown_timeout(FLUSH_TIMEOUT);
            }
        }
    }

    pub(super) fn traceparent(span: &Span) -> Option<String> {
        let cx = span.context();
        if !cx.span().span_context().is_valid() {
            return None;
        }
        let mut carrier = HashMap::new();
        TraceContextPropagator::new().inject_context(&cx, &mut carrier);
        carrier.remove("traceparent")
    }

    pub(super) fn trace_id(span: &Span) -> Option<String> {
        let cx = span.context();
        let sc = cx.span().span_context().clone();
        sc.is_valid().then(|| sc.trace_id().to_string())
    }

    pub(super) fn adopt_parent(span: &Span) {
        let Some(value) = std::env::var_os(TRACEPARENT).and_then(|v| v.into_string().ok()) else {
            return;
        };
        if !super::well_formed_traceparent(&value) {
            return;
        }
        let carrier = HashMap::from([("traceparent".to_string(), value)]);
        let cx = TraceContextPropagator::new().extract(&carrier);
        if cx.span().span_context().is_valid() {
            let _ = span.set_parent(cx);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::well_formed_traceparent;

    #[test]
    fn only_a_standard_traceparent_is_continued() {
        assert!(well_formed_traceparent(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        ));
        for bad in [
            "",
            "garbage",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-+bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            "0A-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            " 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert!(!well_formed_traceparent(bad), "{bad:?}");
        }
    }
}
