//! Traces through the real `anvil` binary to real OTLP receivers started here: a headless turn
//! with one tool call exports session > invoke_agent > step > chat / execute_tool, named and
//! attributed after the GenAI conventions, continuing the caller's `TRACEPARENT`; over gRPC
//! (the in-process `fake-opentelemetry-collector`) and HTTP/protobuf (PyPI's `oteltap`). A
//! malformed `TRACEPARENT` is ignored; an unreachable endpoint never fails the turn.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::path::PathBuf;
use std::process::Output;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anvil_llm::testing::anthropic_sse::{self, Usage};
use anvil_test_support::home::Home;
use anvil_test_support::model_server::{Answer, ScriptedServer, WireFormat};
use fake_opentelemetry_collector::{ExportedSpan, FakeCollectorServer};
use serde_json::json;

const ANVIL: &str = env!("CARGO_BIN_EXE_anvil");
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

/// A model that reads a file once, then answers.
async fn one_tool_call() -> ScriptedServer {
    let n = Arc::new(AtomicUsize::new(0));
    ScriptedServer::answering(WireFormat::AnthropicMessages, move |_| {
        let usage = Usage {
            input: 1_000,
            output: 20,
        };
        Answer::sse(match n.fetch_add(1, Ordering::SeqCst) {
            0 => anthropic_sse::tool_use(
                "toolu_1",
                "read_file",
                &json!({"file_path": "notes.txt"}),
                "tool_use",
                usage,
            ),
            _ => anthropic_sse::text("The notes say SECRET-NOTES.", usage),
        })
    })
    .await
}

fn machine(server: &ScriptedServer) -> (Home, PathBuf) {
    let home = Home::new();
    home.write_config(&format!(
        "default_model = \"priced\"\n\n[providers.mock]\nkind = \"anthropic\"\nbase_url = \"{}\"\napi_key_env = \"MOCK_API_KEY\"\n\n[models.priced]\nprovider = \"mock\"\nmodel = \"claude-priced\"\npricing = {{ input = 3.0, output = 15.0, cache_read = 0.3, cache_write = 3.75 }}\n",
        server.uri()
    ));
    let repo = home.git_repo("repo", &[("notes.txt", "SECRET-NOTES\n")]);
    (home, repo)
}

fn run(home: &Home, repo: &PathBuf, env: &[(&str, &str)]) -> Output {
    let mut c = home.command(ANVIL);
    c.current_dir(repo).args([
        "-p",
        "SECRET-PROMPT read notes.txt",
        "--output-format",
        "json",
    ]);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn attr<'a>(span: &'a ExportedSpan, key: &str) -> &'a str {
    span.attributes
        .get(key)
        .map(String::as_str)
        .unwrap_or_else(|| panic!("{} has no {key}: {:#?}", span.name, span.attributes))
}

fn by_name<'a>(spans: &'a [ExportedSpan], name: &str) -> Vec<&'a ExportedSpan> {
    spans.iter().filter(|s| s.name == name).collect()
}

/// The checks both protocols' spans must pass, on (name, span id, parent id, trace id,
/// attributes as text).
pub(crate) struct Span {
    pub name: String,
    pub span_id: String,
    pub parent: String,
    pub trace: String,
    pub attributes: std::collections::BTreeMap<String, String>,
}

