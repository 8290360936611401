//! The bash tool and the process supervisor against real processes: process groups, timeouts,
//! cancellation, bounded capture, detached children, the scrubbed environment and redaction.
//! These run without the OS sandbox (FullAccess) so host pids can be checked; the sandbox has
//! its own suite (sandbox_escape.rs).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anvil_agent::file_access::FileAccess;
use anvil_agent::sandbox::{Sandbox, SandboxPolicy};
use anvil_agent::secrets::{ChildEnv, Redactor};
use anvil_agent::tools::bash::{Bash, CAPTURE_BYTES};
use anvil_agent::tools::register_coding_tools;
use anvil_agent::{ToolContext, ToolRegistry};
use anvil_llm::ContentBlock;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

fn base_env() -> Vec<(String, String)> {
    vec![
        (
            "PATH".into(),
            std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into()),
        ),
        ("HOME".into(), "/tmp".into()),
        ("ANTHROPIC_API_KEY".into(), "sk-ant-test-0123456789".into()),
        ("GITHUB_TOKEN".into(), "ghp_testtoken_abcdef".into()),
    ]
}

fn registry() -> ToolRegistry {
    let mut r = ToolRegistry::new().with_redactor(Arc::new(Redactor::from_vars(base_env())));
    let unconfined = Arc::new(Sandbox::new(SandboxPolicy::FullAccess, "/"));
    r.register(Arc::new(Bash::new(
        ChildEnv::default().with_base(base_env()),
        unconfined,
    )))
    .unwrap();
    r
}

async fn bash(dir: &Path, args: Value, cancel: CancellationToken) -> (String, bool) {
    let ctx = ToolContext {
        cwd: dir.to_path_buf(),
        cancel,
        progress: None,
    };
    match registry().dispatch("id", "bash", &args, &ctx).await.result {
        ContentBlock::ToolResult {
            content, is_error, ..
        } => (content, is_error),
        other => panic!("{other:?}"),
    }
}

/// Whether `pid` is a live process (a zombie is dead: it only waits to be reaped).
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .chars()
                .next();
            state != Some('Z')
        }
        Err(_) => false,
    }
}

/// Waits up to 2 s for `pid` to die: SIGKILL is delivered asynchronously.
async fn gone(pid: i32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(2);
    while alive(pid) {
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    true
}

fn read_pid(path: &Path) -> i32 {
    for _ in 0..100 {
        if let Ok(s) = std::fs::read_to_string(path)
            && let Ok(pid) = s.trim().parse()
        {
            return pid;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("no pid written to {}", path.display());
}

#[tokio::test]
async fn exit_code_and_streams_are_reported_and_non_zero_is_not_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let (out, is_error) = bash(
        dir.path(),
        json!({"command": "echo out; echo err >&2; exit 3"}),
        CancellationToken::new(),
    )
    .await;
    assert!(!is_error);
    assert_eq!(out, "Exit code: 3\nstdout:\nout\nstderr:\nerr\n");
    let (out, _) = bash(
        dir.path(),
        json!({"command": "pwd"}),
        CancellationToken::new(),
    )
    .await;
    assert!(
        out.contains(&dir.path().canonicalize().unwrap().display().to_string())
            || out.contains(&dir.path().display().to_string()),
        "{out}"
    );
}

#[tokio::test]
async fn a_timeout_kills_the_whole_group_and_leaves_no_orphan() {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let (out, is_error) = bash(
        dir.path(),
        json!({"command": "sleep 100 & echo $! > bg.pid; sleep 100", "timeout_ms": 500}),
        CancellationToken::new(),
    )
    .await;
    let took = started.elapsed();
    assert!(is_error);
    assert!(out.contains("timed out after 500 ms"), "{out}");
    // Returns in about a second, not after 100 s.
    assert!(took < Duration::from_secs(5), "{took:?}");
    let bg = read_pid(&dir.path().join("bg.pid"));
    assert!(gone(bg).await, "background sleep {bg} survived");
}

#[tokio::test]
async fn background_jobs_do_not_outlive_a_finished_command() {
    let dir = tempfile::tempdir().unwrap();
    let (out, is_error) = bash(
        dir.path(),
        json!({"command": "sleep 100 > /dev/null 2>&1 & echo $! > bg.pid; echo started"}),
        CancellationToken::new(),
    )
    .await;
    assert!(!is_error, "{out}");
    let bg = read_pid(&dir.path().join("bg.pid"));
    assert!(gone(bg).await, "background sleep {bg} survived");
}

#[tokio::test]
async fn unlimited_output_is_truncated_without_deadlock() {
    let dir = tempfile::tempdir().unwrap();
    let (out, is_error) = tokio::time::timeout(
        Duration::from_secs(60),
        bash(
            dir.path(),
            json!({"command": "yes | head -c 10000000"}),
            CancellationToken::new(),
        ),
    )
    .await
    .expect("capturing unlimited output deadlocked");
    assert!(!is_error);
    assert!(
        out.starts_with("Exit code: 0\nstdout:\ny\ny\n"),
        "{}",
        &out[..40]
    );
    assert!(out.contains("bytes of output cut"));
    assert!(out.len() < 40_000, "{}", out.len());
}

#[tokio::test]
async fn a_detached_child_holding_the_pipe_cannot_hang_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    // setsid puts the child in its own session (out of our process group), still holding stdout.
    let (out, is_error) = tokio::time::timeout(
        Duration::from_secs(20),
        bash(
            dir.path(),
            json!({"command": "setsid sh -c 'echo $$ > detached.pid; exec sleep 30' & sleep 0.2; echo done"}),
            CancellationToken::new(),
        ),
    )
    .await
    .expect("the detached child's pipe hung the call");
    assert!(!is_error, "{out}");
    assert!(out.contains("done"), "{out}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let pid = read_pid(&dir.path().join("detached.pid"));
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    );
}

#[tokio::test]
async fn cancel_stops_the_command_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        c.cancel();
    });
    let started = Instant::now();
    let (out, is_error) = bash(
        dir.path(),
        json!({"command": "echo $$ > sh.pid; sleep 30"}),
        cancel,
    )
    .await;
    assert!(is_error);
    assert!(
        out.contains("cancelled") && out.contains("effects are unknown"),
        "{out}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(gone(read_pid(&dir.path().join("sh.pid"))).await);
}

