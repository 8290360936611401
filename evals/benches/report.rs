//! `anvil-evals report` over 1,000,000 synthetic trial records (1,000 tasks × 4 models × 250
//! trials, with full digests and transcript paths, as a real sweep writes them): median wall
//! time and peak RSS of the whole process.
//!
//! Run: `cargo bench -p anvil-evals`.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::resource::{UsageWho, getrusage};

const BIN: &str = env!("CARGO_BIN_EXE_anvil-evals");
const RUNS: usize = 5;

fn main() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    // ANVIL_BENCH_RESULTS keeps the generated file (for profiling the reporter on it).
    let path = std::env::var_os("ANVIL_BENCH_RESULTS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| dir.path().join("results.jsonl"));
    let mut out =
        std::io::BufWriter::new(std::fs::File::create(&path).unwrap_or_else(|e| panic!("{e}")));
    let digest = "5f0c3a1e9b7d2c4e6a8f0b1d3c5e7a9f1b3d5c7e9a0b2c4d6e8f0a1b3c5d7e9f";
    let mut state: u64 = 42;
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        state >> 33
    };
    for task in 0..1000 {
        for model in ["sonnet", "haiku", "gpt", "local"] {
            let skill = (task * 7 + model.len() * 13) % 100;
            for trial in 0..250 {
                let r = next();
                let infra = r % 500 == 0;
                let pass = (r % 100) < skill as u64;
                writeln!(
                    out,
                    r#"{{"schema_version":2,"sweep":"nightly-2026-11-30","task":"task-{task:04}","model":"{model}","trial":{trial},"attempt":1,"pass":{},"outcome":{},"infra_error":{},"steps":{},"tokens":{{"input":{},"output":{},"cache_read":{},"cache_write":0}},"cost_usd":{},"accounting":"{}","duration_ms":{},"session_path":"/data/anvil/sweeps/nightly-2026-11-30/task-{task:04}/{model}/{trial}.jsonl","workspace_path":null,"digests":{{"task":"{digest}","repo":"{digest}","grader":"{digest}","dependencies":"{digest}","model_config":"{digest}"}},"anvil_git_sha":"0123456789abcdef0123456789abcdef01234567"}}"#,
                    if infra { "null".to_string() } else { pass.to_string() },
                    if infra { "null" } else { "\"done\"" },
                    if infra { "\"provider unreachable after 5 attempts\"" } else { "null" },
                    5 + r % 30,
                    1000 + r % 50_000,
                    100 + r % 3000,
                    r % 40_000,
                    if model == "local" { "null".to_string() } else { format!("{:.5}", (r % 1000) as f64 / 10_000.0) },
                    if model == "local" { "unknown" } else { "reported" },
                    10_000 + r % 600_000,
                )
                .unwrap_or_else(|e| panic!("{e}"));
            }
        }
    }
    out.flush().unwrap_or_else(|e| panic!("{e}"));
    drop(out);
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    let mut times = Vec::new();
    for _ in 0..RUNS {
        let t = Instant::now();
        let status = Command::new(BIN)
            .args(["report", "--format", "json", "-k", "1,3,5"])
            .arg(&path)
            .stdout(Stdio::null())
            .status()
            .unwrap_or_else(|e| panic!("{e}"));
        times.push(t.elapsed());
        assert!(status.success());
    }
    times.sort();
    let median: Duration = times[RUNS / 2];
    let rss = getrusage(UsageWho::RUSAGE_CHILDREN)
        .map(|u| u.max_rss() as f64 / 1024.0)
        .unwrap_or(f64::NAN);
    println!(
        "report over 1,000,000 records ({:.0} MiB of JSONL)",
        size as f64 / (1024.0 * 1024.0)
    );
    println!(
        "median wall time {median:.2?} (min {:.2?}, max {:.2?}), peak RSS {rss:.1} MiB",
        times[0],
        times[RUNS - 1]
    );
}
