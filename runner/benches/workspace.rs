//! Workspace preparation for a 10 MB, 1,000-file repository: copy + git init + commit.
//! Target: ≤ 50 ms. `cargo bench -p anvil-runner --bench workspace`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::OnceLock;

fn main() {
    divan::main();
}

/// 1,000 files of 10 KiB (10 MB) in 50 directories, text-like so git hashes real content.
fn repo() -> &'static Path {
    static REPO: OnceLock<tempfile::TempDir> = OnceLock::new();
    REPO.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..1000 {
            let sub = dir.path().join(format!("src/mod{:02}", i % 50));
            std::fs::create_dir_all(&sub).unwrap();
            let line = format!(
                "fn item_{i}() -> usize {{ {i} }} // filler text for a realistic source line\n"
            );
            let content = line.repeat(10 * 1024 / line.len() + 1);
            std::fs::write(sub.join(format!("file{i}.rs")), &content[..10 * 1024]).unwrap();
        }
        dir
    })
    .path()
}

/// Workspaces on the system temp dir's disk.
#[divan::bench(sample_count = 20)]
fn prepare_10mb_1000_files(bencher: divan::Bencher) {
    bench_under(bencher, tempfile::tempdir().unwrap());
}

/// Workspaces on tmpfs (`--workspaces /dev/shm/...`), where the disk's file-creation cost
/// does not apply.
#[divan::bench(sample_count = 20)]
fn prepare_10mb_1000_files_tmpfs(bencher: divan::Bencher) {
    let Ok(under) = tempfile::tempdir_in("/dev/shm") else {
        eprintln!("no /dev/shm here: tmpfs case skipped");
        return;
    };
    bench_under(bencher, under);
}

/// The floor on this disk: `cp -r` of the same tree, nothing else. Workspace preparation is
/// a copy plus a handful of small files, so it cannot beat this; the ratio to it is the cost
/// of everything else.
#[divan::bench(sample_count = 20)]
fn baseline_cp_r(bencher: divan::Bencher) {
    let src = repo();
    let under = tempfile::tempdir().unwrap();
    let mut n = 0;
    bencher.bench_local(|| {
        n += 1;
        let to = under.path().join(format!("copy{n}"));
        let ok = std::process::Command::new("cp")
            .arg("-r")
            .arg(src)
            .arg(&to)
            .status()
            .unwrap();
        assert!(ok.success());
        to
    });
}

fn bench_under(bencher: divan::Bencher, under: tempfile::TempDir) {
    let src = repo();
    let workspaces = anvil_runner::jobs::workspace::Workspaces::new(under.path());
    // The template is made once per repository content (first trial only); measured apart.
    let started = std::time::Instant::now();
    drop(workspaces.prepare(src, "bench", "warmup").unwrap());
    eprintln!("first workspace (template made): {:?}", started.elapsed());
    bencher.bench_local(|| {
        let ws = workspaces.prepare(src, "bench", "bench").unwrap();
        divan::black_box(ws.path());
        ws
    });
}
