//! Ctrl-C while the answer streams, against the real `anvil` binary and a model server that
//! stalls mid-answer (a raw socket: some text, then nothing): headless `cancelled` results carry
//! the partial text and the usage (reported, or estimated and marked so), and the session keeps
//! the partial answer so a resumed session shows it. Interactively (tmux), the text stays on
//! screen, the usage line marks its estimate, and the partial answer is in the session file.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anvil_test_support::home::Home;
use anvil_test_support::poll::poll_until;
use anvil_test_support::raw_server::{Behaviour, RawServer};
use serde_json::{Value, json};

use super::cli::{ANVIL, Machine, Tmux};

/// What the stalled answer had said by the time it stalled.
const PARTIAL: &str = "The failing test expects UTF-8, but the parser reads";

/// The wire formats the stall is served in: one that reports the input at the start
/// (Anthropic's `message_start`), one that reports usage only at the end (OpenAI Chat).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Wire {
    Anthropic,
    OpenAiChat,
}

impl Wire {
    fn kind(self) -> &'static str {
        match self {
            Wire::Anthropic => "anthropic",
            Wire::OpenAiChat => "openai-chat",
        }
    }

    /// The start of a response saying [`PARTIAL`] in two deltas, and nothing after.
    fn stalled_body(self) -> &'static str {
        let (first, second) = PARTIAL.split_at(20);
        let body = match self {
            Wire::Anthropic => anvil_llm::testing::anthropic_sse::body(&[
                json!({"type": "message_start", "message": {"id": "msg_stall", "type": "message", "role": "assistant", "content": [], "usage": {"input_tokens": 42, "output_tokens": 1}}}),
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": first}}),
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": second}}),
            ]),
            Wire::OpenAiChat => [first, second]
                .iter()
                .map(|text| {
                    let chunk = json!({"id": "chatcmpl-stall", "object": "chat.completion.chunk", "model": "stall", "choices": [{"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": null}]});
                    format!("data: {chunk}\n\n")
                })
                .collect(),
        };
        Box::leak(body.into_boxed_str())
    }
}

/// A user's machine whose default model is served by `server` in `wire`'s format.
fn machine(server: &RawServer, wire: Wire) -> Machine {
    let home = Home::new();
    home.write_config(&format!(
        "default_model = \"test\"\n\n[providers.mock]\nkind = \"{}\"\nbase_url = \"{}/v1\"\napi_key_env = \"MOCK_API_KEY\"\n\n[models.test]\nprovider = \"mock\"\nmodel = \"stall-test\"\n",
        wire.kind(),
        server.uri
    ));
    let repo = home.git_repo("repo", &[("greet.txt", "hello world\n")]);
    Machine { home, repo }
}

fn sigint(child: &std::process::Child) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
}

