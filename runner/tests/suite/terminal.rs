//! What the interactive session draws on a real terminal (tmux) and never anywhere else: the
//! indicator while the first token is awaited, and the answer wrapped at word boundaries at the
//! terminal's width. In a pipe, and headless, the output is the text exactly as it came.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use anvil_test_support::model_server::{Answer, ScriptedServer, WireFormat};

use super::cli::{Tmux, machine, text_answer};

/// What the waiting indicator says (`anvil_runner::cli::render::WAITING`).
const WAITING: &str = anvil_runner::cli::render::WAITING;

/// A paragraph longer than any test terminal is wide.
const PARAGRAPH: &str = "Anvil wraps long lines of the streamed answer at word boundaries, so \
                         that no word is ever cut in two at the edge of the terminal window, \
                         whatever its width.";

/// A server that answers each request with `text`, after `delay`.
async fn slow_server(text: &'static str, delay: Duration) -> ScriptedServer {
    ScriptedServer::answering(WireFormat::AnthropicMessages, move |_| {
        Answer::sse(text_answer(text)).after(delay)
    })
    .await
}

impl Tmux {
    /// The pane's rows as the terminal shows them (wrapped rows not joined).
    fn rows(&self) -> Vec<String> {
        let out = Command::new("tmux")
            .args(["capture-pane", "-p", "-S", "-", "-t", &self.session])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.trim_end().to_string())
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn on_a_terminal_the_wait_shows_until_the_first_token_and_is_erased() {
    let server = slow_server("Here it is.", Duration::from_secs(3)).await;
    let m = machine(&server);
    let tmux = Tmux::start(&m, 100);
    tmux.wait_for_prompt();
    tmux.send(&["take your time", "Enter"]);
    // The spinner and the seconds waited, while the server holds its answer.
    let screen = tmux.wait_for(WAITING);
    assert!(
        screen
            .lines()
            .any(|l| l.contains(&format!("{WAITING} · ")) && l.trim_end().ends_with('s')),
        "{screen}"
    );
    tmux.wait_until("the seconds counting up", |s| {
        s.contains(&format!("{WAITING} · 1s")) || s.contains(&format!("{WAITING} · 2s"))
    });
    tmux.wait_for("Here it is.");
    tmux.wait_for_prompt();
    let rows = tmux.rows();
    assert!(
        rows.iter().all(|r| !r.contains(WAITING)),
        "the indicator was left on screen: {rows:#?}"
    );
    assert!(rows.iter().any(|r| r == "Here it is."), "{rows:#?}");
    tmux.send(&["/exit", "Enter"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn on_a_terminal_long_lines_wrap_at_word_boundaries() {
    let server = slow_server(PARAGRAPH, Duration::ZERO).await;
    let m = machine(&server);
    let width = 40;
    let tmux = Tmux::start(&m, width);
    tmux.wait_for_prompt();
    tmux.send(&["explain wrapping", "Enter"]);
    tmux.wait_for("whatever its width.");
    tmux.wait_for_prompt();
    let rows = tmux.rows();
    let start = rows
        .iter()
        .position(|r| r.starts_with("Anvil wraps"))
        .unwrap_or_else(|| panic!("{rows:#?}"));
    let end = start
        + rows[start..]
            .iter()
            .position(|r| r.ends_with("whatever its width."))
            .unwrap();
    let answer = &rows[start..=end];
    // Several rows, none wider than the terminal, each ending at a word: joined with spaces
    // they are the paragraph (a terminal's own wrap would cut words in two).
    assert!(answer.len() >= 3, "{answer:#?}");
    assert!(
        answer
            .iter()
            .all(|r| r.chars().count() <= usize::from(width)),
        "{answer:#?}"
    );
    assert_eq!(answer.join(" "), PARAGRAPH, "{answer:#?}");
    tmux.send(&["/exit", "Enter"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn in_a_pipe_there_is_no_indicator_and_no_wrapping() {
    // Slow enough that a terminal would have shown the indicator for a while.
    let server = slow_server(PARAGRAPH, Duration::from_millis(1500)).await;
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
        .write_all(b"explain wrapping\n/exit\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    for shown in [&stdout, &stderr] {
        assert!(!shown.contains(WAITING), "{shown}");
        assert!(!shown.contains('\r'), "{shown:?}");
        assert!(!shown.contains('⠋'), "{shown}");
    }
    // The answer on one line, as the model wrote it.
    assert!(
        stdout.lines().any(|l| l == PARAGRAPH),
        "the answer was changed: {stdout}"
    );

    // Headless: only the answer.
    let out = m
        .command()
        .args(["-p", "explain wrapping"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!("{PARAGRAPH}\n")
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
