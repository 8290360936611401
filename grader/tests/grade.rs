//! The grader against small tasks built in temp directories: task validation errors, protected
//! tests, timeouts, symlinks out of the workspace, and the sandbox (network off, writes
//! confined). The sandbox tests need bubblewrap (scripts/test.sh installs it).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::path::{Path, PathBuf};

use anvil_grader::{GradeOptions, SandboxChoice, Task, Verdict, grade, validate};

/// A Python task: `calc.add` must add; the visible test and a hidden one are protected.
fn python_task(root: &Path, check_extra: &str) -> PathBuf {
    let dir = root.join("py-add");
    let w = |rel: &str, body: &str| {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    };
    w(
        "task.toml",
        r#"
name = "py-add"
prompt = "Fix add in calc.py."
tags = ["python"]
max_steps = 10
timeout_secs = 60
permission_mode = "bypass"

[check]
script = "check.sh"
timeout_secs = 20
protected = ["tests/test_calc.py", "tests/test_hidden.py"]
"#,
    );
    w("repo/calc.py", "def add(a, b):\n    return a - b\n");
    w(
        "repo/tests/test_calc.py",
        "import unittest\nfrom calc import add\n\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 2), 4)\n",
    );
    w(
        "grader/files/tests/test_calc.py",
        "import unittest\nfrom calc import add\n\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 2), 4)\n",
    );
    w(
        "grader/files/tests/test_hidden.py",
        "import unittest\nfrom calc import add\n\nclass H(unittest.TestCase):\n    def test_negative(self):\n        self.assertEqual(add(-1, -2), -3)\n",
    );
    w(
        "grader/check.sh",
        &format!("set -e\n{check_extra}\npython3 -m unittest discover -s tests -q\n"),
    );
    w("solution/calc.py", "def add(a, b):\n    return a + b\n");
    dir
}

fn no_sandbox() -> GradeOptions {
    GradeOptions {
        sandbox: SandboxChoice::Off,
        keep_dir: false,
    }
}

fn sandbox() -> GradeOptions {
    GradeOptions {
        sandbox: SandboxChoice::Require,
        keep_dir: false,
    }
}

fn workspace_from(task: &Task, files: &[(&str, &str)]) -> tempfile::TempDir {
    let parent = tempfile::tempdir().unwrap();
    let ws = parent.path().join("workspace");
    std::fs::create_dir_all(&ws).unwrap();
    let status = std::process::Command::new("cp")
        .arg("-r")
        .arg(task.repo().join("."))
        .arg(&ws)
        .status()
        .unwrap();
    assert!(status.success());
    for (rel, body) in files {
        let p = ws.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    }
    parent
}

#[tokio::test]
async fn editing_or_deleting_the_visible_tests_cannot_make_a_broken_implementation_pass() {
    let root = tempfile::tempdir().unwrap();
    let task = Task::load(&python_task(root.path(), "")).unwrap();
    // The "agent" rewrote the visible test to pass and left add broken.
    let ws = workspace_from(
        &task,
        &[(
            "tests/test_calc.py",
            "import unittest\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertTrue(True)\n",
        )],
    );
    let r = grade(&task, &ws.path().join("workspace"), &no_sandbox()).await;
    assert_eq!(r.verdict, Verdict::Fail, "{r:?}");
    // Deleting the tests does not help either.
    let ws = workspace_from(&task, &[]);
    std::fs::remove_dir_all(ws.path().join("workspace/tests")).unwrap();
    let r = grade(&task, &ws.path().join("workspace"), &no_sandbox()).await;
    assert_eq!(r.verdict, Verdict::Fail, "{r:?}");
    // Fixing the code passes.
    let ws = workspace_from(&task, &[("calc.py", "def add(a, b):\n    return a + b\n")]);
    let r = grade(&task, &ws.path().join("workspace"), &no_sandbox()).await;
    assert_eq!(r.verdict, Verdict::Pass, "{r:?}");
    assert_eq!(r.digests.repo.len(), 64);
}

#[tokio::test]
async fn a_hanging_check_is_a_grader_error_not_a_fail() {
    let root = tempfile::tempdir().unwrap();
    let dir = python_task(root.path(), "sleep 100");
    let toml = std::fs::read_to_string(dir.join("task.toml"))
        .unwrap()
        .replace("timeout_secs = 20", "timeout_secs = 1");
    std::fs::write(dir.join("task.toml"), toml).unwrap();
    let task = Task::load(&dir).unwrap();
    let ws = workspace_from(&task, &[]);
    let started = std::time::Instant::now();
    let r = grade(&task, &ws.path().join("workspace"), &no_sandbox()).await;
    assert_eq!(r.verdict, Verdict::GraderError, "{r:?}");
    assert!(r.reason.contains("timeout"), "{}", r.reason);
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}

