//! A model server for sweeps: wiremock answering in the Anthropic wire format as two
//! "models" (`claude-good` writes answer.txt holding 42, `claude-bad` never does), a config
//! naming them, and tasks whose check wants that answer. Shared by the sweep tests and the
//! sweep benchmark.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use anvil_llm::testing::anthropic_sse::{self, Usage};
use serde_json::{Value, json};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

fn text_answer(text: &str) -> String {
    anthropic_sse::text(
        text,
        Usage {
            input: 40,
            output: 5,
        },
    )
}

fn write_answer() -> String {
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

pub struct Models {
    /// Delay of each trial's first answer.
    pub delay: Duration,
}

impl Respond for Models {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        let model = body["model"].as_str().unwrap_or("");
        let after_tool = body.to_string().contains("\"tool_result\"");
        let answer = match (model, after_tool) {
            ("claude-good", false) => write_answer(),
            ("claude-good", true) => text_answer("I wrote answer.txt."),
            _ => text_answer("I cannot work out the answer."),
        };
        let delay = if after_tool {
            Duration::ZERO
        } else {
            self.delay
        };
        ResponseTemplate::new(200)
            .insert_header("content-type", "text/event-stream")
            .set_body_string(answer)
            .set_delay(delay)
    }
}

// ---- the machine: config, tasks, queue -------------------------------------------------------

/// `anvil-evals ARGS` on a machine whose home is `home`: config in `home/cfg`, data in
/// `home/data`, temp files (and so workspaces) in `home`, the mock model's credential set,
/// nothing else from this process's environment but PATH.
pub fn evals_command(home: &Path, args: &[&str]) -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_anvil-evals"));
    c.args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("cfg"))
        .env("XDG_DATA_HOME", home.join("data"))
        .env("TMPDIR", home)
        .env("MOCK_API_KEY", "sk-mock-key-123")
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

pub async fn model_server(delay: Duration) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(wiremock::matchers::method("POST"))
        .respond_with(Models { delay })
        .mount(&server)
        .await;
    server
}
