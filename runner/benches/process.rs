//! Whole-process cost of the `anvil` binary: median wall time and peak RSS of
//! - `anvil --version`;
//! - a headless two-request turn (a write_file call, then a final text) against a local server
//!   that answers instantly, in a fresh git repository.
//!
//! Peak RSS comes from `getrusage(RUSAGE_CHILDREN)`, the largest resident set of any child
//! waited for so far. So that one binary's number never mixes with another's, each binary's
//! RSS is measured in a child of this bench (the bench run again with `ANVIL_BENCH_RSS_OF`)
//! that runs only that binary's commands: `--version` first, then turns (whose repositories'
//! `git init` is much smaller than a turn).
//!
//! Run: `cargo bench -p anvil-runner`. With `ANVIL_BENCH_BASELINE=/path/to/an/older/anvil`
//! the turns of that binary are run too, alternating with this one's (each in its own fresh
//! repository), so a change is measured against its baseline under the same load.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anvil_llm::testing::anthropic_sse::{self, Usage};
use anvil_test_support::model_server::{Answer, ScriptedServer, WireFormat};
use nix::sys::resource::{UsageWho, getrusage};
use serde_json::json;

const ANVIL: &str = env!("CARGO_BIN_EXE_anvil");
const RUNS: usize = 30;

fn peak_rss_mib() -> f64 {
    getrusage(UsageWho::RUSAGE_CHILDREN)
        .map(|u| u.max_rss() as f64 / 1024.0)
        .unwrap_or(f64::NAN)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Alternates a write_file call and a final answer, so every turn is two requests.
fn instant2(n: &AtomicUsize) -> Answer {
    let i = n.fetch_add(1, Ordering::SeqCst);
    let usage = Usage {
        input: 10,
        output: 5,
    };
    let body = if i.is_multiple_of(2) {
        let input = json!({"file_path": "out.txt", "content": "hi\n"});
        anthropic_sse::tool_use(
            &format!("toolu_{i}"),
            "write_file",
            &input,
            "tool_use",
            usage,
        )
    } else {
        anthropic_sse::text("Wrote out.txt.", usage)
    };
    Answer::sse(body)
}

/// In a child of the bench (`ANVIL_BENCH_RSS_OF=BINARY`, `ANVIL_BENCH_RSS_HOME=HOME`): runs
/// `--version`, then turns, of BINARY alone, printing the peak RSS after each phase.
fn rss_child(binary: &str, home: &std::path::Path) {
    for _ in 0..5 {
        let ok = Command::new(binary)
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "{binary} --version failed");
    }
    println!("{:.1}", peak_rss_mib());
    for i in 0..5 {
        let repo = home.join(format!("rss-{}-{i}", std::process::id()));
        std::fs::create_dir_all(&repo).unwrap_or_else(|e| panic!("{e}"));
        let _ = Command::new("git")
            .args(["init", "-q"])
            .current_dir(&repo)
            .status();
        turn_of(binary, &repo, home);
    }
    println!("{:.1}", peak_rss_mib());
}

/// The peak RSS (MiB) of `binary`'s `--version` and of its turns, measured in a child.
fn rss_of(binary: &str, home: &std::path::Path) -> (String, String) {
    let out = Command::new(std::env::current_exe().unwrap_or_else(|e| panic!("{e}")))
        .env("ANVIL_BENCH_RSS_OF", binary)
        .env("ANVIL_BENCH_RSS_HOME", home)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        out.status.success(),
        "the RSS child failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut lines = text.lines().map(str::to_string);
    (
        lines.next().unwrap_or_default(),
        lines.next().unwrap_or_default(),
    )
}

fn main() {
    if let (Ok(binary), Ok(home)) = (
        std::env::var("ANVIL_BENCH_RSS_OF"),
        std::env::var("ANVIL_BENCH_RSS_HOME"),
    ) {
        rss_child(&binary, std::path::Path::new(&home));
        return;
    }
    // --version first: no other child has run yet, so the peak RSS is its own.
    let mut version = Vec::new();
    for _ in 0..RUNS {
        let t = Instant::now();
        let ok = Command::new(ANVIL)
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        version.push(t.elapsed());
        assert!(ok, "anvil --version failed");
    }
    let version_rss = peak_rss_mib();

    let rt = tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("{e}"));
    let n = AtomicUsize::new(0);
    let server = rt.block_on(ScriptedServer::answering(
        WireFormat::AnthropicMessages,
        move |_| instant2(&n),
    ));
    let home = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let cfg = home.path().join("cfg/anvil");
    std::fs::create_dir_all(&cfg).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(
        cfg.join("config.toml"),
        format!(
            "default_model = \"bench\"\n[providers.mock]\nkind = \"anthropic\"\nbase_url = \"{}\"\napi_key_env = \"MOCK_KEY\"\n[models.bench]\nprovider = \"mock\"\nmodel = \"m\"\n",
            server.uri()
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let baseline = std::env::var("ANVIL_BENCH_BASELINE").ok();
    let binaries: Vec<&str> = std::iter::once(ANVIL).chain(baseline.as_deref()).collect();
    let mut turns: Vec<Vec<Duration>> = vec![Vec::new(); binaries.len()];
    for i in 0..RUNS {
        for (b, binary) in binaries.iter().enumerate() {
            let repo = home.path().join(format!("repo{i}-{b}"));
            std::fs::create_dir_all(&repo).unwrap_or_else(|e| panic!("{e}"));
            let _ = Command::new("git")
                .args(["init", "-q"])
                .current_dir(&repo)
                .status();
            turns[b].push(turn_of(binary, &repo, home.path()));
        }
    }
    println!("process            median      peak RSS");
    println!(
        "anvil --version    {:>8.2?}    {version_rss:.1} MiB",
        median(version)
    );
    let (_, turn_rss) = rss_of(ANVIL, home.path());
    let mut turns = turns.into_iter();
    println!(
        "headless turn      {:>8.2?}    {turn_rss} MiB",
        median(turns.next().unwrap_or_default())
    );
    if let (Some(path), Some(turn)) = (&baseline, turns.next()) {
        let (version_rss, turn_rss) = rss_of(path, home.path());
        println!("baseline --version             {version_rss} MiB");
        println!(
            "baseline turn      {:>8.2?}    {turn_rss} MiB ({path})",
            median(turn)
        );
    }
}

/// One headless two-request turn of `binary` in `repo`: its wall time.
fn turn_of(binary: &str, repo: &std::path::Path, home: &std::path::Path) -> Duration {
    let t = Instant::now();
    let out = Command::new(binary)
        .args([
            "-p",
            "write hi to out.txt",
            "--output-format",
            "json",
            "--permission-mode",
            "accept-edits",
        ])
        .current_dir(repo)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("cfg"))
        .env("XDG_DATA_HOME", home.join("data"))
        .env("MOCK_KEY", "k")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let elapsed = t.elapsed();
    assert!(
        out.status.success(),
        "{binary}: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(repo.join("out.txt").exists());
    elapsed
}
