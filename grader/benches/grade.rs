//! Grading overhead per trial: `grade` of a solved small Python task (py-fix-median: copy,
//! tamper scan, protected files, the sandboxed protected runner, three tests), timed over many
//! runs, beside the floor no grader can go under — starting Python and importing unittest,
//! unsandboxed. Target: grading ≤ 30 ms for the small tasks.
//!
//! `cargo bench -p anvil-grader --bench grade`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use anvil_grader::tree::{CopyPolicy, copy};
use anvil_grader::{GradeOptions, Task, Verdict, grade};

const RUNS: usize = 40;

fn stats(mut v: Vec<Duration>) -> (Duration, Duration) {
    v.sort();
    (v[v.len() / 2], v[v.len() * 95 / 100])
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for name in ["py-fix-median", "py-implement-slugify"] {
        let task_dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../evals/tasks")
            .join(name);
        let task = Task::load(&task_dir).unwrap();
        let parent = tempfile::tempdir().unwrap();
        let ws = parent.path().join("workspace");
        copy(&task.repo(), &ws, &CopyPolicy::default()).unwrap();
        copy(&task.solution(), &ws, &CopyPolicy::default()).unwrap();
        let opts = GradeOptions::default();
        // One warm-up: the sandbox probe and the toolchain lookup happen once per process.
        assert_eq!(rt.block_on(grade(&task, &ws, &opts)).verdict, Verdict::Pass);
        let times: Vec<Duration> = (0..RUNS)
            .map(|_| {
                let started = Instant::now();
                let r = rt.block_on(grade(&task, &ws, &opts));
                assert_eq!(r.verdict, Verdict::Pass, "{r:?}");
                started.elapsed()
            })
            .collect();
        let (p50, p95) = stats(times);
        println!("grade {name:<22} p50 {p50:>8.2?}  p95 {p95:>8.2?}  ({RUNS} runs, sandboxed)");
    }
    let python = std::process::Command::new("python3")
        .args(["-I", "-c", "import sys; print(sys.executable)"])
        .output()
        .unwrap();
    let python = String::from_utf8_lossy(&python.stdout).trim().to_string();
    let floor: Vec<Duration> = (0..RUNS)
        .map(|_| {
            let started = Instant::now();
            let ok = std::process::Command::new(&python)
                .args(["-I", "-S", "-c", "import unittest"])
                .status()
                .unwrap();
            assert!(ok.success());
            started.elapsed()
        })
        .collect();
    let (p50, p95) = stats(floor);
    println!("floor: python3 -I -S -c 'import unittest'  p50 {p50:>8.2?}  p95 {p95:>8.2?}");
}
