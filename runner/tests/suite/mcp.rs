//! MCP through the real `anvil` binary, against real servers (installed by
//! `scripts/install-deps.sh --tests`): `anvil -p` waits for its servers and the model calls
//! one; `anvil mcp list` and `call`; the interactive prompt is up while a server hangs and
//! `/mcp` says so; and the official conformance suite against `anvil mcp conformance`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::process::Stdio;
use std::time::{Duration, Instant};

use anvil_llm::mcp_config::McpServerConfig;
use anvil_test_support::mcp;
use serde_json::{Value, json};

use super::cli::{ANVIL, Machine, Tmux, machine, server, text_answer, tool_answer};

/// `[mcp_servers.NAME]` for `config`.
fn section(name: &str, config: &McpServerConfig) -> String {
    let mut t = toml_table(config);
    t.insert(0, format!("\n[mcp_servers.{name}]"));
    t.join("\n") + "\n"
}

fn toml_table(c: &McpServerConfig) -> Vec<String> {
    let mut lines = Vec::new();
    let q = |s: &str| serde_json::to_string(s).unwrap();
    if let Some(cmd) = &c.command {
        lines.push(format!("command = {}", q(cmd)));
    }
    if !c.args.is_empty() {
        let args: Vec<String> = c.args.iter().map(|a| q(a)).collect();
        lines.push(format!("args = [{}]", args.join(", ")));
    }
    if !c.env.is_empty() {
        let env: Vec<String> = c
            .env
            .iter()
            .map(|(k, v)| format!("{k} = {}", q(v)))
            .collect();
        lines.push(format!("env = {{ {} }}", env.join(", ")));
    }
    if let Some(url) = &c.url {
        lines.push(format!("url = {}", q(url)));
    }
    if let Some(s) = c.startup_timeout_secs {
        lines.push(format!("startup_timeout_secs = {s}"));
    }
    lines
}

fn add_servers(m: &Machine, servers: &[(&str, McpServerConfig)]) {
    let path = m.home.path().join("cfg/anvil/config.toml");
    let mut text = std::fs::read_to_string(&path).unwrap();
    for (name, config) in servers {
        text.push_str(&section(name, config));
    }
    std::fs::write(path, text).unwrap();
}

fn broken() -> McpServerConfig {
    McpServerConfig {
        command: Some("sh".into()),
        args: vec!["-c".into(), "echo 'missing API token' >&2; exit 3".into()],
        enabled: true,
        ..Default::default()
    }
}

fn hanging(startup: u64) -> McpServerConfig {
    McpServerConfig {
        command: Some("sleep".into()),
        args: vec!["600".into()],
        startup_timeout_secs: Some(startup),
        enabled: true,
        ..Default::default()
    }
}

/// Processes whose command line holds `needle` (servers left behind).
fn running(needle: &str) -> usize {
    let out = std::process::Command::new("pgrep")
        .args(["-f", needle])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).lines().count()
}

