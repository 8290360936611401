//! What MCP servers cost (real servers from `scripts/install-deps.sh --tests`):
//! - the interactive session's time to its prompt (the banner line on stdout, printed once the
//!   session is built and the line editor is next) with no server configured, and with four
//!   stdio servers of which one hangs — servers start in the background, so the two should not
//!   differ;
//! - starting server-everything over stdio, listing its tools and calling `echo`, in process;
//! - a headless two-request turn with no server and with two configured (headless waits for
//!   them, so this is the price of offering their tools).
//!
//! Run: `cargo bench -p anvil-runner --bench mcp`.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anvil_agent::mcp::{ConnectOptions, Decline, Deferral, McpServers};
use anvil_agent::secrets::{ChildEnv, Redactor};
use anvil_agent::{Tool, ToolContext};
use anvil_llm::mcp_config::McpServerConfig;
use anvil_llm::testing::anthropic_sse::{self, Usage};
use anvil_test_support::mcp;
use anvil_test_support::model_server::{Answer, ScriptedServer, WireFormat};
use serde_json::json;

const ANVIL: &str = env!("CARGO_BIN_EXE_anvil");
const RUNS: usize = 15;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn section(name: &str, c: &McpServerConfig) -> String {
    let q = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let mut t = format!(
        "\n[mcp_servers.{name}]\ncommand = {}\n",
        q(c.command.as_deref().unwrap_or(""))
    );
    let args: Vec<String> = c.args.iter().map(|a| q(a)).collect();
    t.push_str(&format!("args = [{}]\n", args.join(", ")));
    for (k, v) in &c.env {
        t.push_str(&format!("env.{k} = {}\n", q(v)));
    }
    if let Some(s) = c.startup_timeout_secs {
        t.push_str(&format!("startup_timeout_secs = {s}\n"));
    }
    t
}

fn hanging() -> McpServerConfig {
    McpServerConfig {
        command: Some("sleep".into()),
        args: vec!["600".into()],
        startup_timeout_secs: Some(60),
        enabled: true,
        ..Default::default()
    }
}

struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    fn new(model_uri: &str, servers: &[(&str, McpServerConfig)]) -> Home {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let cfg = dir.path().join("cfg/anvil");
        std::fs::create_dir_all(&cfg).unwrap_or_else(|e| panic!("{e}"));
        let mut text = format!(
            "default_model = \"bench\"\n[providers.mock]\nkind = \"anthropic\"\nbase_url = \"{model_uri}\"\napi_key_env = \"MOCK_KEY\"\n[models.bench]\nprovider = \"mock\"\nmodel = \"m\"\n"
        );
        for (name, c) in servers {
            text.push_str(&section(name, c));
        }
        std::fs::write(cfg.join("config.toml"), text).unwrap_or_else(|e| panic!("{e}"));
        Home { dir }
    }

    fn command(&self, repo: &std::path::Path) -> Command {
        let mut c = Command::new(ANVIL);
        c.current_dir(repo)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.dir.path())
            .env("XDG_CONFIG_HOME", self.dir.path().join("cfg"))
            .env("XDG_DATA_HOME", self.dir.path().join("data"))
            .env("MOCK_KEY", "k");
        c
    }

    fn repo(&self, name: &str) -> std::path::PathBuf {
        let repo = self.dir.path().join(name);
        std::fs::create_dir_all(&repo).unwrap_or_else(|e| panic!("{e}"));
        let _ = Command::new("git")
            .args(["init", "-q"])
            .current_dir(&repo)
            .status();
        repo
    }
}

/// From spawning the interactive `anvil` to its banner on stdout; then `/exit`.
fn to_prompt(home: &Home, repo: &std::path::Path) -> Duration {
    let t = Instant::now();
    let mut child = home
        .command(repo)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    let mut out = BufReader::new(child.stdout.take().unwrap_or_else(|| panic!("stdout")));
    let mut line = String::new();
    let _ = out.read_line(&mut line);
    let took = t.elapsed();
    assert!(line.contains("/help for commands"), "{line}");
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(b"/exit\n");
    }
    let _ = child.wait();
    took
}