#[tokio::test]
async fn dropping_the_call_kills_its_processes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    let call = async move {
        bash(
            &path,
            json!({"command": "echo $$ > sh.pid; sleep 30"}),
            CancellationToken::new(),
        )
        .await
    };
    // The future is dropped when the timeout fires, as when a turn's future is dropped.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), call)
            .await
            .is_err()
    );
    let pid = read_pid(&dir.path().join("sh.pid"));
    assert!(gone(pid).await, "the shell {pid} outlived its dropped call");
}

#[tokio::test]
async fn credentials_are_not_in_the_environment_and_are_redacted_anyway() {
    let dir = tempfile::tempdir().unwrap();
    let (out, _) = bash(
        dir.path(),
        json!({"command": "env"}),
        CancellationToken::new(),
    )
    .await;
    assert!(out.contains("PATH="), "{out}");
    assert!(
        !out.contains("ANTHROPIC_API_KEY") && !out.contains("GITHUB_TOKEN"),
        "{out}"
    );
    // A secret value that reaches the output some other way is still masked.
    let (out, _) = bash(
        dir.path(),
        json!({"command": "echo sk-ant-test-0123456789"}),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(out, "Exit code: 0\nstdout:\n[REDACTED:ANTHROPIC_API_KEY]\n");
}

/// The standard toolset, wired as a session wires it, with `redactor`.
fn coding_tools(dir: &Path, redactor: Redactor) -> ToolRegistry {
    let mut r = ToolRegistry::new().with_redactor(Arc::new(redactor));
    let access = Arc::new(FileAccess::workspace(dir).unwrap());
    let unconfined = Arc::new(Sandbox::new(SandboxPolicy::FullAccess, "/"));
    register_coding_tools(
        &mut r,
        access,
        ChildEnv::default().with_base(base_env()),
        unconfined,
    )
    .unwrap();
    r
}

#[tokio::test]
async fn a_secret_straddling_a_cut_of_the_capture_is_not_left_half_visible() {
    const SECRET: &str = "sk-ant-test-0123456789";
    let dir = tempfile::tempdir().unwrap();
    let tools = coding_tools(dir.path(), Redactor::from_vars(base_env()));
    // stdout: the secret begins 8 bytes before the end of the kept head; stderr: it ends 8
    // bytes after the start of the kept tail. Redacting after the cut would leave
    // "sk-ant-t" and "23456789" in view.
    let filler = |byte: char, n: usize| format!("head -c {n} /dev/zero | tr '\\0' {byte}");
    let command = format!(
        "{}; printf {SECRET}; {}; {{ {}; printf {SECRET}; {}; }} >&2",
        filler('a', CAPTURE_BYTES - 8),
        filler('b', 100_000),
        filler('c', 100_000),
        filler('d', CAPTURE_BYTES - 8),
    );
    let ctx = ToolContext::new(dir.path().to_path_buf());
    let out = match tools
        .dispatch("id", "bash", &json!({ "command": command }), &ctx)
        .await
        .result
    {
        ContentBlock::ToolResult { content, .. } => content,
        other => panic!("{other:?}"),
    };
    assert_eq!(out.matches("bytes of output cut").count(), 2, "{out}");
    let bytes = SECRET.as_bytes();
    for part in bytes.windows(6) {
        let part = std::str::from_utf8(part).unwrap();
        assert!(!out.contains(part), "'{part}' of the secret is visible");
    }
}

#[tokio::test]
async fn a_bad_timeout_is_invalid_args() {
    let dir = tempfile::tempdir().unwrap();
    let (out, is_error) = bash(
        dir.path(),
        json!({"command": "true", "timeout_ms": 700000}),
        CancellationToken::new(),
    )
    .await;
    assert!(is_error);
    assert!(
        out.contains("timeout_ms must be between 1 and 600000"),
        "{out}"
    );
}
