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

/// One trial record line (schema version 1: what any reporter reads).
fn record_line(task: &str, model: &str, trial: u32, pass: bool) -> String {
    serde_json::json!({
        "schema_version": 1,
        "sweep": "s",
        "task": task,
        "model": model,
        "trial": trial,
        "attempt": 1,
        "pass": pass,
        "outcome": "done",
        "infra_error": null,
        "steps": 3,
        "tokens": {"input": 1, "output": 1, "cache_read": 0, "cache_write": 0},
        "cost_usd": null,
        "accounting": "unknown",
        "duration_ms": 1000,
        "session_path": null,
        "digests": {"task": "", "repo": "", "grader": "", "dependencies": "", "model_config": ""},
        "anvil_git_sha": "abc",
    })
    .to_string()
        + "\n"
}

/// Per model, on task i, the first `passes[i]` of 5 trials pass.
fn write_results(path: &Path, models: &[(&str, &[u32])]) {
    let mut text = String::new();
    for (model, passes) in models {
        for (i, &p) in passes.iter().enumerate() {
            for trial in 0..5 {
                text.push_str(&record_line(
                    &format!("task-{i:02}"),
                    model,
                    trial,
                    trial < p,
                ));
            }
        }
    }
    std::fs::write(path, text).unwrap();
}