fn turn(home: &Home, repo: &std::path::Path) -> Duration {
    let t = Instant::now();
    let out = home
        .command(repo)
        .args([
            "-p",
            "write hi",
            "--output-format",
            "json",
            "--permission-mode",
            "accept-edits",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let took = t.elapsed();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

fn main() {
    let rt = tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("{e}"));
    let n = AtomicUsize::new(0);
    let server = rt.block_on(ScriptedServer::answering(
        WireFormat::AnthropicMessages,
        move |_| {
            let i = n.fetch_add(1, Ordering::SeqCst);
            let usage = Usage {
                input: 10,
                output: 5,
            };
            Answer::sse(if i.is_multiple_of(2) {
                let input = json!({"file_path": "out.txt", "content": "hi\n"});
                anthropic_sse::tool_use(
                    &format!("toolu_{i}"),
                    "write_file",
                    &input,
                    "tool_use",
                    usage,
                )
            } else {
                anthropic_sse::text("Wrote out.txt.", usage)
            })
        },
    ));
    let none = Home::new(&server.uri(), &[]);
    let four = Home::new(
        &server.uri(),
        &[
            ("everything", mcp::everything()),
            ("fs", mcp::filesystem(std::path::Path::new("/tmp"))),
            ("time", mcp::python("mcp_server_time", &[])),
            ("hangs", hanging()),
        ],
    );
    let two = Home::new(
        &server.uri(),
        &[
            ("everything", mcp::everything()),
            ("time", mcp::python("mcp_server_time", &[])),
        ],
    );

    let (mut p0, mut p4) = (Vec::new(), Vec::new());
    for i in 0..RUNS {
        p0.push(to_prompt(&none, &none.repo(&format!("p{i}"))));
        p4.push(to_prompt(&four, &four.repo(&format!("p{i}"))));
    }

    let mut echo = Vec::new();
    for _ in 0..RUNS {
        let t = Instant::now();
        rt.block_on(async {
            let configs = BTreeMap::from([("everything".to_string(), mcp::everything())]);
            let servers = McpServers::start(
                &configs,
                ConnectOptions {
                    workspace: std::env::temp_dir(),
                    cwd: std::env::temp_dir(),
                    env: ChildEnv::default().vars(),
                    redactor: Arc::new(Redactor::default()),
                    sandbox: None,
                    elicitor: Arc::new(Decline),
                },
                Deferral::default(),
            );
            servers.wait_started().await;
            let tool = servers
                .tool("everything", "echo")
                .unwrap_or_else(|| panic!("no echo"));
            let out = tool
                .call(
                    json!({"message": "hi"}),
                    &ToolContext::new(std::env::temp_dir()),
                )
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(out.text, "Echo: hi");
            servers.shutdown(Duration::from_secs(1)).await;
        });
        echo.push(t.elapsed());
    }

    let (mut t0, mut t2) = (Vec::new(), Vec::new());
    for i in 0..RUNS {
        t0.push(turn(&none, &none.repo(&format!("t{i}"))));
        t2.push(turn(&two, &two.repo(&format!("t{i}"))));
    }

    println!("MCP                                          median");
    println!(
        "to the prompt, no server                     {:>8.2?}",
        median(p0)
    );
    println!(
        "to the prompt, 4 stdio servers (1 hangs)     {:>8.2?}",
        median(p4)
    );
    println!(
        "everything over stdio: start, list, echo     {:>8.2?}",
        median(echo)
    );
    println!(
        "headless 2-request turn, no server           {:>8.2?}",
        median(t0)
    );
    println!(
        "headless 2-request turn, 2 servers           {:>8.2?}",
        median(t2)
    );
}