pub(crate) fn check_turn(spans: &[Span], trace: Option<&str>) {
    let named = |n: &str| -> Vec<&Span> { spans.iter().filter(|s| s.name == n).collect() };
    let one = |n: &str| -> &Span {
        let found = named(n);
        assert_eq!(
            found.len(),
            1,
            "{n}: {:#?}",
            spans.iter().map(|s| &s.name).collect::<Vec<_>>()
        );
        found[0]
    };
    let session = one("anvil -p");
    let turn = one("invoke_agent anvil");
    let tool = one("execute_tool read_file");
    let chats = named("chat claude-priced");
    let steps = named("step");
    assert_eq!(
        (chats.len(), steps.len()),
        (2, 2),
        "{:#?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    // One trace, nested: session > invoke_agent > step > chat / execute_tool.
    let trace_id = trace.unwrap_or(&session.trace);
    assert!(spans.iter().all(|s| s.trace == trace_id), "one trace");
    if trace.is_some() {
        assert_eq!(session.parent, PARENT, "the session continues TRACEPARENT");
    }
    assert_eq!(turn.parent, session.span_id);
    assert!(steps.iter().all(|s| s.parent == turn.span_id));
    let step_ids: Vec<&str> = steps.iter().map(|s| s.span_id.as_str()).collect();
    assert!(chats.iter().all(|c| step_ids.contains(&c.parent.as_str())));
    assert!(step_ids.contains(&tool.parent.as_str()));
    // GenAI attributes (values as the receiver prints them: checked by containment).
    let has = |s: &Span, k: &str, v: &str| {
        let got = s
            .attributes
            .get(k)
            .unwrap_or_else(|| panic!("{} has no {k}: {:#?}", s.name, s.attributes));
        assert!(got.contains(v), "{} {k} = {got}, want {v}", s.name);
    };
    has(turn, "gen_ai.operation.name", "invoke_agent");
    has(turn, "gen_ai.request.model", "claude-priced");
    has(turn, "gen_ai.provider.name", "anthropic");
    has(turn, "anvil.outcome", "done");
    has(session, "gen_ai.conversation.id", "");
    for chat in &chats {
        has(chat, "gen_ai.operation.name", "chat");
        has(chat, "gen_ai.usage.input_tokens", "1000");
        has(chat, "gen_ai.usage.output_tokens", "20");
        has(chat, "anvil.usage.uncached_input_tokens", "1000");
        has(chat, "anvil.cost.accounting", "reported");
        has(chat, "anvil.cost_usd", "0.003");
        assert!(
            chat.attributes.contains_key("anvil.ttft_ms"),
            "{:#?}",
            chat.attributes
        );
    }
    has(tool, "gen_ai.tool.name", "read_file");
    has(tool, "gen_ai.tool.call.id", "toolu_1");
    // No prompt, file or answer content in any span.
    for s in spans {
        for (k, v) in &s.attributes {
            assert!(!v.contains("SECRET"), "{} {k} = {v}", s.name);
        }
    }
}

fn from_fake(spans: &[ExportedSpan]) -> Vec<Span> {
    spans
        .iter()
        .map(|s| Span {
            name: s.name.clone(),
            span_id: s.span_id.clone(),
            parent: s.parent_span_id.clone(),
            trace: s.trace_id.clone(),
            attributes: s.attributes.clone(),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_headless_turn_exports_nested_genai_spans_over_grpc() {
    let server = one_tool_call().await;
    let (home, repo) = machine(&server);
    let mut collector = FakeCollectorServer::start().await.unwrap();
    let endpoint = collector.endpoint();
    let traceparent = format!("00-{TRACE}-{PARENT}-01");
    let out = run(
        &home,
        &repo,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("TRACEPARENT", &traceparent),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let spans = collector.exported_spans(7, Duration::from_secs(20)).await;
    assert!(!by_name(&spans, "anvil -p").is_empty(), "{spans:#?}");
    // The session id is the conversation's.
    assert!(!attr(by_name(&spans, "anvil -p")[0], "gen_ai.conversation.id").is_empty());
    check_turn(&from_fake(&spans), Some(TRACE));
    // Metrics, exported at exit: tokens by model and type, cost by model, tool durations.
    let metrics = collector.exported_metrics(1, Duration::from_secs(20)).await;
    let text = serde_json::to_string(&metrics).unwrap();
    for name in [
        "gen_ai.client.token.usage",
        "anvil.cost.usd",
        "anvil.tool.duration",
    ] {
        assert!(
            text.contains(&format!("\"name\":\"{name}\"")),
            "{name}: {text}"
        );
    }
    for attribute in ["claude-priced", "read_file", "reported", "input", "output"] {
        assert!(text.contains(attribute), "{attribute}: {text}");
    }
    assert!(!text.contains("SECRET"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_traceparent_is_ignored_and_a_dead_endpoint_fails_nothing() {
    let mut collector = FakeCollectorServer::start().await.unwrap();
    let endpoint = collector.endpoint();
    for bad in [
        "garbage",
        "00-zz-00f067aa0ba902b7-01",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
    ] {
        // A fresh model per run: each turn makes its tool call.
        let server = one_tool_call().await;
        let (home, repo) = machine(&server);
        let out = run(
            &home,
            &repo,
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                ("TRACEPARENT", bad),
            ],
        );
        assert_eq!(out.status.code(), Some(0), "{bad}: {out:?}");
        let spans = collector.exported_spans(7, Duration::from_secs(20)).await;
        let spans = from_fake(&spans);
        check_turn(&spans, None);
        let session = spans.iter().find(|s| s.name == "anvil -p").unwrap();
        assert!(
            session.parent.is_empty() || session.parent == "0000000000000000",
            "{bad}: a new trace"
        );
        assert_ne!(session.trace, TRACE);
    }
    // Nothing listens there: the turn ends as always, and says nothing about it.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    for protocol in ["grpc", "http/protobuf"] {
        let server = one_tool_call().await;
        let (home, repo) = machine(&server);
        let out = run(
            &home,
            &repo,
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", &dead),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol),
            ],
        );
        assert_eq!(out.status.code(), Some(0), "{protocol}: {out:?}");
        assert!(
            out.stderr.is_empty(),
            "{protocol}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let result: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(result["outcome"], "done");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_headless_turn_exports_nested_genai_spans_over_http_protobuf() {
    let server = one_tool_call().await;
    let (home, repo) = machine(&server);
    let tap = anvil_test_support::otlp::Oteltap::start();
    let traceparent = format!("00-{TRACE}-{PARENT}-01");
    let out = run(
        &home,
        &repo,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &tap.endpoint()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("TRACEPARENT", &traceparent),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let spans: Vec<Span> = tap
        .spans(7, Duration::from_secs(20))
        .iter()
        .map(|line| Span {
            name: line["name"].as_str().unwrap_or_default().to_string(),
            span_id: line["spanId"].as_str().unwrap_or_default().to_string(),
            parent: line["parentSpanId"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            trace: line["traceId"].as_str().unwrap_or_default().to_string(),
            attributes: line["attributes"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|kv| {
                    let value = kv["value"]
                        .as_object()
                        .and_then(|v| v.values().next())
                        .map(|v| match v {
                            serde_json::Value::String(s) => s.clone(),
                            other => other.to_string(),
                        })
                        .unwrap_or_default();
                    (kv["key"].as_str().unwrap_or_default().to_string(), value)
                })
                .collect(),
        })
        .collect();
    check_turn(&spans, Some(TRACE));
    let metrics = serde_json::to_string(&tap.others(1, Duration::from_secs(20))).unwrap();
    assert!(metrics.contains("gen_ai.client.token.usage"), "{metrics}");
}

/// A provider error whose body quotes the request (the prompt, the key) is retried: the
/// retry's log event carries the error's kind only, no event becomes a span event, and the
/// log file (ANVIL_LOG=debug) holds no content either. A variable that is not UTF-8 (here the
/// TRACEPARENT itself) is passed over, never a crash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quoting_provider_error_reaches_neither_spans_nor_logs() {
    use std::os::unix::ffi::OsStrExt;
    let n = Arc::new(AtomicUsize::new(0));
    let server = ScriptedServer::answering(WireFormat::AnthropicMessages, move |_| {
        match n.fetch_add(1, Ordering::SeqCst) {
            0 => Answer::error(
                500,
                r#"{"type":"error","error":{"type":"api_error","message":"you sent SECRET-PROMPT with x-api-key SECRET-KEY"}}"#,
            ),
            _ => Answer::sse(anthropic_sse::text(
                "done",
                Usage {
                    input: 10,
                    output: 2,
                },
            )),
        }
    })
    .await;
    let (home, repo) = machine(&server);
    let mut collector = FakeCollectorServer::start().await.unwrap();
    let mut c = home.command(ANVIL);
    c.current_dir(&repo)
        .args(["-p", "SECRET-PROMPT hi", "--output-format", "json"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint())
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .env("ANVIL_LOG", "debug")
        .env(
            "TRACEPARENT",
            std::ffi::OsStr::from_bytes(b"00-4bf92f3577b34da6a3ce929d0e0e4736-\xff\xfe-01"),
        )
        .env(
            "ANVIL_TEST_NOT_UTF8_TOKEN",
            std::ffi::OsStr::from_bytes(b"SECRET-\xff"),
        );
    let out = c.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let spans = collector.exported_spans(4, Duration::from_secs(20)).await;
    assert!(
        by_name(&spans, "invoke_agent anvil").len() == 1,
        "{spans:#?}"
    );
    let exported = format!("{spans:?}");
    assert!(!exported.contains("SECRET"), "{exported}");
    assert!(
        spans.iter().all(|s| s.events.is_empty()),
        "no span events: {spans:#?}"
    );
    let log = std::fs::read_to_string(home.path().join("data/anvil/logs/anvil.log")).unwrap();
    assert!(log.contains("retrying provider request"), "{log}");
    assert!(!log.contains("SECRET"), "{log}");
    for line in log.lines() {
        serde_json::from_str::<serde_json::Value>(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    }
}

/// The exporter's queue is bounded: spans past it are dropped, never waited for, and the drop
/// is counted in the log (here a queue of 2 for a turn of 7 spans, via the SDK's standard
/// `OTEL_BSP_MAX_QUEUE_SIZE`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_past_the_exporters_queue_are_dropped_and_counted_in_the_log() {
    let server = one_tool_call().await;
    let (home, repo) = machine(&server);
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let out = run(
        &home,
        &repo,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &dead),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "2"),
            ("ANVIL_LOG", "warn"),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = std::fs::read_to_string(home.path().join("data/anvil/logs/anvil.log")).unwrap();
    assert!(log.to_lowercase().contains("dropped"), "{log}");
}
