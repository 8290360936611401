//! A model server for sweeps: the scripted server answering in the Anthropic wire format as
//! two "models" (`claude-good` writes answer.txt holding 42, `claude-bad` never does), a config
//! naming them, and tasks whose check wants that answer. Shared by the sweep tests and the
//! sweep benchmark.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anvil_llm::testing::anthropic_sse::{self, Usage};
use serde_json::{Value, json};
use wiremock::MockServer;

use crate::bins;
use crate::home::MOCK_API_KEY;
use crate::model_server::{Answer, ScriptedServer, WireFormat};

fn text_answer(text: &str) -> String {
    anthropic_sse::text(
        text,
        Usage {
            input: 40,
            output: 5,
        },
    )
}

/// The scripted answer that solves a sweep task: write_file answer.txt holding 42.
pub fn write_answer() -> String {
    let input = json!({"file_path": "answer.txt", "content": "42\n"});
    anthropic_sse::tool_use(
        "toolu_write_1",
        "write_file",
        &input,
        "tool_use",
        Usage {
            input: 40,
            output: 9,
        },
    )
}

/// The answer of the two models to a request: `claude-good` writes the answer with its first
/// step, then says so; anything else cannot work it out. Each trial's first answer comes after
/// `delay`.
fn answer(body: &Value, delay: Duration) -> Answer {
    let model = body["model"].as_str().unwrap_or("");
    let after_tool = body.to_string().contains("\"tool_result\"");
    let sse = match (model, after_tool) {
        ("claude-good", false) => write_answer(),
        ("claude-good", true) => text_answer("I wrote answer.txt."),
        _ => text_answer("I cannot work out the answer."),
    };
    Answer::sse(sse).after(if after_tool { Duration::ZERO } else { delay })
}

// ---- the machine: config, tasks, queue -------------------------------------------------------

/// `anvil-evals ARGS` on a machine whose home is `home`: config in `home/cfg`, data in
/// `home/data`, temp files (and so workspaces) in `home`, the mock model's credential set,
/// nothing else from this process's environment but PATH.
pub fn evals_command(home: &Path, args: &[&str]) -> std::process::Command {
    let mut c = std::process::Command::new(bins::built("anvil-evals"));
    c.args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("cfg"))
        .env("XDG_DATA_HOME", home.join("data"))
        .env("TMPDIR", home)
        .env(MOCK_API_KEY.0, MOCK_API_KEY.1)
        .stdin(std::process::Stdio::null());
    c
}

/// The config of a home whose models are served by `server`: aliases `good` and `bad`.
pub fn config(server: &MockServer) -> String {
    format!(
        "default_model = \"good\"\n\n[providers.mock]\nkind = \"anthropic\"\nbase_url = \"{}\"\napi_key_env = \"MOCK_API_KEY\"\n\n\
         [models.good]\nprovider = \"mock\"\nmodel = \"claude-good\"\npricing = {{ input = 3.0, output = 15.0 }}\n\n[models.bad]\nprovider = \"mock\"\nmodel = \"claude-bad\"\n",
        server.uri()
    )
}

/// The protected test of a sweep task, relative to the task directory.
pub const ANSWER_TEST: &str = "grader/files/tests/test_answer.py";

/// The protected test wanting `answer` in answer.txt.
pub fn answer_test(answer: &str) -> String {
    format!(
        "import unittest\n\nclass Answer(unittest.TestCase):\n    def test_answer(self):\n        with open('answer.txt') as f:\n            self.assertEqual(f.read().strip(), '{answer}')\n"
    )
}

/// Task `name` under `root`: a repo asking for the answer, its solution and protected test.
pub fn task(root: &Path, name: &str) {
    let dir = root.join(name);
    std::fs::create_dir_all(dir.join("repo")).unwrap();
    std::fs::create_dir_all(dir.join("grader")).unwrap();
    std::fs::create_dir_all(dir.join("solution")).unwrap();
    std::fs::write(
        dir.join("repo/README.md"),
        format!("# {name}\nPut the answer in answer.txt.\n"),
    )
    .unwrap();
    std::fs::write(dir.join("solution/answer.txt"), "42\n").unwrap();
    std::fs::create_dir_all(dir.join("grader/files/tests")).unwrap();
    std::fs::write(dir.join(ANSWER_TEST), answer_test("42")).unwrap();
    std::fs::write(
        dir.join("task.toml"),
        format!(
            "name = \"{name}\"\nprompt = \"Write the answer to answer.txt.\"\nmax_steps = 5\ntimeout_secs = 120\npermission_mode = \"bypass\"\n\n[check]\nrunner = \"python-unittest\"\ntimeout_secs = 30\nprotected = [\"tests/test_answer.py\"]\ntests = [\"tests/test_answer.py::Answer::test_answer\"]\n"
        ),
    )
    .unwrap();
}

/// The two models' server; each trial's first answer comes after `delay`.
pub async fn model_server(delay: Duration) -> ScriptedServer {
    ScriptedServer::answering(WireFormat::AnthropicMessages, move |body| {
        answer(body, delay)
    })
    .await
}

/// A model server for probing a trial from inside: the model's first step runs `probe` with
/// bash; once it has the tool result it keeps what the command printed (the result's content,
/// pushed to the returned list, one entry per trial) and stops.
pub async fn prober(probe: String) -> (ScriptedServer, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = seen.clone();
    let server = ScriptedServer::answering(WireFormat::AnthropicMessages, move |body| {
        let usage = Usage {
            input: 40,
            output: 9,
        };
        let result = body["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
            .find(|block| block["type"] == "tool_result");
        let answer = if let Some(result) = result {
            // Only what the command printed: the request also repeats the command itself.
            kept.lock().unwrap().push(result["content"].to_string());
            anthropic_sse::text("Nothing to find.", usage)
        } else {
            anthropic_sse::tool_use(
                "toolu_probe_1",
                "bash",
                &json!({"command": probe}),
                "tool_use",
                usage,
            )
        };
        Answer::sse(answer)
    })
    .await;
    (server, seen)
}
