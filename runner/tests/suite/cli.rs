//! The real `anvil` binary against the scripted server answering in the Anthropic wire format,
//! in temporary git repositories: headless output and exit codes, stream-json with a slow
//! reader, a closed stdout pipe, and an interactive session under tmux.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anvil_llm::testing::anthropic_sse::{self, Usage};
use anvil_test_support::home::Home;
use anvil_test_support::model_server::{Answer, ScriptedServer, WireFormat};
use anvil_test_support::poll::poll_until;
use serde_json::{Value, json};

pub(super) const ANVIL: &str = env!("CARGO_BIN_EXE_anvil");

// ---- a scripted Anthropic server ------------------------------------------------------------

const USAGE_TEXT: Usage = Usage {
    input: 50,
    output: 7,
};
const USAGE_TOOL: Usage = Usage {
    input: 50,
    output: 12,
};

pub(super) fn text_answer(text: &str) -> String {
    anthropic_sse::text(text, USAGE_TEXT)
}

pub(super) fn tool_answer(id: &str, name: &str, input: Value) -> String {
    tool_answer_ending(id, name, input, "tool_use")
}

fn tool_answer_ending(id: &str, name: &str, input: Value, stop_reason: &str) -> String {
    anthropic_sse::tool_use(id, name, &input, stop_reason, USAGE_TOOL)
}

/// Answers requests with `bodies` in order; past the end, with an error.
pub(super) async fn server(bodies: Vec<String>) -> ScriptedServer {
    ScriptedServer::in_order(WireFormat::AnthropicMessages, bodies).await
}

// ---- a user's machine: home, config, a git repository ------------------------------------------

pub(super) struct Machine {
    pub(super) home: Home,
    pub(super) repo: PathBuf,
}

pub(super) fn machine(server: &ScriptedServer) -> Machine {
    let home = Home::new();
    home.write_config(&format!(
        "default_model = \"test\"\n\n[providers.mock]\nkind = \"anthropic\"\nbase_url = \"{}\"\napi_key_env = \"MOCK_API_KEY\"\n\n[models.test]\nprovider = \"mock\"\nmodel = \"claude-test\"\n",
        server.uri()
    ));
    let repo = home.git_repo("repo", &[("greet.txt", "hello world\n")]);
    Machine { home, repo }
}

impl Machine {
    /// `anvil` in the repository, seeing only the home.
    pub(super) fn command(&self) -> Command {
        let mut c = self.home.command(ANVIL);
        c.current_dir(&self.repo);
        c
    }
}