#[tokio::test(flavor = "multi_thread")]
async fn headless_waits_for_its_servers_and_the_model_calls_one_by_its_exposed_name() {
    let server = server(vec![
        tool_answer(
            "toolu_1",
            "mcp__everything__echo",
            json!({"message": "from a model"}),
        ),
        text_answer("The server echoed it."),
    ])
    .await;
    let m = machine(&server);
    let marker = format!("anvil-headless-mcp-{}", std::process::id());
    let mut everything = mcp::everything();
    everything.args = vec!["stdio".into(), marker.clone()];
    add_servers(&m, &[("everything", everything), ("broken", broken())]);
    let out = m
        .command()
        .args([
            "-p",
            "echo it",
            "--output-format",
            "json",
            "--permission-mode",
            "bypass",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let requests = server.requests();
    let offered: Vec<&str> = requests[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(offered.contains(&"mcp__everything__echo"), "{offered:?}");
    assert!(
        offered.contains(&"read_file"),
        "native tools stay: {offered:?}"
    );
    let second = requests[1]["messages"].to_string();
    assert!(second.contains("Echo: from a model"), "{second}");
    // The broken server did not stop the turn; nothing of the servers is left.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(running(&marker), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn anvil_mcp_list_and_call() {
    let server = server(vec![]).await;
    let m = machine(&server);
    add_servers(
        &m,
        &[
            ("everything", mcp::everything()),
            ("time", mcp::python("mcp_server_time", &[])),
            ("broken", broken()),
        ],
    );
    let out = m.command().args(["mcp", "list"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a failed server: exit 1\n{stdout}"
    );
    let lines: Vec<Vec<&str>> = stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    assert_eq!(lines[0][..2], ["broken", "failed"], "{stdout}");
    assert!(stdout.contains("missing API token"), "{stdout}");
    assert_eq!(lines[1], ["everything", "connected", "15", "tools"]);
    assert_eq!(lines[2], ["time", "connected", "2", "tools"]);

    let out = m
        .command()
        .args([
            "mcp",
            "call",
            "everything",
            "echo",
            "--args",
            r#"{"message":"hello"}"#,
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "Echo: hello");

    let out = m
        .command()
        .args(["mcp", "call", "everything", "nope"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("has no tool 'nope' (its tools: echo,"));
    let out = m
        .command()
        .args(["mcp", "call", "everything", "echo", "--args", "[1]"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("must be a JSON object"));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_prompt_is_up_while_a_server_hangs_and_slash_mcp_says_where_each_is() {
    let server = server(vec![]).await;
    let m = machine(&server);
    add_servers(
        &m,
        &[("everything", mcp::everything()), ("slow", hanging(60))],
    );
    let started = Instant::now();
    let tmux = Tmux::start(&m, 200);
    tmux.wait_for_prompt();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the prompt waited for a server: {:?}",
        started.elapsed()
    );
    tmux.wait_until("everything connected", |_| {
        tmux.send(&["/mcp", "Enter"]);
        std::thread::sleep(Duration::from_millis(300));
        tmux.screen().contains("connected, 15 tools")
    });
    let screen = tmux.screen();
    assert!(
        screen.contains("slow") && screen.contains("starting"),
        "{screen}"
    );
    let leaving = Instant::now();
    tmux.send(&["/exit", "Enter"]);
    tmux.wait_until("the session ended", |_| running("sleep 600") == 0);
    assert!(
        leaving.elapsed() < Duration::from_secs(5),
        "{:?}",
        leaving.elapsed()
    );
}

/// The official client conformance suite (pinned by install-deps) runs `anvil mcp conformance
/// URL` per scenario. The baseline expects only the OAuth scenarios (auth/*) to fail: anvil
/// has no OAuth yet. A scenario that starts passing fails this test until it leaves the
/// baseline.
#[tokio::test(flavor = "multi_thread")]
async fn the_mcp_conformance_suite_passes_but_for_oauth() {
    let out_dir = tempfile::tempdir().unwrap();
    let baseline =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp-conformance-baseline.yml");
    let out = tokio::process::Command::new(mcp::node22())
        .arg(mcp::conformance_js())
        .args([
            "client",
            "--command",
            &format!("{ANVIL} mcp conformance"),
            "--suite",
            "all",
        ])
        .arg("--expected-failures")
        .arg(&baseline)
        .arg("-o")
        .arg(out_dir.path())
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary = stdout
        .split("=== SUITE SUMMARY ===")
        .nth(1)
        .unwrap_or(&stdout)
        .to_string();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{summary}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for scenario in [
        "initialize",
        "tools_call",
        "elicitation-sep1034-client-defaults",
        "sse-retry",
    ] {
        let line = summary
            .lines()
            .find(|l| l.contains(&format!(" {scenario}:")))
            .unwrap_or_else(|| panic!("{scenario} did not run:\n{summary}"));
        assert!(line.contains("0 failed"), "{line}");
    }
    let _ = Value::Null;
}

/// A task's MCP server runs inside the trial's sandbox, like its commands: it cannot read
/// what the trial hides (the task directory with the solution), cannot write outside the
/// workspace, and gets no credential from anvil's environment.
#[tokio::test(flavor = "multi_thread")]
async fn a_tasks_mcp_server_runs_inside_the_trials_sandbox() {
    use anvil_llm::config::{Config, ConfigFile};
    use anvil_llm::registry::Registry;
    use anvil_runner::contract::TrialConfig;
    let trial_dir_name = "trial";
    let m = {
        let placeholder = server(vec![]).await;
        machine(&placeholder)
    };
    let trial_dir = m.home.path().join(trial_dir_name);
    std::fs::create_dir_all(&trial_dir).unwrap();
    std::fs::write(trial_dir.join("solution.txt"), "THE ANSWER").unwrap();
    let outside = m.home.path().join("outside.txt");
    let model_server = server(vec![
        tool_answer(
            "toolu_1",
            "mcp__probe__probe",
            json!({"read": trial_dir.join("solution.txt"), "write": outside}),
        ),
        text_answer("probed"),
    ])
    .await;
    let user = format!(
        "[providers.mock]\nkind = \"anthropic\"\nbase_url = \"{}\"\napi_key_env = \"MOCK_API_KEY\"\n\n[models.test]\nprovider = \"mock\"\nmodel = \"claude-test\"\n",
        model_server.uri()
    );
    let user = ConfigFile::parse(&user, std::path::Path::new("u.toml")).unwrap();
    let config = Config::merge(Some(("u.toml".into(), user)), None, false).unwrap();
    let model = Registry::with_env(config, |_| None).pin("test").unwrap();
    std::fs::copy(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/probe_mcp_server.py"),
        m.repo.join("probe_mcp_server.py"),
    )
    .unwrap();
    let config_path = trial_dir.join(TrialConfig::FILE_NAME);
    TrialConfig {
        model,
        hidden: vec![trial_dir.clone()],
        session_path: None,
        readable: Vec::new(),
        mcp_servers: [(
            "probe".to_string(),
            McpServerConfig {
                command: Some("/usr/bin/python3".into()),
                args: vec!["probe_mcp_server.py".into()],
                enabled: true,
                ..Default::default()
            },
        )]
        .into(),
    }
    .write(&config_path)
    .unwrap();
    let out = m
        .command()
        .args([
            "-p",
            "probe",
            "--output-format",
            "json",
            "--permission-mode",
            "bypass",
        ])
        .arg("--pinned-config")
        .arg(&config_path)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let requests = model_server.requests();
    let result = requests[1]["messages"].to_string();
    assert!(result.contains("read: refused"), "{result}");
    assert!(!result.contains("THE ANSWER"), "{result}");
    assert!(result.contains("key: absent"), "{result}");
    // Outside the workspace it writes at most into the sandbox's private /tmp: never the host.
    assert!(!outside.exists(), "{result}");
}

/// A user's server must not run code from the repository anvil works in: `python3 -m NAME` and
/// `npx NAME` look in the current directory first, so servers run from the home directory,
/// not the workspace (a reviewer made `anvil mcp list` run a repository's
/// `mcp_server_time/__main__.py` that way).
#[tokio::test(flavor = "multi_thread")]
async fn a_repository_cannot_run_code_through_a_users_server() {
    let server = server(vec![]).await;
    let m = machine(&server);
    let marker = m.home.path().join("repo-code-ran");
    std::fs::create_dir_all(m.repo.join("planted_mcp")).unwrap();
    std::fs::write(
        m.repo.join("planted_mcp/__main__.py"),
        format!(
            "open({:?}, 'w').write('ran')\n",
            marker.display().to_string()
        ),
    )
    .unwrap();
    let config = McpServerConfig {
        command: Some("/usr/bin/python3".into()),
        args: vec!["-m".into(), "planted_mcp".into()],
        enabled: true,
        ..Default::default()
    };
    add_servers(&m, &[("py", config)]);
    let out = m.command().args(["mcp", "list"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!marker.exists(), "the repository's module ran: {stdout}");
    assert!(stdout.contains("No module named planted_mcp"), "{stdout}");
}

/// SIGQUIT (Ctrl-\) and the other signals that end a process kill the servers too.
#[tokio::test(flavor = "multi_thread")]
async fn signals_that_end_anvil_end_its_servers() {
    let server = server(vec![]).await;
    let m = machine(&server);
    for (n, signal) in [("quit", "QUIT"), ("usr1", "USR1"), ("term", "TERM")] {
        let marker = format!("anvil-signal-{n}-{}", std::process::id());
        let mut everything = mcp::everything();
        everything.args = vec!["stdio".into(), marker.clone()];
        let path = m.home.path().join("cfg/anvil/config.toml");
        let base = std::fs::read_to_string(&path).unwrap();
        let base = base.split("\n[mcp_servers.").next().unwrap().to_string();
        std::fs::write(&path, base + &section("ev", &everything)).unwrap();
        let mut child = m
            .command()
            .args(["mcp", "call", "ev", "trigger-long-running-operation"])
            .args(["--args", r#"{"duration": 30, "steps": 30}"#])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        anvil_test_support::poll::poll_until(Duration::from_secs(10), "the server up", || {
            (running(&marker) > 0).then_some(())
        });
        std::thread::sleep(Duration::from_millis(500));
        std::process::Command::new("kill")
            .args([&format!("-{signal}"), &child.id().to_string()])
            .status()
            .unwrap();
        child.wait().unwrap();
        anvil_test_support::poll::poll_until(
            Duration::from_secs(1),
            &format!("the server gone after SIG{signal}"),
            || (running(&marker) == 0).then_some(()),
        );
    }
}

/// A server asks the user mid-call (elicitation): the REPL shows its message, reads each field
/// (Enter takes the default), and sends what was accepted back to the server.
#[tokio::test(flavor = "multi_thread")]
async fn the_repl_answers_a_servers_elicitation() {
    let server = server(vec![
        tool_answer(
            "toolu_1",
            "mcp__everything__trigger-elicitation-request",
            json!({}),
        ),
        text_answer("Thanks."),
    ])
    .await;
    let m = machine(&server);
    add_servers(&m, &[("everything", mcp::everything())]);
    let tmux = Tmux::start(&m, 200);
    tmux.wait_for_prompt();
    tmux.wait_until("everything connected", |_| {
        tmux.send(&["/mcp", "Enter"]);
        std::thread::sleep(Duration::from_millis(300));
        tmux.screen().contains("connected, 15 tools")
    });
    tmux.send(&["ask me", "Enter"]);
    tmux.wait_for("[y]es  [a]lways  [n]o");
    tmux.send(&["y", "Enter"]);
    tmux.wait_for("MCP server 'everything' asks: Please provide inputs");
    // Answer the fields: a name for the one without a default, Enter for the rest.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(Instant::now() < deadline, "{}", tmux.screen());
        std::thread::sleep(Duration::from_millis(150));
        let screen = tmux.screen();
        let last = screen
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .trim()
            .to_string();
        if !last.ends_with('›') {
            continue;
        }
        if last.contains("[a]ccept") {
            tmux.send(&["a", "Enter"]);
            break;
        }
        if last == "String ›" {
            tmux.send(&["Ada Lovelace", "Enter"]);
        } else {
            tmux.send(&["Enter"]);
        }
        // Wait for the prompt to move on before answering the next one.
        tmux.wait_until("the next field", |s| {
            s.lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .map(str::trim)
                != Some(last.as_str())
        });
    }
    tmux.wait_for("Thanks.");
    let second = server.requests()[1]["messages"].to_string();
    assert!(
        second.contains("User provided the requested information"),
        "{second}"
    );
    assert!(second.contains("Ada Lovelace"), "{second}");
    assert!(
        second.contains("42"),
        "the integer's default was sent: {second}"
    );
    tmux.send(&["/exit", "Enter"]);
}