#[tokio::test]
async fn a_symlink_pointing_outside_cannot_make_the_grader_read_or_write_outside() {
    let root = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "TOP-SECRET-VALUE").unwrap();
    let dir = python_task(
        root.path(),
        "cat leak.txt || true\nmkdir -p outdir && echo pwned > outdir/pwned.txt || true",
    );
    let task = Task::load(&dir).unwrap();
    let ws = workspace_from(&task, &[("calc.py", "def add(a, b):\n    return a + b\n")]);
    let w = ws.path().join("workspace");
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), w.join("leak.txt")).unwrap();
    std::os::unix::fs::symlink(outside.path(), w.join("outdir")).unwrap();
    for opts in [no_sandbox(), sandbox()] {
        let r = grade(&task, &w, &opts).await;
        assert!(!r.output_tail.contains("TOP-SECRET-VALUE"), "{r:?}");
        assert!(!outside.path().join("pwned.txt").exists());
        assert_eq!(r.skipped_symlinks, ["leak.txt", "outdir"]);
        assert_eq!(r.verdict, Verdict::Pass, "{r:?}");
    }
}

#[tokio::test]
async fn in_the_sandbox_the_network_is_off_and_writes_stay_in_the_grading_directory() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let root = tempfile::tempdir().unwrap();
    let target = tempfile::tempdir().unwrap();
    let probe = format!(
        "python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)\" && echo NET-OPEN || echo NET-CLOSED\n\
         touch {} && echo WROTE-OUTSIDE || echo WRITE-REFUSED\n\
         touch \"$ANVIL_WORKSPACE/planted\" && echo WROTE-WORKSPACE || echo WORKSPACE-REFUSED",
        target.path().join("escape").display()
    );
    let task = Task::load(&python_task(root.path(), &probe)).unwrap();
    let ws = workspace_from(&task, &[("calc.py", "def add(a, b):\n    return a + b\n")]);
    let r = grade(&task, &ws.path().join("workspace"), &sandbox()).await;
    assert!(r.sandboxed);
    assert_eq!(r.verdict, Verdict::Pass, "{r:?}");
    for expected in ["NET-CLOSED", "WRITE-REFUSED", "WORKSPACE-REFUSED"] {
        assert!(
            r.output_tail.contains(expected),
            "{expected}: {}",
            r.output_tail
        );
    }
    assert!(!target.path().join("escape").exists());
    assert!(!ws.path().join("workspace/planted").exists());
    // Without the sandbox the same probe does reach out: the test can tell the difference.
    let r = grade(&task, &ws.path().join("workspace"), &no_sandbox()).await;
    assert!(r.output_tail.contains("NET-OPEN"), "{}", r.output_tail);
    let _ = std::fs::remove_file(target.path().join("escape"));
    let _ = std::fs::remove_file(ws.path().join("workspace/planted"));
}

#[tokio::test]
async fn validation_needs_a_failing_repo_and_a_passing_solution() {
    let root = tempfile::tempdir().unwrap();
    let task = Task::load(&python_task(root.path(), "")).unwrap();
    let v = validate(&task, &no_sandbox()).await.unwrap();
    assert!(v.ok, "{v:?}");
    // A solution that does not solve it.
    std::fs::write(
        task.solution().join("calc.py"),
        "def add(a, b):\n    return 4\n",
    )
    .unwrap();
    let v = validate(&task, &no_sandbox()).await.unwrap();
    assert!(!v.ok);
    assert!(
        v.problem
            .unwrap()
            .contains("fails with the reference solution")
    );
}

#[test]
fn task_loading_names_the_file_field_and_reason() {
    let root = tempfile::tempdir().unwrap();
    let dir = python_task(root.path(), "");
    let toml_path = dir.join("task.toml");
    let original = std::fs::read_to_string(&toml_path).unwrap();
    let load_with = |edit: &dyn Fn(&str) -> String| {
        std::fs::write(&toml_path, edit(&original)).unwrap();
        Task::load(&dir).unwrap_err().to_string()
    };
    let e = load_with(&|t| t.replace("script = \"check.sh\"", "script = \"missing.sh\""));
    assert!(
        e.contains("task.toml: check.script:") && e.contains("missing.sh does not exist"),
        "{e}"
    );
    let e = load_with(&|t| t.replace("\"tests/test_hidden.py\"", "\"../../etc/passwd\""));
    assert!(
        e.contains("check.protected") && e.contains("plain relative path"),
        "{e}"
    );
    let e = load_with(&|t| t.replace("name = \"py-add\"", "name = \"other\""));
    assert!(
        e.contains("name: 'other' must equal the directory name 'py-add'"),
        "{e}"
    );
    let e = load_with(&|t| t.replace("max_steps = 10", "max_steps = 10\nmax_stepz = 3"));
    assert!(e.contains("max_stepz"), "{e}");
    let e = load_with(&|t| t.replace("timeout_secs = 20", "timeout_secs = 9000"));
    assert!(e.contains("check.timeout_secs"), "{e}");
    // A protected file that is a symlink out of the task is refused too.
    std::fs::write(&toml_path, &original).unwrap();
    let hidden = dir.join("grader/files/tests/test_hidden.py");
    std::fs::remove_file(&hidden).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", &hidden).unwrap();
    let e = Task::load(&dir).unwrap_err().to_string();
    assert!(e.contains("outside the task directory"), "{e}");
}