fn edit_script() -> Vec<String> {
    vec![
        tool_answer("toolu_1", "read_file", json!({"file_path": "greet.txt"})),
        tool_answer(
            "toolu_2",
            "edit_file",
            json!({"file_path": "greet.txt", "old_string": "hello", "new_string": "goodbye"}),
        ),
        text_answer("Changed the greeting."),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn headless_json_edits_the_file_and_exits_0() {
    let server = server(edit_script()).await;
    let m = machine(&server);
    let out = m
        .command()
        .args([
            "-p",
            "make it say goodbye",
            "--output-format",
            "json",
            "--permission-mode",
            "accept-edits",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(m.repo.join("greet.txt")).unwrap(),
        "goodbye world\n"
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout.lines().count(), 1, "one JSON object: {stdout}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["outcome"], "done");
    assert_eq!(v["text"], "Changed the greeting.");
    assert_eq!(v["steps"], 3);
    assert_eq!(v["usage"]["input"], 150);
    assert_eq!(v["usage"]["output"], 31);
    // Nothing is logged to the terminal in headless mode.
    assert!(
        out.stderr.is_empty(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The requests went out with the system prompt, the tools and the cache breakpoints.
    let requests = server.received_requests().await.unwrap();
    let first: Value = serde_json::from_slice(&requests[0].body).unwrap();
    assert_eq!(requests[0].headers["x-api-key"], "sk-mock-key-123");
    assert!(
        first["system"][0]["text"]
            .as_str()
            .unwrap()
            .contains("You are anvil")
    );
    assert_eq!(first["tools"].as_array().unwrap().len(), 6);
    assert_eq!(first.to_string().matches("cache_control").count(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn headless_text_prints_only_the_answer_and_reads_stdin() {
    let server = server(vec![text_answer("Looks fine.")]).await;
    let m = machine(&server);
    let mut child = m
        .command()
        .args(["-p", "review this"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"diff --git a/x b/x\n+new line\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "Looks fine.\n");
    assert!(out.stderr.is_empty());
    let requests = server.received_requests().await.unwrap();
    let body: Value = serde_json::from_slice(&requests[0].body).unwrap();
    let sent = body["messages"][0]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(sent, "review this\n\ndiff --git a/x b/x\n+new line");
}

/// The JSON a real `anvil -p` prints is exactly the contract type the eval worker reads.
#[tokio::test(flavor = "multi_thread")]
async fn headless_json_is_what_the_trial_reader_reads() {
    use anvil_runner::contract::{HeadlessOutcome, HeadlessOutput};
    let server = server(edit_script()).await;
    let m = machine(&server);
    let out = m
        .command()
        .args(["-p", "go", "--output-format", "json"])
        .args(["--permission-mode", "accept-edits"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let Some(Ok(HeadlessOutput::Turn(result))) =
        HeadlessOutput::parse(&String::from_utf8_lossy(&out.stdout))
    else {
        panic!("{}", String::from_utf8_lossy(&out.stdout));
    };
    assert_eq!(result.outcome, HeadlessOutcome::Done);
    assert_eq!((result.steps, result.usage.input), (3, 150));
    assert_eq!(
        (result.model.as_str(), result.provider.as_str()),
        ("test", "mock")
    );
    assert_eq!(result.config_digest.len(), 64);
    let out = m
        .command()
        .env_remove("MOCK_API_KEY")
        .args(["-p", "x", "--output-format", "json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(6));
    let parsed = HeadlessOutput::parse(&String::from_utf8_lossy(&out.stdout));
    assert!(
        matches!(&parsed, Some(Ok(HeadlessOutput::Setup(f))) if f.error.contains("MOCK_API_KEY")),
        "{parsed:?}"
    );
}

/// With `--pinned-config` (how an eval worker runs a trial) anvil reads no config file: the
/// repository's `.anvil/config.toml` cannot re-point the model or add rules, the user config
/// cannot change it either, and the model is exactly the pinned one.
#[tokio::test(flavor = "multi_thread")]
async fn a_pinned_config_is_the_whole_truth() {
    use anvil_llm::config::{Config, ConfigFile};
    use anvil_llm::registry::Registry;
    use anvil_runner::contract::{HeadlessOutput, TrialConfig};
    let pinned_server = server(edit_script()).await;
    let elsewhere = server(vec![text_answer("wrong server")]).await;
    let m = machine(&elsewhere);
    let user = format!(
        "[providers.mock]\nkind = \"anthropic\"\nbase_url = \"{}\"\napi_key_env = \"MOCK_API_KEY\"\n\n[models.test]\nprovider = \"mock\"\nmodel = \"claude-test\"\n",
        pinned_server.uri()
    );
    let user = ConfigFile::parse(&user, Path::new("u.toml")).unwrap();
    let config = Config::merge(Some(("u.toml".into(), user)), None, false).unwrap();
    let model = Registry::with_env(config, |_| None).pin("test").unwrap();
    let digest = model.digest();
    let trial_dir = m.home.path().join("trial");
    std::fs::create_dir_all(&trial_dir).unwrap();
    let config_path = trial_dir.join(TrialConfig::FILE_NAME);
    let transcript = trial_dir.join("sweeps/s1/t1/test/0.jsonl");
    TrialConfig {
        model,
        hidden: vec![trial_dir.clone()],
        session_path: Some(transcript.clone()),
        readable: Vec::new(),
        mcp_servers: Default::default(),
    }
    .write(&config_path)
    .unwrap();
    std::fs::create_dir_all(m.repo.join(".anvil")).unwrap();
    std::fs::write(
        m.repo.join(".anvil/config.toml"),
        "default_model = \"test\"\n[models.test]\nprovider = \"anthropic\"\nmodel = \"claude-opus\"\n[permissions]\ndeny = [\"edit_file\"]\n",
    )
    .unwrap();
    let out = m
        .command()
        .args(["-p", "make it say goodbye", "--output-format", "json"])
        .args(["--permission-mode", "accept-edits", "--pinned-config"])
        .arg(&config_path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let Some(Ok(HeadlessOutput::Turn(result))) = HeadlessOutput::parse(&stdout) else {
        panic!("{stdout}");
    };
    assert_eq!(result.config_digest, digest);
    assert_eq!(result.model_id, "claude-test");
    assert_eq!(
        std::fs::read_to_string(m.repo.join("greet.txt")).unwrap(),
        "goodbye world\n",
        "the project's deny rule did not apply"
    );
    assert_eq!(pinned_server.received_requests().await.unwrap().len(), 3);
    assert!(elsewhere.received_requests().await.unwrap().is_empty());
    // The session is the trial's transcript, exactly where the config says.
    let kept = anvil_agent::session::load(&transcript).unwrap();
    assert_eq!(result.session_id.as_deref(), Some(kept.state.id.as_str()));
    assert_eq!(kept.first_prompt.as_deref(), Some("make it say goodbye"));
    assert_eq!(kept.state.model, "claude-test");
    // Run again with the same config: the transcript is never written over.
    let before = std::fs::read(&transcript).unwrap();
    let out = m
        .command()
        .args(["-p", "again", "--output-format", "json", "--pinned-config"])
        .arg(&config_path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(6), "{stdout}");
    assert!(
        matches!(
            HeadlessOutput::parse(&stdout),
            Some(Ok(HeadlessOutput::Setup(f))) if f.error.contains("0.jsonl already exists")
        ),
        "{stdout}"
    );
    assert_eq!(std::fs::read(&transcript).unwrap(), before);
    // The model comes from the pinned config alone: -m beside it is a usage error.
    let out = m
        .command()
        .args(["-p", "x", "-m", "test", "--pinned-config"])
        .arg(&config_path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
}

#[tokio::test(flavor = "multi_thread")]
async fn headless_denies_what_the_permission_mode_does_not_allow() {
    let server = server(edit_script()).await;
    let m = machine(&server);
    let out = m
        .command()
        .args(["-p", "edit", "--output-format", "json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    // The edit was refused (default mode asks; nobody can answer headless), the file is intact.
    assert_eq!(
        std::fs::read_to_string(m.repo.join("greet.txt")).unwrap(),
        "hello world\n"
    );
    let requests = server.received_requests().await.unwrap();
    let third: Value = serde_json::from_slice(&requests[2].body).unwrap();
    assert!(
        third.to_string().contains("--permission-mode accept-edits"),
        "{third}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn permission_rules_from_the_user_config_apply_and_bad_ones_are_config_errors() {
    let server = server(vec![
        tool_answer(
            "toolu_1",
            "bash",
            json!({"command": "echo hi > from-rule.txt"}),
        ),
        text_answer("done"),
    ])
    .await;
    let m = machine(&server);
    let config = m.home.path().join("cfg/anvil/config.toml");
    let base = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        format!("{base}\n[permissions]\nallow = [\"bash(echo:*)\"]\n"),
    )
    .unwrap();
    // accept-edits still asks for commands: the allow rule is what lets this one run, and its
    // write through `>` is an edit, which accept-edits allows.
    let out = m
        .command()
        .args(["-p", "say hi", "--permission-mode", "accept-edits"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(m.repo.join("from-rule.txt")).unwrap(),
        "hi\n"
    );
    std::fs::write(
        &config,
        format!("{base}\n[permissions]\ndeny = [\"bash(\"]\n"),
    )
    .unwrap();
    let out = m.command().args(["-p", "say hi"]).output().unwrap();
    assert_eq!(out.status.code(), Some(6));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("config.toml: permissions.deny: invalid permission rule 'bash('"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_providers_credential_is_redacted_whatever_its_variable_is_called() {
    // MOCK_ACCESS carries no secret marker (KEY, TOKEN, …): only knowing it is the provider's
    // credential keeps it out of what the model sees.
    const ACCESS: &str = "mock-access-0123456789";
    let server = server(vec![
        tool_answer("toolu_1", "read_file", json!({"file_path": "notes.txt"})),
        text_answer("Read it."),
    ])
    .await;
    let m = machine(&server);
    let config = m.home.path().join("cfg/anvil/config.toml");
    let base = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, base.replace("MOCK_API_KEY", "MOCK_ACCESS")).unwrap();
    std::fs::write(m.repo.join("notes.txt"), format!("deploy with {ACCESS}\n")).unwrap();
    let out = m
        .command()
        .env("MOCK_ACCESS", ACCESS)
        .args(["-p", "read notes.txt"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests[0].headers["x-api-key"], ACCESS);
    let second = String::from_utf8_lossy(&requests[1].body);
    assert!(
        second.contains("deploy with [REDACTED:MOCK_ACCESS]"),
        "{second}"
    );
    assert!(!second.contains(ACCESS), "{second}");
}

#[tokio::test(flavor = "multi_thread")]
async fn max_steps_1_on_a_tool_task_exits_2() {
    let server = server(edit_script()).await;
    let m = machine(&server);
    let out = m
        .command()
        .args(["-p", "edit", "--max-steps", "1", "--output-format", "json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["outcome"], "max_steps");
}

#[tokio::test(flavor = "multi_thread")]
async fn abnormal_endings_have_their_own_exit_codes() {
    // max_tokens: the model was cut off mid tool call.
    let cut = tool_answer_ending(
        "toolu_1",
        "bash",
        json!({"command": "touch ran"}),
        "max_tokens",
    );
    for (body, code, outcome) in [
        (cut, 3, "max_tokens"),
        (
            text_answer("no").replace("end_turn", "refusal"),
            4,
            "refused",
        ),
        (
            text_answer("hm").replace("end_turn", "pause_turn"),
            5,
            "protocol_stopped",
        ),
    ] {
        let server = server(vec![body]).await;
        let m = machine(&server);
        let out = m
            .command()
            .args(["-p", "x", "--output-format", "json"])
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(code),
            "{outcome}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        // A cut-off tool call never runs.
        assert!(!m.repo.join("ran").exists());
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["outcome"], outcome);
    }
    // The provider keeps failing: exit 1, never 0.
    let failing = ScriptedServer::answering(WireFormat::AnthropicMessages, |_| {
        Answer::error(
            400,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}"#,
        )
    })
    .await;
    let m = machine(&failing);
    let out = m.command().args(["-p", "x"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("failed: HTTP 400 from the provider: bad")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn configuration_errors_exit_6_and_say_what_to_do() {
    let server = server(vec![]).await;
    let m = machine(&server);
    let out = m
        .command()
        .env_remove("MOCK_API_KEY")
        .args(["-p", "x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(6));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "anvil: MOCK_API_KEY is not set (needed by provider 'mock')\n"
    );
    let out = m
        .command()
        .args(["-p", "x", "-m", "nope"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(6));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("available aliases: haiku, local, sonnet, test")
    );
    let out = m.command().args(["--bogus"]).output().unwrap();
    assert_eq!(out.status.code(), Some(64));
}

#[tokio::test(flavor = "multi_thread")]
async fn stream_json_ends_with_turn_finished_even_for_a_slow_reader() {
    let server = server(edit_script()).await;
    let m = machine(&server);
    let mut child = m
        .command()
        .args([
            "-p",
            "edit",
            "--output-format",
            "stream-json",
            "--permission-mode",
            "accept-edits",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let reader = BufReader::new(child.stdout.take().unwrap());
    let mut lines = Vec::new();
    for line in reader.lines() {
        std::thread::sleep(Duration::from_millis(30));
        lines.push(line.unwrap());
    }
    assert_eq!(child.wait().unwrap().code(), Some(0));
    let events: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events.first().unwrap()["type"], "step_started");
    let last = events.last().unwrap();
    assert_eq!(last["type"], "turn_finished");
    assert_eq!(last["outcome"]["kind"], "done");
    assert_eq!(
        events
            .iter()
            .filter(|e| e["type"] == "turn_finished")
            .count(),
        1
    );
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "tool_call_finished" && e["name"] == "edit_file")
    );
}

/// Whether a live process carries `marker` in its command line (the tool's shell runs inside
/// the sandbox's own pid namespace, so its `$$` is not a host pid).
fn marked_alive(marker: &str) -> bool {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .any(|e| {
            let pid: i32 = match e.file_name().to_string_lossy().parse() {
                Ok(p) => p,
                Err(_) => return false,
            };
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(marker))
                && alive(pid)
        })
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false)
}

fn wait_for_file(path: &Path) -> String {
    poll_until(
        Duration::from_secs(20),
        &format!("{} never appeared", path.display()),
        || {
            std::fs::read_to_string(path)
                .ok()
                .filter(|s| !s.trim().is_empty())
        },
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_closed_stdout_pipe_cancels_the_turn_and_reaps_children() {
    let server = server(vec![
        tool_answer(
            "toolu_1",
            "bash",
            json!({"command": "echo started > started.txt; exec -a anvil-mark-pipe sleep 30"}),
        ),
        text_answer("never reached"),
    ])
    .await;
    let m = machine(&server);
    let started = Instant::now();
    let mut child = m
        .command()
        .args(["-p", "run it", "--permission-mode", "bypass"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_file(&m.repo.join("started.txt"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !marked_alive("anvil-mark-pipe") {
        assert!(
            Instant::now() < deadline,
            "the tool's process never showed up"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(child.stdout.take()); // the reader goes away while nothing is being written
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "anvil did not notice"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(130));
    let deadline = Instant::now() + Duration::from_secs(2);
    while marked_alive("anvil-mark-pipe") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        !marked_alive("anvil-mark-pipe"),
        "the tool's process outlived anvil's cancelled turn"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn interactive_without_a_terminal_has_no_ansi_codes() {
    let server = server(vec![
        tool_answer("toolu_1", "read_file", json!({"file_path": "greet.txt"})),
        text_answer("It says hello."),
    ])
    .await;
    let m = machine(&server);
    let mut child = m
        .command()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"what does greet.txt say?\n/exit\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains("⏺ read_file(file_path=greet.txt)"),
        "{stdout}"
    );
    assert!(stdout.contains("  ⎿      1\thello world"), "{stdout}");
    assert!(stdout.contains("It says hello."), "{stdout}");
    assert!(!stdout.contains('\x1b') && !String::from_utf8_lossy(&out.stderr).contains('\x1b'));
    assert!(String::from_utf8_lossy(&out.stderr).contains("↳ 100 in · 19 out · 2 steps"));
}

// ---- a real terminal: tmux ----------------------------------------------------------------------

pub(super) struct Tmux {
    pub(super) session: String,
}

impl Tmux {
    pub(super) fn start(m: &Machine, width: u16) -> Tmux {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let session = format!(
            "anvil-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        );
        let env = format!(
            "env -i PATH='{}' HOME='{}' XDG_CONFIG_HOME='{}' XDG_DATA_HOME='{}' MOCK_API_KEY=sk-mock-key-123 TERM=xterm-256color",
            std::env::var("PATH").unwrap_or_default(),
            m.home.path().display(),
            m.home.path().join("cfg").display(),
            m.home.path().join("data").display()
        );
        let status = Command::new("tmux")
            .args([
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-s",
                &session,
                "-x",
                &width.to_string(),
                "-y",
                "40",
                "-c",
            ])
            .arg(&m.repo)
            .arg(format!("{env} {ANVIL}; sleep 30"))
            .status()
            .expect("tmux is needed for the terminal test (apt-get install tmux)");
        assert!(status.success());
        Tmux { session }
    }

    /// The pane's history and screen, a line wrapped at the pane's width joined back into one
    /// (`-J`), so what the tests look for does not depend on the width.
    pub(super) fn screen(&self) -> String {
        let out = Command::new("tmux")
            .args(["capture-pane", "-p", "-J", "-S", "-", "-t", &self.session])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub(super) fn send(&self, keys: &[&str]) {
        Command::new("tmux")
            .args(["send-keys", "-t", &self.session])
            .args(keys)
            .status()
            .unwrap();
    }

    pub(super) fn wait_for(&self, needle: &str) -> String {
        self.wait_until(needle, |screen| screen.contains(needle))
    }

    /// Polls the screen until `done` holds; fails naming `what` after a deadline.
    pub(super) fn wait_until(&self, what: &str, done: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let screen = self.screen();
            if done(&screen) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "never saw {what:?} on screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until the session waits at its prompt: the last line on screen is an empty `›`
    /// (keys sent before the line editor reads would race with it).
    pub(super) fn wait_for_prompt(&self) -> String {
        self.wait_until("an empty › prompt on the last line", |screen| {
            screen
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .map(str::trim)
                == Some("›")
        })
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.session])
            .status();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn ctrl_c_in_a_terminal_cancels_the_turn_and_the_next_prompt_works() {
    // The tool's process is found by this name in /proc: unique to this test process, so a run
    // in another worktree at the same time is not mistaken for this one.
    let marker = format!("anvil-tmux-{}", std::process::id());
    let command = format!("echo started > started.txt; exec -a {marker} sleep 30");
    let server = server(vec![
        tool_answer("toolu_1", "bash", json!({ "command": command })),
        text_answer("Hello again!"),
    ])
    .await;
    let m = machine(&server);
    // Wider than any line of this test: nothing wraps, whatever the terminal's width.
    let tmux = Tmux::start(&m, 300);
    tmux.wait_for_prompt();
    tmux.send(&["run the long thing", "Enter"]);
    // Default mode asks before a command runs.
    let screen = tmux.wait_for("[y]es  [a]lways  [n]o");
    // The call's line is on screen before the approval prompt, each on a row of its own (under
    // load they once shared one: `⏵ approve bash(…)?⏺ bash(…)`).
    let call = format!("bash(command={command})");
    let rows: Vec<&str> = screen.lines().map(str::trim_end).collect();
    let tool_row = rows.iter().position(|r| *r == format!("⏺ {call}"));
    let approve_row = rows.iter().position(|r| *r == format!("⏵ approve {call}?"));
    assert!(
        matches!((tool_row, approve_row), (Some(t), Some(a)) if t < a),
        "the tool line and the approval prompt are not on rows of their own, in order:\n{screen}"
    );
    tmux.send(&["y", "Enter"]);
    let started = m.repo.join("started.txt");
    tmux.wait_until("the approved command writing started.txt", |_| {
        std::fs::read_to_string(&started).is_ok_and(|s| !s.trim().is_empty())
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while !marked_alive(&marker) {
        assert!(
            Instant::now() < deadline,
            "the tool's process never showed up"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let pressed = Instant::now();
    tmux.send(&["C-c"]);
    tmux.wait_for("(cancelled)");
    assert!(pressed.elapsed() < Duration::from_secs(5));
    let deadline = Instant::now() + Duration::from_secs(2);
    while marked_alive(&marker) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        !marked_alive(&marker),
        "the cancelled tool's process survived"
    );
    // The next prompt works, and the conversation went on.
    tmux.wait_for_prompt();
    tmux.send(&["hi", "Enter"]);
    let screen = tmux.wait_for("Hello again!");
    assert!(screen.contains("cancelled"), "{screen}");
    tmux.send(&["/exit", "Enter"]);
}

/// An interactive session in tmux whose model asks to run `touch should-not-exist`, then
/// answers `next`; returns once the approval prompt is on screen.
async fn at_the_approval_prompt(next: &str) -> (ScriptedServer, Machine, Tmux) {
    let server = server(vec![
        tool_answer(
            "toolu_1",
            "bash",
            json!({"command": "touch should-not-exist"}),
        ),
        text_answer(next),
    ])
    .await;
    let m = machine(&server);
    let tmux = Tmux::start(&m, 120);
    tmux.wait_for("/help for commands");
    tmux.send(&["make the file", "Enter"]);
    tmux.wait_for("[y]es  [a]lways  [n]o");
    (server, m, tmux)
}

#[tokio::test(flavor = "multi_thread")]
async fn declining_in_a_terminal_never_runs_the_call_and_the_model_gets_the_feedback() {
    let (server, m, tmux) = at_the_approval_prompt("Understood, not touching it.").await;
    tmux.send(&["n", "Enter"]);
    tmux.wait_for("feedback for the model");
    tmux.send(&["use the Makefile instead", "Enter"]);
    tmux.wait_for("Understood, not touching it.");
    assert!(!m.repo.join("should-not-exist").exists());
    let requests = server.received_requests().await.unwrap();
    let second = String::from_utf8_lossy(&requests[1].body).into_owned();
    assert!(second.contains("use the Makefile instead"), "{second}");
    tmux.send(&["/exit", "Enter"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn ctrl_c_at_the_approval_prompt_cancels_the_turn_cleanly() {
    let (_server, m, tmux) = at_the_approval_prompt("Next answer.").await;
    tmux.send(&["C-c"]);
    tmux.wait_for("(cancelled)");
    assert!(!m.repo.join("should-not-exist").exists());
    // The session goes on.
    tmux.send(&["hello", "Enter"]);
    tmux.wait_for("Next answer.");
    tmux.send(&["/exit", "Enter"]);
}

/// `/resume` of the session this REPL is already in is not "in use by another process" (the
/// lock this process holds itself): it says so and the session goes on in the same file.
#[tokio::test(flavor = "multi_thread")]
async fn resuming_the_session_one_is_in_says_so_and_goes_on() {
    let server = server(vec![text_answer("First."), text_answer("Second.")]).await;
    let m = machine(&server);
    let out = m
        .command()
        .args(["-p", "one", "--output-format", "json"])
        .output()
        .unwrap();
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = result["session_id"].as_str().unwrap().to_string();
    let mut child = m
        .command()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("/resume {id}\n/resume {id}\ntwo\n/exit\n").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains(&format!("(resumed {id}")), "{stdout}");
    assert!(
        stdout.contains(&format!("(already in session {id})")),
        "{stdout}"
    );
    assert!(!stdout.contains("cannot resume"), "{stdout}");
    assert!(stdout.contains("Second."), "{stdout}");
    let sessions = m.home.path().join("data/anvil/sessions");
    let file = walk_for(&sessions, &format!("{id}.jsonl"));
    let text = std::fs::read_to_string(file).unwrap();
    assert!(
        text.contains("\"two\""),
        "the second prompt is in the resumed file:\n{text}"
    );
}

fn walk_for(dir: &std::path::Path, name: &str) -> PathBuf {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            let found = walk_for(&path, name);
            if found.exists() {
                return found;
            }
        } else if path.file_name().is_some_and(|n| n == name) {
            return path;
        }
    }
    dir.join(name)
}

/// The REPL's history file is kept like a session: known secret values redacted, readable by
/// its user alone.
#[tokio::test(flavor = "multi_thread")]
async fn the_history_file_keeps_no_known_secret_and_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let server = server(vec![text_answer("Noted.")]).await;
    let m = machine(&server);
    let mut child = m
        .command()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"use the key sk-mock-key-123 please\n/exit\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let history = m.home.path().join("data/anvil/history.txt");
    let text = std::fs::read_to_string(&history).unwrap();
    assert!(text.contains("use the key"), "{text}");
    assert!(!text.contains("sk-mock-key-123"), "{text}");
    let mode = std::fs::metadata(&history).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}
