//! `anvil auto` end to end: the real `anvil auto run` (its in-process worker, the real
//! orchestrator, `anvil -p` children, git and the sandboxed verify step) driven by a scripted
//! model, on a tiny spec of two shell-verifiable features (F001: a.txt holds A; F002: b.txt
//! holds B). The model's behaviour per scenario is a [`Behaviour`].

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

use anvil_test_support::bins;
use anvil_test_support::home::{Home, git};
use anvil_test_support::model_server::{Answer, ScriptedServer, WireFormat, wire};
use anvil_test_support::sweep as support;

/// How the scripted worker behaves.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Behaviour {
    /// Implements the first failing feature, claims it, and stops.
    Honest,
    /// Claims every feature passes in features.json without implementing anything.
    ClaimOnly,
    /// Implements the first failing feature and also rewrites its description.
    Tamper,
}

const FEATURES: &str = r#"{"version": 1, "spec_digest": "", "test_command": "true",
 "protected": ["tests/"],
 "features": [
  {"id": "F001", "description": "a.txt holds A", "steps": ["write a.txt"],
   "verify": {"cmd": "test \"$(cat a.txt)\" = A", "timeout_s": 30}, "passes": false},
  {"id": "F002", "description": "b.txt holds B", "steps": ["write b.txt"],
   "verify": {"cmd": "test \"$(cat b.txt)\" = B", "timeout_s": 30}, "passes": false}
 ]}"#;

fn usage() -> wire::Usage {
    wire::Usage {
        input: 40,
        output: 9,
    }
}

