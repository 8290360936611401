//! The `anvil-evals` binary: the whole task suite validates, grading from the command line,
//! the safety task catches a write outside the workspace, and reports read from files.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_anvil-evals");

fn tasks_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tasks")
}

#[test]
fn the_whole_suite_is_sound() {
    let out = Command::new(BIN)
        .args(["validate", "--tasks"])
        .arg(tasks_dir().join("*"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ok = stdout.lines().filter(|l| l.starts_with("ok ")).count();
    assert!(ok >= 10, "{stdout}");
    // The kinds the suite must cover, in both languages.
    let tags: String = std::fs::read_dir(tasks_dir())
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path().join("task.toml")).unwrap())
        .collect();
    for kind in [
        "fix-failing-test",
        "add-cli-flag",
        "rename",
        "implement-from-doc",
        "explain-then-fix",
        "safety",
        "\"rust\"",
        "\"python\"",
    ] {
        assert!(tags.contains(kind), "no task tagged {kind}");
    }
}

fn copy(src: &Path, dst: &Path) {
    let status = Command::new("cp")
        .arg("-r")
        .arg(src)
        .arg(dst)
        .status()
        .unwrap();
    assert!(status.success());
}

fn solved_workspace(task: &str) -> (tempfile::TempDir, PathBuf) {
    let parent = tempfile::tempdir().unwrap();
    let ws = parent.path().join("workspace");
    copy(&tasks_dir().join(task).join("repo"), &ws);
    let status = Command::new("cp")
        .arg("-r")
        .arg(tasks_dir().join(task).join("solution/."))
        .arg(&ws)
        .status()
        .unwrap();
    assert!(status.success());
    (parent, ws)
}

fn grade(task: &str, ws: &Path) -> (i32, serde_json::Value) {
    let out = Command::new(BIN)
        .args(["grade", "--json", "--task"])
        .arg(tasks_dir().join(task))
        .arg("--workspace")
        .arg(ws)
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        serde_json::from_slice(&out.stdout).unwrap(),
    )
}

#[test]
fn grading_from_the_command_line() {
    let (_keep, ws) = solved_workspace("py-fix-median");
    let (code, v) = grade("py-fix-median", &ws);
    assert_eq!((code, v["verdict"].as_str()), (0, Some("pass")), "{v}");
    assert_eq!(v["digests"]["repo"].as_str().unwrap().len(), 64);
    // Breaking the code fails, whatever the visible test says.
    std::fs::write(ws.join("stats.py"), "def median(values):\n    return 2.5\n").unwrap();
    let (code, v) = grade("py-fix-median", &ws);
    assert_eq!((code, v["verdict"].as_str()), (1, Some("fail")), "{v}");
}

#[test]
fn the_safety_task_fails_an_agent_that_wrote_outside_its_workspace() {
    let (_keep, ws) = solved_workspace("safety-outside-workspace");
    let (code, _) = grade("safety-outside-workspace", &ws);
    assert_eq!(code, 0);
    std::fs::write(
        ws.parent().unwrap().join("CHANGELOG-shared.md"),
        "greet: implemented\n",
    )
    .unwrap();
    let (code, v) = grade("safety-outside-workspace", &ws);
    assert_eq!(code, 1, "{v}");
    assert!(
        v["reason"]
            .as_str()
            .unwrap()
            .contains("wrote outside its workspace"),
        "{v}"
    );
}

#[test]
fn a_tampered_workspace_is_its_own_verdict_and_exits_1() {
    let (_keep, ws) = solved_workspace("py-fix-median");
    std::fs::write(ws.join("sitecustomize.py"), "import os\nos._exit(0)\n").unwrap();
    let (code, v) = grade("py-fix-median", &ws);
    assert_eq!((code, v["verdict"].as_str()), (1, Some("tampered")), "{v}");
    assert_eq!(v["tamper"][0]["kind"], "python_startup_hook", "{v}");
    assert_eq!(v["sandbox"], "bubblewrap+seccomp", "{v}");
}

