//! Sandbox overhead: `bash -c true` through the process supervisor, plain and inside the
//! bubblewrap sandbox (WorkspaceWrite without network, seccomp filter included), p50 and p95
//! over 100 runs each. Target: at most +10 ms at p50.
//!
//! Also: the look for nested git repositories every writable command pays twice, over this
//! repository's own tree (`.gitignore`d build output skipped).
//!
//! Run: `cargo bench -p anvil-agent --bench sandbox`.

use std::time::{Duration, Instant};

use anvil_agent::process::{self, ProcessSpec};
use anvil_agent::sandbox::{Sandbox, SandboxPolicy};
use tokio_util::sync::CancellationToken;

const RUNS: usize = 100;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let ws = dir.path().canonicalize().unwrap_or_else(|e| panic!("{e}"));
    let path = std::env::var("PATH").unwrap_or_default();
    let spec = ProcessSpec::new("bash", &ws)
        .args(["-c", "true"])
        .env(vec![("PATH".into(), path)]);
    let sandbox = Sandbox::new(SandboxPolicy::WorkspaceWrite { network: false }, &ws);
    let measure = |sandboxed: bool| {
        let mut times = Vec::with_capacity(RUNS);
        for _ in 0..RUNS {
            let t = Instant::now();
            let (spec, guard) = if sandboxed {
                sandbox.wrap(spec.clone()).unwrap_or_else(|e| panic!("{e}"))
            } else {
                (spec.clone(), Default::default())
            };
            let out = rt
                .block_on(process::run(&spec, &CancellationToken::new()))
                .unwrap_or_else(|e| panic!("{e}"));
            drop(guard);
            times.push(t.elapsed());
            assert_eq!(out.termination, process::Termination::Exited(0));
        }
        times.sort();
        times
    };
    let plain = measure(false);
    let boxed = measure(true);
    println!("bash -c true      p50        p95");
    println!(
        "plain          {:>8.2?}  {:>8.2?}",
        percentile(&plain, 0.5),
        percentile(&plain, 0.95)
    );
    println!(
        "sandboxed      {:>8.2?}  {:>8.2?}",
        percentile(&boxed, 0.5),
        percentile(&boxed, 0.95)
    );
    println!(
        "overhead       {:>8.2?}  {:>8.2?}",
        percentile(&boxed, 0.5).saturating_sub(percentile(&plain, 0.5)),
        percentile(&boxed, 0.95).saturating_sub(percentile(&plain, 0.95))
    );
    let repo = std::env::var_os("ANVIL_BENCH_REPO")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".."));
    let mut walks: Vec<Duration> = (0..20)
        .map(|_| {
            let t = Instant::now();
            let _ = anvil_agent::sandbox::nested_git::find(&repo);
            t.elapsed()
        })
        .collect();
    walks.sort();
    println!(
        "nested-repo walk of this repository  p50 {:>8.2?}  p95 {:>8.2?}",
        percentile(&walks, 0.5),
        percentile(&walks, 0.95)
    );
}