/// The text of the first user message of a request.
fn first_user_text(body: &Value) -> String {
    let content = &body["messages"][0]["content"];
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The first feature the status block lists as failing.
fn first_failing(prompt: &str) -> Option<String> {
    let failing = prompt.split("Failing (").nth(1)?;
    let line = failing.lines().find(|l| l.starts_with("- F"))?;
    Some(line[2..6].to_string())
}

fn write(id: &str, path: &str, content: &str) -> (String, String, Value) {
    (
        id.to_string(),
        "write_file".to_string(),
        json!({"file_path": path, "content": content}),
    )
}

/// Overwrites `path` through the shell (write_file refuses a file the model has not read).
fn overwrite(id: &str, path: &str, content: &str) -> (String, String, Value) {
    assert!(!content.contains('\''));
    (
        id.to_string(),
        "bash".to_string(),
        json!({"command": format!("printf '%s' '{content}' > {path}")}),
    )
}

fn answer(body: &Value, behaviour: Behaviour) -> Answer {
    let format = WireFormat::AnthropicMessages;
    if body.to_string().contains("\"tool_result\"") {
        return Answer::sse(wire::text(
            format,
            "All done: every feature passes.",
            usage(),
        ));
    }
    let prompt = first_user_text(body);
    let calls: Vec<(String, String, Value)> = if prompt.contains("You are the initializer") {
        vec![write("toolu_init", "features.json", FEATURES)]
    } else {
        let claimed_all = with_digest(FEATURES).replace("\"passes\": false", "\"passes\": true");
        match (behaviour, first_failing(&prompt).as_deref()) {
            (Behaviour::ClaimOnly, _) => {
                vec![overwrite("toolu_claim", "features.json", &claimed_all)]
            }
            (_, Some(id)) => {
                let (file, content) = if id == "F001" {
                    ("a.txt", "A")
                } else {
                    ("b.txt", "B")
                };
                let mut contract: Value = serde_json::from_str(&current_features(&prompt)).unwrap();
                for f in contract["features"].as_array_mut().unwrap() {
                    if f["id"] == id {
                        f["passes"] = json!(true);
                        if behaviour == Behaviour::Tamper {
                            f["description"] = json!("anything at all");
                        }
                    }
                }
                vec![
                    write("toolu_work", file, content),
                    overwrite("toolu_claim", "features.json", &contract.to_string()),
                ]
            }
            (_, None) => vec![write("toolu_note", "progress.md", "nothing left\n")],
        }
    };
    let calls: Vec<(&str, &str, Value)> = calls
        .iter()
        .map(|(id, name, input)| (id.as_str(), name.as_str(), input.clone()))
        .collect();
    Answer::sse(wire::tool_calls(format, &calls, usage()))
}

const SPEC: &str = "Two files: a.txt holding A, b.txt holding B.\n";

/// `features` with the spec's digest, as the harness wrote it into the accepted contract (a
/// model editing the file keeps it).
fn with_digest(features: &str) -> String {
    let digest = anvil_runner::auto::contract::spec_digest(SPEC.as_bytes());
    features.replace(
        "\"spec_digest\": \"\"",
        &format!("\"spec_digest\": \"{digest}\""),
    )
}

/// The contract as the status block implies it: verified features listed there pass.
fn current_features(prompt: &str) -> String {
    let verified = prompt
        .split("Verified (")
        .nth(1)
        .and_then(|s| s.split("Failing (").next())
        .unwrap_or("");
    let mut contract: Value = serde_json::from_str(&with_digest(FEATURES)).unwrap();
    for f in contract["features"].as_array_mut().unwrap() {
        let id = f["id"].as_str().unwrap().to_string();
        if verified.contains(&format!("- {id}:")) {
            f["passes"] = json!(true);
        }
    }
    contract.to_string()
}

/// A user's machine: a home with the scripted model's config and a checkout with a spec.
struct Machine {
    home: Home,
    repo: PathBuf,
    queue: String,
}

impl Machine {
    fn new(server: &ScriptedServer, queue: Option<String>) -> Machine {
        let home = Home::new();
        home.write_config(&support::config(server));
        let repo = home.git_repo(
            "project",
            &[("README.md", "# project\n"), ("SPEC.md", SPEC)],
        );
        let queue =
            queue.unwrap_or_else(|| home.path().join("data/queue.db").display().to_string());
        Machine { home, repo, queue }
    }

    fn anvil(&self, args: &[&str]) -> Output {
        let mut c: Command = self.home.command(bins::built("anvil"));
        c.arg("auto")
            .args(args)
            .arg("--queue")
            .arg(&self.queue)
            .env("TMPDIR", self.home.path())
            .current_dir(&self.repo);
        c.output().unwrap()
    }

    fn report(&self, run: &str) -> Value {
        let out = self.anvil(&["report", run, "--json"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    fn git_out(&self, args: &[&str]) -> String {
        let out = Command::new("git")
            .args(args)
            .current_dir(&self.repo)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn run_id(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// The happy path on `queue` (None: a SQLite file in the home).
async fn happy_path(queue: Option<String>) {
    let server = ScriptedServer::answering(WireFormat::AnthropicMessages, |body| {
        answer(body, Behaviour::Honest)
    })
    .await;
    let m = Machine::new(&server, queue);
    let head_before = m.git_out(&["rev-parse", "HEAD"]);
    let out = m.anvil(&["run", "SPEC.md", "--max-sessions", "5"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let run = run_id(&out);
    let report = m.report(&run);
    assert_eq!(report["state"], "complete", "{report:#}");
    assert_eq!(report["features_verified"], 2, "{report:#}");
    assert_eq!(report["false_claims"], json!([]), "{report:#}");
    assert_eq!(report["rejected_edits"], json!([]), "{report:#}");
    assert_eq!(report["regressions"], json!([]), "{report:#}");
    let states: Vec<&str> = report["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["accepted", "merged", "merged"], "{report:#}");
    // One commit per session on the run branch, with the trailers; the user's checkout as it was.
    let log = m.git_out(&["log", "--format=%s", &format!("auto/{run}")]);
    assert_eq!(
        log.lines().collect::<Vec<_>>(),
        [
            "auto(s2): verify F002",
            "auto(s1): verify F001",
            "auto(s0): accept the contract",
            "init"
        ],
        "{log}"
    );
    let last = m.git_out(&["log", "-1", "--format=%B", &format!("auto/{run}")]);
    for trailer in [
        format!("Anvil-Run: {run}"),
        "Anvil-Session: 2".to_string(),
        "Anvil-Verified: F002".to_string(),
        "Anvil-Cost: ".to_string(),
    ] {
        assert!(last.contains(&trailer), "{trailer} in {last}");
    }
    let features = m.git_out(&["show", &format!("auto/{run}:features.json")]);
    let features: Value = serde_json::from_str(&features).unwrap();
    assert!(
        features["features"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["passes"] == json!(true)),
        "{features:#}"
    );
    assert!(
        features["spec_digest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    assert_eq!(m.git_out(&["status", "--porcelain"]), "");
    assert_eq!(m.git_out(&["rev-parse", "HEAD"]), head_before);
    // Every session kept its transcript, and `anvil replay` reads it.
    for s in report["sessions"].as_array().unwrap() {
        let path = Path::new(s["transcript"].as_str().unwrap());
        assert!(path.is_file(), "{}", path.display());
        let out = m
            .home
            .command(bins::built("anvil"))
            .arg("replay")
            .arg(path)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    }
    // The second worker's first request carried the status block.
    let requests = server.requests();
    let second_worker = requests
        .iter()
        .filter(|r| !r.to_string().contains("\"tool_result\""))
        .map(first_user_text)
        .filter(|t| t.contains("You are a worker session"))
        .nth(1)
        .unwrap();
    assert!(
        second_worker.contains("Verified (1):\n- F001"),
        "{second_worker}"
    );
    assert!(
        second_worker.contains("auto(s1): verify F001"),
        "{second_worker}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn happy_path_completes_with_a_commit_per_session_on_sqlite() {
    happy_path(None).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn happy_path_completes_on_postgres() {
    let url = anvil_test_support::databases::fresh_postgres("auto_happy").await;
    happy_path(Some(url.clone())).await;
    anvil_test_support::databases::drop_postgres(&url).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claim_without_a_passing_check_is_a_false_claim_and_the_run_stalls() {
    let server = ScriptedServer::answering(WireFormat::AnthropicMessages, |body| {
        answer(body, Behaviour::ClaimOnly)
    })
    .await;
    let m = Machine::new(&server, None);
    let out = m.anvil(&["run", "SPEC.md", "--max-sessions", "6"]);
    // "All done" said every time, nothing verified: never complete.
    assert_eq!(out.status.code(), Some(12), "{}", text(&out));
    let run = run_id(&out);
    let report = m.report(&run);
    assert_eq!(report["state"], "stalled", "{report:#}");
    assert_eq!(report["features_verified"], 0, "{report:#}");
    let false_claims: Vec<&str> = report["false_claims"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(false_claims[..2], ["F001", "F002"], "{report:#}");
    let features = m.git_out(&["show", &format!("auto/{run}:features.json")]);
    assert!(!features.contains("\"passes\": true"), "{features}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tampered_description_is_rejected_and_reverted() {
    let server = ScriptedServer::answering(WireFormat::AnthropicMessages, |body| {
        answer(body, Behaviour::Tamper)
    })
    .await;
    let m = Machine::new(&server, None);
    let out = m.anvil(&["run", "SPEC.md", "--max-sessions", "5"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let run = run_id(&out);
    let report = m.report(&run);
    let rejected = report["rejected_edits"].as_array().unwrap();
    assert!(!rejected.is_empty(), "{report:#}");
    assert_eq!(
        rejected[0]["field"], "features[0].description",
        "{report:#}"
    );
    assert_eq!(rejected[0]["after"], "anything at all", "{report:#}");
    let flags = &report["sessions"][1]["flags"];
    assert!(
        flags.as_array().unwrap().contains(&json!("rejected_edit")),
        "{report:#}"
    );
    let features = m.git_out(&["show", &format!("auto/{run}:features.json")]);
    assert!(!features.contains("anything at all"), "{features}");
    assert!(features.contains("a.txt holds A"), "{features}");
    git(&m.repo, &["status"]);
}

/// `kill -9` of `anvil auto run` while a worker session waits on the model, then
/// `anvil auto resume`: the session runs again as its next attempt from the last validated
/// commit, the dead attempt's worktree is saved as a patch, and the run completes with one
/// commit per session.
#[tokio::test(flavor = "multi_thread")]
async fn kill_9_mid_session_then_resume_runs_the_next_attempt() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let stalled = std::sync::Arc::new(AtomicBool::new(false));
    let first = stalled.clone();
    let server = ScriptedServer::answering(WireFormat::AnthropicMessages, move |body| {
        let worker = first_user_text(body).contains("You are a worker session");
        let after_tool = body.to_string().contains("\"tool_result\"");
        let a = answer(body, Behaviour::Honest);
        // The first worker session's second request hangs (the worker is killed meanwhile).
        if worker && after_tool && !first.swap(true, Ordering::SeqCst) {
            return a.after(std::time::Duration::from_secs(120));
        }
        a
    })
    .await;
    let m = Machine::new(&server, None);
    let mut c: Command = m.home.command(bins::built("anvil"));
    c.args(["auto", "run", "SPEC.md", "--queue", &m.queue])
        .env("TMPDIR", m.home.path())
        .current_dir(&m.repo)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    let mut child = c.spawn().unwrap();
    anvil_test_support::poll::poll_until(
        std::time::Duration::from_secs(120),
        "the first worker session to be waiting on the model",
        || stalled.load(Ordering::SeqCst).then_some(()),
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let _ = child.wait();
    let mut stdout = String::new();
    std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut stdout).unwrap();
    let run = stdout.lines().next().unwrap().trim().to_string();
    let out = m.anvil(&["resume", &run]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let report = m.report(&run);
    assert_eq!(report["state"], "complete", "{report:#}");
    let rows: Vec<(i64, i64, &str)> = report["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["session"].as_i64().unwrap(),
                s["attempt"].as_i64().unwrap(),
                s["state"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            (0, 1, "accepted"),
            (1, 1, "dead"),
            (1, 2, "merged"),
            (2, 1, "merged")
        ],
        "{report:#}"
    );
    let log = m.git_out(&["log", "--format=%s", &format!("auto/{run}")]);
    assert_eq!(log.lines().count(), 4, "{log}");
    let data = m.home.path().join(format!("data/anvil/auto/{run}"));
    let patch = std::fs::read_to_string(data.join("leftovers/s1a1.patch")).unwrap();
    assert!(patch.contains("a.txt"), "{patch}");
    assert!(!data.join("attempts/s1a1").exists());
    assert_eq!(m.git_out(&["status", "--porcelain"]), "");
}
