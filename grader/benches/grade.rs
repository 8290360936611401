//! Grading overhead per trial: `grade` of a solved small Python task (copy, tamper scan,
//! protected files, the sandboxed protected runner, the task's tests), timed over many runs,
//! beside the same tests run bare — `python3 -E -s -S -m unittest` on the solved workspace,
//! unsandboxed, which is what a check costs with no grader at all. The overhead is the
//! difference: what grading adds (the copy, the scans, the sandbox, the protected runner).
//! Target: overhead ≤ 30 ms p50 for the small tasks.
//!
//! `cargo bench -p anvil-grader --bench grade`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use anvil_grader::tree::{CopyPolicy, copy};
use anvil_grader::{GradeOptions, Task, Verdict, grade};

const RUNS: usize = 40;

/// Runs `f` `RUNS` times: the wall time of each run.
fn timed(mut f: impl FnMut()) -> Vec<Duration> {
    (0..RUNS)
        .map(|_| {
            let started = Instant::now();
            f();
            started.elapsed()
        })
        .collect()
}

fn stats(mut v: Vec<Duration>) -> (Duration, Duration) {
    v.sort();
    (v[v.len() / 2], v[v.len() * 95 / 100])
}

/// `tests/test_x.py::Class::method` → `tests.test_x.Class.method`, as `python -m unittest` names it.
fn unittest_name(id: &str) -> String {
    id.replacen(".py", "", 1)
        .replace("::", ".")
        .replace('/', ".")
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let python = std::process::Command::new("python3")
        .args(["-I", "-c", "import sys; print(sys.executable)"])
        .output()
        .unwrap();
    let python = String::from_utf8_lossy(&python.stdout).trim().to_string();
    for name in ["py-fix-median", "py-implement-slugify"] {
        let task_dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../evals/tasks")
            .join(name);
        let task = Task::load(&task_dir).unwrap();
        let parent = tempfile::tempdir().unwrap();
        let ws = parent.path().join("workspace");
        copy(&task.repo(), &ws, &CopyPolicy::default()).unwrap();
        copy(&task.solution(), &ws, &CopyPolicy::default()).unwrap();
        copy(&task.protected_files(), &ws, &CopyPolicy::default()).unwrap();
        let opts = GradeOptions::default();
        // One warm-up: the sandbox probe and the toolchain lookup happen once per process.
        let warm = rt.block_on(grade(&task, &ws, &opts));
        assert_eq!(warm.verdict, Verdict::Pass, "{warm:?}");
        let graded = timed(|| {
            let r = rt.block_on(grade(&task, &ws, &opts));
            assert_eq!(r.verdict, Verdict::Pass, "{r:?}");
        });
        let tests: Vec<String> = task
            .spec
            .check
            .tests
            .iter()
            .map(|t| unittest_name(t))
            .collect();
        let bare = timed(|| {
            let out = std::process::Command::new(&python)
                .args(["-E", "-s", "-S", "-B", "-m", "unittest"])
                .args(&tests)
                .current_dir(&ws)
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
        });
        let (g50, g95) = stats(graded);
        let (b50, b95) = stats(bare);
        println!("grade    {name:<22} p50 {g50:>8.2?}  p95 {g95:>8.2?}  ({RUNS} runs, sandboxed)");
        println!(
            "bare     {name:<22} p50 {b50:>8.2?}  p95 {b95:>8.2?}  (python3 -E -s -S -m unittest)"
        );
        println!(
            "overhead {name:<22} p50 {:>8.2?}  (target ≤ 30 ms; measure on an idle machine)",
            g50.saturating_sub(b50)
        );
    }
}