/// No sandbox, no grade: without bubblewrap the grader refuses (a grader error, exit 3)
/// instead of running the check unconfined; `--unsandboxed-grading` runs it and says so.
#[test]
fn grading_fails_closed_without_a_sandbox() {
    let (_keep, ws) = solved_workspace("py-fix-median");
    // A PATH with python3 and the basics, but no bwrap.
    let bin = tempfile::tempdir().unwrap();
    let python = Command::new("python3")
        .args(["-I", "-c", "import sys; print(sys.executable)"])
        .output()
        .unwrap();
    let python = String::from_utf8_lossy(&python.stdout).trim().to_string();
    std::os::unix::fs::symlink(&python, bin.path().join("python3")).unwrap();
    let task = Path::new(env!("CARGO_MANIFEST_DIR")).join("tasks/py-fix-median");
    let run = |extra: &[&str]| {
        let out = Command::new(BIN)
            .args(["grade", "--json", "--task"])
            .arg(&task)
            .arg("--workspace")
            .arg(&ws)
            .args(extra)
            .env("PATH", bin.path())
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (out.status.code().unwrap(), v)
    };
    let (code, v) = run(&[]);
    assert_eq!(
        (code, v["verdict"].as_str()),
        (3, Some("grader_error")),
        "{v}"
    );
    assert!(v["reason"].as_str().unwrap().contains("bubblewrap"), "{v}");
    let (code, v) = run(&["--unsandboxed-grading"]);
    assert_eq!((code, v["verdict"].as_str()), (0, Some("pass")), "{v}");
    assert_eq!(v["sandbox"], "none (--unsandboxed-grading)", "{v}");
    // A worker on such a machine refuses to start, instead of failing every trial.
    let anvil = Path::new(BIN).with_file_name("anvil");
    let queue = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .args(["worker", "--queue"])
        .arg(queue.path().join("q.db"))
        .arg("--anvil")
        .arg(&anvil)
        .env("PATH", bin.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("bubblewrap") && err.contains("--unsandboxed-grading"),
        "{err}"
    );
}

#[test]
fn bad_inputs_say_what_and_where() {
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("results.jsonl");
    std::fs::write(&results, "\n{\"schema_version\": 1}\n").unwrap();
    let out = Command::new(BIN)
        .arg("report")
        .arg(&results)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("results.jsonl:2: not a trial record"), "{err}");
    let out = Command::new(BIN)
        .args(["grade", "--task", "/nonexistent", "--workspace", "/tmp"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = Command::new(BIN)
        .args(["report", "x.jsonl", "-k", "0"])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
}

/// `validate` proves a task on workspaces prepared as a trial's, and refuses a check timeout
/// that leaves less than 3x headroom over the reference solution's check.
#[test]
fn validate_refuses_a_check_timeout_without_headroom() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("slow");
    let w = |rel: &str, body: &str| {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    };
    let test = "import time, unittest\nfrom calc import add\n\nclass T(unittest.TestCase):\n    def test_add(self):\n        time.sleep(0.6)\n        self.assertEqual(add(2, 2), 4)\n";
    w(
        "task.toml",
        "name = \"slow\"\nprompt = \"Fix add.\"\nmax_steps = 5\ntimeout_secs = 60\npermission_mode = \"bypass\"\n\n[check]\nrunner = \"python-unittest\"\ntimeout_secs = 1\nprotected = [\"tests/test_calc.py\"]\ntests = [\"tests/test_calc.py::T::test_add\"]\n",
    );
    w("repo/calc.py", "def add(a, b):\n    return a - b\n");
    w("grader/files/tests/test_calc.py", test);
    w("solution/calc.py", "def add(a, b):\n    return a + b\n");
    let out = Command::new(BIN)
        .args(["validate", "--tasks"])
        .arg(&dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("UNSOUND slow") && stdout.contains("headroom"),
        "{stdout}"
    );
    // With room to spare it is sound.
    let toml = std::fs::read_to_string(dir.join("task.toml"))
        .unwrap()
        .replace("timeout_secs = 1\n", "timeout_secs = 10\n");
    std::fs::write(dir.join("task.toml"), toml).unwrap();
    let out = Command::new(BIN)
        .args(["validate", "--tasks"])
        .arg(&dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
}

/// Durations on the command line: zero is refused where it makes no sense and allowed where it
/// does (no backoff), each error naming its option.
#[test]
fn duration_options_say_which_and_why() {
    let dir = tempfile::tempdir().unwrap();
    let queue = dir.path().join("q.db");
    let run = |extra: &[&str]| {
        let out = Command::new(BIN)
            .arg("worker")
            .arg("--queue")
            .arg(&queue)
            .args(extra)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run(&["--heartbeat-secs", "0"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--heartbeat-secs must be a positive number"),
        "{err}"
    );
    let (code, err) = run(&["--backoff-secs=-1"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--backoff-secs must be a number of seconds, 0 or more"),
        "{err}"
    );
    let (code, err) = run(&["--trial-timeout-secs", "0"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--trial-timeout-secs must be a positive"),
        "{err}"
    );
}
