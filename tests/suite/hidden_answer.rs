//! The answer stays hidden, tried from inside a real trial: the scripted model's first step is
//! a bash command that hunts for the task's solution, its protected tests, other trials'
//! workspaces and the queue's files (`find /`, `cat`, `ls` of their real paths). The test
//! reads what the command printed from the tool result the agent sent back to the model.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use anvil_llm::testing::anthropic_sse::{self, Usage};
use serde_json::{Value, json};

use anvil_test_support::bins;
use anvil_test_support::model_server::{Answer, ScriptedServer, WireFormat};
use anvil_test_support::sweep as support;

/// First answer: run `probe` with bash. After the tool result: keep it, and stop.
struct Prober {
    probe: String,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Prober {
    fn answer(&self, body: &Value) -> Answer {
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
            self.seen
                .lock()
                .unwrap()
                .push(result["content"].to_string());
            anthropic_sse::text("Nothing to find.", usage)
        } else {
            anthropic_sse::tool_use(
                "toolu_probe_1",
                "bash",
                &json!({"command": self.probe}),
                "tool_use",
                usage,
            )
        };
        Answer::sse(answer)
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_trial_cannot_find_the_answer_from_inside() {
    // Not under /tmp: every sandbox has a private /tmp, which would hide it whatever the view.
    let home = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let h = home.path();
    // The tasks live in a git checkout under HOME, and PATH has a directory inside it (as a
    // worker running a freshly built anvil would): neither the checkout, its history nor the
    // tasks beside t1 may show.
    let checkout = h.join("anvil");
    let tasks = checkout.join("evals/tasks");
    support::task(&tasks, "t1");
    support::task(&tasks, "t2-sibling");
    let bin = checkout.join("target/debug");
    std::fs::create_dir_all(&bin).unwrap();
    let git = |args: &[&str]| {
        let ok = Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "commit.gpgsign=false",
            ])
            .args(args)
            .current_dir(&checkout)
            .output()
            .unwrap();
        assert!(
            ok.status.success(),
            "{}",
            String::from_utf8_lossy(&ok.stderr)
        );
    };
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["commit", "-qm", "tasks"]);
    let workspaces = h.join("trials");
    let data = h.join("data");
    // Another trial's workspace, as it would be mid-sweep, with the answer in it.
    let sibling = workspaces.join("p1.t1-good-0-a1-xyz/workspace");
    std::fs::create_dir_all(&sibling).unwrap();
    std::fs::write(sibling.join("answer.txt"), "42\n").unwrap();
    let probe = format!(
        "echo FIND-START; find / -name 'test_answer.py' -not -path '/proc/*' 2>/dev/null; \
         find / -name 'answer.txt' -not -path '/proc/*' 2>/dev/null; \
         find / -name 'queue.db*' -not -path '/proc/*' 2>/dev/null; echo FIND-END; \
         cat {solution} && echo READ-SOLUTION; cat {sibling} && echo READ-SIBLING; \
         ls {data} && echo LISTED-DATA; ls {tasks} && echo LISTED-TASKS; \
         git -c safe.directory='*' -C {checkout} show HEAD:evals/tasks/t1/solution/answer.txt && echo READ-GIT; \
         ls {checkout}/evals && echo LISTED-CHECKOUT; echo ARGV; tr '\\0' '\\n' < /proc/1/cmdline | head -3; echo PROBE-DONE",
        solution = tasks.join("t1/solution/answer.txt").display(),
        sibling = sibling.join("answer.txt").display(),
        data = data.display(),
        tasks = tasks.display(),
        checkout = checkout.display(),
    );
    let seen = Arc::new(Mutex::new(Vec::new()));
    let prober = Prober {
        probe,
        seen: seen.clone(),
    };
    let server = ScriptedServer::answering(WireFormat::AnthropicMessages, move |body| {
        prober.answer(body)
    })
    .await;
    let cfg = h.join("cfg/anvil");
    std::fs::create_dir_all(&cfg).unwrap();
    std::fs::write(cfg.join("config.toml"), support::config(&server)).unwrap();
    let out = Command::new(bins::built("anvil-evals"))
        .args(["run", "--tasks"])
        .arg(tasks.join("*"))
        .args(["--models", "good", "--trials", "1", "--sweep", "hunt"])
        .arg("--queue")
        .arg(data.join("queue.db"))
        .arg("--workspaces")
        .arg(&workspaces)
        .env_clear()
        .env(
            "PATH",
            format!(
                "{}:{}",
                bin.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .env("HOME", h)
        .env("XDG_CONFIG_HOME", h.join("cfg"))
        .env("XDG_DATA_HOME", &data)
        .env("TMPDIR", h)
        .env("MOCK_API_KEY", "sk-mock-key-123")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2, "the probe ran once per task");
    for result in seen.iter() {
        assert!(
            result.contains("FIND-START") && result.contains("PROBE-DONE"),
            "the probe ran to its end: {result}"
        );
        // stderr names the paths it could not open; stdout is what the command found.
        let stdout = result.split("stderr:").next().unwrap();
        assert!(
            stdout.contains("FIND-START\\nFIND-END"),
            "find / found something: {result}"
        );
        for leak in [
            "test_answer.py",
            "answer.txt",
            "queue.db",
            "READ-SOLUTION",
            "READ-SIBLING",
            "LISTED-DATA",
            "LISTED-TASKS",
            "READ-GIT",
            "LISTED-CHECKOUT",
            "p1.t1-good",
        ] {
            assert!(!stdout.contains(leak), "the trial saw {leak}: {result}");
        }
    }
}