/// `anvil-evals report ARGS`: exit code, stdout, stderr.
fn report_cli(args: &[&std::ffi::OsStr]) -> (Option<i32>, String, String) {
    let out = Command::new(BIN).arg("report").args(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `--fail-on`: exit 4 on a significant regression or a metric below its floor, after the
/// report is written, naming each failing model and metric on stderr; 0 when the gates hold
/// (or none is given); 2 for a gate that cannot be evaluated.
#[test]
fn report_gates_exit_4_when_they_fail_and_2_when_they_cannot_be_evaluated() {
    let dir = tempfile::tempdir().unwrap();
    let (base, now) = (dir.path().join("base.jsonl"), dir.path().join("now.jsonl"));
    // alpha drops from 5/5 to 2/5 on each of 12 tasks; beta stays at 4/5.
    write_results(&base, &[("alpha", &[5; 12]), ("beta", &[4; 12])]);
    write_results(&now, &[("alpha", &[2; 12]), ("beta", &[4; 12])]);
    let os = |s: &'static str| std::ffi::OsStr::new(s);
    let (base, now) = (base.as_os_str(), now.as_os_str());

    let (code, out, err) = report_cli(&[
        now,
        os("--baseline"),
        base,
        os("-k"),
        os("1"),
        os("--fail-on"),
        os("regression"),
    ]);
    assert_eq!(code, Some(4), "{out}\n{err}");
    assert!(
        out.contains("REGRESSION"),
        "the report is still printed: {out}"
    );
    let failed: Vec<&str> = err.lines().filter(|l| l.contains("gate failed")).collect();
    assert_eq!(failed.len(), 1, "{err}");
    assert!(
        failed[0].starts_with(
            "anvil-evals: gate failed: alpha: pass@1 regressed against the baseline by 60.0 pts (100.0% → 40.0% on 12 shared tasks"
        ),
        "{err}"
    );
    // Each regressed metric is named: with -k 1,3, pass@3 and pass^3 too.
    let (code, _, err) = report_cli(&[
        now,
        os("--baseline"),
        base,
        os("-k"),
        os("1,3"),
        os("--fail-on"),
        os("regression"),
    ]);
    assert_eq!(code, Some(4), "{err}");
    assert_eq!(err.matches("gate failed: alpha: ").count(), 3, "{err}");
    // Without the gate the same regression exits 0.
    let (code, _, err) = report_cli(&[now, os("--baseline"), base]);
    assert_eq!(code, Some(0), "{err}");
    // A model the baseline never ran cannot be shown not to regress: the gate fails closed.
    let gamma = dir.path().join("gamma.jsonl");
    write_results(&gamma, &[("alpha", &[5; 12]), ("gamma", &[0; 12])]);
    let (code, _, err) = report_cli(&[
        gamma.as_os_str(),
        os("--baseline"),
        base,
        os("-k"),
        os("1"),
        os("--fail-on"),
        os("regression"),
    ]);
    assert_eq!(code, Some(4), "{err}");
    assert!(
        err.contains("gate failed: gamma: not compared with the baseline"),
        "{err}"
    );

    // A floor: alpha's pass@1 is 40%.
    let (code, out, err) =
        report_cli(&[now, os("-k"), os("1,3"), os("--fail-on"), os("pass@1<0.6")]);
    assert_eq!(code, Some(4), "{err}");
    assert!(out.contains("alpha"), "{out}");
    assert!(
        err.contains(
            "anvil-evals: gate failed: alpha: pass@1 is 40.0%, below the floor 60.0% by 20.0 pts"
        ),
        "{err}"
    );
    assert!(
        !err.contains("beta"),
        "beta (80%) is above the floor: {err}"
    );
    let (code, _, err) = report_cli(&[
        now,
        os("--fail-on"),
        os("pass@1<0.3"),
        os("--fail-on"),
        os("pass@3<50%"),
    ]);
    assert_eq!(code, Some(0), "{err}");
    // Written to a file, the report is there even when a gate fails.
    let md = dir.path().join("summary.md");
    let (code, out, err) = report_cli(&[
        now,
        os("--format"),
        os("markdown"),
        os("-o"),
        md.as_os_str(),
        os("--fail-on"),
        os("pass@1<0.6"),
    ]);
    assert_eq!((code, out.as_str()), (Some(4), ""), "{err}");
    let md = std::fs::read_to_string(&md).unwrap();
    assert!(md.starts_with("# anvil eval report\n\nResults: "), "{md}");
    assert!(md.contains("| alpha | 12 | 60 | 0 | 0 | 40.0% ["), "{md}");

    // Gates that cannot be evaluated are bad input, and nothing is printed.
    let (code, out, err) = report_cli(&[now, os("-k"), os("1"), os("--fail-on"), os("pass@9<0.5")]);
    assert_eq!((code, out.as_str()), (Some(2), ""), "{err}");
    assert!(
        err.contains(
            "pass@9, which this report does not compute (it computes pass@1); add 9 to -k"
        ),
        "{err}"
    );
    let (code, out, err) = report_cli(&[now, os("--fail-on"), os("regression")]);
    assert_eq!((code, out.as_str()), (Some(2), ""), "{err}");
    assert!(err.contains("--baseline"), "{err}");
    let (code, _, err) = report_cli(&[now, os("--fail-on"), os("pass@1<=0.5")]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("not a gate"), "{err}");
    let (code, _, err) = report_cli(&[
        now,
        os("--format"),
        os("junit"),
        os("--junit-threshold"),
        os("1.5"),
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--junit-threshold must be a pass rate from 0 to 1"),
        "{err}"
    );
    let (code, _, err) = report_cli(&[now, os("--junit-threshold"), os("0.5")]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--format junit only"), "{err}");
}

/// The element names of `xml` balance (every start tag is closed, in order) and its
/// attributes are quoted: a structural check, without an XML parser.
fn assert_well_formed(xml: &str) {
    let mut open: Vec<String> = Vec::new();
    let mut rest = xml;
    while let Some(start) = rest.find('<') {
        let end = rest[start..].find('>').expect("an unclosed tag") + start;
        let tag = &rest[start + 1..end];
        assert!(!tag.contains('<'), "a '<' inside a tag: {tag}");
        assert_eq!(tag.matches('"').count() % 2, 0, "unbalanced quotes: {tag}");
        if tag.starts_with('?') {
            assert!(tag.ends_with('?'), "{tag}");
        } else if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(
                open.pop().as_deref(),
                Some(name),
                "</{name}> closes nothing open"
            );
        } else if !tag.ends_with('/') {
            open.push(tag.split_whitespace().next().unwrap().to_string());
        }
        // Text between tags has no bare '>' or unescaped '&' other than entities.
        let text = &rest[end + 1..];
        let text = &text[..text.find('<').unwrap_or(text.len())];
        assert!(!text.contains('>'), "{text}");
        rest = &rest[end + 1..];
    }
    assert!(open.is_empty(), "never closed: {open:?}");
}

/// `--format junit`: one test case per task × model, failed below the threshold, counted
/// in the suites' attributes.
#[test]
fn report_as_junit_xml_has_a_case_per_task_and_model() {
    let dir = tempfile::tempdir().unwrap();
    let now = dir.path().join("now.jsonl");
    // alpha fails below 50% on two tasks of four; beta on one (at exactly 40%).
    write_results(&now, &[("alpha", &[5, 1, 0, 3]), ("beta", &[5, 5, 5, 2])]);
    let (code, xml, err) = report_cli(&[now.as_os_str(), "--format".as_ref(), "junit".as_ref()]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        xml.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites "),
        "{xml}"
    );
    assert_well_formed(&xml);
    assert_eq!(xml.matches("<testcase ").count(), 8, "{xml}");
    assert_eq!(xml.matches("<testsuite ").count(), 2, "{xml}");
    assert_eq!(xml.matches("<failure ").count(), 3, "{xml}");
    assert!(
        xml.contains("tests=\"8\" failures=\"3\" errors=\"0\" skipped=\"0\""),
        "{xml}"
    );
    assert!(
        xml.contains("<testcase name=\"task-01\" classname=\"alpha\" time=\"5.000\">\n      <failure message=\"1/5 passed (trial 0 pass, 1 fail, 2 fail, 3 fail, 4 fail)\""),
        "{xml}"
    );
    // A stricter threshold fails more cases.
    let (code, xml, err) = report_cli(&[
        now.as_os_str(),
        "--format".as_ref(),
        "junit".as_ref(),
        "--junit-threshold".as_ref(),
        "1".as_ref(),
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(xml.matches("<failure ").count(), 4, "{xml}");
    assert!(
        xml.contains("tests=\"8\" failures=\"4\" errors=\"0\" skipped=\"0\""),
        "{xml}"
    );
}

// ---- the queue's history: sweeps, trend, report --baseline -----------------------------------

mod history {
    use std::path::PathBuf;
    use std::process::{Command, Output};

    use anvil_runner::jobs::queue::{Db, QueueLocation, SweepRow, TrialKey, TrialState};
    use serde_json::{Value, json};

    use super::BIN;

    /// 2026-12-01 00:00 UTC.
    const DAY1: i64 = 1_796_083_200_000;
    const DAY: i64 = 86_400_000;

    #[derive(Clone, Copy)]
    enum T {
        Pass,
        Fail,
        Infra,
        Running,
        Queued,
    }
    use T::*;

    /// (task, model, variant, the outcome of each trial, the cost of each graded trial).
    type Cell = (
        &'static str,
        &'static str,
        &'static str,
        Vec<T>,
        Option<f64>,
    );

    /// One sweep to store.
    struct Fixture {
        id: &'static str,
        day: i64,
        tasks: &'static [&'static str],
        models: &'static [&'static str],
        variants: &'static [&'static str],
        cells: Vec<Cell>,
        cancel: bool,
    }

    fn spec(tasks: &[&str], models: &[&str], variants: &[&str], trials: u32) -> String {
        let tasks: Vec<Value> = tasks
            .iter()
            .map(|t| {
                json!({"name": t, "dir": format!("/tasks/{t}"),
                       "digests": {"task": "t", "repo": "r", "grader": "g", "dependencies": "d"}})
            })
            .collect();
        let variants: Vec<Value> = variants.iter().map(|v| json!({"name": v})).collect();
        json!({"tasks": tasks, "models": models, "variants": variants, "trials": trials,
               "max_attempts": 3})
        .to_string()
    }

    fn key(sweep: &str, task: &str, model: &str, variant: &str, trial: u32) -> TrialKey {
        let mut k = json!({"sweep": sweep, "task": task, "model": model, "trial": trial});
        if !variant.is_empty() {
            k["variant"] = json!(variant);
        }
        serde_json::from_value(k).unwrap()
    }

    fn record(key: &TrialKey, outcome: T, cost: Option<f64>) -> anvil_report::TrialRecord {
        let infra = matches!(outcome, Infra);
        let mut r = json!({
            "schema_version": anvil_report::SCHEMA_VERSION,
            "sweep": key.sweep, "task": key.task, "model": key.model, "trial": key.trial,
            "attempt": 1,
            "pass": if infra { Value::Null } else { json!(matches!(outcome, Pass)) },
            "outcome": if infra { Value::Null } else { json!("done") },
            "infra_error": if infra { json!("provider unreachable") } else { Value::Null },
            "steps": 3,
            "tokens": {"input": 10, "output": 5, "cache_read": 0, "cache_write": 0},
            "cost_usd": if infra { Value::Null } else { json!(cost) },
            "accounting": if cost.is_some() && !infra { "reported" } else { "unknown" },
            "duration_ms": 1000,
            "session_path": null, "workspace_path": null,
            "digests": {"task": "t", "repo": "r", "grader": "g", "dependencies": "d", "model_config": "m"},
            "anvil_git_sha": "test",
        });
        if let Some(v) = &key.variant {
            r["variant"] = json!(v);
        }
        serde_json::from_value(r).unwrap()
    }

    /// Stores the sweeps through the queue's own API, as workers would have left them.
    async fn store(db: &Db, fixtures: &[Fixture]) {
        for f in fixtures {
            let row = SweepRow {
                id: f.id.into(),
                created_at_ms: DAY1 + (f.day - 1) * DAY + 2 * 3_600_000,
                spec: spec(f.tasks, f.models, f.variants, 2),
                fingerprint: "f".into(),
                anvil_git_sha: "test".into(),
                cancelled: false,
            };
            db.record_sweep(&row).await.unwrap();
            let mut keys = Vec::new();
            for (task, model, variant, trials, cost) in &f.cells {
                for (i, outcome) in trials.iter().enumerate() {
                    keys.push((key(f.id, task, model, variant, i as u32), *outcome, *cost));
                }
            }
            let all: Vec<TrialKey> = keys.iter().map(|(k, _, _)| k.clone()).collect();
            db.add_trials(&all).await.unwrap();
            for (k, outcome, cost) in &keys {
                match outcome {
                    Queued => {}
                    Running => assert!(db.claim(k, 1, "w1").await.unwrap()),
                    Infra => {
                        let r = record(k, *outcome, None);
                        let done = db.finish(k, 1, TrialState::InfraError, Some(&r), Some("x"));
                        assert!(done.await.unwrap());
                    }
                    Pass | Fail => {
                        let r = record(k, *outcome, *cost);
                        assert!(
                            db.finish(k, 1, TrialState::Done, Some(&r), None)
                                .await
                                .unwrap()
                        );
                    }
                }
            }
            if f.cancel {
                db.cancel_sweep(f.id).await.unwrap();
            }
        }
    }

    /// Nightly sweeps on three tasks × two models × two trials, hand-counted:
    /// - nightly-1 (finished): good a 2/2, b 1/2, c 2/2 → pass@1 5/6; bad 0/6. Cost: good
    ///   $0.01 a trial, bad unknown.
    /// - nightly-2 (finished): good 6/6 → 1; bad a 1/2, b 0/1 + an infra error, c 0/2 → 1/6.
    ///   Cost: good $0.02 a trial.
    /// - nightly-3 (cancelled after one trial: good a 1/1).
    /// - nightly-4 (running: good a 1/1 done, one running, the rest queued).
    /// - weekly-1 (finished): good 6/6, bad 0/6; newer than every nightly.
    /// - variant-1 (finished): good on task a in variants terse (2/2) and verbose (0/2).
    fn fixtures() -> Vec<Fixture> {
        const TASKS: &[&str] = &["a", "b", "c"];
        const MODELS: &[&str] = &["good", "bad"];
        let all = |outcome: T, cost: Option<f64>| {
            let mut cells = Vec::new();
            for task in ["a", "b", "c"] {
                cells.push((task, "good", "", vec![outcome, outcome], cost));
                cells.push((task, "bad", "", vec![Fail, Fail], None));
            }
            cells
        };
        let rest_queued = |first: Vec<T>| {
            let mut cells = vec![("a", "good", "", first, Some(0.01))];
            cells.push(("a", "bad", "", vec![Queued, Queued], None));
            for task in ["b", "c"] {
                cells.push((task, "good", "", vec![Queued, Queued], None));
                cells.push((task, "bad", "", vec![Queued, Queued], None));
            }
            cells
        };
        vec![
            Fixture {
                id: "nightly-1",
                day: 1,
                tasks: TASKS,
                models: MODELS,
                variants: &[],
                cells: vec![
                    ("a", "good", "", vec![Pass, Pass], Some(0.01)),
                    ("b", "good", "", vec![Pass, Fail], Some(0.01)),
                    ("c", "good", "", vec![Pass, Pass], Some(0.01)),
                    ("a", "bad", "", vec![Fail, Fail], None),
                    ("b", "bad", "", vec![Fail, Fail], None),
                    ("c", "bad", "", vec![Fail, Fail], None),
                ],
                cancel: false,
            },
            Fixture {
                id: "nightly-2",
                day: 2,
                tasks: TASKS,
                models: MODELS,
                variants: &[],
                cells: vec![
                    ("a", "good", "", vec![Pass, Pass], Some(0.02)),
                    ("b", "good", "", vec![Pass, Pass], Some(0.02)),
                    ("c", "good", "", vec![Pass, Pass], Some(0.02)),
                    ("a", "bad", "", vec![Pass, Fail], None),
                    ("b", "bad", "", vec![Fail, Infra], None),
                    ("c", "bad", "", vec![Fail, Fail], None),
                ],
                cancel: false,
            },
            Fixture {
                id: "nightly-3",
                day: 3,
                tasks: TASKS,
                models: MODELS,
                variants: &[],
                cells: rest_queued(vec![Pass, Queued]),
                cancel: true,
            },
            Fixture {
                id: "nightly-4",
                day: 4,
                tasks: TASKS,
                models: MODELS,
                variants: &[],
                cells: rest_queued(vec![Pass, Running]),
                cancel: false,
            },
            Fixture {
                id: "weekly-1",
                day: 5,
                tasks: TASKS,
                models: MODELS,
                variants: &[],
                cells: all(Pass, Some(0.03)),
                cancel: false,
            },
            Fixture {
                id: "variant-1",
                day: 6,
                tasks: &["a"],
                models: &["good"],
                variants: &["terse", "verbose"],
                cells: vec![
                    ("a", "good", "terse", vec![Pass, Pass], None),
                    ("a", "good", "verbose", vec![Fail, Fail], None),
                ],
                cancel: false,
            },
        ]
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// Stores [`fixtures`] in the queue at `location`.
    fn fill(location: QueueLocation) {
        runtime().block_on(async {
            let db = Db::open(&location, 2).await.unwrap();
            store(&db, &fixtures()).await;
            db.close().await;
        });
    }

    /// A SQLite queue holding [`fixtures`].
    fn queue() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.db");
        fill(QueueLocation::Sqlite(path.clone()));
        (dir, path)
    }

    fn evals(queue: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> Output {
        Command::new(BIN)
            .args(args)
            .arg("--queue")
            .arg(queue)
            .output()
            .unwrap()
    }

    fn ok(out: &Output) -> (String, String) {
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
        (stdout, stderr)
    }

    fn bad(out: &Output) -> String {
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        stderr
    }

    fn close(a: &Value, b: f64) -> bool {
        a.as_f64().is_some_and(|a| (a - b).abs() < 1e-5)
    }

    #[test]
    fn sweeps_lists_newest_first_with_shape_state_pass_rate_and_cost() {
        let (_dir, q) = queue();
        let (stdout, _) = ok(&evals(&q, &["sweeps"]));
        let lines: Vec<&str> = stdout.lines().collect();
        let order: Vec<&str> = lines[1..]
            .iter()
            .map(|l| l.split_whitespace().next().unwrap())
            .collect();
        assert_eq!(
            order,
            [
                "variant-1",
                "weekly-1",
                "nightly-4",
                "nightly-3",
                "nightly-2",
                "nightly-1"
            ],
            "{stdout}"
        );
        let line = |id: &str| *lines.iter().find(|l| l.starts_with(id)).unwrap();
        let n2 = line("nightly-2 ");
        for part in [
            "2026-12-02 02:00",
            "3 tasks × 2 models × 1 variant × 2 trials",
            "finished 12/12, 1 infra error",
            "bad 16.7%, good 100.0%",
            "$0.1200 (+6 unknown)",
        ] {
            assert!(n2.contains(part), "{part:?} not in {n2}\n{stdout}");
        }
        assert!(
            line("nightly-3 ").contains("cancelled 12/12, 11 cancelled"),
            "{stdout}"
        );
        assert!(
            line("nightly-4 ").contains("running 1/12, 1 running, 10 queued"),
            "{stdout}"
        );
        assert!(
            line("nightly-1 ").contains("bad 0.0%, good 83.3%"),
            "{stdout}"
        );
        let v1 = line("variant-1 ");
        assert!(
            v1.contains("1 task × 1 model × 2 variants × 2 trials"),
            "{stdout}"
        );
        assert!(
            v1.contains("good [terse] 100.0%, good [verbose] 0.0%"),
            "{stdout}"
        );

        let (stdout, _) = ok(&evals(&q, &["sweeps", "--json", "--limit", "5"]));
        let v: Value = serde_json::from_str(&stdout).unwrap();
        let sweeps = v["sweeps"].as_array().unwrap();
        assert_eq!(sweeps.len(), 5);
        let n2 = &sweeps[4];
        assert_eq!(n2["id"], "nightly-2", "the newest five: {stdout}");
        assert_eq!(n2["state"], "finished");
        assert_eq!(n2["shape"]["tasks"], 3);
        assert_eq!(n2["trials"]["infra_error"], 1);
        assert!(close(&n2["cost_usd"], 0.12), "{n2}");
        assert_eq!(n2["cost_unknown_trials"], 6);
        let bad = &n2["pass_at_1"][0];
        assert_eq!(
            (&bad["model"], &bad["tasks"], &bad["graded_trials"]),
            (&json!("bad"), &json!(3), &json!(5))
        );
        assert!(close(&bad["value"], 1.0 / 6.0), "{bad}");
        assert_eq!(
            (&sweeps[2]["id"], &sweeps[2]["trials"]["running"]),
            (&json!("nightly-4"), &json!(1))
        );
    }

    #[test]
    fn trend_shows_each_sweep_oldest_first_with_its_interval() {
        let (_dir, q) = queue();
        let (stdout, _) = ok(&evals(&q, &["trend", "nightly-*", "--format", "json"]));
        let v: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(
            (&v["schema"], &v["metric"]),
            (&json!("anvil-trend/1"), &json!("pass@1"))
        );
        let sweeps: Vec<(&str, &str)> = v["sweeps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| (s["id"].as_str().unwrap(), s["state"].as_str().unwrap()))
            .collect();
        assert_eq!(
            sweeps,
            [
                ("nightly-1", "finished"),
                ("nightly-2", "finished"),
                ("nightly-3", "cancelled"),
                ("nightly-4", "partial"),
            ]
        );
        let point = |sweep: &str, model: &str| -> Value {
            v["points"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["sweep"] == sweep && p["model"] == model)
                .cloned()
                .unwrap_or(Value::Null)
        };
        // nightly-1 good: per task 1, 1/2, 1 — mean 5/6, sd 0.288675, se 0.166667,
        // t(2) = 4.302653: 5/6 ± 0.717109 = [0.116224, 1.550442], cut to 1.
        let p = point("nightly-1", "good");
        assert!(close(&p["value"], 5.0 / 6.0), "{p}");
        assert!(close(&p["ci"]["low"], 0.116_224), "{p}");
        assert!(close(&p["ci"]["high"], 1.0), "{p}");
        assert_eq!((&p["tasks"], &p["graded_trials"]), (&json!(3), &json!(6)));
        // nightly-2 bad: per task 1/2, 0/1 (the infra error is not graded), 0/2 — mean 1/6,
        // 1/6 ± 0.717109 = [-0.55, 0.883776], cut to 0.
        let p = point("nightly-2", "bad");
        assert!(close(&p["value"], 1.0 / 6.0), "{p}");
        assert!(
            close(&p["ci"]["low"], 0.0) && close(&p["ci"]["high"], 0.883_776),
            "{p}"
        );
        assert_eq!(p["graded_trials"], 5);
        // nightly-2 good: every task 2/2, no spread over tasks: the Wilson interval of the
        // pooled 6 of 6, [6 / (6 + z²), 1] = [0.609666, 1], never the point [1, 1].
        let p = point("nightly-2", "good");
        assert!(
            close(&p["value"], 1.0)
                && close(&p["ci"]["low"], 0.609_666)
                && close(&p["ci"]["high"], 1.0),
            "{p}"
        );
        // One task graded: a value, no interval.
        let p = point("nightly-3", "good");
        assert_eq!(
            (&p["value"], &p["ci"], &p["state"]),
            (&json!(1.0), &Value::Null, &json!("cancelled"))
        );
        assert_eq!(
            point("nightly-3", "bad"),
            Value::Null,
            "nothing graded, no point"
        );
        assert_eq!(point("nightly-4", "good")["state"], "partial");

        let (table, _) = ok(&evals(&q, &["trend", "nightly-*"]));
        assert!(
            table.contains("cancelled") && table.contains("partial (11 unfinished)"),
            "{table}"
        );
        assert!(table.contains("83.3% [11.6, 100.0]"), "{table}");

        // pass@2: every task has two graded trials but nightly-2 bad's b.
        let (stdout, _) = ok(&evals(
            &q,
            &[
                "trend",
                "nightly-2",
                "--metric",
                "pass@2",
                "--format",
                "json",
            ],
        ));
        let v: Value = serde_json::from_str(&stdout).unwrap();
        let bad = v["points"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["model"] == "bad")
            .unwrap()
            .clone();
        assert_eq!(bad["tasks"], 2, "{bad}");
        assert!(
            close(&bad["value"], 0.5),
            "a: pass@2 of 1/2 is 1, c: 0 — {bad}"
        );

        // Variants are arms of their own.
        let (stdout, _) = ok(&evals(&q, &["trend", "variant-*", "--format", "json"]));
        let v: Value = serde_json::from_str(&stdout).unwrap();
        let arms: Vec<(String, f64)> = v["points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["variant"].as_str().unwrap().to_string(),
                    p["value"].as_f64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            arms,
            [("terse".to_string(), 1.0), ("verbose".to_string(), 0.0)]
        );
    }

    #[test]
    fn trend_writes_a_self_contained_html_chart() {
        let (dir, q) = queue();
        let page = dir.path().join("trend.html");
        let out = Command::new(BIN)
            .args(["trend", "*", "--format", "html", "-o"])
            .arg(&page)
            .arg("--queue")
            .arg(&q)
            .output()
            .unwrap();
        ok(&out);
        let html = std::fs::read_to_string(&page).unwrap();
        assert!(
            html.starts_with("<!doctype html>") && !html.contains("<script"),
            "{html}"
        );
        assert_eq!(html.matches("<svg").count(), 2, "one chart per model");
        assert!(
            html.contains(
                "<title>nightly-2 — bad (2026-12-02 02:00 UTC, finished): pass@1 16.7% [0.0, 88.4]"
            ),
            "{html}"
        );
    }

    #[test]
    fn trend_refuses_a_pattern_matching_nothing_and_an_unknown_metric() {
        let (_dir, q) = queue();
        let err = bad(&evals(&q, &["trend", "monthly-*"]));
        assert!(
            err.contains("no sweep in") && err.contains("matches 'monthly-*'"),
            "{err}"
        );
        let err = bad(&evals(&q, &["trend", "nightly-*", "--metric", "accuracy"]));
        assert!(
            err.contains("--metric") && err.contains("\"accuracy\" is not a metric"),
            "{err}"
        );
        let err = bad(&evals(&q, &["trend", "nightly-[", "--format", "json"]));
        assert!(err.contains("not a glob"), "{err}");
        let missing = q.with_file_name("none.db");
        let err = bad(&evals(&missing, &["trend", "nightly-*"]));
        assert!(err.contains("there is no queue database"), "{err}");
        let err = bad(&evals(&missing, &["sweeps"]));
        assert!(err.contains("there is no queue database"), "{err}");
    }

    /// `report`'s JSON baseline comparison for `model`'s pass@1: (current, baseline).
    fn compared(report: &str, model: &str) -> (f64, f64) {
        let v: Value = serde_json::from_str(report).unwrap();
        let c = v["baseline"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["model"] == model && c["metric"] == "pass@1")
            .unwrap()
            .clone();
        (
            c["current"].as_f64().unwrap(),
            c["baseline"].as_f64().unwrap(),
        )
    }

    #[test]
    fn report_baseline_is_a_file_the_newest_finished_sweep_or_a_sweep_id() {
        let (dir, q) = queue();
        let json = ["--format", "json", "-k", "1"];
        // last:nightly-* from weekly-1: nightly-4 is running and nightly-3 cancelled, so
        // nightly-2.
        let mut args = vec![
            "report",
            "--sweep",
            "weekly-1",
            "--baseline",
            "last:nightly-*",
        ];
        args.extend(json);
        let (stdout, stderr) = ok(&evals(&q, &args));
        assert!(
            stderr.contains("baseline: sweep nightly-2 (started 2026-12-02 02:00 UTC)"),
            "{stderr}"
        );
        let (current, base) = compared(&stdout, "bad");
        assert!(
            (current - 0.0).abs() < 1e-9 && (base - 1.0 / 6.0).abs() < 1e-9,
            "{stdout}"
        );
        // Reporting nightly-2 itself, the newest other finished one is nightly-1.
        let mut args = vec![
            "report",
            "--sweep",
            "nightly-2",
            "--baseline",
            "last:nightly-*",
        ];
        args.extend(json);
        let (stdout, stderr) = ok(&evals(&q, &args));
        assert!(stderr.contains("baseline: sweep nightly-1"), "{stderr}");
        let (current, base) = compared(&stdout, "good");
        assert!(
            (current - 1.0).abs() < 1e-9 && (base - 5.0 / 6.0).abs() < 1e-9,
            "{stdout}"
        );
        // A sweep id.
        let mut args = vec!["report", "--sweep", "nightly-2", "--baseline", "nightly-1"];
        args.extend(json);
        let (by_id, stderr) = ok(&evals(&q, &args));
        assert!(!stderr.contains("baseline: sweep"), "{stderr}");
        assert_eq!(compared(&by_id, "good"), compared(&stdout, "good"));
        // A results file as current, a sweep of the queue as baseline (--queue without --sweep).
        let file = dir.path().join("nightly-2.jsonl");
        let out = Command::new(BIN)
            .args(["export", "--sweep", "nightly-2", "--queue"])
            .arg(&q)
            .arg("-o")
            .arg(&file)
            .output()
            .unwrap();
        ok(&out);
        let mut args = vec![file.to_str().unwrap(), "--baseline", "nightly-1"];
        args.splice(0..0, ["report"]);
        args.extend(json);
        let (from_file, _) = ok(&evals(&q, &args));
        assert_eq!(compared(&from_file, "good"), compared(&stdout, "good"));
        // The same file against last:nightly-*: never the sweep its records come from (a sweep
        // compared with itself can never regress), so nightly-1.
        let mut args = vec![file.to_str().unwrap(), "--baseline", "last:nightly-*"];
        args.splice(0..0, ["report"]);
        args.extend(json);
        let (from_file, stderr) = ok(&evals(&q, &args));
        assert!(stderr.contains("baseline: sweep nightly-1"), "{stderr}");
        assert_eq!(compared(&from_file, "good"), compared(&stdout, "good"));
        // An existing file wins over a sweep of the same name.
        let named = dir.path().join("nightly-1");
        std::fs::copy(&file, &named).unwrap();
        let mut args = vec![
            "report",
            "--sweep",
            "nightly-1",
            "--baseline",
            named.to_str().unwrap(),
        ];
        args.extend(json);
        let (stdout, _) = ok(&evals(&q, &args));
        assert_eq!(compared(&stdout, "good"), (5.0 / 6.0, 1.0));
    }

    #[test]
    fn a_baseline_that_resolves_to_nothing_says_what_was_tried() {
        let (_dir, q) = queue();
        let err = bad(&evals(
            &q,
            &["report", "--sweep", "nightly-2", "--baseline", "nightly-9"],
        ));
        assert!(
            err.contains(
                "--baseline 'nightly-9' is not a file, and there is no sweep 'nightly-9' in"
            ),
            "{err}"
        );
        let err = bad(&evals(
            &q,
            &[
                "report",
                "--sweep",
                "nightly-2",
                "--baseline",
                "last:monthly-*",
            ],
        ));
        assert!(
            err.contains("no sweep in") && err.contains("matches 'monthly-*'"),
            "{err}"
        );
        // weekly-1 is the only weekly sweep: it cannot be its own baseline.
        let err = bad(&evals(
            &q,
            &[
                "report",
                "--sweep",
                "weekly-1",
                "--baseline",
                "last:weekly-*",
            ],
        ));
        assert!(
            err.contains("none of the 1 sweeps")
                && err.contains("other than the sweeps being reported (weekly-1)"),
            "{err}"
        );
        let missing = q.with_file_name("none.db");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("r.jsonl");
        std::fs::write(&file, "").unwrap();
        let err = bad(&evals(
            &missing,
            &["report", file.to_str().unwrap(), "--baseline", "nightly-1"],
        ));
        assert!(
            err.contains("is not a file, and there is no queue") && err.contains("none.db"),
            "{err}"
        );
    }

    /// The same queries on Postgres (its SUM and COUNT types, its NOT EXISTS), through the
    /// binary: a fresh database on the server of `ANVIL_TEST_POSTGRES`, dropped afterwards.
    #[test]
    fn sweeps_trend_and_last_baseline_on_postgres() {
        use anvil_test_support::databases;
        let url = runtime().block_on(databases::fresh_postgres("history"));
        let checks = std::panic::catch_unwind(|| {
            fill(QueueLocation::Postgres(url.clone()));
            let (stdout, _) = ok(&evals(&url, &["sweeps", "--json"]));
            let v: Value = serde_json::from_str(&stdout).unwrap();
            let n2 = v["sweeps"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["id"] == "nightly-2")
                .unwrap()
                .clone();
            assert!(close(&n2["pass_at_1"][0]["value"], 1.0 / 6.0), "{n2}");
            assert!(close(&n2["cost_usd"], 0.12), "{n2}");
            let (stdout, _) = ok(&evals(&url, &["trend", "nightly-*", "--format", "json"]));
            let v: Value = serde_json::from_str(&stdout).unwrap();
            assert_eq!(v["sweeps"].as_array().unwrap().len(), 4, "{v}");
            let good = &v["points"][1];
            assert_eq!(
                (&good["sweep"], &good["model"]),
                (&json!("nightly-1"), &json!("good"))
            );
            assert!(close(&good["value"], 5.0 / 6.0) && close(&good["ci"]["low"], 0.116_224));
            let args = [
                "report",
                "--sweep",
                "weekly-1",
                "--baseline",
                "last:nightly-*",
                "--format",
                "json",
                "-k",
                "1",
            ];
            let (stdout, stderr) = ok(&evals(&url, &args));
            assert!(stderr.contains("baseline: sweep nightly-2"), "{stderr}");
            assert!((compared(&stdout, "bad").1 - 1.0 / 6.0).abs() < 1e-9);
            let err = bad(&evals(&url, &["trend", "monthly-*"]));
            assert!(err.contains("matches 'monthly-*'"), "{err}");
        });
        runtime().block_on(databases::drop_postgres(&url));
        if let Err(panic) = checks {
            std::panic::resume_unwind(panic);
        }
    }
}

/// The readers (`status`, `export`, `report --sweep`, `report --baseline SWEEP`, `sweeps`,
/// `trend`, `cancel`) never make a queue, and what `status` says about a queue's trials and
/// workers.
mod readers {
    use std::path::{Path, PathBuf};
    use std::process::{Command, Output};

    use anvil_runner::jobs::queue::{Db, QueueLocation, SweepRow, TrialKey, WorkerRow, now_ms};

    use super::BIN;

    /// `anvil-evals ARGS` with nothing of this machine's: home, config and data under `home`.
    fn evals(home: &Path, args: &[&str]) -> Output {
        Command::new(BIN)
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", home)
            .env("XDG_CONFIG_HOME", home.join("cfg"))
            .env("XDG_DATA_HOME", home.join("data"))
            .env("TMPDIR", home)
            .output()
            .unwrap()
    }

    /// Every path under `dir`, sorted.
    fn tree(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                out.extend(tree(&path));
            }
            out.push(path);
        }
        out.sort();
        out
    }

    const READERS: [&[&str]; 12] = [
        &["status"],
        &["status", "--sweep", "s1"],
        &["export", "--sweep", "s1"],
        &["export", "--sweep", "s1", "-o", "out.jsonl"],
        &["report", "--sweep", "s1"],
        &["report", "--sweep", "s1", "--format", "json"],
        &["report", "results.jsonl", "--baseline", "s1"],
        &["report", "results.jsonl", "--baseline", "last:nightly-*"],
        &["sweeps"],
        &["sweeps", "--json"],
        &["trend", "nightly-*"],
        &["cancel", "--sweep", "s1"],
    ];

    /// Each reader, on a queue that does not exist (the default one in an empty data dir, and
    /// a `--queue` path in a missing directory), on an empty file and on a directory: exit 2
    /// (bad input, per the README), a message naming the path, said once, and nothing created.
    #[test]
    fn read_only_commands_never_create_a_queue_or_a_directory() {
        let home = tempfile::tempdir().unwrap();
        let h = home.path();
        std::fs::write(h.join("results.jsonl"), "").unwrap();
        std::fs::write(h.join("empty.db"), "").unwrap();
        std::fs::create_dir(h.join("dir.db")).unwrap();
        let before = tree(h);
        let default = h.join("data/anvil/anvil.db");
        let cases: [(Option<PathBuf>, PathBuf, &str); 4] = [
            (None, default.clone(), "there is no queue database at"),
            (
                Some(h.join("missing/q.db")),
                h.join("missing/q.db"),
                "there is no queue database at",
            ),
            (
                Some(h.join("empty.db")),
                h.join("empty.db"),
                "is not a queue database: the file is empty",
            ),
            (Some(h.join("dir.db")), h.join("dir.db"), "it is not a file"),
        ];
        for (queue, shown, expected) in &cases {
            for args in READERS {
                let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
                for a in args.iter_mut() {
                    if a == "results.jsonl" || a == "out.jsonl" {
                        *a = h.join(a.as_str()).display().to_string();
                    }
                }
                if let Some(q) = queue {
                    args.extend(["--queue".to_string(), q.display().to_string()]);
                }
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let out = evals(h, &args);
                let stderr = String::from_utf8_lossy(&out.stderr);
                assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
                let path = shown.display().to_string();
                assert!(
                    stderr.contains(&path) && stderr.contains(expected),
                    "{args:?}: {stderr}"
                );
                assert_eq!(stderr.matches(&path).count(), 1, "said once: {stderr}");
                assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
                assert!(
                    out.stdout.is_empty(),
                    "{args:?}: nothing printed before the error"
                );
                assert_eq!(tree(h), before, "{args:?} created something");
                assert_eq!(std::fs::metadata(h.join("empty.db")).unwrap().len(), 0);
            }
        }
    }

    /// `run --detach` enqueues a sweep that no worker takes; after `cancel`, `status` counts
    /// no job waiting and every trial cancelled.
    #[test]
    fn after_cancel_no_job_waits_and_status_agrees_with_the_trials() {
        let home = tempfile::tempdir().unwrap();
        let h = home.path();
        let q = h.join("q.db").display().to_string();
        let tasks = super::tasks_dir().join("py-*").display().to_string();
        let out = evals(
            h,
            &[
                "run", "--tasks", &tasks, "--models", "sonnet", "--trials", "2", "--sweep", "s1",
                "--detach", "--queue", &q,
            ],
        );
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let status = |args: &[&str]| {
            let mut all = vec!["status", "--queue", &q];
            all.extend(args);
            let out = evals(h, &all);
            assert_eq!(out.status.code(), Some(0), "{out:?}");
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let trials = 2 * std::fs::read_dir(super::tasks_dir())
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .starts_with("py-")
            })
            .count();
        let before = status(&[]);
        assert!(
            before.contains(&format!("jobs waiting: {trials}\n")),
            "{before}"
        );
        assert!(before.contains(&format!("{trials} queued")), "{before}");
        let out = evals(h, &["cancel", "--sweep", "s1", "--queue", &q]);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        for text in [status(&[]), status(&["--sweep", "s1"])] {
            assert!(text.contains("jobs waiting: 0\n"), "{text}");
            assert!(
                text.contains(&format!(
                    "0 queued, 0 retrying, 0 infra errors, {trials} cancelled"
                )),
                "{text}"
            );
            assert!(!text.contains("ETA"), "{text}");
        }
    }

    /// A worker silent past three missed heartbeats is labelled dead, and the trial it held
    /// waits for re-run instead of counting as running; a live worker's trial runs.
    #[test]
    fn status_labels_a_dead_worker_and_its_trial_waits_for_re_run() {
        let home = tempfile::tempdir().unwrap();
        let path = home.path().join("q.db");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let db = Db::open(&QueueLocation::Sqlite(path.clone()), 2)
                .await
                .unwrap();
            let now = now_ms();
            db.record_sweep(&SweepRow {
                id: "s1".into(),
                created_at_ms: now - 600_000,
                spec: "{}".into(),
                fingerprint: "f".into(),
                anvil_git_sha: "test".into(),
                cancelled: false,
            })
            .await
            .unwrap();
            let key = |trial| TrialKey {
                sweep: "s1".into(),
                task: "t".into(),
                model: "m".into(),
                variant: None,
                trial,
            };
            db.add_trials(&[key(0), key(1), key(2)]).await.unwrap();
            // ghost beat every 5 s and last beat 60 s ago; alive beats every 60 s.
            for (name, last, every) in [("ghost", now - 60_000, 5_000), ("alive", now, 60_000)] {
                db.register_worker(&WorkerRow {
                    name: name.into(),
                    host: "h".into(),
                    pid: 1,
                    started_at_ms: now - 120_000,
                    last_heartbeat_ms: last,
                    stopped: false,
                    heartbeat_ms: Some(every),
                    missed_heartbeats: Some(3),
                })
                .await
                .unwrap();
            }
            assert!(db.claim(&key(0), 1, "ghost").await.unwrap());
            assert!(db.claim(&key(1), 1, "alive").await.unwrap());
            db.close().await;
        });
        let out = evals(
            home.path(),
            &[
                "status",
                "--sweep",
                "s1",
                "--queue",
                &path.display().to_string(),
            ],
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        assert!(
            text.contains("3 trials: 0 done (0 passed), 1 running, 1 waiting for re-run"),
            "{text}"
        );
        assert!(
            text.contains("ghost (host h, pid 1): dead: silent past 3 missed heartbeats of 5s"),
            "{text}"
        );
        assert!(text.contains("alive (host h, pid 1): alive"), "{text}");
        let rerun = text
            .split("waiting for re-run (a live worker")
            .nth(1)
            .unwrap_or("");
        assert!(
            rerun.contains("s1/t/m#0 attempt 1: its worker ghost is presumed dead"),
            "{text}"
        );
        let running = text.split("running:\n").nth(1).unwrap_or("");
        assert!(
            running.starts_with("  s1/t/m#1 attempt 1 on alive"),
            "{text}"
        );
    }
}

/// With no `-k`, `report` shows 1, 3 and 5 only up to the trials run per task (as `run` does).
#[test]
fn report_default_k_never_exceeds_the_trials_per_task() {
    let dir = tempfile::tempdir().unwrap();
    let two = dir.path().join("two.jsonl");
    let mut text = String::new();
    for task in ["a", "b"] {
        for trial in 0..2 {
            text.push_str(&record_line(task, "m", trial, trial == 0));
        }
    }
    std::fs::write(&two, text).unwrap();
    let k = |file: &Path| {
        let (code, out, err) =
            report_cli(&[file.as_os_str(), "--format".as_ref(), "json".as_ref()]);
        assert_eq!(code, Some(0), "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["k"].clone()
    };
    assert_eq!(k(&two), serde_json::json!([1]));
    let five = dir.path().join("five.jsonl");
    write_results(&five, &[("m", &[5, 2])]);
    assert_eq!(k(&five), serde_json::json!([1, 3, 5]));
    let (code, table, err) = report_cli(&[two.as_os_str()]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        !table.contains("pass@3") && !table.contains("pass@5"),
        "{table}"
    );
}
