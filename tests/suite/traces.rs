//! One trace per trial, across processes: a sweep of 2 trials with OTLP export on exports 2
//! trial subtrees — the worker's `trial` > `agent` span and, under it, the child `anvil -p`'s
//! own spans (it continues the worker's `TRACEPARENT`) — and each trial record carries its
//! trace id. The receiver is the in-process `fake-opentelemetry-collector` (OTLP/gRPC).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::time::Duration;

use anvil_test_support::sweep as support;
use fake_opentelemetry_collector::{ExportedSpan, FakeCollectorServer};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_of_two_trials_exports_two_trial_traces_joined_across_processes() {
    let server = support::model_server(Duration::ZERO).await;
    let home = tempfile::tempdir().unwrap();
    let cfg = home.path().join("cfg/anvil");
    std::fs::create_dir_all(&cfg).unwrap();
    std::fs::write(cfg.join("config.toml"), support::config(&server)).unwrap();
    let tasks = home.path().join("tasks");
    support::task(&tasks, "t1");
    let queue = home.path().join("data/queue.db");
    let mut collector = FakeCollectorServer::start().await.unwrap();

    let out = support::evals_command(
        home.path(),
        &[
            "run",
            "--tasks",
            &tasks.join("*").display().to_string(),
            "--models",
            "good",
            "--trials",
            "2",
            "--concurrency",
            "1",
            "--sweep",
            "traced",
            "--queue",
            &queue.display().to_string(),
        ],
    )
    .env("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint())
    .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    .output()
    .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Per trial: trial, workspace, agent, grade (worker) + anvil -p, invoke_agent, 2 steps,
    // 2 chats, 1 tool call (child) = 11 spans; 22 in all.
    let spans = collector.exported_spans(22, Duration::from_secs(30)).await;
    let named =
        |name: &str| -> Vec<&ExportedSpan> { spans.iter().filter(|s| s.name == name).collect() };
    let trials: Vec<&ExportedSpan> = spans
        .iter()
        .filter(|s| s.name.starts_with("trial traced/t1/good#"))
        .collect();
    assert_eq!(
        trials.len(),
        2,
        "{:#?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    assert_ne!(
        trials[0].trace_id, trials[1].trace_id,
        "one trace per trial"
    );
    let children = named("anvil -p");
    assert_eq!(children.len(), 2);
    for trial in &trials {
        let in_trace: Vec<&ExportedSpan> = spans
            .iter()
            .filter(|s| s.trace_id == trial.trace_id)
            .collect();
        let agent = in_trace
            .iter()
            .find(|s| s.name == "agent" && s.parent_span_id == trial.span_id)
            .unwrap_or_else(|| panic!("no agent span under {}: {in_trace:#?}", trial.name));
        // The child's root continues the worker's agent span: one trace, two processes.
        let child = in_trace
            .iter()
            .find(|s| s.name == "anvil -p")
            .unwrap_or_else(|| panic!("the child's spans are not in {}'s trace", trial.name));
        assert_eq!(child.parent_span_id, agent.span_id);
        for name in [
            "workspace",
            "grade",
            "invoke_agent anvil",
            "execute_tool write_file",
        ] {
            assert!(
                in_trace.iter().any(|s| s.name == name),
                "{name} not in {}'s trace: {:#?}",
                trial.name,
                in_trace.iter().map(|s| &s.name).collect::<Vec<_>>()
            );
        }
        assert_eq!(
            in_trace
                .iter()
                .filter(|s| s.name == "chat claude-good")
                .count(),
            2
        );
    }

    // Trial outcomes as a metric, from the worker; token usage from the children.
    let metrics =
        serde_json::to_string(&collector.exported_metrics(2, Duration::from_secs(30)).await)
            .unwrap();
    for name in ["anvil.trials", "gen_ai.client.token.usage"] {
        assert!(
            metrics.contains(&format!("\"name\":\"{name}\"")),
            "{name}: {metrics}"
        );
    }
    assert!(metrics.contains("passed"), "{metrics}");

    // Each record names its trial's trace.
    let export = support::evals_command(
        home.path(),
        &[
            "export",
            "--sweep",
            "traced",
            "--queue",
            &queue.display().to_string(),
        ],
    )
    .output()
    .unwrap();
    let records: Vec<Value> = String::from_utf8_lossy(&export.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), 2);
    let mut recorded: Vec<&str> = records
        .iter()
        .map(|r| r["trace_id"].as_str().unwrap_or_else(|| panic!("{r}")))
        .collect();
    let mut exported: Vec<&str> = trials.iter().map(|t| t.trace_id.as_str()).collect();
    recorded.sort_unstable();
    exported.sort_unstable();
    assert_eq!(recorded, exported);
}
