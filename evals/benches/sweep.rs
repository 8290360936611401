//! A full 100-trial sweep (4 tasks × 25 trials, concurrency 1) against an instant mock model:
//! the harness overhead per trial — wall time per trial minus the check's own time (the model
//! answers at once, so model time is a few ms of loopback HTTP). Target ≤ 100 ms.
//!
//! `cargo bench -p anvil-evals --bench sweep` (needs `anvil` built beside `anvil-evals`:
//! `cargo build --release` first for release numbers).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use anvil_test_support::bins;
use anvil_test_support::sweep as support;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn main() {
    // Beside this bench, built and current: `cargo build --release` first for release numbers.
    let evals = bins::built("anvil-evals");
    bins::built("anvil");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let server = rt.block_on(support::model_server(Duration::ZERO));
    let home = tempfile::tempdir().unwrap();
    let cfg = home.path().join("cfg/anvil");
    std::fs::create_dir_all(&cfg).unwrap();
    std::fs::write(cfg.join("config.toml"), support::config(&server)).unwrap();
    let tasks = home.path().join("tasks");
    for t in ["b1", "b2", "b3", "b4"] {
        support::task(&tasks, t);
    }
    let started = Instant::now();
    let out = Command::new(&evals)
        .args(["run", "--tasks"])
        .arg(tasks.join("*"))
        .args([
            "--models",
            "good",
            "--trials",
            "25",
            "--concurrency",
            "1",
            "--sweep",
            "bench",
            "-k",
            "1",
        ])
        .arg("--queue")
        .arg(home.path().join("q.db"))
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path().join("cfg"))
        .env("XDG_DATA_HOME", home.path().join("data"))
        .env("TMPDIR", home.path())
        .env("MOCK_API_KEY", "sk-mock")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let wall = started.elapsed();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let export = Command::new(&evals)
        .args(["export", "--sweep", "bench", "--queue"])
        .arg(home.path().join("q.db"))
        .env("XDG_DATA_HOME", home.path().join("data"))
        .output()
        .unwrap();
    let records: Vec<serde_json::Value> = String::from_utf8_lossy(&export.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), 100);
    assert!(records.iter().all(|r| r["pass"] == true));
    let mean = |field: &str| {
        records
            .iter()
            .map(|r| r[field].as_u64().unwrap() as f64)
            .sum::<f64>()
            / records.len() as f64
    };
    let per_trial = wall.as_secs_f64() * 1000.0 / 100.0;
    let (agent, check, duration) = (mean("agent_ms"), mean("check_ms"), mean("duration_ms"));
    println!(
        "sweep/100 trials: wall {:.2} s, {per_trial:.1} ms per trial",
        wall.as_secs_f64()
    );
    println!(
        "  per trial: agent process {agent:.1} ms (instant model), check {check:.1} ms, trial total {duration:.1} ms"
    );
    println!(
        "  harness overhead per trial (wall − check): {:.1} ms",
        per_trial - check
    );
    println!(
        "  of which outside the agent process (wall − agent − check): {:.1} ms",
        per_trial - agent - check
    );
}
