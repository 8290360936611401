//! Tool calls written as text, end to end with the real `anvil -p` over every wire format: with
//! `tool_calls = "text"` the call the model wrote runs and the file is written; with the default
//! (`native`) nothing runs and the result carries a `hint` naming the setting.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use anvil_test_support::home::Home;
use anvil_test_support::model_server::wire::{self, Usage};
use anvil_test_support::model_server::{ScriptedServer, WireFormat};
use serde_json::Value;

use super::cli::ANVIL;

const USAGE: Usage = Usage {
    input: 50,
    output: 20,
};

/// What the local model wrote (the shape of agent/tests/fixtures/text_calls), asking for the
/// call the task needs.
const WRITTEN_CALL: &str = "```json\n{\n  \"name\": \"write_file\",\n  \"arguments\": {\n    \"file_path\": \"hello.txt\",\n    \"content\": \"hi\"\n  }\n}\n```";

/// One `anvil -p` turn against a server in `format` that writes the call as text, then answers
/// "Done."; `tool_calls` is the model's setting (`None`: unset).
async fn turn(format: WireFormat, tool_calls: Option<&str>) -> Turn {
    let server = ScriptedServer::in_order(
        format,
        vec![
            wire::text(format, WRITTEN_CALL, USAGE),
            wire::text(format, "Done.", USAGE),
        ],
    )
    .await;
    let home = Home::new();
    let setting = tool_calls.map_or(String::new(), |t| format!("tool_calls = \"{t}\"\n"));
    home.write_config(&format!(
        "default_model = \"local\"\n\n[providers.mock]\nkind = \"{}\"\nbase_url = \"{}\"\napi_key_env = \"MOCK_API_KEY\"\n\n[models.local]\nprovider = \"mock\"\nmodel = \"qwen\"\n{setting}",
        format.kind(),
        server.uri()
    ));
    let repo = home.git_repo("repo", &[("README.md", "hi\n")]);
    let out = home
        .command(ANVIL)
        .arg("-C")
        .arg(&repo)
        .args([
            "-p",
            "Create a file hello.txt containing hi",
            "--permission-mode",
            "accept-edits",
            "--output-format",
            "json",
        ])
        .output()
        .unwrap();
    let json: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{format:?}: stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(out.status.code(), Some(0), "{format:?}: {json}");
    let written = std::fs::read_to_string(repo.join("hello.txt")).ok();
    if let Some(content) = &written {
        assert_eq!(content, "hi", "{format:?}");
    }
    Turn {
        json,
        written: written.is_some(),
        server,
        home,
        repo,
    }
}

struct Turn {
    /// The JSON result.
    json: Value,
    /// Whether hello.txt was written.
    written: bool,
    server: ScriptedServer,
    home: Home,
    repo: std::path::PathBuf,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_text_a_call_written_as_text_runs_over_every_wire_format() {
    for format in WireFormat::ALL {
        let Turn {
            json,
            written,
            server,
            home,
            repo,
        } = turn(format, Some("text")).await;
        assert!(written, "{format:?}: hello.txt was not written: {json}");
        assert_eq!(json["outcome"], "done", "{format:?}: {json}");
        assert_eq!(json["text"], "Done.", "{format:?}: {json}");
        assert_eq!(json["steps"], 2, "{format:?}: {json}");
        assert!(json.get("hint").is_none(), "{format:?}: {json}");
        // The second request sends the recovered call back as the format's own call, with its
        // result, and the provider accepted it.
        let second = server.requests()[1].to_string();
        assert!(
            second.contains("anvil_text_") || format == WireFormat::Gemini,
            "{format:?}: {second}"
        );
        assert!(second.contains("write_file"), "{format:?}: {second}");
        // The session keeps the model's text and the call, which a replay marks as recovered.
        let replay = home
            .command(ANVIL)
            .current_dir(&repo)
            .args(["replay", json["session_id"].as_str().unwrap()])
            .output()
            .unwrap();
        let replay = String::from_utf8_lossy(&replay.stdout);
        assert!(
            replay.contains("(recovered from text: fenced_json)"),
            "{format:?}: {replay}"
        );
        assert!(
            replay.contains("\"name\": \"write_file\""),
            "{format:?}: {replay}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_native_nothing_runs_and_the_result_carries_a_hint() {
    let Turn {
        json,
        written,
        server,
        ..
    } = turn(WireFormat::OpenAiChat, None).await;
    assert!(!written, "{json}");
    assert_eq!(json["outcome"], "done", "{json}");
    assert_eq!(json["steps"], 1, "{json}");
    assert_eq!(server.requests().len(), 1);
    let hint = json["hint"].as_str().unwrap();
    assert!(hint.contains("tool_calls = \"text\""), "{hint}");
    assert!(hint.contains("write_file"), "{hint}");
}
