//! Harness overhead per step: a scripted turn of 1,000 steps, each calling read_file on a
//! small file, against the same 1,000 read_file calls dispatched directly. The difference,
//! divided by 1,000, is what the loop itself costs per step (sampling a scripted response,
//! building the message, validating the transcript, dispatch, events), without the tool's I/O.
//!
//! `turn_of_1000_read_file_steps_with_session` is the same turn kept in a session file (every
//! record written, `tool_started`/`tool_finished` synced) on a tmpfs (/dev/shm), where a sync
//! costs nothing: the per-step cost of sessions excluding the documented syncs (their disk
//! cost is in the `session` bench).
//!
//! `…_traced_json_log` runs the same turn with a subscriber recording every span and event as
//! a JSON log line (to a sink): what `ANVIL_LOG=info` costs. `…_traced_otlp` exports every
//! span over OTLP/gRPC to a local in-process receiver (the SDK's batch exporter, as `anvil`
//! runs it). Without a subscriber (the first bench) the spans are disabled callsites.
//!
//! Run: `cargo bench -p anvil-agent`.

use std::sync::Arc;

use anvil_agent::file_access::FileAccess;
use anvil_agent::sandbox::{Sandbox, SandboxPolicy};
use anvil_agent::secrets::ChildEnv;
use anvil_agent::tools::register_coding_tools;
use anvil_agent::{Agent, AgentConfig, EventSink, ToolContext, ToolRegistry, TurnOutcome};
use anvil_llm::ContentBlock;
use anvil_llm::testing::{ScriptedProvider, script};
use divan::Bencher;
use opentelemetry_otlp::WithExportConfig;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const STEPS: usize = 1_000;

fn main() {
    divan::main();
}

struct Fixture {
    _dir: tempfile::TempDir,
    root: std::path::PathBuf,
    tools: Arc<ToolRegistry>,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let root = dir.path().canonicalize().unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(
        root.join("small.txt"),
        "fn main() {\n    println!(\"hi\");\n}\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let access = Arc::new(FileAccess::workspace(&root).unwrap_or_else(|e| panic!("{e}")));
    let mut tools = ToolRegistry::new();
    register_coding_tools(
        &mut tools,
        access,
        ChildEnv::default(),
        Arc::new(Sandbox::new(SandboxPolicy::FullAccess, &root)),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    Fixture {
        _dir: dir,
        root,
        tools: Arc::new(tools),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// An agent scripted to call read_file `STEPS` times, then answer.
fn scripted_agent(f: &Fixture) -> Agent {
    let mut steps: Vec<_> = (0..STEPS)
        .map(|i| {
            script::tool_call(
                &format!("c{i}"),
                "read_file",
                json!({"file_path": "small.txt"}),
            )
        })
        .collect();
    steps.push(script::text("done"));
    let provider = Arc::new(ScriptedProvider::new(steps).without_recording());
    Agent::new(
        provider,
        Arc::clone(&f.tools),
        AgentConfig {
            max_steps: STEPS as u32 + 1,
            ..AgentConfig::default()
        },
        &f.root,
        EventSink::discard(),
    )
}

fn run_turn(rt: &tokio::runtime::Runtime, mut agent: Agent) -> Agent {
    let outcome =
        rt.block_on(agent.run_turn(vec![ContentBlock::text("go")], CancellationToken::new()));
    assert_eq!(outcome, TurnOutcome::Done);
    agent
}

#[divan::bench(sample_count = 10)]
fn turn_of_1000_read_file_steps(bencher: Bencher) {
    let rt = runtime();
    let f = fixture();
    bencher
        .with_inputs(|| scripted_agent(&f))
        .bench_local_values(|agent| run_turn(&rt, agent));
}

#[divan::bench(sample_count = 10)]
fn turn_of_1000_read_file_steps_with_session(bencher: Bencher) {
    let rt = runtime();
    let f = fixture();
    let shm = tempfile::tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .unwrap_or_else(|e| panic!("{e}"));
    let store = anvil_agent::session::SessionStore::new(shm.path());
    bencher
        .with_inputs(|| {
            let (writer, loaded) = store
                .create(&f.root, "scripted", None)
                .unwrap_or_else(|e| panic!("{e}"));
            scripted_agent(&f)
                .with_session(writer, loaded)
                .unwrap_or_else(|e| panic!("{e}"))
        })
        .bench_local_values(|agent| run_turn(&rt, agent));
}

#[divan::bench(sample_count = 10)]
fn read_file_1000_calls_alone(bencher: Bencher) {
    let rt = runtime();
    let f = fixture();
    let ctx = ToolContext::new(&f.root);
    let args = json!({"file_path": "small.txt"});
    bencher.bench_local(|| {
        rt.block_on(async {
            for i in 0..STEPS {
                divan::black_box(
                    f.tools
                        .dispatch(&format!("c{i}"), "read_file", &args, &ctx)
                        .await,
                );
            }
        })
    });
}

#[divan::bench(sample_count = 10)]
fn turn_of_1000_read_file_steps_traced_json_log(bencher: Bencher) {
    let rt = runtime();
    let f = fixture();
    // The layer `anvil` logs with at ANVIL_LOG=info (runner/src/telemetry.rs): events only,
    // metric events left out.
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    let subscriber = tracing_subscriber::registry().with(
        tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(false)
            .with_span_list(false)
            .with_writer(std::io::sink)
            .with_filter(tracing_subscriber::EnvFilter::new(format!(
                "info,{}=off",
                anvil_agent::telemetry::METRICS
            )))
            .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
                meta.is_event()
            })),
    );
    let _guard = tracing::subscriber::set_default(subscriber);
    bencher
        .with_inputs(|| scripted_agent(&f))
        .bench_local_values(|agent| run_turn(&rt, agent));
}

#[divan::bench(sample_count = 10)]
fn turn_of_1000_read_file_steps_traced_otlp(bencher: Bencher) {
    use opentelemetry::trace::TracerProvider as _;
    use tracing_subscriber::layer::SubscriberExt;
    // The receiver and the exporter's runtime, apart from the turn's (as in `anvil`).
    let otlp_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let collector = otlp_rt
        .block_on(fake_opentelemetry_collector::FakeCollectorServer::start())
        .unwrap_or_else(|e| panic!("{e}"));
    let endpoint = collector.endpoint();
    // The receiver is drained as it receives, as a real one would be.
    let mut collector = collector;
    otlp_rt.spawn(async move {
        loop {
            divan::black_box(
                collector
                    .exported_spans(1, std::time::Duration::from_millis(50))
                    .await,
            );
        }
    });
    let provider = {
        let _entered = otlp_rt.enter();
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint)
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        opentelemetry_sdk::trace::SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .build()
    };
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("bench")));
    let _guard = tracing::subscriber::set_default(subscriber);
    let rt = runtime();
    let f = fixture();
    bencher
        .with_inputs(|| scripted_agent(&f))
        .bench_local_values(|agent| run_turn(&rt, agent));
    let _ = provider.shutdown();
}