/// The session file `id` of `m`, as JSON lines.
fn session_records(m: &Machine, id: &str) -> Vec<Value> {
    let path = walk_for(
        &m.home.path().join("data/anvil/sessions"),
        &format!("{id}.jsonl"),
    )
    .unwrap_or_else(|| panic!("no session file {id}"));
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn walk_for(dir: &std::path::Path, name: &str) -> Option<std::path::PathBuf> {
    for entry in std::fs::read_dir(dir).ok()? {
        let path = entry.ok()?.path();
        if path.is_dir() {
            if let Some(found) = walk_for(&path, name) {
                return Some(found);
            }
        } else if path.file_name().is_some_and(|n| n == name) {
            return Some(path);
        }
    }
    None
}

/// `anvil replay ID` in `m`'s repository.
fn replay(m: &Machine, id: &str) -> String {
    let out = m
        .home
        .command(ANVIL)
        .current_dir(&m.repo)
        .args(["replay", id])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

fn command(m: &Machine) -> Command {
    let mut c = m.home.command(ANVIL);
    c.current_dir(&m.repo);
    c
}

#[tokio::test(flavor = "multi_thread")]
async fn sigint_mid_answer_gives_a_cancelled_json_result_with_the_partial_text_and_usage() {
    for wire in [Wire::Anthropic, Wire::OpenAiChat] {
        let server = RawServer::start(Behaviour::StallAfter {
            body: wire.stalled_body(),
        })
        .await;
        let m = machine(&server, wire);
        let child = command(&m)
            .args(["-p", "why does the test fail?", "--output-format", "json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The body goes out as soon as the request arrives; give anvil time to read it.
        poll_until(Duration::from_secs(20), "the request never came", || {
            (server.connections() > 0).then_some(())
        });
        std::thread::sleep(Duration::from_millis(1500));
        let sent = Instant::now();
        sigint(&child);
        let out = child.wait_with_output().unwrap();
        assert!(sent.elapsed() < Duration::from_secs(10), "{wire:?}");
        assert_eq!(out.status.code(), Some(130), "{wire:?}: {out:?}");
        let stdout = String::from_utf8(out.stdout).unwrap();
        assert_eq!(stdout.lines().count(), 1, "{wire:?}: {stdout}");
        let result: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(result["outcome"], "cancelled", "{wire:?}: {result}");
        assert_eq!(result["text"], PARTIAL, "{wire:?}: {result}");
        assert_eq!(result["steps"], 1);
        // The output was never reported (or only as Anthropic's initial 1): estimated from the
        // text, and marked so.
        assert_eq!(result["usage_estimated"], true, "{wire:?}: {result}");
        let output = result["usage"]["output"].as_u64().unwrap();
        assert!(output >= PARTIAL.len() as u64 / 4, "{wire:?}: {result}");
        let input = result["usage"]["input"].as_u64().unwrap();
        match wire {
            // Reported at message_start: the provider's number, not an estimate.
            Wire::Anthropic => assert_eq!(input, 42, "{result}"),
            // Never reported: the request's estimate (system prompt, tools, the prompt).
            Wire::OpenAiChat => assert!(input > 100, "{result}"),
        }
        // The eval worker's reader takes it as the contract.
        let parsed = anvil_runner::contract::HeadlessOutput::parse(&stdout);
        assert!(matches!(parsed, Some(Ok(_))), "{parsed:?}");

        // The session keeps the partial answer and its estimated usage: a resumed session
        // (and `anvil replay`) shows it.
        let id = result["session_id"].as_str().unwrap();
        let records = session_records(&m, id);
        let kept = records.iter().any(|r| {
            r["type"] == "message_appended"
                && r["message"]["role"] == "assistant"
                && r.to_string().contains(PARTIAL)
        });
        assert!(kept, "{wire:?}: {records:?}");
        let usage = records.iter().find(|r| r["type"] == "usage").unwrap();
        assert_eq!(usage["estimated"], true, "{usage}");
        assert!(replay(&m, id).contains(PARTIAL), "{wire:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sigint_mid_answer_ends_stream_json_with_the_partial_text_and_usage() {
    let server = RawServer::start(Behaviour::StallAfter {
        body: Wire::Anthropic.stalled_body(),
    })
    .await;
    let m = machine(&server, Wire::Anthropic);
    let mut child = command(&m)
        .args(["-p", "why?", "--output-format", "stream-json"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut events: Vec<Value> = Vec::new();
    let mut shown = String::new();
    // Ctrl-C once the whole partial text has been streamed out.
    while shown != PARTIAL {
        let line = lines.next().expect("the stream ended early").unwrap();
        let event: Value = serde_json::from_str(&line).unwrap();
        if event["type"] == "text_delta" {
            shown.push_str(event["text"].as_str().unwrap());
        }
        events.push(event);
    }
    sigint(&child);
    for line in lines {
        events.push(serde_json::from_str(&line.unwrap()).unwrap());
    }
    assert_eq!(child.wait().unwrap().code(), Some(130));
    let usage: Vec<&Value> = events.iter().filter(|e| e["type"] == "usage").collect();
    assert_eq!(usage.len(), 1, "{events:?}");
    assert_eq!(usage[0]["estimated"], true, "{}", usage[0]);
    assert_eq!(usage[0]["usage"]["input"], 42);
    let last = events.last().unwrap();
    assert_eq!(last["type"], "turn_finished", "{events:?}");
    assert_eq!(last["outcome"]["kind"], "cancelled");
    assert_eq!(last["text"], PARTIAL, "{last}");
    assert_eq!(last["usage"], usage[0]["usage"], "{last}");
    assert_eq!(last["usage_estimated"], true, "{last}");
    assert!(last["session_id"].is_string(), "{last}");
}

#[tokio::test(flavor = "multi_thread")]
async fn ctrl_c_in_a_terminal_keeps_the_partial_answer_and_marks_the_estimate() {
    let server = RawServer::start(Behaviour::StallAfter {
        body: Wire::OpenAiChat.stalled_body(),
    })
    .await;
    let m = machine(&server, Wire::OpenAiChat);
    let tmux = Tmux::start(&m, 200);
    tmux.wait_for_prompt();
    tmux.send(&["why does the test fail?", "Enter"]);
    // All of it, the last word too (held back while it could still grow, then shown when the
    // stream paused).
    tmux.wait_for(PARTIAL);
    tmux.send(&["C-c"]);
    let screen = tmux.wait_for("(cancelled)");
    assert!(screen.contains(PARTIAL), "{screen}");
    let screen = tmux.wait_for("(estimated)");
    assert!(
        screen
            .lines()
            .any(|l| l.starts_with("↳ ~") && l.contains("(estimated)")),
        "{screen}"
    );
    tmux.wait_for_prompt();
    tmux.send(&["/exit", "Enter"]);
    // The session file (one, this directory's) keeps the partial answer.
    let sessions = m.home.path().join("data/anvil/sessions");
    let file = poll_until(Duration::from_secs(10), "no session file", || {
        find_jsonl(&sessions)
    });
    let text = std::fs::read_to_string(file).unwrap();
    assert!(
        text.lines().any(|l| l.contains("\"message_appended\"")
            && l.contains("\"assistant\"")
            && l.contains(PARTIAL)),
        "{text}"
    );
}

fn find_jsonl(dir: &std::path::Path) -> Option<std::path::PathBuf> {
    for entry in std::fs::read_dir(dir).ok()? {
        let path = entry.ok()?.path();
        if path.is_dir() {
            if let Some(found) = find_jsonl(&path) {
                return Some(found);
            }
        } else if path.extension().is_some_and(|e| e == "jsonl") {
            return Some(path);
        }
    }
    None
}
